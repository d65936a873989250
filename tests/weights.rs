//! `xlafn::weights`: safetensors files written here with the `safetensors`
//! crate's serializer in PyTorch's layouts (Linear `weight [out, in]`,
//! Conv2d `weight [out, in, kh, kw]`, `bias`), from known values, loaded
//! into `#[derive(Module)]` models with xlafn's layouts (`[in, out]`,
//! HWIO) and checked exactly against transpositions written as plain
//! loops; sharded indexes; missing and unused tensors; bf16 casts; and
//! errors (never panics) for corrupt headers, offsets past the end, bad
//! dtypes, shards outside the index's folder, and shapes that do not fit.

use safetensors::Dtype;
use safetensors::tensor::TensorView;
use std::path::Path;
use xlafn::half::bf16;
use xlafn::module::Module;
use xlafn::prelude::*;
use xlafn::weights::{self, LoadOptions, Mapping, WeightInfo, Weights};

#[derive(Module)]
struct Dense {
    kernel: Variable,
    bias: Variable,
}

#[derive(Module)]
struct Conv {
    kernel: Variable,
    bias: Variable,
}

#[derive(Module)]
struct Net {
    conv: Conv,
    fc: Vec<Dense>,
}

// Conv2d(2 -> 3, kernel 2x2), then Linear(4 -> 5) and Linear(5 -> 2).
const CONV: [usize; 4] = [3, 2, 2, 2]; // out, in, kh, kw
const FC: [(usize, usize); 2] = [(4, 5), (5, 2)]; // (in, out)

fn zeros(dims: &[i64]) -> Variable {
    Variable::new(Tensor::zeros(dims, DType::F32))
}

fn net() -> Net {
    let [o, i, h, w] = CONV.map(|d| d as i64);
    Net {
        conv: Conv {
            kernel: zeros(&[h, w, i, o]),
            bias: zeros(&[o]),
        },
        fc: FC
            .iter()
            .map(|&(i, o)| Dense {
                kernel: zeros(&[i as i64, o as i64]),
                bias: zeros(&[o as i64]),
            })
            .collect(),
    }
}

/// Distinct, exactly representable values for tensor number `seed`.
fn known(n: usize, seed: usize) -> Vec<f32> {
    (0..n)
        .map(|k| (seed * 100 + k) as f32 * 0.25 - 7.0)
        .collect()
}

fn bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// One tensor to write: name, dtype, shape, raw bytes.
type Entry = (String, Dtype, Vec<usize>, Vec<u8>);

fn f32_entry(name: &str, shape: &[usize], v: &[f32]) -> Entry {
    (name.to_string(), Dtype::F32, shape.to_vec(), bytes(v))
}

fn write(path: &Path, entries: &[Entry]) {
    let views: Vec<(&str, TensorView)> = entries
        .iter()
        .map(|(n, d, s, b)| (n.as_str(), TensorView::new(*d, s.clone(), b).unwrap()))
        .collect();
    std::fs::write(path, safetensors::serialize(views, None).unwrap()).unwrap();
}

/// The PyTorch state dict of [`net`] under `prefix`, and the values.
struct Torch {
    conv_w: Vec<f32>,
    conv_b: Vec<f32>,
    fc_w: Vec<Vec<f32>>,
    fc_b: Vec<Vec<f32>>,
}

fn torch() -> Torch {
    Torch {
        conv_w: known(CONV.iter().product(), 1),
        conv_b: known(CONV[0], 2),
        fc_w: FC
            .iter()
            .enumerate()
            .map(|(k, (i, o))| known(i * o, 3 + k))
            .collect(),
        fc_b: FC
            .iter()
            .enumerate()
            .map(|(k, (_, o))| known(*o, 5 + k))
            .collect(),
    }
}

fn torch_entries(t: &Torch, prefix: &str) -> Vec<Entry> {
    let mut e = vec![
        f32_entry(&format!("{prefix}conv.weight"), &CONV, &t.conv_w),
        f32_entry(&format!("{prefix}conv.bias"), &[CONV[0]], &t.conv_b),
    ];
    for (k, &(i, o)) in FC.iter().enumerate() {
        e.push(f32_entry(
            &format!("{prefix}fc.{k}.weight"),
            &[o, i],
            &t.fc_w[k],
        ));
        e.push(f32_entry(&format!("{prefix}fc.{k}.bias"), &[o], &t.fc_b[k]));
    }
    e
}

