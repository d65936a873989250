//! `pow`'s own rules, beside the `Binary::Pow` variant of
//! `elementwise` that calls them: TensorFlow's refusal of integers to
//! negative integer powers (checked where the exponent is known), one
//! answer on every backend where it cannot be checked (XLA leaves integer
//! powers with negative exponents to the backend), and the gradients
//! without false singularities where the power does not depend on a
//! variable.
//!
//! Layer: ops. Imports `ops::elementwise`, `lower::Emitter`, `tensor`,
//! `ir`, `dtype` and `error`.

use super::elementwise::{Binary, where_};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::lower::{Cmp, Emitter, Val};
use crate::tensor::Tensor;

/// The gradients of `z = a ** b`: `g b a^(b-1)` and `g z ln a`, without
/// the false singularities at the points where `z` does not depend on the
/// variable. Where `b == 0`, `z = 1` for every `a`, so the base's
/// gradient is 0 (JAX's rule; the plain formula gives `0 * inf = NaN` at
/// `a = 0`). The exponent's gradient is taken only where `ln a` is real
/// and finite, `a > 0` (`a != 0` for complex `a`), and is 0 elsewhere, as
/// TensorFlow's: `0 ** b` is 0 for every positive `b`, and for a negative
/// real base the power is real only at integer exponents. `ln` reads a
/// base of 1 in the masked lanes, so a second derivative through the
/// mask stays finite.
pub(super) fn power_grads(
    a: &Tensor,
    b: &Tensor,
    z: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor)> {
    let zeros = g.zeros_like()?;
    let base_grad = g.mul(b)?.mul(&a.pow(&b.sub_scalar(1.0)?)?)?;
    let da = where_(&b.eq_scalar(0.0)?, &zeros, &base_grad)?;
    let real_log = if a.dtype().is_complex() {
        a.ne_scalar(0.0)?
    } else {
        a.gt_scalar(0.0)?
    };
    let safe_base = where_(&real_log, a, &a.ones_like()?)?;
    let exponent_grad = g.mul(z)?.mul(&safe_base.log()?)?;
    let db = where_(&real_log, &exponent_grad, &zeros)?;
    Ok((da, db))
}

/// `a ** b`. For signed integers a negative exponent gives `1 / a^|b|`
/// truncated toward zero, the same on every backend: 1 for base 1, 1 or
/// -1 for base -1 (even or odd exponent), else 0 (also for base 0). XLA
/// leaves it to the backend: its CPU code gave 0 for base -1 and its CUDA
/// code -1, so the one answer is written out here.
pub(super) fn power(cx: &mut Emitter, a: &Val, b: &Val) -> Val {
    let p = cx.binary("power", a, b);
    if !a.ty.dtype.is_signed_int() {
        return p;
    }
    let constant = |cx: &mut Emitter, v: i64| cx.constant(Scalar::I64(v), a.ty.clone());
    let (zero, one, minus_one) = (constant(cx, 0), constant(cx, 1), constant(cx, -1));
    let negative = cx.compare(Cmp::Lt, b, &zero);
    let low_bit = cx.binary("and", b, &one);
    let odd = cx.compare(Cmp::Eq, &low_bit, &one);
    let of_minus_one = cx.select(&odd, &minus_one, &one);
    let base_minus_one = cx.compare(Cmp::Eq, a, &minus_one);
    let base_one = cx.compare(Cmp::Eq, a, &one);
    let small = cx.select(&base_minus_one, &of_minus_one, &zero);
    let reciprocal = cx.select(&base_one, &one, &small);
    cx.select(&negative, &reciprocal, &p)
}

/// TensorFlow refuses integers to negative integer powers. Eagerly, and
/// for a host exponent (a known value), the exponent is checked; a tensor
/// exponent inside a compiled function cannot be, and gets `1 / a^|b|`
/// truncated toward zero ([`power`]): 1 for base 1, ±1 for base -1, else 0.
pub(super) fn check_int_power(kind: Binary, exponent: &Tensor) -> Result<()> {
    if kind != Binary::Pow || !exponent.dtype().is_signed_int() || exponent.is_symbolic() {
        return Ok(());
    }
    let values = exponent.cast(DType::I64)?.to_vec::<i64>()?;
    refuse_negative_int_power(values.iter().any(|v| *v < 0))
}

/// [`check_int_power`] for a host exponent.
pub(super) fn check_int_power_scalar(kind: Binary, exponent: Scalar, dtype: DType) -> Result<()> {
    refuse_negative_int_power(
        kind == Binary::Pow && dtype.is_signed_int() && exponent.as_f64() < 0.0,
    )
}

fn refuse_negative_int_power(negative: bool) -> Result<()> {
    if negative {
        return Err(Error::invalid(
            "pow",
            "Integers to negative integer powers are not allowed",
        ));
    }
    Ok(())
}
