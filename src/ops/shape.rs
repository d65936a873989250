//! Shape ops: reshape (with `expand_dims` and `squeeze` built on it),
//! transpose, concat (with `stack`), slice and strided_slice; gather and
//! one_hot are in `ops::gather` (re-exported here).
//!
//! Semantics follow TensorFlow. Attributes (target dims, permutations,
//! slice bounds, axes) are host integers, as XLA needs every shape at
//! compile time; only operand shapes may be partly unknown while tracing.
//! `infer` then keeps what it can: an unknown input dimension gives an
//! unknown output dimension, an unknown rank an unknown rank, and checks
//! that need the missing size wait until the concrete shape is lowered.

use super::batching;
use super::grad_or_zeros;
use super::{OpDef, describe, expect_arity, normalize_axis, same_dtype};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

pub use super::gather::{Gather, OneHot};

/// `[2, -1]` for error messages.
fn list(dims: &[i64]) -> String {
    format!("{dims:?}")
}

/// The result type with known rank `dims`.
pub(super) fn typed(dtype: DType, dims: Vec<Dim>) -> Vec<TensorType> {
    vec![TensorType::new(dtype, Shape::from_dims(dims))]
}

/// The result type with unknown rank.
pub(super) fn unknown_rank(dtype: DType) -> Vec<TensorType> {
    vec![TensorType::new(dtype, Shape::unknown_rank())]
}

// ---------------------------------------------------------------- reshape

/// Reinterprets the elements (row-major) with new dimensions; at most one
/// of them may be -1, meaning "whatever makes the element count match".
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reshape {
    pub dims: Vec<i64>,
}

impl Reshape {
    /// Validates the attribute; returns the position of the -1, if any.
    fn hole(&self) -> Result<Option<usize>> {
        let mut hole = None;
        for (i, &d) in self.dims.iter().enumerate() {
            match (d, hole) {
                (-1, Some(j)) => {
                    return Err(Error::invalid(
                        "reshape",
                        format!(
                            "only one dimension may be -1, not both {j} and {i} in {}",
                            list(&self.dims)
                        ),
                    ));
                }
                (-1, None) => hole = Some(i),
                (d, _) if d < 0 => {
                    return Err(Error::invalid(
                        "reshape",
                        format!(
                            "dimension {i} of the requested shape {} is {d}; sizes must be >= 0 or -1",
                            list(&self.dims)
                        ),
                    ));
                }
                _ => {}
            }
        }
        Ok(hole)
    }
}

impl OpDef for Reshape {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], size: i64) -> batching::Batched {
        let mut dims = vec![size];
        dims.extend(&self.dims);
        Some(batching::all_batched(Reshape { dims }, inputs))
    }

    fn name(&self) -> &'static str {
        "reshape"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("reshape", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        let hole = self.hole()?;
        let known = self
            .dims
            .iter()
            .filter(|&&d| d != -1)
            .fold(1i64, |n, &d| n.saturating_mul(d));
        let mut out: Vec<Dim> = self.dims.iter().map(|&d| Some(d)).collect();
        let to = list(&self.dims);
        let fail = |m: String| Err(Error::invalid("reshape", m));
        match (hole, x.shape.num_elements()) {
            (Some(_), _) if known == 0 => {
                return fail(format!(
                    "cannot infer the -1 dimension of {to} for {x}: the other dimensions multiply to 0"
                ));
            }
            (Some(_), Some(n)) if n % known != 0 => {
                return fail(format!(
                    "cannot reshape {x} ({n} elements) to {to}: {n} is not a multiple of {known}"
                ));
            }
            (Some(i), n) => out[i] = n.map(|n| n / known),
            (None, Some(n)) if n != known => {
                return fail(format!(
                    "cannot reshape {x} ({n} elements) to {to} ({known} elements)"
                ));
            }
            (None, _) => {}
        }
        Ok(typed(x.dtype, out))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.reshape(&inputs[0], &outputs[0].dims)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        if !x.dtype().is_inexact() {
            return Ok(vec![None]);
        }
        Ok(vec![Some(
            grad_or_zeros(grads, &outputs[0])?.reshape(&x.dims())?,
        )])
    }
}

