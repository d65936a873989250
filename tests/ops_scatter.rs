//! gather_nd, tensor_scatter_nd_*, take, take_along_axis, gather with
//! batch_dims and unsorted segment reductions against loops
//! written here; eager and traced; gradients against finite differences;
//! out-of-range indices as documented (gather clamps, scatter drops).

#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::prelude::*;

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0
        })
        .collect()
}

fn t(data: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(data.to_vec(), dims).unwrap()
}

fn idx(data: &[i32], dims: &[i64]) -> Tensor {
    Tensor::from_vec(data.to_vec(), dims).unwrap()
}

fn both(
    f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + Clone + 'static,
    x: &Tensor,
) -> Vec<f64> {
    let eager = f(x).unwrap().to_vec::<f64>().unwrap();
    let g = f.clone();
    let traced = function(move |x: Tensor| g(&x))
        .call((x,))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(eager, traced);
    eager
}

#[test]
fn gather_nd_elements_and_slices() {
    let p = values(24, 1);
    let params = t(&p, &[2, 3, 4]);
    // Full-depth rows pick elements.
    let rows = idx(&[1, 2, 3, 0, 0, 1, 1, 0, 2], &[3, 3]);
    let r2 = rows.clone();
    let got = both(move |x| x.gather_nd(&r2), &params);
    assert_eq!(got, vec![p[12 + 8 + 3], p[1], p[12 + 2]]);
    // Depth 1 rows pick [3, 4] slices; batch of [2, 1].
    let rows = idx(&[1, 0], &[2, 1, 1]);
    let got = params.gather_nd(&rows).unwrap();
    assert_eq!(got.dims(), vec![2, 1, 3, 4]);
    let got = got.to_vec::<f64>().unwrap();
    assert_eq!(&got[..12], &p[12..]);
    assert_eq!(&got[12..], &p[..12]);
    // Out of range: XLA clamps the start index into range.
    let clamped = params.gather_nd(&idx(&[5, -3, 9], &[1, 3])).unwrap();
    assert_eq!(clamped.to_vec::<f64>().unwrap(), vec![p[12 + 3]]);
}

#[test]
fn scatters_update_add_min_max() {
    let base = values(6, 2);
    let tensor = t(&base, &[3, 2]);
    let rows = idx(&[2, 0, 2], &[3, 1]);
    let upd = values(6, 3);
    let updates = t(&upd, &[3, 2]);
    let add = tensor
        .tensor_scatter_nd_add(&rows, &updates)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let mut want = base.clone();
    for (r, &target) in [2usize, 0, 2].iter().enumerate() {
        for c in 0..2 {
            want[target * 2 + c] += upd[r * 2 + c];
        }
    }
    assert_eq!(add, want);
    let unique = idx(&[2, 0], &[2, 1]);
    let two = t(&upd[..4], &[2, 2]);
    let got = tensor
        .tensor_scatter_nd_update(&unique, &two)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(got, vec![upd[2], upd[3], base[2], base[3], upd[0], upd[1]]);
    for (max, f) in [(true, f64::max as fn(f64, f64) -> f64), (false, f64::min)] {
        let got = if max {
            tensor.tensor_scatter_nd_max(&rows, &updates)
        } else {
            tensor.tensor_scatter_nd_min(&rows, &updates)
        }
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
        let mut want = base.clone();
        for (r, &target) in [2usize, 0, 2].iter().enumerate() {
            for c in 0..2 {
                want[target * 2 + c] = f(want[target * 2 + c], upd[r * 2 + c]);
            }
        }
        assert_eq!(got, want, "max={max}");
    }
    // Element scatter, traced, and an out-of-range row dropped.
    let points = idx(&[0, 1, 7, 0, 2, 0], &[3, 2]);
    let vals = t(&[10.0, 20.0, 30.0], &[3]);
    let f = function(move |x: Tensor| x.tensor_scatter_nd_update(&points, &vals));
    let got = f.call((&tensor,)).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(got, vec![base[0], 10.0, base[2], base[3], 30.0, base[5]]);
}

