//! PyTorch's `torch.save` files (`.pth`, `.pt`, `.bin`): a zip archive
//! holding `<name>/data.pkl` (the pickled state dict) and one file per
//! storage, `<name>/data/<key>`, written little-endian and uncompressed.
//! Opening reads the pickle with the restricted unpickler and checks every
//! tensor against its storage: the dtype's size times the storage's
//! elements is the storage file's size, and the view's offset, sizes and
//! strides stay inside it. Reading a tensor reads its storage only and
//! gathers the view into dense row-major order (a non-contiguous view, a
//! transposed weight say, is copied).
//!
//! Not read: the legacy format before PyTorch 1.6 (not a zip), big-endian
//! archives, and pickles that hold anything but dicts of tensors
//! (a whole pickled `nn.Module` needs its Python classes).
//!
//! Layer: part of `weights`. Imports `files` (the regular-file opener),
//! `export::npy` (the strided gather), `dtype`, `tensor`, `error` and the
//! `zip` crate.

use super::WeightInfo;
use super::torch_pickle::{self, MAX_PICKLE_BYTES, TensorRecord};
use crate::error::{Error, Result};
use crate::export::npy::gather_strided;
use crate::tensor::Tensor;
use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// The most members an archive may list (a storage per tensor).
const MAX_MEMBERS: usize = 1 << 20;

fn bad(path: &Path, message: String) -> Error {
    Error::invalid(
        "weights",
        format!("torch file {}: {message}", path.display()),
    )
}

/// An opened `torch.save` archive: each tensor's view of its storage.
pub(crate) struct TorchFile {
    path: PathBuf,
    /// The archive's folder (`archive/`, or the saved file's stem).
    root: String,
    tensors: BTreeMap<String, Record>,
}

/// A tensor's view, checked against its storage (`Send`: the unpickler's
/// shared values are gone once it is copied out).
#[derive(Clone, Debug)]
struct Record {
    key: String,
    info: WeightInfo,
    offset: u64,
    strides: Vec<i64>,
    storage_bytes: u64,
}

/// Is the file at `path` a zip archive (`PK\x03\x04`), as `torch.save`
/// writes?
pub(crate) fn looks_like_torch(path: &Path) -> bool {
    let mut magic = [0u8; 4];
    crate::files::open_regular(path, true)
        .ok()
        .and_then(|(mut f, _)| f.read_exact(&mut magic).ok())
        .is_some_and(|_| magic == *b"PK\x03\x04")
}

fn archive(path: &Path) -> Result<zip::ZipArchive<std::io::BufReader<std::fs::File>>> {
    let (file, _) = crate::files::open_regular(path, true)?;
    let zip = zip::ZipArchive::new(std::io::BufReader::new(file))
        .map_err(|e| bad(path, format!("not a readable zip archive: {e}")))?;
    if zip.len() > MAX_MEMBERS {
        return Err(bad(
            path,
            format!("{} members, over {MAX_MEMBERS}", zip.len()),
        ));
    }
    Ok(zip)
}

/// Reads member `name` whole, refusing one longer than `limit`.
fn read_member<R: Read + Seek>(
    zip: &mut zip::ZipArchive<R>,
    path: &Path,
    name: &str,
    limit: u64,
) -> Result<Vec<u8>> {
    let member = zip
        .by_name(name)
        .map_err(|e| bad(path, format!("no member {name}: {e}")))?;
    let mut out = Vec::new();
    member
        .take(limit.saturating_add(1))
        .read_to_end(&mut out)
        .map_err(|e| Error::io("weights: cannot read torch file", path, e))?;
    if out.len() as u64 > limit {
        return Err(bad(
            path,
            format!("member {name} is larger than {limit} bytes"),
        ));
    }
    Ok(out)
}

