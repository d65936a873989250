//! Guide "Better performance with tf.function", section "Debugging":
//! `tf.config.run_functions_eagerly(True)` turns every function back into
//! plain eager code, so host side effects (Python `print`) run on every call
//! and values can be read inside the function body; turning it off restores
//! tracing.
//!
//! `run_functions_eagerly` is process-wide and the tests of one file run on
//! parallel threads, so everything that toggles it lives in the one test
//! below, which restores the default even when an assertion fails.

use std::sync::{Arc, Mutex};
use xlafn::prelude::*;

/// Restores `run_functions_eagerly(false)` on every exit path.
struct EagerGuard;

impl EagerGuard {
    fn enable() -> EagerGuard {
        run_functions_eagerly(true);
        EagerGuard
    }
}

impl Drop for EagerGuard {
    fn drop(&mut self) {
        run_functions_eagerly(false);
    }
}

type Log = Arc<Mutex<Vec<String>>>;

/// ```python
/// @tf.function
/// def get_MSE(y_true, y_pred):
///   print("Calculating MSE!")
///   sq_diff = tf.pow(y_true - y_pred, 2)
///   return tf.reduce_mean(sq_diff)
/// ```
/// The body also reads `y_pred`'s values, which only works eagerly.
fn get_mse(
    log: &Log,
    seen: &Arc<Mutex<Vec<Result<Vec<f32>>>>>,
) -> Function<(Tensor, Tensor), Tensor> {
    let (log, seen) = (log.clone(), seen.clone());
    FunctionOptions::new().name("get_MSE").build(
        move |y_true: Tensor, y_pred: Tensor| -> Result<Tensor> {
            log.lock().unwrap().push("Calculating MSE!".to_string());
            seen.lock().unwrap().push(y_pred.to_vec::<f32>());
            let sq_diff = y_true.sub(&y_pred)?.pow_scalar(2i64)?;
            sq_diff.reduce_mean(&[0], false)
        },
    )
}

#[test]
fn run_functions_eagerly_runs_bodies_on_every_call_and_false_restores_tracing() -> Result<()> {
    assert!(!xlafn::function::functions_run_eagerly());
    let y_true = Tensor::vector(&[1f32, 2., 3., 4.])?;
    let y_pred = Tensor::vector(&[1f32, 0., 3., 8.])?;
    // ((1-1)^2 + (2-0)^2 + (3-3)^2 + (4-8)^2) / 4 = 20 / 4
    let expected_mse = 5.0f32;

    // --- Traced (the default): the print runs once, at trace time, and the
    // body cannot read tensor values.
    {
        let log: Log = Default::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let f = get_mse(&log, &seen);
        for _ in 0..3 {
            let mse = f.call((&y_true, &y_pred))?;
            assert_eq!(mse.to_vec::<f32>()?, vec![expected_mse]);
        }
        assert_eq!(f.tracing_count(), 1);
        assert_eq!(log.lock().unwrap().len(), 1);
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 1);
        let err = seen[0].as_ref().expect_err("no value while tracing");
        assert!(matches!(err, Error::Value(_)), "{err:?}");
        assert!(err.to_string().contains("get_MSE"), "{err}");
    }

    // --- Eager: the body runs on every call with concrete tensors.
    {
        let _eager = EagerGuard::enable();
        assert!(xlafn::function::functions_run_eagerly());
        let log: Log = Default::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let f = get_mse(&log, &seen);
        for _ in 0..3 {
            let mse = f.call((&y_true, &y_pred))?;
            assert_eq!(mse.to_vec::<f32>()?, vec![expected_mse]);
        }
        assert_eq!(f.tracing_count(), 0);
        assert_eq!(f.compile_count(), 0);
        assert_eq!(
            *log.lock().unwrap(),
            vec!["Calculating MSE!".to_string(); 3]
        );
        for values in seen.lock().unwrap().iter() {
            assert_eq!(
                values.as_ref().expect("eager values are readable"),
                &vec![1f32, 0., 3., 8.]
            );
        }

        // A function made before switching also runs eagerly, and the
        // results of eager calls are ordinary eager tensors.
        let double = FunctionOptions::new()
            .name("double")
            .build(|a: Tensor| -> Result<Tensor> {
                assert!(!a.is_symbolic());
                let host: Vec<i32> = a.to_vec()?;
                let twice: Vec<i32> = host.iter().map(|v| v * 2).collect();
                let out = &a + &a;
                assert_eq!(out.to_vec::<i32>()?, twice);
                Ok(out)
            });
        let y = double.call((Tensor::vector(&[1i32, 2, 3])?,))?;
        assert!(!y.is_symbolic());
        assert_eq!(y.to_vec::<i32>()?, vec![2, 4, 6]);
        assert_eq!(double.tracing_count(), 0);

        // An input_signature is still enforced in eager mode.
        let sig = FunctionOptions::new()
            .name("sig")
            .input_signature(vec![TensorSpec::new(&[None], DType::I32)])
            .build(|x: Tensor| x.clone());
        let err = sig
            .call((Tensor::vector(&[1f32])?,))
            .expect_err("f32 does not fit an i32 signature");
        assert!(matches!(err, Error::Type(_)), "{err:?}");
        assert!(err.to_string().contains("Can not cast"), "{err}");
        assert_eq!(
            sig.call((Tensor::vector(&[7i32, 8])?,))?.to_vec::<i32>()?,
            vec![7, 8]
        );
    }

    // --- Back to tracing: the same kind of function traces once again.
    assert!(!xlafn::function::functions_run_eagerly());
    {
        let log: Log = Default::default();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let f = get_mse(&log, &seen);
        for _ in 0..2 {
            let mse = f.call((&y_true, &y_pred))?;
            assert_eq!(mse.to_vec::<f32>()?, vec![expected_mse]);
        }
        assert_eq!(f.tracing_count(), 1);
        assert_eq!(log.lock().unwrap().len(), 1);
    }

    // A function used eagerly first traces when eager mode is turned off.
    let calls = Arc::new(Mutex::new(0usize));
    let counted = FunctionOptions::new().name("counted").build({
        let calls = calls.clone();
        move |a: Tensor| {
            *calls.lock().unwrap() += 1;
            a.square()
        }
    });
    {
        let _eager = EagerGuard::enable();
        counted.call((Tensor::scalar(3f32),))?;
        counted.call((Tensor::scalar(4f32),))?;
    }
    let y = counted.call((Tensor::scalar(5f32),))?;
    counted.call((Tensor::scalar(6f32),))?;
    assert_eq!(y.to_vec::<f32>()?, vec![25.]);
    assert_eq!(*calls.lock().unwrap(), 3);
    assert_eq!(counted.tracing_count(), 1);
    Ok(())
}
