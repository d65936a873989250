//! Layer: distributed (imports `store`, `kv_client`'s random draw, the
//! runtime's run health and `error`). Who is who in the run, and who died,
//! as the plugins' collectives need to hear it.
//!
//! At `initialize` every process draws a random *incarnation* and reads
//! everyone's from the store, so all agree on them. Afterwards one thread
//! per process waits on the store for a death ([`CoordinationStore::
//! await_death`]) and reports each to the runtime, which tells the
//! plugin: XLA's GPU client then aborts the collectives that wait on the
//! dead process, and the execution blocked in them fails with an error
//! naming it, instead of hanging.

use super::kv_client::draw_token;
use super::store::CoordinationStore;
use crate::error::{Error, ErrorCode, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Where each process's incarnation is kept.
const INCARNATIONS: &str = "xlafn/incarnations/";
/// How long one wait for a death lasts: also how long `shutdown` may wait
/// for the watching thread to notice it should stop.
const WATCH_WAIT: Duration = Duration::from_millis(500);

/// Publishes this process's incarnation and reads every process's (index
/// = process id), waiting until `deadline` for the others.
pub(super) fn exchange_incarnations(
    store: &dyn CoordinationStore,
    deadline: Instant,
) -> Result<Vec<u64>> {
    let me = store.process_id();
    let mine = draw_token(u32::try_from(me).unwrap_or(u32::MAX));
    store.set(&format!("{INCARNATIONS}{me}"), &mine.to_le_bytes())?;
    (0..store.num_processes())
        .map(|p| {
            let left = deadline.saturating_duration_since(Instant::now());
            let bytes = store.get(&format!("{INCARNATIONS}{p}"), left)?;
            <[u8; 8]>::try_from(bytes.as_slice())
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    Error::distributed(
                        ErrorCode::DataLoss,
                        format!(
                            "process {p}'s incarnation in the store is {} bytes, not 8",
                            bytes.len()
                        ),
                    )
                })
        })
        .collect()
}

/// The thread that reports deaths, stopped (and joined) when dropped.
pub(super) struct DeathWatch {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DeathWatch {
    /// Starts watching `store` for deaths, each reported once to the
    /// runtime. A store that cannot be asked is asked again: losing the
    /// watch must not end the run.
    pub(super) fn start(store: Arc<dyn CoordinationStore>) -> Result<DeathWatch> {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::Builder::new()
            .name("xlafn-death-watch".into())
            .spawn(move || {
                let mut known = Vec::new();
                while !stopped.load(Ordering::SeqCst) {
                    match store.await_death(&known, WATCH_WAIT) {
                        Ok(Some(dead)) => {
                            known.push(dead.id);
                            crate::runtime::report_dead_process(dead.id, &dead.why);
                        }
                        Ok(None) => {}
                        Err(e) => {
                            tracing::debug!(error = %e, "watching the run for deaths");
                            std::thread::sleep(WATCH_WAIT);
                        }
                    }
                }
            })
            .map_err(|e| {
                Error::distributed(ErrorCode::ResourceExhausted, format!("no thread: {e}"))
            })?;
        Ok(DeathWatch {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for DeathWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
