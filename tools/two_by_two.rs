//! Times StableHLO files with the pinned plugin: one half of the "2x2"
//! (each side's program compiled by each side's compiler).
//! `bench_report --hlo DIR` writes xlafn's training steps,
//! `bench/two_by_two.py lower DIR` writes jax.jit's, and
//! `bench/two_by_two.py time` times files with jaxlib's CPU client.
//!
//! ```text
//! cargo run --release --example two_by_two -- FILE...
//! ```
//!
//! Every file is compiled with the options xlafn gives a heavy program.
//! Each argument is filled from its type in `@main`'s signature (f32
//! values small and varied, everything else zero, so every index stays in
//! bounds), exactly as the Python half fills it: both print each file's
//! f32 scalar results (the loss) from one run, which must agree. The
//! files are then timed interleaved, 15 rounds in which each runs for at
//! least 200 ms, so that drift on a shared host falls on all of them
//! alike. Input-output aliasing is taken out of the text (the same
//! inputs are fed to every call).
//!
//! The files go to the plugin as they are, for programs you made
//! yourself: jax.jit's text is outside what xlafn's own program check
//! (`lower::program_check`, for exports, which are untrusted) accepts,
//! from its `module` header on, and XLA may abort the process on a
//! program it rejects.

use std::sync::Arc;
use std::time::{Duration, Instant};
use xlafn::runtime::{Buffer, Client, CompileOptions, Executable, Platform, ProgramTraits};
use xlafn::{ArraySpec, DType, Error, Result};

fn main() -> Result<()> {
    let files: Vec<String> = std::env::args().skip(1).collect();
    if files.is_empty() {
        eprintln!("usage: two_by_two FILE.mlir...");
        std::process::exit(2);
    }
    time(&files)
}

/// `@main`'s argument types, in order.
fn main_arguments(text: &str) -> Result<Vec<ArraySpec>> {
    let bad = |what: &str| Error::Value(format!("@main's signature: {what}"));
    let start = text.find("@main(").ok_or_else(|| bad("not found"))? + "@main(".len();
    let header = &text[start..];
    let header = &header[..header.find(") ->").ok_or_else(|| bad("no result types"))?];
    let mut specs = Vec::new();
    for part in header.split("%arg").skip(1) {
        let ty = part
            .split("tensor<")
            .nth(1)
            .ok_or_else(|| bad("an argument is not a tensor"))?;
        let ty = &ty[..ty.find('>').ok_or_else(|| bad("unclosed tensor type"))?];
        let mut pieces: Vec<&str> = ty.split('x').collect();
        let element = pieces.pop().expect("split gives one piece");
        let dims = pieces
            .iter()
            .map(|d| d.parse::<i64>().map_err(|_| bad(ty)))
            .collect::<Result<Vec<_>>>()?;
        let name = match element {
            "i1" => "bool".to_string(),
            e if e.starts_with("ui") => e.replacen("ui", "u", 1),
            e => e.to_string(),
        };
        specs.push(ArraySpec::new(DType::from_name(&name)?, &dims));
    }
    Ok(specs)
}

/// Boolean constants written in hex with a byte per element (newer MLIR,
/// as jaxlib 0.10 prints them) rewritten with a bit per element, as the
/// pinned plugin's parser reads them (bit `i % 8` of byte `i / 8`).
fn pack_bool_constants(text: &str) -> String {
    let (open, close) = ("dense<\"0x", "\"> : tensor<");
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(open) {
        let (before, from) = rest.split_at(at + open.len());
        out.push_str(before);
        let hex_end = from.find('"').unwrap_or(from.len());
        let (hex, after) = from.split_at(hex_end);
        let is_bool = after.starts_with(close)
            && after[close.len()..]
                .split('>')
                .next()
                .is_some_and(|t| t.ends_with("xi1"));
        if is_bool && hex.len() > 2 {
            let bytes: Vec<u8> = (0..hex.len() / 2)
                .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap_or(0))
                .collect();
            let mut packed = vec![0u8; bytes.len().div_ceil(8)];
            for (i, &b) in bytes.iter().enumerate() {
                packed[i / 8] |= u8::from(b != 0) << (i % 8);
            }
            out.extend(packed.iter().map(|b| format!("{b:02X}")));
        } else {
            out.push_str(hex);
        }
        rest = after;
    }
    out.push_str(rest);
    out
}

