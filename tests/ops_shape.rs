//! Shape ops against independent references: `ndarray`'s reshape,
//! permuted axes, concatenate/stack, slicing and `select`, and values
//! worked out by hand from Python's slicing rules and `tf.one_hot`.

use ndarray::{Array, ArrayD, Axis, IxDyn, s};
use proptest::prelude::*;
use xlafn::ir::{Shape, TensorType};
use xlafn::ops::OpDef;
use xlafn::ops::shape::{Concat, Gather, OneHot, Reshape, Slice, StridedSlice, Transpose};
use xlafn::prelude::*;

/// `0, 1, 2, ...` as an f32 array of shape `dims`.
fn arange(dims: &[usize]) -> ArrayD<f32> {
    let n: usize = dims.iter().product();
    Array::from_iter((0..n).map(|v| v as f32))
        .into_shape_with_order(IxDyn(dims))
        .unwrap()
}

fn tensor(a: &ArrayD<f32>) -> Tensor {
    Tensor::from_ndarray(a).unwrap()
}

fn read(t: &Tensor) -> ArrayD<f32> {
    t.to_ndarray::<f32>().unwrap()
}

/// Asserts an `InvalidArgument` from `op` whose message contains `needle`.
fn assert_invalid<T: std::fmt::Debug>(r: xlafn::Result<T>, op: &str, needle: &str) {
    match r {
        Err(Error::InvalidArgument { op: got, message }) => {
            assert_eq!(got, op, "wrong op in error: {message}");
            assert!(message.contains(needle), "{message:?} lacks {needle:?}");
        }
        other => panic!("expected InvalidArgument from {op}, got {other:?}"),
    }
}

fn unknown(dims: &[Option<i64>]) -> TensorType {
    TensorType::new(DType::F32, Shape::from_dims(dims.to_vec()))
}

fn infer1(op: &impl OpDef, inputs: Vec<TensorType>) -> Shape {
    op.infer(&inputs).unwrap().remove(0).shape
}

// ---------------------------------------------------------------- reshape

#[test]
fn reshape_matches_ndarray_including_minus_one_and_empty() {
    let a = arange(&[2, 3, 4]);
    let got = tensor(&a).reshape(&[4, -1]).unwrap();
    assert_eq!(got.dims(), vec![4, 6]);
    let want = a.clone().into_shape_with_order(IxDyn(&[4, 6])).unwrap();
    assert_eq!(read(&got), want);
    let flat = tensor(&a).reshape(&[-1]).unwrap();
    assert_eq!(
        flat.to_vec::<f32>().unwrap(),
        a.iter().copied().collect::<Vec<_>>()
    );
    let one = Tensor::from_vec(vec![7f32], &[1, 1])
        .unwrap()
        .reshape(&[])
        .unwrap();
    assert_eq!((one.dims(), one.item::<f32>().unwrap()), (vec![], 7.0));
    let empty = tensor(&arange(&[0, 3])).reshape(&[3, 0, 5]).unwrap();
    assert_eq!(empty.dims(), vec![3, 0, 5]);
}

#[test]
fn reshape_errors_name_the_shapes() {
    let x = tensor(&arange(&[2, 3]));
    assert_invalid(
        x.reshape(&[4, 2]),
        "reshape",
        "f32(2, 3) (6 elements) to [4, 2] (8 elements)",
    );
    assert_invalid(x.reshape(&[4, -1]), "reshape", "6 is not a multiple of 4");
    assert_invalid(
        x.reshape(&[-1, -1]),
        "reshape",
        "only one dimension may be -1",
    );
    assert_invalid(x.reshape(&[-2, -3]), "reshape", "sizes must be >= 0 or -1");
    let e = tensor(&arange(&[0, 2]));
    assert_invalid(e.reshape(&[0, -1]), "reshape", "multiply to 0");
}

// -------------------------------------------------------------- transpose

#[test]
fn transpose_matches_permuted_axes() {
    let a = arange(&[2, 3, 4]);
    for perm in [[2usize, 0, 1], [1, 0, 2], [0, 1, 2], [2, 1, 0]] {
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let got = tensor(&a).transpose(&p).unwrap();
        let want = a.clone().permuted_axes(IxDyn(&perm));
        assert_eq!(read(&got), want, "perm {perm:?}");
    }
    let e = tensor(&arange(&[0, 3])).transpose(&[1, 0]).unwrap();
    assert_eq!(e.dims(), vec![3, 0]);
}

