//! Beyond the guide: devices and sharding, as JAX spells them
//! (`jax.devices`, `jax.device_put`, `jax.jit` with shardings,
//! `shard_map`), on XLA's own SPMD partitioner. The CPU plugin has 4
//! devices, so this runs anywhere.

use std::sync::Arc;
use xlafn::prelude::*;
use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec, all_gather, psum, shard_map};

use super::section;

pub fn placing_values_on_devices() -> Result<()> {
    section("Devices: placement follows committed inputs");
    let devices = xlafn::devices()?;
    let names: Vec<String> = devices.iter().map(|d| d.to_string()).collect();
    println!("devices: {}", names.join(", "));
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[3])?.to_device(devices[2])?;
    let y = x.mul_scalar(2.0)?; // runs on cpu:2; the scalar follows x there
    println!("{y} on {} (committed: {})", y.device()?, y.is_committed());
    let z = xlafn::with_device(devices[1], || Tensor::vector(&[1f32, 1., 1.]))?;
    println!("x + z: {}", x.add(&z).unwrap_err());
    Ok(())
}

pub fn sharded_functions() -> Result<()> {
    section("Sharding: a function partitioned over a mesh");
    let mesh = Mesh::new(&[("data", 2), ("model", 2)])?;
    let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data"), None]))?;
    let cols = NamedSharding::new(&mesh, PartitionSpec::new([None, Some("model")]))?;
    let x = Tensor::from_vec((0..12).map(|i| i as f32).collect(), &[4, 3])?.shard(&rows)?;
    let w = Tensor::from_vec((0..6).map(|i| i as f32 / 10.0).collect(), &[3, 2])?.shard(&cols)?;
    println!("x: {:?} on {}", x.dims(), x.sharding().expect("sharded"));
    let blocks: Vec<Vec<f32>> = x
        .addressable_shards()?
        .iter()
        .map(|s| s.to_vec::<f32>())
        .collect::<Result<_>>()?;
    println!("x's blocks, one per device: {blocks:?}");
    let layer = function(|x: Tensor, w: Tensor| x.matmul(&w)?.tanh());
    let y = layer.call((&x, &w))?;
    println!(
        "tanh(x @ w) comes back on {}",
        y.sharding().expect("sharded")
    );
    println!("values: {:?}", y.to_vec::<f32>()?);
    Ok(())
}

pub fn per_device_code() -> Result<()> {
    section("shard_map: per-device code with explicit collectives");
    let mesh: Arc<Mesh> = Mesh::new(&[("data", 4)])?;
    let f = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let split = PartitionSpec::new([Some("data")]);
            let whole = PartitionSpec::replicated();
            shard_map(&mesh, &[split], &[whole.clone(), whole], &[&x], |local| {
                let total = psum(&local[0].reduce_sum(&[], false)?, "data")?;
                let gathered = all_gather(&local[0].mul_scalar(10.0)?, "data", 0)?;
                Ok(vec![total, gathered])
            })
        })
    };
    let out = f.call((Tensor::from_vec((1..=8).map(|i| i as f32).collect(), &[8])?,))?;
    println!("psum of the blocks' sums: {}", out[0]);
    println!("all_gather of 10 * block: {}", out[1]);
    Ok(())
}
