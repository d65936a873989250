//! nn helpers against loops written here: cross-entropy
//! losses (the sparse one without a one-hot) and their gradients,
//! layer_norm, batch_norm's training and inference statistics (eager and
//! in a compiled step), embedding_lookup.

use xlafn::nn;
use xlafn::prelude::*;

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0
        })
        .collect()
}

fn softmax_row(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = row.iter().map(|v| (v - m).exp()).sum();
    row.iter().map(|v| (v - m).exp() / z).collect()
}

#[test]
fn cross_entropies_and_their_gradients() {
    let logits = values(12, 1);
    let lt = Tensor::from_vec(logits.clone(), &[3, 4]).unwrap();
    let labels = [2i32, 0, 3];
    let sparse = Tensor::vector(&labels).unwrap();
    let mut onehot = vec![0.0; 12];
    for (r, &l) in labels.iter().enumerate() {
        onehot[r * 4 + l as usize] = 1.0;
    }
    let dense = Tensor::from_vec(onehot.clone(), &[3, 4]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&lt);
    let ls = nn::sparse_softmax_cross_entropy_with_logits(&sparse, &lt).unwrap();
    let ld = nn::softmax_cross_entropy_with_logits(&dense, &lt).unwrap();
    let (s, d) = (ls.to_vec::<f64>().unwrap(), ld.to_vec::<f64>().unwrap());
    for r in 0..3 {
        let p = softmax_row(&logits[r * 4..r * 4 + 4]);
        let want = -p[labels[r] as usize].ln();
        assert!((s[r] - want).abs() < 1e-12 && (d[r] - want).abs() < 1e-12);
    }
    let g = tape
        .gradient(&ls.reduce_sum(&[], false).unwrap(), &[Source::from(&lt)])
        .unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    for r in 0..3 {
        let p = softmax_row(&logits[r * 4..r * 4 + 4]);
        for c in 0..4 {
            assert!((g[r * 4 + c] - (p[c] - onehot[r * 4 + c])).abs() < 1e-12);
        }
    }
    // Traced, the same numbers.
    let f = function(|l: Tensor, z: Tensor| nn::sparse_softmax_cross_entropy_with_logits(&l, &z));
    assert_eq!(f.call((&sparse, &lt)).unwrap().to_vec::<f64>().unwrap(), s);
    assert!(nn::sparse_softmax_cross_entropy_with_logits(&lt, &lt).is_err());
}

#[test]
fn layer_norm_matches_a_loop() {
    let x = values(8, 2);
    let xt = Tensor::from_vec(x.clone(), &[2, 4]).unwrap();
    let gamma = Tensor::vector(&[1.0f64, 2.0, 0.5, -1.0]).unwrap();
    let beta = Tensor::vector(&[0.0f64, 0.1, 0.2, 0.3]).unwrap();
    let y = nn::layer_norm(&xt, &[1], Some(&gamma), Some(&beta), 1e-5)
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let (g, b) = ([1.0, 2.0, 0.5, -1.0], [0.0, 0.1, 0.2, 0.3]);
    for r in 0..2 {
        let row = &x[r * 4..r * 4 + 4];
        let m = row.iter().sum::<f64>() / 4.0;
        let v = row.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / 4.0;
        for c in 0..4 {
            let want = (row[c] - m) / (v + 1e-5).sqrt() * g[c] + b[c];
            assert!((y[r * 4 + c] - want).abs() < 1e-12);
        }
    }
}

#[test]
fn batch_norm_training_and_inference() {
    let x = values(4 * 3, 3);
    let xt = Tensor::from_vec(x.clone(), &[4, 3]).unwrap();
    let bn = nn::BatchNorm::new(3, DType::F64).unwrap();
    let y = bn.call(&xt, true).unwrap().to_vec::<f64>().unwrap();
    let mut means = [0.0; 3];
    let mut vars = [0.0; 3];
    for c in 0..3 {
        let col: Vec<f64> = (0..4).map(|r| x[r * 3 + c]).collect();
        means[c] = col.iter().sum::<f64>() / 4.0;
        vars[c] = col.iter().map(|a| (a - means[c]).powi(2)).sum::<f64>() / 4.0;
        for r in 0..4 {
            let want = (x[r * 3 + c] - means[c]) / (vars[c] + 1e-3).sqrt();
            assert!((y[r * 3 + c] - want).abs() < 1e-12);
        }
    }
    let mm = bn.moving_mean.read().to_vec::<f64>().unwrap();
    let mv = bn.moving_variance.read().to_vec::<f64>().unwrap();
    for c in 0..3 {
        assert!((mm[c] - 0.01 * means[c]).abs() < 1e-12);
        assert!((mv[c] - (0.99 + 0.01 * vars[c])).abs() < 1e-12);
    }
    // Inference uses the moving statistics.
    let yi = bn.call(&xt, false).unwrap().to_vec::<f64>().unwrap();
    for r in 0..4 {
        for c in 0..3 {
            let want = (x[r * 3 + c] - mm[c]) / (mv[c] + 1e-3).sqrt();
            assert!((yi[r * 3 + c] - want).abs() < 1e-12);
        }
    }
    // In a compiled training step, the moving statistics move every call.
    let step = function({
        let bn = bn.clone();
        move |x: Tensor| bn.call(&x, true)
    });
    step.call((&xt,)).unwrap();
    step.call((&xt,)).unwrap();
    assert_eq!(step.tracing_count(), 1);
    let mm3 = bn.moving_mean.read().to_vec::<f64>().unwrap();
    for c in 0..3 {
        let want = means[c] * (1.0 - 0.99f64.powi(3));
        assert!((mm3[c] - want).abs() < 1e-12, "{} vs {want}", mm3[c]);
    }
}

