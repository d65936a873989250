//! The key-value store a multi-process client shares with its peers.
//!
//! A plugin with cross-process collectives (the CUDA plugin, over NCCL)
//! has its processes agree on what they share (NCCL ids, the global device
//! topology) through a key-value store its caller provides at
//! `PJRT_Client_Create`: three C callbacks, a blocking get, a try-get and
//! a put, each with a `user_arg`. Here they are `extern "C"` trampolines
//! into a Rust [`KeyValueStore`] (the `distributed` module's client
//! implements it), and the trait object is owned by the `Client`, so it
//! outlives every call the plugin can make.
//!
//! The contract, from the PJRT C API 0.81 header:
//! - the callbacks may be called from any thread at once, and get blocks;
//! - an error is a `PJRT_Error*` made by the plugin's own `callback_error`
//!   function (passed in each call's args, it copies the message): only
//!   the plugin can make its error type;
//! - a value handed back by get or try-get belongs to the callback: the
//!   plugin copies it and then calls the `value_deleter_callback` the
//!   callback set. Values are allocated with `malloc` and deleted with
//!   `free`, which needs no length;
//! - try-get reports a missing key as `NOT_FOUND`, at once.
//!
//! A panic in the store is caught and reported as an `INTERNAL` error:
//! unwinding into the plugin's C++ frames would be undefined behaviour.

use super::sys;
use crate::error::{Error, ErrorCode, Result};
use std::ffi::{c_char, c_int, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;

/// A key-value store shared by all processes of a multi-process client.
/// Implementations must be thread-safe; `get` blocks.
pub trait KeyValueStore: Send + Sync {
    /// The value of `key`, waiting up to `timeout` for some process to set it.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;
    /// The value of `key` if it is set now.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>>;
    /// Stores `value` under `key` for every process.
    fn put(&self, key: &str, value: &[u8]) -> Result<()>;
}

/// The store a client hands the plugin, boxed so that a thin pointer to
/// it can travel as `user_arg`.
pub(super) struct StoreHandle {
    store: Box<Arc<dyn KeyValueStore>>,
}

// A `Client` holding a store must stay unwind-safe, as it was before it
// could hold one (`Tensor`s cross `catch_unwind` in user code). Nothing in
// this crate calls the store but the trampolines, and they catch every
// panic from it, so no caller can observe a store broken by a panic.
impl std::panic::UnwindSafe for StoreHandle {}
impl std::panic::RefUnwindSafe for StoreHandle {}

impl StoreHandle {
    pub(super) fn new(store: Arc<dyn KeyValueStore>) -> StoreHandle {
        StoreHandle {
            store: Box::new(store),
        }
    }

    /// The store itself.
    pub(super) fn store(&self) -> &Arc<dyn KeyValueStore> {
        &self.store
    }

    /// Points the create args' three callbacks at this store. The handle
    /// must outlive the client created with them.
    pub(super) fn install(&self, args: &mut sys::PJRT_Client_Create_Args) {
        let user_arg = (&*self.store as *const Arc<dyn KeyValueStore>)
            .cast_mut()
            .cast::<c_void>();
        args.kv_get_callback = Some(kv_get);
        args.kv_get_user_arg = user_arg;
        args.kv_try_get_callback = Some(kv_try_get);
        args.kv_try_get_user_arg = user_arg;
        args.kv_put_callback = Some(kv_put);
        args.kv_put_user_arg = user_arg;
    }
}

/// A failure to hand back to the plugin: its status code and message.
type Failure = (ErrorCode, String);

fn failure(e: Error) -> Failure {
    let code = match &e {
        Error::Distributed { code, .. } | Error::Xla { code, .. } => *code,
        Error::InvalidArgument { .. } | Error::Value(_) | Error::Type(_) => {
            ErrorCode::InvalidArgument
        }
        Error::FailedPrecondition(_) => ErrorCode::FailedPrecondition,
        _ => ErrorCode::Unknown,
    };
    (code, e.to_string())
}

/// Runs a callback's body, turning a panic into an `INTERNAL` failure.
fn guarded<T>(
    body: impl FnOnce() -> std::result::Result<T, Failure>,
) -> std::result::Result<T, Failure> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-string payload".into());
        Err((
            ErrorCode::Internal,
            format!("the key-value store panicked: {what}"),
        ))
    })
}

/// The store behind a `user_arg`.
///
/// # Safety
/// `user_arg` must be the pointer `StoreHandle::install` set, and the
/// handle must be alive.
unsafe fn store_from<'a>(user_arg: *mut c_void) -> &'a dyn KeyValueStore {
    // SAFETY: guaranteed by the caller: a live `Arc<dyn KeyValueStore>`.
    unsafe { &**user_arg.cast::<Arc<dyn KeyValueStore>>() }
}

