//! Export and load: round trips within the process and through the `xlafn`
//! command-line tool in a second process, a function with variables (a
//! training step), one with a while_loop, and damaged exports.

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

use std::path::{Path, PathBuf};
use std::process::Command;
use xlafn::export::npy;
use xlafn::prelude::*;

fn temp_dir(tag: &str) -> scratch::ScratchDir {
    scratch::scratch_dir(&format!("export-{tag}"))
}

fn write_npy(path: &Path, t: &Tensor) {
    std::fs::write(path, npy::encode(&t.to_host_array().unwrap()).unwrap()).unwrap();
}

fn read_npy(path: &Path) -> Vec<f32> {
    npy::decode(&std::fs::read(path).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap()
}

fn cli(args: &[&str]) -> std::process::Output {
    Command::new(tool::xlafn_tool())
        .args(args)
        .output()
        .unwrap()
}

/// `xlafn run DIR --input name=DIR/name.npy ... --output-dir DIR/out` in
/// another process, with `inputs` written as `.npy` files first; returns
/// the first output. Fails the test with the tool's stderr if it fails.
fn run_cli(dir: &Path, inputs: &[(&str, &Tensor)]) -> Vec<f32> {
    let mut args = vec!["run".to_string(), dir.display().to_string()];
    for (name, t) in inputs {
        let path = dir.join(format!("{name}.npy"));
        write_npy(&path, t);
        args.extend(["--input".to_string(), format!("{name}={}", path.display())]);
    }
    let out = dir.join("out");
    args.extend(["--output-dir".to_string(), out.display().to_string()]);
    let ran = cli(&args.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    read_npy(&out.join("output_0.npy"))
}

#[test]
fn a_while_loop_function_round_trips_through_another_process() {
    let f = FunctionOptions::new()
        .name("decay")
        .arg_names(&["x", "n"])
        .build(|x: Tensor, n: Tensor| for_range(0, &n, 1, x, |_i, x: Tensor| &x * 0.99 + 0.01));
    let x = Tensor::vector(&[1f32, 0.5, -2.0]).unwrap();
    let n = Tensor::scalar(25i32);
    let expected = f.call((&x, &n)).unwrap().to_vec::<f32>().unwrap();
    let dir = temp_dir("while");
    let cf = f.get_concrete_function((&x, &n)).unwrap();
    cf.export(&dir, &[]).unwrap();

    // In this process.
    let loaded = xlafn::load(&dir).unwrap();
    assert_eq!(
        loaded.call(&[&x, &n]).unwrap()[0].to_vec::<f32>().unwrap(),
        expected
    );
    // Wrong inputs are refused with the signature's words.
    let e = loaded
        .call(&[&Tensor::vector(&[1f32]).unwrap(), &n])
        .unwrap_err();
    assert!(e.to_string().contains("Can not cast"), "{e}");

    // In another process, through the CLI.
    let shown = cli(&["show", dir.to_str().unwrap()]);
    let text = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    assert!(
        text.contains("x: TensorSpec(shape=(3,), dtype=f32)")
            && text.contains("n: TensorSpec(shape=(), dtype=i32)"),
        "{text}"
    );
    assert_eq!(run_cli(&dir, &[("x", &x), ("n", &n)]), expected);
}

#[test]
fn a_training_step_with_variables_keeps_training_after_loading() {
    let w = Variable::new(Tensor::vector(&[0.5f32, -0.5]).unwrap());
    let step = FunctionOptions::new()
        .name("step")
        .arg_names(&["x", "y"])
        .build({
            let w = w.clone();
            move |x: Tensor, y: Tensor| -> Result<Tensor> {
                let tape = GradientTape::new();
                let loss = x
                    .mul(&w.read())?
                    .reduce_sum(&[], false)?
                    .sub(&y)?
                    .square()?;
                let g = tape.gradient(&loss, &[(&w).into()])?;
                w.assign_sub(&g[0].clone().unwrap().mul_scalar(0.1)?)?;
                Ok(loss)
            }
        });
    let x = Tensor::vector(&[1f32, 2.0]).unwrap();
    let y = Tensor::scalar(3f32);
    let cf = step.get_concrete_function((&x, &y)).unwrap();
    let dir = temp_dir("train");
    cf.export(&dir, &[]).unwrap();
    // The original keeps training from the exported state...
    let mut original = Vec::new();
    for _ in 0..3 {
        original.push(step.call((&x, &y)).unwrap().item::<f32>().unwrap());
    }
    // ...and so does the loaded copy, with its own variables.
    let loaded = xlafn::load(&dir).unwrap();
    let mut copy = Vec::new();
    for _ in 0..3 {
        copy.push(loaded.call(&[&x, &y]).unwrap()[0].item::<f32>().unwrap());
    }
    assert_eq!(copy, original);
    assert!(copy[2] < copy[0]);
    assert_eq!(
        loaded.variables()[0].read().to_vec::<f32>().unwrap(),
        w.read().to_vec::<f32>().unwrap()
    );
    // In a second process: the CLI loads the variables from the export
    // (the state before the three steps above) and runs one step.
    assert_eq!(run_cli(&dir, &[("x", &x), ("y", &y)]), vec![original[0]]);
}

#[test]
fn the_implemented_operation_is_kept_in_exports() {
    let f = FunctionOptions::new()
        .name("softplus")
        .implements("my_ops.softplus")
        .build(|x: Tensor| -> Result<Tensor> { x.exp()?.add_scalar(1.0)?.log() });
    let x = Tensor::vector(&[0f32, 1.0]).unwrap();
    let cf = f.get_concrete_function((&x,)).unwrap();
    assert_eq!(cf.implements(), Some("my_ops.softplus"));
    let dir = temp_dir("implements");
    cf.export(&dir, &[]).unwrap();
    assert_eq!(
        xlafn::load(&dir).unwrap().implements(),
        Some("my_ops.softplus")
    );
    let shown = cli(&["show", dir.to_str().unwrap()]);
    assert!(
        String::from_utf8_lossy(&shown.stdout).contains("implements: my_ops.softplus"),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
}

#[test]
fn unknown_dims_export_one_program_per_requested_shape() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|x: Tensor| x.square());
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let dir = temp_dir("shapes");
    assert!(cf.export(&dir, &[]).is_err(), "unknown dims need shapes");
    cf.export(&dir, &[vec![vec![2]], vec![vec![3]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    assert_eq!(loaded.specializations(), vec![vec![vec![2]], vec![vec![3]]]);
    let v = loaded
        .call(&[&Tensor::vector(&[1f32, 2., 3.]).unwrap()])
        .unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(v, vec![1., 4., 9.]);
    // A shape not listed is compiled from the saved graph.
    let v = loaded
        .call(&[&Tensor::vector(&[2f32; 5]).unwrap()])
        .unwrap()[0]
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(v, vec![4.; 5]);
    assert_eq!(
        loaded.specializations(),
        vec![vec![vec![2]], vec![vec![3]], vec![vec![5]]]
    );
}

#[test]
fn damaged_exports_give_errors_not_crashes() {
    let c = Tensor::vector(&[10f32, 20.]).unwrap();
    let f = function(move |x: Tensor| &x + &c);
    let x = Tensor::vector(&[1f32, 2.]).unwrap();
    let dir = temp_dir("damage");
    f.get_concrete_function((&x,))
        .unwrap()
        .export(&dir, &[])
        .unwrap();
    let files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    // Deterministic pseudo-random corruption: flips, truncations, appends.
    let mut seed = 12345u64;
    let mut next = || {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) as usize
    };
    for round in 0..60 {
        let victim = &files[next() % files.len()];
        let original = std::fs::read(victim).unwrap();
        let mut damaged = original.clone();
        match round % 3 {
            0 if !damaged.is_empty() => {
                let i = next() % damaged.len();
                damaged[i] ^= 1 << (next() % 8);
            }
            1 => damaged.truncate(next() % (original.len() + 1)),
            _ => damaged.extend_from_slice(b"{\"junk\": 1}"),
        }
        std::fs::write(victim, &damaged).unwrap();
        // Loading either fails with an error or (for harmless damage such as
        // JSON whitespace) works and computes the right values.
        if let Ok(loaded) = xlafn::load(&dir) {
            assert_eq!(
                loaded.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap(),
                vec![11., 22.]
            );
        }
        std::fs::write(victim, &original).unwrap();
    }
    // A newer version is refused by name (once signed, so that the
    // version check, not the digest, speaks).
    let manifest = dir.join("xlafn_export.json");
    let text = std::fs::read_to_string(&manifest).unwrap().replace(
        &format!("\"version\": {}", xlafn::export::VERSION),
        "\"version\": 99",
    );
    std::fs::write(&manifest, text).unwrap();
    xlafn::export::testing::resign(&dir).unwrap();
    let e = xlafn::load(&dir).expect_err("version 99 refused");
    assert!(e.to_string().contains("version 99"), "{e}");
}

/// A program whose gathers and scatters have batching dimensions (the
/// label gather of a sparse cross-entropy and its gradient) exports and
/// loads: the export check once refused `operand_batching_dims`.
#[test]
fn gathers_and_scatters_with_batching_dims_round_trip() {
    let f = function(
        |logits: Tensor, labels: Tensor| -> Result<(Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(&logits);
            let loss = xlafn::nn::sparse_softmax_cross_entropy_with_logits(&labels, &logits)?
                .reduce_mean(&[], false)?;
            let g = tape.gradient(&loss, &[Source::from(&logits)])?;
            Ok((loss, g[0].clone().unwrap()))
        },
    );
    let rows = [[0.1f32, 0.2, 0.3], [0.4, 0.5, 0.6]];
    let labels = [0usize, 2];
    let logits = Tensor::from_vec(rows.concat(), &[2, 3]).unwrap();
    let ids = Tensor::from_vec(labels.iter().map(|&l| l as i32).collect(), &[2]).unwrap();
    let dir = temp_dir("batching-dims");
    f.get_concrete_function((&logits, &ids))
        .unwrap()
        .export(&dir, &[])
        .unwrap();
    let text = std::fs::read_to_string(dir.join("program_0.mlir")).unwrap();
    assert!(text.contains("operand_batching_dims"), "{text}");
    assert!(text.contains("input_batching_dims"), "{text}");
    let out = xlafn::load(&dir).unwrap().call(&[&logits, &ids]).unwrap();
    // By hand: softmax per row, the mean of -log p[label], and its
    // gradient (p - one_hot(label)) / rows.
    let (mut loss, mut grad) = (0.0, Vec::new());
    for (row, &label) in rows.iter().zip(&labels) {
        let z: f64 = row.iter().map(|&x| (x as f64).exp()).sum();
        for (j, &x) in row.iter().enumerate() {
            let p = (x as f64).exp() / z;
            grad.push((p - f64::from(u8::from(j == label))) / 2.0);
        }
        loss -= ((row[label] as f64).exp() / z).ln() / 2.0;
    }
    assert!((out[0].item::<f32>().unwrap() as f64 - loss).abs() < 1e-6);
    for (got, want) in out[1].to_vec::<f32>().unwrap().iter().zip(&grad) {
        assert!((*got as f64 - want).abs() < 1e-6, "{got} vs {want}");
    }
}

/// Ops written with custom gradients (`solve`, `det`, `cumprod`) export:
/// the custom-gradient op is written as the identity it computes, and the
/// loaded function serves the listed batch and, from the saved graph, a
/// batch no program was compiled for.
#[test]
fn functions_built_on_custom_gradients_export_and_specialize() {
    let f = FunctionOptions::new()
        .input_signature(vec![
            TensorSpec::new(&[None, Some(2), Some(2)], DType::F32),
            TensorSpec::new(&[None, Some(2)], DType::F32),
        ])
        .build(|a: Tensor, b: Tensor| {
            let x = a.solve(&b)?;
            Ok((x.cumprod(-1, false, false)?, a.det()?))
        });
    let batch = |n: usize| {
        let a: Vec<f32> = (0..n)
            .flat_map(|i| [2.0 + i as f32, 1.0, 1.0, 3.0])
            .collect();
        let b: Vec<f32> = (0..n).flat_map(|i| [1.0, 2.0 - i as f32]).collect();
        (
            Tensor::from_vec(a, &[n as i64, 2, 2]).unwrap(),
            Tensor::from_vec(b, &[n as i64, 2]).unwrap(),
        )
    };
    let cf = f
        .get_concrete_function((
            TensorSpec::new(&[None, Some(2), Some(2)], DType::F32),
            TensorSpec::new(&[None, Some(2)], DType::F32),
        ))
        .unwrap();
    let dir = temp_dir("custom-gradient");
    cf.export(&dir, &[vec![vec![2, 2, 2], vec![2, 2]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    for n in [2, 3] {
        let (a, b) = batch(n);
        let (want_x, want_det) = f.call((&a, &b)).unwrap();
        let got = loaded.call(&[&a, &b]).unwrap();
        assert_eq!(
            got[0].to_vec::<f32>().unwrap(),
            want_x.to_vec::<f32>().unwrap()
        );
        assert_eq!(
            got[1].to_vec::<f32>().unwrap(),
            want_det.to_vec::<f32>().unwrap()
        );
        // det [[2 + i, 1], [1, 3]] = 5 + 3i, by hand.
        let dets: Vec<f32> = (0..n).map(|i| 5.0 + 3.0 * i as f32).collect();
        assert_eq!(got[1].to_vec::<f32>().unwrap(), dets);
    }
    assert_eq!(loaded.specializations().len(), 2);
}
