//! Convolution against a direct-loop reference written here:
//! strides, explicit and SAME padding, input and kernel dilation, feature
//! groups (depthwise), 1-3 spatial dimensions, other layouts; eager and
//! traced; gradients for input and kernel against finite differences in
//! f64; `conv2d_transpose` as the input gradient of `conv2d`.

#[path = "common/scratch.rs"]
mod scratch;

use xlafn::prelude::*;
use xlafn::{ConvOptions, Padding};

/// The window attributes of a reference convolution.
#[derive(Clone)]
struct Window {
    strides: Vec<usize>,
    pad: Vec<(i64, i64)>,
    lhs_dil: Vec<usize>,
    rhs_dil: Vec<usize>,
    groups: usize,
}

impl Window {
    fn plain(n: usize) -> Window {
        Window {
            strides: vec![1; n],
            pad: vec![(0, 0); n],
            lhs_dil: vec![1; n],
            rhs_dil: vec![1; n],
            groups: 1,
        }
    }
}

fn product(v: &[usize]) -> usize {
    v.iter().product()
}

/// Steps a multi-index over `shape`; false once it wraps around.
fn next(idx: &mut [usize], shape: &[usize]) -> bool {
    for d in (0..idx.len()).rev() {
        idx[d] += 1;
        if idx[d] < shape[d] {
            return true;
        }
        idx[d] = 0;
    }
    false
}

/// Channels-last convolution by loops: `x` is `[n, spatial.., c]`, `k` is
/// `[spatial.., c / groups, o]`. Returns the output and its shape.
fn conv_ref(
    x: &[f64],
    xs: &[usize],
    k: &[f64],
    ks: &[usize],
    w: &Window,
) -> (Vec<f64>, Vec<usize>) {
    let ns = xs.len() - 2;
    let (batch, c) = (xs[0], xs[ns + 1]);
    let (kin, kout) = (ks[ns], ks[ns + 1]);
    assert_eq!(c, kin * w.groups);
    let out_sp: Vec<usize> = (0..ns)
        .map(|d| {
            let dil_in = (xs[d + 1] - 1) * w.lhs_dil[d] + 1;
            let padded = dil_in as i64 + w.pad[d].0 + w.pad[d].1;
            let window = ((ks[d] - 1) * w.rhs_dil[d] + 1) as i64;
            if padded < window {
                0
            } else {
                ((padded - window) as usize) / w.strides[d] + 1
            }
        })
        .collect();
    let mut out_shape = vec![batch];
    out_shape.extend(&out_sp);
    out_shape.push(kout);
    let mut out = vec![0.0; product(&out_shape)];
    let x_at = |n: usize, sp: &[usize], ch: usize| {
        let mut i = n;
        for d in 0..ns {
            i = i * xs[d + 1] + sp[d];
        }
        x[i * c + ch]
    };
    let k_at = |sp: &[usize], ci: usize, o: usize| {
        let mut i = 0;
        for d in 0..ns {
            i = i * ks[d] + sp[d];
        }
        k[(i * kin + ci) * kout + o]
    };
    let per_group = kout / w.groups;
    let mut oi = 0;
    for n in 0..batch {
        let mut opos = vec![0; ns];
        loop {
            for o in 0..kout {
                let g = o / per_group;
                let mut sum = 0.0;
                let mut kpos = vec![0; ns];
                loop {
                    let mut ipos = Vec::with_capacity(ns);
                    for d in 0..ns {
                        let p =
                            (opos[d] * w.strides[d] + kpos[d] * w.rhs_dil[d]) as i64 - w.pad[d].0;
                        if p >= 0
                            && (p as usize).is_multiple_of(w.lhs_dil[d])
                            && (p as usize / w.lhs_dil[d]) < xs[d + 1]
                        {
                            ipos.push(p as usize / w.lhs_dil[d]);
                        }
                    }
                    if ipos.len() == ns {
                        for ci in 0..kin {
                            sum += x_at(n, &ipos, g * kin + ci) * k_at(&kpos, ci, o);
                        }
                    }
                    if ns == 0 || !next(&mut kpos, &ks[..ns]) {
                        break;
                    }
                }
                out[oi] = sum;
                oi += 1;
            }
            if ns == 0 || out_sp.contains(&0) || !next(&mut opos, &out_sp) {
                break;
            }
        }
    }
    (out, out_shape)
}

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 2.0 - 1.0
        })
        .collect()
}

