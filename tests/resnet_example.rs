//! The ResNet of `examples/resnet.rs`, at tiny sizes: its compiled
//! training step lowers the loss with one trace; in inference mode it
//! computes what a direct loop over its variables computes with the batch
//! norms' moving statistics, so a prediction does not depend on the rest
//! of the batch (in training mode it does); a checkpoint carries it whole.

#[path = "../examples/common/cnn.rs"]
mod cnn;
#[path = "../examples/common/resnet.rs"]
mod resnet;

use std::collections::HashMap;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn::layers::{Layer, Mode};

/// Two stages: 4 channels at 8x8 (an identity shortcut), 8 at 4x4 (a
/// projection shortcut).
const WIDTHS: [i64; 2] = [4, 8];

fn trained() -> (Arc<resnet::ResNet>, Vec<f32>, resnet::TrainStep, cnn::Split) {
    let (train, test) = cnn::load_digits().unwrap();
    let model = Arc::new(resnet::ResNet::new(3, &WIDTHS).unwrap());
    let (losses, step) = resnet::train(&model, &train, 32, 40, 0.05).unwrap();
    (model, losses, step, test)
}

/// Every variable's values by name, as f64.
fn values(model: &resnet::ResNet) -> HashMap<String, Vec<f64>> {
    model
        .named_variables()
        .into_iter()
        .map(|(name, v)| {
            let host = v.read().to_vec::<f32>().unwrap();
            (name, host.into_iter().map(f64::from).collect())
        })
        .collect()
}

/// A SAME convolution of one image `x` `[hw, hw, c]` with a `[k, k, c, o]`
/// kernel and `stride` (TensorFlow's padding: the odd pixel at the end).
fn conv(x: &[f64], hw: usize, c: usize, kernel: &[f64], k: usize, o: usize, s: usize) -> Vec<f64> {
    let out = hw.div_ceil(s);
    let pad = ((out - 1) * s + k).saturating_sub(hw) / 2;
    let mut y = vec![0.0; out * out * o];
    for i in 0..out {
        for j in 0..out {
            for di in 0..k {
                for dj in 0..k {
                    let r = (i * s + di) as i64 - pad as i64;
                    let q = (j * s + dj) as i64 - pad as i64;
                    if r < 0 || q < 0 || r >= hw as i64 || q >= hw as i64 {
                        continue;
                    }
                    for ch in 0..c {
                        let xv = x[(r as usize * hw + q as usize) * c + ch];
                        for f in 0..o {
                            y[(i * out + j) * o + f] +=
                                xv * kernel[((di * k + dj) * c + ch) * o + f];
                        }
                    }
                }
            }
        }
    }
    y
}

/// Batch norm in inference: the moving statistics of `prefix`, epsilon
/// 1e-3.
fn bn(x: &[f64], p: &HashMap<String, Vec<f64>>, prefix: &str) -> Vec<f64> {
    let get = |n: &str| &p[&format!("{prefix}.{n}")];
    let (g, b, m, v) = (
        get("gamma"),
        get("beta"),
        get("moving_mean"),
        get("moving_variance"),
    );
    let c = g.len();
    x.iter()
        .enumerate()
        .map(|(i, a)| (a - m[i % c]) / (v[i % c] + 1e-3).sqrt() * g[i % c] + b[i % c])
        .collect()
}

fn relu(x: Vec<f64>) -> Vec<f64> {
    x.into_iter().map(|a| a.max(0.0)).collect()
}

/// The model's logits for one 8x8 image, by loops, in inference mode.
fn reference_logits(p: &HashMap<String, Vec<f64>>, image: &[f64]) -> Vec<f64> {
    let c0 = WIDTHS[0] as usize;
    let h = conv(image, 8, 1, &p["stem.layers.0.kernel"], 3, c0, 1);
    let mut h = relu(bn(&h, p, "stem.layers.1"));
    let (mut hw, mut cin) = (8, c0);
    for (i, &w) in WIDTHS.iter().enumerate() {
        let (cout, s) = (w as usize, if i == 0 { 1 } else { 2 });
        let at = |n: &str| format!("blocks.{i}.{n}");
        let a = conv(&h, hw, cin, &p[&at("conv1.kernel")], 3, cout, s);
        let out = hw.div_ceil(s);
        let a = relu(bn(&a, p, &at("bn1")));
        let a = bn(
            &conv(&a, out, cout, &p[&at("conv2.kernel")], 3, cout, 1),
            p,
            &at("bn2"),
        );
        let skip = match p.get(&at("shortcut.layers.0.kernel")) {
            Some(k) => bn(
                &conv(&h, hw, cin, k, 1, cout, s),
                p,
                &at("shortcut.layers.1"),
            ),
            None => h.clone(),
        };
        h = relu(a.iter().zip(&skip).map(|(x, y)| x + y).collect());
        (hw, cin) = (out, cout);
    }
    let pooled: Vec<f64> = (0..cin)
        .map(|ch| (0..hw * hw).map(|q| h[q * cin + ch]).sum::<f64>() / (hw * hw) as f64)
        .collect();
    let (w, b) = (&p["head.kernel"], &p["head.bias"]);
    (0..10)
        .map(|j| b[j] + (0..cin).map(|i| pooled[i] * w[i * 10 + j]).sum::<f64>())
        .collect()
}

