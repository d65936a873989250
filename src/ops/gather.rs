//! Layer: ops. Picking by index: `gather` (`tf.gather`) and `one_hot`.
//! Split from `ops::shape` (which re-exports both); imports its helpers
//! and the shared op plumbing of `ops`.

use super::batching;
use super::grad_or_zeros;
use super::shape::{typed, unknown_rank};
use super::{OpDef, check_index_dtype, describe, expect_arity, normalize_axis};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Scalar, TensorType};
use crate::lower::{Cmp, Emitter, GatherDims, Val};
use crate::tensor::{Tensor, apply1};

/// `tf.gather(params, indices, axis)`: picks slices of `params` along
/// `axis` at `indices` (int32 or int64, any rank). The result shape is
/// `params[:axis] + indices.shape + params[axis+1:]`.
///
/// Out-of-range indices are clamped into range by XLA (a negative index
/// reads slice 0, a too-large one the last slice), where TensorFlow raises
/// on CPU and returns zeros on GPU: checking would need a device-to-host
/// round trip or a data-dependent error, which XLA programs cannot raise.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Gather {
    pub axis: i64,
}

impl OpDef for Gather {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let rank = inputs[0].rank() - usize::from(batched[0]);
        let axis = if self.axis < 0 {
            self.axis + rank as i64
        } else {
            self.axis
        };
        match (batched[0], batched[1]) {
            // The table's batch axis comes before the gathered one.
            (true, false) => Some(batching::all_batched(Gather { axis: axis + 1 }, inputs)),
            // The indices' batch axis lands where the gathered axis was.
            (false, true) => Some(batching::front_at(
                batching::all_batched(Gather { axis }, inputs),
                axis as usize,
            )),
            (true, true) => Some(gather_per_example(
                &inputs[0],
                &inputs[1],
                axis as usize,
                size,
            )),
            (false, false) => None,
        }
    }

    fn name(&self) -> &'static str {
        "gather"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("gather", inputs, 2)?;
        let (params, indices) = (&inputs[0], &inputs[1]);
        params.dtype.check_compilable()?;
        check_index_dtype("gather", indices.dtype, true)?;
        let Some(p) = params.shape.dims() else {
            return Ok(unknown_rank(params.dtype));
        };
        let axis = normalize_axis("gather", self.axis, p.len())?;
        let Some(i) = indices.shape.dims() else {
            return Ok(unknown_rank(params.dtype));
        };
        if p[axis] == Some(0) && indices.shape.num_elements() != Some(0) {
            return Err(Error::invalid(
                "gather",
                format!(
                    "cannot gather from axis {axis} of size 0 (operands: {})",
                    describe(inputs)
                ),
            ));
        }
        let out = [&p[..axis], i, &p[axis + 1..]].concat();
        Ok(typed(params.dtype, out))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (params, indices) = (&inputs[0], &inputs[1]);
        if outputs[0].num_elements() == 0 {
            // XLA rejects a gather whose slice is larger than an empty axis,
            // even with no indices; an empty result needs no gather at all.
            return Ok(vec![cx.constant(Scalar::I64(0), outputs[0].clone())]);
        }
        let (r, q) = (params.ty.rank() as i64, indices.ty.rank() as i64);
        let axis = normalize_axis("gather", self.axis, r as usize)? as i64;
        let mut slice_sizes = params.ty.dims.clone();
        slice_sizes[axis as usize] = 1;
        let dims = GatherDims {
            offset_dims: (0..axis).chain(axis + q..r - 1 + q).collect(),
            collapsed_slice_dims: vec![axis],
            start_index_map: vec![axis],
            index_vector_dim: q,
            slice_sizes,
            ..Default::default()
        };
        Ok(vec![cx.gather(params, indices, &dims, outputs[0].clone())])
    }

    /// Scatter-add (a segment sum) of the gradient back to the gathered
    /// rows: repeated rows get both, out-of-range (clamped) reads none.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (x, indices) = (&inputs[0], &inputs[1]);
        if !x.dtype().is_inexact() {
            return Ok(vec![None, None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let (xd, id) = (x.dims(), indices.dims());
        let axis = super::normalize_axis("gradient", self.axis, xd.len())?;
        let (k, n) = (id.iter().product::<i64>(), xd[axis]);
        // Bring the index dims of g to the front: [I..., a..., b...].
        let gr = g.rank();
        let mut perm: Vec<i64> = (axis..axis + id.len()).map(|d| d as i64).collect();
        perm.extend(
            (0..gr)
                .filter(|d| *d < axis || *d >= axis + id.len())
                .map(|d| d as i64),
        );
        let gt = g.transpose(&perm)?;
        let rest: Vec<i64> = gt.dims()[id.len()..].to_vec();
        let flat = gt.reshape(&[k, rest.iter().product()])?;
        let scattered = flat.unsorted_segment_sum(&indices.reshape(&[k])?, n)?; // [n, rest]
        let mut moved = vec![n];
        moved.extend(&rest);
        let dx_axis_first = scattered.reshape(&moved)?;
        // Move the axis back into place.
        let r = xd.len();
        let back: Vec<i64> = (0..r)
            .map(|d| {
                if d < axis {
                    d as i64 + 1
                } else if d == axis {
                    0
                } else {
                    d as i64
                }
            })
            .collect();
        Ok(vec![Some(dx_axis_first.transpose(&back)?), None])
    }
}

// ---------------------------------------------------------------- one hot

/// `tf.one_hot` with `axis=-1`: a new last dimension of size `depth`
/// holding `on_value` at each index and `off_value` elsewhere. Indices
/// outside `0..depth` (negative ones included) give an all-off row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OneHot {
    pub depth: i64,
    pub on_value: Scalar,
    pub off_value: Scalar,
    pub dtype: DType,
}

