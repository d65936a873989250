//! `matmul` against `ndarray`'s `dot`: plain, transposed, batched (a loop
//! of 2-D dots) and with NumPy-broadcast batch dimensions; plus its errors
//! and its shape rule with unknown dimensions.

use ndarray::{Array2, ArrayD, Axis, IxDyn, s};
use xlafn::ir::{Shape, TensorType};
use xlafn::ops::OpDef;
use xlafn::ops::linalg::MatMul;
use xlafn::prelude::*;

/// Deterministic small values so f32 products are exact.
fn sample(dims: &[usize], seed: usize) -> ArrayD<f32> {
    let n: usize = dims.iter().product();
    let v: Vec<f32> = (0..n).map(|i| ((i * 5 + seed) % 7) as f32 - 3.0).collect();
    ArrayD::from_shape_vec(IxDyn(dims), v).unwrap()
}

fn tensor(a: &ArrayD<f32>) -> Tensor {
    Tensor::from_ndarray(a).unwrap()
}

fn as2(a: &ArrayD<f32>) -> Array2<f32> {
    a.clone().into_dimensionality().unwrap()
}

/// The `InvalidArgument` error's op and message, or a panic.
fn invalid(r: xlafn::Result<Tensor>) -> (String, String) {
    match r {
        Err(Error::InvalidArgument { op, message }) => (op, message),
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(t) => panic!("expected an error, got a tensor of shape {}", t.shape()),
    }
}

/// Reference batched matmul: broadcasts both operands' batch dims to
/// `batch` with ndarray, then loops over batch indices doing 2-D `dot`s.
fn reference(a: &ArrayD<f32>, b: &ArrayD<f32>, batch: &[usize]) -> ArrayD<f32> {
    let full = |x: &ArrayD<f32>| {
        let mut dims = batch.to_vec();
        dims.extend_from_slice(&x.shape()[x.ndim() - 2..]);
        let v = x.broadcast(IxDyn(&dims)).unwrap().to_owned();
        let n: usize = batch.iter().product();
        v.into_shape_with_order(IxDyn(&[n, dims[dims.len() - 2], dims[dims.len() - 1]]))
            .unwrap()
    };
    let (fa, fb) = (full(a), full(b));
    let (m, n) = (fa.shape()[1], fb.shape()[2]);
    let mut out = Vec::new();
    for i in 0..fa.shape()[0] {
        let x = as2(&fa.index_axis(Axis(0), i).to_owned());
        let y = as2(&fb.index_axis(Axis(0), i).to_owned());
        out.extend(x.dot(&y).iter().copied());
    }
    let mut dims = batch.to_vec();
    dims.extend([m, n]);
    ArrayD::from_shape_vec(IxDyn(&dims), out).unwrap()
}

#[test]
fn plain_matmul_matches_dot() {
    let a = sample(&[3, 4], 1);
    let b = sample(&[4, 2], 2);
    let got = tensor(&a).matmul(&tensor(&b)).unwrap();
    assert_eq!(got.dims(), vec![3, 2]);
    let want = as2(&a).dot(&as2(&b)).into_dyn();
    assert_eq!(got.to_ndarray::<f32>().unwrap(), want);
}

#[test]
fn hand_computed_2x2() {
    let a = Tensor::from_slice(&[1f32, 2., 3., 4.], &[2, 2]).unwrap();
    let b = Tensor::from_slice(&[5f32, 6., 7., 8.], &[2, 2]).unwrap();
    let c = a.matmul(&b).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(c, vec![19., 22., 43., 50.]);
    let i = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let j = Tensor::from_slice(&[5i32, 6, 7, 8], &[2, 2]).unwrap();
    assert_eq!(
        i.matmul(&j).unwrap().to_vec::<i32>().unwrap(),
        vec![19, 22, 43, 50]
    );
}

#[test]
fn transposes_match_dot_of_transposed() {
    let a = sample(&[4, 3], 3);
    let b = sample(&[2, 4], 4);
    let (ta, tb) = (tensor(&a), tensor(&b));
    let want = as2(&a).t().dot(&as2(&b).t()).into_dyn();
    let got = ta.matmul_t(&tb, true, true).unwrap();
    assert_eq!(got.to_ndarray::<f32>().unwrap(), want);
    let c = sample(&[4, 2], 5);
    let want = as2(&a).t().dot(&as2(&c)).into_dyn();
    let got = ta.matmul_t(&tensor(&c), true, false).unwrap();
    assert_eq!(got.to_ndarray::<f32>().unwrap(), want);
    let d = sample(&[5, 3], 6);
    let want = as2(&a).dot(&as2(&d).t()).into_dyn();
    let got = ta.matmul_t(&tensor(&d), false, true).unwrap();
    assert_eq!(got.to_ndarray::<f32>().unwrap(), want);
}

#[test]
fn batched_matmul_matches_a_loop_of_dots() {
    let a = sample(&[3, 2, 4], 1);
    let b = sample(&[3, 4, 5], 2);
    let got = tensor(&a).matmul(&tensor(&b)).unwrap();
    assert_eq!(got.dims(), vec![3, 2, 5]);
    assert_eq!(got.to_ndarray::<f32>().unwrap(), reference(&a, &b, &[3]));
    for i in 0..3 {
        let x = as2(&a.slice(s![i, .., ..]).to_owned().into_dyn());
        let y = as2(&b.slice(s![i, .., ..]).to_owned().into_dyn());
        let got_i = got.to_ndarray::<f32>().unwrap();
        assert_eq!(got_i.index_axis(Axis(0), i), x.dot(&y).into_dyn());
    }
}

