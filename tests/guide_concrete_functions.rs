//! Guide "Better performance with tf.function", section "Obtaining concrete
//! functions": `get_concrete_function` from values and from `TensorSpec`s,
//! the printed signature of a concrete function, literal parameters that
//! stay part of it (`Literal[2]`), calls with incompatible inputs, the
//! function type, and the low-overhead flat call.

use xlafn::prelude::*;

/// `@tf.function def pow(a, b): return a ** b`
fn pow_function() -> Function<(Tensor, i64), Tensor> {
    FunctionOptions::new()
        .name("pow")
        .build(|a: Tensor, b: i64| a.pow_scalar(b))
}

#[test]
fn concrete_function_from_values_runs_and_reuses_the_trace() -> Result<()> {
    // double = tf.function(lambda a: a + a)
    let double = FunctionOptions::new()
        .name("double")
        .build(|a: Tensor| &a + &a);
    let concrete = double.get_concrete_function((Tensor::scalar(1i32),))?;
    assert_eq!(double.tracing_count(), 1);

    // The concrete function serves any scalar i32.
    let y = concrete.call((Tensor::scalar(2i32),))?;
    assert_eq!(y.to_vec::<i32>()?, vec![4]);
    // Getting it again (by value or by spec) returns the cached trace.
    double.get_concrete_function((&Tensor::scalar(7i32),))?;
    double.get_concrete_function((TensorSpec::known(&[], DType::I32),))?;
    // The polymorphic function dispatches to the same trace.
    assert_eq!(
        double.call((Tensor::scalar(21i32),))?.to_vec::<i32>()?,
        vec![42]
    );
    assert_eq!(double.tracing_count(), 1);
    Ok(())
}