impl TorchFile {
    /// Opens `path` and checks its state dict (no tensor data read).
    pub(crate) fn open(path: &Path) -> Result<TorchFile> {
        let mut zip = archive(path)?;
        let pickle = (0..zip.len())
            .filter_map(|i| zip.name_for_index(i).map(str::to_string))
            .find(|n| n.ends_with("/data.pkl") && n.matches('/').count() == 1)
            .ok_or_else(|| {
                bad(
                    path,
                    "no <name>/data.pkl inside: not a torch.save archive (files saved before \
                     PyTorch 1.6 are not read: load and save them again with a newer PyTorch)"
                        .into(),
                )
            })?;
        let root = pickle.trim_end_matches("data.pkl").to_string();
        if let Ok(order) = read_member(&mut zip, path, &format!("{root}byteorder"), 16)
            && order != b"little"
        {
            return Err(bad(path, "a big-endian archive".into()));
        }
        let bytes = read_member(&mut zip, path, &pickle, MAX_PICKLE_BYTES)?;
        let value = torch_pickle::unpickle(&bytes).map_err(|e| match e {
            Error::InvalidArgument { message, .. } => bad(path, message),
            other => other,
        })?;
        let mut tensors = BTreeMap::new();
        for (name, t) in torch_pickle::tensors(&value)? {
            let record = check(path, &name, &t, |key| {
                let member = format!("{root}data/{key}");
                zip.by_name(&member).map(|m| m.size()).ok()
            })?;
            tensors.insert(name, record);
        }
        Ok(TorchFile {
            path: path.to_path_buf(),
            root,
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
        self.tensors.get(name).map(|r| r.info.clone())
    }

    /// Reads tensor `name`: its storage, then the view gathered dense.
    pub(crate) fn tensor(&self, name: &str) -> Result<Tensor> {
        let r = self
            .tensors
            .get(name)
            .ok_or_else(|| bad(&self.path, format!("no tensor '{name}'")))?;
        let mut zip = archive(&self.path)?;
        let member = format!("{}data/{}", self.root, r.key);
        let storage = read_member(&mut zip, &self.path, &member, r.storage_bytes)?;
        if storage.len() as u64 != r.storage_bytes {
            return Err(bad(
                &self.path,
                format!("storage {} changed since it was opened", r.key),
            ));
        }
        let element = r.info.dtype.size_in_bytes()?;
        let dense = gather_strided(&storage, element, r.offset, &r.info.dims, &r.strides);
        Tensor::from_host_bytes(r.info.dtype, &r.info.dims, &dense)
    }
}

/// Checks a tensor's view against its storage, whose member size
/// `member_size` gives (`None`: missing).
fn check(
    path: &Path,
    name: &str,
    t: &Rc<TensorRecord>,
    member_size: impl FnOnce(&str) -> Option<u64>,
) -> Result<Record> {
    let element = t.dtype.size_in_bytes()? as u64;
    let storage_bytes = t
        .storage_len
        .checked_mul(element)
        .ok_or_else(|| bad(path, format!("tensor '{name}': a storage beyond any size")))?;
    match member_size(&t.key) {
        Some(size) if size == storage_bytes => {}
        Some(size) => {
            return Err(bad(
                path,
                format!(
                    "tensor '{name}': storage {} holds {size} bytes, but the pickle says {} \
                     elements of {element} bytes",
                    t.key, t.storage_len
                ),
            ));
        }
        None => {
            return Err(bad(
                path,
                format!("tensor '{name}': storage {} is missing", t.key),
            ));
        }
    }
    crate::dtype::check_array_size(t.dtype, &t.dims)?;
    // A view repeating its storage's elements (a stride of 0) could make
    // a small file claim a huge tensor: the dense copy may not be larger
    // than the storage it comes from.
    let count = t
        .dims
        .iter()
        .try_fold(1u64, |a, &d| a.checked_mul(d as u64));
    if count.is_none_or(|c| c > t.storage_len) {
        return Err(bad(
            path,
            format!(
                "tensor '{name}' (size {:?}, stride {:?}) has more elements than its storage of \
                 {}: a view that repeats elements is not read (save it with .contiguous())",
                t.dims, t.strides, t.storage_len
            ),
        ));
    }
    // The last element the view reads must lie inside the storage.
    let empty = t.dims.contains(&0);
    let last = t
        .dims
        .iter()
        .zip(&t.strides)
        .try_fold(t.offset, |acc, (&d, &s)| {
            let reach = (d.max(1) as u64 - 1).checked_mul(s as u64)?;
            acc.checked_add(reach)
        });
    match last {
        Some(last) if empty || last < t.storage_len => {}
        _ => {
            return Err(bad(
                path,
                format!(
                    "tensor '{name}': its view (offset {}, size {:?}, stride {:?}) reaches \
                     past its storage of {} elements",
                    t.offset, t.dims, t.strides, t.storage_len
                ),
            ));
        }
    }
    Ok(Record {
        key: t.key.clone(),
        info: WeightInfo {
            dtype: t.dtype,
            dims: t.dims.clone(),
        },
        offset: t.offset,
        strides: t.strides.clone(),
        storage_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transposed_view_is_gathered_row_major() {
        // Storage [[0, 1, 2], [3, 4, 5]] of u8; the view is its transpose.
        let storage: Vec<u8> = (0..6).collect();
        let dense = gather_strided(&storage, 1, 0, &[3, 2], &[1, 3]);
        assert_eq!(dense, vec![0, 3, 1, 4, 2, 5]);
        assert_eq!(gather_strided(&storage, 2, 1, &[2], &[1]), vec![2, 3, 4, 5]);
        assert!(gather_strided(&storage, 1, 0, &[0, 3], &[3, 1]).is_empty());
    }

    fn record(dims: &[i64], strides: &[i64], offset: u64) -> Rc<TensorRecord> {
        Rc::new(TensorRecord {
            key: "0".into(),
            dtype: crate::dtype::DType::F32,
            storage_len: 6,
            offset,
            dims: dims.to_vec(),
            strides: strides.to_vec(),
        })
    }

    #[test]
    fn views_past_their_storage_or_repeating_it_are_refused() {
        let path = Path::new("x.pth");
        let size = |_: &str| Some(24);
        assert!(check(path, "w", &record(&[2, 3], &[3, 1], 0), size).is_ok());
        let past = check(path, "w", &record(&[2, 3], &[3, 1], 1), size).unwrap_err();
        assert!(past.to_string().contains("reaches past"), "{past}");
        let repeat = check(path, "w", &record(&[1 << 40], &[0], 0), size).unwrap_err();
        assert!(repeat.to_string().contains("repeats"), "{repeat}");
        let short = check(path, "w", &record(&[6], &[1], 0), |_| Some(20)).unwrap_err();
        assert!(short.to_string().contains("holds 20 bytes"), "{short}");
    }
}
