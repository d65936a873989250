//! `tape.jacobian`, `tape.batch_jacobian`, `ForwardAccumulator`, `jvp`,
//! `hvp`, `hessian` and per-example gradients: TensorFlow's documented
//! examples, and every result against a reference computed another way
//! (central differences in f64, the jacobian's rows against `jvp`, host
//! loops of per-example tapes), eagerly and compiled, f32 and f64.

use xlafn::autodiff::{ForwardAccumulator, UnconnectedGradients, hessian, hvp, jvp};
use xlafn::prelude::*;

fn f64s(t: &Tensor) -> Vec<f64> {
    t.cast(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn close(a: &[f64], b: &[f64], tol: f64) {
    assert_eq!(a.len(), b.len());
    for (i, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            (x - y).abs() <= tol * (1.0 + y.abs()),
            "element {i}: {x} vs {y}\n{a:?}\n{b:?}"
        );
    }
}

/// Functions from `[2, 3]` to some shape, one per op family.
/// A function of one tensor.
type Family = fn(&Tensor) -> Result<Tensor>;

fn families() -> Vec<(&'static str, Family)> {
    vec![
        ("elementwise", |x| {
            (x.sin()? * x.exp()? + x.tanh()?.sigmoid()?)
                .square()?
                .add_scalar(1.0)?
                .sqrt()
        }),
        ("binary", |x| {
            x.abs()?
                .add_scalar(0.5)?
                .pow(&x.cos()?)?
                .div(&x.square()?.add_scalar(2.0)?)
        }),
        ("matmul", |x| {
            let w = Tensor::from_vec(vec![0.5f64, -1.0, 2.0, 0.25, 1.5, -0.75], &[3, 2])?
                .cast(x.dtype())?;
            x.matmul(&w)?.tanh()
        }),
        ("reduce", |x| {
            Tensor::concat(
                &[
                    x.reduce_sum(&[1], true)?,
                    x.reduce_max(&[1], true)?,
                    x.reduce_logsumexp(&[1], true)?,
                ],
                1,
            )
        }),
        ("shape", |x| {
            let t = x.transpose(&[1, 0])?.reshape(&[2, 3])?;
            Tensor::concat(
                &[
                    t.slice(&[0, 1], &[2, 2])?,
                    x.slice(&[1, 0], &[1, 2])?.reshape(&[2, 1])?,
                ],
                1,
            )
        }),
        ("softmax", |x| x.softmax(-1)?.log()),
        ("cumulative", |x| x.cumsum(1, false, false)?.mul(x)),
        ("loop", |x| {
            // A recurrence over a count from the data, with a capture.
            let n = x
                .reduce_max(&[], false)?
                .mul_scalar(3.0)?
                .cast(DType::I32)?;
            let (_, s) = while_loop(
                |(i, _): &(Tensor, Tensor)| i.lt(&n),
                |(i, s): (Tensor, Tensor)| Ok::<_, Error>((i + 1, s.mul(x)?.sin()?.add(x)?)),
                (Tensor::scalar(0i32), x.cos()?),
            )?;
            for_range(0, 2, 1, s, |_, s| s.tanh()?.mul_scalar(1.5))
        }),
        ("cond", |x| {
            let s = x.reduce_sum(&[], false)?;
            cond(
                &s.gt_scalar(0.0)?,
                || x.exp()?.mul(&s),
                || x.sin()?.mul_scalar(2.0),
            )
        }),
    ]
}

fn x_f64() -> Tensor {
    Tensor::from_vec(vec![0.3f64, -0.7, 1.1, 0.4, 0.9, -0.2], &[2, 3]).unwrap()
}

/// The full jacobian by central differences, `[out..., 2, 3]` flattened.
fn numeric_jacobian(f: fn(&Tensor) -> Result<Tensor>, x: &[f64]) -> Vec<f64> {
    let at = |v: Vec<f64>| f64s(&f(&Tensor::from_vec(v, &[2, 3]).unwrap()).unwrap());
    let n_out = at(x.to_vec()).len();
    let eps = 1e-6;
    let mut j = vec![0.0; n_out * x.len()];
    for k in 0..x.len() {
        let (mut up, mut down) = (x.to_vec(), x.to_vec());
        up[k] += eps;
        down[k] -= eps;
        let (u, d) = (at(up), at(down));
        for o in 0..n_out {
            j[o * x.len() + k] = (u[o] - d[o]) / (2.0 * eps);
        }
    }
    j
}

fn jacobian_of(f: fn(&Tensor) -> Result<Tensor>, x: &Tensor) -> Result<Tensor> {
    let tape = GradientTape::new();
    tape.watch(x);
    let y = f(x)?;
    Ok(tape
        .jacobian(&y, &[x.into()])?
        .remove(0)
        .expect("connected"))
}

#[test]
fn tensorflows_jacobian_example() {
    let x = Tensor::vector(&[1f32, 2.]).unwrap();
    let j = jacobian_of(|x| Ok(x * x), &x).unwrap();
    assert_eq!(j.dims(), vec![2, 2]);
    assert_eq!(j.to_vec::<f32>().unwrap(), vec![2., 0., 0., 4.]);
    let compiled = function(|x: Tensor| jacobian_of(|x| Ok(x * x), &x));
    assert_eq!(
        compiled.call((&x,)).unwrap().to_vec::<f32>().unwrap(),
        vec![2., 0., 0., 4.]
    );
}

#[test]
fn jacobians_match_central_differences_on_every_family_eagerly_and_compiled() {
    let x = x_f64();
    let values = f64s(&x);
    for (name, f) in families() {
        let want = numeric_jacobian(f, &values);
        let eager = jacobian_of(f, &x).unwrap();
        close(&f64s(&eager), &want, 1e-6);
        let compiled = function(move |x: Tensor| jacobian_of(f, &x));
        let got = compiled.call((&x,)).unwrap();
        assert_eq!(got.dims(), eager.dims(), "{name}");
        close(&f64s(&got), &want, 1e-6);
        // f32: the same within single precision.
        let x32 = x.cast(DType::F32).unwrap();
        let got32 = compiled.call((&x32,)).unwrap();
        close(&f64s(&got32), &want, 2e-3);
    }
}

#[test]
fn a_compiled_jacobian_is_one_loop_over_the_rows() {
    let x = x_f64();
    let compiled =
        function(|x: Tensor| jacobian_of(|x| x.sin()?.matmul(&x.transpose(&[1, 0])?), &x));
    let text = compiled.lower((&x,)).unwrap().as_text().to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
}

#[test]
fn several_sources_variables_and_unconnected_sources() {
    let x = Tensor::vector(&[1f64, 2.]).unwrap();
    let unused = Tensor::vector(&[5f64]).unwrap();
    let w = Variable::new(Tensor::vector(&[3f64, -1.]).unwrap());
    let tape = GradientTape::persistent();
    tape.watch(&x);
    tape.watch(&unused);
    let y = (&x * &w.read()).exp().unwrap();
    let j = tape
        .jacobian(&y, &[(&x).into(), (&w).into(), (&unused).into()])
        .unwrap();
    let e = [3f64.exp(), (-2f64).exp()];
    close(
        &f64s(j[0].as_ref().unwrap()),
        &[3.0 * e[0], 0.0, 0.0, -e[1]],
        1e-12,
    );
    close(
        &f64s(j[1].as_ref().unwrap()),
        &[e[0], 0.0, 0.0, 2.0 * e[1]],
        1e-12,
    );
    assert!(j[2].is_none());
    let zeros = tape
        .jacobian_with(&y, &[(&unused).into()], UnconnectedGradients::Zero)
        .unwrap();
    assert_eq!(zeros[0].as_ref().unwrap().dims(), vec![2, 1]);
    assert_eq!(f64s(zeros[0].as_ref().unwrap()), vec![0.0, 0.0]);
}

#[test]
fn tensorflows_batch_jacobian_example_shape_and_values() {
    // x [7, 5]; two dense layers with elu (8, then 6 units); the
    // batch_jacobian is [7, 6, 5], each example's block of the full one.
    let key = xlafn::random::key(0).unwrap();
    let x = xlafn::random::normal(&key, &[7, 5], DType::F64, 0.0, 1.0).unwrap();
    let w1 = xlafn::random::normal(
        &xlafn::random::fold_in(&key, &Tensor::scalar(1)).unwrap(),
        &[5, 8],
        DType::F64,
        0.0,
        0.5,
    )
    .unwrap();
    let w2 = xlafn::random::normal(
        &xlafn::random::fold_in(&key, &Tensor::scalar(2)).unwrap(),
        &[8, 6],
        DType::F64,
        0.0,
        0.5,
    )
    .unwrap();
    let tape = GradientTape::persistent();
    tape.watch(&x);
    let y = x
        .matmul(&w1)
        .unwrap()
        .elu()
        .unwrap()
        .matmul(&w2)
        .unwrap()
        .elu()
        .unwrap();
    let batch = tape.batch_jacobian(&y, &x).unwrap().unwrap();
    assert_eq!(batch.dims(), vec![7, 6, 5]);
    let full = f64s(
        &tape
            .jacobian(&y, &[(&x).into()])
            .unwrap()
            .remove(0)
            .unwrap(),
    ); // [7, 6, 7, 5]
    let got = f64s(&batch);
    for b in 0..7 {
        for o in 0..6 {
            for i in 0..5 {
                let want = full[((b * 6 + o) * 7 + b) * 5 + i];
                assert!((got[(b * 6 + o) * 5 + i] - want).abs() < 1e-12);
            }
        }
    }
    let e = tape
        .batch_jacobian(&y, &x.slice(&[0, 0], &[3, 5]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("ValueError") && e.contains("to match"), "{e}");
}

#[test]
fn batch_jacobians_refuse_rank_one_and_give_zeros_when_unconnected() {
    // TensorFlow: "Shape (3,) must have rank at least 2", for the target
    // and for the source.
    let x = Tensor::vector(&[1f64, 2., 3.]).unwrap();
    let rows = Tensor::from_vec(vec![1f64, 2., 3., 4.], &[2, 2]).unwrap();
    let tape = GradientTape::persistent();
    tape.watch(&x);
    tape.watch(&rows);
    let y = x.square().unwrap();
    let e = tape.batch_jacobian(&y, &x).unwrap_err().to_string();
    assert!(
        e.contains("ValueError") && e.contains("rank at least 2"),
        "{e}"
    );
    let e = tape
        .batch_jacobian(&rows.reduce_sum(&[1], true).unwrap(), &x)
        .unwrap_err()
        .to_string();
    assert!(e.contains("source") && e.contains("rank at least 2"), "{e}");
    // Unconnected: zeros of [b, y.., x..], whatever UnconnectedGradients
    // says, in the target's dtype.
    let other = Tensor::zeros(&[2, 3], DType::F64);
    tape.watch(&other);
    let target = rows.exp().unwrap();
    for mode in [UnconnectedGradients::None, UnconnectedGradients::Zero] {
        let j = tape
            .batch_jacobian_with(&target, &other, mode)
            .unwrap()
            .expect("zeros, not None");
        assert_eq!(j.dims(), vec![2, 2, 3]);
        assert!(f64s(&j).iter().all(|&v| v == 0.0));
    }
    let compiled = function(|rows: Tensor, other: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&rows);
        tape.watch(&other);
        let y = rows.exp()?;
        Ok(tape.batch_jacobian(&y, &other)?.unwrap())
    });
    let j = compiled.call((&rows, &other)).unwrap();
    assert_eq!(j.dims(), vec![2, 2, 3]);
    assert!(f64s(&j).iter().all(|&v| v == 0.0));
}

