//! Fetching a pinned wheel with pip (`python3 -m pip download`), which
//! brings the user's index, proxy and certificate settings with it. On a
//! terminal pip shows its own progress bar (on stderr, so a program's
//! stdout stays its own); elsewhere it runs quietly and its messages are
//! kept for the error.

use super::{Package, Pin, wheel};
use crate::error::{Error, Result};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The most of pip's error output an error message repeats.
const MAX_PIP_MESSAGE_CHARS: usize = 4000;

/// Downloads the wheels `pins` of `package` into `work` and returns
/// their paths once each one's sha256 is the pinned one. One pip call per
/// wheel, each for that wheel's own platform tag, so pip can never pick
/// another build of the same version.
pub(super) fn pip_download(
    package: &Package,
    pins: &[Pin],
    work: &Path,
    cache: &Path,
) -> Result<Vec<PathBuf>> {
    let download = work.join("download");
    std::fs::create_dir(&download).map_err(|e| Error::io("cannot create", &download, e))?;
    let what = match pins {
        [one] => one.file_name.clone(),
        many => format!("{} wheels", many.len()),
    };
    eprintln!(
        "xlafn: fetching {} ({}, {what}) with pip into {} (once; XLAFN_OFFLINE=1 forbids this)",
        package.what,
        package.requirement(),
        cache.display()
    );
    pins.iter()
        .map(|pin| download_one(package, pin, &download))
        .collect()
}

fn download_one(package: &Package, pin: &Pin, download: &Path) -> Result<PathBuf> {
    let terminal = std::io::stderr().is_terminal();
    let mut command = Command::new("python3");
    command
        .args(["-m", "pip", "download", "--no-deps", "--only-binary=:all:"])
        .args([
            "--disable-pip-version-check",
            "--no-input",
            "--platform",
            pin.platform(),
        ])
        .arg("-d")
        .arg(download)
        .arg(pin.requirement())
        .stdin(Stdio::null());
    if terminal {
        command
            .stdout(Stdio::from(std::io::stderr()))
            .stderr(Stdio::inherit());
    } else {
        command
            .arg("-q")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
    }
    let output = command.output().map_err(|e| {
        Error::Plugin(super::ways_out(
            package,
            &format!("python3 could not be started to fetch it ({e})"),
        ))
    })?;
    if !output.status.success() {
        let said = String::from_utf8_lossy(&output.stderr);
        let said = tail(said.trim(), MAX_PIP_MESSAGE_CHARS);
        let why = if said.contains("No module named pip") {
            "python3 has no pip to fetch it with (Debian: apt-get install python3-pip)".to_string()
        } else {
            format!(
                "`python3 -m pip download {}` failed ({}){}",
                pin.requirement(),
                output.status,
                if said.is_empty() {
                    String::new()
                } else {
                    format!(":\n{said}\n")
                }
            )
        };
        return Err(Error::Plugin(super::ways_out(package, &why)));
    }
    let fetched = download.join(&pin.file_name);
    if !fetched.is_file() {
        let left: Vec<String> = std::fs::read_dir(download)
            .into_iter()
            .flatten()
            .flatten()
            .take(4)
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        return Err(Error::Plugin(format!(
            "pip fetched {left:?}, not the pinned {}; refusing it",
            pin.file_name
        )));
    }
    wheel::check_pinned(&fetched, pin, package)?;
    Ok(fetched)
}

/// The last `max` characters of `text`.
fn tail(text: &str, max: usize) -> &str {
    match text.char_indices().rev().nth(max) {
        Some((i, _)) => &text[i..],
        None => text,
    }
}
