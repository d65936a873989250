//! Layers traced for an unknown batch: a function whose input signature
//! leaves the batch `None` traces once and serves every batch size, for
//! each built-in layer kind and pooling, and an export of a CNN, an LSTM
//! and a transformer decoder block serves batch sizes it was not traced
//! with.

use xlafn::nn::layers::{
    AttentionOptions, BatchNorm, Bidirectional, Conv2d, ConvTranspose2d, DepthwiseConv2d,
    Embedding, Gru, Layer, LayerNorm, Linear, Lstm, Mode, MultiHeadAttention, Recurrent, Stacked,
};
use xlafn::prelude::*;

fn key(i: u64) -> Tensor {
    xlafn::random::key(i).unwrap()
}

fn ramp(dims: &[i64]) -> Tensor {
    let n: i64 = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|k| ((k % 17) as f32 - 8.0) / 8.0).collect();
    Tensor::from_vec(v, dims).unwrap()
}

/// `layer` traced once with the batch unknown, then called on batches 1
/// and 3: each result equals the eager one.
fn serves_any_batch(
    name: &str,
    example: &[i64],
    layer: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) {
    let mut spec: Vec<Option<i64>> = example.iter().map(|&d| Some(d)).collect();
    spec[0] = None;
    let layer = std::sync::Arc::new(layer);
    let traced = {
        let layer = layer.clone();
        FunctionOptions::new()
            .input_signature(vec![TensorSpec::new(&spec, DType::F32)])
            .build(move |x: Tensor| -> Result<Tensor> { layer(&x) })
    };
    for batch in [1, 3] {
        let mut dims = example.to_vec();
        dims[0] = batch;
        let x = ramp(&dims);
        let got = traced
            .call((x.clone(),))
            .unwrap_or_else(|e| panic!("{name} traced for any batch, called on {batch}: {e}"));
        let want = layer(&x).unwrap();
        assert_eq!(got.dims(), want.dims(), "{name}");
        let diff = got
            .sub(&want)
            .unwrap()
            .abs()
            .unwrap()
            .reduce_max(&[], false)
            .unwrap();
        assert!(diff.item::<f32>().unwrap() < 1e-5, "{name}");
    }
    assert_eq!(traced.tracing_count(), 1, "{name} retraced");
}

#[test]
fn pooling_serves_any_batch() {
    serves_any_batch("max_pool", &[2, 6, 6, 3], |x| {
        x.max_pool(&[2, 2], &[2, 2], Padding::Same)
    });
    serves_any_batch("avg_pool", &[2, 6, 6, 3], |x| {
        x.avg_pool(&[3, 3], &[1, 1], Padding::Valid)
    });
}

#[test]
fn convolutions_and_norms_serve_any_batch() {
    let conv = Conv2d::new(&key(1), 3, 4, [3, 3]).unwrap();
    serves_any_batch("conv", &[2, 6, 6, 3], move |x| conv.forward(x));
    let deconv = ConvTranspose2d::new(&key(2), 3, 2, [3, 3])
        .unwrap()
        .strides([2, 2]);
    serves_any_batch("deconv", &[2, 5, 5, 3], move |x| deconv.forward(x));
    let dw = DepthwiseConv2d::new(&key(3), 3, [3, 3]).unwrap();
    serves_any_batch("depthwise", &[2, 6, 6, 3], move |x| dw.forward(x));
    let bn = BatchNorm::new(3, DType::F32).unwrap();
    serves_any_batch("batch_norm", &[2, 6, 6, 3], move |x| bn.forward(x));
    let ln = LayerNorm::new(3).unwrap();
    serves_any_batch("layer_norm", &[2, 4, 3], move |x| ln.forward(x));
    let fc = Linear::new(&key(4), 3, 5).unwrap();
    serves_any_batch("linear", &[2, 4, 3], move |x| fc.forward(x));
}

#[test]
fn recurrent_layers_serve_any_batch() {
    let lstm = Lstm::new(&key(5), 5).unwrap().return_sequences(true);
    lstm.build(3, DType::F32).unwrap();
    serves_any_batch("lstm", &[2, 4, 3], move |x| lstm.forward(x));
    let gru = Gru::new(&key(6), 5).unwrap();
    gru.build(3, DType::F32).unwrap();
    serves_any_batch("gru", &[2, 4, 3], move |x| gru.forward(x));
    let backwards = Gru::new(&key(9), 5)
        .unwrap()
        .go_backwards(true)
        .return_sequences(true);
    backwards.build(3, DType::F32).unwrap();
    serves_any_batch("gru backwards", &[2, 4, 3], move |x| backwards.forward(x));
    let pair = Bidirectional::new(
        Lstm::new(&key(10), 4).unwrap(),
        Lstm::new(&key(11), 4).unwrap(),
    )
    .return_sequences(true);
    pair.build(3, DType::F32).unwrap();
    serves_any_batch("bidirectional", &[2, 4, 3], move |x| pair.forward(x));
    // A mask made from the input: steps whose first feature is negative.
    let masked = Lstm::new(&key(12), 5).unwrap().return_sequences(true);
    masked.build(3, DType::F32).unwrap();
    serves_any_batch("masked lstm", &[2, 4, 3], move |x| {
        let mask = x
            .slice(&[0, 0, 0], &[-1, 4, 1])?
            .squeeze(&[2])?
            .ge_scalar(0.0)?;
        Ok(masked.run(x, None, Some(&mask))?.outputs)
    });
}

