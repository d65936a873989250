//! Compiling StableHLO text and executing the result.
//!
//! PJRT's execute checks only byte sizes, so an `Executable` records its
//! parameter dtypes and dimensions at compile time and `execute` refuses
//! buffers that do not match, instead of letting XLA reinterpret bits.
//!
//! Thread safety: PJRT loaded executables may be executed concurrently from
//! several threads, so `Executable` is `Send + Sync`. One exception, measured
//! on the pinned CPU plugin: programs compiled with XLA's XNNPACK graph
//! fusion build their XNNPACK runtimes lazily, during their first
//! executions, and two threads doing that at once corrupt the heap (8
//! threads running new small functions crashed about one process in five
//! with "malloc(): unaligned tcache chunk detected" inside
//! `xnn_create_runtime_with_threadpool`; none did with the fusion off). Such
//! programs therefore run one at a time, each holding `XNN_EXECUTIONS`
//! until its results are ready. They are small (the fusion is chosen only
//! for programs of small arrays, without loops or host callbacks), so the
//! lock costs little.

use super::buffer::{Buffer, dtype_of};
use super::call_scope::ExecutionScope;
use super::client::{Client, Device};
use super::options::CompileOptions;
use super::sys;
use super::wait::WaitHistory;
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use std::ffi::c_char;
use std::sync::atomic::{AtomicBool, Ordering};

mod inspect;
pub use inspect::{CostAnalysis, MemoryStats};
use std::sync::{Arc, Mutex};

/// Held by each execution of a program compiled with XNNPACK graph fusion,
/// from the call until its results are ready (see the module docs).
static XNN_EXECUTIONS: Mutex<()> = Mutex::new(());

/// Does a program compiled with `options` use XNNPACK graph fusion, and so
/// need `XNN_EXECUTIONS`? Not when it calls back into Rust: a callback
/// that ran another such program would wait for itself.
fn runs_one_at_a_time(options: &CompileOptions, mlir: &str) -> bool {
    let fused = options.string_flags.iter().any(|(name, mode)| {
        name == "xla_cpu_experimental_xnn_graph_fusion_mode"
            && mode != "XNN_GRAPH_FUSION_MODE_DISABLED"
    });
    fused && !mlir.contains(super::ffi::HOST_CALLBACK_TARGET)
}

/// A compiled program, loaded on a client's device.
pub struct Executable {
    client: Arc<Client>,
    raw: *mut sys::PJRT_LoadedExecutable,
    /// Where it runs: one device per partition, in partition order.
    devices: Vec<Device>,
    /// Each partition's parameters (the shards' types).
    params: Vec<ArraySpec>,
    outputs: Vec<ArraySpec>,
    /// How many trailing parameters are output slots (see `recycle`).
    output_slots: usize,
    /// How the waits for this program's results went (see `wait`).
    wait_history: Arc<WaitHistory>,
    /// Runs under `XNN_EXECUTIONS` (see the module docs).
    one_at_a_time: bool,
    /// Calls back into Rust: each execution carries the caller's call
    /// scope in an execution context and is waited for (`call_scope`).
    host_calls: bool,
    /// Set by the first launch, which waits for its run to finish (see
    /// `in_flight`).
    launched: AtomicBool,
    /// Cleared when the first run had finished by the time `Execute`
    /// returned: XLA's CPU client runs tiny programs inline, always, and
    /// those never need their completion tracked (the event would cost
    /// an eager op 15%: 2.6 µs to 3.1 µs on W1).
    tracks_completion: AtomicBool,
}

// SAFETY: PJRT loaded executables are immutable after compilation and
// documented as safe to execute from several threads at once.
unsafe impl Send for Executable {}
// SAFETY: as for `Send`.
unsafe impl Sync for Executable {}

impl std::fmt::Debug for Executable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Executable(params={:?}, outputs={:?})",
            self.params, self.outputs
        )
    }
}

const MLIR_FORMAT: &str = "mlir";

