//! `vmap` of functions with loops and custom gradients: a `while` with a
//! per-example trip count (JAX's rule: run while any example runs, keep
//! the finished ones' values), shared counts, nested loops, per-example
//! gradients through a recurrent loop's state record (one program, no
//! loop over the examples), the gradient of a batched loop against
//! central differences, and custom gradients mapped over the examples
//! (the user's gradient function, not the body's, reaches every tape).

use xlafn::ops::custom_gradient::custom_gradient;
use xlafn::prelude::*;
use xlafn::{vmap, vmap_with};

#[path = "common/mapping.rs"]
mod mapping;
use mapping::{Example, batch_inputs, f64s, host_loop};

/// A loop whose trip count comes from each example's data: the
/// examples stop on different steps.
fn halving_until_small(a: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = a[0]
        .reduce_sum(&[], false)?
        .abs()?
        .add_scalar(1.0)?
        .cast(DType::I32)?;
    let (i, y) = while_loop(
        |(i, _): &(Tensor, Tensor)| i.lt(&n),
        |(i, y): (Tensor, Tensor)| Ok::<_, Error>((i + 1, y.mul_scalar(0.5)?.sin()?)),
        (Tensor::scalar(0i32), a[0].clone()),
    )?;
    Ok(vec![i, y])
}

#[test]
fn a_loop_with_a_per_example_trip_count_is_one_batched_loop() {
    // JAX's rule: run while any example's condition holds; an example whose
    // condition is false keeps its values.
    let [x, _] = batch_inputs(DType::F64);
    let f: Example = halving_until_small;
    let want = host_loop(f, std::slice::from_ref(&x));
    let counts: Vec<i64> = want[0].cast(DType::I64).unwrap().to_vec().unwrap();
    assert!(
        counts.windows(2).any(|w| w[0] != w[1]),
        "the examples must stop on different steps: {counts:?}"
    );
    let got = vmap(f, std::slice::from_ref(&x)).unwrap();
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(f64s(g), f64s(w));
    }
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    let out = compiled.call((&x,)).unwrap();
    for (g, w) in out.iter().zip(&want) {
        assert_eq!(f64s(g), f64s(w));
    }
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
}

#[test]
fn nested_loops_and_loops_with_a_shared_count_are_batched() {
    let [x, y] = batch_inputs(DType::F32);
    // (name, function, loops in the compiled program)
    let cases: Vec<(&str, Example, usize)> = vec![
        (
            "a shared count: every example runs the same steps",
            |a| Ok(vec![for_range(0, 3, 1, a[0].clone(), |_, s| s.sin())?]),
            1,
        ),
        (
            "a count from shared data, a carry from batched data",
            |a| {
                let (_, acc) = for_range(
                    0,
                    4,
                    1,
                    (Tensor::scalar(0f32), a[1].clone()),
                    |i, (c, acc): (Tensor, Tensor)| {
                        let c = c.add(&i.cast(DType::F32)?)?;
                        Ok::<_, Error>((c.clone(), acc.mul(&c.cos()?)?))
                    },
                )?;
                Ok(vec![acc])
            },
            1,
        ),
        (
            "a loop inside a loop, each with a per-example count",
            |a| {
                let outer = a[0]
                    .reduce_max(&[], false)?
                    .abs()?
                    .mul_scalar(3.0)?
                    .cast(DType::I32)?;
                let (_, y) = while_loop(
                    |(i, _): &(Tensor, Tensor)| i.lt(&outer),
                    |(i, y): (Tensor, Tensor)| {
                        let inner = i.add_scalar(1)?;
                        let (_, y) = while_loop(
                            |(j, _): &(Tensor, Tensor)| j.lt(&inner),
                            |(j, y): (Tensor, Tensor)| Ok::<_, Error>((j + 1, y.cos()?)),
                            (Tensor::scalar(0i32), y),
                        )?;
                        Ok::<_, Error>((i + 1, y))
                    },
                    (Tensor::scalar(0i32), a[1].clone()),
                )?;
                Ok(vec![y])
            },
            2,
        ),
    ];
    for (name, f, loops) in cases {
        let inputs = [x.clone(), y.clone()];
        let want = host_loop(f, &inputs);
        let got = vmap(f, &inputs).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.dims(), w.dims(), "{name}");
            assert_eq!(f64s(g), f64s(w), "{name}");
        }
        let compiled = function(move |x: Tensor, y: Tensor| vmap(f, &[x, y]));
        let out = compiled.call((&x, &y)).unwrap();
        for (g, w) in out.iter().zip(&want) {
            assert_eq!(f64s(g), f64s(w), "{name}, compiled");
        }
        let text = compiled.lower((&x, &y)).unwrap().as_text().to_string();
        assert_eq!(text.matches("stablehlo.while").count(), loops, "{name}");
    }
}

