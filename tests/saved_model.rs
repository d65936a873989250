//! TensorFlow SavedModels written by xlafn (`export_saved_model`), loaded
//! and called by TensorFlow itself: an MLP, a CNN with batch norm, an LSTM
//! (its time loop a device `while`), a transformer block and a training
//! step that updates its variables each give xlafn's own outputs within
//! 1e-6 through `signatures["serving_default"]`; `tf.train.load_checkpoint`
//! reads the variables back; `saved_model_cli show --all` lists the
//! signature; a TensorFlow 1 loader (a session restoring through the
//! meta graph's saver, as TF Serving loads) gives the same outputs. Written by xlafn alone, checked by TensorFlow 2.21 run by
//! `scripts/tf_saved_model.py`.
//!
//! TensorFlow is found at `$XLAFN_TENSORFLOW_PYTHON`, or in the
//! environment `scripts/setup-tensorflow.sh` sets up; without it the tests
//! that need it say they were skipped.

#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use xlafn::ArraySpec;
use xlafn::export::npy;
use xlafn::module::Module;
use xlafn::nn::layers::*;
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

/// The Python of a TensorFlow 2 environment, or `None` (with the line
/// saying so) where there is none.
fn tensorflow() -> Option<PathBuf> {
    let python = match std::env::var_os("XLAFN_TENSORFLOW_PYTHON") {
        Some(p) => PathBuf::from(p),
        None => PathBuf::from(std::env::var_os("HOME").unwrap_or_default())
            .join(".cache/xlafn/tensorflow-venv/bin/python"),
    };
    match python.is_file() {
        true => Some(python),
        false => {
            eprintln!(
                "skipped: no TensorFlow at {} (scripts/setup-tensorflow.sh sets one up, or set \
                 XLAFN_TENSORFLOW_PYTHON)",
                python.display()
            );
            None
        }
    }
}

/// What TensorFlow saw of a SavedModel.
struct TfView {
    outputs: BTreeMap<String, HostArray>,
    /// The same signature's outputs through a TensorFlow 1 loader (TF
    /// Serving's way: a session, the meta graph's saver, `signature_def`).
    tf1_outputs: BTreeMap<String, HostArray>,
    signatures: Vec<String>,
    /// Checkpoint key to value, as `tf.train.load_checkpoint` reads them.
    checkpoint: BTreeMap<String, HostArray>,
    /// Each variable of the loaded object after the call, by its name.
    variables: BTreeMap<String, HostArray>,
}

fn read_npy(path: &Path) -> HostArray {
    npy::decode(&std::fs::read(path).unwrap()).unwrap()
}

/// Loads `saved_model` in TensorFlow and calls `signature` with `inputs`.
fn in_tensorflow(
    python: &Path,
    saved_model: &Path,
    inputs: &[(&str, &Tensor)],
    signature: &str,
) -> TfView {
    let scratch = saved_model.parent().unwrap();
    let (feeds, out) = (scratch.join("feeds"), scratch.join("tf"));
    let _ = std::fs::remove_dir_all(&feeds);
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&feeds).unwrap();
    for (name, t) in inputs {
        let bytes = npy::encode(&t.to_host_array().unwrap()).unwrap();
        std::fs::write(feeds.join(format!("{name}.npy")), bytes).unwrap();
    }
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/tf_saved_model.py");
    let ran = Command::new(python)
        .arg(&script)
        .args([saved_model, &feeds, &out])
        .args(["--signature", signature])
        .output()
        .unwrap();
    assert!(
        ran.status.success(),
        "TensorFlow failed on {}:\n{}",
        saved_model.display(),
        String::from_utf8_lossy(&ran.stderr)
    );
    let text = |name: &str| std::fs::read_to_string(out.join(name)).unwrap();
    let arrays = |dir: &Path| -> BTreeMap<String, HostArray> {
        let mut found = BTreeMap::new();
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "npy") {
                let name = path.file_stem().unwrap().to_string_lossy().into_owned();
                found.insert(name, read_npy(&path));
            }
        }
        found
    };
    let (outputs, tf1_outputs) = (arrays(&out), arrays(&out.join("tf1")));
    let checkpoint = text("checkpoint.txt")
        .lines()
        .map(|l| {
            let (n, key) = l.split_once(' ').unwrap();
            let value = read_npy(&out.join("checkpoint").join(format!("{n}.npy")));
            (key.to_string(), value)
        })
        .collect();
    TfView {
        outputs,
        tf1_outputs,
        signatures: text("signatures.txt").lines().map(String::from).collect(),
        checkpoint,
        variables: text("variables.txt")
            .lines()
            .map(|l| {
                let (n, name) = l.split_once(' ').unwrap();
                let value = read_npy(&out.join("variables").join(format!("{n}.npy")));
                (name.to_string(), value)
            })
            .collect(),
    }
}

