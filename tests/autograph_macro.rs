//! `#[xlafn::function]`: the rewritten control flow gives the same results
//! as the explicit ops and as plain Rust, traces once, and leaves host
//! control flow alone.

#[path = "common/captured.rs"]
mod captured;

use captured::Captured;
use xlafn::prelude::*;

#[xlafn::function]
fn collatz_steps(n: Tensor) -> Result<Tensor> {
    let mut n = n;
    let mut steps = Tensor::scalar(0i32);
    while n.gt_scalar(1)? {
        if n.floormod_scalar(2)?.eq_scalar(0)? {
            n = n.floordiv_scalar(2)?;
        } else {
            n = &n * 3 + 1;
        }
        steps = steps + 1;
    }
    Ok(steps)
}

fn collatz_reference(mut n: i32) -> i32 {
    let mut steps = 0;
    while n > 1 {
        n = if n % 2 == 0 { n / 2 } else { 3 * n + 1 };
        steps += 1;
    }
    steps
}

#[test]
fn tensor_while_and_if_are_compiled_once() {
    for n in [1, 6, 7, 27, 97] {
        assert_eq!(
            collatz_steps(Tensor::scalar(n))
                .unwrap()
                .item::<i32>()
                .unwrap(),
            collatz_reference(n),
            "n={n}"
        );
    }
    assert_eq!(collatz_steps::function().tracing_count(), 1);
    let code = collatz_steps::AUTOGRAPH_CODE;
    assert!(
        code.contains("::xlafn::autograph::while_stmt")
            && code.contains("::xlafn::autograph::if_stmt"),
        "{code}"
    );
    let cf = &collatz_steps::function().concrete_functions()[0];
    let ops: Vec<&str> = cf
        .graph()
        .operations()
        .iter()
        .map(|n| n.op_type())
        .collect();
    assert!(ops.contains(&"while"), "{ops:?}");
}

// The guide's tanh loop: `while reduce_sum(x) > 1: x = tanh(x)`.
#[xlafn::function]
fn shrink(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    while x.reduce_sum(&[], false)?.gt_scalar(1.0)? {
        x = x.tanh()?;
    }
    Ok(x)
}

#[test]
fn the_tanh_loop_matches_explicit_while_loop_and_rust() {
    let x0 = vec![0.9f32, 0.8, 0.7];
    let got = shrink(Tensor::vector(&x0).unwrap())
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let explicit = function(|x: Tensor| {
        while_loop(
            |x: &Tensor| x.reduce_sum(&[], false)?.gt_scalar(1.0),
            |x: Tensor| x.tanh(),
            x,
        )
    });
    let want_ops = explicit
        .call((Tensor::vector(&x0).unwrap(),))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    let mut want = x0.clone();
    while want.iter().sum::<f32>() > 1.0 {
        want = want.iter().map(|v| v.tanh()).collect();
    }
    assert_eq!(got, want_ops);
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5);
    }
}

// `for _ in range(num_steps)` with a tensor bound: one in-graph loop.
#[xlafn::function]
fn train(num_steps: Tensor, x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in xlafn::autograph::range(&num_steps)? {
        x = &x * 0.99 + 0.01;
    }
    Ok(x)
}

// The same loop over a host count unrolls at trace time.
#[xlafn::function]
fn train_unrolled(num_steps: i64, x: Tensor) -> Tensor {
    let mut x = x;
    for _ in 0..num_steps {
        x = &x * 0.99 + 0.01;
    }
    x
}

#[test]
fn tensor_range_loops_stay_small_while_host_loops_unroll() {
    let x = Tensor::vector(&[1f32, 0.0]).unwrap();
    for n in [3i32, 10, 30] {
        let a = train(Tensor::scalar(n), &x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        let b = train_unrolled(n as i64, &x)
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        for (p, q) in a.iter().zip(&b) {
            assert!((p - q).abs() < 1e-5);
        }
    }
    assert_eq!(train::function().tracing_count(), 1);
    assert_eq!(train_unrolled::function().tracing_count(), 3);
    let sizes: Vec<usize> = train_unrolled::function()
        .concrete_functions()
        .iter()
        .map(|c| c.graph().operations().len())
        .collect();
    assert!(sizes[0] < sizes[1] && sizes[1] < sizes[2], "{sizes:?}");
    assert!(
        train::function().concrete_functions()[0]
            .graph()
            .operations()
            .len()
            < sizes[0] + 10
    );
}

// `for row in tensor` iterates over the first dimension on the device.
#[xlafn::function]
fn row_sums_of_squares(m: Tensor) -> Result<Tensor> {
    let mut total = Tensor::scalar(0f32);
    for row in m {
        total = total + row.square()?.reduce_sum(&[], false)?;
    }
    Ok(total)
}

#[test]
fn iterating_a_tensor_visits_its_rows() {
    let m = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2]).unwrap();
    let got = row_sums_of_squares(&m).unwrap().item::<f32>().unwrap();
    assert_eq!(got, 1. + 4. + 9. + 16. + 25. + 36.);
}

