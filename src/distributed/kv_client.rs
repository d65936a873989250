//! Layer: distributed (imports `error`, `frame`, `service`'s limits and
//! the `store` trait it implements). A process's handle on the
//! coordination service: it joins once, then sets, gets and waits.
//!
//! Every request opens its own connection. Requests are rare (the
//! handshake, a barrier, the ids a plugin exchanges when it sets up its
//! collectives), and a blocking get on one thread then never holds up a
//! put on another: a plugin's threads may well wait on each other's keys,
//! which one shared connection would deadlock. It also means no
//! connection sits idle, so the service can close any that dawdle.
//!
//! Nothing waits unbounded: connecting takes at most 10 s, writing a
//! request at most 10 s, and a reply may take what the request waits for
//! on the service plus 10 s.

use super::frame::{self, MAX_KEY_BYTES, MAX_VALUE_BYTES, Reply, Request};
use super::service::MAX_WAIT;
use super::store::DeadProcess;
use crate::error::{Error, ErrorCode, Result};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const IO_TIMEOUT: Duration = Duration::from_secs(10);
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// A process's connection to the coordination service, after joining as
/// one of its processes.
#[derive(Debug)]
pub struct KvClient {
    coordinator: String,
    addrs: Vec<SocketAddr>,
    process_id: u32,
    num_processes: u32,
    /// What this client registered with (its heartbeats carry it).
    token: u64,
}

/// A process's heartbeats, sent by a thread of their own until dropped,
/// which then leaves the run cleanly: to the built-in service on one
/// connection of their own (saying `Leave`, so the service does not take
/// this process for dead when the connection closes), or etcd lease
/// keep-alives (deleting the registration).
pub struct Heartbeats {
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl std::fmt::Debug for Heartbeats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Heartbeats")
    }
}

