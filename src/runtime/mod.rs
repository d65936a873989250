//! Layer: runtime. PJRT plugin loading (and, in `plugin_store`, finding,
//! fetching and verifying the plugin at run time), clients, devices,
//! buffers, compile and execute. Imports only `dtype`, `error` and the
//! safe file layer `files`; never sees a graph. This is
//! the only module of the crate with `unsafe` code; every block carries a
//! `// SAFETY:` comment.
//!
//! Thread safety: `Client`, `Buffer` and `Executable` are `Send + Sync`
//! because the PJRT C API documents its clients, buffers and loaded
//! executables as thread-safe; each type's module says more.
//!
//! Hazards of the CPU plugin that these wrappers guard (see the project's
//! PJRT notes): execute checks only byte sizes (we check dtype and dims);
//! empty compile options abort (we always encode replicas and partitions);
//! a Bool `cpu_device_count` aborts (refused in `Client::from_plugin`).

mod buffer;
mod call_scope;
mod client;
mod disk_cache;
pub mod element;
mod executable;
mod ffi;
pub mod hlo;
mod in_flight;
mod kv_callbacks;
mod options;
mod plugin;
pub mod plugin_store;
pub mod profile;
mod program_limits;
pub mod recycle;
mod run_health;
mod shared_compile;
pub(crate) mod sys;
mod wait;

pub use crate::dtype::ArraySpec;
pub use buffer::{Buffer, DeviceMemory, live_buffer_count, live_memory};
pub use call_scope::{CallScope, current_call_scope, with_call_scope};
pub use client::{
    CPU_MULTI_PROCESS_MESSAGE, Client, Device, MAX_CPU_DEVICES, OptionValue, Platform,
    cpu_device_count, set_cpu_device_count,
};
pub(crate) use client::{check_addressable, default_client_device};
#[cfg(feature = "distributed")]
pub(crate) use client::{check_can_join_run, join_run, leave_run};
pub use disk_cache::{disk_cache_stats, set_disk_cache_enabled};
pub use element::Element;
pub use executable::{CostAnalysis, Executable, MemoryStats, xla_compile_count};
pub(crate) use ffi::in_host_callback;
pub use ffi::{
    CallbackKind, CallbackRegistration, HOST_CALLBACK_TARGET, HostArray, HostCallbackFn,
    host_callback_kind, live_host_callbacks, register_host_callback,
};
pub use hlo::{OpSharding, OptimizedProgram};
pub use kv_callbacks::KeyValueStore;
pub use options::{CompileOptions, Partitioner, ProgramTraits};
pub use plugin::{Plugin, default_cuda_plugin_path, default_plugin_path};
pub use plugin_store::{
    CudaPackage, fetch_cpu_plugin, fetch_cuda_plugin, install_cpu_plugin, install_cuda_plugin,
    plugin_cache_dir, verify_cpu_plugin, verify_cuda_plugin,
};
pub use program_limits::{CUDA_MAX_CONV_SPATIAL_DIMS, max_conv_spatial_dims};
#[cfg(feature = "distributed")]
pub(crate) use run_health::report_dead_process;
pub use shared_compile::shared_executables_loaded;
