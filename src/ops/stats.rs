//! Layer: ops. Statistics and norms built on the reductions, following
//! TensorFlow: `reduce_logsumexp` (max-shifted, so it stays finite for
//! large inputs), `reduce_variance`/`reduce_std`, `moments`
//! (`tf.nn.moments`), `l2_normalize` (`tf.math.l2_normalize`), `norm`
//! (`tf.norm` for vectors: euclidean, 1 and infinity), `clip_by_value`, and
//! the one op of the family, `stop_gradient` (the identity with no
//! gradient).
//!
//! The composites are `Tensor` methods over existing ops, so their
//! gradients are the chain rule through those ops. They take floats only
//! and name themselves in their errors. Imports `ir`, `lower::emitter`,
//! `dtype`, `error` and `tensor`.

use super::batching;
use super::{OpDef, check_dtype, expect_arity};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Scalar, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

// ---------------------------------------------------------- stop_gradient

/// `tf.stop_gradient`: the identity, through which no gradient flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct StopGradient;

impl OpDef for StopGradient {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Elementwise on each example alike: the batch axis is one more.
        Some(batching::all_batched(*self, inputs))
    }

    fn name(&self) -> &'static str {
        "stop_gradient"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("stop_gradient", inputs, 1)?;
        inputs[0].dtype.check_compilable()?;
        Ok(vec![inputs[0].clone()])
    }

    fn lower(&self, _cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![inputs[0].clone()])
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

// ------------------------------------------------------------------- norm

/// Which norm `Tensor::norm` computes (`tf.norm`'s and
/// `jnp.linalg.norm`'s `ord`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum NormOrd {
    /// sqrt(sum(x²)) (`'euclidean'`, also the Frobenius norm over all
    /// elements or two axes).
    Euclidean,
    /// sum(|x|); over two axes, the largest column sum.
    One,
    /// max(|x|) (`np.inf`); over two axes, the largest row sum.
    Inf,
    /// `2`: over two axes, the spectral norm (the largest singular
    /// value); over one axis or none, the euclidean norm.
    Two,
    /// `'nuc'`: the nuclear norm (the sum of the singular values), over
    /// two axes only.
    Nuclear,
    /// `-1`: over two axes, the smallest column sum of `|x|`; over one
    /// axis or none, `1 / sum(1 / |x|)`.
    NegOne,
    /// `-2`: over two axes, the smallest singular value; over one axis or
    /// none, `sum(|x|^-2)^(-1/2)`.
    NegTwo,
    /// `-inf`: over two axes, the smallest row sum of `|x|`; over one axis
    /// or none, `min(|x|)`.
    NegInf,
    /// A vector p-norm `sum(|x|^p)^(1/p)` for a finite `p != 0` (TensorFlow
    /// takes positive `p`, NumPy any); over one axis or none only.
    P(f64),
}

fn float_only(op: &str, x: &Tensor) -> Result<()> {
    let d = x.dtype();
    check_dtype(op, d, d.is_float(), "floating-point")
}

/// `x` as a variance is computed on it: float32 and 16-bit floats in
/// float64 (a cast XLA fuses into the reductions that read it), rounded
/// once at the end. The deviations from the mean are then exact enough
/// that the variance is the float32 nearest the exact one (float32
/// deviations and squares erred by up to twice that on a `[32, 16, 16,
/// 16]` activation, against JAX's 1.1e-7).
fn statistics_input(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::F32 | DType::F16 | DType::BF16 => x.cast(DType::F64),
        _ => Ok(x.clone()),
    }
}

/// Drops the `axes` that a keepdims reduction kept (all axes if empty).
fn squeeze_axes(x: &Tensor, axes: &[i64], keepdims: bool) -> Result<Tensor> {
    if keepdims {
        return Ok(x.clone());
    }
    if axes.is_empty() {
        return x.reshape(&[]);
    }
    x.squeeze(axes)
}