static XLA_COMPILES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// How many programs this process has had XLA compile (loads from the
/// disk cache or from another process of the run are not compiles).
pub fn xla_compile_count() -> u64 {
    XLA_COMPILES.load(std::sync::atomic::Ordering::Relaxed)
}

impl Executable {
    /// Compiles a StableHLO module (MLIR text with a `func.func public @main`)
    /// whose parameters are `params`.
    pub fn compile(
        client: &Arc<Client>,
        mlir: &str,
        params: Vec<ArraySpec>,
        options: &CompileOptions,
    ) -> Result<Executable> {
        options.check()?;
        super::program_limits::check_program(client, mlir)?;
        let _span = super::profile::span("compile")
            .arg("program_bytes", mlir.len())
            .arg("platform", client.platform_name());
        let plugin = client.plugin();
        // xlafn's own tuning flags that this plugin refused before are
        // left out; one it refuses now is dropped and the compile retried.
        let mut options = plugin.known_options(options);
        let raw = loop {
            let error = match compile_raw(client, mlir, &options) {
                Ok(raw) => break raw,
                Err(e) => e,
            };
            let refused = unknown_option(&error)
                .filter(|name| options.optional_flags.iter().any(|n| n == name));
            let Some(name) = refused else {
                return Err(error);
            };
            tracing::info!(
                target: "xlafn::compile",
                plugin = %plugin.path().display(),
                "the plugin does not know compile option {name}; compiling without it"
            );
            plugin.forget_option(&name);
            options = options.without_flag(&name);
        };
        let mut exe = Executable {
            client: client.clone(),
            raw,
            devices: Vec::new(),
            params,
            outputs: Vec::new(),
            output_slots: 0,
            wait_history: Arc::default(),
            one_at_a_time: false,
            host_calls: mlir.contains(super::ffi::HOST_CALLBACK_TARGET),
            launched: AtomicBool::new(false),
            tracks_completion: AtomicBool::new(true),
        };
        exe.devices = exe.query_devices()?;
        exe.outputs = exe.query_outputs()?;
        exe.one_at_a_time = runs_one_at_a_time(&options, mlir);
        XLA_COMPILES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Ok(exe)
    }

    /// Like `compile`, but first looks in the on-disk compile cache
    /// (`disk_cache`), and stores what it compiles there. In a
    /// multi-process run, a program whose devices span the processes is
    /// compiled by process 0 alone and loaded by the others
    /// (`shared_compile`).
    pub fn compile_cached(
        client: &Arc<Client>,
        mlir: &str,
        params: Vec<ArraySpec>,
        options: &CompileOptions,
    ) -> Result<Executable> {
        if mlir.contains(super::ffi::HOST_CALLBACK_TARGET) {
            return Self::compile_cached_here(client, mlir, params, options);
        }
        super::shared_compile::compile_once_per_run(
            client,
            mlir,
            options,
            || Self::compile_cached_here(client, mlir, params.clone(), options),
            |bytes| {
                let mut exe = Self::deserialize(client, bytes, params.clone())?;
                exe.one_at_a_time = runs_one_at_a_time(options, mlir);
                Ok(exe)
            },
        )
    }

