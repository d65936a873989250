//! Runs one test of the current test binary in a child process, with a
//! timeout, for cases that used to abort or hang the process: a regression
//! then fails the one test that runs the child, not the whole run.
//!
//! The child test starts with `if !is_child("name") { return; }`, so in a
//! normal run it passes at once; the parent runs it with the marker set.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const MARKER: &str = "XLAFN_TEST_CHILD";

/// Is this process the child started for test `name`?
#[allow(dead_code)]
pub fn is_child(name: &str) -> bool {
    std::env::var(MARKER).is_ok_and(|v| v == name)
}

/// What a child printed and how it ended.
#[allow(dead_code)]
pub struct ChildRun {
    pub success: bool,
    pub status: String,
    pub stdout: String,
    pub stderr: String,
}

/// Runs test `name` of this binary in a new process with `env` set, and
/// fails the calling test if it takes longer than `timeout`.
#[allow(dead_code)]
pub fn run_child(name: &str, env: &[(&str, &str)], timeout: Duration) -> ChildRun {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        &full_test_name(name),
        "--exact",
        "--nocapture",
        "--test-threads=1",
    ])
    .env(MARKER, name)
    .stdout(Stdio::piped())
    .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().unwrap();
    let start = Instant::now();
    // Drain the pipes on threads so a chatty child cannot block on them.
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut out_pipe, &mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = std::io::Read::read_to_string(&mut err_pipe, &mut s);
        s
    });
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the child running {name} hung: killed after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    ChildRun {
        success: status.success(),
        status: status.to_string(),
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

/// `name`'s path in this binary's test list, for `--exact`: `name` itself
/// in a test file's own binary, `file::name` where the file is a module of
/// a larger binary (the GPU check, tests/gpu_check.rs). This module's own
/// path is `<crate>::<file's modules>::child`.
fn full_test_name(name: &str) -> String {
    let mut path: Vec<&str> = module_path!().split("::").skip(1).collect();
    path.pop();
    path.push(name);
    path.join("::")
}

/// Runs test `name` in a child and fails unless it passed.
#[allow(dead_code)]
pub fn assert_child_passes(name: &str, env: &[(&str, &str)], timeout: Duration) -> ChildRun {
    let run = run_child(name, env, timeout);
    assert!(
        run.success,
        "the child running {name} failed ({}):\n{}\n{}",
        run.status, run.stdout, run.stderr
    );
    run
}

/// In the child (started for `name`), runs `body`; in the parent, re-runs
/// this binary filtered to `name` and asserts that it passes within
/// `timeout`. `name` must be the calling test function's name.
#[allow(dead_code)]
pub fn isolated(name: &str, timeout: Duration, body: impl FnOnce()) {
    if is_child(name) {
        body();
        return;
    }
    let run = assert_child_passes(name, &[], timeout);
    assert!(
        run.stdout.contains("1 passed"),
        "{name} did not run in its child process:\n{}\n{}",
        run.stdout,
        run.stderr
    );
}

/// Runs test `name` as `n` processes at once (the processes of one
/// multi-process run), process `id` with `env(id)`, and fails unless each
/// passed and printed `process {id} of {n} passed`.
#[allow(dead_code)]
pub fn assert_processes_pass(
    name: &str,
    n: usize,
    env: impl Fn(usize) -> Vec<(String, String)>,
    timeout: Duration,
) {
    let start = Instant::now();
    let handles: Vec<_> = (0..n)
        .map(|id| {
            let (name, env) = (name.to_string(), env(id));
            std::thread::spawn(move || {
                let env: Vec<(&str, &str)> =
                    env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
                run_child(&name, &env, timeout)
            })
        })
        .collect();
    for (id, handle) in handles.into_iter().enumerate() {
        let run = handle.join().expect("a process hung and was killed");
        assert!(
            run.success && run.stdout.contains(&format!("process {id} of {n} passed")),
            "process {id} of {n} failed ({}):\n{}\n{}",
            run.status,
            run.stdout,
            run.stderr
        );
    }
    assert!(start.elapsed() < timeout);
}
