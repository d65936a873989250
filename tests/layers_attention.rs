//! `nn::layers::MultiHeadAttention` against a reference written here
//! with plain f64 loops (per-head projections, softmax over the visible
//! keys, output projection): every mask kind, eagerly and compiled;
//! grouped-query attention against multi-head attention with repeated
//! key/value weights; fully masked rows; half precision; dropout;
//! gradients against central differences; a cross-attention cache of projected keys and
//! values against the reference with every mask, and inside a compiled
//! decoding loop; errors for bad configurations and shapes. The
//! self-attention key-value cache is tests/layers_attention_cache.rs's.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use std::collections::BTreeMap;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn::layers::{AttentionOptions, CrossKvCache, KvCache, Layer, Mode, MultiHeadAttention};
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, host, values};

#[path = "common/attention_setup.rs"]
mod attention_setup;
use attention_setup::{CFG, Cfg, build_and_randomize, layer, tensor};

/// Plain-loop multi-head attention; `allowed(b, t, s)` is the mask.
fn reference(
    w: &BTreeMap<String, Vec<f64>>,
    c: Cfg,
    q: &[f64],
    k: &[f64],
    v: &[f64],
    allowed: &dyn Fn(usize, usize, usize) -> bool,
) -> Vec<f64> {
    let bias = |name: &str, n: usize| w.get(name).cloned().unwrap_or(vec![0.0; n]);
    let (wq, bq) = (&w["query.kernel"], bias("query.bias", c.h * c.kd));
    let (wk, bk) = (&w["key.kernel"], bias("key.bias", c.g * c.kd));
    let (wv, bv) = (&w["value.kernel"], bias("value.bias", c.g * c.vd));
    let (wo, bo) = (&w["output.kernel"], bias("output.bias", c.o));
    // x [rows, d] times kernel [d, heads * size] plus bias.
    let project = |x: &[f64], rows: usize, d: usize, kern: &[f64], b: &[f64], width: usize| {
        let mut y = vec![0.0; rows * width];
        for r in 0..rows {
            for j in 0..width {
                let mut acc = b[j];
                for i in 0..d {
                    acc += x[r * d + i] * kern[i * width + j];
                }
                y[r * width + j] = acc;
            }
        }
        y
    };
    let qp = project(q, c.b * c.t, c.dq, wq, &bq, c.h * c.kd);
    let kp = project(k, c.b * c.s, c.dk, wk, &bk, c.g * c.kd);
    let vp = project(v, c.b * c.s, c.dv, wv, &bv, c.g * c.vd);
    let group = c.h / c.g;
    let mut y = vec![0.0; c.b * c.t * c.o];
    for b in 0..c.b {
        for t in 0..c.t {
            let mut heads = vec![0.0; c.h * c.vd];
            for h in 0..c.h {
                let g = h / group;
                let scores: Vec<f64> = (0..c.s)
                    .map(|s| {
                        (0..c.kd)
                            .map(|i| {
                                qp[(b * c.t + t) * c.h * c.kd + h * c.kd + i]
                                    * kp[(b * c.s + s) * c.g * c.kd + g * c.kd + i]
                            })
                            .sum::<f64>()
                            / (c.kd as f64).sqrt()
                    })
                    .collect();
                let visible: Vec<usize> = (0..c.s).filter(|&s| allowed(b, t, s)).collect();
                let m = visible
                    .iter()
                    .map(|&s| scores[s])
                    .fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = visible.iter().map(|&s| (scores[s] - m).exp()).sum();
                for &s in &visible {
                    let p = (scores[s] - m).exp() / z;
                    for j in 0..c.vd {
                        heads[h * c.vd + j] += p * vp[(b * c.s + s) * c.g * c.vd + g * c.vd + j];
                    }
                }
            }
            let row = project(&heads, 1, c.h * c.vd, wo, &bo, c.o);
            y[(b * c.t + t) * c.o..(b * c.t + t + 1) * c.o].copy_from_slice(&row);
        }
    }
    y
}

struct Inputs {
    q: Vec<f64>,
    k: Vec<f64>,
    v: Vec<f64>,
}

