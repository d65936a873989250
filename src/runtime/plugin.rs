//! Loading a PJRT plugin and the one choke point that turns PJRT errors into
//! `xlafn::Error`.
//!
//! A plugin is a shared library exporting `GetPjrtApi`. It is loaded once per
//! path and never unloaded: XLA plugins start threads and register globals
//! that do not survive `dlclose`, so each `Plugin` lives for the process.

use super::sys;
use crate::error::{Error, ErrorCode, Result};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// A loaded plugin: its function table, valid for the life of the process.
pub struct Plugin {
    api: &'static sys::PJRT_Api,
    path: PathBuf,
    /// xlafn's optional compile flags this plugin said it does not know
    /// (its XLA is newer or older than the pinned one's).
    unknown_options: Mutex<Vec<String>>,
}

// SAFETY: `PJRT_Api` is an immutable table of function pointers that the
// plugin documents as callable from any thread; `Plugin` only hands out
// shared references to it.
unsafe impl Send for Plugin {}
// SAFETY: see `Send`; the table is never written after `GetPjrtApi` returns.
unsafe impl Sync for Plugin {}

impl std::fmt::Debug for Plugin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Plugin({}, PJRT C API {}.{})",
            self.path.display(),
            self.version().0,
            self.version().1
        )
    }
}

/// What a loader error about a missing library means for a CUDA plugin:
/// the NVIDIA driver's libraries come from the machine, the CUDA toolkit's
/// from pip wheels that the OpenXLA CUDA plugins need even to load.
fn missing_library_hint(error: &str) -> &'static str {
    let Some(lib) = error
        .split(|c: char| c.is_whitespace() || c == ':')
        .find(|w| w.starts_with("lib") && w.contains(".so"))
    else {
        return "";
    };
    if lib.starts_with("libcuda.so") || lib.starts_with("libnvidia-") {
        " (a library of the NVIDIA driver: this machine has no NVIDIA driver, or the loader \
         does not know where it is)"
    } else if ["libcu", "libnvrtc", "libnvJitLink"]
        .iter()
        .any(|p| lib.starts_with(p))
    {
        " (a CUDA library the plugin links against: `xlafn fetch --cuda NAME` installs a \
         pinned plugin with its CUDA libraries beside it, or load the plugin from where its \
         CUDA libraries are installed)"
    } else {
        ""
    }
}

/// Loads a library a cached plugin opens by name but cannot find on its
/// own library path, globally and for good, so that the plugin's later
/// `dlopen` of that name finds it already loaded.
fn preload(lib: &Path) -> Result<()> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: the library is one of the pinned, RECORD-checked NVIDIA
    // wheels of the plugin's cache entry; loading it runs its
    // initialisers, as the plugin's own `dlopen` of it would, and it is
    // never unloaded.
    let loaded = unsafe { Library::open(Some(lib), RTLD_NOW | RTLD_GLOBAL) }
        .map_err(|e| Error::Plugin(format!("cannot load {}: {e}", lib.display())))?;
    std::mem::forget(loaded);
    Ok(())
}

/// The CPU plugin's path, found at run time (`XLAFN_PJRT_PLUGIN`, beside
/// the executable, the user cache: see [`super::plugin_store`]), fetched
/// into the cache first when none is there.
pub fn default_plugin_path() -> Result<PathBuf> {
    Ok(PluginChoice::cpu()?.path)
}

/// The CUDA plugin's path `XLAFN_DEVICE=cuda` loads, found the same way
/// (`XLAFN_CUDA_PLUGIN`, beside the executable, the user cache's entry of
/// `XLAFN_CUDA_PACKAGE`), fetched with its CUDA libraries into the cache
/// first when none is there (unless `XLAFN_OFFLINE` forbids it).
pub fn default_cuda_plugin_path() -> Result<PathBuf> {
    Ok(super::plugin_store::cuda_plugin()?.path)
}

