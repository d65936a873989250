//! `with_sharding_constraint`: inside a function that runs partitioned,
//! pins how an intermediate value is split over the mesh
//! (`jax.lax.with_sharding_constraint`); XLA's partitioner adds the
//! communication that layout needs. The op carries the mesh's axes and
//! the partition spec, not devices: a traced graph knows the mesh only
//! by shape.

use super::{OpDef, expect_arity, grad_or_zeros};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::lower::{Emitter, Val};
use crate::mesh::{MESH_NAME, Mesh, NamedSharding, PartitionSpec, hlo_sharding_text};
use crate::tensor::{Tensor, apply1};

/// The operand, unchanged in value, laid out as `spec` over a mesh of
/// `mesh_axes`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ShardingConstraint {
    pub mesh_axes: Vec<(String, usize)>,
    pub spec: Vec<Vec<String>>,
}

impl ShardingConstraint {
    fn sharding(&self) -> Result<NamedSharding> {
        let mesh = Mesh::abstract_mesh(&self.mesh_axes);
        NamedSharding::new(&mesh, PartitionSpec::with_axes(self.spec.clone()))
    }
}

impl OpDef for ShardingConstraint {
    fn name(&self) -> &'static str {
        "with_sharding_constraint"
    }

    /// The constraint on every example at once: the batch axis is
    /// replicated (a leading `None` in the spec), as JAX's rule does
    /// without `spmd_axis_name`.
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> super::batching::Batched {
        let mut spec = vec![Vec::new()];
        spec.extend(self.spec.iter().cloned());
        let op = ShardingConstraint {
            mesh_axes: self.mesh_axes.clone(),
            spec,
        };
        Some(super::batching::all_batched(op, inputs))
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        if let Some(dims) = inputs[0].shape.dims() {
            self.sharding()?
                .check_rank(dims.len())
                .map_err(|e| Error::invalid(self.name(), e.to_string()))?;
        }
        Ok(vec![inputs[0].clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        // Outside a partitioned program there is nothing to constrain.
        let Some(partitioning) = cx.partitioning() else {
            return Ok(vec![x.clone()]);
        };
        if partitioning.mesh_axes != self.mesh_axes {
            return Err(Error::invalid(
                self.name(),
                format!(
                    "the constraint is over a mesh of axes {:?}, but the function runs on a mesh \
                     of axes {:?}",
                    self.mesh_axes, partitioning.mesh_axes
                ),
            ));
        }
        let sharding = self.sharding()?;
        let rank = x.ty.rank();
        let text = match partitioning.gspmd {
            true => hlo_sharding_text(&sharding, rank),
            false => sharding.sdy_attribute(MESH_NAME, rank),
        };
        Ok(vec![cx.sharding_constraint(x, &text)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        if !inputs[0].dtype().is_inexact() {
            return Ok(vec![None]);
        }
        // The cotangent is laid out like the value.
        let g = grad_or_zeros(grads, &outputs[0])?;
        Ok(vec![Some(apply1(self.clone(), &[&g])?)])
    }
}

/// **Devices and sharding**: asking the compiler for a layout over a mesh.
impl Tensor {
    /// Lays this value out as `sharding` says (`jax.lax.with_sharding_constraint`).
    /// Inside a traced function that runs partitioned, it constrains the
    /// intermediate value and XLA adds the communication; in a function
    /// that runs on one device it does nothing. Eagerly it puts the tensor
    /// onto the sharding, as [`Tensor::shard`].
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::sharding::{Mesh, NamedSharding, PartitionSpec};
    /// let mesh = Mesh::new(&[("data", 4)])?;
    /// let rows = NamedSharding::new(&mesh, PartitionSpec::new([Some("data")]))?;
    /// let cols = NamedSharding::new(&mesh, PartitionSpec::new([None, Some("data")]))?;
    /// let f = FunctionOptions::new().in_shardings(vec![Some(rows)]).build(move |x: Tensor| {
    ///     x.exp()?.with_sharding_constraint(&cols)?.reduce_sum(&[0], false)
    /// });
    /// let x = Tensor::from_vec(vec![0f32; 32], &[8, 4])?;
    /// assert_eq!(f.call((&x,))?.to_vec::<f32>()?, vec![8.; 4]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn with_sharding_constraint(&self, sharding: &NamedSharding) -> Result<Tensor> {
        if !crate::trace::is_tracing() {
            return self.shard(sharding);
        }
        let op = ShardingConstraint {
            mesh_axes: sharding.mesh().axes().to_vec(),
            spec: sharding.spec().dims().to_vec(),
        };
        apply1(op, &[self])
    }
}
