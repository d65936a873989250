//! How the examples show xlafn's logs: a `tracing` subscriber that reads
//! `RUST_LOG`, by default `xlafn=warn` (retrace warnings only).
//! `RUST_LOG=xlafn=info` adds every trace, with why the cache missed, and
//! every compile: program size, disk-cache hit or miss, time.
//! `RUST_LOG=xlafn=debug` adds the eager op cache's compiles and the spans
//! of calls. These are the anchors JAX's `explain_cache_misses` and
//! `log_compiles` give.

use tracing_subscriber::EnvFilter;

/// Installs the subscriber (once; later calls do nothing).
pub fn init() {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("xlafn=warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_target(true)
        .try_init();
}