fn tensor(data: &[f64], shape: &[usize]) -> Tensor {
    let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    Tensor::from_vec(data.to_vec(), &dims).unwrap()
}

fn options(w: &Window) -> ConvOptions {
    let mut o = ConvOptions::channels_last(w.strides.len()).unwrap();
    o.strides = w.strides.iter().map(|&s| s as i64).collect();
    o.padding = Padding::Explicit(w.pad.clone());
    o.lhs_dilation = w.lhs_dil.iter().map(|&s| s as i64).collect();
    o.rhs_dilation = w.rhs_dil.iter().map(|&s| s as i64).collect();
    o.feature_group_count = w.groups as i64;
    o
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: [{i}] {g} vs {w}"
        );
    }
}

/// Checks eager and traced results against the reference.
fn check(xs: &[usize], ks: &[usize], w: &Window, what: &str) {
    let x = values(product(xs), 1);
    let k = values(product(ks), 2);
    let (want, shape) = conv_ref(&x, xs, &k, ks, w);
    let o = options(w);
    let eager = tensor(&x, xs).conv_general(&tensor(&k, ks), &o).unwrap();
    let want_dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
    assert_eq!(eager.dims(), want_dims, "{what}");
    assert_close(&eager.to_vec::<f64>().unwrap(), &want, 1e-12, what);
    let o2 = o.clone();
    let f = function(move |x: Tensor, k: Tensor| x.conv_general(&k, &o2));
    let traced = f.call((tensor(&x, xs), tensor(&k, ks))).unwrap();
    assert_close(&traced.to_vec::<f64>().unwrap(), &want, 1e-12, what);
}

#[test]
fn conv2d_matches_the_reference() {
    let mut w = Window::plain(2);
    check(&[2, 5, 6, 3], &[3, 2, 3, 4], &w, "plain");
    w.strides = vec![2, 3];
    check(&[2, 7, 8, 3], &[3, 2, 3, 4], &w, "strides");
    w.pad = vec![(1, 2), (0, 1)];
    check(&[1, 7, 8, 2], &[3, 3, 2, 2], &w, "padding");
    w.pad = vec![(-1, 0), (2, -1)];
    check(&[1, 7, 8, 2], &[2, 2, 2, 2], &w, "negative padding");
    let mut w = Window::plain(2);
    w.rhs_dil = vec![2, 1];
    w.lhs_dil = vec![1, 2];
    w.pad = vec![(1, 1), (1, 1)];
    check(&[2, 6, 5, 2], &[2, 3, 2, 3], &w, "dilations");
    let mut w = Window::plain(2);
    w.groups = 2;
    w.strides = vec![1, 2];
    check(&[2, 5, 5, 4], &[3, 3, 2, 6], &w, "feature groups");
}

/// Up to 4 input features and 64 patch elements a convolution is lowered
/// as a product over patches, beyond that as XLA's `convolution`: both
/// sides of each bound, with strides, padding (negative too) and kernel
/// dilation, against the reference.
#[test]
fn patch_and_convolution_lowerings_agree_with_the_reference() {
    let mut w = Window::plain(2);
    check(
        &[2, 5, 6, 4],
        &[4, 4, 4, 3],
        &w,
        "patches: 4 features, 64 elements",
    );
    check(&[2, 5, 6, 5], &[2, 2, 5, 3], &w, "convolution: 5 features");
    check(
        &[2, 9, 10, 2],
        &[5, 7, 2, 3],
        &w,
        "convolution: 70 patch elements",
    );
    w.strides = vec![2, 3];
    w.pad = vec![(2, -1), (1, 1)];
    w.rhs_dil = vec![1, 2];
    check(
        &[2, 9, 8, 1],
        &[3, 2, 1, 5],
        &w,
        "patches: strided, padded, dilated",
    );
    check(
        &[2, 9, 8, 6],
        &[3, 2, 6, 2],
        &w,
        "convolution: strided, padded, dilated",
    );
    let mut w = Window::plain(2);
    w.strides = vec![2, 1];
    w.pad = vec![(1, 0), (0, 2)];
    check_gradients(&[1, 5, 4, 1], &[3, 3, 1, 2], &w, "patches gradient");
    check_gradients(&[1, 5, 4, 5], &[2, 2, 5, 2], &w, "convolution gradient");
    // Which lowering each side of the bound gets.
    for (features, patches) in [(3i64, true), (5, false)] {
        let f = function(|x: Tensor, k: Tensor| x.conv2d(&k, [1, 1], Padding::Same, [1, 1]));
        let specs = [
            xlafn::ArraySpec::new(DType::F32, &[2, 8, 8, features]),
            xlafn::ArraySpec::new(DType::F32, &[3, 3, features, 4]),
        ];
        let x = Tensor::fill(&[2, 8, 8, features], 1.0, DType::F32).unwrap();
        let k = Tensor::fill(&[3, 3, features, 4], 1.0, DType::F32).unwrap();
        let y = f.call((x, k)).unwrap();
        // The centre of a SAME 3x3 convolution of ones sums 9 * features.
        let centre = y.to_vec::<f32>().unwrap()[(8 + 1) * 4];
        assert_eq!(centre, 9.0 * features as f32);
        let text = f.concrete_functions()[0].stablehlo(&specs).unwrap();
        assert_eq!(!text.contains("stablehlo.convolution"), patches, "{text}");
    }
}

