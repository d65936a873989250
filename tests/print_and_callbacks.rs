//! `print` runs on every execution (also inside compiled loops, in program
//! order), Rust's `println!` only while tracing; host callbacks compute
//! values on every call; errors and panics in callbacks become errors.
//! (One binary: the print sink is process-wide.)

#[path = "common/captured.rs"]
mod captured;

use captured::Captured;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn print_callbacks_and_their_errors() {
    let out = Captured::default();
    xlafn::set_print_output(out.clone());

    // tf.print vs Python print: one runs every call, the other at trace.
    let traced = Arc::new(AtomicUsize::new(0));
    let f = function({
        let traced = traced.clone();
        move |x: Tensor| -> Result<Tensor> {
            traced.fetch_add(1, Ordering::SeqCst);
            xlafn::print("x =", &[&x])?;
            Ok(&x + 1.0)
        }
    });
    for k in 0..3 {
        f.call((Tensor::vector(&[k as f32, 0.5]).unwrap(),))
            .unwrap();
    }
    assert_eq!(traced.load(Ordering::SeqCst), 1);
    assert_eq!(out.take(), "x = [0.  0.5]\nx = [1.  0.5]\nx = [2.  0.5]\n");

    // Inside a 5-iteration while_loop body: 5 lines per call, every call.
    let looped = function(|n: Tensor| {
        let i0 = Tensor::scalar(0i32);
        while_loop(
            |i: &Tensor| i.lt(&n),
            |i: Tensor| -> Result<Tensor> {
                xlafn::print("step", &[&i])?;
                Ok(i + 1)
            },
            i0,
        )
    });
    for _ in 0..2 {
        looped.call((Tensor::scalar(5i32),)).unwrap();
        assert_eq!(out.take(), "step 0\nstep 1\nstep 2\nstep 3\nstep 4\n");
    }
    assert_eq!(looped.tracing_count(), 1);

    // Eagerly, print prints at once.
    xlafn::print("eager", &[&Tensor::scalar(true)]).unwrap();
    assert_eq!(out.take(), "eager True\n");

    // A host callback computing values, checked against the host formula.
    let cube = function(|x: Tensor| -> Result<Tensor> {
        let spec = xlafn::ArraySpec::new(DType::F64, &x.dims());
        let out = host_callback(&[&x], &[spec], |args| {
            let v = args[0].to_vec::<f64>().map_err(|e| e.to_string())?;
            let dims = args[0].dims.clone();
            Ok(vec![HostArray::from_vec(
                v.iter().map(|x| x * x * x).collect::<Vec<f64>>(),
                &dims,
            )])
        })?;
        out[0].mul_scalar(2.0)
    });
    let got = cube
        .call((Tensor::vector(&[1f64, -2., 0.5]).unwrap(),))
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_eq!(got, vec![2.0, -16.0, 0.25]);

    // Errors and panics in the callback become call errors.
    let failing = function(|x: Tensor| -> Result<Tensor> {
        let spec = xlafn::ArraySpec::new(DType::F32, &[]);
        Ok(host_callback(&[&x], &[spec], |_| Err("deliberate failure".to_string()))?.remove(0))
    });
    let e = failing.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(e.to_string().contains("deliberate failure"), "{e}");
    let panicking = function(|x: Tensor| -> Result<Tensor> {
        let spec = xlafn::ArraySpec::new(DType::F32, &[]);
        Ok(host_callback(&[&x], &[spec], |_| panic!("boom"))?.remove(0))
    });
    let e = panicking.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(
        e.to_string().contains("panicked") && e.to_string().contains("boom"),
        "{e}"
    );
    // A result of the wrong type is refused, not written.
    let wrong = function(|x: Tensor| -> Result<Tensor> {
        let spec = xlafn::ArraySpec::new(DType::F32, &[2]);
        Ok(host_callback(&[&x], &[spec], |_| {
            Ok(vec![HostArray::from_vec(vec![1i32, 2], &[2])])
        })?
        .remove(0))
    });
    let e = wrong.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(e.to_string().contains("declared"), "{e}");
    // A program too big to run inside `Execute` (XLA runs programs of 1000
    // flops and more on its worker threads) reports the failure when its
    // result is awaited: polled first, then waited for.
    let late = function(|x: Tensor| -> Result<Tensor> {
        let spec = xlafn::ArraySpec::new(DType::F32, &[4096]);
        let doubled = &x * 2.0;
        Ok(host_callback(&[&doubled], &[spec], |_| Err("late failure".to_string()))?.remove(0))
    });
    let e = late
        .call((Tensor::zeros(&[4096], DType::F32),))
        .and_then(|y| y.block_until_ready())
        .unwrap_err();
    assert!(e.to_string().contains("late failure"), "{e}");

    // Differentiating a loop recomputes its states, but not its prints:
    // they appear once per forward iteration, as in TensorFlow.
    out.take();
    let grad = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = for_range(0, 3, 1, x.clone(), |i, s: Tensor| -> Result<Tensor> {
            xlafn::print("step", &[&i])?;
            s.mul(&s)
        })?;
        Ok(tape.gradient(&y, &[(&x).into()])?[0]
            .clone()
            .expect("dy/dx"))
    });
    // y = x^8, dy/dx = 8 x^7.
    assert_eq!(
        grad.call((Tensor::scalar(1.5f64),))
            .unwrap()
            .item::<f64>()
            .unwrap(),
        8.0 * 1.5f64.powi(7)
    );
    assert_eq!(out.take(), "step 0\nstep 1\nstep 2\n");

    // A function called under an eager tape prints when it runs, not again
    // when the tape computes its gradient.
    let noisy = function(|x: Tensor| -> Result<Tensor> {
        xlafn::print("called with", &[&x])?;
        x.mul(&x)
    });
    let x = Tensor::scalar(3.0f64);
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = noisy.call((&x,)).unwrap();
    let g = tape.gradient(&y, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.item::<f64>().unwrap(), 6.0);
    assert_eq!(out.take(), "called with 3.0\n");
    xlafn::reset_print_output();
}
