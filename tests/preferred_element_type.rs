//! `preferred_element_type` for `matmul` and `dot_general` (JAX's): bf16
//! operands accumulated in and returned as f32. Values against a direct
//! f64 loop over the bf16-rounded inputs (and more accurate than the bf16
//! product), eager and compiled; the gradients' dtypes and values against
//! hand-computed products; the program holds one `dot_general` with the
//! f32 result type; bad requests are clear errors.

use xlafn::ArraySpec;
use xlafn::prelude::*;

/// Deterministic values in `[-1, 1)`, rounded to bf16 (so the f64
/// reference sees exactly what the device multiplies).
fn bf16_data(n: usize, seed: u64) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let x = (((i as u64 * 7919 + seed * 104_729) % 2003) as f64) / 1001.5 - 1.0;
            half::bf16::from_f64(x).to_f64()
        })
        .collect()
}

fn bf16(v: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims)
        .unwrap()
        .cast(DType::BF16)
        .unwrap()
}

fn values(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// `a[m,k] @ b[k,n]` by a direct loop in f64.
fn matmul_ref(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
    let mut out = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            out[i * n + j] = (0..k).map(|l| a[i * k + l] * b[l * n + j]).sum();
        }
    }
    out
}

fn max_err(got: &[f64], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len());
    got.iter()
        .zip(want)
        .map(|(g, w)| (g - w).abs())
        .fold(0.0, f64::max)
}

#[test]
fn bf16_operands_with_an_f32_result_match_the_f64_reference() {
    let (m, k, n) = (8, 512, 6);
    let (av, bv) = (bf16_data(m * k, 1), bf16_data(k * n, 2));
    let (a, b) = (
        bf16(&av, &[m as i64, k as i64]),
        bf16(&bv, &[k as i64, n as i64]),
    );
    let want = matmul_ref(&av, &bv, m, k, n);

    let eager = a.matmul_preferred(&b, DType::F32).unwrap();
    assert_eq!(eager.dtype(), DType::F32);
    assert_eq!(eager.dims(), vec![m as i64, n as i64]);
    let f = function(|a: Tensor, b: Tensor| a.matmul_preferred(&b, DType::F32));
    let compiled = f.call((&a, &b)).unwrap();
    assert_eq!(compiled.dtype(), DType::F32);
    // Products of bf16 values are exact in f32; what is left is the f32
    // sum of 512 terms of size <= 1: well inside 1e-4 absolute.
    let (e, c) = (
        max_err(&values(&eager), &want),
        max_err(&values(&compiled), &want),
    );
    assert!(e < 1e-4 && c < 1e-4, "eager {e}, compiled {c}");
    // The bf16 product rounds its sums (of size ~10) to 8 bits: far worse.
    let low = a.matmul(&b).unwrap();
    assert_eq!(low.dtype(), DType::BF16);
    let l = max_err(&values(&low), &want);
    assert!(l > 100.0 * e.max(1e-7), "bf16 result {l} vs f32 result {e}");

    // Asking for the operands' own dtype is the plain product.
    let same = a.matmul_preferred(&b, DType::BF16).unwrap();
    assert_eq!(values(&same), values(&low));
}

#[test]
fn dot_general_batches_and_contracts_in_the_preferred_type() {
    // lhs [2, 3, 64] (batch, m, k), rhs [64, 2, 4] (k, batch, n) -> [2, 3, 4].
    let (bs, m, k, n) = (2usize, 3usize, 64usize, 4usize);
    let (av, bv) = (bf16_data(bs * m * k, 3), bf16_data(k * bs * n, 4));
    let a = bf16(&av, &[bs as i64, m as i64, k as i64]);
    let b = bf16(&bv, &[k as i64, bs as i64, n as i64]);
    let mut want = vec![0.0; bs * m * n];
    for p in 0..bs {
        for i in 0..m {
            for j in 0..n {
                want[(p * m + i) * n + j] = (0..k)
                    .map(|l| av[(p * m + i) * k + l] * bv[(l * bs + p) * n + j])
                    .sum();
            }
        }
    }
    let dot =
        |a: &Tensor, b: &Tensor| a.dot_general_preferred(b, &[2], &[0], &[0], &[1], DType::F32);
    let eager = dot(&a, &b).unwrap();
    let compiled = function(move |a: Tensor, b: Tensor| dot(&a, &b))
        .call((&a, &b))
        .unwrap();
    for t in [&eager, &compiled] {
        assert_eq!((t.dtype(), t.dims()), (DType::F32, vec![2, 3, 4]));
        assert!(max_err(&values(t), &want) < 1e-5, "{:?}", values(t));
    }
}

