//! Eager ops on sharded tensors: each runs as a one-op function
//! partitioned over its inputs' mesh, as JAX runs `x + 1` on a sharded
//! array, so the result comes back sharded the way XLA's propagation
//! lays it out. The functions are cached per op (with its attributes);
//! each compiles once per input types and shardings.
//!
//! Layer: function (registered into `tensor::hooks` by
//! [`sharded_tensor`](super::sharded::sharded_tensor), through which every
//! sharded tensor is made). Imports `function`, `ops`, `tensor` and
//! `error`.

use super::{Function, FunctionOptions};
use crate::error::Result;
use crate::ops::{Op, OpDef};
use crate::tensor::{Tensor, apply};
use std::collections::HashMap;
use std::sync::Mutex;

/// How many ops keep their function; past that the cache starts over.
const MAX_OPS: usize = 256;

type OneOp = Function<(Vec<Tensor>,), Vec<Tensor>>;

static ONE_OP_FUNCTIONS: Mutex<Option<HashMap<Op, OneOp>>> = Mutex::new(None);

/// Makes `run` the executor `tensor::apply` hands ops on sharded tensors
/// to; every sharded tensor is made through `sharded_tensor`, which calls
/// this first.
pub(crate) fn register() {
    crate::tensor::hooks::register_sharded_execution(run);
}

/// Runs `op` on `inputs`, at least one of them sharded. A recording tape
/// notes the op itself (see `tensor::apply`), so the partitioned call
/// inside is kept off it.
pub(crate) fn run(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let f = one_op_function(op);
    let _paused = crate::tensor::hooks::pause_recording();
    let owned: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
    f.call((owned,))
}

// `Op` holds a custom gradient's mutex, but it hashes and compares that
// op by the identity of its `Arc`, never by the mutex's content.
#[allow(clippy::mutable_key_type)]
fn one_op_function(op: Op) -> OneOp {
    let mut cache = ONE_OP_FUNCTIONS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= MAX_OPS {
        cache.clear();
    }
    cache
        .entry(op.clone())
        .or_insert_with(|| {
            FunctionOptions::new().name(op.name()).build(
                move |inputs: Vec<Tensor>| -> Result<Vec<Tensor>> {
                    let refs: Vec<&Tensor> = inputs.iter().collect();
                    apply(op.clone(), &refs)
                },
            )
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::{Mesh, NamedSharding, PartitionSpec};

    /// Repeating an op on sharded tensors of one type and layout traces
    /// and compiles its function once.
    #[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
    #[test]
    fn an_op_compiles_once_per_type_and_layout() {
        let mesh = Mesh::new(&[("data", 4)]).unwrap();
        let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")])).unwrap();
        let x = Tensor::from_vec((0..8).map(|i| i as f32).collect(), &[8])
            .unwrap()
            .shard(&rows)
            .unwrap();
        for _ in 0..3 {
            let y = x.exp().unwrap();
            assert_eq!(y.sharding(), Some(rows.clone()));
        }
        let f = one_op_function(crate::ops::elementwise::Unary::Exp.into());
        assert_eq!((f.tracing_count(), f.compile_count()), (1, 1));
    }
}
