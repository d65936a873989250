//! A small character-level GPT on Cicero's *De finibus*, Book I
//! (`data/cicero`), shared by `examples/gpt.rs` and `tests/gpt_example.rs`.
//!
//! The model is built from `nn::layers`: token and position
//! [`Embedding`]s, pre-LN decoder blocks (a [`LayerNorm`], causal
//! [`MultiHeadAttention`], a residual [`Dropout`]; a `LayerNorm`, a
//! [`Linear`] to 4x width with GELU, a `Linear` back, dropout), a final
//! `LayerNorm` and logits tied to the token table ([`Embedding::attend`]).
//! Weights are float32; the blocks compute in bfloat16 (see
//! [`Precision`], a mixed-precision `Policy`). Training is AdamW on a warmup-cosine schedule with
//! gradient clipping by global norm, one compiled program per step whose
//! dropout key is folded from the step number, so a run restored from a
//! checkpoint at step N draws the same masks as the uninterrupted one.
//! Generation prefills a prompt into one [`KvCache`] per block and decodes
//! in a `for_range`, all inside one compiled function.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xlafn::checkpoint;
use xlafn::data::{Dataset, Placement};
use xlafn::module::Module;
use xlafn::nn::layers::{
    Activation, AttentionOptions, Dropout, Embedding, KvCache, Layer, LayerNorm, Linear, Mode,
    MultiHeadAttention,
};
use xlafn::nn::losses::{CrossEntropy, sparse_categorical_cross_entropy};
use xlafn::nn::mixed_precision::Policy;
use xlafn::optimizers::{CosineDecay, GradientClip};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;
use xlafn::train::{CheckpointEvery, Metrics, Progress, TrainPosition, Trainer};
use xlafn::{initializers::Initializer, random};

const TEXT_SHA256: &str = "3a8b53b29465c55f000a4985191e434cf202546943b81cc819c63c68a296c18d";

/// The text as character ids, with its vocabulary (the distinct
/// characters, sorted). The first 90% trains, the rest is held out.
pub struct Corpus {
    pub chars: Vec<char>,
    pub ids: Vec<i32>,
    /// Where the held-out part starts.
    pub split: usize,
}

impl Corpus {
    /// `data/cicero/de_finibus_1.txt`, checked against its digest.
    pub fn load() -> Result<Corpus> {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/cicero/de_finibus_1.txt");
        let bytes = std::fs::read(path).map_err(|e| Error::Value(format!("{path}: {e}")))?;
        let digest: String = Sha256::digest(&bytes)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        if digest != TEXT_SHA256 {
            return Err(Error::Value(format!("{path} is damaged (sha256 {digest})")));
        }
        let text = String::from_utf8(bytes).map_err(|e| Error::Value(format!("{path}: {e}")))?;
        Ok(Corpus::from_text(&text))
    }

    /// A corpus of `text`, its vocabulary its characters.
    pub fn from_text(text: &str) -> Corpus {
        let mut chars: Vec<char> = text.chars().collect();
        chars.sort_unstable();
        chars.dedup();
        let ids: Vec<i32> = text
            .chars()
            .map(|c| chars.binary_search(&c).expect("from the text") as i32)
            .collect();
        let split = ids.len() * 9 / 10;
        Corpus { chars, ids, split }
    }

    /// The number of distinct characters.
    pub fn vocab(&self) -> i64 {
        self.chars.len() as i64
    }

    /// The ids of `s`; a character the text lacks is an error.
    pub fn encode(&self, s: &str) -> Result<Vec<i32>> {
        s.chars()
            .map(|c| {
                self.chars
                    .binary_search(&c)
                    .map(|i| i as i32)
                    .map_err(|_| Error::Value(format!("{c:?} is not in the vocabulary")))
            })
            .collect()
    }

    /// The text of `ids`.
    pub fn decode(&self, ids: &[i32]) -> String {
        ids.iter()
            .map(|&i| self.chars.get(i as usize).copied().unwrap_or('?'))
            .collect()
    }

