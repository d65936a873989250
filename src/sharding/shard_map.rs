//! `shard_map` (`jax.shard_map`): a body written per device, on its local
//! blocks, with explicit collectives between devices along named mesh
//! axes. The body is traced once at the local shapes and lowered as
//! Shardy's manual computation, inside a function that runs partitioned
//! over the mesh.

use super::{Mesh, NamedSharding, PartitionSpec};
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::ops::shard_map::{Collective, CollectiveKind, ShardMap};
use crate::tensor::{Tensor, apply, apply1};
use crate::trace;
use std::cell::RefCell;
use std::sync::Arc;

thread_local! {
    /// The meshes of the `shard_map` bodies being traced on this thread.
    static BODIES: RefCell<Vec<Arc<Mesh>>> = const { RefCell::new(Vec::new()) };
}

/// Runs `body` once per device of `mesh` on that device's blocks of
/// `inputs` (split as `in_specs` say) and joins the blocks it returns as
/// `out_specs` say. Inside `body`, [`psum`], [`all_gather`] and the other
/// collectives exchange values along mesh axes. Call it inside a traced
/// function: the function then runs partitioned over `mesh`. Inputs must
/// split evenly; values the body captures are replicated.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::sharding::{Mesh, PartitionSpec, all_gather, psum, shard_map};
/// let mesh = Mesh::new(&[("data", 4)])?;
/// let f = {
///     let mesh = mesh.clone();
///     function(move |x: Tensor| -> Result<Vec<Tensor>> {
///         let rows = PartitionSpec::new([Some("data")]);
///         shard_map(&mesh, &[rows.clone()], &[PartitionSpec::replicated(), rows], &[&x], |local| {
///             let total = psum(&local[0].reduce_sum(&[], false)?, "data")?;
///             Ok(vec![total, all_gather(&local[0], "data", 0)?.reduce_sum(&[0], true)?])
///         })
///     })
/// };
/// let out = f.call((Tensor::from_vec((1..=8).map(|i| i as f32).collect(), &[8])?,))?;
/// assert_eq!(out[0].to_vec::<f32>()?, vec![36.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn shard_map(
    mesh: &Arc<Mesh>,
    in_specs: &[PartitionSpec],
    out_specs: &[PartitionSpec],
    inputs: &[&Tensor],
    body: impl FnOnce(Vec<Tensor>) -> Result<Vec<Tensor>>,
) -> Result<Vec<Tensor>> {
    if !trace::is_tracing() {
        return Err(Error::Value(
            "shard_map is traced: call it inside a function (the function then runs over the \
             mesh)"
                .into(),
        ));
    }
    if let Some(outer) = BODIES.with(|b| b.borrow().last().cloned()) {
        let axes: Vec<&str> = outer.axes().iter().map(|(n, _)| n.as_str()).collect();
        return Err(Error::Value(format!(
            "shard_map cannot run inside a shard_map body: the outer one already runs per \
             device on every axis of its mesh {axes:?}; call the inner body directly"
        )));
    }
    if in_specs.len() != inputs.len() {
        return Err(Error::Value(format!(
            "shard_map got {} inputs but {} in_specs",
            inputs.len(),
            in_specs.len()
        )));
    }
    let local: Vec<TensorType> = inputs
        .iter()
        .zip(in_specs)
        .map(|(t, spec)| local_type(mesh, t, spec))
        .collect::<Result<_>>()?;
    BODIES.with(|b| b.borrow_mut().push(mesh.clone()));
    let traced = trace::trace_region(&local, &[], body);
    BODIES.with(|b| b.borrow_mut().pop());
    let traced = traced?;
    if !traced.variables.is_empty() {
        return Err(Error::Value(
            "a shard_map body cannot use variables: read them outside and pass the values in"
                .into(),
        ));
    }
    let captured = trace::capture_inputs(&traced.trace.captures)?;
    let graph = traced.trace.graph;
    if graph.results().len() != out_specs.len() {
        return Err(Error::Value(format!(
            "the shard_map body returned {} values but {} out_specs are given",
            graph.results().len(),
            out_specs.len()
        )));
    }
    let mut specs = in_specs.to_vec();
    specs.extend(captured.iter().map(|_| PartitionSpec::replicated()));
    for spec in specs.iter().chain(out_specs) {
        NamedSharding::new(mesh, spec.clone())?;
    }
    let op = ShardMap {
        mesh: mesh.clone(),
        in_specs: specs,
        out_specs: out_specs.to_vec(),
        body: Arc::new(graph),
    };
    let all: Vec<&Tensor> = inputs.iter().copied().chain(&captured).collect();
    apply(op, &all)
}

