//! Run-time support for the `#[xlafn::function]` AutoGraph rewrite.
//!
//! The macro cannot know at expansion time whether an `if` condition, a
//! `while` condition or a `for` iterable is a host value or a tensor, so it
//! rewrites each into a call here and the trait implementations pick the
//! meaning by type: a `bool` condition or a host iterable runs as the
//! original Rust code (at trace time, as AutoGraph does for Python values);
//! a `Tensor` condition becomes `cond`/`while_loop`, and a `Tensor` or
//! `TensorRange` iterable becomes `for_range`.
//!
//! Each construct is passed as ONE closure that holds all of its branches
//! (selected by a `bool` argument), so that the host path keeps ordinary
//! borrowing rules (two closures could not both mutate one variable). The
//! variables the construct assigns travel in and out of the closure as a
//! tuple: the loop or branch state.

use crate::control::{cond, for_range, while_loop};
use crate::error::{Error, Result};
use crate::function::args::IntoArg;
use crate::function::output::Output;
use crate::ir::{Shape, TensorType};
use crate::tensor::Tensor;
use crate::trace;
use std::cell::RefCell;

/// A condition of a rewritten `if`: `bool` or `Tensor`.
pub trait IfCondition<S, V, F> {
    fn run_if(self, state: S, branches: F) -> Result<(S, V)>;
}

impl<S, V, F: FnOnce(bool, S) -> Result<(S, V)>> IfCondition<S, V, F> for bool {
    fn run_if(self, state: S, branches: F) -> Result<(S, V)> {
        branches(self, state)
    }
}

impl<S, V, F> IfCondition<S, V, F> for Tensor
where
    S: Output + Clone,
    V: Output,
    F: FnMut(bool, S) -> Result<(S, V)>,
{
    fn run_if(self, state: S, branches: F) -> Result<(S, V)> {
        (&self).run_if(state, branches)
    }
}

impl<S, V, F> IfCondition<S, V, F> for &Tensor
where
    S: Output + Clone,
    V: Output,
    F: FnMut(bool, S) -> Result<(S, V)>,
{
    fn run_if(self, state: S, mut branches: F) -> Result<(S, V)> {
        let state = state.promote()?;
        let state = define_by_trial(state, &[], |s, _| Ok(branches(true, s)?.0))?;
        let state = define_by_trial(state, &[], |s, _| Ok(branches(false, s)?.0))?;
        let branches = RefCell::new(branches);
        let else_state = state.clone();
        cond(
            self,
            || (branches.borrow_mut())(true, state),
            || (branches.borrow_mut())(false, else_state),
        )
    }
}

/// `if c { .. } else { .. }` as rewritten by the macro.
pub fn if_stmt<C, S, V, F>(condition: C, state: S, branches: F) -> Result<(S, V)>
where
    C: IfCondition<S, V, F>,
{
    condition.run_if(state, branches)
}

/// The condition type of a rewritten `while`: `bool` or `Tensor`.
pub trait WhileCondition<S, F>: Sized {
    fn run_while(state: S, step: F) -> Result<S>;
}

impl<S, F: FnMut(bool, S) -> Result<(S, Option<bool>)>> WhileCondition<S, F> for bool {
    fn run_while(mut state: S, mut step: F) -> Result<S> {
        loop {
            let (s, go) = step(true, state)?;
            if go != Some(true) {
                return Ok(s);
            }
            state = step(false, s)?.0;
        }
    }
}

impl<S, F> WhileCondition<S, F> for Tensor
where
    S: Output + Clone,
    F: FnMut(bool, S) -> Result<(S, Option<Tensor>)>,
{
    fn run_while(state: S, step: F) -> Result<S> {
        device_while(state, step, Ok)
    }
}

/// The loop on the device: `step(true, s)` yields the condition (turned
/// into a tensor by `condition`), `step(false, s)` runs the body.
fn device_while<S, C, F>(
    state: S,
    mut step: F,
    condition: impl Fn(C) -> Result<Tensor>,
) -> Result<S>
where
    S: Output + Clone,
    F: FnMut(bool, S) -> Result<(S, Option<C>)>,
{
    let state = state.promote()?;
    let state = define_by_trial(state, &[], |s, _| Ok(step(false, s)?.0))?;
    let step = RefCell::new(step);
    while_loop(
        |s: &S| -> Result<Tensor> {
            let (_, c) = (step.borrow_mut())(true, s.clone())?;
            condition(c.expect("the condition phase yields the condition"))
        },
        |s: S| -> Result<S> { Ok((step.borrow_mut())(false, s)?.0) },
        state,
    )
}

