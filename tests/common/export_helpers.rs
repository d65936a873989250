//! The hostile-export tests' shared helpers: scratch folders, the
//! `xlafn` tool with a timeout, child-process isolation, two small
//! exports to damage (`add_export`, `train_export`) and edits that
//! re-sign the folder.
//!
//! Use with `#[path = "common/export_helpers.rs"] mod export_helpers;`,
//! beside `child`, `scratch` and `tool` from the same folder, declared at
//! the test crate's root under those names.

#![allow(dead_code)]

use std::io::Read;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};
use xlafn::export::testing::resign;
use xlafn::prelude::*;

/// A scratch folder for one test, named by `tag`.
pub fn temp_dir(tag: &str) -> super::scratch::ScratchDir {
    super::scratch::scratch_dir(&format!("robust-{tag}"))
}

/// Runs `cmd` to completion or kills it after `secs`; panics (failing the
/// test) on a timeout, with what it printed so far.
pub fn run_with_timeout(cmd: &mut Command, secs: u64) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut v = Vec::new();
            let _ = r.read_to_end(&mut v);
            v
        })
    };
    let out = drain(Box::new(child.stdout.take().unwrap()));
    let err = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{cmd:?} did not finish in {secs} s (hang?); stderr: {}",
                String::from_utf8_lossy(&err.join().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// Runs `body` in a child process (this test binary, filtered to the test
/// `name`) with a timeout, and fails unless the child passes: an abort, a
/// stack overflow or a hang inside XLA fails this test only.
pub fn isolated(name: &str, secs: u64, body: impl FnOnce()) {
    super::child::isolated(name, Duration::from_secs(secs), body);
}

/// `xlafn ARGS` with a timeout.
pub fn cli(args: &[&std::ffi::OsStr]) -> Output {
    run_with_timeout(Command::new(super::tool::xlafn_tool()).args(args), 60)
}

/// [`cli`] with string arguments.
pub fn cli_str(args: &[&str]) -> Output {
    cli(&args.iter().map(std::ffi::OsStr::new).collect::<Vec<_>>())
}

/// `xlafn run DIR --input x=INPUT --output-dir OUT`, which must fail
/// with exit status 1; returns what it printed on stderr.
pub fn run_refused(dir: &Path, input: &Path, out: &Path) -> String {
    let ran = cli_str(&[
        "run",
        dir.to_str().unwrap(),
        "--input",
        &format!("x={}", input.display()),
        "--output-dir",
        out.to_str().unwrap(),
    ]);
    let stderr = String::from_utf8_lossy(&ran.stderr).into_owned();
    assert_eq!(ran.status.code(), Some(1), "{stderr}");
    stderr
}

/// A function `x + c` with a captured constant `c = [10, 20, 30]`, for
/// `x: f32[3]`.
pub fn add_export(dir: &Path) {
    let c = Tensor::vector(&[10f32, 20., 30.]).unwrap();
    let f = FunctionOptions::new()
        .name("add")
        .arg_names(&["x"])
        .build(move |x: Tensor| &x + &c);
    let x = Tensor::vector(&[1f32, 2., 3.]).unwrap();
    f.get_concrete_function((&x,))
        .unwrap()
        .export(dir, &[])
        .unwrap();
}

/// A training step with a variable `w` and a while loop, for `x: f32[2]`,
/// `y: f32[]`: results are the loss, then `w`'s update.
pub fn train_export(dir: &Path) {
    let w = Variable::new(Tensor::vector(&[0.5f32, -0.5]).unwrap());
    let step = FunctionOptions::new()
        .name("step")
        .arg_names(&["x", "y"])
        .build(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = x
                .mul(&w.read())?
                .reduce_sum(&[], false)?
                .sub(&y)?
                .square()?;
            let g = tape.gradient(&loss, &[(&w).into()])?;
            w.assign_sub(&g[0].clone().unwrap().mul_scalar(0.1)?)?;
            let n = Tensor::scalar(3i32);
            for_range(0, &n, 1, loss, |_i, l: Tensor| &l * 0.5)
        });
    let x = Tensor::vector(&[1f32, 2.0]).unwrap();
    let y = Tensor::scalar(3f32);
    step.get_concrete_function((&x, &y))
        .unwrap()
        .export(dir, &[])
        .unwrap();
}

/// The input `add_export`'s function takes: `[1, 2, 3]`.
pub fn x3() -> Tensor {
    Tensor::vector(&[1f32, 2., 3.]).unwrap()
}

/// Replaces the first `from` in `dir/file` with `to` (which must change
/// it) and re-signs the folder.
pub fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{from:?} not in {file}:\n{text}");
    std::fs::write(&path, text.replacen(from, to, 1)).unwrap();
    resign(dir).unwrap();
}

/// Inserts `line` into the body of `program_0.mlir` (before its return)
/// and re-signs.
pub fn insert_op(dir: &Path, line: &str) {
    edit(
        dir,
        "program_0.mlir",
        "  \"func.return\"",
        &format!("  {line}\n  \"func.return\""),
    );
}

/// The error loading `dir` gives (it must not load).
pub fn load_err(dir: &Path) -> String {
    match xlafn::load(dir) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}
