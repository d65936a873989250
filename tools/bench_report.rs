//! The benchmark report (see book/src/reference/benchmarks.md): runs every
//! workload that exists so far and writes one JSON object with fixed keys.
//!
//! `cargo run --release --example bench_report -- --json PATH [--peers FILE]`
//!
//! The targets are ratios of the peers' figures: the benchmarks page's reference
//! table, or what `peers.py` measured on this machine (`--peers FILE`, see
//! `workloads/peers.rs`).
//!
//! Each figure is the median of 7 timed blocks of at least 0.2 s, after
//! warm-up, with every call's result awaited; figures compared with each
//! other (W1, W2) are timed side by side, their blocks taking turns. W5 (first call) runs in
//! fresh processes: this binary re-invokes itself with `--w5-child w2`.
//! Every workload W1-W12 is measured.
//!
//! W9-W12 are the real models of `examples/common/real_models.rs` (a transformer
//! block, a CNN, an LSTM, the guide's conv layer), from the same
//! numpy-drawn parameters as the peers; the report prints their first
//! losses beside the peers'.
//!
//! Flags:
//! - `--model-peers FILE`: the model workloads' (W13, W14, W15) peer
//!   figures as `bench/peers_models.py` measured them on this machine
//!   (without it, the copies of `bench/peers_models.json`'s in
//!   `workloads/peers.rs`).
//! - `--only W9,W11,...`: run only the named workloads. W9-W15 are picked
//!   one by one; W1-W8 run as one group when any of them is named. `DP`
//!   is the data-parallel step on 1 and on 4 devices; `DATA` the W10 step
//!   fed by an `xlafn::data` pipeline beside the same step on pre-placed
//!   batches (`workloads/data_report.rs`). W9 includes
//!   `W9_layers`, its step written with the layer library.
//! - `--torch-peer FILE`: W16's PyTorch figures, as
//!   `scripts/peers_w16.py --json FILE` measured them on this machine
//!   (without it, W16's time is printed but not checked).
//! - `--markdown PATH`: also write the targets as one Markdown table, headed
//!   by the date, the machine and the command line that produced it (the
//!   README's benchmark table is this file).
//! - `--hlo DIR`: also write the StableHLO of the W9-W11 and W13-W15
//!   training steps (those that run) to `DIR/xlafn_w9_step.mlir` etc. (the
//!   program as lowered, before the in-place aliasing of the variables is
//!   added for the compile). `tools/two_by_two.rs` and
//!   `bench/two_by_two.py` time such files on either compiler.

// The report uses the trainer, not the weight read-back.
#[path = "workloads/bigru_step.rs"]
mod bigru_step;
#[path = "workloads/checks.rs"]
mod checks;
#[path = "workloads/crepe_infer.rs"]
mod crepe_infer;
#[allow(dead_code)]
#[path = "../examples/common/data_parallel.rs"]
mod data_parallel;
#[path = "workloads/data_report.rs"]
mod data_report;
#[path = "workloads/gpt_step.rs"]
mod gpt_step;
#[path = "../examples/common/mlp_step.rs"]
mod mlp_step;
#[path = "workloads/model_report.rs"]
mod model_report;
#[path = "workloads/peers.rs"]
mod peers;
#[path = "../examples/common/real_models.rs"]
mod real_models;
#[path = "workloads/real_report.rs"]
mod real_report;
#[path = "workloads/resnet_step.rs"]
mod resnet_step;
#[path = "workloads/transformer_with_layers.rs"]
mod transformer_with_layers;

use checks::{Check, markdown_table};
use std::fmt::Write as _;
use std::process::Command;
use std::time::{Duration, Instant};
use xlafn::ArraySpec;
use xlafn::prelude::*;
use xlafn::runtime::{Buffer, Client};

const BLOCKS: usize = 7;
const BLOCK_TIME: Duration = Duration::from_millis(200);
const W5_PROCESSES: usize = 3;
const W5_CHILD_FLAG: &str = "--w5-child";

