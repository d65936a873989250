//! `vmap` / `vectorized_map`: every op family with a batching rule
//! against a host loop over the examples (f32 and f64), `in_axes` and
//! `out_axes`, eagerly and compiled (one vectorized program, no loop),
//! nested maps, the loop fallback for an op without a rule, per-example
//! gradients (the DP-SGD pattern) against per-example tapes, and errors.

use xlafn::prelude::*;
use xlafn::{vmap, vmap_with};

#[path = "common/mapping.rs"]
mod mapping;
use mapping::{Example, batch_inputs, f64s, host_loop};

/// A start index per example, from its own data (some beyond the axis, so
/// the rules' clamping is exercised).
fn start_from(x: &Tensor) -> Result<Tensor> {
    x.slice(&[0], &[1])?
        .reshape(&[])?
        .mul_scalar(4.0)?
        .cast(DType::I32)
}

fn w() -> Tensor {
    Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75], &[3, 2]).unwrap()
}

/// One example: `x` `[3]` and `y` `[2, 3]`.
fn families() -> Vec<(&'static str, Example)> {
    vec![
        ("unary and binary", |a| {
            Ok(vec![(a[0].sin()? * &a[1] + a[0].exp()?).tanh()?])
        }),
        ("broadcast against shared", |a| {
            let shared =
                Tensor::from_vec(vec![1f64, 2., 3., 4., 5., 6.], &[2, 3])?.cast(a[0].dtype())?;
            Ok(vec![&a[0] * shared, (&a[1] - &a[0]).square()?])
        }),
        ("matmul", |a| {
            let w = w().cast(a[0].dtype())?;
            Ok(vec![
                a[1].matmul(&w)?,
                a[0].reshape(&[1, 3])?.matmul(&a[1].transpose(&[1, 0])?)?,
            ])
        }),
        ("reductions", |a| {
            Ok(vec![
                a[1].reduce_sum(&[], false)?,
                a[1].reduce_max(&[1], true)?,
                a[1].reduce_mean(&[-2], false)?,
                a[0].softmax(-1)?,
            ])
        }),
        ("shapes", |a| {
            let t = a[1].transpose(&[1, 0])?.reshape(&[6])?;
            let c = Tensor::concat(&[a[0].clone(), t.slice(&[1], &[3])?], 0)?;
            Ok(vec![c, a[0].broadcast_to(&[2, 3])?])
        }),
        ("gather: a table and indices per example, any axis", |a| {
            // Indices from each example's data, some out of range (clamped).
            let idx = a[0].mul_scalar(2.0)?.add_scalar(1.0)?.cast(DType::I32)?;
            let pair = idx.slice(&[0], &[2])?.reshape(&[2, 1])?;
            Ok(vec![
                a[1].gather(&idx.slice(&[1], &[2])?, 0)?,
                a[1].gather(&idx, 1)?,
                a[1].gather(&pair, -1)?,
                a[0].gather(&idx, 0)?,
            ])
        }),
        ("select and cast", |a| {
            let pos = a[0].gt_scalar(0.0)?;
            Ok(vec![
                pos.where_(&a[0], &a[0].neg()?)?,
                pos.cast(DType::I32)?,
                a[1].stop_gradient()?.zeros_like()?,
            ])
        }),
    ]
}

#[test]
fn every_family_matches_a_host_loop_eagerly_and_compiled_in_f32_and_f64() {
    for dtype in [DType::F64, DType::F32] {
        let tol = if dtype == DType::F64 { 1e-12 } else { 1e-5 };
        let inputs = batch_inputs(dtype);
        for (name, f) in families() {
            let want = host_loop(f, &inputs);
            let eager = vmap(f, &inputs).unwrap();
            let compiled = function(move |x: Tensor, y: Tensor| vmap(f, &[x, y]));
            let traced = compiled.call((&inputs[0], &inputs[1])).unwrap();
            for got in [&eager, &traced] {
                assert_eq!(got.len(), want.len(), "{name}");
                for (g, w) in got.iter().zip(&want) {
                    assert_eq!(g.dims(), w.dims(), "{name}");
                    assert_eq!(g.dtype(), w.dtype(), "{name}");
                    for (a, b) in f64s(g).iter().zip(f64s(w)) {
                        assert!(
                            (a - b).abs() <= tol * (1.0 + b.abs()),
                            "{name} {dtype}: {a} vs {b}"
                        );
                    }
                }
            }
            // Vectorized: no loop in the program.
            let text = compiled
                .lower((&inputs[0], &inputs[1]))
                .unwrap()
                .as_text()
                .to_string();
            assert!(
                !text.contains("stablehlo.while"),
                "{name} fell back to a loop"
            );
        }
    }
}

