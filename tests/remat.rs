//! Rematerialization (`recompute_grad`). Gradients through a
//! recomputed block equal the stored-activation gradients (and finite
//! differences), eagerly and compiled; the compiled program holds the
//! barrier that keeps XLA from merging the rerun into the forward pass;
//! and on a deep stack the compiled training step's temporaries, as XLA
//! plans them (`PJRT_Executable_GetCompiledMemoryStats`), shrink.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use std::sync::Arc;
use xlafn::prelude::*;
use xlafn::{ArraySpec, random};

/// A stack of MLP blocks, `tanh(tanh(x @ up) @ down)`, each widening
/// to `4 * width` inside: the activations a block keeps for its gradient
/// are five times its input, which remat replaces by the input alone.
struct Stack {
    blocks: Vec<[Variable; 2]>,
}

impl Stack {
    fn new(depth: usize, width: i64, dtype: DType) -> Stack {
        let key = random::key(7).unwrap();
        let weight = |i: usize, dims: [i64; 2]| {
            let k = random::fold_in(&key, &Tensor::scalar(i as i32)).unwrap();
            let scale = 1.0 / (dims[0] as f64).sqrt();
            Variable::new(random::normal(&k, &dims, dtype, 0.0, scale).unwrap())
        };
        let blocks = (0..depth)
            .map(|i| {
                [
                    weight(2 * i, [width, 4 * width]),
                    weight(2 * i + 1, [4 * width, width]),
                ]
            })
            .collect();
        Stack { blocks }
    }

    fn block(
        ws: &[Variable; 2],
    ) -> impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static {
        let [up, down] = ws.clone();
        move |xs: &[Tensor]| {
            let hidden = xs[0].matmul(&up.read())?.tanh()?;
            Ok(vec![hidden.matmul(&down.read())?.tanh()?])
        }
    }

    fn forward(&self, x: &Tensor, remat: bool) -> Result<Tensor> {
        let mut h = x.clone();
        for ws in &self.blocks {
            h = match remat {
                true => xlafn::recompute_grad(Self::block(ws))(&[h], ws)?.remove(0),
                false => Self::block(ws)(&[h])?.remove(0),
            };
        }
        h.square()?.reduce_mean(&[], false)
    }

    fn gradients(&self, x: &Tensor, remat: bool) -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        let loss = self.forward(x, remat)?;
        let sources: Vec<Source> = self.blocks.iter().flatten().map(Source::from).collect();
        tape.gradient(&loss, &sources)?
            .into_iter()
            .map(|g| Ok(g.expect("every weight has a gradient")))
            .collect()
    }
}

fn input(batch: i64, width: i64, dtype: DType) -> Tensor {
    random::normal(&random::key(3).unwrap(), &[batch, width], dtype, 0.0, 1.0).unwrap()
}

fn assert_close(a: &[f64], b: &[f64], tol: f64, what: &str) {
    assert_eq!(a.len(), b.len(), "{what}");
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "{what}[{i}]: {x} vs {y}"
        );
    }
}

#[test]
fn recomputed_gradients_equal_stored_ones_eagerly_and_compiled() {
    let stack = Arc::new(Stack::new(3, 4, DType::F64));
    let x = input(3, 4, DType::F64);
    let stored = stack.gradients(&x, false).unwrap();
    let recomputed = stack.gradients(&x, true).unwrap();
    for (i, (s, r)) in stored.iter().zip(&recomputed).enumerate() {
        let (s, r) = (s.to_vec::<f64>().unwrap(), r.to_vec::<f64>().unwrap());
        assert_close(&r, &s, 1e-12, &format!("eager weight {i}"));
    }
    // Compiled, the same gradients; the program holds the barrier.
    let step = |remat: bool| {
        let stack = stack.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> { stack.gradients(&x, remat) })
    };
    let (plain, rematted) = (step(false), step(true));
    let compiled = rematted.call((&x,)).unwrap();
    for (i, (c, s)) in compiled.iter().zip(&plain.call((&x,)).unwrap()).enumerate() {
        let (c, s) = (c.to_vec::<f64>().unwrap(), s.to_vec::<f64>().unwrap());
        assert_close(&c, &s, 1e-12, &format!("compiled weight {i}"));
    }
    let spec = ArraySpec::new(DType::F64, &[3, 4]);
    let text = rematted
        .get_concrete_function((&x,))
        .unwrap()
        .stablehlo(std::slice::from_ref(&spec))
        .unwrap();
    assert_eq!(
        text.matches("stablehlo.optimization_barrier").count(),
        3,
        "one per block"
    );
    let text = plain
        .get_concrete_function((&x,))
        .unwrap()
        .stablehlo(&[spec])
        .unwrap();
    assert!(!text.contains("optimization_barrier"));
}

