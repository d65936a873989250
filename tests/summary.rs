//! `xlafn::summary`: event files written, framed, read back and damaged;
//! metrics logs; SVG curves. The TFRecord framing and the protobuf wire
//! format are checked against a reference written here (a bitwise
//! CRC-32C, records and events built byte by byte), not against the
//! codec itself.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};

#[path = "common/bounded.rs"]
mod bounded;

use xlafn::Error;
use xlafn::summary::{
    EventWhat, EventWriter, MAX_RECORD_BYTES, MetricsLog, read_events, write_curve_svg,
};

// ---- a reference TFRecord codec --------------------------------------

/// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), bit by bit.
fn crc32c_reference(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in bytes {
        crc ^= u32::from(byte);
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0x82f6_3b78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

/// TFRecord's mask, written as its specification writes it.
#[allow(clippy::manual_rotate)]
fn masked(crc: u32) -> u32 {
    ((crc >> 15) | (crc << 17)).wrapping_add(0xa282_ead8)
}

/// `data` framed as a TFRecord by the reference codec.
fn frame(data: &[u8]) -> Vec<u8> {
    let len = (data.len() as u64).to_le_bytes();
    let mut out = len.to_vec();
    out.extend(masked(crc32c_reference(&len)).to_le_bytes());
    out.extend(data);
    out.extend(masked(crc32c_reference(data)).to_le_bytes());
    out
}

/// Splits a file into records' data by hand, checking every CRC with the
/// reference; returns each record's offset and data.
fn split_records(bytes: &[u8]) -> Vec<(usize, Vec<u8>)> {
    let mut records = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let len_bytes = &bytes[at..at + 8];
        let len = u64::from_le_bytes(len_bytes.try_into().unwrap()) as usize;
        let len_crc = u32::from_le_bytes(bytes[at + 8..at + 12].try_into().unwrap());
        assert_eq!(
            len_crc,
            masked(crc32c_reference(len_bytes)),
            "length CRC at {at}"
        );
        let data = &bytes[at + 12..at + 12 + len];
        let data_crc = u32::from_le_bytes(bytes[at + 12 + len..at + 16 + len].try_into().unwrap());
        assert_eq!(data_crc, masked(crc32c_reference(data)), "data CRC at {at}");
        records.push((at, data.to_vec()));
        at += 16 + len;
    }
    records
}

fn varint(mut v: u64, out: &mut Vec<u8>) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A length-delimited protobuf field.
fn field_bytes(number: u32, payload: &[u8], out: &mut Vec<u8>) {
    varint(u64::from(number << 3 | 2), out);
    varint(payload.len() as u64, out);
    out.extend(payload);
}

/// The same values as TensorFlow's `InitDefaultBucketsInner`.
fn tensorflow_bucket_limits() -> Vec<f64> {
    let mut pos = Vec::new();
    let mut v = 1.0e-12;
    while v < 1.0e20 {
        pos.push(v);
        v *= 1.1;
    }
    pos.push(f64::MAX);
    let mut all: Vec<f64> = pos.iter().rev().map(|v| -v).collect();
    all.push(0.0);
    all.extend(pos);
    all
}

fn io_kind(e: &Error) -> ErrorKind {
    e.io_kind()
        .unwrap_or_else(|| panic!("expected an Io error, got {e}"))
}

// ---- event files -----------------------------------------------------

const HISTOGRAM_VALUES: [f64; 7] = [-3.0, -0.5, 0.0, 0.0, 1.0, 2.5, 100.0];

/// A file with the version event, 5 steps of two scalars and a histogram.
fn write_sample(dir: &Path) -> PathBuf {
    let mut writer = EventWriter::create(dir).unwrap();
    for step in 0..5 {
        let loss = 1.0 / (step + 1) as f64;
        writer.add_scalar("loss", loss, step).unwrap();
        writer
            .add_scalar("accuracy", 0.1 * step as f64, step)
            .unwrap();
    }
    writer
        .add_histogram("weights", &HISTOGRAM_VALUES, 7)
        .unwrap();
    writer.flush().unwrap();
    writer.path().to_path_buf()
}

#[test]
fn scalars_read_back_with_their_steps() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_sample(dir.path());
    let events = read_events(&path).unwrap();
    assert_eq!(events.len(), 1 + 10 + 1);
    assert_eq!(
        events[0].what,
        EventWhat::FileVersion("brain.Event:2".into())
    );
    let scalars: Vec<(i64, String, f32)> = events[1..11]
        .iter()
        .map(|e| match &e.what {
            EventWhat::Scalars(v) if v.len() == 1 => (e.step, v[0].0.clone(), v[0].1),
            other => panic!("expected one scalar, got {other:?}"),
        })
        .collect();
    for step in 0..5i64 {
        let loss = (1.0 / (step + 1) as f64) as f32;
        let accuracy = (0.1 * step as f64) as f32;
        assert_eq!(scalars[2 * step as usize], (step, "loss".into(), loss));
        assert_eq!(
            scalars[2 * step as usize + 1],
            (step, "accuracy".into(), accuracy)
        );
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!(
        events
            .iter()
            .all(|e| e.wall_time > now - 600.0 && e.wall_time <= now + 1.0)
    );
    assert!(events.windows(2).all(|w| w[0].wall_time <= w[1].wall_time));
}

#[test]
fn histogram_holds_the_values_statistics_and_buckets() {
    let dir = tempfile::tempdir().unwrap();
    let events = read_events(write_sample(dir.path())).unwrap();
    let last = events.last().unwrap();
    assert_eq!(last.step, 7);
    let EventWhat::Histogram { tag, histogram: h } = &last.what else {
        panic!("expected a histogram, got {:?}", last.what);
    };
    assert_eq!(tag, "weights");
    assert_eq!((h.num, h.min, h.max), (7.0, -3.0, 100.0));
    assert_eq!(h.sum, -3.0 - 0.5 + 1.0 + 2.5 + 100.0);
    assert_eq!(h.sum_squares, 9.0 + 0.25 + 1.0 + 6.25 + 10000.0);
    assert_eq!(h.bucket_limits.len(), h.buckets.len());
    assert_eq!(h.buckets.iter().sum::<f64>(), h.num);
    // The limits are TensorFlow's default ones (a subsequence), increasing.
    let defaults = tensorflow_bucket_limits();
    assert!(h.bucket_limits.iter().all(|l| defaults.contains(l)));
    assert!(h.bucket_limits.windows(2).all(|w| w[0] < w[1]));
    // Bucket i holds [limit(i-1), limit(i)): count each value by hand.
    let mut expected = vec![0.0; h.buckets.len()];
    for v in HISTOGRAM_VALUES {
        let i = h.bucket_limits.iter().position(|&l| v < l).unwrap();
        assert!(i == 0 || h.bucket_limits[i - 1] <= v);
        expected[i] += 1.0;
    }
    assert_eq!(h.buckets, expected);
    assert_eq!(h.buckets[h.bucket_of(0.0)], 2.0);
}

#[test]
fn non_finite_histogram_values_are_refused_by_tag() {
    let dir = tempfile::tempdir().unwrap();
    let mut writer = EventWriter::create(dir.path()).unwrap();
    let err = writer
        .add_histogram("grads/dense", &[1.0, f64::NAN], 3)
        .unwrap_err();
    assert!(matches!(err, Error::Value(_)), "{err}");
    assert!(err.to_string().contains("grads/dense"), "{err}");
    writer.flush().unwrap();
    assert_eq!(read_events(writer.path()).unwrap().len(), 1);
}

#[test]
fn records_are_framed_with_masked_crc32c() {
    assert_eq!(crc32c_reference(b"123456789"), 0xe306_9283);
    let dir = tempfile::tempdir().unwrap();
    let path = write_sample(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    let records = split_records(&bytes);
    assert_eq!(records.len(), read_events(&path).unwrap().len());
    // The first event: wall_time (field 1, fixed64), then file_version
    // (field 3, length-delimited) "brain.Event:2".
    let first = &records[0].1;
    assert_eq!(first[0], 1 << 3 | 1);
    let mut version = Vec::new();
    field_bytes(3, b"brain.Event:2", &mut version);
    assert_eq!(&first[9..], &version[..]);
}

#[test]
fn hand_built_events_decode() {
    // Event { wall_time: 1.5, step: 42, summary { value { tag: "x", simple_value: 2.5 } } }
    let mut value = Vec::new();
    field_bytes(1, b"x", &mut value);
    value.push(2 << 3 | 5);
    value.extend(2.5f32.to_le_bytes());
    let mut summary = Vec::new();
    field_bytes(1, &value, &mut summary);
    let mut event = vec![1 << 3 | 1];
    event.extend(1.5f64.to_le_bytes());
    event.push(2 << 3);
    varint(42, &mut event);
    field_bytes(5, &summary, &mut event);
    // An event of another kind: graph_def (field 4).
    let mut graph = vec![1 << 3 | 1];
    graph.extend(2.0f64.to_le_bytes());
    field_bytes(4, b"not a graph", &mut graph);

    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.out.tfevents.hand");
    std::fs::write(&path, [frame(&event), frame(&graph)].concat()).unwrap();
    let events = read_events(&path).unwrap();
    assert_eq!((events[0].wall_time, events[0].step), (1.5, 42));
    assert_eq!(events[0].what, EventWhat::Scalars(vec![("x".into(), 2.5)]));
    assert_eq!(
        (events[1].wall_time, &events[1].what),
        (2.0, &EventWhat::Other)
    );
}

#[test]
fn every_flipped_byte_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    for at in 0..good.len() {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let err = read_events(&path).expect_err("a flipped byte must not pass");
        let kind = io_kind(&err);
        assert!(
            matches!(kind, ErrorKind::InvalidData | ErrorKind::UnexpectedEof),
            "byte {at}: {err}"
        );
        assert!(err.to_string().contains("record "), "{err}");
    }
}

#[test]
fn truncated_files_are_errors_except_at_record_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_sample(dir.path());
    let good = std::fs::read(&path).unwrap();
    let boundaries: Vec<usize> = split_records(&good).iter().map(|r| r.0).collect();
    for cut in 0..good.len() {
        std::fs::write(&path, &good[..cut]).unwrap();
        match boundaries.iter().position(|&b| b == cut) {
            Some(records) => assert_eq!(read_events(&path).unwrap().len(), records),
            None => {
                let err = read_events(&path).expect_err("a cut record must not pass");
                assert_eq!(
                    io_kind(&err),
                    ErrorKind::UnexpectedEof,
                    "cut at {cut}: {err}"
                );
                assert!(err.to_string().contains("at byte"), "{err}");
            }
        }
    }
}

