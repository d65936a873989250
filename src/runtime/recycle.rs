//! Recycling large device buffers.
//!
//! The CPU plugin maps fresh memory for every program output, and touching
//! a fresh 64 MB output costs page faults that take longer than the
//! computation (the memory-bound W8 workload ran at a fifth of memory
//! speed). TensorFlow avoids this with its own allocator; here, a dropped
//! large buffer is kept in a small pool instead of destroyed, and programs
//! with large results get an extra *output slot* parameter per result,
//! aliased to it (`tf.aliasing_output`): execute donates a pooled buffer of
//! the right type there and XLA writes the result into its memory.
//!
//! The pool holds at most `MAX_PER_TYPE` buffers per (client, device, dtype, dims)
//! and `MAX_POOL_BYTES` in all; buffers under `MIN_BYTES` are destroyed as
//! usual. A pooled buffer is dead to the user (its last `Tensor` is gone);
//! PJRT orders a donation after any work still pending on the buffer.

use super::sys;
use crate::dtype::ArraySpec;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use super::client::{Client, Device};

/// Buffers smaller than this are never pooled (no page-fault cost worth it).
pub const MIN_BYTES: usize = 1 << 20;
const MAX_POOL_BYTES: usize = 512 << 20;
const MAX_PER_TYPE: usize = 4;

struct Pooled {
    client: Arc<Client>,
    raw: *mut sys::PJRT_Buffer,
}

// SAFETY: a PJRT buffer handle may be used from any thread; the pool only
// moves it between threads, under its mutex.
unsafe impl Send for Pooled {}

#[derive(Default)]
struct Pool {
    by_type: HashMap<(usize, usize, ArraySpec), Vec<Pooled>>,
    bytes: usize,
}

static POOL: LazyLock<Mutex<Pool>> = LazyLock::new(Default::default);

fn key(client: &Arc<Client>, device: Device, spec: &ArraySpec) -> (usize, usize, ArraySpec) {
    (Arc::as_ptr(client) as usize, device.index, spec.clone())
}

fn size_of(spec: &ArraySpec) -> usize {
    spec.num_elements() as usize * spec.dtype.size_in_bytes().unwrap_or(0)
}

/// Is a buffer of this type worth pooling?
pub fn eligible(spec: &ArraySpec) -> bool {
    size_of(spec) >= MIN_BYTES
}

/// Offers a dead buffer to the pool; returns false if the caller must
/// destroy it.
pub(crate) fn give(
    client: &Arc<Client>,
    device: Device,
    spec: &ArraySpec,
    raw: *mut sys::PJRT_Buffer,
) -> bool {
    let size = size_of(spec);
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    if pool.bytes + size > MAX_POOL_BYTES {
        return false;
    }
    let slot = pool.by_type.entry(key(client, device, spec)).or_default();
    if slot.len() >= MAX_PER_TYPE {
        return false;
    }
    slot.push(Pooled {
        client: client.clone(),
        raw,
    });
    pool.bytes += size;
    true
}

/// Takes a pooled buffer of this type, if any (ownership passes to the
/// caller).
pub(crate) fn take(
    client: &Arc<Client>,
    device: Device,
    spec: &ArraySpec,
) -> Option<*mut sys::PJRT_Buffer> {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let pooled = pool.by_type.get_mut(&key(client, device, spec))?.pop()?;
    pool.bytes -= size_of(spec);
    drop(pooled.client);
    Some(pooled.raw)
}

/// Bytes held by the pool now (for tests and diagnostics).
pub fn pooled_bytes() -> usize {
    POOL.lock().map(|p| p.bytes).unwrap_or(0)
}
