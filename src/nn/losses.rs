//! Keras' losses (`keras.losses`), each a function of `(y_true, y_pred)`
//! written with the public `Tensor` ops: they run eagerly and inside
//! compiled functions alike, and the tape differentiates them like any
//! other op sequence.
//!
//! Every loss first computes one value per example (Keras' semantics: the
//! mean over the last axis for [`mean_squared_error`],
//! [`mean_absolute_error`], [`huber`] and the binary cross-entropies; the
//! sum over the last axis for the categorical ones, [`kl_divergence`] and
//! [`cosine_similarity`]), then applies a [`Reduction`] over what is left:
//! the mean (the default), the sum, or none (the per-example values).
//!
//! Half-precision predictions (float16, bfloat16: a mixed-precision
//! model's logits) are cast to float32 first and the loss is float32, as
//! Keras' losses compute in float32: a half-precision log-softmax or mean
//! over a batch keeps few digits.
//!
//! The categorical cross-entropies take a [`CrossEntropy`] builder for
//! their options (`from_logits`, `label_smoothing`, `ignore_index`, the
//! reduction); the others take the reduction directly.
//!
//! ```
//! use xlafn::nn::losses::{self, Reduction};
//! use xlafn::prelude::*;
//! let y_true = Tensor::from_vec(vec![0.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
//! let y_pred = Tensor::from_vec(vec![1.0f32, 1.0, 1.0, 0.0], &[2, 2])?;
//! // Per example: mean((0-1)², (1-1)²) = 0.5 and 0; their mean is 0.25.
//! let mse = losses::mean_squared_error(&y_true, &y_pred, Reduction::Mean)?;
//! assert_eq!(mse.item::<f32>()?, 0.25);
//! let each = losses::mean_squared_error(&y_true, &y_pred, Reduction::None)?;
//! assert_eq!(each.to_vec::<f32>()?, vec![0.5, 0.0]);
//! # Ok::<(), xlafn::Error>(())
//! ```

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// Keras' clipping epsilon (`keras.config.epsilon()`): probabilities are
/// clipped to `[EPSILON, 1 - EPSILON]` before their logarithm.
pub const EPSILON: f64 = 1e-7;

/// How a loss turns its per-example values into its result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Reduction {
    /// The mean over every per-example value (Keras' `"sum_over_batch_size"`,
    /// its default, and PyTorch's `"mean"`): the sum divided by the number
    /// of values. With [`CrossEntropy::ignore_index`], the ignored rows count
    /// in neither the sum nor the count.
    #[default]
    Mean,
    /// The sum of the per-example values (Keras' `"sum"`).
    Sum,
    /// No reduction: the per-example values, the shape of `y_pred` without
    /// its last axis (Keras' `None` / `"none"`).
    None,
}

impl Reduction {
    /// Applies the reduction to per-example losses.
    #[track_caller]
    pub fn apply(self, per_example: &Tensor) -> Result<Tensor> {
        match self {
            Reduction::Mean => per_example.reduce_mean(&[], false),
            Reduction::Sum => per_example.reduce_sum(&[], false),
            Reduction::None => Ok(per_example.clone()),
        }
    }
}

/// Options of [`categorical_cross_entropy`] and
/// [`sparse_categorical_cross_entropy`], built like the optimizers' options:
/// `CrossEntropy::new().from_logits(true).label_smoothing(0.1)`.
///
/// The defaults are Keras': probabilities (not logits), no label smoothing,
/// no ignored label, [`Reduction::Mean`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct CrossEntropy {
    /// Whether `y_pred` holds logits (a log-softmax is applied) rather than
    /// probabilities (normalized to sum 1 over the last axis, clipped to
    /// `[EPSILON, 1 - EPSILON]`, then logged, as Keras does).
    pub from_logits: bool,
    /// In `[0, 1]`: the targets become `y * (1 - s) + s / classes`
    /// (Keras' `label_smoothing`; for sparse labels, PyTorch's).
    pub label_smoothing: f64,
    /// Sparse labels only: rows whose label equals this contribute 0 and
    /// are left out of [`Reduction::Mean`]'s denominator (PyTorch's
    /// `ignore_index`, Keras' `ignore_class`). When every row is ignored
    /// the mean is 0.
    pub ignore_index: Option<i64>,
    /// The reduction over the per-example losses.
    pub reduction: Reduction,
}

impl CrossEntropy {
    /// Keras' defaults: probabilities, no smoothing, nothing ignored, mean.
    pub fn new() -> CrossEntropy {
        CrossEntropy::default()
    }

    /// Sets whether `y_pred` holds logits.
    pub fn from_logits(mut self, from_logits: bool) -> Self {
        self.from_logits = from_logits;
        self
    }

    /// Sets the label smoothing (in `[0, 1]`).
    pub fn label_smoothing(mut self, smoothing: f64) -> Self {
        self.label_smoothing = smoothing;
        self
    }