/// W16, the CREPE-sized inference (`workloads/crepe_infer.rs`): checks
/// the output against PyTorch's, times the compiled forward pass, and,
/// with `torch_peer` (`scripts/peers_w16.py --json FILE` run on this
/// machine), checks it against PyTorch's time.
fn w16(torch_peer: Option<&str>, checks: &mut Vec<Check>) -> xlafn::Result<String> {
    let w = crepe_infer::W16::new()?;
    let model = std::sync::Arc::new(w.model);
    let forward = {
        let model = model.clone();
        function(move |x: Tensor| model.forward(&x))
    };
    let got = crepe_infer::w16_check(&forward.call((&w.frames,))?)?;
    let want = crepe_infer::W16_PEER_CHECK;
    let worst = got
        .iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs() / w.abs())
        .fold(0.0, f64::max);
    let ms = median_us(|| {
        forward
            .call((&w.frames,))
            .unwrap()
            .block_until_ready()
            .unwrap();
    }) / 1e3;
    println!(
        "W16   {:<34} {ms:>12.3}  ms/call",
        "forward_ms (CREPE full, 61 frames)"
    );
    println!(
        "W16   {:<34} {:>12.6}  (PyTorch {:.6}; differs by {worst:.1e} rel.)",
        "sum of the outputs", got[0], want[0]
    );
    checks.push(Check::at_most(
        "W16",
        "output within 1e-5 rel. of PyTorch's".to_string(),
        worst,
        1e-5,
    ));
    if let Some(path) = torch_peer {
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::Value(format!("cannot read {path}: {e}")))?;
        let peer: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::Value(format!("{path} is not the peer's JSON: {e}")))?;
        let best = ["eager_ms", "compiled_ms"]
            .iter()
            .filter_map(|k| peer.get(*k).and_then(serde_json::Value::as_f64))
            .fold(f64::INFINITY, f64::min);
        checks.push(Check::at_most(
            "W16",
            format!("forward_ms <= 1.0 x PyTorch's best ({best:.1} ms)"),
            ms,
            best,
        ));
    }
    Ok(format!("  \"W16\": {{\"forward_ms\": {ms:.4}}}"))
}

/// Median over timed blocks of the per-call time of `f`, in microseconds.
/// Each block runs `f` until at least 0.2 s have passed.
fn median_us(f: impl FnMut()) -> f64 {
    let mut f = f;
    side_by_side_us(&mut [&mut f])[0]
}

/// Writes a step's StableHLO `text` to `DIR/xlafn_<name>_step.mlir` when
/// `--hlo DIR` was given.
fn write_program(dir: Option<&str>, name: &str, text: &str) -> xlafn::Result<()> {
    let Some(dir) = dir else {
        return Ok(());
    };
    let path = format!("{dir}/xlafn_{}_step.mlir", name.to_lowercase());
    std::fs::write(&path, text).map_err(|e| Error::Value(format!("cannot write {path}: {e}")))
}

