//! Layer: distributed. Multi-process (multi-controller) execution, like
//! `jax.distributed`: several processes, each driving its own devices, run
//! one program together. Imports `error`, `environment` and `files` (the
//! launcher's variables and `/etc/hosts`, in [`cluster`]), `runtime`
//! (the PJRT client, its `KeyValueStore` trait and the report of a dead
//! process, in `death_watch`), and ureq for etcd;
//! nothing above the runtime imports it.
//!
//! Every process calls [`initialize`] with the same coordinator address and
//! process count and its own id. Process 0 starts the coordination service
//! on that address ([`KvService`]: a key-value store, the process registry
//! and barriers over TCP); every process joins it ([`KvClient`]), retrying
//! until the coordinator is up, and they all wait until `num_processes`
//! have joined. Then [`process_index`] and [`process_count`] say who is
//! who, [`store`] shares values and barriers between the processes, and
//! [`client`] makes a PJRT client whose plugin exchanges what its
//! collectives need through the same service. [`shutdown`] waits for the
//! others and stops it all. [`initialize_from_env`] finds the coordinator,
//! the count and the id in what the launcher set (SLURM, Open MPI,
//! torchrun, Kubernetes; see [`cluster`]). Each process sends heartbeats,
//! and a wait that needs a process that died or hung fails naming it.
//! [`DistributedOptions::store`] may choose an etcd cluster instead of
//! process 0's service ([`StoreBackend::Etcd`], in [`EtcdStore`]); either
//! way [`store`] hands out a [`CoordinationStore`].
//!
//! ```no_run
//! use std::time::Duration;
//! use xlafn::distributed;
//! # fn main() -> xlafn::Result<()> {
//! let id: usize = std::env::var("PROCESS_ID").unwrap().parse().unwrap();
//! distributed::initialize("10.0.0.1:4321", 2, id)?;
//! let store = distributed::store()?;
//! store.set(&format!("hello/{id}"), b"hi")?;
//! let other = store.get(&format!("hello/{}", 1 - id), Duration::from_secs(60))?;
//! store.barrier("greeted", Duration::from_secs(60))?;
//! distributed::shutdown()?;
//! # Ok(())
//! # }
//! ```
//!
//! Errors, each a [`Error::Distributed`] whose code names its class:
//! - a `process_id` outside `0..num_processes`: `InvalidArgumentError:
//!   process_id 3 is out of range for 2 processes`;
//! - a second process with an id that already joined: `AlreadyExistsError:
//!   process_id 1 has already joined: two processes were started with the
//!   same process_id`;
//! - a key nobody sets: `DeadlineExceededError: key "x" was not set within
//!   5s`; a barrier or the join that times out names the missing processes;
//! - [`initialize`] twice: `FailedPreconditionError: distributed::initialize
//!   was already called ...`.
//!
//! Plugins: only one with cross-process collectives can run a program
//! across processes. The CUDA plugin takes `node_id`, `num_nodes` and the
//! key-value callbacks and uses NCCL between the processes. The CPU plugin
//! has only in-process collectives and ignores all three, so [`client`]
//! refuses it before creating anything, with this error:
//!
//! ```text
//! UnimplementedError: multi-process execution needs a plugin with cross-process collectives (the CUDA plugin); the CPU plugin has only in-process collectives and ignores node_id/num_nodes and the key-value store
//! ```
//!
//! The default client joins the run: call [`initialize`] before this
//! process first uses a device or a tensor (afterwards it is a
//! `FailedPreconditionError`). With `XLAFN_DEVICE=cuda` the default client
//! is then made with [`client`]'s options for this process, and with the
//! CPU plugin making it fails with the error above. `xlafn::devices()` then
//! lists every process's devices, `xlafn::local_devices()` this process's
//! own; a mesh may span the processes, sharded arrays hold this process's
//! blocks, and every process runs the same sharded functions with its own
//! blocks (see `xlafn::sharding`).
//!
//! Security: the service trusts whoever can connect to its port (as JAX's
//! does), so run it on a private network. It treats their bytes as
//! untrusted input, though: sizes, key counts and waits are bounded (see
//! [`frame`] and [`KvService`]), and a malformed frame only closes the
//! connection that sent it.

pub mod cluster;
mod death_watch;
mod etcd;
pub mod frame;
mod kv_client;
mod service;
mod store;

pub use cluster::{Cluster, Launcher};
pub use etcd::{ETCD_MAX_VALUE_BYTES, EtcdStore};
pub use kv_client::{Heartbeats, KvClient};
pub use service::{KvService, MAX_BARRIERS, MAX_CONNECTIONS, MAX_KEYS, MAX_STORE_BYTES, MAX_WAIT};
pub use store::{CoordinationStore, DeadProcess, StoreBackend};

