//! Layer: trace. The tracing context: a per-thread stack of graphs being
//! built. While a frame is active, `Tensor` ops add nodes to the top frame's
//! graph and return symbolic tensors; otherwise they run eagerly.
//!
//! A frame turns whatever its ops use into graph values:
//! - symbolic tensors of its own graph are used as they are;
//! - eager tensors (closure captures) become extra parameters, listed as
//!   captures and passed on every call;
//! - symbolic tensors of an enclosing frame (a nested function's closure
//!   using the outer function's values) become captures too, fed by the
//!   outer value when the nested graph is inlined;
//! - symbolic tensors of a finished trace are leaks: an out-of-scope error
//!   naming the function that made them.
//!
//! Imports `ir`, `ops`, `runtime::Buffer`, `tensor` and `error`.

use crate::error::{Error, Result};
use crate::ir::{Graph, TensorType, ValueId};
use crate::ops::Op;
use crate::runtime::Buffer;
use crate::tensor::{Symbol, Tensor};
use crate::variable::{VarRef, Variable, VariableInner};
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Identifies one trace (one graph being built), process-wide.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct GraphId(pub u64);

/// Where a captured graph parameter gets its value at call time.
#[derive(Clone)]
pub(crate) enum CaptureSource {
    /// An eager tensor's device buffer, held by the concrete function.
    Eager(Arc<Buffer>),
    /// A value of an enclosing trace (only meaningful while inlining there).
    Outer(Tensor),
    /// An eager tensor split over a mesh, held by the concrete function:
    /// the calls then run over its mesh, with the value as it is laid out.
    Sharded(Tensor),
    /// A variable's value at the start of the call.
    Variable(VarRef),
}

/// A graph parameter fed by a capture.
#[derive(Clone)]
pub(crate) struct Capture {
    pub source: CaptureSource,
    pub param: ValueId,
}

/// A finished trace: the graph, its argument parameters and captures.
pub(crate) struct FinishedTrace {
    pub graph: Graph,
    pub captures: Vec<Capture>,
    /// Variables the trace assigned, and the graph result holding each new
    /// value (results after the function's own outputs).
    pub updates: Vec<(VarRef, usize)>,
    /// How many variables were created while tracing.
    pub created_variables: usize,
    /// How many of those an owner made for the trace and keeps
    /// ([`create_owned_variable`]): they need no second trace.
    pub owned_variables: usize,
    /// Variables created from values computed in this trace, each with
    /// the graph value of its initial value: the call lifts these out and
    /// runs them on its concrete arguments (`function::lifting`).
    pub initializers: Vec<(Arc<VariableInner>, ValueId)>,
}

/// A variable's value as this trace sees it.
struct VarSlot {
    var: Arc<VariableInner>,
    current: Tensor,
    written: bool,
}

struct Frame {
    id: GraphId,
    function: Arc<str>,
    graph: Graph,
    captures: Vec<Capture>,
    /// Dedupes captures: buffer address or (graph, value) of the source.
    captured: HashMap<(u64, u64), ValueId>,
    /// The first error raised by operator sugar, returned by the call.
    error: Option<Error>,
    /// Variables read or assigned, by id, in first-use order.
    variables: Vec<(u64, VarSlot)>,
    created_variables: usize,
    /// Of `created_variables`, those made by [`create_owned_variable`].
    owned_variables: usize,
    /// Variables created here from a symbolic initial value.
    initializers: Vec<(Arc<VariableInner>, Tensor)>,
    /// A branch or loop body rather than a function's own trace.
    region: bool,
}

thread_local! {
    static STACK: RefCell<Vec<Frame>> = const { RefCell::new(Vec::new()) };
}

static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// Is a trace active on this thread?
pub fn is_tracing() -> bool {
    STACK.with(|s| !s.borrow().is_empty())
}

/// The graph being traced on this thread (the innermost), if any.
pub(crate) fn current_graph() -> Option<GraphId> {
    STACK.with(|s| s.borrow().last().map(|f| f.id))
}

/// The name of the function being traced on this thread, if any.
pub fn current_function() -> Option<Arc<str>> {
    STACK.with(|s| s.borrow().last().map(|f| f.function.clone()))
}

