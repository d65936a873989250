//! Layer: export (SavedModel). TensorFlow's checkpoint format V2, the
//! "tensor bundle" a SavedModel's `variables/` folder holds, written and
//! read with no TensorFlow. Imports `table` (the index's LevelDB table
//! format), `dtype`, `error` and `files`, prost and crc.
//!
//! A bundle with prefix `P` is two files (TensorFlow's
//! `tensorflow/core/util/tensor_bundle/tensor_bundle.cc`):
//! - `P.data-00000-of-00001`: the tensors' bytes, one after another in
//!   key order, unpadded. A numeric tensor is its raw little-endian
//!   row-major elements. A string tensor of N elements is N varint64
//!   lengths, the masked CRC-32C of those lengths (each taken as a u32 LE,
//!   or a u64 LE past `u32::MAX`), then the N strings' bytes.
//! - `P.index`: a LevelDB table (`tensorflow/core/lib/io/table_builder.cc`)
//!   mapping the empty key to a `BundleHeaderProto` and each tensor's name
//!   to a `BundleEntryProto`: dtype, shape, where its bytes lie in the
//!   data file and their masked CRC-32C. For a string tensor that checksum
//!   covers the lengths (as above), the 4 bytes of the lengths' checksum
//!   and the strings' bytes, not the file's bytes.
//!
//! The writer builds the index TensorFlow's `BundleWriter` builds for the
//! same tensors (its block size, restart intervals and separator keys), so
//! the two can be compared byte for byte (`scripts/tf_bundle_check.py`).
//!
//! The reader treats both files as hostile: each is opened as a regular
//! file only (no FIFO, device or final symlink), the index is read whole
//! within [`MAX_INDEX_BYTES`], and every varint, block handle, restart
//! array, entry, shape, size and checksum is checked before use. A damaged
//! or crafted bundle is an [`Error::Value`] naming the file and what is
//! wrong, never a panic, an overflow, or an allocation larger than the
//! file itself (the caps below also bound the bookkeeping per entry).

use super::table::*;
use crate::dtype::{DType, check_array_size};
use crate::error::{Error, Result};
use crate::files;
use prost::Message;
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt::Display;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// The largest index read: 64 MiB, about a million tensors' entries. The
/// index holds names and small protos only (the bytes are in the data
/// file), so a real one is kilobytes.
const MAX_INDEX_BYTES: u64 = 64 << 20;

/// The most string elements in a bundle. An element takes a varint (one
/// byte) in the data file but a `Vec` header (24 bytes) in memory.
const MAX_STRING_ELEMENTS: u64 = 1 << 24;

/// The most dimensions a shape may have: TensorFlow's own limit
/// (`TensorShape::MaxDimensions`).
const MAX_RANK: usize = 254;

// The two messages of the format, with TensorFlow 2.21's field numbers
// (`tensor_bundle.proto`, `tensor_shape.proto`, `versions.proto`); enums
// are their int32 numbers.

#[derive(Clone, PartialEq, Message)]
struct BundleHeaderProto {
    #[prost(int32, tag = "1")]
    num_shards: i32,
    /// 0 = LITTLE, 1 = BIG.
    #[prost(int32, tag = "2")]
    endianness: i32,
    #[prost(message, optional, tag = "3")]
    version: Option<VersionDef>,
}

#[derive(Clone, PartialEq, Message)]
struct VersionDef {
    #[prost(int32, tag = "1")]
    producer: i32,
    #[prost(int32, tag = "2")]
    min_consumer: i32,
    #[prost(int32, repeated, tag = "3")]
    bad_consumers: Vec<i32>,
}

