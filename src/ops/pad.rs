//! Layer: ops. Padding and replication: `pad` (StableHLO `pad`: low, high
//! and interior padding, negative edges cutting elements off), `reverse`
//! and `broadcast_to` (NumPy rules) as ops, and the composites built on
//! them: TensorFlow's `tf.pad` in its CONSTANT, REFLECT and SYMMETRIC
//! modes and `tf.tile`.
//!
//! Attributes are host integers, as XLA needs every shape at compile time.
//! Imports `ir`, `lower::emitter`, `dtype`, `error` and `tensor` (for the
//! user-facing methods), like every op family.

use super::batching;
use super::{OpDef, expect_arity, grad_or_zeros, normalize_axis, unbroadcast};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Scalar, Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

fn typed(dtype: DType, dims: Vec<Dim>) -> Vec<TensorType> {
    vec![TensorType::new(dtype, Shape::from_dims(dims))]
}

// -------------------------------------------------------------------- pad

/// StableHLO `pad`: in every dimension, `low[i]` copies of `value` before
/// the elements, `high[i]` after them and `interior[i]` between each two
/// neighbours. A negative `low`/`high` removes that many elements from the
/// edge instead; `interior` must be >= 0. A dimension of size `n` becomes
/// `low + n + (n - 1) * interior + high` (just `low + high` when `n` is 0).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pad {
    pub low: Vec<i64>,
    pub high: Vec<i64>,
    pub interior: Vec<i64>,
    /// The padding value (converted to the operand's dtype).
    pub value: Scalar,
}

impl Pad {
    fn dim(&self, k: usize, n: Dim, x: &TensorType) -> Result<Dim> {
        let Some(n) = n else { return Ok(None) };
        let (l, h, i) = (self.low[k], self.high[k], self.interior[k]);
        // In i128: every term is an i64 from the caller, and their sum
        // must not wrap before it is checked.
        let wide = (i128::from(n) - 1).max(0) * i128::from(i) + i128::from(n);
        let wide = wide + i128::from(l) + i128::from(h);
        let Ok(size) = i64::try_from(wide) else {
            return Err(Error::invalid(
                "pad",
                format!(
                    "padding low {l}, high {h}, interior {i} of dimension {k} (size {n}) of {x} \
                     gives a size of {wide}, past the largest dimension XLA holds"
                ),
            ));
        };
        if size < 0 {
            return Err(Error::invalid(
                "pad",
                format!(
                    "padding low {l}, high {h}, interior {i} of dimension {k} (size {n}) of {x} \
                     gives a negative size {size}"
                ),
            ));
        }
        Ok(Some(size))
    }
}

impl OpDef for Pad {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let x = match batching::materialized(&inputs[0], batched[0], size) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        if batched[1..].contains(&true) {
            return None; // a padding value per example
        }
        let front = |v: &[i64]| [&[0][..], v].concat();
        let op = Pad {
            low: front(&self.low),
            high: front(&self.high),
            interior: front(&self.interior),
            value: self.value,
        };
        let mut ins = vec![x];
        ins.extend(inputs[1..].iter().cloned());
        Some(batching::all_batched(op, &ins))
    }

    fn name(&self) -> &'static str {
        "pad"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("pad", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        let rank = self.low.len();
        let fail = |m: String| Err(Error::invalid("pad", m));
        if self.high.len() != rank
            || self.interior.len() != rank
            || x.rank().is_some_and(|r| r != rank)
        {
            return fail(format!(
                "low {:?}, high {:?} and interior {:?} must each have one entry per dimension of {x}",
                self.low, self.high, self.interior
            ));
        }
        if let Some(k) = self.interior.iter().position(|&i| i < 0) {
            return fail(format!(
                "interior padding must be >= 0, got {} for dimension {k}",
                self.interior[k]
            ));
        }
        self.value
            .convert_exact(x.dtype)
            .map_err(|e| Error::invalid("pad", format!("padding value: {e}")))?;
        let dims: Vec<Dim> = match x.shape.dims() {
            Some(d) => d.to_vec(),
            None => vec![None; rank],
        };
        let out = (0..rank)
            .map(|k| self.dim(k, dims[k], x))
            .collect::<Result<_>>()?;
        Ok(typed(x.dtype, out))
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let dtype = x.ty.dtype;
        let value = cx.constant(self.value.convert_exact(dtype)?, ArraySpec::scalar(dtype));
        Ok(vec![cx.pad(
            x,
            &value,
            &self.low,
            &self.high,
            &self.interior,
            outputs[0].clone(),
        )])
    }

    /// Pad is linear: the gradient undoes the edges (padding back what
    /// negative edges cut off, with zeros) and then takes every
    /// `interior + 1`-th element.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None]);
        }
        let mut g = grad_or_zeros(grads, &outputs[0])?;
        let rank = self.low.len();
        if self.low.iter().chain(&self.high).any(|&p| p != 0) {
            let neg = |v: &[i64]| v.iter().map(|p| -p).collect::<Vec<_>>();
            g = g.pad_general(&neg(&self.low), &neg(&self.high), &vec![0; rank], 0.0)?;
        }
        if self.interior.iter().any(|&i| i > 0) {
            let strides: Vec<i64> = self.interior.iter().map(|i| i + 1).collect();
            g = g.strided_slice(&vec![0; rank], &vec![i64::MAX; rank], &strides)?;
        }
        Ok(vec![Some(g)])
    }
}