#[test]
fn take_along_axis_take_and_batched_gather() {
    let x = values(12, 4);
    let xt = t(&x, &[3, 4]);
    let labels = idx(&[3, 0, 2], &[3, 1]);
    let l2 = labels.clone();
    let got = both(move |x| x.take_along_axis(&l2, 1), &xt);
    assert_eq!(got, vec![x[3], x[4], x[10]]);
    let cols = idx(&[1, 1, 0, 2, 2, 2, 1, 0], &[2, 4]);
    let got = xt
        .take_along_axis(&cols, 0)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let want: Vec<f64> = (0..8)
        .map(|k| x[[1, 1, 0, 2, 2, 2, 1, 0][k] * 4 + k % 4])
        .collect();
    assert_eq!(got, want);
    assert_eq!(
        xt.take(&idx(&[11, 0, 5], &[3]))
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        vec![x[11], x[0], x[5]]
    );
    // batch_dims = 1: params [2, 3, 4], indices [2, 2], axis 1 -> [2, 2, 4].
    let p = values(24, 5);
    let pt = t(&p, &[2, 3, 4]);
    let ind = idx(&[2, 0, 1, 1], &[2, 2]);
    let got = pt.gather_batched(&ind, 1, 1).unwrap();
    assert_eq!(got.dims(), vec![2, 2, 4]);
    let got = got.to_vec::<f64>().unwrap();
    let mut want = Vec::new();
    for b in 0..2 {
        for j in 0..2 {
            let i = [2usize, 0, 1, 1][b * 2 + j];
            want.extend_from_slice(&p[b * 12 + i * 4..b * 12 + i * 4 + 4]);
        }
    }
    assert_eq!(got, want);
    // axis 2 with batch_dims 1: [2, 3, 2] (params dim 1 stays before).
    let ind = idx(&[3, 1, 0, 0], &[2, 2]);
    let got = pt.gather_batched(&ind, 2, 1).unwrap();
    assert_eq!(got.dims(), vec![2, 3, 2]);
    let got = got.to_vec::<f64>().unwrap();
    let mut want = Vec::new();
    for b in 0..2 {
        for r in 0..3 {
            for j in 0..2 {
                want.push(p[b * 12 + r * 4 + [3usize, 1, 0, 0][b * 2 + j]]);
            }
        }
    }
    assert_eq!(got, want);
}

#[test]
fn unsorted_segment_reductions() {
    let data = values(10, 6);
    let dt = t(&data, &[5, 2]);
    let ids = idx(&[2, 0, 2, 5, 0], &[5]); // 5 is out of range: dropped
    let sum = dt
        .unsorted_segment_sum(&ids, 3)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let mean = dt
        .unsorted_segment_mean(&ids, 3)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let max = dt
        .unsorted_segment_max(&ids, 3)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let mut ws = [0.0; 6];
    let mut wn = [0.0; 3];
    let mut wm = [f64::NEG_INFINITY; 6];
    for (r, &s) in [2usize, 0, 2, 5, 0].iter().enumerate() {
        if s >= 3 {
            continue;
        }
        wn[s] += 1.0;
        for c in 0..2 {
            ws[s * 2 + c] += data[r * 2 + c];
            wm[s * 2 + c] = wm[s * 2 + c].max(data[r * 2 + c]);
        }
    }
    for i in 0..6 {
        assert!((sum[i] - ws[i]).abs() < 1e-12);
        let m = if wn[i / 2] > 0.0 {
            ws[i] / wn[i / 2]
        } else {
            0.0
        };
        assert!((mean[i] - m).abs() < 1e-12);
        assert_eq!(max[i], wm[i]);
    }
}

