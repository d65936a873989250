//! Layer: autodiff. Reverse-mode gradients with a `GradientTape`, like
//! TensorFlow's.
//!
//! While a tape records, every op applied on this thread (eagerly, or
//! inside a trace, including the ops of nested functions, which are
//! inlined there) is noted with its input and output tensors, and so is
//! every variable read. An eager call of a `Function` is noted as one
//! `call` op: it runs compiled, and its vector-Jacobian product is a
//! compiled backward function of the same graph (`call_rule`). `gradient`
//! walks the notes backwards applying each op's vector-Jacobian product:
//! `OpDef::vjp`, defined next to the op, except for the region ops `cond`,
//! `while` and `shard_map`, whose rules are here (`region_rules`).
//! Because the rules are written with tensor ops, the same walk computes
//! gradients eagerly, builds the backward graph inside the graph being
//! traced (so a whole training step is one XLA program), and is itself
//! recorded by an enclosing tape (higher-order gradients).
//!
//! Integer and boolean values have no gradient: asking for one gives
//! `None`, as does asking for a source the target does not depend on, or
//! an eager tensor that was never watched (TensorFlow's rules). Gradients
//! flow through `cond` (a `cond` of the branches' gradients) and
//! `while_loop`/`for_range` (a backward loop over states recomputed from
//! checkpoints, see `while_grad`); host callbacks have no
//! gradient rule (an error names the op).

mod call_rule;
mod cotangent;
mod forward;
mod forward_replay;
mod jacobian;
mod region_rules;
mod remat;
mod tape;
mod while_grad;
mod while_rows;

use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::tensor::{Tensor, recompute_with};
use std::collections::HashMap;

/// The gradients of a region's results (weighted by `out_grads`) with
/// respect to `wrt`, computed by replaying the region on `inputs` under a
/// tape: the building block of control-flow gradients. Missing gradients
/// are zeros, so every branch of a `cond` yields the same structure.
pub(crate) fn region_gradients(
    graph: &Graph,
    inputs: &[Tensor],
    wrt: &[Tensor],
    out_grads: &[Option<Tensor>],
) -> Result<Vec<Tensor>> {
    let none = Default::default();
    let (_, grads) = region_gradients_with(graph, inputs, &none, wrt, &|_| Ok(out_grads.to_vec()))?;
    Ok(grads)
}

/// The weights of a region's results, from the replayed results.
pub(crate) type ResultWeights<'a> = dyn Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + 'a;

/// [`region_gradients`] with the results' weights computed from the
/// replayed results (a loop gradient slices its weights at an index the
/// body computes) and some of the region's values `provided` rather than
/// recomputed (see `tensor::recompute_with`); returns the replayed
/// results too.
pub(crate) fn region_gradients_with(
    graph: &Graph,
    inputs: &[Tensor],
    provided: &HashMap<ValueId, Tensor>,
    wrt: &[Tensor],
    out_grads: &ResultWeights<'_>,
) -> Result<(Vec<Tensor>, Vec<Tensor>)> {
    let tape = GradientTape::new();
    wrt.iter().for_each(|t| tape.watch(t));
    let refs: Vec<&Tensor> = inputs.iter().collect();
    let outs = recompute_with(graph, &refs, provided)?;
    let out_grads = out_grads(&outs)?;
    let mut total: Option<Tensor> = None;
    for (o, g) in outs.iter().zip(&out_grads) {
        let (Some(g), true) = (g, o.dtype().is_inexact()) else {
            continue;
        };
        // A complex result pairs with its gradient as Re(o * g) (JAX's
        // convention, see `ops::complex`).
        let term = o.mul(g)?.reduce_sum(&[], false)?.real()?;
        total = Some(match total {
            Some(t) => t.add(&term)?,
            None => term,
        });
    }
    let Some(total) = total else {
        let zeros = wrt.iter().map(Tensor::zeros_like).collect::<Result<_>>()?;
        return Ok((outs, zeros));
    };
    let sources: Vec<Source> = wrt.iter().map(Source::from).collect();
    let grads = tape.gradient(&total, &sources)?;
    let grads = grads
        .into_iter()
        .zip(wrt)
        .map(|(g, x)| g.map_or_else(|| x.zeros_like(), Ok))
        .collect::<Result<_>>()?;
    Ok((outs, grads))
}

pub use forward::{ForwardAccumulator, hessian, hvp, jvp};
pub use jacobian::UnconnectedGradients;
pub use remat::recompute_grad;
pub use tape::{GradientTape, Source};
