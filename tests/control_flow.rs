//! cond, while_loop, for_range and TensorArray: traced results against plain
//! Rust computations of the same loops and branches, eager behaviour, graph
//! sizes, and the errors.

use proptest::prelude::*;
use xlafn::prelude::*;

fn f32s(t: &Tensor) -> Vec<f32> {
    t.to_vec::<f32>().unwrap()
}

#[test]
fn cond_traces_both_branches_once_and_picks_at_run_time() {
    let taken = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t2 = taken.clone();
    let f = function(move |x: Tensor| -> Result<Tensor> {
        let positive = x.reduce_sum(&[], false)?.gt_scalar(0.0)?;
        cond(
            &positive,
            || {
                t2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                &x * 2.0
            },
            || -&x,
        )
    });
    assert_eq!(
        f32s(&f.call((Tensor::vector(&[1f32, 2.]).unwrap(),)).unwrap()),
        vec![2., 4.]
    );
    assert_eq!(
        f32s(&f.call((Tensor::vector(&[-1f32, -2.]).unwrap(),)).unwrap()),
        vec![1., 2.]
    );
    assert_eq!(f.tracing_count(), 1);
    // The true branch's Rust code ran once, at trace time only.
    assert_eq!(taken.load(std::sync::atomic::Ordering::SeqCst), 1);
    let text = f.concrete_functions()[0]
        .stablehlo(&[xlafn::ArraySpec::new(DType::F32, &[2])])
        .unwrap();
    assert!(text.contains("stablehlo.if"), "{text}");
}

#[test]
fn cond_eagerly_runs_only_the_chosen_branch() {
    let mut ran_else = false;
    let p = Tensor::scalar(true);
    let r: Tensor = cond(
        &p,
        || Tensor::scalar(1i32),
        || {
            ran_else = true;
            Tensor::scalar(2i32)
        },
    )
    .unwrap();
    assert_eq!(r.item::<i32>().unwrap(), 1);
    assert!(!ran_else);
}

#[test]
fn cond_branches_must_agree_on_structure_and_dtype() {
    let f = function(|x: Tensor| -> Result<Tensor> {
        let p = x.gt_scalar(0.0)?;
        cond(&p, || x.clone(), || x.cast(DType::I32))
    });
    let e = f.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(
        matches!(e, Error::InvalidArgument { ref op, .. } if op == "cond"),
        "{e}"
    );
    let g = function(|x: Tensor| -> Result<Tensor> { cond(&x, || x.clone(), || x.clone()) });
    let e = g.call((Tensor::scalar(1f32),)).unwrap_err();
    assert!(e.to_string().contains("bool scalar"), "{e}");
}

#[test]
fn host_values_that_device_control_flow_would_lose_are_refused() {
    // A loop on the device carries tensors only: a host counter the body
    // changes would silently keep its first value.
    let count = function(|n: Tensor| -> Result<(Tensor, i64)> {
        while_loop(
            |(i, _): &(Tensor, i64)| i.lt(&n),
            |(i, steps): (Tensor, i64)| (i + 1, steps + 1),
            (Tensor::scalar(0i32), 0i64),
        )
    });
    let e = count.call((Tensor::scalar(3i32),)).unwrap_err().to_string();
    assert!(
        e.contains("changes a host value of the loop state from `0` to `1`")
            && e.contains("tensor"),
        "{e}"
    );
    // Branches that disagree on a host value: only tensors are selected.
    let pick = function(|x: Tensor| -> Result<(Tensor, i64)> {
        cond(&x.gt_scalar(0.0)?, || (x.clone(), 1i64), || (-&x, 2i64))
    });
    let e = pick.call((Tensor::scalar(1f32),)).unwrap_err().to_string();
    assert!(
        e.contains("the true branch returns the host value `1` where the false branch returns `2`"),
        "{e}"
    );
    // The same host value on both sides is fine.
    let same = function(|x: Tensor| -> Result<(Tensor, i64)> {
        cond(&x.gt_scalar(0.0)?, || (x.clone(), 7i64), || (-&x, 7i64))
    });
    let (y, k) = same.call((Tensor::scalar(-2f32),)).unwrap();
    assert_eq!((y.item::<f32>().unwrap(), k), (2.0, 7));
}

