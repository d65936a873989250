//! Hostile export folders, continued (robust_export.rs has the
//! programs, signatures, manifests and re-signed mutations): malformed
//! `.npy` headers, export files that are not regular files in the folder
//! or would overwrite something, and the `xlafn` tool's handling of its
//! arguments and of what it prints from a manifest. Each ends in an
//! error; cases that aborted or hung run in a child process.

#[path = "common/child.rs"]
mod child;
#[path = "common/export_helpers.rs"]
mod export_helpers;
#[path = "common/scratch.rs"]
mod scratch;
#[path = "common/tool.rs"]
mod tool;

use export_helpers::{
    add_export, cli, cli_str, edit, isolated, load_err, run_refused, temp_dir, x3,
};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::Command;
use xlafn::export::npy;
use xlafn::export::testing::resign;
use xlafn::prelude::*;

// ------------------------------------------------------------ .npy files

#[test]
fn malformed_npy_headers_are_errors_in_exports_and_the_cli() {
    let bad_headers = [
        "{'descr': '<f4', 'fortran_order': False, 'shape': )3,(, }",
        "{'descr': '<f4', 'fortran_order': False, 'shape': (\u{e9},), }",
    ];
    for header in bad_headers {
        let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
        bytes.extend((header.len() as u16).to_le_bytes());
        bytes.extend(header.as_bytes());
        bytes.extend([0u8; 12]);
        assert!(npy::decode(&bytes).is_err());

        let dir = temp_dir("npy");
        add_export(&dir);
        std::fs::write(dir.join("constant_0.npy"), &bytes).unwrap();
        resign(&dir).unwrap();
        let e = load_err(&dir);
        assert!(
            e.contains("constant_0.npy") && e.contains("not a valid .npy"),
            "{e}"
        );

        let good = temp_dir("npy-cli");
        add_export(&good);
        let input = good.join("x.npy");
        std::fs::write(&input, &bytes).unwrap();
        let stderr = run_refused(&good, &input, &good.join("out"));
        assert!(stderr.contains("not a valid .npy"), "{stderr}");
    }
}

// ----------------------------------------------------------------- files

#[test]
fn export_files_must_be_regular_files_in_the_folder() {
    isolated(
        "export_files_must_be_regular_files_in_the_folder",
        60,
        || {
            let secret = "root:x:0:0";
            let secret_dir = temp_dir("secret");
            let victim = secret_dir.join("passwd");
            std::fs::write(&victim, format!("{secret}\n")).unwrap();
            // A symlink out of the folder: refused, its content never shown.
            let dir = temp_dir("symlink");
            add_export(&dir);
            std::fs::remove_file(dir.join("constant_0.npy")).unwrap();
            std::os::unix::fs::symlink(&victim, dir.join("constant_0.npy")).unwrap();
            resign(&dir).unwrap();
            let e = load_err(&dir);
            assert!(e.contains("symbolic link") && !e.contains(secret), "{e}");
            // A manifest naming a file outside the folder.
            let dir = temp_dir("escape");
            add_export(&dir);
            let path = dir.join("xlafn_export.json");
            let text = std::fs::read_to_string(&path).unwrap().replace(
                "\"constant_0.npy\"",
                &format!("{:?}", victim.display().to_string()),
            );
            std::fs::write(&path, text).unwrap();
            resign(&dir).unwrap();
            let e = load_err(&dir);
            assert!(
                e.contains("not a plain file name") && !e.contains(secret),
                "{e}"
            );
            // A FIFO (which blocked the loader) and /dev/zero (read until the
            // process was killed), each signed first and then swapped in.
            for (tag, make) in [
                (
                    "fifo",
                    Box::new(|p: &Path| {
                        assert!(Command::new("mkfifo").arg(p).status().unwrap().success());
                    }) as Box<dyn Fn(&Path)>,
                ),
                (
                    "zero",
                    Box::new(|p: &Path| std::os::unix::fs::symlink("/dev/zero", p).unwrap()),
                ),
            ] {
                for file in ["constant_0.npy", "program_0.mlir", "xlafn_export.json"] {
                    let dir = temp_dir(tag);
                    add_export(&dir);
                    std::fs::remove_file(dir.join(file)).unwrap();
                    make(&dir.join(file));
                    let e = load_err(&dir);
                    assert!(
                        e.contains("not a regular file") || e.contains("symbolic link"),
                        "{tag} {file}: {e}"
                    );
                }
            }
        },
    );
}

