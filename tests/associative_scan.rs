//! `control::associative_scan` (`jax.lax.associative_scan`) against
//! sequential loops on the host: sums, a non-commutative matrix product
//! (order matters), a linear recurrence over two tensors, reverse scans,
//! other axes, odd and even lengths, eager and compiled; gradients
//! against finite differences; clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use xlafn::control::associative_scan;
use xlafn::prelude::*;

fn add(a: &[Tensor], b: &[Tensor]) -> Result<Vec<Tensor>> {
    Ok(vec![a[0].add(&b[0])?])
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

#[test]
fn prefix_sums_of_every_length_match_a_loop() {
    for n in 0..=9usize {
        let v: Vec<f64> = (0..n).map(|i| (i as f64 * 1.7).sin()).collect();
        let x = Tensor::from_vec(v.clone(), &[n as i64]).unwrap();
        let want: Vec<f64> = v
            .iter()
            .scan(0.0, |s, x| {
                *s += x;
                Some(*s)
            })
            .collect();
        let got = f64s(&associative_scan(add, std::slice::from_ref(&x), false, 0).unwrap()[0]);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "n={n}: {got:?} vs {want:?}");
        }
        assert_eq!(got.len(), n);
        // Suffix sums.
        let want: Vec<f64> = (0..n).map(|i| v[i..].iter().sum()).collect();
        let got = f64s(&associative_scan(add, &[x], true, 0).unwrap()[0]);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "reverse n={n}: {got:?} vs {want:?}");
        }
    }
}

/// 2x2 matrices, row-major, multiplied on the host.
fn mat_mul(a: [f64; 4], b: [f64; 4]) -> [f64; 4] {
    [
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
    ]
}

#[test]
fn a_non_commutative_product_keeps_its_order_eager_and_compiled() {
    let n = 7;
    let mats: Vec<[f64; 4]> = (0..n)
        .map(|i| {
            let t = i as f64;
            [1.0 + 0.1 * t, 0.3 - 0.05 * t, -0.2 * t, 0.9 + 0.02 * t]
        })
        .collect();
    let x = Tensor::from_vec(mats.concat(), &[n as i64, 2, 2]).unwrap();
    let matmul = |a: &[Tensor], b: &[Tensor]| Ok(vec![a[0].matmul(&b[0])?]);
    let mut acc = [1.0, 0.0, 0.0, 1.0];
    let want: Vec<f64> = mats
        .iter()
        .flat_map(|m| {
            acc = mat_mul(acc, *m);
            acc
        })
        .collect();
    let f = function(move |x: Tensor| associative_scan(matmul, &[x], false, 0));
    for got in [
        associative_scan(matmul, std::slice::from_ref(&x), false, 0).unwrap(),
        f.call((&x,)).unwrap(),
    ] {
        let got = f64s(&got[0]);
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }
    // Reverse, as JAX's: the scan of the reversed sequence, so output i is
    // m[n-1] m[n-2] ... m[i].
    let mut acc = [1.0, 0.0, 0.0, 1.0];
    let mut want = vec![[0.0; 4]; n];
    for i in (0..n).rev() {
        acc = mat_mul(acc, mats[i]);
        want[i] = acc;
    }
    let got = f64s(&associative_scan(matmul, &[x], true, 0).unwrap()[0]);
    for (g, w) in got.iter().zip(want.concat()) {
        assert!((g - w).abs() < 1e-12, "reverse: {got:?}");
    }
}

#[test]
fn a_linear_recurrence_over_two_tensors_and_another_axis() {
    // h[t] = a[t] h[t-1] + b[t], h[-1] = 0, along axis 1 of [2, n]: the
    // pairs (a, b) compose as (a1 a2, a2 b1 + b2).
    let n = 6;
    let a: Vec<f64> = (0..2 * n).map(|i| 0.5 + 0.05 * i as f64).collect();
    let b: Vec<f64> = (0..2 * n).map(|i| (i as f64).cos()).collect();
    let at = Tensor::from_vec(a.clone(), &[2, n as i64]).unwrap();
    let bt = Tensor::from_vec(b.clone(), &[2, n as i64]).unwrap();
    let compose =
        |x: &[Tensor], y: &[Tensor]| Ok(vec![x[0].mul(&y[0])?, y[0].mul(&x[1])?.add(&y[1])?]);
    let out = associative_scan(compose, &[at, bt], false, -1).unwrap();
    let h = f64s(&out[1]);
    for row in 0..2 {
        let mut state = 0.0;
        for t in 0..n {
            state = a[row * n + t] * state + b[row * n + t];
            assert!((h[row * n + t] - state).abs() < 1e-12, "row {row} t {t}");
        }
    }
}

#[test]
fn gradients_match_finite_differences() {
    // Prefix products: d/dx of sum(w * cumprod(x)).
    let x = [0.9, -1.1, 1.3, 0.7, 1.2];
    let mul = |a: &[Tensor], b: &[Tensor]| Ok(vec![a[0].mul(&b[0])?]);
    check_gradient(
        &move |x: &Tensor| Ok(associative_scan(mul, std::slice::from_ref(x), false, 0)?.remove(0)),
        &x,
        &[5],
        1e-6,
        "prefix products",
    );
    check_gradient(
        &move |x: &Tensor| Ok(associative_scan(mul, std::slice::from_ref(x), true, 0)?.remove(0)),
        &x,
        &[5],
        1e-6,
        "suffix products",
    );
}

#[test]
fn misuse_is_refused_clearly() {
    let x = Tensor::zeros(&[4], DType::F32);
    let e = associative_scan(add, &[], false, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("at least one"), "{e}");
    let e = associative_scan(add, std::slice::from_ref(&x), false, 1)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
    let y = Tensor::zeros(&[3], DType::F32);
    let e = associative_scan(|a, _b| Ok(a.to_vec()), &[x.clone(), y], false, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("3 elements"), "{e}");
    let e = associative_scan(|a, _b| Ok(vec![a[0].cast(DType::F64)?]), &[x], false, 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("operands' types"), "{e}");
}
