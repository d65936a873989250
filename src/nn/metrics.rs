//! Keras' streaming metrics (`keras.metrics`): each metric keeps its
//! running state in non-trainable [`Variable`]s, so `update_state` works
//! eagerly and inside a compiled [`function`](crate::function::function)
//! alike (the update becomes the variables' `assign_add`s in the program),
//! and a metric is a [`Module`]: checkpoints save and restore its state, and
//! optimizers never see it.
//!
//! - [`Mean`] and [`Sum`] accumulate values (with optional sample weights).
//! - The per-example metrics ([`Accuracy`], [`BinaryAccuracy`],
//!   [`CategoricalAccuracy`], [`SparseCategoricalAccuracy`],
//!   [`SparseTopKCategoricalAccuracy`], [`MeanSquaredError`],
//!   [`MeanAbsoluteError`]) compute one value per example from `(y_true,
//!   y_pred)` and keep their weighted mean in a [`Mean`] (Keras'
//!   `MeanMetricWrapper`); the functions they apply are public
//!   ([`accuracy`], [`binary_accuracy`], ...).
//! - [`Precision`], [`Recall`] and [`Auc`] keep confusion-matrix counts.
//!
//! Every metric is a [`Metric`] (`result`, `reset`); the ones updated from
//! labels and predictions are also a [`LabelMetric`], so a training loop
//! can hold a list of them as trait objects.
//!
//! ```
//! use xlafn::nn::metrics::{CategoricalAccuracy, LabelMetric, Metric};
//! use xlafn::prelude::*;
//! let acc = CategoricalAccuracy::new()?;
//! let y_true = Tensor::from_vec(vec![0f32, 1., 1., 0.], &[2, 2])?;
//! let y_pred = Tensor::from_vec(vec![0.3f32, 0.7, 0.4, 0.6], &[2, 2])?;
//! acc.update_state(&y_true, &y_pred, None)?; // 1 of 2 right
//! let step = function({
//!     let acc = acc.clone();
//!     move |t: Tensor, p: Tensor| acc.update_state(&t, &p, None)
//! });
//! step.call((y_true.slice(&[0, 0], &[1, 2])?, y_pred.slice(&[0, 0], &[1, 2])?))?; // 1 of 1
//! assert_eq!(acc.result()?.item::<f32>()?, 2.0 / 3.0);
//! acc.reset()?;
//! assert_eq!(acc.result()?.item::<f32>()?, 0.0);
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! Layer: a user-facing module over `tensor` ops, `variable`, `module` and
//! [`crate::nn::losses`] (the squared and absolute errors).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::{Module, join};
use crate::nn::losses::{self, Reduction};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// A streaming metric: state in variables, read by `result`, cleared by
/// `reset` (Keras' `Metric.result` and `reset_state`).
pub trait Metric: Module {
    /// Keras' default name for the metric (`"accuracy"`, `"auc"`).
    fn name(&self) -> &str;

    /// The metric over everything seen since the last reset (a scalar of
    /// the state's dtype). Only reads variables, so it also works inside
    /// a compiled function.
    fn result(&self) -> Result<Tensor>;

    /// Sets the state back to "nothing seen" (eagerly or in a function).
    fn reset(&self) -> Result<()>;
}

/// A metric updated from labels and predictions (every metric here but
/// [`Mean`] and [`Sum`], which take the values themselves).
pub trait LabelMetric: Metric {
    /// Adds a batch: `y_true` and `y_pred` as the metric documents, and
    /// an optional `sample_weight` of the per-example values' shape or a
    /// prefix of it (its leading axes; size-1 axes broadcast), or a scalar.
    fn update_state(
        &self,
        y_true: &Tensor,
        y_pred: &Tensor,
        sample_weight: Option<&Tensor>,
    ) -> Result<()>;
}

// ------------------------------------------------------------ helpers

/// A non-trainable state variable of zeros.
fn state(dims: &[i64], dtype: DType, name: &str) -> Result<Variable> {
    Ok(Variable::try_new(Tensor::try_zeros(dims, dtype)?)?
        .named(name)
        .non_trainable())
}

fn zero(v: &Variable) -> Result<()> {
    v.assign(&Tensor::try_zeros(v.dims(), v.dtype())?)
}

