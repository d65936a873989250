//! The persistent compile cache: serialized executables on disk, so a new
//! process skips XLA compiles it has done before (tens to hundreds of ms
//! each, against a few ms to load).
//!
//! Location: `$XLAFN_COMPILE_CACHE_DIR`, else `$XDG_CACHE_HOME/xlafn/executables`
//! or `~/.cache/xlafn/executables`. `XLAFN_COMPILE_CACHE=off` disables it;
//! `XLAFN_COMPILE_CACHE_MAX_BYTES` bounds its size (default 1 GiB; `K`, `M`,
//! `G` suffixes; least recently used entries are evicted first; 0 turns
//! the cache off).
//!
//! # Trust model
//! A serialized executable is machine code that the plugin runs as it is:
//! whoever can write an entry can run code in every process that loads it.
//! The cache therefore trusts exactly one party, the user running the
//! process, and enforces that only this user can have written it:
//! - the folder is created `0700`; if it (or any entry) is not owned by the
//!   effective user, or is writable by group or others, the cache is off for
//!   the process, with one warning;
//! - entries are opened without following symlinks and without blocking
//!   (a FIFO is refused, not waited on), must be regular files, and are
//!   read only up to the size bound;
//! - temporary files are created new (`O_EXCL`, `0600`) under unpredictable
//!   names in the folder and renamed into place, so a planted file or link
//!   is never written through.
//!
//! What the checks are *not*: protection against the user themself, or
//! against anyone who already runs code as the user. The digest only
//! catches corruption (a truncated or damaged file is a miss, not a crash).
//!
//! An entry's key binds xlafn's version, the plugin build (the pinned
//! wheel's sha256, or a sha256 of the plugin file), the PJRT API version,
//! the platform, the machine's instruction set (for CPU programs: the
//! architecture and the CPU's feature flags, see [`host_features`]), the
//! compile options and the StableHLO text. The folder may be shared by
//! several machines (a network home of one user): one whose CPU lacks a
//! feature another compiled for never loads that entry. The full key
//! is stored in the entry and compared on load, so an entry moved under
//! another name is a miss, not another program.

use super::client::Client;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::SystemTime;

const MAGIC: &[u8; 8] = b"XLAFNEX2";
const ENTRY_EXTENSION: &str = "pjrt";
const DEFAULT_MAX_BYTES: u64 = 1 << 30;

static HITS: AtomicU64 = AtomicU64::new(0);
static STORES: AtomicU64 = AtomicU64::new(0);
static DISABLED: AtomicBool = AtomicBool::new(false);
/// Set when an entry broke the trust rules: the cache stays off.
static DISTRUSTED: AtomicBool = AtomicBool::new(false);

/// Turns the on-disk cache off (or back on) for this process, e.g. to
/// measure cold compiles. `XLAFN_COMPILE_CACHE=off` does the same from the
/// environment.
pub fn set_disk_cache_enabled(enabled: bool) {
    DISABLED.store(!enabled, Ordering::Relaxed);
}

/// (loads served from disk, executables written) in this process.
pub fn disk_cache_stats() -> (u64, u64) {
    (HITS.load(Ordering::Relaxed), STORES.load(Ordering::Relaxed))
}

/// A cache entry's identity.
pub struct Key {
    bytes: Vec<u8>,
    path: PathBuf,
}

/// The cache folder, checked once per process.
struct CacheDir {
    path: PathBuf,
    max_bytes: u64,
}

fn cache_dir() -> Option<&'static CacheDir> {
    static DIR: OnceLock<Option<CacheDir>> = OnceLock::new();
    DIR.get_or_init(|| match open_cache_dir() {
        Ok(dir) => dir,
        Err(why) => {
            distrust(&why);
            None
        }
    })
    .as_ref()
    .filter(|_| !DISTRUSTED.load(Ordering::Relaxed))
}

/// Turns the cache off for the process, warning once.
fn distrust(why: &str) {
    if !DISTRUSTED.swap(true, Ordering::Relaxed) {
        tracing::warn!("xlafn's compile cache is off for this process: {why}");
    }
}