#[test]
fn transpose_rejects_non_permutations() {
    let x = tensor(&arange(&[2, 3]));
    for bad in [&[0i64, 0][..], &[0, 2], &[0], &[-1, 0], &[0, 1, 2]] {
        assert_invalid(
            x.transpose(bad),
            "transpose",
            "is not a permutation of 0..2",
        );
    }
}

// -------------------------------------------------------- expand/squeeze

#[test]
fn expand_dims_and_squeeze_with_negative_axes() {
    let x = tensor(&arange(&[2, 3]));
    let cases: [(i64, Vec<i64>); 5] = [
        (0, vec![1, 2, 3]),
        (1, vec![2, 1, 3]),
        (2, vec![2, 3, 1]),
        (-1, vec![2, 3, 1]),
        (-3, vec![1, 2, 3]),
    ];
    for (axis, dims) in cases {
        let y = x.expand_dims(axis).unwrap();
        assert_eq!(y.dims(), dims, "axis {axis}");
        assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    }
    assert_invalid(x.expand_dims(3), "expand_dims", "out of range");
    assert_invalid(x.expand_dims(-4), "expand_dims", "out of range");
    let y = tensor(&arange(&[1, 2, 1, 3, 1]));
    assert_eq!(y.squeeze(&[]).unwrap().dims(), vec![2, 3]);
    assert_eq!(y.squeeze(&[-1, 0]).unwrap().dims(), vec![2, 1, 3]);
    assert_eq!(
        y.squeeze(&[2]).unwrap().to_vec::<f32>().unwrap(),
        y.to_vec::<f32>().unwrap()
    );
    assert_invalid(
        y.squeeze(&[1]),
        "squeeze",
        "cannot squeeze axis 1: its size is 2",
    );
    assert_invalid(y.squeeze(&[5]), "squeeze", "out of range");
    let s = Tensor::scalar(3f32).expand_dims(0).unwrap();
    assert_eq!(s.dims(), vec![1]);
}

// --------------------------------------------------------- concat, stack

#[test]
fn concat_matches_ndarray_on_every_axis() {
    let a = arange(&[2, 3, 2]);
    let b = arange(&[2, 3, 2]).mapv(|v| v + 100.0);
    for axis in [0i64, 1, 2, -1, -3] {
        let got = Tensor::concat(&[tensor(&a), tensor(&b)], axis).unwrap();
        let ax = Axis(axis.rem_euclid(3) as usize);
        let want = ndarray::concatenate(ax, &[a.view(), b.view()]).unwrap();
        assert_eq!(read(&got), want, "axis {axis}");
    }
    let c = arange(&[2, 1]);
    let d = arange(&[2, 0]);
    let got = Tensor::concat(&[tensor(&c), tensor(&d), tensor(&c)], 1).unwrap();
    assert_eq!(
        read(&got),
        ndarray::concatenate(Axis(1), &[c.view(), c.view()]).unwrap()
    );
    let single = Tensor::concat(&[tensor(&c)], 0).unwrap();
    assert_eq!(read(&single), c);
}

#[test]
fn concat_errors_name_operands() {
    let x = tensor(&arange(&[2, 3]));
    let y = tensor(&arange(&[2, 4]));
    let i = Tensor::from_vec(vec![1i32; 6], &[2, 3]).unwrap();
    assert_invalid(Tensor::concat(&[x.clone(), i], 0), "concat", "i32 tensor");
    assert_invalid(
        Tensor::concat(&[x.clone(), y.clone()], 0),
        "concat",
        "dimension 1 of input #1 is 4 but 3 in an earlier input",
    );
    assert_invalid(
        Tensor::concat(&[x.clone(), y.clone()], 0),
        "concat",
        "f32(2, 3), f32(2, 4)",
    );
    let v = tensor(&arange(&[6]));
    assert_invalid(
        Tensor::concat(&[x.clone(), v], 0),
        "concat",
        "input #1 has rank 1",
    );
    assert_invalid(
        Tensor::concat(&[x.clone(), x.clone()], 2),
        "concat",
        "axis 2 is out of range",
    );
    assert_invalid(Tensor::concat(&[], 0), "concat", "at least one");
    let s = Tensor::scalar(1f32);
    assert_invalid(Tensor::concat(&[s.clone(), s], 0), "concat", "rank 0");
}