fn f64s(a: &HostArray) -> Vec<f64> {
    match a.dtype {
        DType::F32 => a
            .to_vec::<f32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        DType::F64 => a.to_vec::<f64>().unwrap(),
        DType::I32 => a
            .to_vec::<i32>()
            .unwrap()
            .into_iter()
            .map(f64::from)
            .collect(),
        other => panic!("compare {other} values"),
    }
}

/// `got` is `want` (same dtype and shape) within `tol` of each element,
/// relative to the element's size where that is above 1.
fn assert_close(got: &HostArray, want: &HostArray, tol: f64, what: &str) -> f64 {
    assert_eq!((got.dtype, &got.dims), (want.dtype, &want.dims), "{what}");
    let worst = f64s(got)
        .iter()
        .zip(f64s(want))
        .map(|(g, w)| (g - w).abs() / w.abs().max(1.0))
        .fold(0.0, f64::max);
    assert!(worst <= tol, "{what}: off by {worst:e}");
    worst
}

/// `saved_model_cli show --all` of `dir`, from the environment of
/// `python`.
fn saved_model_cli(python: &Path, dir: &Path) -> String {
    let cli = python.with_file_name("saved_model_cli");
    let shown = Command::new(&cli)
        .args(["show", "--all", "--dir"])
        .arg(dir)
        .env("TF_CPP_MIN_LOG_LEVEL", "3")
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    String::from_utf8_lossy(&shown.stdout).into_owned()
}

fn key(seed: u64) -> Result<Tensor> {
    xlafn::random::key(seed)
}

fn normal(dims: &[i64], seed: u64) -> Tensor {
    xlafn::random::normal(
        &xlafn::random::key(seed).unwrap(),
        dims,
        DType::F32,
        0.0,
        1.0,
    )
    .unwrap()
}

/// Exports `f` of one input, called `name`, as a SavedModel, runs it in
/// TensorFlow on `x`, and checks TensorFlow's output against xlafn's and
/// the checkpoint against `model`'s variables. Returns the StableHLO
/// the SavedModel carries (empty where TensorFlow is missing).
fn check_in_tensorflow<F>(tag: &str, f: F, (name, x): (&str, Tensor), model: &dyn Module) -> String
where
    F: Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
{
    let Some(python) = tensorflow() else {
        return String::new();
    };
    // Listing a module's variables names each by its path, which the
    // export keeps and TensorFlow then shows.
    let variables = model.variables();
    let scratch = scratch::scratch_dir(&format!("saved-model-{tag}"));
    let dir = scratch.join("saved_model");
    let function = FunctionOptions::new()
        .arg_names(&[name])
        .build(move |x: Tensor| f(&x));
    let concrete = function
        .get_concrete_function((TensorSpec::known(&x.dims(), x.dtype()),))
        .unwrap();
    concrete.export_saved_model(&dir, &[]).unwrap();
    let want = function.call((&x,)).unwrap().to_host_array().unwrap();
    let tf = in_tensorflow(&python, &dir, &[(name, &x)], "serving_default");
    assert_eq!(tf.signatures, ["serving_default"]);
    assert_eq!(tf.outputs.len(), 1, "{:?}", tf.outputs.keys());
    let worst = assert_close(&tf.outputs["output_0"], &want, 1e-6, tag);
    assert_close(
        &tf.tf1_outputs["output_0"],
        &want,
        1e-6,
        &format!("{tag} (TF1)"),
    );
    let shown = saved_model_cli(&python, &dir);
    let input = format!("inputs['{name}'] tensor_info:");
    assert!(
        shown.contains("signature_def['serving_default']:") && shown.contains(&input),
        "{shown}"
    );
    // Every variable, read back from the checkpoint by TensorFlow.
    assert_eq!(
        tf.checkpoint.len(),
        variables.len(),
        "{:?}",
        tf.checkpoint.keys()
    );
    assert_eq!(
        tf.variables.len(),
        variables.len(),
        "{:?}",
        tf.variables.keys()
    );
    for v in &variables {
        let value = v.read().to_host_array().unwrap();
        let found = tf
            .checkpoint
            .values()
            .any(|c| c.dims == value.dims && c.bytes == value.bytes);
        assert!(found, "{tag}: no checkpoint entry holds {}", v.name());
    }
    println!(
        "{tag}: TensorFlow gave xlafn's output within {worst:e}; {} variables: {:?}",
        variables.len(),
        tf.checkpoint.keys().collect::<Vec<_>>()
    );
    let spec = ArraySpec::new(x.dtype(), &x.dims());
    concrete.stablehlo(&[spec]).unwrap()
}

