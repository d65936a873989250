//! PJRT clients and devices.
//!
//! A `Client` owns a `PJRT_Client*`. Buffers and executables hold an
//! `Arc<Client>`, so a client is destroyed only after everything made from it.
//!
//! Thread safety: PJRT clients are documented as thread-safe (JAX calls one
//! client from many threads), so `Client` is `Send + Sync`. A `Device` is a
//! pointer into its client's device list, valid as long as the client.
//!
//! A multi-process client (`Client::distributed`) also owns the key-value
//! store its plugin calls back into (`kv_callbacks`), dropped only after
//! the client is destroyed.

use super::kv_callbacks::{KeyValueStore, StoreHandle};
use super::plugin::{Plugin, PluginChoice};
use super::sys;
use crate::error::{Error, ErrorCode, Result};
use std::ffi::c_char;
use std::path::Path;
use std::sync::{Arc, OnceLock};

/// A value for a client create option.
#[derive(Clone, Debug, PartialEq)]
pub enum OptionValue {
    /// A string option.
    Str(String),
    /// An integer option.
    Int(i64),
    /// A boolean option.
    Bool(bool),
    /// A floating-point option.
    Float(f32),
}

/// Which kind of device the client drives; decides the read-back fast path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Platform {
    /// XLA's CPU plugin.
    Cpu,
    /// A CUDA plugin.
    Cuda,
    /// Any other plugin.
    Other,
}

/// A connection to one PJRT plugin's devices.
pub struct Client {
    plugin: &'static Plugin,
    raw: *mut sys::PJRT_Client,
    /// This process's devices, in the plugin's addressable order.
    devices: Vec<Device>,
    /// Every process's devices, in the plugin's global order (the same
    /// devices as `devices` in a one-process run).
    global_devices: Vec<Device>,
    platform: Platform,
    platform_name: String,
    /// The store of a multi-process client, which the plugin may call
    /// until the client is destroyed (fields drop after `Drop::drop`),
    /// and through which its processes share compiled programs.
    kv_store: Option<StoreHandle>,
}

/// Why multi-process execution is refused on the CPU plugin (the text
/// follows `UnimplementedError: `; the book's multi-process chapter and `xlafn::distributed`
/// quote it).
pub const CPU_MULTI_PROCESS_MESSAGE: &str = "multi-process execution needs a plugin with \
    cross-process collectives (the CUDA plugin); the CPU plugin has only in-process collectives \
    and ignores node_id/num_nodes and the key-value store";

// SAFETY: a PJRT client is thread-safe by the PJRT contract; the raw pointer
// is only passed to PJRT functions, never dereferenced here.
unsafe impl Send for Client {}
// SAFETY: as for `Send`: all methods take `&self` and call thread-safe PJRT.
unsafe impl Sync for Client {}

/// One device of a client: where a buffer lives and a program runs. Two
/// `Device`s are equal when they are the same device of the same client.
/// In a multi-process run a client also knows the other processes'
/// devices: a mesh may span them, but only this process's own
/// (addressable) devices hold its buffers.
///
/// It prints as its platform and id, `cpu:0`, `cuda:1`.
#[derive(Clone, Copy)]
pub struct Device {
    pub(crate) raw: *mut sys::PJRT_Device,
    pub(crate) index: usize,
    pub(crate) id: i64,
    pub(crate) platform: Platform,
    pub(crate) process_index: usize,
    pub(crate) addressable: bool,
}

impl Device {
    /// Position in the client's global device list
    /// ([`Client::global_devices`], `xlafn::devices()`); in a one-process
    /// run, also in its addressable list.
    pub fn index(&self) -> usize {
        self.index
    }

    /// The process that drives this device (JAX's `process_index`): 0 in
    /// a one-process run.
    pub fn process_index(&self) -> usize {
        self.process_index
    }

    /// Does this process drive the device (can it hold this process's
    /// buffers)? False only for another process's device in a
    /// multi-process run.
    pub fn is_addressable(&self) -> bool {
        self.addressable
    }

    /// The plugin's global device id: what device assignments name.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The kind of device.
    pub fn platform(&self) -> Platform {
        self.platform
    }
}

