//! Windowed reductions against direct loops written here:
//! `reduce_window` sum/max/min with strides, padding and dilations,
//! `max_pool`/`avg_pool` (TensorFlow's SAME rule for averages), cumulative
//! ops with `exclusive`/`reverse`; eager and traced; gradients against
//! finite differences in f64.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::prelude::*;
use xlafn::{Padding, WindowDims, WindowKind};

fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(7);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) as f64 / (1u64 << 31) as f64) * 4.0 - 2.0
        })
        .collect()
}

/// A 2-D window reduction by loops (padding elements are the identity).
fn window_ref(
    x: &[f64],
    shape: [usize; 2],
    w: &WindowDims,
    kind: WindowKind,
) -> (Vec<f64>, Vec<usize>) {
    let out: Vec<usize> = (0..2)
        .map(|d| {
            let dil = (shape[d] as i64 - 1) * w.base_dilation[d] + 1;
            let padded = dil + w.padding[d].0 + w.padding[d].1;
            let win = (w.window[d] - 1) * w.window_dilation[d] + 1;
            if padded < win {
                0
            } else {
                ((padded - win) / w.strides[d] + 1) as usize
            }
        })
        .collect();
    let mut result = Vec::new();
    for i in 0..out[0] {
        for j in 0..out[1] {
            let mut acc = match kind {
                WindowKind::Sum => 0.0,
                WindowKind::Prod => 1.0,
                WindowKind::Max => f64::NEG_INFINITY,
                WindowKind::Min => f64::INFINITY,
            };
            for a in 0..w.window[0] {
                for b in 0..w.window[1] {
                    let pos = [
                        i as i64 * w.strides[0] + a * w.window_dilation[0] - w.padding[0].0,
                        j as i64 * w.strides[1] + b * w.window_dilation[1] - w.padding[1].0,
                    ];
                    let mut idx = [0usize; 2];
                    let mut inside = true;
                    for d in 0..2 {
                        let p = pos[d];
                        if p < 0
                            || p % w.base_dilation[d] != 0
                            || (p / w.base_dilation[d]) as usize >= shape[d]
                        {
                            inside = false;
                        } else {
                            idx[d] = (p / w.base_dilation[d]) as usize;
                        }
                    }
                    if inside {
                        let v = x[idx[0] * shape[1] + idx[1]];
                        acc = match kind {
                            WindowKind::Sum => acc + v,
                            WindowKind::Prod => acc * v,
                            WindowKind::Max => acc.max(v),
                            WindowKind::Min => acc.min(v),
                        };
                    }
                }
            }
            result.push(acc);
        }
    }
    (result, out)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs()) || (g.is_infinite() && g == w);
        assert!(ok, "{what}: [{i}] {g} vs {w}");
    }
}

fn geometries() -> Vec<(&'static str, WindowDims)> {
    let mut v = vec![("plain", WindowDims::new(&[2, 3]))];
    let mut w = WindowDims::new(&[3, 2]);
    w.strides = vec![2, 1];
    w.padding = vec![(1, 1), (0, 1)];
    v.push(("strided, padded", w));
    let mut w = WindowDims::new(&[2, 2]);
    w.window_dilation = vec![2, 1];
    w.base_dilation = vec![1, 2];
    v.push(("dilated", w));
    // Dimensions the window leaves alone: the sum's gradient folds them
    // into the batch of its convolution, before and after the others.
    let mut w = WindowDims::new(&[1, 3]);
    w.strides = vec![1, 2];
    w.padding = vec![(0, 0), (1, 0)];
    v.push(("rows left alone", w));
    let mut w = WindowDims::new(&[2, 1]);
    w.strides = vec![2, 1];
    v.push(("columns left alone", w));
    v
}

#[test]
fn reduce_window_matches_the_reference() {
    let shape = [5usize, 6];
    let x = values(30, 1);
    let xt = Tensor::from_vec(x.clone(), &[5, 6]).unwrap();
    for (what, w) in geometries() {
        for kind in [
            WindowKind::Sum,
            WindowKind::Max,
            WindowKind::Min,
            WindowKind::Prod,
        ] {
            let (want, out) = window_ref(&x, shape, &w, kind);
            let eager = xt.reduce_window(kind, &w).unwrap();
            assert_eq!(
                eager.dims(),
                vec![out[0] as i64, out[1] as i64],
                "{what} {kind:?}"
            );
            assert_close(&eager.to_vec::<f64>().unwrap(), &want, 1e-12, what);
            let w2 = w.clone();
            let f = function(move |x: Tensor| x.reduce_window(kind, &w2));
            let traced = f.call((&xt,)).unwrap();
            assert_close(&traced.to_vec::<f64>().unwrap(), &want, 1e-12, what);
        }
    }
}

