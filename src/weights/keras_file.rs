//! Keras' weight files: `model.save_weights("x.weights.h5")` (HDF5) and
//! the `model.weights.h5` inside a whole-model `.keras` archive (a zip).
//! Every dataset of a numeric type is a tensor, named by its HDF5 path
//! without the leading `/` (Keras 3 writes `layers/dense/vars/0`; a
//! legacy Keras 2 file `model_weights/dense/dense/kernel:0`);
//! [`Mapping::keras`](super::Mapping::keras) knows Keras 3's names.
//!
//! The file is untrusted input: the HDF5 structures are decoded by the
//! `hdf5-reader` crate (pure Rust; its cursors are bounds-checked, its
//! traversals cycle- and depth-limited), with external data files and
//! links left unresolved, and reads bounded here: a dataset's element
//! count and byte size are checked before anything is allocated, and no
//! read may decode more than [`MAX_DECODED_FACTOR`] times the file's size
//! (a compressed dataset of zeros expands, but not without bound). An
//! archive's `model.weights.h5` is read into memory, up to
//! [`MAX_ARCHIVE_MEMBER`].
//!
//! Not read: datasets of strings, compounds, enums and references (none
//! holds a weight), bfloat16 (HDF5 has no such type; Keras stores those
//! as float32 anyway) and SZIP-compressed data.
//!
//! Layer: part of `weights`. Imports `files` (the regular-file opener),
//! `dtype`, `tensor`, `error`, the `zip` crate (`.keras` archives) and
//! `hdf5-reader`.

use super::WeightInfo;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;
use hdf5_reader::group::Group;
use hdf5_reader::{Datatype, Hdf5File, OpenOptions};
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// HDF5's signature, at the start of a file with no user block.
const SIGNATURE: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// The member of a `.keras` archive holding its weights.
const ARCHIVE_WEIGHTS: &str = "model.weights.h5";

/// The largest `model.weights.h5` read out of an archive (16 GiB).
pub(crate) const MAX_ARCHIVE_MEMBER: u64 = 16 << 30;

/// A read may decode at most this many times the file's size (plus
/// 64 MiB), for compressed datasets.
pub(crate) const MAX_DECODED_FACTOR: u64 = 16;

/// The most datasets a file may hold (a weight each).
const MAX_DATASETS: usize = 1 << 20;

/// The deepest group nesting walked.
const MAX_DEPTH: usize = 64;

fn bad(path: &Path, message: String) -> Error {
    Error::invalid(
        "weights",
        format!("keras file {}: {message}", path.display()),
    )
}

/// An opened Keras weights file: each dataset's dtype and dims.
pub(crate) struct KerasFile {
    path: PathBuf,
    file: Hdf5File,
    tensors: BTreeMap<String, WeightInfo>,
}

/// Is the file at `path` HDF5 (its signature at offset 0)?
pub(crate) fn looks_like_hdf5(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    crate::files::open_regular(path, true)
        .ok()
        .and_then(|(mut f, _)| f.read_exact(&mut magic).ok())
        .is_some_and(|_| magic == *SIGNATURE)
}

/// Is the zip archive at `path` a `.keras` model (it holds
/// `model.weights.h5`)?
pub(crate) fn is_keras_archive(path: &Path) -> bool {
    crate::files::open_regular(path, true)
        .ok()
        .and_then(|(f, _)| zip::ZipArchive::new(std::io::BufReader::new(f)).ok())
        .is_some_and(|zip| zip.index_for_name(ARCHIVE_WEIGHTS).is_some())
}

/// The reader's bounds for a file of `size` bytes.
fn options(size: u64) -> OpenOptions {
    let limit = size
        .saturating_mul(MAX_DECODED_FACTOR)
        .saturating_add(64 << 20);
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    OpenOptions::default()
        .with_max_read_bytes(limit)
        .with_max_chunk_bytes(limit.min(hdf5_reader::DEFAULT_MAX_CHUNK_BYTES))
}

impl KerasFile {
    /// Opens an HDF5 file and lists its datasets (no data read).
    pub(crate) fn open(path: &Path) -> Result<KerasFile> {
        let (file, size) = crate::files::open_regular(path, true)?;
        let storage = hdf5_reader::FileStorage::from_file(file)
            .map_err(|e| bad(path, format!("cannot read: {e}")))?;
        let h5 = Hdf5File::from_storage_with_options(Arc::new(storage), options(size))
            .map_err(|e| bad(path, format!("not a readable HDF5 file: {e}")))?;
        KerasFile::listed(path, h5)
    }

    /// Opens the `model.weights.h5` of a `.keras` archive.
    pub(crate) fn open_archive(path: &Path) -> Result<KerasFile> {
        let (file, _) = crate::files::open_regular(path, true)?;
        let mut zip = zip::ZipArchive::new(std::io::BufReader::new(file))
            .map_err(|e| bad(path, format!("not a readable zip archive: {e}")))?;
        let member = zip
            .by_name(ARCHIVE_WEIGHTS)
            .map_err(|e| bad(path, format!("no member {ARCHIVE_WEIGHTS}: {e}")))?;
        let mut bytes = Vec::new();
        member
            .take(MAX_ARCHIVE_MEMBER + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("weights: cannot read keras archive", path, e))?;
        if bytes.len() as u64 > MAX_ARCHIVE_MEMBER {
            return Err(bad(
                path,
                format!("{ARCHIVE_WEIGHTS} is larger than {MAX_ARCHIVE_MEMBER} bytes"),
            ));
        }
        let size = bytes.len() as u64;
        let h5 = Hdf5File::from_vec_with_options(bytes, options(size)).map_err(|e| {
            bad(
                path,
                format!("{ARCHIVE_WEIGHTS} is not a readable HDF5 file: {e}"),
            )
        })?;
        KerasFile::listed(path, h5)
    }

