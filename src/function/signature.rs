//! `input_signature` binding: a call binds only if every argument is a
//! subtype of its spec, and the error says which argument failed, what was
//! expected and what was received, in TensorFlow's words.

use super::dispatch::FunctionType;
use super::trace_type::{TensorSpec, TraceType};
use crate::error::{Error, Result};

/// A fixed function type from `TensorSpec`s.
#[derive(Clone, Debug)]
pub struct Signature {
    function: String,
    names: Vec<String>,
    specs: Vec<TensorSpec>,
}

impl Signature {
    /// The signature of `function` (named in errors) whose parameters are
    /// called `names` and must fit `specs`.
    pub fn new(function: &str, names: &[String], specs: Vec<TensorSpec>) -> Signature {
        Signature {
            function: function.to_string(),
            names: names.to_vec(),
            specs,
        }
    }

    /// The signature's own type, if the call's arguments fit it.
    pub fn bind(&self, call: &[TraceType]) -> Result<FunctionType> {
        if call.len() != self.specs.len() {
            return Err(Error::Type(format!(
                "Binding inputs to function '{}' failed: the signature takes {} argument(s), got {}. \
                 Signature: ({})",
                self.function,
                self.specs.len(),
                call.len(),
                self.describe()
            )));
        }
        for (i, (got, spec)) in call.iter().zip(&self.specs).enumerate() {
            let expected = TraceType::Tensor(TensorSpec {
                name: None,
                ..spec.clone()
            });
            if !fits(got, &expected) {
                return Err(cast_error(
                    &self.function,
                    got,
                    &expected,
                    self.names.get(i).map_or("?", String::as_str),
                    &self.describe(),
                ));
            }
        }
        Ok(self
            .specs
            .iter()
            .map(|s| {
                TraceType::Tensor(TensorSpec {
                    name: None,
                    ..s.clone()
                })
            })
            .collect())
    }

    fn describe(&self) -> String {
        let parts: Vec<String> = self
            .names
            .iter()
            .zip(&self.specs)
            .map(|(n, s)| format!("{n}: {s}"))
            .collect();
        parts.join(", ")
    }
}

/// TensorFlow's binding error: argument `argument` of `function`, of type
/// `got`, does not fit `expected`. A received literal shows as its value
/// (`Can not cast 3 to Literal[2]`), as in TensorFlow.
pub(crate) fn cast_error(
    function: &str,
    got: &TraceType,
    expected: &TraceType,
    argument: &str,
    signature: &str,
) -> Error {
    let got = match got {
        TraceType::Literal(value) => value.to_string(),
        other => other.to_string(),
    };
    Error::Type(format!(
        "Binding inputs to function '{function}' failed due to `Can not cast {got} to {expected}` \
         for argument {argument}. Signature: ({signature})"
    ))
}

/// Does an argument of type `got` bind to the spec `expected`? Every
/// subtype does. While another function is traced, so does a symbolic
/// tensor of the same dtype whose shape is less specific but compatible
/// (unknown rank or dimensions), as in TensorFlow: the call then checks the shape
/// with `ensure_shape` (`ConcreteCore::inline`), and a concrete shape that
/// turns out incompatible is an error when the program is specialized.
/// (Eager tensors have known shapes, for which compatible means subtype.)
fn fits(got: &TraceType, expected: &TraceType) -> bool {
    got.is_subtype_of(expected)
        || crate::trace::is_tracing()
            && matches!((got, expected), (TraceType::Tensor(g), TraceType::Tensor(e))
                if g.dtype == e.dtype && crate::ir::merge_shapes(&g.shape, &e.shape).is_some())
}
