//! Resumable training: a run stopped after 5 steps, saved with
//! `checkpoint::save_training` and restored into a fresh model and a fresh
//! optimizer, takes the same 5 further steps as the uninterrupted run, bit
//! for bit (losses and final weights), for SGD with momentum (with a
//! schedule too), Adam, RMSprop and Adagrad, all in a compiled training step.
//! Restoring a file without a slot the optimizer uses, with one of the
//! wrong shape, or with names nothing uses, is an error naming them.

#[path = "common/scratch.rs"]
mod scratch;

use std::path::Path;
use std::sync::Arc;
use xlafn::checkpoint;
use xlafn::module::Module;
use xlafn::optimizers::ExponentialDecay;
use xlafn::prelude::*;

#[derive(Module)]
struct Dense {
    w: Variable,
    b: Variable,
}

#[derive(Module)]
struct Mlp {
    hidden: Dense,
    out: Dense,
}

fn dense(inputs: i64, outputs: i64, seed: u64) -> Dense {
    Dense {
        w: Variable::new(
            Tensor::random_normal(&[inputs, outputs], seed, DType::F32)
                .unwrap()
                .mul_scalar(0.5)
                .unwrap(),
        ),
        b: Variable::new(Tensor::random_normal(&[outputs], seed + 1, DType::F32).unwrap()),
    }
}

/// A 3-8-2 MLP; different seeds give different starting weights.
fn mlp(seed: u64) -> Mlp {
    Mlp {
        hidden: dense(3, 8, seed),
        out: dense(8, 2, seed + 2),
    }
}

/// Batch `k` of a fixed regression problem (a different batch each step,
/// so a resumed run must also be at the right step to match).
fn batch(k: u64) -> (Tensor, Tensor) {
    let x = Tensor::random_normal(&[16, 3], 1000 + k, DType::F32).unwrap();
    let y = x
        .matmul(&Tensor::from_vec(vec![1.0f32, -2.0, 0.5, 0.25, 1.5, -1.0], &[3, 2]).unwrap())
        .unwrap()
        .sin()
        .unwrap();
    (x, y)
}

type Step = Function<(Tensor, Tensor), Tensor>;

/// A compiled training step: mean squared error, one optimizer update.
fn train_step<O: Optimizer + 'static>(model: &Arc<Mlp>, opt: &Arc<O>) -> Step {
    let (model, opt) = (model.clone(), opt.clone());
    function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
        let vars = model.trainable_variables();
        opt.minimize(&vars, || {
            let h = x
                .matmul(&model.hidden.w.read())?
                .add(&model.hidden.b.read())?
                .tanh()?;
            let p = h.matmul(&model.out.w.read())?.add(&model.out.b.read())?;
            p.sub(&y)?.square()?.reduce_mean(&[], false)
        })
    })
}

fn steps(step: &Step, range: std::ops::Range<u64>) -> Vec<u32> {
    range
        .map(|k| {
            let (x, y) = batch(k);
            step.call((x, y)).unwrap().item::<f32>().unwrap().to_bits()
        })
        .collect()
}

