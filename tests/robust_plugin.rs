//! Fake plugins whose function tables are shorter than this build's, or of
//! another major version: loading them is a clear error naming the plugin,
//! not a read past the end of their table (which crashed the process, so
//! each case runs in a child process; see `common/child.rs`).

#[path = "common/child.rs"]
mod child;

use std::path::PathBuf;
use std::time::Duration;
use xlafn::runtime::Plugin;

/// Builds a shared library whose `GetPjrtApi` returns a table declaring
/// `struct_size` bytes and API version `major.minor` (the version's own
/// header and the table's first two fields are laid out as in
/// `pjrt_c_api.h`).
fn fake_plugin(name: &str, struct_size: usize, major: i32, minor: i32) -> PathBuf {
    // Built once per content under cargo's scratch folder for tests (not
    // the system's temporary directory, which would collect a copy per
    // run); a per-process name and a rename keep parallel runs apart.
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join(format!("fake-plugins/{struct_size}-{major}-{minor}"));
    std::fs::create_dir_all(&dir).unwrap();
    let source = dir.join(format!("{name}.{}.c", std::process::id()));
    let built = dir.join(format!("{name}.{}.so", std::process::id()));
    let library = dir.join(format!("{name}.so"));
    std::fs::write(
        &source,
        format!(
            "#include <stddef.h>\n\
             struct version {{ size_t struct_size; void *ext; int major; int minor; }};\n\
             struct api {{ size_t struct_size; void *ext; struct version v; }};\n\
             static const struct api table = {{ {struct_size}, 0, {{ 24, 0, {major}, {minor} }} }};\n\
             const void *GetPjrtApi(void) {{ return &table; }}\n"
        ),
    )
    .unwrap();
    let status = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&built)
        .arg(&source)
        .status()
        .expect("these tests build fake plugins with a C compiler (cc)");
    assert!(status.success(), "cc failed on {}", source.display());
    std::fs::remove_file(&source).unwrap();
    std::fs::rename(&built, &library).unwrap();
    library
}

fn load_error(path: &std::path::Path) -> String {
    match Plugin::load(path) {
        Ok(p) => panic!("a fake plugin loaded: {p:?}"),
        Err(e) => e.to_string(),
    }
}

macro_rules! in_child {
    ($name:ident / $child:ident, $body:block) => {
        #[test]
        fn $name() {
            child::assert_child_passes(stringify!($child), &[], Duration::from_secs(60));
        }

        #[test]
        fn $child() {
            if !child::is_child(stringify!($child)) {
                return;
            }
            $body
        }
    };
}

in_child!(
    a_table_too_short_for_its_version_is_refused / short_table_child,
    {
        let path = fake_plugin("short", 24, 0, 81);
        let e = load_error(&path);
        assert!(e.contains("too short") && e.contains("short.so"), "{e}");
    }
);

in_child!(another_major_version_is_refused / major_child, {
    let path = fake_plugin("major", 40, 7, 0);
    let e = load_error(&path);
    assert!(e.contains("PJRT C API 7.0") && e.contains("major"), "{e}");
});

in_child!(an_old_plugin_is_named_too_old / old_child, {
    // The table ends right after the version: every function is missing.
    let path = fake_plugin("old", 40, 0, 1);
    let e = load_error(&path);
    assert!(
        e.contains("does not implement PJRT_Plugin_Initialize") && e.contains("too old"),
        "{e}"
    );
});
