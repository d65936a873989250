//! W13: a GPT-style training step written with the layer library: token
//! and learned position `Embedding`s, two pre-LayerNorm decoder blocks
//! (`LayerNorm`, causal `MultiHeadAttention`, residual `Dropout`;
//! `LayerNorm`, a `Linear` to the MLP width with the tanh GELU, a `Linear`
//! back, residual `Dropout`), a final `LayerNorm` and logits tied to the
//! token table (`Embedding::attend`), the mean next-token cross-entropy.
//! Vocabulary 256, sequence 64, batch 8, width 128, 4 heads, MLP 512.
//!
//! Training is one compiled step: AdamW (beta2 0.95, epsilon 1e-7) on
//! Keras 3's `CosineDecay` with a warmup (from 3e-4 to the peak 3e-3 over
//! 10 steps, then a cosine to 0 over 1000), weight decay 0.1 on the
//! matrices only (biases, norms and the embeddings are excluded by name
//! with `exclude_from_weight_decay_names`), all gradients clipped to a
//! global norm of 1, and dropout 0.1 whose key is folded from the step
//! number (a counter variable the step advances, so one compiled program
//! draws new masks every call).
//!
//! The warmup starts at a tenth of the peak rather than at 0 so that the
//! first update moves the weights: the three losses the peers are checked
//! on then cover two real AdamW updates, at different rates and bias
//! corrections.
//!
//! Parameters and data are drawn as `bench/peers_models.py` draws them
//! (numpy's `RandomState(13)`, reimplemented by `real_models::NpRandom`):
//! the token table `[V, D]` and the position table `[T, D]` from
//! N(0, 0.02^2); per block LayerNorm 1 (gamma ones, beta zeros), the
//! query, key, value and output kernels (`[D, D]` matrices, in the
//! attention layer's `[D, heads, head_dim]` and `[heads, head_dim, D]`
//! layouts, the same values row-major) from N(0, 0.02^2), each followed by
//! its zero bias, LayerNorm 2, the MLP kernels `[D, F]` and `[F, D]` from
//! N(0, 0.02^2) with zero biases; the final LayerNorm; then the tokens
//! `[B, T + 1]`, the inputs their first `T` and the targets their last.
//!
//! Random bits differ between frameworks, so the losses are compared on a
//! step built with dropout rate 0 from the same parameters
//! (`W13::new(0.0)`); the timed step (`W13::new(W13_DROPOUT)`) uses 0.1,
//! in xlafn and in the peers alike.
//!
//! Its loss check found a silent wrong answer in the pinned XLA: XNNPACK
//! dots reused a variable's first value after a compiled step updated it
//! in place (the MLP's `proj` kernels, `[512, 512] x [512, 128]`; losses
//! drifted by 1.8e-2 by step 3). xlafn compiles without them since
//! (`CompileOptions::for_platform`).
//!
//! Requires the sibling module `real_models`.

#![allow(dead_code)]

use super::real_models::NpRandom;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn;
use xlafn::nn::layers::{
    Activation, AttentionOptions, Dropout, Embedding, Layer, LayerNorm, Linear, Mode,
    MultiHeadAttention,
};
use xlafn::optimizers::{Adam, CosineDecay, Optimizer};
use xlafn::prelude::*;
use xlafn::random;

/// Vocabulary, sequence, batch, width, heads, head width, MLP width,
/// blocks.
pub const W13_V: i64 = 256;
pub const W13_T: i64 = 64;
pub const W13_B: i64 = 8;
pub const W13_D: i64 = 128;
pub const W13_NH: i64 = 4;
pub const W13_DH: i64 = W13_D / W13_NH;
pub const W13_F: i64 = 512;
pub const W13_L: usize = 2;
/// The schedule: a warmup from `W13_START_RATE` to `W13_PEAK_RATE` over
/// `W13_WARMUP` steps, then a cosine to 0 over `W13_DECAY_STEPS`.
pub const W13_START_RATE: f64 = 3e-4;
pub const W13_PEAK_RATE: f64 = 3e-3;
pub const W13_WARMUP: i64 = 10;
pub const W13_DECAY_STEPS: i64 = 1000;
/// AdamW's beta2 (GPT-3's), weight decay, the global clipping norm, and
/// the timed step's dropout rate.
pub const W13_BETA2: f64 = 0.95;
pub const W13_WEIGHT_DECAY: f64 = 0.1;
pub const W13_CLIP_NORM: f64 = 1.0;
pub const W13_DROPOUT: f64 = 0.1;
/// The variables weight decay spares, by substring of their paths:
/// biases, the norms' scales and offsets, and the two embedding tables.
pub const W13_NO_DECAY: [&str; 4] = ["bias", "gamma", "beta", "embeddings"];

