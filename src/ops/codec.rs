//! The versioned, serializable form of a traced graph: what an export
//! keeps so that a loading process can specialize the function for input
//! shapes nobody compiled for (B27, shape-polymorphic exports).
//!
//! Ops are written with their attributes (serde derives on each op's own
//! struct); regions of `cond`/`while` nest their graphs; host callbacks
//! are written as an index into the export's declared callbacks and bound
//! to the loading process's closures when read. Values are renumbered:
//! parameters first, then node outputs in node order.
//!
//! Reading is for untrusted files: every index is checked, and the graph
//! is rebuilt through `Graph::add_param`/`add_node`, so each op's own
//! shape rule validates it exactly as when a user applies it; a file can
//! express nothing a user's trace could not.
//!
//! Layer: ops. Imports `ir`, the op structs, `runtime::CallbackRegistration`
//! and `error`.

use super::Op;
use super::callback::HostCallback;
use super::complex::{Complex, ComplexPart};
use super::constant::{Constant, FillLike, Iota, RandomBits, RandomNormal, RandomUniform};
use super::control::{Cond, Region, While};
use super::conv::Conv;
use super::decomp::{Cholesky, TriangularSolve};
use super::elementwise::{Binary, Cast, Select, Unary};
use super::ensure::EnsureShape;
use super::fft::Fft;
use super::indexing::{DynamicSlice, DynamicUpdateSlice};
use super::linalg::{DotGeneral, MatMul};
use super::pad::{BroadcastTo, Pad, Reverse};
use super::reduce::{ArgReduce, Reduce, Softmax};
use super::scatter::{GatherNd, ScatterNd};
use super::shape::{Concat, Gather, OneHot, Reshape, Slice, StridedSlice, Transpose};
use super::sort::Sort;
use super::stats::StopGradient;
use super::window::{ReduceWindow, SelectAndScatterAdd};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorType, ValueId};
use crate::runtime::CallbackRegistration;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::Arc;

