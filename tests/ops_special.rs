//! Special functions and activations against independent references:
//! Rust's `f64` math, the functions' own series written out here (erf's
//! Maclaurin series, Stirling's series for lgamma and digamma) and
//! published values. Eager and traced results agree, and every gradient
//! matches central finite differences in f64. Bitwise ops and their dtype
//! errors are in `ops_bitwise.rs`.

#[path = "common/scratch.rs"]
mod scratch;

use xlafn::prelude::*;

type Op = fn(&Tensor) -> xlafn::Result<Tensor>;

// ------------------------------------------------------------ references

/// erf by its Maclaurin series (converges fast enough for |x| <= 3).
fn erf_series(x: f64) -> f64 {
    let mut term = x; // (-1)^n x^(2n+1) / n!
    let mut sum = x;
    for n in 1..200 {
        term *= -x * x / n as f64;
        let add = term / (2 * n + 1) as f64;
        sum += add;
        if add.abs() < 1e-18 {
            break;
        }
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// ln|Gamma(x)| for x > 0: the recurrence up to x >= 15, then Stirling.
fn lgamma_series(mut x: f64) -> f64 {
    let mut shift = 0.0;
    while x < 15.0 {
        shift -= x.ln();
        x += 1.0;
    }
    let x2 = x * x;
    shift + (x - 0.5) * x.ln() - x + 0.5 * (2.0 * std::f64::consts::PI).ln() + 1.0 / (12.0 * x)
        - 1.0 / (360.0 * x * x2)
        + 1.0 / (1260.0 * x * x2 * x2)
        - 1.0 / (1680.0 * x * x2 * x2 * x2)
}

/// digamma for x > 0: the recurrence up to x >= 15, then the asymptotic
/// series.
fn digamma_series(mut x: f64) -> f64 {
    let mut shift = 0.0;
    while x < 15.0 {
        shift -= 1.0 / x;
        x += 1.0;
    }
    let x2 = x * x;
    shift + x.ln() - 0.5 / x - 1.0 / (12.0 * x2) + 1.0 / (120.0 * x2 * x2)
        - 1.0 / (252.0 * x2 * x2 * x2)
        + 1.0 / (240.0 * x2 * x2 * x2 * x2)
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

fn softplus(x: f64) -> f64 {
    x.max(0.0) + (-x.abs()).exp().ln_1p()
}

const SELU_ALPHA: f64 = 1.673_263_242_354_377_3;
const SELU_SCALE: f64 = 1.050_700_987_355_480_5;

struct Case {
    name: &'static str,
    op: Op,
    reference: fn(f64) -> f64,
    /// Points for values and gradients (away from kinks).
    points: &'static [f64],
}

fn cases() -> Vec<Case> {
    const WIDE: &[f64] = &[-2.5, -1.3, -0.4, 0.3, 0.9, 2.2];
    const UNIT: &[f64] = &[-0.95, -0.6, -0.1, 0.2, 0.55, 0.9];
    const POSITIVE: &[f64] = &[0.15, 0.5, 1.0, 1.7, 3.3, 7.5];
    vec![
        Case {
            name: "erf",
            op: Tensor::erf,
            reference: erf_series,
            points: WIDE,
        },
        Case {
            name: "erfc",
            op: Tensor::erfc,
            reference: |x| 1.0 - erf_series(x),
            points: WIDE,
        },
        Case {
            name: "expm1",
            op: Tensor::expm1,
            reference: f64::exp_m1,
            points: WIDE,
        },
        Case {
            name: "cbrt",
            op: Tensor::cbrt,
            reference: f64::cbrt,
            points: WIDE,
        },
        Case {
            name: "tan",
            op: Tensor::tan,
            reference: f64::tan,
            points: &[-1.4, -0.7, 0.0, 0.3, 1.1, 1.45],
        },
        Case {
            name: "atan",
            op: Tensor::atan,
            reference: f64::atan,
            points: WIDE,
        },
        Case {
            name: "asin",
            op: Tensor::asin,
            reference: f64::asin,
            points: UNIT,
        },
        Case {
            name: "acos",
            op: Tensor::acos,
            reference: f64::acos,
            points: UNIT,
        },
        Case {
            name: "sinh",
            op: Tensor::sinh,
            reference: f64::sinh,
            points: WIDE,
        },
        Case {
            name: "cosh",
            op: Tensor::cosh,
            reference: f64::cosh,
            points: WIDE,
        },
        Case {
            name: "asinh",
            op: Tensor::asinh,
            reference: f64::asinh,
            points: WIDE,
        },
        Case {
            name: "acosh",
            op: Tensor::acosh,
            reference: f64::acosh,
            points: &[1.05, 1.5, 2.0, 3.7, 10.0, 40.0],
        },
        Case {
            name: "atanh",
            op: Tensor::atanh,
            reference: f64::atanh,
            points: UNIT,
        },
        Case {
            name: "lgamma",
            op: Tensor::lgamma,
            reference: lgamma_series,
            points: POSITIVE,
        },
        Case {
            name: "digamma",
            op: Tensor::digamma,
            reference: digamma_series,
            points: POSITIVE,
        },
        Case {
            name: "reciprocal",
            op: Tensor::reciprocal,
            reference: f64::recip,
            points: &[-3.0, -0.5, 0.25, 1.0, 2.0, 8.0],
        },
        Case {
            name: "softplus",
            op: Tensor::softplus,
            reference: |x| (1.0 + x.exp()).ln(),
            points: WIDE,
        },
        Case {
            name: "log_sigmoid",
            op: Tensor::log_sigmoid,
            reference: |x| sigmoid(x).ln(),
            points: WIDE,
        },
        Case {
            name: "silu",
            op: Tensor::silu,
            reference: |x| x * sigmoid(x),
            points: WIDE,
        },
        Case {
            name: "gelu",
            op: |x| x.gelu(false),
            reference: |x| 0.5 * x * (1.0 + erf_series(x / 2f64.sqrt())),
            points: WIDE,
        },
        Case {
            name: "gelu_tanh",
            op: |x| x.gelu(true),
            reference: |x| {
                0.5 * x
                    * (1.0
                        + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x.powi(3))).tanh())
            },
            points: WIDE,
        },
        Case {
            name: "leaky_relu",
            op: |x| x.leaky_relu(0.2),
            reference: |x| if x > 0.0 { x } else { 0.2 * x },
            points: WIDE,
        },
        Case {
            name: "elu",
            op: Tensor::elu,
            reference: |x| if x > 0.0 { x } else { x.exp_m1() },
            points: WIDE,
        },
        Case {
            name: "selu",
            op: Tensor::selu,
            reference: |x| SELU_SCALE * if x > 0.0 { x } else { SELU_ALPHA * x.exp_m1() },
            points: WIDE,
        },
        Case {
            name: "relu6",
            op: Tensor::relu6,
            reference: |x| x.clamp(0.0, 6.0),
            points: &[-2.0, -0.5, 0.5, 3.0, 5.5, 7.0],
        },
    ]
}

fn assert_close(name: &str, got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{name}");
    for (g, w) in got.iter().zip(want) {
        let ok = (g.is_nan() && w.is_nan()) || g == w || (g - w).abs() <= tol * (1.0 + w.abs());
        assert!(ok, "{name}: got {g}, want {w} (all: {got:?} vs {want:?})");
    }
}

// ---------------------------------------------------------------- values

#[test]
fn unary_ops_match_references_in_f64_and_f32() {
    for c in cases() {
        let want: Vec<f64> = c.points.iter().map(|&x| (c.reference)(x)).collect();
        let x = Tensor::from_slice(c.points, &[2, 3]).unwrap();
        let got = (c.op)(&x).unwrap();
        assert_eq!(got.dtype(), DType::F64, "{}", c.name);
        assert_eq!(got.dims(), vec![2, 3], "{}", c.name);
        assert_close(c.name, &got.to_vec::<f64>().unwrap(), &want, 1e-12);

        let x32 = x.cast(DType::F32).unwrap();
        let got = (c.op)(&x32).unwrap();
        assert_eq!(got.dtype(), DType::F32, "{}", c.name);
        assert_close(c.name, &got.to_f64_vec().unwrap(), &want, 2e-5);
    }
}

#[test]
fn unary_ops_compute_in_f16_and_bf16() {
    for c in cases() {
        for (dtype, tol) in [(DType::F16, 1e-2), (DType::BF16, 5e-2)] {
            let x = Tensor::from_slice(c.points, &[6])
                .unwrap()
                .cast(dtype)
                .unwrap();
            // The reference at the rounded inputs.
            let rounded = x.to_f64_vec().unwrap();
            let want_rounded: Vec<f64> = rounded.iter().map(|&x| (c.reference)(x)).collect();
            let got = (c.op)(&x).unwrap();
            assert_eq!(got.dtype(), dtype, "{}", c.name);
            assert_close(c.name, &got.to_f64_vec().unwrap(), &want_rounded, tol);
        }
    }
}

/// (x, f(x)) pairs.
type Points = Vec<(f64, f64)>;

#[test]
fn published_values_of_the_special_functions() {
    let pi = std::f64::consts::PI;
    let euler = 0.577_215_664_901_532_9;
    let checks: Vec<(&str, Op, Points)> = vec![
        (
            "erf",
            Tensor::erf,
            vec![
                (0.0, 0.0),
                (0.5, 0.520_499_877_813_046_5),
                (1.0, 0.842_700_792_949_714_9),
                (-1.5, -0.966_105_146_475_310_7),
                (2.0, 0.995_322_265_018_952_7),
            ],
        ),
        (
            "erfc",
            Tensor::erfc,
            vec![
                (2.0, 0.004_677_734_981_047_266),
                (3.0, 2.209_049_699_858_544e-5),
                (-1.0, 1.842_700_792_949_715),
            ],
        ),
        (
            "erf_inv",
            Tensor::erf_inv,
            vec![
                (0.0, 0.0),
                (0.5, 0.476_936_276_204_469_9),
                (-0.5, -0.476_936_276_204_469_9),
                (1.0, f64::INFINITY),
                (-1.0, f64::NEG_INFINITY),
            ],
        ),
        (
            "lgamma",
            Tensor::lgamma,
            vec![
                (0.5, pi.sqrt().ln()),
                (1.0, 0.0),
                (2.0, 0.0),
                (3.0, 2f64.ln()),
                (10.0, 362_880f64.ln()),
                (1.5, (pi.sqrt() / 2.0).ln()),
                (-0.5, (2.0 * pi.sqrt()).ln()),
            ],
        ),
        (
            "digamma",
            Tensor::digamma,
            vec![
                (1.0, -euler),
                (2.0, 1.0 - euler),
                (0.5, -euler - 2.0 * 2f64.ln()),
                (-0.5, -euler - 2.0 * 2f64.ln() + 2.0),
                (10.0, 2.251_752_589_066_721),
            ],
        ),
    ];
    for (name, op, pairs) in checks {
        let xs: Vec<f64> = pairs.iter().map(|p| p.0).collect();
        let want: Vec<f64> = pairs.iter().map(|p| p.1).collect();
        let got = op(&Tensor::vector(&xs).unwrap())
            .unwrap()
            .to_vec::<f64>()
            .unwrap();
        assert_close(name, &got, &want, 1e-13);
    }
}

#[test]
fn erf_inv_inverts_the_erf_series() {
    let ys = [-2.0, -1.2, -0.3, 0.01, 0.7, 1.9];
    let xs: Vec<f64> = ys.iter().map(|&y| erf_series(y)).collect();
    let got = Tensor::vector(&xs)
        .unwrap()
        .erf_inv()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_close("erf_inv", &got, &ys, 1e-9);
}

#[test]
fn softplus_and_log_sigmoid_do_not_overflow() {
    for dtype in [DType::F32, DType::F64] {
        let x = Tensor::vector(&[-1000.0f64, -100.0, 0.0, 100.0, 1000.0])
            .unwrap()
            .cast(dtype)
            .unwrap();
        let sp = x.softplus().unwrap().to_f64_vec().unwrap();
        assert_close(
            "softplus",
            &sp,
            &[0.0, softplus(-100.0), 2f64.ln(), 100.0, 1000.0],
            1e-6,
        );
        let ls = x.log_sigmoid().unwrap().to_f64_vec().unwrap();
        assert_close(
            "log_sigmoid",
            &ls,
            &[-1000.0, -100.0, -(2f64.ln()), -softplus(-100.0), 0.0],
            1e-6,
        );
        // Gradients stay finite at the extremes.
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x
            .softplus()
            .unwrap()
            .add(&x.log_sigmoid().unwrap())
            .unwrap();
        let y = y.reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&y, &[Source::from(&x)]).unwrap()[0]
            .clone()
            .unwrap();
        // sigmoid(x) + sigmoid(-x) = 1 everywhere.
        assert_close(
            "softplus+log_sigmoid grad",
            &g.to_f64_vec().unwrap(),
            &[1.0; 5],
            1e-6,
        );
    }
    // Activations with exponentials keep finite gradients for large inputs.
    let x = Tensor::vector(&[-1000.0f32, 1000.0]).unwrap();
    for (name, op) in [
        ("elu", Tensor::elu as Op),
        ("selu", Tensor::selu),
        ("silu", Tensor::silu),
    ] {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = op(&x).unwrap().reduce_sum(&[], false).unwrap();
        let g = tape.gradient(&y, &[Source::from(&x)]).unwrap()[0]
            .clone()
            .unwrap();
        let g = g.to_f64_vec().unwrap();
        assert!(g.iter().all(|v| v.is_finite()), "{name}: {g:?}");
    }
}

