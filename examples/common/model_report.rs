//! The model workloads of the benchmark report (W15 so far; W13 and W14
//! come with #29): each training step timed, its first losses printed
//! beside its peers' (`bench/peers_models.py`), and its target added to
//! the report's checks.

use super::peers::Peers;
use super::w15_gru::{W15, W15_PEER_LOSSES};
use super::{Check, side_by_side_us};

/// W15: the bidirectional GRU classifier's Adam step (ms), with its first
/// three losses.
fn w15() -> xlafn::Result<(f64, Vec<f64>, usize)> {
    let w = W15::new()?;
    let step = w.train_step()?;
    let args = (&w.x, &w.mask, &w.labels);
    let mut losses = Vec::new();
    for _ in 0..3 {
        losses.push(f64::from(step.call(args)?.item::<f32>()?));
    }
    let t = side_by_side_us(&mut [&mut || {
        step.call(args).unwrap().block_until_ready().unwrap();
    }]);
    Ok((t[0] / 1e3, losses, step.tracing_count()))
}

/// The model workloads `wants` names: measured, printed, checked against
/// the peers' losses and times; returns their JSON entries.
pub fn model_workloads(
    peer: &Peers,
    wants: &dyn Fn(&str) -> bool,
    checks: &mut Vec<Check>,
) -> xlafn::Result<String> {
    let mut json = Vec::new();
    if wants("W15") {
        let (step_ms, losses, traces) = w15()?;
        let worst = losses
            .iter()
            .zip(W15_PEER_LOSSES)
            .map(|(l, p)| (l - p).abs() / p)
            .fold(0.0, f64::max);
        println!(
            "{:<5} {:<34} {step_ms:>12.3}  ms/step ({traces} trace)",
            "W15", "step_ms (BiGRU, masks, Adam)"
        );
        println!(
            "{:<5} {:<34} {:>12.6}  (peers {:.6}; first 3 steps differ by <= {worst:.1e} rel.)",
            "W15", "loss at the initial parameters", losses[0], W15_PEER_LOSSES[0]
        );
        let bound = peer.w15_step_jax_jit_ms;
        checks.push(Check::at_most(
            "W15",
            format!("step_ms <= 1.0 x JAX jit ({bound})"),
            step_ms,
            bound.value,
        ));
        checks.push(Check::at_most(
            "W15",
            "losses within 1e-5 rel. of the peers'".to_string(),
            worst,
            1e-5,
        ));
        json.push(format!("  \"W15\": {{\"step_ms\": {step_ms:.4}}}"));
    }
    Ok(json.join(",\n"))
}
