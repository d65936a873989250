//! `shard_map` and its collectives. A `ShardMap` node runs a traced body
//! once per device on that device's blocks (Shardy's manual
//! computation); inside it, `Collective` nodes exchange values between
//! the devices along named mesh axes (`psum`, `all_gather`, ...). The
//! user API is in `crate::sharding::shard_map`.

use super::{OpDef, expect_arity};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Graph, Shape, TensorType};
use crate::lower::emitter::ManualShardings;
use crate::lower::{Combiner, Emitter, Val, lower_subgraph};
use crate::mesh::{MESH_NAME, Mesh, NamedSharding, PartitionSpec};
use crate::tensor::Tensor;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A per-device body over a mesh: inputs are split by `in_specs` (one per
/// input, the body's captured values last and replicated), the body's
/// local results are joined by `out_specs`.
#[derive(Clone, Debug)]
pub struct ShardMap {
    pub mesh: Arc<Mesh>,
    pub in_specs: Vec<PartitionSpec>,
    pub out_specs: Vec<PartitionSpec>,
    pub body: Arc<Graph>,
}

/// Bodies compare by identity, like regions.
impl PartialEq for ShardMap {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.body, &other.body)
            && self.mesh == other.mesh
            && self.in_specs == other.in_specs
            && self.out_specs == other.out_specs
    }
}
impl Eq for ShardMap {}
impl Hash for ShardMap {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.body) as usize).hash(state);
        self.in_specs.hash(state);
        self.out_specs.hash(state);
    }
}

impl ShardMap {
    fn sharding(&self, spec: &PartitionSpec) -> Result<NamedSharding> {
        NamedSharding::new(&self.mesh, spec.clone())
    }

    /// A global type's local block under `spec`, which must divide it.
    fn local(&self, global: &TensorType, spec: &PartitionSpec) -> Result<TensorType> {
        let Some(dims) = global.shape.as_known() else {
            return Ok(TensorType::new(global.dtype, Shape::unknown_rank()));
        };
        let s = self.sharding(spec)?;
        s.check_rank(dims.len())?;
        if s.is_uneven(&dims) {
            return Err(Error::invalid(
                self.name(),
                format!("{s} does not divide an input of shape {dims:?} evenly"),
            ));
        }
        Ok(TensorType::known(global.dtype, &s.shard_dims(&dims)))
    }

    /// A local result's global type under `spec`.
    fn global(&self, local: &TensorType, spec: &PartitionSpec) -> Result<TensorType> {
        let Some(dims) = local.shape.as_known() else {
            return Ok(TensorType::new(local.dtype, Shape::unknown_rank()));
        };
        let s = self.sharding(spec)?;
        s.check_rank(dims.len())?;
        let global: Vec<i64> = dims
            .iter()
            .enumerate()
            .map(|(d, n)| n * s.tiles(d) as i64)
            .collect();
        Ok(TensorType::known(local.dtype, &global))
    }

    fn manual_shardings(&self, ranks_in: &[usize], ranks_out: &[usize]) -> Result<ManualShardings> {
        let per_value = |specs: &[PartitionSpec], ranks: &[usize]| -> Result<String> {
            let items: Vec<String> = specs
                .iter()
                .zip(ranks)
                .map(|(spec, rank)| {
                    let attr = self.sharding(spec)?.sdy_attribute(MESH_NAME, *rank);
                    // `#sdy.sharding<@mesh, ...>` inside a list is `<@mesh, ...>`.
                    Ok(attr.trim_start_matches("#sdy.sharding").to_string())
                })
                .collect::<Result<_>>()?;
            Ok(format!("#sdy.sharding_per_value<[{}]>", items.join(", ")))
        };
        let axes: Vec<String> = self
            .mesh
            .axes()
            .iter()
            .map(|(n, _)| format!("\"{n}\""))
            .collect();
        Ok(ManualShardings {
            inputs: per_value(&self.in_specs, ranks_in)?,
            outputs: per_value(&self.out_specs, ranks_out)?,
            manual_axes: format!("#sdy<manual_axes{{{}}}>", axes.join(", ")),
        })
    }
}

