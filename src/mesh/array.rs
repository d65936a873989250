//! The blocks of a sharded value: [`ShardedArray`], what a sharded
//! `Tensor` holds, and the host-side block arithmetic (cutting a dense
//! array into padded blocks and back). Building one from values already
//! on devices is `sharding`'s, which computes with tensors.
//!
//! Layer: mesh. Imports `runtime` (buffers, devices), `dtype` and `error`.

use super::NamedSharding;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::{Buffer, Client};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the first sharded array is made: until then no variable can
/// hold one, and function calls skip looking (a lock per variable).
static ANY_MADE: AtomicBool = AtomicBool::new(false);

/// Has this process ever made a sharded array?
pub(crate) fn any_sharded_arrays() -> bool {
    ANY_MADE.load(Ordering::Relaxed)
}

/// A global array split over a mesh: device `p` of the mesh holds the
/// block at `sharding.shard_origin(p, dims)` of shape
/// `sharding.shard_dims(dims)`; blocks reaching past the array's end are
/// padded, and what the padding holds is unspecified.
///
/// A process holds the blocks of its own devices only, the mesh's
/// [`addressable_partitions`](super::Mesh::addressable_partitions): all of
/// them, unless the mesh spans the processes of a multi-process run,
/// where each process holds its part (JAX's arrays that are not fully
/// addressable).
pub struct ShardedArray {
    sharding: NamedSharding,
    dtype: DType,
    dims: Vec<i64>,
    /// The blocks of `partitions`, in the same order.
    shards: Vec<Arc<Buffer>>,
    partitions: Vec<usize>,
}

impl std::fmt::Debug for ShardedArray {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "ShardedArray({}{:?}, {})",
            self.dtype, self.dims, self.sharding
        )
    }
}

impl ShardedArray {
    /// Puts host bytes (dense, row-major) onto `sharding`.
    pub(crate) fn from_host(
        bytes: &[u8],
        dtype: DType,
        dims: &[i64],
        sharding: &NamedSharding,
    ) -> Result<ShardedArray> {
        sharding.check_rank(dims.len())?;
        let client = Client::default_client()?;
        let block = sharding.shard_dims(dims);
        let element = dtype.size_in_bytes()?;
        let devices = sharding.mesh().devices();
        let partitions = sharding.mesh().addressable_partitions();
        let shards = partitions
            .iter()
            .map(|&p| {
                let origin = sharding.shard_origin(p, dims);
                let bytes = extract_block(bytes, dims, &origin, &block, element);
                Buffer::from_bytes(&client, devices[p], dtype, &bytes, &block)
                    .map(|b| Arc::new(b.with_committed(true)))
            })
            .collect::<Result<_>>()?;
        ANY_MADE.store(true, Ordering::Relaxed);
        Ok(ShardedArray {
            sharding: sharding.clone(),
            dtype,
            dims: dims.to_vec(),
            shards,
            partitions,
        })
    }

    /// Wraps blocks already on their devices (committed, each one's own
    /// buffer): those of `partitions`, in the same order.
    pub(crate) fn from_blocks(
        sharding: &NamedSharding,
        dtype: DType,
        dims: Vec<i64>,
        shards: Vec<Arc<Buffer>>,
        partitions: Vec<usize>,
    ) -> ShardedArray {
        ANY_MADE.store(true, Ordering::Relaxed);
        ShardedArray {
            sharding: sharding.clone(),
            dtype,
            dims,
            shards,
            partitions,
        }
    }

    /// Wraps the blocks a partitioned program returned: one per
    /// addressable partition of the mesh, in mesh order.
    pub(crate) fn from_shards(
        sharding: NamedSharding,
        dtype: DType,
        dims: Vec<i64>,
        shards: Vec<Buffer>,
    ) -> Result<ShardedArray> {
        let block = sharding.shard_dims(&dims);
        let devices = sharding.mesh().devices();
        let partitions = sharding.mesh().addressable_partitions();
        if shards.len() != partitions.len()
            || shards.iter().zip(&partitions).any(|(s, &p)| {
                s.dims() != block.as_slice() || s.dtype() != dtype || s.device() != devices[p]
            })
        {
            return Err(Error::Value(format!(
                "the blocks of a {dtype}{dims:?} array on {sharding} must be {dtype}{block:?}, one \
                 per mesh device of this process in order"
            )));
        }
        ANY_MADE.store(true, Ordering::Relaxed);
        Ok(ShardedArray {
            sharding,
            dtype,
            dims,
            shards: shards
                .into_iter()
                .map(|b| Arc::new(b.with_committed(true)))
                .collect(),
            partitions,
        })
    }

