//! `take_along_axis` (`np.take_along_axis`) as its own op, and the
//! scatter-add that is its gradient. Every dimension but `axis` is a
//! batching dimension of the StableHLO gather (`operand_batching_dims`),
//! so XLA's partitioner keeps a batch-split gather on each device. The
//! same gather written with explicit coordinates (`gather_nd` of iotas
//! and the indices) makes it all-gather the indices and all-reduce the
//! result: measured on the data-parallel step's cross-entropy.
//! Out-of-range indices follow XLA, as `gather_nd` does: a gather clamps
//! into range, a scatter drops the update.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor`.

use super::batching;
use super::{OpDef, check_index_dtype, describe, expect_arity};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Dim, Scalar, Shape, TensorType, merge_shapes};
use crate::lower::{Emitter, GatherDims, ScatterDims, Val};
use crate::tensor::{Tensor, apply1};

/// `out[..., i, ...] = x[..., idx[..., i, ...], ...]` along `axis`;
/// inputs `[x, idx]`, `idx` shaped like `x` except along `axis`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TakeAlongAxis {
    pub axis: usize,
}

/// `x` with `updates[..., i, ...]` added at `x[..., idx[..., i, ...], ...]`
/// along `axis`: the gradient of [`TakeAlongAxis`]. Inputs
/// `[x, idx, updates]`, `updates` shaped like `idx`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddAlongAxis {
    pub axis: usize,
}

/// The shared shape rule: `x` and `idx` of one known rank, equal off
/// `axis`; a dimension known on one side only is taken from it (unknown
/// dimensions come from functions traced for any batch, and are known
/// again when the program is specialized). Returns the result's shape,
/// `idx`'s.
fn check_along(op: &str, axis: usize, x: &TensorType, idx: &TensorType) -> Result<Shape> {
    check_index_dtype(op, idx.dtype, true)?;
    let (Some(xd), Some(id)) = (x.shape.dims(), idx.shape.dims()) else {
        return Err(Error::invalid(
            op,
            format!("needs known ranks, got {x} and {idx}"),
        ));
    };
    let compatible = |a: &Dim, b: &Dim| a.is_none() || b.is_none() || a == b;
    let fits = xd.len() == id.len()
        && axis < xd.len()
        && (0..xd.len()).all(|d| d == axis || compatible(&xd[d], &id[d]));
    if !fits {
        return Err(Error::invalid(
            op,
            format!("indices {idx} must have the shape of {x} except along axis {axis}"),
        ));
    }
    if xd[axis] == Some(0) && idx.shape.num_elements() != Some(0) {
        return Err(Error::invalid(
            op,
            format!("cannot take from an empty dimension (operands: {x}, {idx})"),
        ));
    }
    let dims = (0..id.len())
        .map(|d| if d == axis { id[d] } else { id[d].or(xd[d]) })
        .collect();
    Ok(Shape::from_dims(dims))
}

/// Every dimension but `axis`, batching the gather or scatter.
fn batching(rank: usize, axis: usize) -> Vec<i64> {
    (0..rank as i64).filter(|&d| d != axis as i64).collect()
}

impl OpDef for TakeAlongAxis {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let both = batching::all_materialized(inputs, batched, size);
        let op = TakeAlongAxis {
            axis: self.axis + 1,
        };
        Some(both.and_then(|x| batching::all_batched(op, &x)))
    }

    fn name(&self) -> &'static str {
        "take_along_axis"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 2)?;
        inputs[0].dtype.check_compilable()?;
        let shape = check_along(self.name(), self.axis, &inputs[0], &inputs[1])?;
        Ok(vec![TensorType::new(inputs[0].dtype, shape)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        if outputs[0].num_elements() == 0 {
            return Ok(vec![cx.constant(Scalar::I64(0), outputs[0].clone())]);
        }
        let rank = inputs[0].ty.rank();
        let batch = batching(rank, self.axis);
        let dims = GatherDims {
            collapsed_slice_dims: vec![self.axis as i64],
            operand_batching_dims: batch.clone(),
            start_indices_batching_dims: batch,
            start_index_map: vec![self.axis as i64],
            index_vector_dim: rank as i64,
            slice_sizes: vec![1; rank],
            ..Default::default()
        };
        Ok(vec![cx.gather(
            &inputs[0],
            &inputs[1],
            &dims,
            outputs[0].clone(),
        )])
    }

    /// The gradient added back where each element was taken from.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (x, idx) = (&inputs[0], &inputs[1]);
        if !x.dtype().is_inexact() {
            return Ok(vec![None, None]);
        }
        let g = super::grad_or_zeros(grads, &outputs[0])?;
        let dx = apply1(
            AddAlongAxis { axis: self.axis },
            &[&x.zeros_like()?, idx, &g],
        )?;
        Ok(vec![Some(dx), None])
    }
}

impl OpDef for AddAlongAxis {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let all = batching::all_materialized(inputs, batched, size);
        let op = AddAlongAxis {
            axis: self.axis + 1,
        };
        Some(all.and_then(|x| batching::all_batched(op, &x)))
    }

    fn name(&self) -> &'static str {
        "add_along_axis"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 3)?;
        let (x, idx, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        let shape = check_along(self.name(), self.axis, x, idx)?;
        if updates.dtype != x.dtype || merge_shapes(&updates.shape, &shape).is_none() {
            return Err(Error::invalid(
                self.name(),
                format!(
                    "updates must be {} (operands: {})",
                    TensorType::new(x.dtype, shape),
                    describe(inputs)
                ),
            ));
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        if inputs[1].ty.num_elements() == 0 {
            return Ok(vec![inputs[0].clone()]);
        }
        let rank = inputs[0].ty.rank();
        let batch = batching(rank, self.axis);
        let dims = ScatterDims {
            inserted_window_dims: vec![self.axis as i64],
            input_batching_dims: batch.clone(),
            scatter_indices_batching_dims: batch,
            scatter_dims_to_operand_dims: vec![self.axis as i64],
            index_vector_dim: rank as i64,
            ..Default::default()
        };
        let out = cx.scatter(
            &inputs[0],
            &inputs[1],
            &inputs[2],
            &dims,
            Some("add"),
            outputs[0].clone(),
        )?;
        Ok(vec![out])
    }

    /// `x` passes its gradient through; `updates` get theirs from where
    /// they were added.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let g = super::grad_or_zeros(grads, &outputs[0])?;
        let du = apply1(TakeAlongAxis { axis: self.axis }, &[&g, &inputs[1]])?;
        Ok(vec![Some(g), None, Some(du)])
    }
}
