//! Layer: control. Control flow on tensor values: [`cond`], [`while_loop`],
//! [`for_range`] and [`scan`]. Imports `trace`, `ops::control`, `tensor` and the
//! structure traits of `function::output`.
//!
//! Eagerly (no trace active) these are ordinary Rust control flow on
//! concrete values. While tracing, each closure is traced once into a
//! region graph (a `while` body may be traced again with relaxed shapes, as
//! TensorFlow does for loop variables whose shape changes) and the whole
//! construct becomes one graph node, lowered to StableHLO `if`/`while`, so
//! the compiled program branches and loops on the device.
//!
//! Variables may be read and assigned inside branches and loop bodies, as
//! in TensorFlow (`for i in tf.range(x): v.assign_add(i)`). A variable a
//! branch assigns leaves every branch as an extra output (the untouched
//! branches return the value it had before the `cond`); a variable a loop
//! body assigns becomes extra loop state, so each iteration reads the
//! previous one's value. Either way the construct assigns the result in
//! the enclosing trace, and the function call writes it back as for any
//! update. A loop condition may read variables but not assign them.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::function::args::IntoArg;
use crate::function::output::{IntoOutput, Output, host_values_of};
use crate::ir::{TensorType, shape_supertype};
use crate::ops::control::{Cond, Region, While};
use crate::tensor::{Tensor, apply};
use crate::trace::{self, FinishedTrace, RegionTrace};
use crate::variable::{Variable, VariableInner};
use std::sync::Arc;

mod associative_scan;
mod hoist;
mod scan;
mod tensor_array;
pub use associative_scan::associative_scan;
pub use scan::{ScanOptions, scan, scan_with};
pub use tensor_array::TensorArray;

/// Times a `while` body is traced at most while its loop values' shapes
/// are relaxed.
const MAX_RELAXATIONS: usize = 3;

fn flat<T: Output>(value: &T) -> Vec<Tensor> {
    let mut v = Vec::new();
    value.flatten(&mut v);
    v
}

fn types(tensors: &[Tensor]) -> Vec<TensorType> {
    tensors.iter().map(Tensor::tensor_type).collect()
}

/// Reads an eager bool scalar (a branch or loop condition).
fn truth(op: &str, t: &Tensor) -> Result<bool> {
    check_predicate(op, t)?;
    t.item::<bool>()
}

fn check_predicate(op: &str, t: &Tensor) -> Result<()> {
    if t.dtype() != DType::Bool || t.shape().rank().is_some_and(|r| r != 0) {
        return Err(Error::invalid(
            op,
            format!(
                "the condition must be a bool scalar, got {}",
                t.tensor_type()
            ),
        ));
    }
    Ok(())
}

