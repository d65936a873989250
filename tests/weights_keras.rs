//! The Keras preset: a functional Keras 3 model's weights, written by
//! Keras' own saver (`scripts/keras_fixtures.py`, committed under
//! `tests/fixtures/keras`) as a `.weights.h5` file and inside a `.keras`
//! archive, load into xlafn's built-in layers with `Mapping::keras` and
//! no renames, and each layer then gives Keras' saved outputs. Crafted
//! and truncated HDF5 files are refused with an error.

#[path = "common/close.rs"]
mod close;

use xlafn::module::Module;
use xlafn::nn::layers::{
    Activation, AttentionOptions, BatchNorm, Bidirectional, Conv2d, ConvTranspose2d,
    DepthwiseConv2d, Embedding, GroupNorm, Gru, Layer, LayerNorm, Linear, Lstm, Mode,
    MultiHeadAttention, Recurrent,
};
use xlafn::prelude::*;
use xlafn::weights::{self, LoadOptions, Mapping, Weights};

const KERAS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/keras");

/// The xlafn twin of the fixture script's model, with Keras' defaults
/// where xlafn's differ (the norms' epsilon 1e-3). The two `Linear`s come
/// in the order Keras made (and numbered) its `Dense` layers.
#[derive(Module)]
struct Net {
    conv: Conv2d,
    bn: BatchNorm,
    fc: Linear,
    fc2: Linear,
    ln: LayerNorm,
    gn: GroupNorm,
    deconv: ConvTranspose2d,
    dw: DepthwiseConv2d,
    lstm: Lstm,
    gru: Gru,
    bi: Bidirectional<Lstm>,
    attn: MultiHeadAttention,
    emb: Embedding,
}

fn net() -> Result<Net> {
    let key = |i: u64| xlafn::random::key(i);
    let lstm = Lstm::new(&key(3)?, 6)?.return_sequences(true);
    lstm.build(4, DType::F32)?;
    let gru = Gru::new(&key(4)?, 5)?.return_sequences(true);
    gru.build(4, DType::F32)?;
    let bi = Lstm::bidirectional(&key(5)?, 3)?.return_sequences(true);
    bi.build(4, DType::F32)?;
    let attn = MultiHeadAttention::new(&key(6)?, 2, 4)?;
    attn.build(8, 8, 8, DType::F32)?;
    Ok(Net {
        conv: Conv2d::new(&key(1)?, 3, 4, [3, 3])?.padding(Padding::Same),
        bn: BatchNorm::new(4, DType::F32)?,
        fc: Linear::new(&key(2)?, 6, 5)?,
        fc2: Linear::new(&key(7)?, 5, 3)?.activation(Activation::Relu),
        ln: LayerNorm::new(6)?.epsilon(1e-3),
        gn: GroupNorm::new(2, 6)?.epsilon(1e-3),
        deconv: ConvTranspose2d::new(&key(8)?, 3, 2, [3, 3])?
            .strides([2, 2])
            .padding(Padding::Valid),
        dw: DepthwiseConv2d::lazy(&key(9)?, [3, 3])?
            .depth_multiplier(2)
            .build(3)?,
        lstm,
        gru,
        bi,
        attn,
        emb: Embedding::new(&key(10)?, 10, 3)?,
    })
}

fn io(name: &str) -> Tensor {
    let file = Weights::open(format!("{KERAS}/io.safetensors")).unwrap();
    file.tensor(name).unwrap()
}

fn assert_close(name: &str, got: &Tensor, want: &Tensor) {
    close::assert_close_to("Keras", name, got, want, 2e-5);
}

fn loaded(file: &str) -> Net {
    let net = net().unwrap();
    let weights = Weights::open(format!("{KERAS}/{file}")).unwrap();
    let mapping = Mapping::new().keras(&net);
    let report = weights::load_into(&net, &weights, &mapping, LoadOptions::default()).unwrap();
    assert!(
        report.unused.is_empty() && report.missing.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.loaded.len(), net.named_variables().len());
    net
}

