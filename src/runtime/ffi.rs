//! Host callbacks: Rust closures that XLA programs call on every execution,
//! through the CPU plugin's FFI extension (print on every loop iteration,
//! `py_function`-style host code).
//!
//! One typed-FFI handler (`xlafn_host_callback`) is registered with the
//! plugin; each `custom_call` to it carries a `callback_id` attribute that
//! selects a closure in a process-wide registry (the plugin's per-execution
//! context is not used, because reading it from an executable run without
//! one crashes the plugin).
//!
//! A program can name any id, and programs may come from files
//! (`xlafn::load`), so ids are capabilities: random 64-bit values drawn
//! from the process's keyed hasher (seeded from OS entropy), never small
//! counters, so a crafted program cannot guess another program's
//! callbacks. A registration is owned by the ops that use it
//! ([`CallbackRegistration`]); when the last program holding it is dropped
//! the id is removed and the closure freed. The handler answers XLA's registration-time
//! metadata query (without it compiles fail later with "no handler"),
//! copies argument buffers to host arrays, calls the closure under
//! `catch_unwind` (a panic must not unwind into C), and copies the results
//! into the buffers XLA allocated, checking their types.
//!
//! The XLA FFI structs below are declared from the XLA FFI C API (API
//! version 0.2 in the plugin); the PJRT FFI extension layout is the one the
//! plugin uses (no `api_version` field), as measured in the project notes.

use super::plugin::Plugin;
use super::sys;
use crate::dtype::DType;
use crate::error::{Error, ErrorCode, Result};
use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, RwLock};

/// The custom-call target every host callback uses.
pub const HOST_CALLBACK_TARGET: &str = "xlafn_host_callback";

/// A dense row-major array on the host, as a callback sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct HostArray {
    /// The element type.
    pub dtype: DType,
    /// The dimensions (row-major).
    pub dims: Vec<i64>,
    /// The elements' bytes, little-endian, row-major.
    pub bytes: Vec<u8>,
}

impl HostArray {
    /// An array of `dims` from elements.
    pub fn from_vec<T: super::Element>(data: Vec<T>, dims: &[i64]) -> HostArray {
        HostArray {
            dtype: T::DTYPE,
            dims: dims.to_vec(),
            bytes: super::element::as_bytes(&data).to_vec(),
        }
    }

    /// The elements, if `T` matches the dtype and the bytes are exactly
    /// the elements `dims` calls for (the fields are public, so a
    /// hand-made array may disagree with itself).
    pub fn to_vec<T: super::Element>(&self) -> Result<Vec<T>> {
        if T::DTYPE != self.dtype {
            return Err(Error::Type(format!(
                "cannot read a {} array as {}",
                self.dtype,
                T::DTYPE
            )));
        }
        let elements = self.dims.iter().try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        });
        let expected = elements.and_then(|n| n.checked_mul(std::mem::size_of::<T>()));
        if expected != Some(self.bytes.len()) {
            return Err(Error::Value(format!(
                "a {} host array of shape {:?} needs {} bytes, but holds {}",
                self.dtype,
                self.dims,
                expected.map_or("more than addressable".to_string(), |n| n.to_string()),
                self.bytes.len()
            )));
        }
        Ok(super::element::from_bytes(&self.bytes))
    }
}

/// A host callback: host arrays in, host arrays out (or an error message).
pub type HostCallbackFn =
    dyn Fn(&[HostArray]) -> std::result::Result<Vec<HostArray>, String> + Send + Sync;

/// What a callback is, so that an export can declare it and a loader can
/// bind the loading process's own equivalent (never the exporter's id).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CallbackKind {
    /// `xlafn::print` with its message.
    Print {
        /// The text printed before the values.
        message: String,
    },
    /// A `check_numerics` probe of the op `what` describes.
    CheckNumerics {
        /// The op the probe follows, as error messages name it.
        what: String,
    },
    /// A run-time check failing with `message` when a value is zero.
    NonZero {
        /// The error raised when the value is zero.
        message: String,
    },
    /// A user closure; only a named one can be supplied again at load time.
    Host {
        /// The name given with `named_host_callback`, if any.
        name: Option<String>,
    },
}