#[test]
fn input_gradients_match_finite_differences() {
    let stack = Stack::new(2, 2, DType::F64);
    let x: Vec<f64> = (0..6).map(|i| (i as f64 * 0.7).sin()).collect();
    let f = |x: &Tensor| -> Result<Tensor> {
        let mut h = x.clone();
        for ws in &stack.blocks {
            h = xlafn::recompute_grad(Stack::block(ws))(&[h], ws)?.remove(0);
        }
        Ok(h)
    };
    gradcheck::check_gradient(&f, &x, &[3, 2], 1e-6, "recompute_grad");
}

/// Several results, an integer one among them, and second-order use: the
/// block's gradient is itself differentiable.
#[test]
fn blocks_with_several_results_and_higher_order_gradients() {
    let block = xlafn::recompute_grad(|xs: &[Tensor]| {
        Ok(vec![xs[0].sin()?, xs[0].argmax(0)?, xs[0].mul(&xs[1])?])
    });
    let x = Tensor::vector(&[0.3f64, 1.2]).unwrap();
    let y = Tensor::vector(&[2.0f64, -1.0]).unwrap();
    let outer = GradientTape::new();
    outer.watch(&x);
    let inner = GradientTape::new();
    inner.watch(&x);
    inner.watch(&y);
    let r = block(&[x.clone(), y.clone()], &[]).unwrap();
    assert_eq!(r[1].item::<i64>().unwrap(), 1);
    let loss = r[0].add(&r[2]).unwrap().reduce_sum(&[], false).unwrap();
    let g = inner.gradient(&loss, &[(&x).into(), (&y).into()]).unwrap();
    // d/dx = cos x + y; d/dy = x.
    let gx = g[0].clone().unwrap();
    let want: Vec<f64> = [(0.3f64, 2.0), (1.2, -1.0)]
        .iter()
        .map(|(x, y)| x.cos() + y)
        .collect();
    assert_close(&gx.to_vec::<f64>().unwrap(), &want, 1e-12, "dx");
    assert_close(
        &g[1].clone().unwrap().to_vec::<f64>().unwrap(),
        &[0.3, 1.2],
        1e-12,
        "dy",
    );
    // d/dx sum(cos x + y) = -sin x.
    let gx_sum = gx.reduce_sum(&[], false).unwrap();
    let gg = outer.gradient(&gx_sum, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    assert_close(
        &gg.to_vec::<f64>().unwrap(),
        &[-(0.3f64.sin()), -(1.2f64.sin())],
        1e-12,
        "d2x",
    );
}

#[test]
fn a_block_without_inputs_is_an_error() {
    let block = xlafn::recompute_grad(|_: &[Tensor]| Ok(vec![Tensor::scalar(1f32)]));
    let err = block(&[], &[]).unwrap_err().to_string();
    assert!(
        err.contains("recompute_grad") && err.contains("at least one input"),
        "{err}"
    );
}

/// The saving, as XLA plans it: without remat the training step keeps
/// each block's input and its 4x-wide hidden activation (five inputs'
/// worth per block); with it, each block's input, plus one block's
/// internals while its gradient runs. The batch is much larger than the
/// weights so that activations, not weight gradients, fill the buffers.
///
/// The figures compared are what one more block adds (the temporaries of
/// a 16-block stack less those of an 8-block one): a platform's fixed
/// scratch (an H200's 32 MiB cuBLAS workspace) cancels out.
///
/// On every platform: XLA's CPU compiler drops the optimization barrier
/// before CSE, and the rerun's inputs are tied to the cotangents instead
/// (measured on the CPU plugin, 8 blocks: 11.5 MB of temporaries stored,
/// 4.5 MB recomputed; before the tie, 13.4 MB recomputed).
#[test]
fn remat_shrinks_a_deep_stacks_temporaries() {
    let (batch, width) = (1024, 64);
    let x = input(batch, width, DType::F32);
    let spec = ArraySpec::new(DType::F32, &[batch, width]);
    let temp_bytes = |depth: usize, remat: bool| {
        let stack = Arc::new(Stack::new(depth, width, DType::F32));
        let step = function(move |x: Tensor| -> Result<Vec<Tensor>> { stack.gradients(&x, remat) });
        let cf = step.get_concrete_function((&x,)).unwrap();
        let stats = cf
            .compiled(std::slice::from_ref(&spec))
            .unwrap()
            .memory_stats()
            .unwrap();
        // The input and the 2 * depth weights; their gradients.
        let weights = depth as i64 * 2 * width * 4 * width * 4;
        assert_eq!(
            stats.argument_bytes,
            batch * width * 4 + weights,
            "{stats:?}"
        );
        assert!(stats.output_bytes >= weights, "{stats:?}");
        stats.temp_bytes
    };
    let activation = batch * width * 4;
    let per_block = |remat: bool| {
        let (short, long) = (temp_bytes(8, remat), temp_bytes(16, remat));
        eprintln!("remat {remat}: 8 blocks {short} B, 16 blocks {long} B");
        (long - short) as f64 / 8.0 / activation as f64
    };
    let (stored, recomputed) = (per_block(false), per_block(true));
    eprintln!("activations per block: stored {stored:.2}, recomputed {recomputed:.2}");
    // Stored: about 5 activations per block; recomputed: about 1.
    assert!(stored >= 4.0, "stored {stored}");
    assert!(recomputed <= 1.5, "recomputed {recomputed}");
}

/// The rerun's inputs are tied to the cotangents by subtracting a zero
/// made from one of them: the gradients stay bit for bit the stored
/// ones, with a `-0.0` input (whose sign `x + 0.0` would lose) and with
/// an infinite cotangent (which `dy * 0.0` would turn into NaN
/// everywhere), compiled as well as eagerly.
#[test]
fn the_tie_to_the_cotangents_changes_no_bit() {
    let w = Variable::new(Tensor::vector(&[2f32, -3.0, 0.5]).unwrap());
    let block = {
        let w = w.clone();
        move |xs: &[Tensor]| Ok(vec![xs[0].mul(&w.read())?])
    };
    let remat = xlafn::recompute_grad(block.clone());
    // Cotangent of the loss: infinite at the element the zero is made from.
    let weights = Tensor::vector(&[f32::INFINITY, 1.0, -2.0]).unwrap();
    let grads = {
        let w = w.clone();
        move |x: Tensor, rematted: bool| -> Result<Vec<Tensor>> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = match rematted {
                true => remat(std::slice::from_ref(&x), std::slice::from_ref(&w))?,
                false => block(std::slice::from_ref(&x))?,
            };
            let loss = y[0].mul(&weights)?.reduce_sum(&[], false)?;
            let g = tape.gradient(&loss, &[Source::from(&x), Source::from(&w)])?;
            Ok(g.into_iter().map(|g| g.expect("connected")).collect())
        }
    };
    let bits = |ts: Vec<Tensor>| -> Vec<Vec<u32>> {
        ts.iter()
            .map(|t| {
                t.to_vec::<f32>()
                    .unwrap()
                    .iter()
                    .map(|v| v.to_bits())
                    .collect()
            })
            .collect()
    };
    let x = Tensor::vector(&[-0.0f32, -0.0, 1.5]).unwrap();
    let stored = bits(grads(x.clone(), false).unwrap());
    // d/dw = x * dy: -0.0 * 1.0 keeps its sign.
    assert_eq!(stored[1][1], (-0.0f32).to_bits());
    assert_eq!(bits(grads(x.clone(), true).unwrap()), stored, "eager");
    let compiled = {
        let grads = grads.clone();
        function(move |x: Tensor| grads(x, true))
    };
    assert_eq!(bits(compiled.call((&x,)).unwrap()), stored, "compiled");
}