#[derive(Clone, PartialEq, Message)]
struct BundleEntryProto {
    #[prost(int32, tag = "1")]
    dtype: i32,
    #[prost(message, optional, tag = "2")]
    shape: Option<TensorShapeProto>,
    #[prost(int32, tag = "3")]
    shard_id: i32,
    #[prost(int64, tag = "4")]
    offset: i64,
    #[prost(int64, tag = "5")]
    size: i64,
    #[prost(fixed32, tag = "6")]
    crc32c: u32,
    /// `TensorSliceProto`s of a partitioned tensor, kept as bytes: only
    /// whether there are any matters (xlafn reads whole tensors only).
    #[prost(bytes = "vec", repeated, tag = "7")]
    slices: Vec<Vec<u8>>,
}

#[derive(Clone, PartialEq, Message)]
struct TensorShapeProto {
    #[prost(message, repeated, tag = "2")]
    dim: Vec<Dim>,
    #[prost(bool, tag = "3")]
    unknown_rank: bool,
}

#[derive(Clone, PartialEq, Message)]
struct Dim {
    #[prost(int64, tag = "1")]
    size: i64,
}

/// The version this format writes (`kTensorBundleVersion`).
const BUNDLE_VERSION: i32 = 1;
const DT_STRING: i32 = 7;

/// TensorFlow's `DataType` number for `dtype`. `None` would be a dtype
/// TensorFlow lacks; every xlafn dtype has one today, and the match is
/// exhaustive so a new dtype must be placed here.
pub(crate) fn tf_data_type(dtype: DType) -> Option<i32> {
    Some(match dtype {
        DType::F32 => 1,
        DType::F64 => 2,
        DType::I32 => 3,
        DType::U8 => 4,
        DType::I16 => 5,
        DType::I8 => 6,
        DType::String => DT_STRING,
        DType::C64 => 8,
        DType::I64 => 9,
        DType::Bool => 10,
        DType::BF16 => 14,
        DType::U16 => 17,
        DType::C128 => 18,
        DType::F16 => 19,
        DType::U32 => 22,
        DType::U64 => 23,
    })
}

/// The xlafn dtype of TensorFlow's `DataType` number, if it has one
/// (quantized, resource and variant types have none).
pub(crate) fn dtype_of_tf(number: i32) -> Option<DType> {
    let mut all = DType::NUMERIC_AND_BOOL.into_iter().chain([DType::String]);
    all.find(|&d| tf_data_type(d) == Some(number))
}

/// One tensor of a bundle. Strings are a case of their own because their
/// bytes in the data file are an encoding, not the elements themselves.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum BundleValue {
    /// Any dtype but strings: `bytes` are the elements, little-endian,
    /// row-major (what `HostArray` holds).
    Numeric {
        dtype: DType,
        dims: Vec<i64>,
        bytes: Vec<u8>,
    },
    /// A string tensor (the checkpoint's object graph is a scalar one):
    /// its elements row-major, as bytes (TensorFlow's strings need not be
    /// UTF-8).
    Strings {
        dims: Vec<i64>,
        values: Vec<Vec<u8>>,
    },
}

/// `P.index` for prefix `P`.
pub(crate) fn index_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".index")
}

/// `P.data-00000-of-00001` for prefix `P`: the one shard xlafn writes.
pub(crate) fn data_path(prefix: &Path) -> PathBuf {
    with_suffix(prefix, ".data-00000-of-00001")
}

