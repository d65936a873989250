//! W16: real-model inference beside PyTorch: a CREPE-sized 1-D
//! convolution stack, torchcrepe's "full" model, written with the layer
//! library and compiled whole. Six blocks of explicit padding, a
//! convolution, relu, batch norm at inference and a max pool of 2
//! (filters 1024, 128, 128, 128, 256, 512; kernels 512 then 64; the first
//! at stride 4 with padding 254 on both sides, the others "same" as
//! torchcrepe pads them, 31 before and 32 after), then a `Linear` from
//! the flattened `[4, 512]` to 360 pitch bins and a sigmoid. Batch 61
//! frames of 1024 samples, channels last (`[61, 1024, 1]`). Batch norms
//! are torchcrepe's (epsilon 1e-3).
//!
//! Parameters and frames are drawn as `scripts/peers_w16.py` draws them
//! (numpy's `RandomState(16)`, reimplemented by `real_models::NpRandom`):
//! per block its kernel `[k, cin, cout]` from N(0, 1) times `sqrt(2 / (k
//! cin))`, its bias `uniform(-0.1, 0.1)`, then its batch norm's gamma
//! `uniform(0.5, 1.5)`, beta `uniform(-0.1, 0.1)`, moving mean
//! `uniform(-0.1, 0.1)` and moving variance `uniform(0.5, 1.5)`; then the
//! head's kernel `[2048, 360]` from N(0, 1/2048) and its bias zeros; then
//! the frames from N(0, 1). The report checks the output against
//! PyTorch's (`W16_PEER_CHECK`, from that script) before timing.
//!
//! Requires the sibling module `real_models`.

#![allow(dead_code)]

use super::real_models::NpRandom;
use xlafn::module::Module;
use xlafn::nn::layers::{BatchNorm, Conv1d, Layer, Linear, MaxPool1d};
use xlafn::prelude::*;
use xlafn::{Padding, Variable};

/// Frames, samples per frame, pitch bins.
pub const W16_B: i64 = 61;
pub const W16_SAMPLES: i64 = 1024;
pub const W16_BINS: i64 = 360;

/// `(kernel, filters, stride, padding before, padding after)` per block.
pub const W16_BLOCKS: [(i64, i64, i64, i64, i64); 6] = [
    (512, 1024, 4, 254, 254),
    (64, 128, 1, 31, 32),
    (64, 128, 1, 31, 32),
    (64, 128, 1, 31, 32),
    (64, 256, 1, 31, 32),
    (64, 512, 1, 31, 32),
];

/// PyTorch's output on the same parameters and frames
/// (`scripts/peers_w16.py`): the sum of the outputs and of their squares.
pub const W16_PEER_CHECK: [f64; 2] = [10_952.209_595_277_905, 5_751.899_243_531_852];

/// One block: conv, relu, batch norm, pool.
#[derive(Module)]
pub struct W16Block {
    pub conv: Conv1d,
    pub bn: BatchNorm,
}

/// The whole network.
#[derive(Module)]
pub struct W16Model {
    pub blocks: Vec<W16Block>,
    pub head: Linear,
}

impl W16Model {
    /// The network's output `[61, 360]` for frames `[61, 1024, 1]`.
    pub fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let pool = MaxPool1d::new([2]);
        let mut x = x.clone();
        for block in &self.blocks {
            let y = block.conv.forward(&x)?.relu()?;
            x = pool.forward(&block.bn.forward(&y)?)?;
        }
        let flat = x.reshape(&[-1, 4 * 512])?;
        self.head.forward(&flat)?.sigmoid()
    }
}

/// The model with the drawn parameters, and the frames.
pub struct W16 {
    pub model: W16Model,
    pub frames: Tensor,
}

impl W16 {
    pub fn new() -> Result<W16> {
        let mut rs = NpRandom::new(16);
        let mut blocks = Vec::new();
        let mut cin = 1;
        for (k, cout, stride, before, after) in W16_BLOCKS {
            let kernel = rs.randn(k * cin * cout, (2.0 / (k * cin) as f64).sqrt());
            let kernel = Tensor::from_vec(kernel, &[k, cin, cout])?;
            let bias = Tensor::from_vec(rs.uniform(-0.1, 0.1, cout), &[cout])?;
            let conv = Conv1d::from_weights(&kernel, Some(&bias))?
                .strides([stride])
                .padding(Padding::Explicit(vec![(before, after)]));
            let bn = BatchNorm::new(cout, DType::F32)?.epsilon(1e-3);
            for (v, (low, high)) in [
                (&bn.gamma, (0.5, 1.5)),
                (&bn.beta, (-0.1, 0.1)),
                (&bn.moving_mean, (-0.1, 0.1)),
                (&bn.moving_variance, (0.5, 1.5)),
            ] {
                assign(v, rs.uniform(low, high, cout), &[cout])?;
            }
            blocks.push(W16Block { conv, bn });
            cin = cout;
        }
        let features = 4 * 512;
        let head_kernel = rs.randn(features * W16_BINS, (1.0 / features as f64).sqrt());
        let head = Linear::from_weights(
            &Tensor::from_vec(head_kernel, &[features, W16_BINS])?,
            Some(&Tensor::zeros(&[W16_BINS], DType::F32)),
        )?;
        let frames =
            Tensor::from_vec(rs.randn(W16_B * W16_SAMPLES, 1.0), &[W16_B, W16_SAMPLES, 1])?;
        Ok(W16 {
            model: W16Model { blocks, head },
            frames,
        })
    }
}

fn assign(v: &Variable, values: Vec<f32>, dims: &[i64]) -> Result<()> {
    v.assign(&Tensor::from_vec(values, dims)?)
}

/// The sum of `y` and of its squares, as the peer script prints them.
pub fn w16_check(y: &Tensor) -> Result<[f64; 2]> {
    let v = y.to_vec::<f32>()?;
    Ok([
        v.iter().map(|&x| x as f64).sum(),
        v.iter().map(|&x| (x as f64) * (x as f64)).sum(),
    ])
}
