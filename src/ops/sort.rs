//! Sorting: StableHLO's `sort` of several operands of one
//! shape, ordered along an axis by the first (the keys) and carrying the
//! others along; `argsort` (the permutation, i32); `top_k` as
//! `tf.math.top_k` (the `k` largest along the last axis, with their i32
//! indices), written as a descending sort and a slice.
//!
//! Order: floats sort by a total order as `jax.numpy.sort` does: NaNs
//! (whatever their sign or payload) come after every number ascending and
//! before every number descending (so `top_k` ranks a NaN highest, as
//! TensorFlow's does); `-0.0` and `0.0` are equal; NaNs are equal to each
//! other. A descending sort is the ascending order reversed except that
//! equal keys keep their input order. With `stable`, equal keys keep their
//! input order (`Tensor::sort`, `argsort` with `stable`, `top_k`: lower
//! index first on ties); without it their order is the backend's.
//!
//! Gradients: each float operand's gradient is the output gradient
//! scattered back to where the permutation took each element from (the
//! permutation sorted along with an iota, recomputed in the vjp unless the
//! op returned it; `ops::scatter::tensor_scatter_nd_add`); keys of other
//! types and the permutation itself have none.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `ops::scatter`, `tensor`.

use super::batching;
use super::scatter::coordinates;
use super::{OpDef, check_dtype, describe, normalize_axis};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{TensorType, merge_shapes};
use crate::lower::emitter::lowering_bug;
use crate::lower::{Cmp, Emitter, Val};
use crate::tensor::{Tensor, apply};

/// `sort` of its operands along `axis`, ordered by the first; with
/// `indices`, one more (i32) result: the position along `axis` each
/// sorted element came from.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Sort {
    pub axis: i64,
    pub descending: bool,
    pub stable: bool,
    pub indices: bool,
}

impl OpDef for Sort {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let rank = inputs[0].rank() - usize::from(batched[0]);
        let all = batching::all_materialized(inputs, batched, size);
        let op = Sort {
            axis: batching::shifted(self.axis, rank),
            ..self.clone()
        };
        Some(all.and_then(|x| batching::all_batched(op, &x)))
    }

    fn name(&self) -> &'static str {
        "sort"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let Some(keys) = inputs.first() else {
            return Err(Error::invalid("sort", "expects at least one operand"));
        };
        let d = keys.dtype;
        check_dtype(
            "sort",
            d,
            d.is_numeric() || d == DType::Bool,
            "numeric or boolean keys as first",
        )?;
        let mut shape = keys.shape.clone();
        for t in &inputs[1..] {
            t.dtype.check_compilable()?;
            shape = merge_shapes(&shape, &t.shape).ok_or_else(|| {
                Error::invalid(
                    "sort",
                    format!(
                        "operands must have one shape (operands: {})",
                        describe(inputs)
                    ),
                )
            })?;
        }
        if let Some(dims) = shape.dims() {
            let axis = normalize_axis("sort", self.axis, dims.len())?;
            if self.indices && dims[axis].is_some_and(|n| n > i32::MAX as i64) {
                return Err(Error::invalid(
                    "sort",
                    format!(
                        "an axis of more than 2^31 - 1 elements has no i32 indices (operands: {})",
                        describe(inputs)
                    ),
                ));
            }
        }
        let mut out: Vec<TensorType> = inputs
            .iter()
            .map(|t| TensorType::new(t.dtype, shape.clone()))
            .collect();
        if self.indices {
            out.push(TensorType::new(DType::I32, shape));
        }
        Ok(out)
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let dims = inputs[0].ty.dims.clone();
        let axis = normalize_axis("sort", self.axis, dims.len())?;
        if inputs.iter().any(|v| v.ty.dims != dims) {
            return Err(lowering_bug("sort", "operands of different shapes"));
        }
        let iota;
        let mut operands: Vec<&Val> = inputs.iter().collect();
        if self.indices {
            iota = cx.iota(ArraySpec::new(DType::I32, &dims), axis as i64);
            operands.push(&iota);
        }
        if dims[axis] <= 1 {
            // Nothing to reorder.
            return Ok(operands.into_iter().cloned().collect());
        }
        let args: Vec<ArraySpec> = operands
            .iter()
            .flat_map(|v| {
                let s = ArraySpec::scalar(v.ty.dtype);
                [s.clone(), s]
            })
            .collect();
        let descending = self.descending;
        let comparator = cx.region(&args, |cx, a| {
            let (l, r) = if descending {
                (&a[1], &a[0])
            } else {
                (&a[0], &a[1])
            };
            Ok(vec![less(cx, l, r)])
        })?;
        Ok(cx.sort(&operands, axis as i64, self.stable, comparator))
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let n = inputs.len();
        let wanted = |i: usize| grads[i].is_some() && inputs[i].dtype().is_float();
        if !(0..n).any(wanted) {
            return Ok(vec![None; n]);
        }
        let perm = if self.indices {
            outputs[n].clone()
        } else {
            let op = Sort {
                indices: true,
                ..self.clone()
            };
            apply(op, &[&inputs[0]])?.remove(1)
        };
        let axis = normalize_axis("sort", self.axis, perm.rank())?;
        let rows = coordinates(&perm, axis)?;
        (0..n)
            .map(|i| match &grads[i] {
                Some(g) if wanted(i) => Ok(Some(
                    inputs[i].zeros_like()?.tensor_scatter_nd_add(&rows, g)?,
                )),
                _ => Ok(None),
            })
            .collect()
    }
}

