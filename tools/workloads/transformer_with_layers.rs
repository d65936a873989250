//! W9 (the benchmarks page's transformer block) a second time, written with the
//! layer library instead of by hand: `Embedding`, `LayerNorm`,
//! `MultiHeadAttention` with a causal mask, `Linear` with a tanh GELU. It
//! starts from the same numpy-drawn parameters as `real_models.rs`'s W9,
//! so its losses are the peers' too, and the benchmark report times its
//! training step beside the hand-written one (`W9_layers`): the layers
//! should cost nothing.
//!
//! Differences from the hand-written program, all of which keep the math:
//! - the attention kernels keep Keras' `EinsumDense` layouts (`[d, heads,
//!   head_dim]` for query, key and value, `[heads, head_dim, d]` for the
//!   output): the hand-written `[d, d]` matrices reshaped, row-major, so
//!   each is the same matrix;
//! - the activations stay `[batch, seq, d]` (the layers contract the last
//!   axis) where the hand-written one flattens to `[batch * seq, d]`;
//! - the layer scales the queries by `1/sqrt(head_dim)` before the
//!   product (Keras' order) rather than the scores, and masks by selecting
//!   a large negative score (`where`) rather than adding -1e9;
//! - the position embedding is a plain variable `[seq, d]` added to the
//!   token embeddings, as in the hand-written model (an `Embedding` of
//!   positions would add a gather of `0..seq`).
//!
//! Requires the sibling module `real_models`.

#![allow(dead_code)]

use super::real_models::{Init, W9_B, W9_D, W9_DH, W9_F, W9_NH, W9_T, W9_V, Workload, init};
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn;
use xlafn::nn::layers::{
    Activation, AttentionOptions, Embedding, Layer, LayerNorm, Linear, Mode, MultiHeadAttention,
};
use xlafn::optimizers::{Adam, Optimizer};
use xlafn::prelude::*;
use xlafn::random;

/// The block. Its variables are listed in the hand-written model's
/// parameter order (token and position embeddings, layer norm 1, the
/// query/key/value/output kernels, layer norm 2, the MLP, the final layer
/// norm, the output projection), so one list of initial values fills both.
#[derive(Module)]
pub struct W9Layers {
    pub token: Embedding,
    pub position: Variable,
    pub ln1: LayerNorm,
    pub attention: MultiHeadAttention,
    pub ln2: LayerNorm,
    pub mlp_in: Linear,
    pub mlp_out: Linear,
    pub ln_final: LayerNorm,
    pub output: Linear,
}

impl W9Layers {
    /// The block at `init`'s parameters (W9's `np_real` draw).
    pub fn new(init: &Init) -> Result<W9Layers> {
        let (v, d, t, f, nh, dh) = (W9_V, W9_D, W9_T, W9_F, W9_NH, W9_DH);
        let key = random::key(9)?;
        let k = |i: u32| random::fold_in(&key, &Tensor::scalar(i));
        let attention = MultiHeadAttention::new(&k(0)?, nh, dh)?.use_bias(false)?;
        attention.build(d, d, d, DType::F32)?;
        let gelu = Activation::Gelu { approximate: true };
        let model = W9Layers {
            token: Embedding::new(&k(1)?, v, d)?,
            position: Variable::try_new(Tensor::try_zeros(&[t, d], DType::F32)?)?,
            ln1: LayerNorm::new(d)?,
            attention,
            ln2: LayerNorm::new(d)?,
            mlp_in: Linear::new(&k(2)?, d, f)?.activation(gelu),
            mlp_out: Linear::new(&k(3)?, f, d)?,
            ln_final: LayerNorm::new(d)?,
            output: Linear::lazy(&k(4)?, v)?.use_bias(false).build(d)?,
        };
        let vars = model.variables();
        if vars.len() != init.params.len() {
            return Err(Error::Value(format!(
                "the layers hold {} variables, W9 has {} parameters",
                vars.len(),
                init.params.len()
            )));
        }
        // Each value reshaped to its variable's layout (the attention
        // kernels: [d, d] as [d, heads, head_dim] or [heads, head_dim, d]).
        for (var, value) in vars.iter().zip(&init.params) {
            var.assign(&value.tensor()?.reshape(var.dims())?)?;
        }
        Ok(model)
    }

    /// The mean next-token cross-entropy of `tokens` `[B, T]` against
    /// `targets` `[B, T]`.
    pub fn loss(&self, tokens: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let mode = Mode::training();
        let x = self
            .token
            .call(tokens, &mode)?
            .add(&self.position.try_read()?)?;
        let h = self.ln1.call(&x, &mode)?;
        let a = self
            .attention
            .call_qkv(&h, &h, &h, &AttentionOptions::causal(), &mode)?;
        let x = x.add(&a)?;
        let h = self.ln2.call(&x, &mode)?;
        let h = self.mlp_out.call(&self.mlp_in.call(&h, &mode)?, &mode)?;
        let x = x.add(&h)?;
        let logits = self.output.call(&self.ln_final.call(&x, &mode)?, &mode)?;
        nn::sparse_softmax_cross_entropy_with_logits(
            &targets.reshape(&[W9_B * W9_T])?,
            &logits.reshape(&[W9_B * W9_T, W9_V])?,
        )?
        .reduce_mean(&[], false)
    }
}

/// The W9 block with layers, its initial values kept for `update_l1`, and
/// W9's data on the device.
#[derive(Clone)]
pub struct LayersModel {
    pub model: Arc<W9Layers>,
    pub init: Arc<Init>,
    pub data: (Tensor, Tensor),
}

impl LayersModel {
    pub fn new() -> Result<LayersModel> {
        let init = Arc::new(init(Workload::W9));
        let model = Arc::new(W9Layers::new(&init)?);
        let data = (init.data[0].tensor()?, init.data[1].tensor()?);
        Ok(LayersModel { model, init, data })
    }

    /// The training step, as W9's: forward, gradients and TensorFlow's
    /// Adam (learning rate 3e-3) updating the variables in place, one
    /// compiled program; Adam's slots made first, so it traces once.
    pub fn train_step(&self) -> Result<Function<(Tensor, Tensor), Tensor>> {
        let adam = Arc::new(Adam::new(Workload::W9.learning_rate()));
        let vars = self.model.trainable_variables();
        adam.build(&vars)?;
        let model = self.model.clone();
        Ok(function(move |a: Tensor, b: Tensor| -> Result<Tensor> {
            adam.minimize(&vars, || model.loss(&a, &b))
        }))
    }

    /// The loss alone, compiled.
    pub fn forward(&self) -> Function<(Tensor, Tensor), Tensor> {
        let model = self.model.clone();
        function(move |a: Tensor, b: Tensor| model.loss(&a, &b))
    }

    /// `sum |p - p0|` over all parameters, as `Model::update_l1`.
    pub fn update_l1(&self) -> Result<f64> {
        let mut total = 0.0;
        for (v, p0) in self.model.variables().iter().zip(&self.init.params) {
            let now = v.try_read()?.to_vec::<f32>()?;
            total += now
                .iter()
                .zip(p0.f32s())
                .map(|(a, b)| (f64::from(*a) - f64::from(*b)).abs())
                .sum::<f64>();
        }
        Ok(total)
    }
}
