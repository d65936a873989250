//! Layer: tensor (the interpreters `apply` hands ops to). Imports `ops`
//! (`Op`, `CallVjp`, `Batched`, the region ops), `ir::Graph`, `Tensor` and
//! `error`;
//! nothing above the tensor layer.
//!
//! Besides running an op eagerly or adding it to the graph being traced,
//! `apply` hands it to three interpreters that live in higher layers:
//! gradient tapes note it (`autodiff`), check-numerics inspects its
//! results (`debug`), and an op on a sharded tensor runs partitioned over
//! its mesh (`function`'s sharded calls). Those layers import `tensor`;
//! so that `tensor` does not import them back, each registers its entry
//! points here when it first becomes active, and `apply` calls whatever
//! is registered:
//!
//! - a tape registers the [`Recorder`] when it starts recording: what
//!   `apply` notes, and what the layers between `tensor` and `autodiff`
//!   (control flow, function calls, sharding, custom gradients) ask of
//!   tapes: whether one records, pausing them, the compiled gradient of a
//!   function call, and the gradient rules of the region ops;
//! - `vmap` registers the batching rules it writes itself (`while` loops
//!   and custom gradients, see [`RegionBatch`]) when it first replays a
//!   function, before any op is asked for a batching rule;
//! - `enable_check_numerics` registers the [`NumericsCheck`];
//! - `function::sharded_tensor`, through which every sharded tensor is
//!   made, registers the sharded executor before the first one exists.
//!
//! Registration happens once per process; an interpreter that is
//! registered but idle (no tape recording on this thread, check-numerics
//! off) costs `apply` one atomic load and one call of its `active` check.

use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::ops::Op;
use crate::ops::batching::Batched;
use crate::ops::control::{CallVjp, Cond, While};
use crate::ops::custom_gradient::CustomGradient;
use crate::ops::shard_map::ShardMap;
use crate::tensor::Tensor;
use std::any::Any;
use std::panic::Location;
use std::sync::{Arc, OnceLock};

/// Gradient recording: what tapes (and forward accumulators) note.
pub(crate) struct Recorder {
    /// Is any tape recording on this thread?
    pub(crate) active: fn() -> bool,
    /// Notes an applied op, its inputs and results, on every recording tape.
    pub(crate) record_op: fn(&Op, &[&Tensor], &[Tensor]),
    /// Notes a variable read (the variable's id and the value read).
    pub(crate) record_variable_read: fn(u64, &Tensor),
    /// Stops every tape on this thread from recording until the returned
    /// guard drops.
    pub(crate) pause: fn() -> Box<dyn Any>,
    /// The gradient of an eager call of a function's graph (named so), as
    /// a compiled backward function: the rule of the `call` op a tape
    /// notes for it.
    pub(crate) call_vjp: fn(Arc<Graph>, &str) -> CallVjp,
    /// The gradient rule of a region op (see [`region_vjp`]).
    pub(crate) region_vjp: RegionVjp,
}