/// `[out, in]` to `[in, out]` by hand.
fn linear_kernel(w: &[f32], i_n: usize, o_n: usize) -> Vec<f32> {
    let mut k = vec![0.0; w.len()];
    for o in 0..o_n {
        for i in 0..i_n {
            k[i * o_n + o] = w[o * i_n + i];
        }
    }
    k
}

/// `[out, in, kh, kw]` to `[kh, kw, in, out]` by hand.
fn conv_kernel(w: &[f32]) -> Vec<f32> {
    let [on, inn, hn, wn] = CONV;
    let mut k = vec![0.0; w.len()];
    for o in 0..on {
        for i in 0..inn {
            for h in 0..hn {
                for x in 0..wn {
                    k[((h * wn + x) * inn + i) * on + o] = w[((o * inn + i) * hn + h) * wn + x];
                }
            }
        }
    }
    k
}

fn check_loaded(n: &Net, t: &Torch) {
    let read = |v: &Variable| v.read().to_vec::<f32>().unwrap();
    assert_eq!(read(&n.conv.kernel), conv_kernel(&t.conv_w));
    assert_eq!(read(&n.conv.bias), t.conv_b);
    for (k, &(i, o)) in FC.iter().enumerate() {
        assert_eq!(read(&n.fc[k].kernel), linear_kernel(&t.fc_w[k], i, o));
        assert_eq!(read(&n.fc[k].bias), t.fc_b[k]);
    }
}

fn torch_mapping() -> Mapping {
    Mapping::new()
        .replace_prefix("model.", "")
        .replace_suffix(".weight", ".kernel")
        .torch_kernel(|n| n.ends_with(".kernel"))
}

fn err_text<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(e) => e.to_string(),
        Ok(v) => panic!("expected an error, got {v:?}"),
    }
}

#[test]
fn pytorch_layouts_load_into_channels_last_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.safetensors");
    let t = torch();
    let mut entries = torch_entries(&t, "model.");
    // A batch-norm counter PyTorch saves and xlafn has no variable for.
    entries.push((
        "model.bn.num_batches_tracked".into(),
        Dtype::I64,
        vec![],
        7i64.to_le_bytes().to_vec(),
    ));
    write(&path, &entries);
    let w = Weights::open(&path).unwrap();
    assert_eq!(w.names().len(), 7);
    assert_eq!(
        w.info("model.conv.weight").unwrap(),
        WeightInfo {
            dtype: DType::F32,
            dims: vec![3, 2, 2, 2]
        }
    );
    let n = net();
    let mapping = torch_mapping().skip(|n| n.ends_with("num_batches_tracked"));
    let report = weights::load_into(&n, &w, &mapping, LoadOptions::default()).unwrap();
    check_loaded(&n, &t);
    let loaded: Vec<(&str, &str)> = report
        .loaded
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(
        loaded,
        [
            ("model.conv.weight", "conv.kernel"),
            ("model.conv.bias", "conv.bias"),
            ("model.fc.0.weight", "fc.0.kernel"),
            ("model.fc.0.bias", "fc.0.bias"),
            ("model.fc.1.weight", "fc.1.kernel"),
            ("model.fc.1.bias", "fc.1.bias"),
        ]
    );
    assert_eq!(report.skipped, ["model.bn.num_batches_tracked"]);
    assert!(report.unused.is_empty() && report.missing.is_empty());
    // The file's tensors as stored.
    assert_eq!(
        w.tensor("model.fc.1.bias")
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        t.fc_b[1]
    );
    assert_eq!(
        w.tensor("model.bn.num_batches_tracked")
            .unwrap()
            .item::<i64>()
            .unwrap(),
        7
    );
}

