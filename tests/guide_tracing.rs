//! The guide's "Tracing" section ("Better performance with tf.function"):
//! what tracing is, the `double` example, side effects that happen only
//! while tracing, `tracing_count`, concrete functions and their
//! signatures, and graphs.

use std::sync::{Arc, Mutex};
use xlafn::prelude::*;

type Log = Arc<Mutex<Vec<String>>>;

/// The guide's `double`, with `print("Tracing with", a)` as a push to a
/// shared log.
fn double_with_log() -> (Function<(Tensor,), Tensor>, Log) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = log.clone();
    let double = FunctionOptions::new()
        .name("double")
        .build(move |a: Tensor| {
            seen.lock().unwrap().push(format!("Tracing with {a}"));
            &a + &a
        });
    (double, log)
}

#[test]
fn double_traces_once_per_dtype_and_not_per_value() -> Result<()> {
    let (double, log) = double_with_log();

    let r = double.call((Tensor::scalar(1i32),))?;
    assert_eq!(r.dtype(), DType::I32);
    assert_eq!(r.item::<i32>()?, 2);
    assert_eq!(double.tracing_count(), 1);

    let r = double.call((Tensor::scalar(1.1f32),))?;
    assert_eq!(r.dtype(), DType::F32);
    assert_eq!(r.item::<f32>()?, 2.2f32);
    assert_eq!(double.tracing_count(), 2);

    // Same type as the first call (scalar i32), another value: no trace.
    let r = double.call((Tensor::scalar(21i32),))?;
    assert_eq!(r.item::<i32>()?, 42);
    let r = double.call((Tensor::scalar(-4i32),))?;
    assert_eq!(r.item::<i32>()?, -8);
    assert_eq!(double.tracing_count(), 2);

    // A vector of i32 is a new type (shape differs): traces again.
    let r = double.call((Tensor::vector(&[1i32, 2, 3])?,))?;
    assert_eq!(r.to_vec::<i32>()?, vec![2, 4, 6]);
    assert_eq!(double.tracing_count(), 3);

    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "Tracing with Tensor(\"double:0\", shape=(), dtype=i32)".to_string(),
            "Tracing with Tensor(\"double:0\", shape=(), dtype=f32)".to_string(),
            "Tracing with Tensor(\"double:0\", shape=(3,), dtype=i32)".to_string(),
        ]
    );
    Ok(())
}

#[test]
fn rust_side_effects_run_only_while_tracing() -> Result<()> {
    // The guide's `f(x)` with `print("Traced with", x)`: the Rust code of the
    // closure runs once per trace, the graph runs on every call.
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = log.clone();
    let f = function(move |x: Tensor| {
        seen.lock()
            .unwrap()
            .push(format!("Traced with {}", x.shape()));
        x.mul_scalar(10)
    });
    for v in [1i32, 2, 3, 4] {
        let y = f.call((Tensor::scalar(v),))?;
        assert_eq!(y.item::<i32>()?, 10 * v);
    }
    assert_eq!(*log.lock().unwrap(), vec!["Traced with ()".to_string()]);
    assert_eq!(f.tracing_count(), 1);
    Ok(())
}

#[test]
fn literal_arguments_trace_once_per_value() -> Result<()> {
    // f(1); f(1); f(2) prints "Traced with 1", "Traced with 2".
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = log.clone();
    let f = function(move |x: i64| {
        seen.lock().unwrap().push(format!("Traced with {x}"));
        Tensor::scalar(x * 100)
    });
    assert_eq!(f.call((1i64,))?.item::<i64>()?, 100);
    assert_eq!(f.call((1i64,))?.item::<i64>()?, 100);
    assert_eq!(f.call((2i64,))?.item::<i64>()?, 200);
    assert_eq!(
        *log.lock().unwrap(),
        vec!["Traced with 1".to_string(), "Traced with 2".to_string()]
    );
    assert_eq!(f.tracing_count(), 2);
    Ok(())
}

