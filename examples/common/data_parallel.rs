//! Data-parallel training, shared by `examples/data_parallel.rs`, its
//! test and the bench report: the W3 MLP's data, a `#[derive(Module)]`
//! MLP and Adam in one compiled step, run either on one device or with
//! the batch split over a mesh's `data` axis and the weights replicated.
//! XLA's partitioner sums the per-device gradients with an all-reduce.

use std::sync::Arc;
use xlafn::module::Module;
use xlafn::prelude::*;
use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
use xlafn::{initializers, random};

pub const INPUTS: i64 = 784;
pub const HIDDEN: i64 = 64;
pub const CLASSES: i64 = 10;

/// `x @ kernel + bias`.
#[derive(Module)]
pub struct Dense {
    pub kernel: Variable,
    pub bias: Variable,
}

impl Dense {
    fn new(key: &Tensor, fan_in: i64, fan_out: i64) -> Result<Dense> {
        Ok(Dense {
            kernel: Variable::try_new(initializers::glorot_uniform(
                key,
                &[fan_in, fan_out],
                DType::F32,
            )?)?,
            bias: Variable::try_new(initializers::zeros(&[fan_out], DType::F32)?)?,
        })
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.kernel.try_read()?)?
            .add(&self.bias.try_read()?)
    }
}

/// Two dense layers with a relu between them.
#[derive(Module)]
pub struct Mlp {
    pub hidden: Dense,
    pub output: Dense,
}

impl Mlp {
    pub fn new(seed: u64) -> Result<Mlp> {
        let keys = random::split(&random::key(seed)?, 2)?;
        Ok(Mlp {
            hidden: Dense::new(&random::nth(&keys, 0)?, INPUTS, HIDDEN)?,
            output: Dense::new(&random::nth(&keys, 1)?, HIDDEN, CLASSES)?,
        })
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        let logits = self.output.apply(&self.hidden.apply(x)?.relu()?)?;
        xlafn::nn::sparse_softmax_cross_entropy_with_logits(y, &logits)?.reduce_mean(&[], false)
    }
}

/// A model, its optimizer and its compiled training step.
pub struct Trainer {
    pub model: Arc<Mlp>,
    pub step: Function<(Tensor, Tensor), Tensor>,
}

/// The trainer for a model from `seed`; with a mesh, the step takes its
/// batch split over the mesh's `data` axis (weights and optimizer state
/// are replicated on its first call and stay so).
pub fn trainer(seed: u64, mesh: Option<&Arc<Mesh>>) -> Result<Trainer> {
    let model = Arc::new(Mlp::new(seed)?);
    let adam = Arc::new(Adam::new(1e-3));
    adam.build(&model.trainable_variables())?;
    let mut options = FunctionOptions::new().name("train_step");
    if let Some(mesh) = mesh {
        let batch = NamedSharding::new(mesh, PartitionSpec::new([Some("data")]))?;
        options = options.in_shardings(vec![Some(batch.clone()), Some(batch)]);
    }
    let step = {
        let model = model.clone();
        options.build(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            adam.minimize(&model.trainable_variables(), || model.loss(&x, &y))
        })
    };
    Ok(Trainer { model, step })
}

/// Synthetic batches of `size` examples: noisy copies of one random
/// prototype per class.
pub fn batches(count: u64, size: i64) -> Result<Vec<(Tensor, Tensor)>> {
    let prototypes = Tensor::random_normal(&[CLASSES, INPUTS], 99, DType::F32)?;
    (0..count)
        .map(|seed| {
            let labels: Vec<i32> = (0..size)
                .map(|i| ((i as u64 * 7 + seed) % CLASSES as u64) as i32)
                .collect();
            let y = Tensor::from_vec(labels, &[size])?;
            let noise = Tensor::random_normal(&[size, INPUTS], 1000 + seed, DType::F32)?;
            let x = prototypes.gather(&y, 0)?.add(&noise.mul_scalar(1.5)?)?;
            Ok((x, y))
        })
        .collect()
}

/// The batches laid out with their examples split over the mesh's
/// `data` axis, once (`jax.device_put`), so that steps do not reshard
/// them through the host on every call.
pub fn split_batches(data: &[(Tensor, Tensor)], mesh: &Arc<Mesh>) -> Result<Vec<(Tensor, Tensor)>> {
    let batch = NamedSharding::new(mesh, PartitionSpec::new([Some("data")]))?;
    data.iter()
        .map(|(x, y)| Ok((x.shard(&batch)?, y.shard(&batch)?)))
        .collect()
}

/// Trains for `steps` steps over `data`; returns the losses.
pub fn train(trainer: &Trainer, data: &[(Tensor, Tensor)], steps: usize) -> Result<Vec<f32>> {
    (0..steps)
        .map(|i| {
            let (x, y) = &data[i % data.len()];
            trainer.step.call((x, y))?.item::<f32>()
        })
        .collect()
}

/// Every variable's values, in the model's order.
pub fn weights(model: &Mlp) -> Result<Vec<Vec<f32>>> {
    model
        .trainable_variables()
        .iter()
        .map(|v| v.try_read()?.to_vec::<f32>())
        .collect()
}