fn rank(op: &str, t: &Tensor) -> Result<usize> {
    t.shape().rank().ok_or_else(|| {
        Error::invalid(
            op,
            format!("needs a tensor of known rank, got {}", t.tensor_type()),
        )
    })
}

/// `a / b`, and 0 where `b` is 0 (Keras' `divide_no_nan`: a metric over
/// nothing is 0, not NaN).
fn divide_no_nan(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let empty = b.eq_scalar(0)?;
    let safe = empty.where_(&b.ones_like()?, b)?;
    empty.where_(&a.zeros_like()?, &a.div(&safe)?)
}

/// Whether two shapes can be the same (known dims equal; an unknown rank
/// or dim matches anything).
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

fn last_dim_is_one(t: &Tensor) -> bool {
    matches!(
        t.shape().dims().and_then(|d| d.last().copied()),
        Some(Some(1))
    )
}

/// Keras' `squeeze_or_expand_to_same_rank`: when the ranks differ by one
/// and the longer has a last axis of 1 (`[batch, 1]` labels against
/// `[batch]` predictions), that axis is dropped; then the shapes must match.
fn same_shape(op: &str, y_true: &Tensor, y_pred: &Tensor) -> Result<(Tensor, Tensor)> {
    let (rt, rp) = (rank(op, y_true)?, rank(op, y_pred)?);
    let (t, p) = if rt == rp + 1 && last_dim_is_one(y_true) {
        (y_true.squeeze(&[-1])?, y_pred.clone())
    } else if rp == rt + 1 && last_dim_is_one(y_pred) {
        (y_true.clone(), y_pred.squeeze(&[-1])?)
    } else {
        (y_true.clone(), y_pred.clone())
    };
    if !shapes_match(&t, &p) {
        return Err(Error::invalid(
            op,
            format!(
                "labels and predictions must have the same shape, got {} and {}",
                y_true.tensor_type(),
                y_pred.tensor_type()
            ),
        ));
    }
    Ok((t, p))
}

/// Checks that `weight`'s shape is a prefix of `values`' shape (size-1
/// axes broadcast) and returns its rank.
fn check_weight(op: &str, weight: &Tensor, values: &Tensor) -> Result<usize> {
    let (rw, rv) = (rank(op, weight)?, rank(op, values)?);
    let error = || {
        Error::invalid(
            op,
            format!(
                "sample_weight {} must have the shape of the values {} or of their leading axes \
                 (size-1 axes broadcast), or be a scalar",
                weight.tensor_type(),
                values.tensor_type()
            ),
        )
    };
    if rw > rv {
        return Err(error());
    }
    if let (Some(w), Some(v)) = (weight.shape().dims(), values.shape().dims()) {
        let fits = w.iter().zip(v).all(|(a, b)| match (a, b) {
            (Some(a), Some(b)) => a == b || *a == 1,
            _ => true,
        });
        if !fits {
            return Err(error());
        }
    }
    Ok(rw)
}

/// `weight` (checked by [`check_weight`]) broadcast to `like`'s shape:
/// trailing axes added, then multiplied by ones (so unknown dims work).
fn broadcast_weight(weight: &Tensor, like: &Tensor) -> Result<Tensor> {
    let mut w = weight.cast(like.dtype())?;
    for _ in rank("sample_weight", weight)?..rank("sample_weight", like)? {
        w = w.expand_dims(-1)?;
    }
    w.mul(&like.ones_like()?)
}

fn axes_from(start: usize, end: usize) -> Vec<i64> {
    (start as i64..end as i64).collect()
}

// ------------------------------------------------------------ Mean, Sum

/// `keras.metrics.Mean`: the (weighted) mean of everything seen, kept as
/// a running `total` and `count`.
///
/// Values are reduced per sample first, as Keras 3 does: without weights,
/// each sample (the leading axis) counts once, its value the mean of its
/// entries; with a `sample_weight` of rank `r` (a prefix of the values'
/// shape), values are averaged over their axes past `r`, multiplied by the
/// weight, and `count` grows by the weights' sum. So a scalar weight `w`
/// counts a whole batch as `w` samples. The result is `total / count`, or
/// 0 before anything with weight is seen.
///
/// ```
/// use xlafn::nn::metrics::{Mean, Metric};
/// use xlafn::prelude::*;
/// let m = Mean::new()?;
/// m.update_state(&Tensor::vector(&[1f32, 2., 3.])?, None)?;
/// m.update_state(&Tensor::vector(&[10f32])?, Some(&Tensor::vector(&[2f32])?))?;
/// assert_eq!(m.result()?.item::<f32>()?, (1.0 + 2.0 + 3.0 + 20.0) / 5.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Mean {
    total: Variable,
    count: Variable,
}

