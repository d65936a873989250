//! Mixed precision (`xlafn::nn::mixed_precision`) and dynamic loss scaling
//! (`xlafn::optimizers::LossScaleOptimizer`): layers under a policy keep
//! float32 variables and compute in half precision, checked against plain
//! loops over the same weights rounded to bfloat16 (`half`) or against the
//! same layer without a policy; the compiled program's `dot_general`s are
//! bfloat16; gradients reach the float32 variables as float32; the losses
//! compute half inputs in float32; and the loss-scale optimizer skips
//! overflowing steps (nothing changes, the scale halves), grows the scale
//! after good steps, compiles to one program, checkpoints its state, and
//! trains a float16 model as well as the float32 one trains.
//!
//! Every test holds one lock: the global policy is process-wide and the
//! layers read it when they are made, so no layer may be made while
//! another test has a global policy set.

use std::sync::{Arc, Mutex, MutexGuard};
use xlafn::ArraySpec;
use xlafn::checkpoint;
use xlafn::module::Module;
use xlafn::nn::layers::*;
use xlafn::nn::losses::{self, CrossEntropy, Reduction};
use xlafn::nn::mixed_precision::{self, Policy};
use xlafn::optimizers::LossScaleOptimizer;
use xlafn::prelude::*;
use xlafn::random;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, host, values};

static LOCK: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn key(seed: u64) -> Tensor {
    random::key(seed).unwrap()
}

fn f32s(v: &[f64], dims: &[i64]) -> Tensor {
    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Tensor::from_vec(v, dims).unwrap()
}

fn bf16(v: f64) -> f64 {
    half::bf16::from_f64(v).to_f64()
}

/// `x [n, i] @ w [i, o] + b [o]` with every operand rounded by `round`
/// first, in f64: what a half-precision dense layer computes, up to the
/// rounding of its sums.
fn dense(x: &[f64], w: &[f64], b: &[f64], n: usize, round: fn(f64) -> f64) -> Vec<f64> {
    let (i_n, o_n) = (w.len() / b.len(), b.len());
    let mut y = vec![0.0; n * o_n];
    for r in 0..n {
        for o in 0..o_n {
            let mut acc = round(b[o]);
            for i in 0..i_n {
                acc += round(x[r * i_n + i]) * round(w[i * o_n + o]);
            }
            y[r * o_n + o] = acc;
        }
    }
    y
}

fn dtypes(m: &dyn Module) -> Vec<DType> {
    m.variables().iter().map(|v| v.dtype()).collect()
}

// ------------------------------------------------------------- policies

#[test]
fn policies_parse_keras_names_and_the_global_one_is_read_at_construction() {
    let _g = serial();
    let p: Policy = "mixed_bfloat16".parse().unwrap();
    assert_eq!(p, Policy::mixed_bfloat16());
    assert_eq!(
        (p.compute_dtype(), p.variable_dtype()),
        (DType::BF16, DType::F32)
    );
    assert_eq!(
        Policy::new("mixed_float16").unwrap(),
        Policy::mixed_float16()
    );
    assert_eq!(Policy::new("float32").unwrap(), Policy::float32());
    assert_eq!(Policy::new("bf16").unwrap(), Policy::uniform(DType::BF16));
    assert_eq!(Policy::mixed_float16().to_string(), "mixed_float16");
    assert_eq!(Policy::uniform(DType::F64).to_string(), "float64");
    assert!(!Policy::float32().is_mixed() && Policy::mixed_bfloat16().is_mixed());
    let err = Policy::new("mixed_int8").unwrap_err().to_string();
    assert!(err.contains("unknown policy"), "{err}");
    assert!(Policy::new("int32").is_err());
    assert!(Policy::with_dtypes(DType::I32, DType::F32).is_err());

    assert_eq!(mixed_precision::global_policy(), Policy::float32());
    assert_eq!(mixed_precision::current_policy(), None);
    mixed_precision::set_global_policy(Policy::mixed_bfloat16());
    let under = Linear::new(&key(0), 3, 2).unwrap();
    let norm = LayerNorm::new(2).unwrap();
    mixed_precision::reset_global_policy();
    let after = Linear::new(&key(0), 3, 2).unwrap();
    assert_eq!(under.policy(), Some(Policy::mixed_bfloat16()));
    assert_eq!(after.policy(), None);
    let x = Tensor::ones(&[1, 3], DType::F32);
    assert_eq!(under.forward(&x).unwrap().dtype(), DType::BF16);
    assert_eq!(
        norm.forward(&under.forward(&x).unwrap()).unwrap().dtype(),
        DType::BF16
    );
    assert_eq!(after.forward(&x).unwrap().dtype(), DType::F32);
    assert_eq!(dtypes(&under), [DType::F32, DType::F32]);
}

