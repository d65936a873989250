//! Layer: optimizers, a user-facing module over `tensor`, `variable` and
//! `autodiff`. Optimizers update variables from gradients, eagerly or inside
//! a traced training step (where the updates become in-place variable
//! writes of the compiled program): [`Sgd`] (momentum, Nesterov), [`Adam`]
//! (AMSGrad, both epsilon placements; [`AdamW`] is Adam with decoupled
//! weight decay), [`RmsProp`] and [`Adagrad`], with Keras' defaults and
//! formulas (each type's doc gives its update). [`LossScaleOptimizer`]
//! wraps any of them with dynamic loss scaling for float16 training.
//!
//! Every optimizer shares Keras' common options ([`Options`]): the learning
//! rate as a number, a variable or a [`Schedule`] evaluated on the step
//! count inside the step (so a compiled step is traced once however the
//! rate changes), decoupled weight decay (`v -= lr * wd * v` before the
//! update), and gradient clipping by value, norm or global norm.
//!
//! # Parameter groups
//!
//! Some variables are trained differently: weight decay is usually left
//! off biases, normalization scales and embeddings, and a pretrained body
//! may take a smaller rate than a new head. [`ParamGroup`] selects
//! variables (by a predicate, by substrings of [`Variable::name`], which
//! are module paths for a `Module`'s variables, or as a list) and gives
//! them their own weight decay and learning-rate multiplier, as PyTorch's
//! `param_groups` and optax's `mask`/`multi_transform` do. The common
//! case has a shorthand, Keras' `exclude_from_weight_decay`:
//!
//! ```
//! use xlafn::prelude::*;
//! // The GPT recipe: AdamW whose decay skips every vector (biases and
//! // norm scales), all gradients clipped together to a global norm of 1.
//! let opt = AdamW::new(6e-4)
//!     .weight_decay(0.1)
//!     .exclude_from_weight_decay(|v: &Variable| v.dims().len() < 2)
//!     .clip(GradientClip::GlobalNorm(1.0));
//! let (w, b) = (Variable::new(Tensor::try_ones(&[2, 2], DType::F32)?), Variable::new(Tensor::try_ones(&[2], DType::F32)?));
//! opt.apply_gradients(&[(Some(Tensor::try_zeros(&[2, 2], DType::F32)?), &w), (Some(Tensor::try_zeros(&[2], DType::F32)?), &b)])?;
//! assert_eq!(b.read().to_vec::<f32>()?, vec![1.0, 1.0]); // no decay on the bias
//! assert!(w.read().to_vec::<f32>()?[0] < 1.0); // the matrix decayed
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! Clipping by global norm ([`GradientClip::GlobalNorm`]) always spans
//! every gradient of one `apply_gradients` or `minimize` call, whatever
//! groups the variables fall in. A step that uses two optimizers clips
//! once itself with [`crate::clip_by_global_norm`] before applying.
//!
//! # Slots inside a compiled step
//!
//! Slot variables (moments, accumulators) and the step count are created
//! the first time a variable is updated, or up front by `build`. Inside a
//! function that is the function's first call, which TensorFlow's rules
//! allow: they are made outside the trace (as under TensorFlow's
//! `init_scope`) and read by it like any other variable, so a training
//! step `function(|x, y| opt.minimize(&vars, || loss(x, y)))` needs no
//! `build` first and is traced once. Using a *new* optimizer in a later
//! call of the same function would create variables on a later call, which
//! is refused, as in the guide's "multiple optimizers" example; a schedule
//! replaces the "new optimizer per learning rate" pattern.
//!
//! # Resumable training
//!
//! An optimizer's state (the step count, which places a schedule, and its
//! slot variables) can be saved and restored so that a run stopped at
//! step N continues exactly as the uninterrupted run would, bit for bit.
//! [`Optimizer::state_variables`] names that state for a set of model
//! variables given with their module paths: `iterations` (the step count)
//! and `<slot>.<model path>` for each slot (`momentum.layers.0.kernel`;
//! Adam's `m`, `v`, `v_max`; RMSprop's `mean_square`, `mean_grad`,
//! `momentum`; Adagrad's `accumulator`). It is one mechanism every
//! optimizer here gets from its shared step state, listing exactly the
//! slots its configuration uses. `checkpoint::save_training` and
//! `checkpoint::restore_training` store it beside a model's variables
//! under `optimizer.`:
//!
//! ```
//! use xlafn::prelude::*;
//! use xlafn::{checkpoint, module::Module};
//! #[derive(Module)]
//! struct Line { w: Variable }
//! let path = std::env::temp_dir().join(format!("line-{}.safetensors", std::process::id()));
//! let (model, opt) = (Line { w: Variable::new(Tensor::scalar(3.0f32)) }, Sgd::with_momentum(0.1, 0.9));
//! opt.minimize(&model.trainable_variables(), || model.w.read().square())?;
//! checkpoint::save_training(&model, &opt, &path)?;
//! // A fresh model and optimizer continue where the first left off.
//! let (fresh, opt2) = (Line { w: Variable::new(Tensor::scalar(0.0f32)) }, Sgd::with_momentum(0.1, 0.9));
//! checkpoint::restore_training(&fresh, &opt2, &path)?;
//! opt.minimize(&model.trainable_variables(), || model.w.read().square())?;
//! opt2.minimize(&fresh.trainable_variables(), || fresh.w.read().square())?;
//! assert_eq!(fresh.w.read().item::<f32>()?, model.w.read().item::<f32>()?);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! Saving creates nothing: a slot not made yet (a variable never updated)
//! is saved as the value it would start from, and a step count the
//! optimizer does not keep (plain SGD at a fixed rate) as 0. Restoring
//! builds the optimizer first, as `build` does (every slot for the given
//! variables and the step count, eagerly, so a step traced afterwards
//! creates no variables), then assigns the saved values.

