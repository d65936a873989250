//! Every gradient rule against central finite differences in f64, on
//! random inputs (one property test per op family), and gradients through
//! traced functions, nested functions, variables and higher orders.

use proptest::prelude::*;
use xlafn::prelude::*;

type F = dyn Fn(&Tensor) -> Result<Tensor>;

/// sum(f(x) * w) for fixed weights w, so every output element matters
/// differently.
fn weighted_sum(f: &F, x: &Tensor, w: &[f64]) -> Result<Tensor> {
    let y = f(x)?;
    let w = Tensor::from_vec(w.to_vec(), &y.dims())?;
    y.mul(&w)?.reduce_sum(&[], false)
}

fn check_gradient(f: &F, x0: &[f64], dims: &[i64], out_size: usize) {
    let w: Vec<f64> = (0..out_size)
        .map(|i| 0.5 + (i as f64 * 0.37) % 1.0)
        .collect();
    let x = Tensor::from_vec(x0.to_vec(), dims).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let s = weighted_sum(f, &x, &w).unwrap();
    let analytic = tape.gradient(&s, &[(&x).into()]).unwrap()[0]
        .clone()
        .expect("a gradient");
    let analytic = analytic.to_vec::<f64>().unwrap();
    let eps = 1e-6;
    for i in 0..x0.len() {
        let at = |delta: f64| {
            let mut v = x0.to_vec();
            v[i] += delta;
            weighted_sum(f, &Tensor::from_vec(v, dims).unwrap(), &w)
                .unwrap()
                .item::<f64>()
                .unwrap()
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        let tol = 1e-5 * (1.0 + numeric.abs());
        assert!(
            (analytic[i] - numeric).abs() <= tol,
            "element {i}: analytic {} vs numeric {numeric}",
            analytic[i]
        );
    }
}

fn values(n: usize, lo: f64, hi: f64) -> impl Strategy<Value = Vec<f64>> {
    prop::collection::vec(lo..hi, n)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(8))]

    #[test]
    fn unary_family(x in values(6, 0.2, 2.0)) {
        let rules: Vec<Box<F>> = vec![
            Box::new(|x| x.neg()), Box::new(|x| x.abs()), Box::new(|x| x.exp()), Box::new(|x| x.log()),
            Box::new(|x| x.log1p()), Box::new(|x| x.sqrt()), Box::new(|x| x.rsqrt()), Box::new(|x| x.square()),
            Box::new(|x| x.tanh()), Box::new(|x| x.sigmoid()), Box::new(|x| x.sin()), Box::new(|x| x.cos()),
            Box::new(|x| x.sub_scalar(1.0)?.relu()),
        ];
        for f in &rules {
            check_gradient(f.as_ref(), &x, &[2, 3], 6);
        }
    }

    #[test]
    fn binary_family_with_broadcasting(x in values(6, 0.5, 2.0), y in values(3, 0.5, 2.0)) {
        let other = Tensor::from_vec(y.clone(), &[3]).unwrap();
        let rules: Vec<Box<F>> = vec![
            Box::new({ let o = other.clone(); move |x: &Tensor| x.add(&o) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.sub(&o) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.mul(&o) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.div(&o) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.pow(&o) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.maximum(&o.add_scalar(0.01)?) }),
            Box::new({ let o = other.clone(); move |x: &Tensor| x.minimum(&o.add_scalar(0.01)?) }),
            // The broadcast operand's gradient is summed over the broadcast axis.
            Box::new({ let o = Tensor::from_vec(x.clone(), &[2, 3]).unwrap(); move |y: &Tensor| o.mul(y) }),
            Box::new({ let o = Tensor::from_vec(x.clone(), &[2, 3]).unwrap(); move |y: &Tensor| o.div(y) }),
        ];
        for (k, f) in rules.iter().enumerate() {
            if k < 7 { check_gradient(f.as_ref(), &x, &[2, 3], 6) } else { check_gradient(f.as_ref(), &y, &[3], 6) }
        }
    }

    #[test]
    fn reductions_softmax_and_matmul(x in values(12, -2.0, 2.0), m in values(8, -1.0, 1.0)) {
        let rules: Vec<(Box<F>, usize)> = vec![
            (Box::new(|x| x.reduce_sum(&[1], false)), 3),
            (Box::new(|x| x.reduce_mean(&[0], true)), 4),
            (Box::new(|x| x.reduce_max(&[1], false)), 3),
            (Box::new(|x| x.reduce_min(&[], false)), 1),
            (Box::new(|x| x.add_scalar(3.0)?.reduce_prod(&[0], false)), 4),
            (Box::new(|x| x.gather(&Tensor::vector(&[2i32, 0, 2]).unwrap(), 0)), 12),
            (Box::new(|x| x.gather(&Tensor::from_vec(vec![3i64, 1], &[2, 1]).unwrap(), 1)), 6),
            (Box::new(|x| x.softmax(-1)), 12),
            (Box::new(|x| x.log_softmax(0)), 12),
            (Box::new({ let b = Tensor::from_vec(m.clone(), &[4, 2]).unwrap(); move |a: &Tensor| a.matmul(&b) }), 6),
            (Box::new({ let b = Tensor::from_vec(m.clone(), &[2, 4]).unwrap(); move |a: &Tensor| a.matmul_t(&b, false, true) }), 6),
        ];
        for (f, n) in &rules {
            check_gradient(f.as_ref(), &x, &[3, 4], *n);
        }
        // The right operand of a matmul.
        let a = Tensor::from_vec(x.clone(), &[3, 4]).unwrap();
        check_gradient(&move |b: &Tensor| a.matmul(b), &m, &[4, 2], 6);
    }

    #[test]
    fn shape_family(x in values(6, -2.0, 2.0)) {
        let rules: Vec<(Box<F>, usize)> = vec![
            (Box::new(|x| x.reshape(&[3, 2])), 6),
            (Box::new(|x| x.transpose(&[1, 0])), 6),
            (Box::new(|x| x.slice(&[0, 1], &[2, 2])), 4),
            (Box::new(|x| x.strided_slice(&[1, 2], &[i64::MIN, i64::MIN], &[-1, -2])), 4),
            (Box::new(|x| x.strided_slice(&[0], &[2], &[1])), 6),
            (Box::new(|x| Tensor::concat(&[x.clone(), x.square()?], 0)), 12),
            (Box::new(|x| x.gt_scalar(0.0)?.where_(x, &x.square()?)), 6),
        ];
        for (f, n) in &rules {
            check_gradient(f.as_ref(), &x, &[2, 3], *n);
        }
    }
}