/// `while c { .. }` as rewritten by the macro: `step(true, state)` yields
/// the condition, `step(false, state)` runs the body.
pub fn while_stmt<S, R, F>(state: S, step: F) -> Result<S>
where
    R: WhileCondition<S, F>,
    F: FnMut(bool, S) -> Result<(S, Option<R>)>,
{
    R::run_while(state, step)
}

/// A range of tensor values for `for i in xlafn::range(..)`: the loop runs
/// on the device (one `while` op) instead of unrolling at trace time.
#[derive(Clone)]
pub struct TensorRange {
    start: Tensor,
    limit: Tensor,
    delta: Tensor,
}

/// `range(limit)`: 0, 1, ..., limit - 1 as a tensor loop (`tf.range`).
pub fn range(limit: impl IntoArg<Tensor>) -> Result<TensorRange> {
    let limit = limit.into_arg()?;
    let start = limit.zeros_like()?;
    let delta = limit.ones_like()?;
    Ok(TensorRange {
        start,
        limit,
        delta,
    })
}

/// `range_with(start, limit, delta)` as a tensor loop.
pub fn range_with(
    start: impl IntoArg<Tensor>,
    limit: impl IntoArg<Tensor>,
    delta: impl IntoArg<Tensor>,
) -> Result<TensorRange> {
    Ok(TensorRange {
        start: start.into_arg()?,
        limit: limit.into_arg()?,
        delta: delta.into_arg()?,
    })
}

/// The iterable of a rewritten `for`: host iterables, `Tensor` (its rows)
/// or `TensorRange`.
pub trait ForIterable<S, F> {
    fn run_for(self, state: S, body: F) -> Result<S>;
}

impl<I, S, F> ForIterable<S, F> for I
where
    I: IntoIterator,
    F: FnMut(I::Item, S) -> Result<S>,
{
    fn run_for(self, mut state: S, mut body: F) -> Result<S> {
        for item in self {
            state = body(item, state)?;
        }
        Ok(state)
    }
}

impl<S, F> ForIterable<S, F> for TensorRange
where
    S: Output + Clone,
    F: FnMut(Tensor, S) -> Result<S>,
{
    fn run_for(self, state: S, mut body: F) -> Result<S> {
        let item = TensorType::new(self.limit.dtype(), Shape::scalar());
        let state = define_by_trial(state.promote()?, &[item], |s, mut items| {
            body(items.remove(0), s)
        })?;
        for_range(self.start, self.limit, self.delta, state, body)
    }
}

impl<S, F> ForIterable<S, F> for Tensor
where
    S: Output + Clone,
    F: FnMut(Tensor, S) -> Result<S>,
{
    /// Iterates over the first dimension, like `for row in tensor`.
    fn run_for(self, state: S, mut body: F) -> Result<S> {
        let dims = self.dims();
        let rows = *dims
            .first()
            .ok_or_else(|| Error::invalid("for", "cannot iterate over a scalar"))?;
        let mut sizes = dims.clone();
        sizes[0] = 1;
        let row_type = TensorType::new(self.dtype(), Shape::known(&dims[1..]));
        let state = define_by_trial(state.promote()?, &[row_type], |s, mut rows| {
            body(rows.remove(0), s)
        })?;
        let x = self.clone();
        for_range(0, rows, 1, state, move |i, s| {
            let mut starts = vec![i.clone()];
            for _ in 1..sizes.len() {
                starts.push(i.zeros_like()?);
            }
            let row = x.dynamic_slice(&starts, &sizes)?.squeeze(&[0])?;
            body(row, s)
        })
    }
}

/// `for pat in iterable { .. }` as rewritten by the macro.
pub fn for_stmt<It, S, F>(iterable: It, state: S, body: F) -> Result<S>
where
    It: ForIterable<S, F>,
{
    iterable.run_for(state, body)
}

/// A condition the rewrite had to leave as Rust (its body jumps out in a
/// way the rewrite does not handle: a `break` with a value, or a jump
/// inside an expression whose value is used, such as a `let` initializer):
/// it must be a host `bool`, and a tensor there is a compile-time error
/// that says so.
///
/// ```compile_fail,E0277
/// use xlafn::prelude::*;
/// #[xlafn::function]
/// fn f(x: Tensor) -> Result<Tensor> {
///     let mut x = x;
///     while x.reduce_sum(&[], false)?.gt_scalar(1.0)? {
///         x = x.tanh()?;
///         let _step = match 0 { 0 => 1, _ => break }; // a jump inside a `let`
///     }
///     Ok(x)
/// }
/// ```
#[diagnostic::on_unimplemented(
    message = "this jump (a `break` with a value, or a jump inside a `let` initializer or another expression whose value is used) inside an `if`/`while` whose condition is a `{Self}` is not supported by #[xlafn::function]",
    label = "this condition must be a host `bool` here",
    note = "write the jump as a statement of its own (`if c {{ break; }}`), or compute the condition on the host"
)]
pub trait HostCondition {
    fn into_bool(self) -> bool;
}