/// Central differences of `sum(window(x) * r)` against the tape.
fn check_gradient(kind: WindowKind, w: &WindowDims, what: &str) {
    let shape = [5usize, 6];
    let x = values(30, 2);
    let (y, out) = window_ref(&x, shape, w, kind);
    let r = values(y.len(), 3);
    let loss = |x: &[f64]| -> f64 {
        let (y, _) = window_ref(x, shape, w, kind);
        y.iter().zip(&r).map(|(a, b)| a * b).sum()
    };
    let xt = Tensor::from_vec(x.clone(), &[5, 6]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&xt);
    let y = xt.reduce_window(kind, w).unwrap();
    let rt = Tensor::from_vec(r.clone(), &[out[0] as i64, out[1] as i64]).unwrap();
    let l = y.mul(&rt).unwrap().reduce_sum(&[], false).unwrap();
    let g = tape.gradient(&l, &[Source::from(&xt)]).unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let h = 1e-6;
    let numeric: Vec<f64> = (0..x.len())
        .map(|i| {
            let (mut up, mut down) = (x.clone(), x.clone());
            up[i] += h;
            down[i] -= h;
            (loss(&up) - loss(&down)) / (2.0 * h)
        })
        .collect();
    assert_close(&g, &numeric, 1e-6, what);
}

/// A pooling window over `[N, H, W, C]` leaves N and C alone: its
/// gradient is a convolution over the 2 spatial dimensions, not 4 (XLA's
/// CUDA backend aborts on more than 3), and matches the reference.
#[test]
fn pooling_gradients_convolve_over_the_spatial_dimensions_only() {
    let f = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x
            .avg_pool(&[2, 2], &[2, 2], Padding::Valid)?
            .reduce_sum(&[], false)?;
        Ok(tape
            .gradient(&y, &[(&x).into()])?
            .remove(0)
            .expect("watched"))
    });
    let spec = xlafn::ArraySpec::new(DType::F64, &[2, 4, 4, 3]);
    let text = f
        .get_concrete_function((TensorSpec::new(
            &[Some(2), Some(4), Some(4), Some(3)],
            DType::F64,
        ),))
        .unwrap()
        .stablehlo(&[spec])
        .unwrap();
    assert_eq!(xlafn::runtime::max_conv_spatial_dims(&text), 2, "{text}");
    // Each element is in exactly one 2x2 window: d(mean)/dx = 1/4.
    let x = Tensor::from_vec((0..96).map(f64::from).collect(), &[2, 4, 4, 3]).unwrap();
    assert_eq!(
        f.call((&x,)).unwrap().to_vec::<f64>().unwrap(),
        vec![0.25; 96]
    );
}

#[test]
fn window_gradients_match_finite_differences() {
    for (what, w) in geometries() {
        check_gradient(WindowKind::Sum, &w, &format!("sum {what}"));
        check_gradient(WindowKind::Prod, &w, &format!("prod {what}"));
    }
    // Max and min windows: no dilation (select_and_scatter).
    for (what, w) in geometries().into_iter().take(2) {
        check_gradient(WindowKind::Max, &w, &format!("max {what}"));
        check_gradient(WindowKind::Min, &w, &format!("min {what}"));
    }
}