/// Central differences of `sum(f(x) * r)` against the tape's gradient.
fn check_gradient(f: impl Fn(&Tensor) -> Result<Tensor>, x: &[f64], dims: &[i64], what: &str) {
    gradcheck::check_gradient(&f, x, dims, 1e-6, what);
}

#[test]
fn gradients_match_finite_differences() {
    let x = values(12, 7);
    let rows = idx(&[1, 2, 0, 1, 1, 2], &[3, 2]);
    check_gradient(
        |p| p.gather_nd(&rows),
        &x,
        &[3, 4],
        "gather_nd (repeated rows)",
    );
    let labels = idx(&[3, 0, 2], &[3, 1]);
    check_gradient(
        |p| p.take_along_axis(&labels, 1),
        &x,
        &[3, 4],
        "take_along_axis",
    );
    let rows1 = idx(&[2, 0, 2], &[3, 1]);
    let upd = t(&values(12, 8), &[3, 4]);
    check_gradient(
        |p| p.tensor_scatter_nd_add(&rows1, &upd),
        &x,
        &[3, 4],
        "scatter_add tensor",
    );
    check_gradient(
        |p| p.tensor_scatter_nd_update(&idx(&[2, 0], &[2, 1]), &upd.slice(&[0, 0], &[2, 4])?),
        &x,
        &[3, 4],
        "scatter_update tensor",
    );
    let base = t(&x, &[3, 4]);
    check_gradient(
        |u| base.tensor_scatter_nd_add(&rows1, u),
        &values(12, 8),
        &[3, 4],
        "scatter_add updates",
    );
    check_gradient(
        |u| base.tensor_scatter_nd_max(&rows1, u),
        &values(12, 8),
        &[3, 4],
        "scatter_max updates",
    );
    let ids = idx(&[1, 0, 1], &[3]);
    check_gradient(
        |d| d.unsorted_segment_mean(&ids, 2),
        &x,
        &[3, 4],
        "segment mean",
    );
}

#[test]
fn sparse_cross_entropy_without_one_hot() {
    // -log softmax(logits)[label], by take_along_axis, against loops.
    let logits = values(12, 10);
    let lt = t(&logits, &[3, 4]);
    let labels = [1usize, 3, 0];
    let lab = idx(&[1, 3, 0], &[3, 1]);
    let m = lt.reduce_max(&[1], true).unwrap();
    let lse = lt
        .sub(&m)
        .unwrap()
        .exp()
        .unwrap()
        .reduce_sum(&[1], true)
        .unwrap()
        .log()
        .unwrap()
        .add(&m)
        .unwrap();
    let loss = lse
        .sub(&lt.take_along_axis(&lab, 1).unwrap())
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for r in 0..3 {
        let row = &logits[r * 4..r * 4 + 4];
        let z: f64 = row.iter().map(|v| v.exp()).sum();
        let want = z.ln() - row[labels[r]];
        assert!((loss[r] - want).abs() < 1e-12);
    }
}

