//! QR decomposition (`jnp.linalg.qr`, `tf.linalg.qr`).
//!
//! As for LU (`composite::lu`), XLA's CPU path has no QR op xlafn's programs can
//! hold, so the factorization is written with tensor ops: one device loop
//! (`for_range`) over the `min(m, n)` columns, each step a Householder
//! reflection `H = I - 2 v vᵀ / vᵀv` applied to the matrix and gathered
//! into `Q`. The conventions are LAPACK's (`geqrf`), so results match
//! NumPy's and JAX's element for element: `R[k, k] = -sign(a_kk) ‖x‖`, and
//! a column with nothing below its diagonal is left as it is (no
//! reflection, whatever its sign). Each column is scaled by its largest
//! magnitude before its norm is taken, so norms neither overflow nor
//! underflow. Entries below `R`'s diagonal are exact zeros.
//!
//! The gradient is written, not traced through the loop. For `A = QR` with
//! `m >= n` (reduced), given `Q̄` and `R̄`, with `M = Qᵀ Q̄`, `N = R R̄ᵀ`
//! and `L` the lower triangle of `(M - Mᵀ) + (N - Nᵀ)`:
//! `Ā = Q (R̄ + L R⁻ᵀ) + (Q̄ - Q M) R⁻ᵀ` (the formula TensorFlow's
//! gradient uses). A wide matrix `[X | Y]` (`m < n`) factors as
//! `Q [U | V]` with `X = QU`: `Ȳ = Q V̄`, and `X̄` is the square formula
//! with `Q̄ + Y V̄ᵀ` for `Q̄`. As in TensorFlow and JAX, there is no
//! gradient for the complete factorization of a tall matrix
//! (`full_matrices` with `m > n`): asking for one is an error.
//!
//! Matrices are the last two dimensions, with leading batch dimensions
//! (which may be unknown while tracing for any batch); floats only.
//!
//! Eagerly, the factorization runs as one compiled program
//! (`ops::one_program`).
//!
//! Layer: composites. Imports `tensor` ops, `ops::matrix`,
//! `ops::one_program`, `control::for_range` and `custom_gradient`.

use crate::control::for_range;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::custom_gradient::custom_gradient;
use crate::ops::matrix::{cut, float_matrix_dims, identity_with_batch_of};
use crate::ops::one_program::run_as_one_program;
use crate::tensor::Tensor;

/// The complete Householder factorization `a = q r`: `q` `[..., m, m]`
/// orthogonal, `r` `[..., m, n]` upper triangular.
pub(crate) fn householder(a: &Tensor, m: i64, n: i64) -> Result<(Tensor, Tensor)> {
    let dtype = a.dtype();
    let rows = Tensor::iota(&[m, 1], 0, DType::I64)?;
    let cols = Tensor::iota(&[1, n], 1, DType::I64)?;
    let zero = Tensor::zeros(&[], dtype);
    let one = Tensor::ones(&[], dtype);
    let two = Tensor::fill(&[], 2i64, dtype)?;
    let q = identity_with_batch_of(a, m)?;
    if m.min(n) == 0 {
        // Nothing to reflect; a traced loop body would still meet empty columns.
        return Ok((q, a.clone()));
    }
    let (r, q) = for_range(
        0i64,
        m.min(n),
        1i64,
        (a.clone(), q),
        |k: Tensor, (a, q): (Tensor, Tensor)| -> Result<_> {
            let k = k.cast(DType::I64)?;
            let (at, below, col_k) = (rows.eq(&k)?, rows.gt(&k)?, cols.eq(&k)?);
            // Column k from the diagonal down, scaled by its largest entry.
            let x = col_k.where_(&a, &zero)?.reduce_sum(&[-1], true)?;
            let x = rows.ge(&k)?.where_(&x, &zero)?;
            let largest = x.abs()?.reduce_max(&[-2], true)?;
            let s = largest.gt(&zero)?.where_(&largest, &one)?;
            let x = x.div(&s)?;
            let alpha = at.where_(&x, &zero)?.reduce_sum(&[-2], true)?;
            let tail = below.where_(&x, &zero)?;
            let sigma = tail.square()?.reduce_sum(&[-2], true)?;
            let norm = alpha.square()?.add(&sigma)?.sqrt()?;
            let beta = alpha.ge(&zero)?.where_(&norm.neg()?, &norm)?;
            let reflect = sigma.gt(&zero)?;
            // v = x - beta e_k, and 2 / vᵀv (0 where nothing reflects).
            let v = at.where_(&alpha.sub(&beta)?, &tail)?;
            let vtv = v.square()?.reduce_sum(&[-2], true)?;
            let scale = reflect.where_(&two.div(&reflect.where_(&vtv, &one)?)?, &zero)?;
            let sv = v.mul(&scale)?;
            let a = a.sub(&sv.mul(&v.matmul_t(&a, true, false)?)?)?;
            // Exact zeros below the diagonal, and the norm on it.
            let done = reflect.logical_and(&col_k)?;
            let a = done.logical_and(&below)?.where_(&zero, &a)?;
            let a = done.logical_and(&at)?.where_(&beta.mul(&s)?, &a)?;
            let q = q.sub(&q.matmul(&sv)?.mul(&v.matrix_transpose()?)?)?;
            Ok((a, q))
        },
    )?;
    Ok((q, r.triu(0)?))
}

