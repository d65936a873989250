//! `xlafn::nn::metrics` against references written here with plain f64
//! loops (no xlafn ops): every metric streamed over several batches equals
//! the direct computation over all the data; the same updates inside a
//! compiled function (one trace) give the same state as eager ones;
//! sample weights; one trace for batches of any size (an unknown batch
//! dimension); `in_top_k`'s ties; AUC against the same thresholds by
//! hand and against the exact (Mann-Whitney) AUC; reset eagerly and in a
//! function; the state as module variables through a checkpoint; errors
//! for mismatched shapes and bad options. Precision, recall and AUC are
//! in metrics_confusion.rs.

use xlafn::checkpoint;
use xlafn::module::Module;
use xlafn::nn::metrics::{
    self, Accuracy, Auc, BinaryAccuracy, CategoricalAccuracy, LabelMetric, Mean, MeanAbsoluteError,
    MeanSquaredError, Metric, Precision, Recall, SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy, Sum, Summation,
};
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::values;

#[path = "common/metric_data.rs"]
mod metric_data;
use metric_data::{
    BATCHES, Batch, COLS, DIMS, ROWS, close, eager_and_compiled, f32s, labels_i32, tensor,
};

/// The weighted mean of per-row values (Keras' Mean over per-example values).
fn weighted_mean(per_row: &[f64], weights: &[f64]) -> f64 {
    let total: f64 = per_row.iter().zip(weights).map(|(v, w)| v * w).sum();
    let count: f64 = weights.iter().sum();
    if count == 0.0 { 0.0 } else { total / count }
}

fn row_means(v: &[f64], cols: usize) -> Vec<f64> {
    v.chunks(cols)
        .map(|r| r.iter().sum::<f64>() / cols as f64)
        .collect()
}

/// Labels, predictions and optional per-row weights, on the host.
type Data = (Vec<f64>, Vec<f64>, Option<Vec<f64>>);

fn row_weights(seed: u64) -> Vec<f64> {
    f32s(values(ROWS, seed, 0.0, 2.0))
}

#[test]
fn mean_streams_like_a_direct_mean() {
    let mut all = Vec::new();
    let mut all_w = Vec::new();
    let (eager, weighted) = (Mean::new().unwrap(), Mean::new().unwrap());
    let update = function({
        let m = weighted.clone();
        move |v: Tensor, w: Tensor| m.update_state(&v, Some(&w))
    });
    for b in 0..BATCHES {
        let v = f32s(values(ROWS * COLS, 10 + b, -3.0, 3.0));
        let w = row_weights(20 + b);
        eager
            .update_state(&tensor(&v, &[ROWS as i64, COLS as i64]), None)
            .unwrap();
        update
            .call((
                tensor(&v, &[ROWS as i64, COLS as i64]),
                tensor(&w, &[ROWS as i64]),
            ))
            .unwrap();
        all.extend(row_means(&v, COLS));
        all_w.extend(w);
    }
    assert_eq!(update.tracing_count(), 1);
    let ones = vec![1.0; all.len()];
    let got = eager.result().unwrap().item::<f32>().unwrap() as f64;
    close(got, weighted_mean(&all, &ones), "Mean");
    close(
        eager.count().read().item::<f32>().unwrap() as f64,
        (ROWS as u64 * BATCHES) as f64,
        "Mean count",
    );
    let got = weighted.result().unwrap().item::<f32>().unwrap() as f64;
    close(got, weighted_mean(&all, &all_w), "weighted Mean");
}

