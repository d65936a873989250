//! Print output per call: `with_print_output` sends the prints of
//! the calls a thread makes to its own writer, eagerly and from compiled
//! programs (whichever thread XLA runs their callbacks on), so concurrent
//! callers never interleave; outside a scope the process-wide writer gets
//! them.

#[path = "common/captured.rs"]
mod captured;

use captured::Captured;
use xlafn::prelude::*;

/// Prints `i` on each of `n` iterations of a device loop.
fn counting_loop() -> Function<(Tensor,), Tensor> {
    function(|n: Tensor| -> Result<Tensor> {
        for_range(0, &n, 1, Tensor::scalar(0i32), |i, acc| -> Result<Tensor> {
            xlafn::print("step", &[&i])?;
            acc.add(&i)
        })
    })
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn a_scope_collects_the_prints_of_compiled_loops_and_eager_ops() {
    let f = counting_loop();
    let out = Captured::default();
    let total = xlafn::with_print_output(out.clone(), || -> Result<Tensor> {
        xlafn::print("eager", &[&Tensor::scalar(7i32)])?;
        f.call((Tensor::scalar(3i32),))
    })
    .unwrap();
    assert_eq!(total.item::<i32>().unwrap(), 3);
    assert_eq!(out.take(), "eager 7\nstep 0\nstep 1\nstep 2\n");
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn concurrent_callers_each_get_only_their_own_lines() {
    let f = counting_loop();
    let threads: Vec<_> = (0..4)
        .map(|t| {
            let f = f.clone();
            std::thread::spawn(move || {
                let out = Captured::default();
                for _ in 0..10 {
                    xlafn::with_print_output(out.clone(), || {
                        f.call((Tensor::scalar(t + 2),)).unwrap();
                    });
                }
                (t, out.take())
            })
        })
        .collect();
    for handle in threads {
        let (t, text) = handle.join().unwrap();
        let one_call: String = (0..t + 2).map(|i| format!("step {i}\n")).collect();
        assert_eq!(text, one_call.repeat(10), "thread {t}");
    }
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn scopes_nest_and_end() {
    let f = counting_loop();
    let (outer, inner) = (Captured::default(), Captured::default());
    xlafn::with_print_output(outer.clone(), || {
        f.call((Tensor::scalar(1i32),)).unwrap();
        xlafn::with_print_output(inner.clone(), || {
            f.call((Tensor::scalar(2i32),)).unwrap();
        });
        xlafn::print("back", &[]).unwrap();
    });
    assert_eq!(outer.take(), "step 0\nback\n");
    assert_eq!(inner.take(), "step 0\nstep 1\n");
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn a_large_program_carries_the_scope_to_its_callbacks() {
    // A program big enough that XLA may run it on its worker threads: the
    // scope must reach the callback through the execution context.
    let f = function(|a: Tensor| -> Result<Tensor> {
        let mut x = a.clone();
        for _ in 0..4 {
            x = x.matmul(&a)?.tanh()?;
        }
        let total = x.reduce_sum(&[], false)?;
        xlafn::print("total", &[&total.gt_scalar(0.0)?])?;
        Ok(total)
    });
    let a = Tensor::from_vec(
        (0..512 * 512).map(|k| ((k % 7) as f32) / 100.0).collect(),
        &[512, 512],
    )
    .unwrap();
    let out = Captured::default();
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                let mine = Captured::default();
                xlafn::with_print_output(mine.clone(), || f.call((&a,)).unwrap());
                assert_eq!(mine.take(), "total True\n");
            });
        }
        xlafn::with_print_output(out.clone(), || f.call((&a,)).unwrap());
    });
    assert_eq!(out.take(), "total True\n");
}
