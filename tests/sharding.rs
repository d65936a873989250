//! Meshes, shardings and sharded functions: tensors
//! put onto a sharding and gathered back (uneven ones too), functions
//! partitioned by XLA's Shardy partitioner over the CPU plugin's 4
//! devices, checked against the same function on one device.

#[path = "common/captured.rs"]
mod captured;
#[path = "common/scratch.rs"]
mod scratch;

use std::sync::Arc;
use xlafn::prelude::*;
use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};

fn mesh_2x2() -> Arc<Mesh> {
    Mesh::new(&[("data", 2), ("model", 2)]).unwrap()
}

fn sharding(mesh: &Arc<Mesh>, dims: &[Option<&str>]) -> NamedSharding {
    NamedSharding::new(mesh, PartitionSpec::new(dims.iter().copied())).unwrap()
}

fn ramp(dims: &[i64], scale: f32) -> Tensor {
    let n: i64 = dims.iter().product();
    let values: Vec<f32> = (0..n)
        .map(|i| ((i * 7 % 11) as f32 - 5.0) * scale)
        .collect();
    Tensor::from_vec(values, dims).unwrap()
}

fn assert_close(got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn tensors_round_trip_through_even_and_uneven_shardings() {
    let mesh = mesh_2x2();
    for dims in [[4i64, 6], [5, 3], [1, 7], [3, 1]] {
        let x = ramp(&dims, 1.0);
        let want = x.to_vec::<f32>().unwrap();
        for spec in [
            [Some("data"), Some("model")],
            [Some("model"), None],
            [None, Some("data")],
            [None, None],
        ] {
            let s = sharding(&mesh, &spec);
            let sharded = x.shard(&s).unwrap();
            assert!(sharded.is_sharded());
            assert_eq!(sharded.dims(), dims.to_vec());
            assert_eq!(sharded.sharding(), Some(s.clone()));
            assert_eq!(sharded.to_vec::<f32>().unwrap(), want, "{dims:?} {s}");
            assert_eq!(sharded.unshard().unwrap().to_vec::<f32>().unwrap(), want);
            // Every element sits in the block the spec puts it in.
            let shards = sharded.addressable_shards().unwrap();
            assert_eq!(shards.len(), 4);
            for (p, shard) in shards.iter().enumerate() {
                assert_eq!(shard.device().unwrap(), mesh.devices()[p]);
                let origin = s.shard_origin(p, &dims);
                let got = shard.to_vec::<f32>().unwrap();
                let sd = shard.dims();
                for r in 0..sd[0] {
                    for c in 0..sd[1] {
                        let g = ((origin[0] + r) * dims[1] + origin[1] + c) as usize;
                        assert_eq!(got[(r * sd[1] + c) as usize], want[g]);
                    }
                }
            }
        }
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn eager_ops_on_sharded_tensors_run_partitioned_and_match_one_device() {
    // As JAX runs `x * 2` on a sharded array: a one-op program over the
    // mesh, whose result stays sharded.
    let mesh = mesh_2x2();
    let rows = sharding(&mesh, &[Some("data")]);
    let (x0, w, b) = (ramp(&[4, 6], 0.1), ramp(&[6, 3], 0.2), ramp(&[3], 1.0));
    let x = x0.shard(&rows).unwrap();
    let eager = |x: &Tensor| -> Result<Tensor> { x.mul_scalar(2.0)?.matmul(&w)?.add(&b)?.tanh() };
    let got = eager(&x).unwrap();
    assert!(got.is_sharded());
    assert_close(
        &got.to_vec::<f32>().unwrap(),
        &eager(&x0).unwrap().to_vec::<f32>().unwrap(),
        1e-6,
    );
    let total = x.reduce_sum(&[], false).unwrap();
    assert_close(
        &total.to_vec::<f32>().unwrap(),
        &x0.reduce_sum(&[], false).unwrap().to_vec::<f32>().unwrap(),
        1e-6,
    );
    // A tape records the op; its gradient runs on the sharded values too.
    let tape = GradientTape::new();
    tape.watch(&x);
    let loss = x.square().unwrap().reduce_sum(&[], false).unwrap();
    let g = tape
        .gradient(&loss, &[(&x).into()])
        .unwrap()
        .remove(0)
        .unwrap();
    let want: Vec<f32> = x0
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| 2.0 * v)
        .collect();
    assert_close(&g.to_vec::<f32>().unwrap(), &want, 1e-6);
    // Shape errors are the op's own.
    let e = x.matmul(&b).unwrap_err().to_string();
    assert!(e.contains("matmul"), "{e}");
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_data_parallel_matmul_matches_one_device_with_the_sharding_xla_chose() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    let f = |x: Tensor, w: Tensor| x.matmul(&w)?.tanh();
    let sharded = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(f);
    let single = function(f);
    let x = ramp(&[8, 5], 0.1);
    let w = ramp(&[5, 3], 0.2);
    let y = sharded.call((&x, &w)).unwrap();
    let want = single.call((&x, &w)).unwrap().to_vec::<f32>().unwrap();
    assert_close(&y.to_vec::<f32>().unwrap(), &want, 1e-6);
    // Rows stay split: XLA propagated the batch sharding to the result.
    assert_eq!(y.sharding(), Some(rows.clone()));
    // A sharded argument needs no options; the result feeds another call.
    let plain = function(f);
    let z = plain
        .call((&y.shard(&rows).unwrap(), &ramp(&[3, 3], 0.3)))
        .unwrap();
    assert!(z.is_sharded());
    let want_z = single
        .call((
            &Tensor::from_vec(want, &[8, 3]).unwrap(),
            &ramp(&[3, 3], 0.3),
        ))
        .unwrap();
    assert_close(
        &z.to_vec::<f32>().unwrap(),
        &want_z.to_vec::<f32>().unwrap(),
        1e-5,
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_model_parallel_mlp_on_a_2x2_mesh_matches_one_device() {
    let mesh = mesh_2x2();
    let mlp = |x: Tensor, w1: Tensor, w2: Tensor| {
        let h = x.matmul(&w1)?.relu()?;
        h.matmul(&w2)
    };
    let sharded = FunctionOptions::new()
        .in_shardings(vec![
            Some(sharding(&mesh, &[Some("data"), None])),
            Some(sharding(&mesh, &[None, Some("model")])),
            Some(sharding(&mesh, &[Some("model"), None])),
        ])
        .out_shardings(vec![Some(sharding(&mesh, &[Some("data"), None]))])
        .build(mlp);
    let (x, w1, w2) = (ramp(&[8, 6], 0.1), ramp(&[6, 8], 0.2), ramp(&[8, 3], 0.3));
    let y = sharded.call((&x, &w1, &w2)).unwrap();
    let want = function(mlp).call((&x, &w1, &w2)).unwrap();
    assert_close(
        &y.to_vec::<f32>().unwrap(),
        &want.to_vec::<f32>().unwrap(),
        1e-5,
    );
    assert_eq!(y.sharding().unwrap().spec().to_string(), "P('data')");
    // The hidden layer is split over `model`: its second matmul sums the
    // model shards with an all-reduce XLA inserted.
    let programs = sharded.concrete_functions()[0].sharded_executables();
    assert_eq!(programs.len(), 1);
    let optimized = programs[0].optimized().unwrap();
    assert!(
        optimized.count("all-reduce") >= 1,
        "{:?}",
        optimized.opcodes
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_new_sharding_recompiles_without_retracing() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let f = function(|x: Tensor| x.square()?.reduce_sum(&[0], false));
    let x = ramp(&[8, 4], 1.0);
    let want = f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
    let by_rows = x.shard(&sharding(&mesh, &[Some("data")])).unwrap();
    let by_cols = x.shard(&sharding(&mesh, &[None, Some("data")])).unwrap();
    for t in [&by_rows, &by_cols, &by_rows] {
        let got = f.call((t,)).unwrap();
        assert_eq!(got.to_vec::<f32>().unwrap(), want);
    }
    assert_eq!(f.tracing_count(), 1);
    // One device, then one compile per input sharding.
    assert_eq!(f.compile_count(), 3);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn uneven_shards_are_padded_and_stripped_through_a_function() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    // 10 rows over 4 devices: blocks of 3, the last holding one row.
    let f = |x: Tensor| -> Result<(Tensor, Tensor, Tensor)> {
        Ok((
            x.exp()?,
            x.reduce_sum(&[0], false)?,
            x.reduce_max(&[], false)?,
        ))
    };
    let x = ramp(&[10, 3], 0.5);
    let sharded = FunctionOptions::new()
        .in_shardings(vec![Some(rows)])
        .build(f);
    let (e, s, m) = sharded.call((&x,)).unwrap();
    let (we, ws, wm) = function(f).call((&x,)).unwrap();
    assert_eq!(e.dims(), vec![10, 3]);
    assert_close(
        &e.to_vec::<f32>().unwrap(),
        &we.to_vec::<f32>().unwrap(),
        1e-6,
    );
    assert_close(
        &s.to_vec::<f32>().unwrap(),
        &ws.to_vec::<f32>().unwrap(),
        1e-6,
    );
    assert_eq!(m.to_vec::<f32>().unwrap(), wm.to_vec::<f32>().unwrap());
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn replicated_outputs_and_mesh_errors() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let other =
        Mesh::with_devices(xlafn::devices().unwrap()[..2].to_vec(), &[("data", 2)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .out_shardings(vec![Some(NamedSharding::replicated(&mesh))])
        .build(|x: Tensor| x.mul_scalar(3.0));
    let y = f.call((&ramp(&[4, 2], 1.0),)).unwrap();
    assert!(y.sharding().unwrap().is_replicated());
    assert_eq!(
        y.to_vec::<f32>().unwrap(),
        ramp(&[4, 2], 3.0).to_vec::<f32>().unwrap()
    );
    let z = ramp(&[4, 2], 1.0)
        .shard(&sharding(&other, &[Some("data")]))
        .unwrap();
    let e = f.call((&z,)).unwrap_err().to_string();
    assert!(e.contains("another mesh"), "{e}");
    let too_long = FunctionOptions::new()
        .in_shardings(vec![Some(sharding(&mesh, &[None, None, Some("data")]))])
        .build(|x: Tensor| x.exp());
    let e = too_long
        .call((&ramp(&[4, 2], 1.0),))
        .unwrap_err()
        .to_string();
    assert!(e.contains("rank 2"), "{e}");
    let too_many = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone()), None])
        .build(|x: Tensor| x.exp());
    let e = too_many
        .call((&ramp(&[4, 2], 1.0),))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("takes 1 tensor arguments, but in_shardings lists 2"),
        "{e}"
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn gradients_inside_a_sharded_function_match_one_device() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    let grad = |x: Tensor, y: Tensor, w: Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(&w);
        let loss = x.matmul(&w)?.sub(&y)?.square()?.reduce_mean(&[], false)?;
        let g = tape
            .gradient(&loss, &[(&w).into()])?
            .remove(0)
            .expect("w is watched");
        Ok((loss, g))
    };
    let sharded = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone()), Some(rows)])
        .build(grad);
    let (x, y, w) = (ramp(&[16, 5], 0.1), ramp(&[16, 2], 0.2), ramp(&[5, 2], 0.3));
    let (loss, g) = sharded.call((&x, &y, &w)).unwrap();
    let (want_loss, want_g) = function(grad).call((&x, &y, &w)).unwrap();
    assert_close(
        &loss.to_vec::<f32>().unwrap(),
        &want_loss.to_vec::<f32>().unwrap(),
        1e-6,
    );
    assert_close(
        &g.to_vec::<f32>().unwrap(),
        &want_g.to_vec::<f32>().unwrap(),
        1e-6,
    );
    assert!(g.sharding().unwrap().is_replicated());
    // The per-device partial gradients are summed by an all-reduce.
    let programs = sharded.concrete_functions()[0].sharded_executables();
    let optimized = programs[0].optimized().unwrap();
    assert!(
        optimized.count("all-reduce") >= 1,
        "{:?}",
        optimized.opcodes
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn sharded_variables_are_updated_per_shard_and_keep_their_sharding() {
    let mesh = mesh_2x2();
    let cols = sharding(&mesh, &[None, Some("model")]);
    let rows = sharding(&mesh, &[Some("data")]);
    let w0 = ramp(&[4, 6], 0.1);
    let w = Variable::new(w0.shard(&cols).unwrap());
    let single = Variable::new(w0.clone());
    let step = |w: Variable, x: Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        let loss = x.matmul(&w.read())?.square()?.reduce_mean(&[], false)?;
        let g = tape
            .gradient(&loss, &[(&w).into()])?
            .remove(0)
            .expect("w is watched");
        w.assign_sub(&g.mul_scalar(0.5)?)?;
        Ok(loss)
    };
    let sharded_step = function(step);
    let single_step = function(step);
    let x = ramp(&[8, 4], 0.2);
    let xs = x.shard(&rows).unwrap();
    for _ in 0..3 {
        let l = sharded_step.call((w.clone(), &xs)).unwrap();
        let want = single_step.call((single.clone(), &x)).unwrap();
        assert_close(
            &l.to_vec::<f32>().unwrap(),
            &want.to_vec::<f32>().unwrap(),
            1e-5,
        );
    }
    assert_eq!(w.read().sharding(), Some(cols));
    assert_close(
        &w.read().to_vec::<f32>().unwrap(),
        &single.read().to_vec::<f32>().unwrap(),
        1e-5,
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_sharding_constraint_inside_vmap_constrains_every_example() {
    // One example is a row of 8; its constraint splits the row over the
    // mesh. Batched, the examples' axis is replicated and the row keeps
    // its split: one program, no loop over the examples.
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let row_split = sharding(&mesh, &[Some("data")]);
    let body = move |x: Tensor| {
        let row_split = row_split.clone();
        xlafn::vmap(
            move |a: &[Tensor]| {
                Ok(vec![
                    a[0].exp()?.with_sharding_constraint(&row_split)?.sin()?,
                ])
            },
            &[x],
        )
    };
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(NamedSharding::replicated(&mesh))])
        .build(body.clone());
    let x = ramp(&[3, 8], 0.1);
    let y = f.call((&x,)).unwrap();
    let want = x.exp().unwrap().sin().unwrap();
    assert_close(
        &y[0].to_vec::<f32>().unwrap(),
        &want.to_vec::<f32>().unwrap(),
        1e-6,
    );
    let text = f.lower((&x,)).unwrap().as_text().to_string();
    assert!(!text.contains("stablehlo.while"), "{text}");
    let program = f.concrete_functions()[0].sharded_executables()[0]
        .optimized()
        .unwrap();
    // Each device takes its part of every row (the batch axis whole).
    assert!(
        program.count("dynamic-slice") >= 1 && program.count("partition-id") >= 1,
        "the rows were never split: {:?}",
        program.opcodes
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_sharding_constraint_moves_an_intermediate_and_keeps_the_values() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    let whole = NamedSharding::replicated(&mesh);
    let body = {
        let whole = whole.clone();
        move |x: Tensor| x.exp()?.with_sharding_constraint(&whole)?.mul_scalar(2.0)
    };
    // Even rows go through Shardy, uneven ones through GSPMD.
    for n in [8, 10] {
        let f = FunctionOptions::new()
            .in_shardings(vec![Some(rows.clone())])
            .build(body.clone());
        let x = ramp(&[n, 3], 0.1);
        let y = f.call((&x,)).unwrap();
        let want = function(body.clone()).call((&x,)).unwrap();
        assert_close(
            &y.to_vec::<f32>().unwrap(),
            &want.to_vec::<f32>().unwrap(),
            1e-6,
        );
        let program = f.concrete_functions()[0].sharded_executables()[0]
            .optimized()
            .unwrap();
        assert!(
            program.count("all-gather") + program.count("all-reduce") >= 1,
            "n={n}: the rows were never gathered: {:?}",
            program.opcodes
        );
    }
    // A constraint on another mesh is refused with both meshes named.
    let other = mesh_2x2();
    let wrong = NamedSharding::replicated(&other);
    let f = FunctionOptions::new()
        .in_shardings(vec![Some(rows)])
        .build(move |x: Tensor| x.with_sharding_constraint(&wrong));
    let e = f.call((&ramp(&[8, 3], 1.0),)).unwrap_err().to_string();
    assert!(e.contains("\"model\"") && e.contains("\"data\""), "{e}");
    // Eagerly it lays the tensor out; in a one-device function it is a no-op.
    let eager = ramp(&[8, 3], 1.0).with_sharding_constraint(&whole).unwrap();
    assert!(eager.sharding().unwrap().is_replicated());
    let plain = function(move |x: Tensor| x.with_sharding_constraint(&whole)?.exp());
    let got = plain.call((&ramp(&[2, 2], 1.0),)).unwrap();
    assert!(!got.is_sharded());
}

/// A variable keeps where it lives through `assign` and
/// `checkpoint::restore` (as a `tf.Variable` keeps its device): a value
/// with no placement of its own takes the variable's sharding or device;
/// an explicitly placed one keeps its own.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn restore_and_assign_keep_a_variables_sharding_and_device() {
    let mesh = mesh_2x2();
    let cols = sharding(&mesh, &[None, Some("model")]);
    let third = xlafn::devices().unwrap()[2];
    let w0 = ramp(&[4, 6], 0.5);
    let b0 = ramp(&[3], 1.0);
    let w = Variable::new(w0.shard(&cols).unwrap());
    let b = Variable::new(b0.to_device(third).unwrap());
    let model = vec![w.clone(), b.clone()];
    let scratch = scratch::scratch_dir("sharded-checkpoint");
    let path = scratch.join("model.safetensors");
    xlafn::checkpoint::save(&model, &path).unwrap();

    let w1 = ramp(&[4, 6], -1.0);
    w.assign(&w1).unwrap();
    b.assign(&ramp(&[3], 2.0)).unwrap();
    assert_eq!(w.read().sharding(), Some(cols.clone()));
    assert_eq!(
        w.read().to_vec::<f32>().unwrap(),
        w1.to_vec::<f32>().unwrap()
    );
    assert_eq!(
        (b.read().device().unwrap(), b.read().is_committed()),
        (third, true)
    );

    xlafn::checkpoint::restore(&model, &path).unwrap();
    assert_eq!(w.read().sharding(), Some(cols));
    assert_eq!(
        w.read().to_vec::<f32>().unwrap(),
        w0.to_vec::<f32>().unwrap()
    );
    assert_eq!(b.read().device().unwrap(), third);
    assert_eq!(
        b.read().to_vec::<f32>().unwrap(),
        b0.to_vec::<f32>().unwrap()
    );

    let rows = sharding(&mesh, &[Some("data"), None]);
    w.assign(&w1.shard(&rows).unwrap()).unwrap();
    assert_eq!(w.read().sharding(), Some(rows));
    let first = xlafn::devices().unwrap()[1];
    b.assign(&b0.to_device(first).unwrap()).unwrap();
    assert_eq!(b.read().device().unwrap(), first);
}

/// `shard` of a sharded tensor onto another sharding of its mesh (a
/// compiled resharding program, see `sharding/reshard.rs`): every pair of
/// four layouts, even and uneven, keeps every element in its block. The
/// same sharding gives the value back; inside a trace and under a tape
/// the placement still runs eagerly.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn resharding_between_layouts_of_one_mesh_keeps_every_block() {
    let mesh = mesh_2x2();
    let specs: [[Option<&str>; 2]; 4] = [
        [Some("data"), Some("model")],
        [Some("model"), None],
        [None, Some("data")],
        [None, None],
    ];
    for dims in [[4i64, 6], [5, 3]] {
        let x = ramp(&dims, 1.0);
        let want = x.to_vec::<f32>().unwrap();
        for from in &specs {
            let a = x.shard(&sharding(&mesh, from)).unwrap();
            for to in &specs {
                let s = sharding(&mesh, to);
                let b = a.shard(&s).unwrap();
                assert_eq!(b.sharding(), Some(s.clone()));
                assert_eq!(
                    b.to_vec::<f32>().unwrap(),
                    want,
                    "{dims:?} {from:?} -> {to:?}"
                );
                for (p, shard) in b.addressable_shards().unwrap().iter().enumerate() {
                    let origin = s.shard_origin(p, &dims);
                    let got = shard.to_vec::<f32>().unwrap();
                    let sd = shard.dims();
                    for r in 0..sd[0] {
                        for c in 0..sd[1] {
                            let g = ((origin[0] + r) * dims[1] + origin[1] + c) as usize;
                            assert_eq!(got[(r * sd[1] + c) as usize], want[g]);
                        }
                    }
                }
            }
        }
    }
    let rows = sharding(&mesh, &[Some("data"), None]);
    let cols = sharding(&mesh, &[None, Some("model")]);
    let a = ramp(&[4, 6], 1.0).shard(&rows).unwrap();
    let same = a.shard(&rows).unwrap();
    assert_eq!(
        same.addressable_shards().unwrap()[1]
            .to_vec::<f32>()
            .unwrap(),
        a.addressable_shards().unwrap()[1].to_vec::<f32>().unwrap()
    );
    // Under a tape, and inside a trace on an eager value.
    let tape = GradientTape::new();
    let b = a.shard(&cols).unwrap();
    drop(tape);
    assert_eq!(b.sharding(), Some(cols.clone()));
    let placed = Arc::new(std::sync::Mutex::new(None));
    let f = {
        let (placed, a, cols) = (placed.clone(), a.clone(), cols.clone());
        function(move |x: Tensor| -> Result<Tensor> {
            *placed.lock().unwrap() = Some(a.shard(&cols)?);
            x.add_scalar(1.0)
        })
    };
    f.call((Tensor::scalar(1f32),)).unwrap();
    let inside = placed.lock().unwrap().take().unwrap();
    assert_eq!(inside.sharding(), Some(cols));
    assert_eq!(inside.to_vec::<f32>().unwrap(), a.to_vec::<f32>().unwrap());
}