/// The gradient of the reduced factorization `a = q r` of a tall or
/// square `a` (`q` `[..., m, n]`, `r` `[..., n, n]`).
fn tall_gradient(q: &Tensor, r: &Tensor, gq: &Tensor, gr: &Tensor) -> Result<Tensor> {
    // x R⁻ᵀ: solve y Rᵀ = x, R upper triangular.
    let times_r_inv_t = |x: &Tensor| x.triangular_solve(r, false, false, true, false);
    let qdq = q.matmul_t(gq, true, false)?;
    let rdr = r.matmul_t(gr, false, true)?;
    let l = qdq
        .sub(&qdq.matrix_transpose()?)?
        .add(&rdr.sub(&rdr.matrix_transpose()?)?)?
        .tril(0)?;
    let through_r = q.matmul(&gr.add(&times_r_inv_t(&l)?)?)?;
    let through_q = times_r_inv_t(&gq.sub(&q.matmul(&qdq)?)?)?;
    through_r.add(&through_q)
}

/// **Linear algebra**: QR factors.
impl Tensor {
    /// The QR decomposition of each matrix, `(q, r)` with `self = q r`
    /// (`tf.linalg.qr`, `jnp.linalg.qr`): for `[..., m, n]` and
    /// `k = min(m, n)`, `q` is `[..., m, k]` with orthonormal columns and
    /// `r` `[..., k, n]` upper triangular; with `full_matrices`, `q` is
    /// `[..., m, m]` and `r` `[..., m, n]`. Signs follow LAPACK, as NumPy
    /// and JAX give them.
    #[track_caller]
    pub fn qr(&self, full_matrices: bool) -> Result<(Tensor, Tensor)> {
        let (m, n) = float_matrix_dims("qr", self)?;
        let k = m.min(n);
        let f = custom_gradient(move |xs: &[Tensor]| {
            let a = xs[0].clone();
            let key = if full_matrices {
                "qr/complete"
            } else {
                "qr/reduced"
            };
            let mut out = run_as_one_program(key, xs, |xs| {
                let (q, r) = householder(&xs[0], m, n)?;
                Ok(if full_matrices {
                    vec![q, r]
                } else {
                    vec![cut(&q, -1, 0, k, m)?, cut(&r, -2, 0, k, m)?]
                })
            })?;
            let r = out.pop().expect("two results");
            let q = out.pop().expect("two results");
            let (qs, rs) = (q.clone(), r.clone());
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                if full_matrices && m > n {
                    return Err(Error::invalid(
                        "qr",
                        format!(
                            "has no gradient for the complete factorization of tall \
                             [{m}, {n}] matrices (full_matrices with more rows than columns), \
                             as in TensorFlow and JAX; use the reduced one"
                        ),
                    ));
                }
                let (gq, gr) = (&g[0], &g[1]);
                if m >= n {
                    return Ok(vec![Some(tall_gradient(&qs, &rs, gq, gr)?)]);
                }
                // [X | Y] = Q [U | V].
                let u = cut(&rs, -1, 0, m, n)?;
                let (gu, gv) = (cut(gr, -1, 0, m, n)?, cut(gr, -1, m, n - m, n)?);
                let y = cut(&a, -1, m, n - m, n)?;
                let gq = gq.add(&y.matmul_t(&gv, false, true)?)?;
                let gx = tall_gradient(&qs, &u, &gq, &gu)?;
                let gy = qs.matmul(&gv)?;
                Ok(vec![Some(Tensor::concat(&[gx, gy], -1)?)])
            };
            Ok((vec![q, r], grad))
        });
        let mut out = f(std::slice::from_ref(self))?;
        let r = out.pop().expect("two results");
        Ok((out.pop().expect("two results"), r))
    }
}