impl PartialEq for Device {
    fn eq(&self, other: &Device) -> bool {
        self.raw == other.raw
    }
}

impl Eq for Device {}

impl std::hash::Hash for Device {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (self.raw as usize).hash(state);
    }
}

impl std::fmt::Display for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let platform = match self.platform {
            Platform::Cpu => "cpu",
            Platform::Cuda => "cuda",
            Platform::Other => "device",
        };
        write!(f, "{platform}:{}", self.id)
    }
}

impl std::fmt::Debug for Device {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Device({self})")
    }
}

// SAFETY: a device handle is an immutable pointer owned by its client, which
// is itself Send + Sync; PJRT device queries are thread-safe.
unsafe impl Send for Device {}
// SAFETY: as for `Send`.
unsafe impl Sync for Device {}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Client({}, {} devices)",
            self.platform_name,
            self.devices.len()
        )
    }
}

impl Client {
    /// A CPU client from the default plugin (`XLAFN_PJRT_PLUGIN`, one
    /// beside the executable, or the pinned wheel in the user cache,
    /// fetched on first use).
    pub fn cpu() -> Result<Arc<Client>> {
        let choice = PluginChoice::cpu()?;
        Self::from_plugin(&choice.path, &[]).map_err(|e| choice.explain(e))
    }

    /// A CUDA client from a CUDA PJRT plugin `.so`. Load it where it was
    /// installed: its RPATH finds the CUDA libraries relative to itself.
    pub fn cuda(plugin_path: &Path) -> Result<Arc<Client>> {
        Self::from_plugin(plugin_path, &Self::cuda_options())
    }

    /// The create options `Client::cuda` passes the CUDA plugin, for
    /// clients made otherwise (`xlafn::distributed::client`).
    pub fn cuda_options() -> Vec<(String, OptionValue)> {
        vec![
            ("platform_name".to_string(), OptionValue::Str("cuda".into())),
            ("allocator".to_string(), OptionValue::Str("default".into())),
            ("preallocate".to_string(), OptionValue::Bool(false)),
        ]
    }

    /// A client from any plugin with explicit create options.
    pub fn from_plugin(path: &Path, options: &[(String, OptionValue)]) -> Result<Arc<Client>> {
        let plugin = Plugin::load(path)?;
        validate_options(path, options)?;
        let raw = create_client(plugin, options, None)?;
        Self::wrap(plugin, raw, None)
    }

    /// A client for process `node_id` of `num_nodes` processes that run one
    /// program together (multi-controller, like `jax.distributed`): the
    /// plugin gets the `node_id` and `num_nodes` create options and the
    /// key-value callbacks into `store`, through which its processes
    /// exchange what their collectives need.
    ///
    /// The CPU plugin is refused before anything is created, with
    /// `UnimplementedError:` and [`CPU_MULTI_PROCESS_MESSAGE`]: it has only
    /// in-process collectives and would silently ignore both.
    ///
    /// The CUDA plugin (`platform_name` "cuda") is also asked for
    /// `abort_collectives_on_failure`, unless the options say otherwise:
    /// when the run's store finds a process dead, the client is told, and
    /// aborts the collectives that wait on it (see the guide's
    /// multi-process chapter).
    pub fn distributed(
        path: &Path,
        options: &[(String, OptionValue)],
        node_id: usize,
        num_nodes: usize,
        store: Arc<dyn KeyValueStore>,
    ) -> Result<Arc<Client>> {
        Self::ensure_multi_process_plugin(path)?;
        if node_id >= num_nodes {
            return Err(Error::invalid(
                "Client::distributed",
                format!("node_id {node_id} is out of range for {num_nodes} processes"),
            ));
        }
        if let Some((name, _)) = options
            .iter()
            .find(|(n, _)| n == "node_id" || n == "num_nodes")
        {
            return Err(Error::Value(format!(
                "pass {name} as an argument of Client::distributed, not as a create option"
            )));
        }
        let as_int = |n: usize| OptionValue::Int(i64::try_from(n).unwrap_or(i64::MAX));
        let mut options = options.to_vec();
        options.push(("node_id".into(), as_int(node_id)));
        options.push(("num_nodes".into(), as_int(num_nodes)));
        if is_cuda(&options) && !options.iter().any(|(n, _)| n == ABORT_COLLECTIVES) {
            options.push((ABORT_COLLECTIVES.into(), OptionValue::Bool(true)));
        }
        let plugin = Plugin::load(path)?;
        validate_options(path, &options)?;
        let handle = StoreHandle::new(store);
        let raw = create_client(plugin, &options, Some(&handle))?;
        let client = Self::wrap(plugin, raw, Some(handle))?;
        if client.platform == Platform::Cpu {
            // A CPU plugin under another file name: it ignored the options.
            return Err(cpu_multi_process_error());
        }
        super::run_health::register(&client);
        Ok(client)
    }

