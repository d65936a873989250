//! `xlafn::nn::losses` against references written here with plain f64
//! loops (no xlafn ops): every loss with each reduction, eagerly and in a
//! compiled function (one trace), in f32 and f64; gradients against
//! central differences; label smoothing and `ignore_index` by hand; the
//! logits forms at large |x|; errors for bad shapes and dtypes.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use xlafn::nn::losses::{self, CrossEntropy, EPSILON, Reduction};
use xlafn::prelude::*;

const ROWS: usize = 3;
const COLS: usize = 4;
const DIMS: [i64; 2] = [ROWS as i64, COLS as i64];
const REDUCTIONS: [Reduction; 3] = [Reduction::Mean, Reduction::Sum, Reduction::None];

fn values(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + ((s >> 33) as f64 / (1u64 << 31) as f64) * (hi - lo)
        })
        .collect()
}

/// Rows that sum to 1 (a distribution per row), each entry positive.
fn distributions(seed: u64) -> Vec<f64> {
    let mut v = values(ROWS * COLS, seed, 0.05, 1.0);
    for r in v.chunks_mut(COLS) {
        let s: f64 = r.iter().sum();
        r.iter_mut().for_each(|x| *x /= s);
    }
    v
}

fn rows(v: &[f64]) -> impl Iterator<Item = &[f64]> {
    v.chunks(COLS)
}

fn clip(x: f64, lo: f64, hi: f64) -> f64 {
    x.max(lo).min(hi)
}

fn log_softmax(row: &[f64]) -> Vec<f64> {
    let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let lse = m + row.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
    row.iter().map(|v| v - lse).collect()
}

/// Keras' probabilities path: normalize, clip, log.
fn log_probs(row: &[f64]) -> Vec<f64> {
    let s: f64 = row.iter().sum();
    row.iter()
        .map(|p| clip(p / s, EPSILON, 1.0 - EPSILON).ln())
        .collect()
}

fn reduce(per: &[f64], r: Reduction) -> Vec<f64> {
    match r {
        Reduction::Mean => vec![per.iter().sum::<f64>() / per.len() as f64],
        Reduction::Sum => vec![per.iter().sum()],
        Reduction::None => per.to_vec(),
    }
}

type LossFn = fn(&Tensor, &Tensor, Reduction) -> Result<Tensor>;
type RefFn = fn(&[f64], &[f64]) -> Vec<f64>;

/// One loss: its function, its per-example reference, inputs (y_true,
/// y_pred) and a tolerance in f32.
struct Case {
    name: &'static str,
    loss: LossFn,
    reference: RefFn,
    y_true: Vec<f64>,
    y_pred: Vec<f64>,
}

fn mean_rows(a: &[f64], b: &[f64], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    rows(a)
        .zip(rows(b))
        .map(|(x, y)| x.iter().zip(y).map(|(&t, &p)| f(t, p)).sum::<f64>() / COLS as f64)
        .collect()
}

fn huber_ref(t: &[f64], p: &[f64]) -> Vec<f64> {
    mean_rows(t, p, |t, p| {
        let e = (p - t).abs();
        if e <= 1.5 {
            0.5 * e * e
        } else {
            1.5 * e - 0.5 * 1.5 * 1.5
        }
    })
}

