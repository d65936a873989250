//! The orthogonal factorizations. `qr` and `lstsq` (`ops::qr`): against
//! a hand-worked factorization with NumPy's signs, against modified
//! Gram-Schmidt written here (unique up to the signs of `R`'s diagonal),
//! tall, square and wide, batched, eagerly and compiled for any batch;
//! least squares against a line fitted by hand and the least-norm
//! solution. `eigh` (`ops::jacobi`): against hand-worked spectra and a
//! plain cyclic Jacobi written here, with its residual and orthogonality.
//! Gradients against central finite differences; clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;
#[path = "common/matrices.rs"]
mod matrices;

use gradcheck::check_gradient;
use matrices::{close, f64s, m, values};
use xlafn::prelude::*;

/// Modified Gram-Schmidt on the first `k = min(rows, cols)` columns of a
/// row-major `rows x cols` matrix of full rank: `(q [rows, k], r [k, cols])`
/// with `r`'s diagonal positive.
fn gram_schmidt(a: &[f64], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let k = rows.min(cols);
    let mut v: Vec<Vec<f64>> = (0..cols)
        .map(|j| (0..rows).map(|i| a[i * cols + j]).collect())
        .collect();
    let mut q = vec![vec![0.0; rows]; k];
    let mut r = vec![0.0; k * cols];
    for i in 0..k {
        let norm = v[i].iter().map(|x| x * x).sum::<f64>().sqrt();
        r[i * cols + i] = norm;
        q[i] = v[i].iter().map(|x| x / norm).collect();
        for j in i + 1..cols {
            let d: f64 = (0..rows).map(|t| q[i][t] * v[j][t]).sum();
            r[i * cols + j] = d;
            for t in 0..rows {
                v[j][t] -= d * q[i][t];
            }
        }
    }
    let q_rows = (0..rows)
        .flat_map(|i| (0..k).map(move |j| (i, j)))
        .map(|(i, j)| q[j][i])
        .collect();
    (q_rows, r)
}

/// `(q, r)` with the signs of `r`'s diagonal made positive (`q D`, `D r`).
fn positive_diagonal(q: &[f64], r: &[f64], rows: usize, cols: usize) -> (Vec<f64>, Vec<f64>) {
    let k = rows.min(cols);
    let sign: Vec<f64> = (0..k).map(|i| r[i * cols + i].signum()).collect();
    let q = q.iter().enumerate().map(|(e, x)| x * sign[e % k]).collect();
    let r = r
        .iter()
        .enumerate()
        .map(|(e, x)| x * sign[e / cols])
        .collect();
    (q, r)
}

#[test]
fn a_hand_worked_factorization_with_numpys_signs() {
    // [[1, 2], [3, 4]]: the first reflection takes [1, 3] to [-√10, 0];
    // nothing is left below the second diagonal entry, so it stays.
    let s = 10f64.sqrt();
    let (q, r) = m(&[1., 2., 3., 4.], &[2, 2]).qr(false).unwrap();
    close(&f64s(&q), &[-1. / s, -3. / s, -3. / s, 1. / s], 1e-15, "q");
    close(&f64s(&r), &[-s, -14. / s, 0., -2. / s], 1e-15, "r");
    assert_eq!(f64s(&r)[2], 0.0, "exact zero below the diagonal");
    // A column already zero below its diagonal is left as it is.
    let (q, r) = m(&[2., 1., 0., 3.], &[2, 2]).qr(false).unwrap();
    assert_eq!(f64s(&q), [1., 0., 0., 1.]);
    assert_eq!(f64s(&r), [2., 1., 0., 3.]);
}