/// The program of `x.conv_general(k, w)` for f64 inputs of these shapes.
fn program(xs: &[usize], ks: &[usize], w: &Window) -> String {
    let o = options(w);
    let f = function(move |x: Tensor, k: Tensor| x.conv_general(&k, &o));
    let spec = |s: &[usize]| {
        let dims: Vec<i64> = s.iter().map(|&d| d as i64).collect();
        xlafn::ArraySpec::new(DType::F64, &dims)
    };
    f.call((
        tensor(&values(product(xs), 1), xs),
        tensor(&values(product(ks), 2), ks),
    ))
    .unwrap();
    f.concrete_functions()[0]
        .stablehlo(&[spec(xs), spec(ks)])
        .unwrap()
}

/// A window longer than its output (a "same" convolution whose kernel
/// outgrows its input, CREPE's last blocks) is lowered as a product over
/// patches, after the kernel taps that read only padding are cut; a
/// kernel with dead taps whose output is long enough stays a
/// convolution, with the shorter kernel. Values against the reference,
/// gradients against finite differences.
#[test]
fn dead_taps_are_cut_and_long_windows_become_patch_products() {
    // 8 outputs of 16 taps padded (7, 8): taps 0..=14 see input.
    let mut w = Window::plain(1);
    w.pad = vec![(7, 8)];
    check(&[2, 8, 3], &[16, 3, 4], &w, "long window");
    check_gradients(&[1, 8, 2], &[16, 2, 3], &w, "long window gradient");
    let text = program(&[2, 8, 3], &[16, 3, 4], &w);
    assert!(!text.contains("stablehlo.convolution"), "{text}");
    assert!(text.contains("stablehlo.dot_general"), "{text}");
    // 2 positions, 5 taps, padded (10, 0): taps 0..=2 read padding only;
    // the 8 outputs of the remaining 2 taps are a convolution.
    let mut w = Window::plain(1);
    w.pad = vec![(10, 0)];
    check(&[2, 2, 6], &[5, 6, 3], &w, "dead taps");
    check_gradients(&[1, 2, 5], &[5, 5, 2], &w, "dead taps gradient");
    let text = program(&[2, 2, 6], &[5, 6, 3], &w);
    assert!(text.contains("stablehlo.convolution"), "{text}");
    assert!(
        text.contains("tensor<2x6x3xf64>"),
        "the kernel cut to 2 taps: {text}"
    );
    // In two dimensions, with a stride.
    let mut w = Window::plain(2);
    w.pad = vec![(3, 3), (2, 2)];
    w.strides = vec![1, 2];
    check(&[1, 3, 4, 2], &[7, 5, 2, 3], &w, "2d long window");
    check_gradients(&[1, 3, 4, 2], &[7, 5, 2, 2], &w, "2d long window gradient");
}

