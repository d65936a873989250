//! The pinned XLA's CPU compiler runs some dots and convolutions through
//! XNNPACK, which packs a parameter right-hand side once and keeps it for
//! as long as the parameter's buffer has the same address (its own TODO
//! says the address is not an identity). A variable updated in place by
//! a compiled step keeps its address, and freed buffers are reused, so
//! every later product with it used the first value: a silent wrong answer
//! (found by W13's loss check). xlafn compiles without XNNPACK's dot and
//! convolution kernels; these tests pin the values against the host.

use std::sync::Arc;
use xlafn::prelude::*;

fn host_product_sum(x: &[f32], k: &[f32], n: usize, kdim: usize, m: usize) -> f64 {
    let mut total = 0.0f64;
    for i in 0..n {
        for j in 0..m {
            let mut acc = 0.0f64;
            for l in 0..kdim {
                acc += f64::from(x[i * kdim + l]) * f64::from(k[l * m + j]);
            }
            total += acc;
        }
    }
    total
}

/// A [256, 128] weight bumped in place by a compiled step, then used by
/// an eager and a compiled product: each must see the current value.
#[test]
fn a_product_with_a_variable_updated_in_place_sees_its_new_value() {
    let (n, kdim, m) = (256usize, 256usize, 128usize);
    let k = Arc::new(Variable::new(
        Tensor::fill(&[kdim as i64, m as i64], 0.01, DType::F32).unwrap(),
    ));
    let x_host: Vec<f32> = (0..n * kdim).map(|i| ((i % 13) as f32) * 0.1).collect();
    let x = Tensor::from_vec(x_host.clone(), &[n as i64, kdim as i64]).unwrap();
    let bump = {
        let k = k.clone();
        function(move |d: Tensor| k.assign_add(&d.broadcast_to(&[256, 128])?))
    };
    let compiled_product = {
        let k = k.clone();
        function(move |x: Tensor| x.matmul(&k.read())?.reduce_sum(&[], false))
    };
    for step in 0..4 {
        let k_host = k.read().to_vec::<f32>().unwrap();
        let want = host_product_sum(&x_host, &k_host, n, kdim, m);
        let eager = f64::from(
            x.matmul(&k.read())
                .unwrap()
                .reduce_sum(&[], false)
                .unwrap()
                .item::<f32>()
                .unwrap(),
        );
        let compiled = f64::from(compiled_product.call((&x,)).unwrap().item::<f32>().unwrap());
        for (what, got) in [("eager", eager), ("compiled", compiled)] {
            assert!(
                (got - want).abs() <= 1e-4 * want.abs(),
                "step {step}, {what}: {got} vs host {want}"
            );
        }
        bump.call((Tensor::scalar(0.5f32),)).unwrap();
    }
}
