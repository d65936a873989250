//! Every optimizer option against its formula computed here in f64 by a
//! direct loop (the docs' formulas, which are Keras', optax's and
//! PyTorch's), learning-rate schedules against Keras' definitions worked
//! out by hand, schedules and learning-rate variables inside compiled steps
//! (one trace), gradient clipping against hand-computed norms, and the
//! errors for bad settings.

use std::sync::Arc;
use xlafn::ops::stats::clip_by_global_norm;
use xlafn::optimizers::schedules::Schedule;
use xlafn::optimizers::{
    CosineDecay, ExponentialDecay, FnSchedule, InverseTimeDecay, PiecewiseConstant, PolynomialDecay,
};
use xlafn::prelude::*;

/// Gradients for three steps of a two-element variable starting at
/// `[1.0, -2.0]`: signs and sizes vary so every branch is exercised.
const GRADS: [[f64; 2]; 3] = [[0.5, -1.5], [-0.25, 2.0], [1.0, 0.125]];
const START: [f64; 2] = [1.0, -2.0];

/// Runs `opt` eagerly over `GRADS` on an f64 variable.
fn run(opt: &dyn Optimizer) -> Vec<f64> {
    let w = Variable::new(Tensor::vector(&START).unwrap());
    for g in GRADS {
        opt.apply_gradients(&[(Some(Tensor::vector(&g).unwrap()), &w)])
            .unwrap();
    }
    w.read().to_vec::<f64>().unwrap()
}

/// The same through a compiled step (one trace for the three steps).
fn run_compiled<O: Optimizer + 'static>(opt: O) -> Vec<f64> {
    let w = Variable::new(Tensor::vector(&START).unwrap());
    let (opt, var) = (Arc::new(opt), w.clone());
    let step = function(move |g: Tensor| -> Result<Tensor> {
        opt.apply_gradients(&[(Some(g.clone()), &var)])?;
        Ok(g)
    });
    for g in GRADS {
        step.call((Tensor::vector(&g).unwrap(),)).unwrap();
    }
    assert_eq!(
        step.tracing_count(),
        1,
        "slots made on the first call need no second trace"
    );
    w.read().to_vec::<f64>().unwrap()
}

