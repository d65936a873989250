//! The graph IR: typed values produced by nodes, each node one op.
//!
//! A graph is built in program order, so the node list is already a
//! topological order; lowering walks it front to back. Types are inferred
//! when a node is added (`Op::infer`), which is where shape and dtype
//! mistakes are reported, naming the op and its operand types.

use super::types::TensorType;
use crate::error::Result;
use crate::ops::{Op, OpDef};
use std::fmt;

/// A value in a graph: an index into `Graph::values`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

impl fmt::Display for ValueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "%{}", self.0)
    }
}

/// One op application.
#[derive(Clone, Debug)]
pub struct Node {
    pub op: Op,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
}

/// Where a value comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Producer {
    /// The i-th parameter of the graph.
    Param(usize),
    /// Output `output` of node `node`.
    Node { node: usize, output: usize },
}

/// A dataflow graph with parameters and results.
#[derive(Clone, Debug, Default)]
pub struct Graph {
    values: Vec<(TensorType, Producer)>,
    nodes: Vec<Node>,
    params: Vec<ValueId>,
    results: Vec<ValueId>,
}

impl Graph {
    pub fn new() -> Graph {
        Graph::default()
    }

    /// A graph holding exactly one op applied to fresh parameters; eager
    /// execution compiles this.
    pub fn single_op(op: &Op, inputs: &[TensorType]) -> Result<Graph> {
        let mut g = Graph::new();
        let params: Vec<ValueId> = inputs.iter().map(|t| g.add_param(t.clone())).collect();
        let outs = g.add_node(op.clone(), &params)?;
        g.set_results(outs);
        Ok(g)
    }

    pub fn add_param(&mut self, ty: TensorType) -> ValueId {
        let id = self.push_value(ty, Producer::Param(self.params.len()));
        self.params.push(id);
        id
    }

    /// Adds `op` applied to `inputs`; infers (and so validates) its types.
    pub fn add_node(&mut self, op: Op, inputs: &[ValueId]) -> Result<Vec<ValueId>> {
        let types: Vec<TensorType> = inputs.iter().map(|v| self.value_type(*v).clone()).collect();
        let out_types = op.infer(&types)?;
        let node = self.nodes.len();
        let outputs: Vec<ValueId> = out_types
            .into_iter()
            .enumerate()
            .map(|(output, t)| self.push_value(t, Producer::Node { node, output }))
            .collect();
        self.nodes.push(Node {
            op,
            inputs: inputs.to_vec(),
            outputs: outputs.clone(),
        });
        Ok(outputs)
    }

    /// The result types of this graph for parameters of types `params`
    /// (which may be more specific than those it was built with): every
    /// node is inferred again, front to back.
    pub fn infer_results(&self, params: &[TensorType]) -> Result<Vec<TensorType>> {
        let mut types: std::collections::HashMap<ValueId, TensorType> = self
            .params
            .iter()
            .copied()
            .zip(params.iter().cloned())
            .collect();
        for node in &self.nodes {
            let ins: Vec<TensorType> = node.inputs.iter().map(|v| types[v].clone()).collect();
            let outs = node.op.infer(&ins)?;
            types.extend(node.outputs.iter().copied().zip(outs));
        }
        Ok(self.results.iter().map(|r| types[r].clone()).collect())
    }

    pub fn set_results(&mut self, results: Vec<ValueId>) {
        self.results = results;
    }

    fn push_value(&mut self, ty: TensorType, producer: Producer) -> ValueId {
        let id = ValueId(self.values.len() as u32);
        self.values.push((ty, producer));
        id
    }

    pub fn value_type(&self, v: ValueId) -> &TensorType {
        &self.values[v.0 as usize].0
    }

    pub fn producer(&self, v: ValueId) -> Producer {
        self.values[v.0 as usize].1
    }

    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn params(&self) -> &[ValueId] {
        &self.params
    }

    pub fn results(&self) -> &[ValueId] {
        &self.results
    }

    pub fn param_types(&self) -> Vec<TensorType> {
        self.params
            .iter()
            .map(|p| self.value_type(*p).clone())
            .collect()
    }

    pub fn num_values(&self) -> usize {
        self.values.len()
    }

    /// The part of this graph that computes `wanted`: a graph with those
    /// values as results, only the nodes they depend on, and as parameters
    /// only the parameters they depend on, in their original order. Also
    /// returns the original index of each kept parameter. Lifting a
    /// variable's initializer out of a trace uses it.
    pub fn extract(&self, wanted: &[ValueId]) -> Result<(Graph, Vec<usize>)> {
        let mut needed = vec![false; self.values.len()];
        for v in wanted {
            needed[v.0 as usize] = true;
        }
        let mut keep_node = vec![false; self.nodes.len()];
        for (i, node) in self.nodes.iter().enumerate().rev() {
            if node.outputs.iter().any(|o| needed[o.0 as usize]) {
                keep_node[i] = true;
                node.inputs.iter().for_each(|v| needed[v.0 as usize] = true);
            }
        }
        let mut out = Graph::new();
        let mut map = std::collections::HashMap::new();
        let mut kept_params = Vec::new();
        for (i, p) in self.params.iter().enumerate() {
            if needed[p.0 as usize] {
                map.insert(*p, out.add_param(self.value_type(*p).clone()));
                kept_params.push(i);
            }
        }
        for (node, _) in self.nodes.iter().zip(&keep_node).filter(|(_, k)| **k) {
            let inputs: Vec<ValueId> = node.inputs.iter().map(|v| map[v]).collect();
            let outputs = out.add_node(node.op.clone(), &inputs)?;
            map.extend(node.outputs.iter().copied().zip(outputs));
        }
        out.set_results(wanted.iter().map(|v| map[v]).collect());
        Ok((out, kept_params))
    }
}

/// A readable listing: one line per node with its inputs and output types.
impl fmt::Display for Graph {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for p in &self.params {
            writeln!(f, "{p} = param : {}", self.value_type(*p))?;
        }
        for n in &self.nodes {
            let outs: Vec<String> = n.outputs.iter().map(|o| o.to_string()).collect();
            let ins: Vec<String> = n.inputs.iter().map(|i| i.to_string()).collect();
            let tys: Vec<String> = n
                .outputs
                .iter()
                .map(|o| self.value_type(*o).to_string())
                .collect();
            writeln!(
                f,
                "{} = {}({}) : {}",
                outs.join(", "),
                n.op.describe(),
                ins.join(", "),
                tys.join(", ")
            )?;
        }
        let res: Vec<String> = self.results.iter().map(|r| r.to_string()).collect();
        write!(f, "return {}", res.join(", "))
    }
}
