//! TensorBoard event files: [`EventWriter`] writes scalars and histograms
//! as TensorFlow's v1 summaries do (`simple_value` and `histo`), which
//! every TensorBoard version reads; [`read_events`] reads them back.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prost::Message;

use super::histogram::Histogram;
use super::proto::{EventProto, SummaryProto, ValueKindProto, ValueProto, WhatProto};
use super::record::{encode_record, read_records};
use crate::error::{Error, Result};

/// The version string of the first event, which TensorBoard checks.
const FILE_VERSION: &str = "brain.Event:2";

/// A writer flushes on its own when this long has passed since its last
/// flush, so that a TensorBoard watching the run sees progress without a
/// write to disk per value.
const FLUSH_EVERY: Duration = Duration::from_secs(2);

/// Writes a TensorBoard event file: scalars and histograms per step.
///
/// Writes are buffered; the file is flushed every couple of seconds while
/// values come in, on [`flush`](EventWriter::flush), and when the writer
/// is dropped (where an error can only be logged, so call `flush` to see
/// it). Point `tensorboard --logdir` at the directory.
///
/// ```
/// use xlafn::summary::{EventWhat, EventWriter, read_events};
/// let dir = std::env::temp_dir().join(format!("xlafn-summary-doc-{}", std::process::id()));
/// let mut writer = EventWriter::create(&dir)?;
/// writer.add_scalar("loss", 0.25, 1)?;
/// writer.add_histogram("weights", &[-1.0, 0.5, 2.0], 1)?;
/// writer.flush()?;
/// let events = read_events(writer.path())?;
/// assert!(matches!(&events[0].what, EventWhat::FileVersion(v) if v == "brain.Event:2"));
/// assert!(matches!(&events[1].what, EventWhat::Scalars(s) if s[0] == ("loss".into(), 0.25)));
/// match &events[2].what {
///     EventWhat::Histogram { tag, histogram } => {
///         assert_eq!((tag.as_str(), histogram.num, histogram.sum), ("weights", 3.0, 1.5));
///     }
///     other => panic!("expected a histogram, got {other:?}"),
/// }
/// # drop(writer);
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct EventWriter {
    out: BufWriter<File>,
    path: PathBuf,
    last_flush: Instant,
}

impl std::fmt::Debug for EventWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EventWriter")
            .field("path", &self.path)
            .finish()
    }
}

impl EventWriter {
    /// Creates `logdir` if missing and a new event file in it, named
    /// `events.out.tfevents.{unix seconds}.{host}.{pid}.{n}` (`n` counts
    /// the writers of this process, so two made in the same second do not
    /// collide), and writes the file-version event. The file is created
    /// new (`O_CREAT | O_EXCL`): a file, link or FIFO planted under its
    /// name is an error, never followed, truncated or waited on.
    pub fn create(logdir: impl AsRef<Path>) -> Result<EventWriter> {
        let logdir = logdir.as_ref();
        std::fs::create_dir_all(logdir)
            .map_err(|e| Error::io("cannot create log directory", logdir, e))?;
        let path = logdir.join(event_file_name());
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|e| Error::io("cannot create event file", &path, e))?;
        let mut writer = EventWriter {
            out: BufWriter::new(file),
            path,
            last_flush: Instant::now(),
        };
        writer.write_event(0, WhatProto::FileVersion(FILE_VERSION.into()))?;
        writer.flush()?;
        Ok(writer)
    }

    /// The event file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records `value` under `tag` at `step`, as a 32-bit `simple_value`
    /// (what `tf.compat.v1.summary.scalar` writes). NaN and infinities are
    /// written as they are: TensorBoard shows them, and a diverging loss is
    /// worth seeing.
    pub fn add_scalar(&mut self, tag: &str, value: f64, step: i64) -> Result<()> {
        let value = ValueProto {
            tag: tag.to_string(),
            value: Some(ValueKindProto::SimpleValue(value as f32)),
        };
        self.write_summary(step, value)
    }

    /// Records the histogram of `values` under `tag` at `step`, over
    /// TensorFlow's default buckets (see [`Histogram`]). A value that is
    /// not finite is an `Error::Value` naming the tag, and nothing is
    /// written.
    pub fn add_histogram(&mut self, tag: &str, values: &[f64], step: i64) -> Result<()> {
        let histogram = Histogram::of_finite(values).map_err(|(i, v)| {
            Error::Value(format!(
                "add_histogram {tag:?} at step {step}: value {i} is {v}, not finite"
            ))
        })?;
        let value = ValueProto {
            tag: tag.to_string(),
            value: Some(ValueKindProto::Histo(histogram.to_proto())),
        };
        self.write_summary(step, value)
    }

    /// Writes everything buffered to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.last_flush = Instant::now();
        self.out
            .flush()
            .map_err(|e| Error::io("cannot write event file", &self.path, e))
    }

    fn write_summary(&mut self, step: i64, value: ValueProto) -> Result<()> {
        let summary = SummaryProto { value: vec![value] };
        self.write_event(step, WhatProto::Summary(summary))?;
        if self.last_flush.elapsed() >= FLUSH_EVERY {
            self.flush()?;
        }
        Ok(())
    }

    fn write_event(&mut self, step: i64, what: WhatProto) -> Result<()> {
        let event = EventProto {
            wall_time: wall_time(),
            step,
            what: Some(what),
        };
        self.out
            .write_all(&encode_record(&event.encode_to_vec()))
            .map_err(|e| Error::io("cannot write event file", &self.path, e))
    }
}

