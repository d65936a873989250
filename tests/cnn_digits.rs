//! The CNN example's model on the UCI digits: it trains to at least 95% held-out
//! accuracy with one trace and one compile of the step, and its forward
//! pass and gradients agree with a direct loop reference on fixed weights.

#[path = "../examples/common/cnn.rs"]
mod cnn;

use xlafn::nn;
use xlafn::prelude::*;

#[test]
fn trains_to_95_percent_held_out_with_one_trace() {
    let (train, test) = cnn::load_digits().unwrap();
    assert_eq!((train.len(), test.len()), (1437, 360));
    let model = cnn::Cnn::new(1).unwrap();
    let (losses, step) = cnn::train(&model, &train, 12).unwrap();
    assert!(losses.iter().all(|l| l.is_finite()));
    assert_eq!(step.tracing_count(), 1);
    assert_eq!(step.compile_count(), 1);
    let accuracy = model.accuracy(&test).unwrap();
    assert!(accuracy >= 0.95, "held-out accuracy {accuracy}");
}

/// Parameter shapes, in `Cnn::params` order.
const SHAPES: [&[usize]; 8] = [
    &[3, 3, 1, 16],
    &[16],
    &[3, 3, 16, 32],
    &[32],
    &[128, 64],
    &[64],
    &[64, 10],
    &[10],
];

fn values(n: usize, seed: u64, scale: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0) * scale
        })
        .collect()
}

/// 3x3 SAME convolution + bias + relu, then 2x2 max pool, by loops:
/// `x` is `[h, w, c]` of one image.
fn block(x: &[f64], hw: usize, c: usize, k: &[f64], b: &[f64], o: usize) -> Vec<f64> {
    let mut conv = vec![0.0; hw * hw * o];
    for i in 0..hw {
        for j in 0..hw {
            for f in 0..o {
                let mut s = b[f];
                for di in 0..3 {
                    for dj in 0..3 {
                        let (r, q) = (i as i64 + di as i64 - 1, j as i64 + dj as i64 - 1);
                        if r < 0 || q < 0 || r >= hw as i64 || q >= hw as i64 {
                            continue;
                        }
                        for ch in 0..c {
                            s += x[(r as usize * hw + q as usize) * c + ch]
                                * k[((di * 3 + dj) * c + ch) * o + f];
                        }
                    }
                }
                conv[(i * hw + j) * o + f] = s.max(0.0);
            }
        }
    }
    let h = hw / 2;
    let mut pooled = vec![f64::NEG_INFINITY; h * h * o];
    for i in 0..hw {
        for j in 0..hw {
            for f in 0..o {
                let at = ((i / 2) * h + j / 2) * o + f;
                pooled[at] = pooled[at].max(conv[(i * hw + j) * o + f]);
            }
        }
    }
    pooled
}

fn dense(x: &[f64], w: &[f64], b: &[f64], relu: bool) -> Vec<f64> {
    let (n, m) = (x.len(), b.len());
    (0..m)
        .map(|j| {
            let s = b[j] + (0..n).map(|i| x[i] * w[i * m + j]).sum::<f64>();
            if relu { s.max(0.0) } else { s }
        })
        .collect()
}

fn reference_logits(p: &[Vec<f64>], image: &[f64]) -> Vec<f64> {
    let h = block(image, 8, 1, &p[0], &p[1], 16);
    let h = block(&h, 4, 16, &p[2], &p[3], 32);
    let h = dense(&h, &p[4], &p[5], true);
    dense(&h, &p[6], &p[7], false)
}

fn reference_loss(p: &[Vec<f64>], images: &[f64], labels: &[usize]) -> f64 {
    let mut total = 0.0;
    for (n, &label) in labels.iter().enumerate() {
        let z = reference_logits(p, &images[n * 64..n * 64 + 64]);
        let m = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
        total += lse - z[label];
    }
    total / labels.len() as f64
}

#[test]
fn forward_and_gradients_match_a_loop_reference() {
    let p: Vec<Vec<f64>> = SHAPES
        .iter()
        .enumerate()
        .map(|(i, s)| values(s.iter().product(), i as u64 + 10, 0.4))
        .collect();
    let images = values(2 * 64, 99, 1.0)
        .iter()
        .map(|v| v.abs())
        .collect::<Vec<_>>();
    let labels = [3usize, 7];
    let tensors: Vec<Tensor> = p
        .iter()
        .zip(SHAPES)
        .map(|(v, s)| {
            let dims: Vec<i64> = s.iter().map(|&d| d as i64).collect();
            Tensor::from_vec(v.clone(), &dims).unwrap()
        })
        .collect();
    let x = Tensor::from_vec(images.clone(), &[2, 8, 8, 1]).unwrap();
    let logits = cnn::logits_with(&tensors, &x, None)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for n in 0..2 {
        let want = reference_logits(&p, &images[n * 64..n * 64 + 64]);
        for c in 0..10 {
            assert!(
                (logits[n * 10 + c] - want[c]).abs() < 1e-10,
                "logit {n},{c}"
            );
        }
    }
    let tape = GradientTape::new();
    tensors.iter().for_each(|t| tape.watch(t));
    let y = Tensor::from_vec(vec![3i32, 7], &[2]).unwrap();
    let loss = nn::sparse_softmax_cross_entropy_with_logits(
        &y,
        &cnn::logits_with(&tensors, &x, None).unwrap(),
    )
    .unwrap()
    .reduce_mean(&[], false)
    .unwrap();
    assert!((loss.item::<f64>().unwrap() - reference_loss(&p, &images, &labels)).abs() < 1e-10);
    let sources: Vec<Source> = tensors.iter().map(Source::from).collect();
    let grads = tape.gradient(&loss, &sources).unwrap();
    let h = 1e-6;
    for (k, g) in grads.iter().enumerate() {
        let g = g.as_ref().unwrap().to_vec::<f64>().unwrap();
        // A few entries of each parameter, against central differences.
        for idx in [0, p[k].len() / 3, p[k].len() - 1] {
            let mut up = p.clone();
            let mut down = p.clone();
            up[k][idx] += h;
            down[k][idx] -= h;
            let numeric = (reference_loss(&up, &images, &labels)
                - reference_loss(&down, &images, &labels))
                / (2.0 * h);
            assert!(
                (g[idx] - numeric).abs() < 1e-6 * (1.0 + numeric.abs()),
                "param {k}[{idx}]: {} vs {numeric}",
                g[idx]
            );
        }
    }
}