/// A graph: parameter types, nodes, and the values it returns.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphJson {
    params: Vec<TensorType>,
    nodes: Vec<NodeJson>,
    results: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeJson {
    op: OpJson,
    inputs: Vec<u32>,
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegionJson {
    graph: Box<GraphJson>,
    captures: Vec<usize>,
}

/// One op. Adding an op to the catalog fails to build until it is here
/// (the matches below are exhaustive).
///
/// Every attribute struct denies unknown fields (as the variants here do):
/// an export is untrusted, and a field this build does not know is either
/// damage or an attribute it would silently ignore, computing something
/// other than what was saved.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
enum OpJson {
    Unary(Unary),
    Binary(Binary),
    Select(Select),
    Cast(Cast),
    Constant(Constant),
    FillLike(FillLike),
    Iota(Iota),
    RandomUniform(RandomUniform),
    RandomNormal(RandomNormal),
    RandomBits(RandomBits),
    Reshape(Reshape),
    Transpose(Transpose),
    Concat(Concat),
    Slice(Slice),
    Split(super::split::Split),
    StridedSlice(StridedSlice),
    Gather(Gather),
    GatherNd(GatherNd),
    TakeAlongAxis(super::take_along::TakeAlongAxis),
    AddAlongAxis(super::take_along::AddAlongAxis),
    ScatterNd(ScatterNd),
    EnsureShape(EnsureShape),
    ShardingConstraint(super::sharding_constraint::ShardingConstraint),
    OptimizationBarrier(super::barrier::OptimizationBarrier),
    OneHot(OneHot),
    MatMul(MatMul),
    Cholesky(Cholesky),
    TriangularSolve(TriangularSolve),
    DotGeneral(DotGeneral),
    Conv(Conv),
    ReduceWindow(ReduceWindow),
    SelectAndScatterAdd(SelectAndScatterAdd),
    Reduce(Reduce),
    ArgReduce(ArgReduce),
    Softmax(Softmax),
    DynamicSlice(DynamicSlice),
    DynamicUpdateSlice(DynamicUpdateSlice),
    Pad(Pad),
    Reverse(Reverse),
    BroadcastTo(BroadcastTo),
    StopGradient(StopGradient),
    Sort(Sort),
    Complex(Complex),
    ComplexPart(ComplexPart),
    Fft(Fft),
    HostCallback {
        callback: usize,
        results: Vec<ArraySpec>,
    },
    Cond {
        then_branch: RegionJson,
        else_branch: RegionJson,
    },
    While {
        cond: RegionJson,
        body: RegionJson,
        loop_types: Vec<TensorType>,
        #[serde(default)]
        record: Option<i64>,
        #[serde(default)]
        record_activations: bool,
    },
}

/// Writes `graph`; `declare` gives each host callback (by registration
/// id) its index among the export's declared callbacks.
pub fn encode_graph(
    graph: &Graph,
    declare: &mut dyn FnMut(i64) -> Result<usize>,
) -> Result<GraphJson> {
    // Values are numbered in order of definition; a custom gradient's
    // outputs are aliases and take no numbers.
    let mut number: HashMap<ValueId, u32> = HashMap::new();
    let mut next = 0u32;
    let mut define = |number: &mut HashMap<ValueId, u32>, v: ValueId| {
        number.insert(v, next);
        next += 1;
    };
    for p in graph.params() {
        define(&mut number, *p);
    }
    let mut nodes = Vec::with_capacity(graph.nodes().len());
    for node in graph.nodes() {
        if let Op::CustomGradient(cg) = &node.op {
            // An identity over the body's results, which the graph computes
            // itself: its outputs are written as those values. A loaded
            // export runs forward only, so its gradient function is not
            // needed (and, a Rust closure, could not be written).
            for (o, body_result) in node.outputs.iter().zip(&node.inputs[cg.num_inputs..]) {
                let same = number[body_result];
                number.insert(*o, same);
            }
            continue;
        }
        let inputs = node.inputs.iter().map(|v| number[v]).collect();
        nodes.push(NodeJson {
            op: encode_op(&node.op, declare)?,
            inputs,
        });
        for o in &node.outputs {
            define(&mut number, *o);
        }
    }
    Ok(GraphJson {
        params: graph.param_types(),
        nodes,
        results: graph.results().iter().map(|v| number[v]).collect(),
    })
}

fn encode_region(r: &Region, declare: &mut dyn FnMut(i64) -> Result<usize>) -> Result<RegionJson> {
    Ok(RegionJson {
        graph: Box::new(encode_graph(&r.graph, declare)?),
        captures: r.captures.clone(),
    })
}

fn encode_op(op: &Op, declare: &mut dyn FnMut(i64) -> Result<usize>) -> Result<OpJson> {
    Ok(match op {
        Op::Unary(o) => OpJson::Unary(*o),
        Op::Binary(o) => OpJson::Binary(*o),
        Op::Select(o) => OpJson::Select(*o),
        Op::Cast(o) => OpJson::Cast(*o),
        Op::Constant(o) => OpJson::Constant(o.clone()),
        Op::FillLike(o) => OpJson::FillLike(o.clone()),
        Op::Iota(o) => OpJson::Iota(o.clone()),
        Op::RandomUniform(o) => OpJson::RandomUniform(o.clone()),
        Op::RandomNormal(o) => OpJson::RandomNormal(o.clone()),
        Op::RandomBits(o) => OpJson::RandomBits(o.clone()),
        Op::Reshape(o) => OpJson::Reshape(o.clone()),
        Op::Transpose(o) => OpJson::Transpose(o.clone()),
        Op::Concat(o) => OpJson::Concat(o.clone()),
        Op::Slice(o) => OpJson::Slice(o.clone()),
        Op::Split(o) => OpJson::Split(o.clone()),
        Op::StridedSlice(o) => OpJson::StridedSlice(o.clone()),
        Op::Gather(o) => OpJson::Gather(o.clone()),
        Op::GatherNd(o) => OpJson::GatherNd(o.clone()),
        Op::TakeAlongAxis(o) => OpJson::TakeAlongAxis(o.clone()),
        Op::AddAlongAxis(o) => OpJson::AddAlongAxis(o.clone()),
        Op::ScatterNd(o) => OpJson::ScatterNd(o.clone()),
        Op::EnsureShape(o) => OpJson::EnsureShape(o.clone()),
        Op::ShardingConstraint(o) => OpJson::ShardingConstraint(o.clone()),
        Op::OptimizationBarrier(o) => OpJson::OptimizationBarrier(o.clone()),
        Op::OneHot(o) => OpJson::OneHot(o.clone()),
        Op::MatMul(o) => OpJson::MatMul(o.clone()),
        Op::Cholesky(o) => OpJson::Cholesky(o.clone()),
        Op::TriangularSolve(o) => OpJson::TriangularSolve(o.clone()),
        Op::DotGeneral(o) => OpJson::DotGeneral(o.clone()),
        Op::Conv(o) => OpJson::Conv(o.clone()),
        Op::ReduceWindow(o) => OpJson::ReduceWindow(o.clone()),
        Op::SelectAndScatterAdd(o) => OpJson::SelectAndScatterAdd(o.clone()),
        Op::Reduce(o) => OpJson::Reduce(o.clone()),
        Op::ArgReduce(o) => OpJson::ArgReduce(o.clone()),
        Op::Softmax(o) => OpJson::Softmax(o.clone()),
        Op::DynamicSlice(o) => OpJson::DynamicSlice(o.clone()),
        Op::DynamicUpdateSlice(o) => OpJson::DynamicUpdateSlice(o.clone()),
        Op::Pad(o) => OpJson::Pad(o.clone()),
        Op::Reverse(o) => OpJson::Reverse(o.clone()),
        Op::BroadcastTo(o) => OpJson::BroadcastTo(o.clone()),
        Op::StopGradient(o) => OpJson::StopGradient(*o),
        Op::Sort(o) => OpJson::Sort(o.clone()),
        Op::Complex(o) => OpJson::Complex(*o),
        Op::ComplexPart(o) => OpJson::ComplexPart(*o),
        Op::Fft(o) => OpJson::Fft(o.clone()),
        Op::HostCallback(o) => OpJson::HostCallback {
            callback: declare(o.id())?,
            results: o.results.clone(),
        },
        Op::Cond(o) => OpJson::Cond {
            then_branch: encode_region(&o.then_branch, declare)?,
            else_branch: encode_region(&o.else_branch, declare)?,
        },
        Op::While(o) => OpJson::While {
            cond: encode_region(&o.cond, declare)?,
            body: encode_region(&o.body, declare)?,
            loop_types: o.loop_types.clone(),
            record: o.record,
            record_activations: o.record_activations,
        },
        Op::CustomGradient(_) => {
            return Err(Error::Value(
                "export: a custom_gradient op reached the op encoder; encode_graph writes it as \
                 the identity"
                    .into(),
            ));
        }
        Op::ShardMap(_) | Op::Collective(_) => {
            return Err(Error::Value(
                "export: the graph holds a shard_map, and programs partitioned over a mesh cannot \
                 be exported yet"
                    .into(),
            ));
        }
        Op::Call(_) => {
            return Err(Error::Value(
                "export: the graph holds a recorded function call (a gradient tape's), which \
                 cannot be written"
                    .into(),
            ));
        }
    })
}

/// The loading process's registration for a declared callback index.
pub type BindCallback<'a> = &'a dyn Fn(usize) -> Result<Arc<CallbackRegistration>>;

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Value(format!("export: the saved graph is malformed: {what}"))
}