#[test]
fn in_axes_and_out_axes() {
    let [x, y] = batch_inputs(DType::F64);
    // x mapped along axis 1 (its [3, 4] transpose), y shared, examples
    // out along axis 1.
    let xt = x.transpose(&[1, 0]).unwrap();
    let shared = y
        .slice(&[0, 0, 0], &[1, 2, 3])
        .unwrap()
        .squeeze(&[0])
        .unwrap(); // [2, 3]
    let out = vmap_with(
        |a| Ok(vec![(&a[1] * &a[0]).reduce_sum(&[1], false)?]),
        &[xt, shared.clone()],
        &[Some(1), None],
        1,
    )
    .unwrap();
    assert_eq!(out[0].dims(), vec![2, 4]);
    let want = host_loop(
        |a| Ok(vec![(&a[1] * &a[0]).reduce_sum(&[1], false)?]),
        &[
            x.clone(),
            shared
                .expand_dims(0)
                .unwrap()
                .broadcast_to(&[4, 2, 3])
                .unwrap(),
        ],
    );
    let want_t = want[0].transpose(&[1, 0]).unwrap();
    assert_eq!(f64s(&out[0]), f64s(&want_t));
}

#[test]
fn nested_maps_match_a_double_loop() {
    // Outer over 4 rows of y [4, 2, 3], inner over each row's 2 vectors.
    let [_, y] = batch_inputs(DType::F64);
    let inner =
        |a: &[Tensor]| -> Result<Vec<Tensor>> { Ok(vec![a[0].softmax(-1)?.mul_scalar(2.0)?]) };
    let outer = move |a: &[Tensor]| vmap(inner, &[a[0].clone()]);
    let got = vmap(outer, std::slice::from_ref(&y)).unwrap();
    let want = y.softmax(-1).unwrap().mul_scalar(2.0).unwrap();
    for (a, b) in f64s(&got[0]).iter().zip(f64s(&want)) {
        assert!((a - b).abs() < 1e-12);
    }
    let compiled = function(move |y: Tensor| vmap(outer, &[y]));
    let text = compiled.lower((&y,)).unwrap().as_text().to_string();
    assert!(!text.contains("stablehlo.while"));
}

#[test]
fn a_cond_on_a_per_example_predicate_selects_between_both_branches() {
    let [x, _] = batch_inputs(DType::F32);
    let f: Example = |a| {
        let positive = a[0].reduce_sum(&[], false)?.gt_scalar(0.0)?;
        Ok(vec![
            cond(&positive, || a[0].sin(), || a[0].cos())?.mul_scalar(3.0)?,
        ])
    };
    let want = host_loop(f, std::slice::from_ref(&x));
    let got = vmap(f, std::slice::from_ref(&x)).unwrap();
    assert_eq!(f64s(&got[0]), f64s(&want[0]));
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    assert_eq!(f64s(&compiled.call((&x,)).unwrap()[0]), f64s(&want[0]));
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert!(!text.contains("stablehlo.while"), "{text}");
}