#[test]
fn a_huge_length_with_a_valid_crc_is_refused_before_allocating() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.out.tfevents.huge");
    let len = (u64::MAX / 2).to_le_bytes();
    let mut bytes = frame(b"");
    bytes.extend(len);
    bytes.extend(masked(crc32c_reference(&len)).to_le_bytes());
    bytes.extend([0u8; 8]);
    std::fs::write(&path, &bytes).unwrap();
    let err = read_events(&path).unwrap_err();
    assert_eq!(io_kind(&err), ErrorKind::UnexpectedEof);
    assert!(err.to_string().contains("record 1 at byte 16"), "{err}");
}

#[test]
fn a_sparse_file_as_large_as_its_forged_length_is_refused_before_allocating() {
    // The length (20 GiB) fits the file, which is sparse: only the bound
    // on a record's length keeps the reader from allocating it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.out.tfevents.sparse");
    let length = 20u64 << 30;
    let len = length.to_le_bytes();
    let mut bytes = len.to_vec();
    bytes.extend(masked(crc32c_reference(&len)).to_le_bytes());
    std::fs::write(&path, &bytes).unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(12 + length + 4).unwrap();
    drop(file);
    let err = bounded::within(5, "read_events on a sparse file", move || {
        read_events(&path).unwrap_err()
    });
    assert_eq!(io_kind(&err), ErrorKind::InvalidData);
    let message = err.to_string();
    assert!(message.contains("record 0 at byte 0"), "{message}");
    assert!(
        message.contains(&format!("over the {MAX_RECORD_BYTES} bytes")),
        "{message}"
    );
}