#[test]
fn factorizations_match_gram_schmidt_tall_square_wide_and_batched() {
    for (rows, cols) in [(5, 3), (4, 4), (3, 5), (6, 1), (1, 4)] {
        let (ri, ci) = (rows as i64, cols as i64);
        let k = rows.min(cols);
        let a = values(2 * rows * cols, (rows * 10 + cols) as u64);
        let (q, r) = m(&a, &[2, ri, ci]).qr(false).unwrap();
        assert_eq!(q.dims(), [2, ri, k as i64]);
        assert_eq!(r.dims(), [2, k as i64, ci]);
        let (q, r) = (f64s(&q), f64s(&r));
        for b in 0..2 {
            let one = &a[b * rows * cols..(b + 1) * rows * cols];
            let (qb, rb) = (
                &q[b * rows * k..(b + 1) * rows * k],
                &r[b * k * cols..(b + 1) * k * cols],
            );
            for i in 0..k {
                for j in 0..i {
                    assert_eq!(rb[i * cols + j], 0.0, "{rows}x{cols}: exact zeros");
                }
            }
            let (want_q, want_r) = gram_schmidt(one, rows, cols);
            let (got_q, got_r) = positive_diagonal(qb, rb, rows, cols);
            let what = format!("{rows}x{cols} batch {b}");
            close(&got_q, &want_q, 1e-12, &format!("{what} q"));
            close(&got_r, &want_r, 1e-12, &format!("{what} r"));
        }
        // The complete factorization: q square and orthogonal, q r = a.
        let at = m(&a[..rows * cols], &[ri, ci]);
        let (q, r) = at.qr(true).unwrap();
        assert_eq!((q.dims(), r.dims()), (vec![ri, ri], vec![ri, ci]));
        let eye = Tensor::eye(ri, ri, DType::F64).unwrap();
        close(
            &f64s(&q.matmul_t(&q, true, false).unwrap()),
            &f64s(&eye),
            1e-13,
            "qᵀq",
        );
        close(
            &f64s(&q.matmul(&r).unwrap()),
            &a[..rows * cols],
            1e-13,
            "qr = a",
        );
    }
}

#[test]
fn compiled_for_any_batch_and_in_f32() {
    let a = values(2 * 4 * 3, 7);
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None, Some(4), Some(3)], DType::F64)])
        .build(|a: Tensor| a.qr(false));
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(4), Some(3)], DType::F64),))
        .unwrap();
    let at = m(&a, &[2, 4, 3]);
    let (q, r) = cf.call((&at,)).unwrap();
    let (eq, er) = at.qr(false).unwrap();
    close(&f64s(&q), &f64s(&eq), 1e-14, "compiled q");
    close(&f64s(&r), &f64s(&er), 1e-14, "compiled r");
    let (q32, r32) = at.cast(DType::F32).unwrap().qr(false).unwrap();
    assert_eq!((q32.dtype(), r32.dtype()), (DType::F32, DType::F32));
    let back = q32.matmul(&r32).unwrap().cast(DType::F64).unwrap();
    close(&f64s(&back), &a, 1e-5, "f32 q r = a");
    // Entries far beyond f32's square-root range: the scaled norm neither
    // overflows nor underflows.
    let big = m(&[3e30, 1e30, 4e30, 2e30], &[2, 2])
        .cast(DType::F32)
        .unwrap();
    let (_, r) = big.qr(false).unwrap();
    assert!((r.to_vec::<f32>().unwrap()[0] + 5e30).abs() < 1e24);
}

#[test]
fn least_squares_fit_a_line_and_find_the_least_norm_solution() {
    // y = c0 + c1 t through (0, 1), (1, 2), (2, 4): the normal equations
    // [[3, 3], [3, 5]] c = [7, 10] give c = [5/6, 3/2].
    let a = m(&[1., 0., 1., 1., 1., 2.], &[3, 2]);
    let b = m(&[1., 2., 4.], &[3, 1]);
    close(&f64s(&a.lstsq(&b).unwrap()), &[5. / 6., 1.5], 1e-14, "line");
    // x1 + x2 = 2 has least-norm solution [1, 1].
    let wide = m(&[1., 1.], &[1, 2]);
    close(
        &f64s(&wide.lstsq(&m(&[2.], &[1, 1])).unwrap()),
        &[1., 1.],
        1e-14,
        "least norm",
    );
    // Zero-sized matrices factor into zero-sized factors.
    let (q, r) = m(&[], &[0, 3]).qr(false).unwrap();
    assert_eq!((q.dims(), r.dims()), (vec![0, 0], vec![0, 3]));
    // Short of full rank, the least-norm solution, as JAX gives it:
    // [1, 2, 3]ᵀ [1, 2] x = [1, 2, 3] needs [1, 2] x = 1, least norm at
    // [1, 2] / 5.
    let rank1 = m(&[1., 2., 2., 4., 3., 6.], &[3, 2]);
    close(
        &f64s(&rank1.lstsq(&m(&[1., 2., 3.], &[3, 1])).unwrap()),
        &[0.2, 0.4],
        1e-14,
        "rank 1",
    );
    close(
        &f64s(
            &m(&[1., 1., 1., 1.], &[2, 2])
                .lstsq(&m(&[2., 2.], &[2, 1]))
                .unwrap(),
        ),
        &[1., 1.],
        1e-14,
        "singular",
    );
    // pinv: the inverse of an invertible matrix; c dᵀ / (‖c‖² ‖d‖²) of a
    // rank-1 one.
    close(
        &f64s(&m(&[1., 2., 3., 4.], &[2, 2]).pinv().unwrap()),
        &[-2., 1., 1.5, -0.5],
        1e-14,
        "pinv",
    );
    let want: Vec<f64> = [1., 2., 3., 2., 4., 6.].iter().map(|v| v / 70.0).collect();
    close(&f64s(&rank1.pinv().unwrap()), &want, 1e-14, "rank-1 pinv");
    check_gradient(&|a| a.pinv(), &values(6, 13), &[3, 2], 1e-6, "pinv");
    // Square: the solve.
    let sq = m(&[2., 1., 1., 3.], &[2, 2]);
    let rhs = m(&[3., 5.], &[2, 1]);
    close(
        &f64s(&sq.lstsq(&rhs).unwrap()),
        &f64s(&sq.solve(&rhs).unwrap()),
        1e-14,
        "square",
    );
}

