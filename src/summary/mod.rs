//! Layer: tools, beside `bench`. Metrics out of a training run, in the
//! forms people already read: TensorBoard event files ([`EventWriter`],
//! read back by [`read_events`]), JSON-lines or CSV logs ([`MetricsLog`])
//! and SVG line charts ([`write_curve_svg`]).
//!
//! Imports only `error` from the crate; beyond std it uses `prost` (the
//! event protobufs, derived by hand), `crc` (CRC-32C for the TFRecord
//! framing), `serde_json`, `plotters` (SVG only) and `tracing`. It takes
//! plain `f64`s rather than tensors, so that a training loop decides
//! when to copy a metric off the device, and so that logging a value can
//! never trace, compile or run anything.
//!
//! Event files are written as TensorFlow's v1 summaries are
//! (`simple_value` scalars, `HistogramProto` histograms over TensorFlow's
//! default buckets), which every TensorBoard reads;
//! `scripts/read_tensorboard_events.py` reads one with TensorBoard's own
//! loader as a cross-check.
//!
//! ```
//! use xlafn::summary::{EventWriter, MetricsLog};
//! let dir = std::env::temp_dir().join(format!("xlafn-summary-mod-doc-{}", std::process::id()));
//! let mut events = EventWriter::create(&dir)?;
//! let mut log = MetricsLog::json_lines(dir.join("metrics.jsonl"))?;
//! for step in 0..3 {
//!     let loss = 1.0 / (step + 1) as f64;
//!     events.add_scalar("loss", loss, step)?;
//!     log.log(step, &[("loss", loss)])?;
//! }
//! # drop((events, log));
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), xlafn::Error>(())
//! ```

mod curve;
mod event_file;
mod histogram;
mod metrics_log;
mod proto;
mod record;

pub use curve::{AXIS_LIMIT, write_curve_svg};
pub use event_file::{Event, EventWhat, EventWriter, read_events};
pub use histogram::{Histogram, default_bucket_limits};
pub use metrics_log::MetricsLog;
pub use record::MAX_RECORD_BYTES;