fn cases() -> Vec<Case> {
    let onehot = |seed| -> Vec<f64> {
        values(ROWS * COLS, seed, 0.0, 1.0)
            .iter()
            .map(|v| (*v > 0.5) as i32 as f64)
            .collect()
    };
    vec![
        Case {
            name: "mean_squared_error",
            loss: losses::mean_squared_error,
            reference: |t, p| mean_rows(t, p, |t, p| (t - p) * (t - p)),
            y_true: values(12, 1, -2.0, 2.0),
            y_pred: values(12, 2, -2.0, 2.0),
        },
        Case {
            name: "mean_absolute_error",
            loss: losses::mean_absolute_error,
            reference: |t, p| mean_rows(t, p, |t, p| (t - p).abs()),
            y_true: values(12, 3, -2.0, 2.0),
            y_pred: values(12, 4, -2.0, 2.0),
        },
        Case {
            name: "huber",
            loss: |t, p, r| losses::huber(t, p, 1.5, r),
            reference: huber_ref,
            y_true: values(12, 5, -2.0, 2.0),
            y_pred: values(12, 6, -2.0, 2.0),
        },
        Case {
            name: "binary_cross_entropy",
            loss: losses::binary_cross_entropy,
            reference: |t, p| {
                mean_rows(t, p, |t, p| {
                    let p = clip(p, EPSILON, 1.0 - EPSILON);
                    -(t * p.ln() + (1.0 - t) * (1.0 - p).ln())
                })
            },
            y_true: onehot(7),
            y_pred: values(12, 8, 0.02, 0.98),
        },
        Case {
            name: "binary_cross_entropy_with_logits",
            loss: losses::binary_cross_entropy_with_logits,
            reference: |t, x| {
                mean_rows(t, x, |t, x| {
                    let s = 1.0 / (1.0 + (-x).exp());
                    -(t * s.ln() + (1.0 - t) * (1.0 - s).ln())
                })
            },
            y_true: values(12, 9, 0.0, 1.0),
            y_pred: values(12, 10, -3.0, 3.0),
        },
        Case {
            name: "categorical_cross_entropy(logits)",
            loss: |t, p, r| {
                losses::categorical_cross_entropy(
                    t,
                    p,
                    CrossEntropy::new().from_logits(true).reduction(r),
                )
            },
            reference: |t, x| {
                rows(t)
                    .zip(rows(x))
                    .map(|(t, x)| {
                        let l = log_softmax(x);
                        -t.iter().zip(&l).map(|(a, b)| a * b).sum::<f64>()
                    })
                    .collect()
            },
            y_true: distributions(11),
            y_pred: values(12, 12, -3.0, 3.0),
        },
        Case {
            name: "categorical_cross_entropy(probabilities)",
            loss: |t, p, r| {
                losses::categorical_cross_entropy(t, p, CrossEntropy::new().reduction(r))
            },
            reference: |t, p| {
                rows(t)
                    .zip(rows(p))
                    .map(|(t, p)| {
                        let l = log_probs(p);
                        -t.iter().zip(&l).map(|(a, b)| a * b).sum::<f64>()
                    })
                    .collect()
            },
            y_true: distributions(13),
            // Unnormalized on purpose: Keras divides by the row's sum.
            y_pred: values(12, 14, 0.05, 1.0),
        },
        Case {
            name: "kl_divergence",
            loss: losses::kl_divergence,
            reference: |t, p| {
                rows(t)
                    .zip(rows(p))
                    .map(|(t, p)| {
                        t.iter()
                            .zip(p)
                            .map(|(&t, &p)| {
                                let (t, p) = (clip(t, EPSILON, 1.0), clip(p, EPSILON, 1.0));
                                t * (t / p).ln()
                            })
                            .sum()
                    })
                    .collect()
            },
            y_true: distributions(15),
            y_pred: distributions(16),
        },
        Case {
            name: "cosine_similarity",
            loss: losses::cosine_similarity,
            reference: |t, p| {
                rows(t)
                    .zip(rows(p))
                    .map(|(t, p)| {
                        let dot: f64 = t.iter().zip(p).map(|(a, b)| a * b).sum();
                        let n = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
                        -dot / (n(t) * n(p))
                    })
                    .collect()
            },
            y_true: values(12, 17, -2.0, 2.0),
            y_pred: values(12, 18, -2.0, 2.0),
        },
    ]
}

fn tensor(v: &[f64], dims: &[i64], dtype: DType) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims)
        .unwrap()
        .cast(dtype)
        .unwrap()
}

fn host(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: {got:?} vs {want:?}");
    for (g, w) in got.iter().zip(want) {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: got {got:?}, want {want:?}"
        );
    }
}

#[test]
fn every_loss_matches_its_reference_eagerly_and_compiled() {
    for case in cases() {
        let per = (case.reference)(&case.y_true, &case.y_pred);
        assert_eq!(per.len(), ROWS, "{}", case.name);
        for dtype in [DType::F32, DType::F64] {
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            let t = tensor(&case.y_true, &DIMS, dtype);
            let p = tensor(&case.y_pred, &DIMS, dtype);
            for r in REDUCTIONS {
                let what = format!("{} {dtype} {r:?}", case.name);
                let want = reduce(&per, r);
                let eager = (case.loss)(&t, &p, r).unwrap();
                assert_eq!(eager.dtype(), dtype, "{what}");
                let want_dims: Vec<i64> = if r == Reduction::None {
                    vec![ROWS as i64]
                } else {
                    vec![]
                };
                assert_eq!(eager.dims(), want_dims, "{what}");
                assert_close(&host(&eager), &want, tol, &what);
                let loss = case.loss;
                let f = function(move |a: Tensor, b: Tensor| loss(&a, &b, r));
                let compiled = f.call((&t, &p)).unwrap();
                assert_close(&host(&compiled), &want, tol, &format!("{what} compiled"));
                let again = f.call((&t.mul_scalar(1.0).unwrap(), &p)).unwrap();
                assert_close(&host(&again), &want, tol, &format!("{what} again"));
                assert_eq!(f.tracing_count(), 1, "{what}");
            }
        }
    }
}

