//! A small CNN for the 8x8 UCI digits (`data/digits`), shared by
//! `examples/cnn.rs` and `tests/cnn_digits.rs`: conv 3x3 (16) + relu +
//! 2x2 max pool, conv 3x3 (32) + relu + 2x2 max pool, dense 64 + relu +
//! dropout (a fresh key each step), dense 10; sparse softmax
//! cross-entropy; Adam on an exponentially decaying rate. The model is a
//! `#[derive(Module)]` struct with He-normal initial weights. One compiled
//! program per training step.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use xlafn::data::{Dataset, Placement};
use xlafn::module::Module;
use xlafn::optimizers::{Adam, ExponentialDecay, LearningRate, Optimizer};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;
use xlafn::train::{History, Metrics, Progress, Trainer};
use xlafn::{Padding, initializers, nn, random};

const DIGITS_SHA256: &str = "09f66e6debdee2cd2b5ae59e0d6abbb73fc2b0e0185d2e1957e9ebb51e23aa22";

/// Images as `[n, 8, 8, 1]` floats in [0, 1] and their labels.
pub struct Split {
    pub images: Vec<f32>,
    pub labels: Vec<i32>,
}

impl Split {
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Rows `rows` as a batch.
    pub fn batch(&self, rows: &[usize]) -> Result<(Tensor, Tensor)> {
        let mut x = Vec::with_capacity(rows.len() * 64);
        for &r in rows {
            x.extend_from_slice(&self.images[r * 64..r * 64 + 64]);
        }
        let y: Vec<i32> = rows.iter().map(|&r| self.labels[r]).collect();
        Ok((
            Tensor::from_vec(x, &[rows.len() as i64, 8, 8, 1])?,
            Tensor::from_vec(y, &[rows.len() as i64])?,
        ))
    }
}

/// A deterministic shuffle of `0..n` (Fisher-Yates over an LCG).
pub fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut order: Vec<usize> = (0..n).collect();
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    for i in (1..n).rev() {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let j = ((s >> 33) as usize) % (i + 1);
        order.swap(i, j);
    }
    order
}

/// The digits, checked against their digest, split 80/20 at random
/// (seeded) into training and held-out sets.
pub fn load_digits() -> Result<(Split, Split)> {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/data/digits/digits.csv.gz");
    let gz = std::fs::read(path).map_err(|e| Error::Value(format!("{path}: {e}")))?;
    let digest: String = Sha256::digest(&gz)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if digest != DIGITS_SHA256 {
        return Err(Error::Value(format!("{path} is damaged (sha256 {digest})")));
    }
    let mut text = String::new();
    flate2::read::GzDecoder::new(&gz[..])
        .read_to_string(&mut text)
        .map_err(|e| Error::Value(format!("{path}: {e}")))?;
    let rows: Vec<Vec<f32>> = text
        .lines()
        .map(|l| {
            l.split(',')
                .map(|v| v.trim().parse::<f32>().unwrap_or(f32::NAN))
                .collect()
        })
        .collect();
    if rows.len() != 1797
        || rows
            .iter()
            .any(|r| r.len() != 65 || r.iter().any(|v| !v.is_finite()))
    {
        return Err(Error::Value(format!("{path}: not 1797 rows of 65 numbers")));
    }
    let order = shuffled(rows.len(), 2024);
    let cut = rows.len() * 4 / 5;
    let split = |rs: &[usize]| Split {
        images: rs
            .iter()
            .flat_map(|&r| rows[r][..64].iter().map(|v| v / 16.0))
            .collect(),
        labels: rs.iter().map(|&r| rows[r][64] as i32).collect(),
    };
    Ok((split(&order[..cut]), split(&order[cut..])))
}

/// The compiled training step: `(images, labels, key) -> loss`.
pub type TrainStep = Function<(Tensor, Tensor, Tensor), Tensor>;

/// A layer's weights: a convolution or dense kernel and its bias.
#[derive(Clone, Module)]
pub struct Layer {
    pub kernel: Variable,
    pub bias: Variable,
}

