//! sort, sort_many, argsort and top_k against Rust's own
//! stable sort with a total order (NaNs last ascending, first descending;
//! -0.0 == 0.0), eager and traced; gradients of sort and top_k against
//! finite differences; random::permutation and random::truncated_normal;
//! an export of a function that sorts.

#[path = "common/scratch.rs"]
mod scratch;

use std::cmp::Ordering;
use xlafn::ops::sort::sort_many;
#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::prelude::*;
use xlafn::random;

/// Small integers (many duplicates), with NaNs and signed zeros in some
/// places when `special`.
fn data(n: usize, seed: u64, special: bool) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|i| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = ((s >> 33) % 9) as f64 - 4.0;
            match (special, i % 11) {
                (true, 3) => f64::NAN,
                (true, 7) => -0.0,
                _ => v,
            }
        })
        .collect()
}

/// Distinct values in (-2, 2) (for gradients: a small nudge keeps the
/// permutation).
fn distinct(n: usize, seed: u64) -> Vec<f64> {
    let mut v: Vec<f64> = (0..n).map(|i| -1.9 + 3.8 * i as f64 / n as f64).collect();
    let mut s = seed | 1;
    for i in (1..n).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (s >> 33) as usize % (i + 1));
    }
    v
}

fn total(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap(),
    }
}

/// For each flat output position, the flat input position it comes from
/// under a stable sort along `axis`.
fn reference(x: &[f64], dims: &[i64], axis: usize, descending: bool) -> Vec<usize> {
    let n = dims[axis] as usize;
    let inner: usize = dims[axis + 1..].iter().product::<i64>() as usize;
    let outer: usize = dims[..axis].iter().product::<i64>() as usize;
    let mut perm = vec![0; x.len()];
    for o in 0..outer {
        for i in 0..inner {
            let at = |k: usize| o * n * inner + k * inner + i;
            let mut line: Vec<usize> = (0..n).map(at).collect();
            line.sort_by(|&a, &b| {
                if descending {
                    total(x[b], x[a])
                } else {
                    total(x[a], x[b])
                }
            });
            for (k, src) in line.into_iter().enumerate() {
                perm[at(k)] = src;
            }
        }
    }
    perm
}

/// The position along `axis` of a flat index.
fn along(flat: usize, dims: &[i64], axis: usize) -> i32 {
    let inner: usize = dims[axis + 1..].iter().product::<i64>() as usize;
    ((flat / inner) % dims[axis] as usize) as i32
}

fn same(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x.to_bits() == y.to_bits())
}

/// Equal as sort keys: NaN to NaN, and -0.0 to 0.0.
fn same_keys(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| (x.is_nan() && y.is_nan()) || x == y)
}

fn t(data: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(data.to_vec(), dims).unwrap()
}

fn f64s(x: &Tensor) -> Vec<f64> {
    x.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// `f(x)` eagerly and inside `function`, which must agree; as f64.
fn both(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + Clone + 'static,
    x: &Tensor,
) -> Vec<f64> {
    let eager = f64s(&f(x).unwrap());
    let g = f.clone();
    let traced = f64s(&function(move |x: Tensor| g(&x)).call((x,)).unwrap());
    assert!(same(&eager, &traced), "eager {eager:?} traced {traced:?}");
    eager
}

const SHAPES: &[&[i64]] = &[&[9], &[4, 6], &[3, 5, 4]];

#[test]
fn sort_matches_a_stable_rust_sort() {
    for (s, dims) in SHAPES.iter().enumerate() {
        let n: i64 = dims.iter().product();
        for dtype in [DType::F32, DType::F64, DType::I32] {
            let special = dtype.is_float();
            let x = data(n as usize, s as u64 + 1, special);
            let xt = t(&x, dims).cast(dtype).unwrap();
            for axis in 0..dims.len() {
                for descending in [false, true] {
                    // Negative axes count from the end.
                    let a = if axis == 0 {
                        axis as i64
                    } else {
                        axis as i64 - dims.len() as i64
                    };
                    let got = both(move |x| x.sort(a, descending), &xt);
                    let perm = reference(&x, dims, axis, descending);
                    let want: Vec<f64> = perm.iter().map(|&p| x[p]).collect();
                    assert!(
                        same(&got, &want),
                        "{dtype} {dims:?} axis {axis} desc {descending}: {got:?} vs {want:?}"
                    );
                }
            }
        }
    }
}

#[test]
fn nans_and_signed_zeros() {
    let x = t(
        &[
            3.0,
            f64::NAN,
            -1.0,
            0.0,
            -0.0,
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ],
        &[8],
    );
    let up = f64s(&x.sort(0, false).unwrap());
    let want = [
        f64::NEG_INFINITY,
        -1.0,
        0.0,
        -0.0,
        3.0,
        f64::INFINITY,
        f64::NAN,
        f64::NAN,
    ];
    assert!(same(&up, &want), "{up:?}");
    let down = f64s(&x.sort(0, true).unwrap());
    let want = [
        f64::NAN,
        f64::NAN,
        f64::INFINITY,
        3.0,
        0.0,
        -0.0,
        -1.0,
        f64::NEG_INFINITY,
    ];
    assert!(same(&down, &want), "{down:?}");
    let idx = x.argsort(0, false, true).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(idx, vec![7, 2, 3, 4, 0, 6, 1, 5]);
    let (v, i) = x.cast(DType::F32).unwrap().top_k(3, true).unwrap();
    assert!(same(&f64s(&v), &[f64::NAN, f64::NAN, f64::INFINITY]));
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![1, 5, 6]);
}

