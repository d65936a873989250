//! Layer: tensor. `Tensor`, the value users compute with, its host
//! transfers, printing, operators, and the dispatch of ops: into the graph
//! being traced when a trace is active on this thread (`crate::trace`),
//! otherwise eagerly through the process-wide cache of one-op programs
//! (`eager`). Gradient tapes, check-numerics and sharded execution are
//! reached through what they registered in `hooks`, never by name.
//! Imports `ops`, `ir`, `lower` (via `eager`), `trace`, `runtime` and the
//! `ShardedArray` type a sharded tensor holds.
//!
//! Op methods (`x.tanh()`) are defined next to their ops in `crate::ops`;
//! they all go through `apply`.

mod device;
mod display;
pub(crate) mod hooks;
mod host;
pub use device::{default_device, devices, local_devices, with_device};
pub(crate) use device::{gather_on, place};
pub(crate) use display::render_array;
#[cfg(feature = "data")]
pub(crate) use host::scalar_bytes;
pub(crate) mod eager;
mod operators;

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::ValueId;
use crate::ir::{Scalar, Shape, TensorType};
use crate::mesh::ShardedArray;
use crate::ops::Op;
use crate::runtime::Buffer;
use crate::trace::{self, GraphId};
use std::sync::Arc;

pub use eager::{EagerCacheStats, EagerProgram, eager_cache_stats, eager_programs};

/// A multi-dimensional array. Eager tensors hold a device buffer; results
/// stay on the device until read with `to_vec`/`to_ndarray`. While a
/// function is being traced, ops return symbolic tensors: values of the
/// graph being built, with a dtype and a possibly partial shape.
///
/// Cloning is cheap (reference counted) and never copies device memory.
///
/// ```
/// use xlafn::prelude::*;
/// let x = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[2, 3])?;
/// assert_eq!((x.dtype(), x.dims()), (DType::F32, vec![2, 3]));
/// let y = x.mul_scalar(2.0)?; // eager: runs now, stays on the device
/// assert_eq!(y.to_vec::<f32>()?, vec![2., 4., 6., 8., 10., 12.]);
///
/// // Inside a traced function the same ops build a graph instead.
/// let f = function(|t: Tensor| {
///     assert!(t.is_symbolic());
///     t.mul_scalar(2.0)
/// });
/// assert_eq!(f.call((&x,))?.to_vec::<f32>()?, y.to_vec::<f32>()?);
/// # Ok::<(), xlafn::Error>(())
/// ```
///
/// # Methods by section
///
/// Each op's method is written beside its op (in `ops` or `composite`), so
/// rustdoc shows the methods as many `impl Tensor` blocks; each block opens
/// with the name of its section in bold. The book's "Tensor methods by
/// section" page lists every method under these sections, each with its
/// summary. The sections, with a method of each to start from:
///
/// | Section | What it holds | For example |
/// |---|---|---|
/// | **Constructors** | from host data, filled, like another, ranges, random | [`Tensor::from_vec`], [`Tensor::zeros`], [`Tensor::random_normal`] |
/// | **Read-back** | values back on the host | [`Tensor::to_vec`], [`Tensor::to_ndarray`], [`Tensor::item`] |
/// | **Type and shape** | dtype, shape, rank; checking a shape | [`Tensor::dtype`], [`Tensor::dims`], [`Tensor::ensure_shape`] |
/// | **Devices and sharding** | placement, meshes, layout constraints | [`Tensor::to_device`], [`Tensor::shard`], [`Tensor::with_sharding_constraint`] |
/// | **Shape and layout** | reshapes, transposes, joins, splits, pads, broadcasts | [`Tensor::reshape`], [`Tensor::concat`], [`Tensor::broadcast_to`] |
/// | **Elementwise** | arithmetic, comparisons, maths, activations, casts, complex parts | [`Tensor::add`], [`Tensor::tanh`], [`Tensor::cast`], [`Tensor::where_`] |
/// | **Reductions and statistics** | sums and extremes over axes, softmax, moments, norms | [`Tensor::reduce_sum`], [`Tensor::argmax`], [`Tensor::moments`] |
/// | **Indexing** | gathers, scatters, run-time slices, segment reductions | [`Tensor::gather`], [`Tensor::tensor_scatter_nd_update`], [`Tensor::dynamic_slice`] |
/// | **Sorting** | sorted values, their order, the largest k | [`Tensor::sort`], [`Tensor::top_k`] |
/// | **Linear algebra** | products, diagonals, factorizations, solves, matrix functions | [`Tensor::matmul`], [`Tensor::cholesky`], [`Tensor::svd`], [`Tensor::expm`] |
/// | **Convolution, pooling and scans** | convolutions, windowed reductions, cumulative scans | [`Tensor::conv2d`], [`Tensor::max_pool`], [`Tensor::cumsum`] |
/// | **Fourier transforms** | complex and real FFTs | [`Tensor::fft`], [`Tensor::rfftn`] |
///
/// The operators (`&a + &b`, `-&a`, `&a * 2.0`, `%` as `floormod`) are
/// sugar over the **Elementwise** methods. They cannot return a `Result`:
/// an error panics eagerly and, while tracing, is returned by the call of
/// the function being traced.
#[derive(Clone)]
pub struct Tensor {
    repr: Repr,
}