const INT_SIGNATURE: &str = "ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(), dtype=i32, name=None)
Output Type:
  TensorSpec(shape=(), dtype=i32, name=None)
Captures:
  None";

const FLOAT_SIGNATURE: &str = "ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(), dtype=f32, name=None)
Output Type:
  TensorSpec(shape=(), dtype=f32, name=None)
Captures:
  None";

#[test]
fn concrete_functions_print_their_signatures() -> Result<()> {
    let (double, _) = double_with_log();
    double.call((Tensor::scalar(1i32),))?;
    double.call((Tensor::scalar(1.1f32),))?;
    let concrete = double.concrete_functions();
    assert_eq!(concrete.len(), 2);
    assert_eq!(concrete[0].to_string().trim_end(), INT_SIGNATURE);
    assert_eq!(concrete[1].to_string().trim_end(), FLOAT_SIGNATURE);
    assert_eq!(
        concrete[0].function_type(),
        "(a: TensorSpec(shape=(), dtype=i32, name=None)) -> TensorSpec(shape=(), dtype=i32, name=None)"
    );
    Ok(())
}

#[test]
fn pretty_printed_concrete_signatures_list_every_trace_in_order() -> Result<()> {
    let (double, _) = double_with_log();
    assert_eq!(double.pretty_printed_concrete_signatures(), "");
    double.call((Tensor::scalar(1i32),))?;
    double.call((Tensor::scalar(1.1f32),))?;
    double.call((Tensor::scalar(3i32),))?;
    // Every block as `print(concrete)` shows it without its
    // `ConcreteFunction ` prefix, separated by a blank line, in trace order.
    let strip = |s: &'static str| s.trim_start_matches("ConcreteFunction ").trim_end();
    let expected = format!("{}\n\n{}", strip(INT_SIGNATURE), strip(FLOAT_SIGNATURE));
    assert_eq!(
        double.pretty_printed_concrete_signatures().trim_end(),
        expected
    );
    Ok(())
}

#[test]
fn pretty_printed_concrete_signatures_match_tensorflow_exactly() -> Result<()> {
    let (double, _) = double_with_log();
    double.call((Tensor::scalar(1i32),))?;
    double.call((Tensor::scalar(1.1f32),))?;
    let expected = "Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(), dtype=i32, name=None)
Output Type:
  TensorSpec(shape=(), dtype=i32, name=None)
Captures:
  None

Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(), dtype=f32, name=None)
Output Type:
  TensorSpec(shape=(), dtype=f32, name=None)
Captures:
  None";
    assert_eq!(double.pretty_printed_concrete_signatures(), expected);
    Ok(())
}

