//! Layer: base (file access); imports only `error`, libc's flag constants
//! and sha2. Every byte an export, a checkpoint, the compile cache or the
//! plugin store reads or writes goes through here (export re-exports the
//! writers as `export::replace_file` and friends), so the rules that keep
//! a hostile folder from reaching outside itself live in one place:
//!
//! - names are plain file names of the shapes export writes (no `/`, no
//!   `..`, no hidden files), so a manifest cannot point at `/etc/passwd`;
//! - files are opened without following a final symlink and without
//!   blocking (`O_NOFOLLOW | O_NONBLOCK`), then `fstat`ed to be regular
//!   files, so a link to `/dev/zero` or a FIFO is refused instead of read
//!   forever or waited on;
//! - reads are bounded by the size the manifest promises (plus one byte to
//!   notice a longer file), so a damaged size cannot exhaust memory;
//! - writes create new files (`create_new`), so a symlink planted where an
//!   output will go cannot redirect the write onto a victim file.
//!
//! The hex digests that name and check those files (`sha256_hex`, `hex`)
//! are here too, so an export's manifest, the compile cache and the plugin
//! store spell a digest the same way.

use crate::error::{Error, Result};
use sha2::{Digest, Sha256};
use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The error for an I/O failure `doing` something with `path`: an
/// [`Error::Io`] that keeps `e`, so callers can match its kind.
pub(crate) fn io(doing: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(doing, path, e)
}

/// Errors unless `name` is a file name export could have written:
/// letters, digits, `_` and `-`, then one of the given extensions. The
/// narrow shape is the point: nothing that resolves outside the folder or
/// to a hidden or special name passes.
pub(crate) fn check_name(name: &str, extensions: &[&str]) -> Result<()> {
    let ok = name.len() <= 128
        && name.split_once('.').is_some_and(|(stem, ext)| {
            !stem.is_empty()
                && stem
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                && extensions.contains(&ext)
        });
    if ok {
        Ok(())
    } else {
        Err(Error::Value(format!(
            "export: file name {name:?} is not a plain file name ending in .{}",
            extensions.join(" or .")
        )))
    }
}

/// Opens `path` for reading without following a final symlink and
/// without blocking on a FIFO, and checks that it is a regular file.
/// `follow` allows a final symlink (for files a user names on the command
/// line, where a link is their own choice; the regular-file check stays).
pub(crate) fn open_regular(path: &Path, follow: bool) -> Result<(File, u64)> {
    let mut flags = libc::O_NONBLOCK;
    if !follow {
        flags |= libc::O_NOFOLLOW;
    }
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(flags)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP) => Error::Value(format!(
                "{}: is a symbolic link; export files must be regular files inside the folder",
                path.display()
            )),
            _ => io("cannot read", path, e),
        })?;
    // `File::metadata` is an fstat of the open descriptor: it describes the
    // file we will read, not whatever the name points at by now.
    let meta = file.metadata().map_err(|e| io("cannot read", path, e))?;
    if !meta.is_file() {
        return Err(Error::Value(format!(
            "{}: is not a regular file",
            path.display()
        )));
    }
    Ok((file, meta.len()))
}

/// Reads at most `limit + 1` bytes, so a file that grows while read (or
/// lies about its size) is noticed without reading all of it.
fn read_bounded(path: &Path, file: File, limit: u64) -> Result<Vec<u8>> {
    let mut bytes = Vec::new();
    file.take(limit.saturating_add(1))
        .read_to_end(&mut bytes)
        .map_err(|e| io("cannot read", path, e))?;
    Ok(bytes)
}

