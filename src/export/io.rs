//! Layer: export (tensor files), re-exported as `xlafn::io`. Tensors to
//! and from NumPy's `.npy` and `.npz` files, through the same codec that
//! exports and the `xlafn` tool use (`npy`, `npz`), so a file one of them
//! reads is a file all of them read. Imports the codec, `files` (the
//! bounded, regular-file-only reads and the atomic writes) and `Tensor`.
//!
//! Reading accepts what NumPy writes (byte orders, Fortran order, header
//! versions 1 to 3, bf16 as `ml_dtypes` writes it; see `npy`); writing is
//! little-endian C order, which NumPy reads back as the same array.
//!
//! ```
//! use xlafn::prelude::*;
//! let dir = std::env::temp_dir().join(format!("xlafn-io-doc-{}", std::process::id()));
//! std::fs::create_dir_all(&dir)?;
//! // `xlafn::ndarray` is the ndarray version `from_ndarray` takes.
//! let x = Tensor::from_ndarray(&xlafn::ndarray::array![[1f32, 2.], [3., 4.]])?;
//! xlafn::io::write_npy(dir.join("x.npy"), &x)?;
//! assert_eq!(xlafn::io::read_npy(dir.join("x.npy"))?.to_vec::<f32>()?, vec![1., 2., 3., 4.]);
//!
//! let n = Tensor::scalar(7i64);
//! xlafn::io::write_npz(dir.join("both.npz"), &[("x", &x), ("n", &n)])?;
//! let arrays = xlafn::io::read_npz(dir.join("both.npz"))?;
//! assert_eq!(arrays[1].0, "n");
//! assert_eq!(arrays[1].1.item::<i64>()?, 7);
//! # std::fs::remove_dir_all(&dir).ok();
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use super::{npy, npz};
use crate::dtype::MAX_ARRAY_BYTES;
use crate::error::{Error, Result};
use crate::files;
use crate::runtime::HostArray;
use crate::tensor::Tensor;
use std::path::Path;

pub use npz::DEFAULT_MAX_BYTES as DEFAULT_MAX_NPZ_BYTES;

/// The largest `.npy` file read: an array XLA can hold plus its header.
/// Only the file's own size counts; a FIFO or device is refused anyway.
const MAX_NPY_FILE_BYTES: u64 = MAX_ARRAY_BYTES + (1 << 17);

/// An error that names the file it is about (its class kept, printed once).
fn in_file(path: &Path, e: Error) -> Error {
    e.context(&path.display().to_string())
}

fn tensor(a: &HostArray) -> Result<Tensor> {
    Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes)
}

/// Reads a `.npy` file as a tensor. Symlinks are followed (the path is the
/// caller's choice); FIFOs and devices are refused rather than waited on.
pub fn read_npy(path: impl AsRef<Path>) -> Result<Tensor> {
    tensor(&read_npy_host(path)?)
}

/// [`read_npy`] without the upload: the array stays on the host (what
/// `xlafn::data` slices into examples).
pub fn read_npy_host(path: impl AsRef<Path>) -> Result<HostArray> {
    let path = path.as_ref();
    let bytes = files::read_limited(path, MAX_NPY_FILE_BYTES, true)?;
    npy::decode(&bytes).map_err(|e| in_file(path, e))
}

/// Writes `t` as a `.npy` file, replacing any file at `path` as
/// `np.save` does. The bytes go to a new file beside it that is then
/// renamed over `path`, so a reader never sees half a file and a symlink
/// at `path` is replaced, not followed.
pub fn write_npy(path: impl AsRef<Path>, t: &Tensor) -> Result<()> {
    files::replace(path.as_ref(), &npy::encode(&t.to_host_array()?)?)
}

/// Reads the arrays of a `.npz` file, in archive order, with their names
/// (without `.npy`). At most [`DEFAULT_MAX_NPZ_BYTES`] are inflated; use
/// [`read_npz_with_limit`] for larger archives.
pub fn read_npz(path: impl AsRef<Path>) -> Result<Vec<(String, Tensor)>> {
    read_npz_with_limit(path, DEFAULT_MAX_NPZ_BYTES)
}

/// [`read_npz`], inflating at most `max_bytes` in all: a zip archive
/// can expand a thousandfold, so the bound is on what it expands to.
pub fn read_npz_with_limit(
    path: impl AsRef<Path>,
    max_bytes: u64,
) -> Result<Vec<(String, Tensor)>> {
    read_npz_host(path, max_bytes)?
        .into_iter()
        .map(|(name, a)| Ok((name, tensor(&a)?)))
        .collect()
}

/// [`read_npz_with_limit`] without the upload: the arrays stay on the
/// host.
pub fn read_npz_host(path: impl AsRef<Path>, max_bytes: u64) -> Result<Vec<(String, HostArray)>> {
    let path = path.as_ref();
    // The archive itself is at most its contents plus the zip records
    // (under a kilobyte per member, at most 2^16 members).
    let bytes = files::read_limited(path, max_bytes.saturating_add(64 << 20), true)?;
    npz::decode(&bytes, max_bytes).map_err(|e| in_file(path, e))
}

fn host_arrays(arrays: &[(&str, &Tensor)]) -> Result<Vec<(String, HostArray)>> {
    arrays
        .iter()
        .map(|(name, t)| Ok((name.to_string(), t.to_host_array()?)))
        .collect()
}

fn write_archive(path: &Path, arrays: &[(&str, &Tensor)], compress: bool) -> Result<()> {
    let host = host_arrays(arrays)?;
    let refs: Vec<(&str, &HostArray)> = host.iter().map(|(n, a)| (n.as_str(), a)).collect();
    files::replace(path, &npz::encode(&refs, compress)?)
}

/// Writes named tensors as an `.npz` file, stored as `np.savez` does
/// (replacing any file at `path`, like [`write_npy`]).
pub fn write_npz(path: impl AsRef<Path>, arrays: &[(&str, &Tensor)]) -> Result<()> {
    write_archive(path.as_ref(), arrays, false)
}

/// [`write_npz`], deflated as `np.savez_compressed` does.
pub fn write_npz_compressed(path: impl AsRef<Path>, arrays: &[(&str, &Tensor)]) -> Result<()> {
    write_archive(path.as_ref(), arrays, true)
}
