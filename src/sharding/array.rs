//! Laying tensors out on a mesh and reading them back: `Tensor::shard`,
//! `from_shards`, `from_process_local_data`, `addressable_shards`,
//! `unshard`. Cutting a value already on a device into blocks is done
//! with tensor ops on the devices (no trip through the host), and moving
//! a sharded value to another layout is a compiled program (`reshard`).
//!
//! Layer: sharding. Imports `mesh` (the descriptions and
//! `ShardedArray`), `function::sharded_tensor`, `tensor`, `trace`,
//! `runtime`, `dtype` and `error`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::function::sharded_tensor;
use crate::mesh::{NamedSharding, ShardedArray, extent_inside};
use crate::runtime::{Buffer, Device};
use crate::tensor::Tensor;
use std::sync::Arc;

/// Lays a value held on one device out on `sharding` without a trip
/// through the host (see [`from_replicas`]).
fn from_device(value: &Tensor, sharding: &NamedSharding) -> Result<ShardedArray> {
    from_replicas(std::slice::from_ref(value), sharding)
}

/// Lays out on `sharding` a value of which each of `replicas` is a
/// whole copy on one device, without a trip through the host. Each
/// block is cut from the copy on its own device when there is one, so
/// it moves nowhere, else from the first copy and then copied device
/// to device. A split pads a copy once to a whole number of blocks,
/// then cuts each block with a `dynamic_slice` whose start is an
/// operand, so one shape compiles two small programs however many
/// devices there are. Replicating is a copy per device.
fn from_replicas(replicas: &[Tensor], sharding: &NamedSharding) -> Result<ShardedArray> {
    let Some(first) = replicas.first() else {
        return Err(Error::Value(format!(
            "cannot lay a value out on {sharding}: this process holds no copy of it"
        )));
    };
    let dims = first.dims();
    sharding.check_rank(dims.len())?;
    let block = sharding.shard_dims(&dims);
    let devices = sharding.mesh().devices();
    let partitions = sharding.mesh().addressable_partitions();
    let origins: Vec<Vec<i64>> = partitions
        .iter()
        .map(|&p| sharding.shard_origin(p, &dims))
        .collect();
    let sources: Vec<Device> = replicas.iter().map(Tensor::device).collect::<Result<_>>()?;
    let mut padded: Vec<Option<Tensor>> = vec![None; replicas.len()];
    let shards = partitions
        .iter()
        .zip(&origins)
        .map(|(&p, origin)| {
            let device = devices[p];
            let source = sources.iter().position(|d| *d == device).unwrap_or(0);
            let whole = match &padded[source] {
                Some(t) => t.clone(),
                None => {
                    let t = padded_to_blocks(&replicas[source], &dims, &origins, &block)?;
                    padded[source] = Some(t.clone());
                    t
                }
            };
            let piece = match whole.dims() == block {
                true => whole,
                false => {
                    let starts: Vec<Tensor> = origin.iter().map(|&o| Tensor::scalar(o)).collect();
                    whole.dynamic_slice(&starts, &block)?
                }
            };
            block_on(piece, device)
        })
        .collect::<Result<_>>()?;
    Ok(ShardedArray::from_blocks(
        sharding,
        first.dtype(),
        dims,
        shards,
        partitions,
    ))
}

/// `piece` as a block committed to `device`. A fresh piece already there
/// is kept as it is; anything else is copied, so the block never shares a
/// buffer with another tensor (a program may donate a block).
fn block_on(piece: Tensor, device: Device) -> Result<Arc<Buffer>> {
    let mut buffer = piece.shared_buffer()?.clone();
    drop(piece);
    if buffer.device() == device {
        match Arc::try_unwrap(buffer) {
            Ok(only) => return Ok(Arc::new(only.with_committed(true))),
            Err(shared) => buffer = shared,
        }
    }
    Ok(Arc::new(
        buffer.copy_to_device(device)?.with_committed(true),
    ))
}