#[test]
fn gradients_match_finite_differences() {
    // Both factors in one value, weighted differently by the check.
    let both = |full: bool| {
        move |a: &Tensor| -> Result<Tensor> {
            let (q, r) = a.qr(full)?;
            Tensor::concat(&[q.reshape(&[-1])?, r.reshape(&[-1])?], 0)
        }
    };
    for (dims, full) in [
        (&[4i64, 3][..], false),
        (&[3, 3], false),
        (&[3, 3], true),
        (&[2, 4], false),
        (&[2, 4], true),
        (&[2, 3, 2], false),
    ] {
        let n: i64 = dims.iter().product();
        let x = values(n as usize, 11 + n as u64);
        check_gradient(&both(full), &x, dims, 1e-6, &format!("qr {dims:?} {full}"));
    }
    let b = m(&values(8, 5), &[4, 2]);
    let x = values(12, 3);
    check_gradient(&|a| a.lstsq(&b), &x, &[4, 3], 1e-6, "lstsq tall");
    let bw = m(&values(4, 9), &[2, 2]);
    check_gradient(&|a| a.lstsq(&bw), &x[..6], &[2, 3], 1e-6, "lstsq wide");
}

#[test]
fn clear_errors() {
    let e = Tensor::eye(2, 2, DType::I32)
        .unwrap()
        .qr(false)
        .unwrap_err();
    assert!(e.to_string().contains("float"), "{e}");
    let e = m(&[1., 2.], &[2]).qr(false).unwrap_err();
    assert!(e.to_string().contains("last two dimensions"), "{e}");
    // No gradient for the complete factorization of a tall matrix.
    let a = m(&values(6, 1), &[3, 2]);
    let tape = GradientTape::new();
    tape.watch(&a);
    let (q, _) = a.qr(true).unwrap();
    let loss = q.reduce_sum(&[], false).unwrap();
    let e = tape.gradient(&loss, &[Source::from(&a)]).unwrap_err();
    assert!(e.to_string().contains("full_matrices"), "{e}");
    let e = a.lstsq(&m(&[1., 2.], &[2, 1])).unwrap_err();
    assert!(
        e.to_string().contains("lstsq") && e.to_string().contains("[..., 3, p]"),
        "{e}"
    );
}