#[test]
fn tensorflow_runs_an_mlp_exported_by_xlafn() {
    let model = Arc::new(
        Sequential::new()
            .add(Linear::new(&key(1).unwrap(), 3, 16).unwrap())
            .add(Activation::Relu)
            .add(Linear::new(&key(2).unwrap(), 16, 2).unwrap()),
    );
    let m = model.clone();
    check_in_tensorflow(
        "mlp",
        move |x| m.forward(x),
        ("x", normal(&[4, 3], 3)),
        &*model,
    );
}

#[test]
fn tensorflow_runs_a_cnn_with_batch_norm_exported_by_xlafn() {
    let model = Arc::new(
        Sequential::new()
            .add(Conv2d::new(&key(4).unwrap(), 3, 8, [3, 3]).unwrap())
            .add(BatchNorm::new(8, DType::F32).unwrap())
            .add(Activation::Relu)
            .add(GlobalAvgPool::new())
            .add(Linear::new(&key(5).unwrap(), 8, 3).unwrap()),
    );
    // Moving statistics other than the initial zeros and ones.
    for v in model.variables() {
        if v.name().ends_with("moving_mean") {
            v.assign(&normal(v.dims(), 14).mul_scalar(0.1).unwrap())
                .unwrap();
        }
        if v.name().ends_with("moving_variance") {
            v.assign(&v.read().mul_scalar(1.5).unwrap()).unwrap();
        }
    }
    let m = model.clone();
    check_in_tensorflow(
        "cnn",
        move |x| m.call(x, &Mode::inference()),
        ("images", normal(&[2, 8, 8, 3], 6)),
        &*model,
    );
}

#[test]
fn tensorflow_runs_an_lstm_exported_by_xlafn() {
    let lstm = Arc::new(Lstm::new(&key(7).unwrap(), 6).unwrap());
    // Built on a first call, so that its weights exist before the export.
    lstm.call(&normal(&[2, 5, 3], 8), &Mode::inference())
        .unwrap();
    let l = lstm.clone();
    let program = check_in_tensorflow(
        "lstm",
        move |x| l.call(x, &Mode::inference()),
        ("sequence", normal(&[2, 5, 3], 9)),
        &*lstm,
    );
    // The time steps run in a loop on the device, inside TensorFlow too.
    assert!(program.is_empty() || program.contains("stablehlo.while"));
}

