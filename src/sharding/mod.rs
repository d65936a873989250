//! Layer: sharding (above `function`, below `control`). What a user does
//! with sharded values: lays tensors out on a mesh and reads their blocks
//! back (`array`), moves them between layouts (`reshard`, a compiled
//! partitioned program), and maps a function over a mesh's blocks with
//! collectives between them (`shard_map`, `psum`, ...). The descriptions
//! themselves (`Mesh`, `PartitionSpec`, `NamedSharding`, `ShardedArray`)
//! are the `mesh` layer's, below the tensor knot, and are re-exported
//! here, where users find them. Imports `mesh`, `function` (sharded
//! functions), `ops::shard_map`, `tensor`, `trace`, `ir`, `runtime`,
//! `dtype` and `error`.
//!
//! The model is JAX's: a [`Mesh`] arranges devices in a grid whose axes
//! have names (`data`, `model`); a [`PartitionSpec`] says, per array
//! dimension, which mesh axes split it (none: replicated along it); a
//! [`NamedSharding`] is the pair. An op on sharded tensors runs as a
//! program partitioned by XLA over their mesh. Uneven blocks are padded
//! at the end (as XLA pads them); in a multi-process run each process
//! holds only its own devices' blocks
//! ([`Mesh::addressable_partitions`]).

mod array;
mod reshard;
mod shard_map;

pub use crate::mesh::{Mesh, NamedSharding, PartitionSpec, ShardedArray};
pub use shard_map::{
    AxisNames, all_gather, all_to_all, axis_index, axis_size, pmax, pmean, pmin, ppermute, psum,
    psum_scatter, shard_map,
};
