//! Symmetric eigendecomposition (`jnp.linalg.eigh`, `tf.linalg.eigh`) and
//! the singular value decomposition (`jnp.linalg.svd`, `tf.linalg.svd`) by
//! Jacobi rotations, and what the SVD gives: `pinv`, `lstsq`, the
//! spectral and nuclear norms (`Tensor::norm`).
//!
//! As for LU and QR, XLA's CPU path has no op xlafn's programs can hold
//! (JAX calls LAPACK through custom calls), so the algorithm is written
//! with tensor ops: cyclic Jacobi in the parallel (round-robin) order.
//! Each round pairs every index with another, `n / 2` disjoint pairs, and
//! one rotation per pair zeroes its off-diagonal entry: the rows of each
//! pair are gathered, rotated and put back with one gather of the inverse
//! permutation, then the columns. `n - 1` rounds make a sweep, in which
//! every pair meets once; sweeps repeat (a device `while` loop) until the
//! off-diagonal part is below `n` machine epsilons times the matrix's
//! norm, at most [`MAX_SWEEPS`] times. Jacobi's eigenvalues are accurate
//! to working precision. An odd order is padded with one zero row and
//! column, which no rotation ever touches.
//!
//! The SVD is one-sided Jacobi (Hestenes): the same rounds rotate pairs of
//! columns of `a` (of `aᵀ` when it is wide) until every pair's cosine is
//! below `n` epsilons, each rotation the symmetric Schur step of the
//! pair's 2 x 2 Gram matrix, accumulated into `V`. The column norms are
//! the singular values, so small ones are accurate relative to
//! themselves. The normalized columns are `U`; a Householder QR of them
//! (`composite::qr`) keeps them, up to sign, and completes them to an
//! orthonormal set where singular values are 0 and for a complete `U`.
//!
//! Cost: far above LAPACK's (`book/src/reference/ops.md` has the figures
//! beside jax.jit): `n - 1` rounds per sweep, 7 to 10 sweeps, each round
//! a handful of gathers and rotations in a device loop.
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
//! The SVD's gradient (reduced, `a = U diag(s) Vᵀ`): `ā = U (J diag(s) +
//! diag(s̄) + diag(s) K) Vᵀ + (I - U Uᵀ) Ū diag(1/s) Vᵀ + U diag(1/s) V̄ᵀ
//! (I - V Vᵀ)`, with `J = F ∘ (UᵀŪ - ŪᵀU)`, `K = F ∘ (VᵀV̄ - V̄ᵀV)` and
//! `F[i][j] = 1 / (s[j]² - s[i]²)` off the diagonal: Townsend's (2016)
//! rule, JAX's. As in JAX there is none for a complete factorization of a
//! matrix that is not square. Parts whose cotangent is exactly 0 are 0, so
//! `singular_values` (and norms on them) have finite gradients at
//! repeated or zero singular values.
//!
//! Eagerly, the decomposition runs as one compiled program
//! (`ops::one_program`).
//!
//! Layer: composites. Imports `tensor` ops, `ops::matrix`,
//! `composite::qr` (completing `U`), `ops::stats::NormOrd` (`cond`),
//! `ops::one_program`, `control::{while_loop, for_range}` and
//! `custom_gradient`.

use crate::control::{for_range, while_loop};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::custom_gradient::custom_gradient;
use crate::ops::matrix::{
    cut, float_matrix_dims, identity_with_batch_of, square_float_dims, zeros_shaped_like,
};
use crate::ops::one_program::run_as_one_program;
use crate::ops::stats::NormOrd;
use crate::tensor::Tensor;

/// The most sweeps run. Cyclic Jacobi converges quadratically; f64
/// matrices of order 100 take about 10.
pub const MAX_SWEEPS: i64 = 40;

/// The most index entries a round-robin table may hold on the host
/// (`(n - 1) n`, three tables of i64: 1.5 MiB); larger orders compute
/// each round's indices on the device instead.
const MAX_TABLE_ENTRIES: i64 = 1 << 16;