/// Reads the regular file `dir/name` that must be exactly `size` bytes.
pub(crate) fn read_exact_size(dir: &Path, name: &str, size: u64) -> Result<Vec<u8>> {
    let path = dir.join(name);
    let (file, len) = open_regular(&path, false)?;
    if len != size {
        return Err(Error::Value(format!(
            "export: {} is damaged: it has {len} bytes, the manifest says {size}",
            path.display()
        )));
    }
    let bytes = read_bounded(&path, file, size)?;
    if bytes.len() as u64 != size {
        return Err(Error::Value(format!(
            "export: {} changed size while it was read",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Reads the regular file `path` of at most `limit` bytes.
pub(crate) fn read_limited(path: &Path, limit: u64, follow: bool) -> Result<Vec<u8>> {
    let (file, len) = open_regular(path, follow)?;
    let too_big = || {
        Error::Value(format!(
            "{}: is larger than the {limit} bytes allowed here",
            path.display()
        ))
    };
    if len > limit {
        return Err(too_big());
    }
    let bytes = read_bounded(path, file, limit)?;
    if bytes.len() as u64 > limit {
        return Err(too_big());
    }
    Ok(bytes)
}

/// Writes `bytes` to a new file at `path`; an existing file (or a symlink)
/// there is an error, never overwritten or followed.
pub(crate) fn write_new(path: &Path, bytes: &[u8]) -> Result<()> {
    create_new(path, path)?
        .write_all(bytes)
        .map_err(|e| io("cannot write", path, e))
}

/// Creates the new file `path` (an existing file or symlink there is an
/// error, never opened): for writers that stream into the file themselves.
pub(crate) fn create_new_file(path: &Path) -> Result<File> {
    create_new(path, path)
}

/// Creates the new file `at` (an existing file or symlink there is an
/// error), reporting a failure as one to write `path`.
fn create_new(at: &Path, path: &Path) -> Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(at)
        .map_err(|e| match e.kind() {
            // Still an `AlreadyExists` I/O error (TensorFlow's
            // `AlreadyExistsError`), worded to say why nothing is replaced.
            std::io::ErrorKind::AlreadyExists => io(
                "cannot write",
                at,
                std::io::Error::new(
                    e.kind(),
                    "already exists; xlafn writes only new files (choose an empty folder)",
                ),
            ),
            _ => io("cannot write", path, e),
        })
}

/// Writes `bytes` to `path`, replacing what is there: the bytes go to a
/// new file in the same folder (`create_new`, i.e. `O_CREAT | O_EXCL`, so
/// nothing planted there is followed or reused), are synced to disk, and
/// the file is then renamed over `path`. A rename replaces a symlink at
/// `path` rather than writing through it, and a reader (or a crash) sees
/// the old file or the new one, never half of one.
///
/// The temporary name carries 64 unpredictable bits besides the process
/// id and a counter: concurrent writers (threads or processes, to one path
/// or to names that differ only in their extension) never share one, and
/// nobody can plant a file under it in advance to make the write fail.
pub(crate) fn replace(path: &Path, bytes: &[u8]) -> Result<()> {
    let temp = temp_beside(path)?;
    // Errors name the file the caller asked for, not the temporary one.
    let mut file = create_new(&temp, path)?;
    let written = file
        .write_all(bytes)
        .and_then(|()| file.sync_all())
        .and_then(|()| std::fs::rename(&temp, path));
    if let Err(e) = written {
        // The temporary file is this call's own (`create_new` made it).
        let _ = std::fs::remove_file(&temp);
        return Err(io("cannot write", path, e));
    }
    // The rename itself is durable once the folder is synced; a folder
    // that cannot be opened or synced (some filesystems) loses nothing
    // but that guarantee, so it is not an error.
    if let Some(dir) = path.parent() {
        let dir = if dir.as_os_str().is_empty() {
            Path::new(".")
        } else {
            dir
        };
        if let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
    }
    Ok(())
}

/// `dir/.<name>.<unpredictable suffix>.tmp` for `path = dir/name`: the
/// temporary file [`replace`] and [`replace_streaming`] write first.
fn temp_beside(path: &Path) -> Result<std::path::PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| Error::Value(format!("{}: not a file name", path.display())))?;
    let mut temp_name = std::ffi::OsString::from(".");
    temp_name.push(name);
    temp_name.push(format!(".{}.tmp", unpredictable_suffix()));
    Ok(path.with_file_name(temp_name))
}

/// [`replace`] for a file written a piece at a time (a metrics log): a new
/// file is created beside `path` (`create_new`, so nothing planted there
/// is followed) and renamed over `path` at once, empty; the returned
/// handle is that file, so every later write goes to the file this call
/// made, never through a link or into a FIFO planted at `path` (a link,
/// FIFO or file there is replaced, not opened).
#[cfg_attr(not(feature = "summary"), allow(dead_code))]
pub(crate) fn replace_streaming(path: &Path) -> Result<File> {
    let temp = temp_beside(path)?;
    let file = create_new(&temp, path)?;
    if let Err(e) = std::fs::rename(&temp, path) {
        // The temporary file is this call's own (`create_new` made it).
        let _ = std::fs::remove_file(&temp);
        return Err(io("cannot write", path, e));
    }
    Ok(file)
}

/// Checks that a file can be created beside `path` (its folder exists and
/// is writable) by creating and removing an empty temporary file there:
/// for outputs written at the end of a long run, so that a bad path fails
/// before the run rather than after it. `path` itself is not touched.
#[cfg_attr(not(feature = "summary"), allow(dead_code))]
pub(crate) fn check_writable(path: &Path) -> Result<()> {
    let temp = temp_beside(path)?;
    create_new(&temp, path)?;
    std::fs::remove_file(&temp).map_err(|e| io("cannot write", path, e))
}

/// `<pid>-<counter>-<16 hex digits>`: the hex digits come from std's
/// randomly keyed SipHash (`RandomState`, seeded from the OS), so they
/// cannot be guessed, with no dependency for it.
pub(crate) fn unpredictable_suffix() -> String {
    use std::hash::{BuildHasher, Hasher};
    static COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(n);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    format!("{}-{n}-{:016x}", std::process::id(), h.finish())
}

/// Lowercase hex of `bytes` (a digest, or a prefix of one).
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Lowercase hex sha256 of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain_file_names() {
        for good in ["program_0.mlir", "constant_12.npy", "a-b.npy"] {
            check_name(good, &["mlir", "npy"]).unwrap();
        }
        for bad in [
            "",
            ".npy",
            "../x.npy",
            "/etc/passwd",
            "a/b.npy",
            "x.npy.npy",
            "x.txt",
            "x",
            "x .npy",
            "é.npy",
        ] {
            assert!(check_name(bad, &["mlir", "npy"]).is_err(), "{bad:?}");
        }
    }
}
