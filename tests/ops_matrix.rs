//! Matrix helpers (`ops::matrix`: `eye`, `band_part`, `tril`, `triu`,
//! `diag`, `diag_part`, `set_diag`, `trace`, `matrix_transpose`,
//! `adjoint`), `tensorinv`, `tensorsolve`,
//! products (`ops::products`: `tensordot`, `outer`, `matvec`, `kron`,
//! `cross`, `vecdot`, `multi_dot`), `lu`, `cond`, `matrix_rank`,
//! `tridiagonal_solve`, `cholesky_solve` and `logdet`, and matrix functions
//! (`ops::matrix_functions`: `matrix_power`, `expm`) against hand-written
//! matrices and closed forms (rotations, shears, `V e^w Vᵀ`), eagerly and
//! compiled, wide, tall and batched; their gradients against central
//! finite differences; clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;
#[path = "common/matrices.rs"]
mod matrices;

use gradcheck::check_gradient;
use matrices::{f64s, m, values};
use xlafn::prelude::*;

/// 1..=12 as a 3 x 4 matrix.
fn wide() -> Tensor {
    m(&(1..=12).map(f64::from).collect::<Vec<_>>(), &[3, 4])
}

#[test]
fn identities_bands_and_triangles_match_hand_written_matrices() {
    assert_eq!(
        f64s(&Tensor::eye(2, 3, DType::F64).unwrap()),
        [1., 0., 0., 0., 1., 0.]
    );
    assert_eq!(
        Tensor::eye(3, 2, DType::I32)
            .unwrap()
            .to_vec::<i32>()
            .unwrap(),
        [1, 0, 0, 1, 0, 0]
    );
    let a = wide();
    #[rustfmt::skip]
    let cases: [(&str, Tensor, [f64; 12]); 6] = [
        ("band_part(1, 0)", a.band_part(1, 0).unwrap(),
         [1., 0., 0., 0., 5., 6., 0., 0., 0., 10., 11., 0.]),
        ("band_part(-1, 0)", a.band_part(-1, 0).unwrap(),
         [1., 0., 0., 0., 5., 6., 0., 0., 9., 10., 11., 0.]),
        ("band_part(0, -1)", a.band_part(0, -1).unwrap(),
         [1., 2., 3., 4., 0., 6., 7., 8., 0., 0., 11., 12.]),
        ("band_part(0, 1)", a.band_part(0, 1).unwrap(),
         [1., 2., 0., 0., 0., 6., 7., 0., 0., 0., 11., 12.]),
        ("tril(1)", a.tril(1).unwrap(),
         [1., 2., 0., 0., 5., 6., 7., 0., 9., 10., 11., 12.]),
        ("triu(-1)", a.triu(-1).unwrap(),
         [1., 2., 3., 4., 5., 6., 7., 8., 0., 10., 11., 12.]),
    ];
    for (what, got, want) in cases {
        assert_eq!(f64s(&got), want, "{what}");
    }
    // A NaN outside the band stays out of it.
    let with_nan = m(&[1., f64::NAN, 3., 4.], &[2, 2]);
    assert_eq!(f64s(&with_nan.tril(0).unwrap()), [1., 0., 3., 4.]);
}