    /// Sets the sparse label whose rows are ignored.
    pub fn ignore_index(mut self, label: i64) -> Self {
        self.ignore_index = Some(label);
        self
    }

    /// Sets the reduction.
    pub fn reduction(mut self, reduction: Reduction) -> Self {
        self.reduction = reduction;
        self
    }

    fn check(&self, op: &str) -> Result<()> {
        if !(0.0..=1.0).contains(&self.label_smoothing) {
            return Err(Error::invalid(
                op,
                format!(
                    "label_smoothing must be in [0, 1], got {}",
                    self.label_smoothing
                ),
            ));
        }
        Ok(())
    }
}

// ------------------------------------------------------------- checks

/// `y_pred` must be floating-point with at least one axis.
fn check_pred(op: &str, y_pred: &Tensor) -> Result<()> {
    let t = y_pred.tensor_type();
    if !t.dtype.is_float() {
        return Err(Error::Type(format!(
            "{op}: predictions must be floating-point, got {t}"
        )));
    }
    if t.shape.rank() == Some(0) {
        return Err(Error::invalid(
            op,
            format!("predictions need at least one axis (the last is reduced), got {t}"),
        ));
    }
    Ok(())
}

/// Whether two shapes can be the same: equal ranks and equal dims wherever
/// both are known (an unknown rank matches anything).
fn shapes_match(a: &Tensor, b: &Tensor) -> bool {
    match (a.shape().dims(), b.shape().dims()) {
        (Some(x), Some(y)) => {
            x.len() == y.len()
                && x.iter().zip(y).all(|(p, q)| match (p, q) {
                    (Some(p), Some(q)) => p == q,
                    _ => true,
                })
        }
        _ => true,
    }
}

/// Checks dense `(y_true, y_pred)` and returns `y_true` in `y_pred`'s dtype.
fn dense_pair(op: &str, y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    check_pred(op, y_pred)?;
    let d = y_true.dtype();
    if !(d.is_numeric() || d == DType::Bool) {
        return Err(Error::Type(format!(
            "{op}: labels must be real numbers or booleans, got {}",
            y_true.tensor_type()
        )));
    }
    if !shapes_match(y_true, y_pred) {
        return Err(Error::invalid(
            op,
            format!(
                "labels and predictions must have the same shape, got {} and {}",
                y_true.tensor_type(),
                y_pred.tensor_type()
            ),
        ));
    }
    if d == y_pred.dtype() {
        Ok(y_true.clone())
    } else {
        y_true.cast(y_pred.dtype())
    }
}

/// `y_pred` in the dtype the loss computes in: float32 for half
/// precision, else its own.
fn widened(y_pred: &Tensor) -> Result<Tensor> {
    match y_pred.dtype() {
        DType::F16 | DType::BF16 => y_pred.cast(DType::F32),
        _ => Ok(y_pred.clone()),
    }
}

// ------------------------------------------------------------- losses

/// `keras.losses.mean_squared_error`: `mean((y_true - y_pred)², axis=-1)`
/// per example, then `reduction`.
#[track_caller]
pub fn mean_squared_error(
    y_true: &Tensor,
    y_pred: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("mean_squared_error", y_true, y_pred)?;
    reduction.apply(&y_pred.sub(&y)?.square()?.reduce_mean(&[-1], false)?)
}

/// `keras.losses.mean_absolute_error`: `mean(|y_true - y_pred|, axis=-1)`
/// per example, then `reduction`.
#[track_caller]
pub fn mean_absolute_error(
    y_true: &Tensor,
    y_pred: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("mean_absolute_error", y_true, y_pred)?;
    reduction.apply(&y_pred.sub(&y)?.abs()?.reduce_mean(&[-1], false)?)
}

/// `keras.losses.huber`: for `e = |y_pred - y_true|`, `e² / 2` where
/// `e <= delta` and `delta * e - delta² / 2` beyond, averaged over the last
/// axis per example, then `reduction`. Keras' default `delta` is 1.
#[track_caller]
pub fn huber(y_true: &Tensor, y_pred: &Tensor, delta: f64, reduction: Reduction) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("huber", y_true, y_pred)?;
    if delta.is_nan() || delta <= 0.0 {
        return Err(Error::invalid(
            "huber",
            format!("delta must be positive, got {delta}"),
        ));
    }
    let e = y_pred.sub(&y)?.abs()?;
    // Branch-free: the quadratic part up to delta, the linear part beyond.
    let quadratic = e.minimum_scalar(delta)?;
    let linear = e.sub(&quadratic)?;
    let per = quadratic
        .square()?
        .mul_scalar(0.5)?
        .add(&linear.mul_scalar(delta)?)?;
    reduction.apply(&per.reduce_mean(&[-1], false)?)
}