mod accumulation;
mod adagrad;
mod adam;
mod averaging;
mod loss_scale;
mod rmsprop;
pub mod schedules;
mod sgd;

pub use accumulation::GradientAccumulation;
pub use adagrad::Adagrad;
pub use adam::{Adam, AdamW};
pub use averaging::{ExponentialMovingAverage, Improvement, ReduceLrOnPlateau};
pub use loss_scale::LossScaleOptimizer;
pub use rmsprop::RmsProp;
pub use schedules::{
    CosineDecay, ExponentialDecay, FnSchedule, InverseTimeDecay, LearningRate, PiecewiseConstant,
    PolynomialDecay, Schedule,
};
pub use sgd::Sgd;

use crate::autodiff::{GradientTape, Source};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::stats::clip_by_global_norm;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::borrow::Borrow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

/// Something that updates variables from their gradients.
pub trait Optimizer: Send + Sync {
    /// Applies one update step. Gradients that are `None` (the loss does not
    /// depend on that variable) leave the variable and its slots unchanged.
    fn apply_gradients(&self, grads_and_vars: &[(Option<Tensor>, &Variable)]) -> Result<()>;

    /// Keras' `minimize`: evaluates `loss` under a tape, takes its gradients
    /// with respect to `vars` and applies them; returns the loss.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let w = Variable::new(Tensor::scalar(3.0f32));
    /// let opt = Sgd::new(0.25);
    /// let loss = opt.minimize(&[&w], || w.read().square())?; // d/dw = 2w = 6
    /// assert_eq!(loss.item::<f32>()?, 9.0);
    /// assert_eq!(w.read().item::<f32>()?, 3.0 - 0.25 * 6.0);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    fn minimize<V: Borrow<Variable>>(
        &self,
        vars: &[V],
        loss: impl FnOnce() -> Result<Tensor>,
    ) -> Result<Tensor>
    where
        Self: Sized,
    {
        let (value, grads) = gradients_of(vars, loss)?;
        let pairs: Vec<(Option<Tensor>, &Variable)> = grads
            .into_iter()
            .zip(vars.iter().map(Borrow::borrow))
            .collect();
        self.apply_gradients(&pairs)?;
        Ok(value)
    }

    /// The optimizer's state for the model variables `vars` (each with
    /// its module path) as named variables: `iterations`, the step count,
    /// then `<slot>.<path>` for each slot the optimizer keeps per variable
    /// (see [the module docs](crate::optimizers#resumable-training)).
    ///
    /// With `build` false nothing is created: slots not made yet and a
    /// step count not kept are returned as new variables holding their
    /// starting values, for saving. With `build` true the slots and the
    /// step count are created first (as `build` does), so that assigning
    /// the returned variables restores the optimizer. Eager only.
    ///
    /// The built-in optimizers implement it; an optimizer of your own
    /// that does not says so with an error.
    fn state_variables(
        &self,
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        let _ = (vars, build);
        Err(Error::FailedPrecondition(
            "this optimizer does not name its state (implement Optimizer::state_variables)".into(),
        ))
    }
}

