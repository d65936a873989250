//! Layer: optimizers (learning rates). What an optimizer multiplies its
//! update by: a host number, a [`Variable`] the user assigns between steps,
//! or a [`Schedule`] of the optimizer's step count.
//!
//! Why tensors: a schedule is evaluated *inside* the training step on the
//! optimizer's `iterations` variable, so a compiled step is traced once and
//! its learning rate still changes every call (making a new optimizer per
//! step instead would create variables on a later call, which `tf.function`
//! refuses). The schedules are Keras' (`keras.optimizers.schedules`), with
//! the same arguments and formulas; `step` is the number of updates applied
//! before this one (0 on the first), as Keras passes `iterations`.
//! Imports: `tensor`, `variable`, `dtype`, `error`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::sync::Arc;

/// A learning rate as a function of the step count.
pub trait Schedule: Send + Sync {
    /// The rate at `step` (an f32 scalar tensor: the updates applied so
    /// far), as an f32 scalar tensor. Written with tensor ops, so it runs
    /// eagerly and inside compiled steps alike.
    fn at(&self, step: &Tensor) -> Result<Tensor>;
}

/// The learning rate an optimizer uses.
#[derive(Clone)]
pub enum LearningRate {
    /// A fixed number, folded into the program.
    Constant(f64),
    /// A float scalar variable read at every step: assign it between calls
    /// (a compiled step is not retraced).
    Variable(Variable),
    /// A schedule of the step count.
    Schedule(Arc<dyn Schedule>),
}

impl std::fmt::Debug for LearningRate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LearningRate::Constant(v) => write!(f, "Constant({v})"),
            LearningRate::Variable(v) => write!(f, "Variable({:?})", v.name()),
            LearningRate::Schedule(_) => write!(f, "Schedule(..)"),
        }
    }
}

impl From<f64> for LearningRate {
    fn from(v: f64) -> Self {
        LearningRate::Constant(v)
    }
}

impl From<Variable> for LearningRate {
    fn from(v: Variable) -> Self {
        LearningRate::Variable(v)
    }
}

impl<S: Schedule + 'static> From<S> for LearningRate {
    fn from(s: S) -> Self {
        LearningRate::Schedule(Arc::new(s))
    }
}

impl LearningRate {
    /// The rate at `step` (f32 scalar) in `dtype`; `None` for a constant,
    /// which callers fold in as a host number.
    /// `step` is `None` when the optimizer keeps no count, which it does
    /// whenever the rate is a schedule.
    pub(crate) fn tensor_at(&self, step: Option<&Tensor>, dtype: DType) -> Result<Option<Tensor>> {
        let rate = match self {
            LearningRate::Constant(_) => return Ok(None),
            LearningRate::Variable(v) => {
                if !v.dtype().is_float() || !v.dims().is_empty() {
                    return Err(Error::Type(format!(
                        "optimizer: the learning-rate variable '{}' must be a float scalar, got {} of shape {:?}",
                        v.name(),
                        v.dtype(),
                        v.dims()
                    )));
                }
                v.try_read()?
            }
            LearningRate::Schedule(s) => match step {
                Some(step) => s.at(step)?,
                None => return Err(Error::FailedPrecondition(
                    "optimizer: a learning-rate schedule needs the step count, which was not kept"
                        .into(),
                )),
            },
        };
        Ok(Some(rate.cast(dtype)?))
    }

    /// Checks what can be checked before the first step.
    pub(crate) fn check(&self) -> Result<()> {
        match self {
            LearningRate::Constant(v) if !v.is_finite() => Err(Error::invalid(
                "optimizer",
                format!("the learning rate must be finite, got {v}"),
            )),
            _ => Ok(()),
        }
    }
}

fn scalar(v: f64) -> Result<Tensor> {
    Tensor::fill(&[], v, DType::F32)
}

fn positive(name: &str, what: &str, v: f64) -> Result<()> {
    if v > 0.0 && v.is_finite() {
        Ok(())
    } else {
        Err(Error::invalid(
            name,
            format!("{what} must be positive and finite, got {v}"),
        ))
    }
}

/// What exponential and inverse-time decay share: a rate decayed over
/// intervals of `decay_steps`, continuously or (`staircase`) in whole ones.
#[derive(Clone, Debug)]
struct Decay {
    initial: f64,
    decay_steps: f64,
    decay_rate: f64,
    staircase: bool,
}