#[test]
fn argsort_matches_a_stable_rust_argsort() {
    for (s, dims) in SHAPES.iter().enumerate() {
        let n: i64 = dims.iter().product();
        for dtype in [DType::F32, DType::I32] {
            let x = data(n as usize, s as u64 + 10, dtype.is_float());
            let xt = t(&x, dims).cast(dtype).unwrap();
            for axis in 0..dims.len() {
                for descending in [false, true] {
                    let a = axis as i64;
                    let got = both(move |x| x.argsort(a, descending, true), &xt);
                    let want: Vec<f64> = reference(&x, dims, axis, descending)
                        .iter()
                        .map(|&p| along(p, dims, axis) as f64)
                        .collect();
                    assert_eq!(got, want, "{dtype} {dims:?} axis {axis} desc {descending}");
                    // Unstable: some order of equal keys (-0.0 and 0.0 are
                    // equal, so either may come first: the GPU's sort swaps
                    // them where the CPU's keeps their order).
                    let idx = xt.argsort(a, descending, false).unwrap();
                    assert_eq!(idx.dtype(), DType::I32);
                    let sorted = f64s(&xt.take_along_axis(&idx, a).unwrap());
                    let want: Vec<f64> = reference(&x, dims, axis, descending)
                        .iter()
                        .map(|&p| x[p])
                        .collect();
                    assert!(same_keys(&sorted, &want), "{sorted:?} vs {want:?}");
                }
            }
        }
    }
}

#[test]
fn sort_many_carries_values_along() {
    let dims = [5, 8];
    let keys = data(40, 3, false);
    let vals = distinct(40, 4);
    let kt = t(&keys, &dims).cast(DType::I32).unwrap();
    let vt = t(&vals, &dims);
    let tags: Vec<i32> = (0..40).collect();
    let tt = Tensor::from_vec(tags.clone(), &dims).unwrap();
    for axis in [0usize, 1] {
        for descending in [false, true] {
            let a = axis as i64;
            let out = sort_many(&[&kt, &vt, &tt], a, descending, true).unwrap();
            assert_eq!(out.len(), 3);
            assert_eq!(out[0].dtype(), DType::I32);
            let perm = reference(&keys, &dims, axis, descending);
            let pick = |v: &[f64]| perm.iter().map(|&p| v[p]).collect::<Vec<f64>>();
            assert_eq!(f64s(&out[0]), pick(&keys));
            assert_eq!(f64s(&out[1]), pick(&vals));
            assert_eq!(
                out[2].to_vec::<i32>().unwrap(),
                perm.iter().map(|&p| p as i32).collect::<Vec<_>>()
            );
            // Traced, carrying the values: the same.
            let k2 = kt.clone();
            let traced = function(move |v: Tensor| -> Result<Tensor> {
                Ok(sort_many(&[&k2, &v], a, descending, true)?.remove(1))
            })
            .call((&vt,))
            .unwrap();
            assert_eq!(f64s(&traced), pick(&vals));
        }
    }
    // Operands of different shapes are refused.
    assert!(sort_many(&[&kt, &t(&vals[..8], &[8])], 0, false, true).is_err());
    assert!(kt.sort(2, false).is_err());
}

