//! The convolution layers of `xlafn::nn::layers` against references
//! written here as nested loops over `Vec<f64>`: `Conv1d/2d/3d` by the
//! sliding-window sum (strides, each padding, dilation, groups, bias,
//! activation), `ConvTranspose2d` by its scatter definition (each input
//! element adds its kernel-weighted copy to the output), `DepthwiseConv2d`
//! per channel; eagerly and compiled; gradients against central
//! differences; lazy building and errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use std::sync::Arc;
use xlafn::initializers::Initializer;
use xlafn::module::Module;
use xlafn::nn::layers::*;
use xlafn::ops::conv::Padding;
use xlafn::prelude::*;
use xlafn::random;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, host, values};

fn key(seed: u64) -> Tensor {
    random::key(seed).unwrap()
}

fn f32s(v: &[f64], dims: &[usize]) -> Tensor {
    let v: Vec<f32> = v.iter().map(|&x| x as f32).collect();
    let d: Vec<i64> = dims.iter().map(|&d| d as i64).collect();
    Tensor::from_vec(v, &d).unwrap()
}

fn check_eager_and_compiled<L: Layer + Send + Sync + 'static>(
    layer: Arc<L>,
    x: &Tensor,
    want: &[f64],
    want_dims: &[usize],
    what: &str,
) {
    let dims: Vec<i64> = want_dims.iter().map(|&d| d as i64).collect();
    let y = layer.forward(x).unwrap();
    assert_eq!(y.dims(), dims, "{what}");
    assert_close(&host(&y), want, 1e-4, what);
    let f = function({
        let layer = layer.clone();
        move |x: Tensor| layer.forward(&x)
    });
    assert_close(
        &host(&f.call((x,)).unwrap()),
        want,
        1e-4,
        &format!("{what} (compiled)"),
    );
    f.call((x,)).unwrap();
    assert_eq!(f.tracing_count(), 1, "{what}");
}

/// Row-major multi-index of flat index `i` in `dims`.
fn unravel(mut i: usize, dims: &[usize]) -> Vec<usize> {
    let mut idx = vec![0; dims.len()];
    for d in (0..dims.len()).rev() {
        idx[d] = i % dims[d];
        i /= dims[d];
    }
    idx
}

fn ravel(idx: &[usize], dims: &[usize]) -> usize {
    idx.iter().zip(dims).fold(0, |acc, (i, d)| acc * d + i)
}

#[derive(Clone, Copy, Debug)]
enum Pad {
    Valid,
    Same,
    Explicit(i64, i64),
}

impl Pad {
    fn padding(self, n: usize) -> Padding {
        match self {
            Pad::Valid => Padding::Valid,
            Pad::Same => Padding::Same,
            Pad::Explicit(lo, hi) => Padding::Explicit(vec![(lo, hi); n]),
        }
    }

    /// (output size, low padding) of a forward convolution along one axis.
    fn forward(self, size: usize, k: usize, s: usize, d: usize) -> (usize, i64) {
        let kd = (1 + d * (k - 1)) as i64;
        let (size, s) = (size as i64, s as i64);
        match self {
            Pad::Valid => (((size - kd) / s + 1) as usize, 0),
            Pad::Same => {
                let out = (size + s - 1) / s;
                let total = ((out - 1) * s + kd - size).max(0);
                (out as usize, total / 2)
            }
            Pad::Explicit(lo, hi) => (((size + lo + hi - kd) / s + 1) as usize, lo),
        }
    }
}

/// One convolution: input `[batch, spatial.., cin]`, kernel `[k..,
/// cin / groups, cout]`.
struct ConvCase {
    batch: usize,
    spatial: Vec<usize>,
    cin: usize,
    cout: usize,
    k: Vec<usize>,
    strides: Vec<usize>,
    dilation: Vec<usize>,
    pad: Pad,
    groups: usize,
}

