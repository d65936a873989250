//! The structured ops (convolution, pooling, cumulative sums, padding,
//! gathers and scatters, sorting, einsum) in bf16 and f16, eagerly and
//! compiled: each result against the same op's f64 result, within the
//! half type's rounding (values are small integers or halves, so most are
//! exact), and their gradients against the f64 gradients.

use xlafn::prelude::*;
use xlafn::{PadMode, Padding};

type Case = (&'static str, fn(&Tensor) -> Result<Tensor>);

/// Each op, applied to a `[2, 6, 6, 2]` input.
fn cases() -> Vec<Case> {
    vec![
        ("conv2d", |x| {
            let k = Tensor::from_vec(
                (0..36)
                    .map(|i| ((i % 5) as f64 - 2.0) * 0.5)
                    .collect::<Vec<_>>(),
                &[3, 3, 2, 2],
            )?;
            x.conv2d(&k.cast(x.dtype())?, [1, 1], Padding::Same, [1, 1])
        }),
        ("conv2d, 8 features", |x| {
            let x = Tensor::concat(&[x.clone(), x.clone(), x.clone(), x.clone()], 3)?;
            let k = Tensor::from_vec(
                (0..72)
                    .map(|i| ((i % 3) as f64 - 1.0) * 0.5)
                    .collect::<Vec<_>>(),
                &[3, 3, 8, 1],
            )?;
            x.conv2d(&k.cast(x.dtype())?, [2, 2], Padding::Valid, [1, 1])
        }),
        ("max_pool", |x| x.max_pool(&[2, 2], &[2, 2], Padding::Valid)),
        ("max_pool, overlapping", |x| {
            x.max_pool(&[3, 3], &[2, 2], Padding::Same)
        }),
        ("avg_pool", |x| x.avg_pool(&[2, 2], &[2, 2], Padding::Valid)),
        ("cumsum", |x| x.cumsum(2, false, true)),
        ("pad reflect", |x| {
            x.pad(&[[0, 0], [1, 2], [2, 1], [0, 0]], PadMode::Reflect, 0.0)
        }),
        ("take_along_axis", |x| {
            let idx = Tensor::from_vec(
                (0..144i32).map(|i| i * 7 % 6).collect::<Vec<_>>(),
                &[2, 6, 6, 2],
            )?;
            x.take_along_axis(&idx, 1)
        }),
        ("tensor_scatter_nd_add", |x| {
            // Rows [0,1], [1,4] and [0,1] again (duplicates add).
            let idx = Tensor::from_vec(vec![0i32, 1, 1, 4, 0, 1], &[3, 2])?;
            let updates = x.slice(&[1, 0, 0, 0], &[1, 3, 6, 2])?.reshape(&[3, 6, 2])?;
            x.tensor_scatter_nd_add(&idx, &updates)
        }),
        ("sort", |x| x.sort(2, true)),
        ("einsum", |x| einsum("bhwc,bgwc->bhg", &[x, x])),
    ]
}

fn input(dtype: DType) -> Tensor {
    let v: Vec<f64> = (0..144)
        .map(|i| (((i * 37) % 17) as f64 - 8.0) * 0.5)
        .collect();
    Tensor::from_vec(v, &[2, 6, 6, 2])
        .unwrap()
        .cast(dtype)
        .unwrap()
}

fn close(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
    assert_eq!(got.dims(), want.dims(), "{what}");
    let got = got.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let want = want.to_vec::<f64>().unwrap();
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: {g} vs {w}"
        );
    }
}

/// bf16 keeps 8 significant bits, f16 11.
fn tolerance(dtype: DType) -> f64 {
    if dtype == DType::BF16 { 2e-2 } else { 2e-3 }
}

#[test]
fn structured_ops_in_half_precision_match_f64() {
    for (name, op) in cases() {
        let want = op(&input(DType::F64)).unwrap();
        for dtype in [DType::BF16, DType::F16] {
            let x = input(dtype);
            let eager = op(&x).unwrap_or_else(|e| panic!("{name} {dtype}: {e}"));
            assert_eq!(eager.dtype(), dtype, "{name}");
            close(
                &eager,
                &want,
                tolerance(dtype),
                &format!("{name} {dtype} eager"),
            );
            let compiled = function(move |x: Tensor| op(&x))
                .call((x,))
                .unwrap_or_else(|e| panic!("{name} {dtype} compiled: {e}"));
            close(
                &compiled,
                &want,
                tolerance(dtype),
                &format!("{name} {dtype} compiled"),
            );
        }
    }
}

#[test]
fn structured_gradients_in_half_precision_match_f64() {
    let grad = |op: fn(&Tensor) -> Result<Tensor>, x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = op(&x)?;
        let w = Tensor::from_vec(
            (0..y.size())
                .map(|i| (i % 3) as f64 - 1.0)
                .collect::<Vec<_>>(),
            &y.dims(),
        )?;
        let loss = y.mul(&w.cast(y.dtype())?)?.reduce_sum(&[], false)?;
        Ok(tape.gradient(&loss, &[(&x).into()])?[0].clone().unwrap())
    };
    for (name, op) in cases() {
        if name == "sort" || name == "einsum" {
            continue; // sort's gradient routes through ties; einsum is quadratic in x
        }
        let want = grad(op, input(DType::F64)).unwrap();
        for dtype in [DType::BF16, DType::F16] {
            let got = grad(op, input(dtype)).unwrap_or_else(|e| panic!("{name} {dtype}: {e}"));
            close(
                &got,
                &want,
                tolerance(dtype),
                &format!("{name} {dtype} gradient"),
            );
            let compiled = function(move |x: Tensor| grad(op, x))
                .call((input(dtype),))
                .unwrap();
            close(
                &compiled,
                &want,
                tolerance(dtype),
                &format!("{name} {dtype} compiled gradient"),
            );
        }
    }
}