    /// `compile_cached` in this process alone.
    fn compile_cached_here(
        client: &Arc<Client>,
        mlir: &str,
        params: Vec<ArraySpec>,
        options: &CompileOptions,
    ) -> Result<Executable> {
        let started = std::time::Instant::now();
        let log = |disk_cache: &str| {
            tracing::info!(
                target: "xlafn::compile",
                program_bytes = mlir.len(),
                parameters = params.len(),
                platform = client.platform_name(),
                disk_cache,
                ms = started.elapsed().as_secs_f64() * 1e3,
                flags = ?options,
                "compiled a program"
            );
        };
        // Host callback ids are drawn afresh per registration, so a program
        // that calls one is never met again: not worth a disk cache entry.
        if mlir.contains(super::ffi::HOST_CALLBACK_TARGET) {
            let exe = Self::compile(client, mlir, params.clone(), options)?;
            log("not used (host callbacks)");
            return Ok(exe);
        }
        options.check()?;
        let encoded = options.encode();
        let key = super::disk_cache::key(client, mlir, &encoded);
        if let Some(bytes) = key.as_ref().and_then(super::disk_cache::load) {
            let _span = super::profile::span("disk cache load").arg("bytes", bytes.len());
            if let Ok(mut exe) = Self::deserialize(client, &bytes, params.clone()) {
                exe.one_at_a_time = runs_one_at_a_time(options, mlir);
                log("hit");
                return Ok(exe);
            }
        }
        let exe = Self::compile(client, mlir, params.clone(), options)?;
        match key {
            Some(key) => {
                if let Ok(bytes) = exe.serialize() {
                    super::disk_cache::store(&key, &bytes);
                }
                log("miss");
            }
            None => log("off"),
        }
        Ok(exe)
    }

    /// The plugin's serialization of this executable (valid only for the
    /// same plugin build).
    pub fn serialize(&self) -> Result<Vec<u8>> {
        let plugin = self.client.plugin();
        let exe = self.executable()?;
        let mut args = sys::PJRT_Executable_Serialize_Args {
            struct_size: sys::PJRT_Executable_Serialize_Args_STRUCT_SIZE as usize,
            executable: exe,
            ..Default::default()
        };
        let result = match plugin.func(
            plugin.api().PJRT_Executable_Serialize,
            "PJRT_Executable_Serialize",
        ) {
            Ok(f) => {
                // SAFETY: `exe` is live; the bytes are owned by
                // `serialized_executable` and copied before its deleter runs.
                let status = plugin.check(unsafe { f(&mut args) }, "PJRT_Executable_Serialize");
                status.map(|()| {
                    // SAFETY: the plugin returned a buffer of exactly this size.
                    let bytes = unsafe {
                        std::slice::from_raw_parts(
                            args.serialized_bytes.cast::<u8>(),
                            args.serialized_bytes_size,
                        )
                    }
                    .to_vec();
                    if let Some(deleter) = args.serialized_executable_deleter {
                        // SAFETY: called once, on the object the plugin gave us.
                        unsafe { deleter(args.serialized_executable) };
                    }
                    bytes
                })
            }
            Err(e) => Err(e),
        };
        self.destroy_executable(exe);
        result
    }

    /// Loads an executable serialized by the same plugin build.
    pub fn deserialize(
        client: &Arc<Client>,
        bytes: &[u8],
        params: Vec<ArraySpec>,
    ) -> Result<Executable> {
        let plugin = client.plugin();
        let mut args = sys::PJRT_Executable_DeserializeAndLoad_Args {
            struct_size: sys::PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE as usize,
            client: client.raw(),
            serialized_executable: bytes.as_ptr().cast::<c_char>(),
            serialized_executable_size: bytes.len(),
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_Executable_DeserializeAndLoad,
            "PJRT_Executable_DeserializeAndLoad",
        )?;
        // SAFETY: `bytes` came from `serialize` on this plugin build (the
        // disk cache verifies the key and a checksum before calling this)
        // and outlives the call.
        plugin.check(
            unsafe { f(&mut args) },
            "PJRT_Executable_DeserializeAndLoad",
        )?;
        let mut exe = Executable {
            client: client.clone(),
            raw: args.loaded_executable,
            devices: Vec::new(),
            params,
            outputs: Vec::new(),
            output_slots: 0,
            wait_history: Arc::default(),
            one_at_a_time: false,
            host_calls: false,
            launched: AtomicBool::new(false),
            tracks_completion: AtomicBool::new(true),
        };
        exe.devices = exe.query_devices()?;
        exe.outputs = exe.query_outputs()?;
        Ok(exe)
    }

    /// Marks the last `n` parameters as output slots: `execute` fills them
    /// with recycled buffers (the program aliases them to its results).
    pub fn with_output_slots(mut self, n: usize) -> Executable {
        self.output_slots = n.min(self.params.len());
        self
    }