fn inputs(c: Cfg, seed: u64) -> Inputs {
    Inputs {
        q: values(c.b * c.t * c.dq, seed, -1.0, 1.0),
        k: values(c.b * c.s * c.dk, seed + 1, -1.0, 1.0),
        v: values(c.b * c.s * c.dv, seed + 2, -1.0, 1.0),
    }
}

fn qkv(c: Cfg, x: &Inputs, dtype: DType) -> (Tensor, Tensor, Tensor) {
    (
        tensor(&x.q, &[c.b as i64, c.t as i64, c.dq as i64], dtype),
        tensor(&x.k, &[c.b as i64, c.s as i64, c.dk as i64], dtype),
        tensor(&x.v, &[c.b as i64, c.s as i64, c.dv as i64], dtype),
    )
}

/// The padding mask of the tests: batch 0 sees every key, batch 1 the
/// first two.
fn padding(b: usize, s: usize) -> bool {
    b == 0 || s < 2
}

/// The general mask: a checkerboard that leaves (b=1, t=2) with no key.
fn general(b: usize, t: usize, s: usize) -> bool {
    !(b == 1 && t == 2) && (b + t + s) % 3 != 1
}

fn mask_tensor(c: Cfg, f: &dyn Fn(usize, usize, usize) -> bool, dtype: DType) -> Tensor {
    let mut v = Vec::new();
    for b in 0..c.b {
        for t in 0..c.t {
            for s in 0..c.s {
                v.push(if f(b, t, s) { 1i32 } else { 0 });
            }
        }
    }
    Tensor::from_vec(v, &[c.b as i64, c.t as i64, c.s as i64])
        .unwrap()
        .cast(dtype)
        .unwrap()
}

fn padding_tensor(c: Cfg) -> Tensor {
    let v: Vec<bool> = (0..c.b)
        .flat_map(|b| (0..c.s).map(move |s| padding(b, s)))
        .collect();
    let v: Vec<u8> = v.into_iter().map(u8::from).collect();
    Tensor::from_vec(v, &[c.b as i64, c.s as i64])
        .unwrap()
        .cast(DType::Bool)
        .unwrap()
}

type MaskFn = Box<dyn Fn(usize, usize, usize) -> bool>;

/// Every mask kind: its options and its reference predicate.
fn mask_cases(c: Cfg) -> Vec<(&'static str, AttentionOptions, MaskFn)> {
    vec![
        ("none", AttentionOptions::new(), Box::new(|_, _, _| true)),
        (
            "causal",
            AttentionOptions::causal(),
            Box::new(|_, t, s| s <= t),
        ),
        (
            "padding",
            AttentionOptions::new().padding_mask(&padding_tensor(c)),
            Box::new(|b, _, s| padding(b, s)),
        ),
        (
            "general (int)",
            AttentionOptions::new().attention_mask(&mask_tensor(c, &general, DType::I32)),
            Box::new(general),
        ),
        (
            "all three",
            AttentionOptions::causal()
                .padding_mask(&padding_tensor(c))
                .attention_mask(&mask_tensor(c, &general, DType::Bool)),
            Box::new(|b, t, s| s <= t && padding(b, s) && general(b, t, s)),
        ),
    ]
}

#[test]
fn matches_the_per_head_reference_with_every_mask_eager_and_compiled() {
    let c = CFG;
    let mha = Arc::new(layer(c, 1));
    let w = build_and_randomize(&mha, c, DType::F64, 10);
    let x = inputs(c, 20);
    let (q, k, v) = qkv(c, &x, DType::F64);
    for (what, options, allowed) in mask_cases(c) {
        let want = reference(&w, c, &x.q, &x.k, &x.v, &*allowed);
        let eager = mha
            .call_qkv(&q, &k, &v, &options, &Mode::inference())
            .unwrap();
        assert_eq!(eager.dims(), vec![c.b as i64, c.t as i64, c.o as i64]);
        assert_close(&host(&eager), &want, 1e-10, &format!("{what} eager"));
        let f = {
            let (mha, options) = (mha.clone(), options.clone());
            function(move |q: Tensor, k: Tensor, v: Tensor| {
                mha.call_qkv(&q, &k, &v, &options, &Mode::inference())
            })
        };
        let compiled = f.call((q.clone(), k.clone(), v.clone())).unwrap();
        assert_close(&host(&compiled), &want, 1e-10, &format!("{what} compiled"));
    }
}

