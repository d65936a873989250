//! `xlafn`: inspect and run exported functions without their Rust source
//! (like `saved_model_cli`).
//!
//! ```text
//! xlafn show DIR
//! xlafn run DIR --input NAME=FILE.npy [--input ...] [--output-dir OUT]
//! ```
//!
//! The folder may come from anyone: `xlafn::load` checks it (see
//! `xlafn::export`), text from its manifest is printed with control
//! characters escaped so it cannot rewrite the terminal, and outputs are
//! written only as new files.

use std::path::PathBuf;
use std::process::ExitCode;
use xlafn::export::npy;
use xlafn::{Error, Result, Tensor};

const USAGE: &str = "usage:\n  xlafn show DIR\n  xlafn run DIR --input NAME=FILE.npy [--input ...] [--output-dir OUT]";

/// `text` with control characters and the invisible ones that reorder or
/// hide text (bidi overrides, zero-width marks) escaped as `\u{..}`, so
/// names from a manifest print as what they are. `keep_newlines` keeps
/// `\n` for the tool's own multi-line messages.
fn printable(text: &str, keep_newlines: bool) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    text.chars()
        .map(|c| match c {
            '\n' if keep_newlines => "\n".to_string(),
            c if hidden(c) => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// Manifest text, escaped for the terminal.
fn p(text: &str) -> String {
    printable(text, false)
}

fn shape_text(shape: &Option<Vec<Option<i64>>>) -> String {
    match shape {
        None => xlafn::ir::Shape::unknown_rank().to_string(),
        Some(d) => xlafn::ir::Shape::from_dims(d.clone()).to_string(),
    }
}

fn show(dir: &str) -> Result<()> {
    let f = xlafn::load(dir)?;
    println!("function '{}'", p(f.name()));
    if let Some(op) = f.implements() {
        println!("  implements: {}", p(op));
    }
    println!("  inputs:");
    for i in f.inputs() {
        println!(
            "    {}: TensorSpec(shape={}, dtype={})",
            p(&i.name),
            shape_text(&i.shape),
            p(&i.dtype)
        );
    }
    println!("  outputs:");
    for o in f.outputs() {
        println!(
            "    {}: TensorSpec(shape={}, dtype={})",
            p(&o.name),
            shape_text(&o.shape),
            p(&o.dtype)
        );
    }
    println!("  compiled for input shapes: {:?}", f.specializations());
    for v in f.variables() {
        println!(
            "  variable {}: dtype={} shape={:?}",
            p(v.name()),
            v.dtype(),
            v.dims()
        );
    }
    Ok(())
}

/// The largest `--input` file read: inputs are the user's own files, but a
/// FIFO or `/dev/zero` named by mistake must not hang or fill memory.
const MAX_INPUT_BYTES: u64 = 1 << 40;

fn read_input(path: &str) -> Result<Tensor> {
    let bytes = xlafn::export::read_regular_file(std::path::Path::new(path), MAX_INPUT_BYTES)?;
    let a = npy::decode(&bytes).map_err(|e| Error::Value(format!("{path}: {e}")))?;
    Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes)
}

fn run(dir: &str, args: &[String]) -> Result<()> {
    let f = xlafn::load(dir)?;
    let mut inputs: Vec<Option<Tensor>> = vec![None; f.inputs().len()];
    let mut out_dir = PathBuf::from(".");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--input" => {
                let spec = it
                    .next()
                    .ok_or_else(|| Error::Value("--input needs NAME=FILE.npy".into()))?;
                let (name, file) = spec
                    .split_once('=')
                    .ok_or_else(|| Error::Value(format!("bad --input {spec:?}")))?;
                let k = f
                    .inputs()
                    .iter()
                    .position(|i| i.name == name)
                    .ok_or_else(|| {
                        Error::Value(format!("'{}' has no input named {name:?}", p(f.name())))
                    })?;
                inputs[k] = Some(read_input(file)?);
            }
            "--output-dir" => {
                out_dir = PathBuf::from(
                    it.next()
                        .ok_or_else(|| Error::Value("--output-dir needs a folder".into()))?,
                )
            }
            other => return Err(Error::Value(format!("unknown argument {other:?}\n{USAGE}"))),
        }
    }
    let inputs: Vec<Tensor> = inputs
        .into_iter()
        .zip(f.inputs())
        .map(|(t, spec)| {
            t.ok_or_else(|| Error::Value(format!("missing --input {}=FILE.npy", spec.name)))
        })
        .collect::<Result<_>>()?;
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let outputs = f.call(&refs)?;
    std::fs::create_dir_all(&out_dir)
        .map_err(|e| Error::Value(format!("{}: {e}", out_dir.display())))?;
    for (i, t) in outputs.iter().enumerate() {
        let bytes = t.to_host_array().and_then(|a| npy::encode(&a))?;
        let path = out_dir.join(format!("output_{i}.npy"));
        // A new file only: an existing file, or a symlink planted where
        // the output goes, is an error rather than overwritten.
        xlafn::export::write_new_file(&path, &bytes)?;
        println!("wrote {} ({})", path.display(), t.tensor_type());
    }
    Ok(())
}

/// The arguments as UTF-8 (`std::env::args` would panic on others).
fn args() -> Result<Vec<String>> {
    std::env::args_os()
        .skip(1)
        .enumerate()
        .map(|(i, a)| {
            a.into_string().map_err(|a| {
                Error::Value(format!(
                    "argument {} ({}) is not valid UTF-8",
                    i + 1,
                    a.to_string_lossy()
                ))
            })
        })
        .collect()
}

fn main() -> ExitCode {
    let result = args().and_then(|args| dispatch(&args));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xlafn: {}", printable(&e.to_string(), true));
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<()> {
    match (args.first().map(String::as_str), args.get(1)) {
        (Some("show"), Some(dir)) => show(dir),
        (Some("run"), Some(dir)) => run(dir, &args[2..]),
        _ => Err(Error::Value(USAGE.into())),
    }
}
