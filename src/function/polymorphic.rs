//! `Function`: the polymorphic callable made by [`function`].
//!
//! A call runs TensorFlow's pipeline: bind the arguments (to the
//! `input_signature` if there is one) → look up the dispatch table by
//! subtyping → on a miss, pick the type to trace (the signature, the call's
//! own type, or under `reduce_retracing` a generalized one) → trace once,
//! even when several threads miss together → call the concrete function.

use super::args::with_actual_variables;
use super::closure::{ArgList, IntoArgs, IntoTraceTypes, TraceableFn};
use super::concrete::{ConcreteCore, ConcreteFunction};
use super::dispatch::{DispatchTable, FunctionType};
use super::lifting;
use super::output::{IntoOutput, Output};
use super::sharded::ShardingOptions;
use super::signature::Signature;
use super::trace_type::{TensorSpec, TraceType};
use crate::error::{Error, Result};
use crate::mesh::NamedSharding;
use crate::single_flight::SingleFlight;
use crate::tensor::Tensor;
use crate::trace::{FinishedTrace, TraceGuard};
use crate::variable::Variable;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

static RUN_EAGERLY: AtomicBool = AtomicBool::new(false);
static NEXT_FUNCTION: AtomicU64 = AtomicU64::new(1);

/// Traces after which a function that keeps retracing gets a warning.
const RETRACE_WARNING_THRESHOLD: usize = 5;

/// Makes every `Function` run its closure eagerly instead of tracing (for
/// debugging, like `tf.config.run_functions_eagerly`). Process-wide.
pub fn run_functions_eagerly(enabled: bool) {
    RUN_EAGERLY.store(enabled, Ordering::SeqCst);
}

/// Is `run_functions_eagerly(true)` in effect?
pub fn functions_run_eagerly() -> bool {
    RUN_EAGERLY.load(Ordering::SeqCst)
}

/// Options of a [`Function`], TensorFlow's `tf.function` arguments.
///
/// ```
/// use xlafn::prelude::*;
/// // One trace for vectors of any length; other calls are refused.
/// let f = FunctionOptions::new()
///     .name("double")
///     .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
///     .build(|x: Tensor| x.mul_scalar(2.0));
/// assert_eq!(f.call((Tensor::vector(&[1f32])?,))?.to_vec::<f32>()?, vec![2.]);
/// assert_eq!(f.call((Tensor::vector(&[1f32, 2.])?,))?.to_vec::<f32>()?, vec![2., 4.]);
/// assert_eq!(f.tracing_count(), 1);
/// let err = f.call((Tensor::vector(&[1i32])?,)).unwrap_err();
/// assert!(matches!(err, Error::Type(_)));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct FunctionOptions {
    name: Option<String>,
    input_signature: Option<Vec<TensorSpec>>,
    reduce_retracing: bool,
    arg_names: Option<Vec<String>>,
    implements: Option<String>,
    /// `Some(false)`: run traced graphs op by op (`jit_compile`).
    jit_compile: Option<bool>,
    /// `in_shardings` / `out_shardings`.
    shardings: Option<ShardingOptions>,
}

impl FunctionOptions {
    /// The defaults: named `f`, no input signature, no retracing
    /// reduction, compiled with XLA.
    pub fn new() -> FunctionOptions {
        FunctionOptions::default()
    }

    /// The name used in signatures and error messages.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// Fixes the function type: one trace, and calls that do not fit fail.
    pub fn input_signature(mut self, specs: Vec<TensorSpec>) -> Self {
        self.input_signature = Some(specs);
        self
    }

