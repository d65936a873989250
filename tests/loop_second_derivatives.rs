//! Second derivatives through traced loops: Hessians, Hessian-vector
//! products, nested tapes, forward over reverse, for every loop form
//! (`for_range` over host and device bounds, `while_loop`, `scan`) and the
//! recurrent layers, eagerly and compiled, in f64, each against central
//! differences of the function itself (which never runs a gradient).

use xlafn::autodiff::{ForwardAccumulator, hessian, hvp, jvp};
use xlafn::control::{for_range, scan};
use xlafn::nn::layers::{Gru, Lstm, Recurrent};
use xlafn::prelude::*;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (x, y)) in got.iter().zip(want).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}: element {i}: {x} vs {y}\n got  {got:?}\n want {want:?}"
        );
    }
}

type Scalar = std::sync::Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

/// The Hessian of `f` at `x` by second central differences of `f`'s
/// values, run eagerly (no gradient involved).
fn fd_hessian(f: &Scalar, x: &[f64]) -> Vec<f64> {
    let n = x.len();
    let h = 1e-4;
    let at = |d: &[(usize, f64)]| {
        let mut p = x.to_vec();
        for &(i, s) in d {
            p[i] += s;
        }
        f(&Tensor::vector(&p).unwrap())
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    let mut out = vec![0.0; n * n];
    for i in 0..n {
        for j in 0..n {
            let v = at(&[(i, h), (j, h)]) - at(&[(i, h), (j, -h)]) - at(&[(i, -h), (j, h)])
                + at(&[(i, -h), (j, -h)]);
            out[i * n + j] = v / (4.0 * h * h);
        }
    }
    out
}

/// Checks `hessian`, `hvp`, nested tapes, `jvp` of a gradient and a
/// forward accumulator over a tape, eagerly and inside `function`.
fn check_second_derivatives(name: &str, f: Scalar, x: &[f64]) {
    check_modes(name, f, x, true)
}

/// [`check_second_derivatives`], eagerly too only when `eager`.
fn check_modes(name: &str, f: Scalar, x: &[f64], eager: bool) {
    let n = x.len();
    let want = fd_hessian(&f, x);
    let v: Vec<f64> = (0..n).map(|i| 0.5 - 0.3 * i as f64).collect();
    let want_hv: Vec<f64> = (0..n)
        .map(|i| (0..n).map(|j| want[i * n + j] * v[j]).sum())
        .collect();
    let xt = Tensor::vector(x).unwrap();
    let vt = Tensor::vector(&v).unwrap();
    let tol = 1e-5;

    // Every form of a second derivative, as one function of (x, v).
    let forms = {
        let f = f.clone();
        move |x: &Tensor, v: &Tensor| -> Result<Vec<Tensor>> {
            let f1 = f.clone();
            let h = hessian(move |x| f1(x), x)?;
            let f2 = f.clone();
            let hv = hvp(
                move |p| f2(&p[0]),
                std::slice::from_ref(x),
                std::slice::from_ref(v),
            )?
            .remove(0);
            // Nested tapes: the outer tape's gradient of <grad, v>.
            let outer = GradientTape::new();
            outer.watch(x);
            let inner = GradientTape::new();
            inner.watch(x);
            let y = f(x)?;
            let g = inner.gradient(&y, &[x.into()])?.remove(0).unwrap();
            let gv = g.mul(v)?.reduce_sum(&[], false)?;
            let nested = outer.gradient(&gv, &[x.into()])?.remove(0).unwrap();
            // jvp of the gradient (forward over reverse, by hand).
            let f3 = f.clone();
            let (_, fwd) = jvp(
                move |p| {
                    let tape = GradientTape::new();
                    tape.watch(&p[0]);
                    let y = f3(&p[0])?;
                    Ok(tape.gradient(&y, &[(&p[0]).into()])?.remove(0).unwrap())
                },
                std::slice::from_ref(x),
                std::slice::from_ref(v),
            )?;
            // A forward accumulator over a tape.
            let acc = ForwardAccumulator::new(&[x.into()], std::slice::from_ref(v))?;
            let tape = GradientTape::new();
            tape.watch(x);
            let y = f(x)?;
            let g = tape.gradient(&y, &[x.into()])?.remove(0).unwrap();
            let acc_hv = acc.jvp(&g)?.unwrap();
            Ok(vec![h, hv, nested, fwd, acc_hv])
        }
    };
    let names = [
        "hessian",
        "hvp",
        "nested tapes",
        "jvp of grad",
        "accumulator",
    ];
    let forms_c = forms.clone();
    let compiled = function(move |x: Tensor, v: Tensor| forms_c(&x, &v));
    let mut runs = vec![("compiled", compiled.call((&xt, &vt)).unwrap())];
    if eager {
        runs.push(("eager", forms(&xt, &vt).unwrap()));
    }
    for (mode, outs) in runs {
        for (i, out) in outs.iter().enumerate() {
            let reference = if i == 0 { &want } else { &want_hv };
            close(
                &f64s(out),
                reference,
                tol,
                &format!("{name}, {mode}, {}", names[i]),
            );
        }
    }
}

fn sum(t: Tensor) -> Result<Tensor> {
    t.reduce_sum(&[], false)
}

#[test]
fn the_reported_for_range_case() {
    // hessian of sum(for_range(0, 3, 1, x, |c| sin(c) * x)) at [1.5, 0.25]:
    // JAX gives [-1.9134, 0, 0, 0.7282].
    let f: Scalar = std::sync::Arc::new(|x: &Tensor| {
        let x = x.clone();
        sum(for_range(
            0,
            3,
            1,
            x.clone(),
            |_, c: Tensor| -> Result<Tensor> { Ok(c.sin()? * &x) },
        )?)
    });
    let compiled = {
        let f = f.clone();
        function(move |x: Tensor| hessian(|x| f(x), &x))
    };
    let h = compiled
        .call((Tensor::vector(&[1.5f64, 0.25]).unwrap(),))
        .unwrap();
    close(&f64s(&h), &[-1.9134, 0.0, 0.0, 0.7282], 1e-4, "reported");
    check_second_derivatives("sin(c) * x", f, &[1.5, 0.25]);
}

#[test]
fn minimal_bodies_of_one_and_few_iterations() {
    let cases: Vec<(&str, i64, Scalar)> = vec![
        (
            "c * c once",
            1,
            std::sync::Arc::new(|x: &Tensor| {
                sum(for_range(0, 1, 1, x.clone(), |_, c: Tensor| c.square())?)
            }),
        ),
        (
            "c * x once",
            1,
            std::sync::Arc::new(|x: &Tensor| {
                let x = x.clone();
                sum(for_range(0, 1, 1, x.clone(), |_, c: Tensor| c * &x)?)
            }),
        ),
        (
            "c * x three times",
            3,
            std::sync::Arc::new(|x: &Tensor| {
                let x = x.clone();
                sum(for_range(0, 3, 1, x.clone(), |_, c: Tensor| c * &x)?)
            }),
        ),
        (
            "sin(c) twice",
            2,
            std::sync::Arc::new(|x: &Tensor| {
                sum(for_range(0, 2, 1, x.clone(), |_, c: Tensor| c.sin())?)
            }),
        ),
    ];
    for (name, _, f) in cases {
        check_second_derivatives(name, f, &[0.5, -0.7]);
    }
}

#[test]
fn loops_with_device_bounds_and_while_loops() {
    // The trip count decided on the device: a tensor bound.
    let f: Scalar = std::sync::Arc::new(|x: &Tensor| {
        let x = x.clone();
        let n = Tensor::scalar(4i32);
        sum(for_range(
            0,
            &n,
            1,
            x.clone(),
            |_, c: Tensor| -> Result<Tensor> { Ok(c.tanh()? * &x + c.square()? * 0.1) },
        )?)
    });
    check_second_derivatives("for_range, device bound", f, &[0.3, -0.4, 0.9]);
    // More trips than a state record holds (256): the gradient's
    // checkpointed form, with the count on the device (the record's spare
    // slot) and on the host (no record at all).
    for long in [Some(Tensor::scalar(300i32)), None] {
        let f: Scalar = std::sync::Arc::new(move |x: &Tensor| {
            let x = x.clone();
            let body =
                |_, c: Tensor| -> Result<Tensor> { Ok((c.sin()? * &x).mul_scalar(0.9)? + &x) };
            let c = match &long {
                Some(n) => for_range(0, n, 1, x.clone(), body)?,
                None => for_range(0, 300, 1, x.clone(), body)?,
            };
            sum(c.square()?)
        });
        // Eagerly a loop is a Rust loop: the short cases cover it.
        check_modes("for_range, 300 trips", f, &[0.4, -0.3], false);
    }
    // A while loop whose condition reads the state.
    let f: Scalar = std::sync::Arc::new(|x: &Tensor| {
        let x = x.clone();
        let (_, c) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&Tensor::scalar(3i32)),
            |(i, c): (Tensor, Tensor)| -> Result<(Tensor, Tensor)> {
                Ok((i.add_scalar(1)?, c.sin()? * &x + c.cos()?))
            },
            (Tensor::scalar(0i32), x.clone()),
        )?;
        sum(c)
    });
    check_second_derivatives("while_loop", f, &[0.8, -0.2]);
}

