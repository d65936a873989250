//! Checking and unpacking a wheel: its sha256 against the pin, then each
//! file against the wheel's own `RECORD` (the list of every file with its
//! sha256 and size that a wheel must carry), with every size bounded
//! before anything is written.

use super::{Package, Pin};
use crate::error::{Error, Result};
use crate::files;
use base64::Engine as _;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::io::{Read, Write};
use std::path::Path;

/// More entries than any plugin or CUDA runtime wheel holds.
const MAX_ENTRIES: usize = 20_000;
/// A `RECORD` of that many lines is far smaller.
const MAX_RECORD_BYTES: u64 = 8 << 20;
/// The unpacked size of the largest wheel accepted (cuDNN's is ~1 GB).
const MAX_UNPACKED_BYTES: u64 = 16 << 30;

/// One file unpacked and checked (a file another wheel of the entry had
/// unpacked already is not listed again).
#[derive(Debug)]
pub(super) struct Unpacked {
    pub(super) path: String,
    pub(super) size: u64,
    pub(super) sha256: String,
}

/// Errors unless the file at `wheel` has the pinned sha256 (`package`'s
/// other pins tell a wheel for another platform apart from a corrupt one).
pub(super) fn check_pinned(wheel: &Path, pin: &Pin, package: &Package) -> Result<()> {
    let actual = sha256_of_file(wheel)?;
    if actual == pin.sha256 {
        return Ok(());
    }
    let other = package.all_pins().into_iter().find(|p| p.sha256 == actual);
    Err(Error::Plugin(match other {
        Some(other) => format!(
            "{} is {}, the wheel for another platform; this machine needs {}",
            wheel.display(),
            other.file_name,
            pin.file_name
        ),
        None => format!(
            "{} is not the pinned {} (sha256 {actual}, pinned {}): the download is corrupt or \
             the package changed; refusing it",
            wheel.display(),
            pin.file_name,
            pin.sha256
        ),
    }))
}

/// A file's sha256, in hex (as pins write it).
pub(super) fn sha256_of_file(path: &Path) -> Result<String> {
    let (mut file, _) = files::open_regular(path, true)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| Error::io("cannot read", path, e))?;
    Ok(files::hex(&hasher.finalize()))
}

/// A file's sha256 in `RECORD`'s spelling (URL-safe base64, no padding).
pub(super) fn record_sha256_of_file(path: &Path) -> Result<String> {
    let (mut file, _) = files::open_regular(path, false)?;
    let mut hasher = Sha256::new();
    std::io::copy(&mut file, &mut hasher).map_err(|e| Error::io("cannot read", path, e))?;
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hasher.finalize()))
}

/// A `RECORD` line's claim: sha256 (RECORD's spelling) and size.
type Claims = HashMap<String, (String, u64)>;

/// Paths already unpacked into an entry by an earlier wheel of it, with
/// their sha256: two wheels may both ship a file (a namespace package's
/// `__init__.py`) only with the same contents.
pub(super) type UnpackedPaths = HashMap<String, String>;

