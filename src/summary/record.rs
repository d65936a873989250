//! TFRecord framing, the container of TensorBoard event files: each record
//! is its length (u64, little-endian), the masked CRC-32C of those 8 bytes,
//! the data, and the masked CRC-32C of the data.
//!
//! The reader trusts nothing in the file: it opens only a regular file
//! (a FIFO or device would block or never end), both checksums of every
//! record are checked, and a length is checked against
//! [`MAX_RECORD_BYTES`] and against what is left of the file before
//! anything is allocated for it, so a corrupt or hostile file (a sparse
//! one whose size is as large as its forged length, say) is an error
//! naming the record and its byte offset, never a panic or an absurd
//! allocation.

use std::io::{self, BufReader, Read};
use std::path::Path;

use crate::error::{Error, Result};

/// CRC-32C (Castagnoli), the checksum TFRecord uses.
const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// The constant TFRecord adds when masking a CRC.
const MASK_DELTA: u32 = 0xa282_ead8;

/// Bytes before a record's data: the length and its CRC.
const HEADER_LEN: u64 = 12;

/// Bytes after a record's data: the data's CRC.
const FOOTER_LEN: u64 = 4;

/// The largest record read (256 MiB). An event is a summary of a few
/// values, a histogram or at most an image or a graph: far below this,
/// and a length beyond it is damage, refused before any allocation.
pub const MAX_RECORD_BYTES: u64 = 256 << 20;

/// The masked CRC-32C of `bytes`. TFRecord masks (rotates and offsets)
/// its checksums because a CRC of data that itself holds CRCs is weak.
pub(crate) fn masked_crc32c(bytes: &[u8]) -> u32 {
    let crc = CASTAGNOLI.checksum(bytes);
    crc.rotate_right(15).wrapping_add(MASK_DELTA)
}

/// `data` framed as one TFRecord.
pub(crate) fn encode_record(data: &[u8]) -> Vec<u8> {
    let length = (data.len() as u64).to_le_bytes();
    let mut record = Vec::with_capacity(data.len() + (HEADER_LEN + FOOTER_LEN) as usize);
    record.extend_from_slice(&length);
    record.extend_from_slice(&masked_crc32c(&length).to_le_bytes());
    record.extend_from_slice(data);
    record.extend_from_slice(&masked_crc32c(data).to_le_bytes());
    record
}

/// Reads every record of a TFRecord file, checked, as `(byte offset,
/// data)` pairs; the offset lets a caller's own errors name the record.
pub(crate) fn read_records(path: &Path) -> Result<Vec<(u64, Vec<u8>)>> {
    // A user names this file: a final symlink is followed, but only a
    // regular file is read (`O_NONBLOCK` open, then `fstat`).
    let (file, size) = crate::export::open_regular_file(path)?;
    let mut reader = RecordReader {
        input: BufReader::new(file),
        size,
        offset: 0,
    };
    let mut records = Vec::new();
    while let Some(data) = reader.next(records.len()).map_err(|e| e.into_error(path))? {
        records.push(data);
    }
    Ok(records)
}

/// Walks the records of one file, tracking the byte offset.
struct RecordReader<R> {
    input: R,
    size: u64,
    offset: u64,
}

/// Why a record could not be read: its index, its offset and the cause.
struct RecordError {
    index: usize,
    offset: u64,
    source: io::Error,
}

impl RecordError {
    /// The crate error: an `Io` error whose kind says what went wrong
    /// (`InvalidData` for a bad checksum, `UnexpectedEof` for a truncated
    /// record) and whose message names the record.
    fn into_error(self, path: &Path) -> Error {
        let message = format!(
            "record {} at byte {}: {}",
            self.index, self.offset, self.source
        );
        Error::io(
            "cannot read event file",
            path,
            io::Error::new(self.source.kind(), message),
        )
    }
}

impl<R: Read> RecordReader<R> {
    /// The next record's offset and data, or `None` at a clean end of file.
    fn next(&mut self, index: usize) -> Result<Option<(u64, Vec<u8>)>, RecordError> {
        let start = self.offset;
        let fail = |source| RecordError {
            index,
            offset: start,
            source,
        };
        if start == self.size {
            return Ok(None);
        }
        let length = self.read_length().map_err(fail)?;
        let data = self.read_checked(length as usize).map_err(fail)?;
        Ok(Some((start, data)))
    }

    /// Reads the header, checks its CRC and checks that the data and its
    /// CRC fit in what is left of the file.
    fn read_length(&mut self) -> io::Result<u64> {
        let mut header = [0u8; HEADER_LEN as usize];
        self.read_exact_counted(&mut header, "header")?;
        let (length_bytes, crc_bytes) = header.split_at(8);
        check_crc(length_bytes, crc_bytes, "length")?;
        let length = u64::from_le_bytes(length_bytes.try_into().expect("8 bytes"));
        let left = self.size.saturating_sub(self.offset);
        if length > left.saturating_sub(FOOTER_LEN) {
            return Err(truncated(format!(
                "length {length} runs past the end of the file ({left} bytes left)"
            )));
        }
        if length > MAX_RECORD_BYTES {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("length {length} is over the {MAX_RECORD_BYTES} bytes a record may have"),
            ));
        }
        Ok(length)
    }

    /// Reads `length` bytes of data and their CRC, and checks it.
    fn read_checked(&mut self, length: usize) -> io::Result<Vec<u8>> {
        let mut data = vec![0u8; length];
        self.read_exact_counted(&mut data, "data")?;
        let mut crc = [0u8; FOOTER_LEN as usize];
        self.read_exact_counted(&mut crc, "data CRC")?;
        check_crc(&data, &crc, "data")?;
        Ok(data)
    }

    /// `read_exact` that advances the offset and calls a short read a
    /// truncated record.
    fn read_exact_counted(&mut self, buf: &mut [u8], what: &str) -> io::Result<()> {
        self.input.read_exact(buf).map_err(|e| match e.kind() {
            io::ErrorKind::UnexpectedEof => truncated(format!("truncated {what}")),
            _ => e,
        })?;
        self.offset += buf.len() as u64;
        Ok(())
    }
}

/// Checks the stored masked CRC `stored` (4 bytes, little-endian) of `bytes`.
fn check_crc(bytes: &[u8], stored: &[u8], what: &str) -> io::Result<()> {
    let stored = u32::from_le_bytes(stored.try_into().expect("4 bytes"));
    let computed = masked_crc32c(bytes);
    if stored == computed {
        return Ok(());
    }
    Err(io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{what} CRC mismatch (stored {stored:#010x}, computed {computed:#010x})"),
    ))
}

/// The error of a record cut short.
fn truncated(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::UnexpectedEof, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// TFRecord's CRC-32C check value: "123456789" checksums to 0xe3069283.
    #[test]
    fn crc32c_check_value() {
        assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xe306_9283);
    }

    #[test]
    fn record_round_trips_and_flags_corruption() {
        let mut bytes = encode_record(b"hello");
        let mut reader = RecordReader {
            input: &bytes[..],
            size: bytes.len() as u64,
            offset: 0,
        };
        assert_eq!(reader.next(0).ok().flatten(), Some((0, b"hello".to_vec())));
        bytes[13] ^= 1;
        let mut reader = RecordReader {
            input: &bytes[..],
            size: bytes.len() as u64,
            offset: 0,
        };
        let err = reader.next(0).expect_err("corrupt data");
        assert_eq!(err.source.kind(), io::ErrorKind::InvalidData);
    }
}
