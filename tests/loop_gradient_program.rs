//! Gradients through `for_range` loops whose trip count is known at trace
//! time: the forward loop records its states, so the gradient program is
//! one forward and one backward loop (pinned on the emitted StableHLO), and
//! the values agree with central finite differences of a plain Rust loop.

use xlafn::ArraySpec;
use xlafn::prelude::*;

/// `h_{t+1} = tanh(h_t * w + x[t])`, `N` steps, loss `sum(h_N)`.
fn forward(h0: &[f64], w: f64, x: &[f64], steps: usize) -> f64 {
    h0.iter()
        .map(|&h| (0..steps).fold(h, |h, t| (h * w + x[t % x.len()]).tanh()))
        .sum()
}

type LoopGradients = Function<(Tensor, Tensor, Tensor), (Tensor, Tensor, Tensor)>;

/// The compiled gradients of `forward` with respect to `h0`, `w` and `x`,
/// for a loop of `steps` host-known iterations.
fn gradients(steps: i64) -> LoopGradients {
    function(
        move |h0: Tensor, w: Tensor, x: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
            let tape = GradientTape::new();
            for v in [&h0, &w, &x] {
                tape.watch(v);
            }
            let len = x.dims()[0];
            let h = for_range(0i64, steps, 1i64, h0.clone(), |t, h: Tensor| {
                let xt = x
                    .dynamic_slice(&[t.floormod_scalar(len)?], &[1])?
                    .reshape(&[])?;
                h.mul(&w)?.add(&xt)?.tanh()
            })?;
            let loss = h.reduce_sum(&[], false)?;
            let g = tape.gradient(&loss, &[(&h0).into(), (&w).into(), (&x).into()])?;
            let g: Vec<Tensor> = g.into_iter().map(|g| g.expect("a gradient")).collect();
            Ok((g[0].clone(), g[1].clone(), g[2].clone()))
        },
    )
}

fn numeric(f: &dyn Fn(f64) -> f64) -> f64 {
    let eps = 1e-6;
    (f(eps) - f(-eps)) / (2.0 * eps)
}

fn close(got: f64, want: f64, what: &str) {
    assert!(
        (got - want).abs() <= 1e-6 * want.abs().max(1.0),
        "{what}: {got} vs {want}"
    );
}

fn check(steps: usize) {
    let (h0, w, x) = (vec![0.3f64, -0.7], 0.8f64, vec![0.1f64, -0.2, 0.05]);
    let f = gradients(steps as i64);
    let (dh, dw, dx) = f
        .call((
            Tensor::vector(&h0).unwrap(),
            Tensor::scalar(w),
            Tensor::vector(&x).unwrap(),
        ))
        .unwrap();
    let what = format!("{steps} steps");
    for (i, g) in dh.to_vec::<f64>().unwrap().into_iter().enumerate() {
        let want = numeric(&|e| {
            let mut h = h0.clone();
            h[i] += e;
            forward(&h, w, &x, steps)
        });
        close(g, want, &format!("{what} dh[{i}]"));
    }
    close(
        dw.item::<f64>().unwrap(),
        numeric(&|e| forward(&h0, w + e, &x, steps)),
        &format!("{what} dw"),
    );
    for (i, g) in dx.to_vec::<f64>().unwrap().into_iter().enumerate() {
        let want = numeric(&|e| {
            let mut xs = x.clone();
            xs[i] += e;
            forward(&h0, w, &xs, steps)
        });
        close(g, want, &format!("{what} dx[{i}]"));
    }
}

/// Short loops read every state from the forward record; 300 steps exceed
/// the 256 states kept for a small state, so that gradient checkpoints.
#[test]
fn static_count_gradients_match_finite_differences() {
    for steps in [0, 1, 7, 300] {
        check(steps);
    }
}

