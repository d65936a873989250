//! The GPT example's core (`examples/common/gpt.rs`) at tiny sizes: its
//! forward pass against a plain-loop transformer over the same weights; a
//! run checkpointed halfway and restored into fresh objects continues bit
//! for bit (bfloat16 compute, dropout, AdamW, clipping, the schedule);
//! the compiled key-value-cache generator decodes greedily exactly as
//! recomputing the whole prefix does, and its top-k samples are always
//! among the k best of the recomputed logits.

#[path = "../examples/common/gpt.rs"]
mod gpt;

#[path = "common/scratch.rs"]
mod scratch;

use gpt::{Config, Corpus, Gpt, Precision, Sampling, Training};
use std::collections::BTreeMap;
use std::sync::Arc;
use xlafn::ArraySpec;
use xlafn::module::Module;
use xlafn::nn::layers::Mode;
use xlafn::prelude::*;

fn tiny(corpus: &Corpus, precision: Precision) -> Config {
    Config {
        vocab: corpus.vocab(),
        context: 16,
        d_model: 16,
        heads: 2,
        layers: 2,
        dropout: 0.1,
        precision,
    }
}

fn training(steps: usize) -> Training {
    Training {
        steps,
        batch: 4,
        warmup: 2,
        peak_rate: 1e-2,
        weight_decay: 0.1,
        clip_norm: 1.0,
        seed: 3,
    }
}

fn bits(model: &Gpt) -> Vec<Vec<u32>> {
    model
        .variables()
        .iter()
        .map(|v| {
            v.read()
                .to_vec::<f32>()
                .unwrap()
                .iter()
                .map(|x| x.to_bits())
                .collect()
        })
        .collect()
}

#[test]
fn the_text_loads_and_round_trips() {
    let corpus = Corpus::load().unwrap();
    assert_eq!(corpus.ids.len(), 49068);
    assert_eq!(corpus.vocab(), 57);
    let s = "Non eram nescius, Brute";
    assert_eq!(corpus.decode(&corpus.encode(s).unwrap()), s);
    assert_eq!(corpus.decode(&corpus.ids[..s.len()]), s);
    assert!(corpus.encode("é").is_err());
    // A batch's targets are its inputs shifted by one character.
    let (x, y) = corpus.batch(5, 3, 8, false).unwrap();
    let (x, y) = (x.to_vec::<i32>().unwrap(), y.to_vec::<i32>().unwrap());
    for r in 0..3 {
        assert_eq!(x[r * 8 + 1..r * 8 + 8], y[r * 8..r * 8 + 7]);
    }
}

// ----- the forward pass against plain loops -----

fn host(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn layer_norm(x: &[f64], gamma: &[f64], beta: &[f64]) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    x.iter()
        .enumerate()
        .map(|(i, v)| (v - mean) / (var + 1e-5).sqrt() * gamma[i] + beta[i])
        .collect()
}

/// `x [n] @ w [n, m] + b`.
fn dense(x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
    let m = b.len();
    (0..m)
        .map(|j| {
            b[j] + x
                .iter()
                .enumerate()
                .map(|(i, v)| v * w[i * m + j])
                .sum::<f64>()
        })
        .collect()
}

fn gelu_tanh(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
}

/// The GPT's logits `[t, vocab]` for one sequence, by loops over the
/// weights `w` (by path), causal attention written out head by head.
fn reference_logits(w: &BTreeMap<String, Vec<f64>>, cfg: &Config, ids: &[i32]) -> Vec<Vec<f64>> {
    let (d, h) = (cfg.d_model as usize, cfg.heads as usize);
    let kd = d / h;
    let get = |name: &str| &w[name];
    let table = get("tokens.embeddings");
    let pos = get("positions.embeddings");
    let mut xs: Vec<Vec<f64>> = ids
        .iter()
        .enumerate()
        .map(|(t, &id)| {
            (0..d)
                .map(|j| table[id as usize * d + j] + pos[t * d + j])
                .collect()
        })
        .collect();
    for l in 0..cfg.layers {
        let p = |n: &str| get(&format!("blocks.{l}.{n}"));
        let normed: Vec<Vec<f64>> = xs
            .iter()
            .map(|x| layer_norm(x, p("ln1.gamma"), p("ln1.beta")))
            .collect();
        // q/k/v kernels are [d, heads, kd]: a dense [d, heads * kd].
        let project = |n: &str| -> Vec<Vec<f64>> {
            normed
                .iter()
                .map(|x| {
                    dense(
                        x,
                        p(&format!("attn.{n}.kernel")),
                        p(&format!("attn.{n}.bias")),
                    )
                })
                .collect()
        };
        let (q, k, v) = (project("query"), project("key"), project("value"));
        for t in 0..xs.len() {
            let mut attended = vec![0.0; h * kd];
            for head in 0..h {
                let at = |row: &[f64], j: usize| row[head * kd + j];
                let scores: Vec<f64> = (0..=t)
                    .map(|s| {
                        (0..kd).map(|j| at(&q[t], j) * at(&k[s], j)).sum::<f64>()
                            / (kd as f64).sqrt()
                    })
                    .collect();
                let max = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - max).exp()).collect();
                let z: f64 = e.iter().sum();
                for (s, es) in e.iter().enumerate() {
                    for j in 0..kd {
                        attended[head * kd + j] += es / z * at(&v[s], j);
                    }
                }
            }
            // The output kernel [heads, kd, d] is a dense [heads * kd, d].
            let a = dense(&attended, p("attn.output.kernel"), p("attn.output.bias"));
            for j in 0..d {
                xs[t][j] += a[j];
            }
            let m = layer_norm(&xs[t], p("ln2.gamma"), p("ln2.beta"));
            let hidden: Vec<f64> = dense(&m, p("fc.kernel"), p("fc.bias"))
                .into_iter()
                .map(gelu_tanh)
                .collect();
            let out = dense(&hidden, p("proj.kernel"), p("proj.bias"));
            for j in 0..d {
                xs[t][j] += out[j];
            }
        }
    }
    xs.iter()
        .map(|x| {
            let y = layer_norm(x, get("ln_f.gamma"), get("ln_f.beta"));
            (0..cfg.vocab as usize)
                .map(|c| (0..d).map(|j| y[j] * table[c * d + j]).sum())
                .collect()
        })
        .collect()
}

