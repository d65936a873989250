//! W14: a ResNet training step written with the layer library, on
//! `[16, 32, 32, 3]` NHWC images: a 3x3 `Conv2d` stem to 16 channels,
//! `BatchNorm`, relu; three stages of one basic residual block each (16,
//! 32 and 64 channels; the second and third at stride 2, their shortcut a
//! strided 1x1 convolution and a `BatchNorm`), each block
//! `relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x))`; `GlobalAvgPool`
//! and a `Linear` head over 10 classes; the mean sparse cross-entropy; SGD
//! with momentum 0.9 at a rate of 0.05, one compiled step.
//!
//! The convolutions have SAME padding and no bias (the batch norm after
//! each subtracts the mean, so a bias would only be cancelled). The batch
//! norms are Keras' defaults (momentum 0.99, epsilon 1e-3) in training
//! mode: each batch normalized by its own mean and biased variance, the
//! moving statistics moved toward them inside the step (they do not enter
//! the loss; the peers move theirs the same way).
//!
//! Parameters and data are drawn as `bench/peers_models.py` draws them
//! (numpy's `RandomState(14)`, reimplemented by `real_models::NpRandom`):
//! for each convolution in the model's order (the stem; per block conv1,
//! conv2 and the shortcut's) its kernel `[k, k, cin, cout]` He-normal
//! (N(0, 1) times `sqrt(2 / (k k cin))`), its batch norm's gamma ones and
//! beta zeros (and moving mean zeros, moving variance ones, which draw
//! nothing); the head's kernel `[64, 10]` from N(0, 1/64) and its bias
//! zero; then the images from N(0, 1) and the labels uniform in 0..10.
//!
//! Requires the sibling module `real_models`.

#![allow(dead_code)]

use super::real_models::NpRandom;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn;
use xlafn::nn::layers::{BatchNorm, Conv2d, GlobalAvgPool, Layer, Linear, Mode};
use xlafn::optimizers::{Optimizer, Sgd};
use xlafn::prelude::*;
use xlafn::{Padding, random};

/// Batch, image side, input channels, classes, the stages' widths.
pub const W14_B: i64 = 16;
pub const W14_S: i64 = 32;
pub const W14_CIN: i64 = 3;
pub const W14_C: i64 = 10;
pub const W14_WIDTHS: [i64; 3] = [16, 32, 64];
/// SGD's learning rate and momentum.
pub const W14_LR: f64 = 0.05;
pub const W14_MOMENTUM: f64 = 0.9;

/// The first three losses of `bench/peers_models.py`'s `jax_jit` step
/// (TensorFlow's agree to about 1e-7).
pub const W14_PEER_LOSSES: [f64; 3] = [
    2.321_895_122_528_076,
    2.237_000_942_230_224_6,
    2.109_856_367_111_206,
];

/// After those three steps, the sums over every batch norm of `|moving
/// mean|` and of the moving variance (`check_moving` of the `jax_jit`
/// cell).
pub const W14_PEER_MOVING: [f64; 2] = [5.235_673_904_418_945, 337.176_544_189_453_1];

/// The convolutions in parameter order: `(kernel size, in, out,
/// stride)`. A block whose channels or resolution change has a third,
/// its 1x1 projection shortcut.
pub fn w14_layout() -> Vec<(i64, i64, i64, i64)> {
    let mut convs = vec![(3, W14_CIN, W14_WIDTHS[0], 1)];
    let mut cin = W14_WIDTHS[0];
    for (i, &cout) in W14_WIDTHS.iter().enumerate() {
        let stride = if i == 0 { 1 } else { 2 };
        convs.push((3, cin, cout, stride));
        convs.push((3, cout, cout, 1));
        if cin != cout || stride != 1 {
            convs.push((1, cin, cout, stride));
        }
        cin = cout;
    }
    convs
}

/// The variables' values in the model's variable order (each with its
/// dims), the images and the labels, drawn as the peers draw them.
pub struct W14Init {
    pub params: Vec<(Vec<f32>, Vec<i64>)>,
    pub x: Vec<f32>,
    pub labels: Vec<i32>,
}

/// `np_models("W14")` of `bench/peers_models.py`, with the batch norms'
/// moving statistics (which it keeps as state) in their places.
pub fn w14_init() -> W14Init {
    let mut rs = NpRandom::new(14);
    let mut params = Vec::new();
    for (k, cin, cout, _stride) in w14_layout() {
        let scale = (2.0 / (k * k * cin) as f64).sqrt();
        params.push((rs.randn(k * k * cin * cout, scale), vec![k, k, cin, cout]));
        for fill in [1.0, 0.0, 0.0, 1.0] {
            params.push((vec![fill; cout as usize], vec![cout]));
        }
    }
    let width = W14_WIDTHS[W14_WIDTHS.len() - 1];
    params.push((
        rs.randn(width * W14_C, (1.0 / width as f64).sqrt()),
        vec![width, W14_C],
    ));
    params.push((vec![0.0; W14_C as usize], vec![W14_C]));
    let x = rs.randn(W14_B * W14_S * W14_S * W14_CIN, 1.0);
    let labels = rs.randint(W14_C as u32, W14_B);
    W14Init { params, x, labels }
}

/// A `size` x `size` convolution to `cout` channels at `stride`, SAME
/// padding, no bias.
fn conv(key: &Tensor, cin: i64, cout: i64, size: i64, stride: i64) -> Result<Conv2d> {
    Conv2d::lazy(key, cout, [size, size])?
        .strides([stride, stride])
        .padding(Padding::Same)
        .use_bias(false)
        .build(cin)
}