/// Starts a trace of `function`; every `begin` must be paired with `finish`
/// or `abandon` (use [`TraceGuard`]).
pub(crate) fn begin(function: &str) -> GraphId {
    let id = GraphId(NEXT_GRAPH.fetch_add(1, Ordering::Relaxed));
    let frame = Frame {
        id,
        function: Arc::from(function),
        graph: Graph::new(),
        captures: Vec::new(),
        captured: HashMap::new(),
        error: None,
        variables: Vec::new(),
        created_variables: 0,
        owned_variables: 0,
        initializers: Vec::new(),
        region: false,
    };
    STACK.with(|s| s.borrow_mut().push(frame));
    id
}

/// Pops the top frame, which must be `id`.
fn pop(id: GraphId) -> Frame {
    STACK.with(|s| {
        let frame = s.borrow_mut().pop().expect("trace stack underflow");
        assert_eq!(frame.id, id, "trace frames closed out of order");
        frame
    })
}

/// Closes a trace on every exit path, including panics in user code.
pub(crate) struct TraceGuard {
    id: Option<GraphId>,
}

impl TraceGuard {
    pub(crate) fn new(function: &str) -> TraceGuard {
        TraceGuard {
            id: Some(begin(function)),
        }
    }

    /// Ends a function's trace with `results` (tensors of any origin) as
    /// outputs; assigned variables become extra results after them, which
    /// the call writes back.
    pub(crate) fn finish(self, results: &[Tensor]) -> Result<FinishedTrace> {
        let written: Vec<(Arc<VariableInner>, Tensor)> = top_variables()
            .into_iter()
            .filter(|(_, _, written)| *written)
            .map(|(var, value, _)| (var, value))
            .collect();
        let mut ids: Vec<ValueId> = results.iter().map(value_in_top).collect::<Result<_>>()?;
        let mut updates = Vec::with_capacity(written.len());
        for (var, value) in &written {
            updates.push((VarRef::of(var), ids.len()));
            ids.push(value_in_top(value)?);
        }
        let initializers = STACK.with(|s| {
            let stack = s.borrow();
            stack.last().expect("an open frame").initializers.clone()
        });
        let initializers = initializers
            .into_iter()
            .map(|(var, value)| Ok((var, value_in_top(&value)?)))
            .collect::<Result<_>>()?;
        let mut finished = self.close(ids, updates)?;
        finished.initializers = initializers;
        Ok(finished)
    }

    /// Ends a region's trace with `results` as its results; the variables
    /// it used are returned with the value each holds at the region's end,
    /// for the construct to thread through (see [`trace_region`]).
    fn finish_region(self, results: &[Tensor]) -> Result<RegionTrace> {
        let mut variables = Vec::new();
        for (var, value, written) in top_variables() {
            variables.push(RegionVariable {
                var,
                value: value_in_top(&value)?,
                written,
            });
        }
        let ids: Vec<ValueId> = results.iter().map(value_in_top).collect::<Result<_>>()?;
        Ok(RegionTrace {
            trace: self.close(ids, Vec::new())?,
            variables,
        })
    }

    fn close(mut self, ids: Vec<ValueId>, updates: Vec<(VarRef, usize)>) -> Result<FinishedTrace> {
        let id = self.id.take().expect("finished once");
        let mut frame = pop(id);
        if let Some(e) = frame.error.take() {
            return Err(e);
        }
        frame.graph.set_results(ids);
        Ok(FinishedTrace {
            graph: frame.graph,
            captures: frame.captures,
            updates,
            created_variables: frame.created_variables,
            owned_variables: frame.owned_variables,
            initializers: Vec::new(),
        })
    }
}

/// The top frame's variables in first-use order: each with the value it
/// holds now in this trace and whether the trace assigned it.
fn top_variables() -> Vec<(Arc<VariableInner>, Tensor, bool)> {
    STACK.with(|s| {
        let stack = s.borrow();
        let frame = stack.last().expect("an open frame");
        frame
            .variables
            .iter()
            .map(|(_, v)| (v.var.clone(), v.current.clone(), v.written))
            .collect()
    })
}