/// Per-call medians (µs) of several closures measured side by side: the
/// timed blocks take turns (round robin), so a change in machine load
/// during the run hits every figure alike and their ratios stay fair.
fn side_by_side_us(fs: &mut [&mut dyn FnMut()]) -> Vec<f64> {
    for f in fs.iter_mut() {
        let warm_until = Instant::now() + Duration::from_millis(100);
        f();
        while Instant::now() < warm_until {
            f();
        }
    }
    let mut per_call = vec![Vec::with_capacity(BLOCKS); fs.len()];
    for _ in 0..BLOCKS {
        for (f, times) in fs.iter_mut().zip(&mut per_call) {
            let start = Instant::now();
            let mut n = 0u64;
            while start.elapsed() < BLOCK_TIME {
                f();
                n += 1;
            }
            times.push(start.elapsed().as_secs_f64() * 1e6 / n as f64);
        }
    }
    per_call.into_iter().map(median).collect()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Deterministic host data: uniform floats in [0, 1) from a splitmix64
/// stream (fixed seeds, no device work, so W5 children time only W2).
fn uniform(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03;
    (0..n)
        .map(|_| {
            s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = s;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            (z >> 40) as f32 / (1u64 << 24) as f32
        })
        .collect()
}

/// Standard normal floats (Box-Muller over `uniform`).
fn normal(n: usize, seed: u64) -> Vec<f32> {
    let u = uniform(n + 1, seed);
    (0..n)
        .map(|i| {
            let (a, b) = (u[i].max(1e-7), u[i + 1]);
            (-2.0 * a.ln()).sqrt() * (std::f32::consts::TAU * b).cos()
        })
        .collect()
}

fn w2_input() -> xlafn::Result<Tensor> {
    Tensor::from_vec(normal(1000, 1), &[1000])
}

/// W2: 50 times `x = tanh(x) * 0.5 + 0.1`, a host loop (150 ops once
/// traced). The same body runs eagerly and as a function.
fn w2_body(x: Tensor) -> xlafn::Result<Tensor> {
    let mut x = x;
    for _ in 0..50 {
        x = x.tanh()? * 0.5 + 0.1;
    }
    Ok(x)
}

struct W1 {
    eager_us: f64,
    function_us: f64,
    concrete_us: f64,
    pjrt_raw_us: f64,
}

fn w1() -> xlafn::Result<W1> {
    let x = Tensor::scalar(1.0f32);
    let one = Tensor::scalar(1.0f32);
    let f = function(|x: Tensor| x + 1.0);
    f.call((&x,))?;
    let concrete = f.get_concrete_function((&x,))?;
    let flat = [x.clone()];
    // The very executable the function runs (it is cached, so this
    // compiles nothing); the input is already on the device.
    let exe = concrete.compiled(&[ArraySpec::scalar(DType::F32)])?;
    assert_eq!(
        f.compile_count(),
        1,
        "compiled() must reuse the cached program"
    );
    assert_eq!(exe.params().len(), 1, "x + 1.0 captures nothing");
    let client = Client::default_client()?;
    let xb = Buffer::from_slice(&client, client.default_device(), &[1f32], &[])?;

    let t = side_by_side_us(&mut [
        &mut || {
            let y = x.add(&one).unwrap();
            y.block_until_ready().unwrap();
        },
        &mut || {
            let y = f.call((&x,)).unwrap();
            y.block_until_ready().unwrap();
        },
        &mut || {
            let y = concrete.call_flat(&flat).unwrap();
            y[0].block_until_ready().unwrap();
        },
        &mut || {
            let out = exe.execute(&[&xb]).unwrap();
            out[0].block_until_ready().unwrap();
        },
    ]);
    Ok(W1 {
        eager_us: t[0],
        function_us: t[1],
        concrete_us: t[2],
        pjrt_raw_us: t[3],
    })
}

/// W2 eagerly, as a `jit_compile(false)` function (the same trace op by
/// op) and as a compiled function: (eager, unfused, fused) µs per call.
fn w2() -> xlafn::Result<(f64, f64, f64)> {
    let x = w2_input()?;
    let f = function(w2_body);
    let unfused = FunctionOptions::new().jit_compile(false).build(w2_body);
    // Same numbers both ways.
    let a = w2_body(x.clone())?.to_vec::<f32>()?;
    let b = f.call((&x,))?.to_vec::<f32>()?;
    let max_diff = a
        .iter()
        .zip(&b)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f32::max);
    assert!(
        max_diff < 1e-5,
        "W2 eager and function differ by {max_diff}"
    );
    let t = side_by_side_us(&mut [
        &mut || {
            let y = w2_body(x.clone()).unwrap();
            y.block_until_ready().unwrap();
        },
        &mut || {
            let y = unfused.call((&x,)).unwrap();
            y.block_until_ready().unwrap();
        },
        &mut || {
            let y = f.call((&x,)).unwrap();
            y.block_until_ready().unwrap();
        },
    ]);
    Ok((t[0], t[1], t[2]))
}

