//! The user cache of unpacked plugin wheels: one entry folder per package
//! (`xla-cpu-pjrt-0.0.1/`), the verified wheels it was unpacked from
//! (`wheels/`), a lock file per entry, and the stamp inside each entry
//! that later processes check before loading the plugin.
//!
//! Only this file writes into the cache, and only under the entry's lock:
//! new folders are made with a fresh unpredictable name and renamed into
//! place, files inside them are created new (`create_new`), so nothing
//! planted in the cache is written through.

use super::{Package, Pin, fetch, wheel};
use crate::error::{Error, Result};
use crate::files;
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

/// The stamp's file name inside an entry.
const STAMP: &str = ".xlafn-installed.json";
/// A stamp lists a wheel's files; far fewer than this many bytes.
const MAX_STAMP_BYTES: u64 = 4 << 20;

/// `$XDG_CACHE_HOME/xlafn`, else `$HOME/.cache/xlafn` (an absolute path).
pub(crate) fn user_cache_root() -> Result<PathBuf> {
    crate::environment::cache_root().ok_or_else(|| {
        Error::Plugin(
            "xlafn has no cache folder for its plugin: neither XDG_CACHE_HOME nor HOME is set \
             to an absolute path. Set one of them, or set XLAFN_PJRT_PLUGIN to a PJRT plugin .so"
                .into(),
        )
    })
}

/// What one installed file must still be: written into the stamp at
/// install, checked (size and time) at every load, rehashed on `verify`.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct StampFile {
    path: String,
    size: u64,
    mtime_ns: i128,
    /// sha256 as the wheel's RECORD writes it (URL-safe base64).
    sha256: String,
}

#[derive(Serialize, Deserialize, Debug)]
struct Stamp {
    wheel: String,
    wheel_sha256: String,
    files: Vec<StampFile>,
}

/// Plugins this process found installed and intact, with their identity
/// for the compile cache (the wheel's sha256 and the file's size).
fn verified() -> &'static Mutex<HashMap<PathBuf, String>> {
    static VERIFIED: OnceLock<Mutex<HashMap<PathBuf, String>>> = OnceLock::new();
    VERIFIED.get_or_init(Default::default)
}

/// The compile cache's identity for the plugin at `path` when it is a
/// cached entry this process checked: `wheel-sha256:<sha>:<size>`, which
/// saves hashing a 250 MB library at start-up.
pub(crate) fn identity(path: &Path) -> Option<String> {
    verified()
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(path)
        .cloned()
}

/// One cache folder.
pub(crate) struct Store {
    root: PathBuf,
}

/// Serialises this process's installs; the lock file serialises processes.
static INSTALLING: Mutex<()> = Mutex::new(());

impl Store {
    pub(crate) fn user() -> Result<Store> {
        Ok(Store {
            root: user_cache_root()?,
        })
    }

    fn entry(&self, package: &Package) -> PathBuf {
        self.root.join(package.entry_name())
    }

    fn kept_wheel(&self, pin: &Pin) -> PathBuf {
        self.root.join("wheels").join(&pin.file_name)
    }

    /// The installed plugin's path, installing or repairing it first when
    /// the entry is missing or fails its stamp.
    pub(crate) fn ensure(&self, package: &Package, offline: bool) -> Result<PathBuf> {
        let pin = package.pin()?;
        if let Ok(path) = self.check(package, &pin, false) {
            return Ok(path);
        }
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        // Another process (or thread) may have installed it meanwhile.
        if let Ok(path) = self.check(package, &pin, false) {
            return Ok(path);
        }
        self.repair_locked(package, &pin, offline)
    }

    /// [`Store::ensure`] with every file rehashed, not just stat'ed.
    pub(crate) fn verify(&self, package: &Package, offline: bool) -> Result<PathBuf> {
        let pin = package.pin()?;
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        match self.check(package, &pin, true) {
            Ok(path) => Ok(path),
            Err(_) => self.repair_locked(package, &pin, offline),
        }
    }

    /// Installs from a wheel file the user names (copied into `wheels/`
    /// once verified); a sound entry already there is kept.
    pub(crate) fn install_from(&self, package: &Package, wheel: &Path) -> Result<PathBuf> {
        let pin = package.pin()?;
        wheel::check_pinned(wheel, &pin, package)?;
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        if let Ok(path) = self.check(package, &pin, true) {
            return Ok(path);
        }
        self.clean_leftovers(package);
        self.install_locked(package, &pin, wheel, Keep::Copy)
    }