#[test]
fn is_inf_and_integer_reciprocal() {
    let x =
        Tensor::vector(&[1.0f32, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, f32::MAX]).unwrap();
    assert_eq!(
        x.is_inf().unwrap().to_vec::<bool>().unwrap(),
        vec![false, true, true, false, false]
    );
    let i = Tensor::vector(&[1i32, 2, -1, -3]).unwrap();
    assert_eq!(
        i.reciprocal().unwrap().to_vec::<i32>().unwrap(),
        vec![1, 0, -1, 0]
    );
}

#[test]
fn relu6_takes_integers() {
    let x = Tensor::vector(&[-3i32, 0, 4, 6, 9]).unwrap();
    assert_eq!(
        x.relu6().unwrap().to_vec::<i32>().unwrap(),
        vec![0, 0, 4, 6, 6]
    );
}

#[test]
fn atan2_and_rem_match_rust() {
    let ys = [1.0f64, -1.0, 0.5, -2.5, 0.0, 3.0];
    let xs = [2.0f64, -0.5, -3.0, 1.5, -1.0, 0.0];
    let y = Tensor::vector(&ys).unwrap();
    let x = Tensor::vector(&xs).unwrap();
    let want: Vec<f64> = ys.iter().zip(&xs).map(|(a, b)| a.atan2(*b)).collect();
    assert_close(
        "atan2",
        &y.atan2(&x).unwrap().to_vec::<f64>().unwrap(),
        &want,
        1e-14,
    );
    let got32 = y
        .cast(DType::F32)
        .unwrap()
        .atan2(&x.cast(DType::F32).unwrap())
        .unwrap();
    assert_close("atan2 f32", &got32.to_f64_vec().unwrap(), &want, 1e-6);

    let a = [7.5f64, -7.5, 7.5, -7.5, 5.0, -0.25];
    let b = [2.0f64, 2.0, -2.0, -2.0, 0.75, 0.1];
    let want: Vec<f64> = a.iter().zip(&b).map(|(a, b)| a % b).collect();
    let got = Tensor::vector(&a)
        .unwrap()
        .rem(&Tensor::vector(&b).unwrap())
        .unwrap();
    assert_close("rem", &got.to_vec::<f64>().unwrap(), &want, 1e-14);
    let got = Tensor::vector(&a).unwrap().truncatemod_scalar(2.0).unwrap();
    let want: Vec<f64> = a.iter().map(|a| a % 2.0).collect();
    assert_close("truncatemod", &got.to_vec::<f64>().unwrap(), &want, 1e-14);

    let ia = [7i32, -7, 7, -7, 0, i32::MIN + 1];
    let ib = [3i32, 3, -3, -3, 5, 4];
    let want: Vec<i32> = ia.iter().zip(&ib).map(|(a, b)| a % b).collect();
    let got = Tensor::vector(&ia)
        .unwrap()
        .rem(&Tensor::vector(&ib).unwrap())
        .unwrap();
    assert_eq!(got.to_vec::<i32>().unwrap(), want);
    let ua = [7u32, 8, u32::MAX];
    let got = Tensor::vector(&ua).unwrap().rem_scalar(3).unwrap();
    assert_eq!(
        got.to_vec::<u32>().unwrap(),
        ua.iter().map(|a| a % 3).collect::<Vec<_>>()
    );
}