#[test]
fn cast_passes_gradients_between_float_types() {
    let x = Tensor::vector(&[1.5f64, -2.0]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x
        .cast(DType::F32)
        .unwrap()
        .mul_scalar(3.0)
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.dtype(), DType::F64);
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![3.0, 3.0]);
}

#[test]
fn integer_and_unconnected_gradients_are_none() {
    let x = Tensor::vector(&[1i32, 2]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = &x * 2;
    assert!(tape.gradient(&y, &[(&x).into()]).unwrap()[0].is_none());
    let a = Tensor::scalar(1.0f64);
    let b = Tensor::scalar(2.0f64);
    let tape = GradientTape::new();
    tape.watch(&a);
    let y = &a * 3.0;
    let g = tape.gradient(&y, &[(&a).into(), (&b).into()]).unwrap();
    assert_eq!(g[0].as_ref().unwrap().item::<f64>().unwrap(), 3.0);
    assert!(g[1].is_none(), "b was neither watched nor used");
    assert!(
        tape.gradient(&y, &[(&a).into()]).is_err(),
        "non-persistent tapes give one gradient"
    );
}

#[test]
fn second_derivatives_with_nested_tapes() {
    let x = Tensor::scalar(2.0f64);
    let outer = GradientTape::new();
    outer.watch(&x);
    let inner = GradientTape::new();
    inner.watch(&x);
    let y = &x * &x * &x;
    let dy = inner.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    let d2y = outer.gradient(&dy, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(dy.item::<f64>().unwrap(), 12.0); // 3x²
    assert_eq!(d2y.item::<f64>().unwrap(), 12.0); // 6x
}

#[test]
fn gradients_of_variables_inside_a_traced_step_and_through_nested_functions() {
    // y = sum((w * x + b)²); the whole step (forward, backward, update) is
    // one compiled program.
    let w = Variable::new(Tensor::vector(&[1.0f64, -2.0]).unwrap());
    let b = Variable::new(Tensor::scalar(0.5f64));
    let model = function({
        let (w, b) = (w.clone(), b.clone());
        move |x: Tensor| -> Result<Tensor> { x.mul(&w.read())?.add(&b.read()) }
    });
    let step = function({
        let (w, b, model) = (w.clone(), b.clone(), model.clone());
        move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let y = model.call((&x,))?; // a nested function
            let loss = y.square()?.reduce_sum(&[], false)?;
            let g = tape.gradient(&loss, &[(&w).into(), (&b).into()])?;
            w.assign_sub(&g[0].clone().expect("dw").mul_scalar(0.1)?)?;
            b.assign_sub(&g[1].clone().expect("db").mul_scalar(0.1)?)?;
            Ok(loss)
        }
    });
    let x = Tensor::vector(&[3.0f64, 1.0]).unwrap();
    let loss = step.call((&x,)).unwrap().item::<f64>().unwrap();
    // By hand: y = [3.5, -1.5], loss = 12.25 + 2.25; dw = 2y*x = [21, -3]; db = 2*sum(y) = 4.
    assert_eq!(loss, 14.5);
    assert_eq!(
        w.read().to_vec::<f64>().unwrap(),
        vec![1.0 - 2.1, -2.0 + 0.3]
    );
    assert!((b.read().item::<f64>().unwrap() - (0.5 - 0.4)).abs() < 1e-12);
    assert_eq!(step.tracing_count(), 1);
    let ops: Vec<&str> = step.concrete_functions()[0]
        .graph()
        .operations()
        .iter()
        .map(|n| n.op_type())
        .collect();
    assert!(
        ops.contains(&"mul") && ops.len() > 6,
        "forward and backward in one graph: {ops:?}"
    );
}

#[test]
fn gradients_flow_through_cond_in_a_traced_function() {
    // f(x) = sum(x²) if sum(x) > 0 else sum(3x); df/dx = 2x or 3.
    let grad = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let positive = x.reduce_sum(&[], false)?.gt_scalar(0.0)?;
        let y: Tensor = cond(
            &positive,
            || x.square()?.reduce_sum(&[], false),
            || x.mul_scalar(3.0)?.reduce_sum(&[], false),
        )?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0]
            .clone()
            .expect("a gradient"))
    });
    let g = grad
        .call((Tensor::vector(&[1.0f64, 2.0]).unwrap(),))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(g, vec![2.0, 4.0]);
    let g = grad
        .call((Tensor::vector(&[-1.0f64, -2.0]).unwrap(),))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(g, vec![3.0, 3.0]);
    assert_eq!(grad.tracing_count(), 1);
    // Against finite differences on a smooth branch pair.
    let f = |v: f64| if v > 0.0 { v.sin() } else { v * v };
    let smooth = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y: Tensor = cond(&x.gt_scalar(0.0)?, || x.sin(), || x.square())?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
    });
    for v in [0.7f64, -0.4] {
        let analytic = smooth
            .call((Tensor::scalar(v),))
            .unwrap()
            .item::<f64>()
            .unwrap();
        let numeric = (f(v + 1e-6) - f(v - 1e-6)) / 2e-6;
        assert!((analytic - numeric).abs() < 1e-6, "{analytic} vs {numeric}");
    }
}