#[test]
fn pooling_in_tensorflow_terms() {
    // [batch 2, 5 x 4, channels 3]
    let x = values(2 * 5 * 4 * 3, 4);
    let xt = Tensor::from_vec(x.clone(), &[2, 5, 4, 3]).unwrap();
    let at = |b: usize, i: usize, j: usize, c: usize| x[((b * 5 + i) * 4 + j) * 3 + c];
    // max_pool 2x2 stride 2 VALID: [2, 2, 2, 3].
    let got = xt.max_pool(&[2, 2], &[2, 2], Padding::Valid).unwrap();
    assert_eq!(got.dims(), vec![2, 2, 2, 3]);
    let got = got.to_vec::<f64>().unwrap();
    let mut k = 0;
    for b in 0..2 {
        for i in 0..2 {
            for j in 0..2 {
                for c in 0..3 {
                    let m = (0..2)
                        .flat_map(|a| (0..2).map(move |d| (a, d)))
                        .map(|(a, d)| at(b, 2 * i + a, 2 * j + d, c))
                        .fold(f64::NEG_INFINITY, f64::max);
                    assert_eq!(got[k], m);
                    k += 1;
                }
            }
        }
    }
    // avg_pool 3x3 stride 2 SAME: out 3 x 2; each mean over the window's
    // elements inside the input (TF's rule), padding low 1, high 1 / 0 ...
    let got = xt.avg_pool(&[3, 3], &[2, 2], Padding::Same).unwrap();
    assert_eq!(got.dims(), vec![2, 3, 2, 3]);
    let got = got.to_vec::<f64>().unwrap();
    // SAME: rows total pad (3-1)*2+3-5 = 2 -> (1, 1); cols (2-1)*2+3-4 = 1 -> (0, 1).
    let mut k = 0;
    for b in 0..2 {
        for i in 0..3i64 {
            for j in 0..2i64 {
                for c in 0..3 {
                    let (mut sum, mut n) = (0.0, 0.0);
                    for a in 0..3i64 {
                        for d in 0..3i64 {
                            let (r, s) = (2 * i + a - 1, 2 * j + d);
                            if (0..5).contains(&r) && (0..4).contains(&s) {
                                sum += at(b, r as usize, s as usize, c);
                                n += 1.0;
                            }
                        }
                    }
                    assert!((got[k] - sum / n).abs() < 1e-12, "avg [{k}]");
                    k += 1;
                }
            }
        }
    }
    // 1-D and 3-D pools have the right shapes.
    let x1 = Tensor::fill(&[1, 7, 2], 1.0, DType::F32).unwrap();
    assert_eq!(
        x1.max_pool(&[2], &[2], Padding::Same).unwrap().dims(),
        vec![1, 4, 2]
    );
    let x3 = Tensor::fill(&[1, 4, 4, 4, 1], 1.0, DType::F32).unwrap();
    assert_eq!(
        x3.avg_pool(&[2, 2, 2], &[2, 2, 2], Padding::Valid)
            .unwrap()
            .dims(),
        vec![1, 2, 2, 2, 1]
    );
    assert!(x1.max_pool(&[2, 2], &[2, 2], Padding::Valid).is_err());
}

