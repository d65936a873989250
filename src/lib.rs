//! xlafn: TensorFlow's `tf.function` for Rust, compiled by XLA.
//!
//! Ops on [`Tensor`]s run eagerly, one small XLA program each, compiled
//! once per (op, attributes, input types) and cached. The crate is layered
//! bottom-up: `runtime` (PJRT) ← `lower` (StableHLO text) ← `ir` (graphs) ←
//! `ops` (the op catalog) ← `tensor` (the user's values).
//!
//! ```
//! use xlafn::prelude::*;
//! let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
//! let b = Tensor::from_vec(vec![1f32, 1., 1., 1.], &[2, 2])?;
//! let c = &a + &b;
//! assert_eq!(c.to_vec::<f32>()?, vec![2., 3., 4., 5.]);
//! # Ok::<(), xlafn::Error>(())
//! ```

#![warn(missing_docs)]

pub mod autodiff;
/// Unstable internals, not part of the public API: The run-time side of `#[xlafn::function]`'s AutoGraph rewrite (called by generated code).
#[doc(hidden)]
pub mod autograph;
pub(crate) mod bounded_cache;
pub mod checkpoint;
pub mod control;
pub mod debug;
pub mod distributed;
pub mod dtype;
pub mod error;
pub mod export;
pub mod function;
pub mod initializers;
/// Unstable internals, not part of the public API: The graph IR: types, shapes, graphs.
#[doc(hidden)]
pub mod ir;
/// Unstable internals, not part of the public API: Lowering graphs to StableHLO text.
#[doc(hidden)]
pub mod lower;
pub mod module;
pub mod nn;
/// Unstable internals, not part of the public API: The op catalog: each op's attributes, shape rule, lowering and gradient. The user-facing parts are `Tensor` methods and the re-exports at the crate root.
#[doc(hidden)]
pub mod ops;
pub mod optimizers;
pub mod random;
/// Unstable internals, not part of the public API: The PJRT C API bindings: clients, buffers, executables.
#[doc(hidden)]
pub mod runtime;
pub mod sharding;
pub(crate) mod single_flight;
pub mod tensor;
/// Unstable internals, not part of the public API: The tracing context.
#[doc(hidden)]
pub mod trace;
pub mod variable;
pub mod weights;

pub use autodiff::{GradientTape, Source, recompute_grad};
pub use control::{TensorArray, cond, for_range, while_loop};
pub use debug::{disable_check_numerics, enable_check_numerics};
pub use dtype::{ArraySpec, DType};
pub use error::{Error, ErrorCode, Result};
/// `.npy` and `.npz` files: `read_npy`, `write_npy`, `read_npz`,
/// `write_npz` (the codec exports and the `xlafn` tool use).
pub use export::io;
pub use export::{LoadedFunction, load, load_with_callbacks};
pub use function::{
    ConcreteFunction, Function, FunctionOptions, TensorSpec, function, run_functions_eagerly,
};
/// The `half` crate (the `f16` and `bf16` element types), re-exported so
/// callers use the version xlafn's `Element` impls are for instead of
/// pinning a matching one by hand.
pub use half;
pub use ir::Shape;
/// The `ndarray` crate, re-exported for the same reason as `half`:
/// `Tensor::from_ndarray` and `to_ndarray` take and return this version's
/// arrays, and an `ndarray` of another version is a different type.
pub use ndarray;
/// The host element types of complex tensors (`c64`, `c128`), from the
/// `num-complex` crate, re-exported so callers need not depend on it.
pub use num_complex::{self, Complex32, Complex64};
pub use ops::barrier::optimization_barrier;
pub use ops::callback::{
    host_callback, named_host_callback, print, reset_print_output, set_print_output,
    with_print_output,
};
pub use ops::complex::complex;
pub use ops::conv::{ConvOptions, Padding};
pub use ops::custom_gradient::custom_gradient;
pub use ops::einsum::{einsum, einsum_preferred};
pub use ops::elementwise::where_;
pub use ops::fft::{FftType, fft_op};
pub use ops::pad::PadMode;
pub use ops::stats::{NormOrd, clip_by_global_norm};
pub use ops::window::{WindowDims, WindowKind};
pub use runtime::{Device, MemoryStats, set_cpu_device_count};
pub use runtime::{disk_cache_stats, set_disk_cache_enabled};
pub use tensor::{Tensor, default_device, devices, local_devices, with_device};
pub use variable::Variable;
/// `#[xlafn::function]`: a `fn` item as a traced `Function`, with AutoGraph.
///
/// `if` and `while` on a tensor condition become device control flow
/// (`cond`, `while_loop`); the item is then called like a plain function.
///
/// ```
/// use xlafn::prelude::*;
///
/// #[xlafn::function]
/// fn collatz_steps(n: Tensor) -> Result<Tensor> {
///     let mut n = n;
///     let mut steps = Tensor::scalar(0i32);
///     while n.gt_scalar(1)? {
///         if n.floormod_scalar(2)?.eq_scalar(0)? {
///             n = n.floordiv_scalar(2)?;
///         } else {
///             n = &n * 3 + 1;
///         }
///         steps = steps + 1;
///     }
///     Ok(steps)
/// }
///
/// # fn main() -> xlafn::Result<()> {
/// let x = Tensor::scalar(6i32);
/// assert_eq!(collatz_steps(&x)?.to_vec::<i32>()?, vec![8]);
/// assert_eq!(collatz_steps(Tensor::scalar(27i32))?.to_vec::<i32>()?, vec![111]);
/// assert_eq!(collatz_steps::function().tracing_count(), 1); // one trace, one loop
/// # Ok(())
/// # }
/// ```
pub use xlafn_macros::function;

/// The names most programs need.
pub mod prelude {
    pub use crate::autodiff::{GradientTape, Source};
    pub use crate::control::{TensorArray, cond, for_range, while_loop};
    pub use crate::dtype::DType;
    pub use crate::error::{Error, Result};
    pub use crate::function::Shared;
    pub use crate::function::{
        ConcreteFunction, Function, FunctionOptions, TensorSpec, function, run_functions_eagerly,
    };
    pub use crate::ir::Shape;
    pub use crate::ops::callback::{host_callback, named_host_callback};
    pub use crate::ops::conv::Padding;
    pub use crate::ops::custom_gradient::custom_gradient;
    pub use crate::ops::einsum::einsum;
    pub use crate::ops::elementwise::where_;
    pub use crate::ops::pad::PadMode;
    pub use crate::ops::stats::NormOrd;
    pub use crate::optimizers::{
        Adagrad, Adam, AdamW, GradientClip, LearningRate, Optimizer, RmsProp, Sgd, value_and_grad,
    };
    pub use crate::tensor::Tensor;
    pub use crate::variable::Variable;
    pub use crate::{Complex32, Complex64};
    pub use xlafn_macros::function;
}