/// The first three losses of `bench/peers_models.py`'s `jax_jit` step
/// built with dropout rate 0 (TensorFlow's agree to about 2e-7).
pub const W13_PEER_LOSSES: [f64; 3] = [
    5.580_967_903_137_207,
    5.436_617_851_257_324,
    5.218_308_925_628_662,
];

/// The parameters, in the model's variable order (each with its
/// variable's dims), and the tokens, as host values drawn as the peers
/// draw them.
pub struct W13Init {
    pub params: Vec<(Vec<f32>, Vec<i64>)>,
    pub inputs: Vec<i32>,
    pub targets: Vec<i32>,
}

/// `np_models("W13")` of `bench/peers_models.py`.
pub fn w13_init() -> W13Init {
    let (v, t, b, d, nh, dh, f) = (W13_V, W13_T, W13_B, W13_D, W13_NH, W13_DH, W13_F);
    let mut rs = NpRandom::new(13);
    let zeros = |n: i64| vec![0.0f32; n as usize];
    let ones = |n: i64| vec![1.0f32; n as usize];
    let mut params = vec![
        (rs.randn(v * d, 0.02), vec![v, d]),
        (rs.randn(t * d, 0.02), vec![t, d]),
    ];
    for _block in 0..W13_L {
        params.push((ones(d), vec![d]));
        params.push((zeros(d), vec![d]));
        // Query, key, value: [D, heads, head_dim] and a [heads, head_dim]
        // bias; the output: [heads, head_dim, D] and a [D] bias.
        for _proj in 0..3 {
            params.push((rs.randn(d * d, 0.02), vec![d, nh, dh]));
            params.push((zeros(d), vec![nh, dh]));
        }
        params.push((rs.randn(d * d, 0.02), vec![nh, dh, d]));
        params.push((zeros(d), vec![d]));
        params.push((ones(d), vec![d]));
        params.push((zeros(d), vec![d]));
        params.push((rs.randn(d * f, 0.02), vec![d, f]));
        params.push((zeros(f), vec![f]));
        params.push((rs.randn(f * d, 0.02), vec![f, d]));
        params.push((zeros(d), vec![d]));
    }
    params.push((ones(d), vec![d]));
    params.push((zeros(d), vec![d]));
    let tokens = rs.randint(v as u32, b * (t + 1));
    let rows = tokens.chunks((t + 1) as usize);
    let inputs = rows
        .clone()
        .flat_map(|r| r[..t as usize].to_vec())
        .collect();
    let targets = rows.flat_map(|r| r[1..].to_vec()).collect();
    W13Init {
        params,
        inputs,
        targets,
    }
}

/// One pre-LN decoder block: `x + drop(attn(ln1(x)))`, then `x +
/// drop(proj(gelu(fc(ln2(x)))))`.
#[derive(Module)]
pub struct W13Block {
    pub ln1: LayerNorm,
    pub attn: MultiHeadAttention,
    pub ln2: LayerNorm,
    pub fc: Linear,
    pub proj: Linear,
    pub drop: Dropout,
}

impl W13Block {
    fn new(key: &Tensor, dropout: f64) -> Result<W13Block> {
        let (d, f) = (W13_D, W13_F);
        let k = |i: u32| random::fold_in(key, &Tensor::scalar(i));
        let attn = MultiHeadAttention::new(&k(0)?, W13_NH, W13_DH)?;
        attn.build(d, d, d, DType::F32)?;
        Ok(W13Block {
            ln1: LayerNorm::new(d)?,
            attn,
            ln2: LayerNorm::new(d)?,
            fc: Linear::new(&k(1)?, d, f)?.activation(Activation::Gelu { approximate: true }),
            proj: Linear::new(&k(2)?, f, d)?,
            drop: Dropout::new(dropout)?,
        })
    }

    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let h = self.ln1.call(x, mode)?;
        let a = self
            .attn
            .call_qkv(&h, &h, &h, &AttentionOptions::causal(), &mode.child(0)?)?;
        let x = x.add(&self.drop.call(&a, &mode.child(1)?)?)?;
        let m = self
            .proj
            .call(&self.fc.call(&self.ln2.call(&x, mode)?, mode)?, mode)?;
        x.add(&self.drop.call(&m, &mode.child(2)?)?)
    }
}

/// The GPT: variables `tokens.embeddings`, `positions.embeddings`,
/// `blocks.<i>.{ln1,attn,ln2,fc,proj}...`, `ln_f.{gamma,beta}`.
#[derive(Module)]
pub struct W13Model {
    pub tokens: Embedding,
    pub positions: Embedding,
    pub blocks: Vec<W13Block>,
    pub ln_f: LayerNorm,
}

