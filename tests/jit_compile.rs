//! `FunctionOptions::jit_compile(false)` (TensorFlow's `jit_compile`): the
//! same traced graph runs op by op through the eager op cache instead of
//! compiled whole. Tracing, caching, signatures, variables, control flow
//! and gradients behave as with `jit_compile(true)`.

use xlafn::prelude::*;

fn body(x: Tensor) -> Result<Tensor> {
    let mut x = x;
    for _ in 0..5 {
        x = x.tanh()? * 0.5 + 0.1;
    }
    Ok(x)
}

/// The same chain computed on the host.
fn reference(x: &[f32]) -> Vec<f32> {
    x.iter()
        .map(|&v| (0..5).fold(v, |v, _| v.tanh() * 0.5 + 0.1))
        .collect()
}

fn close(a: &[f32], b: &[f32]) {
    assert_eq!(a.len(), b.len());
    for (p, q) in a.iter().zip(b) {
        assert!((p - q).abs() < 1e-5, "{a:?} vs {b:?}");
    }
}

#[test]
fn unfused_functions_trace_once_and_run_op_by_op() -> Result<()> {
    let unfused = FunctionOptions::new().jit_compile(false).build(body);
    let fused = function(body);
    let host = [0.5f32, -1.0, 2.0];
    let x = Tensor::vector(&host)?;
    let before = xlafn::tensor::eager_cache_stats();
    for _ in 0..3 {
        close(&unfused.call((&x,))?.to_vec::<f32>()?, &reference(&host));
    }
    let after = xlafn::tensor::eager_cache_stats();
    close(&fused.call((&x,))?.to_vec::<f32>()?, &reference(&host));
    assert_eq!(unfused.tracing_count(), 1);
    assert_eq!(unfused.compile_count(), 0, "no whole-program compile");
    assert_eq!(fused.compile_count(), 1);
    // 3 calls x 15 ops went through the eager op cache.
    assert!(after.hits + after.compiles >= before.hits + before.compiles + 45);
    // A concrete function of it runs op by op too.
    let cf = unfused.get_concrete_function((&x,))?;
    close(&cf.call((&x,))?.to_vec::<f32>()?, &reference(&host));
    assert_eq!(cf.compile_count(), 0);
    Ok(())
}

#[test]
fn signatures_variables_and_loops_behave_the_same() -> Result<()> {
    let total = Variable::new(Tensor::scalar(0f32));
    let f = FunctionOptions::new()
        .jit_compile(false)
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build({
            let total = total.clone();
            move |x: Tensor| -> Result<Tensor> {
                total.assign_add(&x.reduce_sum(&[0], false)?)?;
                // A device loop still runs as one compiled op.
                for_range(0, 3, 1, x, |_i, x: Tensor| x * 2.0)
            }
        });
    let y = f.call((Tensor::vector(&[1f32, 2.])?,))?;
    assert_eq!(y.to_vec::<f32>()?, [8., 16.]);
    let y = f.call((Tensor::vector(&[1f32, 2., 3.])?,))?;
    assert_eq!(y.to_vec::<f32>()?, [8., 16., 24.]);
    assert_eq!(f.tracing_count(), 1, "one trace for every length");
    assert_eq!(total.read().to_vec::<f32>()?, [9.]);

    // Updates stay atomic across threads.
    let counter = Variable::new(Tensor::scalar(0i32));
    let bump = FunctionOptions::new().jit_compile(false).build({
        let counter = counter.clone();
        move |d: Tensor| counter.assign_add(&d)
    });
    let one = Tensor::scalar(1i32);
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..50 {
                    bump.call((&one,)).unwrap();
                }
            });
        }
    });
    assert_eq!(counter.read().to_vec::<i32>()?, [200]);
    Ok(())
}

#[test]
fn gradients_through_an_unfused_call_match_the_fused_ones() -> Result<()> {
    let w = Variable::new(Tensor::vector(&[0.3f32, -0.2])?);
    let make = |jit: bool| {
        let w = w.clone();
        FunctionOptions::new()
            .jit_compile(jit)
            .build(move |x: Tensor| -> Result<Tensor> {
                w.read().mul(&x)?.tanh()?.reduce_sum(&[0], false)
            })
    };
    let x = Tensor::vector(&[1.5f32, 2.0])?;
    let grads = |f: &Function<(Tensor,), Tensor>| -> Result<Vec<f32>> {
        let tape = GradientTape::new();
        let y = f.call((&x,))?;
        tape.gradient(&y, &[(&w).into()])?[0]
            .clone()
            .expect("a gradient")
            .to_vec::<f32>()
    };
    let unfused = grads(&make(false))?;
    let fused = grads(&make(true))?;
    close(&unfused, &fused);
    // d/dw sum(tanh(w * x)) = x * (1 - tanh(w x)^2), by hand.
    let by_hand: Vec<f32> = [(0.3f32, 1.5f32), (-0.2, 2.0)]
        .iter()
        .map(|&(w, x)| x * (1.0 - (w * x).tanh().powi(2)))
        .collect();
    close(&unfused, &by_hand);
    Ok(())
}

/// `#[xlafn::function(jit_compile = false)]` is the same option.
#[xlafn::function(jit_compile = false)]
fn halve_unfused(x: Tensor) -> Result<Tensor> {
    Ok(x * 0.5)
}

#[test]
fn the_function_attribute_takes_jit_compile() -> Result<()> {
    let y = halve_unfused(Tensor::vector(&[2f32, 4.])?)?;
    assert_eq!(y.to_vec::<f32>()?, [1., 2.]);
    assert_eq!(halve_unfused::function().tracing_count(), 1);
    assert_eq!(halve_unfused::function().compile_count(), 0);
    Ok(())
}