/// The round-robin schedule for an even `n`: in round `r`, pair `k` is
/// `(top[k], bot[k])`, and `inv` puts `top ++ bot` back in index order.
/// Seat 0 keeps index 0; the others pass their indices one seat on each
/// round, so seat `i > 0` holds `1 + (i - 1 + r) mod (n - 1)`. Small
/// orders read each round from constant tables (one gather each: the
/// cheapest in a loop step); large ones compute it on the device from
/// `r`, so no table of `n²` indices is built on the host.
struct Rounds {
    n: i64,
    count: i64,
    tables: Option<(Tensor, Tensor, Tensor)>,
}

impl Rounds {
    fn new(n: i64) -> Result<Rounds> {
        if (n - 1) * n <= MAX_TABLE_ENTRIES {
            Rounds::tabled(n)
        } else {
            Ok(Rounds::computed(n))
        }
    }

    fn computed(n: i64) -> Rounds {
        Rounds {
            n,
            count: n - 1,
            tables: None,
        }
    }

    fn tabled(n: i64) -> Result<Rounds> {
        let computed = Rounds::computed(n);
        let (mut top, mut bot, mut inv) = (Vec::new(), Vec::new(), Vec::new());
        for r in 0..computed.count {
            let (t, b, i) = computed.on_host(r);
            top.extend(t);
            bot.extend(b);
            inv.extend(i);
        }
        let (rows, half) = (computed.count, n / 2);
        Ok(Rounds {
            tables: Some((
                Tensor::from_vec(top, &[rows, half])?,
                Tensor::from_vec(bot, &[rows, half])?,
                Tensor::from_vec(inv, &[rows, n])?,
            )),
            ..computed
        })
    }

    /// The index seat `i` holds in round `r`.
    fn seat(&self, i: i64, r: i64) -> i64 {
        if i == 0 {
            0
        } else {
            1 + (i - 1 + r) % self.count
        }
    }

    /// Round `r`'s vectors, on the host.
    fn on_host(&self, r: i64) -> (Vec<i64>, Vec<i64>, Vec<i64>) {
        let (n, half) = (self.n, self.n / 2);
        let top: Vec<i64> = (0..half).map(|k| self.seat(k, r)).collect();
        let bot: Vec<i64> = (0..half).map(|k| self.seat(n - 1 - k, r)).collect();
        let mut inv = vec![0; n as usize];
        for (place, &index) in top.iter().chain(&bot).enumerate() {
            inv[index as usize] = place as i64;
        }
        (top, bot, inv)
    }

