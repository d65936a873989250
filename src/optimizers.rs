//! Optimizers: SGD (with optional momentum) and Adam, updating variables
//! from gradients, eagerly or inside a traced training step (where the
//! updates become in-place variable writes of the compiled program).
//!
//! Slot variables (momentum, Adam's moments and step count) are created
//! the first time a variable is updated. Inside a function that is the
//! function's first call, which TensorFlow's rules allow (B20): the
//! trace that creates them is followed by one that reuses them. Using a
//! *new* optimizer in a later call of the same function would create
//! variables on a later call, which is refused, as in the guide's
//! "multiple optimizers" example; make one function per optimizer.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

/// Something that updates variables from their gradients.
pub trait Optimizer: Send + Sync {
    /// Applies one update step. Gradients that are `None` (the loss does not
    /// depend on that variable) leave the variable unchanged.
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()>;
}

/// A zero-filled variable shaped like `v`. Its initial value is made on
/// the host (an upload, not an op), so this works while tracing too.
fn zeros_like_variable(v: &Variable) -> Result<Variable> {
    let n = v.dims().iter().product::<i64>() as usize * v.dtype().size_in_bytes()?;
    Variable::try_new(Tensor::from_host_bytes(v.dtype(), v.dims(), &vec![0u8; n])?)
}

/// Slot variables keyed by the id of the variable they belong to.
#[derive(Default)]
struct Slots(Mutex<HashMap<u64, Variable>>);

impl Slots {
    fn get(&self, v: &Variable) -> Result<Variable> {
        let mut slots = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(&v.slot_key()) {
            return Ok(s.clone());
        }
        let slot = zeros_like_variable(v)?;
        slots.insert(v.slot_key(), slot.clone());
        Ok(slot)
    }
}

fn float_grad(g: &Tensor, v: &Variable) -> Result<()> {
    if !v.dtype().is_float() || g.dtype() != v.dtype() {
        return Err(Error::Type(format!(
            "optimizer: variable '{}' is {} and its gradient {}; both must be the same float type",
            v.name(),
            v.dtype(),
            g.dtype()
        )));
    }
    Ok(())
}

/// Stochastic gradient descent: `v -= lr * g`, or with momentum
/// `m = momentum * m + g; v -= lr * m`.
pub struct Sgd {
    learning_rate: f64,
    momentum: f64,
    velocity: Slots,
}

impl Sgd {
    pub fn new(learning_rate: f64) -> Sgd {
        Sgd {
            learning_rate,
            momentum: 0.0,
            velocity: Slots::default(),
        }
    }

    /// SGD with momentum (a slot variable per updated variable).
    pub fn with_momentum(learning_rate: f64, momentum: f64) -> Sgd {
        Sgd {
            learning_rate,
            momentum,
            velocity: Slots::default(),
        }
    }
}

impl Optimizer for Sgd {
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        for (g, v) in grads_and_vars {
            let Some(g) = g else { continue };
            float_grad(g, v)?;
            let step = if self.momentum == 0.0 {
                g.clone()
            } else {
                let m = self.velocity.get(v)?;
                let next = m.try_read()?.mul_scalar(self.momentum)?.add(g)?;
                m.assign(&next)?;
                next
            };
            v.assign_sub(&step.mul_scalar(self.learning_rate)?)?;
        }
        Ok(())
    }
}

/// Adam (Kingma & Ba), with bias correction.
pub struct Adam {
    learning_rate: f64,
    beta1: f64,
    beta2: f64,
    epsilon: f64,
    m: Slots,
    v: Slots,
    step: OnceLock<Variable>,
}

impl Adam {
    /// Adam with the usual defaults (beta1 0.9, beta2 0.999, epsilon 1e-7).
    pub fn new(learning_rate: f64) -> Adam {
        Adam {
            learning_rate,
            beta1: 0.9,
            beta2: 0.999,
            epsilon: 1e-7,
            m: Slots::default(),
            v: Slots::default(),
            step: OnceLock::new(),
        }
    }
}

impl Adam {
    /// Creates the slot variables of `vars` (and the step count) now,
    /// eagerly, as Keras' `optimizer.build`: a training step traced
    /// afterwards creates no variables, so it is traced once.
    pub fn build(&self, vars: &[&Variable]) -> Result<()> {
        self.step_variable()?;
        for v in vars {
            self.m.get(v)?;
            self.v.get(v)?;
        }
        Ok(())
    }

    fn step_variable(&self) -> Result<Variable> {
        Ok(match self.step.get() {
            Some(s) => s.clone(),
            None => {
                let s = Variable::try_new(Tensor::try_scalar(0f32)?)?;
                self.step.get_or_init(|| s).clone()
            }
        })
    }
}

impl Optimizer for Adam {
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()> {
        let step = self.step_variable()?;
        step.assign_add(&Tensor::fill(&[], 1.0, DType::F32)?)?;
        let t = step.try_read()?;
        // Bias corrections 1 - beta^t, once per dtype for the whole step
        // (the program a careful hand would write; #16 item 3).
        let mut corrections: Vec<(DType, Tensor, Tensor)> = Vec::new();
        for (g, var) in grads_and_vars {
            let Some(g) = g else { continue };
            float_grad(g, var)?;
            let (m, v) = (self.m.get(var)?, self.v.get(var)?);
            let m_next = m
                .try_read()?
                .mul_scalar(self.beta1)?
                .add(&g.mul_scalar(1.0 - self.beta1)?)?;
            let v_next = v
                .try_read()?
                .mul_scalar(self.beta2)?
                .add(&g.square()?.mul_scalar(1.0 - self.beta2)?)?;
            m.assign(&m_next)?;
            v.assign(&v_next)?;
            let dtype = var.dtype();
            let (c1, c2) = match corrections.iter().find(|(d, ..)| *d == dtype) {
                Some((_, c1, c2)) => (c1.clone(), c2.clone()),
                None => {
                    let tt = t.cast(dtype)?;
                    let correction = |beta: f64| -> Result<Tensor> {
                        Tensor::fill(&[], beta, dtype)?
                            .pow(&tt)?
                            .neg()?
                            .add_scalar(1.0)
                    };
                    let (c1, c2) = (correction(self.beta1)?, correction(self.beta2)?);
                    corrections.push((dtype, c1.clone(), c2.clone()));
                    (c1, c2)
                }
            };
            let update = m_next
                .div(&c1)?
                .div(&v_next.div(&c2)?.sqrt()?.add_scalar(self.epsilon)?)?;
            var.assign_sub(&update.mul_scalar(self.learning_rate)?)?;
        }
        Ok(())
    }
}
