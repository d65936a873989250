//! TensorFlow-style printing. Every expected value part below is what
//! NumPy 2.x prints for the same array (`str(array)`), which is what
//! TensorFlow shows inside `tf.Tensor(...)`.

use xlafn::prelude::*;

fn show(t: &Tensor) -> String {
    t.to_string()
}

#[test]
fn scalars() -> Result<()> {
    assert_eq!(
        show(&Tensor::scalar(2.0f32)),
        "tf.Tensor(2.0, shape=(), dtype=f32)"
    );
    assert_eq!(
        show(&Tensor::scalar(4i32)),
        "tf.Tensor(4, shape=(), dtype=i32)"
    );
    assert_eq!(
        show(&Tensor::scalar(true)),
        "tf.Tensor(True, shape=(), dtype=bool)"
    );
    assert_eq!(
        show(&Tensor::scalar(1.5e-5f32)),
        "tf.Tensor(1.5e-05, shape=(), dtype=f32)"
    );
    assert_eq!(
        show(&Tensor::scalar(1.0f64 / 3.0)),
        "tf.Tensor(0.3333333333333333, shape=(), dtype=f64)"
    );
    assert_eq!(
        show(&Tensor::scalar(1e16f64)),
        "tf.Tensor(1e+16, shape=(), dtype=f64)"
    );
    assert_eq!(
        show(&Tensor::scalar(f32::NAN)),
        "tf.Tensor(nan, shape=(), dtype=f32)"
    );
    let h = Tensor::fill(&[], 0.1, DType::F16)?;
    assert_eq!(show(&h), "tf.Tensor(0.1, shape=(), dtype=f16)");
    Ok(())
}

#[test]
fn integer_vectors_and_matrices() -> Result<()> {
    let v = Tensor::vector(&[4i32, 1])?;
    assert_eq!(show(&v), "tf.Tensor([4 1], shape=(2,), dtype=i32)");
    let m = Tensor::from_vec(vec![1i32, 2, 3, 4], &[2, 2])?;
    assert_eq!(
        show(&m),
        "tf.Tensor(\n[[1 2]\n [3 4]], shape=(2, 2), dtype=i32)"
    );
    let u = Tensor::vector(&[3u8, 200])?;
    assert_eq!(show(&u), "tf.Tensor([  3 200], shape=(2,), dtype=u8)");
    let big = Tensor::vector(&[i64::MIN, i64::MAX])?;
    assert_eq!(
        show(&big),
        "tf.Tensor([-9223372036854775808  9223372036854775807], shape=(2,), dtype=i64)"
    );
    Ok(())
}

#[test]
fn three_dims_have_blank_lines_between_blocks() -> Result<()> {
    let t = Tensor::range(0.0, 24.0, 1.0, DType::I32)?;
    let t = Tensor::from_vec(t.to_vec::<i32>()?, &[2, 3, 4])?;
    let expected = "tf.Tensor(\n\
        [[[ 0  1  2  3]\n  [ 4  5  6  7]\n  [ 8  9 10 11]]\n\n \
        [[12 13 14 15]\n  [16 17 18 19]\n  [20 21 22 23]]], shape=(2, 3, 4), dtype=i32)";
    assert_eq!(show(&t), expected);
    Ok(())
}

#[test]
fn bools() -> Result<()> {
    let b = Tensor::vector(&[true, false])?;
    assert_eq!(show(&b), "tf.Tensor([ True False], shape=(2,), dtype=bool)");
    let c = Tensor::from_vec(vec![true, false], &[2, 1])?;
    assert_eq!(
        show(&c),
        "tf.Tensor(\n[[ True]\n [False]], shape=(2, 1), dtype=bool)"
    );
    Ok(())
}

#[test]
fn floats_share_a_fractional_width() -> Result<()> {
    let f = Tensor::vector(&[1f32, 2.5, 3.])?;
    assert_eq!(show(&f), "tf.Tensor([1.  2.5 3. ], shape=(3,), dtype=f32)");
    let f = Tensor::vector(&[-1.5f64, 0.25, 100.0])?;
    assert_eq!(
        show(&f),
        "tf.Tensor([ -1.5    0.25 100.  ], shape=(3,), dtype=f64)"
    );
    // f32 0.1 prints as the shortest text that reads back as that f32.
    let f = Tensor::vector(&[0.1f32, 0.2, 0.3])?;
    assert_eq!(show(&f), "tf.Tensor([0.1 0.2 0.3], shape=(3,), dtype=f32)");
    let f = Tensor::vector(&[f32::NAN, 1.0, f32::NEG_INFINITY])?;
    assert_eq!(
        show(&f),
        "tf.Tensor([ nan   1. -inf], shape=(3,), dtype=f32)"
    );
    Ok(())
}

