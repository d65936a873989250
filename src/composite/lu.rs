//! General square systems and determinants (`jnp.linalg.solve`, `inv`,
//! `det`, `slogdet`; `tf.linalg.solve`, `inv`, `det`, `slogdet`), built on
//! an LU factorization with partial pivoting.
//!
//! XLA has no LU op on the CPU path xlafn drives (JAX calls LAPACK through
//! custom calls, which xlafn's programs never hold), so the factorization
//! is written here with tensor ops: one device loop over the `n` columns
//! (`for_range`), each step picking the largest remaining entry of its
//! column as the pivot, exchanging rows with exact selects, and
//! eliminating below the pivot. The packed factors then go through two
//! `triangular_solve`s, which read only the triangle they need. A zero
//! pivot (a singular matrix) skips its elimination, so the determinant is
//! exactly 0 and a solve gives infinities or NaNs, as LAPACK's do.
//!
//! Gradients are written, not traced through the loop: for `x = A⁻¹ b`,
//! `b̄ = A⁻ᵀ x̄` and `Ā = -b̄ xᵀ`; for `det`, `Ā = ḡ det(A) A⁻ᵀ`; for
//! `slogdet`, `Ā = ḡ A⁻ᵀ` (the sign has none). They are solves too, so
//! they can be differentiated again.
//!
//! Matrices are the last two dimensions, with leading batch dimensions;
//! floats (f16 to f64), and complex for `solve`, `inv` and `det`, whose
//! gradients follow JAX's convention (transposes, no conjugates).
//! `slogdet` takes real matrices only.
//!
//! Eagerly, each factorization and what is read from it runs as one
//! compiled program (`ops::one_program`).
//!
//! Layer: composites. Imports `tensor` ops, `ops::matrix`,
//! `control::for_range`, `custom_gradient` and `ops::one_program`.

use crate::control::for_range;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::custom_gradient::custom_gradient;
use crate::ops::matrix::{identity_with_batch_of, zeros_shaped_like};
use crate::ops::one_program::run_as_one_program;
use crate::tensor::Tensor;

/// The order `n` of the square matrices in the last two dims of `a`,
/// which must be a float (or, where `complex`, complex) tensor of known
/// rank whose last two dimensions are known; leading (batch) dimensions
/// may be unknown, as in a function exported for any batch.
fn order(op: &str, a: &Tensor, complex: bool) -> Result<i64> {
    let square = match a.shape().dims() {
        Some(&[.., Some(r), Some(c)]) if r == c => Some(c),
        _ => None,
    };
    let Some(n) = square else {
        return Err(Error::invalid(
            op,
            format!(
                "needs square matrices of known size in the last two dimensions, got {}",
                a.tensor_type()
            ),
        ));
    };
    let d = a.dtype();
    if !(d.is_float() || complex && d.is_complex()) {
        let wanted = if complex { "float or complex" } else { "float" };
        return Err(Error::invalid(
            op,
            format!("needs {wanted} matrices, got {}", a.tensor_type()),
        ));
    }
    Ok(n)
}

