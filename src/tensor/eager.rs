//! Eager execution: every op runs as a one-op program, compiled once per
//! (op, attributes, input types) and kept in a process-wide cache bounded
//! by `XLAFN_EAGER_CACHE_ENTRIES` (least recently used out first).
//!
//! This is the only place outside `function` that wires lowering to the
//! runtime; it sees ops only through `Graph::single_op` and `lower::lower`.

use crate::bounded_cache::{BoundedCache, capacity_from_env};
use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::{Graph, TensorType};
use crate::lower;
use crate::ops::Op;
use crate::runtime::{Buffer, Client, CompileOptions, Device, Executable, ProgramTraits};
use crate::single_flight::SingleFlight;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

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

/// The compiled one-op programs (`bounded_cache`: least recently used out
/// first beyond `capacity()`).
static CACHE: LazyLock<BoundedCache<Key, Arc<Executable>>> = LazyLock::new(BoundedCache::new);
static COMPILING: LazyLock<SingleFlight<Key, Arc<Executable>>> = LazyLock::new(SingleFlight::new);
static HITS: AtomicU64 = AtomicU64::new(0);
static COMPILES: AtomicU64 = AtomicU64::new(0);

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
        capacity_from_env(
            &crate::environment::EAGER_CACHE_ENTRIES,
            DEFAULT_EAGER_CACHE_ENTRIES,
        )
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
        entries: CACHE.len(),
        evictions: CACHE.evictions(),
    }
}

/// One compiled one-op program of the eager cache (see [`eager_programs`]).
#[derive(Clone)]
pub struct EagerProgram {
    /// The op with its attributes (`Op::describe`).
    pub op: String,
    /// Its input types.
    pub inputs: Vec<ArraySpec>,
    /// The compiled program: ask it for `cost_analysis`, `memory_stats`
    /// or `optimized` as a function's compiled stage is asked.
    pub executable: Arc<Executable>,
}

/// The eager ops' compiled programs now in the cache, oldest first: what
/// eager execution compiled, one program per (op, attributes, input
/// types, device). Reading them counts as a use for the cache's
/// least-recently-used order.
pub fn eager_programs() -> Vec<EagerProgram> {
    CACHE
        .keys()
        .into_iter()
        .filter_map(|key| {
            CACHE.get(&key).map(|executable| EagerProgram {
                op: key.op.describe(),
                inputs: key.inputs.clone(),
                executable,
            })
        })
        .collect()
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
    let exe = match CACHE.get(&key) {
        Some(exe) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            exe
        }
        // Single flight: threads missing on one new op compile it once.
        None => COMPILING.run(key.clone(), "compiling an eager op", || {
            if let Some(exe) = CACHE.get(&key) {
                return Ok(exe);
            }
            let exe = Arc::new(compile(&client, placement.device, &key)?);
            COMPILES.fetch_add(1, Ordering::Relaxed);
            Ok(CACHE.insert(key.clone(), exe, capacity()))
        })?,
    };
    Ok(exe
        .execute(&inputs)?
        .into_iter()
        .map(|b| b.with_committed(placement.committed))
        .collect())
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
