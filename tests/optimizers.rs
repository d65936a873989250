//! Optimizers against hand-computed updates, the guide's "multiple
//! optimizers" pitfall, and a small MLP trained to high accuracy.

use std::sync::Arc;
use xlafn::prelude::*;

#[test]
fn sgd_and_momentum_steps_match_the_formulas() {
    let w = Variable::new(Tensor::vector(&[1.0f64, -2.0]).unwrap());
    let g = Tensor::vector(&[0.5f64, 0.25]).unwrap();
    Sgd::new(0.1)
        .apply_gradients(&[(Some(g.clone()), &w)])
        .unwrap();
    assert_eq!(
        w.read().to_vec::<f64>().unwrap(),
        vec![1.0 - 0.05, -2.0 - 0.025]
    );
    let m = Variable::new(Tensor::vector(&[0.0f64, 0.0]).unwrap());
    let opt = Sgd::with_momentum(0.1, 0.9);
    opt.apply_gradients(&[(Some(g.clone()), &m)]).unwrap(); // velocity = g
    opt.apply_gradients(&[(Some(g.clone()), &m)]).unwrap(); // velocity = 0.9 g + g
    let want: Vec<f64> = [0.5f64, 0.25]
        .iter()
        .map(|g| -0.1 * g - 0.1 * (0.9 * g + g))
        .collect();
    for (a, b) in m.read().to_vec::<f64>().unwrap().iter().zip(&want) {
        assert!((a - b).abs() < 1e-12);
    }
}

#[test]
fn adams_first_step_is_about_the_learning_rate_against_the_gradient_sign() {
    let w = Variable::new(Tensor::vector(&[1.0f32, 1.0]).unwrap());
    let opt = Adam::new(0.01);
    opt.apply_gradients(&[(Some(Tensor::vector(&[3.0f32, -0.5]).unwrap()), &w)])
        .unwrap();
    // With bias correction, m̂ = g and v̂ = g², so the step is lr * g / |g|.
    let v = w.read().to_vec::<f32>().unwrap();
    assert!(
        (v[0] - 0.99).abs() < 1e-5 && (v[1] - 1.01).abs() < 1e-5,
        "{v:?}"
    );
}

#[test]
fn a_new_optimizer_in_a_later_call_is_refused_like_the_guide_says() {
    // train_step(w, x, y, optimizer) from "Using with multiple Keras optimizers".
    let train_step = function(
        |w: Variable, x: Tensor, y: Tensor, optimizer: Shared<Adam>| -> Result<()> {
            let tape = GradientTape::new();
            let loss = w
                .read()
                .mul(&x)?
                .sub(&y)?
                .square()?
                .reduce_sum(&[], false)?;
            let grads = tape.gradient(&loss, &[(&w).into()])?;
            optimizer.apply_gradients(&[(grads[0].clone(), &w)])
        },
    );
    let w = Variable::new(Tensor::scalar(2.0f32));
    let x = Tensor::vector(&[-1.0f32]).unwrap();
    let y = Tensor::vector(&[2.0f32]).unwrap();
    let opt1 = Shared(Arc::new(Adam::new(0.1)));
    let opt2 = Shared(Arc::new(Adam::new(0.1)));
    train_step.call((w.clone(), &x, &y, opt1.clone())).unwrap();
    train_step.call((w.clone(), &x, &y, opt1.clone())).unwrap();
    let e = train_step.call((w.clone(), &x, &y, opt2)).unwrap_err();
    assert!(
        e.to_string()
            .contains("only supports singleton Variables created on the first call"),
        "{e}"
    );
    // w moved toward the minimum (w * -1 = 2, so w -> -2).
    assert!(w.read().item::<f32>().unwrap() < 2.0);
}