    /// The parameters the caller passes (all but the output slots).
    pub fn user_params(&self) -> &[ArraySpec] {
        &self.params[..self.params.len() - self.output_slots]
    }

    /// Every parameter of the program: the user's, then any the runtime
    /// appends (captured values, a callback's state).
    pub fn params(&self) -> &[ArraySpec] {
        &self.params
    }

    /// The program's results.
    pub fn outputs(&self) -> &[ArraySpec] {
        &self.outputs
    }

    /// The client that compiled the program.
    pub fn client(&self) -> &Arc<Client> {
        &self.client
    }

    /// The devices it runs on, one per partition in partition order.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Runs the program on its device. Results are returned at once and
    /// become ready asynchronously (reading one waits for it).
    pub fn execute(&self, args: &[&Buffer]) -> Result<Vec<Buffer>> {
        self.execute_with(args, &[])
    }

    /// `execute`, keeping the arguments at `non_donatable` (indices) intact
    /// even where the program aliases them to results: XLA then writes
    /// those results into fresh memory (used when another tensor still
    /// holds a variable's old value).
    pub fn execute_with(&self, args: &[&Buffer], non_donatable: &[i64]) -> Result<Vec<Buffer>> {
        if !self.one_at_a_time {
            return self.launch(args, non_donatable);
        }
        let _one_at_a_time = XNN_EXECUTIONS.lock().unwrap_or_else(|e| e.into_inner());
        let outs = self.launch(args, non_donatable)?;
        for out in &outs {
            out.block_until_ready()?;
        }
        Ok(outs)
    }

    /// Starts the program; its results are ready when their events say so.
    fn launch(&self, args: &[&Buffer], non_donatable: &[i64]) -> Result<Vec<Buffer>> {
        if self.devices.len() != 1 {
            return Err(Error::Value(format!(
                "this program runs on {} devices: execute it with one argument list per device",
                self.devices.len()
            )));
        }
        // The device is formatted only while a profile records: this is
        // every call's path.
        let _span = super::profile::span("execute").arg("device", self.devices[0]);
        let device = self.devices[0];
        self.check_args(args, device)?;
        // Output slots get recycled buffers, donated to the results. After
        // the call they are consumed and their handles are destroyed on drop.
        let slots: Vec<Buffer> = self.params[args.len()..]
            .iter()
            .map(|spec| Buffer::for_output_slot(&self.client, device, spec))
            .collect::<Result<_>>()?;
        // Small argument and result lists live on the stack (the hot path).
        let mut arg_ptrs: SmallList = SmallList::new(args.len() + slots.len());
        for (k, b) in args
            .iter()
            .map(|b| b.raw())
            .chain(slots.iter().map(Buffer::raw))
            .enumerate()
        {
            arg_ptrs.as_mut()[k] = b;
        }
        let arg_list: *const *mut sys::PJRT_Buffer = arg_ptrs.as_mut().as_ptr();
        let mut out_ptrs = SmallList::new(self.outputs.len());
        let out_list: *mut *mut sys::PJRT_Buffer = out_ptrs.as_mut().as_mut_ptr();
        // SAFETY: the argument and output lists are [1][n] arrays that
        // outlive the call; every argument is a live buffer of this client
        // on the program's device whose dtype and dims were checked against
        // the compiled parameters (slots are made from the parameter
        // types); the output list has room for exactly the program's
        // outputs.
        unsafe {
            self.execute_lists(
                std::slice::from_ref(&arg_list),
                args.len() + slots.len(),
                std::slice::from_ref(&out_list),
                non_donatable,
            )?;
        }
        drop(slots);
        Ok(self.adopt_results(out_ptrs.as_mut(), device))
    }