#[test]
fn one_and_three_spatial_dimensions() {
    let mut w = Window::plain(1);
    w.strides = vec![2];
    w.pad = vec![(1, 0)];
    w.rhs_dil = vec![2];
    check(&[3, 9, 2], &[3, 2, 4], &w, "1d");
    let mut w = Window::plain(3);
    w.pad = vec![(1, 1), (0, 0), (0, 1)];
    check(&[1, 4, 3, 4, 2], &[2, 2, 2, 2, 3], &w, "3d");
}

#[test]
fn tensorflow_helpers_and_same_padding() {
    let (xs, ks) = ([2usize, 7, 6, 3], [3usize, 2, 3, 5]);
    let x = values(product(&xs), 3);
    let k = values(product(&ks), 4);
    // TF's SAME: out = ceil(in / stride), total padding split low-first.
    let same = |input: usize, kernel: usize, stride: usize| {
        let out = input.div_ceil(stride);
        let total = ((out - 1) * stride + kernel).saturating_sub(input) as i64;
        (total / 2, total - total / 2)
    };
    let mut w = Window::plain(2);
    w.strides = vec![2, 2];
    w.pad = vec![same(7, 3, 2), same(6, 2, 2)];
    let (want, shape) = conv_ref(&x, &xs, &k, &ks, &w);
    assert_eq!(shape, vec![2, 4, 3, 5]);
    let got = tensor(&x, &xs)
        .conv2d(&tensor(&k, &ks), [2, 2], Padding::Same, [1, 1])
        .unwrap();
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "conv2d SAME");

    // conv1d is conv2d with a height of one.
    let x1 = values(2 * 9 * 3, 5);
    let k1 = values(3 * 3 * 2, 6);
    let mut w1 = Window::plain(1);
    w1.pad = vec![same(9, 3, 1)];
    let (want, _) = conv_ref(&x1, &[2, 9, 3], &k1, &[3, 3, 2], &w1);
    let got = tensor(&x1, &[2, 9, 3])
        .conv1d(&tensor(&k1, &[3, 3, 2]), 1, Padding::Same, 1)
        .unwrap();
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "conv1d");

    // depthwise: each channel with its own 2 filters, 6 outputs.
    let kd = values(2 * 2 * 3 * 2, 7);
    let mut wd = Window::plain(2);
    wd.groups = 3;
    let (want, shape) = conv_ref(&x, &xs, &kd, &[2, 2, 1, 6], &wd);
    assert_eq!(shape, vec![2, 6, 5, 6]);
    let got = tensor(&x, &xs)
        .depthwise_conv2d(&tensor(&kd, &[2, 2, 3, 2]), [1, 1], Padding::Valid, [1, 1])
        .unwrap();
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "depthwise");
}

#[test]
fn channels_first_layouts_give_the_same_numbers() {
    let (xs, ks) = ([2usize, 5, 6, 3], [3usize, 2, 3, 4]);
    let x = tensor(&values(product(&xs), 8), &xs);
    let k = tensor(&values(product(&ks), 9), &ks);
    let mut o = ConvOptions::channels_last(2).unwrap();
    o.strides = vec![2, 1];
    o.padding = Padding::Explicit(vec![(1, 0), (0, 1)]);
    let nhwc = x.conv_general(&k, &o).unwrap();
    o.layouts = ("NCHW".into(), "OIHW".into(), "NCHW".into());
    let nchw = x
        .transpose(&[0, 3, 1, 2])
        .unwrap()
        .conv_general(&k.transpose(&[3, 2, 0, 1]).unwrap(), &o)
        .unwrap();
    let back = nchw.transpose(&[0, 2, 3, 1]).unwrap();
    assert_eq!(back.dims(), nhwc.dims());
    assert_close(
        &back.to_vec::<f64>().unwrap(),
        &nhwc.to_vec::<f64>().unwrap(),
        1e-12,
        "NCHW",
    );
}

