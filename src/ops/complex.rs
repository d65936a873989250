//! Complex numbers: `complex(re, im)`, `real`, `imag`,
//! `conj`, and on top of them `angle`; the complex forms of `abs` and of
//! arithmetic live with the other elementwise ops (`ops::elementwise`).
//!
//! Dtypes: `complex` takes two real operands of one dtype, f32 (giving
//! c64) or f64 (giving c128), broadcast together; no other float has a
//! complex type in XLA. `real`, `imag` and `conj` of a complex tensor are
//! ops; of a real tensor the methods return what NumPy does (the tensor,
//! zeros, the tensor) without an op.
//!
//! Gradients follow JAX's convention: the gradient of a real loss `L` with
//! respect to a complex `z = x + iy` is `dL/dx - i dL/dy`, and each op's
//! rule is the *transpose* of its linearisation (not the conjugate
//! transpose), so a holomorphic `f` has the rule `g * f'(z)` and a cotangent
//! `g` pairs with a tangent `dz` as `Re(g * dz)`. Hence:
//! - `real(z)`: `complex(g, 0)`;
//! - `imag(z)`: `complex(0, -g)`;
//! - `conj(z)`: `conj(g)`;
//! - `complex(x, y)`: `(real(g), -imag(g))`;
//! - `abs(z)`: `g * conj(z) / |z|` (0 at `z = 0`).
//!
//! TensorFlow's gradients are the conjugates of these; JAX's were chosen
//! so that the FFT rules (`ops::fft`) can be JAX's too. Either way a real
//! loss's gradient with respect to a real input is the same number.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor`.

use super::batching;
use super::{OpDef, describe, expect_arity, same_dtype, unbroadcast};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{TensorType, broadcast_shapes};
use crate::lower::emitter::lowering_bug;
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// Errors unless an op that got a complex operand takes one (`ok`).
pub(crate) fn check_complex_operand(op: &str, dtype: DType, ok: bool) -> Result<()> {
    if ok {
        return Ok(());
    }
    let why = match op {
        "less" | "less_equal" | "greater" | "greater_equal" | "maximum" | "minimum" | "floor"
        | "ceil" | "round" | "relu" | "reduce_max" | "reduce_min" => {
            "complex numbers have no order"
        }
        _ => "XLA does not compute it on complex numbers",
    };
    Err(Error::invalid(
        op,
        format!(
            "is not defined for complex operands ({why}), got {dtype}; apply it to \
             .real(), .imag() or .abs()"
        ),
    ))
}

/// The gradient of `y = |x|` for complex `x` (see the module docs):
/// `g * conj(x) / |x|`, with 0 where `x` is 0 (JAX divides by 1 there).
pub(crate) fn abs_grad(x: &Tensor, y: &Tensor, g: &Tensor) -> Result<Tensor> {
    let d = x.dtype();
    let safe = y.eq_scalar(0.0)?.where_(&y.ones_like()?, y)?;
    x.conj()?.div(&safe.cast(d)?)?.mul(&g.cast(d)?)
}

// ---------------------------------------------------------------- complex

/// `complex(re, im)`: a complex tensor from its parts (f32 -> c64, f64 ->
/// c128), broadcast together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Complex;

impl OpDef for Complex {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        Some(batching::aligned(inputs, batched).and_then(|x| batching::all_batched(*self, &x)))
    }

    fn name(&self) -> &'static str {
        "complex"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("complex", inputs, 2)?;
        let d = same_dtype("complex", inputs)?;
        d.check_compilable()?;
        let out = match d {
            DType::F32 | DType::F64 => d.to_complex(),
            _ => None,
        };
        let Some(out) = out else {
            return Err(Error::invalid(
                "complex",
                format!(
                    "takes f32 or f64 parts (XLA's complex types are c64 and c128), got {d} \
                     (operands: {})",
                    describe(inputs)
                ),
            ));
        };
        let shape = broadcast_shapes(&inputs[0].shape, &inputs[1].shape).ok_or_else(|| {
            Error::invalid(
                "complex",
                format!("incompatible shapes for broadcasting: {}", describe(inputs)),
            )
        })?;
        Ok(vec![TensorType::new(out, shape)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let dims = &outputs[0].dims;
        let re = cx.broadcast_to(&inputs[0], dims);
        let im = cx.broadcast_to(&inputs[1], dims);
        Ok(vec![cx.binary_to("complex", &re, &im, outputs[0].dtype)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None, None]);
        };
        let (re, im) = (&inputs[0], &inputs[1]);
        let d_re = unbroadcast(&g.real()?, re)?;
        let d_im = unbroadcast(&g.imag()?.neg()?, im)?;
        Ok(vec![Some(d_re), Some(d_im)])
    }
}

