//! Build script: the PJRT bindings, and the cfgs that select the GPU
//! tests. It needs no plugin, no Python and no network: the plugin is
//! found (and fetched) at run time by `runtime::plugin_store`.
//!
//! The bindings for the pinned PJRT C API 0.81 header ship pre-generated
//! (`third_party/pjrt_bindings_0_81.rs`; the header's sha256 is in
//! `third_party/pjrt_c_api_0_81.h.sha256`). Only a build for another
//! plugin's header generates its own: `XLAFN_PJRT_HEADER` names the header
//! and the `bindgen` feature (which needs libclang) generates from it.
//! The script watches only files of this package and the variables it
//! reads, so a second build with nothing changed recompiles nothing.

use std::path::PathBuf;

const PREGENERATED: &str = "third_party/pjrt_bindings_0_81.rs";
const PREGENERATED_HEADER_SHA256: &str = "third_party/pjrt_c_api_0_81.h.sha256";

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed={PREGENERATED}");
    println!("cargo:rerun-if-changed={PREGENERATED_HEADER_SHA256}");
    for var in [
        "XLAFN_PJRT_HEADER",
        "XLAFN_CUDA_PLUGIN",
        "XLAFN_DEVICE",
        "XLAFN_GPU_CHECK",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // CUDA tests run only where a CUDA plugin is named; elsewhere they are
    // compiled but marked ignored.
    println!("cargo::rustc-check-cfg=cfg(xlafn_cuda)");
    if std::env::var_os("XLAFN_CUDA_PLUGIN").is_some_and(|p| !p.is_empty()) {
        println!("cargo:rustc-cfg=xlafn_cuda");
    }
    // `XLAFN_DEVICE=cuda cargo test` runs the suite on the GPU; the tests
    // that need the CPU plugin (host callbacks, its 4 devices) are then
    // marked ignored with their reason instead of failing.
    println!("cargo::rustc-check-cfg=cfg(xlafn_device_cuda)");
    if matches!(
        std::env::var("XLAFN_DEVICE").as_deref().map(str::trim),
        Ok("cuda" | "gpu")
    ) {
        println!("cargo:rustc-cfg=xlafn_device_cuda");
    }
    // `scripts/gpu-check.sh` builds the GPU check (tests/gpu_check.rs),
    // which is empty in every other build.
    println!("cargo::rustc-check-cfg=cfg(xlafn_gpu_check)");
    if std::env::var_os("XLAFN_GPU_CHECK").is_some_and(|v| v == "1") {
        println!("cargo:rustc-cfg=xlafn_gpu_check");
    }
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    match std::env::var_os("XLAFN_PJRT_HEADER").filter(|h| !h.is_empty()) {
        Some(header) => {
            let header = PathBuf::from(header);
            println!("cargo:rerun-if-changed={}", header.display());
            if header_is_pinned(&manifest_dir, &header) {
                write_pregenerated(&manifest_dir);
            } else {
                generate_bindings(&header);
            }
        }
        None => write_pregenerated(&manifest_dir),
    }
}

fn out_file() -> PathBuf {
    PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("pjrt_bindings.rs")
}

/// Whether `header` is the one the shipped bindings were generated from.
fn header_is_pinned(manifest_dir: &std::path::Path, header: &std::path::Path) -> bool {
    use sha2::{Digest, Sha256};
    let Ok(bytes) = std::fs::read(header) else {
        return false;
    };
    let actual: String = Sha256::digest(&bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::read_to_string(manifest_dir.join(PREGENERATED_HEADER_SHA256))
        .is_ok_and(|pin| pin.split_whitespace().next() == Some(actual.as_str()))
}

fn write_pregenerated(manifest_dir: &std::path::Path) {
    let from = manifest_dir.join(PREGENERATED);
    std::fs::copy(&from, out_file()).unwrap_or_else(|e| {
        fail(&format!("cannot copy {}: {e}", from.display()));
    });
}

#[cfg(not(feature = "bindgen"))]
fn generate_bindings(header: &std::path::Path) {
    fail(&format!(
        "{} is not the pinned PJRT C API 0.81 header ({PREGENERATED_HEADER_SHA256}), so its \
         bindings must be generated, and that needs bindgen: enable xlafn's `bindgen` feature \
         (`cargo build --features bindgen`, or `features = [\"bindgen\"]` on the xlafn \
         dependency); bindgen also needs libclang.",
        header.display()
    ))
}

#[cfg(feature = "bindgen")]
fn generate_bindings(header: &std::path::Path) {
    let out = out_file();
    let builder = bindgen::Builder::default()
        .header(header.to_string_lossy())
        .allowlist_type("PJRT_.*")
        .allowlist_var("PJRT_.*")
        .allowlist_function("PJRT_.*")
        .default_enum_style(bindgen::EnumVariation::Consts)
        .prepend_enum_name(false)
        .derive_default(true)
        .layout_tests(false)
        .generate_comments(false);
    // bindgen panics when libclang cannot be loaded; turn that into advice.
    let generated =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()));
    match generated {
        Ok(Ok(bindings)) => bindings.write_to_file(&out).unwrap_or_else(|e| {
            fail(&format!("cannot write {}: {e}", out.display()));
        }),
        Ok(Err(e)) => fail(&format!("bindgen failed on {}: {e}", header.display())),
        Err(_) => fail(
            "bindgen could not load libclang. Install it with `scripts/setup.sh` (it runs \
             `apt-get install libclang-dev` on Debian), or set LIBCLANG_PATH to a folder holding \
             libclang.so.",
        ),
    }
}

fn fail(msg: &str) -> ! {
    eprintln!("\nxlafn build error: {msg}\n");
    std::process::exit(1);
}
