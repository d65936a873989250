//! Where `prefetch_to_device` puts each batch: the default device, one
//! named device, or split over a sharding's devices (data parallelism).

use crate::error::{Error, Result};
use crate::runtime::{Device, HostArray};
use crate::sharding::NamedSharding;
use crate::tensor::{Tensor, with_device};

/// Where uploaded examples go.
#[derive(Clone, Debug)]
pub enum Placement {
    /// The client's default device, uncommitted (ops on it may follow
    /// other operands, as for any new tensor).
    Default,
    /// This device, committed to it (as `with_device` makes values).
    Device(Device),
    /// Laid out on a sharding: its first axis is the batch, split over
    /// the devices that the sharding's first dimension names (and
    /// replicated over the rest). In a multi-process run each process
    /// passes only its own part of the global batch (a dataset
    /// [`shard`](super::Dataset::shard)ed by process), and the tensor is
    /// the global batch, as [`Tensor::from_process_local_data`] makes it.
    Sharded(NamedSharding),
}

impl Placement {
    /// Uploads one array.
    pub(crate) fn upload(&self, a: &HostArray) -> Result<Tensor> {
        super::example::check_array(a, "an array to upload")?;
        match self {
            Placement::Default => Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes),
            Placement::Device(d) => {
                with_device(*d, || Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes))
            }
            Placement::Sharded(sharding) => upload_sharded(sharding, a),
        }
    }
}

/// This process's part of a batch, placed as the global batch on
/// `sharding`.
fn upload_sharded(sharding: &NamedSharding, local: &HostArray) -> Result<Tensor> {
    if local.dims.is_empty() {
        return Err(Error::Value(format!(
            "data: a scalar {} cannot be split over {sharding}; batch the examples first",
            local.dtype
        )));
    }
    let mut global = local.dims.clone();
    global[0] *= processes_along_batch(sharding, local.dims.len()) as i64;
    let tensor = Tensor::from_host_bytes(local.dtype, &local.dims, &local.bytes)?;
    Tensor::from_process_local_data(sharding, &tensor, &global)
}

/// Into how many process-local parts the sharding cuts the batch axis:
/// its tiles along axis 0 over the tiles this process's devices hold.
fn processes_along_batch(sharding: &NamedSharding, rank: usize) -> usize {
    let total = sharding.tiles(0);
    let mut local: Vec<i64> = sharding
        .mesh()
        .addressable_partitions()
        .iter()
        .map(|&p| sharding.tile_coordinates(p, rank)[0])
        .collect();
    local.sort_unstable();
    local.dedup();
    (total / local.len().max(1)).max(1)
}

impl<T: super::Example> super::Dataset<T> {
    /// Uploads each example to `placement` on a thread of its own, up to
    /// `depth` examples ahead of the consumer (capped as
    /// [`prefetch`](super::Dataset::prefetch) caps it): everything before it
    /// (reading, mapping, batching) and the host-to-device copy overlap
    /// the compiled step that consumes the batches.
    pub fn prefetch_to_device(
        &self,
        depth: usize,
        placement: Placement,
    ) -> super::Dataset<T::OnDevice> {
        let inner = self.clone();
        let placement = std::sync::Arc::new(placement);
        let uploaded = super::Dataset::from_pass_fn(self.cardinality(), move |pass| {
            let placement = placement.clone();
            Box::new(
                inner
                    .iter_pass(pass)
                    .map(move |x| x.and_then(|x| super::example::upload(x, &placement))),
            )
        });
        uploaded.prefetch(depth)
    }
}
