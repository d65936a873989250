//! An eager `GradientTape` around a compiled `Function` (the call is
//! recorded as one op with a compiled backward), next to the same loss and
//! gradients computed op by op without a function: W2's chain of 150 small
//! ops, where dispatch dominates, and the W3 MLP's loss, where large
//! matmuls do.

use criterion::{Criterion, criterion_group, criterion_main};
use xlafn::prelude::*;

#[path = "../examples/common/mlp_step.rs"]
#[allow(dead_code)]
mod mlp_step;

fn loss_of(params: &[Variable], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let onehot = y.one_hot(mlp_step::CLASSES, 1.0, 0.0, DType::F32)?;
    let log_p = mlp_step::Mlp::logits(params, x)?.log_softmax(-1)?;
    onehot
        .mul(&log_p)?
        .reduce_sum(&[1], false)?
        .reduce_mean(&[], false)?
        .neg()
}

/// W2's body, summed: 50 times `x = tanh(x) * 0.5 + 0.1` on f32[1000].
fn chain(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in 0..50 {
        x = x.tanh()? * 0.5 + 0.1;
    }
    x.reduce_sum(&[], false)
}

fn small_ops(c: &mut Criterion) {
    let x = Tensor::from_vec((0..1000).map(|i| i as f32 / 1000.0).collect(), &[1000]).unwrap();
    let f = function(chain);
    let mut group = c.benchmark_group("W2 chain gradient under an eager tape");
    group.bench_function("as a Function (one compiled op)", |b| {
        b.iter(|| {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = f.call((&x,)).unwrap();
            let g = tape.gradient(&y, &[(&x).into()]).unwrap();
            g[0].as_ref().unwrap().block_until_ready().unwrap();
        })
    });
    group.bench_function("op by op", |b| {
        b.iter(|| {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = chain(x.clone()).unwrap();
            let g = tape.gradient(&y, &[(&x).into()]).unwrap();
            g[0].as_ref().unwrap().block_until_ready().unwrap();
        })
    });
    group.finish();
}

fn mlp(c: &mut Criterion) {
    let mlp = mlp_step::Mlp::new().unwrap();
    let x = Tensor::random_normal(&[mlp_step::BATCH, mlp_step::INPUTS], 1, DType::F32).unwrap();
    let y = Tensor::random_uniform(&[mlp_step::BATCH], 2, DType::F32)
        .unwrap()
        .mul_scalar(mlp_step::CLASSES as f64)
        .unwrap()
        .cast(DType::I32)
        .unwrap();
    let params = mlp.params.clone();
    let loss = function(move |x: Tensor, y: Tensor| loss_of(&params, &x, &y));
    let sources: Vec<Source> = mlp.params.iter().map(Source::from).collect();
    let mut group = c.benchmark_group("MLP loss gradients under an eager tape");
    group.sample_size(20);
    group.bench_function("loss as a Function (one compiled op)", |b| {
        b.iter(|| {
            let tape = GradientTape::new();
            let l = loss.call((&x, &y)).unwrap();
            let g = tape.gradient(&l, &sources).unwrap();
            g[0].as_ref().unwrap().block_until_ready().unwrap();
        })
    });
    group.bench_function("loss op by op", |b| {
        b.iter(|| {
            let tape = GradientTape::new();
            let l = loss_of(&mlp.params, &x, &y).unwrap();
            let g = tape.gradient(&l, &sources).unwrap();
            g[0].as_ref().unwrap().block_until_ready().unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, small_ops, mlp);
criterion_main!(benches);
