//! Layer: distributed (imports `error` and `frame`). The coordination
//! service process 0 runs: a key-value store, the process registry of the
//! handshake and named barriers, served over TCP.
//!
//! Each connection gets a thread, and every wait is bounded: a connection
//! must deliver each frame within the frame timeout (30 s unless set;
//! waiting for the frame included), a
//! blocking get or barrier waits at most what its request asks, capped at
//! a day, and at most `MAX_CONNECTIONS` connections are served at once. The
//! store is bounded too (keys, bytes, barriers), so a hostile peer can
//! make requests fail but not exhaust the coordinator's memory. A peer
//! that sends a malformed frame gets an error reply and its connection is
//! closed; the service goes on serving the others.

use super::frame::{self, Reply, Request};
use crate::error::{Error, ErrorCode, Result};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The most connections served at once; more are answered
/// `UnavailableError` and closed.
pub const MAX_CONNECTIONS: usize = 256;
/// The most keys the store holds.
pub const MAX_KEYS: usize = 65_536;
/// The most bytes (keys and values) the store holds.
pub const MAX_STORE_BYTES: usize = 64 << 20;
/// The most barriers the service remembers.
pub const MAX_BARRIERS: usize = 65_536;
/// The longest a blocking get or barrier waits, whatever it asks for.
pub const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(30);
/// The longest `stop` waits for the connections being served to finish.
const DRAIN_TIMEOUT: Duration = Duration::from_secs(5);

/// A running coordination service; stopped when dropped.
pub struct KvService {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for KvService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "KvService({}, {} processes)",
            self.addr, self.shared.num_processes
        )
    }
}

struct Shared {
    num_processes: u32,
    state: Mutex<State>,
    changed: Condvar,
    stopping: AtomicBool,
    connections: AtomicUsize,
    frame_timeout_ms: AtomicU64,
    /// The liveness connections being read (by serial number), shut down
    /// by `stop` so that their readers end at once; each leaves the map
    /// when its reader ends, so no closed connection stays open here.
    watched: Mutex<HashMap<u64, TcpStream>>,
    next_watch: AtomicU64,
}

/// Removes a liveness connection from `Shared::watched` when its reader
/// ends, whichever way it ends.
struct Watched<'a> {
    shared: &'a Shared,
    serial: u64,
}

impl Drop for Watched<'_> {
    fn drop(&mut self) {
        let mut watched = self
            .shared
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        watched.remove(&self.serial);
    }
}

#[derive(Default)]
struct State {
    values: HashMap<String, Vec<u8>>,
    stored_bytes: usize,
    joined: HashMap<u32, u64>,
    barriers: HashMap<String, Barrier>,
    /// Processes taken for dead, with why: every wait that needs them
    /// fails from then on.
    dead: BTreeMap<u32, String>,
    /// Processes that left (`Leave`): their connection closing is no
    /// death.
    left: BTreeSet<u32>,
}

#[derive(Default)]
struct Barrier {
    arrived: BTreeSet<u32>,
    passed: bool,
}

fn failed(code: ErrorCode, message: impl Into<String>) -> Reply {
    Reply::Failed {
        code,
        message: message.into(),
    }
}

impl KvService {
    /// Starts serving `num_processes` processes on `addr` (`host:port`;
    /// port 0 picks a free one, see [`KvService::local_addr`]).
    pub fn start(addr: &str, num_processes: usize) -> Result<KvService> {
        let num_processes = u32::try_from(num_processes)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| {
                Error::invalid(
                    "KvService::start",
                    format!("num_processes must be in 1..=u32::MAX, got {num_processes}"),
                )
            })?;
        let listener = TcpListener::bind(addr).map_err(|e| {
            Error::distributed(
                ErrorCode::Unavailable,
                format!("cannot start the coordination service on {addr}: {e}"),
            )
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::distributed(ErrorCode::Unavailable, format!("{addr}: {e}")))?;
        let shared = Arc::new(Shared {
            num_processes,
            state: Mutex::default(),
            changed: Condvar::new(),
            stopping: AtomicBool::new(false),
            connections: AtomicUsize::new(0),
            frame_timeout_ms: AtomicU64::new(DEFAULT_FRAME_TIMEOUT.as_millis() as u64),
            watched: Mutex::default(),
            next_watch: AtomicU64::new(0),
        });
        let accept_shared = shared.clone();
        let accept = std::thread::Builder::new()
            .name("xlafn-kv-accept".into())
            .spawn(move || accept_loop(listener, accept_shared))
            .map_err(|e| {
                Error::distributed(ErrorCode::ResourceExhausted, format!("no thread: {e}"))
            })?;
        tracing::debug!(%addr, num_processes, "coordination service started");
        Ok(KvService {
            addr,
            shared,
            accept: Some(accept),
        })
    }