    /// Calls PJRT's execute with one argument and one output list per
    /// device of the program, under the calling thread's call scope. With
    /// a scope (the program may call back into Rust) it waits for every
    /// device, consuming each event, because the execution context must
    /// outlive the run. A program's first run is waited for too (see
    /// `in_flight`: the plugin may set up static state in it). Otherwise
    /// the events go to `in_flight`, which waits for them if the process
    /// exits first; programs that run inline ask for none (the hot path:
    /// one device's event slot lives on the stack, unused).
    ///
    /// # Safety
    /// `arg_lists` and `out_lists` hold one list per device of the program,
    /// in its device order, valid for the call: each argument list has
    /// `num_args` live buffers of this client, on that device, of the
    /// types of the program's parameters; each output list has room for
    /// the program's outputs.
    unsafe fn execute_lists(
        &self,
        arg_lists: &[*const *mut sys::PJRT_Buffer],
        num_args: usize,
        out_lists: &[*mut *mut sys::PJRT_Buffer],
        non_donatable: &[i64],
    ) -> Result<()> {
        let plugin = self.client.plugin();
        let scope = self.execution_scope()?;
        let mut options = sys::PJRT_ExecuteOptions {
            struct_size: sys::PJRT_ExecuteOptions_STRUCT_SIZE as usize,
            non_donatable_input_indices: non_donatable.as_ptr(),
            num_non_donatable_input_indices: non_donatable.len(),
            context: scope
                .as_ref()
                .map_or(std::ptr::null_mut(), ExecutionScope::context),
            ..Default::default()
        };
        let mut one = [std::ptr::null_mut::<sys::PJRT_Event>(); 1];
        let mut many: Vec<*mut sys::PJRT_Event> = Vec::new();
        let done: &mut [*mut sys::PJRT_Event] = match arg_lists.len() {
            1 => &mut one,
            n => {
                many.resize(n, std::ptr::null_mut());
                &mut many
            }
        };
        let first_run = !self.launched.swap(true, Ordering::Relaxed);
        let tracked =
            scope.is_some() || first_run || self.tracks_completion.load(Ordering::Relaxed);
        let mut exec = sys::PJRT_LoadedExecutable_Execute_Args {
            struct_size: sys::PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE as usize,
            executable: self.raw,
            options: &mut options,
            argument_lists: arg_lists.as_ptr(),
            num_devices: arg_lists.len(),
            num_args,
            output_lists: out_lists.as_ptr(),
            device_complete_events: match tracked {
                true => done.as_mut_ptr(),
                false => std::ptr::null_mut(),
            },
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_LoadedExecutable_Execute,
            "PJRT_LoadedExecutable_Execute",
        )?;
        // SAFETY: the lists are as the caller guarantees; the options and
        // the event slots (one per device) outlive the call.
        plugin
            .check(unsafe { f(&mut exec) }, "PJRT_LoadedExecutable_Execute")
            .map_err(super::run_health::name_the_dead)?;
        if first_run && done.iter().all(|&e| plugin.event_is_ready(e)) {
            self.tracks_completion.store(false, Ordering::Relaxed);
        }
        if scope.is_some() || first_run {
            let waited: Vec<Result<()>> = done
                .iter()
                .map(|&e| plugin.await_event(e, "PJRT_LoadedExecutable_Execute", None))
                .collect();
            if first_run {
                super::in_flight::after_first_run();
            }
            waited
                .into_iter()
                .collect::<Result<()>>()
                .map_err(super::run_health::name_the_dead)?;
        } else if tracked {
            super::in_flight::keep(plugin, done);
        }
        drop(scope);
        Ok(())
    }

    /// Takes ownership of one device's result handles from an execute.
    fn adopt_results(&self, raws: &[*mut sys::PJRT_Buffer], device: Device) -> Vec<Buffer> {
        raws.iter()
            .zip(&self.outputs)
            .map(|(&raw, spec)| {
                Buffer::adopt(
                    self.client.clone(),
                    raw,
                    device,
                    spec.dtype,
                    spec.dims.clone(),
                )
                .with_wait_history(self.wait_history.clone())
            })
            .collect()
    }

