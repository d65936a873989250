//! Naming what XLA chose: a result sharding read back from the compiled
//! program (`OpSharding`) is turned into the `NamedSharding` on the
//! function's mesh that puts the same block on every device.

use super::{Mesh, NamedSharding, PartitionSpec};
use crate::runtime::OpSharding;
use std::sync::Arc;

/// `OpSharding.kind` values.
const REPLICATED: i32 = 0;
const TILED: i32 = 3;

/// The named sharding on `mesh` equal to `op` for an array of `global`
/// dims, if there is one (a device order that no spec over the mesh axes
/// gives has none).
///
/// The spec is read off the tiling, not searched for (a search over every
/// spec grows factorially with the mesh's axes): stepping one mesh axis
/// from partition 0 moves partition 0's tile along the dimension that
/// axis splits, by the product of the sizes of the axes after it there,
/// so each axis of size above 1 names its dimension and its place in it.
/// The spec found is then checked block by block against `op`.
pub(crate) fn named_from_op(
    mesh: &Arc<Mesh>,
    op: &OpSharding,
    global: &[i64],
) -> Option<NamedSharding> {
    let rank = global.len();
    let tiles = op_tiles(op, rank, mesh.size())?;
    let axes = mesh.axes();
    // Per dimension: (the tile step of an axis, the axis).
    let mut split: Vec<Vec<(i64, String)>> = vec![Vec::new(); rank];
    for (a, (name, size)) in axes.iter().enumerate() {
        if *size < 2 {
            continue;
        }
        let stride: usize = axes[a + 1..].iter().map(|(_, s)| s).product();
        let moved: Vec<usize> = (0..rank)
            .filter(|&d| tiles[stride][d] != tiles[0][d])
            .collect();
        match moved[..] {
            [] => {}
            [d] => split[d].push((tiles[stride][d] - tiles[0][d], name.clone())),
            _ => return None,
        }
    }
    let spec: Vec<Vec<String>> = split
        .into_iter()
        .map(|mut axes| {
            // Major axis first: the largest step.
            axes.sort_by_key(|a| std::cmp::Reverse(a.0));
            axes.into_iter().map(|(_, n)| n).collect()
        })
        .collect();
    let named = NamedSharding::new(mesh, PartitionSpec::with_axes(spec)).ok()?;
    same_layout(&named, op, global).then_some(named)
}

/// Does `op` put the same blocks on the same partitions as `named`, for
/// an array of `global` dims?
pub(crate) fn same_layout(named: &NamedSharding, op: &OpSharding, global: &[i64]) -> bool {
    op_origins(op, global, named.mesh().size()).is_some_and(|o| o == named_origins(named, global))
}

/// The GSPMD `mhlo.sharding` text of `named` for a rank-`rank` array,
/// with an explicit device list: `{devices=[2,1,2]0,1,2,3
/// last_tile_dim_replicate}`, or `{replicated}`.
pub(crate) fn hlo_sharding_text(named: &NamedSharding, rank: usize) -> String {
    if named.is_replicated() {
        return "{replicated}".to_string();
    }
    let tiles: Vec<i64> = (0..rank).map(|d| named.tiles(d) as i64).collect();
    let partitions = named.mesh().size();
    let copies = partitions as i64 / tiles.iter().product::<i64>();
    // A unit global shape gives each partition's tile coordinates directly.
    let coords: Vec<Vec<i64>> = (0..partitions)
        .map(|p| named.tile_coordinates(p, rank))
        .collect();
    // Tile order: row-major over the tile grid, then the replicas of each
    // tile in partition order.
    let mut order: Vec<(Vec<i64>, usize)> = coords.into_iter().zip(0..partitions).collect();
    order.sort();
    let devices: Vec<String> = order.iter().map(|(_, p)| p.to_string()).collect();
    let mut dims: Vec<String> = tiles.iter().map(i64::to_string).collect();
    let replicated = copies > 1;
    if replicated {
        dims.push(copies.to_string());
    }
    format!(
        "{{devices=[{}]{}{}}}",
        dims.join(","),
        devices.join(","),
        if replicated {
            " last_tile_dim_replicate"
        } else {
            ""
        }
    )
}

