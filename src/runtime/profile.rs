//! Layer: runtime, the bottom, so that every layer can note spans (it
//! imports only `error`, `libc` for the exit hook, and the crate's one
//! file writer, `export::replace_file`, which itself needs only `error`). Profiles: a
//! timeline of what xlafn did, written as a Chrome trace
//! JSON file that Perfetto (ui.perfetto.dev) and `chrome://tracing` open.
//!
//! Switched on for the whole process by `XLAFN_PROFILE=path.json` (the
//! file is written at exit), or for a scope by [`Profile::start`], which
//! writes its file when the returned guard is finished or dropped.
//! While a profile records, xlafn notes spans for:
//! - `trace`: running a function's closure into a graph,
//! - `lower`: a graph to StableHLO,
//! - `compile`: XLA's compile, and `disk cache load` when the on-disk
//!   compile cache served the executable instead,
//! - `execute`: launching a compiled program on a device (one span per
//!   device of a sharded call),
//! - `host to device` and `device to host`: transfers,
//! - `host callback`: a program calling back into Rust,
//!
//! each on the thread that did it, with its details (function, shapes,
//! device, bytes) as arguments. Execution is asynchronous: `execute`
//! covers the launch, and a wait for the result shows up as the reading
//! thread's `device to host`.
//!
//! Per-HLO-op times are not available through the PJRT C API xlafn
//! speaks (0.81 has no profiler extension). The CPU plugin knows
//! `xla_cpu_enable_xprof_traceme`, whose per-op events go to XLA's own
//! profiler, which nothing here can read (not tried further).
//!
//! When nothing records, a span costs one relaxed atomic load.

use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

static RECORDING: AtomicBool = AtomicBool::new(false);
/// Scopes started and not finished (the environment variable counts one).
static ACTIVE: AtomicUsize = AtomicUsize::new(0);

/// One finished span.
#[derive(Clone, Debug)]
struct Event {
    name: &'static str,
    start_us: f64,
    duration_us: f64,
    thread: u64,
    args: Vec<(&'static str, String)>,
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

fn events() -> &'static Mutex<Vec<Event>> {
    static EVENTS: Mutex<Vec<Event>> = Mutex::new(Vec::new());
    &EVENTS
}

fn thread_number() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    thread_local! {
        static ID: u64 = NEXT.fetch_add(1, Ordering::Relaxed);
    }
    ID.with(|id| *id)
}

/// Is a profile recording? (Checked by every span; cheap.)
pub fn recording() -> bool {
    if RECORDING.load(Ordering::Relaxed) {
        return true;
    }
    from_environment();
    RECORDING.load(Ordering::Relaxed)
}

/// Starts the process-wide profile `XLAFN_PROFILE` names, once.
fn from_environment() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let Some(path) = crate::environment::PROFILE
            .get_os()
            .filter(|p| !p.is_empty())
        else {
            return;
        };
        begin();
        let path = std::path::PathBuf::from(path);
        ENV_PATH.get_or_init(|| path);
        // SAFETY: registers a plain `extern "C"` function that catches
        // every panic (see `write_environment_profile`).
        unsafe { libc::atexit(write_environment_profile) };
    });
}

static ENV_PATH: OnceLock<std::path::PathBuf> = OnceLock::new();

extern "C" fn write_environment_profile() {
    let _ = std::panic::catch_unwind(|| {
        if let Some(path) = ENV_PATH.get()
            && let Err(e) = write_file(path)
        {
            eprintln!("xlafn: cannot write the profile XLAFN_PROFILE names: {e}");
        }
    });
}

fn begin() {
    epoch();
    ACTIVE.fetch_add(1, Ordering::SeqCst);
    RECORDING.store(true, Ordering::SeqCst);
}

/// A span being timed; noted when dropped. Made by [`span`].
#[must_use = "a span times the scope it lives in"]
pub struct Span {
    open: Option<(Event, Instant)>,
}

impl Span {
    /// Adds a detail shown with the span (a function name, shapes, bytes).
    pub fn arg(mut self, key: &'static str, value: impl ToString) -> Span {
        if let Some((event, _)) = &mut self.open {
            event.args.push((key, value.to_string()));
        }
        self
    }
}

