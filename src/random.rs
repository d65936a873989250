//! Random numbers as values: a key is a `u64[2]` tensor (the
//! Threefry state StableHLO's `rng_bit_generator` takes), so a compiled
//! step that takes a new key each call is one trace and one program, as
//! with `jax.random`. Keys are split and folded with random bits drawn
//! from them; draws (`uniform`, `normal`, `bernoulli`, `categorical`,
//! `dropout`) are ops whose only input is the key. The same key gives the
//! same numbers eagerly and compiled; `truncated_normal` and
//! `permutation` are built on those draws (the latter on `ops::sort`).
//! [`Generator`] is TensorFlow's stateful `tf.random.Generator`: its key
//! lives in a variable that each draw advances, also inside compiled
//! functions.
//!
//! Layer: a user-facing module over `ops::constant` (the random ops),
//! `ops::sort`, `tensor` and `variable`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::ops::constant::{RandomBits, RandomNormal, RandomUniform, seed_state};
use crate::tensor::{Tensor, apply1};
use crate::variable::Variable;

/// A key for `seed` (`jax.random.key`): nearby seeds give unrelated keys.
pub fn key(seed: u64) -> Result<Tensor> {
    seed_state(seed)
}

fn check_key(key: &Tensor) -> Result<()> {
    let ty = key.tensor_type();
    if ty.dtype != DType::U64 || ty.shape.as_known().as_deref() != Some(&[2][..]) {
        return Err(Error::invalid(
            "random",
            format!("a key is a u64(2,) tensor (random::key(seed)), got {ty}"),
        ));
    }
    Ok(())
}

/// `dims`-shaped random bits (u32 or u64) from `key`.
#[track_caller]
pub fn bits(key: &Tensor, dims: &[i64], dtype: DType) -> Result<Tensor> {
    apply1(
        RandomBits {
            dims: dims.to_vec(),
            dtype,
        },
        &[key],
    )
}

/// `n` new keys from `key`, as an `[n, 2]` tensor (`jax.random.split`);
/// take one with [`nth`].
#[track_caller]
pub fn split(key: &Tensor, n: i64) -> Result<Tensor> {
    check_key(key)?;
    bits(key, &[n, 2], DType::U64)
}

/// Row `i` of a split: one key.
pub fn nth(keys: &Tensor, i: i64) -> Result<Tensor> {
    keys.slice(&[i, 0], &[1, 2])?.reshape(&[2])
}

/// A key derived from `key` and the integer `data` (`jax.random.fold_in`):
/// a different key for each step number, say.
#[track_caller]
pub fn fold_in(key: &Tensor, data: &Tensor) -> Result<Tensor> {
    check_key(key)?;
    // (k0, k1 + data), then through Threefry: neighbouring data values
    // give unrelated keys.
    let data = data.cast(DType::U64)?.reshape(&[1])?;
    let offset = Tensor::concat(&[Tensor::fill(&[1], 0, DType::U64)?, data], 0)?;
    bits(&key.add(&offset)?, &[2], DType::U64)
}

/// Uniform floats in `[minval, maxval)`.
#[track_caller]
pub fn uniform(
    key: &Tensor,
    dims: &[i64],
    dtype: DType,
    minval: f64,
    maxval: f64,
) -> Result<Tensor> {
    check_key(key)?;
    let op = RandomUniform {
        dims: dims.to_vec(),
        dtype,
        minval: Scalar::F64(minval),
        maxval: Scalar::F64(maxval),
    };
    apply1(op, &[key])
}

/// Normal floats with `mean` and `stddev`.
#[track_caller]
pub fn normal(key: &Tensor, dims: &[i64], dtype: DType, mean: f64, stddev: f64) -> Result<Tensor> {
    check_key(key)?;
    let op = RandomNormal {
        dims: dims.to_vec(),
        dtype,
        mean: Scalar::F64(mean),
        stddev: Scalar::F64(stddev),
    };
    apply1(op, &[key])
}

/// Normal floats with `mean` and `stddev`, none more than two `stddev`
/// from the mean (`tf.random.truncated_normal`, which re-draws those).
/// Drawn by the inverse CDF: `u` uniform in `(Phi(-2), Phi(2))`, then
/// `sqrt(2) * erf_inv(2u - 1)` (computed in f32 for 16-bit dtypes).
#[track_caller]
pub fn truncated_normal(
    key: &Tensor,
    dims: &[i64],
    dtype: DType,
    mean: f64,
    stddev: f64,
) -> Result<Tensor> {
    if !dtype.is_float() {
        return Err(Error::invalid(
            "truncated_normal",
            format!("draws floats, not {dtype}"),
        ));
    }
    // Phi(-2) = erfc(sqrt(2)) / 2.
    const PHI_MINUS_2: f64 = 0.022_750_131_948_179_195;
    let work = match dtype {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    };
    let u = uniform(key, dims, work, PHI_MINUS_2, 1.0 - PHI_MINUS_2)?;
    let z = u
        .mul_scalar(2.0)?
        .sub_scalar(1.0)?
        .erf_inv()?
        .mul_scalar(std::f64::consts::SQRT_2)?
        // Rounding must not step outside the bounds.
        .clip_by_value_scalar(-2.0, 2.0)?;
    z.mul_scalar(stddev)?.add_scalar(mean)?.cast(dtype)
}

