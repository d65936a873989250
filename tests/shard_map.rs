//! `shard_map` and its collectives, against references
//! computed on the host: per-device bodies on 4 CPU devices, lowered as
//! Shardy manual computations with StableHLO collectives.

use std::sync::Arc;
use xlafn::prelude::*;
use xlafn::sharding::{
    Mesh, PartitionSpec, all_gather, axis_index, pmax, pmean, ppermute, psum, psum_scatter,
    shard_map,
};

fn p(dims: &[Option<&str>]) -> PartitionSpec {
    PartitionSpec::new(dims.iter().copied())
}

fn values(n: i64) -> Vec<f32> {
    (0..n).map(|i| ((i * 5 % 13) as f32) - 6.0).collect()
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn psum_and_all_gather_match_the_host() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let f = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let rows = p(&[Some("data")]);
            shard_map(
                &mesh,
                std::slice::from_ref(&rows),
                &[
                    PartitionSpec::replicated(),
                    rows.clone(),
                    PartitionSpec::replicated(),
                ],
                &[&x],
                |local| {
                    let x = &local[0];
                    let total = psum(&x.reduce_sum(&[0], false)?, "data")?;
                    let mean = pmean(&x.reduce_sum(&[0], false)?, "data")?;
                    let whole = all_gather(x, "data", 0)?;
                    // Each device's rows minus the global column sums.
                    Ok(vec![total, x.sub(&mean)?, whole])
                },
            )
        })
    };
    let xs = values(24);
    let x = Tensor::from_vec(xs.clone(), &[8, 3]).unwrap();
    let out = f.call((&x,)).unwrap();
    let sums: Vec<f32> = (0..3)
        .map(|c| (0..8).map(|r| xs[r * 3 + c]).sum())
        .collect();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), sums);
    let want: Vec<f32> = (0..24).map(|i| xs[i] - sums[i % 3] / 4.0).collect();
    assert_eq!(out[1].to_vec::<f32>().unwrap(), want);
    assert_eq!(out[2].to_vec::<f32>().unwrap(), xs);
    let program = f.concrete_functions()[0].sharded_executables()[0]
        .optimized()
        .unwrap();
    assert!(program.count("all-reduce") >= 1, "{:?}", program.opcodes);
    assert!(program.count("all-gather") >= 1, "{:?}", program.opcodes);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn a_matmul_split_on_its_contracting_axis_sums_over_model() {
    let mesh = Mesh::new(&[("data", 2), ("model", 2)]).unwrap();
    let f = {
        let mesh: Arc<Mesh> = mesh.clone();
        function(move |x: Tensor, w: Tensor| -> Result<Vec<Tensor>> {
            shard_map(
                &mesh,
                &[p(&[Some("data"), Some("model")]), p(&[Some("model"), None])],
                &[p(&[Some("data"), None])],
                &[&x, &w],
                |local| Ok(vec![psum(&local[0].matmul(&local[1])?, "model")?]),
            )
        })
    };
    let (xs, ws) = (values(4 * 6), values(6 * 5));
    let x = Tensor::from_vec(xs.clone(), &[4, 6]).unwrap();
    let w = Tensor::from_vec(ws.clone(), &[6, 5]).unwrap();
    let y = f.call((&x, &w)).unwrap().remove(0);
    let want: Vec<f32> = (0..4 * 5)
        .map(|i| {
            (0..6)
                .map(|k| xs[(i / 5) * 6 + k] * ws[k * 5 + i % 5])
                .sum()
        })
        .collect();
    assert_eq!(y.to_vec::<f32>().unwrap(), want);
    assert_eq!(y.sharding().unwrap().spec().to_string(), "P('data')");
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn axis_index_ppermute_pmax_and_psum_scatter() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let f = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let rows = p(&[Some("data")]);
            shard_map(
                &mesh,
                std::slice::from_ref(&rows),
                &[
                    rows.clone(),
                    rows.clone(),
                    PartitionSpec::replicated(),
                    rows.clone(),
                ],
                &[&x],
                |local| {
                    let x = &local[0];
                    let index = axis_index("data")?.reshape(&[1])?;
                    // A ring: device i sends to i + 1.
                    let shifted = ppermute(x, "data", &[(0, 1), (1, 2), (2, 3), (3, 0)])?;
                    let biggest = pmax(&x.reduce_max(&[], false)?, "data")?;
                    let scattered = psum_scatter(x, "data", 0)?;
                    Ok(vec![index, shifted, biggest, scattered])
                },
            )
        })
    };
    let xs = values(16);
    let out = f
        .call((Tensor::from_vec(xs.clone(), &[16]).unwrap(),))
        .unwrap();
    assert_eq!(out[0].to_vec::<i32>().unwrap(), vec![0, 1, 2, 3]);
    // Device d + 1 got device d's block of 4.
    let ring: Vec<f32> = (0..16).map(|i| xs[(i + 12) % 16]).collect();
    assert_eq!(out[1].to_vec::<f32>().unwrap(), ring);
    let max = xs.iter().cloned().fold(f32::MIN, f32::max);
    assert_eq!(out[2].to_vec::<f32>().unwrap(), vec![max]);
    // The blocks summed over devices, element i kept by device i.
    let scattered: Vec<f32> = (0..4)
        .map(|i| (0..4).map(|d| xs[4 * d + i]).sum())
        .collect();
    assert_eq!(out[3].to_vec::<f32>().unwrap(), scattered);
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn misuse_is_a_clear_error() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let x = Tensor::from_vec(values(6), &[6]).unwrap();
    let e = shard_map(&mesh, &[p(&[Some("data")])], &[], &[&x], |_| Ok(vec![]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("inside a function"), "{e}");
    let e = psum(&x, "data").unwrap_err().to_string();
    assert!(e.contains("inside a shard_map body"), "{e}");
    let uneven = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            shard_map(
                &mesh,
                &[p(&[Some("data")])],
                &[p(&[Some("data")])],
                &[&x],
                Ok,
            )
        })
    };
    let e = uneven.call((&x,)).unwrap_err().to_string();
    assert!(e.contains("evenly"), "{e}");
    let wrong_axis = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            shard_map(
                &mesh,
                &[p(&[Some("data")])],
                &[p(&[Some("data")])],
                &[&x],
                |l| Ok(vec![psum(&l[0], "model")?]),
            )
        })
    };
    let x8 = Tensor::from_vec(values(8), &[8]).unwrap();
    let e = wrong_axis.call((&x8,)).unwrap_err().to_string();
    assert!(e.contains("no axis \"model\""), "{e}");
}

