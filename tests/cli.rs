//! The `xlafn` tool in another process, as a `saved_model_cli` user runs
//! it: `--help`/`--version`, `show` (text and JSON, without compiling),
//! `run` with `.npy`, `.npz` and typed-in inputs, printed and saved
//! outputs, updated variables saved, wrong names listing the valid ones,
//! `stablehlo`, `show --cost` (XLA's analyses), `bench` (timings, JSON,
//! chart), and the exit statuses (0, 1 for errors, 2 for usage).
//! Values are checked against numbers computed by hand in each test.

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

use serde_json::Value;
use std::path::Path;
use std::process::{Command, Output};
use xlafn::prelude::*;

fn temp_dir(tag: &str) -> scratch::ScratchDir {
    scratch::scratch_dir(&format!("cli-{tag}"))
}

fn cli(args: &[&str]) -> Output {
    Command::new(tool::xlafn_tool())
        .args(args)
        .output()
        .unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// `cli(args)`, which must succeed; returns its stdout.
fn ok(args: &[&str]) -> String {
    let out = cli(args);
    assert!(out.status.success(), "{args:?}: {}", stderr(&out));
    stdout(&out)
}

/// `cli(args)`, which must fail with `code`; returns its stderr.
fn fails(args: &[&str], code: i32) -> String {
    let out = cli(args);
    assert_eq!(out.status.code(), Some(code), "{args:?}: {}", stderr(&out));
    stderr(&out)
}

/// `affine(a: f32[2, 2], b: i32[])` returning `(2 a, b + 1)`.
fn affine_export(dir: &Path) {
    let f = FunctionOptions::new()
        .name("affine")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| -> Result<(Tensor, Tensor)> {
            Ok((a.mul_scalar(2.0)?, b.add_scalar(1.0)?))
        });
    let a = Tensor::from_vec(vec![0f32; 4], &[2, 2]).unwrap();
    let b = Tensor::scalar(0i32);
    let cf = f.get_concrete_function((&a, &b)).unwrap();
    cf.export(dir, &[]).unwrap();
}

/// One step of least squares on `w = [0.5, -0.5]`: for `x = [1, 2]`,
/// `y = 3` the prediction is -0.5, the loss 12.25, the gradient
/// `2 (-0.5 - 3) x = [-7, -14]`, and `w` becomes `[1.2, 0.9]`.
fn step_export(dir: &Path) {
    let w = Variable::new(Tensor::vector(&[0.5f32, -0.5]).unwrap()).named("w");
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
            Ok(loss)
        });
    let x = Tensor::vector(&[1f32, 2.0]).unwrap();
    let y = Tensor::scalar(3f32);
    let cf = step.get_concrete_function((&x, &y)).unwrap();
    cf.export(dir, &[]).unwrap();
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn help_and_version_exit_zero_and_usage_errors_exit_two() {
    let help = ok(&["--help"]);
    for command in ["show", "run", "stablehlo"] {
        assert!(help.contains(command), "{help}");
    }
    assert!(ok(&["-h"]).contains("Usage: xlafn"));
    assert!(ok(&["run", "--help"]).contains("--input-expr <NAME=EXPR>"));
    assert_eq!(
        ok(&["--version"]).trim(),
        format!("xlafn {}", env!("CARGO_PKG_VERSION"))
    );
    assert_eq!(
        ok(&["-V"]).trim(),
        format!("xlafn {}", env!("CARGO_PKG_VERSION"))
    );
    assert!(fails(&[], 2).contains("Usage"));
    assert!(fails(&["frobnicate"], 2).contains("unrecognized subcommand"));
    assert!(fails(&["run"], 2).contains("<DIR>"));
    assert!(fails(&["show", "d", "--bogus"], 2).contains("--bogus"));
    assert!(fails(&["run", "d", "--overwrite"], 2).contains("--output-dir"));
}