/// Applies `rule(t, g, state, v)` per element over `GRADS` (t from 1).
fn reference<S: Clone>(init: S, rule: impl Fn(f64, f64, &mut S, &mut f64)) -> Vec<f64> {
    (0..2)
        .map(|j| {
            let (mut s, mut v) = (init.clone(), START[j]);
            for (k, g) in GRADS.iter().enumerate() {
                rule((k + 1) as f64, g[j], &mut s, &mut v);
            }
            v
        })
        .collect()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    for (a, b) in got.iter().zip(want) {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

#[test]
fn sgd_momentum_nesterov_and_weight_decay_follow_their_formulas() {
    let (lr, mu, wd) = (0.1, 0.9, 0.01);
    let want = reference(0.0, |_, g, m, v| {
        *m = mu * *m + g;
        *v -= lr * (g + mu * *m);
    });
    close(
        &run(&Sgd::new(lr).momentum(mu).nesterov(true)),
        &want,
        "nesterov",
    );
    let want = reference(0.0, |_, g, m, v| {
        *v -= lr * wd * *v;
        *m = mu * *m + g;
        *v -= lr * *m;
    });
    let opt = Sgd::new(lr).momentum(mu).weight_decay(wd);
    close(&run(&opt), &want, "momentum + weight decay");
    // Nothing read the step count, so none was kept; `build` keeps one.
    assert_eq!(opt.iterations().unwrap(), 0);
    let built = Sgd::new(lr).momentum(mu).weight_decay(wd);
    built.build::<Variable>(&[]).unwrap();
    close(&run(&built), &want, "built");
    assert_eq!(built.iterations().unwrap(), 3);
}

#[test]
fn adam_variants_follow_their_formulas_eagerly_and_compiled() {
    let (lr, b1, b2) = (0.05, 0.8, 0.95);
    // (m, s, s_max)
    let adam = |eps: f64, eps_root: f64, amsgrad: bool, wd: f64| {
        reference(
            (0.0, 0.0, 0.0),
            move |t, g, (m, s, s_max): &mut (f64, f64, f64), v| {
                *v -= lr * wd * *v;
                *m = b1 * *m + (1.0 - b1) * g;
                *s = b2 * *s + (1.0 - b2) * g * g;
                *s_max = s_max.max(*s);
                let second = if amsgrad { *s_max } else { *s };
                let m_hat = *m / (1.0 - b1.powf(t));
                let s_hat = second / (1.0 - b2.powf(t));
                *v -= lr * m_hat / ((s_hat + eps_root).sqrt() + eps);
            },
        )
    };
    let base = || Adam::new(lr).beta1(b1).beta2(b2);
    close(&run(&base()), &adam(1e-7, 0.0, false, 0.0), "adam");
    close(
        &run(&base().amsgrad(true)),
        &adam(1e-7, 0.0, true, 0.0),
        "amsgrad",
    );
    close(
        &run_compiled(base().amsgrad(true)),
        &adam(1e-7, 0.0, true, 0.0),
        "amsgrad compiled",
    );
    close(
        &run(&base().epsilon(0.1).epsilon_root(0.01)),
        &adam(0.1, 0.01, false, 0.0),
        "epsilon_root",
    );
    close(
        &run(&xlafn::optimizers::AdamW::new(lr).beta1(b1).beta2(b2)),
        &adam(1e-7, 0.0, false, 0.004),
        "adamw",
    );
    // Keras' epsilon hat: epsilon before the bias correction.
    let keras = reference((0.0, 0.0), |t, g, (m, s): &mut (f64, f64), v| {
        *m = b1 * *m + (1.0 - b1) * g;
        *s = b2 * *s + (1.0 - b2) * g * g;
        let alpha = lr * (1.0 - b2.powf(t)).sqrt() / (1.0 - b1.powf(t));
        *v -= alpha * *m / (s.sqrt() + 0.1);
    });
    close(
        &run(&base().epsilon(0.1).epsilon_hat(true)),
        &keras,
        "epsilon hat",
    );
}

#[test]
fn rmsprop_and_adagrad_follow_keras_formulas() {
    let (lr, rho, mu, eps) = (0.01, 0.8, 0.5, 1e-3);
    // (s, c, m)
    let rms = |centered: bool, momentum: f64| {
        reference(
            (0.0, 0.0, 0.0),
            move |_, g, (s, c, m): &mut (f64, f64, f64), v| {
                *s = rho * *s + (1.0 - rho) * g * g;
                *c = rho * *c + (1.0 - rho) * g;
                let d = if centered { *s - *c * *c } else { *s } + eps;
                let step = lr * g / d.sqrt();
                *m = momentum * *m + step;
                *v -= if momentum > 0.0 { *m } else { step };
            },
        )
    };
    let base = || RmsProp::new(lr).rho(rho).epsilon(eps);
    close(&run(&base()), &rms(false, 0.0), "rmsprop");
    close(&run(&base().centered(true)), &rms(true, 0.0), "centered");
    close(&run(&base().momentum(mu)), &rms(false, mu), "momentum");
    close(
        &run_compiled(base().centered(true).momentum(mu)),
        &rms(true, mu),
        "compiled",
    );
    let ada = reference(0.3, |_, g, a, v| {
        *a += g * g;
        *v -= lr * g / (*a + 1e-7).sqrt();
    });
    close(
        &run(&Adagrad::new(lr).initial_accumulator(0.3)),
        &ada,
        "adagrad",
    );
}

fn at(s: &dyn Schedule, step: i64) -> f64 {
    f64::from(
        s.at(&Tensor::scalar(step as f32))
            .unwrap()
            .item::<f32>()
            .unwrap(),
    )
}

fn near(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1e-3),
        "{what}: {got} vs {want}"
    );
}

