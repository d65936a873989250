//! Ops that make tensors from attributes rather than from data: `fill`
//! (splat constants), `iota`/`range`, and stateless random numbers.
//!
//! Random ops take their seed as an *input* (a `u64[2]` Threefry state built
//! on the host), not as an attribute, so one compiled program serves every
//! seed: calling `random_uniform` with a thousand seeds compiles once. The
//! same seed always gives the same values on the same device kind.

use super::batching;
use super::{OpDef, check_attr_value, expect_arity, normalize_axis};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, OrPanic, Result};
use crate::ir::{Scalar, Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// Rejects negative dimensions (zero is fine: an empty tensor).
fn check_dims(op: &str, dims: &[i64]) -> Result<()> {
    if let Some(d) = dims.iter().find(|d| **d < 0) {
        return Err(Error::invalid(
            op,
            format!("dimension {d} in shape {dims:?} is negative"),
        ));
    }
    Ok(())
}

fn spec(dtype: DType, dims: &[i64]) -> ArraySpec {
    ArraySpec::new(dtype, dims)
}

// --------------------------------------------------------------- constant

/// A tensor of shape `dims` whose every element is `value` (`tf.fill`).
/// `value` is stored already converted to `dtype`, so equal fills share one
/// cached program.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constant {
    pub value: Scalar,
    pub dims: Vec<i64>,
    pub dtype: DType,
}

impl OpDef for Constant {
    fn name(&self) -> &'static str {
        "fill"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 0)?;
        check_dims(self.name(), &self.dims)?;
        self.dtype.check_compilable()?;
        check_attr_value(self.name(), "value", self.value, self.dtype)?;
        Ok(vec![TensorType::known(self.dtype, &self.dims)])
    }

    fn lower(&self, cx: &mut Emitter, _inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.constant(self.value, spec(self.dtype, &self.dims))])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(Vec::new())
    }
}

/// `value` everywhere, with the shape and dtype of the input
/// (`tf.fill(tf.shape(x), value)`). Only for inputs whose shape is not
/// fully known while tracing (a known shape is a plain `fill`): the input
/// carries the shape, which becomes concrete when the program is lowered.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FillLike {
    pub value: Scalar,
}

impl OpDef for FillLike {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Elementwise on each example alike: the batch axis is one more.
        Some(batching::all_batched(self.clone(), inputs))
    }

    fn name(&self) -> &'static str {
        "fill_like"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        inputs[0].dtype.check_compilable()?;
        check_attr_value(self.name(), "value", self.value, inputs[0].dtype)?;
        Ok(vec![inputs[0].clone()])
    }

    fn lower(&self, cx: &mut Emitter, _inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.constant(self.value, outputs[0].clone())])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        super::no_gradient(inputs)
    }
}

// ------------------------------------------------------------------- iota

/// `start + i * delta` where `i` counts along `axis` of a `dims`-shaped
/// array: `tf.range` when rank 1, a plain iota when start 0 and delta 1.
/// `start` and `delta` are stored converted to `dtype`; a negative `delta`
/// on an unsigned dtype is kept signed and lowered as a subtraction.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Iota {
    pub dims: Vec<i64>,
    pub axis: i64,
    pub dtype: DType,
    pub start: Scalar,
    pub delta: Scalar,
}

impl OpDef for Iota {
    fn name(&self) -> &'static str {
        "iota"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let name = self.name();
        expect_arity(name, inputs, 0)?;
        check_dims(name, &self.dims)?;
        normalize_axis(name, self.axis, self.dims.len())?;
        if !self.dtype.check_compilable()?.is_numeric() {
            return Err(Error::invalid(
                name,
                format!("dtype must be numeric, got {}", self.dtype),
            ));
        }
        check_attr_value(name, "start", self.start, self.dtype)?;
        // A negative step on an unsigned dtype is kept signed (`range`).
        let delta_dtype = match (self.dtype.is_unsigned_int(), self.delta) {
            (true, Scalar::I64(_)) => DType::I64,
            _ => self.dtype,
        };
        check_attr_value(name, "delta", self.delta, delta_dtype)?;
        Ok(vec![TensorType::known(self.dtype, &self.dims)])
    }

    fn lower(&self, cx: &mut Emitter, _inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let ty = outputs[0].clone();
        let axis = normalize_axis(self.name(), self.axis, ty.rank())? as i64;
        let counts = cx.iota(ty.clone(), axis);
        let backwards = self.delta.as_f64() < 0.0 && self.dtype.is_unsigned_int();
        let step = match backwards {
            true => Scalar::U64(self.delta.as_i64().unsigned_abs()),
            false => self.delta,
        };
        let scaled = match step.as_f64() == 1.0 {
            true => counts,
            false => {
                let step = cx.constant(step, ty.clone());
                cx.binary("multiply", &counts, &step)
            }
        };
        let start = cx.constant(self.start, ty);
        let out = match (backwards, self.start.as_f64() == 0.0) {
            (true, _) => cx.binary("subtract", &start, &scaled),
            (false, true) => scaled,
            (false, false) => cx.binary("add", &scaled, &start),
        };
        Ok(vec![out])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(Vec::new())
    }
}