    /// Runs a program compiled for several devices: `args[p]` are the
    /// arguments of partition `p` (on device `devices()[p]`); returns each
    /// partition's results. The arguments at `non_donatable` (indices
    /// into each list) stay intact even where the program aliases them to
    /// results. Programs with output slots are single-device only; host
    /// callbacks run with the calling thread's call scope, as in
    /// `execute`, on whichever devices the program calls back from.
    pub fn execute_partitioned(
        &self,
        args: &[Vec<&Buffer>],
        non_donatable: &[i64],
    ) -> Result<Vec<Vec<Buffer>>> {
        let _span = super::profile::span("execute").arg("devices", self.devices.len());
        if args.len() != self.devices.len() {
            return Err(Error::Value(format!(
                "the program runs on {} devices, got {} argument lists",
                self.devices.len(),
                args.len()
            )));
        }
        if self.output_slots > 0 {
            return Err(Error::Value(
                "a program with output slots runs on one device only".into(),
            ));
        }
        for (list, device) in args.iter().zip(&self.devices) {
            self.check_args(list, *device)?;
        }
        let arg_lists: Vec<Vec<*mut sys::PJRT_Buffer>> = args
            .iter()
            .map(|list| list.iter().map(|b| b.raw()).collect())
            .collect();
        let arg_ptrs: Vec<*const *mut sys::PJRT_Buffer> =
            arg_lists.iter().map(|l| l.as_ptr()).collect();
        let mut out_lists: Vec<Vec<*mut sys::PJRT_Buffer>> =
            vec![vec![std::ptr::null_mut(); self.outputs.len()]; self.devices.len()];
        let out_ptrs: Vec<*mut *mut sys::PJRT_Buffer> =
            out_lists.iter_mut().map(|l| l.as_mut_ptr()).collect();
        // SAFETY: one argument list per addressable device, in the
        // executable's device order, each of live buffers of this client on
        // that device whose dtypes and dims were checked against the
        // partition's parameters; one output list per device with room for
        // exactly the program's outputs; all lists outlive the call.
        unsafe { self.execute_lists(&arg_ptrs, self.params.len(), &out_ptrs, non_donatable)? };
        Ok(out_lists
            .iter()
            .zip(&self.devices)
            .map(|(list, device)| self.adopt_results(list, *device))
            .collect())
    }

    /// For a program with host callbacks, an execution context carrying
    /// the calling thread's call scope.
    fn execution_scope(&self) -> Result<Option<ExecutionScope>> {
        if !self.host_calls {
            return Ok(None);
        }
        let plugin = self.client.plugin();
        let (register, add) = super::ffi::user_data_entry_points(plugin)
            .ok_or_else(|| Error::Plugin("host callbacks need the PJRT FFI extension".into()))?;
        ExecutionScope::new(plugin, register, add).map(Some)
    }

    fn check_args(&self, args: &[&Buffer], device: Device) -> Result<()> {
        let params = self.user_params();
        if args.len() != params.len() {
            return Err(Error::Value(format!(
                "the program takes {} arguments, got {}",
                params.len(),
                args.len()
            )));
        }
        for (i, (b, p)) in args.iter().zip(params).enumerate() {
            if !p.describes(b.dtype(), b.dims()) {
                return Err(Error::Type(format!(
                    "argument {i}: the program expects {}{:?}, got {}{:?}",
                    p.dtype,
                    p.dims,
                    b.dtype(),
                    b.dims()
                )));
            }
            if !Arc::ptr_eq(b.client(), &self.client) {
                return Err(Error::Value(format!(
                    "argument {i} lives on another client"
                )));
            }
            if b.device() != device {
                return Err(Error::Value(format!(
                    "argument {i} is on {} but the program runs on {device}: move it with \
                     to_device first",
                    b.device()
                )));
            }
        }
        Ok(())
    }

