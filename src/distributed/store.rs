//! Layer: distributed (imports `error` only). What every coordination
//! store offers the processes of a run, whichever backend serves it: the
//! built-in service ([`super::KvClient`]) or etcd ([`super::EtcdStore`]).
//!
//! The trait is what [`super::store`] hands out and what the PJRT
//! plugin's key-value callbacks go through, so code above this module
//! never knows which backend a run chose.

use crate::error::Result;
use std::time::Duration;

/// Which coordination store a run uses: one option,
/// [`super::DistributedOptions::store`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum StoreBackend {
    /// The built-in coordination service, served by process 0 on the
    /// coordinator address (as `jax.distributed` does).
    #[default]
    Service,
    /// An etcd cluster the site already runs (v3 API, 3.4 or later, plain
    /// HTTP). Nobody serves anything: the coordinator address is then only
    /// the default run id.
    Etcd {
        /// `host:port` or `http://host:port` of etcd's client URL; each is
        /// tried in turn.
        endpoints: Vec<String>,
        /// Keys live under `xlafn/runs/<run_id>/`, so runs sharing one etcd
        /// never see each other's keys; empty means the coordinator address.
        run_id: String,
    },
}

/// A key-value store and barriers shared by the processes of one run.
///
/// Every wait is bounded by its timeout; a wait that needs a process the
/// store knows to be dead fails with an `UnavailableError` naming it.
pub trait CoordinationStore: Send + Sync + std::fmt::Debug {
    /// This process's id among the processes of the run.
    fn process_id(&self) -> usize;

    /// How many processes the run has.
    fn num_processes(&self) -> usize;

    /// Where the store is, for messages (`host:port`, or the etcd
    /// endpoint and run prefix).
    fn coordinator(&self) -> &str;

    /// The longest value [`CoordinationStore::set`] accepts, in bytes:
    /// larger payloads are split by the caller.
    fn max_value_bytes(&self) -> usize;

    /// Stores `value` under `key` for every process, replacing any earlier
    /// value.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;

    /// The value of `key`, waiting until some process sets it; after
    /// `timeout`, a `DeadlineExceededError` naming the key.
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>>;

    /// The value of `key` if it is set now, without waiting.
    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>>;

    /// Waits until every process has reached barrier `name`; after
    /// `timeout`, a `DeadlineExceededError` listing the missing processes.
    /// Each name can be passed once.
    fn barrier(&self, name: &str, timeout: Duration) -> Result<()>;

    /// Waits until the store finds a process of the run dead that is not
    /// among `known` (its id and why), at most `timeout`: `Ok(None)` when
    /// none died. A process that left cleanly is not dead. A store that
    /// cannot be reached at all says so as an error, except the built-in
    /// service, whose unreachability *is* process 0's death.
    fn await_death(&self, known: &[usize], timeout: Duration) -> Result<Option<DeadProcess>>;
}

/// A process of the run that the store found dead.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadProcess {
    /// Its id.
    pub id: usize,
    /// Why it is taken for dead ("its liveness connection closed", "its
    /// etcd lease expired", ...).
    pub why: String,
}
