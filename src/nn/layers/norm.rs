//! Layer: the normalization layers [`LayerNorm`], [`RmsNorm`],
//! [`GroupNorm`] and [`BatchNorm`], over `tensor` ops, [`Param`] and
//! `variable` (BatchNorm's moving statistics). Imports `initializers` and
//! `random` (the placeholder key of weights that draw nothing).
//!
//! Half-precision inputs (bf16, f16) are normalized in float32 and the
//! result cast back: the mean and the variance of many bf16 values keep
//! few digits and the variance can come out negative, which is what makes
//! mixed-precision training unstable. The scale and offset are float32
//! weights by default, applied in float32 before the cast back.
//!
//! Under a mixed-precision [`Policy`] (the global one when the layer is
//! made, or each layer's `dtype_policy`) the input is first cast to the
//! compute dtype and the weights are kept in the variable dtype; the
//! statistics stay float32 and the output is in the compute dtype.

use super::util::{
    autocast, check_built, check_positive, dims_of, float_input, last_dim, statistics_dtype,
    variable_dtype,
};
use super::{Layer, Mode, Param};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::nn::mixed_precision::{Policy, current_policy};
use crate::random;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// The optional per-feature scale (`gamma`, ones) and offset (`beta`,
/// zeros) of a normalization, both `[features]`.
#[derive(Debug)]
struct ScaleOffset {
    gamma: Option<Param>,
    beta: Option<Param>,
    dtype: DType,
    policy: Option<Policy>,
}

impl ScaleOffset {
    /// Unbuilt weights, float32 or the global policy's variable dtype.
    fn new(scale: bool, center: bool) -> Result<ScaleOffset> {
        // The initializers draw nothing: any key does.
        let key = random::key(0)?;
        let policy = current_policy();
        Ok(ScaleOffset {
            gamma: scale.then(|| Param::lazy(Initializer::Ones, &key)),
            beta: center.then(|| Param::lazy(Initializer::Zeros, &key)),
            dtype: variable_dtype(policy.as_ref(), DType::F32),
            policy,
        })
    }

    /// Unbuilt weights with `scale` and `center`, this one's dtype and
    /// policy.
    fn renew(&self, scale: bool, center: bool) -> Result<ScaleOffset> {
        let mut fresh = ScaleOffset::new(scale, center)?;
        fresh.dtype = self.dtype;
        fresh.policy = self.policy;
        Ok(fresh)
    }

    /// Unbuilt weights like these, in `dtype`.
    fn in_dtype(&self, dtype: DType) -> Result<ScaleOffset> {
        let mut fresh = self.renew(self.gamma.is_some(), self.beta.is_some())?;
        fresh.dtype = dtype;
        Ok(fresh)
    }

    /// These weights following `policy`: remade (unbuilt) in its variable
    /// dtype when that differs.
    fn with_policy(self, policy: Policy) -> Result<ScaleOffset> {
        let mut out = if self.dtype == policy.variable_dtype() {
            self
        } else {
            self.in_dtype(policy.variable_dtype())?
        };
        out.policy = Some(policy);
        Ok(out)
    }

    fn build(&self, features: i64) -> Result<()> {
        for p in self.gamma.iter().chain(&self.beta) {
            p.get(&[features], self.dtype)?;
        }
        Ok(())
    }

    /// The features the weights were made for, if made.
    fn built(&self) -> Option<i64> {
        self.gamma
            .iter()
            .chain(&self.beta)
            .find_map(|p| p.variable())
            .map(|v| v.dims()[0])
    }

    /// `y * gamma + beta`, in `y`'s dtype.
    fn apply(&self, y: Tensor, features: i64) -> Result<Tensor> {
        let dtype = y.dtype();
        let read = |p: &Param| -> Result<Tensor> { p.read(&[features], self.dtype)?.cast(dtype) };
        let y = match &self.gamma {
            Some(g) => y.mul(&read(g)?)?,
            None => y,
        };
        match &self.beta {
            Some(b) => y.add(&read(b)?),
            None => Ok(y),
        }
    }
}