/// The gradient program of a 12-step `for_range` has exactly two loops:
/// the forward one (which records the states) and the backward one. No
/// loop counts trips, records checkpoints or recomputes states.
#[test]
fn static_count_gradient_is_one_forward_and_one_backward_loop() {
    let f = gradients(12);
    f.call((
        Tensor::vector(&[0.1f64, 0.2]).unwrap(),
        Tensor::scalar(0.5f64),
        Tensor::vector(&[0.0f64, 1.0, 2.0]).unwrap(),
    ))
    .unwrap();
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::F64, &[2]),
            ArraySpec::new(DType::F64, &[]),
            ArraySpec::new(DType::F64, &[3]),
        ])
        .unwrap();
    let loops = text.matches("stablehlo.while").count();
    assert_eq!(loops, 2, "{text}");
    assert!(!text.contains("stablehlo.if"), "{text}");
}

/// A loop inside a loop, both with host-known counts: the inner loop's
/// record is read back when the outer gradient replays its body.
#[test]
fn nested_static_loops_match_finite_differences() {
    let fwd = |h: f64, w: f64| -> f64 {
        (0..3).fold(h, |h, _| (0..4).fold(h, |g, _| (g * w).sin()) + 0.1)
    };
    let f = function(|h: Tensor, w: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&h);
        tape.watch(&w);
        let out = for_range(0, 3, 1, h.clone(), |_, h: Tensor| {
            for_range(0, 4, 1, h, |_, g: Tensor| g.mul(&w)?.sin())?.add_scalar(0.1)
        })?;
        let g = tape.gradient(&out, &[(&h).into(), (&w).into()])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    });
    let (h, w) = (0.4f64, 1.3f64);
    let (dh, dw) = f.call((Tensor::scalar(h), Tensor::scalar(w))).unwrap();
    close(
        dh.item::<f64>().unwrap(),
        numeric(&|e| fwd(h + e, w)),
        "nested dh",
    );
    close(
        dw.item::<f64>().unwrap(),
        numeric(&|e| fwd(h, w + e)),
        "nested dw",
    );
}

/// Without a tape the loop records nothing: its program is the plain loop.
#[test]
fn a_loop_outside_any_tape_records_nothing() {
    let f = function(|h: Tensor| for_range(0, 5, 1, h, |_, h: Tensor| h.sin()));
    let y = f.call((Tensor::scalar(0.5f64),)).unwrap();
    let want = (0..5).fold(0.5f64, |h, _| h.sin());
    close(y.item::<f64>().unwrap(), want, "forward");
    let text = f.concrete_functions()[0]
        .stablehlo(&[ArraySpec::new(DType::F64, &[])])
        .unwrap();
    assert!(!text.contains("dynamic_update_slice"), "{text}");
    // The constant step is checked at trace time: no host callback (whose
    // presence would also stop in-place variable updates).
    assert!(!text.contains("custom_call"), "{text}");
}