    /// Refuses, before loading anything, a plugin that cannot run across
    /// processes: the CPU plugin (by its file name, as `validate_options`
    /// tells it).
    pub fn ensure_multi_process_plugin(path: &Path) -> Result<()> {
        match is_cpu_plugin(path) {
            true => Err(cpu_multi_process_error()),
            false => Ok(()),
        }
    }

    /// The run's store and this process's index, for a client of a
    /// multi-process run (`Client::distributed`); `None` otherwise.
    pub(super) fn run_store(&self) -> Option<(Arc<dyn KeyValueStore>, usize)> {
        let store = self.kv_store.as_ref()?.store().clone();
        let process = self.devices.first().map_or(0, |d| d.process_index);
        Some((store, process))
    }

    /// Queries what a freshly created client drives. On error, `raw` is
    /// destroyed by the `Client` it went into.
    fn wrap(
        plugin: &'static Plugin,
        raw: *mut sys::PJRT_Client,
        kv_store: Option<StoreHandle>,
    ) -> Result<Arc<Client>> {
        let mut client = Client {
            plugin,
            raw,
            devices: Vec::new(),
            global_devices: Vec::new(),
            platform: Platform::Other,
            platform_name: String::new(),
            kv_store,
        };
        client.platform_name = client.query_platform_name()?;
        client.platform = match client.platform_name.as_str() {
            "cpu" | "host" => Platform::Cpu,
            "cuda" | "gpu" => Platform::Cuda,
            _ => Platform::Other,
        };
        (client.global_devices, client.devices) = client.query_devices()?;
        if client.platform == Platform::Cpu {
            // Host callbacks: register the handler before any compile. A
            // plugin without the FFI extension just has no callbacks, which
            // compiling a program that uses one reports.
            let _ = super::ffi::ensure_handler(plugin);
        }
        if client.devices.is_empty() {
            return Err(Error::Plugin(format!(
                "{} client has no addressable devices",
                client.platform_name
            )));
        }
        Ok(Arc::new(client))
    }

    /// The process-wide default client, created on first use:
    /// - `XLAFN_DEVICE` unset or `cpu`: the CPU plugin, with
    ///   [`cpu_device_count`] devices;
    /// - `XLAFN_DEVICE=cuda`: the CUDA plugin named by `XLAFN_CUDA_PLUGIN`.
    ///   Without one, or when it finds no GPU, this is an error, never a
    ///   silent fall back to the CPU.
    pub fn default_client() -> Result<Arc<Client>> {
        DEFAULT_CLIENT.get_or_init(make_default_client).clone()
    }

    /// Can programs on this client call back into Rust (print,
    /// host_callback)? Only plugins with the FFI extension (the CPU plugin).
    pub fn supports_host_callbacks(&self) -> bool {
        super::ffi::has_handler(self.plugin)
    }