impl Module for ScaleOffset {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.gamma.visit_variables(&join(prefix, "gamma"), f);
        self.beta.visit_variables(&join(prefix, "beta"), f);
    }
}

/// `x` in the dtype its statistics are computed in (float32 for half
/// precision).
fn for_statistics(x: &Tensor) -> Result<Tensor> {
    let d = statistics_dtype(x.dtype());
    if d == x.dtype() {
        Ok(x.clone())
    } else {
        x.cast(d)
    }
}

/// `y` back in `like`'s dtype.
fn cast_back(y: Tensor, like: &Tensor) -> Result<Tensor> {
    if y.dtype() == like.dtype() {
        Ok(y)
    } else {
        y.cast(like.dtype())
    }
}

/// The setters LayerNorm and RmsNorm share.
macro_rules! norm_options {
    ($ty:ident, $kind:ident) => {
        impl $ty {
            /// Added to the variance (mean square) before the square root.
            pub fn epsilon(mut self, epsilon: f64) -> $ty {
                self.epsilon = epsilon;
                self
            }

            /// Makes the weights now, for inputs of `features` (axis -1).
            pub fn build(self, features: i64) -> Result<$ty> {
                check_positive(stringify!($ty), "features", &[features])?;
                self.weights.build(features)?;
                Ok(self)
            }

            /// The scale `gamma`, once made.
            pub fn gamma(&self) -> Option<&Variable> {
                self.weights.gamma.as_ref().and_then(|p| p.variable())
            }

            /// The weights' dtype (default float32). Weights already made
            /// are dropped: the next call (or `build`) makes them again.
            pub fn dtype(mut self, dtype: DType) -> Result<$ty> {
                self.weights = self.weights.in_dtype(dtype)?;
                Ok(self)
            }

            /// The mixed-precision policy (default the global one when
            /// the layer was made): weights in its variable dtype (weights
            /// made in another dtype are dropped), input and output in its
            /// compute dtype, statistics in float32.
            pub fn dtype_policy(mut self, policy: Policy) -> Result<$ty> {
                self.weights = self.weights.with_policy(policy)?;
                Ok(self)
            }
        }

        impl Module for $ty {
            fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
                let f = &mut super::util::noting(LayerKind::$kind, f);
                self.weights.visit_variables(prefix, f);
            }
        }
    };
}

/// Layer normalization over the last axis (Keras' `LayerNormalization`
/// with `axis=-1`, PyTorch's `nn.LayerNorm(features)`): `(x - mean) /
/// sqrt(var + epsilon) * gamma + beta`, the statistics of each position's
/// features.
///
/// Defaults: epsilon `1e-5` (PyTorch's; Flax's is `1e-6` and Keras' `1e-3`:
/// set it with [`LayerNorm::epsilon`] to match those), scale `gamma`
/// (ones) and offset `beta` (zeros) both on, float32 weights.
///
/// ```
/// use xlafn::nn::layers::{Layer, LayerNorm};
/// use xlafn::prelude::*;
/// let ln = LayerNorm::new(2)?;
/// let y = ln.forward(&Tensor::from_vec(vec![1.0f32, 3.0], &[1, 2])?)?;
/// let v = y.to_vec::<f32>()?; // mean 2, variance 1
/// assert!((v[0] + 1.0).abs() < 1e-4 && (v[1] - 1.0).abs() < 1e-4);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct LayerNorm {
    epsilon: f64,
    weights: ScaleOffset,
}

norm_options!(LayerNorm, LayerNorm);

impl LayerNorm {
    /// A layer norm whose weights are made on the first call.
    pub fn lazy() -> Result<LayerNorm> {
        Ok(LayerNorm {
            epsilon: 1e-5,
            weights: ScaleOffset::new(true, true)?,
        })
    }