#[test]
fn cumulative_ops_match_loops() {
    let x = values(12, 5);
    let xt = Tensor::from_vec(x.clone(), &[3, 4]).unwrap();
    let row = |r: usize| &x[r * 4..r * 4 + 4];
    for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut want_sum = Vec::new();
        let mut want_max = Vec::new();
        let mut want_prod = Vec::new();
        let mut want_lse = Vec::new();
        for r in 0..3 {
            let v = row(r);
            for i in 0..4 {
                let range: Vec<usize> = match (exclusive, reverse) {
                    (false, false) => (0..=i).collect(),
                    (true, false) => (0..i).collect(),
                    (false, true) => (i..4).collect(),
                    (true, true) => (i + 1..4).collect(),
                };
                want_sum.push(range.iter().map(|&j| v[j]).sum::<f64>());
                want_prod.push(range.iter().map(|&j| v[j]).product::<f64>());
                want_max.push(
                    range
                        .iter()
                        .map(|&j| v[j])
                        .fold(f64::NEG_INFINITY, f64::max),
                );
                want_lse.push(range.iter().map(|&j| v[j].exp()).sum::<f64>().ln());
            }
        }
        let what = format!("exclusive={exclusive} reverse={reverse}");
        let got = |t: Tensor| t.to_vec::<f64>().unwrap();
        assert_close(
            &got(xt.cumsum(1, exclusive, reverse).unwrap()),
            &want_sum,
            1e-12,
            &what,
        );
        assert_close(
            &got(xt.cumprod(-1, exclusive, reverse).unwrap()),
            &want_prod,
            1e-12,
            &what,
        );
        assert_close(
            &got(xt.cummax(1, exclusive, reverse).unwrap()),
            &want_max,
            1e-12,
            &what,
        );
        assert_close(
            &got(xt.cumlogsumexp(1, exclusive, reverse).unwrap()),
            &want_lse,
            1e-12,
            &what,
        );
    }
    // Along axis 0, traced.
    let f = function(|x: Tensor| x.cumsum(0, false, false));
    let got = f.call((&xt,)).unwrap().to_vec::<f64>().unwrap();
    for c in 0..4 {
        let mut acc = 0.0;
        for r in 0..3 {
            acc += x[r * 4 + c];
            assert!((got[r * 4 + c] - acc).abs() < 1e-12);
        }
    }
    // cumprod's gradient against central differences of the loop.
    let tape = GradientTape::new();
    tape.watch(&xt);
    let y = xt.cumprod(1, false, true).unwrap();
    let g = tape
        .gradient(&y.reduce_sum(&[], false).unwrap(), &[Source::from(&xt)])
        .unwrap();
    let g = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
    let total = |v: &[f64]| -> f64 {
        (0..3)
            .map(|r| {
                (0..4)
                    .map(|i| v[r * 4 + i..r * 4 + 4].iter().product::<f64>())
                    .sum::<f64>()
            })
            .sum()
    };
    for k in 0..12 {
        let (mut up, mut down) = (x.clone(), x.clone());
        up[k] += 1e-6;
        down[k] -= 1e-6;
        let want = (total(&up) - total(&down)) / 2e-6;
        assert!(
            (g[k] - want).abs() < 1e-6 * (1.0 + want.abs()),
            "cumprod [{k}]: {} vs {want}",
            g[k]
        );
    }
    // The gradient of cumsum is the reversed cumsum of the gradient.
    let tape = GradientTape::new();
    tape.watch(&xt);
    let y = xt.cumsum(1, false, false).unwrap();
    let g = tape
        .gradient(&y.reduce_sum(&[], false).unwrap(), &[Source::from(&xt)])
        .unwrap();
    let g = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
    assert_eq!(g, vec![4., 3., 2., 1., 4., 3., 2., 1., 4., 3., 2., 1.]);
}

