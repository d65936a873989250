//! The confusion-matrix metrics: [`Precision`], [`Recall`] and the ROC
//! [`Auc`], which count (weighted) true and false positives and negatives
//! at thresholds, as Keras' `update_confusion_matrix_variables` does.
//!
//! Labels are taken as booleans (nonzero is positive); a prediction is
//! positive at a threshold when it is strictly above it. Predictions are
//! compared in f32. Predictions should lie in `[0, 1]` (a compiled program
//! cannot raise on data); [`Auc`] clips them into it first, as Keras 3's
//! AUC does, so a score below 0 counts as 0 (positive only at the first
//! threshold, `-1e-7`) and one above 1 as 1 (positive at every threshold
//! but the last, `1 + 1e-7`). [`Precision`] and [`Recall`] compare the
//! prediction itself with their one threshold, as Keras' do.
//!
//! Layer: part of `nn::metrics` (its helpers), over `tensor` ops and
//! `variable`.

use super::{LabelMetric, Metric, broadcast_weight, check_weight, divide_no_nan, same_shape};
use super::{state, zero};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::{Module, join};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// One batch flattened: labels as 0/1 times the weight (`[n]`), the
/// weight (`[n]`), and the predictions in f32 (`[n]`).
struct Batch {
    positive_weight: Tensor,
    weight: Tensor,
    pred: Tensor,
}

impl Batch {
    fn new(
        op: &str,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
    ) -> Result<Batch> {
        let (t, p) = same_shape(op, y_true, y_pred)?;
        let d = p.dtype();
        if !(d.is_int() || d.is_float()) {
            return Err(Error::Type(format!(
                "{op}: predictions must be real numbers, got {}",
                y_pred.tensor_type()
            )));
        }
        let pred = p.cast(DType::F32)?;
        let weight = match sample_weight {
            Some(w) => {
                check_weight(op, w, &pred)?;
                broadcast_weight(w, &pred)?
            }
            None => pred.ones_like()?,
        };
        let label = t.ne(&t.zeros_like()?)?.cast(DType::F32)?;
        Ok(Batch {
            positive_weight: label.mul(&weight)?.reshape(&[-1])?,
            weight: weight.reshape(&[-1])?,
            pred: pred.reshape(&[-1])?,
        })
    }

    /// The negatives' weights.
    fn negative_weight(&self) -> Result<Tensor> {
        self.weight.sub(&self.positive_weight)
    }
}

/// The weighted counts (true positives, false positives, false negatives,
/// true negatives) of `is_positive` (0/1, `[n]` or `[n, thresholds]`)
/// against the batch's labels, summed over the examples.
fn counts(batch: &Batch, is_positive: &Tensor) -> Result<[Tensor; 4]> {
    let rank = is_positive.shape().rank().unwrap_or(1);
    let column = |t: &Tensor| -> Result<Tensor> {
        if rank == 2 {
            t.expand_dims(-1)
        } else {
            Ok(t.clone())
        }
    };
    let pos = column(&batch.positive_weight)?;
    let neg = column(&batch.negative_weight()?)?;
    let is_negative = is_positive.neg()?.add_scalar(1.0)?;
    let sum = |a: &Tensor, b: &Tensor| a.mul(b)?.reduce_sum(&[0], false);
    Ok([
        sum(is_positive, &pos)?,
        sum(is_positive, &neg)?,
        sum(&is_negative, &pos)?,
        sum(&is_negative, &neg)?,
    ])
}

fn check_threshold(op: &str, threshold: f64) -> Result<()> {
    if threshold.is_nan() {
        return Err(Error::invalid(op, "the threshold is NaN"));
    }
    Ok(())
}

/// `keras.metrics.Precision` at one threshold: true positives over
/// predicted positives, `tp / (tp + fp)`, 0 when nothing was predicted
/// positive. Keras' default threshold is 0.5 (`top_k` and `class_id` are
/// not offered: slice the predictions first).
///
/// ```
/// use xlafn::nn::metrics::{LabelMetric, Metric, Precision};
/// use xlafn::prelude::*;
/// let p = Precision::new()?;
/// let y_true = Tensor::vector(&[1f32, 0., 1., 0.])?;
/// let y_pred = Tensor::vector(&[0.9f32, 0.8, 0.2, 0.1])?;
/// p.update_state(&y_true, &y_pred, None)?; // 2 predicted positive, 1 right
/// assert_eq!(p.result()?.item::<f32>()?, 0.5);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Precision {
    true_positives: Variable,
    false_positives: Variable,
    threshold: f64,
}

impl Precision {
    /// At Keras' default threshold, 0.5.
    pub fn new() -> Result<Precision> {
        Precision::with_threshold(0.5)
    }