/// A region's captures become node inputs starting at `offset`.
fn region(trace: FinishedTrace, offset: usize) -> Result<(Region, Vec<Tensor>)> {
    let inputs = trace::capture_inputs(&trace.captures)?;
    let captures = (offset..offset + inputs.len()).collect();
    Ok((
        Region {
            graph: Arc::new(trace.graph),
            captures,
        },
        inputs,
    ))
}
/// `cond(pred, then_fn, else_fn)`: the value of `then_fn()` if `pred` is
/// true, else of `else_fn()`.
///
/// Traced, both branches are traced and must return the same structure
/// with the same dtypes; shapes that differ become unknown dimensions (and
/// must agree once the input shapes are concrete, since XLA compiles static
/// shapes). Eagerly, only the chosen branch runs.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|x: Tensor| cond(&x.reduce_sum(&[], false)?.gt_scalar(0.0)?, || &x * 2.0, || -&x));
/// assert_eq!(f.call((Tensor::vector(&[1f32, 2.])?,))?.to_vec::<f32>()?, vec![2., 4.]);
/// assert_eq!(f.call((Tensor::vector(&[-1f32, -2.])?,))?.to_vec::<f32>()?, vec![1., 2.]);
/// assert_eq!(f.tracing_count(), 1);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn cond<T, R1, R2>(
    pred: &Tensor,
    then_fn: impl FnOnce() -> R1,
    else_fn: impl FnOnce() -> R2,
) -> Result<T>
where
    T: Output,
    R1: IntoOutput<Out = T>,
    R2: IntoOutput<Out = T>,
{
    if !trace::is_tracing() {
        return if truth("cond", pred)? {
            then_fn().into_output()
        } else {
            else_fn().into_output()
        };
    }
    check_predicate("cond", pred)?;
    let mut then_out = None;
    let mut then_trace = trace::trace_region(&[], &[], |_| {
        let out = then_fn().into_output()?;
        let tensors = flat(&out);
        then_out = Some(out);
        Ok(tensors)
    })?;
    let mut else_out = None;
    let mut else_trace = trace::trace_region(&[], &[], |_| {
        let out = else_fn().into_output()?;
        let tensors = flat(&out);
        else_out = Some(out);
        Ok(tensors)
    })?;
    let then_out = then_out.expect("the true branch was traced");
    let else_out = else_out.expect("the false branch was traced");
    check_branches(&flat(&then_out), &flat(&else_out))?;
    check_same_host_values(
        "cond",
        &host_values_of(&then_out),
        &host_values_of(&else_out),
    )?;
    // A variable either branch assigns leaves both as an extra output.
    let mut assigned = then_trace.newly_written(&[]);
    assigned.extend(else_trace.newly_written(&assigned));
    then_trace.return_variables(&assigned);
    else_trace.return_variables(&assigned);
    let (then_region, then_inputs) = region(then_trace.trace, 1)?;
    let (else_region, else_inputs) = region(else_trace.trace, 1 + then_inputs.len())?;
    let mut inputs: Vec<&Tensor> = vec![pred];
    inputs.extend(then_inputs.iter().chain(&else_inputs));
    let outs = apply(
        Cond {
            then_branch: then_region,
            else_branch: else_region,
        },
        &inputs,
    )?;
    let mut outs = outs.into_iter();
    let result = T::rebuild(&then_out, &mut outs);
    assign_all(&assigned, outs)?;
    Ok(result)
}

/// Assigns the values a construct carried out of its regions to their
/// variables, in the enclosing trace.
fn assign_all(vars: &[Arc<VariableInner>], values: impl Iterator<Item = Tensor>) -> Result<()> {
    for (var, value) in vars.iter().zip(values) {
        trace::assign_variable(var, &value)?;
    }
    Ok(())
}

/// Tensor control flow carries only tensors: a host value that differs
/// between branches, or that a loop body changes, would be lost.
fn check_same_host_values(op: &str, before: &[String], after: &[String]) -> Result<()> {
    let Some(i) = (0..before.len().max(after.len())).find(|&i| before.get(i) != after.get(i))
    else {
        return Ok(());
    };
    let show = |v: Option<&String>| v.map_or("nothing".to_string(), |s| format!("`{s}`"));
    let (a, b) = (show(before.get(i)), show(after.get(i)));
    let what = if op == "cond" {
        format!("the true branch returns the host value {a} where the false branch returns {b}")
    } else {
        format!("the loop body changes a host value of the loop state from {a} to {b}")
    };
    Err(Error::invalid(
        op,
        format!(
            "{what}; on the device only tensors are carried, so the change would be lost: make \
             that value a tensor (e.g. Tensor::scalar(..)) or keep it the same"
        ),
    ))
}