impl Drop for TraceGuard {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            pop(id);
        }
    }
}

/// How deeply control-flow regions (branches, loop bodies) may nest on one
/// thread. Each level of a nested `cond` took about 13 KiB of stack in a
/// debug build (tracing the closure, the region, then lowering it), and
/// 200 levels overflowed a 2 MiB thread, which aborts the process; 64
/// levels stay under 1 MiB, leaving room for nested function traces
/// (`function::MAX_TRACE_DEPTH`). Real programs nest a handful.
pub const MAX_REGION_DEPTH: usize = 64;

thread_local! {
    static REGION_DEPTH: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// One level of region nesting, given back on drop (also on panics).
struct RegionDepth;

impl RegionDepth {
    fn enter(function: &str) -> Result<RegionDepth> {
        let depth = REGION_DEPTH.with(|d| d.get());
        if depth >= MAX_REGION_DEPTH {
            return Err(Error::Recursion(format!(
                "function '{function}' nests control flow (cond, while_loop, for_range) more than \
                 {MAX_REGION_DEPTH} levels deep (MAX_REGION_DEPTH, so that tracing fits a 2 MiB \
                 thread stack); flatten the nesting or loop with while_loop"
            )));
        }
        REGION_DEPTH.with(|d| d.set(depth + 1));
        Ok(RegionDepth)
    }
}

impl Drop for RegionDepth {
    fn drop(&mut self) {
        REGION_DEPTH.with(|d| d.set(d.get() - 1));
    }
}

/// A traced region (a branch or loop body) and the variables it used.
pub(crate) struct RegionTrace {
    /// The region's graph; its results are the body's, without variables.
    pub trace: FinishedTrace,
    /// Every variable the region read or assigned, in first-use order.
    pub variables: Vec<RegionVariable>,
}

/// A variable as a region left it.
pub(crate) struct RegionVariable {
    pub var: Arc<VariableInner>,
    /// Its value at the region's end, in the region's graph.
    pub value: ValueId,
    /// Whether the region assigned it.
    pub written: bool,
}

impl RegionTrace {
    /// The variables the region assigned that are not among `known`.
    pub(crate) fn newly_written(&self, known: &[Arc<VariableInner>]) -> Vec<Arc<VariableInner>> {
        self.variables
            .iter()
            .filter(|v| v.written && !known.iter().any(|k| k.id == v.var.id))
            .map(|v| v.var.clone())
            .collect()
    }

    /// The region's value of `var` at its end. A variable the region
    /// never touched becomes a new captured parameter holding the value
    /// the enclosing frame sees, so every branch of a `cond` can return
    /// every variable any branch assigns.
    pub(crate) fn value_of(&mut self, var: &Arc<VariableInner>) -> ValueId {
        if let Some(v) = self.variables.iter().find(|v| v.var.id == var.id) {
            return v.value;
        }
        let param = self.trace.graph.add_param(var.tensor_type());
        self.trace.captures.push(Capture {
            source: CaptureSource::Variable(VarRef::of(var)),
            param,
        });
        self.variables.push(RegionVariable {
            var: var.clone(),
            value: param,
            written: false,
        });
        param
    }

    /// Appends the final values of `vars` to the region's results (the
    /// extra branch outputs or loop state that carry them out).
    pub(crate) fn return_variables(&mut self, vars: &[Arc<VariableInner>]) {
        let mut results = self.trace.graph.results().to_vec();
        for var in vars {
            results.push(self.value_of(var));
        }
        self.trace.graph.set_results(results);
    }
}

/// Traces a region (a branch or loop body) in a frame of its own: `body`
/// gets placeholders of the first `arg_types` and returns the region's
/// results. The last `carried.len()` of `arg_types` are the types of
/// `carried`, variables whose values enter the region as arguments (loop
/// state): inside it, reading one gives its argument and assigning one
/// replaces it. The region's captures are returned with its graph; the
/// caller feeds them from the enclosing frame (see [`capture_inputs`]),
/// and threads the variables it assigned (see [`RegionTrace`]).
pub(crate) fn trace_region(
    arg_types: &[TensorType],
    carried: &[Arc<VariableInner>],
    body: impl FnOnce(Vec<Tensor>) -> Result<Vec<Tensor>>,
) -> Result<RegionTrace> {
    let name = current_function().unwrap_or_else(|| Arc::from("region"));
    let _depth = RegionDepth::enter(&name)?;
    let guard = TraceGuard::new(&name);
    with_top(|frame| {
        frame.region = true;
        Ok(())
    })?;
    let mut args = arg_types
        .iter()
        .map(|t| placeholder(t.clone()))
        .collect::<Result<Vec<_>>>()?;
    let carried_args = args.split_off(arg_types.len() - carried.len());
    with_top(|frame| {
        for (var, current) in carried.iter().zip(carried_args) {
            let slot = VarSlot {
                var: var.clone(),
                current,
                written: false,
            };
            frame.variables.push((var.id, slot));
        }
        Ok(())
    })?;
    let outs = body(args)?;
    guard.finish_region(&outs)
}

/// Runs `f` on placeholders of `arg_types` in a region that is then thrown
/// away (its ops, prints and captures are discarded; Rust side effects in
/// `f` do happen) and returns what `f` returned: how a construct learns
/// the shapes its body gives state that has none yet.
pub(crate) fn trial<T>(
    arg_types: &[TensorType],
    f: impl FnOnce(Vec<Tensor>) -> Result<T>,
) -> Result<T> {
    let mut out = None;
    trace_region(arg_types, &[], |args| {
        out = Some(f(args)?);
        Ok(Vec::new())
    })?;
    Ok(out.expect("the trial ran"))
}

/// The tensors, in the enclosing frame, that feed a region's captures.
pub(crate) fn capture_inputs(captures: &[Capture]) -> Result<Vec<Tensor>> {
    captures
        .iter()
        .map(|c| match &c.source {
            CaptureSource::Eager(b) => Ok(Tensor::from_shared_buffer(b.clone())),
            CaptureSource::Outer(t) | CaptureSource::Sharded(t) => Ok(t.clone()),
            CaptureSource::Variable(r) => {
                let name = current_function().unwrap_or_else(|| Arc::from("?"));
                Variable::from_inner(r.resolve_in_trace(&name)?).try_read()
            }
        })
        .collect()
}

/// Records that a variable was created (a trace that creates
/// variables is traced again, and the second trace must create none).
pub(crate) fn note_variable_created() {
    STACK.with(|s| {
        if let Some(frame) = s.borrow_mut().last_mut() {
            frame.created_variables += 1;
        }
    });
}

/// Creates a variable for an owner that keeps it across calls (an
/// optimizer's slot or step count, made on the first update) while a
/// function may be traced: `make` runs outside every trace (`init_scope`),
/// so the variable holds a concrete value from the start and the trace
/// reads it as a captured variable, as TensorFlow's optimizers create
/// slots under `init_scope`. It counts as created (a later call of the
/// function that makes one is refused), but unlike a variable made by the
/// function body it does not make the function trace a second time: that
/// trace checks the body makes its variables once, and the owner hands out
/// the same variable whenever asked again, so a compiled training step is
/// traced once.
pub(crate) fn create_owned_variable(make: impl FnOnce() -> Result<Variable>) -> Result<Variable> {
    let var = init_scope(make)?;
    STACK.with(|s| {
        if let Some(frame) = s.borrow_mut().last_mut() {
            frame.created_variables += 1;
            frame.owned_variables += 1;
        }
    });
    Ok(var)
}

/// Makes `initial`, a value of the trace, the initial value of `var`, a
/// variable created in this trace: the trace reads `initial` for it, and
/// the function call lifts the computation out of the graph and runs it
/// once on the call's arguments to give the variable its value (TensorFlow
/// lifts initializers the same way). Only a function's own trace can do
/// this: a value computed inside a branch or loop body exists only there.
pub(crate) fn lift_initializer(var: &Arc<VariableInner>, initial: &Tensor) -> Result<()> {
    if let Some(sym) = initial.symbol()
        && !is_open(sym.graph)
    {
        return Err(out_of_scope(sym));
    }
    let in_region = STACK.with(|s| s.borrow().last().is_some_and(|f| f.region));
    if in_region {
        return Err(Error::Value(format!(
            "variable '{}' is created inside a cond or loop body from a value computed there; \
             create it in the function body itself (on the first call, as TensorFlow requires), \
             or from an eager tensor",
            var.name
        )));
    }
    let value_id = value_in_top(initial)?;
    with_top(|frame| {
        let current = symbolic(frame, value_id, frame.graph.value_type(value_id).clone());
        frame.initializers.push((var.clone(), current.clone()));
        let slot = VarSlot {
            var: var.clone(),
            current,
            written: false,
        };
        frame.variables.push((var.id, slot));
        Ok(())
    })
}

/// A variable's value in the top frame: the value last assigned in this
/// trace, or a captured input holding its value at call time.
pub(crate) fn read_variable(var: &Arc<VariableInner>) -> Result<Tensor> {
    let existing = STACK.with(|s| {
        let stack = s.borrow();
        let frame = stack.last()?;
        frame
            .variables
            .iter()
            .find(|(id, _)| *id == var.id)
            .map(|(_, v)| v.current.clone())
    });
    if let Some(t) = existing {
        return Ok(t);
    }
    let param = with_top(|frame| {
        let param = frame.graph.add_param(var.tensor_type());
        frame.captures.push(Capture {
            source: CaptureSource::Variable(VarRef::of(var)),
            param,
        });
        Ok(symbolic(frame, param, var.tensor_type()))
    })?;
    with_top(|frame| {
        frame.variables.push((
            var.id,
            VarSlot {
                var: var.clone(),
                current: param.clone(),
                written: false,
            },
        ));
        Ok(param)
    })
}

/// Assigns `value` to a variable within the top frame's trace.
pub(crate) fn assign_variable(var: &Arc<VariableInner>, value: &Tensor) -> Result<()> {
    let value_id = value_in_top(value)?;
    with_top(|frame| {
        let current = symbolic(frame, value_id, frame.graph.value_type(value_id).clone());
        match frame.variables.iter_mut().find(|(id, _)| *id == var.id) {
            Some((_, slot)) => {
                slot.current = current;
                slot.written = true;
            }
            None => frame.variables.push((
                var.id,
                VarSlot {
                    var: var.clone(),
                    current,
                    written: true,
                },
            )),
        }
        Ok(())
    })
}
/// Adds a parameter for a traced argument and returns its symbolic tensor.
pub(crate) fn placeholder(ty: TensorType) -> Result<Tensor> {
    ty.dtype.check_compilable()?;
    with_top(|frame| {
        let v = frame.graph.add_param(ty.clone());
        Ok(symbolic(frame, v, ty))
    })
}

fn symbolic(frame: &Frame, value: ValueId, ty: TensorType) -> Tensor {
    Tensor::from_symbol(Symbol {
        graph: frame.id,
        value,
        ty,
        function: frame.function.clone(),
    })
}

fn with_top<R>(f: impl FnOnce(&mut Frame) -> Result<R>) -> Result<R> {
    STACK.with(|s| {
        let mut stack = s.borrow_mut();
        let frame = stack
            .last_mut()
            .ok_or_else(|| Error::Value("no trace is active".into()))?;
        f(frame)
    })
}

/// Runs `f` with every open trace on this thread set aside, so that its
/// ops run eagerly (TensorFlow's `init_scope`): how a lifted variable
/// initializer runs when a function is first called inside another trace.
/// Symbolic tensors of the set-aside traces are out of scope inside `f`.
pub(crate) fn init_scope<R>(f: impl FnOnce() -> R) -> R {
    struct Restore(Vec<Frame>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let frames = std::mem::take(&mut self.0);
            STACK.with(|s| {
                let mut stack = s.borrow_mut();
                debug_assert!(stack.is_empty(), "init_scope left a trace open");
                *stack = frames;
            });
        }
    }
    let _restore = Restore(STACK.with(|s| std::mem::take(&mut *s.borrow_mut())));
    f()
}