impl Mean {
    /// A mean kept in f32 (Keras' `floatx`).
    pub fn new() -> Result<Mean> {
        Mean::with_dtype(DType::F32)
    }

    /// A mean whose state (and result) has `dtype`, a float type.
    pub fn with_dtype(dtype: DType) -> Result<Mean> {
        if !dtype.is_float() {
            return Err(Error::Type(format!(
                "Mean: the state must be floating-point, got {dtype}"
            )));
        }
        Ok(Mean {
            total: state(&[], dtype, "mean/total")?,
            count: state(&[], dtype, "mean/count")?,
        })
    }

    /// Adds `values` (any real or boolean tensor, cast to the state's
    /// dtype), weighted by `sample_weight` as the type's docs say.
    pub fn update_state(&self, values: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        const OP: &str = "Mean.update_state";
        let v = values.cast(self.total.dtype())?;
        let rv = rank(OP, &v)?;
        let (weighted, weights) = match sample_weight {
            None => {
                let v = if rv > 1 {
                    v.reduce_mean(&axes_from(1, rv), false)?
                } else {
                    v
                };
                let ones = v.ones_like()?;
                (v, ones)
            }
            Some(w) => {
                let rw = check_weight(OP, w, &v)?;
                let v = if rv > rw {
                    v.reduce_mean(&axes_from(rw, rv), false)?
                } else {
                    v
                };
                let w = w.cast(v.dtype())?.mul(&v.ones_like()?)?;
                (v.mul(&w)?, w)
            }
        };
        self.total.assign_add(&weighted.reduce_sum(&[], false)?)?;
        self.count.assign_add(&weights.reduce_sum(&[], false)?)
    }

    /// The running weighted sum of the per-sample values.
    pub fn total(&self) -> &Variable {
        &self.total
    }

    /// The running sum of the weights (the number of samples unweighted).
    pub fn count(&self) -> &Variable {
        &self.count
    }
}

impl Metric for Mean {
    fn name(&self) -> &str {
        "mean"
    }

    fn result(&self) -> Result<Tensor> {
        divide_no_nan(&self.total.try_read()?, &self.count.try_read()?)
    }

    fn reset(&self) -> Result<()> {
        zero(&self.total)?;
        zero(&self.count)
    }
}

impl Module for Mean {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(join(prefix, "total"), &self.total);
        f(join(prefix, "count"), &self.count);
    }
}

/// `keras.metrics.Sum`: the (weighted) sum of everything seen. With a
/// `sample_weight` of rank `r`, values are summed over their axes past `r`
/// and multiplied by the weight.
#[derive(Clone, Debug)]
pub struct Sum {
    total: Variable,
}

impl Sum {
    /// A sum kept in f32.
    pub fn new() -> Result<Sum> {
        Sum::with_dtype(DType::F32)
    }

    /// A sum whose state has `dtype`, a float type.
    pub fn with_dtype(dtype: DType) -> Result<Sum> {
        if !dtype.is_float() {
            return Err(Error::Type(format!(
                "Sum: the state must be floating-point, got {dtype}"
            )));
        }
        Ok(Sum {
            total: state(&[], dtype, "sum/total")?,
        })
    }

    /// Adds `values`, weighted by `sample_weight` when given.
    pub fn update_state(&self, values: &Tensor, sample_weight: Option<&Tensor>) -> Result<()> {
        let v = values.cast(self.total.dtype())?;
        let v = match sample_weight {
            None => v,
            Some(w) => {
                let rw = check_weight("Sum.update_state", w, &v)?;
                let rv = rank("Sum.update_state", &v)?;
                let v = if rv > rw {
                    v.reduce_sum(&axes_from(rw, rv), false)?
                } else {
                    v
                };
                v.mul(&w.cast(v.dtype())?)?
            }
        };
        self.total.assign_add(&v.reduce_sum(&[], false)?)
    }
}

impl Metric for Sum {
    fn name(&self) -> &str {
        "sum"
    }

    fn result(&self) -> Result<Tensor> {
        self.total.try_read()
    }

