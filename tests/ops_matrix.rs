//! Matrix helpers (`ops::matrix`: `eye`, `band_part`, `tril`, `triu`,
//! `diag`, `diag_part`, `set_diag`, `trace`, `matrix_transpose`) against
//! hand-written matrices, eagerly and compiled, wide, tall and batched; their
//! gradients against central finite differences; clear errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use xlafn::prelude::*;

fn m(v: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims).unwrap()
}

fn f64s(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f64>().unwrap()
}

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