/// The gradient of take_along_axis is itself differentiable: with
/// `y = d/dx sum(take_along_axis(x, idx) * w)` (w added back at the
/// taken places), `d/dw sum(y * c) = take_along_axis(c, idx)`.
#[test]
fn the_gradient_of_take_along_axis_has_a_gradient() {
    let x = t(&values(6, 3), &[2, 3]);
    let w = t(&[1.0, 2.0, 3.0, 4.0], &[2, 2]);
    let c = t(&[10.0, 20.0, 30.0, 40.0, 50.0, 60.0], &[2, 3]);
    let labels = idx(&[2, 0, 1, 1], &[2, 2]);
    let outer = GradientTape::new();
    outer.watch(&w);
    let inner = GradientTape::new();
    inner.watch(&x);
    let taken = x.take_along_axis(&labels, 1).unwrap();
    let loss = taken.mul(&w).unwrap().reduce_sum(&[], false).unwrap();
    let y = inner
        .gradient(&loss, &[(&x).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    // Row 0 takes columns 2 and 0, row 1 column 1 twice (added up).
    assert_eq!(
        y.to_vec::<f64>().unwrap(),
        vec![2.0, 0.0, 1.0, 0.0, 7.0, 0.0]
    );
    let z = y.mul(&c).unwrap().reduce_sum(&[], false).unwrap();
    let dw = outer
        .gradient(&z, &[(&w).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(dw.to_vec::<f64>().unwrap(), vec![30.0, 10.0, 50.0, 50.0]);
}

#[test]
fn sorted_segment_reductions_are_sized_by_their_ids() {
    // Segments 0 and 2; segment 1 is empty. By hand.
    let data = Tensor::from_vec(vec![1f64, 2., 3., 4., 5., 6., 7., 8.], &[4, 2]).unwrap();
    let ids = Tensor::vector(&[0i32, 0, 2, 2]).unwrap();
    let get = |t: Result<Tensor>| {
        let t = t.unwrap();
        (t.dims(), t.to_vec::<f64>().unwrap())
    };
    assert_eq!(
        get(data.segment_sum(&ids)),
        (vec![3, 2], vec![4., 6., 0., 0., 12., 14.])
    );
    assert_eq!(
        get(data.segment_mean(&ids)),
        (vec![3, 2], vec![2., 3., 0., 0., 6., 7.])
    );
    // Empty segments are 0, as TensorFlow's segment_max, even below 0.
    let negative = data.neg().unwrap();
    assert_eq!(
        get(negative.segment_max(&ids)),
        (vec![3, 2], vec![-1., -2., 0., 0., -5., -6.])
    );
    // segment_min likewise, from above; the unsorted form leaves +inf.
    assert_eq!(
        get(data.segment_min(&ids)),
        (vec![3, 2], vec![1., 2., 0., 0., 5., 6.])
    );
    assert_eq!(
        get(data.unsorted_segment_min(&ids, 3)),
        (
            vec![3, 2],
            vec![1., 2., f64::INFINITY, f64::INFINITY, 5., 6.]
        )
    );
    let ints = Tensor::vector(&[4i32, -3, 9]).unwrap();
    let smallest = ints
        .unsorted_segment_min(&Tensor::vector(&[1i32, 1, 0]).unwrap(), 3)
        .unwrap();
    assert_eq!(smallest.to_vec::<i32>().unwrap(), [9, -3, i32::MAX]);
    // The gradient of a minimum reaches the rows that are the minimum.
    let tape = GradientTape::new();
    tape.watch(&data);
    let total = data
        .segment_min(&ids)
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape.gradient(&total, &[(&data).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), [1., 1., 0., 0., 1., 1., 0., 0.]);
    // No ids: no segments.
    let none = Tensor::zeros(&[0, 2], DType::F64)
        .segment_sum(&Tensor::zeros(&[0], DType::I64))
        .unwrap();
    assert_eq!(none.dims(), vec![0, 2]);
    // Gradients: each row gets its segment's output gradient.
    let tape = GradientTape::new();
    tape.watch(&data);
    let w = Tensor::from_vec(vec![1f64, 10., 100., 1000., 0.5, 0.25], &[3, 2]).unwrap();
    let l = data
        .segment_sum(&ids)
        .unwrap()
        .mul(&w)
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape.gradient(&l, &[(&data).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(
        g.to_vec::<f64>().unwrap(),
        vec![1., 10., 1., 10., 0.5, 0.25, 0.5, 0.25]
    );
    // TensorFlow's checks, and a traced function, which cannot size it.
    let e = data
        .segment_sum(&Tensor::vector(&[0i32, 2, 1, 2]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("not increasing") && e.contains("position 2"),
        "{e}"
    );
    let e = data
        .segment_sum(&Tensor::vector(&[-1i32, 0, 0, 1]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("non-negative"), "{e}");
    let e = data.segment_sum(&data).unwrap_err().to_string();
    assert!(e.contains("1-D integer"), "{e}");
    let f = function(|x: Tensor, ids: Tensor| x.segment_sum(&ids));
    let e = f.call((&data, &ids)).unwrap_err().to_string();
    assert!(e.contains("unsorted_segment_"), "{e}");
}

/// Tied maxima and minima share their output's gradient evenly
/// (TensorFlow's and JAX's rule), in segment reductions and in scatters
/// onto a tensor that ties with an update.
#[test]
fn tied_extremes_share_the_gradient() {
    let grads = |f: &dyn Fn(&Tensor) -> Result<Tensor>, x: &[f64]| {
        let x = t(x, &[x.len() as i64]);
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = f(&x).unwrap().reduce_sum(&[], false).unwrap();
        tape.gradient(&y, &[(&x).into()])
            .unwrap()
            .remove(0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    let ids = idx(&[0, 0, 1, 1, 1], &[5]);
    let max = |x: &Tensor| x.unsorted_segment_max(&ids, 2);
    assert_eq!(
        grads(&max, &[2., 2., 1., 3., 3.]),
        vec![0.5, 0.5, 0., 0.5, 0.5]
    );
    let min = |x: &Tensor| x.unsorted_segment_min(&ids, 2);
    assert_eq!(
        grads(&min, &[2., 2., 1., 1., 1.]),
        vec![0.5, 0.5, 1. / 3., 1. / 3., 1. / 3.]
    );
    // A tensor element equal to the update scattered onto it: a tie.
    let rows = idx(&[0, 0], &[2, 1]);
    let onto = |x: &Tensor| x.tensor_scatter_nd_max(&rows, &t(&[4., 1.], &[2]));
    assert_eq!(grads(&onto, &[4., 7.]), vec![0.5, 1.]);
    let updates = |u: &Tensor| t(&[4., 7.], &[2]).tensor_scatter_nd_max(&rows, u);
    assert_eq!(grads(&updates, &[4., 4.]), vec![1. / 3., 1. / 3.]);
}

/// `take` and `take_along_axis` follow NumPy and JAX for negative
/// indices: `-1` is the last element (it read the first, by clamping).
/// Also traced with the axis's length unknown (measured on the device),
/// and with the gradient scattered to the element read.
#[test]
fn negative_indices_count_from_the_end_in_numpy_named_gathers() {
    let x = t(&[1., 2., 3., 4., 5., 6.], &[2, 3]);
    let got = |r: Result<Tensor>| r.unwrap().to_vec::<f64>().unwrap();
    assert_eq!(
        got(x.take(&idx(&[-1, 0, -6, 5], &[4]))),
        vec![6., 1., 1., 6.]
    );
    assert_eq!(
        got(x.take_along_axis(&idx(&[-1, -3], &[2, 1]), 1)),
        vec![3., 4.]
    );
    assert_eq!(
        got(x.take_along_axis(&idx(&[-1, 0, 1], &[1, 3]), 0)),
        vec![4., 2., 6.]
    );
    let any_length = FunctionOptions::new()
        .input_signature(vec![
            TensorSpec::new(&[Some(2), None], DType::F64),
            TensorSpec::new(&[Some(2), Some(1)], DType::I32),
        ])
        .build(|x: Tensor, i: Tensor| x.take_along_axis(&i, 1));
    let y = any_length.call((&x, &idx(&[-1, -2], &[2, 1]))).unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![3., 5.]);
    let wide = t(&[1., 2., 3., 4., 5., 6., 7., 8.], &[2, 4]);
    let y = any_length.call((&wide, &idx(&[-1, -4], &[2, 1]))).unwrap();
    assert_eq!(y.to_vec::<f64>().unwrap(), vec![4., 5.]);

    let tape = GradientTape::new();
    tape.watch(&x);
    let s = x
        .take(&idx(&[-1, -1, 0], &[3]))
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape
        .gradient(&s, &[(&x).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![1., 0., 0., 0., 0., 2.]);
}
