//! Constant-making ops: fill/zeros/ones(/_like), iota/range and stateless
//! random numbers, checked against hand-written values.

use xlafn::prelude::*;

#[test]
fn fill_zeros_ones_for_several_dtypes() -> Result<()> {
    let t = Tensor::fill(&[2, 3], 7, DType::I32)?;
    assert_eq!(t.dims(), vec![2, 3]);
    assert_eq!(t.to_vec::<i32>()?, vec![7; 6]);
    assert_eq!(
        Tensor::fill(&[3], 2.5, DType::F64)?.to_vec::<f64>()?,
        vec![2.5; 3]
    );
    assert_eq!(
        Tensor::fill(&[2], 1.75f32, DType::F16)?.to_f64_vec()?,
        vec![1.75; 2]
    );
    assert_eq!(
        Tensor::fill(&[2], 3.0, DType::U8)?.to_vec::<u8>()?,
        vec![3, 3]
    );
    // A value the dtype cannot hold is TensorFlow's TypeError, not a
    // truncation (tests/robust_conversions.rs has the rest).
    assert!(matches!(
        Tensor::fill(&[2], 3.9, DType::U8),
        Err(Error::Type(m)) if m.contains("Cannot convert 3.9")
    ));
    assert_eq!(
        Tensor::fill(&[2], u64::MAX, DType::U64)?.to_vec::<u64>()?,
        vec![u64::MAX; 2]
    );
    assert_eq!(
        Tensor::fill(&[2], true, DType::Bool)?.to_vec::<bool>()?,
        vec![true; 2]
    );
    assert_eq!(
        Tensor::zeros(&[2, 2], DType::F32).to_vec::<f32>()?,
        vec![0.0; 4]
    );
    assert_eq!(Tensor::ones(&[3], DType::I64).to_vec::<i64>()?, vec![1; 3]);
    assert_eq!(
        Tensor::try_ones(&[2], DType::Bool)?.to_vec::<bool>()?,
        vec![true; 2]
    );
    assert_eq!(Tensor::try_zeros(&[0, 4], DType::F32)?.dims(), vec![0, 4]);
    let s = Tensor::fill(&[], -4, DType::I8)?;
    assert_eq!((s.dims(), s.to_vec::<i8>()?), (vec![], vec![-4]));
    Ok(())
}

#[test]
fn like_variants_keep_shape_and_dtype() -> Result<()> {
    let x = Tensor::from_vec(vec![1i16, 2, 3, 4, 5, 6], &[3, 2])?;
    let z = x.zeros_like()?;
    assert_eq!((z.dtype(), z.dims()), (DType::I16, vec![3, 2]));
    assert_eq!(z.to_vec::<i16>()?, vec![0; 6]);
    assert_eq!(x.ones_like()?.to_vec::<i16>()?, vec![1; 6]);
    assert_eq!(x.fill_like(-9)?.to_vec::<i16>()?, vec![-9; 6]);
    let y = Tensor::from_vec(vec![0.5f32, 1.5], &[2])?;
    assert_eq!(y.fill_like(0.25)?.to_vec::<f32>()?, vec![0.25, 0.25]);
    Ok(())
}

#[test]
fn fill_rejects_bad_shapes_and_strings() {
    let err = Tensor::fill(&[2, -1], 0, DType::F32).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, message } if op == "fill" && message.contains("negative"))
    );
    let err = Tensor::fill(&[2], 0, DType::String).unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { .. }));
}

#[test]
fn iota_counts_along_an_axis() -> Result<()> {
    let t = Tensor::iota(&[2, 3], 1, DType::I32)?;
    assert_eq!(t.to_vec::<i32>()?, vec![0, 1, 2, 0, 1, 2]);
    let t = Tensor::iota(&[2, 3], 0, DType::F32)?;
    assert_eq!(t.to_vec::<f32>()?, vec![0., 0., 0., 1., 1., 1.]);
    let t = Tensor::iota(&[2, 2], -1, DType::U8)?;
    assert_eq!(t.to_vec::<u8>()?, vec![0, 1, 0, 1]);
    let err = Tensor::iota(&[2], 1, DType::I32).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
    let err = Tensor::iota(&[2], 0, DType::Bool).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    Ok(())
}

