//! Call scopes: per-call state that host callbacks see, whichever thread
//! XLA runs them on (how `print` output follows the caller that started
//! the program).
//!
//! A caller installs a scope for its thread with [`with_call_scope`].
//! Eagerly, and for programs XLA runs inline, callbacks run on that
//! thread and see it directly. For every execution of a program that
//! calls back into Rust, the runtime also hands the scope to XLA in a
//! per-execution context (`PJRT_ExecuteContext` with one user-data entry);
//! the callback handler reads it from its call frame and installs it on
//! the thread that runs the callback, an XLA worker thread included.
//!
//! The plugin crashes when a handler reads the execution context of a
//! program run without one (project notes), so every execution of a
//! program with host callbacks gets a context, scope or not, and waits for
//! the program to finish before the context is destroyed.
//!
//! Layer: runtime. Imports `plugin`, `sys` and `error`.

use super::plugin::Plugin;
use super::sys;
use crate::error::{Error, Result};
use std::any::Any;
use std::cell::RefCell;
use std::ffi::{c_char, c_void};
use std::sync::{Arc, Mutex};

/// What a caller hands the callbacks of the programs it runs.
pub type CallScope = Arc<dyn Any + Send + Sync>;

thread_local! {
    static CURRENT: RefCell<Option<CallScope>> = const { RefCell::new(None) };
}

/// Runs `f` with `scope` as this thread's call scope (restoring the one
/// before afterwards, also on panics). `None` leaves the current one.
pub fn with_call_scope<R>(scope: Option<CallScope>, f: impl FnOnce() -> R) -> R {
    let Some(scope) = scope else {
        return f();
    };
    struct Restore(Option<CallScope>);
    impl Drop for Restore {
        fn drop(&mut self) {
            CURRENT.with(|c| *c.borrow_mut() = self.0.take());
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(scope)));
    f()
}

/// This thread's call scope: inside a host callback, the scope of the
/// call that started the program.
pub fn current_call_scope() -> Option<CallScope> {
    CURRENT.with(|c| c.borrow().clone())
}

// ------------------------------------------------ PJRT FFI user data

/// `PJRT_FFI_Type_Info`: only `deleter` is read; ours does nothing, as
/// the runtime owns the data it hands over.
#[repr(C)]
struct TypeInfo {
    deleter: Option<unsafe extern "C" fn(*mut c_void)>,
    serialize: *mut c_void,
    deserialize: *mut c_void,
}

#[repr(C)]
struct TypeRegisterArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    type_name: *const c_char,
    type_name_size: usize,
    type_id: i64,
    type_info: *const TypeInfo,
}
const TYPE_REGISTER_ARGS_SIZE: usize = 0x30;
const _: () = assert!(std::mem::size_of::<TypeRegisterArgs>() == TYPE_REGISTER_ARGS_SIZE);

#[repr(C)]
struct UserDataAddArgs {
    struct_size: usize,
    extension_start: *mut sys::PJRT_Extension_Base,
    context: *mut sys::PJRT_ExecuteContext,
    type_id: i64,
    data: *mut c_void,
}
const USER_DATA_ADD_ARGS_SIZE: usize = 0x28;
const _: () = assert!(std::mem::size_of::<UserDataAddArgs>() == USER_DATA_ADD_ARGS_SIZE);

type TypeRegisterFn = unsafe extern "C" fn(*mut TypeRegisterArgs) -> *mut sys::PJRT_Error;
type UserDataAddFn = unsafe extern "C" fn(*mut UserDataAddArgs) -> *mut sys::PJRT_Error;

unsafe extern "C" fn keep_data(_: *mut c_void) {}

const TYPE_NAME: &str = "xlafn_call_scope";

/// The type id of the call-scope user data, registered once per plugin.
static TYPE_IDS: Mutex<Vec<(usize, i64)>> = Mutex::new(Vec::new());

fn type_id(plugin: &Plugin, register: TypeRegisterFn) -> Result<i64> {
    let key = plugin as *const Plugin as usize;
    let mut ids = TYPE_IDS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, id)) = ids.iter().find(|(k, _)| *k == key) {
        return Ok(*id);
    }
    static INFO: TypeInfo = TypeInfo {
        deleter: Some(keep_data),
        serialize: std::ptr::null_mut(),
        deserialize: std::ptr::null_mut(),
    };
    let mut args = TypeRegisterArgs {
        struct_size: TYPE_REGISTER_ARGS_SIZE,
        extension_start: std::ptr::null_mut(),
        type_name: TYPE_NAME.as_ptr().cast(),
        type_name_size: TYPE_NAME.len(),
        type_id: 0,
        type_info: &INFO,
    };
    // SAFETY: `register` is the plugin's PJRT_FFI_Type_Register; the name
    // and type info are 'static; `type_id` 0 asks the plugin to assign one.
    plugin.check(unsafe { register(&mut args) }, "PJRT_FFI_Type_Register")?;
    ids.push((key, args.type_id));
    Ok(args.type_id)
}