#[test]
fn an_op_without_a_rule_falls_back_to_one_device_loop() {
    let [x, _] = batch_inputs(DType::F32);
    // A host callback has no batching rule: the whole function loops over
    // the examples, calling back once per example.
    let f: Example = |a| {
        let spec = xlafn::ArraySpec::new(DType::F32, &[3]);
        let tripled = host_callback(&[&a[0]], &[spec], |args| {
            let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
            Ok(vec![xlafn::runtime::HostArray::from_vec(
                v.iter().map(|x| x * 3.0).collect::<Vec<f32>>(),
                &[3],
            )])
        })?;
        Ok(vec![tripled[0].sin()?])
    };
    let want = host_loop(f, std::slice::from_ref(&x));
    let got = vmap(f, std::slice::from_ref(&x)).unwrap();
    assert_eq!(f64s(&got[0]), f64s(&want[0]));
    let compiled = function(move |x: Tensor| vmap(f, &[x]));
    assert_eq!(f64s(&compiled.call((&x,)).unwrap()[0]), f64s(&want[0]));
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 1);
}

#[test]
fn per_example_gradients_by_mapping_a_gradient() {
    // DP-SGD: the gradient of each example's loss, in one program.
    let [x, _] = batch_inputs(DType::F64);
    let targets = Tensor::vector(&[1f64, -1., 0.5, 2.]).unwrap();
    let weights = Tensor::vector(&[0.2f64, -0.4, 0.7]).unwrap();
    let per_example = |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let (x, t, w) = (&a[0], &a[1], &a[2]);
        let tape = GradientTape::new();
        tape.watch(w);
        let loss = ((x * w).reduce_sum(&[], false)?.tanh()? - t).square()?;
        Ok(vec![tape.gradient(&loss, &[w.into()])?.remove(0).unwrap()])
    };
    let compiled = function(move |x: Tensor, t: Tensor, w: Tensor| {
        vmap_with(per_example, &[x, t, w], &[Some(0), Some(0), None], 0)
    });
    let grads = compiled.call((&x, &targets, &weights)).unwrap();
    let text = compiled
        .lower((&x, &targets, &weights))
        .unwrap()
        .as_text()
        .to_string();
    assert!(
        !text.contains("stablehlo.while"),
        "the gradient's ops all have rules"
    );
    assert_eq!(grads[0].dims(), vec![4, 3]);
    let got = f64s(&grads[0]);
    for b in 0..4 {
        let xb = x.slice(&[b, 0], &[1, 3]).unwrap().squeeze(&[0]).unwrap();
        let tb = targets.slice(&[b], &[1]).unwrap().squeeze(&[0]).unwrap();
        let want = f64s(&per_example(&[xb, tb, weights.clone()]).unwrap()[0]);
        for (k, w) in want.iter().enumerate() {
            assert!((got[b as usize * 3 + k] - w).abs() < 1e-12, "example {b}");
        }
    }
}

