//! Layer: function. The ahead-of-time stages of a function, as JAX's
//! `jit(f).lower(...).compile()`: [`Lowered`] holds the StableHLO that a
//! concrete function lowers to for fully known argument types, and
//! [`Compiled`] the executable XLA made of it, with XLA's cost and memory
//! analyses, the optimized program's text, and how long each stage took.
//!
//! The stages go through the function's own caches: lowering traces only
//! if a call would, and compiling stores the executable where a later call
//! finds it, so inspecting a function does not compile it twice. A stage
//! served from a cache says so (its time is `None`).
//!
//! Imports `concrete` and `polymorphic` (this layer), `runtime` (the
//! executable's analyses) and `dtype`.

use super::closure::{ArgList, IntoTraceTypes};
use super::concrete::ConcreteFunction;
use super::output::Output;
use super::polymorphic::Function;
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::runtime::{CostAnalysis, Executable, MemoryStats};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How long each stage took; `None` where a cache served it (the trace of
/// an input type traced before, an executable compiled before).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StageTimes {
    /// Tracing the Rust closure into a graph.
    pub trace: Option<Duration>,
    /// Lowering the graph to StableHLO text.
    pub lower: Duration,
    /// XLA's compile (or a load from the on-disk compile cache).
    pub compile: Option<Duration>,
}

/// A concrete function lowered to StableHLO for fully known argument
/// types (JAX's `Lowered`).
pub struct Lowered<Args, Out> {
    concrete: ConcreteFunction<Args, Out>,
    specs: Vec<ArraySpec>,
    text: String,
    times: StageTimes,
}

/// A lowered function compiled by XLA (JAX's `Compiled`).
pub struct Compiled<Args, Out> {
    lowered: Lowered<Args, Out>,
    executable: Arc<Executable>,
}

impl<Args: ArgList, Out: Output> Function<Args, Out> {
    /// Traces the function for `args` (tensors, or fully known
    /// `TensorSpec`s) as a call would, and lowers it: JAX's
    /// `jit(f).lower(*args)`.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let f = function(|a: Tensor, b: Tensor| a.matmul(&b));
    /// let a = Tensor::ones(&[4, 8], DType::F32);
    /// let b = Tensor::ones(&[8, 2], DType::F32);
    /// let compiled = f.lower((&a, &b))?.compile()?;
    /// // One multiply-add per (row, column, inner) triple: 2 * 4 * 2 * 8.
    /// assert_eq!(compiled.cost_analysis()?.flops(), Some(128.0));
    /// assert!(compiled.lowered().as_text().contains("stablehlo.dot_general"));
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn lower<S: IntoTraceTypes<Args>>(&self, args: S) -> Result<Lowered<Args, Out>> {
        let traces = self.tracing_count();
        let began = Instant::now();
        let concrete = self.get_concrete_function(args)?;
        let traced = (self.tracing_count() > traces).then(|| began.elapsed());
        let mut lowered = concrete.lower()?;
        lowered.times.trace = traced;
        Ok(lowered)
    }
}

impl<Args: ArgList, Out: Output> ConcreteFunction<Args, Out> {
    /// Lowers the concrete function for its own argument types, which must
    /// be fully known (a function traced with relaxed shapes needs
    /// [`lower_for`](Self::lower_for)).
    pub fn lower(&self) -> Result<Lowered<Args, Out>> {
        let specs = self.argument_specs()?;
        self.lower_for(&specs)
    }

    /// Lowers the concrete function for argument tensors of types `specs`
    /// (captured values are appended, as a call appends them).
    pub fn lower_for(&self, specs: &[ArraySpec]) -> Result<Lowered<Args, Out>> {
        let began = Instant::now();
        let text = self.stablehlo(specs)?;
        Ok(Lowered {
            concrete: self.clone(),
            specs: specs.to_vec(),
            text,
            times: StageTimes {
                trace: None,
                lower: began.elapsed(),
                compile: None,
            },
        })
    }

