//! Concrete functions: one traced graph for one function type, with its
//! captures, and the compile cache of its specializations.
//!
//! A graph may have unknown dimensions; XLA needs static shapes, so each new
//! set of concrete input shapes is lowered and compiled once (not traced
//! again) and cached here. Called inside another trace, the graph is
//! inlined into the caller's graph instead of executed.

use super::closure::{ArgList, IntoArgs};
use super::dispatch::{FunctionType, is_subtype};
use super::output::Output;
use super::sharded::{ShardedKey, ShardedProgram, ShardingOptions};
use super::trace_type::TraceType;
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::lower;
use crate::ops::Op;
use crate::runtime::{Buffer, Client, Executable};
use crate::tensor::Tensor;
use crate::trace::{Capture, CaptureSource, FinishedTrace};
use crate::variable::VarRef;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};

/// What one compiled specialization is for: the device (its index in the
/// client's list) and the argument types.
pub(super) type SpecializationKey = (usize, Vec<ArraySpec>);

/// The untyped part of a concrete function, shared by its typed handles.
pub(crate) struct ConcreteCore {
    pub name: String,
    /// `FunctionOptions::implements`, kept for exports and tools.
    pub implements: Option<String>,
    /// `FunctionOptions::jit_compile`: `false` runs the graph op by op.
    pub jit_compile: bool,
    pub arg_names: Vec<String>,
    pub function_type: FunctionType,
    pub graph: Arc<Graph>,
    pub captures: Vec<Capture>,
    /// Variables the graph assigns and the results holding their new values.
    pub updates: Vec<(VarRef, usize)>,
    /// The function's own outputs come first among the graph's results.
    pub num_outputs: usize,
    pub output_type: String,
    /// The compiled specializations, by device (its index in the client's
    /// list: one compile per device assignment) and argument types.
    pub(super) executables: RwLock<HashMap<SpecializationKey, Arc<Executable>>>,
    /// The specialization used last: the hot path of repeated calls with
    /// one shape compares against it without allocating or hashing.
    pub(super) last: RwLock<Option<(Vec<ArraySpec>, Arc<Executable>)>>,
    /// Held while compiling, so one shape is never compiled twice.
    pub(super) compile_lock: Mutex<()>,
    pub(super) compiles: AtomicUsize,
    /// The op a call records on an eager gradient tape (with its compiled
    /// backward), made on first use.
    pub(super) tape_op: OnceLock<Op>,
    /// `FunctionOptions::in_shardings`/`out_shardings`, if given.
    pub(super) shardings: Option<Arc<ShardingOptions>>,
    /// The mesh of a `shard_map` in the graph, if any.
    pub(super) graph_mesh: Option<Arc<crate::mesh::Mesh>>,
    /// The specializations compiled for a mesh (see `sharded`).
    pub(super) sharded: RwLock<HashMap<ShardedKey, Arc<ShardedProgram>>>,
}

