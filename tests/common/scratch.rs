//! Scratch directories for tests, removed when dropped (also when the test
//! panics), so a test run leaves nothing behind in the system's temporary
//! directory. Each is unique (`tempfile`), so parallel tests and parallel
//! runs never share one.
//!
//! Use with `#[path = "common/scratch.rs"] mod scratch;`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// A fresh empty directory named `xlafn-<tag>-…`; it and everything in it
/// are deleted on drop. Derefs to its [`Path`].
pub struct ScratchDir(tempfile::TempDir);

/// Makes a [`ScratchDir`] whose name starts with `xlafn-<tag>-`.
pub fn scratch_dir(tag: &str) -> ScratchDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("xlafn-{tag}-"))
        .tempdir()
        .expect("create a scratch directory");
    ScratchDir(dir)
}

impl ScratchDir {
    /// The path, owned (for values that outlive a borrow).
    pub fn to_path_buf(&self) -> PathBuf {
        self.0.path().to_path_buf()
    }
}

impl std::ops::Deref for ScratchDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for ScratchDir {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<std::ffi::OsStr> for ScratchDir {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.path().as_os_str()
    }
}