/// Keys and values projected once (`cross_cache`) and attended to by
/// `call_cross_cached` give the reference with every mask, eagerly and
/// in a compiled loop that reads the cache at each step.
#[test]
fn a_cross_attention_cache_matches_the_reference_eager_and_in_a_compiled_loop() {
    let c = CFG;
    let mha = Arc::new(layer(c, 1));
    let w = build_and_randomize(&mha, c, DType::F64, 10);
    let x = inputs(c, 20);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let memory = mha.cross_cache(&k, &v).unwrap();
    assert_eq!(
        memory.key.dims(),
        vec![c.b as i64, c.s as i64, c.g as i64, c.kd as i64]
    );
    for (what, options, allowed) in mask_cases(c) {
        let want = reference(&w, c, &x.q, &x.k, &x.v, &*allowed);
        let eager = mha
            .call_cross_cached(&q, &memory, &options, &Mode::inference())
            .unwrap();
        assert_close(&host(&eager), &want, 1e-10, &format!("{what} eager"));
    }
    // Three steps of a loop, each attending to the same cache: every step
    // gives the reference's output for the same query.
    let want = reference(&w, c, &x.q, &x.k, &x.v, &|_, _, _| true);
    let f = {
        let mha = mha.clone();
        function(move |q: Tensor, k: Tensor, v: Tensor| -> Result<Tensor> {
            let memory = mha.cross_cache(&k, &v)?;
            let (_, y, _) = for_range(
                0i64,
                3i64,
                1i64,
                (
                    q.clone(),
                    Tensor::zeros(&[c.b as i64, c.t as i64, c.o as i64], DType::F64),
                    memory,
                ),
                |_, (q, _, memory): (Tensor, Tensor, CrossKvCache)| -> Result<_> {
                    let opts = AttentionOptions::new();
                    let y = mha.call_cross_cached(&q, &memory, &opts, &Mode::inference())?;
                    Ok((q, y, memory))
                },
            )?;
            Ok(y)
        })
    };
    let compiled = f.call((q.clone(), k.clone(), v.clone())).unwrap();
    assert_close(&host(&compiled), &want, 1e-10, "compiled loop");
    // A cache of another layer's sizes is refused.
    let short = CrossKvCache {
        key: memory
            .key
            .slice(&[0, 0, 0, 0], &[c.b as i64, c.s as i64, c.g as i64, 1])
            .unwrap(),
        value: memory.value.clone(),
    };
    let e = mha
        .call_cross_cached(&q, &short, &AttentionOptions::new(), &Mode::inference())
        .unwrap_err();
    assert!(e.to_string().contains("cross cache"), "{e}");
}

#[test]
fn self_attention_call_and_variable_names() {
    let c = Cfg {
        dq: 6,
        dk: 6,
        dv: 6,
        s: 3,
        o: 6,
        ..CFG
    };
    let mha = MultiHeadAttention::new(&xlafn::random::key(3).unwrap(), c.h as i64, c.kd as i64)
        .unwrap()
        .num_kv_heads(c.g as i64)
        .unwrap()
        .value_dim(c.vd as i64)
        .unwrap();
    let w = build_and_randomize(&mha, c, DType::F64, 30);
    let names: Vec<&str> = w.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "key.bias",
            "key.kernel",
            "output.bias",
            "output.kernel",
            "query.bias",
            "query.kernel",
            "value.bias",
            "value.kernel"
        ]
    );
    let dims: Vec<Vec<i64>> = mha
        .named_variables()
        .iter()
        .map(|(_, v)| v.dims().to_vec())
        .collect();
    assert_eq!(
        dims,
        [
            vec![6, 4, 3],
            vec![4, 3],
            vec![6, 2, 3],
            vec![2, 3],
            vec![6, 2, 2],
            vec![2, 2],
            vec![4, 2, 6],
            vec![6]
        ]
    );
    let x = values(c.b * c.t * 6, 31, -1.0, 1.0);
    let xt = tensor(&x, &[c.b as i64, c.t as i64, 6], DType::F64);
    let want = reference(&w, Cfg { s: c.t, ..c }, &x, &x, &x, &|_, _, _| true);
    assert_close(
        &host(&mha.forward(&xt).unwrap()),
        &want,
        1e-10,
        "Layer::call",
    );
}