/// The loss `f()` and its gradients with respect to `vars` (variables or
/// references to them: `&module.trainable_variables()` works), as
/// `jax.value_and_grad`: a variable the loss does not depend on gets zeros (not `None`), so the
/// gradients can be used without unwrapping.
///
/// ```
/// use xlafn::prelude::*;
/// let (a, b) = (Variable::new(Tensor::scalar(2.0f64)), Variable::new(Tensor::scalar(5.0f64)));
/// let (loss, grads) = value_and_grad(&[&a, &b], || a.read().pow_scalar(3.0))?;
/// assert_eq!(loss.item::<f64>()?, 8.0);
/// assert_eq!(grads[0].item::<f64>()?, 12.0);
/// assert_eq!(grads[1].item::<f64>()?, 0.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn value_and_grad<V: Borrow<Variable>>(
    vars: &[V],
    f: impl FnOnce() -> Result<Tensor>,
) -> Result<(Tensor, Vec<Tensor>)> {
    let (value, grads) = gradients_of(vars, f)?;
    let grads = grads
        .into_iter()
        .zip(vars)
        .map(|(g, v)| match g {
            Some(g) => Ok(g),
            None => v.borrow().try_read()?.zeros_like(),
        })
        .collect::<Result<_>>()?;
    Ok((value, grads))
}

fn gradients_of<V: Borrow<Variable>>(
    vars: &[V],
    f: impl FnOnce() -> Result<Tensor>,
) -> Result<(Tensor, Vec<Option<Tensor>>)> {
    let tape = GradientTape::new();
    let value = f()?;
    let sources: Vec<Source> = vars.iter().map(|v| Source::Variable(v.borrow())).collect();
    let grads = tape.gradient(&value, &sources)?;
    Ok((value, grads))
}

/// How an optimizer clips gradients before using them (Keras' `clipvalue`,
/// `clipnorm` and `global_clipnorm`; one at a time, as Keras allows).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum GradientClip {
    /// Each element into `[-v, v]`.
    Value(f64),
    /// Each gradient scaled to an L2 norm of at most this
    /// ([`Tensor::clip_by_norm`]).
    Norm(f64),
    /// All gradients scaled together to a global L2 norm of at most this
    /// ([`crate::clip_by_global_norm`]).
    GlobalNorm(f64),
}

/// The options every optimizer has (Keras' base optimizer arguments).
#[derive(Clone, Debug)]
pub struct Options {
    /// The step size: a constant or a schedule of the step count.
    pub learning_rate: LearningRate,
    /// Decoupled weight decay: `v -= lr * weight_decay * v` before each
    /// update (Keras 3; `AdamW`'s decay).
    pub weight_decay: f64,
    /// Gradient clipping applied before the update (Keras' `clipvalue`,
    /// `clipnorm`, `global_clipnorm`); `None` clips nothing.
    pub clip: Option<GradientClip>,
    /// Parameter groups, in the order added: a variable takes each
    /// setting from the last group that selects it and sets it.
    pub groups: Vec<ParamGroup>,
}

impl Options {
    fn new(learning_rate: impl Into<LearningRate>) -> Options {
        Options {
            learning_rate: learning_rate.into(),
            weight_decay: 0.0,
            clip: None,
            groups: Vec::new(),
        }
    }

    /// `var`'s learning-rate multiplier and weight decay.
    fn settings_for(&self, var: &Variable) -> Result<(f64, f64)> {
        let (mut scale, mut decay) = (None, None);
        for group in self.groups.iter().rev() {
            if scale.is_some() && decay.is_some() {
                break;
            }
            if !(group.select)(var) {
                continue;
            }
            scale = scale.or(group.learning_rate_scale);
            decay = decay.or(group.weight_decay);
        }
        let (scale, decay) = (scale.unwrap_or(1.0), decay.unwrap_or(self.weight_decay));
        if !scale.is_finite() || scale < 0.0 || !decay.is_finite() {
            return Err(Error::invalid(
                "optimizer",
                format!(
                    "variable '{}' has learning-rate multiplier {scale} and weight decay {decay}; \
                     both must be finite and the multiplier >= 0",
                    var.name()
                ),
            ));
        }
        Ok((scale, decay))
    }
}