#[test]
fn mean_weights_of_full_rank_and_scalar() {
    // Elementwise weights: the weighted mean over every entry.
    let v = f32s(values(ROWS * COLS, 3, -1.0, 1.0));
    let w = f32s(values(ROWS * COLS, 4, 0.0, 1.0));
    let m = Mean::new().unwrap();
    let dims = [ROWS as i64, COLS as i64];
    m.update_state(&tensor(&v, &dims), Some(&tensor(&w, &dims)))
        .unwrap();
    close(
        m.result().unwrap().item::<f32>().unwrap() as f64,
        weighted_mean(&v, &w),
        "elementwise weights",
    );
    // A scalar weight counts the whole batch as that many samples.
    let m = Mean::new().unwrap();
    let a = [1.0, 2.0, 3.0];
    m.update_state(&tensor(&a, &[3]), Some(&tensor(&[3.0], &[])))
        .unwrap();
    m.update_state(&tensor(&[10.0], &[1]), None).unwrap();
    let want = (2.0 * 3.0 + 10.0) / 4.0;
    close(
        m.result().unwrap().item::<f32>().unwrap() as f64,
        want,
        "scalar weight",
    );
    // Broadcast over a size-1 axis of the weight.
    let m = Mean::with_dtype(DType::F64).unwrap();
    let v = [1.0f64, 2., 3., 4.];
    m.update_state(
        &Tensor::from_vec(v.to_vec(), &[2, 2]).unwrap(),
        Some(&Tensor::from_vec(vec![1.0f64, 3.0], &[2, 1]).unwrap()),
    )
    .unwrap();
    let want = (1.0 + 2.0 + 3.0 * (3.0 + 4.0)) / (2.0 + 6.0);
    assert_eq!(m.result().unwrap().item::<f64>().unwrap(), want);
    // Nothing seen (or only zero weights): 0, not NaN.
    let m = Mean::new().unwrap();
    assert_eq!(m.result().unwrap().item::<f32>().unwrap(), 0.0);
    m.update_state(&tensor(&[5.0], &[1]), Some(&tensor(&[0.0], &[1])))
        .unwrap();
    assert_eq!(m.result().unwrap().item::<f32>().unwrap(), 0.0);
}

#[test]
fn sum_streams_like_a_direct_sum() {
    let s = Sum::new().unwrap();
    let weighted = Sum::with_dtype(DType::F64).unwrap();
    let (mut want, mut want_w) = (0.0, 0.0);
    for b in 0..BATCHES {
        let v = f32s(values(ROWS * COLS, 30 + b, -2.0, 2.0));
        let w = row_weights(40 + b);
        let dims = [ROWS as i64, COLS as i64];
        s.update_state(&tensor(&v, &dims), None).unwrap();
        let v64 = Tensor::from_vec(v.clone(), &dims).unwrap();
        let w64 = Tensor::from_vec(w.clone(), &[ROWS as i64]).unwrap();
        weighted.update_state(&v64, Some(&w64)).unwrap();
        want += v.iter().sum::<f64>();
        for (r, wr) in v.chunks(COLS).zip(&w) {
            want_w += wr * r.iter().sum::<f64>();
        }
    }
    close(
        s.result().unwrap().item::<f32>().unwrap() as f64,
        want,
        "Sum",
    );
    let got = weighted.result().unwrap().item::<f64>().unwrap();
    assert!((got - want_w).abs() < 1e-12, "{got} vs {want_w}");
}

/// Batches of `[ROWS, COLS]` labels and predictions drawn by `draw`, every
/// other batch weighted per row.
fn batches(draw: impl Fn(u64) -> (Vec<f64>, Vec<f64>)) -> Vec<Data> {
    (0..BATCHES)
        .map(|b| {
            let (t, p) = draw(b);
            let w = (b % 2 == 1).then(|| row_weights(50 + b));
            (t, p, w)
        })
        .collect()
}

fn as_tensors(data: &[Data], dims_t: &[i64], dims_p: &[i64], int_labels: bool) -> Vec<Batch> {
    data.iter()
        .map(|(t, p, w)| Batch {
            y_true: if int_labels {
                labels_i32(t, dims_t)
            } else {
                tensor(t, dims_t)
            },
            y_pred: tensor(p, dims_p),
            weight: w.as_ref().map(|w| tensor(w, &[ROWS as i64])),
        })
        .collect()
}

