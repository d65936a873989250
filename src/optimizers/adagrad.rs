//! Layer: optimizers (Adagrad). Imports the shared optimizer state from
//! `optimizers`, and `tensor`, `variable`.

use super::{LearningRate, Optimizer, Options, Slots, State, common_options};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Adagrad, as Keras' (accumulators start at `initial_accumulator`, 0.1;
/// epsilon 1e-7 inside the square root):
///
/// ```text
/// a += g^2;  v -= lr * g / sqrt(a + epsilon)
/// ```
pub struct Adagrad {
    state: State,
    initial_accumulator: f64,
    epsilon: f64,
    accumulators: Slots,
}

impl Adagrad {
    /// Adagrad with Keras' defaults (Keras' default rate is 0.001).
    pub fn new(learning_rate: impl Into<LearningRate>) -> Adagrad {
        Adagrad {
            state: State::new(Options::new(learning_rate)),
            initial_accumulator: 0.1,
            epsilon: 1e-7,
            accumulators: Slots::filled(0.1),
        }
    }

    /// The accumulators' starting value (>= 0).
    pub fn initial_accumulator(mut self, value: f64) -> Self {
        self.initial_accumulator = value;
        self.accumulators = Slots::filled(value);
        self
    }

    /// Added to the accumulator inside the square root (default 1e-7, >= 0).
    pub fn epsilon(mut self, epsilon: f64) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// Creates the accumulators of `vars` and the step count now.
    pub fn build<V: std::borrow::Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        self.state.build(&self.slot_tables(), vars)
    }

    /// The slot tables this configuration uses, with their names in a
    /// checkpoint.
    fn slot_tables(&self) -> Vec<(&'static str, &Slots)> {
        vec![("accumulator", &self.accumulators)]
    }
}

common_options!(Adagrad);

impl Optimizer for Adagrad {
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        self.state.state_variables(&self.slot_tables(), vars, build)
    }

    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        if !(0.0..).contains(&self.initial_accumulator) || !(0.0..).contains(&self.epsilon) {
            return Err(Error::invalid(
                "Adagrad",
                format!(
                    "initial_accumulator ({}) and epsilon ({}) must be >= 0",
                    self.initial_accumulator, self.epsilon
                ),
            ));
        }
        self.state.apply(grads_and_vars, false, |u, _t| {
            let a = self.accumulators.get(u.var)?;
            let next = a.try_read()?.add(&u.grad.square()?)?;
            a.assign(&next)?;
            let step = u.grad.mul(&next.add_scalar(self.epsilon)?.rsqrt()?)?;
            u.var.assign_sub(&u.rate.scale(&step)?)
        })
    }
}
