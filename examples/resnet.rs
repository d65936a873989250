//! A first model with the layer library: a small ResNet (residual blocks
//! of two 3x3 convolutions with batch norm, projection shortcuts where the
//! shape changes) on the UCI handwritten digits shipped in `data/digits`.
//! Each training step (forward in training mode, gradients, SGD with
//! momentum) is one compiled XLA program; evaluation runs in inference
//! mode on the batch norms' moving statistics. The trained model goes
//! through a safetensors checkpoint into a freshly made one.
//! `cargo run --release --example resnet`

#[path = "common/cnn.rs"]
mod cnn;
#[path = "common/resnet.rs"]
mod resnet;

#[path = "common/logging.rs"]
mod logging;

use std::sync::Arc;
use xlafn::module::Module;
use xlafn::prelude::*;

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    let (train, test) = cnn::load_digits()?;
    println!("{} training images, {} held out", train.len(), test.len());
    // Stages of 16, 32 and 64 channels at 8x8, 4x4 and 2x2.
    let model = Arc::new(resnet::ResNet::new(1, &[16, 32, 64])?);
    let trainable = model.trainable_variables().len();
    println!(
        "{} variables, {trainable} of them trainable (the rest are moving statistics)",
        model.variables().len()
    );
    let started = std::time::Instant::now();
    let (losses, step) = resnet::train(&model, &train, 64, 400, 0.05)?;
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    println!(
        "400 steps in {:.2} s; mean loss of the first 20 steps {:.4}, of the last 20 {:.4}",
        started.elapsed().as_secs_f64(),
        mean(&losses[..20]),
        mean(&losses[losses.len() - 20..])
    );
    println!(
        "training step: {} trace, {} compile",
        step.tracing_count(),
        step.compile_count()
    );
    let accuracy = model.accuracy(&test)?;
    println!(
        "held-out accuracy (inference mode): {:.1}%",
        accuracy * 100.0
    );
    if accuracy < 0.95 {
        return Err(Error::Value(format!("accuracy {accuracy} is below 95%")));
    }
    // A checkpoint round trip: a model made from another seed, restored
    // from the trained one's file (moving statistics included), classifies
    // the same.
    let path =
        std::env::temp_dir().join(format!("xlafn-resnet-{}.safetensors", std::process::id()));
    xlafn::checkpoint::save(&*model, &path)?;
    let restored = resnet::ResNet::new(2, &[16, 32, 64])?;
    xlafn::checkpoint::restore(&restored, &path)?;
    std::fs::remove_file(&path).ok();
    let again = restored.accuracy(&test)?;
    println!(
        "restored from a checkpoint: held-out accuracy {:.1}%",
        again * 100.0
    );
    if again != accuracy {
        return Err(Error::Value(format!(
            "restored accuracy {again} != {accuracy}"
        )));
    }
    Ok(())
}