/// A plugin path and the setting that chose it. Loading errors say only
/// what is wrong with the file, since `Plugin::load` cannot know who named
/// it; the choice adds which setting to change ([`PluginChoice::explain`]),
/// so a bad `XLAFN_CUDA_PLUGIN` is not reported as if `XLAFN_PJRT_PLUGIN`
/// were wrong.
#[derive(Clone, Debug)]
pub(crate) struct PluginChoice {
    /// The plugin file.
    pub(crate) path: PathBuf,
    /// Which setting named `path`, and how to change it.
    pub(crate) fix: String,
}

impl PluginChoice {
    /// The CPU plugin, in the plugin store's order.
    pub(crate) fn cpu() -> Result<PluginChoice> {
        let found = super::plugin_store::cpu_plugin()?;
        Ok(PluginChoice {
            path: found.path,
            fix: found.fix,
        })
    }

    /// `e`, a failure to load or start the chosen plugin, with the setting
    /// to change added to its message.
    pub(crate) fn explain(&self, e: Error) -> Error {
        match e {
            Error::Plugin(m) => Error::Plugin(format!("{m}. {}", self.fix)),
            other => other,
        }
    }
}

impl Plugin {
    /// Loads (once per path) and initialises the plugin at `path`.
    pub fn load(path: &Path) -> Result<&'static Plugin> {
        static LOADED: OnceLock<Mutex<HashMap<PathBuf, &'static Plugin>>> = OnceLock::new();
        let mut loaded = LOADED
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if let Some(p) = loaded.get(path) {
            return Ok(p);
        }
        let plugin: &'static Plugin = Box::leak(Box::new(Self::open(path)?));
        plugin.initialize()?;
        loaded.insert(path.to_path_buf(), plugin);
        Ok(plugin)
    }

    fn open(path: &Path) -> Result<Plugin> {
        if !path.is_file() {
            return Err(Error::Plugin(format!(
                "no PJRT plugin at {}: there is no such file",
                path.display()
            )));
        }
        for companion in super::plugin_store::preloads(path) {
            preload(&companion)?;
        }
        // SAFETY: loading a shared library runs its initialisers; PJRT plugins
        // are built to be dlopen'ed by frontends, and we never unload it.
        let lib = unsafe { libloading::Library::new(path) }.map_err(|e| {
            Error::Plugin(format!(
                "cannot load {} as a PJRT plugin (a shared library): {e}{}",
                path.display(),
                missing_library_hint(&e.to_string())
            ))
        })?;
        type GetApi = unsafe extern "C" fn() -> *const sys::PJRT_Api;
        // SAFETY: `GetPjrtApi` is the documented entry point of every PJRT
        // plugin, with exactly this signature.
        let get: libloading::Symbol<GetApi> = unsafe { lib.get(b"GetPjrtApi\0") }
            .map_err(|e| Error::Plugin(format!("{} is not a PJRT plugin: {e}", path.display())))?;
        // SAFETY: calling the entry point has no preconditions; it returns a
        // pointer to a static table owned by the library.
        let api = unsafe { get() };
        if api.is_null() {
            return Err(Error::Plugin(format!(
                "{}: GetPjrtApi returned null",
                path.display()
            )));
        }
        // The library must outlive the table, which lives for the process.
        std::mem::forget(lib);
        let api = Self::copy_table(path, api)?;
        Ok(Plugin {
            api,
            path: path.to_path_buf(),
            unknown_options: Mutex::default(),
        })
    }

    /// Copies the plugin's function table into a table of this build's
    /// layout, as far as the plugin declares it (`struct_size`): the slots
    /// an older plugin lacks stay empty (`func` then names the missing
    /// function) instead of being read past the end of its table. Refuses a
    /// table too short to hold the version, and another major version.
    fn copy_table(path: &Path, api: *const sys::PJRT_Api) -> Result<&'static sys::PJRT_Api> {
        // SAFETY: every PJRT table starts with its `struct_size`, and `api`
        // is non-null and points into the loaded (never unloaded) library.
        let declared = unsafe { std::ptr::read_unaligned(api.cast::<usize>()) };
        let version_end = std::mem::offset_of!(sys::PJRT_Api, pjrt_api_version)
            + std::mem::size_of::<sys::PJRT_Api_Version>();
        if declared < version_end {
            return Err(Error::Plugin(format!(
                "{}: its PJRT function table is {declared} bytes, too short to hold even its version; \
                 the plugin is too old or not a PJRT plugin (xlafn needs PJRT C API {}.{})",
                path.display(),
                sys::PJRT_API_MAJOR,
                sys::PJRT_API_MINOR
            )));
        }
        let mut table = sys::PJRT_Api::default();
        let len = declared.min(std::mem::size_of::<sys::PJRT_Api>());
        // SAFETY: the plugin declares `declared` readable bytes at `api`; we
        // copy at most that many, and at most the size of `table`, whose
        // fields (integers, raw pointers and optional function pointers)
        // accept any bit pattern the plugin's matching fields hold, and
        // zero for the slots past its table.
        unsafe {
            std::ptr::copy_nonoverlapping(api.cast::<u8>(), (&raw mut table).cast::<u8>(), len);
        }
        let version = &table.pjrt_api_version;
        if version.major_version != sys::PJRT_API_MAJOR as i32 {
            return Err(Error::Plugin(format!(
                "{}: the plugin speaks PJRT C API {}.{}, but xlafn was built for {}.{}: \
                 a different major version cannot be driven",
                path.display(),
                version.major_version,
                version.minor_version,
                sys::PJRT_API_MAJOR,
                sys::PJRT_API_MINOR
            )));
        }
        Ok(Box::leak(Box::new(table)))
    }

    fn initialize(&self) -> Result<()> {
        let mut args = sys::PJRT_Plugin_Initialize_Args {
            struct_size: sys::PJRT_Plugin_Initialize_Args_STRUCT_SIZE as usize,
            ..Default::default()
        };
        let f = self.func(self.api.PJRT_Plugin_Initialize, "PJRT_Plugin_Initialize")?;
        // SAFETY: `args` is a correctly sized, zero-initialised args struct.
        let err = unsafe { f(&mut args) };
        self.check(err, "PJRT_Plugin_Initialize")
    }

    pub(crate) fn api(&self) -> &'static sys::PJRT_Api {
        self.api
    }

    /// The shared library the plugin was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// `options` without the optional flags this plugin refused before.
    pub(crate) fn known_options(&self, options: &super::CompileOptions) -> super::CompileOptions {
        let unknown = self
            .unknown_options
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        unknown
            .iter()
            .filter(|name| options.optional_flags.contains(name))
            .fold(options.clone(), |o, name| o.without_flag(name))
    }

    /// Remembers that this plugin does not know compile option `name`.
    pub(crate) fn forget_option(&self, name: &str) {
        let mut unknown = self
            .unknown_options
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if !unknown.iter().any(|n| n == name) {
            unknown.push(name.to_string());
        }
    }

    /// The plugin's PJRT C API version (major, minor).
    pub fn version(&self) -> (i32, i32) {
        let v = &self.api.pjrt_api_version;
        (v.major_version, v.minor_version)
    }

    /// Returns the function pointer or a clear error if the plugin lacks it
    /// (an older plugin whose table ends before this slot).
    pub(crate) fn func<F>(&self, f: Option<F>, name: &'static str) -> Result<F> {
        f.ok_or_else(|| {
            let (major, minor) = self.version();
            let older = (major, minor) < (sys::PJRT_API_MAJOR as i32, sys::PJRT_API_MINOR as i32);
            let hint = match older {
                true => format!(
                    " (it speaks PJRT C API {major}.{minor}, older than the {}.{} xlafn was \
                     built for: the plugin is too old)",
                    sys::PJRT_API_MAJOR,
                    sys::PJRT_API_MINOR
                ),
                false => String::new(),
            };
            Error::Plugin(format!(
                "the plugin {} does not implement {name}{hint}",
                self.path.display()
            ))
        })
    }

    /// Converts a returned `PJRT_Error*` into a `Result`, destroying it.
    /// Every PJRT call's error goes through here, so this is where errors
    /// are classed: a run-time check of the user's values that failed in
    /// a running program (`check_numerics`) is the user's
    /// `InvalidArgumentError` with the check's message, not an error of
    /// XLA's; everything else keeps the plugin's code and message.
    pub(crate) fn check(&self, err: *mut sys::PJRT_Error, call: &'static str) -> Result<()> {
        if err.is_null() {
            return Ok(());
        }
        let (code, message) = self.read_error(err);
        if let Some(e) = super::ffi::check_failure(&message) {
            return Err(e);
        }
        Err(Error::Xla {
            call,
            code,
            message,
        })
    }

    fn read_error(&self, err: *mut sys::PJRT_Error) -> (ErrorCode, String) {
        let mut msg = sys::PJRT_Error_Message_Args {
            struct_size: sys::PJRT_Error_Message_Args_STRUCT_SIZE as usize,
            error: err,
            ..Default::default()
        };
        let mut code = sys::PJRT_Error_GetCode_Args {
            struct_size: sys::PJRT_Error_GetCode_Args_STRUCT_SIZE as usize,
            error: err,
            ..Default::default()
        };
        let mut message = String::from("(no message)");
        if let Some(f) = self.api.PJRT_Error_Message {
            // SAFETY: `err` is a live error from this plugin; the message it
            // returns lives as long as `err`, and we copy it before destroying.
            unsafe {
                f(&mut msg);
                if !msg.message.is_null() {
                    let bytes =
                        std::slice::from_raw_parts(msg.message.cast::<u8>(), msg.message_size);
                    message = clean_message(&String::from_utf8_lossy(bytes));
                }
            }
        }
        let mut status = ErrorCode::Unknown;
        if let Some(f) = self.api.PJRT_Error_GetCode {
            // SAFETY: as above; GetCode only reads `err`.
            let e = unsafe { f(&mut code) };
            if e.is_null() {
                status = ErrorCode::from_raw(code.code);
            }
        }
        self.destroy_error(err);
        (status, message)
    }

    pub(super) fn destroy_error(&self, err: *mut sys::PJRT_Error) {
        let mut args = sys::PJRT_Error_Destroy_Args {
            struct_size: sys::PJRT_Error_Destroy_Args_STRUCT_SIZE as usize,
            error: err,
            ..Default::default()
        };
        if let Some(f) = self.api.PJRT_Error_Destroy {
            // SAFETY: `err` came from this plugin and is destroyed exactly once.
            unsafe { f(&mut args) };
        }
    }

    pub(crate) fn destroy_event(&self, event: *mut sys::PJRT_Event) {
        let mut args = sys::PJRT_Event_Destroy_Args {
            struct_size: sys::PJRT_Event_Destroy_Args_STRUCT_SIZE as usize,
            event,
            ..Default::default()
        };
        if let Some(f) = self.api.PJRT_Event_Destroy {
            // SAFETY: `event` is live and owned by us; destroyed exactly once.
            let err = unsafe { f(&mut args) };
            let _ = self.check(err, "PJRT_Event_Destroy");
        }
    }
}

