//! `xlafn`: inspect and run exported functions without their Rust source
//! (like `saved_model_cli`).
//!
//! ```text
//! xlafn show DIR
//! xlafn run DIR --input NAME=FILE.npy [--input ...] [--output-dir OUT]
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use xlafn::export::npy;
use xlafn::{Error, Result, Tensor};

const USAGE: &str = "usage:\n  xlafn show DIR\n  xlafn run DIR --input NAME=FILE.npy [--input ...] [--output-dir OUT]";

fn shape_text(shape: &Option<Vec<Option<i64>>>) -> String {
    match shape {
        None => xlafn::ir::Shape::unknown_rank().to_string(),
        Some(d) => xlafn::ir::Shape::from_dims(d.clone()).to_string(),
    }
}

fn show(dir: &str) -> Result<()> {
    let f = xlafn::load(dir)?;
    println!("function '{}'", f.name());
    if let Some(op) = f.implements() {
        println!("  implements: {op}");
    }
    println!("  inputs:");
    for i in f.inputs() {
        println!(
            "    {}: TensorSpec(shape={}, dtype={})",
            i.name,
            shape_text(&i.shape),
            i.dtype
        );
    }
    println!("  outputs:");
    for o in f.outputs() {
        println!(
            "    {}: TensorSpec(shape={}, dtype={})",
            o.name,
            shape_text(&o.shape),
            o.dtype
        );
    }
    println!("  compiled for input shapes: {:?}", f.specializations());
    for v in f.variables() {
        println!(
            "  variable {}: dtype={} shape={:?}",
            v.name(),
            v.dtype(),
            v.dims()
        );
    }
    Ok(())
}

fn read_input(path: &str) -> Result<Tensor> {
    let bytes = std::fs::read(path).map_err(|e| Error::Value(format!("{path}: {e}")))?;
    let a = npy::decode(&bytes)?;
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
                        Error::Value(format!("'{}' has no input named {name:?}", f.name()))
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
        std::fs::write(&path, bytes)
            .map_err(|e| Error::Value(format!("{}: {e}", path.display())))?;
        println!("wrote {} ({})", path.display(), t.tensor_type());
    }
    Ok(())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match (args.first().map(String::as_str), args.get(1)) {
        (Some("show"), Some(dir)) => show(dir),
        (Some("run"), Some(dir)) => run(dir, &args[2..]),
        _ => Err(Error::Value(USAGE.into())),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("xlafn: {e}");
            ExitCode::FAILURE
        }
    }
}