    fn reset(&self) -> Result<()> {
        zero(&self.total)
    }
}

impl Module for Sum {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(join(prefix, "total"), &self.total);
    }
}

// ------------------------------------------------------ per-example values

/// `keras.metrics.accuracy`: 1 where `y_true == y_pred` exactly, else 0,
/// elementwise (f32), after a trailing size-1 axis is dropped from the
/// longer one; `y_true` is compared in `y_pred`'s dtype.
pub fn accuracy(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let (t, p) = same_shape("accuracy", y_true, y_pred)?;
    t.cast(p.dtype())?.eq(&p)?.cast(DType::F32)
}

/// `keras.metrics.binary_accuracy`: 1 where `(y_pred > threshold)` equals
/// `y_true` (taken as 0 or 1), elementwise (f32). The comparison is
/// strict, as Keras'; Keras' default threshold is 0.5.
pub fn binary_accuracy(y_true: &Tensor, y_pred: &Tensor, threshold: f64) -> Result<Tensor> {
    let (t, p) = same_shape("binary_accuracy", y_true, y_pred)?;
    let dtype = if p.dtype().is_float() {
        p.dtype()
    } else {
        DType::F32
    };
    let predicted = p.cast(dtype)?.gt_scalar(threshold)?.cast(dtype)?;
    t.cast(dtype)?.eq(&predicted)?.cast(DType::F32)
}

/// `keras.metrics.categorical_accuracy`: for one-hot (or scored) `y_true`
/// and `y_pred` of one shape `[..., classes]`, 1 where their argmaxes
/// agree, one value per example. Ties go to the lowest index on both sides.
pub fn categorical_accuracy(y_true: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    const OP: &str = "categorical_accuracy";
    if rank(OP, y_pred)? == 0 || !shapes_match(y_true, y_pred) {
        return Err(Error::invalid(
            OP,
            format!(
                "labels and predictions must have one shape [..., classes], got {} and {}",
                y_true.tensor_type(),
                y_pred.tensor_type()
            ),
        ));
    }
    y_true.argmax(-1)?.eq(&y_pred.argmax(-1)?)?.cast(DType::F32)
}

/// Checks sparse labels `[...]` (or `[..., 1]`) against predictions
/// `[..., classes]` and returns the labels as `[...]` of i64.
fn sparse_labels(op: &str, labels: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let (rl, rp) = (rank(op, labels)?, rank(op, y_pred)?);
    let labels = if rl == rp && rl > 0 && last_dim_is_one(labels) {
        labels.squeeze(&[-1])?
    } else {
        labels.clone()
    };
    let fits = match (labels.shape().dims(), y_pred.shape().dims()) {
        (Some(l), Some(p)) => {
            l.len() + 1 == p.len()
                && l.iter().zip(p).all(|(a, b)| match (a, b) {
                    (Some(a), Some(b)) => a == b,
                    _ => true,
                })
        }
        _ => true,
    };
    let d = labels.dtype();
    if !fits || !(d.is_int() || d.is_float()) {
        return Err(Error::invalid(
            op,
            format!(
                "needs class labels [...] (or [..., 1]) and predictions [..., classes] with the \
                 same leading axes, got {} and {}",
                labels.tensor_type(),
                y_pred.tensor_type()
            ),
        ));
    }
    labels.cast(DType::I64)
}

/// `keras.metrics.sparse_categorical_accuracy`: 1 where the integer label
/// (`[...]` or `[..., 1]`; float labels are truncated) is the argmax of
/// `y_pred` `[..., classes]` (ties: the lowest index), one value per example.
pub fn sparse_categorical_accuracy(labels: &Tensor, y_pred: &Tensor) -> Result<Tensor> {
    let l = sparse_labels("sparse_categorical_accuracy", labels, y_pred)?;
    l.eq(&y_pred.argmax(-1)?)?.cast(DType::F32)
}

