//! Layer: a user-facing module over `random` (keyed draws), `tensor` ops
//! and `dtype`. Keras' weight initializers, each a function of a random
//! key (`random::key`, `random::split`), a shape and a dtype, so the same
//! key gives the same weights eagerly and inside compiled functions, as
//! with `jax.nn.initializers`.
//!
//! Fans follow Keras: for a matrix `[fan_in, fan_out]`; for a convolution
//! kernel `[k.., in, out]` the receptive field `prod(k..)` multiplies both;
//! a vector has `fan_in = fan_out = len`, a scalar 1. The normal variants
//! draw from a normal truncated at two standard deviations, scaled so the
//! *truncated* distribution has the wanted variance (Keras divides the
//! standard deviation by 0.87962566103423978, the standard deviation of a
//! standard normal truncated to `[-2, 2]`).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::random;
use crate::tensor::Tensor;

/// The standard deviation of a standard normal truncated to `[-2, 2]`.
const TRUNCATED_STDDEV: f64 = 0.879_625_661_034_239_8;

/// `(fan_in, fan_out)` of a weight of shape `dims`, as Keras computes them.
pub fn fans(dims: &[i64]) -> (f64, f64) {
    match dims {
        [] => (1.0, 1.0),
        [n] => (*n as f64, *n as f64),
        [.., i, o] => {
            let receptive: i64 = dims[..dims.len() - 2].iter().product();
            ((receptive * i) as f64, (receptive * o) as f64)
        }
    }
}

/// Which fan a variance-scaling initializer divides by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FanMode {
    /// The number of input units (Keras' `fan_in`; He and LeCun).
    In,
    /// The number of output units (`fan_out`).
    Out,
    /// The mean of the two (`fan_avg`; Glorot).
    Average,
}

/// Keras' `VarianceScaling`: weights with variance `scale / fan`, from a
/// truncated normal (`uniform == false`) or a uniform distribution.
#[track_caller]
pub fn variance_scaling(
    key: &Tensor,
    dims: &[i64],
    dtype: DType,
    scale: f64,
    mode: FanMode,
    uniform: bool,
) -> Result<Tensor> {
    if !(dtype.is_float() && scale > 0.0 && scale.is_finite()) {
        return Err(Error::invalid(
            "variance_scaling",
            format!("needs a float dtype and a positive scale, got {dtype} and {scale}"),
        ));
    }
    let (fan_in, fan_out) = fans(dims);
    let fan = match mode {
        FanMode::In => fan_in,
        FanMode::Out => fan_out,
        FanMode::Average => (fan_in + fan_out) / 2.0,
    }
    .max(1.0);
    let variance = scale / fan;
    if uniform {
        let limit = (3.0 * variance).sqrt();
        random::uniform(key, dims, dtype, -limit, limit)
    } else {
        random::truncated_normal(key, dims, dtype, 0.0, variance.sqrt() / TRUNCATED_STDDEV)
    }
}

/// Glorot (Xavier) uniform: `U(-l, l)`, `l = sqrt(6 / (fan_in + fan_out))`.
///
/// ```
/// use xlafn::{initializers, random, DType};
/// let w = initializers::glorot_uniform(&random::key(0)?, &[3, 5], DType::F32)?;
/// let limit = (6.0f32 / 8.0).sqrt();
/// assert!(w.to_vec::<f32>()?.iter().all(|v| v.abs() <= limit));
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn glorot_uniform(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 1.0, FanMode::Average, true)
}

/// Glorot (Xavier) normal: truncated normal with variance
/// `2 / (fan_in + fan_out)`.
pub fn glorot_normal(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 1.0, FanMode::Average, false)
}

/// He (Kaiming) uniform: `U(-l, l)`, `l = sqrt(6 / fan_in)`.
pub fn he_uniform(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 2.0, FanMode::In, true)
}

/// He (Kaiming) normal: truncated normal with variance `2 / fan_in`.
pub fn he_normal(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 2.0, FanMode::In, false)
}

/// LeCun normal: truncated normal with variance `1 / fan_in`.
pub fn lecun_normal(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 1.0, FanMode::In, false)
}

