//! Layer: autodiff. The gradient rules of the region ops (`cond`,
//! `while`, `shard_map`): written with the control flow, the sharding and
//! the region gradients they differentiate, which all sit above the op
//! definitions, so they live here and not beside their ops. A tape
//! registers [`region_vjp`] with its recorder (`tensor::hooks`); each
//! region op's `OpDef::vjp_needed` calls what is registered, so the op's
//! definition still answers for its gradient, as every other op's does.
//!
//! Imports `ops` (the region ops' definitions), `control` (`cond`),
//! `sharding` (`shard_map`), `tensor`, and `while_grad` beside it.

use super::while_grad::LoopGradient;
use crate::error::Result;
use crate::ops::control::{Cond, Region, While};
use crate::ops::shard_map::ShardMap;
use crate::sharding::PartitionSpec;
use crate::tensor::Tensor;
use crate::tensor::hooks::RegionOp;

/// The gradients of a region op's inputs for which `needed` is set (the
/// others may be `None`), from its inputs, outputs and the gradients at
/// its outputs.
pub(crate) fn region_vjp(
    op: RegionOp<'_>,
    inputs: &[Tensor],
    outputs: &[Tensor],
    grads: &[Option<Tensor>],
    needed: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    match op {
        RegionOp::Cond(cond) => cond_vjp(cond, inputs, outputs, grads),
        RegionOp::While(w) => while_vjp(w, inputs, outputs, grads, needed),
        RegionOp::ShardMap(map) => shard_map_vjp(map, inputs, outputs, grads),
    }
}

/// The gradient of a `cond` is a `cond` of the branches' gradients:
/// each branch is replayed under a tape with respect to the captured
/// values (zeros for the ones it does not use).
fn cond_vjp(
    op: &Cond,
    inputs: &[Tensor],
    _outputs: &[Tensor],
    grads: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    // Each distinct float input once: a value captured by both branches
    // appears twice among the inputs but must get its gradient once.
    let mut float: Vec<usize> = Vec::new();
    for i in 1..inputs.len() {
        if inputs[i].dtype().is_inexact()
            && !float.iter().any(|&j| inputs[j].key() == inputs[i].key())
        {
            float.push(i);
        }
    }
    let wrt: Vec<Tensor> = float.iter().map(|&i| inputs[i].clone()).collect();
    let branch = |region: &Region| -> Result<Vec<Tensor>> {
        let region_inputs: Vec<Tensor> =
            region.captures.iter().map(|&i| inputs[i].clone()).collect();
        super::region_gradients(&region.graph, &region_inputs, &wrt, grads)
    };
    let branch_grads: Vec<Tensor> = crate::control::cond(
        &inputs[0],
        || branch(&op.then_branch),
        || branch(&op.else_branch),
    )?;
    let mut out = vec![None; inputs.len()];
    for (slot, g) in float.into_iter().zip(branch_grads) {
        out[slot] = Some(g);
    }
    Ok(out)
}

/// The gradient of a `while`: a backward loop over the forward states (see
/// `while_grad`).
fn while_vjp(
    op: &While,
    inputs: &[Tensor],
    outputs: &[Tensor],
    grads: &[Option<Tensor>],
    needed: &[bool],
) -> Result<Vec<Option<Tensor>>> {
    LoopGradient::new(op, inputs, needed)?.run(outputs, grads)
}

/// Another shard_map over the same mesh, per device: the body's
/// gradient on the local blocks (JAX's rule without replication
/// checking). A result's cotangent replicated along an axis its spec
/// leaves out reaches every device whole, so it is divided by those
/// axes' size (the transposed `psum`s sum it back); an input's local
/// gradient along axes its spec leaves out is partial, so it is summed
/// over them.
fn shard_map_vjp(
    op: &ShardMap,
    inputs: &[Tensor],
    outputs: &[Tensor],
    grads: &[Option<Tensor>],
) -> Result<Vec<Option<Tensor>>> {
    let wanted: Vec<usize> = (0..inputs.len())
        .filter(|&i| inputs[i].dtype().is_inexact())
        .collect();
    if wanted.is_empty() {
        return Ok(vec![None; inputs.len()]);
    }
    let cotangents: Vec<Tensor> = grads
        .iter()
        .zip(outputs)
        .map(|(g, o)| g.clone().map_or_else(|| o.zeros_like(), Ok))
        .collect::<Result<_>>()?;
    let mut specs = op.in_specs.clone();
    specs.extend(op.out_specs.iter().cloned());
    let grad_specs: Vec<PartitionSpec> = wanted.iter().map(|&i| op.in_specs[i].clone()).collect();
    let all: Vec<&Tensor> = inputs.iter().chain(&cotangents).collect();
    let n = inputs.len();
    let found = crate::sharding::shard_map(&op.mesh, &specs, &grad_specs, &all, |local| {
        let (xs, cts) = local.split_at(n);
        let cts: Vec<Option<Tensor>> = cts
            .iter()
            .zip(&op.out_specs)
            .map(|(ct, spec)| {
                let copies = op.replicas(spec);
                match copies > 1 {
                    true => ct.mul_scalar(1.0 / copies as f64).map(Some),
                    false => Ok(Some(ct.clone())),
                }
            })
            .collect::<Result<_>>()?;
        let wrt: Vec<Tensor> = wanted.iter().map(|&i| xs[i].clone()).collect();
        let local_grads = super::region_gradients(&op.body, xs, &wrt, &cts)?;
        local_grads
            .into_iter()
            .zip(&wanted)
            .map(|(g, &i)| op.sum_partial(g, &op.in_specs[i]))
            .collect()
    })?;
    let mut found = found.into_iter();
    Ok((0..n)
        .map(|i| wanted.contains(&i).then(|| found.next()).flatten())
        .collect())
}
