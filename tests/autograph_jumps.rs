//! Jumps in `#[xlafn::function]` control flow, compiled: `return` inside
//! tensor loops and nested branches, labeled `break`, jumps in `match`
//! arms and `loop` with a tensor `break` give plain Rust's results, trace
//! once, and put the loops on the device.

#[path = "common/jump_fns.rs"]
mod jump_fns;

use jump_fns::*;
use xlafn::prelude::*;

fn op_names<A: xlafn::function::ArgList, O: xlafn::function::Output>(
    f: &xlafn::ConcreteFunction<A, O>,
) -> Vec<String> {
    f.graph()
        .operations()
        .iter()
        .map(|n| n.op_type().to_string())
        .collect()
}

#[test]
fn return_inside_a_tensor_while() {
    check_first_index_over();
    assert_eq!(first_index_over::function().tracing_count(), 1);
    let code = first_index_over::AUTOGRAPH_CODE;
    assert!(
        code.contains("ReturnValue") && code.contains("ag_do_return__"),
        "{code}"
    );
    let cf = &first_index_over::function().concrete_functions()[0];
    assert!(
        op_names(cf).contains(&"while".to_string()),
        "{:?}",
        op_names(cf)
    );
}

#[test]
fn returns_at_two_depths_of_tensor_branches() {
    check_tiered();
    assert_eq!(tiered::function().tracing_count(), 1);
}

#[test]
fn labeled_break_out_of_nested_tensor_loops() {
    check_factor_pair();
    assert_eq!(factor_pair::function().tracing_count(), 1);
    assert!(!factor_pair::AUTOGRAPH_CODE.contains("'outer"));
}

#[test]
fn jumps_in_match_arms_inside_a_tensor_loop() {
    check_stepped();
    // One trace per host mode (a literal argument).
    assert_eq!(stepped::function().tracing_count(), 3);
}

#[test]
fn loop_with_a_tensor_break_continues_on_the_device() {
    check_halvings();
    assert_eq!(halvings::function().tracing_count(), 1);
    let cf = &halvings::function().concrete_functions()[0];
    assert!(
        op_names(cf).contains(&"while".to_string()),
        "{:?}",
        op_names(cf)
    );
}

#[test]
fn return_inside_a_host_loop_on_a_tensor_condition() {
    check_first_positive();
    assert_eq!(first_positive::function().tracing_count(), 1);
}

#[test]
fn break_and_continue_on_tensor_conditions_in_a_host_for() {
    check_positive_sum_until();
    // One trace: the list's length and the literal structure are the same.
    assert_eq!(positive_sum_until::function().tracing_count(), 1);
}

// A host `while` keeps testing its host condition after a `break` taken on
// a tensor condition, with the remaining bodies guarded by the flag; a host
// counter advanced inside such a guarded body cannot be tracked, and the
// trace says so (write the loop as a `for` over the data instead).
#[xlafn::function]
fn host_counter_after_a_tensor_break(xs: Vec<Tensor>, limit: Tensor) -> Result<Tensor> {
    let mut total = Tensor::scalar(0f32);
    let mut k = 0usize;
    while k < xs.len() {
        k += 1;
        total = total + &xs[k - 1];
        if total.gt(&limit)? {
            break;
        }
    }
    Ok(total)
}

#[test]
fn a_host_counter_after_a_tensor_break_is_a_clear_error() {
    let xs: Vec<Tensor> = [1f32, 2.0, 3.0]
        .iter()
        .map(|&v| Tensor::scalar(v))
        .collect();
    let e = host_counter_after_a_tensor_break(xs, Tensor::scalar(2f32))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("host value") && e.contains("make that value a tensor"),
        "{e}"
    );
}

#[test]
fn tuple_returned_from_a_for_over_rows() {
    check_sum_until_over();
    assert_eq!(sum_until_over::function().tracing_count(), 1);
}

/// The returned value's type is learned by tracing the loop once on trial,
/// and the slot starts as zeros of it: that needs a known shape.
#[xlafn::function(reduce_retracing)]
fn doubled_when_over(xs: Tensor, limit: Tensor) -> Result<Tensor> {
    let mut i = Tensor::scalar(0i32);
    while i.lt_scalar(3)? {
        if xs.reduce_sum(&[], false)?.gt(&limit)? {
            return Ok(xs * 2.0);
        }
        i = i + 1;
    }
    Ok(xs)
}

#[test]
fn a_return_of_unknown_shape_inside_tensor_control_flow_is_a_clear_error() {
    let limit = Tensor::scalar(1f32);
    let y = doubled_when_over(Tensor::vector(&[1f32, 2.0]).unwrap(), &limit).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![2.0, 4.0]);
    // The second length makes reduce_retracing trace for shape [None].
    let err = doubled_when_over(Tensor::vector(&[1f32, 2.0, 3.0]).unwrap(), &limit)
        .expect_err("unknown shape")
        .to_string();
    assert!(
        err.contains("not fully known") && err.contains("return"),
        "{err}"
    );
}