/// A float32 model whose every weight is random (biases and norm
/// parameters too, so each takes part in the comparison), with its
/// weights by path.
fn randomized(corpus: &Corpus) -> (Arc<Gpt>, BTreeMap<String, Vec<f64>>) {
    let cfg = tiny(corpus, Precision::float32());
    let model = Gpt::new(cfg, 11).unwrap();
    let mut w = BTreeMap::new();
    for (i, (name, v)) in model.named_variables().into_iter().enumerate() {
        let scale = if name.contains("gamma") { 0.2 } else { 0.3 };
        let noise = Tensor::random_normal(v.dims(), 500 + i as u64, DType::F32)
            .unwrap()
            .mul_scalar(scale)
            .unwrap();
        let value = if name.contains("gamma") {
            noise.add_scalar(1.0).unwrap()
        } else {
            noise
        };
        v.assign(&value).unwrap();
        w.insert(name, host(&value));
    }
    (Arc::new(model), w)
}

#[test]
fn the_forward_pass_matches_plain_loops() {
    let corpus = Corpus::load().unwrap();
    let (model, w) = randomized(&corpus);
    let ids: Vec<i32> = corpus.ids[100..107].to_vec();
    let want = reference_logits(&w, &model.cfg, &ids);
    let x = Tensor::from_vec(ids.clone(), &[1, 7]).unwrap();
    let got = host(&model.logits(&x, &Mode::inference()).unwrap());
    let compiled = {
        let model = model.clone();
        function(move |x: Tensor| model.logits(&x, &Mode::inference()))
    };
    let got_compiled = host(&compiled.call((&x,)).unwrap());
    let v = corpus.vocab() as usize;
    for (name, got) in [("eager", &got), ("compiled", &got_compiled)] {
        for (t, row) in want.iter().enumerate() {
            for (c, want) in row.iter().enumerate() {
                let g = got[t * v + c];
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "{name}: position {t}, class {c}: {g} vs {want}"
                );
            }
        }
    }
    // In bfloat16 compute the same weights give nearly the same logits.
    let bf16 = Gpt::new(tiny(&corpus, Precision::mixed_bf16()), 99).unwrap();
    for ((_, a), (_, b)) in bf16.named_variables().iter().zip(model.named_variables()) {
        a.assign(&b.read()).unwrap();
    }
    let half = host(&bf16.logits(&x, &Mode::inference()).unwrap());
    let spread = want.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    for (g, r) in half.iter().zip(want.iter().flatten()) {
        assert!((g - r).abs() <= 0.05 * spread, "bf16 {g} vs {r}");
    }
}

#[test]
fn an_untrained_model_guesses_uniformly() {
    let corpus = Corpus::load().unwrap();
    let model = Gpt::new(tiny(&corpus, Precision::float32()), 1).unwrap();
    let (x, y) = corpus.batch(0, 4, 16, false).unwrap();
    let loss = model.loss(&x, &y, &Mode::inference()).unwrap();
    let uniform = (corpus.vocab() as f32).ln();
    assert!((loss.item::<f32>().unwrap() - uniform).abs() < 0.05);
}

// ----- resuming -----