use crate::error::{Error, Result};
use crate::runtime::{Client, KeyValueStore, OptionValue};
use death_watch::DeathWatch;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How [`initialize_with`] and [`shutdown`] wait.
#[derive(Clone, Debug)]
pub struct DistributedOptions {
    /// How long [`initialize`] waits for the coordinator to be reachable
    /// and for every process to join (JAX's `initialization_timeout`;
    /// 300 s by default).
    pub initialization_timeout: Duration,
    /// How long [`shutdown`] waits for the other processes (300 s by
    /// default).
    pub shutdown_timeout: Duration,
    /// How often each process tells the coordinator it is alive (1 s by
    /// default).
    pub heartbeat_interval: Duration,
    /// How long the coordinator waits for a process's next heartbeat
    /// before it takes the process for dead (30 s by default): from then
    /// on every barrier or get that needs it fails, naming it. A process
    /// that exits or is killed is dead at once (its connection closes).
    pub heartbeat_timeout: Duration,
    /// Which coordination store the run uses: the built-in service (the
    /// default) or an etcd cluster ([`StoreBackend::Etcd`]).
    pub store: StoreBackend,
}

impl Default for DistributedOptions {
    fn default() -> Self {
        DistributedOptions {
            initialization_timeout: Duration::from_secs(300),
            shutdown_timeout: Duration::from_secs(300),
            heartbeat_interval: Duration::from_secs(1),
            heartbeat_timeout: Duration::from_secs(30),
            store: StoreBackend::Service,
        }
    }
}

/// The barrier every process passes once all have joined.
const JOIN_BARRIER: &str = "xlafn/initialize";
/// The barrier every process passes before the service stops.
const SHUTDOWN_BARRIER: &str = "xlafn/shutdown";

struct Global {
    client: Arc<dyn CoordinationStore>,
    /// Process 0's service, stopped when dropped.
    service: Option<KvService>,
    /// This process's heartbeats, ended (with a clean leave) by `shutdown`.
    heartbeats: Option<Heartbeats>,
    /// The thread that tells the plugins of deaths; `shutdown` stops it
    /// first, so processes leaving are not reported.
    death_watch: Option<DeathWatch>,
    shutdown_timeout: Duration,
}

/// The initialized system; readers hold the lock only to copy from it.
static GLOBAL: Mutex<Option<Global>> = Mutex::new(None);
/// Serializes `initialize` and `shutdown` with each other (they wait on
/// peers for long), without blocking readers of `GLOBAL`.
static LIFECYCLE: Mutex<()> = Mutex::new(());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Joins the processes of one multi-process run, with the default
/// timeouts (see [`initialize_with`]).
pub fn initialize(coordinator: &str, num_processes: usize, process_id: usize) -> Result<()> {
    initialize_with(
        coordinator,
        num_processes,
        process_id,
        &DistributedOptions::default(),
    )
}

/// Joins the run this process's launcher started (SLURM, Open MPI,
/// torchrun, a Kubernetes Indexed Job or JobSet, or `XLAFN_COORDINATOR`
/// with `XLAFN_NUM_PROCESSES` and `XLAFN_PROCESS_ID`), as
/// `jax.distributed.initialize()` does with no arguments: the detector
/// that fired is named in an info log line (see [`cluster`]), and the
/// default timeouts apply. `XLAFN_ETCD_ENDPOINTS` (with `XLAFN_RUN_ID`)
/// chooses an etcd store instead of process 0's service. No launcher found is a `FailedPreconditionError`
/// that lists what was looked for; returns what was detected.
pub fn initialize_from_env() -> Result<Cluster> {
    initialize_from_env_with(&DistributedOptions::default())
}

/// [`initialize_from_env`] with the given timeouts.
pub fn initialize_from_env_with(options: &DistributedOptions) -> Result<Cluster> {
    let cluster = cluster::detect()?.ok_or_else(|| {
        Error::FailedPrecondition(
            "distributed::initialize_from_env: no launcher detected (looked for \
             XLAFN_COORDINATOR with XLAFN_NUM_PROCESSES and XLAFN_PROCESS_ID; torchrun's \
             MASTER_ADDR, RANK, WORLD_SIZE; SLURM's SLURM_JOB_ID, SLURM_PROCID; Open MPI's \
             OMPI_COMM_WORLD_SIZE, OMPI_COMM_WORLD_RANK; Kubernetes' JOB_COMPLETION_INDEX); \
             call distributed::initialize with the coordinator, the process count and the id"
                .into(),
        )
    })?;
    tracing::info!(
        launcher = cluster.launcher.name(),
        coordinator = %cluster.coordinator,
        num_processes = cluster.num_processes,
        process_id = cluster.process_id,
        local_rank = ?cluster.local_rank,
        "distributed: detected a {} launch",
        cluster.launcher.name()
    );
    let options = with_store_from_env(options)?;
    initialize_with(
        &cluster.coordinator,
        cluster.num_processes,
        cluster.process_id,
        &options,
    )?;
    Ok(cluster)
}