    /// Batch `index` of `batch` windows of `context` characters and the
    /// characters that follow each (`[batch, context]` inputs and
    /// targets, i32), from the training part, or the held-out part when
    /// `held_out`. The windows depend on `index` alone (an LCG of it), so
    /// a resumed run sees the batches the uninterrupted one saw.
    pub fn batch(
        &self,
        index: u64,
        batch: i64,
        context: i64,
        held_out: bool,
    ) -> Result<(Tensor, Tensor)> {
        let (x, y) = self.host_batch(index, batch, context, held_out)?;
        Ok((
            Tensor::from_host_bytes(x.dtype, &x.dims, &x.bytes)?,
            Tensor::from_host_bytes(y.dtype, &y.dims, &y.bytes)?,
        ))
    }

    /// [`batch`](Corpus::batch) on the host (what the input pipeline
    /// builds on its thread).
    pub fn host_batch(
        &self,
        index: u64,
        batch: i64,
        context: i64,
        held_out: bool,
    ) -> Result<(HostArray, HostArray)> {
        let (lo, hi) = if held_out {
            (self.split, self.ids.len())
        } else {
            (0, self.split)
        };
        let span = (hi - lo)
            .checked_sub(context as usize + 1)
            .filter(|s| *s > 0)
            .ok_or_else(|| Error::Value(format!("the text is shorter than {context} + 1")))?;
        let mut s = index
            .wrapping_add(u64::from(held_out) << 40)
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for _ in 0..batch {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let at = lo + ((s >> 33) as usize) % span;
            x.extend_from_slice(&self.ids[at..at + context as usize]);
            y.extend_from_slice(&self.ids[at + 1..at + 1 + context as usize]);
        }
        Ok((
            HostArray::from_vec(x, &[batch, context]),
            HostArray::from_vec(y, &[batch, context]),
        ))
    }
}

/// Mixed precision, in one place: a [`Policy`] every layer is given
/// (Keras' `mixed_bfloat16`: float32 variables, the layers computing in
/// bfloat16, normalization statistics and softmax in float32), and
/// float32 logits for the loss.
#[derive(Clone, Copy, Debug)]
pub struct Precision {
    pub policy: Policy,
}

impl Precision {
    /// bfloat16 compute, float32 variables.
    pub fn mixed_bf16() -> Precision {
        Precision {
            policy: Policy::mixed_bfloat16(),
        }
    }

    /// Everything in float32.
    pub fn float32() -> Precision {
        Precision {
            policy: Policy::float32(),
        }
    }

    /// The dtype the blocks compute in.
    pub fn compute(&self) -> DType {
        self.policy.compute_dtype()
    }

    /// `x` in the compute dtype.
    fn activations(&self, x: &Tensor) -> Result<Tensor> {
        cast(x, self.compute())
    }

    /// `logits` in float32.
    fn logits(&self, logits: &Tensor) -> Result<Tensor> {
        cast(logits, DType::F32)
    }
}

fn cast(x: &Tensor, dtype: DType) -> Result<Tensor> {
    if x.dtype() == dtype {
        Ok(x.clone())
    } else {
        x.cast(dtype)
    }
}

/// The model's sizes.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub vocab: i64,
    /// The longest sequence (the position table's rows, the caches'
    /// length).
    pub context: i64,
    pub d_model: i64,
    pub heads: i64,
    pub layers: usize,
    pub dropout: f64,
    pub precision: Precision,
}

/// One pre-LN decoder block: `x + drop(attn(ln1(x)))`, then `x +
/// drop(mlp(ln2(x)))`.
#[derive(Module)]
pub struct Block {
    pub ln1: LayerNorm,
    pub attn: MultiHeadAttention,
    pub ln2: LayerNorm,
    pub fc: Linear,
    pub proj: Linear,
    pub drop: Dropout,
}

impl Block {
    fn new(key: &Tensor, cfg: &Config) -> Result<Block> {
        let d = cfg.d_model;
        let k = |i: u32| random::fold_in(key, &Tensor::scalar(i));
        let policy = cfg.precision.policy;
        let attn = MultiHeadAttention::new(&k(0)?, cfg.heads, d / cfg.heads)?
            .dropout(cfg.dropout)?
            .dtype_policy(policy);
        // Float32 weights, made now (a restore must find them, and the
        // decoding loop's body cannot create them).
        attn.build(d, d, d, DType::F32)?;
        Ok(Block {
            ln1: LayerNorm::new(d)?.dtype_policy(policy)?,
            attn,
            ln2: LayerNorm::new(d)?.dtype_policy(policy)?,
            fc: Linear::new(&k(1)?, d, 4 * d)?
                .activation(Activation::Gelu { approximate: true })
                .dtype_policy(policy),
            proj: Linear::new(&k(2)?, 4 * d, d)?.dtype_policy(policy),
            drop: Dropout::new(cfg.dropout)?,
        })
    }