// -------------------------------------------------------------- transpose

/// Permutes dimensions: result dimension `i` is operand dimension
/// `perm[i]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Transpose {
    pub perm: Vec<i64>,
}

impl Transpose {
    fn check_perm(&self, x: &TensorType, rank: usize) -> Result<()> {
        let mut sorted = self.perm.clone();
        sorted.sort_unstable();
        if sorted.iter().copied().eq(0..rank as i64) {
            return Ok(());
        }
        Err(Error::invalid(
            "transpose",
            format!(
                "perm {} is not a permutation of 0..{rank} for {x}",
                list(&self.perm)
            ),
        ))
    }
}

impl OpDef for Transpose {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let rank = self.perm.len();
        let mut perm = vec![0];
        perm.extend(self.perm.iter().map(|&p| batching::shifted(p, rank)));
        Some(batching::all_batched(Transpose { perm }, inputs))
    }

    fn name(&self) -> &'static str {
        "transpose"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("transpose", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        let Some(dims) = x.shape.dims() else {
            self.check_perm(x, self.perm.len())?;
            return Ok(typed(x.dtype, vec![None; self.perm.len()]));
        };
        self.check_perm(x, dims.len())?;
        Ok(typed(
            x.dtype,
            self.perm.iter().map(|&p| dims[p as usize]).collect(),
        ))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.transpose(&inputs[0], &self.perm)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None]);
        }
        let mut inverse = vec![0i64; self.perm.len()];
        for (i, &p) in self.perm.iter().enumerate() {
            inverse[p as usize] = i as i64;
        }
        Ok(vec![Some(
            grad_or_zeros(grads, &outputs[0])?.transpose(&inverse)?,
        )])
    }
}

// ----------------------------------------------------------------- concat

/// Joins tensors along an existing axis; every other dimension must match.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Concat {
    pub axis: i64,
}

impl Concat {
    /// Adds input `i`'s dims to `out` (sum on the axis, equality elsewhere).
    fn merge(&self, inputs: &[TensorType], i: usize, axis: usize, out: &mut [Dim]) -> Result<()> {
        let Some(dims) = inputs[i].shape.dims() else {
            out[axis] = None;
            return Ok(());
        };
        let fail = |m: String| Err(Error::invalid("concat", m));
        if dims.len() != out.len() {
            return fail(format!(
                "all inputs must have rank {}, but input #{i} has rank {} (operands: {})",
                out.len(),
                dims.len(),
                describe(inputs)
            ));
        }
        for (k, &d) in dims.iter().enumerate() {
            out[k] = match (out[k], d) {
                _ if k == axis => out[k].zip(d).map(|(a, b)| a + b),
                (Some(a), Some(b)) if a != b => {
                    return fail(format!(
                        "dimension {k} of input #{i} is {b} but {a} in an earlier input; \
                         all dimensions except the concat axis {axis} must match (operands: {})",
                        describe(inputs)
                    ));
                }
                (a, b) => a.or(b),
            };
        }
        Ok(())
    }
}

