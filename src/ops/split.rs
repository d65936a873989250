//! Layer: ops (split). `tf.split` / `jnp.split`: one tensor cut into
//! consecutive pieces along an axis, as one op with one result per piece.
//!
//! Why an op and not a row of `slice`s: the gradient. A piece's gradient
//! through `slice` is the piece written into zeros, and the pieces' gradients
//! are then added, so XLA sees N padded copies summed (for an LSTM's four
//! gates, four passes over the gate gradient per step, measured on W11). The
//! gradient of a split is one `concatenate` of the pieces' gradients, as a
//! careful hand writes it and as JAX's `split` transposes.
//! Imports: `ir`, `lower`, `dtype`, `error`, `tensor`.

use super::batching;
use super::{OpDef, normalize_axis};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply};

/// Cuts the operand along `axis` into pieces of `sizes` (which sum to the
/// axis' size).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Split {
    pub axis: i64,
    pub sizes: Vec<i64>,
}

impl OpDef for Split {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let op = Split {
            axis: batching::shifted(self.axis, inputs[0].rank() - 1),
            sizes: self.sizes.clone(),
        };
        Some(batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        "split"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        super::expect_arity("split", inputs, 1)?;
        let x = &inputs[0];
        x.dtype.check_compilable()?;
        if self.sizes.is_empty() || self.sizes.iter().any(|&s| s < 0) {
            return Err(Error::invalid(
                "split",
                format!(
                    "sizes {:?} must be one or more non-negative sizes",
                    self.sizes
                ),
            ));
        }
        let Some(dims) = x.shape.dims() else {
            return Err(Error::invalid(
                "split",
                format!("needs an operand of known rank, got {x}"),
            ));
        };
        let axis = normalize_axis("split", self.axis, dims.len())?;
        // In i128: the sizes are the caller's, and their sum must not wrap.
        let total: i128 = self.sizes.iter().map(|&s| i128::from(s)).sum();
        if let Some(n) = dims[axis]
            && i128::from(n) != total
        {
            return Err(Error::invalid(
                "split",
                format!(
                    "sizes {:?} add up to {total}, but axis {axis} of {x} has size {n}",
                    self.sizes
                ),
            ));
        }
        Ok(self
            .sizes
            .iter()
            .map(|&s| {
                let mut piece = dims.to_vec();
                piece[axis] = Some(s);
                TensorType::new(x.dtype, Shape::from_dims(piece))
            })
            .collect())
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let rank = outputs[0].dims.len();
        let axis = normalize_axis("split", self.axis, rank)?;
        let mut begin = vec![0; rank];
        let ones = vec![1; rank];
        let mut pieces = Vec::with_capacity(outputs.len());
        for out in outputs {
            let mut limit = out.dims.clone();
            limit[axis] += begin[axis];
            pieces.push(cx.slice(&inputs[0], &begin, &limit, &ones));
            begin[axis] = limit[axis];
        }
        Ok(pieces)
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
        let pieces = grads
            .iter()
            .zip(outputs)
            .map(|(g, out)| match g {
                Some(g) => Ok(g.clone()),
                None => out.zeros_like(),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![Some(Tensor::concat(&pieces, self.axis)?)])
    }
}

/// **Shape and layout**: splitting into pieces.
impl Tensor {
    /// `tf.split(x, n, axis)`: `n` equal pieces along `axis`, whose size
    /// must be known and divisible by `n`.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0], &[2, 3])?;
    /// let rows = x.split(2, 0)?;
    /// assert_eq!(rows[1].to_vec::<f32>()?, vec![4.0, 5.0, 6.0]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn split(&self, n: i64, axis: i64) -> Result<Vec<Tensor>> {
        let size = self.split_axis_size(axis)?;
        if n <= 0 || size % n != 0 {
            return Err(Error::invalid(
                "split",
                format!(
                    "cannot split axis {axis} of size {size} into {n} equal pieces (shape {})",
                    self.shape()
                ),
            ));
        }
        self.split_sizes(&vec![size / n; n as usize], axis)
    }

    /// `tf.split(x, sizes, axis)`: consecutive pieces of `sizes` along
    /// `axis`. One size may be -1: it takes what the others leave.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let x = Tensor::from_slice(&[1.0f32, 2.0, 3.0, 4.0, 5.0], &[5])?;
    /// let parts = x.split_sizes(&[1, -1, 2], 0)?;
    /// assert_eq!(parts[1].to_vec::<f32>()?, vec![2.0, 3.0]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn split_sizes(&self, sizes: &[i64], axis: i64) -> Result<Vec<Tensor>> {
        let mut sizes = sizes.to_vec();
        let unknown: Vec<usize> = (0..sizes.len()).filter(|&i| sizes[i] == -1).collect();
        if unknown.len() > 1 {
            return Err(Error::invalid(
                "split",
                format!("sizes {sizes:?} may hold at most one -1"),
            ));
        }
        if let [i] = unknown[..] {
            let size = self.split_axis_size(axis)?;
            let known = sizes
                .iter()
                .filter(|&&s| s != -1)
                .fold(0i64, |a, &s| a.saturating_add(s));
            sizes[i] = size.saturating_sub(known);
        }
        apply(Split { axis, sizes }, &[self])
    }

    /// The known size of the axis a split cuts.
    fn split_axis_size(&self, axis: i64) -> Result<i64> {
        let shape = self.shape();
        let Some(dims) = shape.dims() else {
            return Err(Error::invalid(
                "split",
                format!("needs an operand of known rank, got shape {shape}"),
            ));
        };
        let k = normalize_axis("split", axis, dims.len())?;
        dims[k].ok_or_else(|| {
            Error::invalid(
                "split",
                format!("axis {axis} of shape {shape} must have a known size"),
            )
        })
    }
}