impl OpDef for ShardMap {
    fn name(&self) -> &'static str {
        "shard_map"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, self.in_specs.len())?;
        let local: Vec<TensorType> = inputs
            .iter()
            .zip(&self.in_specs)
            .map(|(t, s)| self.local(t, s))
            .collect::<Result<_>>()?;
        let outs = self.body.infer_results(&local)?;
        outs.iter()
            .zip(&self.out_specs)
            .map(|(t, s)| self.global(t, s))
            .collect()
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        match cx.partitioning() {
            Some(p) if !p.gspmd && p.mesh_axes == self.mesh.axes() => {}
            _ => {
                return Err(Error::invalid(
                    self.name(),
                    "shard_map runs only in a function partitioned over its own mesh with \
                     evenly divided inputs and out_shardings",
                ));
            }
        }
        let local: Vec<ArraySpec> = inputs
            .iter()
            .zip(&self.in_specs)
            .map(|(v, s)| {
                Ok(ArraySpec::new(
                    v.ty.dtype,
                    &self.sharding(s)?.shard_dims(&v.ty.dims),
                ))
            })
            .collect::<Result<_>>()?;
        let ranks_in: Vec<usize> = inputs.iter().map(|v| v.ty.rank()).collect();
        let ranks_out: Vec<usize> = outputs.iter().map(ArraySpec::rank).collect();
        let shardings = self.manual_shardings(&ranks_in, &ranks_out)?;
        let operands: Vec<&Val> = inputs.iter().collect();
        let body = self.body.clone();
        cx.manual_computation(&operands, &shardings, &local, outputs, |cx, args| {
            lower_subgraph(cx, &body, args)
        })
    }

    /// Another `shard_map` of the body's gradient: the rule is
    /// `autodiff::region_rules`, reached through the tape's recorder.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &vec![true; inputs.len()])
    }

    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let op = crate::tensor::hooks::RegionOp::ShardMap(self);
        crate::tensor::hooks::region_vjp(op, inputs, outputs, grads, needed)
    }
}

impl ShardMap {
    /// The mesh axes `spec` leaves out (a value is replicated along them).
    fn unmentioned(&self, spec: &PartitionSpec) -> Vec<String> {
        self.mesh
            .axes()
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !spec.dims().iter().flatten().any(|a| a == n))
            .collect()
    }

    /// How many devices hold each block of a value laid out as `spec`.
    pub(crate) fn replicas(&self, spec: &PartitionSpec) -> usize {
        self.unmentioned(spec)
            .iter()
            .map(|a| self.mesh.axis_size(a).unwrap_or(1))
            .product()
    }

    /// A local gradient summed over the axes `spec` replicates along.
    pub(crate) fn sum_partial(&self, g: Tensor, spec: &PartitionSpec) -> Result<Tensor> {
        let axes = self.unmentioned(spec);
        if self.replicas(spec) <= 1 {
            return Ok(g);
        }
        let op = Collective {
            kind: CollectiveKind::Sum,
            axes,
            mesh_axes: self.mesh.axes().to_vec(),
        };
        crate::tensor::apply1(op, &[&g])
    }
}

/// What a collective does along its mesh axes.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub enum CollectiveKind {
    /// Sum over the axes' devices (`psum`).
    Sum,
    /// Maximum (`pmax`).
    Max,
    /// Minimum (`pmin`).
    Min,
    /// Concatenate the devices' blocks along `dim`, in axis order.
    AllGather { dim: usize },
    /// Sum, then keep this device's block of `dim` (`psum_scatter`).
    ReduceScatter { dim: usize },
    /// Cut `split` into one block per device, exchange, and concatenate
    /// along `concat` (`all_to_all`).
    AllToAll { split: usize, concat: usize },
    /// Send to another device: `(from, to)` axis indices.
    Permute { pairs: Vec<(i64, i64)> },
    /// This device's index along the axes (an `i32` scalar; no input).
    AxisIndex,
}

/// A collective inside a `shard_map` body over `axes` of a mesh whose
/// axes are `mesh_axes`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Collective {
    pub kind: CollectiveKind,
    pub axes: Vec<String>,
    pub mesh_axes: Vec<(String, usize)>,
}

impl Collective {
    /// How many devices each group holds.
    fn group_size(&self) -> usize {
        self.mesh_axes
            .iter()
            .filter(|(n, _)| self.axes.contains(n))
            .map(|(_, s)| s)
            .product()
    }

