//! Symmetric eigendecomposition (`jnp.linalg.eigh`, `tf.linalg.eigh`) by
//! Jacobi rotations.
//!
//! As for LU and QR, XLA's CPU path has no op xlafn's programs can hold
//! (JAX calls LAPACK through custom calls), so the algorithm is written
//! with tensor ops: cyclic Jacobi in the parallel (round-robin) order.
//! Each round pairs every index with another, `n / 2` disjoint pairs, and
//! one rotation per pair zeroes its off-diagonal entry: the rows of each
//! pair are gathered, rotated and put back with one gather of the inverse
//! permutation, then the columns. `n - 1` rounds make a sweep, in which
//! every pair meets once; sweeps repeat (a device `while` loop) until the
//! off-diagonal part is below machine epsilon times the matrix's norm,
//! at most [`MAX_SWEEPS`] times. Jacobi's eigenvalues are accurate to
//! working precision, more so than a tridiagonal QR's. An odd order is
//! padded with one zero row and column, which no rotation ever touches.
//!
//! The input is symmetrized first, `(a + aᵀ) / 2`, as `jnp.linalg.eigh`
//! does by default (TensorFlow reads the lower triangle only): the
//! gradient is symmetric too. Eigenvalues come in ascending order;
//! eigenvector signs are arbitrary, as LAPACK's are.
//!
//! Gradient, written (for `a = V diag(w) Vᵀ`): `ā = V (diag(w̄) + F ∘ (Vᵀ
//! V̄)) Vᵀ`, symmetrized, with `F[i][j] = 1 / (w[j] - w[i])` off the
//! diagonal and 0 on it: JAX's rule. Repeated eigenvalues make the
//! eigenvectors' part infinite or NaN, as in JAX; where no gradient
//! reaches the eigenvectors (`eigvalsh`), that part is exactly 0, so the
//! eigenvalues' gradient stays finite there too.
//!
//! Eagerly, the decomposition runs as one compiled program
//! (`ops::one_program`).
//!
//! Layer: ops (composite). Imports `tensor` ops, `ops::matrix`,
//! `ops::one_program`, `control::{while_loop, for_range}` and
//! `custom_gradient`.

use super::custom_gradient::custom_gradient;
use super::matrix::zeros_shaped_like;
use super::one_program::run_as_one_program;
use crate::control::{for_range, while_loop};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The most sweeps run. Cyclic Jacobi converges quadratically; f64
/// matrices of order 100 take about 10.
pub const MAX_SWEEPS: i64 = 40;

/// The round-robin schedule for an even `n`: in round `r`, pair `k` is
/// `(top[r][k], bot[r][k])`, and `inv[r]` puts `top ++ bot` back in
/// index order. Index 0 stays; the others turn one place a round.
struct Rounds {
    top: Tensor,
    bot: Tensor,
    inv: Tensor,
    count: i64,
}

impl Rounds {
    fn new(n: i64) -> Result<Rounds> {
        let (n, half) = (n as usize, n as usize / 2);
        let count = n - 1;
        let (mut top, mut bot, mut inv) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..count {
            let seat = |i: usize| if i == 0 { 0 } else { 1 + (i - 1 + r) % count } as i64;
            let t: Vec<i64> = (0..half).map(seat).collect();
            let b: Vec<i64> = (0..half).map(|k| seat(n - 1 - k)).collect();
            let mut back = vec![0i64; n];
            for (place, &i) in t.iter().chain(&b).enumerate() {
                back[i as usize] = place as i64;
            }
            top.extend(t);
            bot.extend(b);
            inv.extend(back);
        }
        let (rows, half) = (count as i64, half as i64);
        Ok(Rounds {
            top: Tensor::from_vec(top, &[rows, half])?,
            bot: Tensor::from_vec(bot, &[rows, half])?,
            inv: Tensor::from_vec(inv, &[rows, 2 * half])?,
            count: rows,
        })
    }

    /// Round `r`'s `(top, bot, inv)` index vectors.
    fn at(&self, r: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        Ok((
            self.top.gather(r, 0)?,
            self.bot.gather(r, 0)?,
            self.inv.gather(r, 0)?,
        ))
    }
}

/// The rotation `(c, s)` with `[[c, s], [-s, c]]ᵀ [[p, r], [r, q]] [[c, s],
/// [-s, c]]` diagonal (Golub and Van Loan's symmetric Schur step, the
/// smaller of the two angles); `(1, 0)` where `r` is already 0.
fn schur_rotation(p: &Tensor, q: &Tensor, r: &Tensor) -> Result<(Tensor, Tensor)> {
    let dtype = p.dtype();
    let (zero, one) = (Tensor::zeros(&[], dtype), Tensor::ones(&[], dtype));
    let done = r.eq(&zero)?;
    let safe_r = done.where_(&one, r)?;
    let tau = q.sub(p)?.div(&safe_r.add(&safe_r)?)?;
    let sign = tau.ge(&zero)?.where_(&one, &one.neg()?)?;
    let t = sign.div(&tau.abs()?.add(&tau.square()?.add(&one)?.sqrt()?)?)?;
    let c = t.square()?.add(&one)?.rsqrt()?;
    let s = t.mul(&c)?;
    Ok((done.where_(&one, &c)?, done.where_(&zero, &s)?))
}