/// LeCun uniform: `U(-l, l)`, `l = sqrt(3 / fan_in)`.
pub fn lecun_uniform(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    variance_scaling(key, dims, dtype, 1.0, FanMode::In, true)
}

/// `tf.random.truncated_normal` as an initializer (Keras'
/// `TruncatedNormal(mean, stddev)`: values beyond two `stddev` redrawn).
pub fn truncated_normal(
    key: &Tensor,
    dims: &[i64],
    dtype: DType,
    mean: f64,
    stddev: f64,
) -> Result<Tensor> {
    random::truncated_normal(key, dims, dtype, mean, stddev)
}

/// Keras' `Orthogonal(gain)`: the weight flattened to
/// `[prod(dims[..-1]), dims[-1]]` has orthonormal columns (or rows, when
/// there are more columns than rows), times `gain`. Made as Keras makes
/// it, from the QR factorization of a standard normal matrix with `R`'s
/// diagonal made positive; here the factorization is Cholesky QR done
/// twice in f64 (`Q = A R^-1`, `R^T R = A^T A`), which gives that unique
/// `Q` for the full-rank matrices a normal draw gives.
pub fn orthogonal(key: &Tensor, dims: &[i64], dtype: DType, gain: f64) -> Result<Tensor> {
    if dims.len() < 2 || !dtype.is_float() {
        return Err(Error::invalid(
            "orthogonal",
            format!("needs a float weight of rank >= 2, got {dtype} of shape {dims:?}"),
        ));
    }
    let cols = dims[dims.len() - 1];
    let rows: i64 = dims[..dims.len() - 1].iter().product();
    let (tall, wide) = (rows.max(cols), rows.min(cols));
    let a = random::normal(key, &[tall, wide], DType::F64, 0.0, 1.0)?;
    let q = orthonormal_columns(&orthonormal_columns(&a)?)?;
    let q = if rows < cols {
        q.transpose(&[1, 0])?
    } else {
        q
    };
    q.mul_scalar(gain)?.reshape(dims)?.cast(dtype)
}

/// One Cholesky QR pass: `a R^-1` with `R^T R = a^T a`.
fn orthonormal_columns(a: &Tensor) -> Result<Tensor> {
    let l = a.matmul_t(a, true, false)?.cholesky()?;
    a.triangular_solve(&l, false, true, true, false)
}

/// Zeros (Keras' `Zeros`).
pub fn zeros(dims: &[i64], dtype: DType) -> Result<Tensor> {
    Tensor::try_zeros(dims, dtype)
}

/// Ones (Keras' `Ones`).
pub fn ones(dims: &[i64], dtype: DType) -> Result<Tensor> {
    Tensor::fill(dims, 1.0, dtype)
}

/// Every element `value` (Keras' `Constant`).
pub fn constant(dims: &[i64], value: f64, dtype: DType) -> Result<Tensor> {
    Tensor::fill(dims, value, dtype)
}

/// A custom initializer: `(key, dims, dtype)` to the initial value.
pub type InitFn = std::sync::Arc<dyn Fn(&Tensor, &[i64], DType) -> Result<Tensor> + Send + Sync>;

/// An initializer as a value, for layers that create their weights later
/// (Keras' `kernel_initializer="glorot_uniform"`): the functions above,
/// chosen by name, or any function of a key, a shape and a dtype.
#[derive(Clone)]
pub enum Initializer {
    /// [`zeros`].
    Zeros,
    /// [`ones`].
    Ones,
    /// [`constant`].
    Constant(f64),
    /// [`glorot_uniform`] (Keras' default for kernels).
    GlorotUniform,
    /// [`glorot_normal`].
    GlorotNormal,
    /// [`he_uniform`].
    HeUniform,
    /// [`he_normal`].
    HeNormal,
    /// [`lecun_uniform`].
    LecunUniform,
    /// [`lecun_normal`].
    LecunNormal,
    /// Normal with mean 0 and this standard deviation (Keras'
    /// `RandomNormal`; GPT-2's embeddings use 0.02).
    Normal(f64),
    /// Uniform in `[low, high)` (Keras' `RandomUniform`).
    Uniform(f64, f64),
    /// [`truncated_normal`] with mean 0 and this standard deviation.
    TruncatedNormal(f64),
    /// [`variance_scaling`] with this scale, fan and distribution
    /// (`uniform`).
    VarianceScaling(f64, FanMode, bool),
    /// [`orthogonal`] with this gain.
    Orthogonal(f64),
    /// Any function of `(key, dims, dtype)`.
    Custom(InitFn),
    /// This value, as it is: a pretrained weight (what a layer's
    /// `from_weights` constructor uses). Its dims and dtype must be the
    /// weight's; nothing is drawn.
    Value(Tensor),
}