    /// A layer norm of `features`, its weights made now.
    pub fn new(features: i64) -> Result<LayerNorm> {
        LayerNorm::lazy()?.build(features)
    }

    /// Which of the scale (`gamma`) and the offset (`beta`) the layer has
    /// (Keras' `scale` and `center`, both on by default); weights already
    /// made are dropped.
    pub fn affine(mut self, scale: bool, center: bool) -> Result<LayerNorm> {
        self.weights = self.weights.renew(scale, center)?;
        Ok(self)
    }

    /// The offset `beta`, once made.
    pub fn beta(&self) -> Option<&Variable> {
        self.weights.beta.as_ref().and_then(|p| p.variable())
    }
}

impl Layer for LayerNorm {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        float_input(x, "LayerNorm")?;
        let x = &autocast(x, self.weights.policy.as_ref())?;
        let n = last_dim(x, "LayerNorm")?;
        check_built(
            "LayerNorm",
            "features (axis -1)",
            self.weights.built(),
            n,
            x,
        )?;
        // With the leading shape known, the positions are flattened into
        // rows `[rows, n]` between free reshapes, as a hand-written
        // transformer does: the scale's and offset's gradients are then
        // sums over one axis, which XLA's CPU reductions do faster than
        // over several.
        let dims = x.shape().as_known().filter(|d| d.len() > 2);
        let xs = for_statistics(x)?;
        let xs = match &dims {
            Some(d) => xs.reshape(&[d[..d.len() - 1].iter().product(), n])?,
            None => xs,
        };
        // The centered input once, for the variance and the output (what
        // `moments` gives, without its second `x - mean`, whose separate
        // gradient path made a training step measurably slower).
        let centered = xs.sub(&xs.reduce_mean(&[-1], true)?)?;
        let var = centered.square()?.reduce_mean(&[-1], true)?;
        let y = centered.mul(&var.add_scalar(self.epsilon)?.rsqrt()?)?;
        let y = self.weights.apply(y, n)?;
        let y = match &dims {
            Some(d) => y.reshape(d)?,
            None => y,
        };
        cast_back(y, x)
    }
}

/// Root-mean-square normalization over the last axis (Zhang and Sennrich,
/// 2019; Keras' `RMSNormalization`, PyTorch's `nn.RMSNorm`): `x /
/// sqrt(mean(x²) + epsilon) * gamma`, no centering and no offset.
///
/// Defaults: epsilon `1e-6` (Keras' and Flax's), scale `gamma` (ones),
/// float32 weights.
///
/// ```
/// use xlafn::nn::layers::{Layer, RmsNorm};
/// use xlafn::prelude::*;
/// let norm = RmsNorm::new(2)?;
/// let y = norm.forward(&Tensor::from_vec(vec![3.0f32, 4.0], &[1, 2])?)?;
/// let v = y.to_vec::<f32>()?; // mean square 12.5
/// assert!((v[0] - 3.0 / 12.5f32.sqrt()).abs() < 1e-5);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct RmsNorm {
    epsilon: f64,
    weights: ScaleOffset,
}

norm_options!(RmsNorm, RmsNorm);

impl RmsNorm {
    /// An RMS norm whose scale is made on the first call.
    pub fn lazy() -> Result<RmsNorm> {
        Ok(RmsNorm {
            epsilon: 1e-6,
            weights: ScaleOffset::new(true, false)?,
        })
    }

    /// An RMS norm of `features`, its scale made now.
    pub fn new(features: i64) -> Result<RmsNorm> {
        RmsNorm::lazy()?.build(features)
    }
}