/// Selects variables by a predicate over the [`Variable`].
type Selector = Arc<dyn Fn(&Variable) -> bool + Send + Sync>;

/// A parameter group: the variables it selects train with their own
/// weight decay and/or learning-rate multiplier (PyTorch's
/// `param_groups`, optax's `mask` and `multi_transform`). Add groups with
/// each optimizer's `param_group`; a variable no group selects uses the
/// optimizer's settings, and one several groups select takes each setting
/// from the last added group that sets it. Selection happens on the host
/// when a step is traced, so groups change no compiled program's shape.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::optimizers::ParamGroup;
/// let body = Variable::new(Tensor::scalar(1.0f32)).named("body.kernel");
/// let head = Variable::new(Tensor::scalar(1.0f32)).named("head.kernel");
/// // The pretrained body at a tenth of the rate, without decay.
/// let opt = Sgd::new(0.5).weight_decay(0.1)
///     .param_group(ParamGroup::named(&["body."]).learning_rate_scale(0.1).weight_decay(0.0));
/// let g = Tensor::scalar(1.0f32);
/// opt.apply_gradients(&[(Some(g.clone()), &body), (Some(g), &head)])?;
/// assert!((body.read().item::<f32>()? - 0.95).abs() < 1e-6); // 1 - 0.05 * 1
/// assert!((head.read().item::<f32>()? - 0.45).abs() < 1e-6); // 1 - 0.5 * 0.1, then - 0.5
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone)]
pub struct ParamGroup {
    select: Selector,
    /// What selects, for `Debug`.
    what: String,
    learning_rate_scale: Option<f64>,
    weight_decay: Option<f64>,
}

impl ParamGroup {
    /// The variables `select` returns true for, e.g. every vector (biases,
    /// normalization scales) with `|v: &Variable| v.dims().len() < 2`.
    pub fn matching(select: impl Fn(&Variable) -> bool + Send + Sync + 'static) -> ParamGroup {
        ParamGroup::new(Arc::new(select), "a predicate".into())
    }

    /// The variables whose [`Variable::name`] contains any of `substrings`
    /// (Keras' `var_names`): with module paths as names, `&["bias", "ln",
    /// "embed"]` selects `blocks.0.ln.gamma` and every `.bias`.
    pub fn named(substrings: &[&str]) -> ParamGroup {
        let names: Vec<String> = substrings.iter().map(|s| s.to_string()).collect();
        let what = format!("names containing {names:?}");
        ParamGroup::new(
            Arc::new(move |v: &Variable| names.iter().any(|n| v.name().contains(n.as_str()))),
            what,
        )
    }

    /// Exactly these variables (Keras' `var_list`), also when a compiled
    /// step receives them as arguments.
    pub fn variables<V: Borrow<Variable>>(vars: &[V]) -> ParamGroup {
        let keys: Vec<u64> = vars.iter().map(|v| v.borrow().slot_key()).collect();
        let what = format!("{} listed variables", keys.len());
        ParamGroup::new(
            Arc::new(move |v: &Variable| keys.contains(&v.slot_key())),
            what,
        )
    }

    fn new(select: Selector, what: String) -> ParamGroup {
        ParamGroup {
            select,
            what,
            learning_rate_scale: None,
            weight_decay: None,
        }
    }

    /// Multiplies the optimizer's learning rate (a constant, variable or
    /// schedule) for these variables; the weight decay step scales with it,
    /// as it does with the rate.
    pub fn learning_rate_scale(mut self, scale: f64) -> ParamGroup {
        self.learning_rate_scale = Some(scale);
        self
    }

    /// The decoupled weight decay for these variables; 0 turns it off.
    pub fn weight_decay(mut self, weight_decay: f64) -> ParamGroup {
        self.weight_decay = Some(weight_decay);
        self
    }

    /// Whether the group selects `var`.
    pub fn selects(&self, var: &Variable) -> bool {
        (self.select)(var)
    }
}

impl std::fmt::Debug for ParamGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ParamGroup")
            .field("selects", &self.what)
            .field("learning_rate_scale", &self.learning_rate_scale)
            .field("weight_decay", &self.weight_decay)
            .finish()
    }
}

