//! Lifted variable initializers: a variable created on a function's
//! first call from a value computed in its trace (`Variable::new(x.ones_like()?)`)
//! gets its value by running that computation, and only it, once on the
//! call's concrete arguments, outside every trace, before the function is
//! traced again without creating variables. TensorFlow lifts such
//! initializers out of the graph the same way.
//!
//! Imports `trace` (the finished trace and `init_scope`), `ir::Graph`,
//! `tensor` and `variable`.

use crate::error::{Error, Result};
use crate::tensor::{Tensor, recompute};
use crate::trace::{self, CaptureSource, FinishedTrace};
use crate::variable::Variable;

/// Runs the initializers `finished` recorded and gives their variables
/// their values. `args` are the call's flattened tensor arguments (the
/// trace's first parameters), absent when the trace was made from specs
/// (`get_concrete_function`); `var_args` its variable arguments.
pub(crate) fn run_initializers(
    function: &str,
    finished: &FinishedTrace,
    args: Option<&[Tensor]>,
    var_args: &[Variable],
) -> Result<()> {
    if finished.initializers.is_empty() {
        return Ok(());
    }
    let wanted: Vec<_> = finished.initializers.iter().map(|(_, v)| *v).collect();
    let (graph, kept) = finished.graph.extract(&wanted)?;
    let params = finished.graph.params();
    trace::init_scope(|| {
        let inputs = kept
            .iter()
            .map(|&i| initializer_input(function, finished, params[i], i, args, var_args))
            .collect::<Result<Vec<Tensor>>>()?;
        let refs: Vec<&Tensor> = inputs.iter().collect();
        let values = recompute(&graph, &refs)?;
        for ((var, _), value) in finished.initializers.iter().zip(values) {
            let buffer = value
                .eager_buffer()
                .ok_or_else(|| Error::Value("a lifted initializer ran symbolically".into()))?;
            var.initialize(buffer)?;
        }
        Ok(())
    })
}

/// The value of the trace's `index`-th parameter for an initializer: a
/// captured value, or the call's argument.
fn initializer_input(
    function: &str,
    finished: &FinishedTrace,
    param: crate::ir::ValueId,
    index: usize,
    args: Option<&[Tensor]>,
    var_args: &[Variable],
) -> Result<Tensor> {
    let not_liftable = |why: &str| {
        Error::Value(format!(
            "function '{function}' creates a Variable whose initial value depends on {why}, so \
             it cannot be computed once, outside the function, as TensorFlow lifts initializers: \
             create the variable from an eager tensor, or call the function eagerly (not inside \
             another trace) with concrete arguments first"
        ))
    };
    if let Some(capture) = finished.captures.iter().find(|c| c.param == param) {
        return match &capture.source {
            CaptureSource::Eager(buffer) => Ok(Tensor::from_shared_buffer(buffer.clone())),
            CaptureSource::Sharded(t) => Ok(t.clone()),
            CaptureSource::Variable(r) => {
                Variable::from_inner(r.resolve(var_args, function)?).try_read()
            }
            CaptureSource::Outer(_) => Err(not_liftable("a value of an enclosing trace")),
        };
    }
    let arg = args
        .and_then(|a| a.get(index))
        .ok_or_else(|| not_liftable("an argument, and the function was traced from specs"))?;
    if arg.is_symbolic() {
        return Err(not_liftable(
            "an argument that is itself a value of the trace this call is part of",
        ));
    }
    Ok(arg.clone())
}