#[test]
fn a_run_resumed_from_its_checkpoint_continues_bit_for_bit() {
    let corpus = Corpus::load().unwrap();
    let cfg = tiny(&corpus, Precision::mixed_bf16());
    let dir = scratch::scratch_dir("gpt-resume");
    let run = gpt::resume(
        &corpus,
        cfg,
        &training(6),
        1,
        3,
        &dir,
        &gpt::RunOutputs::quiet(),
    )
    .unwrap();
    assert_eq!(run.straight.len(), 6);
    assert_eq!(run.resumed.len(), 3);
    let straight: Vec<u32> = run.straight[3..].iter().map(|l| l.to_bits()).collect();
    let resumed: Vec<u32> = run.resumed.iter().map(|l| l.to_bits()).collect();
    assert_eq!(resumed, straight, "{:?} vs {:?}", run.resumed, run.straight);
    assert_eq!(bits(&run.restored), bits(&run.model));
    assert!(run.straight.iter().all(|l| l.is_finite()));
    // It learned something, and the restored model began elsewhere.
    assert!(run.straight[5] < run.straight[0], "{:?}", run.straight);
    let other = Gpt::new(cfg, 2).unwrap();
    assert_ne!(bits(&other), bits(&run.model));
    // The file holds the optimizer's state beside the model.
    let file = xlafn::checkpoint::read(&run.checkpoint).unwrap();
    assert_eq!(file["optimizer.iterations"].item::<i64>().unwrap(), 3);
    assert!(file.contains_key("optimizer.m.blocks.1.attn.query.kernel"));
}

// ----- generation -----

/// Greedy decoding by running the whole prefix through the model at each
/// step (no cache).
fn greedy_by_recomputing(model: &Gpt, prompt: &[i32], n: usize) -> Vec<i32> {
    let mut ids = prompt.to_vec();
    for _ in 0..n {
        let logits = host(&last_logits(model, &ids));
        let best = (0..logits.len())
            .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
            .unwrap();
        ids.push(best as i32);
    }
    ids[prompt.len()..].to_vec()
}

fn last_logits(model: &Gpt, ids: &[i32]) -> Tensor {
    let t = ids.len() as i64;
    let x = Tensor::from_vec(ids.to_vec(), &[1, t]).unwrap();
    let logits = model.logits(&x, &Mode::inference()).unwrap();
    logits
        .slice(&[0, t - 1, 0], &[1, 1, model.cfg.vocab])
        .unwrap()
}

#[test]
fn cached_greedy_generation_equals_recomputing_the_prefix() {
    let corpus = Corpus::load().unwrap();
    let (model, _) = randomized(&corpus);
    let prompt = corpus.encode("Quae cum").unwrap();
    let n = 9; // 8 + 9 - 1 = 16 positions: the whole context.
    let want = greedy_by_recomputing(&model, &prompt, n);
    let generate = gpt::generator(&model, n as i64, Sampling::Greedy);
    let p = Tensor::from_vec(prompt.clone(), &[1, prompt.len() as i64]).unwrap();
    let key = xlafn::random::key(0).unwrap();
    let got = generate.call((&p, &key)).unwrap().to_vec::<i32>().unwrap();
    assert_eq!(got, want);
    assert!(got.iter().any(|t| *t != got[0]), "{got:?}");
    assert_eq!(generate.tracing_count(), 1);
    // One program, one loop: the decoding is not unrolled.
    let text = generate.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::I32, &[1, prompt.len() as i64]),
            ArraySpec::new(key.dtype(), &key.dims()),
        ])
        .unwrap();
    assert_eq!(text.matches("stablehlo.while").count(), 1);
    // A prompt and continuation longer than the context is refused.
    let long = gpt::generator(&model, n as i64 + 1, Sampling::Greedy);
    let e = long.call((&p, &key)).unwrap_err().to_string();
    assert!(e.contains("exceed the context"), "{e}");
}

#[test]
fn top_k_samples_are_among_the_k_best_and_follow_the_key() {
    let corpus = Corpus::load().unwrap();
    let (model, _) = randomized(&corpus);
    let prompt = corpus.encode("Non eram").unwrap();
    let (n, k) = (9, 3);
    let sampling = Sampling::TopK {
        k,
        temperature: 2.0,
    };
    let generate = gpt::generator(&model, n, sampling);
    let p = Tensor::from_vec(prompt.clone(), &[1, prompt.len() as i64]).unwrap();
    let draw = |seed| {
        let key = xlafn::random::key(seed).unwrap();
        generate.call((&p, &key)).unwrap().to_vec::<i32>().unwrap()
    };
    let (a, b, c) = (draw(1), draw(1), draw(2));
    assert_eq!(a, b);
    assert_ne!(a, c);
    for sample in [&a, &c] {
        let mut ids = prompt.clone();
        for &token in sample.iter() {
            let logits = host(&last_logits(&model, &ids));
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|&x, &y| logits[y].total_cmp(&logits[x]));
            assert!(
                order[..k as usize].contains(&(token as usize)),
                "{token} is not among the {k} best {:?}",
                &order[..k as usize]
            );
            ids.push(token);
        }
    }
    // Sampling at a high temperature leaves the greedy path somewhere.
    let greedy = greedy_by_recomputing(&model, &prompt, n as usize);
    assert!(a != greedy || c != greedy);
    assert_eq!(generate.tracing_count(), 1);
}