impl Heartbeats {
    /// Calls `beat` every `interval` on a thread named `name` until the
    /// guard is dropped, then `leave`; a `beat` that returns false ends
    /// the thread at once (there is nobody left to leave).
    pub(super) fn spawn(
        name: &str,
        interval: Duration,
        mut beat: impl FnMut() -> bool + Send + 'static,
        leave: impl FnOnce() + Send + 'static,
    ) -> Result<Heartbeats> {
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                use std::sync::mpsc::RecvTimeoutError;
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(interval) {
                    if !beat() {
                        return;
                    }
                }
                leave();
            })
            .map_err(|e| {
                Error::distributed(ErrorCode::ResourceExhausted, format!("no thread: {e}"))
            })?;
        Ok(Heartbeats {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Heartbeats {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Refuses a process id outside `0..num_processes` or no processes at all.
pub(super) fn check_ids(process_id: usize, num_processes: usize) -> Result<(u32, u32)> {
    let n = u32::try_from(num_processes)
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| {
            Error::distributed(
                ErrorCode::InvalidArgument,
                format!("num_processes must be at least 1 (and fit in u32), got {num_processes}"),
            )
        })?;
    let id = u32::try_from(process_id)
        .ok()
        .filter(|&id| id < n)
        .ok_or_else(|| {
            Error::distributed(
                ErrorCode::InvalidArgument,
                format!("process_id {process_id} is out of range for {num_processes} processes"),
            )
        })?;
    Ok((id, n))
}

pub(super) fn check_key(key: &str, what: &str) -> Result<()> {
    if key.len() > MAX_KEY_BYTES {
        return Err(Error::distributed(
            ErrorCode::InvalidArgument,
            format!(
                "a {what} of {} bytes exceeds the limit of {MAX_KEY_BYTES}",
                key.len()
            ),
        ));
    }
    Ok(())
}

/// A random number that tells this client's registration from another
/// process's with the same id.
pub(super) fn draw_token(process_id: u32) -> u64 {
    use std::hash::BuildHasher;
    std::hash::RandomState::new().hash_one((process_id, std::process::id(), Instant::now()))
}

/// A wait as whole milliseconds for the wire, capped at the service's
/// longest wait.
fn wire_ms(wait: Duration) -> u64 {
    wait.min(MAX_WAIT).as_millis() as u64
}

impl KvClient {
    /// Joins the service at `coordinator` (`host:port`) as process
    /// `process_id` of `num_processes`. While the service cannot be
    /// reached yet (process 0 may start last) it retries until `timeout`.
    /// A second process with the same id gets `AlreadyExistsError`; an id
    /// out of range or a different process count, `InvalidArgumentError`.
    pub fn join(
        coordinator: &str,
        process_id: usize,
        num_processes: usize,
        timeout: Duration,
    ) -> Result<KvClient> {
        let (process_id, num_processes) = check_ids(process_id, num_processes)?;
        let deadline = Instant::now() + timeout;
        let token = draw_token(process_id);
        let register = Request::Register {
            process_id,
            num_processes,
            token,
        };
        loop {
            let attempt = resolve(coordinator).and_then(|addrs| {
                let client = KvClient {
                    coordinator: coordinator.to_string(),
                    addrs,
                    process_id,
                    num_processes,
                    token,
                };
                // Only `Done` is a registration: any other kind means the
                // peer does not speak this protocol, as for every call.
                let reply = client.call(&register, Duration::ZERO)?;
                client.expect_done(reply)?;
                Ok(client)
            });
            match attempt {
                Err(Error::Distributed {
                    code: ErrorCode::Unavailable,
                    message,
                }) if Instant::now() < deadline => {
                    tracing::trace!(%message, "coordination service not reachable yet");
                    std::thread::sleep(RETRY_PAUSE);
                }
                Err(Error::Distributed {
                    code: ErrorCode::Unavailable,
                    message,
                }) => {
                    return Err(Error::distributed(
                        ErrorCode::DeadlineExceeded,
                        format!(
                            "could not join the coordination service at {coordinator} within \
                             {timeout:?}: {message}"
                        ),
                    ));
                }
                other => return other,
            }
        }
    }

    /// Starts this process's heartbeats: one every `interval` on a
    /// connection of their own, each telling the service to take this
    /// process for dead if the next does not come within `timeout` (its
    /// connection closing, as when the process dies, is a death at once).
    /// While they run, every barrier or get that waits on a dead process
    /// fails with an `UnavailableError` naming it.
    pub fn start_heartbeats(&self, interval: Duration, timeout: Duration) -> Result<Heartbeats> {
        let beat = |timeout: Duration| Request::Heartbeat {
            process_id: self.process_id,
            token: self.token,
            timeout_ms: wire_ms(timeout).max(1),
        };
        let mut stream = self.connect()?;
        stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)))
            .map_err(|e| self.unreachable(e))?;
        let body = frame::write_frame(&mut stream, &beat(timeout).encode())
            .and_then(|()| frame::read_frame(&mut frame::Deadlined::new(&stream, IO_TIMEOUT)))
            .map_err(|e| self.context(e))?
            .ok_or_else(|| self.unreachable(std::io::ErrorKind::UnexpectedEof.into()))?;
        match Reply::decode(&body).map_err(|e| self.context(e))? {
            Reply::Done => {}
            Reply::Failed { code, message } => return Err(Error::distributed(code, message)),
            other => return Err(self.unexpected(&other)),
        }
        let (next, leave) = (
            beat(timeout).encode(),
            Request::Leave {
                process_id: self.process_id,
                token: self.token,
            }
            .encode(),
        );
        let mut beats = stream.try_clone().map_err(|e| self.unreachable(e))?;
        Heartbeats::spawn(
            "xlafn-heartbeat",
            interval,
            // A failed write: the coordinator is gone, and the waits say so.
            move || frame::write_frame(&mut beats, &next).is_ok(),
            move || {
                let _ = frame::write_frame(&mut stream, &leave);
            },
        )
    }

    /// This process's id among the processes of the service.
    pub fn process_id(&self) -> usize {
        self.process_id as usize
    }

    /// How many processes the service coordinates.
    pub fn num_processes(&self) -> usize {
        self.num_processes as usize
    }

    /// The coordinator's address as given (`host:port`).
    pub fn coordinator(&self) -> &str {
        &self.coordinator
    }

    /// Stores `value` under `key` for every process, replacing any earlier
    /// value. Keys are at most 4 KiB, values at most 4 MiB.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key, "key")?;
        if value.len() > MAX_VALUE_BYTES {
            return Err(Error::distributed(
                ErrorCode::InvalidArgument,
                format!(
                    "the value for key {key:?} has {} bytes, more than the limit of \
                     {MAX_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        let request = Request::Set {
            key: key.to_string(),
            value: value.to_vec(),
        };
        self.expect_done(self.call(&request, Duration::ZERO)?)
    }

    /// The value of `key`, waiting until some process sets it; after
    /// `timeout` (at most a day), a `DeadlineExceededError` naming the key.
    pub fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        check_key(key, "key")?;
        let request = Request::Get {
            key: key.to_string(),
            timeout_ms: wire_ms(timeout),
        };
        match self.call(&request, timeout.min(MAX_WAIT))? {
            Reply::Value(v) => Ok(v),
            other => Err(self.unexpected(&other)),
        }
    }

    /// The value of `key` if it is set now, without waiting.
    pub fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key, "key")?;
        let request = Request::TryGet {
            key: key.to_string(),
        };
        match self.call(&request, Duration::ZERO)? {
            Reply::Value(v) => Ok(Some(v)),
            Reply::NotFound => Ok(None),
            other => Err(self.unexpected(&other)),
        }
    }

    /// Waits until every process has reached barrier `name`; after
    /// `timeout`, a `DeadlineExceededError` listing the missing processes.
    /// Each name can be passed once.
    pub fn barrier(&self, name: &str, timeout: Duration) -> Result<()> {
        check_key(name, "barrier name")?;
        let request = Request::Barrier {
            name: name.to_string(),
            process_id: self.process_id,
            timeout_ms: wire_ms(timeout),
        };
        self.expect_done(self.call(&request, timeout.min(MAX_WAIT))?)
    }

    /// Waits up to `timeout` until the service finds a process not in
    /// `known` dead. The service lives in process 0: when it cannot be
    /// reached, process 0 is what died (for process 0 itself, an error).
    pub fn await_death(&self, known: &[usize], timeout: Duration) -> Result<Option<DeadProcess>> {
        let request = Request::AwaitDeath {
            known: known
                .iter()
                .filter_map(|&p| u32::try_from(p).ok())
                .collect(),
            timeout_ms: wire_ms(timeout),
        };
        match self.call(&request, timeout.min(MAX_WAIT)) {
            Ok(Reply::Dead { process_id, why }) => Ok(Some(DeadProcess {
                id: process_id as usize,
                why,
            })),
            Ok(Reply::NotFound) => Ok(None),
            Ok(other) => Err(self.unexpected(&other)),
            Err(Error::Distributed {
                code: ErrorCode::Unavailable,
                message,
            }) if self.process_id != 0 && !known.contains(&0) => Ok(Some(DeadProcess {
                id: 0,
                why: format!("it served the coordination service, which is gone ({message})"),
            })),
            Err(e) => Err(e),
        }
    }

    fn expect_done(&self, reply: Reply) -> Result<()> {
        match reply {
            Reply::Done => Ok(()),
            other => Err(self.unexpected(&other)),
        }
    }

    /// A reply of the wrong kind: the service is not speaking this protocol.
    fn unexpected(&self, reply: &Reply) -> Error {
        Error::distributed(
            ErrorCode::DataLoss,
            format!(
                "the coordination service at {} sent an unexpected reply: {reply:?}",
                self.coordinator
            ),
        )
    }

    /// Sends `request` on a fresh connection and reads the reply, which
    /// may take `wait` on the service; a failure reply becomes an error.
    fn call(&self, request: &Request, wait: Duration) -> Result<Reply> {
        let mut stream = self.connect()?;
        let configured = stream
            .set_nodelay(true)
            .and_then(|()| stream.set_write_timeout(Some(IO_TIMEOUT)));
        configured.map_err(|e| self.unreachable(e))?;
        let reply_within = wait.saturating_add(IO_TIMEOUT);
        let body = frame::write_frame(&mut stream, &request.encode())
            .and_then(|()| frame::read_frame(&mut frame::Deadlined::new(&stream, reply_within)))
            .map_err(|e| self.context(e))?
            .ok_or_else(|| {
                Error::distributed(
                    ErrorCode::Unavailable,
                    format!(
                        "the coordination service at {} closed the connection without replying",
                        self.coordinator
                    ),
                )
            })?;
        match Reply::decode(&body).map_err(|e| self.context(e))? {
            Reply::Failed { code, message } => Err(Error::distributed(code, message)),
            reply => Ok(reply),
        }
    }

    fn connect(&self) -> Result<TcpStream> {
        let mut last = None;
        for addr in &self.addrs {
            match TcpStream::connect_timeout(addr, CONNECT_TIMEOUT) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = Some(e),
            }
        }
        Err(self.unreachable(last.unwrap_or_else(|| std::io::ErrorKind::NotFound.into())))
    }

    fn unreachable(&self, e: std::io::Error) -> Error {
        Error::distributed(
            ErrorCode::Unavailable,
            format!(
                "cannot reach the coordination service at {}: {e}",
                self.coordinator
            ),
        )
    }

    /// Names the service in an error about its connection or its frames.
    fn context(&self, e: Error) -> Error {
        match e {
            Error::Distributed { code, message } => Error::distributed(
                code,
                format!("coordination service at {}: {message}", self.coordinator),
            ),
            other => other,
        }
    }
}