/// Per partition, where its block starts, under a named sharding.
fn named_origins(sharding: &NamedSharding, global: &[i64]) -> Vec<Vec<i64>> {
    (0..sharding.mesh().size())
        .map(|p| sharding.shard_origin(p, global))
        .collect()
}

/// Per partition, where its block starts, under an `OpSharding`; `None`
/// for shardings that are not a tiling of the array (maximal, manual).
fn op_origins(op: &OpSharding, global: &[i64], partitions: usize) -> Option<Vec<Vec<i64>>> {
    let dims = &op.tile_assignment_dimensions;
    let tiles = op_tiles(op, global.len(), partitions)?;
    Some(
        tiles
            .into_iter()
            .map(|coords| {
                (0..global.len())
                    .map(|d| {
                        let n = dims.get(d).copied().unwrap_or(1).max(1);
                        let block = global[d] / n + i64::from(global[d] % n > 0);
                        coords[d] * block
                    })
                    .collect()
            })
            .collect(),
    )
}

/// Per partition, which tile it holds along each of the array's `rank`
/// dimensions under `op`; `None` for shardings that are not a tiling.
fn op_tiles(op: &OpSharding, rank: usize, partitions: usize) -> Option<Vec<Vec<i64>>> {
    match op.kind {
        REPLICATED => return Some(vec![vec![0; rank]; partitions]),
        TILED => {}
        _ => return None,
    }
    let dims = &op.tile_assignment_dimensions;
    let tiles: i64 = dims.iter().product();
    if dims.len() < rank || tiles != partitions as i64 {
        return None;
    }
    let order = device_order(op, tiles as usize)?;
    let mut coords = vec![Vec::new(); partitions];
    for (k, &device) in order.iter().enumerate() {
        let mut c = unravel(k, dims);
        c.truncate(rank);
        *coords.get_mut(usize::try_from(device).ok()?)? = c;
    }
    // Every partition holds a tile.
    coords.iter().all(|c| c.len() == rank).then_some(coords)
}

/// The partition of each tile, row-major over the tile grid.
fn device_order(op: &OpSharding, tiles: usize) -> Option<Vec<i64>> {
    if !op.tile_assignment_devices.is_empty() {
        return (op.tile_assignment_devices.len() == tiles)
            .then(|| op.tile_assignment_devices.clone());
    }
    let reshape = &op.iota_reshape_dims;
    let perm: Vec<usize> = op.iota_transpose_perm.iter().map(|&p| p as usize).collect();
    if reshape.is_empty() {
        return Some((0..tiles as i64).collect());
    }
    if reshape.iter().product::<i64>() != tiles as i64 || perm.len() != reshape.len() {
        return None;
    }
    // iota(tiles).reshape(reshape).transpose(perm), flattened.
    let transposed: Vec<i64> = perm
        .iter()
        .map(|&p| reshape.get(p).copied())
        .collect::<Option<_>>()?;
    Some(
        (0..tiles)
            .map(|k| {
                let c = unravel(k, &transposed);
                let mut source = vec![0i64; reshape.len()];
                for (i, &p) in perm.iter().enumerate() {
                    source[p] = c[i];
                }
                source
                    .iter()
                    .zip(reshape)
                    .fold(0, |acc, (s, n)| acc * n + s)
            })
            .collect(),
    )
}

