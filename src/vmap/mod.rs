//! `vmap` (`jax.vmap`) and `vectorized_map` (`tf.vectorized_map`): a
//! function of one example applied to a batch of them as one vectorized
//! computation.
//!
//! The function is traced once on one example's types into a region
//! graph; the graph is then replayed with each op's batching rule
//! (`OpDef::batch`, defined with the op), which computes the op for every
//! example at once on values that carry the batch as a new leading axis.
//! Ops whose inputs carry no batch run once, unbatched. The replay adds
//! ops where it runs: eagerly it runs them, inside a traced function it
//! builds them into the program, and inside another `vmap` it is batched
//! again (nested vmaps).
//!
//! An op without a rule makes the whole function a loop over the
//! examples on the device instead (`for_range`, TensorFlow's
//! `fallback_to_while_loop`), with an `info` line on the `xlafn::vmap`
//! target naming the op.
//!
//! The batching rules that need `vmap` or `control` themselves live here
//! rather than beside their ops (`while_rule.rs`, `custom_gradient_rule.rs`),
//! registered into `tensor::hooks` before the first replay.
//!
//! Layer: beside `control`. Imports `trace` (region traces),
//! `ops::batching` (the rules), `control` (the fallback loop), `tensor`.

mod custom_gradient_rule;
mod while_rule;

use crate::control::{TensorArray, for_range};
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType};
use crate::ops::batching::{self, materialized};
use crate::tensor::Tensor;
use crate::tensor::hooks::RegionBatchOp;
use crate::trace;

/// `f` mapped over the first axis of every input (`jax.vmap(f)`): output
/// `k` stacks `f`'s output `k` for each example along a new first axis.
///
/// ```
/// use xlafn::prelude::*;
/// let xs = Tensor::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2])?;
/// let w = Tensor::from_vec(vec![1f32, 0., 0., 2.], &[2, 2])?;
/// // One example: a [2] vector times a matrix.
/// let ys = xlafn::vmap(|x| Ok(vec![x[0].reshape(&[1, 2])?.matmul(&w)?.reshape(&[2])?]), &[xs])?;
/// assert_eq!(ys[0].to_vec::<f32>()?, vec![1., 4., 3., 8., 5., 12.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn vmap(
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
) -> Result<Vec<Tensor>> {
    vmap_with(f, inputs, &vec![Some(0); inputs.len()], 0)
}

/// TensorFlow's name for [`vmap`]: `fn` applied to the slices of `elems`
/// along their first axis. As in TensorFlow, an element whose first axis
/// has size 1 while others have `n` is broadcast: every example gets its
/// one slice.
///
/// ```
/// use xlafn::prelude::*;
/// let xs = Tensor::from_vec(vec![1f32, 2., 3.], &[3, 1])?;
/// let scale = Tensor::from_vec(vec![10f32], &[1, 1])?; // shared by all 3
/// let ys = xlafn::vectorized_map(|e| Ok(vec![&e[0] * &e[1]]), &[xs, scale])?;
/// assert_eq!(ys[0].to_vec::<f32>()?, vec![10., 20., 30.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn vectorized_map(
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    elems: &[Tensor],
) -> Result<Vec<Tensor>> {
    let leading = |t: &Tensor| t.dims().first().copied();
    let n = elems.iter().filter_map(leading).max();
    let mut shared = Vec::with_capacity(elems.len());
    let mut in_axes = Vec::with_capacity(elems.len());
    for e in elems {
        if n.is_some_and(|n| n > 1) && leading(e) == Some(1) {
            shared.push(e.reshape(&e.dims()[1..])?);
            in_axes.push(None);
        } else {
            shared.push(e.clone());
            in_axes.push(Some(0));
        }
    }
    vmap_with(f, &shared, &in_axes, 0)
}

/// Where `vmap`'s outputs put the examples (`jax.vmap`'s `out_axes`):
/// one axis for every output (from an `i64`), or one entry per output,
/// `None` for an output that does not depend on the mapped inputs and is
/// returned once, unstacked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutAxes {
    /// The same axis for every output.
    All(i64),
    /// One entry per output; `None` for an unmapped output.
    PerOutput(Vec<Option<i64>>),
}

impl From<i64> for OutAxes {
    fn from(axis: i64) -> OutAxes {
        OutAxes::All(axis)
    }
}

