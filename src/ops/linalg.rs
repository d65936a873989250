//! Linear algebra: batched matrix multiplication, as `tf.linalg.matmul`.
//!
//! Both operands have rank >= 2: the last two dimensions are the matrices,
//! the leading ones are batch dimensions that broadcast NumPy-style (so a
//! `(5, 1, 2, 3)` times a `(4, 3, 7)` is a `(5, 4, 2, 7)`). Operands must
//! share a numeric dtype (TensorFlow does not promote). The lowering
//! broadcasts both operands to the common batch shape with
//! `broadcast_in_dim`, then emits one `dot_general` with batching
//! dimensions; transposes are folded into its contracting dimensions
//! rather than emitted as separate ops.
//!
//! Precision: f32 dots use XLA's default precision, which on CPU is full
//! f32; some GPUs may use reduced-precision (TF32) arithmetic.

use super::{OpDef, check_dtype, describe, expect_arity, same_dtype};
use super::{grad_or_zeros, unbroadcast};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType, broadcast_shapes};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// `a @ b` over the last two dimensions, with each operand optionally
/// transposed (its last two dimensions swapped) first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
pub struct MatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
}

impl MatMul {
    /// The error for operands `inputs`, naming both operand types and the
    /// transpose flags that shaped the check.
    fn error(&self, inputs: &[TensorType], what: String) -> Error {
        let flags = match (self.transpose_a, self.transpose_b) {
            (false, false) => String::new(),
            (ta, tb) => format!(" with transpose_a={ta}, transpose_b={tb}"),
        };
        Error::invalid(
            "matmul",
            format!("{what} (operands: {}{flags})", describe(inputs)),
        )
    }

    /// Rows and columns of an operand's matrix after its transpose flag.
    fn matrix(dims: &[Dim], transpose: bool) -> (Dim, Dim) {
        let r = dims.len();
        let (rows, cols) = (dims[r - 2], dims[r - 1]);
        if transpose {
            (cols, rows)
        } else {
            (rows, cols)
        }
    }

    /// Rejects operands of known rank below 2 (tf.linalg.matmul does too:
    /// use `reshape` or elementwise `mul` for vectors).
    fn check_ranks(&self, inputs: &[TensorType]) -> Result<()> {
        for (name, t) in ["a", "b"].iter().zip(inputs) {
            if let Some(r) = t.rank().filter(|&r| r < 2) {
                return Err(self.error(
                    inputs,
                    format!("operand {name} must have rank >= 2, got rank {r}"),
                ));
            }
        }
        Ok(())
    }
}

impl OpDef for MatMul {
    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("matmul", inputs, 2)?;
        let d = same_dtype("matmul", inputs)?;
        check_dtype("matmul", d, d.is_numeric(), "numeric")?;
        self.check_ranks(inputs)?;
        let (Some(a), Some(b)) = (inputs[0].shape.dims(), inputs[1].shape.dims()) else {
            return Ok(vec![TensorType::new(d, Shape::unknown_rank())]);
        };
        let (m, ka) = Self::matrix(a, self.transpose_a);
        let (kb, n) = Self::matrix(b, self.transpose_b);
        if let (Some(x), Some(y)) = (ka, kb)
            && x != y
        {
            return Err(self.error(
                inputs,
                format!("inner dimensions must agree, got {x} (from a) and {y} (from b)"),
            ));
        }
        let batch_a = Shape::from_dims(a[..a.len() - 2].to_vec());
        let batch_b = Shape::from_dims(b[..b.len() - 2].to_vec());
        let batch = broadcast_shapes(&batch_a, &batch_b).ok_or_else(|| {
            self.error(
                inputs,
                format!("batch dimensions {batch_a} and {batch_b} cannot be broadcast"),
            )
        })?;
        let mut dims = batch.dims().map(<[Dim]>::to_vec).unwrap_or_default();
        dims.extend([m, n]);
        Ok(vec![TensorType::new(d, Shape::from_dims(dims))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let out = &outputs[0];
        let nb = out.rank() - 2;
        let a = broadcast_batch(cx, &inputs[0], &out.dims[..nb]);
        let b = broadcast_batch(cx, &inputs[1], &out.dims[..nb]);
        let batch: Vec<i64> = (0..nb as i64).collect();
        let nb = nb as i64;
        let lhs_contract = if self.transpose_a { nb } else { nb + 1 };
        let rhs_contract = if self.transpose_b { nb + 1 } else { nb };
        Ok(vec![cx.dot_general(
            &a,
            &b,
            &batch,
            &batch,
            &[lhs_contract],
            &[rhs_contract],
            out.clone(),
        )])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &[true, true])
    }

    /// Each operand's gradient is a matmul of its own: skipped when not
    /// needed (e.g. the batch fed to a network's first layer).
    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        if !a.dtype().is_float() {
            return Ok(vec![None, None]);
        }
        let g = grad_or_zeros(grads, &outputs[0])?;
        // With C = op(A) op(B): dop(A) = G op(B)^T and dop(B) = op(A)^T G.
        let da = || match (self.transpose_a, self.transpose_b) {
            (false, false) => g.matmul_t(b, false, true),
            (false, true) => g.matmul(b),
            (true, false) => b.matmul_t(&g, false, true),
            (true, true) => b.matmul_t(&g, true, true),
        };
        let db = || match (self.transpose_a, self.transpose_b) {
            (false, false) => a.matmul_t(&g, true, false),
            (false, true) => g.matmul_t(a, true, false),
            (true, false) => a.matmul(&g),
            (true, true) => g.matmul_t(a, true, true),
        };
        let da = needed[0].then(|| unbroadcast(&da()?, a)).transpose()?;
        let db = needed[1].then(|| unbroadcast(&db()?, b)).transpose()?;
        Ok(vec![da, db])
    }
}

/// Broadcasts `x`'s batch dimensions (all but the last two) to `batch`,
/// NumPy-style; a no-op when they already match.
fn broadcast_batch(cx: &mut Emitter, x: &Val, batch: &[i64]) -> Val {
    let r = x.ty.rank();
    let mut target = batch.to_vec();
    target.extend_from_slice(&x.ty.dims[r - 2..]);
    cx.broadcast_to(x, &target)
}

impl Tensor {
    /// Batched matrix product `self @ other` (`tf.linalg.matmul`): rank >= 2
    /// operands of one numeric dtype, batch dimensions broadcast.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_t(other, false, false)
    }

    /// `matmul` with either operand's last two dimensions swapped first
    /// (`transpose_a`/`transpose_b`), without materialising the transpose.
    #[track_caller]
    pub fn matmul_t(&self, other: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
        apply1(
            MatMul {
                transpose_a,
                transpose_b,
            },
            &[self, other],
        )
    }
}