/// A sharded tensor prints its whole value, as the same tensor on one
/// device does (`print(jax_array)` gathers it too).
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_sharded_tensor_prints_its_whole_value() {
    let mesh = mesh_2x2();
    let x = ramp(&[5, 3], 1.0);
    let sharded = x
        .shard(&sharding(&mesh, &[Some("data"), Some("model")]))
        .unwrap();
    assert_eq!(sharded.to_string(), x.to_string());
    assert!(x.to_string().starts_with("tf.Tensor(\n[[-5."), "{x}");
}

/// Host callbacks in partitioned programs, as JAX's: `print` and
/// `host_callback` in a sharded function run once, on the first device,
/// with the whole value (through GSPMD, even and uneven splits); in a
/// `shard_map` body each device prints its own block.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn print_and_host_callbacks_run_in_partitioned_functions() {
    use xlafn::runtime::HostArray;
    use xlafn::sharding::{psum, shard_map};
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let rows = sharding(&mesh, &[Some("data")]);
    let out = captured::Captured::default();
    let f = function(|x: Tensor| -> Result<Tensor> {
        xlafn::print("x:", &[&x])?;
        x.mul_scalar(2.0)
    });
    for n in [8, 10] {
        let values: Vec<f32> = (1..=n).map(|i| i as f32).collect();
        let x = Tensor::from_vec(values.clone(), &[n as i64])
            .unwrap()
            .shard(&rows)
            .unwrap();
        let y = xlafn::with_print_output(out.clone(), || f.call((&x,))).unwrap();
        let doubled: Vec<f32> = values.iter().map(|v| v * 2.0).collect();
        assert_eq!(y.to_vec::<f32>().unwrap(), doubled);
        let want = format!(
            "x: {}\n",
            Tensor::vector(&values)
                .unwrap()
                .to_string()
                .trim_start_matches("tf.Tensor(")
                .split(", shape=")
                .next()
                .unwrap()
        );
        assert_eq!(out.take(), want);
    }
    // A callback with a result: called once, with the whole array.
    let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let g = {
        let calls = calls.clone();
        function(move |x: Tensor| -> Result<Tensor> {
            let spec = xlafn::ArraySpec::new(DType::F32, &[8]);
            let calls = calls.clone();
            let r = host_callback(&[&x], &[spec], move |a| {
                calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let v: Vec<f32> = xlafn::runtime::element::from_bytes(&a[0].bytes);
                Ok(vec![HostArray::from_vec(
                    v.iter().map(|v| v * v).collect::<Vec<f32>>(),
                    &[8],
                )])
            })?;
            r[0].add(&x)
        })
    };
    let values: Vec<f32> = (1..=8).map(|i| i as f32).collect();
    let x = Tensor::from_vec(values.clone(), &[8])
        .unwrap()
        .shard(&rows)
        .unwrap();
    let y = g.call((&x,)).unwrap();
    let want: Vec<f32> = values.iter().map(|v| v * v + v).collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    assert_eq!(calls.load(std::sync::atomic::Ordering::SeqCst), 1);
    // Per device inside shard_map.
    let h = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let split = PartitionSpec::new([Some("data")]);
            shard_map(
                &mesh,
                &[split],
                &[PartitionSpec::replicated()],
                &[&x],
                |l| {
                    xlafn::print("block:", &[&l[0]])?;
                    Ok(vec![psum(&l[0].reduce_sum(&[], false)?, "data")?])
                },
            )
        })
    };
    let total = xlafn::with_print_output(out.clone(), || h.call((&x,))).unwrap();
    assert_eq!(total[0].to_vec::<f32>().unwrap(), vec![36.]);
    let mut lines: Vec<String> = out.take().lines().map(String::from).collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            "block: [1. 2.]",
            "block: [3. 4.]",
            "block: [5. 6.]",
            "block: [7. 8.]"
        ]
    );
    // A shard_map and a print outside it cannot be partitioned together.
    let both = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            xlafn::print("outside:", &[&x])?;
            let split = PartitionSpec::new([Some("data")]);
            shard_map(
                &mesh,
                std::slice::from_ref(&split),
                std::slice::from_ref(&split),
                &[&x],
                |l| Ok(vec![l[0].clone()]),
            )
        })
    };
    let e = both.call((&x,)).unwrap_err().to_string();
    assert!(e.contains("print inside the shard_map body"), "{e}");
}