    /// The sharding of each flat argument (`jax.jit(in_shardings=...)`):
    /// arguments are laid out so before the call, and the function runs
    /// partitioned by XLA over their mesh. `None` entries (and arguments
    /// past the list) keep the sharding they come with; unsharded ones
    /// are replicated. See [`crate::sharding`].
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    /// let mesh = Mesh::new(&[("data", 4)])?;
    /// let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")]))?;
    /// let total = FunctionOptions::new()
    ///     .in_shardings(vec![Some(rows)])
    ///     .build(|x: Tensor| x.reduce_sum(&[], false));
    /// let x = Tensor::from_vec((1..=8).map(|i| i as f32).collect(), &[8, 1])?;
    /// assert_eq!(total.call((&x,))?.to_vec::<f32>()?, vec![36.]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn in_shardings(mut self, shardings: Vec<Option<NamedSharding>>) -> Self {
        self.shardings.get_or_insert_with(Default::default).inputs = shardings;
        self
    }

    /// The sharding of each output (`jax.jit(out_shardings=...)`);
    /// `None` entries (and outputs past the list) are laid out as XLA
    /// chooses.
    pub fn out_shardings(mut self, shardings: Vec<Option<NamedSharding>>) -> Self {
        self.shardings.get_or_insert_with(Default::default).outputs = shardings;
        self
    }

    /// After a second call type, trace a generalized type.
    pub fn reduce_retracing(mut self, enabled: bool) -> Self {
        self.reduce_retracing = enabled;
        self
    }

    /// The old name of [`reduce_retracing`](Self::reduce_retracing), as in
    /// TensorFlow.
    #[deprecated(note = "use reduce_retracing")]
    pub fn experimental_relax_shapes(self, enabled: bool) -> Self {
        self.reduce_retracing(enabled)
    }

    /// Records that this function implements a known operation `name`
    /// (TensorFlow's `experimental_implements`), so that a later tool can
    /// substitute a specialized kernel: kept on the function, its concrete
    /// functions and their exports. xlafn itself does not substitute.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let softplus = FunctionOptions::new()
    ///     .implements("my_ops.softplus")
    ///     .build(|x: Tensor| -> Result<Tensor> { x.exp()?.add_scalar(1.0)?.log() });
    /// let cf = softplus.get_concrete_function((Tensor::scalar(0f32),))?;
    /// assert_eq!(cf.implements(), Some("my_ops.softplus"));
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn implements(mut self, name: impl Into<String>) -> Self {
        self.implements = Some(name.into());
        self
    }

    /// TensorFlow's `jit_compile`. `true` (the default) compiles each
    /// traced graph whole with XLA. `false` runs the same graph op by op
    /// through the eager op cache, with no whole-program fusion, so the
    /// same trace can be compared fused and unfused. Tracing, caching,
    /// signatures, variables and gradients behave the same; a `cond` or
    /// `while_loop` still runs as one compiled op (its regions inside it).
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let body = |x: Tensor| -> Result<Tensor> { Ok(x.tanh()? * 0.5 + 0.1) };
    /// let fused = function(body);
    /// let unfused = FunctionOptions::new().jit_compile(false).build(body);
    /// let x = Tensor::vector(&[0.5f32, -1.0])?;
    /// let (a, b) = (fused.call((&x,))?, unfused.call((&x,))?);
    /// assert!((a.to_vec::<f32>()?[0] - b.to_vec::<f32>()?[0]).abs() < 1e-6);
    /// assert_eq!(unfused.tracing_count(), 1);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn jit_compile(mut self, on: bool) -> Self {
        self.jit_compile = Some(on);
        self
    }

    /// Parameter names for signatures (closures have none of their own;
    /// the default is `a`, `b`, `c`, ...).
    pub fn arg_names(mut self, names: &[&str]) -> Self {
        self.arg_names = Some(names.iter().map(|n| n.to_string()).collect());
        self
    }

    /// Wraps `body` into a [`Function`] with these options.
    pub fn build<Args, F>(self, body: F) -> Function<Args, <F::Output as IntoOutput>::Out>
    where
        Args: ArgList,
        F: TraceableFn<Args>,
    {
        Function::new(self, body)
    }
}

/// Wraps a closure into a polymorphic [`Function`] with default options.
///
/// ```
/// use xlafn::prelude::*;
/// let add = function(|a: Tensor, b: Tensor| a + b);
/// let x = Tensor::vector(&[1f32, 2.])?;
/// let y = add.call((&x, &x))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2., 4.]);
/// add.call((&x, &x))?;
/// assert_eq!(add.tracing_count(), 1);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn function<Args, F>(body: F) -> Function<Args, <F::Output as IntoOutput>::Out>
where
    Args: ArgList,
    F: TraceableFn<Args>,
{
    FunctionOptions::new().build(body)
}