#[test]
fn exports_and_the_cli_write_only_new_files() {
    let victim_dir = temp_dir("victim");
    let victim = victim_dir.join("precious");
    std::fs::write(&victim, "keep me").unwrap();
    // A symlink planted where export writes a file: refused, the victim
    // untouched, and the files written before it removed again.
    let c = Tensor::vector(&[10f32, 20., 30.]).unwrap();
    let f = function(move |x: Tensor| &x + &c);
    let cf = f.get_concrete_function((&x3(),)).unwrap();
    for planted in ["constant_0.npy", "program_0.mlir", "xlafn_export.json"] {
        let dir = temp_dir("planted");
        std::os::unix::fs::symlink(&victim, dir.join(planted)).unwrap();
        let e = cf.export(&dir, &[]).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
        let left: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from(planted)]);
    }
    // And where `xlafn run` writes its output.
    let dir = temp_dir("planted-cli");
    add_export(&dir);
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    std::os::unix::fs::symlink(&victim, out.join("output_0.npy")).unwrap();
    let input = dir.join("x.npy");
    std::fs::write(&input, npy::encode(&x3().to_host_array().unwrap()).unwrap()).unwrap();
    let stderr = run_refused(&dir, &input, &out);
    assert!(stderr.contains("already exists"), "{stderr}");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep me");
}

// ------------------------------------------------------------------- CLI

#[test]
fn cli_inputs_must_be_regular_files() {
    let dir = temp_dir("cli-inputs");
    add_export(&dir);
    let fifo = dir.join("fifo.npy");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    for input in [fifo.as_path(), Path::new("/dev/zero")] {
        let stderr = run_refused(&dir, input, &dir.join("out"));
        assert!(stderr.contains("not a regular file"), "{stderr}");
    }
}

#[test]
fn show_escapes_control_characters_from_the_manifest() {
    let dir = temp_dir("escape-show");
    add_export(&dir);
    edit(
        &dir,
        "xlafn_export.json",
        "\"name\": \"add\"",
        "\"name\": \"a\\u001b[2Jb\\u202ec\"",
    );
    edit(
        &dir,
        "xlafn_export.json",
        "\"name\": \"x\"",
        "\"name\": \"x\\ry\"",
    );
    let out = cli_str(&["show", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("function 'a\\u{1b}[2Jb\\u{202e}c'") && stdout.contains("x\\u{d}y:"),
        "{stdout}"
    );
    assert!(
        !out.stdout.iter().any(|b| *b == 0x1b || *b == b'\r'),
        "{stdout}"
    );
}

/// A crafted print message reached the terminal raw from `xlafn run`
/// (escape sequences, forged output lines): it is escaped as `show`
/// escapes names, newlines included.
#[cfg_attr(
    xlafn_device_cuda,
    ignore = "CPU only: host callbacks (print, check_numerics) need the CPU plugin"
)]
#[test]
fn run_escapes_print_messages_from_the_manifest() {
    let dir = temp_dir("escape-run");
    let f = FunctionOptions::new()
        .name("noisy")
        .arg_names(&["x"])
        .build(|x: Tensor| -> Result<Tensor> {
            xlafn::print("marker", &[&x])?;
            x.mul_scalar(2.0)
        });
    f.get_concrete_function((&x3(),))
        .unwrap()
        .export(&dir, &[])
        .unwrap();
    edit(
        &dir,
        "xlafn_export.json",
        "\"marker\"",
        "\"a\\u001b[2Jb\\noutput_0: forged\\r\\u202e\"",
    );
    let out = cli_str(&["run", dir.to_str().unwrap(), "--input-expr", "x=[1, 2, 3]"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("a\\u{1b}[2Jb\\u{a}output_0: forged\\u{d}\\u{202e} [1. 2. 3.]\n"),
        "{stdout}"
    );
    assert!(
        !out.stdout.iter().any(|b| *b == 0x1b || *b == b'\r'),
        "{stdout}"
    );
    // One line of output_0, the real one.
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("output_0")).count(),
        1,
        "{stdout}"
    );
    assert!(
        stdout.ends_with("\noutput_0: f32(3,)\n[2.0, 4.0, 6.0]\n"),
        "{stdout}"
    );
}

#[test]
fn non_utf8_arguments_are_errors() {
    let bad = std::ffi::OsStr::from_bytes(b"dir\xff");
    for args in [vec![std::ffi::OsStr::new("show"), bad], vec![bad]] {
        let out = cli(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains("not valid UTF-8"), "{stderr}");
    }
}