/// `tf.math.in_top_k` (and Keras' `ops.in_top_k`): whether each target's
/// prediction is among the `k` largest of its row, as booleans `[...]` for
/// `targets` `[...]` and `predictions` `[..., classes]`.
///
/// Ties: a target is in the top `k` when fewer than `k` classes have a
/// *strictly* larger prediction, so classes tied at the boundary are all
/// in (with `k = 1` and a row of equal scores, every class is). A NaN
/// prediction for the target counts as -inf. A target outside
/// `0..classes` (where TensorFlow raises) has no prediction: it counts as
/// -inf too. The number of classes must be known; the leading axes may
/// be unknown (a traced batch of any size).
pub fn in_top_k(targets: &Tensor, predictions: &Tensor, k: i64) -> Result<Tensor> {
    const OP: &str = "in_top_k";
    if k < 1 {
        return Err(Error::invalid(OP, format!("k must be at least 1, got {k}")));
    }
    let t = sparse_labels(OP, targets, predictions)?;
    if !predictions.dtype().is_float() {
        return Err(Error::Type(format!(
            "{OP}: predictions must be floating-point, got {}",
            predictions.tensor_type()
        )));
    }
    let Some(Some(classes)) = predictions.shape().dims().and_then(|d| d.last().copied()) else {
        return Err(Error::invalid(
            OP,
            format!(
                "needs a known number of classes (axis -1), got {}",
                predictions.tensor_type()
            ),
        ));
    };
    // The target's prediction, picked by a one-hot mask rather than a
    // gather (which needs every dimension known); -inf elsewhere.
    let neg_inf = predictions.fill_like(f64::NEG_INFINITY)?;
    let mask = t.one_hot(classes, 1.0, 0.0, DType::F32)?.gt_scalar(0.5)?;
    let at_label = mask
        .where_(predictions, &neg_inf)?
        .reduce_max(&[-1], true)?;
    let at_label = at_label
        .is_nan()?
        .where_(&at_label.fill_like(f64::NEG_INFINITY)?, &at_label)?;
    let larger = predictions
        .gt(&at_label)?
        .cast(DType::I64)?
        .reduce_sum(&[-1], false)?;
    larger.lt_scalar(k)
}

/// `keras.metrics.sparse_top_k_categorical_accuracy`: 1 where the label is
/// [`in_top_k`] of `y_pred` (ties at the boundary count as in), one value
/// per example. Keras' default `k` is 5.
pub fn sparse_top_k_categorical_accuracy(
    labels: &Tensor,
    y_pred: &Tensor,
    k: i64,
) -> Result<Tensor> {
    in_top_k(labels, y_pred, k)?.cast(DType::F32)
}

// ------------------------------------------------------ mean metrics

