//! Layer: export (test support, hidden from the docs). Helpers shared by
//! the fuzz target (`fuzz/fuzz_targets/load_export.rs`) and the robustness
//! tests, so both push damage past the digests into the `.npy` reader, the
//! program check and XLA's compiler, which a random byte flip alone would
//! almost never reach (it fails the digest first).
//!
//! Not part of the API: it writes into the folder it is given without the
//! care `export` takes, and exists only to make hostile folders.

use super::manifest::{DIGEST, MANIFEST, digest_line, sha256_hex};
use crate::error::{Error, Result};
use crate::files::{check_name, io};
use std::path::{Path, PathBuf};

/// Signs `dir` again after its files were changed: the size and sha256 of
/// every listed file that exists as a plain file in `dir` is set to what is
/// there now, then the digest of the manifest is written. A manifest that
/// is not JSON any more is signed as it is, so the loader meets its bytes.
pub fn resign(dir: &Path) -> Result<()> {
    let manifest_path = dir.join(MANIFEST);
    let mut bytes =
        std::fs::read(&manifest_path).map_err(|e| io("cannot read", &manifest_path, e))?;
    if let Ok(mut json) = serde_json::from_slice::<serde_json::Value>(&bytes) {
        for list in ["programs", "constants", "variables"] {
            let Some(entries) = json.get_mut(list).and_then(|l| l.as_array_mut()) else {
                continue;
            };
            for entry in entries.iter_mut().filter_map(|e| e.as_object_mut()) {
                sign_entry(dir, entry);
            }
        }
        if let Some(graph) = json.get_mut("graph").and_then(|g| g.as_object_mut()) {
            sign_entry(dir, graph);
        }
        bytes = serde_json::to_vec_pretty(&json).map_err(|e| Error::Value(e.to_string()))?;
        std::fs::write(&manifest_path, &bytes)
            .map_err(|e| io("cannot write", &manifest_path, e))?;
    }
    let digest_path = dir.join(DIGEST);
    std::fs::write(&digest_path, digest_line(&bytes))
        .map_err(|e| io("cannot write", &digest_path, e))
}

/// Sets the size and sha256 of one listed file to what `dir` holds now.
fn sign_entry(dir: &Path, entry: &mut serde_json::Map<String, serde_json::Value>) {
    let Some(file) = entry.get("file").and_then(|f| f.as_str()) else {
        return;
    };
    let path = dir.join(file);
    // Only plain files: reading a planted FIFO or device would hang or
    // never end.
    let plain = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_file());
    if check_name(file, &["mlir", "npy", "json"]).is_err() || !plain {
        return;
    }
    let Ok(data) = std::fs::read(&path) else {
        return;
    };
    entry.insert("size".into(), (data.len() as u64).into());
    entry.insert("sha256".into(), sha256_hex(&data).into());
}

/// The files of `dir` that mutations may change: everything but the
/// digest file (which `resign` rewrites), in name order.
pub fn mutable_files(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| io("cannot list", dir, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| std::fs::symlink_metadata(p).is_ok_and(|m| m.is_file()))
        .filter(|p| p.file_name().is_some_and(|n| n != DIGEST))
        .collect();
    files.sort();
    Ok(files)
}

/// Applies the edits that `data` encodes to the files of `dir`, then
/// re-signs it. Each 4 bytes are one edit: which file, where (two bytes,
/// scaled to the file's length) and the new byte; a leftover byte
/// truncates the file it picks at half. Any `data` is a valid edit list,
/// which is what a fuzzer needs.
pub fn mutate(dir: &Path, data: &[u8]) -> Result<()> {
    let files = mutable_files(dir)?;
    if files.is_empty() {
        return Ok(());
    }
    let mut chunks = data.chunks_exact(4);
    for edit in chunks.by_ref() {
        let path = &files[edit[0] as usize % files.len()];
        let mut bytes = std::fs::read(path).map_err(|e| io("cannot read", path, e))?;
        if bytes.is_empty() {
            continue;
        }
        let at = (usize::from(u16::from_le_bytes([edit[1], edit[2]])) * bytes.len()) >> 16;
        bytes[at] = edit[3];
        std::fs::write(path, &bytes).map_err(|e| io("cannot write", path, e))?;
    }
    if let [pick, ..] = chunks.remainder() {
        let path = &files[*pick as usize % files.len()];
        let bytes = std::fs::read(path).map_err(|e| io("cannot read", path, e))?;
        std::fs::write(path, &bytes[..bytes.len() / 2]).map_err(|e| io("cannot write", path, e))?;
    }
    resign(dir)
}
