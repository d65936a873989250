//! xlafn: TensorFlow's `tf.function` for Rust, compiled by XLA.
//!
//! Write ordinary Rust over [`Tensor`]s: run directly, each op executes at
//! once (eagerly); wrapped in [`function()`], the closure is traced once per
//! input type into a graph, compiled whole by XLA and cached. Programs run
//! on the CPU or on CUDA GPUs through XLA's PJRT plugins.
//!
//! # Install
//!
//! xlafn is not on a package registry yet: depend on a checkout
//! (`xlafn = { path = "../xlafn" }`) or on its git repository pinned to a
//! commit. Building needs no plugin; the first program that runs finds
//! the pinned XLA CPU plugin, or fetches it once into `~/.cache/xlafn`.
//! `XLAFN_DEVICE=cuda` picks a CUDA plugin. The book, in the repository's
//! `book/` folder (`book/src/SUMMARY.md`), is the guide: getting started,
//! tracing, training, export, devices, CUDA, and the reference pages.
//!
//! # Eager ops
//!
//! ```
//! use xlafn::prelude::*;
//! let a = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
//! let b = Tensor::ones(&[2, 2], DType::F32);
//! let c = (&a + &b).tanh()?;                  // runs now, stays on the device
//! assert_eq!(c.dims(), vec![2, 2]);
//! assert!((c.to_vec::<f32>()?[0] - 2f32.tanh()).abs() < 1e-6);
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! # Compiled functions
//!
//! ```
//! use xlafn::prelude::*;
//! let scaled_sum = function(|x: Tensor, k: Tensor| (x * k).reduce_sum(&[], false));
//! let x = Tensor::vector(&[1f32, 2., 3.])?;
//! assert_eq!(scaled_sum.call((&x, &Tensor::scalar(2f32)))?.item::<f32>()?, 12.0);
//! assert_eq!(scaled_sum.call((&x, &Tensor::scalar(3f32)))?.item::<f32>()?, 18.0);
//! assert_eq!(scaled_sum.tracing_count(), 1);  // traced and compiled once
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! # A model, trained, saved
//!
//! Layers ([`nn::layers`]) hold their weights as [`Variable`]s; a struct
//! of layers derives [`module::Module`], which lists them by path
//! (`hidden.kernel`): optimizers, checkpoints and exports use those
//! names. A training step is one compiled program.
//!
//! ```
//! use std::sync::Arc;
//! use xlafn::prelude::*;
//! use xlafn::module::Module;
//! use xlafn::nn::layers::{Activation, Layer, Linear};
//! use xlafn::nn::losses::{CrossEntropy, sparse_categorical_cross_entropy};
//! use xlafn::{checkpoint, random};
//!
//! #[derive(Module)]
//! struct Classifier { hidden: Linear, output: Linear }
//!
//! let key = random::key(0)?;
//! let model = Arc::new(Classifier {
//!     hidden: Linear::new(&random::fold_in(&key, &Tensor::scalar(0))?, 4, 16)?
//!         .activation(Activation::Relu),
//!     output: Linear::new(&random::fold_in(&key, &Tensor::scalar(1))?, 16, 3)?,
//! });
//! let adam = Arc::new(Adam::new(1e-2));
//! let step = {
//!     let (model, adam) = (model.clone(), adam.clone());
//!     function(move |x: Tensor, y: Tensor| -> Result<Tensor> {
//!         adam.minimize(&model.trainable_variables(), || {
//!             let logits = model.output.forward(&model.hidden.forward(&x)?)?;
//!             sparse_categorical_cross_entropy(&y, &logits, CrossEntropy::new().from_logits(true))
//!         })
//!     })
//! };
//! let x = random::normal(&key, &[8, 4], DType::F32, 0.0, 1.0)?;
//! let y = Tensor::vector(&[0i32, 1, 2, 0, 1, 2, 0, 1])?;
//! let first = step.call((&x, &y))?.item::<f32>()?;
//! let mut last = first;
//! for _ in 0..50 {
//!     last = step.call((&x, &y))?.item::<f32>()?;
//! }
//! assert!(last < first / 2.0);
//! assert_eq!(model.hidden.kernel().unwrap().name(), "hidden.kernel");
//!
//! let path = std::env::temp_dir().join(format!("xlafn-doc-{}.safetensors", std::process::id()));
//! checkpoint::save_training(&*model, &*adam, &path)?;   // weights and Adam's slots
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! # Where to go next
//!
//! - [`function()`] and [`FunctionOptions`]: tracing rules, input
//!   signatures, retracing, `jit_compile`, shardings.
//! - [`GradientTape`], [`optimizers`], [`recompute_grad`]: gradients and
//!   training.
//! - [`nn`]: layers, losses, metrics; [`initializers`], [`random`] (keys,
//!   as JAX's).
//! - [`checkpoint`], [`weights`] (safetensors from PyTorch, Flax or Keras),
//!   [`export`] (a compiled function saved for the `xlafn` tool or another
//!   process).
//! - [`control`]: `cond`, `while_loop`, `for_range` and the `#[function]`
//!   macro's AutoGraph.
//!
//! # Coming from JAX, PyTorch or candle
//!
//! | JAX / PyTorch / candle | xlafn |
//! |---|---|
//! | `jax.jit(f)`, `torch.compile(f)` | [`function()`]`(f)` |
//! | `jnp.array(..)`, `torch.tensor(..)`, `Tensor::new(..)` | [`Tensor::from_vec`], [`Tensor::vector`], [`Tensor::scalar`] |
//! | `x.shape`, `x.size()`, `x.dims()` | [`Tensor::dims`] |
//! | `np.asarray(x)`, `x.numpy()`, `x.to_vec1()` | [`Tensor::to_vec`], [`Tensor::item`] |
//! | `x.astype(t)`, `x.to(dtype)`, `x.to_dtype(t)` | [`Tensor::cast`] |
//! | `x @ y`, `torch.matmul`, `x.matmul(y)` | [`Tensor::matmul`], [`einsum`] |
//! | `jax.grad`, `loss.backward()` | [`GradientTape`], [`optimizers::value_and_grad`] |
//! | `jax.lax.stop_gradient`, `x.detach()` | [`Tensor::stop_gradient`] |
//! | `jax.checkpoint`, `torch.utils.checkpoint` | [`recompute_grad`] |
//! | `jax.random.PRNGKey`, `split`, `fold_in` | [`random::key`], [`random::split`], [`random::fold_in`] |
//! | `jax.lax.cond`, `while_loop`, `fori_loop` | [`cond`], [`while_loop`], [`for_range`] |
//! | `nn.Linear`, `flax.linen.Dense`, `candle_nn::linear` | [`nn::layers::Linear`] |
//! | `nn.Module.named_parameters()`, `VarMap` | [`module::Module::named_variables`] |
//! | `optax.adamw`, `torch.optim.AdamW` | [`optimizers::AdamW`] |
//! | `optax.clip_by_global_norm` | [`optimizers::GradientClip`], [`clip_by_global_norm`] |
//! | `torch.save(model.state_dict())` | [`checkpoint::save`] (safetensors) |
//! | `safetensors.torch.load_file` | [`weights::Weights`] |
//! | `jax.export`, `torch.export` | [`ConcreteFunction::export`] |
//!
//! The crate is layered bottom-up: `runtime` (PJRT, and all of the
//! crate's `unsafe`) ← `mesh` (meshes, partition specs and sharded
//! arrays, as data) ← the knot of `ir` (graphs), `ops` (the op catalog),
//! `lower` (StableHLO text), `tensor` (the user's values), `trace` and
//! `variable`, which import each other because gradient and batching
//! rules are written with tensors ← `function` ← `sharding` ← `control`,
//! `vmap`, `autodiff`, `debug` ← the composites (linear algebra and scans
//! written with tensors and loops) ← `distributed` ← `nn`, `optimizers`,
//! `export`, `checkpoint`, `weights`, `data`, `train`. `tensor` reaches
//! the tapes, check-numerics, sharded execution and the rules `vmap` and
//! `autodiff` write for region ops only through what they register
//! (`tensor::hooks`). `tests/layering.rs` holds the order and fails on an
//! import that points up it; the book's internals chapter explains it.