fn check_branches(then_flat: &[Tensor], else_flat: &[Tensor]) -> Result<()> {
    let describe = |v: &[Tensor]| {
        types(v)
            .iter()
            .map(|t| t.to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let same = then_flat.len() == else_flat.len()
        && then_flat
            .iter()
            .zip(else_flat)
            .all(|(a, b)| a.dtype() == b.dtype());
    if !same {
        return Err(Error::invalid(
            "cond",
            format!(
                "both branches must return the same structure and dtypes; the true branch returned \
                 [{}] and the false branch [{}]",
                describe(then_flat),
                describe(else_flat)
            ),
        ));
    }
    Ok(())
}

/// `while_loop(cond_fn, body_fn, init)`: repeats `state = body_fn(state)`
/// while `cond_fn(&state)` is true, and returns the final state.
///
/// The state is any nested structure of tensors (tuples, `Vec`s, ...).
/// Traced, the loop runs on the device. A loop value must keep its dtype
/// and its shape: XLA compiles static shapes, so a body that changes a
/// known size (a value that grows) is an `InvalidArgumentError` naming the
/// loop value and both shapes, as TensorFlow's is for a loop variable
/// without `shape_invariants`. Only a dimension the body makes unknown is
/// relaxed, and must come out right when the program is compiled.
/// Eagerly, it is a Rust loop.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|n: Tensor| {
///     let i0 = Tensor::scalar(0i32);
///     let acc0 = Tensor::scalar(1f32);
///     while_loop(|(i, _): &(Tensor, Tensor)| i.lt(&n), |(i, acc)| (i + 1, acc * 2.0), (i0, acc0))
/// });
/// let (i, acc) = f.call((Tensor::scalar(10i32),))?;
/// assert_eq!((i.item::<i32>()?, acc.item::<f32>()?), (10, 1024.0));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn while_loop<S, RC, RB>(
    cond_fn: impl FnMut(&S) -> RC,
    body_fn: impl FnMut(S) -> RB,
    init: S,
) -> Result<S>
where
    S: Output,
    RC: IntoOutput<Out = Tensor>,
    RB: IntoOutput<Out = S>,
{
    counted_while_loop(cond_fn, body_fn, init, None, 0)
}

/// [`while_loop`] with the number of iterations when it is known at trace
/// time (a `for_range` over host-known bounds). The count is a hint for
/// the loop's gradient only: it sizes the buffer of forward states so the
/// backward pass needs no counting loop. The first `hidden_values` loop
/// values are xlafn's own (a `for_range`'s counter), which errors skip
/// when they number the user's.
pub(crate) fn counted_while_loop<S, RC, RB>(
    mut cond_fn: impl FnMut(&S) -> RC,
    mut body_fn: impl FnMut(S) -> RB,
    init: S,
    trip_count: Option<i64>,
    hidden_values: usize,
) -> Result<S>
where
    S: Output,
    RC: IntoOutput<Out = Tensor>,
    RB: IntoOutput<Out = S>,
{
    if !trace::is_tracing() {
        let mut state = init;
        while truth("while_loop", &cond_fn(&state).into_output()?)? {
            state = body_fn(state).into_output()?;
        }
        return Ok(state);
    }
    let init = define_by_trial(init, &mut body_fn)?;
    let init_flat = flat(&init);
    // Variables the body assigns become loop state after the user's: the
    // body is traced again with each newly found one carried in.
    let mut carried: Vec<Arc<VariableInner>> = Vec::new();
    let (body_trace, loop_types, loop_init) = loop {
        let mut loop_init = init_flat.clone();
        for var in &carried {
            loop_init.push(Variable::from_inner(var.clone()).try_read()?);
        }
        let (body, types) = trace_body(&init, &loop_init, &carried, &mut body_fn)?;
        let found = body.newly_written(&carried);
        if found.is_empty() {
            break (body, types, loop_init);
        }
        carried.extend(found);
    };
    let cond_trace = trace::trace_region(&loop_types, &carried, |args| {
        let state = S::rebuild(&init, &mut args.into_iter());
        let c = cond_fn(&state).into_output()?;
        check_predicate("while_loop", &c)?;
        Ok(vec![c])
    })?;
    if let Some(v) = cond_trace.variables.iter().find(|v| v.written) {
        return Err(Error::invalid(
            "while_loop",
            format!(
                "the loop condition assigns variable '{}'; assign it in the loop body instead",
                v.var.name
            ),
        ));
    }
    let n = loop_init.len();
    let (cond_region, cond_inputs) = region(cond_trace.trace, n)?;
    let (mut body_region, mut body_inputs) = region(body_trace.trace, n + cond_inputs.len())?;
    if let Some(hoisted) =
        hoist::hoist_row_products(&body_region.graph, n, &body_inputs, trip_count)?
    {
        let first = n + cond_inputs.len() + body_inputs.len();
        body_region
            .captures
            .extend(first..first + hoisted.products.len());
        body_region.graph = Arc::new(hoisted.graph);
        body_inputs.extend(hoisted.products);
    }
    let inputs: Vec<&Tensor> = loop_init
        .iter()
        .chain(&cond_inputs)
        .chain(&body_inputs)
        .collect();
    let mut op = While {
        cond: cond_region,
        body: body_region,
        record: None,
        record_activations: false,
        loop_types,
        trip_count,
        hidden_values,
    };
    (op.record, op.record_activations) = recording_slots(&inputs, &op);
    let mut outs = apply(op, &inputs)?.into_iter();
    let state = S::rebuild(&init, &mut outs);
    assign_all(&carried, outs)?;
    Ok(state)
}

/// Loop state with a part that gets its shape from the body (a
/// `TensorArray` first written inside the loop) is given that shape before
/// the loop, from a trial trace of the body that is then thrown away.
fn define_by_trial<S: Output, RB: IntoOutput<Out = S>>(
    init: S,
    body_fn: &mut impl FnMut(S) -> RB,
) -> Result<S> {
    if init.is_defined() {
        return Ok(init);
    }
    let learned = trace::trial(&types(&flat(&init)), |args| {
        body_fn(S::rebuild(&init, &mut args.into_iter())).into_output()
    })?;
    init.define_like(&learned)
}

/// Traces the body, relaxing loop shapes until the body preserves them.
/// `loop_init` is the user's state flattened, then the `carried`
/// variables' values; the body's results follow the same layout.
fn trace_body<S: Output, RB: IntoOutput<Out = S>>(
    init: &S,
    loop_init: &[Tensor],
    carried: &[Arc<VariableInner>],
    body_fn: &mut impl FnMut(S) -> RB,
) -> Result<(RegionTrace, Vec<TensorType>)> {
    let mut loop_types = types(loop_init);
    let init_host = host_values_of(init);
    for _ in 0..MAX_RELAXATIONS {
        let mut trace = trace::trace_region(&loop_types, carried, |args| {
            let state = S::rebuild(init, &mut args.into_iter());
            let next = body_fn(state).into_output()?;
            check_same_host_values("while_loop", &init_host, &host_values_of(&next))?;
            Ok(flat(&next))
        })?;
        trace.return_variables(carried);
        let graph = &trace.trace.graph;
        let next_types: Vec<TensorType> = graph
            .results()
            .iter()
            .map(|&v| graph.value_type(v).clone())
            .collect();
        let relaxed = relax(&loop_types, &next_types)?;
        if relaxed == loop_types {
            return Ok((trace, loop_types));
        }
        loop_types = relaxed;
    }
    Err(Error::invalid(
        "while_loop",
        "the loop values' shapes did not settle after relaxing them",
    ))
}

fn relax(current: &[TensorType], next: &[TensorType]) -> Result<Vec<TensorType>> {
    if current.len() != next.len() {
        return Err(Error::invalid(
            "while_loop",
            format!(
                "the body returned {} tensors for a state of {}",
                next.len(),
                current.len()
            ),
        ));
    }
    current
        .iter()
        .zip(next)
        .enumerate()
        .map(|(i, (a, b))| {
            if a.dtype != b.dtype {
                return Err(Error::invalid(
                    "while_loop",
                    format!("the body changes loop value {i} from {a} to {b}; a loop value's dtype must stay the same"),
                ));
            }
            Ok(TensorType::new(a.dtype, shape_supertype(&a.shape, &b.shape)))
        })
        .collect()
}

/// `for i in range(start, limit, delta)` over tensors: calls
/// `body(i, state)` for each `i` and returns the final state. The bounds may
/// be tensors (then the trip count is decided on the device, and the loop
/// is one `while` op however long it runs) or host numbers; they are cast
/// to `limit`'s dtype.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|n: Tensor, x: Tensor| for_range(0, &n, 1, x, |_i, x| x * 0.99 + 0.01));
/// let y = f.call((Tensor::scalar(3i32), Tensor::vector(&[1f32])?))?;
/// assert!((y.to_vec::<f32>()?[0] - 1.0).abs() < 1e-6);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn for_range<S, RB>(
    start: impl IntoArg<Tensor>,
    limit: impl IntoArg<Tensor>,
    delta: impl IntoArg<Tensor>,
    init: S,
    mut body: impl FnMut(Tensor, S) -> RB,
) -> Result<S>
where
    S: Output,
    RB: IntoOutput<Out = S>,
{
    let limit = limit.into_arg()?;
    let dtype = limit.dtype();
    let (start, delta) = (start.into_arg()?, delta.into_arg()?);
    let trips = static_trip_count(&start, &limit, &delta);
    // Checked before the cast: a cast of a constant is no longer one.
    let moving = check_step(&delta)?;
    let start = start.cast(dtype)?;
    let delta = delta.cast(dtype)?;
    let ascending = delta.gt_scalar(0)?;
    let (_, state) = counted_while_loop(
        |(i, _): &(Tensor, S)| -> Result<Tensor> {
            let below = i.lt(&limit)?;
            let above = i.gt(&limit)?;
            let more = ascending.where_(&below, &above)?;
            match &moving {
                Some(moving) => more.logical_and(moving),
                None => Ok(more),
            }
        },
        |(i, state): (Tensor, S)| -> Result<(Tensor, S)> {
            let next = body(i.clone(), state).into_output()?;
            Ok((i.add(&delta)?, next))
        },
        (start, init),
        trips,
        1,
    )?;
    Ok(state)
}

