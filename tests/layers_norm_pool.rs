//! `xlafn::nn::layers`' normalizations (`LayerNorm`, `RmsNorm`,
//! `GroupNorm`, `BatchNorm`), `Dropout` and pooling layers against
//! references written here as plain loops over `Vec<f64>` (no xlafn ops),
//! each eagerly and in a compiled function. Their gradients are checked
//! with the other layers' in layers.rs.

use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn::layers::*;
use xlafn::ops::conv::Padding;
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, check_eager_and_compiled, f32s, f64s, host, key, names, values};

/// LayerNorm over the last axis, by loops, with `gamma` and `beta`.
fn layer_norm_ref(x: &[f64], n: usize, eps: f64, gamma: &[f64], beta: &[f64]) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let m = row.iter().sum::<f64>() / n as f64;
            let v = row.iter().map(|a| (a - m).powi(2)).sum::<f64>() / n as f64;
            row.iter()
                .enumerate()
                .map(move |(i, a)| (a - m) / (v + eps).sqrt() * gamma[i] + beta[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

fn rms_norm_ref(x: &[f64], n: usize, eps: f64, gamma: &[f64]) -> Vec<f64> {
    x.chunks(n)
        .flat_map(|row| {
            let ms = row.iter().map(|a| a * a).sum::<f64>() / n as f64;
            row.iter()
                .enumerate()
                .map(move |(i, a)| a / (ms + eps).sqrt() * gamma[i])
                .collect::<Vec<_>>()
        })
        .collect()
}

/// GroupNorm of `[batch, positions, channels]` by loops.
fn group_norm_ref(
    x: &[f64],
    (batch, positions, channels): (usize, usize, usize),
    groups: usize,
    eps: f64,
    gamma: &[f64],
    beta: &[f64],
) -> Vec<f64> {
    let per = channels / groups;
    let mut y = vec![0.0; x.len()];
    let at = |b: usize, p: usize, c: usize| (b * positions + p) * channels + c;
    for b in 0..batch {
        for g in 0..groups {
            let mut vals = vec![];
            for p in 0..positions {
                for c in g * per..(g + 1) * per {
                    vals.push(x[at(b, p, c)]);
                }
            }
            let m = vals.iter().sum::<f64>() / vals.len() as f64;
            let v = vals.iter().map(|a| (a - m).powi(2)).sum::<f64>() / vals.len() as f64;
            for p in 0..positions {
                for c in g * per..(g + 1) * per {
                    let i = at(b, p, c);
                    y[i] = (x[i] - m) / (v + eps).sqrt() * gamma[c] + beta[c];
                }
            }
        }
    }
    y
}

#[test]
fn normalizations_match_loops() {
    let x = values(3 * 2 * 6, 13, -3.0, 5.0);
    let gamma = values(6, 14, 0.5, 1.5);
    let beta = values(6, 15, -0.5, 0.5);
    let set = |v: &Variable, h: &[f64]| v.assign(&f32s(h, &[6])).unwrap();

    let ln = LayerNorm::new(6).unwrap();
    assert_eq!(names(&ln), ["gamma", "beta"]);
    set(ln.gamma().unwrap(), &gamma);
    set(ln.beta().unwrap(), &beta);
    let want = layer_norm_ref(&x, 6, 1e-5, &gamma, &beta);
    check_eager_and_compiled(
        Arc::new(ln),
        &f32s(&x, &[3, 2, 6]),
        &want,
        2e-5,
        "LayerNorm",
    );

    let ln = LayerNorm::new(6)
        .unwrap()
        .epsilon(1e-3)
        .affine(false, false)
        .unwrap();
    assert!(ln.variables().is_empty());
    let got = host(&ln.forward(&f32s(&x, &[6, 6])).unwrap());
    assert_close(
        &got,
        &layer_norm_ref(&x, 6, 1e-3, &[1.0; 6], &[0.0; 6]),
        2e-5,
        "plain",
    );
    assert_eq!(names(&ln.build(6).unwrap()), Vec::<String>::new());

    let rms = RmsNorm::new(6).unwrap();
    assert_eq!(names(&rms), ["gamma"]);
    set(rms.gamma().unwrap(), &gamma);
    let want = rms_norm_ref(&x, 6, 1e-6, &gamma);
    check_eager_and_compiled(Arc::new(rms), &f32s(&x, &[3, 2, 6]), &want, 2e-5, "RmsNorm");

    for groups in [1, 2, 3, 6] {
        let gn = GroupNorm::new(groups, 6).unwrap();
        set(gn.gamma().unwrap(), &gamma);
        set(gn.beta().unwrap(), &beta);
        let want = group_norm_ref(&x, (3, 2, 6), groups as usize, 1e-5, &gamma, &beta);
        let what = format!("GroupNorm({groups})");
        check_eager_and_compiled(Arc::new(gn), &f32s(&x, &[3, 2, 6]), &want, 2e-5, &what);
    }
    // Rank 4 (two spatial axes) is the same as the positions flattened.
    let gn = GroupNorm::new(2, 6).unwrap().epsilon(1e-3);
    let x4 = values(2 * 2 * 3 * 6, 16, -1.0, 2.0);
    let got = host(&gn.forward(&f32s(&x4, &[2, 2, 3, 6])).unwrap());
    let want = group_norm_ref(&x4, (2, 6, 6), 2, 1e-3, &[1.0; 6], &[0.0; 6]);
    assert_close(&got, &want, 2e-5, "GroupNorm rank 4");
    let e = GroupNorm::new(4, 6).unwrap_err();
    assert!(
        e.to_string().contains("4 groups do not divide 6 channels"),
        "{e}"
    );
}

/// bf16 inputs: statistics in f32, the result bf16 and as close to the f32
/// reference as bf16's 8 bits allow; the weights stay f32.
#[test]
fn normalizations_of_bf16_inputs_compute_statistics_in_f32() {
    // A large common offset: a bf16 mean/variance would lose the spread.
    let x: Vec<f64> = values(4 * 8, 17, -1.0, 1.0)
        .iter()
        .map(|v| 100.0 + v)
        .collect();
    let xb = f32s(&x, &[4, 8]).cast(DType::BF16).unwrap();
    // The reference sees the same rounded inputs.
    let xr = host(&xb);
    let layers: Vec<(Box<dyn Layer>, Vec<f64>)> = vec![
        (
            Box::new(LayerNorm::new(8).unwrap()),
            layer_norm_ref(&xr, 8, 1e-5, &[1.0; 8], &[0.0; 8]),
        ),
        (
            Box::new(RmsNorm::new(8).unwrap()),
            rms_norm_ref(&xr, 8, 1e-6, &[1.0; 8]),
        ),
        (
            Box::new(GroupNorm::new(2, 8).unwrap()),
            group_norm_ref(&xr, (4, 1, 8), 2, 1e-5, &[1.0; 8], &[0.0; 8]),
        ),
    ];
    for (layer, want) in layers {
        let y = layer.forward(&xb).unwrap();
        assert_eq!(y.dtype(), DType::BF16);
        assert_close(&host(&y), &want, 1e-2, "bf16");
        assert!(layer.variables().iter().all(|v| v.dtype() == DType::F32));
    }
}

#[test]
fn batch_norm_is_a_layer_whose_mode_picks_the_statistics() {
    let x = values(4 * 3, 21, -2.0, 2.0);
    let xt = f64s(&x, &[4, 3]);
    let bn = BatchNorm::new(3, DType::F64).unwrap();
    let model = Sequential::new().add(bn.clone());
    // Inference: moving mean 0, variance 1.
    let y = host(&model.forward(&xt).unwrap());
    assert_close(
        &y,
        &x.iter()
            .map(|v| v / (1.0f64 + 1e-3).sqrt())
            .collect::<Vec<_>>(),
        1e-12,
        "inference",
    );
    assert_eq!(host(&bn.moving_mean.read()), vec![0.0; 3]);
    // Training: batch statistics, and the moving mean moves by 1 - 0.99.
    let y = host(&model.call(&xt, &Mode::training()).unwrap());
    let mut means = [0.0; 3];
    for c in 0..3 {
        let col: Vec<f64> = (0..4).map(|r| x[r * 3 + c]).collect();
        means[c] = col.iter().sum::<f64>() / 4.0;
        let var = col.iter().map(|a| (a - means[c]).powi(2)).sum::<f64>() / 4.0;
        for r in 0..4 {
            let want = (x[r * 3 + c] - means[c]) / (var + 1e-3).sqrt();
            assert!((y[r * 3 + c] - want).abs() < 1e-12);
        }
    }
    let mm = host(&bn.moving_mean.read());
    assert_close(&mm, &means.map(|m| 0.01 * m), 1e-12, "moving mean");
    // The inherent call takes a bool or a mode; Layer::call a mode.
    let a = host(&bn.call(&xt, false).unwrap());
    let b = host(&Layer::call(&bn, &xt, &Mode::inference()).unwrap());
    assert_eq!(a, b);
    let mode = Mode::inference();
    assert_eq!(host(&bn.call(&xt, &mode).unwrap()), a);
    assert!(!mode.is_training());
    // xlafn::nn::BatchNorm is the same type.
    let _: xlafn::nn::BatchNorm = bn;
}

#[test]
fn dropout_needs_a_key_in_training_and_is_the_identity_otherwise() {
    let x = f32s(&values(400, 23, 0.5, 1.5), &[20, 20]);
    let drop = Dropout::new(0.25).unwrap();
    assert_eq!(host(&drop.forward(&x).unwrap()), host(&x));
    let e = drop.call(&x, &Mode::training()).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { op, .. } if op == "Dropout"),
        "{e:?}"
    );
    assert!(e.to_string().contains("Mode::training_with_key"), "{e}");
    // A rate of 0 needs no key.
    let none = Dropout::new(0.0).unwrap();
    assert_eq!(host(&none.call(&x, &Mode::training()).unwrap()), host(&x));
    assert!(Dropout::new(1.0).is_err());

    let mode = Mode::training_with_key(&key(24));
    let y = host(&drop.call(&x, &mode).unwrap());
    let xs = host(&x);
    let mut dropped = 0;
    for (a, b) in y.iter().zip(&xs) {
        if *a == 0.0 {
            dropped += 1;
        } else {
            assert!((a - b / 0.75).abs() < 1e-6, "{a} vs {b}");
        }
    }
    assert!((60..140).contains(&dropped), "{dropped} of 400 dropped");
    // Compiled with the key as an argument: the same mask.
    let f = function({
        let drop = drop.clone();
        move |x: Tensor, k: Tensor| drop.call(&x, &Mode::training_with_key(&k))
    });
    assert_eq!(host(&f.call((&x, &key(24))).unwrap()), y);
    // Two dropouts of a Sequential draw different masks from one key.
    let two = Sequential::new()
        .add(drop.clone())
        .add(Lambda::new(|x| x.mul_scalar(1.0)));
    let three = Sequential::new().add(Activation::Linear).add(drop.clone());
    let a = host(&two.call(&x, &mode).unwrap());
    let b = host(&three.call(&x, &mode).unwrap());
    assert_ne!(a, b);
}

