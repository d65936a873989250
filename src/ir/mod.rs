//! Layer: IR. The graph of typed values that tracing builds and lowering
//! prints. Imports `dtype`, `error`, and the op catalog (`ops`) for the node
//! payload; nothing from lowering or the runtime.

mod graph;
mod scalar;
mod shape;
mod types;

pub use graph::{Graph, Node, Producer, ValueId};
pub use scalar::Scalar;
pub use shape::{Dim, Shape, broadcast_shapes, merge_shapes, shape_is_subtype, shape_supertype};
pub use types::TensorType;