    /// Predictions strictly above `threshold` are positive.
    pub fn with_threshold(threshold: f64) -> Result<Precision> {
        check_threshold("Precision", threshold)?;
        Ok(Precision {
            true_positives: state(&[], DType::F32, "precision/true_positives")?,
            false_positives: state(&[], DType::F32, "precision/false_positives")?,
            threshold,
        })
    }
}

impl Metric for Precision {
    fn name(&self) -> &str {
        "precision"
    }

    fn result(&self) -> Result<Tensor> {
        let tp = self.true_positives.try_read()?;
        divide_no_nan(&tp, &tp.add(&self.false_positives.try_read()?)?)
    }

    fn reset(&self) -> Result<()> {
        zero(&self.true_positives)?;
        zero(&self.false_positives)
    }
}

impl LabelMetric for Precision {
    fn update_state(
        &self,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
    ) -> Result<()> {
        let batch = Batch::new("Precision.update_state", y_true, y_pred, sample_weight)?;
        let positive = batch.pred.gt_scalar(self.threshold)?.cast(DType::F32)?;
        let [tp, fp, _, _] = counts(&batch, &positive)?;
        self.true_positives.assign_add(&tp)?;
        self.false_positives.assign_add(&fp)
    }
}

impl Module for Precision {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(join(prefix, "true_positives"), &self.true_positives);
        f(join(prefix, "false_positives"), &self.false_positives);
    }
}

/// `keras.metrics.Recall` at one threshold: true positives over actual
/// positives, `tp / (tp + fn)`, 0 when no positive label was seen. Keras'
/// default threshold is 0.5.
#[derive(Clone, Debug)]
pub struct Recall {
    true_positives: Variable,
    false_negatives: Variable,
    threshold: f64,
}

impl Recall {
    /// At Keras' default threshold, 0.5.
    pub fn new() -> Result<Recall> {
        Recall::with_threshold(0.5)
    }

    /// Predictions strictly above `threshold` are positive.
    pub fn with_threshold(threshold: f64) -> Result<Recall> {
        check_threshold("Recall", threshold)?;
        Ok(Recall {
            true_positives: state(&[], DType::F32, "recall/true_positives")?,
            false_negatives: state(&[], DType::F32, "recall/false_negatives")?,
            threshold,
        })
    }
}

impl Metric for Recall {
    fn name(&self) -> &str {
        "recall"
    }

    fn result(&self) -> Result<Tensor> {
        let tp = self.true_positives.try_read()?;
        divide_no_nan(&tp, &tp.add(&self.false_negatives.try_read()?)?)
    }

    fn reset(&self) -> Result<()> {
        zero(&self.true_positives)?;
        zero(&self.false_negatives)
    }
}

impl LabelMetric for Recall {
    fn update_state(
        &self,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
    ) -> Result<()> {
        let batch = Batch::new("Recall.update_state", y_true, y_pred, sample_weight)?;
        let positive = batch.pred.gt_scalar(self.threshold)?.cast(DType::F32)?;
        let [tp, _, fn_, _] = counts(&batch, &positive)?;
        self.true_positives.assign_add(&tp)?;
        self.false_negatives.assign_add(&fn_)
    }
}

impl Module for Recall {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(join(prefix, "true_positives"), &self.true_positives);
        f(join(prefix, "false_negatives"), &self.false_negatives);
    }
}

/// How [`Auc`] sums the area under the curve between two thresholds
/// (Keras' `summation_method`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Summation {
    /// The mean of the two heights: the trapezoidal rule (Keras' default,
    /// `"interpolation"`, for the ROC curve).
    #[default]
    Interpolation,
    /// The smaller of the two heights: a lower Riemann sum.
    Minoring,
    /// The larger of the two heights: an upper Riemann sum.
    Majoring,
}

/// `keras.metrics.AUC` for the ROC curve: the area under the true-positive
/// rate against the false-positive rate, approximated over fixed
/// thresholds. Keras' thresholds for `num_thresholds = T` (default 200):
/// `-1e-7`, then `i / (T - 1)` for `i` in `1..T-1`, then `1 + 1e-7`; at
/// each, the (weighted) confusion counts are kept in four `[T]` variables,
/// and the result sums `(fpr[i] - fpr[i+1]) * height(tpr[i], tpr[i+1])`
/// by the [`Summation`] rule. An update compares every example with every
/// threshold (`examples × T` values), as Keras' unbucketed path does.
/// As `T` grows the result tends to the exact ROC AUC (ties counting
/// half); a rate with no examples behind it is 0. The PR curve and multi-label forms are not offered.
///
/// ```
/// use xlafn::nn::metrics::{Auc, LabelMetric, Metric};
/// use xlafn::prelude::*;
/// let auc = Auc::new()?;
/// let y_true = Tensor::vector(&[0f32, 0., 1., 1.])?;
/// let y_pred = Tensor::vector(&[0.1f32, 0.4, 0.35, 0.8])?;
/// auc.update_state(&y_true, &y_pred, None)?;
/// assert!((auc.result()?.item::<f32>()? - 0.75).abs() < 1e-6);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Auc {
    true_positives: Variable,
    false_positives: Variable,
    false_negatives: Variable,
    true_negatives: Variable,
    thresholds: Vec<f32>,
    summation: Summation,
}

