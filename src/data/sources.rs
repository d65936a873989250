//! Where examples come from: host arrays and tensors (sliced along their
//! first axis), `.npy`/`.npz`/safetensors files, text and CSV files, and
//! Rust iterators.

use super::example::{self, Example, flatten, row, unflatten};
use super::ordered_map::panicked;
use super::text::{DEFAULT_MAX_LINE_BYTES, Line, RecordBound, excerpt, next_line};
use super::{Cardinality, Dataset, Elements};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::runtime::HostArray;
use crate::tensor::Tensor;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

impl<T: Clone + Send + Sync + 'static> Dataset<T> {
    /// The items of `items`, in order (cloned on every pass).
    pub fn from_vec(items: Vec<T>) -> Dataset<T> {
        let items = Arc::new(items);
        let n = items.len() as u64;
        Dataset::from_pass_fn(Cardinality::Finite(n), move |_| {
            let items = items.clone();
            Box::new((0..items.len()).map(move |i| Ok(items[i].clone())))
        })
    }
}

impl Dataset<i64> {
    /// The integers `start..end` (`tf.data.Dataset.range`). Its
    /// cardinality is the exact count, which a `u64` always holds
    /// (`range(i64::MIN, i64::MAX)` has `2^64 - 1`; `tf.data`'s `int64`
    /// count could not say it).
    pub fn range(start: i64, end: i64) -> Dataset<i64> {
        let n = if end > start { end.abs_diff(start) } else { 0 };
        Dataset::from_pass_fn(Cardinality::Finite(n), move |_| {
            Box::new((start..end).map(Ok))
        })
    }
}

impl<T: Send + 'static> Dataset<T> {
    /// A dataset whose every pass iterates what `make` returns
    /// (`from_generator`): a Rust iterator, restarted per epoch. A panic in
    /// `make` or in the iterator becomes an error naming the generator,
    /// and ends the pass (a panicked iterator may be in any state).
    pub fn from_generator<I>(make: impl Fn() -> I + Send + Sync + 'static) -> Dataset<T>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
    {
        Dataset::from_pass_fn(Cardinality::Unknown, move |_| generated(&make))
    }

    /// A dataset of one pass over `iter`. A second pass is an error (an
    /// iterator cannot restart); use [`from_generator`](Dataset::from_generator)
    /// for a dataset iterated every epoch. A panic in the iterator becomes
    /// an error, as in `from_generator`.
    pub fn from_iter_once<I>(iter: I) -> Dataset<T>
    where
        I: IntoIterator<Item = T>,
        I::IntoIter: Send + 'static,
    {
        let slot = Arc::new(Mutex::new(Some(iter.into_iter())));
        Dataset::from_pass_fn(Cardinality::Unknown, move |_| {
            match slot.lock().ok().and_then(|mut s| s.take()) {
                Some(it) => guarded(it, "the one-pass iterator (from_iter_once)"),
                None => Box::new(std::iter::once(Err(Error::FailedPrecondition(
                    "data: this dataset came from a one-pass iterator (from_iter_once) and was \
                     already iterated; use Dataset::from_generator to restart it every epoch"
                        .into(),
                )))),
            }
        })
    }
}

/// One pass of a generator's items, a panic caught as an error item that
/// ends the pass.
fn generated<T: Send + 'static, I>(make: &dyn Fn() -> I) -> Elements<T>
where
    I: IntoIterator<Item = T>,
    I::IntoIter: Send + 'static,
{
    match catch_unwind(AssertUnwindSafe(|| make().into_iter())) {
        Ok(items) => guarded(items, "the generator"),
        Err(p) => Box::new(std::iter::once(Err(panicked("the generator panicked", p)))),
    }
}

