//! Variables created on a function's first call from values computed in
//! its trace: TensorFlow lifts the initializer out of the graph and
//! runs it on the first call's arguments. The API page's `MyModule`.

use std::sync::{Arc, Mutex, OnceLock};
use xlafn::prelude::*;

/// The API page's module: `self.v = tf.Variable(tf.ones_like(x))` on the
/// first call, then `return self.v * x`.
struct MyModule {
    v: Mutex<Option<Variable>>,
    created: Mutex<usize>,
}

impl MyModule {
    fn call(&self, x: &Tensor) -> Result<Tensor> {
        let mut slot = self.v.lock().unwrap();
        if slot.is_none() {
            *slot = Some(Variable::try_new(x.ones_like()?)?);
            *self.created.lock().unwrap() += 1;
        }
        slot.as_ref().unwrap().read().mul(x)
    }
}

#[test]
fn api_page_module_creates_its_variable_from_the_first_input() {
    let module = Arc::new(MyModule {
        v: Mutex::new(None),
        created: Mutex::new(0),
    });
    let f = function({
        let module = module.clone();
        move |x: Tensor| module.call(&x)
    });
    let first = f.call((Tensor::vector(&[1i32, 2]).unwrap(),)).unwrap();
    assert_eq!(first.to_vec::<i32>().unwrap(), vec![1, 2]);
    let second = f.call((Tensor::vector(&[3i32, 4]).unwrap(),)).unwrap();
    assert_eq!(second.to_vec::<i32>().unwrap(), vec![3, 4]);
    assert_eq!(*module.created.lock().unwrap(), 1);
    let v = module.v.lock().unwrap().clone().unwrap();
    assert_eq!(v.read().to_vec::<i32>().unwrap(), vec![1, 1]);
    assert_eq!((v.dtype(), v.dims()), (DType::I32, &[2i64][..]));
    // The first call traced twice, the second reused the trace.
    assert_eq!(f.tracing_count(), 2);
}

#[test]
fn the_initial_value_is_computed_from_the_first_call_only() {
    // v starts as 2 * x of the first call; each call adds x to it.
    let v: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let f = function({
        let v = v.clone();
        move |x: Tensor| -> Result<Tensor> {
            let v = v.get_or_init(|| Variable::new(&x * 2.0));
            v.assign_add(&x)?;
            Ok(v.read())
        }
    });
    let y = f.call((Tensor::vector(&[1f32, 10.]).unwrap(),)).unwrap();
    // Initialized to [2, 20] by the lifted initializer, then += x once.
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![3., 30.]);
    let y = f.call((Tensor::vector(&[5f32, 5.]).unwrap(),)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![8., 35.]);
    assert_eq!(
        v.get().unwrap().read().to_vec::<f32>().unwrap(),
        vec![8., 35.]
    );
}

#[test]
fn initializers_may_use_captures_and_other_variables() {
    let scale = Variable::new(Tensor::scalar(3f32));
    let offset = Tensor::vector(&[1f32, 2.]).unwrap();
    let v: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let f = function({
        let (scale, offset, v) = (scale.clone(), offset.clone(), v.clone());
        move |x: Tensor| -> Result<Tensor> {
            let v = v.get_or_init(|| {
                let init = &x * &scale.read() + &offset;
                Variable::new(init)
            });
            Ok(v.read())
        }
    });
    let y = f.call((Tensor::vector(&[1f32, 1.]).unwrap(),)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![4., 5.]);
}

