//! Forward mode as a replay: `jvp(f)` traces `f` once into a region graph
//! and replays it carrying a tangent beside each value, as JAX's `jvp`
//! interprets a function (`vmap` replays the same way with batching
//! rules).
//!
//! Each op's tangent is its VJP transposed, locally: the VJP `g(u) = Jᵀu`
//! is linear in the cotangent `u`, so `J t = d/du ⟨g(u), t⟩`, computed by a
//! tape around the op's own `vjp` rule. Traced, XLA keeps what `J t` needs
//! and drops the rest, so for straight-line code this is the program a
//! JVP rule per op would give. Ops that hold programs get rules of their
//! own, because transposing their gradient would build the gradient's
//! machinery (a `while` gradient records states and walks them back):
//! - `while`: one loop carrying each value's tangent beside it (the body
//!   replayed in forward mode), as a hand-written forward-mode recurrence;
//! - `cond`: a `cond` of the branches replayed in forward mode;
//! - `call`: the callee replayed.
//!
//! Layer: autodiff. Imports `ir` (graphs), `ops` (the rules and the region
//! ops), `control` (the loops and conds it builds), `tensor`, `tape`.

use super::tape::GradientTape;
use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::ops::control::{Cond, Region, While};
use crate::ops::{Op, OpDef};
use crate::tensor::{Tensor, apply};
use std::collections::HashMap;

/// A value and its tangent (`None`: zero).
pub(crate) type Dual = (Tensor, Option<Tensor>);

/// Replays `graph` on `params`, each with its tangent, and returns its
/// results with theirs.
pub(crate) fn replay(graph: &Graph, params: Vec<Dual>) -> Result<Vec<Dual>> {
    let mut values: HashMap<ValueId, Dual> = graph.params().iter().copied().zip(params).collect();
    for node in graph.nodes() {
        let ins: Vec<Dual> = node.inputs.iter().map(|v| values[v].clone()).collect();
        let outs = node_jvp(&node.op, ins)?;
        values.extend(node.outputs.iter().copied().zip(outs));
    }
    Ok(graph.results().iter().map(|r| values[r].clone()).collect())
}

/// One op on duals.
fn node_jvp(op: &Op, ins: Vec<Dual>) -> Result<Vec<Dual>> {
    let (inputs, tangents): (Vec<Tensor>, Vec<Option<Tensor>>) = ins.into_iter().unzip();
    if tangents.iter().all(Option::is_none) {
        let refs: Vec<&Tensor> = inputs.iter().collect();
        return Ok(apply(op.clone(), &refs)?
            .into_iter()
            .map(|t| (t, None))
            .collect());
    }
    match op {
        Op::While(w) if w.record.is_none() => while_jvp(w, &inputs, &tangents),
        Op::Cond(c) => cond_jvp(c, &inputs, &tangents),
        Op::Call(c) => {
            let params = inputs.into_iter().zip(tangents).collect();
            let mut outs = replay(&c.graph, params)?;
            outs.truncate(c.num_outputs);
            Ok(outs)
        }
        _ => transposed(op, &inputs, &tangents),
    }
}