/// `[batch, w, c]` or `[batch, h, w, c]` windows by loops; `avg` counts
/// only the elements inside the input.
fn pool_ref(
    x: &[f64],
    dims: &[usize],
    window: &[usize],
    strides: &[usize],
    same: bool,
    avg: bool,
) -> (Vec<f64>, Vec<usize>) {
    let n = dims.len() - 2;
    let (batch, c) = (dims[0], dims[n + 1]);
    let mut out_dims = vec![batch];
    let mut lo = vec![];
    for i in 0..n {
        let (size, k, s) = (dims[i + 1], window[i], strides[i]);
        let out = if same {
            size.div_ceil(s)
        } else {
            (size - k) / s + 1
        };
        let total = if same {
            ((out - 1) * s + k).saturating_sub(size)
        } else {
            0
        };
        out_dims.push(out);
        lo.push(total / 2);
    }
    out_dims.push(c);
    let spatial_out: Vec<usize> = out_dims[1..=n].to_vec();
    let count: usize = spatial_out.iter().product();
    let mut y = vec![];
    for b in 0..batch {
        for o in 0..count {
            let mut pos = vec![0; n];
            let mut rest = o;
            for i in (0..n).rev() {
                pos[i] = rest % spatial_out[i];
                rest /= spatial_out[i];
            }
            for ch in 0..c {
                let (mut best, mut sum, mut num) = (f64::NEG_INFINITY, 0.0, 0);
                let wcount: usize = window.iter().product();
                for w in 0..wcount {
                    let mut wi = vec![0; n];
                    let mut r = w;
                    for i in (0..n).rev() {
                        wi[i] = r % window[i];
                        r /= window[i];
                    }
                    let mut flat = b;
                    let mut inside = true;
                    for i in 0..n {
                        let p = (pos[i] * strides[i] + wi[i]) as i64 - lo[i] as i64;
                        if p < 0 || p >= dims[i + 1] as i64 {
                            inside = false;
                        }
                        flat = flat * dims[i + 1] + p.max(0) as usize;
                    }
                    if inside {
                        let v = x[flat * c + ch];
                        best = best.max(v);
                        sum += v;
                        num += 1;
                    }
                }
                y.push(if avg { sum / num as f64 } else { best });
            }
        }
    }
    (y, out_dims)
}

