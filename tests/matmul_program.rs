//! A matmul of a batched operand by a plain matrix (a dense layer on a
//! `[batch, time, features]` input) and its gradients: values against a
//! direct loop, gradients against finite differences, and the shape of the
//! emitted program pinned (one `dot_general` each for the product and the
//! two gradients, no batching dimensions, no broadcast of the matrix).

#[path = "common/gradcheck.rs"]
mod gradcheck;

use xlafn::ArraySpec;
use xlafn::prelude::*;

fn data(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| (((i as u64 * 7919 + seed * 104_729) % 1000) as f64) / 500.0 - 1.0)
        .collect()
}

/// `op(a) @ op(b)` by a direct loop; `op` swaps the last two dimensions
/// when the flag is set. `a` and `b` are row-major with dims `ad`, `bd`;
/// one of them is rank 2, the other rank 3 (batch first).
fn reference(a: &[f64], ad: &[usize], ta: bool, b: &[f64], bd: &[usize], tb: bool) -> Vec<f64> {
    let batch = if ad.len() == 3 { ad[0] } else { bd[0] };
    let get = |x: &[f64], d: &[usize], t: bool, bi: usize, i: usize, j: usize| {
        let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
        let base = if d.len() == 3 { bi * r * c } else { 0 };
        if t {
            x[base + j * c + i]
        } else {
            x[base + i * c + j]
        }
    };
    let m = if ta {
        ad[ad.len() - 1]
    } else {
        ad[ad.len() - 2]
    };
    let k = if ta {
        ad[ad.len() - 2]
    } else {
        ad[ad.len() - 1]
    };
    let n = if tb {
        bd[bd.len() - 2]
    } else {
        bd[bd.len() - 1]
    };
    let mut out = vec![0.0; batch * m * n];
    for bi in 0..batch {
        for i in 0..m {
            for j in 0..n {
                out[(bi * m + i) * n + j] = (0..k)
                    .map(|l| get(a, ad, ta, bi, i, l) * get(b, bd, tb, bi, l, j))
                    .sum();
            }
        }
    }
    out
}

fn dims_of(m: usize, k: usize, transpose: bool, batch: Option<usize>) -> Vec<usize> {
    let mut d: Vec<usize> = batch.into_iter().collect();
    d.extend(if transpose { [k, m] } else { [m, k] });
    d
}

fn as_i64(d: &[usize]) -> Vec<i64> {
    d.iter().map(|&x| x as i64).collect()
}

/// Every transpose combination, with the batch on either operand: values
/// (eager and compiled) against the loop, gradients of both operands
/// against finite differences.
#[test]
fn batched_by_matrix_values_and_gradients() {
    let (batch, m, k, n) = (3, 4, 5, 2);
    for batched_lhs in [true, false] {
        for (ta, tb) in [(false, false), (false, true), (true, false), (true, true)] {
            let what = format!("batched_lhs={batched_lhs} ta={ta} tb={tb}");
            let ad = dims_of(m, k, ta, batched_lhs.then_some(batch));
            let bd = dims_of(k, n, tb, (!batched_lhs).then_some(batch));
            let (av, bv) = (data(ad.iter().product(), 1), data(bd.iter().product(), 2));
            let a = Tensor::from_vec(av.clone(), &as_i64(&ad)).unwrap();
            let b = Tensor::from_vec(bv.clone(), &as_i64(&bd)).unwrap();
            let want = reference(&av, &ad, ta, &bv, &bd, tb);
            let eager = a.matmul_t(&b, ta, tb).unwrap();
            assert_eq!(
                eager.dims(),
                vec![batch as i64, m as i64, n as i64],
                "{what}"
            );
            let close = |got: Vec<f64>, how: &str| {
                for (g, w) in got.iter().zip(&want) {
                    assert!((g - w).abs() < 1e-12, "{what} {how}: {g} vs {w}");
                }
            };
            close(eager.to_vec::<f64>().unwrap(), "eager");
            let f = function(move |a: Tensor, b: Tensor| a.matmul_t(&b, ta, tb));
            close(
                f.call((a.clone(), b.clone())).unwrap().to_vec().unwrap(),
                "compiled",
            );

            let bt = b.clone();
            gradcheck::check_gradient(
                &|x: &Tensor| x.matmul_t(&bt, ta, tb),
                &av,
                &as_i64(&ad),
                1e-6,
                &format!("{what} d/da"),
            );
            gradcheck::check_gradient(
                &|x: &Tensor| a.matmul_t(x, ta, tb),
                &bv,
                &as_i64(&bd),
                1e-6,
                &format!("{what} d/db"),
            );
        }
    }
}

