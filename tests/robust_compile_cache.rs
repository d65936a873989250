//! The on-disk compile cache under hostile or careless conditions. The
//! cache folder is chosen once per process, so every case runs children of
//! this test binary (the `child` test, switched on by an environment
//! variable) against a folder it prepares, with a timeout: a hang or an
//! abort fails one test, not the run.

#[path = "common/child.rs"]
mod child;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;
use xlafn::prelude::*;
use xlafn::runtime::{
    ArraySpec, Buffer, Client, CompileOptions, Executable, ProgramTraits, disk_cache_stats,
};

const CHILD_VAR: &str = "XLAFN_TEST_CACHE_CHILD";

fn program(op: &str) -> String {
    format!(
        r#"func.func public @main(%x: tensor<3xf32>) -> tensor<3xf32> {{
  %y = "stablehlo.{op}"(%x, %x) : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
  "func.return"(%y) : (tensor<3xf32>) -> ()
}}
"#
    )
}

/// `x op x` for x = [1, 2, 3].
fn expected(op: &str) -> Vec<f32> {
    let x = [1f32, 2., 3.];
    x.iter()
        .map(|v| match op {
            "multiply" => v * v,
            "add" => v + v,
            "subtract" => 0.,
            other => panic!("no reference for {other}"),
        })
        .collect()
}

/// In a child: compiles each op named in `XLAFN_TEST_CACHE_CHILD` (comma
/// separated) through the cache, with several XLA flags so that the
/// options' encoding order matters, and prints what happened.
#[test]
fn child() {
    if !child::is_child("child") {
        return;
    }
    let ops = std::env::var(CHILD_VAR).unwrap();
    let client = Client::default_client().unwrap();
    let options = CompileOptions::for_program(
        client.platform(),
        ProgramTraits {
            light: true,
            small_array_graph: true,
        },
    );
    let mut outs = Vec::new();
    for op in ops.split(',') {
        let exe = Executable::compile_cached(
            &client,
            &program(op),
            vec![ArraySpec::new(DType::F32, &[3])],
            &options,
        )
        .unwrap();
        let x =
            Buffer::from_slice(&client, client.default_device(), &[1f32, 2., 3.], &[3]).unwrap();
        let y = exe.execute(&[&x]).unwrap()[0].to_vec::<f32>().unwrap();
        outs.push(format!("{op}={}", values(&y)));
    }
    let (hits, stores) = disk_cache_stats();
    println!("CHILD hits={hits} stores={stores} {}", outs.join(" "));
}

/// `1;4;9`: one word, for the child's one-line report.
fn values(v: &[f32]) -> String {
    v.iter().map(f32::to_string).collect::<Vec<_>>().join(";")
}

struct Outcome {
    hits: u64,
    stores: u64,
    line: String,
}

/// Runs the `child` test in a new process with `ops` and the cache in
/// `dir`; fails if it takes longer than 60 s or does not finish cleanly.
fn run_child(dir: &Path, ops: &str, env: &[(&str, &str)]) -> Outcome {
    let dir = dir.to_string_lossy();
    let mut all = vec![(CHILD_VAR, ops), ("XLAFN_COMPILE_CACHE_DIR", &*dir)];
    all.extend_from_slice(env);
    let out = child::assert_child_passes("child", &all, Duration::from_secs(60));
    let line = out
        .stdout
        .lines()
        .find_map(|l| l.split_once("CHILD ").map(|(_, rest)| rest))
        .unwrap_or_else(|| panic!("no CHILD line in {}", out.stdout))
        .to_string();
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|w| w.strip_prefix(name))
            .unwrap()
            .parse()
            .unwrap()
    };
    for part in line.split_whitespace().skip(2) {
        let (op, values) = part.split_once('=').unwrap();
        assert_eq!(values, self::values(&expected(op)), "{op} computed wrong");
    }
    Outcome {
        hits: field("hits="),
        stores: field("stores="),
        line,
    }
}

