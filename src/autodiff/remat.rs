//! Layer: autodiff. Rematerialization: `tf.recompute_grad` /
//! `jax.checkpoint` around a block. The block's activations are not kept
//! for the backward pass; its gradient runs the block again from its
//! inputs and differentiates that run. Deep stacks trade one more forward
//! pass per block for memory that no longer grows with their depth.
//!
//! Built from [`custom_gradient`] (the forward run is not recorded, so
//! no tape keeps its values) and two guards that keep XLA from merging
//! the rerun with the forward run (CSE) or scheduling it before the
//! backward pass needs it: an [`optimization_barrier`] holding the
//! block's inputs with the arriving cotangents (what JAX's
//! `jax.checkpoint` relies on; XLA's GPU compiler keeps it until
//! scheduling), and, because XLA's CPU compiler drops barriers before
//! CSE, inputs tied to the cotangents by data: each float input minus a
//! zero made from one cotangent element, which changes no bit. With both,
//! a deep stack's compiled training step plans 2.6x fewer temporary bytes
//! on the CPU plugin (`tests/remat.rs`, from the compiled program's memory
//! statistics, [`crate::runtime::Executable::memory_stats`]). Variables
//! the block reads are given explicitly, as TensorFlow's `variables=`:
//! their reads enter the custom op as inputs, so an outer tape's
//! gradients for them flow through the rerun.
//!
//! Imports `ops::custom_gradient`, `ops::barrier`, `tensor`, `variable`
//! and the tape.

use super::{GradientTape, Source};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::barrier::optimization_barrier;
use crate::ops::custom_gradient::custom_gradient;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::sync::Arc;

/// A block body: tensors in, tensors out.
pub type Block = Arc<dyn Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync>;

/// Wraps `f` so that gradients through it recompute its activations
/// instead of storing them (`tf.recompute_grad`, `jax.checkpoint`). The
/// wrapper takes the block's inputs and the variables `f` reads (those
/// it is to give gradients for: usually `block.trainable_variables()`);
/// its results and gradients are `f`'s.
///
/// ```
/// use xlafn::prelude::*;
/// let w = Variable::new(Tensor::vector(&[0.5f32, -1.0])?);
/// let block = {
///     let w = w.clone();
///     xlafn::recompute_grad(move |xs: &[Tensor]| Ok(vec![xs[0].mul(&w.read())?.tanh()?]))
/// };
/// let x = Tensor::vector(&[1f32, 2.0])?;
/// let tape = GradientTape::new();
/// let y = block(&[x.clone()], &[w.clone()])?.remove(0).reduce_sum(&[], false)?;
/// let g = tape.gradient(&y, &[(&w).into()])?.remove(0).unwrap();
/// // d/dw sum(tanh(x w)) = x (1 - tanh(x w)^2)
/// let want: Vec<f32> = [(1f32, 0.5f32), (2.0, -1.0)]
///     .iter().map(|(x, w)| x * (1.0 - (x * w).tanh().powi(2))).collect();
/// let got = g.to_vec::<f32>()?;
/// assert!((got[0] - want[0]).abs() < 1e-6 && (got[1] - want[1]).abs() < 1e-6);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn recompute_grad<F>(
    f: F,
) -> impl Fn(&[Tensor], &[Variable]) -> Result<Vec<Tensor>> + Clone + Send + Sync + 'static
where
    F: Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
{
    let f: Block = Arc::new(f);
    move |xs: &[Tensor], variables: &[Variable]| call(&f, xs, variables)
}

/// One call: the inputs, then one read of each variable, enter a custom
/// gradient whose body runs the block unrecorded.
fn call(f: &Block, xs: &[Tensor], variables: &[Variable]) -> Result<Vec<Tensor>> {
    if xs.is_empty() {
        return Err(Error::invalid(
            "recompute_grad",
            "the block needs at least one input tensor",
        ));
    }
    let n = xs.len();
    let mut inputs = xs.to_vec();
    for v in variables {
        inputs.push(v.try_read()?);
    }
    let (body, variables) = (f.clone(), variables.to_vec());
    let wrapped = custom_gradient(move |all: &[Tensor]| {
        let ys = body(&all[..n])?;
        let (rerun, variables) = (body.clone(), variables.clone());
        let xs = all[..n].to_vec();
        let grad = move |dys: &[Tensor]| rerun_gradient(&rerun, &xs, &variables, dys);
        Ok((ys, grad))
    });
    wrapped(&inputs)
}

/// The gradient of one call: the block run again from its inputs held
/// behind a barrier with the cotangents, differentiated under its own
/// tape; one gradient per input, then one per variable.
fn rerun_gradient(
    f: &Block,
    xs: &[Tensor],
    variables: &[Variable],
    dys: &[Tensor],
) -> Result<Vec<Option<Tensor>>> {
    let n = xs.len();
    let held: Vec<&Tensor> = xs.iter().chain(dys).collect();
    let held = optimization_barrier(&held)?;
    let (xs, dys) = held.split_at(n);
    let xs = &tied_to_cotangents(xs, dys)?;
    let tape = GradientTape::new();
    xs.iter().for_each(|x| tape.watch(x));
    let ys = f(xs)?;
    if ys.len() != dys.len() {
        return Err(Error::invalid(
            "recompute_grad",
            format!(
                "the block gave {} results when run again for its gradient, {} the first time",
                ys.len(),
                dys.len()
            ),
        ));
    }
    // sum(y * dy) over the results: its gradient is the vector-Jacobian
    // product with the arriving cotangents.
    let mut total: Option<Tensor> = None;
    for (y, dy) in ys.iter().zip(dys) {
        if !y.dtype().is_float() {
            continue;
        }
        let wide = if y.dtype() == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let term = y.mul(dy)?.reduce_sum(&[], false)?.cast(wide)?;
        total = Some(match total {
            Some(t) if t.dtype() != term.dtype() => {
                t.cast(DType::F64)?.add(&term.cast(DType::F64)?)?
            }
            Some(t) => t.add(&term)?,
            None => term,
        });
    }
    let Some(total) = total else {
        return Ok(vec![None; n + variables.len()]);
    };
    let mut sources: Vec<Source> = xs.iter().map(Source::Tensor).collect();
    sources.extend(variables.iter().map(Source::Variable));
    tape.gradient(&total, &sources)
}

/// The rerun's inputs made to depend on the cotangents: each float input
/// minus a zero computed from one cotangent element. XLA's CPU compiler
/// drops optimization barriers before CSE; without this the rerun starts
/// from the very values the forward run did, CSE merges the two, and the
/// forward activations are kept after all. `x - 0.0` is `x` bit for bit
/// (a `-0.0` stays `-0.0`, a NaN stays NaN), and the zero is made with a
/// `select` so that an infinite or NaN cotangent still gives `0.0`.
fn tied_to_cotangents(xs: &[Tensor], dys: &[Tensor]) -> Result<Vec<Tensor>> {
    let Some(dy) = dys.iter().find(|d| d.dtype().is_float() && d.size() != 0) else {
        return Ok(xs.to_vec());
    };
    let first = dy.reshape(&[-1])?.slice(&[0], &[1])?.reshape(&[])?;
    let zero = Tensor::zeros_like(&first)?;
    let finite = first.is_finite()?;
    let zero = finite.where_(&first, &zero)?.mul_scalar(0.0)?;
    xs.iter()
        .map(|x| {
            if x.dtype().is_float() {
                x.sub(&zero.cast(x.dtype())?)
            } else {
                Ok(x.clone())
            }
        })
        .collect()
}