// ------------------------------------------------------- eager and traced

#[test]
fn traced_results_equal_eager_results() {
    let xs = [-1.7f32, -0.6, 0.2, 0.45, 0.8, 1.9];
    for c in cases() {
        let x = if matches!(c.name, "lgamma" | "digamma" | "acosh") {
            Tensor::from_slice(&xs.map(|v| v.abs() + 1.0), &[2, 3]).unwrap()
        } else if matches!(c.name, "asin" | "acos" | "atanh") {
            Tensor::from_slice(&xs.map(|v| v / 2.0), &[2, 3]).unwrap()
        } else {
            Tensor::from_slice(&xs, &[2, 3]).unwrap()
        };
        let eager = (c.op)(&x).unwrap().to_vec::<f32>().unwrap();
        let op = c.op;
        let f = function(move |x: Tensor| op(&x));
        let traced = f.call((x.clone(),)).unwrap().to_vec::<f32>().unwrap();
        let want: Vec<f64> = eager.iter().map(|v| *v as f64).collect();
        let got: Vec<f64> = traced.iter().map(|v| *v as f64).collect();
        assert_close(c.name, &got, &want, 1e-6);
    }
    let others: Vec<(&str, Op)> = vec![
        ("erf_inv", Tensor::erf_inv),
        ("is_inf_as_f32", |x| x.is_inf()?.cast(DType::F32)),
    ];
    let x = Tensor::vector(&[-0.9f32, -0.3, 0.0, 0.6]).unwrap();
    for (name, op) in others {
        let eager = op(&x).unwrap().to_vec::<f32>().unwrap();
        let f = function(move |x: Tensor| op(&x));
        assert_eq!(
            f.call((x.clone(),)).unwrap().to_vec::<f32>().unwrap(),
            eager,
            "{name}"
        );
    }
    // Binary ops.
    let f = function(|y: Tensor, x: Tensor| -> Result<(Tensor, Tensor)> {
        Ok((y.atan2(&x)?, y.rem(&x)?))
    });
    let y = Tensor::vector(&[1.0f32, -2.5, 3.25]).unwrap();
    let x = Tensor::vector(&[-0.5f32, 0.75, 2.0]).unwrap();
    let (a, r) = f.call((y.clone(), x.clone())).unwrap();
    assert_eq!(
        a.to_vec::<f32>().unwrap(),
        y.atan2(&x).unwrap().to_vec::<f32>().unwrap()
    );
    assert_eq!(
        r.to_vec::<f32>().unwrap(),
        y.rem(&x).unwrap().to_vec::<f32>().unwrap()
    );
}

