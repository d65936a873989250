//! Neural-network helpers in TensorFlow's names (#15 item 10): losses
//! (`softmax_cross_entropy_with_logits`, the sparse form by gathering each
//! row's label, no one-hot), `layer_norm`, `batch_norm` with moving
//! statistics in variables, `embedding_lookup`, and `dropout` (key-based,
//! from [`crate::random`]). `log_softmax`/`softmax` are `Tensor` methods.
//!
//! Keras' losses with `mean`/`sum`/`none` reductions are in [`losses`].
//!
//! Layer: a user-facing module over `tensor` ops and `variable`.

pub mod layers;
pub mod losses;
pub mod metrics;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

pub use crate::random::dropout;

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
    let picked = logits.take_along_axis(&labels.expand_dims(1)?, 1)?;
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

/// Batch normalization over the leading axes of a channels-last input
/// (Keras' `BatchNormalization`): in training, each batch is normalized
/// by its own statistics and the moving statistics move toward them by
/// `1 - momentum`; in inference the moving statistics are used. Its four
/// variables work eagerly and inside compiled training steps.
#[derive(Clone, Debug)]
pub struct BatchNorm {
    /// The learned per-channel scale applied after normalizing (starts at 1).
    pub gamma: Variable,
    /// The learned per-channel offset added after scaling (starts at 0).
    pub beta: Variable,
    /// The running mean used in inference, moved by training calls rather
    /// than by an optimizer: a non-trainable variable (Keras' too).
    pub moving_mean: Variable,
    /// The running variance used in inference, moved like `moving_mean`.
    pub moving_variance: Variable,
    /// How much of the old moving statistics each training batch keeps
    /// (Keras' default 0.99).
    pub momentum: f64,
    /// Added to the variance before the square root, for stability
    /// (Keras' default 0.001).
    pub epsilon: f64,
}

impl BatchNorm {
    /// For `channels` features of `dtype`: gamma 1, beta 0, moving mean 0,
    /// moving variance 1; Keras' momentum 0.99 and epsilon 0.001.
    pub fn new(channels: i64, dtype: DType) -> Result<BatchNorm> {
        let fill = |v: f64| -> Result<Variable> {
            let host: Vec<f64> = vec![v; channels as usize];
            Variable::try_new(Tensor::from_vec(host, &[channels])?.cast(dtype)?)
        };
        Ok(BatchNorm {
            gamma: fill(1.0)?.named("batch_norm/gamma"),
            beta: fill(0.0)?.named("batch_norm/beta"),
            moving_mean: fill(0.0)?.named("batch_norm/moving_mean").non_trainable(),
            moving_variance: fill(1.0)?
                .named("batch_norm/moving_variance")
                .non_trainable(),
            momentum: 0.99,
            epsilon: 1e-3,
        })
    }

    /// Normalizes `x` (`[..., channels]`); `training` selects batch or
    /// moving statistics, and in training updates the moving ones.
    pub fn call(&self, x: &Tensor, training: bool) -> Result<Tensor> {
        let rank = x.shape().rank().ok_or_else(|| {
            Error::invalid(
                "BatchNorm",
                format!("needs a known rank, got {}", x.tensor_type()),
            )
        })?;
        self.check_channels(x, rank)?;
        let (mean, var) = if training {
            let axes: Vec<i64> = (0..rank as i64 - 1).collect();
            let (mean, var) = x.moments(&axes, false)?;
            let m = self.momentum;
            let moved = |v: &Variable, batch: &Tensor| -> Result<()> {
                let next = v
                    .try_read()?
                    .mul_scalar(m)?
                    .add(&batch.mul_scalar(1.0 - m)?)?;
                v.assign(&next)
            };
            moved(&self.moving_mean, &mean)?;
            moved(&self.moving_variance, &var)?;
            (mean, var)
        } else {
            (
                self.moving_mean.try_read()?,
                self.moving_variance.try_read()?,
            )
        };
        let scale = var
            .add_scalar(self.epsilon)?
            .rsqrt()?
            .mul(&self.gamma.try_read()?)?;
        x.sub(&mean)?.mul(&scale)?.add(&self.beta.try_read()?)
    }

    /// Errors unless `x`'s last axis has the channels the layer was built
    /// for. Checked first, by the layer's name: otherwise the mismatch
    /// surfaces deep inside as `add: incompatible shapes for broadcasting`
    /// (moving statistics against the batch's), naming neither.
    fn check_channels(&self, x: &Tensor, rank: usize) -> Result<()> {
        let channels = self.gamma.dims().first().copied().unwrap_or(0);
        let last = x.shape().dims().and_then(|d| d.last().copied());
        let error = |got: String| {
            Error::invalid(
                "BatchNorm",
                format!(
                    "built for {channels} channels (axis -1), called on input {} with {got}",
                    x.tensor_type()
                ),
            )
        };
        match last {
            _ if rank == 0 => Err(error("no axis".into())),
            Some(Some(c)) if c != channels => Err(error(c.to_string())),
            _ => Ok(()),
        }
    }

    /// The trainable variables (gamma, beta).
    pub fn trainable_variables(&self) -> Vec<Variable> {
        vec![self.gamma.clone(), self.beta.clone()]
    }
}

/// All four variables by name (`gamma`, `beta`, `moving_mean`,
/// `moving_variance`), so a model holding a `BatchNorm` derives `Module`
/// and its checkpoints keep the moving statistics.
impl crate::module::Module for BatchNorm {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        use crate::module::join;
        f(join(prefix, "gamma"), &self.gamma);
        f(join(prefix, "beta"), &self.beta);
        f(join(prefix, "moving_mean"), &self.moving_mean);
        f(join(prefix, "moving_variance"), &self.moving_variance);
    }
}