#[test]
fn attention_and_embedding_serve_any_batch() {
    let attn = MultiHeadAttention::new(&key(7), 2, 4).unwrap();
    attn.build(8, 8, 8, DType::F32).unwrap();
    let both = std::sync::Arc::new(attn);
    let attn = both.clone();
    serves_any_batch("attention", &[2, 5, 8], move |x| {
        attn.call_qkv(x, x, x, &AttentionOptions::new(), &Mode::inference())
    });
    let attn = both;
    serves_any_batch("causal attention", &[2, 5, 8], move |x| {
        attn.call_qkv(x, x, x, &AttentionOptions::causal(), &Mode::inference())
    });
    let emb = Embedding::new(&key(8), 10, 3).unwrap();
    serves_any_batch("embedding", &[2, 4], move |x| {
        emb.forward(&x.abs()?.mul_scalar(4.0)?.cast(DType::I32)?)
    });
}

/// `model` exported for batch 2 only from a trace with the batch unknown,
/// loaded, and called on batches 1 and 5: each equals the model run
/// eagerly.
fn export_serves_new_batches(
    tag: &str,
    example: &[i64],
    model: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) {
    let model = std::sync::Arc::new(model);
    let mut spec: Vec<Option<i64>> = example.iter().map(|&d| Some(d)).collect();
    spec[0] = None;
    let f = {
        let model = model.clone();
        function(move |x: Tensor| -> Result<Tensor> { model(&x) })
    };
    let cf = f
        .get_concrete_function((TensorSpec::new(&spec, DType::F32),))
        .unwrap();
    let dir = tempfile::Builder::new()
        .prefix(&format!("xlafn-anybatch-{tag}-"))
        .tempdir()
        .unwrap();
    cf.export(dir.path(), &[vec![example.to_vec()]]).unwrap();
    let loaded = xlafn::load(dir.path()).unwrap();
    for batch in [1, 5] {
        let mut dims = example.to_vec();
        dims[0] = batch;
        let x = ramp(&dims);
        let got = loaded
            .call(&[&x])
            .unwrap_or_else(|e| panic!("{tag} export called on batch {batch}: {e}"))
            .remove(0);
        let want = model(&x).unwrap();
        assert_eq!(got.dims(), want.dims(), "{tag}");
        let diff = got
            .sub(&want)
            .unwrap()
            .abs()
            .unwrap()
            .reduce_max(&[], false)
            .unwrap();
        assert!(
            diff.item::<f32>().unwrap() < 1e-5,
            "{tag}: {}",
            diff.item::<f32>().unwrap()
        );
    }
}

#[test]
fn an_exported_cnn_serves_batches_it_was_not_traced_with() {
    let conv = Conv2d::new(&key(20), 3, 8, [3, 3])
        .unwrap()
        .padding(Padding::Same);
    let bn = BatchNorm::new(8, DType::F32).unwrap();
    let head = Linear::new(&key(21), 8 * 3 * 3, 4).unwrap();
    export_serves_new_batches("cnn", &[2, 6, 6, 3], move |x| {
        let h = bn.forward(&conv.forward(x)?.relu()?)?;
        let h = h.max_pool(&[2, 2], &[2, 2], Padding::Valid)?;
        head.forward(&h.reshape(&[-1, 8 * 3 * 3])?)
    });
}

#[test]
fn an_exported_lstm_serves_batches_it_was_not_traced_with() {
    let lstm = Stacked::new(vec![
        Lstm::new(&key(22), 6).unwrap(),
        Lstm::new(&key(23), 6).unwrap(),
    ])
    .unwrap();
    lstm.build(3, DType::F32).unwrap();
    let head = Linear::new(&key(24), 6, 2).unwrap();
    export_serves_new_batches("lstm", &[2, 5, 3], move |x| head.forward(&lstm.forward(x)?));
}

#[test]
fn an_exported_transformer_decoder_block_serves_batches_it_was_not_traced_with() {
    let attn = MultiHeadAttention::new(&key(25), 2, 4).unwrap();
    attn.build(8, 8, 8, DType::F32).unwrap();
    let (ln1, ln2) = (LayerNorm::new(8).unwrap(), LayerNorm::new(8).unwrap());
    let up = Linear::new(&key(26), 8, 16).unwrap();
    let down = Linear::new(&key(27), 16, 8).unwrap();
    export_serves_new_batches("decoder", &[2, 5, 8], move |x| {
        let h = ln1.forward(x)?;
        let h =
            x.add(&attn.call_qkv(&h, &h, &h, &AttentionOptions::causal(), &Mode::inference())?)?;
        let m = down.forward(&up.forward(&ln2.forward(&h)?)?.gelu(false)?)?;
        h.add(&m)
    });
}