struct Entry {
    f: Arc<HostCallbackFn>,
    kind: CallbackKind,
}

static REGISTRY: LazyLock<RwLock<HashMap<i64, Entry>>> = LazyLock::new(Default::default);
static DRAWS: AtomicU64 = AtomicU64::new(0);
static KEYS: LazyLock<std::hash::RandomState> = LazyLock::new(std::hash::RandomState::new);

/// An unpredictable id: a counter hashed with the process's secret
/// SipHash keys (so distinct draws never repeat a counter value).
fn draw_id() -> i64 {
    use std::hash::BuildHasher;
    KEYS.hash_one(DRAWS.fetch_add(1, Ordering::Relaxed)) as i64
}

/// A host callback's place in the registry. Dropping it (with the last
/// program op holding it) unregisters the id and frees the closure.
#[derive(Debug)]
pub struct CallbackRegistration {
    id: i64,
}

impl CallbackRegistration {
    /// The id programs name in their `callback_id` attribute.
    pub fn id(&self) -> i64 {
        self.id
    }
}

impl Drop for CallbackRegistration {
    fn drop(&mut self) {
        let removed = REGISTRY
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
        // The closure may own anything (and run anything in its Drop):
        // drop it after the registry lock is released.
        drop(removed);
    }
}

/// Registers a callback under a fresh unguessable id, for as long as the
/// returned registration lives.
pub fn register_host_callback(
    f: Arc<HostCallbackFn>,
    kind: CallbackKind,
) -> Arc<CallbackRegistration> {
    let mut registry = REGISTRY.write().unwrap_or_else(|e| e.into_inner());
    let mut id = draw_id();
    while id == 0 || registry.contains_key(&id) {
        id = draw_id();
    }
    registry.insert(id, Entry { f, kind });
    Arc::new(CallbackRegistration { id })
}

/// The kind of the callback registered under `id`, if it is registered.
pub fn host_callback_kind(id: i64) -> Option<CallbackKind> {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&id)
        .map(|e| e.kind.clone())
}

/// How many host callbacks are registered (to observe that they are freed).
pub fn live_host_callbacks() -> usize {
    REGISTRY.read().map(|r| r.len()).unwrap_or(0)
}

/// The callback registered under `id`, and whether it is one of xlafn's
/// own run-time checks (see [`CHECK_FAILED`]).
fn lookup(id: i64) -> Option<(Arc<HostCallbackFn>, bool)> {
    REGISTRY
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&id)
        .map(|e| (e.f.clone(), e.kind.is_check()))
}

impl CallbackKind {
    /// Is this a run-time check on the user's values (`check_numerics`, a
    /// `for_range` step that must not be zero), whose failure is the user's
    /// `InvalidArgumentError` rather than a failure of the program?
    fn is_check(&self) -> bool {
        matches!(
            self,
            CallbackKind::CheckNumerics { .. } | CallbackKind::NonZero { .. }
        )
    }
}

/// Brackets the message of a failed run-time check inside the error the
/// callback hands XLA, which reports it wrapped in text of its own and,
/// whatever code the callback gave, as an error of the execution. The
/// runtime finds the brackets ([`check_failure`]) and returns the check's
/// `InvalidArgumentError` with its own message, as an eager check does,
/// instead of `XLA Internal error in PJRT_LoadedExecutable_Execute: ...`.
const CHECK_FAILED: &str = "[[xlafn check failed: ";
/// The end of the bracket [`CHECK_FAILED`] opens.
const CHECK_FAILED_END: &str = " ]]";

/// The `InvalidArgumentError` of a run-time check whose failure the
/// plugin reports in `message` (see [`CHECK_FAILED`]), if it is one. The
/// check's message is `op: what went wrong` (an older export's may start
/// with the class name, which is dropped).
pub(crate) fn check_failure(message: &str) -> Option<Error> {
    let start = message.find(CHECK_FAILED)? + CHECK_FAILED.len();
    let end = start + message[start..].find(CHECK_FAILED_END)?;
    let text = &message[start..end];
    let text = text.strip_prefix("InvalidArgumentError: ").unwrap_or(text);
    let (op, what) = text.split_once(": ").unwrap_or(("host check", text));
    Some(Error::invalid(op, what))
}