#[test]
fn fifos_are_refused_or_replaced_instead_of_waited_on() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("events.out.tfevents.fifo");
    if !bounded::mkfifo(&fifo) {
        return;
    }
    // Reading: opening a FIFO without a writer would block for ever.
    let f = fifo.clone();
    let err = bounded::within(5, "read_events on a FIFO", move || {
        read_events(&f).unwrap_err()
    });
    assert!(err.to_string().contains("not a regular file"), "{err}");
    assert!(bounded::is_fifo(&fifo));
    // Writing: opening a FIFO without a reader would block for ever; the
    // writers replace it with the file they write instead.
    let f = fifo.clone();
    bounded::within(5, "MetricsLog::csv on a FIFO", move || {
        let mut log = MetricsLog::csv(&f).unwrap();
        log.log(1, &[("loss", 0.5)]).unwrap();
        log.flush().unwrap();
    });
    assert_eq!(
        std::fs::read_to_string(&fifo).unwrap(),
        "step,loss\n1,0.5\n"
    );
    let svg = dir.path().join("curve.svg");
    assert!(bounded::mkfifo(&svg));
    let f = svg.clone();
    bounded::within(5, "write_curve_svg on a FIFO", move || {
        write_curve_svg(&f, "fifo", &[("loss", &[(0.0, 1.0), (1.0, 0.5)][..])]).unwrap()
    });
    assert!(std::fs::read_to_string(&svg).unwrap().contains("<svg"));
}