#[derive(Clone)]
pub(crate) enum Repr {
    Eager(Arc<Buffer>),
    /// Split over a mesh of devices (see `crate::sharding`).
    Sharded(Arc<ShardedArray>),
    Symbolic(Arc<Symbol>),
}

/// Which value a tensor is, for gradient bookkeeping.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum TensorKey {
    Eager(usize),
    Symbolic(u64, u32),
}

/// A value of a graph being (or having been) traced.
#[derive(Debug)]
pub(crate) struct Symbol {
    pub graph: GraphId,
    pub value: ValueId,
    pub ty: TensorType,
    /// The function whose trace made it, for out-of-scope messages.
    pub function: Arc<str>,
}

/// **Type and shape**: what a tensor is (its dtype and shape, symbolic or
/// on a device), and waiting for it to be computed.
impl Tensor {
    pub(crate) fn from_buffer(buffer: Buffer) -> Tensor {
        Tensor {
            repr: Repr::Eager(Arc::new(buffer)),
        }
    }

    pub(crate) fn from_shared_buffer(buffer: Arc<Buffer>) -> Tensor {
        Tensor {
            repr: Repr::Eager(buffer),
        }
    }

    pub(crate) fn from_sharded(array: Arc<ShardedArray>) -> Tensor {
        Tensor {
            repr: Repr::Sharded(array),
        }
    }

    /// The blocks of a sharded tensor.
    pub(crate) fn sharded(&self) -> Option<&Arc<ShardedArray>> {
        match &self.repr {
            Repr::Sharded(a) => Some(a),
            _ => None,
        }
    }

    pub(crate) fn from_symbol(symbol: Symbol) -> Tensor {
        Tensor {
            repr: Repr::Symbolic(Arc::new(symbol)),
        }
    }

    pub(crate) fn symbol(&self) -> Option<&Symbol> {
        match &self.repr {
            Repr::Symbolic(s) => Some(s),
            _ => None,
        }
    }

    pub(crate) fn eager_buffer(&self) -> Option<Arc<Buffer>> {
        match &self.repr {
            Repr::Eager(b) => Some(b.clone()),
            _ => None,
        }
    }

    /// The device buffer of an eager tensor. A symbolic tensor has none, and
    /// asking for its value is an error (as `.numpy()` is in a tf.function).
    pub(crate) fn buffer(&self) -> Result<&Buffer> {
        match &self.repr {
            Repr::Eager(b) => Ok(b),
            Repr::Sharded(a) => Err(crate::error::Error::Value(format!(
                "this tensor is sharded over {} devices ({}), so it has no one device or \
                 buffer: its sharding() says where its blocks are, and unshard() or \
                 to_device() gathers it",
                a.sharding().mesh().size(),
                a.sharding()
            ))),
            Repr::Symbolic(s) if trace::is_open(s.graph) => {
                Err(crate::error::Error::Value(format!(
                    "the symbolic tensor {} of function '{}' has no value while tracing; return it \
                 from the function to read it",
                    s.value, s.function
                )))
            }
            Repr::Symbolic(s) => Err(trace::out_of_scope(s)),
        }
    }

