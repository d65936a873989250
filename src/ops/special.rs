//! Special functions, activations and bitwise ops: the lowering and
//! gradient rules of the newer `Unary`/`Binary` variants (the enums and
//! their dtype rules are in `elementwise`), and their `Tensor` methods.
//!
//! What XLA has natively lowers to it: CHLO ops (`chlo.erf`, `chlo.lgamma`,
//! `chlo.asin`, ...), which XLA expands when it compiles, and StableHLO ops
//! (`atan2`, `exponential_minus_one`, `cbrt`, `remainder`, `and`/`or`/`xor`/`not`,
//! the shifts, `popcnt`). `softplus` and `log_sigmoid` are written out in
//! their overflow-free form `max(x, 0) + log1p(exp(-|x|))`; the other
//! activations (`silu`, `gelu`, `elu`, `selu`, `leaky_relu`, `relu6`) are
//! compositions of tensor ops, differentiated through them.
//!
//! Dtype rules follow TensorFlow: the math is for floating-point dtypes
//! (f16 and bf16 included), `reciprocal` also takes integers (truncating),
//! and the bitwise ops, shifts and `population_count` take integers only.

use super::check_dtype;
use super::elementwise::{Binary, Unary};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::lower::{Cmp, Emitter, Val};
use crate::tensor::{Tensor, apply1, scalar_as};

/// `2 / sqrt(pi)`, the scale of erf's derivative.
const TWO_OVER_SQRT_PI: f64 = std::f64::consts::FRAC_2_SQRT_PI;

/// SELU's constants (Klambauer et al.), as in `tf.nn.selu`.
const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_SCALE: f64 = 1.050_700_987_355_480_5;

/// `-log1p(exp(-|x|))`: the bounded part of softplus and log-sigmoid.
fn neg_log1p_exp_neg_abs(cx: &mut Emitter, x: &Val) -> Val {
    let a = cx.unary("abs", x);
    let na = cx.unary("negate", &a);
    let e = cx.unary("exponential", &na);
    let l = cx.unary("log_plus_one", &e);
    cx.unary("negate", &l)
}

/// StableHLO for the special unary variants (see `Unary::lower`).
pub(super) fn lower_unary(kind: Unary, cx: &mut Emitter, x: &Val) -> Val {
    use Unary::*;
    match kind {
        Erf => cx.chlo("erf", x),
        Erfc => cx.chlo("erfc", x),
        ErfInv => cx.chlo("erf_inv", x),
        Tan => cx.chlo("tan", x),
        Atan => cx.chlo("atan", x),
        Asin => cx.chlo("asin", x),
        Acos => cx.chlo("acos", x),
        Sinh => cx.chlo("sinh", x),
        Cosh => cx.chlo("cosh", x),
        Asinh => cx.chlo("asinh", x),
        Acosh => cx.chlo("acosh", x),
        Atanh => cx.chlo("atanh", x),
        Lgamma => cx.chlo("lgamma", x),
        Digamma => cx.chlo("digamma", x),
        Expm1 => cx.unary("exponential_minus_one", x),
        Cbrt => cx.unary("cbrt", x),
        Trigamma => {
            let one = cx.constant(Scalar::I64(1), x.ty.clone());
            cx.chlo_binary("polygamma", &one, x)
        }
        Reciprocal => {
            let one = cx.constant(Scalar::I64(1), x.ty.clone());
            cx.binary("divide", &one, x)
        }
        // max(x, 0) + log1p(exp(-|x|)): never overflows.
        Softplus => {
            let zero = cx.constant(Scalar::I64(0), x.ty.clone());
            let m = cx.binary("maximum", x, &zero);
            let l = neg_log1p_exp_neg_abs(cx, x);
            cx.binary("subtract", &m, &l)
        }
        // -softplus(-x) = min(x, 0) - log1p(exp(-|x|)).
        LogSigmoid => {
            let zero = cx.constant(Scalar::I64(0), x.ty.clone());
            let m = cx.binary("minimum", x, &zero);
            let l = neg_log1p_exp_neg_abs(cx, x);
            cx.binary("add", &m, &l)
        }
        IsInf => {
            let a = cx.unary("abs", x);
            let inf = cx.constant(Scalar::F64(f64::INFINITY), x.ty.clone());
            cx.compare(Cmp::Eq, &a, &inf)
        }
        BitwiseNot => cx.unary("not", x),
        PopulationCount => {
            let p = cx.unary("popcnt", x);
            cx.convert(&p, DType::U8)
        }
        other => unreachable!("{other:?} is not a special unary op"),
    }
}