#[test]
fn stack_matches_ndarray() {
    let a = arange(&[2, 3]);
    let b = a.mapv(|v| -v);
    for axis in [0i64, 1, 2, -1, -3] {
        let got = Tensor::stack(&[tensor(&a), tensor(&b)], axis).unwrap();
        let ax = Axis(axis.rem_euclid(3) as usize);
        assert_eq!(
            read(&got),
            ndarray::stack(ax, &[a.view(), b.view()]).unwrap(),
            "axis {axis}"
        );
    }
    let sc = Tensor::stack(&[Tensor::scalar(1f32), Tensor::scalar(2f32)], 0).unwrap();
    assert_eq!(sc.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);
    let t = tensor(&a);
    let u = tensor(&arange(&[3, 2]));
    assert_invalid(Tensor::stack(&[t.clone(), u], 0), "stack", "same shape");
    let i = Tensor::from_vec(vec![0i64; 6], &[2, 3]).unwrap();
    assert_invalid(Tensor::stack(&[t.clone(), i], 0), "stack", "i64 tensor");
    assert_invalid(Tensor::stack(&[t], 3), "stack", "out of range");
    assert_invalid(Tensor::stack(&[], 0), "stack", "at least one");
}

// ----------------------------------------------------------------- slices

#[test]
fn slice_matches_ndarray() {
    let a = arange(&[4, 5, 3]);
    let got = tensor(&a).slice(&[1, 2, 0], &[2, -1, 2]).unwrap();
    assert_eq!(read(&got), a.slice(s![1..3, 2.., 0..2]).into_dyn());
    let empty = tensor(&a).slice(&[4, 0, 0], &[0, 5, 3]).unwrap();
    assert_eq!(empty.dims(), vec![0, 5, 3]);
    let x = tensor(&a);
    assert_invalid(
        x.slice(&[3, 0, 0], &[2, 1, 1]),
        "slice",
        "out of bounds in dimension 0 of size 4",
    );
    assert_invalid(
        x.slice(&[0, 0], &[1, 1]),
        "slice",
        "one entry per dimension",
    );
    assert_invalid(x.slice(&[-1, 0, 0], &[1, 1, 1]), "slice", "must be >= 0");
}

/// `list(range(10))[b:e:s]` for the cases below, worked out by hand.
fn python_cases() -> Vec<(i64, i64, i64, Vec<f32>)> {
    let v = |xs: &[i32]| xs.iter().map(|&x| x as f32).collect::<Vec<f32>>();
    vec![
        (2, 8, 2, v(&[2, 4, 6])),
        (8, 1, -3, v(&[8, 5, 2])),
        (i64::MAX, i64::MIN, -1, v(&[9, 8, 7, 6, 5, 4, 3, 2, 1, 0])),
        (-3, i64::MAX, 1, v(&[7, 8, 9])),
        (-100, 100, 4, v(&[0, 4, 8])),
        (5, -100, -1, v(&[5, 4, 3, 2, 1, 0])),
        (100, 0, -2, v(&[9, 7, 5, 3, 1])),
        (-1, -4, -1, v(&[9, 8, 7])),
        (3, 3, 1, v(&[])),
        (7, 2, 1, v(&[])),
        (2, 7, -1, v(&[])),
        (0, 10, 100, v(&[0])),
        (9, 0, i64::MIN, v(&[9])),
    ]
}

#[test]
fn strided_slice_follows_python_in_one_dimension() {
    let x = tensor(&arange(&[10]));
    for (b, e, st, want) in python_cases() {
        let got = x.strided_slice(&[b], &[e], &[st]).unwrap();
        assert_eq!(got.to_vec::<f32>().unwrap(), want, "[{b}:{e}:{st}]");
    }
}

