//! Closures of arity 0 to 8 as traceable bodies.
//!
//! A closure `|a: Tensor, n: i64| ...` is stored as a function of the tuple
//! `(Tensor, i64)`; [`ArgList`] gives that tuple's per-parameter trace
//! types, placeholders and tensors, and [`IntoArgs`]/[`IntoTraceTypes`]
//! convert what a call site passes.

use super::args::{Arg, IntoArg, IntoTraceType, alias_scope, stand_in_scope};
use super::output::IntoOutput;
use super::trace_type::TraceType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// The parameter list of a traced closure.
pub trait ArgList: Sized + 'static {
    /// Number of parameters.
    const ARITY: usize;
    /// One trace type per parameter.
    fn trace_types(&self) -> Result<Vec<TraceType>>;
    /// All tensors of all parameters, in order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// Placeholders for the parameters of a function type.
    fn placeholders(types: &[TraceType]) -> Result<Self>;
    /// The distinct variables among the arguments, by first occurrence
    /// (the order their aliasing indices refer to).
    fn variables(&self) -> Vec<Variable>;
}

/// A closure that can be traced with parameters `Args`.
pub trait TraceableFn<Args: ArgList>: Send + Sync + 'static {
    /// What the body returns: tensors, tuples of them, `Result`s of those
    /// (see `IntoOutput`).
    type Output: IntoOutput;
    /// Runs the body on one parameter tuple (placeholders while tracing,
    /// real tensors when running eagerly).
    fn call_with(&self, args: Args) -> Self::Output;
}

/// What a call site may pass for the parameter list `Args` (see `IntoArg`).
pub trait IntoArgs<Args> {
    /// Converts the call site's values into the parameter tuple, each
    /// with its `IntoArg` conversion.
    fn into_args(self) -> Result<Args>;
}

/// What `get_concrete_function` accepts for `Args` (see `IntoTraceType`).
pub trait IntoTraceTypes<Args> {
    /// One trace type per parameter, for tracing without values.
    fn into_trace_types(self) -> Result<Vec<TraceType>>;
}

fn arity_error(expected: usize, got: usize) -> Error {
    Error::Type(format!(
        "the function takes {expected} argument(s), got {got}"
    ))
}

macro_rules! arity {
    ($n:expr; $($T:ident $A:ident $v:ident),*) => {
        impl<$($T: Arg),*> ArgList for ($($T,)*) {
            const ARITY: usize = $n;
            #[allow(unused_variables)]
            fn trace_types(&self) -> Result<Vec<TraceType>> {
                let ($($v,)*) = self;
                alias_scope(|| Ok(vec![$($v.trace_type()?),*]))
            }
            #[allow(unused_variables, unused_mut)]
            fn variables(&self) -> Vec<Variable> {
                let ($($v,)*) = self;
                let mut all: Vec<Variable> = Vec::new();
                $($v.variables(&mut all);)*
                let mut distinct: Vec<Variable> = Vec::with_capacity(all.len());
                for v in all {
                    if !distinct.iter().any(|d| d.id() == v.id()) {
                        distinct.push(v);
                    }
                }
                distinct
            }
            #[allow(unused_variables)]
            fn flatten(&self, out: &mut Vec<Tensor>) {
                let ($($v,)*) = self;
                $($v.flatten(out);)*
            }
            #[allow(unused_variables, unused_mut)]
            fn placeholders(types: &[TraceType]) -> Result<Self> {
                if types.len() != $n {
                    return Err(arity_error($n, types.len()));
                }
                let mut it = types.iter();
                stand_in_scope(|| Ok(($($T::placeholder(it.next().expect("length checked"))?,)*)))
            }
        }

        impl<Func, R, $($T: Arg),*> TraceableFn<($($T,)*)> for Func
        where
            Func: Fn($($T),*) -> R + Send + Sync + 'static,
            R: IntoOutput,
        {
            type Output = R;
            fn call_with(&self, args: ($($T,)*)) -> R {
                let ($($v,)*) = args;
                self($($v),*)
            }
        }

        impl<$($T: Arg, $A: IntoArg<$T>),*> IntoArgs<($($T,)*)> for ($($A,)*) {
            fn into_args(self) -> Result<($($T,)*)> {
                let ($($v,)*) = self;
                Ok(($($v.into_arg()?,)*))
            }
        }

        impl<$($T: Arg, $A: IntoTraceType<$T>),*> IntoTraceTypes<($($T,)*)> for ($($A,)*) {
            fn into_trace_types(self) -> Result<Vec<TraceType>> {
                let ($($v,)*) = self;
                Ok(vec![$($v.into_trace_type()?),*])
            }
        }
    };
}

arity!(0;);
arity!(1; T1 A1 a1);
arity!(2; T1 A1 a1, T2 A2 a2);
arity!(3; T1 A1 a1, T2 A2 a2, T3 A3 a3);
arity!(4; T1 A1 a1, T2 A2 a2, T3 A3 a3, T4 A4 a4);
arity!(5; T1 A1 a1, T2 A2 a2, T3 A3 a3, T4 A4 a4, T5 A5 a5);
arity!(6; T1 A1 a1, T2 A2 a2, T3 A3 a3, T4 A4 a4, T5 A5 a5, T6 A6 a6);
arity!(7; T1 A1 a1, T2 A2 a2, T3 A3 a3, T4 A4 a4, T5 A5 a5, T6 A6 a6, T7 A7 a7);
arity!(8; T1 A1 a1, T2 A2 a2, T3 A3 a3, T4 A4 a4, T5 A5 a5, T6 A6 a6, T7 A7 a7, T8 A8 a8);