#[test]
fn dynamic_slicing_and_tensor_array_reads_and_writes_have_gradients() {
    let x0 = [0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75];
    let f: Box<F> = Box::new(|x: &Tensor| {
        let i = Tensor::scalar(1i32);
        let window = x
            .dynamic_slice(&[i.clone(), Tensor::scalar(0i32)], &[1, 3])?
            .square()?;
        x.dynamic_update_slice(
            &window.mul_scalar(2.0)?,
            &[Tensor::scalar(0i32), Tensor::scalar(0i32)],
        )
    });
    check_gradient(f.as_ref(), &x0, &[2, 3], 6);
    // A TensorArray written and stacked.
    let g: Box<F> = Box::new(|x: &Tensor| {
        let ta = TensorArray::new(DType::F64, 2).with_element_shape(&[3])?;
        let rows = TensorArray::unstack(x)?;
        let ta = ta
            .write(1i64, &rows.read(0i64)?.sin()?)?
            .write(0i64, &rows.read(1i64)?.square()?)?;
        ta.stack()
    });
    check_gradient(g.as_ref(), &x0, &[2, 3], 6);
}

#[test]
fn gradients_flow_through_while_loops_in_traced_functions() {
    // y = sum(loop_n(x -> tanh(x * w))), n = 3 given as a tensor; gradient
    // with respect to x (a loop value) and w (captured by the body).
    let grads = function(
        |x: Tensor, w: Tensor, n: Tensor| -> Result<(Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(&x);
            tape.watch(&w);
            let y = for_range(0, &n, 1, x.clone(), |_i, s: Tensor| s.mul(&w)?.tanh())?;
            let total = y.reduce_sum(&[], false)?;
            let g = tape.gradient(&total, &[(&x).into(), (&w).into()])?;
            Ok((g[0].clone().expect("dx"), g[1].clone().expect("dw")))
        },
    );
    let forward = |x: &[f64], w: f64, n: usize| -> f64 {
        x.iter()
            .map(|&v| (0..n).fold(v, |s, _| (s * w).tanh()))
            .sum()
    };
    let (x0, w0) = (vec![0.3f64, -0.8, 1.1], 0.9f64);
    for n in [0usize, 1, 3] {
        let (dx, dw) = grads
            .call((
                Tensor::vector(&x0).unwrap(),
                Tensor::scalar(w0),
                Tensor::scalar(n as i32),
            ))
            .unwrap();
        let (dx, dw) = (dx.to_vec::<f64>().unwrap(), dw.item::<f64>().unwrap());
        let eps = 1e-6;
        for i in 0..3 {
            let mut plus = x0.clone();
            plus[i] += eps;
            let mut minus = x0.clone();
            minus[i] -= eps;
            let numeric = (forward(&plus, w0, n) - forward(&minus, w0, n)) / (2.0 * eps);
            assert!(
                (dx[i] - numeric).abs() < 1e-6,
                "n={n} dx[{i}]: {} vs {numeric}",
                dx[i]
            );
        }
        let numeric_w = (forward(&x0, w0 + eps, n) - forward(&x0, w0 - eps, n)) / (2.0 * eps);
        assert!(
            (dw - numeric_w).abs() < 1e-6,
            "n={n} dw: {dw} vs {numeric_w}"
        );
    }
    assert_eq!(grads.tracing_count(), 1);
}