/// An input's block type: its shape divided by the spec's tiles.
fn local_type(mesh: &Arc<Mesh>, t: &Tensor, spec: &PartitionSpec) -> Result<TensorType> {
    let dims = t.shape().as_known().ok_or_else(|| {
        Error::Value(format!(
            "shard_map needs inputs of known shape, got {}",
            t.tensor_type()
        ))
    })?;
    let sharding = NamedSharding::new(mesh, spec.clone())?;
    sharding.check_rank(dims.len())?;
    if sharding.is_uneven(&dims) {
        return Err(Error::Value(format!(
            "shard_map: {sharding} does not divide an input of shape {dims:?} evenly"
        )));
    }
    Ok(TensorType::known(t.dtype(), &sharding.shard_dims(&dims)))
}

/// The mesh axes a collective acts along: one name (`"data"`) or several
/// (`["data", "model"]`, JAX's tuple of axis names). Over several axes a
/// collective acts on the devices of all of them together, indexed in
/// the order given (the first axis major), as JAX does.
pub trait AxisNames {
    /// The names, in order.
    fn axis_names(&self) -> Vec<String>;
}

impl AxisNames for str {
    fn axis_names(&self) -> Vec<String> {
        vec![self.to_string()]
    }
}

impl AxisNames for String {
    fn axis_names(&self) -> Vec<String> {
        vec![self.clone()]
    }
}

impl<T: AsRef<str>> AxisNames for [T] {
    fn axis_names(&self) -> Vec<String> {
        self.iter().map(|a| a.as_ref().to_string()).collect()
    }
}

impl<T: AsRef<str>, const N: usize> AxisNames for [T; N] {
    fn axis_names(&self) -> Vec<String> {
        self.as_slice().axis_names()
    }
}

impl<T: AsRef<str>> AxisNames for Vec<T> {
    fn axis_names(&self) -> Vec<String> {
        self.as_slice().axis_names()
    }
}

impl<A: AxisNames + ?Sized> AxisNames for &A {
    fn axis_names(&self) -> Vec<String> {
        (**self).axis_names()
    }
}

/// The innermost shard_map body's mesh, and `axes` checked against it:
/// at least one, each an axis of the mesh, none twice.
fn body_axes(axes: &(impl AxisNames + ?Sized)) -> Result<(Arc<Mesh>, Vec<String>)> {
    let names = axes.axis_names();
    let mesh = BODIES.with(|b| b.borrow().last().cloned()).ok_or_else(|| {
        Error::Value(format!(
            "collectives run inside a shard_map body; {} names no axis here",
            shown(&names)
        ))
    })?;
    if names.is_empty() {
        return Err(Error::Value(
            "a collective needs at least one mesh axis name".into(),
        ));
    }
    for (i, name) in names.iter().enumerate() {
        mesh.axis_size(name)?;
        if names[..i].contains(name) {
            return Err(Error::Value(format!(
                "mesh axis {name:?} is named twice in {names:?}"
            )));
        }
    }
    Ok((mesh, names))
}

/// Axis names as an error shows them: `"data"`, or `["data", "model"]`.
fn shown(names: &[String]) -> String {
    match names {
        [one] => format!("{one:?}"),
        _ => format!("{names:?}"),
    }
}

/// The collective `kind` along `axes` of the innermost body's mesh.
fn collective(
    kind: CollectiveKind,
    axes: &(impl AxisNames + ?Sized),
    inputs: &[&Tensor],
) -> Result<Tensor> {
    let (mesh, axes) = body_axes(axes)?;
    let op = Collective {
        kind,
        axes,
        mesh_axes: mesh.axes().to_vec(),
    };
    apply1(op, inputs)
}

/// The sum of `x` over the devices along `axis` (`jax.lax.psum`).
pub fn psum(x: &Tensor, axis: impl AxisNames) -> Result<Tensor> {
    collective(CollectiveKind::Sum, &axis, &[x])
}

