//! Elementwise ops: unary math, binary arithmetic and comparisons with NumPy
//! broadcasting, `where` (select) and `cast`.
//!
//! Dtype rules follow TensorFlow: operands of a binary op must share a
//! dtype (no implicit promotion); `div` is true division, so integer
//! operands give a float result (f32 for 8/16-bit ints, f64 for 32/64-bit);
//! `floordiv` and `floormod` round toward negative infinity (Python). For
//! integer division by zero XLA's defined results apply (quotient -1 bits,
//! remainder the dividend) where TensorFlow would raise.
//!
//! Complex operands (`c64`, `c128`) are taken where XLA computes the op
//! on complex numbers: `neg`, `abs` (a real result), `exp`, `log`,
//! `log1p`, `expm1`, `sqrt`, `rsqrt`, `square`, `reciprocal`, `sign`,
//! `tanh`, `sin`, `cos`, `tan`, `sinh`, `cosh`, the inverse trigonometric
//! and hyperbolic functions (principal branches), and `add`, `sub`, `mul`,
//! `div`, `pow`, `equal`,
//! `not_equal`, `where` and `cast`. Every other op refuses them with an
//! error that says so (ordering comparisons, `maximum`/`minimum`, `floor`,
//! ...: complex numbers have no order). Gradients of complex values follow
//! JAX's convention (see `ops::complex`): for these holomorphic functions
//! the rule is the real one, `g * f'(z)`, unconjugated.
//!
//! Special functions, activations and bitwise ops are variants of the same
//! enums; their lowering, gradient rules and methods are in `special`.

use super::batching;
use super::{OpDef, check_dtype, describe, expect_arity, grad_or_zeros, same_dtype, unbroadcast};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Scalar, TensorType, broadcast_shapes};
use crate::lower::{Cmp, Emitter, Val};
use crate::tensor::{Tensor, apply1, scalar_as};

// ------------------------------------------------------------------ unary

/// Elementwise functions of one operand.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Unary {
    Neg,
    Abs,
    Exp,
    Log,
    Log1p,
    Sqrt,
    Rsqrt,
    Square,
    Tanh,
    Sigmoid,
    Relu,
    Sin,
    Cos,
    Floor,
    Ceil,
    Round,
    Sign,
    LogicalNot,
    IsNan,
    IsFinite,
    // Special functions, activations and bitwise ops: their lowering and
    // gradient rules are in `special`.
    Erf,
    Erfc,
    ErfInv,
    Expm1,
    Cbrt,
    Tan,
    Atan,
    Asin,
    Acos,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Lgamma,
    Digamma,
    /// `polygamma(1, x)`, the derivative of digamma (its gradient rule).
    Trigamma,
    Reciprocal,
    Softplus,
    LogSigmoid,
    IsInf,
    BitwiseNot,
    PopulationCount,
}

/// Which operand dtypes a unary op accepts.
enum Accepts {
    Float,
    Numeric,
    Int,
    Bool,
}

impl Unary {
    fn accepts(self) -> Accepts {
        use Unary::*;
        match self {
            Neg | Abs | Square | Relu | Sign | Reciprocal => Accepts::Numeric,
            LogicalNot => Accepts::Bool,
            BitwiseNot | PopulationCount => Accepts::Int,
            _ => Accepts::Float,
        }
    }

    /// Does the op's gradient read its output rather than its input (as
    /// `tanh`'s `1 - y^2`)? A loop's gradient may then keep the output
    /// instead of recomputing it (`While::residuals`).
    pub(crate) fn gradient_reads_output(self) -> bool {
        use Unary::*;
        matches!(self, Exp | Sqrt | Tanh | Sigmoid | Cbrt)
    }

    /// Does XLA compute the op on complex numbers (see the module docs)?
    fn takes_complex(self) -> bool {
        use Unary::*;
        matches!(
            self,
            Neg | Abs
                | Exp
                | Log
                | Log1p
                | Expm1
                | Sqrt
                | Rsqrt
                | Square
                | Reciprocal
                | Sign
                | Tanh
                | Sin
                | Cos
                | Tan
                | Sinh
                | Cosh
                | Asin
                | Acos
                | Atan
                | Asinh
                | Acosh
                | Atanh
        )
    }