/// `Ok(None)` when the cache is switched off; `Err` when it is refused.
fn open_cache_dir() -> Result<Option<CacheDir>, String> {
    if crate::environment::COMPILE_CACHE
        .get()
        .is_some_and(|v| matches!(v.as_str(), "off" | "0" | "false"))
    {
        return Ok(None);
    }
    let max_bytes = max_bytes_from_env()?;
    if max_bytes == 0 {
        return Ok(None);
    }
    let path = match crate::environment::COMPILE_CACHE_DIR.get_os() {
        Some(d) if !d.is_empty() => PathBuf::from(d),
        _ => match crate::environment::cache_root() {
            Some(root) => root.join("executables"),
            None => return Ok(None),
        },
    };
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))?;
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_dir() {
        return Err(format!("{} is not a folder", path.display()));
    }
    check_owner_only(&path, &meta)?;
    Ok(Some(CacheDir { path, max_bytes }))
}

/// Errors unless `meta` belongs to the effective user and nobody else may
/// write it.
fn check_owner_only(path: &Path, meta: &std::fs::Metadata) -> Result<(), String> {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{} belongs to uid {}, not to this user (uid {me})",
            path.display(),
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "{} is writable by group or others (mode {:o}); make it private with chmod go-w",
            path.display(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

/// `XLAFN_COMPILE_CACHE_MAX_BYTES`: bytes, with an optional `K`, `M` or
/// `G` suffix (powers of 1024).
fn max_bytes_from_env() -> Result<u64, String> {
    let Some(raw) = crate::environment::COMPILE_CACHE_MAX_BYTES.get() else {
        return Ok(DEFAULT_MAX_BYTES);
    };
    parse_size(&raw).ok_or_else(|| {
        format!(
            "XLAFN_COMPILE_CACHE_MAX_BYTES={raw:?} is not a size (bytes, optionally with a K, M or \
             G suffix)"
        )
    })
}

use crate::dtype::parse_byte_size as parse_size;

/// The plugin build's identity: the pinned wheel's sha256 for a plugin
/// the plugin store checked in this process (with the file's size, so a
/// replaced file is a miss), else a sha256 of the plugin file, computed
/// once per path.
/// The instruction set CPU programs are compiled for: the architecture
/// and the sorted feature flags of `/proc/cpuinfo` (XLA's CPU compiler
/// targets the host's features, so code compiled on a machine with
/// AVX-512 faults on one without). Read once; where there is no
/// `/proc/cpuinfo`, the architecture alone.
fn host_features() -> &'static str {
    static FEATURES: OnceLock<String> = OnceLock::new();
    FEATURES.get_or_init(|| {
        let cpuinfo = crate::files::read_limited(Path::new("/proc/cpuinfo"), 16 << 20, true)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default();
        format!(
            "{} {}",
            std::env::consts::ARCH,
            cpu_flags(&cpuinfo).join(" ")
        )
    })
}

/// The sorted, deduplicated flags of the first CPU in a `/proc/cpuinfo`
/// text (`flags` on x86, `Features` on Arm).
fn cpu_flags(cpuinfo: &str) -> Vec<&str> {
    let line = cpuinfo.lines().find_map(|l| {
        let (name, value) = l.split_once(':')?;
        matches!(name.trim(), "flags" | "Features").then_some(value)
    });
    let mut flags: Vec<&str> = line.unwrap_or_default().split_whitespace().collect();
    flags.sort_unstable();
    flags.dedup();
    flags
}

fn plugin_identity(path: &Path) -> Option<String> {
    static IDS: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    let mut ids = IDS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(id) = ids.get(path) {
        return Some(id.clone());
    }
    let id = if let Some(id) = super::plugin_store::identity(path) {
        id
    } else {
        let mut hasher = Sha256::new();
        std::io::copy(&mut File::open(path).ok()?, &mut hasher).ok()?;
        format!("file-sha256:{}", hex(&hasher.finalize()))
    };
    ids.insert(path.to_path_buf(), id.clone());
    Some(id)
}

use crate::files::hex;

/// The key for compiling `mlir` with `options` on `client`, or `None`
/// when the cache is disabled.
pub fn key(client: &Client, mlir: &str, options: &[u8]) -> Option<Key> {
    if DISABLED.load(Ordering::Relaxed) {
        return None;
    }
    let dir = cache_dir()?;
    let plugin = plugin_identity(client.plugin().path())?;
    let (major, minor) = client.plugin().version();
    let api = format!("PJRT {major}.{minor}");
    let machine = match client.platform() {
        super::client::Platform::Cpu => host_features(),
        _ => "",
    };
    let parts: [&[u8]; 7] = [
        concat!("xlafn ", env!("CARGO_PKG_VERSION")).as_bytes(),
        plugin.as_bytes(),
        api.as_bytes(),
        client.platform_name().as_bytes(),
        machine.as_bytes(),
        options,
        mlir.as_bytes(),
    ];
    Some(Key::new(&dir.path, &parts))
}

impl Key {
    fn new(dir: &Path, parts: &[&[u8]]) -> Key {
        let mut bytes = Vec::with_capacity(parts.iter().map(|p| p.len() + 8).sum());
        for part in parts {
            bytes.extend((part.len() as u64).to_le_bytes());
            bytes.extend(*part);
        }
        let name = hex(&Sha256::digest(&bytes)[..16]);
        Key {
            path: dir.join(format!("{name}.{ENTRY_EXTENSION}")),
            bytes,
        }
    }
}

/// The serialized executable stored under `key`, if present, trusted and
/// intact. An entry that breaks the trust rules turns the cache off.
pub fn load(key: &Key) -> Option<Vec<u8>> {
    let dir = cache_dir()?;
    let data = match read_entry(&key.path, dir.max_bytes) {
        Ok(data) => data?,
        Err(why) => {
            distrust(&why);
            return None;
        }
    };
    let payload = decode_entry(&data, &key.bytes)?;
    HITS.fetch_add(1, Ordering::Relaxed);
    Some(payload.to_vec())
}

/// Reads an entry: `Ok(None)` for a miss (absent, a link, not a regular
/// file, too large); `Err` for an entry someone else could have written.
fn read_entry(path: &Path, max_bytes: u64) -> Result<Option<Vec<u8>>, String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let Ok(mut file) = file else {
        return Ok(None);
    };
    let meta = file
        .metadata()
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if !meta.is_file() {
        return Ok(None);
    }
    check_owner_only(path, &meta)?;
    if meta.len() > max_bytes {
        return Ok(None);
    }
    let mut data = Vec::with_capacity(meta.len() as usize);
    if (&mut file).take(max_bytes).read_to_end(&mut data).is_err()
        || data.len() as u64 != meta.len()
    {
        return Ok(None);
    }
    // Least recently used eviction goes by modification time.
    let _ = file.set_modified(SystemTime::now());
    Ok(Some(data))
}

