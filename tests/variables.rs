//! Variables: eager use, reads and updates inside functions, in-place
//! updates, the guide's "Creating tf.Variables" and "Deleting tf.Variables
//! between Function calls" examples, and concurrent updates.

use std::sync::{Arc, Mutex, OnceLock};
use xlafn::prelude::*;

#[test]
fn eager_read_assign_and_updates() {
    let v = Variable::new(Tensor::vector(&[1f32, 2.]).unwrap());
    let before = v.read();
    v.assign_add(&Tensor::vector(&[10f32, 10.]).unwrap())
        .unwrap();
    assert_eq!(v.read().to_vec::<f32>().unwrap(), vec![11., 12.]);
    // A value read earlier is a snapshot.
    assert_eq!(before.to_vec::<f32>().unwrap(), vec![1., 2.]);
    v.assign_sub(&Tensor::vector(&[1f32, 1.]).unwrap()).unwrap();
    assert_eq!(v.read().to_vec::<f32>().unwrap(), vec![10., 11.]);
    let e = v
        .assign(&Tensor::vector(&[1f32, 2., 3.]).unwrap())
        .unwrap_err();
    assert!(e.to_string().contains("cannot assign"), "{e}");
    assert!(v.assign(&Tensor::vector(&[1i32, 2]).unwrap()).is_err());
}

#[test]
fn functions_update_captured_variables_every_call() {
    let v = Variable::new(Tensor::scalar(1.0f32));
    let step = function({
        let v = v.clone();
        move |x: Tensor| -> Result<Tensor> {
            v.assign_add(&x)?;
            Ok(v.read()) // a read after the update sees it
        }
    });
    for (i, want) in [3.0f32, 5.0, 7.0].into_iter().enumerate() {
        let got = step.call((Tensor::scalar(2.0f32),)).unwrap();
        assert_eq!(got.item::<f32>().unwrap(), want, "call {i}");
    }
    assert_eq!(v.read().item::<f32>().unwrap(), 7.0);
    assert_eq!(step.tracing_count(), 1);
    // An eager change is seen by the next call (variables are read at call time).
    v.assign(&Tensor::scalar(100.0f32)).unwrap();
    assert_eq!(
        step.call((Tensor::scalar(1.0f32),))
            .unwrap()
            .item::<f32>()
            .unwrap(),
        101.0
    );
    let listing = step.concrete_functions()[0].to_string();
    assert!(
        listing.contains("Captures:\n  %1: TensorSpec(shape=(), dtype=f32, name=None)"),
        "{listing}"
    );
}

#[test]
fn large_variables_are_updated_in_place() {
    let n = 1 << 20;
    let w = Variable::new(Tensor::from_vec(vec![0f32; n], &[n as i64]).unwrap());
    let bump = function({
        let w = w.clone();
        move || w.assign_add(&Tensor::scalar(1.0f32))
    });
    bump.call(()).unwrap();
    let address = w.device_address().unwrap();
    for _ in 0..5 {
        bump.call(()).unwrap();
        assert_eq!(
            w.device_address().unwrap(),
            address,
            "the weights' buffer was not reused"
        );
    }
    let values = w.read().to_vec::<f32>().unwrap();
    assert!(values.iter().all(|v| *v == 6.0));
    // While a snapshot is alive the update goes to fresh memory and the
    // snapshot keeps its value.
    let snapshot = w.read();
    bump.call(()).unwrap();
    assert!(snapshot.to_vec::<f32>().unwrap().iter().all(|v| *v == 6.0));
    assert!(w.read().to_vec::<f32>().unwrap().iter().all(|v| *v == 7.0));
}