    fn result_dtype(self, input: DType) -> DType {
        match self {
            // |z| of a complex number is real.
            Unary::Abs => input.real_part(),
            Unary::IsNan | Unary::IsFinite | Unary::IsInf => DType::Bool,
            // TensorFlow's population_count gives uint8 for every dtype.
            Unary::PopulationCount => DType::U8,
            _ => input,
        }
    }
}

impl OpDef for Unary {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Elementwise on each example alike: the batch axis is one more.
        Some(batching::all_batched(*self, inputs))
    }

    fn name(&self) -> &'static str {
        use Unary::*;
        match self {
            Neg => "neg",
            Abs => "abs",
            Exp => "exp",
            Log => "log",
            Log1p => "log1p",
            Sqrt => "sqrt",
            Rsqrt => "rsqrt",
            Square => "square",
            Tanh => "tanh",
            Sigmoid => "sigmoid",
            Relu => "relu",
            Sin => "sin",
            Cos => "cos",
            Floor => "floor",
            Ceil => "ceil",
            Round => "round",
            Sign => "sign",
            LogicalNot => "logical_not",
            IsNan => "is_nan",
            IsFinite => "is_finite",
            Erf => "erf",
            Erfc => "erfc",
            ErfInv => "erf_inv",
            Expm1 => "expm1",
            Cbrt => "cbrt",
            Tan => "tan",
            Atan => "atan",
            Asin => "asin",
            Acos => "acos",
            Sinh => "sinh",
            Cosh => "cosh",
            Asinh => "asinh",
            Acosh => "acosh",
            Atanh => "atanh",
            Lgamma => "lgamma",
            Digamma => "digamma",
            Trigamma => "trigamma",
            Reciprocal => "reciprocal",
            Softplus => "softplus",
            LogSigmoid => "log_sigmoid",
            IsInf => "is_inf",
            BitwiseNot => "bitwise_not",
            PopulationCount => "population_count",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        let d = inputs[0].dtype;
        if d.is_complex() {
            super::complex::check_complex_operand(self.name(), d, self.takes_complex())?;
            return Ok(vec![TensorType::new(
                self.result_dtype(d),
                inputs[0].shape.clone(),
            )]);
        }
        let (ok, wanted) = match self.accepts() {
            Accepts::Float => (d.is_float(), "floating-point"),
            Accepts::Numeric => (d.is_numeric(), "numeric"),
            Accepts::Int => (d.is_int(), "integer"),
            Accepts::Bool => (d == DType::Bool, "bool"),
        };
        check_dtype(self.name(), d, ok, wanted)?;
        Ok(vec![TensorType::new(
            self.result_dtype(d),
            inputs[0].shape.clone(),
        )])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        use Unary::*;
        let x = &inputs[0];
        let unsigned = x.ty.dtype.is_unsigned_int();
        let out = match self {
            Neg => cx.unary("negate", x),
            Abs if unsigned => x.clone(),
            Abs => cx.unary_to("abs", x, x.ty.dtype.real_part()),
            Exp => cx.unary("exponential", x),
            Log => cx.unary("log", x),
            Log1p => cx.unary("log_plus_one", x),
            Sqrt => cx.unary("sqrt", x),
            Rsqrt => cx.unary("rsqrt", x),
            Square => cx.binary("multiply", x, x),
            Tanh => cx.unary("tanh", x),
            Sigmoid => cx.unary("logistic", x),
            Relu => {
                let zero = cx.constant(Scalar::I64(0), x.ty.clone());
                cx.binary("maximum", x, &zero)
            }
            Sin => cx.unary("sine", x),
            Cos => cx.unary("cosine", x),
            Floor => cx.unary("floor", x),
            Ceil => cx.unary("ceil", x),
            Round => cx.unary("round_nearest_even", x),
            Sign if unsigned => {
                let zero = cx.constant(Scalar::I64(0), x.ty.clone());
                let one = cx.constant(Scalar::I64(1), x.ty.clone());
                let pos = cx.compare(Cmp::Gt, x, &zero);
                cx.select(&pos, &one, &zero)
            }
            Sign => cx.unary("sign", x),
            LogicalNot => cx.unary("not", x),
            IsNan => cx.compare(Cmp::Ne, x, x),
            IsFinite => cx.unary_to("is_finite", x, DType::Bool),
            Erf | Erfc | ErfInv | Expm1 | Cbrt | Tan | Atan | Asin | Acos | Sinh | Cosh | Asinh
            | Acosh | Atanh | Lgamma | Digamma | Trigamma | Reciprocal | Softplus | LogSigmoid
            | IsInf | BitwiseNot | PopulationCount => super::special::lower_unary(*self, cx, x),
        };
        Ok(vec![out])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        use Unary::*;
        let (x, y) = (&inputs[0], &outputs[0]);
        if !x.dtype().is_inexact()
            || matches!(
                self,
                Floor
                    | Ceil
                    | Round
                    | Sign
                    | LogicalNot
                    | IsNan
                    | IsFinite
                    | IsInf
                    | BitwiseNot
                    | PopulationCount
            )
        {
            return Ok(vec![None]); // piecewise constant, or not real-valued
        }
        let g = grad_or_zeros(grads, y)?;
        let dx = match self {
            Neg => g.neg()?,
            Abs if x.dtype().is_complex() => super::complex::abs_grad(x, y, &g)?,
            Abs => g.mul(&x.sign()?)?,
            Exp => g.mul(y)?,
            Log => g.div(x)?,
            Log1p => g.div(&x.add_scalar(1.0)?)?,
            Sqrt => g.mul_scalar(0.5)?.div(y)?,
            Rsqrt => g.mul(y)?.div(x)?.mul_scalar(-0.5)?,
            Square => g.mul(x)?.mul_scalar(2.0)?,
            Tanh => g.mul(&y.square()?.neg()?.add_scalar(1.0)?)?,
            Sigmoid => g.mul(y)?.mul(&y.neg()?.add_scalar(1.0)?)?,
            Relu => g.mul(&x.gt_scalar(0.0)?.cast(x.dtype())?)?,
            Sin => g.mul(&x.cos()?)?,
            Cos => g.mul(&x.sin()?)?.neg()?,
            Erf | Erfc | ErfInv | Expm1 | Cbrt | Tan | Atan | Asin | Acos | Sinh | Cosh | Asinh
            | Acosh | Atanh | Lgamma | Digamma | Trigamma | Reciprocal | Softplus | LogSigmoid => {
                super::special::unary_grad(*self, x, y, &g)?
            }
            Floor | Ceil | Round | Sign | LogicalNot | IsNan | IsFinite | IsInf | BitwiseNot
            | PopulationCount => unreachable!("handled above"),
        };
        Ok(vec![Some(dx)])
    }
}