/// Without a policy nothing changes: a layer computes in its input's
/// dtype, float32 weights cast to it.
#[test]
fn without_a_policy_layers_compute_in_the_input_dtype() {
    let _g = serial();
    let dense = Linear::new(&key(1), 3, 2).unwrap();
    for d in [DType::BF16, DType::F16, DType::F32, DType::F64] {
        let y = dense.forward(&Tensor::ones(&[2, 3], d)).unwrap();
        assert_eq!(y.dtype(), d);
    }
    let mha = MultiHeadAttention::new(&key(2), 2, 4).unwrap();
    mha.forward(&Tensor::ones(&[1, 3, 8], DType::BF16)).unwrap();
    assert!(dtypes(&mha).iter().all(|d| *d == DType::BF16));
}

// ------------------------------------------------------------- layers

#[test]
fn linear_under_mixed_bfloat16_matches_a_bfloat16_loop_over_its_f32_weights() {
    let _g = serial();
    let dense = Arc::new(
        Linear::new(&key(3), 6, 5)
            .unwrap()
            .bias_initializer(xlafn::initializers::Initializer::Uniform(-0.5, 0.5))
            .dtype_policy(Policy::mixed_bfloat16()),
    );
    let xs = values(4 * 6, 7, -2.0, 2.0);
    let x = f32s(&xs, &[4, 6]);
    let y = dense.forward(&x).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    assert_eq!(dtypes(&*dense), [DType::F32, DType::F32]);
    let (w, b) = (
        host(&dense.kernel().unwrap().read()),
        host(&dense.bias().unwrap().read()),
    );
    let want = dense_ref(&xs, &w, &b);
    // One bf16 rounding of the sum and one of the bias add: 2^-8 each.
    assert_close(&host(&y), &want, 1.0 / 64.0, "mixed Linear (eager)");
    // ... and not the f32 result to float32 precision: it is bf16.
    let exact = super_f32(&xs, &w, &b);
    assert!(
        host(&y)
            .iter()
            .zip(&exact)
            .any(|(g, e)| (g - e).abs() > 1e-5),
        "the output is not rounded to bfloat16"
    );
    let f = function({
        let dense = dense.clone();
        move |x: Tensor| dense.forward(&x)
    });
    let yc = f.call((&x,)).unwrap();
    assert_eq!(yc.dtype(), DType::BF16);
    assert_close(&host(&yc), &want, 1.0 / 64.0, "mixed Linear (compiled)");
    f.call((&x,)).unwrap();
    assert_eq!(f.tracing_count(), 1);
}

fn dense_ref(xs: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    dense(xs, w, b, xs.len() / (w.len() / b.len()), bf16)
}

fn super_f32(xs: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    dense(xs, w, b, xs.len() / (w.len() / b.len()), |v| v)
}

