//! The eager op cache is bounded: least recently used programs are dropped
//! beyond `XLAFN_EAGER_CACHE_ENTRIES` (3000 shapes used to keep 3000
//! programs, +420 MiB). The bound is read once per process, so each case
//! runs in a child process (see `common/child.rs`).

#[path = "common/child.rs"]
mod child;

use std::time::Duration;
use xlafn::prelude::*;

#[test]
fn the_cache_keeps_at_most_its_bound_and_the_hot_op_survives() {
    child::assert_child_passes(
        "bounded_child",
        &[("XLAFN_EAGER_CACHE_ENTRIES", "8")],
        Duration::from_secs(300),
    );
}

#[test]
fn bounded_child() {
    if !child::is_child("bounded_child") {
        return;
    }
    let hot = Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap();
    let hot_op = || {
        assert_eq!(
            hot.mul_scalar(3.0).unwrap().to_vec::<f32>().unwrap(),
            [3., 6.]
        )
    };
    hot_op();
    for n in 1..=40i64 {
        let x = Tensor::from_vec((0..n).map(|i| i as f32).collect(), &[n]).unwrap();
        let y = x.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap();
        let expected: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        assert_eq!(y, expected);
        hot_op();
        let stats = xlafn::tensor::eager_cache_stats();
        assert!(stats.entries <= 8, "{stats:?}");
    }
    let stats = xlafn::tensor::eager_cache_stats();
    assert!(stats.evictions >= 30, "{stats:?}");
    hot_op();
    assert_eq!(
        xlafn::tensor::eager_cache_stats().compiles,
        stats.compiles,
        "the op used after every miss was never evicted"
    );
    // An evicted op compiles again and still computes the right thing.
    let x = Tensor::from_vec(vec![5f32], &[1]).unwrap();
    assert_eq!(x.add_scalar(1.0).unwrap().to_vec::<f32>().unwrap(), [6.]);
    assert_eq!(
        xlafn::tensor::eager_cache_stats().compiles,
        stats.compiles + 1
    );
}

#[test]
fn an_unreadable_bound_keeps_the_default() {
    child::assert_child_passes(
        "default_child",
        &[("XLAFN_EAGER_CACHE_ENTRIES", "0")],
        Duration::from_secs(300),
    );
}

#[test]
fn default_child() {
    if !child::is_child("default_child") {
        return;
    }
    for n in 1..=20i64 {
        Tensor::from_vec(vec![0f32; n as usize], &[n])
            .unwrap()
            .add_scalar(1.0)
            .unwrap();
    }
    let stats = xlafn::tensor::eager_cache_stats();
    assert_eq!(stats.evictions, 0, "{stats:?}");
    assert!(stats.entries >= 20, "{stats:?}");
}
