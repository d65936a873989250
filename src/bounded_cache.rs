//! Layer: utility (imports nothing from the crate). A map of compiled
//! programs with a bound on its entries, least recently used out first.
//!
//! Every program a process keeps holds an executable (code and buffers,
//! 140 to 180 KiB each on the CPU plugin), so a cache keyed by shapes the
//! caller chooses grows without end unless it is bounded: 3000 eager
//! shapes kept 420 MiB, 2000 batch sizes of one loaded export 349 MiB.
//! The eager op cache (`tensor::eager`) and a loaded export's programs for
//! shapes it did not list (`export::specialize`) both keep theirs here.
//!
//! Hits are cheap: each entry records the value of a clock at its last
//! use, and the clock ticks only when an entry is added, so a hit writes
//! only if the entry was not already used since the last miss (no shared
//! write on the hot path, under a read lock). Eviction, which happens only
//! on a miss, drops the entry with the oldest tick: least recently used,
//! to the resolution of one miss.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};

struct Entry<V> {
    value: V,
    last_used: AtomicU64,
    /// The clock when it was added: `keys` lists entries in this order.
    added: u64,
}

/// A bounded map from `K` to `V` (cheap to clone: an `Arc`).
pub(crate) struct BoundedCache<K, V> {
    entries: RwLock<HashMap<K, Entry<V>>>,
    clock: AtomicU64,
    evictions: AtomicU64,
}

impl<K: Eq + Hash + Clone, V: Clone> BoundedCache<K, V> {
    pub(crate) fn new() -> Self {
        BoundedCache {
            entries: RwLock::new(HashMap::new()),
            clock: AtomicU64::new(0),
            evictions: AtomicU64::new(0),
        }
    }

    /// The value for `key`, marking it used.
    pub(crate) fn get(&self, key: &K) -> Option<V> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let entry = entries.get(key)?;
        let now = self.clock.load(Ordering::Relaxed);
        if entry.last_used.load(Ordering::Relaxed) != now {
            entry.last_used.store(now, Ordering::Relaxed);
        }
        Some(entry.value.clone())
    }

    /// Adds `value` for `key` (keeping the value another thread added
    /// first, which is returned), evicting the least recently used entries
    /// so that at most `capacity` (at least 1) remain.
    pub(crate) fn insert(&self, key: K, value: V, capacity: usize) -> V {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let now = self.clock.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(entry) = entries.get(&key) {
            return entry.value.clone();
        }
        while entries.len() >= capacity.max(1) {
            let Some(oldest) = entries
                .iter()
                .min_by_key(|(_, e)| e.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            entries.remove(&oldest);
            self.evictions.fetch_add(1, Ordering::Relaxed);
        }
        entries.insert(
            key,
            Entry {
                value: value.clone(),
                last_used: AtomicU64::new(now),
                added: now,
            },
        );
        value
    }

    /// The number of entries.
    pub(crate) fn len(&self) -> usize {
        self.entries.read().map(|e| e.len()).unwrap_or(0)
    }

    /// Entries dropped to keep within the bound so far.
    pub(crate) fn evictions(&self) -> u64 {
        self.evictions.load(Ordering::Relaxed)
    }

    /// The keys, in the order they were added.
    pub(crate) fn keys(&self) -> Vec<K> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        let mut keys: Vec<(u64, K)> = entries.iter().map(|(k, e)| (e.added, k.clone())).collect();
        keys.sort_by_key(|(added, _)| *added);
        keys.into_iter().map(|(_, k)| k).collect()
    }
}

/// A cache bound read from the environment variable `var` (a positive
/// integer), else `default`. A value that is not a positive integer is
/// ignored with a warning naming it.
pub(crate) fn capacity_from_env(var: &crate::environment::Variable, default: usize) -> usize {
    let Some(raw) = var.get() else {
        return default;
    };
    let var = var.name;
    match raw.trim().parse::<usize>() {
        Ok(n) if n > 0 => n,
        _ => {
            tracing::warn!("{var}={raw:?} is not a positive integer; keeping {default} programs");
            default
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_bound_and_the_recently_used_entry() {
        let cache: BoundedCache<u32, u32> = BoundedCache::new();
        cache.insert(0, 0, 3);
        for k in 1..10 {
            assert_eq!(cache.get(&0), Some(0));
            cache.insert(k, k * 10, 3);
            assert!(cache.len() <= 3);
        }
        assert_eq!(
            cache.get(&0),
            Some(0),
            "the entry used after every miss stays"
        );
        assert_eq!(cache.get(&9), Some(90));
        assert_eq!(cache.get(&1), None);
        assert_eq!(cache.evictions(), 7);
        assert_eq!(cache.keys(), vec![0, 8, 9]);
        // A key added twice keeps its first value.
        assert_eq!(cache.insert(9, 5, 3), 90);
    }
}