impl Layer {
    /// He-normal kernel of `dims` (Keras' `he_normal`: fans from the
    /// kernel's shape) drawn with `key`, and a zero bias.
    fn new(key: &Tensor, dims: &[i64]) -> Result<Layer> {
        let out = dims[dims.len() - 1];
        Ok(Layer {
            kernel: Variable::try_new(initializers::he_normal(key, dims, DType::F32)?)?,
            bias: Variable::try_new(initializers::zeros(&[out], DType::F32)?)?,
        })
    }
}

/// The model: its variables are named `conv1.kernel`, `conv1.bias`, ...,
/// `dense2.bias` (the names its checkpoints use).
#[derive(Clone, Module)]
pub struct Cnn {
    pub conv1: Layer,
    pub conv2: Layer,
    pub dense1: Layer,
    pub dense2: Layer,
}

impl Cnn {
    pub fn new(seed: u64) -> Result<Cnn> {
        let keys = random::split(&random::key(seed)?, 4)?;
        let key = |i| random::nth(&keys, i);
        Ok(Cnn {
            conv1: Layer::new(&key(0)?, &[3, 3, 1, 16])?,
            conv2: Layer::new(&key(1)?, &[3, 3, 16, 32])?,
            dense1: Layer::new(&key(2)?, &[128, 64])?,
            dense2: Layer::new(&key(3)?, &[64, 10])?,
        })
    }

    /// The variables in `logits_with`'s order (declaration order).
    pub fn params(&self) -> Vec<Variable> {
        self.variables()
    }

    /// Logits `[batch, 10]` for images `[batch, 8, 8, 1]`; with a key,
    /// dropout (rate 0.2) on the dense layer, as in training.
    pub fn logits(&self, x: &Tensor, dropout_key: Option<&Tensor>) -> Result<Tensor> {
        let p: Vec<Tensor> = self.params().iter().map(Variable::read).collect();
        logits_with(&p, x, dropout_key)
    }

    /// The compiled training step: `(images, labels, key) -> loss`.
    pub fn train_step(&self, optimizer: Arc<Adam>) -> TrainStep {
        let model = self.clone();
        function(move |x: Tensor, y: Tensor, key: Tensor| -> Result<Tensor> {
            optimizer.minimize(&model.trainable_variables(), || {
                let logits = model.logits(&x, Some(&key))?;
                nn::sparse_softmax_cross_entropy_with_logits(&y, &logits)?.reduce_mean(&[], false)
            })
        })
    }

    /// The evaluation step: a batch's mean loss and accuracy, without
    /// dropout.
    pub fn eval_step(&self) -> impl FnMut((Tensor, Tensor)) -> Result<Metrics> + 'static {
        let model = self.clone();
        let eval = function(move |x: Tensor, y: Tensor| -> Result<(Tensor, Tensor)> {
            let logits = model.logits(&x, None)?;
            let loss = nn::sparse_softmax_cross_entropy_with_logits(&y, &logits)?
                .reduce_mean(&[], false)?;
            let right = logits
                .argmax(-1)?
                .cast(DType::I32)?
                .eq(&y)?
                .cast(DType::F32)?;
            Ok((loss, right.reduce_mean(&[], false)?))
        });
        move |(x, y)| {
            let (loss, accuracy) = eval.call((&x, &y))?;
            Ok(Metrics::new().with("loss", loss).with("accuracy", accuracy))
        }
    }

    /// The fraction of `split` classified right.
    pub fn accuracy(&self, split: &Split) -> Result<f64> {
        let rows: Vec<usize> = (0..split.len()).collect();
        let (x, y) = split.batch(&rows)?;
        let predicted = self.logits(&x, None)?.argmax(-1)?.to_vec::<i64>()?;
        let labels = y.to_vec::<i32>()?;
        let right = predicted
            .iter()
            .zip(&labels)
            .filter(|(p, l)| **p == **l as i64)
            .count();
        Ok(right as f64 / labels.len() as f64)
    }
}

