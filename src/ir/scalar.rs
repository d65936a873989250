//! Host scalars carried as op attributes (constants, fill values).
//!
//! Stored by kind so `i64`/`u64` values keep every bit and the attribute can
//! be hashed (floats by their bit pattern) for the eager op cache.

use crate::dtype::DType;
use crate::error::{Error, Result};
use std::fmt;
use std::hash::{Hash, Hasher};

/// A number or boolean from the host. Serialized (in exported graphs)
/// with floats as their bit pattern, so NaN and infinities survive JSON.
#[derive(Clone, Copy, Debug, serde::Serialize, serde::Deserialize)]
#[serde(from = "ScalarJson", into = "ScalarJson")]
pub enum Scalar {
    F64(f64),
    I64(i64),
    U64(u64),
    Bool(bool),
}

/// How a [`Scalar`] is written: a float by its bits.
#[derive(Clone, Copy, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum ScalarJson {
    F64Bits(u64),
    I64(i64),
    U64(u64),
    Bool(bool),
}

impl From<ScalarJson> for Scalar {
    fn from(j: ScalarJson) -> Scalar {
        match j {
            ScalarJson::F64Bits(b) => Scalar::F64(f64::from_bits(b)),
            ScalarJson::I64(v) => Scalar::I64(v),
            ScalarJson::U64(v) => Scalar::U64(v),
            ScalarJson::Bool(v) => Scalar::Bool(v),
        }
    }
}

impl From<Scalar> for ScalarJson {
    fn from(s: Scalar) -> ScalarJson {
        match s {
            Scalar::F64(v) => ScalarJson::F64Bits(v.to_bits()),
            Scalar::I64(v) => ScalarJson::I64(v),
            Scalar::U64(v) => ScalarJson::U64(v),
            Scalar::Bool(v) => ScalarJson::Bool(v),
        }
    }
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Scalar::F64(a), Scalar::F64(b)) => a.to_bits() == b.to_bits(),
            (Scalar::I64(a), Scalar::I64(b)) => a == b,
            (Scalar::U64(a), Scalar::U64(b)) => a == b,
            (Scalar::Bool(a), Scalar::Bool(b)) => a == b,
            _ => false,
        }
    }
}
impl Eq for Scalar {}

impl Hash for Scalar {
    fn hash<H: Hasher>(&self, state: &mut H) {
        std::mem::discriminant(self).hash(state);
        match self {
            Scalar::F64(v) => v.to_bits().hash(state),
            Scalar::I64(v) => v.hash(state),
            Scalar::U64(v) => v.hash(state),
            Scalar::Bool(v) => v.hash(state),
        }
    }
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::F64(v) => v,
            Scalar::I64(v) => v as f64,
            Scalar::U64(v) => v as f64,
            Scalar::Bool(v) => f64::from(u8::from(v)),
        }
    }

    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::F64(v) => v as i64,
            Scalar::I64(v) => v,
            Scalar::U64(v) => v as i64,
            Scalar::Bool(v) => i64::from(v),
        }
    }

    /// Converts a host value given by the user to `dtype`, refusing what
    /// the dtype cannot hold (see [`fits`](Self::fits)), as TensorFlow
    /// does (`tf.constant([1], tf.uint8) + 1000` is a TypeError, not 233).
    pub fn convert_exact(self, dtype: DType) -> Result<Scalar> {
        dtype.check_compilable()?;
        if !self.fits(dtype) {
            return Err(Error::Type(format!(
                "Cannot convert {self} to EagerTensor of dtype {dtype}"
            )));
        }
        Ok(self.cast(dtype))
    }

    /// Can `dtype` hold this value? Integers take only whole values in
    /// their range (no NaN, no infinity), bools only 0 and 1. Floats take
    /// every number; one beyond the dtype's range becomes infinite, as
    /// NumPy's conversion does. Op attributes read from a saved graph are
    /// held to this too (`ops::check_attr_value`): `cast` would quietly
    /// turn an i32 constant of NaN into 0.
    pub fn fits(self, dtype: DType) -> bool {
        match (self, dtype.int_range()) {
            _ if dtype.is_inexact() => true,
            (Scalar::Bool(_), _) => true,
            (v, _) if dtype == DType::Bool => v.as_f64() == 0.0 || v.as_f64() == 1.0,
            (v, Some((lo, hi))) => {
                let exact = match v {
                    Scalar::I64(i) => Some(i128::from(i)),
                    Scalar::U64(u) => Some(i128::from(u)),
                    Scalar::F64(f) if f.fract() == 0.0 && f.abs() < 2f64.powi(100) => {
                        Some(f as i128)
                    }
                    _ => None,
                };
                exact.is_some_and(|i| lo <= i && i <= hi)
            }
            _ => false,
        }
    }

    /// Converts to the value `dtype` would hold (as `static_cast` does).
    pub fn cast(self, dtype: DType) -> Scalar {
        match dtype {
            DType::Bool => Scalar::Bool(self.as_f64() != 0.0),
            d if d.is_inexact() => Scalar::F64(self.as_f64()),
            d if d.is_unsigned_int() => Scalar::U64(match self {
                Scalar::U64(v) => v,
                other => other.as_f64() as u64,
            }),
            _ => Scalar::I64(self.as_i64()),
        }
    }
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::F64(v)
    }
}
impl From<f32> for Scalar {
    fn from(v: f32) -> Self {
        Scalar::F64(v as f64)
    }
}
impl From<i64> for Scalar {
    fn from(v: i64) -> Self {
        Scalar::I64(v)
    }
}
impl From<i32> for Scalar {
    fn from(v: i32) -> Self {
        Scalar::I64(v as i64)
    }
}
impl From<u64> for Scalar {
    fn from(v: u64) -> Self {
        Scalar::U64(v)
    }
}
impl From<bool> for Scalar {
    fn from(v: bool) -> Self {
        Scalar::Bool(v)
    }
}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scalar::F64(v) => write!(f, "{v}"),
            Scalar::I64(v) => write!(f, "{v}"),
            Scalar::U64(v) => write!(f, "{v}"),
            Scalar::Bool(v) => write!(f, "{v}"),
        }
    }
}