#[test]
fn get_concrete_function_from_a_value_or_a_spec() -> Result<()> {
    let (double, log) = double_with_log();
    // From a value: traces (no call, so nothing is compiled).
    let by_value = double.get_concrete_function((Tensor::scalar(1i32),))?;
    assert_eq!(double.tracing_count(), 1);
    assert_eq!(by_value.compile_count(), 0);
    // The same type again, from a spec: the cached trace.
    let by_spec = double.get_concrete_function((TensorSpec::known(&[], DType::I32),))?;
    assert_eq!(double.tracing_count(), 1);
    assert_eq!(by_spec.to_string(), by_value.to_string());

    // A spec of unknown rank: one more trace that takes any f32 tensor.
    let any_f32 = double.get_concrete_function((TensorSpec::unknown_rank(DType::F32),))?;
    assert_eq!(double.tracing_count(), 2);
    assert_eq!(
        log.lock().unwrap().last().unwrap(),
        "Tracing with Tensor(\"double:0\", shape=<unknown>, dtype=f32)"
    );
    assert_eq!(
        any_f32.to_string().trim_end(),
        "ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=<unknown>, dtype=f32, name=None)
Output Type:
  TensorSpec(shape=<unknown>, dtype=f32, name=None)
Captures:
  None"
    );

    // Calling the concrete function directly: any f32 shape, each shape
    // compiled once, never traced again.
    let y = any_f32.call((Tensor::scalar(1.5f32),))?;
    assert_eq!(y.item::<f32>()?, 3.0);
    let y = any_f32.call((Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![2., 4., 6., 8.]);
    assert_eq!(y.dims(), vec![2, 2]);
    any_f32.call((Tensor::scalar(-1f32),))?;
    assert_eq!(any_f32.compile_count(), 2);
    assert_eq!(double.tracing_count(), 2);

    // The polymorphic function now dispatches f32 calls to it.
    let y = double.call((Tensor::vector(&[0.25f32, 0.5])?,))?;
    assert_eq!(y.to_vec::<f32>()?, vec![0.5, 1.0]);
    assert_eq!(double.tracing_count(), 2);
    assert_eq!(any_f32.compile_count(), 3);
    Ok(())
}

#[test]
fn a_concrete_function_rejects_incompatible_inputs() -> Result<()> {
    let (double, _) = double_with_log();
    let ints = double.get_concrete_function((TensorSpec::new(&[None], DType::I32),))?;
    assert_eq!(
        ints.call((Tensor::vector(&[3i32, 4])?,))?.to_vec::<i32>()?,
        vec![6, 8]
    );

    let err = ints.call((Tensor::vector(&[1f32])?,)).unwrap_err();
    let Error::Type(msg) = &err else {
        panic!("expected a TypeError, got {err:?}");
    };
    assert_eq!(
        msg,
        "Binding inputs to function 'double' failed due to `Can not cast \
         TensorSpec(shape=(1,), dtype=f32, name=None) to TensorSpec(shape=(None,), dtype=i32, \
         name=None)` for argument a. Signature: (a: TensorSpec(shape=(None,), dtype=i32, \
         name=None))"
    );
    assert!(err.to_string().starts_with("TypeError: "));

    let err = ints.call((Tensor::scalar(1i32),)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("TensorSpec(shape=(), dtype=i32, name=None)")),
        "{err:?}"
    );
    // A failed concrete call never traces.
    assert_eq!(double.tracing_count(), 1);
    Ok(())
}

#[test]
fn literal_parameters_stay_in_the_concrete_signature() -> Result<()> {
    // The guide's `pow(a, b)` with `square = pow.get_concrete_function(
    // a=tf.TensorSpec(None, tf.float32), b=2)`.
    let pow = FunctionOptions::new()
        .name("pow")
        .build(|a: Tensor, b: i64| a.pow_scalar(b));
    let square = pow.get_concrete_function((TensorSpec::unknown_rank(DType::F32), 2i64))?;
    assert_eq!(
        square.to_string().trim_end(),
        "ConcreteFunction Input Parameters:
  a (POSITIONAL_OR_KEYWORD): TensorSpec(shape=<unknown>, dtype=f32, name=None)
  b (POSITIONAL_OR_KEYWORD): Literal[2]
Output Type:
  TensorSpec(shape=<unknown>, dtype=f32, name=None)
Captures:
  None"
    );
    assert_eq!(
        square.call((Tensor::scalar(10f32), 2i64))?.item::<f32>()?,
        100.0
    );
    assert_eq!(
        square
            .call((Tensor::vector(&[1f32, -3.])?, 2i64))?
            .to_vec::<f32>()?,
        vec![1.0, 9.0]
    );
    // b=3 does not fit Literal[2].
    let err = square.call((Tensor::scalar(10f32), 3i64)).unwrap_err();
    assert!(
        matches!(&err, Error::Type(m) if m.contains("`Can not cast 3 to Literal[2]`") && m.contains("b: Literal[2]")),
        "{err:?}"
    );
    // The polymorphic function traces b=3 separately.
    assert_eq!(pow.call((Tensor::scalar(2f32), 3i64))?.item::<f32>()?, 8.0);
    assert_eq!(pow.tracing_count(), 2);
    Ok(())
}