// ----------------------------------------------------------------- binary

/// Elementwise functions of two operands, with NumPy broadcasting.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum Binary {
    Add,
    Sub,
    Mul,
    Div,
    FloorDiv,
    FloorMod,
    Pow,
    Maximum,
    Minimum,
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
    LogicalAnd,
    LogicalOr,
    // Lowering and gradient rules in `special`.
    Atan2,
    TruncateMod,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
    LeftShift,
    RightShift,
}

impl Binary {
    fn comparison(self) -> Option<Cmp> {
        Some(match self {
            Binary::Eq => Cmp::Eq,
            Binary::Ne => Cmp::Ne,
            Binary::Lt => Cmp::Lt,
            Binary::Le => Cmp::Le,
            Binary::Gt => Cmp::Gt,
            Binary::Ge => Cmp::Ge,
            _ => return None,
        })
    }

    /// Does XLA compute the op on complex numbers (see the module docs)?
    fn takes_complex(self) -> bool {
        use Binary::*;
        matches!(self, Add | Sub | Mul | Div | Pow | Eq | Ne)
    }

    /// The dtype of `div` on integer operands (TensorFlow's truediv).
    fn true_div_dtype(d: DType) -> DType {
        match d {
            DType::I8 | DType::I16 | DType::U8 | DType::U16 => DType::F32,
            d if d.is_int() => DType::F64,
            d => d,
        }
    }
}