/// A new folder for one use: unique per call, since tests running at
/// once ask for the same name (two of them look up `entry_name("multiply")`,
/// and one removed the folder the other was reading: seen on a GPU, where
/// compiles are slower and the two overlapped).
fn fresh_dir(name: &str) -> PathBuf {
    static CALLS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "xlafn-robust-cache-{name}-{}-{call}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

/// The entry file `ops` (one op) is stored under, found by storing it in a
/// scratch folder first.
fn entry_name(op: &str) -> std::ffi::OsString {
    let dir = fresh_dir(&format!("name-{op}"));
    run_child(&dir, op, &[]);
    let name = entries(&dir)[0].file_name().unwrap().to_owned();
    std::fs::remove_dir_all(&dir).unwrap();
    name
}

#[test]
fn a_second_process_hits_the_entry_the_first_stored() {
    let dir = fresh_dir("determinism");
    let first = run_child(&dir, "multiply,add", &[]);
    assert_eq!((first.hits, first.stores), (0, 2), "{}", first.line);
    let second = run_child(&dir, "multiply,add", &[]);
    assert_eq!((second.hits, second.stores), (2, 0), "{}", second.line);
    assert_eq!(entries(&dir).len(), 2, "one entry per program");
    let mode = std::fs::metadata(&dir).unwrap().mode() & 0o777;
    assert_eq!(mode, 0o700, "the folder is created private");
    for e in entries(&dir) {
        assert_eq!(std::fs::metadata(&e).unwrap().mode() & 0o777, 0o600);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_folder_others_can_write_turns_the_cache_off() {
    let dir = fresh_dir("open-folder");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let out = run_child(&dir, "multiply", &[]);
    assert_eq!((out.hits, out.stores), (0, 0));
    assert!(entries(&dir).is_empty());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_entry_others_can_write_turns_the_cache_off() {
    let dir = fresh_dir("open-entry");
    run_child(&dir, "multiply", &[]);
    let entry = &entries(&dir)[0];
    std::fs::set_permissions(entry, std::fs::Permissions::from_mode(0o666)).unwrap();
    let out = run_child(&dir, "multiply,add", &[]);
    assert_eq!(
        (out.hits, out.stores),
        (0, 0),
        "off after the planted entry"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn an_entry_moved_under_another_key_is_a_miss() {
    let dir = fresh_dir("moved");
    run_child(&dir, "add", &[]);
    let add_entry = entries(&dir)[0].clone();
    std::fs::rename(&add_entry, dir.join(entry_name("multiply"))).unwrap();
    // multiply must not run add's executable.
    let out = run_child(&dir, "multiply", &[]);
    assert_eq!((out.hits, out.stores), (0, 1), "{}", out.line);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn damaged_entries_are_misses() {
    let dir = fresh_dir("damaged");
    run_child(&dir, "multiply", &[]);
    let entry = entries(&dir)[0].clone();
    let good = std::fs::read(&entry).unwrap();
    for at in [9, good.len() / 2, good.len() - 1] {
        let mut bad = good.clone();
        bad[at] ^= 0x40;
        std::fs::write(&entry, &bad).unwrap();
        let out = run_child(&dir, "multiply", &[]);
        assert_eq!((out.hits, out.stores), (0, 1), "flip at {at}: {}", out.line);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn fifos_and_links_in_place_of_entries_neither_hang_nor_redirect() {
    let name = entry_name("multiply");
    let dir = fresh_dir("special");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();

    // A FIFO where the entry should be: read without blocking, refused.
    let status = Command::new("mkfifo")
        .arg(dir.join(&name))
        .status()
        .unwrap();
    assert!(status.success());
    let out = run_child(&dir, "multiply", &[]);
    assert_eq!(out.hits, 0);

    // A link to a victim file: not read, and the store replaces the link
    // instead of writing through it.
    let victim = dir.with_extension("victim");
    std::fs::write(&victim, b"precious").unwrap();
    let _ = std::fs::remove_file(dir.join(&name));
    std::os::unix::fs::symlink(&victim, dir.join(&name)).unwrap();
    let out = run_child(&dir, "multiply", &[]);
    assert_eq!((out.hits, out.stores), (0, 1), "{}", out.line);
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let meta = std::fs::symlink_metadata(dir.join(&name)).unwrap();
    assert!(meta.is_file(), "the link was replaced by a real entry");

    // A link to a valid entry of the same key elsewhere is still not followed.
    let elsewhere = dir.with_extension("real");
    std::fs::rename(dir.join(&name), &elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, dir.join(&name)).unwrap();
    let out = run_child(&dir, "multiply", &[]);
    assert_eq!(out.hits, 0, "links are not followed");
    assert!(
        entries(&dir)
            .iter()
            .all(|e| !e.to_string_lossy().ends_with(".tmp")),
        "no temporary files are left behind"
    );
    for p in [&victim, &elsewhere] {
        std::fs::remove_file(p).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn the_size_bound_evicts_the_least_recently_used_entries() {
    let name = entry_name("multiply");
    let probe = fresh_dir("probe");
    run_child(&probe, "multiply", &[]);
    let size = std::fs::metadata(probe.join(&name)).unwrap().len();
    std::fs::remove_dir_all(&probe).unwrap();

    let dir = fresh_dir("bounded");
    let bound = (size * 5 / 2).to_string();
    let env = [("XLAFN_COMPILE_CACHE_MAX_BYTES", bound.as_str())];
    let out = run_child(&dir, "multiply,add,subtract", &env);
    assert_eq!(out.stores, 3);
    let left = entries(&dir);
    assert_eq!(left.len(), 2, "{left:?}");
    assert!(
        !left.contains(&dir.join(&name)),
        "the oldest entry went first"
    );
    let total: u64 = left
        .iter()
        .map(|e| std::fs::metadata(e).unwrap().len())
        .sum();
    assert!(total <= size * 5 / 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn unreadable_settings_turn_the_cache_off_not_the_program() {
    let dir = fresh_dir("settings");
    let out = run_child(
        &dir,
        "multiply",
        &[("XLAFN_COMPILE_CACHE_MAX_BYTES", "a lot")],
    );
    assert_eq!((out.hits, out.stores), (0, 0));
    let out = run_child(&dir, "multiply", &[("XLAFN_COMPILE_CACHE_MAX_BYTES", "0")]);
    assert_eq!((out.hits, out.stores), (0, 0), "0 switches it off");
    // A cache path that is a file, not a folder.
    let file = dir.with_extension("file");
    std::fs::write(&file, b"").unwrap();
    let out = run_child(&file, "multiply", &[]);
    assert_eq!((out.hits, out.stores), (0, 0));
    std::fs::remove_file(&file).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