#[test]
fn bad_maps_are_clear_errors() {
    let [x, y] = batch_inputs(DType::F32);
    let id: Example = |a| Ok(vec![a[0].clone()]);
    let short = x.slice(&[0, 0], &[3, 3]).unwrap();
    let e = vmap(|a| Ok(vec![&a[0] + &a[1]]), &[x.clone(), short])
        .unwrap_err()
        .to_string();
    assert!(e.contains("same number"), "{e}");
    let e = vmap_with(id, std::slice::from_ref(&x), &[Some(0), None], 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("in_axes"), "{e}");
    let e = vmap_with(id, std::slice::from_ref(&x), &[Some(2)], 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("out of range"), "{e}");
    let e = vmap_with(id, std::slice::from_ref(&y), &[None], 0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no input is mapped"), "{e}");
    let v = Variable::new(Tensor::zeros(&[3], DType::F32));
    let e = vmap(
        move |a| {
            v.assign(&a[0])?;
            Ok(vec![a[0].clone()])
        },
        &[x],
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("assigns a variable"), "{e}");
}

#[test]
fn tensorflows_vectorized_map_examples() {
    // outer_product(a) = tf.tensordot(a, a, 0) over a batch of [8, 8].
    let a = Tensor::from_vec(
        (0..5 * 64).map(|i| (i % 13) as f32 / 13.0).collect(),
        &[5, 8, 8],
    )
    .unwrap();
    let outer: Example = |x| {
        Ok(vec![
            x[0].reshape(&[8, 8, 1, 1])? * x[0].reshape(&[1, 1, 8, 8])?,
        ])
    };
    let c = xlafn::vectorized_map(outer, std::slice::from_ref(&a)).unwrap();
    assert_eq!(c[0].dims(), vec![5, 8, 8, 8, 8]);
    assert_eq!(f64s(&c[0]), f64s(&host_loop(outer, &[a])[0]));

    // Per-example gradients of a dense layer's l2 loss: kernel [16, 32]
    // and bias [32] per example.
    let key = xlafn::random::key(3).unwrap();
    let inputs = xlafn::random::uniform(&key, &[6, 16], DType::F32, 0.0, 1.0).unwrap();
    let labels = xlafn::random::uniform(
        &xlafn::random::fold_in(&key, &Tensor::scalar(1)).unwrap(),
        &[6, 32],
        DType::F32,
        0.0,
        1.0,
    )
    .unwrap();
    let kernel = xlafn::random::normal(
        &xlafn::random::fold_in(&key, &Tensor::scalar(2)).unwrap(),
        &[16, 32],
        DType::F32,
        0.0,
        0.2,
    )
    .unwrap();
    let bias = Tensor::zeros(&[32], DType::F32);
    let model_fn = |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let (inp, label, kernel, bias) = (a[0].expand_dims(0)?, a[1].expand_dims(0)?, &a[2], &a[3]);
        let tape = GradientTape::new();
        tape.watch(kernel);
        tape.watch(bias);
        let prediction = inp.matmul(kernel)? + bias;
        let loss = (label - prediction)
            .square()?
            .reduce_sum(&[], false)?
            .mul_scalar(0.5)?;
        let g = tape.gradient(&loss, &[kernel.into(), bias.into()])?;
        Ok(g.into_iter().map(Option::unwrap).collect())
    };
    let per_example = vmap_with(
        model_fn,
        &[inputs.clone(), labels.clone(), kernel.clone(), bias.clone()],
        &[Some(0), Some(0), None, None],
        0,
    )
    .unwrap();
    assert_eq!(per_example[0].dims(), vec![6, 16, 32]);
    assert_eq!(per_example[1].dims(), vec![6, 32]);
    for b in 0..6 {
        let one = |t: &Tensor| {
            t.slice(&[b, 0], &[1, t.dims()[1]])
                .unwrap()
                .squeeze(&[0])
                .unwrap()
        };
        let want = model_fn(&[one(&inputs), one(&labels), kernel.clone(), bias.clone()]).unwrap();
        let got_k = per_example[0]
            .slice(&[b, 0, 0], &[1, 16, 32])
            .unwrap()
            .squeeze(&[0])
            .unwrap();
        for (x, y) in f64s(&got_k).iter().zip(f64s(&want[0])) {
            assert!((x - y).abs() < 1e-5);
        }
    }
}