    pub(crate) fn plugin(&self) -> &'static Plugin {
        self.plugin
    }

    pub(crate) fn raw(&self) -> *mut sys::PJRT_Client {
        self.raw
    }

    /// The kind of device the client drives.
    pub fn platform(&self) -> Platform {
        self.platform
    }

    /// The platform's name as the plugin reports it (`cpu`, `cuda`).
    pub fn platform_name(&self) -> &str {
        &self.platform_name
    }

    /// This process's (addressable) devices, in the plugin's order: all
    /// of them in a one-process run.
    pub fn devices(&self) -> &[Device] {
        &self.devices
    }

    /// Every device of the run, this process's and the others', in the
    /// plugin's global order (`PJRT_Client_Devices`).
    pub fn global_devices(&self) -> &[Device] {
        &self.global_devices
    }

    /// The device programs run on unless told otherwise.
    pub fn default_device(&self) -> Device {
        self.devices[0]
    }

    /// The device with global id `id`, if this client addresses it.
    pub fn device_by_id(&self, id: i64) -> Option<Device> {
        self.devices.iter().copied().find(|d| d.id == id)
    }

    /// Is `device` one of this client's devices (of any process)?
    pub(crate) fn knows(&self, device: Device) -> bool {
        self.global_devices.get(device.index) == Some(&device)
    }

    /// The device a raw handle from the plugin names (a buffer's device).
    pub(crate) fn device_of_raw(&self, raw: *mut sys::PJRT_Device) -> Option<Device> {
        self.devices.iter().copied().find(|d| d.raw == raw)
    }

    /// A human-readable name such as `CpuDevice(id=0)`.
    pub fn device_description(&self, device: Device) -> Result<String> {
        let api = self.plugin.api();
        let description = self.description_of(device.raw)?;
        let mut s = sys::PJRT_DeviceDescription_ToString_Args {
            struct_size: sys::PJRT_DeviceDescription_ToString_Args_STRUCT_SIZE as usize,
            device_description: description,
            ..Default::default()
        };
        let f = self.plugin.func(
            api.PJRT_DeviceDescription_ToString,
            "PJRT_DeviceDescription_ToString",
        )?;
        // SAFETY: the description is owned by the device; the string it
        // returns lives as long as the device and is copied at once.
        unsafe {
            self.plugin
                .check(f(&mut s), "PJRT_DeviceDescription_ToString")?;
            Ok(string_from(s.to_string, s.to_string_size))
        }
    }

    fn description_of(
        &self,
        device: *mut sys::PJRT_Device,
    ) -> Result<*mut sys::PJRT_DeviceDescription> {
        let mut d = sys::PJRT_Device_GetDescription_Args {
            struct_size: sys::PJRT_Device_GetDescription_Args_STRUCT_SIZE as usize,
            device,
            ..Default::default()
        };
        let f = self.plugin.func(
            self.plugin.api().PJRT_Device_GetDescription,
            "PJRT_Device_GetDescription",
        )?;
        // SAFETY: `device` belongs to this live client; the description is
        // owned by the device.
        self.plugin
            .check(unsafe { f(&mut d) }, "PJRT_Device_GetDescription")?;
        Ok(d.device_description)
    }

    fn query_device_id(&self, device: *mut sys::PJRT_Device) -> Result<i64> {
        let mut args = sys::PJRT_DeviceDescription_Id_Args {
            struct_size: sys::PJRT_DeviceDescription_Id_Args_STRUCT_SIZE as usize,
            device_description: self.description_of(device)?,
            ..Default::default()
        };
        let f = self.plugin.func(
            self.plugin.api().PJRT_DeviceDescription_Id,
            "PJRT_DeviceDescription_Id",
        )?;
        // SAFETY: a live description of this client's device; a pure query.
        self.plugin
            .check(unsafe { f(&mut args) }, "PJRT_DeviceDescription_Id")?;
        Ok(i64::from(args.id))
    }

    fn query_platform_name(&self) -> Result<String> {
        let mut args = sys::PJRT_Client_PlatformName_Args {
            struct_size: sys::PJRT_Client_PlatformName_Args_STRUCT_SIZE as usize,
            client: self.raw,
            ..Default::default()
        };
        let f = self.plugin.func(
            self.plugin.api().PJRT_Client_PlatformName,
            "PJRT_Client_PlatformName",
        )?;
        // SAFETY: live client; the returned name is owned by the client and
        // copied at once.
        unsafe {
            self.plugin
                .check(f(&mut args), "PJRT_Client_PlatformName")?;
            Ok(string_from(args.platform_name, args.platform_name_size))
        }
    }

    /// The global device list and this process's part of it, with their
    /// ids and owning processes.
    fn query_devices(&self) -> Result<(Vec<Device>, Vec<Device>)> {
        let addressable = self.raw_device_list(true)?;
        // A plugin without a global list drives every device it knows.
        let global = match self.plugin.api().PJRT_Client_Devices {
            Some(_) => self.raw_device_list(false)?,
            None => addressable.clone(),
        };
        let global: Vec<Device> = global
            .iter()
            .enumerate()
            .map(|(index, &raw)| {
                Ok(Device {
                    raw,
                    index,
                    id: self.query_device_id(raw)?,
                    platform: self.platform,
                    process_index: self.query_process_index(raw)?,
                    addressable: addressable.contains(&raw),
                })
            })
            .collect::<Result<_>>()?;
        let local =
            addressable
                .iter()
                .map(|raw| {
                    global.iter().copied().find(|d| d.raw == *raw).ok_or_else(|| {
                    Error::Plugin(format!(
                        "the {} plugin lists an addressable device that its global device list \
                         lacks",
                        self.platform_name
                    ))
                })
                })
                .collect::<Result<_>>()?;
        Ok((global, local))
    }

    /// The process that drives `device`; 0 when the plugin cannot say.
    fn query_process_index(&self, device: *mut sys::PJRT_Device) -> Result<usize> {
        let Some(f) = self.plugin.api().PJRT_DeviceDescription_ProcessIndex else {
            return Ok(0);
        };
        let mut args = sys::PJRT_DeviceDescription_ProcessIndex_Args {
            struct_size: sys::PJRT_DeviceDescription_ProcessIndex_Args_STRUCT_SIZE as usize,
            device_description: self.description_of(device)?,
            ..Default::default()
        };
        // SAFETY: a live description of this client's device; a pure query.
        self.plugin.check(
            unsafe { f(&mut args) },
            "PJRT_DeviceDescription_ProcessIndex",
        )?;
        usize::try_from(args.process_index).map_err(|_| {
            Error::Plugin(format!(
                "the {} plugin says a device belongs to process {}",
                self.platform_name, args.process_index
            ))
        })
    }

    /// The client's addressable devices, or all of its devices.
    fn raw_device_list(&self, addressable: bool) -> Result<Vec<*mut sys::PJRT_Device>> {
        let (list, len) = if addressable {
            let mut args = sys::PJRT_Client_AddressableDevices_Args {
                struct_size: sys::PJRT_Client_AddressableDevices_Args_STRUCT_SIZE as usize,
                client: self.raw,
                ..Default::default()
            };
            let f = self.plugin.func(
                self.plugin.api().PJRT_Client_AddressableDevices,
                "PJRT_Client_AddressableDevices",
            )?;
            // SAFETY: live client; the list it returns is owned by the client.
            self.plugin
                .check(unsafe { f(&mut args) }, "PJRT_Client_AddressableDevices")?;
            (args.addressable_devices, args.num_addressable_devices)
        } else {
            let mut args = sys::PJRT_Client_Devices_Args {
                struct_size: sys::PJRT_Client_Devices_Args_STRUCT_SIZE as usize,
                client: self.raw,
                ..Default::default()
            };
            let f = self
                .plugin
                .func(self.plugin.api().PJRT_Client_Devices, "PJRT_Client_Devices")?;
            // SAFETY: live client; the list it returns is owned by the client.
            self.plugin
                .check(unsafe { f(&mut args) }, "PJRT_Client_Devices")?;
            (args.devices, args.num_devices)
        };
        if len == 0 || list.is_null() {
            return Ok(Vec::new());
        }
        // SAFETY: the plugin returned `len` device handles at `list`, owned
        // by the live client; they are copied at once.
        Ok(unsafe { std::slice::from_raw_parts(list, len) }.to_vec())
    }
}