// -------------------------------------------------------------- gradients

type F = dyn Fn(&Tensor) -> Result<Tensor>;

/// sum(f(x) * w) for fixed weights w, so every output element matters
/// differently.
fn weighted_sum(f: &F, x: &Tensor) -> Result<Tensor> {
    let y = f(x)?;
    let w: Vec<f64> = (0..y.size())
        .map(|i| 0.5 + (i as f64 * 0.37) % 1.0)
        .collect();
    let w = Tensor::from_vec(w, &y.dims())?;
    y.mul(&w)?.reduce_sum(&[], false)
}

fn check_gradient(name: &str, f: &F, x0: &[f64]) {
    let dims = [x0.len() as i64];
    let x = Tensor::from_vec(x0.to_vec(), &dims).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let s = weighted_sum(f, &x).unwrap();
    let analytic = tape.gradient(&s, &[Source::from(&x)]).unwrap()[0]
        .clone()
        .unwrap_or_else(|| panic!("{name}: no gradient"))
        .to_vec::<f64>()
        .unwrap();
    let eps = 1e-6;
    for i in 0..x0.len() {
        let at = |delta: f64| {
            let mut v = x0.to_vec();
            v[i] += delta;
            weighted_sum(f, &Tensor::from_vec(v, &dims).unwrap())
                .unwrap()
                .item::<f64>()
                .unwrap()
        };
        let numeric = (at(eps) - at(-eps)) / (2.0 * eps);
        let tol = 1e-5 * (1.0 + numeric.abs());
        assert!(
            (analytic[i] - numeric).abs() <= tol,
            "{name} at {}: analytic {} vs numeric {numeric}",
            x0[i],
            analytic[i]
        );
    }
}