// ----------------------------------------------------------------- random

/// Checks the seed operand (`u64[2]` state) and the requested dtype.
fn infer_random(op: &str, inputs: &[TensorType], dims: &[i64], dtype: DType) -> Result<TensorType> {
    expect_arity(op, inputs, 1)?;
    if inputs[0] != TensorType::known(DType::U64, &[2]) {
        return Err(Error::invalid(
            op,
            format!("the seed state must be u64(2,), got {}", inputs[0]),
        ));
    }
    check_dims(op, dims)?;
    if !dtype.check_compilable()?.is_float() {
        return Err(Error::invalid(
            op,
            format!("dtype must be floating-point (f16, bf16, f32 or f64), got {dtype}"),
        ));
    }
    Ok(TensorType::new(dtype, Shape::known(dims)))
}

/// The unsigned type of the same width as `dtype`, and its mantissa bits.
fn float_layout(dtype: DType) -> (DType, u32) {
    match dtype {
        DType::F16 => (DType::U16, 10),
        DType::BF16 => (DType::U16, 7),
        DType::F64 => (DType::U64, 52),
        _ => (DType::U32, 23),
    }
}

/// The bit pattern of 1.0 in `dtype`.
fn one_bits(dtype: DType) -> u64 {
    match dtype {
        DType::F16 => 0x3C00,
        DType::BF16 => 0x3F80,
        DType::F64 => 0x3FF0_0000_0000_0000,
        _ => 0x3F80_0000,
    }
}

/// Uniform floats in [0, 1) of `dtype` from random `bits` (u32, or u64 for
/// f64): the top mantissa-many bits become the mantissa of a number in
/// [1, 2), from which 1 is subtracted. Exact, and never 1.0.
fn bits_to_unit(cx: &mut Emitter, bits: &Val, dtype: DType) -> Val {
    let (uint, mantissa) = float_layout(dtype);
    let width = if bits.ty.dtype == DType::U64 { 64 } else { 32 };
    let shift = cx.constant(Scalar::U64(u64::from(width - mantissa)), bits.ty.clone());
    let top = cx.binary("shift_right_logical", bits, &shift);
    let top = cx.convert(&top, uint);
    let exponent = cx.constant(Scalar::U64(one_bits(dtype)), top.ty.clone());
    let in_one_two = cx.binary("or", &top, &exponent);
    let floats = cx.bitcast_convert(&in_one_two, dtype);
    let one = cx.constant(Scalar::F64(1.0), floats.ty.clone());
    cx.binary("subtract", &floats, &one)
}

/// Draws `out`-shaped uniform [0, 1) floats from `state`, returning the
/// advanced state too (for a second draw).
fn draw_unit(cx: &mut Emitter, state: &Val, dims: &[i64], dtype: DType) -> (Val, Val) {
    let bit_type = if dtype == DType::F64 {
        DType::U64
    } else {
        DType::U32
    };
    let (next, bits) = cx.rng_bit_generator(state, spec(bit_type, dims));
    (next, bits_to_unit(cx, &bits, dtype))
}

/// `x * scale + offset`, skipping the identity steps.
fn affine(cx: &mut Emitter, x: &Val, scale: f64, offset: f64) -> Val {
    let scaled = match scale == 1.0 {
        true => x.clone(),
        false => {
            let s = cx.constant(Scalar::F64(scale), x.ty.clone());
            cx.binary("multiply", x, &s)
        }
    };
    match offset == 0.0 {
        true => scaled,
        false => {
            let o = cx.constant(Scalar::F64(offset), x.ty.clone());
            cx.binary("add", &scaled, &o)
        }
    }
}