#[test]
fn outputs_replace_a_planted_link_instead_of_writing_through_it() {
    let dir = tempfile::tempdir().unwrap();
    let victim = dir.path().join("victim.txt");
    std::fs::write(&victim, "precious").unwrap();
    let log = dir.path().join("log.jsonl");
    let svg = dir.path().join("curve.svg");
    std::os::unix::fs::symlink(&victim, &log).unwrap();
    std::os::unix::fs::symlink(&victim, &svg).unwrap();
    let mut metrics = MetricsLog::json_lines(&log).unwrap();
    metrics.log(1, &[("loss", 0.5)]).unwrap();
    metrics.flush().unwrap();
    write_curve_svg(&svg, "link", &[("loss", &[(0.0, 1.0), (1.0, 0.5)][..])]).unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    for path in [&log, &svg] {
        assert!(
            std::fs::symlink_metadata(path).unwrap().is_file(),
            "{path:?}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(&log).unwrap(),
        "{\"step\":1,\"loss\":0.5}\n"
    );
}

#[test]
fn event_file_names_follow_tensorflow() {
    let dir = tempfile::tempdir().unwrap();
    let a = EventWriter::create(dir.path().join("run")).unwrap();
    let b = EventWriter::create(dir.path().join("run")).unwrap();
    assert_ne!(a.path(), b.path());
    for w in [&a, &b] {
        assert_eq!(w.path().parent().unwrap(), dir.path().join("run"));
        let name = w.path().file_name().unwrap().to_str().unwrap();
        let rest = name.strip_prefix("events.out.tfevents.").unwrap();
        let parts: Vec<&str> = rest.split('.').collect();
        assert!(parts.len() >= 4, "{name}");
        let seconds: u64 = parts[0].parse().unwrap();
        assert!(seconds > 1_600_000_000, "{name}");
        let pid: u32 = parts[parts.len() - 2].parse().unwrap();
        assert_eq!(pid, std::process::id());
        parts[parts.len() - 1].parse::<u64>().unwrap();
        assert!(!parts[1..parts.len() - 2].join(".").is_empty(), "{name}");
    }
}

// ---- metrics logs ----------------------------------------------------

#[test]
fn json_lines_parse_back() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.jsonl");
    let mut log = MetricsLog::json_lines(&path).unwrap();
    log.log(3, &[("loss", 0.25), ("accuracy", 0.5)]).unwrap();
    log.log(4, &[("loss", f64::NAN)]).unwrap();
    drop(log);
    let text = std::fs::read_to_string(&path).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        lines,
        vec![
            serde_json::json!({"step": 3, "loss": 0.25, "accuracy": 0.5}),
            serde_json::json!({"step": 4, "loss": null}),
        ]
    );
    assert!(text.starts_with("{\"step\":3,\"loss\":0.25,\"accuracy\":0.5}\n"));
}