/// Under a recording gradient tape, a loop with float inputs records its
/// states for the gradient (see `While::record`): the slots, and whether
/// the body's activations are recorded too. They are when the record
/// with them keeps as many slots as the record without: then the
/// backward loop reads them instead of recomputing them, and no state
/// is checkpointed that would otherwise have been stored.
fn recording_slots(inputs: &[&Tensor], op: &While) -> (Option<i64>, bool) {
    if !crate::tensor::hooks::recording() || !inputs.iter().any(|t| t.dtype().is_inexact()) {
        return (None, false);
    }
    let slots = |activations: bool| {
        let recorded: Vec<TensorType> = op
            .loop_types
            .iter()
            .zip(op.recorded_values())
            .filter(|(_, r)| *r)
            .map(|(t, _)| t.clone())
            .chain(
                op.residuals_with(activations)
                    .into_iter()
                    .map(|v| op.body.graph.value_type(v).clone()),
            )
            .collect();
        crate::ops::while_record::record_slots(&recorded, op.trip_count)
    };
    let (without, with) = (slots(false), slots(true));
    match (without, with) {
        (Some(a), Some(b)) if a == b => (Some(a), true),
        _ => (without, false),
    }
}

/// The number of iterations of an integer `for_range` whose bounds and
/// step are all known at trace time; `None` otherwise (float ranges
/// included: their count depends on rounding).
fn static_trip_count(start: &Tensor, limit: &Tensor, delta: &Tensor) -> Option<i64> {
    if [start, limit, delta].iter().any(|t| !t.dtype().is_int()) {
        return None;
    }
    // Eager values reach `static_scalar` through f64: only trust integers
    // it holds exactly.
    let value = |t: &Tensor| match trace::static_scalar(t)? {
        crate::ir::Scalar::I64(v) if v.unsigned_abs() < 1 << 53 => Some(i128::from(v)),
        crate::ir::Scalar::U64(v) if v < 1 << 53 => Some(i128::from(v)),
        _ => None,
    };
    let (lo, hi) = limit.dtype().int_range()?;
    let (start, limit, delta) = (value(start)?, value(limit)?, value(delta)?);
    // The loop runs in the limit's dtype: values it cannot hold would wrap.
    if [start, limit, delta].iter().any(|v| *v < lo || *v > hi) {
        return None;
    }
    let span = if delta > 0 {
        limit - start
    } else {
        start - limit
    };
    let step = delta.abs();
    if step == 0 {
        return None;
    }
    if span <= 0 {
        return Some(0);
    }
    let trips = (span + step - 1) / step;
    // The counter's last value, `start + trips * delta`, must not wrap
    // either, or the loop would run on past the limit.
    let last = start + trips * delta;
    if last < lo || last > hi {
        return None;
    }
    i64::try_from(trips).ok()
}