fn close(got: &[f32], want: &[f32]) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= 1e-4 * (1.0 + w.abs()),
            "element {i}: {g} vs {w}"
        );
    }
}

/// The gradients of `loss` with respect to `x` and `w`, inside a function.
fn grads(
    loss: impl Fn(&Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) -> Function<(Tensor, Tensor), Vec<Tensor>> {
    function(move |x: Tensor, w: Tensor| -> Result<Vec<Tensor>> {
        let tape = GradientTape::new();
        tape.watch(&x);
        tape.watch(&w);
        let l = loss(&x, &w)?;
        let g = tape.gradient(&l, &[(&x).into(), (&w).into()])?;
        Ok(vec![l, g[0].clone().unwrap(), g[1].clone().unwrap()])
    })
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn gradients_flow_through_shard_map_and_its_collectives() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let x = Tensor::from_vec(values(8 * 3).iter().map(|v| v * 0.1).collect(), &[8, 3]).unwrap();
    let w = Tensor::from_vec(values(3 * 2).iter().map(|v| v * 0.2).collect(), &[3, 2]).unwrap();
    let reference = grads(|x, w| {
        let y = x.matmul(w)?;
        // sum(y^2) + sum(x * sum(x)) + sum(gathered rows * 0.5)
        let a = y.square()?.reduce_sum(&[], false)?;
        let b = x.mul(&x.reduce_sum(&[], false)?)?.reduce_sum(&[], false)?;
        a.add(&b)?.add(&x.mul_scalar(0.5)?.reduce_sum(&[], false)?)
    });
    let sharded = {
        let mesh = mesh.clone();
        grads(move |x, w| {
            let rows = p(&[Some("data")]);
            let out = shard_map(
                &mesh,
                &[rows.clone(), PartitionSpec::replicated()],
                &[
                    PartitionSpec::replicated(),
                    rows,
                    PartitionSpec::replicated(),
                ],
                &[x, w],
                |l| {
                    let (x, w) = (&l[0], &l[1]);
                    // A replicated result made by psum (cotangent divided,
                    // then summed back).
                    let a = psum(&x.matmul(w)?.square()?.reduce_sum(&[], false)?, "data")?;
                    // A row-split result using a psum'd value (varying
                    // cotangent, summed by the transposed psum).
                    let b = x.mul(&psum(&x.reduce_sum(&[], false)?, "data")?)?;
                    // A gathered, replicated result.
                    let c = all_gather(x, "data", 0)?.mul_scalar(0.5)?;
                    Ok(vec![a, b, c])
                },
            )?;
            out[0]
                .add(&out[1].reduce_sum(&[], false)?)?
                .add(&out[2].reduce_sum(&[], false)?)
        })
    };
    let want = reference.call((&x, &w)).unwrap();
    let got = sharded.call((&x, &w)).unwrap();
    for (g, r) in got.iter().zip(&want) {
        close(&g.to_vec::<f32>().unwrap(), &r.to_vec::<f32>().unwrap());
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn gradients_of_ppermute_psum_scatter_and_pmax() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let x = Tensor::from_vec(values(16).iter().map(|v| v * 0.3).collect(), &[16]).unwrap();
    let w = Tensor::from_vec(values(16).iter().map(|v| v * 0.1 + 0.05).collect(), &[16]).unwrap();
    let reference = grads(|x, w| {
        // Block d + 1 of the shifted x is block d of x.
        let shifted = Tensor::concat(&[x.slice(&[12], &[4])?, x.slice(&[0], &[12])?], 0)?;
        let a = shifted.mul(w)?.reduce_sum(&[], false)?;
        // The 4 blocks of x summed elementwise, times w's first 4.
        let blocks = x.reshape(&[4, 4])?.reduce_sum(&[0], false)?;
        let b = blocks.mul(&w.slice(&[0], &[4])?)?.reduce_sum(&[], false)?;
        a.add(&b)?.add(&x.reduce_max(&[], false)?)
    });
    let sharded = {
        let mesh = mesh.clone();
        grads(move |x, w| {
            let rows = p(&[Some("data")]);
            let out = shard_map(
                &mesh,
                &[rows.clone(), rows.clone()],
                &[rows.clone(), rows.clone(), PartitionSpec::replicated()],
                &[x, w],
                |l| {
                    let (x, w) = (&l[0], &l[1]);
                    let ring = [(0, 1), (1, 2), (2, 3), (3, 0)];
                    let a = ppermute(x, "data", &ring)?.mul(w)?;
                    // Device d keeps element d of the summed blocks and
                    // weighs it by w's first 4 (gathered to every device).
                    let first = all_gather(w, "data", 0)?.slice(&[0], &[4])?;
                    let mine = axis_index("data")?.reshape(&[1])?;
                    let weight = first.gather(&mine, 0)?;
                    let b = psum_scatter(x, "data", 0)?.mul(&weight)?;
                    let c = pmax(&x.reduce_max(&[], false)?, "data")?;
                    Ok(vec![a, b, c])
                },
            )?;
            out[0]
                .reduce_sum(&[], false)?
                .add(&out[1].reduce_sum(&[], false)?)?
                .add(&out[2])
        })
    };
    let want = reference.call((&x, &w)).unwrap();
    let got = sharded.call((&x, &w)).unwrap();
    for (g, r) in got.iter().zip(&want) {
        close(&g.to_vec::<f32>().unwrap(), &r.to_vec::<f32>().unwrap());
    }
}

#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn all_to_all_turns_a_row_split_into_a_column_split() {
    let mesh = Mesh::new(&[("data", 4)]).unwrap();
    let xs: Vec<f32> = values(8 * 4);
    let x = Tensor::from_vec(xs.clone(), &[8, 4]).unwrap();
    let c = Tensor::from_vec((0..32).map(|i| i as f32).collect(), &[8, 4]).unwrap();
    let f = {
        let mesh = mesh.clone();
        grads(move |x, c| {
            let out = shard_map(
                &mesh,
                &[p(&[Some("data")])],
                &[p(&[None, Some("data")])],
                &[x],
                |l| Ok(vec![xlafn::sharding::all_to_all(&l[0], "data", 1, 0)?]),
            )?;
            // Every device now holds all rows of its column block: the
            // array is the same, laid out by columns.
            out[0].mul(c)?.reduce_sum(&[], false)
        })
    };
    let out = f.call((&x, &c)).unwrap();
    let want: f32 = xs.iter().enumerate().map(|(i, v)| v * i as f32).sum();
    close(&out[0].to_vec::<f32>().unwrap(), &[want]);
    // d(sum(x * c))/dx = c, through the transposed all_to_all.
    close(
        &out[1].to_vec::<f32>().unwrap(),
        &c.to_vec::<f32>().unwrap(),
    );
}

/// Collectives over two axes act on all four devices of a 2x2 mesh,
/// indexed in the order the axes are named (the first major), as JAX's
/// tuples of axis names do; gradients flow through them.
#[cfg_attr(xlafn_device_cuda, ignore = "needs the CPU plugin's 4 devices")]
#[test]
fn collectives_over_two_axes_act_on_every_device_in_the_named_order() {
    let mesh = Mesh::new(&[("data", 2), ("model", 2)]).unwrap();
    let both = PartitionSpec::with_axes(vec![vec!["data".into(), "model".into()]]);
    let f = {
        let (mesh, both) = (mesh.clone(), both.clone());
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let r = PartitionSpec::replicated();
            shard_map(
                &mesh,
                std::slice::from_ref(&both),
                &[r.clone(), r.clone(), r.clone(), both.clone(), both.clone()],
                &[&x],
                |local| {
                    let l = &local[0];
                    let total = psum(&l.reduce_sum(&[0], false)?, ["data", "model"])?;
                    let mean = pmean(&l.reduce_sum(&[0], false)?, vec!["data", "model"])?;
                    let swapped = all_gather(l, ["model", "data"], 0)?;
                    let spread = |i: Tensor| i.cast(DType::F32)?.broadcast_to(&[2]);
                    let major = spread(axis_index(["data", "model"])?)?;
                    let minor = spread(axis_index(["model", "data"])?)?;
                    Ok(vec![total, mean, swapped, major, minor])
                },
            )
        })
    };
    let xs = values(8);
    let out = f
        .call((Tensor::from_vec(xs.clone(), &[8]).unwrap(),))
        .unwrap();
    let sum: f32 = xs.iter().sum();
    assert_eq!(out[0].to_vec::<f32>().unwrap(), vec![sum]);
    close(&out[1].to_vec::<f32>().unwrap(), &[sum / 4.0]);
    // Device (d, m) holds block 2d+m; gathered model-major: blocks 0, 2, 1, 3.
    let blocks: Vec<f32> = [0, 2, 1, 3]
        .iter()
        .flat_map(|b| xs[b * 2..b * 2 + 2].to_vec())
        .collect();
    assert_eq!(out[2].to_vec::<f32>().unwrap(), blocks);
    assert_eq!(
        out[3].to_vec::<f32>().unwrap(),
        vec![0., 0., 1., 1., 2., 2., 3., 3.]
    );
    assert_eq!(
        out[4].to_vec::<f32>().unwrap(),
        vec![0., 0., 2., 2., 1., 1., 3., 3.]
    );

    // The gradients of Q * S * w (Q = sum(x^2), S = sum(x), each a psum
    // over all devices) are 2x * S + Q for x and Q * S for w = 1.
    let g = {
        let (mesh, both) = (mesh.clone(), both.clone());
        grads(move |x, w| {
            let out = shard_map(
                &mesh,
                std::slice::from_ref(&both),
                &[PartitionSpec::replicated()],
                &[x],
                |l| {
                    let q = psum(&l[0].square()?.reduce_sum(&[], false)?, ["data", "model"])?;
                    let s = psum(&l[0].reduce_sum(&[], false)?, ["model", "data"])?;
                    Ok(vec![q.mul(&s)?])
                },
            )?;
            out[0].mul(w)
        })
    };
    let x: Vec<f32> = xs.iter().map(|v| v * 0.1).collect();
    let got = g
        .call((
            Tensor::from_vec(x.clone(), &[8]).unwrap(),
            Tensor::scalar(1f32),
        ))
        .unwrap();
    let (s, q): (f32, f32) = (x.iter().sum(), x.iter().map(|v| v * v).sum());
    let want: Vec<f32> = x.iter().map(|v| 2.0 * v * s + q).collect();
    close(&got[0].to_vec::<f32>().unwrap(), &[q * s]);
    close(&got[1].to_vec::<f32>().unwrap(), &want);
    close(&got[2].to_vec::<f32>().unwrap(), &[q * s]);
    // Errors name the axes.
    let bad = {
        let mesh = mesh.clone();
        function(move |x: Tensor| -> Result<Vec<Tensor>> {
            let r = PartitionSpec::replicated();
            shard_map(
                &mesh,
                std::slice::from_ref(&r),
                std::slice::from_ref(&r),
                &[&x],
                |l| Ok(vec![psum(&l[0], ["data", "data"])?]),
            )
        })
    };
    let e = bad.call((Tensor::scalar(1f32),)).unwrap_err().to_string();
    assert!(e.contains("\"data\" is named twice"), "{e}");
}