fn check_outputs(net: &Net) {
    let image = io("image");
    let conv = net.conv.forward(&image).unwrap();
    assert_close("conv", &conv, &io("conv_out"));
    assert_close("bn", &net.bn.forward(&conv).unwrap(), &io("bn_out"));
    let features = io("features");
    let fc = net.fc.forward(&features).unwrap();
    assert_close("fc", &fc, &io("fc_out"));
    assert_close("fc2", &net.fc2.forward(&fc).unwrap(), &io("fc2_out"));
    assert_close("ln", &net.ln.forward(&features).unwrap(), &io("ln_out"));
    assert_close("gn", &net.gn.forward(&features).unwrap(), &io("gn_out"));
    assert_close(
        "deconv",
        &net.deconv.forward(&image).unwrap(),
        &io("deconv_out"),
    );
    assert_close("dw", &net.dw.forward(&image).unwrap(), &io("dw_out"));
    let sequence = io("sequence");
    assert_close(
        "lstm",
        &net.lstm.forward(&sequence).unwrap(),
        &io("lstm_out"),
    );
    assert_close("gru", &net.gru.forward(&sequence).unwrap(), &io("gru_out"));
    let bi = net.bi.run(&sequence, None, None).unwrap().outputs;
    assert_close("bi", &bi, &io("bi_out"));
    let x = io("tokens");
    let attn = net
        .attn
        .call_qkv(&x, &x, &x, &AttentionOptions::new(), &Mode::inference())
        .unwrap();
    assert_close("attn", &attn, &io("attn_out"));
    assert_close("emb", &net.emb.forward(&io("ids")).unwrap(), &io("emb_out"));
}

#[test]
fn a_keras_weights_file_loads_with_the_preset_and_gives_keras_outputs() {
    check_outputs(&loaded("model.weights.h5"));
}

#[test]
fn a_whole_keras_archive_loads_its_weights_the_same_way() {
    check_outputs(&loaded("model.keras"));
}

#[test]
fn a_keras_file_lists_its_datasets_by_path() {
    let file = Weights::open(format!("{KERAS}/model.weights.h5")).unwrap();
    let info = file.info("layers/dense_1/vars/0").unwrap();
    assert_eq!((info.dtype, info.dims), (DType::F32, vec![5, 3]));
    assert!(file.names().contains(&"layers/lstm/cell/vars/2"));
}

