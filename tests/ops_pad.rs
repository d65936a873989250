//! pad (low/high/interior, negative edges; tf.pad's CONSTANT, REFLECT and
//! SYMMETRIC modes), reverse, tile and broadcast_to against references
//! written here as loops over `ndarray` arrays and against TensorFlow's
//! documented examples; eager and traced agree; gradients against central
//! finite differences in f64; error cases.

use ndarray::{ArrayD, Axis, IxDyn};
#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::prelude::*;

type F = dyn Fn(&Tensor) -> Result<Tensor>;

fn arange(dims: &[usize]) -> ArrayD<f64> {
    let n: usize = dims.iter().product();
    ArrayD::from_shape_vec(IxDyn(dims), (0..n).map(|v| v as f64 + 1.0).collect()).unwrap()
}

fn tensor(a: &ArrayD<f64>) -> Tensor {
    Tensor::from_ndarray(a).unwrap()
}

fn read(t: &Tensor) -> ArrayD<f64> {
    t.to_ndarray::<f64>().unwrap()
}

fn assert_invalid<T: std::fmt::Debug>(r: xlafn::Result<T>, op: &str, needle: &str) {
    match r {
        Err(Error::InvalidArgument { op: got, message }) => {
            assert_eq!(got, op, "wrong op in error: {message}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        other => panic!("expected InvalidArgument from {op}, got {other:?}"),
    }
}

/// StableHLO pad by its definition: element `i` of each dimension lands
/// at `low + i * (interior + 1)`, if that is inside the result.
fn pad_reference(
    a: &ArrayD<f64>,
    low: &[i64],
    high: &[i64],
    interior: &[i64],
    v: f64,
) -> ArrayD<f64> {
    let out: Vec<usize> = (0..a.ndim())
        .map(|k| {
            let n = a.shape()[k] as i64;
            (low[k] + high[k] + n + (n - 1).max(0) * interior[k]) as usize
        })
        .collect();
    let mut r = ArrayD::from_elem(IxDyn(&out), v);
    for (idx, x) in a.indexed_iter() {
        let pos: Option<Vec<usize>> = (0..a.ndim())
            .map(|k| {
                let p = low[k] + idx[k] as i64 * (interior[k] + 1);
                (p >= 0 && p < out[k] as i64).then_some(p as usize)
            })
            .collect();
        if let Some(pos) = pos {
            r[IxDyn(&pos)] = *x;
        }
    }
    r
}

/// tf.pad REFLECT/SYMMETRIC by index mirroring, one loop over the result.
fn mirror_reference(a: &ArrayD<f64>, paddings: &[[i64; 2]], symmetric: bool) -> ArrayD<f64> {
    let out: Vec<usize> = (0..a.ndim())
        .map(|k| (a.shape()[k] as i64 + paddings[k][0] + paddings[k][1]) as usize)
        .collect();
    ArrayD::from_shape_fn(IxDyn(&out), |idx| {
        let src: Vec<usize> = (0..a.ndim())
            .map(|k| {
                let n = a.shape()[k] as i64;
                let j = idx[k] as i64 - paddings[k][0];
                let m = match (j, symmetric) {
                    (j, false) if j < 0 => -j,
                    (j, false) if j >= n => 2 * (n - 1) - j,
                    (j, true) if j < 0 => -j - 1,
                    (j, true) if j >= n => 2 * n - 1 - j,
                    (j, _) => j,
                };
                m as usize
            })
            .collect();
        a[IxDyn(&src)]
    })
}

/// The value eagerly and inside a traced function, which must agree.
fn eager_and_traced(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
    x: &Tensor,
) -> ArrayD<f64> {
    let eager = read(&f(x).unwrap());
    let traced = function(move |x: Tensor| -> Result<Tensor> { f(&x) });
    assert_eq!(read(&traced.call((x,)).unwrap()), eager, "eager vs traced");
    eager
}

fn check_gradient(f: &F, x0: &ArrayD<f64>) {
    let dims: Vec<i64> = x0.shape().iter().map(|&d| d as i64).collect();
    let flat: Vec<f64> = x0.iter().copied().collect();
    gradcheck::check_gradient(f, &flat, &dims, 1e-5, "gradient");
}

// -------------------------------------------------------------------- pad

#[test]
fn pad_general_matches_the_definition_with_negative_and_interior_padding() {
    let a = arange(&[3, 4]);
    let cases: [([i64; 2], [i64; 2], [i64; 2]); 5] = [
        ([1, 2], [0, 1], [0, 0]),
        ([0, 0], [0, 0], [1, 2]),
        ([-1, 2], [1, -2], [0, 0]),
        ([2, -3], [-1, 1], [1, 1]),
        ([-2, 0], [-3, -1], [2, 0]),
    ];
    for (low, high, interior) in cases {
        let want = pad_reference(&a, &low, &high, &interior, -7.0);
        let got = eager_and_traced(
            move |x| x.pad_general(&low, &high, &interior, -7.0),
            &tensor(&a),
        );
        assert_eq!(got, want, "low {low:?} high {high:?} interior {interior:?}");
    }
    // An empty dimension gets only its edges.
    let empty = ArrayD::<f64>::zeros(IxDyn(&[0, 2]));
    let got = tensor(&empty)
        .pad_general(&[1, 0], &[2, 0], &[3, 0], 5.0)
        .unwrap();
    assert_eq!(read(&got), ArrayD::from_elem(IxDyn(&[3, 2]), 5.0));
    // Integers, bools and the padding value in the operand's dtype.
    let i = Tensor::vector(&[1i32, 2]).unwrap();
    let got = i.pad_general(&[1], &[1], &[1], 9).unwrap();
    assert_eq!(got.to_vec::<i32>().unwrap(), vec![9, 1, 9, 2, 9]);
}

#[test]
fn tf_pad_modes_match_tensorflows_documented_examples() {
    // tf.pad's docstring: t = [[1, 2, 3], [4, 5, 6]], paddings [[1, 1], [2, 2]].
    let t = Tensor::from_vec(vec![1.0f64, 2., 3., 4., 5., 6.], &[2, 3]).unwrap();
    let p = [[1, 1], [2, 2]];
    let rows = |t: Tensor| {
        let v = t.to_vec::<f64>().unwrap();
        v.chunks(7).map(|r| r.to_vec()).collect::<Vec<_>>()
    };
    assert_eq!(
        rows(t.pad(&p, PadMode::Constant, 0.0).unwrap()),
        vec![
            vec![0., 0., 0., 0., 0., 0., 0.],
            vec![0., 0., 1., 2., 3., 0., 0.],
            vec![0., 0., 4., 5., 6., 0., 0.],
            vec![0., 0., 0., 0., 0., 0., 0.],
        ]
    );
    assert_eq!(
        rows(t.pad(&p, PadMode::Reflect, 0.0).unwrap()),
        vec![
            vec![6., 5., 4., 5., 6., 5., 4.],
            vec![3., 2., 1., 2., 3., 2., 1.],
            vec![6., 5., 4., 5., 6., 5., 4.],
            vec![3., 2., 1., 2., 3., 2., 1.],
        ]
    );
    assert_eq!(
        rows(t.pad(&p, PadMode::Symmetric, 0.0).unwrap()),
        vec![
            vec![2., 1., 1., 2., 3., 3., 2.],
            vec![2., 1., 1., 2., 3., 3., 2.],
            vec![5., 4., 4., 5., 6., 6., 5.],
            vec![5., 4., 4., 5., 6., 6., 5.],
        ]
    );
    // A constant value.
    let v = Tensor::vector(&[1.0f64])
        .unwrap()
        .pad(&[[2, 1]], PadMode::Constant, 3.5)
        .unwrap();
    assert_eq!(v.to_vec::<f64>().unwrap(), vec![3.5, 3.5, 1.0, 3.5]);
}

#[test]
fn mirror_modes_match_index_mirroring_in_three_dimensions() {
    let a = arange(&[3, 4, 2]);
    let p = [[2, 1], [0, 3], [1, 1]];
    for (mode, symmetric) in [(PadMode::Reflect, false), (PadMode::Symmetric, true)] {
        let want = mirror_reference(&a, &p, symmetric);
        let got = eager_and_traced(move |x| x.pad(&p, mode, 0.0), &tensor(&a));
        assert_eq!(got, want, "{mode:?}");
    }
    // The largest paddings each mode allows.
    let s = mirror_reference(&a, &[[3, 3], [4, 4], [2, 2]], true);
    let got = tensor(&a)
        .pad(&[[3, 3], [4, 4], [2, 2]], PadMode::Symmetric, 0.0)
        .unwrap();
    assert_eq!(read(&got), s);
    let r = mirror_reference(&a, &[[2, 2], [3, 3], [1, 1]], false);
    let got = tensor(&a)
        .pad(&[[2, 2], [3, 3], [1, 1]], PadMode::Reflect, 0.0)
        .unwrap();
    assert_eq!(read(&got), r);
}

#[test]
fn pad_gradients_match_finite_differences() {
    let a = arange(&[3, 4]).mapv(|v| (v * 0.7).sin());
    let rules: Vec<Box<F>> = vec![
        Box::new(|x| x.pad_general(&[1, -1], &[-2, 2], &[0, 0], 0.5)),
        Box::new(|x| x.pad_general(&[2, -3], &[-1, 1], &[1, 2], 0.0)),
        Box::new(|x| x.pad_general(&[0, 0], &[0, 0], &[2, 1], 1.0)),
        Box::new(|x| x.pad(&[[1, 2], [2, 0]], PadMode::Constant, 2.0)),
        Box::new(|x| x.pad(&[[2, 1], [3, 2]], PadMode::Reflect, 0.0)),
        Box::new(|x| x.pad(&[[3, 1], [4, 2]], PadMode::Symmetric, 0.0)),
    ];
    for f in &rules {
        check_gradient(f.as_ref(), &a);
    }
}

#[test]
fn pad_errors_name_the_op() {
    let x = Tensor::from_vec(vec![1.0f32; 6], &[2, 3]).unwrap();
    assert_invalid(
        x.pad(&[[1, 1]], PadMode::Constant, 0.0),
        "pad",
        "one [before, after] pair per dimension",
    );
    assert_invalid(
        x.pad(&[[1, 1], [0, 0], [0, 0]], PadMode::Reflect, 0.0),
        "pad",
        "got 3 pairs",
    );
    assert_invalid(
        x.pad(&[[-1, 0], [0, 0]], PadMode::Constant, 0.0),
        "pad",
        "must be >= 0",
    );
    assert_invalid(
        x.pad(&[[2, 0], [0, 0]], PadMode::Reflect, 0.0),
        "pad",
        "at most 1",
    );
    assert_invalid(
        x.pad(&[[0, 0], [0, 4]], PadMode::Symmetric, 0.0),
        "pad",
        "at most 3",
    );
    assert_invalid(
        x.pad_general(&[0], &[0], &[0], 0.0),
        "pad",
        "one entry per dimension",
    );
    assert_invalid(
        x.pad_general(&[0, 0], &[0, 0], &[0, -1], 0.0),
        "pad",
        "interior padding must be >= 0",
    );
    assert_invalid(
        x.pad_general(&[-2, 0], &[-1, 0], &[0, 0], 0.0),
        "pad",
        "negative size",
    );
    let i = Tensor::vector(&[1u8, 2]).unwrap();
    assert_invalid(i.pad_general(&[1], &[0], &[0], -1), "pad", "padding value");
}

// ---------------------------------------------------------------- reverse

#[test]
fn reverse_matches_ndarray_inverted_axes() {
    let a = arange(&[2, 3, 4]);
    for axes in [vec![], vec![0], vec![-1], vec![0, 2], vec![2, 1, 0]] {
        let mut want = a.clone();
        for &ax in &axes {
            let ax = if ax < 0 { ax + 3 } else { ax } as usize;
            want.invert_axis(Axis(ax));
        }
        let axes2 = axes.clone();
        let got = eager_and_traced(move |x| x.reverse(&axes2), &tensor(&a));
        assert_eq!(got, want, "axes {axes:?}");
    }
    check_gradient(&|x| x.reverse(&[0, -1]), &a.mapv(|v| v.cos()));
    let x = tensor(&a);
    assert_invalid(x.reverse(&[1, -2]), "reverse", "more than once");
    assert_invalid(x.reverse(&[3]), "reverse", "out of range");
}

// ------------------------------------------------------------------- tile

#[test]
fn tile_matches_a_loop_and_has_a_gradient() {
    let a = arange(&[2, 3]);
    for multiples in [[1, 1], [2, 1], [1, 3], [3, 2], [0, 2]] {
        let want = ArrayD::from_shape_fn(
            IxDyn(&[2 * multiples[0] as usize, 3 * multiples[1] as usize]),
            |i| a[[i[0] % 2, i[1] % 3]],
        );
        let got = eager_and_traced(move |x| x.tile(&multiples), &tensor(&a));
        assert_eq!(got, want, "multiples {multiples:?}");
    }
    let s = Tensor::scalar(2.0f64).tile(&[]).unwrap();
    assert_eq!(s.item::<f64>().unwrap(), 2.0);
    check_gradient(&|x| x.tile(&[2, 3]), &a.mapv(|v| v * 0.1));
    let x = tensor(&a);
    assert_invalid(x.tile(&[2, -1]), "tile", "multiples must be >= 0");
    assert_invalid(x.tile(&[2]), "tile", "one entry per dimension");
}

// ----------------------------------------------------------- broadcast_to

#[test]
fn broadcast_to_follows_numpy_rules() {
    let a = arange(&[3, 1]);
    let want = a.broadcast(IxDyn(&[2, 3, 4])).unwrap().to_owned();
    let got = eager_and_traced(|x| x.broadcast_to(&[2, 3, 4]), &tensor(&a));
    assert_eq!(got, want);
    let s = Tensor::scalar(1.5f64).broadcast_to(&[2, 2]).unwrap();
    assert_eq!(s.to_vec::<f64>().unwrap(), vec![1.5; 4]);
    check_gradient(&|x| x.broadcast_to(&[2, 3, 4]), &a);
    let x = tensor(&a);
    assert_invalid(x.broadcast_to(&[2, 2]), "broadcast_to", "not 1 or 2");
    assert_invalid(x.broadcast_to(&[3]), "broadcast_to", "lower rank");
    assert_invalid(x.broadcast_to(&[3, -1]), "broadcast_to", "negative");
}
