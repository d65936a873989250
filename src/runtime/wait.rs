//! Waiting for PJRT events: poll briefly, then sleep.
//!
//! XLA's CPU client runs a program inside `Execute` only when its cost
//! analysis counts fewer than 1000 flops (transcendentals such as `tanh`
//! are counted apart, so they do not count); every other program runs on
//! its worker threads, and a wait for its result is a hand-off between
//! threads. On a virtual machine, waking a thread that went to sleep in
//! `PJRT_Event_Await` (and the idle core under it) costs tens of
//! microseconds, as long as a small program takes to run: W2's 150-op function took 60 µs sleeping and 30 µs polling.
//! Polling a long program, though, takes a core from XLA's thread pool
//! (W3's training step ran 10% slower, W7's matmul 5%), so each executable
//! remembers how long the last wait for its results took (`WaitHistory`),
//! and only programs whose results came within the budget are polled.

use super::plugin::Plugin;
use super::sys;
use crate::error::Result;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How long a wait polls before it sleeps: 200 µs, or `XLAFN_SPIN_WAIT_US`
/// (0 turns polling off). Read once per process.
fn poll_budget() -> Duration {
    static BUDGET: OnceLock<Duration> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        let micros = crate::environment::SPIN_WAIT_US
            .get()
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(200);
        Duration::from_micros(micros)
    })
}

/// How long the last wait for one executable's results took; shared by the
/// executable and the buffers it returns. Before any wait it reads zero, so
/// a first wait polls.
#[derive(Debug, Default)]
pub(crate) struct WaitHistory {
    last_wait_ns: AtomicU64,
}

impl WaitHistory {
    /// Whether the next wait should poll: its results came within the
    /// budget last time.
    fn worth_polling(&self, budget: Duration) -> bool {
        self.last_wait_ns.load(Ordering::Relaxed) <= budget.as_nanos() as u64
    }

    /// Skips the store when nothing changed: every call of an inline
    /// program records zero, and the executable is shared by threads.
    fn record(&self, waited: Duration) {
        let ns = u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX);
        if self.last_wait_ns.load(Ordering::Relaxed) != ns {
            self.last_wait_ns.store(ns, Ordering::Relaxed);
        }
    }
}

impl Plugin {
    /// Blocks until `event` is ready, then destroys it. Returns its status.
    /// Polls first (see the module doc) unless `history` says the event's
    /// program takes longer than the budget; a wait on something without a
    /// history (a host transfer) always may poll.
    pub(crate) fn await_event(
        &self,
        event: *mut sys::PJRT_Event,
        call: &'static str,
        history: Option<&WaitHistory>,
    ) -> Result<()> {
        if event.is_null() {
            return Ok(());
        }
        // `None`: ready at once (inline programs, the hot path).
        let start = (!self.event_is_ready(event)).then(Instant::now);
        if let Some(start) = start {
            let budget = poll_budget();
            if history.is_none_or(|h| h.worth_polling(budget)) {
                self.poll_until_ready(event, start, budget);
            }
        }
        let result = self.sleep_until_ready(event, call);
        if let Some(h) = history {
            h.record(start.map_or(Duration::ZERO, |s| s.elapsed()));
        }
        result
    }

    /// Whether `event` has completed (with or without an error). A failed
    /// query reads as "not ready": the await that follows reports it.
    pub(crate) fn event_is_ready(&self, event: *mut sys::PJRT_Event) -> bool {
        let Some(is_ready) = self.api().PJRT_Event_IsReady else {
            return false;
        };
        let mut args = sys::PJRT_Event_IsReady_Args {
            struct_size: sys::PJRT_Event_IsReady_Args_STRUCT_SIZE as usize,
            event,
            ..Default::default()
        };
        // SAFETY: `event` is a live event owned by the caller.
        let err = unsafe { is_ready(&mut args) };
        if !err.is_null() {
            self.destroy_error(err);
            return false;
        }
        args.is_ready
    }

    /// Polls `event` until it is ready or `budget` has passed since
    /// `start`. Between polls the thread yields, so a worker thread that
    /// wants this core gets it.
    fn poll_until_ready(&self, event: *mut sys::PJRT_Event, start: Instant, budget: Duration) {
        while start.elapsed() < budget {
            std::thread::yield_now();
            if self.event_is_ready(event) {
                return;
            }
        }
    }

    /// `PJRT_Event_Await` (returns at once for a ready event), then destroys
    /// the event. Returns its status.
    fn sleep_until_ready(&self, event: *mut sys::PJRT_Event, call: &'static str) -> Result<()> {
        let mut args = sys::PJRT_Event_Await_Args {
            struct_size: sys::PJRT_Event_Await_Args_STRUCT_SIZE as usize,
            event,
            ..Default::default()
        };
        let result = match self.func(self.api().PJRT_Event_Await, "PJRT_Event_Await") {
            // SAFETY: `event` is a live event owned by us.
            Ok(f) => self.check(unsafe { f(&mut args) }, call),
            Err(e) => Err(e),
        };
        self.destroy_event(event);
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_waits_that_came_within_the_budget_poll_again() {
        let budget = Duration::from_micros(200);
        let history = WaitHistory::default();
        assert!(history.worth_polling(budget), "a first wait polls");
        history.record(Duration::from_micros(30));
        assert!(history.worth_polling(budget));
        history.record(Duration::from_millis(2));
        assert!(!history.worth_polling(budget));
        history.record(Duration::ZERO);
        assert!(history.worth_polling(budget));
    }
}
