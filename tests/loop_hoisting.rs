//! A loop body that multiplies row `t` of a captured array by
//! a captured matrix (a `TensorArray` read, then `matmul`) runs one
//! product of the whole array before the loop instead, and its gradient
//! one product after it. The compiled values and gradients equal the
//! eager ones (eager loops run the body as written, row by row), also when
//! the row index leaves the array (both clamp it the same way); loops that
//! run too few times for the product to pay keep theirs.

use xlafn::ArraySpec;
use xlafn::prelude::*;

const T: i64 = 6;
const B: i64 = 2;
const I: i64 = 3;
const H: i64 = 4;

fn values(n: i64, seed: f64) -> Vec<f64> {
    (0..n)
        .map(|k| ((k as f64 + seed) * 0.37).sin() * 0.5)
        .collect()
}

/// `h = tanh(x[row(t)] @ w + h @ u)` for `steps` steps from zeros, and
/// the gradients of `sum(h * h)` with respect to `x`, `w` and `u`.
fn grads(
    x: &Tensor,
    w: &Tensor,
    u: &Tensor,
    steps: i64,
    row: fn(&Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    let tape = GradientTape::new();
    for v in [x, w, u] {
        tape.watch(v);
    }
    let rows = TensorArray::unstack(x)?;
    let h0 = Tensor::try_zeros(&[B, H], DType::F64)?;
    let h = for_range(0i64, steps, 1i64, h0, |t, h: Tensor| {
        rows.read(&row(&t)?)?.matmul(w)?.add(&h.matmul(u)?)?.tanh()
    })?;
    let loss = h.square()?.reduce_sum(&[], false)?;
    let g = tape.gradient(&loss, &[x.into(), w.into(), u.into()])?;
    Ok(g.into_iter().map(|g| g.expect("connected")).collect())
}

fn inputs() -> (Tensor, Tensor, Tensor) {
    (
        Tensor::from_vec(values(T * B * I, 1.0), &[T, B, I]).unwrap(),
        Tensor::from_vec(values(I * H, 2.0), &[I, H]).unwrap(),
        Tensor::from_vec(values(H * H, 3.0), &[H, H]).unwrap(),
    )
}

/// The compiled gradients against the eager ones, and the products of the
/// compiled program's text (their operand and result types).
fn compare(steps: i64, row: fn(&Tensor) -> Result<Tensor>) -> Vec<String> {
    let (x, w, u) = inputs();
    let eager = grads(&x, &w, &u, steps, row).unwrap();
    let f = function(move |x: Tensor, w: Tensor, u: Tensor| grads(&x, &w, &u, steps, row));
    let compiled = f.call((&x, &w, &u)).unwrap();
    for (name, (c, e)) in ["dx", "dw", "du"].iter().zip(compiled.iter().zip(&eager)) {
        let (c, e) = (c.to_vec::<f64>().unwrap(), e.to_vec::<f64>().unwrap());
        for (a, b) in c.iter().zip(&e) {
            assert!(
                (a - b).abs() <= 1e-12 * b.abs().max(1.0),
                "{name}: {c:?} vs {e:?}"
            );
        }
    }
    let specs = [
        ArraySpec::new(DType::F64, &[T, B, I]),
        ArraySpec::new(DType::F64, &[I, H]),
        ArraySpec::new(DType::F64, &[H, H]),
    ];
    let text = f.concrete_functions()[0].stablehlo(&specs).unwrap();
    text.lines()
        .filter(|l| l.contains("stablehlo.dot"))
        .map(|l| l.rsplit(" : ").next().unwrap_or(l).to_string())
        .collect()
}

fn counter(t: &Tensor) -> Result<Tensor> {
    Ok(t.clone())
}

#[test]
fn a_row_product_is_one_product_before_the_loop() {
    let products = compare(T, counter);
    let hoisted = format!(
        "(tensor<{}x{I}xf64>, tensor<{I}x{H}xf64>) -> tensor<{}x{H}xf64>",
        T * B,
        T * B
    );
    let per_step = format!("(tensor<{B}x{I}xf64>, tensor<{I}x{H}xf64>)");
    assert_eq!(
        products.iter().filter(|p| **p == hoisted).count(),
        1,
        "{products:#?}"
    );
    assert!(
        !products.iter().any(|p| p.starts_with(&per_step)),
        "{products:#?}"
    );
    // w's gradient: the array against the product's gradient, once.
    let weight_gradient = format!(
        "(tensor<{}x{I}xf64>, tensor<{}x{H}xf64>) -> tensor<{I}x{H}xf64>",
        T * B,
        T * B
    );
    assert_eq!(
        products.iter().filter(|p| **p == weight_gradient).count(),
        1,
        "{products:#?}"
    );
}

/// Rows past the end clamp to the last one, in the array and in the
/// product alike.
#[test]
fn an_index_past_the_rows_clamps_as_it_did() {
    let per_step = format!("(tensor<{B}x{I}xf64>, tensor<{I}x{H}xf64>)");
    for products in [
        compare(T, |t| t.add_scalar(3)),
        compare(T, |t| t.mul_scalar(2)?.floormod_scalar(T + 1)),
    ] {
        assert!(
            !products.iter().any(|p| p.starts_with(&per_step)),
            "{products:#?}"
        );
    }
}

#[test]
fn a_loop_over_few_rows_keeps_its_products() {
    let products = compare(2, counter);
    let per_step = format!("(tensor<{B}x{I}xf64>, tensor<{I}x{H}xf64>)");
    assert!(
        products.iter().any(|p| p.starts_with(&per_step)),
        "{products:#?}"
    );
}