/// Uniform floats in `[minval, maxval)` (`tf.random.stateless_uniform`).
/// The single input is the `u64[2]` Threefry state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomUniform {
    pub dims: Vec<i64>,
    pub dtype: DType,
    pub minval: Scalar,
    pub maxval: Scalar,
}

/// Raw random bits (`jax.random.bits`): `dims`-shaped unsigned integers
/// (u32 or u64) from the `u64[2]` Threefry state; how keys are split.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomBits {
    pub dims: Vec<i64>,
    pub dtype: DType,
}

impl OpDef for RandomBits {
    fn name(&self) -> &'static str {
        "random_bits"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        if inputs[0] != TensorType::known(DType::U64, &[2]) {
            return Err(Error::invalid(
                self.name(),
                format!("the key must be u64(2,), got {}", inputs[0]),
            ));
        }
        check_dims(self.name(), &self.dims)?;
        if !matches!(self.dtype, DType::U32 | DType::U64) {
            return Err(Error::invalid(
                self.name(),
                format!("draws u32 or u64 bits, not {}", self.dtype),
            ));
        }
        Ok(vec![TensorType::known(self.dtype, &self.dims)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (_, bits) = cx.rng_bit_generator(&inputs[0], spec(self.dtype, &self.dims));
        Ok(vec![bits])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        super::no_gradient(inputs)
    }
}

impl OpDef for RandomUniform {
    fn name(&self) -> &'static str {
        "random_uniform"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        Ok(vec![infer_random(
            self.name(),
            inputs,
            &self.dims,
            self.dtype,
        )?])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (_, unit) = draw_unit(cx, &inputs[0], &self.dims, self.dtype);
        let (lo, hi) = (self.minval.as_f64(), self.maxval.as_f64());
        Ok(vec![affine(cx, &unit, hi - lo, lo)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        super::no_gradient(inputs)
    }
}

/// Normal floats with `mean` and `stddev` (`tf.random.stateless_normal`),
/// by the Box-Muller transform of two uniform draws, computed in f32 (f64
/// for f64) and converted. The single input is the `u64[2]` state.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RandomNormal {
    pub dims: Vec<i64>,
    pub dtype: DType,
    pub mean: Scalar,
    pub stddev: Scalar,
}

impl OpDef for RandomNormal {
    fn name(&self) -> &'static str {
        "random_normal"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        Ok(vec![infer_random(
            self.name(),
            inputs,
            &self.dims,
            self.dtype,
        )?])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let work = if self.dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let (state, u1) = draw_unit(cx, &inputs[0], &self.dims, work);
        let (_, u2) = draw_unit(cx, &state, &self.dims, work);
        // 1 - u1 lies in (0, 1], so its logarithm is finite.
        let one_minus = affine(cx, &u1, -1.0, 1.0);
        let log = cx.unary("log", &one_minus);
        let radius_sq = affine(cx, &log, -2.0, 0.0);
        let radius = cx.unary("sqrt", &radius_sq);
        let angle = affine(cx, &u2, std::f64::consts::TAU, 0.0);
        let cos = cx.unary("cosine", &angle);
        let z = cx.binary("multiply", &radius, &cos);
        let z = affine(cx, &z, self.stddev.as_f64(), self.mean.as_f64());
        Ok(vec![cx.convert(&z, self.dtype)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        super::no_gradient(inputs)
    }
}

// -------------------------------------------------------- tensor methods

/// SplitMix64: spreads nearby seeds (0, 1, 2, ...) over the key space.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// The `u64[2]` Threefry state for `seed` (key, counter), uploaded as the
/// random ops' input.
pub(crate) fn seed_state(seed: u64) -> Result<Tensor> {
    Tensor::from_vec(vec![mix(seed), 0u64], &[2])
}

/// The closed range of values an integer dtype holds.
/// Element count of `range(start, limit, delta)` as `tf.range` computes it,
/// with the values already truncated for integer dtypes; empty when the
/// range runs the wrong way.
fn range_len(start: f64, limit: f64, delta: f64, dtype: DType) -> Result<i64> {
    if !dtype.is_int() {
        return Ok(((limit - start) / delta).ceil().max(0.0) as i64);
    }
    let (lo, hi) = dtype
        .int_range()
        .ok_or_else(|| dtype.unsupported("not an integer dtype"))?;
    let (s, l, d) = (start as i128, limit as i128, delta as i128);
    if d == 0 {
        return Err(Error::invalid(
            "range",
            "requires delta != 0 (after conversion to an integer)",
        ));
    }
    if s < lo || s > hi || l < lo - 1 || l > hi + 1 {
        return Err(Error::invalid(
            "range",
            format!("start {s} or limit {l} is out of range for {dtype}"),
        ));
    }
    let span = l - s;
    let n = if (span > 0) == (d > 0) {
        (span + d - d.signum()) / d
    } else {
        0
    };
    Ok(n.max(0) as i64)
}

/// **Constructors** made on the device: filled, like another tensor,
/// ranges and random values.
impl Tensor {
    /// A `dims`-shaped tensor of `dtype` with every element `value`
    /// converted to `dtype` (`tf.fill`).
    #[track_caller]
    pub fn fill(dims: &[i64], value: impl Into<Scalar>, dtype: DType) -> Result<Tensor> {
        let op = Constant {
            value: value.into().convert_exact(dtype)?,
            dims: dims.to_vec(),
            dtype,
        };
        apply1(op, &[])
    }

