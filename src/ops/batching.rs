//! What the ops' batching rules (`OpDef::batch`, which `vmap` applies)
//! share: a batched value carries its examples on a new leading axis;
//! these helpers line operands up for broadcasting, repeat unbatched ones,
//! and move an example's axes past the batch axis.

use super::Op;
use crate::error::Result;
use crate::tensor::{Tensor, apply};

/// A rule's result: each output and whether it carries the batch axis.
pub(crate) type Batched = Option<Result<Vec<(Tensor, bool)>>>;

/// The rank of one example of `t`.
pub(crate) fn example_rank(t: &Tensor, batched: bool) -> usize {
    t.rank() - usize::from(batched)
}

/// `t` (batched) with 1s inserted after its batch axis up to an example
/// rank of `rank`.
pub(crate) fn pad_example_rank(t: &Tensor, rank: usize) -> Result<Tensor> {
    let dims = t.dims();
    let missing = (rank + 1).saturating_sub(dims.len());
    if missing == 0 {
        return Ok(t.clone());
    }
    let mut padded = vec![dims[0]];
    padded.extend(std::iter::repeat_n(1, missing));
    padded.extend(&dims[1..]);
    t.reshape(&padded)
}

/// The operands of a broadcasting op, lined up: each batched one padded to
/// the largest example rank among all of them, so that broadcasting pairs
/// the batch axis with itself or with nothing (an unbatched operand of a
/// higher rank would otherwise meet it).
pub(crate) fn aligned(inputs: &[Tensor], batched: &[bool]) -> Result<Vec<Tensor>> {
    let top = inputs
        .iter()
        .zip(batched)
        .map(|(t, &b)| example_rank(t, b))
        .max()
        .unwrap_or(0);
    inputs
        .iter()
        .zip(batched)
        .map(|(t, &b)| {
            if b {
                pad_example_rank(t, top)
            } else {
                Ok(t.clone())
            }
        })
        .collect()
}

/// `t` with the batch axis: an unbatched value repeated `size` times.
pub(crate) fn materialized(t: &Tensor, batched: bool, size: i64) -> Result<Tensor> {
    if batched {
        return Ok(t.clone());
    }
    let mut dims = vec![size];
    dims.extend(t.dims());
    t.expand_dims(0)?.broadcast_to(&dims)
}

/// An example's axis (negative counts from the end) as the batched
/// value's axis.
pub(crate) fn shifted(axis: i64, example_rank: usize) -> i64 {
    let axis = if axis < 0 {
        axis + example_rank as i64
    } else {
        axis
    };
    axis + 1
}

/// `op` on `inputs`, every output batched.
pub(crate) fn all_batched(op: impl Into<Op>, inputs: &[Tensor]) -> Result<Vec<(Tensor, bool)>> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    Ok(apply(op, &refs)?.into_iter().map(|t| (t, true)).collect())
}

/// `t` with axis `axis` moved to the front (the batch axis where an op
/// left it elsewhere).
pub(crate) fn to_front(t: Tensor, axis: usize) -> Result<Tensor> {
    if axis == 0 {
        return Ok(t);
    }
    let mut perm = vec![axis as i64];
    perm.extend((0..t.rank() as i64).filter(|&d| d != axis as i64));
    t.transpose(&perm)
}

/// The outputs of a rule that batched every output at `axis`, moved to
/// the front.
pub(crate) fn front_at(
    outs: Result<Vec<(Tensor, bool)>>,
    axis: usize,
) -> Result<Vec<(Tensor, bool)>> {
    outs?
        .into_iter()
        .map(|(t, b)| Ok((to_front(t, axis)?, b)))
        .collect()
}