/// A Sequential made under the global policy: f32 variables, a bf16
/// output, and the values of the same weights computed by a loop.
#[test]
fn sequential_under_the_global_policy_matches_the_f32_model() {
    let _g = serial();
    mixed_precision::set_global_policy(Policy::mixed_bfloat16());
    let model = Sequential::new()
        .add(Linear::new(&key(4), 4, 8).unwrap())
        .add(Activation::Relu)
        .add(Linear::new(&key(5), 8, 3).unwrap());
    mixed_precision::reset_global_policy();
    assert!(dtypes(&model).iter().all(|d| *d == DType::F32));
    let xs = values(5 * 4, 9, -1.0, 1.0);
    let y = model.forward(&f32s(&xs, &[5, 4])).unwrap();
    assert_eq!(y.dtype(), DType::BF16);
    let v: Vec<Vec<f64>> = model.variables().iter().map(|v| host(&v.read())).collect();
    // The f32 model by loops: the bf16 one is within bf16 tolerance.
    let h: Vec<f64> = super_f32(&xs, &v[0], &v[1])
        .iter()
        .map(|a| a.max(0.0))
        .collect();
    let want = super_f32(&h, &v[2], &v[3]);
    assert_close(&host(&y), &want, 0.03, "mixed Sequential vs f32 loop");
}

/// A layer under the policy, the same layer without, and their input.
type Case<'a> = (&'a str, Box<dyn Layer>, Box<dyn Layer>, &'a Tensor);

/// Each other layer under the policy against the same layer (same keys,
/// so the same f32 weights) without one, on an f32 input.
#[test]
fn other_layers_follow_the_policy() {
    let _g = serial();
    let p = Policy::mixed_bfloat16();
    let x4 = f32s(&values(2 * 5 * 5 * 3, 11, -1.0, 1.0), &[2, 5, 5, 3]);
    let x3 = f32s(&values(2 * 4 * 6, 12, -1.0, 1.0), &[2, 4, 6]);
    let ids = Tensor::from_vec(vec![0i32, 3, 7, 2], &[2, 2]).unwrap();
    let cases: Vec<Case> = vec![
        (
            "Conv2d",
            Box::new(Conv2d::new(&key(6), 3, 4, [3, 3]).unwrap().dtype_policy(p)),
            Box::new(Conv2d::new(&key(6), 3, 4, [3, 3]).unwrap()),
            &x4,
        ),
        (
            "LayerNorm",
            Box::new(LayerNorm::new(6).unwrap().dtype_policy(p).unwrap()),
            Box::new(LayerNorm::new(6).unwrap()),
            &x3,
        ),
        (
            "RmsNorm",
            Box::new(RmsNorm::new(6).unwrap().dtype_policy(p).unwrap()),
            Box::new(RmsNorm::new(6).unwrap()),
            &x3,
        ),
        (
            "GroupNorm",
            Box::new(GroupNorm::new(3, 6).unwrap().dtype_policy(p).unwrap()),
            Box::new(GroupNorm::new(3, 6).unwrap()),
            &x3,
        ),
        (
            "BatchNorm",
            Box::new(
                BatchNorm::new(6, DType::F32)
                    .unwrap()
                    .dtype_policy(p)
                    .unwrap(),
            ),
            Box::new(BatchNorm::new(6, DType::F32).unwrap()),
            &x3,
        ),
        (
            "MultiHeadAttention",
            Box::new(
                MultiHeadAttention::new(&key(7), 2, 4)
                    .unwrap()
                    .dtype_policy(p),
            ),
            Box::new(MultiHeadAttention::new(&key(7), 2, 4).unwrap()),
            &x3,
        ),
        (
            "Lstm",
            Box::new(Lstm::new(&key(8), 5).unwrap().dtype_policy(p)),
            Box::new(Lstm::new(&key(8), 5).unwrap()),
            &x3,
        ),
        (
            "Gru",
            Box::new(
                Gru::new(&key(9), 5)
                    .unwrap()
                    .return_sequences(true)
                    .dtype_policy(p),
            ),
            Box::new(Gru::new(&key(9), 5).unwrap().return_sequences(true)),
            &x3,
        ),
        (
            "Embedding",
            Box::new(
                Embedding::new(&key(10), 8, 4)
                    .unwrap()
                    .dtype_policy(p)
                    .unwrap(),
            ),
            Box::new(Embedding::new(&key(10), 8, 4).unwrap()),
            &ids,
        ),
    ];
    for (what, mixed, plain, x) in cases {
        let y = mixed.forward(x).unwrap();
        let want = plain.forward(x).unwrap();
        assert_eq!(y.dtype(), DType::BF16, "{what}: output dtype");
        assert_eq!(want.dtype(), DType::F32, "{what}: reference dtype");
        assert_eq!(y.dims(), want.dims(), "{what}: shape");
        let vars = mixed.variables();
        assert!(!vars.is_empty(), "{what}: no variables");
        assert!(
            vars.iter().all(|v| v.dtype() == DType::F32),
            "{what}: variables"
        );
        let same = mixed
            .variables()
            .iter()
            .zip(plain.variables())
            .all(|(a, b)| host(&a.read()) == host(&b.read()));
        assert!(same, "{what}: the two layers' weights differ");
        assert_close(&host(&y), &host(&want), 0.04, what);
    }
    // An Embedding's rows are the f32 table's rounded to bf16, exactly.
    let emb = Embedding::new(&key(10), 8, 4)
        .unwrap()
        .dtype_policy(p)
        .unwrap();
    let table = host(&emb.embeddings().unwrap().read());
    let rows = host(&emb.forward(&ids).unwrap());
    let want: Vec<f64> = [0, 3, 7, 2]
        .iter()
        .flat_map(|&r| table[r * 4..r * 4 + 4].iter().map(|v| bf16(*v)))
        .collect();
    assert_eq!(rows, want);
}

