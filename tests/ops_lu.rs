//! `solve`, `inv`, `det` and `slogdet` (the LU factorization of
//! `ops::lu`): values against systems, inverses and determinants worked
//! by hand (cofactors), eagerly and compiled, batched; singular matrices;
//! gradients against central finite differences; clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;
#[path = "common/matrices.rs"]
mod matrices;

use gradcheck::check_gradient;
use matrices::{close, f64s, m};
use xlafn::prelude::*;

/// Needs a row exchange at the first step (a zero in the corner);
/// det = 3 by cofactors along the first row.
const A: [f64; 9] = [0., 2., 1., 1., 1., 1., 2., 1., 0.];
/// Its inverse by cofactors: adj(A) / 3.
const A_INV: [f64; 9] = [-1., 1., 1., 2., -2., 1., -1., 4., -2.];
/// A well-conditioned matrix for the gradient checks.
const W: [f64; 9] = [2., 1., 0.5, 0.3, 1.5, -0.7, 0.2, -0.4, 1.8];

#[test]
fn systems_inverses_and_determinants_match_hand_worked_values() {
    let a = m(&A, &[3, 3]);
    // x = [1, 2, 3] gives b = A x = [7, 6, 4].
    let b = m(&[7., 6., 4.], &[3]);
    close(&f64s(&a.solve(&b).unwrap()), &[1., 2., 3.], 1e-14, "solve");
    // Two right-hand sides at once, checked by their residual.
    let b2 = m(&[7., 1., 6., 0., 4., 2.], &[3, 2]);
    let x2 = a.solve(&b2).unwrap();
    close(&f64s(&a.matmul(&x2).unwrap()), &f64s(&b2), 1e-14, "A x = B");
    let want_inv: Vec<f64> = A_INV.iter().map(|v| v / 3.0).collect();
    close(&f64s(&a.inv().unwrap()), &want_inv, 1e-14, "inv");
    assert!((a.det().unwrap().item::<f64>().unwrap() - 3.0).abs() < 1e-14);
    let (sign, logabs) = a.slogdet().unwrap();
    assert_eq!(sign.item::<f64>().unwrap(), 1.0);
    assert!((logabs.item::<f64>().unwrap() - 3f64.ln()).abs() < 1e-14);
    // A row exchange alone: det -1, log|det| 0.
    let swap = m(&[0., 1., 1., 0.], &[2, 2]);
    assert_eq!(swap.det().unwrap().item::<f64>().unwrap(), -1.0);
    let (s, l) = swap.slogdet().unwrap();
    assert_eq!(
        (s.item::<f64>().unwrap(), l.item::<f64>().unwrap()),
        (-1.0, 0.0)
    );
    // The same compiled, in one program.
    let f = function(|a: Tensor, b: Tensor| Ok((a.solve(&b)?, a.inv()?, a.det()?)));
    let (x, inv, det) = f.call((&a, &b)).unwrap();
    close(&f64s(&x), &[1., 2., 3.], 1e-14, "compiled solve");
    close(&f64s(&inv), &want_inv, 1e-14, "compiled inv");
    close(&[det.item::<f64>().unwrap()], &[3.0], 1e-14, "compiled det");
    // f32 too.
    let a32 = a.cast(DType::F32).unwrap();
    let d32 = a32.det().unwrap();
    assert_eq!(d32.dtype(), DType::F32);
    assert!((d32.item::<f32>().unwrap() - 3.0).abs() < 1e-5);
}

#[test]
fn batches_and_singular_matrices() {
    // [A, 2A]: det(2A) = 8 det(A) = 24.
    let two_a: Vec<f64> = A.iter().map(|v| 2.0 * v).collect();
    let batch = m(&[A.as_slice(), &two_a].concat(), &[2, 3, 3]);
    close(
        &f64s(&batch.det().unwrap()),
        &[3.0, 24.0],
        1e-13,
        "batched det",
    );
    let b = m(&[7., 6., 4., 7., 6., 4.], &[2, 3]);
    close(
        &f64s(&batch.solve(&b).unwrap()),
        &[1., 2., 3., 0.5, 1., 1.5],
        1e-14,
        "batched solve",
    );
    // Singular: a zero pivot; det exactly 0, slogdet (0, -inf).
    let singular = m(&[1., 2., 2., 4.], &[2, 2]);
    assert_eq!(singular.det().unwrap().item::<f64>().unwrap(), 0.0);
    let (s, l) = singular.slogdet().unwrap();
    assert_eq!(s.item::<f64>().unwrap(), 0.0);
    assert_eq!(l.item::<f64>().unwrap(), f64::NEG_INFINITY);
    let x = f64s(&singular.solve(&m(&[1., 1.], &[2])).unwrap());
    assert!(x.iter().any(|v| !v.is_finite()), "{x:?}");
    // A 1x1 matrix, and a zero-sized one (det 1, as NumPy).
    assert_eq!(
        m(&[-4.], &[1, 1]).det().unwrap().item::<f64>().unwrap(),
        -4.0
    );
    assert_eq!(m(&[], &[0, 0]).det().unwrap().item::<f64>().unwrap(), 1.0);
}