type Body<Args, Out> = Box<dyn Fn(Args) -> Result<Out> + Send + Sync>;

struct Traced<Out> {
    core: Arc<ConcreteCore>,
    template: Arc<Out>,
}

impl<Out> Clone for Traced<Out> {
    fn clone(&self) -> Self {
        Traced {
            core: self.core.clone(),
            template: self.template.clone(),
        }
    }
}

struct State<Out> {
    table: DispatchTable<Traced<Out>>,
}

struct Inner<Args, Out> {
    id: u64,
    name: String,
    implements: Option<String>,
    jit_compile: bool,
    shardings: Option<Arc<ShardingOptions>>,
    arg_names: Vec<String>,
    signature: Option<Signature>,
    reduce_retracing: bool,
    body: Body<Args, Out>,
    state: Mutex<State<Out>>,
    /// Traces in progress by type: other callers of that type wait.
    flights: SingleFlight<FunctionType, Traced<Out>>,
    traces: AtomicUsize,
    /// Set after the first successful call: later traces may not create
    /// variables.
    called: AtomicBool,
}

/// A polymorphic function: traces its closure once per call type, compiles
/// the graph with XLA, and caches both. Cheap to clone; `Send` and
/// `Sync`, with concurrent first calls of one type tracing once.
///
/// ```
/// use xlafn::prelude::*;
/// let square = function(|x: Tensor| &x * &x);
/// let y = square.call((Tensor::vector(&[1f32, 2.])?,))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![1., 4.]);
/// square.call((Tensor::vector(&[3f32, 4.])?,))?; // same type: cached
/// assert_eq!(square.tracing_count(), 1);
/// square.call((Tensor::vector(&[1f32, 2., 3.])?,))?; // new shape: retraces
/// assert_eq!(square.tracing_count(), 2);
/// assert_eq!(square.concrete_functions().len(), 2);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct Function<Args, Out> {
    inner: Arc<Inner<Args, Out>>,
    _args: PhantomData<fn(Args) -> Out>,
}

/// `Function("name", 2 traces)`: the name and how many concrete functions
/// it holds, without their graphs (print a concrete function for those).
impl<Args, Out> std::fmt::Debug for Function<Args, Out> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Function({:?}, {} traces)",
            self.inner.name,
            self.inner.traces.load(Ordering::Relaxed)
        )
    }
}

impl<Args, Out> Clone for Function<Args, Out> {
    fn clone(&self) -> Self {
        Function {
            inner: self.inner.clone(),
            _args: PhantomData,
        }
    }
}

/// How many traces of functions may nest on one thread. Python stops
/// at 1000 frames, but one level of recursion through tracing (call →
/// dispatch → trace → closure → call) takes about 3.5 KiB of stack in a
/// debug build (measured by `tests/robust_concurrency.rs`), so 1000 levels
/// would overflow the default 2 MiB of a spawned (or test) thread. 256
/// levels take under 1 MiB, leaving the rest of a 2 MiB stack (and most of
/// the main thread's 8 MiB) for the closures' own frames.
pub const MAX_TRACE_DEPTH: usize = 256;

thread_local! {
    /// (function id, function type) of the traces running on this thread,
    /// to report recursion that would never finish tracing.
    static TRACING: RefCell<Vec<(u64, FunctionType)>> = const { RefCell::new(Vec::new()) };
}