/// `items`, a panic in the iterator caught as an error item naming
/// `whose` it is; the pass ends there (a panicked iterator may be in any
/// state).
fn guarded<T: Send + 'static>(
    items: impl Iterator<Item = T> + Send + 'static,
    whose: &'static str,
) -> Elements<T> {
    let mut items = Some(items);
    let mut index = 0u64;
    Box::new(std::iter::from_fn(move || {
        let next = catch_unwind(AssertUnwindSafe(|| items.as_mut()?.next()));
        index += 1;
        match next {
            Ok(item) => item.map(Ok),
            Err(p) => {
                items = None;
                let what = format!(
                    "{whose} panicked at item {}, and this pass stops",
                    index - 1
                );
                Some(Err(panicked(&what, p)))
            }
        }
    }))
}

impl<T: Example> Dataset<T> {
    /// The rows of `arrays` (`from_tensor_slices`): example `i` holds row
    /// `i` of every part. Every part needs a first axis of one length.
    ///
    /// ```
    /// use xlafn::data::Dataset;
    /// use xlafn::runtime::HostArray;
    /// let x = HostArray::from_vec(vec![1f32, 2., 3., 4., 5., 6.], &[3, 2]);
    /// let y = HostArray::from_vec(vec![0i32, 1, 0], &[3]);
    /// let rows = Dataset::from_tensor_slices((x, y))?.collect_epoch(0)?;
    /// assert_eq!(rows[1].0.to_vec::<f32>()?, vec![3., 4.]);
    /// assert_eq!(rows[1].1.to_vec::<i32>()?, vec![1]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn from_tensor_slices(arrays: T) -> Result<Dataset<T>> {
        let parts = flatten(arrays);
        let rows = check_slices(&parts)?;
        let parts = Arc::new(parts);
        Ok(Dataset::from_pass_fn(
            Cardinality::Finite(rows as u64),
            move |_| {
                let parts = parts.clone();
                Box::new(
                    (0..rows).map(move |i| unflatten(parts.iter().map(|a| row(a, i)).collect())),
                )
            },
        ))
    }
}

/// Checks parts for slicing and returns their common first-axis length.
fn check_slices(parts: &[HostArray]) -> Result<usize> {
    let Some(first) = parts.first() else {
        return Err(Error::Value(
            "data: from_tensor_slices needs at least one array".into(),
        ));
    };
    for (p, a) in parts.iter().enumerate() {
        example::check_array(a, &format!("part {p}"))?;
        if a.dims.is_empty() {
            return Err(Error::Value(format!(
                "data: from_tensor_slices slices every part along its first axis, which needs \
                 rank >= 1, but part {p} is a scalar {}[]; make it a vector of one element \
                 (dims [1]) for one example",
                a.dtype
            )));
        }
        if a.dims.first() != first.dims.first() {
            return Err(Error::Value(format!(
                "data: from_tensor_slices slices every part along its first axis, so each needs \
                 one of the same length: part 0 is {}{:?}, part {p} {}{:?}",
                first.dtype, first.dims, a.dtype, a.dims
            )));
        }
    }
    Ok(first.dims[0] as usize)
}

impl Dataset<Vec<HostArray>> {
    /// The rows of tensors (read back to the host once).
    pub fn from_tensors(tensors: &[&Tensor]) -> Result<Dataset<Vec<HostArray>>> {
        let arrays = tensors
            .iter()
            .map(|t| t.to_host_array())
            .collect::<Result<Vec<HostArray>>>()?;
        Dataset::from_tensor_slices(arrays)
    }

    /// The rows of the arrays `names` of an `.npz` file (all of them, in
    /// archive order, when `names` is empty).
    pub fn npz(path: impl AsRef<Path>, names: &[&str]) -> Result<Dataset<Vec<HostArray>>> {
        let arrays =
            crate::export::io::read_npz_host(&path, crate::export::io::DEFAULT_MAX_NPZ_BYTES)?;
        let arrays = arrays
            .into_iter()
            .map(|(n, a)| (n, with_bools(a)))
            .collect();
        Dataset::from_tensor_slices(pick(arrays, names, path.as_ref())?)
    }