/// The builder methods of [`Options`], on each optimizer.
macro_rules! common_options {
    ($ty:ty) => {
        impl $ty {
            /// Replaces the learning rate (a number, a float scalar
            /// `Variable`, or a schedule).
            pub fn learning_rate(
                mut self,
                rate: impl Into<$crate::optimizers::LearningRate>,
            ) -> Self {
                self.state.options.learning_rate = rate.into();
                self
            }
            /// Decoupled weight decay: `v -= lr * weight_decay * v` before
            /// each update.
            pub fn weight_decay(mut self, weight_decay: f64) -> Self {
                self.state.options.weight_decay = weight_decay;
                self
            }
            /// Clips gradients before they are used. Clipping by global
            /// norm spans every gradient of one update, across groups.
            pub fn clip(mut self, clip: $crate::optimizers::GradientClip) -> Self {
                self.state.options.clip = Some(clip);
                self
            }
            /// Adds a parameter group (its own weight decay and learning
            /// rate multiplier); see [`ParamGroup`]($crate::optimizers::ParamGroup).
            pub fn param_group(mut self, group: $crate::optimizers::ParamGroup) -> Self {
                self.state.options.groups.push(group);
                self
            }
            /// Keras' `exclude_from_weight_decay`: no weight decay for the
            /// variables `select` returns true for, e.g. every vector
            /// with `|v: &Variable| v.dims().len() < 2` (biases and
            /// normalization scales). Shorthand for a group with decay 0.
            pub fn exclude_from_weight_decay(
                self,
                select: impl Fn(&$crate::variable::Variable) -> bool + Send + Sync + 'static,
            ) -> Self {
                self.param_group($crate::optimizers::ParamGroup::matching(select).weight_decay(0.0))
            }
            /// Keras' `exclude_from_weight_decay(var_names=...)`: no weight
            /// decay for variables whose name contains any of `substrings`
            /// (module paths such as `blocks.0.ln.gamma`).
            pub fn exclude_from_weight_decay_names(self, substrings: &[&str]) -> Self {
                self.param_group(
                    $crate::optimizers::ParamGroup::named(substrings).weight_decay(0.0),
                )
            }
            /// The number of updates applied so far (Keras' `iterations`).
            /// Counted once something reads it: Adam's bias correction, a
            /// schedule, or `build`; plain SGD, RMSprop and Adagrad at a
            /// fixed rate, never built, keep no count and report 0.
            pub fn iterations(&self) -> $crate::error::Result<i64> {
                self.state.iterations()
            }
        }
    };
}
pub(crate) use common_options;

/// A variable shaped like `v` holding `fill` everywhere. Its initial
/// value is made on the host (an upload, not an op), so this works while
/// tracing too.
fn variable_like(v: &Variable, fill: f64) -> Result<Variable> {
    let one: Vec<u8> = match v.dtype() {
        DType::F64 => fill.to_le_bytes().to_vec(),
        DType::F32 => (fill as f32).to_le_bytes().to_vec(),
        DType::F16 => half::f16::from_f64(fill).to_le_bytes().to_vec(),
        DType::BF16 => half::bf16::from_f64(fill).to_le_bytes().to_vec(),
        d => {
            return Err(Error::Type(format!(
                "optimizer: variable '{}' is {d}; optimizers update float variables",
                v.name()
            )));
        }
    };
    let n = v.dims().iter().product::<i64>() as usize;
    Variable::try_new(Tensor::from_host_bytes(
        v.dtype(),
        v.dims(),
        &one.repeat(n),
    )?)
}

/// Slot variables keyed by the id of the variable they belong to.
#[derive(Default)]
struct Slots {
    fill: f64,
    slots: Mutex<HashMap<u64, Variable>>,
}

impl Slots {
    fn filled(fill: f64) -> Slots {
        Slots {
            fill,
            slots: Mutex::default(),
        }
    }

    /// `v`'s slot if it was made.
    fn existing(&self, v: &Variable) -> Option<Variable> {
        let slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        slots.get(&v.slot_key()).cloned()
    }