#[test]
fn every_loss_has_the_finite_difference_gradient() {
    for case in cases() {
        for r in [Reduction::Mean, Reduction::None] {
            let t = tensor(&case.y_true, &DIMS, DType::F64);
            let loss = case.loss;
            check_gradient(
                &|p: &Tensor| loss(&t, p, r),
                &case.y_pred,
                &DIMS,
                1e-5,
                &format!("{} {r:?}", case.name),
            );
        }
    }
}

/// Sparse labels: against the categorical reference of the one-hot.
#[test]
fn sparse_categorical_matches_a_loop_and_has_its_gradient() {
    let logits = values(12, 21, -3.0, 3.0);
    let probs = values(12, 22, 0.05, 1.0);
    let labels = [2i64, 0, 3];
    for from_logits in [true, false] {
        let y = if from_logits { &logits } else { &probs };
        let per: Vec<f64> = rows(y)
            .zip(labels)
            .map(|(row, l)| {
                let lp = if from_logits {
                    log_softmax(row)
                } else {
                    log_probs(row)
                };
                -lp[l as usize]
            })
            .collect();
        for dtype in [DType::F32, DType::F64] {
            let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
            for label_dtype in [DType::I32, DType::I64] {
                let lt = Tensor::vector(&labels).unwrap().cast(label_dtype).unwrap();
                let yt = tensor(y, &DIMS, dtype);
                for r in REDUCTIONS {
                    let what = format!("sparse from_logits={from_logits} {dtype} {r:?}");
                    let o = CrossEntropy::new().from_logits(from_logits).reduction(r);
                    let want = reduce(&per, r);
                    let eager = losses::sparse_categorical_cross_entropy(&lt, &yt, o).unwrap();
                    assert_close(&host(&eager), &want, tol, &what);
                    let f = function(move |a: Tensor, b: Tensor| {
                        losses::sparse_categorical_cross_entropy(&a, &b, o)
                    });
                    assert_close(&host(&f.call((&lt, &yt)).unwrap()), &want, tol, &what);
                    f.call((&lt, &yt)).unwrap();
                    assert_eq!(f.tracing_count(), 1, "{what}");
                }
            }
        }
        let lt = Tensor::vector(&labels).unwrap();
        for r in [Reduction::Mean, Reduction::None] {
            let o = CrossEntropy::new().from_logits(from_logits).reduction(r);
            check_gradient(
                &|p: &Tensor| losses::sparse_categorical_cross_entropy(&lt, p, o),
                y,
                &DIMS,
                1e-5,
                &format!("sparse gradient from_logits={from_logits} {r:?}"),
            );
        }
    }
    // Labels of any leading shape: [2, 3] labels with [2, 3, 4] logits.
    let many = values(24, 23, -2.0, 2.0);
    let l6 = [1i32, 3, 0, 2, 2, 1];
    let want: f64 = many
        .chunks(4)
        .zip(l6)
        .map(|(row, l)| -log_softmax(row)[l as usize])
        .sum();
    let got = losses::sparse_categorical_cross_entropy(
        &Tensor::from_vec(l6.to_vec(), &[2, 3]).unwrap(),
        &Tensor::from_vec(many, &[2, 3, 4]).unwrap(),
        CrossEntropy::new()
            .from_logits(true)
            .reduction(Reduction::Sum),
    )
    .unwrap();
    assert!((got.item::<f64>().unwrap() - want).abs() < 1e-12);
}