/// `x` with the slices `top` and `bot` along `axis` (-2 rows, -1
/// columns), given as `xt` and `xb`, rotated: `top c - bot s` and `top s +
/// bot c`, put back in index order by `inv`.
fn rotate(
    xt: &Tensor,
    xb: &Tensor,
    c: &Tensor,
    s: &Tensor,
    inv: &Tensor,
    axis: i64,
) -> Result<Tensor> {
    let new_t = xt.mul(c)?.sub(&xb.mul(s)?)?;
    let new_b = xt.mul(s)?.add(&xb.mul(c)?)?;
    Tensor::concat(&[new_t, new_b], axis)?.gather(inv, axis)
}

/// The element of each row of `rows` `[..., k, n]` at column `at[k]`.
fn at_columns(rows: &Tensor, at: &Tensor, n: i64) -> Result<Tensor> {
    let k = at.dims()[0];
    let mask = Tensor::iota(&[k, n], 1, DType::I64)?.eq(&at.expand_dims(-1)?)?;
    mask.where_(rows, &Tensor::zeros(&[], rows.dtype()))?
        .reduce_sum(&[-1], false)
}

/// The unit roundoff of a float dtype.
fn epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F16 => 2f64.powi(-10),
        DType::BF16 => 2f64.powi(-7),
        DType::F32 => f32::EPSILON as f64,
        _ => f64::EPSILON,
    }
}

/// Jacobi on symmetric `a` `[..., n, n]`, `n` even: the rotated matrix
/// (diagonal to working precision) and the accumulated rotations.
fn jacobi_eigh(a: &Tensor, n: i64) -> Result<(Tensor, Tensor)> {
    let dtype = a.dtype();
    let rounds = Rounds::new(n)?;
    let v = zeros_shaped_like(a, dtype)?.add(&Tensor::eye(n, n, dtype)?)?;
    let off_diagonal = Tensor::eye(n, n, DType::Bool)?.logical_not()?;
    let zero = Tensor::zeros(&[], dtype);
    // Rounding leaves off-diagonal noise of about eps ‖a‖ per entry, so
    // the bound grows with n; eigenvalues are then off by at most n eps
    // ‖a‖ (Weyl), LAPACK's kind of bound.
    let tol = Tensor::fill(&[], n as f64 * epsilon(dtype), dtype)?;
    // Whether any matrix of the batch has off > tol² all (`over`), and
    // whether any is not known to be below it (`unsettled`: NaNs too).
    let progress = |a: &Tensor| -> Result<(Tensor, Tensor)> {
        let squares = a.square()?;
        let off = off_diagonal
            .where_(&squares, &zero)?
            .reduce_sum(&[-2, -1], false)?;
        let all = squares.reduce_sum(&[-2, -1], false)?;
        let excess = off.sub(&all.mul(&tol.square()?)?)?;
        let any = |b: Tensor| -> Result<Tensor> {
            b.cast(DType::I32)?
                .reduce_max(&[], false)?
                .gt(&Tensor::scalar(0i32))
        };
        Ok((
            any(excess.gt(&zero)?)?,
            any(excess.le(&zero)?.logical_not()?)?,
        ))
    };
    let sweep = |a: Tensor, v: Tensor| -> Result<(Tensor, Tensor)> {
        for_range(
            0i64,
            rounds.count,
            1i64,
            (a, v),
            |r: Tensor, (a, v): (Tensor, Tensor)| {
                let (top, bot, inv) = rounds.at(&r)?;
                let (rt, rb) = (a.gather(&top, -2)?, a.gather(&bot, -2)?);
                let (p, q) = (at_columns(&rt, &top, n)?, at_columns(&rb, &bot, n)?);
                let (c, s) = schur_rotation(&p, &q, &at_columns(&rt, &bot, n)?)?;
                let (cr, sr) = (c.expand_dims(-1)?, s.expand_dims(-1)?);
                let a = rotate(&rt, &rb, &cr, &sr, &inv, -2)?;
                let (cc, sc) = (c.expand_dims(-2)?, s.expand_dims(-2)?);
                let a = rotate(
                    &a.gather(&top, -1)?,
                    &a.gather(&bot, -1)?,
                    &cc,
                    &sc,
                    &inv,
                    -1,
                )?;
                let v = rotate(
                    &v.gather(&top, -1)?,
                    &v.gather(&bot, -1)?,
                    &cc,
                    &sc,
                    &inv,
                    -1,
                )?;
                Ok((a, v))
            },
        )
    };
    let (a, v, _) = while_loop(
        |(a, _, done): &(Tensor, Tensor, Tensor)| {
            // A NaN gets one sweep, which spreads it, and no more.
            let (over, unsettled) = progress(a)?;
            let first = done.eq(&Tensor::scalar(0i64))?;
            let more = over.logical_or(&first.logical_and(&unsettled)?)?;
            done.lt(&Tensor::scalar(MAX_SWEEPS))?.logical_and(&more)
        },
        |(a, v, done): (Tensor, Tensor, Tensor)| -> Result<_> {
            let (a, v) = sweep(a, v)?;
            Ok((a, v, done.add(&Tensor::scalar(1i64))?))
        },
        (a.clone(), v, Tensor::scalar(0i64)),
    )?;
    Ok((a, v))
}

