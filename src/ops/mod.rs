//! Layer: ops. The op catalog: every op is one type with one `OpDef` impl
//! in its family's file, holding its typed attributes, its shape/dtype rule
//! (`infer`, the only source of truth about result types, used by eager
//! mode, tracing and the lowering verifier) and its StableHLO lowering
//! (through `lower::Emitter`). The user-facing `Tensor` method for the op
//! lives in the same file. Gradient rules join them with the autodiff work.
//!
//! `Op` is a closed enum generated from one list, so adding an op without
//! its rules is a compile error rather than a missing registry entry.
//! Imports: `ir`, `lower::emitter`, `dtype`, `error`, and `tensor` for the
//! user-facing methods.

pub mod barrier;
pub(crate) mod batching;
pub mod callback;
pub(crate) mod codec;
pub mod complex;
pub mod constant;
pub mod control;
pub mod conv;
mod conv_patches;
pub mod custom_gradient;
pub mod decomp;
pub mod einsum;
pub mod elementwise;
pub mod ensure;
pub mod fft;
pub mod gather;
pub mod indexing;
pub mod linalg;
pub mod matrix;
pub(crate) mod one_program;
pub mod pad;
mod power;
pub mod products;
pub mod reduce;
pub mod scatter;
pub mod shape;
pub mod shard_map;
pub mod sharding_constraint;
pub mod sort;
pub mod special;
pub mod split;
pub mod stats;
pub mod take_along;
pub(crate) mod while_record;
pub mod window;
mod window_padding;

use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::lower::{Emitter, Val};
use crate::tensor::Tensor;

/// The rules of one op.
pub trait OpDef {
    /// The op's name in graphs and error messages (`"add"`).
    fn name(&self) -> &'static str;
    /// Result types for operand types; errors name the op and operands.
    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>>;
    /// Emits StableHLO for concrete operands; `outputs` are the types
    /// `infer` gave for them, which the emitted values must have.
    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>>;
    /// The vector-Jacobian product: from the op's inputs, its outputs and
    /// the gradients arriving at its outputs (`None` = zero), the gradients
    /// of its inputs (`None` = none: integer or boolean values, or inputs
    /// the result does not depend on smoothly). Written with tensor ops, so
    /// the same rule runs eagerly, builds backward graphs while tracing, and
    /// can itself be differentiated.
    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        Err(Error::invalid(self.name(), "has no gradient rule yet"))
    }
    /// `vjp` when the caller needs the gradients of only some inputs
    /// (`needed`, one flag per input; the others may be `None`). Ops whose
    /// gradient work is shared across inputs just compute them all.
    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        _needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp(inputs, outputs, grads)
    }
    /// Where the op's one result lies in its first input, when its
    /// gradient is that result's cotangent placed into zeros of the
    /// input's (known) shape, as a static slice's is: the offsets. The tape
    /// then assembles the cotangents of several slices of one array (an
    /// LSTM's gates cut from one product) as one concatenate instead of
    /// summing one padded copy per slice (`autodiff::cotangent`). The
    /// default, `None`, applies `vjp`.
    fn cotangent_placement(&self, _inputs: &[Tensor]) -> Option<Vec<i64>> {
        None
    }
    /// The batching rule (`vmap`): the op applied to `inputs` of which
    /// those marked in `batched` carry an extra leading axis of `size`
    /// examples; returns each output and whether it carries that axis.
    /// `None`: the op has no rule, and `vmap` runs the function as a loop
    /// on the device instead (see `autodiff::vmap`). Rules live in
    /// `ops::batching` beside the helpers they share.
    fn batch(
        &self,
        _inputs: &[Tensor],
        _batched: &[bool],
        _size: i64,
    ) -> Option<Result<Vec<(Tensor, bool)>>> {
        None
    }
    /// Does running the op do something besides computing its results
    /// (printing, calling back into Rust)? Recomputing values for a
    /// gradient skips such ops when nothing uses their results.
    fn has_side_effects(&self) -> bool {
        false
    }
}

/// The `vjp` of an op none of whose inputs gets a gradient (random draws:
/// the state input is a key, not a value the result depends on smoothly).
pub(crate) fn no_gradient(inputs: &[Tensor]) -> Result<Vec<Option<Tensor>>> {
    Ok(vec![None; inputs.len()])
}

