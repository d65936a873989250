//! Host values that a tensor's dtype cannot hold are TensorFlow's
//! TypeError, not a silent wrap, truncation or zero; integers to negative
//! integer powers are refused as TensorFlow refuses them; a host array
//! whose bytes disagree with its shape cannot be read.

use xlafn::prelude::*;
use xlafn::runtime::HostArray;

fn type_error<T: std::fmt::Debug>(r: Result<T>, value: &str, dtype: &str) {
    match r {
        Err(Error::Type(m)) => assert_eq!(
            m,
            format!("Cannot convert {value} to EagerTensor of dtype {dtype}")
        ),
        other => panic!("expected a TypeError for {value} as {dtype}, got {other:?}"),
    }
}

#[test]
fn host_scalars_that_do_not_fit_the_dtype_are_type_errors() -> Result<()> {
    let bytes = Tensor::from_vec(vec![1u8], &[1])?;
    type_error(bytes.add_scalar(1000), "1000", "u8");
    type_error(bytes.sub_scalar(-1), "-1", "u8");
    assert_eq!(bytes.add_scalar(254)?.to_vec::<u8>()?, [255]);

    let ints = Tensor::from_vec(vec![1i32, 2], &[2])?;
    type_error(ints.add_scalar(f64::NAN), "NaN", "i32");
    type_error(ints.add_scalar(f64::INFINITY), "inf", "i32");
    type_error(ints.mul_scalar(1.5), "1.5", "i32");
    type_error(ints.add_scalar(1i64 << 40), "1099511627776", "i32");
    // Whole floats are exact integers: TensorFlow's `x * 2.0` style works.
    assert_eq!(ints.mul_scalar(2.0)?.to_vec::<i32>()?, [2, 4]);
    assert_eq!(ints.add_scalar(-3)?.to_vec::<i32>()?, [-2, -1]);

    let unsigned = Tensor::from_vec(vec![5u64], &[1])?;
    assert_eq!(
        unsigned.add_scalar(u64::MAX - 5)?.to_vec::<u64>()?,
        [u64::MAX]
    );
    type_error(unsigned.add_scalar(-1), "-1", "u64");

    let flags = Tensor::from_vec(vec![true, false], &[2])?;
    type_error(flags.logical_and_scalar(2), "2", "bool");
    assert_eq!(
        flags.logical_and_scalar(1)?.to_vec::<bool>()?,
        [true, false]
    );

    // Floats take every number; beyond f32's range is infinity, as NumPy.
    let floats = Tensor::from_vec(vec![1f32], &[1])?;
    assert_eq!(floats.add_scalar(1e300)?.to_vec::<f32>()?, [f32::INFINITY]);
    assert!(floats.add_scalar(f64::NAN)?.to_vec::<f32>()?[0].is_nan());

    // The same rule while tracing: the trace fails with the TypeError.
    let f = function(|x: Tensor| x.add_scalar(1000));
    type_error(f.call((&bytes,)), "1000", "u8");
    Ok(())
}

#[test]
fn fills_refuse_values_the_dtype_cannot_hold() {
    type_error(Tensor::fill(&[2], 300, DType::U8), "300", "u8");
    type_error(Tensor::fill(&[2], -1, DType::U16), "-1", "u16");
    type_error(Tensor::fill(&[2], 0.5, DType::I64), "0.5", "i64");
    let x = Tensor::from_vec(vec![1i8, 2], &[2]).unwrap();
    type_error(x.fill_like(128), "128", "i8");
}

#[test]
fn integers_to_negative_integer_powers_are_refused() -> Result<()> {
    let x = Tensor::from_vec(vec![1i32, 2, 3], &[3])?;
    let refused = |r: Result<Tensor>| match r {
        Err(Error::InvalidArgument { op, message }) => {
            assert_eq!(op, "pow");
            assert!(message.contains("negative integer powers"), "{message}");
        }
        other => panic!("expected the pow error, got {other:?}"),
    };
    refused(x.pow_scalar(-1));
    refused(x.pow(&Tensor::from_vec(vec![2i32, -1, 0], &[3])?));
    assert_eq!(x.pow_scalar(2)?.to_vec::<i32>()?, [1, 4, 9]);
    assert_eq!(
        x.pow(&Tensor::from_vec(vec![0i32, 3, 1], &[3])?)?
            .to_vec::<i32>()?,
        [1, 8, 3]
    );
    // A host exponent is known while tracing too.
    let f = function(|x: Tensor| x.pow_scalar(-2));
    refused(f.call((&x,)));
    // Unsigned and float powers are unaffected.
    let floats = Tensor::from_vec(vec![2f32], &[1])?;
    assert_eq!(floats.pow_scalar(-1)?.to_vec::<f32>()?, [0.5]);
    Ok(())
}

/// A tensor exponent inside a compiled function is data known only at run
/// time: it gets `1 / x^|e|` truncated toward zero (documented), the same
/// on every device: 1 for base 1, ±1 for base -1, else 0.
#[test]
fn a_traced_negative_tensor_exponent_truncates_the_reciprocal() -> Result<()> {
    let f = function(|x: Tensor, e: Tensor| x.pow(&e));
    let x = Tensor::from_vec(vec![1i32, -1, -1, 2, 5, 0, -3, 3], &[8])?;
    let e = Tensor::from_vec(vec![-1i32, -1, -2, -1, -2, -3, 3, 2], &[8])?;
    // By hand: 1, 1/-1, 1/1, 1/2, 1/25, 1/0 (defined as 0), then the
    // non-negative exponents as usual.
    assert_eq!(
        f.call((&x, &e))?.to_vec::<i32>()?,
        [1, -1, 1, 0, 0, 0, -27, 9]
    );
    let wide = Tensor::from_vec(vec![-1i64, 7], &[2])?;
    let odd = Tensor::from_vec(vec![-5i64, -9], &[2])?;
    assert_eq!(f.call((&wide, &odd))?.to_vec::<i64>()?, [-1, 0]);
    Ok(())
}

#[test]
fn host_arrays_whose_bytes_disagree_with_their_shape_cannot_be_read() {
    let good = HostArray::from_vec(vec![1f32, 2.], &[2]);
    assert_eq!(good.to_vec::<f32>().unwrap(), [1., 2.]);
    let mut extra = good.clone();
    extra.bytes.push(0);
    assert!(matches!(extra.to_vec::<f32>(), Err(Error::Value(m)) if m.contains("needs 8 bytes")));
    let mut short = good.clone();
    short.bytes.truncate(6);
    assert!(short.to_vec::<f32>().is_err());
    let mut wrong_dims = good.clone();
    wrong_dims.dims = vec![3];
    assert!(wrong_dims.to_vec::<f32>().is_err());
    let mut huge = good;
    huge.dims = vec![i64::MAX, i64::MAX];
    assert!(huge.to_vec::<f32>().is_err());
}