/// Central differences of `sum(conv(x, k) * r)` against the tape's
/// gradients, for input and kernel.
fn check_gradients(xs: &[usize], ks: &[usize], w: &Window, what: &str) {
    let x = values(product(xs), 10);
    let k = values(product(ks), 11);
    let o = options(w);
    let (y0, ys) = conv_ref(&x, xs, &k, ks, w);
    let r = values(y0.len(), 12);
    let loss = |x: &[f64], k: &[f64]| -> f64 {
        let (y, _) = conv_ref(x, xs, k, ks, w);
        y.iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let (xt, kt) = (tensor(&x, xs), tensor(&k, ks));
    let tape = GradientTape::new();
    tape.watch(&xt);
    tape.watch(&kt);
    let y = xt.conv_general(&kt, &o).unwrap();
    let l = y
        .mul(&tensor(&r, &ys))
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let g = tape
        .gradient(&l, &[Source::from(&xt), Source::from(&kt)])
        .unwrap();
    let h = 1e-6;
    let numeric = |v: &[f64], which: usize| -> Vec<f64> {
        (0..v.len())
            .map(|i| {
                let (mut up, mut down) = (v.to_vec(), v.to_vec());
                up[i] += h;
                down[i] -= h;
                let (lu, ld) = if which == 0 {
                    (loss(&up, &k), loss(&down, &k))
                } else {
                    (loss(&x, &up), loss(&x, &down))
                };
                (lu - ld) / (2.0 * h)
            })
            .collect()
    };
    let dx = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
    let dk = g[1].as_ref().unwrap().to_vec::<f64>().unwrap();
    assert_close(
        &dx,
        &numeric(&x, 0),
        1e-6,
        &format!("{what}: input gradient"),
    );
    assert_close(
        &dk,
        &numeric(&k, 1),
        1e-6,
        &format!("{what}: kernel gradient"),
    );
}

#[test]
fn gradients_match_finite_differences() {
    check_gradients(&[2, 5, 4, 2], &[2, 3, 2, 3], &Window::plain(2), "plain");
    let mut w = Window::plain(2);
    w.strides = vec![2, 2];
    w.pad = vec![(1, 1), (0, 1)];
    check_gradients(&[1, 6, 5, 2], &[3, 2, 2, 2], &w, "strided, padded");
    let mut w = Window::plain(2);
    w.rhs_dil = vec![2, 2];
    w.lhs_dil = vec![2, 1];
    check_gradients(&[1, 4, 6, 2], &[2, 2, 2, 2], &w, "dilated");
    let mut w = Window::plain(2);
    w.groups = 2;
    check_gradients(&[2, 4, 4, 4], &[2, 2, 2, 4], &w, "grouped");
    let mut w = Window::plain(1);
    w.strides = vec![3];
    w.pad = vec![(2, 0)];
    check_gradients(&[2, 8, 3], &[3, 3, 2], &w, "1d");
}

#[test]
fn gradients_inside_a_compiled_function() {
    let (xs, ks) = ([2usize, 6, 6, 2], [3usize, 3, 2, 3]);
    let x = tensor(&values(product(&xs), 13), &xs);
    let k = tensor(&values(product(&ks), 14), &ks);
    let grads = |x: &Tensor, k: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(x);
        tape.watch(k);
        let y = x.conv2d(k, [2, 2], Padding::Same, [1, 1])?;
        let l = y.square()?.reduce_sum(&[], false)?;
        let g = tape.gradient(&l, &[Source::from(x), Source::from(k)])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    };
    let (ex, ek) = grads(&x, &k).unwrap();
    let f = function(move |x: Tensor, k: Tensor| grads(&x, &k));
    let (tx, tk) = f.call((x, k)).unwrap();
    assert_close(
        &tx.to_vec::<f64>().unwrap(),
        &ex.to_vec::<f64>().unwrap(),
        1e-12,
        "dx",
    );
    assert_close(
        &tk.to_vec::<f64>().unwrap(),
        &ek.to_vec::<f64>().unwrap(),
        1e-12,
        "dk",
    );
}

#[test]
fn conv2d_transpose_is_the_input_gradient_of_conv2d() {
    let (xs, ks) = ([2usize, 7, 6, 3], [3usize, 3, 3, 4]);
    let x = tensor(&values(product(&xs), 15), &xs);
    let k = tensor(&values(product(&ks), 16), &ks);
    let y = x.conv2d(&k, [2, 2], Padding::Same, [1, 1]).unwrap();
    let g = tensor(
        &values(y.dims().iter().product::<i64>() as usize, 17),
        &[2, 4, 3, 4],
    );
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x.conv2d(&k, [2, 2], Padding::Same, [1, 1]).unwrap();
    let l = y.mul(&g).unwrap().reduce_sum(&[], false).unwrap();
    let want = tape.gradient(&l, &[Source::from(&x)]).unwrap()[0]
        .clone()
        .unwrap();
    let got = g
        .conv2d_transpose(&k, [2, 7, 6, 3], [2, 2], Padding::Same, [1, 1])
        .unwrap();
    assert_eq!(got.dims(), vec![2, 7, 6, 3]);
    assert_close(
        &got.to_vec::<f64>().unwrap(),
        &want.to_vec::<f64>().unwrap(),
        1e-12,
        "conv2d_transpose",
    );
}

