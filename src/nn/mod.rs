//! Neural-network helpers in TensorFlow's names: losses
//! (`softmax_cross_entropy_with_logits`, the sparse form by gathering each
//! row's label, no one-hot), `layer_norm`, `batch_norm` with moving
//! statistics in variables, `embedding_lookup`, and `dropout` (key-based,
//! from [`crate::random`]). `log_softmax`/`softmax` are `Tensor` methods.
//!
//! Keras' losses with `mean`/`sum`/`none` reductions are in [`losses`];
//! mixed-precision policies for the layers in [`mixed_precision`].
//!
//! Layer: a user-facing module over `tensor` ops and `variable`.

pub mod layers;
pub mod losses;
pub mod metrics;
pub mod mixed_precision;
pub mod positional;

use crate::error::{Error, Result};
use crate::tensor::Tensor;

pub use crate::random::dropout;
/// The batch-normalization layer, now in [`layers`] with the others.
pub use layers::BatchNorm;

/// `tf.nn.softmax_cross_entropy_with_logits`: `-sum(labels *
/// log_softmax(logits))` along the last axis, one loss per row.
#[track_caller]
pub fn softmax_cross_entropy_with_logits(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
    labels
        .mul(&logits.log_softmax(-1)?)?
        .reduce_sum(&[-1], false)?
        .neg()
}

/// `tf.nn.sparse_softmax_cross_entropy_with_logits`: for integer `labels`
/// `[batch]` and `logits` `[batch, classes]`, `logsumexp(row) -
/// row[label]`, computed by gathering the label's logit (no one-hot).
/// Labels outside `0..classes` read the nearest class (XLA clamps), where
/// TensorFlow raises on CPU.
#[track_caller]
pub fn sparse_softmax_cross_entropy_with_logits(
    labels: &Tensor,
    logits: &Tensor,
) -> Result<Tensor> {
    let (l, z) = (labels.tensor_type(), logits.tensor_type());
    let ok = l.dtype.is_int() && l.shape.rank() == Some(1) && z.shape.rank() == Some(2);
    if !ok {
        return Err(Error::invalid(
            "sparse_softmax_cross_entropy_with_logits",
            format!("needs integer labels [batch] and logits [batch, classes], got {l} and {z}"),
        ));
    }
    let picked = logits.gather_along_axis(&labels.expand_dims(1)?, 1)?;
    logits
        .reduce_logsumexp(&[1], true)?
        .sub(&picked)?
        .squeeze(&[1])
}

/// Layer normalization over `axes`: `(x - mean) / sqrt(var + epsilon)`,
/// then `* gamma + beta` when given (broadcast against `x`).
#[track_caller]
pub fn layer_norm(
    x: &Tensor,
    axes: &[i64],
    gamma: Option<&Tensor>,
    beta: Option<&Tensor>,
    epsilon: f64,
) -> Result<Tensor> {
    let (mean, var) = x.moments(axes, true)?;
    let y = x.sub(&mean)?.mul(&var.add_scalar(epsilon)?.rsqrt()?)?;
    let y = match gamma {
        Some(g) => y.mul(g)?,
        None => y,
    };
    match beta {
        Some(b) => y.add(b),
        None => Ok(y),
    }
}

/// `tf.nn.embedding_lookup`: rows of `params` at `ids`.
#[track_caller]
pub fn embedding_lookup(params: &Tensor, ids: &Tensor) -> Result<Tensor> {
    params.gather(ids, 0)
}