#[test]
fn strided_slice_in_several_dimensions() {
    let a = arange(&[4, 5, 3]);
    let x = tensor(&a);
    let got = x
        .strided_slice(&[i64::MAX, 1], &[i64::MIN, 5], &[-1, 2])
        .unwrap();
    assert_eq!(read(&got), a.slice(s![..;-1, 1..5;2, ..]).into_dyn());
    let got = x
        .strided_slice(&[0, -1, 0], &[4, -6, 3], &[3, -2, 1])
        .unwrap();
    let stepped = a.slice(s![0..4;3, ..;2, ..]);
    let want = stepped.slice(s![.., ..;-1, ..]).into_dyn();
    assert_eq!(read(&got), want);
    let none = x.strided_slice(&[], &[], &[]).unwrap();
    assert_eq!(read(&none), a);
    let empty = tensor(&arange(&[0, 2]))
        .strided_slice(&[-1], &[i64::MIN], &[-1])
        .unwrap();
    assert_eq!(empty.dims(), vec![0, 2]);
    assert_invalid(
        x.strided_slice(&[0], &[1], &[0]),
        "strided_slice",
        "strides[0] is 0",
    );
    assert_invalid(
        x.strided_slice(&[0, 0], &[1], &[1]),
        "strided_slice",
        "same length",
    );
    let four = [0i64; 4];
    assert_invalid(
        x.strided_slice(&four, &four, &[1; 4]),
        "strided_slice",
        "lower rank",
    );
}

// ---------------------------------------------------------------- gather

#[test]
fn gather_matches_ndarray_select() {
    let a = arange(&[4, 3, 2]);
    let x = tensor(&a);
    let idx = Tensor::vector(&[3i32, 0, 0, 2]).unwrap();
    for (axis, ix) in [(0i64, vec![3usize, 0, 0, 2]), (-3, vec![3, 0, 0, 2])] {
        let got = x.gather(&idx, axis).unwrap();
        assert_eq!(read(&got), a.select(Axis(0), &ix), "axis {axis}");
    }
    let idx1 = Tensor::vector(&[1i64, 1, 0]).unwrap();
    assert_eq!(
        read(&x.gather(&idx1, -1).unwrap()),
        a.select(Axis(2), &[1, 1, 0])
    );
    // Rank-2 indices: result params[:1] + (2, 2) + params[2:].
    let idx2 = Tensor::from_vec(vec![2i64, 0, 1, 2], &[2, 2]).unwrap();
    let got = x.gather(&idx2, 1).unwrap();
    assert_eq!(got.dims(), vec![4, 2, 2, 2]);
    let want = a
        .select(Axis(1), &[2, 0, 1, 2])
        .as_standard_layout()
        .into_owned()
        .into_shape_with_order(IxDyn(&[4, 2, 2, 2]))
        .unwrap();
    assert_eq!(read(&got), want);
    let scalar_idx = Tensor::scalar(2i32);
    assert_eq!(
        read(&x.gather(&scalar_idx, 0).unwrap()),
        a.index_axis(Axis(0), 2).to_owned()
    );
}

#[test]
fn gather_clamps_out_of_range_indices_and_checks_types() {
    let x = Tensor::vector(&[10f32, 20., 30.]).unwrap();
    let idx = Tensor::vector(&[-5i32, 7, 1]).unwrap();
    assert_eq!(
        x.gather(&idx, 0).unwrap().to_vec::<f32>().unwrap(),
        vec![10., 30., 20.]
    );
    let empty = Tensor::from_vec(Vec::<i32>::new(), &[0]).unwrap();
    assert_eq!(x.gather(&empty, 0).unwrap().dims(), vec![0]);
    let fidx = Tensor::vector(&[0f32]).unwrap();
    // The message names the indices and the dtypes they may have (it read
    // `expects int32 or int64 indices, and any params; got indices of
    // operands, got f32`).
    assert_invalid(
        x.gather(&fidx, 0),
        "gather",
        "indices must be an integer dtype (int32 or int64), got f32",
    );
    assert_invalid(
        x.take_along_axis(&fidx, 0),
        "take_along_axis",
        "indices must be an integer dtype (int32 or int64), got f32",
    );
    assert_invalid(x.gather(&idx, 1), "gather", "axis 1 is out of range");
    let nothing = Tensor::from_vec(Vec::<f32>::new(), &[2, 0]).unwrap();
    assert_invalid(nothing.gather(&idx, 1), "gather", "axis 1 of size 0");
    assert_eq!(nothing.gather(&empty, 1).unwrap().dims(), vec![2, 0]);
}

