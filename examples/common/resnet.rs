//! A small ResNet (He et al., 2015) written with the layer library
//! (`xlafn::nn::layers`), shared by `examples/resnet.rs` and
//! `tests/resnet_example.rs`: a 3x3 convolution stem, one residual block
//! per stage (two 3x3 convolutions, each followed by batch norm, relu
//! after the first and after the sum; a 1x1 projection shortcut where the
//! channels or the stride change), global average pooling and a dense
//! head. It reads the 8x8 UCI digits through `common/cnn.rs`, which its
//! includer declares as the sibling module `cnn`.
//!
//! Training is one compiled program per step: the forward pass in
//! training mode (batch norm on batch statistics, moving the moving
//! ones), sparse softmax cross-entropy, gradients and SGD with momentum.
//! Evaluation runs in inference mode, on the moving statistics, so a
//! prediction does not depend on what else is in the batch.

#![allow(dead_code)]

use super::cnn::{Split, shuffled};
use std::sync::Arc;
use xlafn::initializers::Initializer;
use xlafn::module::Module;
use xlafn::nn;
use xlafn::nn::layers::{
    Activation, BatchNorm, Conv2d, GlobalAvgPool, Layer, Linear, Mode, Sequential,
};
use xlafn::optimizers::{Optimizer, Sgd};
use xlafn::prelude::*;
use xlafn::{Padding, random};

/// A convolution with `cout` filters of `size` x `size` and `stride`, SAME
/// padding, He-normal weights and no bias: the batch norm after it
/// subtracts the mean, so a bias would only be cancelled.
fn conv(key: &Tensor, cin: i64, cout: i64, size: i64, stride: i64) -> Result<Conv2d> {
    Conv2d::lazy(key, cout, [size, size])?
        .strides([stride, stride])
        .padding(Padding::Same)
        .use_bias(false)
        .kernel_initializer(Initializer::HeNormal)
        .build(cin)
}

/// Batch norm over `channels`. Momentum 0.9 rather than Keras' 0.99: a
/// run of a few hundred steps must leave moving statistics that have
/// caught up with the weights.
fn batch_norm(channels: i64) -> Result<BatchNorm> {
    Ok(BatchNorm::new(channels, DType::F32)?.momentum(0.9))
}

/// One residual block: `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`.
#[derive(Module)]
pub struct Block {
    pub conv1: Conv2d,
    pub bn1: BatchNorm,
    pub conv2: Conv2d,
    pub bn2: BatchNorm,
    /// A 1x1 convolution and batch norm when the block changes the
    /// channels or the resolution; the identity otherwise.
    pub shortcut: Option<Sequential>,
}

impl Block {
    /// A block from `cin` to `cout` channels; `stride` 2 halves the height
    /// and width (in its first convolution and in the shortcut).
    pub fn new(key: &Tensor, cin: i64, cout: i64, stride: i64) -> Result<Block> {
        let k = |i: u32| random::fold_in(key, &Tensor::scalar(i));
        let shortcut = if cin != cout || stride != 1 {
            Some(
                Sequential::new()
                    .add(conv(&k(2)?, cin, cout, 1, stride)?)
                    .add(batch_norm(cout)?),
            )
        } else {
            None
        };
        Ok(Block {
            conv1: conv(&k(0)?, cin, cout, 3, stride)?,
            bn1: batch_norm(cout)?,
            conv2: conv(&k(1)?, cout, cout, 3, 1)?,
            bn2: batch_norm(cout)?,
            shortcut,
        })
    }
}

impl Layer for Block {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let h = self.conv1.call(x, mode)?;
        let h = self.bn1.call(&h, mode)?.relu()?;
        let h = self.bn2.call(&self.conv2.call(&h, mode)?, mode)?;
        let skip = match &self.shortcut {
            Some(projection) => projection.call(x, mode)?,
            None => x.clone(),
        };
        h.add(&skip)?.relu()
    }
}