/// The box of a `global` array that the blocks of `partitions` cover,
/// as (low, high) corners: an error unless they cover exactly a box (each
/// dimension's tiles a contiguous run, every combination held).
fn local_box(
    sharding: &NamedSharding,
    partitions: &[usize],
    global: &[i64],
) -> Result<(Vec<i64>, Vec<i64>)> {
    let rank = global.len();
    let tiles: std::collections::HashSet<Vec<i64>> = partitions
        .iter()
        .map(|&p| sharding.tile_coordinates(p, rank))
        .collect();
    let mut per_dim: Vec<Vec<i64>> = vec![Vec::new(); rank];
    for t in &tiles {
        for d in 0..rank {
            if !per_dim[d].contains(&t[d]) {
                per_dim[d].push(t[d]);
            }
        }
    }
    per_dim.iter_mut().for_each(|v| v.sort_unstable());
    let contiguous = per_dim
        .iter()
        .all(|v| v.windows(2).all(|w| w[1] == w[0] + 1));
    let combinations: usize = per_dim.iter().map(Vec::len).product();
    if tiles.is_empty() || !contiguous || combinations != tiles.len() {
        return Err(Error::Value(format!(
            "from_process_local_data: the blocks of {sharding} on this process's devices do not \
             form one box of the array; give them one by one with from_shards"
        )));
    }
    let block = sharding.shard_dims(global);
    let low: Vec<i64> = (0..rank)
        .map(|d| (per_dim[d][0] * block[d]).min(global[d]))
        .collect();
    let high: Vec<i64> = (0..rank)
        .map(|d| ((per_dim[d][per_dim[d].len() - 1] + 1) * block[d]).min(global[d]))
        .collect();
    Ok((low, high))
}

/// `value` padded at the high end of each dimension so every block at
/// `origins` lies inside it (`dynamic_slice` would otherwise shift a
/// block that reaches past the end). The padding's content is
/// unspecified; it is zero here.
fn padded_to_blocks(
    value: &Tensor,
    dims: &[i64],
    origins: &[Vec<i64>],
    block: &[i64],
) -> Result<Tensor> {
    let high: Vec<i64> = (0..dims.len())
        .map(|d| {
            let end = origins.iter().map(|o| o[d] + block[d]).max().unwrap_or(0);
            (end - dims[d]).max(0)
        })
        .collect();
    if high.iter().all(|&h| h == 0) {
        return Ok(value.clone());
    }
    padded_by(value, &high)
}

/// `value` with `high` zeros after its end in each dimension.
fn padded_by(value: &Tensor, high: &[i64]) -> Result<Tensor> {
    let zero = if value.dtype() == DType::Bool {
        crate::ir::Scalar::Bool(false)
    } else {
        crate::ir::Scalar::I64(0)
    };
    let none = vec![0; high.len()];
    value.pad_general(&none, high, &none, zero)
}

/// Runs the device-side layout work of `shard` as eager computation, also
/// when called inside a trace (the value placed is eager either way) or
/// under a gradient tape (placing a value is not differentiated).
fn on_devices(f: impl FnOnce() -> Result<Tensor>) -> Result<Tensor> {
    let _paused = crate::tensor::hooks::pause_recording();
    crate::trace::init_scope(f)
}

/// **Devices and sharding**: splitting a tensor over a mesh, and reading
/// its shards.
impl Tensor {
    /// This tensor laid out on `sharding`: each mesh device gets its block
    /// (`jax.device_put(x, sharding)`). Blocks past the end of an uneven
    /// split are padded; reading the tensor back strips the padding.
    ///
    /// The blocks never pass through the host when the value is on a
    /// device already: a one-device value is cut where it lives and copied
    /// device to device, and a sharded one moves to another layout of its
    /// mesh through a compiled program whose collectives XLA inserts. A
    /// value on another mesh is first gathered whole onto each of its
    /// devices, then cut as a one-device value is, from the copy on the
    /// block's own device where there is one (so for a while every old
    /// device holds the whole value). A host value is cut on the host.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    /// let mesh = Mesh::new(&[("data", 4)])?;
    /// let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")]))?;
    /// let x = Tensor::from_vec((0..10).map(|i| i as f32).collect(), &[5, 2])?.shard(&rows)?;
    /// assert_eq!((x.dims(), x.is_sharded()), (vec![5, 2], true));
    /// let shards = x.addressable_shards()?;
    /// assert_eq!(shards[2].to_vec::<f32>()?, vec![8., 9.]); // rows 4..5
    /// assert_eq!(shards[3].dims(), vec![0, 2]); // nothing left for the last
    /// assert_eq!(x.to_vec::<f32>()?, (0..10).map(|i| i as f32).collect::<Vec<_>>());
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn shard(&self, sharding: &NamedSharding) -> Result<Tensor> {
        if self.symbol().is_some() {
            return Err(Error::Value(format!(
                "shard() puts a value onto {sharding}, but {} is symbolic (traced): inside a \
                 function, lay it out with with_sharding_constraint",
                self.tensor_type()
            )));
        }
        if let Some(array) = self.sharded() {
            if array.sharding() == sharding {
                return Ok(self.clone());
            }
            if array.sharding().mesh() == sharding.mesh() {
                return on_devices(|| super::reshard::reshard(self, array.sharding(), sharding));
            }
            // Another mesh: a whole copy on each of the old mesh's devices
            // (XLA's all-gather), then each new block cut from a copy.
            let replicated = NamedSharding::replicated(array.sharding().mesh());
            let whole = self.shard(&replicated)?;
            return on_devices(|| {
                let copies = whole.addressable_shards()?;
                let array = from_replicas(&copies, sharding)?;
                Ok(sharded_tensor(array))
            });
        }
        if self.eager_buffer().is_some() {
            return on_devices(|| {
                let array = from_device(self, sharding)?;
                Ok(sharded_tensor(array))
            });
        }
        let host = self.to_host_array()?;
        let array = ShardedArray::from_host(&host.bytes, host.dtype, &host.dims, sharding)?;
        Ok(sharded_tensor(array))
    }