// ------------------------------------------------------------- programs and gradients

fn ops<'t>(text: &'t str, op: &str) -> Vec<&'t str> {
    let needle = format!("stablehlo.{op}");
    text.lines().filter(|l| l.contains(&needle)).collect()
}

/// A compiled training step of a model under mixed_bfloat16: every
/// `dot_general` (forward and both gradients of each layer) is bf16, and
/// the step updates the f32 variables.
#[test]
fn compiled_step_under_the_policy_has_bfloat16_dots() {
    let _g = serial();
    let p = Policy::mixed_bfloat16();
    let model = Arc::new(
        Sequential::new()
            .add(Linear::new(&key(12), 4, 8).unwrap().dtype_policy(p))
            .add(Activation::Tanh)
            .add(Linear::new(&key(13), 8, 2).unwrap().dtype_policy(p)),
    );
    let opt = Arc::new(Sgd::new(0.1));
    let step = function({
        let (model, opt) = (model.clone(), opt.clone());
        move |x: Tensor, y: Tensor| {
            let vars = model.trainable_variables();
            opt.minimize(&vars, || {
                let logits = model.forward(&x)?.cast(DType::F32)?;
                losses::mean_squared_error(&y, &logits, Reduction::Mean)
            })
        }
    });
    let x = f32s(&values(8 * 4, 14, -1.0, 1.0), &[8, 4]);
    let y = f32s(&values(8 * 2, 15, -1.0, 1.0), &[8, 2]);
    let before = host(&model.variables()[0].read());
    let l0 = step.call((&x, &y)).unwrap();
    assert_eq!(l0.dtype(), DType::F32);
    assert_ne!(host(&model.variables()[0].read()), before);
    assert!(model.variables().iter().all(|v| v.dtype() == DType::F32));
    let specs = [
        ArraySpec::new(DType::F32, &[8, 4]),
        ArraySpec::new(DType::F32, &[8, 2]),
    ];
    let text = step.concrete_functions()[0].stablehlo(&specs).unwrap();
    let dots = ops(&text, "dot_general");
    // Two forward products, two kernel gradients, one input gradient.
    assert!(dots.len() >= 5, "{text}");
    for d in &dots {
        assert!(
            d.contains("bf16") && !d.contains("xf32>"),
            "an f32 dot: {d}\n{text}"
        );
    }
    assert!(!ops(&text, "convert").is_empty(), "{text}");
    step.call((&x, &y)).unwrap();
    assert_eq!(step.tracing_count(), 1);
}

