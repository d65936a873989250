//! The metric tests' shared data and checks: the batch geometry
//! (`ROWS` x `COLS`, `BATCHES` batches), f32-rounded references (`f32s`),
//! tensors from f64 values, a relative comparison (`close`) and
//! `eager_and_compiled`, which streams batches through a metric eagerly
//! and inside a compiled function and checks that the two agree.
//!
//! Use with `#[path = "common/metric_data.rs"] mod metric_data;`.

#![allow(dead_code)]

use xlafn::nn::metrics::LabelMetric;
use xlafn::prelude::*;

/// Each batch is `ROWS` x `COLS`; the metrics stream `BATCHES` of them.
pub const ROWS: usize = 6;
pub const COLS: usize = 4;
pub const BATCHES: u64 = 3;

/// Values rounded to f32 (what the tensors hold), as f64 for the reference.
pub fn f32s(v: Vec<f64>) -> Vec<f64> {
    v.into_iter().map(|x| x as f32 as f64).collect()
}

/// An f32 tensor of `dims`.
pub fn tensor(v: &[f64], dims: &[i64]) -> Tensor {
    let host: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    Tensor::from_vec(host, dims).unwrap()
}

/// An i32 tensor of `dims` (integer labels).
pub fn labels_i32(v: &[f64], dims: &[i64]) -> Tensor {
    let host: Vec<i32> = v.iter().map(|&x| x as i32).collect();
    Tensor::from_vec(host, dims).unwrap()
}

/// `got` equals `want` to 1e-5, relative and absolute.
pub fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-5 * (1.0 + want.abs()),
        "{what}: got {got}, want {want}"
    );
}

/// A batch of `ROWS` x `COLS`.
pub const DIMS: [i64; 2] = [ROWS as i64, COLS as i64];

/// One batch of labels, predictions and optional per-row weights.
pub struct Batch {
    pub y_true: Tensor,
    pub y_pred: Tensor,
    pub weight: Option<Tensor>,
}

/// Streams `batches` through one metric eagerly and a second one inside a
/// compiled function, and returns the eager result after checking that
/// the compiled one agrees (to rounding) and that the function traced once.
pub fn eager_and_compiled<M>(make: impl Fn() -> M, batches: &[Batch]) -> f64
where
    M: LabelMetric + Clone + Send + Sync + 'static,
{
    let eager = make();
    for b in batches {
        eager
            .update_state(&b.y_true, &b.y_pred, b.weight.as_ref())
            .unwrap();
    }
    let compiled = make();
    let weighted = function({
        let m = compiled.clone();
        move |t: Tensor, p: Tensor, w: Tensor| m.update_state(&t, &p, Some(&w))
    });
    let unweighted = function({
        let m = compiled.clone();
        move |t: Tensor, p: Tensor| m.update_state(&t, &p, None)
    });
    for b in batches {
        match &b.weight {
            Some(w) => weighted.call((b.y_true.clone(), b.y_pred.clone(), w.clone())),
            None => unweighted.call((b.y_true.clone(), b.y_pred.clone())),
        }
        .unwrap();
    }
    assert!(weighted.tracing_count() <= 1 && unweighted.tracing_count() <= 1);
    let (e, c) = (
        eager.result().unwrap().item::<f32>().unwrap(),
        compiled.result().unwrap().item::<f32>().unwrap(),
    );
    // XLA fuses the compiled update, so its sums may round differently.
    close(
        c as f64,
        e as f64,
        &format!("{}: eager vs compiled", eager.name()),
    );
    e as f64
}