    fn get(&self, v: &Variable) -> Result<Variable> {
        let mut slots = self.slots.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(s) = slots.get(&v.slot_key()) {
            return Ok(s.clone());
        }
        let slot = crate::trace::create_owned_variable(|| variable_like(v, self.fill))?;
        slots.insert(v.slot_key(), slot.clone());
        Ok(slot)
    }

    /// `slot = decay * slot + (1 - decay) * x` for `var`'s slot, stored;
    /// returns the new value (Adam's and RMSprop's moments).
    fn moving_average(&self, var: &Variable, decay: f64, x: &Tensor) -> Result<Tensor> {
        let s = self.get(var)?;
        let next = s
            .try_read()?
            .mul_scalar(decay)?
            .add(&x.mul_scalar(1.0 - decay)?)?;
        s.assign(&next)?;
        Ok(next)
    }
}

/// What every optimizer keeps: its options and its step count.
struct State {
    options: Options,
    iterations: OnceLock<Variable>,
}

/// One gradient ready for an update rule: the gradient (clipped), its
/// variable, and the learning rate in the variable's dtype.
struct Update<'a> {
    grad: Tensor,
    var: &'a Variable,
    rate: Rate,
}

/// A learning rate in one dtype: a host number or a scalar tensor.
#[derive(Clone)]
enum Rate {
    Host(f64),
    Tensor(Tensor),
}

impl Rate {
    /// `x * rate`.
    fn scale(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Rate::Host(r) => x.mul_scalar(*r),
            Rate::Tensor(r) => x.mul(r),
        }
    }
}

impl State {
    fn new(options: Options) -> State {
        State {
            options,
            iterations: OnceLock::new(),
        }
    }

    fn iterations_variable(&self) -> Result<Variable> {
        if let Some(v) = self.iterations.get() {
            return Ok(v.clone());
        }
        let v = crate::trace::create_owned_variable(|| {
            Ok(Variable::try_new(Tensor::try_scalar(0i64)?)?.named("iterations"))
        })?;
        Ok(self.iterations.get_or_init(|| v).clone())
    }

    /// `build` for every optimizer: the step count and, for each
    /// variable, a slot in each of `tables` (the slots the optimizer's
    /// configuration uses).
    fn build<V: Borrow<Variable>>(&self, tables: &[(&str, &Slots)], vars: &[V]) -> Result<()> {
        self.iterations_variable()?;
        for v in vars {
            for (_, slots) in tables {
                slots.get(v.borrow())?;
            }
        }
        Ok(())
    }

    /// [`Optimizer::state_variables`] for every optimizer, from the slot
    /// tables its configuration uses, each with its name.
    fn state_variables(
        &self,
        tables: &[(&str, &Slots)],
        vars: &[(String, Variable)],
        build: bool,
    ) -> Result<Vec<(String, Variable)>> {
        if crate::trace::is_tracing() {
            return Err(Error::FailedPrecondition(
                "optimizer: its state is named eagerly, not inside a traced function".into(),
            ));
        }
        if build {
            let model: Vec<&Variable> = vars.iter().map(|(_, v)| v).collect();
            self.build(tables, &model)?;
        }
        let iterations = match self.iterations.get() {
            Some(v) => v.clone(),
            None => Variable::try_new(Tensor::try_scalar(0i64)?)?,
        };
        let mut out = vec![("iterations".to_string(), iterations)];
        for (slot, slots) in tables {
            for (path, v) in vars {
                let value = match slots.existing(v) {
                    Some(s) => s,
                    None => variable_like(v, slots.fill)?,
                };
                out.push((crate::module::join(slot, path), value));
            }
        }
        Ok(out)
    }

    fn iterations(&self) -> Result<i64> {
        match self.iterations.get() {
            Some(v) => v.try_read()?.item::<i64>(),
            None => Ok(0),
        }
    }

