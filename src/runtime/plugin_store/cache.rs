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

/// A wheel an entry was unpacked from.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
struct StampWheel {
    file_name: String,
    sha256: String,
}

#[derive(Serialize, Deserialize, Debug)]
struct Stamp {
    /// The plugin's wheel first, then its libraries'.
    wheels: Vec<StampWheel>,
    files: Vec<StampFile>,
}

fn stamp_wheels(pins: &[Pin]) -> Vec<StampWheel> {
    pins.iter()
        .map(|p| StampWheel {
            file_name: p.file_name.clone(),
            sha256: p.sha256.clone(),
        })
        .collect()
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
        let wheels = package.wheels()?;
        if let Ok(path) = self.check(package, &wheels, false) {
            return Ok(path);
        }
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        // Another process (or thread) may have installed it meanwhile.
        if let Ok(path) = self.check(package, &wheels, false) {
            return Ok(path);
        }
        self.repair_locked(package, &wheels, offline)
    }

    /// [`Store::ensure`] with every file rehashed, not just stat'ed.
    pub(crate) fn verify(&self, package: &Package, offline: bool) -> Result<PathBuf> {
        let wheels = package.wheels()?;
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        match self.check(package, &wheels, true) {
            Ok(path) => Ok(path),
            Err(_) => self.repair_locked(package, &wheels, offline),
        }
    }

    /// Installs from wheel files the user has: one wheel file, or a folder
    /// holding them (copied into `wheels/` once verified). What `source`
    /// lacks must be kept in `wheels/` already; nothing is fetched. A sound
    /// entry already there is kept.
    pub(crate) fn install_from(&self, package: &Package, source: &Path) -> Result<PathBuf> {
        let wheels = package.wheels()?;
        let given = given_wheels(package, &wheels, source)?;
        let _in_process = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
        let _lock = self.lock(package)?;
        if let Ok(path) = self.check(package, &wheels, true) {
            return Ok(path);
        }
        self.clean_leftovers(package);
        let mut sources = Vec::with_capacity(wheels.len());
        let mut missing = Vec::new();
        for pin in &wheels {
            match given.iter().find(|(p, _)| p == pin) {
                Some((_, path)) => sources.push((pin.clone(), path.clone(), Keep::Copy)),
                None => match self.sound_kept_wheel(package, pin) {
                    Some(kept) => sources.push((pin.clone(), kept, Keep::AlreadyKept)),
                    None => missing.push(pin.file_name.clone()),
                },
            }
        }
        if !missing.is_empty() {
            return Err(Error::Plugin(format!(
                "{} lacks {} of the wheels {} is made of, and xlafn's cache does not keep them: \
                 {}",
                source.display(),
                missing.len(),
                package.requirement(),
                missing.join(", ")
            )));
        }
        self.install_locked(package, &wheels, &sources)
    }

    /// The kept copy of `pin` in `wheels/`, if it is there and has the
    /// pinned sha256 (a damaged copy is removed).
    fn sound_kept_wheel(&self, package: &Package, pin: &Pin) -> Option<PathBuf> {
        let kept = self.kept_wheel(pin);
        if !kept.is_file() {
            return None;
        }
        match wheel::check_pinned(&kept, pin, package) {
            Ok(()) => Some(kept),
            Err(_) => {
                let _ = std::fs::remove_file(&kept);
                None
            }
        }
    }

    /// Under the lock: install from the kept wheels, fetching (online)
    /// those not kept.
    fn repair_locked(&self, package: &Package, wheels: &[Pin], offline: bool) -> Result<PathBuf> {
        self.clean_leftovers(package);
        let mut sources = Vec::with_capacity(wheels.len());
        let mut missing = Vec::new();
        for pin in wheels {
            match self.sound_kept_wheel(package, pin) {
                Some(kept) => sources.push((pin.clone(), kept, Keep::AlreadyKept)),
                None => missing.push(pin.clone()),
            }
        }
        if missing.is_empty() {
            return self.install_locked(package, wheels, &sources);
        }
        if offline {
            return Err(Error::Plugin(super::ways_out(
                package,
                "XLAFN_OFFLINE is set, so it is not fetched",
            )));
        }
        let work = self.work_dir(package)?;
        let result = fetch::pip_download(package, &missing, &work, &self.root).and_then(|paths| {
            sources.extend(
                missing
                    .iter()
                    .cloned()
                    .zip(paths)
                    .map(|(pin, path)| (pin, path, Keep::Move)),
            );
            self.install_locked(package, wheels, &sources)
        });
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    /// Under the lock: unpack the wheels (each already checked against
    /// its pin) into a new folder, stamp it, keep the wheels, and rename
    /// the folder over the entry.
    fn install_locked(
        &self,
        package: &Package,
        wheels: &[Pin],
        sources: &[(Pin, PathBuf, Keep)],
    ) -> Result<PathBuf> {
        let work = self.work_dir(package)?;
        let result = self.install_into(package, wheels, sources, &work);
        let _ = std::fs::remove_dir_all(&work);
        result
    }

    fn install_into(
        &self,
        package: &Package,
        wheels: &[Pin],
        sources: &[(Pin, PathBuf, Keep)],
        work: &Path,
    ) -> Result<PathBuf> {
        let unpacked = work.join("unpacked");
        std::fs::create_dir(&unpacked).map_err(|e| Error::io("cannot create", &unpacked, e))?;
        let mut seen = wheel::UnpackedPaths::new();
        let mut installed = Vec::new();
        for (pin, path, _) in sources {
            installed.extend(wheel::unpack_verified(path, pin, &unpacked, &mut seen)?);
        }
        if !installed.iter().any(|f| f.path == package.plugin_in_wheel) {
            return Err(Error::Plugin(format!(
                "{} holds no {}: it is not the {} wheel",
                sources[0].1.display(),
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
            wheels: stamp_wheels(wheels),
            files,
        };
        let text = serde_json::to_vec_pretty(&stamp)
            .map_err(|e| Error::Plugin(format!("cannot encode the plugin stamp: {e}")))?;
        write_synced(&unpacked.join(STAMP), &text)?;
        for (pin, path, keep) in sources {
            self.keep_wheel(pin, path, *keep)?;
        }
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
        self.check(package, wheels, false)
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

    /// The entry's plugin path if its stamp names these wheels and every
    /// file it lists is still a regular file of its size and time (and,
    /// with `rehash`, its sha256).
    fn check(&self, package: &Package, wheels: &[Pin], rehash: bool) -> Result<PathBuf> {
        let entry = self.entry(package);
        let stamp: Stamp = serde_json::from_slice(&files::read_limited(
            &entry.join(STAMP),
            MAX_STAMP_BYTES,
            false,
        )?)
        .map_err(|e| Error::Plugin(format!("{}: bad stamp: {e}", entry.display())))?;
        if stamp.wheels != stamp_wheels(wheels) {
            return Err(Error::Plugin(format!(
                "{} holds other wheels than the pinned {}",
                entry.display(),
                package.requirement()
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
            format!("wheel-sha256:{}:{}", wheels[0].sha256, listed.size),
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

/// The pinned wheels `source` provides: a folder's files named as pinned
/// (each checked), or one wheel file, whichever pin its sha256 is.
fn given_wheels(package: &Package, wheels: &[Pin], source: &Path) -> Result<Vec<(Pin, PathBuf)>> {
    if !source.is_dir() {
        let sha = wheel::sha256_of_file(source)?;
        return match wheels.iter().find(|p| p.sha256 == sha) {
            Some(pin) => Ok(vec![(pin.clone(), source.to_path_buf())]),
            // Its message says which wheel it is, if any.
            None => wheel::check_pinned(source, &wheels[0], package).map(|()| Vec::new()),
        };
    }
    let mut given = Vec::new();
    for pin in wheels {
        let path = source.join(&pin.file_name);
        if path.is_file() {
            wheel::check_pinned(&path, pin, package)?;
            given.push((pin.clone(), path));
        }
    }
    if given.is_empty() {
        return Err(Error::Plugin(format!(
            "{} holds no {}, the pinned wheel for this platform",
            source.display(),
            wheels[0].file_name
        )));
    }
    Ok(given)
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

#[cfg(test)]
mod tests {
    //! The store with several wheels per entry (a CUDA plugin and its
    //! libraries), on small wheels made here; `tests/plugin_fetch.rs`
    //! drives the real CPU wheel through pip.

    use super::*;
    use base64::Engine as _;
    use sha2::{Digest, Sha256};
    use std::os::unix::fs::PermissionsExt;

    /// A wheel of `files` (path, contents, mode) with its RECORD.
    fn make_wheel(dir: &Path, name: &str, version: &str, files: &[(&str, &[u8], u32)]) -> Pin {
        let arch = std::env::consts::ARCH;
        let file_name = format!("{name}-{version}-py3-none-manylinux_2_27_{arch}.whl");
        let path = dir.join(&file_name);
        let mut zip = zip::ZipWriter::new(File::create(&path).unwrap());
        let mut record = String::new();
        for (entry, bytes, mode) in files {
            let options = zip::write::SimpleFileOptions::default().unix_permissions(*mode);
            zip.start_file(*entry, options).unwrap();
            zip.write_all(bytes).unwrap();
            let digest =
                base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(Sha256::digest(bytes));
            record += &format!("{entry},sha256={digest},{}\n", bytes.len());
        }
        let record_name = format!("{name}-{version}.dist-info/RECORD");
        record += &format!("{record_name},,\n");
        zip.start_file(record_name, zip::write::SimpleFileOptions::default())
            .unwrap();
        zip.write_all(record.as_bytes()).unwrap();
        zip.finish().unwrap();
        Pin {
            sha256: wheel::sha256_of_file(&path).unwrap(),
            file_name,
        }
    }

    fn pins_text(pins: &[&Pin]) -> &'static str {
        let text: String = pins
            .iter()
            .map(|p| format!("{}  {}\n", p.sha256, p.file_name))
            .collect();
        Box::leak(text.into_boxed_str())
    }

    fn package(plugin: &Pin, runtime: &[&Pin]) -> Package {
        Package {
            distribution: "fake-pjrt",
            version: "1.0",
            plugin_in_wheel: "fake_plugins/plugin.so",
            pins: pins_text(&[plugin]),
            runtime: pins_text(runtime),
            preload: &[],
            beside_executable: "plugin.so",
            env_var: "XLAFN_CUDA_PLUGIN",
            fetch_command: "xlafn fetch --cuda fake",
            fetch_call: "fetch_cuda_plugin(..)",
            install_call: "install_cuda_plugin",
            what: "a test plugin",
        }
    }

    const SHARED: &[u8] = b"# namespace package\n";

    struct Fixture {
        _dir: tempfile::TempDir,
        wheels: PathBuf,
        store: Store,
        plugin: Pin,
        a: Pin,
        b: Pin,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let wheels = dir.path().join("given");
        std::fs::create_dir(&wheels).unwrap();
        let plugin = make_wheel(
            &wheels,
            "fake_pjrt",
            "1.0",
            &[
                ("fake_plugins/plugin.so", b"not really a library", 0o644),
                ("nvidia/__init__.py", SHARED, 0o644),
            ],
        );
        let a = make_wheel(
            &wheels,
            "nvidia_a",
            "2.0",
            &[
                ("nvidia/__init__.py", SHARED, 0o644),
                ("nvidia/a/lib/liba.so.1", &[7u8; 5000], 0o644),
                ("nvidia/a/bin/ptxas", b"#!/bin/sh\n", 0o755),
            ],
        );
        let b = make_wheel(
            &wheels,
            "nvidia_b",
            "3.0",
            &[("nvidia/b/lib/libb.so", b"b", 0o644)],
        );
        let store = Store {
            root: dir.path().join("cache"),
        };
        Fixture {
            _dir: dir,
            wheels,
            store,
            plugin,
            a,
            b,
        }
    }

    #[test]
    fn a_plugin_and_its_libraries_install_together_and_are_repaired_offline() {
        let f = fixture();
        let package = package(&f.plugin, &[&f.a, &f.b]);
        let plugin = f.store.install_from(&package, &f.wheels).unwrap();
        let entry = plugin.parent().unwrap().parent().unwrap();
        assert_eq!(std::fs::read(&plugin).unwrap(), b"not really a library");
        assert_eq!(
            std::fs::read(entry.join("nvidia/__init__.py")).unwrap(),
            SHARED
        );
        assert_eq!(
            std::fs::read(entry.join("nvidia/b/lib/libb.so")).unwrap(),
            b"b"
        );
        let mode = |p: &str| {
            std::fs::metadata(entry.join(p))
                .unwrap()
                .permissions()
                .mode()
        };
        assert_eq!(
            mode("nvidia/a/bin/ptxas") & 0o111,
            0o111,
            "ptxas stays executable"
        );
        assert_eq!(mode("nvidia/a/lib/liba.so.1") & 0o111, 0);
        // The stamp lists the shared file once, and all three wheels.
        let stamp: Stamp =
            serde_json::from_slice(&std::fs::read(entry.join(STAMP)).unwrap()).unwrap();
        assert_eq!(stamp.wheels.len(), 3);
        let shared = stamp
            .files
            .iter()
            .filter(|f| f.path == "nvidia/__init__.py");
        assert_eq!(shared.count(), 1);
        assert_eq!(stamp.files.len(), 5);

        // A truncated library is noticed and repaired from the kept wheels,
        // with no network (offline).
        std::fs::write(entry.join("nvidia/a/lib/liba.so.1"), [7u8; 10]).unwrap();
        assert!(
            f.store
                .check(&package, &package.wheels().unwrap(), false)
                .is_err()
        );
        let again = f.store.ensure(&package, true).unwrap();
        assert_eq!(again, plugin);
        assert_eq!(
            std::fs::read(entry.join("nvidia/a/lib/liba.so.1")).unwrap(),
            [7u8; 5000]
        );
        // verify rehashes: same size and time but other bytes is caught.
        let lib = entry.join("nvidia/b/lib/libb.so");
        let time = std::fs::metadata(&lib).unwrap().modified().unwrap();
        std::fs::write(&lib, b"c").unwrap();
        File::options()
            .write(true)
            .open(&lib)
            .unwrap()
            .set_modified(time)
            .unwrap();
        assert!(
            f.store.ensure(&package, true).is_ok(),
            "a stat alone passes"
        );
        f.store.verify(&package, true).unwrap();
        assert_eq!(std::fs::read(&lib).unwrap(), b"b");

        // Without a kept wheel, offline, the error lists the ways out.
        std::fs::remove_file(f.store.kept_wheel(&f.b)).unwrap();
        std::fs::remove_file(&lib).unwrap();
        let e = f.store.ensure(&package, true).unwrap_err().to_string();
        assert!(e.contains("XLAFN_OFFLINE") && e.contains("--wheel"), "{e}");
        assert!(e.contains("the 3 wheels"), "{e}");
    }

    #[test]
    fn a_folder_missing_a_library_wheel_names_it() {
        let f = fixture();
        let package = package(&f.plugin, &[&f.a, &f.b]);
        std::fs::remove_file(f.wheels.join(&f.b.file_name)).unwrap();
        let e = f
            .store
            .install_from(&package, &f.wheels)
            .unwrap_err()
            .to_string();
        assert!(e.contains(&f.b.file_name) && e.contains("lacks 1"), "{e}");
        // Nothing half-installed is left.
        assert!(
            f.store
                .check(&package, &package.wheels().unwrap(), false)
                .is_err()
        );
    }

    #[test]
    fn two_wheels_that_ship_one_path_with_different_contents_are_refused() {
        let f = fixture();
        let clash = make_wheel(
            &f.wheels,
            "nvidia_c",
            "4.0",
            &[("nvidia/__init__.py", b"something else", 0o644)],
        );
        let package = package(&f.plugin, &[&f.a, &clash]);
        let e = f
            .store
            .install_from(&package, &f.wheels)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nvidia/__init__.py") && e.contains("differs"),
            "{e}"
        );
        let leftovers: Vec<_> = std::fs::read_dir(&f.store.root)
            .unwrap()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.contains(".partial-") || n == "fake-pjrt-1.0")
            .collect();
        assert!(leftovers.is_empty(), "{leftovers:?}");
    }

    #[test]
    fn a_single_wheel_file_of_the_set_installs_with_the_rest_kept() {
        let f = fixture();
        let package = package(&f.plugin, &[&f.a, &f.b]);
        f.store.install_from(&package, &f.wheels).unwrap();
        std::fs::remove_dir_all(f.store.entry(&package)).unwrap();
        // One file given; the two others come from `wheels/`.
        let path = f
            .store
            .install_from(&package, &f.wheels.join(&f.a.file_name))
            .unwrap();
        assert!(path.is_file());
        // A file that is no pinned wheel is refused with its digest.
        let other = f.wheels.join("other.whl");
        std::fs::write(&other, b"zip?").unwrap();
        let e = f
            .store
            .install_from(&package, &other)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not the pinned"), "{e}");
    }
}
