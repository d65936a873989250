//! The W3 workload (book/src/reference/benchmarks.md): a 784-256-10 MLP trained with SGD,
//! one compiled step per call. Shared by the mlp example and the report.

use xlafn::prelude::*;

pub const BATCH: i64 = 128;
pub const INPUTS: i64 = 784;
pub const HIDDEN: i64 = 256;
pub const CLASSES: i64 = 10;

/// The model's variables, initialised from fixed seeds.
pub struct Mlp {
    pub params: Vec<Variable>,
}

impl Mlp {
    pub fn new() -> Result<Mlp> {
        let glorot = |fan_in: i64, fan_out: i64, seed| -> Result<Variable> {
            let scale = (2.0 / (fan_in + fan_out) as f64).sqrt();
            Ok(Variable::new(
                Tensor::random_normal(&[fan_in, fan_out], seed, DType::F32)?.mul_scalar(scale)?,
            ))
        };
        Ok(Mlp {
            params: vec![
                glorot(INPUTS, HIDDEN, 11)?,
                Variable::new(Tensor::zeros(&[HIDDEN], DType::F32)),
                glorot(HIDDEN, CLASSES, 12)?,
                Variable::new(Tensor::zeros(&[CLASSES], DType::F32)),
            ],
        })
    }

    /// relu(x @ W1 + b1) @ W2 + b2
    pub fn logits(params: &[Variable], x: &Tensor) -> Result<Tensor> {
        let hidden = x
            .matmul(&params[0].try_read()?)?
            .add(&params[1].try_read()?)?
            .relu()?;
        hidden
            .matmul(&params[2].try_read()?)?
            .add(&params[3].try_read()?)
    }

    /// The compiled training step: forward, mean softmax cross-entropy,
    /// backward and the SGD update, in one XLA program.
    pub fn train_step(&self, learning_rate: f64) -> Function<(Tensor, Tensor), Tensor> {
        let params = self.params.clone();
        let sgd = Sgd::new(learning_rate);
        function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            // The labels picked from the logits (a gather), as a user of
            // `tf.nn.sparse_softmax_cross_entropy_with_logits` writes it.
            // A one-hot product instead computes the same on the pinned
            // XLA in the same time, but ran 20-25% slower than jax.jit's
            // program through jaxlib 0.10.2's compiler, where this form
            // ties with it (2026-11-27).
            let logits = Mlp::logits(&params, &x)?;
            let loss = xlafn::nn::sparse_softmax_cross_entropy_with_logits(&y, &logits)?
                .reduce_mean(&[], false)?;
            let sources: Vec<Source> = params.iter().map(Source::from).collect();
            let grads = tape.gradient(&loss, &sources)?;
            let pairs: Vec<(Option<Tensor>, &Variable)> =
                grads.into_iter().zip(params.iter()).collect();
            sgd.apply_gradients(&pairs)?;
            Ok(loss)
        })
    }
}

/// A synthetic batch: each class has a random prototype; inputs are noisy
/// copies of their class's prototype.
pub fn synthetic_batch(seed: u64) -> Result<(Tensor, Tensor)> {
    let prototypes = Tensor::random_normal(&[CLASSES, INPUTS], 99, DType::F32)?.to_vec::<f32>()?;
    let noise = Tensor::random_normal(&[BATCH, INPUTS], seed, DType::F32)?.to_vec::<f32>()?;
    let labels: Vec<i32> = (0..BATCH)
        .map(|i| ((i as u64 * 7 + seed) % CLASSES as u64) as i32)
        .collect();
    let mut x = Vec::with_capacity((BATCH * INPUTS) as usize);
    for (i, &label) in labels.iter().enumerate() {
        for j in 0..INPUTS as usize {
            x.push(
                prototypes[label as usize * INPUTS as usize + j]
                    + 1.5 * noise[i * INPUTS as usize + j],
            );
        }
    }
    Ok((
        Tensor::from_vec(x, &[BATCH, INPUTS])?,
        Tensor::from_vec(labels, &[BATCH])?,
    ))
}