/// The gradient of a gather (an embedding lookup) sums the cotangents of
/// repeated rows and gives rows read through a clamped out-of-range index
/// nothing, eagerly and compiled; the compiled gradient is a scatter-add,
/// not a one-hot matrix product (by hand: rows 0 and 2 of a `[4, 2]` table
/// gathered as `[2, 0, 2, 9]`, cotangent `[[1, 2], [3, 4], [5, 6], [7, 8]]`).
#[test]
fn gather_gradient_is_a_scatter_add_of_the_rows() {
    let table = Tensor::from_vec(vec![0f32; 8], &[4, 2]).unwrap();
    let idx = Tensor::vector(&[2i32, 0, 2, 9]).unwrap();
    let grad = |table: Tensor, idx: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&table);
        let cot = Tensor::from_vec((1..=8).map(|v| v as f32).collect(), &[4, 2])?;
        let loss = table.gather(&idx, 0)?.mul(&cot)?.reduce_sum(&[], false)?;
        Ok(tape.gradient(&loss, &[(&table).into()])?.remove(0).unwrap())
    };
    let want = vec![3f32, 4., 0., 0., 6., 8., 0., 0.];
    let eager = grad(table.clone(), idx.clone()).unwrap();
    assert_eq!(eager.to_vec::<f32>().unwrap(), want);
    let f = function(grad);
    let compiled = f.call((table.clone(), idx.clone())).unwrap();
    assert_eq!(compiled.to_vec::<f32>().unwrap(), want);
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            xlafn::ArraySpec::new(DType::F32, &[4, 2]),
            xlafn::ArraySpec::new(DType::I32, &[4]),
        ])
        .unwrap();
    assert!(text.contains("stablehlo.scatter"), "{text}");
    assert!(!text.contains("stablehlo.dot_general"), "{text}");
}

// --------------------------------------------------------------- one_hot

#[test]
fn one_hot_matches_hand_computed_rows() {
    let idx = Tensor::from_vec(vec![0i32, 2, -1, 3], &[2, 2]).unwrap();
    let got = idx.one_hot(3, 5.0, -1.0, DType::F32).unwrap();
    assert_eq!(got.dims(), vec![2, 2, 3]);
    #[rustfmt::skip]
    let want = vec![
        5., -1., -1.,   -1., -1., 5.,
        -1., -1., -1.,  -1., -1., -1.,
    ];
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
    let ints = Tensor::vector(&[1i64, 0])
        .unwrap()
        .one_hot(2, 1.0, 0.0, DType::I32)
        .unwrap();
    assert_eq!(ints.to_vec::<i32>().unwrap(), vec![0, 1, 1, 0]);
    let s = Tensor::scalar(1u8)
        .one_hot(4, 1.0, 0.0, DType::Bool)
        .unwrap();
    assert_eq!(s.to_vec::<bool>().unwrap(), vec![false, true, false, false]);
    let f = Tensor::vector(&[1f32]).unwrap();
    assert_invalid(
        f.one_hot(2, 1.0, 0.0, DType::F32),
        "one_hot",
        "indices must be an integer dtype, got f32",
    );
    let i = Tensor::vector(&[1i32]).unwrap();
    assert_invalid(
        i.one_hot(-1, 1.0, 0.0, DType::F32),
        "one_hot",
        "depth must be >= 0",
    );
}

// ------------------------------------------------ infer with unknown dims