/// An op the catalog marks `by_hand` writes its attributes for exports
/// itself (`codec::Encoded`); every other op is written as its attribute
/// struct.
macro_rules! written_as_attributes {
    ($ty:ty) => {
        impl codec::Encoded for $ty {
            type Json = $ty;
            fn encode(&self, _: codec::Declare) -> Result<$ty> {
                Ok(self.clone())
            }
            fn decode(json: &$ty, _: usize, _: codec::BindCallback) -> Result<$ty> {
                Ok(json.clone())
            }
        }
    };
    ($ty:ty, by_hand) => {};
}

macro_rules! op_catalog {
    ($($variant:ident($ty:ty) $($by_hand:ident)?),* $(,)?) => {
        /// Every op xlafn knows, with its attributes.
        #[derive(Clone, Debug, PartialEq, Eq, Hash)]
        pub enum Op { $($variant($ty)),* }

        /// The catalog's variant names, in order: what the per-op test
        /// table (`tests/op_coverage.rs`) must cover.
        pub const CATALOG: &[&str] = &[$(stringify!($variant)),*];

        $(written_as_attributes!($ty $(, $by_hand)?);)*

        /// One op of a saved graph: the catalog's variants, each with its
        /// attributes as written (`codec::Encoded::Json`), so the export
        /// vocabulary is the catalog itself.
        ///
        /// Every attribute struct denies unknown fields (as this enum does):
        /// an export is untrusted, and a field this build does not know is
        /// either damage or an attribute it would silently ignore,
        /// computing something other than what was saved.
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(rename_all = "snake_case", deny_unknown_fields)]
        pub(crate) enum OpJson { $($variant(<$ty as codec::Encoded>::Json)),* }

        impl Op {
            /// The op as an export's graph writes it.
            pub(crate) fn encode(&self, declare: codec::Declare) -> Result<OpJson> {
                Ok(match self {
                    $(Op::$variant(o) => OpJson::$variant(codec::Encoded::encode(o, declare)?)),*
                })
            }
        }

        impl OpJson {
            /// The op a saved graph's node holds, checked as its codec
            /// decides (`node_inputs`: how many inputs the node has).
            pub(crate) fn decode(&self, node_inputs: usize, bind: codec::BindCallback) -> Result<Op> {
                Ok(match self {
                    $(OpJson::$variant(j) => Op::$variant(<$ty as codec::Encoded>::decode(j, node_inputs, bind)?)),*
                })
            }
        }

        impl OpDef for Op {
            fn name(&self) -> &'static str {
                match self { $(Op::$variant(o) => o.name()),* }
            }
            fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
                let outputs = match self { $(Op::$variant(o) => o.infer(inputs)),* }?;
                check_result_sizes(self.name(), &outputs)?;
                Ok(outputs)
            }
            fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
                match self { $(Op::$variant(o) => o.lower(cx, inputs, outputs)),* }
            }
            fn vjp(&self, inputs: &[Tensor], outputs: &[Tensor], grads: &[Option<Tensor>]) -> Result<Vec<Option<Tensor>>> {
                match self { $(Op::$variant(o) => o.vjp(inputs, outputs, grads)),* }
            }
            fn has_side_effects(&self) -> bool {
                match self { $(Op::$variant(o) => o.has_side_effects()),* }
            }
            fn cotangent_placement(&self, inputs: &[Tensor]) -> Option<Vec<i64>> {
                match self { $(Op::$variant(o) => o.cotangent_placement(inputs)),* }
            }
            fn vjp_needed(&self, inputs: &[Tensor], outputs: &[Tensor], grads: &[Option<Tensor>], needed: &[bool]) -> Result<Vec<Option<Tensor>>> {
                match self { $(Op::$variant(o) => o.vjp_needed(inputs, outputs, grads, needed)),* }
            }
            fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> Option<Result<Vec<(Tensor, bool)>>> {
                match self { $(Op::$variant(o) => o.batch(inputs, batched, size)),* }
            }
        }

        impl Op {
            /// The op with its attributes, for graph listings:
            /// `fill { value: F64(2.0), dtype: F32, dims: [] }`.
            pub fn describe(&self) -> String {
                let debug = match self { $(Op::$variant(o) => format!("{o:?}")),* };
                match debug.find(" {") {
                    Some(i) => format!("{}{}", self.name(), &debug[i..]),
                    None => self.name().to_string(),
                }
            }
        }

        $(impl From<$ty> for Op {
            fn from(o: $ty) -> Op { Op::$variant(o) }
        })*
    };
}