#[test]
fn gradients_match_finite_differences() {
    let b = m(&[0.5, -1.0, 2.0], &[3]);
    for (at, name) in [(&A, "pivoted"), (&W, "plain")] {
        let bc = b.clone();
        check_gradient(
            &move |a: &Tensor| a.solve(&bc),
            at.as_slice(),
            &[3, 3],
            1e-6,
            &format!("solve wrt A ({name})"),
        );
        let a = m(at.as_slice(), &[3, 3]);
        check_gradient(
            &move |b: &Tensor| a.solve(b),
            &[0.5, -1.0, 2.0],
            &[3],
            1e-6,
            &format!("solve wrt b ({name})"),
        );
        check_gradient(&|a: &Tensor| a.inv(), at.as_slice(), &[3, 3], 1e-6, "inv");
        check_gradient(&|a: &Tensor| a.det(), at.as_slice(), &[3, 3], 1e-6, "det");
        check_gradient(
            &|a: &Tensor| Ok(a.slogdet()?.1),
            at.as_slice(),
            &[3, 3],
            1e-6,
            "slogdet",
        );
    }
    // Second order: d/dA of the gradient of det is defined and compiled.
    let f = function(|a: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&a);
        let d = a.det()?;
        Ok(tape.gradient(&d, &[(&a).into()])?.remove(0).unwrap())
    });
    // d det / dA = det(A) A^-T = adj(A)^T.
    let want: Vec<f64> = [-1., 2., -1., 1., -2., 4., 1., 1., -2.].to_vec();
    close(
        &f64s(&f.call((m(&A, &[3, 3]),)).unwrap()),
        &want,
        1e-13,
        "adjugate",
    );
}

#[test]
fn wrong_operands_are_refused_clearly() {
    let rect = Tensor::zeros(&[2, 3], DType::F64);
    let e = rect.det().unwrap_err().to_string();
    assert!(e.contains("square") && e.contains("det"), "{e}");
    let ints = Tensor::zeros(&[2, 2], DType::I32);
    let e = ints.inv().unwrap_err().to_string();
    assert!(e.contains("float") && e.contains("i32"), "{e}");
    let a = m(&A, &[3, 3]);
    let e = a
        .solve(&Tensor::zeros(&[2], DType::F64))
        .unwrap_err()
        .to_string();
    assert!(e.contains("right-hand side"), "{e}");
    let e = a
        .solve(&Tensor::zeros(&[3], DType::F32))
        .unwrap_err()
        .to_string();
    assert!(e.contains("right-hand side"), "{e}");
    let e = Tensor::zeros(&[3], DType::F64)
        .det()
        .unwrap_err()
        .to_string();
    assert!(e.contains("square"), "{e}");
}

/// Eagerly, a factorization runs as one compiled program (`ops::one_program`),
/// not as one program per op of its loop.
#[test]
fn eager_solves_run_as_one_compiled_program() {
    // A size no other test uses, so the cache's entries for it are ours
    // (and the check's own matmul).
    let n = 7;
    let a: Vec<f64> = (0..n * n)
        .map(|e| {
            if e % (n + 1) == 0 {
                4.0
            } else {
                0.1 * e as f64
            }
        })
        .collect();
    let a = m(&a, &[n as i64, n as i64]);
    let b = m(&vec![1.0; n], &[n as i64, 1]);
    let x = a.solve(&b).unwrap();
    close(&f64s(&a.matmul(&x).unwrap()), &f64s(&b), 1e-13, "A x = b");
    let programs = xlafn::tensor::eager_programs();
    let seven =
        |p: &xlafn::tensor::EagerProgram| p.inputs.first().is_some_and(|s| s.dims == [7, 7]);
    assert!(
        programs
            .iter()
            .any(|p| p.op.starts_with("call") && seven(p)),
        "no one-program call for the 7 x 7 solve"
    );
    let per_op: Vec<&String> = programs
        .iter()
        .filter(|p| seven(p) && !p.op.starts_with("call") && !p.op.starts_with("matmul"))
        .map(|p| &p.op)
        .collect();
    assert!(
        per_op.is_empty(),
        "the loop's ops ran one by one: {per_op:?}"
    );
}
