//! The batching rule of a custom-gradient op: `vmap` of a function with
//! a custom gradient keeps the user's gradient. Registered into
//! `tensor::hooks` with the `while` rule, which `CustomGradient::batch`
//! calls.
//!
//! Layer: vmap. Imports `ops::custom_gradient` (the op, its body and the
//! user's gradients), `ops::batching`, `tensor`, `trace` and `error`.

use super::vmap_with;
use crate::error::Result;
use crate::ops::batching::materialized;
use crate::ops::custom_gradient::{CustomBody, CustomGradient, GradFn, user_gradients};
use crate::tensor::{Tensor, apply};
use std::sync::Arc;

/// The rule: the body's results (already replayed batched) pass through a
/// new custom-gradient op whose gradient function is the user's, mapped
/// over the examples, so a tape outside the `vmap` still never
/// differentiates the body.
pub(crate) fn batch_custom_gradient(
    op: &CustomGradient,
    inputs: &[Tensor],
    batched: &[bool],
    size: i64,
) -> Result<Vec<(Tensor, bool)>> {
    let n = op.num_inputs;
    let xs = &inputs[..n];
    let ys = inputs[n..]
        .iter()
        .zip(&batched[n..])
        .map(|(y, &b)| materialized(y, b, size))
        .collect::<Result<Vec<_>>>()?;
    let in_axes: Vec<Option<i64>> = batched[..n].iter().map(|&b| b.then_some(0)).collect();
    let body = op.body().clone();
    let axes = in_axes.clone();
    let batched_body: CustomBody = Arc::new(move |xs: &[Tensor]| {
        let forward = |ex: &[Tensor]| Ok(body(ex)?.0);
        let ys = vmap_with(forward, xs, &axes, 0)?;
        Ok((ys, mapped_grad_fn(body.clone(), xs, &axes)))
    });
    let grad_fn = mapped_grad_fn(op.body().clone(), xs, &in_axes);
    let op = CustomGradient::with_first_run(n, batched_body, xs, grad_fn);
    // Unlike a call's body, the replayed body was recorded by any
    // tape: the op's results must be new tensors, so that gradients
    // reach them through the op alone (an identity when run).
    let all: Vec<&Tensor> = xs.iter().chain(&ys).collect();
    let outs = if crate::trace::is_tracing() || crate::tensor::hooks::recording() {
        apply(op, &all)?
    } else {
        ys
    };
    Ok(outs.into_iter().map(|y| (y, true)).collect())
}

/// The gradient function of a batched custom-gradient op: the body's
/// gradient function for each example (`vmap`), on the examples of `xs`
/// (`in_axes`) and of the arriving gradients; an input every example
/// shares gets the sum of the examples' gradients, as it would in a loop.
fn mapped_grad_fn(body: CustomBody, xs: &[Tensor], in_axes: &[Option<i64>]) -> GradFn {
    let xs = xs.to_vec();
    let in_axes = in_axes.to_vec();
    Arc::new(move |dys: &[Tensor]| {
        let n = xs.len();
        let per_example = |args: &[Tensor]| -> Result<Vec<Tensor>> {
            let (xs, dys) = args.split_at(n);
            let (_, grad) = body(xs)?;
            user_gradients(&grad, dys, n)?
                .into_iter()
                .zip(xs)
                .map(|(g, x)| g.map_or_else(|| x.zeros_like(), Ok))
                .collect()
        };
        let args: Vec<Tensor> = xs.iter().chain(dys).cloned().collect();
        let mut axes = in_axes.clone();
        axes.extend(std::iter::repeat_n(Some(0), dys.len()));
        let grads = vmap_with(per_example, &args, &axes, 0)?;
        grads
            .into_iter()
            .zip(&xs)
            .zip(&in_axes)
            .map(|((g, x), axis)| {
                if !x.dtype().is_inexact() {
                    return Ok(None);
                }
                match axis {
                    Some(_) => Ok(Some(g)),
                    None => g.reduce_sum(&[0], false).map(Some),
                }
            })
            .collect()
    })
}