#[test]
fn range_matches_tf_range() -> Result<()> {
    let r = Tensor::range(0.0, 5.0, 1.0, DType::I32)?;
    assert_eq!(r.to_vec::<i32>()?, vec![0, 1, 2, 3, 4]);
    let r = Tensor::range(3.0, 18.0, 3.0, DType::I64)?;
    assert_eq!(r.to_vec::<i64>()?, vec![3, 6, 9, 12, 15]);
    let r = Tensor::range(10.0, 2.0, -3.0, DType::I32)?;
    assert_eq!(r.to_vec::<i32>()?, vec![10, 7, 4]);
    let r = Tensor::range(5.0, 0.0, -2.0, DType::U8)?;
    assert_eq!(r.to_vec::<u8>()?, vec![5, 3, 1]);
    let r = Tensor::range(0.0, 1.0, 0.25, DType::F32)?;
    assert_eq!(r.to_vec::<f32>()?, vec![0.0, 0.25, 0.5, 0.75]);
    let r = Tensor::range(1.0, -0.5, -0.5, DType::F64)?;
    assert_eq!(r.to_vec::<f64>()?, vec![1.0, 0.5, 0.0]);
    // ceil((1 - 0) / 0.3) = 4 elements: 0, 0.3, 0.6, 0.9.
    let r = Tensor::range(0.0, 1.0, 0.3, DType::F64)?;
    let v = r.to_vec::<f64>()?;
    assert_eq!(v.len(), 4);
    assert!((v[3] - 0.9).abs() < 1e-12, "{v:?}");
    let empty = Tensor::range(5.0, 2.0, 1.0, DType::I32)?;
    assert_eq!(empty.dims(), vec![0]);
    assert_eq!(Tensor::range(2.0, 2.0, 1.0, DType::F32)?.dims(), vec![0]);
    Ok(())
}

#[test]
fn range_errors() {
    let err = Tensor::range(0.0, 5.0, 0.0, DType::I32).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, message } if op == "range" && message.contains("delta != 0")),
        "{err}"
    );
    let err = Tensor::range(0.0, 5.0, 0.5, DType::I32).unwrap_err();
    assert!(err.to_string().contains("delta != 0"), "{err}");
    let err = Tensor::range(0.0, f64::INFINITY, 1.0, DType::F32).unwrap_err();
    assert!(err.to_string().contains("finite"), "{err}");
    let err = Tensor::range(-3.0, 2.0, 1.0, DType::U8).unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}

fn mean_std(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean) * (x - mean)).sum::<f64>() / n;
    (mean, var.sqrt())
}

#[test]
fn random_uniform_is_deterministic_per_seed() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
        let a = Tensor::random_uniform(&[4, 8], 42, dtype)?.to_f64_vec()?;
        let b = Tensor::random_uniform(&[4, 8], 42, dtype)?.to_f64_vec()?;
        let c = Tensor::random_uniform(&[4, 8], 43, dtype)?.to_f64_vec()?;
        assert_eq!(a, b, "{dtype}");
        assert_ne!(a, c, "{dtype}");
        assert!(a.iter().all(|x| (0.0..1.0).contains(x)), "{dtype}: {a:?}");
    }
    Ok(())
}

#[test]
fn random_uniform_statistics() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::F16] {
        let v = Tensor::random_uniform(&[100_000], 7, dtype)?.to_f64_vec()?;
        assert!(v.iter().all(|x| (0.0..1.0).contains(x)), "{dtype}");
        let (mean, std) = mean_std(&v);
        assert!((mean - 0.5).abs() < 0.02, "{dtype}: mean {mean}");
        // The standard deviation of U(0, 1) is 1/sqrt(12) = 0.2887.
        assert!((std - 0.2887).abs() < 0.02, "{dtype}: std {std}");
    }
    let v = Tensor::random_uniform_range(&[10_000], -3.0, 5.0, 1, DType::F32)?.to_f64_vec()?;
    assert!(v.iter().all(|x| (-3.0..5.0).contains(x)));
    assert!((mean_std(&v).0 - 1.0).abs() < 0.2);
    Ok(())
}