#[test]
fn the_graph_of_a_concrete_function_lists_its_nodes() -> Result<()> {
    let (double, _) = double_with_log();
    let c = double.get_concrete_function((TensorSpec::new(&[None], DType::F32),))?;
    let graph = c.graph();
    assert_eq!(graph.params().len(), 1);
    assert_eq!(graph.operations().len(), 1);
    let node = &graph.operations()[0];
    assert_eq!(node.describe(), "add");
    // `a + a`: both inputs are the one parameter; the result is the add's.
    let a = graph.params()[0];
    assert_eq!(node.inputs(), vec![a, a]);
    assert_eq!(graph.results(), node.outputs());

    // A loop over host data unrolls at trace time: one node per step.
    let unrolled = function(|x: Tensor, n: i64| {
        let mut acc = x.clone();
        for _ in 0..n {
            acc = &acc + &x;
        }
        acc
    });
    for n in [1i64, 3, 5] {
        let c = unrolled.get_concrete_function((TensorSpec::known(&[], DType::I32), n))?;
        assert_eq!(c.graph().operations().len(), n as usize);
        let y = unrolled.call((Tensor::scalar(7i32), n))?;
        assert_eq!(y.item::<i32>()?, 7 * (n as i32 + 1));
    }
    assert_eq!(unrolled.tracing_count(), 3);
    Ok(())
}

#[test]
fn string_tensors_cannot_be_traced() {
    // The guide's third `double(tf.constant("a"))`: XLA cannot compile
    // strings, so xlafn refuses them when the tensor or spec is made.
    let err = Tensor::from_strings(&["a"]).unwrap_err();
    assert!(
        matches!(&err, Error::UnsupportedDType { dtype, .. } if dtype.contains("string")),
        "{err:?}"
    );
    let (double, _) = double_with_log();
    let err = double
        .get_concrete_function((TensorSpec::unknown_rank(DType::String),))
        .unwrap_err();
    assert!(matches!(err, Error::UnsupportedDType { .. }), "{err:?}");
    assert_eq!(double.tracing_count(), 0);
}

#[test]
fn a_concrete_function_shows_its_program_and_runs_flat() -> Result<()> {
    use xlafn::ArraySpec;
    let (double, _) = double_with_log();
    let c = double.get_concrete_function((TensorSpec::new(&[None], DType::I32),))?;
    // The StableHLO of one specialization: static shapes, one add.
    let text = c.stablehlo(&[ArraySpec::new(DType::I32, &[3])])?;
    assert!(text.contains("tensor<3xi32>"), "{text}");
    assert!(text.contains("stablehlo.add"), "{text}");
    assert_eq!(c.compile_count(), 0);

    // Compiling it explicitly fills the compile cache used by calls.
    let exe = c.compiled(&[ArraySpec::new(DType::I32, &[3])])?;
    assert_eq!(exe.outputs(), &[ArraySpec::new(DType::I32, &[3])]);
    assert_eq!(c.compile_count(), 1);
    let y = double.call((Tensor::vector(&[1i32, -2, 30])?,))?;
    assert_eq!(y.to_vec::<i32>()?, vec![2, -4, 60]);
    assert_eq!(c.compile_count(), 1);

    // The flat path: tensors in, tensors out, no signature processing.
    let out = c.call_flat(&[Tensor::vector(&[5i32, 6, 7])?])?;
    assert_eq!(out.len(), 1);
    assert_eq!(out[0].to_vec::<i32>()?, vec![10, 12, 14]);
    let out = c.call_flat(&[Tensor::vector(&[1i32])?])?;
    assert_eq!(out[0].to_vec::<i32>()?, vec![2]);
    assert_eq!(c.compile_count(), 2);
    assert_eq!(double.tracing_count(), 1);
    Ok(())
}
