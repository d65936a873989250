//! The model workloads of the benchmark report: W13, a GPT-style
//! step (AdamW, warmup-cosine schedule, global-norm clipping, dropout),
//! W14, a ResNet step (BatchNorm, SGD with momentum), and W15, a
//! bidirectional GRU step (Adam). Each training step is timed, its first
//! losses printed beside its peers' (`bench/peers_models.py`), and its
//! targets added to the report's checks.

use super::bigru_step::{W15, W15_PEER_LOSSES};
use super::gpt_step::{W13, W13_DROPOUT, W13_PEER_LOSSES};
use super::peers::{Figure, Peers};
use super::resnet_step::{W14, W14_PEER_LOSSES};
use super::{Check, side_by_side_us, write_program};
use xlafn::Tensor;

/// What one model workload measured: the step (ms), the first three
/// losses of the checked step, and the timed step's trace count.
struct Measured {
    step_ms: f64,
    losses: Vec<f64>,
    traces: usize,
}

/// The losses of the first three calls of `step`.
fn first_losses(mut step: impl FnMut() -> xlafn::Result<Tensor>) -> xlafn::Result<Vec<f64>> {
    (0..3)
        .map(|_| Ok(f64::from(step()?.item::<f32>()?)))
        .collect()
}

/// The median time of a call of `step` (ms), its result awaited.
fn step_ms(mut step: impl FnMut() -> xlafn::Result<Tensor>) -> f64 {
    side_by_side_us(&mut [&mut || {
        step().unwrap().block_until_ready().unwrap();
    }])[0]
        / 1e3
}

/// W13: the GPT's AdamW step (ms). The losses come from a step built with
/// dropout rate 0 (the peers' random bits differ from ours); the timed
/// step, from the same parameters, drops 10%.
fn w13(hlo: Option<&str>) -> xlafn::Result<Measured> {
    let check = W13::new(0.0)?;
    let check_step = check.train_step()?;
    let losses = first_losses(|| check_step.call((&check.inputs, &check.targets)))?;
    let w = W13::new(W13_DROPOUT)?;
    let step = w.train_step()?;
    write_program(hlo, "W13", step.lower((&w.inputs, &w.targets))?.as_text())?;
    let step_ms = step_ms(|| step.call((&w.inputs, &w.targets)));
    Ok(Measured {
        step_ms,
        losses,
        traces: step.tracing_count(),
    })
}

/// W14: the ResNet's SGD-momentum step (ms), with its first three losses.
fn w14(hlo: Option<&str>) -> xlafn::Result<Measured> {
    let w = W14::new()?;
    let step = w.train_step()?;
    let args = (&w.x, &w.labels);
    write_program(hlo, "W14", step.lower(args)?.as_text())?;
    let losses = first_losses(|| step.call(args))?;
    Ok(Measured {
        step_ms: step_ms(|| step.call(args)),
        losses,
        traces: step.tracing_count(),
    })
}

/// W15: the bidirectional GRU classifier's Adam step (ms), with its first
/// three losses.
fn w15(hlo: Option<&str>) -> xlafn::Result<Measured> {
    let w = W15::new()?;
    let step = w.train_step()?;
    let args = (&w.x, &w.mask, &w.labels);
    write_program(hlo, "W15", step.lower(args)?.as_text())?;
    let losses = first_losses(|| step.call(args))?;
    Ok(Measured {
        step_ms: step_ms(|| step.call(args)),
        losses,
        traces: step.tracing_count(),
    })
}

/// Prints `m` beside the peers' losses and JAX's step, adds the two
/// targets (step <= 1.0x JAX jit, losses within 1e-5 relative) and
/// returns the JSON entry.
fn report(
    work: &'static str,
    label: &str,
    m: &Measured,
    peer_losses: [f64; 3],
    bound: Figure,
    checks: &mut Vec<Check>,
) -> String {
    let worst = m
        .losses
        .iter()
        .zip(peer_losses)
        .map(|(l, p)| (l - p).abs() / p)
        .fold(0.0, f64::max);
    println!(
        "{work:<5} {label:<34} {:>12.3}  ms/step ({} trace)",
        m.step_ms, m.traces
    );
    println!(
        "{work:<5} {:<34} {:>12.6}  (peers {:.6}; first 3 steps differ by <= {worst:.1e} rel.)",
        "loss at the initial parameters", m.losses[0], peer_losses[0]
    );
    checks.push(Check::at_most(
        work,
        format!("step_ms <= 1.0 x JAX jit ({bound})"),
        m.step_ms,
        bound.value,
    ));
    checks.push(Check::at_most(
        work,
        "losses within 1e-5 rel. of the peers'".to_string(),
        worst,
        1e-5,
    ));
    format!("  \"{work}\": {{\"step_ms\": {:.4}}}", m.step_ms)
}

/// The model workloads `wants` names: measured, printed, checked against
/// the peers' losses and times; returns their JSON entries. With `hlo`,
/// each step's StableHLO is written there too.
pub fn model_workloads(
    peer: &Peers,
    wants: &dyn Fn(&str) -> bool,
    hlo: Option<&str>,
    checks: &mut Vec<Check>,
) -> xlafn::Result<String> {
    let mut json = Vec::new();
    if wants("W13") {
        json.push(report(
            "W13",
            "step_ms (GPT, AdamW, dropout)",
            &w13(hlo)?,
            W13_PEER_LOSSES,
            peer.w13_step_jax_jit_ms,
            checks,
        ));
    }
    if wants("W14") {
        json.push(report(
            "W14",
            "step_ms (ResNet, BatchNorm, SGD)",
            &w14(hlo)?,
            W14_PEER_LOSSES,
            peer.w14_step_jax_jit_ms,
            checks,
        ));
    }
    if wants("W15") {
        json.push(report(
            "W15",
            "step_ms (BiGRU, masks, Adam)",
            &w15(hlo)?,
            W15_PEER_LOSSES,
            peer.w15_step_jax_jit_ms,
            checks,
        ));
    }
    Ok(json.join(",\n"))
}