#[test]
fn unary_gradients_match_finite_differences() {
    for c in cases() {
        let op = c.op;
        check_gradient(c.name, &move |x: &Tensor| op(x), c.points);
    }
    check_gradient(
        "erf_inv",
        &|x: &Tensor| x.erf_inv(),
        &[-0.9, -0.4, 0.05, 0.3, 0.8],
    );
    // Second order: d/dx lgamma' = digamma' (trigamma).
    check_gradient(
        "digamma via lgamma",
        &|x: &Tensor| {
            let tape = GradientTape::new();
            tape.watch(x);
            let y = x.lgamma()?.reduce_sum(&[], false)?;
            Ok(tape.gradient(&y, &[Source::from(x)])?[0].clone().unwrap())
        },
        &[0.4, 1.0, 2.5, 6.0],
    );
}

#[test]
fn binary_gradients_match_finite_differences() {
    let other = [1.5f64, -0.75, 2.0, -3.0, 0.6];
    let here = [0.4f64, 1.3, -2.2, -0.5, 2.9];
    let o = Tensor::vector(&other).unwrap();
    check_gradient(
        "atan2 dy",
        &{
            let o = o.clone();
            move |y: &Tensor| y.atan2(&o)
        },
        &here,
    );
    let h = Tensor::vector(&here).unwrap();
    check_gradient(
        "atan2 dx",
        &{
            let h = h.clone();
            move |x: &Tensor| h.atan2(x)
        },
        &other,
    );
    // rem away from its jumps (a/b not near an integer).
    let a = [7.3f64, -7.3, 2.9, -0.4, 5.5];
    let b = [2.0f64, 2.0, -1.3, 0.3, -1.6];
    let bt = Tensor::vector(&b).unwrap();
    check_gradient(
        "rem da",
        &{
            let bt = bt.clone();
            move |a: &Tensor| a.rem(&bt)
        },
        &a,
    );
    let at = Tensor::vector(&a).unwrap();
    check_gradient(
        "rem db",
        &{
            let at = at.clone();
            move |b: &Tensor| at.rem(b)
        },
        &b,
    );
    // Broadcasting: a scalar second operand gets the summed gradient.
    check_gradient(
        "atan2 broadcast",
        &{
            let h = h.clone();
            move |x: &Tensor| h.atan2(&x.reshape(&[])?)
        },
        &[0.8],
    );
}

