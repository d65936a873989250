//! The layer tests' shared data and comparisons: deterministic inputs
//! (`values`, a fixed linear congruential sequence, so a failure repeats),
//! a tensor's values as f64 (`host`), element-wise comparison with a
//! relative-plus-absolute tolerance (`assert_close`), tensors from f64
//! values (`f32s`, `f64s`), a layer checked eagerly and compiled against
//! reference values (`check_eager_and_compiled`) and a module's variable
//! names (`names`).
//!
//! Use with `#[path = "common/layer_data.rs"] mod layer_data;`.

#![allow(dead_code)]

use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn::layers::Layer;
use xlafn::prelude::*;
use xlafn::random;

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

/// A PRNG key from `seed`.
pub fn key(seed: u64) -> Tensor {
    random::key(seed).unwrap()
}

/// An f32 tensor of `dims` from f64 values.
pub fn f32s(v: &[f64], dims: &[i64]) -> Tensor {
    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Tensor::from_vec(v, dims).unwrap()
}

/// An f64 tensor of `dims`.
pub fn f64s(v: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims).unwrap()
}

/// The layer's output eagerly and from a compiled function (one trace),
/// both checked against `want`.
pub fn check_eager_and_compiled<L: Layer + Send + Sync + 'static>(
    layer: Arc<L>,
    x: &Tensor,
    want: &[f64],
    tol: f64,
    what: &str,
) {
    assert_close(&host(&layer.forward(x).unwrap()), want, tol, what);
    let f = function({
        let layer = layer.clone();
        move |x: Tensor| layer.forward(&x)
    });
    let y = f.call((x,)).unwrap();
    assert_close(&host(&y), want, tol, &format!("{what} (compiled)"));
    f.call((x,)).unwrap();
    assert_eq!(f.tracing_count(), 1, "{what}");
}

/// The module's variable names, in order.
pub fn names(m: &dyn Module) -> Vec<String> {
    m.named_variables().into_iter().map(|(n, _)| n).collect()
}
