//! `#[derive(Module)]` (names of nested modules, containers, skipped
//! fields, shared and non-trainable variables) and safetensors checkpoints:
//! round trips in every storable dtype, restoring into a fresh module,
//! pretrained files written by the safetensors crate itself (as other
//! tools write them), and hostile or mismatched files refused without
//! changing any variable.

#[path = "common/child.rs"]
mod child;
#[path = "common/scratch.rs"]
mod scratch;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use xlafn::checkpoint;
use xlafn::module::Module;
use xlafn::prelude::*;

#[derive(Module)]
struct Dense {
    kernel: Variable,
    bias: Option<Variable>,
}

#[derive(Module)]
struct Pair(Variable, Variable);

#[derive(Module)]
struct Model<L: Module> {
    layers: Vec<L>,
    heads: BTreeMap<String, Pair>,
    step: Variable,
    rate: f64,
    name: String,
    #[module(skip)]
    _act: fn(&Tensor) -> Result<Tensor>,
}

fn var(values: &[f32], dims: &[i64]) -> Variable {
    Variable::new(Tensor::from_vec(values.to_vec(), dims).unwrap())
}

fn dense(fill: f32, bias: bool) -> Dense {
    Dense {
        kernel: var(&[fill; 6], &[2, 3]),
        bias: bias.then(|| var(&[fill; 3], &[3])),
    }
}

fn model(fill: f32) -> Model<Dense> {
    let mut heads = BTreeMap::new();
    heads.insert("b".into(), Pair(var(&[fill], &[1]), var(&[fill; 2], &[2])));
    heads.insert(
        "a".into(),
        Pair(var(&[fill; 2], &[2, 1]), var(&[fill], &[])),
    );
    Model {
        layers: vec![dense(fill, true), dense(fill + 1.0, false)],
        heads,
        step: Variable::new(Tensor::scalar(7i64)).non_trainable(),
        rate: 0.1,
        name: "m".into(),
        _act: Tensor::relu,
    }
}

fn temp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("xlafn-{}-{name}.safetensors", std::process::id()))
}

#[test]
fn derive_names_every_variable_in_declaration_order() {
    let m = model(1.0);
    let names: Vec<String> = m.named_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "layers.0.kernel",
            "layers.0.bias",
            "layers.1.kernel",
            "heads.a.0",
            "heads.a.1",
            "heads.b.0",
            "heads.b.1",
            "step"
        ]
    );
    assert_eq!(m.variables().len(), 8);
    // The step counter is not trained.
    assert_eq!(m.trainable_variables().len(), 7);
    assert!(
        m.trainable_variables()
            .iter()
            .all(|v| v.dtype() == DType::F32)
    );

    // A batch norm's moving statistics are variables, not trained.
    let bn = xlafn::nn::BatchNorm::new(3, DType::F32).unwrap();
    let names: Vec<String> = bn.named_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["gamma", "beta", "moving_mean", "moving_variance"]);
    assert_eq!(Module::trainable_variables(&bn).len(), 2);

    // A variable held twice is listed once, under its first path.
    let shared = var(&[1.0], &[1]);
    let tied = Pair(shared.clone(), shared);
    assert_eq!(tied.named_variables().len(), 1);
    assert_eq!(tied.named_variables()[0].0, "0");
}

/// A listed variable is named by its path from the outermost
/// module listed, whatever order the listings come in; a name given by
/// hand stays; the paths reach exports and errors.
#[test]
fn listing_names_variables_by_their_paths() {
    let m = model(1.0);
    let kernel = m.layers[0].kernel.clone();
    assert!(kernel.name().starts_with("Variable:"), "{}", kernel.name());
    // A sub-module listed first names by the shorter path...
    m.layers[0].named_variables();
    assert_eq!(kernel.name(), "kernel");
    // ...which the whole model's path extends and replaces,
    m.named_variables();
    assert_eq!(kernel.name(), "layers.0.kernel");
    assert_eq!(m.heads["a"].1.name(), "heads.a.1");
    // and a later listing of the sub-module does not shorten it again.
    m.layers[0].trainable_variables();
    assert_eq!(kernel.name(), "layers.0.kernel");

    // A name given by hand is kept.
    let given = Dense {
        kernel: var(&[1.0; 6], &[2, 3]).named("mine"),
        bias: None,
    };
    given.named_variables();
    assert_eq!(given.kernel.name(), "mine");
    // Also when given after a listing.
    let d = dense(0.0, true);
    d.named_variables();
    let renamed = d.kernel.clone().named("encoder.w");
    assert_eq!(d.kernel.name(), "encoder.w");
    assert_eq!(renamed.name(), "encoder.w");

    // The path reaches an export's variable files...
    let step = {
        let v = m.layers[0].kernel.clone();
        function(move |x: Tensor| -> Result<Tensor> { x.matmul(&v.read()) })
    };
    let x = Tensor::from_vec(vec![1f32, 2.0], &[1, 2]).unwrap();
    let dir = scratch::scratch_dir("names-export");
    step.get_concrete_function((&x,))
        .unwrap()
        .export(&*dir, &[])
        .unwrap();
    let loaded = xlafn::load(&*dir).unwrap();
    let names: Vec<String> = loaded.variables().iter().map(|v| v.name()).collect();
    assert_eq!(names, ["layers.0.kernel"]);
    // ...and errors that name a variable.
    let err = m.layers[0]
        .kernel
        .assign(&Tensor::scalar(1f32))
        .unwrap_err()
        .to_string();
    assert!(err.contains("layers.0.kernel"), "{err}");
}

