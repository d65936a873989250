//! N-dimensional gather and scatter in TensorFlow's forms:
//! `gather_nd` and `tensor_scatter_nd_{update,add,min,max}`, each other's
//! gradients, and the helpers built on them: `take`, `take_along_axis`,
//! `gather` with `batch_dims`, `unsorted_segment_{sum,mean,max,min}`.
//!
//! Indices have shape `[..., K]`: each row of `K` integers picks an
//! element (or a slice, when `K` is below the rank) of the operand.
//! Out-of-range indices follow XLA, not TensorFlow (which raises on CPU):
//! a gather clamps each start index into range, so it reads the nearest
//! valid slice; a scatter drops an update whose index is out of range.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor`, and
//! `ops::elementwise` (`where_`, for negative indices).

use super::batching;
use super::elementwise::where_;
use super::reduce::{highest, lowest};
use super::{OpDef, check_dtype, check_index_dtype, describe, expect_arity};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Scalar, Shape, TensorType};
use crate::lower::{Emitter, GatherDims, ScatterDims, Val};
use crate::tensor::{Tensor, apply1};

fn check_indices(op: &str, indices: &TensorType) -> Result<()> {
    check_index_dtype(op, indices.dtype, true)
}

/// `K`, the length of each index row, and the batch dims before it.
fn index_rows<'a>(
    op: &str,
    indices: &'a [Dim],
    inputs: &[TensorType],
) -> Result<(&'a [Dim], usize)> {
    let Some((k, batch)) = indices.split_last() else {
        return Err(Error::invalid(
            op,
            format!("indices need rank >= 1 (operands: {})", describe(inputs)),
        ));
    };
    let k = k.ok_or_else(|| {
        Error::invalid(
            op,
            format!(
                "the index depth must be known (operands: {})",
                describe(inputs)
            ),
        )
    })?;
    Ok((batch, k as usize))
}

/// `tf.gather_nd`: `out[b...] = params[indices[b...]]`, a slice of
/// `params.shape[K:]` per index row.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct GatherNd;

impl OpDef for GatherNd {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        if !batched[0] {
            // Shared params: the indices' batch axis leads the output.
            return Some(batching::all_batched(GatherNd, inputs));
        }
        let idx = batching::with_batch_coordinate(&inputs[1], batched[1], size);
        Some(idx.and_then(|idx| batching::all_batched(GatherNd, &[inputs[0].clone(), idx])))
    }

    fn name(&self) -> &'static str {
        "gather_nd"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("gather_nd", inputs, 2)?;
        let (params, indices) = (&inputs[0], &inputs[1]);
        params.dtype.check_compilable()?;
        check_indices("gather_nd", indices)?;
        let (Some(p), Some(i)) = (params.shape.dims(), indices.shape.dims()) else {
            return Ok(vec![TensorType::new(params.dtype, Shape::unknown_rank())]);
        };
        let (batch, k) = index_rows("gather_nd", i, inputs)?;
        if k > p.len() {
            return Err(Error::invalid(
                "gather_nd",
                format!(
                    "index rows of {k} exceed the params' rank {} (operands: {})",
                    p.len(),
                    describe(inputs)
                ),
            ));
        }
        if p[..k].contains(&Some(0)) && indices.shape.num_elements() != Some(0) {
            return Err(Error::invalid(
                "gather_nd",
                format!(
                    "cannot gather from an empty dimension (operands: {})",
                    describe(inputs)
                ),
            ));
        }
        let out = [batch, &p[k..]].concat();
        Ok(vec![TensorType::new(params.dtype, Shape::from_dims(out))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (params, indices) = (&inputs[0], &inputs[1]);
        if outputs[0].num_elements() == 0 {
            return Ok(vec![cx.constant(Scalar::I64(0), outputs[0].clone())]);
        }
        let r = params.ty.rank() as i64;
        let q = indices.ty.rank() as i64;
        let k = indices.ty.dims[q as usize - 1];
        let b = q - 1;
        let mut slice_sizes = params.ty.dims.clone();
        slice_sizes[..k as usize].iter_mut().for_each(|s| *s = 1);
        let dims = GatherDims {
            offset_dims: (b..b + r - k).collect(),
            collapsed_slice_dims: (0..k).collect(),
            start_index_map: (0..k).collect(),
            index_vector_dim: b,
            slice_sizes,
            ..Default::default()
        };
        Ok(vec![cx.gather(params, indices, &dims, outputs[0].clone())])
    }

    /// The scatter-add of the gradient to the gathered positions.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (params, indices) = (&inputs[0], &inputs[1]);
        if !params.dtype().is_inexact() {
            return Ok(vec![None, None]);
        }
        let g = super::grad_or_zeros(grads, &outputs[0])?;
        let dx = params.zeros_like()?.tensor_scatter_nd_add(indices, &g)?;
        Ok(vec![Some(dx), None])
    }
}