/// Plain cyclic Jacobi on a row-major symmetric `n x n` matrix, sweeping
/// pairs in index order until the off-diagonal part vanishes: its
/// eigenvalues, ascending.
fn jacobi_reference(a: &[f64], n: usize) -> Vec<f64> {
    let mut a = a.to_vec();
    for _ in 0..100 {
        let off: f64 = (0..n * n)
            .filter(|e| e / n != e % n)
            .map(|e| a[e] * a[e])
            .sum();
        if off < 1e-30 {
            break;
        }
        for p in 0..n {
            for q in p + 1..n {
                let apq = a[p * n + q];
                if apq == 0.0 {
                    continue;
                }
                let tau = (a[q * n + q] - a[p * n + p]) / (2.0 * apq);
                let t = tau.signum() / (tau.abs() + (1.0 + tau * tau).sqrt());
                let c = 1.0 / (1.0 + t * t).sqrt();
                let s = t * c;
                for k in 0..n {
                    let (akp, akq) = (a[k * n + p], a[k * n + q]);
                    a[k * n + p] = c * akp - s * akq;
                    a[k * n + q] = s * akp + c * akq;
                }
                for k in 0..n {
                    let (apk, aqk) = (a[p * n + k], a[q * n + k]);
                    a[p * n + k] = c * apk - s * aqk;
                    a[q * n + k] = s * apk + c * aqk;
                }
            }
        }
    }
    let mut w: Vec<f64> = (0..n).map(|i| a[i * n + i]).collect();
    w.sort_by(f64::total_cmp);
    w
}

/// A symmetric `n x n` matrix from `values`.
fn symmetric(n: usize, seed: u64) -> Vec<f64> {
    let v = values(n * n, seed);
    (0..n * n)
        .map(|e| (v[e] + v[(e % n) * n + e / n]) / 2.0)
        .collect()
}

/// `‖a v - v diag(w)‖` and `‖vᵀv - I‖` (largest entries).
fn residuals(a: &Tensor, w: &Tensor, v: &Tensor) -> (f64, f64) {
    let n = w.dims()[w.rank() - 1];
    let largest = |t: Tensor| f64s(&t.abs().unwrap().reduce_max(&[], false).unwrap())[0];
    let av = a.matmul(v).unwrap();
    let vw = v.mul(&w.expand_dims(-2).unwrap()).unwrap();
    let gram = v.matmul_t(v, true, false).unwrap();
    let eye = Tensor::eye(n, n, DType::F64).unwrap();
    (
        largest(av.sub(&vw).unwrap()),
        largest(gram.sub(&eye).unwrap()),
    )
}

#[test]
fn eigh_matches_hand_worked_spectra() {
    let s = 0.5f64.sqrt();
    let (w, v) = m(&[2., 1., 1., 2.], &[2, 2]).eigh().unwrap();
    close(&f64s(&w), &[1., 3.], 1e-15, "w");
    // Each eigenvector up to its sign: its projector.
    let v = f64s(&v);
    let (v0, v1) = ([v[0], v[2]], [v[1], v[3]]);
    close(&[v0[0] * v0[0], v0[0] * v0[1]], &[0.5, -0.5], 1e-15, "v0");
    close(&[v1[0] * v1[0], v1[0] * v1[1]], &[0.5, 0.5], 1e-15, "v1");
    assert!((v0[0].abs() - s).abs() < 1e-15);
    // [[3, 4], [4, 9]] has 1 and 11; with a 2 beside it, [1, 2, 11].
    let a = m(&[2., 0., 0., 0., 3., 4., 0., 4., 9.], &[3, 3]);
    close(&f64s(&a.eigvalsh().unwrap()), &[1., 2., 11.], 1e-14, "3x3");
    // Diagonal, repeated, zero and 1 x 1 matrices.
    let d = m(&[3., 0., 0., 0., -1., 0., 0., 0., 3.], &[3, 3]);
    let (w, v) = d.eigh().unwrap();
    assert_eq!(f64s(&w), [-1., 3., 3.]);
    assert_eq!(residuals(&d, &w, &v), (0.0, 0.0));
    assert_eq!(
        f64s(&Tensor::zeros(&[4, 4], DType::F64).eigvalsh().unwrap()),
        [0.; 4]
    );
    assert_eq!(f64s(&m(&[-2.5], &[1, 1]).eigvalsh().unwrap()), [-2.5]);
    let (w, v) = m(&[], &[0, 0]).eigh().unwrap();
    assert_eq!((w.dims(), v.dims()), (vec![0], vec![0, 0]));
    // A matrix that is not symmetric is symmetrized first, as JAX does.
    let ns = m(&[1., 4., 0., 1.], &[2, 2]);
    close(
        &f64s(&ns.eigvalsh().unwrap()),
        &[-1., 3.],
        1e-15,
        "symmetrized",
    );
}