/// The value of a scalar known while tracing (TensorFlow's
/// `get_static_value`): an eager scalar, or a symbolic one made by a
/// splat constant (how host numbers enter a trace). `None` otherwise.
pub(crate) fn static_scalar(t: &Tensor) -> Option<crate::ir::Scalar> {
    if t.shape().rank() != Some(0) {
        return None;
    }
    let Some(sym) = t.symbol() else {
        let v = t.to_f64_vec().ok()?;
        return Some(crate::ir::Scalar::F64(*v.first()?).cast(t.dtype()));
    };
    STACK.with(|s| {
        let stack = s.borrow();
        let frame = stack.iter().find(|f| f.id == sym.graph)?;
        match frame.graph.producer(sym.value) {
            crate::ir::Producer::Node { node, .. } => match &frame.graph.nodes()[node].op {
                Op::Constant(c) => Some(c.value),
                _ => None,
            },
            crate::ir::Producer::Param(_) => None,
        }
    })
}

/// Is `graph` one of the traces open on this thread?
pub(crate) fn is_open(graph: GraphId) -> bool {
    STACK.with(|s| s.borrow().iter().any(|f| f.id == graph))
}

/// The error for a symbolic tensor used after its trace ended.
pub(crate) fn out_of_scope(sym: &Symbol) -> Error {
    Error::OutOfScope(format!(
        "the tensor {} of shape {} was created while tracing function '{}' and is out of scope \
         here: a symbolic tensor must not be stored outside the function body (return it \
         instead, or keep it in a Variable)",
        sym.value, sym.ty.shape, sym.function
    ))
}