/// The payload of an entry whose stored key is `key` and whose digest
/// matches; `None` otherwise.
fn decode_entry<'a>(data: &'a [u8], key: &[u8]) -> Option<&'a [u8]> {
    let rest = data.strip_prefix(MAGIC)?;
    let (len, rest) = rest.split_at_checked(8)?;
    let len = usize::try_from(u64::from_le_bytes(len.try_into().ok()?)).ok()?;
    let (stored_key, rest) = rest.split_at_checked(len)?;
    let (digest, payload) = rest.split_at_checked(32)?;
    (stored_key == key && digest == entry_digest(key, payload).as_slice()).then_some(payload)
}

fn entry_digest(key: &[u8], payload: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(key);
    hasher.update(payload);
    hasher.finalize().into()
}

fn encode_entry(key: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut data = Vec::with_capacity(payload.len() + key.len() + 48);
    data.extend(MAGIC);
    data.extend((key.len() as u64).to_le_bytes());
    data.extend(key);
    data.extend(entry_digest(key, payload));
    data.extend(payload);
    data
}

/// Stores a serialized executable, then evicts least recently used
/// entries beyond the size bound; failures only cost a future compile.
pub fn store(key: &Key, payload: &[u8]) {
    let Some(dir) = cache_dir() else {
        return;
    };
    let data = encode_entry(&key.bytes, payload);
    if data.len() as u64 > dir.max_bytes {
        return;
    }
    if write_new_then_rename(&dir.path, &key.path, &data).is_ok() {
        STORES.fetch_add(1, Ordering::Relaxed);
        evict(dir, &key.path);
    }
}