    /// The rows of the tensors `names` of a safetensors file (all of
    /// them, in name order, when `names` is empty).
    pub fn safetensors(path: impl AsRef<Path>, names: &[&str]) -> Result<Dataset<Vec<HostArray>>> {
        let path = path.as_ref();
        let arrays = read_safetensors(path)?;
        Dataset::from_tensor_slices(pick(arrays, names, path)?)
    }

    /// Rows of a CSV file, each field parsed to a scalar of its column's
    /// dtype (`tf.data.experimental.CsvDataset`); read lazily, a line at
    /// a time. A field that does not parse is an error naming its line
    /// and column, in that row's place.
    pub fn csv(path: impl AsRef<Path>, options: CsvOptions) -> Dataset<Vec<HostArray>> {
        let path = path.as_ref().to_path_buf();
        Dataset::from_pass_fn(Cardinality::Unknown, move |_| csv_rows(&path, &options))
    }
}

impl Dataset<HostArray> {
    /// The rows of an `.npy` file's array.
    pub fn npy(path: impl AsRef<Path>) -> Result<Dataset<HostArray>> {
        Dataset::from_tensor_slices(with_bools(crate::export::io::read_npy_host(path)?))
    }
}

/// A file's array with its booleans made 0 or 1, as the checkpoint reader
/// makes them (see `dtype::normalize_bools`): safetensors files may hold
/// any byte in a `bool` array (`.npy` decoding normalizes them itself).
fn with_bools(mut a: HostArray) -> HostArray {
    crate::dtype::normalize_bools(a.dtype, &mut a.bytes);
    a
}

impl Dataset<String> {
    /// The lines of text files, one file after another, without their
    /// line endings (`tf.data.TextLineDataset`); read lazily. A line that
    /// is not UTF-8 is an error in its place. A line longer than
    /// [`DEFAULT_MAX_LINE_BYTES`] is an error too, and the rest of its file
    /// is not read: it is never held whole, and finding where it ends
    /// could mean reading a file of any size.
    pub fn text_lines(paths: &[impl AsRef<Path>]) -> Dataset<String> {
        Dataset::text_lines_with_limit(paths, DEFAULT_MAX_LINE_BYTES)
    }

    /// [`text_lines`](Dataset::text_lines) with lines of up to
    /// `max_line_bytes` bytes (its `\n` not counted, a `\r` before it
    /// counted).
    pub fn text_lines_with_limit(
        paths: &[impl AsRef<Path>],
        max_line_bytes: usize,
    ) -> Dataset<String> {
        let paths: Vec<PathBuf> = paths.iter().map(|p| p.as_ref().to_path_buf()).collect();
        Dataset::from_pass_fn(Cardinality::Unknown, move |_| {
            let files = paths.clone().into_iter();
            Box::new(files.flat_map(move |path| lines_of(path, max_line_bytes)))
        })
    }
}

fn lines_of(path: PathBuf, max: usize) -> Elements<String> {
    // A regular file only: a FIFO or a device would block the pass.
    let mut reader = match crate::export::open_regular_file(&path) {
        Ok((f, _)) => Some(std::io::BufReader::new(f)),
        Err(e) => return Box::new(std::iter::once(Err(e))),
    };
    let mut number = 0u64;
    Box::new(std::iter::from_fn(move || {
        number += 1;
        match next_line(reader.as_mut()?, max) {
            Ok(Some(Line::TooLong)) => {
                reader = None;
                Some(Err(too_long(number, max, &path)))
            }
            Ok(Some(Line::Bytes(bytes))) => Some(text_line(bytes, number, &path)),
            Ok(None) => None,
            Err(e) => {
                reader = None; // a file that failed once is not read on
                let doing = format!("data: cannot read line {number}");
                Some(Err(Error::io(doing, &path, e)))
            }
        }
    }))
}

