//! The tape: what was computed, and the backward walk over it.

use super::cotangent::Cotangent;
use crate::error::{Error, Result};
use crate::ops::{Op, OpDef};
use crate::tensor::{Tensor, TensorKey};
use crate::variable::Variable;
use std::cell::{Cell, RefCell};
use std::collections::{HashMap, HashSet};
use std::rc::Rc;

struct Entry {
    op: Op,
    inputs: Vec<Tensor>,
    outputs: Vec<Tensor>,
}

#[derive(Default)]
struct State {
    /// When the tape started, in this thread's order of tapes.
    started: u64,
    entries: Vec<Entry>,
    watched: HashSet<TensorKey>,
    /// (variable id, tensor read) for every variable read while recording.
    variable_reads: Vec<(u64, Tensor)>,
}

thread_local! {
    /// The tapes recording on this thread, innermost last.
    static RECORDING: RefCell<Vec<Rc<RefCell<State>>>> = const { RefCell::new(Vec::new()) };
    static ANY: Cell<bool> = const { Cell::new(false) };
    /// How many tapes this thread has started: each tape's `started`.
    static STARTED: Cell<u64> = const { Cell::new(0) };
}

/// Is any tape recording on this thread? (A cheap check for `apply`.)
pub(crate) fn recording() -> bool {
    ANY.with(Cell::get)
}

fn each_tape(f: impl Fn(&mut State)) {
    RECORDING.with(|r| r.borrow().iter().for_each(|s| f(&mut s.borrow_mut())));
}

/// Notes an applied op on every recording tape.
pub(crate) fn record_op(op: &Op, inputs: &[&Tensor], outputs: &[Tensor]) {
    each_tape(|s| {
        s.entries.push(Entry {
            op: op.clone(),
            inputs: inputs.iter().map(|t| (*t).clone()).collect(),
            outputs: outputs.to_vec(),
        })
    });
}

/// Stops every tape on this thread from recording until the guard drops
/// (a custom-gradient body runs so).
pub(crate) struct PausedRecording(Vec<Rc<RefCell<State>>>);

pub(crate) fn pause_recording() -> PausedRecording {
    let saved = RECORDING.with(|r| std::mem::take(&mut *r.borrow_mut()));
    ANY.with(|a| a.set(false));
    PausedRecording(saved)
}

/// Stops the tapes started after `tape` from recording until the guard
/// drops. A forward accumulator computes its JVPs so: as in TensorFlow, an
/// accumulator's JVP computation is seen by the tapes and accumulators
/// around it, not by those started inside it.
pub(crate) fn pause_newer_than(tape: &GradientTape) -> PausedNewer {
    let started = tape.state.borrow().started;
    let paused = RECORDING.with(|r| {
        let mut r = r.borrow_mut();
        let (newer, kept): (Vec<_>, Vec<_>) = std::mem::take(&mut *r)
            .into_iter()
            .partition(|s| s.borrow().started > started);
        *r = kept;
        ANY.with(|a| a.set(!r.is_empty()));
        newer
    });
    PausedNewer(paused)
}

/// The tapes [`pause_newer_than`] stopped.
pub(crate) struct PausedNewer(Vec<Rc<RefCell<State>>>);

impl Drop for PausedNewer {
    fn drop(&mut self) {
        RECORDING.with(|r| {
            let mut r = r.borrow_mut();
            r.extend(std::mem::take(&mut self.0));
            ANY.with(|a| a.set(!r.is_empty()));
        });
    }
}

impl Drop for PausedRecording {
    fn drop(&mut self) {
        RECORDING.with(|r| {
            let mut r = r.borrow_mut();
            let started_inside = std::mem::take(&mut *r);
            *r = std::mem::take(&mut self.0);
            r.extend(started_inside);
            ANY.with(|a| a.set(!r.is_empty()));
        });
    }
}

/// Notes a variable read on every recording tape (variables are watched
/// automatically).
pub(crate) fn record_variable_read(variable_id: u64, value: &Tensor) {
    each_tape(|s| s.variable_reads.push((variable_id, value.clone())));
}

/// What to differentiate with respect to.
pub enum Source<'a> {
    /// A tensor; the tape must have watched it (`GradientTape::watch`)
    /// before the ops that use it ran, or be inside a trace.
    Tensor(&'a Tensor),
    /// A variable; every read of it on a recording tape is watched
    /// automatically, as in TensorFlow.
    Variable(&'a Variable),
}

impl<'a> From<&'a Tensor> for Source<'a> {
    fn from(t: &'a Tensor) -> Self {
        Source::Tensor(t)
    }
}

impl<'a> From<&'a Variable> for Source<'a> {
    fn from(v: &'a Variable) -> Self {
        Source::Variable(v)
    }
}