fn with_suffix(prefix: &Path, suffix: &str) -> PathBuf {
    let mut name = prefix.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

fn bad(path: &Path, what: impl Display) -> Error {
    Error::Value(format!("checkpoint {}: {what}", path.display()))
}

/// An error's message without its class (`ValueError: `), for errors
/// this module wraps in its own.
fn message(e: Error) -> String {
    match e {
        Error::Value(m) => m,
        e => e.to_string(),
    }
}

/// The number of elements of `dims`, checked: dims non-negative, within
/// TensorFlow's rank, and the array within `check_array_size`.
fn element_count(dtype: DType, dims: &[i64]) -> std::result::Result<u64, String> {
    if dims.len() > MAX_RANK {
        return Err(format!("rank {} exceeds {MAX_RANK}", dims.len()));
    }
    check_array_size(dtype, dims).map_err(message)?;
    // In range: `check_array_size` bounded the product (zeros aside) by 2^62.
    Ok(dims.iter().map(|&d| d as u64).product())
}

/// Writes the bundle `prefix` holds `tensors` (keyed by name; the empty
/// name is the header's). Both files are created new, never replacing or
/// following anything at their paths; the folder must exist. The data
/// file is written first and the index last, as TensorFlow does, so an
/// index means a complete bundle; if either write fails, the data file
/// this call created is removed. Everything is checked before anything is
/// written, and what this writes [`read_bundle`] reads.
pub(crate) fn write_bundle(prefix: &Path, tensors: &BTreeMap<String, BundleValue>) -> Result<()> {
    write_bundle_blocks(prefix, tensors, TF_BLOCK_SIZE)
}

fn write_bundle_blocks(
    prefix: &Path,
    tensors: &BTreeMap<String, BundleValue>,
    block_size: usize,
) -> Result<()> {
    let index_path = index_path(prefix);
    let data_path = data_path(prefix);
    if tensors.len() >= MAX_ENTRIES {
        return Err(bad(&index_path, format!("{MAX_ENTRIES} tensors or more")));
    }
    let header = BundleHeaderProto {
        num_shards: 1,
        endianness: 0,
        version: Some(VersionDef {
            producer: BUNDLE_VERSION,
            ..Default::default()
        }),
    };
    let mut entries = vec![(Vec::new(), header.encode_to_vec())];
    let mut chunks: Vec<Cow<[u8]>> = Vec::with_capacity(tensors.len());
    let (mut offset, mut strings) = (0u64, 0u64);
    for (name, value) in tensors {
        let bad_tensor = |what: String| bad(&index_path, format!("tensor {name:?}: {what}"));
        if name.is_empty() {
            return Err(bad_tensor("the empty name is the header's".into()));
        }
        let t = encode_tensor(value, &mut strings).map_err(bad_tensor)?;
        let size = t.bytes.len() as u64;
        let dtype = t.dtype;
        let entry = BundleEntryProto {
            dtype: tf_data_type(dtype).ok_or_else(|| bad_tensor(format!("no TF dtype {dtype}")))?,
            shape: Some(TensorShapeProto {
                dim: t.dims.iter().map(|&size| Dim { size }).collect(),
                unknown_rank: false,
            }),
            shard_id: 0,
            // In range: the data is in memory, so its total fits in i64.
            offset: offset as i64,
            size: size as i64,
            crc32c: t.crc,
            slices: Vec::new(),
        };
        entries.push((name.as_bytes().to_vec(), entry.encode_to_vec()));
        chunks.push(t.bytes);
        offset += size;
    }
    // Bounded before building, so every block offset fits the format's
    // u32 restart points; then the table itself, so what this writes
    // `read_bundle` reads.
    let raw: u64 = entries
        .iter()
        .map(|(k, v)| (k.len() + v.len()) as u64)
        .sum();
    let table = (raw <= MAX_INDEX_BYTES).then(|| build_table(&entries, block_size));
    let Some(table) = table.filter(|t| t.len() as u64 <= MAX_INDEX_BYTES) else {
        return Err(bad(
            &index_path,
            format!("the index would exceed {MAX_INDEX_BYTES} bytes"),
        ));
    };
    // A data file there already is an error here, before anything is
    // written; after this, the file is this call's own to remove.
    let file = files::create_new_file(&data_path)?;
    let written =
        write_data(file, &data_path, &chunks).and_then(|()| files::write_new(&index_path, &table));
    if written.is_err() {
        let _ = std::fs::remove_file(&data_path);
    }
    written
}

/// One tensor as the bundle stores it.
struct Encoded<'a> {
    dtype: DType,
    dims: &'a [i64],
    /// Its bytes in the data file.
    bytes: Cow<'a, [u8]>,
    /// The masked checksum its entry holds.
    crc: u32,
}

