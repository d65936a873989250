//! Variables assigned inside tensor control flow: the API page's
//! `for i in tf.range(x): v.assign_add(i)`, a variable updated in one
//! branch of a `cond`, nested functions that assign called in a loop body,
//! reads that see earlier updates, and gradients through such loops.

use xlafn::prelude::*;

fn scalar_i32(t: &Tensor) -> i32 {
    t.item::<i32>().unwrap()
}

#[test]
fn api_page_range_loop_adds_to_a_variable() {
    // v = tf.Variable(1); f(x): for i in tf.range(x): v.assign_add(i)
    let v = Variable::new(Tensor::scalar(1i32));
    let f = function({
        let v = v.clone();
        move |x: Tensor| -> Result<()> {
            for_range(0, &x, 1, (), |i, ()| v.assign_add(&i))?;
            Ok(())
        }
    });
    f.call((Tensor::scalar(3i32),)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 4);
    f.call((Tensor::scalar(3i32),)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 7);
    // Another trip count is the same trace: the loop runs on the device.
    f.call((Tensor::scalar(0i32),)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 7);
    f.call((Tensor::scalar(5i32),)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 17);
    assert_eq!(f.tracing_count(), 1);
}

// The same with autograph: a plain `for` over a tensor range.
#[xlafn::function]
fn add_range(v: Variable, x: Tensor) -> Result<()> {
    for i in xlafn::autograph::range(&x)? {
        v.assign_add(&i)?;
    }
    Ok(())
}

#[test]
fn autograph_for_loop_adds_to_a_variable() {
    let v = Variable::new(Tensor::scalar(1i32));
    add_range(v.clone(), Tensor::scalar(3i32)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 4);
    add_range(v.clone(), Tensor::scalar(3i32)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 7);
    assert_eq!(add_range::function().tracing_count(), 1);
}