/// The gradients of a mixed layer's f32 variables are f32, and equal
/// what the loss `sum(cast(y, f32))` gives by hand: `sum_b x[b, i]` for
/// the kernel (in bf16, as the product runs), the batch size for the bias.
#[test]
fn gradients_reach_the_f32_variables_as_f32() {
    let _g = serial();
    let dense = Linear::new(&key(16), 3, 2)
        .unwrap()
        .dtype_policy(Policy::mixed_bfloat16());
    let xs = values(5 * 3, 17, -1.0, 1.0);
    let x = f32s(&xs, &[5, 3]);
    let vars = dense.trainable_variables();
    let (loss, grads) = value_and_grad(&vars, || {
        dense.forward(&x)?.cast(DType::F32)?.reduce_sum(&[], false)
    })
    .unwrap();
    assert_eq!(loss.dtype(), DType::F32);
    assert_eq!(grads[0].dtype(), DType::F32);
    assert_eq!(grads[1].dtype(), DType::F32);
    let mut want = Vec::new();
    for i in 0..3 {
        let s: f64 = (0..5).map(|b| bf16(xs[b * 3 + i])).sum();
        want.extend([s, s]);
    }
    assert_close(&host(&grads[0]), &want, 1.0 / 128.0, "kernel gradient");
    assert_eq!(host(&grads[1]), [5.0, 5.0]);
}

// ------------------------------------------------------------- losses

#[test]
fn losses_compute_half_inputs_in_f32() {
    let _g = serial();
    // 300² overflows float16 (max 65504); in float32 it does not.
    let t = Tensor::from_vec(vec![0.0f32, 0.0], &[1, 2]).unwrap();
    let p = Tensor::from_vec(vec![300.0f32, 100.0], &[1, 2])
        .unwrap()
        .cast(DType::F16)
        .unwrap();
    let mse = losses::mean_squared_error(&t, &p, Reduction::Mean).unwrap();
    assert_eq!(mse.dtype(), DType::F32);
    assert_eq!(mse.item::<f32>().unwrap(), 50000.0);
    // Sparse cross-entropy of bf16 logits against log-softmax in f64.
    let zs = values(3 * 4, 18, -3.0, 3.0);
    let logits = f32s(&zs, &[3, 4]).cast(DType::BF16).unwrap();
    let labels = Tensor::from_vec(vec![1i32, 3, 0], &[3]).unwrap();
    let ce = losses::sparse_categorical_cross_entropy(
        &labels,
        &logits,
        CrossEntropy::new()
            .from_logits(true)
            .reduction(Reduction::None),
    )
    .unwrap();
    assert_eq!(ce.dtype(), DType::F32);
    let want: Vec<f64> = [1usize, 3, 0]
        .iter()
        .enumerate()
        .map(|(r, &l)| {
            let row: Vec<f64> = zs[r * 4..r * 4 + 4].iter().map(|v| bf16(*v)).collect();
            let lse = row.iter().map(|v| v.exp()).sum::<f64>().ln();
            lse - row[l]
        })
        .collect();
    assert_close(&host(&ce), &want, 1e-5, "bf16 logits cross-entropy");
}

// ------------------------------------------------------------- loss scaling

/// A float16 regression step whose loss is multiplied by `factor` (a
/// tensor argument, so one program serves both).
fn f16_step(
    model: &Linear,
    opt: &LossScaleOptimizer<Adam>,
    x: &Tensor,
    y: &Tensor,
    factor: &Tensor,
) -> Result<Tensor> {
    let vars = model.trainable_variables();
    opt.minimize(&vars, || {
        let pred = model.forward(x)?.cast(DType::F32)?;
        losses::mean_squared_error(y, &pred, Reduction::Mean)?.mul(factor)
    })
}

fn snapshot(model: &Linear, opt: &LossScaleOptimizer<Adam>) -> Vec<Vec<f64>> {
    let named: Vec<(String, Variable)> = model.named_variables();
    opt.state_variables(&named, false)
        .unwrap()
        .iter()
        .filter(|(n, _)| n != "dynamic_scale" && n != "step_counter")
        .map(|(_, v)| host(&v.read()))
        .chain(model.variables().iter().map(|v| host(&v.read())))
        .collect()
}

