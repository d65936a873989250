//! The layer tests' shared data and comparisons: deterministic inputs
//! (`values`, a fixed linear congruential sequence, so a failure repeats),
//! a tensor's values as f64 (`host`), and element-wise comparison with a
//! relative-plus-absolute tolerance (`assert_close`).
//!
//! Use with `#[path = "common/layer_data.rs"] mod layer_data;`.

#![allow(dead_code)]

use xlafn::prelude::*;

/// `n` values in `[lo, hi)` from `seed`.
pub fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) as f64 / (1u64 << 31) as f64) * (hi - lo)
        })
        .collect()
}

/// Every element as f64.
pub fn host(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// Each `got` within `tol * (1 + |want|)` of `want`.
pub fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}