    /// The shared device buffer of an eager tensor on one device (for
    /// callers that count its holders); the same errors as `buffer`.
    pub(crate) fn shared_buffer(&self) -> Result<&Arc<Buffer>> {
        match &self.repr {
            Repr::Eager(b) => Ok(b),
            _ => Err(self.buffer().expect_err("not on one device")),
        }
    }

    /// The identity of this value: its device buffer, or its graph value.
    pub(crate) fn key(&self) -> TensorKey {
        match &self.repr {
            Repr::Eager(b) => TensorKey::Eager(Arc::as_ptr(b) as usize),
            Repr::Sharded(a) => TensorKey::Eager(Arc::as_ptr(a) as usize),
            Repr::Symbolic(s) => TensorKey::Symbolic(s.graph.0, s.value.0),
        }
    }

    /// Is this a symbolic tensor of a trace (rather than an eager value)?
    pub fn is_symbolic(&self) -> bool {
        matches!(self.repr, Repr::Symbolic(_))
    }

    /// The element type (known for eager and symbolic tensors alike).
    pub fn dtype(&self) -> DType {
        match &self.repr {
            Repr::Eager(b) => b.dtype(),
            Repr::Sharded(a) => a.dtype(),
            Repr::Symbolic(s) => s.ty.dtype,
        }
    }

    /// The shape, TensorFlow style: fully known for eager tensors, possibly
    /// partial for symbolic ones.
    pub fn shape(&self) -> Shape {
        match &self.repr {
            Repr::Eager(b) => Shape::known(b.dims()),
            Repr::Sharded(a) => Shape::known(a.dims()),
            Repr::Symbolic(s) => s.ty.shape.clone(),
        }
    }

    /// The dimensions. Unknown dimensions of a symbolic tensor read as -1 and
    /// an unknown rank as no dimensions (`shape()` tells them apart).
    pub fn dims(&self) -> Vec<i64> {
        match &self.repr {
            Repr::Eager(b) => b.dims().to_vec(),
            Repr::Sharded(a) => a.dims().to_vec(),
            Repr::Symbolic(s) => {
                let dims = s.ty.shape.dims().unwrap_or(&[]);
                dims.iter().map(|d| d.unwrap_or(-1)).collect()
            }
        }
    }

    /// The number of dimensions; 0 for a scalar, and for a symbolic
    /// tensor of unknown rank (see [`Tensor::dims`]).
    pub fn rank(&self) -> usize {
        self.dims().len()
    }

    /// Number of elements.
    pub fn size(&self) -> i64 {
        self.dims().iter().product()
    }

    /// dtype and shape together.
    pub fn tensor_type(&self) -> TensorType {
        TensorType::new(self.dtype(), self.shape())
    }

    /// Blocks until the tensor's value has been computed.
    pub fn block_until_ready(&self) -> Result<()> {
        if let Some(array) = self.sharded() {
            return array
                .shards()
                .iter()
                .try_for_each(|b| b.block_until_ready());
        }
        self.buffer()?.block_until_ready()
    }
}

/// Applies `op` to `inputs` and returns its results: a graph node while a
/// trace is active on this thread, otherwise an eager execution.
#[track_caller]
pub(crate) fn apply(op: impl Into<Op>, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    let op = op.into();
    if let Some(recorder) = hooks::recorder() {
        let results = apply_checked(op.clone(), inputs)?;
        (recorder.record_op)(&op, inputs, &results);
        return Ok(results);
    }
    apply_checked(op, inputs)
}

