//! A small character-level GPT (2 pre-LN decoder blocks, d = 128, 4
//! heads, context 64) trained on Cicero's *De finibus*, Book I, shipped in
//! `data/cicero` (public domain; see its README): AdamW on a
//! warmup-cosine schedule, dropout with a key per step, gradients clipped
//! by global norm, bfloat16 compute over float32 weights, each step one
//! compiled program.
//!
//! Batches come from an `xlafn::data` pipeline that builds and uploads
//! them two steps ahead; `xlafn::train::Trainer` runs the steps with a
//! progress bar (on a terminal), TensorBoard event files and a loss-curve
//! picture (`loss.svg`) in a temporary directory it prints. Halfway its
//! checkpoint callback saves the model, the optimizer (`save_training`)
//! and the run's position; a fresh model and optimizer restored from that
//! file resume the run and train the second half again, and the two loss trajectories are printed side by side: they
//! must be the same bits (the example fails otherwise). Then the trained
//! model writes text greedily and by top-k sampling, each one compiled
//! function that prefills the prompt into key-value caches and decodes in
//! a loop.
//! `cargo run --release --example gpt [-- --steps N]`

#[path = "common/gpt.rs"]
mod gpt;

#[path = "common/logging.rs"]
mod logging;

use gpt::{Config, Corpus, Precision, RunOutputs, Sampling, Training};
use xlafn::module::Module;
use xlafn::prelude::*;
use xlafn::train::Progress;

const PROMPT: &str = "Non eram nescius, Brute, ";

fn steps_argument() -> Result<usize> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [] => Ok(300),
        [flag, n] if flag == "--steps" => match n.parse::<usize>() {
            Ok(n) if n >= 2 => Ok(n),
            _ => Err(Error::Value(format!(
                "--steps needs a number >= 2, got {n}"
            ))),
        },
        _ => Err(Error::Value(format!(
            "usage: gpt [--steps N], got {args:?}"
        ))),
    }
}

fn main() -> Result<()> {
    logging::init(); // RUST_LOG=xlafn=info shows traces and compiles
    let steps = steps_argument()?;
    let corpus = Corpus::load()?;
    println!(
        "De finibus I: {} characters, {} distinct; {} train, {} held out",
        corpus.ids.len(),
        corpus.vocab(),
        corpus.split,
        corpus.ids.len() - corpus.split
    );
    let cfg = Config {
        vocab: corpus.vocab(),
        context: 64,
        d_model: 128,
        heads: 4,
        layers: 2,
        dropout: 0.1,
        precision: Precision::mixed_bf16(),
    };
    let training = Training {
        steps,
        batch: 16,
        warmup: (steps / 10).max(1),
        peak_rate: 3e-3,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 7,
    };
    let at = steps / 2;
    let run_dir = std::env::temp_dir().join(format!("xlafn-gpt-{}", std::process::id()));
    let outputs = RunOutputs {
        progress: Progress::Auto,
        dir: Some(run_dir.join("tensorboard")),
    };
    let started = std::time::Instant::now();
    let run = gpt::resume(
        &corpus,
        cfg,
        &training,
        1,
        at,
        &run_dir.join("checkpoints"),
        &outputs,
    );
    std::fs::remove_dir_all(run_dir.join("checkpoints")).ok();
    let run = run?;
    let every = (steps / 10).max(1);
    for (i, loss) in run.straight.iter().enumerate() {
        if i % every == 0 || i + 1 == steps {
            println!("step {i:4}: loss {loss:.4}");
        }
    }
    println!(
        "TensorBoard event files and the loss curve: {}",
        run_dir.join("tensorboard").display()
    );
    let params: i64 = run
        .model
        .trainable_variables()
        .iter()
        .map(|v| v.dims().iter().product::<i64>())
        .sum();
    println!(
        "{params} parameters; {steps} steps plus {} resumed in {:.1} s",
        steps - at,
        started.elapsed().as_secs_f64()
    );

    println!("\ncheckpoint at step {at}; the steps after it:");
    println!(" step  uninterrupted  resumed from the file");
    let mut same = true;
    for (k, (a, b)) in run.straight[at..].iter().zip(&run.resumed).enumerate() {
        let equal = a.to_bits() == b.to_bits();
        same &= equal;
        println!(
            "{:5}  {a:13.7}  {b:13.7}{}",
            at + k,
            if equal { "" } else { "  DIFFERENT" }
        );
    }
    if !same || run.resumed.len() != steps - at {
        return Err(Error::Value(
            "the resumed run's losses differ from the uninterrupted run's".into(),
        ));
    }
    println!("identical, bit for bit");

    let held_out = gpt::held_out_loss(&run.model, &corpus, 16, 8)?;
    println!(
        "\nheld-out loss {held_out:.4} (a uniform guess: {:.4})",
        (corpus.vocab() as f64).ln()
    );

    let prompt = corpus.encode(PROMPT)?;
    let p = prompt.len() as i64;
    let new_tokens = cfg.context - p + 1;
    let prompt = Tensor::from_vec(prompt, &[1, p])?;
    let key = xlafn::random::key(2024)?;
    for (name, sampling) in [
        ("greedy", Sampling::Greedy),
        (
            "top-5, temperature 0.8",
            Sampling::TopK {
                k: 5,
                temperature: 0.8,
            },
        ),
    ] {
        let generate = gpt::generator(&run.model, new_tokens, sampling);
        let tokens = generate.call((&prompt, &key))?.to_vec::<i32>()?;
        println!(
            "\n{name} ({} trace, {} compile):\n{PROMPT}{}",
            generate.tracing_count(),
            generate.compile_count(),
            corpus.decode(&tokens)
        );
    }
    Ok(())
}