/// The packed LU factorization of `a`, `P a = L U`: `L` (unit diagonal)
/// below the diagonal of the result and `U` on and above it; the row
/// permutation as indices `[..., n, 1]` (row `i` of `P a` is row
/// `perm[i]` of `a`); and its sign `[..., 1]` (+1 or -1).
fn lu_factor(a: &Tensor, n: i64) -> Result<(Tensor, Tensor, Tensor)> {
    let dtype = a.dtype();
    let rows = Tensor::iota(&[n, 1], 0, DType::I64)?;
    let cols = Tensor::iota(&[1, n], 1, DType::I64)?;
    let column_zeros = zeros_shaped_like(a, DType::I64)?.reduce_sum(&[-1], true)?;
    let perm = column_zeros.add(&rows)?;
    let sign = column_zeros
        .reduce_sum(&[-2], false)?
        .cast(dtype)?
        .add(&Tensor::ones(&[], dtype))?;
    let zero = Tensor::zeros(&[], dtype);
    // The row of `x` where `mask` (one row) holds, as `[..., 1, cols]`;
    // selects, not products, so the values are exact.
    let pick_row = |x: &Tensor, mask: &Tensor| -> Result<Tensor> {
        let z = Tensor::zeros(&[], x.dtype());
        mask.where_(x, &z)?.reduce_sum(&[-2], true)
    };
    if n == 0 {
        // No steps; a traced loop body would still meet empty columns.
        return Ok((a.clone(), perm, sign));
    }
    let (lu, perm, sign) = for_range(
        0i64,
        n,
        1i64,
        (a.clone(), perm, sign),
        |k: Tensor, (a, perm, sign): (Tensor, Tensor, Tensor)| -> Result<_> {
            let k = k.cast(DType::I64)?;
            let at_k = rows.eq(&k)?;
            let col_k = cols.eq(&k)?;
            // The pivot: the largest |a[i, k]| for i >= k.
            let column = col_k.where_(&a, &zero)?.reduce_sum(&[-1], true)?;
            let size = column.abs()?;
            let none = Tensor::ones(&[], size.dtype()).neg()?;
            let candidates = rows.ge(&k)?.where_(&size, &none)?;
            let p = candidates.argmax(-2)?.expand_dims(-1)?;
            let at_p = rows.eq(&p)?;
            // Rows k and p exchanged, in the matrix and the permutation.
            // Three passes over the matrix per step (the column and two
            // rows); what else the step needs follows from those vectors.
            let (row_k, row_p) = (pick_row(&a, &at_k)?, pick_row(&a, &at_p)?);
            let exchanged = at_k.where_(&row_p, &at_p.where_(&row_k, &a)?)?;
            let (perm_k, perm_p) = (pick_row(&perm, &at_k)?, pick_row(&perm, &at_p)?);
            let perm = at_k.where_(&perm_p, &at_p.where_(&perm_k, &perm)?)?;
            let sign = p.squeeze(&[-1])?.ne(&k)?.where_(&sign.neg()?, &sign)?;
            // Column k after the exchange; the pivot is its entry k, which
            // was entry p.
            let (entry_k, pivot) = (pick_row(&column, &at_k)?, pick_row(&column, &at_p)?);
            let column = at_k.where_(&pivot, &at_p.where_(&entry_k, &column)?)?;
            // Eliminate below the pivot; a zero pivot eliminates nothing.
            let singular = pivot.eq(&zero)?;
            let safe = singular.where_(&Tensor::ones(&[], dtype), &pivot)?;
            let below = rows.gt(&k)?;
            let l = below
                .logical_and(&singular.logical_not()?)?
                .where_(&column.div(&safe)?, &zero)?;
            let right = cols.gt(&k)?.where_(&row_p, &zero)?;
            let a = exchanged.sub(&l.mul(&right)?)?;
            let a = below.logical_and(&col_k)?.where_(&l, &a)?;
            Ok((a, perm, sign))
        },
    )?;
    Ok((lu, perm, sign))
}

/// `x` with `a x = b` for the packed factors of `a`: `b` `[..., n, m]`.
fn lu_solve(lu: &Tensor, perm: &Tensor, b: &Tensor) -> Result<Tensor> {
    let pb = b.gather_along_axis(&perm.add(&zeros_shaped_like(b, DType::I64)?)?, -2)?;
    let y = pb.triangular_solve(lu, true, true, false, true)?;
    y.triangular_solve(lu, true, false, false, false)
}

/// `x` with `a x = b`, `a` `[..., n, n]` (checked by the caller), `b`
/// `[..., n, m]`, with its written gradient.
fn solve_matrix(a: &Tensor, b: &Tensor, n: i64) -> Result<Tensor> {
    let f = custom_gradient(move |xs: &[Tensor]| {
        let a = xs[0].clone();
        let x = run_as_one_program("solve", xs, |xs| {
            let (lu, perm, _) = lu_factor(&xs[0], n)?;
            Ok(vec![lu_solve(&lu, &perm, &xs[1])?])
        })?
        .remove(0);
        let xt = x.clone();
        let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            let gb = solve_matrix(&a.matrix_transpose()?, &g[0], n)?;
            let ga = gb.matmul_t(&xt, false, true)?.neg()?;
            Ok(vec![Some(ga), Some(gb)])
        };
        Ok((vec![x], grad))
    });
    Ok(f(&[a.clone(), b.clone()])?.remove(0))
}

