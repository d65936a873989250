//! Framework presets: a PyTorch state dict, written by torch's own savers
//! (`scripts/torch_fixtures.py`, committed under `tests/fixtures/torch`),
//! loads into xlafn's built-in layers with `Mapping::torch` and no hand
//! renames, and each layer then gives PyTorch's saved outputs. The
//! combined variables (an LSTM's two biases, a GRU's stacked biases) are
//! reported, and a file missing one part is refused rather than loaded
//! half.

#[path = "common/close.rs"]
mod close;

use xlafn::module::Module;
use xlafn::nn::layers::{
    Activation, Conv2d, ConvTranspose2d, DepthwiseConv2d, Embedding, Gru, Layer, Linear, Lstm,
    Mode, MultiHeadAttention, Recurrent, Sequential, Stacked,
};
use xlafn::nn::layers::{AttentionOptions, BatchNorm, LayerNorm};
use xlafn::prelude::*;
use xlafn::weights::{self, Combine, LoadOptions, Mapping, Weights};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/torch");
const FLAX: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/flax");

/// The xlafn twin of the fixture script's `Net`: the same attribute
/// names, so the state dict's names are the module's paths.
#[derive(Module)]
struct Net {
    conv: Conv2d,
    bn: BatchNorm,
    fc: Linear,
    lstm: Stacked<Lstm>,
    gru: Gru,
    attn: MultiHeadAttention,
    emb: Embedding,
    deconv: ConvTranspose2d,
    dw: DepthwiseConv2d,
    seq: Sequential,
}

fn net() -> Result<Net> {
    let key = |i: u64| xlafn::random::key(i);
    let bn = BatchNorm::new(4, DType::F32)?.epsilon(1e-5); // PyTorch's
    let lstm = Stacked::new(vec![Lstm::new(&key(3)?, 6)?, Lstm::new(&key(4)?, 6)?])?
        .return_sequences(true);
    lstm.build(4, DType::F32)?;
    let gru = Gru::new(&key(5)?, 5)?.return_sequences(true);
    gru.build(4, DType::F32)?;
    let attn = MultiHeadAttention::new(&key(6)?, 2, 4)?;
    attn.build(8, 8, 8, DType::F32)?;
    Ok(Net {
        conv: Conv2d::new(&key(1)?, 3, 4, [3, 3])?.padding(Padding::Same),
        bn,
        fc: Linear::new(&key(2)?, 6, 5)?,
        lstm,
        gru,
        attn,
        emb: Embedding::new(&key(7)?, 10, 3)?,
        deconv: ConvTranspose2d::new(&key(8)?, 3, 2, [3, 3])?.strides([2, 2]),
        dw: DepthwiseConv2d::lazy(&key(9)?, [3, 3])?
            .depth_multiplier(2)
            .build(3)?,
        seq: Sequential::new()
            .add(Linear::new(&key(10)?, 3, 4)?)
            .add_activation(Activation::Relu)
            .add(Linear::new(&key(11)?, 4, 2)?),
    })
}

fn io(name: &str) -> Tensor {
    let file = Weights::open(format!("{FIXTURES}/io.safetensors")).unwrap();
    file.tensor(name).unwrap()
}

fn flax_io(name: &str) -> Tensor {
    let file = Weights::open(format!("{FLAX}/io.safetensors")).unwrap();
    file.tensor(name).unwrap()
}

/// NCHW (PyTorch) to NHWC (xlafn), and back.
fn nhwc(t: &Tensor) -> Tensor {
    t.transpose(&[0, 2, 3, 1]).unwrap()
}

fn assert_close(name: &str, got: &Tensor, want: &Tensor) {
    close::assert_close_to("the framework", name, got, want, 2e-5);
}

fn loaded_net() -> (Net, weights::LoadReport) {
    let net = net().unwrap();
    let file = Weights::open(format!("{FIXTURES}/state_dict.safetensors")).unwrap();
    let mapping = Mapping::new().torch(&net);
    let report = weights::load_into(&net, &file, &mapping, LoadOptions::default()).unwrap();
    (net, report)
}

#[test]
fn a_pytorch_state_dict_loads_with_the_preset_and_nothing_else() {
    let (net, report) = loaded_net();
    assert!(
        report.unused.is_empty() && report.missing.is_empty(),
        "{report:?}"
    );
    assert_eq!(report.skipped, ["bn.num_batches_tracked"]);
    let summed: Vec<(&str, &[String])> = report
        .combined
        .iter()
        .filter(|c| c.how == Combine::Sum)
        .map(|c| (c.variable.as_str(), c.sources.as_slice()))
        .collect();
    assert_eq!(
        summed,
        [
            (
                "lstm.layers.0.bias",
                &["lstm.bias_ih_l0".to_string(), "lstm.bias_hh_l0".into()][..]
            ),
            (
                "lstm.layers.1.bias",
                &["lstm.bias_ih_l1".to_string(), "lstm.bias_hh_l1".into()][..]
            ),
        ]
    );
    let stacked: Vec<&str> = report
        .combined
        .iter()
        .filter(|c| c.how == Combine::Stack)
        .map(|c| c.variable.as_str())
        .collect();
    assert_eq!(stacked, ["gru.bias"]);
    // `in_proj_weight` becomes three kernels.
    let from_in_proj = report
        .loaded
        .iter()
        .filter(|(file, _)| file == "attn.in_proj_weight")
        .count();
    assert_eq!(from_in_proj, 3);
    drop(net);
}

