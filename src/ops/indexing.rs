//! Indexing at run-time positions: `dynamic_slice` and
//! `dynamic_update_slice`, the building blocks of `TensorArray` reads and
//! writes inside compiled loops.
//!
//! Start indices are integer scalar tensors, one per dimension. As in XLA,
//! they are clamped so the window stays inside the array (an index past the
//! end reads or writes the last full window) rather than raising.

use super::batching;
use super::{OpDef, describe};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

fn check_indices(
    op: &str,
    x: &TensorType,
    indices: &[TensorType],
    all: &[TensorType],
) -> Result<()> {
    if let Some(rank) = x.rank()
        && rank != indices.len()
    {
        return Err(Error::invalid(
            op,
            format!(
                "needs {rank} start indices, got {} ({})",
                indices.len(),
                describe(all)
            ),
        ));
    }
    let first = indices.first().map(|t| t.dtype);
    for t in indices {
        if !t.dtype.is_int() || t.rank().is_some_and(|r| r != 0) || Some(t.dtype) != first {
            return Err(Error::invalid(
                op,
                format!(
                    "start indices must be integer scalars of one dtype ({})",
                    describe(all)
                ),
            ));
        }
    }
    Ok(())
}

/// A window of fixed `sizes` at run-time start indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DynamicSlice {
    pub sizes: Vec<i64>,
}

impl DynamicSlice {
    /// The batching rule when some start differs per example: each axis
    /// in turn is cut by `take_along_axis` at `start + 0..size` (the start
    /// clamped into the axis as XLA clamps it), the batch axis carrying a
    /// row of indices per example.
    fn per_example_starts(
        &self,
        inputs: &[Tensor],
        batched: &[bool],
        size: i64,
    ) -> Result<Vec<(Tensor, bool)>> {
        let mut x = batching::materialized(&inputs[0], batched[0], size)?;
        for (d, ((start, &start_batched), &len)) in inputs[1..]
            .iter()
            .zip(&batched[1..])
            .zip(&self.sizes)
            .enumerate()
        {
            let current = x.dims();
            let last = Tensor::try_scalar((current[d + 1] - len) as i32)?;
            let start = start
                .cast(crate::DType::I32)?
                .maximum(&Tensor::try_scalar(0i32)?)?
                .minimum(&last)?;
            let per_example = if start_batched {
                start.reshape(&[size, 1])?
            } else {
                start.reshape(&[1, 1])?.broadcast_to(&[size, 1])?
            };
            let rows = per_example.add(&Tensor::iota(&[1, len], 1, crate::DType::I32)?)?;
            let mut shape = vec![1; current.len()];
            shape[0] = size;
            shape[d + 1] = len;
            let mut target = current.clone();
            target[d + 1] = len;
            let idx = rows.reshape(&shape)?.broadcast_to(&target)?;
            x = x.gather_along_axis(&idx, d as i64 + 1)?;
        }
        Ok(vec![(x, true)])
    }
}

