//! Layer: optimizers (dynamic loss scaling). [`LossScaleOptimizer`] wraps
//! any [`Optimizer`] for float16 mixed precision (Keras'
//! `LossScaleOptimizer`, the training half of
//! [`crate::nn::mixed_precision`]). Imports `tensor` ops, `variable`,
//! `control::cond` and this module's [`Optimizer`].
//!
//! Float16's smallest normal number is about 6e-5, so many gradients of a
//! float16 model underflow to zero. Multiplying the loss by a large scale
//! before differentiating moves them into range; the gradients are divided
//! by it again before the update. Too large a scale overflows instead, so
//! the scale is dynamic: a step whose gradients hold an infinity or a NaN
//! is skipped (no variable, slot or step count changes) and the scale
//! halved; after `dynamic_growth_steps` good steps in a row it doubles.
//! Bfloat16 has float32's exponent range and needs none of this.
//!
//! The scale and the count of good steps are variables, so the decision
//! is made on the device: a compiled training step is one program (the
//! skip a `cond`, the scale's update a `where`), traced once, and a
//! checkpoint of [`Optimizer::state_variables`] keeps them.

use super::Optimizer;
use crate::autodiff::{GradientTape, Source};
use crate::control::cond;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::borrow::Borrow;

/// Dynamic loss scaling around an optimizer (Keras'
/// `keras.optimizers.LossScaleOptimizer`).
///
/// Defaults are Keras': initial scale `2^15`, doubled after 2000 finite
/// steps in a row (unless doubling would overflow float32: the scale is
/// then kept), halved at every step with a non-finite gradient (and
/// never below 1, as `tf.keras`' floor keeps it).
///
/// [`Optimizer::minimize`] scales the loss itself and returns the loss
/// unscaled. [`Optimizer::apply_gradients`] takes the gradients of the
/// *scaled* loss ([`LossScaleOptimizer::scale_loss`]), as Keras 3's
/// `apply` does, and unscales them.
///
/// ```
/// use xlafn::optimizers::LossScaleOptimizer;
/// use xlafn::prelude::*;
/// let w = Variable::new(Tensor::scalar(1.0f32));
/// let opt = LossScaleOptimizer::new(Sgd::new(0.5))?;
/// // The loss overflows once scaled: the step is skipped, the scale halved.
/// opt.minimize(&[&w], || w.read().cast(DType::F16)?.mul_scalar(60000.0)?.cast(DType::F32))?;
/// assert_eq!(w.read().item::<f32>()?, 1.0);
/// assert_eq!(opt.loss_scale()?, 16384.0);
/// // A finite step: the gradient 2w, unscaled, is applied.
/// opt.minimize(&[&w], || w.read().square())?;
/// assert_eq!(w.read().item::<f32>()?, 0.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct LossScaleOptimizer<O> {
    inner: O,
    scale: Variable,
    counter: Variable,
    growth_steps: i64,
}

impl<O: Optimizer> LossScaleOptimizer<O> {
    /// Keras' defaults around `inner`: scale `2^15`, growth every 2000
    /// steps.
    pub fn new(inner: O) -> Result<LossScaleOptimizer<O>> {
        LossScaleOptimizer::with_options(inner, 32768.0, 2000)
    }