fn too_long(number: u64, max: usize, path: &Path) -> Error {
    Error::Value(format!(
        "data: {} line {number} is longer than the {max} bytes a line may have \
         (Dataset::text_lines_with_limit takes another bound); the rest of the file is not read",
        path.display()
    ))
}

/// Line `number` as text, without a `\r` before its `\n`.
fn text_line(bytes: Vec<u8>, number: u64, path: &Path) -> Result<String> {
    let mut text = String::from_utf8(bytes).map_err(|e| {
        Error::Value(format!(
            "data: {} line {number} is not UTF-8: {}",
            path.display(),
            e.utf8_error()
        ))
    })?;
    if text.ends_with('\r') {
        text.pop();
    }
    Ok(text)
}

/// Picks named arrays, in `names`' order (all when empty).
fn pick(arrays: Vec<(String, HostArray)>, names: &[&str], path: &Path) -> Result<Vec<HostArray>> {
    if names.is_empty() {
        return Ok(arrays.into_iter().map(|(_, a)| a).collect());
    }
    names
        .iter()
        .map(|name| {
            arrays
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, a)| a.clone())
                .ok_or_else(|| {
                    let have: Vec<&str> = arrays.iter().map(|(n, _)| n.as_str()).collect();
                    Error::Value(format!(
                        "data: {} has no array '{name}'; it has {}",
                        path.display(),
                        crate::checkpoint::quoted(&have)
                    ))
                })
        })
        .collect()
}

/// The most a safetensors source reads (as much as an `.npz` may inflate
/// to): the file is read whole, so it is bounded.
const MAX_SAFETENSORS_BYTES: u64 = crate::export::io::DEFAULT_MAX_NPZ_BYTES;

fn read_safetensors(path: &Path) -> Result<Vec<(String, HostArray)>> {
    let bytes = crate::export::read_regular_file(path, MAX_SAFETENSORS_BYTES)?;
    let file = safetensors::SafeTensors::deserialize(&bytes).map_err(|e| {
        Error::Value(format!(
            "data: {} is not a safetensors file: {e}",
            path.display()
        ))
    })?;
    let mut names: Vec<String> = file.names().into_iter().map(|s| s.to_string()).collect();
    names.sort();
    names
        .into_iter()
        .map(|name| {
            let view = file
                .tensor(&name)
                .map_err(|e| Error::Value(format!("data: {}: {e}", path.display())))?;
            let array = HostArray {
                dtype: crate::checkpoint::from_safetensors(view.dtype(), &name)?,
                dims: view.shape().iter().map(|&d| d as i64).collect(),
                bytes: view.data().to_vec(),
            };
            Ok((name, with_bools(array)))
        })
        .collect()
}

/// How [`Dataset::csv`] reads a file.
#[derive(Clone, Debug)]
pub struct CsvOptions {
    columns: Vec<DType>,
    select: Option<Vec<usize>>,
    header: bool,
    delimiter: u8,
    max_line_bytes: usize,
}

impl CsvOptions {
    /// Columns of these dtypes (one per column read), comma-separated,
    /// no header line.
    pub fn new(columns: &[DType]) -> CsvOptions {
        CsvOptions {
            columns: columns.to_vec(),
            select: None,
            header: false,
            delimiter: b',',
            max_line_bytes: DEFAULT_MAX_LINE_BYTES,
        }
    }

    /// Skips the first line.
    pub fn header(mut self, header: bool) -> CsvOptions {
        self.header = header;
        self
    }

    /// The field separator.
    pub fn delimiter(mut self, delimiter: u8) -> CsvOptions {
        self.delimiter = delimiter;
        self
    }

    /// Reads only these columns (0-based, increasing), one dtype each.
    pub fn select(mut self, columns: &[usize]) -> CsvOptions {
        self.select = Some(columns.to_vec());
        self
    }