/// `options` with the etcd store that `XLAFN_ETCD_ENDPOINTS` and
/// `XLAFN_RUN_ID` name, when the options chose the built-in service (the
/// default) and the variable is set.
fn with_store_from_env(options: &DistributedOptions) -> Result<DistributedOptions> {
    let mut options = options.clone();
    let Some(list) = crate::environment::ETCD_ENDPOINTS.get() else {
        return Ok(options);
    };
    if options.store != StoreBackend::Service {
        return Ok(options);
    }
    let endpoints: Vec<String> = list
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    if endpoints.is_empty() {
        return Err(Error::distributed(
            crate::error::ErrorCode::InvalidArgument,
            format!("XLAFN_ETCD_ENDPOINTS={list:?} names no endpoint"),
        ));
    }
    let run_id = crate::environment::RUN_ID.get().unwrap_or_default();
    tracing::info!(?endpoints, run_id, "distributed: coordinating through etcd");
    options.store = StoreBackend::Etcd { endpoints, run_id };
    Ok(options)
}

/// Joins the processes of one multi-process run: process 0 serves the
/// coordination service on `coordinator` (`host:port`, reachable by all),
/// every process joins it as `process_id`, and all wait until
/// `num_processes` have joined. On failure nothing stays initialized (and
/// process 0's service is stopped).
pub fn initialize_with(
    coordinator: &str,
    num_processes: usize,
    process_id: usize,
    options: &DistributedOptions,
) -> Result<()> {
    let _lifecycle = lock(&LIFECYCLE);
    if let Some(g) = lock(&GLOBAL).as_ref() {
        return Err(Error::FailedPrecondition(format!(
            "distributed::initialize was already called (this is process {} of {}, \
             coordinated by {}); call distributed::shutdown first",
            g.client.process_id(),
            g.client.num_processes(),
            g.client.coordinator()
        )));
    }
    kv_client::check_ids(process_id, num_processes)?;
    crate::runtime::check_can_join_run(num_processes)?;
    let deadline = Instant::now() + options.initialization_timeout;
    let (client, service, heartbeats) =
        join_store(coordinator, num_processes, process_id, options)?;
    let left = deadline.saturating_duration_since(Instant::now());
    client.barrier(JOIN_BARRIER, left).map_err(|e| {
        context(
            e,
            "distributed::initialize: waiting for all processes to join",
        )
    })?;
    tracing::info!(
        process_id,
        num_processes,
        coordinator,
        "distributed system initialized"
    );
    let incarnations = death_watch::exchange_incarnations(&*client, deadline).map_err(|e| {
        context(
            e,
            "distributed::initialize: exchanging the processes' incarnations",
        )
    })?;
    let death_watch = match num_processes {
        1 => None,
        _ => Some(DeathWatch::start(client.clone())?),
    };
    let keys = Arc::new(PluginKeys {
        prefix: "xlafn/pjrt/default/".into(),
        store: client.clone(),
    });
    crate::runtime::join_run(process_id, num_processes, keys, incarnations)?;
    *lock(&GLOBAL) = Some(Global {
        client,
        service,
        heartbeats: Some(heartbeats),
        death_watch,
        shutdown_timeout: options.shutdown_timeout,
    });
    Ok(())
}

/// What joining the chosen store gives: the store, process 0's service
/// (built-in store only) and the heartbeats that keep this process alive.
type Joined = (Arc<dyn CoordinationStore>, Option<KvService>, Heartbeats);

