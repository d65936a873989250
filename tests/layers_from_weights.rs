//! Constructors that take weights: each layer's `from_weights` makes its
//! variables from the tensors given (nothing drawn), infers its sizes
//! from them, keeps them through options that do not change their shape,
//! and computes what the same layer with those weights assigned computes.
//! Weights of the wrong rank, shape or dtype are refused, naming the
//! layer and both shapes.

use xlafn::module::Module;
use xlafn::nn::layers::{
    Activation, AttentionOptions, Conv1d, Conv2d, ConvTranspose2d, DepthwiseConv2d, Embedding, Gru,
    Layer, Linear, Lstm, Mode, MultiHeadAttention, Recurrent,
};
use xlafn::prelude::*;

/// Deterministic values of `dims`, different per `seed`.
fn values(dims: &[i64], seed: u64) -> Tensor {
    let n: i64 = dims.iter().product();
    let v: Vec<f32> = (0..n as u64)
        .map(|i| (((i * 7 + seed * 13) % 17) as f32 - 8.0) / 9.0)
        .collect();
    Tensor::from_vec(v, dims).unwrap()
}

fn host(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

/// Every variable of `layer` equals the given tensor of that leaf name.
fn holds(layer: &impl Module, given: &[(&str, &Tensor)]) {
    let vars = layer.named_variables();
    assert_eq!(vars.len(), given.len(), "{vars:?}");
    for (name, want) in given {
        let (_, v) = vars
            .iter()
            .find(|(path, _)| path.ends_with(name))
            .unwrap_or_else(|| panic!("no variable {name}"));
        assert_eq!(host(&v.read()), host(want), "{name}");
    }
}

#[test]
fn a_linear_from_weights_computes_with_them() {
    let (k, b) = (values(&[3, 4], 1), values(&[4], 2));
    let fc = Linear::from_weights(&k, Some(&b))
        .unwrap()
        .activation(Activation::Relu);
    holds(&fc, &[("kernel", &k), ("bias", &b)]);
    assert_eq!(fc.units(), 4);
    let x = values(&[2, 3], 3);
    // A direct loop: relu(x k + b).
    let (xv, kv, bv) = (host(&x), host(&k), host(&b));
    let want: Vec<f32> = (0..2)
        .flat_map(|r| {
            let (xv, kv, bv) = (&xv, &kv, &bv);
            (0..4).map(move |c| {
                let s: f32 = (0..3).map(|i| xv[r * 3 + i] * kv[i * 4 + c]).sum();
                (s + bv[c]).max(0.0)
            })
        })
        .collect();
    let got = host(&fc.forward(&x).unwrap());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-6, "{got:?} vs {want:?}");
    }
    // Without a bias, and an option that drops it.
    let plain = Linear::from_weights(&k, None).unwrap();
    holds(&plain, &[("kernel", &k)]);
    let dropped = Linear::from_weights(&k, Some(&b)).unwrap().use_bias(false);
    holds(&dropped, &[("kernel", &k)]);
}

/// `from_weights` and `new` + `assign` give the same outputs.
fn same_as_assigned(name: &str, built: &impl Layer, drawn: &impl Layer, x: &Tensor) {
    for ((_, a), (_, b)) in built.named_variables().iter().zip(drawn.named_variables()) {
        b.assign(&a.read()).unwrap();
    }
    let (y, want) = (built.forward(x).unwrap(), drawn.forward(x).unwrap());
    assert_eq!(host(&y), host(&want), "{name}");
}

#[test]
fn convolutions_from_weights_infer_their_sizes_and_compute_with_them() {
    let key = xlafn::random::key(9).unwrap();
    let (k, b) = (values(&[3, 3, 2, 5], 1), values(&[5], 2));
    let conv = Conv2d::from_weights(&k, Some(&b))
        .unwrap()
        .padding(Padding::Same);
    holds(&conv, &[("kernel", &k), ("bias", &b)]);
    let drawn = Conv2d::new(&key, 2, 5, [3, 3])
        .unwrap()
        .padding(Padding::Same);
    same_as_assigned("conv2d", &conv, &drawn, &values(&[1, 4, 4, 2], 3));

    let k1 = values(&[5, 3, 4], 4);
    let conv1 = Conv1d::from_weights(&k1, None).unwrap();
    holds(&conv1, &[("kernel", &k1)]);
    let drawn1 = Conv1d::new(&key, 3, 4, [5]).unwrap().use_bias(false);
    same_as_assigned("conv1d", &conv1, &drawn1, &values(&[2, 9, 3], 5));

    let kt = values(&[3, 3, 2, 4], 6); // [kh, kw, filters, in]
    let up = ConvTranspose2d::from_weights(&kt, Some(&values(&[2], 7)))
        .unwrap()
        .strides([2, 2]);
    let drawn_up = ConvTranspose2d::new(&key, 4, 2, [3, 3])
        .unwrap()
        .strides([2, 2]);
    same_as_assigned("conv_transpose", &up, &drawn_up, &values(&[1, 3, 3, 4], 8));

    let kd = values(&[3, 3, 4, 2], 9); // [kh, kw, in, multiplier]
    let dw = DepthwiseConv2d::from_weights(&kd, Some(&values(&[8], 10))).unwrap();
    let drawn_dw = DepthwiseConv2d::lazy(&key, [3, 3])
        .unwrap()
        .depth_multiplier(2)
        .build(4)
        .unwrap();
    same_as_assigned("depthwise", &dw, &drawn_dw, &values(&[1, 5, 5, 4], 11));
}

