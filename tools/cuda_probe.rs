//! Checks a CUDA PJRT plugin step by step, with or without a GPU: loads it,
//! prints the PJRT C API version it speaks, then makes a CUDA client and
//! lists its devices, or prints why it could not (no driver, no GPU).
//!
//! `cargo run --example cuda_probe -- /path/to/xla_gpu_pjrt.so`
//! (without an argument: `XLAFN_CUDA_PLUGIN`, else the plugin
//! `scripts/fetch-cuda-plugin.sh` fetched, CUDA 13 before CUDA 12).
//! Exits 0 only when the client has devices.

use std::path::PathBuf;
use std::process::ExitCode;
use xlafn::runtime::{Client, Plugin};

fn plugin_path() -> Option<PathBuf> {
    if let Some(p) = std::env::args_os().nth(1) {
        return Some(PathBuf::from(p));
    }
    if let Some(p) = std::env::var_os("XLAFN_CUDA_PLUGIN").filter(|p| !p.is_empty()) {
        return Some(PathBuf::from(p));
    }
    let cache = match std::env::var_os("XDG_CACHE_HOME").filter(|v| !v.is_empty()) {
        Some(x) => PathBuf::from(x),
        None => PathBuf::from(std::env::var_os("HOME")?).join(".cache"),
    };
    ["13", "12"]
        .iter()
        .map(|v| {
            cache.join(format!(
                "xlafn/xla-cuda{v}-pjrt-0.0.1/xla_plugins/xla_cuda{v}_pjrt/xla_gpu_pjrt.so"
            ))
        })
        .find(|p| p.is_file())
}

fn main() -> ExitCode {
    let Some(path) = plugin_path() else {
        eprintln!(
            "no CUDA plugin: pass its path, set XLAFN_CUDA_PLUGIN, or run \
             scripts/fetch-cuda-plugin.sh --with-runtime"
        );
        return ExitCode::FAILURE;
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