/// W4: `for i in range(n): x = x * 0.99 + 0.01` on x of shape [1000] with
/// `n = 1000` passed as a tensor: one in-graph `while` loop per call.
fn w4() -> xlafn::Result<f64> {
    let x = w2_input()?;
    let n = Tensor::scalar(1000i32);
    let f =
        function(|x: Tensor, n: Tensor| for_range(0, &n, 1, x, |_i, x: Tensor| &x * 0.99 + 0.01));
    // Check against the same loop on the host.
    let got = f.call((&x, &n))?.to_vec::<f32>()?;
    let want: Vec<f32> = x
        .to_vec::<f32>()?
        .iter()
        .map(|&v| (0..1000).fold(v, |v, _| v * 0.99 + 0.01))
        .collect();
    let max_diff = got
        .iter()
        .zip(&want)
        .map(|(p, q)| (p - q).abs())
        .fold(0.0, f32::max);
    assert!(
        max_diff < 1e-4,
        "W4 differs from the host loop by {max_diff}"
    );
    assert_eq!(f.tracing_count(), 1);
    Ok(median_us(|| {
        f.call((&x, &n)).unwrap().block_until_ready().unwrap();
    }))
}

/// In a fresh process: the first call of W2 (wrap + trace + compile + first
/// run + read back), in ms. The client and the input exist beforehand.
fn w5_child(workload: &str) -> xlafn::Result<()> {
    Client::default_client()?;
    let ms = match workload {
        "w2" => {
            let x = w2_input()?;
            x.block_until_ready()?;
            let start = Instant::now();
            let f = function(w2_body);
            let _ = f.call((&x,))?.to_vec::<f32>()?;
            start.elapsed().as_secs_f64() * 1e3
        }
        "w3" => {
            let model = mlp_step::Mlp::new()?;
            let (x, y) = mlp_step::synthetic_batch(0)?;
            x.block_until_ready()?;
            let start = Instant::now();
            let step = model.train_step(0.1);
            let _ = step.call((&x, &y))?.item::<f32>()?;
            start.elapsed().as_secs_f64() * 1e3
        }
        other => return Err(Error::Value(format!("unknown W5 workload {other}"))),
    };
    println!("{ms:.3}");
    Ok(())
}

/// W3: one compiled training step of the MLP (forward, backward, in-place
/// SGD update), per call.
fn w3() -> xlafn::Result<f64> {
    let model = mlp_step::Mlp::new()?;
    let step = model.train_step(0.1);
    let (x, y) = mlp_step::synthetic_batch(0)?;
    let first = step.call((&x, &y))?.item::<f32>()?;
    let address = model.params[0].device_address()?;
    let t = median_us(|| {
        step.call((&x, &y)).unwrap().block_until_ready().unwrap();
    });
    let last = step.call((&x, &y))?.item::<f32>()?;
    assert!(last < first, "W3 loss did not go down: {first} -> {last}");
    assert_eq!(
        model.params[0].device_address()?,
        address,
        "W3 weights were not updated in place"
    );
    assert_eq!(step.tracing_count(), 1);
    Ok(t)
}

/// W5 in fresh processes of this binary: the median of `W5_PROCESSES`
/// runs with the on-disk compile cache (after one run that fills it), and
/// one cold run with the cache off. Returns (cached median, cold).
fn w5(workload: &str) -> xlafn::Result<(f64, f64)> {
    let cold = w5_runs(workload, 1, false)?;
    w5_runs(workload, 1, true)?;
    let cached = w5_runs(workload, W5_PROCESSES, true)?;
    Ok((cached, cold))
}