impl OpDef for OneHot {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // The new axis goes last, after the batch axis and the example's.
        Some(batching::all_batched(self.clone(), inputs))
    }

    fn name(&self) -> &'static str {
        "one_hot"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("one_hot", inputs, 1)?;
        let x = &inputs[0];
        check_index_dtype("one_hot", x.dtype, false)?;
        self.dtype.check_compilable()?;
        super::check_attr_value("one_hot", "on_value", self.on_value, self.dtype)?;
        super::check_attr_value("one_hot", "off_value", self.off_value, self.dtype)?;
        if self.depth < 0 {
            return Err(Error::invalid(
                "one_hot",
                format!("depth must be >= 0, got {}", self.depth),
            ));
        }
        let Some(dims) = x.shape.dims() else {
            return Ok(unknown_rank(self.dtype));
        };
        let mut out = dims.to_vec();
        out.push(Some(self.depth));
        Ok(typed(self.dtype, out))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let out = &outputs[0];
        let q = x.ty.rank() as i64;
        let iota = cx.iota(out.with_dtype(x.ty.dtype), q);
        let map: Vec<i64> = (0..q).collect();
        let spread = cx.broadcast_in_dim(x, &map, &out.dims);
        let hit = cx.compare(Cmp::Eq, &spread, &iota);
        let on = cx.constant(self.on_value, out.clone());
        let off = cx.constant(self.off_value, out.clone());
        Ok(vec![cx.select(&hit, &on, &off)])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
}

/// The rule of `Gather` for a table and indices per example (`[B, ...]`
/// both; `axis` the example's gathered axis): the table's gathered axis
/// moved next to the batch axis, each index prefixed with its example's
/// (one `gather_nd`, which clamps as `gather` does), and the table's
/// other axes put back around the indices' (`[B, pre, I, post]`).
fn gather_per_example(
    table: &Tensor,
    indices: &Tensor,
    axis: usize,
    size: i64,
) -> Result<Vec<(Tensor, bool)>> {
    let rank = table.rank();
    let gathered = axis as i64 + 1;
    let mut perm = vec![0, gathered];
    perm.extend((1..rank as i64).filter(|&d| d != gathered));
    let moved = table.transpose(&perm)?;
    let idx = batching::with_batch_coordinate(&indices.expand_dims(-1)?, true, size)?;
    let got = moved.gather_nd(&idx)?; // [B, I..., pre..., post...]
    let q = indices.rank() as i64 - 1;
    let (pre, post) = (axis as i64, rank as i64 - 2 - axis as i64);
    let mut order = vec![0];
    order.extend(1 + q..1 + q + pre);
    order.extend(1..1 + q);
    order.extend(1 + q + pre..1 + q + pre + post);
    Ok(vec![(got.transpose(&order)?, true)])
}

// -------------------------------------------------------- tensor methods

/// **Indexing**: picking along an axis by index, and one-hot encoding.
impl Tensor {
    /// `tf.gather(self, indices, axis)`; out-of-range indices are clamped
    /// (see [`Gather`]).
    #[track_caller]
    pub fn gather(&self, indices: &Tensor, axis: i64) -> Result<Tensor> {
        apply1(Gather { axis }, &[self, indices])
    }

    /// `tf.one_hot(self, depth, on_value, off_value, axis=-1, dtype)` on
    /// integer indices.
    #[track_caller]
    pub fn one_hot(
        &self,
        depth: i64,
        on_value: f64,
        off_value: f64,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = OneHot {
            depth,
            on_value: Scalar::F64(on_value),
            off_value: Scalar::F64(off_value),
            dtype,
        };
        apply1(op, &[self])
    }
}