#[test]
fn diagonals_and_traces_of_wide_tall_and_batched_matrices() {
    let a = wide();
    assert_eq!(f64s(&a.diag_part().unwrap()), [1., 6., 11.]);
    let tall = a.transpose(&[1, 0]).unwrap();
    assert_eq!(f64s(&tall.diag_part().unwrap()), [1., 6., 11.]);
    assert_eq!(a.trace().unwrap().item::<f64>().unwrap(), 18.0);
    // Two 2 x 2 matrices.
    let b = m(&[1., 2., 3., 4., 5., 6., 7., 8.], &[2, 2, 2]);
    assert_eq!(f64s(&b.diag_part().unwrap()), [1., 4., 5., 8.]);
    assert_eq!(f64s(&b.trace().unwrap()), [5., 13.]);
    // diag builds; set_diag replaces, wide and tall.
    let d = m(&[1., 2., 3., 4.], &[2, 2]);
    assert_eq!(f64s(&d.diag().unwrap()), [1., 0., 0., 2., 3., 0., 0., 4.]);
    let z = m(&[-1., -2., -3.], &[3]);
    #[rustfmt::skip]
    assert_eq!(
        f64s(&a.set_diag(&z).unwrap()),
        [-1., 2., 3., 4., 5., -2., 7., 8., 9., 10., -3., 12.]
    );
    #[rustfmt::skip]
    assert_eq!(
        f64s(&tall.set_diag(&z).unwrap()),
        [-1., 5., 9., 2., -2., 10., 3., 7., -3., 4., 8., 12.]
    );
    // matrix_transpose swaps the last two axes of each matrix.
    let bt = b.matrix_transpose().unwrap();
    assert_eq!(f64s(&bt), [1., 3., 2., 4., 5., 7., 6., 8.]);
    assert_eq!(f64s(&tall), f64s(&a.matrix_transpose().unwrap()));
    // The same compiled, in one program.
    let f = function(|a: Tensor, z: Tensor| {
        Ok((a.diag_part()?, a.set_diag(&z)?, a.tril(0)?, a.trace()?))
    });
    let (dp, sd, lower, tr) = f.call((&a, &z)).unwrap();
    assert_eq!(f64s(&dp), [1., 6., 11.]);
    assert_eq!(f64s(&sd), f64s(&a.set_diag(&z).unwrap()));
    assert_eq!(f64s(&lower), f64s(&a.band_part(-1, 0).unwrap()));
    assert_eq!(tr.item::<f64>().unwrap(), 18.0);
}

type MatrixFn = dyn Fn(&Tensor) -> Result<Tensor>;

#[test]
fn matrix_helper_gradients_match_finite_differences() {
    let x: Vec<f64> = (0..12).map(|i| 0.3 * i as f64 - 1.1).collect();
    let helpers: [(&str, &MatrixFn, &[i64]); 6] = [
        ("band_part", &|a| a.band_part(1, 2), &[3, 4]),
        ("triu", &|a| a.triu(1), &[4, 3]),
        ("diag_part", &|a| a.diag_part(), &[2, 2, 3]),
        ("trace", &|a| a.trace(), &[3, 4]),
        ("diag", &|v| v.diag(), &[3, 4]),
        (
            "set_diag",
            &|a| a.set_diag(&a.diag_part()?.square()?),
            &[4, 3],
        ),
    ];
    for (what, f, dims) in helpers {
        check_gradient(f, &x, dims, 1e-6, what);
    }
    // trace's gradient is the identity, exactly.
    let a = wide();
    let tape = GradientTape::new();
    tape.watch(&a);
    let t = a.trace().unwrap();
    let g = tape.gradient(&t, &[Source::from(&a)]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(f64s(&g), f64s(&Tensor::eye(3, 4, DType::F64).unwrap()));
}

#[test]
fn matrix_helpers_refuse_vectors_and_mismatched_diagonals() {
    let v = m(&[1., 2.], &[2]);
    for (what, r) in [
        ("band_part", v.band_part(0, 0)),
        ("tril", v.tril(0)),
        ("diag_part", v.diag_part()),
        ("trace", v.trace()),
        ("matrix_transpose", v.matrix_transpose()),
    ] {
        let e = r.unwrap_err().to_string();
        assert!(e.contains("rank >= 2") && e.contains(what), "{what}: {e}");
    }
    let e = Tensor::scalar(1.0f64).diag().unwrap_err().to_string();
    assert!(e.contains("rank >= 1"), "{e}");
    let e = wide().set_diag(&v).unwrap_err().to_string();
    assert!(e.contains("set_diag") && e.contains("f64(3,)"), "{e}");
    let e = wide()
        .set_diag(&m(&[1., 2., 3.], &[3]).cast(DType::F32).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("f64"), "{e}");
    let e = Tensor::eye(-1, 2, DType::F32).unwrap_err().to_string();
    assert!(e.contains("non-negative"), "{e}");
}

/// A function traced for any batch (`None` leading dimension) uses the
/// helpers, as an export for any batch does.
#[test]
fn matrix_helpers_trace_for_any_batch() {
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None, Some(3), Some(4)], DType::F64)])
        .build(|a: Tensor| {
            let d = a.diag_part()?;
            Ok((a.set_diag(&d.neg()?)?.tril(0)?, d.diag()?, a.trace()?))
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(3), Some(4)], DType::F64),))
        .unwrap();
    let one = wide().expand_dims(0).unwrap();
    let a = Tensor::concat(&[one.clone(), one], 0).unwrap();
    let (sd, dm, tr) = cf.call((&a,)).unwrap();
    #[rustfmt::skip]
    let want = [-1., 0., 0., 0., 5., -6., 0., 0., 9., 10., -11., 0.];
    assert_eq!(f64s(&sd), [want, want].concat());
    assert_eq!(dm.dims(), [2, 3, 3]);
    assert_eq!(f64s(&tr), [18., 18.]);
}

