//! Layer: distributed (imports `error`, `store`'s trait, `kv_client`'s
//! id and key checks and heartbeat thread, `service`'s duration format;
//! ureq, serde_json and base64 from outside). The coordination store on
//! an etcd cluster the site already runs.
//!
//! It speaks etcd's v3 API through the JSON gateway every etcd since 3.4
//! serves on its client port (`POST /v3/kv/range`, `/v3/kv/txn`,
//! `/v3/lease/grant`, ...; keys and values in base64), over plain HTTP.
//! The gRPC client crates need an async runtime, a TLS stack and protoc
//! at build time; this needs one small blocking HTTP client. TLS and
//! etcd's authentication are not supported yet.
//!
//! Layout, under the run prefix `xlafn/runs/<run id>/`:
//! - `processes/<id>`: each process's registration, created only if
//!   absent (a second process with that id is `AlreadyExistsError`) and
//!   held by the process's lease;
//! - `<generation>/kv/<key>` and `<generation>/barriers/<name>/<id>`: the
//!   run's values and barrier arrivals, under the revision at which
//!   process 0 registered, so a run that reuses a run id never sees the
//!   keys of the one before it.
//!
//! Liveness: every key a process writes is attached to its lease, whose
//! time to live is the heartbeat timeout and which its heartbeats keep
//! alive. A process that dies or hangs loses its lease: its keys vanish,
//! and a wait that needs it finds its registration gone and fails naming
//! it. A clean shutdown deletes the registration only, so the id can be
//! reused at once while the values expire with the lease.
//!
//! Waits poll (every 10 ms at first, backing off to 200 ms): a run's
//! waits are few, and a poll needs no watch stream.

use super::kv_client::{Heartbeats, check_key};
use super::service::show_ms;
use super::store::{CoordinationStore, DeadProcess};
use crate::error::{Error, ErrorCode, Result};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest value stored: etcd refuses requests over 1.5 MiB unless
/// started with a larger `--max-request-bytes`.
pub const ETCD_MAX_VALUE_BYTES: usize = 1 << 20;
/// The longest reply read from etcd (a range of values, base64 in JSON).
const MAX_REPLY_BYTES: u64 = 16 << 20;
/// How long one HTTP request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const FIRST_POLL: Duration = Duration::from_millis(10);
const LAST_POLL: Duration = Duration::from_millis(200);

/// A process's handle on a run's keys in etcd.
pub struct EtcdStore {
    inner: Arc<Inner>,
    /// `<run prefix><generation>/`.
    generation: String,
}

struct Inner {
    agent: ureq::Agent,
    /// `http://host:port` of each endpoint.
    endpoints: Vec<String>,
    /// `xlafn/runs/<run id>/`.
    prefix: String,
    /// For messages: the first endpoint and the prefix.
    coordinator: String,
    process_id: u32,
    num_processes: u32,
    lease: i64,
    /// The processes ever seen registered: one of them whose registration
    /// is gone is dead.
    seen: Mutex<BTreeSet<u32>>,
}

impl std::fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EtcdStore")
            .field("coordinator", &self.inner.coordinator)
            .field("process_id", &self.inner.process_id)
            .field("num_processes", &self.inner.num_processes)
            .finish()
    }
}

/// `http://host:port` for an endpoint given with or without the scheme.
fn endpoint_url(endpoint: &str) -> Result<String> {
    let bare = endpoint.trim_end_matches('/');
    if bare.starts_with("https://") {
        return Err(Error::distributed(
            ErrorCode::Unimplemented,
            format!(
                "etcd endpoint {endpoint:?}: TLS is not supported yet; use an http:// endpoint"
            ),
        ));
    }
    let host_port = bare.strip_prefix("http://").unwrap_or(bare);
    let valid = !host_port.is_empty()
        && !host_port.contains('/')
        && host_port
            .rsplit_once(':')
            .is_some_and(|(host, port)| !host.is_empty() && port.parse::<u16>().is_ok());
    match valid {
        true => Ok(format!("http://{host_port}")),
        false => Err(Error::distributed(
            ErrorCode::InvalidArgument,
            format!("etcd endpoint {endpoint:?} is not host:port or http://host:port"),
        )),
    }
}