/// One example's loss through a small recurrence over `steps` (`[T, 3]`
/// inputs, a shared `[3, 3]` weight), and its gradient for the weight.
fn recurrent_gradient(a: &[Tensor]) -> Result<Vec<Tensor>> {
    let (xs, w) = (&a[0], &a[1]);
    let tape = GradientTape::new();
    tape.watch(w);
    let h = for_range(0, 5, 1, Tensor::zeros(&[1, 3], DType::F64), |t, h| {
        let x = xs.dynamic_slice(&[t, Tensor::scalar(0i32)], &[1, 3])?;
        h.matmul(w)?.add(&x)?.tanh()
    })?;
    let loss = h.square()?.reduce_sum(&[], false)?;
    Ok(vec![
        loss.clone(),
        tape.gradient(&loss, &[w.into()])?.remove(0).unwrap(),
    ])
}

#[test]
fn per_example_gradients_through_a_recurrent_loop_are_one_program() {
    // DP-SGD on a recurrent model: the loop records its states for the
    // gradient, and the batched loop records them per example.
    let xs = Tensor::from_vec(
        (0..4 * 5 * 3)
            .map(|k| ((k * 7 % 11) as f64 - 5.0) / 6.0)
            .collect(),
        &[4, 5, 3],
    )
    .unwrap();
    let w = Tensor::from_vec(
        vec![0.3f64, -0.2, 0.5, 0.1, 0.4, -0.6, -0.3, 0.2, 0.25],
        &[3, 3],
    )
    .unwrap();
    let f: Example = recurrent_gradient;
    let compiled =
        function(move |xs: Tensor, w: Tensor| vmap_with(f, &[xs, w], &[Some(0), None], 0));
    let got = compiled.call((&xs, &w)).unwrap();
    let eager = vmap_with(f, &[xs.clone(), w.clone()], &[Some(0), None], 0).unwrap();
    let text = compiled.lower((&xs, &w)).unwrap().as_text().to_string();
    assert_eq!(
        text.matches("stablehlo.while").count(),
        2,
        "one forward and one backward loop, no loop over the examples"
    );
    for b in 0..4 {
        let xb = xs
            .slice(&[b, 0, 0], &[1, 5, 3])
            .unwrap()
            .squeeze(&[0])
            .unwrap();
        let want = recurrent_gradient(&[xb, w.clone()]).unwrap();
        for k in 0..2 {
            let row = |t: &Tensor| {
                let mut begin = vec![0; t.rank()];
                begin[0] = b;
                let mut size = t.dims();
                size[0] = 1;
                f64s(&t.slice(&begin, &size).unwrap())
            };
            for (g, e) in [row(&got[k]), row(&eager[k])].iter().zip([0, 1]) {
                for (x, y) in g.iter().zip(f64s(&want[k])) {
                    assert!((x - y).abs() < 1e-12, "example {b}, output {k}, run {e}");
                }
            }
        }
    }
}

#[test]
fn gradients_flow_through_a_batched_loop() {
    // The tape outside the map: the batched loop's own gradient.
    let [x, _] = batch_inputs(DType::F64);
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = vmap(halving_until_small, std::slice::from_ref(&x)).unwrap();
    let loss = y[1].square().unwrap().reduce_sum(&[], false).unwrap();
    let got = f64s(
        &tape.gradient(&loss, &[(&x).into()]).unwrap()[0]
            .clone()
            .unwrap(),
    );
    // Central differences on the host loop (the trip counts do not move
    // for a small step).
    let host = |x: &Tensor| {
        let y = host_loop(halving_until_small, std::slice::from_ref(x));
        y[1].square()
            .unwrap()
            .reduce_sum(&[], false)
            .unwrap()
            .item::<f64>()
            .unwrap()
    };
    let base = f64s(&x);
    for k in 0..base.len() {
        let shifted = |d: f64| {
            let mut v = base.clone();
            v[k] += d;
            Tensor::from_vec(v, &x.dims()).unwrap()
        };
        let fd = (host(&shifted(1e-6)) - host(&shifted(-1e-6))) / 2e-6;
        assert!(
            (got[k] - fd).abs() < 1e-6,
            "element {k}: {} vs {fd}",
            got[k]
        );
    }
}

