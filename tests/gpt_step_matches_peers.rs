//! W13 (tools/workloads/gpt_step.rs), the GPT-style step of the bench
//! report, computes what its peers compute: from the numpy draw that
//! `bench/peers_models.py` makes, its first three AdamW steps (built with
//! dropout rate 0) give the losses JAX and TensorFlow reported, weight
//! decay falls on the matrices the peers decay, and the step traces once.
//! The timed step (dropout 0.1) draws new masks every call from the same
//! compiled program.
//!
//! This check found a silent wrong answer: with the pinned XLA's XNNPACK
//! dots, a product with a variable updated in place used its first value
//! (losses drifted by 1.8e-2 by step 3). xlafn now compiles without them
//! (`tests/products_see_updated_weights.rs`).

#[path = "../tools/workloads/gpt_step.rs"]
mod gpt_step;
#[path = "../examples/common/real_models.rs"]
mod real_models;

use gpt_step::{W13, W13_DROPOUT, W13_NO_DECAY, W13_PEER_LOSSES};
use xlafn::Tensor;
use xlafn::module::Module;
use xlafn::optimizers::ParamGroup;

type Step = xlafn::Function<(Tensor, Tensor), Tensor>;

fn loss(step: &Step, w: &W13) -> f64 {
    f64::from(
        step.call((&w.inputs, &w.targets))
            .unwrap()
            .item::<f32>()
            .unwrap(),
    )
}

#[test]
fn the_w13_step_gives_the_peers_losses() {
    let w = W13::new(0.0).unwrap();
    let named = w.model.named_variables();
    assert_eq!(named.len(), 2 + 16 * 2 + 2);
    // Decay falls on the attention and MLP kernels only, the peers'
    // `w13_decayed()`.
    let spared = ParamGroup::named(&W13_NO_DECAY);
    let decayed: Vec<&str> = named
        .iter()
        .filter(|(_, v)| !spared.selects(v))
        .map(|(n, _)| n.as_str())
        .collect();
    let kernels = [
        "attn.query",
        "attn.key",
        "attn.value",
        "attn.output",
        "fc",
        "proj",
    ];
    let want: Vec<String> = (0..2)
        .flat_map(|b| kernels.map(|k| format!("blocks.{b}.{k}.kernel")))
        .collect();
    assert_eq!(decayed, want);

    let step = w.train_step().unwrap();
    for (i, want) in W13_PEER_LOSSES.iter().enumerate() {
        let got = loss(&step, &w);
        assert!(
            (got - want).abs() / want < 1e-5,
            "step {i}: loss {got}, peers {want}"
        );
    }
    assert_eq!(step.tracing_count(), 1);

    // With dropout: another first loss than without (the masks change it
    // by about 2e-4 relative at these small initial weights, well past the
    // check's 1e-5), one trace for every step, and the counter that keys
    // the masks moves.
    let dropped = W13::new(W13_DROPOUT).unwrap();
    let step = dropped.train_step().unwrap();
    let first = loss(&step, &dropped);
    let second = loss(&step, &dropped);
    assert!(first.is_finite() && second.is_finite());
    assert!(
        (first - W13_PEER_LOSSES[0]).abs() / W13_PEER_LOSSES[0] > 1e-5,
        "dropout 0.1 left the first loss at {first}"
    );
    assert_eq!(step.tracing_count(), 1);
    assert_eq!(dropped.step.read().item::<i32>().unwrap(), 2);
}
