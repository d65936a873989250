//! Layer: mixed precision for `nn::layers`: a [`Policy`]
//! (the dtype a layer computes in and the dtype its variables are kept
//! in), Keras' named policies (`"mixed_bfloat16"`, `"mixed_float16"`), and
//! the global policy layers pick up when they are made. Imports `dtype`,
//! `error` and `tensor` (the input cast); the layers read it through
//! `nn::layers`' helpers, and
//! [`crate::optimizers::LossScaleOptimizer`] is its training half for
//! float16.
//!
//! Under a mixed policy a layer keeps float32 variables (so small updates
//! are not rounded away) and computes in half precision (bfloat16 or
//! float16: half the memory traffic, and the matrix units' fast path), as
//! Keras' `mixed_bfloat16` does:
//! - a floating input is cast to the compute dtype when the layer is
//!   called (Keras' autocasting; integer inputs, such as an `Embedding`'s
//!   ids, are left alone);
//! - each weight is read in float32 and cast to the compute dtype where it
//!   is used, so its gradient comes back through the cast as float32;
//! - normalization statistics and attention softmaxes run in float32 and
//!   are cast back (a bfloat16 mean of many values keeps few digits);
//! - the output is in the compute dtype, the last layer's too: cast the
//!   logits to float32 before a loss, as Keras' guide recommends (the
//!   losses in [`crate::nn::losses`] do it themselves for half inputs).
//!
//! Float16 has a narrow exponent range, so small gradients underflow to
//! zero: train with a [`LossScaleOptimizer`](crate::optimizers::LossScaleOptimizer).
//! Bfloat16 has float32's range and needs no loss scaling.
//!
//! ```
//! use xlafn::nn::layers::{Layer, Linear};
//! use xlafn::nn::mixed_precision::Policy;
//! use xlafn::prelude::*;
//! let key = xlafn::random::key(0)?;
//! let dense = Linear::new(&key, 4, 2)?.dtype_policy(Policy::mixed_bfloat16());
//! let y = dense.forward(&Tensor::ones(&[3, 4], DType::F32))?;
//! assert_eq!(y.dtype(), DType::BF16); // computed in bfloat16
//! assert_eq!(dense.kernel().unwrap().dtype(), DType::F32); // kept in float32
//! # Ok::<(), xlafn::Error>(())
//! ```

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use std::fmt;
use std::str::FromStr;
use std::sync::RwLock;

/// The dtypes a layer computes in and keeps its variables in (Keras'
/// `DTypePolicy`).
///
/// ```
/// use xlafn::nn::mixed_precision::Policy;
/// use xlafn::prelude::*;
/// let p: Policy = "mixed_float16".parse()?;
/// assert_eq!((p.compute_dtype(), p.variable_dtype()), (DType::F16, DType::F32));
/// assert_eq!(Policy::new("bfloat16")?.variable_dtype(), DType::BF16);
/// assert_eq!(p.to_string(), "mixed_float16");
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Policy {
    compute_dtype: DType,
    variable_dtype: DType,
}

impl Policy {
    /// Float32 everywhere (Keras' default policy, `"float32"`).
    pub fn float32() -> Policy {
        Policy::uniform(DType::F32)
    }

    /// Bfloat16 compute, float32 variables (`"mixed_bfloat16"`): the
    /// policy for TPUs and recent GPUs; no loss scaling needed.
    pub fn mixed_bfloat16() -> Policy {
        Policy {
            compute_dtype: DType::BF16,
            variable_dtype: DType::F32,
        }
    }

    /// Float16 compute, float32 variables (`"mixed_float16"`): train with
    /// a [`LossScaleOptimizer`](crate::optimizers::LossScaleOptimizer).
    pub fn mixed_float16() -> Policy {
        Policy {
            compute_dtype: DType::F16,
            variable_dtype: DType::F32,
        }
    }

    /// One dtype for both compute and variables (Keras' `Policy("float64")`).
    pub fn uniform(dtype: DType) -> Policy {
        Policy {
            compute_dtype: dtype,
            variable_dtype: dtype,
        }
    }

    /// Any pair of floating dtypes; errors for a non-floating one.
    pub fn with_dtypes(compute_dtype: DType, variable_dtype: DType) -> Result<Policy> {
        for d in [compute_dtype, variable_dtype] {
            if !d.is_float() {
                return Err(Error::invalid(
                    "Policy",
                    format!("needs floating-point dtypes, got {d}"),
                ));
            }
        }
        Ok(Policy {
            compute_dtype,
            variable_dtype,
        })
    }