#[test]
fn cond_with_branch_shapes_that_differ_joins_them() {
    let f = function(|x: Tensor, p: Tensor| -> Result<Tensor> {
        cond(&p, || x.slice(&[0], &[2]), || x.slice(&[1], &[2]))
    });
    let x = Tensor::vector(&[1f32, 2., 3.]).unwrap();
    assert_eq!(
        f32s(&f.call((&x, Tensor::scalar(true))).unwrap()),
        vec![1., 2.]
    );
    assert_eq!(
        f32s(&f.call((&x, Tensor::scalar(false))).unwrap()),
        vec![2., 3.]
    );
}

#[test]
fn the_guides_tanh_while_loop() {
    // while reduce_sum(x) > 1: x = tanh(x)
    let f = function(|x: Tensor| {
        while_loop(
            |x: &Tensor| x.reduce_sum(&[], false)?.gt_scalar(1.0),
            |x: Tensor| x.tanh(),
            x,
        )
    });
    let x0 = vec![0.9f32, 0.8, 0.7];
    let got = f32s(&f.call((Tensor::vector(&x0).unwrap(),)).unwrap());
    let mut want = x0.clone();
    while want.iter().sum::<f32>() > 1.0 {
        want = want.iter().map(|v| v.tanh()).collect();
    }
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

#[test]
fn in_graph_loop_graph_size_is_constant_while_a_host_loop_unrolls() {
    let host_loop = function(|x: Tensor, n: i64| {
        let mut x = x;
        for _ in 0..n {
            x = &x * 0.99 + 0.01;
        }
        x
    });
    let graph_loop =
        function(|x: Tensor, n: Tensor| for_range(0, &n, 1, x, |_i, x: Tensor| &x * 0.99 + 0.01));
    let x = Tensor::vector(&[1f32, 0.5]).unwrap();
    let mut host_sizes = Vec::new();
    let mut graph_sizes = Vec::new();
    for n in [2i64, 5, 10] {
        host_loop.call((&x, n)).unwrap();
        host_sizes.push(
            host_loop
                .concrete_functions()
                .last()
                .unwrap()
                .graph()
                .operations()
                .len(),
        );
        graph_loop.call((&x, Tensor::scalar(n as i32))).unwrap();
        graph_sizes.push(
            graph_loop.concrete_functions()[0]
                .graph()
                .operations()
                .len(),
        );
    }
    assert!(
        host_sizes[0] < host_sizes[1] && host_sizes[1] < host_sizes[2],
        "{host_sizes:?}"
    );
    assert!(
        graph_sizes.iter().all(|s| *s == graph_sizes[0]),
        "{graph_sizes:?}"
    );
    assert_eq!(graph_loop.tracing_count(), 1);
    let a = f32s(&host_loop.call((&x, 10)).unwrap());
    let b = f32s(&graph_loop.call((&x, Tensor::scalar(10i32))).unwrap());
    for (p, q) in a.iter().zip(&b) {
        assert!((p - q).abs() < 1e-6);
    }
}

#[test]
fn while_loop_relaxes_a_growing_loop_value_only_if_shapes_allow() {
    // A body that changes a loop value's dtype is an error at trace time.
    let f = function(|x: Tensor| {
        while_loop(
            |x: &Tensor| x.reduce_sum(&[], false)?.lt_scalar(10.0),
            |x: Tensor| x.cast(DType::F64),
            x,
        )
    });
    let e = f.call((Tensor::vector(&[1f32]).unwrap(),)).unwrap_err();
    assert!(e.to_string().contains("dtype"), "{e}");
}

/// A loop value that grows is refused naming the loop value, its shapes
/// before and after one iteration, and the fix, as TensorFlow's error for
/// a loop variable without `shape_invariants` does (it read `the shape of
/// f32(None, 3) is not fully known`); for_range, built on while_loop, too.
#[test]
fn a_growing_loop_value_is_an_error_naming_it_and_its_shapes() {
    let grows = |text: &str| {
        text.starts_with(
            "InvalidArgumentError: while_loop: loop value 1 has shape (1, 3) before \
             the loop, but shape (2, 3) after one iteration",
        ) && text.contains("TensorArray")
            && !text.contains("not fully known")
    };
    let f = function(|n: Tensor, x: Tensor| {
        while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&n),
            |(i, x): (Tensor, Tensor)| -> Result<(Tensor, Tensor)> {
                let row = x.slice(&[0, 0], &[1, 3])?;
                Ok((i + 1, Tensor::concat(&[x, row], 0)?))
            },
            (Tensor::scalar(0i32), x),
        )
    });
    let x = Tensor::from_vec(vec![1f32, 2., 3.], &[1, 3]).unwrap();
    let e = f.call((Tensor::scalar(3i32), &x)).unwrap_err();
    assert!(matches!(e, Error::InvalidArgument { .. }), "{e:?}");
    assert!(grows(&e.to_string()), "{e}");
    let g = function(|x: Tensor| {
        for_range(0, 3, 1, (Tensor::scalar(0i32), x), |_, (i, x)| {
            let row = x.slice(&[0, 0], &[1, 3])?;
            Ok::<_, Error>((i, Tensor::concat(&[x, row], 0)?))
        })
    });
    let e = g.call((&x,)).unwrap_err();
    assert!(grows(&e.to_string()), "{e}");
    // A body that keeps the shape still compiles and runs.
    let h = function(|x: Tensor| for_range(0, 3, 1, x, |_, x| x * 2.0));
    assert_eq!(
        h.call((&x,)).unwrap().to_vec::<f32>().unwrap(),
        vec![8., 16., 24.]
    );
}