/// The sliding-window sum, by loops; returns the output and its dims.
#[allow(clippy::needless_range_loop)]
fn conv_ref(c: &ConvCase, x: &[f64], kernel: &[f64], bias: &[f64]) -> (Vec<f64>, Vec<usize>) {
    let n = c.spatial.len();
    let (mut out_sp, mut lo) = (vec![], vec![]);
    for i in 0..n {
        let (o, l) = c
            .pad
            .forward(c.spatial[i], c.k[i], c.strides[i], c.dilation[i]);
        out_sp.push(o);
        lo.push(l);
    }
    let (cig, cog) = (c.cin / c.groups, c.cout / c.groups);
    let mut xdims = vec![c.batch];
    xdims.extend(&c.spatial);
    xdims.push(c.cin);
    let mut kdims = c.k.clone();
    kdims.extend([cig, c.cout]);
    let positions: usize = out_sp.iter().product();
    let taps: usize = c.k.iter().product();
    let mut y = vec![];
    for b in 0..c.batch {
        for o in 0..positions {
            let op = unravel(o, &out_sp);
            for f in 0..c.cout {
                let g = f / cog;
                let mut sum = bias[f];
                for t in 0..taps {
                    let kp = unravel(t, &c.k);
                    let mut xi = vec![b];
                    let mut inside = true;
                    for i in 0..n {
                        let p = (op[i] * c.strides[i] + kp[i] * c.dilation[i]) as i64 - lo[i];
                        inside &= p >= 0 && p < c.spatial[i] as i64;
                        xi.push(p.max(0) as usize);
                    }
                    if !inside {
                        continue;
                    }
                    for ci in 0..cig {
                        let mut xa = xi.clone();
                        xa.push(g * cig + ci);
                        let mut ka = kp.clone();
                        ka.extend([ci, f]);
                        sum += x[ravel(&xa, &xdims)] * kernel[ravel(&ka, &kdims)];
                    }
                }
                y.push(sum);
            }
        }
    }
    let mut dims = vec![c.batch];
    dims.extend(out_sp);
    dims.push(c.cout);
    (y, dims)
}

fn run_conv_case<const N: usize>(c: ConvCase, seed: u64, activation: Activation) {
    let arr = |v: &[usize]| -> [i64; N] { std::array::from_fn(|i| v[i] as i64) };
    let layer = Conv::<N>::lazy(&key(seed), c.cout as i64, arr(&c.k))
        .unwrap()
        .strides(arr(&c.strides))
        .dilation(arr(&c.dilation))
        .padding(c.pad.padding(N))
        .groups(c.groups as i64)
        .activation(activation)
        .bias_initializer(Initializer::Uniform(-1.0, 1.0))
        .build(c.cin as i64)
        .unwrap();
    let kernel = host(&layer.kernel().unwrap().read());
    let bias = host(&layer.bias().unwrap().read());
    let mut xdims = vec![c.batch];
    xdims.extend(&c.spatial);
    xdims.push(c.cin);
    let x = values(xdims.iter().product(), seed + 100, -1.0, 1.0);
    let (pre, dims) = conv_ref(&c, &x, &kernel, &bias);
    let want: Vec<f64> = match activation {
        Activation::Relu => pre.iter().map(|v| v.max(0.0)).collect(),
        Activation::Linear => pre,
        _ => unreachable!(),
    };
    let what = format!(
        "Conv{N}d {:?} groups {} strides {:?}",
        c.pad, c.groups, c.strides
    );
    check_eager_and_compiled(Arc::new(layer), &f32s(&x, &xdims), &want, &dims, &what);
}

#[test]
fn conv1d_matches_loops() {
    let case = |pad, strides, dilation, groups| ConvCase {
        batch: 2,
        spatial: vec![9],
        cin: 4,
        cout: 6,
        k: vec![3],
        strides: vec![strides],
        dilation: vec![dilation],
        pad,
        groups,
    };
    run_conv_case::<1>(case(Pad::Same, 2, 1, 1), 1, Activation::Linear);
    run_conv_case::<1>(case(Pad::Explicit(1, 2), 1, 2, 2), 2, Activation::Relu);
    run_conv_case::<1>(case(Pad::Valid, 3, 1, 1), 3, Activation::Linear);
}

#[test]
fn conv2d_matches_loops() {
    let case = |pad, strides: [usize; 2], dilation: [usize; 2], groups| ConvCase {
        batch: 2,
        spatial: vec![7, 6],
        cin: 4,
        cout: 6,
        k: vec![3, 2],
        strides: strides.to_vec(),
        dilation: dilation.to_vec(),
        pad,
        groups,
    };
    run_conv_case::<2>(case(Pad::Valid, [2, 1], [1, 1], 2), 4, Activation::Linear);
    run_conv_case::<2>(case(Pad::Same, [1, 1], [2, 1], 1), 5, Activation::Relu);
    run_conv_case::<2>(case(Pad::Same, [2, 3], [1, 1], 1), 6, Activation::Linear);
    run_conv_case::<2>(
        case(Pad::Explicit(2, 0), [1, 2], [1, 2], 2),
        7,
        Activation::Linear,
    );
}