/// The out-of-scope error for a symbolic tensor.
pub(crate) fn out_of_scope_tensor(t: &Tensor) -> Error {
    match t.symbol() {
        Some(sym) => out_of_scope(sym),
        None => Error::Value("an eager tensor is never out of scope".into()),
    }
}

/// The value of `t` in the top frame's graph, capturing it if needed.
fn value_in_top(t: &Tensor) -> Result<ValueId> {
    if let Some(sym) = t.symbol() {
        let top_id = STACK.with(|s| s.borrow().last().map(|f| f.id));
        if top_id == Some(sym.graph) {
            return Ok(sym.value);
        }
        if !is_open(sym.graph) {
            return Err(out_of_scope(sym));
        }
        let key = (sym.graph.0, sym.value.0 as u64);
        return capture(key, t.tensor_type(), CaptureSource::Outer(t.clone()));
    }
    let Some(buffer) = t.eager_buffer() else {
        let array = t.sharded().expect("a tensor is eager, sharded or symbolic");
        let key = (0, Arc::as_ptr(array) as *const u8 as u64);
        return capture(key, t.tensor_type(), CaptureSource::Sharded(t.clone()));
    };
    let key = (0, Arc::as_ptr(&buffer) as u64);
    capture(key, t.tensor_type(), CaptureSource::Eager(buffer))
}

fn capture(key: (u64, u64), ty: TensorType, source: CaptureSource) -> Result<ValueId> {
    with_top(|frame| {
        if let Some(v) = frame.captured.get(&key) {
            return Ok(*v);
        }
        let param = frame.graph.add_param(ty);
        frame.captured.insert(key, param);
        frame.captures.push(Capture { source, param });
        Ok(param)
    })
}

/// Adds `op` applied to `inputs` to the top frame's graph.
pub(crate) fn add_op(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let ids: Vec<ValueId> = inputs
        .iter()
        .map(|t| value_in_top(t))
        .collect::<Result<_>>()?;
    with_top(|frame| {
        let outs = frame.graph.add_node(op, &ids)?;
        Ok(outs
            .iter()
            .map(|v| symbolic(frame, *v, frame.graph.value_type(*v).clone()))
            .collect())
    })
}

/// Records an error raised by operator sugar while tracing; the first one is
/// returned by the function call. Returns false when no trace is active.
pub(crate) fn record_error(e: &Error) -> bool {
    STACK.with(|s| match s.borrow_mut().last_mut() {
        Some(frame) => {
            if frame.error.is_none() {
                frame.error = Some(e.clone());
            }
            true
        }
        None => false,
    })
}