impl Auc {
    /// Keras' defaults: 200 thresholds, the trapezoidal rule.
    pub fn new() -> Result<Auc> {
        Auc::with_options(200, Summation::Interpolation)
    }

    /// `num_thresholds` (at least 2) and the summation rule.
    pub fn with_options(num_thresholds: usize, summation: Summation) -> Result<Auc> {
        if !(2..=1 << 20).contains(&num_thresholds) {
            return Err(Error::invalid(
                "Auc",
                format!("num_thresholds must be in 2..=1048576, got {num_thresholds}"),
            ));
        }
        let t = num_thresholds;
        let mut thresholds = Vec::with_capacity(t);
        thresholds.push((0.0 - 1e-7) as f32);
        thresholds.extend((1..t - 1).map(|i| (i as f64 / (t - 1) as f64) as f32));
        thresholds.push((1.0 + 1e-7) as f32);
        let dims = [t as i64];
        let var = |name: &str| state(&dims, DType::F32, &format!("auc/{name}"));
        Ok(Auc {
            true_positives: var("true_positives")?,
            false_positives: var("false_positives")?,
            false_negatives: var("false_negatives")?,
            true_negatives: var("true_negatives")?,
            thresholds,
            summation,
        })
    }

    /// The thresholds, ascending (f32, as the comparisons use them).
    pub fn thresholds(&self) -> &[f32] {
        &self.thresholds
    }
}

impl Metric for Auc {
    fn name(&self) -> &str {
        "auc"
    }

    fn result(&self) -> Result<Tensor> {
        let tp = self.true_positives.try_read()?;
        let fp = self.false_positives.try_read()?;
        let tpr = divide_no_nan(&tp, &tp.add(&self.false_negatives.try_read()?)?)?;
        let fpr = divide_no_nan(&fp, &fp.add(&self.true_negatives.try_read()?)?)?;
        let n = self.thresholds.len() as i64 - 1;
        let (x0, x1) = (fpr.slice(&[0], &[n])?, fpr.slice(&[1], &[n])?);
        let (y0, y1) = (tpr.slice(&[0], &[n])?, tpr.slice(&[1], &[n])?);
        let heights = match self.summation {
            Summation::Interpolation => y0.add(&y1)?.mul_scalar(0.5)?,
            Summation::Minoring => y0.minimum(&y1)?,
            Summation::Majoring => y0.maximum(&y1)?,
        };
        x0.sub(&x1)?.mul(&heights)?.reduce_sum(&[], false)
    }

    fn reset(&self) -> Result<()> {
        zero(&self.true_positives)?;
        zero(&self.false_positives)?;
        zero(&self.false_negatives)?;
        zero(&self.true_negatives)
    }
}

impl LabelMetric for Auc {
    /// Every entry of `y_true`/`y_pred` is one example (Keras'
    /// `multi_label=False`); the counts are `[examples, thresholds]`
    /// comparisons summed over the examples.
    fn update_state(
        &self,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
    ) -> Result<()> {
        let batch = Batch::new("Auc.update_state", y_true, y_pred, sample_weight)?;
        let t = self.thresholds.len() as i64;
        let thresholds = Tensor::from_vec(self.thresholds.clone(), &[1, t])?;
        // Keras 3 clips to [0, 1] before bucketing: an unclipped score
        // above `1 + 1e-7` would be positive at every threshold, and one
        // below `-1e-7` at none, leaving the ROC curve without its ends.
        let positive = batch
            .pred
            .maximum_scalar(0.0)?
            .minimum_scalar(1.0)?
            .expand_dims(-1)?
            .gt(&thresholds)?
            .cast(DType::F32)?;
        let [tp, fp, fn_, tn] = counts(&batch, &positive)?;
        self.true_positives.assign_add(&tp)?;
        self.false_positives.assign_add(&fp)?;
        self.false_negatives.assign_add(&fn_)?;
        self.true_negatives.assign_add(&tn)
    }
}

impl Module for Auc {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(join(prefix, "true_positives"), &self.true_positives);
        f(join(prefix, "false_positives"), &self.false_positives);
        f(join(prefix, "false_negatives"), &self.false_negatives);
        f(join(prefix, "true_negatives"), &self.true_negatives);
    }
}