/// `x_{t+1} = x_t * a + b` for `n` steps, summed; the gradients with
/// respect to `x`, `a` and `b`, by a tape through a device `for` loop.
type AffineGradients = Function<(Tensor, Tensor, Tensor, Tensor), (Tensor, Tensor, Tensor)>;

fn affine_loop_gradients(options: FunctionOptions) -> AffineGradients {
    options.build(
        |x: Tensor, a: Tensor, b: Tensor, n: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
            let tape = GradientTape::new();
            for v in [&x, &a, &b] {
                tape.watch(v);
            }
            let y = for_range(0, &n, 1, x.clone(), |_i, s: Tensor| s.mul(&a)?.add(&b))?;
            let g = tape.gradient(
                &y.reduce_sum(&[], false)?,
                &[(&x).into(), (&a).into(), (&b).into()],
            )?;
            let g: Vec<Tensor> = g.into_iter().map(|g| g.expect("a gradient")).collect();
            Ok((g[0].clone(), g[1].clone(), g[2].clone()))
        },
    )
}

fn check_affine_loop(f: &AffineGradients, n: usize) {
    let forward = |x: &[f64], a: f64, b: f64| -> f64 {
        x.iter().map(|&v| (0..n).fold(v, |s, _| s * a + b)).sum()
    };
    let (x0, a0, b0) = (vec![0.5f64, -1.5], 0.999f64, 0.01f64);
    let (dx, da, db) = f
        .call((
            Tensor::vector(&x0).unwrap(),
            Tensor::scalar(a0),
            Tensor::scalar(b0),
            Tensor::scalar(n as i32),
        ))
        .unwrap();
    let eps = 1e-6;
    let numeric = |g: &dyn Fn(f64) -> f64| (g(eps) - g(-eps)) / (2.0 * eps);
    let close = |got: f64, want: f64, what: &str| {
        assert!(
            (got - want).abs() <= 1e-6 * want.abs().max(1.0),
            "n={n} {what}: {got} vs {want}"
        )
    };
    // d/dx_i is a^n for each element (independent of x).
    for (i, g) in dx.to_vec::<f64>().unwrap().into_iter().enumerate() {
        close(
            g,
            numeric(&|e| {
                let mut x = x0.clone();
                x[i] += e;
                forward(&x, a0, b0)
            }),
            "dx",
        );
    }
    close(
        da.item::<f64>().unwrap(),
        numeric(&|e| forward(&x0, a0 + e, b0)),
        "da",
    );
    close(
        db.item::<f64>().unwrap(),
        numeric(&|e| forward(&x0, a0, b0 + e)),
        "db",
    );
}