#[test]
fn creating_a_variable_on_every_call_fails_like_tensorflow() {
    // The guide's `f(x)` that creates `tf.Variable(1.0)` unconditionally.
    let f = FunctionOptions::new()
        .name("f")
        .build(|x: Tensor| -> Result<Tensor> {
            let v = Variable::new(Tensor::scalar(1.0f32));
            v.assign_add(&x)?;
            Ok(v.read())
        });
    let e = f.call((Tensor::scalar(1.0f32),)).unwrap_err();
    assert!(matches!(e, Error::Value(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("only supports singleton Variables created on the first call"),
        "{e}"
    );
}

/// The guide's `Count` module: a variable created on the first call only.
struct Count {
    count: OnceLock<Variable>,
}

#[test]
fn the_create_once_pattern_counts_one_two_three() {
    let model = Arc::new(Count {
        count: OnceLock::new(),
    });
    let call = function({
        let model = model.clone();
        move || -> Result<Tensor> {
            let count = model
                .count
                .get_or_init(|| Variable::new(Tensor::scalar(0i32)));
            count.assign_add(&Tensor::scalar(1i32))?;
            Ok(count.read())
        }
    });
    let got: Vec<i32> = (0..3)
        .map(|_| call.call(()).unwrap().item::<i32>().unwrap())
        .collect();
    assert_eq!(got, vec![1, 2, 3]);
    // Traced twice on the first call (the first trace created the variable).
    assert_eq!(call.tracing_count(), 2);
}

#[test]
fn a_dropped_variable_fails_with_failed_precondition() {
    // The closure reads the variable from a slot that is emptied later, so
    // only the concrete function's weak reference remains.
    let slot = Arc::new(Mutex::new(Some(Variable::new(Tensor::scalar(5.0f32)))));
    let g = function({
        let slot = slot.clone();
        move || -> Result<Tensor> {
            let v = slot
                .lock()
                .unwrap()
                .clone()
                .expect("variable present while tracing");
            Ok(v.read())
        }
    });
    assert_eq!(g.call(()).unwrap().item::<f32>().unwrap(), 5.0);
    slot.lock().unwrap().take(); // the last strong reference is gone
    let e = g.call(()).unwrap_err();
    assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
    assert!(
        e.to_string()
            .contains("Could not find a variable captured by function"),
        "{e}"
    );
}

#[test]
fn eight_threads_add_one_a_thousand_times_each() {
    let v = Variable::new(Tensor::scalar(0i32));
    let add_one = function({
        let v = v.clone();
        move || v.assign_add(&Tensor::scalar(1i32))
    });
    std::thread::scope(|s| {
        for _ in 0..8 {
            let f = add_one.clone();
            s.spawn(move || {
                for _ in 0..1000 {
                    f.call(()).unwrap();
                }
            });
        }
    });
    assert_eq!(v.read().item::<i32>().unwrap(), 8000);
}

#[test]
fn nested_functions_replay_variable_updates_in_the_caller() {
    let v = Variable::new(Tensor::scalar(0f32));
    let inner = function({
        let v = v.clone();
        move |x: Tensor| -> Result<Tensor> {
            v.assign_add(&x)?;
            Ok(v.read())
        }
    });
    let outer = function({
        let inner = inner.clone();
        move |x: Tensor| -> Result<Tensor> {
            inner.call((&x,))?;
            inner.call((&x,))
        }
    });
    assert_eq!(
        outer
            .call((Tensor::scalar(2f32),))
            .unwrap()
            .item::<f32>()
            .unwrap(),
        4.0
    );
    assert_eq!(v.read().item::<f32>().unwrap(), 4.0);
}

#[test]
fn variable_arguments_are_typed_by_dtype_shape_and_aliasing() {
    // f(x, y, z): x += 1; y += 10; returns z + x.
    let f = function(|x: Variable, y: Variable, z: Variable| -> Result<Tensor> {
        x.assign_add(&Tensor::scalar(1f32))?;
        y.assign_add(&Tensor::scalar(10f32))?;
        z.read().add(&x.read())
    });
    let new = |v: f32| Variable::new(Tensor::scalar(v));
    let (a, b, c, d) = (new(0.0), new(100.0), new(1000.0), new(5.0));
    // f(a, a, c): both updates land on `a`, and reads see them.
    let r = f.call((a.clone(), a.clone(), c.clone())).unwrap();
    assert_eq!(a.read().item::<f32>().unwrap(), 11.0);
    assert_eq!(r.item::<f32>().unwrap(), 1011.0);
    // f(b, b, c) has the same aliasing pattern: no new trace.
    f.call((b.clone(), b.clone(), c.clone())).unwrap();
    assert_eq!(b.read().item::<f32>().unwrap(), 111.0);
    assert_eq!(f.tracing_count(), 1);
    // f(a, b, c) aliases differently: a new trace, updates to each.
    let r = f.call((a.clone(), b.clone(), d.clone())).unwrap();
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(a.read().item::<f32>().unwrap(), 12.0);
    assert_eq!(b.read().item::<f32>().unwrap(), 121.0);
    assert_eq!(r.item::<f32>().unwrap(), 17.0);
    // A variable of another shape is another type: a third trace.
    let v2 = Variable::new(Tensor::vector(&[0f32, 0.]).unwrap());
    let r = f.call((v2.clone(), v2.clone(), v2.clone())).unwrap();
    assert_eq!(f.tracing_count(), 3);
    assert_eq!(v2.read().to_vec::<f32>().unwrap(), vec![11., 11.]);
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![22., 22.]);
    let sig = f.pretty_printed_concrete_signatures();
    assert!(
        sig.contains("VariableSpec(shape=(), dtype=f32, alias_id=0)"),
        "{sig}"
    );
}

#[test]
fn an_optimizer_made_inside_the_step_is_told_to_move_outside() {
    // The optimizer (and its step count and slots) lives only while the
    // step is traced: the program then finds its variables gone, and the
    // error says where optimizers and layers belong.
    let w = Variable::new(Tensor::scalar(1.0f32));
    let step = function({
        let w = w.clone();
        move || -> Result<Tensor> {
            let sgd = xlafn::optimizers::Sgd::with_momentum(0.1, 0.9);
            sgd.minimize(&[&w], || w.read().square())
        }
    });
    // Whichever call first runs without them fails (here the first: the
    // trace that made them has ended by the time its program runs).
    let e = match step.call(()) {
        Ok(_) => step.call(()).unwrap_err(),
        Err(e) => e,
    };
    assert!(matches!(e, Error::FailedPrecondition(_)), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains("create optimizers and layers outside the function"),
        "{text}"
    );
}
