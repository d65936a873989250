//! Guide "Better performance with tf.function", the parts of "Limitations"
//! and "Known issues" about host (Python) globals and free variables,
//! captured objects, leaked tensors and recursion, plus the XLA-specific
//! rejection of string tensors.

use std::sync::{Arc, Mutex, OnceLock};
use xlafn::prelude::*;

/// ```python
/// @tf.function
/// def buggy_add():
///   return 1 + foo
/// foo = 1;   buggy_add()  # 2
/// foo = 100; buggy_add()  # still 2: foo was read at trace time
/// ```
#[test]
fn captured_host_values_are_read_at_trace_time() -> Result<()> {
    let foo = Arc::new(Mutex::new(1.0f64));
    let make = |foo: &Arc<Mutex<f64>>| {
        let foo = foo.clone();
        FunctionOptions::new()
            .name("buggy_add")
            .build(move || -> Result<Tensor> {
                let v = *foo.lock().unwrap();
                Tensor::fill(&[], 1.0 + v, DType::F32)
            })
    };
    let buggy_add = make(&foo);
    assert_eq!(buggy_add.call(())?.to_vec::<f32>()?, vec![2.]);
    *foo.lock().unwrap() = 100.0;
    assert_eq!(buggy_add.call(())?.to_vec::<f32>()?, vec![2.]);
    assert_eq!(buggy_add.tracing_count(), 1);
    // A new function traces again and sees the new value.
    let fresh = make(&foo);
    assert_eq!(fresh.call(())?.to_vec::<f32>()?, vec![101.]);
    Ok(())
}

#[test]
fn a_retrace_for_another_reason_sees_the_new_host_value() -> Result<()> {
    let scale = Arc::new(Mutex::new(2.0f64));
    let f = FunctionOptions::new().name("scaled").build({
        let scale = scale.clone();
        move |x: Tensor| -> Result<Tensor> {
            let s = *scale.lock().unwrap();
            x.mul_scalar(s)
        }
    });
    let v2 = Tensor::vector(&[1f32, 2.])?;
    assert_eq!(f.call((&v2,))?.to_vec::<f32>()?, vec![2., 4.]);
    *scale.lock().unwrap() = 10.0;
    // Same type: the old trace, with the old value baked in.
    assert_eq!(f.call((&v2,))?.to_vec::<f32>()?, vec![2., 4.]);
    // A new shape retraces, which reads the new value; the old trace keeps
    // the old one.
    let v3 = Tensor::vector(&[1f32, 2., 3.])?;
    assert_eq!(f.call((&v3,))?.to_vec::<f32>()?, vec![10., 20., 30.]);
    assert_eq!(f.call((&v2,))?.to_vec::<f32>()?, vec![2., 4.]);
    assert_eq!(f.tracing_count(), 2);
    Ok(())
}

#[test]
fn captured_eager_tensors_are_listed_and_fixed_at_trace_time() -> Result<()> {
    // A tensor held in shared host state, read while tracing: the trace
    // captures the tensor it saw; replacing it later is not seen.
    let weight = Arc::new(Mutex::new(Tensor::vector(&[1f32, 2., 3.])?));
    let f = FunctionOptions::new().name("weighted").build({
        let weight = weight.clone();
        move |x: Tensor| {
            let w = weight.lock().unwrap().clone();
            &x * &w
        }
    });
    let x = Tensor::vector(&[1f32, 1., 1.])?;
    assert_eq!(f.call((&x,))?.to_vec::<f32>()?, vec![1., 2., 3.]);
    *weight.lock().unwrap() = Tensor::vector(&[-1f32, -1., -1.])?;
    assert_eq!(f.call((&x,))?.to_vec::<f32>()?, vec![1., 2., 3.]);
    assert_eq!(f.tracing_count(), 1);

    let c = f.get_concrete_function((&x,))?;
    assert_eq!(c.num_captures(), 1);
    assert_eq!(
        c.to_string(),
        "\
ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(3,), dtype=f32, name=None)
Output Type:
  TensorSpec(shape=(3,), dtype=f32, name=None)
Captures:
  %1: TensorSpec(shape=(3,), dtype=f32, name=None)
"
    );
    // The same eager tensor used twice is captured once.
    let k = Tensor::scalar(4i32);
    let g = function({
        let k = k.clone();
        move |x: Tensor| &(&x + &k) * &k
    });
    let cg = g.get_concrete_function((Tensor::scalar(0i32),))?;
    assert_eq!(cg.num_captures(), 1);
    assert_eq!(cg.call((Tensor::scalar(1i32),))?.to_vec::<i32>()?, vec![20]);
    Ok(())
}

type Slot = Arc<Mutex<Option<Tensor>>>;