#[test]
fn more_families_with_rules_and_the_fallback_match_host_loops() {
    let [x, y] = batch_inputs(DType::F32);
    // (name, function, vectorized: whether every op has a rule)
    let families: Vec<(&str, Example, bool)> = vec![
        ("sort", |a| Ok(vec![a[0].sort(0, true)?]), true),
        (
            "pad and reverse",
            |a| {
                Ok(vec![
                    a[1].pad(&[[1, 0], [0, 2]], PadMode::Constant, 0.5)?
                        .reverse(&[1])?,
                ])
            },
            true,
        ),
        (
            "argmax and one_hot",
            |a| {
                Ok(vec![
                    a[1].argmax(-1)?,
                    a[1].argmax(-1)?.one_hot(3, 1.0, 0.0, DType::F32)?,
                ])
            },
            true,
        ),
        (
            "max_pool",
            |a| {
                Ok(vec![a[1].reshape(&[1, 2, 3, 1])?.max_pool(
                    &[1, 2],
                    &[1, 1],
                    Padding::Valid,
                )?])
            },
            true,
        ),
        ("cumsum", |a| Ok(vec![a[1].cumsum(1, false, true)?]), true),
        ("split", |a| a[1].split(3, 1), true),
        (
            "dynamic_slice",
            |a| {
                Ok(vec![a[1].dynamic_slice(
                    &[Tensor::scalar(1i32), Tensor::scalar(1i32)],
                    &[1, 2],
                )?])
            },
            true,
        ),
        (
            "conv2d with a shared kernel",
            |a| {
                let kernel = Tensor::from_vec(vec![0.5f32, -1.0, 0.25, 2.0], &[2, 1, 1, 2])?;
                let images = a[1].reshape(&[2, 3, 1, 1])?; // N=2, H=3, W=1, C=1
                Ok(vec![
                    images
                        .conv2d(&kernel, [1, 1], Padding::Same, [1, 1])?
                        .relu()?,
                ])
            },
            true,
        ),
        (
            "conv2d with a kernel per example",
            |a| {
                let image =
                    Tensor::from_vec((0..12).map(|i| i as f32 / 6.0).collect(), &[1, 4, 3, 1])?;
                let kernel = a[0].slice(&[0], &[2])?.reshape(&[2, 1, 1, 1])?;
                Ok(vec![image.conv2d(
                    &kernel,
                    [1, 1],
                    Padding::Valid,
                    [1, 1],
                )?])
            },
            true,
        ),
        (
            "conv2d with an image and a kernel per example",
            |a| {
                // Two channels in, two out: each example's 2x3 data as a
                // [1, 3, 1, 2] image, its [3] vector inside a 1x1 kernel.
                let image = a[1].transpose(&[1, 0])?.reshape(&[1, 3, 1, 2])?;
                let kernel = Tensor::concat(&[a[0].clone(), a[0].neg()?], 0)?
                    .slice(&[0], &[4])?
                    .reshape(&[1, 1, 2, 2])?;
                Ok(vec![image.conv2d(
                    &kernel,
                    [1, 1],
                    Padding::Same,
                    [1, 1],
                )?])
            },
            true,
        ),
        (
            "depthwise conv2d with a kernel per example",
            |a| {
                let image = a[1].transpose(&[1, 0])?.reshape(&[1, 3, 1, 2])?;
                let filters = a[0].slice(&[0], &[2])?.reshape(&[2, 1, 1, 1])?;
                let filters = Tensor::concat(&[filters.clone(), filters.mul_scalar(-0.5)?], 2)?;
                Ok(vec![image.depthwise_conv2d(
                    &filters,
                    [1, 1],
                    Padding::Same,
                    [1, 1],
                )?])
            },
            true,
        ),
        (
            "a conv layer's per-example kernel and input gradients",
            |a| {
                let tape = GradientTape::new();
                let image = a[1].reshape(&[1, 2, 3, 1])?;
                let kernel = Tensor::from_vec(vec![0.5f32, -1.0, 0.25, 2.0], &[2, 2, 1, 1])?;
                tape.watch(&image);
                tape.watch(&kernel);
                let y = image
                    .conv2d(&kernel, [1, 1], Padding::Same, [1, 1])?
                    .tanh()?;
                let loss = y.square()?.reduce_sum(&[], false)?;
                let g = tape.gradient(&loss, &[(&kernel).into(), (&image).into()])?;
                Ok(g.into_iter().map(Option::unwrap).collect())
            },
            true,
        ),
        (
            "a depthwise layer's per-example kernel gradient (grouped batches)",
            |a| {
                let tape = GradientTape::new();
                let image = a[1].transpose(&[1, 0])?.reshape(&[1, 3, 1, 2])?;
                let filters = Tensor::from_vec(vec![0.5f32, -1.0, 0.25, 2.0], &[2, 1, 2, 1])?;
                tape.watch(&filters);
                let y = image.depthwise_conv2d(&filters, [1, 1], Padding::Same, [1, 1])?;
                let loss = y.square()?.reduce_sum(&[], false)?;
                Ok(vec![
                    tape.gradient(&loss, &[(&filters).into()])?
                        .remove(0)
                        .unwrap(),
                ])
            },
            true,
        ),
        (
            "strided_slice",
            |a| Ok(vec![a[1].strided_slice(&[0, 2], &[2, -4], &[1, -2])?]),
            true,
        ),
        (
            "cholesky and triangular_solve",
            |a| {
                // An SPD matrix per example: y yᵀ + 3 I.
                let eye = Tensor::from_vec(vec![3f32, 0., 0., 0., 3., 0., 0., 0., 3.], &[3, 3])?;
                let spd = a[1].transpose(&[1, 0])?.matmul(&a[1])?.add(&eye)?;
                let l = spd.cholesky()?;
                let rhs = a[0].reshape(&[3, 1])?;
                Ok(vec![
                    l.clone(),
                    rhs.triangular_solve(&l, true, true, false, false)?,
                ])
            },
            true,
        ),
        (
            "gradients through max_pool and take_along_axis",
            |a| {
                let tape = GradientTape::new();
                let x = a[1].reshape(&[1, 2, 3, 1])?;
                tape.watch(&x);
                let pooled = x.max_pool(&[2, 1], &[2, 1], Padding::Valid)?;
                let idx = Tensor::from_vec(vec![2i32, 0, 1], &[1, 3])?;
                let picked = x
                    .reshape(&[2, 3])?
                    .slice(&[0, 0], &[1, 3])?
                    .take_along_axis(&idx, 1)?;
                let loss = pooled.square()?.reduce_sum(&[], false)?
                    + picked.square()?.reduce_sum(&[], false)?;
                Ok(vec![
                    tape.gradient(&loss, &[(&x).into()])?.remove(0).unwrap(),
                ])
            },
            true,
        ),
        (
            "dynamic_slice at a start per example",
            |a| {
                let start = start_from(&a[0])?;
                Ok(vec![
                    a[1].dynamic_slice(&[Tensor::scalar(0i32), start.clone()], &[2, 2])?,
                    a[0].dynamic_slice(&[start], &[1])?,
                ])
            },
            true,
        ),
        (
            "gather_nd",
            |a| {
                let rows = Tensor::from_vec(vec![1i32, 2, 0, 0], &[2, 2])?;
                let per_example = a[0]
                    .gt_scalar(0.0)?
                    .cast(DType::I32)?
                    .slice(&[0], &[2])?
                    .reshape(&[2, 1])?;
                let shared = Tensor::from_vec((0..6).map(|i| i as f32).collect(), &[2, 3])?;
                Ok(vec![
                    a[1].gather_nd(&rows)?,
                    shared.gather_nd(&per_example)?,
                    a[1].gather_nd(&per_example)?,
                ])
            },
            true,
        ),
        (
            "tensor_scatter_nd",
            |a| {
                let rows = Tensor::from_vec(vec![1i32, 2, 0, 0], &[2, 2])?;
                let updates = a[0].slice(&[0], &[2])?;
                Ok(vec![
                    a[1].tensor_scatter_nd_add(&rows, &updates)?,
                    a[1].tensor_scatter_nd_update(&rows, &Tensor::vector(&[7f32, 8.])?)?,
                ])
            },
            true,
        ),
        (
            "ensure_shape",
            |a| Ok(vec![a[1].ensure_shape(&[None, Some(3)])?.exp()?]),
            true,
        ),
        (
            "dynamic_update_slice at a start per example",
            |a| {
                let start = start_from(&a[0])?;
                let patch = a[0].slice(&[1], &[2])?.reshape(&[1, 2])?;
                Ok(vec![a[1].dynamic_update_slice(
                    &patch,
                    &[Tensor::scalar(1i32), start],
                )?])
            },
            true,
        ),
    ];
    for (name, f, vectorized) in families {
        let inputs = [x.clone(), y.clone()];
        let want = host_loop(f, &inputs);
        let got = vmap(f, &inputs).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.dims(), w.dims(), "{name}");
            // Exact, but for the last bit of f32 sums that a grouped
            // convolution adds in another order than one example's.
            for (a, b) in f64s(g).iter().zip(f64s(w)) {
                assert!(
                    (a - b).abs() <= 2e-7 * b.abs().max(1.0),
                    "{name}: {a} vs {b}"
                );
            }
        }
        let compiled = function(move |x: Tensor, y: Tensor| vmap(f, &[x, y]));
        let text = compiled.lower((&x, &y)).unwrap().as_text().to_string();
        let loops = text.matches("stablehlo.while").count();
        assert_eq!(loops == 0, vectorized, "{name}: {loops} loops");
        let out = compiled.call((&x, &y)).unwrap();
        for (g, w) in out.iter().zip(&want) {
            for (a, b) in f64s(g).iter().zip(f64s(w)) {
                assert!(
                    (a - b).abs() <= 2e-7 * b.abs().max(1.0),
                    "{name}, compiled: {a} vs {b}"
                );
            }
        }
    }
}