/// The addresses `coordinator` names. A malformed address fails at once;
/// a name that does not resolve (yet) is `Unavailable`, so joining retries.
fn resolve(coordinator: &str) -> Result<Vec<SocketAddr>> {
    match coordinator.to_socket_addrs() {
        Ok(addrs) => {
            let addrs: Vec<SocketAddr> = addrs.collect();
            match addrs.is_empty() {
                true => Err(Error::distributed(
                    ErrorCode::Unavailable,
                    format!("coordinator address {coordinator:?} resolves to no address"),
                )),
                false => Ok(addrs),
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::InvalidInput => Err(Error::distributed(
            ErrorCode::InvalidArgument,
            format!("coordinator address {coordinator:?} is not host:port: {e}"),
        )),
        Err(e) => Err(Error::distributed(
            ErrorCode::Unavailable,
            format!("cannot resolve coordinator address {coordinator:?}: {e}"),
        )),
    }
}

impl super::store::CoordinationStore for KvClient {
    fn process_id(&self) -> usize {
        KvClient::process_id(self)
    }

    fn num_processes(&self) -> usize {
        KvClient::num_processes(self)
    }

    fn coordinator(&self) -> &str {
        KvClient::coordinator(self)
    }

    fn max_value_bytes(&self) -> usize {
        MAX_VALUE_BYTES
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        KvClient::set(self, key, value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        KvClient::get(self, key, timeout)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        KvClient::try_get(self, key)
    }

    fn barrier(&self, name: &str, timeout: Duration) -> Result<()> {
        KvClient::barrier(self, name, timeout)
    }

    fn await_death(&self, known: &[usize], timeout: Duration) -> Result<Option<DeadProcess>> {
        KvClient::await_death(self, known, timeout)
    }
}