/// An `output_shape` the input cannot come from is refused, as TensorFlow
/// refuses it: the conv2d of `output_shape` with the same strides, padding
/// and dilations must give the input's shape (it returned a result of that
/// shape, a silent wrong answer). Every shape that does fit still works.
#[test]
fn conv2d_transpose_checks_its_output_shape_against_the_input() {
    let g = Tensor::fill(&[2, 4, 4, 8], 1.0, DType::F32).unwrap();
    let k = Tensor::fill(&[3, 3, 16, 8], 1.0, DType::F32).unwrap();
    let e = g
        .conv2d_transpose(&k, [2, 9, 9, 16], [2, 2], Padding::Same, [1, 1])
        .unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { op, .. } if op == "conv2d_transpose"),
        "{e:?}"
    );
    assert_eq!(
        e.to_string(),
        "InvalidArgumentError: conv2d_transpose: output_shape [2, 9, 9, 16] does not fit the \
         input f32(2, 4, 4, 8): a conv2d of output_shape with strides [2, 2], SAME padding and \
         dilations [1, 1] gives f32(2, 5, 5, 8), not the input's shape (TensorFlow: size of \
         out_backprop doesn't match computed)"
    );
    // SAME: ceil(out / 2) == 4 for out 7 and 8 only.
    for out in [7, 8] {
        let y = g
            .conv2d_transpose(&k, [2, out, out, 16], [2, 2], Padding::Same, [1, 1])
            .unwrap();
        assert_eq!(y.dims(), vec![2, out, out, 16]);
    }
    for out in [6, 9] {
        assert!(
            g.conv2d_transpose(&k, [2, out, out, 16], [2, 2], Padding::Same, [1, 1])
                .is_err(),
            "{out}"
        );
    }
    // VALID: ceil((out - 3 + 1) / 2) == 4 for out 9 and 10; with dilation
    // 2 the kernel spans 5, so out 11 and 12.
    let valid = |out: i64, dilation: i64| {
        g.conv2d_transpose(
            &k,
            [2, out, out, 16],
            [2, 2],
            Padding::Valid,
            [dilation, dilation],
        )
    };
    for (out, dilation) in [(9, 1), (10, 1), (11, 2), (12, 2)] {
        assert_eq!(valid(out, dilation).unwrap().dims()[1], out);
    }
    for (out, dilation) in [(8, 1), (11, 1), (10, 2), (13, 2)] {
        let e = valid(out, dilation).unwrap_err().to_string();
        assert!(e.contains("out_backprop"), "{out} {dilation}: {e}");
    }
    // Another batch size is refused too.
    assert!(
        g.conv2d_transpose(&k, [3, 8, 8, 16], [2, 2], Padding::Same, [1, 1])
            .is_err()
    );
}

#[test]
fn mismatched_operands_are_errors() {
    let x = Tensor::fill(&[1, 5, 5, 3], 1.0, DType::F32).unwrap();
    let k = Tensor::fill(&[3, 3, 2, 4], 1.0, DType::F32).unwrap();
    let e = x.conv2d(&k, [1, 1], Padding::Valid, [1, 1]).unwrap_err();
    assert!(e.to_string().contains("3 features"), "{e}");
    let k = Tensor::fill(&[3, 3, 3, 4], 1.0, DType::F32).unwrap();
    let e = x.conv2d(&k, [0, 1], Padding::Valid, [1, 1]).unwrap_err();
    assert!(e.to_string().contains(">= 1"), "{e}");
    let mut o = ConvOptions::channels_last(2).unwrap();
    o.layouts = ("NHWC".into(), "HWIO".into(), "NHC".into());
    assert!(x.conv_general(&k, &o).is_err());
    let xi = Tensor::fill(&[1, 5, 5, 3], 1, DType::I32).unwrap();
    let ki = Tensor::fill(&[3, 3, 3, 4], 1, DType::I32).unwrap();
    assert!(xi.conv2d(&ki, [1, 1], Padding::Valid, [1, 1]).is_err());
}