#[test]
fn convolutions_and_batch_norm_give_pytorchs_outputs() {
    let (net, _) = loaded_net();
    let image = nhwc(&io("image"));
    let conv = net.conv.forward(&image).unwrap();
    assert_close("conv", &conv, &nhwc(&io("conv_out")));
    let bn = net.bn.forward(&nhwc(&io("conv_out"))).unwrap();
    assert_close("bn", &bn, &nhwc(&io("bn_out")));
    let deconv = net.deconv.forward(&image).unwrap();
    assert_close("deconv", &deconv, &nhwc(&io("deconv_out")));
    let dw = net.dw.forward(&image).unwrap();
    assert_close("depthwise", &dw, &nhwc(&io("dw_out")));
}

#[test]
fn dense_embedding_and_sequential_give_pytorchs_outputs() {
    let (net, _) = loaded_net();
    assert_close(
        "fc",
        &net.fc.forward(&io("features")).unwrap(),
        &io("fc_out"),
    );
    assert_close("emb", &net.emb.forward(&io("ids")).unwrap(), &io("emb_out"));
    assert_close(
        "seq",
        &net.seq.forward(&io("small")).unwrap(),
        &io("seq_out"),
    );
}

#[test]
fn recurrent_layers_give_pytorchs_outputs() {
    let (net, _) = loaded_net();
    let x = io("sequence");
    assert_close("lstm", &net.lstm.forward(&x).unwrap(), &io("lstm_out"));
    assert_close("gru", &net.gru.forward(&x).unwrap(), &io("gru_out"));
}

#[test]
fn attention_gives_pytorchs_outputs() {
    let (net, _) = loaded_net();
    let x = io("tokens_in");
    let options = AttentionOptions::new();
    let y = net
        .attn
        .call_qkv(&x, &x, &x, &options, &Mode::inference())
        .unwrap();
    assert_close("attn", &y, &io("attn_out"));
}

/// The file without one of an LSTM's two biases: loading the other alone
/// would give embeddings that are silently wrong, so the load refuses,
/// naming the variable and the part it has.
#[test]
fn a_combined_variable_with_a_part_missing_is_refused() {
    let net = net().unwrap();
    let file = Weights::open(format!("{FIXTURES}/state_dict.safetensors")).unwrap();
    let mapping = Mapping::new().skip(|n| n == "lstm.bias_hh_l1").torch(&net);
    let before = net.lstm.named_variables()[5]
        .1
        .read()
        .to_vec::<f32>()
        .unwrap();
    let e = weights::load_into(&net, &file, &mapping, LoadOptions::default())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("lstm.layers.1.bias") && e.contains("summed from 2") && e.contains("bias_ih_l1"),
        "{e}"
    );
    // Nothing was assigned.
    let after = net.lstm.named_variables()[5]
        .1
        .read()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(before, after);
}

/// A layer of another size than the file's: the error names the
/// framework's layout and both shapes.
#[test]
fn a_layer_of_another_size_is_refused_with_both_shapes() {
    let mut net = net().unwrap();
    net.fc = Linear::new(&xlafn::random::key(2).unwrap(), 6, 4).unwrap();
    let file = Weights::open(format!("{FIXTURES}/state_dict.safetensors")).unwrap();
    let e = weights::load_into(
        &net,
        &file,
        &Mapping::new().torch(&net),
        LoadOptions::default(),
    )
    .unwrap_err()
    .to_string();
    // Names are read in sorted order: the bias is met first.
    assert!(
        e.contains("'fc.bias' is f32[4]") && e.contains("f32[5]"),
        "{e}"
    );
}

/// The xlafn twin of `scripts/flax_fixtures.py`'s network, with Flax's
/// conventions where a layer's options hold them (BatchNorm's epsilon
/// 1e-5, LayerNorm's 1e-6).
#[derive(Module)]
struct FlaxNet {
    conv: Conv2d,
    bn: BatchNorm,
    fc: Linear,
    deconv: ConvTranspose2d,
    ln: LayerNorm,
    lstm: Lstm,
    attn: MultiHeadAttention,
    emb: Embedding,
}

fn flax_net() -> Result<FlaxNet> {
    let key = |i: u64| xlafn::random::key(i);
    let bn = BatchNorm::new(4, DType::F32)?.epsilon(1e-5);
    let lstm = Lstm::new(&key(3)?, 6)?.return_sequences(true);
    lstm.build(4, DType::F32)?;
    let attn = MultiHeadAttention::new(&key(6)?, 2, 4)?;
    attn.build(8, 8, 8, DType::F32)?;
    Ok(FlaxNet {
        conv: Conv2d::new(&key(1)?, 3, 4, [3, 3])?.padding(Padding::Same),
        bn,
        fc: Linear::new(&key(2)?, 6, 5)?,
        deconv: ConvTranspose2d::new(&key(8)?, 3, 2, [3, 3])?
            .strides([2, 2])
            .padding(Padding::Valid),
        ln: LayerNorm::new(6)?.epsilon(1e-6),
        lstm,
        attn,
        emb: Embedding::new(&key(7)?, 10, 3)?,
    })
}