#[test]
fn gradients_inside_a_traced_function_equal_eager_ones() {
    let grad = function(|x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(&x);
        let y = x
            .erf()?
            .add(&x.softplus()?)?
            .add(&x.gelu(true)?)?
            .add(&x.atan2(&x.add_scalar(2.0)?)?)?;
        let y = y
            .add(&x.add_scalar(3.0)?.lgamma()?)?
            .reduce_sum(&[], false)?;
        Ok(tape.gradient(&y, &[Source::from(&x)])?[0].clone().unwrap())
    });
    let x = Tensor::vector(&[-0.7f64, 0.0, 0.4, 1.6]).unwrap();
    let traced = grad.call((x.clone(),)).unwrap().to_vec::<f64>().unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x
        .erf()
        .unwrap()
        .add(&x.softplus().unwrap())
        .unwrap()
        .add(&x.gelu(true).unwrap())
        .unwrap();
    let y = y
        .add(&x.atan2(&x.add_scalar(2.0).unwrap()).unwrap())
        .unwrap();
    let y = y
        .add(&x.add_scalar(3.0).unwrap().lgamma().unwrap())
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let eager = tape.gradient(&y, &[Source::from(&x)]).unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    assert_close("traced gradient", &traced, &eager, 1e-12);
    // softplus at 0 has gradient 1/2 exactly.
    let tape = GradientTape::new();
    let z = Tensor::vector(&[0.0f64]).unwrap();
    tape.watch(&z);
    let y = z.softplus().unwrap().reduce_sum(&[], false).unwrap();
    let g = tape.gradient(&y, &[Source::from(&z)]).unwrap()[0]
        .clone()
        .unwrap();
    assert_eq!(g.to_vec::<f64>().unwrap(), vec![0.5]);
}