#[test]
fn jvps_match_the_jacobian_times_the_tangent_and_central_differences() {
    let x = x_f64();
    let v = Tensor::from_vec(vec![1f64, -0.5, 0.25, 2.0, 0.0, -1.0], &[2, 3]).unwrap();
    let vs = f64s(&v);
    for (name, f) in families() {
        let (y, dy) = jvp(
            |p| f(&p[0]),
            std::slice::from_ref(&x),
            std::slice::from_ref(&v),
        )
        .unwrap();
        assert_eq!(dy.dims(), y.dims(), "{name}");
        let j = numeric_jacobian(f, &f64s(&x));
        let n_out = j.len() / 6;
        let want: Vec<f64> = (0..n_out)
            .map(|o| (0..6).map(|k| j[o * 6 + k] * vs[k]).sum())
            .collect();
        close(&f64s(&dy), &want, 1e-6);
        // Compiled, f32.
        let compiled = function(move |x: Tensor, v: Tensor| jvp(|p| f(&p[0]), &[x], &[v]));
        let (_, dy32) = compiled
            .call((&x.cast(DType::F32).unwrap(), &v.cast(DType::F32).unwrap()))
            .unwrap();
        close(&f64s(&dy32), &want, 2e-3);
    }
}

#[test]
fn tensorflows_forward_accumulator_examples() {
    // The Hessian-vector product of sum(v ** 3) at [1, 2] along [1, 0].
    let v = Variable::new(Tensor::vector(&[1f32, 2.]).unwrap());
    let acc =
        ForwardAccumulator::new(&[(&v).into()], &[Tensor::vector(&[1f32, 0.]).unwrap()]).unwrap();
    let tape = GradientTape::new();
    let loss = v
        .read()
        .pow(&Tensor::scalar(3f32))
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let backward = tape
        .gradient(&loss, &[(&v).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(
        acc.jvp(&backward)
            .unwrap()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![6., 0.]
    );
    drop(acc);
    // A dense layer's loss along a tangent of its kernel: by hand,
    // d/dk sum((x k + b - t)^2) . dk = sum(2 (x k + b - t) * (x dk)).
    let x = Tensor::from_vec(vec![2f32, 3., 1., 4.], &[2, 2]).unwrap();
    let targets = Tensor::from_vec(vec![1f32, -1.], &[2, 1]).unwrap();
    let kernel = Variable::new(Tensor::from_vec(vec![0.5f32, -0.25], &[2, 1]).unwrap());
    let dk = Tensor::from_vec(vec![1f32, 0.], &[2, 1]).unwrap();
    let acc = ForwardAccumulator::new(&[(&kernel).into()], &[dk]).unwrap();
    let loss = (x.matmul(&kernel.read()).unwrap() - &targets)
        .square()
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let got = acc.jvp(&loss).unwrap().unwrap().item::<f32>().unwrap();
    let r = [2.0 * 0.5 + 3.0 * -0.25 - 1.0, 1.0 * 0.5 + 4.0 * -0.25 + 1.0];
    let want = 2.0 * r[0] * 2.0 + 2.0 * r[1] * 1.0;
    assert!((got - want).abs() < 1e-6, "{got} vs {want}");
    // Unconnected targets: None, or zeros when asked.
    let other = Tensor::vector(&[1f32]).unwrap().exp().unwrap();
    assert!(acc.jvp(&other).unwrap().is_none());
    assert_eq!(
        acc.jvp_with(&other, UnconnectedGradients::Zero)
            .unwrap()
            .unwrap()
            .to_vec::<f32>()
            .unwrap(),
        vec![0.]
    );
    let e = ForwardAccumulator::new(&[(&kernel).into()], &[Tensor::vector(&[1f32]).unwrap()])
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("must match its primal"), "{e}");
}

#[test]
fn hessians_and_hessian_vector_products() {
    // f = sum(x^3) + x0 x1: H = diag(6 x) + [[0, 1], [1, 0]].
    let f = |x: &Tensor| -> Result<Tensor> {
        let cubes = x.pow(&Tensor::scalar(3f64))?.reduce_sum(&[], false)?;
        let x0 = x.slice(&[0], &[1])?;
        let x1 = x.slice(&[1], &[1])?;
        Ok(cubes + (x0 * x1).reduce_sum(&[], false)?)
    };
    let x = Tensor::vector(&[1.5f64, -2.0]).unwrap();
    let want = vec![9.0, 1.0, 1.0, -12.0];
    let h = hessian(f, &x).unwrap();
    assert_eq!(h.dims(), vec![2, 2]);
    close(&f64s(&h), &want, 1e-12);
    let compiled = function(move |x: Tensor| hessian(f, &x));
    close(&f64s(&compiled.call((&x,)).unwrap()), &want, 1e-12);
    let v = Tensor::vector(&[0.5f64, 2.0]).unwrap();
    let hv = hvp(|p| f(&p[0]), std::slice::from_ref(&x), &[v]).unwrap();
    close(&f64s(&hv[0]), &[9.0 * 0.5 + 2.0, 0.5 - 24.0], 1e-12);
}

#[test]
fn hessians_refuse_integer_inputs_and_take_vector_values() {
    let ints = Tensor::vector(&[1i32, 2]).unwrap();
    let e = hessian(|x| x.mul(x)?.reduce_sum(&[], false), &ints)
        .unwrap_err()
        .to_string();
    assert!(e.contains("float or complex") && e.contains("i32"), "{e}");
    // A vector-valued function: jax.hessian's f(x).shape + x.shape +
    // x.shape; for sin, H[i, j, k] = -sin(x_i) where i = j = k.
    let x = Tensor::vector(&[1.5f64, -2.0]).unwrap();
    let mut want = vec![0.0; 8];
    want[0] = -(1.5f64).sin();
    want[7] = -(-2.0f64).sin();
    let h = hessian(|x| x.sin(), &x).unwrap();
    assert_eq!(h.dims(), vec![2, 2, 2]);
    close(&f64s(&h), &want, 1e-12);
    let compiled = function(|x: Tensor| hessian(|x| x.sin(), &x));
    let h = compiled.call((&x,)).unwrap();
    assert_eq!(h.dims(), vec![2, 2, 2]);
    close(&f64s(&h), &want, 1e-12);
    // A matrix value: [2, 2] + [2] + [2], H[a, b, i, j] of x_a x_b x_i
    // products = d²(x_a x_b)/dx_i dx_j = [a=i][b=j] + [a=j][b=i].
    let outer = |x: &Tensor| x.reshape(&[2, 1])?.mul(&x.reshape(&[1, 2])?);
    let h = f64s(
        &function(move |x: Tensor| hessian(outer, &x))
            .call((&x,))
            .unwrap(),
    );
    for a in 0..2 {
        for b in 0..2 {
            for i in 0..2 {
                for j in 0..2 {
                    let want = f64::from(u8::from(a == i && b == j) + u8::from(a == j && b == i));
                    assert_eq!(h[((a * 2 + b) * 2 + i) * 2 + j], want);
                }
            }
        }
    }
    // Tangent errors print both types alike.
    let e = xlafn::autodiff::jvp(|a| a[0].sin(), std::slice::from_ref(&x), &[ints])
        .unwrap_err()
        .to_string();
    assert!(e.contains("primal, f64(2,); got i32(2,)"), "{e}");
}

#[test]
fn per_example_gradients_in_one_program_match_a_host_loop() {
    // DP-SGD's pattern: the gradient of each example's loss, [b, params].
    let x = Tensor::from_vec((0..12).map(|i| (i as f32 - 5.0) / 4.0).collect(), &[4, 3]).unwrap();
    let y = Tensor::vector(&[1f32, -1., 0.5, 2.]).unwrap();
    let w = Tensor::vector(&[0.2f32, -0.4, 0.7]).unwrap();
    let per_example = function(|x: Tensor, y: Tensor, w: Tensor| {
        let tape = GradientTape::new();
        tape.watch(&w);
        let losses = (x.matmul(&w.reshape(&[3, 1])?)?.reshape(&[4])? - y).square()?;
        Ok(tape.jacobian(&losses, &[(&w).into()])?.remove(0).unwrap())
    });
    let grads = per_example.call((&x, &y, &w)).unwrap();
    assert_eq!(grads.dims(), vec![4, 3]);
    let text = per_example
        .lower((&x, &y, &w))
        .unwrap()
        .as_text()
        .to_string();
    assert_eq!(text.matches("stablehlo.while").count(), 1);
    let got = f64s(&grads);
    for b in 0..4 {
        let xb = x.slice(&[b, 0], &[1, 3]).unwrap();
        let tape = GradientTape::new();
        tape.watch(&w);
        let loss = (xb
            .matmul(&w.reshape(&[3, 1]).unwrap())
            .unwrap()
            .reshape(&[])
            .unwrap()
            - y.slice(&[b], &[1]).unwrap().reshape(&[]).unwrap())
        .square()
        .unwrap();
        let g = f64s(
            &tape
                .gradient(&loss, &[(&w).into()])
                .unwrap()
                .remove(0)
                .unwrap(),
        );
        close(&got[b as usize * 3..b as usize * 3 + 3], &g, 1e-6);
    }
}

#[test]
fn output_gradients_weight_the_target() {
    let x = Tensor::vector(&[1f32, 2., 3.]).unwrap();
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x.square().unwrap();
    let weights = Tensor::vector(&[1f32, 0., -1.]).unwrap();
    let g = tape
        .gradient_with(&y, &[(&x).into()], &weights)
        .unwrap()
        .remove(0)
        .unwrap();
    assert_eq!(g.to_vec::<f32>().unwrap(), vec![2., 0., -6.]);
    let tape = GradientTape::new();
    tape.watch(&x);
    let y = x.square().unwrap();
    let e = tape
        .gradient_with(&y, &[(&x).into()], &Tensor::vector(&[1f32]).unwrap())
        .unwrap_err()
        .to_string();
    assert!(e.contains("output_gradients"), "{e}");
}

/// A JVP through a recurrence is one loop carrying the tangent beside the
/// state, with the products a hand-written forward-mode recurrence has
/// (`h W` and, for the tangent, `dh W` and `h V`), and its values.
#[test]
fn a_jvp_through_a_loop_is_the_hand_written_forward_recurrence() {
    let xs = Tensor::from_vec(
        (0..6 * 4 * 8)
            .map(|k| ((k * 7 % 13) as f32 - 6.0) / 7.0)
            .collect(),
        &[6, 4, 8],
    )
    .unwrap();
    let w = Tensor::from_vec(
        (0..64)
            .map(|k| ((k * 5 % 11) as f32 - 5.0) / 20.0)
            .collect(),
        &[8, 8],
    )
    .unwrap();
    let v = Tensor::from_vec(
        (0..64).map(|k| ((k * 3 % 7) as f32 - 3.0) / 3.0).collect(),
        &[8, 8],
    )
    .unwrap();
    let step = |xs: &Tensor, t: Tensor| -> Result<Tensor> {
        xs.dynamic_slice(&[t, Tensor::scalar(0i32), Tensor::scalar(0i32)], &[1, 4, 8])?
            .reshape(&[4, 8])
    };
    let by_jvp = function(move |xs: Tensor, w: Tensor, v: Tensor| {
        let f = |p: &[Tensor]| {
            for_range(0, 6, 1, Tensor::zeros(&[4, 8], DType::F32), |t, h| {
                h.matmul(&p[0])?.add(&step(&xs, t)?)?.tanh()
            })
        };
        Ok(jvp(f, &[w], &[v])?.1)
    });
    let by_hand = function(move |xs: Tensor, w: Tensor, v: Tensor| {
        let z = Tensor::zeros(&[4, 8], DType::F32);
        let (_, dh) = for_range(0, 6, 1, (z.clone(), z), |t, (h, dh): (Tensor, Tensor)| {
            let next = h.matmul(&w)?.add(&step(&xs, t)?)?.tanh()?;
            let pre = dh.matmul(&w)?.add(&h.matmul(&v)?)?;
            let dnext = pre.mul(&next.square()?.neg()?.add_scalar(1.0)?)?;
            Ok::<_, Error>((next, dnext))
        })?;
        Ok(dh)
    });
    let got = f64s(&by_jvp.call((&xs, &w, &v)).unwrap());
    let want = f64s(&by_hand.call((&xs, &w, &v)).unwrap());
    close(&got, &want, 1e-6);
    let text = by_jvp
        .lower((&xs, &w, &v))
        .unwrap()
        .compile()
        .unwrap()
        .as_text()
        .unwrap();
    let count = |pat: &str| text.lines().filter(|l| l.contains(pat)).count();
    assert_eq!(count(" while("), 1, "{text}");
    let dots = text
        .lines()
        .filter(|l| l.contains(" dot(") || (l.contains("custom-call(") && l.contains("cublas")))
        .count();
    assert_eq!(dots, 3, "{text}");
}

/// The transposed VJP compiles to what a forward-mode JVP written by hand
/// needs: for `tanh(tanh(x W1) W2)` along `W1`, four products (`x W1`,
/// `x V`, and each times `W2`); the backward pass's own values are dead
/// code XLA drops.
#[test]
fn a_jvp_compiles_to_the_forward_mode_programs_products() {
    let x = Tensor::zeros(&[8, 16], DType::F32);
    let w1 = Tensor::zeros(&[16, 16], DType::F32);
    let w2 = Tensor::zeros(&[16, 4], DType::F32);
    let f = function(|x: Tensor, w1: Tensor, w2: Tensor, v: Tensor| {
        let mlp = |p: &[Tensor]| x.matmul(&p[0])?.tanh()?.matmul(&w2)?.tanh();
        Ok(jvp(mlp, &[w1], &[v])?.1)
    });
    let compiled = f.lower((&x, &w1, &w2, &w1)).unwrap().compile().unwrap();
    let text = compiled.as_text().unwrap();
    // XLA's own dot on the CPU; a cuBLAS custom call (`__cublas`) on CUDA.
    let dots = text
        .lines()
        .filter(|l| l.contains(" dot(") || (l.contains("custom-call(") && l.contains("cublas")))
        .count();
    assert_eq!(dots, 4, "{text}");
}

#[test]
fn nested_forward_accumulators_follow_tensorflows_nesting() {
    // TensorFlow: an outer accumulator sees an inner one's JVP
    // computation (the second derivative), an inner one does not see the
    // outer's (None).
    let x = Tensor::scalar(2.0f64);
    let one = Tensor::scalar(1.0f64);
    let outer = ForwardAccumulator::new(&[(&x).into()], std::slice::from_ref(&one)).unwrap();
    let inner = ForwardAccumulator::new(&[(&x).into()], std::slice::from_ref(&one)).unwrap();
    let y = x.pow(&Tensor::scalar(3f64)).unwrap();
    let outer_jvp = outer.jvp(&y).unwrap().unwrap();
    assert_eq!(outer_jvp.item::<f64>().unwrap(), 12.0);
    assert!(inner.jvp(&outer_jvp).unwrap().is_none());
    let inner_jvp = inner.jvp(&y).unwrap().unwrap();
    assert_eq!(inner_jvp.item::<f64>().unwrap(), 12.0);
    drop(inner);
    // d/dx (3 x^2) = 6 x = 12.
    assert_eq!(
        outer
            .jvp(&inner_jvp)
            .unwrap()
            .unwrap()
            .item::<f64>()
            .unwrap(),
        12.0
    );
}