    /// The shared part of a step: checks the gradients, clips them, reads
    /// the learning rate at the step count, applies weight decay, calls
    /// `rule` for each present gradient with the step number `t` (1 on the
    /// first update, as f32), then counts the step.
    ///
    /// The count is a variable, kept only when something reads it (`rule`
    /// says so with `rule_reads_step`, or the rate is a schedule), or once
    /// `build` made it: plain SGD at a fixed rate then creates no variable
    /// and its training step is traced once.
    fn apply(
        &self,
        grads_and_vars: &[(Option<Tensor>, &Variable)],
        rule_reads_step: bool,
        mut rule: impl FnMut(&Update, Option<&Tensor>) -> Result<()>,
    ) -> Result<()> {
        self.options.learning_rate.check()?;
        let present: Vec<(Tensor, &Variable)> = grads_and_vars
            .iter()
            .filter_map(|(g, v)| g.as_ref().map(|g| (g.clone(), *v)))
            .collect();
        for (g, v) in &present {
            float_grad(g, v)?;
        }
        let grads = self.clip(present.iter().map(|(g, _)| g.clone()).collect())?;
        let counted = rule_reads_step
            || matches!(self.options.learning_rate, LearningRate::Schedule(_))
            || self.iterations.get().is_some();
        let iterations = if counted {
            Some(self.iterations_variable()?)
        } else {
            None
        };
        // Uncounted steps make no step tensors (no ops on eager SGD's path).
        let step = match &iterations {
            Some(v) => Some(v.try_read()?.cast(DType::F32)?),
            None => None,
        };
        let t = match (&step, rule_reads_step) {
            (Some(s), true) => Some(s.add_scalar(1.0)?),
            _ => None,
        };
        let mut rates: Vec<(DType, u64, Rate)> = Vec::new();
        for (grad, (_, var)) in grads.into_iter().zip(&present) {
            let (scale, weight_decay) = self.options.settings_for(var)?;
            let rate = self.rate_in(var.dtype(), scale, step.as_ref(), &mut rates)?;
            if weight_decay != 0.0 {
                let decay = rate.scale(&var.try_read()?.mul_scalar(weight_decay)?)?;
                var.assign_sub(&decay)?;
            }
            rule(&Update { grad, var, rate }, t.as_ref())?;
        }
        match iterations {
            Some(v) => v.assign_add(&Tensor::try_scalar(1i64)?),
            None => Ok(()),
        }
    }

    /// The learning rate times a group's `scale`, in `dtype`: made once
    /// per dtype and scale in a step.
    fn rate_in(
        &self,
        dtype: DType,
        scale: f64,
        step: Option<&Tensor>,
        made: &mut Vec<(DType, u64, Rate)>,
    ) -> Result<Rate> {
        let key = scale.to_bits();
        if let Some((.., r)) = made.iter().find(|(d, k, _)| *d == dtype && *k == key) {
            return Ok(r.clone());
        }
        let rate = if scale == 1.0 {
            match self.options.learning_rate.tensor_at(step, dtype)? {
                Some(t) => Rate::Tensor(t),
                None => match self.options.learning_rate {
                    LearningRate::Constant(v) => Rate::Host(v),
                    _ => unreachable!("only constants have no tensor"),
                },
            }
        } else {
            match self.rate_in(dtype, 1.0, step, made)? {
                Rate::Host(r) => Rate::Host(r * scale),
                Rate::Tensor(t) => Rate::Tensor(t.mul_scalar(scale)?),
            }
        };
        made.push((dtype, key, rate.clone()));
        Ok(rate)
    }

    fn clip(&self, grads: Vec<Tensor>) -> Result<Vec<Tensor>> {
        match self.options.clip {
            None => Ok(grads),
            Some(GradientClip::Value(v)) => {
                if v.is_nan() || v <= 0.0 {
                    return Err(Error::invalid(
                        "optimizer",
                        format!("clip value must be positive, got {v}"),
                    ));
                }
                grads
                    .iter()
                    .map(|g| g.clip_by_value_scalar(-v, v))
                    .collect()
            }
            Some(GradientClip::Norm(n)) => grads.iter().map(|g| g.clip_by_norm(n)).collect(),
            Some(GradientClip::GlobalNorm(n)) if !grads.is_empty() => {
                Ok(clip_by_global_norm(&grads, n)?.0)
            }
            Some(GradientClip::GlobalNorm(_)) => Ok(grads),
        }
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
    if g.shape() != crate::ir::Shape::known(v.dims()) {
        return Err(Error::invalid(
            "optimizer",
            format!(
                "the gradient of variable '{}' has shape {}, the variable {:?}",
                v.name(),
                g.shape(),
                v.dims()
            ),
        ));
    }
    Ok(())
}

/// A scalar of `dtype` holding `v`.
fn constant(v: f64, dtype: DType) -> Result<Tensor> {
    Tensor::fill(&[], v, dtype)
}
