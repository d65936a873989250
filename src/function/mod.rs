//! Layer: function. Polymorphic functions: trace types, function types,
//! the dispatch cache, signature binding and the retrace policy; the only
//! module that wires tracing, lowering and the runtime together. The trace
//! type lattice (`trace_type`) imports nothing but `dtype` and `ir::Shape`,
//! so its rules are tested alone.

pub mod args;
mod call;
pub mod closure;
pub mod concrete;
pub mod dispatch;
mod graph_view;
mod lifting;
pub mod output;
pub mod polymorphic;
mod sharded;
mod sharded_eager;
pub mod signature;
mod stages;
pub mod trace_type;

pub use crate::ir::ValueId;
pub use args::{Arg, ByValue, IntoArg, IntoTraceType, Shared};
pub(crate) use call::{calls_host, program_traits};
pub use closure::{ArgList, IntoArgs, IntoTraceTypes, TraceableFn};
pub use concrete::ConcreteFunction;
pub use dispatch::{DispatchTable, FunctionType};
pub use graph_view::{FuncGraph, Operation};
pub use output::{IntoOutput, Output};
pub use polymorphic::{
    Function, FunctionOptions, function, functions_run_eagerly, run_functions_eagerly,
};
pub(crate) use sharded::sharded_tensor;
pub use stages::{Compiled, Lowered, StageTimes};
pub use trace_type::{CustomTraceType, Literal, TensorSpec, TraceType};