    /// The block over a whole sequence, causally masked.
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let h = self.ln1.call(x, mode)?;
        let a = self
            .attn
            .call_qkv(&h, &h, &h, &AttentionOptions::causal(), &mode.child(0)?)?;
        let x = x.add(&self.drop.call(&a, &mode.child(1)?)?)?;
        let m = self.mlp(&self.ln2.call(&x, mode)?)?;
        x.add(&self.drop.call(&m, &mode.child(2)?)?)
    }

    /// The block over the newest positions, attending through `cache`
    /// (inference).
    fn call_cached(&self, x: &Tensor, cache: &KvCache) -> Result<(Tensor, KvCache)> {
        let inference = Mode::inference();
        let h = self.ln1.call(x, &inference)?;
        let (a, cache) = self.attn.call_cached(&h, cache, &inference)?;
        let x = x.add(&a)?;
        let m = self.mlp(&self.ln2.call(&x, &inference)?)?;
        Ok((x.add(&m)?, cache))
    }

    fn mlp(&self, x: &Tensor) -> Result<Tensor> {
        self.proj.forward(&self.fc.forward(x)?)
    }
}

/// The GPT: variables `tokens.embeddings`, `positions.embeddings`,
/// `blocks.<i>.{ln1,attn,ln2,fc,proj}...`, `ln_f.{gamma,beta}`.
#[derive(Module)]
pub struct Gpt {
    pub tokens: Embedding,
    pub positions: Embedding,
    pub blocks: Vec<Block>,
    pub ln_f: LayerNorm,
    pub drop: Dropout,
    #[module(skip)]
    pub cfg: Config,
}

impl Gpt {
    /// A model of `cfg` with every weight made now, drawn from `seed`
    /// (embeddings from GPT-2's normal of standard deviation 0.02, the
    /// rest from the layers' Keras defaults).
    pub fn new(cfg: Config, seed: u64) -> Result<Gpt> {
        if cfg.layers < 1 || cfg.d_model % cfg.heads != 0 {
            return Err(Error::Value(format!(
                "a GPT needs at least one block and heads dividing d_model, got {cfg:?}"
            )));
        }
        let key = random::key(seed)?;
        let k = |i: u32| random::fold_in(&key, &Tensor::scalar(i));
        let table = |i: u32, rows: i64| {
            Embedding::with_initializer(
                &k(i)?,
                rows,
                cfg.d_model,
                Initializer::Normal(0.02),
                DType::F32,
            )
        };
        Ok(Gpt {
            tokens: table(0, cfg.vocab)?,
            positions: table(1, cfg.context)?,
            blocks: (0..cfg.layers)
                .map(|i| Block::new(&k(10 + i as u32)?, &cfg))
                .collect::<Result<_>>()?,
            ln_f: LayerNorm::new(cfg.d_model)?.dtype_policy(cfg.precision.policy)?,
            drop: Dropout::new(cfg.dropout)?,
            cfg,
        })
    }

    /// Token plus position embeddings of `ids` `[batch, t]` at positions
    /// `start..start + t` (`start` an i32 scalar), in the compute dtype.
    fn embed(&self, ids: &Tensor, start: &Tensor, mode: &Mode) -> Result<Tensor> {
        let t = ids.dims()[1];
        let positions = Tensor::iota(&[1, t], 1, DType::I32)?.add(start)?;
        let x = self
            .tokens
            .forward(ids)?
            .add(&self.positions.forward(&positions)?)?;
        let x = self.drop.call(&x, mode)?;
        self.cfg.precision.activations(&x)
    }

    /// Float32 logits from the last block's output.
    fn head(&self, x: &Tensor) -> Result<Tensor> {
        let x = self.ln_f.forward(x)?;
        self.cfg.precision.logits(&self.tokens.attend(&x)?)
    }