// ----------------------------------------------------------------- dtypes

fn expect_invalid(r: xlafn::Result<Tensor>, op: &str, wanted: &str) {
    match r {
        Err(Error::InvalidArgument { op: o, message }) => {
            assert_eq!(o, op, "{message}");
            assert!(message.contains(wanted), "{op}: {message}");
        }
        other => panic!("{op}: expected an InvalidArgument error, got {other:?}"),
    }
}

#[test]
fn dtype_errors_name_the_op() {
    let i = Tensor::vector(&[1i32, 2]).unwrap();
    let b = Tensor::vector(&[true, false]).unwrap();
    // Float math on integers.
    expect_invalid(i.erf(), "erf", "floating-point");
    expect_invalid(i.lgamma(), "lgamma", "floating-point");
    expect_invalid(i.tan(), "tan", "floating-point");
    expect_invalid(i.is_inf(), "is_inf", "floating-point");
    expect_invalid(i.softplus(), "softplus", "floating-point");
    expect_invalid(i.atan2(&i), "atan2", "floating-point");
    // Composite activations report their own names.
    expect_invalid(i.gelu(false), "gelu", "floating-point");
    expect_invalid(i.silu(), "silu", "floating-point");
    expect_invalid(i.elu(), "elu", "floating-point");
    expect_invalid(i.selu(), "selu", "floating-point");
    expect_invalid(i.leaky_relu(0.2), "leaky_relu", "floating-point");
    expect_invalid(b.relu6(), "relu6", "numeric");
    expect_invalid(b.reciprocal(), "reciprocal", "numeric");
    expect_invalid(b.rem(&b), "truncatemod", "numeric");
    // Inside a traced function the error names the op too.
    let g = function(|x: Tensor| x.erf());
    let msg = g.call((i.clone(),)).unwrap_err().to_string();
    assert!(msg.contains("erf"), "{msg}");
}

// ---------------------------------------------------------------- exports