#[test]
fn long_while_loop_gradients_use_checkpoints() {
    // Up to 256 checkpoints: 257 and 601 steps put 2 and 3 iterations
    // between checkpoints (601 leaves a last segment of one).
    let f = affine_loop_gradients(FunctionOptions::new());
    for n in [0, 5, 257, 601] {
        check_affine_loop(&f, n);
    }
    assert_eq!(f.tracing_count(), 1);
}

#[test]
fn while_loop_gradients_of_unknown_shape_recompute_from_the_start() {
    // A state whose shape is unknown at trace time cannot be checkpointed.
    let f = affine_loop_gradients(FunctionOptions::new().input_signature(vec![
        TensorSpec::new(&[None], DType::F64),
        TensorSpec::new(&[], DType::F64),
        TensorSpec::new(&[], DType::F64),
        TensorSpec::new(&[], DType::I32),
    ]));
    for n in [0, 3, 40] {
        check_affine_loop(&f, n);
    }
}

#[test]
fn the_guides_first_example_gradients_through_a_function_call() {
    // @tf.function def add(a, b): return a + b
    // v = tf.Variable(1.0); with tf.GradientTape() as tape: result = add(v, 1.0)
    let add = function(|a: Tensor, b: Tensor| a + b);
    let v = Variable::new(Tensor::scalar(1.0f32));
    let tape = GradientTape::new();
    let result = add.call((v.read(), 1.0)).unwrap();
    let g = tape.gradient(&result, &[(&v).into()]).unwrap();
    assert_eq!(g[0].as_ref().unwrap().item::<f32>().unwrap(), 1.0);
    assert_eq!(result.item::<f32>().unwrap(), 2.0);
}

#[test]
fn loop_gradients_with_integer_and_boolean_loop_values() {
    // Halve x until it drops below 1 (a bool "done" flag and an i32 count
    // ride along in the state); d(result)/dx = 0.5^steps.
    let f = function(|x: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let done = x.lt_scalar(1.0)?;
        let (y, _, steps) = while_loop(
            |(_, done, _): &(Tensor, Tensor, Tensor)| done.logical_not(),
            |(y, _, steps): (Tensor, Tensor, Tensor)| -> Result<(Tensor, Tensor, Tensor)> {
                let y = y.mul_scalar(0.5)?;
                let done = y.lt_scalar(1.0)?;
                Ok((y, done, steps.add_scalar(1)?))
            },
            (x.clone(), done, Tensor::scalar(0i32)),
        )?;
        let g = tape.gradient(&y, &[(&x).into()])?[0]
            .clone()
            .expect("dy/dx");
        Ok((g, steps))
    });
    for x in [0.5f64, 3.0, 1000.0] {
        let (g, steps) = f.call((Tensor::scalar(x),)).unwrap();
        let steps = steps.item::<i32>().unwrap();
        assert_eq!(steps, (0..).find(|&k| x * 0.5f64.powi(k) < 1.0).unwrap());
        assert_eq!(g.item::<f64>().unwrap(), 0.5f64.powi(steps), "x={x}");
    }
}