    /// The groups of partitions that differ only along `axes`, each in
    /// axis order (major axis first, as `axes` lists them).
    fn groups(&self) -> Vec<Vec<i64>> {
        let sizes: Vec<usize> = self.mesh_axes.iter().map(|(_, s)| *s).collect();
        let total: usize = sizes.iter().product();
        let coords = |p: usize| {
            let mut rest = p;
            let mut c = vec![0; sizes.len()];
            for d in (0..sizes.len()).rev() {
                c[d] = rest % sizes[d];
                rest /= sizes[d];
            }
            c
        };
        let inside: Vec<usize> = self
            .axes
            .iter()
            .filter_map(|a| self.mesh_axes.iter().position(|(n, _)| n == a))
            .collect();
        // (coordinates off the axes, [(coordinates on them, partition)])
        type Member = (Vec<usize>, i64);
        let mut groups: Vec<(Vec<usize>, Vec<Member>)> = Vec::new();
        for p in 0..total {
            let c = coords(p);
            let outside: Vec<usize> = (0..sizes.len())
                .filter(|d| !inside.contains(d))
                .map(|d| c[d])
                .collect();
            let order: Vec<usize> = inside.iter().map(|&d| c[d]).collect();
            match groups.iter_mut().find(|(o, _)| *o == outside) {
                Some((_, members)) => members.push((order, p as i64)),
                None => groups.push((outside, vec![(order, p as i64)])),
            }
        }
        groups
            .into_iter()
            .map(|(_, mut members)| {
                members.sort();
                members.into_iter().map(|(_, p)| p).collect()
            })
            .collect()
    }

    /// The dtypes the collective computes on: reductions take numbers
    /// (sums complex ones too, as `reduce_sum` does), moves take any.
    fn check_operand(&self, dtype: DType) -> Result<()> {
        let name = self.name();
        match self.kind {
            CollectiveKind::Sum | CollectiveKind::ReduceScatter { .. } if dtype.is_complex() => {
                Ok(())
            }
            CollectiveKind::Max | CollectiveKind::Min if dtype.is_complex() => {
                super::complex::check_complex_operand(name, dtype, false)
            }
            CollectiveKind::Sum
            | CollectiveKind::Max
            | CollectiveKind::Min
            | CollectiveKind::ReduceScatter { .. } => {
                super::check_dtype(name, dtype, dtype.is_numeric(), "numeric")
            }
            _ => super::check_dtype(name, dtype, true, "any"),
        }
    }

    /// This partition's index along the axes, from its partition id.
    fn axis_index(&self, cx: &mut Emitter) -> Val {
        let id = cx.partition_id();
        let scalar = ArraySpec::scalar(DType::I32);
        let mut index: Option<Val> = None;
        for axis in &self.axes {
            let Some(pos) = self.mesh_axes.iter().position(|(n, _)| n == axis) else {
                continue;
            };
            let stride: usize = self.mesh_axes[pos + 1..].iter().map(|(_, s)| s).product();
            let size = self.mesh_axes[pos].1;
            let stride = cx.constant(crate::ir::Scalar::I64(stride as i64), scalar.clone());
            let size_v = cx.constant(crate::ir::Scalar::I64(size as i64), scalar.clone());
            let coordinate = cx.binary("divide", &id, &stride);
            let coordinate = cx.binary("remainder", &coordinate, &size_v);
            index = Some(match index {
                None => coordinate,
                Some(major) => {
                    let scaled = cx.binary("multiply", &major, &size_v);
                    cx.binary("add", &scaled, &coordinate)
                }
            });
        }
        index.unwrap_or_else(|| cx.constant(crate::ir::Scalar::I64(0), scalar))
    }
}