/// A random permutation of `0..n` (i32, `jax.random.permutation`): the
/// argsort of `n` random 64-bit words (a stable sort, so the rare equal
/// words still give a permutation).
#[track_caller]
pub fn permutation(key: &Tensor, n: i64) -> Result<Tensor> {
    check_key(key)?;
    if !(0..=i32::MAX as i64).contains(&n) {
        return Err(Error::invalid(
            "permutation",
            format!("n must be in [0, 2^31 - 1], got {n}"),
        ));
    }
    bits(key, &[n], DType::U64)?.argsort(0, false, true)
}

/// `true` with probability `p` (`jax.random.bernoulli`).
#[track_caller]
pub fn bernoulli(key: &Tensor, p: f64, dims: &[i64]) -> Result<Tensor> {
    uniform(key, dims, DType::F32, 0.0, 1.0)?.lt_scalar(p)
}

/// `num_samples` class indices (i32) per row of `logits` `[batch,
/// classes]`, drawn with probabilities `softmax(logits)`
/// (`tf.random.categorical`), by the Gumbel-max trick.
#[track_caller]
pub fn categorical(key: &Tensor, logits: &Tensor, num_samples: i64) -> Result<Tensor> {
    let dims = logits
        .shape()
        .as_known()
        .filter(|d| d.len() == 2)
        .ok_or_else(|| {
            Error::invalid(
                "categorical",
                format!(
                    "logits must be [batch, classes], got {}",
                    logits.tensor_type()
                ),
            )
        })?;
    let (b, c) = (dims[0], dims[1]);
    let u = uniform(
        key,
        &[b, num_samples, c],
        logits.dtype(),
        f64::MIN_POSITIVE,
        1.0,
    )?;
    let gumbel = u.log()?.neg()?.log()?.neg()?;
    let scores = logits.expand_dims(1)?.add(&gumbel)?;
    scores.argmax(2)?.cast(DType::I32)
}

/// `tf.nn.dropout` with a key: each element is zeroed with probability
/// `rate` and the rest scaled by `1 / (1 - rate)`.
#[track_caller]
pub fn dropout(x: &Tensor, rate: f64, key: &Tensor) -> Result<Tensor> {
    if !(0.0..1.0).contains(&rate) {
        return Err(Error::invalid(
            "dropout",
            format!("rate must be in [0, 1), got {rate}"),
        ));
    }
    if rate == 0.0 {
        return Ok(x.clone());
    }
    let dims = x.shape().as_known().ok_or_else(|| {
        Error::invalid(
            "dropout",
            format!("needs a known shape, got {}", x.tensor_type()),
        )
    })?;
    let keep = uniform(key, &dims, x.dtype(), 0.0, 1.0)?.ge_scalar(rate)?;
    let scaled = x.mul_scalar(1.0 / (1.0 - rate))?;
    keep.where_(&scaled, &scaled.zeros_like()?)
}

/// TensorFlow's stateful `tf.random.Generator`: a key in a variable that
/// every draw advances, eagerly and inside compiled functions (where the
/// advance is a variable update). It is a [`crate::module::Module`] whose
/// one variable is `state`, so a model holding a generator checkpoints it
/// and a restored run draws what the uninterrupted one drew.
#[derive(Clone, Debug)]
pub struct Generator {
    state: Variable,
}

impl Generator {
    /// A generator seeded with `seed` (`tf.random.Generator.from_seed`).
    pub fn from_seed(seed: u64) -> Result<Generator> {
        Ok(Generator {
            state: Variable::try_new(key(seed)?)?.non_trainable(),
        })
    }

    /// A fresh key, advancing the state.
    pub fn next_key(&self) -> Result<Tensor> {
        let keys = split(&self.state.try_read()?, 2)?;
        self.state.assign(&nth(&keys, 0)?)?;
        nth(&keys, 1)
    }

    /// Uniform floats in `[minval, maxval)` from the next key
    /// (`Generator.uniform`).
    pub fn uniform(&self, dims: &[i64], dtype: DType, minval: f64, maxval: f64) -> Result<Tensor> {
        uniform(&self.next_key()?, dims, dtype, minval, maxval)
    }

    /// Normal floats with `mean` and `stddev` from the next key
    /// (`Generator.normal`).
    pub fn normal(&self, dims: &[i64], dtype: DType, mean: f64, stddev: f64) -> Result<Tensor> {
        normal(&self.next_key()?, dims, dtype, mean, stddev)
    }

    /// The variable holding the state (to checkpoint it).
    pub fn state(&self) -> &Variable {
        &self.state
    }
}

/// The state, under `state` (`rng.state` in a model's field `rng`).
impl crate::module::Module for Generator {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(crate::module::join(prefix, "state"), &self.state);
    }
}
