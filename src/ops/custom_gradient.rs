//! Layer: ops. `custom_gradient`, as `tf.custom_gradient`: a function that
//! returns its results together with the function computing its
//! gradient, which gradient tapes then use instead of differentiating the
//! body.
//!
//! Design. The body runs with every tape on the thread paused, so none of
//! its ops is recorded; its results then pass through one
//! [`CustomGradient`] op, whose inputs are the function's inputs followed
//! by the body's results and whose outputs are those results again (an
//! identity: lowering emits nothing, the body's own ops compute the
//! values). The op's gradient rule is the user's function: gradients reach
//! the inputs only through it, and the results-as-inputs get none, so the
//! body is never differentiated.
//! - Eagerly, with a tape recording, the op is noted on the tape without
//!   running anything (its outputs are the body's results themselves).
//! - While tracing, the op is a node of the graph, so every later replay
//!   of the graph (the backward function of an eager `Function` call, the
//!   gradients of `cond` and `while` regions, inlined nested functions)
//!   meets it again and is recorded with it.
//! - The gradient function may use tensors the body computed (TF's
//!   `log1pexp` example keeps `exp(x)`). It is kept with the op, for the
//!   inputs and the graph it was made in; when the op is met elsewhere (a
//!   replay in another graph, or a `cond` branch's gradient built in the
//!   enclosing graph), the body runs again on the inputs there for a
//!   gradient function whose tensors belong there. That second run is
//!   recorded by any enclosing tape, so higher-order gradients see how the
//!   gradient function's tensors depend on the inputs.
//!
//! The op holds Rust closures, which an export cannot write; an export
//! writes it as what it computes, the identity over the body's results
//! (`ops::codec`), since a loaded export runs forward only. So functions
//! built on custom gradients (`solve`, `det`, `cumprod`) export. Variables read in the body are not tracked (their
//! reads are not recorded): pass their values as inputs.
//!
//! Its batching rule is `vmap`'s (`vmap/custom_gradient_rule.rs`, reached
//! through `tensor::hooks`): the batched body and gradient function are
//! `vmap`s of the user's.
//!
//! Imports `ir`, `lower::emitter`, `dtype`, `error`, `tensor` (and its
//! hooks: pausing and recording tapes, the batching rule) and `trace` (is
//! a trace active?).

use super::{OpDef, expect_arity};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{TensorType, shape_is_subtype};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, TensorKey, apply};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A gradient function: from the gradients arriving at the results (one
/// per result; zeros where none arrives), the gradients of the inputs
/// (one per input; `None` for none).
pub type GradFn = Arc<dyn Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + Sync>;

/// A custom-gradient body: results and their gradient function.
pub type CustomBody = Arc<dyn Fn(&[Tensor]) -> Result<(Vec<Tensor>, GradFn)> + Send + Sync>;

/// The inputs of a body run and the graph it ran in (`None`: eagerly).
type Place = (Vec<TensorKey>, Option<crate::trace::GraphId>);

fn place(xs: &[Tensor]) -> Place {
    (
        xs.iter().map(Tensor::key).collect(),
        crate::trace::current_graph(),
    )
}

/// The op marking a custom-gradient function's results (see the module
/// docs). Inputs: the function's `num_inputs` inputs, then its results;
/// outputs: the results.
#[derive(Clone)]
pub struct CustomGradient {
    pub num_inputs: usize,
    body: CustomBody,
    /// The gradient function of the body's first run, and where it was
    /// made: the inputs and the graph being traced (a region replayed in
    /// another graph meets the same inputs where the saved function's
    /// tensors are out of scope).
    saved: Arc<Mutex<(Place, GradFn)>>,
}

impl std::fmt::Debug for CustomGradient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} inputs>", self.num_inputs)
    }
}

/// Ops compare by identity, like function calls.
impl PartialEq for CustomGradient {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.saved, &other.saved)
    }
}
impl Eq for CustomGradient {}
impl Hash for CustomGradient {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.saved) as *const u8 as usize).hash(state);
    }
}

impl CustomGradient {
    /// The gradient function for these inputs: the saved one, or a new
    /// run of the body.
    fn grad_fn(&self, xs: &[Tensor]) -> Result<GradFn> {
        let here = place(xs);
        {
            let saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
            if saved.0 == here {
                return Ok(saved.1.clone());
            }
        }
        Ok((self.body)(xs)?.1)
    }
}

impl CustomGradient {
    /// A custom-gradient op over `body` whose first run, on `xs` here,
    /// gave `grad_fn` (how `vmap`'s rule builds the batched op).
    pub(crate) fn with_first_run(
        num_inputs: usize,
        body: CustomBody,
        xs: &[Tensor],
        grad_fn: GradFn,
    ) -> Self {
        CustomGradient {
            num_inputs,
            body,
            saved: Arc::new(Mutex::new((place(xs), grad_fn))),
        }
    }

    /// The body the user wrote.
    pub(crate) fn body(&self) -> &CustomBody {
        &self.body
    }
}