/// The op applied, and its outputs' tangents from its VJP transposed.
fn transposed(op: &Op, inputs: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Vec<Dual>> {
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let outputs = apply(op.clone(), &refs)?;
    let tape = GradientTape::new();
    let cotangents: Vec<Option<Tensor>> = outputs
        .iter()
        .map(|o| {
            if !o.dtype().is_inexact() {
                return Ok(None);
            }
            // Any value works: the VJP is linear in it.
            let u = o.ones_like()?;
            tape.watch(&u);
            Ok(Some(u))
        })
        .collect::<Result<_>>()?;
    let needed: Vec<bool> = tangents.iter().map(Option::is_some).collect();
    let grads = op.vjp_needed(inputs, &outputs, &cotangents, &needed)?;
    let mut pairing: Option<Tensor> = None;
    for (g, t) in grads.iter().zip(tangents) {
        if let (Some(g), Some(t)) = (g, t) {
            let term = g.mul(&t.cast(g.dtype())?)?.reduce_sum(&[], false)?;
            pairing = Some(match pairing {
                Some(p) => p.add(&term)?,
                None => term,
            });
        }
    }
    let sources: Vec<&Tensor> = cotangents.iter().flatten().collect();
    let out_tangents = match pairing {
        Some(p) if !sources.is_empty() => {
            let s: Vec<super::Source<'_>> = sources.iter().map(|u| (*u).into()).collect();
            tape.gradient(&p, &s)?
        }
        _ => vec![None; sources.len()],
    };
    let mut found = out_tangents.into_iter();
    Ok(outputs
        .into_iter()
        .zip(&cotangents)
        .map(|(o, u)| {
            let t = if u.is_some() {
                found.next().flatten()
            } else {
                None
            };
            (o, t)
        })
        .collect())
}

/// Only float values carry tangents.
fn differentiable(t: &crate::ir::TensorType) -> bool {
    t.dtype.is_inexact()
}

/// A `while` in forward mode: one loop over the values and the tangents of
/// those that carry one (found by dependence, to a fixed point).
fn while_jvp(w: &While, inputs: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Vec<Dual>> {
    let n = w.loop_types.len();
    let has: Vec<bool> = tangents.iter().map(Option::is_some).collect();
    let carried = w.carries_reached(&has, differentiable);
    let mut init: Vec<Tensor> = inputs[..n].to_vec();
    for k in (0..n).filter(|&k| carried[k]) {
        init.push(match &tangents[k] {
            Some(t) => t.clone(),
            None => inputs[k].zeros_like()?,
        });
    }
    let captured = |region: &Region| -> Vec<Dual> {
        region
            .captures
            .iter()
            .map(|&i| (inputs[i].clone(), tangents[i].clone()))
            .collect()
    };
    let state = crate::control::counted_while_loop(
        |state: &Vec<Tensor>| -> Result<Tensor> {
            let mut params: Vec<Dual> = state[..n].iter().map(|t| (t.clone(), None)).collect();
            params.extend(captured(&w.cond).into_iter().map(|(t, _)| (t, None)));
            Ok(replay(&w.cond.graph, params)?.remove(0).0)
        },
        |state: Vec<Tensor>| -> Result<Vec<Tensor>> {
            let mut tangent = state[n..].iter();
            let mut params: Vec<Dual> = state[..n]
                .iter()
                .zip(&carried)
                .map(|(t, &c)| (t.clone(), c.then(|| tangent.next().cloned()).flatten()))
                .collect();
            params.extend(captured(&w.body));
            let outs = replay(&w.body.graph, params)?;
            let mut next: Vec<Tensor> = outs.iter().map(|(t, _)| t.clone()).collect();
            for ((value, t), _) in outs.iter().zip(&carried).filter(|(_, c)| **c) {
                next.push(match t {
                    Some(t) => t.clone(),
                    None => value.zeros_like()?,
                });
            }
            Ok(next)
        },
        init,
        w.trip_count,
        w.hidden_values,
    )?;
    let (values, loop_tangents) = state.split_at(n);
    let mut loop_tangents = loop_tangents.iter();
    Ok(values
        .iter()
        .zip(&carried)
        .map(|(v, &c)| {
            (
                v.clone(),
                c.then(|| loop_tangents.next().cloned()).flatten(),
            )
        })
        .collect())
}

/// A `cond` in forward mode: a `cond` of the branches replayed in forward
/// mode, each returning the values and the tangents either branch has.
fn cond_jvp(c: &Cond, inputs: &[Tensor], tangents: &[Option<Tensor>]) -> Result<Vec<Dual>> {
    let has: Vec<bool> = tangents.iter().map(Option::is_some).collect();
    let then_t = c.then_branch.reached(&[], &has, differentiable);
    let else_t = c.else_branch.reached(&[], &has, differentiable);
    let carried: Vec<bool> = then_t.iter().zip(&else_t).map(|(a, b)| *a || *b).collect();
    let n = carried.len();
    let branch = |region: &Region| -> Result<Vec<Tensor>> {
        let params: Vec<Dual> = region
            .captures
            .iter()
            .map(|&i| (inputs[i].clone(), tangents[i].clone()))
            .collect();
        let outs = replay(&region.graph, params)?;
        let mut flat: Vec<Tensor> = outs.iter().map(|(t, _)| t.clone()).collect();
        for ((value, t), _) in outs.iter().zip(&carried).filter(|(_, c)| **c) {
            flat.push(match t {
                Some(t) => t.clone(),
                None => value.zeros_like()?,
            });
        }
        Ok(flat)
    };
    let outs: Vec<Tensor> = crate::control::cond(
        &inputs[0],
        || branch(&c.then_branch),
        || branch(&c.else_branch),
    )?;
    let (values, cond_tangents) = outs.split_at(n);
    let mut cond_tangents = cond_tangents.iter();
    Ok(values
        .iter()
        .zip(&carried)
        .map(|(v, &c)| {
            (
                v.clone(),
                c.then(|| cond_tangents.next().cloned()).flatten(),
            )
        })
        .collect())
}
