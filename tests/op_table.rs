//! The op table: one row per op, run for each dtype it
//! supports (f64, f32, f16, bf16), eagerly and traced, against a reference
//! computed in f64 by Rust's own functions or a formula written here; and,
//! for differentiable rows, the tape's f64 gradient against central
//! differences of that reference. The per-family test files hold the
//! structured ops (windows, convolutions, scatters, sorts); this table
//! covers the pointwise and reduction ops across dtypes.

use xlafn::prelude::*;

type Op = fn(&Tensor) -> Result<Tensor>;
type BinOp = fn(&Tensor, &Tensor) -> Result<Tensor>;

/// A pointwise op: its method, its f64 reference, the input range, and
/// whether it has a gradient worth checking.
struct Row {
    name: &'static str,
    op: Op,
    reference: fn(f64) -> f64,
    range: (f64, f64),
    differentiable: bool,
}

fn erf_series(x: f64) -> f64 {
    // Maclaurin series, enough terms for |x| <= 2.
    let mut sum = 0.0;
    let mut term = x;
    for n in 0..60 {
        sum += term / (2 * n + 1) as f64;
        term *= -x * x / (n + 1) as f64;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn rows() -> Vec<Row> {
    let r = |name, op: Op, reference: fn(f64) -> f64, range, differentiable| Row {
        name,
        op,
        reference,
        range,
        differentiable,
    };
    vec![
        r("neg", |x| x.neg(), |v| -v, (-3.0, 3.0), true),
        r("abs", |x| x.abs(), f64::abs, (0.1, 3.0), true),
        r("exp", |x| x.exp(), f64::exp, (-3.0, 3.0), true),
        r("expm1", |x| x.expm1(), f64::exp_m1, (-2.0, 2.0), true),
        r("cbrt", |x| x.cbrt(), f64::cbrt, (0.1, 3.0), true),
        r("log", |x| x.log(), f64::ln, (0.1, 5.0), true),
        r("log1p", |x| x.log1p(), f64::ln_1p, (-0.5, 3.0), true),
        r("sqrt", |x| x.sqrt(), f64::sqrt, (0.1, 5.0), true),
        r("rsqrt", |x| x.rsqrt(), |v| 1.0 / v.sqrt(), (0.1, 5.0), true),
        r("square", |x| x.square(), |v| v * v, (-3.0, 3.0), true),
        r(
            "reciprocal",
            |x| x.reciprocal(),
            |v| 1.0 / v,
            (0.5, 3.0),
            true,
        ),
        r("sin", |x| x.sin(), f64::sin, (-3.0, 3.0), true),
        r("cos", |x| x.cos(), f64::cos, (-3.0, 3.0), true),
        r("tan", |x| x.tan(), f64::tan, (-1.2, 1.2), true),
        r("asin", |x| x.asin(), f64::asin, (-0.9, 0.9), true),
        r("acos", |x| x.acos(), f64::acos, (-0.9, 0.9), true),
        r("atan", |x| x.atan(), f64::atan, (-3.0, 3.0), true),
        r("sinh", |x| x.sinh(), f64::sinh, (-2.0, 2.0), true),
        r("cosh", |x| x.cosh(), f64::cosh, (-2.0, 2.0), true),
        r("tanh", |x| x.tanh(), f64::tanh, (-3.0, 3.0), true),
        r("asinh", |x| x.asinh(), f64::asinh, (-3.0, 3.0), true),
        r("acosh", |x| x.acosh(), f64::acosh, (1.1, 4.0), true),
        r("atanh", |x| x.atanh(), f64::atanh, (-0.9, 0.9), true),
        r("erf", |x| x.erf(), erf_series, (-2.0, 2.0), true),
        r(
            "erfc",
            |x| x.erfc(),
            |v| 1.0 - erf_series(v),
            (-2.0, 2.0),
            true,
        ),
        r("sigmoid", |x| x.sigmoid(), sigmoid, (-5.0, 5.0), true),
        r(
            "log_sigmoid",
            |x| x.log_sigmoid(),
            |v| sigmoid(v).ln(),
            (-5.0, 5.0),
            true,
        ),
        r(
            "softplus",
            |x| x.softplus(),
            |v| v.exp().ln_1p(),
            (-5.0, 5.0),
            true,
        ),
        r("relu", |x| x.relu(), |v| v.max(0.0), (-3.0, 3.0), true),
        r(
            "relu6",
            |x| x.relu6(),
            |v| v.clamp(0.0, 6.0),
            (-3.0, 9.0),
            true,
        ),
        r("silu", |x| x.silu(), |v| v * sigmoid(v), (-4.0, 4.0), true),
        r(
            "elu",
            |x| x.elu(),
            |v| if v > 0.0 { v } else { v.exp_m1() },
            (-3.0, 3.0),
            true,
        ),
        r(
            "gelu (tanh)",
            |x| x.gelu(true),
            |v| {
                let c = (2.0 / std::f64::consts::PI).sqrt();
                0.5 * v * (1.0 + (c * (v + 0.044715 * v * v * v)).tanh())
            },
            (-3.0, 3.0),
            true,
        ),
        r(
            "gelu (exact)",
            |x| x.gelu(false),
            |v| 0.5 * v * (1.0 + erf_series(v / 2f64.sqrt())),
            (-2.5, 2.5),
            true,
        ),
        r(
            "leaky_relu",
            |x| x.leaky_relu(0.2),
            |v| if v > 0.0 { v } else { 0.2 * v },
            (-3.0, 3.0),
            true,
        ),
        r("floor", |x| x.floor(), f64::floor, (-3.0, 3.0), false),
        r("ceil", |x| x.ceil(), f64::ceil, (-3.0, 3.0), false),
        r(
            "round",
            |x| x.round(),
            f64::round_ties_even,
            (-3.0, 3.0),
            false,
        ),
        r("sign", |x| x.sign(), f64::signum, (-3.0, 3.0), false),
    ]
}

/// A binary op: its method, reference, the two input ranges.
struct BinRow {
    name: &'static str,
    op: BinOp,
    reference: fn(f64, f64) -> f64,
    range: (f64, f64),
    differentiable: bool,
}

fn bin_rows() -> Vec<BinRow> {
    let r = |name, op: BinOp, reference: fn(f64, f64) -> f64, range, differentiable| BinRow {
        name,
        op,
        reference,
        range,
        differentiable,
    };
    vec![
        r("add", |a, b| a.add(b), |a, b| a + b, (-3.0, 3.0), true),
        r("sub", |a, b| a.sub(b), |a, b| a - b, (-3.0, 3.0), true),
        r("mul", |a, b| a.mul(b), |a, b| a * b, (-3.0, 3.0), true),
        r("div", |a, b| a.div(b), |a, b| a / b, (0.5, 3.0), true),
        r("pow", |a, b| a.pow(b), f64::powf, (0.5, 2.5), true),
        r("maximum", |a, b| a.maximum(b), f64::max, (-3.0, 3.0), true),
        r("minimum", |a, b| a.minimum(b), f64::min, (-3.0, 3.0), true),
        r("atan2", |a, b| a.atan2(b), f64::atan2, (-3.0, 3.0), true),
        r(
            "rem (fmod)",
            |a, b| a.rem(b),
            |a, b| a % b,
            (0.3, 3.0),
            false,
        ),
        r(
            "floormod",
            |a, b| a.floormod(b),
            |a, b| a - b * (a / b).floor(),
            (0.3, 3.0),
            false,
        ),
    ]
}

/// `n` values spread over `range` (deterministic, distinct).
fn inputs(n: usize, range: (f64, f64), seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            range.0 + (range.1 - range.0) * ((s >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// Relative tolerance for results computed in `dtype`.
fn tolerance(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => 1e-12,
        DType::F32 => 2e-5,
        DType::F16 => 4e-3,
        _ => 3e-2,
    }
}

const DTYPES: [DType; 4] = [DType::F64, DType::F32, DType::F16, DType::BF16];

/// The dtype's rounding of `v` (inputs are rounded before the reference
/// sees them, so only the op's own error is measured).
fn rounded(v: &[f64], dtype: DType) -> Vec<f64> {
    Tensor::from_vec(v.to_vec(), &[v.len() as i64])
        .unwrap()
        .cast(dtype)
        .unwrap()
        .cast(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
}

fn check_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        let ok = (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{what}: [{i}] {g} vs {w}");
    }
}

/// Eager and traced results of `f` on `args`, as f64.
fn eager_and_traced(
    f: impl Fn(&[Tensor]) -> Result<Tensor> + Clone + Send + Sync + 'static,
    args: &[Tensor],
) -> (Vec<f64>, Vec<f64>) {
    let as_f64 = |t: Tensor| t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap();
    let eager = as_f64(f(args).unwrap());
    let traced_fn = function(move |xs: Vec<Tensor>| f(&xs));
    let traced = as_f64(traced_fn.call((args.to_vec(),)).unwrap());
    (eager, traced)
}

#[test]
fn pointwise_ops_across_dtypes_eager_and_traced() {
    for row in rows() {
        let x = inputs(24, row.range, 1);
        for dtype in DTYPES {
            let xr = rounded(&x, dtype);
            let xt = Tensor::from_vec(x.clone(), &[24])
                .unwrap()
                .cast(dtype)
                .unwrap();
            let op = row.op;
            let (eager, traced) = eager_and_traced(move |a| op(&a[0]), &[xt]);
            let what = format!("{} {dtype:?}", row.name);
            check_close(
                &traced,
                &eager,
                tolerance(dtype),
                &format!("{what} traced vs eager"),
            );
            let want: Vec<f64> = xr.iter().map(|&v| (row.reference)(v)).collect();
            // Low-precision results are rounded to the dtype too.
            let want = if dtype == DType::F64 {
                want
            } else {
                rounded(&want, dtype)
            };
            check_close(&eager, &want, tolerance(dtype), &what);
        }
    }
}

#[test]
fn binary_ops_across_dtypes_eager_and_traced() {
    for row in bin_rows() {
        let a = inputs(24, row.range, 2);
        let b = inputs(24, row.range, 3);
        for dtype in DTYPES {
            let (ar, br) = (rounded(&a, dtype), rounded(&b, dtype));
            let at = Tensor::from_vec(a.clone(), &[24])
                .unwrap()
                .cast(dtype)
                .unwrap();
            let bt = Tensor::from_vec(b.clone(), &[24])
                .unwrap()
                .cast(dtype)
                .unwrap();
            let op = row.op;
            let (eager, traced) = eager_and_traced(move |x| op(&x[0], &x[1]), &[at, bt]);
            let what = format!("{} {dtype:?}", row.name);
            check_close(
                &traced,
                &eager,
                tolerance(dtype),
                &format!("{what} traced vs eager"),
            );
            let want: Vec<f64> = ar
                .iter()
                .zip(&br)
                .map(|(&x, &y)| (row.reference)(x, y))
                .collect();
            let want = if dtype == DType::F64 {
                want
            } else {
                rounded(&want, dtype)
            };
            check_close(&eager, &want, tolerance(dtype), &what);
        }
    }
}

fn central(f: impl Fn(f64) -> f64, x: f64) -> f64 {
    let h = 1e-6 * (1.0 + x.abs());
    (f(x + h) - f(x - h)) / (2.0 * h)
}

#[test]
fn gradients_of_differentiable_rows_match_finite_differences() {
    for row in rows().into_iter().filter(|r| r.differentiable) {
        let x = inputs(16, row.range, 4);
        let xt = Tensor::from_vec(x.clone(), &[16]).unwrap();
        let tape = GradientTape::new();
        tape.watch(&xt);
        let y = (row.op)(&xt).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&y, &[Source::from(&xt)]).unwrap()[0]
            .clone()
            .unwrap_or_else(|| panic!("{}: no gradient", row.name))
            .to_vec::<f64>()
            .unwrap();
        let want: Vec<f64> = x.iter().map(|&v| central(row.reference, v)).collect();
        check_close(&g, &want, 1e-6, &format!("d {}", row.name));
    }
    for row in bin_rows().into_iter().filter(|r| r.differentiable) {
        let a = inputs(16, row.range, 5);
        let b = inputs(16, row.range, 6);
        let (at, bt) = (
            Tensor::from_vec(a.clone(), &[16]).unwrap(),
            Tensor::from_vec(b.clone(), &[16]).unwrap(),
        );
        let tape = GradientTape::new();
        tape.watch(&at);
        tape.watch(&bt);
        let y = (row.op)(&at, &bt).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape
            .gradient(&y, &[Source::from(&at), Source::from(&bt)])
            .unwrap();
        let ga = g[0].as_ref().unwrap().to_vec::<f64>().unwrap();
        let gb = g[1].as_ref().unwrap().to_vec::<f64>().unwrap();
        let wa: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| central(|v| (row.reference)(v, y), x))
            .collect();
        let wb: Vec<f64> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| central(|v| (row.reference)(x, v), y))
            .collect();
        check_close(&ga, &wa, 1e-6, &format!("d{}/da", row.name));
        check_close(&gb, &wb, 1e-6, &format!("d{}/db", row.name));
    }
}

/// A reduction over axis 1 of a `[4, 6]` input, and its f64 reference
/// over one row.
struct ReduceRow {
    name: &'static str,
    op: Op,
    reference: fn(&[f64]) -> f64,
}

#[test]
fn reductions_across_dtypes_with_gradients() {
    let rows = [
        ReduceRow {
            name: "reduce_sum",
            op: |x| x.reduce_sum(&[1], false),
            reference: |r| r.iter().sum(),
        },
        ReduceRow {
            name: "reduce_mean",
            op: |x| x.reduce_mean(&[1], false),
            reference: |r| r.iter().sum::<f64>() / r.len() as f64,
        },
        ReduceRow {
            name: "reduce_max",
            op: |x| x.reduce_max(&[1], false),
            reference: |r| r.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
        },
        ReduceRow {
            name: "reduce_min",
            op: |x| x.reduce_min(&[1], false),
            reference: |r| r.iter().cloned().fold(f64::INFINITY, f64::min),
        },
        ReduceRow {
            name: "reduce_prod",
            op: |x| x.reduce_prod(&[1], false),
            reference: |r| r.iter().product(),
        },
        ReduceRow {
            name: "reduce_logsumexp",
            op: |x| x.reduce_logsumexp(&[1], false),
            reference: |r| r.iter().map(|v| v.exp()).sum::<f64>().ln(),
        },
        ReduceRow {
            name: "reduce_variance",
            op: |x| x.reduce_variance(&[1], false),
            reference: |r| {
                let m = r.iter().sum::<f64>() / r.len() as f64;
                r.iter().map(|v| (v - m) * (v - m)).sum::<f64>() / r.len() as f64
            },
        },
    ];
    let x = inputs(24, (0.5, 1.5), 7);
    for row in &rows {
        for dtype in DTYPES {
            let xr = rounded(&x, dtype);
            let xt = Tensor::from_vec(x.clone(), &[4, 6])
                .unwrap()
                .cast(dtype)
                .unwrap();
            let op = row.op;
            let (eager, traced) = eager_and_traced(move |a| op(&a[0]), &[xt]);
            let what = format!("{} {dtype:?}", row.name);
            check_close(
                &traced,
                &eager,
                tolerance(dtype),
                &format!("{what} traced vs eager"),
            );
            let want: Vec<f64> = xr.chunks(6).map(row.reference).collect();
            // Sums in low precision round at every step: allow a few ulps more.
            check_close(&eager, &want, tolerance(dtype) * 4.0, &what);
        }
        // Gradient in f64 against central differences of the reference.
        let xt = Tensor::from_vec(x.clone(), &[4, 6]).unwrap();
        let tape = GradientTape::new();
        tape.watch(&xt);
        let y = (row.op)(&xt).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&y, &[Source::from(&xt)]).unwrap()[0]
            .clone()
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        for i in 0..24 {
            let r = i / 6;
            let f = |v: f64| {
                let mut row_vals = x[r * 6..r * 6 + 6].to_vec();
                row_vals[i % 6] = v;
                (row.reference)(&row_vals)
            };
            let want = central(f, x[i]);
            assert!(
                (g[i] - want).abs() < 1e-6 * (1.0 + want.abs()),
                "d {} [{i}]: {} vs {want}",
                row.name,
                g[i]
            );
        }
    }
}