/// The reference: per-row values from `per_row`, weighted by the batch's
/// weights (1 without), averaged over every batch.
fn reference(data: &[Data], per_row: impl Fn(&[f64], &[f64]) -> Vec<f64>) -> f64 {
    let (mut v, mut w) = (Vec::new(), Vec::new());
    for (t, p, wt) in data {
        let rows = per_row(t, p);
        w.extend(wt.clone().unwrap_or_else(|| vec![1.0; rows.len()]));
        v.extend(rows);
    }
    weighted_mean(&v, &w)
}

fn argmax(row: &[f64]) -> usize {
    // The first of equal maxima, as XLA's argmax.
    let mut best = 0;
    for (i, &x) in row.iter().enumerate() {
        if x > row[best] {
            best = i;
        }
    }
    best
}

#[test]
fn accuracy_metrics_stream_like_direct_computations() {
    let small_ints = |seed| -> Vec<f64> {
        values(ROWS * COLS, seed, 0.0, 3.0)
            .into_iter()
            .map(f64::floor)
            .collect()
    };
    // Accuracy: exact matches, elementwise, per-row means.
    let data = batches(|b| (small_ints(60 + b), small_ints(70 + b)));
    let want = reference(&data, |t, p| {
        let eq: Vec<f64> = t
            .iter()
            .zip(p)
            .map(|(a, b)| (a == b) as i32 as f64)
            .collect();
        row_means(&eq, COLS)
    });
    let got = eager_and_compiled(
        || Accuracy::new().unwrap(),
        &as_tensors(&data, &DIMS, &DIMS, false),
    );
    close(got, want, "Accuracy");

    // BinaryAccuracy: 0/1 labels against predictions > 0.5 (and a 0.5 exactly).
    let data = batches(|b| {
        let t = values(ROWS * COLS, 80 + b, 0.0, 2.0)
            .into_iter()
            .map(f64::floor)
            .collect();
        let mut p = f32s(values(ROWS * COLS, 90 + b, 0.0, 1.0));
        p[0] = 0.5;
        (t, p)
    });
    for threshold in [0.5, 0.3] {
        let want = reference(&data, |t, p| {
            let eq: Vec<f64> = t
                .iter()
                .zip(p)
                .map(|(a, b)| (*a == (*b > threshold) as i32 as f64) as i32 as f64)
                .collect();
            row_means(&eq, COLS)
        });
        let got = eager_and_compiled(
            || BinaryAccuracy::with_threshold(threshold).unwrap(),
            &as_tensors(&data, &DIMS, &DIMS, false),
        );
        close(got, want, "BinaryAccuracy");
    }

    // CategoricalAccuracy: one-hot labels against scores.
    let data = batches(|b| {
        let cls = values(ROWS, 100 + b, 0.0, COLS as f64);
        let mut t = vec![0.0; ROWS * COLS];
        for (r, c) in cls.iter().enumerate() {
            t[r * COLS + *c as usize] = 1.0;
        }
        (t, f32s(values(ROWS * COLS, 110 + b, 0.0, 1.0)))
    });
    let want = reference(&data, |t, p| {
        t.chunks(COLS)
            .zip(p.chunks(COLS))
            .map(|(a, b)| (argmax(a) == argmax(b)) as i32 as f64)
            .collect()
    });
    let got = eager_and_compiled(
        || CategoricalAccuracy::new().unwrap(),
        &as_tensors(&data, &DIMS, &DIMS, false),
    );
    close(got, want, "CategoricalAccuracy");

    // SparseCategoricalAccuracy: integer labels [rows] and [rows, 1].
    let data = batches(|b| {
        let t = values(ROWS, 120 + b, 0.0, COLS as f64)
            .into_iter()
            .map(f64::floor)
            .collect();
        (t, f32s(values(ROWS * COLS, 130 + b, 0.0, 1.0)))
    });
    let want = reference(&data, |t, p| {
        t.iter()
            .zip(p.chunks(COLS))
            .map(|(l, row)| (*l as usize == argmax(row)) as i32 as f64)
            .collect()
    });
    for label_dims in [vec![ROWS as i64], vec![ROWS as i64, 1]] {
        let got = eager_and_compiled(
            || SparseCategoricalAccuracy::new().unwrap(),
            &as_tensors(&data, &label_dims, &DIMS, true),
        );
        close(got, want, "SparseCategoricalAccuracy");
    }
}