/// **Linear algebra**: solves, inverses and determinants through LU.
impl Tensor {
    /// `x` with `self @ x = b` (`jnp.linalg.solve`, `tf.linalg.solve`):
    /// `self` `[..., n, n]`, `b` `[..., n, m]` or a vector `[..., n]`, with
    /// the same leading dimensions.
    #[track_caller]
    pub fn solve(&self, b: &Tensor) -> Result<Tensor> {
        let n = order("solve", self, true)?;
        let (a_shape, b_shape) = (self.shape(), b.shape());
        let a_dims = a_shape.dims().unwrap_or(&[]);
        let b_dims = b_shape.dims().unwrap_or(&[]);
        let batch = &a_dims[..a_dims.len().saturating_sub(2)];
        let vector = b_dims.len() == batch.len() + 1;
        let compatible = |x: &Option<i64>, y: &Option<i64>| x.is_none() || y.is_none() || x == y;
        let fits = b.dtype() == self.dtype()
            && b_dims.len() > batch.len()
            && b_dims.len() <= batch.len() + 2
            && batch.iter().zip(b_dims).all(|(x, y)| compatible(x, y))
            && b_dims[batch.len()] == Some(n);
        if !fits {
            return Err(Error::invalid(
                "solve",
                format!(
                    "needs a right-hand side {}[..., {n}] or [..., {n}, m] with the matrix's \
                     leading dimensions, got {} for {}",
                    self.dtype(),
                    b.tensor_type(),
                    self.tensor_type()
                ),
            ));
        }
        if vector {
            solve_matrix(self, &b.expand_dims(-1)?, n)?.squeeze(&[-1])
        } else {
            solve_matrix(self, b, n)
        }
    }