impl OpDef for DynamicSlice {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        if batched[1..].contains(&true) {
            return Some(self.per_example_starts(inputs, batched, size));
        }
        let index_dtype = inputs.get(1).map_or(crate::DType::I32, Tensor::dtype);
        let zero = match Tensor::try_scalar(0i32).and_then(|z| z.cast(index_dtype)) {
            Ok(z) => z,
            Err(e) => return Some(Err(e)),
        };
        let mut ins = vec![inputs[0].clone(), zero];
        ins.extend(inputs[1..].iter().cloned());
        let sizes = [&[size][..], &self.sizes].concat();
        Some(batching::all_batched(DynamicSlice { sizes }, &ins))
    }

    fn name(&self) -> &'static str {
        "dynamic_slice"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let (x, idx) = inputs
            .split_first()
            .ok_or_else(|| Error::invalid("dynamic_slice", "needs an operand"))?;
        check_indices("dynamic_slice", x, idx, inputs)?;
        if self.sizes.len() != idx.len() {
            return Err(Error::invalid(
                "dynamic_slice",
                format!("{} sizes for {} indices", self.sizes.len(), idx.len()),
            ));
        }
        if let Some(dims) = x.shape.dims() {
            for (i, (d, s)) in dims.iter().zip(&self.sizes).enumerate() {
                if *s < 0 || d.is_some_and(|d| *s > d) {
                    return Err(Error::invalid(
                        "dynamic_slice",
                        format!(
                            "size {s} of dimension {i} does not fit {}",
                            describe(inputs)
                        ),
                    ));
                }
            }
        }
        Ok(vec![TensorType::new(x.dtype, Shape::known(&self.sizes))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let starts: Vec<&Val> = inputs[1..].iter().collect();
        Ok(vec![cx.dynamic_slice(&inputs[0], &starts, &self.sizes)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let x = &inputs[0];
        let mut out = vec![None; inputs.len()];
        if x.dtype().is_inexact() {
            let g = super::grad_or_zeros(grads, &outputs[0])?;
            out[0] = Some(x.zeros_like()?.dynamic_update_slice(&g, &inputs[1..])?);
        }
        Ok(out)
    }
}

/// `x` with `update` written at run-time start indices.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub struct DynamicUpdateSlice;

/// The batching rule of `dynamic_update_slice` when some start differs
/// per example: a scatter of the update to the coordinates
/// `(example, start + 0..size)` per axis (each start clamped as XLA clamps
/// it, so the update fits).
fn per_example_update(
    inputs: &[Tensor],
    batched: &[bool],
    size: i64,
) -> Result<Vec<(Tensor, bool)>> {
    let operand = batching::materialized(&inputs[0], batched[0], size)?;
    let update = batching::materialized(&inputs[1], batched[1], size)?;
    let (dims, update_dims) = (operand.dims(), update.dims());
    let mut coordinates = vec![Tensor::iota(&update_dims, 0, crate::DType::I32)?];
    for (k, (start, &start_batched)) in inputs[2..].iter().zip(&batched[2..]).enumerate() {
        let last = Tensor::try_scalar((dims[k + 1] - update_dims[k + 1]) as i32)?;
        let start = start
            .cast(crate::DType::I32)?
            .maximum(&Tensor::try_scalar(0i32)?)?
            .minimum(&last)?;
        let mut shape = vec![1; update_dims.len()];
        shape[0] = if start_batched { size } else { 1 };
        let along = Tensor::iota(&update_dims, k as i64 + 1, crate::DType::I32)?;
        coordinates.push(along.add(&start.reshape(&shape)?)?);
    }
    let indices = Tensor::stack(&coordinates, -1)?;
    Ok(vec![(
        operand.tensor_scatter_nd_update(&indices, &update)?,
        true,
    )])
}

impl OpDef for DynamicUpdateSlice {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        if batched[2..].contains(&true) {
            return Some(per_example_update(inputs, batched, size));
        }
        let run = || -> Result<Vec<(Tensor, bool)>> {
            let operand = batching::materialized(&inputs[0], batched[0], size)?;
            let update = batching::materialized(&inputs[1], batched[1], size)?;
            let index_dtype = inputs.get(2).map_or(crate::DType::I32, Tensor::dtype);
            let mut ins = vec![
                operand,
                update,
                Tensor::try_scalar(0i32)?.cast(index_dtype)?,
            ];
            ins.extend(inputs[2..].iter().cloned());
            batching::all_batched(DynamicUpdateSlice, &ins)
        };
        Some(run())
    }

    fn name(&self) -> &'static str {
        "dynamic_update_slice"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        if inputs.len() < 2 {
            return Err(Error::invalid(
                "dynamic_update_slice",
                "needs an operand and an update",
            ));
        }
        let (x, update, idx) = (&inputs[0], &inputs[1], &inputs[2..]);
        check_indices("dynamic_update_slice", x, idx, inputs)?;
        let fits = match (x.shape.dims(), update.shape.dims()) {
            (Some(a), Some(b)) => {
                a.len() == b.len()
                    && a.iter().zip(b).all(|(p, q)| {
                        matches!((p, q), (Some(p), Some(q)) if q <= p) || p.is_none() || q.is_none()
                    })
            }
            _ => true,
        };
        if x.dtype != update.dtype || !fits {
            return Err(Error::invalid(
                "dynamic_update_slice",
                format!(
                    "the update must have the operand's dtype and rank and fit inside it ({})",
                    describe(inputs)
                ),
            ));
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let starts: Vec<&Val> = inputs[2..].iter().collect();
        Ok(vec![
            cx.dynamic_update_slice(&inputs[0], &inputs[1], &starts),
        ])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (x, update, starts) = (&inputs[0], &inputs[1], &inputs[2..]);
        let mut out = vec![None; inputs.len()];
        if x.dtype().is_inexact() {
            let g = super::grad_or_zeros(grads, &outputs[0])?;
            // The window was overwritten: x gets the gradient outside it,
            // the update the gradient inside it.
            out[0] = Some(g.dynamic_update_slice(&update.zeros_like()?, starts)?);
            out[1] = Some(g.dynamic_slice(starts, &update.dims())?);
        }
        Ok(out)
    }
}

/// **Indexing**: slices at run-time offsets, read and written.
impl Tensor {
    /// The `sizes` window starting at `starts` (integer scalar tensors, one
    /// per dimension, clamped into range as XLA does).
    #[track_caller]
    pub fn dynamic_slice(&self, starts: &[Tensor], sizes: &[i64]) -> Result<Tensor> {
        let mut inputs = vec![self];
        inputs.extend(starts);
        apply1(
            DynamicSlice {
                sizes: sizes.to_vec(),
            },
            &inputs,
        )
    }

    /// This tensor with `update` written at `starts` (clamped so it fits).
    #[track_caller]
    pub fn dynamic_update_slice(&self, update: &Tensor, starts: &[Tensor]) -> Result<Tensor> {
        let mut inputs = vec![self, update];
        inputs.extend(starts);
        apply1(DynamicUpdateSlice, &inputs)
    }
}