/// `in_top_k` by hand: fewer than `k` strictly larger scores in the row.
fn in_top_k_ref(label: usize, row: &[f64], k: usize) -> bool {
    row.iter().filter(|&&x| x > row[label]).count() < k
}

#[test]
fn top_k_accuracy_streams_and_counts_ties_as_in() {
    // Scores from a few levels, so rows have ties across the k boundary.
    let data = batches(|b| {
        let t = values(ROWS, 140 + b, 0.0, COLS as f64)
            .into_iter()
            .map(f64::floor)
            .collect();
        let p = values(ROWS * COLS, 150 + b, 0.0, 3.0)
            .into_iter()
            .map(f64::floor)
            .collect();
        (t, p)
    });
    for k in 1..=COLS {
        let want = reference(&data, |t, p| {
            t.iter()
                .zip(p.chunks(COLS))
                .map(|(l, row)| in_top_k_ref(*l as usize, row, k) as i32 as f64)
                .collect()
        });
        let got = eager_and_compiled(
            || SparseTopKCategoricalAccuracy::with_k(k as i64).unwrap(),
            &as_tensors(&data, &[ROWS as i64], &DIMS, true),
        );
        close(got, want, &format!("SparseTopKCategoricalAccuracy k={k}"));
    }
    // A row of equal scores: every class is in the top 1.
    let p = Tensor::from_vec(vec![0.5f32; 4], &[1, 4]).unwrap();
    for label in 0..4 {
        let t = Tensor::vector(&[label]).unwrap();
        let hit = metrics::in_top_k(&t, &p, 1)
            .unwrap()
            .to_vec::<bool>()
            .unwrap();
        assert_eq!(hit, vec![true]);
    }
    // Two tied at the boundary of k = 2 with one larger: both in; lower out.
    let p = Tensor::from_vec(vec![0.9f32, 0.5, 0.5, 0.1], &[1, 4]).unwrap();
    let got: Vec<bool> = (0..4)
        .map(|l| {
            metrics::in_top_k(&Tensor::vector(&[l]).unwrap(), &p, 2)
                .unwrap()
                .to_vec::<bool>()
                .unwrap()[0]
        })
        .collect();
    assert_eq!(got, vec![true, true, true, false]);
    // A label outside the classes has no score: in only when k exceeds them.
    let t = Tensor::vector(&[7i64]).unwrap();
    assert_eq!(
        metrics::in_top_k(&t, &p, 4)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        metrics::in_top_k(&t, &p, 5)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true]
    );
    // A NaN score at the label is never in (unless k covers every other class).
    let p = Tensor::from_vec(vec![f32::NAN, 0.5, 0.2], &[1, 3]).unwrap();
    let t = Tensor::vector(&[0i64]).unwrap();
    assert_eq!(
        metrics::in_top_k(&t, &p, 2)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![false]
    );
    assert_eq!(
        metrics::in_top_k(&t, &p, 3)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![true]
    );
}