#[test]
fn reads_inside_a_loop_see_the_updates_before_them() {
    // acc collects the running value of v after each update: 1+1, 2+2, ...
    let v = Variable::new(Tensor::scalar(1f32));
    let f = function({
        let v = v.clone();
        move |n: Tensor| -> Result<Tensor> {
            for_range(0, &n, 1, Tensor::scalar(0f32), |_, acc| -> Result<Tensor> {
                v.assign(&(v.read() * 2.0))?;
                acc.add(&v.read())
            })
        }
    });
    let acc = f.call((Tensor::scalar(3i32),)).unwrap();
    // v: 1 -> 2 -> 4 -> 8; acc = 2 + 4 + 8.
    assert_eq!(acc.item::<f32>().unwrap(), 14.0);
    assert_eq!(v.read().item::<f32>().unwrap(), 8.0);
    let acc = f.call((Tensor::scalar(2i32),)).unwrap();
    assert_eq!(acc.item::<f32>().unwrap(), 16.0 + 32.0);
    assert_eq!(v.read().item::<f32>().unwrap(), 32.0);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn a_variable_updated_in_one_branch_only() {
    let hits = Variable::new(Tensor::scalar(0i32));
    let f = function({
        let hits = hits.clone();
        move |x: Tensor| -> Result<Tensor> {
            cond(
                &x.gt_scalar(0.0)?,
                || -> Result<Tensor> {
                    hits.assign_add(&Tensor::scalar(1i32))?;
                    Ok(&x * 2.0)
                },
                || -x.clone(),
            )
        }
    });
    let y = f.call((Tensor::scalar(3f32),)).unwrap();
    assert_eq!(y.item::<f32>().unwrap(), 6.0);
    assert_eq!(scalar_i32(&hits.read()), 1);
    let y = f.call((Tensor::scalar(-3f32),)).unwrap();
    assert_eq!(y.item::<f32>().unwrap(), 3.0);
    assert_eq!(scalar_i32(&hits.read()), 1);
    f.call((Tensor::scalar(1f32),)).unwrap();
    assert_eq!(scalar_i32(&hits.read()), 2);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn branches_assign_different_variables_and_values() {
    let (a, b) = (
        Variable::new(Tensor::scalar(0f32)),
        Variable::new(Tensor::vector(&[0f32, 0.]).unwrap()),
    );
    let f = function({
        let (a, b) = (a.clone(), b.clone());
        move |p: Tensor, x: Tensor| -> Result<()> {
            cond(
                &p,
                || -> Result<()> {
                    a.assign(&x)?;
                    b.assign_add(&Tensor::vector(&[1f32, 2.])?)
                },
                || b.assign(&Tensor::vector(&[7f32, 8.])?),
            )
        }
    });
    f.call((Tensor::scalar(true), Tensor::scalar(5f32)))
        .unwrap();
    assert_eq!(a.read().item::<f32>().unwrap(), 5.0);
    assert_eq!(b.read().to_vec::<f32>().unwrap(), vec![1., 2.]);
    f.call((Tensor::scalar(false), Tensor::scalar(9f32)))
        .unwrap();
    assert_eq!(a.read().item::<f32>().unwrap(), 5.0);
    assert_eq!(b.read().to_vec::<f32>().unwrap(), vec![7., 8.]);
    f.call((Tensor::scalar(true), Tensor::scalar(9f32)))
        .unwrap();
    assert_eq!(a.read().item::<f32>().unwrap(), 9.0);
    assert_eq!(b.read().to_vec::<f32>().unwrap(), vec![8., 10.]);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn nested_functions_that_assign_run_inside_a_loop_body() {
    let total = Variable::new(Tensor::scalar(0f32));
    let accumulate = function({
        let total = total.clone();
        move |x: Tensor| -> Result<Tensor> {
            total.assign_add(&x)?;
            Ok(total.read())
        }
    });
    let f = function({
        let accumulate = accumulate.clone();
        move |n: Tensor, x: Tensor| -> Result<Tensor> {
            for_range(0, &n, 1, Tensor::scalar(0f32), |_, last| {
                let now = accumulate.call((&x,))?;
                now.sub(&last).map(|_| now)
            })
        }
    });
    let last = f
        .call((Tensor::scalar(4i32), Tensor::scalar(2.5f32)))
        .unwrap();
    assert_eq!(last.item::<f32>().unwrap(), 10.0);
    assert_eq!(total.read().item::<f32>().unwrap(), 10.0);
    let last = f
        .call((Tensor::scalar(2i32), Tensor::scalar(1f32)))
        .unwrap();
    assert_eq!(last.item::<f32>().unwrap(), 12.0);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn while_loop_bodies_and_nested_conds_assign() {
    // Counts the odd numbers below n in a variable, inside a while body.
    let odd = Variable::new(Tensor::scalar(0i32));
    let f = function({
        let odd = odd.clone();
        move |n: Tensor| -> Result<Tensor> {
            while_loop(
                |i: &Tensor| i.lt(&n),
                |i: Tensor| -> Result<Tensor> {
                    cond(
                        &i.floormod_scalar(2)?.eq_scalar(1)?,
                        || odd.assign_add(&Tensor::scalar(1i32)),
                        || Ok(()),
                    )?;
                    Ok(i + 1)
                },
                Tensor::scalar(0i32),
            )
        }
    });
    f.call((Tensor::scalar(7i32),)).unwrap();
    assert_eq!(scalar_i32(&odd.read()), 3);
    f.call((Tensor::scalar(4i32),)).unwrap();
    assert_eq!(scalar_i32(&odd.read()), 5);
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn eager_control_flow_updates_variables_directly() {
    let v = Variable::new(Tensor::scalar(1i32));
    for_range(0, Tensor::scalar(3i32), 1, (), |i, ()| v.assign_add(&i)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 4);
}

#[test]
fn a_loop_condition_may_not_assign() {
    let v = Variable::new(Tensor::scalar(0i32));
    let f = function({
        let v = v.clone();
        move |n: Tensor| -> Result<Tensor> {
            while_loop(
                |i: &Tensor| -> Result<Tensor> {
                    v.assign_add(&Tensor::scalar(1i32))?;
                    i.lt(&n)
                },
                |i: Tensor| i + 1,
                Tensor::scalar(0i32),
            )
        }
    });
    let e = f.call((Tensor::scalar(3i32),)).unwrap_err();
    assert!(
        e.to_string()
            .contains("the loop condition assigns variable"),
        "{e}"
    );
}

#[test]
fn gradients_flow_through_loops_that_assign() {
    // y = x * w^3 by a loop that multiplies by w three times and counts its
    // steps in a variable; dy/dw = 3 x w^2, dy/dx = w^3.
    let w = Variable::new(Tensor::scalar(1.5f32));
    let steps = Variable::new(Tensor::scalar(0i32));
    let f = function({
        let (w, steps) = (w.clone(), steps.clone());
        move |x: Tensor| -> Result<(Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = for_range(0, 3, 1, x.clone(), |_, y| -> Result<Tensor> {
                steps.assign_add(&Tensor::scalar(1i32))?;
                y.mul(&w.read())
            })?;
            let g = tape.gradient(&y, &[Source::Variable(&w), Source::from(&x)])?;
            Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
        }
    });
    let (dw, dx) = f.call((Tensor::scalar(2f32),)).unwrap();
    assert!((dw.item::<f32>().unwrap() - 3.0 * 2.0 * 1.5 * 1.5).abs() < 1e-4);
    assert!((dx.item::<f32>().unwrap() - 1.5f32.powi(3)).abs() < 1e-4);
    assert_eq!(scalar_i32(&steps.read()), 3);

    // A loop that accumulates into a float variable: the gradient of the
    // final value of acc = acc0 + sum_i x * i with respect to x is sum_i i.
    let acc = Variable::new(Tensor::scalar(0f32));
    let g = function({
        let acc = acc.clone();
        move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            for_range(0, 4, 1, (), |i, ()| {
                acc.assign_add(&x.mul(&i.cast(DType::F32)?)?)
            })?;
            let total = acc.read();
            tape.gradient(&total, &[Source::from(&x)])?[0]
                .clone()
                .ok_or_else(|| Error::Value("no gradient".into()))
        }
    });
    let dx = g.call((Tensor::scalar(2f32),)).unwrap();
    assert_eq!(dx.item::<f32>().unwrap(), 6.0);
    assert_eq!(acc.read().item::<f32>().unwrap(), 12.0);
}

#[test]
fn an_eager_tape_differentiates_a_compiled_call_whose_loop_assigns() {
    let w = Variable::new(Tensor::scalar(2f32));
    let calls = Variable::new(Tensor::scalar(0i32));
    let f = function({
        let (w, calls) = (w.clone(), calls.clone());
        move |x: Tensor| -> Result<Tensor> {
            for_range(0, 2, 1, x.clone(), |_, y| -> Result<Tensor> {
                calls.assign_add(&Tensor::scalar(1i32))?;
                y.mul(&w.read())
            })
        }
    });
    let tape = GradientTape::new();
    let y = f.call((Tensor::scalar(3f32),)).unwrap();
    let g = tape.gradient(&y, &[Source::Variable(&w)]).unwrap();
    assert_eq!(y.item::<f32>().unwrap(), 12.0);
    // y = x w^2: dy/dw = 2 x w.
    assert_eq!(g[0].as_ref().unwrap().item::<f32>().unwrap(), 12.0);
    assert_eq!(scalar_i32(&calls.read()), 2);
}

#[test]
fn unfused_functions_assign_inside_loops_too() {
    let v = Variable::new(Tensor::scalar(1i32));
    let f = FunctionOptions::new().jit_compile(false).build({
        let v = v.clone();
        move |x: Tensor| -> Result<()> {
            for_range(0, &x, 1, (), |i, ()| v.assign_add(&i))?;
            Ok(())
        }
    });
    f.call((Tensor::scalar(3i32),)).unwrap();
    f.call((Tensor::scalar(3i32),)).unwrap();
    assert_eq!(scalar_i32(&v.read()), 7);
}