#[test]
fn tensorflow_runs_a_transformer_block_exported_by_xlafn() {
    struct Block {
        attention: MultiHeadAttention,
        norm1: LayerNorm,
        mlp: Sequential,
        norm2: LayerNorm,
    }
    impl Module for Block {
        fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
            self.attention
                .visit_variables(&format!("{prefix}attention."), f);
            self.norm1.visit_variables(&format!("{prefix}norm1."), f);
            self.mlp.visit_variables(&format!("{prefix}mlp."), f);
            self.norm2.visit_variables(&format!("{prefix}norm2."), f);
        }
    }
    let block = Arc::new(Block {
        attention: MultiHeadAttention::new(&key(10).unwrap(), 2, 4).unwrap(),
        norm1: LayerNorm::new(8).unwrap(),
        mlp: Sequential::new()
            .add(Linear::new(&key(11).unwrap(), 8, 16).unwrap())
            .add(Activation::Gelu { approximate: false })
            .add(Linear::new(&key(12).unwrap(), 16, 8).unwrap()),
        norm2: LayerNorm::new(8).unwrap(),
    });
    let x = normal(&[2, 4, 8], 13);
    block.attention.call(&x, &Mode::inference()).unwrap();
    let b = block.clone();
    check_in_tensorflow(
        "transformer",
        move |x| {
            let mode = Mode::inference();
            let h = b.norm1.call(&x.add(&b.attention.call(x, &mode)?)?, &mode)?;
            b.norm2.call(&h.add(&b.mlp.call(&h, &mode)?)?, &mode)
        },
        ("tokens", x),
        &*block,
    );
}

/// A training step: TensorFlow's call runs the step from the exported
/// weights and updates its own variables to what xlafn's step gives.
#[test]
fn tensorflow_runs_a_training_step_that_updates_its_variables() {
    let Some(python) = tensorflow() else { return };
    let scratch = scratch::scratch_dir("saved-model-step");
    let dir = scratch.join("saved_model");
    let w = Variable::new(normal(&[3, 2], 20)).named("w");
    let step = FunctionOptions::new().arg_names(&["x"]).build({
        let w = w.clone();
        move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = x.matmul(&w.read())?.square()?.reduce_sum(&[0, 1], false)?;
            let g = tape
                .gradient(&loss, &[(&w).into()])?
                .remove(0)
                .expect("w is watched");
            w.assign_sub(&g.mul_scalar(0.01)?)?;
            Ok(loss)
        }
    });
    let x = normal(&[4, 3], 21);
    let concrete = step
        .get_concrete_function((TensorSpec::known(&[4, 3], DType::F32),))
        .unwrap();
    concrete.export_saved_model(&dir, &[]).unwrap();
    let before = w.read().to_host_array().unwrap();
    let loss = step.call((&x,)).unwrap().to_host_array().unwrap();
    let after = w.read().to_host_array().unwrap();
    assert_ne!(before.bytes, after.bytes, "the step moved w");
    let tf = in_tensorflow(&python, &dir, &[("x", &x)], "serving_default");
    assert_close(&tf.outputs["output_0"], &loss, 1e-6, "the loss");
    assert_close(&tf.tf1_outputs["output_0"], &loss, 1e-6, "the loss (TF1)");
    assert_close(&tf.variables["w:0"], &after, 1e-6, "w after the step");
    assert_eq!(
        tf.checkpoint["w/.ATTRIBUTES/VARIABLE_VALUE"].bytes,
        before.bytes
    );
}

/// An export of two shapes is two signatures, each callable.
#[test]
fn each_exported_shape_is_a_signature() {
    let Some(python) = tensorflow() else { return };
    let scratch = scratch::scratch_dir("saved-model-shapes");
    let dir = scratch.join("saved_model");
    let f = FunctionOptions::new()
        .arg_names(&["x"])
        .input_signature(vec![TensorSpec::new(&[None, Some(3)], DType::F32)])
        .build(|x: Tensor| x.square()?.reduce_sum(&[1], false));
    let concrete = f
        .get_concrete_function((TensorSpec::new(&[None, Some(3)], DType::F32),))
        .unwrap();
    concrete
        .export_saved_model(&dir, &[vec![vec![2, 3]], vec![vec![5, 3]]])
        .unwrap();
    let x = normal(&[5, 3], 22);
    let want = f.call((&x,)).unwrap().to_host_array().unwrap();
    let tf = in_tensorflow(&python, &dir, &[("x", &x)], "serving_1");
    let mut signatures = tf.signatures.clone();
    signatures.sort();
    assert_eq!(signatures, ["serving_1", "serving_default"]);
    assert_close(&tf.outputs["output_0"], &want, 1e-6, "serving_1");
    let shown = saved_model_cli(&python, &dir);
    assert!(shown.contains("signature_def['serving_1']:"), "{shown}");
}

