//! The W9-W12 part of the benchmark report: times the real models of
//! `real_models.rs`, prints their figures and their losses beside the
//! peers', and adds their targets to the report's checks. W9 is also
//! timed written with the layer library (`transformer_with_layers.rs`, `W9_layers`),
//! its step beside the hand-written one's.

use super::peers::Peers;
use super::real_models::{
    ConvLayer, DataFn, Model, W12_FLOP, W12_PEER_CHECK, Workload, conv_layer, w11_scan_loss,
};
use super::transformer_with_layers::LayersModel;
use super::{Check, side_by_side_us, write_program};
use xlafn::ArraySpec;
use xlafn::prelude::*;

/// W9-W11 as measured: the step and (W9, W11) forward times in ms, the
/// first three losses from the initial parameters and what the step's
/// function did (traces, compiles, variables updated in place).
struct RealModel {
    step_ms: f64,
    forward_ms: Option<f64>,
    losses: Vec<f64>,
    traces: usize,
    compiles: usize,
    in_place: bool,
    /// Another form of the step, timed in turn with this one: W9 written
    /// with the layer library, W11 with `scan`.
    variant: Option<Variant>,
}

/// A second form of a workload's step, as measured.
struct Variant {
    /// Its name in the report (`W9_layers`).
    name: &'static str,
    /// What it is against the plain form ("layers / hand-written").
    versus: &'static str,
    ms: f64,
    losses: Vec<f64>,
}

/// The second form of `workload`'s step, if it has one: its name, what
/// it is against the plain form, and the step.
fn variant_step(workload: Workload) -> xlafn::Result<Option<(&'static str, &'static str, DataFn)>> {
    Ok(match workload {
        Workload::W9 => Some((
            "W9_layers",
            "layers / hand-written",
            LayersModel::new()?.train_step()?,
        )),
        Workload::W11 => Some((
            "W11_scan",
            "scan / for_range",
            Model::new(workload)?.train_step_of(w11_scan_loss)?,
        )),
        Workload::W10 => None,
    })
}

/// One of W9-W11: the training step (and the forward loss alone for W9 and
/// W11) timed side by side, inputs on the device, each call's loss awaited.
/// With `hlo`, writes the step's StableHLO to `hlo/xlafn_wN_step.mlir`
/// (and W9's with layers to `hlo/xlafn_transformer_with_layers_step.mlir`).
fn real_model(workload: Workload, hlo: Option<&str>) -> xlafn::Result<RealModel> {
    let model = Model::new(workload)?;
    let (a, b) = model.data.clone();
    let step = model.train_step()?;
    let forward = model.forward();
    let mut losses = Vec::new();
    for _ in 0..3 {
        losses.push(f64::from(step.call((&a, &b))?.item::<f32>()?));
    }
    let layers = match variant_step(workload)? {
        Some((name, versus, step)) => {
            let mut losses = Vec::new();
            for _ in 0..3 {
                losses.push(f64::from(step.call((&a, &b))?.item::<f32>()?));
            }
            Some((name, versus, step, losses))
        }
        None => None,
    };
    let address = model.params[0].device_address()?;
    let timed_forward = workload != Workload::W10;
    let mut step_call = || {
        step.call((&a, &b)).unwrap().block_until_ready().unwrap();
    };
    let mut forward_call = || {
        forward.call((&a, &b)).unwrap().block_until_ready().unwrap();
    };
    let t = match (&layers, timed_forward) {
        (Some((_, _, layers_step, _)), _) => {
            let mut layers_call = || {
                layers_step
                    .call((&a, &b))
                    .unwrap()
                    .block_until_ready()
                    .unwrap();
            };
            side_by_side_us(&mut [&mut step_call, &mut forward_call, &mut layers_call])
        }
        (None, true) => side_by_side_us(&mut [&mut step_call, &mut forward_call]),
        (None, false) => side_by_side_us(&mut [&mut step_call]),
    };
    if hlo.is_some() {
        let specs = [
            ArraySpec::new(a.dtype(), &a.dims()),
            ArraySpec::new(b.dtype(), &b.dims()),
        ];
        let mut programs = vec![(workload.name().to_string(), &step)];
        if let Some((variant, _, variant_step, _)) = &layers {
            programs.push((variant.to_string(), variant_step));
        }
        for (name, step) in programs {
            let text = step.get_concrete_function((&a, &b))?.stablehlo(&specs)?;
            write_program(hlo, &name, &text)?;
        }
    }
    Ok(RealModel {
        step_ms: t[0] / 1e3,
        forward_ms: t.get(1).map(|us| us / 1e3),
        variant: layers.map(|(name, versus, _, losses)| Variant {
            name,
            versus,
            ms: t[2] / 1e3,
            losses,
        }),
        losses,
        traces: step.tracing_count(),
        compiles: step.compile_count(),
        in_place: model.params[0].device_address()? == address,
    })
}