#[test]
fn the_new_ops_survive_export_and_load() {
    // CHLO and the new StableHLO ops pass the loader's program check, and
    // the saved graph (the ops' serialized form) compiles a new shape.
    let f = FunctionOptions::new()
        .input_signature(vec![TensorSpec::new(&[None], DType::F32)])
        .build(|x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = x.abs()?.add_scalar(0.5)?.digamma()?.add(&x.erf()?)?;
            let y = y.add(&x.tan()?.atan2(&x.cosh()?)?)?.add(&x.gelu(false)?)?;
            let y = y.add(&x.softplus()?)?.reduce_sum(&[], false)?;
            let g = tape.gradient(&y, &[Source::from(&x)])?[0].clone().unwrap();
            let bits = x
                .cast(DType::I32)?
                .left_shift_scalar(2)?
                .bitwise_xor_scalar(5)?;
            let pc = bits.population_count()?.cast(DType::F32)?;
            g.add(&pc)?
                .add(&x.mul_scalar(0.5)?.asin()?)?
                .add(&x.rem_scalar(0.75)?)
        });
    let spec = TensorSpec::new(&[None], DType::F32);
    let cf = f.get_concrete_function((spec,)).unwrap();
    let scratch = scratch::scratch_dir("special-export");
    let dir = scratch.join("special-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![3]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    for x in [
        Tensor::vector(&[-1.5f32, 0.25, 1.75]).unwrap(),
        Tensor::vector(&[0.5f32, -0.3, 1.2, 1.9, -1.1]).unwrap(),
    ] {
        let want = f.call((x.clone(),)).unwrap().to_vec::<f32>().unwrap();
        let got = loaded.call(&[&x]).unwrap()[0].to_vec::<f32>().unwrap();
        assert_eq!(got, want);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// `cbrt`, added by following the internals guide's checklist for a new
/// elementwise op: hand values (negative inputs too), the dtype error,
/// the traced program's `stablehlo.cbrt`, and the family's batching and
/// forward-mode rules reaching the new variant.
#[test]
fn cbrt_end_to_end() {
    let x = Tensor::vector(&[27f64, -8.0, 0.0, 0.001]).unwrap();
    let got = x.cbrt().unwrap().to_vec::<f64>().unwrap();
    assert_close("cbrt", &got, &[3.0, -2.0, 0.0, 0.1], 1e-13);

    let e = Tensor::vector(&[8i32])
        .unwrap()
        .cbrt()
        .unwrap_err()
        .to_string();
    assert!(e.contains("cbrt") && e.contains("i32"), "{e}");

    let f = function(|x: Tensor| x.cbrt());
    let text = f.lower((&x,)).unwrap().as_text().to_string();
    assert!(text.contains("stablehlo.cbrt"), "{text}");
    let traced = f.call((&x,)).unwrap().to_vec::<f64>().unwrap();
    assert_eq!(traced, got);

    // vmap over rows equals the op on the whole array.
    let m = Tensor::from_vec(vec![1f64, 8.0, -27.0, 64.0], &[2, 2]).unwrap();
    let mapped = xlafn::vmap(|xs| Ok(vec![xs[0].cbrt()?]), std::slice::from_ref(&m)).unwrap();
    assert_eq!(
        mapped[0].to_vec::<f64>().unwrap(),
        m.cbrt().unwrap().to_vec::<f64>().unwrap()
    );

    // Forward mode: d cbrt(x) = 1 / (3 x^(2/3)), at x = 8: 1/12.
    let (y, dy) = xlafn::autodiff::jvp(
        |xs| xs[0].cbrt(),
        &[Tensor::scalar(8f64)],
        &[Tensor::scalar(1f64)],
    )
    .unwrap();
    assert_close("cbrt", &[y.item::<f64>().unwrap()], &[2.0], 1e-13);
    assert_close("cbrt'", &[dy.item::<f64>().unwrap()], &[1.0 / 12.0], 1e-13);
}