static DEFAULT_CLIENT: OnceLock<Result<Arc<Client>>> = OnceLock::new();

/// The CPU device count asked for with [`set_cpu_device_count`].
static CPU_DEVICE_COUNT: std::sync::Mutex<Option<usize>> = std::sync::Mutex::new(None);

/// The most CPU devices xlafn asks the plugin for: each is a thread pool
/// slot, and a mistyped count should fail, not start a million threads.
pub const MAX_CPU_DEVICES: usize = 1024;

/// Sets how many devices the default CPU client has (the plugin's own
/// default is 4). Like `jax_num_cpu_devices`, it must be set before the
/// first tensor or function makes the client; later it is an error.
/// `XLAFN_CPU_DEVICES` sets the same from the environment.
pub fn set_cpu_device_count(n: usize) -> Result<()> {
    if n == 0 || n > MAX_CPU_DEVICES {
        return Err(Error::Value(format!(
            "the CPU device count must be between 1 and {MAX_CPU_DEVICES}, got {n}"
        )));
    }
    let mut count = CPU_DEVICE_COUNT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(Ok(client)) = DEFAULT_CLIENT.get() {
        if client.platform() == Platform::Cpu && client.devices().len() == n {
            return Ok(());
        }
        return Err(Error::FailedPrecondition(format!(
            "cannot set the CPU device count to {n}: the default client already exists with {} \
             devices; set it before the first tensor or function, or with XLAFN_CPU_DEVICES",
            client.devices().len()
        )));
    }
    *count = Some(n);
    Ok(())
}