impl OpDef for Binary {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        Some(batching::aligned(inputs, batched).and_then(|x| batching::all_batched(*self, &x)))
    }

    fn name(&self) -> &'static str {
        use Binary::*;
        match self {
            Add => "add",
            Sub => "sub",
            Mul => "mul",
            Div => "div",
            FloorDiv => "floordiv",
            FloorMod => "floormod",
            Pow => "pow",
            Maximum => "maximum",
            Minimum => "minimum",
            Eq => "equal",
            Ne => "not_equal",
            Lt => "less",
            Le => "less_equal",
            Gt => "greater",
            Ge => "greater_equal",
            LogicalAnd => "logical_and",
            LogicalOr => "logical_or",
            Atan2 => "atan2",
            TruncateMod => "truncatemod",
            BitwiseAnd => "bitwise_and",
            BitwiseOr => "bitwise_or",
            BitwiseXor => "bitwise_xor",
            LeftShift => "left_shift",
            RightShift => "right_shift",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        use Binary::*;
        let name = self.name();
        expect_arity(name, inputs, 2)?;
        let d = same_dtype(name, inputs)?;
        match self {
            _ if d.is_complex() => {
                super::complex::check_complex_operand(name, d, self.takes_complex())?
            }
            Eq | Ne => check_dtype(name, d, true, "any")?,
            LogicalAnd | LogicalOr => check_dtype(name, d, d == DType::Bool, "bool")?,
            Atan2 => check_dtype(name, d, d.is_float(), "floating-point")?,
            BitwiseAnd | BitwiseOr | BitwiseXor | LeftShift | RightShift => {
                check_dtype(name, d, d.is_int(), "integer")?
            }
            _ => check_dtype(name, d, d.is_numeric(), "numeric")?,
        }
        let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape).ok_or_else(|| {
            Error::invalid(
                name,
                format!("incompatible shapes for broadcasting: {}", describe(inputs)),
            )
        })?;
        let dtype = match self {
            _ if self.comparison().is_some() => DType::Bool,
            Div => Self::true_div_dtype(d),
            _ => d,
        };
        Ok(vec![TensorType::new(dtype, shape)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        use Binary::*;
        let dims = &outputs[0].dims;
        let a = cx.broadcast_to(&inputs[0], dims);
        let b = cx.broadcast_to(&inputs[1], dims);
        if let Some(cmp) = self.comparison() {
            return Ok(vec![cx.compare(cmp, &a, &b)]);
        }
        let out = match self {
            Add => cx.binary("add", &a, &b),
            Sub => cx.binary("subtract", &a, &b),
            Mul => cx.binary("multiply", &a, &b),
            Div => {
                let t = outputs[0].dtype;
                let (a, b) = (cx.convert(&a, t), cx.convert(&b, t));
                cx.binary("divide", &a, &b)
            }
            FloorDiv => floor_div(cx, &a, &b),
            FloorMod => floor_mod(cx, &a, &b),
            Pow => super::power::power(cx, &a, &b),
            Maximum => nan_propagating(cx, "maximum", &a, &b),
            Minimum => nan_propagating(cx, "minimum", &a, &b),
            LogicalAnd => cx.binary("and", &a, &b),
            LogicalOr => cx.binary("or", &a, &b),
            Atan2 | TruncateMod | BitwiseAnd | BitwiseOr | BitwiseXor | LeftShift | RightShift => {
                super::special::lower_binary(*self, cx, &a, &b)
            }
            Eq | Ne | Lt | Le | Gt | Ge => unreachable!("comparisons returned above"),
        };
        Ok(vec![out])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        use Binary::*;
        let (a, b) = (&inputs[0], &inputs[1]);
        if !a.dtype().is_inexact() || !outputs[0].dtype().is_inexact() {
            return Ok(vec![None, None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let (da, db) = match self {
            Add => (g.clone(), g),
            Sub => (g.clone(), g.neg()?),
            Mul => (g.mul(b)?, g.mul(a)?),
            Div => (g.div(b)?, g.mul(a)?.div(&b.square()?)?.neg()?),
            Pow => super::power::power_grads(a, b, &outputs[0], &g)?,
            Maximum | Minimum => {
                let a_wins = if *self == Maximum { a.ge(b)? } else { a.le(b)? };
                let mask = a_wins.cast(a.dtype())?;
                (g.mul(&mask)?, g.mul(&mask.neg()?.add_scalar(1.0)?)?)
            }
            // FloorDiv is piecewise constant; FloorMod's b-gradient follows
            // TensorFlow: d(a mod b) = da - floor(a/b) db.
            FloorDiv => return Ok(vec![None, None]),
            FloorMod => (g.clone(), g.mul(&a.floordiv(b)?)?.neg()?),
            Atan2 | TruncateMod => super::special::binary_grad(*self, a, b, &g)?,
            BitwiseAnd | BitwiseOr | BitwiseXor | LeftShift | RightShift => {
                return Ok(vec![None, None]);
            }
            Eq | Ne | Lt | Le | Gt | Ge | LogicalAnd | LogicalOr => return Ok(vec![None, None]),
        };
        Ok(vec![Some(unbroadcast(&da, a)?), Some(unbroadcast(&db, b)?)])
    }
}

/// `maximum`/`minimum` that return NaN when either operand is NaN, as
/// TensorFlow does; XLA's CPU kernels would return the other operand.
fn nan_propagating(cx: &mut Emitter, name: &str, a: &Val, b: &Val) -> Val {
    let m = cx.binary(name, a, b);
    if !a.ty.dtype.is_float() {
        return m;
    }
    let a_nan = cx.compare(Cmp::Ne, a, a);
    let with_a = cx.select(&a_nan, a, &m);
    let b_nan = cx.compare(Cmp::Ne, b, b);
    cx.select(&b_nan, b, &with_a)
}

/// True where `r != 0` and `r` and `b` have different signs: the cases
/// where truncating division must be corrected to floor division.
fn needs_floor_fix(cx: &mut Emitter, r: &Val, b: &Val) -> Val {
    let zero = cx.constant(Scalar::I64(0), r.ty.clone());
    let nonzero = cx.compare(Cmp::Ne, r, &zero);
    let r_neg = cx.compare(Cmp::Lt, r, &zero);
    let b_neg = cx.compare(Cmp::Lt, b, &zero);
    let differ = cx.compare(Cmp::Ne, &r_neg, &b_neg);
    cx.binary("and", &nonzero, &differ)
}

fn floor_div(cx: &mut Emitter, a: &Val, b: &Val) -> Val {
    let d = a.ty.dtype;
    if d.is_float() {
        let q = cx.binary("divide", a, b);
        return cx.unary("floor", &q);
    }
    let q = cx.binary("divide", a, b);
    if d.is_unsigned_int() {
        return q;
    }
    let r = cx.binary("remainder", a, b);
    let fix = needs_floor_fix(cx, &r, b);
    let one = cx.constant(Scalar::I64(1), q.ty.clone());
    let zero = cx.constant(Scalar::I64(0), q.ty.clone());
    let delta = cx.select(&fix, &one, &zero);
    cx.binary("subtract", &q, &delta)
}

fn floor_mod(cx: &mut Emitter, a: &Val, b: &Val) -> Val {
    let r = cx.binary("remainder", a, b);
    if a.ty.dtype.is_unsigned_int() {
        return r;
    }
    let fix = needs_floor_fix(cx, &r, b);
    let shifted = cx.binary("add", &r, b);
    cx.select(&fix, &shifted, &r)
}

// ----------------------------------------------------------------- select

/// `where(cond, x, y)`: elements of `x` where `cond` is true, else of `y`;
/// all three broadcast together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Select;

impl OpDef for Select {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        Some(batching::aligned(inputs, batched).and_then(|x| batching::all_batched(*self, &x)))
    }

    fn name(&self) -> &'static str {
        "where"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("where", inputs, 3)?;
        check_dtype(
            "where",
            inputs[0].dtype,
            inputs[0].dtype == DType::Bool,
            "a bool condition and two",
        )?;
        let d = same_dtype("where", &inputs[1..])?;
        let incompatible = || {
            Error::invalid(
                "where",
                format!("incompatible shapes for broadcasting: {}", describe(inputs)),
            )
        };
        let s = broadcast_shapes(&inputs[0].shape, &inputs[1].shape).ok_or_else(incompatible)?;
        let s = broadcast_shapes(&s, &inputs[2].shape).ok_or_else(incompatible)?;
        Ok(vec![TensorType::new(d, s)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let dims = &outputs[0].dims;
        let p = cx.broadcast_to(&inputs[0], dims);
        let a = cx.broadcast_to(&inputs[1], dims);
        let b = cx.broadcast_to(&inputs[2], dims);
        Ok(vec![cx.select(&p, &a, &b)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (c, x, y) = (&inputs[0], &inputs[1], &inputs[2]);
        if !x.dtype().is_inexact() {
            return Ok(vec![None, None, None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        let zero = g.zeros_like()?;
        let dx = unbroadcast(&c.where_(&g, &zero)?, x)?;
        let dy = unbroadcast(&c.where_(&zero, &g)?, y)?;
        Ok(vec![None, Some(dx), Some(dy)])
    }
}

// ------------------------------------------------------------------- cast

/// Converts elements to another dtype: floats to ints truncate toward
/// zero, anything to bool is `x != 0`, bool to numbers is 0 or 1; a real
/// number becomes a complex one with imaginary part 0, and a complex
/// number cast to a real dtype keeps its real part (as `tf.cast` and
/// NumPy do; XLA itself converts complex only to complex).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Cast(pub DType);

impl OpDef for Cast {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Elementwise on each example alike: the batch axis is one more.
        Some(batching::all_batched(*self, inputs))
    }

    fn name(&self) -> &'static str {
        "cast"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("cast", inputs, 1)?;
        inputs[0].dtype.check_compilable()?;
        self.0.check_compilable()?;
        Ok(vec![TensorType::new(self.0, inputs[0].shape.clone())])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        if self.0 == DType::Bool && x.ty.dtype != DType::Bool {
            let zero = cx.constant(Scalar::I64(0), x.ty.clone());
            return Ok(vec![cx.compare(Cmp::Ne, x, &zero)]);
        }
        if x.ty.dtype.is_complex() && !self.0.is_complex() {
            let re = cx.unary_to("real", x, x.ty.dtype.real_part());
            return Ok(vec![cx.convert(&re, self.0)]);
        }
        Ok(vec![cx.convert(x, self.0)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        if !x.dtype().is_inexact() || !self.0.is_inexact() {
            return Ok(vec![None]);
        }
        // Complex to real keeps the real part: its transpose is a complex
        // number with imaginary part 0, which the cast back gives; real to
        // complex transposes to the real part, which the cast also gives.
        Ok(vec![Some(
            grad_or_zeros(grads, &outputs[0])?.cast(x.dtype())?,
        )])
    }
}

// -------------------------------------------------------- tensor methods

macro_rules! unary_methods {
    ($($(#[$doc:meta])* $method:ident => $kind:ident),* $(,)?) => {
        /// **Elementwise** maths of one operand.
        impl Tensor {$(
            $(#[$doc])*
            #[track_caller]
            pub fn $method(&self) -> Result<Tensor> {
                apply1(Unary::$kind, &[self])
            }
        )*}
    };
}

unary_methods! {
    /// `-x`.
    neg => Neg,
    /// `|x|`.
    abs => Abs,
    /// `e^x`.
    exp => Exp,
    /// Natural logarithm.
    log => Log,
    /// `ln(1 + x)`, accurate near 0.
    log1p => Log1p,
    /// Square root (NaN below 0).
    sqrt => Sqrt,
    /// `1 / sqrt(x)`.
    rsqrt => Rsqrt,
    /// `x * x`.
    square => Square,
    /// Hyperbolic tangent.
    tanh => Tanh,
    /// `1 / (1 + e^-x)`.
    sigmoid => Sigmoid,
    /// `max(x, 0)`.
    relu => Relu,
    /// Sine (radians).
    sin => Sin,
    /// Cosine (radians).
    cos => Cos,
    /// Rounds toward negative infinity.
    floor => Floor,
    /// Rounds toward positive infinity.
    ceil => Ceil,
    /// Rounds half to even, like `tf.round`.
    round => Round,
    /// -1, 0 or 1 (0 for NaN's sign bit aside, NaN stays NaN).
    sign => Sign,
    /// Boolean negation.
    logical_not => LogicalNot,
    /// True where the element is NaN.
    is_nan => IsNan,
    /// True where the element is neither NaN nor infinite.
    is_finite => IsFinite,
}

macro_rules! binary_methods {
    ($($(#[$doc:meta])* $method:ident, $scalar:ident => $kind:ident),* $(,)?) => {
        /// **Elementwise** arithmetic and comparisons of two operands, each with
        /// a host-number form (`add_scalar`).
        impl Tensor {$(
            $(#[$doc])*
            #[track_caller]
            pub fn $method(&self, other: &Tensor) -> Result<Tensor> {
                super::power::check_int_power(Binary::$kind, other)?;
                apply1(Binary::$kind, &[self, other])
            }
            /// The same op with a host number, converted to this tensor's
            /// dtype (a TypeError if the dtype cannot hold it).
            #[track_caller]
            pub fn $scalar(&self, other: impl Into<Scalar>) -> Result<Tensor> {
                let value = other.into();
                super::power::check_int_power_scalar(Binary::$kind, value, self.dtype())?;
                let s = scalar_as(value, self.dtype())?;
                apply1(Binary::$kind, &[self, &s])
            }
        )*}
    };
}

binary_methods! {
    /// Elementwise sum with broadcasting.
    add, add_scalar => Add,
    /// Elementwise difference with broadcasting.
    sub, sub_scalar => Sub,
    /// Elementwise product with broadcasting.
    mul, mul_scalar => Mul,
    /// True division; integer operands give a float result.
    div, div_scalar => Div,
    /// Division rounded toward negative infinity (Python's `//`).
    floordiv, floordiv_scalar => FloorDiv,
    /// Remainder with the divisor's sign (Python's `%`).
    floormod, floormod_scalar => FloorMod,
    /// `self` to the power `other`, elementwise (`tf.pow`).
    pow, pow_scalar => Pow,
    /// Elementwise maximum (NaN if either is NaN).
    maximum, maximum_scalar => Maximum,
    /// Elementwise minimum (NaN if either is NaN).
    minimum, minimum_scalar => Minimum,
    /// `self == other`, elementwise, as booleans.
    eq, eq_scalar => Eq,
    /// `self != other`, elementwise, as booleans.
    ne, ne_scalar => Ne,
    /// `self < other`, elementwise, as booleans.
    lt, lt_scalar => Lt,
    /// `self <= other`, elementwise, as booleans.
    le, le_scalar => Le,
    /// `self > other`, elementwise, as booleans.
    gt, gt_scalar => Gt,
    /// `self >= other`, elementwise, as booleans.
    ge, ge_scalar => Ge,
    /// Boolean and, elementwise.
    logical_and, logical_and_scalar => LogicalAnd,
    /// Boolean or, elementwise.
    logical_or, logical_or_scalar => LogicalOr,
}

/// **Elementwise**: casts and selection.
impl Tensor {
    /// Converts to `dtype`.
    #[track_caller]
    pub fn cast(&self, dtype: DType) -> Result<Tensor> {
        apply1(Cast(dtype), &[self])
    }

    /// `where(self, x, y)`: picks from `x` where `self` is true, else `y`.
    #[track_caller]
    pub fn where_(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        apply1(Select, &[self, x, y])
    }
}

/// `where(cond, x, y)` as a free function, TensorFlow style.
#[track_caller]
pub fn where_(cond: &Tensor, x: &Tensor, y: &Tensor) -> Result<Tensor> {
    cond.where_(x, y)
}