/// Unpacks `wheel` (pinned as `pin`) into the folder `dest`, checking
/// every file against the wheel's `RECORD`: no file may be missing,
/// extra, larger or different, and no entry may be a link or leave
/// `dest`. Files an earlier wheel unpacked there (`seen`) are compared,
/// not written twice. Executable files stay executable (ptxas).
pub(super) fn unpack_verified(
    wheel: &Path,
    pin: &Pin,
    dest: &Path,
    seen: &mut UnpackedPaths,
) -> Result<Vec<Unpacked>> {
    let (file, _) = files::open_regular(wheel, true)?;
    let bad = |why: String| Error::Plugin(format!("{}: {why}; refusing it", wheel.display()));
    let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| bad(format!("not a readable wheel (zip): {e}")))?;
    if zip.len() > MAX_ENTRIES {
        return Err(bad(format!(
            "{} entries, more than {MAX_ENTRIES}",
            zip.len()
        )));
    }
    let (distribution, version) = pin.distribution_and_version();
    let expected = format!("{distribution}-{version}.dist-info/RECORD");
    // Older wheel builders spell the folder's name in another case.
    let record_name = zip
        .file_names()
        .find(|n| n.eq_ignore_ascii_case(&expected))
        .unwrap_or(&expected)
        .to_string();
    let claims = read_record(&mut zip, &record_name).map_err(|e| bad(e.to_string()))?;
    let total: u64 = claims
        .values()
        .map(|(_, size)| *size)
        .fold(0, u64::saturating_add);
    if total > MAX_UNPACKED_BYTES {
        return Err(bad(format!(
            "its RECORD claims {total} bytes, more than {MAX_UNPACKED_BYTES}"
        )));
    }
    let mut unpacked = Vec::with_capacity(claims.len());
    let mut found = std::collections::HashSet::new();
    for index in 0..zip.len() {
        let mut item = zip
            .by_index(index)
            .map_err(|e| bad(format!("entry {index} is unreadable: {e}")))?;
        let name = item.name().to_string();
        if item.is_dir() {
            continue;
        }
        let Some(relative) = item.enclosed_name() else {
            return Err(bad(format!(
                "entry {name:?} leaves the folder it unpacks into"
            )));
        };
        if item.is_symlink() {
            return Err(bad(format!("entry {name:?} is a symbolic link")));
        }
        if name == record_name {
            continue;
        }
        let Some((sha256, size)) = claims.get(&name) else {
            return Err(bad(format!("entry {name:?} is not listed in its RECORD")));
        };
        if item.size() != *size {
            return Err(bad(format!(
                "entry {name:?} is {} bytes, its RECORD says {size}",
                item.size()
            )));
        }
        found.insert(name.clone());
        if let Some(earlier) = seen.get(&name) {
            if earlier != sha256 {
                return Err(bad(format!(
                    "entry {name:?} differs from the file of that name another pinned wheel \
                     holds"
                )));
            }
            // Checked when the earlier wheel unpacked it.
            continue;
        }
        let executable = item.unix_mode().is_some_and(|m| m & 0o111 != 0);
        let target = dest.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| Error::io("cannot create", parent, e))?;
        }
        let mut out = files::create_new_file(&target)?;
        let mut hasher = Sha256::new();
        let mut written = 0u64;
        let mut buf = vec![0u8; 1 << 20];
        let mut limited = (&mut item).take(size.saturating_add(1));
        loop {
            let n = limited
                .read(&mut buf)
                .map_err(|e| bad(format!("entry {name:?} is damaged: {e}")))?;
            if n == 0 {
                break;
            }
            written += n as u64;
            hasher.update(&buf[..n]);
            out.write_all(&buf[..n])
                .map_err(|e| Error::io("cannot write", &target, e))?;
        }
        if executable {
            use std::os::unix::fs::PermissionsExt;
            out.set_permissions(std::fs::Permissions::from_mode(0o755))
                .map_err(|e| Error::io("cannot make executable", &target, e))?;
        }
        out.sync_all()
            .map_err(|e| Error::io("cannot write", &target, e))?;
        let actual = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(hasher.finalize());
        if written != *size || actual != *sha256 {
            return Err(bad(format!(
                "entry {name:?} does not match its RECORD line ({written} bytes, sha256 {actual})"
            )));
        }
        seen.insert(name.clone(), actual.clone());
        unpacked.push(Unpacked {
            path: name,
            size: written,
            sha256: actual,
        });
    }
    if found.len() != claims.len() {
        let missing: Vec<&String> = claims
            .keys()
            .filter(|k| !found.contains(*k))
            .take(3)
            .collect();
        return Err(bad(format!(
            "its RECORD lists files it does not hold: {missing:?}"
        )));
    }
    Ok(unpacked)
}

/// The wheel's `RECORD`: `path,sha256=<digest>,size` per file (the
/// RECORD's own line has no digest and is skipped).
fn read_record<R: Read + std::io::Seek>(
    zip: &mut zip::ZipArchive<R>,
    record_name: &str,
) -> Result<Claims> {
    let mut record = zip
        .by_name(record_name)
        .map_err(|_| Error::Plugin(format!("it has no {record_name}")))?;
    if record.size() > MAX_RECORD_BYTES {
        return Err(Error::Plugin(format!(
            "its RECORD is {} bytes, more than {MAX_RECORD_BYTES}",
            record.size()
        )));
    }
    let mut text = String::new();
    (&mut record)
        .take(MAX_RECORD_BYTES)
        .read_to_string(&mut text)
        .map_err(|e| Error::Plugin(format!("its RECORD is unreadable: {e}")))?;
    let mut claims = Claims::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        // The path may hold commas (then it is quoted); digest and size
        // never do, so they are split off the end.
        let mut fields = line.rsplitn(3, ',');
        let (Some(size), Some(digest), Some(path)) = (fields.next(), fields.next(), fields.next())
        else {
            return Err(Error::Plugin(format!(
                "its RECORD has a malformed line {line:?}"
            )));
        };
        let path = path.trim_matches('"').to_string();
        if path == record_name && digest.is_empty() {
            continue;
        }
        let (Some(sha256), Ok(size)) = (digest.strip_prefix("sha256="), size.parse::<u64>()) else {
            return Err(Error::Plugin(format!(
                "its RECORD line {line:?} has no sha256 and size"
            )));
        };
        if claims
            .insert(path.clone(), (sha256.to_string(), size))
            .is_some()
        {
            return Err(Error::Plugin(format!("its RECORD lists {path:?} twice")));
        }
    }
    Ok(claims)
}