#[test]
fn a_function_called_inside_the_mapped_function_is_batched_too() {
    let [x, _] = batch_inputs(DType::F64);
    let inner = function(|x: Tensor| Ok((x.exp()? * 2.0, x.reduce_max(&[], false)?)));
    let mapped = move |a: &[Tensor]| -> Result<Vec<Tensor>> {
        let (e, m) = inner.call((&a[0],))?;
        Ok(vec![e, m])
    };
    let got = vmap(&mapped, std::slice::from_ref(&x)).unwrap();
    assert_eq!(f64s(&got[0]), f64s(&(x.exp().unwrap() * 2.0)));
    assert_eq!(f64s(&got[1]), f64s(&x.reduce_max(&[1], false).unwrap()));
    let compiled = function(move |x: Tensor| vmap(&mapped, &[x]));
    assert_eq!(f64s(&compiled.call((&x,)).unwrap()[1]), f64s(&got[1]));
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert!(!text.contains("stablehlo.while"));
}

#[test]
fn vectorized_map_broadcasts_a_leading_one_and_out_axes_per_output() {
    // tf.vectorized_map: an element of leading size 1 is shared.
    let xs = Tensor::from_vec(vec![1f64, 2., 3., 4., 5., 6.], &[3, 2]).unwrap();
    let bias = Tensor::from_vec(vec![10f64, 20.], &[1, 2]).unwrap();
    let f = |e: &[Tensor]| Ok(vec![&e[0] + &e[1]]);
    let ys = xlafn::vectorized_map(f, &[xs.clone(), bias.clone()]).unwrap();
    assert_eq!(ys[0].dims(), vec![3, 2]);
    assert_eq!(f64s(&ys[0]), vec![11., 22., 13., 24., 15., 26.]);
    // Compiled, the same.
    let g = function(move |xs: Tensor, b: Tensor| {
        xlafn::vectorized_map(|e| Ok(vec![&e[0] + &e[1]]), &[xs, b])
    });
    assert_eq!(f64s(&g.call((&xs, &bias)).unwrap()[0]), f64s(&ys[0]));
    // Every element of size 1: one example, mapped.
    let one = xlafn::vectorized_map(f, &[bias.clone(), bias.clone()]).unwrap();
    assert_eq!((one[0].dims(), f64s(&one[0])), (vec![1, 2], vec![20., 40.]));

    // jax.vmap's out_axes per output, None for an unmapped one.
    let w = Tensor::vector(&[1f64, -1.]).unwrap();
    let h = |a: &[Tensor]| {
        Ok(vec![
            &a[0] * &a[1],
            a[1].square()?,
            a[0].reduce_sum(&[], false)?,
        ])
    };
    let out = vmap_with(
        h,
        &[xs.clone(), w.clone()],
        &[Some(0), None],
        vec![Some(1), None, Some(0)],
    )
    .unwrap();
    assert_eq!(out[0].dims(), vec![2, 3]);
    assert_eq!(f64s(&out[0]), vec![1., 3., 5., -2., -4., -6.]);
    assert_eq!((out[1].dims(), f64s(&out[1])), (vec![2], vec![1., 1.]));
    assert_eq!(f64s(&out[2]), vec![3., 7., 11.]);
    // A mapped output under None, and a wrong count, are errors.
    let e = vmap_with(
        h,
        &[xs.clone(), w.clone()],
        &[Some(0), None],
        vec![None, None, None],
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("out_axes[0] is None") && e.contains("depends on the mapped"),
        "{e}"
    );
    let e = vmap_with(h, &[xs, w], &[Some(0), None], vec![Some(0)])
        .unwrap_err()
        .to_string();
    assert!(e.contains("1 out_axes for 3 outputs"), "{e}");
}