/// Gradient rules of the special unary variants: the gradient `g` arriving
/// at `y = f(x)` times `f'(x)`.
pub(super) fn unary_grad(kind: Unary, x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    use Unary::*;
    let one_minus_x2 = || x.square()?.neg()?.add_scalar(1.0);
    match kind {
        Erf => g.mul(&x.square()?.neg()?.exp()?.mul_scalar(TWO_OVER_SQRT_PI)?),
        Erfc => g.mul(&x.square()?.neg()?.exp()?.mul_scalar(-TWO_OVER_SQRT_PI)?),
        // d erf_inv(x) = sqrt(pi) / 2 * exp(erf_inv(x)^2).
        ErfInv => g.mul(&y.square()?.exp()?.mul_scalar(1.0 / TWO_OVER_SQRT_PI)?),
        Expm1 => g.mul(&y.add_scalar(1.0)?),
        // d cbrt(x) = 1 / (3 cbrt(x)^2): infinite at 0, as the derivative is.
        Cbrt => g.div(&y.square()?.mul_scalar(3.0)?),
        Tan => g.mul(&y.square()?.add_scalar(1.0)?),
        Atan => g.div(&x.square()?.add_scalar(1.0)?),
        Asin => g.mul(&one_minus_x2()?.rsqrt()?),
        Acos => g.mul(&one_minus_x2()?.rsqrt()?)?.neg(),
        Sinh => g.mul(&x.cosh()?),
        Cosh => g.mul(&x.sinh()?),
        Asinh => g.mul(&x.square()?.add_scalar(1.0)?.rsqrt()?),
        // 1 / (sqrt(x - 1) sqrt(x + 1)), not 1 / sqrt(x² - 1): the same for
        // real x > 1, and the derivative of the principal branch for
        // complex x, where the two differ in sign on half the plane.
        Acosh => g.div(
            &x.sub_scalar(1.0)?
                .sqrt()?
                .mul(&x.add_scalar(1.0)?.sqrt()?)?,
        ),
        Atanh => g.div(&one_minus_x2()?),
        Lgamma => g.mul(&x.digamma()?),
        Digamma => g.mul(&apply1(Trigamma, &[x])?),
        Trigamma => Err(Error::invalid("trigamma", "has no gradient rule yet")),
        Reciprocal => g.mul(&y.square()?)?.neg(),
        Softplus => g.mul(&x.sigmoid()?),
        LogSigmoid => g.mul(&x.neg()?.sigmoid()?),
        other => unreachable!("{other:?} has no special gradient rule"),
    }
}

/// StableHLO for the special binary variants, on operands already
/// broadcast to the result's shape.
pub(super) fn lower_binary(kind: Binary, cx: &mut Emitter, a: &Val, b: &Val) -> Val {
    use Binary::*;
    match kind {
        Atan2 => cx.binary("atan2", a, b),
        // Truncated remainder: C's fmod on floats, `%` on integers.
        TruncateMod => cx.binary("remainder", a, b),
        BitwiseAnd => cx.binary("and", a, b),
        BitwiseOr => cx.binary("or", a, b),
        BitwiseXor => cx.binary("xor", a, b),
        LeftShift => cx.binary("shift_left", a, b),
        RightShift if a.ty.dtype.is_signed_int() => cx.binary("shift_right_arithmetic", a, b),
        RightShift => cx.binary("shift_right_logical", a, b),
        other => unreachable!("{other:?} is not a special binary op"),
    }
}

/// Gradient rules of the special binary variants, before unbroadcasting.
pub(super) fn binary_grad(
    kind: Binary,
    a: &Tensor,
    b: &Tensor,
    g: &Tensor,
) -> Result<(Tensor, Tensor)> {
    match kind {
        // atan2(y, x): dy = x / (x^2 + y^2), dx = -y / (x^2 + y^2).
        Binary::Atan2 => {
            let r2 = a.square()?.add(&b.square()?)?;
            Ok((g.mul(b)?.div(&r2)?, g.mul(a)?.div(&r2)?.neg()?))
        }
        // a - trunc(a / b) * b: da = g, db = -trunc(a / b) g.
        Binary::TruncateMod => {
            let q = a.div(b)?;
            let trunc = q.abs()?.floor()?.mul(&q.sign()?)?;
            Ok((g.clone(), g.mul(&trunc)?.neg()?))
        }
        other => unreachable!("{other:?} has no special gradient rule"),
    }
}