    fn executable(&self) -> Result<*mut sys::PJRT_Executable> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_LoadedExecutable_GetExecutable_Args {
            struct_size: sys::PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE as usize,
            loaded_executable: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_LoadedExecutable_GetExecutable,
            "PJRT_LoadedExecutable_GetExecutable",
        )?;
        // SAFETY: live loaded executable; the returned handle is ours to destroy.
        plugin.check(
            unsafe { f(&mut args) },
            "PJRT_LoadedExecutable_GetExecutable",
        )?;
        Ok(args.executable)
    }

    /// The devices the plugin loaded the program on, in partition order.
    fn query_devices(&self) -> Result<Vec<Device>> {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_LoadedExecutable_AddressableDevices_Args {
            struct_size: sys::PJRT_LoadedExecutable_AddressableDevices_Args_STRUCT_SIZE as usize,
            executable: self.raw,
            ..Default::default()
        };
        let f = plugin.func(
            plugin.api().PJRT_LoadedExecutable_AddressableDevices,
            "PJRT_LoadedExecutable_AddressableDevices",
        )?;
        // SAFETY: live loaded executable; the list is owned by it and copied
        // at once.
        let raw = unsafe {
            plugin.check(f(&mut args), "PJRT_LoadedExecutable_AddressableDevices")?;
            if args.num_addressable_devices == 0 {
                &[][..]
            } else {
                std::slice::from_raw_parts(args.addressable_devices, args.num_addressable_devices)
            }
        };
        let devices: Vec<Device> = raw
            .iter()
            .map(|&d| {
                self.client.device_of_raw(d).ok_or_else(|| {
                    Error::Plugin(
                        "a program was loaded on a device its client does not list".into(),
                    )
                })
            })
            .collect::<Result<_>>()?;
        if devices.is_empty() {
            return Err(Error::Plugin("a program was loaded on no device".into()));
        }
        Ok(devices)
    }

    /// Reads the result dtypes and dimensions from the compiled program.
    fn query_outputs(&self) -> Result<Vec<ArraySpec>> {
        let plugin = self.client.plugin();
        let api = plugin.api();
        let exe = self.executable()?;
        let result = (|| {
            let mut types = sys::PJRT_Executable_OutputElementTypes_Args {
                struct_size: sys::PJRT_Executable_OutputElementTypes_Args_STRUCT_SIZE as usize,
                executable: exe,
                ..Default::default()
            };
            let f = plugin.func(
                api.PJRT_Executable_OutputElementTypes,
                "PJRT_Executable_OutputElementTypes",
            )?;
            // SAFETY: `exe` is live until destroyed below.
            plugin.check(
                unsafe { f(&mut types) },
                "PJRT_Executable_OutputElementTypes",
            )?;
            let mut dims = sys::PJRT_Executable_OutputDimensions_Args {
                struct_size: sys::PJRT_Executable_OutputDimensions_Args_STRUCT_SIZE as usize,
                executable: exe,
                ..Default::default()
            };
            let f = plugin.func(
                api.PJRT_Executable_OutputDimensions,
                "PJRT_Executable_OutputDimensions",
            )?;
            // SAFETY: as above.
            plugin.check(unsafe { f(&mut dims) }, "PJRT_Executable_OutputDimensions")?;
            let n = types.num_output_types;
            // SAFETY: both arrays are owned by `exe` and have the lengths the
            // plugin reported; they are copied before `exe` is destroyed.
            let (tys, sizes) = unsafe {
                if n == 0 {
                    (&[][..], &[][..])
                } else {
                    (
                        std::slice::from_raw_parts(types.output_types, n),
                        std::slice::from_raw_parts(dims.dim_sizes, dims.num_outputs),
                    )
                }
            };
            let total: usize = sizes.iter().sum();
            // SAFETY: `dims.dims` has `total` entries (sum of `dim_sizes`).
            let flat = unsafe {
                if total == 0 {
                    &[][..]
                } else {
                    std::slice::from_raw_parts(dims.dims, total)
                }
            };
            let mut offset = 0;
            let mut specs = Vec::with_capacity(n);
            for (t, &len) in tys.iter().zip(sizes) {
                specs.push(ArraySpec {
                    dtype: dtype_of(*t)?,
                    dims: flat[offset..offset + len].to_vec(),
                });
                offset += len;
            }
            Ok(specs)
        })();
        self.destroy_executable(exe);
        result
    }

    fn destroy_executable(&self, exe: *mut sys::PJRT_Executable) {
        let plugin = self.client.plugin();
        let mut destroy = sys::PJRT_Executable_Destroy_Args {
            struct_size: sys::PJRT_Executable_Destroy_Args_STRUCT_SIZE as usize,
            executable: exe,
            ..Default::default()
        };
        if let Some(f) = plugin.api().PJRT_Executable_Destroy {
            // SAFETY: `exe` came from GetExecutable and is destroyed once.
            let _ = plugin.check(unsafe { f(&mut destroy) }, "PJRT_Executable_Destroy");
        }
    }
}