/// ```python
/// @tf.function
/// def leaky_function(a):
///   global x
///   x = a + 1  # Bad - leaks local tensor
///   return a + 2
/// ```
fn leaky_function(slot: &Slot) -> Function<(Tensor,), Tensor> {
    let slot = slot.clone();
    FunctionOptions::new()
        .name("leaky_function")
        .build(move |a: Tensor| -> Result<Tensor> {
            *slot.lock().unwrap() = Some(a.add_scalar(1i64)?);
            a.add_scalar(2i64)
        })
}

#[test]
fn leaked_symbolic_tensor_is_out_of_scope_outside_its_function() -> Result<()> {
    let slot: Slot = Default::default();
    let leaky = leaky_function(&slot);
    // correct_a = leaky_function(tf.constant(1)); correct_a.numpy() == 3
    let correct_a = leaky.call((Tensor::scalar(1i32),))?;
    assert_eq!(correct_a.to_vec::<i32>()?, vec![3]);
    let x = slot.lock().unwrap().clone().expect("the trace stored x");
    assert!(x.is_symbolic());
    assert_eq!(x.dtype(), DType::I32);

    // x.numpy(): reading the leaked tensor fails, naming its function.
    let err = x.to_vec::<i32>().expect_err("a leaked tensor has no value");
    assert!(matches!(err, Error::OutOfScope(_)), "{err:?}");
    let msg = err.to_string();
    assert!(msg.starts_with("OutOfScopeError: "), "{msg}");
    assert!(msg.contains("'leaky_function'"), "{msg}");

    // Eager ops on it fail the same way.
    let err = x
        .add(&Tensor::scalar(1i32))
        .expect_err("eager op on a leaked tensor");
    assert!(matches!(err, Error::OutOfScope(_)), "{err:?}");
    assert!(err.to_string().contains("'leaky_function'"), "{err}");
    Ok(())
}

#[test]
fn leaked_tensor_used_in_another_function_is_out_of_scope() -> Result<()> {
    let slot: Slot = Default::default();
    let leaky = leaky_function(&slot);
    leaky.call((Tensor::scalar(1i32),))?;
    let x = slot.lock().unwrap().clone().expect("the trace stored x");

    // @tf.function def captures_leaked_tensor(b): b += x; return b
    let captures_leaked_tensor = FunctionOptions::new()
        .name("captures_leaked_tensor")
        .build({
            let x = x.clone();
            move |b: Tensor| -> Result<Tensor> { b.add(&x) }
        });
    let err = captures_leaked_tensor
        .call((Tensor::scalar(2i32),))
        .expect_err("x is out of scope");
    assert!(matches!(err, Error::OutOfScope(_)), "{err:?}");
    assert!(err.to_string().contains("'leaky_function'"), "{err}");

    // With operator sugar the error is recorded in the trace and returned
    // by the call rather than panicking.
    let with_sugar = function({
        let x = x.clone();
        move |b: Tensor| &b + &x
    });
    let err = with_sugar
        .call((Tensor::scalar(2i32),))
        .expect_err("x is out of scope");
    assert!(matches!(err, Error::OutOfScope(_)), "{err:?}");
    assert!(err.to_string().contains("'leaky_function'"), "{err}");

    // Returning the value is the fix: results are eager tensors.
    let y = leaky.call((Tensor::scalar(5i32),))?;
    assert_eq!(
        captures_fixed()
            .call((Tensor::scalar(2i32), &y))?
            .to_vec::<i32>()?,
        vec![9]
    );
    Ok(())
}

fn captures_fixed() -> Function<(Tensor, Tensor), Tensor> {
    function(|b: Tensor, x: Tensor| &b + &x)
}

/// ```python
/// @tf.function
/// def recursive_fn(n):
///   if n > 0:
///     return recursive_fn(n - 1)
///   else:
///     return 1
/// ```
/// With a tensor `n` each level has the same input type, so tracing would
/// never end; xlafn reports it instead.
#[test]
fn recursion_with_the_same_input_type_is_an_error_naming_the_function() -> Result<()> {
    let cell: Arc<OnceLock<Function<(Tensor,), Tensor>>> = Arc::new(OnceLock::new());
    let recursive_fn = FunctionOptions::new().name("recursive_fn").build({
        let cell = cell.clone();
        move |n: Tensor| -> Result<Tensor> {
            let this = cell.get().expect("set before the first call");
            this.call((n.sub_scalar(1i64)?,))
        }
    });
    assert!(cell.set(recursive_fn.clone()).is_ok());

    for _ in 0..2 {
        let err = recursive_fn
            .call((Tensor::scalar(5i32),))
            .expect_err("recursion on a tensor never finishes tracing");
        assert!(matches!(err, Error::Recursion(_)), "{err:?}");
        let msg = err.to_string();
        assert!(msg.starts_with("RecursionError: "), "{msg}");
        assert!(msg.contains("'recursive_fn'"), "{msg}");
        assert!(
            msg.contains("TensorSpec(shape=(), dtype=i32, name=None)"),
            "{msg}"
        );
    }
    // Nothing was cached, and the function is still usable (no deadlock).
    assert!(recursive_fn.concrete_functions().is_empty());
    Ok(())
}