    fn listed(path: &Path, file: Hdf5File) -> Result<KerasFile> {
        let root = file
            .root_group()
            .map_err(|e| bad(path, format!("no root group: {e}")))?;
        let mut tensors = BTreeMap::new();
        walk(path, &root, "", 0, &mut tensors)?;
        Ok(KerasFile {
            path: path.to_path_buf(),
            file,
            tensors,
        })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn names(&self) -> Vec<&str> {
        self.tensors.keys().map(String::as_str).collect()
    }

    pub(crate) fn info(&self, name: &str) -> Option<WeightInfo> {
        self.tensors.get(name).cloned()
    }

    /// Reads dataset `name`, converted to little-endian.
    pub(crate) fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self
            .tensors
            .get(name)
            .ok_or_else(|| bad(&self.path, format!("no tensor '{name}'")))?;
        let dataset = self
            .file
            .dataset(&format!("/{name}"))
            .map_err(|e| bad(&self.path, format!("dataset '{name}': {e}")))?;
        let bytes = dataset
            .read_native_bytes()
            .map_err(|e| bad(&self.path, format!("dataset '{name}': {e}")))?;
        let want = expected_bytes(info)?;
        if bytes.len() as u64 != want {
            return Err(bad(
                &self.path,
                format!(
                    "dataset '{name}' read {} bytes, {info} needs {want}",
                    bytes.len()
                ),
            ));
        }
        // The reader converts to the host's order; tensors take
        // little-endian bytes.
        let bytes = match cfg!(target_endian = "big") {
            true => swapped(&bytes, info.dtype.size_in_bytes()?),
            false => bytes,
        };
        Tensor::from_host_bytes(info.dtype, &info.dims, &bytes)
    }
}

/// Lists every numeric dataset under `group` (at `prefix`).
fn walk(
    path: &Path,
    group: &Group,
    prefix: &str,
    depth: usize,
    out: &mut BTreeMap<String, WeightInfo>,
) -> Result<()> {
    if depth > MAX_DEPTH {
        return Err(bad(
            path,
            format!("groups nested deeper than {MAX_DEPTH} at '{prefix}'"),
        ));
    }
    let (groups, datasets) = group
        .members()
        .map_err(|e| bad(path, format!("group '/{prefix}': {e}")))?;
    for dataset in datasets {
        let name = join(prefix, dataset.name());
        let Some(dtype) = dtype_of(dataset.dtype()) else {
            continue;
        };
        let dims = dataset
            .shape()
            .iter()
            .map(|&d| i64::try_from(d))
            .collect::<std::result::Result<Vec<i64>, _>>()
            .map_err(|_| bad(path, format!("dataset '{name}' has a dimension over i64")))?;
        let info = WeightInfo { dtype, dims };
        crate::dtype::check_array_size(info.dtype, &info.dims)
            .map_err(|e| bad(path, format!("dataset '{name}': {e}")))?;
        if out.len() >= MAX_DATASETS {
            return Err(bad(path, format!("more than {MAX_DATASETS} datasets")));
        }
        out.insert(name, info);
    }
    for child in groups {
        let name = join(prefix, child.name());
        walk(path, &child, &name, depth + 1, out)?;
    }
    Ok(())
}

fn join(prefix: &str, name: &str) -> String {
    match prefix {
        "" => name.to_string(),
        _ => format!("{prefix}/{name}"),
    }
}

/// xlafn's dtype for an HDF5 numeric type (`None`: not a weight).
fn dtype_of(t: &Datatype) -> Option<DType> {
    match *t {
        Datatype::FloatingPoint { size: 2, .. } => Some(DType::F16),
        Datatype::FloatingPoint { size: 4, .. } => Some(DType::F32),
        Datatype::FloatingPoint { size: 8, .. } => Some(DType::F64),
        Datatype::FixedPoint { size, signed, .. } => match (size, signed) {
            (1, true) => Some(DType::I8),
            (2, true) => Some(DType::I16),
            (4, true) => Some(DType::I32),
            (8, true) => Some(DType::I64),
            (1, false) => Some(DType::U8),
            (2, false) => Some(DType::U16),
            (4, false) => Some(DType::U32),
            (8, false) => Some(DType::U64),
            _ => None,
        },
        _ => None,
    }
}

fn expected_bytes(info: &WeightInfo) -> Result<u64> {
    let width = info.dtype.size_in_bytes()? as u64;
    Ok(info.dims.iter().fold(width, |a, &d| a * d as u64))
}

fn swapped(bytes: &[u8], width: usize) -> Vec<u8> {
    bytes
        .chunks(width)
        .flat_map(|c| c.iter().rev().copied())
        .collect()
}