impl Drop for Span {
    fn drop(&mut self) {
        if let Some((mut event, began)) = self.open.take() {
            event.duration_us = began.elapsed().as_secs_f64() * 1e6;
            events()
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(event);
        }
    }
}

/// Times the enclosing scope as `name` while a profile records.
pub fn span(name: &'static str) -> Span {
    if !recording() {
        return Span { open: None };
    }
    let now = Instant::now();
    Span {
        open: Some((
            Event {
                name,
                start_us: now.duration_since(epoch()).as_secs_f64() * 1e6,
                duration_us: 0.0,
                thread: thread_number(),
                args: Vec::new(),
            },
            now,
        )),
    }
}

/// A scoped profile: records from [`start`](Profile::start) until
/// [`finish`](Profile::finish) (or drop), then writes the spans recorded
/// meanwhile, on every thread, to its file.
///
/// The file (and `XLAFN_PROFILE`'s) is written as every file of the crate
/// is: a new file beside the path, synced, renamed over it, so a link or
/// FIFO at the path is replaced, never followed or waited on.
///
/// ```
/// # use xlafn::prelude::*;
/// let dir = std::env::temp_dir().join(format!("xlafn-doc-profile-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).unwrap();
/// let path = dir.join("run.json");
/// let profile = xlafn::profile::Profile::start(&path);
/// let f = function(|x: Tensor| x.mul_scalar(2.0));
/// f.call((Tensor::vector(&[1f32, 2.0])?,))?.to_vec::<f32>()?;
/// profile.finish()?;
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert!(text.contains("\"compile\""));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct Profile {
    path: std::path::PathBuf,
    from_us: f64,
    done: bool,
}

impl Profile {
    /// Starts recording (on every thread) until this profile finishes.
    pub fn start(path: impl AsRef<std::path::Path>) -> Profile {
        begin();
        Profile {
            path: path.as_ref().to_path_buf(),
            from_us: Instant::now().duration_since(epoch()).as_secs_f64() * 1e6,
            done: false,
        }
    }

    /// Stops recording (unless another profile still records) and writes
    /// the file.
    pub fn finish(mut self) -> Result<()> {
        self.done = true;
        self.stop_and_write()
    }

    fn stop_and_write(&self) -> Result<()> {
        let mut all = events().lock().unwrap_or_else(|e| e.into_inner());
        let chosen: Vec<Event> = all
            .iter()
            .filter(|e| e.start_us >= self.from_us)
            .cloned()
            .collect();
        // The last profile out stops the recording and lets go of the
        // spans (the environment's profile, if any, never finishes).
        if ACTIVE.fetch_sub(1, Ordering::SeqCst) == 1 {
            RECORDING.store(false, Ordering::SeqCst);
            all.clear();
        }
        drop(all);
        write_events(&self.path, &chosen)
    }
}

impl Drop for Profile {
    fn drop(&mut self) {
        if !self.done
            && let Err(e) = self.stop_and_write()
        {
            tracing::warn!(target: "xlafn::profile", "{e}");
        }
    }
}

fn write_file(path: &std::path::Path) -> Result<()> {
    let all = events().lock().unwrap_or_else(|e| e.into_inner()).clone();
    write_events(path, &all)
}

/// The Chrome trace event format: complete events (`"ph": "X"`) with
/// microsecond timestamps, one process, a thread per recording thread.
fn write_events(path: &std::path::Path, events: &[Event]) -> Result<()> {
    let trace_events: Vec<serde_json::Value> = events
        .iter()
        .map(|e| {
            let args: serde_json::Map<String, serde_json::Value> = e
                .args
                .iter()
                .map(|(k, v)| ((*k).to_string(), serde_json::Value::String(v.clone())))
                .collect();
            serde_json::json!({
                "name": e.name,
                "cat": "xlafn",
                "ph": "X",
                "ts": e.start_us,
                "dur": e.duration_us,
                "pid": std::process::id(),
                "tid": e.thread,
                "args": args,
            })
        })
        .collect();
    let document = serde_json::json!({
        "traceEvents": trace_events,
        "displayTimeUnit": "ms",
    });
    crate::files::replace(path, document.to_string().as_bytes()).map_err(|e| {
        Error::Value(format!(
            "cannot write the profile to {}: {e}",
            path.display()
        ))
    })
}