    /// A tensor of shape `dims` laid out on `sharding`, assembled from one
    /// block per mesh device, in the mesh's device order
    /// (`jax.make_array_from_single_device_arrays`; in a multi-process
    /// run, one per device of this process): how a data loader
    /// that makes each device's part itself feeds a sharded function.
    /// Blocks have the shapes [`addressable_shards`](Tensor::addressable_shards)
    /// returns (without padding); each is moved to its device if it is
    /// not there. Blocks that replicate one part of the array are taken
    /// as given (reading the tensor back takes one of them).
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    /// let rows = NamedSharding::new(&Mesh::new(&[("data", 4)])?, PartitionSpec::new([Some("data")]))?;
    /// let blocks: Vec<Tensor> = (0..4).map(|p| Tensor::vector(&[p as f32; 2])).collect::<Result<_>>()?;
    /// let x = Tensor::from_shards(&[8], &rows, &blocks)?;
    /// assert_eq!(x.to_vec::<f32>()?, vec![0., 0., 1., 1., 2., 2., 3., 3.]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn from_shards(
        dims: &[i64],
        sharding: &NamedSharding,
        shards: &[Tensor],
    ) -> Result<Tensor> {
        sharding.check_rank(dims.len())?;
        let devices = sharding.mesh().devices();
        let partitions = sharding.mesh().addressable_partitions();
        if shards.len() != partitions.len() {
            return Err(Error::Value(format!(
                "from_shards: {sharding} needs one block per mesh device{} ({}), got {}",
                match partitions.len() == devices.len() {
                    true => "",
                    false => " of this process",
                },
                partitions.len(),
                shards.len()
            )));
        }
        let Some(first) = shards.first() else {
            return Err(Error::Value(format!(
                "from_shards: none of {sharding}'s devices belongs to this process, so it has no \
                 block to give and the element type is unknown"
            )));
        };
        let dtype = first.dtype();
        crate::dtype::check_array_size(dtype, dims)?;
        let block = sharding.shard_dims(dims);
        let placed = partitions
            .iter()
            .zip(shards)
            .map(|(&p, shard)| {
                let device = &devices[p];
                let origin = sharding.shard_origin(p, dims);
                let inside = extent_inside(dims, &origin, &block);
                if shard.dtype() != dtype || shard.dims() != inside || shard.is_sharded() {
                    return Err(Error::Value(format!(
                        "from_shards: block {p} (for {device}) must be a one-device \
                         {dtype}{inside:?}, the part of {dtype}{dims:?} at {origin:?}; got {}{}",
                        shard.tensor_type(),
                        if shard.is_sharded() { " (sharded)" } else { "" },
                    )));
                }
                let padded = if inside == block {
                    shard.clone()
                } else {
                    let high: Vec<i64> = block.iter().zip(&inside).map(|(b, i)| b - i).collect();
                    on_devices(|| padded_by(shard, &high))?
                };
                let copy = padded.buffer()?.copy_to_device(*device)?;
                Ok(copy.with_committed(true))
            })
            .collect::<Result<Vec<Buffer>>>()?;
        let array = ShardedArray::from_shards(sharding.clone(), dtype, dims.to_vec(), placed)?;
        Ok(sharded_tensor(array))
    }

    /// A tensor of shape `global_dims` laid out on `sharding`, from the
    /// part of it this process's devices hold
    /// (`jax.make_array_from_process_local_data`): in a multi-process run
    /// each process passes only its own slice, the box of the array its
    /// devices' blocks cover (a data loader reads only its part of the
    /// batch). In a one-process run that box is the whole array, and this
    /// is [`shard`](Tensor::shard).
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    /// let rows = NamedSharding::new(&Mesh::new(&[("data", 4)])?, PartitionSpec::new([Some("data")]))?;
    /// let local = Tensor::from_vec((0..8).map(|i| i as f32).collect(), &[8])?;
    /// let x = Tensor::from_process_local_data(&rows, &local, &[8])?;
    /// assert_eq!(x.addressable_shards()?[1].to_vec::<f32>()?, vec![2., 3.]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn from_process_local_data(
        sharding: &NamedSharding,
        local: &Tensor,
        global_dims: &[i64],
    ) -> Result<Tensor> {
        if local.symbol().is_some() {
            return Err(Error::Value(format!(
                "from_process_local_data puts data onto {sharding}, but {} is symbolic \
                 (traced): make the array outside the function and pass it in",
                local.tensor_type()
            )));
        }
        sharding.check_rank(global_dims.len())?;
        crate::dtype::check_array_size(local.dtype(), global_dims)?;
        let partitions = sharding.mesh().addressable_partitions();
        let (low, high) = local_box(sharding, &partitions, global_dims)?;
        let want: Vec<i64> = low.iter().zip(&high).map(|(l, h)| h - l).collect();
        if local.dims() != want || local.is_sharded() {
            return Err(Error::Value(format!(
                "from_process_local_data: this process's devices hold the part of \
                 {}{global_dims:?} at {low:?}, so its data must be a one-device {}{want:?}; got \
                 {}{:?}{}",
                local.dtype(),
                local.dtype(),
                local.dtype(),
                local.dims(),
                if local.is_sharded() { " (sharded)" } else { "" },
            )));
        }
        let block = sharding.shard_dims(global_dims);
        let pieces = partitions
            .iter()
            .map(|&p| {
                let origin = sharding.shard_origin(p, global_dims);
                let size = extent_inside(global_dims, &origin, &block);
                // A block wholly past the end is empty; its start stays
                // inside the local data.
                let start: Vec<i64> = (0..block.len())
                    .map(|d| (origin[d] - low[d]).clamp(0, want[d] - size[d]))
                    .collect();
                on_devices(|| local.slice(&start, &size))
            })
            .collect::<Result<Vec<Tensor>>>()?;
        Tensor::from_shards(global_dims, sharding, &pieces)
    }

    /// The sharding of a sharded tensor; `None` for a tensor on one device.
    pub fn sharding(&self) -> Option<NamedSharding> {
        self.sharded().map(|a| a.sharding().clone())
    }

    /// Is this tensor split over a mesh?
    pub fn is_sharded(&self) -> bool {
        self.sharded().is_some()
    }

    /// Each mesh device's block as a tensor committed to that device,
    /// without padding (a block wholly past the end has a zero
    /// dimension), in mesh order. In a multi-process run, only this
    /// process's devices' blocks.
    pub fn addressable_shards(&self) -> Result<Vec<Tensor>> {
        let Some(array) = self.sharded() else {
            return Ok(vec![self.clone()]);
        };
        let block = array.sharding().shard_dims(array.dims());
        array
            .partitions()
            .iter()
            .zip(array.shards())
            .map(|(&p, shard)| {
                let origin = array.sharding().shard_origin(p, array.dims());
                let shard = Tensor::from_shared_buffer(shard.clone());
                let sizes = extent_inside(array.dims(), &origin, &block);
                if sizes == block {
                    return Ok(shard);
                }
                shard.slice(&vec![0; block.len()], &sizes)
            })
            .collect()
    }

    /// The whole value of a sharded tensor as a tensor on the default
    /// device; an unsharded tensor is returned as it is.
    pub fn unshard(&self) -> Result<Tensor> {
        let Some(array) = self.sharded() else {
            return Ok(self.clone());
        };
        Tensor::from_host_bytes(array.dtype(), array.dims(), &array.to_host_bytes()?)
    }
}