#[test]
fn conv3d_matches_loops() {
    let c = ConvCase {
        batch: 1,
        spatial: vec![4, 5, 3],
        cin: 2,
        cout: 3,
        k: vec![2, 3, 2],
        strides: vec![1, 2, 1],
        dilation: vec![1, 1, 1],
        pad: Pad::Same,
        groups: 1,
    };
    run_conv_case::<3>(c, 8, Activation::Linear);
}

/// The transposed convolution by its scatter definition: input element
/// `x[b, i, c]` adds `x * kernel[k, f, c]` to output position `i * s + k *
/// d - lo`, with `lo` the low padding of the forward convolution whose
/// input has the output's size.
#[allow(clippy::too_many_arguments)]
fn conv_transpose_ref(
    x: &[f64],
    (batch, h, w, cin): (usize, usize, usize, usize),
    kernel: &[f64],
    (kh, kw, f): (usize, usize, usize),
    bias: &[f64],
    strides: [usize; 2],
    dilation: [usize; 2],
    pad: Pad,
) -> (Vec<f64>, [usize; 4]) {
    let size = |i: usize, n: usize, k: usize| -> (usize, i64) {
        let (s, kd) = (strides[i], 1 + dilation[i] * (k - 1));
        let out = match pad {
            Pad::Valid => n * s + kd.saturating_sub(s),
            Pad::Same => n * s,
            Pad::Explicit(lo, hi) => ((n - 1) * s + kd) - (lo + hi) as usize,
        };
        // The forward convolution of an `out`-sized input gives `n`.
        let (back, lo) = pad.forward(out, k, s, dilation[i]);
        assert_eq!(back, n, "the reference's sizes");
        (out, lo)
    };
    let ((oh, lo_h), (ow, lo_w)) = (size(0, h, kh), size(1, w, kw));
    let mut y = vec![0.0; batch * oh * ow * f];
    for b in 0..batch {
        for i in 0..h {
            for j in 0..w {
                for c in 0..cin {
                    let v = x[((b * h + i) * w + j) * cin + c];
                    for a in 0..kh {
                        for e in 0..kw {
                            let p = (i * strides[0] + a * dilation[0]) as i64 - lo_h;
                            let q = (j * strides[1] + e * dilation[1]) as i64 - lo_w;
                            if p < 0 || q < 0 || p >= oh as i64 || q >= ow as i64 {
                                continue;
                            }
                            for o in 0..f {
                                let wk = kernel[((a * kw + e) * f + o) * cin + c];
                                y[((b * oh + p as usize) * ow + q as usize) * f + o] += v * wk;
                            }
                        }
                    }
                }
            }
        }
    }
    for (i, v) in y.iter_mut().enumerate() {
        *v += bias[i % f];
    }
    (y, [batch, oh, ow, f])
}

#[test]
fn conv_transpose2d_matches_the_scatter_definition() {
    let cases = [
        ([3, 3], [2, 2], [1, 1], Pad::Valid),
        ([3, 3], [2, 2], [1, 1], Pad::Same),
        ([3, 2], [1, 2], [1, 2], Pad::Valid),
        ([2, 2], [3, 3], [1, 1], Pad::Valid),
        ([4, 3], [2, 1], [1, 1], Pad::Same),
        ([3, 3], [2, 2], [1, 1], Pad::Explicit(1, 1)),
    ];
    for (i, (k, s, d, pad)) in cases.into_iter().enumerate() {
        let seed = 20 + i as u64;
        let layer = ConvTranspose2d::lazy(&key(seed), 2, k.map(|v| v as i64))
            .unwrap()
            .strides(s.map(|v| v as i64))
            .dilation(d.map(|v| v as i64))
            .padding(pad.padding(2))
            .bias_initializer(Initializer::Uniform(-1.0, 1.0))
            .build(3)
            .unwrap();
        let kernel = host(&layer.kernel().unwrap().read());
        assert_eq!(
            layer.kernel().unwrap().dims(),
            &[k[0] as i64, k[1] as i64, 2, 3]
        );
        let bias = host(&layer.bias().unwrap().read());
        let x = values(2 * 3 * 4 * 3, seed + 100, -1.0, 1.0);
        let (want, dims) =
            conv_transpose_ref(&x, (2, 3, 4, 3), &kernel, (k[0], k[1], 2), &bias, s, d, pad);
        let what = format!("ConvTranspose2d k {k:?} s {s:?} d {d:?} {pad:?}");
        check_eager_and_compiled(
            Arc::new(layer),
            &f32s(&x, &[2, 3, 4, 3]),
            &want,
            &dims,
            &what,
        );
    }
}