#[test]
fn nested_cond_inside_while_collatz_steps() {
    // Counts Collatz steps to reach 1, entirely on the device.
    let steps = function(|n: Tensor| -> Result<Tensor> {
        let (_, count) = while_loop(
            |(n, _): &(Tensor, Tensor)| n.gt_scalar(1),
            |(n, c): (Tensor, Tensor)| -> Result<(Tensor, Tensor)> {
                let even = n.floormod_scalar(2)?.eq_scalar(0)?;
                let next = cond(&even, || n.floordiv_scalar(2), || &n * 3 + 1)?;
                Ok((next, c + 1))
            },
            (n.clone(), Tensor::scalar(0i32)),
        )?;
        Ok(count)
    });
    for n in [1i32, 6, 7, 27] {
        let (mut m, mut c) = (n, 0);
        while m > 1 {
            m = if m % 2 == 0 { m / 2 } else { 3 * m + 1 };
            c += 1;
        }
        assert_eq!(
            steps
                .call((Tensor::scalar(n),))
                .unwrap()
                .item::<i32>()
                .unwrap(),
            c,
            "n={n}"
        );
    }
    assert_eq!(steps.tracing_count(), 1);
}

#[test]
fn tensor_array_accumulates_in_a_compiled_loop() {
    // The guide's dynamic_rnn: states[i] = tanh(states[i-1] + x[i]).
    let rnn = function(|x: Tensor| -> Result<Tensor> {
        let (t, d) = (x.dims()[0], x.dims()[1]);
        let inputs = TensorArray::unstack(&x)?;
        let out = TensorArray::new(DType::F32, t).with_element_shape(&[d])?;
        let s0 = Tensor::fill(&[d], 0.0, DType::F32)?;
        let (out, _) = for_range(
            0,
            t,
            1,
            (out, s0),
            |i, (out, s): (TensorArray, Tensor)| -> Result<_> {
                let s = (&s + &inputs.read(&i)?).tanh()?;
                Ok((out.write(&i, &s)?, s))
            },
        )?;
        out.stack()
    });
    let xs = [0.5f32, -0.5, 0.25, 0.25, 1.0, 0.0, -2.0, 0.5];
    let got = f32s(
        &rnn.call((Tensor::from_vec(xs.to_vec(), &[4, 2]).unwrap(),))
            .unwrap(),
    );
    let mut s = [0f32; 2];
    let mut want = Vec::new();
    for t in 0..4 {
        for j in 0..2 {
            s[j] = (s[j] + xs[t * 2 + j]).tanh();
        }
        want.extend(s);
    }
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-5, "{got:?} vs {want:?}");
    }
}