impl Drop for EventWriter {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!("dropping an EventWriter: {e}");
        }
    }
}

/// One event read back from an event file.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Seconds since the Unix epoch when it was written.
    pub wall_time: f64,
    /// The step it belongs to.
    pub step: i64,
    /// What it holds.
    pub what: EventWhat,
}

/// What an [`Event`] holds.
///
/// An event's summary may hold several values; this enum keeps the two
/// shapes [`EventWriter`] and TensorFlow's v1 summaries write: all scalars,
/// or one histogram. Anything else (a graph, images, TensorFlow 2's
/// tensor-valued summaries, a summary mixing kinds) is `Other`.
#[derive(Clone, Debug, PartialEq)]
pub enum EventWhat {
    /// The first event of a file: its format version (`brain.Event:2`).
    FileVersion(String),
    /// Scalar values (`simple_value`), as `(tag, value)` in file order.
    Scalars(Vec<(String, f32)>),
    /// One histogram (`histo`).
    Histogram {
        /// The histogram's tag.
        tag: String,
        /// Its statistics and buckets.
        histogram: Histogram,
    },
    /// An event of any other kind.
    Other,
}

/// Reads every event of an event file, checking both CRCs of every record.
///
/// Only a regular file is read (a final symlink is followed; a FIFO or a
/// device is an error, not a wait). A corrupt record (or one longer than
/// [`MAX_RECORD_BYTES`](super::MAX_RECORD_BYTES)) is an `Error::Io` of
/// kind `InvalidData`, a truncated one of kind `UnexpectedEof`; either
/// names the record's index and byte offset. A file being written may end in a partial record: read it
/// after the writer's [`flush`](EventWriter::flush).
pub fn read_events(path: impl AsRef<Path>) -> Result<Vec<Event>> {
    let path = path.as_ref();
    let records = read_records(path)?;
    records
        .into_iter()
        .enumerate()
        .map(|(index, (offset, data))| {
            let proto = EventProto::decode(&data[..]).map_err(|e| {
                let message = format!("record {index} at byte {offset}: not an Event: {e}");
                let source = std::io::Error::new(std::io::ErrorKind::InvalidData, message);
                Error::io("cannot read event file", path, source)
            })?;
            Ok(Event {
                wall_time: proto.wall_time,
                step: proto.step,
                what: what_of(proto.what),
            })
        })
        .collect()
}

/// The public view of an event's `what`.
fn what_of(what: Option<WhatProto>) -> EventWhat {
    match what {
        Some(WhatProto::FileVersion(v)) => EventWhat::FileVersion(v),
        Some(WhatProto::Summary(s)) => summary_what(s.value),
        None => EventWhat::Other,
    }
}

/// All scalars, or one histogram; anything else is `Other`.
fn summary_what(values: Vec<ValueProto>) -> EventWhat {
    let alone = values.len() == 1;
    let mut scalars = Vec::with_capacity(values.len());
    for v in values {
        match v.value {
            Some(ValueKindProto::SimpleValue(x)) => scalars.push((v.tag, x)),
            Some(ValueKindProto::Histo(h)) if alone => {
                let histogram = Histogram::from_proto(h);
                return EventWhat::Histogram {
                    tag: v.tag,
                    histogram,
                };
            }
            _ => return EventWhat::Other,
        }
    }
    EventWhat::Scalars(scalars)
}

/// Seconds since the Unix epoch, with sub-second precision (0 on a clock
/// set before 1970).
fn wall_time() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// `events.out.tfevents.{unix seconds}.{host}.{pid}.{n}`: TensorBoard
/// finds event files by the `tfevents` in their name.
fn event_file_name() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    let seconds = wall_time() as u64;
    let pid = std::process::id();
    format!("events.out.tfevents.{seconds}.{}.{pid}.{n}", hostname())
}

/// This machine's name from `/etc/hostname` or `$HOSTNAME`, else
/// `localhost`, kept to characters safe in a file name.
fn hostname() -> String {
    let candidates = [
        std::fs::read_to_string("/etc/hostname").ok(),
        crate::environment::HOSTNAME.get(),
    ];
    let name = candidates
        .into_iter()
        .flatten()
        .map(|s| s.trim().to_string())
        .find(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into());
    name.chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect()
}