impl<Args: ArgList, Out: Output> Function<Args, Out> {
    fn new<F>(options: FunctionOptions, body: F) -> Self
    where
        F: TraceableFn<Args, Output: IntoOutput<Out = Out>>,
    {
        let id = NEXT_FUNCTION.fetch_add(1, Ordering::Relaxed);
        // Names the options leave out fall back to the defaults.
        let mut arg_names = default_names(Args::ARITY);
        for (slot, name) in arg_names.iter_mut().zip(options.arg_names.iter().flatten()) {
            *slot = name.clone();
        }
        let name = options.name.clone().unwrap_or_else(|| "f".to_string());
        let signature = options
            .input_signature
            .map(|specs| Signature::new(&name, &arg_names, specs));
        let inner = Inner {
            id,
            name,
            implements: options.implements,
            jit_compile: options.jit_compile.unwrap_or(true),
            shardings: options.shardings.map(Arc::new),
            arg_names,
            signature,
            reduce_retracing: options.reduce_retracing,
            body: Box::new(move |args| body.call_with(args).into_output()),
            state: Mutex::new(State {
                table: DispatchTable::new(),
            }),
            flights: SingleFlight::new(),
            traces: AtomicUsize::new(0),
            called: AtomicBool::new(false),
        };
        Function {
            inner: Arc::new(inner),
            _args: PhantomData,
        }
    }

    /// Calls the function: traces on a new call type, then runs the
    /// compiled program. Parameters typed `Tensor` also accept `&Tensor`
    /// and host numbers.
    pub fn call<A: IntoArgs<Args>>(&self, args: A) -> Result<Out> {
        let args = args.into_args()?;
        if functions_run_eagerly() {
            if let Some(sig) = &self.inner.signature {
                sig.bind(&args.trace_types()?)?;
            }
            return (self.inner.body)(args);
        }
        let _span = tracing::debug_span!("call", function = %self.inner.name).entered();
        let call_type = args.trace_types()?;
        let variables = args.variables();
        let mut flat = Vec::new();
        args.flatten(&mut flat);
        let traced = self.concrete_for(call_type, &variables, Some(&flat))?;
        let outs = traced.core.call_flat(&flat, &variables)?;
        self.inner.called.store(true, Ordering::SeqCst);
        Ok(Out::rebuild(&traced.template, &mut outs.into_iter()))
    }

    /// The concrete function for arguments or `TensorSpec`s, tracing it if
    /// needed. Literal parameters stay part of its type.
    pub fn get_concrete_function<S: IntoTraceTypes<Args>>(
        &self,
        specs: S,
    ) -> Result<ConcreteFunction<Args, Out>> {
        let types = specs.into_trace_types()?;
        let traced = self.concrete_for(types, &[], None)?;
        Ok(ConcreteFunction {
            core: traced.core,
            template: traced.template,
            _args: PhantomData,
        })
    }

    /// How many times the closure has been traced.
    pub fn tracing_count(&self) -> usize {
        self.inner.traces.load(Ordering::Relaxed)
    }

    /// How many specializations were compiled, over all concrete functions.
    pub fn compile_count(&self) -> usize {
        self.with_state(|s| s.table.entries().map(|(_, t)| t.core.compile_count()).sum())
    }

    /// The cached concrete functions, in the order they were traced.
    pub fn concrete_functions(&self) -> Vec<ConcreteFunction<Args, Out>> {
        self.with_state(|s| {
            s.table
                .entries()
                .map(|(_, t)| ConcreteFunction {
                    core: t.core.clone(),
                    template: t.template.clone(),
                    _args: PhantomData,
                })
                .collect()
        })
    }

    /// Every concrete function's signature, separated by blank lines, as
    /// TensorFlow prints them.
    pub fn pretty_printed_concrete_signatures(&self) -> String {
        self.with_state(|s| {
            let parts: Vec<String> = s
                .table
                .entries()
                .map(|(_, t)| t.core.pretty_printed_signature())
                .collect();
            parts.join("\n\n")
        })
    }

    /// The name set by `FunctionOptions::name` (`f` when none was), used
    /// in signatures, errors and exports.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The operation this function implements, if
    /// [`FunctionOptions::implements`] named one.
    pub fn implements(&self) -> Option<&str> {
        self.inner.implements.as_deref()
    }