/// W12: the guide's conv layer on zeros `[1, 200, 200, 100]`, eagerly (the
/// convolution, then the bias add) and as a compiled function, side by
/// side; (eager ms, function ms, sum |out| of the function on the peers'
/// checking input).
fn w12() -> xlafn::Result<(f64, f64, f64)> {
    let layer = ConvLayer::new()?;
    let (x, k, b) = (&layer.zeros, &layer.kernel, &layer.bias);
    let f = function(|x: Tensor, k: Tensor, b: Tensor| conv_layer(&x, &k, &b));
    let check: f64 = f
        .call((&layer.x_check, k, b))?
        .to_vec::<f32>()?
        .iter()
        .map(|v| f64::from(v.abs()))
        .sum();
    let t = side_by_side_us(&mut [
        &mut || {
            let y = conv_layer(x, k, b).unwrap();
            y.block_until_ready().unwrap();
        },
        &mut || {
            let y = f.call((x, k, b)).unwrap();
            y.block_until_ready().unwrap();
        },
    ]);
    Ok((t[0] / 1e3, t[1] / 1e3, check))
}

/// W9-W12 (those `wants`): measures them, prints their figures and checks
/// against the peers' losses, and adds their targets to `checks`; returns
/// their JSON entries.
pub fn real_workloads(
    peer: &Peers,
    wants: &dyn Fn(&str) -> bool,
    hlo: Option<&str>,
    checks: &mut Vec<Check>,
) -> xlafn::Result<String> {
    let mut json = Vec::new();
    for workload in [Workload::W9, Workload::W10, Workload::W11] {
        let name = workload.name();
        // `--only W9_layers` runs W9 too: it is timed beside it.
        let wanted = wants(name) || (workload == Workload::W9 && wants("W9_LAYERS"));
        if !wanted {
            continue;
        }
        let m = real_model(workload, hlo)?;
        let peer_losses = workload.peer_check().losses;
        println!(
            "{name:<5} {:<34} {:>12.3}  ms/step ({} trace, {} compile, in place: {})",
            "step_ms (Adam step)", m.step_ms, m.traces, m.compiles, m.in_place
        );
        if let Some(fwd) = m.forward_ms {
            println!(
                "{name:<5} {:<34} {fwd:>12.3}  ms/call",
                "forward_ms (the loss alone)"
            );
        }
        let worst = m
            .losses
            .iter()
            .zip(peer_losses)
            .map(|(l, p)| (l - p).abs() / p)
            .fold(0.0, f64::max);
        println!(
            "{name:<5} {:<34} {:>12.6}  (peers {:.6}; first 3 steps differ by <= {worst:.1e} rel.)",
            "loss at the initial parameters", m.losses[0], peer_losses[0]
        );
        let (bound, who) = match workload {
            Workload::W9 => (peer.w9_step_jax_jit_ms, "JAX jit".to_string()),
            Workload::W10 => (peer.w10_step_best_ms.0, peer.w10_step_best_ms.1.to_string()),
            Workload::W11 => (peer.w11_step_jax_jit_ms, "JAX jit".to_string()),
        };
        checks.push(Check::at_most(
            name,
            format!("step_ms <= 1.0 x {who} ({bound})"),
            m.step_ms,
            bound.value,
        ));
        match m.forward_ms {
            Some(fwd) => {
                let bound = if workload == Workload::W9 {
                    peer.w9_fwd_jax_jit_ms
                } else {
                    peer.w11_fwd_jax_jit_ms
                };
                if workload == Workload::W9 {
                    checks.push(Check::at_most(
                        name,
                        format!("forward_ms <= 1.0 x JAX jit ({bound})"),
                        fwd,
                        bound.value,
                    ));
                } else {
                    println!(
                        "{name:<5} {:<34} {:>12.2}  (no target; JAX jit {:.2} ms)",
                        "forward_ms / JAX jit",
                        fwd / bound.value,
                        bound.value
                    );
                }
                json.push(format!(
                    "  \"{name}\": {{\"step_ms\": {:.4}, \"forward_ms\": {fwd:.4}}}",
                    m.step_ms
                ));
            }
            None => json.push(format!("  \"{name}\": {{\"step_ms\": {:.4}}}", m.step_ms)),
        }
        if let Some(v) = &m.variant {
            let worst = v
                .losses
                .iter()
                .zip(peer_losses)
                .map(|(l, p)| (l - p).abs() / p)
                .fold(0.0, f64::max);
            println!(
                "{:<9} {:<30} {:>12.3}  ms/step ({} {:.3}; losses differ from the peers' by \
                 <= {worst:.1e} rel.)",
                v.name,
                "step_ms (Adam step)",
                v.ms,
                v.versus,
                v.ms / m.step_ms
            );
            checks.push(Check::at_most(
                v.name,
                format!("step_ms <= 1.03 x {name}'s ({:.3})", m.step_ms),
                v.ms,
                1.03 * m.step_ms,
            ));
            json.push(format!("  \"{}\": {{\"step_ms\": {:.4}}}", v.name, v.ms));
        }
    }
    if wants("W12") {
        let (eager_ms, function_ms, check) = w12()?;
        let gflops = |ms: f64| W12_FLOP / (ms * 1e-3) / 1e9;
        println!(
            "{:<5} {:<34} {eager_ms:>12.3}  ms/call ({:.0} GFLOP/s)",
            "W12",
            "eager_ms (conv 3x3, 100->100)",
            gflops(eager_ms)
        );
        println!(
            "{:<5} {:<34} {function_ms:>12.3}  ms/call ({:.0} GFLOP/s)",
            "W12",
            "function_ms",
            gflops(function_ms)
        );
        println!(
            "{:<5} {:<34} {check:>12.1}  (peers {:.1})",
            "W12", "sum |out| on the checking input", W12_PEER_CHECK.0
        );
        let (best, who) = peer.w12_best_ms;
        checks.push(Check::at_most(
            "W12",
            format!(
                "function_ms <= 1.0 x TF jit_compile ({})",
                peer.w12_tf_jit_ms
            ),
            function_ms,
            peer.w12_tf_jit_ms.value,
        ));
        checks.push(Check::at_most(
            "W12",
            format!("function_ms <= 1.0 x best peer, {who} ({best}), stretch"),
            function_ms,
            best.value,
        ));
        checks.push(Check::at_most(
            "W12",
            format!("eager_ms <= 1.1 x function_ms ({function_ms:.2})"),
            eager_ms,
            1.1 * function_ms,
        ));
        json.push(format!(
            "  \"W12\": {{\"eager_ms\": {eager_ms:.4}, \"function_ms\": {function_ms:.4}}}"
        ));
    }
    Ok(json.join(",\n"))
}
