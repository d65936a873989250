//! Training helpers beside the optimizers: an exponential moving average
//! of weights (`tf.train.ExponentialMovingAverage`, Keras' `use_ema`,
//! optax's `ema`) and Keras' `ReduceLROnPlateau`, which lowers a learning
//! rate held in a variable when a monitored metric stops improving.
//!
//! Layer: optimizers. Imports `tensor`, `variable`, `trace` (shadows are
//! made outside a trace, as slots are) and `error`.

use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::Mutex;

/// A moving average of variables (`tf.train.ExponentialMovingAverage`):
/// each [`update`](Self::update) moves a shadow copy of every variable
/// toward its value, `shadow = decay * shadow + (1 - decay) * value`. A
/// shadow starts at the variable's value when the average first meets
/// it: eagerly, its value then; inside a compiled step, its value before
/// the step's first call (shadows are made outside the trace, as
/// TensorFlow starts them at a variable's initial value), so the step is
/// traced once. Evaluate with the averages by [`copy_to`](Self::copy_to).
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::optimizers::ExponentialMovingAverage;
/// let w = Variable::new(Tensor::scalar(0.0f32));
/// let ema = ExponentialMovingAverage::new(0.9)?;
/// ema.update(&[&w])?;                   // the shadow starts at 0
/// w.assign(&Tensor::scalar(1.0f32))?;
/// ema.update(&[&w])?;                   // 0.9 * 0 + 0.1 * 1
/// assert!((ema.average(&w).unwrap().read().item::<f32>()? - 0.1).abs() < 1e-7);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct ExponentialMovingAverage {
    decay: f64,
    shadows: Mutex<HashMap<u64, Variable>>,
}

impl ExponentialMovingAverage {
    /// An average keeping `decay` of the old shadow at each update
    /// (0.999 and 0.9999 are typical); `decay` in `[0, 1]`.
    pub fn new(decay: f64) -> Result<ExponentialMovingAverage> {
        if !(0.0..=1.0).contains(&decay) {
            return Err(Error::invalid(
                "ExponentialMovingAverage",
                format!("decay must be in [0, 1], got {decay}"),
            ));
        }
        Ok(ExponentialMovingAverage {
            decay,
            shadows: Mutex::default(),
        })
    }

    /// Moves each variable's shadow toward its value.
    pub fn update<V: Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        for v in vars {
            let v = v.borrow();
            let shadow = self.shadow(v)?;
            let value = v.try_read()?;
            let moved = shadow
                .try_read()?
                .mul_scalar(self.decay)?
                .add(&value.mul_scalar(1.0 - self.decay)?)?;
            shadow.assign(&moved)?;
        }
        Ok(())
    }

    /// The shadow of `v`, once updated.
    pub fn average(&self, v: &Variable) -> Option<Variable> {
        let shadows = self.shadows.lock().unwrap_or_else(|e| e.into_inner());
        shadows.get(&v.id()).cloned()
    }

    /// Assigns each variable its average (Keras' EMA swap before
    /// evaluation); a variable never updated is left as it is.
    pub fn copy_to<V: Borrow<Variable>>(&self, vars: &[V]) -> Result<()> {
        for v in vars {
            if let Some(shadow) = self.average(v.borrow()) {
                v.borrow().assign(&shadow.try_read()?)?;
            }
        }
        Ok(())
    }

    fn shadow(&self, v: &Variable) -> Result<Variable> {
        if let Some(s) = self.average(v) {
            return Ok(s);
        }
        // Made eagerly from the variable's value, also inside a trace.
        let made = crate::trace::init_scope(|| -> Result<Variable> {
            let value: Tensor = v.try_read()?;
            Ok(Variable::try_new(value)?
                .non_trainable()
                .named(format!("ema.{}", v.name())))
        })?;
        let mut shadows = self.shadows.lock().unwrap_or_else(|e| e.into_inner());
        Ok(shadows.entry(v.id()).or_insert(made).clone())
    }
}

/// Whether a smaller or a larger metric is better.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Improvement {
    /// A loss: smaller is better.
    Lower,
    /// An accuracy: larger is better.
    Higher,
}