    /// The LU factorization with partial pivoting (`tf.linalg.lu`;
    /// `jax.lax.linalg.lu`'s first and last results): `(lu, permutation)`
    /// with `L` (unit diagonal) below the diagonal of `lu` and `U` on and
    /// above it, and `P a = L U` where row `i` of `P a` is row
    /// `permutation[i]` of `a` (i32, `[..., n]`). Its gradient is
    /// TensorFlow's: with `L̄` below and `Ū` on and above the diagonal of
    /// the cotangent, `ā = Pᵀ L⁻ᵀ (tril(Lᵀ L̄, -1) + triu(Ū Uᵀ)) U⁻ᵀ`.
    #[track_caller]
    pub fn lu(&self) -> Result<(Tensor, Tensor)> {
        let n = order("lu", self, true)?;
        let f = custom_gradient(move |xs: &[Tensor]| {
            let mut out = run_as_one_program("lu", xs, |xs| {
                let (lu, perm, _) = lu_factor(&xs[0], n)?;
                Ok(vec![lu, perm.squeeze(&[-1])?.cast(DType::I32)?])
            })?;
            let perm = out.pop().expect("two results");
            let lu = out.pop().expect("two results");
            let (factors, rows) = (lu.clone(), perm.clone());
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                let l = factors
                    .tril(-1)?
                    .add(&Tensor::eye(n, n, factors.dtype())?)?;
                let u = factors.triu(0)?;
                let phi_l = l.matmul_t(&g[0].tril(-1)?, true, false)?.tril(-1)?;
                let phi_u = g[0].triu(0)?.matmul_t(&u, false, true)?.triu(0)?;
                // X = L⁻ᵀ (phi) U⁻ᵀ, the gradient of P a.
                let left = phi_l
                    .add(&phi_u)?
                    .triangular_solve(&l, true, true, true, true)?;
                let x = left.triangular_solve(&u, false, false, true, false)?;
                // Row i of X belongs to row rows[i] of a.
                let back = rows.argsort(-1, false, true)?.cast(DType::I64)?;
                let index = zeros_shaped_like(&x, DType::I64)?.add(&back.expand_dims(-1)?)?;
                Ok(vec![Some(x.gather_along_axis(&index, -2)?)])
            };
            Ok((vec![lu, perm], grad))
        });
        let mut out = f(std::slice::from_ref(self))?;
        let perm = out.pop().expect("two results");
        Ok((out.pop().expect("two results"), perm))
    }

    /// `jnp.linalg.tensorinv(a, ind)`: the inverse of the tensor seen as a
    /// matrix whose rows are its first `ind` dimensions and whose columns
    /// are the rest (their sizes' products must agree); the result has the
    /// rest's dimensions, then the first `ind`.
    #[track_caller]
    pub fn tensorinv(&self, ind: usize) -> Result<Tensor> {
        let dims = self.dims();
        let rows: i64 = dims[..ind.min(dims.len())].iter().product();
        let cols: i64 = dims[ind.min(dims.len())..].iter().product();
        if ind == 0 || ind >= dims.len() || rows != cols || dims.iter().any(|&d| d < 0) {
            return Err(Error::invalid(
                "tensorinv",
                format!(
                    "needs a known shape whose first {ind} dimensions hold as many elements as \
                     the rest, got {}",
                    self.tensor_type()
                ),
            ));
        }
        let inverse = self.reshape(&[rows, cols])?.inv()?;
        inverse.reshape(&[&dims[ind..], &dims[..ind]].concat())
    }

    /// `jnp.linalg.tensorsolve(a, b)`: `x` with `tensordot(a, x, x.ndim)
    /// = b`, for `a` of shape `b.shape + x.shape` where `x` holds as many
    /// elements as `b`.
    #[track_caller]
    pub fn tensorsolve(&self, b: &Tensor) -> Result<Tensor> {
        let (dims, bdims) = (self.dims(), b.dims());
        let k = bdims.len();
        let fits = dims.len() >= k
            && dims[..k] == bdims[..]
            && dims.iter().all(|&d| d >= 0)
            && dims[..k].iter().product::<i64>() == dims[k..].iter().product::<i64>();
        if !fits {
            return Err(Error::invalid(
                "tensorsolve",
                format!(
                    "needs a of shape b.shape + x.shape with x holding as many elements as b, \
                     got {} for {}",
                    self.tensor_type(),
                    b.tensor_type()
                ),
            ));
        }
        let n: i64 = bdims.iter().product();
        let x = self.reshape(&[n, n])?.solve(&b.reshape(&[n])?)?;
        x.reshape(&dims[k..])
    }

    /// The inverse of each matrix (`jnp.linalg.inv`, `tf.linalg.inv`);
    /// infinities or NaNs for a singular one, as LAPACK gives.
    #[track_caller]
    pub fn inv(&self) -> Result<Tensor> {
        let n = order("inv", self, true)?;
        self.solve(&identity_with_batch_of(self, n)?)
    }

    /// The determinant of each matrix (`jnp.linalg.det`, `tf.linalg.det`):
    /// the product of the pivots with the permutation's sign; exactly 0
    /// for a matrix with a zero pivot.
    #[track_caller]
    pub fn det(&self) -> Result<Tensor> {
        let n = order("det", self, true)?;
        let f = custom_gradient(move |xs: &[Tensor]| {
            let a = xs[0].clone();
            let det = run_as_one_program("det", xs, |xs| {
                let (lu, _, sign) = lu_factor(&xs[0], n)?;
                let pivots = lu.diag_part()?.reduce_prod(&[-1], false)?;
                Ok(vec![pivots.mul(&sign.squeeze(&[-1])?)?])
            })?
            .remove(0);
            let d = det.clone();
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                let scale = g[0].mul(&d)?.expand_dims(-1)?.expand_dims(-1)?;
                Ok(vec![Some(a.inv()?.matrix_transpose()?.mul(&scale)?)])
            };
            Ok((vec![det], grad))
        });
        Ok(f(std::slice::from_ref(self))?.remove(0))
    }

    /// `(sign, log|det|)` of each matrix (`jnp.linalg.slogdet`,
    /// `tf.linalg.slogdet`): the determinant without overflow; a singular
    /// matrix gives sign 0 and `-inf`.
    #[track_caller]
    pub fn slogdet(&self) -> Result<(Tensor, Tensor)> {
        let n = order("slogdet", self, false)?;
        let f = custom_gradient(move |xs: &[Tensor]| {
            let a = xs[0].clone();
            let mut out = run_as_one_program("slogdet", xs, |xs| {
                let (lu, _, sign) = lu_factor(&xs[0], n)?;
                let d = lu.diag_part()?;
                let signs = d.sign()?.reduce_prod(&[-1], false)?;
                let logabs = d.abs()?.log()?.reduce_sum(&[-1], false)?;
                Ok(vec![signs.mul(&sign.squeeze(&[-1])?)?, logabs])
            })?;
            let logabs = out.pop().expect("two results");
            let sign = out.pop().expect("two results");
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                let scale = g[1].expand_dims(-1)?.expand_dims(-1)?;
                Ok(vec![Some(a.inv()?.matrix_transpose()?.mul(&scale)?)])
            };
            Ok((vec![sign, logabs], grad))
        });
        let mut out = f(std::slice::from_ref(self))?;
        let logabs = out.pop().expect("two results");
        Ok((out.pop().expect("two results"), logabs))
    }
}