#[test]
fn products_match_hand_worked_values() {
    // tensordot over one axis is a matrix product; over two, a full sum.
    let a = m(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let b = m(&[1., 0., 2., 1., 0., 3.], &[3, 2]);
    assert_eq!(
        f64s(&a.tensordot(&b, &[1], &[0]).unwrap()),
        f64s(&a.matmul(&b).unwrap())
    );
    // [[1, 2, 3], [4, 5, 6]] . [[1, 0, 2], [1, 0, 3]] = 1 + 6 + 4 + 18.
    assert_eq!(
        f64s(&a.tensordot_n(&b.reshape(&[2, 3]).unwrap(), 2).unwrap()),
        [29.]
    );
    // a's axis 0 with b's axis 1: [3, 3] = aᵀ bᵀ.
    let t = a.tensordot(&b, &[0], &[1]).unwrap();
    assert_eq!(t.dims(), [3, 3]);
    let want = a
        .matrix_transpose()
        .unwrap()
        .matmul(&b.matrix_transpose().unwrap())
        .unwrap();
    assert_eq!(f64s(&t), f64s(&want));
    // outer, matvec, kron, cross by hand.
    let v = m(&[1., 2.], &[2]);
    assert_eq!(
        f64s(&v.outer(&m(&[3., 4., 5.], &[3])).unwrap()),
        [3., 4., 5., 6., 8., 10.]
    );
    assert_eq!(
        f64s(
            &b.matrix_transpose()
                .unwrap()
                .matvec(&m(&[1., 1., 1.], &[3]))
                .unwrap()
        ),
        [3., 4.]
    );
    let k = m(&[1., 2., 3., 4.], &[2, 2])
        .kron(&m(&[0., 1., 1., 0.], &[2, 2]))
        .unwrap();
    #[rustfmt::skip]
    assert_eq!(f64s(&k), [
        0., 1., 0., 2.,
        1., 0., 2., 0.,
        0., 3., 0., 4.,
        3., 0., 4., 0.,
    ]);
    let x = m(&[1., 0., 0., 0., 1., 0.], &[2, 3]);
    let y = m(&[0., 1., 0.], &[3]);
    // e1 x e2 = e3, e2 x e2 = 0 (broadcast over the leading axis).
    assert_eq!(f64s(&x.cross(&y).unwrap()), [0., 0., 1., 0., 0., 0.]);
    let e = v.cross(&v).unwrap_err().to_string();
    assert!(e.contains("3 on the last axis"), "{e}");
    let e = a.tensordot(&b, &[1], &[0, 1]).unwrap_err().to_string();
    assert!(e.contains("as many axes"), "{e}");
    // Gradients through the products.
    let x: Vec<f64> = (0..6).map(|i| 0.4 * i as f64 - 1.0).collect();
    check_gradient(
        &|t| t.tensordot(&b, &[1], &[0]),
        &x,
        &[2, 3],
        1e-6,
        "tensordot",
    );
    check_gradient(
        &|t| t.cross(&m(&[0.5, -1., 2.], &[3])),
        &x,
        &[2, 3],
        1e-6,
        "cross",
    );
    check_gradient(
        &|t| t.kron(&m(&[1., 2.], &[1, 2])),
        &x,
        &[2, 3],
        1e-6,
        "kron",
    );
}

#[test]
fn cholesky_solves_logdets_powers_and_exponentials() {
    // a = [[4, 2], [2, 3]] = L Lᵀ with det 8.
    let a = m(&[4., 2., 2., 3.], &[2, 2]);
    let l = a.cholesky().unwrap();
    let x = l.cholesky_solve(&m(&[2., 1.], &[2, 1])).unwrap();
    // a [0.5, 0]ᵀ = [2, 1]ᵀ.
    let got = f64s(&x);
    assert!(
        (got[0] - 0.5).abs() < 1e-15 && got[1].abs() < 1e-15,
        "{got:?}"
    );
    assert!((a.logdet().unwrap().item::<f64>().unwrap() - 8f64.ln()).abs() < 1e-15);
    // Powers: [[1, 1], [0, 1]]^k = [[1, k], [0, 1]], for negative k too.
    let shear = m(&[1., 1., 0., 1.], &[2, 2]);
    for k in [-3i64, 0, 1, 5] {
        assert_eq!(
            f64s(&shear.matrix_power(k).unwrap()),
            [1., k as f64, 0., 1.],
            "{k}"
        );
    }
    // exp of a diagonal, a rotation generator, a nilpotent matrix.
    let d = m(&[1., 0., 0., -2.], &[2, 2]).expm().unwrap();
    let want = [1f64.exp(), 0., 0., (-2f64).exp()];
    for (g, w) in f64s(&d).iter().zip(want) {
        assert!((g - w).abs() < 1e-15 * (1.0 + w), "{g} {w}");
    }
    let t = 2.5f64;
    let rot = m(&[0., t, -t, 0.], &[2, 2]).expm().unwrap();
    let want = [t.cos(), t.sin(), -t.sin(), t.cos()];
    for (g, w) in f64s(&rot).iter().zip(want) {
        assert!((g - w).abs() < 1e-14, "rotation {g} {w}");
    }
    let nilpotent = f64s(&m(&[0., 1., 0., 0.], &[2, 2]).expm().unwrap());
    for (g, w) in nilpotent.iter().zip([1., 1., 0., 1.]) {
        assert!((g - w).abs() < 1e-15, "nilpotent {nilpotent:?}");
    }
    // A large norm (several squarings), batched and compiled, against the
    // eigendecomposition of a symmetric matrix: V e^w Vᵀ.
    let s = m(&[6., 2., 1., 2., -3., 0.5, 1., 0.5, 4.], &[3, 3]);
    let batch = Tensor::stack(&[s.clone(), s.mul(&Tensor::scalar(0.01)).unwrap()], 0).unwrap();
    let (w, v) = batch.eigh().unwrap();
    let want = v
        .mul(&w.exp().unwrap().expand_dims(-2).unwrap())
        .unwrap()
        .matmul_t(&v, false, true)
        .unwrap();
    let f = function(|a: Tensor| a.expm());
    for got in [batch.expm().unwrap(), f.call((&batch,)).unwrap()] {
        for (g, w) in f64s(&got).iter().zip(f64s(&want)) {
            assert!((g - w).abs() < 1e-12 * (1.0 + w.abs()), "{g} vs {w}");
        }
    }
    // Gradients.
    let x = [0.3, -0.2, 0.5, 0.1];
    check_gradient(&|t| t.expm(), &x, &[2, 2], 1e-6, "expm");
    let big: Vec<f64> = x.iter().map(|v| v * 20.0).collect();
    check_gradient(&|t| t.expm(), &big, &[2, 2], 1e-5, "expm, squared");
    check_gradient(&|t| t.matrix_power(3), &x, &[2, 2], 1e-6, "matrix_power");
    // logdet's gradient is a⁻¹ (symmetric; the factorization reads only
    // the lower triangle, so differences go through a symmetrized input).
    let spd = [4., 2., 2., 3.];
    let symmetric_logdet = |t: &Tensor| -> Result<Tensor> {
        t.add(&t.matrix_transpose()?)?
            .mul(&Tensor::scalar(0.5))?
            .logdet()
    };
    check_gradient(&symmetric_logdet, &spd, &[2, 2], 1e-6, "logdet");
    let tape = GradientTape::new();
    tape.watch(&a);
    let ld = a.logdet().unwrap();
    let g = tape.gradient(&ld, &[Source::from(&a)]).unwrap()[0]
        .clone()
        .unwrap();
    for (g, w) in f64s(&g).iter().zip([3. / 8., -2. / 8., -2. / 8., 4. / 8.]) {
        assert!((g - w).abs() < 1e-15, "logdet gradient {g} vs {w}");
    }
    let e = m(&values(6, 1), &[2, 3]).expm().unwrap_err().to_string();
    assert!(e.contains("square"), "{e}");
}

#[test]
fn lu_cond_rank_multi_dot_and_vecdot() {
    // Needs a row exchange first (a zero in the corner).
    let a = m(&[0., 2., 1., 1., 1., 1., 2., 1., 0.], &[3, 3]);
    let (lu, perm) = a.lu().unwrap();
    assert_eq!(perm.dtype(), DType::I32);
    let p = perm.to_vec::<i32>().unwrap();
    let packed = f64s(&lu);
    // Rebuild P a and L U by hand.
    let mut want = 0.0f64;
    for i in 0..3 {
        for j in 0..3 {
            let pa = f64s(&a)[p[i] as usize * 3 + j];
            let lu_ij: f64 = (0..3)
                .map(|k| {
                    let l = if k == i {
                        1.0
                    } else if k < i {
                        packed[i * 3 + k]
                    } else {
                        0.0
                    };
                    let u = if k <= j { packed[k * 3 + j] } else { 0.0 };
                    l * u
                })
                .sum();
            want = want.max((pa - lu_ij).abs());
        }
    }
    assert!(want < 1e-15, "P a - L U: {want}");
    assert_eq!(p[0], 2, "the largest first-column entry pivots first");
    check_gradient(&|t| Ok(t.lu()?.0), &f64s(&a), &[3, 3], 1e-6, "lu");
    // Generic values: no two candidates for a pivot tie, so the finite
    // differences keep the pivots.
    let batch = values(32, 17);
    check_gradient(&|t| Ok(t.lu()?.0), &batch, &[2, 4, 4], 1e-6, "batched lu");
    // Condition numbers of [[3, 0], [4, 5]]: singular values √45, √5;
    // 1-norms 7 and ‖a⁻¹‖₁ = ‖[[5, 0], [-4, 3]] / 15‖₁ = 0.6.
    let c = m(&[3., 0., 4., 5.], &[2, 2]);
    let value = |t: Tensor| t.item::<f64>().unwrap();
    assert!((value(c.cond(NormOrd::Two).unwrap()) - 3.0).abs() < 1e-14);
    assert!((value(c.cond(NormOrd::NegTwo).unwrap()) - 1.0 / 3.0).abs() < 1e-15);
    assert!((value(c.cond(NormOrd::One).unwrap()) - 4.2).abs() < 1e-14);
    let singular = m(&[1., 2., 2., 4.], &[2, 2]);
    assert!(value(singular.cond(NormOrd::Two).unwrap()) > 1e15);
    // Ranks.
    let rank1 = m(&[1., 2., 2., 4., 3., 6.], &[3, 2]);
    assert_eq!(rank1.matrix_rank().unwrap().item::<i32>().unwrap(), 1);
    assert_eq!(
        Tensor::eye(4, 4, DType::F32)
            .unwrap()
            .matrix_rank()
            .unwrap()
            .item::<i32>()
            .unwrap(),
        4
    );
    assert_eq!(
        Tensor::zeros(&[2, 3], DType::F64)
            .matrix_rank()
            .unwrap()
            .item::<i32>()
            .unwrap(),
        0
    );
    // multi_dot against the plain left-to-right product, with vectors.
    let x = m(
        &(0..12).map(|i| i as f64 * 0.5).collect::<Vec<_>>(),
        &[3, 4],
    );
    let y = m(&(0..8).map(|i| 1.0 - i as f64).collect::<Vec<_>>(), &[4, 2]);
    let z = m(&[1., -1., 2., 0.5, 0., 3.], &[2, 3]);
    let plain = x.matmul(&y).unwrap().matmul(&z).unwrap();
    let got = xlafn::multi_dot(&[&x, &y, &z]).unwrap();
    for (g, w) in f64s(&got).iter().zip(f64s(&plain)) {
        assert!((g - w).abs() < 1e-12 * (1.0 + w.abs()));
    }
    let row = m(&[1., 0., -1.], &[3]);
    let col = m(&[2., 1., 0.], &[3]);
    let v = xlafn::multi_dot(&[&row, &x, &y, &z, &col]).unwrap();
    let want = plain
        .matrix_transpose()
        .unwrap()
        .matvec(&row)
        .unwrap()
        .vecdot(&col, -1)
        .unwrap();
    assert_eq!(v.dims(), Vec::<i64>::new());
    assert!((v.item::<f64>().unwrap() - want.item::<f64>().unwrap()).abs() < 1e-10);
    let e = xlafn::multi_dot(&[&x, &x]).unwrap_err().to_string();
    assert!(e.contains("does not follow"), "{e}");
    // vecdot conjugates its first operand.
    let u = Tensor::from_vec(vec![Complex64::new(1., 2.), Complex64::new(0., 1.)], &[2]).unwrap();
    let w = Tensor::from_vec(vec![Complex64::new(3., 0.), Complex64::new(1., 1.)], &[2]).unwrap();
    // (1 - 2i) 3 + (-i)(1 + i) = 3 - 6i + 1 - i = 4 - 7i.
    assert_eq!(
        u.vecdot(&w, -1).unwrap().item::<Complex64>().unwrap(),
        Complex64::new(4., -7.)
    );
}

#[test]
fn tridiagonal_solves_match_the_dense_solve() {
    // Two 5 x 5 systems, diagonally dominant, two right-hand sides each.
    let m_rows = 5usize;
    let dl: Vec<f64> = (0..10)
        .map(|i| {
            if i % 5 == 0 {
                0.0
            } else {
                0.3 * i as f64 - 1.0
            }
        })
        .collect();
    let d: Vec<f64> = (0..10).map(|i| 4.0 + 0.1 * i as f64).collect();
    let du: Vec<f64> = (0..10)
        .map(|i| {
            if i % 5 == 4 {
                0.0
            } else {
                1.0 - 0.2 * i as f64
            }
        })
        .collect();
    let b: Vec<f64> = (0..20).map(|i| (i as f64 * 0.7).cos()).collect();
    let (dlt, dt, dut) = (m(&dl, &[2, 5]), m(&d, &[2, 5]), m(&du, &[2, 5]));
    let bt = m(&b, &[2, 5, 2]);
    // The dense matrices, by hand from the diagonals.
    let mut dense = vec![0.0; 50];
    for s in 0..2 {
        for i in 0..m_rows {
            dense[s * 25 + i * 5 + i] = d[s * 5 + i];
            if i > 0 {
                dense[s * 25 + i * 5 + i - 1] = dl[s * 5 + i];
            }
            if i + 1 < m_rows {
                dense[s * 25 + i * 5 + i + 1] = du[s * 5 + i];
            }
        }
    }
    let want = f64s(&m(&dense, &[2, 5, 5]).solve(&bt).unwrap());
    let got = f64s(&xlafn::tridiagonal_solve(&dlt, &dt, &dut, &bt).unwrap());
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-14, "{got:?} vs {want:?}");
    }
    let f = function(|dl: Tensor, d: Tensor, du: Tensor, b: Tensor| {
        xlafn::tridiagonal_solve(&dl, &d, &du, &b)
    });
    let compiled = f64s(&f.call((&dlt, &dt, &dut, &bt)).unwrap());
    for (g, w) in compiled.iter().zip(&want) {
        assert!((g - w).abs() < 1e-14, "compiled");
    }
    // Gradients in the diagonal and the right-hand side.
    let one_d = |x: &Tensor| xlafn::tridiagonal_solve(&dlt, x, &dut, &bt);
    check_gradient(&one_d, &d, &[2, 5], 1e-6, "tridiagonal d");
    let one_b = |x: &Tensor| xlafn::tridiagonal_solve(&dlt, &dt, &dut, x);
    check_gradient(&one_b, &b, &[2, 5, 2], 1e-6, "tridiagonal b");
    let e = xlafn::tridiagonal_solve(&dlt, &dt, &dut, &m(&b[..10], &[2, 5]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("tridiagonal_solve") && e.contains("[..., m, n]"),
        "{e}"
    );
}