#[test]
fn random_normal_statistics_and_determinism() -> Result<()> {
    for dtype in [DType::F32, DType::F64, DType::BF16] {
        let a = Tensor::random_normal(&[100_000], 3, dtype)?;
        assert_eq!((a.dtype(), a.dims()), (dtype, vec![100_000]));
        let v = a.to_f64_vec()?;
        assert!(v.iter().all(|x| x.is_finite()), "{dtype}");
        let (mean, std) = mean_std(&v);
        assert!(mean.abs() < 0.02, "{dtype}: mean {mean}");
        assert!((std - 1.0).abs() < 0.02, "{dtype}: std {std}");
        let within_one = v.iter().filter(|x| x.abs() < 1.0).count() as f64 / v.len() as f64;
        assert!((within_one - 0.6827).abs() < 0.01, "{dtype}: {within_one}");
    }
    let a = Tensor::random_normal(&[3, 3], 11, DType::F32)?.to_vec::<f32>()?;
    let b = Tensor::random_normal(&[3, 3], 11, DType::F32)?.to_vec::<f32>()?;
    let c = Tensor::random_normal(&[3, 3], 12, DType::F32)?.to_vec::<f32>()?;
    assert_eq!(a, b);
    assert_ne!(a, c);
    let v = Tensor::random_normal_with(&[20_000], 10.0, 2.0, 5, DType::F64)?.to_f64_vec()?;
    let (mean, std) = mean_std(&v);
    assert!(
        (mean - 10.0).abs() < 0.1 && (std - 2.0).abs() < 0.1,
        "{mean} {std}"
    );
    Ok(())
}

#[test]
fn new_seeds_do_not_recompile() -> Result<()> {
    Tensor::random_uniform(&[5, 7], 0, DType::F32)?;
    let before = xlafn::tensor::eager_cache_stats().compiles;
    for seed in 1..20 {
        Tensor::random_uniform(&[5, 7], seed, DType::F32)?;
    }
    // Other tests run concurrently and may compile their own programs, so
    // only check that 19 new seeds did not cause 19 compiles.
    let after = xlafn::tensor::eager_cache_stats().compiles;
    assert!(after - before < 19, "{before} -> {after}");
    Ok(())
}

#[test]
fn random_rejects_non_float_dtypes() {
    let err = Tensor::random_uniform(&[3], 0, DType::I32).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, message }
            if op == "random_uniform" && message.contains("floating-point") && message.contains("i32")),
        "{err}"
    );
    let err = Tensor::random_normal(&[3], 0, DType::Bool).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument { op, .. } if op == "random_normal"),
        "{err}"
    );
    let err = Tensor::random_normal(&[-3], 0, DType::F32).unwrap_err();
    assert!(err.to_string().contains("negative"), "{err}");
}

#[test]
fn fills_like_a_tensor_of_unknown_length_while_tracing() -> Result<()> {
    // One trace for every length: the shape comes from the input when the
    // program is compiled.
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
        .build(|x: Tensor| -> Result<Tensor> {
            assert_eq!(
                x.zeros_like()?.shape(),
                x.shape(),
                "the shape stays unknown"
            );
            x.zeros_like()?.add(&x.ones_like()?)?.add(&x.fill_like(5)?)
        });
    for n in [1usize, 4, 9] {
        let x = Tensor::vector(&vec![7i32; n])?;
        assert_eq!(f.call((&x,))?.to_vec::<i32>()?, vec![6; n]);
    }
    assert_eq!(f.tracing_count(), 1);
    Ok(())
}
