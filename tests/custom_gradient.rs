//! `custom_gradient` (tf.custom_gradient): TensorFlow's `log1pexp`
//! example, whose user gradient stays finite where differentiating the
//! body gives NaN; a deliberately scaled user gradient, to check that the
//! tape uses it rather than the body's, eagerly, with the tape inside a
//! traced function, and with an eager tape over a compiled function call
//! (whose backward replays the graph); several inputs and results; higher
//! order; errors.

#[path = "common/scratch.rs"]
mod scratch;

use xlafn::prelude::*;

/// log(1 + exp(x)) with the gradient `scale * sigmoid(x)` written with
/// the body's own `exp(x)` (scale 1 is the true gradient).
fn log1pexp(scale: f64) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Clone + Send + Sync {
    custom_gradient(move |xs: &[Tensor]| {
        let e = xs[0].exp()?;
        let y = e.add_scalar(1.0)?.log()?;
        let grad = move |dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            // TF's 1 - 1 / (1 + e): 1 where e overflows to inf.
            let sig = e
                .add_scalar(1.0)?
                .pow_scalar(-1.0)?
                .neg()?
                .add_scalar(1.0)?;
            Ok(vec![Some(dy[0].mul(&sig)?.mul_scalar(scale)?)])
        };
        Ok((vec![y], grad))
    })
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn eager_gradient(f: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>, x: &Tensor) -> Tensor {
    let tape = GradientTape::new();
    tape.watch(x);
    let y = f(std::slice::from_ref(x)).unwrap().remove(0);
    let s = y.reduce_sum(&[], false).unwrap();
    tape.gradient(&s, &[x.into()]).unwrap()[0]
        .clone()
        .expect("a gradient")
}

#[test]
fn log1pexp_uses_the_user_gradient_eagerly() {
    let f = log1pexp(1.0);
    // f32 at 100: exp overflows, and the body's own gradient is inf/inf.
    let x = Tensor::vector(&[100.0f32, 0.0, -3.0]).unwrap();
    let y = f(std::slice::from_ref(&x)).unwrap().remove(0);
    assert_eq!(y.to_vec::<f32>().unwrap()[1], 2f32.ln());
    let naive = {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x.exp().unwrap().add_scalar(1.0).unwrap().log().unwrap();
        tape.gradient(&y, &[(&x).into()]).unwrap()[0]
            .clone()
            .unwrap()
    };
    assert!(naive.to_vec::<f32>().unwrap()[0].is_nan());
    let g = eager_gradient(&f, &x).to_vec::<f32>().unwrap();
    assert_eq!(g[0], 1.0);
    assert!((g[1] - 0.5).abs() < 1e-7);
    assert!((g[2] as f64 - sigmoid(-3.0)).abs() < 1e-7);
    // Without a tape it is just the function.
    let plain = f(std::slice::from_ref(&x)).unwrap().remove(0);
    assert_eq!(plain.dims(), vec![3]);
}

#[test]
fn a_scaled_user_gradient_is_what_the_tape_returns_eagerly_and_traced() {
    let xs = [0.3f64, -1.2, 2.0];
    let x = Tensor::vector(&xs).unwrap();
    let want: Vec<f64> = xs.iter().map(|&v| 3.0 * sigmoid(v)).collect();
    let close = |got: Vec<f64>, what: &str| {
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{what}: {got:?} vs {want:?}");
        }
    };
    let f = log1pexp(3.0);
    close(eager_gradient(&f, &x).to_vec().unwrap(), "eager");

    // The tape inside a traced function.
    let traced = function({
        let f = f.clone();
        move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = f(std::slice::from_ref(&x))?
                .remove(0)
                .reduce_sum(&[], false)?;
            Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
        }
    });
    close(
        traced.call((&x,)).unwrap().to_vec().unwrap(),
        "tape in function",
    );
    let names: Vec<&str> = traced.concrete_functions()[0]
        .graph()
        .operations()
        .iter()
        .map(|n| n.op_type())
        .collect();
    assert!(names.contains(&"custom_gradient"), "{names:?}");

    // An eager tape over a compiled call: the call's backward function
    // replays the graph, meets the op again and runs the body again.
    let forward = function({
        let f = f.clone();
        move |x: Tensor| -> Result<Tensor> {
            f(std::slice::from_ref(&x))?.remove(0).mul_scalar(1.0)
        }
    });
    for _ in 0..2 {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = forward.call((&x,)).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&y, &[(&x).into()]).unwrap()[0]
            .clone()
            .unwrap();
        close(g.to_vec().unwrap(), "tape over a call");
    }

    // A nested function inlined into a traced step with the tape there.
    let step = function({
        let forward = forward.clone();
        move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = forward.call((&x,))?.reduce_sum(&[], false)?;
            Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
        }
    });
    close(
        step.call((&x,)).unwrap().to_vec().unwrap(),
        "nested function",
    );
}