/// `value` as the bundle stores it, checked: its bytes fit its shape, and
/// the bundle's strings (counted in `strings`) stay within what
/// `read_bundle` reads.
fn encode_tensor<'a>(value: &'a BundleValue, strings: &mut u64) -> Parsed<Encoded<'a>> {
    match value {
        BundleValue::Numeric { dtype, dims, bytes } => {
            if *dtype == DType::String {
                return Err("strings are BundleValue::Strings".into());
            }
            let n = element_count(*dtype, dims)?;
            let expected = n * dtype.size_in_bytes().map_err(message)? as u64;
            if bytes.len() as u64 != expected {
                return Err(format!(
                    "{} bytes for a {dtype} tensor of shape {dims:?}, which takes {expected}",
                    bytes.len()
                ));
            }
            Ok(Encoded {
                dtype: *dtype,
                dims,
                bytes: Cow::Borrowed(bytes),
                crc: masked_crc32c(bytes),
            })
        }
        BundleValue::Strings { dims, values } => {
            let n = element_count(DType::String, dims)?;
            if values.len() as u64 != n {
                return Err(format!(
                    "{} strings for shape {dims:?}, which holds {n}",
                    values.len()
                ));
            }
            *strings += n;
            if *strings > MAX_STRING_ELEMENTS {
                return Err(format!(
                    "more than {MAX_STRING_ELEMENTS} strings in the bundle"
                ));
            }
            let (bytes, crc) = encode_strings(values);
            Ok(Encoded {
                dtype: DType::String,
                dims,
                bytes: Cow::Owned(bytes),
                crc,
            })
        }
    }
}

/// Streams the data file (a new file; its chunks are not copied into one
/// buffer first, since a model's variables can be most of the memory).
fn write_data(file: std::fs::File, path: &Path, chunks: &[Cow<[u8]>]) -> Result<()> {
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    for chunk in chunks {
        out.write_all(chunk)
            .map_err(|e| files::io("cannot write", path, e))?;
    }
    out.flush().map_err(|e| files::io("cannot write", path, e))
}

/// A string tensor's bytes in the data file and the masked checksum its
/// entry holds (TensorFlow's `WriteStringTensor`).
fn encode_strings(values: &[Vec<u8>]) -> (Vec<u8>, u32) {
    let total: usize = values.iter().map(Vec::len).sum();
    let mut bytes = Vec::with_capacity(values.len() * 2 + 4 + total);
    let mut digest = CASTAGNOLI.digest();
    for v in values {
        put_varint(&mut bytes, v.len() as u64);
        update_length(&mut digest, v.len() as u64);
    }
    let lengths_crc = mask(digest.clone().finalize()).to_le_bytes();
    bytes.extend_from_slice(&lengths_crc);
    digest.update(&lengths_crc);
    for v in values {
        bytes.extend_from_slice(v);
        digest.update(v);
    }
    (bytes, mask(digest.finalize()))
}

/// A length as TensorFlow checksums it: a u32 when it fits (what older
/// checkpoints stored), else a u64, little-endian either way.
fn update_length(digest: &mut crc::Digest<u32>, len: u64) {
    match u32::try_from(len) {
        Ok(n) => digest.update(&n.to_le_bytes()),
        Err(_) => digest.update(&len.to_le_bytes()),
    }
}

/// Checks the header entry the way TensorFlow's `BundleReader` does.
fn check_header(bytes: &[u8]) -> Parsed<()> {
    let header = BundleHeaderProto::decode(bytes).map_err(|e| format!("bad header: {e}"))?;
    if header.num_shards != 1 {
        return Err(format!(
            "it has {} shards; xlafn reads single-shard bundles",
            header.num_shards
        ));
    }
    if header.endianness != 0 {
        return Err("it is big-endian; xlafn reads little-endian bundles".into());
    }
    let v = header.version.unwrap_or_default();
    if v.producer < 0
        || v.min_consumer > BUNDLE_VERSION
        || v.bad_consumers.contains(&BUNDLE_VERSION)
    {
        return Err(format!(
            "its format version (producer {}, min consumer {}) needs a newer reader",
            v.producer, v.min_consumer
        ));
    }
    Ok(())
}

