//! What a forward `while` traced under a recording tape keeps for its
//! gradient: which loop values its state record holds, and how many slots
//! fit the memory budget. The gradient that reads the record is
//! `autodiff::while_grad`; the lowering that writes it is
//! `While::lower_recording_body`.
//!
//! Layer: ops (imports `ir`, `dtype`, `ops::Op`).

use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Graph, TensorType, ValueId};
use crate::ops::Op;

/// Bytes of recorded loop states a `while` gradient may hold.
const STATE_BYTES: i64 = 64 << 20;
/// Most states a `while` gradient keeps.
const MAX_STATES: i64 = 256;
/// Most slots of a forward loop's state record: the states plus a spare.
pub(crate) const MAX_RECORD_SLOTS: i64 = MAX_STATES + 1;

/// Which loop values a state record keeps. A loop value the body only
/// writes into (a `TensorArray` collecting outputs: used only as the
/// target of `dynamic_update_slice`s whose results become that same loop
/// value, and not read by the condition) is left out: no gradient needs
/// its earlier values, and recording it would copy the whole array every
/// iteration. The backward replay gets its final value in its place.
pub(crate) fn recorded_values(body: &Graph, cond: &Graph, n: usize) -> Vec<bool> {
    let mut uses: Vec<Vec<(usize, usize)>> = vec![Vec::new(); body.num_values()];
    for (i, node) in body.nodes().iter().enumerate() {
        for (pos, v) in node.inputs.iter().enumerate() {
            uses[v.0 as usize].push((i, pos));
        }
    }
    let cond_uses: Vec<bool> = {
        let mut used = vec![false; cond.num_values()];
        for node in cond.nodes() {
            node.inputs.iter().for_each(|v| used[v.0 as usize] = true);
        }
        cond.results()
            .iter()
            .for_each(|v| used[v.0 as usize] = true);
        used
    };
    (0..n)
        .map(|i| {
            let read_by_cond = cond.params().get(i).is_none_or(|p| cond_uses[p.0 as usize]);
            read_by_cond || !only_written_into(body, &uses, body.params()[i], i)
        })
        .collect()
}

/// Is `v` used only as the target of `dynamic_update_slice`s whose results
/// are, in turn, only so used or returned as loop value `slot`?
fn only_written_into(body: &Graph, uses: &[Vec<(usize, usize)>], v: ValueId, slot: usize) -> bool {
    let returned: Vec<usize> = (0..body.results().len())
        .filter(|&r| body.results()[r] == v)
        .collect();
    if returned.iter().any(|&r| r != slot) {
        return false;
    }
    uses[v.0 as usize].iter().all(|&(node, pos)| {
        let node = &body.nodes()[node];
        pos == 0
            && matches!(node.op, Op::DynamicUpdateSlice(_))
            && only_written_into(body, uses, node.outputs[0], slot)
    })
}

/// The slots of the state record a forward loop over values of `types`
/// should keep (see `While::record`), or `None` when the states do not fit
/// (or their shapes are not fully known, or a static count exceeds the
/// budget): then the gradient reruns the loop.
pub(crate) fn record_slots(types: &[TensorType], trip_count: Option<i64>) -> Option<i64> {
    let shapes: Option<Vec<(Vec<i64>, DType)>> = types
        .iter()
        .map(|t| Some((t.shape.as_known()?, t.dtype)))
        .collect();
    let slots = budget_slots(&shapes?).ok()??;
    match trip_count {
        Some(t) if t <= slots => Some(t.max(1)),
        Some(_) => None,
        None => Some(slots + 1),
    }
}

/// How many states of these shapes fit in the budget (`None`: below two).
pub(crate) fn budget_slots(shapes: &[(Vec<i64>, DType)]) -> Result<Option<i64>> {
    let mut bytes = 0i64;
    for (dims, dtype) in shapes {
        let n: i64 = dims.iter().product();
        bytes = bytes.saturating_add(n.saturating_mul(dtype.size_in_bytes()? as i64));
    }
    let slots = (STATE_BYTES / bytes.max(1)).min(MAX_STATES);
    Ok((slots >= 2).then_some(slots))
}