// SAFETY: the statics' raw pointers are null.
unsafe impl Sync for TypeInfo {}

/// An execution context carrying a call scope, for one execution of a
/// program with host callbacks. Destroyed on drop; the execution must be
/// finished by then.
pub(crate) struct ExecutionScope {
    plugin: &'static Plugin,
    context: *mut sys::PJRT_ExecuteContext,
    /// What the context's user data points at: boxed so its address is
    /// stable for as long as the context lives.
    _scope: Box<Option<CallScope>>,
}

/// The call-scope type id the handler asks the execution context for.
static HANDLER_TYPE_ID: std::sync::atomic::AtomicI64 = std::sync::atomic::AtomicI64::new(0);

impl ExecutionScope {
    /// A context holding this thread's current call scope (possibly none).
    pub(crate) fn new(
        plugin: &'static Plugin,
        type_register: *mut c_void,
        user_data_add: *mut c_void,
    ) -> Result<ExecutionScope> {
        if type_register.is_null() || user_data_add.is_null() {
            return Err(Error::Plugin(
                "the FFI extension cannot attach per-execution data".into(),
            ));
        }
        // SAFETY: both are the plugin's FFI extension entry points, whose
        // signatures the project notes measured for this plugin.
        let (register, add): (TypeRegisterFn, UserDataAddFn) = unsafe {
            (
                std::mem::transmute::<*mut c_void, TypeRegisterFn>(type_register),
                std::mem::transmute::<*mut c_void, UserDataAddFn>(user_data_add),
            )
        };
        let type_id = type_id(plugin, register)?;
        HANDLER_TYPE_ID.store(type_id, std::sync::atomic::Ordering::Relaxed);
        let create = plugin.func(
            plugin.api().PJRT_ExecuteContext_Create,
            "PJRT_ExecuteContext_Create",
        )?;
        let mut create_args = sys::PJRT_ExecuteContext_Create_Args {
            struct_size: sys::PJRT_ExecuteContext_Create_Args_STRUCT_SIZE as usize,
            ..Default::default()
        };
        // SAFETY: plain out-parameter call.
        plugin.check(
            unsafe { create(&mut create_args) },
            "PJRT_ExecuteContext_Create",
        )?;
        let mut scope = ExecutionScope {
            plugin,
            context: create_args.context,
            _scope: Box::new(current_call_scope()),
        };
        let mut add_args = UserDataAddArgs {
            struct_size: USER_DATA_ADD_ARGS_SIZE,
            extension_start: std::ptr::null_mut(),
            context: scope.context,
            type_id,
            data: (&mut *scope._scope as *mut Option<CallScope>).cast(),
        };
        // SAFETY: `context` is live; the data pointer stays valid until the
        // context is destroyed (it is owned by `scope`, dropped after it).
        plugin.check(unsafe { add(&mut add_args) }, "PJRT_FFI_UserData_Add")?;
        Ok(scope)
    }

    pub(crate) fn context(&self) -> *mut sys::PJRT_ExecuteContext {
        self.context
    }
}

impl Drop for ExecutionScope {
    fn drop(&mut self) {
        let Some(destroy) = self.plugin.api().PJRT_ExecuteContext_Destroy else {
            return;
        };
        let mut args = sys::PJRT_ExecuteContext_Destroy_Args {
            struct_size: sys::PJRT_ExecuteContext_Destroy_Args_STRUCT_SIZE as usize,
            context: self.context,
            ..Default::default()
        };
        // SAFETY: the context is live, ours, and its execution has finished.
        let err = unsafe { destroy(&mut args) };
        let _ = self.plugin.check(err, "PJRT_ExecuteContext_Destroy");
    }
}

/// The type id the handler looks the call scope up under.
pub(crate) fn handler_type_id() -> i64 {
    HANDLER_TYPE_ID.load(std::sync::atomic::Ordering::Relaxed)
}

/// Reads the call scope from the user data the handler found.
///
/// # Safety
/// `data` must be null or the pointer an `ExecutionScope` stored, whose
/// execution (and so the scope) is still running.
pub(crate) unsafe fn scope_from_user_data(data: *mut c_void) -> Option<CallScope> {
    if data.is_null() {
        return None;
    }
    // SAFETY: per the contract, `data` points at a live Option<CallScope>.
    unsafe { (*data.cast::<Option<CallScope>>()).clone() }
}