    /// Zeros. Panics (with the error's message, at the caller's line) only
    /// if the device fails or `dims` has a negative entry, like
    /// `Tensor::scalar`; see `try_zeros`.
    #[track_caller]
    pub fn zeros(dims: &[i64], dtype: DType) -> Tensor {
        Self::try_zeros(dims, dtype).or_panic()
    }

    /// Ones. Panics only where `zeros` does; see `try_ones`.
    #[track_caller]
    pub fn ones(dims: &[i64], dtype: DType) -> Tensor {
        Self::try_ones(dims, dtype).or_panic()
    }

    /// Zeros, reporting errors.
    #[track_caller]
    pub fn try_zeros(dims: &[i64], dtype: DType) -> Result<Tensor> {
        Self::fill(dims, 0i64, dtype)
    }

    /// Ones, reporting errors.
    #[track_caller]
    pub fn try_ones(dims: &[i64], dtype: DType) -> Result<Tensor> {
        Self::fill(dims, 1i64, dtype)
    }

    /// Zeros with this tensor's shape and dtype.
    #[track_caller]
    pub fn zeros_like(&self) -> Result<Tensor> {
        self.fill_like(0i64)
    }

    /// Ones with this tensor's shape and dtype.
    #[track_caller]
    pub fn ones_like(&self) -> Result<Tensor> {
        self.fill_like(1i64)
    }

    /// `value` everywhere, with this tensor's shape and dtype (also when
    /// tracing with unknown dimensions, which the compiled program fills in).
    #[track_caller]
    pub fn fill_like(&self, value: impl Into<Scalar>) -> Result<Tensor> {
        match self.shape().as_known() {
            Some(dims) => Self::fill(&dims, value, self.dtype()),
            None => apply1(
                FillLike {
                    value: value.into().convert_exact(self.dtype())?,
                },
                &[self],
            ),
        }
    }

    /// 0, 1, 2, ... along `axis` (negative counts from the end), repeated
    /// over the other dimensions.
    #[track_caller]
    pub fn iota(dims: &[i64], axis: i64, dtype: DType) -> Result<Tensor> {
        let op = Iota {
            dims: dims.to_vec(),
            axis,
            dtype,
            start: Scalar::I64(0).cast(dtype),
            delta: Scalar::I64(1).cast(dtype),
        };
        apply1(op, &[])
    }

    /// `start, start + delta, ...` up to but excluding `limit`, like
    /// `tf.range`: `ceil((limit - start) / delta)` elements, none when the
    /// range runs the wrong way. Integer dtypes truncate the arguments
    /// first. `delta == 0` is an `InvalidArgument` error.
    #[track_caller]
    pub fn range(start: f64, limit: f64, delta: f64, dtype: DType) -> Result<Tensor> {
        if delta == 0.0 {
            return Err(Error::invalid("range", "requires delta != 0"));
        }
        if !(start.is_finite() && limit.is_finite() && delta.is_finite()) {
            return Err(Error::invalid(
                "range",
                format!("start, limit and delta must be finite, got {start}, {limit}, {delta}"),
            ));
        }
        let n = range_len(start, limit, delta, dtype)?;
        let signed = |v: f64| match dtype.is_int() {
            true => Scalar::I64(v as i64),
            false => Scalar::F64(v),
        };
        let delta = match delta < 0.0 && dtype.is_unsigned_int() {
            true => signed(delta),
            false => signed(delta).cast(dtype),
        };
        let op = Iota {
            dims: vec![n],
            axis: 0,
            dtype,
            start: signed(start).cast(dtype),
            delta,
        };
        apply1(op, &[])
    }