// ------------------------------------------------------------------ parts

/// The real part, the imaginary part or the conjugate of a complex tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ComplexPart {
    Real,
    Imag,
    Conj,
}

impl OpDef for ComplexPart {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Each example alike: the batch axis is one more leading axis.
        Some(batching::all_batched(*self, inputs))
    }

    fn name(&self) -> &'static str {
        match self {
            ComplexPart::Real => "real",
            ComplexPart::Imag => "imag",
            ComplexPart::Conj => "conj",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        let d = inputs[0].dtype;
        if !d.check_compilable()?.is_complex() {
            return Err(Error::invalid(
                self.name(),
                format!("expects a complex (c64 or c128) operand, got {d}"),
            ));
        }
        let out = match self {
            ComplexPart::Conj => d,
            _ => d.real_part(),
        };
        Ok(vec![TensorType::new(out, inputs[0].shape.clone())])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let z = &inputs[0];
        let d = z.ty.dtype;
        if !d.is_complex() {
            return Err(lowering_bug(self.name(), "a real operand"));
        }
        let part = d.real_part();
        let out = match self {
            ComplexPart::Real => cx.unary_to("real", z, part),
            ComplexPart::Imag => cx.unary_to("imag", z, part),
            ComplexPart::Conj => {
                let re = cx.unary_to("real", z, part);
                let im = cx.unary_to("imag", z, part);
                let minus_im = cx.unary("negate", &im);
                cx.binary_to("complex", &re, &minus_im, d)
            }
        };
        Ok(vec![out])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None]);
        };
        let dz = match self {
            ComplexPart::Real => complex(g, &g.zeros_like()?)?,
            ComplexPart::Imag => complex(&g.zeros_like()?, &g.neg()?)?,
            ComplexPart::Conj => g.conj()?,
        };
        Ok(vec![Some(dz)])
    }
}

// -------------------------------------------------------- tensor methods

/// `tf.complex(re, im)`: the complex tensor `re + i im` (f32 parts give
/// c64, f64 parts c128), broadcast together.
#[track_caller]
pub fn complex(re: &Tensor, im: &Tensor) -> Result<Tensor> {
    apply1(Complex, &[re, im])
}

/// **Elementwise**: complex numbers from parts, and their parts.
impl Tensor {
    /// `tf.complex(self, im)`: see [`complex`].
    #[track_caller]
    pub fn complex(&self, im: &Tensor) -> Result<Tensor> {
        complex(self, im)
    }

    /// The real part (f32 for c64, f64 for c128); a real tensor itself.
    #[track_caller]
    pub fn real(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return Ok(self.clone());
        }
        apply1(ComplexPart::Real, &[self])
    }

    /// The imaginary part (f32 for c64, f64 for c128); zeros for a real
    /// tensor.
    #[track_caller]
    pub fn imag(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return self.zeros_like();
        }
        apply1(ComplexPart::Imag, &[self])
    }

    /// The complex conjugate `re - i im`; a real tensor itself.
    #[track_caller]
    pub fn conj(&self) -> Result<Tensor> {
        if !self.dtype().is_complex() {
            return Ok(self.clone());
        }
        apply1(ComplexPart::Conj, &[self])
    }

    /// `np.angle`: the argument `atan2(imag, real)` in (-pi, pi], a real
    /// tensor (for a real tensor 0 or pi by its sign).
    #[track_caller]
    pub fn angle(&self) -> Result<Tensor> {
        self.imag()?.atan2(&self.real()?)
    }
}
