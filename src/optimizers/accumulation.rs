//! Layer: optimizers (gradient accumulation). [`GradientAccumulation`]
//! wraps any [`Optimizer`] so that it updates every `steps` calls with
//! the mean of the gradients given since its last update (Keras 3's
//! `gradient_accumulation_steps`, optax's `MultiSteps`): a batch `steps`
//! times larger than fits in memory, in `steps` pieces. Imports `tensor`
//! ops, `variable`, `control::cond` and this module's [`Optimizer`] and
//! slot table.
//!
//! The running sums are slot variables (zeros, the variable's dtype) and
//! the position in the cycle an i64 variable, so a compiled training step
//! is one program traced once: the sums are updated every call, the inner
//! update runs under a `cond`, and the sums are reset by a `where`.

use super::{Optimizer, Slots, variable_like};
use crate::control::cond;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Accumulates gradients over `steps` calls and applies their mean with
/// the inner optimizer on every `steps`-th (Keras'
/// `gradient_accumulation_steps`).
///
/// Between updates the model variables and the inner optimizer's state
/// (its step count, a schedule's position, its moments) do not change:
/// the inner optimizer sees one step per `steps` calls, as optax's
/// `MultiSteps` does. A gradient that is `None` adds nothing that call.
///
/// ```
/// use xlafn::optimizers::GradientAccumulation;
/// use xlafn::prelude::*;
/// let w = Variable::new(Tensor::scalar(1.0f32));
/// let opt = GradientAccumulation::new(Sgd::new(0.5), 2)?;
/// opt.apply_gradients(&[(Some(Tensor::scalar(1.0f32)), &w)])?;
/// assert_eq!(w.read().item::<f32>()?, 1.0); // accumulated, not applied
/// opt.apply_gradients(&[(Some(Tensor::scalar(3.0f32)), &w)])?;
/// assert_eq!(w.read().item::<f32>()?, 1.0 - 0.5 * 2.0); // the mean, 2
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct GradientAccumulation<O> {
    inner: O,
    steps: i64,
    sums: Slots,
    /// Calls since the last update, `0..steps`.
    position: Variable,
}

impl<O: Optimizer> GradientAccumulation<O> {
    /// Updates with `inner` every `steps` (at least 1) calls.
    pub fn new(inner: O, steps: i64) -> Result<GradientAccumulation<O>> {
        if steps < 1 {
            return Err(Error::invalid(
                "GradientAccumulation",
                format!("needs steps >= 1, got {steps}"),
            ));
        }
        let position = crate::trace::create_owned_variable(|| {
            Ok(Variable::try_new(Tensor::try_scalar(0i64)?)?
                .non_trainable()
                .named("accumulation_position"))
        })?;
        Ok(GradientAccumulation {
            inner,
            steps,
            sums: Slots::filled(0.0),
            position,
        })
    }

    /// The wrapped optimizer.
    pub fn inner(&self) -> &O {
        &self.inner
    }

    /// The calls per update.
    pub fn steps(&self) -> i64 {
        self.steps
    }
}

impl<O: Optimizer> Optimizer for GradientAccumulation<O> {
    /// Adds the gradients to their sums; on the `steps`-th call since the
    /// last update, applies the sums divided by `steps` with the inner
    /// optimizer and starts the sums again.
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        let position = self.position.try_read()?;
        let update = position.eq_scalar(self.steps - 1)?;
        let mut means = Vec::with_capacity(grads_and_vars.len());
        let mut sums = Vec::with_capacity(grads_and_vars.len());
        for (g, v) in grads_and_vars {
            let Some(g) = g else {
                means.push((None, *v));
                continue;
            };
            let slot = self.sums.get(v)?;
            let g = match g.dtype() == slot.dtype() {
                true => g.clone(),
                false => g.cast(slot.dtype())?,
            };
            let total = slot.try_read()?.add(&g)?;
            means.push((Some(total.mul_scalar(1.0 / self.steps as f64)?), *v));
            sums.push((slot, total));
        }
        cond(&update, || self.inner.apply_gradients(&means), || Ok(()))?;
        for (slot, total) in sums {
            slot.assign(&update.where_(&total.zeros_like()?, &total)?)?;
        }
        let next = position.add_scalar(1i64)?;
        self.position
            .assign(&update.where_(&position.zeros_like()?, &next)?)
    }

    /// The inner optimizer's state, then `accumulation_position` and an
    /// `accumulated.<path>` sum per variable.
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        let mut out = self.inner.state_variables(vars, build)?;
        out.push(("accumulation_position".into(), self.position.clone()));
        for (path, v) in vars {
            let sum = match (build, self.sums.existing(v)) {
                (_, Some(s)) => s,
                (true, None) => self.sums.get(v)?,
                (false, None) => variable_like(v, 0.0)?,
            };
            out.push((format!("accumulated.{path}"), sum));
        }
        Ok(out)
    }
}

impl<O: std::fmt::Debug> std::fmt::Debug for GradientAccumulation<O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GradientAccumulation")
            .field("inner", &self.inner)
            .field("steps", &self.steps)
            .finish_non_exhaustive()
    }
}