/// Rebuilds a graph read from a file (see the module docs).
pub fn decode_graph(j: &GraphJson, bind: BindCallback) -> Result<Graph> {
    let mut graph = Graph::new();
    let mut values: Vec<ValueId> = Vec::new();
    for t in &j.params {
        check_type(t)?;
        values.push(graph.add_param(t.clone()));
    }
    for (k, node) in j.nodes.iter().enumerate() {
        let inputs = node
            .inputs
            .iter()
            .map(|&i| values.get(i as usize).copied())
            .collect::<Option<Vec<ValueId>>>()
            .ok_or_else(|| bad(format!("node {k} uses a value defined after it")))?;
        let op = decode_op(&node.op, inputs.len(), bind)?;
        let outs = graph.add_node(op, &inputs)?;
        values.extend(outs);
    }
    let results = j
        .results
        .iter()
        .map(|&i| values.get(i as usize).copied())
        .collect::<Option<Vec<ValueId>>>()
        .ok_or_else(|| bad("a result names no value"))?;
    graph.set_results(results);
    Ok(graph)
}

/// A parameter or loop type: dimensions are sizes (or unknown), within
/// the limits every array has.
fn check_type(t: &TensorType) -> Result<()> {
    if let Some(dims) = t.shape.dims() {
        if dims.len() > 64 || dims.iter().any(|d| d.is_some_and(|d| d < 0)) {
            return Err(bad(format!("bad type {t}")));
        }
        let known: Vec<i64> = dims.iter().map(|d| d.unwrap_or(1)).collect();
        crate::dtype::check_array_size(t.dtype, &known).map_err(bad)?;
    }
    Ok(())
}

/// A region fed by a node with `node_inputs` inputs, taking `args` own
/// arguments.
fn decode_region(
    r: &RegionJson,
    node_inputs: usize,
    args: usize,
    bind: BindCallback,
) -> Result<Region> {
    let graph = decode_graph(&r.graph, bind)?;
    if graph.params().len() != args + r.captures.len() {
        return Err(bad(
            "a region's parameters do not match its arguments and captures",
        ));
    }
    if r.captures.iter().any(|&c| c >= node_inputs) {
        return Err(bad("a region captures an input its node does not have"));
    }
    Ok(Region {
        graph: Arc::new(graph),
        captures: r.captures.clone(),
    })
}