impl OpDef for Concat {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let rank = inputs[0].rank() - usize::from(batched[0]);
        let all = batching::all_materialized(inputs, batched, size);
        let axis = batching::shifted(self.axis, rank);
        Some(all.and_then(|x| batching::all_batched(Concat { axis }, &x)))
    }

    fn name(&self) -> &'static str {
        "concat"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.is_empty() {
            return Err(Error::invalid("concat", "expects at least one tensor"));
        }
        let dtype = same_dtype("concat", inputs)?;
        dtype.check_compilable()?;
        let Some(rank) = inputs.iter().find_map(TensorType::rank) else {
            return Ok(unknown_rank(dtype));
        };
        let axis = normalize_axis("concat", self.axis, rank)?;
        let mut out: Vec<Dim> = vec![None; rank];
        out[axis] = Some(0);
        for i in 0..inputs.len() {
            self.merge(inputs, i, axis, &mut out)?;
        }
        Ok(typed(dtype, out))
    }

    /// Consecutive copies of one value are written as one tiling
    /// (`broadcast_in_dim` to a new dimension, then `reshape`), not as a
    /// `concatenate` naming the value again and again: XLA's CPU compiler
    /// takes time exponential in the depth of chained `concat(x, x)` (12
    /// levels took 20 s, 20 over 120 s), and the tiling compiles at once.
    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let rank = inputs[0].ty.rank();
        let axis = normalize_axis("concat", self.axis, rank)?;
        let mut parts: Vec<Val> = Vec::new();
        let mut k = 0;
        while k < inputs.len() {
            let x = &inputs[k];
            let copies = inputs[k..].iter().take_while(|v| v.name == x.name).count();
            k += copies;
            if copies == 1 {
                parts.push(x.clone());
                continue;
            }
            let mut wide = x.ty.dims.clone();
            wide.insert(axis, copies as i64);
            let map: Vec<i64> = (0..rank as i64)
                .map(|d| if d < axis as i64 { d } else { d + 1 })
                .collect();
            let tiled = cx.broadcast_in_dim(x, &map, &wide);
            let mut dims = x.ty.dims.clone();
            dims[axis] *= copies as i64;
            parts.push(cx.reshape(&tiled, &dims));
        }
        Ok(vec![match parts.as_slice() {
            [one] => one.clone(),
            _ => cx.concatenate(&parts.iter().collect::<Vec<_>>(), axis as i64),
        }])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None; inputs.len()]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let axis = super::normalize_axis("gradient", self.axis, g.rank())?;
        let mut offset = 0;
        inputs
            .iter()
            .map(|x| {
                let mut begin = vec![0; g.rank()];
                begin[axis] = offset;
                offset += x.dims()[axis];
                Ok(Some(g.slice(&begin, &x.dims())?))
            })
            .collect()
    }
}

// ------------------------------------------------------------------ slice

/// `tf.slice`: `size[i]` elements from `begin[i]` in every dimension; a
/// size of -1 takes everything to the end.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Slice {
    pub begin: Vec<i64>,
    pub size: Vec<i64>,
}

impl Slice {
    /// The result size of dimension `k` of `x`, checked against its size.
    fn dim(&self, x: &TensorType, k: usize, n: Dim) -> Result<Dim> {
        let (b, s) = (self.begin[k], self.size[k]);
        let fail = |m: String| Err(Error::invalid("slice", format!("{m} (operand {x})")));
        if b < 0 || s < -1 {
            return fail(format!(
                "begin[{k}] = {b} must be >= 0 and size[{k}] = {s} must be >= -1"
            ));
        }
        match n {
            Some(n) if b > n || (s >= 0 && b + s > n) => fail(format!(
                "begin {} with size {} is out of bounds in dimension {k} of size {n}",
                list(&self.begin),
                list(&self.size)
            )),
            Some(n) if s == -1 => Ok(Some(n - b)),
            _ if s == -1 => Ok(None),
            _ => Ok(Some(s)),
        }
    }
}

