//! Layer: mesh (above `runtime`, below the tensor knot). The descriptions
//! a sharded program is made of: meshes of devices with named axes,
//! partition specs, named shardings, the layout arithmetic they imply
//! (which block of a global array each device holds), and
//! [`ShardedArray`], the blocks a sharded tensor holds. XLA's SPMD
//! partitioner does the partitioning; this module only describes it.
//! They sit below the knot because op attributes (`shard_map`,
//! `sharding_constraint`), a tensor's representation and a function's
//! type hold them. Imports `runtime` (devices, buffers, `OpSharding`),
//! `dtype` and `error`. The user reaches all of it through
//! `xlafn::sharding`, which adds the operations on sharded values.
//!
//! The model is JAX's: a [`Mesh`] arranges devices in a grid whose axes
//! have names (`data`, `model`); a [`PartitionSpec`] says, per array
//! dimension, which mesh axes split it (none: replicated along it); a
//! [`NamedSharding`] is the pair. An array of `n` rows split over `k`
//! devices gets `ceil(n / k)` rows per device; the last devices' blocks
//! are padded (as XLA pads them) and the padding is stripped on the way
//! back to the host.
//!
//! In a multi-process run (`xlafn::distributed`) a mesh may span the
//! devices of every process. Each process then holds the blocks of its
//! own devices only ([`Mesh::addressable_partitions`]), and feeds them to
//! the program every process runs, as JAX's arrays that are not fully
//! addressable.

mod array;
mod layout;

/// The name of the mesh inside a lowered partitioned module.
pub(crate) const MESH_NAME: &str = "mesh";

use crate::error::{Error, Result};
use crate::runtime::{Client, Device};
use std::sync::Arc;

pub use array::ShardedArray;
pub(crate) use array::{any_sharded_arrays, extent_inside};
pub(crate) use layout::{hlo_sharding_text, named_from_op, same_layout};

/// Devices arranged in a grid with named axes (`jax.sharding.Mesh`).
///
/// ```
/// use xlafn::sharding::Mesh;
/// let mesh = Mesh::new(&[("data", 2), ("model", 2)])?;
/// assert_eq!(mesh.size(), 4);
/// assert_eq!(mesh.axis_size("model")?, 2);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Mesh {
    devices: Vec<Device>,
    axes: Vec<(String, usize)>,
}

impl Mesh {
    /// A mesh over the default client's first devices, in their order
    /// (of every process, in a multi-process run: `xlafn::devices()`).
    pub fn new(axes: &[(&str, usize)]) -> Result<Arc<Mesh>> {
        let devices = Client::default_client()?.global_devices().to_vec();
        let size = axes
            .iter()
            .try_fold(1usize, |acc, (_, n)| acc.checked_mul(*n));
        match size {
            Some(size) if size <= devices.len() => {
                Mesh::with_devices(devices[..size].to_vec(), axes)
            }
            _ => Err(Error::Value(format!(
                "a mesh of shape {axes:?} needs {} devices, but there are only {} (set the CPU \
                 device count with set_cpu_device_count or XLAFN_CPU_DEVICES)",
                size.map_or("more than usize::MAX".to_string(), |s| s.to_string()),
                devices.len()
            ))),
        }
    }

    /// A mesh over `devices` (row-major over the axes: the last axis
    /// varies fastest).
    pub fn with_devices(devices: Vec<Device>, axes: &[(&str, usize)]) -> Result<Arc<Mesh>> {
        if axes.is_empty() {
            return Err(Error::Value("a mesh needs at least one axis".into()));
        }
        for (i, (name, size)) in axes.iter().enumerate() {
            let valid = name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
            if !valid {
                return Err(Error::Value(format!(
                    "mesh axis name {name:?} is not an identifier (letters, digits, _)"
                )));
            }
            if axes[..i].iter().any(|(n, _)| n == name) {
                return Err(Error::Value(format!("mesh axis {name:?} is named twice")));
            }
            if *size == 0 {
                return Err(Error::Value(format!("mesh axis {name:?} has size 0")));
            }
        }
        let size = axes
            .iter()
            .try_fold(1usize, |acc, (_, n)| acc.checked_mul(*n));
        if size != Some(devices.len()) {
            return Err(Error::Value(format!(
                "a mesh of shape {axes:?} needs {} devices, got {}",
                size.map_or("too many".to_string(), |s| s.to_string()),
                devices.len()
            )));
        }
        for (i, d) in devices.iter().enumerate() {
            if devices[..i].contains(d) {
                return Err(Error::Value(format!(
                    "device {d} appears twice in the mesh"
                )));
            }
        }
        // Only the default client's devices can hold the blocks.
        let devices = devices
            .iter()
            .map(|d| crate::runtime::default_client_device(*d))
            .collect::<Result<_>>()?;
        Ok(Arc::new(Mesh {
            devices,
            axes: axes.iter().map(|(n, s)| (n.to_string(), *s)).collect(),
        }))
    }