#[test]
fn batch_dims_broadcast_numpy_style() {
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[2, 3], &[4, 3, 5], &[4]),
        (&[5, 1, 2, 3], &[4, 3, 2], &[5, 4]),
        (&[1, 2, 3], &[6, 3, 2], &[6]),
        (&[2, 1, 2, 2], &[1, 3, 2, 2], &[2, 3]),
    ];
    for (i, (da, db, batch)) in cases.into_iter().enumerate() {
        let a = sample(da, i);
        let b = sample(db, i + 1);
        let got = tensor(&a).matmul(&tensor(&b)).unwrap();
        let want = reference(&a, &b, batch);
        assert_eq!(got.to_ndarray::<f32>().unwrap(), want, "{da:?} @ {db:?}");
    }
}

#[test]
fn zero_sized_dims() {
    let a = Tensor::from_slice::<f32>(&[], &[2, 0]).unwrap();
    let b = Tensor::from_slice::<f32>(&[], &[0, 3]).unwrap();
    let c = a.matmul(&b).unwrap();
    assert_eq!(c.dims(), vec![2, 3]);
    assert_eq!(c.to_vec::<f32>().unwrap(), vec![0.0; 6]);
    let e = Tensor::from_slice::<f32>(&[], &[0, 2, 2]).unwrap();
    let f = Tensor::from_slice(&[1f32, 0., 0., 1.], &[2, 2]).unwrap();
    assert_eq!(e.matmul(&f).unwrap().dims(), vec![0, 2, 2]);
}

#[test]
fn inner_dimension_mismatch_names_both_operands() {
    let a = tensor(&sample(&[2, 3], 0));
    let b = tensor(&sample(&[4, 5], 0));
    let (op, msg) = invalid(a.matmul(&b));
    assert_eq!(op, "matmul");
    assert!(msg.contains("inner dimensions"), "{msg}");
    assert!(
        msg.contains("f32(2, 3)") && msg.contains("f32(4, 5)"),
        "{msg}"
    );
    let (_, msg) = invalid(a.matmul_t(&tensor(&sample(&[2, 3], 0)), false, false));
    assert!(msg.contains("3 (from a) and 2 (from b)"), "{msg}");
    // Transposing a makes the same pair compatible the other way.
    assert!(
        a.matmul_t(&tensor(&sample(&[2, 5], 0)), true, false)
            .is_ok()
    );
    let (_, msg) = invalid(a.matmul_t(&b, true, false));
    assert!(msg.contains("transpose_a=true"), "{msg}");
}

#[test]
fn dtype_rank_and_batch_errors() {
    let a = tensor(&sample(&[2, 2], 0));
    let i = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let (op, msg) = invalid(a.matmul(&i));
    assert_eq!(op, "matmul");
    assert!(msg.contains("f32") && msg.contains("i32"), "{msg}");
    let v = Tensor::from_slice(&[1f32, 2.], &[2]).unwrap();
    let (op, msg) = invalid(v.matmul(&a));
    assert_eq!(op, "matmul");
    assert!(msg.contains("rank >= 2") && msg.contains("rank 1"), "{msg}");
    let (_, msg) = invalid(a.matmul(&v));
    assert!(msg.contains("operand b"), "{msg}");
    let x = tensor(&sample(&[2, 2, 2], 0));
    let y = tensor(&sample(&[3, 2, 2], 0));
    let (_, msg) = invalid(x.matmul(&y));
    assert!(msg.contains("batch dimensions (2,) and (3,)"), "{msg}");
    let b = Tensor::from_slice(&[true, false, false, true], &[2, 2]).unwrap();
    let (_, msg) = invalid(b.matmul(&b));
    assert!(msg.contains("numeric"), "{msg}");
}

fn ty(dims: Vec<Option<i64>>) -> TensorType {
    TensorType::new(DType::F32, Shape::from_dims(dims))
}

#[test]
fn infer_with_unknown_dims() {
    let op = MatMul::default();
    let out = op
        .infer(&[ty(vec![None, Some(2), None]), ty(vec![Some(3), None])])
        .unwrap();
    assert_eq!(out[0].shape, Shape::from_dims(vec![None, Some(2), None]));
    let out = op
        .infer(&[
            ty(vec![Some(1), Some(2), Some(3)]),
            ty(vec![None, Some(3), Some(4)]),
        ])
        .unwrap();
    assert_eq!(out[0].shape, Shape::from_dims(vec![None, Some(2), Some(4)]));
    let t = MatMul {
        transpose_a: true,
        transpose_b: false,
        ..Default::default()
    };
    let out = t
        .infer(&[ty(vec![Some(3), None]), ty(vec![Some(3), Some(7)])])
        .unwrap();
    assert_eq!(out[0].shape, Shape::from_dims(vec![None, Some(7)]));
    let unknown = TensorType::new(DType::F32, Shape::unknown_rank());
    let out = op
        .infer(&[unknown.clone(), ty(vec![Some(3), Some(4)])])
        .unwrap();
    assert_eq!(out[0].shape, Shape::unknown_rank());
    assert!(op.infer(&[unknown, ty(vec![Some(3)])]).is_err());
    assert!(
        op.infer(&[ty(vec![None, Some(2)]), ty(vec![Some(3), None])])
            .is_err()
    );
}