fn w5_runs(workload: &str, processes: usize, cache: bool) -> xlafn::Result<f64> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::Value(format!("cannot find this binary: {e}")))?;
    let mut runs = Vec::new();
    for _ in 0..processes {
        let out = Command::new(&exe)
            .args([W5_CHILD_FLAG, workload])
            .env("XLAFN_COMPILE_CACHE", if cache { "on" } else { "off" })
            .output()
            .map_err(|e| Error::Value(format!("cannot run {}: {e}", exe.display())))?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let ms = stdout
            .lines()
            .last()
            .and_then(|l| l.trim().parse::<f64>().ok())
            .filter(|_| out.status.success())
            .ok_or_else(|| {
                Error::Value(format!(
                    "W5 child failed ({}): {}{}",
                    out.status,
                    stdout,
                    String::from_utf8_lossy(&out.stderr)
                ))
            })?;
        runs.push(ms);
    }
    Ok(median(runs))
}

struct W6 {
    traces: usize,
    compiles: usize,
    total_ms: f64,
}

/// W6: `k(x) = reduce_sum(x * x)` once on each length 3, 5, ..., 99, cold
/// (a fresh Function), every result read back.
fn w6(options: FunctionOptions) -> xlafn::Result<W6> {
    let xs: Vec<Tensor> = (3..100)
        .step_by(2)
        .map(|n| Tensor::from_vec((0..n).map(|i| i as f32 / n as f32).collect(), &[n]))
        .collect::<xlafn::Result<_>>()?;
    for x in &xs {
        x.block_until_ready()?;
    }
    let start = Instant::now();
    let k = options.build(|x: Tensor| (&x * &x).reduce_sum(&[], false));
    let mut last = 0.0;
    for x in &xs {
        last = k.call((x,))?.item::<f32>()?;
    }
    let total_ms = start.elapsed().as_secs_f64() * 1e3;
    let expected: f32 = (0..99).map(|i| (i as f32 / 99.0).powi(2)).sum();
    assert!((last - expected).abs() < 1e-3, "W6: {last} != {expected}");
    Ok(W6 {
        traces: k.tracing_count(),
        compiles: k.compile_count(),
        total_ms,
    })
}

fn w7() -> xlafn::Result<f64> {
    const N: i64 = 1024;
    let a = Tensor::from_vec(normal((N * N) as usize, 7), &[N, N])?;
    let b = Tensor::from_vec(normal((N * N) as usize, 70), &[N, N])?;
    let f = function(|a: Tensor, b: Tensor| a.matmul(&b));
    let us = median_us(|| {
        let y = f.call((&a, &b)).unwrap();
        y.block_until_ready().unwrap();
    });
    Ok(2.0 * (N as f64).powi(3) / (us * 1e-6) / 1e9)
}

fn w8() -> xlafn::Result<f64> {
    const N: usize = 16 << 20;
    const BYTES: f64 = (2 * N * 4) as f64;
    let x = Tensor::from_vec(uniform(N, 8), &[N as i64])?;
    let f = function(|x: Tensor| (&x * 2.0 + 1.0) * &x - 3.0);
    let us = median_us(|| {
        let y = f.call((&x,)).unwrap();
        y.block_until_ready().unwrap();
    });
    Ok(BYTES / (us * 1e-6) / 1e9)
}

