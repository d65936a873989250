//! W9 written with the layer library (tools/workloads/transformer_with_layers.rs)
//! computes what the hand-written W9 and the peers compute: from the same
//! numpy-drawn parameters its forward loss, first three Adam steps and
//! parameter updates match the figures JAX reported; its step traces and
//! compiles once. Its step program has no more matrix products,
//! transposes or casts than the hand-written one's.

#[path = "../examples/common/real_models.rs"]
mod real_models;
#[path = "../tools/workloads/transformer_with_layers.rs"]
mod transformer_with_layers;

use real_models::{Model, Workload};
use transformer_with_layers::LayersModel;
use xlafn::ArraySpec;
use xlafn::module::Module;
use xlafn::prelude::*;

fn rel(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs().max(1e-12)
}

#[test]
fn the_layers_block_matches_the_hand_written_one_and_the_peers() {
    let peer = Workload::W9.peer_check();
    let m = LayersModel::new().unwrap();
    let names: Vec<String> = m
        .model
        .named_variables()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names[4], "attention.query.kernel");
    assert_eq!(names.len(), 17);
    let (a, b) = m.data.clone();
    let forward = m.forward();
    let fwd = f64::from(forward.call((&a, &b)).unwrap().item::<f32>().unwrap());
    assert!(rel(fwd, peer.losses[0]) < 1e-5, "forward {fwd}");
    // The hand-written block on the same data, eagerly.
    let hand = Model::new(Workload::W9).unwrap();
    let hand_loss = f64::from(hand.eager_loss().unwrap().item::<f32>().unwrap());
    assert!(rel(fwd, hand_loss) < 1e-6, "{fwd} vs {hand_loss}");

    let step = m.train_step().unwrap();
    let mut losses = Vec::new();
    for _ in 0..3 {
        losses.push(f64::from(
            step.call((&a, &b)).unwrap().item::<f32>().unwrap(),
        ));
    }
    for (got, want) in losses.iter().zip(peer.losses) {
        assert!(rel(*got, want) < 1e-5, "losses {losses:?}");
    }
    let l1 = m.update_l1().unwrap();
    assert!(rel(l1, peer.update_l1) < 1e-3, "sum |p - p0| {l1}");
    assert_eq!((step.tracing_count(), step.compile_count()), (1, 1));
}

/// The step's StableHLO, and the opcodes of the program XLA optimized
/// from it.
fn step_programs(
    step: &Function<(Tensor, Tensor), Tensor>,
    a: &Tensor,
    b: &Tensor,
) -> (String, xlafn::runtime::hlo::OptimizedProgram) {
    let specs = [
        ArraySpec::new(a.dtype(), &a.dims()),
        ArraySpec::new(b.dtype(), &b.dims()),
    ];
    let concrete = step.get_concrete_function((a, b)).unwrap();
    let text = concrete.stablehlo(&specs).unwrap();
    let optimized = concrete.compiled(&specs).unwrap().optimized().unwrap();
    (text, optimized)
}

#[test]
fn the_layers_step_program_has_no_extra_products_transposes_or_casts() {
    let hand = Model::new(Workload::W9).unwrap();
    let (a, b) = hand.data.clone();
    let (hand_text, hand_xla) = step_programs(&hand.train_step().unwrap(), &a, &b);
    let layers = LayersModel::new().unwrap();
    let (layers_text, layers_xla) = step_programs(&layers.train_step().unwrap(), &a, &b);
    for op in ["dot_general", "transpose", "convert"] {
        let op = format!("stablehlo.{op}");
        let (h, l) = (
            hand_text.matches(&op).count(),
            layers_text.matches(&op).count(),
        );
        println!("{op}: hand-written {h}, layers {l}");
        assert!(l <= h, "{op}: hand-written {h}, layers {l}");
    }
    // After XLA's passes (informative: the compiler's choices, not ours).
    for op in ["dot", "transpose", "copy", "convert", "fusion"] {
        println!(
            "optimized {op}: hand-written {}, layers {}",
            hand_xla.count(op),
            layers_xla.count(op)
        );
    }
}
