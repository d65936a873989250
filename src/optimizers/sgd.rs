//! Layer: optimizers (SGD). Imports the shared optimizer state from
//! `optimizers`, and `tensor`, `variable`.

use super::{LearningRate, Optimizer, Options, Slots, State, common_options};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Stochastic gradient descent, with optional momentum and Nesterov
/// momentum (optax's and PyTorch's form; for a constant rate it is Keras'
/// `SGD` exactly):
///
/// ```text
/// plain:     v -= lr * g
/// momentum:  m = momentum * m + g;  v -= lr * m
/// nesterov:  m = momentum * m + g;  v -= lr * (g + momentum * m)
/// ```
///
/// ```
/// use xlafn::prelude::*;
/// let w = Variable::new(Tensor::vector(&[1.0f64])?);
/// let opt = Sgd::new(0.1).momentum(0.9);
/// let g = Tensor::vector(&[1.0f64])?;
/// opt.apply_gradients(&[(Some(g.clone()), &w)])?; // m = 1, w = 0.9
/// opt.apply_gradients(&[(Some(g), &w)])?;         // m = 1.9, w = 0.71
/// assert!((w.read().to_vec::<f64>()?[0] - 0.71).abs() < 1e-12);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct Sgd {
    state: State,
    momentum: f64,
    nesterov: bool,
    velocity: Slots,
}

impl Sgd {
    /// Plain SGD (Keras' default rate is 0.01).
    pub fn new(learning_rate: impl Into<LearningRate>) -> Sgd {
        Sgd {
            state: State::new(Options::new(learning_rate)),
            momentum: 0.0,
            nesterov: false,
            velocity: Slots::default(),
        }
    }

    /// SGD with momentum (a slot variable per updated variable).
    pub fn with_momentum(learning_rate: impl Into<LearningRate>, momentum: f64) -> Sgd {
        Sgd::new(learning_rate).momentum(momentum)
    }

    /// The momentum coefficient, in `[0, 1)`.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// Nesterov momentum (needs a momentum).
    pub fn nesterov(mut self, nesterov: bool) -> Self {
        self.nesterov = nesterov;
        self
    }

    /// Creates the slot variables of `vars` and the step count now, eagerly
    /// (Keras' `optimizer.build`): a step traced afterwards creates none.
    pub fn build<V: std::borrow::Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        self.state.build(&self.slot_tables(), vars)
    }

    /// The slot tables this configuration uses, with their names in a
    /// checkpoint.
    fn slot_tables(&self) -> Vec<(&'static str, &Slots)> {
        if self.momentum == 0.0 {
            Vec::new()
        } else {
            vec![("momentum", &self.velocity)]
        }
    }

    fn check(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(Error::invalid(
                "Sgd",
                format!("momentum must be in [0, 1), got {}", self.momentum),
            ));
        }
        if self.nesterov && self.momentum == 0.0 {
            return Err(Error::invalid(
                "Sgd",
                "Nesterov momentum needs a momentum > 0",
            ));
        }
        Ok(())
    }
}

common_options!(Sgd);

impl Optimizer for Sgd {
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        self.state.state_variables(&self.slot_tables(), vars, build)
    }

    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        self.check()?;
        self.state.apply(grads_and_vars, false, |u, _t| {
            let step = if self.momentum == 0.0 {
                u.grad.clone()
            } else {
                let m = self.velocity.get(u.var)?;
                let next = m.try_read()?.mul_scalar(self.momentum)?.add(&u.grad)?;
                m.assign(&next)?;
                if self.nesterov {
                    u.grad.add(&next.mul_scalar(self.momentum)?)?
                } else {
                    next
                }
            };
            u.var.assign_sub(&u.rate.scale(&step)?)
        })
    }
}