impl From<Vec<Option<i64>>> for OutAxes {
    fn from(axes: Vec<Option<i64>>) -> OutAxes {
        OutAxes::PerOutput(axes)
    }
}

impl From<&[Option<i64>]> for OutAxes {
    fn from(axes: &[Option<i64>]) -> OutAxes {
        OutAxes::PerOutput(axes.to_vec())
    }
}

/// [`vmap`] with `in_axes` (per input: the axis holding the examples, or
/// `None` for an input every example shares) and `out_axes` (where the
/// outputs put the examples: see [`OutAxes`]), as `jax.vmap(f, in_axes,
/// out_axes)`.
///
/// ```
/// use xlafn::prelude::*;
/// let xs = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
/// let w = Tensor::vector(&[1f32, 1.])?;
/// // The second output is the same for every example: out_axes None.
/// let out = xlafn::vmap_with(
///     |a| Ok(vec![&a[0] * &a[1], a[1].reduce_sum(&[], false)?]),
///     &[xs, w],
///     &[Some(0), None],
///     vec![Some(1), None],
/// )?;
/// assert_eq!(out[0].to_vec::<f32>()?, vec![1., 3., 2., 4.]);
/// assert_eq!(out[1].item::<f32>()?, 2.0);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn vmap_with(
    f: impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[Tensor],
    in_axes: &[Option<i64>],
    out_axes: impl Into<OutAxes>,
) -> Result<Vec<Tensor>> {
    let out_axes = out_axes.into();
    if in_axes.len() != inputs.len() {
        return Err(Error::invalid(
            "vmap",
            format!("{} in_axes for {} inputs", in_axes.len(), inputs.len()),
        ));
    }
    let (size, canonical) = batch_first(inputs, in_axes)?;
    let example_types = canonical
        .iter()
        .map(|(t, batched)| example_type(t, *batched))
        .collect::<Result<Vec<_>>>()?;
    let region = trace::trace_region(&example_types, &[], |args| f(&args))?;
    if region.variables.iter().any(|v| v.written) {
        return Err(Error::invalid(
            "vmap",
            "the function assigns a variable; a mapped function must be pure (return the new \
             values and assign them outside)",
        ));
    }
    let graph = &region.trace.graph;
    let captured = trace::capture_inputs(&region.trace.captures)?;
    let outputs = match vectorized(graph, &canonical, &captured, size)? {
        Ok(outputs) => outputs,
        Err(op) => {
            tracing::info!(
                target: "xlafn::vmap",
                "vmap: `{op}` has no batching rule; the function runs as a loop over its {size} \
                 examples on the device"
            );
            let types: Vec<TensorType> = graph
                .results()
                .iter()
                .map(|&v| graph.value_type(v).clone())
                .collect();
            looped(&f, &canonical, &types, size)?
        }
    };
    let per_output = match out_axes {
        OutAxes::All(axis) => vec![Some(axis); outputs.len()],
        OutAxes::PerOutput(axes) if axes.len() == outputs.len() => axes,
        OutAxes::PerOutput(axes) => {
            return Err(Error::invalid(
                "vmap",
                format!("{} out_axes for {} outputs", axes.len(), outputs.len()),
            ));
        }
    };
    outputs
        .into_iter()
        .zip(per_output)
        .enumerate()
        .map(|(k, ((t, batched), axis))| match axis {
            Some(axis) => move_batch_axis(&materialized(&t, batched, size)?, axis),
            None if !batched => Ok(t),
            None => Err(Error::invalid(
                "vmap",
                format!(
                    "out_axes[{k}] is None, but output {k} depends on the mapped inputs (it \
                     differs per example); give it an axis"
                ),
            )),
        })
        .collect()
}