#[test]
fn pooling_matches_loops() {
    let x2 = values(2 * 5 * 6 * 3, 31, -2.0, 2.0);
    let d2 = [2usize, 5, 6, 3];
    let t2 = f32s(&x2, &[2, 5, 6, 3]);
    for (window, strides, same) in [
        ([2, 2], [2, 2], false),
        ([3, 2], [2, 1], true),
        ([3, 3], [1, 2], false),
    ] {
        let pad = if same { Padding::Same } else { Padding::Valid };
        let w = window.map(|v| v as i64);
        let s = strides.map(|v| v as i64);
        let (want, dims) = pool_ref(&x2, &d2, &window, &strides, same, false);
        let max = Arc::new(MaxPool2d::new(w).strides(s).padding(pad.clone()));
        assert_eq!(
            max.forward(&t2).unwrap().dims(),
            dims.iter().map(|&d| d as i64).collect::<Vec<_>>()
        );
        check_eager_and_compiled(max, &t2, &want, 1e-6, "MaxPool2d");
        let (want, _) = pool_ref(&x2, &d2, &window, &strides, same, true);
        let avg = Arc::new(AvgPool2d::new(w).strides(s).padding(pad));
        check_eager_and_compiled(avg, &t2, &want, 1e-5, "AvgPool2d");
    }
    // Default strides are the window.
    let (want, _) = pool_ref(&x2, &d2, &[2, 3], &[2, 3], false, true);
    assert_close(
        &host(&AvgPool2d::new([2, 3]).forward(&t2).unwrap()),
        &want,
        1e-5,
        "default strides",
    );

    let x1 = values(2 * 7 * 2, 32, -2.0, 2.0);
    let t1 = f32s(&x1, &[2, 7, 2]);
    let (want, _) = pool_ref(&x1, &[2, 7, 2], &[3], &[2], true, false);
    check_eager_and_compiled(
        Arc::new(MaxPool1d::new([3]).strides([2]).padding(Padding::Same)),
        &t1,
        &want,
        1e-6,
        "MaxPool1d",
    );
    let (want, _) = pool_ref(&x1, &[2, 7, 2], &[2], &[2], false, true);
    check_eager_and_compiled(Arc::new(AvgPool1d::new([2])), &t1, &want, 1e-5, "AvgPool1d");

    // Global pools over the spatial axes.
    let mut avg = vec![0.0; 2 * 3];
    let mut max = vec![f64::NEG_INFINITY; 2 * 3];
    for b in 0..2 {
        for p in 0..30 {
            for c in 0..3 {
                let v = x2[(b * 30 + p) * 3 + c];
                avg[b * 3 + c] += v / 30.0;
                max[b * 3 + c] = max[b * 3 + c].max(v);
            }
        }
    }
    check_eager_and_compiled(
        Arc::new(GlobalAvgPool::new()),
        &t2,
        &avg,
        1e-5,
        "GlobalAvgPool",
    );
    check_eager_and_compiled(
        Arc::new(GlobalMaxPool::new()),
        &t2,
        &max,
        1e-6,
        "GlobalMaxPool",
    );
    let kept = GlobalMaxPool::new().keepdims(true).forward(&t2).unwrap();
    assert_eq!(kept.dims(), vec![2, 1, 1, 3]);

    // Flatten keeps the row-major order.
    let flat = Flatten::new().forward(&t2).unwrap();
    assert_eq!(flat.dims(), vec![2, 90]);
    assert_close(&host(&flat), &x2, 1e-6, "Flatten");
    assert_eq!(
        Flatten::new()
            .forward(&f32s(&[1.0, 2.0], &[2]))
            .unwrap()
            .dims(),
        vec![2, 1]
    );
}