/// A block's projection shortcut: a strided 1x1 convolution and a batch
/// norm.
#[derive(Module)]
pub struct W14Shortcut {
    pub conv: Conv2d,
    pub bn: BatchNorm,
}

/// One basic residual block.
#[derive(Module)]
pub struct W14Block {
    pub conv1: Conv2d,
    pub bn1: BatchNorm,
    pub conv2: Conv2d,
    pub bn2: BatchNorm,
    /// Where the channels or the resolution change; the identity
    /// otherwise.
    pub shortcut: Option<W14Shortcut>,
}

impl W14Block {
    fn new(key: &Tensor, cin: i64, cout: i64, stride: i64) -> Result<W14Block> {
        let k = |i: u32| random::fold_in(key, &Tensor::scalar(i));
        let shortcut = if cin != cout || stride != 1 {
            Some(W14Shortcut {
                conv: conv(&k(2)?, cin, cout, 1, stride)?,
                bn: BatchNorm::new(cout, DType::F32)?,
            })
        } else {
            None
        };
        Ok(W14Block {
            conv1: conv(&k(0)?, cin, cout, 3, stride)?,
            bn1: BatchNorm::new(cout, DType::F32)?,
            conv2: conv(&k(1)?, cout, cout, 3, 1)?,
            bn2: BatchNorm::new(cout, DType::F32)?,
            shortcut,
        })
    }

    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let h = self.bn1.call(&self.conv1.call(x, mode)?, mode)?.relu()?;
        let h = self.bn2.call(&self.conv2.call(&h, mode)?, mode)?;
        let skip = match &self.shortcut {
            Some(s) => s.bn.call(&s.conv.call(x, mode)?, mode)?,
            None => x.clone(),
        };
        h.add(&skip)?.relu()
    }
}

/// The ResNet: variables `stem.kernel`, `stem_bn.{gamma,beta,moving_mean,
/// moving_variance}`, `blocks.<i>.{conv1,bn1,conv2,bn2,shortcut}...`,
/// `head.{kernel,bias}`.
#[derive(Module)]
pub struct W14Model {
    pub stem: Conv2d,
    pub stem_bn: BatchNorm,
    pub blocks: Vec<W14Block>,
    pub pool: GlobalAvgPool,
    pub head: Linear,
}

impl W14Model {
    /// The model at `init`'s values: every weight made now, then assigned.
    pub fn new(init: &W14Init) -> Result<W14Model> {
        let key = random::key(14)?;
        let k = |i: usize| random::fold_in(&key, &Tensor::scalar(i as u32));
        let first = W14_WIDTHS[0];
        let mut blocks = Vec::new();
        let mut cin = first;
        for (i, &cout) in W14_WIDTHS.iter().enumerate() {
            let stride = if i == 0 { 1 } else { 2 };
            blocks.push(W14Block::new(&k(i + 1)?, cin, cout, stride)?);
            cin = cout;
        }
        let model = W14Model {
            stem: conv(&k(0)?, W14_CIN, first, 3, 1)?,
            stem_bn: BatchNorm::new(first, DType::F32)?,
            blocks,
            pool: GlobalAvgPool::new(),
            head: Linear::new(&k(9)?, cin, W14_C)?,
        };
        let vars = model.variables();
        if vars.len() != init.params.len() {
            return Err(Error::Value(format!(
                "the model holds {} variables, W14 has {}",
                vars.len(),
                init.params.len()
            )));
        }
        for (var, (values, dims)) in vars.iter().zip(&init.params) {
            var.assign(&Tensor::from_slice(values, dims)?)?;
        }
        Ok(model)
    }

    /// The logits `[B, 10]` of images `[B, 32, 32, 3]`.
    pub fn logits(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let mut h = self.stem_bn.call(&self.stem.call(x, mode)?, mode)?.relu()?;
        for block in &self.blocks {
            h = block.call(&h, mode)?;
        }
        self.head.call(&self.pool.call(&h, mode)?, mode)
    }

    /// The mean sparse cross-entropy of the labels `[B]`, in training
    /// mode (batch statistics; the moving ones moved).
    pub fn loss(&self, x: &Tensor, labels: &Tensor) -> Result<Tensor> {
        let logits = self.logits(x, &Mode::training())?;
        nn::sparse_softmax_cross_entropy_with_logits(labels, &logits)?.reduce_mean(&[], false)
    }
}

/// The W14 model with its data on the device.
#[derive(Clone)]
pub struct W14 {
    pub model: Arc<W14Model>,
    pub x: Tensor,
    pub labels: Tensor,
}

impl W14 {
    pub fn new() -> Result<W14> {
        let init = w14_init();
        Ok(W14 {
            model: Arc::new(W14Model::new(&init)?),
            x: Tensor::from_slice(&init.x, &[W14_B, W14_S, W14_S, W14_CIN])?,
            labels: Tensor::from_slice(&init.labels, &[W14_B])?,
        })
    }

    /// The training step: forward (moving the batch norms' statistics),
    /// gradients and SGD with momentum updating the variables in place,
    /// one compiled program returning the loss; the momenta made first, so
    /// it traces once.
    pub fn train_step(&self) -> Result<Function<(Tensor, Tensor), Tensor>> {
        let sgd = Arc::new(Sgd::with_momentum(W14_LR, W14_MOMENTUM));
        let vars = self.model.trainable_variables();
        sgd.build(&vars)?;
        let model = self.model.clone();
        Ok(function(
            move |x: Tensor, labels: Tensor| -> Result<Tensor> {
                sgd.minimize(&vars, || model.loss(&x, &labels))
            },
        ))
    }
}