/// Records operations for automatic differentiation (`tf.GradientTape`).
/// Recording starts when the tape is made and stops at `gradient` (for a
/// non-persistent tape) or when it is dropped.
///
/// ```
/// use xlafn::prelude::*;
/// let x = Tensor::scalar(3.0f32);
/// let tape = GradientTape::new();
/// tape.watch(&x);
/// let y = &x * &x;
/// let dy_dx = tape.gradient(&y, &[(&x).into()])?;
/// assert_eq!(dy_dx[0].as_ref().unwrap().item::<f32>()?, 6.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct GradientTape {
    state: Rc<RefCell<State>>,
    persistent: bool,
    used: Cell<bool>,
}

/// `GradientTape(persistent: false, used: false)`: what decides whether
/// another `gradient` call is allowed.
impl std::fmt::Debug for GradientTape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GradientTape(persistent: {}, used: {})",
            self.persistent,
            self.used.get()
        )
    }
}

impl Default for GradientTape {
    fn default() -> Self {
        Self::new()
    }
}

impl GradientTape {
    /// A tape that records until its first `gradient` call.
    pub fn new() -> GradientTape {
        Self::start(false)
    }

    /// A tape that can compute several gradients (and keeps recording
    /// until dropped).
    pub fn persistent() -> GradientTape {
        Self::start(true)
    }

    fn start(persistent: bool) -> GradientTape {
        crate::tensor::hooks::register_recorder(crate::tensor::hooks::Recorder {
            active: recording,
            record_op,
            record_variable_read,
            pause: || Box::new(pause_recording()),
            call_vjp: super::call_rule::compiled_call_vjp,
            region_vjp: super::region_rules::region_vjp,
        });
        let started = STARTED.with(|n| {
            n.set(n.get() + 1);
            n.get()
        });
        let state = Rc::new(RefCell::new(State {
            started,
            ..State::default()
        }));
        RECORDING.with(|r| r.borrow_mut().push(state.clone()));
        ANY.with(|a| a.set(true));
        GradientTape {
            state,
            persistent,
            used: Cell::new(false),
        }
    }

    fn stop(&self) {
        RECORDING.with(|r| {
            let mut r = r.borrow_mut();
            r.retain(|s| !Rc::ptr_eq(s, &self.state));
            ANY.with(|a| a.set(!r.is_empty()));
        });
    }

    fn resume(&self) {
        RECORDING.with(|r| r.borrow_mut().push(self.state.clone()));
        ANY.with(|a| a.set(true));
    }

    /// Makes gradients with respect to `t` available (variables are
    /// watched automatically).
    pub fn watch(&self, t: &Tensor) {
        self.state.borrow_mut().watched.insert(t.key());
    }