/// **Elementwise**: passing a value with no gradient, and clipping it
/// between bounds.
impl Tensor {
    /// `tf.stop_gradient`: the same value, treated as a constant by
    /// gradient tapes.
    #[track_caller]
    pub fn stop_gradient(&self) -> Result<Tensor> {
        apply1(StopGradient, &[self])
    }

    /// `tf.clip_by_value(self, min, max)`: `min(max(self, min), max)` with
    /// `min` and `max` broadcast to this tensor's shape (which must not
    /// grow). The gradient passes where `min <= x <= max`.
    #[track_caller]
    pub fn clip_by_value(&self, min: &Tensor, max: &Tensor) -> Result<Tensor> {
        let out = self.maximum(min)?.minimum(max)?;
        if out.shape() != self.shape() {
            return Err(Error::invalid(
                "clip_by_value",
                format!(
                    "clip bounds {} and {} would broadcast {} to {}",
                    min.tensor_type(),
                    max.tensor_type(),
                    self.tensor_type(),
                    out.shape()
                ),
            ));
        }
        Ok(out)
    }

    /// `clip_by_value` with host-number bounds.
    #[track_caller]
    pub fn clip_by_value_scalar(
        &self,
        min: impl Into<Scalar>,
        max: impl Into<Scalar>,
    ) -> Result<Tensor> {
        self.maximum_scalar(min)?.minimum_scalar(max)
    }
}

/// **Reductions and statistics**: log-sum-exp, variance, moments, norms,
/// and what is scaled by a norm.
impl Tensor {
    /// `tf.math.reduce_logsumexp`: log(sum(exp(x))) over `axes` (empty:
    /// all), computed as `m + log(sum(exp(x - m)))` with `m` the max (0
    /// where the max is infinite), so large inputs do not overflow.
    #[track_caller]
    pub fn reduce_logsumexp(&self, axes: &[i64], keepdims: bool) -> Result<Tensor> {
        float_only("reduce_logsumexp", self)?;
        let raw_max = self.reduce_max(axes, true)?;
        let finite = raw_max.is_finite()?;
        let m = finite
            .where_(&raw_max, &raw_max.zeros_like()?)?
            .stop_gradient()?;
        let sum = self.sub(&m)?.exp()?.reduce_sum(axes, true)?;
        let out = sum.log()?.add(&m)?;
        squeeze_axes(&out, axes, keepdims)
    }

    /// `tf.math.reduce_variance`: the mean squared deviation from the mean
    /// over `axes` (empty: all).
    #[track_caller]
    pub fn reduce_variance(&self, axes: &[i64], keepdims: bool) -> Result<Tensor> {
        float_only("reduce_variance", self)?;
        let x = statistics_input(self)?;
        let mean = x.reduce_mean(axes, true)?;
        x.sub(&mean)?
            .square()?
            .reduce_mean(axes, keepdims)?
            .cast(self.dtype())
    }

    /// `tf.math.reduce_std`: the square root of `reduce_variance`.
    #[track_caller]
    pub fn reduce_std(&self, axes: &[i64], keepdims: bool) -> Result<Tensor> {
        float_only("reduce_std", self)?;
        self.reduce_variance(axes, keepdims)?.sqrt()
    }

    /// `tf.nn.moments(x, axes, keepdims)`: the mean and the variance over
    /// `axes` (empty: all). The variance is taken around the mean with its
    /// gradient stopped, as TensorFlow does (the derivative of the
    /// variance with respect to the mean is zero there).
    #[track_caller]
    ///
    /// Unlike [`Tensor::reduce_variance`], the deviations are taken in the
    /// input's dtype (their sums are still accumulated in float64): this
    /// is BatchNorm's statistic, on every training step, where float64
    /// deviations made W14's ResNet step 12% slower for a gain below one
    /// ulp (a float32 variance within 1.1 ulp of the exact one on a `[32,
    /// 16, 16, 16]` activation, where JAX's is within 1).
    pub fn moments(&self, axes: &[i64], keepdims: bool) -> Result<(Tensor, Tensor)> {
        float_only("moments", self)?;
        let mean = self.reduce_mean(axes, true)?;
        let variance = self
            .sub(&mean.stop_gradient()?)?
            .square()?
            .reduce_mean(axes, true)?;
        Ok((
            squeeze_axes(&mean, axes, keepdims)?,
            squeeze_axes(&variance, axes, keepdims)?,
        ))
    }