    /// Logits `[batch, t, vocab]` (float32) for ids `[batch, t]`, `t` at
    /// most the context; dropout in a training `mode` with a key.
    pub fn logits(&self, ids: &Tensor, mode: &Mode) -> Result<Tensor> {
        let t = ids.dims().get(1).copied().unwrap_or(0);
        if ids.rank() != 2 || t > self.cfg.context {
            return Err(Error::Value(format!(
                "ids must be [batch, t <= {}], got {}",
                self.cfg.context,
                ids.tensor_type()
            )));
        }
        let mut x = self.embed(ids, &Tensor::scalar(0i32), &mode.child(0)?)?;
        for (i, block) in self.blocks.iter().enumerate() {
            x = block.call(&x, &mode.child(i as u64 + 1)?)?;
        }
        self.head(&x)
    }

    /// The mean cross-entropy of next-character prediction.
    pub fn loss(&self, x: &Tensor, y: &Tensor, mode: &Mode) -> Result<Tensor> {
        let logits = self.logits(x, mode)?;
        sparse_categorical_cross_entropy(y, &logits, CrossEntropy::new().from_logits(true))
    }

    /// One empty cache per block for `batch` sequences of up to the
    /// context, in the compute dtype.
    pub fn empty_caches(&self, batch: i64) -> Result<Vec<KvCache>> {
        self.blocks
            .iter()
            .map(|b| {
                b.attn
                    .empty_cache(batch, self.cfg.context, self.cfg.precision.compute())
            })
            .collect()
    }

    /// Runs ids `[batch, t]` (the next `t` positions) through the caches;
    /// returns the float32 logits of the last position `[batch, vocab]`
    /// and the caches with `t` more positions.
    pub fn logits_cached(
        &self,
        ids: &Tensor,
        caches: &[KvCache],
    ) -> Result<(Tensor, Vec<KvCache>)> {
        let start = caches
            .first()
            .ok_or_else(|| Error::Value("one cache per block".into()))?
            .length
            .cast(DType::I32)?;
        let mut x = self.embed(ids, &start, &Mode::inference())?;
        let mut next = Vec::with_capacity(caches.len());
        for (block, cache) in self.blocks.iter().zip(caches) {
            let (y, c) = block.call_cached(&x, cache)?;
            x = y;
            next.push(c);
        }
        let dims = x.dims();
        let last = x.slice(&[0, dims[1] - 1, 0], &[dims[0], 1, dims[2]])?;
        let logits = self.head(&last)?.reshape(&[dims[0], self.cfg.vocab])?;
        Ok((logits, next))
    }
}

/// How a run trains.
#[derive(Clone, Copy, Debug)]
pub struct Training {
    pub steps: usize,
    pub batch: i64,
    pub warmup: usize,
    pub peak_rate: f64,
    pub weight_decay: f64,
    pub clip_norm: f64,
    /// Seeds the dropout keys (folded with each step number).
    pub seed: u64,
}

/// AdamW (beta2 0.99, as small character models use) on a linear warmup
/// to the peak rate and a cosine decay to zero at the last step; weight
/// decay spares biases, norm scales and offsets and the embeddings; all
/// gradients clipped together to a global norm.
pub fn optimizer(t: &Training) -> Result<Adam> {
    let decay_steps = t.steps.saturating_sub(t.warmup).max(1) as i64;
    let schedule =
        CosineDecay::new(0.0, decay_steps)?.warmup(t.peak_rate, t.warmup.max(1) as i64)?;
    Ok(AdamW::new(schedule)
        .beta2(0.99)
        .weight_decay(t.weight_decay)
        .exclude_from_weight_decay_names(&["bias", "gamma", "beta", "embeddings"])
        .clip(GradientClip::GlobalNorm(t.clip_norm)))
}

/// The compiled training step: `(inputs, targets, step) -> loss`, the
/// dropout key `fold_in(key(seed), step)`.
pub type TrainStep = Function<(Tensor, Tensor, Tensor), Tensor>;

pub fn train_step(model: &Arc<Gpt>, opt: &Arc<Adam>, seed: u64) -> Result<TrainStep> {
    let (model, opt) = (model.clone(), opt.clone());
    let base = random::key(seed)?;
    Ok(function(
        move |x: Tensor, y: Tensor, step: Tensor| -> Result<Tensor> {
            let mode = Mode::training_with_key(&random::fold_in(&base, &step)?);
            opt.minimize(&model.trainable_variables(), || model.loss(&x, &y, &mode))
        },
    ))
}