// ---------------------------------------------------------------- reverse

/// `tf.reverse`: the elements in reverse order along each of `axes`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reverse {
    pub axes: Vec<i64>,
}

impl Reverse {
    fn axes(&self, rank: usize) -> Result<Vec<i64>> {
        let mut out = Vec::with_capacity(self.axes.len());
        for &a in &self.axes {
            let k = normalize_axis("reverse", a, rank)? as i64;
            if out.contains(&k) {
                return Err(Error::invalid(
                    "reverse",
                    format!("axes {:?} name dimension {k} more than once", self.axes),
                ));
            }
            out.push(k);
        }
        out.sort_unstable();
        Ok(out)
    }
}

impl OpDef for Reverse {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let rank = inputs[0].rank() - 1;
        let axes = self
            .axes
            .iter()
            .map(|&a| batching::shifted(a, rank))
            .collect();
        Some(batching::all_batched(Reverse { axes }, inputs))
    }

    fn name(&self) -> &'static str {
        "reverse"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("reverse", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        if let Some(rank) = x.rank() {
            self.axes(rank)?;
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let axes = self.axes(x.ty.rank())?;
        if axes.is_empty() {
            return Ok(vec![x.clone()]);
        }
        Ok(vec![cx.reverse(x, &axes)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None]);
        }
        Ok(vec![Some(
            grad_or_zeros(grads, &outputs[0])?.reverse(&self.axes)?,
        )])
    }
}

// ----------------------------------------------------------- broadcast_to

/// `tf.broadcast_to`: NumPy broadcasting to `dims` (trailing dimensions
/// aligned; each operand dimension must be 1 or the target's size).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BroadcastTo {
    pub dims: Vec<i64>,
}

impl OpDef for BroadcastTo {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], size: i64) -> batching::Batched {
        let dims = [&[size][..], &self.dims].concat();
        let x = batching::pad_example_rank(&inputs[0], self.dims.len());
        Some(x.and_then(|x| batching::all_batched(BroadcastTo { dims }, &[x])))
    }

    fn name(&self) -> &'static str {
        "broadcast_to"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("broadcast_to", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        let fail = |m: String| Err(Error::invalid("broadcast_to", m));
        if let Some(k) = self.dims.iter().position(|&d| d < 0) {
            return fail(format!(
                "dimension {k} of the target shape {:?} is negative",
                self.dims
            ));
        }
        if let Some(dims) = x.shape.dims() {
            if dims.len() > self.dims.len() {
                return fail(format!(
                    "cannot broadcast {x} to the lower rank shape {:?}",
                    self.dims
                ));
            }
            let offset = self.dims.len() - dims.len();
            for (i, d) in dims.iter().enumerate() {
                let want = self.dims[offset + i];
                if let Some(d) = *d
                    && d != 1
                    && d != want
                {
                    return fail(format!(
                        "cannot broadcast {x} to {:?}: dimension {i} is {d}, not 1 or {want}",
                        self.dims
                    ));
                }
            }
        }
        Ok(vec![TensorType::known(x.dtype, &self.dims)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.broadcast_to(&inputs[0], &self.dims)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        Ok(vec![Some(unbroadcast(&g, &inputs[0])?)])
    }
}

// -------------------------------------------------------- tensor methods

/// How `Tensor::pad` fills the new elements (`tf.pad`'s `mode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    /// A constant value.
    Constant,
    /// A mirror image without the edge element: `[1, 2, 3]` padded by 2
    /// on both sides is `[3, 2, 1, 2, 3, 2, 1]`.
    Reflect,
    /// A mirror image with the edge element: `[1, 2, 3]` padded by 2 on
    /// both sides is `[2, 1, 1, 2, 3, 3, 2]`.
    Symmetric,
}

/// **Shape and layout**: padding, reversing, broadcasting and tiling.
impl Tensor {
    /// StableHLO's `pad` (see [`Pad`]): `low`/`high` copies of `value` at
    /// the edges of each dimension (negative: cut off), `interior` between
    /// neighbouring elements.
    #[track_caller]
    pub fn pad_general(
        &self,
        low: &[i64],
        high: &[i64],
        interior: &[i64],
        value: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let op = Pad {
            low: low.to_vec(),
            high: high.to_vec(),
            interior: interior.to_vec(),
            value: value.into(),
        };
        apply1(op, &[self])
    }