impl Drop for Executable {
    fn drop(&mut self) {
        let plugin = self.client.plugin();
        let mut args = sys::PJRT_LoadedExecutable_Destroy_Args {
            struct_size: sys::PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE as usize,
            executable: self.raw,
            ..Default::default()
        };
        if let Some(f) = plugin.api().PJRT_LoadedExecutable_Destroy {
            // SAFETY: owned handle, destroyed exactly once; PJRT keeps running
            // executions' resources alive on its own.
            let _ = plugin.check(unsafe { f(&mut args) }, "PJRT_LoadedExecutable_Destroy");
        }
    }
}

/// A list of buffer pointers: inline up to eight, on the heap beyond.
enum SmallList {
    Inline([*mut sys::PJRT_Buffer; 8], usize),
    Heap(Vec<*mut sys::PJRT_Buffer>),
}

impl SmallList {
    fn new(len: usize) -> SmallList {
        if len <= 8 {
            SmallList::Inline([std::ptr::null_mut(); 8], len)
        } else {
            SmallList::Heap(vec![std::ptr::null_mut(); len])
        }
    }

    fn as_mut(&mut self) -> &mut [*mut sys::PJRT_Buffer] {
        match self {
            SmallList::Inline(a, n) => &mut a[..*n],
            SmallList::Heap(v) => v,
        }
    }
}

/// One `PJRT_Client_Compile` of `mlir` with `options`.
fn compile_raw(
    client: &Arc<Client>,
    mlir: &str,
    options: &CompileOptions,
) -> Result<*mut sys::PJRT_LoadedExecutable> {
    let plugin = client.plugin();
    let program = sys::PJRT_Program {
        struct_size: sys::PJRT_Program_STRUCT_SIZE as usize,
        code: mlir.as_ptr() as *mut c_char,
        code_size: mlir.len(),
        format: MLIR_FORMAT.as_ptr().cast::<c_char>(),
        format_size: MLIR_FORMAT.len(),
        ..Default::default()
    };
    let encoded = options.encode();
    let mut args = sys::PJRT_Client_Compile_Args {
        struct_size: sys::PJRT_Client_Compile_Args_STRUCT_SIZE as usize,
        client: client.raw(),
        program: &program,
        compile_options: encoded.as_ptr().cast::<c_char>(),
        compile_options_size: encoded.len(),
        ..Default::default()
    };
    let f = plugin.func(plugin.api().PJRT_Client_Compile, "PJRT_Client_Compile")?;
    // SAFETY: `program` points at `mlir`, which outlives the call (the
    // plugin does not write through `code` when compiling); the options
    // are a non-empty, valid CompileOptionsProto.
    plugin.check(unsafe { f(&mut args) }, "PJRT_Client_Compile")?;
    Ok(args.executable)
}

/// The compile option an XLA error says the plugin does not know
/// (`No such compile option: 'name'`), if that is the error.
fn unknown_option(error: &Error) -> Option<String> {
    let Error::Xla { message, .. } = error else {
        return None;
    };
    let rest = message.split("No such compile option: '").nth(1)?;
    Some(rest.split('\'').next()?.to_string())
}