/// The key the plugin passed, as text.
///
/// # Safety
/// `key` must be null with `len == 0`, or valid for `len` bytes.
unsafe fn key_from<'a>(key: *const c_char, len: usize) -> std::result::Result<&'a str, Failure> {
    if key.is_null() || len == 0 {
        return Ok("");
    }
    // SAFETY: guaranteed by the caller.
    let bytes = unsafe { std::slice::from_raw_parts(key.cast::<u8>(), len) };
    std::str::from_utf8(bytes).map_err(|_| {
        (
            ErrorCode::InvalidArgument,
            format!("a key-value store key is not UTF-8: {bytes:02x?}"),
        )
    })
}

/// The plugin's timeout; a negative one (an infinite duration cast to
/// `int`) waits as long as the store allows.
fn timeout_from(ms: c_int) -> Duration {
    u64::try_from(ms).map_or(Duration::MAX, Duration::from_millis)
}

/// A `malloc`ed copy of `value` for the plugin, which frees it through
/// `free_value`.
fn hand_out(value: &[u8]) -> std::result::Result<*mut c_char, Failure> {
    // SAFETY: `malloc` of a nonzero size has no preconditions.
    let ptr = unsafe { libc::malloc(value.len().max(1)) }.cast::<u8>();
    if ptr.is_null() {
        return Err((
            ErrorCode::ResourceExhausted,
            format!(
                "cannot allocate {} bytes for a key-value store value",
                value.len()
            ),
        ));
    }
    // SAFETY: `ptr` is a fresh allocation of at least `value.len()` bytes.
    unsafe { std::ptr::copy_nonoverlapping(value.as_ptr(), ptr, value.len()) };
    Ok(ptr.cast::<c_char>())
}

/// The value deleter the plugin calls after copying a value.
///
/// # Safety
/// `value` must come from `hand_out` and be deleted once.
unsafe extern "C" fn free_value(value: *mut c_char) {
    // SAFETY: guaranteed by the caller: a `malloc`ed pointer, freed once.
    unsafe { libc::free(value.cast::<c_void>()) };
}

/// Makes the plugin's error for `failure`; null if the plugin passed no
/// `callback_error`, since nothing else can make a `PJRT_Error`.
///
/// # Safety
/// `make` must be null or point to the plugin's `PJRT_CallbackError`.
unsafe fn plugin_error(
    make: *mut sys::PJRT_CallbackError,
    failure: Failure,
) -> *mut sys::PJRT_Error {
    let (code, message) = failure;
    // SAFETY: guaranteed by the caller; the plugin copies the message
    // before returning.
    match unsafe { make.as_ref() }.copied().flatten() {
        Some(make) => unsafe { make(code.raw(), message.as_ptr().cast::<c_char>(), message.len()) },
        None => std::ptr::null_mut(),
    }
}

/// `PJRT_KeyValueGetCallback`: a blocking get.
///
/// # Safety
/// `args` must be the plugin's valid args, with `user_arg` from `install`.
unsafe extern "C" fn kv_get(args: *mut sys::PJRT_KeyValueGetCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes valid args for the duration of the call.
    let Some(args) = (unsafe { args.as_mut() }) else {
        return std::ptr::null_mut();
    };
    let outcome = guarded(|| {
        // SAFETY: the args' key and user_arg are valid for this call.
        let (store, key) = unsafe {
            (
                store_from(args.user_arg),
                key_from(args.key, args.key_size)?,
            )
        };
        let value = store
            .get(key, timeout_from(args.timeout_in_ms))
            .map_err(failure)?;
        Ok((hand_out(&value)?, value.len()))
    });
    match outcome {
        Ok((value, size)) => {
            args.value = value;
            args.value_size = size;
            args.value_deleter_callback = Some(free_value);
            std::ptr::null_mut()
        }
        // SAFETY: `callback_error` comes from the plugin.
        Err(f) => unsafe { plugin_error(args.callback_error, f) },
    }
}

