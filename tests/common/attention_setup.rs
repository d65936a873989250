//! The attention tests' shared setup (tests/layers_attention.rs,
//! tests/layers_attention_cache.rs): one test case's sizes, the layer
//! made from them, and weights given distinct values.

#![allow(dead_code)]

use std::collections::BTreeMap;
use xlafn::module::Module;
use xlafn::nn::layers::{AttentionOptions, Mode, MultiHeadAttention};
use xlafn::prelude::*;

use super::layer_data::{host, values};

pub fn tensor(v: &[f64], dims: &[i64], dtype: DType) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims)
        .unwrap()
        .cast(dtype)
        .unwrap()
}

/// The sizes of one test case.
#[derive(Clone, Copy, Debug)]
pub struct Cfg {
    pub b: usize,
    pub t: usize,
    pub s: usize,
    pub dq: usize,
    pub dk: usize,
    pub dv: usize,
    pub h: usize,
    pub g: usize,
    pub kd: usize,
    pub vd: usize,
    pub o: usize,
}

pub const CFG: Cfg = Cfg {
    b: 2,
    t: 3,
    s: 4,
    dq: 6,
    dk: 5,
    dv: 7,
    h: 4,
    g: 2,
    kd: 3,
    vd: 2,
    o: 5,
};

pub fn layer(c: Cfg, seed: u64) -> MultiHeadAttention {
    MultiHeadAttention::new(&xlafn::random::key(seed).unwrap(), c.h as i64, c.kd as i64)
        .unwrap()
        .num_kv_heads(c.g as i64)
        .unwrap()
        .value_dim(c.vd as i64)
        .unwrap()
        .output_dim(c.o as i64)
        .unwrap()
}

/// Builds the layer with one call, then gives every weight (biases too)
/// distinct values; returns them by name.
pub fn build_and_randomize(
    mha: &MultiHeadAttention,
    c: Cfg,
    dtype: DType,
    seed: u64,
) -> BTreeMap<String, Vec<f64>> {
    let q = Tensor::zeros(&[1, 1, c.dq as i64], dtype);
    let k = Tensor::zeros(&[1, 1, c.dk as i64], dtype);
    let v = Tensor::zeros(&[1, 1, c.dv as i64], dtype);
    mha.call_qkv(&q, &k, &v, &AttentionOptions::new(), &Mode::inference())
        .unwrap();
    let mut out = BTreeMap::new();
    for (i, (name, var)) in mha.named_variables().into_iter().enumerate() {
        let n: i64 = var.dims().iter().product();
        let w = values(n as usize, seed + i as u64, -0.6, 0.6);
        var.assign(&tensor(&w, var.dims(), dtype)).unwrap();
        out.insert(name, host(&var.read()));
    }
    out
}
