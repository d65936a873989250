//! The shared helpers of the linear-algebra tests: f64 matrices from
//! slices and back, a relative comparison that names what it checks, and
//! deterministic pseudo-random values (an LCG, so every run and every
//! machine sees the same matrices).

#![allow(dead_code)]

use xlafn::prelude::*;

/// An f64 tensor of `dims` holding `v`.
pub fn m(v: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims).unwrap()
}

/// A tensor's values as f64s.
pub fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

/// `got` within `tol` of `want`, relative (plus `tol` absolute).
pub fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: {got:?} vs {want:?}"
        );
    }
}

/// `n` values in (-1, 1) from `seed`.
pub fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}