impl OpDef for Slice {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], size: i64) -> batching::Batched {
        let op = Slice {
            begin: [&[0][..], &self.begin].concat(),
            size: [&[size][..], &self.size].concat(),
        };
        Some(batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        "slice"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("slice", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        let rank = self.begin.len();
        let same_rank = x.rank().is_none_or(|r| r == rank);
        if self.size.len() != rank || !same_rank {
            return Err(Error::invalid(
                "slice",
                format!(
                    "begin {} and size {} must both have one entry per dimension of {x}",
                    list(&self.begin),
                    list(&self.size)
                ),
            ));
        }
        let dims: Vec<Dim> = match x.shape.dims() {
            Some(d) => d.to_vec(),
            None => vec![None; rank],
        };
        let out = (0..rank)
            .map(|k| self.dim(x, k, dims[k]))
            .collect::<Result<_>>()?;
        Ok(typed(x.dtype, out))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let limit: Vec<i64> = self
            .begin
            .iter()
            .zip(&outputs[0].dims)
            .map(|(b, n)| b + n)
            .collect();
        let ones = vec![1; limit.len()];
        Ok(vec![cx.slice(&inputs[0], &self.begin, &limit, &ones)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        if !x.dtype().is_inexact() {
            return Ok(vec![None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let starts: Vec<Tensor> = self
            .begin
            .iter()
            .map(|&b| Tensor::fill(&[], b, crate::dtype::DType::I64))
            .collect::<Result<_>>()?;
        Ok(vec![Some(
            x.zeros_like()?.dynamic_update_slice(&g, &starts)?,
        )])
    }

    fn cotangent_placement(&self, inputs: &[Tensor]) -> Option<Vec<i64>> {
        let x = &inputs[0];
        (x.dtype().is_inexact() && x.shape().as_known().is_some()).then(|| self.begin.clone())
    }
}

// ---------------------------------------------------------- strided slice

/// `x[b0:e0:s0, b1:e1:s1, ...]` with Python's rules: negative indices
/// count from the end, out-of-range bounds are clamped, negative strides
/// walk backwards. Dimensions past the given entries are kept whole. There
/// are no masks: pass `i64::MIN`/`i64::MAX` for an omitted bound (with a
/// negative stride, `i64::MIN` as `end` reaches index 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StridedSlice {
    pub begin: Vec<i64>,
    pub end: Vec<i64>,
    pub strides: Vec<i64>,
}

/// Python's `slice.indices`: the clamped start and the element count of
/// `begin:end:step` over a dimension of size `n`.
fn python_slice(n: i64, begin: i64, end: i64, step: i64) -> (i64, i64) {
    let (lo, hi) = if step > 0 { (0, n) } else { (-1, n - 1) };
    let clamp = |i: i64| if i < 0 { i.saturating_add(n) } else { i }.clamp(lo, hi);
    let (start, stop) = (clamp(begin), clamp(end));
    let span = if step > 0 { stop - start } else { start - stop };
    let count = if span > 0 {
        ((span - 1) as u64 / step.unsigned_abs()) as i64 + 1
    } else {
        0
    };
    (start, count)
}

impl StridedSlice {
    fn check(&self, x: &TensorType) -> Result<()> {
        let k = self.begin.len();
        let fail = |m: String| {
            Err(Error::invalid(
                "strided_slice",
                format!("{m} (operand {x})"),
            ))
        };
        if self.end.len() != k || self.strides.len() != k {
            return fail(format!(
                "begin {}, end {} and strides {} must have the same length",
                list(&self.begin),
                list(&self.end),
                list(&self.strides)
            ));
        }
        if let Some(i) = self.strides.iter().position(|&s| s == 0) {
            return fail(format!("strides[{i}] is 0; strides must be non-zero"));
        }
        if x.rank().is_some_and(|r| k > r) {
            return fail(format!("{k} slice entries for a tensor of lower rank"));
        }
        Ok(())
    }

    /// Slice bounds `(start, limit, stride)` of dimension `k` (size `n`)
    /// after the dimension has been reversed if its stride is negative.
    fn bounds(&self, k: usize, n: i64) -> (i64, i64, i64) {
        let step = self.strides[k];
        let (start, count) = python_slice(n, self.begin[k], self.end[k], step);
        let stride = (step.unsigned_abs().min(n.max(1) as u64)) as i64;
        let start = if step > 0 { start } else { n - 1 - start };
        match count {
            0 => (0, 0, stride),
            c => (start, start + (c - 1) * stride + 1, stride),
        }
    }
}

impl OpDef for StridedSlice {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], size: i64) -> batching::Batched {
        // Every example whole along the batch axis.
        let op = StridedSlice {
            begin: [&[0][..], &self.begin].concat(),
            end: [&[size][..], &self.end].concat(),
            strides: [&[1][..], &self.strides].concat(),
        };
        Some(batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        "strided_slice"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("strided_slice", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        self.check(x)?;
        let Some(dims) = x.shape.dims() else {
            return Ok(unknown_rank(x.dtype));
        };
        let out = dims.iter().enumerate().map(|(k, &d)| match (k, d) {
            (k, Some(n)) if k < self.begin.len() => {
                let (_, count) = python_slice(n, self.begin[k], self.end[k], self.strides[k]);
                Some(count)
            }
            (k, _) if k < self.begin.len() => None,
            (_, d) => d,
        });
        Ok(typed(x.dtype, out.collect()))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let dims = &x.ty.dims;
        let backwards: Vec<i64> = (0..self.strides.len())
            .filter(|&k| self.strides[k] < 0)
            .map(|k| k as i64)
            .collect();
        let x = if backwards.is_empty() {
            x.clone()
        } else {
            cx.reverse(x, &backwards)
        };
        let (mut start, mut limit, mut strides) =
            (vec![0; dims.len()], dims.clone(), vec![1; dims.len()]);
        for k in 0..self.begin.len() {
            (start[k], limit[k], strides[k]) = self.bounds(k, dims[k]);
        }
        Ok(vec![cx.slice(&x, &start, &limit, &strides)])
    }

    /// A strided slice is linear: its gradient puts each element of `g`
    /// back where it was read from, which is StableHLO's `pad` with zeros
    /// (`interior` fills the stride's gaps) in the frame where
    /// negative-stride dimensions are reversed, then reversed back.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        if !x.dtype().is_inexact() {
            return Ok(vec![None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let dims = x.dims();
        let (mut low, mut high, mut interior) = (
            vec![0; dims.len()],
            vec![0; dims.len()],
            vec![0; dims.len()],
        );
        for (k, &n) in dims.iter().enumerate().take(self.begin.len()) {
            let (start, limit, stride) = self.bounds(k, n);
            (low[k], high[k], interior[k]) = (start, n - limit, stride - 1);
        }
        let placed = g.pad_general(&low, &high, &interior, 0i64)?;
        let backwards: Vec<i64> = (0..self.strides.len() as i64)
            .filter(|&k| self.strides[k as usize] < 0)
            .collect();
        Ok(vec![Some(if backwards.is_empty() {
            placed
        } else {
            placed.reverse(&backwards)?
        })])
    }

    /// Slices with unit strides place their cotangent at their starts.
    fn cotangent_placement(&self, inputs: &[Tensor]) -> Option<Vec<i64>> {
        let x = &inputs[0];
        let dims = x.shape().as_known().filter(|_| x.dtype().is_inexact())?;
        if self.strides.iter().any(|&s| s != 1) {
            return None;
        }
        let mut begin = vec![0; dims.len()];
        for (k, &n) in dims.iter().enumerate().take(self.begin.len()) {
            begin[k] = self.bounds(k, n).0;
        }
        Some(begin)
    }
}

// ----------------------------------------------------------------- gather

/// **Shape and layout**: reshapes, transposes, joins and slices.
impl Tensor {
    /// The dims as a reshape target: an unknown dimension becomes -1, so a
    /// shape with at most one unknown can still be reshaped exactly.
    fn reshape_target(&self, op: &str) -> Result<Vec<i64>> {
        let shape = self.shape();
        let dims = shape.dims().ok_or_else(|| {
            Error::invalid(op, "needs a tensor of known rank, got shape <unknown>")
        })?;
        if dims.iter().filter(|d| d.is_none()).count() > 1 {
            return Err(Error::invalid(
                op,
                format!("needs at most one unknown dimension, got shape {shape}"),
            ));
        }
        Ok(dims.iter().map(|d| d.unwrap_or(-1)).collect())
    }

    /// The same elements (row-major) with new dimensions; one entry may be
    /// -1 and is then computed from the element count, like `tf.reshape`.
    #[track_caller]
    pub fn reshape(&self, dims: &[i64]) -> Result<Tensor> {
        apply1(
            Reshape {
                dims: dims.to_vec(),
            },
            &[self],
        )
    }

    /// Permutes dimensions: result dimension `i` is dimension `perm[i]`.
    #[track_caller]
    pub fn transpose(&self, perm: &[i64]) -> Result<Tensor> {
        apply1(
            Transpose {
                perm: perm.to_vec(),
            },
            &[self],
        )
    }

    /// Inserts a dimension of size 1 at `axis` (in `-rank-1..=rank`).
    #[track_caller]
    pub fn expand_dims(&self, axis: i64) -> Result<Tensor> {
        let mut dims = self.reshape_target("expand_dims")?;
        let axis = normalize_axis("expand_dims", axis, dims.len() + 1)?;
        dims.insert(axis, 1);
        self.reshape(&dims)
    }

    /// Removes the size-1 dimensions at `axes` (every size-1 dimension if
    /// `axes` is empty); naming a dimension of another size is an error.
    /// A named dimension of unknown size is taken to be 1, as TensorFlow
    /// does; an unnamed one is kept.
    #[track_caller]
    pub fn squeeze(&self, axes: &[i64]) -> Result<Tensor> {
        let dims = self.reshape_target("squeeze")?;
        let mut drop: Vec<bool> = dims.iter().map(|&d| axes.is_empty() && d == 1).collect();
        for &a in axes {
            let k = normalize_axis("squeeze", a, dims.len())?;
            if dims[k] != 1 && dims[k] != -1 {
                return Err(Error::invalid(
                    "squeeze",
                    format!(
                        "cannot squeeze axis {a}: its size is {}, not 1 (shape {})",
                        dims[k],
                        self.shape()
                    ),
                ));
            }
            drop[k] = true;
        }
        let kept: Vec<i64> = (0..dims.len())
            .filter(|&k| !drop[k])
            .map(|k| dims[k])
            .collect();
        self.reshape(&kept)
    }

    /// Joins `tensors` along the existing `axis`, like `tf.concat`.
    #[track_caller]
    pub fn concat(tensors: &[Tensor], axis: i64) -> Result<Tensor> {
        if tensors.is_empty() {
            return Err(Error::invalid("concat", "expects at least one tensor"));
        }
        let refs: Vec<&Tensor> = tensors.iter().collect();
        apply1(Concat { axis }, &refs)
    }

    /// Joins same-shaped `tensors` along a new `axis` (in
    /// `-rank-1..=rank`), like `tf.stack`.
    #[track_caller]
    pub fn stack(tensors: &[Tensor], axis: i64) -> Result<Tensor> {
        let Some(first) = tensors.first() else {
            return Err(Error::invalid("stack", "expects at least one tensor"));
        };
        let types: Vec<TensorType> = tensors.iter().map(Tensor::tensor_type).collect();
        same_dtype("stack", &types)?;
        if types.iter().any(|t| t.shape != first.shape()) {
            return Err(Error::invalid(
                "stack",
                format!(
                    "all inputs must have the same shape (operands: {})",
                    describe(&types)
                ),
            ));
        }
        let axis = normalize_axis("stack", axis, first.rank() + 1)? as i64;
        let expanded = tensors
            .iter()
            .map(|t| t.expand_dims(axis))
            .collect::<Result<Vec<_>>>()?;
        Tensor::concat(&expanded, axis)
    }

    /// `tf.slice`: `size[i]` elements from `begin[i]` in every dimension
    /// (-1 takes the rest).
    #[track_caller]
    pub fn slice(&self, begin: &[i64], size: &[i64]) -> Result<Tensor> {
        let op = Slice {
            begin: begin.to_vec(),
            size: size.to_vec(),
        };
        apply1(op, &[self])
    }

    /// `x[b0:e0:s0, ...]` with Python semantics; see [`StridedSlice`].
    #[track_caller]
    pub fn strided_slice(&self, begin: &[i64], end: &[i64], strides: &[i64]) -> Result<Tensor> {
        let op = StridedSlice {
            begin: begin.to_vec(),
            end: end.to_vec(),
            strides: strides.to_vec(),
        };
        apply1(op, &[self])
    }
}