#[test]
fn scans_with_carries_and_outputs() {
    let f: Scalar = std::sync::Arc::new(|x: &Tensor| {
        let w = x.slice(&[0], &[2])?;
        let xs = x.reshape(&[2, 2])?;
        let (c, ys) = scan(
            |c: Tensor, xt: Tensor| {
                let c = (c.mul(&w)? + xt).tanh()?;
                Ok((c.clone(), c.square()?))
            },
            x.slice(&[2], &[2])?,
            xs,
        )?;
        Ok(sum(c)? + sum(ys)?)
    });
    check_second_derivatives("scan", f, &[0.3, -0.6, 0.5, 0.1]);
}

#[test]
fn recurrent_layers() {
    // A [1, 3, 2] sequence through an Lstm and a Gru of 2 units; the
    // Hessian with respect to the input sequence.
    let lstm = std::sync::Arc::new(Lstm::new(&xlafn::random::key(7).unwrap(), 2).unwrap());
    let gru = std::sync::Arc::new(Gru::new(&xlafn::random::key(8).unwrap(), 2).unwrap());
    let x = [0.3, -0.5, 0.8, 0.1, -0.9, 0.4];
    for (name, layer) in [
        ("lstm", lstm as std::sync::Arc<dyn Recurrent + Send + Sync>),
        ("gru", gru),
    ] {
        let f: Scalar = std::sync::Arc::new(move |x: &Tensor| {
            let out = layer.run(&x.reshape(&[1, 3, 2])?, None, None)?;
            sum(out.outputs.square()?)
        });
        f(&Tensor::vector(&x).unwrap()).unwrap();
        check_second_derivatives(name, f, &x);
    }
}
