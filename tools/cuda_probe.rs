//! Checks a CUDA PJRT plugin step by step, with or without a GPU: loads it,
//! prints the PJRT C API version it speaks, then makes a CUDA client and
//! lists its devices, or prints why it could not (no driver, no GPU).
//!
//! `cargo run --example cuda_probe -- /path/to/xla_cuda_plugin.so`
//! (without an argument: the plugin `XLAFN_DEVICE=cuda` would load:
//! `XLAFN_CUDA_PLUGIN`, else the plugin store's, fetched with its CUDA
//! libraries when missing unless `XLAFN_OFFLINE` is set).
//! Exits 0 only when the client has devices.

use std::path::PathBuf;
use std::process::ExitCode;
use xlafn::runtime::{Client, Plugin};

fn plugin_path() -> xlafn::Result<PathBuf> {
    match std::env::args_os().nth(1) {
        Some(p) => Ok(PathBuf::from(p)),
        None => xlafn::runtime::default_cuda_plugin_path(),
    }
}

fn main() -> ExitCode {
    let path = match plugin_path() {
        Ok(path) => path,
        Err(e) => {
            eprintln!("no CUDA plugin: pass its path, or: {e}");
            return ExitCode::FAILURE;
        }
    };
    println!("plugin: {}", path.display());
    let plugin = match Plugin::load(&path) {
        Ok(p) => p,
        Err(e) => {
            println!("load failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let (major, minor) = plugin.version();
    println!("PJRT C API: {major}.{minor}");
    match Client::cuda(&path) {
        Ok(client) => {
            println!(
                "platform: {}, {} device(s):",
                client.platform_name(),
                client.devices().len()
            );
            for d in client.devices() {
                println!("  {d}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("no CUDA client: {e}");
            ExitCode::FAILURE
        }
    }
}