impl Decay {
    fn new(name: &str, initial: f64, decay_steps: i64, decay_rate: f64) -> Result<Decay> {
        positive(name, "decay_steps", decay_steps as f64)?;
        Ok(Decay {
            initial,
            decay_steps: decay_steps as f64,
            decay_rate,
            staircase: false,
        })
    }

    /// `step / decay_steps`, floored with `staircase`.
    fn intervals(&self, step: &Tensor) -> Result<Tensor> {
        let p = step.div_scalar(self.decay_steps)?;
        if self.staircase { p.floor() } else { Ok(p) }
    }
}

/// `initial * decay_rate ^ (step / decay_steps)`; with `staircase` the
/// exponent is floored (Keras' `ExponentialDecay`).
#[derive(Clone, Debug)]
pub struct ExponentialDecay(Decay);

impl ExponentialDecay {
    /// Starts at `initial` and is multiplied by `decay_rate` every
    /// `decay_steps` steps (`decay_steps` > 0).
    pub fn new(initial: f64, decay_steps: i64, decay_rate: f64) -> Result<ExponentialDecay> {
        Decay::new("ExponentialDecay", initial, decay_steps, decay_rate).map(ExponentialDecay)
    }

    /// Decays in whole intervals of `decay_steps`.
    pub fn staircase(mut self, staircase: bool) -> Self {
        self.0.staircase = staircase;
        self
    }
}

impl Schedule for ExponentialDecay {
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        scalar(self.0.decay_rate)?
            .pow(&self.0.intervals(step)?)?
            .mul_scalar(self.0.initial)
    }
}

/// `initial / (1 + decay_rate * step / decay_steps)`, the exponent floored
/// with `staircase` (Keras' `InverseTimeDecay`).
#[derive(Clone, Debug)]
pub struct InverseTimeDecay(Decay);

impl InverseTimeDecay {
    /// Starts at `initial`; the denominator grows by `decay_rate` every
    /// `decay_steps` steps (`decay_steps` > 0).
    pub fn new(initial: f64, decay_steps: i64, decay_rate: f64) -> Result<InverseTimeDecay> {
        Decay::new("InverseTimeDecay", initial, decay_steps, decay_rate).map(InverseTimeDecay)
    }

    /// Decays in whole intervals of `decay_steps`.
    pub fn staircase(mut self, staircase: bool) -> Self {
        self.0.staircase = staircase;
        self
    }
}

impl Schedule for InverseTimeDecay {
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        let denom = self
            .0
            .intervals(step)?
            .mul_scalar(self.0.decay_rate)?
            .add_scalar(1.0)?;
        scalar(self.0.initial)?.div(&denom)
    }
}

/// `values[i]` while `step <= boundaries[i]` and `values[i-1] < step`:
/// `values[0]` up to and including `boundaries[0]`, the last value after
/// the last boundary (Keras' `PiecewiseConstantDecay`).
#[derive(Clone, Debug)]
pub struct PiecewiseConstant {
    boundaries: Vec<f64>,
    values: Vec<f64>,
}

impl PiecewiseConstant {
    /// `values` has one more entry than the increasing `boundaries`.
    pub fn new(boundaries: &[i64], values: &[f64]) -> Result<PiecewiseConstant> {
        if values.len() != boundaries.len() + 1 {
            return Err(Error::invalid(
                "PiecewiseConstant",
                format!(
                    "needs one more value than boundaries, got {} boundaries and {} values",
                    boundaries.len(),
                    values.len()
                ),
            ));
        }
        if boundaries.windows(2).any(|w| w[0] >= w[1]) {
            return Err(Error::invalid(
                "PiecewiseConstant",
                format!("boundaries {boundaries:?} must increase"),
            ));
        }
        Ok(PiecewiseConstant {
            boundaries: boundaries.iter().map(|&b| b as f64).collect(),
            values: values.to_vec(),
        })
    }
}

impl Schedule for PiecewiseConstant {
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        // From the last piece back: past boundary i, take values[i + 1].
        let mut rate = scalar(self.values[0])?;
        for (i, &b) in self.boundaries.iter().enumerate() {
            rate = step
                .gt_scalar(b)?
                .where_(&scalar(self.values[i + 1])?, &rate)?;
        }
        Ok(rate)
    }
}

/// `(initial - end) * (1 - step / decay_steps) ^ power + end`, with `step`
/// held at `decay_steps` afterwards (or, with `cycle`, `decay_steps`
/// stretched to the next multiple of itself); Keras' `PolynomialDecay`.
#[derive(Clone, Debug)]
pub struct PolynomialDecay {
    initial: f64,
    decay_steps: f64,
    end: f64,
    power: f64,
    cycle: bool,
}

