//! Reductions, arg reductions and softmax against independent references:
//! `ndarray`'s `map_axis`/`sum_axis`/`fold_axis`, and hand-computed values
//! for TensorFlow's corner cases (integer means, empty axes, ties, NaN).

use ndarray::{ArrayD, ArrayView1, Axis, IxDyn};
use proptest::prelude::*;
use xlafn::ir::{Shape, TensorType};
use xlafn::ops::OpDef;
use xlafn::ops::reduce::{ArgKind, ArgReduce, Reduce, ReduceKind, Softmax};
use xlafn::prelude::*;

fn t32(v: &[f32], dims: &[i64]) -> Tensor {
    Tensor::from_slice(v, dims).unwrap()
}

fn close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "lengths differ: {got:?} vs {want:?}");
    for (x, y) in got.iter().zip(want) {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "{x} != {y} (got {got:?}, want {want:?})");
    }
}

/// The `InvalidArgument` error's op and message, or a panic.
fn invalid(r: xlafn::Result<Tensor>) -> (String, String) {
    match r {
        Err(Error::InvalidArgument { op, message }) => (op, message),
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(t) => panic!("expected an error, got a tensor of shape {}", t.shape()),
    }
}

/// 0, 1, 2, ... reshaped to `dims`, with a few repeats to exercise ties.
fn sample(dims: &[usize]) -> ArrayD<f32> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
    ArrayD::from_shape_vec(IxDyn(dims), v).unwrap()
}

/// Reference reduction with `ndarray`: reduces `axes` (sorted, distinct)
/// from the last to the first so lower axis numbers stay valid.
fn reference(
    x: &ArrayD<f32>,
    axes: &[usize],
    keepdims: bool,
    f: impl Fn(ArrayView1<f32>) -> f32,
) -> ArrayD<f32> {
    let mut r = x.clone();
    for &a in axes.iter().rev() {
        r = r.map_axis(Axis(a), &f);
        if keepdims {
            r = r.insert_axis(Axis(a));
        }
    }
    r
}

type Reduction = fn(&Tensor, &[i64], bool) -> xlafn::Result<Tensor>;
type Lane = fn(ArrayView1<f32>) -> f32;

fn float_table() -> Vec<(&'static str, Reduction, Lane)> {
    vec![
        ("sum", Tensor::reduce_sum, |l| l.sum()),
        ("mean", Tensor::reduce_mean, |l| l.sum() / l.len() as f32),
        ("max", Tensor::reduce_max, |l| {
            l.fold(f32::NEG_INFINITY, |a, &b| a.max(b))
        }),
        ("min", Tensor::reduce_min, |l| {
            l.fold(f32::INFINITY, |a, &b| a.min(b))
        }),
        ("prod", Tensor::reduce_prod, |l| l.product()),
    ]
}

fn check_against_reference(dims: &[usize], axes: &[i64], keepdims: bool) {
    let x = sample(dims);
    let t = Tensor::from_ndarray(&x).unwrap();
    let rank = dims.len() as i64;
    let mut norm: Vec<usize> = match axes.is_empty() {
        true => (0..dims.len()).collect(),
        false => axes.iter().map(|&a| ((a + rank) % rank) as usize).collect(),
    };
    norm.sort_unstable();
    for (name, op, lane) in float_table() {
        let got = op(&t, axes, keepdims).unwrap().to_ndarray::<f32>().unwrap();
        let want = reference(&x, &norm, keepdims, lane);
        let ctx = format!("{name} dims {dims:?} axes {axes:?} keepdims {keepdims}");
        assert_eq!(got.shape(), want.shape(), "{ctx}");
        close(
            got.as_slice().unwrap(),
            &want.iter().copied().collect::<Vec<_>>(),
            1e-5,
        );
    }
}

#[test]
fn float_reductions_match_ndarray() {
    check_against_reference(&[2, 3, 4], &[1], false);
    check_against_reference(&[2, 3, 4], &[0, 2], true);
    check_against_reference(&[2, 3, 4], &[-1], false);
    check_against_reference(&[2, 3, 4], &[], false);
    check_against_reference(&[2, 3, 4], &[], true);
    check_against_reference(&[], &[], false);
}