/// TensorFlow cannot call back into Rust: a function that prints is
/// refused, naming the callback, and nothing is left behind.
#[test]
fn a_function_with_host_callbacks_is_refused() {
    let scratch = scratch::scratch_dir("saved-model-callbacks");
    let dir = scratch.join("saved_model");
    let f = function(|x: Tensor| -> Result<Tensor> {
        xlafn::print("x =", &[&x])?;
        x.mul_scalar(2.0)
    });
    let concrete = f
        .get_concrete_function((TensorSpec::known(&[2], DType::F32),))
        .unwrap();
    let e = concrete
        .export_saved_model(&dir, &[])
        .unwrap_err()
        .to_string();
    assert!(
        e.starts_with(
            "UnimplementedError: SavedModel export: the function calls host callbacks (a print)"
        ),
        "{e}"
    );
    assert!(!dir.exists());
    let leftovers: Vec<_> = std::fs::read_dir(&*scratch).unwrap().collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

/// `xlafn export DIR --format saved_model --out OUT` converts an export
/// folder; an existing `OUT` is refused, not overwritten.
#[test]
fn the_tool_converts_an_export_folder() {
    let scratch = scratch::scratch_dir("saved-model-tool");
    let (export, out) = (scratch.join("export"), scratch.join("saved_model"));
    let w = Variable::new(normal(&[3], 30)).named("scale");
    let f = FunctionOptions::new().arg_names(&["x"]).build({
        let w = w.clone();
        move |x: Tensor| x.mul(&w.read())
    });
    let concrete = f
        .get_concrete_function((TensorSpec::known(&[2, 3], DType::F32),))
        .unwrap();
    concrete.export(&export, &[]).unwrap();
    let convert = || {
        Command::new(tool::xlafn_tool())
            .arg("export")
            .arg(&export)
            .args(["--format", "saved_model", "--out"])
            .arg(&out)
            .output()
            .unwrap()
    };
    let ran = convert();
    assert!(
        ran.status.success(),
        "{}",
        String::from_utf8_lossy(&ran.stderr)
    );
    assert!(out.join("saved_model.pb").is_file());
    let again = convert();
    assert!(!again.status.success());
    let e = String::from_utf8_lossy(&again.stderr);
    assert!(e.contains("exists"), "{e}");
    let Some(python) = tensorflow() else { return };
    let x = normal(&[2, 3], 31);
    let want = f.call((&x,)).unwrap().to_host_array().unwrap();
    let tf = in_tensorflow(&python, &out, &[("x", &x)], "serving_default");
    assert_close(&tf.outputs["output_0"], &want, 1e-6, "the converted export");
    assert!(
        tf.variables.contains_key("scale:0"),
        "{:?}",
        tf.variables.keys()
    );
}

/// A function with a variable, a captured constant and an update, as the
/// reverse-direction tests use it: `y = x * w + c`, then `w += x`.
fn stateful_function() -> (Variable, Function<(Tensor,), Tensor>) {
    let w = Variable::new(Tensor::vector(&[1f32, 2., 3.]).unwrap()).named("w");
    let c = Tensor::vector(&[0.5f32, -0.5, 0.25]).unwrap();
    let f = FunctionOptions::new().arg_names(&["x"]).build({
        let w = w.clone();
        move |x: Tensor| -> Result<Tensor> {
            let y = x.mul(&w.read())?.add(&c)?;
            w.assign_add(&x)?;
            Ok(y)
        }
    });
    (w, f)
}

fn write_stateful_saved_model(dir: &Path) -> Function<(Tensor,), Tensor> {
    let (_, f) = stateful_function();
    let concrete = f
        .get_concrete_function((TensorSpec::known(&[3], DType::F32),))
        .unwrap();
    concrete.export_saved_model(dir, &[]).unwrap();
    f
}

/// `xlafn::load` and `xlafn::inspect` read a SavedModel xlafn wrote: the
/// module and the weights are xlafn's own.
#[test]
fn xlafn_loads_a_saved_model_it_wrote() {
    let scratch = scratch::scratch_dir("saved-model-load");
    let dir = scratch.join("saved_model");
    let f = write_stateful_saved_model(&dir);
    let loaded = xlafn::load(&dir).unwrap();
    let x = Tensor::vector(&[2f32, 0., -1.]).unwrap();
    let got = loaded.call(&[&x]).unwrap();
    let want = f.call((&x,)).unwrap();
    assert_eq!(
        got[0].to_vec::<f32>().unwrap(),
        want.to_vec::<f32>().unwrap()
    );
    // Its own copy of w moved by x, as the original's did.
    assert_eq!(
        loaded.variables()[0].read().to_vec::<f32>().unwrap(),
        [3., 2., 2.]
    );
    let info = xlafn::export::inspect(&dir).unwrap();
    assert_eq!(info.inputs[0].name, "x");
    assert_eq!(
        (info.variables[0].name.as_str(), info.variables[0].updated),
        ("w", true)
    );
    assert!(info.program_text(0).unwrap().contains("stablehlo.multiply"));
    // The tool too.
    let shown = Command::new(tool::xlafn_tool())
        .arg("show")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        shown.status.success(),
        "{}",
        String::from_utf8_lossy(&shown.stderr)
    );
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("x: TensorSpec(shape=(3,), dtype=f32)"),
        "{shown}"
    );
}