#[test]
fn creating_one_on_a_later_trace_is_still_an_error() {
    // A variable per new input shape: the second shape's trace creates one
    // after the first call, TensorFlow's ValueError.
    let made: Arc<Mutex<Vec<Variable>>> = Arc::default();
    let f = FunctionOptions::new().name("per_shape").build({
        let made = made.clone();
        move |x: Tensor| -> Result<Tensor> {
            let mut made = made.lock().unwrap();
            let rank = x.shape().rank().unwrap();
            if made.iter().all(|v| v.dims().len() != rank) {
                made.push(Variable::try_new(x.zeros_like()?)?);
            }
            Ok(x)
        }
    });
    f.call((Tensor::vector(&[1f32]).unwrap(),)).unwrap();
    let e = f
        .call((Tensor::from_vec(vec![1f32], &[1, 1]).unwrap(),))
        .unwrap_err();
    assert!(matches!(e, Error::Value(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("only supports singleton Variables created on the first call"),
        "{e}"
    );
}

#[test]
fn a_trace_from_specs_cannot_lift_an_initializer_that_needs_arguments() {
    let v: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let f = function({
        let v = v.clone();
        move |x: Tensor| -> Result<Tensor> {
            let v = v.get_or_init(|| Variable::new(&x * 2.0));
            v.read().mul(&x)
        }
    });
    let Err(e) = f.get_concrete_function((TensorSpec::new(&[Some(2)], DType::F32),)) else {
        panic!("tracing from specs lifted an initializer that needs the argument");
    };
    assert!(e.to_string().contains("cannot be computed once"), "{e}");
    // The variable exists but never got a value: reading it says so.
    let e = v.get().unwrap().try_read().unwrap_err();
    assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
    assert!(e.to_string().contains("uninitialized"), "{e}");
}

#[test]
fn a_first_call_inside_another_trace_lifts_what_it_can() {
    // The inner function's initializer needs only a captured eager tensor:
    // it runs outside both traces even though the call is being traced.
    let base = Tensor::vector(&[1f32, 2.]).unwrap();
    let v: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let inner = function({
        let (base, v) = (base.clone(), v.clone());
        move |x: Tensor| -> Result<Tensor> {
            let v = v.get_or_init(|| Variable::new(&base * 10.0));
            v.read().add(&x)
        }
    });
    let outer = function({
        let inner = inner.clone();
        move |x: Tensor| inner.call((&x,))
    });
    let y = outer.call((Tensor::vector(&[1f32, 1.]).unwrap(),)).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![11., 21.]);
    // An initial value that depends only on the argument's shape, not its
    // value (ones_like of a known shape), is a constant: no lifting needed.
    let u: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let shape_only = function({
        let u = u.clone();
        move |x: Tensor| -> Result<Tensor> {
            let u = u.get_or_init(|| Variable::new(x.ones_like().unwrap()));
            Ok(u.read())
        }
    });
    let outer_shape_only = function({
        let shape_only = shape_only.clone();
        move |x: Tensor| shape_only.call((&x,))
    });
    let y = outer_shape_only
        .call((Tensor::vector(&[7f32, 7.]).unwrap(),))
        .unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![1., 1.]);

    // One that needs the (symbolic) argument is an error naming why.
    let w: Arc<OnceLock<Variable>> = Arc::new(OnceLock::new());
    let needs_arg = function({
        let w = w.clone();
        move |x: Tensor| -> Result<Tensor> {
            let w = w.get_or_init(|| Variable::new(&x + 1.0));
            Ok(w.read())
        }
    });
    let outer = function({
        let needs_arg = needs_arg.clone();
        move |x: Tensor| needs_arg.call((&x,))
    });
    let e = outer.call((Tensor::vector(&[1f32]).unwrap(),)).unwrap_err();
    assert!(e.to_string().contains("cannot be computed once"), "{e}");
}

#[test]
fn creating_one_inside_a_branch_from_a_branch_value_is_refused() {
    let made: Arc<Mutex<Option<Variable>>> = Arc::default();
    let f = function({
        let made = made.clone();
        move |x: Tensor| -> Result<Tensor> {
            cond(
                &x.gt_scalar(0.0)?,
                || -> Result<Tensor> {
                    let y = &x * 2.0;
                    *made.lock().unwrap() = Some(Variable::try_new(y.clone())?);
                    Ok(y)
                },
                || Ok(x.clone()),
            )
        }
    });
    let e = f.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(e.to_string().contains("inside a cond or loop body"), "{e}");
}

#[test]
fn an_initial_value_of_unknown_shape_is_refused() {
    let v: Arc<OnceLock<Result<Variable>>> = Arc::new(OnceLock::new());
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build({
            let v = v.clone();
            move |x: Tensor| -> Result<Tensor> {
                match v.get_or_init(|| Variable::try_new(x.ones_like()?)) {
                    Ok(v) => Ok(v.read()),
                    Err(e) => Err(e.clone()),
                }
            }
        });
    let e = f.call((Tensor::vector(&[1f32]).unwrap(),)).unwrap_err();
    assert!(e.to_string().contains("fully known shape"), "{e}");
}