#[test]
fn sum_matches_sum_axis_and_fold_axis() {
    let x = sample(&[3, 4]);
    let t = Tensor::from_ndarray(&x).unwrap();
    let got = t
        .reduce_sum(&[0], false)
        .unwrap()
        .to_ndarray::<f32>()
        .unwrap();
    assert_eq!(got, x.sum_axis(Axis(0)));
    let got = t
        .reduce_max(&[-1], true)
        .unwrap()
        .to_ndarray::<f32>()
        .unwrap();
    let want = x.fold_axis(Axis(1), f32::MIN, |a, &b| a.max(b));
    assert_eq!(got, want.insert_axis(Axis(1)));
}

#[test]
fn all_axes_gives_a_scalar() {
    let t = t32(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let s = t.reduce_sum(&[], false).unwrap();
    assert_eq!(s.dims(), Vec::<i64>::new());
    assert_eq!(s.item::<f32>().unwrap(), 21.0);
    let k = t.reduce_sum(&[], true).unwrap();
    assert_eq!(k.dims(), vec![1, 1]);
    assert_eq!(
        t.reduce_mean(&[0, 1], false)
            .unwrap()
            .item::<f32>()
            .unwrap(),
        3.5
    );
}

#[test]
fn integer_mean_truncates_and_does_not_wrap() {
    let t = Tensor::from_slice(&[1i32, 2, -1, -2, 7, 8], &[3, 2]).unwrap();
    // (1+2)/2 = 1, (-1-2)/2 = -1 (toward zero), (7+8)/2 = 7.
    let m = t.reduce_mean(&[1], false).unwrap();
    assert_eq!(m.dtype(), DType::I32);
    assert_eq!(m.to_vec::<i32>().unwrap(), vec![1, -1, 7]);
    let small = Tensor::from_slice(&[100i8, 100, 101], &[3]).unwrap();
    assert_eq!(
        small.reduce_mean(&[], false).unwrap().item::<i8>().unwrap(),
        100
    );
    let u = Tensor::from_slice(&[250u8, 251], &[2]).unwrap();
    assert_eq!(
        u.reduce_mean(&[0], false).unwrap().item::<u8>().unwrap(),
        250
    );
}

#[test]
fn integer_max_min_prod_sum() {
    let t = Tensor::from_slice(&[3i64, -4, 5, 2, 0, -1], &[2, 3]).unwrap();
    assert_eq!(
        t.reduce_max(&[1], false).unwrap().to_vec::<i64>().unwrap(),
        vec![5, 2]
    );
    assert_eq!(
        t.reduce_min(&[0], false).unwrap().to_vec::<i64>().unwrap(),
        vec![2, -4, -1]
    );
    assert_eq!(
        t.reduce_prod(&[1], false).unwrap().to_vec::<i64>().unwrap(),
        vec![-60, 0]
    );
    assert_eq!(t.reduce_sum(&[], false).unwrap().item::<i64>().unwrap(), 5);
}

#[test]
fn any_and_all() {
    let b = Tensor::from_slice(&[true, false, false, false, true, true], &[2, 3]).unwrap();
    assert_eq!(
        b.reduce_any(&[1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true]
    );
    assert_eq!(
        b.reduce_all(&[1], false).unwrap().to_vec::<bool>().unwrap(),
        vec![false, false]
    );
    assert_eq!(
        b.reduce_any(&[0], true).unwrap().to_vec::<bool>().unwrap(),
        vec![true, true, true]
    );
    assert_eq!(
        b.reduce_all(&[-2], false)
            .unwrap()
            .to_vec::<bool>()
            .unwrap(),
        vec![false, false, false]
    );
}

#[test]
fn empty_axes_give_identities() {
    let f = t32(&[], &[2, 0]);
    let row = |r: xlafn::Result<Tensor>| r.unwrap().to_vec::<f32>().unwrap();
    assert_eq!(row(f.reduce_sum(&[1], false)), vec![0.0, 0.0]);
    assert_eq!(row(f.reduce_prod(&[1], false)), vec![1.0, 1.0]);
    assert_eq!(row(f.reduce_max(&[1], false)), vec![f32::NEG_INFINITY; 2]);
    assert_eq!(row(f.reduce_min(&[1], false)), vec![f32::INFINITY; 2]);
    assert!(row(f.reduce_mean(&[1], false)).iter().all(|v| v.is_nan()));
    let i = Tensor::from_slice::<i32>(&[], &[0]).unwrap();
    let one = |r: xlafn::Result<Tensor>| r.unwrap().item::<i32>().unwrap();
    assert_eq!(one(i.reduce_max(&[], false)), i32::MIN);
    assert_eq!(one(i.reduce_min(&[], false)), i32::MAX);
    assert_eq!(one(i.reduce_mean(&[], false)), 0);
    let u = Tensor::from_slice::<u8>(&[], &[0]).unwrap();
    assert_eq!(
        u.reduce_min(&[0], false).unwrap().item::<u8>().unwrap(),
        u8::MAX
    );
    let b = Tensor::from_slice::<bool>(&[], &[0]).unwrap();
    assert!(!b.reduce_any(&[], false).unwrap().item::<bool>().unwrap());
    assert!(b.reduce_all(&[], false).unwrap().item::<bool>().unwrap());
}

#[test]
fn max_and_min_propagate_nan() {
    let t = t32(&[1.0, f32::NAN, 3.0, 2.0, 5.0, f32::NAN], &[2, 3]);
    for op in [Tensor::reduce_max, Tensor::reduce_min] {
        let rows = op(&t, &[1], false).unwrap().to_vec::<f32>().unwrap();
        assert!(rows.iter().all(|v| v.is_nan()), "{rows:?}");
        let cols = op(&t, &[0], false).unwrap().to_vec::<f32>().unwrap();
        assert!(
            !cols[0].is_nan() && cols[1].is_nan() && cols[2].is_nan(),
            "{cols:?}"
        );
        assert!(op(&t, &[], false).unwrap().item::<f32>().unwrap().is_nan());
    }
}

#[test]
fn reduce_errors_name_the_op() {
    let t = t32(&[1., 2., 3., 4.], &[2, 2]);
    let (op, msg) = invalid(t.reduce_sum(&[2], false));
    assert_eq!(op, "reduce_sum");
    assert!(
        msg.contains("axis 2 is out of range") && msg.contains("rank 2"),
        "{msg}"
    );
    let (op, msg) = invalid(t.reduce_max(&[-3], false));
    assert_eq!(op, "reduce_max");
    assert!(msg.contains("axis -3"), "{msg}");
    let (op, msg) = invalid(t.reduce_mean(&[1, -1], false));
    assert_eq!(op, "reduce_mean");
    assert!(msg.contains("more than once"), "{msg}");
    let (op, msg) = invalid(t.reduce_any(&[0], false));
    assert_eq!(op, "reduce_any");
    assert!(msg.contains("bool") && msg.contains("f32"), "{msg}");
    let b = Tensor::from_slice(&[true], &[1]).unwrap();
    let (op, msg) = invalid(b.reduce_sum(&[0], false));
    assert_eq!(op, "reduce_sum");
    assert!(msg.contains("numeric"), "{msg}");
}

// ------------------------------------------------------------ argmax

#[test]
fn argmax_argmin_with_ties_take_the_first_index() {
    let t = t32(&[1., 5., 5., 0., 2., 2., -1., -1.], &[2, 4]);
    let am = t.argmax(1).unwrap();
    assert_eq!(am.dtype(), DType::I64);
    assert_eq!(am.to_vec::<i64>().unwrap(), vec![1, 0]);
    assert_eq!(t.argmin(-1).unwrap().to_vec::<i64>().unwrap(), vec![3, 2]);
    assert_eq!(
        t.argmax(0).unwrap().to_vec::<i64>().unwrap(),
        vec![1, 0, 0, 0]
    );
    assert_eq!(
        t.argmin(0).unwrap().to_vec::<i64>().unwrap(),
        vec![0, 1, 1, 1]
    );
}

#[test]
fn argmax_matches_a_reference_loop() {
    let x = sample(&[3, 5, 4]);
    let t = Tensor::from_ndarray(&x).unwrap();
    for axis in 0..3 {
        let first_best = |l: ArrayView1<f32>, better: fn(f32, f32) -> bool| {
            (0..l.len()).fold(0, |b, i| if better(l[i], l[b]) { i } else { b }) as i64
        };
        let want_max = x.map_axis(Axis(axis), |l| first_best(l, |a, b| a > b));
        let want_min = x.map_axis(Axis(axis), |l| first_best(l, |a, b| a < b));
        let got = t.argmax(axis as i64).unwrap().to_ndarray::<i64>().unwrap();
        assert_eq!(got, want_max, "argmax axis {axis}");
        let got = t.argmin(axis as i64).unwrap().to_ndarray::<i64>().unwrap();
        assert_eq!(got, want_min, "argmin axis {axis}");
    }
}

#[test]
fn argmax_nan_and_infinities() {
    let t = t32(&[1., f32::NAN, 3., f32::NAN], &[4]);
    assert_eq!(t.argmax(0).unwrap().item::<i64>().unwrap(), 1);
    assert_eq!(t.argmin(0).unwrap().item::<i64>().unwrap(), 1);
    let inf = t32(&[f32::NEG_INFINITY, f32::NEG_INFINITY], &[2]);
    assert_eq!(inf.argmax(0).unwrap().item::<i64>().unwrap(), 0);
    let ints = Tensor::from_slice(&[i32::MIN, i32::MIN, 4], &[3]).unwrap();
    assert_eq!(ints.argmax(0).unwrap().item::<i64>().unwrap(), 2);
    assert_eq!(ints.argmin(0).unwrap().item::<i64>().unwrap(), 0);
    let b = Tensor::from_slice(&[false, true, true], &[3]).unwrap();
    assert_eq!(b.argmax(0).unwrap().item::<i64>().unwrap(), 1);
}

#[test]
fn argmax_errors() {
    let t = t32(&[1., 2.], &[2]);
    let (op, msg) = invalid(t.argmax(1));
    assert_eq!(op, "argmax");
    assert!(msg.contains("axis 1 is out of range"), "{msg}");
    let e = t32(&[], &[2, 0]);
    let (op, msg) = invalid(e.argmin(1));
    assert_eq!(op, "argmin");
    assert!(msg.contains("empty axis"), "{msg}");
}

// ----------------------------------------------------------- softmax

#[test]
fn softmax_matches_the_formula_and_rows_sum_to_one() {
    let xs = [1.0f32, 2.0, 3.0, -1.0, 0.0, 1.0];
    let t = t32(&xs, &[2, 3]);
    let got = t.softmax(-1).unwrap().to_vec::<f32>().unwrap();
    let mut want = Vec::new();
    for row in xs.chunks(3) {
        let denom: f32 = row.iter().map(|v| v.exp()).sum();
        want.extend(row.iter().map(|v| v.exp() / denom));
    }
    close(&got, &want, 1e-6);
    for row in got.chunks(3) {
        assert!((row.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
    let log = t.log_softmax(1).unwrap().to_vec::<f32>().unwrap();
    close(&log, &want.iter().map(|v| v.ln()).collect::<Vec<_>>(), 1e-5);
}

#[test]
fn softmax_along_axis_zero_and_large_inputs_are_stable() {
    let t = t32(&[1000., 0., 1001., 0.], &[2, 2]);
    let got = t.softmax(0).unwrap().to_vec::<f32>().unwrap();
    let e = (-1.0f32).exp();
    close(&got, &[e / (1.0 + e), 0.5, 1.0 / (1.0 + e), 0.5], 1e-6);
    let log = t.log_softmax(0).unwrap().to_vec::<f32>().unwrap();
    assert!(log.iter().all(|v| v.is_finite()), "{log:?}");
    close(&log[..1], &[-1.0 - (1.0 + e).ln()], 1e-5);
    let wide = t32(&[0., -200.], &[2]);
    let log = wide.log_softmax(0).unwrap().to_vec::<f32>().unwrap();
    close(&log, &[0.0, -200.0], 1e-5);
}

#[test]
fn softmax_errors() {
    let i = Tensor::from_slice(&[1i32, 2], &[2]).unwrap();
    let (op, msg) = invalid(i.softmax(0));
    assert_eq!(op, "softmax");
    assert!(
        msg.contains("floating-point") && msg.contains("i32"),
        "{msg}"
    );
    let (op, msg) = invalid(t32(&[1., 2.], &[2]).log_softmax(-2));
    assert_eq!(op, "log_softmax");
    assert!(msg.contains("out of range"), "{msg}");
}

// ------------------------------------------------ infer with unknowns

fn ty(dims: Vec<Option<i64>>) -> TensorType {
    TensorType::new(DType::F32, Shape::from_dims(dims))
}

#[test]
fn reduce_infer_keeps_unknown_dims() {
    let op = Reduce::new(ReduceKind::Sum, &[-1], false);
    let out = op.infer(&[ty(vec![None, Some(3), None])]).unwrap();
    assert_eq!(out[0].shape, Shape::from_dims(vec![None, Some(3)]));
    let keep = Reduce::new(ReduceKind::Max, &[0], true);
    let out = keep.infer(&[ty(vec![None, Some(3)])]).unwrap();
    assert_eq!(out[0].shape, Shape::from_dims(vec![Some(1), Some(3)]));
    let unknown = TensorType::new(DType::F32, Shape::unknown_rank());
    let all = Reduce::new(ReduceKind::Mean, &[], false);
    assert_eq!(
        all.infer(std::slice::from_ref(&unknown)).unwrap()[0].shape,
        Shape::scalar()
    );
    let some = Reduce::new(ReduceKind::Mean, &[1], false);
    assert_eq!(
        some.infer(&[unknown]).unwrap()[0].shape,
        Shape::unknown_rank()
    );
    assert!(some.infer(&[ty(vec![None])]).is_err());
}

#[test]
fn argreduce_and_softmax_infer_with_unknowns() {
    let op = ArgReduce {
        kind: ArgKind::Max,
        axis: 1,
    };
    let out = op.infer(&[ty(vec![None, None, Some(2)])]).unwrap();
    assert_eq!(
        out[0],
        TensorType::new(DType::I64, Shape::from_dims(vec![None, Some(2)]))
    );
    let unknown = TensorType::new(DType::F32, Shape::unknown_rank());
    assert_eq!(
        op.infer(std::slice::from_ref(&unknown)).unwrap()[0].shape,
        Shape::unknown_rank()
    );
    let sm = Softmax {
        axis: -1,
        log: false,
    };
    assert_eq!(
        sm.infer(&[ty(vec![None, Some(4)])]).unwrap()[0],
        ty(vec![None, Some(4)])
    );
    assert_eq!(
        sm.infer(std::slice::from_ref(&unknown)).unwrap()[0],
        unknown
    );
}

// ---------------------------------------------------------- properties

/// A small shape (rank 0-3, dims 0-3) and a subset of its axes, written
/// with random signs, in random order.
fn shape_and_axes() -> impl Strategy<Value = (Vec<usize>, Vec<i64>, bool)> {
    prop::collection::vec(0usize..4, 0..4).prop_flat_map(|dims| {
        let rank = dims.len();
        let axes =
            prop::sample::subsequence((0..rank).collect::<Vec<_>>(), 0..=rank).prop_shuffle();
        let signs = prop::collection::vec(any::<bool>(), rank);
        (Just(dims), axes, signs, any::<bool>()).prop_map(move |(d, axes, signs, keep)| {
            let axes = axes
                .iter()
                .map(|&a| {
                    if signs[a] {
                        a as i64 - rank as i64
                    } else {
                        a as i64
                    }
                })
                .collect();
            (d, axes, keep)
        })
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn reductions_match_ndarray_on_random_shapes((dims, axes, keep) in shape_and_axes()) {
        check_against_reference(&dims, &axes, keep);
    }
}

/// A program of small f32 arrays with a rank-8 reduction compiles and
/// runs: such programs are not sent down XLA's XNNPACK path, which takes
/// the reduction and then fails every run (XNNPACK holds rank 6 at most).
#[test]
fn high_rank_reductions_of_small_arrays_run_compiled() {
    let f = function(|x: Tensor| {
        x.reshape(&[2, 1, 2, 2, 3, 2, 3, 1])?
            .reduce_max(&[1, 3, 5, 7], false)
    });
    let x: Vec<f32> = (0..144).map(|i| ((i * 7) % 11) as f32).collect();
    let got = f
        .call((Tensor::from_vec(x.clone(), &[2, 4, 6, 3]).unwrap(),))
        .unwrap();
    assert_eq!(got.dims(), vec![2, 2, 3, 3]);
    let got = got.to_vec::<f32>().unwrap();
    // [2,4,6,3] viewed as [2, 2x2, 3x2, 3]: the max over each 2x2 block.
    for b in 0..2 {
        for i in 0..2 {
            for j in 0..3 {
                for c in 0..3 {
                    let want = (0..2)
                        .flat_map(|a| (0..2).map(move |d| (a, d)))
                        .map(|(a, d)| x[((b * 4 + 2 * i + a) * 6 + 2 * j + d) * 3 + c])
                        .fold(f32::NEG_INFINITY, f32::max);
                    assert_eq!(got[((b * 2 + i) * 3 + j) * 3 + c], want);
                }
            }
        }
    }
}

/// Float32 sums are accumulated in float64 and rounded once; a sum over
/// 1024 rows or more of leading axes into a narrow output is a batched
/// float32 product with ones over blocks of 8 to 16 rows (the CPU
/// compiler's fast case) whose block sums are added in float64, and other
/// sums are one reduce. Values against a direct loop in f64, and the mean
/// too: a plain reduce within half a float32 ulp (the nearest float32 to
/// the exact sum), a blocked one within that plus the bound of 15 float32
/// additions per block, `15 u` times the sum of magnitudes (`u = 2^-24`).
#[test]
fn float_sums_are_wide_and_many_leading_rows_summed_in_blocks() {
    let sum_rows = |x: &Tensor, axes: Vec<i64>| {
        let f = function(move |x: Tensor| {
            Ok((x.reduce_sum(&axes, false)?, x.reduce_mean(&axes, false)?))
        });
        let text = f.lower((x,)).unwrap().as_text().to_string();
        (f.call((x,)).unwrap(), text)
    };
    // (dims, axes, summed in blocks)
    let cases: Vec<(Vec<i64>, Vec<i64>, bool)> = vec![
        (vec![16, 8, 8, 64], vec![0, 1, 2], true),
        (vec![2048, 12], vec![0], true),
        (vec![512, 128], vec![0], false),
        (vec![16384, 4], vec![0], true),
        (vec![40000, 2], vec![0], true),
        (vec![4099, 2], vec![0], false),
        (vec![64, 32, 3], vec![1, 2], false),
        (vec![2048, 12], vec![1], false),
    ];
    for (dims, axes, blocks) in cases {
        let n: i64 = dims.iter().product();
        let host: Vec<f64> = (0..n)
            .map(|i| ((i * 37 % 101) as f64 - 50.0) / 25.0 + 0.01)
            .collect();
        let x = Tensor::from_vec(host.clone(), &dims)
            .unwrap()
            .cast(DType::F32)
            .unwrap();
        let host: Vec<f64> = x.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let ((sum, mean), text) = sum_rows(&x, axes.clone());
        assert!(text.contains("tensor<f64>"), "{text}");
        assert_eq!(
            text.contains("stablehlo.dot_general"),
            blocks,
            "{dims:?} {axes:?}\n{text}"
        );
        if blocks {
            assert!(text.contains("precision HIGHEST"), "{text}");
        }
        // The reference: sum over the reduced axes by a direct loop.
        let kept: Vec<usize> = (0..dims.len())
            .filter(|d| !axes.contains(&(*d as i64)))
            .collect();
        let out_len: i64 = kept.iter().map(|&d| dims[d]).product();
        let mut want = vec![0f64; out_len as usize];
        let mut magnitude = vec![0f64; out_len as usize];
        let mut count = 0usize;
        for (flat, v) in host.iter().enumerate() {
            let mut rest = flat as i64;
            let mut index = vec![0i64; dims.len()];
            for d in (0..dims.len()).rev() {
                index[d] = rest % dims[d];
                rest /= dims[d];
            }
            let mut o = 0i64;
            for &d in &kept {
                o = o * dims[d] + index[d];
            }
            if o == 0 {
                count += 1;
            }
            want[o as usize] += v;
            magnitude[o as usize] += v.abs();
        }
        let got = sum.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
        let got_mean = mean.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
        // Half a float32 ulp of the exact value (2^-24 relative), and a
        // little for the reference's own float64 rounding.
        let half_ulp = |w: f64| w.abs() * 2f64.powi(-24) * (1.0 + 1e-9);
        let u = 2f64.powi(-24);
        for (((g, m), w), mag) in got.iter().zip(&got_mean).zip(&want).zip(&magnitude) {
            let in_blocks = if blocks { 15.0 * u * mag } else { 0.0 };
            assert!(
                (g - w).abs() <= half_ulp(*w) + in_blocks,
                "{dims:?}: {g} vs {w}"
            );
            let wm = w / count as f64;
            assert!(
                (m - wm).abs() <= half_ulp(wm) + in_blocks / count as f64,
                "{dims:?}: mean {m} vs {wm}"
            );
        }
    }
}

/// The float32 statistics of a `[32, 16, 16, 16]` activation, eagerly and
/// compiled, err no more than `jax.jit`'s against float64: the row sums
/// over 8192 rows (JAX 8.2e-8 relative) and their variance (1.1e-7), which
/// are blocked products; the mean of all 131072 squares is a plain reduce
/// and the float32 nearest the exact value (JAX 4.2e-8). A float32
/// accumulator erred by 6e-6 on the row sums and 2e-5 on the mean of
/// squares. `moments`' variance, BatchNorm's, is within 1.5 ulp; and a
/// bfloat16 sum is the bfloat16 nearest the exact sum.
#[test]
fn activation_statistics_are_the_nearest_float32() {
    let mut state = 0x9e3779b97f4a7c15u64;
    let mut uniform = move || {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((state >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    };
    // Box-Muller normals around 1, rounded to float32.
    let values: Vec<f32> = (0..131072)
        .map(|_| {
            let (u, v) = (uniform(), uniform());
            (1.0 + (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()) as f32
        })
        .collect();
    let x = Tensor::from_vec(values.clone(), &[32, 16, 16, 16]).unwrap();
    let h: Vec<f64> = values.iter().map(|&v| v as f64).collect();
    let mut sums = vec![0f64; 16];
    h.iter().enumerate().for_each(|(i, v)| sums[i % 16] += v);
    let means: Vec<f64> = sums.iter().map(|s| s / 8192.0).collect();
    let mut var = vec![0f64; 16];
    h.iter()
        .enumerate()
        .for_each(|(i, v)| var[i % 16] += (v - means[i % 16]).powi(2) / 8192.0);
    let mean_sq = h.iter().map(|v| v * v).sum::<f64>() / h.len() as f64;
    let stats = |x: &Tensor| -> Result<Vec<Tensor>> {
        Ok(vec![
            x.reduce_sum(&[0, 1, 2], false)?,
            x.reduce_variance(&[0, 1, 2], false)?,
            x.moments(&[0, 1, 2], false)?.1,
            x.square()?.reduce_mean(&[], false)?,
        ])
    };
    let compiled = function(move |x: Tensor| stats(&x));
    for (mode, out) in [
        ("eager", stats(&x).unwrap()),
        ("compiled", compiled.call((&x,)).unwrap()),
    ] {
        let wants: [&[f64]; 4] = [&sums, &var, &var, &[mean_sq]];
        for (k, (got, want)) in out.iter().zip(wants).enumerate() {
            assert_eq!(got.dtype(), DType::F32);
            for (g, w) in got.to_vec::<f32>().unwrap().iter().zip(want) {
                if k == 2 {
                    // moments' deviations are float32: within 1.5 ulp.
                    let ulp = w.abs() * 2f64.powi(-23);
                    assert!(
                        (*g as f64 - w).abs() <= 1.5 * ulp,
                        "{mode}, moments: {g} vs {w}"
                    );
                } else if k == 3 {
                    assert_eq!(*g, *w as f32, "{mode}, mean of squares: {g} vs {w}");
                } else {
                    // JAX's errors on these statistics: 8.2e-8, 1.1e-7.
                    let jax = [8.2e-8, 1.1e-7][k];
                    let relative = (*g as f64 - w).abs() / w.abs();
                    assert!(
                        relative <= jax,
                        "{mode}, statistic {k}: {g} vs {w} ({relative:e})"
                    );
                }
            }
        }
    }
    // bfloat16: summed wide, rounded once.
    let b = x.cast(DType::BF16).unwrap();
    let hb: Vec<f64> = b.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let exact: f64 = hb.iter().sum();
    let got = b
        .reduce_sum(&[], false)
        .unwrap()
        .cast(DType::F64)
        .unwrap()
        .item::<f64>()
        .unwrap();
    let nearest = Tensor::scalar(exact)
        .cast(DType::BF16)
        .unwrap()
        .cast(DType::F64)
        .unwrap();
    assert_eq!(got, nearest.item::<f64>().unwrap());
}

/// `reduce_prod`'s gradient is the product of the other elements, also
/// where some are 0 (`prod / x` would give 0 / 0): values as TensorFlow's
/// and JAX's exclusive running products give them, over one axis, over
/// two, and inside a traced function.
#[test]
fn product_gradients_are_exact_at_zeros() {
    let grad = |x: &Tensor, axes: &[i64]| {
        let tape = GradientTape::new();
        tape.watch(x);
        let w = Tensor::from_vec((1..=x.size()).map(|v| v as f64).collect(), &x.dims()).unwrap();
        let p = x.reduce_prod(axes, true).unwrap();
        let y = p
            .mul(&w.reduce_sum(axes, true).unwrap())
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap();
        let g = tape.gradient(&y, &[x.into()]).unwrap().remove(0).unwrap();
        g.to_vec::<f64>().unwrap()
    };
    // Rows [0, 2, 3] and [0, 0, 5], each row's weight 6 and 15.
    let x = Tensor::from_vec(vec![0f64, 2., 3., 0., 0., 5.], &[2, 3]).unwrap();
    assert_eq!(grad(&x, &[1]), vec![36., 0., 0., 0., 0., 0.]);
    // Columns [0, 0], [2, 0], [3, 5], weights 5, 7, 9.
    assert_eq!(grad(&x, &[0]), vec![0., 0., 45., 0., 14., 27.]);
    // Over both axes: the product is 0 with three zeros, so every
    // gradient is 0; with one zero, only that element's is not.
    assert_eq!(grad(&x, &[0, 1]), vec![0.; 6]);
    let one_zero = Tensor::from_vec(vec![1f64, 2., 3., 0., 4., 5.], &[2, 3]).unwrap();
    assert_eq!(grad(&one_zero, &[]), vec![0., 0., 0., 120. * 21., 0., 0.]);
    let x3 = Tensor::from_vec(vec![1f64, 2., 0., 4., 5., 6., 7., 8.], &[2, 2, 2]).unwrap();
    // Over axes 0 and 2 with axis 1 kept: slices {1, 2, 5, 6} and {0, 4, 7, 8}.
    let g = grad(&x3, &[0, 2]);
    let (w0, w1) = (1. + 2. + 5. + 6., 3. + 4. + 7. + 8.);
    assert_eq!(
        g,
        vec![
            60. * w0,
            30. * w0,
            224. * w1,
            0.,
            12. * w0,
            10. * w0,
            0.,
            0.
        ]
    );

    let f = function(|x: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&x);
        let p = x.reduce_prod(&[0], false)?;
        Ok(tape.gradient(&p, &[(&x).into()])?.remove(0).unwrap())
    });
    let out = f.call((Tensor::vector(&[0f32, 2., 3.]).unwrap(),)).unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![6., 0., 0.]);
}
