//! Hostile and careless input to the devices and sharding API: every bad
//! mesh, spec, sharded call, `shard_map` and collective is a clear error
//! naming what was wrong (never a panic, an abort inside XLA, a hang or a
//! silent wrong answer), and the odd but valid ones (empty arrays, blocks
//! made wholly of padding, every dtype, meshes over some devices in any
//! order) give the host's answer. Cases that once aborted or hung run in
//! a child process, so a regression fails one test, not the run.

#[path = "common/child.rs"]
mod child;

#[path = "common/scratch.rs"]
mod scratch;

use std::sync::Arc;
use std::time::Duration;
use xlafn::prelude::*;
use xlafn::sharding::{
    Mesh, NamedSharding, PartitionSpec, all_gather, all_to_all, axis_index, axis_size, pmax, pmean,
    pmin, ppermute, psum, psum_scatter, shard_map,
};

#[path = "robust_sharding_parts/shard_map.rs"]
mod shard_map_cases;

fn p(dims: &[Option<&str>]) -> PartitionSpec {
    PartitionSpec::new(dims.iter().copied())
}

fn mesh4() -> Arc<Mesh> {
    Mesh::new(&[("data", 4)]).unwrap()
}

fn mesh22() -> Arc<Mesh> {
    Mesh::new(&[("data", 2), ("model", 2)]).unwrap()
}

fn named(mesh: &Arc<Mesh>, dims: &[Option<&str>]) -> NamedSharding {
    NamedSharding::new(mesh, p(dims)).unwrap()
}

fn ramp(dims: &[i64]) -> Tensor {
    let n: i64 = dims.iter().product();
    Tensor::from_vec((0..n).map(|i| (i * 7 % 11) as f32 - 5.0).collect(), dims).unwrap()
}

/// The error's text, failing the test if `r` is not an error.
fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
    r.unwrap_err().to_string()
}

fn has(e: &str, parts: &[&str]) {
    for part in parts {
        assert!(e.contains(part), "{part:?} not in: {e}");
    }
}

/// Runs child test `name` and fails unless it passed.
fn in_child(name: &str, env: &[(&str, &str)]) {
    let run = child::assert_child_passes(name, env, Duration::from_secs(120));
    assert!(run.stdout.contains("1 passed"), "{name}:\n{}", run.stdout);
}

// ---- meshes ----------------------------------------------------------

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn bad_mesh_shapes_are_refused() {
    has(&err(Mesh::new(&[])), &["at least one axis"]);
    has(&err(Mesh::new(&[("data", 0)])), &["\"data\"", "size 0"]);
    has(
        &err(Mesh::new(&[("data", 8)])),
        &["needs 8 devices", "only 4"],
    );
    has(&err(Mesh::new(&[("a", usize::MAX)])), &["devices"]);
    // The product overflows usize: refused, not an arithmetic panic.
    has(
        &err(Mesh::new(&[("a", usize::MAX), ("b", 2)])),
        &["devices"],
    );
    has(
        &err(Mesh::new(&[("a", 1 << 40), ("b", 1 << 40)])),
        &["devices"],
    );
    let four = xlafn::devices().unwrap();
    has(
        &err(Mesh::with_devices(four.clone(), &[("data", 2)])),
        &["needs 2 devices, got 4"],
    );
    has(
        &err(Mesh::with_devices(
            four.clone(),
            &[("a", usize::MAX), ("b", usize::MAX)],
        )),
        &["too many"],
    );
    has(
        &err(Mesh::with_devices(Vec::new(), &[("x", 1)])),
        &["needs 1 devices, got 0"],
    );
    has(
        &err(Mesh::with_devices(vec![four[1], four[1]], &[("x", 2)])),
        &["appears twice"],
    );
    has(
        &err(Mesh::new(&[("x", 2), ("x", 2)])),
        &["\"x\" is named twice"],
    );
    for bad in [
        "", "1a", "a-b", "a b", "a\"b", "a\nb", "}", "@mesh", "a=2", "\u{e9}", "a]", "a\0",
    ] {
        has(
            &err(Mesh::new(&[(bad, 2), ("ok", 2)])),
            &["is not an identifier"],
        );
    }
    // Size-1 axes and odd but valid names are fine.
    let m = Mesh::new(&[("_", 1), ("a1", 4), ("mesh", 1)]).unwrap();
    assert_eq!((m.size(), m.axis_size("a1").unwrap()), (4, 4));
    has(&err(m.axis_size("A1")), &["no axis \"A1\"", "\"a1\""]);
}

