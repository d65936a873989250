//! Running a call that used to hang (a FIFO opened and waited on, a chart
//! whose tick placement never ended) so that a regression fails the test
//! instead of hanging the suite: [`within`] runs it on a thread and gives
//! up waiting after a deadline. [`mkfifo`] makes a FIFO to open.
//!
//! Use with `#[path = "common/bounded.rs"] mod bounded;`.

#![allow(dead_code)]

use std::path::Path;
use std::sync::mpsc;
use std::time::Duration;

/// `f()`, which must return within `seconds`; a panic naming `what`
/// otherwise (the thread is left behind: the test process ends soon).
pub fn within<T: Send + 'static>(
    seconds: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = send.send(f());
    });
    match receive.recv_timeout(Duration::from_secs(seconds)) {
        Ok(value) => value,
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("{what} did not return within {seconds} s (it hangs)")
        }
        Err(mpsc::RecvTimeoutError::Disconnected) => panic!("{what} panicked"),
    }
}

/// Makes a FIFO at `path` with the `mkfifo` tool; false where there is
/// none (the caller then skips its FIFO checks).
pub fn mkfifo(path: &Path) -> bool {
    std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .is_ok_and(|s| s.success())
}

/// Whether `path` is a FIFO (not following a final link).
pub fn is_fifo(path: &Path) -> bool {
    use std::os::unix::fs::FileTypeExt;
    std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_fifo())
}
