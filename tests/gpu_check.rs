//! The GPU check (`scripts/gpu-check.sh`): one test binary holding most of
//! the suite, built here with `XLAFN_GPU_CHECK=1` and run on a GPU machine
//! that has no Rust toolchain. Everywhere else this crate is empty
//! (`xlafn_gpu_check` is unset), so `cargo test` does not run its tests
//! twice.
//!
//! Each module is one test file of the suite, unchanged; the script runs
//! the binary once per module (a crash then loses one row of the table,
//! not the run) with `XLAFN_DEVICE=cuda`, so every test's default device is
//! the GPU. `report` says which plugin, API version and devices ran it.
//!
//! Left out: the files that need the CPU plugin itself (devices, runtime,
//! runtime_spmd, robust_plugin, export_calling_convention, distributed),
//! or the source tree's data files at their build-time path (cli,
//! tensor_files, cnn_digits, gpt_example, resnet_example). `multi_process`
//! is in: under `XLAFN_DEVICE=cuda` its shim tests are ignored, and its
//! two-process run takes one GPU per process where the machine has two,
//! and says it skipped where it has fewer (the table's notes list every
//! `skipped:` line).
#![cfg(xlafn_gpu_check)]

// Every device kind, and the guide's behaviour: tracing, retracing, concrete
// functions, control flow, variables, debugging.
#[path = "autograph_jumps.rs"]
mod autograph_jumps;
#[path = "autograph_jumps_eager.rs"]
mod autograph_jumps_eager;
#[path = "autograph_macro.rs"]
mod autograph_macro;
#[path = "control_flow.rs"]
mod control_flow;
#[path = "display.rs"]
mod display;
#[path = "guide_basics.rs"]
mod guide_basics;
#[path = "guide_concrete_functions.rs"]
mod guide_concrete_functions;
#[path = "guide_controlling_retracing.rs"]
mod guide_controlling_retracing;
#[path = "guide_debugging.rs"]
mod guide_debugging;
#[path = "guide_graphs.rs"]
mod guide_graphs;
#[path = "guide_limitations.rs"]
mod guide_limitations;
#[path = "guide_rules_of_tracing.rs"]
mod guide_rules_of_tracing;
#[path = "guide_tracing.rs"]
mod guide_tracing;
#[path = "jit_compile.rs"]
mod jit_compile;
#[path = "lifted_initializers.rs"]
mod lifted_initializers;
#[path = "logging.rs"]
mod logging;
#[path = "multi_process.rs"]
mod multi_process;
#[path = "on_every_device.rs"]
mod on_every_device;
#[path = "tensor_array.rs"]
mod tensor_array;
#[path = "variables.rs"]
mod variables;
#[path = "variables_in_control_flow.rs"]
mod variables_in_control_flow;

// Op families against references computed on the host.
#[path = "complex_dtype.rs"]
mod complex_dtype;
#[path = "initializers.rs"]
mod initializers;
#[path = "matmul_precision.rs"]
mod matmul_precision;
#[path = "matmul_program.rs"]
mod matmul_program;
#[path = "op_table.rs"]
mod op_table;
#[path = "ops_bitwise.rs"]
mod ops_bitwise;
#[path = "ops_constant.rs"]
mod ops_constant;
#[path = "ops_conv.rs"]
mod ops_conv;
#[path = "ops_decomp.rs"]
mod ops_decomp;
#[path = "ops_einsum.rs"]
mod ops_einsum;
#[path = "ops_elementwise.rs"]
mod ops_elementwise;
#[path = "ops_fft.rs"]
mod ops_fft;
#[path = "ops_linalg.rs"]
mod ops_linalg;
#[path = "ops_lu.rs"]
mod ops_lu;
#[path = "ops_matrix.rs"]
mod ops_matrix;
#[path = "ops_orthogonal.rs"]
mod ops_orthogonal;
#[path = "ops_pad.rs"]
mod ops_pad;
#[path = "ops_reduce.rs"]
mod ops_reduce;
#[path = "ops_scatter.rs"]
mod ops_scatter;
#[path = "ops_shape.rs"]
mod ops_shape;
#[path = "ops_sort.rs"]
mod ops_sort;
#[path = "ops_special.rs"]
mod ops_special;
#[path = "ops_split.rs"]
mod ops_split;
#[path = "ops_stats.rs"]
mod ops_stats;
#[path = "ops_window.rs"]
mod ops_window;
#[path = "random_keys.rs"]
mod random_keys;
#[path = "structured_half_precision.rs"]
mod structured_half_precision;