    /// Uniform random floats in [0, 1) (`tf.random.stateless_uniform`).
    /// The same `seed` gives the same values; the seed is an input of the
    /// compiled program, so new seeds do not recompile.
    #[track_caller]
    pub fn random_uniform(dims: &[i64], seed: u64, dtype: DType) -> Result<Tensor> {
        Self::random_uniform_range(dims, 0.0, 1.0, seed, dtype)
    }

    /// Uniform random floats in [minval, maxval).
    #[track_caller]
    pub fn random_uniform_range(
        dims: &[i64],
        minval: f64,
        maxval: f64,
        seed: u64,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = RandomUniform {
            dims: dims.to_vec(),
            dtype,
            minval: Scalar::F64(minval),
            maxval: Scalar::F64(maxval),
        };
        apply1(op, &[&seed_state(seed)?])
    }

    /// Standard normal random floats (mean 0, standard deviation 1,
    /// `tf.random.stateless_normal`); deterministic per `seed`.
    #[track_caller]
    pub fn random_normal(dims: &[i64], seed: u64, dtype: DType) -> Result<Tensor> {
        Self::random_normal_with(dims, 0.0, 1.0, seed, dtype)
    }

    /// Normal random floats with the given mean and standard deviation.
    #[track_caller]
    pub fn random_normal_with(
        dims: &[i64],
        mean: f64,
        stddev: f64,
        seed: u64,
        dtype: DType,
    ) -> Result<Tensor> {
        let op = RandomNormal {
            dims: dims.to_vec(),
            dtype,
            mean: Scalar::F64(mean),
            stddev: Scalar::F64(stddev),
        };
        apply1(op, &[&seed_state(seed)?])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::pad::Pad;
    use crate::ops::shape::OneHot;

    fn refused(r: Result<Vec<TensorType>>, needle: &str) {
        let e = r.expect_err("an attribute the dtype cannot hold was accepted");
        assert!(e.to_string().contains(needle), "{needle:?} not in: {e}");
    }

    /// Ops read from a saved graph skip the public constructors' exact
    /// conversion; their shape rules refuse what lowering would `cast`.
    #[test]
    fn scalar_attributes_must_fit_their_dtype() {
        let fill = |value, dtype| Constant {
            value,
            dims: vec![2],
            dtype,
        };
        refused(
            fill(Scalar::F64(f64::NAN), DType::I32).infer(&[]),
            "value NaN is not a i32 value",
        );
        refused(fill(Scalar::I64(300), DType::U8).infer(&[]), "value 300");
        refused(fill(Scalar::I64(-1), DType::U32).infer(&[]), "value -1");
        refused(
            fill(Scalar::F64(2.0), DType::Bool).infer(&[]),
            "not a bool value",
        );
        assert!(fill(Scalar::F64(f64::NAN), DType::F32).infer(&[]).is_ok());
        assert!(fill(Scalar::U64(u64::MAX), DType::U64).infer(&[]).is_ok());

        let x = TensorType::known(DType::I32, &[2]);
        let like = FillLike {
            value: Scalar::F64(f64::INFINITY),
        };
        refused(like.infer(std::slice::from_ref(&x)), "value inf");
        let pad = Pad {
            low: vec![1],
            high: vec![0],
            interior: vec![0],
            value: Scalar::F64(0.5),
        };
        refused(pad.infer(std::slice::from_ref(&x)), "padding value");
        let one_hot = OneHot {
            depth: 3,
            on_value: Scalar::F64(1.0),
            off_value: Scalar::F64(f64::NAN),
            dtype: DType::I8,
        };
        refused(one_hot.infer(std::slice::from_ref(&x)), "off_value NaN");

        let iota = |start, delta, dtype| Iota {
            dims: vec![3],
            axis: 0,
            dtype,
            start,
            delta,
        };
        refused(
            iota(Scalar::F64(0.5), Scalar::I64(1), DType::I32).infer(&[]),
            "start 0.5",
        );
        refused(
            iota(Scalar::I64(0), Scalar::F64(f64::NAN), DType::I64).infer(&[]),
            "delta NaN",
        );
        // `range` keeps a negative step on an unsigned dtype signed.
        assert!(
            iota(Scalar::U64(5), Scalar::I64(-1), DType::U8)
                .infer(&[])
                .is_ok()
        );
    }
}
