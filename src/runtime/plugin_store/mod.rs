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
//! Every install goes the same way, whether the wheel came from pip, from
//! a file the user names or from the cache's own copy: the wheel's sha256
//! must be the one pinned for this platform (`third_party/`, compiled in),
//! every file it unpacks must match its line in the wheel's `RECORD`
//! (sha256 and size), and nothing else may be in it; the files go into a
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
mod wheel;

pub(crate) use cache::identity;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// A plugin published as a pinned Python wheel.
#[derive(Debug)]
pub(crate) struct Package {
    /// The distribution's name as pip spells it (`xla-cpu-pjrt`).
    pub(crate) distribution: &'static str,
    /// The pinned version.
    pub(crate) version: &'static str,
    /// The plugin library's path inside the wheel.
    pub(crate) plugin_in_wheel: &'static str,
    /// `sha256  file name` lines, one per platform's wheel.
    pins: &'static str,
    /// The file looked for beside the running executable.
    pub(crate) beside_executable: &'static str,
    /// What the plugin is, for messages.
    pub(crate) what: &'static str,
}

/// The pinned XLA CPU plugin.
pub(crate) const CPU: Package = Package {
    distribution: "xla-cpu-pjrt",
    version: "0.0.1",
    plugin_in_wheel: "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so",
    pins: include_str!("../../../third_party/xla-cpu-pjrt.sha256"),
    beside_executable: "xla_cpu_pjrt.so",
    what: "the XLA CPU plugin",
};

/// A wheel this crate accepts: its file name and sha256.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Pin {
    pub(crate) file_name: String,
    pub(crate) sha256: String,
}

impl Package {
    /// `distribution==version`, what pip is asked for.
    pub(crate) fn requirement(&self) -> String {
        format!("{}=={}", self.distribution, self.version)
    }

    /// The cache entry's folder name (`xla-cpu-pjrt-0.0.1`).
    pub(crate) fn entry_name(&self) -> String {
        format!("{}-{}", self.distribution, self.version)
    }

    /// The wheel pinned for the platform this program runs on.
    pub(crate) fn pin(&self) -> Result<Pin> {
        let tag = platform_tag().ok_or_else(|| self.unsupported_platform())?;
        self.pins()
            .into_iter()
            .find(|p| p.file_name.ends_with(&format!("-{tag}.whl")))
            .ok_or_else(|| self.unsupported_platform())
    }

    /// Every pinned wheel, for every platform.
    pub(crate) fn pins(&self) -> Vec<Pin> {
        self.pins
            .lines()
            .filter_map(|line| line.split_once(char::is_whitespace))
            .map(|(sha, name)| Pin {
                sha256: sha.to_ascii_lowercase(),
                file_name: name.trim().trim_start_matches('*').to_string(),
            })
            .collect()
    }

    fn unsupported_platform(&self) -> Error {
        let published: Vec<String> = self
            .pins()
            .iter()
            .filter_map(|p| {
                p.file_name
                    .rsplit_once("-manylinux_2_27_")
                    .map(|(_, arch)| format!("Linux {}", arch.trim_end_matches(".whl")))
            })
            .collect();
        Error::Plugin(format!(
            "{} ({}) is published only for {}, and this program runs on {} {}: set \
             XLAFN_PJRT_PLUGIN to a PJRT plugin built for this machine",
            self.what,
            self.requirement(),
            published.join(" and "),
            std::env::consts::OS,
            std::env::consts::ARCH
        ))
    }
}

/// The pip platform tag of the wheels for this machine, if any are made.
pub(crate) fn platform_tag() -> Option<&'static str> {
    match (std::env::consts::OS, std::env::consts::ARCH) {
        ("linux", "x86_64") => Some("manylinux_2_27_x86_64"),
        ("linux", "aarch64") => Some("manylinux_2_27_aarch64"),
        _ => None,
    }
}

/// Where the CPU plugin came from, and what to change when it fails.
#[derive(Clone, Debug)]
pub(crate) struct Located {
    pub(crate) path: PathBuf,
    pub(crate) fix: String,
}