thread_local! {
    /// How many host callbacks are running on this thread (nested ones
    /// included): variables then refuse to wait for their locks.
    static INSIDE: std::cell::Cell<u32> = const { std::cell::Cell::new(0) };
}

/// Is a host callback running on this thread?
pub(crate) fn in_host_callback() -> bool {
    INSIDE.with(|c| c.get() > 0)
}

/// Marks this thread as running a host callback until dropped.
struct InsideCallback;

impl InsideCallback {
    fn enter() -> InsideCallback {
        INSIDE.with(|c| c.set(c.get() + 1));
        InsideCallback
    }
}

impl Drop for InsideCallback {
    fn drop(&mut self) {
        INSIDE.with(|c| c.set(c.get() - 1));
    }
}

// ------------------------------------------------------ XLA FFI C API

#[repr(C)]
struct ExtensionBase {
    struct_size: usize,
    type_: u32,
    next: *mut ExtensionBase,
}

const EXTENSION_METADATA: u32 = 1;
const STAGE_EXECUTE: u32 = 3;
const ARG_BUFFER: u32 = 1;
const ATTR_SCALAR: u32 = 3;

#[repr(C)]
struct ApiVersion {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    major_version: i32,
    minor_version: i32,
}

#[repr(C)]
struct FfiBuffer {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    dtype: u32,
    data: *mut c_void,
    rank: i64,
    dims: *mut i64,
}

#[repr(C)]
struct List {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    size: i64,
    types: *mut u32,
    items: *mut *mut c_void,
}

#[repr(C)]
struct Attrs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    size: i64,
    types: *mut u32,
    names: *mut *mut ByteSpan,
    attrs: *mut *mut c_void,
}

#[repr(C)]
struct ByteSpan {
    ptr: *const c_char,
    len: usize,
}

#[repr(C)]
struct Scalar {
    dtype: u32,
    value: *mut c_void,
}

#[repr(C)]
struct CallFrame {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    api: *const FfiApi,
    ctx: *mut c_void,
    stage: u32,
    args: List,
    rets: List,
    attrs: Attrs,
    future: *mut c_void,
}

#[repr(C)]
struct Metadata {
    struct_size: usize,
    api_version: ApiVersion,
    traits: u32,
}

#[repr(C)]
struct MetadataExtension {
    base: ExtensionBase,
    metadata: *mut Metadata,
}

#[repr(C)]
struct ErrorCreateArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    message: *const c_char,
    errc: u32,
}

/// The leading part of `XLA_FFI_Api`: `Error_Create`, `Error_Destroy` and
/// `ExecutionContext_Get` are used.
#[repr(C)]
struct FfiApi {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    api_version: ApiVersion,
    internal_api: *const c_void,
    error_create: Option<unsafe extern "C" fn(*mut ErrorCreateArgs) -> *mut c_void>,
    error_get_message: *const c_void,
    error_destroy: Option<unsafe extern "C" fn(*mut ErrorDestroyArgs)>,
    handler_register: *const c_void,
    stream_get: *const c_void,
    type_id_register: *const c_void,
    execution_context_get: Option<unsafe extern "C" fn(*mut ContextGetArgs) -> *mut c_void>,
}

#[repr(C)]
struct ErrorDestroyArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    error: *mut c_void,
}

#[repr(C)]
struct FfiTypeId {
    type_id: i64,
}

#[repr(C)]
struct ContextGetArgs {
    struct_size: usize,
    extension_start: *mut ExtensionBase,
    ctx: *mut c_void,
    type_id: *mut FfiTypeId,
    data: *mut c_void,
}

// The sizes the plugin checks (project notes: call frame 168, metadata 36).
const _: () = assert!(std::mem::offset_of!(CallFrame, future) == 168);
const METADATA_STRUCT_SIZE: usize = 36;

// ------------------------------------------------ PJRT FFI extension

#[repr(C)]
struct RegisterHandlerArgs {
    struct_size: usize,
    target_name: *const c_char,
    target_name_size: usize,
    handler: *mut c_void,
    platform_name: *const c_char,
    platform_name_size: usize,
    traits: u32,
}
const REGISTER_HANDLER_ARGS_SIZE: usize = 0x34;