/// W1-W8: measures them, prints their figures, and adds their targets to
/// `checks`; returns their JSON entries.
fn basic_workloads(peer: &peers::Peers, checks: &mut Vec<Check>) -> xlafn::Result<String> {
    let w1 = w1()?;
    let (w2_eager, w2_unfused, w2_function) = w2()?;
    let w3_function = w3()?;
    let w4_function = w4()?;
    let (w5_w2, w5_w2_cold) = w5("w2")?;
    let (w5_w3, w5_w3_cold) = w5("w3")?;
    let w6_default = w6(FunctionOptions::new())?;
    let w6_reduce = w6(FunctionOptions::new().reduce_retracing(true))?;
    let w6_signature =
        w6(FunctionOptions::new().input_signature(vec![TensorSpec::new(&[None], DType::F32)]))?;
    let w7_gflops = w7()?;
    let w8_gbps = w8()?;

    // ---------------------------------------------------------- figures
    let row = |work: &str, figure: &str, value: f64, unit: &str| {
        println!("{work:<5} {figure:<34} {value:>12.2}  {unit}");
    };
    row("W1", "eager_us (x+1, scalar)", w1.eager_us, "µs/call");
    row("W1", "function_us", w1.function_us, "µs/call");
    row("W1", "concrete_us (call_flat)", w1.concrete_us, "µs/call");
    row(
        "W1",
        "pjrt_raw_us (same executable)",
        w1.pjrt_raw_us,
        "µs/call",
    );
    row("W2", "eager_us (150 ops on [1000])", w2_eager, "µs/call");
    row(
        "W2",
        "unfused_us (jit_compile(false))",
        w2_unfused,
        "µs/call",
    );
    row("W2", "function_us", w2_function, "µs/call");
    row("W3", "function_us (MLP SGD step)", w3_function, "µs/step");
    row("W4", "function_us (1000-step loop)", w4_function, "µs/call");
    row(
        "W5",
        "w2_first_call_ms (median of 3)",
        w5_w2,
        "ms (on-disk compile cache)",
    );
    row(
        "W5",
        "w2_first_call_ms, cold",
        w5_w2_cold,
        "ms (cache off: trace + compile)",
    );
    row(
        "W5",
        "w3_first_call_ms (median of 3)",
        w5_w3,
        "ms (on-disk compile cache)",
    );
    row(
        "W5",
        "w3_first_call_ms, cold",
        w5_w3_cold,
        "ms (cache off: trace + compile)",
    );
    for (name, w) in [
        ("default", &w6_default),
        ("reduce_retracing", &w6_reduce),
        ("input_signature", &w6_signature),
    ] {
        println!(
            "{:<5} {:<34} {:>12.2}  ms total ({} traces, {} compiles)",
            "W6", name, w.total_ms, w.traces, w.compiles
        );
    }
    row("W7", "gflops (1024^3 matmul)", w7_gflops, "GFLOP/s");
    row(
        "W8",
        "gbps ((x*2+1)*x-3, 16M f32)",
        w8_gbps,
        "GB/s (128 MiB/call)",
    );

    // ---------------------------------------------------------- targets
    checks.extend([
        Check::at_most(
            "W1",
            format!("function_us <= 1.25 x pjrt_raw_us ({:.2})", w1.pjrt_raw_us),
            w1.function_us,
            1.25 * w1.pjrt_raw_us,
        ),
        Check::at_most(
            "W1",
            format!("function_us <= 0.5 x JAX jit ({})", peer.w1_jax_jit_us),
            w1.function_us,
            0.5 * peer.w1_jax_jit_us.value,
        ),
        Check::at_most(
            "W2",
            format!("function_us <= 1.0 x JAX jit ({})", peer.w2_jax_jit_us),
            w2_function,
            peer.w2_jax_jit_us.value,
        ),
        Check::at_most(
            "W4",
            format!("function_us <= 1.0 x JAX jit ({})", peer.w4_jax_jit_us),
            w4_function,
            peer.w4_jax_jit_us.value,
        ),
        Check::at_least(
            "W2",
            "eager_us / function_us >= 20".into(),
            w2_eager / w2_function,
            20.0,
        ),
        Check::at_most(
            "W5",
            format!(
                "w2_first_call_ms <= 0.7 x JAX jit ({})",
                peer.w5_w2_jax_jit_ms
            ),
            w5_w2,
            0.7 * peer.w5_w2_jax_jit_ms.value,
        ),
        Check::at_most(
            "W3",
            format!("function_us <= 1.0 x JAX jit ({})", peer.w3_jax_jit_us),
            w3_function,
            peer.w3_jax_jit_us.value,
        ),
        Check::at_most(
            "W5",
            format!(
                "w3_first_call_ms <= 0.7 x JAX jit ({})",
                peer.w5_w3_jax_jit_ms
            ),
            w5_w3,
            0.7 * peer.w5_w3_jax_jit_ms.value,
        ),
        Check::exactly(
            "W6",
            "reduce_retracing traces == 2".into(),
            w6_reduce.traces as f64,
            2.0,
        ),
        Check::exactly(
            "W6",
            "input_signature traces == 1".into(),
            w6_signature.traces as f64,
            1.0,
        ),
    ]);
    for (name, w) in [
        ("default", &w6_default),
        ("reduce_retracing", &w6_reduce),
        ("input_signature", &w6_signature),
    ] {
        checks.push(Check::at_most(
            "W6",
            format!("{name} total_ms <= 0.5 x JAX jit ({})", peer.w6_jax_jit_ms),
            w.total_ms,
            0.5 * peer.w6_jax_jit_ms.value,
        ));
    }
    checks.push(Check::at_least(
        "W7",
        format!("gflops >= 0.9 x JAX jit ({})", peer.w7_jax_jit_gflops),
        w7_gflops,
        0.9 * peer.w7_jax_jit_gflops.value,
    ));
    checks.push(Check::at_least(
        "W8",
        format!("gbps >= 1.0 x TF jit_compile ({})", peer.w8_tf_jit_gbps),
        w8_gbps,
        peer.w8_tf_jit_gbps.value,
    ));

    // ---------------------------------------------------------- JSON
    // (this group's entries; main joins the groups)
    let w6_json = |w: &W6| {
        format!(
            "{{\"traces\": {}, \"compiles\": {}, \"total_ms\": {:.3}}}",
            w.traces, w.compiles, w.total_ms
        )
    };
    let mut json = String::new();
    let _ = writeln!(
        json,
        "  \"W1\": {{\"eager_us\": {:.3}, \"function_us\": {:.3}, \"concrete_us\": {:.3}, \"pjrt_raw_us\": {:.3}}},",
        w1.eager_us, w1.function_us, w1.concrete_us, w1.pjrt_raw_us
    );
    let _ = writeln!(
        json,
        "  \"W2\": {{\"eager_us\": {w2_eager:.3}, \"unfused_us\": {w2_unfused:.3}, \"function_us\": {w2_function:.3}}},"
    );
    let _ = writeln!(json, "  \"W4\": {{\"function_us\": {w4_function:.3}}},");
    let _ = writeln!(json, "  \"W3\": {{\"function_us\": {w3_function:.3}}},");
    let _ = writeln!(
        json,
        "  \"W5\": {{\"w2_first_call_ms\": {w5_w2:.3}, \"w3_first_call_ms\": {w5_w3:.3}}},"
    );
    let _ = writeln!(
        json,
        "  \"W6\": {{\"default\": {},\n         \"reduce_retracing\": {},\n         \"input_signature\": {}}},",
        w6_json(&w6_default),
        w6_json(&w6_reduce),
        w6_json(&w6_signature)
    );
    let _ = writeln!(json, "  \"W7\": {{\"gflops\": {w7_gflops:.3}}},");
    let _ = write!(json, "  \"W8\": {{\"gbps\": {w8_gbps:.3}}}");
    Ok(json)
}

