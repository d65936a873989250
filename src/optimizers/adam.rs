//! Layer: optimizers (Adam, AdamW). Imports the shared optimizer state from
//! `optimizers`, and `tensor`, `variable`, `dtype`.

use super::{LearningRate, Optimizer, Options, Slots, State, common_options, constant};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Adam (Kingma & Ba) with bias correction; defaults beta1 0.9, beta2
/// 0.999, epsilon 1e-7 (Keras'). At step `t` (1 on the first update):
///
/// ```text
/// m = beta1 * m + (1 - beta1) * g
/// s = beta2 * s + (1 - beta2) * g^2
/// amsgrad:  s_max = max(s_max, s), used for s below
/// m_hat = m / (1 - beta1^t);  s_hat = s / (1 - beta2^t)
/// v -= lr * m_hat / (sqrt(s_hat + epsilon_root) + epsilon)
/// ```
///
/// That is optax's and PyTorch's placement of epsilon (outside the square
/// root of the corrected moment; `epsilon_root`, default 0, inside it).
/// Keras and the paper's "epsilon hat" add epsilon before the correction:
/// `v -= lr * sqrt(1 - beta2^t) / (1 - beta1^t) * m / (sqrt(s) + epsilon)`;
/// ask for it with [`Adam::epsilon_hat`] to match Keras step for step.
///
/// ```
/// use xlafn::prelude::*;
/// let w = Variable::new(Tensor::vector(&[1.0f32, 1.0])?);
/// Adam::new(0.01).apply_gradients(&[(Some(Tensor::vector(&[3.0f32, -0.5])?), &w)])?;
/// // The first step is lr * g / |g| (up to epsilon).
/// let v = w.read().to_vec::<f32>()?;
/// assert!((v[0] - 0.99).abs() < 1e-5 && (v[1] - 1.01).abs() < 1e-5);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct Adam {
    state: State,
    beta1: f64,
    beta2: f64,
    epsilon: f64,
    epsilon_root: f64,
    epsilon_hat: bool,
    amsgrad: bool,
    m: Slots,
    v: Slots,
    v_max: Slots,
}

/// AdamW (Loshchilov & Hutter): [`Adam`] with decoupled weight decay,
/// `v -= lr * weight_decay * v` before each update; Keras' default decay
/// 0.004. `AdamW::new` returns an `Adam` so every Adam option applies.
pub struct AdamW;

impl AdamW {
    /// Adam with Keras' AdamW weight decay (0.004).
    #[allow(clippy::new_ret_no_self)]
    pub fn new(learning_rate: impl Into<LearningRate>) -> Adam {
        Adam::new(learning_rate).weight_decay(0.004)
    }
}

impl Adam {
    /// Adam with the defaults above (Keras' default rate is 0.001).
    pub fn new(learning_rate: impl Into<LearningRate>) -> Adam {
        Adam {
            state: State::new(Options::new(learning_rate)),
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-7,
            epsilon_root: 0.0,
            epsilon_hat: false,
            amsgrad: false,
            m: Slots::default(),
            v: Slots::default(),
            v_max: Slots::default(),
        }
    }

    /// The decay rate of the first-moment (mean) estimate, in `[0, 1)`
    /// (default 0.9).
    pub fn beta1(mut self, beta1: f64) -> Self {
        self.beta1 = beta1;
        self
    }

    /// The decay rate of the second-moment (uncentered variance) estimate,
    /// in `[0, 1)` (default 0.999).
    pub fn beta2(mut self, beta2: f64) -> Self {
        self.beta2 = beta2;
        self
    }

    /// Added to the square root of the corrected second moment.
    pub fn epsilon(mut self, epsilon: f64) -> Self {
        self.epsilon = epsilon;
        self
    }

    /// Added to the corrected second moment inside the square root
    /// (optax's `eps_root`; keeps the gradient *through* Adam finite).
    pub fn epsilon_root(mut self, epsilon_root: f64) -> Self {
        self.epsilon_root = epsilon_root;
        self
    }