/// Keras' `ReduceLROnPlateau`: after `patience` calls of
/// [`step`](Self::step) without the metric improving by more than
/// `min_delta`, the learning rate (a float scalar variable the optimizer
/// reads, `LearningRate::Variable`) is multiplied by `factor`, not below
/// `min_lr`, and `cooldown` calls follow in which nothing is counted.
/// Defaults are Keras': factor 0.1, patience 10, min_delta 1e-4, cooldown
/// 0, min_lr 0, a lower metric better.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::optimizers::ReduceLrOnPlateau;
/// let lr = Variable::new(Tensor::scalar(0.1f32));
/// let plateau = ReduceLrOnPlateau::new(lr.clone()).patience(2).factor(0.5);
/// for loss in [1.0, 0.9, 0.95, 0.92] {   // no better than 0.9 twice
///     plateau.step(loss)?;
/// }
/// assert_eq!(lr.read().item::<f32>()?, 0.05);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct ReduceLrOnPlateau {
    lr: Variable,
    factor: f64,
    patience: u32,
    min_delta: f64,
    cooldown: u32,
    min_lr: f64,
    mode: Improvement,
    /// The best metric, calls without improvement, cooldown calls left.
    state: Mutex<(f64, u32, u32)>,
}

impl ReduceLrOnPlateau {
    /// Reduces the learning rate held in `lr`.
    pub fn new(lr: Variable) -> ReduceLrOnPlateau {
        ReduceLrOnPlateau {
            lr,
            factor: 0.1,
            patience: 10,
            min_delta: 1e-4,
            cooldown: 0,
            min_lr: 0.0,
            mode: Improvement::Lower,
            state: Mutex::new((f64::INFINITY, 0, 0)),
        }
    }

    /// The factor the rate is multiplied by (below 1).
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = factor;
        self
    }

    /// Calls without improvement before a reduction.
    pub fn patience(mut self, patience: u32) -> Self {
        self.patience = patience;
        self
    }

    /// The least change that counts as an improvement.
    pub fn min_delta(mut self, min_delta: f64) -> Self {
        self.min_delta = min_delta;
        self
    }

    /// Calls after a reduction in which nothing is counted.
    pub fn cooldown(mut self, cooldown: u32) -> Self {
        self.cooldown = cooldown;
        self
    }

    /// The rate is never reduced below this.
    pub fn min_lr(mut self, min_lr: f64) -> Self {
        self.min_lr = min_lr;
        self
    }

    /// Whether a lower (a loss) or a higher (an accuracy) metric is better.
    pub fn mode(mut self, mode: Improvement) -> Self {
        self.mode = mode;
        let best = match mode {
            Improvement::Lower => f64::INFINITY,
            Improvement::Higher => f64::NEG_INFINITY,
        };
        *self.state.get_mut().unwrap_or_else(|e| e.into_inner()) = (best, 0, 0);
        self
    }

    /// Takes the metric of one epoch (or evaluation); returns whether the
    /// rate was reduced. A NaN metric never counts as an improvement.
    pub fn step(&self, metric: f64) -> Result<bool> {
        if self.factor >= 1.0 || self.factor < 0.0 {
            return Err(Error::invalid(
                "ReduceLrOnPlateau",
                format!("factor must be in [0, 1), got {}", self.factor),
            ));
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (best, wait, cooling) = &mut *state;
        let in_cooldown = *cooling > 0;
        if in_cooldown {
            *cooling -= 1;
            *wait = 0;
        }
        let better = match self.mode {
            Improvement::Lower => metric < *best - self.min_delta,
            Improvement::Higher => metric > *best + self.min_delta,
        };
        if better {
            *best = metric;
            *wait = 0;
            return Ok(false);
        }
        if in_cooldown {
            return Ok(false);
        }
        *wait += 1;
        if *wait < self.patience {
            return Ok(false);
        }
        let old = self
            .lr
            .try_read()?
            .cast(crate::dtype::DType::F64)?
            .item::<f64>()?;
        if old <= self.min_lr {
            return Ok(false);
        }
        let new = (old * self.factor).max(self.min_lr);
        let value = Tensor::try_scalar(new)?.cast(self.lr.dtype())?;
        self.lr.assign(&value)?;
        *cooling = self.cooldown;
        *wait = 0;
        Ok(true)
    }
}
