//! The pieces model writers expect beside layers and optimizers, each
//! against a reference computed here: sinusoidal and rotary position
//! encodings and ALiBi biases against direct loops of their formulas, an
//! exponential moving average of weights, Keras' ReduceLROnPlateau and
//! gradient accumulation against their update rules worked by hand, and
//! freezing and the summary table of a model.

use xlafn::module::Module;
use xlafn::nn::layers::{BatchNorm, Linear};
use xlafn::nn::positional::{alibi_bias, alibi_slopes, rotary, sinusoidal};
use xlafn::optimizers::{
    Adam, ExponentialMovingAverage, GradientAccumulation, Improvement, Optimizer, ReduceLrOnPlateau,
};
use xlafn::prelude::*;

fn close(got: &[f32], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((*g as f64 - w).abs() <= tol, "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn sinusoidal_encodings_follow_the_transformer_papers_formula() {
    let positions = Tensor::from_vec(vec![3i32, 4, 5, 6, 7], &[5]).unwrap();
    let dim = 8;
    let got = sinusoidal(&positions, dim, DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let mut want = Vec::new();
    for p in 3..8 {
        for c in 0..dim {
            let angle = p as f64 / 10000f64.powf((c / 2 * 2) as f64 / dim as f64);
            want.push(if c % 2 == 0 { angle.sin() } else { angle.cos() });
        }
    }
    close(&got, &want, 2e-6, "sinusoidal");
    assert!(sinusoidal(&positions, 7, DType::F32).is_err());
}

/// The rotate-half RoPE by its definition, on `[1, t, 1, d]`.
fn rotary_reference(x: &[f32], t: usize, d: usize, positions: &[f64], base: f64) -> Vec<f64> {
    let mut out = vec![0.0; t * d];
    for (p, &pos) in positions.iter().enumerate() {
        for i in 0..d / 2 {
            let theta = pos / base.powf(2.0 * i as f64 / d as f64);
            let (a, b) = (x[p * d + i] as f64, x[p * d + i + d / 2] as f64);
            out[p * d + i] = a * theta.cos() - b * theta.sin();
            out[p * d + i + d / 2] = b * theta.cos() + a * theta.sin();
        }
    }
    out
}

#[test]
fn rotary_embeddings_rotate_halves_and_keep_only_relative_position() {
    let (t, d) = (4usize, 6usize);
    let x: Vec<f32> = (0..t * d)
        .map(|k| ((k * 7 % 11) as f32 - 5.0) / 4.0)
        .collect();
    let xt = Tensor::from_vec(x.clone(), &[1, t as i64, 1, d as i64]).unwrap();
    let positions = Tensor::from_vec(vec![2i32, 3, 4, 5], &[4]).unwrap();
    let got = rotary(&xt, &positions, 10000.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    close(
        &got,
        &rotary_reference(&x, t, d, &[2.0, 3.0, 4.0, 5.0], 10000.0),
        1e-5,
        "rotary",
    );
    // q at position p and k at p + 3 score the same for every p.
    let q = Tensor::from_vec(x[..d].to_vec(), &[1, 1, 1, d as i64]).unwrap();
    let k = Tensor::from_vec(x[d..2 * d].to_vec(), &[1, 1, 1, d as i64]).unwrap();
    let score = |p: i32| {
        let at = |v: &Tensor, p: i32| {
            rotary(v, &Tensor::from_vec(vec![p], &[1]).unwrap(), 100.0).unwrap()
        };
        at(&q, p)
            .mul(&at(&k, p + 3))
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap()
            .item::<f32>()
            .unwrap()
    };
    let (s0, s9) = (score(0), score(9));
    assert!((s0 - s9).abs() < 1e-4, "{s0} vs {s9}");
}

#[test]
fn alibi_slopes_and_biases_follow_the_papers_reference() {
    let eight = alibi_slopes(8).unwrap().to_vec::<f32>().unwrap();
    let want: Vec<f64> = (1..=8).map(|h| 2f64.powi(-h)).collect();
    close(&eight, &want, 1e-7, "8 heads");
    // 6 heads: the 4-head slopes, then every other 8-head slope.
    let six = alibi_slopes(6).unwrap().to_vec::<f32>().unwrap();
    let want = [
        2f64.powi(-2),
        2f64.powi(-4),
        2f64.powi(-6),
        2f64.powi(-8),
        0.5,
        0.125,
    ];
    close(&six, &want, 1e-7, "6 heads");
    let q = Tensor::from_vec(vec![2i32, 3], &[2]).unwrap();
    let k = Tensor::range(0.0, 4.0, 1.0, DType::I32).unwrap();
    let bias = alibi_bias(2, &q, &k).unwrap();
    assert_eq!(bias.dims(), vec![2, 2, 4]);
    let slopes = [2f64.powi(-4), 2f64.powi(-8)];
    let mut want = Vec::new();
    for s in slopes {
        for qp in [2.0, 3.0] {
            for kp in 0..4 {
                want.push(s * (kp as f64 - qp));
            }
        }
    }
    close(&bias.to_vec::<f32>().unwrap(), &want, 1e-7, "bias");
}

#[test]
fn a_moving_average_of_weights_updates_inside_a_compiled_step() {
    let w = Variable::new(Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap());
    let ema = std::sync::Arc::new(ExponentialMovingAverage::new(0.5).unwrap());
    let step = {
        let (w, ema) = (w.clone(), ema.clone());
        function(move |delta: Tensor| -> Result<Tensor> {
            w.assign_add(&delta)?;
            ema.update(&[&w])?;
            w.read().reduce_sum(&[], false)
        })
    };
    // The shadow starts at the value before the first call, [1, 2], as
    // TensorFlow starts shadows at a variable's initial value; then
    // 0.5 * [1, 2] + 0.5 * [2, 3] = [1.5, 2.5], and
    // 0.5 * [1.5, 2.5] + 0.5 * [3, 4] = [2.25, 3.25].
    for _ in 0..2 {
        step.call((Tensor::from_vec(vec![1f32, 1.], &[2]).unwrap(),))
            .unwrap();
    }
    assert_eq!(step.tracing_count(), 1);
    let avg = ema.average(&w).unwrap().read().to_vec::<f32>().unwrap();
    assert_eq!(avg, vec![2.25, 3.25]);
    ema.copy_to(&[&w]).unwrap();
    assert_eq!(w.read().to_vec::<f32>().unwrap(), vec![2.25, 3.25]);
    assert!(ExponentialMovingAverage::new(1.5).is_err());
}

/// Keras' rule worked by hand: patience 2, factor 0.5, cooldown 1.
#[test]
fn reduce_lr_on_plateau_follows_keras_rule() {
    let lr = Variable::new(Tensor::scalar(1.0f32));
    let plateau = ReduceLrOnPlateau::new(lr.clone())
        .patience(2)
        .factor(0.5)
        .cooldown(1)
        .min_lr(0.2);
    // best 1.0; 1.0 (wait 1); 1.0 (wait 2: reduce to 0.5, cooldown 1);
    // 1.0 (cooldown: not counted); 1.0 (wait 1); 1.0 (wait 2: 0.25,
    // cooldown 1); 0.5 (cooldown, and better: best 0.5); 0.5 (wait 1);
    // 0.5 (wait 2: 0.125, raised to the floor 0.2); then no lower.
    let metrics = [
        1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5,
    ];
    let mut rates = Vec::new();
    for m in metrics {
        plateau.step(m).unwrap();
        rates.push(lr.read().item::<f32>().unwrap());
    }
    assert_eq!(
        rates,
        [
            1.0, 1.0, 0.5, 0.5, 0.5, 0.25, 0.25, 0.25, 0.2, 0.2, 0.2, 0.2, 0.2
        ]
    );
    // An accuracy: higher is better.
    let acc_lr = Variable::new(Tensor::scalar(1.0f32));
    let acc = ReduceLrOnPlateau::new(acc_lr.clone())
        .patience(1)
        .mode(Improvement::Higher);
    assert!(!acc.step(0.5).unwrap() && !acc.step(0.6).unwrap() && acc.step(0.6).unwrap());
    assert!((acc_lr.read().item::<f32>().unwrap() - 0.1).abs() < 1e-7);
}

#[derive(Module)]
struct Net {
    body: Linear,
    bn: BatchNorm,
    head: Linear,
}

#[test]
fn freezing_a_body_leaves_the_head_trainable_and_thawing_restores_it() {
    let key = xlafn::random::key(0).unwrap();
    let net = Net {
        body: Linear::new(&key, 3, 4).unwrap(),
        bn: BatchNorm::new(4, DType::F32).unwrap(),
        head: Linear::new(&key, 4, 2).unwrap(),
    };
    assert_eq!(net.trainable_variables().len(), 6); // moving stats are not
    net.body.freeze();
    net.bn.freeze();
    let names: Vec<String> = net.trainable_variables().iter().map(|v| v.name()).collect();
    assert_eq!(names, ["head.kernel", "head.bias"]);
    assert_eq!(
        net.parameter_count(),
        (3 * 4 + 4 + 4 * 4 + 4 * 2 + 2, 4 * 2 + 2)
    );
    net.unfreeze();
    assert_eq!(net.trainable_variables().len(), 6);
    assert!(!net.bn.moving_mean.trainable());
    let table = net.summary();
    assert!(
        table.contains("bn.moving_mean") && table.contains("f32[4]"),
        "{table}"
    );
    assert!(table.contains("no\n"), "{table}");
    assert!(
        table.ends_with("total 42 parameters, 34 trainable\n"),
        "{table}"
    );
}

/// Batches of a line fit `y = 3x`: `x` and `y` for call `i`.
fn line_batch(i: usize) -> (Vec<f32>, Vec<f32>) {
    let x: Vec<f32> = (0..4).map(|j| (i * 4 + j) as f32 / 10.0 - 0.7).collect();
    let y = x.iter().map(|v| 3.0 * v).collect();
    (x, y)
}

/// `d/dw mean((w x - y)^2)`, by hand.
fn line_grad(w: f64, (x, y): &(Vec<f32>, Vec<f32>)) -> f64 {
    let n = x.len() as f64;
    x.iter()
        .zip(y)
        .map(|(&x, &y)| 2.0 * (w * x as f64 - y as f64) * x as f64 / n)
        .sum()
}

#[test]
fn gradient_accumulation_applies_the_mean_every_k_calls() {
    let w = Variable::new(Tensor::scalar(0.5f32));
    let opt = GradientAccumulation::new(Sgd::new(0.1), 3).unwrap();
    let (mut want, mut sum) = (0.5f64, 0.0);
    for i in 0..7 {
        let batch = line_batch(i);
        let (x, y) = (
            Tensor::from_vec(batch.0.clone(), &[4]).unwrap(),
            Tensor::from_vec(batch.1.clone(), &[4]).unwrap(),
        );
        opt.minimize(&[&w], || {
            w.read().mul(&x)?.sub(&y)?.square()?.reduce_mean(&[], false)
        })
        .unwrap();
        // By hand: w holds still for three calls, then takes the mean.
        sum += line_grad(want, &batch);
        if i % 3 == 2 {
            want -= 0.1 * sum / 3.0;
            sum = 0.0;
        }
        let got = w.read().item::<f32>().unwrap() as f64;
        assert!((got - want).abs() < 1e-6, "call {i}: {got} vs {want}");
    }
    let Err(e) = GradientAccumulation::new(Sgd::new(0.1), 0) else {
        panic!("0 steps accepted");
    };
    assert!(e.to_string().contains("steps >= 1"), "{e}");
}

/// Compiled, the step is traced once, and an inner Adam sees one step per
/// `k` calls: the same as Adam given the mean gradients directly.
#[test]
fn a_compiled_accumulating_step_matches_adam_on_the_mean_gradients() {
    let w = Variable::new(Tensor::scalar(0.5f32));
    let opt = std::sync::Arc::new(GradientAccumulation::new(Adam::new(0.05), 2).unwrap());
    let (wv, o) = (w.clone(), opt.clone());
    let step = function(move |x: Tensor, y: Tensor| {
        o.minimize(&[&wv], || {
            wv.read()
                .mul(&x)?
                .sub(&y)?
                .square()?
                .reduce_mean(&[], false)
        })
    });
    let reference = Variable::new(Tensor::scalar(0.5f32));
    let adam = Adam::new(0.05);
    let mut sum = 0.0;
    for i in 0..6 {
        let batch = line_batch(i);
        let x = Tensor::from_vec(batch.0.clone(), &[4]).unwrap();
        let y = Tensor::from_vec(batch.1.clone(), &[4]).unwrap();
        let before = reference.read().item::<f32>().unwrap() as f64;
        step.call((&x, &y)).unwrap();
        sum += line_grad(before, &batch);
        if i % 2 == 1 {
            let mean = Tensor::scalar((sum / 2.0) as f32);
            adam.apply_gradients(&[(Some(mean), &reference)]).unwrap();
            sum = 0.0;
        }
        let (got, want) = (
            w.read().item::<f32>().unwrap(),
            reference.read().item::<f32>().unwrap(),
        );
        assert!((got - want).abs() < 1e-6, "call {i}: {got} vs {want}");
    }
    assert_eq!(step.tracing_count(), 1);
    let names: Vec<String> = opt
        .state_variables(&[("w".to_string(), w.clone())], false)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert!(
        names.contains(&"accumulation_position".to_string()),
        "{names:?}"
    );
    assert!(names.contains(&"accumulated.w".to_string()), "{names:?}");
}