impl OpDef for Collective {
    fn name(&self) -> &'static str {
        match self.kind {
            CollectiveKind::Sum => "psum",
            CollectiveKind::Max => "pmax",
            CollectiveKind::Min => "pmin",
            CollectiveKind::AllGather { .. } => "all_gather",
            CollectiveKind::ReduceScatter { .. } => "psum_scatter",
            CollectiveKind::AllToAll { .. } => "all_to_all",
            CollectiveKind::Permute { .. } => "ppermute",
            CollectiveKind::AxisIndex => "axis_index",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if self.kind == CollectiveKind::AxisIndex {
            expect_arity(self.name(), inputs, 0)?;
            return Ok(vec![TensorType::known(DType::I32, &[])]);
        }
        expect_arity(self.name(), inputs, 1)?;
        let x = &inputs[0];
        self.check_operand(x.dtype)?;
        let n = self.group_size() as i64;
        let resized = |dim: usize, f: &dyn Fn(i64) -> Result<i64>| -> Result<TensorType> {
            let Some(mut dims) = x.shape.as_known() else {
                return Ok(TensorType::new(x.dtype, Shape::unknown_rank()));
            };
            let d = dims.get_mut(dim).ok_or_else(|| {
                Error::invalid(
                    self.name(),
                    format!("dimension {dim} is out of range for {x}"),
                )
            })?;
            *d = f(*d)?;
            Ok(TensorType::known(x.dtype, &dims))
        };
        Ok(vec![match &self.kind {
            CollectiveKind::AllGather { dim } => resized(*dim, &|d| Ok(d * n))?,
            CollectiveKind::AllToAll { split, concat } => {
                let cut = resized(*split, &|d| match d % n {
                    0 => Ok(d / n),
                    _ => Err(Error::invalid(
                        self.name(),
                        format!("dimension {split} of {x} does not split into {n} equal blocks"),
                    )),
                })?;
                let Some(mut dims) = cut.shape.as_known() else {
                    return Ok(vec![cut]);
                };
                let d = dims.get_mut(*concat).ok_or_else(|| {
                    Error::invalid(
                        self.name(),
                        format!("dimension {concat} is out of range for {x}"),
                    )
                })?;
                *d *= n;
                TensorType::known(x.dtype, &dims)
            }
            CollectiveKind::ReduceScatter { dim } => resized(*dim, &|d| match d % n {
                0 => Ok(d / n),
                _ => Err(Error::invalid(
                    self.name(),
                    format!("dimension {dim} of {x} does not split into {n} equal blocks"),
                )),
            })?,
            _ => x.clone(),
        }])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        // An empty block has nothing to exchange, and StableHLO refuses
        // some collectives of one: the result is empty too.
        if inputs.first().is_some_and(|x| x.ty.dims.contains(&0)) {
            return Ok(vec![
                cx.constant(crate::ir::Scalar::I64(0), outputs[0].clone()),
            ]);
        }
        let groups = self.groups();
        Ok(vec![match &self.kind {
            CollectiveKind::Sum => cx.all_reduce(&inputs[0], &groups, Combiner::Add)?,
            CollectiveKind::Max => cx.all_reduce(&inputs[0], &groups, Combiner::Max)?,
            CollectiveKind::Min => cx.all_reduce(&inputs[0], &groups, Combiner::Min)?,
            CollectiveKind::AllGather { dim } => {
                cx.all_gather(&inputs[0], *dim, &groups, outputs[0].clone())
            }
            CollectiveKind::ReduceScatter { dim } => {
                cx.reduce_scatter(&inputs[0], *dim, &groups, outputs[0].clone())?
            }
            CollectiveKind::AllToAll { split, concat } => {
                cx.all_to_all(&inputs[0], *split, *concat, &groups, outputs[0].clone())
            }
            CollectiveKind::Permute { pairs } => {
                let mut partition_pairs = Vec::new();
                for group in &groups {
                    for &(from, to) in pairs {
                        let at = |i: i64| usize::try_from(i).ok().and_then(|i| group.get(i));
                        if let (Some(a), Some(b)) = (at(from), at(to)) {
                            partition_pairs.push((*a, *b));
                        }
                    }
                }
                // No one sends: every device gets zeros (an empty pair
                // list is no valid `source_target_pairs` attribute).
                if partition_pairs.is_empty() {
                    cx.constant(crate::ir::Scalar::I64(0), inputs[0].ty.clone())
                } else {
                    cx.collective_permute(&inputs[0], &partition_pairs)
                }
            }
            CollectiveKind::AxisIndex => self.axis_index(cx),
        }])
    }

    /// The transposed collective (without replication checking, as the
    /// shard_map rule above assumes): `psum` → `psum`, `all_gather` →
    /// `psum_scatter` and back, `ppermute` → the inverse permutation.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(x) = inputs.first().filter(|x| x.dtype().is_inexact()) else {
            return Ok(vec![None; inputs.len()]);
        };
        let g = super::grad_or_zeros(grads, &outputs[0])?;
        let transposed = match &self.kind {
            CollectiveKind::Sum => CollectiveKind::Sum,
            CollectiveKind::AllGather { dim } => CollectiveKind::ReduceScatter { dim: *dim },
            CollectiveKind::ReduceScatter { dim } => CollectiveKind::AllGather { dim: *dim },
            CollectiveKind::AllToAll { split, concat } => CollectiveKind::AllToAll {
                split: *concat,
                concat: *split,
            },
            CollectiveKind::Permute { pairs } => CollectiveKind::Permute {
                pairs: pairs.iter().map(|(a, b)| (*b, *a)).collect(),
            },
            CollectiveKind::Max | CollectiveKind::Min => {
                // The cotangent, summed over the devices as `psum`'s
                // transpose sums it, goes to those holding the extreme.
                let sum = |t: &Tensor| {
                    let op = Collective {
                        kind: CollectiveKind::Sum,
                        ..self.clone()
                    };
                    crate::tensor::apply1(op, &[t])
                };
                let hit = x.eq(&outputs[0])?.cast(x.dtype())?;
                return Ok(vec![Some(sum(&g)?.mul(&hit)?.div(&sum(&hit)?)?)]);
            }
            CollectiveKind::AxisIndex => return Ok(vec![]),
        };
        let op = Collective {
            kind: transposed,
            ..self.clone()
        };
        Ok(vec![Some(crate::tensor::apply1(op, &[&g])?)])
    }
}