impl Layer for RmsNorm {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        float_input(x, "RmsNorm")?;
        let x = &autocast(x, self.weights.policy.as_ref())?;
        let n = last_dim(x, "RmsNorm")?;
        check_built("RmsNorm", "features (axis -1)", self.weights.built(), n, x)?;
        let xs = for_statistics(x)?;
        let mean_square = xs.square()?.reduce_mean(&[xs.rank() as i64 - 1], true)?;
        let y = xs.mul(&mean_square.add_scalar(self.epsilon)?.rsqrt()?)?;
        cast_back(self.weights.apply(y, n)?, x)
    }
}

/// Group normalization (Wu and He, 2018; Keras' `GroupNormalization`,
/// PyTorch's `nn.GroupNorm`) of a channels-last input `[batch, spatial..,
/// channels]`: the channels split into `groups` consecutive groups, each
/// normalized by the mean and variance over its channels and every
/// spatial position of one example, then scaled and offset per channel.
/// One group is a layer norm over all but the batch axis; as many groups
/// as channels is an instance norm.
///
/// Defaults: epsilon `1e-5` (PyTorch's; Keras' is `1e-3`), `gamma`/`beta`
/// on, float32 weights. The groups must divide the channels; the input's
/// shape must be known but for one axis (the batch, typically).
///
/// ```
/// use xlafn::nn::layers::{GroupNorm, Layer};
/// use xlafn::prelude::*;
/// let gn = GroupNorm::new(2, 4)?;
/// let y = gn.forward(&Tensor::ones(&[2, 3, 3, 4], DType::F32))?;
/// // Constant groups: every value equals its group's mean.
/// assert_eq!(y.to_vec::<f32>()?, vec![0.0; 72]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct GroupNorm {
    groups: i64,
    epsilon: f64,
    weights: ScaleOffset,
}

impl GroupNorm {
    /// A group norm with `groups` groups, its weights made on the first
    /// call.
    pub fn lazy(groups: i64) -> Result<GroupNorm> {
        check_positive("GroupNorm", "groups", &[groups])?;
        Ok(GroupNorm {
            groups,
            epsilon: 1e-5,
            weights: ScaleOffset::new(true, true)?,
        })
    }

    /// A group norm of `channels` in `groups` groups, its weights made now.
    pub fn new(groups: i64, channels: i64) -> Result<GroupNorm> {
        GroupNorm::lazy(groups)?.build(channels)
    }

    /// Makes the weights now, for inputs of `channels`.
    pub fn build(self, channels: i64) -> Result<GroupNorm> {
        check_positive("GroupNorm", "channels", &[channels])?;
        self.check_groups(channels)?;
        self.weights.build(channels)?;
        Ok(self)
    }

    /// Added to the variance before the square root.
    pub fn epsilon(mut self, epsilon: f64) -> GroupNorm {
        self.epsilon = epsilon;
        self
    }

    /// The weights' dtype (default float32). Weights already made are
    /// dropped: the next call (or `build`) makes them again.
    pub fn dtype(mut self, dtype: DType) -> Result<GroupNorm> {
        self.weights = self.weights.in_dtype(dtype)?;
        Ok(self)
    }

    /// The mixed-precision policy, as [`LayerNorm::dtype_policy`].
    pub fn dtype_policy(mut self, policy: Policy) -> Result<GroupNorm> {
        self.weights = self.weights.with_policy(policy)?;
        Ok(self)
    }

    /// The scale `gamma`, once made.
    pub fn gamma(&self) -> Option<&Variable> {
        self.weights.gamma.as_ref().and_then(|p| p.variable())
    }

    /// The offset `beta`, once made.
    pub fn beta(&self) -> Option<&Variable> {
        self.weights.beta.as_ref().and_then(|p| p.variable())
    }

    fn check_groups(&self, channels: i64) -> Result<()> {
        if channels % self.groups != 0 {
            return Err(Error::invalid(
                "GroupNorm",
                format!("{} groups do not divide {channels} channels", self.groups),
            ));
        }
        Ok(())
    }
}

impl Module for GroupNorm {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        let f = &mut super::util::noting(LayerKind::GroupNorm, f);
        self.weights.visit_variables(prefix, f);
    }
}