#[test]
fn without_bias_has_kernels_only() {
    let c = CFG;
    let mha = layer(c, 4).use_bias(false).unwrap();
    let w = build_and_randomize(&mha, c, DType::F64, 40);
    assert_eq!(w.len(), 4);
    let x = inputs(c, 41);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let got = mha
        .call_qkv(&q, &k, &v, &AttentionOptions::causal(), &Mode::inference())
        .unwrap();
    let want = reference(&w, c, &x.q, &x.k, &x.v, &|_, t, s| s <= t);
    assert_close(&host(&got), &want, 1e-10, "no bias");
}

/// Grouped-query attention equals multi-head attention whose key/value
/// heads are the grouped ones repeated (query head h reads kv head
/// h / group).
#[test]
fn grouped_query_equals_multi_head_with_repeated_kv_weights() {
    for g in [2usize, 1] {
        let c = Cfg { g, ..CFG };
        let gqa = layer(c, 5);
        let w = build_and_randomize(&gqa, c, DType::F64, 50);
        let full = Cfg { g: c.h, ..c };
        let mha = layer(full, 6);
        build_and_randomize(&mha, full, DType::F64, 60);
        let group = c.h / c.g;
        // [d, g, size] -> [d, h, size], head h a copy of head h / group.
        let repeat = |v: &[f64], d: usize, size: usize| -> Vec<f64> {
            let mut out = Vec::new();
            for i in 0..d {
                for h in 0..c.h {
                    let g = h / group;
                    out.extend_from_slice(&v[(i * c.g + g) * size..(i * c.g + g + 1) * size]);
                }
            }
            out
        };
        for (name, var) in mha.named_variables() {
            // A kernel [d, heads, size] repeats d rows; a bias [heads, size] one.
            let d = if var.dims().len() == 3 {
                var.dims()[0] as usize
            } else {
                1
            };
            let value = match name.as_str() {
                "key.kernel" | "key.bias" => repeat(&w[&name], d, c.kd),
                "value.kernel" | "value.bias" => repeat(&w[&name], d, c.vd),
                _ => w[&name].clone(),
            };
            var.assign(&tensor(&value, var.dims(), DType::F64)).unwrap();
        }
        let x = inputs(c, 61);
        let (q, k, v) = qkv(c, &x, DType::F64);
        let options = AttentionOptions::causal().padding_mask(&padding_tensor(c));
        let a = gqa
            .call_qkv(&q, &k, &v, &options, &Mode::inference())
            .unwrap();
        let b = mha
            .call_qkv(&q, &k, &v, &options, &Mode::inference())
            .unwrap();
        assert_close(&host(&a), &host(&b), 1e-12, &format!("{g} kv heads"));
        let want = reference(&w, c, &x.q, &x.k, &x.v, &|b, t, s| s <= t && padding(b, s));
        assert_close(
            &host(&a),
            &want,
            1e-10,
            &format!("{g} kv heads vs reference"),
        );
    }
}

/// A query row with no visible key: zero weights, so the output is the
/// output bias; no NaN in the value or the gradient.
#[test]
fn fully_masked_rows_give_the_output_bias_and_finite_gradients() {
    let c = CFG;
    let mha = Arc::new(layer(c, 7));
    let w = build_and_randomize(&mha, c, DType::F64, 70);
    let x = inputs(c, 71);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let none = mask_tensor(c, &|_, _, _| false, DType::Bool);
    let options = AttentionOptions::new().attention_mask(&none);
    let (y, probs) = mha
        .call_qkv_with_scores(&q, &k, &v, &options, &Mode::inference())
        .unwrap();
    assert!(host(&probs).iter().all(|p| *p == 0.0));
    let bias = &w["output.bias"];
    for row in host(&y).chunks(c.o) {
        assert_close(row, bias, 1e-12, "fully masked row");
    }
    let tape = GradientTape::new();
    tape.watch(&q);
    let y = mha
        .call_qkv(&q, &k, &v, &options, &Mode::inference())
        .unwrap();
    let g = tape
        .gradient(&y.reduce_sum(&[], false).unwrap(), &[Source::from(&q)])
        .unwrap();
    let g = g[0].clone().map(|g| host(&g)).unwrap_or_default();
    assert!(g.iter().all(|v| *v == 0.0), "gradient {g:?}");
}