/// The training batches of steps `steps`, as a pipeline: each example is
/// batch `i` (inputs, targets) and the step number `i` (the dropout key's
/// fold), built and uploaded on the pipeline's thread two steps ahead.
pub fn batches(
    corpus: &Arc<Corpus>,
    t: &Training,
    context: i64,
    steps: std::ops::Range<usize>,
) -> Dataset<(Tensor, Tensor, Tensor)> {
    let (corpus, batch) = (corpus.clone(), t.batch);
    Dataset::range(steps.start as i64, steps.end as i64)
        .map(move |i| {
            let (x, y) = corpus.host_batch(i as u64, batch, context, false)?;
            Ok((x, y, HostArray::from_vec(vec![i as i32], &[])))
        })
        .prefetch_to_device(2, Placement::Default)
}

/// Where a run's progress and metrics go.
#[derive(Clone, Debug, Default)]
pub struct RunOutputs {
    /// The progress bar (on a terminal, or off).
    pub progress: Progress,
    /// TensorBoard event files and `loss.svg` go here, if set.
    pub dir: Option<PathBuf>,
}

impl RunOutputs {
    /// No bar, no files (tests).
    pub fn quiet() -> RunOutputs {
        RunOutputs {
            progress: Progress::Off,
            dir: None,
        }
    }
}

/// Runs `step` over the pipeline of steps `from..t.steps` (one epoch of
/// it, as the [`Trainer`] counts), with `callbacks`; returns the losses.
fn fit(
    step: TrainStep,
    corpus: &Arc<Corpus>,
    model: &Gpt,
    t: &Training,
    from: TrainPosition,
    outputs: &RunOutputs,
    callbacks: Vec<CheckpointEvery>,
) -> Result<Vec<f32>> {
    let data = batches(corpus, t, model.cfg.context, 0..t.steps);
    let mut trainer = Trainer::new(move |(x, y, i): (Tensor, Tensor, Tensor)| {
        Ok(Metrics::loss(step.call((&x, &y, &i))?))
    })
    .resume_from(from)
    .progress(outputs.progress);
    for c in callbacks {
        trainer = trainer.callback(c);
    }
    if let Some(dir) = &outputs.dir {
        trainer = trainer.tensorboard(dir)?.loss_curve(dir.join("loss.svg"));
    }
    let history = trainer.fit(&data)?;
    Ok(history.steps.iter().map(|&(_, loss)| loss as f32).collect())
}

/// The mean loss over `batches` held-out batches, in inference.
pub fn held_out_loss(model: &Arc<Gpt>, corpus: &Corpus, batch: i64, batches: u64) -> Result<f32> {
    let eval = {
        let model = model.clone();
        function(move |x: Tensor, y: Tensor| model.loss(&x, &y, &Mode::inference()))
    };
    let mut sum = 0.0;
    for i in 0..batches {
        let (x, y) = corpus.batch(i, batch, model.cfg.context, true)?;
        sum += eval.call((x, y))?.item::<f32>()?;
    }
    Ok(sum / batches as f32)
}

/// The two trajectories of [`resume`].
pub struct Resumed {
    /// The losses of every step of the uninterrupted run.
    pub straight: Vec<f32>,
    /// The losses of the steps after the checkpoint, by fresh objects
    /// restored from it.
    pub resumed: Vec<f32>,
    /// Where the checkpoint was taken.
    pub at: usize,
    /// The checkpoint file (model and optimizer) taken at step `at`.
    pub checkpoint: PathBuf,
    /// The model that trained straight through.
    pub model: Arc<Gpt>,
    /// The restored one, after its steps.
    pub restored: Arc<Gpt>,
}