/// Writes a metric that keeps the weighted [`Mean`] of a per-example
/// function (Keras' `MeanMetricWrapper`).
macro_rules! mean_metric {
    ($(#[$doc:meta])* $ty:ident, $name:literal, $per_example:expr) => {
        $(#[$doc])*
        #[derive(Clone, Debug)]
        pub struct $ty {
            mean: Mean,
            params: Params,
        }

        impl Metric for $ty {
            fn name(&self) -> &str {
                $name
            }

            fn result(&self) -> Result<Tensor> {
                self.mean.result()
            }

            fn reset(&self) -> Result<()> {
                self.mean.reset()
            }
        }

        impl LabelMetric for $ty {
            fn update_state(
                &self,
                y_true: &Tensor,
                y_pred: &Tensor,
                sample_weight: Option<&Tensor>,
            ) -> Result<()> {
                let per_example: PerExample = $per_example;
                let values = per_example(&self.params, y_true, y_pred)?;
                self.mean.update_state(&values, sample_weight)
            }
        }

        /// The running `total` and `count` of its [`Mean`].
        impl Module for $ty {
            fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
                self.mean.visit_variables(prefix, f);
            }
        }
    };
}

/// A per-example function of the options, labels and predictions.
type PerExample = fn(&Params, &Tensor, &Tensor) -> Result<Tensor>;

/// The options of the per-example metrics (a threshold or `k`).
#[derive(Clone, Copy, Debug, Default)]
struct Params {
    threshold: f64,
    k: i64,
}

mean_metric!(
    /// `keras.metrics.Accuracy`: how often `y_pred` equals `y_true` exactly
    /// (see [`accuracy`]).
    Accuracy,
    "accuracy",
    |_, y_true, y_pred| accuracy(y_true, y_pred)
);

mean_metric!(
    /// `keras.metrics.BinaryAccuracy`: how often `y_pred > threshold`
    /// matches the 0/1 `y_true` (see [`binary_accuracy`]).
    BinaryAccuracy,
    "binary_accuracy",
    |params, y_true, y_pred| binary_accuracy(y_true, y_pred, params.threshold)
);

mean_metric!(
    /// `keras.metrics.CategoricalAccuracy`: how often the argmaxes of
    /// one-hot `y_true` and `y_pred` agree (see [`categorical_accuracy`]).
    CategoricalAccuracy,
    "categorical_accuracy",
    |_, y_true, y_pred| categorical_accuracy(y_true, y_pred)
);

mean_metric!(
    /// `keras.metrics.SparseCategoricalAccuracy`: how often the integer
    /// label is the argmax of `y_pred` (see [`sparse_categorical_accuracy`]).
    SparseCategoricalAccuracy,
    "sparse_categorical_accuracy",
    |_, y_true, y_pred| sparse_categorical_accuracy(y_true, y_pred)
);

mean_metric!(
    /// `keras.metrics.SparseTopKCategoricalAccuracy`: how often the integer
    /// label is among the `k` largest predictions, ties at the boundary
    /// counting as in (see [`in_top_k`]).
    SparseTopKCategoricalAccuracy,
    "sparse_top_k_categorical_accuracy",
    |params, y_true, y_pred| sparse_top_k_categorical_accuracy(y_true, y_pred, params.k)
);

mean_metric!(
    /// `keras.metrics.MeanSquaredError`: the mean of
    /// [`losses::mean_squared_error`]'s per-example values (each the mean
    /// over the last axis).
    MeanSquaredError,
    "mean_squared_error",
    |_, y_true, y_pred| losses::mean_squared_error(y_true, y_pred, Reduction::None)
);

mean_metric!(
    /// `keras.metrics.MeanAbsoluteError`: the mean of
    /// [`losses::mean_absolute_error`]'s per-example values.
    MeanAbsoluteError,
    "mean_absolute_error",
    |_, y_true, y_pred| losses::mean_absolute_error(y_true, y_pred, Reduction::None)
);

impl Accuracy {
    /// A fresh metric (state in f32).
    pub fn new() -> Result<Self> {
        Self::with(Params::default())
    }
}

impl CategoricalAccuracy {
    /// A fresh metric (state in f32).
    pub fn new() -> Result<Self> {
        Self::with(Params::default())
    }
}

impl SparseCategoricalAccuracy {
    /// A fresh metric (state in f32).
    pub fn new() -> Result<Self> {
        Self::with(Params::default())
    }
}

impl MeanSquaredError {
    /// A fresh metric (state in f32).
    pub fn new() -> Result<Self> {
        Self::with(Params::default())
    }
}

impl MeanAbsoluteError {
    /// A fresh metric (state in f32).
    pub fn new() -> Result<Self> {
        Self::with(Params::default())
    }
}

impl BinaryAccuracy {
    /// Keras' default threshold, 0.5.
    pub fn new() -> Result<Self> {
        Self::with_threshold(0.5)
    }

    /// Predictions strictly above `threshold` count as 1.
    pub fn with_threshold(threshold: f64) -> Result<Self> {
        if threshold.is_nan() {
            return Err(Error::invalid("BinaryAccuracy", "the threshold is NaN"));
        }
        Self::with(Params { threshold, k: 0 })
    }
}

impl SparseTopKCategoricalAccuracy {
    /// Keras' default `k`, 5.
    pub fn new() -> Result<Self> {
        Self::with_k(5)
    }

    /// A label counts as right when in the top `k` (at least 1).
    pub fn with_k(k: i64) -> Result<Self> {
        if k < 1 {
            return Err(Error::invalid(
                "SparseTopKCategoricalAccuracy",
                format!("k must be at least 1, got {k}"),
            ));
        }
        Self::with(Params { threshold: 0.0, k })
    }
}

macro_rules! with_params {
    ($($ty:ident),*) => {$(
        impl $ty {
            fn with(params: Params) -> Result<Self> {
                Ok($ty { mean: Mean::new()?, params })
            }

            /// The [`Mean`] holding the running state.
            pub fn mean(&self) -> &Mean {
                &self.mean
            }
        }
    )*};
}

with_params!(
    Accuracy,
    BinaryAccuracy,
    CategoricalAccuracy,
    SparseCategoricalAccuracy,
    SparseTopKCategoricalAccuracy,
    MeanSquaredError,
    MeanAbsoluteError
);

mod confusion;
pub use confusion::{Auc, Precision, Recall, Summation};