/// A loop that collects its states in a `TensorArray` (as an RNN collects
/// its outputs): the gradient matches finite differences, and the forward
/// record leaves the array out (no `[T, T, ...]` buffer of whole arrays).
#[test]
fn an_output_array_is_not_recorded() {
    const T: usize = 6;
    let fwd = |h0: &[f64], w: f64| -> f64 {
        let mut h = h0.to_vec();
        let mut total = 0.0;
        for t in 0..T {
            h = h.iter().map(|&v| (v * w + 0.1).tanh()).collect();
            total += h
                .iter()
                .enumerate()
                .map(|(i, v)| v * (t + i + 1) as f64)
                .sum::<f64>();
        }
        total
    };
    let f = function(|h0: Tensor, w: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&h0);
        tape.watch(&w);
        let ta = TensorArray::new(DType::F64, T as i64).with_element_shape(&[2])?;
        let (_, ta) = for_range(
            0,
            T as i64,
            1,
            (h0.clone(), ta),
            |t, (h, ta): (Tensor, TensorArray)| {
                let h = h.mul(&w)?.add_scalar(0.1)?.tanh()?;
                let ta = ta.write(&t, &h)?;
                Ok::<_, Error>((h, ta))
            },
        )?;
        let weights: Vec<f64> = (0..T)
            .flat_map(|t| (0..2).map(move |i| (t + i + 1) as f64))
            .collect();
        let weights = Tensor::from_vec(weights, &[T as i64, 2])?;
        let loss = ta.stack()?.mul(&weights)?.reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[(&h0).into(), (&w).into()])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    });
    let (h0, w) = (vec![0.2f64, -0.5], 0.9f64);
    let (dh, dw) = f
        .call((Tensor::vector(&h0).unwrap(), Tensor::scalar(w)))
        .unwrap();
    for (i, g) in dh.to_vec::<f64>().unwrap().into_iter().enumerate() {
        let want = numeric(&|e| {
            let mut h = h0.clone();
            h[i] += e;
            fwd(&h, w)
        });
        close(g, want, &format!("array dh[{i}]"));
    }
    close(
        dw.item::<f64>().unwrap(),
        numeric(&|e| fwd(&h0, w + e)),
        "array dw",
    );
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::F64, &[2]),
            ArraySpec::new(DType::F64, &[]),
        ])
        .unwrap();
    // The forward loop carries its counter, h, the array, and the record:
    // a trip count and buffers for the counter and h only.
    let forward = text
        .lines()
        .find(|l| l.contains("stablehlo.while"))
        .unwrap();
    assert!(forward.contains(":6 = "), "{forward}");
    assert!(!text.contains("tensor<6x6x2xf64>"), "{text}");
    assert_eq!(text.matches("stablehlo.while").count(), 2, "{text}");
}

/// A loop that overwrites rows of an array, some twice and one never:
/// the overwritten writes and the initial rows written over get no
/// gradient, the never-written row keeps its initial value's gradient.
/// Checked against finite differences with a host-known count and with a
/// count known only on the device.
#[test]
fn rows_written_twice_get_the_gradient_of_the_last_write() {
    const ROWS: usize = 5;
    const STEPS: usize = 6;
    // Step t writes tanh(w * (t + 1) + h) into row t % 4, h = previous row.
    let fwd = |buf0: &[f64], w: f64| -> f64 {
        let mut buf = buf0.to_vec();
        let mut h = 0.0;
        for t in 0..STEPS {
            h = (w * (t + 1) as f64 + h).tanh();
            buf[t % 4] = h;
        }
        buf.iter()
            .enumerate()
            .map(|(i, v)| v * (i + 2) as f64)
            .sum()
    };
    let body = |t: &Tensor, (h, buf): (Tensor, Tensor), w: &Tensor| -> Result<(Tensor, Tensor)> {
        let step = t.cast(DType::F64)?.add_scalar(1.0)?;
        let h = w.mul(&step)?.add(&h)?.tanh()?;
        let row = t.floormod_scalar(4)?;
        let buf = buf.dynamic_update_slice(&h.reshape(&[1])?, &[row])?;
        Ok((h, buf))
    };
    let weights: Vec<f64> = (0..ROWS).map(|i| (i + 2) as f64).collect();
    let loss_grads =
        move |buf0: Tensor, w: Tensor, n: Option<Tensor>| -> Result<(Tensor, Tensor)> {
            let tape = GradientTape::new();
            tape.watch(&buf0);
            tape.watch(&w);
            let zero = Tensor::scalar(0.0f64);
            let init = (zero, buf0.clone());
            let (_, buf) = match &n {
                None => for_range(0i64, STEPS as i64, 1i64, init, |t, s| body(&t, s, &w))?,
                Some(n) => for_range(0i64, n, 1i64, init, |t, s| body(&t, s, &w))?,
            };
            let weights = Tensor::vector(&weights)?;
            let loss = buf.mul(&weights)?.reduce_sum(&[], false)?;
            let g = tape.gradient(&loss, &[(&buf0).into(), (&w).into()])?;
            Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
        };
    let buf0: Vec<f64> = (0..ROWS).map(|i| 0.1 * i as f64).collect();
    let w = 0.3f64;
    let loss_grads = std::sync::Arc::new(loss_grads);
    let lg = loss_grads.clone();
    let f_static = function(move |b: Tensor, w: Tensor| lg(b, w, None));
    let f_dynamic = function(move |b: Tensor, w: Tensor, n: Tensor| loss_grads(b, w, Some(n)));
    let args = || (Tensor::vector(&buf0).unwrap(), Tensor::scalar(w));
    let (b, wt) = args();
    let results = [
        ("static", f_static.call((b.clone(), wt.clone())).unwrap()),
        (
            "dynamic",
            f_dynamic
                .call((b, wt, Tensor::scalar(STEPS as i64)))
                .unwrap(),
        ),
    ];
    for (how, (db, dw)) in results {
        let db = db.to_vec::<f64>().unwrap();
        // Rows 0-3 are overwritten: no gradient to the initial buffer;
        // row 4 is never written.
        assert_eq!(db, vec![0.0, 0.0, 0.0, 0.0, 6.0], "{how}");
        close(
            dw.item::<f64>().unwrap(),
            numeric(&|e| fwd(&buf0, w + e)),
            &format!("{how} dw"),
        );
    }
}

