//! Layer: export (tensor files). NumPy's `.npz` archives: a zip file with
//! one `.npy` file per array, named `NAME.npy`, as `np.savez` (stored) and
//! `np.savez_compressed` (deflated) write them. Imports the `zip` crate for
//! the archive (NumPy writes zip64 records, which a hand-written reader
//! would have to get right too), `npy` for each member, and `HostArray`.
//!
//! An archive may come from anyone, and a small one can claim or inflate
//! to terabytes (a "zip bomb"). So reading is bounded: the members'
//! declared sizes must fit a byte budget before anything is inflated, and
//! each member is inflated through a limit of its declared size plus one
//! byte, so a member that inflates past what it declared is caught after
//! one byte too many rather than after filling memory.

use super::npy;
use crate::error::{Error, Result};
use crate::runtime::HostArray;
use std::collections::HashSet;
use std::io::{Cursor, Read, Write};
use zip::write::SimpleFileOptions;
use zip::{CompressionMethod, ZipArchive, ZipWriter};

/// The most bytes `decode` inflates in all unless told otherwise (4 GiB):
/// enough for the arrays a command line or test passes around, small
/// enough that a hostile archive cannot exhaust a machine's memory.
pub const DEFAULT_MAX_BYTES: u64 = 1 << 32;

/// The most members an archive may have (each is one array).
const MAX_MEMBERS: usize = 1 << 16;

fn bad(why: impl std::fmt::Display) -> Error {
    Error::Value(format!("not a valid .npz file: {why}"))
}

/// The arrays of an `.npz` archive, in archive order, each under its name
/// without the `.npy` suffix (the names `np.load(...).files` lists).
/// At most `max_bytes` are inflated in all; an archive that declares or
/// inflates to more is an error naming the limit.
pub fn decode(bytes: &[u8], max_bytes: u64) -> Result<Vec<(String, HostArray)>> {
    let mut archive = ZipArchive::new(Cursor::new(bytes)).map_err(bad)?;
    if archive.len() > MAX_MEMBERS {
        return Err(bad(format!(
            "{} members, over the {MAX_MEMBERS} allowed",
            archive.len()
        )));
    }
    check_distinct_members(bytes, &archive)?;
    let mut budget = max_bytes;
    let mut seen = HashSet::new();
    let mut arrays = Vec::with_capacity(archive.len());
    for i in 0..archive.len() {
        let member = archive.by_index(i).map_err(bad)?;
        let file = member.name().to_string();
        let name = file
            .strip_suffix(".npy")
            .ok_or_else(|| bad(format!("member {file:?} is not a .npy file")))?
            .to_string();
        if !seen.insert(name.clone()) {
            return Err(bad(format!("member {file:?} appears twice")));
        }
        let declared = member.size();
        budget = budget
            .checked_sub(declared)
            .ok_or_else(|| too_big(max_bytes))?;
        let data = inflate(member, declared, &file)?;
        let array = npy::decode(&data).map_err(|e| bad(format!("member {file:?}: {e}")))?;
        arrays.push((name, array));
    }
    Ok(arrays)
}

/// Errors unless every member the central directory lists has its own
/// name. The zip crate indexes members by name, so of two members named
/// alike it keeps one and the archive reads as if the other were not
/// there (which one depends on the reader: NumPy sees the other); the
/// names are therefore counted from the directory's own records, and a
/// count the crate does not match is refused as well.
fn check_distinct_members(bytes: &[u8], archive: &ZipArchive<Cursor<&[u8]>>) -> Result<()> {
    let names = directory_names(bytes, archive.central_directory_start());
    let mut seen = HashSet::new();
    if let Some(twice) = names.iter().find(|n| !seen.insert(**n)) {
        return Err(bad(format!(
            "member {:?} appears twice",
            String::from_utf8_lossy(twice)
        )));
    }
    if names.len() != archive.len() {
        return Err(bad(format!(
            "its central directory lists {} members, of which {} are readable by name",
            names.len(),
            archive.len()
        )));
    }
    Ok(())
}

