//! Layer: utility (imports only `error`). Single flight: when several
//! threads need the same expensive value at once (a trace, a compile), one
//! of them computes it and the others wait for its outcome instead of
//! repeating the work.
//!
//! Used by the eager op cache (16 threads hitting one new op compile it
//! once) and by `Function`'s dispatcher (concurrent first calls of one
//! type trace once). It holds no cache itself: the work a leader runs
//! must publish its result where later callers look first, before it
//! returns, and should look there again first, because a new leader may
//! start as soon as the previous one has landed.
//!
//! Failure is part of the contract. Waiters get the leader's error, not a
//! hang: if the leader's work panics, a drop guard still lands the flight
//! (waiters get a `FailedPrecondition` error naming the work) and removes
//! it, so the next call starts afresh. A thread that asks for a key it is
//! itself computing gets a `RecursionError` instead of waiting for itself.

use crate::error::{Error, Result};
use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex};
use std::thread::ThreadId;

/// Work in progress per key.
pub(crate) struct SingleFlight<K, V> {
    flights: Mutex<HashMap<K, Arc<Flight<V>>>>,
}

struct Flight<V> {
    leader: ThreadId,
    outcome: Mutex<Option<Result<V>>>,
    landed: Condvar,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            flights: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash + Clone, V: Clone> SingleFlight<K, V> {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// Runs `work` for `key`, or, if another thread is already running it,
    /// waits for that outcome. `what` names the work in the errors waiters
    /// get when it panics or recurses ("tracing function 'f'").
    pub(crate) fn run(&self, key: K, what: &str, work: impl FnOnce() -> Result<V>) -> Result<V> {
        let (flight, leading) = {
            let mut flights = self.flights.lock().unwrap_or_else(|e| e.into_inner());
            match flights.get(&key) {
                Some(f) => (f.clone(), false),
                None => {
                    let f = Arc::new(Flight {
                        leader: std::thread::current().id(),
                        outcome: Mutex::new(None),
                        landed: Condvar::new(),
                    });
                    flights.insert(key.clone(), f.clone());
                    (f, true)
                }
            }
        };
        if !leading {
            return flight.wait(what);
        }
        let mut landing = Landing {
            owner: self,
            key: Some(key),
            flight,
            what,
        };
        let result = work();
        landing.land(match &result {
            Ok(v) => Ok(v.clone()),
            Err(e) => Err(e.clone()),
        });
        result
    }

    /// How many keys are being computed now (for tests).
    #[cfg(test)]
    fn in_flight(&self) -> usize {
        self.flights.lock().map(|f| f.len()).unwrap_or(0)
    }
}

impl<V: Clone> Flight<V> {
    fn wait(&self, what: &str) -> Result<V> {
        if self.leader == std::thread::current().id() {
            return Err(Error::Recursion(format!(
                "{what} needs its own result (it re-entered itself on this thread)"
            )));
        }
        let mut outcome = self.outcome.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(r) = &*outcome {
                return match r {
                    Ok(v) => Ok(v.clone()),
                    Err(e) => Err(e.clone()),
                };
            }
            outcome = self.landed.wait(outcome).unwrap_or_else(|e| e.into_inner());
        }
    }
}

/// Lands a flight exactly once: with the work's outcome, or, when the work
/// unwinds, with an error (from `Drop`), so waiters are never left behind.
struct Landing<'a, K: Eq + Hash, V> {
    owner: &'a SingleFlight<K, V>,
    key: Option<K>,
    flight: Arc<Flight<V>>,
    what: &'a str,
}

impl<K: Eq + Hash, V> Landing<'_, K, V> {
    fn land(&mut self, outcome: Result<V>) {
        let Some(key) = self.key.take() else {
            return;
        };
        // Removed first: a caller arriving from now on starts a new flight
        // (and finds the published result where the work put it).
        self.owner
            .flights
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&key);
        *self
            .flight
            .outcome
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(outcome);
        self.flight.landed.notify_all();
    }
}

impl<K: Eq + Hash, V> Drop for Landing<'_, K, V> {
    fn drop(&mut self) {
        if self.key.is_some() {
            let e = Error::FailedPrecondition(format!(
                "{} panicked on another thread; calling again starts afresh",
                self.what
            ));
            self.land(Err(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    #[test]
    fn concurrent_callers_share_one_run() {
        let flights = SingleFlight::<u32, u32>::new();
        let runs = AtomicUsize::new(0);
        let barrier = Barrier::new(8);
        let results: Vec<Result<u32>> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..8)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        flights.run(1, "work", || {
                            runs.fetch_add(1, Ordering::SeqCst);
                            std::thread::sleep(Duration::from_millis(200));
                            Ok(42)
                        })
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert_eq!(runs.load(Ordering::SeqCst), 1);
        assert!(results.iter().all(|r| matches!(r, Ok(42))));
        assert_eq!(flights.in_flight(), 0);
    }

    #[test]
    fn a_panicking_leader_wakes_waiters_with_an_error_and_lands() {
        let flights = SingleFlight::<u32, u32>::new();
        let started = Barrier::new(2);
        std::thread::scope(|s| {
            let leader = s.spawn(|| {
                flights.run(7, "work seven", || {
                    started.wait();
                    std::thread::sleep(Duration::from_millis(200));
                    panic!("boom")
                })
            });
            started.wait();
            let waited = flights.run(7, "work seven", || Ok(1));
            // Either it joined the doomed flight (an error), or the leader
            // had already landed and it ran the work itself.
            match waited {
                Err(Error::FailedPrecondition(m)) => assert!(m.contains("work seven"), "{m}"),
                other => assert!(matches!(other, Ok(1)), "{other:?}"),
            }
            assert!(
                leader.join().is_err(),
                "the panic reaches the leader's caller"
            );
        });
        assert_eq!(flights.in_flight(), 0);
        assert!(matches!(flights.run(7, "work seven", || Ok(2)), Ok(2)));
    }

    #[test]
    fn re_entering_ones_own_flight_is_a_recursion_error() {
        let flights = SingleFlight::<u32, u32>::new();
        let r = flights.run(3, "work three", || flights.run(3, "work three", || Ok(0)));
        assert!(matches!(r, Err(Error::Recursion(_))), "{r:?}");
    }
}