/// A device of another client (here a second CPU client) is refused by
/// meshes, moves and scopes, with the device and the client named.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_device_of_another_client_is_refused() {
    let four = xlafn::devices().unwrap();
    let plugin = xlafn::runtime::default_plugin_path().unwrap();
    let other = xlafn::runtime::Client::from_plugin(&plugin, &[]).unwrap();
    let stranger = other.devices()[1];
    assert_eq!(
        (stranger.id(), stranger.index()),
        (four[1].id(), four[1].index())
    );
    assert_ne!(stranger, four[1]);
    let belongs = |e: String| {
        assert!(
            e.contains("does not belong to") && e.contains("cpu client"),
            "{e}"
        )
    };
    belongs(err(Mesh::with_devices(
        vec![four[0], stranger],
        &[("x", 2)],
    )));
    let x = Tensor::from_vec(vec![1f32, 2.], &[2]).unwrap();
    belongs(err(x.to_device(stranger)));
    belongs(err(xlafn::with_device(stranger, || x.mul_scalar(2.0))));
}

// ---- partition specs and named shardings -----------------------------

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn bad_partition_specs_are_refused() {
    let m = mesh22();
    has(
        &err(NamedSharding::new(&m, p(&[Some("rows")]))),
        &["no axis \"rows\"", "[\"data\", \"model\"]"],
    );
    has(
        &err(NamedSharding::new(&m, p(&[Some("")]))),
        &["no axis \"\""],
    );
    has(
        &err(NamedSharding::new(&m, p(&[Some("data"), Some("data")]))),
        &["\"data\" is used twice"],
    );
    let twice_in_one = PartitionSpec::with_axes(vec![vec!["model".into(), "model".into()]]);
    has(
        &err(NamedSharding::new(&m, twice_in_one)),
        &["\"model\" is used twice"],
    );
    // Longer than the array: refused where an array meets it.
    let long = named(&m, &[None, None, Some("data")]);
    has(
        &err(ramp(&[4, 2]).shard(&long)),
        &["3 dimensions", "rank 2"],
    );
    let rows = named(&m, &[Some("data")]);
    has(
        &err(Tensor::scalar(1f32).shard(&rows)),
        &["P('data')", "rank 0"],
    );
    // Trailing replicated dimensions are dropped, so they fit any rank.
    let padded = named(&m, &[Some("data"), None, None, None]);
    assert_eq!(padded, rows);
    let x = ramp(&[4]).shard(&padded).unwrap();
    assert_eq!(
        x.to_vec::<f32>().unwrap(),
        ramp(&[4]).to_vec::<f32>().unwrap()
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn layout_arithmetic_survives_extreme_dimensions() {
    let m = mesh22();
    let s = NamedSharding::new(
        &m,
        PartitionSpec::with_axes(vec![vec!["data".into(), "model".into()], vec![]]),
    )
    .unwrap();
    let huge = [i64::MAX, i64::MAX - 1];
    assert_eq!(s.shard_dims(&huge), vec![i64::MAX / 4 + 1, i64::MAX - 1]);
    assert!(s.is_uneven(&huge));
    assert_eq!(s.shard_origin(3, &huge), vec![3 * (i64::MAX / 4 + 1), 0]);
    assert_eq!(s.shard_dims(&[0, 0]), vec![0, 0]);
    assert_eq!(s.shard_dims(&[1, 1]), vec![1, 1]);
    assert_eq!(s.shard_origin(3, &[1, 1]), vec![3, 0]);
    // A shorter global shape than the spec is the caller's mistake, not
    // a panic.
    assert_eq!(s.shard_dims(&[]), Vec::<i64>::new());
}

// ---- sharded values ----------------------------------------------------

/// Deterministic bytes every dtype can hold (bools 0 or 1).
fn bytes_for(dtype: DType, n: usize) -> Vec<u8> {
    let size = dtype.size_in_bytes().unwrap();
    (0..n * size)
        .map(|i| match dtype {
            DType::Bool => ((i * 7) % 3 == 0) as u8,
            _ => (i * 37 % 251) as u8,
        })
        .collect()
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn every_dtype_round_trips_through_every_layout() {
    let m = mesh22();
    let specs: [&[Option<&str>]; 5] = [
        &[Some("data"), Some("model")],
        &[Some("model")],
        &[None, Some("data")],
        &[],
        &[Some("data"), None, Some("model")],
    ];
    for dtype in DType::NUMERIC_AND_BOOL {
        for dims in [
            vec![5i64, 3, 2],
            vec![1, 1, 1],
            vec![0, 3, 2],
            vec![3, 0, 5],
            vec![2, 7, 0],
        ] {
            let n = dims.iter().product::<i64>() as usize;
            let bytes = bytes_for(dtype, n);
            let x = Tensor::from_host_bytes(dtype, &dims, &bytes).unwrap();
            for spec in specs {
                let s = named(&m, spec);
                let sharded = x.shard(&s).unwrap();
                assert_eq!(sharded.dims(), dims);
                assert_eq!(sharded.dtype(), dtype);
                let back = sharded.to_host_array().unwrap();
                assert_eq!(back.bytes, bytes, "{dtype} {dims:?} {s}");
                assert_eq!(
                    sharded.unshard().unwrap().to_host_array().unwrap().bytes,
                    bytes
                );
                // Each shard holds exactly its part of the array.
                let size = dtype.size_in_bytes().unwrap();
                for (q, shard) in sharded.addressable_shards().unwrap().iter().enumerate() {
                    let origin = s.shard_origin(q, &dims);
                    let sd = shard.dims();
                    let got = shard.to_host_array().unwrap().bytes;
                    let mut k = 0;
                    for a in 0..sd[0] {
                        for b in 0..sd[1] {
                            for c in 0..sd[2] {
                                let g = (((origin[0] + a) * dims[1] + origin[1] + b) * dims[2]
                                    + origin[2]
                                    + c) as usize;
                                assert_eq!(
                                    got[k * size..(k + 1) * size],
                                    bytes[g * size..(g + 1) * size]
                                );
                                k += 1;
                            }
                        }
                    }
                    assert_eq!(k * size, got.len());
                }
            }
        }
    }
    // Scalars: only the replicated layout fits.
    let s = Tensor::scalar(true)
        .shard(&NamedSharding::replicated(&m))
        .unwrap();
    assert_eq!(s.to_vec::<bool>().unwrap(), vec![true]);
    assert_eq!(s.addressable_shards().unwrap().len(), 4);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn blocks_made_wholly_of_padding_are_empty_shards() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    // One row over four devices: three shards are nothing but padding.
    for n in [1i64, 2, 3, 5] {
        let x = ramp(&[n, 2]);
        let s = x.shard(&rows).unwrap();
        let sizes: Vec<i64> = s
            .addressable_shards()
            .unwrap()
            .iter()
            .map(|t| t.dims()[0])
            .collect();
        let block = (n + 3) / 4;
        let want: Vec<i64> = (0..4).map(|q| (n - q * block).clamp(0, block)).collect();
        assert_eq!(sizes, want, "n={n}");
        assert_eq!(s.to_vec::<f32>().unwrap(), x.to_vec::<f32>().unwrap());
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn resharding_moves_between_meshes_and_layouts() {
    let four = xlafn::devices().unwrap();
    let reversed: Vec<_> = four.iter().rev().copied().collect();
    let a = named(&mesh22(), &[Some("data"), Some("model")]);
    let b = named(
        &Mesh::with_devices(reversed.clone(), &[("rows", 4)]).unwrap(),
        &[None, Some("rows")],
    );
    let c = named(
        &Mesh::with_devices(four[2..].to_vec(), &[("pair", 2)]).unwrap(),
        &[Some("pair")],
    );
    let x = ramp(&[6, 5]);
    let want = x.to_vec::<f32>().unwrap();
    let mut t = x.shard(&a).unwrap();
    for s in [&b, &c, &a, &a] {
        t = t.shard(s).unwrap();
        assert_eq!(t.sharding().as_ref(), Some(s));
        assert_eq!(t.to_vec::<f32>().unwrap(), want);
    }
    // The reversed mesh's first block is on the last device.
    let t = x.shard(&b).unwrap();
    assert_eq!(
        t.addressable_shards().unwrap()[0].device().unwrap(),
        reversed[0]
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn eager_misuse_of_sharded_values_is_a_clear_error() {
    let m = mesh4();
    let x = ramp(&[4, 2]).shard(&named(&m, &[Some("data")])).unwrap();
    // Eager ops run partitioned; mixed with a one-device value too.
    let doubled: Vec<f32> = ramp(&[4, 2])
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| v * 2.0)
        .collect();
    assert_eq!(
        x.add(&ramp(&[4, 2])).unwrap().to_vec::<f32>().unwrap(),
        doubled
    );
    assert_eq!(
        ramp(&[4, 2]).add(&x).unwrap().to_vec::<f32>().unwrap(),
        doubled
    );
    has(
        &err(x.add(&ramp(&[4, 3]))),
        &["add", "f32(4, 2), f32(4, 3)"],
    );
    // to_device gathers it; a sharded value has no one device.
    let second = xlafn::devices().unwrap()[1];
    let gathered = x.to_device(second).unwrap();
    assert_eq!(
        (gathered.device().unwrap(), gathered.is_committed()),
        (second, true)
    );
    assert_eq!(
        gathered.to_vec::<f32>().unwrap(),
        ramp(&[4, 2]).to_vec::<f32>().unwrap()
    );
    has(
        &err(x.device()),
        &["sharded over 4 devices", "sharding()", "unshard()"],
    );
    has(
        &err(x.to_vec::<i32>()),
        &["cannot read a f32 tensor as i32"],
    );
    // Inside a trace, shard() has no value to place.
    let f = {
        let s = named(&m, &[Some("data")]);
        function(move |y: Tensor| y.shard(&s))
    };
    has(
        &err(f.call((&ramp(&[4, 2]),))),
        &["with_sharding_constraint"],
    );
}

// ---- sharded function calls -------------------------------------------

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-5 * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn sharding_options_that_do_not_fit_the_call_are_refused() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    let x = ramp(&[4, 2]);
    let too_many_out = FunctionOptions::new()
        .out_shardings(vec![Some(rows.clone()), None])
        .build(|x: Tensor| x.exp());
    has(
        &err(too_many_out.call((&x,))),
        &["has 1 outputs, but out_shardings lists 2"],
    );
    // An out_sharding of more dimensions than its result.
    let long_out = FunctionOptions::new()
        .out_shardings(vec![Some(named(&m, &[None, None, Some("data")]))])
        .build(|x: Tensor| x.exp());
    has(&err(long_out.call((&x,))), &["out_shardings", "rank 2"]);
    let scalar_out = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .out_shardings(vec![Some(rows.clone())])
        .build(|x: Tensor| x.reduce_sum(&[], false));
    has(&err(scalar_out.call((&x,))), &["out_shardings", "rank 0"]);
    let long_in = FunctionOptions::new()
        .in_shardings(vec![None, Some(named(&m, &[None, Some("data")]))])
        .build(|x: Tensor, y: Tensor| x.add(&y));
    has(
        &err(long_in.call((&x, &Tensor::scalar(1f32)))),
        &["input 1", "rank 0"],
    );
    // A host number is no tensor argument: in_shardings name tensors.
    let host_arg = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone()), Some(rows.clone())])
        .build(|x: Tensor, k: f32| x.mul_scalar(k as f64));
    has(
        &err(host_arg.call((&x, 2f32))),
        &["takes 1 tensor arguments, but in_shardings lists 2"],
    );
    // An uneven input (GSPMD) with a fixed uneven result sharding.
    let uneven = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .out_shardings(vec![Some(named(&m, &[None, Some("data")]))])
        .build(|x: Tensor| x.exp());
    let x5 = ramp(&[5, 3]);
    let y = uneven.call((&x5,)).unwrap();
    close(
        &y.to_vec::<f32>().unwrap(),
        &x5.exp().unwrap().to_vec::<f32>().unwrap(),
    );
    // Shardings over meshes of different devices in one call.
    let four = xlafn::devices().unwrap();
    let pair = Mesh::with_devices(four[..2].to_vec(), &[("data", 2)]).unwrap();
    let mixed = FunctionOptions::new()
        .in_shardings(vec![
            Some(rows.clone()),
            Some(named(&pair, &[Some("data")])),
        ])
        .build(|x: Tensor, y: Tensor| x.add(&y));
    has(&err(mixed.call((&x, &x))), &["another mesh"]);
    let other = x.shard(&named(&pair, &[Some("data")])).unwrap();
    let f = function(|x: Tensor, y: Tensor| x.add(&y));
    has(
        &err(f.call((&x.shard(&rows).unwrap(), &other))),
        &["another mesh"],
    );
    // A sharded variable and an in_sharding on another mesh.
    let v = Variable::new(x.shard(&named(&pair, &[None, Some("data")])).unwrap());
    let g = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(|v: Variable, y: Tensor| v.read().add(&y));
    has(&err(g.call((v, &x))), &["another mesh"]);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_committed_tensor_joins_a_sharded_call() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    let f = function(|x: Tensor, y: Tensor| x.mul(&y)?.reduce_sum(&[1], false));
    let (x, y) = (ramp(&[8, 3]), ramp(&[8, 3]).mul_scalar(0.5).unwrap());
    let want = f.call((&x, &y)).unwrap().to_vec::<f32>().unwrap();
    let last = *xlafn::devices().unwrap().last().unwrap();
    let committed = y.to_device(last).unwrap();
    let got = f.call((&x.shard(&rows).unwrap(), &committed)).unwrap();
    assert!(got.is_sharded());
    close(&got.to_vec::<f32>().unwrap(), &want);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn uneven_and_empty_shardings_through_functions_match_the_host() {
    let m = mesh22();
    let both = NamedSharding::new(
        &m,
        PartitionSpec::with_axes(vec![vec!["data".into(), "model".into()]]),
    )
    .unwrap();
    let f = |x: Tensor| -> Result<(Tensor, Tensor)> {
        Ok((x.exp()?.mul_scalar(2.0)?, x.reduce_sum(&[0], false)?))
    };
    let single = function(f);
    // Dims smaller than the shard count: some blocks are all padding.
    for dims in [[1i64, 2], [2, 3], [3, 1], [5, 2], [0, 3]] {
        for s in [&both, &named(&m, &[Some("model"), Some("data")])] {
            let sharded = FunctionOptions::new()
                .in_shardings(vec![Some(s.clone())])
                .build(f);
            let x = ramp(&dims);
            let (a, b) = sharded.call((&x,)).unwrap();
            let (wa, wb) = single.call((&x,)).unwrap();
            assert_eq!(a.dims(), dims.to_vec());
            close(&a.to_vec::<f32>().unwrap(), &wa.to_vec::<f32>().unwrap());
            close(&b.to_vec::<f32>().unwrap(), &wb.to_vec::<f32>().unwrap());
        }
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn meshes_of_some_devices_in_any_order_give_the_host_answer() {
    let four = xlafn::devices().unwrap();
    let f = |x: Tensor, w: Tensor| x.matmul(&w)?.tanh();
    let (x, w) = (ramp(&[8, 3]).mul_scalar(0.1).unwrap(), ramp(&[3, 2]));
    let want = function(f).call((&x, &w)).unwrap().to_vec::<f32>().unwrap();
    let reversed: Vec<_> = four.iter().rev().copied().collect();
    for (devices, shape) in [
        (reversed.clone(), vec![("data", 4)]),
        (reversed, vec![("data", 2), ("model", 2)]),
        (four[2..].to_vec(), vec![("data", 2)]),
        (vec![four[3], four[1]], vec![("data", 2)]),
        (vec![four[2]], vec![("data", 1)]),
    ] {
        let m = Mesh::with_devices(devices.clone(), &shape).unwrap();
        let s = named(&m, &[Some("data")]);
        let g = FunctionOptions::new()
            .in_shardings(vec![Some(s.clone())])
            .build(f);
        let y = g.call((&x, &w)).unwrap();
        close(&y.to_vec::<f32>().unwrap(), &want);
        for (q, shard) in y.addressable_shards().unwrap().iter().enumerate() {
            assert_eq!(shard.device().unwrap(), devices[q]);
        }
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn sharded_calls_compute_every_dtype() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    let b = Tensor::from_vec(
        vec![true, false, true, true, false, false, true, false],
        &[8],
    )
    .unwrap();
    let not = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(|b: Tensor| b.logical_not());
    let got = not.call((&b,)).unwrap().to_vec::<bool>().unwrap();
    let want: Vec<bool> = b.to_vec::<bool>().unwrap().iter().map(|v| !v).collect();
    assert_eq!(got, want);
    let square = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(|x: Tensor| x.mul(&x));
    let c: Vec<Complex32> = (0..6)
        .map(|i| Complex32::new(i as f32, 1.0 - i as f32))
        .collect();
    let got = square
        .call((&Tensor::from_vec(c.clone(), &[6]).unwrap(),))
        .unwrap();
    assert_eq!(
        got.to_vec::<Complex32>().unwrap(),
        c.iter().map(|v| v * v).collect::<Vec<_>>()
    );
    let i8s: Vec<i8> = (0..10).map(|i| i * 3 - 12).collect();
    let got = square
        .call((&Tensor::from_vec(i8s.clone(), &[10]).unwrap(),))
        .unwrap();
    let want: Vec<i8> = i8s.iter().map(|v| v.wrapping_mul(*v)).collect();
    assert_eq!(got.to_vec::<i8>().unwrap(), want);
    let h: Vec<half::f16> = (0..5)
        .map(|i| half::f16::from_f32(i as f32 * 0.5))
        .collect();
    let got = square
        .call((&Tensor::from_vec(h.clone(), &[5]).unwrap(),))
        .unwrap();
    let want: Vec<half::f16> = h.iter().map(|v| *v * *v).collect();
    assert_eq!(got.to_vec::<half::f16>().unwrap(), want);
    let bf: Vec<half::bf16> = (0..4)
        .map(|i| half::bf16::from_f32(i as f32 - 1.5))
        .collect();
    let got = square
        .call((&Tensor::from_vec(bf.clone(), &[4]).unwrap(),))
        .unwrap();
    let want: Vec<half::bf16> = bf.iter().map(|v| *v * *v).collect();
    assert_eq!(got.to_vec::<half::bf16>().unwrap(), want);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn nested_functions_and_gradients_with_shardings() {
    let m = mesh4();
    let rows = named(&m, &[Some("data")]);
    let inner = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(|x: Tensor| x.square());
    let outer = {
        let inner = inner.clone();
        FunctionOptions::new()
            .in_shardings(vec![Some(rows.clone())])
            .build(move |x: Tensor| inner.call((&x.exp()?,))?.reduce_sum(&[], false))
    };
    let x = ramp(&[6, 2]).mul_scalar(0.1).unwrap();
    let want: f32 = x
        .to_vec::<f32>()
        .unwrap()
        .iter()
        .map(|v| (2.0 * v).exp())
        .sum();
    close(
        &outer.call((&x,)).unwrap().to_vec::<f32>().unwrap(),
        &[want],
    );
    // A constraint of the wrong rank, reached through a gradient.
    let bad = named(&m, &[None, None, Some("data")]);
    let grad = FunctionOptions::new()
        .in_shardings(vec![Some(rows.clone())])
        .build(move |x: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            tape.watch(&x);
            let y = x
                .with_sharding_constraint(&bad)?
                .square()?
                .reduce_sum(&[], false)?;
            Ok(tape.gradient(&y, &[(&x).into()])?.remove(0).unwrap())
        });
    has(
        &err(grad.call((&x,))),
        &["with_sharding_constraint", "rank 2"],
    );
}

// ---- devices -------------------------------------------------------------

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn device_scopes_survive_panics_and_nest() {
    let four = xlafn::devices().unwrap();
    let before = xlafn::default_device().unwrap();
    let caught = std::panic::catch_unwind(|| {
        xlafn::with_device(four[2], || {
            xlafn::with_device(four[3], || panic!("boom"));
        })
    });
    assert!(caught.is_err());
    assert_eq!(xlafn::default_device().unwrap(), before);
    let inner = xlafn::with_device(four[1], || {
        let a = xlafn::with_device(four[3], || Tensor::scalar(1f32));
        (a.device().unwrap(), xlafn::default_device().unwrap())
    });
    assert_eq!(inner, (four[3], four[1]));
    // A sharded call inside a scope still runs on its mesh.
    let rows = named(&mesh4(), &[Some("data")]);
    let y = xlafn::with_device(four[1], || {
        FunctionOptions::new()
            .in_shardings(vec![Some(rows.clone())])
            .build(|x: Tensor| x.mul_scalar(3.0))
            .call((&ramp(&[4]),))
    })
    .unwrap();
    assert_eq!(y.sharding(), Some(rows));
    close(
        &y.to_vec::<f32>().unwrap(),
        &ramp(&[4]).mul_scalar(3.0).unwrap().to_vec::<f32>().unwrap(),
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn bad_cpu_device_counts_are_refused() {
    xlafn::devices().unwrap();
    has(
        &err(xlafn::set_cpu_device_count(0)),
        &["between 1 and 1024, got 0"],
    );
    has(&err(xlafn::set_cpu_device_count(1025)), &["got 1025"]);
    has(
        &err(xlafn::set_cpu_device_count(usize::MAX)),
        &["between 1 and 1024"],
    );
    xlafn::set_cpu_device_count(4).unwrap();
    has(
        &err(xlafn::set_cpu_device_count(2)),
        &["already exists with 4 devices"],
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn bad_cpu_device_environment_values_are_refused() {
    for value in [
        "",
        "-1",
        "abc",
        "99999999999999999999",
        "1025",
        "0",
        "0x4",
        "4.0",
        "4 4",
    ] {
        in_child(
            "child_bad_env",
            &[("XLAFN_CPU_DEVICES", value), ("WANT", "error")],
        );
    }
    in_child(
        "child_bad_env",
        &[("XLAFN_CPU_DEVICES", " 2 "), ("WANT", "2")],
    );
    in_child(
        "child_bad_env",
        &[("XLAFN_CPU_DEVICES", "1"), ("WANT", "1")],
    );
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn child_bad_env() {
    if !child::is_child("child_bad_env") {
        return;
    }
    let raw = std::env::var("XLAFN_CPU_DEVICES").unwrap();
    match std::env::var("WANT").unwrap().as_str() {
        "error" => {
            let e = err(xlafn::devices());
            has(&e, &["XLAFN_CPU_DEVICES", &format!("{raw:?}")]);
            has(&err(Mesh::new(&[("data", 1)])), &["XLAFN_CPU_DEVICES"]);
            has(
                &err(Tensor::from_vec(vec![1f32], &[1])),
                &["XLAFN_CPU_DEVICES"],
            );
        }
        n => {
            let n: usize = n.parse().unwrap();
            assert_eq!(xlafn::devices().unwrap().len(), n);
            has(
                &err(Mesh::new(&[("data", 4)])),
                &["needs 4 devices", &format!("only {n}")],
            );
            let m = Mesh::new(&[("data", n)]).unwrap();
            let x = ramp(&[5]).shard(&named(&m, &[Some("data")])).unwrap();
            let y = function(|x: Tensor| x.mul_scalar(2.0)).call((&x,)).unwrap();
            close(
                &y.to_vec::<f32>().unwrap(),
                &ramp(&[5]).mul_scalar(2.0).unwrap().to_vec::<f32>().unwrap(),
            );
        }
    }
}

/// Careless and hostile arguments of `from_process_local_data`: each is a
/// clear error, never a panic or a huge allocation.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn process_local_data_refuses_bad_shapes_and_traced_values() {
    let rows = named(&mesh4(), &[Some("data")]);
    let x = ramp(&[8, 2]);
    let put =
        |local: &Tensor, dims: &[i64]| err(Tensor::from_process_local_data(&rows, local, dims));
    has(&put(&x, &[8]), &["must be a one-device"]);
    has(&put(&x, &[8, 2, 1]), &["must be a one-device"]);
    has(&put(&x, &[-8, 2]), &["dimension -8", "is negative"]);
    has(&put(&x, &[i64::MAX, i64::MAX]), &["is too large"]);
    has(
        &put(&x, &[9, 2]),
        &["must be a one-device f32[9, 2]; got f32[8, 2]"],
    );
    let sharded = x.shard(&rows).unwrap();
    has(&put(&sharded, &[8, 2]), &["(sharded)"]);
    let rows2 = rows.clone();
    let f = function(move |t: Tensor| -> Result<Tensor> {
        Tensor::from_process_local_data(&rows2, &t, &[8, 2])
    });
    has(&err(f.call((&x,))), &["is symbolic (traced)"]);
    // Scalars on a rank-0 layout are the whole (one-element) array.
    let scalar = Tensor::scalar(3f32);
    let replicated = NamedSharding::replicated(&mesh4());
    let s = Tensor::from_process_local_data(&replicated, &scalar, &[]).unwrap();
    assert_eq!(s.to_vec::<f32>().unwrap(), vec![3.0]);
}