/// An overflowing step (the loss times 1e6 under a scale of 2^10) is
/// skipped, eagerly and compiled: variables, Adam's moments and its step
/// count keep their values, the scale halves and the count of good steps
/// restarts. Good steps count up and, after `dynamic_growth_steps`,
/// double the scale. One trace serves every step.
#[test]
fn overflowing_steps_are_skipped_and_the_scale_adapts() {
    let _g = serial();
    let x = f32s(&values(8 * 3, 19, -1.0, 1.0), &[8, 3]);
    let y = f32s(&values(8 * 2, 20, -1.0, 1.0), &[8, 2]);
    let (one, huge) = (Tensor::scalar(1.0f32), Tensor::scalar(1e6f32));
    for compiled in [false, true] {
        let model = Arc::new(
            Linear::new(&key(21), 3, 2)
                .unwrap()
                .dtype_policy(Policy::mixed_float16()),
        );
        let opt = Arc::new(LossScaleOptimizer::with_options(Adam::new(0.01), 1024.0, 3).unwrap());
        let f = function({
            let (model, opt) = (model.clone(), opt.clone());
            move |x: Tensor, y: Tensor, k: Tensor| f16_step(&model, &opt, &x, &y, &k)
        });
        let step = |k: &Tensor| -> Tensor {
            if compiled {
                f.call((&x, &y, k)).unwrap()
            } else {
                f16_step(&model, &opt, &x, &y, k).unwrap()
            }
        };
        let scale = || opt.loss_scale().unwrap();
        let counter = || opt.step_counter().read().item::<i64>().unwrap();
        let what = if compiled { "compiled" } else { "eager" };
        // A good step moves the variables and counts.
        let s0 = snapshot(&model, &opt);
        step(&one);
        let s1 = snapshot(&model, &opt);
        assert_ne!(s0, s1, "{what}: the good step changed nothing");
        assert_eq!((scale(), counter()), (1024.0, 1), "{what}");
        assert_eq!(opt.inner().iterations().unwrap(), 1, "{what}");
        // An overflowing one changes nothing but the scale.
        let loss = step(&huge);
        assert!(loss.item::<f32>().unwrap().is_finite());
        assert_eq!(
            snapshot(&model, &opt),
            s1,
            "{what}: the skipped step changed state"
        );
        assert_eq!((scale(), counter()), (512.0, 0), "{what}");
        assert_eq!(opt.inner().iterations().unwrap(), 1, "{what}");
        // Three good steps in a row double it.
        step(&one);
        step(&one);
        assert_eq!((scale(), counter()), (512.0, 2), "{what}");
        step(&one);
        assert_eq!((scale(), counter()), (1024.0, 0), "{what}");
        assert_eq!(opt.inner().iterations().unwrap(), 4, "{what}");
        assert!(model.variables().iter().all(|v| v.dtype() == DType::F32));
        if compiled {
            assert_eq!(f.tracing_count(), 1);
        }
    }
}

/// The unscaled update equals the inner optimizer's on the true
/// gradient: SGD on `w²` with and without the wrapper, f32, by hand.
#[test]
fn the_applied_update_is_unscaled() {
    let _g = serial();
    let w = Variable::new(Tensor::scalar(0.75f32));
    let opt = LossScaleOptimizer::new(Sgd::new(0.1)).unwrap();
    assert_eq!(opt.loss_scale().unwrap(), 32768.0);
    assert_eq!(opt.dynamic_growth_steps(), 2000);
    let loss = opt.minimize(&[&w], || w.read().square()).unwrap();
    assert_eq!(loss.item::<f32>().unwrap(), 0.5625); // unscaled
    assert_eq!(w.read().item::<f32>().unwrap(), 0.75 - 0.1 * 1.5);
    // apply_gradients takes the scaled loss' gradients.
    let g = Tensor::scalar(32768.0f32 * 2.0);
    opt.apply_gradients(&[(Some(g), &w)]).unwrap();
    assert!((w.read().item::<f32>().unwrap() - (0.6 - 0.2)).abs() < 1e-6);
    let scaled = opt.scale_loss(&Tensor::scalar(2.0f32)).unwrap();
    assert_eq!(scaled.item::<f32>().unwrap(), 65536.0);
    let nan = Tensor::scalar(f32::NAN);
    opt.apply_gradients(&[(Some(nan), &w)]).unwrap();
    assert!((w.read().item::<f32>().unwrap() - 0.4).abs() < 1e-6);
    assert_eq!(opt.loss_scale().unwrap(), 16384.0);
    assert!(LossScaleOptimizer::with_options(Sgd::new(0.1), 0.0, 10).is_err());
    assert!(LossScaleOptimizer::with_options(Sgd::new(0.1), 8.0, 0).is_err());
}

