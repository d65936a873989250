//! W14 (tools/workloads/resnet_step.rs), the ResNet step of the bench
//! report, computes what its peers compute: from the numpy draw that
//! `bench/peers_models.py` makes, its first three SGD-momentum steps give
//! the losses JAX and TensorFlow reported, its batch norms move their
//! moving statistics as the peers' do, and its step traces once.

#[path = "../examples/common/real_models.rs"]
mod real_models;
#[path = "../tools/workloads/resnet_step.rs"]
mod resnet_step;

use resnet_step::{W14, W14_PEER_LOSSES, W14_PEER_MOVING};
use xlafn::module::Module;

#[test]
fn the_w14_step_gives_the_peers_losses() {
    let w = W14::new().unwrap();
    let names: Vec<String> = w
        .model
        .named_variables()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    let bn =
        |p: &str| ["gamma", "beta", "moving_mean", "moving_variance"].map(|v| format!("{p}.{v}"));
    let mut want = vec!["stem.kernel".to_string()];
    want.extend(bn("stem_bn"));
    for b in 0..3 {
        want.push(format!("blocks.{b}.conv1.kernel"));
        want.extend(bn(&format!("blocks.{b}.bn1")));
        want.push(format!("blocks.{b}.conv2.kernel"));
        want.extend(bn(&format!("blocks.{b}.bn2")));
        if b > 0 {
            want.push(format!("blocks.{b}.shortcut.conv.kernel"));
            want.extend(bn(&format!("blocks.{b}.shortcut.bn")));
        }
    }
    want.extend(["head.kernel".to_string(), "head.bias".to_string()]);
    assert_eq!(names, want);

    let step = w.train_step().unwrap();
    for (i, want) in W14_PEER_LOSSES.iter().enumerate() {
        let got = f64::from(step.call((&w.x, &w.labels)).unwrap().item::<f32>().unwrap());
        assert!(
            (got - want).abs() / want < 1e-5,
            "step {i}: loss {got}, peers {want}"
        );
    }
    assert_eq!(step.tracing_count(), 1);

    let sum = |suffix: &str, f: fn(f32) -> f32| -> f64 {
        w.model
            .named_variables()
            .iter()
            .filter(|(n, _)| n.ends_with(suffix))
            .flat_map(|(_, v)| v.read().to_vec::<f32>().unwrap())
            .map(|x| f64::from(f(x)))
            .sum()
    };
    let moving = [sum("moving_mean", f32::abs), sum("moving_variance", |x| x)];
    for (got, want) in moving.iter().zip(W14_PEER_MOVING) {
        assert!(
            (got - want).abs() / want < 1e-5,
            "moving statistics {moving:?}, peers {W14_PEER_MOVING:?}"
        );
    }
}