/// A region op whose gradient rule `autodiff` writes: the rules replay the
/// op's regions under a tape and rebuild control flow or a `shard_map`
/// around them, all of which sit above the op definitions.
pub(crate) enum RegionOp<'a> {
    Cond(&'a Cond),
    While(&'a While),
    ShardMap(&'a ShardMap),
}

/// `OpDef::vjp_needed` of a region op: its inputs, outputs, output
/// gradients and which inputs need one, to the inputs' gradients.
pub(crate) type RegionVjp = for<'a> fn(
    RegionOp<'a>,
    &[Tensor],
    &[Tensor],
    &[Option<Tensor>],
    &[bool],
) -> Result<Vec<Option<Tensor>>>;

/// An op whose batching rule `vmap` writes: a `while` whose condition
/// differs per example becomes a counted loop (`control`), and a custom
/// gradient's batched body and gradient are `vmap`s of the user's.
pub(crate) enum RegionBatchOp<'a> {
    While(&'a While),
    CustomGradient(&'a CustomGradient),
}

/// `OpDef::batch` of those ops: inputs, which are batched, the batch size.
pub(crate) type RegionBatch = for<'a> fn(RegionBatchOp<'a>, &[Tensor], &[bool], i64) -> Batched;

/// Check-numerics: a look at every op's results while it is on.
pub(crate) struct NumericsCheck {
    /// Is the mode on?
    pub(crate) active: fn() -> bool,
    /// Checks the results of the op named so, called from `caller`.
    pub(crate) check: fn(&str, &[Tensor], &'static Location<'static>) -> Result<()>,
}

/// Runs an op with at least one sharded input, partitioned over its mesh.
pub(crate) type ShardedExecution = fn(Op, &[&Tensor]) -> Result<Vec<Tensor>>;

static RECORDER: OnceLock<Recorder> = OnceLock::new();
static NUMERICS_CHECK: OnceLock<NumericsCheck> = OnceLock::new();
static SHARDED_EXECUTION: OnceLock<ShardedExecution> = OnceLock::new();
static REGION_BATCH: OnceLock<RegionBatch> = OnceLock::new();

/// Registers gradient recording (idempotent: the first registration stays).
pub(crate) fn register_recorder(recorder: Recorder) {
    let _ = RECORDER.set(recorder);
}

/// Registers check-numerics (idempotent).
pub(crate) fn register_numerics_check(check: NumericsCheck) {
    let _ = NUMERICS_CHECK.set(check);
}

/// Registers sharded execution (idempotent).
pub(crate) fn register_sharded_execution(run: ShardedExecution) {
    let _ = SHARDED_EXECUTION.set(run);
}

/// Registers `vmap`'s batching rules of region ops (idempotent).
pub(crate) fn register_region_batch(rule: RegionBatch) {
    let _ = REGION_BATCH.set(rule);
}

/// The batching rule of a `while` or custom-gradient op. Only `vmap`
/// batches, and it registers the rule before its first replay.
pub(crate) fn region_batch(
    op: RegionBatchOp<'_>,
    inputs: &[Tensor],
    batched: &[bool],
    size: i64,
) -> Batched {
    match REGION_BATCH.get() {
        Some(rule) => rule(op, inputs, batched, size),
        None => Some(Err(Error::FailedPrecondition(
            "an op is batched but vmap never registered its rules (a bug in xlafn)".into(),
        ))),
    }
}

/// The recorder, when a tape is recording on this thread.
#[inline]
pub(crate) fn recorder() -> Option<&'static Recorder> {
    RECORDER.get().filter(|r| (r.active)())
}

/// Is a tape recording on this thread?
#[inline]
pub(crate) fn recording() -> bool {
    recorder().is_some()
}

/// Stops every tape on this thread from recording until the guard drops
/// (placing a value, running a custom gradient's forward body); `None`,
/// with nothing to undo, when none records.
pub(crate) fn pause_recording() -> Option<Box<dyn Any>> {
    recorder().map(|r| (r.pause)())
}

/// The compiled gradient of a function call a tape notes; asked only while
/// a tape records, whose start registered the recorder.
pub(crate) fn call_vjp(graph: Arc<Graph>, name: &str) -> Result<CallVjp> {
    match RECORDER.get() {
        Some(r) => Ok((r.call_vjp)(graph, name)),
        None => Err(Error::FailedPrecondition(
            "a function call is noted on a tape but no tape was ever started (a bug in xlafn)"
                .into(),
        )),
    }
}

/// The gradient of a region op, by the rule the tape registered: what
/// `Cond`, `While` and `ShardMap` answer for `OpDef::vjp_needed`. Only a
/// tape asks for gradients, and starting one registered the recorder.
pub(crate) fn region_vjp(
    op: RegionOp<'_>,
    inputs: &[Tensor],
    outputs: &[Tensor],
    grads: &[Option<Tensor>],
    needed: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    match RECORDER.get() {
        Some(r) => (r.region_vjp)(op, inputs, outputs, grads, needed),
        None => Err(Error::FailedPrecondition(
            "a region op's gradient is asked but no tape was ever started (a bug in xlafn)".into(),
        )),
    }
}

/// The numerics check, when the mode is on.
#[inline]
pub(crate) fn numerics_check() -> Option<&'static NumericsCheck> {
    NUMERICS_CHECK.get().filter(|c| (c.active)())
}

/// Runs `op` on inputs of which one is sharded. Every sharded tensor is
/// made through `function::sharded_tensor`, which registered the
/// executor, so a missing one is xlafn's own bug, reported rather than
/// panicking.
pub(crate) fn run_sharded(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    match SHARDED_EXECUTION.get() {
        Some(run) => run(op, inputs),
        None => Err(Error::FailedPrecondition(
            "a sharded tensor exists but sharded execution was never registered (a bug in xlafn)"
                .into(),
        )),
    }
}