impl HostCondition for bool {
    fn into_bool(self) -> bool {
        self
    }
}

/// Checks (at compile time) that a condition left as Rust is a `bool`.
pub fn host_condition(c: impl HostCondition) -> bool {
    c.into_bool()
}

/// A `break`/`continue` flag of a rewritten loop. It starts as a host
/// `bool` and becomes a tensor when it enters tensor control flow (every
/// `Output` structure is promoted there), so a loop on a host condition
/// stays a Rust loop and a loop on a tensor condition stops on the device.
#[derive(Clone)]
pub enum Flag {
    Host(bool),
    Tensor(Tensor),
}

fn flag_tensor(value: bool) -> Result<Tensor> {
    crate::tensor::scalar_as(crate::ir::Scalar::Bool(value), crate::dtype::DType::Bool)
}

impl Flag {
    /// A cleared flag.
    pub fn new() -> Flag {
        Flag::Host(false)
    }

    /// The flag raised, of the same kind (so both branches of a tensor
    /// `if` keep the same structure).
    pub fn raised(&self) -> Result<Flag> {
        Ok(match self {
            Flag::Host(_) => Flag::Host(true),
            Flag::Tensor(_) => Flag::Tensor(flag_tensor(true)?),
        })
    }

    /// The flag cleared, of the same kind.
    pub fn cleared(&self) -> Result<Flag> {
        Ok(match self {
            Flag::Host(_) => Flag::Host(false),
            Flag::Tensor(_) => Flag::Tensor(flag_tensor(false)?),
        })
    }

    fn tensor(&self) -> Result<Tensor> {
        match self {
            Flag::Host(b) => flag_tensor(*b),
            Flag::Tensor(t) => Ok(t.clone()),
        }
    }
}

impl Default for Flag {
    fn default() -> Self {
        Flag::new()
    }
}

impl Output for Flag {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let Flag::Tensor(t) = self {
            out.push(t.clone());
        }
    }
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        match template {
            Flag::Host(b) => Flag::Host(*b),
            Flag::Tensor(_) => Flag::Tensor(tensors.next().expect("one tensor per tensor flag")),
        }
    }
    fn describe(&self) -> String {
        "Flag".into()
    }
    fn promote(self) -> Result<Self> {
        Ok(Flag::Tensor(self.tensor()?))
    }
    fn host_values(&self, out: &mut Vec<String>) {
        if let Flag::Host(b) = self {
            out.push(format!("Flag({b})"));
        }
    }
}

/// A loop condition or guard combined with flags: a host `bool` or a
/// tensor (see [`go_on`]).
pub trait IntoFlag {
    fn into_flag(self) -> Result<Flag>;
}

impl IntoFlag for bool {
    fn into_flag(self) -> Result<Flag> {
        Ok(Flag::Host(self))
    }
}

impl IntoFlag for Tensor {
    fn into_flag(self) -> Result<Flag> {
        Ok(Flag::Tensor(self))
    }
}

impl IntoFlag for &Tensor {
    fn into_flag(self) -> Result<Flag> {
        Ok(Flag::Tensor(self.clone()))
    }
}

/// `condition && !stop_1 && !stop_2 ...`: host while everything is host,
/// else a tensor.
pub fn go_on(condition: impl IntoFlag, stops: &[&Flag]) -> Result<Flag> {
    let mut acc = condition.into_flag()?;
    for stop in stops {
        acc = match (acc, stop) {
            (Flag::Host(a), Flag::Host(b)) => Flag::Host(a && !b),
            (a, b) => Flag::Tensor(a.tensor()?.logical_and(&b.tensor()?.logical_not()?)?),
        };
    }
    Ok(acc)
}

impl<S, V, F> IfCondition<S, V, F> for Flag
where
    S: Output + Clone,
    V: Output,
    F: FnMut(bool, S) -> Result<(S, V)>,
{
    fn run_if(self, state: S, mut branches: F) -> Result<(S, V)> {
        match self {
            Flag::Host(b) => branches(b, state),
            Flag::Tensor(t) => t.run_if(state, branches),
        }
    }
}

impl<S, F> WhileCondition<S, F> for Flag
where
    S: Output + Clone,
    F: FnMut(bool, S) -> Result<(S, Option<Flag>)>,
{
    /// A Rust loop while the condition is a host flag; from the first
    /// evaluation that gives a tensor (a tensor condition, or a `break` or
    /// `return` taken on a tensor condition), the remaining iterations run
    /// as one device loop.
    fn run_while(mut state: S, mut step: F) -> Result<S> {
        loop {
            let (s, condition) = step(true, state)?;
            match condition.expect("the condition phase yields the condition") {
                Flag::Host(false) => return Ok(s),
                Flag::Host(true) => state = step(false, s)?.0,
                Flag::Tensor(_) => return device_while(s, step, |c: Flag| c.tensor()),
            }
        }
    }
}

