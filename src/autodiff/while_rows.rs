//! Loop values a `while` body fills row by row (a `TensorArray` collecting
//! outputs), and how their gradient avoids copying them every step.
//!
//! Layer: autodiff (imports `ir::Graph`, `ops::Op`, `tensor`).
//!
//! Left to the general rule, the backward loop carries the cotangent of
//! such an array and, per iteration, slices out the written rows and
//! zeroes them with a `dynamic_update_slice`: XLA copied the whole array
//! twice per iteration to do that (W11: 2 x 200 KB x 50 steps), which is
//! quadratic in the sequence length. Instead the cotangent `G` of the
//! array's final value stays loop-invariant, and the backward loop carries
//! a mask of the rows already claimed by later writes (later in forward
//! order). A write of rows `[s, s + k)` gets `G[s..s+k]` where no later
//! write claimed them and zero where one did (an overwritten value has no
//! influence), then claims them. After the loop, the array's initial
//! value gets `G` with every claimed row zeroed. That is exactly the
//! general rule's result, for any order of writes.

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::ops::Op;
use crate::tensor::Tensor;

/// A loop value whose body only overwrites whole rows of it: exactly one
/// `dynamic_update_slice` of the loop value, whose update spans every
/// dimension but the first, and whose result is the next loop value.
#[derive(Clone, Debug)]
pub(super) struct RowWrite {
    /// The body's value written (the update).
    pub update: ValueId,
    /// The body's value of the first start index.
    pub start: ValueId,
    /// Rows written per iteration.
    pub rows: i64,
    /// Rows in the array.
    pub length: i64,
}

/// The row-written loop values of a body (`None` for the others), among
/// the loop values `candidates` marks (those no state record keeps).
pub(super) fn row_writes(body: &Graph, candidates: &[bool]) -> Vec<Option<RowWrite>> {
    candidates
        .iter()
        .enumerate()
        .map(|(i, &candidate)| candidate.then(|| row_write(body, i)).flatten())
        .collect()
}

fn row_write(body: &Graph, slot: usize) -> Option<RowWrite> {
    let param = *body.params().get(slot)?;
    let uses: Vec<(usize, usize)> = uses_of(body, param);
    let [(node, 0)] = uses.as_slice() else {
        return None;
    };
    let node = &body.nodes()[*node];
    if !matches!(node.op, Op::DynamicUpdateSlice(_)) {
        return None;
    }
    let written = node.outputs[0];
    let returned: Vec<usize> = (0..body.results().len())
        .filter(|&r| body.results()[r] == written)
        .collect();
    if returned != [slot] || !uses_of(body, written).is_empty() {
        return None;
    }
    let array = body.value_type(param).shape.as_known()?;
    let update = body.value_type(node.inputs[1]).shape.as_known()?;
    let spans_rows = !array.is_empty() && update.len() == array.len() && update[1..] == array[1..];
    if !spans_rows || update[0] < 1 || body.value_type(param).dtype.is_complex() {
        return None;
    }
    Some(RowWrite {
        update: node.inputs[1],
        start: node.inputs[2],
        rows: update[0],
        length: array[0],
    })
}

/// `(node, input position)` for every use of `v` in `body`'s nodes.
fn uses_of(body: &Graph, v: ValueId) -> Vec<(usize, usize)> {
    let mut uses = Vec::new();
    for (i, node) in body.nodes().iter().enumerate() {
        for (pos, &input) in node.inputs.iter().enumerate() {
            if input == v {
                uses.push((i, pos));
            }
        }
    }
    uses
}

impl RowWrite {
    /// No rows claimed yet: a `[length]` mask of zeros.
    pub fn empty_mask(&self, dtype: DType) -> Result<Tensor> {
        Tensor::fill(&[self.length], 0, dtype)
    }

    /// The cotangent of this iteration's update: `G`'s rows at `start`,
    /// zero where `mask` says a later write claimed them.
    pub fn update_cotangent(&self, g: &Tensor, mask: &Tensor, start: &Tensor) -> Result<Tensor> {
        let rank = g.rank();
        let zero = Tensor::fill(&[], 0, start.dtype())?;
        let mut starts = vec![start.clone()];
        starts.extend(std::iter::repeat_n(zero.clone(), rank - 1));
        let mut sizes = g.dims();
        sizes[0] = self.rows;
        let rows = g.dynamic_slice(&starts, &sizes)?;
        let claimed = mask.dynamic_slice(std::slice::from_ref(start), &[self.rows])?;
        rows.mul(&self.spread(&claimed.neg()?.add_scalar(1)?, rank)?)
    }

    /// `mask` with the rows at `start` claimed.
    pub fn claim(&self, mask: &Tensor, start: &Tensor) -> Result<Tensor> {
        let ones = Tensor::fill(&[self.rows], 1, mask.dtype())?;
        mask.dynamic_update_slice(&ones, std::slice::from_ref(start))
    }

    /// The cotangent of the array's value before the loop: `G` with every
    /// claimed row zeroed.
    pub fn initial_cotangent(&self, g: &Tensor, mask: &Tensor) -> Result<Tensor> {
        g.mul(&self.spread(&mask.neg()?.add_scalar(1)?, g.rank())?)
    }

    /// A `[rows]` vector shaped `[rows, 1, 1, ...]` to scale rows of a
    /// rank-`rank` array.
    fn spread(&self, v: &Tensor, rank: usize) -> Result<Tensor> {
        let mut dims = v.dims();
        dims.extend(std::iter::repeat_n(1, rank - 1));
        v.reshape(&dims)
    }
}