#[test]
fn error_metrics_stream_like_direct_means() {
    let data = batches(|b| {
        (
            f32s(values(ROWS * COLS, 160 + b, -2.0, 2.0)),
            f32s(values(ROWS * COLS, 170 + b, -2.0, 2.0)),
        )
    });
    let per_row = |f: fn(f64) -> f64| {
        move |t: &[f64], p: &[f64]| -> Vec<f64> {
            let e: Vec<f64> = t.iter().zip(p).map(|(a, b)| f(a - b)).collect();
            row_means(&e, COLS)
        }
    };
    let tensors = as_tensors(&data, &DIMS, &DIMS, false);
    let want = reference(&data, per_row(|e| e * e));
    close(
        eager_and_compiled(|| MeanSquaredError::new().unwrap(), &tensors),
        want,
        "MSE",
    );
    let want = reference(&data, per_row(f64::abs));
    close(
        eager_and_compiled(|| MeanAbsoluteError::new().unwrap(), &tensors),
        want,
        "MAE",
    );
}

#[test]
fn reset_clears_the_state_eagerly_and_in_a_function() {
    let m = SparseCategoricalAccuracy::new().unwrap();
    let t = Tensor::vector(&[1i32, 0]).unwrap();
    let p = Tensor::from_vec(vec![0.2f32, 0.8, 0.9, 0.1], &[2, 2]).unwrap();
    m.update_state(&t, &p, None).unwrap();
    assert_eq!(m.result().unwrap().item::<f32>().unwrap(), 1.0);
    m.reset().unwrap();
    assert_eq!(m.result().unwrap().item::<f32>().unwrap(), 0.0);
    assert_eq!(m.mean().count().read().item::<f32>().unwrap(), 0.0);

    // An epoch in one function: reset, update, result.
    let auc = Auc::with_options(50, Summation::Interpolation).unwrap();
    let epoch = function({
        let auc = auc.clone();
        move |t: Tensor, p: Tensor| -> Result<Tensor> {
            auc.reset()?;
            auc.update_state(&t, &p, None)?;
            auc.result()
        }
    });
    let (t, p) = (
        Tensor::vector(&[0f32, 1., 1., 0.]).unwrap(),
        Tensor::vector(&[0.1f32, 0.9, 0.8, 0.3]).unwrap(),
    );
    let first = epoch
        .call((t.clone(), p.clone()))
        .unwrap()
        .item::<f32>()
        .unwrap();
    let second = epoch.call((t, p)).unwrap().item::<f32>().unwrap();
    assert_eq!((first, second), (1.0, 1.0));
    assert_eq!(epoch.tracing_count(), 1);
}

#[test]
fn metric_state_is_module_variables_and_checkpoints() {
    #[derive(Module)]
    struct Tracked {
        loss: Mean,
        accuracy: BinaryAccuracy,
        auc: Auc,
    }
    let make = || Tracked {
        loss: Mean::new().unwrap(),
        accuracy: BinaryAccuracy::new().unwrap(),
        auc: Auc::with_options(10, Summation::Interpolation).unwrap(),
    };
    let a = make();
    let names: Vec<String> = a.named_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "loss.total",
            "loss.count",
            "accuracy.total",
            "accuracy.count",
            "auc.true_positives",
            "auc.false_positives",
            "auc.false_negatives",
            "auc.true_negatives"
        ]
    );
    assert!(a.trainable_variables().is_empty());
    a.loss
        .update_state(&Tensor::vector(&[1f32, 4.]).unwrap(), None)
        .unwrap();
    let (t, p) = (
        Tensor::vector(&[1f32, 0., 1.]).unwrap(),
        Tensor::vector(&[0.7f32, 0.6, 0.2]).unwrap(),
    );
    a.accuracy.update_state(&t, &p, None).unwrap();
    a.auc.update_state(&t, &p, None).unwrap();
    let path = std::env::temp_dir().join(format!("metrics-{}.safetensors", std::process::id()));
    checkpoint::save(&a, &path).unwrap();
    let b = make();
    checkpoint::restore(&b, &path).unwrap();
    std::fs::remove_file(&path).ok();
    for (x, y) in [
        (a.loss.result(), b.loss.result()),
        (a.accuracy.result(), b.accuracy.result()),
        (a.auc.result(), b.auc.result()),
    ] {
        assert_eq!(
            x.unwrap().item::<f32>().unwrap(),
            y.unwrap().item::<f32>().unwrap()
        );
    }
    assert_eq!(b.loss.result().unwrap().item::<f32>().unwrap(), 2.5);
    // Streaming continues from the restored state.
    b.loss
        .update_state(&Tensor::vector(&[7f32]).unwrap(), None)
        .unwrap();
    assert_eq!(b.loss.result().unwrap().item::<f32>().unwrap(), 4.0);
}