    /// The longest record read, in bytes, besides its line ending (two
    /// bytes are allowed for `\r\n`); [`DEFAULT_MAX_LINE_BYTES`] unless
    /// set. A record is a line, or the lines of a quoted field that spans
    /// several. A longer one is an error, and the pass ends there: the
    /// reader cannot find the next record without reading this one.
    pub fn max_line_bytes(mut self, max_line_bytes: usize) -> CsvOptions {
        self.max_line_bytes = max_line_bytes;
        self
    }
}

fn csv_rows(path: &Path, options: &CsvOptions) -> Elements<Vec<HostArray>> {
    // A regular file only: a FIFO or a device would block the pass.
    let file = match crate::export::open_regular_file(path) {
        Ok((file, _)) => file,
        Err(e) => return Box::new(std::iter::once(Err(e))),
    };
    // The header is skipped here rather than by the reader, which would
    // read it and the first row as one record against the bound.
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .delimiter(options.delimiter)
        .flexible(true)
        .from_reader(RecordBound::new(file, options.max_line_bytes));
    let (options, path) = (options.clone(), path.to_path_buf());
    let mut record = csv::StringRecord::new();
    let mut header = options.header;
    Box::new(std::iter::from_fn(move || {
        loop {
            let line = reader.position().line();
            let is_header = std::mem::take(&mut header);
            let read = reader.read_record(&mut record);
            let next_start = reader.position().byte();
            reader.get_mut().record_starts_at(next_start);
            return match read {
                Ok(false) => None,
                Ok(true) if is_header => continue,
                Ok(true) => Some(parse_record(&record, &options, &path)),
                Err(_) if reader.get_ref().exceeded() => Some(Err(Error::Value(format!(
                    "data: {} line {line} starts a record longer than {} bytes \
                     (CsvOptions::max_line_bytes); the rest of the file is not read",
                    path.display(),
                    options.max_line_bytes
                )))),
                Err(e) => Some(Err(Error::Value(format!("data: {}: {e}", path.display())))),
            };
        }
    }))
}

fn parse_record(
    record: &csv::StringRecord,
    options: &CsvOptions,
    path: &Path,
) -> Result<Vec<HostArray>> {
    let line = record.position().map_or(0, |p| p.line());
    let columns: Vec<usize> = match &options.select {
        Some(s) => s.clone(),
        None => (0..options.columns.len()).collect(),
    };
    if columns.len() != options.columns.len() {
        return Err(Error::Value(format!(
            "data: csv: {} columns selected but {} dtypes given",
            columns.len(),
            options.columns.len()
        )));
    }
    columns
        .iter()
        .zip(&options.columns)
        .map(|(&c, &dtype)| {
            let field = record.get(c).ok_or_else(|| {
                Error::Value(format!(
                    "data: {} line {line} has {} fields, no column {c}",
                    path.display(),
                    record.len()
                ))
            })?;
            parse_field(field.trim(), dtype).map_err(|why| {
                Error::Value(format!(
                    "data: {} line {line} column {c}: {} is not a {dtype}: {why}",
                    path.display(),
                    excerpt(field)
                ))
            })
        })
        .collect()
}

fn parse_field(field: &str, dtype: DType) -> std::result::Result<HostArray, String> {
    fn parsed<T: crate::runtime::Element + std::str::FromStr>(
        field: &str,
    ) -> std::result::Result<HostArray, String>
    where
        T::Err: std::fmt::Display,
    {
        field
            .parse::<T>()
            .map(|v| HostArray::from_vec(vec![v], &[]))
            .map_err(|e| e.to_string())
    }
    match dtype {
        DType::F32 => parsed::<f32>(field),
        DType::F64 => parsed::<f64>(field),
        DType::I32 => parsed::<i32>(field),
        DType::I64 => parsed::<i64>(field),
        DType::U8 => parsed::<u8>(field),
        DType::Bool => parsed::<bool>(field),
        other => Err(format!(
            "csv columns are f32, f64, i32, i64, u8 or bool, not {other}"
        )),
    }
}