/// The CPU device count the default client is (or will be) made with:
/// [`set_cpu_device_count`], else `XLAFN_CPU_DEVICES`, else the plugin's
/// default (`None`).
pub fn cpu_device_count() -> Result<Option<usize>> {
    if let Some(n) = *CPU_DEVICE_COUNT.lock().unwrap_or_else(|e| e.into_inner()) {
        return Ok(Some(n));
    }
    let Some(raw) = crate::environment::CPU_DEVICES.get() else {
        return Ok(None);
    };
    match raw.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_CPU_DEVICES).contains(&n) => Ok(Some(n)),
        _ => Err(Error::Value(format!(
            "XLAFN_CPU_DEVICES={raw:?} is not a device count between 1 and {MAX_CPU_DEVICES}"
        ))),
    }
}

/// The CUDA plugin `XLAFN_DEVICE=cuda` uses, in the plugin store's order
/// (`XLAFN_CUDA_PLUGIN`, beside the executable, the user cache, fetched
/// there when missing); each failure to use it says which setting to
/// fix, and that `XLAFN_DEVICE=cpu` runs on the CPU instead.
fn cuda_plugin_choice() -> Result<PluginChoice> {
    const CPU: &str = "or set XLAFN_DEVICE=cpu (or unset it) to run on the CPU";
    let found = super::plugin_store::cuda_plugin().map_err(|e| match e {
        Error::Plugin(m) => Error::Plugin(format!(
            "XLAFN_DEVICE=cuda needs a CUDA PJRT plugin (xlafn does not fall back to the CPU): \
             {m}\n- {CPU}"
        )),
        other => other,
    })?;
    Ok(PluginChoice {
        path: found.path,
        fix: format!("{}, {CPU}", found.fix),
    })
}

/// The create option that makes XLA's GPU client abort the collectives
/// of a process reported dead (`PJRT_Client_UpdateGlobalProcessInfo`).
const ABORT_COLLECTIVES: &str = "abort_collectives_on_failure";

/// Do these create options ask for the CUDA platform?
fn is_cuda(options: &[(String, OptionValue)]) -> bool {
    options
        .iter()
        .any(|(n, v)| n == "platform_name" && matches!(v, OptionValue::Str(s) if s == "cuda"))
}

/// The multi-process run this process joined, which the default client
/// is made for: this process's id, the process count and the run's
/// key-value store.
type Run = (usize, usize, Arc<dyn KeyValueStore>);

static RUN: std::sync::Mutex<Option<Run>> = std::sync::Mutex::new(None);

/// Refuses to join a multi-process run once the default client exists:
/// it was made for this process alone, and would go on running every
/// program here without the others (JAX asks for `jax.distributed.
/// initialize` before any computation, too).
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
pub(crate) fn check_can_join_run(num_nodes: usize) -> Result<()> {
    match DEFAULT_CLIENT.get() {
        Some(_) if num_nodes > 1 => Err(Error::FailedPrecondition(
            "distributed::initialize must come before this process first uses a device or a \
             tensor: its one-process client already exists"
                .into(),
        )),
        _ => Ok(()),
    }
}