#[test]
fn an_optimizer_trains_a_module() {
    let m = dense(0.5, true);
    let x = Tensor::from_vec(vec![1.0f32, 2.0], &[1, 2]).unwrap();
    let loss = || {
        x.matmul(&m.kernel.read())?
            .add(&m.bias.as_ref().unwrap().read())?
            .square()?
            .reduce_sum(&[], false)
    };
    let opt = Adam::new(0.05);
    let first = opt.minimize(&m.trainable_variables(), loss).unwrap();
    let mut last = first.clone();
    for _ in 0..20 {
        last = opt.minimize(&m.trainable_variables(), loss).unwrap();
    }
    assert!(last.item::<f32>().unwrap() < 0.5 * first.item::<f32>().unwrap());
}

#[test]
fn a_checkpoint_restores_into_a_fresh_module_in_every_dtype() {
    let path = temp("round-trip");
    let trained = model(2.5);
    checkpoint::save(&trained, &path).unwrap();
    let fresh = model(0.0);
    checkpoint::restore(&fresh, &path).unwrap();
    for ((n, a), (_, b)) in trained
        .named_variables()
        .iter()
        .zip(fresh.named_variables())
    {
        assert_eq!(
            a.read().to_host_array().unwrap().bytes,
            b.read().to_host_array().unwrap().bytes,
            "{n}"
        );
    }

    // Every dtype safetensors stores, values chosen to show byte order.
    let typed: Vec<(String, Variable)> = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
    ]
    .iter()
    .map(|&d| {
        let t = Tensor::from_vec(vec![0.0f64, 1.0, 3.0, 100.0], &[2, 2])
            .unwrap()
            .cast(d)
            .unwrap();
        (format!("{d}"), Variable::new(t))
    })
    .collect();
    checkpoint::save_named(&typed, &path).unwrap();
    let back = checkpoint::read(&path).unwrap();
    assert_eq!(back.len(), typed.len());
    for (name, v) in &typed {
        let got = &back[name];
        assert_eq!(got.dtype(), v.dtype(), "{name}");
        assert_eq!(got.dims(), vec![2, 2], "{name}");
        assert_eq!(
            got.to_host_array().unwrap().bytes,
            v.read().to_host_array().unwrap().bytes,
            "{name}"
        );
    }
    std::fs::remove_file(&path).ok();
}

