//! The GPU benchmark's scripts (scripts/gpu-bench.sh, bench/gpu_bench.py)
//! checked where there is no GPU: `run` stops with the no-GPU error before
//! it needs anything else, and the table turns figures into the right time
//! ratios (a rate's ratio is inverted), marks targets met or not, and
//! leaves out what nobody measured.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn scratch(name: &str) -> PathBuf {
    let dir =
        std::env::temp_dir().join(format!("xlafn-bench-scripts-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn run_without_a_gpu_ends_in_the_no_gpu_error() {
    // An nvidia-smi that fails, first on PATH, stands for a machine
    // without a GPU even where one is installed.
    let bin = scratch("bin");
    let fake = bin.join("nvidia-smi");
    std::fs::write(&fake, "#!/bin/sh\nexit 9\n").unwrap();
    std::fs::set_permissions(&fake, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = Command::new("bash")
        .arg(repo().join("scripts/gpu-bench.sh"))
        .args(["run", bin.join("out").to_str().unwrap()])
        .env("PATH", path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no NVIDIA GPU visible") && stderr.contains("--cpu"),
        "{stderr}"
    );
    assert!(
        !bin.join("out").exists(),
        "nothing is written without a GPU"
    );
    let usage = Command::new("bash")
        .arg(repo().join("scripts/gpu-bench.sh"))
        .arg("walk")
        .output()
        .unwrap();
    assert_eq!(usage.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&usage.stderr).contains("usage: scripts/gpu-bench.sh build"));
}

#[test]
fn the_table_gives_time_ratios_and_marks_the_targets() {
    let dir = scratch("table");
    let write = |name: &str, text: &str| std::fs::write(dir.join(name), text).unwrap();
    // xlafn: W1 at 3 us (jax.jit 6: ratio 0.5, target 0.5 met), W3 at
    // 600 us (jax.jit 1000: 0.6 > 0.5, not met; torch.compile 1.2 ms:
    // 0.5), W7 at 200 GFLOP/s (jax.jit 100: time ratio 0.5), W9 at 5 ms
    // (jax.jit 4: 1.25, not met), DATA 10.5 ms fed, 10 pre-placed.
    write(
        "xlafn.json",
        r#"{"W1": {"function_us": 3.0}, "W3": {"function_us": 600.0},
            "W7": {"gflops": 200.0}, "W9": {"step_ms": 5.0},
            "DATA": {"step_ms": 10.5, "preplaced_ms": 10.0}}"#,
    );
    write(
        "peers_jax.json",
        r#"{"results": {"W1/jax_jit": {"median_s": 6e-6}, "W3/jax_jit": {"median_s": 1e-3},
            "W7/jax_jit": {"value": 100.0}, "W9step/jax_jit": {"median_s": 4e-3}},
            "errors": {"W12": "out of memory"}}"#,
    );
    write(
        "peers_torch.json",
        r#"{"results": {"W3/torch_compile": {"value": 1.2}}}"#,
    );
    let out = Command::new("python3")
        .arg(repo().join("bench/gpu_bench.py"))
        .arg("table")
        .arg(&dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("jax error W12: out of memory"), "{text}");
    let table: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("table.json")).unwrap()).unwrap();
    let rows = table["rows"].as_array().unwrap();
    let row = |work: &str| {
        rows.iter()
            .find(|r| r["work"] == work)
            .unwrap_or_else(|| panic!("no {work} row in {text}"))
    };
    let close = |v: &Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-12;
    assert!(close(&row("W1")["ratio_jax"], 0.5) && row("W1")["met"] == "yes");
    assert!(close(&row("W3")["ratio_jax"], 0.6) && row("W3")["met"] == "NO");
    assert!(close(&row("W3")["ratio_torch"], 0.5));
    assert!(close(&row("W7")["ratio_jax"], 0.5) && row("W7")["met"] == "yes");
    assert!(close(&row("W9")["ratio_jax"], 1.25) && row("W9")["met"] == "NO");
    assert!(close(&row("DATA")["ratio_jax"], 1.05) && row("DATA")["met"] == "yes");
    // Nothing measured W2 on either side: no row.
    assert!(rows.iter().all(|r| r["work"] != "W2"), "{text}");
}
