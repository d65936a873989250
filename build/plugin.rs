//! Plugin acquisition for the build script: find the PJRT CPU plugin and its
//! `pjrt_c_api.h`, fetching and verifying the pinned wheel when needed.
//!
//! Order of preference:
//! 1. `XLAFN_PJRT_PLUGIN` names an existing plugin `.so`. Its header is taken
//!    from `XLAFN_PJRT_HEADER`, or from `include/pjrt_c_api.h` beside the
//!    plugin (the wheel's layout); failing both, the pinned wheel is fetched
//!    for its header only.
//! 2. The pinned wheel already unpacked in the user cache (offline).
//! 3. The pinned wheel fetched with `python3 -m pip download --no-deps`,
//!    checked against `third_party/xla-cpu-pjrt.sha256`, and unpacked into the
//!    cache. The unpack goes to a temporary folder that is renamed into place,
//!    so an interrupted build never leaves a half-filled cache behind.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const WHEEL_REQUIREMENT: &str = "xla-cpu-pjrt==0.0.1";
const CACHE_ENTRY: &str = "xla-cpu-pjrt-0.0.1";
const PLUGIN_IN_WHEEL: &str = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
const HEADER_IN_WHEEL: &str = "xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h";

pub struct Located {
    pub plugin: PathBuf,
    pub header: PathBuf,
    /// The pinned wheel's sha256 when the plugin came from it: the plugin
    /// build's identity, which the compile cache binds its entries to
    /// without hashing a large library at run time.
    pub wheel_sha256: Option<String>,
}

/// Finds the plugin and header, fetching the wheel if nothing usable exists.
pub fn locate(manifest_dir: &Path) -> Result<Located, String> {
    if let Some(plugin) = std::env::var_os("XLAFN_PJRT_PLUGIN").map(PathBuf::from) {
        if !plugin.is_file() {
            return Err(format!(
                "XLAFN_PJRT_PLUGIN points at {}, which is not a file. Point it at a PJRT plugin \
                 .so, or unset it to use the pinned {WHEEL_REQUIREMENT} wheel.",
                plugin.display()
            ));
        }
        let header = match header_for_plugin(&plugin) {
            Some(h) => h,
            None => cached_wheel(manifest_dir)?.join(HEADER_IN_WHEEL),
        };
        return Ok(Located {
            plugin,
            header,
            wheel_sha256: None,
        });
    }
    let root = cached_wheel(manifest_dir)?;
    Ok(Located {
        plugin: root.join(PLUGIN_IN_WHEEL),
        header: root.join(HEADER_IN_WHEEL),
        wheel_sha256: Some(pinned_sha256(manifest_dir)?),
    })
}

fn header_for_plugin(plugin: &Path) -> Option<PathBuf> {
    if let Some(h) = std::env::var_os("XLAFN_PJRT_HEADER").map(PathBuf::from) {
        return Some(h);
    }
    let beside = plugin.parent()?.join("include/pjrt_c_api.h");
    beside.is_file().then_some(beside)
}

/// The user cache folder shared by every clone and build on this machine.
pub fn cache_root() -> Result<PathBuf, String> {
    if let Some(x) = std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        return Ok(PathBuf::from(x).join("xlafn"));
    }
    match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
        Some(home) => Ok(PathBuf::from(home).join(".cache/xlafn")),
        None => Err(
            "neither XDG_CACHE_HOME nor HOME is set, so xlafn has no cache folder \
                     for the XLA plugin; set one of them"
                .into(),
        ),
    }
}

/// Returns the unpacked wheel's root, fetching it on first use.
fn cached_wheel(manifest_dir: &Path) -> Result<PathBuf, String> {
    let root = cache_root()?;
    let entry = root.join(CACHE_ENTRY);
    if entry.join(PLUGIN_IN_WHEEL).is_file() && entry.join(HEADER_IN_WHEEL).is_file() {
        return Ok(entry);
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| format!("cannot create the cache folder {}: {e}", root.display()))?;
    let work = root.join(format!("{CACHE_ENTRY}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let result = fetch_into(manifest_dir, &work, &entry);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(entry)
}

fn fetch_into(manifest_dir: &Path, work: &Path, entry: &Path) -> Result<(), String> {
    let download = work.join("download");
    std::fs::create_dir_all(&download).map_err(|e| e.to_string())?;
    let out = Command::new("python3")
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
        ])
        .arg("-d")
        .arg(&download)
        .arg(WHEEL_REQUIREMENT)
        .output()
        .map_err(|e| {
            format!(
                "could not run python3 to fetch the XLA plugin ({e}). Install Python 3 with \
                 pip (Debian: apt-get install python3-pip), or set XLAFN_PJRT_PLUGIN to an \
                 existing PJRT plugin .so."
            )
        })?;
    if !out.status.success() {
        return Err(format!(
            "`python3 -m pip download --no-deps {WHEEL_REQUIREMENT}` failed:\n{}\nCheck that pip \
             is installed (python3 -m pip --version) and that the package index is reachable, \
             or set XLAFN_PJRT_PLUGIN to an existing PJRT plugin .so.",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let wheel = single_wheel(&download)?;
    verify_checksum(manifest_dir, &wheel)?;
    let unpacked = work.join("unpacked");
    let status = Command::new("python3")
        .args(["-m", "zipfile", "-e"])
        .arg(&wheel)
        .arg(&unpacked)
        .status()
        .map_err(|e| format!("could not run python3 to unpack {}: {e}", wheel.display()))?;
    if !status.success() {
        return Err(format!("unpacking {} failed", wheel.display()));
    }
    if entry.exists() {
        // A concurrent build finished first; its copy is as good as ours.
        return Ok(());
    }
    std::fs::rename(&unpacked, entry)
        .map_err(|e| format!("cannot move the plugin into {}: {e}", entry.display()))
}

fn single_wheel(dir: &Path) -> Result<PathBuf, String> {
    let mut wheels = std::fs::read_dir(dir)
        .map_err(|e| e.to_string())?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "whl"));
    wheels.next().ok_or_else(|| {
        format!(
            "pip reported success but left no wheel in {}",
            dir.display()
        )
    })
}

/// The wheel's sha256 pinned in `third_party/xla-cpu-pjrt.sha256`.
fn pinned_sha256(manifest_dir: &Path) -> Result<String, String> {
    let pin_file = manifest_dir.join("third_party/xla-cpu-pjrt.sha256");
    let pinned = std::fs::read_to_string(&pin_file)
        .map_err(|e| format!("cannot read {}: {e}", pin_file.display()))?;
    Ok(pinned
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_lowercase())
}

fn verify_checksum(manifest_dir: &Path, wheel: &Path) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    let pinned = pinned_sha256(manifest_dir)?;
    let bytes = std::fs::read(wheel).map_err(|e| e.to_string())?;
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if actual != pinned {
        return Err(format!(
            "checksum mismatch for {}: expected sha256 {pinned} (third_party/xla-cpu-pjrt.sha256), \
             got {actual}. The download is corrupt or the package changed; delete it and retry, \
             or set XLAFN_PJRT_PLUGIN to a plugin you trust.",
            wheel.display()
        ));
    }
    Ok(())
}
