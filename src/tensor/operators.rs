//! Operator sugar: `+ - * / %` and unary `-` on tensors and host numbers.
//!
//! Operators cannot return `Result`, so they panic with the op's error
//! message (the same text the named method returns, e.g. mismatched shapes
//! or dtypes). Use the named methods (`a.add(&b)?`) to handle errors. A
//! host number on either side takes the tensor's dtype (`x * 2.0` on an
//! `i32` tensor multiplies by 2), as in TensorFlow; `%` is `floormod`
//! (Python semantics) and `/` is true division (`div`).
//!
//! Host numbers are `f64` and `i64` only: with one float and one integer
//! impl, unsuffixed literals (`x * 2.0`, `1 - x`) infer without annotations.
//! Convert other host types with `as f64`, or use `mul_scalar`, which takes
//! any `Into<Scalar>`.

use super::{Tensor, scalar_as};
use crate::error::{OrPanic, Result};
use crate::ir::Scalar;
use std::ops::{Add, Div, Mul, Neg, Rem, Sub};

/// Unwraps an operator's result. While tracing, the error is recorded in the
/// trace (the function call returns it) and a placeholder constant stands
/// in for the result, so the closure can run to its end; eagerly, it panics
/// with the error's message.
#[track_caller]
fn or_panic(r: Result<Tensor>) -> Tensor {
    match r {
        Ok(t) => t,
        Err(e) if crate::trace::record_error(&e) => {
            match Tensor::fill(&[], Scalar::I64(0), crate::dtype::DType::F32) {
                Ok(placeholder) => placeholder,
                Err(_) => Err(e).or_panic(),
            }
        }
        Err(e) => Err(e).or_panic(),
    }
}

/// `t op s`, or `s op t` after `first`, for a host number `s` converted
/// to `t`'s dtype. A macro rather than a function taking a closure, so
/// that `#[track_caller]` carries the user's line to the op (closures and
/// function pointers lose it).
macro_rules! host_operand {
    ($t:expr, $s:expr, $op:ident) => {
        or_panic(match scalar_as(Scalar::from($s), $t.dtype()) {
            Ok(s) => Tensor::$op($t, &s),
            Err(e) => Err(e),
        })
    };
    (first $s:expr, $t:expr, $op:ident) => {
        or_panic(match scalar_as(Scalar::from($s), $t.dtype()) {
            Ok(s) => Tensor::$op(&s, $t),
            Err(e) => Err(e),
        })
    };
}

macro_rules! binary_operator {
    ($trait:ident, $method:ident, $op:ident) => {
        impl $trait<&Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$op(self, rhs))
            }
        }
        impl $trait<Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$op(&self, &rhs))
            }
        }
        impl $trait<&Tensor> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                or_panic(Tensor::$op(&self, rhs))
            }
        }
        impl $trait<Tensor> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                or_panic(Tensor::$op(self, &rhs))
            }
        }
        binary_operator!(@host $trait, $method, $op, f64, i64);
    };
    (@host $trait:ident, $method:ident, $op:ident, $($h:ty),*) => {$(
        impl $trait<$h> for &Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $h) -> Tensor {
                host_operand!(self, rhs, $op)
            }
        }
        impl $trait<$h> for Tensor {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: $h) -> Tensor {
                host_operand!(&self, rhs, $op)
            }
        }
        impl $trait<&Tensor> for $h {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: &Tensor) -> Tensor {
                host_operand!(first self, rhs, $op)
            }
        }
        impl $trait<Tensor> for $h {
            type Output = Tensor;
            #[track_caller]
            fn $method(self, rhs: Tensor) -> Tensor {
                host_operand!(first self, &rhs, $op)
            }
        }
    )*};
}

binary_operator!(Add, add, add);
binary_operator!(Sub, sub, sub);
binary_operator!(Mul, mul, mul);
binary_operator!(Div, div, div);
binary_operator!(Rem, rem, floormod);

impl Neg for &Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(self))
    }
}

impl Neg for Tensor {
    type Output = Tensor;
    #[track_caller]
    fn neg(self) -> Tensor {
        or_panic(Tensor::neg(&self))
    }
}