    /// `tf.math.l2_normalize(x, axis, epsilon)`: `x / sqrt(max(sum(x²),
    /// epsilon))` over `axes` (empty: all); TensorFlow's default epsilon
    /// is `1e-12`.
    #[track_caller]
    pub fn l2_normalize(&self, axes: &[i64], epsilon: f64) -> Result<Tensor> {
        float_only("l2_normalize", self)?;
        let square_sum = self.square()?.reduce_sum(axes, true)?;
        self.mul(&square_sum.maximum_scalar(epsilon)?.rsqrt()?)
    }

    /// `tf.norm(x, ord, axis, keepdims)`: vector norms over `axes` (one
    /// axis, or none for every element as one vector), and matrix norms
    /// over two axes `[rows, columns]`: the Frobenius norm (euclidean), the
    /// largest column sum of `|x|` (1) and the largest row sum (infinity),
    /// as TensorFlow and NumPy define them, and from the singular values
    /// (`Tensor::singular_values`) the spectral (2) and nuclear norms; and
    /// NumPy's negative orders (-1, -2, -inf: the smallest column sum,
    /// singular value and row sum of a matrix) and vector p-norms.
    #[track_caller]
    pub fn norm(&self, ord: NormOrd, axes: &[i64], keepdims: bool) -> Result<Tensor> {
        float_only("norm", self)?;
        if axes.len() > 2 {
            return Err(Error::invalid(
                "norm",
                format!(
                    "{ord:?} norm over axes {axes:?}: norms are over one axis (a vector), two (a \
                     matrix) or none (every element)"
                ),
            ));
        }
        let matrix = |ord: NormOrd| -> Result<Tensor> {
            let &[rows, columns] = axes else {
                return Err(Error::invalid(
                    "norm",
                    format!("the {ord:?} norm is a matrix norm, over two axes, got axes {axes:?}"),
                ));
            };
            let line_sums = |over: i64, across: i64, largest: bool| -> Result<Tensor> {
                let sums = self.abs()?.reduce_sum(&[over], true)?;
                let pick = if largest {
                    sums.reduce_max(&[across], true)?
                } else {
                    sums.reduce_min(&[across], true)?
                };
                squeeze_axes(&pick, axes, keepdims)
            };
            match ord {
                NormOrd::One => line_sums(rows, columns, true),
                NormOrd::NegOne => line_sums(rows, columns, false),
                NormOrd::Inf => line_sums(columns, rows, true),
                NormOrd::NegInf => line_sums(columns, rows, false),
                NormOrd::Two => {
                    singular_value_norm(self, SpectralKind::Largest, rows, columns, keepdims)
                }
                NormOrd::NegTwo => {
                    singular_value_norm(self, SpectralKind::Smallest, rows, columns, keepdims)
                }
                NormOrd::Nuclear => {
                    singular_value_norm(self, SpectralKind::Sum, rows, columns, keepdims)
                }
                NormOrd::Euclidean | NormOrd::P(_) => Err(Error::invalid(
                    "norm",
                    format!("{ord:?} is not a matrix norm here"),
                )),
            }
        };
        let abs = || self.abs();
        match (ord, axes.len()) {
            (NormOrd::Euclidean, _) | (NormOrd::Two, 0 | 1) => {
                self.square()?.reduce_sum(axes, keepdims)?.sqrt()
            }
            (NormOrd::P(p), 0 | 1) => p_norm(self, p, axes, keepdims),
            (NormOrd::P(p), _) => Err(Error::invalid(
                "norm",
                format!(
                    "the p-norm (p = {p}) is a vector norm, over one axis or none, got axes {axes:?}"
                ),
            )),
            (NormOrd::One, 0 | 1) => abs()?.reduce_sum(axes, keepdims),
            (NormOrd::Inf, 0 | 1) => abs()?.reduce_max(axes, keepdims),
            (NormOrd::NegInf, 0 | 1) => abs()?.reduce_min(axes, keepdims),
            (NormOrd::NegOne, 0 | 1) => p_norm(self, -1.0, axes, keepdims),
            (NormOrd::NegTwo, 0 | 1) => p_norm(self, -2.0, axes, keepdims),
            (ord, _) => matrix(ord),
        }
    }

