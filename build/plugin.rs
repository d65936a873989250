//! Plugin acquisition for the build script: find the PJRT CPU plugin and its
//! `pjrt_c_api.h`, fetching and verifying the pinned wheel when needed.
//!
//! Order of preference:
//! 1. `XLAFN_PJRT_PLUGIN` names an existing plugin `.so`. Its header is taken
//!    from `XLAFN_PJRT_HEADER`, or from `include/pjrt_c_api.h` beside the
//!    plugin (the wheel's layout); failing both, the pinned wheel is fetched
//!    for its header only.
//! 2. The pinned wheel already unpacked in the user cache (offline).
//! 3. The pinned wheel fetched with `python3 -m pip download --no-deps` for
//!    the target's platform, checked against its line in
//!    `third_party/xla-cpu-pjrt.sha256`, and unpacked into the cache. The
//!    unpack goes to a temporary folder that is renamed into place, so an
//!    interrupted build never leaves a half-filled cache behind.
//!
//! The wheel exists for Linux x86_64 and aarch64 only; elsewhere the build
//! says so and asks for `XLAFN_PJRT_PLUGIN` instead of downloading.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const WHEEL_REQUIREMENT: &str = "xla-cpu-pjrt==0.0.1";
const CACHE_ENTRY: &str = "xla-cpu-pjrt-0.0.1";
const PLUGIN_IN_WHEEL: &str = "xla_plugins/xla_cpu_pjrt/xla_cpu_pjrt.so";
const HEADER_IN_WHEEL: &str = "xla_plugins/xla_cpu_pjrt/include/pjrt_c_api.h";
const PIN_FILE: &str = "third_party/xla-cpu-pjrt.sha256";
/// The (target OS, target arch) pairs the pinned wheel is published for,
/// with the pip platform tag of each.
const PLATFORMS: &[(&str, &str, &str)] = &[
    ("linux", "x86_64", "manylinux_2_27_x86_64"),
    ("linux", "aarch64", "manylinux_2_27_aarch64"),
];

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
        wheel_sha256: Some(pinned_wheel(manifest_dir)?.sha256),
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

/// The target's pip platform tag, or why the pinned wheel cannot serve it.
fn target_platform() -> Result<&'static str, String> {
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    PLATFORMS
        .iter()
        .find(|(o, a, _)| *o == os && *a == arch)
        .map(|(_, _, tag)| *tag)
        .ok_or_else(|| {
            let supported: Vec<String> = PLATFORMS
                .iter()
                .map(|(o, a, _)| format!("{o} {a}"))
                .collect();
            format!(
                "the pinned XLA CPU plugin ({WHEEL_REQUIREMENT}) is published only for {}, and \
                 this build targets {os} {arch}. Name a PJRT CPU plugin built for this platform \
                 instead: XLAFN_PJRT_PLUGIN=/path/to/plugin.so, with its pjrt_c_api.h in \
                 include/ beside it or named by XLAFN_PJRT_HEADER (a header other than the \
                 pinned 0.81 one needs the `bindgen` feature).",
                supported.join(" and ")
            )
        })
}

/// Returns the unpacked wheel's root, fetching it on first use.
fn cached_wheel(manifest_dir: &Path) -> Result<PathBuf, String> {
    let platform = target_platform()?;
    let root = cache_root()?;
    let entry = root.join(CACHE_ENTRY);
    if entry.join(PLUGIN_IN_WHEEL).is_file() && entry.join(HEADER_IN_WHEEL).is_file() {
        return Ok(entry);
    }
    std::fs::create_dir_all(&root)
        .map_err(|e| format!("cannot create the cache folder {}: {e}", root.display()))?;
    let work = root.join(format!("{CACHE_ENTRY}.partial-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    let result = fetch_into(manifest_dir, platform, &work, &entry);
    let _ = std::fs::remove_dir_all(&work);
    result?;
    Ok(entry)
}

fn fetch_into(
    manifest_dir: &Path,
    platform: &str,
    work: &Path,
    entry: &Path,
) -> Result<(), String> {
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
            "--only-binary=:all:",
            "--platform",
            platform,
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
            "`python3 -m pip download --no-deps --platform {platform} {WHEEL_REQUIREMENT}` \
             failed:\n{}\nCheck that pip \
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

/// A wheel pinned in `third_party/xla-cpu-pjrt.sha256`.
struct Pin {
    sha256: String,
    file_name: String,
}

/// The pinned wheel for the target's platform: the pin file's line whose
/// file name carries the target's platform tag.
fn pinned_wheel(manifest_dir: &Path) -> Result<Pin, String> {
    let platform = target_platform()?;
    let pin_file = manifest_dir.join(PIN_FILE);
    let pinned = std::fs::read_to_string(&pin_file)
        .map_err(|e| format!("cannot read {}: {e}", pin_file.display()))?;
    pinned
        .lines()
        .filter_map(|line| line.split_once(char::is_whitespace))
        .map(|(sha, name)| Pin {
            sha256: sha.to_lowercase(),
            file_name: name.trim().trim_start_matches('*').to_string(),
        })
        .find(|pin| pin.file_name.ends_with(&format!("-{platform}.whl")))
        .ok_or_else(|| format!("{PIN_FILE} pins no wheel for {platform}"))
}

fn verify_checksum(manifest_dir: &Path, wheel: &Path) -> Result<(), String> {
    use sha2::{Digest, Sha256};
    let pin = pinned_wheel(manifest_dir)?;
    let name = wheel.file_name().unwrap_or_default().to_string_lossy();
    if name != pin.file_name {
        return Err(format!(
            "pip fetched {name}, but {PIN_FILE} pins {} for this platform; refusing it. \
             Set XLAFN_PJRT_PLUGIN to a plugin you trust.",
            pin.file_name
        ));
    }
    let bytes = std::fs::read(wheel).map_err(|e| e.to_string())?;
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    if actual != pin.sha256 {
        return Err(format!(
            "checksum mismatch for {}: expected sha256 {} ({PIN_FILE}), got {actual}. The \
             download is corrupt or the package changed; delete it and retry, or set \
             XLAFN_PJRT_PLUGIN to a plugin you trust.",
            wheel.display(),
            pin.sha256
        ));
    }
    Ok(())
}