impl Layer for GroupNorm {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        float_input(x, "GroupNorm")?;
        let x = &autocast(x, self.weights.policy.as_ref())?;
        let dims = dims_of(x, "GroupNorm", None)?;
        if dims.len() < 2 {
            return Err(Error::invalid(
                "GroupNorm",
                format!(
                    "needs a channels-last input [batch, .., channels], got {}",
                    x.tensor_type()
                ),
            ));
        }
        let c = last_dim(x, "GroupNorm")?;
        check_built(
            "GroupNorm",
            "channels (axis -1)",
            self.weights.built(),
            c,
            x,
        )?;
        self.check_groups(c)?;
        if dims.iter().filter(|d| d.is_none()).count() > 1 {
            return Err(Error::invalid(
                "GroupNorm",
                format!(
                    "needs an input whose shape is known but for one axis, got {}",
                    x.tensor_type()
                ),
            ));
        }
        let rank = dims.len();
        let back: Vec<i64> = dims.iter().map(|d| d.unwrap_or(-1)).collect();
        // [batch, spatial.., groups, channels / groups]: the statistics
        // are over the spatial axes and the last one.
        let mut grouped = back.clone();
        grouped.pop();
        grouped.extend([self.groups, c / self.groups]);
        let axes: Vec<i64> = (1..rank as i64 - 1).chain([rank as i64]).collect();
        let xs = for_statistics(x)?.reshape(&grouped)?;
        let (mean, var) = xs.moments(&axes, true)?;
        let y = xs
            .sub(&mean)?
            .mul(&var.add_scalar(self.epsilon)?.rsqrt()?)?
            .reshape(&back)?;
        cast_back(self.weights.apply(y, c)?, x)
    }
}

/// Batch normalization over the leading axes of a channels-last input
/// (Keras' `BatchNormalization`): in training, each batch is normalized
/// by its own statistics and the moving statistics move toward them by
/// `1 - momentum`; in inference the moving statistics are used. Its four
/// variables work eagerly and inside compiled training steps; they are
/// visited as `gamma`, `beta`, `moving_mean` and `moving_variance`, the
/// last two not trainable.
///
/// As a [`Layer`], the [`Mode`]'s training flag picks the statistics. The
/// inherent [`BatchNorm::call`] takes a mode or a plain `bool`.
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
    /// (Keras' default 0.99). Set it with [`BatchNorm::momentum`].
    #[deprecated(note = "set it with the `momentum` (or `torch_momentum`) builder")]
    pub momentum: f64,
    /// Added to the variance before the square root, for stability
    /// (Keras' default 0.001). Set it with [`BatchNorm::epsilon`].
    #[deprecated(note = "set it with the `epsilon` builder")]
    pub epsilon: f64,
    policy: Option<Policy>,
}

/// `true` is training (without a key), `false` inference: what
/// [`BatchNorm::call`] took before it was a [`Layer`].
impl From<bool> for Mode {
    fn from(training: bool) -> Mode {
        if training {
            Mode::training()
        } else {
            Mode::inference()
        }
    }
}

impl From<&Mode> for Mode {
    fn from(mode: &Mode) -> Mode {
        mode.clone()
    }
}

// The deprecated public fields are still where the options live, so code
// that set them before the builders keeps working.
#[allow(deprecated)]
impl BatchNorm {
    /// For `channels` features of `dtype`: gamma 1, beta 0, moving mean 0,
    /// moving variance 1; Keras' momentum 0.99 and epsilon 0.001.
    pub fn new(channels: i64, dtype: DType) -> Result<BatchNorm> {
        check_positive("BatchNorm", "channels", &[channels])?;
        // Made on the device: the size rules refuse a vector too large
        // before anything is allocated.
        let fill = |v: f64| Variable::try_new(Tensor::fill(&[channels], v, dtype)?);
        Ok(BatchNorm {
            gamma: fill(1.0)?,
            beta: fill(0.0)?,
            moving_mean: fill(0.0)?.non_trainable(),
            moving_variance: fill(1.0)?.non_trainable(),
            momentum: 0.99,
            epsilon: 1e-3,
            policy: current_policy(),
        })
    }