#[test]
fn probabilities_sum_to_one_over_visible_keys() {
    let c = CFG;
    let mha = layer(c, 8);
    build_and_randomize(&mha, c, DType::F64, 80);
    let x = inputs(c, 81);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let (_, probs) = mha
        .call_qkv_with_scores(&q, &k, &v, &AttentionOptions::causal(), &Mode::inference())
        .unwrap();
    assert_eq!(
        probs.dims(),
        vec![c.b as i64, c.h as i64, c.t as i64, c.s as i64]
    );
    let p = host(&probs);
    for (r, row) in p.chunks(c.s).enumerate() {
        let t = r % c.t;
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!(row[t + 1..].iter().all(|v| *v == 0.0), "row {r}: {row:?}");
    }
}

/// f16 and bf16: the softmax runs in f32, the result is close to the f64
/// reference at the input precision, and the probabilities come back in
/// the input dtype.
#[test]
fn half_precision_inputs_match_the_reference_at_their_precision() {
    let c = CFG;
    for (dtype, tol) in [(DType::F16, 2e-2), (DType::BF16, 8e-2)] {
        let mha = layer(c, 9);
        let w = build_and_randomize(&mha, c, dtype, 90);
        let x = inputs(c, 91);
        let (q, k, v) = qkv(c, &x, dtype);
        // The reference sees the inputs rounded as the layer does.
        let (qh, kh, vh) = (host(&q), host(&k), host(&v));
        let options = AttentionOptions::causal().padding_mask(&padding_tensor(c));
        let (y, probs) = mha
            .call_qkv_with_scores(&q, &k, &v, &options, &Mode::inference())
            .unwrap();
        assert_eq!((y.dtype(), probs.dtype()), (dtype, dtype));
        let want = reference(&w, c, &qh, &kh, &vh, &|b, t, s| s <= t && padding(b, s));
        assert_close(&host(&y), &want, tol, &format!("{dtype}"));
    }
}

/// Mixed precision: float32 weights serve bfloat16 inputs, cast to them
/// as the other layers do, and a cache made inside a compiled function
/// (concrete, not loop state) takes a first call there.
#[test]
fn float32_weights_serve_bfloat16_inputs_and_a_fresh_cache_in_a_function() {
    // Self-attention sizes: the query's features and length for all three.
    let c = Cfg {
        s: CFG.t,
        dk: CFG.dq,
        dv: CFG.dq,
        ..CFG
    };
    let mha = Arc::new(layer(c, 9));
    let w = build_and_randomize(&mha, c, DType::F32, 90);
    let x = inputs(c, 91);
    let (q, k, v) = qkv(c, &x, DType::BF16);
    let (qh, kh, vh) = (host(&q), host(&k), host(&v));
    let y = mha
        .call_qkv(&q, &k, &v, &AttentionOptions::causal(), &Mode::inference())
        .unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert!(mha.variables().iter().all(|v| v.dtype() == DType::F32));
    let want = reference(&w, c, &qh, &kh, &vh, &|_, t, s| s <= t);
    assert_close(&host(&y), &want, 8e-2, "bf16 over f32 weights");

    let cached = {
        let mha = mha.clone();
        function(move |q: Tensor| -> Result<Tensor> {
            let cache = mha.empty_cache(c.b as i64, c.t as i64, DType::BF16)?;
            Ok(mha.call_cached(&q, &cache, &Mode::inference())?.0)
        })
    };
    let got = cached.call((&q,)).unwrap();
    let want = reference(&w, c, &qh, &qh, &qh, &|_, t, s| s <= t);
    assert_close(&host(&got), &want, 8e-2, "cached, compiled");
}

