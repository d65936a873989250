//! Eager against compiled, with the numbers and pictures to show it:
//! the guide's comparison of its convolution layer run eagerly and as a
//! function (W12 of the bench report), and W2's 150 small elementwise ops,
//! each timed eagerly, as a `jit_compile(false)` function and compiled
//! (`xlafn::bench`), with XLA's cost and memory analyses of the compiled
//! program. Writes a bar chart (SVG), the comparisons as JSON and a trace
//! file of the whole run that Perfetto or chrome://tracing opens.
//!
//! `cargo run --release --example compare [-- --out DIR] [--quick]`
//! (default DIR: `target/compare`).

#[path = "common/real_models.rs"]
mod real_models;

use real_models::{ConvLayer, conv_layer};
use xlafn::bench::{BenchOptions, Comparison, compare, write_chart};
use xlafn::prelude::*;

/// W2: 50 times `x = tanh(x) * 0.5 + 0.1`, 150 ops once traced.
fn w2_body(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in 0..50 {
        x = x.tanh()?.mul_scalar(0.5)?.add_scalar(0.1)?;
    }
    Ok(x)
}

/// The compiled program's stages: times, cost and memory.
fn stages<F>(name: &str, body: F, x: &Tensor) -> Result<()>
where
    F: Fn(Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    let compiled = function(body).lower((x,))?.compile()?;
    println!("{name}, compiled:\n{compiled}\n");
    Ok(())
}

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|i| args.get(i + 1))
        .map_or_else(|| std::path::PathBuf::from("target/compare"), Into::into);
    let options = if args.iter().any(|a| a == "--quick") {
        BenchOptions::quick()
    } else {
        BenchOptions::default()
    };
    std::fs::create_dir_all(&out).map_err(|e| Error::Value(format!("{}: {e}", out.display())))?;
    let profile = xlafn::profile::Profile::start(out.join("trace.json"));

    let layer = ConvLayer::new()?;
    let (kernel, bias) = (layer.kernel.clone(), layer.bias.clone());
    let conv = move |x: Tensor| conv_layer(&x, &kernel, &bias);
    let w12 = compare(
        "W12 conv layer",
        conv.clone(),
        (layer.x_check.clone(),),
        &options,
    )?;
    stages("W12 conv layer", conv, &layer.x_check)?;

    let x = Tensor::from_vec(
        (0..1000).map(|k| (k as f32 * 0.37).sin()).collect(),
        &[1000],
    )?;
    let w2 = compare("W2 150 small ops", w2_body, (x.clone(),), &options)?;
    stages("W2 150 small ops", w2_body, &x)?;

    let all: Vec<Comparison> = vec![w12, w2];
    for c in &all {
        println!("{c}");
    }
    write_chart(&all, out.join("compare.svg"))?;
    let json = serde_json::Value::Array(all.iter().map(Comparison::to_json).collect());
    std::fs::write(out.join("compare.json"), json.to_string())
        .map_err(|e| Error::Value(format!("{}: {e}", out.display())))?;
    profile.finish()?;
    println!(
        "wrote {}/compare.svg, compare.json and trace.json (open it in Perfetto)",
        out.display()
    );
    Ok(())
}