#[test]
fn an_eager_tape_records_a_function_call_as_one_compiled_op() {
    // loss(x) = sum(tanh(x @ w) * scale), w and scale captured (w a
    // variable); the tape is eager, the call compiled; gradients with
    // respect to the argument and the variable against finite differences.
    let w =
        Variable::new(Tensor::from_vec(vec![0.3f64, -0.2, 0.5, 0.1, 0.7, -0.4], &[3, 2]).unwrap());
    let scale = Tensor::vector(&[1.5f64, -0.5]).unwrap();
    let loss = function({
        let (w, scale) = (w.clone(), scale.clone());
        move |x: Tensor| -> Result<Tensor> {
            x.matmul(&w.read())?
                .tanh()?
                .mul(&scale)?
                .reduce_sum(&[], false)
        }
    });
    let x0 = vec![0.2f64, -0.9, 1.3, 0.4, 0.0, -0.6];
    let x = Tensor::from_vec(x0.clone(), &[2, 3]).unwrap();
    for round in 0..2 {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = loss.call((&x,)).unwrap();
        let g = tape.gradient(&y, &[(&x).into(), (&w).into()]).unwrap();
        let (gx, gw) = (
            g[0].clone().unwrap().to_vec::<f64>().unwrap(),
            g[1].clone().unwrap().to_vec::<f64>().unwrap(),
        );
        let eps = 1e-6;
        let at = |xv: &[f64], wv: &[f64]| -> f64 {
            let xt = Tensor::from_vec(xv.to_vec(), &[2, 3]).unwrap();
            let wt = Tensor::from_vec(wv.to_vec(), &[3, 2]).unwrap();
            xt.matmul(&wt)
                .unwrap()
                .tanh()
                .unwrap()
                .mul(&scale)
                .unwrap()
                .reduce_sum(&[], false)
                .unwrap()
                .item::<f64>()
                .unwrap()
        };
        let w0 = w.read().to_vec::<f64>().unwrap();
        for i in 0..6 {
            let (mut p, mut m) = (x0.clone(), x0.clone());
            p[i] += eps;
            m[i] -= eps;
            let numeric = (at(&p, &w0) - at(&m, &w0)) / (2.0 * eps);
            assert!(
                (gx[i] - numeric).abs() < 1e-6,
                "round {round} dx[{i}]: {} vs {numeric}",
                gx[i]
            );
            let (mut p, mut m) = (w0.clone(), w0.clone());
            p[i] += eps;
            m[i] -= eps;
            let numeric = (at(&x0, &p) - at(&x0, &m)) / (2.0 * eps);
            assert!(
                (gw[i] - numeric).abs() < 1e-6,
                "round {round} dw[{i}]: {} vs {numeric}",
                gw[i]
            );
        }
    }
    // The call ran the compiled program: one trace and one compile for
    // both rounds (an op-by-op replay would compile nothing).
    assert_eq!((loss.tracing_count(), loss.compile_count()), (1, 1));
}

#[test]
fn an_eager_tape_over_a_function_that_updates_a_variable() {
    // y = x * v, then v += 1 inside the function: the update happens once
    // per call, and the gradient uses the value read before it.
    let v = Variable::new(Tensor::scalar(2.0f64));
    let step = function({
        let v = v.clone();
        move |x: Tensor| -> Result<Tensor> {
            let y = x.mul(&v.read())?;
            v.assign_add(&Tensor::scalar(1.0f64))?;
            Ok(y)
        }
    });
    let x = Tensor::scalar(3.0f64);
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = step.call((&x,)).unwrap();
    let g = tape.gradient(&y, &[(&x).into(), (&v).into()]).unwrap();
    assert_eq!(y.item::<f64>().unwrap(), 6.0);
    assert_eq!(g[0].clone().unwrap().item::<f64>().unwrap(), 2.0);
    assert_eq!(g[1].clone().unwrap().item::<f64>().unwrap(), 3.0);
    assert_eq!(v.read().item::<f64>().unwrap(), 3.0);
}