#[test]
fn integer_operands_accumulate_without_overflow() {
    // 100 * 100 * 3 = 30000 overflows i8 (and i16 holds it): an i8 product
    // asked for i32 gives the exact sum.
    let a = Tensor::from_vec(vec![100i8; 3], &[1, 3]).unwrap();
    let b = Tensor::from_vec(vec![100i8; 3], &[3, 1]).unwrap();
    let c = a.matmul_preferred(&b, DType::I32).unwrap();
    assert_eq!(c.dtype(), DType::I32);
    assert_eq!(c.to_vec::<i32>().unwrap(), vec![30000]);
}

/// `d/dA sum(C * W)` with `C = A @ B` is `W @ B^T`, and `d/dB` is
/// `A^T @ W`, in f64 over the bf16 values.
#[test]
fn gradients_come_back_in_the_operands_dtype() {
    let (m, k, n) = (3usize, 5usize, 4usize);
    let (av, bv) = (bf16_data(m * k, 5), bf16_data(k * n, 6));
    let wv = bf16_data(m * n, 7);
    let (a, b) = (
        bf16(&av, &[m as i64, k as i64]),
        bf16(&bv, &[k as i64, n as i64]),
    );
    let w = Tensor::from_vec(wv.clone(), &[m as i64, n as i64])
        .unwrap()
        .cast(DType::F32)
        .unwrap();
    let grads = |a: &Tensor, b: &Tensor, w: &Tensor| -> Result<(Tensor, Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(a);
        tape.watch(b);
        let c = a.matmul_preferred(b, DType::F32)?;
        let loss = c.mul(w)?.reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[Source::from(a), Source::from(b)])?;
        Ok((loss, g[0].clone().unwrap(), g[1].clone().unwrap()))
    };
    let mut b_t = vec![0.0; n * k];
    let mut a_t = vec![0.0; k * m];
    for i in 0..k {
        for j in 0..n {
            b_t[j * k + i] = bv[i * n + j];
        }
        for j in 0..m {
            a_t[i * m + j] = av[j * k + i];
        }
    }
    let want_da = matmul_ref(&wv, &b_t, m, n, k);
    let want_db = matmul_ref(&a_t, &wv, k, m, n);
    let eager = grads(&a, &b, &w).unwrap();
    let compiled = function(move |a: Tensor, b: Tensor, w: Tensor| grads(&a, &b, &w))
        .call((&a, &b, &w))
        .unwrap();
    for (loss, da, db) in [eager, compiled] {
        assert_eq!(loss.dtype(), DType::F32);
        assert_eq!((da.dtype(), db.dtype()), (DType::BF16, DType::BF16));
        // The gradient is rounded to bf16 (8 bits): relative 2^-8 of sums
        // of a few terms of size <= 1.
        assert!(max_err(&values(&da), &want_da) < 0.05, "{:?}", values(&da));
        assert!(max_err(&values(&db), &want_db) < 0.05, "{:?}", values(&db));
    }
}

