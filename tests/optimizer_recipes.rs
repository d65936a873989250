//! Optimizers as real recipes: weight decay masked by rank, by name (module
//! paths) and by a list, parameter groups with their own learning-rate
//! multipliers, clipping by global norm across every group and across two
//! optimizers, and a compiled `minimize` step with no `build` first that is
//! traced once. Each against the update computed here in f64 by a direct
//! loop over the docs' formulas, or by hand.

use std::sync::Arc;
use xlafn::optimizers::ParamGroup;
use xlafn::prelude::*;

/// A named f64 variable.
fn var(name: &str, values: &[f64], dims: &[i64]) -> Variable {
    Variable::new(Tensor::from_vec(values.to_vec(), dims).unwrap()).named(name)
}

fn read(v: &Variable) -> Vec<f64> {
    v.read().to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (a, b) in got.iter().zip(want) {
        assert!(
            (a - b).abs() <= 1e-12 * b.abs().max(1.0),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

/// One Adam step per element (t from 1), with decoupled decay `wd` and the
/// rate `lr`, over the gradients `grads` (one per step).
fn adam_reference(start: f64, grads: &[f64], lr: f64, wd: f64) -> f64 {
    let (b1, b2, eps) = (0.9, 0.999, 1e-7);
    let (mut m, mut s, mut v) = (0.0, 0.0, start);
    for (k, g) in grads.iter().enumerate() {
        let t = (k + 1) as f64;
        v -= lr * wd * v;
        m = b1 * m + (1.0 - b1) * g;
        s = b2 * s + (1.0 - b2) * g * g;
        v -= lr * (m / (1.0 - b1.powf(t))) / ((s / (1.0 - b2.powf(t))).sqrt() + eps);
    }
    v
}

#[test]
fn weight_decay_is_masked_by_rank_name_or_list() {
    let (lr, wd) = (0.01, 0.1);
    // The same three gradients for every variable, all elements.
    let steps = [0.5, -1.0, 0.25];
    type Make = Box<dyn Fn(&[&Variable]) -> Adam>;
    let masks: Vec<(&str, Make, [bool; 4])> = vec![
        (
            "rank < 2",
            Box::new(move |_| {
                AdamW::new(lr)
                    .weight_decay(wd)
                    .exclude_from_weight_decay(|v: &Variable| v.dims().len() < 2)
            }),
            [true, false, false, true],
        ),
        (
            "names",
            Box::new(move |_| {
                AdamW::new(lr)
                    .weight_decay(wd)
                    .exclude_from_weight_decay_names(&["bias", ".ln.", "wte"])
            }),
            [true, false, false, false],
        ),
        (
            "list",
            Box::new(move |vars: &[&Variable]| {
                AdamW::new(lr)
                    .weight_decay(wd)
                    .param_group(ParamGroup::variables(&vars[1..3]).weight_decay(0.0))
            }),
            [true, false, false, true],
        ),
    ];
    for (what, make, decayed) in masks {
        let vars = [
            var("blocks.0.attn.kernel", &[1.0, -2.0, 0.5, 3.0], &[2, 2]),
            var("blocks.0.attn.bias", &[1.0, -1.0], &[2]),
            var("blocks.0.ln.gamma", &[2.0, 0.5], &[2]),
            var("wte.embeddings", &[0.75, -0.25, 1.5, -3.0], &[2, 2]),
        ];
        let refs: Vec<&Variable> = vars.iter().collect();
        let starts: Vec<Vec<f64>> = vars.iter().map(read).collect();
        let opt = make(&refs);
        for g in steps {
            let pairs: Vec<(Option<Tensor>, &Variable)> = vars
                .iter()
                .map(|v| {
                    (
                        Some(v.read().ones_like().unwrap().mul_scalar(g).unwrap()),
                        v,
                    )
                })
                .collect();
            opt.apply_gradients(&pairs).unwrap();
        }
        for ((v, start), &decay) in vars.iter().zip(&starts).zip(&decayed) {
            let want: Vec<f64> = start
                .iter()
                .map(|&x| adam_reference(x, &steps, lr, if decay { wd } else { 0.0 }))
                .collect();
            close(&read(v), &want, &format!("{what}: {}", v.name()));
        }
    }
}

#[test]
fn parameter_groups_scale_the_rate_and_the_last_group_setting_wins() {
    // Plain SGD with decay: v -= lr * s * wd_v * v, then v -= lr * s * g.
    let (lr, wd) = (0.5, 0.1);
    let body = var("body.kernel", &[1.0, 2.0], &[2]);
    let head = var("head.kernel", &[1.0, 2.0], &[2]);
    let head_bias = var("head.bias", &[1.0, 2.0], &[2]);
    let opt = Sgd::new(lr)
        .weight_decay(wd)
        .param_group(ParamGroup::named(&["head."]).learning_rate_scale(10.0))
        .param_group(ParamGroup::named(&["bias"]).weight_decay(0.0))
        .param_group(ParamGroup::named(&["body."]).learning_rate_scale(0.1));
    let g = Tensor::from_vec(vec![1.0, -0.5], &[2]).unwrap();
    let vars = [&body, &head, &head_bias];
    let pairs: Vec<(Option<Tensor>, &Variable)> =
        vars.iter().map(|v| (Some(g.clone()), *v)).collect();
    opt.apply_gradients(&pairs).unwrap();
    let sgd = |x: f64, g: f64, scale: f64, wd: f64| {
        let x = x - lr * scale * wd * x;
        x - lr * scale * g
    };
    // (scale, decay) per variable: the bias takes the head's 10x rate and
    // the bias group's zero decay.
    for (v, scale, decay) in [(&body, 0.1, wd), (&head, 10.0, wd), (&head_bias, 10.0, 0.0)] {
        let want: Vec<f64> = [1.0, 2.0]
            .iter()
            .zip([1.0, -0.5])
            .map(|(&x, g)| sgd(x, g, scale, decay))
            .collect();
        close(&read(v), &want, &v.name());
    }
    // A schedule is scaled the same way (its tensor times the multiplier).
    let w = var("body.w", &[0.0], &[1]);
    let sched = Sgd::new(xlafn::optimizers::ExponentialDecay::new(1.0, 1, 0.5).unwrap())
        .param_group(ParamGroup::matching(|_: &Variable| true).learning_rate_scale(0.25));
    for _ in 0..2 {
        sched
            .apply_gradients(&[(Some(Tensor::from_vec(vec![1.0], &[1]).unwrap()), &w)])
            .unwrap();
    }
    close(&read(&w), &[-(0.25 * 1.0 + 0.25 * 0.5)], "scaled schedule");
}

/// `clip_by_global_norm` by hand: gradients [3, 4] and [12] have global
/// norm 13; clipped to 6.5 each is halved.
#[test]
fn clip_by_global_norm_by_hand_and_across_dtypes() {
    let a = Tensor::from_vec(vec![3.0f64, 4.0], &[2]).unwrap();
    let b = Tensor::from_vec(vec![12.0f64], &[1]).unwrap();
    let (clipped, norm) = xlafn::clip_by_global_norm(&[a.clone(), b.clone()], 6.5).unwrap();
    assert_eq!(norm.item::<f64>().unwrap(), 13.0);
    assert_eq!(clipped[0].to_vec::<f64>().unwrap(), vec![1.5, 2.0]);
    assert_eq!(clipped[1].to_vec::<f64>().unwrap(), vec![6.0]);
    let (kept, _) = xlafn::clip_by_global_norm(&[a, b], 20.0).unwrap();
    assert_eq!(kept[1].to_vec::<f64>().unwrap(), vec![12.0]);

    // A mixed-precision model's gradients, clipped together: the squares
    // sum in f32 (bf16 would round 3^2 + 4^2 + 12^2 + 0.01^2 * 256), the
    // norm is f32, each gradient stays in its dtype.
    let small = vec![0.01f32; 256];
    let half = Tensor::from_vec(vec![3.0f32, 4.0], &[2])
        .unwrap()
        .cast(DType::BF16)
        .unwrap();
    let full = Tensor::from_vec([vec![12.0f32], small.clone()].concat(), &[257]).unwrap();
    let (clipped, norm) = xlafn::clip_by_global_norm(&[half, full], 1.0).unwrap();
    let want_norm = (169.0f64 + 256.0 * 0.01f32 as f64 * 0.01f32 as f64).sqrt();
    assert_eq!(norm.dtype(), DType::F32);
    assert!((norm.item::<f32>().unwrap() as f64 - want_norm).abs() < 1e-5);
    assert_eq!(
        (clipped[0].dtype(), clipped[1].dtype()),
        (DType::BF16, DType::F32)
    );
    let h = clipped[0]
        .cast(DType::F32)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!((h[0] as f64 - 3.0 / want_norm).abs() < 2e-3, "{h:?}");
    let f = clipped[1].to_vec::<f32>().unwrap();
    assert!((f[0] as f64 - 12.0 / want_norm).abs() < 1e-6, "{f:?}");

    let e = xlafn::clip_by_global_norm(&[Tensor::from_vec(vec![1i32], &[1]).unwrap()], 1.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("must be floats"), "{e}");
}

/// The GPT recipe's clipping: one global norm over every gradient of the
/// step, whichever group (or optimizer) applies it.
#[test]
fn global_norm_clipping_spans_every_group_and_two_optimizers() {
    let (lr, wd, max_norm) = (0.1, 0.5, 1.0);
    let make_vars = || {
        (
            var("dense.kernel", &[1.0, 2.0, -1.0, 0.5], &[2, 2]),
            var("dense.bias", &[0.5, -0.5], &[2]),
        )
    };
    let gk = Tensor::from_vec(vec![3.0, 0.0, 0.0, 4.0], &[2, 2]).unwrap();
    let gb = Tensor::from_vec(vec![0.0, 12.0], &[2]).unwrap();
    // Global norm 13: every gradient scaled by 1/13 (per group: kernel 5,
    // bias 12, which would clip differently).
    let scale = max_norm / 13.0;
    let want = |start: &[f64], g: &[f64], decay: f64| -> Vec<f64> {
        start
            .iter()
            .zip(g)
            .map(|(&x, &g)| {
                let x = x - lr * decay * x;
                x - lr * g * scale
            })
            .collect()
    };
    let want_k = want(&[1.0, 2.0, -1.0, 0.5], &[3.0, 0.0, 0.0, 4.0], wd);
    let want_b = want(&[0.5, -0.5], &[0.0, 12.0], 0.0);

    // One optimizer, two groups.
    let (k, b) = make_vars();
    let opt = Sgd::new(lr)
        .weight_decay(wd)
        .exclude_from_weight_decay(|v: &Variable| v.dims().len() < 2)
        .clip(GradientClip::GlobalNorm(max_norm));
    opt.apply_gradients(&[(Some(gk.clone()), &k), (Some(gb.clone()), &b)])
        .unwrap();
    close(&read(&k), &want_k, "groups: kernel");
    close(&read(&b), &want_b, "groups: bias");

    // Two optimizers: clip once, then each applies its share.
    let (k, b) = make_vars();
    let decayed = Sgd::new(lr).weight_decay(wd);
    let plain = Sgd::new(lr);
    let (clipped, norm) = xlafn::clip_by_global_norm(&[gk, gb], max_norm).unwrap();
    assert_eq!(norm.item::<f64>().unwrap(), 13.0);
    decayed
        .apply_gradients(&[(Some(clipped[0].clone()), &k)])
        .unwrap();
    plain
        .apply_gradients(&[(Some(clipped[1].clone()), &b)])
        .unwrap();
    close(&read(&k), &want_k, "two optimizers: kernel");
    close(&read(&b), &want_b, "two optimizers: bias");
}

/// A tiny model with a kernel, a bias and a norm scale, named by module
/// path; the loss is `mean((x @ kernel * gamma + bias - y)^2)`.
struct Model {
    kernel: Variable,
    bias: Variable,
    gamma: Variable,
}

impl Model {
    fn new() -> Model {
        Model {
            kernel: var(
                "dense.kernel",
                &[0.5, -0.25, 0.75, 1.0, -0.5, 0.25],
                &[3, 2],
            ),
            bias: var("dense.bias", &[0.1, -0.1], &[2]),
            gamma: var("ln.gamma", &[1.0, 1.0], &[2]),
        }
    }

    fn vars(&self) -> Vec<&Variable> {
        vec![&self.kernel, &self.bias, &self.gamma]
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        x.matmul(&self.kernel.try_read()?)?
            .mul(&self.gamma.try_read()?)?
            .add(&self.bias.try_read()?)?
            .sub(y)?
            .square()?
            .reduce_mean(&[], false)
    }
}

fn batch(k: usize) -> (Tensor, Tensor) {
    let x: Vec<f64> = (0..12)
        .map(|i| ((i * 7 + k * 3) % 11) as f64 / 5.0 - 1.0)
        .collect();
    let y: Vec<f64> = (0..8)
        .map(|i| ((i * 5 + k) % 7) as f64 / 3.0 - 1.0)
        .collect();
    (
        Tensor::from_vec(x, &[4, 3]).unwrap(),
        Tensor::from_vec(y, &[4, 2]).unwrap(),
    )
}

/// The GPT recipe as a compiled step with no `build` first: AdamW with
/// decay off the vectors, every gradient clipped to a global norm of 0.5.
/// Traced once over five calls, and equal to the same steps run eagerly.
#[test]
fn a_compiled_minimize_step_needs_no_build_and_traces_once() {
    let recipe = || {
        AdamW::new(0.05)
            .weight_decay(0.1)
            .exclude_from_weight_decay(|v: &Variable| v.dims().len() < 2)
            .clip(GradientClip::GlobalNorm(0.5))
    };
    let eager_model = Model::new();
    let eager_opt = recipe();
    let mut eager_losses = Vec::new();
    for k in 0..5 {
        let (x, y) = batch(k);
        let loss = eager_opt
            .minimize(&eager_model.vars(), || eager_model.loss(&x, &y))
            .unwrap();
        eager_losses.push(loss.item::<f64>().unwrap());
    }

    let model = Arc::new(Model::new());
    let opt = Arc::new(recipe());
    let (m, o) = (model.clone(), opt.clone());
    let step = function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
        o.minimize(&m.vars(), || m.loss(&x, &y))
    });
    let mut losses = Vec::new();
    for k in 0..5 {
        let (x, y) = batch(k);
        losses.push(step.call((x, y)).unwrap().item::<f64>().unwrap());
    }
    assert_eq!(step.tracing_count(), 1);
    assert_eq!(step.compile_count(), 1);
    assert_eq!(opt.iterations().unwrap(), 5);
    close(&losses, &eager_losses, "losses");
    for (c, e) in model.vars().into_iter().zip(eager_model.vars()) {
        close(&read(c), &read(e), &c.name());
    }
    assert!(losses[4] < losses[0], "{losses:?}");
    // The decay skipped the vectors: with zero gradients they would not
    // move, so check by a step of pure decay on a fresh pair.
    let (w, b) = (var("w", &[1.0; 4], &[2, 2]), var("b", &[1.0; 2], &[2]));
    let decay_only = recipe();
    decay_only
        .apply_gradients(&[
            (Some(Tensor::zeros(&[2, 2], DType::F64)), &w),
            (Some(Tensor::zeros(&[2], DType::F64)), &b),
        ])
        .unwrap();
    close(&read(&b), &[1.0, 1.0], "the bias did not decay");
    close(&read(&w), &[1.0 - 0.05 * 0.1; 4], "the kernel decayed");
}

/// Every optimizer's slots come to life inside the first trace: one trace,
/// values equal to the eager path.
#[test]
fn every_optimizer_traces_once_without_build() {
    fn check<O: Optimizer + 'static>(what: &str, make: impl Fn() -> O) {
        let eager_model = Model::new();
        let eager = make();
        for k in 0..3 {
            let (x, y) = batch(k);
            eager
                .minimize(&eager_model.vars(), || eager_model.loss(&x, &y))
                .unwrap();
        }
        let model = Arc::new(Model::new());
        let (m, o) = (model.clone(), Arc::new(make()));
        let step = function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            o.minimize(&m.vars(), || m.loss(&x, &y))
        });
        for k in 0..3 {
            let (x, y) = batch(k);
            step.call((x, y)).unwrap();
        }
        assert_eq!(step.tracing_count(), 1, "{what}");
        for (c, e) in model.vars().into_iter().zip(eager_model.vars()) {
            close(&read(c), &read(e), &format!("{what}: {}", c.name()));
        }
    }
    check("sgd momentum", || {
        Sgd::with_momentum(0.1, 0.9).nesterov(true)
    });
    check("adam amsgrad", || Adam::new(0.05).amsgrad(true));
    check("rmsprop", || {
        RmsProp::new(0.01).momentum(0.5).centered(true)
    });
    check("adagrad", || Adagrad::new(0.1));
}

#[test]
fn bad_group_settings_are_clear_errors() {
    let w = var("w", &[1.0], &[1]);
    let g = || Some(Tensor::from_vec(vec![1.0], &[1]).unwrap());
    let negative = Sgd::new(0.1).param_group(ParamGroup::named(&["w"]).learning_rate_scale(-1.0));
    let e = negative
        .apply_gradients(&[(g(), &w)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("'w'") && e.contains("multiplier"), "{e}");
    let nan = Sgd::new(0.1).param_group(ParamGroup::named(&["w"]).weight_decay(f64::NAN));
    let e = nan.apply_gradients(&[(g(), &w)]).unwrap_err().to_string();
    assert!(e.contains("weight decay"), "{e}");
    assert_eq!(read(&w), vec![1.0], "a refused step changes nothing");
    // A group's description shows in Debug.
    let text = format!("{:?}", ParamGroup::named(&["bias"]).weight_decay(0.0));
    assert!(
        text.contains("bias") && text.contains("weight_decay: Some(0.0)"),
        "{text}"
    );
}
