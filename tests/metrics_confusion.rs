//! `xlafn::nn::metrics`' confusion-count metrics against references
//! written here with plain f64 loops: `Precision` and `Recall` streamed
//! over batches equal the direct counts; `Auc` equals the same thresholds
//! summed by hand and approaches the exact (Mann-Whitney) AUC. Each
//! eagerly and inside a compiled function.

use xlafn::nn::metrics::{Auc, LabelMetric, Metric, Precision, Recall, Summation};
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::values;

#[path = "common/metric_data.rs"]
mod metric_data;
use metric_data::{BATCHES, Batch, COLS, DIMS, ROWS, close, eager_and_compiled, f32s, tensor};

/// Weighted confusion counts at `threshold`: (tp, fp, fn, tn).
fn confusion(t: &[f64], p: &[f64], w: &[f64], threshold: f32) -> [f64; 4] {
    let mut c = [0.0; 4];
    for ((&l, &x), &w) in t.iter().zip(p).zip(w) {
        let pos = (x as f32) > threshold;
        let i = match (l != 0.0, pos) {
            (true, true) => 0,
            (false, true) => 1,
            (true, false) => 2,
            (false, false) => 3,
        };
        c[i] += w;
    }
    c
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

/// Labels, scores, weights (ones when unweighted) and whether weighted.
type BinaryData = (Vec<f64>, Vec<f64>, Vec<f64>, bool);

/// Batches of binary labels and scores in [0, 1], flattened, with
/// elementwise weights on every other batch.
fn binary_data() -> Vec<BinaryData> {
    (0..BATCHES)
        .map(|b| {
            let t: Vec<f64> = values(ROWS * COLS, 180 + b, 0.0, 2.0)
                .into_iter()
                .map(f64::floor)
                .collect();
            // Positives score higher on average, so the AUC is well above 0.5.
            let p: Vec<f64> = values(ROWS * COLS, 190 + b, 0.0, 0.7)
                .into_iter()
                .zip(&t)
                .map(|(x, l)| x + 0.3 * l)
                .collect();
            let weighted = b % 2 == 0;
            let w = if weighted {
                f32s(values(ROWS * COLS, 200 + b, 0.0, 2.0))
            } else {
                vec![1.0; ROWS * COLS]
            };
            (t, f32s(p), w, weighted)
        })
        .collect()
}

fn binary_batches() -> Vec<Batch> {
    binary_data()
        .iter()
        .map(|(t, p, w, weighted)| Batch {
            y_true: tensor(t, &DIMS),
            y_pred: tensor(p, &DIMS),
            weight: weighted.then(|| tensor(w, &DIMS)),
        })
        .collect()
}

fn total_confusion(threshold: f32) -> [f64; 4] {
    let mut c = [0.0; 4];
    for (t, p, w, _) in binary_data() {
        for (a, b) in c.iter_mut().zip(confusion(&t, &p, &w, threshold)) {
            *a += b;
        }
    }
    c
}

#[test]
fn precision_and_recall_stream_like_direct_counts() {
    for threshold in [0.5, 0.25, 0.8] {
        let [tp, fp, fn_, _] = total_confusion(threshold as f32);
        let got = eager_and_compiled(
            || Precision::with_threshold(threshold).unwrap(),
            &binary_batches(),
        );
        close(got, ratio(tp, tp + fp), "Precision");
        let got = eager_and_compiled(
            || Recall::with_threshold(threshold).unwrap(),
            &binary_batches(),
        );
        close(got, ratio(tp, tp + fn_), "Recall");
    }
    // Nothing predicted positive: precision 0; no positive label: recall 0.
    let p = Precision::new().unwrap();
    let r = Recall::new().unwrap();
    let zeros = Tensor::zeros(&[3], DType::F32);
    p.update_state(&Tensor::vector(&[1f32, 0., 1.]).unwrap(), &zeros, None)
        .unwrap();
    r.update_state(&zeros, &Tensor::vector(&[0.9f32, 0.1, 0.7]).unwrap(), None)
        .unwrap();
    assert_eq!(p.result().unwrap().item::<f32>().unwrap(), 0.0);
    assert_eq!(r.result().unwrap().item::<f32>().unwrap(), 0.0);
}

/// Keras' ROC AUC over `auc.thresholds()` by hand.
fn auc_ref(thresholds: &[f32], summation: Summation) -> f64 {
    let rates: Vec<(f64, f64)> = thresholds
        .iter()
        .map(|&th| {
            let [tp, fp, fn_, tn] = total_confusion(th);
            (ratio(fp, fp + tn), ratio(tp, tp + fn_))
        })
        .collect();
    rates
        .windows(2)
        .map(|w| {
            let ((x0, y0), (x1, y1)) = (w[0], w[1]);
            let h = match summation {
                Summation::Interpolation => (y0 + y1) / 2.0,
                Summation::Minoring => y0.min(y1),
                Summation::Majoring => y0.max(y1),
            };
            (x0 - x1) * h
        })
        .sum()
}

/// The exact weighted ROC AUC: the weighted share of (positive, negative)
/// pairs ordered right, ties counting half.
fn exact_auc() -> f64 {
    let mut pos = Vec::new();
    let mut neg = Vec::new();
    for (t, p, w, _) in binary_data() {
        for ((l, x), w) in t.iter().zip(&p).zip(&w) {
            if *l != 0.0 {
                pos.push((*x, *w))
            } else {
                neg.push((*x, *w))
            }
        }
    }
    let (mut num, mut den) = (0.0, 0.0);
    for &(a, wa) in &pos {
        for &(b, wb) in &neg {
            let s = if a > b {
                1.0
            } else if a == b {
                0.5
            } else {
                0.0
            };
            num += wa * wb * s;
            den += wa * wb;
        }
    }
    num / den
}

#[test]
fn auc_matches_keras_thresholds_and_approaches_the_exact_auc() {
    let keras = Auc::new().unwrap();
    let th = keras.thresholds();
    assert_eq!(th.len(), 200);
    assert_eq!(
        (th[0], th[1], th[198], th[199]),
        (
            -1e-7,
            (1.0 / 199.0) as f32,
            (198.0 / 199.0) as f32,
            1.0 + 1e-7
        )
    );
    let mut results = Vec::new();
    for summation in [
        Summation::Minoring,
        Summation::Interpolation,
        Summation::Majoring,
    ] {
        let make = || Auc::with_options(200, summation).unwrap();
        let got = eager_and_compiled(make, &binary_batches());
        let want = auc_ref(make().thresholds(), summation);
        close(got, want, &format!("AUC {summation:?}"));
        results.push(got);
    }
    assert!(
        results[0] <= results[1] && results[1] <= results[2],
        "{results:?}"
    );
    let exact = exact_auc();
    assert!(exact > 0.7, "the data should separate the classes: {exact}");
    assert!(
        (results[1] - exact).abs() < 0.01,
        "{} vs exact {exact}",
        results[1]
    );
    let fine = Auc::with_options(4000, Summation::Interpolation).unwrap();
    for b in binary_batches() {
        fine.update_state(&b.y_true, &b.y_pred, b.weight.as_ref())
            .unwrap();
    }
    let fine = fine.result().unwrap().item::<f32>().unwrap() as f64;
    assert!((fine - exact).abs() < 2e-3, "{fine} vs exact {exact}");
}

#[test]
fn auc_clips_scores_outside_the_unit_interval_as_keras_3_does() {
    // Keras 3 clips predictions to [0, 1] first. By hand, with thresholds
    // [-1e-7, 0.5, 1 + 1e-7] and the scores clipped to [0, 1, 0.3, 1]:
    // at -1e-7 all four are positive (tpr 1, fpr 1); at 0.5 the two
    // positives (tpr 1, fpr 0); at 1 + 1e-7 none (0, 0). The trapezoids:
    // (1 - 0) * (1 + 1) / 2 + (0 - 0) * (1 + 0) / 2 = 1. Unclipped, -5
    // was negative even at -1e-7 and 5 positive even at 1 + 1e-7, and the
    // area came out 0.5.
    let y_true = Tensor::vector(&[0f32, 1., 0., 1.]).unwrap();
    let y_pred = Tensor::vector(&[-5f32, 5., 0.3, 2.]).unwrap();
    for thresholds in [3, 200] {
        let auc = Auc::with_options(thresholds, Summation::Interpolation).unwrap();
        auc.update_state(&y_true, &y_pred, None).unwrap();
        assert_eq!(auc.result().unwrap().item::<f32>().unwrap(), 1.0);
    }
    // Scores below 0 clip to 0: a positive at -3 ties with a negative at
    // 0 (both positive only at -1e-7): (1 - 0) * (1 + 0) / 2 = 0.5.
    let auc = Auc::new().unwrap();
    let tie_true = Tensor::vector(&[1f32, 0.]).unwrap();
    let tie_pred = Tensor::vector(&[-3f32, 0.]).unwrap();
    auc.update_state(&tie_true, &tie_pred, None).unwrap();
    assert_eq!(auc.result().unwrap().item::<f32>().unwrap(), 0.5);
}