/// How a scatter combines an update with what is there.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ScatterKind {
    Update,
    Add,
    Min,
    Max,
}

/// `tf.tensor_scatter_nd_*`: `tensor` with `updates[b...]` combined into
/// the positions `indices[b...]` name. Inputs `[tensor, indices, updates]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScatterNd {
    pub kind: ScatterKind,
}

impl OpDef for ScatterNd {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let run = || -> Result<Vec<(Tensor, bool)>> {
            let t = batching::materialized(&inputs[0], batched[0], size)?;
            let idx = batching::with_batch_coordinate(&inputs[1], batched[1], size)?;
            let updates = batching::materialized(&inputs[2], batched[2], size)?;
            batching::all_batched(self.clone(), &[t, idx, updates])
        };
        Some(run())
    }

    fn name(&self) -> &'static str {
        "tensor_scatter_nd"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let op = "tensor_scatter_nd";
        expect_arity(op, inputs, 3)?;
        let (t, indices, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        t.dtype.check_compilable()?;
        check_indices(op, indices)?;
        if updates.dtype != t.dtype {
            return Err(Error::invalid(
                op,
                format!(
                    "updates must have the tensor's dtype (operands: {})",
                    describe(inputs)
                ),
            ));
        }
        if self.kind != ScatterKind::Update {
            check_dtype(op, t.dtype, t.dtype.is_numeric(), "numeric")?;
        }
        let (Some(p), Some(i)) = (t.shape.dims(), indices.shape.dims()) else {
            return Ok(vec![t.clone()]);
        };
        let (batch, k) = index_rows(op, i, inputs)?;
        if k > p.len() {
            return Err(Error::invalid(
                op,
                format!(
                    "index rows of {k} exceed the tensor's rank {} (operands: {})",
                    p.len(),
                    describe(inputs)
                ),
            ));
        }
        let want = Shape::from_dims([batch, &p[k..]].concat());
        if !crate::ir::shape_is_subtype(&updates.shape, &want)
            && !crate::ir::shape_is_subtype(&want, &updates.shape)
        {
            return Err(Error::invalid(
                op,
                format!(
                    "updates must have shape {want} (operands: {})",
                    describe(inputs)
                ),
            ));
        }
        Ok(vec![t.clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (t, indices, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        if indices.ty.num_elements() == 0 {
            return Ok(vec![t.clone()]);
        }
        let r = t.ty.rank() as i64;
        let q = indices.ty.rank() as i64;
        let k = indices.ty.dims[q as usize - 1];
        let b = q - 1;
        let dims = ScatterDims {
            update_window_dims: (b..b + r - k).collect(),
            inserted_window_dims: (0..k).collect(),
            scatter_dims_to_operand_dims: (0..k).collect(),
            index_vector_dim: b,
            ..Default::default()
        };
        let combiner = match self.kind {
            ScatterKind::Update => None,
            ScatterKind::Add => Some("add"),
            ScatterKind::Min => Some("minimum"),
            ScatterKind::Max => Some("maximum"),
        };
        Ok(vec![cx.scatter(
            t,
            indices,
            updates,
            &dims,
            combiner,
            outputs[0].clone(),
        )?])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (t, indices, updates) = (&inputs[0], &inputs[1], &inputs[2]);
        if !t.dtype().is_inexact() {
            return Ok(vec![None, None, None]);
        }
        let g = super::grad_or_zeros(grads, &outputs[0])?;
        let (dt, du) = match self.kind {
            ScatterKind::Add => (g.clone(), g.gather_nd(indices)?),
            // Overwritten positions pass nothing back to the tensor.
            ScatterKind::Update => (
                g.tensor_scatter_nd_update(indices, &updates.zeros_like()?)?,
                g.gather_nd(indices)?,
            ),
            // Min/max: the gradient goes to whichever values won, split
            // evenly between the tied ones (TensorFlow's and JAX's rule), so
            // each output's gradient is passed back once in all.
            ScatterKind::Min | ScatterKind::Max => {
                let out = &outputs[0];
                let kept = out.eq(t)?.cast(t.dtype())?;
                let won = out.gather_nd(indices)?.eq(updates)?.cast(t.dtype())?;
                let ties = kept
                    .tensor_scatter_nd_add(indices, &won)?
                    .maximum_scalar(1.0)?;
                let shared = g.div(&ties)?;
                (shared.mul(&kept)?, shared.gather_nd(indices)?.mul(&won)?)
            }
        };
        Ok(vec![Some(dt), None, Some(du)])
    }
}

/// `idx` with each negative index `i` read as `i + size`, `size` the
/// length of `x`'s `axis` (NumPy's rule for one wrap). A traced axis of
/// unknown length is measured on the device.
fn from_the_end(idx: &Tensor, x: &Tensor, axis: usize) -> Result<Tensor> {
    if !idx.dtype().is_signed_int() {
        return Ok(idx.clone());
    }
    let size = match x.shape().dims().and_then(|d| d[axis]) {
        Some(n) => Tensor::fill(&[], n, idx.dtype())?,
        // Ones summed along the axis: every entry is its length.
        None => x
            .fill_like(1)?
            .cast(idx.dtype())?
            .reduce_sum(&[axis as i64], false)?
            .reduce_max(&[], false)?,
    };
    where_(&idx.lt_scalar(0)?, &idx.add(&size)?, idx)
}

fn scatter(t: &Tensor, kind: ScatterKind, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
    apply1(ScatterNd { kind }, &[t, indices, updates])
}

/// `[d0, ..., dn-1]`-shaped index rows `(i0, ..., i_{axis-1}, idx, ...)`:
/// the coordinates of every element of `idx` with `idx` at `axis`.
pub(crate) fn coordinates(idx: &Tensor, axis: usize) -> Result<Tensor> {
    let dims = idx.dims();
    let itype = idx.dtype();
    let mut columns = Vec::with_capacity(dims.len());
    for d in 0..dims.len() {
        let column = if d == axis {
            idx.clone()
        } else {
            Tensor::iota(&dims, d as i64, itype)?
        };
        columns.push(column.expand_dims(-1)?);
    }
    Tensor::concat(&columns, -1)
}

fn known_dims(t: &Tensor, op: &str) -> Result<Vec<i64>> {
    t.shape()
        .as_known()
        .ok_or_else(|| Error::invalid(op, format!("needs a known shape, got {}", t.tensor_type())))
}

fn axis_index(op: &str, axis: i64, rank: usize) -> Result<usize> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if !(0..r).contains(&a) {
        return Err(Error::invalid(
            op,
            format!("axis {axis} is out of range for rank {rank}"),
        ));
    }
    Ok(a as usize)
}

/// **Indexing**: gathers by index lists, scatters, and segment
/// reductions.
impl Tensor {
    /// `tf.gather_nd`.
    #[track_caller]
    pub fn gather_nd(&self, indices: &Tensor) -> Result<Tensor> {
        apply1(GatherNd, &[self, indices])
    }

    /// `tf.tensor_scatter_nd_update`.
    #[track_caller]
    pub fn tensor_scatter_nd_update(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        scatter(self, ScatterKind::Update, indices, updates)
    }

    /// `tf.tensor_scatter_nd_add` (repeated indices add up).
    #[track_caller]
    pub fn tensor_scatter_nd_add(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        scatter(self, ScatterKind::Add, indices, updates)
    }

    /// `tf.tensor_scatter_nd_min`.
    #[track_caller]
    pub fn tensor_scatter_nd_min(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        scatter(self, ScatterKind::Min, indices, updates)
    }

    /// `tf.tensor_scatter_nd_max`.
    #[track_caller]
    pub fn tensor_scatter_nd_max(&self, indices: &Tensor, updates: &Tensor) -> Result<Tensor> {
        scatter(self, ScatterKind::Max, indices, updates)
    }

    /// `np.take_along_axis`: `out[..., i, ...] = self[..., idx[..., i, ...], ...]`
    /// along `axis`; `idx` has the rank of `self` (e.g. the log-probability
    /// of each row's label, without a one-hot). A negative index counts
    /// from the end, as in NumPy and JAX (`-1` is the last element);
    /// indices still out of range are clamped into it, as XLA's gather
    /// does (NumPy raises, JAX's default fills with NaN).
    #[track_caller]
    pub fn take_along_axis(&self, idx: &Tensor, axis: i64) -> Result<Tensor> {
        let a = self.along_axis(axis)?;
        let idx = from_the_end(idx, self, a)?;
        apply1(super::take_along::TakeAlongAxis { axis: a }, &[self, &idx])
    }

    /// [`take_along_axis`](Tensor::take_along_axis) for indices the caller
    /// knows are in `0..size` (sorting orders, pivots, labels), without
    /// the negative-index wrap, so their programs hold the gather alone.
    #[track_caller]
    pub(crate) fn gather_along_axis(&self, idx: &Tensor, axis: i64) -> Result<Tensor> {
        let a = self.along_axis(axis)?;
        apply1(super::take_along::TakeAlongAxis { axis: a }, &[self, idx])
    }

    /// `axis` of this tensor, checked: the op's shape rule checks the two
    /// shapes (unknown batch dimensions included), this only the axis.
    fn along_axis(&self, axis: i64) -> Result<usize> {
        let rank = self.shape().rank().ok_or_else(|| {
            Error::invalid(
                "take_along_axis",
                format!("needs a known rank, got {}", self.tensor_type()),
            )
        })?;
        axis_index("take_along_axis", axis, rank)
    }

    /// `np.take`: elements of the flattened tensor at `indices`. A
    /// negative index counts from the end, as in NumPy and JAX; indices
    /// still out of range are clamped into it (see
    /// [`take_along_axis`](Tensor::take_along_axis)).
    #[track_caller]
    pub fn take(&self, indices: &Tensor) -> Result<Tensor> {
        let n: i64 = known_dims(self, "take")?.iter().product();
        let flat = self.reshape(&[n])?;
        flat.gather(&from_the_end(indices, &flat, 0)?, 0)
    }

    /// `tf.gather` with `batch_dims`: the first `batch_dims` dimensions of
    /// `self` and `indices` are batch dimensions, gathered pairwise along
    /// `axis` (which counts from the start of `self`, >= `batch_dims`).
    #[track_caller]
    pub fn gather_batched(&self, indices: &Tensor, axis: i64, batch_dims: usize) -> Result<Tensor> {
        if batch_dims == 0 {
            return self.gather(indices, axis);
        }
        let dims = known_dims(self, "gather")?;
        let idims = known_dims(indices, "gather")?;
        let a = axis_index("gather", axis, dims.len())?;
        if a < batch_dims || idims.len() < batch_dims || idims[..batch_dims] != dims[..batch_dims] {
            return Err(Error::invalid(
                "gather",
                format!(
                    "batch_dims {batch_dims} needs matching leading dimensions and axis >= \
                     batch_dims; got params {} and indices {}, axis {axis}",
                    self.tensor_type(),
                    indices.tensor_type()
                ),
            ));
        }
        // Move `axis` right after the batch dimensions, then gather with
        // index rows (batch coordinates..., index).
        let mut perm: Vec<i64> = (0..dims.len() as i64).filter(|&d| d != a as i64).collect();
        perm.insert(batch_dims, a as i64);
        let moved = self.transpose(&perm)?;
        let itype = indices.dtype();
        let mut columns = Vec::new();
        for d in 0..batch_dims {
            columns.push(Tensor::iota(&idims, d as i64, itype)?.expand_dims(-1)?);
        }
        columns.push(indices.expand_dims(-1)?);
        let rows = Tensor::concat(&columns, -1)?;
        // Result: [batch.., index dims.., the rest of `moved` in order].
        let out = moved.gather_nd(&rows)?;
        // Put the remaining params dims back around the index dims, as
        // tf.gather orders them: params[:axis] + indices[batch:] + params[axis+1:].
        let before = a - batch_dims; // params dims between batch and axis
        if before == 0 {
            return Ok(out);
        }
        let q = idims.len() - batch_dims;
        let r = out.dims().len();
        let mut order: Vec<i64> = (0..batch_dims as i64).collect();
        order.extend((batch_dims + q..batch_dims + q + before).map(|d| d as i64));
        order.extend((batch_dims..batch_dims + q).map(|d| d as i64));
        order.extend((batch_dims + q + before..r).map(|d| d as i64));
        out.transpose(&order)
    }

    /// `tf.math.unsorted_segment_sum`: rows of `self` summed into
    /// `num_segments` segments by `segment_ids` (ids out of range are
    /// dropped, as TensorFlow drops negative ones).
    #[track_caller]
    pub fn unsorted_segment_sum(&self, segment_ids: &Tensor, num_segments: i64) -> Result<Tensor> {
        self.segments(segment_ids, num_segments, ScatterKind::Add, Scalar::I64(0))
    }

    /// `tf.math.unsorted_segment_max` (empty segments hold the dtype's
    /// lowest value, as TensorFlow's).
    #[track_caller]
    pub fn unsorted_segment_max(&self, segment_ids: &Tensor, num_segments: i64) -> Result<Tensor> {
        self.segments(
            segment_ids,
            num_segments,
            ScatterKind::Max,
            lowest(self.dtype()),
        )
    }

    /// `tf.math.unsorted_segment_min` (empty segments hold the dtype's
    /// highest value, as TensorFlow's).
    #[track_caller]
    pub fn unsorted_segment_min(&self, segment_ids: &Tensor, num_segments: i64) -> Result<Tensor> {
        self.segments(
            segment_ids,
            num_segments,
            ScatterKind::Min,
            highest(self.dtype()),
        )
    }

    /// `tf.math.unsorted_segment_mean` (empty segments are zero).
    #[track_caller]
    pub fn unsorted_segment_mean(&self, segment_ids: &Tensor, num_segments: i64) -> Result<Tensor> {
        let sums = self.unsorted_segment_sum(segment_ids, num_segments)?;
        let counts = segment_counts(segment_ids, num_segments, self.dtype(), sums.rank())?;
        sums.div(&counts.maximum_scalar(1.0)?)
    }

    /// `tf.math.segment_sum`: rows of `self` summed by sorted
    /// `segment_ids` (1-D, non-decreasing, non-negative), into
    /// `segment_ids[-1] + 1` segments; the ids' values size the result, so
    /// they must be concrete (inside a traced function, use
    /// [`unsorted_segment_sum`](Tensor::unsorted_segment_sum) with a
    /// number of segments).
    #[track_caller]
    pub fn segment_sum(&self, segment_ids: &Tensor) -> Result<Tensor> {
        let n = sorted_segment_count("segment_sum", segment_ids)?;
        self.unsorted_segment_sum(segment_ids, n)
    }

    /// `tf.math.segment_mean` (see [`segment_sum`](Tensor::segment_sum));
    /// empty segments are zero.
    #[track_caller]
    pub fn segment_mean(&self, segment_ids: &Tensor) -> Result<Tensor> {
        let n = sorted_segment_count("segment_mean", segment_ids)?;
        self.unsorted_segment_mean(segment_ids, n)
    }

    /// `tf.math.segment_max` (see [`segment_sum`](Tensor::segment_sum));
    /// empty segments are zero, as TensorFlow's (the unsorted form gives
    /// them the dtype's lowest value).
    #[track_caller]
    pub fn segment_max(&self, segment_ids: &Tensor) -> Result<Tensor> {
        let n = sorted_segment_count("segment_max", segment_ids)?;
        let max = self.unsorted_segment_max(segment_ids, n)?;
        zero_where_empty(&max, segment_ids, n)
    }

    /// `tf.math.segment_min` (see [`segment_sum`](Tensor::segment_sum));
    /// empty segments are zero, as TensorFlow's (the unsorted form gives
    /// them the dtype's highest value).
    #[track_caller]
    pub fn segment_min(&self, segment_ids: &Tensor) -> Result<Tensor> {
        let n = sorted_segment_count("segment_min", segment_ids)?;
        let min = self.unsorted_segment_min(segment_ids, n)?;
        zero_where_empty(&min, segment_ids, n)
    }

    fn segments(&self, ids: &Tensor, n: i64, kind: ScatterKind, init: Scalar) -> Result<Tensor> {
        let dims = known_dims(self, "unsorted_segment")?;
        let idims = known_dims(ids, "unsorted_segment")?;
        if idims.len() > dims.len() || dims[..idims.len()] != idims[..] {
            return Err(Error::invalid(
                "unsorted_segment",
                format!(
                    "segment_ids {} must match the leading dimensions of {}",
                    ids.tensor_type(),
                    self.tensor_type()
                ),
            ));
        }
        let mut out_dims = vec![n];
        out_dims.extend(&dims[idims.len()..]);
        let start = Tensor::fill(&out_dims, init, self.dtype())?;
        scatter(&start, kind, &ids.expand_dims(-1)?, self)
    }
}

/// A segment reduction with its empty segments (no id names them) set to 0.
fn zero_where_empty(reduced: &Tensor, ids: &Tensor, n: i64) -> Result<Tensor> {
    let filled = segment_counts(ids, n, DType::I64, reduced.rank())?.gt_scalar(0.0)?;
    filled.where_(reduced, &Tensor::fill(&[], 0, reduced.dtype())?)
}

/// How many of `ids` fall in each of `n` segments, in `dtype`, shaped to
/// broadcast against a segment reduction of rank `rank` (trailing 1s).
fn segment_counts(ids: &Tensor, n: i64, dtype: DType, rank: usize) -> Result<Tensor> {
    let ones = Tensor::fill(&ids.dims(), 1, dtype)?;
    let counts = ones.unsorted_segment_sum(ids, n)?;
    let mut shape = counts.dims();
    shape.extend(std::iter::repeat_n(1, rank - shape.len()));
    counts.reshape(&shape)
}

/// The number of segments sorted `ids` name, `ids[-1] + 1`, after
/// checking them as TensorFlow does (1-D integers, non-negative,
/// non-decreasing). Read from the device: the ids must be concrete.
fn sorted_segment_count(op: &str, ids: &Tensor) -> Result<i64> {
    if crate::trace::is_tracing() {
        return Err(Error::invalid(
            op,
            "sizes its result by the values of segment_ids, which a traced function does not \
             know: use the unsorted_segment_ form with num_segments",
        ));
    }
    if ids.rank() != 1 || !ids.dtype().is_int() {
        return Err(Error::invalid(
            op,
            format!(
                "segment_ids must be a 1-D integer tensor, got {}",
                ids.tensor_type()
            ),
        ));
    }
    let values = ids.cast(DType::I64)?.to_vec::<i64>()?;
    if let Some(&first) = values.first()
        && first < 0
    {
        return Err(Error::invalid(
            op,
            format!("segment ids must be non-negative, got {first}"),
        ));
    }
    if let Some(k) = values.windows(2).position(|w| w[1] < w[0]) {
        return Err(Error::invalid(
            op,
            format!(
                "segment ids are not increasing: {} follows {} at position {}",
                values[k + 1],
                values[k],
                k + 1
            ),
        ));
    }
    Ok(values.last().map_or(0, |last| last + 1))
}
