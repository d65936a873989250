//! Profiles. A scoped `Profile` and `XLAFN_PROFILE` write a
//! file in the Chrome trace event format (what Perfetto and
//! chrome://tracing open) holding the spans of a run: trace, lower,
//! compile, execute and the transfers, each with its details.
#[path = "common/bounded.rs"]
mod bounded;
#[path = "common/child.rs"]
mod child;

use std::collections::HashSet;
use std::time::Duration;
use xlafn::prelude::*;

/// The events of a trace file, after checking the format: a
/// `traceEvents` array of complete events with microsecond times.
fn events(path: &std::path::Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let events = doc["traceEvents"].as_array().expect("traceEvents").clone();
    for e in &events {
        assert_eq!(e["ph"], "X", "{e}");
        assert!(e["name"].is_string(), "{e}");
        assert!(e["ts"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["dur"].as_f64().unwrap() >= 0.0, "{e}");
        assert!(e["pid"].is_u64() && e["tid"].is_u64(), "{e}");
        assert!(e["args"].is_object(), "{e}");
    }
    events
}

fn names(events: &[serde_json::Value]) -> HashSet<String> {
    events
        .iter()
        .map(|e| e["name"].as_str().unwrap().to_string())
        .collect()
}

/// A program no earlier run compiled (so the on-disk cache has no entry
/// for it and the compile is a real one).
fn fresh_function() -> Function<(Tensor,), Tensor> {
    let salt = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as f64;
    FunctionOptions::new()
        .name("profiled_step")
        .build(move |x: Tensor| x.mul_scalar(2.0)?.add_scalar(salt))
}

#[test]
fn a_scoped_profile_holds_the_runs_spans() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("run.json");
    let profile = xlafn::profile::Profile::start(&path);
    let f = fresh_function();
    let x = Tensor::vector(&[1f32, 2.0, 3.0]).unwrap();
    for _ in 0..2 {
        f.call((&x,)).unwrap().to_vec::<f32>().unwrap();
    }
    profile.finish().unwrap();
    let events = events(&path);
    let seen = names(&events);
    for span in [
        "trace",
        "lower",
        "compile",
        "execute",
        "host to device",
        "device to host",
    ] {
        assert!(seen.contains(span), "no {span} span in {seen:?}");
    }
    let trace = events.iter().find(|e| e["name"] == "trace").unwrap();
    assert_eq!(trace["args"]["function"], "profiled_step");
    let compile = events.iter().find(|e| e["name"] == "compile").unwrap();
    assert!(
        compile["args"]["program_bytes"]
            .as_str()
            .unwrap()
            .parse::<usize>()
            .unwrap()
            > 0
    );
    // Two calls, at least two launches; one trace.
    let count = |name: &str| events.iter().filter(|e| e["name"] == name).count();
    assert!(count("execute") >= 2);
    assert!(count("trace") >= 1);
    // After the profile, nothing more is noted in its file.
    let before = std::fs::read_to_string(&path).unwrap();
    f.call((&x,)).unwrap();
    assert_eq!(std::fs::read_to_string(&path).unwrap(), before);
}

#[test]
fn the_environment_variable_profiles_the_whole_process() {
    if child::is_child("the_environment_variable_profiles_the_whole_process") {
        let f = fresh_function();
        f.call((Tensor::vector(&[1f32]).unwrap(),))
            .unwrap()
            .to_vec::<f32>()
            .unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("process.json");
    let run = child::run_child(
        "the_environment_variable_profiles_the_whole_process",
        &[("XLAFN_PROFILE", path.to_str().unwrap())],
        Duration::from_secs(120),
    );
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    let seen = names(&events(&path));
    for span in ["trace", "lower", "compile", "execute"] {
        assert!(seen.contains(span), "no {span} span in {seen:?}");
    }
}

#[test]
fn profiles_replace_a_planted_link_or_fifo_instead_of_following_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path().join("linked.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    xlafn::profile::Profile::start(&link).finish().unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
    events(&link);
    // A FIFO with no reader: opening it to write would wait for ever.
    let fifo = dir.path().join("fifo.json");
    if bounded::mkfifo(&fifo) {
        let f = fifo.clone();
        bounded::within(5, "Profile::finish on a FIFO", move || {
            xlafn::profile::Profile::start(&f).finish().unwrap()
        });
        events(&fifo);
    }
}

#[test]
fn the_environment_profile_replaces_a_planted_link() {
    if child::is_child("the_environment_profile_replaces_a_planted_link") {
        Tensor::vector(&[1f32]).unwrap().to_vec::<f32>().unwrap();
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let link = dir.path().join("process.json");
    std::os::unix::fs::symlink(&victim, &link).unwrap();
    let run = child::run_child(
        "the_environment_profile_replaces_a_planted_link",
        &[("XLAFN_PROFILE", link.to_str().unwrap())],
        Duration::from_secs(120),
    );
    assert!(run.success, "{}\n{}", run.stdout, run.stderr);
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
    events(&link);
}