/// A batched operand by a plain matrix (the dense-layer path, whose weight
/// gradient is its own single `dot_general`) and `dot_general`'s own
/// gradient, with f32 operands and an f64 result: gradients in f32, equal
/// to the f32-precision hand products.
#[test]
fn batched_and_dot_general_gradients_keep_the_operand_dtype() {
    let (bs, m, k, n) = (2usize, 3usize, 4usize, 5usize);
    let (xv, wv) = (bf16_data(bs * m * k, 8), bf16_data(k * n, 9));
    let x = Tensor::from_vec(xv.iter().map(|&v| v as f32).collect(), &[2, 3, 4]).unwrap();
    let w = Tensor::from_vec(wv.iter().map(|&v| v as f32).collect(), &[4, 5]).unwrap();
    let grads = |use_dot: bool| {
        move |x: &Tensor, w: &Tensor| -> Result<(Tensor, Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(x);
            tape.watch(w);
            let y = if use_dot {
                x.dot_general_preferred(w, &[2], &[0], &[], &[], DType::F64)?
            } else {
                x.matmul_preferred(w, DType::F64)?
            };
            let loss = y.reduce_sum(&[], false)?;
            let g = tape.gradient(&loss, &[Source::from(x), Source::from(w)])?;
            Ok((y, g[0].clone().unwrap(), g[1].clone().unwrap()))
        }
    };
    // With an all-ones output gradient: dX[b,i,l] = sum_j W[l,j], and
    // dW[l,j] = sum_{b,i} X[b,i,l].
    let row_sums: Vec<f64> = (0..k)
        .map(|l| (0..n).map(|j| wv[l * n + j]).sum())
        .collect();
    let want_dx: Vec<f64> = (0..bs * m * k).map(|i| row_sums[i % k]).collect();
    let want_dw: Vec<f64> = (0..k * n)
        .map(|i| (0..bs * m).map(|r| xv[r * k + i / n]).sum())
        .collect();
    for use_dot in [false, true] {
        let eager = grads(use_dot)(&x, &w).unwrap();
        let compiled = function(move |x: Tensor, w: Tensor| grads(use_dot)(&x, &w))
            .call((&x, &w))
            .unwrap();
        for (y, dx, dw) in [eager, compiled] {
            assert_eq!(y.dtype(), DType::F64);
            assert_eq!(y.dims(), vec![2, 3, 5]);
            assert_eq!((dx.dtype(), dw.dtype()), (DType::F32, DType::F32));
            assert!(max_err(&values(&dx), &want_dx) < 1e-5, "dot={use_dot}");
            assert!(max_err(&values(&dw), &want_dw) < 1e-5, "dot={use_dot}");
        }
    }
}

/// The lines of `text` that are StableHLO ops named `op`.
fn ops<'t>(text: &'t str, op: &str) -> Vec<&'t str> {
    let needle = format!("stablehlo.{op}");
    text.lines().filter(|l| l.contains(&needle)).collect()
}

#[test]
fn the_program_is_one_dot_general_with_an_f32_result() {
    let f = function(|a: Tensor, b: Tensor| a.matmul_preferred(&b, DType::F32));
    let specs = [
        ArraySpec::new(DType::BF16, &[4, 8]),
        ArraySpec::new(DType::BF16, &[8, 3]),
    ];
    let a = bf16(&bf16_data(32, 1), &[4, 8]);
    let b = bf16(&bf16_data(24, 2), &[8, 3]);
    f.call((&a, &b)).unwrap();
    let text = f.concrete_functions()[0].stablehlo(&specs).unwrap();
    let dots = ops(&text, "dot_general");
    assert_eq!(dots.len(), 1, "{text}");
    assert!(
        dots[0].contains("(tensor<4x8xbf16>, tensor<8x3xbf16>) -> tensor<4x3xf32>"),
        "{text}"
    );
    assert!(
        ops(&text, "convert").is_empty(),
        "a cast around the product: {text}"
    );
}

#[test]
fn a_narrower_or_other_kind_of_result_is_a_clear_error() {
    let a = Tensor::from_vec(vec![1f32; 4], &[2, 2]).unwrap();
    for (dtype, what) in [(DType::BF16, "narrower"), (DType::I64, "another kind")] {
        let e = a.matmul_preferred(&a, dtype).unwrap_err().to_string();
        assert!(
            e.contains("preferred_element_type") && e.contains("wider one of the same kind"),
            "{what}: {e}"
        );
    }
    let i = Tensor::from_vec(vec![1i32; 4], &[2, 2]).unwrap();
    let e = i
        .dot_general_preferred(&i, &[1], &[0], &[], &[], DType::F64)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dot_general") && e.contains("preferred_element_type"),
        "{e}"
    );
}