    /// Added to the variance before the square root (Keras' default
    /// 0.001; PyTorch's and Flax's 1e-5).
    pub fn epsilon(mut self, epsilon: f64) -> BatchNorm {
        self.epsilon = epsilon;
        self
    }

    /// How much of the old moving statistics each training batch keeps,
    /// in Keras' and Flax's sense (default 0.99): `moving = momentum *
    /// moving + (1 - momentum) * batch`.
    pub fn momentum(mut self, momentum: f64) -> BatchNorm {
        self.momentum = momentum;
        self
    }

    /// PyTorch's momentum, the weight of the new batch (PyTorch's default
    /// 0.1): `moving = (1 - momentum) * moving + momentum * batch`, the
    /// same as [`BatchNorm::momentum`] of `1 - momentum`. (PyTorch moves
    /// the variance with the batch's unbiased variance, `n / (n - 1)`
    /// times the biased one xlafn and Keras use: statistics trained here
    /// differ from PyTorch's by that factor, inference does not.)
    pub fn torch_momentum(self, momentum: f64) -> BatchNorm {
        self.momentum(1.0 - momentum)
    }

    /// The mixed-precision policy (default the global one when the layer
    /// was made; the variables are of the dtype given to
    /// [`BatchNorm::new`] until this sets them): the four variables in its
    /// variable dtype (their values cast when that differs), the input
    /// cast to its compute dtype, and the output in it. Half-precision
    /// inputs are normalized in the variables' float32 either way.
    pub fn dtype_policy(mut self, policy: Policy) -> Result<BatchNorm> {
        let d = policy.variable_dtype();
        if self.gamma.dtype() != d {
            let cast = |v: &Variable| -> Result<Variable> {
                let new = Variable::try_new(v.try_read()?.cast(d)?)?;
                Ok(if v.trainable() {
                    new
                } else {
                    new.non_trainable()
                })
            };
            self.gamma = cast(&self.gamma)?;
            self.beta = cast(&self.beta)?;
            self.moving_mean = cast(&self.moving_mean)?;
            self.moving_variance = cast(&self.moving_variance)?;
        }
        self.policy = Some(policy);
        Ok(self)
    }

    /// Normalizes `x` (`[..., channels]`); `mode` (a [`Mode`] or a `bool`,
    /// `true` for training) selects batch or moving statistics, and in
    /// training updates the moving ones. A half-precision input with
    /// float32 variables is normalized in float32 and returned in its own
    /// dtype.
    pub fn call(&self, x: &Tensor, mode: impl Into<Mode>) -> Result<Tensor> {
        let training = mode.into().is_training();
        let input = autocast(x, self.policy.as_ref())?;
        let (out_dtype, var_dtype) = (input.dtype(), self.gamma.dtype());
        let x = &if out_dtype != var_dtype && statistics_dtype(out_dtype) == var_dtype {
            input.cast(var_dtype)?
        } else {
            input
        };
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
        let y = x.sub(&mean)?.mul(&scale)?.add(&self.beta.try_read()?)?;
        if y.dtype() == out_dtype {
            Ok(y)
        } else {
            y.cast(out_dtype)
        }
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
impl Module for BatchNorm {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        let f = &mut super::util::noting(LayerKind::BatchNorm, f);
        f(join(prefix, "gamma"), &self.gamma);
        f(join(prefix, "beta"), &self.beta);
        f(join(prefix, "moving_mean"), &self.moving_mean);
        f(join(prefix, "moving_variance"), &self.moving_variance);
    }
}

impl Layer for BatchNorm {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        BatchNorm::call(self, x, mode)
    }
}
