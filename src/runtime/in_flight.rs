//! Executions still running when the process exits.
//!
//! XLA runs most programs on its own worker threads; `Execute` returns at
//! once. A process that exits while one still runs (an eager op whose
//! result was never read, say) tears down the plugin's static objects
//! under the running worker: a segfault at exit, seen in one run in five
//! of a program that only asked a convolution for its shape (oneDNN was
//! generating its GEMM kernels on a worker while `exit` destroyed them).
//!
//! So each execution's completion events are kept here, and an `atexit`
//! handler waits for them. `exit` runs handlers in the reverse order of
//! their registration, and the plugin registers the destructors of the
//! statics it makes lazily (oneDNN's kernel tables) while a program runs:
//! a handler registered once, early, would run after them, too late. So
//! the handler is registered again after each program's first run, which
//! the launch waits for (it follows a compile, so the wait costs little):
//! whatever that run set up is torn down after the handler has waited.
//!
//! The list stays short: finished events are dropped whenever it doubles
//! (an `IsReady` query each), so the hot path pays for the event PJRT
//! makes and a push.

use super::plugin::Plugin;
use super::sys;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A completion event and the plugin that made it.
struct Pending {
    plugin: &'static Plugin,
    event: *mut sys::PJRT_Event,
}

// SAFETY: a PJRT event may be queried, awaited and destroyed from any
// thread; each is owned by exactly one `Pending`.
unsafe impl Send for Pending {}

struct List {
    pending: Vec<Pending>,
    /// The length at which finished events are next swept out.
    sweep_at: usize,
}

static LIST: Mutex<List> = Mutex::new(List {
    pending: Vec::new(),
    sweep_at: 16,
});

/// How long the exit handler waits in all: a program still running after
/// it is left to the plugin (as without the handler), so an exit never
/// hangs on a runaway program.
const EXIT_WAIT: Duration = Duration::from_secs(60);

/// Keeps `events` (null entries skipped) until they complete or the
/// process exits.
pub(crate) fn keep(plugin: &'static Plugin, events: &[*mut sys::PJRT_Event]) {
    let mut list = LIST.lock().unwrap_or_else(|e| e.into_inner());
    for &event in events.iter().filter(|e| !e.is_null()) {
        list.pending.push(Pending { plugin, event });
    }
    if list.pending.len() >= list.sweep_at {
        list.pending.retain(|p| {
            let done = p.plugin.event_is_ready(p.event);
            if done {
                p.plugin.destroy_event(p.event);
            }
            !done
        });
        list.sweep_at = (2 * list.pending.len()).max(16);
    }
}

/// Registers the exit handler (again) after a program's first run has
/// finished, so it runs before the teardown of anything that run set up.
/// Once per executable: as many entries as programs compiled.
pub(crate) fn after_first_run() {
    // SAFETY: registers a plain `extern "C"` function that never unwinds
    // (see `wait_at_exit`); running it more than once is harmless (the
    // first run empties the list).
    unsafe { libc::atexit(wait_at_exit) };
}

/// The exit handler: waits for every kept event (up to [`EXIT_WAIT`]).
extern "C" fn wait_at_exit() {
    let _ = std::panic::catch_unwind(|| {
        let start = Instant::now();
        // Another thread may be pushing right now: it lets go at once.
        let pending = loop {
            match LIST.try_lock() {
                Ok(mut list) => break std::mem::take(&mut list.pending),
                Err(std::sync::TryLockError::Poisoned(e)) => {
                    break std::mem::take(&mut e.into_inner().pending);
                }
                Err(std::sync::TryLockError::WouldBlock) if start.elapsed() < EXIT_WAIT => {
                    std::thread::sleep(Duration::from_micros(200));
                }
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        };
        for p in pending {
            while !p.plugin.event_is_ready(p.event) {
                if start.elapsed() > EXIT_WAIT {
                    return;
                }
                std::thread::sleep(Duration::from_micros(200));
            }
            p.plugin.destroy_event(p.event);
        }
    });
}