    fn with_state<R>(&self, f: impl FnOnce(&mut State<Out>) -> R) -> R {
        f(&mut self.inner.state.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// Dispatches `call_type`; traces on a miss, once per type across threads.
    /// `variables` are the call's distinct variable arguments, if known:
    /// stand-ins for them remember which variable they stood for first;
    /// `tensors` its flattened tensor arguments, which lifted variable
    /// initializers run on (absent when tracing from specs).
    fn concrete_for(
        &self,
        call_type: FunctionType,
        variables: &[Variable],
        tensors: Option<&[Tensor]>,
    ) -> Result<Traced<Out>> {
        let call_type = match &self.inner.signature {
            Some(sig) => sig.bind(&call_type)?,
            None => call_type,
        };
        let trace_type = {
            let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, traced)) = state.table.lookup(&call_type) {
                return Ok(traced.clone());
            }
            if self.inner.reduce_retracing {
                state.table.generalize(&call_type)
            } else {
                call_type.clone()
            }
        };
        self.check_recursion(&trace_type)?;
        let what = format!("tracing function '{}'", self.inner.name);
        self.inner.flights.run(trace_type.clone(), &what, || {
            // A flight for this type may have landed since the lookup above.
            let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            if let Some((_, traced)) = state.table.lookup(&call_type) {
                return Ok(traced.clone());
            }
            drop(state);
            self.trace_and_insert(trace_type, variables, tensors)
        })
    }

    /// Re-entering a trace of the same type never ends, and a chain
    /// of nested traces that never repeats a type (a literal counting down
    /// from 20 000) would overflow the thread's stack and abort the process;
    /// both are a RecursionError naming the function.
    fn check_recursion(&self, ty: &FunctionType) -> Result<()> {
        let (recursing, depth) = TRACING.with(|t| {
            let t = t.borrow();
            let recursing = t.iter().any(|(id, t)| *id == self.inner.id && t == ty);
            (recursing, t.len())
        });
        if depth >= MAX_TRACE_DEPTH {
            return Err(Error::Recursion(format!(
                "function '{}' was called inside {depth} nested traces, the most xlafn allows \
                 (MAX_TRACE_DEPTH, so that tracing fits a 2 MiB thread stack); recursion \
                 through tracing must end sooner. Use a while_loop for deep iteration",
                self.inner.name
            )));
        }
        if recursing {
            return Err(Error::Recursion(format!(
                "function '{}' called itself while being traced with the same input types ({}); \
                 tracing would never end. Recursion is supported only when host (literal) \
                 arguments change between levels; otherwise use a while_loop",
                self.inner.name,
                describe_types(ty)
            )));
        }
        Ok(())
    }

    fn trace_and_insert(
        &self,
        ty: FunctionType,
        variables: &[Variable],
        tensors: Option<&[Tensor]>,
    ) -> Result<Traced<Out>> {
        let (reason, argument) = {
            let state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
            miss_reason(&state.table, &ty, &self.inner.arg_names)
        };
        tracing::info!(
            target: "xlafn::trace",
            function = %self.inner.name,
            types = %describe_types(&ty),
            traces_before = self.tracing_count(),
            reason = %reason,
            argument,
            "tracing function '{}'",
            self.inner.name
        );
        let traced = {
            let _mark = TracingMark::push(self.inner.id, ty.clone());
            self.trace(&ty, variables, tensors)?
        };
        let mut state = self.inner.state.lock().unwrap_or_else(|e| e.into_inner());
        self.warn_if_retracing(&state.table, &ty);
        state.table.insert(ty, traced.clone());
        Ok(traced)
    }

    /// Runs the closure on placeholders of `ty` and records the graph.
    fn trace(
        &self,
        ty: &FunctionType,
        variables: &[Variable],
        tensors: Option<&[Tensor]>,
    ) -> Result<Traced<Out>> {
        let (mut finished, mut out) = self.trace_once(ty, variables)?;
        if finished.created_variables > 0 && self.inner.called.load(Ordering::SeqCst) {
            return Err(self.variables_after_first_call());
        }
        // Variables an owner made for this trace (optimizer slots) are
        // read as captures already; only the body's own need a second trace.
        if finished.created_variables > finished.owned_variables {
            // Variables created from traced values get them now, from
            // this call's arguments.
            lifting::run_initializers(&self.inner.name, &finished, tensors, variables)?;
            // A trace that created variables is traced again at once, and
            // that trace must create none (the variables of the first one
            // are captured instead).
            (finished, out) = self.trace_once(ty, variables)?;
            if finished.created_variables > 0 {
                return Err(self.variables_after_first_call());
            }
        }
        let mut core = ConcreteCore::new(
            self.inner.name.clone(),
            self.inner.arg_names.clone(),
            ty.clone(),
            finished,
            out.describe(),
        );
        core.implements = self.inner.implements.clone();
        core.jit_compile = self.inner.jit_compile;
        core.shardings = self.inner.shardings.clone();
        Ok(Traced {
            core: Arc::new(core),
            template: Arc::new(out),
        })
    }