/// A small MLP on a synthetic 3-class problem: inputs near one of three
/// centres, classified by which.
#[test]
fn a_small_mlp_learns_a_synthetic_task() {
    let (n, d, h, k) = (96i64, 8i64, 16i64, 3i64);
    let centres: Vec<Vec<f32>> = (0..k)
        .map(|c| {
            (0..d)
                .map(|j| if j % k == c { 2.0 } else { -1.0 })
                .collect()
        })
        .collect();
    let labels: Vec<i32> = (0..n).map(|i| (i % k) as i32).collect();
    let noise = Tensor::random_normal(&[n, d], 3, DType::F32)
        .unwrap()
        .mul_scalar(0.5)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let xs: Vec<f32> = (0..n as usize)
        .flat_map(|i| (0..d as usize).map(move |j| (i, j)))
        .map(|(i, j)| centres[labels[i] as usize][j] + noise[i * d as usize + j])
        .collect();
    let x = Tensor::from_vec(xs, &[n, d]).unwrap();
    let y = Tensor::from_vec(labels.clone(), &[n]).unwrap();

    let init = |dims: &[i64], seed| {
        Variable::new(
            Tensor::random_normal(dims, seed, DType::F32)
                .unwrap()
                .mul_scalar(0.3)
                .unwrap(),
        )
    };
    let (w1, b1) = (
        init(&[d, h], 1),
        Variable::new(Tensor::zeros(&[h], DType::F32)),
    );
    let (w2, b2) = (
        init(&[h, k], 2),
        Variable::new(Tensor::zeros(&[k], DType::F32)),
    );
    let params = [w1.clone(), b1.clone(), w2.clone(), b2.clone()];
    let logits = {
        let params = params.clone();
        move |x: &Tensor| -> Result<Tensor> {
            let hidden = x
                .matmul(&params[0].read())?
                .add(&params[1].read())?
                .relu()?;
            hidden.matmul(&params[2].read())?.add(&params[3].read())
        }
    };
    let opt = Sgd::new(0.5);
    let step = function({
        let (params, logits) = (params.clone(), logits.clone());
        move |x: Tensor, y: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let onehot = y.one_hot(k, 1.0, 0.0, DType::F32)?;
            let loss = onehot
                .mul(&logits(&x)?.log_softmax(-1)?)?
                .reduce_sum(&[1], false)?
                .reduce_mean(&[], false)?
                .neg()?;
            let sources: Vec<Source> = params.iter().map(Source::from).collect();
            let grads = tape.gradient(&loss, &sources)?;
            let pairs: Vec<(Option<Tensor>, &Variable)> =
                grads.into_iter().zip(params.iter()).collect();
            opt.apply_gradients(&pairs)?;
            Ok(loss)
        }
    });
    let first = step.call((&x, &y)).unwrap().item::<f32>().unwrap();
    let mut last = first;
    for _ in 0..60 {
        last = step.call((&x, &y)).unwrap().item::<f32>().unwrap();
    }
    assert!(last < first * 0.3, "loss {first} -> {last}");
    assert_eq!(step.tracing_count(), 1);
    let predicted = logits(&x)
        .unwrap()
        .argmax(-1)
        .unwrap()
        .to_vec::<i64>()
        .unwrap();
    let correct = predicted
        .iter()
        .zip(&labels)
        .filter(|(p, l)| **p == **l as i64)
        .count();
    assert!(correct as f64 / n as f64 > 0.9, "accuracy {correct}/{n}");
}

/// A compiled Adam step over several variables computes the bias
/// corrections once (two `power` ops, not two per variable), and the
/// variables follow Adam's formula, computed here by hand in f64.
#[test]
fn adam_bias_corrections_are_computed_once_per_step() {
    let vars: Arc<Vec<Variable>> = Arc::new(
        (0..3)
            .map(|i| Variable::new(Tensor::vector(&[1.0f32 + i as f32, -0.5]).unwrap()))
            .collect(),
    );
    let opt = Arc::new(Adam::new(0.1));
    let refs: Vec<&Variable> = vars.iter().collect();
    opt.build(&refs).unwrap();
    let (vs, o) = (vars.clone(), opt.clone());
    let step = function(move |g: Tensor| -> Result<Tensor> {
        let grads: Vec<(Option<Tensor>, &Variable)> = vs
            .iter()
            .enumerate()
            .map(|(i, v)| Ok((Some(g.mul_scalar(i as f64 + 1.0)?), v)))
            .collect::<Result<_>>()?;
        o.apply_gradients(&grads)?;
        Ok(g)
    });
    // p -= lr * m̂ / (sqrt(v̂) + 1e-7), beta1 0.9, beta2 0.999.
    let mut want: Vec<[f64; 2]> = (0..3).map(|i| [1.0 + i as f64, -0.5]).collect();
    let (mut m, mut v) = (vec![[0.0f64; 2]; 3], vec![[0.0f64; 2]; 3]);
    for k in 0..3 {
        let g = [0.5f64 - k as f64, 2.0];
        step.call((Tensor::vector(&[g[0] as f32, g[1] as f32]).unwrap(),))
            .unwrap();
        let t = k + 1;
        for i in 0..3 {
            for j in 0..2 {
                let gi = g[j] * (i as f64 + 1.0);
                m[i][j] = 0.9 * m[i][j] + 0.1 * gi;
                v[i][j] = 0.999 * v[i][j] + 0.001 * gi * gi;
                let m_hat = m[i][j] / (1.0 - 0.9f64.powi(t));
                let v_hat = v[i][j] / (1.0 - 0.999f64.powi(t));
                want[i][j] -= 0.1 * m_hat / (v_hat.sqrt() + 1e-7);
            }
        }
    }
    for (var, w) in vars.iter().zip(&want) {
        let got = var.read().to_vec::<f32>().unwrap();
        for (a, b) in got.iter().zip(w) {
            assert!((*a as f64 - b).abs() < 1e-5, "{got:?} vs {w:?}");
        }
    }
    assert_eq!(step.tracing_count(), 1);
    let text = step.concrete_functions()[0]
        .stablehlo(&[xlafn::ArraySpec::new(DType::F32, &[2])])
        .unwrap();
    assert_eq!(text.matches("stablehlo.power").count(), 2, "{text}");
}