/// The forward pass on parameter tensors `p` (in `Cnn::params` order).
pub fn logits_with(p: &[Tensor], x: &Tensor, dropout_key: Option<&Tensor>) -> Result<Tensor> {
    let block = |h: &Tensor, k: &Tensor, b: &Tensor| -> Result<Tensor> {
        h.conv2d(k, [1, 1], Padding::Same, [1, 1])?
            .add(b)?
            .relu()?
            .max_pool(&[2, 2], &[2, 2], Padding::Valid)
    };
    let h = block(x, &p[0], &p[1])?;
    let h = block(&h, &p[2], &p[3])?;
    let batch = h.dims()[0];
    let h = h
        .reshape(&[batch, 128])?
        .matmul(&p[4])?
        .add(&p[5])?
        .relu()?;
    let h = match dropout_key {
        Some(key) => random::dropout(&h, 0.2, key)?,
        None => h,
    };
    h.matmul(&p[6])?.add(&p[7])
}

/// A split as a pipeline: its examples shuffled anew each epoch (when
/// `shuffle_seed` is given), batches of `batch` (a last partial batch
/// dropped, so the step keeps one shape), built and uploaded two batches
/// ahead on the pipeline's thread.
pub fn pipeline(
    split: &Split,
    batch: usize,
    shuffle_seed: Option<u64>,
) -> Result<Dataset<(Tensor, Tensor)>> {
    let n = split.len() as i64;
    let images = HostArray::from_vec(split.images.clone(), &[n, 8, 8, 1]);
    let labels = HostArray::from_vec(split.labels.clone(), &[n]);
    let mut examples = Dataset::from_tensor_slices((images, labels))?;
    if let Some(seed) = shuffle_seed {
        examples = examples.shuffle(split.len(), seed);
    }
    Ok(examples
        .batch(batch, true)
        .prefetch_to_device(2, Placement::Default))
}

/// Trains for `epochs` over batches of 64; returns the losses of the last
/// epoch and the step function.
pub fn train(model: &Cnn, train: &Split, epochs: usize) -> Result<(Vec<f32>, TrainStep)> {
    let (history, step) = fit(model, train, epochs, None, Progress::Off, None)?;
    let per_epoch = train.len() / 64;
    let last = history.steps[history.steps.len() - per_epoch..].iter();
    Ok((last.map(|&(_, l)| l as f32).collect(), step))
}

/// Trains with [`Trainer`]: Adam at 2e-3 decayed exponentially to half
/// over the run (one step per full batch, the schedule evaluated inside
/// the compiled step), a fresh dropout key every step, the held-out split
/// evaluated after each epoch (`val_loss`, `val_accuracy`) when given, a
/// progress bar, and TensorBoard files and `loss.svg` in `dir`.
pub fn fit(
    model: &Cnn,
    train: &Split,
    epochs: usize,
    held_out: Option<&Split>,
    progress: Progress,
    dir: Option<&Path>,
) -> Result<(History, TrainStep)> {
    let steps = (epochs * (train.len() / 64)).max(1) as i64;
    let schedule = Arc::new(ExponentialDecay::new(2e-3, steps, 0.5)?);
    let optimizer = Arc::new(Adam::new(LearningRate::Schedule(schedule.clone())));
    optimizer.build(&model.trainable_variables())?;
    let step = model.train_step(optimizer);
    let base = random::key(7)?;
    let mut counter = 0i32;
    let run = step.clone();
    let mut trainer = Trainer::new(move |(x, y): (Tensor, Tensor)| {
        let key = random::fold_in(&base, &Tensor::scalar(counter))?;
        counter += 1;
        Ok(Metrics::loss(run.call((x, y, key))?))
    })
    .epochs(epochs as u64)
    .log_learning_rate(schedule)
    .progress(progress);
    if let Some(split) = held_out {
        trainer = trainer.evaluate(pipeline(split, 60, None)?, model.eval_step());
    }
    if let Some(dir) = dir {
        trainer = trainer
            .tensorboard(dir)?
            .histograms(model.named_variables())
            .loss_curve(dir.join("loss.svg"));
    }
    let history = trainer.fit(&pipeline(train, 64, Some(1))?)?;
    Ok((history, step))
}
