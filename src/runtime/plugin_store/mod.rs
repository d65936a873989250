//! Layer: runtime (plugin store). Finds the PJRT plugin a client loads at
//! run time, and fetches, verifies and caches the pinned wheel it comes
//! from, so that building xlafn never needs the plugin, Python or a
//! network. Imports `error`, the crate's safe file layer (`files`) and,
//! within runtime, nothing: `plugin` asks this module for a path.
//!
//! The CPU plugin is looked for in this order (the first that exists
//! wins):
//! 1. `XLAFN_PJRT_PLUGIN`, a PJRT plugin `.so` named by the user (not
//!    verified: the user's choice);
//! 2. `xla_cpu_pjrt.so` beside the running executable (for a program
//!    shipped as a folder; not verified either);
//! 3. the user cache (`$XDG_CACHE_HOME/xlafn`, else `~/.cache/xlafn`):
//!    the pinned wheel unpacked into `xla-cpu-pjrt-0.0.1/`. A broken entry
//!    is repaired from the wheel kept beside it (`wheels/`) or fetched
//!    again; a missing one is fetched with pip, unless `XLAFN_OFFLINE`
//!    forbids it.
//!
//! A CUDA plugin is looked for the same way: `XLAFN_CUDA_PLUGIN`, the
//! plugin's file beside the executable (`xla_cuda_plugin.so` for JAX's),
//! then the user cache's entry of the package `XLAFN_CUDA_PACKAGE` names
//! ([`CudaPackage`], JAX's CUDA 13 plugin by default). Its entry holds the
//! plugin's wheel and the NVIDIA wheels of its CUDA libraries unpacked
//! together, as pip would lay them out in one `site-packages`, so that the
//! plugin's own library path (`$ORIGIN/../../nvidia/...`) finds them and
//! no `LD_LIBRARY_PATH` is needed.
//!
//! Every install goes the same way, whether the wheels came from pip, from
//! files the user names or from the cache's own copies: each wheel's sha256
//! must be the one pinned for this platform (`third_party/`, compiled in),
//! every file it unpacks must match its line in the wheel's `RECORD`
//! (sha256 and size), nothing else may be in it, and two wheels may share
//! a path only with the same contents; the files go into a
//! new temporary folder that is renamed into place whole, under a lock
//! file, so concurrent processes install once and a killed one leaves
//! nothing that is mistaken for an entry (its leftovers are removed by
//! the next install). A stamp written last records each file's size and
//! modification time; a later process checks those (a `stat` per file,
//! not a hash of 250 MB) before it loads the plugin, so a truncated or
//! replaced file is repaired instead of crashing the process.
//!
//! pip is the fetcher because it already knows the user's package index,
//! proxy and certificates (its configuration and `PIP_*` variables); this
//! crate names no index.

mod cache;
mod fetch;
mod packages;
mod wheel;

pub(crate) use cache::identity;
pub use packages::CudaPackage;
pub(crate) use packages::{CPU, Package, Pin};

use crate::error::Result;
use std::path::{Path, PathBuf};

/// Where a plugin came from, and what to change when it fails.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    pub(crate) path: PathBuf,
    pub(crate) fix: String,
}

/// The CPU plugin to load, found in the documented order (module docs),
/// fetching it into the user cache when nothing else provides it.
pub(crate) fn cpu_plugin() -> Result<Located> {
    locate(&CPU, crate::environment::PJRT_PLUGIN.get_os())
}

/// The CUDA plugin `XLAFN_DEVICE=cuda` loads, in the same order as the
/// CPU one: `XLAFN_CUDA_PLUGIN`, the plugin beside the executable, then
/// the user cache's entry of `XLAFN_CUDA_PACKAGE` (JAX's CUDA 13 plugin
/// unless it names another), fetched with its CUDA libraries when absent.
pub(crate) fn cuda_plugin() -> Result<Located> {
    let package = CudaPackage::from_env()?.package();
    locate(package, crate::environment::CUDA_PLUGIN.get_os())
}

fn locate(package: &Package, named: Option<std::ffi::OsString>) -> Result<Located> {
    if let Some(p) = named.filter(|p| !p.is_empty()) {
        return Ok(Located {
            path: PathBuf::from(p),
            fix: format!(
                "{} names this file: set it to a PJRT plugin .so, or unset it to use the \
                 pinned {}",
                package.env_var,
                package.requirement()
            ),
        });
    }
    if let Some(beside) = beside_executable(package) {
        return Ok(Located {
            path: beside,
            fix: format!(
                "this is the {} beside the program: replace it with the one from the pinned \
                 wheel, or remove it to use the user cache",
                package.beside_executable
            ),
        });
    }
    let path = cache::Store::user()?.ensure(package, offline())?;
    Ok(Located {
        path,
        fix: format!(
            "this is the cached pinned plugin: run `{} --verify` to check and repair it, or \
             set {} to a PJRT plugin .so",
            package.fetch_command, package.env_var
        ),
    })
}

/// The libraries to load before the plugin at `plugin`, when it is a
/// cache entry's plugin whose package names some (`Package::preload`).
pub(crate) fn preloads(plugin: &Path) -> Vec<PathBuf> {
    let Ok(root) = cache::user_cache_root() else {
        return Vec::new();
    };
    CudaPackage::ALL
        .iter()
        .map(|p| p.package())
        .filter(|p| root.join(p.entry_name()).join(p.plugin_in_wheel) == plugin)
        .flat_map(|p| {
            p.preload
                .iter()
                .map(|lib| root.join(p.entry_name()).join(lib))
        })
        .filter(|lib| lib.is_file())
        .collect()
}