#[test]
fn second_derivatives_through_an_eager_function_call() {
    // f(x) = x^3 as a function; nested eager tapes: f'' = 6x.
    let cube = function(|x: Tensor| -> Result<Tensor> { x.mul(&x)?.mul(&x) });
    let x = Tensor::scalar(1.5f64);
    let outer = GradientTape::new();
    outer.watch(&x);
    let inner = GradientTape::new();
    inner.watch(&x);
    let y = cube.call((&x,)).unwrap();
    let dy = inner.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert!((dy.item::<f64>().unwrap() - 3.0 * 1.5 * 1.5).abs() < 1e-12);
    let d2y = outer.gradient(&dy, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert!((d2y.item::<f64>().unwrap() - 6.0 * 1.5).abs() < 1e-12);
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn ops_off_the_path_to_the_sources_are_not_differentiated() {
    // A host callback has no gradient rule, but its input does not depend
    // on x, so the tape never asks for one.
    let f = function(|x: Tensor, k: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let spec = xlafn::ArraySpec::new(DType::F64, &[]);
        let c = host_callback(&[&k], &[spec], |args| Ok(vec![args[0].clone()]))?.remove(0);
        let y = x.mul(&x)?.mul(&c)?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0]
            .clone()
            .expect("dy/dx"))
    });
    let g = f
        .call((Tensor::scalar(3.0f64), Tensor::scalar(2.0f64)))
        .unwrap();
    assert_eq!(g.item::<f64>().unwrap(), 12.0);
}

#[test]
fn power_gradients_match_finite_differences_in_the_exponent() {
    let base = Tensor::vector(&[0.5f64, 1.5, 3.0]).unwrap();
    check_gradient(&move |b: &Tensor| base.pow(b), &[0.3, -1.2, 2.0], &[3], 3);
}

/// `a ** b` where it does not depend on a variable: `0 ** b` for `b > 0`
/// (TensorFlow's and JAX's 0 for the exponent), `a ** 0` (JAX's 0 for
/// the base), and a negative base at an integer exponent (TensorFlow's 0
/// for the exponent); none of them NaN, and neither is a second
/// derivative through them.
#[test]
fn power_gradients_are_zero_where_the_power_is_constant() {
    let grads = |a: &[f64], b: &[f64]| {
        let (a, b) = (Tensor::vector(a).unwrap(), Tensor::vector(b).unwrap());
        let tape = GradientTape::new();
        tape.watch(&a);
        tape.watch(&b);
        let z = a.pow(&b).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&z, &[(&a).into(), (&b).into()]).unwrap();
        let read = |t: &Option<Tensor>| t.as_ref().unwrap().to_vec::<f64>().unwrap();
        (read(&g[0]), read(&g[1]))
    };
    let (da, db) = grads(&[0.0, 0.0, -2.0, 2.0], &[2.0, 0.0, 3.0, 0.0]);
    assert_eq!(da, vec![0.0, 0.0, 12.0, 0.0]);
    assert_eq!(db, vec![0.0, 0.0, 0.0, 2f64.ln()]);

    // d²(0 ** b)/db² at b = 2 is 0, not NaN from ln 0 in the masked lane.
    let b = Tensor::vector(&[2.0f64]).unwrap();
    let outer = GradientTape::new();
    outer.watch(&b);
    let inner = GradientTape::new();
    inner.watch(&b);
    let z = Tensor::zeros(&[1], DType::F64)
        .pow(&b)
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = inner
        .gradient(&z, &[(&b).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    let g = g.reduce_sum(&[], false).unwrap();
    let h = outer
        .gradient(&g, &[(&b).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(h.to_vec::<f64>().unwrap(), vec![0.0]);

    // Compiled, the same values.
    let f = function(|a: Tensor, b: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&b);
        let z = a.pow(&b)?.reduce_sum(&[], false)?;
        Ok(tape.gradient(&z, &[(&b).into()])?.remove(0).unwrap())
    });
    let out = f
        .call((
            Tensor::vector(&[0f32, 4.]).unwrap(),
            Tensor::vector(&[2f32, 0.5]).unwrap(),
        ))
        .unwrap();
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![0.0, 2.0 * 4f32.ln()]);
}