/// A recurrent matmul in a loop, `h = tanh(h @ W)`: the forward loop
/// stores the product, so the program has three dots (the forward one and
/// the two of its gradient), not a fourth to replay the product; the
/// gradients match finite differences.
#[test]
fn dots_in_a_loop_body_are_stored_not_replayed() {
    const STEPS: usize = 4;
    let fwd = |h0: &[f64], w: &[f64]| -> f64 {
        let mut h = h0.to_vec();
        for _ in 0..STEPS {
            h = (0..2)
                .map(|j| (0..2).map(|i| h[i] * w[i * 2 + j]).sum::<f64>().tanh())
                .collect();
        }
        h[0] + 2.0 * h[1]
    };
    let f = function(|h0: Tensor, w: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&h0);
        tape.watch(&w);
        let h = for_range(0, STEPS as i64, 1, h0.clone(), |_, h: Tensor| {
            h.matmul(&w)?.tanh()
        })?;
        let loss = h
            .mul(&Tensor::from_vec(vec![1.0f64, 2.0], &[1, 2])?)?
            .reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[(&h0).into(), (&w).into()])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    });
    let (h0, w) = (vec![0.5f64, -0.3], vec![0.9f64, -0.4, 0.2, 1.1]);
    let (dh, dw) = f
        .call((
            Tensor::from_vec(h0.clone(), &[1, 2]).unwrap(),
            Tensor::from_vec(w.clone(), &[2, 2]).unwrap(),
        ))
        .unwrap();
    for (i, g) in dh.to_vec::<f64>().unwrap().into_iter().enumerate() {
        let want = numeric(&|e| {
            let mut h = h0.clone();
            h[i] += e;
            fwd(&h, &w)
        });
        close(g, want, &format!("dh[{i}]"));
    }
    for (i, g) in dw.to_vec::<f64>().unwrap().into_iter().enumerate() {
        let want = numeric(&|e| {
            let mut v = w.clone();
            v[i] += e;
            fwd(&h0, &v)
        });
        close(g, want, &format!("dw[{i}]"));
    }
    let text = f.concrete_functions()[0]
        .stablehlo(&[
            ArraySpec::new(DType::F64, &[1, 2]),
            ArraySpec::new(DType::F64, &[2, 2]),
        ])
        .unwrap();
    assert_eq!(text.matches("stablehlo.dot_general").count(), 3, "{text}");
    assert_eq!(text.matches("stablehlo.while").count(), 2, "{text}");
}
