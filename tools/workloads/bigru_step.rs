//! W15: a bidirectional GRU classifier over padded sequences, written
//! with the layer library: `Gru::bidirectional` (Keras' `reset_after`
//! GRU, one device loop per direction) reading `[B, T, I]` inputs with a
//! `[B, T]` padding mask, its two final states concatenated into a
//! `Linear` head over `C` classes, the mean sparse cross-entropy, and
//! TensorFlow's Adam (learning rate 1e-3, epsilon 1e-7), one compiled
//! step.
//!
//! Parameters and data are drawn as `bench/peers_models.py` draws them
//! (numpy's `RandomState(15)`, reimplemented by `real_models::NpRandom`):
//! for each direction the kernel `[I, 3H]` and recurrent kernel
//! `[H, 3H]` from N(0, 0.1^2) and the bias `[2, 3H]` zero; the head's
//! kernel `[2H, C]` from N(0, 0.1^2) and its bias zero; then the inputs
//! from N(0, 1), the lengths uniform in `T/2..=T` (each sequence padded
//! at its end) and the labels. So the JAX and TensorFlow steps of that
//! script give the same losses.
//!
//! Requires the sibling module `real_models`.

#![allow(dead_code)]

use super::real_models::NpRandom;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn;
use xlafn::nn::layers::{Bidirectional, Gru, Layer, Linear, Mode};
use xlafn::optimizers::{Adam, Optimizer};
use xlafn::prelude::*;
use xlafn::random;

/// Batch, time, input features, units per direction, classes.
pub const W15_B: i64 = 16;
pub const W15_T: i64 = 50;
pub const W15_I: i64 = 32;
pub const W15_H: i64 = 64;
pub const W15_C: i64 = 10;
/// Adam's learning rate.
pub const W15_LR: f64 = 1e-3;

/// The first three losses of `bench/peers_models.py`'s `jax_jit` step
/// (TensorFlow's agree to about 1e-6).
pub const W15_PEER_LOSSES: [f64; 3] = [
    2.393_080_472_946_167,
    2.297_634_601_593_017_6,
    2.203_537_940_979_004,
];

/// The parameters, in the model's variable order, and the data (inputs,
/// mask, labels) as host values, drawn as the peers draw them.
pub struct W15Init {
    pub params: Vec<(Vec<f32>, Vec<i64>)>,
    pub x: Vec<f32>,
    pub mask: Vec<i32>,
    pub labels: Vec<i32>,
}

/// `np_models("W15")` of `bench/peers_models.py`.
pub fn w15_init() -> W15Init {
    let (b, t, i, h, c) = (W15_B, W15_T, W15_I, W15_H, W15_C);
    let mut rs = NpRandom::new(15);
    let mut params = Vec::new();
    for _direction in 0..2 {
        params.push((rs.randn(i * 3 * h, 0.1), vec![i, 3 * h]));
        params.push((rs.randn(h * 3 * h, 0.1), vec![h, 3 * h]));
        params.push((vec![0.0; (2 * 3 * h) as usize], vec![2, 3 * h]));
    }
    params.push((rs.randn(2 * h * c, 0.1), vec![2 * h, c]));
    params.push((vec![0.0; c as usize], vec![c]));
    let x = rs.randn(b * t * i, 1.0);
    let lengths: Vec<i32> = rs
        .randint((t / 2 + 1) as u32, b)
        .into_iter()
        .map(|l| l + (t / 2) as i32)
        .collect();
    let mask = lengths
        .iter()
        .flat_map(|&len| (0..t as i32).map(move |s| i32::from(s < len)))
        .collect();
    let labels = rs.randint(c as u32, b);
    W15Init {
        params,
        x,
        mask,
        labels,
    }
}

/// The classifier.
#[derive(Module)]
pub struct W15Model {
    pub gru: Bidirectional<Gru>,
    pub head: Linear,
}

impl W15Model {
    /// The model at `init`'s parameters: built by one eager call, then
    /// every variable assigned its drawn value.
    pub fn new(init: &W15Init, x: &Tensor, mask: &Tensor) -> Result<W15Model> {
        let key = random::key(15)?;
        let model = W15Model {
            gru: Gru::bidirectional(&key, W15_H)?,
            head: Linear::lazy(&random::fold_in(&key, &Tensor::scalar(2u32))?, W15_C)?,
        };
        model.logits(x, mask)?;
        let vars = model.variables();
        if vars.len() != init.params.len() {
            return Err(Error::Value(format!(
                "the model holds {} variables, W15 draws {}",
                vars.len(),
                init.params.len()
            )));
        }
        for (var, (values, dims)) in vars.iter().zip(&init.params) {
            var.assign(&Tensor::from_slice(values, dims)?)?;
        }
        Ok(model)
    }

    /// The class scores `[B, C]` of inputs `[B, T, I]` under `mask` `[B, T]`.
    pub fn logits(&self, x: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let states = self.gru.run(x, None, Some(mask))?.outputs;
        self.head.call(&states, &Mode::training())
    }

    /// The mean sparse cross-entropy of the labels `[B]`.
    pub fn loss(&self, x: &Tensor, mask: &Tensor, labels: &Tensor) -> Result<Tensor> {
        nn::sparse_softmax_cross_entropy_with_logits(labels, &self.logits(x, mask)?)?
            .reduce_mean(&[], false)
    }
}

/// The W15 model with its data on the device.
#[derive(Clone)]
pub struct W15 {
    pub model: Arc<W15Model>,
    pub x: Tensor,
    pub mask: Tensor,
    pub labels: Tensor,
}

impl W15 {
    pub fn new() -> Result<W15> {
        let init = w15_init();
        let x = Tensor::from_slice(&init.x, &[W15_B, W15_T, W15_I])?;
        let mask = Tensor::from_slice(&init.mask, &[W15_B, W15_T])?;
        let labels = Tensor::from_slice(&init.labels, &[W15_B])?;
        let model = Arc::new(W15Model::new(&init, &x, &mask)?);
        Ok(W15 {
            model,
            x,
            mask,
            labels,
        })
    }

    /// The training step: forward, gradients and Adam updating the
    /// variables in place, one compiled program returning the loss.
    pub fn train_step(&self) -> Result<Function<(Tensor, Tensor, Tensor), Tensor>> {
        let adam = Arc::new(Adam::new(W15_LR));
        let vars = self.model.trainable_variables();
        adam.build(&vars)?;
        let model = self.model.clone();
        Ok(function(
            move |x: Tensor, mask: Tensor, labels: Tensor| -> Result<Tensor> {
                adam.minimize(&vars, || model.loss(&x, &mask, &labels))
            },
        ))
    }
}