/// The mean of `x` over the devices along `axis` (`jax.lax.pmean`);
/// integers are divided as [`Tensor::div`] divides them, to a float.
pub fn pmean(x: &Tensor, axis: impl AxisNames) -> Result<Tensor> {
    let n = axis_size(&axis)?;
    let sum = psum(x, &axis)?;
    match x.dtype().is_inexact() {
        true => sum.mul_scalar(1.0 / n as f64),
        // 1/n has no integer value: divide by n itself.
        false => sum.div_scalar(n as f64),
    }
}

/// The maximum of `x` over the devices along `axis`.
pub fn pmax(x: &Tensor, axis: impl AxisNames) -> Result<Tensor> {
    collective(CollectiveKind::Max, &axis, &[x])
}

/// The minimum of `x` over the devices along `axis`.
pub fn pmin(x: &Tensor, axis: impl AxisNames) -> Result<Tensor> {
    collective(CollectiveKind::Min, &axis, &[x])
}

/// The devices' `x` along `axis`, concatenated along `dim` in axis order
/// (`jax.lax.all_gather(..., tiled=True)`).
pub fn all_gather(x: &Tensor, axis: impl AxisNames, dim: usize) -> Result<Tensor> {
    collective(CollectiveKind::AllGather { dim }, &axis, &[x])
}

/// The sum over `axis` of `x`, of which each device keeps its block of
/// `dim` (`jax.lax.psum_scatter(..., tiled=True)`).
pub fn psum_scatter(x: &Tensor, axis: impl AxisNames, dim: usize) -> Result<Tensor> {
    collective(CollectiveKind::ReduceScatter { dim }, &axis, &[x])
}

/// Cuts dimension `split` of `x` into one block per device along `axis`,
/// sends block `i` to the `i`-th device, and concatenates the blocks each
/// device receives along `concat` (`jax.lax.all_to_all(..., tiled=True)`).
pub fn all_to_all(x: &Tensor, axis: impl AxisNames, split: usize, concat: usize) -> Result<Tensor> {
    collective(CollectiveKind::AllToAll { split, concat }, &axis, &[x])
}

/// Sends `x` between the devices along `axis`: for each `(from, to)`
/// pair of axis indices, device `to` receives `from`'s value; devices no
/// one sends to get zeros (`jax.lax.ppermute`).
pub fn ppermute(x: &Tensor, axis: impl AxisNames, pairs: &[(i64, i64)]) -> Result<Tensor> {
    let n = axis_size(&axis)? as i64;
    if let Some(p) = pairs
        .iter()
        .find(|(a, b)| !(0..n).contains(a) || !(0..n).contains(b))
    {
        return Err(Error::Value(format!(
            "ppermute pair {p:?} is outside axis {} of size {n}",
            shown(&axis.axis_names())
        )));
    }
    for (i, (from, to)) in pairs.iter().enumerate() {
        if pairs[..i].iter().any(|(_, t)| t == to) {
            return Err(Error::Value(format!(
                "ppermute sends two values to one device ({to}): {pairs:?}"
            )));
        }
        if pairs[..i].iter().any(|(f, _)| f == from) {
            return Err(Error::Value(format!(
                "ppermute sends from device {from} twice: {pairs:?}; each device sends at most \
                 once"
            )));
        }
    }
    collective(
        CollectiveKind::Permute {
            pairs: pairs.to_vec(),
        },
        &axis,
        &[x],
    )
}

/// This device's index along `axis`, an `i32` scalar (`jax.lax.axis_index`).
pub fn axis_index(axis: impl AxisNames) -> Result<Tensor> {
    collective(CollectiveKind::AxisIndex, &axis, &[])
}

/// The size of `axis` of the innermost shard_map body's mesh; over
/// several axes, the product of their sizes.
pub fn axis_size(axis: impl AxisNames) -> Result<usize> {
    let (mesh, names) = body_axes(&axis).map_err(|e| match e {
        Error::Value(m) if m.starts_with("collectives run") => Error::Value(format!(
            "{}: axis sizes are known inside a shard_map body",
            shown(&axis.axis_names())
        )),
        other => other,
    })?;
    names.iter().map(|n| mesh.axis_size(n)).product()
}