// Host conditions run at trace time: one trace per value of `double_it`.
// (A plain variable as a condition could be a tensor, so the `if` is
// rewritten and resolved by type; that is why the function returns Result.)
#[xlafn::function]
fn maybe_double(x: Tensor, double_it: bool) -> Result<Tensor> {
    let mut x = x;
    if double_it {
        x = &x * 2.0;
    }
    Ok(x)
}

#[test]
fn host_conditions_run_at_trace_time() {
    let x = Tensor::scalar(3f32);
    assert_eq!(maybe_double(&x, true).unwrap().item::<f32>().unwrap(), 6.0);
    assert_eq!(maybe_double(&x, false).unwrap().item::<f32>().unwrap(), 3.0);
    assert_eq!(maybe_double::function().tracing_count(), 2);
    for cf in maybe_double::function().concrete_functions() {
        assert!(
            cf.graph()
                .operations()
                .iter()
                .all(|n| n.op_type() != "cond")
        );
    }
}

// An `if` used as an expression yields the branch's value.
#[xlafn::function]
fn relu_sum(x: Tensor) -> Result<Tensor> {
    let s = x.reduce_sum(&[], false)?;
    let out = if s.gt_scalar(0.0)? {
        s.clone()
    } else {
        s.zeros_like()?
    };
    Ok(out)
}

#[test]
fn if_expressions_yield_values_and_signatures_use_parameter_names() {
    assert_eq!(
        relu_sum(Tensor::vector(&[1f32, 2.]).unwrap())
            .unwrap()
            .item::<f32>()
            .unwrap(),
        3.0
    );
    assert_eq!(
        relu_sum(Tensor::vector(&[-1f32, -2.]).unwrap())
            .unwrap()
            .item::<f32>()
            .unwrap(),
        0.0
    );
    let sig = relu_sum::function().pretty_printed_concrete_signatures();
    assert!(
        sig.contains("x (POSITIONAL_OR_KEYWORD): TensorSpec(shape=(2,), dtype=f32, name=None)"),
        "{sig}"
    );
}

#[xlafn::function(autograph = false, name = "plain")]
fn no_autograph(x: Tensor) -> Tensor {
    x
}

#[xlafn::function(experimental_relax_shapes, implements = "scaled_identity")]
fn relaxed(x: Tensor) -> Tensor {
    x * 2.0
}

#[test]
fn options_are_honoured() {
    no_autograph(Tensor::scalar(1f32)).unwrap();
    assert_eq!(no_autograph::function().name(), "plain");
    assert!(!no_autograph::AUTOGRAPH_CODE.contains("autograph::"));
    assert_eq!(no_autograph::function().implements(), None);
    for n in [3, 5, 7] {
        relaxed(Tensor::vector(&vec![1f32; n]).unwrap()).unwrap();
    }
    assert_eq!(
        relaxed::function().tracing_count(),
        2,
        "relaxed after the second shape"
    );
    assert_eq!(relaxed::function().implements(), Some("scaled_identity"));
}

// The guide's fizzbuzz: prints on every iteration, traces once.
#[xlafn::function]
fn fizzbuzz(n: Tensor) -> Result<()> {
    for i in xlafn::autograph::range_with(1, n.add_scalar(1)?, 1)? {
        if i.floormod_scalar(15)?.eq_scalar(0)? {
            xlafn::print("fizzbuzz", &[])?;
        } else if i.floormod_scalar(3)?.eq_scalar(0)? {
            xlafn::print("fizz", &[])?;
        } else if i.floormod_scalar(5)?.eq_scalar(0)? {
            xlafn::print("buzz", &[])?;
        } else {
            xlafn::print("", &[&i])?;
        }
    }
    Ok(())
}

fn fizzbuzz_reference(n: i32) -> String {
    (1..=n)
        .map(|i| match (i % 3, i % 5) {
            (0, 0) => "fizzbuzz\n".to_string(),
            (0, _) => "fizz\n".to_string(),
            (_, 0) => "buzz\n".to_string(),
            _ => format!("{i}\n"),
        })
        .collect()
}

#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn fizzbuzz_prints_every_iteration_with_one_trace() {
    let out = Captured::default();
    xlafn::set_print_output(out.clone());
    for n in [5, 20] {
        fizzbuzz(Tensor::scalar(n)).unwrap();
        let printed = String::from_utf8(std::mem::take(&mut *out.0.lock().unwrap())).unwrap();
        assert_eq!(printed, fizzbuzz_reference(n), "n = {n}");
    }
    xlafn::reset_print_output();
    assert_eq!(fizzbuzz::function().tracing_count(), 1);
}