#[repr(C)]
struct FfiExtension {
    base: sys::PJRT_Extension_Base,
    type_register: *mut c_void,
    user_data_add: *mut c_void,
    register_handler:
        Option<unsafe extern "C" fn(*mut RegisterHandlerArgs) -> *mut sys::PJRT_Error>,
}

static REGISTERED: LazyLock<Mutex<HashSet<usize>>> = LazyLock::new(Default::default);

/// Has the host-callback handler been registered with `plugin`?
pub(crate) fn has_handler(plugin: &Plugin) -> bool {
    REGISTERED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .contains(&(plugin as *const Plugin as usize))
}

/// Registers the host-callback handler with `plugin` (once per plugin).
/// Fails clearly when the plugin has no FFI extension.
pub(crate) fn ensure_handler(plugin: &'static Plugin) -> Result<()> {
    let mut done = REGISTERED.lock().unwrap_or_else(|e| e.into_inner());
    let key = plugin as *const Plugin as usize;
    if done.contains(&key) {
        return Ok(());
    }
    let ext = find_ffi_extension(plugin).ok_or_else(|| {
        Error::Plugin(format!(
            "host callbacks (print, host_callback) need the PJRT FFI extension, which {} does not offer",
            plugin.path().display()
        ))
    })?;
    // SAFETY: `ext` points at the plugin's static FFI extension struct,
    // whose layout (base, type_register, user_data_add, register_handler)
    // the project notes measured for this plugin.
    let register = unsafe { (*ext).register_handler }
        .ok_or_else(|| Error::Plugin("the FFI extension lacks register_handler".into()))?;
    let mut args = RegisterHandlerArgs {
        struct_size: REGISTER_HANDLER_ARGS_SIZE,
        target_name: HOST_CALLBACK_TARGET.as_ptr().cast(),
        target_name_size: HOST_CALLBACK_TARGET.len(),
        handler: handler as *mut c_void,
        platform_name: "Host".as_ptr().cast(),
        platform_name_size: 4,
        traits: 0,
    };
    // SAFETY: the strings are 'static; the handler is an `extern "C"` fn
    // with the XLA FFI handler signature that never unwinds.
    let err = unsafe { register(&mut args) };
    plugin.check(err, "PJRT_FFI_Register_Handler")?;
    done.insert(key);
    Ok(())
}

/// The plugin's FFI entry points for per-execution data
/// (`type_register`, `user_data_add`), for `call_scope`.
pub(crate) fn user_data_entry_points(plugin: &Plugin) -> Option<(*mut c_void, *mut c_void)> {
    let ext = find_ffi_extension(plugin)?;
    // SAFETY: as in `ensure_handler`: the plugin's static FFI extension.
    Some(unsafe { ((*ext).type_register, (*ext).user_data_add) })
}

fn find_ffi_extension(plugin: &Plugin) -> Option<*const FfiExtension> {
    let mut ext = plugin.api().extension_start;
    while !ext.is_null() {
        // SAFETY: the extension chain is a static linked list owned by the
        // plugin; each node starts with `PJRT_Extension_Base`.
        let base = unsafe { &*ext };
        if base.type_ == sys::PJRT_Extension_Type_FFI {
            return Some(ext.cast());
        }
        ext = base.next;
    }
    None
}

fn dtype_of_ffi(code: u32) -> Option<DType> {
    Some(match code {
        1 => DType::Bool,
        2 => DType::I8,
        3 => DType::I16,
        4 => DType::I32,
        5 => DType::I64,
        6 => DType::U8,
        7 => DType::U16,
        8 => DType::U32,
        9 => DType::U64,
        10 => DType::F16,
        11 => DType::F32,
        12 => DType::F64,
        15 => DType::C64,
        16 => DType::BF16,
        18 => DType::C128,
        _ => return None,
    })
}