impl W13Model {
    /// The model at `init`'s parameters, with residual dropout `dropout`:
    /// every weight made now, then assigned its drawn value.
    pub fn new(init: &W13Init, dropout: f64) -> Result<W13Model> {
        let key = random::key(13)?;
        let k = |i: u32| random::fold_in(&key, &Tensor::scalar(i));
        let model = W13Model {
            tokens: Embedding::new(&k(0)?, W13_V, W13_D)?,
            positions: Embedding::new(&k(1)?, W13_T, W13_D)?,
            blocks: (0..W13_L)
                .map(|i| W13Block::new(&k(10 + i as u32)?, dropout))
                .collect::<Result<_>>()?,
            ln_f: LayerNorm::new(W13_D)?,
        };
        let vars = model.variables();
        if vars.len() != init.params.len() {
            return Err(Error::Value(format!(
                "the model holds {} variables, W13 draws {}",
                vars.len(),
                init.params.len()
            )));
        }
        for (var, (values, dims)) in vars.iter().zip(&init.params) {
            var.assign(&Tensor::from_slice(values, dims)?)?;
        }
        Ok(model)
    }

    /// The mean next-token cross-entropy of `inputs` `[B, T]` against
    /// `targets` `[B, T]`, dropout drawn from `mode`'s key.
    ///
    /// The sequence fills the position table, so its rows are added as
    /// they are (no gather of `0..T`), as the peers add theirs.
    pub fn loss(&self, inputs: &Tensor, targets: &Tensor, mode: &Mode) -> Result<Tensor> {
        let mut x = self
            .tokens
            .call(inputs, mode)?
            .add(&self.positions.embeddings()?.try_read()?)?;
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.call(&x, &mode.child(i as u64)?)?;
        }
        let logits = self.tokens.attend(&self.ln_f.call(&x, mode)?)?;
        nn::sparse_softmax_cross_entropy_with_logits(
            &targets.reshape(&[W13_B * W13_T])?,
            &logits.reshape(&[W13_B * W13_T, W13_V])?,
        )?
        .reduce_mean(&[], false)
    }
}

/// W13's optimizer: AdamW on the warmup-cosine schedule, weight decay on
/// the matrices, global-norm clipping.
pub fn w13_optimizer() -> Result<Adam> {
    let schedule =
        CosineDecay::new(W13_START_RATE, W13_DECAY_STEPS)?.warmup(W13_PEAK_RATE, W13_WARMUP)?;
    Ok(AdamW::new(schedule)
        .beta2(W13_BETA2)
        .weight_decay(W13_WEIGHT_DECAY)
        .exclude_from_weight_decay_names(&W13_NO_DECAY)
        .clip(GradientClip::GlobalNorm(W13_CLIP_NORM)))
}

/// The W13 model with its data on the device and its step counter.
#[derive(Clone)]
pub struct W13 {
    pub model: Arc<W13Model>,
    pub inputs: Tensor,
    pub targets: Tensor,
    /// The number of steps taken (i32), which keys the dropout.
    pub step: Variable,
}

impl W13 {
    /// The model at W13's drawn parameters with residual dropout
    /// `dropout` (0 for the loss check, `W13_DROPOUT` timed).
    pub fn new(dropout: f64) -> Result<W13> {
        let init = w13_init();
        Ok(W13 {
            model: Arc::new(W13Model::new(&init, dropout)?),
            inputs: Tensor::from_slice(&init.inputs, &[W13_B, W13_T])?,
            targets: Tensor::from_slice(&init.targets, &[W13_B, W13_T])?,
            step: Variable::try_new(Tensor::try_scalar(0i32)?)?,
        })
    }

    /// The training step: the dropout key `fold_in(key(13), step)`, then
    /// forward, gradients and AdamW updating the variables in place, and
    /// the counter advanced; one compiled program returning the loss.
    /// AdamW's slots are made first, so it traces once.
    pub fn train_step(&self) -> Result<Function<(Tensor, Tensor), Tensor>> {
        let opt = Arc::new(w13_optimizer()?);
        let vars = self.model.trainable_variables();
        opt.build(&vars)?;
        let (model, counter) = (self.model.clone(), self.step.clone());
        let base = random::key(13)?;
        Ok(function(
            move |inputs: Tensor, targets: Tensor| -> Result<Tensor> {
                let n = counter.try_read()?;
                counter.assign_add(&Tensor::try_scalar(1i32)?)?;
                let mode = Mode::training_with_key(&random::fold_in(&base, &n)?);
                opt.minimize(&vars, || model.loss(&inputs, &targets, &mode))
            },
        ))
    }
}