impl OpDef for CustomGradient {
    fn name(&self) -> &'static str {
        "custom_gradient"
    }

    /// The body's results (already replayed batched) pass through a new
    /// custom-gradient op whose gradient function is the user's, mapped
    /// over the examples: a tape outside the `vmap` still never
    /// differentiates the body.
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> super::batching::Batched {
        let op = crate::tensor::hooks::RegionBatchOp::CustomGradient(self);
        crate::tensor::hooks::region_batch(op, inputs, batched, size)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.len() < self.num_inputs {
            expect_arity("custom_gradient", inputs, self.num_inputs)?;
        }
        Ok(inputs[self.num_inputs..].to_vec())
    }

    fn lower(&self, _cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(inputs[self.num_inputs..].to_vec())
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let n = self.num_inputs;
        let xs = &inputs[..n];
        let upstream: Vec<Tensor> = grads
            .iter()
            .zip(outputs)
            .map(|(g, o)| g.clone().map_or_else(|| o.zeros_like(), Ok))
            .collect::<Result<_>>()?;
        let found = user_gradients(&self.grad_fn(xs)?, &upstream, n)?;
        let mut out = Vec::with_capacity(inputs.len());
        for (i, (g, x)) in found.into_iter().zip(xs).enumerate() {
            let g = match g {
                Some(g) if x.dtype().is_inexact() => Some(check_grad(i, &g, x)?),
                _ => None,
            };
            out.push(g);
        }
        out.resize(inputs.len(), None);
        Ok(out)
    }
}

/// The user's gradient function on `upstream`, which must give one
/// gradient (or `None`) per input of the `n`.
pub(crate) fn user_gradients(
    grad: &GradFn,
    upstream: &[Tensor],
    n: usize,
) -> Result<Vec<Option<Tensor>>> {
    let found = grad(upstream)?;
    if found.len() != n {
        return Err(Error::invalid(
            "custom_gradient",
            format!(
                "the gradient function returned {} gradient(s) for {n} input(s)",
                found.len()
            ),
        ));
    }
    Ok(found)
}

/// A user gradient must match its input's dtype and shape.
fn check_grad(i: usize, g: &Tensor, x: &Tensor) -> Result<Tensor> {
    let ok = g.dtype() == x.dtype()
        && (shape_is_subtype(&g.shape(), &x.shape()) || shape_is_subtype(&x.shape(), &g.shape()));
    if !ok {
        return Err(Error::invalid(
            "custom_gradient",
            format!(
                "the gradient function gave {} for input #{i}, which is {}",
                g.tensor_type(),
                x.tensor_type()
            ),
        ));
    }
    Ok(g.clone())
}

/// `tf.custom_gradient`: wraps `f`, which returns its results and their
/// gradient function, into a function whose gradient (for every tape,
/// eagerly or inside a traced function) is that gradient function.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::ops::custom_gradient::custom_gradient;
/// // log(1 + exp(x)) with a gradient that stays finite for large x.
/// let log1pexp = custom_gradient(|xs: &[Tensor]| {
///     let e = xs[0].exp()?;
///     let y = e.add_scalar(1.0)?.log()?;
///     let grad = move |dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
///         // 1 - 1 / (1 + e): 1 where e overflows to inf.
///         let sig = e.add_scalar(1.0)?.pow_scalar(-1.0)?.neg()?.add_scalar(1.0)?;
///         Ok(vec![Some(dy[0].mul(&sig)?)])
///     };
///     Ok((vec![y], grad))
/// });
/// let x = Tensor::scalar(100.0f32);
/// let tape = GradientTape::new();
/// tape.watch(&x);
/// let y = log1pexp(&[x.clone()])?.remove(0);
/// let g = tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap();
/// assert_eq!(g.item::<f32>()?, 1.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn custom_gradient<F, G>(
    f: F,
) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Clone + Send + Sync + 'static
where
    F: Fn(&[Tensor]) -> Result<(Vec<Tensor>, G)> + Send + Sync + 'static,
    G: Fn(&[Tensor]) -> Result<Vec<Option<Tensor>>> + Send + Sync + 'static,
{
    let body: CustomBody = Arc::new(move |xs: &[Tensor]| {
        let (ys, g) = f(xs)?;
        Ok((ys, Arc::new(g) as GradFn))
    });
    move |xs: &[Tensor]| call(&body, xs)
}

/// One call of a custom-gradient function.
fn call(body: &CustomBody, xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let tracing = crate::trace::is_tracing();
    if !tracing && !crate::tensor::hooks::recording() {
        return Ok(body(xs)?.0);
    }
    let (ys, grad_fn) = {
        let _paused = crate::tensor::hooks::pause_recording();
        body(xs)?
    };
    if ys.is_empty() {
        return Err(Error::invalid(
            "custom_gradient",
            "the function returned no results",
        ));
    }
    let op = CustomGradient {
        num_inputs: xs.len(),
        body: body.clone(),
        saved: Arc::new(Mutex::new((place(xs), grad_fn))),
    };
    let inputs: Vec<&Tensor> = xs.iter().chain(&ys).collect();
    if tracing {
        return apply(op, &inputs);
    }
    if let Some(recorder) = crate::tensor::hooks::recorder() {
        (recorder.record_op)(&op.into(), &inputs, &ys);
    }
    Ok(ys)
}