/// Where one tensor lies in the data file, checked against its entry.
struct Layout {
    dtype: DType,
    dims: Vec<i64>,
    count: u64,
    offset: u64,
    size: u64,
}

fn check_entry(entry: &BundleEntryProto, data_len: u64) -> Parsed<Layout> {
    if !entry.slices.is_empty() {
        return Err("it is partitioned into slices; xlafn reads whole tensors".into());
    }
    if entry.shard_id != 0 {
        return Err(format!(
            "it is in shard {}, of a one-shard bundle",
            entry.shard_id
        ));
    }
    let dtype = dtype_of_tf(entry.dtype)
        .ok_or(format!("TensorFlow dtype {} is not supported", entry.dtype))?;
    let shape = entry.shape.clone().unwrap_or_default();
    if shape.unknown_rank {
        return Err("its shape has an unknown rank".into());
    }
    let dims: Vec<i64> = shape.dim.iter().map(|d| d.size).collect();
    let count = element_count(dtype, &dims)?;
    let (Ok(offset), Ok(size)) = (u64::try_from(entry.offset), u64::try_from(entry.size)) else {
        return Err(format!(
            "offset {} or size {} is negative",
            entry.offset, entry.size
        ));
    };
    if offset.checked_add(size).is_none_or(|e| e > data_len) {
        return Err(format!(
            "its {size} bytes at offset {offset} lie outside the {data_len}-byte data file"
        ));
    }
    if dtype != DType::String {
        let expected = count * dtype.size_in_bytes().map_err(message)? as u64;
        if size != expected {
            return Err(format!(
                "its size is {size} bytes, but a {dtype} tensor of shape {dims:?} takes {expected}"
            ));
        }
    } else if size < count.saturating_add(4) {
        return Err(format!(
            "{size} bytes cannot hold {count} strings and their checksum"
        ));
    }
    Ok(Layout {
        dtype,
        dims,
        count,
        offset,
        size,
    })
}

/// A string tensor's elements from its bytes in the data file, and the
/// (unmasked) checksum TensorFlow's `ReadStringTensor` computes over them.
fn decode_strings(bytes: &[u8], count: u64) -> Parsed<(Vec<Vec<u8>>, u32)> {
    let mut cur = Cursor::new(bytes);
    // In range: `check_entry` made `count` at most the bytes' length.
    let mut lengths = Vec::with_capacity(count as usize);
    let mut digest = CASTAGNOLI.digest();
    for _ in 0..count {
        let len = cur.varint64()?;
        update_length(&mut digest, len);
        lengths.push(len);
    }
    let stored = cur.u32_le()?;
    if mask(digest.clone().finalize()) != stored {
        return Err("the string lengths fail their checksum".into());
    }
    digest.update(&stored.to_le_bytes());
    let mut values = Vec::with_capacity(lengths.len());
    for len in lengths {
        let v = cur.take(len)?;
        digest.update(v);
        values.push(v.to_vec());
    }
    if !cur.at_end() {
        return Err(format!(
            "{} bytes are left after the strings",
            bytes.len() - cur.pos
        ));
    }
    Ok((values, digest.finalize()))
}