/// A zero step never reaches `limit` (or never leaves `start`): an error,
/// as `tf.range` gives. A step known now (a host number, an eager tensor
/// or a constant in the trace) is checked at once. A step only known when
/// the program runs is checked then by a host callback where the plugin has them; in any case
/// the returned condition (`step != 0`) joins the loop's, so a zero step
/// runs the body zero times rather than forever.
fn check_step(delta: &Tensor) -> Result<Option<Tensor>> {
    let zero_step = || {
        Error::invalid(
            "for_range",
            "delta (the step) must not be zero: the loop would never reach its limit",
        )
    };
    if !delta.is_symbolic() {
        if delta.to_f64_vec()?.contains(&0.0) {
            return Err(zero_step());
        }
        return Ok(None);
    }
    // A constant step inside a trace (`for_range(0, n, 1, ..)`) is known
    // now too: no run-time check, so no host callback in the program.
    if let Some(step) = trace::static_scalar(delta) {
        if step.as_f64() == 0.0 {
            return Err(zero_step());
        }
        return Ok(None);
    }
    if crate::runtime::Client::default_client()?.supports_host_callbacks() {
        crate::ops::callback::assert_nonzero(delta, &zero_step().to_string())?;
    }
    Ok(Some(delta.ne_scalar(0)?))
}