    /// d`target`/d`source` for each source (`None` where there is none).
    /// The target is summed if it is not a scalar, as TensorFlow does.
    pub fn gradient(&self, target: &Tensor, sources: &[Source<'_>]) -> Result<Vec<Option<Tensor>>> {
        self.using(|tape| tape.backward(target, sources, None))
    }

    /// The vector-Jacobian product: `output_gradients`ᵀ · d`target`/d`source`
    /// for each source (TensorFlow's `gradient(..., output_gradients=)`,
    /// JAX's `vjp`). `output_gradients` has the target's dtype and shape.
    pub fn gradient_with(
        &self,
        target: &Tensor,
        sources: &[Source<'_>],
        output_gradients: &Tensor,
    ) -> Result<Vec<Option<Tensor>>> {
        if output_gradients.tensor_type() != target.tensor_type() {
            return Err(Error::invalid(
                "gradient",
                format!(
                    "output_gradients must have the target's type {}, got {}",
                    target.tensor_type(),
                    output_gradients.tensor_type()
                ),
            ));
        }
        self.using(|tape| tape.backward(target, sources, Some(output_gradients)))
    }

    /// Runs `f` as one use of the tape: a non-persistent tape allows one;
    /// recording pauses meanwhile (the backward ops are not recorded here,
    /// but an enclosing tape, if any, does record them: higher-order
    /// gradients).
    pub(crate) fn using<R>(&self, f: impl FnOnce(&Self) -> Result<R>) -> Result<R> {
        if self.used.replace(true) && !self.persistent {
            return Err(Error::Value(
                "a non-persistent GradientTape can compute one set of gradients only; use \
                 GradientTape::persistent() for more"
                    .into(),
            ));
        }
        self.stop();
        let result = f(self);
        if self.persistent {
            self.resume();
        }
        result
    }

    /// The gradients, the target's cotangent `seed` (ones when `None`).
    pub(crate) fn backward(
        &self,
        target: &Tensor,
        sources: &[Source<'_>],
        seed: Option<&Tensor>,
    ) -> Result<Vec<Option<Tensor>>> {
        if target.dtype().is_complex() {
            return Err(Error::invalid(
                "gradient",
                format!(
                    "the target is complex ({}); gradients are taken of real values (as \
                     jax.grad): differentiate .real(), .imag() or .abs() of it",
                    target.tensor_type()
                ),
            ));
        }
        if !target.dtype().is_float() {
            return Ok(sources.iter().map(|_| None).collect());
        }
        let state = self.state.borrow();
        let leads_to_source = leads_to_sources(&state, sources);
        let mut grads: HashMap<TensorKey, Cotangent> = HashMap::new();
        let seed = match seed {
            Some(s) => s.clone(),
            None => target.ones_like()?,
        };
        accumulate(&mut grads, target.key(), seed)?;
        for entry in state.entries.iter().rev() {
            // Only inputs a source flows into need a gradient (TensorFlow's
            // tape prunes the same way).
            let needed: Vec<bool> = entry
                .inputs
                .iter()
                .map(|i| leads_to_source.contains(&i.key()))
                .collect();
            if !needed.contains(&true) {
                continue;
            }
            let out_grads: Vec<Option<Tensor>> = entry
                .outputs
                .iter()
                .map(|o| resolved(&mut grads, o.key()))
                .collect::<Result<_>>()?;
            if out_grads.iter().all(Option::is_none) {
                continue;
            }
            if let (true, Some(g), Some(begin)) = (
                needed[0],
                &out_grads[0],
                entry.op.cotangent_placement(&entry.inputs),
            ) {
                let x = &entry.inputs[0];
                grads.entry(x.key()).or_default().place(x, begin, g.clone());
                continue;
            }
            let in_grads =
                entry
                    .op
                    .vjp_needed(&entry.inputs, &entry.outputs, &out_grads, &needed)?;
            for ((input, g), needed) in entry.inputs.iter().zip(in_grads).zip(&needed) {
                if let (Some(g), true) = (g, needed) {
                    accumulate(&mut grads, input.key(), g)?;
                }
            }
        }
        sources
            .iter()
            .map(|s| self.source_gradient(&state, &mut grads, s))
            .collect()
    }

    fn source_gradient(
        &self,
        state: &State,
        grads: &mut HashMap<TensorKey, Cotangent>,
        source: &Source<'_>,
    ) -> Result<Option<Tensor>> {
        match source {
            Source::Tensor(t) => {
                let key = t.key();
                let variable_read = state.variable_reads.iter().any(|(_, r)| r.key() == key);
                let watched = state.watched.contains(&key) || t.is_symbolic() || variable_read;
                if watched {
                    resolved(grads, key)
                } else {
                    Ok(None)
                }
            }
            Source::Variable(v) => {
                let mut total: Option<Tensor> = None;
                let mut seen = HashSet::new();
                for (_, read) in state.variable_reads.iter().filter(|(id, _)| *id == v.id()) {
                    if !seen.insert(read.key()) {
                        continue;
                    }
                    if let Some(g) = resolved(grads, read.key())? {
                        total = Some(match total {
                            Some(t) => t.add(&g)?,
                            None => g,
                        });
                    }
                }
                Ok(total)
            }
        }
    }
}

/// The tensors some source flows into: the sources themselves (a
/// variable's reads stand for it) and, in recording order, every output of
/// an op with such an input.
fn leads_to_sources(state: &State, sources: &[Source<'_>]) -> HashSet<TensorKey> {
    let mut set: HashSet<TensorKey> = HashSet::new();
    for source in sources {
        match source {
            Source::Tensor(t) => {
                set.insert(t.key());
            }
            Source::Variable(v) => set.extend(
                state
                    .variable_reads
                    .iter()
                    .filter(|(id, _)| *id == v.id())
                    .map(|(_, read)| read.key()),
            ),
        }
    }
    for entry in &state.entries {
        if entry.inputs.iter().any(|i| set.contains(&i.key())) {
            set.extend(entry.outputs.iter().map(Tensor::key));
        }
    }
    set
}

fn accumulate(grads: &mut HashMap<TensorKey, Cotangent>, key: TensorKey, g: Tensor) -> Result<()> {
    grads.entry(key).or_default().add(g)
}

/// The gradient gathered for `key`, its slices assembled (`None`: none).
fn resolved(grads: &mut HashMap<TensorKey, Cotangent>, key: TensorKey) -> Result<Option<Tensor>> {
    grads.get_mut(&key).map(Cotangent::resolve).transpose()
}

impl Drop for GradientTape {
    fn drop(&mut self) {
        self.stop();
    }
}
