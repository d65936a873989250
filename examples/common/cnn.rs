//! A small CNN for the 8x8 UCI digits (`data/digits`), shared by
//! `examples/cnn.rs` and `tests/cnn_digits.rs`: conv 3x3 (16) + relu +
//! 2x2 max pool, conv 3x3 (32) + relu + 2x2 max pool, dense 64 + relu +
//! dropout (a fresh key each step), dense 10; sparse softmax
//! cross-entropy; Adam. One compiled program per training step.

#![allow(dead_code)]

use sha2::{Digest, Sha256};
use std::io::Read;
use std::sync::Arc;
use xlafn::optimizers::{Adam, Optimizer};
use xlafn::prelude::*;
use xlafn::{Padding, nn, random};

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

/// The model's variables.
#[derive(Clone)]
pub struct Cnn {
    pub params: Vec<Variable>,
}

/// He-normal initial weights of `dims` (fan-in `fan_in`) from `seed`.
fn he(dims: &[i64], fan_in: i64, seed: u64) -> Result<Variable> {
    let key = random::key(seed)?;
    let w = random::normal(&key, dims, DType::F32, 0.0, (2.0 / fan_in as f64).sqrt())?;
    Variable::try_new(w)
}

fn zeros(n: i64) -> Result<Variable> {
    Variable::try_new(Tensor::fill(&[n], 0.0, DType::F32)?)
}

impl Cnn {
    pub fn new(seed: u64) -> Result<Cnn> {
        Ok(Cnn {
            params: vec![
                he(&[3, 3, 1, 16], 9, seed)?,
                zeros(16)?,
                he(&[3, 3, 16, 32], 9 * 16, seed + 1)?,
                zeros(32)?,
                he(&[128, 64], 128, seed + 2)?,
                zeros(64)?,
                he(&[64, 10], 64, seed + 3)?,
                zeros(10)?,
            ],
        })
    }

    /// Logits `[batch, 10]` for images `[batch, 8, 8, 1]`; with a key,
    /// dropout (rate 0.2) on the dense layer, as in training.
    pub fn logits(&self, x: &Tensor, dropout_key: Option<&Tensor>) -> Result<Tensor> {
        let p: Vec<Tensor> = self.params.iter().map(Variable::read).collect();
        logits_with(&p, x, dropout_key)
    }

    /// The compiled training step: `(images, labels, key) -> loss`.
    pub fn train_step(&self, optimizer: Arc<Adam>) -> TrainStep {
        let model = self.clone();
        function(move |x: Tensor, y: Tensor, key: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let logits = model.logits(&x, Some(&key))?;
            let loss = nn::sparse_softmax_cross_entropy_with_logits(&y, &logits)?
                .reduce_mean(&[], false)?;
            let sources: Vec<Source> = model.params.iter().map(Source::Variable).collect();
            let grads = tape.gradient(&loss, &sources)?;
            let pairs: Vec<(Option<Tensor>, &Variable)> =
                grads.into_iter().zip(model.params.iter()).collect();
            optimizer.apply_gradients(&pairs)?;
            Ok(loss)
        })
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

/// Trains for `epochs` over batches of 64 (the last partial batch of each
/// epoch is dropped, so the step keeps one shape); returns the losses of
/// the last epoch and the step function.
pub fn train(model: &Cnn, train: &Split, epochs: usize) -> Result<(Vec<f32>, TrainStep)> {
    let optimizer = Arc::new(Adam::new(2e-3));
    let vars: Vec<&Variable> = model.params.iter().collect();
    optimizer.build(&vars)?;
    let step = model.train_step(optimizer);
    let base = random::key(7)?;
    let mut last = Vec::new();
    let mut counter = 0i32;
    for epoch in 0..epochs {
        last.clear();
        let order = shuffled(train.len(), epoch as u64 + 1);
        for rows in order.chunks_exact(64) {
            let (x, y) = train.batch(rows)?;
            let key = random::fold_in(&base, &Tensor::scalar(counter))?;
            counter += 1;
            last.push(step.call((x, y, key))?.item::<f32>()?);
        }
    }
    Ok((last, step))
}