/// Drops the misleading trailer the plugin appends to every MLIR parse error
/// ("Failed to parse using StableHLO v1.13.3, this could indicate forward
/// incompatibility ..."): our text is always current StableHLO.
fn clean_message(raw: &str) -> String {
    raw.lines()
        .filter(|l| !l.contains("this could indicate forward incompatibility"))
        .collect::<Vec<_>>()
        .join("\n")
        .trim()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::missing_library_hint;

    #[test]
    fn missing_library_hint_names_driver_or_runtime() {
        let driver = "libcuda.so.1: cannot open shared object file: No such file or directory";
        assert!(missing_library_hint(driver).contains("NVIDIA driver"));
        let ptx = "libnvidia-ptxjitcompiler.so.1: cannot open shared object file";
        assert!(missing_library_hint(ptx).contains("NVIDIA driver"));
        let cupti = "libcupti.so.13: cannot open shared object file: No such file or directory";
        assert!(missing_library_hint(cupti).contains("xlafn fetch --cuda"));
        assert!(
            missing_library_hint("libcudnn_ops.so.9: cannot open").contains("xlafn fetch --cuda")
        );
        assert_eq!(missing_library_hint("/x/p.so: invalid ELF header"), "");
        assert_eq!(missing_library_hint("libfoo.so.1: cannot open"), "");
    }
}