#[test]
fn a_flax_variables_tree_loads_with_the_preset_and_gives_flaxs_outputs() {
    let net = flax_net().unwrap();
    let file = Weights::open(format!("{FLAX}/variables.safetensors")).unwrap();
    let mapping = Mapping::new().flax(&net);
    let report = weights::load_into(&net, &file, &mapping, LoadOptions::default()).unwrap();
    assert!(
        report.unused.is_empty() && report.missing.is_empty(),
        "{report:?}"
    );
    let concatenated: Vec<(&str, usize)> = report
        .combined
        .iter()
        .map(|c| (c.variable.as_str(), c.sources.len()))
        .collect();
    assert_eq!(
        concatenated,
        [
            ("lstm.kernel", 4),
            ("lstm.recurrent_kernel", 4),
            ("lstm.bias", 4)
        ]
    );
    let image = flax_io("image");
    let conv = net.conv.forward(&image).unwrap();
    assert_close("conv", &conv, &flax_io("conv_out"));
    assert_close("bn", &net.bn.forward(&conv).unwrap(), &flax_io("bn_out"));
    let features = flax_io("features");
    assert_close(
        "fc",
        &net.fc.forward(&features).unwrap(),
        &flax_io("fc_out"),
    );
    assert_close(
        "ln",
        &net.ln.forward(&features).unwrap(),
        &flax_io("ln_out"),
    );
    // Flax's kernel is not flipped; the preset flips it.
    assert_close(
        "deconv",
        &net.deconv.forward(&image).unwrap(),
        &flax_io("deconv_out"),
    );
    let lstm = net.lstm.forward(&flax_io("sequence")).unwrap();
    assert_close("lstm", &lstm, &flax_io("lstm_out"));
    let x = flax_io("tokens");
    let attn = net
        .attn
        .call_qkv(&x, &x, &x, &AttentionOptions::new(), &Mode::inference())
        .unwrap();
    assert_close("attn", &attn, &flax_io("attn_out"));
    assert_close(
        "emb",
        &net.emb.forward(&flax_io("ids")).unwrap(),
        &flax_io("emb_out"),
    );
}

/// A `Linear` after PyTorch's `flatten(1)` of channels-first features
/// reads them in `[c, h, w]` order; after xlafn's flatten of channels-last
/// ones, in `[h, w, c]` order. `channels_first_flatten` reorders the
/// kernel's rows so both compute the same.
#[test]
fn a_linear_after_a_channels_first_flatten_is_reordered() {
    #[derive(Module)]
    struct Head {
        fc: Linear,
    }
    let (c, h, w, out) = (2i64, 2i64, 3i64, 4i64);
    let n = (c * h * w) as usize;
    let weight: Vec<f32> = (0..out as usize * n)
        .map(|k| ((k * 5 % 13) as f32 - 6.0) / 7.0)
        .collect();
    let bias = vec![0.5f32, -0.25, 0.0, 1.0];
    let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
    let (wb, bb) = (bytes(&weight), bytes(&bias));
    use safetensors::{Dtype, tensor::TensorView};
    let file = safetensors::serialize(
        [
            (
                "fc.weight",
                TensorView::new(Dtype::F32, vec![out as usize, n], &wb).unwrap(),
            ),
            (
                "fc.bias",
                TensorView::new(Dtype::F32, vec![out as usize], &bb).unwrap(),
            ),
        ],
        None,
    )
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("head.safetensors");
    std::fs::write(&path, file).unwrap();
    let head = Head {
        fc: Linear::new(&xlafn::random::key(0).unwrap(), c * h * w, out).unwrap(),
    };
    let mapping = Mapping::new()
        .torch(&head)
        .channels_first_flatten(|n| n == "fc.kernel", [c, h, w]);
    let file = Weights::open(&path).unwrap();
    weights::load_into(&head, &file, &mapping, LoadOptions::default()).unwrap();
    // PyTorch's output, by a direct loop over the NCHW features.
    let x: Vec<f32> = (0..n).map(|k| (k as f32 - 5.0) / 3.0).collect();
    let want: Vec<f64> = (0..out as usize)
        .map(|o| {
            bias[o] as f64
                + (0..n)
                    .map(|i| weight[o * n + i] as f64 * x[i] as f64)
                    .sum::<f64>()
        })
        .collect();
    let nchw = Tensor::from_vec(x, &[1, c, h, w]).unwrap();
    let flat = nchw
        .transpose(&[0, 2, 3, 1])
        .unwrap()
        .reshape(&[1, c * h * w])
        .unwrap();
    let got = head.fc.forward(&flat).unwrap().to_vec::<f32>().unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert!((*g as f64 - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}
