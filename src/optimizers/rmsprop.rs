//! Layer: optimizers (RMSprop). Imports the shared optimizer state from
//! `optimizers`, and `tensor`, `variable`.

use super::{LearningRate, Optimizer, Options, Slots, State, common_options};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// RMSprop, as Keras' (rho 0.9, epsilon 1e-7 inside the square root,
/// optional momentum and centering):
///
/// ```text
/// s = rho * s + (1 - rho) * g^2
/// centered:  c = rho * c + (1 - rho) * g;  d = s - c^2 + epsilon
/// otherwise: d = s + epsilon
/// step = lr * g / sqrt(d)
/// momentum:  m = momentum * m + step;  v -= m
/// otherwise: v -= step
/// ```
pub struct RmsProp {
    state: State,
    rho: f64,
    momentum: f64,
    epsilon: f64,
    centered: bool,
    mean_square: Slots,
    mean_grad: Slots,
    velocity: Slots,
}

impl RmsProp {
    /// RMSprop with Keras' defaults (Keras' default rate is 0.001).
    pub fn new(learning_rate: impl Into<LearningRate>) -> RmsProp {
        RmsProp {
            state: State::new(Options::new(learning_rate)),
            rho: 0.9,
            momentum: 0.0,
            epsilon: 1e-7,
            centered: false,
            mean_square: Slots::default(),
            mean_grad: Slots::default(),
            velocity: Slots::default(),
        }
    }

    /// The decay of the moving average of squared gradients, in `[0, 1)`.
    pub fn rho(mut self, rho: f64) -> Self {
        self.rho = rho;
        self
    }

    /// A momentum coefficient in `[0, 1)`.
    pub fn momentum(mut self, momentum: f64) -> Self {
        self.momentum = momentum;
        self
    }

    /// Added to the second-moment estimate inside the square root
    /// (default 1e-7, >= 0).
    pub fn epsilon(mut self, epsilon: f64) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// Normalizes by the estimated variance instead of the second moment.
    pub fn centered(mut self, centered: bool) -> Self {
        self.centered = centered;
        self
    }

    /// Creates the slot variables of `vars` and the step count now.
    pub fn build<V: std::borrow::Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        self.state.build(&self.slot_tables(), vars)
    }

    /// The slot tables this configuration uses, with their names in a
    /// checkpoint.
    fn slot_tables(&self) -> Vec<(&'static str, &Slots)> {
        let mut tables = vec![("mean_square", &self.mean_square)];
        if self.centered {
            tables.push(("mean_grad", &self.mean_grad));
        }
        if self.momentum != 0.0 {
            tables.push(("momentum", &self.velocity));
        }
        tables
    }

    fn check(&self) -> Result<()> {
        let unit = |x: f64| (0.0..1.0).contains(&x);
        if !unit(self.rho) || !unit(self.momentum) || !(0.0..).contains(&self.epsilon) {
            return Err(Error::invalid(
                "RmsProp",
                format!(
                    "rho ({}) and momentum ({}) must be in [0, 1) and epsilon ({}) >= 0",
                    self.rho, self.momentum, self.epsilon
                ),
            ));
        }
        Ok(())
    }
}

common_options!(RmsProp);

impl Optimizer for RmsProp {
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
            let s = self
                .mean_square
                .moving_average(u.var, self.rho, &u.grad.square()?)?;
            let mut denom = s;
            if self.centered {
                let c = self.mean_grad.moving_average(u.var, self.rho, &u.grad)?;
                denom = denom.sub(&c.square()?)?;
            }
            let step = u
                .rate
                .scale(&u.grad.mul(&denom.add_scalar(self.epsilon)?.rsqrt()?)?)?;
            if self.momentum == 0.0 {
                return u.var.assign_sub(&step);
            }
            let m = self.velocity.get(u.var)?;
            let next = m.try_read()?.mul_scalar(self.momentum)?.add(&step)?;
            m.assign(&next)?;
            u.var.assign_sub(&next)
        })
    }
}
