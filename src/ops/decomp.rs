//! Matrix decompositions and solves StableHLO has:
//! `cholesky` (`tf.linalg.cholesky`) and `triangular_solve`
//! (`tf.linalg.triangular_solve`, `jax.lax.linalg.triangular_solve`), on
//! the last two dimensions, with leading batch dimensions; and what they
//! give, `cholesky_solve` and `logdet`.
//! `triangular_solve` also takes complex matrices: `transpose_a`
//! transposes without conjugating, as JAX's with `conjugate_a=False`, and
//! its gradient follows JAX's convention (`composite::lu` builds complex solves
//! on it).
//!
//! Gradients: a triangular solve's right-hand side gets the solve of the
//! output gradient with the transposed matrix, and the matrix gets minus
//! the outer product of that with the solution, kept to the triangle the
//! solve reads. Cholesky's is Murray's (2016) formula,
//! `sym(L^-T Phi(L^T Lbar) L^-1)` with `Phi` the lower triangle with half
//! the diagonal, so the input gradient is symmetric, as JAX and TensorFlow
//! give it. Only the lower triangle of the input is read by XLA; the input
//! must be symmetric positive definite, and otherwise the result holds
//! NaNs (XLA raises no error), as in JAX.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor`.

use super::batching;
use super::{OpDef, check_dtype, describe, expect_arity, same_dtype};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

fn square_last_two(op: &str, t: &TensorType, inputs: &[TensorType]) -> Result<()> {
    let Some(d) = t.shape.dims() else {
        return Ok(());
    };
    let n = d.len();
    if n < 2 || matches!((d[n - 2], d[n - 1]), (Some(a), Some(b)) if a != b) {
        return Err(Error::invalid(
            op,
            format!(
                "needs square matrices in the last two dimensions (operands: {})",
                describe(inputs)
            ),
        ));
    }
    Ok(())
}

/// `tf.linalg.cholesky`: the lower-triangular `L` with `L L^T = a`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct Cholesky;

impl OpDef for Cholesky {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // Batches of matrices are native: one more batch dimension.
        Some(batching::all_batched(self.clone(), inputs))
    }

    fn name(&self) -> &'static str {
        "cholesky"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("cholesky", inputs, 1)?;
        let d = inputs[0].dtype;
        check_dtype("cholesky", d, d.is_float(), "floating-point")?;
        square_last_two("cholesky", &inputs[0], inputs)?;
        Ok(vec![inputs[0].clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.cholesky(&inputs[0], outputs[0].clone())])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(lbar) = &grads[0] else {
            return Ok(vec![None]);
        };
        let l = &outputs[0];
        let phi = lower_half_diagonal(&l.matmul_t(lbar, true, false)?)?;
        // S = L^-T Phi L^-1: solve from the right with L, then from the
        // left with L^T.
        let right = phi.triangular_solve(l, false, true, false, false)?;
        let s = right.triangular_solve(l, true, true, true, false)?;
        let sym = s.add(&swap_last_two(&s)?)?.mul_scalar(0.5)?;
        Ok(vec![Some(sym)])
    }
}

fn swap_last_two(t: &Tensor) -> Result<Tensor> {
    let r = t.dims().len() as i64;
    let mut perm: Vec<i64> = (0..r).collect();
    perm.swap(r as usize - 2, r as usize - 1);
    t.transpose(&perm)
}

/// A mask of the lower triangle (`strict`: without the diagonal) of the
/// last two dimensions of `t`, in `t`'s dtype.
fn triangle_mask(t: &Tensor, lower: bool, strict: bool) -> Result<Tensor> {
    let dims = t.dims();
    let r = dims.len() as i64;
    let rows = Tensor::iota(&dims, r - 2, DType::I32)?;
    let cols = Tensor::iota(&dims, r - 1, DType::I32)?;
    let keep = match (lower, strict) {
        (true, false) => rows.ge(&cols)?,
        (true, true) => rows.gt(&cols)?,
        (false, false) => rows.le(&cols)?,
        (false, true) => rows.lt(&cols)?,
    };
    keep.cast(t.dtype())
}

/// `tril(x)` with the diagonal halved (Murray's `Phi`).
fn lower_half_diagonal(x: &Tensor) -> Result<Tensor> {
    let strict = triangle_mask(x, true, true)?;
    let diag = triangle_mask(x, true, false)?.sub(&strict)?;
    x.mul(&strict.add(&diag.mul_scalar(0.5)?)?)
}

/// `triangular_solve`: with `left_side`, `op(a) x = b`, else `x op(a) =
/// b`, where `op` transposes `a` when `transpose_a`; `a` is read as lower
/// (or upper) triangular, with ones on the diagonal when `unit_diagonal`.
/// Inputs `[a, b]`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TriangularSolve {
    pub left_side: bool,
    pub lower: bool,
    pub transpose_a: bool,
    pub unit_diagonal: bool,
}

