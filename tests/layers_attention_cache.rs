//! The self-attention key-value cache of `nn::layers::MultiHeadAttention`:
//! greedy decoding with the cache (eager, and one compiled `for_range`
//! traced once) gives the tokens and outputs of recomputing full causal
//! attention over the prefix at every step; a cache filled with several
//! positions at once matches full causal attention.

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, host, values};

#[path = "common/attention_setup.rs"]
mod attention_setup;
use attention_setup::{Cfg, build_and_randomize, tensor};

use std::sync::Arc;
use xlafn::ArraySpec;
use xlafn::nn::layers::{AttentionOptions, KvCache, Mode, MultiHeadAttention};
use xlafn::prelude::*;

// ----- the key-value cache -----

const VOCAB: i64 = 7;
const D: i64 = 8;
const B: i64 = 2;
const STEPS: i64 = 6;

fn decoder() -> (Arc<MultiHeadAttention>, Tensor) {
    let mha = MultiHeadAttention::new(&xlafn::random::key(13).unwrap(), 4, 2)
        .unwrap()
        .num_kv_heads(2)
        .unwrap();
    let c = Cfg {
        b: 1,
        t: 1,
        s: 1,
        dq: D as usize,
        dk: D as usize,
        dv: D as usize,
        h: 4,
        g: 2,
        kd: 2,
        vd: 2,
        o: D as usize,
    };
    build_and_randomize(&mha, c, DType::F64, 130);
    let table = tensor(
        &values((VOCAB * D) as usize, 131, -1.5, 1.5),
        &[VOCAB, D],
        DType::F64,
    );
    (Arc::new(mha), table)
}

/// One greedy step's logits: the output row times the embedding table.
fn logits(y: &Tensor, table: &Tensor) -> Result<Tensor> {
    y.reshape(&[B, D])?.matmul_t(table, false, true)
}

/// Greedy decoding by recomputing full causal attention over the prefix
/// at each step: the tokens and each step's last output row.
fn greedy_by_recomputing(
    mha: &MultiHeadAttention,
    table: &Tensor,
    first: &[i32],
) -> (Vec<Vec<i32>>, Vec<Vec<f64>>) {
    let mut prefix: Vec<Vec<i32>> = vec![first.to_vec()];
    let mut rows = Vec::new();
    for step in 0..STEPS {
        let len = step + 1;
        let ids: Vec<i32> = (0..B as usize)
            .flat_map(|b| prefix.iter().map(move |p| p[b]).collect::<Vec<_>>())
            .collect();
        let ids = Tensor::from_vec(ids, &[B, len]).unwrap();
        let x = table.gather(&ids, 0).unwrap();
        let y = mha
            .call_qkv(&x, &x, &x, &AttentionOptions::causal(), &Mode::inference())
            .unwrap();
        let last = y.slice(&[0, len - 1, 0], &[B, 1, D]).unwrap();
        rows.push(host(&last));
        let next = logits(&last, table).unwrap().argmax(1).unwrap();
        let next: Vec<i32> = host(&next).into_iter().map(|v| v as i32).collect();
        prefix.push(next);
    }
    (prefix, rows)
}

#[test]
fn cached_greedy_decoding_equals_recomputing_the_prefix_eagerly() {
    let (mha, table) = decoder();
    let first = [3i32, 5];
    let (want_tokens, want_rows) = greedy_by_recomputing(&mha, &table, &first);
    let mut cache = mha.empty_cache(B, STEPS, DType::F64).unwrap();
    let mut token = Tensor::from_vec(first.to_vec(), &[B]).unwrap();
    let mut tokens = vec![first.to_vec()];
    for (step, want_row) in want_rows.iter().enumerate() {
        let x = table.gather(&token, 0).unwrap().expand_dims(1).unwrap();
        let (y, next_cache) = mha.call_cached(&x, &cache, &Mode::inference()).unwrap();
        cache = next_cache;
        assert_eq!(cache.length.item::<i32>().unwrap(), step as i32 + 1);
        assert_close(&host(&y), want_row, 1e-10, &format!("step {step}"));
        token = logits(&y, &table)
            .unwrap()
            .argmax(1)
            .unwrap()
            .cast(DType::I32)
            .unwrap();
        tokens.push(token.to_vec::<i32>().unwrap());
    }
    assert_eq!(tokens, want_tokens);
    // The sequence is not constant (the test would be weak otherwise).
    assert!(tokens.iter().any(|t| t != &tokens[0]), "{tokens:?}");
}

#[test]
fn cached_greedy_decoding_compiles_once_as_one_device_loop() {
    let (mha, table) = decoder();
    let first = [3i32, 5];
    let (want_tokens, _) = greedy_by_recomputing(&mha, &table, &first);
    let decode = {
        let (mha, table) = (mha.clone(), table.clone());
        function(move |token: Tensor| -> Result<Tensor> {
            let cache = mha.empty_cache(B, STEPS, DType::F64)?;
            let out = TensorArray::new(DType::I32, STEPS).with_element_shape(&[B])?;
            let (_, _, out) = for_range(
                0i64,
                STEPS,
                1i64,
                (token, cache, out),
                |i, (token, cache, out): (Tensor, KvCache, TensorArray)| -> Result<_> {
                    let x = table.gather(&token, 0)?.expand_dims(1)?;
                    let (y, cache) = mha.call_cached(&x, &cache, &Mode::inference())?;
                    let next = logits(&y, &table)?.argmax(1)?.cast(DType::I32)?;
                    let out = out.write(&i, &next)?;
                    Ok((next, cache, out))
                },
            )?;
            out.stack()
        })
    };
    let got = decode
        .call((Tensor::from_vec(first.to_vec(), &[B]).unwrap(),))
        .unwrap();
    let got: Vec<Vec<i32>> = got
        .to_vec::<i32>()
        .unwrap()
        .chunks(B as usize)
        .map(<[i32]>::to_vec)
        .collect();
    assert_eq!(got, want_tokens[1..].to_vec());
    assert_eq!(decode.tracing_count(), 1);
    // One `while` in the program: the loop was not unrolled.
    let text = decode.concrete_functions()[0]
        .stablehlo(&[ArraySpec::new(DType::I32, &[B])])
        .unwrap();
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
}

#[test]
fn cache_of_several_positions_at_once_matches_full_causal_attention() {
    let (mha, table) = decoder();
    let ids = Tensor::from_vec(vec![1i32, 2, 3, 4, 5, 6, 0, 1, 2, 3], &[B, 5]).unwrap();
    let x = table.gather(&ids, 0).unwrap();
    let full = mha
        .call_qkv(&x, &x, &x, &AttentionOptions::causal(), &Mode::inference())
        .unwrap();
    // A prompt of 3 positions, then 2 more, into a cache of 8.
    let cache = mha.empty_cache(B, 8, DType::F64).unwrap();
    let (y1, cache) = mha
        .call_cached(
            &x.slice(&[0, 0, 0], &[B, 3, D]).unwrap(),
            &cache,
            &Mode::inference(),
        )
        .unwrap();
    let (y2, cache) = mha
        .call_cached(
            &x.slice(&[0, 3, 0], &[B, 2, D]).unwrap(),
            &cache,
            &Mode::inference(),
        )
        .unwrap();
    assert_eq!(cache.length.item::<i32>().unwrap(), 5);
    let got = Tensor::concat(&[y1, y2], 1).unwrap();
    assert_close(&host(&got), &host(&full), 1e-10, "prompt then two");
}