/// Writes `data` to a fresh temporary file in `dir` (created new, private,
/// not through a link) and renames it to `target`.
fn write_new_then_rename(dir: &Path, target: &Path, data: &[u8]) -> std::io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let tmp = dir.join(format!(
        ".{}.{}.{}.tmp",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed),
        nanos
    ));
    let written = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)
        .and_then(|mut f| f.write_all(data));
    let renamed = written.and_then(|()| std::fs::rename(&tmp, target));
    if renamed.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    renamed
}

/// Removes the least recently used entries until the cache fits its bound
/// (never `keep`, the entry just written).
fn evict(dir: &CacheDir, keep: &Path) {
    let Ok(listing) = std::fs::read_dir(&dir.path) else {
        return;
    };
    let mut entries: Vec<(SystemTime, u64, PathBuf)> = listing
        .filter_map(|e| {
            let e = e.ok()?;
            let path = e.path();
            let meta = e.metadata().ok()?; // does not follow links
            let is_entry = path.extension().is_some_and(|x| x == ENTRY_EXTENSION);
            if !(is_entry && meta.is_file()) {
                return None;
            }
            Some((meta.modified().ok()?, meta.len(), path))
        })
        .collect();
    let mut total: u64 = entries.iter().map(|(_, len, _)| len).sum();
    entries.sort();
    for (_, len, path) in entries {
        if total <= dir.max_bytes {
            break;
        }
        if path != keep && std::fs::remove_file(&path).is_ok() {
            total -= len;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("2K"), Some(2048));
        assert_eq!(parse_size(" 3m "), Some(3 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("-1"), None);
        assert_eq!(parse_size("lots"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("99999999999999G"), None, "overflow is refused");
    }

    #[test]
    fn entries_round_trip_and_reject_other_keys_and_damage() {
        let dir = Path::new("/nonexistent");
        let a = Key::new(dir, &[b"program a"]);
        let b = Key::new(dir, &[b"program b"]);
        assert_ne!(a.path, b.path);
        let data = encode_entry(&a.bytes, b"machine code");
        assert_eq!(decode_entry(&data, &a.bytes), Some(&b"machine code"[..]));
        assert_eq!(decode_entry(&data, &b.bytes), None, "moved under b's key");
        for i in 0..data.len() {
            let mut flipped = data.clone();
            flipped[i] ^= 0x20;
            assert_eq!(decode_entry(&flipped, &a.bytes), None, "byte {i}");
        }
        assert_eq!(decode_entry(&data[..data.len() - 1], &a.bytes), None);
    }

    #[test]
    fn cpu_flags_are_the_first_cpus_sorted() {
        let x86 = "processor\t: 0\nflags\t\t: sse2 avx512f avx2 sse2\n\nprocessor\t: 1\nflags\t\t: other\n";
        assert_eq!(cpu_flags(x86), ["avx2", "avx512f", "sse2"]);
        let arm = "processor\t: 0\nFeatures\t: fp asimd sve\n";
        assert_eq!(cpu_flags(arm), ["asimd", "fp", "sve"]);
        assert!(cpu_flags("").is_empty());
        assert!(host_features().starts_with(std::env::consts::ARCH));
    }

    #[test]
    fn keys_separate_their_parts() {
        let dir = Path::new("/d");
        assert_ne!(
            Key::new(dir, &[b"ab", b"c"]).bytes,
            Key::new(dir, &[b"a", b"bc"]).bytes
        );
    }
}
