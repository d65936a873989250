//! Tridiagonal systems (`jax.lax.linalg.tridiagonal_solve`;
//! `tf.linalg.tridiagonal_solve` without pivoting): the Thomas algorithm
//! as two `scan`s over the system's rows, so it costs `O(m)` steps for `m`
//! rows and is differentiated through the scans.
//!
//! Like JAX's (and like LAPACK's `gtsv` without pivoting), it divides by
//! the eliminated diagonal: a system that needs row exchanges (a zero
//! there) gives infinities or NaNs. TensorFlow pivots by default.
//!
//! Layer: composites. Imports `tensor` ops, `ops::matrix` and
//! `control::scan`.

use crate::control::{ScanOptions, scan_with};
use crate::error::{Error, Result};
use crate::ops::matrix::{cut, zeros_shaped_like};
use crate::tensor::Tensor;

/// `x` with `A x = b` for the tridiagonal `A` with sub-diagonal `dl`
/// (`dl[i] = A[i, i-1]`; `dl[0]` is not read), diagonal `d` and
/// super-diagonal `du` (`du[i] = A[i, i+1]`; `du[m-1]` is not read), each
/// `[..., m]`, and `b` `[..., m, n]` (`jax.lax.linalg.tridiagonal_solve`).
#[track_caller]
pub fn tridiagonal_solve(dl: &Tensor, d: &Tensor, du: &Tensor, b: &Tensor) -> Result<Tensor> {
    let bad = || {
        Error::invalid(
            "tridiagonal_solve",
            format!(
                "needs diagonals [..., m] and a right-hand side [..., m, n] of one float dtype, \
                 got {}, {}, {} and {}",
                dl.tensor_type(),
                d.tensor_type(),
                du.tensor_type(),
                b.tensor_type()
            ),
        )
    };
    let b_shape = b.shape();
    let (Some(dims), Some(bdims)) = (d.shape().dims().map(<[_]>::to_vec), b_shape.dims()) else {
        return Err(bad());
    };
    let same = |t: &Tensor| t.dtype() == d.dtype() && t.shape().dims() == Some(&dims[..]);
    let fits = d.dtype().is_float()
        && !dims.is_empty()
        && dims.last().is_some_and(Option::is_some)
        && same(dl)
        && same(du)
        && b.dtype() == d.dtype()
        && bdims.len() == dims.len() + 1
        && bdims[..dims.len()] == dims[..];
    if !fits {
        return Err(bad());
    }
    let r = dims.len();
    let Some(m) = dims[r - 1] else {
        return Err(bad());
    };
    if m == 0 {
        return Ok(b.clone());
    }
    // Rows first: [m, ...] and [m, ..., n].
    let rows_first = |t: &Tensor, last: usize| -> Result<Tensor> {
        let rank = t.rank() as i64;
        let axis = rank - 1 - last as i64;
        let mut perm = vec![axis];
        perm.extend((0..rank).filter(|&a| a != axis));
        t.transpose(&perm)
    };
    let (dl_r, d_r, du_r) = (rows_first(dl, 0)?, rows_first(d, 0)?, rows_first(du, 0)?);
    let b_r = rows_first(b, 1)?;
    // Forward: c'[i] = du[i] / w, d'[i] = (b[i] - dl[i] d'[i-1]) / w, with
    // w = d[i] - dl[i] c'[i-1]; the carry starts at 0, so dl[0] is not read.
    // Zeros shaped like one row.
    let row_zeros = |t: &Tensor| -> Result<Tensor> {
        let row = cut(t, -(t.rank() as i64), 0, 1, m)?.squeeze(&[0])?;
        zeros_shaped_like(&row, t.dtype())
    };
    let (zero_c, zero_b) = (row_zeros(&d_r)?, row_zeros(&b_r)?);
    let (_, (c_prime, d_prime)) = scan_with(
        |(c_prev, dp_prev): (Tensor, Tensor),
         (dl_i, d_i, du_i, b_i): (Tensor, Tensor, Tensor, Tensor)| {
            let w = d_i.sub(&dl_i.mul(&c_prev)?)?;
            let c = du_i.div(&w)?;
            let rhs = b_i.sub(&dl_i.expand_dims(-1)?.mul(&dp_prev)?)?;
            let dp = rhs.div(&w.expand_dims(-1)?)?;
            Ok(((c.clone(), dp.clone()), (c, dp)))
        },
        (zero_c, zero_b.clone()),
        (dl_r, d_r, du_r, b_r),
        ScanOptions::new(),
    )?;
    // Backward: x[i] = d'[i] - c'[i] x[i+1]; du[m-1] meets x[m] = 0.
    let (_, x) = scan_with(
        |x_next: Tensor, (c_i, dp_i): (Tensor, Tensor)| {
            let x = dp_i.sub(&c_i.expand_dims(-1)?.mul(&x_next)?)?;
            Ok((x.clone(), x))
        },
        zero_b,
        (c_prime, d_prime),
        ScanOptions::new().reverse(true),
    )?;
    // Back to [..., m, n].
    let rank = x.rank() as i64;
    let mut perm: Vec<i64> = (1..rank - 1).collect();
    perm.extend([0, rank - 1]);
    x.transpose(&perm)
}
