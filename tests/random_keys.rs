//! Random numbers as values: keys, split, fold_in, draws and
//! dropout; a compiled step that takes a new key each call traces once;
//! the same key gives the same numbers eagerly and compiled; statistics of
//! the draws; TensorFlow's stateful Generator.

use xlafn::prelude::*;
use xlafn::random;

#[test]
fn same_key_same_numbers_eagerly_and_compiled() {
    let key = random::key(42).unwrap();
    let eager = random::uniform(&key, &[64], DType::F32, -1.0, 1.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let f = function(|key: Tensor| random::uniform(&key, &[64], DType::F32, -1.0, 1.0));
    let compiled = f.call((&key,)).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(eager, compiled);
    assert!(eager.iter().all(|v| (-1.0..1.0).contains(v)));
    let again = random::uniform(&random::key(42).unwrap(), &[64], DType::F32, -1.0, 1.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_eq!(eager, again);
}

#[test]
fn a_step_with_a_new_key_each_call_traces_once() {
    let step = function(|x: Tensor, key: Tensor| random::dropout(&x, 0.5, &key));
    let x = Tensor::fill(&[256], 1.0, DType::F32).unwrap();
    let base = random::key(7).unwrap();
    let mut masks = Vec::new();
    for i in 0..5 {
        let key = random::fold_in(&base, &Tensor::scalar(i)).unwrap();
        masks.push(step.call((&x, &key)).unwrap().to_vec::<f32>().unwrap());
    }
    assert_eq!(step.tracing_count(), 1);
    for m in &masks {
        assert!(m.iter().all(|&v| v == 0.0 || v == 2.0));
    }
    assert!(
        masks.windows(2).all(|w| w[0] != w[1]),
        "every key gives another mask"
    );
}

#[test]
fn split_and_fold_in_give_distinct_reproducible_keys() {
    let key = random::key(1).unwrap();
    let keys = random::split(&key, 4).unwrap();
    assert_eq!(keys.dims(), vec![4, 2]);
    let rows: Vec<Vec<u64>> = (0..4)
        .map(|i| random::nth(&keys, i).unwrap().to_vec::<u64>().unwrap())
        .collect();
    for i in 0..4 {
        for j in i + 1..4 {
            assert_ne!(rows[i], rows[j]);
        }
        assert_ne!(rows[i], key.to_vec::<u64>().unwrap());
    }
    assert_eq!(
        random::split(&key, 4).unwrap().to_vec::<u64>().unwrap(),
        keys.to_vec::<u64>().unwrap()
    );
    let a = random::fold_in(&key, &Tensor::scalar(3i32)).unwrap();
    let b = random::fold_in(&key, &Tensor::scalar(4i32)).unwrap();
    let a2 = random::fold_in(&key, &Tensor::scalar(3i32)).unwrap();
    assert_ne!(a.to_vec::<u64>().unwrap(), b.to_vec::<u64>().unwrap());
    assert_eq!(a.to_vec::<u64>().unwrap(), a2.to_vec::<u64>().unwrap());
    let e = random::split(&Tensor::vector(&[1u64, 2, 3]).unwrap(), 2).unwrap_err();
    assert!(e.to_string().contains("u64(2,)"), "{e}");
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let m = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
    (m, var.sqrt())
}

#[test]
fn draws_have_the_right_statistics() {
    let key = random::key(2024).unwrap();
    let keys = random::split(&key, 4).unwrap();
    let k = |i| random::nth(&keys, i).unwrap();
    let n = 200_000;
    let u = random::uniform(&k(0), &[n], DType::F64, 0.0, 1.0)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let (m, s) = mean_std(&u);
    assert!(
        (m - 0.5).abs() < 0.005 && (s - (1.0f64 / 12.0).sqrt()).abs() < 0.005,
        "{m} {s}"
    );
    let z = random::normal(&k(1), &[n], DType::F32, 3.0, 2.0)
        .unwrap()
        .cast(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let (m, s) = mean_std(&z);
    assert!((m - 3.0).abs() < 0.02 && (s - 2.0).abs() < 0.02, "{m} {s}");
    let b = random::bernoulli(&k(2), 0.3, &[n])
        .unwrap()
        .to_vec::<bool>()
        .unwrap();
    let p = b.iter().filter(|&&x| x).count() as f64 / n as f64;
    assert!((p - 0.3).abs() < 0.005, "{p}");
    // categorical: probabilities softmax([0, ln 2, ln 3]) = 1/6, 2/6, 3/6.
    let logits = Tensor::from_vec(vec![0.0f32, 2f32.ln(), 3f32.ln()], &[1, 3]).unwrap();
    let draws = random::categorical(&k(3), &logits, 60_000).unwrap();
    assert_eq!(draws.dims(), vec![1, 60_000]);
    let draws = draws.to_vec::<i32>().unwrap();
    for (class, want) in [(0, 1.0 / 6.0), (1, 2.0 / 6.0), (2, 3.0 / 6.0)] {
        let f = draws.iter().filter(|&&d| d == class).count() as f64 / 60_000.0;
        assert!((f - want).abs() < 0.01, "class {class}: {f} vs {want}");
    }
}

#[test]
fn dropout_scales_keeps_and_differentiates() {
    let x = Tensor::from_vec(
        (0..10_000).map(|i| 1.0 + (i % 7) as f32).collect(),
        &[10_000],
    )
    .unwrap();
    let key = random::key(5).unwrap();
    let y = random::dropout(&x, 0.25, &key)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let xs = x.to_vec::<f32>().unwrap();
    let dropped = y.iter().filter(|&&v| v == 0.0).count() as f64 / 10_000.0;
    assert!((dropped - 0.25).abs() < 0.02, "{dropped}");
    for (a, b) in xs.iter().zip(&y) {
        assert!(*b == 0.0 || (b - a / 0.75).abs() < 1e-5);
    }
    let tape = GradientTape::new();
    tape.watch(&x);
    let y2 = random::dropout(&x, 0.25, &key).unwrap();
    let g = tape
        .gradient(&y2.reduce_sum(&[], false).unwrap(), &[Source::from(&x)])
        .unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (gi, yi) in g.iter().zip(&y) {
        let want = if *yi == 0.0 { 0.0 } else { 1.0 / 0.75 };
        assert!((gi - want).abs() < 1e-6);
    }
    assert!(random::dropout(&x, 1.0, &key).is_err());
}

#[test]
fn a_generator_advances_its_state_eagerly_and_compiled() {
    let g = random::Generator::from_seed(9).unwrap();
    let a = g
        .uniform(&[8], DType::F32, 0.0, 1.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let b = g
        .uniform(&[8], DType::F32, 0.0, 1.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert_ne!(a, b);
    let again = random::Generator::from_seed(9).unwrap();
    assert_eq!(
        again
            .uniform(&[8], DType::F32, 0.0, 1.0)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        a
    );
    // Compiled: the state is a variable the step updates.
    let f = function({
        let g = again.clone();
        move || g.normal(&[4], DType::F32, 0.0, 1.0)
    });
    let c1 = f.call(()).unwrap().to_vec::<f32>().unwrap();
    let c2 = f.call(()).unwrap().to_vec::<f32>().unwrap();
    assert_ne!(c1, c2);
    assert_eq!(f.tracing_count(), 1);
    // The same sequence eagerly from the same starting state. Uniform
    // bits are identical; normals agree to an ulp or so (XLA may evaluate
    // log and cos of the Box-Muller transform differently inside a larger
    // fused program).
    let eager = random::Generator::from_seed(9).unwrap();
    eager.uniform(&[8], DType::F32, 0.0, 1.0).unwrap();
    let e = eager
        .normal(&[4], DType::F32, 0.0, 1.0)
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    for (x, y) in e.iter().zip(&c1) {
        assert!((x - y).abs() <= 1e-6 * (1.0 + y.abs()), "{e:?} vs {c1:?}");
    }
}
