//! Eager execution: every op runs as a one-op program, compiled once per
//! (op, attributes, input types) and kept in a process-wide cache bounded
//! by `XLAFN_EAGER_CACHE_ENTRIES` (least recently used out first).
//!
//! This is the only place outside `function` that wires lowering to the
//! runtime; it sees ops only through `Graph::single_op` and `lower::lower`.

use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::{Graph, TensorType};
use crate::lower;
use crate::ops::Op;
use crate::runtime::{Buffer, Client, CompileOptions, Device, Executable, ProgramTraits};
use crate::single_flight::SingleFlight;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The client's address: one program per client (CPU, CUDA, ...).
    client: usize,
    /// The device it runs on (its index in the client's list): a program
    /// is compiled for one device assignment.
    device: usize,
    op: Op,
    inputs: Vec<ArraySpec>,
}

/// A compiled op and when it was last used: the value of `CLOCK` at its
/// last hit. The clock ticks only when an entry is added, so a hit writes
/// only if the entry was not already used since the last miss (no shared
/// write on the hot path); eviction, which happens only on a miss, drops
/// the entry with the oldest tick: least recently used, to the resolution
/// of one miss.
struct Entry {
    exe: Arc<Executable>,
    last_used: AtomicU64,
}

static CACHE: LazyLock<RwLock<HashMap<Key, Entry>>> = LazyLock::new(Default::default);
static CLOCK: AtomicU64 = AtomicU64::new(0);
static COMPILING: LazyLock<SingleFlight<Key, Arc<Executable>>> = LazyLock::new(SingleFlight::new);
static HITS: AtomicU64 = AtomicU64::new(0);
static COMPILES: AtomicU64 = AtomicU64::new(0);
static EVICTIONS: AtomicU64 = AtomicU64::new(0);

/// How many compiled ops the cache keeps by default. Each holds an
/// executable (about 140 KiB of code and buffers on the CPU plugin), so
/// the default bounds the cache near 150 MiB; an eager model with more
/// distinct (op, shape) pairs than this recompiles the least recently
/// used ones.
pub const DEFAULT_EAGER_CACHE_ENTRIES: usize = 1024;

/// The bound: `XLAFN_EAGER_CACHE_ENTRIES` (at least 1), read once, else
/// [`DEFAULT_EAGER_CACHE_ENTRIES`]. A value that is not a positive integer
/// is ignored with a warning.
fn capacity() -> usize {
    static CAPACITY: LazyLock<usize> = LazyLock::new(|| {
        let Ok(raw) = std::env::var("XLAFN_EAGER_CACHE_ENTRIES") else {
            return DEFAULT_EAGER_CACHE_ENTRIES;
        };
        match raw.trim().parse::<usize>() {
            Ok(n) if n > 0 => n,
            _ => {
                tracing::warn!(
                    "XLAFN_EAGER_CACHE_ENTRIES={raw:?} is not a positive integer; keeping \
                     {DEFAULT_EAGER_CACHE_ENTRIES} compiled ops"
                );
                DEFAULT_EAGER_CACHE_ENTRIES
            }
        }
    });
    *CAPACITY
}

/// Counters of the eager op cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerCacheStats {
    /// Ops served by an already compiled program.
    pub hits: u64,
    /// One-op programs compiled.
    pub compiles: u64,
    /// Programs in the cache.
    pub entries: usize,
    /// Programs dropped to keep the cache within its bound.
    pub evictions: u64,
}

/// Reads the eager cache counters (process-wide).
pub fn eager_cache_stats() -> EagerCacheStats {
    EagerCacheStats {
        hits: HITS.load(Ordering::Relaxed),
        compiles: COMPILES.load(Ordering::Relaxed),
        entries: CACHE.read().map(|c| c.len()).unwrap_or(0),
        evictions: EVICTIONS.load(Ordering::Relaxed),
    }
}

/// Runs `op` on device buffers, on the device the placement rule picks
/// (`tensor::device`); uncommitted inputs elsewhere are moved there.
pub(crate) fn run(op: &Op, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
    let client = match inputs.first() {
        Some(b) => b.client().clone(),
        None => Client::default_client()?,
    };
    let placement = super::place(inputs, &|| format!("op {}", crate::ops::OpDef::name(op)))?;
    let mut copies = Vec::new();
    let inputs = super::gather_on(inputs, placement.device, &mut copies)?;
    let key = Key {
        client: Arc::as_ptr(&client) as usize,
        device: placement.device.index,
        op: op.clone(),
        inputs: inputs
            .iter()
            .map(|b| ArraySpec::new(b.dtype(), b.dims()))
            .collect(),
    };
    let exe = match lookup(&key) {
        Some(exe) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            exe
        }
        // Single flight: threads missing on one new op compile it once.
        None => COMPILING.run(key.clone(), "compiling an eager op", || {
            if let Some(exe) = lookup(&key) {
                return Ok(exe);
            }
            let exe = Arc::new(compile(&client, placement.device, &key)?);
            COMPILES.fetch_add(1, Ordering::Relaxed);
            Ok(insert(key.clone(), exe))
        })?,
    };
    Ok(exe
        .execute(&inputs)?
        .into_iter()
        .map(|b| b.with_committed(placement.committed))
        .collect())
}

/// The cached program for `key`, marking it used.
fn lookup(key: &Key) -> Option<Arc<Executable>> {
    let cache = CACHE.read().unwrap_or_else(|e| e.into_inner());
    let entry = cache.get(key)?;
    let now = CLOCK.load(Ordering::Relaxed);
    if entry.last_used.load(Ordering::Relaxed) != now {
        entry.last_used.store(now, Ordering::Relaxed);
    }
    Some(entry.exe.clone())
}

/// Adds a compiled program (keeping one another thread added first),
/// evicting the least recently used entries beyond the bound.
fn insert(key: Key, exe: Arc<Executable>) -> Arc<Executable> {
    let mut cache = CACHE.write().unwrap_or_else(|e| e.into_inner());
    let now = CLOCK.fetch_add(1, Ordering::Relaxed) + 1;
    if let Some(entry) = cache.get(&key) {
        return entry.exe.clone();
    }
    while cache.len() >= capacity() {
        let Some(oldest) = cache
            .iter()
            .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
            .map(|(k, _)| k.clone())
        else {
            break;
        };
        cache.remove(&oldest);
        EVICTIONS.fetch_add(1, Ordering::Relaxed);
    }
    cache.insert(
        key,
        Entry {
            exe: exe.clone(),
            last_used: AtomicU64::new(now),
        },
    );
    exe
}

fn compile(client: &Arc<Client>, device: Device, key: &Key) -> Result<Executable> {
    tracing::debug!(
        target: "xlafn::eager",
        op = crate::ops::OpDef::name(&key.op),
        inputs = ?key.inputs,
        "eager op cache miss: compiling a one-op program"
    );
    let types: Vec<TensorType> = key
        .inputs
        .iter()
        .map(|s| TensorType::known(s.dtype, &s.dims))
        .collect();
    let graph = Graph::single_op(&key.op, &types)?;
    let lowered = lower::lower(&graph, &key.inputs)?;
    // One op: XNNPACK's graph fusion has no chain to run array by array,
    // and its thread pool made a single small multiply 3x slower.
    let traits = ProgramTraits {
        light: lowered.size.is_light(),
        small_array_graph: false,
    };
    let mut options = CompileOptions::for_program(client.platform(), traits);
    options.devices = vec![device.id];
    Executable::compile_cached(client, &lowered.text, lowered.params, &options)
}