#[test]
fn depthwise_conv2d_matches_loops() {
    for (i, (m, s, pad)) in [
        (2, [1, 2], Pad::Same),
        (1, [1, 1], Pad::Valid),
        (3, [2, 2], Pad::Valid),
    ]
    .into_iter()
    .enumerate()
    {
        let seed = 40 + i as u64;
        let layer = DepthwiseConv2d::lazy(&key(seed), [3, 2])
            .unwrap()
            .depth_multiplier(m)
            .strides(s)
            .padding(pad.padding(2))
            .bias_initializer(Initializer::Uniform(-1.0, 1.0))
            .build(3)
            .unwrap();
        let m = m as usize;
        assert_eq!(layer.kernel().unwrap().dims(), &[3, 2, 3, m as i64]);
        let kernel = host(&layer.kernel().unwrap().read());
        let bias = host(&layer.bias().unwrap().read());
        let (h, w, c) = (6, 5, 3);
        let x = values(2 * h * w * c, seed + 100, -1.0, 1.0);
        let s = s.map(|v| v as usize);
        let (oh, lo_h) = pad.forward(h, 3, s[0], 1);
        let (ow, lo_w) = pad.forward(w, 2, s[1], 1);
        let mut want = vec![];
        for b in 0..2 {
            for p in 0..oh {
                for q in 0..ow {
                    for ch in 0..c {
                        for j in 0..m {
                            let mut sum = bias[ch * m + j];
                            for a in 0..3 {
                                for e in 0..2 {
                                    let r = (p * s[0] + a) as i64 - lo_h;
                                    let t = (q * s[1] + e) as i64 - lo_w;
                                    if r < 0 || t < 0 || r >= h as i64 || t >= w as i64 {
                                        continue;
                                    }
                                    let xv = x[((b * h + r as usize) * w + t as usize) * c + ch];
                                    sum += xv * kernel[((a * 2 + e) * c + ch) * m + j];
                                }
                            }
                            want.push(sum);
                        }
                    }
                }
            }
        }
        let what = format!("DepthwiseConv2d m {m} {pad:?}");
        let dims = [2, oh, ow, c * m];
        check_eager_and_compiled(
            Arc::new(layer),
            &f32s(&x, &[2, h, w, c]),
            &want,
            &dims,
            &what,
        );
    }
}

/// d/dv `sum(out() * w)` from the tape against central differences.
fn check_weight_gradient(out: &dyn Fn() -> Result<Tensor>, v: &Variable, what: &str) {
    let dims_out = out().unwrap().dims();
    let n = dims_out.iter().product::<i64>() as usize;
    let w: Vec<f64> = (0..n).map(|i| 0.5 + (i as f64 * 0.37) % 1.0).collect();
    let w = Tensor::from_vec(w, &dims_out).unwrap();
    let loss = || out()?.mul(&w)?.reduce_sum(&[], false);
    let tape = GradientTape::new();
    let l = loss().unwrap();
    let analytic = tape.gradient(&l, &[Source::from(v)]).unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let start = v.read().to_vec::<f64>().unwrap();
    let dims = v.dims().to_vec();
    for i in 0..start.len() {
        let shifted = |d: f64| {
            let mut p = start.clone();
            p[i] += d;
            v.assign(&Tensor::from_vec(p, &dims).unwrap()).unwrap();
            loss().unwrap().item::<f64>().unwrap()
        };
        let numeric = (shifted(1e-6) - shifted(-1e-6)) / 2e-6;
        assert!(
            (analytic[i] - numeric).abs() <= 1e-6 * (1.0 + numeric.abs()),
            "{what}: element {i}: analytic {} vs numeric {numeric}",
            analytic[i]
        );
    }
    v.assign(&Tensor::from_vec(start, &dims).unwrap()).unwrap();
}