/// Eager training on a model-parallel weight: the tape's gradient and
/// Adam's update run as partitioned eager ops, the weight keeps its
/// sharding, and losses and weights match the same steps on one device.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn eager_adam_steps_on_a_sharded_weight_match_one_device() {
    let mesh = mesh_2x2();
    let cols = sharding(&mesh, &[None, Some("model")]);
    let x = ramp(&[2, 3], 0.5);
    let run = |w: Variable| -> (Vec<f32>, Vec<f32>) {
        let adam = xlafn::optimizers::Adam::new(0.1);
        let mut losses = Vec::new();
        for _ in 0..3 {
            let tape = GradientTape::new();
            let loss = x
                .matmul(&w.read())
                .unwrap()
                .square()
                .unwrap()
                .reduce_mean(&[], false)
                .unwrap();
            let g = tape.gradient(&loss, &[(&w).into()]).unwrap();
            adam.apply_gradients(&[(g[0].clone(), &w)]).unwrap();
            losses.push(loss.to_vec::<f32>().unwrap()[0]);
        }
        (losses, w.read().to_vec::<f32>().unwrap())
    };
    let w0 = ramp(&[3, 4], 0.25);
    let sharded = Variable::new(w0.shard(&cols).unwrap());
    let (losses, weights) = run(sharded.clone());
    assert_eq!(sharded.read().sharding(), Some(cols));
    let (want_losses, want_weights) = run(Variable::new(w0));
    assert_close(&losses, &want_losses, 1e-5);
    assert_close(&weights, &want_weights, 1e-5);
}