impl ConcreteCore {
    pub(crate) fn new(
        name: String,
        arg_names: Vec<String>,
        function_type: FunctionType,
        finished: FinishedTrace,
        output_type: String,
    ) -> ConcreteCore {
        let num_outputs = finished.graph.results().len() - finished.updates.len();
        let graph_mesh = super::sharded::graph_mesh(&finished.graph);
        ConcreteCore {
            name,
            implements: None,
            jit_compile: true,
            arg_names,
            function_type,
            graph: Arc::new(finished.graph),
            captures: finished.captures,
            updates: finished.updates,
            num_outputs,
            output_type,
            executables: RwLock::new(HashMap::new()),
            last: RwLock::new(None),
            compile_lock: Mutex::new(()),
            compiles: AtomicUsize::new(0),
            tape_op: OnceLock::new(),
            shardings: None,
            graph_mesh,
            sharded: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn compile_count(&self) -> usize {
        self.compiles.load(Ordering::Relaxed)
    }

    /// The StableHLO text of the specialization for `specs` (the argument
    /// tensors' types; captures are appended automatically).
    pub(crate) fn stablehlo(&self, specs: &[ArraySpec]) -> Result<String> {
        let mut all = specs.to_vec();
        for c in &self.captures {
            let t = match &c.source {
                CaptureSource::Eager(b) => ArraySpec::new(b.dtype(), b.dims()),
                CaptureSource::Outer(t) | CaptureSource::Sharded(t) => {
                    ArraySpec::new(t.dtype(), &t.dims())
                }
                CaptureSource::Variable(r) => {
                    let var = r
                        .resolve_in_trace(&self.name)
                        .or_else(|_| r.resolve(&[], &self.name))?;
                    ArraySpec::new(var.dtype, &var.dims)
                }
            };
            all.push(t);
        }
        Ok(lower::lower(&self.graph, &all)?.text)
    }

    /// Adds this function's name to errors raised by its program.
    pub(super) fn frame(&self, e: Error) -> Error {
        match e {
            Error::Type(m) => Error::Type(format!("in function '{}': {m}", self.name)),
            other => other,
        }
    }

    fn describe_params(&self) -> String {
        let mut s = String::new();
        for (name, ty) in self.arg_names.iter().zip(&self.function_type) {
            s.push_str(&format!("  {name} (POSITIONAL_OR_KEYWORD): {ty}\n"));
        }
        s
    }

    fn describe_captures(&self) -> String {
        if self.captures.is_empty() {
            return "  None\n".into();
        }
        self.captures
            .iter()
            .map(|c| {
                format!(
                    "  {}: {}\n",
                    c.param,
                    describe_spec(self.graph.value_type(c.param))
                )
            })
            .collect()
    }
}

fn describe_spec(t: &crate::ir::TensorType) -> String {
    super::trace_type::TensorSpec {
        shape: t.shape.clone(),
        dtype: t.dtype,
        name: None,
    }
    .to_string()
}

impl ConcreteCore {
    /// TensorFlow's `pretty_printed_signature()`: parameters, output type
    /// and captures, without a trailing newline.
    pub(crate) fn pretty_printed_signature(&self) -> String {
        format!(
            "Input Parameters:\n{}Output Type:\n  {}\nCaptures:\n{}",
            self.describe_params(),
            self.output_type,
            self.describe_captures().trim_end()
        )
    }
}

/// `ConcreteFunction Input Parameters: ...`, as `print(concrete)` shows.
impl fmt::Display for ConcreteCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "ConcreteFunction {}", self.pretty_printed_signature())
    }
}

/// One traced graph of a [`Function`](super::Function), callable with
/// inputs compatible with its function type.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|x: Tensor| x.mul_scalar(2.0));
/// // Trace for f32 vectors of any length, without calling.
/// let cf = f.get_concrete_function((TensorSpec::new(&[None], DType::F32),))?;
/// let y = cf.call((Tensor::vector(&[1f32, 2., 3.])?,))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![2., 4., 6.]);
/// // A concrete function never retraces: other types are an error.
/// assert!(cf.call((Tensor::vector(&[1i32])?,)).is_err());
/// assert_eq!(f.tracing_count(), 1);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct ConcreteFunction<Args, Out> {
    pub(crate) core: Arc<ConcreteCore>,
    pub(crate) template: Arc<Out>,
    pub(crate) _args: PhantomData<fn(Args)>,
}

impl<Args, Out> Clone for ConcreteFunction<Args, Out> {
    fn clone(&self) -> Self {
        ConcreteFunction {
            core: self.core.clone(),
            template: self.template.clone(),
            _args: PhantomData,
        }
    }
}

impl<Args: ArgList, Out: Output> ConcreteFunction<Args, Out> {
    /// Calls with `args`, which must fit this function's type.
    pub fn call<A: IntoArgs<Args>>(&self, args: A) -> Result<Out> {
        let args = args.into_args()?;
        let types = args.trace_types()?;
        self.check_compatible(&types)?;
        let mut flat = Vec::new();
        args.flatten(&mut flat);
        let outs = self.core.call_flat(&flat, &args.variables())?;
        Ok(Out::rebuild(&self.template, &mut outs.into_iter()))
    }