/// `keras.losses.binary_crossentropy` on probabilities: `y_pred` clipped to
/// `[EPSILON, 1 - EPSILON]`, `-(y log p + (1 - y) log(1 - p))` averaged
/// over the last axis per example, then `reduction`.
#[track_caller]
pub fn binary_cross_entropy(
    y_true: &Tensor,
    y_pred: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("binary_cross_entropy", y_true, y_pred)?;
    let p = y_pred.clip_by_value_scalar(EPSILON, 1.0 - EPSILON)?;
    let log_p = p.log()?;
    let log_q = p.neg()?.log1p()?;
    let per = y
        .mul(&log_p)?
        .add(&y.neg()?.add_scalar(1.0)?.mul(&log_q)?)?
        .neg()?;
    reduction.apply(&per.reduce_mean(&[-1], false)?)
}

/// `keras.losses.binary_crossentropy(from_logits=True)` (TensorFlow's
/// `sigmoid_cross_entropy_with_logits`) in its stable form, finite for any
/// logit `x` and target `z`: `max(x, 0) - x z + log1p(exp(-|x|))`, averaged
/// over the last axis per example, then `reduction`.
///
/// ```
/// use xlafn::nn::losses::{self, Reduction};
/// use xlafn::prelude::*;
/// let labels = Tensor::from_vec(vec![1.0f64, 0.0], &[1, 2])?;
/// let logits = Tensor::from_vec(vec![1000.0f64, -1000.0], &[1, 2])?;
/// let loss = losses::binary_cross_entropy_with_logits(&labels, &logits, Reduction::Sum)?;
/// assert_eq!(loss.item::<f64>()?, 0.0); // right and sure: no overflow
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn binary_cross_entropy_with_logits(
    y_true: &Tensor,
    logits: &Tensor,
    reduction: Reduction,
) -> Result<Tensor> {
    let logits = &widened(logits)?;
    let z = dense_pair("binary_cross_entropy_with_logits", y_true, logits)?;
    let per = logits
        .relu()?
        .sub(&logits.mul(&z)?)?
        .add(&logits.abs()?.neg()?.exp()?.log1p()?)?;
    reduction.apply(&per.reduce_mean(&[-1], false)?)
}

/// Log-probabilities over the last axis: a log-softmax of logits, or
/// Keras' normalized and clipped probabilities, logged.
fn log_probabilities(y_pred: &Tensor, from_logits: bool) -> Result<Tensor> {
    if from_logits {
        return y_pred.log_softmax(-1);
    }
    y_pred
        .div(&y_pred.reduce_sum(&[-1], true)?)?
        .clip_by_value_scalar(EPSILON, 1.0 - EPSILON)?
        .log()
}

/// The number of classes (the last axis of `y_pred`), which must be known
/// for label smoothing.
fn classes(op: &str, y_pred: &Tensor) -> Result<i64> {
    match y_pred.shape().dims().and_then(|d| d.last().copied()) {
        Some(Some(c)) => Ok(c),
        _ => Err(Error::invalid(
            op,
            format!(
                "label smoothing needs a known number of classes (axis -1), got {}",
                y_pred.tensor_type()
            ),
        )),
    }
}

/// `keras.losses.categorical_crossentropy`: for one-hot (or any
/// distribution) `y_true` and `y_pred` of one shape `[..., classes]`,
/// `-sum(y_true * log p, axis=-1)` per example, then the options'
/// reduction. `p` is `softmax(y_pred)` with
/// [`from_logits`](CrossEntropy::from_logits), else `y_pred` normalized and
/// clipped. `ignore_index` is refused here (it needs sparse labels).
///
/// ```
/// use xlafn::nn::losses::{self, CrossEntropy};
/// use xlafn::prelude::*;
/// let onehot = Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2])?;
/// let probs = Tensor::from_vec(vec![0.5f64, 0.5], &[1, 2])?;
/// let loss = losses::categorical_cross_entropy(&onehot, &probs, CrossEntropy::new())?;
/// assert!((loss.item::<f64>()? - 2f64.ln()).abs() < 1e-12);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn categorical_cross_entropy(
    y_true: &Tensor,
    y_pred: &Tensor,
    options: CrossEntropy,
) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    const OP: &str = "categorical_cross_entropy";
    options.check(OP)?;
    if options.ignore_index.is_some() {
        return Err(Error::invalid(
            OP,
            "ignore_index needs integer class labels: use sparse_categorical_cross_entropy",
        ));
    }
    let mut y = dense_pair(OP, y_true, y_pred)?;
    let s = options.label_smoothing;
    if s > 0.0 {
        let c = classes(OP, y_pred)?;
        y = y.mul_scalar(1.0 - s)?.add_scalar(s / c as f64)?;
    }
    let log_p = log_probabilities(y_pred, options.from_logits)?;
    let per = y.mul(&log_p)?.reduce_sum(&[-1], false)?.neg()?;
    options.reduction.apply(&per)
}