// Gradients (finite differences), models, optimizers, checkpoints.
#[path = "custom_gradient.rs"]
mod custom_gradient;
#[path = "gradients.rs"]
mod gradients;
#[path = "layers.rs"]
mod layers;
#[path = "layers_attention.rs"]
mod layers_attention;
#[path = "layers_attention_cache.rs"]
mod layers_attention_cache;
#[path = "layers_conv.rs"]
mod layers_conv;
#[path = "layers_norm_pool.rs"]
mod layers_norm_pool;
#[path = "layers_recurrent.rs"]
mod layers_recurrent;
#[path = "loop_gradient_program.rs"]
mod loop_gradient_program;
#[path = "losses.rs"]
mod losses;
#[path = "metrics.rs"]
mod metrics;
#[path = "metrics_confusion.rs"]
mod metrics_confusion;
#[path = "mixed_precision.rs"]
mod mixed_precision;
#[path = "modules_and_checkpoints.rs"]
mod modules_and_checkpoints;
#[path = "nn.rs"]
mod nn;
#[path = "optimizer_options.rs"]
mod optimizer_options;
#[path = "optimizer_recipes.rs"]
mod optimizer_recipes;
#[path = "optimizers.rs"]
mod optimizers;
#[path = "preferred_element_type.rs"]
mod preferred_element_type;
#[path = "real_models.rs"]
mod real_models;
#[path = "remat.rs"]
mod remat;
#[path = "resumable_training.rs"]
mod resumable_training;
#[path = "weights.rs"]
mod weights;

// The bench report's models against their peers' losses, and the
// program rewrites made for them.
#[path = "loop_hoisting.rs"]
mod loop_hoisting;
#[path = "slice_gradients.rs"]
mod slice_gradients;

// Inspection: stages with XLA's analyses, the bench API, profiles,
// live memory.
#[path = "bench_api.rs"]
mod bench_api;
#[path = "bigru_step_matches_peers.rs"]
mod bigru_step_matches_peers;
#[path = "gpt_step_matches_peers.rs"]
mod gpt_step_matches_peers;
#[path = "live_memory.rs"]
mod live_memory;
#[path = "products_see_updated_weights.rs"]
mod products_see_updated_weights;
#[path = "profile.rs"]
mod profile;
#[path = "resnet_step_matches_peers.rs"]
mod resnet_step_matches_peers;
#[path = "stages.rs"]
mod stages;
#[path = "transformer_with_layers_matches_peers.rs"]
mod transformer_with_layers_matches_peers;

// Exports (loaded here and run by the `xlafn` tool), the compile cache,
// concurrency, buffers and hostile input.
#[path = "buffer_recycling.rs"]
mod buffer_recycling;
#[path = "check_numerics.rs"]
mod check_numerics;
#[path = "compile_cache.rs"]
mod compile_cache;
#[path = "export.rs"]
mod export;
#[path = "export_any_shape.rs"]
mod export_any_shape;
#[path = "function_concurrency.rs"]
mod function_concurrency;
#[path = "leaks.rs"]
mod leaks;
#[path = "print_and_callbacks.rs"]
mod print_and_callbacks;
#[path = "print_scopes.rs"]
mod print_scopes;
#[path = "robust_callbacks.rs"]
mod robust_callbacks;
#[path = "robust_compile_cache.rs"]
mod robust_compile_cache;
#[path = "robust_concurrency.rs"]
mod robust_concurrency;
#[path = "robust_conversions.rs"]
mod robust_conversions;
#[path = "robust_eager_cache.rs"]
mod robust_eager_cache;
#[path = "robust_export.rs"]
mod robust_export;
#[path = "robust_export_files.rs"]
mod robust_export_files;
#[path = "robust_nesting.rs"]
mod robust_nesting;
#[path = "robust_parallel_small_programs.rs"]
mod robust_parallel_small_programs;
#[path = "robust_sizes.rs"]
mod robust_sizes;

// Sharding and data parallelism over the GPU's devices (one on the lent
// machines; the CPU plugin's 4-device cases are ignored).
#[path = "data_parallel.rs"]
mod data_parallel;

// Feeding and watching training, and the transformations.
#[path = "associative_scan.rs"]
mod associative_scan;
#[path = "data_pipeline.rs"]
mod data_pipeline;
#[path = "guide_looping_over_data.rs"]
mod guide_looping_over_data;
#[path = "jacobians_and_forward_mode.rs"]
mod jacobians_and_forward_mode;
#[path = "robust_sharding.rs"]
mod robust_sharding;
#[path = "robust_transforms.rs"]
mod robust_transforms;
#[path = "scan.rs"]
mod scan;
#[path = "shard_map.rs"]
mod shard_map;
#[path = "sharding.rs"]
mod sharding;
#[path = "summary.rs"]
mod summary;
#[path = "training_loop.rs"]
mod training_loop;
#[path = "vmap.rs"]
mod vmap;
#[path = "vmap_loops.rs"]
mod vmap_loops;

/// Prints what ran the check: the plugin, its PJRT C API version, the
/// platform and devices. The script runs it first, with `--nocapture`.
#[test]
fn report() {
    use xlafn::runtime::{Client, Plugin};
    let plugin = std::env::var_os("XLAFN_CUDA_PLUGIN").expect("the script sets XLAFN_CUDA_PLUGIN");
    let loaded = Plugin::load(std::path::Path::new(&plugin)).unwrap();
    let (major, minor) = loaded.version();
    println!("plugin: {}", loaded.path().display());
    println!("PJRT C API: {major}.{minor}");
    let client = Client::default_client().unwrap();
    println!("platform: {}", client.platform_name());
    for d in client.devices() {
        println!("device: {d}");
    }
    assert_eq!(client.platform(), xlafn::runtime::Platform::Cuda);
}