/// The gradient of a max (min) pool whose windows tile the input goes to
/// each window's first extreme element in row-major order, as
/// `select_and_scatter` routes it: checked by a loop on inputs full of
/// ties, in f64 and f32, eagerly and compiled, and against finite
/// differences where there are no ties.
#[test]
fn tiled_pool_gradients_route_to_the_first_extreme() {
    let (b, h, w, c) = (2usize, 4usize, 6usize, 3usize);
    let n = b * h * w * c;
    let tied: Vec<f64> = (0..n).map(|i| ((i * 7) % 5) as f64).collect();
    let g: Vec<f64> = (0..n / 4).map(|i| 1.0 + i as f64).collect();
    let at = |i: usize, j: usize, k: usize, l: usize| ((i * h + j) * w + k) * c + l;
    for pick_max in [true, false] {
        // Reference: loop over windows, first extreme in row-major order.
        let mut want = vec![0.0; n];
        for i in 0..b {
            for oj in 0..h / 2 {
                for ok in 0..w / 2 {
                    for l in 0..c {
                        let cells = [(0, 0), (0, 1), (1, 0), (1, 1)]
                            .map(|(a, d)| at(i, 2 * oj + a, 2 * ok + d, l));
                        let mut best = cells[0];
                        for &p in &cells[1..] {
                            let better = match pick_max {
                                true => tied[p] > tied[best],
                                false => tied[p] < tied[best],
                            };
                            if better {
                                best = p;
                            }
                        }
                        want[best] += g[((i * (h / 2) + oj) * (w / 2) + ok) * c + l];
                    }
                }
            }
        }
        let pool = move |x: &Tensor| -> Result<Tensor> {
            match pick_max {
                true => x.max_pool(&[2, 2], &[2, 2], Padding::Valid),
                false => x.neg()?.max_pool(&[2, 2], &[2, 2], Padding::Valid),
            }
        };
        let grad = move |x: Tensor, g: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = pool(&x)?.mul(&g)?.reduce_sum(&[], false)?;
            let dx = tape.gradient(&y, &[(&x).into()])?[0].clone().unwrap();
            // min pooling of x is -max(-x): undo the sign of the chain.
            if pick_max { Ok(dx) } else { dx.neg() }
        };
        let dims = [b as i64, h as i64, w as i64, c as i64];
        let gdims = [b as i64, h as i64 / 2, w as i64 / 2, c as i64];
        for dtype in [DType::F64, DType::F32] {
            let x = Tensor::from_vec(tied.clone(), &dims)
                .unwrap()
                .cast(dtype)
                .unwrap();
            let gt = Tensor::from_vec(g.clone(), &gdims)
                .unwrap()
                .cast(dtype)
                .unwrap();
            let eager = grad(x.clone(), gt.clone()).unwrap();
            let compiled = function(grad).call((x, gt)).unwrap();
            for (how, got) in [("eager", eager), ("compiled", compiled)] {
                let got = got.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
                assert_eq!(got, want, "{how} {dtype} pick_max={pick_max}");
            }
        }
    }
    // Without ties, against finite differences.
    let x = values(n, 9);
    let f = |x: &[f64]| -> f64 {
        let t = Tensor::from_vec(x.to_vec(), &[b as i64, h as i64, w as i64, c as i64]).unwrap();
        let y = t.max_pool(&[2, 2], &[2, 2], Padding::Valid).unwrap();
        let r = Tensor::from_vec(g.clone(), &y.dims()).unwrap();
        y.mul(&r)
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    let xt = Tensor::from_vec(x.clone(), &[b as i64, h as i64, w as i64, c as i64]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&xt);
    let y = xt.max_pool(&[2, 2], &[2, 2], Padding::Valid).unwrap();
    let r = Tensor::from_vec(g.clone(), &y.dims()).unwrap();
    let l = y.mul(&r).unwrap().reduce_sum(&[], false).unwrap();
    let got = tape.gradient(&l, &[(&xt).into()]).unwrap()[0]
        .clone()
        .unwrap();
    let got = got.to_vec::<f64>().unwrap();
    let numeric: Vec<f64> = (0..n)
        .map(|i| {
            let (mut up, mut down) = (x.clone(), x.clone());
            up[i] += 1e-6;
            down[i] -= 1e-6;
            (f(&up) - f(&down)) / 2e-6
        })
        .collect();
    assert_close(&got, &numeric, 1e-6, "tiled max pool");
}

#[test]
fn cumprod_gradients_are_exact_where_elements_are_zero() {
    // sum(cumprod([2, 0, 3, 4])) = 2 + 2a + 2a3 + 2a3·4 with a = x1: by
    // hand, the gradient is [1 + 0 + 0 + 0, 2 + 6 + 24, 0, 0].
    let grad_of_sum = |v: &[f64], exclusive: bool, reverse: bool| {
        let x = Tensor::from_vec(v.to_vec(), &[v.len() as i64]).unwrap();
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x.cumprod(0, exclusive, reverse).unwrap();
        let l = y.reduce_sum(&[], false).unwrap();
        tape.gradient(&l, &[Source::from(&x)]).unwrap()[0]
            .as_ref()
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    assert_eq!(
        grad_of_sum(&[2., 0., 3., 4.], false, false),
        vec![1., 32., 0., 0.]
    );
    assert_eq!(grad_of_sum(&[0., 0., 5.], false, false), vec![1., 0., 0.]);
    // Compiled, the same.
    let f = function(|x: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&x);
        let l = x.cumprod(0, false, false)?.reduce_sum(&[], false)?;
        Ok(tape.gradient(&l, &[Source::from(&x)])?.remove(0).unwrap())
    });
    let x = Tensor::vector(&[2f64, 0., 3., 4.]).unwrap();
    assert_eq!(
        f.call((&x,)).unwrap().to_vec::<f64>().unwrap(),
        vec![1., 32., 0., 0.]
    );
    // Every variant, with zeros, against central differences (exact for
    // these polynomials), along the last axis of a matrix.
    let v = [0.5, 0., -1.5, 2., 0., 0., 1.2, -0.7];
    for exclusive in [false, true] {
        for reverse in [false, true] {
            gradcheck::check_gradient(
                &move |x: &Tensor| x.cumprod(-1, exclusive, reverse),
                &v,
                &[2, 4],
                1e-6,
                &format!("cumprod exclusive={exclusive} reverse={reverse}"),
            );
        }
    }
}

