//! Small functions compiled and run from many threads at once. XLA's CPU
//! client builds the XNNPACK runtimes of graph-fused programs lazily, and
//! building two at once corrupted the heap (about one process in five of
//! this workload aborted or crashed); `runtime::Executable` now runs such
//! programs one at a time. Each round runs in a child process, so a
//! regression fails this test, not the run.

#[path = "common/child.rs"]
mod child;

use std::time::Duration;
use xlafn::prelude::*;

#[test]
fn new_small_functions_from_eight_threads_run_safely() {
    // Five processes: a regression crashed 20-30% of them.
    for _ in 0..5 {
        child::assert_child_passes(
            "small_functions_child",
            &[("XLAFN_COMPILE_CACHE", "off")],
            Duration::from_secs(120),
        );
    }
}

#[test]
fn small_functions_child() {
    if !child::is_child("small_functions_child") {
        return;
    }
    for round in 0..20 {
        let add = (round + 1) as f64;
        let f = function(move |x: Tensor| x.add_scalar(add));
        std::thread::scope(|s| {
            for t in 0..8usize {
                let f = &f;
                s.spawn(move || {
                    for n in 1..6usize {
                        let len = n + t % 2;
                        let x = Tensor::from_vec(vec![0f32; len], &[len as i64]).unwrap();
                        let y = f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
                        assert_eq!(y, vec![add as f32; len]);
                    }
                });
            }
        });
    }
}