#[test]
fn show_prints_the_signature_without_compiling() {
    let dir = temp_dir("show");
    step_export(&dir);
    let text = ok(&["show", path(&dir)]);
    for line in [
        "function 'step'",
        "x: TensorSpec(shape=(2,), dtype=f32)",
        "y: TensorSpec(shape=(), dtype=f32)",
        "output_0: TensorSpec(shape=(), dtype=f32)",
        "variable 0 'w': dtype=f32 shape=[2] (updated by calls)",
        "program 0 for input shapes [[2], []]",
    ] {
        assert!(text.contains(line), "{line}\n{text}");
    }
    let json: Value = serde_json::from_str(&ok(&["show", path(&dir), "--json"])).unwrap();
    assert_eq!(json["name"], "step");
    assert_eq!(json["inputs"][0]["shape"], serde_json::json!([2]));
    assert_eq!(json["variables"][0]["updated"], true);
    // `show` never hands the program to XLA: a program XLA could not
    // compile (but whose digests are right) is still shown.
    let program = dir.join("program_0.mlir");
    let text = std::fs::read_to_string(&program).unwrap();
    std::fs::write(
        &program,
        text.replace("stablehlo.multiply", "stablehlo.multiplx"),
    )
    .unwrap();
    xlafn::export::testing::resign(&dir).unwrap();
    assert!(ok(&["show", path(&dir)]).contains("function 'step'"));
    // `run` reads its inputs before compiling, so a wrong name is named
    // as such rather than lost behind the program's error.
    let e = fails(&["run", path(&dir), "--input-expr", "z=1"], 1);
    assert!(
        e.contains("no input named \"z\"; its inputs are 'x', 'y'"),
        "{e}"
    );
    let e = fails(
        &[
            "run",
            path(&dir),
            "--input-expr",
            "x=[1, 2]",
            "--input-expr",
            "y=3",
        ],
        1,
    );
    assert!(e.contains("stablehlo.multiplx"), "{e}");
}

#[test]
fn run_prints_outputs_like_numpy_and_as_json() {
    let dir = temp_dir("run");
    affine_export(&dir);
    let text = ok(&[
        "run",
        path(&dir),
        "--input-expr",
        "a=[[1, 2], [3, 4.5]]",
        "--input-expr",
        "b=41",
    ]);
    assert_eq!(
        text,
        "output_0: f32(2, 2)\n[[2.0, 4.0],\n [6.0, 9.0]]\noutput_1: i32()\n42\n"
    );
    let json: Value = serde_json::from_str(&ok(&[
        "run",
        path(&dir),
        "--input-expr",
        "a=np.full((2, 2), -0.25)",
        "--input-expr",
        "b=-1",
        "--json",
    ]))
    .unwrap();
    assert_eq!(
        json["outputs"][0]["values"],
        serde_json::json!([[-0.5, -0.5], [-0.5, -0.5]])
    );
    assert_eq!(json["outputs"][0]["dtype"], "f32");
    assert_eq!(json["outputs"][1]["values"], 0);
    assert_eq!(json["variables"], serde_json::json!([]));
}

#[test]
fn run_reads_npy_and_npz_inputs_and_writes_new_npy_files() {
    let dir = temp_dir("files");
    affine_export(&dir);
    let a = Tensor::from_vec(vec![1f32, -1., 0.5, 8.], &[2, 2]).unwrap();
    let b = Tensor::scalar(9i32);
    xlafn::io::write_npy(dir.join("a.npy"), &a).unwrap();
    xlafn::io::write_npz_compressed(dir.join("ab.npz"), &[("a", &a), ("b", &b)]).unwrap();
    let out = dir.join("out");
    let a_arg = format!("a={}", path(&dir.join("a.npy")));
    ok(&[
        "run",
        path(&dir),
        "--input",
        &a_arg,
        "--input-expr",
        "b=9",
        "--output-dir",
        path(&out),
    ]);
    let read = |f: &str| xlafn::io::read_npy(out.join(f)).unwrap();
    assert_eq!(
        read("output_0.npy").to_vec::<f32>().unwrap(),
        vec![2., -2., 1., 16.]
    );
    assert_eq!(read("output_1.npy").item::<i32>().unwrap(), 10);
    // Run again into the same folder: refused before anything is written,
    // unless --overwrite.
    let npz = path(&dir.join("ab.npz")).to_string();
    let again = [
        "run",
        path(&dir),
        "--inputs",
        &npz,
        "--output-dir",
        path(&out),
    ];
    assert!(fails(&again, 1).contains("already exists"));
    assert_eq!(read("output_1.npy").item::<i32>().unwrap(), 10);
    ok(&[&again[..], &["--overwrite"]].concat());
    assert_eq!(read("output_1.npy").item::<i32>().unwrap(), 10);
    assert_eq!(
        read("output_0.npy").to_vec::<f32>().unwrap(),
        vec![2., -2., 1., 16.]
    );
}