/// `condition && !stop_1 && ...` evaluated on the host: false only when a
/// stop flag is a raised host flag. A Rust loop that keeps running on a
/// host condition tests this, so a `break` or `return` taken on a host
/// condition leaves it at once; one taken on a tensor condition cannot be
/// known at trace time, and the loop's body is guarded instead.
pub fn host_clear(stops: &[&Flag]) -> bool {
    !stops.iter().any(|f| matches!(f, Flag::Host(true)))
}

/// The value a converted `return` leaves for the function to return
/// (AutoGraph's `retval_`): undefined until a `return` has run.
///
/// When an undefined slot enters tensor control flow, the construct is
/// first traced once on trial (discarded) to learn what type the slot will
/// hold, and the slot starts as zeros of that type, as AutoGraph does for
/// loop variables it cannot see defined. The trial needs the returned
/// value's shape to be fully known while tracing.
#[derive(Clone, Debug)]
pub enum ReturnValue<T> {
    Undefined,
    Value(T),
}

impl<T> ReturnValue<T> {
    pub fn undefined() -> Self {
        ReturnValue::Undefined
    }

    /// The returned value; an error if no `return` ran (the rewrite always
    /// ends a function with one, so this means a bug in the rewrite).
    pub fn into_result(self) -> Result<T> {
        match self {
            ReturnValue::Value(v) => Ok(v),
            ReturnValue::Undefined => Err(Error::invalid(
                "return",
                "the function ended without returning a value",
            )),
        }
    }
}

impl<T: Output + Clone> Output for ReturnValue<T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let ReturnValue::Value(v) = self {
            v.flatten(out);
        }
    }
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        match template {
            ReturnValue::Undefined => ReturnValue::Undefined,
            ReturnValue::Value(v) => ReturnValue::Value(T::rebuild(v, tensors)),
        }
    }
    fn describe(&self) -> String {
        match self {
            ReturnValue::Undefined => "Undefined".into(),
            ReturnValue::Value(v) => v.describe(),
        }
    }
    fn promote(self) -> Result<Self> {
        match self {
            ReturnValue::Value(v) => Ok(ReturnValue::Value(v.promote()?)),
            undefined => Ok(undefined),
        }
    }
    fn is_defined(&self) -> bool {
        matches!(self, ReturnValue::Value(v) if v.is_defined())
    }
    fn host_values(&self, out: &mut Vec<String>) {
        match self {
            ReturnValue::Undefined => out.push("Undefined".into()),
            ReturnValue::Value(v) => v.host_values(out),
        }
    }
    fn define_like(self, like: &Self) -> Result<Self> {
        match (self, like) {
            (ReturnValue::Undefined, ReturnValue::Value(l)) => {
                Ok(ReturnValue::Value(zeros_like(l)?))
            }
            (ReturnValue::Value(v), ReturnValue::Value(l)) => {
                Ok(ReturnValue::Value(v.define_like(l)?))
            }
            (this, _) => Ok(this),
        }
    }
}

/// A value of the same structure as `like` with every tensor zero.
fn zeros_like<T: Output>(like: &T) -> Result<T> {
    let mut parts = Vec::new();
    like.flatten(&mut parts);
    let zeros = parts
        .iter()
        .map(|t| {
            let dims = t.shape().as_known().ok_or_else(|| {
                Error::invalid(
                    "return",
                    format!(
                        "a `return` inside tensor control flow returns a {}, whose shape is not \
                         fully known while tracing; give the function an input signature with \
                         known dimensions, or return after the loop",
                        t.tensor_type()
                    ),
                )
            })?;
            Tensor::fill(&dims, 0i64, t.dtype())
        })
        .collect::<Result<Vec<_>>>()?;
    Ok(T::rebuild(like, &mut zeros.into_iter()))
}

/// Gives the undefined parts of `state` (return slots no `return` has
/// filled yet) the type `trial` produces for them, when tracing. `trial`
/// runs the construct once in a region that is then thrown away (its ops,
/// prints and captures are discarded; Rust side effects in it do happen),
/// with placeholders of `item_types` as extra arguments.
fn define_by_trial<S: Output + Clone>(
    state: S,
    item_types: &[TensorType],
    trial: impl FnOnce(S, Vec<Tensor>) -> Result<S>,
) -> Result<S> {
    if state.is_defined() || !trace::is_tracing() {
        return Ok(state);
    }
    let learned = trace::trial(item_types, |items| trial(state.clone(), items))?;
    state.define_like(&learned)
}
