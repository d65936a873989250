//! Trains a small CNN (two conv + relu + max-pool blocks, a dense layer
//! with dropout, sparse cross-entropy, Adam on a schedule) on the UCI handwritten digits
//! shipped in `data/digits`, and reports held-out accuracy. The batches
//! come from an `xlafn::data` pipeline (shuffled per epoch, batched,
//! uploaded ahead); `xlafn::train::Trainer` runs the epochs with a
//! progress bar on a terminal, evaluates the held-out split after each,
//! and writes TensorBoard event files and a loss curve (`loss.svg`) to a
//! temporary directory it prints. Each training
//! step is one compiled XLA program, traced and compiled once; dropout
//! takes a new key every step without retracing. The trained model goes
//! through a safetensors checkpoint into a freshly made one.
//! `cargo run --release --example cnn`

#[path = "common/cnn.rs"]
mod cnn;

#[path = "common/logging.rs"]
mod logging;
use xlafn::prelude::*;
use xlafn::train::Progress;

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    let (train, test) = cnn::load_digits()?;
    println!("{} training images, {} held out", train.len(), test.len());
    let model = cnn::Cnn::new(1)?;
    let run_dir = std::env::temp_dir().join(format!("xlafn-cnn-{}", std::process::id()));
    let started = std::time::Instant::now();
    let (history, step) = cnn::fit(
        &model,
        &train,
        30,
        Some(&test),
        Progress::Auto,
        Some(&run_dir),
    )?;
    let last = history.epochs.last().expect("30 epochs ran");
    println!(
        "30 epochs in {:.2} s; last epoch: loss {:.4}, held-out loss {:.4}, held-out accuracy {:.1}%",
        started.elapsed().as_secs_f64(),
        last.get("loss").unwrap_or(f64::NAN),
        last.get("val_loss").unwrap_or(f64::NAN),
        100.0 * last.get("val_accuracy").unwrap_or(f64::NAN)
    );
    println!(
        "training step: {} trace, {} compile",
        step.tracing_count(),
        step.compile_count()
    );
    println!(
        "TensorBoard event files and the loss curve: {}",
        run_dir.display()
    );
    let accuracy = model.accuracy(&test)?;
    println!("held-out accuracy: {:.1}%", accuracy * 100.0);
    if accuracy < 0.95 {
        return Err(Error::Value(format!("accuracy {accuracy} is below 95%")));
    }
    // A checkpoint round trip: a model made from another seed, restored
    // from the trained one's file, classifies the same.
    let path = std::env::temp_dir().join(format!("xlafn-cnn-{}.safetensors", std::process::id()));
    xlafn::checkpoint::save(&model, &path)?;
    let restored = cnn::Cnn::new(2)?;
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