#[test]
fn closures_reshape_and_explicit_transposes() {
    // Names of another scheme, a bias stored as [1, out], a kernel given
    // by an explicit permutation.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let t = torch();
    let mut entries = Vec::new();
    entries.push(f32_entry("encoder/conv/w", &CONV, &t.conv_w));
    entries.push(f32_entry("encoder/conv/b", &[1, CONV[0]], &t.conv_b));
    for (k, &(i, o)) in FC.iter().enumerate() {
        entries.push(f32_entry(&format!("encoder/fc_{k}/w"), &[o, i], &t.fc_w[k]));
        entries.push(f32_entry(&format!("encoder/fc_{k}/b"), &[o], &t.fc_b[k]));
    }
    write(&path, &entries);
    let mapping = Mapping::new()
        .rename(|n| {
            n.trim_start_matches("encoder/")
                .replace("fc_", "fc.")
                .replace('/', ".")
        })
        .replace_suffix(".w", ".kernel")
        .replace_suffix(".b", ".bias")
        .transpose(|n| n == "conv.kernel", &[2, 3, 1, 0])
        .transpose(|n| n.starts_with("fc.") && n.ends_with(".kernel"), &[1, 0])
        .reshape(|n| n == "conv.bias", &[-1]);
    let n = net();
    weights::load_into(
        &n,
        &Weights::open(&path).unwrap(),
        &mapping,
        LoadOptions::default(),
    )
    .unwrap();
    check_loaded(&n, &t);
}

#[test]
fn sharded_index_with_two_files() {
    let dir = tempfile::tempdir().unwrap();
    let t = torch();
    let entries = torch_entries(&t, "");
    let (first, second) = entries.split_at(3);
    write(&dir.path().join("model-00001-of-00002.safetensors"), first);
    let mut second = second.to_vec();
    // A tensor the shard holds but the index does not list: not loaded.
    second.push(f32_entry("stray", &[1], &[1.0]));
    std::fs::create_dir(dir.path().join("shards")).unwrap();
    write(
        &dir.path().join("shards/model-00002-of-00002.safetensors"),
        &second,
    );
    let mut map = serde_json::Map::new();
    for (k, (name, ..)) in entries.iter().enumerate() {
        let file = if k < 3 {
            "model-00001-of-00002.safetensors"
        } else {
            "shards/model-00002-of-00002.safetensors"
        };
        map.insert(name.clone(), file.into());
    }
    let index = serde_json::json!({"metadata": {"total_size": 1234}, "weight_map": map});
    let index_path = dir.path().join("model.safetensors.index.json");
    std::fs::write(&index_path, index.to_string()).unwrap();

    let w = Weights::open(&index_path).unwrap();
    assert_eq!(w.files().len(), 2);
    assert_eq!(w.names().len(), 6);
    assert!(!w.names().contains(&"stray"));
    let n = net();
    let mapping = Mapping::new()
        .replace_suffix(".weight", ".kernel")
        .torch_kernel(|n| n.ends_with(".kernel"));
    let report = weights::load_into(&n, &w, &mapping, LoadOptions::default()).unwrap();
    assert_eq!(report.loaded.len(), 6);
    check_loaded(&n, &t);
}

#[test]
fn missing_and_unused_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    let t = torch();
    let mut entries = torch_entries(&t, "");
    // The file lacks fc.1's bias and has a classifier head the model lacks.
    entries.retain(|e| e.0 != "fc.1.bias");
    entries.push(f32_entry("head.weight", &[2, 2], &[1.0, 2.0, 3.0, 4.0]));
    write(&path, &entries);
    let w = Weights::open(&path).unwrap();
    let mapping = Mapping::new()
        .replace_suffix(".weight", ".kernel")
        .torch_kernel(|n| n.ends_with(".kernel"));
    let n = net();
    let msg = err_text(weights::load_into(&n, &w, &mapping, LoadOptions::default()));
    assert!(
        msg.contains("'fc.1.bias'") && msg.contains("'head.weight'"),
        "{msg}"
    );
    // The same lists from the headers, without loading.
    let planned = weights::check(&n, &w, &mapping).unwrap();
    assert_eq!(planned.missing, ["fc.1.bias"]);
    assert_eq!(planned.unused, ["head.weight"]);
    assert_eq!(planned.loaded.len(), 5);
    // Refused: nothing assigned.
    assert_eq!(n.fc[0].bias.read().to_vec::<f32>().unwrap(), vec![0.0; 5]);
    // Allowing one kind still refuses the other.
    let only_unused = LoadOptions::default().allow_unused(true);
    assert!(weights::load_into(&n, &w, &mapping, only_unused).is_err());
    let both = only_unused.allow_missing(true);
    let report = weights::load_into(&n, &w, &mapping, both).unwrap();
    assert_eq!(report.missing, ["fc.1.bias"]);
    assert_eq!(report.unused, ["head.weight"]);
    assert_eq!(report, planned);
    assert_eq!(n.fc[1].bias.read().to_vec::<f32>().unwrap(), vec![0.0; 2]);
    assert_eq!(n.fc[0].bias.read().to_vec::<f32>().unwrap(), t.fc_b[0]);
    assert!(report.skipped.is_empty());
}