    /// `tf.clip_by_norm(self, clip_norm)`: scaled so its L2 norm over all
    /// elements is at most `clip_norm` (`self * clip_norm / max(norm,
    /// clip_norm)`), unchanged when already inside. A zero tensor stays
    /// zero, with a zero (not NaN) gradient.
    #[track_caller]
    pub fn clip_by_norm(&self, clip_norm: f64) -> Result<Tensor> {
        check_clip_norm("clip_by_norm", clip_norm)?;
        let norm = safe_l2_norm(self)?;
        self.mul_scalar(clip_norm)?
            .div(&norm.maximum_scalar(clip_norm)?)
    }
}

/// `sum(|x|^p)^(1/p)` over `axes` (all if empty), for a finite `p != 0`.
fn p_norm(x: &Tensor, p: f64, axes: &[i64], keepdims: bool) -> Result<Tensor> {
    if !p.is_finite() || p == 0.0 {
        return Err(Error::invalid(
            "norm",
            format!("a p-norm needs a finite p other than 0, got {p}"),
        ));
    }
    x.abs()?
        .pow_scalar(p)?
        .reduce_sum(axes, keepdims)?
        .pow_scalar(1.0 / p)
}

/// What a singular-value norm reads from the singular values.
#[derive(Clone, Copy, PartialEq)]
enum SpectralKind {
    Largest,
    Smallest,
    Sum,
}

/// The largest or smallest singular value, or their sum, of the matrices
/// over axes `[rows, columns]`: those axes are moved last for the SVD.
fn singular_value_norm(
    x: &Tensor,
    kind: SpectralKind,
    rows: i64,
    columns: i64,
    keepdims: bool,
) -> Result<Tensor> {
    let r = x.rank() as i64;
    let at = |a: i64| if a < 0 { a + r } else { a };
    let (rows, columns) = (at(rows), at(columns));
    if !(0..r).contains(&rows) || !(0..r).contains(&columns) || rows == columns {
        return Err(Error::invalid(
            "norm",
            format!(
                "matrix axes [{rows}, {columns}] must be two distinct axes of {}",
                x.tensor_type()
            ),
        ));
    }
    let mut perm: Vec<i64> = (0..r).filter(|&a| a != rows && a != columns).collect();
    perm.extend([rows, columns]);
    let s = x.transpose(&perm)?.singular_values()?;
    // An empty matrix's norm is 0 (singular values are >= 0).
    let norm = match kind {
        SpectralKind::Sum => s.reduce_sum(&[-1], false)?,
        SpectralKind::Largest => s.reduce_max(&[-1], false)?.maximum_scalar(0.0)?,
        SpectralKind::Smallest => s.reduce_min(&[-1], false)?.maximum_scalar(0.0)?,
    };
    if !keepdims {
        return Ok(norm);
    }
    let (first, second) = (rows.min(columns), rows.max(columns));
    norm.expand_dims(first)?.expand_dims(second)
}