#[test]
fn trait_objects_drive_a_list_of_metrics() {
    let list: Vec<Box<dyn LabelMetric>> = vec![
        Box::new(BinaryAccuracy::new().unwrap()),
        Box::new(Precision::new().unwrap()),
        Box::new(Recall::new().unwrap()),
    ];
    let t = Tensor::vector(&[1f32, 0., 1., 1.]).unwrap();
    let p = Tensor::vector(&[0.9f32, 0.7, 0.2, 0.6]).unwrap();
    for m in &list {
        m.update_state(&t, &p, None).unwrap();
    }
    let got: Vec<(String, f32)> = list
        .iter()
        .map(|m| {
            (
                m.name().to_string(),
                m.result().unwrap().item::<f32>().unwrap(),
            )
        })
        .collect();
    // Predicted [1, 1, 0, 1]: 2 of 4 right; tp 2, fp 1, fn 1.
    let want = [
        ("binary_accuracy", 0.5),
        ("precision", 2.0 / 3.0),
        ("recall", 2.0 / 3.0),
    ];
    for ((n, v), (wn, wv)) in got.iter().zip(want) {
        assert_eq!((n.as_str(), *v), (wn, wv as f32));
    }
}

#[test]
fn mismatched_shapes_and_bad_options_are_errors() {
    let is_invalid = |r: Result<()>, what: &str| match r {
        Err(Error::InvalidArgument { .. }) => {}
        other => panic!("{what}: expected InvalidArgument, got {other:?}"),
    };
    let a = Tensor::zeros(&[3, 2], DType::F32);
    let b = Tensor::zeros(&[2, 3], DType::F32);
    is_invalid(
        Accuracy::new().unwrap().update_state(&a, &b, None),
        "Accuracy",
    );
    is_invalid(
        BinaryAccuracy::new().unwrap().update_state(&a, &b, None),
        "BinaryAccuracy",
    );
    is_invalid(
        CategoricalAccuracy::new()
            .unwrap()
            .update_state(&a, &b, None),
        "CategoricalAccuracy",
    );
    is_invalid(
        Precision::new().unwrap().update_state(&a, &b, None),
        "Precision",
    );
    is_invalid(Auc::new().unwrap().update_state(&a, &b, None), "Auc");
    let labels = Tensor::vector(&[0i32, 1]).unwrap();
    is_invalid(
        SparseCategoricalAccuracy::new()
            .unwrap()
            .update_state(&labels, &a, None),
        "SparseCategoricalAccuracy",
    );
    is_invalid(
        SparseTopKCategoricalAccuracy::with_k(1)
            .unwrap()
            .update_state(&labels, &a, None),
        "SparseTopKCategoricalAccuracy",
    );
    // Weights that are not a prefix of the values' shape.
    let m = Mean::new().unwrap();
    is_invalid(
        m.update_state(&a, Some(&Tensor::zeros(&[2], DType::F32))),
        "Mean weight",
    );
    is_invalid(
        m.update_state(&a, Some(&Tensor::zeros(&[3, 2, 1], DType::F32))),
        "Mean weight rank",
    );
    is_invalid(
        Recall::new()
            .unwrap()
            .update_state(&a, &a, Some(&Tensor::zeros(&[2], DType::F32))),
        "Recall weight",
    );
    // A bad update changes nothing.
    assert_eq!(m.count().read().item::<f32>().unwrap(), 0.0);
    assert!(SparseTopKCategoricalAccuracy::with_k(0).is_err());
    assert!(Auc::with_options(1, Summation::Interpolation).is_err());
    assert!(BinaryAccuracy::with_threshold(f64::NAN).is_err());
    assert!(Mean::with_dtype(DType::I32).is_err());
}