#[test]
fn shape_mismatch_after_mapping_names_the_variable() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.safetensors");
    write(&path, &torch_entries(&torch(), ""));
    let w = Weights::open(&path).unwrap();
    let n = net();
    // No transpose: fc.0's weight [5, 4] against the kernel [4, 5].
    let mapping = Mapping::new().replace_suffix(".weight", ".kernel");
    let msg = err_text(weights::load_into(&n, &w, &mapping, LoadOptions::default()));
    assert!(
        msg.contains("'conv.kernel'") || msg.contains("'fc.0.kernel'"),
        "{msg}"
    );
    assert!(msg.contains("maps to"), "{msg}");
    assert_eq!(n.conv.bias.read().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    // A reshape of another element count, a transpose of another rank.
    let bad = Mapping::new().reshape(|n| n == "conv.bias", &[2, 2]);
    let msg = err_text(weights::load_into(&n, &w, &bad, LoadOptions::default()));
    assert!(
        msg.contains("conv.bias") && msg.contains("reshape"),
        "{msg}"
    );
    let bad = Mapping::new().transpose(|n| n == "conv.bias", &[1, 0]);
    let msg = err_text(weights::load_into(&n, &w, &bad, LoadOptions::default()));
    assert!(
        msg.contains("conv.bias") && msg.contains("permutation"),
        "{msg}"
    );
    let bad = Mapping::new().torch_kernel(|n| n == "conv.bias");
    assert!(weights::load_into(&n, &w, &bad, LoadOptions::default()).is_err());
    // Two file tensors onto one variable.
    let mut entries = torch_entries(&torch(), "");
    entries.push(f32_entry("fc.0.bias_copy", &[5], &[0.0; 5]));
    write(&path, &entries);
    let w = Weights::open(&path).unwrap();
    let bad = torch_mapping().replace_suffix("_copy", "");
    let msg = err_text(weights::load_into(&n, &w, &bad, LoadOptions::default()));
    assert!(msg.contains("both map to variable 'fc.0.bias'"), "{msg}");
}

#[test]
fn bf16_files_cast_into_f32_variables() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("half.safetensors");
    let host = [1.5f32, -2.25, 0.1, 3.0e5, -7.0e-3, 42.0];
    let halves: Vec<bf16> = host.iter().map(|&x| bf16::from_f32(x)).collect();
    let raw: Vec<u8> = halves
        .iter()
        .flat_map(|h| h.to_bits().to_le_bytes())
        .collect();
    write(
        &path,
        &[("weight".to_string(), Dtype::BF16, vec![3, 2], raw)],
    );
    #[derive(Module)]
    struct One {
        kernel: Variable,
    }
    let m = One {
        kernel: zeros(&[2, 3]),
    };
    let w = Weights::open(&path).unwrap();
    // Without a cast the dtypes differ.
    let plain = Mapping::new()
        .replace_suffix("weight", "kernel")
        .torch_kernel(|_| true);
    let msg = err_text(weights::load_into(&m, &w, &plain, LoadOptions::default()));
    assert!(msg.contains("'kernel'") && msg.contains("bf16"), "{msg}");
    let cast = plain.cast(|_| true, DType::F32);
    weights::load_into(&m, &w, &cast, LoadOptions::default()).unwrap();
    let exact: Vec<f32> = halves.iter().map(|h| h.to_f32()).collect();
    assert_eq!(
        m.kernel.read().to_vec::<f32>().unwrap(),
        linear_kernel(&exact, 2, 3)
    );
}

/// Raw bytes: an 8-byte little-endian header length, the header, the data.
fn raw_file(path: &Path, header: &str, data: &[u8]) {
    let mut b = (header.len() as u64).to_le_bytes().to_vec();
    b.extend_from_slice(header.as_bytes());
    b.extend_from_slice(data);
    std::fs::write(path, b).unwrap();
}

