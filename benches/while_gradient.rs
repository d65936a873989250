//! Gradients through a device loop: `tanh(s * a + b)` for `n` steps on
//! `s: f32[1000]`, differentiated with respect to the initial `s` inside
//! one compiled function. With known shapes the backward pass recomputes
//! states from checkpoints (about `n * ceil(n / 256) / 2` body runs); with
//! an unknown dimension it recomputes them from the start (`n^2 / 2`).

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use xlafn::prelude::*;

type Grad = Function<(Tensor, Tensor, Tensor, Tensor), Tensor>;

fn loop_gradient(options: FunctionOptions) -> Grad {
    options.build(
        |x: Tensor, a: Tensor, b: Tensor, n: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = for_range(0, &n, 1, x.clone(), |_i, s: Tensor| {
                s.mul(&a)?.add(&b)?.tanh()
            })?;
            let g = tape.gradient(&y.reduce_sum(&[], false)?, &[(&x).into()])?;
            Ok(g[0].clone().expect("a gradient"))
        },
    )
}

fn while_gradient(c: &mut Criterion) {
    let checkpointed = loop_gradient(FunctionOptions::new());
    let from_start = loop_gradient(FunctionOptions::new().input_signature(vec![
        TensorSpec::new(&[None], DType::F32),
        TensorSpec::new(&[], DType::F32),
        TensorSpec::new(&[], DType::F32),
        TensorSpec::new(&[], DType::I32),
    ]));
    let x = Tensor::vector(&vec![0.5f32; 1000]).unwrap();
    let (a, b) = (Tensor::scalar(0.999f32), Tensor::scalar(0.01f32));
    let mut group = c.benchmark_group("while_loop gradient, f32[1000]");
    group.sample_size(10);
    for (name, f) in [
        ("checkpointed", &checkpointed),
        ("from the start", &from_start),
    ] {
        for n in [100i32, 1000] {
            let steps = Tensor::scalar(n);
            group.bench_with_input(BenchmarkId::new(name, n), &steps, |bench, steps| {
                bench.iter(|| {
                    f.call((&x, &a, &b, steps))
                        .unwrap()
                        .block_until_ready()
                        .unwrap()
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, while_gradient);
criterion_main!(benches);
