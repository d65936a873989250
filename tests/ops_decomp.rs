//! cholesky and triangular_solve against loop references
//! written here, batched, eager and traced, with gradients against finite
//! differences in f64.

use xlafn::prelude::*;

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

/// `m m^T + n I` for an n x n `m`: symmetric positive definite.
fn spd(m: &[f64], n: usize) -> Vec<f64> {
    let mut a = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            a[i * n + j] = (0..n).map(|k| m[i * n + k] * m[j * n + k]).sum::<f64>();
        }
        a[i * n + i] += n as f64;
    }
    a
}

/// Cholesky–Banachiewicz by loops.
fn chol_ref(a: &[f64], n: usize) -> Vec<f64> {
    let mut l = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..=i {
            let s: f64 = (0..j).map(|k| l[i * n + k] * l[j * n + k]).sum();
            l[i * n + j] = if i == j {
                (a[i * n + i] - s).sqrt()
            } else {
                (a[i * n + j] - s) / l[j * n + j]
            };
        }
    }
    l
}

/// Forward substitution: lower `l` (n x n), `b` (n x k): l x = b.
fn solve_lower(l: &[f64], b: &[f64], n: usize, k: usize) -> Vec<f64> {
    let mut x = vec![0.0; n * k];
    for c in 0..k {
        for i in 0..n {
            let s: f64 = (0..i).map(|j| l[i * n + j] * x[j * k + c]).sum();
            x[i * k + c] = (b[i * k + c] - s) / l[i * n + i];
        }
    }
    x
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() < tol * (1.0 + w.abs()),
            "{what}: [{i}] {g} vs {w}"
        );
    }
}

#[test]
fn cholesky_matches_the_loop_reference_batched() {
    let n = 4;
    let a: Vec<f64> = [spd(&values(16, 1), n), spd(&values(16, 2), n)].concat();
    let at = Tensor::from_vec(a.clone(), &[2, 4, 4]).unwrap();
    let want: Vec<f64> = [chol_ref(&a[..16], n), chol_ref(&a[16..], n)].concat();
    close(
        &at.cholesky().unwrap().to_vec::<f64>().unwrap(),
        &want,
        1e-12,
        "eager",
    );
    let f = function(|a: Tensor| a.cholesky());
    close(
        &f.call((&at,)).unwrap().to_vec::<f64>().unwrap(),
        &want,
        1e-12,
        "traced",
    );
    assert!(
        Tensor::fill(&[3, 2], 1.0, DType::F64)
            .unwrap()
            .cholesky()
            .is_err()
    );
}

#[test]
fn triangular_solves_in_every_orientation() {
    let n = 4;
    let l = chol_ref(&spd(&values(16, 3), n), n);
    let lt = Tensor::from_vec(l.clone(), &[4, 4]).unwrap();
    let b = values(12, 4);
    // left, lower: L x = b.
    let bt = Tensor::from_vec(b.clone(), &[4, 3]).unwrap();
    let x = bt.triangular_solve(&lt, true, true, false, false).unwrap();
    close(
        &x.to_vec::<f64>().unwrap(),
        &solve_lower(&l, &b, n, 3),
        1e-12,
        "left lower",
    );
    // Each orientation: check the defining equation instead.
    let upper = lt.transpose(&[1, 0]).unwrap();
    for (left, lower, transpose) in [
        (true, true, true),
        (true, false, false),
        (false, true, false),
        (false, true, true),
    ] {
        let a = if lower { &lt } else { &upper };
        let rhs = if left {
            bt.clone()
        } else {
            bt.transpose(&[1, 0]).unwrap()
        };
        let x = rhs
            .triangular_solve(a, left, lower, transpose, false)
            .unwrap();
        let op = if transpose {
            a.transpose(&[1, 0]).unwrap()
        } else {
            a.clone()
        };
        let back = if left {
            op.matmul(&x).unwrap()
        } else {
            x.matmul(&op).unwrap()
        };
        close(
            &back.to_vec::<f64>().unwrap(),
            &rhs.to_vec::<f64>().unwrap(),
            1e-12,
            &format!("left={left} lower={lower} transpose={transpose}"),
        );
    }
}

fn numeric_gradient(f: &dyn Fn(&[f64]) -> f64, x: &[f64]) -> Vec<f64> {
    let h = 1e-6;
    (0..x.len())
        .map(|i| {
            let (mut up, mut down) = (x.to_vec(), x.to_vec());
            up[i] += h;
            down[i] -= h;
            (f(&up) - f(&down)) / (2.0 * h)
        })
        .collect()
}

