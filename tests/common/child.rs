//! Runs one test of the current test binary in a child process, so that a
//! case which used to hang or abort fails that one test (killed after a
//! timeout) instead of hanging or killing the whole run.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const CHILD_ENV: &str = "XLAFN_ISOLATED_TEST";

/// In the child (the environment names `name`), runs `body`; in the parent,
/// re-runs this binary filtered to `name` and asserts that it passes within
/// `timeout`. `name` must be the test function's name.
pub fn isolated(name: &str, timeout: Duration, body: impl FnOnce()) {
    if std::env::var(CHILD_ENV).as_deref() == Ok(name) {
        body();
        return;
    }
    let log =
        std::env::temp_dir().join(format!("xlafn-isolated-{}-{name}.log", std::process::id()));
    let file = std::fs::File::create(&log).expect("a log file");
    let mut child = Command::new(std::env::current_exe().expect("the test binary"))
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .stdout(Stdio::from(file.try_clone().expect("log handle")))
        .stderr(Stdio::from(file))
        .spawn()
        .expect("spawn the test binary");
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait for the child") {
            break Some(status);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let output = std::fs::read_to_string(&log).unwrap_or_default();
    let _ = std::fs::remove_file(&log);
    match status {
        None => panic!("{name} hung: killed after {timeout:?}\n{output}"),
        Some(s) => assert!(
            s.success() && output.contains("1 passed"),
            "{name} failed in its child process ({s}):\n{output}"
        ),
    }
}