/// `epsilon`, `momentum` and `torch_momentum` set what a PyTorch port
/// needs: one training batch moves the mean by PyTorch's rule
/// (`0.9 * 0 + 0.1 * mean`), and inference divides by `sqrt(var + eps)`.
#[test]
#[allow(deprecated)] // reads the options back from the fields the builders set
fn batch_norm_builders_give_pytorchs_conventions() {
    let bn = BatchNorm::new(2, DType::F32)
        .unwrap()
        .epsilon(1e-5)
        .torch_momentum(0.1);
    assert!((bn.momentum - 0.9).abs() < 1e-12 && bn.epsilon == 1e-5);
    // Channel 0 holds 1, 3 (mean 2); channel 1 holds 2, 6 (mean 4).
    let x = Tensor::from_vec(vec![1f32, 2., 3., 6.], &[2, 2]).unwrap();
    bn.call(&x, Mode::training()).unwrap();
    assert_close(
        &host(&bn.moving_mean.read()),
        &[0.2, 0.4],
        1e-6,
        "moving mean",
    );
    // Inference: (x - moving_mean) / sqrt(moving_variance + eps).
    let y = host(&bn.call(&x, Mode::inference()).unwrap());
    let var = host(&bn.moving_variance.read());
    let want: Vec<f64> = [1f64, 2., 3., 6.]
        .iter()
        .enumerate()
        .map(|(i, v)| (v - [0.2, 0.4][i % 2]) / (var[i % 2] + 1e-5).sqrt())
        .collect();
    assert_close(&y, &want, 1e-5, "inference");
    let keras = BatchNorm::new(2, DType::F32).unwrap().momentum(0.5);
    assert_eq!(keras.momentum, 0.5);
}