    /// Keras' policy names: `"mixed_bfloat16"`, `"mixed_float16"`, or one
    /// floating dtype (`"float32"`, `"bfloat16"`, `"float16"`,
    /// `"float64"`, or this crate's short names, `"f32"`) for both.
    pub fn new(name: &str) -> Result<Policy> {
        match name {
            "mixed_bfloat16" => Ok(Policy::mixed_bfloat16()),
            "mixed_float16" => Ok(Policy::mixed_float16()),
            other => match DType::from_name(other) {
                Ok(d) if d.is_float() => Ok(Policy::uniform(d)),
                _ => Err(Error::invalid(
                    "Policy",
                    format!(
                        "unknown policy {other:?}: expected \"mixed_bfloat16\", \
                         \"mixed_float16\" or a floating dtype such as \"float32\""
                    ),
                )),
            },
        }
    }

    /// The dtype the layer computes in (and returns).
    pub fn compute_dtype(&self) -> DType {
        self.compute_dtype
    }

    /// The dtype the layer's variables are kept in.
    pub fn variable_dtype(&self) -> DType {
        self.variable_dtype
    }

    /// Whether compute and variables differ (a mixed policy).
    pub fn is_mixed(&self) -> bool {
        self.compute_dtype != self.variable_dtype
    }

    /// The Keras name of the policy when it has one, else
    /// `"<compute>/<variables>"`.
    pub fn name(&self) -> String {
        let keras = |d: DType| match d {
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
            other => other.name(),
        };
        if !self.is_mixed() {
            keras(self.compute_dtype).to_string()
        } else if self.variable_dtype == DType::F32
            && matches!(self.compute_dtype, DType::F16 | DType::BF16)
        {
            format!("mixed_{}", keras(self.compute_dtype))
        } else {
            format!(
                "{}/{}",
                keras(self.compute_dtype),
                keras(self.variable_dtype)
            )
        }
    }

    /// `x` in the compute dtype when it is floating (Keras' autocasting of
    /// a layer's inputs); integer, bool and complex inputs as they are.
    pub(crate) fn cast_input(&self, x: &Tensor) -> Result<Tensor> {
        if x.dtype().is_float() && x.dtype() != self.compute_dtype {
            x.cast(self.compute_dtype)
        } else {
            Ok(x.clone())
        }
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

impl FromStr for Policy {
    type Err = Error;
    fn from_str(name: &str) -> Result<Policy> {
        Policy::new(name)
    }
}

/// The global policy; `None` until one is set.
static GLOBAL: RwLock<Option<Policy>> = RwLock::new(None);

/// Sets the policy every layer made from now on follows, in every thread
/// (Keras' `keras.mixed_precision.set_global_policy`). A layer reads it
/// once, when it is made: layers made before keep theirs, and a layer's
/// own [`dtype_policy`](crate::nn::layers::Linear::dtype_policy) overrides
/// it. Being process-wide, it is meant to be set once at startup, before
/// the model is made; tests that run in parallel threads should give
/// policies to their layers instead.
///
/// ```
/// use xlafn::nn::mixed_precision::{self, Policy};
/// mixed_precision::set_global_policy(Policy::mixed_bfloat16());
/// assert_eq!(mixed_precision::global_policy(), Policy::mixed_bfloat16());
/// mixed_precision::reset_global_policy();
/// assert_eq!(mixed_precision::global_policy(), Policy::float32());
/// ```
pub fn set_global_policy(policy: Policy) {
    *GLOBAL.write().unwrap_or_else(|e| e.into_inner()) = Some(policy);
}

/// Unsets the global policy: layers made from now on compute in their
/// inputs' dtype, as they do when no policy was ever set.
pub fn reset_global_policy() {
    *GLOBAL.write().unwrap_or_else(|e| e.into_inner()) = None;
}

/// The global policy: the one set, else float32 (Keras' default).
pub fn global_policy() -> Policy {
    current_policy().unwrap_or_else(Policy::float32)
}

/// The policy a layer made now takes: the global one if one was set.
/// With none set, layers keep their behaviour from before policies
/// existed: they compute in their input's dtype (a bfloat16 input runs in
/// bfloat16 against float32 weights cast to it), where an explicit
/// `float32` policy casts every floating input to float32.
pub fn current_policy() -> Option<Policy> {
    *GLOBAL.read().unwrap_or_else(|e| e.into_inner())
}