/// `apply` with check-numerics when it is on. `#[track_caller]` from the
/// user's call down to here (every public op method carries it) lets
/// check-numerics name the user's line without debug info.
#[track_caller]
fn apply_checked(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    if let Some(check) = hooks::numerics_check() {
        let name = crate::ops::OpDef::name(&op);
        let caller = std::panic::Location::caller();
        let results = apply_unchecked(op, inputs)?;
        (check.check)(name, &results, caller)?;
        return Ok(results);
    }
    apply_unchecked(op, inputs)
}

fn apply_unchecked(op: Op, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    if trace::is_tracing() {
        return trace::add_op(op, inputs);
    }
    let mut buffers: Vec<&Buffer> = Vec::with_capacity(inputs.len());
    for t in inputs {
        if t.is_sharded() {
            return hooks::run_sharded(op, inputs);
        }
        buffers.push(t.buffer()?);
    }
    Ok(eager::run(&op, &buffers)?
        .into_iter()
        .map(Tensor::from_buffer)
        .collect())
}

/// Applies a single-result op.
#[track_caller]
pub(crate) fn apply1(op: impl Into<Op>, inputs: &[&Tensor]) -> Result<Tensor> {
    Ok(apply(op, inputs)?.remove(0))
}

/// A host number as a scalar tensor of `dtype` (how `x * 2.0` takes `x`'s
/// dtype).
/// While tracing it becomes a constant node rather than a captured buffer.
#[track_caller]
pub(crate) fn scalar_as(value: Scalar, dtype: DType) -> Result<Tensor> {
    let value = value.convert_exact(dtype)?;
    if trace::is_tracing() {
        return Tensor::fill(&[], value, dtype);
    }
    host::scalar_tensor(value, dtype)
}

/// Applies `graph`'s ops one by one to `inputs` (an inlined call, or a
/// region replayed for its gradient). Going through `apply` keeps every op
/// visible to gradient tapes and to check-numerics, and re-infers types
/// from the actual inputs.
pub(crate) fn replay(graph: &crate::ir::Graph, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    replay_nodes(graph, inputs, false, &Default::default())
}

/// Like [`replay`], for recomputing values (gradients recompute loop
/// states and branch values): ops run only for their side effects, such as
/// `print`, are skipped, so they show once per real execution.
pub(crate) fn recompute(graph: &crate::ir::Graph, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
    replay_nodes(graph, inputs, true, &Default::default())
}

/// [`recompute`] with some values already known (`provided`, by the
/// graph's value ids): a node whose every result is provided is not run
/// again, only noted on recording tapes as if it had run, so gradients
/// still flow through it. A loop's gradient passes the results of the
/// body's dots that the forward loop stored.
pub(crate) fn recompute_with(
    graph: &crate::ir::Graph,
    inputs: &[&Tensor],
    provided: &std::collections::HashMap<ValueId, Tensor>,
) -> Result<Vec<Tensor>> {
    replay_nodes(graph, inputs, true, provided)
}

fn replay_nodes(
    graph: &crate::ir::Graph,
    inputs: &[&Tensor],
    skip_effects: bool,
    provided: &std::collections::HashMap<ValueId, Tensor>,
) -> Result<Vec<Tensor>> {
    let mut values: std::collections::HashMap<ValueId, Tensor> = graph
        .params()
        .iter()
        .copied()
        .zip(inputs.iter().map(|t| (*t).clone()))
        .collect();
    for node in graph.nodes() {
        if skip_effects && node.outputs.is_empty() && crate::ops::OpDef::has_side_effects(&node.op)
        {
            continue;
        }
        let ins: Vec<&Tensor> = node.inputs.iter().map(|v| &values[v]).collect();
        let known: Option<Vec<Tensor>> = match node.outputs.is_empty() {
            true => None,
            false => node
                .outputs
                .iter()
                .map(|v| provided.get(v).cloned())
                .collect(),
        };
        let outs = match known {
            Some(outs) => {
                if let Some(recorder) = hooks::recorder() {
                    (recorder.record_op)(&node.op, &ins, &outs);
                }
                outs
            }
            None => apply(node.op.clone(), &ins)?,
        };
        values.extend(node.outputs.iter().copied().zip(outs));
    }
    Ok(graph.results().iter().map(|r| values[r].clone()).collect())
}
