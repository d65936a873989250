//! Build script: locate (or fetch) the PJRT CPU plugin and generate the Rust
//! bindings from the plugin's own `pjrt_c_api.h`.
//!
//! The plugin checks every argument struct's size, so bindings must come from
//! the header shipped with the plugin, never from a copy of another version.
//! The plugin's path is baked into the crate as its default
//! (`XLAFN_DEFAULT_PJRT_PLUGIN`); `XLAFN_PJRT_PLUGIN` overrides it at run time.

#[path = "build/plugin.rs"]
mod plugin;

use std::path::PathBuf;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build/plugin.rs");
    println!("cargo:rerun-if-changed=third_party/xla-cpu-pjrt.sha256");
    for var in [
        "XLAFN_PJRT_PLUGIN",
        "XLAFN_PJRT_HEADER",
        "XDG_CACHE_HOME",
        "XLAFN_CUDA_PLUGIN",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    // CUDA tests run only where a CUDA plugin is named; elsewhere they are
    // compiled but marked ignored.
    println!("cargo::rustc-check-cfg=cfg(xlafn_cuda)");
    if std::env::var_os("XLAFN_CUDA_PLUGIN").is_some_and(|p| !p.is_empty()) {
        println!("cargo:rustc-cfg=xlafn_cuda");
    }
    let manifest_dir = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
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
    generate_bindings(&located.header);
}

fn generate_bindings(header: &std::path::Path) {
    let out = PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("pjrt_bindings.rs");
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