/// The model. Its variables are named by their paths (`stem.layers.0.kernel`,
/// `blocks.1.bn2.moving_mean`, `head.bias`, ...), the names its checkpoints
/// use; the moving statistics are among them, not trainable.
#[derive(Module)]
pub struct ResNet {
    /// conv 3x3 + batch norm + relu.
    pub stem: Sequential,
    pub blocks: Vec<Block>,
    pub pool: GlobalAvgPool,
    /// The dense layer giving the 10 logits.
    pub head: Linear,
}

impl ResNet {
    /// A ResNet whose stages have `widths` channels (the stem has the
    /// first width): the first stage keeps the 8x8 resolution, each later
    /// one halves it. Weights are drawn from `seed`.
    pub fn new(seed: u64, widths: &[i64]) -> Result<ResNet> {
        let key = random::key(seed)?;
        let k = |i: usize| random::fold_in(&key, &Tensor::scalar(i as u32));
        let first = widths[0];
        let stem = Sequential::new()
            .add(conv(&k(0)?, 1, first, 3, 1)?)
            .add(batch_norm(first)?)
            .add(Activation::Relu);
        let mut blocks = Vec::new();
        let mut cin = first;
        for (i, &cout) in widths.iter().enumerate() {
            let stride = if i == 0 { 1 } else { 2 };
            blocks.push(Block::new(&k(i + 1)?, cin, cout, stride)?);
            cin = cout;
        }
        let head = Linear::new(&k(widths.len() + 1)?, cin, 10)?;
        Ok(ResNet {
            stem,
            blocks,
            pool: GlobalAvgPool::new(),
            head,
        })
    }

    /// The fraction of `split` classified right, in inference mode (moving
    /// statistics).
    pub fn accuracy(&self, split: &Split) -> Result<f64> {
        let rows: Vec<usize> = (0..split.len()).collect();
        let (x, y) = split.batch(&rows)?;
        let predicted = self.forward(&x)?.argmax(-1)?.to_vec::<i64>()?;
        let labels = y.to_vec::<i32>()?;
        let right = predicted
            .iter()
            .zip(&labels)
            .filter(|(p, l)| **p == i64::from(**l))
            .count();
        Ok(right as f64 / labels.len() as f64)
    }
}

/// Logits `[batch, 10]` for images `[batch, 8, 8, 1]`.
impl Layer for ResNet {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let mut h = self.stem.call(x, mode)?;
        for block in &self.blocks {
            h = block.call(&h, mode)?;
        }
        self.head.call(&self.pool.call(&h, mode)?, mode)
    }
}

/// The compiled training step: `(images, labels) -> loss`.
pub type TrainStep = Function<(Tensor, Tensor), Tensor>;

/// The training step of `model` with `optimizer`: one XLA program holding
/// the forward pass (which also moves the batch norms' moving
/// statistics), the gradients of the trainable variables and their update.
pub fn train_step(model: &Arc<ResNet>, optimizer: Arc<Sgd>) -> TrainStep {
    let model = model.clone();
    function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
        optimizer.minimize(&model.trainable_variables(), || {
            let logits = model.call(&x, &Mode::training())?;
            nn::sparse_softmax_cross_entropy_with_logits(&y, &logits)?.reduce_mean(&[], false)
        })
    })
}

/// Trains for `steps` steps on shuffled batches of `batch` (a new shuffle
/// each pass, the last partial batch dropped so the step keeps one shape)
/// with SGD, learning rate `learning_rate` and momentum 0.9; returns every
/// step's loss and the step function.
pub fn train(
    model: &Arc<ResNet>,
    train: &Split,
    batch: usize,
    steps: usize,
    learning_rate: f64,
) -> Result<(Vec<f32>, TrainStep)> {
    let optimizer = Arc::new(Sgd::with_momentum(learning_rate, 0.9));
    // The momentum slots made now, eagerly, so the step traces once.
    optimizer.build(&model.trainable_variables())?;
    let step = train_step(model, optimizer);
    let mut losses = Vec::with_capacity(steps);
    let mut pass = 0;
    while losses.len() < steps {
        pass += 1;
        let order = shuffled(train.len(), pass);
        for rows in order.chunks_exact(batch).take(steps - losses.len()) {
            let (x, y) = train.batch(rows)?;
            losses.push(step.call((x, y))?.item::<f32>()?);
        }
    }
    Ok((losses, step))
}