    /// Scale starting at `initial_scale`, doubled after
    /// `dynamic_growth_steps` (at least 1) finite steps in a row.
    ///
    /// The scale is kept as a float32 variable, so `initial_scale` must be
    /// a positive normal float32 (about 1.2e-38 to 3.4e38) once converted:
    /// `1e300` would become infinity (every step skipped for ever) and
    /// `1e-50` zero (every gradient divided by zero).
    pub fn with_options(
        inner: O,
        initial_scale: f64,
        dynamic_growth_steps: i64,
    ) -> Result<LossScaleOptimizer<O>> {
        let scale32 = initial_scale as f32;
        if !(scale32.is_normal() && scale32 > 0.0) || dynamic_growth_steps < 1 {
            return Err(Error::invalid(
                "LossScaleOptimizer",
                format!(
                    "needs an initial scale that is a positive finite float32 (from {:e} to \
                     {:e}) and dynamic_growth_steps >= 1, got {initial_scale} (as float32: \
                     {scale32}) and {dynamic_growth_steps}",
                    f32::MIN_POSITIVE,
                    f32::MAX
                ),
            ));
        }
        // Made outside any trace, from host values: a step traced later
        // reads them like any captured variable.
        let make = |value: Tensor, name: &str| {
            crate::trace::create_owned_variable(|| {
                Ok(Variable::try_new(value)?.non_trainable().named(name))
            })
        };
        Ok(LossScaleOptimizer {
            inner,
            scale: make(Tensor::try_scalar(initial_scale as f32)?, "dynamic_scale")?,
            counter: make(Tensor::try_scalar(0i64)?, "step_counter")?,
            growth_steps: dynamic_growth_steps,
        })
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// The current scale, a float32 scalar variable (Keras'
    /// `dynamic_scale`).
    pub fn dynamic_scale(&self) -> &Variable {
        &self.scale
    }

    /// The number of finite steps since the scale last changed, an i64
    /// scalar variable (Keras' `step_counter`).
    pub fn step_counter(&self) -> &Variable {
        &self.counter
    }

    /// The finite steps after which the scale doubles.
    pub fn dynamic_growth_steps(&self) -> i64 {
        self.growth_steps
    }

    /// The current scale as a number (eager).
    pub fn loss_scale(&self) -> Result<f64> {
        Ok(self.scale.try_read()?.item::<f32>()? as f64)
    }

    /// `loss * scale`, in the loss' dtype (Keras' `scale_loss`): take the
    /// gradients of this and give them to `apply_gradients`.
    pub fn scale_loss(&self, loss: &Tensor) -> Result<Tensor> {
        loss.mul(&self.scale.try_read()?.cast(loss.dtype())?)
    }
}

/// `g / scale`, computed in float32 for half-precision `g` (a float16
/// scale of `2^16` or more would be infinite).
fn unscale(g: &Tensor, scale: &Tensor) -> Result<Tensor> {
    match g.dtype() {
        DType::F16 | DType::BF16 => g.cast(DType::F32)?.div(scale)?.cast(g.dtype()),
        DType::F32 => g.div(scale),
        d => g.div(&scale.cast(d)?),
    }
}

impl<O: Optimizer> Optimizer for LossScaleOptimizer<O> {
    /// Unscales the gradients (of the scaled loss); if all are finite,
    /// applies them with the inner optimizer and counts the step toward
    /// growth, else skips the update and halves the scale. Both paths are
    /// traced into one program.
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        let scale = self.scale.try_read()?;
        let mut finite = Tensor::try_scalar(true)?;
        let mut unscaled = Vec::with_capacity(grads_and_vars.len());
        for (g, v) in grads_and_vars {
            let g = match g {
                Some(g) if g.dtype().is_float() => {
                    let ok = g.is_finite()?.reduce_all(&[], false)?;
                    finite = finite.logical_and(&ok)?;
                    Some(unscale(g, &scale)?)
                }
                // The inner optimizer explains what it refuses.
                other => other.clone(),
            };
            unscaled.push((g, *v));
        }
        cond(&finite, || self.inner.apply_gradients(&unscaled), || Ok(()))?;
        let counter = self.counter.try_read()?;
        let grow = counter.eq_scalar(self.growth_steps - 1)?;
        let zero = counter.zeros_like()?;
        let halved = scale.mul_scalar(0.5)?.maximum_scalar(1.0)?;
        // Doubling the largest scales overflows float32: the scale then
        // stays (TensorFlow assigns a grown scale only when it is finite).
        let doubled = scale.mul_scalar(2.0)?;
        let doubled = doubled.is_finite()?.where_(&doubled, &scale)?;
        let kept = grow.where_(&doubled, &scale)?;
        let next = grow.where_(&zero, &counter.add_scalar(1i64)?)?;
        self.scale.assign(&finite.where_(&kept, &halved)?)?;
        self.counter.assign(&finite.where_(&next, &zero)?)
    }

    /// Evaluates `loss`, differentiates it times the scale, and applies
    /// the gradients as [`LossScaleOptimizer::apply_gradients`] does;
    /// returns the loss unscaled.
    fn minimize<V: Borrow<Variable>>(
        &self,
        vars: &[V],
        loss: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor> {
        let tape = GradientTape::new();
        let value = loss()?;
        let scaled = self.scale_loss(&value)?;
        let sources: Vec<Source> = vars.iter().map(|v| Source::Variable(v.borrow())).collect();
        let grads = tape.gradient(&scaled, &sources)?;
        drop(tape);
        let pairs: Vec<(Option<Tensor>, &Variable)> = grads
            .into_iter()
            .zip(vars.iter().map(Borrow::borrow))
            .collect();
        self.apply_gradients(&pairs)?;
        Ok(value)
    }

    /// The inner optimizer's state, then `dynamic_scale` and
    /// `step_counter` (Keras' names).
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        let mut out = self.inner.state_variables(vars, build)?;
        out.push(("dynamic_scale".into(), self.scale.clone()));
        out.push(("step_counter".into(), self.counter.clone()));
        Ok(out)
    }
}

impl<O: std::fmt::Debug> std::fmt::Debug for LossScaleOptimizer<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LossScaleOptimizer")
            .field("inner", &self.inner)
            .field("dynamic_growth_steps", &self.growth_steps)
            .finish_non_exhaustive()
    }
}