/// Reads the bundle at `prefix`: every tensor, by name. Only a
/// single-shard, little-endian bundle of whole tensors (what `SaveV2` and
/// `tf.train.Checkpoint` write on one machine) is read; anything else, and
/// any damage, is an error naming the file.
///
/// Limits: the index within [`MAX_INDEX_BYTES`]; the tensors' sizes added
/// up within the data file's length (so a crafted index cannot make the
/// reader allocate more than the file holds, by pointing many entries at
/// the same bytes, say) and within the memory arrays may use
/// (`dtype::program_memory_bytes`: every tensor is read into memory); fewer
/// than 2^20 tensors and at most 2^24 string elements. The data file is
/// read a tensor at a time at its offset, never copied whole.
pub(crate) fn read_bundle(prefix: &Path) -> Result<BTreeMap<String, BundleValue>> {
    let index_path = index_path(prefix);
    let data_path = data_path(prefix);
    let index = files::read_limited(&index_path, MAX_INDEX_BYTES, false)?;
    let entries = read_table(&index).map_err(|m| bad(&index_path, m))?;
    match entries.first() {
        Some((key, header)) if key.is_empty() => {
            check_header(header).map_err(|m| bad(&index_path, m))?
        }
        _ => return Err(bad(&index_path, "it has no header entry")),
    }
    if entries.len() > MAX_ENTRIES {
        return Err(bad(
            &index_path,
            format!("it has {MAX_ENTRIES} tensors or more"),
        ));
    }
    let (data, data_len) = files::open_regular(&data_path, false)?;
    let memory = crate::dtype::program_memory_bytes();
    let (mut total, mut strings) = (0u64, 0u64);
    let mut out = BTreeMap::new();
    for (key, value) in &entries[1..] {
        let name = String::from_utf8(key.clone()).map_err(|_| {
            bad(
                &index_path,
                format!("the key {:?} is not UTF-8", String::from_utf8_lossy(key)),
            )
        })?;
        let bad_entry = |what: String| bad(&index_path, format!("tensor {name:?}: {what}"));
        let entry =
            BundleEntryProto::decode(*value).map_err(|e| bad_entry(format!("bad entry: {e}")))?;
        let layout = check_entry(&entry, data_len).map_err(bad_entry)?;
        total = total.saturating_add(layout.size);
        if layout.dtype == DType::String {
            strings = strings.saturating_add(layout.count);
        }
        if total > data_len.min(memory) || strings > MAX_STRING_ELEMENTS {
            return Err(bad_entry(format!(
                "the tensors take more than the data file's {data_len} bytes, the {memory} \
                 bytes of memory arrays may use, or {MAX_STRING_ELEMENTS} strings"
            )));
        }
        let bytes = read_at(&data, &data_path, layout.offset, layout.size)?;
        let bad_data = |what: &str| bad(&data_path, format!("tensor {name:?}: {what}"));
        let value = if layout.dtype == DType::String {
            let (values, crc) = decode_strings(&bytes, layout.count).map_err(|m| bad_data(&m))?;
            if mask(crc) != entry.crc32c {
                return Err(bad_data("its bytes fail their checksum"));
            }
            BundleValue::Strings {
                dims: layout.dims,
                values,
            }
        } else {
            if masked_crc32c(&bytes) != entry.crc32c {
                return Err(bad_data("its bytes fail their checksum"));
            }
            BundleValue::Numeric {
                dtype: layout.dtype,
                dims: layout.dims,
                bytes,
            }
        };
        out.insert(name, value);
    }
    Ok(out)
}

/// `size` bytes of `file` at `offset` (both checked against the file's
/// length by the caller); an allocation the system refuses is an error,
/// not an abort.
fn read_at(file: &std::fs::File, path: &Path, offset: u64, size: u64) -> Result<Vec<u8>> {
    let too_big = || bad(path, format!("cannot allocate {size} bytes for a tensor"));
    let len = usize::try_from(size).map_err(|_| too_big())?;
    let mut bytes = Vec::new();
    bytes.try_reserve_exact(len).map_err(|_| too_big())?;
    bytes.resize(len, 0);
    file.read_exact_at(&mut bytes, offset)
        .map_err(|e| files::io("cannot read", path, e))?;
    Ok(bytes)
}

#[cfg(test)]
#[path = "bundle_tests.rs"]
mod tests;