    /// The argument tensors' types, each fully known.
    fn argument_specs(&self) -> Result<Vec<ArraySpec>> {
        let graph = self.graph();
        let arguments = graph.params().len() - self.num_captures();
        graph.params()[..arguments]
            .iter()
            .enumerate()
            .map(|(i, &p)| {
                let t = graph.value_type(p);
                match t.shape.as_known() {
                    Some(dims) => Ok(ArraySpec::new(t.dtype, &dims)),
                    None => Err(Error::Value(format!(
                        "cannot lower: argument tensor {i} has type {t}, which is not fully \
                         known; pass tensors or fully known TensorSpecs, or call lower_for with \
                         ArraySpecs"
                    ))),
                }
            })
            .collect()
    }
}

impl<Args: ArgList, Out: Output> Lowered<Args, Out> {
    /// The StableHLO text (JAX's `lowered.as_text()`).
    pub fn as_text(&self) -> &str {
        &self.text
    }

    /// The StableHLO text's size in bytes.
    pub fn text_bytes(&self) -> usize {
        self.text.len()
    }

    /// The argument tensors' types it was lowered for.
    pub fn argument_specs(&self) -> &[ArraySpec] {
        &self.specs
    }

    /// How long tracing and lowering took.
    pub fn times(&self) -> StageTimes {
        self.times
    }

    /// The concrete function it was lowered from.
    pub fn concrete_function(&self) -> &ConcreteFunction<Args, Out> {
        &self.concrete
    }

    /// Compiles it for the default device, through the function's cache
    /// (a later call with these types runs the same executable).
    pub fn compile(self) -> Result<Compiled<Args, Out>> {
        let compiles = self.concrete.compile_count();
        let began = Instant::now();
        let executable = self.concrete.compiled(&self.specs)?;
        let compiled_now = self.concrete.compile_count() > compiles;
        let mut lowered = self;
        lowered.times.compile = compiled_now.then(|| began.elapsed());
        Ok(Compiled {
            lowered,
            executable,
        })
    }
}

impl<Args, Out> Compiled<Args, Out> {
    /// XLA's cost analysis: flops, transcendentals, bytes accessed (JAX's
    /// `compiled.cost_analysis()`).
    pub fn cost_analysis(&self) -> Result<CostAnalysis> {
        self.executable.cost_analysis()
    }

    /// The device memory XLA planned: argument, output, alias, temporary
    /// and code bytes (JAX's `compiled.memory_analysis()`).
    pub fn memory_analysis(&self) -> Result<MemoryStats> {
        self.executable.memory_stats()
    }

    /// The program after XLA's passes, as HLO-shaped text (JAX's
    /// `compiled.as_text()`; see `runtime::OptimizedProgram::text`).
    pub fn as_text(&self) -> Result<String> {
        Ok(self.executable.optimized()?.text())
    }

    /// How long tracing, lowering and compiling took.
    pub fn times(&self) -> StageTimes {
        self.lowered.times
    }

    /// The lowered stage it was compiled from.
    pub fn lowered(&self) -> &Lowered<Args, Out> {
        &self.lowered
    }

    /// The executable itself (to run it raw, or ask the runtime more).
    pub fn executable(&self) -> &Arc<Executable> {
        &self.executable
    }
}

impl<Args, Out> fmt::Display for Compiled<Args, Out> {
    /// A short report: stage times, cost and memory.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ms = |d: Option<Duration>| match d {
            Some(d) => format!("{:.2} ms", d.as_secs_f64() * 1e3),
            None => "cached".to_string(),
        };
        let t = self.times();
        writeln!(
            f,
            "trace {}, lower {}, compile {}; StableHLO {} bytes",
            ms(t.trace),
            ms(Some(t.lower)),
            ms(t.compile),
            self.lowered.text.len()
        )?;
        if let Ok(c) = self.cost_analysis() {
            let n = |v: Option<f64>| v.map_or_else(|| "unknown".to_string(), |v| v.to_string());
            writeln!(
                f,
                "cost: {} flops, {} transcendentals, {} bytes accessed",
                n(c.flops()),
                n(c.transcendentals()),
                n(c.bytes_accessed())
            )?;
        }
        if let Ok(m) = self.memory_analysis() {
            write!(
                f,
                "memory: arguments {} B, outputs {} B, aliased {} B, temporaries {} B, code {} B",
                m.argument_bytes,
                m.output_bytes,
                m.alias_bytes,
                m.temp_bytes,
                m.generated_code_bytes
            )?;
        }
        Ok(())
    }
}