/// Makes the default client, when it is first needed, a client for
/// process `node_id` of `num_nodes` whose plugin exchanges what its
/// collectives need through `store` (see [`Client::distributed`]).
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
///
/// `incarnations` (one per process, agreed by all) tell the plugins'
/// collectives which processes they were built with.
pub(crate) fn join_run(
    node_id: usize,
    num_nodes: usize,
    store: Arc<dyn KeyValueStore>,
    incarnations: Vec<u64>,
) -> Result<()> {
    check_can_join_run(num_nodes)?;
    *RUN.lock().unwrap_or_else(|e| e.into_inner()) = Some((node_id, num_nodes, store));
    super::run_health::begin_run(incarnations);
    Ok(())
}

/// Forgets the run (a default client made for it stays).
#[cfg_attr(not(feature = "distributed"), allow(dead_code))]
pub(crate) fn leave_run() {
    RUN.lock().unwrap_or_else(|e| e.into_inner()).take();
    super::run_health::end_run();
}

/// `device`, checked to be one of the default client's devices (a device
/// of another client, e.g. one made with `Client::from_plugin`, cannot
/// hold the default client's buffers or run its programs). It may be
/// another process's device: meshes span those.
pub(crate) fn default_client_device(device: Device) -> Result<Device> {
    let client = Client::default_client()?;
    match client.knows(device) {
        true => Ok(device),
        false => Err(Error::Value(format!(
            "device {device} does not belong to the default {} client",
            client.platform_name()
        ))),
    }
}

/// Refuses a buffer on another process's device: its memory is not this
/// process's to write or read.
pub(crate) fn check_addressable(device: Device) -> Result<()> {
    match device.addressable {
        true => Ok(()),
        false => Err(Error::Value(format!(
            "device {device} belongs to process {} of the run: a process holds values only on \
             its own devices (xlafn::local_devices())",
            device.process_index
        ))),
    }
}

fn make_default_client() -> Result<Arc<Client>> {
    let device = crate::environment::DEVICE.get().unwrap_or_default();
    let run = RUN
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone()
        .filter(|(_, num_nodes, _)| *num_nodes > 1);
    match device.trim() {
        "" | "cpu" if run.is_some() => Err(cpu_multi_process_error()),
        "" | "cpu" => {
            let options: Vec<(String, OptionValue)> = cpu_device_count()?
                .map(|n| ("cpu_device_count".to_string(), OptionValue::Int(n as i64)))
                .into_iter()
                .collect();
            let choice = PluginChoice::cpu()?;
            Client::from_plugin(&choice.path, &options).map_err(|e| choice.explain(e))
        }
        "cuda" | "gpu" => {
            let choice = cuda_plugin_choice()?;
            let client = match run {
                Some((node_id, num_nodes, store)) => Client::distributed(
                    &choice.path,
                    &Client::cuda_options(),
                    node_id,
                    num_nodes,
                    store,
                ),
                None => Client::cuda(&choice.path),
            };
            client.map_err(|e| {
                let reason = match e {
                    Error::Plugin(m) => m,
                    other => other.to_string(),
                };
                choice.explain(Error::Plugin(format!(
                    "XLAFN_DEVICE=cuda: the CUDA plugin {} is not usable (xlafn does not fall \
                     back to the CPU): {reason}",
                    choice.path.display()
                )))
            })
        }
        other => Err(Error::Value(format!(
            "XLAFN_DEVICE={other:?} names no device kind: use cpu or cuda"
        ))),
    }
}

impl Drop for Client {
    fn drop(&mut self) {
        let mut args = sys::PJRT_Client_Destroy_Args {
            struct_size: sys::PJRT_Client_Destroy_Args_STRUCT_SIZE as usize,
            client: self.raw,
            ..Default::default()
        };
        if let Some(f) = self.plugin.api().PJRT_Client_Destroy {
            // SAFETY: every buffer and executable holds an `Arc<Client>`, so
            // none outlives this call; the client is destroyed exactly once.
            let err = unsafe { f(&mut args) };
            let _ = self.plugin.check(err, "PJRT_Client_Destroy");
        }
    }
}