impl PolynomialDecay {
    /// Linear decay from `initial` to `end` over `decay_steps`.
    pub fn new(initial: f64, decay_steps: i64, end: f64) -> Result<PolynomialDecay> {
        positive("PolynomialDecay", "decay_steps", decay_steps as f64)?;
        Ok(PolynomialDecay {
            initial,
            decay_steps: decay_steps as f64,
            end,
            power: 1.0,
            cycle: false,
        })
    }

    /// The exponent of the decay curve (default 1, linear; Keras' `power`).
    pub fn power(mut self, power: f64) -> Self {
        self.power = power;
        self
    }

    /// Instead of holding at `end` after `decay_steps`, restarts the decay
    /// over the next multiple of `decay_steps` (Keras' `cycle`).
    pub fn cycle(mut self, cycle: bool) -> Self {
        self.cycle = cycle;
        self
    }
}

impl Schedule for PolynomialDecay {
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        let (step, steps) = if self.cycle {
            // ceil(step / decay_steps), at least 1, times decay_steps.
            let k = step
                .div_scalar(self.decay_steps)?
                .ceil()?
                .maximum_scalar(1.0)?;
            (step.clone(), k.mul_scalar(self.decay_steps)?)
        } else {
            (
                step.minimum_scalar(self.decay_steps)?,
                scalar(self.decay_steps)?,
            )
        };
        let frac = step.div(&steps)?.neg()?.add_scalar(1.0)?;
        frac.pow_scalar(self.power)?
            .mul_scalar(self.initial - self.end)?
            .add_scalar(self.end)
    }
}

/// Cosine decay with an optional linear warmup (Keras 3's `CosineDecay`):
/// for `warmup_steps` steps the rate goes linearly from `initial` to
/// `warmup_target`; then over `decay_steps` it follows
/// `peak * ((1 - alpha) * (1 + cos(pi * s / decay_steps)) / 2 + alpha)`,
/// `s` the steps since the warmup (held at `decay_steps` afterwards) and
/// `peak` the warmup target (or `initial` without warmup).
#[derive(Clone, Debug)]
pub struct CosineDecay {
    initial: f64,
    decay_steps: f64,
    alpha: f64,
    warmup: Option<(f64, f64)>,
}

impl CosineDecay {
    /// Decays from `initial` to 0 over `decay_steps` steps, with no warmup
    /// (see `alpha` and `warmup`); errors unless `decay_steps` is positive.
    pub fn new(initial: f64, decay_steps: i64) -> Result<CosineDecay> {
        positive("CosineDecay", "decay_steps", decay_steps as f64)?;
        Ok(CosineDecay {
            initial,
            decay_steps: decay_steps as f64,
            alpha: 0.0,
            warmup: None,
        })
    }

    /// The floor, as a fraction of the peak rate.
    pub fn alpha(mut self, alpha: f64) -> Self {
        self.alpha = alpha;
        self
    }

    /// A linear warmup to `target` over `steps` steps before the decay.
    pub fn warmup(mut self, target: f64, steps: i64) -> Result<Self> {
        positive("CosineDecay", "warmup steps", steps as f64)?;
        self.warmup = Some((target, steps as f64));
        Ok(self)
    }
}

impl Schedule for CosineDecay {
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        let (peak, warmup_steps) = self.warmup.unwrap_or((self.initial, 0.0));
        let s = step
            .sub_scalar(warmup_steps)?
            .maximum_scalar(0.0)?
            .minimum_scalar(self.decay_steps)?;
        let cosine = s
            .mul_scalar(std::f64::consts::PI / self.decay_steps)?
            .cos()?
            .add_scalar(1.0)?
            .mul_scalar(0.5 * (1.0 - self.alpha))?
            .add_scalar(self.alpha)?
            .mul_scalar(peak)?;
        if warmup_steps == 0.0 {
            return Ok(cosine);
        }
        let warm = step
            .div_scalar(warmup_steps)?
            .mul_scalar(peak - self.initial)?
            .add_scalar(self.initial)?;
        step.lt_scalar(warmup_steps)?.where_(&warm, &cosine)
    }
}

/// Any function of the step tensor as a schedule (optax's schedules are
/// plain functions too).
pub struct FnSchedule<F>(pub F);

impl<F> Schedule for FnSchedule<F>
where
    F: Fn(&Tensor) -> Result<Tensor> + Send + Sync,
{
    fn at(&self, step: &Tensor) -> Result<Tensor> {
        (self.0)(step)
    }
}