impl Initializer {
    /// The initial value of a weight of `dims` and `dtype` drawn with
    /// `key` (keyless initializers ignore it).
    ///
    /// ```
    /// use xlafn::{initializers::Initializer, random, DType};
    /// let w = Initializer::Constant(0.5).init(&random::key(0)?, &[2], DType::F32)?;
    /// assert_eq!(w.to_vec::<f32>()?, vec![0.5, 0.5]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn init(&self, key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
        match self {
            Initializer::Zeros => zeros(dims, dtype),
            Initializer::Ones => ones(dims, dtype),
            Initializer::Constant(v) => constant(dims, *v, dtype),
            Initializer::GlorotUniform => glorot_uniform(key, dims, dtype),
            Initializer::GlorotNormal => glorot_normal(key, dims, dtype),
            Initializer::HeUniform => he_uniform(key, dims, dtype),
            Initializer::HeNormal => he_normal(key, dims, dtype),
            Initializer::LecunUniform => lecun_uniform(key, dims, dtype),
            Initializer::LecunNormal => lecun_normal(key, dims, dtype),
            Initializer::Normal(stddev) => random::normal(key, dims, dtype, 0.0, *stddev),
            Initializer::Uniform(low, high) => random::uniform(key, dims, dtype, *low, *high),
            Initializer::TruncatedNormal(stddev) => {
                truncated_normal(key, dims, dtype, 0.0, *stddev)
            }
            Initializer::VarianceScaling(scale, mode, uniform) => {
                variance_scaling(key, dims, dtype, *scale, *mode, *uniform)
            }
            Initializer::Orthogonal(gain) => orthogonal(key, dims, dtype, *gain),
            Initializer::Custom(f) => f(key, dims, dtype),
            Initializer::Value(v) => given(v, dims, dtype),
        }
    }
}

/// A given weight, checked against the weight asked for.
fn given(value: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    if value.dims() != dims || value.dtype() != dtype {
        return Err(Error::invalid(
            "Initializer::Value",
            format!(
                "the weight given is {}{:?}, the layer's is {dtype}{dims:?}",
                value.dtype(),
                value.dims()
            ),
        ));
    }
    Ok(value.clone())
}

impl std::fmt::Debug for Initializer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Initializer::Constant(v) => write!(f, "Constant({v})"),
            Initializer::Normal(s) => write!(f, "Normal({s})"),
            Initializer::Uniform(l, h) => write!(f, "Uniform({l}, {h})"),
            Initializer::TruncatedNormal(s) => write!(f, "TruncatedNormal({s})"),
            Initializer::VarianceScaling(s, m, u) => write!(f, "VarianceScaling({s}, {m:?}, {u})"),
            Initializer::Orthogonal(g) => write!(f, "Orthogonal({g})"),
            Initializer::Custom(_) => write!(f, "Custom(..)"),
            Initializer::Value(v) => write!(f, "Value({}{:?})", v.dtype(), v.dims()),
            Initializer::Zeros => write!(f, "Zeros"),
            Initializer::Ones => write!(f, "Ones"),
            Initializer::GlorotUniform => write!(f, "GlorotUniform"),
            Initializer::GlorotNormal => write!(f, "GlorotNormal"),
            Initializer::HeUniform => write!(f, "HeUniform"),
            Initializer::HeNormal => write!(f, "HeNormal"),
            Initializer::LecunUniform => write!(f, "LecunUniform"),
            Initializer::LecunNormal => write!(f, "LecunNormal"),
        }
    }
}