/// `tests/data/npy/several.npz`, written by NumPy's `savez`, feeds a
/// function of its four arrays: x = [[1, 2], [3, 4]] (f32), n = 7 (i64),
/// bf = [0.5, -3] (bf16 as ml_dtypes writes it), z = [1 - 1j] (c128).
#[test]
fn a_numpy_written_npz_feeds_every_input_by_name() {
    let dir = temp_dir("numpy-npz");
    let f = FunctionOptions::new()
        .name("four")
        .arg_names(&["x", "n", "bf", "z"])
        .build(
            |x: Tensor, n: Tensor, bf: Tensor, z: Tensor| -> Result<Vec<Tensor>> {
                Ok(vec![
                    x.mul_scalar(2.0)?,
                    n.add_scalar(1.0)?,
                    bf.mul_scalar(2.0)?,
                    z.mul(&z)?,
                ])
            },
        );
    let npz = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/npy/several.npz");
    let arrays = xlafn::io::read_npz(&npz).unwrap();
    let args: Vec<&Tensor> = ["x", "n", "bf", "z"]
        .iter()
        .map(|k| &arrays.iter().find(|(name, _)| name == k).unwrap().1)
        .collect();
    let cf = f
        .get_concrete_function((args[0], args[1], args[2], args[3]))
        .unwrap();
    cf.export(&dir, &[]).unwrap();
    let json: Value =
        serde_json::from_str(&ok(&["run", path(&dir), "--inputs", path(&npz), "--json"])).unwrap();
    let values: Vec<&Value> = (0..4).map(|k| &json["outputs"][k]["values"]).collect();
    assert_eq!(values[0], &serde_json::json!([[2.0, 4.0], [6.0, 8.0]]));
    assert_eq!(values[1], &serde_json::json!(8));
    assert_eq!(json["outputs"][2]["dtype"], "bf16");
    assert_eq!(values[2], &serde_json::json!([1.0, -6.0]));
    // (1 - i)^2 = 1 - 2i + i^2 = -2i.
    assert_eq!(values[3], &serde_json::json!([[0.0, -2.0]]));
    // An archive holding an array the function has no input for.
    let other = dir.join("other.npz");
    let w = Tensor::scalar(1f32);
    xlafn::io::write_npz(&other, &[("w", &w)]).unwrap();
    let e = fails(&["run", path(&dir), "--inputs", path(&other)], 1);
    assert!(
        e.contains("no input named \"w\"; its inputs are 'x', 'n', 'bf', 'z'"),
        "{e}"
    );
}