op_catalog! {
    Unary(elementwise::Unary),
    Binary(elementwise::Binary),
    Select(elementwise::Select),
    Cast(elementwise::Cast),
    Constant(constant::Constant),
    FillLike(constant::FillLike),
    Iota(constant::Iota),
    RandomUniform(constant::RandomUniform),
    RandomNormal(constant::RandomNormal),
    RandomBits(constant::RandomBits),
    Reshape(shape::Reshape),
    Transpose(shape::Transpose),
    Concat(shape::Concat),
    Slice(shape::Slice),
    Split(split::Split),
    StridedSlice(shape::StridedSlice),
    Gather(shape::Gather),
    GatherNd(scatter::GatherNd),
    TakeAlongAxis(take_along::TakeAlongAxis),
    AddAlongAxis(take_along::AddAlongAxis),
    ScatterNd(scatter::ScatterNd),
    EnsureShape(ensure::EnsureShape),
    ShardingConstraint(sharding_constraint::ShardingConstraint),
    OptimizationBarrier(barrier::OptimizationBarrier),
    ShardMap(shard_map::ShardMap) by_hand,
    Collective(shard_map::Collective) by_hand,
    OneHot(shape::OneHot),
    MatMul(linalg::MatMul),
    Cholesky(decomp::Cholesky),
    TriangularSolve(decomp::TriangularSolve),
    DotGeneral(linalg::DotGeneral),
    Conv(conv::Conv),
    ReduceWindow(window::ReduceWindow),
    SelectAndScatterAdd(window::SelectAndScatterAdd),
    Reduce(reduce::Reduce),
    ArgReduce(reduce::ArgReduce),
    Softmax(reduce::Softmax),
    DynamicSlice(indexing::DynamicSlice),
    DynamicUpdateSlice(indexing::DynamicUpdateSlice),
    HostCallback(callback::HostCallback) by_hand,
    Cond(control::Cond) by_hand,
    While(control::While) by_hand,
    Call(control::Call) by_hand,
    Pad(pad::Pad),
    Reverse(pad::Reverse),
    BroadcastTo(pad::BroadcastTo),
    StopGradient(stats::StopGradient),
    Sort(sort::Sort),
    Complex(complex::Complex),
    ComplexPart(complex::ComplexPart),
    Fft(fft::Fft),
    CustomGradient(custom_gradient::CustomGradient) by_hand,
}

// ---- helpers shared by op definitions ----

/// Errors if a result type is too large for XLA, which would abort the
/// process on it: every op's results pass here, eagerly and while tracing,
/// so no op needs its own size rule. Unknown dimensions count as 1 (the
/// known ones already bound the size from below).
fn check_result_sizes(op: &str, outputs: &[TensorType]) -> Result<()> {
    for t in outputs {
        let Some(dims) = t.shape.dims() else {
            continue;
        };
        let known: Vec<i64> = dims.iter().map(|d| d.unwrap_or(1)).collect();
        crate::dtype::check_array_size(t.dtype, &known).map_err(|e| {
            let message = match e {
                Error::Value(m) => m,
                other => other.to_string(),
            };
            Error::invalid(op, message)
        })?;
    }
    Ok(())
}

/// Errors unless `value`, the attribute `what` of op `op`, is a value of
/// `dtype` (`Scalar::fits`: integers whole, finite and in range). The
/// public constructors convert exactly already; this is what holds a
/// graph read from an export to the same rule, since lowering would
/// `cast` an i32 fill of NaN to 0 without a word.
pub(crate) fn check_attr_value(
    op: &str,
    what: &str,
    value: crate::ir::Scalar,
    dtype: DType,
) -> Result<()> {
    if !value.fits(dtype) {
        return Err(Error::invalid(
            op,
            format!(
                "{what} {value} is not a {dtype} value (integers must be whole, finite and in range)"
            ),
        ));
    }
    Ok(())
}

/// Checks the operand count.
pub(crate) fn expect_arity(op: &str, inputs: &[TensorType], n: usize) -> Result<()> {
    if inputs.len() != n {
        return Err(Error::invalid(
            op,
            format!("expects {n} operand(s), got {}", inputs.len()),
        ));
    }
    Ok(())
}