// -------------------------------------------------------- tensor methods

/// Errors unless `x` is floating-point (for the composite activations,
/// whose ops would otherwise report the dtype under their own names).
fn require_float(op: &str, x: &Tensor) -> Result<()> {
    let d = x.dtype();
    check_dtype(op, d, d.is_float(), "floating-point")
}

macro_rules! special_unary_methods {
    ($($(#[$doc:meta])* $method:ident => $kind:ident),* $(,)?) => {
        /// **Elementwise** special functions and bit operations of one operand.
        impl Tensor {$(
            $(#[$doc])*
            #[track_caller]
            pub fn $method(&self) -> Result<Tensor> {
                apply1(Unary::$kind, &[self])
            }
        )*}
    };
}

special_unary_methods! {
    /// The error function `2/sqrt(pi) * integral_0^x exp(-t^2) dt`.
    erf => Erf,
    /// `1 - erf(x)`, accurate where erf is near 1.
    erfc => Erfc,
    /// The inverse of `erf` on (-1, 1); +-inf at +-1.
    erf_inv => ErfInv,
    /// `e^x - 1`, accurate near 0.
    expm1 => Expm1,
    /// The real cube root (`jnp.cbrt`); negative for negative inputs.
    cbrt => Cbrt,
    /// Tangent (radians).
    tan => Tan,
    /// Arctangent, in (-pi/2, pi/2).
    atan => Atan,
    /// Arcsine, NaN outside [-1, 1].
    asin => Asin,
    /// Arccosine, NaN outside [-1, 1].
    acos => Acos,
    /// Hyperbolic sine.
    sinh => Sinh,
    /// Hyperbolic cosine.
    cosh => Cosh,
    /// Inverse hyperbolic sine.
    asinh => Asinh,
    /// Inverse hyperbolic cosine, NaN below 1.
    acosh => Acosh,
    /// Inverse hyperbolic tangent, +-inf at +-1.
    atanh => Atanh,
    /// `ln |Gamma(x)|`.
    lgamma => Lgamma,
    /// The logarithmic derivative of Gamma, `Gamma'(x) / Gamma(x)`.
    digamma => Digamma,
    /// `1 / x` (truncating for integers, like TensorFlow).
    reciprocal => Reciprocal,
    /// `ln(1 + e^x)`, computed as `max(x, 0) + log1p(exp(-|x|))` so it
    /// never overflows.
    softplus => Softplus,
    /// `ln(sigmoid(x)) = -softplus(-x)`, without overflow.
    log_sigmoid => LogSigmoid,
    /// True where the element is +inf or -inf.
    is_inf => IsInf,
    /// Flips every bit (integer dtypes).
    bitwise_not => BitwiseNot,
    /// The number of set bits of each element, as `u8` (TensorFlow's
    /// `population_count`).
    population_count => PopulationCount,
}

macro_rules! special_binary_methods {
    ($($(#[$doc:meta])* $method:ident, $scalar:ident => $kind:ident),* $(,)?) => {
        /// **Elementwise** special functions and shifts of two operands (each
        /// with a host-number form).
        impl Tensor {$(
            $(#[$doc])*
            #[track_caller]
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                apply1(Binary::$kind, &[self, other])
            }
            /// The same op with a host number, converted to this tensor's
            /// dtype (a TypeError if the dtype cannot hold it).
            #[track_caller]
            pub fn $scalar(&self, other: impl Into<Scalar>) -> Result<Tensor> {
                let s = scalar_as(other.into(), self.dtype())?;
                apply1(Binary::$kind, &[self, &s])
            }
        )*}
    };
}

special_binary_methods! {
    /// `atan2(self, x)`: the angle of the point `(x, self)`, in
    /// [-pi, pi] (`self` is the y coordinate, as in `tf.math.atan2(y, x)`).
    atan2, atan2_scalar => Atan2,
    /// The remainder of truncating division, with the dividend's sign
    /// (C's `fmod`, `tf.truncatemod`). The `%` operator is `floormod`.
    rem, rem_scalar => TruncateMod,
    /// `rem` under TensorFlow's name.
    truncatemod, truncatemod_scalar => TruncateMod,
    /// Bitwise AND (integer dtypes).
    bitwise_and, bitwise_and_scalar => BitwiseAnd,
    /// Bitwise OR (integer dtypes).
    bitwise_or, bitwise_or_scalar => BitwiseOr,
    /// Bitwise XOR (integer dtypes).
    bitwise_xor, bitwise_xor_scalar => BitwiseXor,
    /// `self << other` (integer dtypes). Shifts by a negative amount or by
    /// the bit width or more give 0 (TensorFlow leaves them undefined).
    left_shift, left_shift_scalar => LeftShift,
    /// `self >> other`: arithmetic (sign-filling) for signed dtypes,
    /// logical for unsigned ones, as in TensorFlow. Shifts by a negative
    /// amount or by the bit width or more give 0, or -1 for negative
    /// signed elements.
    right_shift, right_shift_scalar => RightShift,
}

/// **Elementwise** activations built from the primitives.
impl Tensor {
    /// `x * sigmoid(x)` (swish), like `tf.nn.silu`.
    #[track_caller]
    pub fn silu(&self) -> Result<Tensor> {
        require_float("silu", self)?;
        self.mul(&self.sigmoid()?)
    }

    /// The Gaussian error linear unit, like `tf.nn.gelu`: exactly
    /// `x/2 * (1 + erf(x / sqrt(2)))`, or with `approximate` the tanh form
    /// `x/2 * (1 + tanh(sqrt(2/pi) * (x + 0.044715 x^3)))`.
    #[track_caller]
    pub fn gelu(&self, approximate: bool) -> Result<Tensor> {
        require_float("gelu", self)?;
        let inner = if approximate {
            let cubic = self.square()?.mul(self)?.mul_scalar(0.044715)?.add(self)?;
            cubic
                .mul_scalar((2.0 / std::f64::consts::PI).sqrt())?
                .tanh()?
        } else {
            self.mul_scalar(std::f64::consts::FRAC_1_SQRT_2)?.erf()?
        };
        self.mul_scalar(0.5)?.mul(&inner.add_scalar(1.0)?)
    }

    /// `x` for `x > 0`, else `alpha * x`, like `tf.nn.leaky_relu` (whose
    /// default `alpha` is 0.2).
    #[track_caller]
    pub fn leaky_relu(&self, alpha: f64) -> Result<Tensor> {
        require_float("leaky_relu", self)?;
        self.gt_scalar(0.0)?.where_(self, &self.mul_scalar(alpha)?)
    }

    /// `x` for `x > 0`, else `e^x - 1`, like `tf.nn.elu`.
    #[track_caller]
    pub fn elu(&self) -> Result<Tensor> {
        require_float("elu", self)?;
        self.elu_scaled(1.0)
    }

    /// `scale * elu(x)` with `alpha * (e^x - 1)` for `x <= 0`, with the
    /// fixed constants of `tf.nn.selu`.
    #[track_caller]
    pub fn selu(&self) -> Result<Tensor> {
        require_float("selu", self)?;
        self.elu_scaled(SELU_ALPHA)?.mul_scalar(SELU_SCALE)
    }

    /// `min(max(x, 0), 6)`, like `tf.nn.relu6` (numeric dtypes); the
    /// gradient is 0 at both kinks, as in TensorFlow.
    #[track_caller]
    pub fn relu6(&self) -> Result<Tensor> {
        let d = self.dtype();
        check_dtype("relu6", d, d.is_numeric(), "numeric")?;
        let six = scalar_as(Scalar::I64(6), d)?;
        self.ge_scalar(6)?.where_(&six, &self.relu()?)
    }

    /// `x` for `x > 0`, else `alpha * expm1(x)`. The exponential sees
    /// `min(x, 0)`, so a large `x` cannot make the unused branch infinite
    /// (whose zero gradient would then be NaN).
    fn elu_scaled(&self, alpha: f64) -> Result<Tensor> {
        let negative = self.minimum_scalar(0.0)?.expm1()?;
        let negative = if alpha == 1.0 {
            negative
        } else {
            negative.mul_scalar(alpha)?
        };
        self.gt_scalar(0.0)?.where_(self, &negative)
    }
}