#[test]
fn eigh_matches_a_plain_jacobi_batched_and_compiled() {
    for n in [2usize, 3, 5, 8, 17] {
        let ni = n as i64;
        let a: Vec<f64> = [symmetric(n, n as u64), symmetric(n, 100 + n as u64)].concat();
        let at = m(&a, &[2, ni, ni]);
        let (w, v) = at.eigh().unwrap();
        let (fit, orth) = residuals(&at, &w, &v);
        assert!(
            fit < 1e-13 * n as f64 && orth < 1e-13 * n as f64,
            "{n}: {fit:e} {orth:e}"
        );
        let w = f64s(&w);
        for b in 0..2 {
            let want = jacobi_reference(&a[b * n * n..(b + 1) * n * n], n);
            close(
                &w[b * n..(b + 1) * n],
                &want,
                1e-13,
                &format!("{n} batch {b}"),
            );
        }
    }
    // Compiled for any batch, and in f32.
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None, Some(5), Some(5)], DType::F64)])
        .build(|a: Tensor| a.eigh());
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(5), Some(5)], DType::F64),))
        .unwrap();
    let a: Vec<f64> = [symmetric(5, 1), symmetric(5, 2), symmetric(5, 3)].concat();
    let at = m(&a, &[3, 5, 5]);
    let (w, v) = cf.call((&at,)).unwrap();
    let (fit, orth) = residuals(&at, &w, &v);
    assert!(fit < 1e-13 && orth < 1e-13, "compiled: {fit:e} {orth:e}");
    close(
        &f64s(&w)[..5],
        &jacobi_reference(&a[..25], 5),
        1e-13,
        "compiled",
    );
    let w32 = at.cast(DType::F32).unwrap().eigvalsh().unwrap();
    assert_eq!(w32.dtype(), DType::F32);
    close(
        &f64s(&w32.cast(DType::F64).unwrap())[..5],
        &jacobi_reference(&a[..25], 5),
        1e-5,
        "f32",
    );
    // NaNs do not keep the sweeps going: the result is NaN.
    let nan = m(&[1., f64::NAN, f64::NAN, 1.], &[2, 2]);
    assert!(f64s(&nan.eigvalsh().unwrap()).iter().any(|x| x.is_nan()));
}

#[test]
fn eigh_gradients_match_finite_differences() {
    // Eigenvalues, and each eigenvector's projector (free of its sign).
    let spectrum = |a: &Tensor| -> Result<Tensor> {
        let (w, v) = a.eigh()?;
        let n = w.dims()[w.rank() - 1];
        let mut parts = vec![w.reshape(&[-1])?];
        for k in 0..n {
            let col = v.slice(&[0, 0, k], &[v.dims()[0], n, 1])?;
            parts.push(col.matmul_t(&col, false, true)?.reshape(&[-1])?);
        }
        Tensor::concat(&parts, 0)
    };
    for n in [2i64, 3, 4] {
        let x: Vec<f64> = [symmetric(n as usize, 7), values((n * n) as usize, 8)].concat();
        check_gradient(&spectrum, &x, &[2, n, n], 1e-6, &format!("eigh {n}"));
    }
}

#[test]
fn eigenvalue_gradients_stay_finite_at_repeated_eigenvalues() {
    // The sum of the eigenvalues is the trace, whose gradient is I, also
    // where every eigenvalue is the same.
    for a in [
        Tensor::eye(3, 3, DType::F64).unwrap(),
        m(&[2., 0., 0., 2.], &[2, 2]),
    ] {
        let tape = GradientTape::new();
        tape.watch(&a);
        let total = a.eigvalsh().unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&total, &[Source::from(&a)]).unwrap()[0]
            .clone()
            .unwrap();
        let n = a.dims()[0];
        close(
            &f64s(&g),
            &f64s(&Tensor::eye(n, n, DType::F64).unwrap()),
            1e-15,
            "trace",
        );
    }
}

#[test]
fn eigh_errors() {
    let e = m(&values(6, 1), &[2, 3]).eigh().unwrap_err();
    assert!(e.to_string().contains("square"), "{e}");
    let e = Tensor::eye(2, 2, DType::I32)
        .unwrap()
        .eigvalsh()
        .unwrap_err();
    assert!(
        e.to_string().contains("eigh") && e.to_string().contains("float"),
        "{e}"
    );
}