/// Checks that every operand has the dtype of the first (TensorFlow does
/// not promote types between tensors).
pub(crate) fn same_dtype(op: &str, inputs: &[TensorType]) -> Result<DType> {
    let first = inputs[0].dtype;
    for (i, t) in inputs.iter().enumerate().skip(1) {
        if t.dtype != first {
            return Err(Error::invalid(
                op,
                format!(
                    "cannot compute {op} as input #{i}(zero-based) was expected to be a {first} tensor \
                     but is a {} tensor (operands: {}); as in TensorFlow, dtypes are not \
                     promoted: cast one operand to the other's dtype first (e.g. \
                     `.cast(DType::{first:?})`)",
                    t.dtype,
                    describe(inputs)
                ),
            ));
        }
    }
    Ok(first)
}

/// Checks that `dtype` is accepted by the op.
pub(crate) fn check_dtype(op: &str, dtype: DType, ok: bool, wanted: &str) -> Result<()> {
    dtype.check_compilable()?;
    if !ok {
        return Err(Error::invalid(
            op,
            format!("expects {wanted} operands, got {dtype}"),
        ));
    }
    Ok(())
}

/// Errors unless an op's index operand has an integer `dtype`: int32 or
/// int64 for ops that lower to XLA's gather and scatter (`int32_or_int64`),
/// any integer otherwise. Its own check, not [`check_dtype`]'s, so the
/// message names the indices and the dtypes they may have.
pub(crate) fn check_index_dtype(op: &str, dtype: DType, int32_or_int64: bool) -> Result<()> {
    dtype.check_compilable()?;
    let (ok, which) = match int32_or_int64 {
        true => (
            matches!(dtype, DType::I32 | DType::I64),
            " (int32 or int64)",
        ),
        false => (dtype.is_int(), ""),
    };
    if !ok {
        return Err(Error::invalid(
            op,
            format!("indices must be an integer dtype{which}, got {dtype}"),
        ));
    }
    Ok(())
}

/// `f32(2, 3), f32(3,)` for error messages.
pub(crate) fn describe(inputs: &[TensorType]) -> String {
    inputs
        .iter()
        .map(|t| t.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// Normalises a possibly negative axis against `rank`.
pub(crate) fn normalize_axis(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    if axis < -r || axis >= r {
        return Err(Error::invalid(
            op,
            format!("axis {axis} is out of range for a tensor of rank {rank}"),
        ));
    }
    Ok(if axis < 0 {
        (axis + r) as usize
    } else {
        axis as usize
    })
}

// ---- helpers shared by gradient rules ----

/// Sums a gradient over the axes along which `target` was broadcast, so
/// it has `target`'s shape again (NumPy broadcasting in reverse).
pub(crate) fn unbroadcast(g: &Tensor, target: &Tensor) -> Result<Tensor> {
    let (gs, ts) = (g.shape(), target.shape());
    if gs == ts {
        return Ok(g.clone());
    }
    // The target's shape says which axes were broadcast (its missing
    // leading axes and its size-1 axes); the gradient's own dimensions may
    // be unknown while tracing.
    let (Some(gd), Some(td)) = (gs.dims(), ts.as_known()) else {
        return Err(Error::invalid(
            "gradient",
            format!(
                "cannot reduce a gradient of shape {gs} to the broadcast operand's shape {ts}: shapes must be known"
            ),
        ));
    };
    let lead = gd.len() - td.len();
    let mut axes: Vec<i64> = (0..lead as i64).collect();
    axes.extend(
        (0..td.len())
            .filter(|&i| td[i] == 1 && gd[lead + i] != Some(1))
            .map(|i| (lead + i) as i64),
    );
    let summed = if axes.is_empty() {
        g.clone()
    } else {
        g.reduce_sum(&axes, false)?
    };
    if summed.shape() == ts {
        return Ok(summed);
    }
    summed.reshape(&td)
}

/// The gradient for a single-output op: the incoming gradient, or zeros.
pub(crate) fn grad_or_zeros(grads: &[Option<Tensor>], output: &Tensor) -> Result<Tensor> {
    match &grads[0] {
        Some(g) => Ok(g.clone()),
        None => output.zeros_like(),
    }
}