/// The comparator's `a < b`: for floats a total order with NaNs last and
/// `-0.0 == 0.0`: `a < b || (isnan(b) && !isnan(a))`.
fn less(cx: &mut Emitter, a: &Val, b: &Val) -> Val {
    let lt = cx.compare(Cmp::Lt, a, b);
    if !a.ty.dtype.is_float() {
        return lt;
    }
    let a_nan = cx.compare(Cmp::Ne, a, a);
    let b_nan = cx.compare(Cmp::Ne, b, b);
    let a_number = cx.unary("not", &a_nan);
    let nan_after = cx.binary("and", &b_nan, &a_number);
    cx.binary("or", &lt, &nan_after)
}

/// `operands` (one shape) sorted along `axis` by the first, which the
/// others follow (`jax.lax.sort` with `num_keys = 1`); see the module docs
/// for the order of NaNs and ties.
#[track_caller]
pub fn sort_many(
    operands: &[&Tensor],
    axis: i64,
    descending: bool,
    stable: bool,
) -> Result<Vec<Tensor>> {
    let op = Sort {
        axis,
        descending,
        stable,
        indices: false,
    };
    apply(op, operands)
}

/// **Sorting**: sorted values, their order, and the largest k.
impl Tensor {
    /// `tf.sort`: the elements along `axis` in ascending (or descending)
    /// order; stable, NaNs last ascending and first descending.
    #[track_caller]
    pub fn sort(&self, axis: i64, descending: bool) -> Result<Tensor> {
        Ok(sort_many(&[self], axis, descending, true)?.remove(0))
    }

    /// `tf.argsort`: the i32 positions along `axis` that sort the tensor
    /// (`stable`: equal elements keep their order).
    #[track_caller]
    pub fn argsort(&self, axis: i64, descending: bool, stable: bool) -> Result<Tensor> {
        let op = Sort {
            axis,
            descending,
            stable,
            indices: true,
        };
        Ok(apply(op, &[self])?.remove(1))
    }

    /// `tf.math.top_k`: the `k` largest elements along the last axis and
    /// their i32 indices, largest first (also when `sorted` is false,
    /// which TensorFlow allows to be in any order); on ties the lower index
    /// comes first, and NaN ranks above every number.
    #[track_caller]
    pub fn top_k(&self, k: i64, sorted: bool) -> Result<(Tensor, Tensor)> {
        let _ = sorted;
        let rank = self.shape().rank().ok_or_else(|| {
            Error::invalid(
                "top_k",
                format!("needs a known rank, got {}", self.tensor_type()),
            )
        })?;
        let last = self.shape().dims().and_then(|d| d.last().copied());
        let Some(last) = last else {
            return Err(Error::invalid(
                "top_k",
                format!("needs rank >= 1, got {}", self.tensor_type()),
            ));
        };
        if k < 0 || last.is_some_and(|n| k > n) {
            return Err(Error::invalid(
                "top_k",
                format!(
                    "k = {k} must be in [0, the last dimension] (operand: {})",
                    self.tensor_type()
                ),
            ));
        }
        let op = Sort {
            axis: -1,
            descending: true,
            stable: true,
            indices: true,
        };
        let mut r = apply(op, &[self])?;
        let (values, indices) = (r.remove(0), r.remove(0));
        let begin = vec![0; rank];
        let mut size = vec![-1; rank];
        size[rank - 1] = k;
        Ok((values.slice(&begin, &size)?, indices.slice(&begin, &size)?))
    }
}