#[test]
fn second_order_gradients_through_the_reversed_kernel() {
    // loss2 = <dx, s> where dx is the input gradient of <conv(x, k), r>;
    // by adjointness loss2 = <conv(s, k), r>, so d loss2 / dk is the
    // kernel gradient of conv at input s (checked against differences).
    let (xs, ks) = ([1usize, 5, 5, 2], [2usize, 3, 2, 2]);
    let mut w = Window::plain(2);
    w.strides = vec![2, 1];
    w.pad = vec![(1, 0), (1, 1)];
    let o = options(&w);
    let x = tensor(&values(product(&xs), 20), &xs);
    let k = tensor(&values(product(&ks), 21), &ks);
    let s = tensor(&values(product(&xs), 22), &xs);
    let y_dims = x.conv_general(&k, &o).unwrap().dims();
    let r = tensor(
        &values(y_dims.iter().product::<i64>() as usize, 23),
        &[1, 3, 5, 2],
    );
    let outer = GradientTape::new();
    outer.watch(&k);
    let inner = GradientTape::new();
    inner.watch(&x);
    let y = x.conv_general(&k, &o).unwrap();
    let l = y.mul(&r).unwrap().reduce_sum(&[], false).unwrap();
    let dx = inner.gradient(&l, &[Source::from(&x)]).unwrap()[0]
        .clone()
        .unwrap();
    let l2 = dx.mul(&s).unwrap().reduce_sum(&[], false).unwrap();
    let dk2 = outer.gradient(&l2, &[Source::from(&k)]).unwrap()[0]
        .clone()
        .unwrap();
    let tape = GradientTape::new();
    tape.watch(&k);
    let y = s.conv_general(&k, &o).unwrap();
    let l = y.mul(&r).unwrap().reduce_sum(&[], false).unwrap();
    let dk = tape.gradient(&l, &[Source::from(&k)]).unwrap()[0]
        .clone()
        .unwrap();
    assert_close(
        &dk2.to_vec::<f64>().unwrap(),
        &dk.to_vec::<f64>().unwrap(),
        1e-10,
        "second order",
    );
}

#[test]
fn f32_and_bf16_convolutions() {
    let (xs, ks) = ([1usize, 6, 6, 2], [3usize, 3, 2, 2]);
    let x = values(product(&xs), 30);
    let k = values(product(&ks), 31);
    let (want, _) = conv_ref(&x, &xs, &k, &ks, &Window::plain(2));
    for (dtype, tol) in [(DType::F32, 1e-5), (DType::BF16, 3e-2)] {
        let xt = tensor(&x, &xs).cast(dtype).unwrap();
        let kt = tensor(&k, &ks).cast(dtype).unwrap();
        let y = xt.conv2d(&kt, [1, 1], Padding::Valid, [1, 1]).unwrap();
        assert_eq!(y.dtype(), dtype);
        let got = y.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
        // bf16 inputs are rounded: compare with a loose, scaled tolerance.
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() <= tol * 10.0, "{dtype:?}: {g} vs {w}");
        }
    }
}

#[test]
fn convolutions_export_and_serve_new_batch_sizes() {
    let k = tensor(&values(3 * 3 * 2 * 4, 40), &[3, 3, 2, 4]);
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(
            &[None, Some(6), Some(6), Some(2)],
            DType::F64,
        )])
        .build({
            let k = k.clone();
            move |x: Tensor| x.conv2d(&k, [2, 2], Padding::Same, [1, 1])?.relu()
        });
    let cf = f
        .get_concrete_function((TensorSpec::new(
            &[None, Some(6), Some(6), Some(2)],
            DType::F64,
        ),))
        .unwrap();
    let scratch = scratch::scratch_dir("conv-export");
    let dir = scratch.join("conv-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![1, 6, 6, 2]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let x = tensor(&values(3 * 6 * 6 * 2, 41), &[3, 6, 6, 2]);
    let got = loaded.call(&[&x]).unwrap().remove(0);
    let want = f.call((x,)).unwrap();
    assert_eq!(got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
    let _ = std::fs::remove_dir_all(&dir);
}