/// Trains `t.steps` steps from `seed` with the [`Trainer`], which saves
/// the model and optimizer (`checkpoint::save_training`) and the position
/// into `dir` at step `at`; then restores that checkpoint into a model
/// made from another seed and a new optimizer, and resumes the run from
/// its position to the end.
pub fn resume(
    corpus: &Corpus,
    cfg: Config,
    t: &Training,
    seed: u64,
    at: usize,
    dir: &Path,
    outputs: &RunOutputs,
) -> Result<Resumed> {
    let corpus = Arc::new(Corpus {
        chars: corpus.chars.clone(),
        ids: corpus.ids.clone(),
        split: corpus.split,
    });
    let model = Arc::new(Gpt::new(cfg, seed)?);
    let opt = Arc::new(optimizer(t)?);
    let save = {
        let (model, opt) = (model.clone(), opt.clone());
        move |path: &Path| checkpoint::save_training(&*model, &*opt, path)
    };
    let every = CheckpointEvery::new(at.max(1) as u64, dir, save).keep(usize::MAX);
    let step = train_step(&model, &opt, t.seed)?;
    let straight = fit(
        step,
        &corpus,
        &model,
        t,
        TrainPosition::default(),
        outputs,
        vec![every],
    )?;

    let checkpoint = dir.join(format!("ckpt-{at}.safetensors"));
    let position = TrainPosition::read(checkpoint.with_extension("json"))?;
    let restored = Arc::new(Gpt::new(cfg, seed + 1)?);
    let opt2 = Arc::new(optimizer(t)?);
    checkpoint::restore_training(&*restored, &*opt2, &checkpoint)?;
    let step2 = train_step(&restored, &opt2, t.seed)?;
    let resumed = fit(
        step2,
        &corpus,
        &restored,
        t,
        position,
        &RunOutputs::quiet(),
        vec![],
    )?;
    Ok(Resumed {
        straight,
        resumed,
        at,
        checkpoint,
        model,
        restored,
    })
}

/// How the next token is chosen.
#[derive(Clone, Copy, Debug)]
pub enum Sampling {
    /// The most likely.
    Greedy,
    /// Drawn from the softmax of the `k` largest logits divided by
    /// `temperature`.
    TopK { k: i64, temperature: f64 },
}

/// The token `[batch]` (i32) chosen from `logits` `[batch, vocab]`,
/// drawing (top-k) with `fold_in(key, i)`.
fn choose(logits: &Tensor, sampling: Sampling, key: &Tensor, i: &Tensor) -> Result<Tensor> {
    match sampling {
        Sampling::Greedy => logits.argmax(-1)?.cast(DType::I32),
        Sampling::TopK { k, temperature } => {
            let (values, indices) = logits.div_scalar(temperature)?.top_k(k, true)?;
            let pick = random::categorical(&random::fold_in(key, i)?, &values, 1)?;
            indices.take_along_axis(&pick, -1)?.squeeze(&[-1])
        }
    }
}

/// The compiled generator: `(prompt [1, p], key) -> [new_tokens]` i32.
/// One program prefills the prompt into the caches and decodes the rest
/// in a `for_range` (one while loop, traced once).
pub type Generator = Function<(Tensor, Tensor), Tensor>;

pub fn generator(model: &Arc<Gpt>, new_tokens: i64, sampling: Sampling) -> Generator {
    let model = model.clone();
    function(move |prompt: Tensor, key: Tensor| -> Result<Tensor> {
        let p = prompt.dims().get(1).copied().unwrap_or(0);
        if prompt.rank() != 2 || prompt.dims()[0] != 1 || p < 1 || new_tokens < 1 {
            return Err(Error::Value(format!(
                "a prompt [1, p >= 1] and new_tokens >= 1, got {} and {new_tokens}",
                prompt.tensor_type()
            )));
        }
        // The prompt and every new token but the last enter the caches.
        if p + new_tokens - 1 > model.cfg.context {
            return Err(Error::Value(format!(
                "{p} prompt + {new_tokens} new tokens exceed the context of {}",
                model.cfg.context
            )));
        }
        let (logits, caches) = model.logits_cached(&prompt, &model.empty_caches(1)?)?;
        let first = choose(&logits, sampling, &key, &Tensor::scalar(0i64))?;
        let out = TensorArray::new(DType::I32, new_tokens)
            .with_element_shape(&[1])?
            .write(0i64, &first)?;
        let (_, _, out) = for_range(
            1i64,
            new_tokens,
            1i64,
            (first, caches, out),
            |i, (token, caches, out): (Tensor, Vec<KvCache>, TensorArray)| -> Result<_> {
                let (logits, caches) = model.logits_cached(&token.reshape(&[1, 1])?, &caches)?;
                let next = choose(&logits, sampling, &key, &i)?;
                let out = out.write(&i, &next)?;
                Ok((next, caches, out))
            },
        )?;
        out.stack()?.reshape(&[new_tokens])
    })
}