/// `x` cut to its first `k` entries along `axis` (-2 or -1).
fn first(x: &Tensor, k: i64, total: i64, axis: i64) -> Result<Tensor> {
    let r = x.rank();
    let mut high = vec![0; r];
    high[(r as i64 + axis) as usize] = k - total;
    x.pad_general(&vec![0; r], &high, &vec![0; r], 0i64)
}

/// `x` with its last two dimensions swapped.
fn transposed(x: &Tensor) -> Result<Tensor> {
    let r = x.rank() as i64;
    let mut perm: Vec<i64> = (0..r).collect();
    perm.swap(r as usize - 1, r as usize - 2);
    x.transpose(&perm)
}

/// Eigenvalues ascending `[..., n]` and eigenvectors as columns.
fn eigh_values_and_vectors(a: &Tensor, n: i64) -> Result<(Tensor, Tensor)> {
    if n == 0 {
        return Ok((a.reduce_sum(&[-1], false)?, a.clone()));
    }
    let sym = a
        .add(&transposed(a)?)?
        .mul(&Tensor::fill(&[], 0.5, a.dtype())?)?;
    let even = n + n % 2;
    let r = a.rank();
    let mut pad = vec![0; r];
    (pad[r - 2], pad[r - 1]) = (even - n, even - n);
    let padded = sym.pad_general(&vec![0; r], &pad, &vec![0; r], 0i64)?;
    let (d, v) = jacobi_eigh(&padded, even)?;
    let w = first(&d.diag_part()?, n, even, -1)?;
    let v = first(&first(&v, n, even, -1)?, n, even, -2)?;
    let order = w.argsort(-1, false, true)?.cast(DType::I64)?;
    let w = w.take_along_axis(&order, -1)?;
    let columns = zeros_shaped_like(&v, DType::I64)?.add(&order.expand_dims(-2)?)?;
    Ok((w, v.take_along_axis(&columns, -1)?))
}

impl Tensor {
    /// The eigenvalues (ascending) and eigenvectors (columns) of each
    /// symmetric matrix, `(w, v)` with `self = v diag(w) vᵀ`
    /// (`jnp.linalg.eigh`, `tf.linalg.eigh`): `self` `[..., n, n]`,
    /// symmetrized first as JAX does; floats.
    #[track_caller]
    pub fn eigh(&self) -> Result<(Tensor, Tensor)> {
        let n = square_order("eigh", self)?;
        let f = custom_gradient(move |xs: &[Tensor]| {
            let mut out = run_as_one_program("eigh", xs, |xs| {
                let (w, v) = eigh_values_and_vectors(&xs[0], n)?;
                Ok(vec![w, v])
            })?;
            let v = out.pop().expect("two results");
            let w = out.pop().expect("two results");
            let (ws, vs) = (w.clone(), v.clone());
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                let dtype = ws.dtype();
                let gaps = ws.expand_dims(-2)?.sub(&ws.expand_dims(-1)?)?;
                let eye = Tensor::eye(n, n, DType::Bool)?;
                let one = Tensor::ones(&[], dtype);
                let f = eye.where_(
                    &Tensor::zeros(&[], dtype),
                    &one.div(&eye.where_(&one, &gaps)?)?,
                )?;
                // Where no gradient reaches the eigenvectors (`eigvalsh`),
                // their part is 0, not 0 * inf from repeated eigenvalues.
                let vtg = vs.matmul_t(&g[1], true, false)?;
                let zero = Tensor::zeros(&[], dtype);
                let through_v = vtg.eq(&zero)?.where_(&zero, &vtg.mul(&f)?)?;
                let inner = through_v.add(&g[0].diag()?)?;
                let ga = vs.matmul(&inner)?.matmul_t(&vs, false, true)?;
                let half = Tensor::fill(&[], 0.5, dtype)?;
                Ok(vec![Some(ga.add(&transposed(&ga)?)?.mul(&half)?)])
            };
            Ok((vec![w, v], grad))
        });
        let mut out = f(std::slice::from_ref(self))?;
        let v = out.pop().expect("two results");
        Ok((out.pop().expect("two results"), v))
    }

    /// The eigenvalues of each symmetric matrix, ascending
    /// (`jnp.linalg.eigvalsh`, `tf.linalg.eigvalsh`).
    #[track_caller]
    pub fn eigvalsh(&self) -> Result<Tensor> {
        Ok(self.eigh()?.0)
    }
}

/// The order of the square float matrices in the last two dimensions.
fn square_order(op: &str, a: &Tensor) -> Result<i64> {
    match a.shape().dims() {
        Some(&[.., Some(r), Some(c)]) if r == c && a.dtype().is_float() => Ok(r),
        _ => Err(Error::invalid(
            op,
            format!(
                "needs square float matrices of known size in the last two dimensions, got {}",
                a.tensor_type()
            ),
        )),
    }
}