/// The end of the range of keys that start with `prefix`.
fn prefix_end(prefix: &str) -> Vec<u8> {
    let mut end = prefix.as_bytes().to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn b64(bytes: &[u8]) -> String {
    B64.encode(bytes)
}

/// An int64 of etcd's JSON, which the gateway writes as a string.
fn int(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => s.parse().ok(),
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

/// A duration as the built-in service's messages show it.
fn show(d: Duration) -> String {
    show_ms(u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Sleeps for the next poll, not past `deadline`; false once it is past.
fn pause(poll: &mut Duration, deadline: Instant) -> bool {
    let now = Instant::now();
    if now >= deadline {
        return false;
    }
    std::thread::sleep((*poll).min(deadline - now));
    *poll = (*poll * 2).min(LAST_POLL);
    true
}

impl Inner {
    /// POSTs `body` to `path` on the first endpoint that answers.
    fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let text = body.to_string();
        let mut last = String::new();
        for endpoint in &self.endpoints {
            let sent = self
                .agent
                .post(format!("{endpoint}{path}"))
                .content_type("application/json")
                .send(text.as_str());
            let mut response = match sent {
                Ok(r) => r,
                Err(e) => {
                    last = format!("{endpoint}: {e}");
                    continue;
                }
            };
            let status = response.status().as_u16();
            let reply = response
                .body_mut()
                .with_config()
                .limit(MAX_REPLY_BYTES)
                .read_to_string()
                .map_err(|e| self.failure(ErrorCode::DataLoss, format!("reading a reply: {e}")))?;
            let value: Value = serde_json::from_str(&reply).map_err(|e| {
                self.failure(
                    ErrorCode::DataLoss,
                    format!("a reply that is not JSON: {e}"),
                )
            })?;
            if status != 200 {
                let message = value["message"].as_str().unwrap_or(&reply).to_string();
                let code = match value["code"].as_i64() {
                    Some(3) => ErrorCode::InvalidArgument,
                    Some(5) => ErrorCode::NotFound,
                    Some(8) => ErrorCode::ResourceExhausted,
                    Some(14) => ErrorCode::Unavailable,
                    _ => ErrorCode::Internal,
                };
                return Err(self.failure(code, format!("{path}: HTTP {status}: {message}")));
            }
            return Ok(value);
        }
        Err(self.failure(ErrorCode::Unavailable, format!("cannot reach etcd: {last}")))
    }

    fn failure(&self, code: ErrorCode, message: String) -> Error {
        Error::distributed(code, format!("etcd store {}: {message}", self.coordinator))
    }

    /// The key-value pairs under `key` (with `prefix`, every key that
    /// starts with it).
    fn range(&self, key: &str, prefix: bool, keys_only: bool) -> Result<Vec<(String, Value)>> {
        let mut request = json!({ "key": b64(key.as_bytes()), "keys_only": keys_only });
        if prefix {
            request["range_end"] = json!(b64(&prefix_end(key)));
        }
        let reply = self.post("/v3/kv/range", &request)?;
        let kvs = reply["kvs"].as_array().cloned().unwrap_or_default();
        kvs.into_iter()
            .map(|kv| {
                let key = kv["key"]
                    .as_str()
                    .and_then(|k| B64.decode(k).ok())
                    .and_then(|k| String::from_utf8(k).ok())
                    .ok_or_else(|| self.failure(ErrorCode::DataLoss, "a malformed key".into()))?;
                Ok((key, kv))
            })
            .collect()
    }

    fn value_of(&self, kv: &Value) -> Result<Vec<u8>> {
        match kv.get("value").and_then(Value::as_str) {
            None => Ok(Vec::new()),
            Some(v) => B64
                .decode(v)
                .map_err(|e| self.failure(ErrorCode::DataLoss, format!("a malformed value: {e}"))),
        }
    }

    /// Creates `key` with `value` on this process's lease if it does not
    /// exist; false if it did.
    fn create(&self, key: &str, value: &[u8]) -> Result<bool> {
        let key = b64(key.as_bytes());
        let request = json!({
            "compare": [{ "key": key, "target": "CREATE", "result": "EQUAL", "create_revision": "0" }],
            "success": [{ "request_put": { "key": key, "value": b64(value), "lease": self.lease.to_string() } }],
        });
        let reply = self.post("/v3/kv/txn", &request)?;
        Ok(reply["succeeded"].as_bool().unwrap_or(false))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        let request = json!({
            "key": b64(key.as_bytes()),
            "value": b64(value),
            "lease": self.lease.to_string(),
        });
        self.post("/v3/kv/put", &request).map(drop)
    }

    /// Deletes `key` if this process's lease holds it (so a process that
    /// failed to register never deletes the registration of the one that
    /// did).
    fn delete_own(&self, key: &str) -> Result<()> {
        let key = b64(key.as_bytes());
        let request = json!({
            "compare": [{ "key": key, "target": "LEASE", "result": "EQUAL", "lease": self.lease.to_string() }],
            "success": [{ "request_delete_range": { "key": key } }],
        });
        self.post("/v3/kv/txn", &request).map(drop)
    }

    /// The ids registered now, as `(id, num_processes they were started
    /// with, create revision)`.
    fn registered(&self) -> Result<Vec<(u32, i64, i64)>> {
        let dir = format!("{}processes/", self.prefix);
        let mut found = Vec::new();
        for (key, kv) in self.range(&dir, true, false)? {
            let Some(id) = key.strip_prefix(&dir).and_then(|id| id.parse::<u32>().ok()) else {
                continue;
            };
            let count = String::from_utf8(self.value_of(&kv)?)
                .ok()
                .and_then(|v| v.parse::<i64>().ok())
                .unwrap_or(-1);
            let revision = kv.get("create_revision").and_then(int).unwrap_or(0);
            found.push((id, count, revision));
        }
        Ok(found)
    }

    /// The processes that registered once and whose registration is gone
    /// (their lease expired, or they left), in id order.
    fn gone(&self) -> Result<Vec<u32>> {
        let alive: BTreeSet<u32> = self.registered()?.into_iter().map(|r| r.0).collect();
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.extend(alive.iter().copied());
        Ok(seen
            .iter()
            .copied()
            .filter(|p| !alive.contains(p))
            .collect())
    }

    /// An error naming a process among `needed` that registered once and
    /// whose registration is gone (its lease expired), if there is one.
    fn dead(&self, waiting: &str, needed: impl Fn(u32) -> bool) -> Result<Option<Error>> {
        let dead = self.gone()?.into_iter().find(|p| needed(*p));
        Ok(dead.map(|p| {
            self.failure(
                ErrorCode::Unavailable,
                format!("{waiting}: process {p} is dead: {LEASE_EXPIRED}"),
            )
        }))
    }
}

/// Why a process whose registration vanished is taken for dead.
const LEASE_EXPIRED: &str = "its etcd lease expired (no heartbeat within the heartbeat timeout)";

impl EtcdStore {
    /// Joins the run `run_id` in the etcd at `endpoints` as process
    /// `process_id` of `num_processes`, with a lease that lives
    /// `lease_ttl` (rounded up to whole seconds) past the last heartbeat,
    /// kept alive every `heartbeat_interval` until the returned guard is
    /// dropped (a clean leave). While etcd cannot be reached, or process 0 has not registered yet,
    /// it retries until `timeout`.
    pub fn join(
        endpoints: &[String],
        run_id: &str,
        process_id: usize,
        num_processes: usize,
        lease_ttl: Duration,
        heartbeat_interval: Duration,
        timeout: Duration,
    ) -> Result<(EtcdStore, Heartbeats)> {
        let (id, n) = super::kv_client::check_ids(process_id, num_processes)?;
        if endpoints.is_empty() {
            return Err(Error::distributed(
                ErrorCode::InvalidArgument,
                "the etcd store needs at least one endpoint".to_string(),
            ));
        }
        let endpoints = endpoints
            .iter()
            .map(|e| endpoint_url(e))
            .collect::<Result<Vec<_>>>()?;
        check_key(run_id, "run id")?;
        let prefix = format!("xlafn/runs/{run_id}/");
        let agent = ureq::Agent::new_with_config(
            ureq::Agent::config_builder()
                .timeout_global(Some(REQUEST_TIMEOUT))
                .http_status_as_error(false)
                .build(),
        );
        let mut inner = Inner {
            agent,
            coordinator: format!("{} ({prefix})", endpoints[0]),
            endpoints,
            prefix,
            process_id: id,
            num_processes: n,
            lease: 0,
            seen: Mutex::default(),
        };
        let deadline = Instant::now() + timeout;
        let ttl = lease_ttl.as_secs_f64().ceil().max(1.0) as i64;
        let mut poll = FIRST_POLL;
        let grant = loop {
            match inner.post("/v3/lease/grant", &json!({ "TTL": ttl.to_string() })) {
                Ok(reply) => break reply,
                Err(Error::Distributed {
                    code: ErrorCode::Unavailable,
                    message,
                }) => {
                    if !pause(&mut poll, deadline) {
                        return Err(Error::distributed(
                            ErrorCode::DeadlineExceeded,
                            format!("could not reach etcd within {}: {message}", show(timeout)),
                        ));
                    }
                }
                Err(other) => return Err(other),
            }
        };
        inner.lease = grant.get("ID").and_then(int).ok_or_else(|| {
            inner.failure(
                ErrorCode::DataLoss,
                format!("a lease grant without an ID: {grant}"),
            )
        })?;
        let inner = Arc::new(inner);
        // Beat from the start: waiting for process 0 may outlast the lease.
        let heartbeats = start_heartbeats(inner.clone(), heartbeat_interval)?;
        let mine = format!("{}processes/{id}", inner.prefix);
        if !inner.create(&mine, n.to_string().as_bytes())? {
            return Err(inner.failure(
                ErrorCode::AlreadyExists,
                format!(
                    "process_id {id} has already joined: two processes were started with the same \
                     process_id (or a run with this run id ended without shutdown less than \
                     {ttl}s ago)"
                ),
            ));
        }
        // From here on, an error drops the heartbeats, which deletes the
        // registration.
        let generation = Self::generation(&inner, deadline, timeout)?;
        Ok((EtcdStore { inner, generation }, heartbeats))
    }

    /// Waits for process 0's registration and checks the process counts:
    /// the generation prefix is the revision at which process 0 joined.
    fn generation(inner: &Inner, deadline: Instant, timeout: Duration) -> Result<String> {
        let mut poll = FIRST_POLL;
        loop {
            let registered = inner.registered()?;
            if let Some((p, count, _)) = registered
                .iter()
                .find(|r| r.1 != i64::from(inner.num_processes))
            {
                return Err(inner.failure(
                    ErrorCode::InvalidArgument,
                    format!(
                        "process {p} was started with num_processes={count}, but this process \
                         with num_processes={}",
                        inner.num_processes
                    ),
                ));
            }
            if let Some((_, _, revision)) = registered.iter().find(|r| r.0 == 0) {
                return Ok(format!("{}{revision}/", inner.prefix));
            }
            if !pause(&mut poll, deadline) {
                return Err(inner.failure(
                    ErrorCode::DeadlineExceeded,
                    format!("process 0 did not join within {}", show(timeout)),
                ));
            }
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}kv/{key}", self.generation)
    }
}

impl CoordinationStore for EtcdStore {
    fn process_id(&self) -> usize {
        self.inner.process_id as usize
    }

    fn num_processes(&self) -> usize {
        self.inner.num_processes as usize
    }

    fn coordinator(&self) -> &str {
        &self.inner.coordinator
    }

    fn max_value_bytes(&self) -> usize {
        ETCD_MAX_VALUE_BYTES
    }

    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        check_key(key, "key")?;
        if value.len() > ETCD_MAX_VALUE_BYTES {
            return Err(Error::distributed(
                ErrorCode::InvalidArgument,
                format!(
                    "the value for key {key:?} has {} bytes, more than the etcd store's limit \
                     of {ETCD_MAX_VALUE_BYTES}",
                    value.len()
                ),
            ));
        }
        self.inner.put(&self.key(key), value)
    }

    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        check_key(key, "key")?;
        let deadline = Instant::now() + timeout;
        let waiting = format!("waiting for key {key:?}");
        let mut poll = FIRST_POLL;
        loop {
            if let Some(value) = self.try_get(key)? {
                return Ok(value);
            }
            if let Some(dead) = self.inner.dead(&waiting, |_| true)? {
                return Err(dead);
            }
            if !pause(&mut poll, deadline) {
                return Err(Error::distributed(
                    ErrorCode::DeadlineExceeded,
                    format!("key {key:?} was not set within {}", show(timeout)),
                ));
            }
        }
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        check_key(key, "key")?;
        match self.inner.range(&self.key(key), false, false)?.first() {
            Some((_, kv)) => self.inner.value_of(kv).map(Some),
            None => Ok(None),
        }
    }

    fn barrier(&self, name: &str, timeout: Duration) -> Result<()> {
        check_key(name, "barrier name")?;
        let dir = format!("{}barriers/{name}/", self.generation);
        let mine = format!("{dir}{}", self.inner.process_id);
        if !self.inner.create(&mine, b"")? {
            return Err(Error::distributed(
                ErrorCode::FailedPrecondition,
                format!("barrier {name:?} was already passed: barrier names are single-use"),
            ));
        }
        let deadline = Instant::now() + timeout;
        let waiting = format!("barrier {name:?}");
        let mut poll = FIRST_POLL;
        loop {
            let arrived: BTreeSet<u32> = self
                .inner
                .range(&dir, true, true)?
                .into_iter()
                .filter_map(|(k, _)| k.strip_prefix(&dir)?.parse().ok())
                .collect();
            if arrived.len() >= self.inner.num_processes as usize {
                // Whoever arrived had registered: from now on, a missing
                // registration of theirs is a death.
                let mut seen = self.inner.seen.lock().unwrap_or_else(|e| e.into_inner());
                seen.extend(arrived);
                return Ok(());
            }
            if let Some(dead) = self.inner.dead(&waiting, |p| !arrived.contains(&p))? {
                return Err(dead);
            }
            if !pause(&mut poll, deadline) {
                let missing: Vec<u32> = (0..self.inner.num_processes)
                    .filter(|p| !arrived.contains(p))
                    .collect();
                return Err(Error::distributed(
                    ErrorCode::DeadlineExceeded,
                    format!(
                        "barrier {name:?} timed out after {}: {} of {} processes arrived \
                         (missing: {missing:?})",
                        show(timeout),
                        arrived.len(),
                        self.inner.num_processes
                    ),
                ));
            }
        }
    }

    fn await_death(&self, known: &[usize], timeout: Duration) -> Result<Option<DeadProcess>> {
        let deadline = Instant::now() + timeout;
        let mut poll = FIRST_POLL;
        loop {
            let dead = self.inner.gone()?.into_iter().map(|p| p as usize);
            if let Some(id) = dead.into_iter().find(|p| !known.contains(p)) {
                return Ok(Some(DeadProcess {
                    id,
                    why: LEASE_EXPIRED.into(),
                }));
            }
            if !pause(&mut poll, deadline) {
                return Ok(None);
            }
        }
    }
}

/// Keeps a process's lease alive: a keep-alive every `interval` until
/// the returned guard is dropped, which then deletes the process's
/// registration.
fn start_heartbeats(inner: Arc<Inner>, interval: Duration) -> Result<Heartbeats> {
    let body = json!({ "ID": inner.lease.to_string() });
    let beating = inner.clone();
    Heartbeats::spawn(
        "xlafn-etcd-lease",
        interval,
        move || match beating.post("/v3/lease/keepalive", &body) {
            Ok(reply) if reply["result"].get("TTL").and_then(int).unwrap_or(0) > 0 => true,
            Ok(_) => {
                tracing::warn!("distributed: this process's etcd lease has expired");
                false
            }
            Err(e) => {
                tracing::warn!(%e, "distributed: an etcd keep-alive failed");
                true
            }
        },
        move || {
            let mine = format!("{}processes/{}", inner.prefix, inner.process_id);
            if let Err(e) = inner.delete_own(&mine) {
                tracing::warn!(%e, "distributed: leaving the etcd run");
            }
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_checked_and_given_a_scheme() {
        assert_eq!(
            endpoint_url("127.0.0.1:2379").unwrap(),
            "http://127.0.0.1:2379"
        );
        assert_eq!(
            endpoint_url("http://etcd:2379/").unwrap(),
            "http://etcd:2379"
        );
        for bad in [
            "",
            "etcd",
            "http://etcd",
            "etcd:port",
            "etcd:2379/x",
            ":2379",
        ] {
            let e = endpoint_url(bad).unwrap_err();
            assert!(e.to_string().contains("not host:port"), "{bad}: {e}");
        }
        let e = endpoint_url("https://etcd:2379").unwrap_err();
        assert!(e.to_string().contains("TLS is not supported"), "{e}");
    }

    #[test]
    fn a_prefix_range_ends_past_every_key_with_the_prefix() {
        assert_eq!(prefix_end("xlafn/runs/a/"), b"xlafn/runs/a0".to_vec());
        assert_eq!(prefix_end("a"), b"b".to_vec());
        assert_eq!(prefix_end(""), vec![0]);
    }
}
