//! reduce_logsumexp, reduce_variance/std, moments, l2_normalize, norm,
//! clip_by_value and stop_gradient against loops over `ndarray` lanes in
//! f64; eager and traced agree; gradients against central finite
//! differences; dtype and argument errors.

use ndarray::{ArrayD, Axis, IxDyn};
#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::prelude::*;

type F = dyn Fn(&Tensor) -> Result<Tensor>;

fn sample(dims: &[usize]) -> ArrayD<f64> {
    let n: usize = dims.iter().product();
    ArrayD::from_shape_vec(
        IxDyn(dims),
        (0..n)
            .map(|i| ((i as f64) * 1.37).sin() * 2.0 + 0.1)
            .collect(),
    )
    .unwrap()
}

fn tensor(a: &ArrayD<f64>) -> Tensor {
    Tensor::from_ndarray(a).unwrap()
}

fn read(t: &Tensor) -> ArrayD<f64> {
    t.to_ndarray::<f64>().unwrap()
}

fn assert_close(got: &ArrayD<f64>, want: &ArrayD<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shapes");
    for (g, w) in got.iter().zip(want) {
        let ok = (g - w).abs() <= 1e-12 * (1.0 + w.abs()) || (g == w);
        assert!(ok, "{what}: got {got} want {want}");
    }
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

/// `f` over the lanes of `axis` (or over all elements, as a scalar).
fn lanes(a: &ArrayD<f64>, axis: Option<usize>, f: impl Fn(&[f64]) -> f64) -> ArrayD<f64> {
    match axis {
        Some(k) => a.map_axis(Axis(k), |l| f(&l.to_vec())),
        None => ArrayD::from_elem(IxDyn(&[]), f(&a.iter().copied().collect::<Vec<_>>())),
    }
}

fn logsumexp(v: &[f64]) -> f64 {
    let m = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let m = if m.is_finite() { m } else { 0.0 };
    v.iter().map(|x| (x - m).exp()).sum::<f64>().ln() + m
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len() as f64
}

fn variance(v: &[f64]) -> f64 {
    let m = mean(v);
    v.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / v.len() as f64
}

fn eager_and_traced(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
    x: &Tensor,
) -> ArrayD<f64> {
    let eager = read(&f(x).unwrap());
    let traced = function(move |x: Tensor| -> Result<Tensor> { f(&x) });
    assert_close(
        &read(&traced.call((x,)).unwrap()),
        &eager,
        "eager vs traced",
    );
    eager
}

fn check_gradient(f: &F, x0: &ArrayD<f64>) {
    let dims: Vec<i64> = x0.shape().iter().map(|&d| d as i64).collect();
    let flat: Vec<f64> = x0.iter().copied().collect();
    gradcheck::check_gradient(f, &flat, &dims, 1e-5, "gradient");
}

#[test]
fn logsumexp_matches_a_max_shifted_loop_and_stays_finite() {
    let a = sample(&[3, 4]);
    for axis in [None, Some(0), Some(1)] {
        let axes: Vec<i64> = axis.map(|k| vec![k as i64]).unwrap_or_default();
        let got = eager_and_traced(move |x| x.reduce_logsumexp(&axes, false), &tensor(&a));
        assert_close(&got, &lanes(&a, axis, logsumexp), "logsumexp");
    }
    let kept = tensor(&a).reduce_logsumexp(&[-1], true).unwrap();
    assert_eq!(kept.dims(), vec![3, 1]);
    // Large and infinite inputs.
    let big = Tensor::vector(&[1000.0f64, 1000.0]).unwrap();
    let got = big
        .reduce_logsumexp(&[], false)
        .unwrap()
        .item::<f64>()
        .unwrap();
    assert!((got - (1000.0 + 2f64.ln())).abs() < 1e-9, "{got}");
    let ninf = Tensor::vector(&[f64::NEG_INFINITY; 2]).unwrap();
    let got = ninf
        .reduce_logsumexp(&[], false)
        .unwrap()
        .item::<f64>()
        .unwrap();
    assert_eq!(got, f64::NEG_INFINITY);
    check_gradient(&|x| x.reduce_logsumexp(&[1], false), &a);
    check_gradient(&|x| x.reduce_logsumexp(&[], true), &a);
}

#[test]
fn variance_std_and_moments_match_loops() {
    let a = sample(&[3, 4]);
    for axis in [None, Some(0), Some(1)] {
        let axes: Vec<i64> = axis.map(|k| vec![k as i64]).unwrap_or_default();
        let ax = axes.clone();
        let var = eager_and_traced(move |x| x.reduce_variance(&ax, false), &tensor(&a));
        assert_close(&var, &lanes(&a, axis, variance), "variance");
        let ax = axes.clone();
        let std = eager_and_traced(move |x| x.reduce_std(&ax, false), &tensor(&a));
        assert_close(&std, &lanes(&a, axis, |v| variance(v).sqrt()), "std");
        let (m, v) = tensor(&a).moments(&axes, false).unwrap();
        assert_close(&read(&m), &lanes(&a, axis, mean), "moments mean");
        assert_close(&read(&v), &lanes(&a, axis, variance), "moments variance");
        let ax = axes.clone();
        let traced = eager_and_traced(
            move |x| {
                let (m, v) = x.moments(&ax, false)?;
                Tensor::stack(&[m, v], 0)
            },
            &tensor(&a),
        );
        assert_close(
            &traced.index_axis(Axis(0), 1).to_owned(),
            &lanes(&a, axis, variance),
            "traced",
        );
    }
    let (m, v) = tensor(&a).moments(&[0], true).unwrap();
    assert_eq!((m.dims(), v.dims()), (vec![1, 4], vec![1, 4]));
    check_gradient(&|x| x.reduce_variance(&[0], false), &a);
    check_gradient(&|x| x.reduce_std(&[1], true), &a);
    check_gradient(
        &|x| {
            let (m, v) = x.moments(&[1], false)?;
            m.add(&v.mul_scalar(2.0)?)
        },
        &a,
    );
    let i = Tensor::vector(&[1i32, 2]).unwrap();
    assert_invalid(
        i.reduce_variance(&[], false),
        "reduce_variance",
        "floating-point",
    );
    assert_invalid(i.moments(&[], false), "moments", "floating-point");
}

#[test]
fn l2_normalize_and_norms_match_loops() {
    let a = sample(&[3, 4]);
    let want = {
        let mut w = a.clone();
        for mut row in w.lanes_mut(Axis(1)) {
            let n = row.iter().map(|v| v * v).sum::<f64>().max(1e-12).sqrt();
            row.mapv_inplace(|v| v / n);
        }
        w
    };
    let got = eager_and_traced(|x| x.l2_normalize(&[1], 1e-12), &tensor(&a));
    assert_close(&got, &want, "l2_normalize");
    // The epsilon keeps a zero vector at zero.
    let z = Tensor::vector(&[0.0f64, 0.0])
        .unwrap()
        .l2_normalize(&[], 1e-12)
        .unwrap();
    assert_eq!(z.to_vec::<f64>().unwrap(), vec![0.0, 0.0]);
    check_gradient(&|x| x.l2_normalize(&[1], 1e-12), &a);
    check_gradient(&|x| x.l2_normalize(&[], 1e-12), &a);

    let euclid = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let one = |v: &[f64]| v.iter().map(|x| x.abs()).sum::<f64>();
    let inf = |v: &[f64]| v.iter().map(|x| x.abs()).fold(0.0, f64::max);
    for axis in [None, Some(0), Some(1)] {
        let axes: Vec<i64> = axis.map(|k| vec![k as i64]).unwrap_or_default();
        for (ord, f) in [
            (NormOrd::Euclidean, &euclid as &dyn Fn(&[f64]) -> f64),
            (NormOrd::One, &one),
            (NormOrd::Inf, &inf),
        ] {
            let ax = axes.clone();
            let got = eager_and_traced(move |x| x.norm(ord, &ax, false), &tensor(&a));
            assert_close(&got, &lanes(&a, axis, f), &format!("{ord:?} norm"));
            let ax = axes.clone();
            check_gradient(&move |x| x.norm(ord, &ax, false), &a);
        }
    }
    // Frobenius over two axes; keepdims.
    let fro = tensor(&a).norm(NormOrd::Euclidean, &[0, 1], true).unwrap();
    assert_eq!(fro.dims(), vec![1, 1]);
    assert!(
        (fro.to_vec::<f64>().unwrap()[0] - euclid(&a.iter().copied().collect::<Vec<_>>())).abs()
            < 1e-12
    );
    // Matrix norms over two axes: the largest column sum (1) and row sum
    // (infinity) of |x|, here by hand: columns 4 and 6, rows 3 and 7.
    let m = Tensor::from_vec(vec![1.0f64, -2.0, 3.0, 4.0], &[2, 2]).unwrap();
    for (ord, axes, keepdims, want, dims) in [
        (NormOrd::One, [0i64, 1], false, 6.0, vec![]),
        (NormOrd::Inf, [0, 1], false, 7.0, vec![]),
        (NormOrd::One, [1, 0], false, 7.0, vec![]),
        (NormOrd::Inf, [-2, -1], true, 7.0, vec![1, 1]),
    ] {
        let got = m.norm(ord, &axes, keepdims).unwrap();
        assert_eq!(got.dims(), dims, "{ord:?} over {axes:?}");
        assert_eq!(
            got.to_vec::<f64>().unwrap(),
            vec![want],
            "{ord:?} over {axes:?}"
        );
    }
    // Batched over a leading axis, and its gradient.
    let b = sample(&[2, 3, 4]);
    let per = tensor(&b).norm(NormOrd::One, &[1, 2], false).unwrap();
    let want: Vec<f64> = (0..2)
        .map(|k| {
            (0..4)
                .map(|j| (0..3).map(|i| b[[k, i, j]].abs()).sum::<f64>())
                .fold(0.0, f64::max)
        })
        .collect();
    let got = per.to_vec::<f64>().unwrap();
    assert!(
        got.iter()
            .zip(&want)
            .all(|(g, w)| (g - w).abs() <= 1e-12 * (1.0 + w)),
        "batched 1-norm: {got:?} vs {want:?}"
    );
    for ord in [NormOrd::One, NormOrd::Inf] {
        check_gradient(&move |x| x.norm(ord, &[0, 1], false), &a);
    }
    assert_invalid(
        tensor(&sample(&[2, 2, 2])).norm(NormOrd::One, &[0, 1, 2], false),
        "norm",
        "two (a matrix)",
    );
    let i = Tensor::vector(&[1i64, 2]).unwrap();
    assert_invalid(
        i.norm(NormOrd::Euclidean, &[], false),
        "norm",
        "floating-point",
    );
    assert_invalid(i.l2_normalize(&[], 1e-12), "l2_normalize", "floating-point");
    assert_invalid(
        i.reduce_logsumexp(&[], false),
        "reduce_logsumexp",
        "floating-point",
    );
}

#[test]
fn spectral_and_nuclear_norms_come_from_the_singular_values() {
    // [[3, 0], [4, 5]] has singular values √45 and √5 (its Gram matrix
    // [[25, 20], [20, 25]] has eigenvalues 45 and 5).
    let a = Tensor::from_vec(vec![3.0f64, 0., 4., 5.], &[2, 2]).unwrap();
    let value = |t: Tensor| t.item::<f64>().unwrap();
    let (big, small) = (45f64.sqrt(), 5f64.sqrt());
    for axes in [[0i64, 1], [1, 0], [-2, -1]] {
        assert!((value(a.norm(NormOrd::Two, &axes, false).unwrap()) - big).abs() < 1e-14);
        let nuc = value(a.norm(NormOrd::Nuclear, &axes, false).unwrap());
        assert!((nuc - big - small).abs() < 1e-14, "{nuc}");
    }
    // The matrices of a [2, 3, 2] tensor over axes [0, 2], one per index
    // of axis 1, kept as [1, 3, 1]; each against its own spectral norm.
    let b = sample(&[2, 3, 2]);
    let per = tensor(&b).norm(NormOrd::Two, &[0, 2], true).unwrap();
    assert_eq!(per.dims(), [1, 3, 1]);
    let got = per.to_vec::<f64>().unwrap();
    for (k, g) in got.iter().enumerate() {
        let mut m = Vec::new();
        for i in 0..2 {
            for j in 0..2 {
                m.push(b[[i, k, j]]);
            }
        }
        let want = Tensor::from_vec(m, &[2, 2])
            .unwrap()
            .singular_values()
            .unwrap();
        assert!((g - want.to_vec::<f64>().unwrap()[0]).abs() < 1e-14);
    }
    // Over one axis, 2 is the euclidean norm; the nuclear norm needs two.
    let v = tensor(&sample(&[4]));
    assert_eq!(
        v.norm(NormOrd::Two, &[0], false)
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        v.norm(NormOrd::Euclidean, &[0], false)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    );
    assert_invalid(v.norm(NormOrd::Nuclear, &[0], false), "norm", "two axes");
    assert_invalid(a.norm(NormOrd::Two, &[1, 1], false), "norm", "distinct");
    // Negative orders: [[3, 0], [4, 5]] has column sums 7, 5 and row sums
    // 3, 9; its smallest singular value is √5.
    let at = |ord, axes: &[i64]| value(a.norm(ord, axes, false).unwrap());
    assert_eq!(at(NormOrd::NegOne, &[0, 1]), 5.0);
    assert_eq!(at(NormOrd::NegInf, &[0, 1]), 3.0);
    assert!((at(NormOrd::NegTwo, &[0, 1]) - small).abs() < 1e-14);
    // Vectors: [3, 0, 4] has p-norms (3^p + 4^p)^(1/p), min 0, and the
    // negative orders are 0 with a zero element.
    let v3 = Tensor::vector(&[3.0f64, 0.0, -4.0]).unwrap();
    let vat = |ord| value(v3.norm(ord, &[], false).unwrap());
    assert!((vat(NormOrd::P(3.0)) - 91f64.cbrt()).abs() < 1e-14);
    assert!((vat(NormOrd::P(0.5)) - (3f64.sqrt() + 2.0).powi(2)).abs() < 1e-13);
    assert_eq!((vat(NormOrd::NegInf), vat(NormOrd::NegOne)), (0.0, 0.0));
    let v2 = Tensor::vector(&[3.0f64, -4.0]).unwrap();
    let neg_two = value(v2.norm(NormOrd::NegTwo, &[0], false).unwrap());
    assert!((neg_two - 12.0 / 5.0).abs() < 1e-14, "{neg_two}");
    assert_invalid(
        a.norm(NormOrd::P(3.0), &[0, 1], false),
        "norm",
        "vector norm",
    );
    assert_invalid(v3.norm(NormOrd::P(0.0), &[], false), "norm", "other than 0");
    let m = sample(&[3, 2]);
    check_gradient(&|x| x.norm(NormOrd::P(3.0), &[1], false), &m);
    for ord in [
        NormOrd::Two,
        NormOrd::Nuclear,
        NormOrd::NegTwo,
        NormOrd::NegOne,
    ] {
        check_gradient(&move |x| x.norm(ord, &[0, 1], false), &m);
    }
}

#[test]
fn clip_by_value_matches_a_loop_and_passes_gradients_inside_the_bounds() {
    let a = sample(&[3, 4]);
    let lo = Tensor::vector(&[-1.0f64, -0.5, 0.0, -2.0]).unwrap();
    let hi = Tensor::scalar(1.0f64);
    let los = [-1.0, -0.5, 0.0, -2.0];
    let want = ArrayD::from_shape_fn(IxDyn(&[3, 4]), |i| a[&i].max(los[i[1]]).min(1.0));
    let (l2, h2) = (lo.clone(), hi.clone());
    let got = eager_and_traced(move |x| x.clip_by_value(&l2, &h2), &tensor(&a));
    assert_close(&got, &want, "clip_by_value");
    let got = tensor(&a).clip_by_value_scalar(-0.5, 0.5).unwrap();
    assert_close(&read(&got), &a.mapv(|v| v.clamp(-0.5, 0.5)), "clip scalar");
    // Gradient: 1 inside the bounds, 0 outside (no element sits on one).
    let (l2, h2) = (lo.clone(), hi.clone());
    check_gradient(&move |x| x.clip_by_value(&l2, &h2), &a);
    let x = Tensor::vector(&[1.0f64, 2.0]).unwrap();
    let wide = Tensor::from_vec(vec![0.0f64; 4], &[2, 2]).unwrap();
    assert_invalid(
        x.clip_by_value(&wide, &hi),
        "clip_by_value",
        "would broadcast",
    );
}

#[test]
fn stop_gradient_is_the_identity_without_a_gradient() {
    let x = Tensor::vector(&[1.5f64, -2.0]).unwrap();
    let got = eager_and_traced(|x| x.stop_gradient(), &x);
    assert_eq!(got.iter().copied().collect::<Vec<_>>(), vec![1.5, -2.0]);
    // d/dx (x * stop(x)) = stop(x).
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x
        .mul(&x.stop_gradient().unwrap())
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![1.5, -2.0]);
    // Only through stop_gradient: no gradient at all.
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x.stop_gradient().unwrap().reduce_sum(&[], false).unwrap();
    assert!(tape.gradient(&y, &[(&x).into()]).unwrap()[0].is_none());
    // Inside a traced function with the tape there.
    let f = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x
            .square()?
            .add(&x.stop_gradient()?.square()?)?
            .reduce_sum(&[], false)?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
    });
    assert_eq!(
        f.call((&x,)).unwrap().to_vec::<f64>().unwrap(),
        vec![3.0, -4.0]
    );
}

#[test]
fn reduce_any_and_all_exist_for_bools() {
    let b = Tensor::from_vec(vec![true, false, false, false], &[2, 2]).unwrap();
    assert_eq!(
        b.reduce_any(&[1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![true, false]
    );
    assert!(!b.reduce_all(&[], false).unwrap().item::<bool>().unwrap());
}