fn check_clip_norm(op: &str, clip_norm: f64) -> Result<()> {
    if clip_norm > 0.0 && clip_norm.is_finite() {
        return Ok(());
    }
    Err(Error::invalid(
        op,
        format!("clip_norm must be positive and finite, got {clip_norm}"),
    ))
}

/// The L2 norm of all of `t`, with the square root's gradient kept finite
/// at zero (TensorFlow's `clip_by_norm` does the same).
fn safe_l2_norm(t: &Tensor) -> Result<Tensor> {
    let sum = t.square()?.reduce_sum(&[], false)?;
    let positive = sum.gt_scalar(0.0)?;
    let safe = positive.where_(&sum, &sum.ones_like()?)?;
    positive.where_(&safe.sqrt()?, &sum)
}

/// `tf.clip_by_global_norm(tensors, clip_norm)`: every tensor scaled by
/// `clip_norm / max(global_norm, clip_norm)`, where the global norm is the
/// L2 norm of all their elements together; returns the scaled tensors and
/// the global norm. A non-finite global norm makes every result NaN, as
/// TensorFlow's does.
///
/// The tensors may mix float dtypes (a mixed-precision model's bf16 and
/// f32 gradients, clipped together as one model's): the squares are summed
/// in f32, or f64 when a tensor is f64, so half-precision gradients are not
/// summed in half precision; the global norm is returned in that dtype and
/// each tensor is scaled in its own. Call it on a training step's
/// gradients before `Optimizer::apply_gradients` to clip everything the
/// step updates together, however many optimizers apply them.
///
/// ```
/// use xlafn::prelude::*;
/// let (a, b) = (Tensor::vector(&[3.0f32])?, Tensor::vector(&[4.0f32])?);
/// let (clipped, norm) = xlafn::clip_by_global_norm(&[a, b], 1.0)?; // norm 5
/// assert_eq!(norm.item::<f32>()?, 5.0);
/// assert_eq!(clipped[1].to_vec::<f32>()?, vec![0.8]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn clip_by_global_norm(tensors: &[Tensor], clip_norm: f64) -> Result<(Vec<Tensor>, Tensor)> {
    check_clip_norm("clip_by_global_norm", clip_norm)?;
    if tensors.is_empty() {
        return Err(Error::invalid(
            "clip_by_global_norm",
            "expects at least one tensor",
        ));
    }
    if let Some(t) = tensors.iter().find(|t| !t.dtype().is_float()) {
        return Err(Error::Type(format!(
            "clip_by_global_norm: the tensors must be floats, got {}",
            t.dtype()
        )));
    }
    let sum_dtype = if tensors.iter().any(|t| t.dtype() == DType::F64) {
        DType::F64
    } else {
        DType::F32
    };
    let in_dtype = |t: &Tensor, d: DType| {
        if t.dtype() == d {
            Ok(t.clone())
        } else {
            t.cast(d)
        }
    };
    let mut total = Tensor::fill(&[], 0.0, sum_dtype)?;
    for t in tensors {
        total = total.add(&in_dtype(t, sum_dtype)?.square()?.reduce_sum(&[], false)?)?;
    }
    let global = total.sqrt()?;
    // clip_norm * min(1 / global, 1 / clip_norm): 1 when inside or zero.
    let scale = global
        .reciprocal()?
        .minimum_scalar(1.0 / clip_norm)?
        .mul_scalar(clip_norm)?;
    let mut scales: Vec<(DType, Tensor)> = Vec::new();
    let mut scaled = Vec::with_capacity(tensors.len());
    for t in tensors {
        let s = match scales.iter().find(|(d, _)| *d == t.dtype()) {
            Some((_, s)) => s.clone(),
            None => {
                let s = in_dtype(&scale, t.dtype())?;
                scales.push((t.dtype(), s.clone()));
                s
            }
        };
        scaled.push(t.mul(&s)?);
    }
    Ok((scaled, global))
}
