//! `.npy` and `.npz` files against NumPy: `tests/data/npy` holds files
//! written by NumPy 2.4 with ml_dtypes 0.6 (`scripts/npy_fixtures.py`)
//! and `expected.json`, NumPy's own reading of each (dtype, shape, values
//! in C order). Every dtype in both byte orders and both memory orders,
//! 0-d and empty arrays, header versions 2 and 3, `np.savez` and
//! `np.savez_compressed` archives; then what xlafn writes, read back; then
//! hostile files, which must end in errors that say what is wrong.

#[path = "common/scratch.rs"]
mod scratch;

use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use xlafn::export::{npy, npz};
use xlafn::half::{bf16, f16};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;
use xlafn::{Complex32, Complex64};

fn data(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/npy")
        .join(file)
}

fn expected() -> BTreeMap<String, Value> {
    serde_json::from_slice(&std::fs::read(data("expected.json")).unwrap()).unwrap()
}

fn temp_dir(tag: &str) -> scratch::ScratchDir {
    scratch::scratch_dir(&format!("files-{tag}"))
}

fn floats<T: Copy + Into<f64>>(v: Vec<T>) -> Vec<Value> {
    v.into_iter().map(|x| json!(x.into())).collect()
}

/// The elements of `a` in `expected.json`'s form: JSON numbers (floats
/// widened to f64 exactly, as Python's `float` holds them), booleans and
/// `[real, imaginary]` pairs. Independent of the `xlafn` tool's printing.
fn values(a: &HostArray) -> Vec<Value> {
    let ints = |v: Vec<i128>| v.into_iter().map(|i| json!(i)).collect();
    match a.dtype {
        DType::Bool => a
            .to_vec::<bool>()
            .unwrap()
            .into_iter()
            .map(Value::from)
            .collect(),
        DType::I8 => ints(
            a.to_vec::<i8>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::I16 => ints(
            a.to_vec::<i16>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::I32 => ints(
            a.to_vec::<i32>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::I64 => ints(
            a.to_vec::<i64>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::U8 => ints(
            a.to_vec::<u8>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::U16 => ints(
            a.to_vec::<u16>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::U32 => ints(
            a.to_vec::<u32>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::U64 => ints(
            a.to_vec::<u64>()
                .unwrap()
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        DType::F16 => floats(a.to_vec::<f16>().unwrap()),
        DType::BF16 => floats(a.to_vec::<bf16>().unwrap()),
        DType::F32 => floats(a.to_vec::<f32>().unwrap()),
        DType::F64 => floats(a.to_vec::<f64>().unwrap()),
        DType::C64 => a
            .to_vec::<Complex32>()
            .unwrap()
            .into_iter()
            .map(|c| json!([c.re as f64, c.im as f64]))
            .collect(),
        DType::C128 => a
            .to_vec::<Complex64>()
            .unwrap()
            .into_iter()
            .map(|c| json!([c.re, c.im]))
            .collect(),
        DType::String => unreachable!("no string fixtures"),
    }
}

fn describe(a: &HostArray) -> Value {
    json!({"dtype": a.dtype.name(), "shape": a.dims, "values": values(a)})
}

#[test]
fn every_numpy_fixture_reads_as_numpy_reads_it() {
    let mut dtypes = std::collections::BTreeSet::new();
    let mut npy_files = 0;
    for (file, want) in expected() {
        let bytes = std::fs::read(data(&file)).unwrap();
        if file.ends_with(".npz") {
            let arrays = npz::decode(&bytes, npz::DEFAULT_MAX_BYTES).unwrap();
            let got: serde_json::Map<String, Value> = arrays
                .iter()
                .map(|(k, a)| (k.clone(), describe(a)))
                .collect();
            assert_eq!(Value::Object(got), want, "{file}");
            continue;
        }
        let a = npy::decode(&bytes).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert_eq!(describe(&a), want, "{file}");
        dtypes.insert(a.dtype);
        npy_files += 1;
    }
    // Every dtype: the 12 wider than a byte in le, be, f and be_f, the 3
    // one-byte ones in le and f, and 6 others.
    assert_eq!(dtypes.len(), DType::NUMERIC_AND_BOOL.len());
    assert_eq!(npy_files, 12 * 4 + 3 * 2 + 6);
}

#[test]
fn bf16_reads_from_numpys_v2_and_from_the_bfloat16_name() {
    // NumPy with ml_dtypes writes bf16 as raw two-byte values, `<V2`.
    let bytes = std::fs::read(data("bf16_le.npy")).unwrap();
    assert!(String::from_utf8_lossy(&bytes[..128]).contains("'descr': '<V2'"));
    let a = npy::decode(&bytes).unwrap();
    assert_eq!(a.dtype, DType::BF16);
    // 1000.5 is not a bf16: NumPy rounds it to 1000, the value read here.
    assert_eq!(a.to_vec::<bf16>().unwrap()[4].to_f32(), 1000.0);
    // What xlafn writes names the type, and reads back as itself.
    let written = npy::encode(&a).unwrap();
    assert!(String::from_utf8_lossy(&written[..128]).contains("'descr': 'bfloat16'"));
    assert_eq!(npy::decode(&written).unwrap(), a);
}

#[test]
fn fortran_order_is_transposed_on_read() {
    // NumPy's `np.asfortranarray(np.arange(24).reshape(2, 3, 4) * 0.5)`:
    // element [i, j, k] is (12 i + 4 j + k) / 2 whatever the file order.
    let bytes = std::fs::read(data("f32_cube_f.npy")).unwrap();
    assert!(String::from_utf8_lossy(&bytes[..128]).contains("'fortran_order': True"));
    let a = npy::decode(&bytes).unwrap();
    assert_eq!(a.dims, vec![2, 3, 4]);
    let want: Vec<f32> = (0..24).map(|n| n as f32 * 0.5).collect();
    assert_eq!(a.to_vec::<f32>().unwrap(), want);
    // The file itself is in Fortran order: its second value is [1, 0, 0].
    let raw = &bytes[bytes.len() - 96..];
    assert_eq!(f32::from_le_bytes(raw[4..8].try_into().unwrap()), 6.0);
}

#[test]
fn big_endian_files_are_swapped_on_read() {
    let bytes = std::fs::read(data("i32_be.npy")).unwrap();
    assert!(String::from_utf8_lossy(&bytes[..128]).contains("'descr': '>i4'"));
    // The last element, 7, is stored as 00 00 00 07.
    assert_eq!(&bytes[bytes.len() - 4..], &[0, 0, 0, 7]);
    let a = npy::decode(&bytes).unwrap();
    assert_eq!(a.to_vec::<i32>().unwrap()[5], 7);
    let c = npy::decode(&std::fs::read(data("c128_be.npy")).unwrap()).unwrap();
    assert_eq!(
        c.to_vec::<Complex64>().unwrap()[0],
        Complex64::new(1.0, 2.0)
    );
}

#[test]
fn what_xlafn_writes_reads_back_for_every_dtype() {
    let dir = temp_dir("roundtrip");
    let mut named = Vec::new();
    for (file, want) in expected() {
        if !file.ends_with("_le.npy") {
            continue;
        }
        let a = npy::decode(&std::fs::read(data(&file)).unwrap()).unwrap();
        let t = Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes).unwrap();
        let path = dir.join(&file);
        xlafn::io::write_npy(&path, &t).unwrap();
        let back = xlafn::io::read_npy(&path).unwrap().to_host_array().unwrap();
        assert_eq!(describe(&back), want, "{file}");
        named.push((file.trim_end_matches("_le.npy").to_string(), t));
    }
    assert_eq!(named.len(), DType::NUMERIC_AND_BOOL.len());
    let refs: Vec<(&str, &Tensor)> = named.iter().map(|(n, t)| (n.as_str(), t)).collect();
    xlafn::io::write_npz(dir.join("all.npz"), &refs).unwrap();
    xlafn::io::write_npz_compressed(dir.join("all_z.npz"), &refs).unwrap();
    for archive in ["all.npz", "all_z.npz"] {
        let back = xlafn::io::read_npz(dir.join(archive)).unwrap();
        assert_eq!(back.len(), named.len());
        for ((name, t), (want_name, want)) in back.iter().zip(&named) {
            assert_eq!(name, want_name);
            assert_eq!(
                t.to_host_array().unwrap(),
                want.to_host_array().unwrap(),
                "{archive} {name}"
            );
        }
    }
    // Writing replaces an earlier file, as `np.save` does.
    let path = dir.join("again.npy");
    xlafn::io::write_npy(&path, &Tensor::scalar(1f32)).unwrap();
    xlafn::io::write_npy(&path, &Tensor::scalar(2f32)).unwrap();
    assert_eq!(
        xlafn::io::read_npy(&path).unwrap().item::<f32>().unwrap(),
        2.0
    );
}

#[test]
fn zero_d_and_empty_arrays_round_trip() {
    for file in ["f64_scalar.npy", "i32_empty_0x3.npy", "f32_empty_2x0_f.npy"] {
        let a = npy::decode(&std::fs::read(data(file)).unwrap()).unwrap();
        assert_eq!(npy::decode(&npy::encode(&a).unwrap()).unwrap(), a, "{file}");
    }
    let s = npy::decode(&std::fs::read(data("f64_scalar.npy")).unwrap()).unwrap();
    assert_eq!((s.dims.len(), s.to_vec::<f64>().unwrap()), (0, vec![2.5]));
}

// ------------------------------------------------------- hostile files

fn npy_err(bytes: &[u8]) -> String {
    npy::decode(bytes).unwrap_err().to_string()
}

fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(data);
    out
}

#[test]
fn damaged_npy_files_are_errors_naming_the_problem() {
    let good = std::fs::read(data("f32_le.npy")).unwrap();
    let truncated = npy_err(&good[..good.len() - 3]);
    assert!(
        truncated.contains("needs 24 bytes, the file has 21"),
        "{truncated}"
    );
    let huge = with_header(
        "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }",
        &[0; 8],
    );
    assert!(
        npy_err(&huge).contains("the file has 8"),
        "{}",
        npy_err(&huge)
    );
    let too_large = with_header(
        "{'descr': '<f8', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
        &[],
    );
    assert!(
        npy_err(&too_large).contains("too large"),
        "{}",
        npy_err(&too_large)
    );
    for (descr, why) in [
        ("|O", "object arrays"),
        ("<U3", "string arrays"),
        ("|V1", "no xlafn dtype"),
        ("<M8[s]", "datetime"),
        ("|f4", "no xlafn dtype"),
        ("<f16", "no xlafn dtype"),
    ] {
        let header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (1,), }}");
        let e = npy_err(&with_header(&header, &[0; 4]));
        assert!(
            e.contains(why) && e.contains("not a valid .npy"),
            "{descr}: {e}"
        );
    }
    assert!(npy_err(b"\x93NUMPY\x04\x00").contains("unknown version 4"));
    assert!(npy_err(b"PK\x03\x04").contains("missing magic"));
}

/// A stored zip archive holding one member, for crafting damage by hand:
/// the local header, the data and the central directory.
fn zip_of(name: &str, declared: u32, data: &[u8]) -> Vec<u8> {
    let crc = {
        let mut h = flate2::Crc::new();
        h.update(data);
        h.sum()
    };
    let mut local = Vec::new();
    local.extend(0x04034b50u32.to_le_bytes());
    local.extend([20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    local.extend(crc.to_le_bytes());
    local.extend((data.len() as u32).to_le_bytes());
    local.extend(declared.to_le_bytes());
    local.extend((name.len() as u16).to_le_bytes());
    local.extend([0, 0]);
    local.extend(name.as_bytes());
    local.extend(data);
    let mut central = Vec::new();
    central.extend(0x02014b50u32.to_le_bytes());
    central.extend([20, 0, 20, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    central.extend(crc.to_le_bytes());
    central.extend((data.len() as u32).to_le_bytes());
    central.extend(declared.to_le_bytes());
    central.extend((name.len() as u16).to_le_bytes());
    // Extra, comment, disk, attributes (2, 2, 2, 2, 4), offset 0 (4).
    central.extend([0; 16]);
    central.extend(name.as_bytes());
    let mut out = local.clone();
    out.extend(&central);
    out.extend(0x06054b50u32.to_le_bytes());
    out.extend([0, 0, 0, 0, 1, 0, 1, 0]);
    out.extend((central.len() as u32).to_le_bytes());
    out.extend((local.len() as u32).to_le_bytes());
    out.extend([0, 0]);
    out
}

#[test]
fn zip_bombs_and_damaged_archives_are_errors() {
    // 256 MiB of zeros deflate to about 256 KiB; with a budget of a
    // megabyte they are refused from their declared size, unread.
    let big = npy::encode(&HostArray {
        dtype: DType::U8,
        dims: vec![1 << 28],
        bytes: vec![0; 1 << 28],
    })
    .unwrap();
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let deflated = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("x.npy", deflated).unwrap();
    zip.write_all(&big).unwrap();
    let bomb = zip.finish().unwrap().into_inner();
    drop(big);
    assert!(bomb.len() < 1 << 20, "{}", bomb.len());
    let e = npz::decode(&bomb, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("more than the 1048576 bytes allowed"), "{e}");

    // A member that declares fewer bytes than it holds is caught after
    // the declared size, not read to its end.
    let member = npy::encode(&HostArray::from_vec(vec![1f32, 2.0], &[2])).unwrap();
    let liar = zip_of("x.npy", 16, &member);
    let e = npz::decode(&liar, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("not a valid .npz") && e.contains("x.npy"), "{e}");
    // The honest archive reads.
    let honest = zip_of("x.npy", member.len() as u32, &member);
    let arrays = npz::decode(&honest, 1 << 20).unwrap();
    assert_eq!(arrays[0].1.to_vec::<f32>().unwrap(), vec![1.0, 2.0]);

    let good = std::fs::read(data("several_compressed.npz")).unwrap();
    for cut in [0, 10, good.len() / 2, good.len() - 1] {
        let e = npz::decode(&good[..cut], 1 << 20).unwrap_err().to_string();
        assert!(e.contains("not a valid .npz"), "cut {cut}: {e}");
    }
    let other = zip_of("notes.txt", 2, b"hi");
    let e = npz::decode(&other, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("\"notes.txt\" is not a .npy file"), "{e}");
    let bad_member = zip_of("x.npy", 3, b"abc");
    let e = npz::decode(&bad_member, 1 << 20).unwrap_err().to_string();
    assert!(e.contains("x.npy") && e.contains("missing magic"), "{e}");
}

#[test]
fn npz_names_must_be_distinct() {
    let a = HostArray::from_vec(vec![1i32], &[1]);
    let e = npz::encode(&[("a", &a), ("a", &a)], false).unwrap_err();
    assert!(e.to_string().contains("distinct"), "{e}");
}

/// An archive with two members of one name read as one array (the zip
/// crate keeps one of them; NumPy would read the other): it is refused,
/// naming the member, stored or deflated, wherever the pair stands.
#[test]
fn npz_members_of_one_name_are_refused() {
    let one = HostArray::from_vec(vec![1i32], &[1]);
    let two = HostArray::from_vec(vec![2i32], &[1]);
    let three = HostArray::from_vec(vec![3i32], &[1]);
    for compress in [false, true] {
        for (first, second) in [("a", "b"), ("b", "c"), ("a", "c")] {
            let good = npz::encode(&[("a", &one), ("b", &two), ("c", &three)], compress).unwrap();
            assert_eq!(npz::decode(&good, 1 << 20).unwrap().len(), 3);
            // Rename `second` to `first` in its local and central headers
            // (same length, so every offset stays right).
            let from = format!("{second}.npy").into_bytes();
            let to = format!("{first}.npy").into_bytes();
            let mut bad = good.clone();
            let mut renamed = 0;
            for i in 0..bad.len() - from.len() {
                if bad[i..i + from.len()] == from[..] {
                    bad[i..i + from.len()].copy_from_slice(&to);
                    renamed += 1;
                }
            }
            assert_eq!(renamed, 2);
            let e = npz::decode(&bad, 1 << 20).unwrap_err().to_string();
            assert!(
                e.contains(&format!(
                    "not a valid .npz file: member \"{first}.npy\" appears twice"
                )),
                "{compress} {first}/{second}: {e}"
            );
        }
    }
}

/// The kind of the I/O failure behind `e`: its `source()` must be the
/// `std::io::Error` itself, not text flattened into another error.
fn io_kind(e: &Error) -> std::io::ErrorKind {
    let source = std::error::Error::source(e).unwrap_or_else(|| panic!("no source: {e}"));
    source
        .downcast_ref::<std::io::Error>()
        .unwrap_or_else(|| panic!("the source is not an io::Error: {e}"))
        .kind()
}

/// A missing file is an `Error::Io` keeping the `io::Error` as its source,
/// so a caller can match `ErrorKind::NotFound` (also on a clone, which a
/// shared failure is); the message starts with TensorFlow's class for the
/// kind, `NotFoundError`, and names what was done and the path.
#[test]
fn a_missing_file_keeps_its_io_error_as_the_source() {
    let dir = temp_dir("missing");
    let npy_path = dir.join("absent.npy");
    let not_found = |e: Error, path: &Path| {
        assert_eq!(io_kind(&e), std::io::ErrorKind::NotFound, "{e}");
        assert_eq!(io_kind(&e.clone()), std::io::ErrorKind::NotFound, "{e}");
        assert!(
            matches!(&e, Error::Io { path: p, .. } if p == path),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(
            text.starts_with("NotFoundError: ") && text.contains(&path.display().to_string()),
            "{text}"
        );
        text
    };
    let text = not_found(xlafn::io::read_npy(&npy_path).unwrap_err(), &npy_path);
    assert!(text.contains("cannot read"), "{text}");
    not_found(
        xlafn::io::read_npz(dir.join("absent.npz")).unwrap_err(),
        &dir.join("absent.npz"),
    );
    // An export folder that is not there: its manifest is missing.
    let e = match xlafn::export::load(dir.join("no-export")) {
        Err(e) => e,
        Ok(_) => panic!("loaded a missing export"),
    };
    not_found(e, &dir.join("no-export").join("xlafn_export.json"));
    // A checkpoint keeps the kind too, its message saying what it was.
    let ckpt = dir.join("absent.safetensors");
    let text = not_found(xlafn::checkpoint::read(&ckpt).unwrap_err(), &ckpt);
    assert!(text.contains("checkpoint: cannot read"), "{text}");
    // Writing into a folder that does not exist.
    let nested = dir.join("no-folder").join("x.npy");
    let t = Tensor::vector(&[1f32]).unwrap();
    let e = xlafn::io::write_npy(&nested, &t).unwrap_err();
    assert_eq!(io_kind(&e), std::io::ErrorKind::NotFound, "{e}");
    assert!(
        e.to_string().starts_with("NotFoundError: cannot write"),
        "{e}"
    );
    // Refusing to replace a file is TensorFlow's AlreadyExistsError.
    let there = dir.join("there.npy");
    xlafn::io::write_npy(&there, &t).unwrap();
    let e = xlafn::export::write_new_file(&there, b"x").unwrap_err();
    assert_eq!(io_kind(&e), std::io::ErrorKind::AlreadyExists, "{e}");
    assert!(
        e.to_string()
            .starts_with("AlreadyExistsError: cannot write")
            && e.to_string().contains("xlafn writes only new files"),
        "{e}"
    );
}

#[test]
fn bool_bytes_other_than_0_and_1_read_as_true() {
    // A hand-written .npy of bool bytes [0, 1, 2]: NumPy would write only
    // 0 and 1, a forged file any byte. 2 must read as true, and stay true
    // under logical_not (false), as the checkpoint reader makes it.
    let mut header = "{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }".to_string();
    while !(10 + header.len() + 1).is_multiple_of(64) {
        header.push(' ');
    }
    header.push('\n');
    let mut file = b"\x93NUMPY\x01\x00".to_vec();
    file.extend((header.len() as u16).to_le_bytes());
    file.extend(header.as_bytes());
    file.extend([0u8, 1, 2]);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bools.npy");
    std::fs::write(&path, &file).unwrap();
    let t = xlafn::io::read_npy(&path).unwrap();
    assert_eq!(t.to_vec::<bool>().unwrap(), vec![false, true, true]);
    assert_eq!(
        t.logical_not().unwrap().to_vec::<bool>().unwrap(),
        vec![true, false, false]
    );
}
