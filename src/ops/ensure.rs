//! Shape assertions: `ensure_shape` (`tf.ensure_shape`), which refines a
//! value's type to a shape it must have. Tracing uses it where a value of
//! a less specific type is bound to an `input_signature`: the
//! inner trace sees the signature's shape, and a concrete shape that turns
//! out incompatible is an error when the program is specialized (lowering
//! re-infers every op with concrete types).

use super::{OpDef, expect_arity, grad_or_zeros};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType, merge_shapes};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// The operand, whose shape must be compatible with `shape`; the result has
/// the most specific shape of the two.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EnsureShape {
    pub shape: Shape,
}

impl OpDef for EnsureShape {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], size: i64) -> super::batching::Batched {
        // The example's shape, behind the batch axis; an unknown rank
        // cannot be extended.
        let dims = self.shape.dims()?;
        let mut batched = vec![Some(size)];
        batched.extend(dims.iter().copied());
        let op = EnsureShape {
            shape: crate::ir::Shape::from_dims(batched),
        };
        Some(super::batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        "ensure_shape"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("ensure_shape", inputs, 1)?;
        let x = &inputs[0];
        let shape = merge_shapes(&x.shape, &self.shape).ok_or_else(|| {
            Error::invalid(
                "ensure_shape",
                format!(
                    "Shape of tensor {x} is not compatible with expected shape {}",
                    self.shape
                ),
            )
        })?;
        Ok(vec![TensorType::new(x.dtype, shape)])
    }

    fn lower(&self, _cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        // Concrete and compatible means equal: nothing to emit.
        Ok(vec![inputs[0].clone()])
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
        Ok(vec![Some(grad_or_zeros(grads, &outputs[0])?)])
    }
}

/// **Type and shape**: checking a shape at run time.
impl Tensor {
    /// This tensor, checked to have a shape compatible with `dims` (`None`
    /// = any size), typed with the more specific of the two
    /// (`tf.ensure_shape`). Eagerly the check is immediate; while tracing
    /// a dimension still unknown is checked when the program is compiled
    /// for concrete shapes.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let x = Tensor::vector(&[1f32, 2.])?;
    /// assert_eq!(x.ensure_shape(&[Some(2)])?.dims(), vec![2]);
    /// assert!(x.ensure_shape(&[Some(3)]).is_err());
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn ensure_shape(&self, dims: &[Option<i64>]) -> Result<Tensor> {
        apply1(
            EnsureShape {
                shape: Shape::from_dims(dims.to_vec()),
            },
            &[self],
        )
    }
}