#[test]
fn conv_gradients_match_finite_differences() {
    let conv = Conv2d::lazy(&key(50), 2, [2, 3])
        .unwrap()
        .strides([1, 2])
        .padding(Padding::Same)
        .dtype(DType::F64)
        .bias_initializer(Initializer::Uniform(-1.0, 1.0))
        .build(2)
        .unwrap();
    let x = values(4 * 5 * 2, 51, -1.0, 1.0);
    let dims = [1, 4, 5, 2];
    check_gradient(&|x| conv.forward(x), &x, &dims, 1e-6, "Conv2d dx");
    let xt = Tensor::from_vec(x.clone(), &dims).unwrap();
    check_weight_gradient(
        &|| conv.forward(&xt),
        conv.kernel().unwrap(),
        "Conv2d dkernel",
    );
    check_weight_gradient(&|| conv.forward(&xt), conv.bias().unwrap(), "Conv2d dbias");

    let up = ConvTranspose2d::lazy(&key(52), 2, [3, 3])
        .unwrap()
        .strides([2, 2])
        .padding(Padding::Same)
        .dtype(DType::F64)
        .build(2)
        .unwrap();
    let x = values(2 * 3 * 2, 53, -1.0, 1.0);
    check_gradient(
        &|x| up.forward(x),
        &x,
        &[1, 2, 3, 2],
        1e-6,
        "ConvTranspose2d dx",
    );
    let xt = Tensor::from_vec(x, &[1, 2, 3, 2]).unwrap();
    check_weight_gradient(
        &|| up.forward(&xt),
        up.kernel().unwrap(),
        "ConvTranspose2d dkernel",
    );
}

#[test]
fn lazy_convolutions_and_their_errors() {
    let conv = Conv2d::lazy(&key(60), 6, [3, 3]).unwrap().groups(2);
    assert!(conv.variables().is_empty());
    let x = Tensor::ones(&[1, 5, 5, 4], DType::F32);
    assert_eq!(conv.forward(&x).unwrap().dims(), vec![1, 3, 3, 6]);
    assert_eq!(conv.kernel().unwrap().dims(), &[3, 3, 2, 6]);
    let names: Vec<String> = conv.named_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["kernel", "bias"]);
    let error = |r: Result<Tensor>, op: &str, text: &str| {
        let e = r.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { op: o, .. } if o == op),
            "{op}: {e:?}"
        );
        assert!(e.to_string().contains(text), "{op}: {e}");
    };
    // Another channel count after the build.
    error(
        conv.forward(&Tensor::ones(&[1, 5, 5, 2], DType::F32)),
        "Conv2d",
        "built for 4 input channels",
    );
    // A rank-3 input for a 2-D convolution.
    error(
        conv.forward(&Tensor::ones(&[5, 5, 4], DType::F32)),
        "Conv2d",
        "rank 4",
    );
    // Groups that do not divide the channels.
    let odd = Conv1d::lazy(&key(61), 4, [2]).unwrap().groups(2);
    error(
        odd.forward(&Tensor::ones(&[1, 5, 3], DType::F32)),
        "Conv1d",
        "groups (2) must divide",
    );
    assert!(
        Conv3d::new(&key(62), 3, 2, [2, 2, 2])
            .unwrap()
            .groups(0)
            .build(3)
            .is_err()
    );
    error(
        ConvTranspose2d::new(&key(63), 3, 2, [2, 2])
            .unwrap()
            .forward(&Tensor::ones(&[1, 4, 4], DType::F32)),
        "ConvTranspose2d",
        "rank 4",
    );
    error(
        DepthwiseConv2d::new(&key(64), 3, [2, 2])
            .unwrap()
            .forward(&Tensor::ones(&[1, 4, 4, 5], DType::F32)),
        "DepthwiseConv2d",
        "built for 3 input channels",
    );
    // Built inside a compiled function on its first call.
    let lazy = Arc::new(
        Conv1d::lazy(&key(65), 3, [2])
            .unwrap()
            .padding(Padding::Same),
    );
    let f = function({
        let l = lazy.clone();
        move |x: Tensor| l.forward(&x)
    });
    let x = Tensor::ones(&[2, 4, 5], DType::F32);
    let y = f.call((&x,)).unwrap();
    assert_eq!(lazy.kernel().unwrap().dims(), &[2, 5, 3]);
    assert_close(
        &host(&lazy.forward(&x).unwrap()),
        &host(&y),
        1e-6,
        "lazy compiled",
    );
}