/// `PJRT_KeyValueTryGetCallback`: a get that reports a missing key at once.
///
/// # Safety
/// As for `kv_get`.
unsafe extern "C" fn kv_try_get(
    args: *mut sys::PJRT_KeyValueTryGetCallback_Args,
) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes valid args for the duration of the call.
    let Some(args) = (unsafe { args.as_mut() }) else {
        return std::ptr::null_mut();
    };
    let outcome = guarded(|| {
        // SAFETY: the args' key and user_arg are valid for this call.
        let (store, key) = unsafe {
            (
                store_from(args.user_arg),
                key_from(args.key, args.key_size)?,
            )
        };
        match store.try_get(key).map_err(failure)? {
            Some(value) => Ok((hand_out(&value)?, value.len())),
            None => Err((ErrorCode::NotFound, format!("key {key:?} is not set"))),
        }
    });
    match outcome {
        Ok((value, size)) => {
            args.value = value;
            args.value_size = size;
            args.value_deleter_callback = Some(free_value);
            std::ptr::null_mut()
        }
        // SAFETY: `callback_error` comes from the plugin.
        Err(f) => unsafe { plugin_error(args.callback_error, f) },
    }
}

/// `PJRT_KeyValuePutCallback`.
///
/// # Safety
/// As for `kv_get`; `value` must be valid for `value_size` bytes.
unsafe extern "C" fn kv_put(args: *mut sys::PJRT_KeyValuePutCallback_Args) -> *mut sys::PJRT_Error {
    // SAFETY: the plugin passes valid args for the duration of the call.
    let Some(args) = (unsafe { args.as_ref() }) else {
        return std::ptr::null_mut();
    };
    let outcome = guarded(|| {
        // SAFETY: the args' key, value and user_arg are valid for this call.
        let (store, key, value) = unsafe {
            let value = match args.value.is_null() || args.value_size == 0 {
                true => &[][..],
                false => std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size),
            };
            (
                store_from(args.user_arg),
                key_from(args.key, args.key_size)?,
                value,
            )
        };
        store.put(key, value).map_err(failure)
    });
    match outcome {
        Ok(()) => std::ptr::null_mut(),
        // SAFETY: `callback_error` comes from the plugin.
        Err(f) => unsafe { plugin_error(args.callback_error, f) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;
    use std::collections::HashMap;
    use std::sync::Mutex;

    #[derive(Default)]
    struct MapStore(Mutex<HashMap<String, Vec<u8>>>);

    impl KeyValueStore for MapStore {
        fn get(&self, key: &str, _timeout: Duration) -> Result<Vec<u8>> {
            if key == "panic" {
                panic!("boom");
            }
            self.try_get(key)?.ok_or_else(|| {
                Error::distributed(
                    ErrorCode::DeadlineExceeded,
                    format!("key {key:?} timed out"),
                )
            })
        }
        fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            Ok(self.0.lock().unwrap().get(key).cloned())
        }
        fn put(&self, key: &str, value: &[u8]) -> Result<()> {
            self.0.lock().unwrap().insert(key.into(), value.into());
            Ok(())
        }
    }

    thread_local! {
        static LAST_ERROR: RefCell<Option<(u32, String)>> = const { RefCell::new(None) };
    }

    /// Stands in for the plugin's `PJRT_CallbackError`: records the error
    /// and returns a non-null token (never dereferenced).
    unsafe extern "C" fn record_error(
        code: u32,
        message: *const c_char,
        len: usize,
    ) -> *mut sys::PJRT_Error {
        // SAFETY: the trampolines pass a message valid for `len` bytes.
        let bytes = unsafe { std::slice::from_raw_parts(message.cast::<u8>(), len) };
        let message = String::from_utf8_lossy(bytes).into_owned();
        LAST_ERROR.with(|e| *e.borrow_mut() = Some((code, message)));
        std::ptr::NonNull::dangling().as_ptr()
    }

    fn taken_error() -> (ErrorCode, String) {
        let (code, message) = LAST_ERROR
            .with(|e| e.borrow_mut().take())
            .expect("no error was made");
        (ErrorCode::from_raw(code), message)
    }

    struct Installed {
        handle: StoreHandle,
        make_error: sys::PJRT_CallbackError,
    }

    impl Installed {
        fn new() -> Installed {
            Installed {
                handle: StoreHandle::new(Arc::new(MapStore::default())),
                make_error: Some(record_error),
            }
        }

        fn create_args(&self) -> sys::PJRT_Client_Create_Args {
            let mut args = sys::PJRT_Client_Create_Args::default();
            self.handle.install(&mut args);
            args
        }

        fn put(&mut self, key: &[u8], value: &[u8]) -> *mut sys::PJRT_Error {
            let create = self.create_args();
            let mut args = sys::PJRT_KeyValuePutCallback_Args {
                struct_size: sys::PJRT_KeyValuePutCallback_Args_STRUCT_SIZE as usize,
                key: key.as_ptr().cast(),
                key_size: key.len(),
                value: value.as_ptr().cast(),
                value_size: value.len(),
                callback_error: &mut self.make_error,
                user_arg: create.kv_put_user_arg,
                ..Default::default()
            };
            // SAFETY: valid args; the handle lives in `self`.
            unsafe { create.kv_put_callback.unwrap()(&mut args) }
        }

        /// A blocking get through the trampoline: the value, or the error
        /// the trampoline made.
        fn get(&mut self, key: &[u8]) -> std::result::Result<Vec<u8>, (ErrorCode, String)> {
            let create = self.create_args();
            let mut args = sys::PJRT_KeyValueGetCallback_Args {
                struct_size: sys::PJRT_KeyValueGetCallback_Args_STRUCT_SIZE as usize,
                key: key.as_ptr().cast(),
                key_size: key.len(),
                timeout_in_ms: -1,
                callback_error: &mut self.make_error,
                user_arg: create.kv_get_user_arg,
                ..Default::default()
            };
            // SAFETY: valid args; the handle lives in `self`.
            let err = unsafe { create.kv_get_callback.unwrap()(&mut args) };
            if !err.is_null() {
                return Err(taken_error());
            }
            // SAFETY: on success the trampoline set a value of
            // `value_size` bytes, which its deleter frees once.
            unsafe {
                let v =
                    std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size).to_vec();
                args.value_deleter_callback.unwrap()(args.value);
                Ok(v)
            }
        }

        fn try_get(&mut self, key: &[u8]) -> std::result::Result<Vec<u8>, (ErrorCode, String)> {
            let create = self.create_args();
            let mut args = sys::PJRT_KeyValueTryGetCallback_Args {
                struct_size: sys::PJRT_KeyValueTryGetCallback_Args_STRUCT_SIZE as usize,
                key: key.as_ptr().cast(),
                key_size: key.len(),
                callback_error: &mut self.make_error,
                user_arg: create.kv_try_get_user_arg,
                ..Default::default()
            };
            // SAFETY: valid args; the handle lives in `self`.
            let err = unsafe { create.kv_try_get_callback.unwrap()(&mut args) };
            if !err.is_null() {
                return Err(taken_error());
            }
            // SAFETY: as in `get`.
            unsafe {
                let v =
                    std::slice::from_raw_parts(args.value.cast::<u8>(), args.value_size).to_vec();
                args.value_deleter_callback.unwrap()(args.value);
                Ok(v)
            }
        }
    }

    #[test]
    fn install_sets_all_three_callbacks_with_one_user_arg() {
        let installed = Installed::new();
        let args = installed.create_args();
        assert!(args.kv_get_callback.is_some());
        assert!(args.kv_try_get_callback.is_some());
        assert!(args.kv_put_callback.is_some());
        assert!(!args.kv_get_user_arg.is_null());
        assert_eq!(args.kv_get_user_arg, args.kv_put_user_arg);
        assert_eq!(args.kv_get_user_arg, args.kv_try_get_user_arg);
    }

    #[test]
    fn values_put_through_the_callbacks_come_back_from_get_and_try_get() {
        let mut s = Installed::new();
        assert!(s.put(b"nccl/id", &[1, 2, 3]).is_null());
        assert!(s.put(b"empty", &[]).is_null());
        assert_eq!(s.get(b"nccl/id").unwrap(), vec![1, 2, 3]);
        assert_eq!(s.try_get(b"nccl/id").unwrap(), vec![1, 2, 3]);
        assert_eq!(s.get(b"empty").unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn failures_reach_the_plugin_as_its_own_errors_with_a_status_code() {
        let mut s = Installed::new();
        let (code, message) = s.try_get(b"missing").unwrap_err();
        assert_eq!(code, ErrorCode::NotFound);
        assert!(message.contains("\"missing\""), "{message}");
        let (code, message) = s.get(b"missing").unwrap_err();
        assert_eq!(code, ErrorCode::DeadlineExceeded);
        assert!(
            message.starts_with("DeadlineExceededError: key \"missing\""),
            "{message}"
        );
        let (code, message) = s.get(&[0xff, 0xfe]).unwrap_err();
        assert_eq!(code, ErrorCode::InvalidArgument);
        assert!(message.contains("not UTF-8"), "{message}");
    }

    #[test]
    fn a_panicking_store_is_an_internal_error_not_an_unwind_into_c() {
        let mut s = Installed::new();
        let (code, message) = s.get(b"panic").unwrap_err();
        assert_eq!(code, ErrorCode::Internal);
        assert!(message.contains("panicked: boom"), "{message}");
    }

    #[test]
    fn a_negative_plugin_timeout_waits_as_long_as_the_store_allows() {
        assert_eq!(timeout_from(-1), Duration::MAX);
        assert_eq!(timeout_from(250), Duration::from_millis(250));
    }
}
