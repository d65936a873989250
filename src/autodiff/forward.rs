//! Forward mode: Jacobian-vector products (`tf.autodiff.ForwardAccumulator`,
//! `jax.jvp`), and second derivatives (`hvp`, `hessian`).
//!
//! `jvp` replays the function's graph carrying tangents
//! (`forward_replay`, with rules of their own for loops and conds); the
//! accumulator, which follows arbitrary code (variables included), uses
//! the same idea on its tape. A JVP is computed by transposing the VJP
//! rather than by a second rule per op: the VJP `g(u) = Jᵀu` is linear in the cotangent `u`, so
//! `J v = d/du ⟨g(u), v⟩` is the gradient, with respect to `u`, of the
//! backward pass itself. The accumulator holds two tapes: the inner one
//! records the forward computation, the outer one records the inner
//! tape's backward pass (higher-order gradients). Traced, XLA keeps only
//! what `J v` needs: the value of `g` is dead code, and what remains is the
//! forward pass and the transposed backward ops.

use super::jacobian::UnconnectedGradients;
use super::tape::{GradientTape, Source};
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// A primal the accumulator follows.
enum Primal {
    Tensor(Tensor),
    Variable(Variable),
}

impl Primal {
    fn source(&self) -> Source<'_> {
        match self {
            Primal::Tensor(t) => Source::Tensor(t),
            Primal::Variable(v) => Source::Variable(v),
        }
    }

    fn describe(&self) -> (crate::DType, Vec<i64>) {
        match self {
            Primal::Tensor(t) => (t.dtype(), t.dims()),
            Primal::Variable(v) => (v.dtype(), v.dims().to_vec()),
        }
    }
}

/// Computes Jacobian-vector products of everything computed while it
/// lives, along `tangents` of its `primals` (`tf.autodiff.ForwardAccumulator`).
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::autodiff::ForwardAccumulator;
/// // TensorFlow's example: the Hessian-vector product of sum(v ** 3).
/// let v = Variable::new(Tensor::vector(&[1f32, 2.])?);
/// let acc = ForwardAccumulator::new(&[(&v).into()], &[Tensor::vector(&[1f32, 0.])?])?;
/// let tape = GradientTape::new();
/// let loss = v.read().pow(&Tensor::scalar(3f32))?.reduce_sum(&[], false)?;
/// let backward = tape.gradient(&loss, &[(&v).into()])?.remove(0).unwrap();
/// assert_eq!(acc.jvp(&backward)?.unwrap().to_vec::<f32>()?, vec![6., 0.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct ForwardAccumulator {
    // Dropped in this order: the inner tape stops recording first.
    inner: GradientTape,
    outer: GradientTape,
    primals: Vec<Primal>,
    tangents: Vec<Tensor>,
}