#[test]
fn updates_trace_once_for_any_batch_size() {
    // One trace with an unknown batch dimension serves every batch size.
    let sig = || {
        vec![
            TensorSpec::new(&[None, Some(COLS as i64)], DType::F32),
            TensorSpec::new(&[None, Some(COLS as i64)], DType::F32),
        ]
    };
    let mean = Mean::new().unwrap();
    let (acc, auc) = (BinaryAccuracy::new().unwrap(), Auc::new().unwrap());
    let step = FunctionOptions::new().input_signature(sig()).build({
        let (mean, acc, auc) = (mean.clone(), acc.clone(), auc.clone());
        move |t: Tensor, p: Tensor| -> Result<()> {
            mean.update_state(&p, None)?;
            acc.update_state(&t, &p, None)?;
            auc.update_state(&t, &p, None)
        }
    });
    let (eager_mean, eager_acc, eager_auc) = (
        Mean::new().unwrap(),
        BinaryAccuracy::new().unwrap(),
        Auc::new().unwrap(),
    );
    for (b, rows) in [2usize, 5, 3].into_iter().enumerate() {
        let n = rows * COLS;
        let t: Vec<f64> = values(n, 300 + b as u64, 0.0, 2.0)
            .into_iter()
            .map(f64::floor)
            .collect();
        let p = f32s(values(n, 310 + b as u64, 0.0, 1.0));
        let dims = [rows as i64, COLS as i64];
        let (t, p) = (tensor(&t, &dims), tensor(&p, &dims));
        step.call((t.clone(), p.clone())).unwrap();
        eager_mean.update_state(&p, None).unwrap();
        eager_acc.update_state(&t, &p, None).unwrap();
        eager_auc.update_state(&t, &p, None).unwrap();
    }
    assert_eq!(step.tracing_count(), 1);
    for (a, b) in [
        (mean.result(), eager_mean.result()),
        (acc.result(), eager_acc.result()),
        (auc.result(), eager_auc.result()),
    ] {
        let (a, b) = (
            a.unwrap().item::<f32>().unwrap(),
            b.unwrap().item::<f32>().unwrap(),
        );
        close(a as f64, b as f64, "unknown batch");
    }
    assert_eq!(mean.count().read().item::<f32>().unwrap(), 10.0);

    // Top-k with an unknown batch (the target's score picked by a mask).
    let top2 = SparseTopKCategoricalAccuracy::with_k(2).unwrap();
    let step = FunctionOptions::new()
        .input_signature(vec![
            TensorSpec::new(&[None], DType::I32),
            TensorSpec::new(&[None, Some(COLS as i64)], DType::F32),
        ])
        .build({
            let top2 = top2.clone();
            move |t: Tensor, p: Tensor| top2.update_state(&t, &p, None)
        });
    let (mut hits, mut n) = (0, 0);
    for (b, rows) in [3usize, 1, 4].into_iter().enumerate() {
        let t = values(rows, 320 + b as u64, 0.0, COLS as f64)
            .into_iter()
            .map(f64::floor)
            .collect::<Vec<_>>();
        let p = f32s(values(rows * COLS, 330 + b as u64, 0.0, 1.0));
        step.call((
            labels_i32(&t, &[rows as i64]),
            tensor(&p, &[rows as i64, COLS as i64]),
        ))
        .unwrap();
        for (l, row) in t.iter().zip(p.chunks(COLS)) {
            hits += in_top_k_ref(*l as usize, row, 2) as i32;
            n += 1;
        }
    }
    assert_eq!(step.tracing_count(), 1);
    close(
        top2.result().unwrap().item::<f32>().unwrap() as f64,
        hits as f64 / n as f64,
        "top-2",
    );
}