    /// The sharding.
    pub fn sharding(&self) -> &NamedSharding {
        &self.sharding
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The global dimensions.
    pub fn dims(&self) -> &[i64] {
        &self.dims
    }

    /// This process's (padded) blocks, in mesh order: one per mesh
    /// device in a one-process run.
    pub fn shards(&self) -> &[Arc<Buffer>] {
        &self.shards
    }

    /// The mesh partitions whose blocks [`shards`](Self::shards) are.
    pub fn partitions(&self) -> &[usize] {
        &self.partitions
    }

    /// Does this process hold every block?
    pub fn is_fully_addressable(&self) -> bool {
        self.partitions.len() == self.sharding.mesh().size()
    }

    /// The whole array as dense row-major bytes, assembled from the
    /// blocks with their padding left out. In a multi-process run this
    /// needs this process's blocks to cover the array (a replicated
    /// array, say); otherwise it is an error that points to
    /// `addressable_shards`.
    pub fn to_host_bytes(&self) -> Result<Vec<u8>> {
        let rank = self.dims.len();
        if !self.sharding.covers(&self.partitions, rank) {
            return Err(Error::Value(format!(
                "a {}{:?} array on {} spans the devices of several processes, and this one \
                 holds {} of its {} blocks, not the whole value: read this process's part with \
                 addressable_shards(), or first gather the whole value onto every device with \
                 shard(&NamedSharding::replicated(mesh))",
                self.dtype,
                self.dims,
                self.sharding,
                self.partitions.len(),
                self.sharding.mesh().size()
            )));
        }
        let element = self.dtype.size_in_bytes()?;
        let total = self.dims.iter().product::<i64>() as usize * element;
        let mut out = vec![0u8; total];
        let block = self.sharding.shard_dims(&self.dims);
        for (&p, shard) in self.partitions.iter().zip(&self.shards) {
            let origin = self.sharding.shard_origin(p, &self.dims);
            insert_block(
                &mut out,
                &self.dims,
                &origin,
                &shard.to_bytes()?,
                &block,
                element,
            );
        }
        Ok(out)
    }
}

/// The part of a block at `origin` that lies inside a `global` array,
/// per dimension: the block's shape without its padding (0 for a block
/// wholly past the end).
pub(crate) fn extent_inside(global: &[i64], origin: &[i64], block: &[i64]) -> Vec<i64> {
    (0..global.len())
        .map(|d| (global[d] - origin[d]).clamp(0, block[d]))
        .collect()
}

/// Calls `row(offset_in_block, offset_in_global, len)` for each run of
/// the block's last dimension that lies inside the global array (in
/// elements). Dimensions of the block past the array's end are skipped.
fn for_each_row(
    global: &[i64],
    origin: &[i64],
    block: &[i64],
    mut row: impl FnMut(usize, usize, usize),
) {
    let rank = global.len();
    if rank == 0 {
        row(0, 0, 1);
        return;
    }
    let inside = extent_inside(global, origin, block);
    if inside.contains(&0) {
        return;
    }
    let mut index = vec![0i64; rank - 1];
    loop {
        let (mut in_block, mut in_global) = (0i64, 0i64);
        for d in 0..rank - 1 {
            in_block = in_block * block[d] + index[d];
            in_global = in_global * global[d] + origin[d] + index[d];
        }
        in_block *= block[rank - 1];
        in_global = in_global * global[rank - 1] + origin[rank - 1];
        row(
            in_block as usize,
            in_global as usize,
            inside[rank - 1] as usize,
        );
        // Odometer over the leading dimensions.
        let mut d = rank - 1;
        loop {
            if d == 0 {
                return;
            }
            d -= 1;
            index[d] += 1;
            if index[d] < inside[d] {
                break;
            }
            index[d] = 0;
        }
    }
}

/// The block of `global` at `origin` of shape `block`, zero-padded where
/// it reaches past the array.
fn extract_block(
    bytes: &[u8],
    global: &[i64],
    origin: &[i64],
    block: &[i64],
    element: usize,
) -> Vec<u8> {
    let mut out = vec![0u8; block.iter().product::<i64>() as usize * element];
    for_each_row(global, origin, block, |b, g, len| {
        out[b * element..(b + len) * element]
            .copy_from_slice(&bytes[g * element..(g + len) * element]);
    });
    out
}

/// Writes the part of a block inside the array back into `out`.
fn insert_block(
    out: &mut [u8],
    global: &[i64],
    origin: &[i64],
    block_bytes: &[u8],
    block: &[i64],
    element: usize,
) {
    for_each_row(global, origin, block, |b, g, len| {
        out[g * element..(g + len) * element]
            .copy_from_slice(&block_bytes[b * element..(b + len) * element]);
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_with_padding_in_every_dimension() {
        let global = [5i64, 3];
        let bytes: Vec<u8> = (0..15u8).collect();
        let block = [2i64, 2];
        let mut back = vec![255u8; 15];
        for r in 0..3 {
            for c in 0..2 {
                let origin = [r * 2, c * 2];
                let b = extract_block(&bytes, &global, &origin, &block, 1);
                assert_eq!(b.len(), 4);
                insert_block(&mut back, &global, &origin, &b, &block, 1);
            }
        }
        assert_eq!(back, bytes);
        // The corner block holds one value and three zeros of padding.
        assert_eq!(
            extract_block(&bytes, &global, &[4, 2], &block, 1),
            vec![14, 0, 0, 0]
        );
        // Scalars and blocks wholly outside.
        assert_eq!(extract_block(&[7], &[], &[], &[], 1), vec![7]);
        assert_eq!(
            extract_block(&bytes, &global, &[6, 0], &block, 1),
            vec![0; 4]
        );
    }
}