/// The handler XLA calls. Never unwinds: every failure becomes an FFI error.
unsafe extern "C" fn handler(frame: *mut CallFrame) -> *mut c_void {
    // SAFETY: XLA passes a valid call frame for the duration of the call.
    let frame = unsafe { &mut *frame };
    if answer_metadata_query(frame) {
        return std::ptr::null_mut();
    }
    if frame.stage != STAGE_EXECUTE {
        return std::ptr::null_mut();
    }
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let _span = super::profile::span("host callback");
        run_callback(frame)
    }));
    let message = match outcome {
        Ok(Ok(())) => return std::ptr::null_mut(),
        Ok(Err(Failure::Check(m))) => {
            return make_error(
                frame,
                &format!("{CHECK_FAILED}{m}{CHECK_FAILED_END}"),
                ErrorCode::InvalidArgument,
            );
        }
        Ok(Err(Failure::Other(m))) => m,
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()));
            format!("host callback panicked: {}", what.unwrap_or_default())
        }
    };
    make_error(frame, &message, ErrorCode::Internal)
}

/// Why a callback failed: a run-time check on the user's values (its
/// message), or anything else (a callback's own error, a malformed call).
enum Failure {
    Check(String),
    Other(String),
}

impl From<String> for Failure {
    fn from(m: String) -> Failure {
        Failure::Other(m)
    }
}

impl From<&str> for Failure {
    fn from(m: &str) -> Failure {
        Failure::Other(m.to_string())
    }
}

/// Answers XLA's registration-time query: the FFI API version we speak
/// (0.1) and no special traits.
fn answer_metadata_query(frame: &mut CallFrame) -> bool {
    let ext = frame.extension_start;
    // SAFETY: a non-null extension chain node starts with ExtensionBase; a
    // metadata node is a MetadataExtension whose `metadata` XLA owns.
    unsafe {
        if ext.is_null() || (*ext).type_ != EXTENSION_METADATA {
            return false;
        }
        let metadata = &mut *(*(ext as *mut MetadataExtension)).metadata;
        debug_assert!(metadata.struct_size >= METADATA_STRUCT_SIZE);
        metadata.api_version = ApiVersion {
            struct_size: std::mem::size_of::<ApiVersion>(),
            extension_start: std::ptr::null_mut(),
            major_version: 0,
            minor_version: 1,
        };
        metadata.traits = 0;
    }
    true
}

fn run_callback(frame: &mut CallFrame) -> std::result::Result<(), Failure> {
    let id = callback_id(&frame.attrs).ok_or("custom call without a callback_id attribute")?;
    let (callback, is_check) = lookup(id).ok_or_else(|| {
        format!(
            "no host callback with id {id} is registered in this process (a program may only \
             call the callbacks registered for it, and they end with it)"
        )
    })?;
    let args = read_args(&frame.args)?;
    let scope = execution_call_scope(frame);
    let results = {
        let _inside = InsideCallback::enter();
        super::call_scope::with_call_scope(scope, || callback(&args)).map_err(
            |m| match is_check {
                true => Failure::Check(m),
                false => Failure::Other(m),
            },
        )?
    };
    Ok(write_results(&frame.rets, &results)?)
}

/// The call scope of the execution running this callback, from its
/// execution context. Every program with host callbacks is run with one
/// (reading the context of a program run without one crashes the plugin,
/// see `call_scope`), so this is asked only once such a context exists.
fn execution_call_scope(frame: &CallFrame) -> Option<super::call_scope::CallScope> {
    let type_id = super::call_scope::handler_type_id();
    if type_id == 0 || frame.api.is_null() {
        return None;
    }
    // SAFETY: `api` is XLA's FFI API table, valid during the call; fields
    // are read only when the table's struct_size covers them.
    let api = unsafe { &*frame.api };
    if api.struct_size < std::mem::offset_of!(FfiApi, execution_context_get) + 8 {
        return None;
    }
    let get = api.execution_context_get?;
    let mut id = FfiTypeId { type_id };
    let mut args = ContextGetArgs {
        struct_size: std::mem::size_of::<ContextGetArgs>(),
        extension_start: std::ptr::null_mut(),
        ctx: frame.ctx,
        type_id: &mut id,
        data: std::ptr::null_mut(),
    };
    // SAFETY: `ctx` is this call's execution context, which the runtime
    // created with a call-scope entry (see `call_scope::ExecutionScope`).
    let err = unsafe { get(&mut args) };
    if !err.is_null() {
        if let Some(destroy) = api.error_destroy {
            let mut d = ErrorDestroyArgs {
                struct_size: std::mem::size_of::<ErrorDestroyArgs>(),
                extension_start: std::ptr::null_mut(),
                error: err,
            };
            // SAFETY: `err` is a live FFI error we own; destroyed once.
            unsafe { destroy(&mut d) };
        }
        return None;
    }
    // SAFETY: the data is the `Option<CallScope>` the runtime stored for
    // this execution, alive until the execution finishes.
    unsafe { super::call_scope::scope_from_user_data(args.data) }
}