#[test]
fn scales_float32_cannot_hold_are_refused_and_growth_stays_finite() {
    let _g = serial();
    // 1e300 would be an infinite float32 scale (every step skipped for
    // ever), 1e-50 a zero one (gradients divided by zero).
    for bad in [1e300, 1e-50, 1e-40, f64::INFINITY, f64::NAN, -2.0] {
        let Err(e) = LossScaleOptimizer::with_options(Sgd::new(0.1), bad, 10) else {
            panic!("scale {bad} accepted");
        };
        let e = e.to_string();
        assert!(e.contains("positive finite float32"), "{bad}: {e}");
    }
    // The largest power of two float32 holds: doubling it would overflow,
    // so a finite step keeps it, and the next step is applied.
    let top = 2f64.powi(127);
    let w = Variable::new(Tensor::scalar(1.0f32));
    let opt = LossScaleOptimizer::with_options(Sgd::new(0.5), top, 1).unwrap();
    assert_eq!(opt.loss_scale().unwrap(), top);
    let g = Tensor::scalar((top * 0.5) as f32); // the scaled gradient of 0.5
    opt.apply_gradients(&[(Some(g.clone()), &w)]).unwrap();
    assert_eq!(opt.loss_scale().unwrap(), top);
    assert_eq!(w.read().item::<f32>().unwrap(), 0.75);
    opt.apply_gradients(&[(Some(g), &w)]).unwrap();
    assert_eq!(opt.loss_scale().unwrap(), top);
    assert_eq!(w.read().item::<f32>().unwrap(), 0.5);
    // Below that, growth still doubles.
    let opt = LossScaleOptimizer::with_options(Sgd::new(0.5), 2f64.powi(125), 1).unwrap();
    opt.apply_gradients(&[(Some(Tensor::scalar(0f32)), &w)])
        .unwrap();
    assert_eq!(opt.loss_scale().unwrap(), 2f64.powi(126));
}

/// `save_training` keeps the scale and the count of good steps beside
/// the inner optimizer's state; a fresh optimizer restored from it has
/// them.
#[test]
fn the_loss_scale_is_checkpointed() {
    let _g = serial();
    let x = f32s(&values(8 * 3, 22, -1.0, 1.0), &[8, 3]);
    let y = f32s(&values(8 * 2, 23, -1.0, 1.0), &[8, 2]);
    let make = || {
        Linear::new(&key(24), 3, 2)
            .unwrap()
            .dtype_policy(Policy::mixed_float16())
    };
    let model = make();
    let opt = LossScaleOptimizer::with_options(Adam::new(0.01), 1024.0, 5).unwrap();
    let one = Tensor::scalar(1.0f32);
    f16_step(&model, &opt, &x, &y, &Tensor::scalar(1e6f32)).unwrap();
    f16_step(&model, &opt, &x, &y, &one).unwrap();
    f16_step(&model, &opt, &x, &y, &one).unwrap();
    let path = std::env::temp_dir().join(format!("mixed-lso-{}.safetensors", std::process::id()));
    checkpoint::save_training(&model, &opt, &path).unwrap();
    let saved = checkpoint::read(&path).unwrap();
    assert_eq!(
        saved["optimizer.dynamic_scale"].item::<f32>().unwrap(),
        512.0
    );
    assert_eq!(saved["optimizer.step_counter"].item::<i64>().unwrap(), 2);
    assert_eq!(saved["optimizer.iterations"].item::<i64>().unwrap(), 2);
    let fresh = make();
    let opt2 = LossScaleOptimizer::with_options(Adam::new(0.01), 1024.0, 5).unwrap();
    checkpoint::restore_training(&fresh, &opt2, &path).unwrap();
    std::fs::remove_file(&path).ok();
    assert_eq!(opt2.loss_scale().unwrap(), 512.0);
    assert_eq!(opt2.step_counter().read().item::<i64>().unwrap(), 2);
    // Both continue identically.
    f16_step(&model, &opt, &x, &y, &one).unwrap();
    f16_step(&fresh, &opt2, &x, &y, &one).unwrap();
    for (a, b) in model.variables().iter().zip(fresh.variables()) {
        assert_eq!(host(&a.read()), host(&b.read()));
    }
}

