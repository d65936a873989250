//! What the ops' batching rules (`OpDef::batch`, which `vmap` applies)
//! share: a batched value carries its examples on a new leading axis;
//! these helpers line operands up for broadcasting, repeat unbatched ones,
//! and move an example's axes past the batch axis.

use super::{Op, OpDef};
use crate::error::Result;
use crate::ir::{Graph, ValueId};
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

/// Every input with the batch axis (see [`materialized`]): for ops whose
/// operands must agree in shape.
pub(crate) fn all_materialized(
    inputs: &[Tensor],
    batched: &[bool],
    size: i64,
) -> Result<Vec<Tensor>> {
    inputs
        .iter()
        .zip(batched)
        .map(|(t, &b)| materialized(t, b, size))
        .collect()
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

/// Replays `graph` on parameters that may carry the batch axis, applying
/// each op's rule where an input does and the op itself where none does.
/// `Err(op)` names the first op on batched values without a rule. What
/// `vmap` runs, and what ops holding graphs (`cond`, `call`) batch with.
pub(crate) fn replay(
    graph: &Graph,
    params: Vec<(Tensor, bool)>,
    size: i64,
) -> Result<std::result::Result<Vec<(Tensor, bool)>, &'static str>> {
    let mut values: std::collections::HashMap<ValueId, (Tensor, bool)> =
        graph.params().iter().copied().zip(params).collect();
    for node in graph.nodes() {
        let ins: Vec<(Tensor, bool)> = node.inputs.iter().map(|v| values[v].clone()).collect();
        let tensors: Vec<Tensor> = ins.iter().map(|(t, _)| t.clone()).collect();
        let flags: Vec<bool> = ins.iter().map(|(_, b)| *b).collect();
        let outs = if flags.contains(&true) {
            match node.op.batch(&tensors, &flags, size) {
                Some(outs) => outs?,
                None => return Ok(Err(node.op.name())),
            }
        } else {
            let refs: Vec<&Tensor> = tensors.iter().collect();
            apply(node.op.clone(), &refs)?
                .into_iter()
                .map(|t| (t, false))
                .collect()
        };
        values.extend(node.outputs.iter().copied().zip(outs));
    }
    Ok(Ok(graph
        .results()
        .iter()
        .map(|r| values[r].clone())
        .collect()))
}

/// [`replay`] inside another op's rule: an op without a rule there makes
/// the whole function fall back (`None`).
pub(crate) fn replay_in_rule(
    graph: &Graph,
    params: Vec<(Tensor, bool)>,
    size: i64,
) -> Option<Result<Vec<(Tensor, bool)>>> {
    match replay(graph, params, size) {
        Ok(Ok(outs)) => Some(Ok(outs)),
        Ok(Err(_)) => None,
        Err(e) => Some(Err(e)),
    }
}

/// Index vectors (`[..., k]`, the last axis the coordinates) with each
/// example's own index prepended as a first coordinate (`[B, ..., k + 1]`):
/// how `gather_nd` and `scatter_nd` reach into a batched operand.
pub(crate) fn with_batch_coordinate(indices: &Tensor, batched: bool, size: i64) -> Result<Tensor> {
    let idx = materialized(indices, batched, size)?;
    let mut dims = idx.dims();
    let last = dims.len() - 1;
    dims[last] = 1;
    let coordinate = Tensor::iota(&dims, 0, idx.dtype())?;
    Tensor::concat(&[coordinate, idx], last as i64)
}

/// Which of `graph`'s values carry the batch axis when its parameters do
/// as `params` say, by dependence: a value is batched when any input of
/// the node making it is. Rules never batch more than that (an op on
/// unbatched inputs runs unbatched), so a value this calls unbatched is
/// unbatched in the replay; one it calls batched may come out of a rule
/// unbatched, and is then materialized where a batched one is needed.
/// Indexed by `ValueId`. What a loop's rule uses to find its batched
/// carries before it replays anything.
pub(crate) fn batched_values(graph: &Graph, params: &[bool]) -> Vec<bool> {
    let mut flags = vec![false; graph.num_values()];
    for (p, &b) in graph.params().iter().zip(params) {
        flags[p.0 as usize] = b;
    }
    for node in graph.nodes() {
        let any = node.inputs.iter().any(|v| flags[v.0 as usize]);
        for v in &node.outputs {
            flags[v.0 as usize] = any;
        }
    }
    flags
}