/// The raw names of the central directory's file headers from `start`
/// on (each: the signature `PK\x01\x02`, 46 fixed bytes with the name,
/// extra field and comment lengths at 28, 30 and 32, then those three).
fn directory_names(bytes: &[u8], start: u64) -> Vec<&[u8]> {
    const FIXED: usize = 46;
    let u16_at = |at: usize| usize::from(u16::from_le_bytes([bytes[at], bytes[at + 1]]));
    let mut names = Vec::new();
    let mut at = usize::try_from(start).unwrap_or(usize::MAX);
    while at.checked_add(FIXED).is_some_and(|end| end <= bytes.len())
        && bytes[at..at + 4] == *b"PK\x01\x02"
    {
        let name_end = at + FIXED + u16_at(at + 28);
        let Some(name) = bytes.get(at + FIXED..name_end) else {
            break;
        };
        names.push(name);
        at = name_end + u16_at(at + 30) + u16_at(at + 32);
    }
    names
}

fn too_big(max_bytes: u64) -> Error {
    bad(format!(
        "its arrays hold more than the {max_bytes} bytes allowed here (a larger archive needs a \
         larger limit)"
    ))
}

/// Reads a member that declares `declared` bytes, refusing one that holds
/// more or fewer.
fn inflate(member: impl Read, declared: u64, file: &str) -> Result<Vec<u8>> {
    let mut data = Vec::new();
    member
        .take(declared.saturating_add(1))
        .read_to_end(&mut data)
        .map_err(|e| bad(format!("member {file:?}: {e}")))?;
    let got = data.len() as u64;
    if got > declared {
        return Err(bad(format!(
            "member {file:?} inflates past the {declared} bytes it declares"
        )));
    }
    if got < declared {
        return Err(bad(format!(
            "member {file:?} declares {declared} bytes but holds {got}"
        )));
    }
    Ok(data)
}

/// An `.npz` archive of `arrays`, each stored as `NAME.npy`; `compress`
/// deflates them as `np.savez_compressed` does, otherwise they are stored
/// as `np.savez` does. Names must be non-empty and distinct.
pub fn encode(arrays: &[(&str, &HostArray)], compress: bool) -> Result<Vec<u8>> {
    let method = if compress {
        CompressionMethod::Deflated
    } else {
        CompressionMethod::Stored
    };
    let mut zip = ZipWriter::new(Cursor::new(Vec::new()));
    let mut seen = HashSet::new();
    for (name, array) in arrays {
        if name.is_empty() || !seen.insert(*name) {
            return Err(Error::Value(format!(
                "npz: array names must be non-empty and distinct; {name:?} is not"
            )));
        }
        let bytes = npy::encode(array)?;
        let options = SimpleFileOptions::default()
            .compression_method(method)
            .large_file(bytes.len() as u64 >= u32::MAX as u64);
        let failed = |e: &dyn std::fmt::Display| Error::Value(format!("npz: {name}: {e}"));
        zip.start_file(format!("{name}.npy"), options)
            .map_err(|e| failed(&e))?;
        zip.write_all(&bytes).map_err(|e| failed(&e))?;
    }
    let out = zip
        .finish()
        .map_err(|e| Error::Value(format!("npz: {e}")))?;
    Ok(out.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn archive() -> Vec<u8> {
        let a = HostArray::from_vec(vec![1.5f32, -2.0], &[2]);
        let b = HostArray::from_vec(vec![7i64], &[]);
        encode(&[("a", &a), ("b", &b)], true).unwrap()
    }

    proptest! {
        /// Any bytes, and any damage to a real archive, end in arrays or
        /// an error, never a panic or an unbounded read.
        #[test]
        fn damaged_archives_decode_to_values_or_errors(
            at in any::<usize>(),
            to in any::<u8>(),
            cut in any::<usize>(),
        ) {
            let mut bytes = archive();
            let i = at % bytes.len();
            bytes[i] = to;
            bytes.truncate(bytes.len() - cut % 8);
            let _ = decode(&bytes, 1 << 16);
        }

        #[test]
        fn any_bytes_decode_to_values_or_errors(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let _ = decode(&bytes, 1 << 16);
        }
    }

    #[test]
    fn archives_round_trip_stored_and_deflated() {
        let a = HostArray::from_vec(vec![1.5f32, -2.0], &[2]);
        for compress in [false, true] {
            let back = decode(&encode(&[("a", &a)], compress).unwrap(), 1 << 16).unwrap();
            assert_eq!(back, vec![("a".to_string(), a.clone())]);
        }
    }
}
