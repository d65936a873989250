//! W15 (tools/workloads/bigru_step.rs), the bidirectional GRU classifier of
//! the bench report, computes what its peers compute: from the numpy draw
//! that `bench/peers_models.py` makes, its first three Adam steps give
//! the losses JAX and TensorFlow reported, and its step traces once.

#[path = "../tools/workloads/bigru_step.rs"]
mod bigru_step;
#[path = "../examples/common/real_models.rs"]
mod real_models;

use bigru_step::{W15, W15_PEER_LOSSES};
use xlafn::module::Module;

#[test]
fn the_w15_step_gives_the_peers_losses() {
    let w = W15::new().unwrap();
    let names: Vec<String> = w
        .model
        .named_variables()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "gru.forward.kernel",
            "gru.forward.recurrent_kernel",
            "gru.forward.bias",
            "gru.backward.kernel",
            "gru.backward.recurrent_kernel",
            "gru.backward.bias",
            "head.kernel",
            "head.bias",
        ]
    );
    let step = w.train_step().unwrap();
    for (i, want) in W15_PEER_LOSSES.iter().enumerate() {
        let got = f64::from(
            step.call((&w.x, &w.mask, &w.labels))
                .unwrap()
                .item::<f32>()
                .unwrap(),
        );
        assert!(
            (got - want).abs() / want < 1e-5,
            "step {i}: loss {got}, peers {want}"
        );
    }
    assert_eq!(step.tracing_count(), 1);
}