/// The data-parallel training step (`examples/common/data_parallel.rs`, batch
/// 128) on one device and with its batch split over 4: no speedup is
/// expected on a 2-core machine; the figure is for machines with more.
fn data_parallel_step() -> xlafn::Result<String> {
    let mesh = xlafn::sharding::Mesh::new(&[("data", 4)])?;
    let data = data_parallel::batches(4, 128)?;
    let mut per_call = Vec::new();
    let split = data_parallel::split_batches(&data, &mesh)?;
    for on in [None, Some(&mesh)] {
        let trainer = data_parallel::trainer(0, on)?;
        let data = if on.is_some() { &split } else { &data };
        data_parallel::train(&trainer, data, 3)?;
        let mut i = 0;
        per_call.push(
            median_us(|| {
                let (x, y) = &data[i % data.len()];
                i += 1;
                trainer
                    .step
                    .call((x, y))
                    .unwrap()
                    .block_until_ready()
                    .unwrap();
            }) / 1e3,
        );
    }
    println!(
        "{:<5} {:<34} {:>12.3}  ms",
        "DP", "step on 1 device", per_call[0]
    );
    println!(
        "{:<5} {:<34} {:>12.3}  ms",
        "DP", "step on 4 devices (data axis)", per_call[1]
    );
    Ok(format!(
        "  \"DP\": {{\"step_ms_1_device\": {:.3}, \"step_ms_4_devices\": {:.3}}}",
        per_call[0], per_call[1]
    ))
}