    /// A mesh of these axes without devices (JAX's `AbstractMesh`): what a
    /// traced program knows of the mesh it will run on.
    pub(crate) fn abstract_mesh(axes: &[(String, usize)]) -> Arc<Mesh> {
        Arc::new(Mesh {
            devices: Vec::new(),
            axes: axes.to_vec(),
        })
    }

    /// The devices, row-major over the axes: partition `p` runs on
    /// `devices()[p]`.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// The partitions whose devices this process drives, in mesh order:
    /// every partition unless the mesh spans the processes of a
    /// multi-process run. Sharded arrays hold blocks for these only.
    pub fn addressable_partitions(&self) -> Vec<usize> {
        (0..self.devices.len())
            .filter(|&p| self.devices[p].is_addressable())
            .collect()
    }

    /// Does this process drive every device of the mesh?
    pub fn is_fully_addressable(&self) -> bool {
        self.devices.iter().all(Device::is_addressable)
    }

    /// The axes with their sizes, major first.
    pub fn axes(&self) -> &[(String, usize)] {
        &self.axes
    }

    /// The number of devices (the product of the axis sizes).
    pub fn size(&self) -> usize {
        self.axes.iter().map(|(_, n)| n).product()
    }

    /// The size of axis `name`.
    pub fn axis_size(&self, name: &str) -> Result<usize> {
        Ok(self.axes[self.axis_index(name)?].1)
    }

    fn axis_index(&self, name: &str) -> Result<usize> {
        self.axes
            .iter()
            .position(|(n, _)| n == name)
            .ok_or_else(|| {
                let names: Vec<&str> = self.axes.iter().map(|(n, _)| n.as_str()).collect();
                Error::Value(format!(
                    "the mesh has no axis {name:?}; its axes are {names:?}"
                ))
            })
    }

    /// Device `p`'s position along each axis.
    fn coordinates(&self, p: usize) -> Vec<usize> {
        let mut rest = p;
        let mut coords = vec![0; self.axes.len()];
        for (i, (_, size)) in self.axes.iter().enumerate().rev() {
            coords[i] = rest % size;
            rest /= size;
        }
        coords
    }

    /// The `sdy.mesh` declaration of this mesh named `@name`.
    pub(crate) fn sdy_declaration(&self, name: &str) -> String {
        let axes: Vec<String> = self
            .axes
            .iter()
            .map(|(n, s)| format!("\"{n}\"={s}"))
            .collect();
        format!("sdy.mesh @{name} = <[{}]>", axes.join(", "))
    }
}

/// Per array dimension, the mesh axes that split it, major first; a
/// dimension with none (and every dimension past the listed ones) is
/// replicated (`jax.sharding.PartitionSpec`).
///
/// ```
/// use xlafn::sharding::PartitionSpec;
/// let rows = PartitionSpec::new([Some("data"), None]);
/// assert_eq!(rows.to_string(), "P('data', None)");
/// assert_eq!(PartitionSpec::replicated().to_string(), "P()");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PartitionSpec(Vec<Vec<String>>);

impl PartitionSpec {
    /// One mesh axis (or none) per leading dimension.
    pub fn new<'a>(dims: impl IntoIterator<Item = Option<&'a str>>) -> PartitionSpec {
        PartitionSpec(
            dims.into_iter()
                .map(|a| a.map(|a| vec![a.to_string()]).unwrap_or_default())
                .collect(),
        )
    }

    /// Several mesh axes per dimension (major first), e.g. a batch split
    /// over `data` and `model` together.
    pub fn with_axes(dims: Vec<Vec<String>>) -> PartitionSpec {
        PartitionSpec(dims)
    }

    /// Every dimension replicated.
    pub fn replicated() -> PartitionSpec {
        PartitionSpec(Vec::new())
    }

    /// The axes of each listed dimension.
    pub fn dims(&self) -> &[Vec<String>] {
        &self.0
    }
}

impl std::fmt::Display for PartitionSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self
            .0
            .iter()
            .map(|axes| match axes.len() {
                0 => "None".to_string(),
                1 => format!("'{}'", axes[0]),
                _ => {
                    let quoted: Vec<String> = axes.iter().map(|a| format!("'{a}'")).collect();
                    format!("({})", quoted.join(", "))
                }
            })
            .collect();
        write!(f, "P({})", dims.join(", "))
    }
}

/// How an array is laid out over a mesh: a mesh and a partition spec
/// (`jax.sharding.NamedSharding`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct NamedSharding {
    mesh: Arc<Mesh>,
    spec: PartitionSpec,
}