/// `u diag(s) vh` for one `[m, k] [k] [k, n]` triple.
fn reassembled(u: &Tensor, s: &Tensor, vh: &Tensor) -> Vec<f64> {
    f64s(
        &u.mul(&s.expand_dims(-2).unwrap())
            .unwrap()
            .matmul(vh)
            .unwrap(),
    )
}

/// The largest entry of `|xᵀx - I|` over `x`'s columns.
fn orthonormality(x: &Tensor) -> f64 {
    let k = x.dims()[x.rank() - 1];
    let gram = x.matmul_t(x, true, false).unwrap();
    let eye = Tensor::eye(k, k, DType::F64).unwrap();
    f64s(
        &gram
            .sub(&eye)
            .unwrap()
            .abs()
            .unwrap()
            .reduce_max(&[], false)
            .unwrap(),
    )[0]
}

#[test]
fn svd_matches_hand_worked_values_and_the_gram_matrix_spectrum() {
    // [[3, 0], [4, 5]]ᵀ [[3, 0], [4, 5]] = [[25, 20], [20, 25]]: 45 and 5.
    let a = m(&[3., 0., 4., 5.], &[2, 2]);
    let (u, s, vh) = a.svd(false).unwrap();
    close(&f64s(&s), &[45f64.sqrt(), 5f64.sqrt()], 1e-15, "s");
    close(&reassembled(&u, &s, &vh), &f64s(&a), 1e-14, "u s vh");
    for (rows, cols) in [(5usize, 3usize), (3, 5), (4, 4), (6, 1), (1, 6), (7, 2)] {
        let (ri, ci) = (rows as i64, cols as i64);
        let k = rows.min(cols);
        let x = values(rows * cols, (rows * 7 + cols) as u64);
        let a = m(&x, &[ri, ci]);
        for full in [false, true] {
            let (u, s, vh) = a.svd(full).unwrap();
            let (uk, vk) = if full { (ri, ci) } else { (k as i64, k as i64) };
            assert_eq!(
                (u.dims(), s.dims(), vh.dims()),
                (vec![ri, uk], vec![k as i64], vec![vk, ci])
            );
            let what = format!("{rows}x{cols} full={full}");
            assert!(orthonormality(&u) < 1e-14, "{what}: u");
            assert!(
                orthonormality(&vh.transpose(&[1, 0]).unwrap()) < 1e-14,
                "{what}: v"
            );
            let u = u.slice(&[0, 0], &[ri, k as i64]).unwrap();
            let vh = vh.slice(&[0, 0], &[k as i64, ci]).unwrap();
            close(&reassembled(&u, &s, &vh), &x, 1e-14, &what);
            // s² are the eigenvalues of the smaller Gram matrix.
            let gram = if rows >= cols {
                a.matmul_t(&a, true, false).unwrap()
            } else {
                a.matmul_t(&a, false, true).unwrap()
            };
            let mut want = jacobi_reference(&f64s(&gram), k);
            want.reverse();
            let got: Vec<f64> = f64s(&s).iter().map(|v| v * v).collect();
            close(&got, &want, 1e-13, &format!("{what}: s²"));
        }
    }
}