#[test]
fn several_inputs_and_results_with_a_missing_gradient() {
    // (x * y, x + y), with a user gradient that gives x a doubled gradient
    // and y none.
    let f = custom_gradient(|xs: &[Tensor]| {
        let (x, y) = (xs[0].clone(), xs[1].clone());
        let outs = vec![x.mul(&y)?, x.add(&y)?];
        let grad = move |dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            let dx = dy[0].mul(&y)?.add(&dy[1])?.mul_scalar(2.0)?;
            Ok(vec![Some(dx), None])
        };
        Ok((outs, grad))
    });
    let x = Tensor::vector(&[1.0f64, 2.0]).unwrap();
    let y = Tensor::vector(&[3.0f64, -1.0]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    tape.watch(&y);
    let outs = f(&[x.clone(), y.clone()]).unwrap();
    assert_eq!(outs[0].to_vec::<f64>().unwrap(), vec![3.0, -2.0]);
    // Only the first result is used: the second's upstream gradient is 0.
    let s = outs[0].reduce_sum(&[], false).unwrap();
    let g = tape.gradient(&s, &[(&x).into(), (&y).into()]).unwrap();
    assert_eq!(
        g[0].clone().unwrap().to_vec::<f64>().unwrap(),
        vec![6.0, -2.0]
    );
    assert!(g[1].is_none());
}

#[test]
fn second_derivatives_go_through_the_gradient_function() {
    // The gradient function computes sigmoid(x) from the input, so an
    // outer tape differentiates it: d²/dx² = sigmoid'(x).
    let f = custom_gradient(|xs: &[Tensor]| {
        let x = xs[0].clone();
        let y = x.exp()?.add_scalar(1.0)?.log()?;
        let grad = move |dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            Ok(vec![Some(dy[0].mul(&x.sigmoid()?)?)])
        };
        Ok((vec![y], grad))
    });
    let x = Tensor::scalar(0.7f64);
    let outer = GradientTape::new();
    outer.watch(&x);
    let inner = GradientTape::new();
    inner.watch(&x);
    let y = f(std::slice::from_ref(&x)).unwrap().remove(0);
    let g = inner.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    let gg = outer.gradient(&g, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    let s = sigmoid(0.7);
    assert!((g.item::<f64>().unwrap() - s).abs() < 1e-12);
    assert!((gg.item::<f64>().unwrap() - s * (1.0 - s)).abs() < 1e-12);
}

#[test]
fn bad_gradient_functions_and_exports_are_errors() {
    let count = custom_gradient(|xs: &[Tensor]| {
        let y = xs[0].square()?;
        Ok((vec![y], |_dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            Ok(vec![])
        }))
    });
    let shape = custom_gradient(|xs: &[Tensor]| {
        let y = xs[0].square()?;
        Ok((vec![y], |_dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            Ok(vec![Some(Tensor::vector(&[1.0f64, 2.0, 3.0])?)])
        }))
    });
    let x = Tensor::vector(&[1.0f64, 2.0]).unwrap();
    for (f, needle) in [
        (
            &count as &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
            "0 gradient(s) for 1 input(s)",
        ),
        (&shape, "gave f64(3,) for input #0"),
    ] {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = f(std::slice::from_ref(&x)).unwrap().remove(0);
        match tape.gradient(&y, &[(&x).into()]) {
            Err(Error::InvalidArgument { op, message }) => {
                assert_eq!(op, "custom_gradient");
                assert!(message.contains(needle), "{message}");
            }
            other => panic!("expected an error, got {other:?}"),
        }
    }
    // The op holds closures, which an export cannot write: it is written
    // as the identity it computes (a loaded export runs forward only), in
    // the top-level graph and in a cond branch's.
    let f = log1pexp(1.0);
    let g = function(move |x: Tensor| -> Result<Tensor> {
        let positive = x.reduce_sum(&[], false)?.gt_scalar(0.0)?;
        let y = f(std::slice::from_ref(&x))?.remove(0);
        let f = f.clone();
        let z: Tensor = cond(
            &positive,
            move || Ok(f(std::slice::from_ref(&x))?.remove(0)),
            || Tensor::vector(&[0.0f64, 0.0]),
        )?;
        y.add(&z)
    });
    let cf = g.get_concrete_function((&x,)).unwrap();
    let scratch = scratch::scratch_dir("custom-gradient");
    let dir = scratch.join("custom-gradient");
    cf.export(&dir, &[]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let got = loaded
        .call(&[&x])
        .unwrap()
        .remove(0)
        .to_vec::<f64>()
        .unwrap();
    let want: Vec<f64> = [1.0f64, 2.0]
        .iter()
        .map(|v| 2.0 * v.exp().ln_1p())
        .collect();
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_custom_gradient_inside_a_cond_branch_of_a_traced_function() {
    // The branch region is replayed for its gradient: the op is met again
    // there and its body runs again for a gradient function.
    let f = log1pexp(3.0);
    let grad = function(move |x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let positive = x.reduce_sum(&[], false)?.gt_scalar(0.0)?;
        let y: Tensor = cond(
            &positive,
            || {
                f(std::slice::from_ref(&x))?
                    .remove(0)
                    .reduce_sum(&[], false)
            },
            || x.mul_scalar(5.0)?.reduce_sum(&[], false),
        )?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
    });
    let g = grad
        .call((Tensor::vector(&[0.5f64, 1.0]).unwrap(),))
        .unwrap();
    let g = g.to_vec::<f64>().unwrap();
    for (got, x) in g.iter().zip([0.5, 1.0]) {
        assert!((got - 3.0 * sigmoid(x)).abs() < 1e-12, "{g:?}");
    }
    let g = grad
        .call((Tensor::vector(&[-0.5f64, -1.0]).unwrap(),))
        .unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![5.0, 5.0]);
}