#[test]
fn einsum_accumulates_in_the_preferred_type() {
    // Two operands: one dot_general with the f32 result, no casts.
    let (m, k, n) = (4usize, 256usize, 3usize);
    let (av, bv) = (bf16_data(m * k, 10), bf16_data(k * n, 11));
    let (a, b) = (
        bf16(&av, &[m as i64, k as i64]),
        bf16(&bv, &[k as i64, n as i64]),
    );
    let want = matmul_ref(&av, &bv, m, k, n);
    let f = function(|a: Tensor, b: Tensor| {
        xlafn::einsum_preferred("ij,jk->ik", &[&a, &b], DType::F32)
    });
    for c in [
        xlafn::einsum_preferred("ij,jk->ik", &[&a, &b], DType::F32).unwrap(),
        f.call((&a, &b)).unwrap(),
    ] {
        assert_eq!(c.dtype(), DType::F32);
        assert!(max_err(&values(&c), &want) < 1e-4);
    }
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::BF16, &[m as i64, k as i64]),
            ArraySpec::new(DType::BF16, &[k as i64, n as i64]),
        ])
        .unwrap();
    assert_eq!(ops(&text, "dot_general").len(), 1, "{text}");
    assert!(ops(&text, "convert").is_empty(), "{text}");

    // Three operands, a batch of bilinear forms x_b^T M y_b: the partial
    // f32 result meets the third bf16 operand cast up; gradients in bf16.
    let (bs, p, q) = (3usize, 16usize, 8usize);
    let (xv, mv, yv) = (
        bf16_data(bs * p, 12),
        bf16_data(p * q, 13),
        bf16_data(bs * q, 14),
    );
    let (x, mm, y) = (
        bf16(&xv, &[bs as i64, p as i64]),
        bf16(&mv, &[p as i64, q as i64]),
        bf16(&yv, &[bs as i64, q as i64]),
    );
    let want: Vec<f64> = (0..bs)
        .map(|b| {
            (0..p)
                .flat_map(|i| (0..q).map(move |j| (i, j)))
                .map(|(i, j)| xv[b * p + i] * mv[i * q + j] * yv[b * q + j])
                .sum()
        })
        .collect();
    let tape = GradientTape::new();
    tape.watch(&x);
    let out = xlafn::einsum_preferred("bi,ij,bj->b", &[&x, &mm, &y], DType::F32).unwrap();
    assert_eq!(out.dtype(), DType::F32);
    assert!(
        max_err(&values(&out), &want) < 1e-4,
        "{:?} vs {want:?}",
        values(&out)
    );
    let loss = out.reduce_sum(&[], false).unwrap();
    let dx = tape.gradient(&loss, &[Source::from(&x)]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(dx.dtype(), DType::BF16);
    // d/dx[b,i] = sum_j M[i,j] y[b,j].
    let want_dx: Vec<f64> = (0..bs * p)
        .map(|r| {
            (0..q)
                .map(|j| mv[(r % p) * q + j] * yv[(r / p) * q + j])
                .sum()
        })
        .collect();
    assert!(max_err(&values(&dx), &want_dx) < 0.05);

    // One operand summed on its own: the sum is f32 (the bf16 sum of 512
    // values rounds to 8 bits), and a bare transpose comes back as f32.
    let (rows, cols) = (512usize, 2usize);
    let sv = bf16_data(rows * cols, 15);
    let s = bf16(&sv, &[rows as i64, cols as i64]);
    let want: Vec<f64> = (0..cols)
        .map(|j| (0..rows).map(|i| sv[i * cols + j]).sum())
        .collect();
    let wide = xlafn::einsum_preferred("ij->j", &[&s], DType::F32).unwrap();
    assert_eq!(wide.dtype(), DType::F32);
    assert!(
        max_err(&values(&wide), &want) < 1e-4,
        "{:?} vs {want:?}",
        values(&wide)
    );
    let t = xlafn::einsum_preferred("ij->ji", &[&s], DType::F32).unwrap();
    assert_eq!((t.dtype(), t.dims()), (DType::F32, vec![2, 512]));

    let e = xlafn::einsum_preferred("ij,jk->ik", &[&a, &b], DType::F16)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("einsum") && e.contains("preferred_element_type"),
        "{e}"
    );
}