#![warn(missing_docs)]

pub mod autodiff;
/// Unstable internals, not part of the public API: The run-time side of `#[xlafn::function]`'s AutoGraph rewrite (called by generated code).
#[doc(hidden)]
pub mod autograph;
#[cfg(feature = "bench")]
pub mod bench;
mod composite;
// The book's chapters and the README, run as doctests (see src/book.rs).
// They use the default features, as the test files do.
#[cfg(all(
    doctest,
    feature = "data",
    feature = "train",
    feature = "summary",
    feature = "bench",
    feature = "distributed"
))]
mod book;
pub(crate) mod bounded_cache;
pub mod checkpoint;
pub mod control;
#[cfg(feature = "data")]
pub mod data;
pub mod debug;
#[cfg(feature = "distributed")]
pub mod distributed;
pub mod dtype;
pub mod environment;
pub mod error;
pub mod export;
pub(crate) mod files;
pub mod function;
pub mod initializers;
/// Unstable internals, not part of the public API: The graph IR: types, shapes, graphs.
#[doc(hidden)]
pub mod ir;
/// Unstable internals, not part of the public API: Lowering graphs to StableHLO text.
#[doc(hidden)]
pub mod lower;
mod mesh;
pub mod module;
pub mod nn;
/// Unstable internals, not part of the public API: The op catalog: each op's attributes, shape rule, lowering and gradient. The user-facing parts are `Tensor` methods and the re-exports at the crate root.
#[doc(hidden)]
pub mod ops;
pub mod optimizers;
pub mod random;
/// The layer below functions: PJRT clients, devices, buffers and compiled
/// programs, for inspecting what XLA compiled, timing raw execution, or
/// driving a plugin directly. Most programs never name it.
pub mod runtime;
pub mod sharding;
pub(crate) mod single_flight;
#[cfg(feature = "summary")]
pub mod summary;
pub mod tensor;
/// Unstable internals, not part of the public API: The tracing context.
#[doc(hidden)]
pub mod trace;
#[cfg(feature = "train")]
pub mod train;
pub mod variable;
pub mod vmap;
pub mod weights;

pub use autodiff::{GradientTape, Source, recompute_grad};
pub use composite::tridiagonal::tridiagonal_solve;
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
pub use ir::{Scalar, Shape, TensorType};
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
pub use ops::fft::{FftNorm, FftType, fft_op};
pub use ops::pad::PadMode;
pub use ops::products::multi_dot;
pub use ops::stats::{NormOrd, clip_by_global_norm};
pub use ops::window::{WindowDims, WindowKind};
pub use runtime::profile;
pub use runtime::{Device, MemoryStats, set_cpu_device_count};
pub use runtime::{disk_cache_stats, set_disk_cache_enabled};
pub use tensor::{Tensor, default_device, devices, local_devices, with_device};
pub use variable::Variable;
pub use vmap::{OutAxes, vectorized_map, vmap, vmap_with};
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
    pub use crate::ops::fft::FftNorm;
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
