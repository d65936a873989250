//! Value types of the IR: a dtype and a (possibly partly unknown) shape.

use super::shape::Shape;
use crate::dtype::DType;
use std::fmt;

/// The type of a tensor value: dtype plus shape.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TensorType {
    pub dtype: DType,
    pub shape: Shape,
}

impl TensorType {
    pub fn new(dtype: DType, shape: Shape) -> TensorType {
        TensorType { dtype, shape }
    }

    /// A fully known type.
    pub fn known(dtype: DType, dims: &[i64]) -> TensorType {
        TensorType {
            dtype,
            shape: Shape::known(dims),
        }
    }

    pub fn scalar(dtype: DType) -> TensorType {
        TensorType {
            dtype,
            shape: Shape::scalar(),
        }
    }

    pub fn rank(&self) -> Option<usize> {
        self.shape.rank()
    }
}

/// `f32(2, None)`: compact, used in op error messages.
impl fmt::Display for TensorType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.dtype, self.shape)
    }
}