/// Weights written by another tool through the safetensors format (here
/// the safetensors crate itself, with hand-made little-endian bytes) load
/// by name; extra tensors are reported by `restore_subset`.
#[test]
fn pretrained_weights_load_by_name() {
    let path = temp("pretrained");
    let kernel: Vec<u8> = (1..=6).flat_map(|v| (v as f32).to_le_bytes()).collect();
    let bias: Vec<u8> = [0.5f32, -0.5, 0.25]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let extra: Vec<u8> = 9i64.to_le_bytes().to_vec();
    use safetensors::{Dtype, tensor::TensorView};
    let views = vec![
        (
            "kernel",
            TensorView::new(Dtype::F32, vec![2, 3], &kernel).unwrap(),
        ),
        ("bias", TensorView::new(Dtype::F32, vec![3], &bias).unwrap()),
        (
            "head.extra",
            TensorView::new(Dtype::I64, vec![], &extra).unwrap(),
        ),
    ];
    safetensors::serialize_to_file(views, None, &path).unwrap();

    let m = dense(0.0, true);
    let e = checkpoint::restore(&m, &path).unwrap_err().to_string();
    assert!(
        e.contains("no variable for 'head.extra'") && e.contains("restore_subset"),
        "{e}"
    );
    assert_eq!(m.kernel.read().to_vec::<f32>().unwrap(), vec![0.0; 6]);
    let unused = checkpoint::restore_subset(&m, &path).unwrap();
    assert_eq!(unused, ["head.extra"]);
    assert_eq!(
        m.kernel.read().to_vec::<f32>().unwrap(),
        vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    );
    assert_eq!(
        m.bias.as_ref().unwrap().read().to_vec::<f32>().unwrap(),
        vec![0.5, -0.5, 0.25]
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn mismatched_or_hostile_files_change_nothing() {
    let path = temp("mismatch");
    checkpoint::save(&dense(1.0, true), &path).unwrap();
    let target = dense(9.0, true);
    let unchanged = |t: &Dense| {
        assert_eq!(t.kernel.read().to_vec::<f32>().unwrap(), vec![9.0; 6]);
    };

    // A missing variable: the module has a bias the file lacks.
    checkpoint::save(&dense(1.0, false), &path).unwrap();
    let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
    assert!(
        e.contains("no tensor for variable(s) 'bias'") && e.contains("'kernel'"),
        "{e}"
    );
    unchanged(&target);

    // A shape or dtype mismatch.
    let wide = Dense {
        kernel: var(&[1.0; 8], &[2, 4]),
        bias: Some(var(&[1.0; 3], &[3])),
    };
    checkpoint::save(&wide, &path).unwrap();
    let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
    assert!(
        e.contains("'kernel' is f32 [2, 3], the file's tensor is f32 [2, 4]"),
        "{e}"
    );
    unchanged(&target);
    let doubles = Dense {
        kernel: Variable::new(Tensor::from_vec(vec![1.0f64; 6], &[2, 3]).unwrap()),
        bias: Some(var(&[1.0; 3], &[3])),
    };
    checkpoint::save(&doubles, &path).unwrap();
    let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
    assert!(
        e.contains("is f32 [2, 3], the file's tensor is f64 [2, 3]"),
        "{e}"
    );
    unchanged(&target);

    // Truncated, garbage and absurd headers; a missing file.
    let good = std::fs::read(&path).unwrap();
    for bad in [
        good[..good.len() - 3].to_vec(),
        b"not a safetensors file at all".to_vec(),
        [u64::MAX.to_le_bytes().to_vec(), b"{}".to_vec()].concat(),
        [
            16u64.to_le_bytes().to_vec(),
            b"{\"a\":{\"dtype\":1}}".to_vec(),
        ]
        .concat(),
        Vec::new(),
    ] {
        std::fs::write(&path, &bad).unwrap();
        let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
        assert!(e.contains("not a valid safetensors file"), "{e}");
        unchanged(&target);
    }
    std::fs::remove_file(&path).ok();
    let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
    assert!(e.contains("cannot read"), "{e}");
    // A FIFO at the path is refused, not waited on.
    if std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .is_ok_and(|s| s.success())
    {
        let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
        assert!(e.contains("cannot read"), "{e}");
        std::fs::remove_file(&path).ok();
    }

    // Names are unique; complex128 cannot be stored.
    let twice = vec![
        ("w".to_string(), var(&[1.0], &[1])),
        ("w".to_string(), var(&[2.0], &[1])),
    ];
    assert!(
        checkpoint::save_named(&twice, &path)
            .unwrap_err()
            .to_string()
            .contains("two variables")
    );
    let c128 = Tensor::from_vec(vec![1.0f64], &[1])
        .unwrap()
        .cast(DType::C128)
        .unwrap();
    let e = checkpoint::save_named(&[("z".into(), Variable::new(c128))], &path).unwrap_err();
    assert!(e.to_string().contains("safetensors cannot store"), "{e}");
    assert!(!path.exists());

    // Checkpoints are eager: inside a traced function they are refused.
    let m = std::sync::Arc::new(dense(1.0, true));
    let p = path.clone();
    let f = function(move |x: Tensor| -> Result<Tensor> {
        checkpoint::save(&*m, &p)?;
        Ok(x)
    });
    let e = f.call((Tensor::scalar(1.0f32),)).unwrap_err();
    assert!(e.to_string().contains("runs eagerly"), "{e}");
}

/// The names in `dir`, sorted: a save leaves no temporary file behind.
fn listing(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn save_never_writes_through_a_planted_link() {
    use std::os::unix::fs::symlink;
    let dir = scratch::scratch_dir("ckpt-links");
    let victim = dir.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let path = dir.join("cc.safetensors");
    // The temporary name save used before (`<path>.tmp-<pid>`), planted
    // as a link to the victim: it was written through.
    symlink(&victim, dir.join(format!("cc.tmp-{}", std::process::id()))).unwrap();
    // A link at the checkpoint path itself, to the victim and dangling.
    symlink(&victim, &path).unwrap();
    checkpoint::save(&dense(2.0, true), &path).unwrap();
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    let back = dense(0.0, true);
    checkpoint::restore(&back, &path).unwrap();
    assert_eq!(back.kernel.read().to_vec::<f32>().unwrap(), vec![2.0; 6]);

    std::fs::remove_file(&path).unwrap();
    symlink(dir.join("nowhere"), &path).unwrap();
    checkpoint::save(&dense(3.0, true), &path).unwrap();
    assert!(!dir.join("nowhere").exists());
    assert!(std::fs::symlink_metadata(&path).unwrap().is_file());
    checkpoint::restore(&back, &path).unwrap();
    assert_eq!(back.kernel.read().to_vec::<f32>().unwrap(), vec![3.0; 6]);
    assert_eq!(
        listing(&dir),
        [
            "cc.safetensors".to_string(),
            format!("cc.tmp-{}", std::process::id()),
            "victim".to_string()
        ]
    );

    // A path that cannot be replaced (a folder) is an error naming it,
    // and leaves no temporary file.
    let folder = dir.join("folder.safetensors");
    std::fs::create_dir(&folder).unwrap();
    std::fs::write(folder.join("inside"), b"x").unwrap();
    let e = checkpoint::save(&dense(1.0, true), &folder)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("cannot write") && e.contains("folder.safetensors"),
        "{e}"
    );
    assert_eq!(listing(&dir).len(), 4, "{:?}", listing(&dir));
}

#[test]
fn concurrent_saves_never_mix_checkpoints() {
    let dir = scratch::scratch_dir("ckpt-concurrent");
    // Paths that differ only in their extension shared one temporary
    // file; two saves to one path must leave one whole checkpoint.
    let (a, b) = (dir.join("cc.safetensors"), dir.join("cc.st"));
    let one = std::sync::Arc::new(dense(1.0, true));
    let two = std::sync::Arc::new(dense(2.0, true));
    for round in 0..150 {
        std::thread::scope(|s| {
            s.spawn(|| checkpoint::save(&*one, &a).unwrap());
            s.spawn(|| checkpoint::save(&*two, &b).unwrap());
            s.spawn(|| checkpoint::save(&*one, &b).unwrap());
        });
        let back = dense(0.0, true);
        checkpoint::restore(&back, &a).unwrap();
        let got = back.kernel.read().to_vec::<f32>().unwrap();
        assert_eq!(got, vec![1.0; 6], "round {round}: cc.safetensors");
        checkpoint::restore(&back, &b).unwrap();
        let got = back.kernel.read().to_vec::<f32>().unwrap();
        let bias = back.bias.as_ref().unwrap().read().to_vec::<f32>().unwrap();
        assert!(
            got == vec![1.0; 6] && bias == vec![1.0; 3]
                || got == vec![2.0; 6] && bias == vec![2.0; 3],
            "round {round}: cc.st holds {got:?} {bias:?}"
        );
    }
    assert_eq!(listing(&dir), ["cc.safetensors", "cc.st"]);
}

/// A file of `len` bytes that starts with `head` and is zeros (a hole,
/// taking no disk) after it.
fn sparse(path: &Path, head: &[u8], len: u64) {
    std::fs::write(path, head).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .unwrap()
        .set_len(len)
        .unwrap();
}

/// A header naming a 20 GiB tensor: a huge file is judged by its header,
/// and only the bytes of the tensors wanted are read (before: the whole
/// file, 132 s for 20 GiB). Runs in a child so a regression is killed.
#[test]
fn huge_files_are_judged_by_their_header() {
    child::isolated(
        "huge_files_are_judged_by_their_header",
        Duration::from_secs(60),
        || {
            const HUGE: u64 = 20 << 30;
            let dir = scratch::scratch_dir("ckpt-huge");
            let path = dir.join("huge.safetensors");
            let target = dense(9.0, true);
            let unchanged = |t: &Dense| {
                assert_eq!(t.kernel.read().to_vec::<f32>().unwrap(), vec![9.0; 6]);
            };
            let timed = |what: &str| -> String {
                let start = Instant::now();
                let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
                assert!(
                    start.elapsed() < Duration::from_secs(5),
                    "{what}: {:?}",
                    start.elapsed()
                );
                e
            };

            // All zeros: an empty header, refused at once.
            sparse(&path, &[], HUGE);
            let e = timed("zeros");
            assert!(
                e.contains("not a valid safetensors file") && e.contains("bad header"),
                "{e}"
            );
            // A header length over the bound, and one past the end.
            sparse(&path, &(1u64 << 40).to_le_bytes(), HUGE);
            let e = timed("huge header length");
            assert!(
                e.contains("header length 1099511627776 is over the 100000000 bytes allowed"),
                "{e}"
            );
            sparse(&path, &99_999_999u64.to_le_bytes(), 4096);
            let e = checkpoint::restore(&target, &path).unwrap_err().to_string();
            assert!(
                e.contains("header length 99999999 runs past the end of the file (4096 bytes)"),
                "{e}"
            );
            // A real checkpoint with 20 GiB of zeros after it.
            checkpoint::save(&dense(1.0, true), &path).unwrap();
            let real = std::fs::metadata(&path).unwrap().len();
            sparse(&path, &std::fs::read(&path).unwrap(), HUGE);
            let e = timed("trailing bytes");
            assert!(
                e.contains(&format!(
                    "describes 36 bytes of tensor data, the file has {}",
                    HUGE - (real - 36)
                )),
                "{e}"
            );
            unchanged(&target);

            // A valid file whose 20 GiB tensor the module does not want:
            // restore_subset reads the kernel and bias only.
            let kernel: Vec<u8> = (1..=6).flat_map(|i| (i as f32).to_le_bytes()).collect();
            let bias: Vec<u8> = [0.5f32; 3].iter().flat_map(|f| f.to_le_bytes()).collect();
            let header = format!(
                concat!(
                    r#"{{"kernel":{{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}},"#,
                    r#""bias":{{"dtype":"F32","shape":[3],"data_offsets":[24,36]}},"#,
                    r#""big":{{"dtype":"U8","shape":[{}],"data_offsets":[36,{}]}}}}"#
                ),
                HUGE,
                36 + HUGE
            );
            let head = [
                (header.len() as u64).to_le_bytes().to_vec(),
                header.clone().into_bytes(),
                kernel,
                bias,
            ]
            .concat();
            sparse(&path, &head, 8 + header.len() as u64 + 36 + HUGE);
            let e = timed("an unwanted huge tensor");
            assert!(e.contains("no variable for 'big'"), "{e}");
            unchanged(&target);
            let start = Instant::now();
            let unused = checkpoint::restore_subset(&target, &path).unwrap();
            assert!(start.elapsed() < Duration::from_secs(5));
            assert_eq!(unused, ["big"]);
            assert_eq!(
                target.kernel.read().to_vec::<f32>().unwrap(),
                vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
            );
            assert_eq!(
                target
                    .bias
                    .as_ref()
                    .unwrap()
                    .read()
                    .to_vec::<f32>()
                    .unwrap(),
                vec![0.5; 3]
            );
        },
    );
}

#[test]
fn restoring_into_an_unbuilt_layer_says_to_build_it_first() {
    let key = xlafn::random::key(3).unwrap();
    let built = xlafn::nn::layers::Lstm::new(&key, 2).unwrap();
    use xlafn::nn::layers::Recurrent;
    built
        .run(&Tensor::zeros(&[1, 1, 3], DType::F32), None, None)
        .unwrap();
    let path = temp("unbuilt-lstm");
    checkpoint::save(&built, &path).unwrap();
    let fresh = xlafn::nn::layers::Lstm::new(&key, 2).unwrap();
    for e in [
        checkpoint::restore(&fresh, &path).unwrap_err().to_string(),
        checkpoint::restore_subset(&fresh, &path)
            .unwrap_err()
            .to_string(),
    ] {
        assert!(
            e.contains("no variables yet") && e.contains("first call"),
            "{e}"
        );
    }
    // Built by a first call, it restores.
    fresh
        .run(&Tensor::zeros(&[1, 1, 3], DType::F32), None, None)
        .unwrap();
    checkpoint::restore(&fresh, &path).unwrap();
    let _ = std::fs::remove_file(&path);
}