fn is_cpu_plugin(path: &Path) -> bool {
    path.file_name()
        .is_some_and(|n| n.to_string_lossy().contains("cpu"))
}

fn cpu_multi_process_error() -> Error {
    Error::distributed(ErrorCode::Unimplemented, CPU_MULTI_PROCESS_MESSAGE)
}

/// Guards the create options that kill the CPU plugin instead of failing:
/// `cpu_device_count` must be an integer (a Bool aborts the process), and
/// unknown names are silently ignored by the CPU plugin, so refuse them.
fn validate_options(path: &Path, options: &[(String, OptionValue)]) -> Result<()> {
    let is_cpu_plugin = is_cpu_plugin(path);
    for (name, value) in options {
        if name == "cpu_device_count" && !matches!(value, OptionValue::Int(n) if *n > 0) {
            return Err(Error::Value(format!(
                "client option cpu_device_count must be a positive integer, got {value:?}"
            )));
        }
        if is_cpu_plugin && name != "cpu_device_count" {
            return Err(Error::Value(format!(
                "the CPU plugin knows only the create option cpu_device_count, not {name:?}"
            )));
        }
    }
    Ok(())
}

/// Creates the plugin's client; with `kv_store`, its key-value callbacks
/// (the handle must then outlive the client).
fn create_client(
    plugin: &Plugin,
    options: &[(String, OptionValue)],
    kv_store: Option<&StoreHandle>,
) -> Result<*mut sys::PJRT_Client> {
    // Keep the strings alive until the call returns.
    let strings: Vec<&str> = options
        .iter()
        .map(|(_, v)| {
            if let OptionValue::Str(s) = v {
                s.as_str()
            } else {
                ""
            }
        })
        .collect();
    let named: Vec<sys::PJRT_NamedValue> = options
        .iter()
        .zip(&strings)
        .map(|((name, value), s)| named_value(name, value, s))
        .collect();
    let mut args = sys::PJRT_Client_Create_Args {
        struct_size: sys::PJRT_Client_Create_Args_STRUCT_SIZE as usize,
        create_options: named.as_ptr(),
        num_options: named.len(),
        ..Default::default()
    };
    if let Some(handle) = kv_store {
        handle.install(&mut args);
    }
    let f = plugin.func(plugin.api().PJRT_Client_Create, "PJRT_Client_Create")?;
    // SAFETY: `args` is correctly sized; `named` and the strings it points to
    // outlive the call; the key-value callbacks, if any, point into a
    // handle the resulting `Client` owns until after it is destroyed.
    plugin.check(unsafe { f(&mut args) }, "PJRT_Client_Create")?;
    Ok(args.client)
}

fn named_value(name: &str, value: &OptionValue, s: &str) -> sys::PJRT_NamedValue {
    let mut nv = sys::PJRT_NamedValue {
        struct_size: sys::PJRT_NamedValue_STRUCT_SIZE as usize,
        name: name.as_ptr().cast::<c_char>(),
        name_size: name.len(),
        value_size: 1,
        ..Default::default()
    };
    match value {
        OptionValue::Str(_) => {
            nv.type_ = sys::PJRT_NamedValue_kString;
            nv.__bindgen_anon_1.string_value = s.as_ptr().cast::<c_char>();
            nv.value_size = s.len();
        }
        OptionValue::Int(i) => {
            nv.type_ = sys::PJRT_NamedValue_kInt64;
            nv.__bindgen_anon_1.int64_value = *i;
        }
        OptionValue::Bool(b) => {
            nv.type_ = sys::PJRT_NamedValue_kBool;
            nv.__bindgen_anon_1.bool_value = *b;
        }
        OptionValue::Float(x) => {
            nv.type_ = sys::PJRT_NamedValue_kFloat;
            nv.__bindgen_anon_1.float_value = *x;
        }
    }
    nv
}

/// Copies a (pointer, length) string owned by the plugin.
///
/// # Safety
/// `ptr` must be null or valid for `len` bytes.
pub(crate) unsafe fn string_from(ptr: *const c_char, len: usize) -> String {
    if ptr.is_null() {
        return String::new();
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) };
    String::from_utf8_lossy(bytes).into_owned()
}