/// Logits of rows `rows` of `split` in `mode`, as f64 rows.
fn logits(
    model: &resnet::ResNet,
    split: &cnn::Split,
    rows: &[usize],
    mode: &Mode,
) -> Vec<Vec<f64>> {
    let (x, _) = split.batch(rows).unwrap();
    let z = model.call(&x, mode).unwrap().to_vec::<f32>().unwrap();
    z.chunks(10)
        .map(|r| r.iter().map(|v| f64::from(*v)).collect())
        .collect()
}

#[test]
fn training_lowers_the_loss_and_inference_uses_the_moving_statistics() {
    let (model, losses, step, test) = trained();
    assert!(losses.iter().all(|l| l.is_finite()));
    assert_eq!((step.tracing_count(), step.compile_count()), (1, 1));
    let mean = |l: &[f32]| l.iter().sum::<f32>() / l.len() as f32;
    let (first, last) = (mean(&losses[..5]), mean(&losses[losses.len() - 5..]));
    assert!(last < 0.8 * first, "loss {first} -> {last}");

    // The moving statistics moved away from their starting 0 and 1.
    let p = values(&model);
    assert!(p["blocks.1.bn2.moving_mean"].iter().any(|m| m.abs() > 1e-3));
    assert!(
        p["stem.layers.1.moving_variance"]
            .iter()
            .any(|v| (v - 1.0).abs() > 1e-3)
    );

    // Inference mode is the loop reference on the moving statistics.
    let rows = [0usize, 1, 2, 3];
    let got = logits(&model, &test, &rows, &Mode::inference());
    for (n, &r) in rows.iter().enumerate() {
        let image: Vec<f64> = test.images[r * 64..r * 64 + 64]
            .iter()
            .map(|v| f64::from(*v))
            .collect();
        let want = reference_logits(&p, &image);
        for c in 0..10 {
            assert!(
                (got[n][c] - want[c]).abs() < 1e-4 * (1.0 + want[c].abs()),
                "image {r}, logit {c}: {} vs {}",
                got[n][c],
                want[c]
            );
        }
    }

    // So image 0's logits do not depend on the images beside it...
    let other = logits(&model, &test, &[0, 10, 11, 12, 13, 14], &Mode::inference());
    for c in 0..10 {
        assert!((other[0][c] - got[0][c]).abs() < 1e-5, "logit {c}");
    }
    // ... while in training mode (batch statistics) they do.
    let a = logits(&model, &test, &[0, 1, 2, 3], &Mode::training());
    let b = logits(&model, &test, &[0, 10, 11, 12, 13, 14], &Mode::training());
    let moved = (0..10)
        .map(|c| (a[0][c] - b[0][c]).abs())
        .fold(0.0, f64::max);
    assert!(moved > 1e-3, "training-mode logits moved by only {moved}");
}

#[test]
fn a_checkpoint_carries_the_weights_and_the_moving_statistics() {
    let (model, _, _, test) = trained();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("resnet.safetensors");
    xlafn::checkpoint::save(&*model, &path).unwrap();
    let restored = resnet::ResNet::new(4, &WIDTHS).unwrap();
    let rows: Vec<usize> = (0..16).collect();
    assert_ne!(
        logits(&restored, &test, &rows, &Mode::inference()),
        logits(&model, &test, &rows, &Mode::inference())
    );
    xlafn::checkpoint::restore(&restored, &path).unwrap();
    assert_eq!(values(&restored), values(&model));
    assert_eq!(
        logits(&restored, &test, &rows, &Mode::inference()),
        logits(&model, &test, &rows, &Mode::inference())
    );
}