/// `y = x³` whose gradient function says `dy * 10`, so a test can tell
/// which gradient a tape used (the body's would be `3x² dy`).
fn cube_with_a_marked_gradient(xs: &[Tensor]) -> Result<Vec<Tensor>> {
    let cube = custom_gradient(|xs: &[Tensor]| {
        let y = xs[0].pow_scalar(3.0)?;
        let grad = |dy: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            Ok(vec![Some(dy[0].mul_scalar(10.0)?)])
        };
        Ok((vec![y], grad))
    });
    cube(xs)
}

#[test]
fn a_custom_gradient_is_batched_and_keeps_its_gradient_function() {
    let [x, _] = batch_inputs(DType::F64);
    let f: Example = |a| Ok(vec![cube_with_a_marked_gradient(&a[..1])?[0].sin()?]);
    let want = host_loop(f, std::slice::from_ref(&x));
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert!(!text.contains("stablehlo.while"), "{text}");
    assert_eq!(f64s(&compiled.call((&x,)).unwrap()[0]), f64s(&want[0]));
    // A tape outside the map, eagerly and compiled: d sin(y)/dx through
    // the marked rule is cos(x³) * 10.
    let outside = move |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let y = vmap(f, std::slice::from_ref(x))?.remove(0);
        let loss = y.reduce_sum(&[], false)?;
        Ok(tape.gradient(&loss, &[x.into()])?.remove(0).unwrap())
    };
    let expected: Vec<f64> = f64s(&x).iter().map(|v| (v * v * v).cos() * 10.0).collect();
    for got in [
        outside(&x).unwrap(),
        function(move |x: Tensor| outside(&x)).call((&x,)).unwrap(),
    ] {
        for (g, e) in f64s(&got).iter().zip(&expected) {
            assert!((g - e).abs() < 1e-12, "{g} vs {e}");
        }
    }
}

#[test]
fn per_example_gradients_through_a_custom_gradient_use_its_rule() {
    // The tape inside the mapped function, a shared weight: each example's
    // gradient is its own marked rule's.
    let [x, _] = batch_inputs(DType::F64);
    let w = Tensor::vector(&[0.5f64, -1.0, 2.0]).unwrap();
    let f: Example = |a| {
        let tape = GradientTape::new();
        tape.watch(&a[1]);
        let y = cube_with_a_marked_gradient(&[a[0].mul(&a[1])?])?.remove(0);
        let loss = y.reduce_sum(&[], false)?;
        Ok(vec![
            tape.gradient(&loss, &[(&a[1]).into()])?.remove(0).unwrap(),
        ])
    };
    let compiled = function(move |x: Tensor, w: Tensor| vmap_with(f, &[x, w], &[Some(0), None], 0));
    let got = f64s(&compiled.call((&x, &w)).unwrap()[0]);
    // d(x*w)³/dw by the marked rule: 10 * x.
    let expected: Vec<f64> = f64s(&x).iter().map(|v| 10.0 * v).collect();
    assert_eq!(got, expected);
    // A shared input's gradient from outside the map sums the examples'.
    let tape = GradientTape::new();
    tape.watch(&w);
    let mapped = |a: &[Tensor]| cube_with_a_marked_gradient(&[a[0].mul(&a[1])?]);
    let y = vmap_with(mapped, &[x.clone(), w.clone()], &[Some(0), None], 0).unwrap();
    let loss = y[0].reduce_sum(&[], false).unwrap();
    let gw = f64s(
        &tape.gradient(&loss, &[(&w).into()]).unwrap()[0]
            .clone()
            .unwrap(),
    );
    let xs = f64s(&x);
    for k in 0..3 {
        let want: f64 = (0..4).map(|b| 10.0 * xs[b * 3 + k]).sum();
        assert!((gw[k] - want).abs() < 1e-12, "{} vs {want}", gw[k]);
    }
}