impl std::fmt::Display for NamedSharding {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "NamedSharding({}, {})", self.mesh, self.spec)
    }
}

/// `mesh[data=2, model=2]`: the axes and their sizes.
impl std::fmt::Display for Mesh {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let axes: Vec<String> = self.axes.iter().map(|(n, s)| format!("{n}={s}")).collect();
        write!(f, "mesh[{}]", axes.join(", "))
    }
}

impl NamedSharding {
    /// `spec` over `mesh`; its axes must be the mesh's, each used once.
    /// Trailing replicated dimensions are dropped (`P('data', None)` and
    /// `P('data')` are the same sharding).
    pub fn new(mesh: &Arc<Mesh>, mut spec: PartitionSpec) -> Result<NamedSharding> {
        while spec.0.last().is_some_and(Vec::is_empty) {
            spec.0.pop();
        }
        let mut seen: Vec<&str> = Vec::new();
        for axis in spec.0.iter().flatten() {
            mesh.axis_index(axis)?;
            if seen.contains(&axis.as_str()) {
                return Err(Error::Value(format!(
                    "mesh axis {axis:?} is used twice in {spec}"
                )));
            }
            seen.push(axis);
        }
        Ok(NamedSharding {
            mesh: mesh.clone(),
            spec,
        })
    }

    /// Replicated on every device of `mesh`.
    pub fn replicated(mesh: &Arc<Mesh>) -> NamedSharding {
        NamedSharding {
            mesh: mesh.clone(),
            spec: PartitionSpec::replicated(),
        }
    }

    /// The mesh.
    pub fn mesh(&self) -> &Arc<Mesh> {
        &self.mesh
    }

    /// The partition spec.
    pub fn spec(&self) -> &PartitionSpec {
        &self.spec
    }

    /// Is every device holding the whole array?
    pub fn is_replicated(&self) -> bool {
        self.spec.0.iter().all(Vec::is_empty)
    }

    /// Refuses a spec with more dimensions than an array of `rank`.
    pub fn check_rank(&self, rank: usize) -> Result<()> {
        if self.spec.0.len() > rank {
            return Err(Error::Value(format!(
                "{} has {} dimensions, but the array has rank {rank}",
                self.spec,
                self.spec.0.len()
            )));
        }
        Ok(())
    }

    /// How many blocks dimension `dim` is cut into.
    pub(crate) fn tiles(&self, dim: usize) -> usize {
        self.spec.0.get(dim).map_or(1, |axes| {
            axes.iter()
                .map(|a| self.mesh.axis_size(a).unwrap_or(1))
                .product()
        })
    }

    /// The (padded) block each device holds of an array of `global` dims.
    pub fn shard_dims(&self, global: &[i64]) -> Vec<i64> {
        global
            .iter()
            .enumerate()
            .map(|(d, &n)| {
                // ceil(n / t), without overflow for dims near i64::MAX.
                let t = self.tiles(d) as i64;
                n / t + i64::from(n % t > 0)
            })
            .collect()
    }

    /// Do the blocks of `partitions` together cover a rank-`rank` array
    /// (each block of the tiling is among them)?
    pub(crate) fn covers(&self, partitions: &[usize], rank: usize) -> bool {
        let tiles: usize = (0..rank).map(|d| self.tiles(d)).product();
        let held: std::collections::HashSet<Vec<i64>> = partitions
            .iter()
            .map(|&p| self.tile_coordinates(p, rank))
            .collect();
        held.len() == tiles
    }

    /// Is any dimension cut into blocks that do not divide it?
    pub fn is_uneven(&self, global: &[i64]) -> bool {
        global
            .iter()
            .enumerate()
            .any(|(d, &n)| n % self.tiles(d) as i64 != 0)
    }

    /// Where partition `p`'s block starts in the global array.
    pub fn shard_origin(&self, p: usize, global: &[i64]) -> Vec<i64> {
        let block = self.shard_dims(global);
        self.tile_coordinates(p, global.len())
            .iter()
            .zip(&block)
            .map(|(t, b)| t * b)
            .collect()
    }

    /// Which block, counted per dimension, partition `p` holds of a
    /// rank-`rank` array.
    pub(crate) fn tile_coordinates(&self, p: usize, rank: usize) -> Vec<i64> {
        let coords = self.mesh.coordinates(p);
        (0..rank)
            .map(|d| {
                let mut tile = 0;
                for axis in self.spec.0.get(d).into_iter().flatten() {
                    let a = self.mesh.axis_index(axis).unwrap_or(0);
                    tile = tile * self.mesh.axes[a].1 + coords[a];
                }
                tile as i64
            })
            .collect()
    }