fn decode_op(j: &OpJson, node_inputs: usize, bind: BindCallback) -> Result<Op> {
    Ok(match j {
        OpJson::Unary(o) => Op::Unary(*o),
        OpJson::Binary(o) => Op::Binary(*o),
        OpJson::Select(o) => Op::Select(*o),
        OpJson::Cast(o) => Op::Cast(*o),
        OpJson::Constant(o) => Op::Constant(o.clone()),
        OpJson::FillLike(o) => Op::FillLike(o.clone()),
        OpJson::Iota(o) => Op::Iota(o.clone()),
        OpJson::RandomUniform(o) => Op::RandomUniform(o.clone()),
        OpJson::RandomNormal(o) => Op::RandomNormal(o.clone()),
        OpJson::RandomBits(o) => Op::RandomBits(o.clone()),
        OpJson::Reshape(o) => Op::Reshape(o.clone()),
        OpJson::Transpose(o) => Op::Transpose(o.clone()),
        OpJson::Concat(o) => Op::Concat(o.clone()),
        OpJson::Slice(o) => Op::Slice(o.clone()),
        OpJson::Split(o) => Op::Split(o.clone()),
        OpJson::StridedSlice(o) => Op::StridedSlice(o.clone()),
        OpJson::Gather(o) => Op::Gather(o.clone()),
        OpJson::GatherNd(o) => Op::GatherNd(o.clone()),
        OpJson::TakeAlongAxis(o) => Op::TakeAlongAxis(o.clone()),
        OpJson::AddAlongAxis(o) => Op::AddAlongAxis(o.clone()),
        OpJson::ScatterNd(o) => Op::ScatterNd(o.clone()),
        OpJson::EnsureShape(o) => Op::EnsureShape(o.clone()),
        OpJson::ShardingConstraint(o) => Op::ShardingConstraint(o.clone()),
        OpJson::OptimizationBarrier(o) => Op::OptimizationBarrier(o.clone()),
        OpJson::OneHot(o) => Op::OneHot(o.clone()),
        OpJson::MatMul(o) => Op::MatMul(o.clone()),
        OpJson::Cholesky(o) => Op::Cholesky(o.clone()),
        OpJson::TriangularSolve(o) => Op::TriangularSolve(o.clone()),
        OpJson::DotGeneral(o) => Op::DotGeneral(o.clone()),
        OpJson::Conv(o) => Op::Conv(o.clone()),
        OpJson::ReduceWindow(o) => Op::ReduceWindow(o.clone()),
        OpJson::SelectAndScatterAdd(o) => Op::SelectAndScatterAdd(o.clone()),
        OpJson::Reduce(o) => Op::Reduce(o.clone()),
        OpJson::ArgReduce(o) => Op::ArgReduce(o.clone()),
        OpJson::Softmax(o) => Op::Softmax(o.clone()),
        OpJson::DynamicSlice(o) => Op::DynamicSlice(o.clone()),
        OpJson::DynamicUpdateSlice(o) => Op::DynamicUpdateSlice(o.clone()),
        OpJson::Pad(o) => Op::Pad(o.clone()),
        OpJson::Reverse(o) => Op::Reverse(o.clone()),
        OpJson::BroadcastTo(o) => Op::BroadcastTo(o.clone()),
        OpJson::StopGradient(o) => Op::StopGradient(*o),
        OpJson::Sort(o) => Op::Sort(o.clone()),
        OpJson::Complex(o) => Op::Complex(*o),
        OpJson::ComplexPart(o) => Op::ComplexPart(*o),
        OpJson::Fft(o) => Op::Fft(o.clone()),
        OpJson::HostCallback { callback, results } => {
            results
                .iter()
                .try_for_each(|r| check_type(&TensorType::known(r.dtype, &r.dims)))?;
            Op::HostCallback(HostCallback::bound(bind(*callback)?, results.clone()))
        }
        OpJson::Cond {
            then_branch,
            else_branch,
        } => {
            if node_inputs == 0
                || [then_branch, else_branch]
                    .iter()
                    .any(|b| b.captures.contains(&0))
            {
                return Err(bad(
                    "a cond's branches must capture only inputs after its predicate",
                ));
            }
            Op::Cond(Cond {
                then_branch: decode_region(then_branch, node_inputs, 0, bind)?,
                else_branch: decode_region(else_branch, node_inputs, 0, bind)?,
            })
        }
        OpJson::While {
            cond,
            body,
            loop_types,
            record,
            record_activations,
        } => {
            loop_types.iter().try_for_each(check_type)?;
            let n = loop_types.len();
            Op::While(While {
                cond: decode_region(cond, node_inputs, n, bind)?,
                body: decode_region(body, node_inputs, n, bind)?,
                loop_types: loop_types.clone(),
                trip_count: None,
                hidden_values: 0,
                record: *record,
                record_activations: *record_activations,
            })
        }
    })
}