/// A BatchNorm called on another channel count says so by the layer's
/// name, in training and inference, eagerly and traced (it said only
/// `add: incompatible shapes for broadcasting`); its variables stay as
/// they were.
#[test]
fn batch_norm_on_the_wrong_channel_count_names_the_layer() {
    let bn = nn::BatchNorm::new(3, DType::F32).unwrap();
    let x = Tensor::fill(&[2, 4], 1.0, DType::F32).unwrap();
    let want = "InvalidArgumentError: BatchNorm: built for 3 channels (axis -1), called on input \
                f32(2, 4) with 4";
    for training in [true, false] {
        let e = bn.call(&x, training).unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { op, .. } if op == "BatchNorm"),
            "{e:?}"
        );
        assert_eq!(e.to_string(), want);
    }
    let step = function({
        let bn = bn.clone();
        move |x: Tensor| bn.call(&x, true)
    });
    assert_eq!(step.call((&x,)).unwrap_err().to_string(), want);
    assert_eq!(bn.moving_mean.read().to_vec::<f32>().unwrap(), vec![0.0; 3]);
    let e = bn.call(&Tensor::scalar(1f32), false).unwrap_err();
    assert!(
        e.to_string().contains("called on input f32() with no axis"),
        "{e}"
    );
    // The right count still works, with any leading axes.
    let ok = Tensor::fill(&[2, 5, 3], 1.0, DType::F32).unwrap();
    assert_eq!(bn.call(&ok, false).unwrap().dims(), vec![2, 5, 3]);
}

#[test]
fn embedding_lookup_gathers_rows() {
    let table = Tensor::from_vec((0..12).map(|v| v as f32).collect(), &[4, 3]).unwrap();
    let ids = Tensor::from_vec(vec![3i32, 0, 3], &[3]).unwrap();
    let got = nn::embedding_lookup(&table, &ids).unwrap();
    assert_eq!(got.dims(), vec![3, 3]);
    assert_eq!(
        got.to_vec::<f32>().unwrap(),
        vec![9., 10., 11., 0., 1., 2., 9., 10., 11.]
    );
}

/// The compiled gradient of a small classifier's loss: `[32, 10]` logits
/// in f32 once failed to compile ("Fusion kind not implemented on CPU":
/// XLA expands the gradient's scatter into a loop, and its XNNPACK graph
/// fusion, chosen for small programs, cannot compile inside one). The
/// gradient is `(softmax - onehot) / batch`, checked row by row.
#[test]
fn a_small_sparse_cross_entropy_gradient_compiles_and_matches() {
    let (b, c) = (32usize, 10usize);
    let logits: Vec<f32> = values(b * c, 5).iter().map(|v| *v as f32).collect();
    let labels: Vec<i32> = (0..b).map(|i| (i * 7 % c) as i32).collect();
    let f = function(|l: Tensor, z: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&z);
        let loss = nn::sparse_softmax_cross_entropy_with_logits(&l, &z)?.reduce_mean(&[], false)?;
        let g = tape
            .gradient(&loss, &[(&z).into()])?
            .remove(0)
            .expect("watched");
        Ok((loss, g))
    });
    let z = Tensor::from_vec(logits.clone(), &[b as i64, c as i64]).unwrap();
    let (_, g) = f
        .call((Tensor::from_vec(labels.clone(), &[b as i64]).unwrap(), z))
        .unwrap();
    let g = g.to_vec::<f32>().unwrap();
    for r in 0..b {
        let row: Vec<f64> = logits[r * c..(r + 1) * c]
            .iter()
            .map(|v| *v as f64)
            .collect();
        let p = softmax_row(&row);
        for k in 0..c {
            let onehot = if k == labels[r] as usize { 1.0 } else { 0.0 };
            let want = (p[k] - onehot) / b as f64;
            assert!(
                (g[r * c + k] as f64 - want).abs() < 1e-6,
                "row {r} class {k}"
            );
        }
    }
}