    /// Round `r`'s `(top, bot, inv)` index vectors.
    fn at(&self, r: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
        if let Some((top, bot, inv)) = &self.tables {
            return Ok((top.gather(r, 0)?, bot.gather(r, 0)?, inv.gather(r, 0)?));
        }
        let (n, half) = (self.n, self.n / 2);
        let r = r.cast(DType::I64)?;
        let int = |v: i64| Tensor::scalar(v);
        let zero = int(0);
        let seat_index = |seat: &Tensor| -> Result<Tensor> {
            let turned = seat
                .sub(&int(1))?
                .add(&r)?
                .floormod(&int(self.count))?
                .add(&int(1))?;
            seat.eq(&zero)?.where_(&zero, &turned)
        };
        let k = Tensor::iota(&[half], 0, DType::I64)?;
        let top = seat_index(&k)?;
        let bot = seat_index(&int(n - 1).sub(&k)?)?;
        // The seat of index x, and the seat's place in `top ++ bot`.
        let x = Tensor::iota(&[n], 0, DType::I64)?;
        let back = x
            .sub(&int(1))?
            .sub(&r)?
            .floormod(&int(self.count))?
            .add(&int(1))?;
        let seat = x.eq(&zero)?.where_(&zero, &back)?;
        let place = seat
            .lt(&int(half))?
            .where_(&seat, &int(half + n - 1).sub(&seat)?)?;
        Ok((top, bot, place))
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
    // One element per row: a gather, not a pass over the rows.
    let one_column = cut(rows, -1, 0, 1, n)?;
    let index = zeros_shaped_like(&one_column, DType::I64)?.add(&at.expand_dims(-1)?)?;
    rows.gather_along_axis(&index, -1)?.squeeze(&[-1])
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

/// Sweeps of `round` (one round-robin round, on the working matrix and
/// the accumulated rotations) until `excess` of the working matrix (one
/// value per matrix of the batch) is at most 0 everywhere, at most
/// [`MAX_SWEEPS`] times. A NaN gets one sweep, which spreads it, and no
/// more.
fn sweep_until_converged(
    work: Tensor,
    rotations: Tensor,
    rounds: &Rounds,
    excess: impl Fn(&Tensor) -> Result<Tensor>,
    round: impl Fn(&Tensor, &Tensor, &Tensor, Tensor, Tensor) -> Result<(Tensor, Tensor)>,
) -> Result<(Tensor, Tensor)> {
    let any = |b: Tensor| -> Result<Tensor> {
        b.cast(DType::I32)?
            .reduce_max(&[], false)?
            .gt(&Tensor::scalar(0i32))
    };
    let (w, v, _) = while_loop(
        |(w, _, done): &(Tensor, Tensor, Tensor)| {
            let e = excess(w)?;
            let zero = Tensor::zeros(&[], e.dtype());
            let over = any(e.gt(&zero)?)?;
            let unsettled = any(e.le(&zero)?.logical_not()?)?;
            let first = done.eq(&Tensor::scalar(0i64))?;
            let more = over.logical_or(&first.logical_and(&unsettled)?)?;
            done.lt(&Tensor::scalar(MAX_SWEEPS))?.logical_and(&more)
        },
        |(w, v, done): (Tensor, Tensor, Tensor)| -> Result<_> {
            let (w, v) = for_range(
                0i64,
                rounds.count,
                1i64,
                (w, v),
                |r: Tensor, (w, v): (Tensor, Tensor)| {
                    let (top, bot, inv) = rounds.at(&r)?;
                    round(&top, &bot, &inv, w, v)
                },
            )?;
            Ok((w, v, done.add(&Tensor::scalar(1i64))?))
        },
        (work, rotations, Tensor::scalar(0i64)),
    )?;
    Ok((w, v))
}

/// The columns `top` and `bot` of `x`, rotated by `(c, s)` per pair.
fn rotate_columns(
    x: &Tensor,
    top: &Tensor,
    bot: &Tensor,
    inv: &Tensor,
    cs: &(Tensor, Tensor),
) -> Result<Tensor> {
    let (c, s) = (cs.0.expand_dims(-2)?, cs.1.expand_dims(-2)?);
    rotate(&x.gather(top, -1)?, &x.gather(bot, -1)?, &c, &s, inv, -1)
}

/// Jacobi on symmetric `a` `[..., n, n]`, `n` even: the rotated matrix
/// (diagonal to working precision) and the accumulated rotations.
fn jacobi_eigh(a: &Tensor, n: i64) -> Result<(Tensor, Tensor)> {
    let dtype = a.dtype();
    let off_diagonal = Tensor::eye(n, n, DType::Bool)?.logical_not()?;
    let zero = Tensor::zeros(&[], dtype);
    // Rounding leaves off-diagonal noise of about eps ‖a‖ per entry, so
    // the bound grows with n; eigenvalues are then off by at most n eps
    // ‖a‖ (Weyl), LAPACK's kind of bound.
    let tol = Tensor::fill(&[], n as f64 * epsilon(dtype), dtype)?;
    let excess = |a: &Tensor| -> Result<Tensor> {
        let squares = a.square()?;
        let off = off_diagonal
            .where_(&squares, &zero)?
            .reduce_sum(&[-2, -1], false)?;
        let all = squares.reduce_sum(&[-2, -1], false)?;
        off.sub(&all.mul(&tol.square()?)?)
    };
    let round = |top: &Tensor, bot: &Tensor, inv: &Tensor, a: Tensor, v: Tensor| {
        let (rt, rb) = (a.gather(top, -2)?, a.gather(bot, -2)?);
        let (p, q) = (at_columns(&rt, top, n)?, at_columns(&rb, bot, n)?);
        let cs = schur_rotation(&p, &q, &at_columns(&rt, bot, n)?)?;
        let a = rotate(
            &rt,
            &rb,
            &cs.0.expand_dims(-1)?,
            &cs.1.expand_dims(-1)?,
            inv,
            -2,
        )?;
        let a = rotate_columns(&a, top, bot, inv, &cs)?;
        Ok((a, rotate_columns(&v, top, bot, inv, &cs)?))
    };
    let v = identity_with_batch_of(a, n)?;
    sweep_until_converged(a.clone(), v, &Rounds::new(n)?, excess, round)
}

/// One-sided Jacobi (Hestenes) on the columns of `a` `[..., m, n]`, `n`
/// even: the columns rotated until mutually orthogonal (each pair's
/// cosine below `n` eps, which keeps small singular values accurate
/// relative to themselves), and the accumulated rotations `[..., n, n]`.
/// A pair's rotation is the symmetric Schur step of its 2 x 2 Gram
/// matrix.
fn jacobi_columns(a: &Tensor, n: i64) -> Result<(Tensor, Tensor)> {
    let dtype = a.dtype();
    let off_diagonal = Tensor::eye(n, n, DType::Bool)?.logical_not()?;
    let (zero, one) = (Tensor::zeros(&[], dtype), Tensor::ones(&[], dtype));
    let tol = Tensor::fill(&[], n as f64 * epsilon(dtype), dtype)?;
    let excess = |u: &Tensor| -> Result<Tensor> {
        let gram = u.matmul_t(u, true, false)?;
        let norms = gram.diag_part()?.sqrt()?;
        let safe = norms.gt(&zero)?.where_(&norms, &one)?;
        let cosines = gram
            .div(&safe.expand_dims(-1)?)?
            .div(&safe.expand_dims(-2)?)?;
        let worst = off_diagonal
            .where_(&cosines.abs()?, &zero)?
            .reduce_max(&[-2, -1], false)?;
        worst.sub(&tol)
    };
    let round = |top: &Tensor, bot: &Tensor, inv: &Tensor, u: Tensor, v: Tensor| {
        let (ct, cb) = (u.gather(top, -1)?, u.gather(bot, -1)?);
        let alpha = ct.square()?.reduce_sum(&[-2], false)?;
        let beta = cb.square()?.reduce_sum(&[-2], false)?;
        let gamma = ct.mul(&cb)?.reduce_sum(&[-2], false)?;
        let cs = schur_rotation(&alpha, &beta, &gamma)?;
        let (c, s) = (cs.0.expand_dims(-2)?, cs.1.expand_dims(-2)?);
        let u = rotate(&ct, &cb, &c, &s, inv, -1)?;
        Ok((u, rotate_columns(&v, top, bot, inv, &cs)?))
    };
    let v = identity_with_batch_of(a, n)?;
    sweep_until_converged(a.clone(), v, &Rounds::new(n)?, excess, round)
}

/// Eigenvalues ascending `[..., n]` and eigenvectors as columns.
fn eigh_values_and_vectors(a: &Tensor, n: i64) -> Result<(Tensor, Tensor)> {
    if n == 0 {
        return Ok((a.reduce_sum(&[-1], false)?, a.clone()));
    }
    let sym = a
        .add(&a.matrix_transpose()?)?
        .mul(&Tensor::fill(&[], 0.5, a.dtype())?)?;
    let even = n + n % 2;
    let r = a.rank();
    let mut pad = vec![0; r];
    (pad[r - 2], pad[r - 1]) = (even - n, even - n);
    let padded = sym.pad_general(&vec![0; r], &pad, &vec![0; r], 0i64)?;
    let (d, v) = jacobi_eigh(&padded, even)?;
    let w = cut(&d.diag_part()?, -1, 0, n, even)?;
    let v = cut(&cut(&v, -1, 0, n, even)?, -2, 0, n, even)?;
    let order = w.argsort(-1, false, true)?.cast(DType::I64)?;
    let w = w.gather_along_axis(&order, -1)?;
    let columns = zeros_shaped_like(&v, DType::I64)?.add(&order.expand_dims(-2)?)?;
    Ok((w, v.gather_along_axis(&columns, -1)?))
}

/// The SVD of tall or square `a` `[..., m, n]` (`m >= n`): `u` `[..., m,
/// n]` (`[..., m, m]` when `full`), `s` `[..., n]` descending, and `v`
/// `[..., n, n]` (not transposed).
fn svd_tall(a: &Tensor, m: i64, n: i64, full: bool) -> Result<(Tensor, Tensor, Tensor)> {
    let (dtype, r) = (a.dtype(), a.rank());
    let width = if full { m } else { n };
    if n == 0 {
        let u = cut(&identity_with_batch_of(a, m)?, -1, 0, width, m)?;
        let s = a.reduce_sum(&[-2], false)?;
        return Ok((u, s, identity_with_batch_of(a, 0)?));
    }
    let even = n + n % 2;
    let mut pad = vec![0; r];
    pad[r - 1] = even - n;
    let padded = a.pad_general(&vec![0; r], &pad, &vec![0; r], 0i64)?;
    let (columns, v) = jacobi_columns(&padded, even)?;
    let columns = cut(&columns, -1, 0, n, even)?;
    let v = cut(&cut(&v, -1, 0, n, even)?, -2, 0, n, even)?;
    let s = columns.square()?.reduce_sum(&[-2], false)?.sqrt()?;
    let order = s.argsort(-1, true, true)?.cast(DType::I64)?;
    let s = s.gather_along_axis(&order, -1)?;
    let by_order = |x: &Tensor| -> Result<Tensor> {
        let at = zeros_shaped_like(x, DType::I64)?.add(&order.expand_dims(-2)?)?;
        x.gather_along_axis(&at, -1)
    };
    let (columns, v) = (by_order(&columns)?, by_order(&v)?);
    let (zero, one) = (Tensor::zeros(&[], dtype), Tensor::ones(&[], dtype));
    let positive = s.gt(&zero)?.expand_dims(-2)?;
    let safe = positive.where_(&s.expand_dims(-2)?, &one)?;
    let unit = positive.where_(&columns.div(&safe)?, &zero)?;
    // The unit columns are orthonormal; a QR keeps them (up to sign) and
    // completes them where singular values are 0, and for a complete `u`.
    let (q, triangle) = super::qr::householder(&unit, m, n)?;
    let sign = triangle.diag_part()?.lt(&zero)?.where_(&one.neg()?, &one)?;
    let mut widen = vec![0; r - 1];
    widen[r - 2] = width - n;
    let sign = sign.pad_general(&vec![0; r - 1], &widen, &vec![0; r - 1], 1i64)?;
    let u = cut(&q, -1, 0, width, m)?.mul(&sign.expand_dims(-2)?)?;
    Ok((u, s, v))
}

/// `y` where `x` is not 0, and 0 where it is: a product with a cotangent
/// that is exactly 0 (none arrived) stays 0 beside infinite factors.
fn where_nonzero(x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let zero = Tensor::zeros(&[], x.dtype());
    x.eq(&zero)?.where_(&zero, y)
}

/// `1 / (d[j] - d[i])` off the diagonal, 0 on it, for `d` `[..., k]`.
fn inverse_gaps(d: &Tensor, k: i64) -> Result<Tensor> {
    let dtype = d.dtype();
    let gaps = d.expand_dims(-2)?.sub(&d.expand_dims(-1)?)?;
    let eye = Tensor::eye(k, k, DType::Bool)?;
    let one = Tensor::ones(&[], dtype);
    eye.where_(
        &Tensor::zeros(&[], dtype),
        &one.div(&eye.where_(&one, &gaps)?)?,
    )
}

/// The gradient of the reduced SVD `a = u diag(s) vᵀ` (`u` `[..., m, k]`,
/// `v` `[..., n, k]`), from `ū`, `s̄`, `v̄`.
fn svd_gradient(
    u: &Tensor,
    s: &Tensor,
    v: &Tensor,
    g: (&Tensor, &Tensor, &Tensor),
    k: i64,
) -> Result<Tensor> {
    let (gu, gs, gv) = g;
    let f = inverse_gaps(&s.square()?, k)?;
    let antisymmetric = |x: Tensor| -> Result<Tensor> {
        let d = x.sub(&x.matrix_transpose()?)?;
        where_nonzero(&d, &d.mul(&f)?)
    };
    let j = antisymmetric(u.matmul_t(gu, true, false)?)?;
    let l = antisymmetric(v.matmul_t(gv, true, false)?)?;
    let (s_row, s_col) = (s.expand_dims(-2)?, s.expand_dims(-1)?);
    let inner = j.mul(&s_row)?.add(&gs.diag()?)?.add(&s_col.mul(&l)?)?;
    let core = u.matmul(&inner)?.matmul_t(v, false, true)?;
    // What leaves the spans of u and v, divided by s.
    let off_u = gu.sub(&u.matmul(&u.matmul_t(gu, true, false)?)?)?;
    let off_u = where_nonzero(&off_u, &off_u.div(&s_row)?)?;
    let off_v = gv.sub(&v.matmul(&v.matmul_t(gv, true, false)?)?)?;
    let off_v = where_nonzero(&off_v, &off_v.div(&s_row)?)?;
    core.add(&off_u.matmul_t(v, false, true)?)?
        .add(&u.matmul_t(&off_v, false, true)?)
}

/// **Linear algebra**: singular values and symmetric eigenvalues (Jacobi
/// sweeps), and what is built on them.
impl Tensor {
    /// The singular value decomposition of each matrix, `(u, s, vh)` with
    /// `self = u diag(s) vh` (`jnp.linalg.svd`'s order; `tf.linalg.svd`
    /// gives `(s, u, v)` with `v = vhᵀ`): for `[..., m, n]` and `k = min(m,
    /// n)`, `s` `[..., k]` descending, `u` `[..., m, k]` and `vh` `[..., k,
    /// n]` with orthonormal columns and rows; with `full_matrices`, `u`
    /// `[..., m, m]` and `vh` `[..., n, n]`. Singular vector signs are
    /// arbitrary, as LAPACK's are. By one-sided Jacobi, so small singular
    /// values are accurate relative to themselves; floats.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// // [[3, 0], [4, 5]] has singular values √45 and √5.
    /// let a = Tensor::from_vec(vec![3.0f64, 0., 4., 5.], &[2, 2])?;
    /// let (u, s, vh) = a.svd(false)?;
    /// let (big, small) = (45f64.sqrt(), 5f64.sqrt());
    /// let got = s.to_vec::<f64>()?;
    /// assert!((got[0] - big).abs() < 1e-12 && (got[1] - small).abs() < 1e-12);
    /// // u diag(s) vh gives the matrix back.
    /// let back = u.mul(&s.expand_dims(0)?)?.matmul(&vh)?.to_vec::<f64>()?;
    /// for (b, w) in back.iter().zip([3.0, 0.0, 4.0, 5.0]) {
    ///     assert!((b - w).abs() < 1e-12);
    /// }
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn svd(&self, full_matrices: bool) -> Result<(Tensor, Tensor, Tensor)> {
        let (m, n) = float_matrix_dims("svd", self)?;
        let k = m.min(n);
        let f = custom_gradient(move |xs: &[Tensor]| {
            let key = if full_matrices {
                "svd/complete"
            } else {
                "svd/reduced"
            };
            let mut out = run_as_one_program(key, xs, |xs| {
                let (u, s, v) = if m >= n {
                    svd_tall(&xs[0], m, n, full_matrices)?
                } else {
                    let (u, s, v) = svd_tall(&xs[0].matrix_transpose()?, n, m, full_matrices)?;
                    (v, s, u)
                };
                Ok(vec![u, s, v.matrix_transpose()?])
            })?;
            let vh = out.pop().expect("three results");
            let s = out.pop().expect("three results");
            let u = out.pop().expect("three results");
            let (us, ss, vs) = (u.clone(), s.clone(), vh.matrix_transpose()?);
            let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
                if full_matrices && m != n {
                    return Err(Error::invalid(
                        "svd",
                        format!(
                            "has no gradient for the complete factorization of [{m}, {n}] \
                             matrices (full_matrices with m != n), as in JAX; use the reduced one"
                        ),
                    ));
                }
                let gv = g[2].matrix_transpose()?;
                Ok(vec![Some(svd_gradient(
                    &us,
                    &ss,
                    &vs,
                    (&g[0], &g[1], &gv),
                    k,
                )?)])
            };
            Ok((vec![u, s, vh], grad))
        });
        let mut out = f(std::slice::from_ref(self))?;
        let vh = out.pop().expect("three results");
        let s = out.pop().expect("three results");
        Ok((out.pop().expect("three results"), s, vh))
    }

    /// The singular values of each matrix, descending
    /// (`jnp.linalg.svdvals`, `tf.linalg.svd(compute_uv=False)`); their
    /// gradient is `u diag(s̄) vᵀ`.
    #[track_caller]
    pub fn singular_values(&self) -> Result<Tensor> {
        Ok(self.svd(false)?.1)
    }

    /// The pseudo-inverse of each matrix (`jnp.linalg.pinv`,
    /// `tf.linalg.pinv`): `v diag(1/s) uᵀ` over the singular values above
    /// `10 max(m, n) eps` times the largest, their default cutoff.
    #[track_caller]
    pub fn pinv(&self) -> Result<Tensor> {
        let (m, n) = float_matrix_dims("pinv", self)?;
        let (u, inverse, vh) = inverted_svd(self, 10.0 * m.max(n) as f64)?;
        vh.matmul_t(&u.mul(&inverse.expand_dims(-2)?)?, true, true)
    }

    /// The least-squares solution `x` of `self x ≈ b` (`jnp.linalg.lstsq`'s
    /// first result; `tf.linalg.lstsq`): for `[..., m, n]` matrices and
    /// `b` `[..., m, p]`, the `x` `[..., n, p]` of least norm among those
    /// minimizing `‖self x - b‖`, by the SVD, counting singular values at
    /// or below `max(m, n) eps` times the largest as 0 (JAX's default
    /// `rcond`), so matrices short of full rank get the least-norm
    /// solution as in JAX. TensorFlow's default (`fast`, the normal
    /// equations) agrees for matrices of full rank.
    #[track_caller]
    pub fn lstsq(&self, b: &Tensor) -> Result<Tensor> {
        let (m, n) = float_matrix_dims("lstsq", self)?;
        let fits = b.dtype() == self.dtype()
            && b.shape().rank() == self.shape().rank()
            && matches!(b.shape().dims(), Some(&[.., Some(rows), _]) if rows == m);
        if !fits {
            return Err(Error::invalid(
                "lstsq",
                format!(
                    "needs a right-hand side {}[..., {m}, p] of the matrix's rank, got {} for {}",
                    self.dtype(),
                    b.tensor_type(),
                    self.tensor_type()
                ),
            ));
        }
        let (u, inverse, vh) = inverted_svd(self, m.max(n) as f64)?;
        let projected = u.matmul_t(b, true, false)?.mul(&inverse.expand_dims(-1)?)?;
        vh.matmul_t(&projected, true, false)
    }

    /// The condition number of each matrix in `ord` (`jnp.linalg.cond`):
    /// `s_max / s_min` for [`NormOrd::Two`] (NumPy's default), `s_min /
    /// s_max` for `NegTwo`, and `‖a‖ ‖a⁻¹‖` in the other matrix norms
    /// (square matrices). A singular matrix gives infinity.
    #[track_caller]
    pub fn cond(&self, ord: NormOrd) -> Result<Tensor> {
        float_matrix_dims("cond", self)?;
        match ord {
            NormOrd::Two | NormOrd::NegTwo => {
                let s = self.singular_values()?;
                let (big, small) = (s.reduce_max(&[-1], false)?, s.reduce_min(&[-1], false)?);
                if ord == NormOrd::Two {
                    big.div(&small)
                } else {
                    small.div(&big)
                }
            }
            _ => {
                square_float_dims("cond", self)?;
                let norm = |x: &Tensor| x.norm(ord, &[-2, -1], false);
                norm(self)?.mul(&norm(&self.inv()?)?)
            }
        }
    }

    /// The rank of each matrix (`jnp.linalg.matrix_rank`), i32: how many
    /// singular values exceed `max(m, n) eps` times the largest (NumPy's
    /// default tolerance).
    #[track_caller]
    pub fn matrix_rank(&self) -> Result<Tensor> {
        let (m, n) = float_matrix_dims("matrix_rank", self)?;
        let s = self.singular_values()?;
        let dtype = s.dtype();
        let tol = Tensor::fill(&[], m.max(n) as f64 * epsilon(dtype), dtype)?;
        let bound = s.reduce_max(&[-1], true)?.mul(&tol)?;
        s.gt(&bound)?.cast(DType::I32)?.reduce_sum(&[-1], false)
    }

    /// The eigenvalues (ascending) and eigenvectors (columns) of each
    /// symmetric matrix, `(w, v)` with `self = v diag(w) vᵀ`
    /// (`jnp.linalg.eigh`, `tf.linalg.eigh`): `self` `[..., n, n]`,
    /// symmetrized first as JAX does; floats.
    #[track_caller]
    pub fn eigh(&self) -> Result<(Tensor, Tensor)> {
        let n = square_float_dims("eigh", self)?;
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
                Ok(vec![Some(ga.add(&ga.matrix_transpose()?)?.mul(&half)?)])
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

/// The reduced SVD with `1 / s` where `s` is above `cutoff` eps times the
/// largest singular value of its matrix, and 0 elsewhere.
fn inverted_svd(a: &Tensor, cutoff: f64) -> Result<(Tensor, Tensor, Tensor)> {
    let (u, s, vh) = a.svd(false)?;
    let dtype = s.dtype();
    let bound =
        s.reduce_max(&[-1], true)?
            .mul(&Tensor::fill(&[], cutoff * epsilon(dtype), dtype)?)?;
    let kept = s.gt(&bound)?;
    let one = Tensor::ones(&[], dtype);
    let inverse = kept.where_(
        &one.div(&kept.where_(&s, &one)?)?,
        &Tensor::zeros(&[], dtype),
    )?;
    Ok((u, inverse, vh))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    /// In one sweep every unordered pair of indices meets exactly once,
    /// each round pairs every index once, and `inv` undoes `top ++ bot`.
    #[test]
    fn the_round_robin_meets_every_pair_once_a_sweep() {
        let schedules = (2..=12)
            .step_by(2)
            .flat_map(|n| [Rounds::computed(n), Rounds::tabled(n).unwrap()]);
        for rounds in schedules {
            let n = rounds.n;
            let mut met = HashSet::new();
            for r in 0..rounds.count {
                let (top, bot, inv) = rounds.at(&Tensor::scalar(r)).unwrap();
                let (top, bot) = (top.to_vec::<i64>().unwrap(), bot.to_vec::<i64>().unwrap());
                let order: Vec<i64> = top.iter().chain(&bot).copied().collect();
                let mut sorted = order.clone();
                sorted.sort();
                assert_eq!(sorted, (0..n).collect::<Vec<_>>(), "n {n} round {r}");
                let inv = inv.to_vec::<i64>().unwrap();
                for (place, &index) in order.iter().enumerate() {
                    assert_eq!(inv[index as usize], place as i64, "n {n} round {r}");
                }
                for (&a, &b) in top.iter().zip(&bot) {
                    assert!(met.insert((a.min(b), a.max(b))), "n {n}: ({a}, {b}) twice");
                }
            }
            assert_eq!(met.len() as i64, n * (n - 1) / 2, "n {n}");
        }
    }
}
