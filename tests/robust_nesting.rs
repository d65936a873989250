//! Control flow nested deeper than tracing's stack allows is a
//! RecursionError, not a stack overflow (which aborts the process: 200
//! nested `cond`s did on a 2 MiB test thread). Cases run in child
//! processes (see `common/child.rs`).

#[path = "common/child.rs"]
mod child;

use child::isolated;
use std::time::Duration;
use xlafn::prelude::*;

const LIMIT: Duration = Duration::from_secs(240);

/// `x + 1` if every one of `depth` nested conditions `x > 0` holds.
fn nested(x: Tensor, depth: usize) -> Result<Tensor> {
    if depth == 0 {
        return x.add_scalar(1.0);
    }
    let positive = x.gt_scalar(0.0)?;
    let unchanged = x.clone();
    xlafn::cond(
        &positive,
        move || nested(x, depth - 1),
        move || Ok::<Tensor, Error>(unchanged),
    )
}

#[test]
fn control_flow_nested_beyond_the_bound_is_a_recursion_error() {
    isolated(
        "control_flow_nested_beyond_the_bound_is_a_recursion_error",
        LIMIT,
        || {
            let deep = xlafn::trace::MAX_REGION_DEPTH;
            for depth in [deep + 1, 500, 20_000] {
                let f = function(move |x: Tensor| nested(x, depth));
                match f.call((&Tensor::scalar(1f32),)) {
                    Err(Error::Recursion(m)) => assert!(m.contains("nests control flow"), "{m}"),
                    other => panic!("depth {depth}: expected a RecursionError, got {other:?}"),
                }
            }
        },
    );
}

#[test]
fn control_flow_nested_up_to_the_bound_traces_and_differentiates() {
    isolated(
        "control_flow_nested_up_to_the_bound_traces_and_differentiates",
        LIMIT,
        || {
            let deep = xlafn::trace::MAX_REGION_DEPTH;
            let f = function(move |x: Tensor| nested(x, deep));
            let at = |v: f32| {
                f.call((&Tensor::scalar(v),))
                    .unwrap()
                    .to_vec::<f32>()
                    .unwrap()
            };
            assert_eq!(at(1.0), [2.0]);
            assert_eq!(at(-1.0), [-1.0]);
            // d/dx (nested(x) * x) = 2x + 1 where every branch is taken.
            let g = function(move |x: Tensor| -> Result<Tensor> {
                let tape = GradientTape::new();
                tape.watch(&x);
                let y = nested(x.clone(), deep)?.mul(&x)?;
                Ok(tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap())
            });
            let grad = g
                .call((&Tensor::scalar(1f32),))
                .unwrap()
                .to_vec::<f32>()
                .unwrap();
            assert_eq!(grad, [3.0]);
        },
    );
}
