//! [`MetricsLog`]: metrics per step as JSON lines or CSV, the two formats
//! a notebook, `jq` or a spreadsheet reads without TensorBoard.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// Which format a [`MetricsLog`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    JsonLines,
    Csv,
}

/// A log of metrics per step, one line per [`log`](MetricsLog::log) call.
///
/// - JSON lines: `{"step":3,"loss":0.25,"accuracy":0.5}`, names in the
///   order given. JSON has no NaN or infinity, so a non-finite value is
///   written as `null`. Rows may name different metrics.
/// - CSV: a header `step,loss,accuracy` from the first row's names, then
///   one row per call; every later row must name the same metrics in the
///   same order (an `Error::Value` naming both lists otherwise), since a
///   CSV file has one header. Non-finite values are written `NaN`, `inf`
///   and `-inf`, which pandas and spreadsheets read as such. Names holding
///   a comma, a quote or a line break are quoted as RFC 4180 says.
///
/// A name may not be `step` nor appear twice in one row.
///
/// The file is created as every file of the crate is written: a new file
/// beside `path`, renamed over it at once, then written through the
/// handle. Whatever was at `path` (a file, a symlink, a FIFO) is
/// replaced, never followed, opened or waited on.
/// Writes are buffered; [`flush`](MetricsLog::flush) writes them out, as
/// does dropping the log (where an error can only be logged).
///
/// ```
/// use xlafn::summary::MetricsLog;
/// let path = std::env::temp_dir().join(format!("xlafn-metrics-doc-{}.csv", std::process::id()));
/// let mut log = MetricsLog::csv(&path)?;
/// log.log(1, &[("loss", 0.5), ("accuracy", 0.25)])?;
/// log.log(2, &[("loss", 0.25), ("accuracy", 0.75)])?;
/// log.flush()?;
/// let text = std::fs::read_to_string(&path).unwrap();
/// assert_eq!(text, "step,loss,accuracy\n1,0.5,0.25\n2,0.25,0.75\n");
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub struct MetricsLog {
    out: BufWriter<File>,
    path: PathBuf,
    format: Format,
    /// The CSV header's metric names, once the first row has set them.
    columns: Option<Vec<String>>,
}

impl std::fmt::Debug for MetricsLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetricsLog")
            .field("path", &self.path)
            .field("format", &self.format)
            .finish()
    }
}

impl MetricsLog {
    /// Creates (or replaces) `path` as a JSON-lines log.
    pub fn json_lines(path: impl AsRef<Path>) -> Result<MetricsLog> {
        MetricsLog::create(path.as_ref(), Format::JsonLines)
    }

    /// Creates (or replaces) `path` as a CSV log.
    pub fn csv(path: impl AsRef<Path>) -> Result<MetricsLog> {
        MetricsLog::create(path.as_ref(), Format::Csv)
    }

    fn create(path: &Path, format: Format) -> Result<MetricsLog> {
        let file = crate::export::replace_file_streaming(path)?;
        Ok(MetricsLog {
            out: BufWriter::new(file),
            path: path.to_path_buf(),
            format,
            columns: None,
        })
    }

    /// The file being written.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes one line: `step` and each `(name, value)`.
    pub fn log(&mut self, step: i64, values: &[(&str, f64)]) -> Result<()> {
        check_names(values)?;
        let line = match self.format {
            Format::JsonLines => json_line(step, values),
            Format::Csv => self.csv_lines(step, values)?,
        };
        self.write(line.as_bytes())
    }

    /// Writes everything buffered to the file.
    pub fn flush(&mut self) -> Result<()> {
        self.out
            .flush()
            .map_err(|e| Error::io("cannot write metrics log", &self.path, e))
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.out
            .write_all(bytes)
            .map_err(|e| Error::io("cannot write metrics log", &self.path, e))
    }

    /// The CSV row, preceded by the header on the first call; a row whose
    /// names differ from the header's is an error.
    fn csv_lines(&mut self, step: i64, values: &[(&str, f64)]) -> Result<String> {
        let names: Vec<String> = values.iter().map(|(n, _)| n.to_string()).collect();
        let header = match &self.columns {
            None => {
                csv_row(std::iter::once("step".into()).chain(names.iter().map(|n| csv_field(n))))
            }
            Some(columns) if *columns != names => {
                return Err(Error::Value(format!(
                    "metrics log {}: step {step} logs columns {names:?}, but the CSV header has {columns:?}",
                    self.path.display()
                )));
            }
            Some(_) => String::new(),
        };
        self.columns = Some(names);
        let cells = values.iter().map(|(_, v)| format!("{v:?}"));
        Ok(header + &csv_row(std::iter::once(step.to_string()).chain(cells)))
    }
}

impl Drop for MetricsLog {
    fn drop(&mut self) {
        if let Err(e) = self.flush() {
            tracing::warn!("dropping a MetricsLog: {e}");
        }
    }
}

/// Rejects a metric named `step` (the first column already) and a name
/// given twice in one row: either would make a column ambiguous.
fn check_names(values: &[(&str, f64)]) -> Result<()> {
    for (i, (name, _)) in values.iter().enumerate() {
        if *name == "step" {
            return Err(Error::Value(
                "metrics log: `step` is the step column; name the metric otherwise".into(),
            ));
        }
        if values[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::Value(format!(
                "metrics log: metric {name:?} appears twice in one row"
            )));
        }
    }
    Ok(())
}

/// `{"step":3,"loss":0.25}` and a newline; non-finite values as `null`.
fn json_line(step: i64, values: &[(&str, f64)]) -> String {
    let mut line = format!("{{\"step\":{step}");
    for (name, value) in values {
        let number = serde_json::Number::from_f64(*value)
            .map_or(serde_json::Value::Null, serde_json::Value::Number);
        line += &format!(",{}:{number}", serde_json::Value::from(*name));
    }
    line + "}\n"
}

/// Cells joined by commas, with a newline.
fn csv_row(cells: impl Iterator<Item = String>) -> String {
    cells.collect::<Vec<_>>().join(",") + "\n"
}

/// `name`, quoted (quotes doubled) when it holds a comma, a quote or a
/// line break.
fn csv_field(name: &str) -> String {
    if name.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", name.replace('"', "\"\""))
    } else {
        name.to_string()
    }
}