fn weights(model: &Mlp) -> Vec<Vec<u32>> {
    model
        .variables()
        .iter()
        .map(|v| {
            v.read()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

/// Trains 10 steps straight, and 5 + save + restore into fresh objects +
/// 5; the losses and final weights must be the same bits.
fn resumes_exactly<O: Optimizer + 'static>(tag: &str, make: impl Fn() -> O) {
    let model = Arc::new(mlp(1));
    let opt = Arc::new(make());
    let straight = steps(&train_step(&model, &opt), 0..10);

    let dir = scratch::scratch_dir(tag);
    let path = dir.join("run.safetensors");
    let first = {
        let (model, opt) = (Arc::new(mlp(1)), Arc::new(make()));
        let losses = steps(&train_step(&model, &opt), 0..5);
        checkpoint::save_training(&*model, &*opt, &path).unwrap();
        losses
    };
    // Fresh objects, started elsewhere: everything comes from the file.
    let (fresh, opt2) = (Arc::new(mlp(77)), Arc::new(make()));
    checkpoint::restore_training(&*fresh, &*opt2, &path).unwrap();
    let second = steps(&train_step(&fresh, &opt2), 5..10);

    let resumed: Vec<u32> = first.into_iter().chain(second).collect();
    assert_eq!(
        resumed,
        straight,
        "{tag}: resumed losses {:?}, uninterrupted {:?}",
        resumed
            .iter()
            .map(|b| f32::from_bits(*b))
            .collect::<Vec<_>>(),
        straight
            .iter()
            .map(|b| f32::from_bits(*b))
            .collect::<Vec<_>>()
    );
    assert_eq!(weights(&fresh), weights(&model), "{tag}: final weights");
    // The losses moved, so the test says something.
    assert_ne!(straight[0], straight[9]);
    // And the optimizer's state matters: restoring the model alone (a
    // fresh optimizer, its slots and step count at their start) drifts.
    let (model_only, opt3) = (Arc::new(mlp(77)), Arc::new(make()));
    checkpoint::restore_subset(&*model_only, &path).unwrap();
    let drifted = steps(&train_step(&model_only, &opt3), 5..10);
    assert_ne!(
        drifted,
        straight[5..],
        "{tag}: the model alone resumed exactly"
    );
}

#[test]
fn sgd_with_momentum_resumes_exactly() {
    resumes_exactly("resume-sgd", || Sgd::with_momentum(0.05, 0.9));
}

#[test]
fn sgd_with_a_schedule_resumes_at_its_step() {
    // The rate depends on the restored step count.
    resumes_exactly("resume-sgd-schedule", || {
        Sgd::with_momentum(ExponentialDecay::new(0.1, 2, 0.5).unwrap(), 0.5).nesterov(true)
    });
}

#[test]
fn adam_resumes_exactly() {
    // Adam's bias correction reads the step count.
    resumes_exactly("resume-adam", || Adam::new(0.02).amsgrad(true));
}

#[test]
fn rmsprop_resumes_exactly() {
    resumes_exactly("resume-rmsprop", || {
        RmsProp::new(0.01).momentum(0.5).centered(true)
    });
}

#[test]
fn adagrad_resumes_exactly() {
    // Slots that start at a nonzero value.
    resumes_exactly("resume-adagrad", || Adagrad::new(0.05).weight_decay(0.01));
}

#[test]
fn state_is_named_by_model_path_and_saving_creates_nothing() {
    let model = mlp(1);
    let opt = Adam::new(0.1);
    let vars = model.named_variables();
    let names: Vec<String> = opt
        .state_variables(&vars[..1], false)
        .unwrap()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["iterations", "m.hidden.w", "v.hidden.w"]);
    // Nothing was built: the step count is still not kept.
    assert_eq!(opt.iterations().unwrap(), 0);
    let dir = scratch::scratch_dir("resume-names");
    let path = dir.join("run.safetensors");
    checkpoint::save_training(&model, &opt, &path).unwrap();
    let file = checkpoint::read(&path).unwrap();
    assert!(file.contains_key("optimizer.iterations"));
    assert!(file.contains_key("optimizer.m.out.b"));
    assert!(file.contains_key("optimizer.v.hidden.w"));
    assert!(file.contains_key("hidden.w"));
    assert_eq!(file.len(), 4 + 1 + 2 * 4);
}

fn restore_error<O: Optimizer>(path: &Path, opt: &O) -> String {
    checkpoint::restore_training(&mlp(5), opt, path)
        .unwrap_err()
        .to_string()
}

#[test]
fn a_missing_or_misshapen_slot_is_a_clear_error() {
    let dir = scratch::scratch_dir("resume-errors");
    let plain = dir.join("plain.safetensors");
    let model = mlp(1);
    checkpoint::save_training(&model, &Sgd::new(0.1), &plain).unwrap();

    // Plain SGD saved no momentum: restoring into SGD with momentum names
    // every missing slot.
    let e = restore_error(&plain, &Sgd::with_momentum(0.1, 0.9));
    assert!(e.contains("'optimizer.momentum.hidden.w'"), "{e}");
    assert!(e.contains("'optimizer.momentum.out.b'"), "{e}");

    // A file with slots the optimizer does not use: their names.
    let adam = dir.join("adam.safetensors");
    checkpoint::save_training(&model, &Adam::new(0.1), &adam).unwrap();
    let e = restore_error(&adam, &Sgd::new(0.1));
    assert!(e.contains("'optimizer.m.hidden.w'"), "{e}");

    // A slot of the wrong shape: its name and both shapes; nothing is
    // assigned.
    let bad = dir.join("bad.safetensors");
    let mut named = model.named_variables();
    named.push((
        "optimizer.iterations".into(),
        Variable::new(Tensor::scalar(5i64)),
    ));
    for (path, v) in model.named_variables() {
        let dims: Vec<i64> = if path == "out.w" {
            vec![2, 8]
        } else {
            v.dims().to_vec()
        };
        named.push((
            format!("optimizer.momentum.{path}"),
            Variable::new(Tensor::zeros(&dims, DType::F32)),
        ));
    }
    checkpoint::save_named(&named, &bad).unwrap();
    let fresh = mlp(5);
    let before = weights(&fresh);
    let opt = Sgd::with_momentum(0.1, 0.9);
    let e = checkpoint::restore_training(&fresh, &opt, &bad)
        .unwrap_err()
        .to_string();
    assert!(e.contains("'optimizer.momentum.out.w'"), "{e}");
    assert!(e.contains("[8, 2]") && e.contains("[2, 8]"), "{e}");
    assert_eq!(weights(&fresh), before);
    assert_eq!(opt.iterations().unwrap(), 0);

    // The same file with the right shape restores, step count included.
    named.retain(|(n, _)| n != "optimizer.momentum.out.w");
    named.push((
        "optimizer.momentum.out.w".into(),
        Variable::new(Tensor::zeros(&[8, 2], DType::F32)),
    ));
    checkpoint::save_named(&named, &bad).unwrap();
    checkpoint::restore_training(&fresh, &opt, &bad).unwrap();
    assert_eq!(opt.iterations().unwrap(), 5);
    assert_eq!(weights(&fresh), weights(&model));
}

/// Random generators restore too. A model holding a
/// `Generator` saves its state with the weights; restored into a fresh
/// model, it draws what the uninterrupted one draws next, eagerly and
/// inside a compiled step (where each draw is a variable update).
#[test]
fn a_random_generator_restores_with_the_model() {
    #[derive(Module)]
    struct Noisy {
        scale: Variable,
        rng: xlafn::random::Generator,
    }
    let make = |seed| Noisy {
        scale: Variable::new(Tensor::scalar(2f32)),
        rng: xlafn::random::Generator::from_seed(seed).unwrap(),
    };
    let names: Vec<String> = make(0)
        .named_variables()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["scale", "rng.state"]);
    assert_eq!(
        make(0).trainable_variables().len(),
        1,
        "the state is not trained"
    );

    let original = Arc::new(make(1));
    let draw = |m: &Arc<Noisy>| {
        let m = m.clone();
        function(move |x: Tensor| -> Result<Tensor> {
            x.add(
                &m.rng
                    .normal(&[3], DType::F32, 0.0, 1.0)?
                    .mul(&m.scale.read())?,
            )
        })
    };
    let x = Tensor::vector(&[0f32, 0.0, 0.0]).unwrap();
    let step = draw(&original);
    step.call((&x,)).unwrap();
    original.rng.uniform(&[2], DType::F32, 0.0, 1.0).unwrap();
    let dir = scratch::scratch_dir("rng-restore");
    let path = dir.join("noisy.safetensors");
    checkpoint::save(&*original, &path).unwrap();
    let expected: Vec<Vec<f32>> = (0..3)
        .map(|_| step.call((&x,)).unwrap().to_vec::<f32>().unwrap())
        .collect();

    let restored = Arc::new(make(99));
    checkpoint::restore(&*restored, &path).unwrap();
    let step = draw(&restored);
    let got: Vec<Vec<f32>> = (0..3)
        .map(|_| step.call((&x,)).unwrap().to_vec::<f32>().unwrap())
        .collect();
    assert_eq!(got, expected);
    assert_ne!(expected[0], expected[1], "each call draws anew");
}

#[test]
fn restoring_another_optimizers_checkpoint_names_both_kinds() {
    let dir = scratch::scratch_dir("resume-kinds");
    let model = mlp(1);
    let plain = dir.join("sgd.safetensors");
    checkpoint::save_training(&model, &Sgd::new(0.1), &plain).unwrap();
    let e = restore_error(&plain, &Adam::new(0.1));
    assert!(
        e.contains("holds the state of an optimizer without slots (SGD without momentum)"),
        "{e}"
    );
    assert!(e.contains("this optimizer is Adam (slots 'm', 'v')"), "{e}");
    assert!(e.contains("judged by its slot names"), "{e}");
    let momentum = dir.join("momentum.safetensors");
    checkpoint::save_training(&model, &Sgd::with_momentum(0.1, 0.9), &momentum).unwrap();
    let e = restore_error(&momentum, &Adam::new(0.1));
    assert!(e.contains("SGD with momentum (slots 'momentum')"), "{e}");
}
