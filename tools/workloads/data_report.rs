//! The DATA part of the benchmark report: W10's CNN training step fed by
//! an `xlafn::data` pipeline (`shuffle → batch → prefetch_to_device` from
//! host arrays) against the same step on batches already on the device,
//! timed side by side. The target: the fed step within 5% of the
//! pre-placed one, i.e. the pipeline's host work and uploads hidden
//! behind the compiled step.

use super::real_models::{Model, NpRandom, W10_B, Workload};
use super::{Check, side_by_side_us};
use xlafn::data::{Dataset, Placement};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

/// Examples in the host dataset: 16 batches of W10's size.
const EXAMPLES: i64 = 16 * W10_B;

/// W10-shaped images `[n, 28, 28, 1]` and labels `[n]` on the host.
fn host_examples() -> (HostArray, HostArray) {
    let mut rs = NpRandom::new(1010);
    let images = rs.rand(EXAMPLES * 28 * 28);
    let labels = rs.randint(10, EXAMPLES);
    (
        HostArray::from_vec(images, &[EXAMPLES, 28, 28, 1]),
        HostArray::from_vec(labels, &[EXAMPLES]),
    )
}

/// Times the fed and the pre-placed step; returns the JSON group.
pub fn data_workload(checks: &mut Vec<Check>) -> Result<String> {
    let model = Model::new(Workload::W10)?;
    let step = model.train_step()?;
    let (images, labels) = host_examples();
    let pipeline = Dataset::from_tensor_slices((images.clone(), labels.clone()))?
        .shuffle(EXAMPLES as usize, 0)
        .batch(W10_B as usize, true)
        .repeat(None)
        .prefetch_to_device(2, Placement::Default);
    let mut fed = pipeline.iter();
    // The same batches, uploaded before timing.
    let placed: Vec<(Tensor, Tensor)> = Dataset::from_tensor_slices((images, labels))?
        .batch(W10_B as usize, true)
        .prefetch_to_device(1, Placement::Default)
        .collect_epoch(0)?;
    let mut i = 0;
    let mut fed_step = || {
        let (x, y) = fed.next().expect("repeat(None) never ends").unwrap();
        step.call((&x, &y)).unwrap().block_until_ready().unwrap();
    };
    let mut placed_step = || {
        let (x, y) = &placed[i % placed.len()];
        i += 1;
        step.call((x, y)).unwrap().block_until_ready().unwrap();
    };
    let times = side_by_side_us(&mut [&mut fed_step, &mut placed_step]);
    let (step_ms, preplaced_ms) = (times[0] / 1e3, times[1] / 1e3);
    println!(
        "{:<5} {:<34} {:>12.3}  ms",
        "DATA", "W10 step fed by the pipeline", step_ms
    );
    println!(
        "{:<5} {:<34} {:>12.3}  ms",
        "DATA", "W10 step on pre-placed batches", preplaced_ms
    );
    checks.push(Check::at_most(
        "DATA",
        "fed step / pre-placed step".to_string(),
        step_ms / preplaced_ms,
        1.05,
    ));
    Ok(format!(
        "  \"DATA\": {{\"step_ms\": {step_ms:.3}, \"preplaced_ms\": {preplaced_ms:.3}}}"
    ))
}