#[test]
fn recurrent_layers_and_embeddings_from_weights_compute_with_them() {
    let key = xlafn::random::key(3).unwrap();
    let (k, r, b) = (values(&[3, 8], 1), values(&[2, 8], 2), values(&[8], 3));
    let lstm = Lstm::from_weights(&k, &r, Some(&b))
        .unwrap()
        .return_sequences(true);
    holds(
        &lstm,
        &[("kernel", &k), ("recurrent_kernel", &r), ("bias", &b)],
    );
    let drawn = Lstm::new(&key, 2).unwrap().return_sequences(true);
    drawn.build(3, DType::F32).unwrap();
    same_as_assigned("lstm", &lstm, &drawn, &values(&[2, 4, 3], 4));

    // A GRU's bias shape says whether it resets after the matmul.
    let (k, r) = (values(&[3, 6], 5), values(&[2, 6], 6));
    for (bias, reset_after) in [(values(&[2, 6], 7), true), (values(&[6], 8), false)] {
        let gru = Gru::from_weights(&k, &r, Some(&bias)).unwrap();
        let drawn = Gru::new(&key, 2).unwrap().reset_after(reset_after);
        drawn.build(3, DType::F32).unwrap();
        same_as_assigned("gru", &gru, &drawn, &values(&[2, 4, 3], 9));
    }

    let table = values(&[5, 3], 10);
    let emb = Embedding::from_weights(&table).unwrap();
    holds(&emb, &[("embeddings", &table)]);
    let ids = Tensor::from_vec(vec![4i32, 0, 2], &[3]).unwrap();
    let rows = host(&emb.forward(&ids).unwrap());
    let t = host(&table);
    assert_eq!(rows, [&t[12..15], &t[0..3], &t[6..9]].concat());
}

#[test]
fn weights_of_the_wrong_shape_are_refused_naming_the_layer() {
    let e = Linear::from_weights(&values(&[3], 1), None).unwrap_err();
    assert!(
        e.to_string().contains("Linear") && e.to_string().contains("[in_features, units]"),
        "{e}"
    );
    let e = Linear::from_weights(&values(&[3, 4], 1), Some(&values(&[3], 2))).unwrap_err();
    assert!(
        e.to_string().contains("bias") && e.to_string().contains("[4]"),
        "{e}"
    );
    let e = Conv2d::from_weights(&values(&[3, 3, 2], 1), None).unwrap_err();
    assert!(e.to_string().contains("Conv2d"), "{e}");
    let e = Lstm::from_weights(&values(&[3, 8], 1), &values(&[2, 6], 2), None).unwrap_err();
    assert!(e.to_string().contains("recurrent kernel"), "{e}");
    let e = Gru::from_weights(
        &values(&[3, 6], 1),
        &values(&[2, 6], 2),
        Some(&values(&[5], 3)),
    )
    .unwrap_err();
    assert!(e.to_string().contains("bias"), "{e}");
    let f64_bias = values(&[4], 2).cast(DType::F64).unwrap();
    let e = Linear::from_weights(&values(&[3, 4], 1), Some(&f64_bias)).unwrap_err();
    assert!(e.to_string().contains("f64"), "{e}");
}

#[test]
fn attention_from_weights_takes_its_sizes_from_the_kernels() {
    // Grouped heads, a value size and an output size of their own.
    let drawn = MultiHeadAttention::new(&xlafn::random::key(4).unwrap(), 4, 3)
        .unwrap()
        .num_kv_heads(2)
        .unwrap()
        .value_dim(5)
        .unwrap()
        .output_dim(7)
        .unwrap();
    drawn.build(6, 6, 6, DType::F32).unwrap();
    let read = |p: &xlafn::nn::layers::Projection| {
        (
            p.kernel.variable().unwrap().read(),
            p.bias.as_ref().map(|b| b.variable().unwrap().read()),
        )
    };
    let (q, k, v, o) = (
        read(&drawn.query),
        read(&drawn.key),
        read(&drawn.value),
        read(&drawn.output),
    );
    let given = MultiHeadAttention::from_weights(
        (&q.0, q.1.as_ref()),
        (&k.0, k.1.as_ref()),
        (&v.0, v.1.as_ref()),
        (&o.0, o.1.as_ref()),
    )
    .unwrap();
    assert_eq!((given.num_heads(), given.kv_heads()), (4, 2));
    assert_eq!((given.key_dim(), given.value_head_dim()), (3, 5));
    let x = values(&[2, 4, 6], 1);
    let opts = AttentionOptions::causal();
    let want = drawn
        .call_qkv(&x, &x, &x, &opts, &Mode::inference())
        .unwrap();
    let got = given
        .call_qkv(&x, &x, &x, &opts, &Mode::inference())
        .unwrap();
    assert_eq!(host(&got), host(&want));
    let e = MultiHeadAttention::from_weights(
        (&q.0, None),
        (&k.0, k.1.as_ref()),
        (&v.0, None),
        (&o.0, None),
    )
    .unwrap_err();
    assert!(e.to_string().contains("every projection"), "{e}");
}