#[test]
fn tensor_array_eager_and_errors() {
    let mut ta = TensorArray::dynamic(DType::I32).unwrap();
    for i in 0..5i64 {
        ta = ta.write(i, &Tensor::scalar((i * i) as i32)).unwrap();
    }
    assert_eq!(
        ta.stack().unwrap().to_vec::<i32>().unwrap(),
        vec![0, 1, 4, 9, 16]
    );
    assert_eq!(ta.size().unwrap().item::<i32>().unwrap(), 5);
    assert_eq!(ta.read(3i64).unwrap().item::<i32>().unwrap(), 9);
    assert!(ta.write(0i64, &Tensor::scalar(1f32)).is_err());
    // Inside a compiled function a dynamic array grows with host indices
    // (a device index needs a bound: tests/tensor_array.rs).
    let f = function(|x: Tensor| -> Result<Tensor> {
        let ta = TensorArray::dynamic(DType::F32)?.write(0i64, &x)?;
        ta.read(0i64)
    });
    assert_eq!(
        f.call((Tensor::scalar(1f32),))
            .unwrap()
            .item::<f32>()
            .unwrap(),
        1.0
    );
    let g = function(|x: Tensor| -> Result<Tensor> {
        let ta = TensorArray::dynamic(DType::F32)?
            .with_max_size(4)
            .write(2i64, &x)?;
        ta.read(2i64)
    });
    assert_eq!(
        g.call((Tensor::scalar(7f32),))
            .unwrap()
            .item::<f32>()
            .unwrap(),
        7.0
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(16))]

    #[test]
    fn while_loop_matches_a_rust_loop(x0 in prop::collection::vec(-2f32..2f32, 1..5), n in 0i32..20, a in 0.5f32..1.0, b in -0.5f32..0.5) {
        let f = function(move |x: Tensor, n: Tensor| {
            let i0 = Tensor::scalar(0i32);
            let (_, x) = while_loop(|(i, _): &(Tensor, Tensor)| i.lt(&n), |(i, x): (Tensor, Tensor)| (i + 1, x * a as f64 + b as f64), (i0, x))?;
            Ok::<_, Error>(x)
        });
        let got = f32s(&f.call((Tensor::vector(&x0).unwrap(), Tensor::scalar(n))).unwrap());
        let mut want = x0.clone();
        for _ in 0..n {
            want = want.iter().map(|v| v * a + b).collect();
        }
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-4 * (1.0 + w.abs()), "{:?} vs {:?}", got, want);
        }
    }

    #[test]
    fn cond_matches_a_rust_if(x in prop::collection::vec(-3f32..3f32, 1..6), threshold in -3f32..3f32) {
        let f = function(move |x: Tensor| -> Result<Tensor> {
            let p = x.reduce_max(&[], false)?.gt_scalar(threshold as f64)?;
            cond(&p, || x.square(), || x.abs()?.sqrt())
        });
        let got = f32s(&f.call((Tensor::vector(&x).unwrap(),)).unwrap());
        let max = x.iter().cloned().fold(f32::MIN, f32::max);
        let want: Vec<f32> = if max > threshold { x.iter().map(|v| v * v).collect() } else { x.iter().map(|v| v.abs().sqrt()).collect() };
        for (g, w) in got.iter().zip(&want) {
            prop_assert!((g - w).abs() <= 1e-5 * (1.0 + w.abs()));
        }
    }
}

/// Loop bounds in the integer types Rust code has at hand
/// (`i32`, `usize` lengths, `u32`) and `f32` factors convert as `i64` and
/// `f64` do; a `u64` that no int64 holds is an error, not a wrap.
#[test]
fn for_range_takes_any_host_integer() {
    let items = [1f32, 2.0, 3.0];
    let n: usize = items.len();
    let sum_to = |start: Tensor, limit: Tensor| -> i32 {
        for_range(&start, &limit, 1, Tensor::scalar(0i32), |i, acc| {
            acc.add(&i)
        })
        .unwrap()
        .item::<i32>()
        .unwrap()
    };
    let from_i32 = for_range(0i32, n as i32, 1i32, Tensor::scalar(0i32), |i, acc| {
        acc.add(&i)
    });
    assert_eq!(from_i32.unwrap().item::<i32>().unwrap(), 3);
    let from_usize = for_range(0usize, n, 1usize, Tensor::scalar(0i32), |i, acc| {
        acc.add(&i)
    });
    assert_eq!(from_usize.unwrap().item::<i32>().unwrap(), 3);
    let from_u32 = for_range(1u32, 4u32, 1u32, Tensor::scalar(0i32), |i, acc| acc.add(&i));
    assert_eq!(from_u32.unwrap().item::<i32>().unwrap(), 6);
    assert_eq!(sum_to(Tensor::scalar(0i32), Tensor::scalar(5i32)), 10);
    let scaled = for_range(0, 2, 1, Tensor::scalar(1f32), |_, x| {
        x.mul(&Tensor::scalar(0.5f32))
    });
    assert_eq!(scaled.unwrap().item::<f32>().unwrap(), 0.25);
    let err = for_range(0, u64::MAX, 1, Tensor::scalar(0i32), |_, x| {
        Ok::<_, Error>(x)
    });
    assert!(
        err.unwrap_err()
            .to_string()
            .contains("does not fit in an int64")
    );
}