fn callback_id(attrs: &Attrs) -> Option<i64> {
    for i in 0..attrs.size as usize {
        // SAFETY: XLA provides `size` entries in each attribute array.
        unsafe {
            let name = &**attrs.names.add(i);
            let name = std::slice::from_raw_parts(name.ptr.cast::<u8>(), name.len);
            if name == b"callback_id" && *attrs.types.add(i) == ATTR_SCALAR {
                let scalar = &*(*attrs.attrs.add(i)).cast::<Scalar>();
                if scalar.dtype == 5 {
                    return Some(*scalar.value.cast::<i64>());
                }
            }
        }
    }
    None
}

fn buffer_view(b: &FfiBuffer) -> std::result::Result<(DType, Vec<i64>, usize), String> {
    let dtype =
        dtype_of_ffi(b.dtype).ok_or_else(|| format!("unsupported FFI dtype {}", b.dtype))?;
    // SAFETY: XLA provides `rank` dims for each buffer.
    let dims = unsafe { std::slice::from_raw_parts(b.dims, b.rank as usize) }.to_vec();
    let size =
        dims.iter().product::<i64>() as usize * dtype.size_in_bytes().map_err(|e| e.to_string())?;
    Ok((dtype, dims, size))
}

fn read_args(args: &List) -> std::result::Result<Vec<HostArray>, String> {
    (0..args.size as usize)
        .map(|i| {
            // SAFETY: XLA provides `size` typed arguments; buffer arguments
            // point at FfiBuffer structs whose data holds `size` bytes.
            unsafe {
                if *args.types.add(i) != ARG_BUFFER {
                    return Err(format!("argument {i} is not a buffer"));
                }
                let b = &*(*args.items.add(i)).cast::<FfiBuffer>();
                let (dtype, dims, size) = buffer_view(b)?;
                let bytes = if size == 0 {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(b.data.cast::<u8>(), size).to_vec()
                };
                Ok(HostArray { dtype, dims, bytes })
            }
        })
        .collect()
}

fn write_results(rets: &List, results: &[HostArray]) -> std::result::Result<(), String> {
    if results.len() != rets.size as usize {
        return Err(format!(
            "the callback returned {} arrays, {} declared",
            results.len(),
            rets.size
        ));
    }
    for (i, r) in results.iter().enumerate() {
        // SAFETY: XLA preallocated `size` result buffers of the declared
        // types; we write exactly their byte size after checking the type.
        unsafe {
            let b = &*(*rets.items.add(i)).cast::<FfiBuffer>();
            let (dtype, dims, size) = buffer_view(b)?;
            if dtype != r.dtype || dims != r.dims || r.bytes.len() != size {
                return Err(format!(
                    "result {i}: the callback returned {}{:?}, the program declared {dtype}{dims:?}",
                    r.dtype, r.dims
                ));
            }
            if size > 0 {
                std::ptr::copy_nonoverlapping(r.bytes.as_ptr(), b.data.cast::<u8>(), size);
            }
        }
    }
    Ok(())
}

fn make_error(frame: &CallFrame, message: &str, code: ErrorCode) -> *mut c_void {
    let text = std::ffi::CString::new(message.replace('\0', " ")).unwrap_or_default();
    let mut args = ErrorCreateArgs {
        struct_size: std::mem::size_of::<ErrorCreateArgs>(),
        extension_start: std::ptr::null_mut(),
        message: text.as_ptr(),
        errc: code.raw(),
    };
    // SAFETY: `api` is XLA's FFI API table, valid during the call; the
    // message is copied by XLA before we return.
    unsafe {
        match (*frame.api).error_create {
            Some(create) => create(&mut args),
            None => std::ptr::null_mut(),
        }
    }
}
