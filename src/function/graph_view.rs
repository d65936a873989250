//! Layer: function. A read-only view of a traced function's graph
//! (TensorFlow's `ConcreteFunction.graph`): its operations in order, its
//! parameters and results, and its text. The graph IR (`ir::Graph`) stays
//! internal, since building graphs by hand is not a supported use; this
//! view is what users inspect. Imports `ir` and `ops`.

use crate::ir::{Graph, Node, TensorType, ValueId};
use crate::ops::OpDef;
use std::fmt;

/// The graph a function traced for one input signature, read-only.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|x: Tensor| x.mul_scalar(2.0)?.exp());
/// let x = Tensor::vector(&[1f32, 2.])?;
/// let concrete = f.get_concrete_function((&x,))?;
/// let graph = concrete.graph();
/// let types: Vec<&str> = graph.operations().iter().map(|op| op.op_type()).collect();
/// assert_eq!(types, ["fill", "mul", "exp"]);
/// assert_eq!(graph.params().len(), 1);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Copy)]
pub struct FuncGraph<'a> {
    graph: &'a Graph,
}

impl<'a> FuncGraph<'a> {
    pub(crate) fn new(graph: &'a Graph) -> FuncGraph<'a> {
        FuncGraph { graph }
    }

    /// The operations in the order they were traced (TensorFlow's
    /// `graph.get_operations()`). A control-flow operation (`cond`,
    /// `while`) is one entry; its branches and body are inside it.
    pub fn operations(&self) -> Vec<Operation<'a>> {
        self.graph
            .nodes()
            .iter()
            .map(|node| Operation { node })
            .collect()
    }

    /// The graph's parameters: the flattened tensor arguments, then the
    /// captured values.
    pub fn params(&self) -> &'a [ValueId] {
        self.graph.params()
    }

    /// The values the function returns, flattened.
    pub fn results(&self) -> &'a [ValueId] {
        self.graph.results()
    }

    /// The dtype and shape of a value of this graph.
    pub fn value_type(&self, value: ValueId) -> &'a TensorType {
        self.graph.value_type(value)
    }
}

/// The graph's text: one line per operation with its attributes.
impl fmt::Display for FuncGraph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.graph, f)
    }
}

impl fmt::Debug for FuncGraph<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self.graph, f)
    }
}

/// One operation of a [`FuncGraph`].
#[derive(Clone, Copy)]
pub struct Operation<'a> {
    node: &'a Node,
}

impl<'a> Operation<'a> {
    /// The operation's type (`mul`, `dot_general`, `while`): TensorFlow's
    /// `op.type`.
    pub fn op_type(&self) -> &'static str {
        self.node.op.name()
    }

    /// The type with its attributes: `fill { value: F64(2.0), dtype: F32, dims: [] }`.
    pub fn describe(&self) -> String {
        self.node.op.describe()
    }

    /// The values it reads.
    pub fn inputs(&self) -> &'a [ValueId] {
        &self.node.inputs
    }

    /// The values it makes.
    pub fn outputs(&self) -> &'a [ValueId] {
        &self.node.outputs
    }
}

impl fmt::Debug for Operation<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.describe())
    }
}
