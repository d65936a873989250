//! Composite ops that run eagerly as one compiled program.
//!
//! The linear-algebra composites (`composite::lu`, `composite::qr`, `composite::jacobi`)
//! are device loops of tensor ops. Traced, their ops join the function's
//! graph like any others. Eagerly, a loop is a Rust loop, so each op of
//! each step would be dispatched on its own, and each op of a new shape
//! compiled on its own: a first `solve` of a 33 x 33 matrix took 2.3 s,
//! and every later one 8 ms. TensorFlow and JAX run these ops eagerly as
//! single kernels; here the composite is traced once per input types into
//! a graph, which then runs as one [`Call`] op through the eager op cache:
//! one compile per shape, one dispatch per call.
//!
//! The graphs are kept per (op, attributes, input types), at most
//! [`MAX_GRAPHS`] (then the cache starts over; the eager op cache holds
//! the compiled programs under its own bound). Callers run inside a
//! `custom_gradient` body, so tapes are paused and the `Call` is never
//! differentiated: its gradient function is the composite's own.
//!
//! Layer: ops. Imports `ir`, `trace` (tracing the composite, feeding its
//! captures), `tensor` and `ops::control::Call`.

use super::control::{Call, CallVjp};
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorType};
use crate::tensor::{Tensor, apply};
use crate::trace::{self, Capture};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

/// The most traced composites kept.
pub const MAX_GRAPHS: usize = 256;

type Key = (String, Vec<TensorType>);
type Traced = (Arc<Graph>, Arc<Vec<Capture>>, usize);

static GRAPHS: LazyLock<Mutex<HashMap<Key, Traced>>> = LazyLock::new(Default::default);

/// `body(inputs)`: inline while tracing; eagerly, as one compiled program
/// traced once per `key` (the op and its attributes) and input types.
pub(crate) fn run_as_one_program(
    key: &str,
    inputs: &[Tensor],
    body: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    if trace::is_tracing() || inputs.iter().any(Tensor::is_symbolic) {
        return body(inputs);
    }
    let types: Vec<TensorType> = inputs.iter().map(Tensor::tensor_type).collect();
    let key = (key.to_string(), types);
    let known = GRAPHS.lock().expect("graph cache lock").get(&key).cloned();
    let (graph, captures, num_outputs) = match known {
        Some(t) => t,
        None => {
            // Traced without the lock held: the body may use other
            // composites (inline, since a trace is then active).
            let traced = trace_composite(&key, body)?;
            let mut graphs = GRAPHS.lock().expect("graph cache lock");
            if graphs.len() >= MAX_GRAPHS {
                graphs.clear();
            }
            graphs.insert(key, traced.clone());
            traced
        }
    };
    let mut operands = inputs.to_vec();
    operands.extend(trace::capture_inputs(&captures)?);
    let refs: Vec<&Tensor> = operands.iter().collect();
    apply(
        Call {
            graph,
            num_outputs,
            vjp: no_gradient(),
        },
        &refs,
    )
}

/// Traces `body` on placeholders of `key`'s input types.
fn trace_composite(
    key: &Key,
    body: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
) -> Result<Traced> {
    let guard = trace::TraceGuard::new(&key.0);
    let args = key
        .1
        .iter()
        .map(|t| trace::placeholder(t.clone()))
        .collect::<Result<Vec<_>>>()?;
    let outs = body(&args)?;
    let finished = guard.finish(&outs)?;
    if !finished.updates.is_empty() || finished.created_variables > 0 {
        return Err(Error::Value(format!(
            "{}: a composite op may not create or assign variables",
            key.0
        )));
    }
    Ok((
        Arc::new(finished.graph),
        Arc::new(finished.captures),
        outs.len(),
    ))
}

/// The composite's gradient is its `custom_gradient`'s; this one is never
/// asked for (the body runs with tapes paused).
fn no_gradient() -> CallVjp {
    Arc::new(|_, _, _, _| {
        Err(Error::Value(
            "a composite op's program has no gradient of its own; its custom gradient gives it"
                .into(),
        ))
    })
}