#[test]
fn corrupt_files_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let p = |name: &str| dir.path().join(name);
    // Not JSON.
    raw_file(&p("garbage"), "this is not json", &[]);
    assert!(err_text(Weights::open(p("garbage"))).contains("bad header"));
    // A header length far past the file.
    let mut b = (1u64 << 40).to_le_bytes().to_vec();
    b.extend_from_slice(b"{}");
    std::fs::write(p("huge"), b).unwrap();
    assert!(Weights::open(p("huge")).is_err());
    // Too short for the length itself.
    std::fs::write(p("short"), [1u8, 2]).unwrap();
    assert!(Weights::open(p("short")).is_err());
    // Offsets past the end of the file: 16 bytes declared, 8 present.
    raw_file(
        &p("past_end"),
        r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#,
        &[0u8; 8],
    );
    let msg = err_text(Weights::open(p("past_end")));
    assert!(msg.contains("16 bytes of tensor data"), "{msg}");
    // Offsets that disagree with the shape.
    raw_file(
        &p("inconsistent"),
        r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#,
        &[0u8; 16],
    );
    assert!(Weights::open(p("inconsistent")).is_err());
    // A dtype safetensors does not know.
    raw_file(
        &p("unknown_dtype"),
        r#"{"a":{"dtype":"Q9","shape":[1],"data_offsets":[0,4]}}"#,
        &[0u8; 4],
    );
    assert!(Weights::open(p("unknown_dtype")).is_err());
    // A dtype safetensors knows and xlafn lacks: refused when read.
    raw_file(
        &p("f8"),
        r#"{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}"#,
        &[0u8; 2],
    );
    let w = Weights::open(p("f8")).unwrap();
    assert!(err_text(w.info("a")).contains("F8"));
    #[derive(Module)]
    struct A {
        a: Variable,
    }
    let m = A { a: zeros(&[2]) };
    assert!(weights::load_into(&m, &w, &Mapping::new(), LoadOptions::default()).is_err());
    assert!(w.tensor("b").is_err());
    // Not a file at all.
    assert!(Weights::open(dir.path()).is_err());
    assert!(Weights::open(p("absent.safetensors")).is_err());
}

#[test]
fn shard_indexes_cannot_leave_their_folder() {
    let outer = tempfile::tempdir().unwrap();
    let dir = outer.path().join("model");
    std::fs::create_dir(&dir).unwrap();
    write(
        &outer.path().join("outside.safetensors"),
        &[f32_entry("x", &[1], &[1.0])],
    );
    write(
        &dir.join("inside.safetensors"),
        &[f32_entry("x", &[1], &[1.0])],
    );
    let index = |file: &str| {
        let path = dir.join("model.safetensors.index.json");
        let json = serde_json::json!({"weight_map": {"x": file}});
        std::fs::write(&path, json.to_string()).unwrap();
        Weights::open(&path)
    };
    assert!(index("inside.safetensors").is_ok());
    let outside = outer.path().join("outside.safetensors");
    for bad in [
        "../outside.safetensors",
        outside.to_str().unwrap(),
        "./inside.safetensors",
        "",
    ] {
        let msg = err_text(index(bad));
        assert!(
            msg.contains("not a file inside the index's folder"),
            "{bad}: {msg}"
        );
    }
    // A link inside the folder that leads out.
    std::os::unix::fs::symlink(&outside, dir.join("link.safetensors")).unwrap();
    let msg = err_text(index("link.safetensors"));
    assert!(msg.contains("not a file inside"), "{msg}");
    // A missing shard, a tensor absent from its shard, a malformed index.
    assert!(index("absent.safetensors").is_err());
    let path = dir.join("model.safetensors.index.json");
    let json = serde_json::json!({"weight_map": {"y": "inside.safetensors"}});
    std::fs::write(&path, json.to_string()).unwrap();
    assert!(err_text(Weights::open(&path)).contains("no such tensor"));
    std::fs::write(&path, "{\"weight_map\": [1, 2]}").unwrap();
    assert!(err_text(Weights::open(&path)).contains("not a shard index"));
    std::fs::write(&path, "{").unwrap();
    assert!(Weights::open(&path).is_err());
}