    /// Under the lock: install from the kept wheel, else (online) fetch.
    fn repair_locked(&self, package: &Package, pin: &Pin, offline: bool) -> Result<PathBuf> {
        self.clean_leftovers(package);
        let kept = self.kept_wheel(pin);
        if kept.is_file() {
            match wheel::check_pinned(&kept, pin, package)
                .and_then(|()| self.install_locked(package, pin, &kept, Keep::AlreadyKept))
            {
                Ok(path) => return Ok(path),
                // A damaged kept wheel is dropped and fetched again.
                Err(_) => {
                    let _ = std::fs::remove_file(&kept);
                }
            }
        }
        if offline {
            return Err(Error::Plugin(super::ways_out(
                package,
                "XLAFN_OFFLINE is set, so it is not fetched",
            )));
        }
        let work = self.work_dir(package)?;
        let result = fetch::pip_download(package, pin, &work, &self.root)
            .and_then(|wheel| self.install_locked(package, pin, &wheel, Keep::Move));
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    /// Under the lock: unpack `wheel` (already checked against `pin`) into
    /// a new folder, stamp it, keep the wheel, and rename the folder over
    /// the entry.
    fn install_locked(
        &self,
        package: &Package,
        pin: &Pin,
        wheel: &Path,
        keep: Keep,
    ) -> Result<PathBuf> {
        let work = self.work_dir(package)?;
        let result = self.install_into(package, pin, wheel, keep, &work);
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    fn install_into(
        &self,
        package: &Package,
        pin: &Pin,
        wheel: &Path,
        keep: Keep,
        work: &Path,
    ) -> Result<PathBuf> {
        let unpacked = work.join("unpacked");
        let installed = wheel::unpack_verified(wheel, package, &unpacked)?;
        if !installed.iter().any(|f| f.path == package.plugin_in_wheel) {
            return Err(Error::Plugin(format!(
                "{} holds no {}: it is not the {} wheel",
                wheel.display(),
                package.plugin_in_wheel,
                package.what
            )));
        }
        let files = installed
            .into_iter()
            .map(|f| {
                let meta = std::fs::symlink_metadata(unpacked.join(&f.path))
                    .map_err(|e| Error::io("cannot read", &unpacked.join(&f.path), e))?;
                Ok(StampFile {
                    path: f.path,
                    size: f.size,
                    mtime_ns: mtime_ns(&meta),
                    sha256: f.sha256,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let stamp = Stamp {
            wheel: pin.file_name.clone(),
            wheel_sha256: pin.sha256.clone(),
            files,
        };
        let text = serde_json::to_vec_pretty(&stamp)
            .map_err(|e| Error::Plugin(format!("cannot encode the plugin stamp: {e}")))?;
        write_synced(&unpacked.join(STAMP), &text)?;
        self.keep_wheel(pin, wheel, keep)?;
        let entry = self.entry(package);
        if std::fs::symlink_metadata(&entry).is_ok() {
            // Out of the way first (a rename cannot replace a full folder);
            // a process still running the old plugin keeps its mapping.
            let broken = self.root.join(format!(
                "{}.broken-{}",
                package.entry_name(),
                files::unpredictable_suffix()
            ));
            std::fs::rename(&entry, &broken)
                .map_err(|e| Error::io("cannot replace the broken cache entry", &entry, e))?;
            let _ = std::fs::remove_dir_all(&broken);
        }
        std::fs::rename(&unpacked, &entry)
            .map_err(|e| Error::io("cannot move the plugin into place at", &entry, e))?;
        sync_dir(&self.root);
        self.check(package, pin, false)
    }

    /// Keeps the verified wheel in `wheels/`, for repairs without network.
    fn keep_wheel(&self, pin: &Pin, wheel: &Path, keep: Keep) -> Result<()> {
        let kept = self.kept_wheel(pin);
        let dir = self.root.join("wheels");
        std::fs::create_dir_all(&dir).map_err(|e| Error::io("cannot create", &dir, e))?;
        match keep {
            Keep::AlreadyKept => Ok(()),
            // The download is in this install's own folder, on the same
            // filesystem: a rename (over a damaged older copy) is enough.
            Keep::Move => std::fs::rename(wheel, &kept)
                .map_err(|e| Error::io("cannot keep the wheel at", &kept, e)),
            Keep::Copy => {
                let temp = dir.join(format!(
                    ".{}.{}.tmp",
                    pin.file_name,
                    files::unpredictable_suffix()
                ));
                let (mut from, _) = files::open_regular(wheel, true)?;
                let copied = files::create_new_file(&temp).and_then(|mut to| {
                    std::io::copy(&mut from, &mut to)
                        .and_then(|_| to.sync_all())
                        .map_err(|e| Error::io("cannot write", &temp, e))
                });
                let renamed = copied.and_then(|()| {
                    std::fs::rename(&temp, &kept)
                        .map_err(|e| Error::io("cannot keep the wheel at", &kept, e))
                });
                if renamed.is_err() {
                    let _ = std::fs::remove_file(&temp);
                }
                renamed
            }
        }
    }

    /// The entry's plugin path if its stamp names this pin and every file
    /// it lists is still a regular file of its size and time (and, with
    /// `rehash`, its sha256).
    fn check(&self, package: &Package, pin: &Pin, rehash: bool) -> Result<PathBuf> {
        let entry = self.entry(package);
        let stamp: Stamp = serde_json::from_slice(&files::read_limited(
            &entry.join(STAMP),
            MAX_STAMP_BYTES,
            false,
        )?)
        .map_err(|e| Error::Plugin(format!("{}: bad stamp: {e}", entry.display())))?;
        if stamp.wheel != pin.file_name || stamp.wheel_sha256 != pin.sha256 {
            return Err(Error::Plugin(format!(
                "{} holds {}, not the pinned {}",
                entry.display(),
                stamp.wheel,
                pin.file_name
            )));
        }
        for file in &stamp.files {
            let path = entry.join(&file.path);
            let meta =
                std::fs::symlink_metadata(&path).map_err(|e| Error::io("cannot read", &path, e))?;
            if !meta.is_file() || meta.len() != file.size || mtime_ns(&meta) != file.mtime_ns {
                return Err(Error::Plugin(format!(
                    "{} changed since it was installed ({} bytes, {} expected)",
                    path.display(),
                    meta.len(),
                    file.size
                )));
            }
            if rehash && wheel::record_sha256_of_file(&path)? != file.sha256 {
                return Err(Error::Plugin(format!(
                    "{}: its sha256 differs from the wheel's RECORD",
                    path.display()
                )));
            }
        }
        let plugin = entry.join(package.plugin_in_wheel);
        let listed = stamp
            .files
            .iter()
            .find(|f| f.path == package.plugin_in_wheel);
        let Some(listed) = listed else {
            return Err(Error::Plugin(format!(
                "{}: its stamp lists no {}",
                entry.display(),
                package.plugin_in_wheel
            )));
        };
        verified().lock().unwrap_or_else(|e| e.into_inner()).insert(
            plugin.clone(),
            format!("wheel-sha256:{}:{}", pin.sha256, listed.size),
        );
        Ok(plugin)
    }

    /// Takes the entry's lock file (blocking), saying so on stderr when
    /// another process holds it.
    fn lock(&self, package: &Package) -> Result<File> {
        std::fs::create_dir_all(&self.root).map_err(|e| {
            Error::Plugin(format!(
                "cannot create xlafn's cache folder {}: {e}. Set XDG_CACHE_HOME to a writable \
                 folder, or set XLAFN_PJRT_PLUGIN to a PJRT plugin .so",
                self.root.display()
            ))
        })?;
        let path = self.root.join(format!("{}.lock", package.entry_name()));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&path)
            .map_err(|e| Error::io("cannot open the lock file", &path, e))?;
        let meta = file
            .metadata()
            .map_err(|e| Error::io("cannot read", &path, e))?;
        if !meta.is_file() {
            return Err(Error::Plugin(format!(
                "{} is not a regular file; remove it",
                path.display()
            )));
        }
        match file.try_lock() {
            Ok(()) => Ok(file),
            Err(std::fs::TryLockError::WouldBlock) => {
                eprintln!(
                    "xlafn: waiting for another process installing {} into {}",
                    package.requirement(),
                    self.root.display()
                );
                file.lock()
                    .map_err(|e| Error::io("cannot lock", &path, e))?;
                Ok(file)
            }
            Err(std::fs::TryLockError::Error(e)) => Err(Error::io("cannot lock", &path, e)),
        }
    }

    /// A new, empty folder of this install's own beside the entry.
    fn work_dir(&self, package: &Package) -> Result<PathBuf> {
        let work = self.root.join(format!(
            "{}.partial-{}",
            package.entry_name(),
            files::unpredictable_suffix()
        ));
        std::fs::create_dir(&work).map_err(|e| Error::io("cannot create", &work, e))?;
        Ok(work)
    }

    /// Under the lock: what killed installs left behind.
    fn clean_leftovers(&self, package: &Package) {
        let name = package.entry_name();
        let Ok(dir) = std::fs::read_dir(&self.root) else {
            return;
        };
        for item in dir.flatten() {
            let file_name = item.file_name();
            let file_name = file_name.to_string_lossy();
            let leftover = [".partial-", ".broken-"]
                .iter()
                .any(|kind| file_name.starts_with(&format!("{name}{kind}")));
            if leftover {
                // remove_dir_all removes a link itself, never its target.
                let _ = std::fs::remove_dir_all(item.path());
            }
        }
        // Wheel copies a killed `install_from` left half-written.
        if let Ok(dir) = std::fs::read_dir(self.root.join("wheels")) {
            for item in dir.flatten() {
                if item.file_name().to_string_lossy().ends_with(".tmp") {
                    let _ = std::fs::remove_file(item.path());
                }
            }
        }
    }
}

/// Where a verified wheel goes once its files are unpacked.
#[derive(Clone, Copy)]
enum Keep {
    /// It is the cache's own copy already.
    AlreadyKept,
    /// It is a download in the install's folder: moved.
    Move,
    /// It is the user's file: copied.
    Copy,
}

fn mtime_ns(meta: &std::fs::Metadata) -> i128 {
    i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec())
}

fn write_synced(path: &Path, bytes: &[u8]) -> Result<()> {
    let mut file = files::create_new_file(path)?;
    file.write_all(bytes)
        .and_then(|()| file.sync_all())
        .map_err(|e| Error::io("cannot write", path, e))
}

fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}