#[test]
fn updated_variables_are_written_beside_the_outputs() {
    let dir = temp_dir("variables");
    step_export(&dir);
    let out = dir.join("out");
    let args = [
        "run",
        path(&dir),
        "--input-expr",
        "x=[1, 2]",
        "--input-expr",
        "y=3",
    ];
    let text = ok(&[&args[..], &["--output-dir", path(&out)]].concat());
    assert!(
        text.contains("output_0: f32()") && text.contains("\n12.25\n"),
        "{text}"
    );
    assert!(text.contains("variable 0 'w' (updated): f32(2,)"), "{text}");
    let w = xlafn::io::read_npy(out.join("variable_0.npy"))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(
        (w[0] - 1.2).abs() < 1e-6 && (w[1] - 0.9).abs() < 1e-6,
        "{w:?}"
    );
    // The export itself is unchanged: a second run starts from w again.
    let json: Value = serde_json::from_str(&ok(&[&args[..], &["--json"]].concat())).unwrap();
    assert_eq!(json["outputs"][0]["values"], 12.25);
    assert_eq!(json["variables"][0]["name"], "w");
}

#[test]
fn wrong_and_missing_inputs_are_errors_naming_the_valid_ones() {
    let dir = temp_dir("names");
    affine_export(&dir);
    let d = path(&dir);
    let e = fails(&["run", d, "--input-expr", "c=1", "--input-expr", "b=1"], 1);
    assert!(
        e.contains("no input named \"c\"; its inputs are 'a', 'b'"),
        "{e}"
    );
    let e = fails(&["run", d, "--input-expr", "b=1"], 1);
    assert!(e.contains("input 'a' (f32(2, 2)) is missing"), "{e}");
    let e = fails(&["run", d, "--input-expr", "b=1", "--input-expr", "b=2"], 1);
    assert!(e.contains("input 'b' is given twice"), "{e}");
    let e = fails(
        &["run", d, "--input-expr", "a=[1, 2]", "--input-expr", "b=1"],
        1,
    );
    assert!(
        e.contains("Can not cast") && e.contains("argument a"),
        "{e}"
    );
    let e = fails(
        &[
            "run",
            d,
            "--input-expr",
            "a=zeros((2,2))",
            "--input-expr",
            "b=1.5",
        ],
        1,
    );
    assert!(e.contains("1.5 cannot be i32: not an integer"), "{e}");
    let e = fails(&["run", d, "--input", "a"], 1);
    assert!(e.contains("expected NAME="), "{e}");
    let e = fails(&["run", d, "--input", "a=/nonexistent.npy"], 1);
    assert!(e.contains("/nonexistent.npy"), "{e}");
    let junk = dir.join("junk.npz");
    std::fs::write(&junk, b"PK\x03\x04 not really").unwrap();
    let e = fails(&["run", d, "--inputs", path(&junk)], 1);
    assert!(
        e.contains("junk.npz") && e.contains("not a valid .npz"),
        "{e}"
    );
    let e = fails(&["show", path(&dir.join("missing"))], 1);
    assert!(e.contains("missing"), "{e}");
}

/// Deeply nested expressions are a clear error, not a stack overflow: one
/// depth bound covers lists, calls and shapes (12 000 nested `zeros(`
/// aborted the process; the bound restarted inside each shape).
#[test]
fn deeply_nested_input_expressions_are_errors() {
    let dir = temp_dir("nesting");
    affine_export(&dir);
    let d = path(&dir);
    for a in [
        format!("a={}(2, 2){}", "zeros(".repeat(12_000), ")".repeat(12_000)),
        format!("a={}2{}", "full(".repeat(12_000), ", 1)".repeat(12_000)),
        format!("a={}1{}", "[".repeat(50_000), "]".repeat(50_000)),
        format!("a=zeros({}2{})", "[".repeat(70), "]".repeat(70)),
    ] {
        let e = fails(&["run", d, "--input-expr", &a, "--input-expr", "b=1"], 1);
        assert!(
            e.contains("values (lists and calls) nested over 64 deep"),
            "{}",
            &e[..e.len().min(300)]
        );
    }
}

#[test]
fn stablehlo_prints_the_checked_program() {
    let dir = temp_dir("stablehlo");
    affine_export(&dir);
    let text = ok(&["stablehlo", path(&dir)]);
    assert_eq!(
        text,
        std::fs::read_to_string(dir.join("program_0.mlir")).unwrap()
    );
    assert!(
        text.contains("func.func public @main") && text.contains("stablehlo.multiply"),
        "{text}"
    );
    assert_eq!(ok(&["stablehlo", path(&dir), "--program", "0"]), text);
    let e = fails(&["stablehlo", path(&dir), "--program", "3"], 1);
    assert!(e.contains("there is no program 3"), "{e}");
}