fn beside_executable(package: &Package) -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let beside = exe.parent()?.join(package.beside_executable);
    beside.is_file().then_some(beside)
}

/// Whether `XLAFN_OFFLINE` forbids fetching (any value but empty, `0`,
/// `false` or `no`).
fn offline() -> bool {
    crate::environment::OFFLINE.get().is_some_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "" | "0" | "false" | "no"
        )
    })
}

/// Makes sure the pinned CPU plugin is in the user cache, fetching it with
/// pip (or repairing a damaged entry) when needed, and returns its path:
/// what `xlafn fetch` does, for CI, containers and machines that run
/// offline later. `XLAFN_PJRT_PLUGIN` and a plugin beside the executable
/// are ignored: this is about the cache. `XLAFN_OFFLINE` still forbids the
/// network (a kept wheel still repairs the entry).
pub fn fetch_cpu_plugin() -> Result<PathBuf> {
    cache::Store::user()?.ensure(&CPU, offline())
}

/// Installs the pinned CPU plugin into the user cache from a wheel file
/// the user has, or from a folder holding it (as pip's `--find-links`
/// takes one): no Python, no network. The wheel must be the pinned one
/// for this platform (its sha256 is checked, then every file against its
/// `RECORD`); an entry already there is replaced only if it is broken.
pub fn install_cpu_plugin(wheel_or_folder: &Path) -> Result<PathBuf> {
    cache::Store::user()?.install_from(&CPU, wheel_or_folder)
}

/// Checks the cached CPU plugin file by file against its wheel's `RECORD`
/// (a full sha256 of each file, not just the sizes every load checks),
/// repairing it from the kept wheel or by fetching when anything differs.
pub fn verify_cpu_plugin() -> Result<PathBuf> {
    cache::Store::user()?.verify(&CPU, offline())
}

/// [`fetch_cpu_plugin`] for a CUDA plugin: the plugin's wheel and the
/// NVIDIA wheels of its CUDA libraries (several GB for the JAX plugins),
/// unpacked together into one cache entry where the plugin finds its
/// libraries without `LD_LIBRARY_PATH`. Returns the plugin's path, which
/// `XLAFN_DEVICE=cuda` then loads without being told.
pub fn fetch_cuda_plugin(package: CudaPackage) -> Result<PathBuf> {
    cache::Store::user()?.ensure(package.package(), offline())
}

/// [`install_cpu_plugin`] for a CUDA plugin: `folder` holds the pinned
/// wheels (the plugin's and its CUDA libraries'; a single wheel file may
/// be named too), and what it lacks must already be in the cache's
/// `wheels/` folder. No Python, no network.
pub fn install_cuda_plugin(package: CudaPackage, wheels: &Path) -> Result<PathBuf> {
    cache::Store::user()?.install_from(package.package(), wheels)
}

/// [`verify_cpu_plugin`] for a CUDA plugin and its CUDA libraries.
pub fn verify_cuda_plugin(package: CudaPackage) -> Result<PathBuf> {
    cache::Store::user()?.verify(package.package(), offline())
}

/// The user cache folder xlafn keeps plugins in:
/// `$XDG_CACHE_HOME/xlafn`, else `$HOME/.cache/xlafn`.
pub fn plugin_cache_dir() -> Result<PathBuf> {
    cache::user_cache_root()
}

/// Every way to provide `package` when it is not installed, for messages.
pub(crate) fn ways_out(package: &Package, why: &str) -> String {
    let wheels = package
        .wheels()
        .map(|w| match w.len() {
            1 => format!("the wheel {}", w[0].file_name),
            n => format!("the {n} wheels {} ...", w[0].file_name),
        })
        .unwrap_or_default();
    let root = cache::user_cache_root()
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| "~/.cache/xlafn".into());
    format!(
        "{} ({}) is not in xlafn's cache ({root}), and {why}. Any one of these provides it:\n\
         - `{}` (or xlafn::runtime::{}) fetches it with pip from your Python package index, \
         where the network allows;\n\
         - `{} --wheel PATH` (or xlafn::runtime::{}) installs it from {wheels} (or a folder \
         holding them), with no Python and no network;\n\
         - a {} beside this program is used as it is;\n\
         - {}=/path/to/a/pjrt/plugin.so names any PJRT plugin for this platform;\n\
         - without XLAFN_OFFLINE, the first run fetches it itself (with python3 -m pip).",
        package.what,
        package.requirement(),
        package.fetch_command,
        package.fetch_call,
        package.fetch_command,
        package.install_call,
        package.beside_executable,
        package.env_var,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_message_for_a_missing_plugin_lists_every_way_out() {
        let m = ways_out(&CPU, "XLAFN_OFFLINE is set");
        for way in [
            "xlafn fetch",
            "--wheel",
            "xla_cpu_pjrt.so",
            "XLAFN_PJRT_PLUGIN",
            "XLAFN_OFFLINE",
        ] {
            assert!(m.contains(way), "{way} missing from {m}");
        }
    }
}