#[test]
fn infer_keeps_what_is_known() {
    let x = unknown(&[Some(2), None, Some(3)]);
    let r = Reshape { dims: vec![-1, 3] };
    assert_eq!(
        infer1(&r, vec![x.clone()]),
        Shape::from_dims(vec![None, Some(3)])
    );
    let r = Reshape { dims: vec![4, 5] };
    let any = TensorType::new(DType::F32, Shape::unknown_rank());
    assert_eq!(infer1(&r, vec![any.clone()]), Shape::known(&[4, 5]));
    let t = Transpose {
        perm: vec![2, 0, 1],
    };
    assert_eq!(
        infer1(&t, vec![x.clone()]),
        Shape::from_dims(vec![Some(3), Some(2), None])
    );
    assert_eq!(
        infer1(&t, vec![any.clone()]),
        Shape::from_dims(vec![None; 3])
    );
    let c = Concat { axis: 1 };
    let y = unknown(&[None, Some(4), Some(3)]);
    assert_eq!(
        infer1(&c, vec![x.clone(), y.clone()]),
        Shape::from_dims(vec![Some(2), None, Some(3)])
    );
    let c0 = Concat { axis: 0 };
    let z = unknown(&[Some(5), Some(4), Some(3)]);
    assert_eq!(
        infer1(&c0, vec![x.clone(), z, any.clone()]),
        Shape::from_dims(vec![None, Some(4), Some(3)])
    );
    assert_eq!(
        infer1(&c0, vec![any.clone(), any.clone()]),
        Shape::unknown_rank()
    );
}

#[test]
fn infer_slices_gather_and_one_hot_with_unknowns() {
    let x = unknown(&[Some(6), None, Some(3)]);
    let sl = Slice {
        begin: vec![1, 1, 0],
        size: vec![-1, -1, 2],
    };
    assert_eq!(
        infer1(&sl, vec![x.clone()]),
        Shape::from_dims(vec![Some(5), None, Some(2)])
    );
    let ss = StridedSlice {
        begin: vec![-1, 0],
        end: vec![i64::MIN, 2],
        strides: vec![-2, 1],
    };
    assert_eq!(
        infer1(&ss, vec![x.clone()]),
        Shape::from_dims(vec![Some(3), None, Some(3)])
    );
    let idx = TensorType::new(DType::I32, Shape::from_dims(vec![None, Some(2)]));
    let g = Gather { axis: 1 };
    assert_eq!(
        infer1(&g, vec![x.clone(), idx.clone()]),
        Shape::from_dims(vec![Some(6), None, Some(2), Some(3)])
    );
    let oh = OneHot {
        depth: 4,
        on_value: 1.0.into(),
        off_value: 0.0.into(),
        dtype: DType::F16,
    };
    let out = oh.infer(&[idx]).unwrap().remove(0);
    assert_eq!(
        out,
        TensorType::new(DType::F16, Shape::from_dims(vec![None, Some(2), Some(4)]))
    );
    let bad = Slice {
        begin: vec![7, 0, 0],
        size: vec![1, 1, 1],
    };
    assert!(matches!(
        bad.infer(std::slice::from_ref(&x)),
        Err(Error::InvalidArgument { .. })
    ));
    let r = Reshape { dims: vec![4, 4] };
    assert!(r.infer(&[unknown(&[Some(3), Some(5)])]).is_err());
}

// --------------------------------------------------------------- proptest

fn shape_and_perm() -> impl Strategy<Value = (Vec<usize>, Vec<usize>)> {
    prop::collection::vec(1usize..4, 1..4).prop_flat_map(|dims| {
        let perm = Just((0..dims.len()).collect::<Vec<_>>()).prop_shuffle();
        (Just(dims), perm)
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn reshape_and_transpose_round_trip((dims, perm) in shape_and_perm()) {
        let a = arange(&dims);
        let x = tensor(&a);
        let p: Vec<i64> = perm.iter().map(|&v| v as i64).collect();
        let t = x.transpose(&p).unwrap();
        prop_assert_eq!(read(&t), a.clone().permuted_axes(IxDyn(&perm)));
        let mut inverse = vec![0i64; perm.len()];
        for (i, &q) in perm.iter().enumerate() {
            inverse[q] = i as i64;
        }
        prop_assert_eq!(read(&t.transpose(&inverse).unwrap()), a.clone());
        let flat = x.reshape(&[-1]).unwrap();
        let dims_i: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
        prop_assert_eq!(read(&flat.reshape(&dims_i).unwrap()), a);
    }
}