fn unravel(mut k: usize, dims: &[i64]) -> Vec<i64> {
    let mut coords = vec![0i64; dims.len()];
    for d in (0..dims.len()).rev() {
        let n = dims[d].max(1) as usize;
        coords[d] = (k % n) as i64;
        k /= n;
    }
    coords
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh() -> Arc<Mesh> {
        let devices = crate::tensor::devices().unwrap();
        Mesh::with_devices(devices[..4].to_vec(), &[("data", 2), ("model", 2)]).unwrap()
    }

    fn tiled(dims: &[i64], reshape: &[i64], perm: &[i32], replicate_last: bool) -> OpSharding {
        OpSharding {
            kind: TILED,
            tile_assignment_dimensions: dims.to_vec(),
            iota_reshape_dims: reshape.to_vec(),
            iota_transpose_perm: perm.to_vec(),
            replicate_on_last_tile_dim: replicate_last,
            ..Default::default()
        }
    }

    #[test]
    fn xla_tilings_are_named_on_the_mesh() {
        let m = mesh();
        let name = |op: &OpSharding, global: &[i64]| {
            named_from_op(&m, op, global).map(|s| s.spec().to_string())
        };
        // Rows over data, replicated over model: [2,1,2] last tile dim replicated.
        assert_eq!(
            name(&tiled(&[2, 1, 2], &[4], &[0], true), &[8, 3]).as_deref(),
            Some("P('data')")
        );
        // Columns over model: devices iota([2,2]).T = [0,2,1,3].
        assert_eq!(
            name(&tiled(&[1, 2, 2], &[2, 2], &[1, 0], true), &[8, 6]).as_deref(),
            Some("P(None, 'model')")
        );
        // All four on rows, major axis first.
        assert_eq!(
            name(&tiled(&[4, 1], &[4], &[0], false), &[8, 2]).as_deref(),
            Some("P(('data', 'model'))")
        );
        let replicated = OpSharding {
            kind: REPLICATED,
            ..Default::default()
        };
        assert_eq!(name(&replicated, &[3]).as_deref(), Some("P()"));
        let maximal = OpSharding {
            kind: 1,
            ..Default::default()
        };
        assert_eq!(name(&maximal, &[3]), None);
    }

    #[test]
    fn size_one_axes_and_foreign_orders_are_read_off_the_tiling() {
        let devices = crate::tensor::devices().unwrap();
        let names: Vec<String> = (0..16).map(|i| format!("a{i}")).collect();
        let mut axes: Vec<(&str, usize)> = names.iter().map(|n| (n.as_str(), 1)).collect();
        axes.insert(5, ("data", 2));
        axes.push(("model", 2));
        let m = Mesh::with_devices(devices[..4].to_vec(), &axes).unwrap();
        // Columns over model then data: devices iota([2,2]).T.
        let op = tiled(&[1, 4, 1], &[2, 2], &[1, 0], false);
        let named = named_from_op(&m, &op, &[3, 8, 2]).unwrap();
        assert_eq!(named.spec().to_string(), "P(None, ('model', 'data'))");
        // An order no spec over the mesh gives.
        let foreign = OpSharding {
            tile_assignment_devices: vec![0, 3, 1, 2],
            ..tiled(&[4], &[], &[], false)
        };
        assert_eq!(named_from_op(&m, &foreign, &[8]), None);
    }

    #[test]
    fn gspmd_text_lists_the_devices_tile_by_tile() {
        let m = mesh();
        let spec =
            |dims: [Option<&str>; 2]| NamedSharding::new(&m, PartitionSpec::new(dims)).unwrap();
        assert_eq!(
            hlo_sharding_text(&spec([Some("data"), None]), 2),
            "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}"
        );
        assert_eq!(
            hlo_sharding_text(&spec([None, Some("model")]), 2),
            "{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"
        );
        assert_eq!(
            hlo_sharding_text(&spec([Some("model"), Some("data")]), 2),
            "{devices=[2,2]0,2,1,3}"
        );
        assert_eq!(hlo_sharding_text(&spec([None, None]), 2), "{replicated}");
        // The text and the layout agree with XLA's reading of the same.
        let s = spec([None, Some("model")]);
        assert!(same_layout(
            &s,
            &tiled(&[1, 2, 2], &[2, 2], &[1, 0], true),
            &[4, 4]
        ));
        assert!(!same_layout(
            &s,
            &tiled(&[2, 1, 2], &[4], &[0], true),
            &[4, 4]
        ));
    }
}