/// The CPU plugin to load, found in the documented order (module docs),
/// fetching it into the user cache when nothing else provides it.
pub(crate) fn cpu_plugin() -> Result<Located> {
    if let Some(p) = crate::environment::PJRT_PLUGIN
        .get_os()
        .filter(|p| !p.is_empty())
    {
        return Ok(Located {
            path: PathBuf::from(p),
            fix: "XLAFN_PJRT_PLUGIN names this file: set it to a PJRT plugin .so, or unset it \
                  to use the pinned CPU plugin"
                .into(),
        });
    }
    if let Some(beside) = beside_executable(&CPU) {
        return Ok(Located {
            path: beside,
            fix: format!(
                "this is the {} beside the program: replace it with the one from the pinned \
                 wheel, or remove it to use the user cache",
                CPU.beside_executable
            ),
        });
    }
    let path = cache::Store::user()?.ensure(&CPU, offline())?;
    Ok(Located {
        path,
        fix: "this is the cached pinned plugin: run `xlafn fetch --verify` to check and repair \
              it, or set XLAFN_PJRT_PLUGIN to a PJRT plugin .so"
            .into(),
    })
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
    let store = cache::Store::user()?;
    let pin = CPU.pin()?;
    let wheel = if wheel_or_folder.is_dir() {
        let found = wheel_or_folder.join(&pin.file_name);
        if !found.is_file() {
            return Err(Error::Plugin(format!(
                "{} holds no {}, the pinned wheel for this platform",
                wheel_or_folder.display(),
                pin.file_name
            )));
        }
        found
    } else {
        wheel_or_folder.to_path_buf()
    };
    store.install_from(&CPU, &wheel)
}

/// Checks the cached CPU plugin file by file against its wheel's `RECORD`
/// (a full sha256 of each file, not just the sizes every load checks),
/// repairing it from the kept wheel or by fetching when anything differs.
pub fn verify_cpu_plugin() -> Result<PathBuf> {
    cache::Store::user()?.verify(&CPU, offline())
}

/// The user cache folder xlafn keeps plugins in:
/// `$XDG_CACHE_HOME/xlafn`, else `$HOME/.cache/xlafn`.
pub fn plugin_cache_dir() -> Result<PathBuf> {
    cache::user_cache_root()
}

/// Every way to provide `package` when it is not installed, for messages.
pub(crate) fn ways_out(package: &Package, why: &str) -> String {
    let pin = package.pin().map(|p| p.file_name).unwrap_or_default();
    let root = cache::user_cache_root()
        .map(|r| r.display().to_string())
        .unwrap_or_else(|_| "~/.cache/xlafn".into());
    format!(
        "{} ({}) is not in xlafn's cache ({root}), and {why}. Any one of these provides it:\n\
         - `xlafn fetch` (or xlafn::runtime::fetch_cpu_plugin()) fetches it with pip from your \
         Python package index, where the network allows;\n\
         - `xlafn fetch --wheel PATH` (or xlafn::runtime::install_cpu_plugin) installs it from \
         the wheel {pin} or a folder holding it, with no Python and no network;\n\
         - a {} beside this program is used as it is;\n\
         - XLAFN_PJRT_PLUGIN=/path/to/a/pjrt/plugin.so names any PJRT CPU plugin;\n\
         - without XLAFN_OFFLINE, the first run fetches it itself (with python3 -m pip).",
        package.what,
        package.requirement(),
        package.beside_executable
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cpu_package_pins_a_wheel_for_each_published_platform() {
        let pins = CPU.pins();
        assert_eq!(pins.len(), 2, "{pins:?}");
        for pin in &pins {
            assert_eq!(pin.sha256.len(), 64);
            assert!(pin.file_name.starts_with("xla_cpu_pjrt-0.0.1-"));
        }
        if platform_tag().is_some() {
            assert!(
                CPU.pin()
                    .unwrap()
                    .file_name
                    .contains(std::env::consts::ARCH)
            );
        }
    }

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