#[test]
fn top_k_matches_rust() {
    let dims = [3, 10];
    let x = data(30, 5, false);
    for dtype in [DType::F32, DType::I32] {
        let xt = t(&x, &dims).cast(dtype).unwrap();
        for k in [0, 1, 4, 10] {
            let values = both(move |x| Ok(x.top_k(k, true)?.0), &xt);
            let indices = both(move |x| Ok(x.top_k(k, true)?.1), &xt);
            let perm = reference(&x, &dims, 1, true);
            let (mut wv, mut wi) = (Vec::new(), Vec::new());
            for r in 0..3 {
                for j in 0..k as usize {
                    let p = perm[r * 10 + j];
                    wv.push(x[p]);
                    wi.push(along(p, &dims, 1) as f64);
                }
            }
            assert_eq!(values, wv, "{dtype} k {k}");
            assert_eq!(indices, wi, "{dtype} k {k}");
        }
        assert!(xt.top_k(11, true).is_err());
        assert!(xt.top_k(-1, true).is_err());
    }
    let (v, i) = t(&x, &dims).top_k(2, false).unwrap();
    assert_eq!(v.dims(), vec![3, 2]);
    assert_eq!(i.dtype(), DType::I32);
}

/// Central differences of `sum(f(x) * r)` against the tape's gradient.
fn check_gradient(f: impl Fn(&Tensor) -> Result<Tensor>, x: &[f64], dims: &[i64], what: &str) {
    gradcheck::check_gradient(&f, x, dims, 1e-6, what);
}

#[test]
fn gradients_match_finite_differences() {
    let x = distinct(24, 11);
    for axis in [0, 1, -1] {
        for descending in [false, true] {
            check_gradient(
                |x| x.sort(axis, descending),
                &x,
                &[4, 6],
                &format!("sort axis {axis} desc {descending}"),
            );
        }
    }
    check_gradient(|x| Ok(x.top_k(3, true)?.0), &x, &[4, 6], "top_k values");
    check_gradient(|x| Ok(x.top_k(2, true)?.0), &x, &[2, 3, 4], "top_k rank 3");
    // The carried operand's gradient, with integer keys (ties included).
    let keys = t(&data(24, 12, false), &[4, 6]).cast(DType::I32).unwrap();
    check_gradient(
        |v| Ok(sort_many(&[&keys, v], 1, false, true)?.remove(1)),
        &x,
        &[4, 6],
        "sort_many values",
    );
    // Both float operands at once: the keys and a function of them.
    check_gradient(
        |k| {
            let out = sort_many(&[k, &k.mul(k)?], 0, true, true)?;
            out[0].add(&out[1].mul_scalar(3.0)?)
        },
        &x,
        &[4, 6],
        "sort_many keys and values",
    );
}

#[test]
fn gradients_inside_functions_match_eager() {
    let x = t(&distinct(24, 13), &[4, 6]);
    let grad = |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let (v, _) = x.top_k(3, true)?;
        let l = v.mul(&v.sort(0, false)?)?.reduce_sum(&[], false)?;
        Ok(tape.gradient(&l, &[Source::from(x)])?[0].clone().unwrap())
    };
    let eager = grad(&x).unwrap().to_vec::<f64>().unwrap();
    let traced = function(move |x: Tensor| grad(&x))
        .call((&x,))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for (a, b) in eager.iter().zip(&traced) {
        assert!((a - b).abs() < 1e-12, "{eager:?} vs {traced:?}");
    }
}

#[test]
fn permutation_is_a_permutation() {
    let key = random::key(5).unwrap();
    let p = random::permutation(&key, 100).unwrap();
    assert_eq!(p.dtype(), DType::I32);
    let p = p.to_vec::<i32>().unwrap();
    let mut sorted = p.clone();
    sorted.sort();
    assert_eq!(sorted, (0..100).collect::<Vec<i32>>());
    assert_ne!(p, (0..100).collect::<Vec<i32>>());
    let again = random::permutation(&random::key(5).unwrap(), 100)
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    assert_eq!(p, again);
    let other = random::permutation(&random::key(6).unwrap(), 100)
        .unwrap()
        .to_vec::<i32>()
        .unwrap();
    assert_ne!(p, other);
    let f = function(|key: Tensor| random::permutation(&key, 100));
    assert_eq!(f.call((&key,)).unwrap().to_vec::<i32>().unwrap(), p);
    assert_eq!(random::permutation(&key, 0).unwrap().dims(), vec![0]);
    assert_eq!(
        random::permutation(&key, 1)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        vec![0]
    );
    assert!(random::permutation(&key, -1).is_err());
}

