//! Data-parallel training over the CPU plugin's 4 devices: the batch is
//! split over a mesh's `data` axis, the weights and Adam's state are
//! replicated, and XLA's SPMD partitioner inserts the all-reduce that
//! sums the per-device gradients. The same model trained on one device
//! gives the same losses and weights (to 1e-5).
//! `cargo run --release --example data_parallel`

#[path = "common/data_parallel.rs"]
mod data_parallel;
#[path = "common/logging.rs"]
mod logging;

use xlafn::prelude::*;
use xlafn::sharding::Mesh;

const STEPS: usize = 40;

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    let mesh = Mesh::new(&[("data", 4)])?;
    println!("mesh: {:?} over {:?}", mesh.axes(), mesh.devices());
    let data = data_parallel::batches(4, 128)?;
    let single = data_parallel::trainer(0, None)?;
    let parallel = data_parallel::trainer(0, Some(&mesh))?;

    let t = std::time::Instant::now();
    let one = data_parallel::train(&single, &data, STEPS)?;
    let one_ms = t.elapsed().as_secs_f64() * 1e3;
    let t = std::time::Instant::now();
    let split = data_parallel::split_batches(&data, &mesh)?;
    let four = data_parallel::train(&parallel, &split, STEPS)?;
    let four_ms = t.elapsed().as_secs_f64() * 1e3;
    for i in (0..STEPS).step_by(8).chain([STEPS - 1]) {
        println!(
            "step {i:2}: loss {:.5} on 1 device, {:.5} on 4",
            one[i], four[i]
        );
    }
    println!(
        "{STEPS} steps: {one_ms:.0} ms on 1 device, {four_ms:.0} ms on 4 (first calls compile)"
    );

    let mut worst = 0f32;
    for (a, b) in one.iter().zip(&four) {
        worst = worst.max((a - b).abs());
    }
    let (w1, w4) = (
        data_parallel::weights(&single.model)?,
        data_parallel::weights(&parallel.model)?,
    );
    for (a, b) in w1.iter().flatten().zip(w4.iter().flatten()) {
        worst = worst.max((a - b).abs());
    }
    println!("largest difference in losses and weights: {worst:.2e}");
    assert!(
        worst < 1e-5,
        "data-parallel training drifted from one device"
    );

    let kernel = parallel.model.hidden.kernel.try_read()?;
    if let Some(sharding) = kernel.sharding() {
        println!("the trained kernel is laid out as {sharding}");
    }
    let program = &parallel.step.concrete_functions()[0].sharded_executables()[0];
    let optimized = program.optimized()?;
    println!(
        "the compiled step has {} all-reduce(s) XLA inserted",
        optimized.count("all-reduce")
    );
    Ok(())
}
