//! Build script: locate (or fetch) the PJRT CPU plugin and generate the Rust
//! bindings from the plugin's own `pjrt_c_api.h`.
//!
//! The plugin checks every argument struct's size, so bindings must come from
//! the header shipped with the plugin, never from a copy of another version.
//! For the pinned wheel's header (PJRT C API 0.81) the bindings are shipped
//! pre-generated (`third_party/pjrt_bindings_0_81.rs`) and used when the
//! header's sha256 matches `third_party/pjrt_c_api_0_81.h.sha256`, so a
//! build needs no libclang; any other header goes through bindgen, which
//! only the `bindgen` cargo feature brings in.
//! The plugin's path is baked into the crate as its default
//! (`XLAFN_DEFAULT_PJRT_PLUGIN`); `XLAFN_PJRT_PLUGIN` overrides it at run time.
//! A documentation build (`DOCS_RS` set, no network) fetches nothing and
//! uses the pre-generated bindings; such a build cannot run programs.

#[path = "build/plugin.rs"]
mod plugin;

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/plugin.rs");
    println!("cargo:rerun-if-changed=third_party/xla-cpu-pjrt.sha256");
    println!("cargo:rerun-if-changed={PREGENERATED}");
    println!("cargo:rerun-if-changed={PREGENERATED_HEADER_SHA256}");
    for var in [
        "XLAFN_PJRT_PLUGIN",
        "XLAFN_PJRT_HEADER",
        "XDG_CACHE_HOME",
        "XLAFN_CUDA_PLUGIN",
        "XLAFN_DEVICE",
        "XLAFN_GPU_CHECK",
        "DOCS_RS",
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
    if std::env::var_os("DOCS_RS").is_some() {
        println!("cargo:rustc-env=XLAFN_DEFAULT_PJRT_PLUGIN=");
        println!("cargo:rustc-env=XLAFN_DEFAULT_PJRT_PLUGIN_SHA256=");
        write_pregenerated(&manifest_dir);
        return;
    }
    let located = plugin::locate(&manifest_dir).unwrap_or_else(|msg| fail(&msg));
    println!("cargo:rerun-if-changed={}", located.header.display());
    println!(
        "cargo:rustc-env=XLAFN_DEFAULT_PJRT_PLUGIN={}",
        located.plugin.display()
    );
    println!(
        "cargo:rustc-env=XLAFN_DEFAULT_PJRT_PLUGIN_SHA256={}",
        located.wheel_sha256.as_deref().unwrap_or("")
    );
    if header_is_pinned(&manifest_dir, &located.header) {
        write_pregenerated(&manifest_dir);
    } else {
        generate_bindings(&located.header);
    }
}

const PREGENERATED: &str = "third_party/pjrt_bindings_0_81.rs";
const PREGENERATED_HEADER_SHA256: &str = "third_party/pjrt_c_api_0_81.h.sha256";

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