impl ForwardAccumulator {
    /// Starts following `primals` (tensors or variables) along `tangents`
    /// (one each, of the primal's dtype and shape).
    pub fn new(primals: &[Source<'_>], tangents: &[Tensor]) -> Result<ForwardAccumulator> {
        let primals: Vec<Primal> = primals
            .iter()
            .map(|p| match p {
                Source::Tensor(t) => Primal::Tensor((*t).clone()),
                Source::Variable(v) => Primal::Variable((*v).clone()),
            })
            .collect();
        check_tangents(
            "ForwardAccumulator",
            primals.iter().map(Primal::describe),
            tangents,
        )?;
        let outer = GradientTape::persistent();
        let inner = GradientTape::persistent();
        for p in &primals {
            if let Primal::Tensor(t) = p {
                inner.watch(t);
            }
        }
        Ok(ForwardAccumulator {
            inner,
            outer,
            primals,
            tangents: tangents.to_vec(),
        })
    }

    /// The JVP of `target` (computed since the accumulator started) along
    /// the tangents: `Σₖ d target / d primalₖ · tangentₖ`, shaped like the
    /// target; `None` when the target does not depend on the primals
    /// (`acc.jvp(target)`).
    pub fn jvp(&self, target: &Tensor) -> Result<Option<Tensor>> {
        self.jvp_with(target, UnconnectedGradients::None)
    }

    /// [`jvp`](ForwardAccumulator::jvp), zeros for an unconnected target
    /// when asked.
    pub fn jvp_with(
        &self,
        target: &Tensor,
        unconnected: UnconnectedGradients,
    ) -> Result<Option<Tensor>> {
        let product = self.transposed_vjp(target)?;
        match (product, unconnected) {
            (Some(p), _) => Ok(Some(p)),
            (None, UnconnectedGradients::None) => Ok(None),
            (None, UnconnectedGradients::Zero) => target.zeros_like().map(Some),
        }
    }

    fn transposed_vjp(&self, target: &Tensor) -> Result<Option<Tensor>> {
        if !target.dtype().is_float() {
            return Ok(None);
        }
        // Accumulators and tapes started inside this one do not see its
        // JVP computation (TensorFlow's nesting rule): inside an inner
        // accumulator, `inner.jvp(outer.jvp(y))` is `None`, while
        // `outer.jvp(inner.jvp(y))` is the second derivative.
        let _inner_ones = super::tape::pause_newer_than(&self.inner);
        // The cotangent: any value works (the VJP is linear in it); its
        // gradient is what the outer tape gives.
        let u = target.ones_like()?;
        self.outer.watch(&u);
        let sources: Vec<Source<'_>> = self.primals.iter().map(Primal::source).collect();
        let vjps = self
            .inner
            .using(|tape| tape.backward(target, &sources, Some(&u)))?;
        let mut pairing: Option<Tensor> = None;
        for (g, v) in vjps.iter().zip(&self.tangents) {
            if let Some(g) = g {
                let term = g.mul(&v.cast(g.dtype())?)?.reduce_sum(&[], false)?;
                pairing = Some(match pairing {
                    Some(p) => p.add(&term)?,
                    None => term,
                });
            }
        }
        let Some(pairing) = pairing else {
            return Ok(None);
        };
        let mut product = self
            .outer
            .using(|tape| tape.backward(&pairing, &[(&u).into()], None))?;
        match product.remove(0) {
            Some(p) => Ok(Some(p)),
            // Connected, but the pairing does not move with u: a zero JVP.
            None => target.zeros_like().map(Some),
        }
    }
}

/// `(f(primals), J·tangents)`: the value and the Jacobian-vector product
/// of `f` at `primals` (`jax.jvp`). A target that does not depend on the
/// primals has a zero JVP. `f` is traced once and its graph replayed in
/// forward mode (a loop becomes one loop carrying the tangents), so it
/// must be pure: a function that assigns a variable is refused (follow
/// it with a [`ForwardAccumulator`] instead).
///
/// ```
/// use xlafn::prelude::*;
/// let x = Tensor::vector(&[1f32, 2., 3.])?;
/// let v = Tensor::vector(&[1f32, 0., 1.])?;
/// let (y, dy) = xlafn::autodiff::jvp(|p| p[0].sin(), &[x.clone()], &[v])?;
/// let want: Vec<f32> = [1f32, 0., 3.].iter().zip([1f32, 0., 1.]).map(|(x, v)| x.cos() * v).collect();
/// assert_eq!(dy.to_vec::<f32>()?, want);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn jvp(
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
    primals: &[Tensor],
    tangents: &[Tensor],
) -> Result<(Tensor, Tensor)> {
    check_tangents(
        "jvp",
        primals.iter().map(|p| (p.dtype(), p.dims())),
        tangents,
    )?;
    let types: Vec<_> = primals.iter().map(Tensor::tensor_type).collect();
    let region = crate::trace::trace_region(&types, &[], |args| Ok(vec![f(&args)?]))?;
    if region.variables.iter().any(|v| v.written) {
        return Err(Error::invalid(
            "jvp",
            "the function assigns a variable; a function differentiated in forward mode must be \
             pure (return the new values, or use a ForwardAccumulator)",
        ));
    }
    let captured = crate::trace::capture_inputs(&region.trace.captures)?;
    let params = primals
        .iter()
        .cloned()
        .zip(tangents.iter().cloned().map(Some))
        .chain(captured.into_iter().map(|t| (t, None)))
        .collect();
    let (y, dy) = super::forward_replay::replay(&region.trace.graph, params)?.remove(0);
    let dy = match dy {
        Some(dy) => dy,
        None => y.zeros_like()?,
    };
    Ok((y, dy))
}

