//! `split` / `split_sizes` (`tf.split`): pieces against `ndarray` slicing,
//! eager and compiled; the gradient against one worked out by hand (a
//! piece's cotangent lands on its rows, an unused piece's rows get zeros)
//! and against central finite differences; the gradient program is one
//! `concatenate`, not pieces written into zeros; bad sizes are clear errors.

use ndarray::{Array, ArrayD, Axis, IxDyn};
use xlafn::ArraySpec;
use xlafn::ir::{Shape, TensorType};
use xlafn::ops::OpDef;
use xlafn::ops::split::Split;
use xlafn::prelude::*;

fn arange(dims: &[usize]) -> ArrayD<f64> {
    let n: usize = dims.iter().product();
    Array::from_iter((0..n).map(|v| v as f64 * 0.5 - 3.0))
        .into_shape_with_order(IxDyn(dims))
        .unwrap()
}

fn assert_invalid<T: std::fmt::Debug>(r: xlafn::Result<T>, needle: &str) {
    let e = r.expect_err("an error");
    let msg = e.to_string();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{msg}");
    assert!(msg.contains("split") && msg.contains(needle), "{msg}");
}

/// The pieces `ndarray` gives for `sizes` along `axis`.
fn reference(a: &ArrayD<f64>, sizes: &[usize], axis: usize) -> Vec<ArrayD<f64>> {
    let mut start = 0;
    sizes
        .iter()
        .map(|&s| {
            let piece = a
                .slice_axis(Axis(axis), (start..start + s).into())
                .to_owned();
            start += s;
            piece
        })
        .collect()
}

#[test]
fn pieces_match_ndarray_on_every_axis_eager_and_compiled() {
    let a = arange(&[4, 6, 2]);
    let x = Tensor::from_ndarray(&a).unwrap();
    for axis in 0..3 {
        let n = a.shape()[axis];
        let parts = if n.is_multiple_of(2) { 2 } else { 1 };
        let want = reference(&a, &vec![n / parts; parts], axis);
        let got = x.split(parts as i64, axis as i64).unwrap();
        assert_eq!(got.len(), want.len());
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(&g.to_ndarray::<f64>().unwrap(), w, "axis {axis}");
        }
        // The same through a negative axis, compiled.
        let neg = axis as i64 - 3;
        let f = function(move |x: Tensor| -> Result<Vec<Tensor>> { x.split(parts as i64, neg) });
        let got = f.call((x.clone(),)).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(&g.to_ndarray::<f64>().unwrap(), w, "compiled axis {axis}");
        }
    }
}

#[test]
fn sizes_with_one_minus_one_take_the_rest() {
    let a = arange(&[3, 7]);
    let x = Tensor::from_ndarray(&a).unwrap();
    let got = x.split_sizes(&[2, -1, 0, 1], 1).unwrap();
    let want = reference(&a, &[2, 4, 0, 1], 1);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(
            g.dims(),
            w.shape().iter().map(|&d| d as i64).collect::<Vec<_>>()
        );
        assert_eq!(&g.to_ndarray::<f64>().unwrap(), w);
    }
}

#[test]
fn bad_sizes_are_clear_errors() {
    let x = Tensor::from_ndarray(&arange(&[4, 6])).unwrap();
    assert_invalid(x.split(4, 1), "4 equal pieces");
    assert_invalid(x.split(0, 1), "0 equal pieces");
    assert_invalid(x.split(2, 2), "out of range");
    assert_invalid(x.split_sizes(&[-1, -1], 1), "at most one -1");
    assert_invalid(x.split_sizes(&[2, 2], 1), "add up to 4");
    assert_invalid(x.split_sizes(&[7, -1], 1), "non-negative");
    let op = Split {
        axis: 0,
        sizes: vec![],
    };
    let t = TensorType::new(DType::F32, Shape::known(&[3]));
    assert_invalid(op.infer(&[t]), "one or more");
    let unknown = TensorType::new(DType::F32, Shape::unknown_rank());
    let op = Split {
        axis: 0,
        sizes: vec![1, 2],
    };
    assert_invalid(op.infer(&[unknown]), "known rank");
}

/// `loss = sum(p0 * c0) + 3 * sum(p2)`: the gradient is `c0` on the first
/// piece's rows, zeros on the unused middle piece and 3 on the last.
fn loss(x: &Tensor, c0: &Tensor) -> Result<Tensor> {
    let p = x.split_sizes(&[1, 2, 1], 0)?;
    p[0].mul(c0)?
        .reduce_sum(&[], false)?
        .add(&p[2].reduce_sum(&[], false)?.mul_scalar(3.0)?)
}

#[test]
fn gradient_is_the_pieces_cotangents_side_by_side() {
    let x = Tensor::from_ndarray(&arange(&[4, 3])).unwrap();
    let c0 = Tensor::from_slice(&[1.0f64, -2.0, 0.5], &[1, 3]).unwrap();
    let grad = |x: &Tensor, c0: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let l = loss(x, c0)?;
        Ok(tape
            .gradient(&l, &[x.into()])?
            .remove(0)
            .expect("a gradient"))
    };
    let want = [1.0, -2.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 3.0, 3.0, 3.0];
    assert_eq!(grad(&x, &c0).unwrap().to_vec::<f64>().unwrap(), want);
    let f = function(move |x: Tensor, c0: Tensor| grad(&x, &c0));
    assert_eq!(
        f.call((x.clone(), c0.clone()))
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        want
    );

    // Central finite differences of the loss, element by element.
    let base = arange(&[4, 3]);
    let eps = 1e-6;
    for (i, w) in want.iter().enumerate() {
        let at = |d: f64| {
            let mut a = base.clone();
            a.as_slice_mut().unwrap()[i] += d;
            let l = loss(&Tensor::from_ndarray(&a).unwrap(), &c0).unwrap();
            l.to_vec::<f64>().unwrap()[0]
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        assert!((numeric - w).abs() < 1e-6, "element {i}: {numeric} vs {w}");
    }

    // One concatenate assembles the gradient; no piece is padded or
    // written into zeros.
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::F64, &[4, 3]),
            ArraySpec::new(DType::F64, &[1, 3]),
        ])
        .unwrap();
    assert_eq!(text.matches("stablehlo.concatenate").count(), 1, "{text}");
    assert!(!text.contains("stablehlo.pad"), "{text}");
    assert!(!text.contains("dynamic_update_slice"), "{text}");
}