#[test]
fn schedules_match_kerases_definitions() {
    let e = ExponentialDecay::new(0.1, 10, 0.5).unwrap();
    near(at(&e, 0), 0.1, "exp 0");
    near(at(&e, 5), 0.1 * 0.5f64.sqrt(), "exp 5");
    near(at(&e, 25), 0.1 * 0.5f64.powf(2.5), "exp 25");
    let stair = ExponentialDecay::new(0.1, 10, 0.5).unwrap().staircase(true);
    near(at(&stair, 19), 0.05, "stair 19");
    near(at(&stair, 20), 0.025, "stair 20");

    let inv = InverseTimeDecay::new(1.0, 4, 0.5).unwrap();
    near(at(&inv, 6), 1.0 / (1.0 + 0.5 * 1.5), "inverse 6");
    near(at(&inv.staircase(true), 6), 1.0 / 1.5, "inverse stair 6");

    let pc = PiecewiseConstant::new(&[10, 20], &[1.0, 0.5, 0.1]).unwrap();
    for (step, want) in [
        (0, 1.0),
        (10, 1.0),
        (11, 0.5),
        (20, 0.5),
        (21, 0.1),
        (99, 0.1),
    ] {
        near(at(&pc, step), want, &format!("piecewise {step}"));
    }

    let poly = PolynomialDecay::new(0.1, 10, 0.01).unwrap().power(2.0);
    near(at(&poly, 5), 0.09 * 0.25 + 0.01, "poly 5");
    near(at(&poly, 30), 0.01, "poly after");
    let cyc = PolynomialDecay::new(0.1, 10, 0.0).unwrap().cycle(true);
    near(at(&cyc, 15), 0.1 * (1.0 - 15.0 / 20.0), "poly cycle 15");

    let cos = CosineDecay::new(0.2, 100).unwrap().alpha(0.1);
    let want = |s: f64| 0.2 * (0.9 * 0.5 * (1.0 + (std::f64::consts::PI * s / 100.0).cos()) + 0.1);
    near(at(&cos, 0), 0.2, "cos 0");
    near(at(&cos, 30), want(30.0), "cos 30");
    near(at(&cos, 500), 0.02, "cos after");
    let warm = CosineDecay::new(0.0, 100).unwrap().warmup(0.4, 10).unwrap();
    near(at(&warm, 5), 0.2, "warmup 5");
    near(at(&warm, 10), 0.4, "warmup end");
    near(
        at(&warm, 60),
        0.4 * 0.5 * (1.0 + (std::f64::consts::PI * 0.5).cos()),
        "after warmup",
    );
}

#[test]
fn a_schedule_changes_the_rate_every_call_of_one_compiled_step() {
    // SGD with gradient 1: the variable drops by exactly the rate.
    let w = Variable::new(Tensor::scalar(0.0f32));
    let schedule = PiecewiseConstant::new(&[1, 3], &[1.0, 0.5, 0.25]).unwrap();
    let opt = Arc::new(Sgd::new(schedule));
    opt.build(&[&w]).unwrap();
    let (o, var) = (opt.clone(), w.clone());
    let step = function(move |g: Tensor| -> Result<Tensor> {
        o.apply_gradients(&[(Some(g.clone()), &var)])?;
        var.try_read()
    });
    let got: Vec<f32> = (0..5)
        .map(|_| {
            step.call((Tensor::scalar(1.0f32),))
                .unwrap()
                .item::<f32>()
                .unwrap()
        })
        .collect();
    // steps 0,1 -> 1.0; 2,3 -> 0.5; 4 -> 0.25
    assert_eq!(got, vec![-1.0, -2.0, -2.5, -3.0, -3.25]);
    assert_eq!(step.tracing_count(), 1);
    assert_eq!(opt.iterations().unwrap(), 5);

    // A closure schedule works the same way.
    let halving = FnSchedule(|s: &Tensor| Tensor::scalar(0.5f32).pow(s));
    let opt = Sgd::new(halving);
    let v = Variable::new(Tensor::scalar(0.0f64));
    for _ in 0..3 {
        opt.apply_gradients(&[(Some(Tensor::scalar(1.0f64)), &v)])
            .unwrap();
    }
    assert_eq!(v.read().item::<f64>().unwrap(), -1.75);
}