#[test]
fn adjoints_tensor_inverses_and_tensor_solves() {
    let z = Tensor::from_vec(
        vec![
            Complex64::new(1., 2.),
            Complex64::new(3., -1.),
            Complex64::new(0., 1.),
            Complex64::new(2., 0.),
        ],
        &[2, 2],
    )
    .unwrap();
    let want = [
        Complex64::new(1., -2.),
        Complex64::new(0., -1.),
        Complex64::new(3., 1.),
        Complex64::new(2., 0.),
    ];
    assert_eq!(z.adjoint().unwrap().to_vec::<Complex64>().unwrap(), want);
    assert_eq!(
        f64s(&wide().adjoint().unwrap()),
        f64s(&wide().matrix_transpose().unwrap())
    );
    // tensorinv: a [2, 3, 6] times its inverse [6, 2, 3] over the 6 is the
    // identity on [2, 3] x [2, 3].
    let a = m(&values(36, 3), &[2, 3, 6]);
    let inverse = a.tensorinv(2).unwrap();
    assert_eq!(inverse.dims(), [6, 2, 3]);
    let product = f64s(&a.tensordot(&inverse, &[2], &[0]).unwrap());
    for (e, v) in product.iter().enumerate() {
        let want = if e / 6 == e % 6 { 1.0 } else { 0.0 };
        assert!((v - want).abs() < 1e-12, "element {e}: {v}");
    }
    // tensorsolve: a [2, 3, 3, 2], b [2, 3], x [3, 2] with a . x = b.
    let a4 = m(&values(36, 4), &[2, 3, 3, 2]);
    let b = m(&values(6, 5), &[2, 3]);
    let x = a4.tensorsolve(&b).unwrap();
    assert_eq!(x.dims(), [3, 2]);
    let back = f64s(&a4.tensordot(&x, &[2, 3], &[0, 1]).unwrap());
    for (g, w) in back.iter().zip(f64s(&b)) {
        assert!((g - w).abs() < 1e-12, "{g} vs {w}");
    }
    let e = a.tensorinv(1).unwrap_err().to_string();
    assert!(e.contains("tensorinv"), "{e}");
    let e = a4.tensorsolve(&m(&[1., 2.], &[2])).unwrap_err().to_string();
    assert!(e.contains("tensorsolve"), "{e}");
}
