//! The training toolkit end to end on the W3 MLP's data (784-256-10,
//! batch 128, synthetic classes): a model as a `#[derive(Module)]` struct,
//! weights from `initializers` with random keys, Adam on a warmup-cosine
//! schedule inside one compiled step (traced once, the rate still changes
//! every call), and a checkpoint round trip into a fresh model.
//! `cargo run --release --example mlp`

// The benchmark's data (its SGD model stays the benchmark's; this example
// builds its own from the toolkit).
#[allow(dead_code)]
#[path = "common/mlp_step.rs"]
mod mlp_step;

#[path = "common/logging.rs"]
mod logging;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::optimizers::CosineDecay;
use xlafn::prelude::*;
use xlafn::{checkpoint, initializers, random};

/// `x @ kernel + bias`.
#[derive(Module)]
struct Dense {
    kernel: Variable,
    bias: Variable,
}

impl Dense {
    fn new(key: &Tensor, fan_in: i64, fan_out: i64) -> Result<Dense> {
        let kernel = initializers::glorot_uniform(key, &[fan_in, fan_out], DType::F32)?;
        Ok(Dense {
            kernel: Variable::try_new(kernel)?,
            bias: Variable::try_new(initializers::zeros(&[fan_out], DType::F32)?)?,
        })
    }

    fn apply(&self, x: &Tensor) -> Result<Tensor> {
        x.matmul(&self.kernel.try_read()?)?
            .add(&self.bias.try_read()?)
    }
}

/// Two dense layers with a relu between them; its variables are named
/// `hidden.kernel`, `hidden.bias`, `output.kernel`, `output.bias`.
#[derive(Module)]
struct Mlp {
    hidden: Dense,
    output: Dense,
}

impl Mlp {
    fn new(seed: u64) -> Result<Mlp> {
        let keys = random::split(&random::key(seed)?, 2)?;
        Ok(Mlp {
            hidden: Dense::new(&random::nth(&keys, 0)?, mlp_step::INPUTS, mlp_step::HIDDEN)?,
            output: Dense::new(&random::nth(&keys, 1)?, mlp_step::HIDDEN, mlp_step::CLASSES)?,
        })
    }

    fn logits(&self, x: &Tensor) -> Result<Tensor> {
        self.output.apply(&self.hidden.apply(x)?.relu()?)
    }

    fn loss(&self, x: &Tensor, y: &Tensor) -> Result<Tensor> {
        xlafn::nn::sparse_softmax_cross_entropy_with_logits(y, &self.logits(x)?)?
            .reduce_mean(&[], false)
    }

    fn accuracy(&self, x: &Tensor, y: &Tensor) -> Result<f64> {
        let predicted = self.logits(x)?.argmax(-1)?.to_vec::<i64>()?;
        let labels = y.to_vec::<i32>()?;
        let right = predicted
            .iter()
            .zip(&labels)
            .filter(|(p, l)| **p == **l as i64)
            .count();
        Ok(right as f64 / labels.len() as f64)
    }
}

const STEPS: usize = 300;

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    let model = Arc::new(Mlp::new(0)?);
    for (name, v) in model.named_variables() {
        println!("{name:14} {:?} {}", v.dims(), v.dtype());
    }
    // Warm up to 3e-3 over 30 steps, then a cosine decay to zero.
    let schedule = CosineDecay::new(0.0, STEPS as i64 - 30)?.warmup(3e-3, 30)?;
    let adam = Arc::new(Adam::new(schedule));
    adam.build(&model.trainable_variables())?;
    let step = {
        let (model, adam) = (model.clone(), adam.clone());
        function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
            adam.minimize(&model.trainable_variables(), || model.loss(&x, &y))
        })
    };

    let batches: Vec<(Tensor, Tensor)> = (0..8)
        .map(mlp_step::synthetic_batch)
        .collect::<Result<_>>()?;
    let started = std::time::Instant::now();
    for i in 0..STEPS {
        let (x, y) = &batches[i % batches.len()];
        let loss = step.call((x, y))?;
        if i % 50 == 0 || i == STEPS - 1 {
            println!("step {i:3}: loss {:.4}", loss.item::<f32>()?);
        }
    }
    println!(
        "{STEPS} steps in {:.1} ms ({} traces, {} compile; {} updates counted)",
        started.elapsed().as_secs_f64() * 1e3,
        step.tracing_count(),
        step.compile_count(),
        adam.iterations()?
    );

    let (x, y) = mlp_step::synthetic_batch(1234)?;
    let accuracy = model.accuracy(&x, &y)?;
    println!("accuracy on a fresh batch: {:.1}%", 100.0 * accuracy);

    // Save, restore into a model made from another seed, and check that it
    // now predicts the same.
    let path = std::env::temp_dir().join(format!("xlafn-mlp-{}.safetensors", std::process::id()));
    checkpoint::save(&*model, &path)?;
    let restored = Mlp::new(1)?;
    checkpoint::restore(&restored, &path)?;
    std::fs::remove_file(&path).ok();
    let again = restored.accuracy(&x, &y)?;
    println!(
        "restored from {}: accuracy {:.1}%",
        path.display(),
        100.0 * again
    );
    assert_eq!(again, accuracy, "the restored model predicts differently");
    Ok(())
}