/// Damaged and crafted SavedModels are refused with an error (or, where a
/// flipped byte leaves a valid model, loaded), never a crash.
#[test]
fn damaged_saved_models_are_refused_cleanly() {
    let scratch = scratch::scratch_dir("saved-model-damaged");
    let dir = scratch.join("saved_model");
    write_stateful_saved_model(&dir);
    let pb_path = dir.join("saved_model.pb");
    let pb = std::fs::read(&pb_path).unwrap();
    // A copy with `pb` as its saved_model.pb, its digests made again (as
    // one who crafts a model would), so that the checks behind them run.
    let copy = |tag: &str, pb: &[u8]| -> PathBuf {
        let d = scratch.join(tag);
        std::fs::create_dir_all(d.join("variables")).unwrap();
        for f in ["variables.index", "variables.data-00000-of-00001"] {
            std::fs::copy(dir.join("variables").join(f), d.join("variables").join(f)).unwrap();
        }
        std::fs::write(d.join("saved_model.pb"), pb).unwrap();
        sign(&d);
        d
    };
    let refused = |d: &Path| xlafn::load(d).unwrap_err().to_string();
    // Unsigned changes are refused before anything is decoded.
    let unsigned = copy("unsigned", &pb);
    std::fs::write(unsigned.join("saved_model.pb"), &pb[1..]).unwrap();
    let e = refused(&unsigned);
    assert!(
        e.contains("saved_model.pb is damaged or was changed (sha256 mismatch)"),
        "{e}"
    );
    std::fs::remove_file(unsigned.join("xlafn_saved_model.sha256")).unwrap();
    let e = refused(&unsigned);
    assert!(e.contains("xlafn_saved_model.sha256 is missing"), "{e}");
    // Truncated, empty, and a module op the program check refuses.
    let e = refused(&copy("truncated", &pb[..pb.len() / 2]));
    assert!(e.contains("SavedModel"), "{e}");
    let e = refused(&copy("empty", &[]));
    assert!(e.contains("it has 0 meta graphs"), "{e}");
    let swapped = String::from_utf8_lossy(&pb).contains("stablehlo.multiply");
    assert!(swapped);
    let at = pb
        .windows(18)
        .position(|w| w == b"stablehlo.multiply")
        .unwrap();
    let mut crafted = pb.clone();
    crafted[at..at + 18].copy_from_slice(b"stablehlo.custom_c");
    let e = refused(&copy("crafted", &crafted));
    assert!(e.contains("custom_c"), "{e}");
    // A flipped byte of the variables' data fails its checksum.
    let data = dir.join("variables/variables.data-00000-of-00001");
    let flipped = copy("flipped-data", &pb);
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[0] ^= 0x40;
    std::fs::write(
        flipped.join("variables/variables.data-00000-of-00001"),
        bytes,
    )
    .unwrap();
    sign(&flipped);
    let e = refused(&flipped);
    assert!(e.contains("checksum") || e.contains("crc"), "{e}");
    // Bytes flipped all over saved_model.pb: an error or a clean load.
    let (mut errors, mut loads) = (0, 0);
    for (k, i) in (0..pb.len()).step_by(pb.len() / 120 + 1).enumerate() {
        let mut damaged = pb.clone();
        damaged[i] ^= 1 << (k % 8);
        match xlafn::load(copy(&format!("flip-{i}"), &damaged)) {
            Ok(_) => loads += 1,
            Err(_) => errors += 1,
        }
    }
    println!("{errors} flips refused, {loads} loaded");
    assert!(errors > 0);
    // A FIFO where saved_model.pb should be is refused, not waited on.
    #[cfg(unix)]
    {
        let fifo = scratch.join("fifo");
        std::fs::create_dir_all(fifo.join("variables")).unwrap();
        let made = Command::new("mkfifo")
            .arg(fifo.join("saved_model.pb"))
            .status();
        if made.is_ok_and(|s| s.success()) {
            let e = refused(&fifo);
            assert!(e.contains("saved_model.pb"), "{e}");
        }
    }
}