#[test]
fn concrete_function_from_a_tensor_spec_with_unknown_dims() -> Result<()> {
    let double = FunctionOptions::new()
        .name("double")
        .build(|a: Tensor| &a + &a);
    let concrete = double.get_concrete_function((TensorSpec::new(&[None], DType::F32),))?;
    assert_eq!(double.tracing_count(), 1);
    let y = concrete.call((Tensor::vector(&[1f32, 2., 3.])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![2., 4., 6.]);
    let y = concrete.call((Tensor::vector(&[0.5f32, -1.5])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![1., -3.]);
    // Calls of the polymorphic function with vectors reuse this trace.
    let y = double.call((Tensor::vector(&[10f32])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![20.]);
    assert_eq!(double.tracing_count(), 1);
    Ok(())
}

#[test]
fn printed_signature_of_a_concrete_function() -> Result<()> {
    // square = pow.get_concrete_function(a=tf.TensorSpec(None, tf.float32), b=2)
    // print(square)
    let pow = pow_function();
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    let expected = "\
ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=<unknown>, dtype=f32, name=None)
  b (POSITIONAL_OR_KEYWORD): Literal[2]
Output Type:
  TensorSpec(shape=<unknown>, dtype=f32, name=None)
Captures:
  None
";
    assert_eq!(square.to_string(), expected);
    assert_eq!(format!("{square:?}"), expected);
    // TensorFlow's pretty-printed form drops the prefix and the last newline.
    let pretty = expected.trim_start_matches("ConcreteFunction ").trim_end();
    assert_eq!(pow.pretty_printed_concrete_signatures(), pretty);
    Ok(())
}

#[test]
fn printed_signature_uses_arg_names_and_known_shapes() -> Result<()> {
    let scale = FunctionOptions::new()
        .name("scale")
        .arg_names(&["x", "factor"])
        .build(|x: Tensor, factor: f64| x * factor);
    let c = scale.get_concrete_function((TensorSpec::known(&[2, 3], DType::F32), 0.5f64))?;
    let expected = "\
ConcreteFunction Input Parameters:
  x (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(2, 3), dtype=f32, name=None)
  factor (POSITIONAL_OR_KEYWORD): Literal[0.5]
Output Type:
  TensorSpec(shape=(2, 3), dtype=f32, name=None)
Captures:
  None
";
    assert_eq!(c.to_string(), expected);
    Ok(())
}

#[test]
fn printed_signature_lists_captures() -> Result<()> {
    let w = Tensor::vector(&[1f32, 2., 3.])?;
    let b = Tensor::scalar(0.5f32);
    let affine = FunctionOptions::new().name("affine").build({
        let (w, b) = (w.clone(), b.clone());
        move |x: Tensor| &(&x * &w) + &b
    });
    let c = affine.get_concrete_function((TensorSpec::known(&[3], DType::F32),))?;
    assert_eq!(c.num_captures(), 2);
    // Captures are graph parameters after the arguments, named by value.
    let expected = "\
ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(3,), dtype=f32, name=None)
Output Type:
  TensorSpec(shape=(3,), dtype=f32, name=None)
Captures:
  %1: TensorSpec(shape=(3,), dtype=f32, name=None)
  %3: TensorSpec(shape=(), dtype=f32, name=None)
";
    assert_eq!(c.to_string(), expected);
    // The captured values are used on every call.
    let y = c.call((Tensor::vector(&[2f32, 2., 2.])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![2.5, 4.5, 6.5]);
    Ok(())
}

#[test]
fn literal_parameter_is_fixed_and_other_values_fail() -> Result<()> {
    let pow = pow_function();
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    // square(tf.constant(10.0)) == 100
    let y = square.call((Tensor::scalar(10f32), 2i64))?;
    assert_eq!(y.to_vec::<f32>()?, vec![100.]);
    // Any shape fits the unknown-rank spec.
    let y = square.call((Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?, 2i64))?;
    assert_eq!(y.to_vec::<f32>()?, vec![1., 4., 9., 16.]);

    // square(tf.constant(10.0), b=3) raises TypeError.
    let err = square
        .call((Tensor::scalar(10f32), 3i64))
        .expect_err("b=3 does not fit Literal[2]");
    assert!(matches!(err, Error::Type(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("TypeError: "), "{msg}");
    assert!(msg.contains("'pow'"), "{msg}");
    assert!(
        msg.contains("`Can not cast 3 to Literal[2]` for argument b"),
        "{msg}"
    );
    assert!(msg.contains("b: Literal[2]"), "{msg}");

    // The polymorphic function, unlike the concrete one, just retraces.
    let cube = pow.call((Tensor::scalar(2f32), 3i64))?;
    assert_eq!(cube.to_vec::<f32>()?, vec![8.]);
    assert_eq!(pow.tracing_count(), 2);
    Ok(())
}

#[test]
fn incompatible_tensors_fail() -> Result<()> {
    let pow = pow_function();
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    let err = square
        .call((Tensor::scalar(10i32), 2i64))
        .expect_err("an i32 tensor does not fit an f32 spec");
    assert!(matches!(err, Error::Type(_)), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains("TensorSpec(shape=(), dtype=i32, name=None)"),
        "{msg}"
    );
    assert!(
        msg.contains("a: TensorSpec(shape=<unknown>, dtype=f32, name=None)"),
        "{msg}"
    );

    // A concrete function of fixed shape rejects other shapes.
    let double = FunctionOptions::new()
        .name("double")
        .build(|a: Tensor| &a + &a);
    let c = double.get_concrete_function((TensorSpec::known(&[2], DType::F32),))?;
    let err = c
        .call((Tensor::vector(&[1f32, 2., 3.])?,))
        .expect_err("shape (3,) does not fit (2,)");
    assert!(matches!(err, Error::Type(_)), "{err:?}");
    assert!(err.to_string().contains("shape=(3,)"), "{err}");
    // Nothing was traced for the failed calls.
    assert_eq!(double.tracing_count(), 1);
    assert_eq!(pow.tracing_count(), 1);
    Ok(())
}

#[test]
fn function_type_text() -> Result<()> {
    let pow = pow_function();
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    assert_eq!(
        square.function_type(),
        "(a: TensorSpec(shape=<unknown>, dtype=f32, name=None), b: Literal[2]) -> \
         TensorSpec(shape=<unknown>, dtype=f32, name=None)"
    );
    assert_eq!(square.input_types().len(), 2);
    assert_eq!(square.input_types()[1].to_string(), "Literal[2]");

    let pair = FunctionOptions::new()
        .arg_names(&["x", "flag"])
        .build(|x: Tensor, flag: bool| (x.clone(), if flag { -&x } else { x.clone() }));
    let c = pair.get_concrete_function((TensorSpec::new(&[None, Some(2)], DType::I32), true))?;
    assert_eq!(
        c.function_type(),
        "(x: TensorSpec(shape=(None, 2), dtype=i32, name=None), flag: Literal[True]) -> \
         Tuple[TensorSpec(shape=(None, 2), dtype=i32, name=None), \
         TensorSpec(shape=(None, 2), dtype=i32, name=None)]"
    );
    Ok(())
}

#[test]
fn call_flat_matches_call() -> Result<()> {
    let pow = pow_function();
    let square = pow.get_concrete_function((TensorSpec::new(&[None], DType::F32), 2i64))?;
    let x = Tensor::vector(&[1f32, -2., 3.5])?;
    let via_call = square.call((&x, 2i64))?.to_vec::<f32>()?;
    // Literals are not tensors: the flat list holds only `a`.
    let flat = square.call_flat(std::slice::from_ref(&x))?;
    assert_eq!(flat.len(), 1);
    assert_eq!(flat[0].to_vec::<f32>()?, via_call);
    assert_eq!(via_call, vec![1., 4., 12.25]);

    // With captures and several outputs, in flatten order.
    let offset = Tensor::scalar(10i32);
    let f = function({
        let offset = offset.clone();
        move |a: Tensor, b: Tensor| (&a + &offset, &a * &b)
    });
    let c = f.get_concrete_function((
        TensorSpec::known(&[2], DType::I32),
        TensorSpec::known(&[2], DType::I32),
    ))?;
    let a = Tensor::vector(&[1i32, 2])?;
    let b = Tensor::vector(&[3i32, 4])?;
    let (s, p) = c.call((&a, &b))?;
    let flat = c.call_flat(&[a.clone(), b.clone()])?;
    assert_eq!(flat.len(), 2);
    assert_eq!(flat[0].to_vec::<i32>()?, s.to_vec::<i32>()?);
    assert_eq!(flat[1].to_vec::<i32>()?, p.to_vec::<i32>()?);
    assert_eq!(s.to_vec::<i32>()?, vec![11, 12]);
    assert_eq!(p.to_vec::<i32>()?, vec![3, 8]);
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(c.compile_count(), 1);
    Ok(())
}

/// A concrete function called with arguments it was not traced for
/// says which argument, what it got and what it expected, in TensorFlow's
/// words, for tensors (dtype and shape) and literals alike.
#[test]
fn concrete_binding_errors_use_tensorflows_words() -> Result<()> {
    let scale = FunctionOptions::new()
        .name("scale")
        .arg_names(&["x", "n"])
        .build(|x: Tensor, n: i64| x.mul_scalar(n as f64));
    let cf = scale.get_concrete_function((Tensor::scalar(1f32), 2i64))?;
    assert_eq!(
        cf.call((Tensor::scalar(3f32), 2i64))?.to_vec::<f32>()?,
        [6.0]
    );
    let signature = "Signature: (x: TensorSpec(shape=(), dtype=f32, name=None), n: Literal[2])";
    let message = |r: Result<Tensor>| match r {
        Err(Error::Type(m)) => m,
        other => panic!("expected a TypeError, got {other:?}"),
    };
    assert_eq!(
        message(cf.call((Tensor::scalar(3i32), 2i64))),
        format!(
            "Binding inputs to function 'scale' failed due to `Can not cast TensorSpec(shape=(), \
             dtype=i32, name=None) to TensorSpec(shape=(), dtype=f32, name=None)` for argument \
             x. {signature}"
        )
    );
    assert_eq!(
        message(cf.call((Tensor::vector(&[3f32])?, 2i64))),
        format!(
            "Binding inputs to function 'scale' failed due to `Can not cast TensorSpec(shape=(1,), \
             dtype=f32, name=None) to TensorSpec(shape=(), dtype=f32, name=None)` for argument \
             x. {signature}"
        )
    );
    assert_eq!(
        message(cf.call((Tensor::scalar(3f32), 3i64))),
        format!(
            "Binding inputs to function 'scale' failed due to `Can not cast 3 to Literal[2]` for \
             argument n. {signature}"
        )
    );
    // A failed binding never traces.
    assert_eq!(scale.tracing_count(), 1);
    Ok(())
}