    /// Keras' placement: epsilon added to `sqrt(s)` before the bias
    /// correction (then `epsilon_root` is not used).
    pub fn epsilon_hat(mut self, epsilon_hat: bool) -> Self {
        self.epsilon_hat = epsilon_hat;
        self
    }

    /// AMSGrad: the running maximum of the second moment in the
    /// denominator.
    pub fn amsgrad(mut self, amsgrad: bool) -> Self {
        self.amsgrad = amsgrad;
        self
    }

    /// Creates the slot variables of `vars` (and the step count) now,
    /// eagerly, as Keras' `optimizer.build`: a training step traced
    /// afterwards creates no variables, so it is traced once.
    pub fn build<V: std::borrow::Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        self.state.build(&self.slot_tables(), vars)
    }

    /// The slot tables this configuration uses, with their names in a
    /// checkpoint.
    fn slot_tables(&self) -> Vec<(&'static str, &Slots)> {
        let mut tables = vec![("m", &self.m), ("v", &self.v)];
        if self.amsgrad {
            tables.push(("v_max", &self.v_max));
        }
        tables
    }

    fn check(&self) -> Result<()> {
        let unit = |x: f64| (0.0..1.0).contains(&x);
        if !unit(self.beta1) || !unit(self.beta2) {
            return Err(Error::invalid(
                "Adam",
                format!(
                    "beta1 ({}) and beta2 ({}) must be in [0, 1)",
                    self.beta1, self.beta2
                ),
            ));
        }
        if !(0.0..).contains(&self.epsilon) || !(0.0..).contains(&self.epsilon_root) {
            return Err(Error::invalid(
                "Adam",
                format!(
                    "epsilon ({}) and epsilon_root ({}) must be >= 0",
                    self.epsilon, self.epsilon_root
                ),
            ));
        }
        Ok(())
    }

    /// `1 - beta1^t` and `1 - beta2^t` in `dtype`: once per dtype for the
    /// whole step (the program a careful hand would write).
    fn corrections(
        &self,
        dtype: DType,
        t: &Tensor,
        made: &mut Vec<(DType, Tensor, Tensor)>,
    ) -> Result<(Tensor, Tensor)> {
        if let Some((_, c1, c2)) = made.iter().find(|(d, ..)| *d == dtype) {
            return Ok((c1.clone(), c2.clone()));
        }
        let tt = t.cast(dtype)?;
        let correction = |beta: f64| -> Result<Tensor> {
            constant(beta, dtype)?.pow(&tt)?.neg()?.add_scalar(1.0)
        };
        let (c1, c2) = (correction(self.beta1)?, correction(self.beta2)?);
        made.push((dtype, c1.clone(), c2.clone()));
        Ok((c1, c2))
    }
}

common_options!(Adam);

impl Optimizer for Adam {
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        self.state.state_variables(&self.slot_tables(), vars, build)
    }

    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        self.check()?;
        let mut corrections = Vec::new();
        self.state.apply(grads_and_vars, true, |u, t| {
            let m = self.m.moving_average(u.var, self.beta1, &u.grad)?;
            let mut s = self
                .v
                .moving_average(u.var, self.beta2, &u.grad.square()?)?;
            if self.amsgrad {
                let slot = self.v_max.get(u.var)?;
                s = slot.try_read()?.maximum(&s)?;
                slot.assign(&s)?;
            }
            let t = t.ok_or_else(|| {
                Error::FailedPrecondition("Adam: its step count was not kept".into())
            })?;
            let (c1, c2) = self.corrections(u.var.dtype(), t, &mut corrections)?;
            let step = if self.epsilon_hat {
                m.mul(&c2.sqrt()?.div(&c1)?)?
                    .div(&s.sqrt()?.add_scalar(self.epsilon)?)?
            } else {
                let s_hat = s.div(&c2)?;
                let s_hat = if self.epsilon_root == 0.0 {
                    s_hat
                } else {
                    s_hat.add_scalar(self.epsilon_root)?
                };
                m.div(&c1)?.div(&s_hat.sqrt()?.add_scalar(self.epsilon)?)?
            };
            u.var.assign_sub(&u.rate.scale(&step)?)
        })
    }
}