/// An argument of `spec`: f32 values in [-0.05, 0.05), anything else zero.
fn argument(client: &Arc<Client>, spec: &ArraySpec, seed: usize) -> Result<Buffer> {
    let n: usize = spec.dims.iter().product::<i64>() as usize;
    let device = client.default_device();
    if spec.dtype == DType::F32 {
        let values: Vec<f32> = (0..n)
            .map(|i| (((i + seed) * 7919 % 1000) as f32 / 1000.0 - 0.5) * 0.1)
            .collect();
        return Buffer::from_slice(client, device, &values, &spec.dims);
    }
    let bytes = vec![0u8; n * spec.dtype.size_in_bytes()?];
    Buffer::from_bytes(client, device, spec.dtype, &bytes, &spec.dims)
}

/// The program's f32 scalar results (its loss) on `inputs`: the same file
/// run by both halves must give the same values, which checks that both
/// fill the arguments alike and that the text was read the same way.
fn f32_scalars(exe: &Executable, inputs: &[Buffer]) -> Result<Vec<f32>> {
    let refs: Vec<&Buffer> = inputs.iter().collect();
    let mut values = Vec::new();
    for out in exe.execute(&refs)? {
        if out.dims().is_empty() && out.dtype() == DType::F32 {
            values.extend(out.to_vec::<f32>()?);
        }
    }
    Ok(values)
}

/// Compiles and times every file, interleaved.
fn time(files: &[String]) -> Result<()> {
    let client = Client::default_client()?;
    let options = CompileOptions::for_program(
        Platform::Cpu,
        ProgramTraits {
            light: false,
            small_array_graph: false,
        },
    );
    let mut runs = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file)
            .map_err(|e| Error::Value(format!("{file}: {e}")))?
            .replace("tf.aliasing_output", "xlafn.unaliased")
            .replace("jax.buffer_donor", "xlafn.not_donated");
        let text = pack_bool_constants(&text);
        let specs = main_arguments(&text)?;
        let started = Instant::now();
        let exe = Executable::compile(&client, &text, specs.clone(), &options)?;
        let compiled_ms = started.elapsed().as_secs_f64() * 1e3;
        let inputs = specs
            .iter()
            .enumerate()
            .map(|(i, s)| argument(&client, s, i))
            .collect::<Result<Vec<_>>>()?;
        let scalars = f32_scalars(&exe, &inputs)?;
        println!("{file}: compiled in {compiled_ms:.0} ms; f32 scalar results {scalars:?}");
        runs.push((file, exe, inputs));
    }
    let run = |exe: &Executable, inputs: &[Buffer]| -> Result<()> {
        let refs: Vec<&Buffer> = inputs.iter().collect();
        for out in exe.execute(&refs)? {
            out.block_until_ready()?;
        }
        Ok(())
    };
    for (_, exe, inputs) in &runs {
        for _ in 0..3 {
            run(exe, inputs)?;
        }
    }
    let mut blocks = vec![Vec::new(); runs.len()];
    for _ in 0..15 {
        for ((_, exe, inputs), times) in runs.iter().zip(&mut blocks) {
            let start = Instant::now();
            let mut n = 0u32;
            while start.elapsed() < Duration::from_millis(200) {
                run(exe, inputs)?;
                n += 1;
            }
            times.push(start.elapsed().as_secs_f64() * 1e3 / f64::from(n));
        }
    }
    for ((file, _, _), times) in runs.iter().zip(&mut blocks) {
        times.sort_by(f64::total_cmp);
        println!(
            "{file}: median {:.3} ms, quartiles {:.3}-{:.3}, min {:.3} (pinned plugin)",
            times[7], times[3], times[11], times[0]
        );
    }
    Ok(())
}