/// Errors unless each tangent has its primal's dtype and shape.
fn check_tangents(
    op: &str,
    primals: impl ExactSizeIterator<Item = (crate::DType, Vec<i64>)>,
    tangents: &[Tensor],
) -> Result<()> {
    if primals.len() != tangents.len() {
        return Err(Error::invalid(
            op,
            format!("{} primals but {} tangents", primals.len(), tangents.len()),
        ));
    }
    for (k, ((dtype, dims), t)) in primals.zip(tangents).enumerate() {
        if (dtype, dims.clone()) != (t.dtype(), t.dims()) {
            return Err(Error::invalid(
                op,
                format!(
                    "tangent {k} must match its primal, {}; got {}",
                    crate::ir::TensorType::known(dtype, &dims),
                    t.tensor_type()
                ),
            ));
        }
    }
    Ok(())
}

/// Hessian-vector products of the scalar `f` at `primals` along `vectors`,
/// forward over reverse: the JVP of the gradient (one per primal).
pub fn hvp(
    f: impl FnOnce(&[Tensor]) -> Result<Tensor>,
    primals: &[Tensor],
    vectors: &[Tensor],
) -> Result<Vec<Tensor>> {
    let sources: Vec<Source<'_>> = primals.iter().map(Source::from).collect();
    let acc = ForwardAccumulator::new(&sources, vectors)?;
    let tape = GradientTape::new();
    primals.iter().for_each(|p| tape.watch(p));
    let y = f(primals)?;
    let grads = tape.gradient(&y, &sources)?;
    grads
        .iter()
        .zip(primals)
        .map(|(g, p)| match g {
            Some(g) => acc
                .jvp_with(g, UnconnectedGradients::Zero)
                .map(|h| h.expect("zeros")),
            None => p.zeros_like(),
        })
        .collect()
}

/// The Hessian of `f` at `x`, shape `f(x).shape + x.shape + x.shape`
/// (`jax.hessian`): for a scalar `f` the jacobian of the gradient, else
/// the jacobian of the jacobian, its rows one device loop when traced.
/// `x` must be float or complex: an error says so otherwise, where a
/// gradient's rules would give zeros for integers. (`tf.hessians` sums a
/// non-scalar value first; reduce it before the call for that.)
pub fn hessian(f: impl FnOnce(&Tensor) -> Result<Tensor>, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_inexact() {
        return Err(Error::invalid(
            "hessian",
            format!(
                "differentiates float or complex inputs, got {}",
                x.tensor_type()
            ),
        ));
    }
    let outer = GradientTape::new();
    outer.watch(x);
    let inner = GradientTape::new();
    inner.watch(x);
    let y = f(x)?;
    if y.tensor_type().rank().is_some_and(|r| r != 0) {
        let j = inner
            .jacobian_with(&y, &[x.into()], UnconnectedGradients::Zero)?
            .remove(0)
            .expect("zeros for an unconnected source");
        let h = outer.jacobian_with(&j, &[x.into()], UnconnectedGradients::Zero)?;
        return Ok(h.into_iter().next().flatten().expect("zeros"));
    }
    let g = inner.gradient(&y, &[x.into()])?.remove(0);
    let Some(g) = g else {
        let dims = [x.dims(), x.dims()].concat();
        return Tensor::try_zeros(&dims, x.dtype());
    };
    let h = outer.jacobian_with(&g, &[x.into()], UnconnectedGradients::Zero)?;
    Ok(h.into_iter()
        .next()
        .flatten()
        .expect("zeros for an unconnected source"))
}