/// `mm(a: f32[4, 8], b: f32[8, 2])`: 2 * 4 * 2 * 8 = 128 flops.
fn matmul_export(dir: &Path) {
    let f = FunctionOptions::new()
        .name("mm")
        .arg_names(&["a", "b"])
        .build(|a: Tensor, b: Tensor| a.matmul(&b));
    let a = Tensor::ones(&[4, 8], DType::F32);
    let b = Tensor::ones(&[8, 2], DType::F32);
    f.get_concrete_function((&a, &b))
        .unwrap()
        .export(dir, &[])
        .unwrap();
}

#[test]
fn show_cost_prints_xlas_analyses_of_each_program() {
    let dir = temp_dir("show-cost");
    matmul_export(&dir);
    let text = ok(&["show", path(&dir), "--cost"]);
    assert!(
        text.contains("program for input shapes [[4, 8], [8, 2]]"),
        "{text}"
    );
    assert!(
        text.contains("cost: 128 flops, 0 transcendentals"),
        "{text}"
    );
    assert!(
        text.contains("memory: arguments 192 B, outputs 32 B"),
        "{text}"
    );
    let json: Value =
        serde_json::from_str::<Value>(&ok(&["show", path(&dir), "--cost", "--json"])).unwrap();
    assert_eq!(json["costs"][0]["flops"], 128.0);
    assert_eq!(json["costs"][0]["argument_bytes"], 192);
    // Without --cost nothing is compiled, and nothing is printed about it.
    assert!(!ok(&["show", path(&dir)]).contains("flops"));
}

#[test]
fn bench_times_an_export_and_writes_json_and_a_chart() {
    let dir = temp_dir("bench");
    matmul_export(&dir);
    let out = temp_dir("bench-out");
    let (json, plot) = (out.join("bench.json"), out.join("bench.svg"));
    // Links planted at both outputs are replaced, not written through.
    let victim = out.join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, &json).unwrap();
    std::os::unix::fs::symlink(&victim, &plot).unwrap();
    let text = ok(&[
        "bench",
        path(&dir),
        "--quick",
        "--json",
        path(&json),
        "--plot",
        path(&plot),
    ]);
    assert!(
        text.contains("mm [[4, 8], [8, 2]]") && text.contains("compiled"),
        "{text}"
    );
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let row = &doc[0]["rows"][0];
    assert_eq!(row["mode"], "compiled");
    assert!(row["steady"]["median_us"].as_f64().unwrap() > 0.0, "{doc}");
    assert!(row["gflops"].as_f64().unwrap() > 0.0, "{doc}");
    assert_eq!(doc[0]["flops"], 128.0);
    assert!(std::fs::read_to_string(&plot).unwrap().starts_with("<svg"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for p in [&json, &plot] {
        assert!(std::fs::symlink_metadata(p).unwrap().is_file(), "{p:?}");
    }
}

#[test]
fn a_closed_stdout_ends_run_quietly_instead_of_panicking() {
    // `xlafn run ... | head -0`: the reader is gone before anything is
    // printed. Rust ignores SIGPIPE, so the write fails with EPIPE, on
    // which `println!` would panic; the tool exits with 141 (what a shell
    // reports for SIGPIPE) and says nothing.
    let dir = temp_dir("epipe");
    affine_export(&dir);
    let mut child = Command::new(tool::xlafn_tool())
        .args([
            "run",
            path(&dir),
            "--input-expr",
            "a=[[1, 2], [3, 4]]",
            "--input-expr",
            "b=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(120) {
            child.kill().ok();
            panic!("xlafn run with a closed stdout did not exit");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(141), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.is_empty(), "{err}");
}