    /// The `#sdy.sharding` attribute of this sharding for a rank-`rank`
    /// value, on the mesh declared as `@mesh_name`.
    pub(crate) fn sdy_attribute(&self, mesh_name: &str, rank: usize) -> String {
        let dims: Vec<String> = (0..rank)
            .map(|d| {
                let axes: Vec<String> = self
                    .spec
                    .0
                    .get(d)
                    .into_iter()
                    .flatten()
                    .map(|a| format!("\"{a}\""))
                    .collect();
                format!("{{{}}}", axes.join(", "))
            })
            .collect();
        format!("#sdy.sharding<@{mesh_name}, [{}]>", dims.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mesh(axes: &[(&str, usize)]) -> Arc<Mesh> {
        let n: usize = axes.iter().map(|(_, s)| s).product();
        let devices = crate::tensor::devices().unwrap();
        Mesh::with_devices(devices[..n].to_vec(), axes).unwrap()
    }

    #[test]
    fn blocks_follow_the_mesh_coordinates_major_axis_first() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        let s = NamedSharding::new(&m, PartitionSpec::new([Some("model"), Some("data")])).unwrap();
        assert_eq!(s.shard_dims(&[4, 6]), vec![2, 3]);
        // Device 1 is (data 0, model 1): second row block, first column block.
        assert_eq!(s.shard_origin(1, &[4, 6]), vec![2, 0]);
        assert_eq!(s.shard_origin(2, &[4, 6]), vec![0, 3]);
        let both = NamedSharding::new(
            &m,
            PartitionSpec::with_axes(vec![vec!["data".into(), "model".into()]]),
        )
        .unwrap();
        let origins: Vec<i64> = (0..4).map(|p| both.shard_origin(p, &[8])[0]).collect();
        assert_eq!(origins, vec![0, 2, 4, 6]);
        assert_eq!(
            s.sdy_attribute("mesh", 3),
            "#sdy.sharding<@mesh, [{\"model\"}, {\"data\"}, {}]>"
        );
    }

    #[test]
    fn a_process_can_read_a_value_when_its_blocks_cover_the_tiling() {
        let m = mesh(&[("data", 2), ("model", 2)]);
        let spec = |dims: [Option<&str>; 2]| NamedSharding::new(&m, PartitionSpec::new(dims));
        // Partitions 0 and 1 are (data 0, model 0) and (data 0, model 1).
        let cols = spec([None, Some("model")]).unwrap();
        assert!(cols.covers(&[0, 1], 2));
        assert!(!cols.covers(&[0, 2], 2));
        let rows = spec([Some("data"), None]).unwrap();
        assert!(!rows.covers(&[0, 1], 2) && rows.covers(&[1, 2], 2));
        let both = spec([Some("data"), Some("model")]).unwrap();
        assert!(!both.covers(&[0, 1, 2], 2) && both.covers(&[3, 2, 1, 0], 2));
        assert!(NamedSharding::replicated(&m).covers(&[3], 2));
    }

    #[test]
    fn uneven_blocks_are_padded_up() {
        let m = mesh(&[("data", 4)]);
        let s = NamedSharding::new(&m, PartitionSpec::new([Some("data")])).unwrap();
        assert_eq!(s.shard_dims(&[10, 3]), vec![3, 3]);
        assert!(s.is_uneven(&[10, 3]) && !s.is_uneven(&[8, 3]));
        assert_eq!(s.shard_origin(3, &[10, 3]), vec![9, 0]);
    }

    #[test]
    fn bad_meshes_and_specs_are_refused() {
        let devices = crate::tensor::devices().unwrap();
        let two = devices[..2].to_vec();
        assert!(Mesh::with_devices(two.clone(), &[("data", 3)]).is_err());
        assert!(Mesh::with_devices(two.clone(), &[("a b", 2)]).is_err());
        assert!(Mesh::with_devices(two.clone(), &[("x", 2), ("x", 1)]).is_err());
        assert!(Mesh::with_devices(vec![devices[0], devices[0]], &[("x", 2)]).is_err());
        assert!(Mesh::with_devices(two.clone(), &[]).is_err());
        let m = Mesh::with_devices(two, &[("x", 2)]).unwrap();
        let e = NamedSharding::new(&m, PartitionSpec::new([Some("y")])).unwrap_err();
        assert!(e.to_string().contains("no axis \"y\""), "{e}");
        assert!(NamedSharding::new(&m, PartitionSpec::new([Some("x"), Some("x")])).is_err());
        let s = NamedSharding::new(&m, PartitionSpec::new([None, Some("x")])).unwrap();
        assert!(s.check_rank(1).is_err() && s.check_rank(2).is_ok());
        assert!(Mesh::new(&[("x", 1 << 20)]).is_err());
    }
}