/// Recursion on a host literal that changes per level works: one trace per
/// level, each level inlined into its caller's graph.
/// `g(x, 0) = x`, `g(x, n) = 2 * g(x, n - 1) + 1`, so `g(x, n) = 2^n x + 2^n - 1`.
#[test]
fn recursion_on_a_changing_host_literal_traces_once_per_level() -> Result<()> {
    let cell: Arc<OnceLock<Function<(Tensor, i64), Tensor>>> = Arc::new(OnceLock::new());
    let g = FunctionOptions::new()
        .name("g")
        .arg_names(&["x", "n"])
        .build({
            let cell = cell.clone();
            move |x: Tensor, n: i64| -> Result<Tensor> {
                if n == 0 {
                    return Ok(x);
                }
                let this = cell.get().expect("set before the first call");
                let inner = this.call((&x, n - 1))?;
                inner.mul_scalar(2.0)?.add_scalar(1.0)
            }
        });
    assert!(cell.set(g.clone()).is_ok());

    let x = Tensor::vector(&[1f32, 0.5, -2.])?;
    let y = g.call((&x, 3i64))?;
    assert_eq!(y.to_vec::<f32>()?, vec![15., 11., -9.]);
    assert_eq!(g.tracing_count(), 4);

    // Every level is now cached.
    assert_eq!(g.call((&x, 3i64))?.to_vec::<f32>()?, vec![15., 11., -9.]);
    assert_eq!(g.call((&x, 2i64))?.to_vec::<f32>()?, vec![7., 5., -5.]);
    assert_eq!(g.call((&x, 0i64))?.to_vec::<f32>()?, vec![1., 0.5, -2.]);
    assert_eq!(g.tracing_count(), 4);
    // One more level, one more trace.
    assert_eq!(g.call((&x, 4i64))?.to_vec::<f32>()?, vec![31., 23., -17.]);
    assert_eq!(g.tracing_count(), 5);

    // Levels are inlined: the top graph holds every level's ops and no call.
    let top = g.get_concrete_function((&x, 3i64))?;
    let ops: Vec<String> = top
        .graph()
        .operations()
        .iter()
        .map(|n| n.describe())
        .collect();
    assert_eq!(ops.iter().filter(|o| *o == "mul").count(), 3, "{ops:?}");
    assert_eq!(ops.iter().filter(|o| *o == "add").count(), 3, "{ops:?}");
    assert_eq!(top.graph().params().len(), 1);
    Ok(())
}

#[test]
fn string_specs_are_rejected_before_any_trace_is_made() -> Result<()> {
    let string_spec = || TensorSpec::new(&[], DType::String);

    // get_concrete_function with a string spec.
    let f = FunctionOptions::new()
        .name("identity")
        .build(|x: Tensor| x.clone());
    let err = f
        .get_concrete_function((string_spec(),))
        .expect_err("XLA cannot compile strings");
    assert!(
        matches!(&err, Error::UnsupportedDType { dtype, .. } if dtype == "string"),
        "{err:?}"
    );
    assert!(err.to_string().contains("string"), "{err}");
    assert!(f.concrete_functions().is_empty());
    assert_eq!(f.tracing_count(), 0);

    // An input_signature naming a string spec: the function is built, but
    // no trace of it can be made.
    let g = FunctionOptions::new()
        .name("takes_strings")
        .input_signature(vec![string_spec()])
        .build(|x: Tensor| x.clone());
    let err = g
        .get_concrete_function((string_spec(),))
        .expect_err("XLA cannot compile strings");
    assert!(
        matches!(&err, Error::UnsupportedDType { dtype, .. } if dtype == "string"),
        "{err:?}"
    );
    assert!(g.concrete_functions().is_empty());
    Ok(())
}

#[test]
fn string_tensors_cannot_be_made() {
    let err = Tensor::from_strings(&["hello", "world"]).expect_err("no string tensors");
    assert!(
        matches!(&err, Error::UnsupportedDType { dtype, .. } if dtype == "string"),
        "{err:?}"
    );
    let msg = err.to_string();
    assert!(
        msg.starts_with("InvalidArgumentError: dtype string"),
        "{msg}"
    );
    assert!(msg.contains("XLA cannot compile string tensors"), "{msg}");
}