    /// Errors unless the call's types fit the traced ones, naming the first
    /// argument that does not in TensorFlow's words.
    fn check_compatible(&self, types: &[TraceType]) -> Result<()> {
        let expected = &self.core.function_type;
        if is_subtype(types, expected) {
            return Ok(());
        }
        if types.len() != expected.len() {
            return Err(Error::Type(format!(
                "Binding inputs to function '{}' failed: it takes {} argument(s), got {}. \
                 Signature: ({})",
                self.core.name,
                expected.len(),
                types.len(),
                self.signature_types()
            )));
        }
        let (i, (got, want)) = types
            .iter()
            .zip(expected)
            .enumerate()
            .find(|(_, (got, want))| !got.is_subtype_of(want))
            .expect("some argument does not fit");
        Err(super::signature::cast_error(
            &self.core.name,
            got,
            want,
            self.core.arg_names.get(i).map_or("?", String::as_str),
            &self.signature_types(),
        ))
    }

    fn signature_types(&self) -> String {
        let parts: Vec<String> = self
            .core
            .arg_names
            .iter()
            .zip(&self.core.function_type)
            .map(|(n, t)| format!("{n}: {t}"))
            .collect();
        parts.join(", ")
    }

    /// The low-overhead path: flat tensors in, flat tensors out, with
    /// no signature processing. Arguments must be in `flatten` order and
    /// have the types the function was traced for; the program checks
    /// dtypes and shapes.
    pub fn call_flat(&self, args: &[Tensor]) -> Result<Vec<Tensor>> {
        self.core.call_flat(args, &[])
    }

    /// The traced graph, read-only: its operations, parameters and
    /// results (TensorFlow's `ConcreteFunction.graph`).
    pub fn graph(&self) -> super::FuncGraph<'_> {
        super::FuncGraph::new(&self.core.graph)
    }

    /// The function type as TensorFlow prints it: `(a: TensorSpec(...)) -> ...`.
    pub fn function_type(&self) -> String {
        format!("({}) -> {}", self.signature_types(), self.core.output_type)
    }

    /// The operation the function implements (`FunctionOptions::implements`).
    pub fn implements(&self) -> Option<&str> {
        self.core.implements.as_deref()
    }

    /// The trace types of the parameters.
    pub fn input_types(&self) -> &[TraceType] {
        &self.core.function_type
    }

    /// How many specializations (concrete input shapes) were compiled.
    pub fn compile_count(&self) -> usize {
        self.core.compile_count()
    }

    /// The compiled executable for argument tensors of types `specs`
    /// (compiling it if needed); captures are appended automatically. For
    /// inspection and for measuring the raw execute cost of the program.
    pub fn compiled(&self, specs: &[ArraySpec]) -> Result<Arc<Executable>> {
        let client = Client::default_client()?;
        let dev = client.default_device();
        let mut owned = Vec::new();
        for s in specs {
            let zeros = vec![0u8; s.num_elements() as usize * s.dtype.size_in_bytes()?];
            owned.push(Buffer::from_bytes(&client, dev, s.dtype, &zeros, &s.dims)?);
        }
        let mut buffers: Vec<&Buffer> = owned.iter().collect();
        let captured = self.core.capture_buffers(&[])?;
        buffers.extend(captured.iter().map(|b| &**b));
        self.core.executable_for(&buffers, dev)
    }

    /// The programs compiled for sharded calls (one per argument types
    /// and input shardings), for inspection: `optimized()` shows the
    /// collectives XLA's partitioner inserted.
    pub fn sharded_executables(&self) -> Vec<Arc<Executable>> {
        self.core.sharded_executables()
    }

    /// The StableHLO text compiled for argument tensors of types `specs`.
    pub fn stablehlo(&self, specs: &[ArraySpec]) -> Result<String> {
        self.core.stablehlo(specs)
    }

    /// Number of captured inputs (closure captures).
    pub fn num_captures(&self) -> usize {
        self.core.captures.len()
    }
}

impl<Args, Out> fmt::Display for ConcreteFunction<Args, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.core, f)
    }
}

impl<Args, Out> fmt::Debug for ConcreteFunction<Args, Out> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.core, f)
    }
}