    /// `tf.pad(self, paddings, mode, constant_values)`: `paddings[i]` is
    /// `[before, after]` for dimension `i` (>= 0). `constant` is used in
    /// [`PadMode::Constant`] only. REFLECT needs both paddings below the
    /// dimension's size and SYMMETRIC at most its size.
    #[track_caller]
    pub fn pad(
        &self,
        paddings: &[[i64; 2]],
        mode: PadMode,
        constant: impl Into<Scalar>,
    ) -> Result<Tensor> {
        let rank = self.shape().rank();
        if rank.is_some_and(|r| r != paddings.len()) {
            return Err(Error::invalid(
                "pad",
                format!(
                    "paddings must have one [before, after] pair per dimension of {}: got {} pairs",
                    self.tensor_type(),
                    paddings.len()
                ),
            ));
        }
        if let Some(k) = paddings.iter().position(|p| p[0] < 0 || p[1] < 0) {
            return Err(Error::invalid(
                "pad",
                format!(
                    "paddings must be >= 0, got {:?} for dimension {k}",
                    paddings[k]
                ),
            ));
        }
        let low: Vec<i64> = paddings.iter().map(|p| p[0]).collect();
        let high: Vec<i64> = paddings.iter().map(|p| p[1]).collect();
        match mode {
            PadMode::Constant => self.pad_general(&low, &high, &vec![0; paddings.len()], constant),
            PadMode::Reflect | PadMode::Symmetric => {
                let mut x = self.clone();
                for (axis, p) in paddings.iter().enumerate() {
                    x = mirror_pad(&x, axis, *p, mode)?;
                }
                Ok(x)
            }
        }
    }

    /// `tf.reverse(self, axes)`.
    #[track_caller]
    pub fn reverse(&self, axes: &[i64]) -> Result<Tensor> {
        apply1(
            Reverse {
                axes: axes.to_vec(),
            },
            &[self],
        )
    }

    /// `tf.broadcast_to(self, dims)` with NumPy's rules.
    #[track_caller]
    pub fn broadcast_to(&self, dims: &[i64]) -> Result<Tensor> {
        apply1(
            BroadcastTo {
                dims: dims.to_vec(),
            },
            &[self],
        )
    }

    /// `tf.tile(self, multiples)`: `multiples[i]` copies along dimension
    /// `i` (one entry per dimension, each >= 0). Needs a known shape.
    #[track_caller]
    pub fn tile(&self, multiples: &[i64]) -> Result<Tensor> {
        let shape = self.shape();
        let Some(dims) = shape.as_known() else {
            return Err(Error::invalid(
                "tile",
                format!("needs a fully known shape, got {shape}"),
            ));
        };
        if multiples.len() != dims.len() {
            return Err(Error::invalid(
                "tile",
                format!(
                    "multiples {multiples:?} must have one entry per dimension of {}",
                    self.tensor_type()
                ),
            ));
        }
        if let Some(k) = multiples.iter().position(|&m| m < 0) {
            return Err(Error::invalid(
                "tile",
                format!(
                    "multiples must be >= 0, got {} for dimension {k}",
                    multiples[k]
                ),
            ));
        }
        if multiples.iter().all(|&m| m == 1) {
            return Ok(self.clone());
        }
        // [d0, d1] -> [1, d0, 1, d1] -> [m0, d0, m1, d1] -> [m0*d0, m1*d1].
        let spread: Vec<i64> = dims.iter().flat_map(|&d| [1, d]).collect();
        let target: Vec<i64> = dims
            .iter()
            .zip(multiples)
            .flat_map(|(&d, &m)| [m, d])
            .collect();
        let out: Vec<i64> = dims.iter().zip(multiples).map(|(d, m)| d * m).collect();
        self.reshape(&spread)?.broadcast_to(&target)?.reshape(&out)
    }
}

/// REFLECT or SYMMETRIC padding of one axis: mirrored slices concatenated
/// around the tensor.
fn mirror_pad(x: &Tensor, axis: usize, [before, after]: [i64; 2], mode: PadMode) -> Result<Tensor> {
    if before == 0 && after == 0 {
        return Ok(x.clone());
    }
    let n = x.dims()[axis];
    if n < 0 {
        return Err(Error::invalid(
            "pad",
            format!(
                "{mode:?} padding needs the size of dimension {axis} of {}",
                x.tensor_type()
            ),
        ));
    }
    // REFLECT skips the edge element, SYMMETRIC repeats it.
    let (skip, limit) = match mode {
        PadMode::Reflect => (1, n - 1),
        _ => (0, n),
    };
    if before > limit || after > limit {
        return Err(Error::invalid(
            "pad",
            format!(
                "paddings [{before}, {after}] of dimension {axis} must be at most {limit} in \
                 {mode:?} mode for a dimension of size {n}"
            ),
        ));
    }
    let part = |start: i64, len: i64| -> Result<Tensor> {
        let mut begin = vec![0; x.rank()];
        let mut size = vec![-1; x.rank()];
        begin[axis] = start;
        size[axis] = len;
        x.slice(&begin, &size)?.reverse(&[axis as i64])
    };
    let mut parts = Vec::with_capacity(3);
    if before > 0 {
        parts.push(part(skip, before)?);
    }
    parts.push(x.clone());
    if after > 0 {
        parts.push(part(n - skip - after, after)?);
    }
    Tensor::concat(&parts, axis as i64)
}
