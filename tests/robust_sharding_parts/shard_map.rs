//! `shard_map` and its collectives, for `robust_sharding`: arguments
//! that do not fit are clear errors; empty blocks, partial permutations,
//! integer means and odd bodies give the host's answer.

use super::*;

/// A function running `body` in a shard_map over `mesh` with row-split
/// input and output.
fn rows_map(
    mesh: &Arc<Mesh>,
    body: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Function<(Tensor,), Vec<Tensor>> {
    let mesh = mesh.clone();
    let body = Arc::new(body);
    function(move |x: Tensor| -> Result<Vec<Tensor>> {
        let rows = p(&[Some("data")]);
        let body = body.clone();
        shard_map(
            &mesh,
            std::slice::from_ref(&rows),
            std::slice::from_ref(&rows),
            &[&x],
            move |l| Ok(vec![body(&l[0])?]),
        )
    })
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn shard_map_arguments_that_do_not_fit_are_refused() {
    let m = mesh4();
    let x = ramp(&[8, 2]);
    let call = |in_specs: Vec<PartitionSpec>, out_specs: Vec<PartitionSpec>, outs: usize| {
        let m = m.clone();
        let f = function(move |x: Tensor| -> Result<Vec<Tensor>> {
            shard_map(&m, &in_specs, &out_specs, &[&x], |l| {
                Ok(vec![l[0].clone(); outs])
            })
        });
        err(f.call((&x,)))
    };
    let rows = p(&[Some("data")]);
    has(
        &call(vec![rows.clone(), rows.clone()], vec![rows.clone()], 1),
        &["1 inputs but 2 in_specs"],
    );
    has(
        &call(vec![], vec![rows.clone()], 1),
        &["1 inputs but 0 in_specs"],
    );
    has(
        &call(vec![rows.clone()], vec![rows.clone()], 2),
        &["returned 2 values but 1 out_specs"],
    );
    has(
        &call(vec![rows.clone()], vec![], 1),
        &["returned 1 values but 0 out_specs"],
    );
    has(
        &call(vec![p(&[Some("rows")])], vec![rows.clone()], 1),
        &["no axis \"rows\""],
    );
    has(
        &call(vec![rows.clone()], vec![p(&[Some("rows")])], 1),
        &["no axis \"rows\""],
    );
    has(
        &call(vec![p(&[None, None, Some("data")])], vec![rows.clone()], 1),
        &["rank 2"],
    );
    has(
        &call(vec![rows.clone()], vec![p(&[None, None, Some("data")])], 1),
        &["rank 2"],
    );
    has(
        &call(vec![p(&[None, Some("data")])], vec![rows.clone()], 1),
        &["evenly", "[8, 2]"],
    );
    let twice = PartitionSpec::with_axes(vec![vec!["data".into(), "data".into()]]);
    has(&call(vec![twice], vec![rows.clone()], 1), &["used twice"]);
    // Eagerly, and the collectives outside a body.
    has(
        &err(shard_map(
            &m,
            std::slice::from_ref(&rows),
            std::slice::from_ref(&rows),
            &[&x],
            Ok,
        )),
        &["inside a function"],
    );
    for e in [
        err(psum(&x, "data")),
        err(all_gather(&x, "data", 0)),
        err(axis_index("data")),
        err(ppermute(&x, "data", &[(0, 1)])),
    ] {
        has(&e, &["shard_map body"]);
    }
    has(&err(axis_size("data")), &["inside a shard_map body"]);
    let plain = function(|x: Tensor| psum(&x, "data"));
    has(&err(plain.call((&x,))), &["inside a shard_map body"]);
    // Another mesh than the function's.
    let pair = Mesh::with_devices(xlafn::devices().unwrap()[..2].to_vec(), &[("data", 2)]).unwrap();
    let other = FunctionOptions::new()
        .in_shardings(vec![Some(named(&pair, &[Some("data")]))])
        .build({
            let m = m.clone();
            move |x: Tensor| -> Result<Vec<Tensor>> {
                shard_map(&m, &[p(&[Some("data")])], &[p(&[Some("data")])], &[&x], Ok)
            }
        });
    has(&err(other.call((&x,))), &["another mesh"]);
    // Variables are read outside the body.
    let v = Variable::new(ramp(&[2, 2]));
    let with_var = {
        let m = m.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let v = v.clone();
            shard_map(
                &m,
                &[p(&[Some("data")])],
                &[p(&[Some("data")])],
                &[&x],
                move |l| Ok(vec![l[0].add(&v.read())?]),
            )
        })
    };
    has(&err(with_var.call((&x,))), &["cannot use variables"]);
    // An uneven argument beside it makes the program GSPMD's.
    let uneven = {
        let m = m.clone();
        function(move |x: Tensor, y: Tensor| -> Result<Vec<Tensor>> {
            let out = shard_map(&m, &[p(&[Some("data")])], &[p(&[Some("data")])], &[&x], Ok)?;
            Ok(vec![out[0].clone(), y.exp()?])
        })
    };
    let y = ramp(&[5]).shard(&named(&m, &[Some("data")])).unwrap();
    has(&err(uneven.call((&x, &y))), &["shard_map", "evenly"]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn collective_arguments_that_do_not_fit_are_refused() {
    let m = mesh4();
    let x = ramp(&[8, 8]);
    let e = |body: fn(&Tensor) -> Result<Tensor>| err(rows_map(&m, body).call((&x,)));
    has(&e(|l| psum(l, "model")), &["no axis \"model\""]);
    has(&e(|l| pmax(l, "")), &["no axis \"\""]);
    has(&e(|l| axis_index("model")?.add(l)), &["no axis \"model\""]);
    has(
        &e(|l| all_gather(l, "data", 2)),
        &["dimension 2 is out of range"],
    );
    has(
        &e(|l| all_gather(&l.reduce_sum(&[], false)?, "data", 0)),
        &["out of range"],
    );
    has(
        &e(|l| psum_scatter(l, "data", 0)),
        &["does not split into 4"],
    );
    has(&e(|l| psum_scatter(l, "data", 5)), &["out of range"]);
    has(
        &e(|l| all_to_all(l, "data", 0, 1)),
        &["does not split into 4"],
    );
    has(
        &e(|l| all_to_all(l, "data", 1, 7)),
        &["dimension 7 is out of range"],
    );
    has(
        &e(|l| all_to_all(l, "data", 9, 0)),
        &["dimension 9 is out of range"],
    );
    has(
        &e(|l| ppermute(l, "data", &[(0, 4)])),
        &["(0, 4)", "size 4"],
    );
    has(&e(|l| ppermute(l, "data", &[(-1, 0)])), &["(-1, 0)"]);
    has(
        &e(|l| ppermute(l, "data", &[(i64::MIN, i64::MAX)])),
        &["outside axis"],
    );
    has(
        &e(|l| ppermute(l, "data", &[(0, 1), (2, 1)])),
        &["two values to one device"],
    );
    has(
        &e(|l| ppermute(l, "data", &[(0, 1), (0, 2)])),
        &["sends from device 0 twice"],
    );
    has(
        &e(|l| ppermute(l, "model", &[(0, 1)])),
        &["no axis \"model\""],
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn edge_cases_of_collectives_give_the_host_answer() {
    let m = mesh4();
    let xs: Vec<f32> = (0..8).map(|i| i as f32).collect();
    let x = Tensor::from_vec(xs.clone(), &[8]).unwrap();
    // No pairs: every device receives zeros; a partial ring leaves gaps.
    let none = rows_map(&m, |l| ppermute(l, "data", &[]));
    assert_eq!(
        none.call((&x,)).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![0.; 8]
    );
    let some = rows_map(&m, |l| ppermute(l, "data", &[(3, 0), (1, 1)]));
    assert_eq!(
        some.call((&x,)).unwrap()[0].to_vec::<f32>().unwrap(),
        vec![6., 7., 2., 3., 0., 0., 0., 0.]
    );
    // pmean of integers divides as `div` does (to a float, as JAX's
    // pmean), not by a 1/n that has no integer value.
    let mean = rows_map(&m, |l| pmean(l, "data"));
    // Blocks [1, 4], [7, 10], [13, 16], [19, 22]: sums [40, 52].
    let xi = Tensor::from_vec((0..8).map(|i| i * 3 + 1).collect::<Vec<i32>>(), &[8]).unwrap();
    for x in [
        xi,
        Tensor::from_vec((0..8).map(|i| i * 3 + 1).collect::<Vec<u8>>(), &[8]).unwrap(),
    ] {
        let got = mean.call((&x,)).unwrap().remove(0);
        assert!(got.dtype().is_inexact(), "{}", got.dtype());
        assert_eq!(got.to_f64_vec().unwrap(), [10., 13.].repeat(4));
    }
    // An empty block on every device.
    for body in [
        |l: &Tensor| all_gather(&l.exp()?, "data", 0)?.slice(&[0, 0], &[0, 2]),
        |l: &Tensor| psum(l, "data"),
        |l: &Tensor| ppermute(l, "data", &[(0, 1)]),
        |l: &Tensor| all_to_all(&l.tile(&[1, 2])?, "data", 1, 0)?.tile(&[1, 2]),
    ] {
        let out = rows_map(&m, body).call((&ramp(&[0, 2]),)).unwrap();
        assert_eq!(out[0].dims(), vec![0, 2]);
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn shard_maps_inside_shard_maps_are_refused() {
    let m = mesh4();
    let f = {
        let m = m.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let rows = p(&[Some("data")]);
            let inner_mesh = m.clone();
            shard_map(
                &m,
                std::slice::from_ref(&rows),
                std::slice::from_ref(&rows),
                &[&x],
                move |l| {
                    let r = p(&[None]);
                    shard_map(
                        &inner_mesh,
                        std::slice::from_ref(&r),
                        std::slice::from_ref(&r),
                        &[&l[0]],
                        Ok,
                    )
                },
            )
        })
    };
    has(&err(f.call((&ramp(&[8]),))), &["shard_map", "inside"]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn odd_shard_map_bodies_are_errors_or_right() {
    let m = mesh4();
    // No inputs: each device's index, gathered.
    let f = {
        let m = m.clone();
        function(move |_x: Tensor| -> Result<Vec<Tensor>> {
            shard_map(&m, &[], &[p(&[Some("data")])], &[], |_| {
                Ok(vec![axis_index("data")?.reshape(&[1])?])
            })
        })
    };
    let out = f.call((&ramp(&[1]),)).unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 1, 2, 3]);
    // No outputs.
    let g = {
        let m = m.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let out = shard_map(&m, &[p(&[Some("data")])], &[], &[&x], |_| Ok(vec![]))?;
            assert!(out.is_empty());
            Ok(vec![x.exp()?])
        })
    };
    let out = g.call((&ramp(&[4]),)).unwrap();
    close(
        &out[0].to_vec::<f32>().unwrap(),
        &ramp(&[4]).exp().unwrap().to_vec::<f32>().unwrap(),
    );
    // Reductions of booleans are refused as reduce_sum refuses them (XLA
    // would add them modulo 2); complex numbers sum but have no maximum.
    let b = Tensor::from_vec(vec![false, true, true, false], &[4]).unwrap();
    for (name, e) in [
        ("psum", err(rows_map(&m, |l| psum(l, "data")).call((&b,)))),
        ("pmax", err(rows_map(&m, |l| pmax(l, "data")).call((&b,)))),
        (
            "psum_scatter",
            err(rows_map(&m, |l| {
                psum_scatter(&l.reshape(&[1, 1])?.tile(&[4, 1])?, "data", 0)
            })
            .call((&b,))),
        ),
    ] {
        has(&e, &[name, "numeric", "bool"]);
    }
    let gathered = rows_map(&m, |l| all_gather(l, "data", 0)?.slice(&[1], &[1]));
    assert_eq!(
        gathered.call((&b,)).unwrap()[0].to_vec::<bool>().unwrap(),
        vec![true; 4]
    );
    let c: Vec<Complex32> = (0..4).map(|i| Complex32::new(i as f32, 1.0)).collect();
    let c = Tensor::from_vec(c, &[4]).unwrap();
    let sum = rows_map(&m, |l| psum(l, "data"));
    assert_eq!(
        sum.call((&c,)).unwrap()[0].to_vec::<Complex32>().unwrap(),
        vec![Complex32::new(6.0, 4.0); 4]
    );
    has(
        &err(rows_map(&m, |l| pmin(l, "data")).call((&c,))),
        &["pmin", "complex"],
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn two_meshes_of_the_same_axes_in_one_function_are_refused() {
    let four = xlafn::devices().unwrap();
    let a = Mesh::with_devices(four[..2].to_vec(), &[("data", 2)]).unwrap();
    let b = Mesh::with_devices(four[2..].to_vec(), &[("data", 2)]).unwrap();
    let f = function(move |x: Tensor| -> Result<Tensor> {
        let r = p(&[Some("data")]);
        let y = shard_map(
            &a,
            std::slice::from_ref(&r),
            std::slice::from_ref(&r),
            &[&x],
            Ok,
        )?;
        let z = shard_map(
            &b,
            std::slice::from_ref(&r),
            std::slice::from_ref(&r),
            &[&y[0]],
            Ok,
        )?;
        Ok(z[0].clone())
    });
    has(&err(f.call((&ramp(&[4]),))), &["another mesh"]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn meshes_of_many_axes_name_xla_result_layouts_quickly() {
    in_child("shard_map_cases::child_many_axes", &[]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn child_many_axes() {
    if !child::is_child("shard_map_cases::child_many_axes") {
        return;
    }
    // Size-1 axes change no layout, but a search over every spec of them
    // would never end.
    let axes: Vec<(String, usize)> = (0..12)
        .map(|i| (format!("a{i}"), 1))
        .chain([("data".to_string(), 2), ("model".to_string(), 2)])
        .collect();
    let axes: Vec<(&str, usize)> = axes.iter().map(|(n, s)| (n.as_str(), *s)).collect();
    let m = Mesh::new(&axes).unwrap();
    let s = named(&m, &[Some("data"), None, Some("model")]);
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(s.clone())])
        .build(|x: Tensor| x.exp()?.transpose(&[2, 0, 1]));
    let x = ramp(&[4, 3, 2]).mul_scalar(0.1).unwrap();
    let y = f.call((&x,)).unwrap();
    let want = function(|x: Tensor| x.exp()?.transpose(&[2, 0, 1]))
        .call((&x,))
        .unwrap();
    close(&y.to_vec::<f32>().unwrap(), &want.to_vec::<f32>().unwrap());
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_sharded_tensor_captured_by_a_function_runs_it_over_its_mesh() {
    // As jax.jit closing over a sharded array: the call runs over the
    // captured value's mesh, with the value as it is laid out.
    let m = mesh4();
    let c = ramp(&[8]);
    let captured = c.shard(&named(&m, &[Some("data")])).unwrap();
    let f = {
        let captured = captured.clone();
        function(move |x: Tensor| x.mul_scalar(2.0)?.add(&captured))
    };
    let x = ramp(&[8]).mul_scalar(0.5).unwrap();
    let want: Vec<f32> = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .zip(c.to_vec::<f32>().unwrap())
        .map(|(x, c)| 2.0 * x + c)
        .collect();
    for _ in 0..2 {
        let y = f.call((&x,)).unwrap();
        assert!(y.is_sharded());
        assert_eq!(y.to_vec::<f32>().unwrap(), want);
    }
    assert_eq!(f.tracing_count(), 1);
    // Through a nested function, whose capture the outer trace takes over.
    let inner = f.clone();
    let outer = function(move |x: Tensor| inner.call((x.add_scalar(1.0)?,)));
    let y = outer.call((&x,)).unwrap();
    let shifted: Vec<f32> = want.iter().map(|w| w + 2.0).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), shifted);
    // An argument on another mesh is refused, naming the meshes.
    let four = xlafn::devices().unwrap();
    let reversed =
        Mesh::with_devices(four.iter().rev().copied().collect(), &[("data", 4)]).unwrap();
    let x_elsewhere = x.shard(&named(&reversed, &[Some("data")])).unwrap();
    has(
        &err(f.call((&x_elsewhere,))),
        &["a captured tensor is on another mesh than argument 0"],
    );
    // An export saves the captured value whole.
    let scratch = super::scratch::scratch_dir("sharded-capture");
    let cf = f.get_concrete_function((&x,)).unwrap();
    cf.export(&*scratch, &[]).unwrap();
    let loaded = xlafn::load(&*scratch).unwrap();
    let got = loaded.call(&[&x]).unwrap().remove(0);
    assert_eq!(got.to_vec::<f32>().unwrap(), want);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn an_uneven_constraint_under_shardy_keeps_the_values() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    let cols = named(&m, &[None, Some("data")]);
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(rows)])
        .build(move |x: Tensor| x.exp()?.with_sharding_constraint(&cols)?.mul_scalar(2.0));
    let x = ramp(&[8, 3]).mul_scalar(0.1).unwrap();
    let want = function(|x: Tensor| x.exp()?.mul_scalar(2.0))
        .call((&x,))
        .unwrap();
    close(
        &f.call((&x,)).unwrap().to_vec::<f32>().unwrap(),
        &want.to_vec::<f32>().unwrap(),
    );
    // An uneven out_sharding of an evenly split input.
    let g = FunctionOptions::new()
        .in_shardings(vec![Some(named(&m, &[Some("data")]))])
        .out_shardings(vec![Some(named(&m, &[None, Some("data")]))])
        .build(|x: Tensor| x.exp());
    let y = g.call((&x,)).unwrap();
    assert_eq!(y.sharding().unwrap().spec().to_string(), "P(None, 'data')");
    assert_eq!(y.addressable_shards().unwrap()[3].dims(), vec![8, 0]);
    close(
        &y.to_vec::<f32>().unwrap(),
        &x.exp().unwrap().to_vec::<f32>().unwrap(),
    );
}