    /// The address the service listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// How long a connection may take to deliver a frame, from the moment
    /// the service waits for it (so idling counts), before it is closed;
    /// 30 s unless set.
    pub fn set_frame_timeout(&self, timeout: Duration) {
        let ms = timeout.as_millis().clamp(1, u64::MAX as u128) as u64;
        self.shared.frame_timeout_ms.store(ms, Ordering::Relaxed);
    }

    /// How many connections are being served now.
    pub fn open_connections(&self) -> usize {
        self.shared.connections.load(Ordering::Relaxed)
    }

    /// Stops accepting connections, wakes every waiting get and barrier
    /// (they fail with `UnavailableError`) and waits, at most 5 s, until
    /// the connections being served are done. That wait matters: the
    /// replies of a barrier that just passed are still being written, and
    /// a process that exits right after stopping would cut them off.
    pub fn stop(&mut self) {
        self.shared.stopping.store(true, Ordering::SeqCst);
        // Taking the lock orders the flag before any waiter's next check,
        // so no waiter misses the wake-up.
        drop(self.shared.lock());
        self.shared.changed.notify_all();
        for stream in self
            .shared
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            let _ = stream.1.shutdown(std::net::Shutdown::Both);
        }
        if let Some(accept) = self.accept.take() {
            // Wake the blocking accept with a connection of our own. Should
            // that fail, the accept thread is left behind rather than
            // joined, so stopping never hangs.
            let wake = TcpStream::connect_timeout(&wake_addr(self.addr), Duration::from_secs(1));
            if wake.is_ok() {
                let _ = accept.join();
            }
        }
        let deadline = Instant::now() + DRAIN_TIMEOUT;
        while self.open_connections() > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for KvService {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Where to connect to reach a listener bound to `addr` (a wildcard
/// address is reached through loopback).
fn wake_addr(addr: SocketAddr) -> SocketAddr {
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    SocketAddr::new(ip, addr.port())
}

fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else {
            // Out of descriptors, say: pause rather than spin, and let
            // `stop` end the loop even if its wake-up cannot connect.
            if shared.stopping.load(Ordering::SeqCst) {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
            continue;
        };
        if shared.stopping.load(Ordering::SeqCst) {
            // `stop`'s own wake-up, or a late client that should not wait.
            refuse(stream, "the coordination service is shutting down");
            break;
        }
        if shared.connections.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
            refuse(
                stream,
                "the coordination service has too many open connections",
            );
            continue;
        }
        let conn_shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("xlafn-kv-conn".into())
            .spawn(move || {
                serve(stream, &conn_shared);
                conn_shared.connections.fetch_sub(1, Ordering::SeqCst);
            });
        if spawned.is_err() {
            shared.connections.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

/// Answers a connection that will not be served, without waiting on it.
fn refuse(mut stream: TcpStream, message: &str) {
    let _ = stream.set_write_timeout(Some(Duration::from_secs(1)));
    let _ = frame::write_frame(
        &mut stream,
        &failed(ErrorCode::Unavailable, message).encode(),
    );
}

/// Serves one connection until it closes, fails or sends garbage.
fn serve(mut stream: TcpStream, shared: &Shared) {
    let timeout = Duration::from_millis(shared.frame_timeout_ms.load(Ordering::Relaxed));
    let _ = stream.set_nodelay(true);
    if stream.set_write_timeout(Some(timeout)).is_err() {
        return;
    }
    loop {
        let read = frame::read_frame(&mut frame::Deadlined::new(&stream, timeout));
        let request = match read {
            Ok(None) => return,
            Ok(Some(body)) => Request::decode(&body),
            Err(e) => Err(e),
        };
        let reply = match request {
            Ok(Request::Heartbeat {
                process_id,
                token,
                timeout_ms,
            }) => {
                watch(stream, shared, process_id, token, timeout_ms);
                return;
            }
            Ok(request) => shared.handle(request),
            Err(e) => {
                tracing::debug!(error = %e, "coordination service: closing a connection");
                let (code, message) = match e {
                    Error::Distributed { code, message } => (code, message),
                    other => (ErrorCode::InvalidArgument, other.to_string()),
                };
                let _ = frame::write_frame(&mut stream, &failed(code, message).encode());
                close_after_error(stream);
                return;
            }
        };
        if frame::write_frame(&mut stream, &reply.encode()).is_err() {
            return;
        }
    }
}

/// Serves process `process_id`'s liveness connection, whose first
/// heartbeat has just arrived: answers it, then reads heartbeats until the
/// process leaves. No heartbeat within `timeout_ms`, a closed connection
/// or a stray frame there marks the process dead.
fn watch(mut stream: TcpStream, shared: &Shared, process_id: u32, token: u64, timeout_ms: u64) {
    let registered = shared.lock().joined.get(&process_id) == Some(&token);
    if !registered {
        let reply = failed(
            ErrorCode::FailedPrecondition,
            format!("heartbeat from process {process_id}, which has not joined with this token"),
        );
        let _ = frame::write_frame(&mut stream, &reply.encode());
        return;
    }
    if frame::write_frame(&mut stream, &Reply::Done.encode()).is_err() {
        shared.mark_dead(process_id, "its liveness connection failed".into());
        return;
    }
    let serial = shared.next_watch.fetch_add(1, Ordering::Relaxed);
    if let Ok(clone) = stream.try_clone() {
        shared
            .watched
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(serial, clone);
    }
    let _watched = Watched { shared, serial };
    let mut timeout = Duration::from_millis(timeout_ms.max(1)).min(MAX_WAIT);
    loop {
        let read = frame::read_frame(&mut frame::Deadlined::new(&stream, timeout));
        if shared.stopping.load(Ordering::SeqCst) {
            return;
        }
        let why = match read.and_then(|b| b.map(|b| Request::decode(&b)).transpose()) {
            Ok(Some(Request::Heartbeat {
                process_id: p,
                timeout_ms,
                ..
            })) if p == process_id => {
                timeout = Duration::from_millis(timeout_ms.max(1)).min(MAX_WAIT);
                continue;
            }
            Ok(Some(Request::Leave {
                process_id: p,
                token: t,
            })) if p == process_id && t == token => {
                shared.lock().left.insert(process_id);
                return;
            }
            Ok(Some(_))
            | Err(Error::Distributed {
                code: ErrorCode::InvalidArgument,
                ..
            }) => "it sent a stray frame on its liveness connection".to_string(),
            Ok(None) => "its connection to the coordinator closed (the process exited or was \
                         killed)"
                .to_string(),
            Err(Error::Distributed {
                code: ErrorCode::DeadlineExceeded,
                ..
            }) => {
                format!("no heartbeat for {}", show_ms(timeout.as_millis() as u64))
            }
            Err(e) => format!("its liveness connection failed: {e}"),
        };
        shared.mark_dead(process_id, why);
        return;
    }
}

/// Closes a connection after its error reply so that the reply arrives:
/// closing with unread bytes pending would reset the connection and could
/// discard the reply, so the rest of the peer's bytes (a bounded amount,
/// for a bounded time) are read and dropped first.
fn close_after_error(stream: TcpStream) {
    let _ = stream.shutdown(std::net::Shutdown::Write);
    let mut drain = frame::Deadlined::new(&stream, Duration::from_millis(500));
    let _ = std::io::copy(&mut Read::take(&mut drain, 1 << 20), &mut std::io::sink());
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn handle(&self, request: Request) -> Reply {
        match request {
            Request::Set { key, value } => self.set(key, value),
            Request::Get { key, timeout_ms } => {
                let waiting = format!("waiting for key {key:?}");
                let found = self.wait_for(timeout_ms, |s| match s.values.get(&key) {
                    Some(v) => Some(Ok(v.clone())),
                    None => Self::dead_reply(s, &waiting, |_| true).map(Err),
                });
                match found {
                    Ok(Some(Ok(value))) => Reply::Value(value),
                    Ok(Some(Err(reply))) => reply,
                    Ok(None) => failed(
                        ErrorCode::DeadlineExceeded,
                        format!("key {key:?} was not set within {}", show_ms(timeout_ms)),
                    ),
                    Err(reply) => reply,
                }
            }
            Request::TryGet { key } => match self.lock().values.get(&key) {
                Some(value) => Reply::Value(value.clone()),
                None => Reply::NotFound,
            },
            Request::Register {
                process_id,
                num_processes,
                token,
            } => self.register(process_id, num_processes, token),
            Request::Barrier {
                name,
                process_id,
                timeout_ms,
            } => self.barrier(&name, process_id, timeout_ms),
            Request::AwaitDeath { known, timeout_ms } => {
                let found = self.wait_for(timeout_ms, |s| {
                    s.dead
                        .iter()
                        .find(|(id, _)| !known.contains(id))
                        .map(|(&process_id, why)| Reply::Dead {
                            process_id,
                            why: why.clone(),
                        })
                });
                match found {
                    Ok(Some(dead)) => dead,
                    Ok(None) => Reply::NotFound,
                    Err(reply) => reply,
                }
            }
            // Only the first frame of a liveness connection (see `watch`).
            Request::Heartbeat { .. } | Request::Leave { .. } => failed(
                ErrorCode::InvalidArgument,
                "a heartbeat or leave outside a liveness connection",
            ),
        }
    }

    /// Takes process `id` for dead (unless it left) and wakes every wait.
    fn mark_dead(&self, id: u32, why: String) {
        let mut state = self.lock();
        if state.left.contains(&id) || state.dead.contains_key(&id) {
            return;
        }
        tracing::warn!(process = id, reason = %why, "coordination service: a process died");
        state.dead.insert(id, why);
        drop(state);
        self.changed.notify_all();
    }

    /// The failure of a wait that needs a dead process, naming it.
    fn dead_reply(state: &State, waiting: &str, needed: impl Fn(u32) -> bool) -> Option<Reply> {
        let (id, why) = state.dead.iter().find(|(id, _)| needed(**id))?;
        Some(failed(
            ErrorCode::Unavailable,
            format!("{waiting}: process {id} is dead: {why}"),
        ))
    }

    fn set(&self, key: String, value: Vec<u8>) -> Reply {
        let mut state = self.lock();
        let old = state.values.get(&key).map_or(0, |v| key.len() + v.len());
        let stored = state.stored_bytes - old + key.len() + value.len();
        if old == 0 && state.values.len() >= MAX_KEYS {
            return failed(
                ErrorCode::ResourceExhausted,
                format!("the coordination service holds its limit of {MAX_KEYS} keys"),
            );
        }
        if stored > MAX_STORE_BYTES {
            return failed(
                ErrorCode::ResourceExhausted,
                format!(
                    "storing key {key:?} would exceed the service's limit of {MAX_STORE_BYTES} bytes"
                ),
            );
        }
        state.stored_bytes = stored;
        state.values.insert(key, value);
        drop(state);
        self.changed.notify_all();
        Reply::Done
    }

    fn register(&self, process_id: u32, num_processes: u32, token: u64) -> Reply {
        if num_processes != self.num_processes {
            return failed(
                ErrorCode::InvalidArgument,
                format!(
                    "process {process_id} was started with num_processes={num_processes}, \
                     but the coordinator serves {}",
                    self.num_processes
                ),
            );
        }
        if process_id >= num_processes {
            return failed(
                ErrorCode::InvalidArgument,
                format!("process_id {process_id} is out of range for {num_processes} processes"),
            );
        }
        let mut state = self.lock();
        match state.joined.get(&process_id) {
            Some(&t) if t == token => Reply::Done,
            Some(_) => failed(
                ErrorCode::AlreadyExists,
                format!(
                    "process_id {process_id} has already joined: two processes were started \
                     with the same process_id"
                ),
            ),
            None => {
                state.joined.insert(process_id, token);
                drop(state);
                self.changed.notify_all();
                Reply::Done
            }
        }
    }

    fn barrier(&self, name: &str, process_id: u32, timeout_ms: u64) -> Reply {
        {
            let mut state = self.lock();
            if !state.joined.contains_key(&process_id) {
                return failed(
                    ErrorCode::FailedPrecondition,
                    format!("process {process_id} reached barrier {name:?} without joining"),
                );
            }
            if !state.barriers.contains_key(name) && state.barriers.len() >= MAX_BARRIERS {
                return failed(
                    ErrorCode::ResourceExhausted,
                    format!("the coordination service holds its limit of {MAX_BARRIERS} barriers"),
                );
            }
            let barrier = state.barriers.entry(name.to_string()).or_default();
            if barrier.passed {
                return failed(
                    ErrorCode::FailedPrecondition,
                    format!("barrier {name:?} was already passed: barrier names are single-use"),
                );
            }
            barrier.arrived.insert(process_id);
            if barrier.arrived.len() == self.num_processes as usize {
                barrier.passed = true;
                drop(state);
                self.changed.notify_all();
                return Reply::Done;
            }
        }
        let waiting = format!("barrier {name:?}");
        let passed = self.wait_for(timeout_ms, |s| {
            let barrier = s.barriers.get(name);
            if barrier.is_some_and(|b| b.passed) {
                return Some(Ok(()));
            }
            let arrived = |p: u32| barrier.is_some_and(|b| b.arrived.contains(&p));
            Self::dead_reply(s, &waiting, |p| !arrived(p)).map(Err)
        });
        match passed {
            Ok(Some(Ok(()))) => Reply::Done,
            Ok(Some(Err(reply))) => reply,
            Ok(None) => {
                let state = self.lock();
                let arrived = state
                    .barriers
                    .get(name)
                    .map(|b| b.arrived.clone())
                    .unwrap_or_default();
                let missing: Vec<u32> = (0..self.num_processes)
                    .filter(|p| !arrived.contains(p))
                    .collect();
                failed(
                    ErrorCode::DeadlineExceeded,
                    format!(
                        "barrier {name:?} timed out after {}: {} of {} processes arrived \
                         (missing: {missing:?})",
                        show_ms(timeout_ms),
                        arrived.len(),
                        self.num_processes
                    ),
                )
            }
            Err(reply) => reply,
        }
    }

    /// Waits until `ready` finds something, at most `timeout_ms` (capped
    /// at `MAX_WAIT`): `Ok(None)` on timeout, `Err` when the service stops.
    fn wait_for<T>(
        &self,
        timeout_ms: u64,
        mut ready: impl FnMut(&State) -> Option<T>,
    ) -> std::result::Result<Option<T>, Reply> {
        let wait = Duration::from_millis(timeout_ms).min(MAX_WAIT);
        let deadline = Instant::now() + wait;
        let mut state = self.lock();
        loop {
            if let Some(found) = ready(&state) {
                return Ok(Some(found));
            }
            if self.stopping.load(Ordering::SeqCst) {
                return Err(failed(
                    ErrorCode::Unavailable,
                    "the coordination service is shutting down",
                ));
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(None);
            }
            state = self
                .changed
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A wait in milliseconds as people read it (`250ms`, `5s`).
pub(super) fn show_ms(ms: u64) -> String {
    match ms {
        ms if ms % 1000 == 0 => format!("{}s", ms / 1000),
        ms => format!("{ms}ms"),
    }
}