#[test]
fn svd_of_rank_deficient_zero_batched_and_compiled_matrices() {
    // Rank 1: [1, 2, 3]ᵀ [1, 2]; s = [√14 √5, 0], and u is still orthonormal.
    let a = m(&[1., 2., 2., 4., 3., 6.], &[3, 2]);
    for full in [false, true] {
        let (u, s, vh) = a.svd(full).unwrap();
        close(&f64s(&s), &[70f64.sqrt(), 0.0], 1e-14, "rank 1");
        assert!(orthonormality(&u) < 1e-14, "rank-1 u, full={full}");
        let u = u.slice(&[0, 0], &[3, 2]).unwrap();
        close(&reassembled(&u, &s, &vh), &f64s(&a), 1e-14, "rank 1");
    }
    let (u, s, _) = Tensor::zeros(&[3, 2], DType::F64).svd(true).unwrap();
    assert_eq!(f64s(&s), [0., 0.]);
    assert!(orthonormality(&u) < 1e-15);
    // Batched and compiled for any batch, against the eager result.
    let x = values(3 * 4 * 3, 5);
    let at = m(&x, &[3, 4, 3]);
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None, Some(4), Some(3)], DType::F64)])
        .build(|a: Tensor| a.svd(false));
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(4), Some(3)], DType::F64),))
        .unwrap();
    let (u, s, vh) = cf.call((&at,)).unwrap();
    close(
        &f64s(&s),
        &f64s(&at.singular_values().unwrap()),
        1e-14,
        "compiled s",
    );
    close(&reassembled(&u, &s, &vh), &x, 1e-14, "compiled u s vh");
    // f32, and a matrix with a tiny singular value beside a large one.
    let s32 = at.cast(DType::F32).unwrap().singular_values().unwrap();
    assert_eq!(s32.dtype(), DType::F32);
    close(
        &f64s(&s32.cast(DType::F64).unwrap()),
        &f64s(&at.singular_values().unwrap()),
        1e-5,
        "f32",
    );
    // NaNs and infinities do not keep the sweeps going: the result says so.
    for bad in [f64::NAN, f64::INFINITY] {
        let s = m(&[1., bad, 2., 3.], &[2, 2]).singular_values().unwrap();
        assert!(f64s(&s).iter().any(|x| !x.is_finite()), "{bad}: {s:?}");
        let q = f64s(&m(&[1., bad, 2., 3.], &[2, 2]).qr(false).unwrap().1);
        assert!(q.iter().any(|x| !x.is_finite()), "{bad}: qr {q:?}");
    }
    let graded = m(&[1e10, 0., 0., 1e-10], &[2, 2]);
    close(
        &f64s(&graded.singular_values().unwrap()),
        &[1e10, 1e-10],
        1e-15,
        "graded",
    );
}

#[test]
fn svd_gradients_match_finite_differences() {
    // Singular values, and each triplet's u_k v_kᵀ (free of signs).
    let triplets = |a: &Tensor| -> Result<Tensor> {
        let (u, s, vh) = a.svd(false)?;
        let k = s.dims()[s.rank() - 1];
        let (b, rows, cols) = (u.dims()[0], u.dims()[1], vh.dims()[2]);
        let mut parts = vec![s.reshape(&[-1])?];
        for j in 0..k {
            let uj = u.slice(&[0, 0, j], &[b, rows, 1])?;
            let vj = vh.slice(&[0, j, 0], &[b, 1, cols])?;
            parts.push(uj.matmul(&vj)?.reshape(&[-1])?);
        }
        Tensor::concat(&parts, 0)
    };
    for dims in [[2i64, 3, 2], [1, 2, 3], [1, 3, 3]] {
        let n: i64 = dims.iter().product();
        let x = values(n as usize, 21 + n as u64);
        check_gradient(&triplets, &x, &dims, 1e-6, &format!("svd {dims:?}"));
    }
    // The singular values alone, also at a rank-deficient matrix.
    let x = values(6, 4);
    check_gradient(&|a| a.singular_values(), &x, &[3, 2], 1e-6, "svdvals");
    let a = m(&[1., 2., 2., 4., 3., 6.], &[3, 2]);
    let tape = GradientTape::new();
    tape.watch(&a);
    let top = a.singular_values().unwrap().slice(&[0], &[1]).unwrap();
    let g = tape.gradient(&top, &[Source::from(&a)]).unwrap()[0]
        .clone()
        .unwrap();
    // d σ₁ = u₁ v₁ᵀ = a / σ₁ for a rank-1 a.
    let want: Vec<f64> = f64s(&a).iter().map(|v| v / 70f64.sqrt()).collect();
    close(&f64s(&g), &want, 1e-14, "rank-1 gradient");
}

#[test]
fn svd_errors() {
    let e = Tensor::eye(2, 2, DType::I64)
        .unwrap()
        .svd(false)
        .unwrap_err();
    assert!(
        e.to_string().contains("svd") && e.to_string().contains("float"),
        "{e}"
    );
    let a = m(&values(6, 2), &[3, 2]);
    let tape = GradientTape::new();
    tape.watch(&a);
    let (u, _, _) = a.svd(true).unwrap();
    let loss = u.reduce_sum(&[], false).unwrap();
    let e = tape.gradient(&loss, &[Source::from(&a)]).unwrap_err();
    assert!(e.to_string().contains("full_matrices"), "{e}");
}