/// Writes the digests of `dir`'s files as xlafn does.
fn sign(dir: &Path) {
    use sha2::{Digest, Sha256};
    let text: String = [
        "saved_model.pb",
        "variables/variables.index",
        "variables/variables.data-00000-of-00001",
    ]
    .iter()
    .map(|f| {
        let digest = Sha256::digest(std::fs::read(dir.join(f)).unwrap());
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        format!("{hex}  {f}\n")
    })
    .collect();
    std::fs::write(dir.join("xlafn_saved_model.sha256"), text).unwrap();
}

/// Frozen: the variables are constants of the graph, so TensorFlow has
/// nothing to restore; the outputs are the same, in TensorFlow and in
/// xlafn. A function that updates a variable cannot be frozen.
#[test]
fn frozen_variables_become_constants_of_the_graph() {
    use xlafn::export::saved_model::{SavedModelOptions, from_export_with};
    let scratch = scratch::scratch_dir("saved-model-frozen");
    let (export, out) = (scratch.join("export"), scratch.join("saved_model"));
    let w = Variable::new(normal(&[3, 2], 40)).named("w");
    let f = FunctionOptions::new().arg_names(&["x"]).build({
        let w = w.clone();
        move |x: Tensor| x.matmul(&w.read())?.tanh()
    });
    let concrete = f
        .get_concrete_function((TensorSpec::known(&[4, 3], DType::F32),))
        .unwrap();
    concrete.export(&export, &[]).unwrap();
    let frozen = SavedModelOptions {
        freeze_variables: true,
        ..Default::default()
    };
    from_export_with(&export, &out, &frozen).unwrap();
    let x = normal(&[4, 3], 41);
    let want = f.call((&x,)).unwrap().to_host_array().unwrap();
    let loaded = xlafn::load(&out).unwrap();
    assert!(loaded.variables().is_empty());
    let got = loaded.call(&[&x]).unwrap()[0].to_host_array().unwrap();
    assert_eq!(got.bytes, want.bytes);
    // A training step refuses to be frozen.
    let (_, step) = stateful_function();
    let step_export = scratch.join("step");
    step.get_concrete_function((TensorSpec::known(&[3], DType::F32),))
        .unwrap()
        .export(&step_export, &[])
        .unwrap();
    let e = from_export_with(&step_export, scratch.join("step_frozen"), &frozen)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot be frozen: the function updates \"w\""),
        "{e}"
    );
    let Some(python) = tensorflow() else { return };
    let tf = in_tensorflow(&python, &out, &[("x", &x)], "serving_default");
    assert_close(&tf.outputs["output_0"], &want, 1e-6, "frozen");
    assert_close(&tf.tf1_outputs["output_0"], &want, 1e-6, "frozen (TF1)");
    assert!(tf.variables.is_empty() && tf.checkpoint.is_empty());
}