#[test]
fn per_example_gradients_through_a_loop_with_a_per_example_count_are_one_program() {
    // The loop records its states for the gradient, and each example
    // counts its own trips and fills its own slots; the backward loop walks
    // each example's record back from its own count. The same values as a
    // host loop of per-example tapes, and the same loops as one example's
    // program (no loop over the examples around them).
    let [x, _] = batch_inputs(DType::F64);
    let f: Example = |a| {
        let tape = GradientTape::new();
        tape.watch(&a[0]);
        let y = halving_until_small(a)?.remove(1);
        let loss = y.square()?.reduce_sum(&[], false)?;
        Ok(vec![
            tape.gradient(&loss, &[(&a[0]).into()])?.remove(0).unwrap(),
        ])
    };
    let want = host_loop(f, std::slice::from_ref(&x));
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    for got in [
        vmap(f, std::slice::from_ref(&x)).unwrap(),
        compiled.call((&x,)).unwrap(),
    ] {
        for (g, w) in f64s(&got[0]).iter().zip(f64s(&want[0])) {
            assert!((g - w).abs() < 1e-12, "{g} vs {w}");
        }
    }
    let loops = |text: String| text.matches("stablehlo.while").count();
    let mapped = loops(compiled.lower((&x,)).unwrap().as_text().to_string());
    let row = x.slice(&[0, 0], &[1, 3]).unwrap().squeeze(&[0]).unwrap();
    let single = function(move |x: Tensor| f(&[x]));
    let one = loops(single.lower((&row,)).unwrap().as_text().to_string());
    assert_eq!(mapped, one, "the loops of one example's program, batched");
}

#[test]
fn per_example_gradients_past_the_record_use_each_examples_checkpoints() {
    // Trip counts of 3 and 300 in one batch: the longer examples outrun
    // the state record's slots and take the checkpointed backward pass,
    // the shorter ones read their stored states.
    let x = Tensor::vector(&[3f64, 300.0, 40.0, 299.0]).unwrap();
    let f: Example = |a| {
        let tape = GradientTape::new();
        let s = a[0].mul_scalar(1e-3)?;
        tape.watch(&s);
        let n = a[0].cast(DType::I32)?;
        let (_, y) = while_loop(
            |(i, _): &(Tensor, Tensor)| i.lt(&n),
            |(i, y): (Tensor, Tensor)| Ok::<_, Error>((i + 1, y.mul(&s)?.sin()?.add(&s)?)),
            (Tensor::scalar(0i32), s.clone()),
        )?;
        Ok(vec![tape.gradient(&y, &[(&s).into()])?.remove(0).unwrap()])
    };
    let single = function(move |x: Tensor| f(&[x]));
    let want: Vec<f64> = f64s(&x)
        .iter()
        .map(|&v| {
            single.call((Tensor::scalar(v),)).unwrap()[0]
                .item::<f64>()
                .unwrap()
        })
        .collect();
    let got = function(move |x: Tensor| vmap(f, &[x]))
        .call((&x,))
        .unwrap();
    for (g, w) in f64s(&got[0]).iter().zip(&want) {
        assert!((g - w).abs() <= 1e-12 * w.abs().max(1.0), "{g} vs {w}");
    }
}

#[test]
fn a_loop_around_an_op_without_a_rule_falls_back_to_a_loop_over_the_examples() {
    // The loop's rule meets a host callback in the body, declines, and the
    // whole function loops over the examples instead.
    let [x, _] = batch_inputs(DType::F32);
    let f: Example = |a| {
        let y = for_range(0, 2, 1, a[0].clone(), |_, y| {
            let spec = xlafn::ArraySpec::new(DType::F32, &[3]);
            let doubled = host_callback(&[&y], &[spec], |args| {
                let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
                Ok(vec![xlafn::runtime::HostArray::from_vec(
                    v.iter().map(|x| x * 2.0).collect::<Vec<f32>>(),
                    &[3],
                )])
            })?;
            doubled[0].sin()
        })?;
        Ok(vec![y])
    };
    let want = host_loop(f, std::slice::from_ref(&x));
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    for got in [
        vmap(f, std::slice::from_ref(&x)).unwrap(),
        compiled.call((&x,)).unwrap(),
    ] {
        assert_eq!(f64s(&got[0]), f64s(&want[0]));
    }
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 2, "{text}");
}
