//! The `xlafn` command-line tool the tests run: cargo's build of it, or
//! the one `XLAFN_TEST_CLI` names where a test binary runs without its
//! target folder (the GPU check carries both binaries to a GPU machine).
//!
//! Use with `#[path = "common/tool.rs"] mod tool;`.

#![allow(dead_code)]

use std::path::PathBuf;

/// The path of the `xlafn` tool to run.
pub fn xlafn_tool() -> PathBuf {
    std::env::var_os("XLAFN_TEST_CLI")
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_xlafn")))
}