/// Joins the store `options` chose, with its heartbeats running.
fn join_store(
    coordinator: &str,
    num_processes: usize,
    process_id: usize,
    options: &DistributedOptions,
) -> Result<Joined> {
    match &options.store {
        StoreBackend::Service => {
            let service = match process_id {
                0 => Some(KvService::start(coordinator, num_processes)?),
                _ => None,
            };
            let client = KvClient::join(
                coordinator,
                process_id,
                num_processes,
                options.initialization_timeout,
            )?;
            let heartbeats = client
                .start_heartbeats(options.heartbeat_interval, options.heartbeat_timeout)
                .map_err(|e| context(e, "distributed::initialize: starting the heartbeats"))?;
            Ok((Arc::new(client), service, heartbeats))
        }
        StoreBackend::Etcd { endpoints, run_id } => {
            let run_id = match run_id.is_empty() {
                true => coordinator,
                false => run_id.as_str(),
            };
            let (store, heartbeats) = EtcdStore::join(
                endpoints,
                run_id,
                process_id,
                num_processes,
                options.heartbeat_timeout,
                options.heartbeat_interval,
                options.initialization_timeout,
            )?;
            Ok((Arc::new(store), None, heartbeats))
        }
    }
}

/// Prefixes a coordination error's message with what was being done.
fn context(e: Error, doing: &str) -> Error {
    match e {
        Error::Distributed { code, message } => {
            Error::distributed(code, format!("{doing}: {message}"))
        }
        other => other,
    }
}

/// Leaves the multi-process run: waits (up to the shutdown timeout) until
/// every process has called `shutdown`, so process 0 stops its service only
/// when nobody needs it. Nothing stays initialized afterwards, even when
/// the wait fails; without [`initialize`], it does nothing.
pub fn shutdown() -> Result<()> {
    let _lifecycle = lock(&LIFECYCLE);
    let Some((client, timeout, death_watch)) = lock(&GLOBAL)
        .as_mut()
        .map(|g| (g.client.clone(), g.shutdown_timeout, g.death_watch.take()))
    else {
        return Ok(());
    };
    drop(death_watch);
    let waited = match client.num_processes() {
        1 => Ok(()),
        _ => client
            .barrier(SHUTDOWN_BARRIER, timeout)
            .map_err(|e| context(e, "distributed::shutdown")),
    };
    crate::runtime::leave_run();
    let global = lock(&GLOBAL).take();
    if let Some(mut global) = global {
        // Leave before the service stops, so it does not count this
        // process's closing connection as a death.
        drop(global.heartbeats.take());
        if let Some(mut service) = global.service.take() {
            service.stop();
        }
    }
    waited
}

/// Has [`initialize`] succeeded (and [`shutdown`] not been called since)?
pub fn is_initialized() -> bool {
    lock(&GLOBAL).is_some()
}

/// This process's id among the processes of the run; 0 when
/// [`initialize`] was not called.
pub fn process_index() -> usize {
    lock(&GLOBAL).as_ref().map_or(0, |g| g.client.process_id())
}

/// How many processes take part in the run; 1 when [`initialize`] was not
/// called.
pub fn process_count() -> usize {
    lock(&GLOBAL)
        .as_ref()
        .map_or(1, |g| g.client.num_processes())
}

/// The key-value store and barriers shared by the processes of the run.
pub fn store() -> Result<Arc<dyn CoordinationStore>> {
    lock(&GLOBAL)
        .as_ref()
        .map(|g| g.client.clone())
        .ok_or_else(|| {
            Error::FailedPrecondition(
                "distributed::initialize has not been called in this process".into(),
            )
        })
}

/// A PJRT client from the plugin at `plugin` for this process of the run:
/// the plugin gets `node_id` (this process's index), `num_nodes` and
/// callbacks into the run's key-value store, besides `options` (for the
/// CUDA plugin, `Client::cuda_options()`). The CPU plugin is refused first,
/// with the `UnimplementedError` in the module docs; then a process that
/// did not [`initialize`] gets a `FailedPreconditionError`.
pub fn client(plugin: &Path, options: &[(String, OptionValue)]) -> Result<Arc<Client>> {
    Client::ensure_multi_process_plugin(plugin)?;
    let store = store()?;
    let name = plugin
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let keys = Arc::new(PluginKeys {
        prefix: format!("xlafn/pjrt/{name}/"),
        store: store.clone(),
    });
    Client::distributed(
        plugin,
        options,
        store.process_id(),
        store.num_processes(),
        keys,
    )
}

/// The run's store as a plugin sees it: under a prefix of the plugin's
/// own, since the header leaves avoiding collisions between a plugin's keys
/// and everyone else's to the caller.
struct PluginKeys {
    prefix: String,
    store: Arc<dyn CoordinationStore>,
}

impl KeyValueStore for PluginKeys {
    fn get(&self, key: &str, timeout: Duration) -> Result<Vec<u8>> {
        self.store.get(&format!("{}{key}", self.prefix), timeout)
    }

    fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.store.try_get(&format!("{}{key}", self.prefix))
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<()> {
        self.store.set(&format!("{}{key}", self.prefix), value)
    }
}