#[test]
fn csv_has_a_header_and_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("metrics.csv");
    let mut log = MetricsLog::csv(&path).unwrap();
    log.log(1, &[("loss", 1.5), ("lr, decayed", 0.001)])
        .unwrap();
    log.log(2, &[("loss", f64::INFINITY), ("lr, decayed", 1e-4)])
        .unwrap();
    log.flush().unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    assert_eq!(
        text,
        "step,loss,\"lr, decayed\"\n1,1.5,0.001\n2,inf,0.0001\n"
    );
}

#[test]
fn csv_rows_must_keep_the_header_columns() {
    let dir = tempfile::tempdir().unwrap();
    let mut log = MetricsLog::csv(dir.path().join("m.csv")).unwrap();
    log.log(1, &[("loss", 1.0), ("acc", 0.5)]).unwrap();
    let err = log.log(2, &[("acc", 0.5), ("loss", 1.0)]).unwrap_err();
    assert!(matches!(err, Error::Value(_)));
    let message = err.to_string();
    assert!(message.contains(r#"["acc", "loss"]"#), "{message}");
    assert!(message.contains(r#"["loss", "acc"]"#), "{message}");
    assert!(log.log(3, &[("step", 1.0)]).is_err());
    assert!(log.log(3, &[("loss", 1.0), ("loss", 2.0)]).is_err());
}

// ---- curves ----------------------------------------------------------

#[test]
fn curve_svg_has_title_legend_and_lines() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("curve.svg");
    let loss: Vec<(f64, f64)> = (0..20).map(|s| (s as f64, 1.0 / (s + 1) as f64)).collect();
    let val = [(0.0, 0.9), (5.0, f64::NAN), (10.0, 0.3), (19.0, 0.2)];
    write_curve_svg(
        &path,
        "Training run 7",
        &[("loss", &loss), ("val_loss", &val)],
    )
    .unwrap();
    let svg = std::fs::read_to_string(&path).unwrap();
    assert!(svg.trim_start().starts_with("<svg") && svg.trim_end().ends_with("</svg>"));
    assert!(svg.contains("Training run 7"));
    assert!(svg.contains("val_loss") && svg.contains("loss"));
    assert!(svg.contains("<polyline") || svg.contains("<path"));
    assert!(!svg.contains("NaN"));
}

#[test]
fn curve_with_nothing_finite_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty.svg");
    let nan = [(0.0, f64::NAN), (f64::INFINITY, 1.0)];
    for series in [&[][..], &[("a", &[][..])][..], &[("a", &nan[..])][..]] {
        let err = write_curve_svg(&path, "empty", series).unwrap_err();
        assert!(matches!(err, Error::Value(_)), "{err}");
    }
}

#[test]
fn curves_of_extreme_values_are_drawn_promptly() {
    // Spans that overflow (±1e308, ±f64::MAX) or vanish beside their
    // values (1e16 and 1e16 + 2) made plotters' tick placement loop for
    // ever; the axes are clamped and widened instead.
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<Vec<(f64, f64)>> = vec![
        vec![(0.0, -1e308), (1.0, 1e308)],
        vec![(0.0, f64::MIN), (1.0, f64::MAX), (2.0, f64::INFINITY)],
        vec![(-1e308, 0.0), (1e308, 1.0)],
        vec![(0.0, 1e16), (1.0, 1e16 + 2.0)],
        vec![(0.0, 5e-324), (1.0, 1e-323)],
        vec![(0.0, 1e300)],
    ];
    for (i, points) in cases.into_iter().enumerate() {
        let path = dir.path().join(format!("extreme-{i}.svg"));
        let p = path.clone();
        let shown = format!("{points:?}");
        bounded::within(10, &format!("write_curve_svg of {shown}"), move || {
            write_curve_svg(&p, "extreme", &[("loss", &points)]).unwrap()
        });
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.trim_end().ends_with("</svg>"), "{shown}");
    }
}

/// With `XLAFN_SUMMARY_SAMPLE_DIR` set, writes the sample event file
/// there for `scripts/read_tensorboard_events.py` (TensorBoard's own
/// reader) to check; otherwise does nothing.
#[test]
fn sample_for_tensorboard() {
    let Some(dir) = std::env::var_os("XLAFN_SUMMARY_SAMPLE_DIR") else {
        return;
    };
    let path = write_sample(Path::new(&dir));
    println!("wrote {}", path.display());
}