#[test]
fn truncated_normal_stays_within_two_stddev() {
    let key = random::key(8).unwrap();
    let (mean, stddev) = (1.5, 0.5);
    for dtype in [DType::F32, DType::F64] {
        let x = random::truncated_normal(&key, &[100_000], dtype, mean, stddev).unwrap();
        assert_eq!(x.dtype(), dtype);
        let v = f64s(&x);
        assert!(
            v.iter()
                .all(|&x| (mean - 2.0 * stddev..=mean + 2.0 * stddev).contains(&x))
        );
        let m = v.iter().sum::<f64>() / v.len() as f64;
        let sd = (v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / v.len() as f64).sqrt();
        assert!((m - mean).abs() < 0.01, "{dtype} mean {m}");
        // A standard normal truncated at +-2 has std 0.87962.
        assert!((sd / stddev - 0.87962).abs() < 0.01, "{dtype} std {sd}");
        // Near the bounds there are draws (the tails are not cut short).
        assert!(v.iter().any(|&x| x > mean + 1.9 * stddev));
        assert!(v.iter().any(|&x| x < mean - 1.9 * stddev));
    }
    let f = function(|key: Tensor| random::truncated_normal(&key, &[50], DType::F32, 0.0, 1.0));
    let eager = random::truncated_normal(&key, &[50], DType::F32, 0.0, 1.0).unwrap();
    // The same draws; the compiled erf_inv may round differently in the
    // last bit (XLA fuses it there).
    let compiled = f.call((&key,)).unwrap().to_vec::<f32>().unwrap();
    for (a, b) in compiled.iter().zip(eager.to_vec::<f32>().unwrap()) {
        assert!((a - b).abs() <= 1e-6 * (1.0 + b.abs()), "{a} vs {b}");
    }
    let half = random::truncated_normal(&key, &[16], DType::BF16, 0.0, 1.0).unwrap();
    assert_eq!(half.dtype(), DType::BF16);
    assert!(random::truncated_normal(&key, &[4], DType::I32, 0.0, 1.0).is_err());
}

#[test]
fn a_function_that_sorts_exports_and_loads() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|x: Tensor| -> Result<Tensor> {
            let (v, i) = x.top_k(2, true)?;
            let s = x.sort(0, false)?;
            let keys = x.argsort(0, true, true)?.cast(DType::F32)?;
            Tensor::concat(&[s, keys, v, i.cast(DType::F32)?], 0)
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None], DType::F32),))
        .unwrap();
    let scratch = scratch::scratch_dir("sort-export");
    let dir = scratch.join("sort-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![5]]]).unwrap();
    let graph = std::fs::read_to_string(dir.join("graph.json")).unwrap();
    assert!(graph.contains("\"sort\""), "{graph}");
    let loaded = xlafn::load(&dir).unwrap();
    // A listed shape and one compiled from the saved graph after loading.
    for n in [5usize, 7] {
        let x: Vec<f32> = data(n, 21, false).iter().map(|&v| v as f32).collect();
        let xt = Tensor::from_vec(x, &[n as i64]).unwrap();
        let want = f.call((&xt,)).unwrap().to_vec::<f32>().unwrap();
        let got = loaded.call(&[&xt]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, want, "n = {n}");
        assert_eq!(got.len(), 2 * n + 4);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn boolean_and_unsigned_keys() {
    let b = Tensor::from_vec(vec![true, false, true, false, false], &[5]).unwrap();
    let idx = b.argsort(0, false, true).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(idx, vec![1, 3, 4, 0, 2]);
    let sorted = b.sort(0, true).unwrap().to_vec::<bool>().unwrap();
    assert_eq!(sorted, vec![true, true, false, false, false]);
    let u = Tensor::from_vec(vec![u64::MAX, 3, 1 << 63, 0], &[4]).unwrap();
    let sorted = u.sort(0, false).unwrap().to_vec::<u64>().unwrap();
    assert_eq!(sorted, vec![0, 3, 1 << 63, u64::MAX]);
}
