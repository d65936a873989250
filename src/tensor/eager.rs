//! Eager execution: every op runs as a one-op program, compiled once per
//! (op, attributes, input types) and kept in a process-wide cache.
//!
//! This is the only place outside `function` that wires lowering to the
//! runtime; it sees ops only through `Graph::single_op` and `lower::lower`.

use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::{Graph, TensorType};
use crate::lower;
use crate::ops::Op;
use crate::runtime::{Buffer, Client, CompileOptions, Executable, ProgramTraits};
use crate::single_flight::SingleFlight;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    /// The client's address: one program per client (CPU, CUDA, ...).
    client: usize,
    op: Op,
    inputs: Vec<ArraySpec>,
}

static CACHE: LazyLock<RwLock<HashMap<Key, Arc<Executable>>>> = LazyLock::new(Default::default);
static COMPILING: LazyLock<SingleFlight<Key, Arc<Executable>>> = LazyLock::new(SingleFlight::new);
static HITS: AtomicU64 = AtomicU64::new(0);
static COMPILES: AtomicU64 = AtomicU64::new(0);

/// Counters of the eager op cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EagerCacheStats {
    /// Ops served by an already compiled program.
    pub hits: u64,
    /// One-op programs compiled.
    pub compiles: u64,
    /// Programs in the cache.
    pub entries: usize,
}

/// Reads the eager cache counters (process-wide).
pub fn eager_cache_stats() -> EagerCacheStats {
    EagerCacheStats {
        hits: HITS.load(Ordering::Relaxed),
        compiles: COMPILES.load(Ordering::Relaxed),
        entries: CACHE.read().map(|c| c.len()).unwrap_or(0),
    }
}

/// Runs `op` on device buffers.
pub(crate) fn run(op: &Op, inputs: &[&Buffer]) -> Result<Vec<Buffer>> {
    let client = match inputs.first() {
        Some(b) => b.client().clone(),
        None => Client::default_client()?,
    };
    let key = Key {
        client: Arc::as_ptr(&client) as usize,
        op: op.clone(),
        inputs: inputs
            .iter()
            .map(|b| ArraySpec::new(b.dtype(), b.dims()))
            .collect(),
    };
    let cached = CACHE
        .read()
        .unwrap_or_else(|e| e.into_inner())
        .get(&key)
        .cloned();
    let exe = match cached {
        Some(exe) => {
            HITS.fetch_add(1, Ordering::Relaxed);
            exe
        }
        // Single flight: threads missing on one new op compile it once.
        None => COMPILING.run(key.clone(), "compiling an eager op", || {
            if let Some(exe) = CACHE.read().unwrap_or_else(|e| e.into_inner()).get(&key) {
                return Ok(exe.clone());
            }
            let exe = Arc::new(compile(&client, &key)?);
            COMPILES.fetch_add(1, Ordering::Relaxed);
            let mut cache = CACHE.write().unwrap_or_else(|e| e.into_inner());
            Ok(cache.entry(key.clone()).or_insert(exe).clone())
        })?,
    };
    exe.execute(inputs)
}

fn compile(client: &Arc<Client>, key: &Key) -> Result<Executable> {
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
    let options = CompileOptions::for_program(client.platform(), traits);
    Executable::compile_cached(client, &lowered.text, lowered.params, &options)
}