/// `Tensor::from_shards` assembles a sharded tensor from per-device
/// blocks (`jax.make_array_from_single_device_arrays`): the blocks
/// `addressable_shards` gives back rebuild the tensor for even and uneven
/// layouts, blocks made elsewhere are moved to their devices, and wrong
/// counts, shapes or dtypes are errors naming the block.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn from_shards_rebuilds_what_addressable_shards_gives() {
    let mesh = mesh_2x2();
    for dims in [[4i64, 6], [5, 3]] {
        let x = ramp(&dims, 1.0);
        for spec in [
            [Some("data"), Some("model")],
            [Some("model"), None],
            [None, None],
        ] {
            let s = sharding(&mesh, &spec);
            let blocks = x.shard(&s).unwrap().addressable_shards().unwrap();
            // Made on the default device, not where they belong.
            let blocks_host: Vec<Tensor> = blocks
                .iter()
                .map(|b| Tensor::from_vec(b.to_vec::<f32>().unwrap(), &b.dims()).unwrap())
                .collect();
            let y = Tensor::from_shards(&dims, &s, &blocks_host).unwrap();
            assert_eq!(y.sharding(), Some(s.clone()));
            assert_eq!(y.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
            for (p, shard) in y.addressable_shards().unwrap().iter().enumerate() {
                assert_eq!(shard.device().unwrap(), mesh.devices()[p]);
            }
        }
    }
    let rows = sharding(&mesh, &[Some("data")]);
    let part = |n: i64| ramp(&[n, 3], 1.0);
    let e = |r: Result<Tensor>| r.unwrap_err().to_string();
    let three = e(Tensor::from_shards(
        &[4, 3],
        &rows,
        &[part(2), part(2), part(2)],
    ));
    assert!(
        three.contains("one block per mesh device (4), got 3"),
        "{three}"
    );
    let wrong = e(Tensor::from_shards(
        &[4, 3],
        &rows,
        &[part(2), part(2), part(1), part(2)],
    ));
    assert!(
        wrong.contains("block 2") && wrong.contains("f32[2, 3]"),
        "{wrong}"
    );
    let ints = Tensor::from_vec(vec![0i32; 6], &[2, 3]).unwrap();
    let mixed = e(Tensor::from_shards(
        &[4, 3],
        &rows,
        &[part(2), ints, part(2), part(2)],
    ));
    assert!(mixed.contains("block 1"), "{mixed}");
    let e2 = e(Tensor::from_shards(
        &[4, 3, 1],
        &rows,
        &[part(2), part(2), part(2), part(2)],
    ));
    assert!(e2.contains("block 0"), "{e2}");
}