#[test]
fn dropout_needs_a_key_in_training_and_is_off_in_inference() {
    let c = CFG;
    let mha = layer(c, 10).dropout(0.5).unwrap();
    let w = build_and_randomize(&mha, c, DType::F64, 100);
    let x = inputs(c, 101);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let none = AttentionOptions::new();
    let y = mha.call_qkv(&q, &k, &v, &none, &Mode::inference()).unwrap();
    let want = reference(&w, c, &x.q, &x.k, &x.v, &|_, _, _| true);
    assert_close(&host(&y), &want, 1e-10, "inference ignores dropout");
    let err = mha
        .call_qkv(&q, &k, &v, &none, &Mode::training())
        .unwrap_err();
    assert!(err.to_string().contains("needs a key"), "{err}");
    let mode = Mode::training_with_key(&xlafn::random::key(5).unwrap());
    let (_, dropped) = mha.call_qkv_with_scores(&q, &k, &v, &none, &mode).unwrap();
    let (_, kept) = mha
        .call_qkv_with_scores(&q, &k, &v, &none, &Mode::inference())
        .unwrap();
    let (dropped, kept) = (host(&dropped), host(&kept));
    let zeros = dropped.iter().filter(|p| **p == 0.0).count();
    assert!(zeros > 0 && zeros < dropped.len(), "{zeros} zeros");
    for (d, k) in dropped.iter().zip(&kept) {
        assert!(*d == 0.0 || (d - 2.0 * k).abs() < 1e-12, "{d} vs {k}");
    }
    // The same key draws the same mask.
    let (_, again) = mha.call_qkv_with_scores(&q, &k, &v, &none, &mode).unwrap();
    assert_eq!(host(&again), dropped);
}

#[test]
fn gradients_match_finite_differences() {
    let c = Cfg {
        b: 1,
        t: 2,
        s: 3,
        dq: 3,
        dk: 2,
        dv: 3,
        h: 2,
        g: 1,
        kd: 2,
        vd: 2,
        o: 2,
    };
    let mha = layer(c, 11);
    build_and_randomize(&mha, c, DType::F64, 110);
    let x = inputs(c, 111);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let options = AttentionOptions::causal()
        .padding_mask(&Tensor::from_vec(vec![1i32, 1, 0], &[1, 3]).unwrap());
    let dims = |n: usize, d: usize| [c.b as i64, n as i64, d as i64];
    check_gradient(
        &|q| mha.call_qkv(q, &k, &v, &options, &Mode::inference()),
        &x.q,
        &dims(c.t, c.dq),
        1e-6,
        "d/d query",
    );
    check_gradient(
        &|k| mha.call_qkv(&q, k, &v, &options, &Mode::inference()),
        &x.k,
        &dims(c.s, c.dk),
        1e-6,
        "d/d key",
    );
    check_gradient(
        &|v| mha.call_qkv(&q, &k, v, &options, &Mode::inference()),
        &x.v,
        &dims(c.s, c.dv),
        1e-6,
        "d/d value",
    );
    // A weight: the tape's gradient against moving the variable.
    let var = mha
        .named_variables()
        .into_iter()
        .find(|(n, _)| n == "key.kernel")
        .unwrap()
        .1;
    let loss = || {
        mha.call_qkv(&q, &k, &v, &options, &Mode::inference())
            .unwrap()
            .square()
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap()
    };
    let tape = GradientTape::new();
    let l = loss();
    let g = host(
        &tape.gradient(&l, &[Source::from(&var)]).unwrap()[0]
            .clone()
            .unwrap(),
    );
    let w0 = host(&var.read());
    for i in 0..w0.len() {
        let at = |d: f64| {
            let mut w = w0.clone();
            w[i] += d;
            var.assign(&tensor(&w, var.dims(), DType::F64)).unwrap();
            loss().item::<f64>().unwrap()
        };
        let numeric = (at(1e-6) - at(-1e-6)) / 2e-6;
        assert!(
            (g[i] - numeric).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "key.kernel[{i}]: {} vs {numeric}",
            g[i]
        );
    }
    var.assign(&tensor(&w0, var.dims(), DType::F64)).unwrap();
}