    fn variables_after_first_call(&self) -> Error {
        Error::Value(format!(
            "function '{}' only supports singleton Variables created on the first call. Make sure \
             the Variable is only created once (for example in an Option or OnceLock filled on \
             the first call) or created outside the function",
            self.inner.name
        ))
    }

    fn trace_once(
        &self,
        ty: &FunctionType,
        variables: &[Variable],
    ) -> Result<(FinishedTrace, Out)> {
        self.inner.traces.fetch_add(1, Ordering::Relaxed);
        let _span = crate::runtime::profile::span("trace").arg("function", &self.inner.name);
        let guard = TraceGuard::new(&self.inner.name);
        let args = with_actual_variables(variables, || Args::placeholders(ty))?;
        let out = (self.inner.body)(args)?;
        let mut flat: Vec<Tensor> = Vec::new();
        out.flatten(&mut flat);
        Ok((guard.finish(&flat)?, out))
    }

    /// A `tracing` warning when a function keeps retracing, naming the
    /// argument whose type differs from the closest earlier trace.
    fn warn_if_retracing(&self, table: &DispatchTable<Traced<Out>>, ty: &FunctionType) {
        let count = self.tracing_count();
        if count < RETRACE_WARNING_THRESHOLD {
            return;
        }
        if table.is_empty() {
            return;
        }
        let (reason, argument) = miss_reason(table, ty, &self.inner.arg_names);
        tracing::warn!(
            function = %self.inner.name,
            traces = count,
            argument = argument.as_deref().unwrap_or("<arity>"),
            "function '{}' was traced {count} times; the latest retrace: {reason}. Pass tensors \
             instead of host literals, use reduce_retracing, or give an input_signature",
            self.inner.name
        );
    }
}

/// This thread's entry in `TRACING` while a trace runs; popped on every
/// exit, a panic in the traced closure included (otherwise every later
/// call of that type on this thread would be a spurious RecursionError).
struct TracingMark;

impl TracingMark {
    fn push(function: u64, ty: FunctionType) -> TracingMark {
        TRACING.with(|t| t.borrow_mut().push((function, ty)));
        TracingMark
    }
}

impl Drop for TracingMark {
    fn drop(&mut self) {
        TRACING.with(|t| t.borrow_mut().pop());
    }
}

/// Why `ty` missed `table`, as JAX's `explain_cache_misses` says it, and
/// the argument to blame: the first trace (no argument), or the argument
/// that differs from the most recent trace.
fn miss_reason<T>(
    table: &DispatchTable<T>,
    ty: &FunctionType,
    names: &[String],
) -> (String, Option<String>) {
    let Some((previous, _)) = table.entries().last() else {
        return ("first call".into(), None);
    };
    match ty.iter().zip(previous).position(|(a, b)| a != b) {
        Some(i) => {
            let name = names.get(i).map_or("?", String::as_str);
            let text = format!(
                "argument '{name}' changed from {} to {}",
                previous[i], ty[i]
            );
            (text, Some(name.to_string()))
        }
        None => (
            format!(
                "the number of arguments changed from {} to {}",
                previous.len(),
                ty.len()
            ),
            None,
        ),
    }
}

fn default_names(n: usize) -> Vec<String> {
    (0..n)
        .map(|i| {
            if i < 26 {
                ((b'a' + i as u8) as char).to_string()
            } else {
                format!("arg{i}")
            }
        })
        .collect()
}

fn describe_types(ty: &[TraceType]) -> String {
    ty.iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