#[test]
fn torch_kernel_layouts_by_rank() {
    let m = Mapping::new().torch_kernel(|_| true);
    let map = |dims: &[i64]| {
        let info = WeightInfo {
            dtype: DType::F32,
            dims: dims.to_vec(),
        };
        m.map_info("w", &info).map(|r| r.unwrap().1.dims)
    };
    // Linear [out, in]; Conv1d [out, in, k]; Conv3d [out, in, kd, kh, kw].
    assert_eq!(map(&[8, 3]).unwrap(), [3, 8]);
    assert_eq!(map(&[8, 3, 5]).unwrap(), [5, 3, 8]);
    assert_eq!(map(&[8, 3, 2, 4, 5]).unwrap(), [2, 4, 5, 3, 8]);
    assert!(err_text(map(&[8])).contains("rank 2 to 5"));
    // A skipped tensor maps to nothing.
    let skip = Mapping::new().skip(|n| n == "w");
    let info = WeightInfo {
        dtype: DType::F32,
        dims: vec![1],
    };
    assert_eq!(skip.map_info("w", &info).unwrap(), None);
    // The Conv1d values by hand: kernel[k][i][o] = weight[o][i][k].
    let w: Vec<f32> = known(2 * 3 * 4, 9);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c1.safetensors");
    write(&path, &[f32_entry("kernel", &[2, 3, 4], &w)]);
    let v = zeros(&[4, 3, 2]);
    #[derive(Module)]
    struct K {
        kernel: Variable,
    }
    let k = K { kernel: v };
    weights::load_into(
        &k,
        &Weights::open(&path).unwrap(),
        &m,
        LoadOptions::default(),
    )
    .unwrap();
    let mut want = vec![0.0; 24];
    for o in 0..2 {
        for i in 0..3 {
            for x in 0..4 {
                want[(x * 3 + i) * 2 + o] = w[(o * 3 + i) * 4 + x];
            }
        }
    }
    assert_eq!(k.kernel.read().to_vec::<f32>().unwrap(), want);
}

#[test]
fn layout_and_unbuilt_module_errors_say_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.safetensors");
    // A PyTorch Linear [out, in] against xlafn's [in, out], untransposed.
    let entries = vec![
        f32_entry("kernel", &[5, 4], &known(20, 1)),
        f32_entry("bias", &[5], &known(5, 2)),
    ];
    write(&path, &entries);
    let w = Weights::open(&path).unwrap();
    let dense = Dense {
        kernel: zeros(&[4, 5]),
        bias: zeros(&[5]),
    };
    let e = err_text(weights::load_into(
        &dense,
        &w,
        &Mapping::new(),
        LoadOptions::default(),
    ));
    assert!(e.contains("Mapping::transpose(.., &[1, 0])"), "{e}");
    // The suggested mapping loads it.
    let mapping = Mapping::new().transpose(|n| n == "kernel", &[1, 0]);
    weights::load_into(&dense, &w, &mapping, LoadOptions::default()).unwrap();
    // A lazy layer not yet built has no variables to load into.
    let lazy = xlafn::nn::layers::Lstm::new(&xlafn::random::key(1).unwrap(), 5).unwrap();
    let e = err_text(weights::load_into(
        &lazy,
        &w,
        &Mapping::new(),
        LoadOptions::default(),
    ));
    assert!(
        e.contains("no variables yet") && e.contains("first call"),
        "{e}"
    );
}

#[test]
fn a_dimension_beyond_i64_is_refused_not_reported_as_negative() {
    // The sizes add up (a 0 beside it makes the tensor empty), so only a
    // bound on each dimension keeps 2^64 - 1 from reading back as -1.
    let dir = tempfile::tempdir().unwrap();
    for huge in [u64::MAX, 1u64 << 63] {
        let header =
            format!(r#"{{"huge":{{"dtype":"F32","shape":[{huge},0],"data_offsets":[0,0]}}}}"#);
        let mut file = (header.len() as u64).to_le_bytes().to_vec();
        file.extend(header.as_bytes());
        let path = dir.path().join(format!("huge-{huge}.safetensors"));
        std::fs::write(&path, &file).unwrap();
        let e = err_text(Weights::open(&path));
        assert!(e.contains(&format!("dimension {huge}")), "{e}");
        let e = err_text(xlafn::checkpoint::read(&path));
        assert!(e.contains(&format!("dimension {huge}")), "{e}");
    }
    // The largest dimension an i64 holds is still read as itself.
    let header = format!(
        r#"{{"big":{{"dtype":"F32","shape":[{},0],"data_offsets":[0,0]}}}}"#,
        i64::MAX
    );
    let mut file = (header.len() as u64).to_le_bytes().to_vec();
    file.extend(header.as_bytes());
    let path = dir.path().join("big.safetensors");
    std::fs::write(&path, &file).unwrap();
    let info = Weights::open(&path).unwrap().info("big").unwrap();
    assert_eq!(info.dims, vec![i64::MAX, 0]);
}
