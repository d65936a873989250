//! Layer: runtime (imports `client`, `executable`, `options` and
//! `kv_callbacks`' store, and `files`' hex digests; sha2 from outside). Compile once per
//! multi-process run: every process of a run calls the same sharded
//! function, so without this each would compile the same program.
//!
//! For a program whose devices span processes, process 0 compiles it,
//! serializes the executable and publishes it through the run's store in
//! chunks (`executables/<digest>/<i>`, then a header `executables/<digest>`
//! naming the chunk count, the length and the sha256 of the whole); the
//! others wait for the header, check the bytes against it and load them.
//! Anything wrong on that path (no header in time, a bad digest, a load
//! that fails) makes the process compile for itself, with a warning: a
//! slower run, never a wrong one. A program on this process's devices
//! alone is compiled here as before: no other process compiles it.
//!
//! The digest covers xlafn's version, the plugin's API version and
//! platform, the compile options and the program, as the disk cache's key
//! does, but not the cache folder or the plugin's path, which may differ
//! between machines of one run.

use super::client::Client;
use super::executable::Executable;
use super::kv_callbacks::KeyValueStore;
use super::options::CompileOptions;
use crate::error::{Error, ErrorCode, Result};
use crate::files::{hex, sha256_hex};
use sha2::{Digest, Sha256};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A chunk's size: under every store's value limit (1 MiB for etcd).
const CHUNK_BYTES: usize = 1 << 20;
/// The largest executable shared (a larger header is refused as corrupt).
const MAX_SHARED_BYTES: u64 = 4 << 30;
/// How long a process waits for process 0's executable before it
/// compiles for itself: a large program may take minutes to compile.
const WAIT_FOR_PUBLISHED: Duration = Duration::from_secs(600);
/// How long a chunk may take once the header is there.
const WAIT_FOR_CHUNK: Duration = Duration::from_secs(60);

static LOADED_FROM_PEER: AtomicU64 = AtomicU64::new(0);

/// How many executables this process loaded from the one process 0
/// compiled and published, instead of compiling them.
pub fn shared_executables_loaded() -> u64 {
    LOADED_FROM_PEER.load(Ordering::Relaxed)
}

/// Does the program run on devices of other processes too?
fn spans_processes(client: &Client, options: &CompileOptions) -> bool {
    options.devices.iter().any(|id| {
        client
            .global_devices()
            .iter()
            .any(|d| d.id == *id && !d.is_addressable())
    })
}

fn digest(client: &Client, mlir: &str, options: &[u8]) -> String {
    let (major, minor) = client.plugin().version();
    let mut hash = Sha256::new();
    let api = format!("PJRT {major}.{minor}");
    let parts: [&[u8]; 5] = [
        concat!("xlafn ", env!("CARGO_PKG_VERSION")).as_bytes(),
        api.as_bytes(),
        client.platform_name().as_bytes(),
        options,
        mlir.as_bytes(),
    ];
    for part in parts {
        hash.update((part.len() as u64).to_le_bytes());
        hash.update(part);
    }
    hex(&hash.finalize())
}

/// Compiles `mlir` once for the run when its devices span processes (see
/// the module docs); otherwise, or outside a multi-process run, calls
/// `compile` here.
pub(super) fn compile_once_per_run(
    client: &Arc<Client>,
    mlir: &str,
    options: &CompileOptions,
    compile: impl FnOnce() -> Result<Executable>,
    load: impl FnOnce(&[u8]) -> Result<Executable>,
) -> Result<Executable> {
    let Some((store, process)) = client.run_store() else {
        return compile();
    };
    if !spans_processes(client, options) {
        return compile();
    }
    let key = format!("executables/{}", digest(client, mlir, &options.encode()));
    if process == 0 {
        let exe = compile();
        let published = match &exe {
            Ok(exe) => exe
                .serialize()
                .and_then(|bytes| publish(&*store, &key, &bytes))
                .inspect_err(|e| {
                    // Tell the others at once, rather than leave them
                    // waiting for a header that never comes.
                    let _ = store.put(&key, format!("failed publishing it: {e}").as_bytes());
                }),
            // The others compile for themselves and meet the same error.
            Err(e) => store.put(&key, format!("failed compiling it: {e}").as_bytes()),
        };
        match published {
            Ok(()) => tracing::info!(
                target: "xlafn::compile",
                key,
                "compiled a program spanning processes and published it to the others"
            ),
            Err(e) => tracing::warn!(
                target: "xlafn::compile",
                %e,
                "could not publish a compiled program: the other processes compile it themselves"
            ),
        }
        return exe;
    }
    match fetch(&*store, &key).and_then(|bytes| load(&bytes)) {
        Ok(exe) => {
            LOADED_FROM_PEER.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                target: "xlafn::compile",
                key,
                "loaded the program process 0 compiled instead of compiling it"
            );
            Ok(exe)
        }
        Err(e) => {
            tracing::warn!(
                target: "xlafn::compile",
                %e,
                "no program from process 0: compiling it here"
            );
            compile()
        }
    }
}