/// The batch size and the inputs with their example axis moved first
/// (each with whether it is batched).
fn batch_first(inputs: &[Tensor], in_axes: &[Option<i64>]) -> Result<(i64, Vec<(Tensor, bool)>)> {
    let mut size = None;
    let mut out = Vec::with_capacity(inputs.len());
    for (k, (t, axis)) in inputs.iter().zip(in_axes).enumerate() {
        let Some(axis) = axis else {
            out.push((t.clone(), false));
            continue;
        };
        let rank = t.rank() as i64;
        let a = if *axis < 0 { axis + rank } else { *axis };
        if !(0..rank).contains(&a) {
            return Err(Error::invalid(
                "vmap",
                format!(
                    "in_axes[{k}] = {axis} is out of range for input {k}, {}",
                    t.tensor_type()
                ),
            ));
        }
        let n = t.dims()[a as usize];
        match size {
            Some(s) if s != n => {
                return Err(Error::invalid(
                    "vmap",
                    format!(
                        "input {k} has {n} examples on axis {a}, but an earlier input has {s}; \
                         every mapped input needs the same number"
                    ),
                ));
            }
            _ => size = Some(n),
        }
        let mut perm: Vec<i64> = vec![a];
        perm.extend((0..rank).filter(|&d| d != a));
        out.push((t.transpose(&perm)?, true));
    }
    let size =
        size.ok_or_else(|| Error::invalid("vmap", "no input is mapped (every in_axes is None)"))?;
    Ok((size, out))
}

/// One example's type: the batched value without its first axis.
fn example_type(t: &Tensor, batched: bool) -> Result<TensorType> {
    let dims = t.shape().as_known().ok_or_else(|| {
        Error::invalid(
            "vmap",
            format!("an input needs a known shape, got {}", t.tensor_type()),
        )
    })?;
    let dims = if batched { &dims[1..] } else { &dims[..] };
    Ok(TensorType::new(t.dtype(), Shape::known(dims)))
}

/// Replays `graph` with the batching rules (the region's arguments, then
/// its captures, unbatched); `Err(op)` names the first op on batched
/// values that has none.
fn vectorized(
    graph: &crate::ir::Graph,
    inputs: &[(Tensor, bool)],
    captured: &[Tensor],
    size: i64,
) -> Result<std::result::Result<Vec<(Tensor, bool)>, &'static str>> {
    crate::tensor::hooks::register_region_batch(region_batch);
    let fed = inputs
        .iter()
        .cloned()
        .chain(captured.iter().map(|t| (t.clone(), false)));
    batching::replay(graph, fed.collect(), size)
}

/// The batching rules of the ops whose rules are written here.
fn region_batch(
    op: RegionBatchOp<'_>,
    inputs: &[Tensor],
    batched: &[bool],
    size: i64,
) -> batching::Batched {
    match op {
        RegionBatchOp::While(op) => while_rule::batch_while(op, inputs, batched, size),
        RegionBatchOp::CustomGradient(op) => Some(custom_gradient_rule::batch_custom_gradient(
            op, inputs, batched, size,
        )),
    }
}

/// The fallback: `f` on each example in a loop on the device, its
/// outputs written into arrays of `types` (one example's) and stacked.
fn looped(
    f: &impl Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    inputs: &[(Tensor, bool)],
    types: &[TensorType],
    size: i64,
) -> Result<Vec<(Tensor, bool)>> {
    let examples = inputs
        .iter()
        .map(|(t, b)| b.then(|| TensorArray::unstack(t)).transpose())
        .collect::<Result<Vec<_>>>()?;
    let arrays = types
        .iter()
        .map(|t| {
            let dims = t.shape.as_known().unwrap_or_default();
            TensorArray::new(t.dtype, size).with_element_shape(&dims)
        })
        .collect::<Result<Vec<_>>>()?;
    let filled = for_range(
        0i32,
        size as i32,
        1i32,
        arrays,
        |i, arrays: Vec<TensorArray>| {
            let args = inputs
                .iter()
                .zip(&examples)
                .map(|((t, _), e)| match e {
                    Some(e) => e.read(&i),
                    None => Ok(t.clone()),
                })
                .collect::<Result<Vec<_>>>()?;
            let outs = f(&args)?;
            arrays
                .iter()
                .zip(&outs)
                .map(|(a, o)| a.write(&i, o))
                .collect::<Result<Vec<_>>>()
        },
    )?;
    filled.iter().map(|a| Ok((a.stack()?, true))).collect()
}

/// `t` with its first axis moved to `axis`.
fn move_batch_axis(t: &Tensor, axis: i64) -> Result<Tensor> {
    let rank = t.rank() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    if !(0..rank).contains(&a) {
        return Err(Error::invalid(
            "vmap",
            format!("out_axes = {axis} is out of range for an output of rank {rank}"),
        ));
    }
    if a == 0 {
        return Ok(t.clone());
    }
    let mut perm: Vec<i64> = (1..rank).collect();
    perm.insert(a as usize, 0);
    t.transpose(&perm)
}