#[test]
fn compiled_gradient_matches_eager() {
    let c = CFG;
    let mha = Arc::new(layer(c, 12));
    build_and_randomize(&mha, c, DType::F64, 120);
    let x = inputs(c, 121);
    let (q, k, v) = qkv(c, &x, DType::F64);
    let grad = |mha: &MultiHeadAttention, q: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(q);
        let y = mha.call_qkv(q, &k, &v, &AttentionOptions::causal(), &Mode::inference())?;
        let g = tape.gradient(&y.square()?.reduce_sum(&[], false)?, &[Source::from(q)])?;
        Ok(g[0].clone().expect("a gradient"))
    };
    let eager = grad(&mha, &q).unwrap();
    let f = {
        let mha = mha.clone();
        let (k, v) = (k.clone(), v.clone());
        function(move |q: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&q);
            let y = mha.call_qkv(&q, &k, &v, &AttentionOptions::causal(), &Mode::inference())?;
            let g = tape.gradient(&y.square()?.reduce_sum(&[], false)?, &[Source::from(&q)])?;
            Ok(g[0].clone().expect("a gradient"))
        })
    };
    assert_close(
        &host(&f.call((q,)).unwrap()),
        &host(&eager),
        1e-10,
        "compiled",
    );
}

#[test]
fn errors_name_the_problem() {
    let key = xlafn::random::key(0).unwrap();
    let e = MultiHeadAttention::new(&key, 6, 4)
        .unwrap()
        .num_kv_heads(4)
        .unwrap_err();
    assert!(e.to_string().contains("divide num_heads 6"), "{e}");
    assert!(MultiHeadAttention::new(&key, 0, 4).is_err());
    assert!(
        MultiHeadAttention::new(&key, 2, 4)
            .unwrap()
            .dropout(1.0)
            .is_err()
    );

    let mha = MultiHeadAttention::new(&key, 2, 4).unwrap();
    let x = Tensor::zeros(&[2, 3, 8], DType::F32);
    let none = AttentionOptions::new();
    let inf = Mode::inference();
    mha.call_qkv(&x, &x, &x, &none, &inf).unwrap();
    // Built for 8 features, called on 5.
    let y = Tensor::zeros(&[2, 3, 5], DType::F32);
    let e = mha.call_qkv(&y, &y, &y, &none, &inf).unwrap_err();
    assert!(e.to_string().contains("built"), "{e}");
    // Rank 2 input.
    let flat = Tensor::zeros(&[3, 8], DType::F32);
    let e = mha.call_qkv(&flat, &x, &x, &none, &inf).unwrap_err();
    assert!(e.to_string().contains("[batch, length, features]"), "{e}");
    // Key and value lengths differ.
    let short = Tensor::zeros(&[2, 2, 8], DType::F32);
    let e = mha.call_qkv(&x, &x, &short, &none, &inf).unwrap_err();
    assert!(e.to_string().contains("one length"), "{e}");
    // Mixed dtypes.
    let x64 = Tensor::zeros(&[2, 3, 8], DType::F64);
    assert!(mha.call_qkv(&x, &x64, &x64, &none, &inf).is_err());
    // A padding mask of the wrong shape.
    let bad = AttentionOptions::new().padding_mask(&Tensor::ones(&[2, 4], DType::Bool));
    let e = mha.call_qkv(&x, &x, &x, &bad, &inf).unwrap_err();
    assert!(e.to_string().contains("padding_mask"), "{e}");
    let bad = AttentionOptions::new().attention_mask(&Tensor::ones(&[2, 3, 3], DType::F32));
    let e = mha.call_qkv(&x, &x, &x, &bad, &inf).unwrap_err();
    assert!(e.to_string().contains("attention_mask"), "{e}");
    // A cache that is full, or shaped for another layer.
    let cache = mha.empty_cache(2, 4, DType::F32).unwrap();
    let (_, cache) = mha.call_cached(&x, &cache, &inf).unwrap();
    let e = mha.call_cached(&x, &cache, &inf).unwrap_err();
    assert!(e.to_string().contains("do not fit"), "{e}");
    let other = KvCache::zeros(2, 4, 1, 4, 4, DType::F32).unwrap();
    let e = mha.call_cached(&x, &other, &inf).unwrap_err();
    assert!(e.to_string().contains("the cache needs"), "{e}");
}