/// `keras.losses.sparse_categorical_crossentropy`: integer `labels` of
/// shape `[...]` and `y_pred` `[..., classes]`; `-log p[label]` per
/// example (the label's log-probability is gathered, no one-hot), then the
/// options' reduction.
///
/// With label smoothing `s` (as PyTorch's `cross_entropy`), the loss is
/// `(1 - s) * -log p[label] + s * mean(-log p)` over the classes, the
/// categorical loss of the smoothed one-hot. With `ignore_index`, rows whose
/// label is that index give 0 and [`Reduction::Mean`] divides by the
/// number of the other rows. Labels outside `0..classes` (other than the
/// ignored one) read the nearest class, as XLA clamps gathers.
#[track_caller]
pub fn sparse_categorical_cross_entropy(
    labels: &Tensor,
    y_pred: &Tensor,
    options: CrossEntropy,
) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    const OP: &str = "sparse_categorical_cross_entropy";
    options.check(OP)?;
    check_pred(OP, y_pred)?;
    let (l, z) = (labels.tensor_type(), y_pred.tensor_type());
    if !l.dtype.is_int() {
        return Err(Error::Type(format!(
            "{OP}: labels must be integer class indices, got {l}"
        )));
    }
    let fits = match (l.shape.dims(), z.shape.dims()) {
        (Some(ld), Some(zd)) => {
            ld.len() + 1 == zd.len()
                && ld.iter().zip(zd).all(|(p, q)| match (p, q) {
                    (Some(p), Some(q)) => p == q,
                    _ => true,
                })
        }
        _ => true,
    };
    if !fits {
        return Err(Error::invalid(
            OP,
            format!(
                "labels [...] need predictions [..., classes] with the same leading axes, \
                 got {l} and {z}"
            ),
        ));
    }
    let mask = match options.ignore_index {
        Some(ignored) => Some(labels.ne_scalar(ignored)?),
        None => None,
    };
    // Ignored rows gather class 0 (a finite value, then masked away).
    let safe = match &mask {
        Some(m) => m.where_(labels, &labels.zeros_like()?)?,
        None => labels.clone(),
    };
    let log_p = log_probabilities(y_pred, options.from_logits)?;
    let picked = log_p
        .gather_along_axis(&safe.expand_dims(-1)?, -1)?
        .squeeze(&[-1])?;
    let mut per = picked.neg()?;
    let s = options.label_smoothing;
    if s > 0.0 {
        // The categorical loss of `y (1 - s) + s / classes`: the `s /
        // classes` part is `s` times the mean of `-log p` over the classes.
        let uniform = log_p.reduce_mean(&[-1], false)?.neg()?;
        per = per.mul_scalar(1.0 - s)?.add(&uniform.mul_scalar(s)?)?;
    }
    let Some(mask) = mask else {
        return options.reduction.apply(&per);
    };
    let per = mask.where_(&per, &per.zeros_like()?)?;
    match options.reduction {
        Reduction::Mean => {
            let count = mask
                .cast(per.dtype())?
                .reduce_sum(&[], false)?
                .maximum_scalar(1.0)?;
            per.reduce_sum(&[], false)?.div(&count)
        }
        r => r.apply(&per),
    }
}

/// `keras.losses.kl_divergence`: both distributions clipped to
/// `[EPSILON, 1]`, `sum(y_true * log(y_true / y_pred), axis=-1)` per
/// example, then `reduction`.
#[track_caller]
pub fn kl_divergence(y_true: &Tensor, y_pred: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("kl_divergence", y_true, y_pred)?;
    let t = y.clip_by_value_scalar(EPSILON, 1.0)?;
    let p = y_pred.clip_by_value_scalar(EPSILON, 1.0)?;
    let per = t.mul(&t.div(&p)?.log()?)?.reduce_sum(&[-1], false)?;
    reduction.apply(&per)
}

/// `keras.losses.cosine_similarity` as a loss: the negative cosine
/// similarity along the last axis, `-sum(l2_normalize(y_true) *
/// l2_normalize(y_pred), axis=-1)` per example (−1 for the same direction,
/// 0 for orthogonal or zero vectors), then `reduction`.
#[track_caller]
pub fn cosine_similarity(y_true: &Tensor, y_pred: &Tensor, reduction: Reduction) -> Result<Tensor> {
    let y_pred = &widened(y_pred)?;
    let y = dense_pair("cosine_similarity", y_true, y_pred)?;
    let a = y.l2_normalize(&[-1], 1e-12)?;
    let b = y_pred.l2_normalize(&[-1], 1e-12)?;
    reduction.apply(&a.mul(&b)?.reduce_sum(&[-1], false)?.neg()?)
}