#[test]
fn gradients_match_finite_differences() {
    let n = 3;
    let r = values(9, 5);
    // Cholesky through a symmetric parametrisation a = m m^T + n I.
    let m = values(9, 6);
    let loss = |m: &[f64]| -> f64 {
        chol_ref(&spd(m, n), n)
            .iter()
            .zip(&r)
            .map(|(a, b)| a * b)
            .sum()
    };
    let mt = Tensor::from_vec(m.clone(), &[3, 3]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&mt);
    let a = mt
        .matmul_t(&mt, false, true)
        .unwrap()
        .add(&Tensor::from_vec(spd(&[0.0; 9], n), &[3, 3]).unwrap())
        .unwrap();
    let l = a.cholesky().unwrap();
    let total = l
        .mul(&Tensor::from_vec(r.clone(), &[3, 3]).unwrap())
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape.gradient(&total, &[Source::from(&mt)]).unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    close(&g, &numeric_gradient(&loss, &m), 1e-6, "cholesky");

    // triangular_solve: gradient w.r.t. the lower triangle and b.
    let l0 = chol_ref(&spd(&values(9, 7), n), n);
    let b0 = values(6, 8);
    let r2 = values(6, 9);
    let loss_l = |l: &[f64]| -> f64 {
        let mut lower = l.to_vec();
        for i in 0..n {
            for j in i + 1..n {
                lower[i * n + j] = 0.0;
            }
        }
        solve_lower(&lower, &b0, n, 2)
            .iter()
            .zip(&r2)
            .map(|(a, b)| a * b)
            .sum()
    };
    let loss_b = |b: &[f64]| -> f64 {
        solve_lower(&l0, b, n, 2)
            .iter()
            .zip(&r2)
            .map(|(a, b)| a * b)
            .sum()
    };
    let (lt, bt) = (
        Tensor::from_vec(l0.clone(), &[3, 3]).unwrap(),
        Tensor::from_vec(b0.clone(), &[3, 2]).unwrap(),
    );
    let tape = GradientTape::new();
    tape.watch(&lt);
    tape.watch(&bt);
    let x = bt.triangular_solve(&lt, true, true, false, false).unwrap();
    let total = x
        .mul(&Tensor::from_vec(r2.clone(), &[3, 2]).unwrap())
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape
        .gradient(&total, &[Source::from(&lt), Source::from(&bt)])
        .unwrap();
    let gl = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
    let gb = g[1].as_ref().unwrap().to_vec::<f64>().unwrap();
    close(&gl, &numeric_gradient(&loss_l, &l0), 1e-6, "solve: matrix");
    close(&gb, &numeric_gradient(&loss_b, &b0), 1e-6, "solve: rhs");
}

#[test]
fn every_solve_orientation_has_the_right_gradient() {
    // Central differences of the (equation-checked) forward solve.
    let n = 3;
    let l0 = chol_ref(&spd(&values(9, 10), n), n);
    let b0 = values(6, 11);
    for (left, lower, transpose, unit) in [
        (true, true, true, false),
        (true, false, false, false),
        (false, true, false, false),
        (false, false, true, true),
    ] {
        let a0: Vec<f64> = if lower {
            l0.clone()
        } else {
            (0..9).map(|k| l0[(k % 3) * 3 + k / 3]).collect()
        };
        let dims_b: [i64; 2] = if left { [3, 2] } else { [2, 3] };
        let r = values(6, 12);
        let f = |a: &[f64], b: &[f64]| -> f64 {
            let at = Tensor::from_vec(a.to_vec(), &[3, 3]).unwrap();
            let bt = Tensor::from_vec(b.to_vec(), &dims_b).unwrap();
            let x = bt
                .triangular_solve(&at, left, lower, transpose, unit)
                .unwrap();
            let x = x.to_vec::<f64>().unwrap();
            x.iter().zip(&r).map(|(p, q)| p * q).sum()
        };
        let (at, bt) = (
            Tensor::from_vec(a0.clone(), &[3, 3]).unwrap(),
            Tensor::from_vec(b0.clone(), &dims_b).unwrap(),
        );
        let tape = GradientTape::new();
        tape.watch(&at);
        tape.watch(&bt);
        let x = bt
            .triangular_solve(&at, left, lower, transpose, unit)
            .unwrap();
        let total = x
            .mul(&Tensor::from_vec(r.clone(), &dims_b).unwrap())
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap();
        let g = tape
            .gradient(&total, &[Source::from(&at), Source::from(&bt)])
            .unwrap();
        let what = format!("left={left} lower={lower} transpose={transpose} unit={unit}");
        let ga = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
        let gb = g[1].as_ref().unwrap().to_vec::<f64>().unwrap();
        close(
            &gb,
            &numeric_gradient(&|b| f(&a0, b), &b0),
            1e-6,
            &format!("{what}: b"),
        );
        // Only the read triangle moves the result; elsewhere the gradient is 0.
        close(
            &ga,
            &numeric_gradient(&|a| f(a, &b0), &a0),
            1e-6,
            &format!("{what}: a"),
        );
    }
}
