//! Layer: ops. `optimization_barrier` (`jax.lax.optimization_barrier`):
//! its operands again, unchanged, as values XLA's passes may not look
//! through. Rematerialization needs it: a recomputation of a block from
//! barrier outputs cannot be merged (CSE) with the forward computation
//! it repeats, nor hoisted ahead of the values the barrier also holds.
//!
//! Imports `ir`, `lower::emitter`, `dtype`, `error`, `tensor`, `trace`.

use super::OpDef;
use super::batching;
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply};

/// The operands, unchanged, behind a barrier.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OptimizationBarrier {}

impl OpDef for OptimizationBarrier {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        // Each output is its input, batched as it was.
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let outs = crate::tensor::apply(self.clone(), &refs);
        Some(outs.map(|o| o.into_iter().zip(batched.iter().copied()).collect()))
    }

    fn name(&self) -> &'static str {
        "optimization_barrier"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.is_empty() {
            return Err(Error::invalid(self.name(), "needs at least one operand"));
        }
        Ok(inputs.to_vec())
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let xs: Vec<&Val> = inputs.iter().collect();
        Ok(cx.optimization_barrier(&xs))
    }

    /// The cotangents pass through, behind a barrier of their own (as
    /// JAX transposes it), so the backward pass keeps the same ordering.
    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let flowing: Vec<&Tensor> = inputs
            .iter()
            .zip(grads)
            .filter(|(x, _)| x.dtype().is_inexact())
            .filter_map(|(_, g)| g.as_ref())
            .collect();
        let mut behind = match flowing.is_empty() {
            true => Vec::new(),
            false => optimization_barrier(&flowing)?,
        }
        .into_iter();
        Ok(inputs
            .iter()
            .zip(grads)
            .map(|(x, g)| match (x.dtype().is_inexact(), g) {
                (true, Some(_)) => behind.next(),
                _ => None,
            })
            .collect())
    }
}

/// `xs` again, behind a barrier XLA does not optimize across
/// (`jax.lax.optimization_barrier`). Inside a traced function it is one
/// `stablehlo.optimization_barrier`; eagerly, where each op is its own
/// program, there is nothing to keep apart and the tensors come back as
/// they are.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|x: Tensor| -> Result<Tensor> {
///     let held = xlafn::optimization_barrier(&[&x])?;
///     held[0].exp()
/// });
/// let x = Tensor::scalar(0f32);
/// assert_eq!(f.call((&x,))?.item::<f32>()?, 1.0);
/// let spec = xlafn::ArraySpec::new(DType::F32, &[]);
/// let text = f.get_concrete_function((&x,))?.stablehlo(&[spec])?;
/// assert!(text.contains("stablehlo.optimization_barrier"));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn optimization_barrier(xs: &[&Tensor]) -> Result<Vec<Tensor>> {
    if !crate::trace::is_tracing() {
        if xs.is_empty() {
            return Err(Error::invalid(
                "optimization_barrier",
                "needs at least one operand",
            ));
        }
        return Ok(xs.iter().map(|x| (*x).clone()).collect());
    }
    apply(OptimizationBarrier {}, xs)
}
