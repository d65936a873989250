//! The versioned, serializable form of a traced graph: what an export
//! keeps so that a loading process can specialize the function for input
//! shapes nobody compiled for (shape-polymorphic exports).
//!
//! The vocabulary is the op catalog itself: `op_catalog!` derives the
//! `OpJson` enum, one variant per op, each holding what [`Encoded`] says
//! the op writes. Most ops write their attribute struct (serde derives on
//! it); the ones the catalog marks `by_hand` implement `Encoded` here:
//! regions of `cond`/`while` nest their graphs, host callbacks are written
//! as an index into the export's declared callbacks and bound to the
//! loading process's closures when read, and ops no export can hold
//! (`Unwritable`) refuse to be written. Values are renumbered:
//! parameters first, then node outputs in node order.
//!
//! Reading is for untrusted files: every index is checked, and the graph
//! is rebuilt through `Graph::add_param`/`add_node`, so each op's own
//! shape rule validates it exactly as when a user applies it; a file can
//! express nothing a user's trace could not.
//!
//! Layer: ops. Imports `ir`, the by-hand op structs, `runtime::CallbackRegistration`
//! and `error`.

use super::callback::HostCallback;
use super::control::{Call, Cond, Region, While};
use super::custom_gradient::CustomGradient;
use super::shard_map::{Collective, ShardMap};
use super::{Op, OpJson};
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

/// How an op's attributes are written into an export's graph and read
/// back. The catalog (`op_catalog!` in `ops`) implements it for every op
/// as its attribute struct itself, except the ops it marks `by_hand`,
/// whose impls are below: so an op added to the catalog is part of the
/// export vocabulary with nothing else to list.
pub(crate) trait Encoded: Sized {
    /// The attributes as written.
    type Json: Serialize + for<'de> Deserialize<'de>;
    /// The attributes to write; `declare` numbers host callbacks.
    fn encode(&self, declare: Declare) -> Result<Self::Json>;
    /// The op read back, checked: `node_inputs` is how many inputs its
    /// node has, `bind` gives a declared callback's registration.
    fn decode(json: &Self::Json, node_inputs: usize, bind: BindCallback) -> Result<Self>;
}

/// Numbers a host callback (by registration id) among an export's
/// declared callbacks.
pub(crate) type Declare<'a> = &'a mut dyn FnMut(i64) -> Result<usize>;

/// A host callback, written as its index among the declared callbacks.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HostCallbackJson {
    callback: usize,
    results: Vec<ArraySpec>,
}

impl Encoded for HostCallback {
    type Json = HostCallbackJson;
    fn encode(&self, declare: Declare) -> Result<HostCallbackJson> {
        Ok(HostCallbackJson {
            callback: declare(self.id())?,
            results: self.results.clone(),
        })
    }
    fn decode(j: &HostCallbackJson, _: usize, bind: BindCallback) -> Result<HostCallback> {
        j.results
            .iter()
            .try_for_each(|r| check_type(&TensorType::known(r.dtype, &r.dims)))?;
        Ok(HostCallback::bound(bind(j.callback)?, j.results.clone()))
    }
}

/// A `cond`: its two branches' graphs.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct CondJson {
    then_branch: RegionJson,
    else_branch: RegionJson,
}

impl Encoded for Cond {
    type Json = CondJson;
    fn encode(&self, declare: Declare) -> Result<CondJson> {
        Ok(CondJson {
            then_branch: encode_region(&self.then_branch, declare)?,
            else_branch: encode_region(&self.else_branch, declare)?,
        })
    }
    fn decode(j: &CondJson, node_inputs: usize, bind: BindCallback) -> Result<Cond> {
        if node_inputs == 0
            || [&j.then_branch, &j.else_branch]
                .iter()
                .any(|b| b.captures.contains(&0))
        {
            return Err(bad(
                "a cond's branches must capture only inputs after its predicate",
            ));
        }
        Ok(Cond {
            then_branch: decode_region(&j.then_branch, node_inputs, 0, bind)?,
            else_branch: decode_region(&j.else_branch, node_inputs, 0, bind)?,
        })
    }
}

/// A `while`: its condition's and body's graphs and the loop state.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct WhileJson {
    cond: RegionJson,
    body: RegionJson,
    loop_types: Vec<TensorType>,
    #[serde(default)]
    record: Option<i64>,
    #[serde(default)]
    record_activations: bool,
}

impl Encoded for While {
    type Json = WhileJson;
    fn encode(&self, declare: Declare) -> Result<WhileJson> {
        Ok(WhileJson {
            cond: encode_region(&self.cond, declare)?,
            body: encode_region(&self.body, declare)?,
            loop_types: self.loop_types.clone(),
            record: self.record,
            record_activations: self.record_activations,
        })
    }
    fn decode(j: &WhileJson, node_inputs: usize, bind: BindCallback) -> Result<While> {
        j.loop_types.iter().try_for_each(check_type)?;
        let n = j.loop_types.len();
        Ok(While {
            cond: decode_region(&j.cond, node_inputs, n, bind)?,
            body: decode_region(&j.body, node_inputs, n, bind)?,
            loop_types: j.loop_types.clone(),
            trip_count: None,
            hidden_values: 0,
            record: j.record,
            record_activations: j.record_activations,
        })
    }
}

/// The attributes of an op no export holds: nothing can be read as it.
#[derive(Serialize, Deserialize)]
pub(crate) enum Unwritable {}

/// Ops that never reach a saved graph, each with the reason.
macro_rules! unwritable {
    ($($ty:ty => $why:expr),* $(,)?) => {$(
        impl Encoded for $ty {
            type Json = Unwritable;
            fn encode(&self, _: Declare) -> Result<Unwritable> {
                Err(Error::Value(format!("export: {}", $why)))
            }
            fn decode(json: &Unwritable, _: usize, _: BindCallback) -> Result<$ty> {
                match *json {}
            }
        }
    )*};
}

unwritable! {
    CustomGradient => "a custom_gradient op reached the op encoder; encode_graph writes it as the identity",
    ShardMap => "the graph holds a shard_map, and programs partitioned over a mesh cannot be exported yet",
    Collective => "the graph holds a shard_map, and programs partitioned over a mesh cannot be exported yet",
    Call => "the graph holds a recorded function call (a gradient tape's), which cannot be written",
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
            op: node.op.encode(declare)?,
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
        let op = node.op.decode(inputs.len(), bind)?;
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