#[test]
fn a_learning_rate_variable_is_read_inside_the_compiled_step() {
    let w = Variable::new(Tensor::scalar(0.0f32));
    let lr = Variable::new(Tensor::scalar(0.5f32));
    let opt = Arc::new(Adam::new(lr.clone()));
    opt.build(&[&w]).unwrap();
    let (o, var) = (opt.clone(), w.clone());
    let step = function(move |g: Tensor| -> Result<Tensor> {
        o.apply_gradients(&[(Some(g.clone()), &var)])?;
        var.try_read()
    });
    // Adam's step with a constant-sign gradient is the rate (m̂/sqrt(v̂) = 1).
    let a = step
        .call((Tensor::scalar(2.0f32),))
        .unwrap()
        .item::<f32>()
        .unwrap();
    lr.assign(&Tensor::scalar(0.125f32)).unwrap();
    let b = step
        .call((Tensor::scalar(2.0f32),))
        .unwrap()
        .item::<f32>()
        .unwrap();
    assert!(
        (a + 0.5).abs() < 1e-5 && (b - a + 0.125).abs() < 1e-5,
        "{a} {b}"
    );
    assert_eq!(step.tracing_count(), 1);
}

#[test]
fn clipping_matches_hand_computed_norms() {
    let t = Tensor::vector(&[3.0f64, 4.0]).unwrap();
    assert_eq!(
        t.clip_by_norm(1.0).unwrap().to_vec::<f64>().unwrap(),
        vec![0.6, 0.8]
    );
    assert_eq!(
        t.clip_by_norm(10.0).unwrap().to_vec::<f64>().unwrap(),
        vec![3.0, 4.0]
    );
    let zero = Tensor::vector(&[0.0f64, 0.0]).unwrap();
    assert_eq!(
        zero.clip_by_norm(1.0).unwrap().to_vec::<f64>().unwrap(),
        vec![0.0, 0.0]
    );
    // The gradient through the clip at zero is finite (the safe norm).
    let tape = GradientTape::new();
    tape.watch(&zero);
    let y = zero
        .clip_by_norm(1.0)
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape
        .gradient(&y, &[(&zero).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert!(g.to_vec::<f64>().unwrap().iter().all(|v| v.is_finite()));

    // Global norm of [3, 4] and [12]: 13.
    let u = Tensor::vector(&[12.0f64]).unwrap();
    let (clipped, norm) = clip_by_global_norm(&[t.clone(), u.clone()], 6.5).unwrap();
    assert_eq!(norm.item::<f64>().unwrap(), 13.0);
    assert_eq!(clipped[0].to_vec::<f64>().unwrap(), vec![1.5, 2.0]);
    assert_eq!(clipped[1].to_vec::<f64>().unwrap(), vec![6.0]);

    // Inside an optimizer: global-norm clipping, then plain SGD (lr 1).
    let (a, b) = (
        Variable::new(Tensor::vector(&[0.0f64, 0.0]).unwrap()),
        Variable::new(Tensor::vector(&[0.0f64]).unwrap()),
    );
    let opt = Sgd::new(1.0).clip(GradientClip::GlobalNorm(6.5));
    opt.apply_gradients(&[(Some(t.clone()), &a), (None, &b), (Some(u), &b)])
        .unwrap();
    assert_eq!(a.read().to_vec::<f64>().unwrap(), vec![-1.5, -2.0]);
    assert_eq!(b.read().to_vec::<f64>().unwrap(), vec![-6.0]);
    let opt = Sgd::new(1.0).clip(GradientClip::Value(3.5));
    opt.apply_gradients(&[(Some(t.clone()), &a)]).unwrap();
    assert_eq!(a.read().to_vec::<f64>().unwrap(), vec![-4.5, -5.5]);
    let opt = Sgd::new(1.0).clip(GradientClip::Norm(1.0));
    opt.apply_gradients(&[(Some(t), &a)]).unwrap();
    assert_eq!(a.read().to_vec::<f64>().unwrap(), vec![-5.1, -6.3]);
}

#[test]
fn value_and_grad_and_minimize_remove_the_boilerplate() {
    let w = Variable::new(Tensor::vector(&[1.0f64, 2.0]).unwrap());
    let unused = Variable::new(Tensor::scalar(7.0f64));
    let loss = || w.read().square()?.reduce_sum(&[], false);
    let (value, grads) = value_and_grad(&[&w, &unused], loss).unwrap();
    assert_eq!(value.item::<f64>().unwrap(), 5.0);
    assert_eq!(grads[0].to_vec::<f64>().unwrap(), vec![2.0, 4.0]);
    assert_eq!(grads[1].item::<f64>().unwrap(), 0.0);
    let opt = Sgd::new(0.25);
    let value = opt.minimize(&[&w, &unused], loss).unwrap();
    assert_eq!(value.item::<f64>().unwrap(), 5.0);
    assert_eq!(w.read().to_vec::<f64>().unwrap(), vec![0.5, 1.0]);
    assert_eq!(unused.read().item::<f64>().unwrap(), 7.0);
}

fn assert_err<T: std::fmt::Debug>(r: xlafn::Result<T>, needle: &str) {
    let msg = r.expect_err("an error").to_string();
    assert!(msg.contains(needle), "{msg}");
}

#[test]
fn bad_settings_are_clear_errors() {
    let w = Variable::new(Tensor::vector(&[1.0f32]).unwrap());
    let g = || vec![(Some(Tensor::vector(&[1.0f32]).unwrap()), &w)];
    assert_err(
        Adam::new(0.1).beta1(1.0).apply_gradients(&g()),
        "beta1 (1) and beta2",
    );
    assert_err(
        Adam::new(0.1).epsilon(-1.0).apply_gradients(&g()),
        "epsilon (-1)",
    );
    assert_err(
        Sgd::new(0.1).momentum(1.5).apply_gradients(&g()),
        "momentum must be in [0, 1)",
    );
    assert_err(
        Sgd::new(0.1).nesterov(true).apply_gradients(&g()),
        "Nesterov",
    );
    assert_err(RmsProp::new(0.1).rho(2.0).apply_gradients(&g()), "rho (2)");
    assert_err(
        Sgd::new(f64::NAN).apply_gradients(&g()),
        "learning rate must be finite",
    );
    let lr = Variable::new(Tensor::vector(&[0.1f32, 0.2]).unwrap());
    assert_err(Sgd::new(lr).apply_gradients(&g()), "must be a float scalar");
    let wrong = vec![(Some(Tensor::vector(&[1.0f32, 2.0]).unwrap()), &w)];
    assert_err(Sgd::new(0.1).apply_gradients(&wrong), "has shape");
    assert_err(
        Sgd::new(0.1)
            .clip(GradientClip::Norm(0.0))
            .apply_gradients(&g()),
        "clip_norm must be positive",
    );
    assert_err(
        ExponentialDecay::new(0.1, 0, 0.5),
        "decay_steps must be positive",
    );
    assert_err(
        PiecewiseConstant::new(&[5, 3], &[1.0, 2.0, 3.0]),
        "must increase",
    );
    assert_err(PiecewiseConstant::new(&[5], &[1.0]), "one more value");
    let ints = Variable::new(Tensor::vector(&[1i32]).unwrap());
    assert_err(
        Sgd::new(0.1).apply_gradients(&[(Some(Tensor::vector(&[1i32]).unwrap()), &ints)]),
        "same float type",
    );
}
