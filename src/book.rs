//! The book and the README as doctests: this module exists so that
//! `cargo test` compiles and runs every Rust block of the book
//! (`book/src`, chapters as `book/src/SUMMARY.md` lists them) and of the
//! README. Each item's documentation is one chapter; the items hold
//! nothing else. Blocks tagged `rust` run, `no_run` ones are compiled
//! only, and `sh`, `toml` and `text` blocks are left alone.

#[doc = include_str!("../README.md")]
pub mod readme {}

#[doc = include_str!("../book/src/introduction.md")]
pub mod introduction {}

#[doc = include_str!("../book/src/getting-started.md")]
pub mod getting_started {}

#[doc = include_str!("../book/src/guide/tracing.md")]
pub mod guide_tracing {}

#[doc = include_str!("../book/src/guide/retracing.md")]
pub mod guide_retracing {}

#[doc = include_str!("../book/src/guide/signatures.md")]
pub mod guide_signatures {}

#[doc = include_str!("../book/src/guide/control-flow.md")]
pub mod guide_control_flow {}

#[doc = include_str!("../book/src/guide/variables.md")]
pub mod guide_variables {}

#[doc = include_str!("../book/src/guide/gradients.md")]
pub mod guide_gradients {}

#[doc = include_str!("../book/src/guide/transformations.md")]
pub mod guide_transformations {}

#[doc = include_str!("../book/src/guide/random.md")]
pub mod guide_random {}

#[doc = include_str!("../book/src/guide/layers.md")]
pub mod guide_layers {}

#[doc = include_str!("../book/src/guide/training.md")]
pub mod guide_training {}

#[doc = include_str!("../book/src/guide/data.md")]
pub mod guide_data {}

#[doc = include_str!("../book/src/guide/checkpoints.md")]
pub mod guide_checkpoints {}

#[doc = include_str!("../book/src/guide/weights.md")]
pub mod guide_weights {}

#[doc = include_str!("../book/src/guide/export.md")]
pub mod guide_export {}

#[doc = include_str!("../book/src/guide/devices.md")]
pub mod guide_devices {}

#[doc = include_str!("../book/src/guide/sharding.md")]
pub mod guide_sharding {}

#[doc = include_str!("../book/src/guide/multi-process.md")]
pub mod guide_multi_process {}

#[doc = include_str!("../book/src/guide/cuda.md")]
pub mod guide_cuda {}

#[doc = include_str!("../book/src/guide/performance.md")]
pub mod guide_performance {}

#[doc = include_str!("../book/src/guide/debugging.md")]
pub mod guide_debugging {}

#[doc = include_str!("../book/src/guide/sharp-bits.md")]
pub mod guide_sharp_bits {}

#[doc = include_str!("../book/src/coming-from/tensorflow.md")]
pub mod coming_from_tensorflow {}

#[doc = include_str!("../book/src/coming-from/jax.md")]
pub mod coming_from_jax {}

#[doc = include_str!("../book/src/coming-from/pytorch.md")]
pub mod coming_from_pytorch {}

#[doc = include_str!("../book/src/coming-from/candle-and-burn.md")]
pub mod coming_from_candle_and_burn {}

#[doc = include_str!("../book/src/porting.md")]
pub mod porting {}

#[doc = include_str!("../book/src/reference/ops.md")]
pub mod reference_ops {}

#[doc = include_str!("../book/src/reference/tensor-methods.md")]
pub mod reference_tensor_methods {}

#[doc = include_str!("../book/src/reference/environment.md")]
pub mod reference_environment {}

#[doc = include_str!("../book/src/reference/export-format.md")]
pub mod reference_export_format {}

#[doc = include_str!("../book/src/reference/tensor-files.md")]
pub mod reference_tensor_files {}

#[doc = include_str!("../book/src/reference/errors.md")]
pub mod reference_errors {}

#[doc = include_str!("../book/src/reference/security.md")]
pub mod reference_security {}

#[doc = include_str!("../book/src/reference/benchmarks.md")]
pub mod reference_benchmarks {}

#[doc = include_str!("../book/src/reference/benchmark-history.md")]
pub mod reference_benchmark_history {}

#[doc = include_str!("../book/src/internals/path-of-an-op.md")]
pub mod internals_path_of_an_op {}

#[doc = include_str!("../book/src/internals/layers.md")]
pub mod internals_layers {}

#[doc = include_str!("../book/src/internals/adding-an-op.md")]
pub mod internals_adding_an_op {}

#[doc = include_str!("../book/src/internals/adding-other-things.md")]
pub mod internals_adding_other_things {}

#[doc = include_str!("../book/src/internals/tests.md")]
pub mod internals_tests {}

#[doc = include_str!("../book/src/internals/benchmark-method.md")]
pub mod internals_benchmark_method {}
