//! The pipeline's threads: `map_parallel`'s workers, which keep the input
//! order, and `prefetch`'s producer, which runs everything upstream of it
//! ahead of the consumer.

use super::Elements;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::sync::{Arc, Mutex};

/// The text of a caught panic's payload.
pub(crate) fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string panic payload".into())
}

/// Runs a user closure on one example, a panic turned into an error that
/// names the example (the pipeline and its threads live on).
pub(crate) fn call_guarded<T, U>(
    what: &str,
    index: u64,
    f: &(dyn Fn(T) -> Result<U> + Send + Sync),
    x: T,
) -> Result<U> {
    match catch_unwind(AssertUnwindSafe(|| f(x))) {
        Ok(r) => r.map_err(|e| e.context(&format!("data: {what} failed on example {index}"))),
        Err(p) => Err(panicked(&format!("{what} panicked on example {index}"), p)),
    }
}

/// The error for a panic caught in user code; `what` says whose and where
/// (`map panicked on example 3`).
pub(crate) fn panicked(what: &str, payload: Box<dyn std::any::Any + Send>) -> Error {
    Error::Value(format!("data: {what}: {}", panic_message(payload.as_ref())))
}

/// The most worker threads one `map_parallel` starts; more asked for are
/// this many. Each is an operating-system thread started on every pass,
/// so a count taken as given (`map_parallel(1 << 40, ..)`) would start
/// threads until the system refused; far more workers than cores only
/// share the cores.
pub const MAX_MAP_WORKERS: usize = 256;

type Job<T> = (u64, T);

/// `map` on `workers` threads, in input order: the consumer pulls
/// upstream itself (so the source is read on one thread, in order), keeps
/// up to `2 * workers` examples in flight, and hands results back by
/// index.
pub(crate) struct OrderedMap<T, U> {
    upstream: Elements<T>,
    upstream_done: bool,
    jobs: Option<Sender<Job<T>>>,
    results: Receiver<(u64, Result<U>)>,
    ready: BTreeMap<u64, Result<U>>,
    next_in: u64,
    next_out: u64,
    in_flight: u64,
}

impl<T: Send + 'static, U: Send + 'static> OrderedMap<T, U> {
    pub(crate) fn start(
        upstream: Elements<T>,
        workers: usize,
        f: Arc<dyn Fn(T) -> Result<U> + Send + Sync>,
    ) -> Result<OrderedMap<T, U>> {
        let (jobs, job_rx) = channel::<Job<T>>();
        let (result_tx, results) = channel();
        let job_rx = Arc::new(Mutex::new(job_rx));
        for w in 0..workers {
            let (job_rx, result_tx, f) = (job_rx.clone(), result_tx.clone(), f.clone());
            std::thread::Builder::new()
                .name(format!("xlafn-data-map-{w}"))
                .spawn(move || work(&job_rx, &result_tx, &*f))
                .map_err(|e| Error::Value(format!("data: cannot start a map worker: {e}")))?;
        }
        Ok(OrderedMap {
            upstream,
            upstream_done: false,
            jobs: Some(jobs),
            results,
            ready: BTreeMap::new(),
            next_in: 0,
            next_out: 0,
            in_flight: 2 * workers as u64,
        })
    }

    /// Pulls upstream until the window of examples in flight is full.
    fn fill(&mut self) {
        while !self.upstream_done && self.next_in - self.next_out < self.in_flight {
            match self.upstream.next() {
                Some(Ok(x)) => {
                    let sent = self.jobs.as_ref().map(|j| j.send((self.next_in, x)));
                    if !matches!(sent, Some(Ok(()))) {
                        let e = Error::Value("data: the map workers stopped".into());
                        self.ready.insert(self.next_in, Err(e));
                    }
                }
                Some(Err(e)) => {
                    self.ready.insert(self.next_in, Err(e));
                }
                None => {
                    self.upstream_done = true;
                    self.jobs = None; // the workers exit once the queue drains
                    break;
                }
            }
            self.next_in += 1;
        }
    }
}

fn work<T, U>(
    jobs: &Mutex<Receiver<Job<T>>>,
    results: &Sender<(u64, Result<U>)>,
    f: &(dyn Fn(T) -> Result<U> + Send + Sync),
) {
    loop {
        // The lock is held only while taking a job, not while running it.
        let job = match jobs.lock() {
            Ok(rx) => rx.recv(),
            Err(_) => return,
        };
        let Ok((index, x)) = job else { return };
        if results
            .send((index, call_guarded("map", index, f, x)))
            .is_err()
        {
            return;
        }
    }
}

impl<T: Send + 'static, U: Send + 'static> Iterator for OrderedMap<T, U> {
    type Item = Result<U>;

    fn next(&mut self) -> Option<Result<U>> {
        loop {
            self.fill();
            if let Some(r) = self.ready.remove(&self.next_out) {
                self.next_out += 1;
                return Some(r);
            }
            if self.upstream_done && self.next_out == self.next_in {
                return None;
            }
            match self.results.recv() {
                Ok((index, r)) => {
                    self.ready.insert(index, r);
                }
                Err(_) => {
                    // Every worker is gone with examples outstanding: only
                    // a failed thread does that. Report each missing one.
                    let index = self.next_out;
                    self.ready.insert(
                        index,
                        Err(Error::Value(format!(
                            "data: map's workers stopped before example {index}"
                        ))),
                    );
                }
            }
        }
    }
}

/// The deepest [`Dataset::prefetch`](super::Dataset::prefetch) buffer, in
/// examples; a deeper one asked for is this deep. The channel allocates
/// every slot when it is made, so a depth taken as given
/// (`prefetch(1 << 30)`) would allocate tens of gigabytes (or abort the
/// process) for a pass of five examples; and a buffer this deep already
/// keeps any consumer fed (`tf.data`'s autotuned buffers stay far smaller).
pub const MAX_PREFETCH_DEPTH: usize = 1024;

/// Runs `upstream` on its own thread, up to `depth` examples ahead (at
/// least 1, at most [`MAX_PREFETCH_DEPTH`]).
pub(crate) fn prefetch<T: Send + 'static>(upstream: Elements<T>, depth: usize) -> Elements<T> {
    let (tx, rx) = sync_channel(depth.clamp(1, MAX_PREFETCH_DEPTH));
    let spawned = std::thread::Builder::new()
        .name("xlafn-data-prefetch".into())
        .spawn(move || produce(upstream, &tx));
    match spawned {
        Ok(_) => Box::new(rx.into_iter()),
        Err(e) => Box::new(std::iter::once(Err(Error::Value(format!(
            "data: cannot start the prefetch thread: {e}"
        ))))),
    }
}

fn produce<T>(mut upstream: Elements<T>, tx: &SyncSender<Result<T>>) {
    loop {
        let item = match catch_unwind(AssertUnwindSafe(|| upstream.next())) {
            Ok(Some(item)) => item,
            Ok(None) => return,
            Err(p) => {
                // An iterator that panicked may be in any state: report it
                // and end the pass rather than pull from it again.
                let what = "the pipeline panicked while prefetching, and this pass stops";
                let _ = tx.send(Err(panicked(what, p)));
                return;
            }
        };
        if tx.send(item).is_err() {
            return; // the consumer is gone
        }
    }
}