/// Puts the chunks, then the header that says they are all there.
fn publish(store: &dyn KeyValueStore, key: &str, bytes: &[u8]) -> Result<()> {
    let chunks = bytes.chunks(CHUNK_BYTES);
    let count = chunks.len();
    for (i, chunk) in chunks.enumerate() {
        store.put(&format!("{key}/{i}"), chunk)?;
    }
    let header = format!("ok {count} {} {}", bytes.len(), sha256_hex(bytes));
    store.put(key, header.as_bytes())
}

fn corrupt(key: &str, what: &str) -> Error {
    Error::distributed(
        ErrorCode::DataLoss,
        format!("the shared executable {key}: {what}"),
    )
}

/// Waits for the header, then reads and checks the chunks.
fn fetch(store: &dyn KeyValueStore, key: &str) -> Result<Vec<u8>> {
    let header = store.get(key, WAIT_FOR_PUBLISHED)?;
    let header = String::from_utf8(header).map_err(|_| corrupt(key, "a header not UTF-8"))?;
    if header.starts_with("failed ") {
        return Err(Error::distributed(
            ErrorCode::Unavailable,
            format!("process 0 did not share it: {header}"),
        ));
    }
    let fields: Vec<&str> = header.split(' ').collect();
    let [ok, count, len, sha] = fields[..] else {
        return Err(corrupt(key, "a malformed header"));
    };
    let (Ok(count), Ok(len)) = (count.parse::<u64>(), len.parse::<u64>()) else {
        return Err(corrupt(key, "a malformed header"));
    };
    let expected_count = len.div_ceil(CHUNK_BYTES as u64);
    if ok != "ok" || len > MAX_SHARED_BYTES || count != expected_count {
        return Err(corrupt(key, &format!("a header out of bounds: {header:?}")));
    }
    let mut bytes = Vec::new();
    for i in 0..count {
        let chunk = store.get(&format!("{key}/{i}"), WAIT_FOR_CHUNK)?;
        let room = len - bytes.len() as u64;
        if chunk.len() as u64 > room.min(CHUNK_BYTES as u64) {
            return Err(corrupt(key, &format!("chunk {i} is too long")));
        }
        bytes.extend_from_slice(&chunk);
    }
    if bytes.len() as u64 != len || sha256_hex(&bytes) != sha {
        return Err(corrupt(key, "its bytes do not match their digest"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::sync::Mutex;

    #[derive(Default)]
    struct Memory(Mutex<HashMap<String, Vec<u8>>>);

    impl KeyValueStore for Memory {
        fn get(&self, key: &str, _: Duration) -> Result<Vec<u8>> {
            self.try_get(key)?
                .ok_or_else(|| Error::distributed(ErrorCode::DeadlineExceeded, key.to_string()))
        }
        fn try_get(&self, key: &str) -> Result<Option<Vec<u8>>> {
            Ok(self.0.lock().unwrap().get(key).cloned())
        }
        fn put(&self, key: &str, value: &[u8]) -> Result<()> {
            self.0.lock().unwrap().insert(key.into(), value.to_vec());
            Ok(())
        }
    }

    #[test]
    fn published_bytes_come_back_whole_across_chunks() {
        let store = Memory::default();
        for len in [0, 1, CHUNK_BYTES, CHUNK_BYTES + 1, 3 * CHUNK_BYTES - 7] {
            let bytes: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let key = format!("executables/{len}");
            publish(&store, &key, &bytes).unwrap();
            assert_eq!(fetch(&store, &key).unwrap(), bytes, "{len}");
        }
    }

    #[test]
    fn a_tampered_or_malformed_publication_is_refused() {
        let store = Memory::default();
        let bytes = vec![7u8; CHUNK_BYTES + 10];
        publish(&store, "k", &bytes).unwrap();
        store.put("k/1", &[8u8; 10]).unwrap();
        let e = fetch(&store, "k").unwrap_err();
        assert!(e.to_string().contains("do not match"), "{e}");
        store.put("k/1", &[7u8; 11]).unwrap();
        let e = fetch(&store, "k").unwrap_err();
        assert!(e.to_string().contains("too long"), "{e}");
        for header in [
            "ok 1",
            "ok x 3 ab",
            "ok 9 3 ab",
            "ok 5000 5000000000000 ab",
            "yes 1 1 a",
        ] {
            store.put("h", header.as_bytes()).unwrap();
            let e = fetch(&store, "h").unwrap_err();
            assert!(e.to_string().contains("header"), "{header}: {e}");
        }
        store
            .put("f", b"failed compiling it: InvalidArgumentError: bad")
            .unwrap();
        let e = fetch(&store, "f").unwrap_err();
        assert!(
            e.to_string().contains("did not share it: failed compiling"),
            "{e}"
        );
    }
}