/// Keras numbers automatic names per class in one session: a model built
/// after another starts at `dense_2`. The preset takes the file's layers
/// of a class in number order (`dense_10` after `dense_9`).
#[test]
fn layers_numbered_from_elsewhere_line_up_in_number_order() {
    let key = |i: u64| xlafn::random::key(i).unwrap();
    let mlp = xlafn::nn::layers::Sequential::new()
        .add(Linear::new(&key(0), 2, 3).unwrap())
        .add(Linear::new(&key(1), 3, 4).unwrap());
    let mapping = Mapping::new().keras(&mlp);
    let zeros = [0u8; 4 * 12];
    use safetensors::{Dtype, tensor::TensorView};
    let view = |dims: Vec<usize>| {
        let n: usize = dims.iter().product();
        TensorView::new(Dtype::F32, dims, &zeros[..4 * n]).unwrap()
    };
    let bytes = safetensors::serialize(
        [
            ("layers/dense_10/vars/0", view(vec![3, 4])),
            ("layers/dense_10/vars/1", view(vec![4])),
            ("layers/dense_9/vars/0", view(vec![2, 3])),
            ("layers/dense_9/vars/1", view(vec![3])),
        ],
        None,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("renumbered.safetensors");
    std::fs::write(&path, bytes).unwrap();
    let report = weights::check(&mlp, &Weights::open(&path).unwrap(), &mapping).unwrap();
    assert_eq!(
        report.loaded,
        [
            (
                "layers/dense_9/vars/0".to_string(),
                "layers.0.kernel".to_string()
            ),
            (
                "layers/dense_9/vars/1".to_string(),
                "layers.0.bias".to_string()
            ),
            (
                "layers/dense_10/vars/0".to_string(),
                "layers.1.kernel".to_string()
            ),
            (
                "layers/dense_10/vars/1".to_string(),
                "layers.1.bias".to_string()
            ),
        ]
    );
}

#[test]
fn crafted_and_truncated_hdf5_files_are_refused_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let whole = std::fs::read(format!("{KERAS}/model.weights.h5")).unwrap();
    let net = net().unwrap();
    for cut in [8usize, 100, 800, whole.len() / 2, whole.len() - 1] {
        let path = dir.path().join(format!("cut{cut}.weights.h5"));
        std::fs::write(&path, &whole[..cut]).unwrap();
        // Either the file is refused on open, or a load of it fails or
        // misses variables: never a panic or a wrong value loaded.
        match Weights::open(&path) {
            Err(e) => assert!(e.to_string().contains("keras file"), "{e}"),
            Ok(w) => {
                let result = weights::load_into(
                    &net,
                    &w,
                    &Mapping::new().keras(&net),
                    LoadOptions::default(),
                );
                assert!(result.is_err(), "a file cut at {cut} loaded whole");
            }
        }
    }
    // Flipped bytes across the file: an error or a clean open, no panic.
    for at in (0..whole.len()).step_by(whole.len() / 64) {
        let mut bytes = whole.clone();
        bytes[at] ^= 0xa5;
        let path = dir.path().join("flipped.weights.h5");
        std::fs::write(&path, &bytes).unwrap();
        if let Ok(w) = Weights::open(&path) {
            for name in w.names() {
                let _ = w.tensor(name);
            }
        }
    }
    // A FIFO is refused, not waited on.
    let fifo = dir.path().join("fifo.weights.h5");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .is_ok_and(|s| s.success());
    if made {
        let e = Weights::open(&fifo).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
    }
}

/// A subclassed Keras model keeps a layer held as an attribute under the
/// attribute's name (`fc/vars/0`) and a list's layers under the list's
/// name by layer name (`blocks/dense_1`); xlafn's fields and `Vec`s of
/// the same names find them.
#[test]
fn a_subclassed_models_attributes_and_lists_load_by_their_names() {
    #[derive(Module)]
    struct Subclassed {
        fc: Linear,
        blocks: Vec<Linear>,
        norm: LayerNorm,
    }
    let key = |i: u64| xlafn::random::key(i).unwrap();
    let net = Subclassed {
        fc: Linear::new(&key(0), 6, 3).unwrap(),
        blocks: vec![
            Linear::new(&key(1), 3, 4).unwrap(),
            Linear::new(&key(2), 4, 2).unwrap(),
        ],
        norm: LayerNorm::new(2).unwrap(),
    };
    let file = Weights::open(format!("{KERAS}/subclassed.weights.h5")).unwrap();
    let report = weights::load_into(
        &net,
        &file,
        &Mapping::new().keras(&net),
        LoadOptions::default(),
    )
    .unwrap();
    let by_variable: std::collections::HashMap<&str, &str> = report
        .loaded
        .iter()
        .map(|(f, v)| (v.as_str(), f.as_str()))
        .collect();
    assert_eq!(by_variable["fc.kernel"], "fc/vars/0");
    assert_eq!(by_variable["blocks.1.kernel"], "blocks/dense_1/vars/0");
    assert_eq!(
        by_variable["norm.beta"],
        "layers/layer_normalization/vars/1"
    );
    for (variable, v) in net.named_variables() {
        let want = file.tensor(by_variable[variable.as_str()]).unwrap();
        assert_eq!(
            v.read().to_vec::<f32>().unwrap(),
            want.to_vec::<f32>().unwrap(),
            "{variable}"
        );
    }
}