/// The compiled gradient equals the eager one (the traced path lowers the
/// same `dot_general`s).
#[test]
fn compiled_gradients_match_eager() {
    let x = Tensor::from_vec(data(2 * 3 * 4, 3), &[2, 3, 4]).unwrap();
    let w = Tensor::from_vec(data(4 * 5, 4), &[4, 5]).unwrap();
    let grads = |x: &Tensor, w: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(x);
        tape.watch(w);
        let loss = x.matmul(w)?.tanh()?.reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[Source::from(x), Source::from(w)])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    };
    let (ex, ew) = grads(&x, &w).unwrap();
    let f = function(move |x: Tensor, w: Tensor| grads(&x, &w));
    let (cx, cw) = f.call((x, w)).unwrap();
    for (e, c) in [(ex, cx), (ew, cw)] {
        assert_eq!(e.dims(), c.dims());
        for (a, b) in e
            .to_vec::<f64>()
            .unwrap()
            .iter()
            .zip(c.to_vec::<f64>().unwrap())
        {
            assert!((a - b).abs() < 1e-12, "{a} vs {b}");
        }
    }
}

/// The lines of `text` that are StableHLO ops named `op`.
fn ops<'t>(text: &'t str, op: &str) -> Vec<&'t str> {
    let needle = format!("stablehlo.{op}");
    text.lines().filter(|l| l.contains(&needle)).collect()
}

/// Snapshot of the program's shape: `x[8,16,32] @ w[32,24]` with the
/// gradients of both is three `dot_general`s without batching dimensions;
/// nothing broadcasts to a batch of weights, and nothing reduces over the
/// batch.
#[test]
fn batched_by_matrix_emits_plain_dots_and_no_weight_broadcast() {
    let f = function(|x: Tensor, w: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&x);
        tape.watch(&w);
        let y = x.matmul(&w)?;
        let loss = y.mul(&y)?.reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[Source::from(&x), Source::from(&w)])?;
        Ok((loss, g[0].clone().unwrap(), g[1].clone().unwrap()))
    });
    let specs = [
        ArraySpec::new(DType::F32, &[8, 16, 32]),
        ArraySpec::new(DType::F32, &[32, 24]),
    ];
    let x = Tensor::from_vec(vec![0.5f32; 8 * 16 * 32], &[8, 16, 32]).unwrap();
    let w = Tensor::from_vec(vec![0.25f32; 32 * 24], &[32, 24]).unwrap();
    f.call((x, w)).unwrap();
    let text = f.concrete_functions()[0].stablehlo(&specs).unwrap();
    let dots = ops(&text, "dot_general");
    assert_eq!(dots.len(), 3, "{text}");
    for d in &dots {
        assert!(!d.contains("batching_dims"), "a batched dot: {d}\n{text}");
    }
    for b in ops(&text, "broadcast_in_dim") {
        assert!(
            !b.contains("tensor<8x32x24xf32>") && !b.contains("tensor<8x24x32xf32>"),
            "the weight is broadcast to the batch: {b}\n{text}"
        );
    }
    // The weight's gradient comes straight out of its dot, [32,24]; the
    // only reduce left is the loss's sum.
    assert_eq!(ops(&text, "reduce").len(), 1, "{text}");
}

/// A matrix times a batched operand is one dot and one transpose.
#[test]
fn matrix_by_batched_is_one_dot_and_a_transpose() {
    let f = function(|w: Tensor, x: Tensor| w.matmul(&x));
    let w = Tensor::from_vec(vec![1f32; 6], &[2, 3]).unwrap();
    let x = Tensor::from_vec(vec![1f32; 4 * 3 * 5], &[4, 3, 5]).unwrap();
    let y = f.call((w, x)).unwrap();
    assert_eq!(y.dims(), vec![4, 2, 5]);
    assert!(y.to_vec::<f32>().unwrap().iter().all(|&v| v == 3.0));
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::F32, &[2, 3]),
            ArraySpec::new(DType::F32, &[4, 3, 5]),
        ])
        .unwrap();
    let dots = ops(&text, "dot_general");
    assert_eq!(dots.len(), 1, "{text}");
    assert!(!dots[0].contains("batching_dims"), "{text}");
    assert!(ops(&text, "broadcast_in_dim").is_empty(), "{text}");
}