fn main() -> xlafn::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == W5_CHILD_FLAG) {
        let workload = args.get(i + 1).map_or("w2", String::as_str);
        return w5_child(workload);
    }
    let value_of = |flag: &str| {
        args.iter()
            .position(|a| a == flag)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let json_path = value_of("--json");
    let peer = match value_of("--peers") {
        Some(path) => peers::Peers::from_file(&path)?,
        None => peers::Peers::reference(),
    };
    let peer = match value_of("--model-peers") {
        Some(path) => peer.with_models_file(&path)?,
        None => peer,
    };
    let only: Option<Vec<String>> =
        value_of("--only").map(|list| list.split(',').map(|w| w.trim().to_uppercase()).collect());
    let wants = |w: &str| only.as_ref().is_none_or(|o| o.iter().any(|x| x == w));
    let hlo_dir = value_of("--hlo");

    // Everything in this process compiles cold; only W5's cached figure
    // uses the on-disk compile cache (in its child processes).
    xlafn::runtime::set_disk_cache_enabled(false);
    let started = Instant::now();
    println!("{:<5} {:<34} {:>12}  unit", "work", "figure", "value");
    let mut checks = Vec::new();
    let mut groups = Vec::new();
    if ["W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8"]
        .iter()
        .any(|w| wants(w))
    {
        groups.push(basic_workloads(&peer, &mut checks)?);
    }
    if wants("DP") {
        groups.push(data_parallel_step()?);
    }
    groups.push(real_report::real_workloads(
        &peer,
        &wants,
        hlo_dir.as_deref(),
        &mut checks,
    )?);
    groups.push(model_report::model_workloads(
        &peer,
        &wants,
        hlo_dir.as_deref(),
        &mut checks,
    )?);
    if wants("DATA") {
        groups.push(data_report::data_workload(&mut checks)?);
    }
    if wants("W16") {
        groups.push(w16(value_of("--torch-peer").as_deref(), &mut checks)?);
    }

    println!(
        "\n{:<5} {:<60} {:>10} {:>10}  {:<4} margin",
        "work", "target", "value", "bound", "met"
    );
    for c in &checks {
        println!(
            "{:<5} {:<60} {:>10.2} {:>10.2}  {:<4} {:.2}x",
            c.work,
            c.what,
            c.value,
            c.bound,
            if c.met() { "yes" } else { "NO" },
            c.margin()
        );
    }
    let met = checks.iter().filter(|c| c.met()).count();
    println!(
        "{met}/{} targets met (margin > 1 means inside the bound); the trace count targets are exact",
        checks.len()
    );
    println!("report took {:.1} s", started.elapsed().as_secs_f64());

    if let Some(path) = value_of("--markdown") {
        std::fs::write(&path, markdown_table(&checks, &args))
            .map_err(|e| Error::Value(format!("cannot write {path}: {e}")))?;
        println!("wrote {path}");
    }

    // ---------------------------------------------------------- JSON
    groups.retain(|g| !g.is_empty());
    let json = format!("{{\n{}\n}}\n", groups.join(",\n"));
    if let Some(path) = json_path {
        std::fs::write(&path, json)
            .map_err(|e| Error::Value(format!("cannot write {path}: {e}")))?;
        println!("wrote {path}");
    }
    Ok(())
}