#[test]
fn floats_switch_to_scientific_notation() -> Result<()> {
    let f = Tensor::vector(&[1f64, 10000.])?;
    assert_eq!(
        show(&f),
        "tf.Tensor([1.e+00 1.e+04], shape=(2,), dtype=f64)"
    );
    let f = Tensor::vector(&[1e-5f32, 1.5])?;
    assert_eq!(
        show(&f),
        "tf.Tensor([1.0e-05 1.5e+00], shape=(2,), dtype=f32)"
    );
    Ok(())
}

#[test]
fn long_rows_wrap_at_75_columns() -> Result<()> {
    let t = Tensor::range(0.0, 40000.0, 1000.0, DType::I32)?;
    let expected = "tf.Tensor(\n\
        [    0  1000  2000  3000  4000  5000  6000  7000  8000  9000 10000 11000\n \
        12000 13000 14000 15000 16000 17000 18000 19000 20000 21000 22000 23000\n \
        24000 25000 26000 27000 28000 29000 30000 31000 32000 33000 34000 35000\n \
        36000 37000 38000 39000], shape=(40,), dtype=i32)";
    assert_eq!(show(&t), expected);
    let f = Tensor::range(0.0, 12.0, 0.5, DType::F32)?;
    let expected = "tf.Tensor(\n\
        [ 0.   0.5  1.   1.5  2.   2.5  3.   3.5  4.   4.5  5.   5.5  6.   6.5\n  \
        7.   7.5  8.   8.5  9.   9.5 10.  10.5 11.  11.5], shape=(24,), dtype=f32)";
    assert_eq!(show(&f), expected);
    Ok(())
}

#[test]
fn large_tensors_are_summarised() -> Result<()> {
    let v = Tensor::range(0.0, 2000.0, 1.0, DType::I32)?;
    assert_eq!(
        show(&v),
        "tf.Tensor([   0    1    2 ... 1997 1998 1999], shape=(2000,), dtype=i32)"
    );
    let m = Tensor::range(0.0, 1600.0, 1.0, DType::I32)?;
    let m = Tensor::from_vec(m.to_vec::<i32>()?, &[40, 40])?;
    let expected = "tf.Tensor(\n\
        [[   0    1    2 ...   37   38   39]\n \
        [  40   41   42 ...   77   78   79]\n \
        [  80   81   82 ...  117  118  119]\n \
        ...\n \
        [1480 1481 1482 ... 1517 1518 1519]\n \
        [1520 1521 1522 ... 1557 1558 1559]\n \
        [1560 1561 1562 ... 1597 1598 1599]], shape=(40, 40), dtype=i32)";
    assert_eq!(show(&m), expected);
    // Exactly 1000 elements are not summarised.
    let t = Tensor::zeros(&[1000], DType::U8);
    assert!(!show(&t).contains("..."));
    Ok(())
}

#[test]
fn empty_tensors() -> Result<()> {
    assert_eq!(
        show(&Tensor::zeros(&[0], DType::F32)),
        "tf.Tensor([], shape=(0,), dtype=f32)"
    );
    assert_eq!(
        show(&Tensor::zeros(&[2, 0], DType::I32)),
        "tf.Tensor([], shape=(2, 0), dtype=i32)"
    );
    Ok(())
}

/// `{:?}` names the type without reading the device (a large tensor in a
/// log line or panic message is not copied back); `{}` shows the values.
#[test]
fn debug_is_short_and_display_has_the_values() {
    let t = Tensor::scalar(7i64);
    assert_eq!(format!("{t:?}"), "Tensor(shape=(), dtype=i64)");
    assert_eq!(format!("{t}"), "tf.Tensor(7, shape=(), dtype=i64)");
    let big = Tensor::zeros(&[1000, 1000], DType::F32);
    assert_eq!(format!("{big:?}"), "Tensor(shape=(1000, 1000), dtype=f32)");
    let f = xlafn::function(|x: Tensor| {
        assert_eq!(format!("{x:?}"), "Tensor(\"f:0\", shape=(2,), dtype=f32)");
        x
    });
    let _ = f.call((&Tensor::vector(&[1f32, 2.]).unwrap(),)).unwrap();
}
