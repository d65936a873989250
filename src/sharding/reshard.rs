//! Resharding on the devices: a sharded value moves to another sharding
//! of the same mesh through one compiled program, an identity function
//! whose input and result carry the two shardings, so XLA's partitioner
//! inserts the collectives (all-gather, all-to-all, collective-permute)
//! and no block passes through the host (`jax.device_put` of a sharded
//! array does the same). Imports `function` (the program is an ordinary
//! sharded function, cached like any other).

use super::NamedSharding;
use crate::error::Result;
use crate::function::{Function, FunctionOptions};
use crate::tensor::Tensor;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// How many (from, to) pairs keep their program; past that the cache
/// starts over (each holds a compiled program per shape).
const MAX_PAIRS: usize = 64;

type Resharder = Function<(Tensor,), Tensor>;

static RESHARDERS: Mutex<Option<HashMap<(NamedSharding, NamedSharding), Resharder>>> =
    Mutex::new(None);

/// `x` (laid out on `from`) laid out on `to`, a sharding of the same mesh.
pub(crate) fn reshard(x: &Tensor, from: &NamedSharding, to: &NamedSharding) -> Result<Tensor> {
    let f = resharder(from, to);
    f.call((x.clone(),))
}

fn resharder(from: &NamedSharding, to: &NamedSharding) -> Resharder {
    let mut cache = RESHARDERS.lock().unwrap_or_else(|e| e.into_inner());
    let cache = cache.get_or_insert_with(HashMap::new);
    if cache.len() >= MAX_PAIRS {
        cache.clear();
    }
    cache
        .entry((from.clone(), to.clone()))
        .or_insert_with(|| {
            let target = Arc::new(to.clone());
            FunctionOptions::new()
                .name("reshard")
                .in_shardings(vec![Some(from.clone())])
                .out_shardings(vec![Some(to.clone())])
                .build(move |x: Tensor| x.with_sharding_constraint(&target))
        })
        .clone()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::{Mesh, PartitionSpec};

    /// Rows to columns on 4 devices: the values move through collectives
    /// XLA inserted in the compiled resharding program, not the host.
    #[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
    #[test]
    fn a_row_split_becomes_a_column_split_through_collectives() {
        let mesh = Mesh::new(&[("data", 4)]).unwrap();
        let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")])).unwrap();
        let cols = NamedSharding::new(&mesh, PartitionSpec::new([None, Some("data")])).unwrap();
        let values: Vec<f32> = (0..32).map(|i| i as f32).collect();
        let x = Tensor::from_vec(values.clone(), &[8, 4]).unwrap();
        let y = x.shard(&rows).unwrap().shard(&cols).unwrap();
        assert_eq!(y.sharding(), Some(cols.clone()));
        assert_eq!(y.to_vec::<f32>().unwrap(), values);
        let column: Vec<f32> = (0..8).map(|r| (r * 4 + 2) as f32).collect();
        assert_eq!(
            y.addressable_shards().unwrap()[2].to_vec::<f32>().unwrap(),
            column
        );
        let programs = resharder(&rows, &cols).concrete_functions()[0].sharded_executables();
        assert_eq!(programs.len(), 1);
        let optimized = programs[0].optimized().unwrap();
        let moved = ["all-to-all", "all-gather", "collective-permute"]
            .iter()
            .map(|op| optimized.count(op))
            .sum::<usize>();
        assert!(moved >= 1, "{:?}", optimized.opcodes);
    }
}
