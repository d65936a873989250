//! Layer: autodiff. The gradient of an eager `Function` call noted on a
//! tape: the call runs compiled and is noted as one `call` op, whose rule
//! is a second compiled function, of the same graph under a tape.
//! Registered with the tape's recorder (`tensor::hooks`), so `function`
//! asks for it without importing `autodiff`.
//!
//! Imports `function` (`FunctionOptions`), `ir::Graph`, `ops::control::CallVjp`
//! and `tensor`.

use crate::error::Result;
use crate::ir::Graph;
use crate::ops::control::CallVjp;
use crate::tensor::Tensor;
use std::sync::Arc;

/// The compiled backward of a function's graph, for the op a call records
/// on an eager tape: a `Function` of (inputs, output gradients, which
/// inputs need a gradient) that recomputes the graph under a tape and
/// returns the gradients of the needed floating-point inputs; traced once
/// per input types and mask, on first use.
pub(crate) fn compiled_call_vjp(graph: Arc<Graph>, name: &str) -> CallVjp {
    let backward = crate::function::FunctionOptions::new()
        .name(format!("{name}_grad"))
        .build(
            move |inputs: Vec<Tensor>,
                  grads: Vec<Tensor>,
                  wanted: Vec<bool>|
                  -> Result<Vec<Tensor>> {
                let wrt: Vec<Tensor> = inputs
                    .iter()
                    .zip(&wanted)
                    .filter(|(_, w)| **w)
                    .map(|(t, _)| t.clone())
                    .collect();
                let grads: Vec<Option<Tensor>> = grads.into_iter().map(Some).collect();
                super::region_gradients(&graph, &inputs, &wrt, &grads)
            },
        );
    Arc::new(
        move |inputs: &[Tensor], outputs: &[Tensor], grads: &[Option<Tensor>], needed: &[bool]| {
            let grads: Vec<Tensor> = grads
                .iter()
                .zip(outputs)
                .map(|(g, o)| g.clone().map_or_else(|| o.zeros_like(), Ok))
                .collect::<Result<_>>()?;
            let wanted: Vec<bool> = inputs
                .iter()
                .zip(needed)
                .map(|(t, n)| *n && t.dtype().is_inexact())
                .collect();
            let mut found = backward
                .call((inputs.to_vec(), grads, wanted.clone()))?
                .into_iter();
            Ok(wanted
                .iter()
                .map(|w| w.then(|| found.next()).flatten())
                .collect())
        },
    )
}