/// `from_process_local_data` in one process: this process's box is the
/// whole array, so it lays the array out as `shard` does, uneven blocks
/// included; data of another shape is refused with the shape it needs.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn process_local_data_of_one_process_is_the_whole_array() {
    let mesh = mesh_2x2();
    let s = sharding(&mesh, &[Some("data"), Some("model")]);
    let x = ramp(&[5, 3], 1.0);
    let t = Tensor::from_process_local_data(&s, &x, &[5, 3]).unwrap();
    assert_eq!(t.sharding(), Some(s.clone()));
    assert_eq!(t.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    let want = x.shard(&s).unwrap().addressable_shards().unwrap();
    for (got, want) in t.addressable_shards().unwrap().iter().zip(&want) {
        assert_eq!(got.dims(), want.dims());
        assert_eq!(got.to_vec::<f32>().unwrap(), want.to_vec::<f32>().unwrap());
    }
    let e = Tensor::from_process_local_data(&s, &ramp(&[4, 3], 1.0), &[5, 3])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("the part of f32[5, 3] at [0, 0], so its data must be a one-device f32[5, 3]; got f32[4, 3]"),
        "{e}"
    );
    let e = Tensor::from_process_local_data(&s, &x, &[5, -3])
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dimension -3 of shape [5, -3] is negative"),
        "{e}"
    );
}