// `break` and `continue` in a tensor loop: the first i with i * i > limit,
// skipping multiples of 3 (so the loop stops on the device).
#[xlafn::function]
fn first_square_over(limit: Tensor) -> Result<Tensor> {
    let mut i = Tensor::scalar(0i32);
    let mut found = Tensor::scalar(-1i32);
    let mut skipped = Tensor::scalar(0i32);
    while i.lt_scalar(1000)? {
        i = i + 1;
        if i.floormod_scalar(3)?.eq_scalar(0)? {
            skipped = skipped + 1;
            continue;
        }
        if i.mul(&i)?.gt(&limit)? {
            found = i.clone();
            break;
        }
    }
    Ok(Tensor::stack(&[found, skipped], 0)?)
}

fn first_square_over_reference(limit: i32) -> (i32, i32) {
    let (mut i, mut found, mut skipped) = (0, -1, 0);
    while i < 1000 {
        i += 1;
        if i % 3 == 0 {
            skipped += 1;
            continue;
        }
        if i * i > limit {
            found = i;
            break;
        }
    }
    (found, skipped)
}

#[test]
fn break_and_continue_in_tensor_loops() {
    for limit in [0, 10, 50, 99, 400] {
        let got = first_square_over(Tensor::scalar(limit))
            .unwrap()
            .to_vec::<i32>()
            .unwrap();
        let (found, skipped) = first_square_over_reference(limit);
        assert_eq!(got, vec![found, skipped], "limit {limit}");
    }
    assert_eq!(first_square_over::function().tracing_count(), 1);
}

// The same rewrite keeps host loops host: `break` on a host condition.
#[xlafn::function]
fn sum_until(xs: Vec<Tensor>, stop_at: usize) -> Result<Tensor> {
    let mut total = Tensor::scalar(0f32);
    let mut k = 0usize;
    let n = xs.len();
    while k < n {
        if k == stop_at {
            break;
        }
        total = total + &xs[k];
        k += 1;
    }
    Ok(total)
}

#[test]
fn break_in_host_loops_unrolls_as_rust() {
    let xs: Vec<Tensor> = (1..=5).map(|v| Tensor::scalar(v as f32)).collect();
    assert_eq!(
        sum_until(xs.clone(), 3).unwrap().item::<f32>().unwrap(),
        6.0
    );
    assert_eq!(sum_until(xs, 10).unwrap().item::<f32>().unwrap(), 15.0);
}

// `break`/`continue` in a `for` over a tensor range: the sum of the odd
// numbers below `n` up to the first one over `cap`.
#[xlafn::function]
fn odd_sum(n: Tensor, cap: Tensor) -> Result<Tensor> {
    let mut total = Tensor::scalar(0i32);
    for i in xlafn::autograph::range(&n)? {
        if i.floormod_scalar(2)?.eq_scalar(0)? {
            continue;
        }
        if i.gt(&cap)? {
            break;
        }
        total = total + &i;
    }
    Ok(total)
}

#[test]
fn break_and_continue_in_tensor_for_loops() {
    for (n, cap) in [(10, 100), (10, 5), (20, 11), (0, 3)] {
        let mut want = 0;
        for i in 0..n {
            if i % 2 == 0 {
                continue;
            }
            if i > cap {
                break;
            }
            want += i;
        }
        let got = odd_sum(Tensor::scalar(n), Tensor::scalar(cap))
            .unwrap()
            .item::<i32>()
            .unwrap();
        assert_eq!(got, want, "n={n} cap={cap}");
    }
    assert_eq!(odd_sum::function().tracing_count(), 1);
}

// An early return on a tensor condition (the rest of the body becomes the
// else branch of a cond).
#[xlafn::function]
fn clipped_norm(x: Tensor, limit: Tensor) -> Result<Tensor> {
    let norm = x.square()?.reduce_sum(&[], false)?.sqrt()?;
    if norm.le(&limit)? {
        return Ok(x.clone());
    }
    let scale = limit.div(&norm)?;
    Ok(x.mul(&scale)?)
}

#[test]
fn early_return_on_a_tensor_condition() {
    let x = Tensor::vector(&[3f32, 4.0]).unwrap(); // norm 5
    assert_eq!(
        clipped_norm(&x, Tensor::scalar(10f32))
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![3.0, 4.0]
    );
    let clipped = clipped_norm(&x, Tensor::scalar(1f32))
        .unwrap()
        .to_vec::<f32>()
        .unwrap();
    assert!(
        (clipped[0] - 0.6).abs() < 1e-6 && (clipped[1] - 0.8).abs() < 1e-6,
        "{clipped:?}"
    );
    assert_eq!(clipped_norm::function().tracing_count(), 1);
    assert!(clipped_norm::AUTOGRAPH_CODE.contains("if_stmt"));
}

// A host counter in a tensor loop cannot count on the device: the trace
// fails and says to make it a tensor (AutoGraph would raise too).
#[xlafn::function]
fn counts_on_the_host(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    let mut steps = 0i64;
    while x.gt_scalar(1.0)? {
        x = x / 2.0;
        steps += 1;
    }
    Ok(x + steps as f64)
}

#[test]
fn a_host_value_changed_in_a_tensor_loop_is_an_error() {
    let e = counts_on_the_host(Tensor::scalar(10f32))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("changes a host value") && e.contains("make that value a tensor"),
        "{e}"
    );
}