impl OpDef for TriangularSolve {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        // Batches of systems are native once both operands carry one.
        let both = batching::all_materialized(inputs, batched, size);
        Some(both.and_then(|x| batching::all_batched(self.clone(), &x)))
    }

    fn name(&self) -> &'static str {
        "triangular_solve"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let op = "triangular_solve";
        expect_arity(op, inputs, 2)?;
        let d = same_dtype(op, inputs)?;
        check_dtype(op, d, d.is_inexact(), "floating-point or complex")?;
        square_last_two(op, &inputs[0], inputs)?;
        if let (Some(a), Some(b)) = (inputs[0].shape.dims(), inputs[1].shape.dims()) {
            let bad = |what: &str| {
                Err(Error::invalid(
                    op,
                    format!("{what} (operands: {})", describe(inputs)),
                ))
            };
            if a.len() != b.len() {
                return bad("a and b need the same rank (the same batch dimensions)");
            }
            let n = a.len();
            let batch_ok = a[..n - 2]
                .iter()
                .zip(&b[..n - 2])
                .all(|(x, y)| !matches!((x, y), (Some(x), Some(y)) if x != y));
            let m: Dim = a[n - 1];
            let along: Dim = if self.left_side { b[n - 2] } else { b[n - 1] };
            if !batch_ok || matches!((m, along), (Some(x), Some(y)) if x != y) {
                return bad("b's dimensions do not match a");
            }
        }
        Ok(vec![inputs[1].clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.triangular_solve(
            &inputs[0],
            &inputs[1],
            [
                self.left_side,
                self.lower,
                self.transpose_a,
                self.unit_diagonal,
            ],
            outputs[0].clone(),
        )])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None, None]);
        };
        let (a, x) = (&inputs[0], &outputs[0]);
        // b's gradient: the same solve with op(a) transposed.
        let gb = g.triangular_solve(
            a,
            self.left_side,
            self.lower,
            !self.transpose_a,
            self.unit_diagonal,
        )?;
        // a's gradient: -(gb x^T) for op(a) a x = b (left), -(x^T gb) for
        // x op(a) = b (right), transposed back when op transposes; kept to
        // the triangle the solve reads.
        let outer = match (self.left_side, self.transpose_a) {
            (true, false) => gb.matmul_t(x, false, true)?,
            (true, true) => x.matmul_t(&gb, false, true)?,
            (false, false) => x.matmul_t(&gb, true, false)?,
            (false, true) => gb.matmul_t(x, true, false)?,
        };
        let mask = triangle_mask(&outer, self.lower, self.unit_diagonal)?;
        Ok(vec![Some(outer.mul(&mask)?.neg()?), Some(gb)])
    }
}

/// **Linear algebra**: Cholesky factors and triangular solves.
impl Tensor {
    /// `tf.linalg.cholesky`: the lower-triangular factor of a symmetric
    /// positive definite matrix (batched over leading dimensions).
    #[track_caller]
    pub fn cholesky(&self) -> Result<Tensor> {
        apply1(Cholesky, &[self])
    }

    /// `tf.linalg.cholesky_solve(chol, rhs)`, `jax.scipy.linalg.cho_solve`:
    /// `x` with `a x = rhs` for `a = L Lᵀ`, given `L` (this tensor, as
    /// [`Tensor::cholesky`] gives it): two triangular solves.
    #[track_caller]
    pub fn cholesky_solve(&self, rhs: &Tensor) -> Result<Tensor> {
        let y = rhs.triangular_solve(self, true, true, false, false)?;
        y.triangular_solve(self, true, true, true, false)
    }

    /// `tf.linalg.logdet`: the log-determinant of each symmetric positive
    /// definite matrix, `2 sum(log(diag(L)))` from its Cholesky factor (a
    /// matrix that is not positive definite gives NaN, as its factor does).
    #[track_caller]
    pub fn logdet(&self) -> Result<Tensor> {
        let two = Tensor::fill(&[], 2, self.dtype())?;
        let diagonal = self.cholesky()?.diag_part()?;
        diagonal.log()?.reduce_sum(&[-1], false)?.mul(&two)
    }

    /// Solves a triangular system with matrix `a` for this right-hand side
    /// (`tf.linalg.triangular_solve` is `left_side = true`; `adjoint`
    /// there is `transpose_a` here, for real matrices).
    #[track_caller]
    pub fn triangular_solve(
        &self,
        a: &Tensor,
        left_side: bool,
        lower: bool,
        transpose_a: bool,
        unit_diagonal: bool,
    ) -> Result<Tensor> {
        apply1(
            TriangularSolve {
                left_side,
                lower,
                transpose_a,
                unit_diagonal,
            },
            &[a, self],
        )
    }
}