/// A small MLP regression trained with mixed_float16 and dynamic loss
/// scaling (from Keras' initial 2^15, which overflows at first and comes
/// down) reaches the loss the float32 model reaches.
#[test]
fn mixed_float16_with_loss_scaling_trains_like_float32() {
    let _g = serial();
    let n = 32;
    let xs = values(n * 3, 25, -1.0, 1.0);
    let ys: Vec<f64> = (0..n)
        .map(|r| (xs[r * 3] - 2.0 * xs[r * 3 + 1] + 0.5 * xs[r * 3 + 2]).tanh())
        .collect();
    let (x, y) = (f32s(&xs, &[n as i64, 3]), f32s(&ys, &[n as i64, 1]));
    let mlp = |policy: Option<Policy>| {
        let (a, b) = (
            Linear::new(&key(26), 3, 16).unwrap(),
            Linear::new(&key(27), 16, 1).unwrap(),
        );
        let (a, b) = match policy {
            Some(p) => (a.dtype_policy(p), b.dtype_policy(p)),
            None => (a, b),
        };
        Arc::new(Sequential::new().add(a).add(Activation::Tanh).add(b))
    };
    let loss_of = |m: &Sequential, x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let pred = m.forward(x)?.cast(DType::F32)?;
        losses::mean_squared_error(y, &pred, Reduction::Mean)
    };
    let steps = 150;
    // float32 with Adam.
    let plain = mlp(None);
    let adam = Arc::new(Adam::new(0.02));
    let f = function({
        let (m, opt) = (plain.clone(), adam.clone());
        move |x: Tensor, y: Tensor| opt.minimize(&m.trainable_variables(), || loss_of(&m, &x, &y))
    });
    let first = f.call((&x, &y)).unwrap().item::<f32>().unwrap() as f64;
    for _ in 1..steps {
        f.call((&x, &y)).unwrap();
    }
    let plain_loss = loss_of(&plain, &x, &y).unwrap().item::<f32>().unwrap() as f64;
    // mixed_float16 with the same Adam under dynamic loss scaling.
    let mixed = mlp(Some(Policy::mixed_float16()));
    let lso = Arc::new(LossScaleOptimizer::new(Adam::new(0.02)).unwrap());
    let g = function({
        let (m, opt) = (mixed.clone(), lso.clone());
        move |x: Tensor, y: Tensor| opt.minimize(&m.trainable_variables(), || loss_of(&m, &x, &y))
    });
    let mut skipped = 0;
    for _ in 0..steps {
        let before = lso.loss_scale().unwrap();
        g.call((&x, &y)).unwrap();
        skipped += (lso.loss_scale().unwrap() < before) as usize;
    }
    let mixed_loss = loss_of(&mixed, &x, &y).unwrap().item::<f32>().unwrap() as f64;
    assert_eq!((f.tracing_count(), g.tracing_count()), (1, 1));
    assert!(mixed.variables().iter().all(|v| v.dtype() == DType::F32));
    assert!(plain_loss < first * 0.1, "float32: {first} -> {plain_loss}");
    assert!(
        mixed_loss < first * 0.1 && mixed_loss < plain_loss * 2.0 + 2e-3,
        "float16: {first} -> {mixed_loss} (float32 {plain_loss}, {skipped} skipped)"
    );
}