/// Label smoothing, by hand: two classes, logits [0, ln 3] (p = [1/4, 3/4]),
/// label 1, smoothing 0.2: targets [0.1, 0.9], loss = -(0.1 ln 1/4 + 0.9
/// ln 3/4).
#[test]
fn label_smoothing_by_hand() {
    let want = -(0.1 * 0.25f64.ln() + 0.9 * 0.75f64.ln());
    let logits = Tensor::from_vec(vec![0.0f64, 3f64.ln()], &[1, 2]).unwrap();
    let smooth = CrossEntropy::new().from_logits(true).label_smoothing(0.2);
    let dense = losses::categorical_cross_entropy(
        &Tensor::from_vec(vec![0.0f64, 1.0], &[1, 2]).unwrap(),
        &logits,
        smooth,
    )
    .unwrap();
    assert!((dense.item::<f64>().unwrap() - want).abs() < 1e-14);
    let sparse = losses::sparse_categorical_cross_entropy(
        &Tensor::vector(&[1i32]).unwrap(),
        &logits,
        smooth,
    )
    .unwrap();
    assert!((sparse.item::<f64>().unwrap() - want).abs() < 1e-14);
    // Probabilities [0.25, 0.75] give the same numbers.
    let probs = Tensor::from_vec(vec![0.25f64, 0.75], &[1, 2]).unwrap();
    let smooth = smooth.from_logits(false);
    let sparse =
        losses::sparse_categorical_cross_entropy(&Tensor::vector(&[1i32]).unwrap(), &probs, smooth)
            .unwrap();
    assert!((sparse.item::<f64>().unwrap() - want).abs() < 1e-12);
    // Out of [0, 1]: refused.
    let bad = CrossEntropy::new().label_smoothing(1.5);
    assert!(losses::categorical_cross_entropy(&probs, &probs, bad).is_err());
}

/// ignore_index: rows labelled -100 give 0 and leave the mean's count; the
/// gradient of their logits is 0. Rows: logits [0, 0] label 0 (ln 2),
/// ignored, [0, ln 3] label 1 (ln 4/3).
#[test]
fn ignore_index_by_hand() {
    let (a, b) = (2f64.ln(), (4.0f64 / 3.0).ln());
    let logits = Tensor::from_vec(vec![0.0f64, 0.0, 5.0, -5.0, 0.0, 3f64.ln()], &[3, 2]).unwrap();
    let labels = Tensor::vector(&[0i64, -100, 1]).unwrap();
    let o = CrossEntropy::new().from_logits(true).ignore_index(-100);
    let run = |r: Reduction| {
        host(&losses::sparse_categorical_cross_entropy(&labels, &logits, o.reduction(r)).unwrap())
    };
    assert_close(&run(Reduction::Mean), &[(a + b) / 2.0], 1e-14, "mean");
    assert_close(&run(Reduction::Sum), &[a + b], 1e-14, "sum");
    assert_close(&run(Reduction::None), &[a, 0.0, b], 1e-14, "none");
    // Compiled, the same.
    let f =
        function(move |l: Tensor, z: Tensor| losses::sparse_categorical_cross_entropy(&l, &z, o));
    assert_close(
        &host(&f.call((&labels, &logits)).unwrap()),
        &[(a + b) / 2.0],
        1e-14,
        "compiled mean",
    );
    // Gradient: the ignored row's is 0; the others are (p - onehot) / 2.
    let tape = GradientTape::new();
    tape.watch(&logits);
    let loss = losses::sparse_categorical_cross_entropy(&labels, &logits, o).unwrap();
    let g = host(
        &tape.gradient(&loss, &[Source::from(&logits)]).unwrap()[0]
            .clone()
            .unwrap(),
    );
    let want = [-0.25, 0.25, 0.0, 0.0, 0.125, -0.125];
    assert_close(&g, &want, 1e-14, "gradient");
    // Every row ignored: the mean is 0, not NaN.
    let none = Tensor::vector(&[-100i64, -100, -100]).unwrap();
    let all = losses::sparse_categorical_cross_entropy(&none, &logits, o).unwrap();
    assert_eq!(all.item::<f64>().unwrap(), 0.0);
    // Dense labels cannot be ignored.
    let dense = Tensor::from_vec(vec![1.0f64, 0.0, 1.0, 0.0, 0.0, 1.0], &[3, 2]).unwrap();
    assert!(losses::categorical_cross_entropy(&dense, &logits, o).is_err());
}