/// `cumlogsumexp` shifts each output by its own running maximum: inputs
/// spanning more than a float's exponent range keep their values
/// (`[-1000, 0, -1000]` is `[-1000, 0, 0]` in f32, as JAX's
/// `lax.cumlogsumexp` gives; one global shift gave `[-inf, 0, 0]`), and
/// an input of -inf has the gradient JAX gives it, not NaN. Against a
/// direct loop of f64 `logaddexp`, and finite differences.
#[test]
fn cumlogsumexp_keeps_each_prefix_exact() {
    let x = Tensor::vector(&[-1000f32, 0., -1000.]).unwrap();
    assert_eq!(
        x.cumlogsumexp(0, false, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![-1000., 0., 0.]
    );
    assert_eq!(
        x.cumlogsumexp(0, false, true)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0., 0., -1000.]
    );
    let neg = f32::NEG_INFINITY;
    assert_eq!(
        x.cumlogsumexp(0, true, false)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![neg, -1000., 0.]
    );
    assert_eq!(
        x.cumlogsumexp(0, true, true)
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0., -1000., neg]
    );

    let grad = |v: &[f64], exclusive: bool, reverse: bool| {
        let x = Tensor::vector(v).unwrap();
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x
            .cumlogsumexp(0, exclusive, reverse)
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap();
        tape.gradient(&y, &[(&x).into()])
            .unwrap()
            .remove(0)
            .unwrap()
            .to_vec::<f64>()
            .unwrap()
    };
    // JAX: grad(sum(cumlogsumexp(x))) at [-1000, 0, -1000] is [1, 2, 0],
    // and at [-inf, 0] it is [1, 1].
    assert_eq!(grad(&[-1000., 0., -1000.], false, false), vec![1., 2., 0.]);
    assert_eq!(grad(&[f64::NEG_INFINITY, 0.], false, false), vec![1., 1.]);

    // Against the loop, on values 30 apart (exp of the spread is 1e13).
    let v: Vec<f64> = values(12, 9).iter().map(|u| u * 30.0).collect();
    let xt = Tensor::from_vec(v.clone(), &[3, 4]).unwrap();
    let lae = |a: f64, b: f64| {
        let m = a.max(b);
        m + ((a - m).exp() + (b - m).exp()).ln()
    };
    for (exclusive, reverse) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut want = vec![0.0; 12];
        for r in 0..3 {
            let row = &v[r * 4..r * 4 + 4];
            let order: Vec<usize> = if reverse {
                (0..4).rev().collect()
            } else {
                (0..4).collect()
            };
            let mut acc = f64::NEG_INFINITY;
            for &c in &order {
                if exclusive {
                    want[r * 4 + c] = acc;
                    acc = lae(acc, row[c]);
                } else {
                    acc = lae(acc, row[c]);
                    want[r * 4 + c] = acc;
                }
            }
        }
        let what = format!("exclusive {exclusive}, reverse {reverse}");
        let got = xt
            .cumlogsumexp(1, exclusive, reverse)
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_close(&got, &want, 1e-12, &what);
        let traced = function(move |x: Tensor| x.cumlogsumexp(-1, exclusive, reverse));
        assert_close(
            &traced.call((&xt,)).unwrap().to_vec::<f64>().unwrap(),
            &want,
            1e-12,
            &what,
        );
        // Without an exclusive scan's -inf, whose differences are NaN.
        let finite = match (exclusive, reverse) {
            (false, _) => (0, 5),
            (true, false) => (1, 4),
            (true, true) => (0, 4),
        };
        gradcheck::check_gradient(
            &move |x: &Tensor| {
                x.cumlogsumexp(0, exclusive, reverse)?
                    .slice(&[finite.0], &[finite.1])
            },
            &values(5, 3),
            &[5],
            1e-6,
            &what,
        );
    }
    assert!(
        Tensor::vector(&[1i32, 2])
            .unwrap()
            .cumlogsumexp(0, false, false)
            .is_err()
    );
    assert!(x.cumlogsumexp(1, false, false).is_err());
}