/// The logits forms stay finite, and right, where a naive sigmoid or
/// softmax would overflow: logits of ±1000 (f32 and f64).
#[test]
fn logits_forms_are_stable_at_large_magnitudes() {
    for dtype in [DType::F32, DType::F64] {
        let x = tensor(&[1000.0, -1000.0, 1000.0, -1000.0], &[2, 2], dtype);
        let z = tensor(&[1.0, 0.0, 0.0, 1.0], &[2, 2], dtype);
        let tape = GradientTape::new();
        tape.watch(&x);
        let bce = losses::binary_cross_entropy_with_logits(&z, &x, Reduction::None).unwrap();
        // Row 0 right and sure (0); row 1 wrong by 1000 on each element.
        assert_close(&host(&bce), &[0.0, 1000.0], 1e-6, "bce");
        let g = tape
            .gradient(&bce.reduce_sum(&[], false).unwrap(), &[Source::from(&x)])
            .unwrap()[0]
            .clone()
            .unwrap();
        // d/dx = (sigmoid(x) - z) / 2 per element.
        assert_close(&host(&g), &[0.0, 0.0, 0.5, -0.5], 1e-6, "bce gradient");
        let cce = losses::categorical_cross_entropy(
            &z,
            &x,
            CrossEntropy::new()
                .from_logits(true)
                .reduction(Reduction::None),
        )
        .unwrap();
        assert_close(&host(&cce), &[0.0, 2000.0], 1e-6, "cce");
        let sparse = losses::sparse_categorical_cross_entropy(
            &Tensor::vector(&[0i32, 1]).unwrap(),
            &x,
            CrossEntropy::new()
                .from_logits(true)
                .reduction(Reduction::None),
        )
        .unwrap();
        assert_close(&host(&sparse), &[0.0, 2000.0], 1e-6, "sparse");
        // Probabilities of exactly 0 and 1 are clipped: finite.
        let p = tensor(&[1.0, 0.0, 0.0, 1.0], &[2, 2], dtype);
        let wrong = tensor(&[0.0, 1.0, 1.0, 0.0], &[2, 2], dtype);
        let bce = host(&losses::binary_cross_entropy(&wrong, &p, Reduction::Sum).unwrap());
        assert!(bce[0].is_finite() && bce[0] > 10.0, "{bce:?}");
        let kl = host(&losses::kl_divergence(&wrong, &p, Reduction::Sum).unwrap());
        assert!(kl[0].is_finite() && kl[0] > 10.0, "{kl:?}");
    }
}

#[test]
fn bad_shapes_and_dtypes_are_refused_in_tensorflow_words() {
    let a = Tensor::from_vec(vec![0.5f32; 6], &[2, 3]).unwrap();
    let b = Tensor::from_vec(vec![0.5f32; 6], &[3, 2]).unwrap();
    let e = losses::mean_squared_error(&a, &b, Reduction::Mean).unwrap_err();
    let text = e.to_string();
    assert!(
        text.starts_with("InvalidArgumentError: mean_squared_error: labels and predictions must have the same shape"),
        "{text}"
    );
    let ints = Tensor::from_vec(vec![1i32; 6], &[2, 3]).unwrap();
    let e = losses::binary_cross_entropy(&a, &ints, Reduction::Mean).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("TypeError: binary_cross_entropy: predictions must be floating-point"),
        "{e}"
    );
    // Integer labels are fine for the dense losses (cast to the predictions').
    assert!(losses::mean_absolute_error(&ints, &a, Reduction::Sum).is_ok());
    let o = CrossEntropy::new().from_logits(true);
    let float_labels = Tensor::vector(&[0.0f32, 1.0]).unwrap();
    let e = losses::sparse_categorical_cross_entropy(&float_labels, &a, o).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("TypeError: sparse_categorical_cross_entropy: labels must be integer"),
        "{e}"
    );
    let e =
        losses::sparse_categorical_cross_entropy(&Tensor::vector(&[0i32, 1, 2]).unwrap(), &a, o)
            .unwrap_err();
    assert!(e.to_string().contains("same leading axes"), "{e}");
    let e = losses::huber(&a, &a, 0.0, Reduction::Mean).unwrap_err();
    assert!(e.to_string().contains("delta must be positive"), "{e}");
    let scalar = Tensor::scalar(1.0f32);
    assert!(losses::mean_squared_error(&scalar, &scalar, Reduction::Mean).is_err());
    // Inside a function, at trace time, the same error.
    let f = function(|x: Tensor, y: Tensor| losses::mean_squared_error(&x, &y, Reduction::Mean));
    let e = f.call((&a, &b)).unwrap_err();
    assert!(e.to_string().contains("same shape"), "{e}");
}
