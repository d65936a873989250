//! The tests of `bundle`: references computed by hand, round trips, and
//! hostile files (each an error, none a panic).
use super::*;

fn numeric(dtype: DType, dims: &[i64], bytes: Vec<u8>) -> BundleValue {
    BundleValue::Numeric {
        dtype,
        dims: dims.to_vec(),
        bytes,
    }
}

fn strings(dims: &[i64], values: &[&[u8]]) -> BundleValue {
    BundleValue::Strings {
        dims: dims.to_vec(),
        values: values.iter().map(|v| v.to_vec()).collect(),
    }
}

fn le<T: Copy, const N: usize>(values: &[T], to: fn(T) -> [u8; N]) -> Vec<u8> {
    values.iter().flat_map(|&v| to(v)).collect()
}

/// One tensor of every dtype, scalars, empty tensors and strings.
fn sample() -> BTreeMap<String, BundleValue> {
    use half::{bf16, f16};
    let f32s = |v: &[f32]| le(v, f32::to_le_bytes);
    let f64s = |v: &[f64]| le(v, f64::to_le_bytes);
    let numerics = [
        (
            "f32",
            DType::F32,
            vec![2, 3],
            f32s(&[1., -2., 3.5, 0., 1e-7, f32::MAX]),
        ),
        (
            "f64/scalar",
            DType::F64,
            vec![],
            f64s(&[std::f64::consts::PI]),
        ),
        ("i32/empty", DType::I32, vec![0, 4], vec![]),
        (
            "i64",
            DType::I64,
            vec![3],
            le(&[i64::MIN, 0, i64::MAX], i64::to_le_bytes),
        ),
        ("bool", DType::Bool, vec![3], vec![1, 0, 1]),
        (
            "f16",
            DType::F16,
            vec![2],
            le(&[f16::from_f32(1.5), f16::MAX], f16::to_le_bytes),
        ),
        (
            "bf16",
            DType::BF16,
            vec![2],
            le(
                &[bf16::from_f32(-3.), bf16::MIN_POSITIVE],
                bf16::to_le_bytes,
            ),
        ),
        ("u8", DType::U8, vec![2, 2], vec![0, 1, 254, 255]),
        ("i8", DType::I8, vec![1], vec![0x80]),
        ("i16", DType::I16, vec![1], le(&[-300i16], i16::to_le_bytes)),
        (
            "u16",
            DType::U16,
            vec![1],
            le(&[u16::MAX], u16::to_le_bytes),
        ),
        (
            "u32",
            DType::U32,
            vec![1],
            le(&[u32::MAX], u32::to_le_bytes),
        ),
        (
            "u64",
            DType::U64,
            vec![1],
            le(&[u64::MAX], u64::to_le_bytes),
        ),
        ("c64", DType::C64, vec![1], f32s(&[1., -1.])),
        ("c128", DType::C128, vec![1], f64s(&[2., -2.])),
    ];
    let mut t: BTreeMap<String, BundleValue> = numerics
        .into_iter()
        .map(|(k, dtype, dims, bytes)| (k.to_string(), numeric(dtype, &dims, bytes)))
        .collect();
    let graph = strings(&[], &[b"\x0a\x00graph\xff"]);
    t.insert("_CHECKPOINTABLE_OBJECT_GRAPH".into(), graph);
    t.insert(
        "strings".into(),
        strings(&[3], &[b"a", b"", b"long enough"]),
    );
    t.insert("strings/empty".into(), strings(&[0], &[]));
    t
}

fn temp_prefix() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let prefix = dir.path().join("variables");
    (dir, prefix)
}

/// The masked checksum of a block's contents and its type byte 0.
fn block_crc(contents: &[u8]) -> [u8; 4] {
    let mut with_type = contents.to_vec();
    with_type.push(0);
    masked_crc32c(&with_type).to_le_bytes()
}

fn err_of<T: std::fmt::Debug>(r: Result<T>) -> String {
    match r {
        Err(e @ Error::Value(_)) => e.to_string(),
        other => panic!("expected a ValueError, got {other:?}"),
    }
}

#[test]
fn crc32c_matches_references() {
    // The check value of CRC-32C, and RFC 3720's test vectors.
    assert_eq!(CASTAGNOLI.checksum(b"123456789"), 0xe306_9283);
    assert_eq!(CASTAGNOLI.checksum(&[0; 32]), 0x8a91_36aa);
    assert_eq!(CASTAGNOLI.checksum(&[0xff; 32]), 0x62a8_ab43);
    assert_eq!(mask(0), 0xa282_ead8);
    assert_eq!(mask(0x8000), 0xa282_ead9);
}

#[test]
fn dtype_numbers_are_a_bijection() {
    let all = DType::NUMERIC_AND_BOOL.into_iter().chain([DType::String]);
    for d in all {
        let n = tf_data_type(d).unwrap();
        assert_eq!(dtype_of_tf(n), Some(d), "{d}");
    }
    assert_eq!(tf_data_type(DType::F32), Some(1));
    assert_eq!(tf_data_type(DType::BF16), Some(14));
    assert_eq!(dtype_of_tf(20), None); // DT_RESOURCE
    assert_eq!(dtype_of_tf(0), None);
}

#[test]
fn a_hand_built_table_matches() {
    let entries = [
        (b"a".to_vec(), b"1".to_vec()),
        (b"ab".to_vec(), b"2".to_vec()),
    ];
    let data = [
        0, 1, 1, b'a', b'1', 1, 1, 1, b'b', b'2', 0, 0, 0, 0, 1, 0, 0, 0,
    ];
    let meta = [0, 0, 0, 0, 1, 0, 0, 0];
    // The last block's index key is the short successor of "ab": "b".
    let index = [0, 1, 2, b'b', 0, 18, 0, 0, 0, 0, 1, 0, 0, 0];
    let mut expected = Vec::new();
    for block in [&data[..], &meta, &index] {
        expected.extend_from_slice(block);
        expected.push(0);
        expected.extend_from_slice(&block_crc(block));
    }
    // Handles (23, 8) and (36, 14), padding, the magic.
    expected.extend_from_slice(&[23, 8, 36, 14]);
    expected.resize(expected.len() + 36, 0);
    expected.extend_from_slice(&[0x57, 0xfb, 0x80, 0x8b, 0x24, 0x75, 0x47, 0xdb]);
    let table = build_table(&entries, TF_BLOCK_SIZE);
    assert_eq!(table, expected);
    let read = read_table(&table).unwrap();
    assert_eq!(
        read,
        vec![(b"a".to_vec(), &b"1"[..]), (b"ab".to_vec(), &b"2"[..])]
    );
}

#[test]
fn separators_follow_tensorflow() {
    let sep = |start: &[u8], limit: &[u8]| {
        let mut s = start.to_vec();
        shortest_separator(&mut s, limit);
        s
    };
    assert_eq!(sep(b"the quick brown fox", b"the who"), b"the r");
    assert_eq!(sep(b"abc", b"abd"), b"abc"); // no byte in between
    assert_eq!(sep(b"ab", b"abc"), b"ab"); // a prefix
    let mut k = vec![0xff, 0xff, 3];
    short_successor(&mut k);
    assert_eq!(k, [0xff, 0xff, 4]);
    let mut k = vec![0xff];
    short_successor(&mut k);
    assert_eq!(k, [0xff]);
}

#[test]
fn a_string_tensor_is_encoded_as_tensorflow_does() {
    let (bytes, crc) = encode_strings(&[b"ab".to_vec(), Vec::new()]);
    let lengths_crc = masked_crc32c(&[2, 0, 0, 0, 0, 0, 0, 0]).to_le_bytes();
    let mut expected = vec![2, 0];
    expected.extend_from_slice(&lengths_crc);
    expected.extend_from_slice(b"ab");
    assert_eq!(bytes, expected);
    let mut covered = vec![2, 0, 0, 0, 0, 0, 0, 0];
    covered.extend_from_slice(&lengths_crc);
    covered.extend_from_slice(b"ab");
    assert_eq!(crc, masked_crc32c(&covered));
    assert_eq!(
        decode_strings(&bytes, 2).unwrap(),
        (vec![b"ab".to_vec(), vec![]], CASTAGNOLI.checksum(&covered))
    );
}

#[test]
fn bundles_round_trip() {
    let (_dir, prefix) = temp_prefix();
    let tensors = sample();
    write_bundle(&prefix, &tensors).unwrap();
    assert_eq!(read_bundle(&prefix).unwrap(), tensors);
    // Created new: a second write there is refused, the files kept.
    assert!(write_bundle(&prefix, &tensors).is_err());
    assert_eq!(read_bundle(&prefix).unwrap(), tensors);
    let empty = BTreeMap::new();
    let (_dir, prefix) = temp_prefix();
    write_bundle(&prefix, &empty).unwrap();
    assert_eq!(read_bundle(&prefix).unwrap(), empty);
}

/// Index entries of the table at `prefix` (one per data block).
fn data_blocks(prefix: &Path) -> usize {
    let file = std::fs::read(index_path(prefix)).unwrap();
    let end = file.len() - FOOTER_LEN;
    let mut cur = Cursor::new(&file[end..]);
    let _metaindex = (cur.varint64().unwrap(), cur.varint64().unwrap());
    let index = (cur.varint64().unwrap(), cur.varint64().unwrap());
    let mut handles = Vec::new();
    let block = block_at(&file, end, index, "index").unwrap();
    parse_block(block, &mut handles, &mut Budget::default()).unwrap();
    handles.len()
}

#[test]
fn many_entries_span_restarts_and_blocks() {
    let tensors: BTreeMap<String, BundleValue> = (0..600)
        .map(|i| {
            let name = format!(
                "model/layer_{:03}/kernel/.ATTRIBUTES/VARIABLE_VALUE",
                i * 7 % 600
            );
            (
                name,
                numeric(DType::I32, &[2], le(&[i, -i], i32::to_le_bytes)),
            )
        })
        .collect();
    let (_dir, prefix) = temp_prefix();
    write_bundle_blocks(&prefix, &tensors, 4096).unwrap();
    assert!(data_blocks(&prefix) >= 8, "{} blocks", data_blocks(&prefix));
    assert_eq!(read_bundle(&prefix).unwrap(), tensors);
    // TensorFlow's 256 KiB blocks: one block, 38 restart points.
    let (_dir, prefix) = temp_prefix();
    write_bundle(&prefix, &tensors).unwrap();
    assert_eq!(data_blocks(&prefix), 1);
    assert_eq!(read_bundle(&prefix).unwrap(), tensors);
}

#[test]
fn the_writer_refuses_bad_tensors() {
    let cases = [
        ("", numeric(DType::U8, &[], vec![1])),
        ("short", numeric(DType::F32, &[2], vec![0; 7])),
        ("negative", numeric(DType::F32, &[-1], vec![])),
        ("string", numeric(DType::String, &[], vec![])),
        ("count", strings(&[2], &[b"x"])),
    ];
    for (name, value) in cases {
        let (_dir, prefix) = temp_prefix();
        let tensors = BTreeMap::from([(name.to_string(), value)]);
        err_of(write_bundle(&prefix, &tensors));
        assert!(!data_path(&prefix).exists() && !index_path(&prefix).exists());
    }
    // An index in the way: the data file this call wrote is removed,
    // the file that was there is left alone.
    let (_dir, prefix) = temp_prefix();
    std::fs::write(index_path(&prefix), b"theirs").unwrap();
    assert!(write_bundle(&prefix, &sample()).is_err());
    assert!(!data_path(&prefix).exists());
    assert_eq!(std::fs::read(index_path(&prefix)).unwrap(), b"theirs");
}

/// Writes a bundle whose index holds `entries` after a valid header.
fn write_raw(
    prefix: &Path,
    header: BundleHeaderProto,
    entries: &[(&str, BundleEntryProto)],
    data: &[u8],
) {
    let mut table = vec![(Vec::new(), header.encode_to_vec())];
    table.extend(
        entries
            .iter()
            .map(|(k, e)| (k.as_bytes().to_vec(), e.encode_to_vec())),
    );
    std::fs::write(index_path(prefix), build_table(&table, TF_BLOCK_SIZE)).unwrap();
    std::fs::write(data_path(prefix), data).unwrap();
}

fn good_header() -> BundleHeaderProto {
    BundleHeaderProto {
        num_shards: 1,
        endianness: 0,
        version: Some(VersionDef {
            producer: 1,
            ..Default::default()
        }),
    }
}

/// An entry for the 8 bytes `data` as two f32.
fn f32_entry(data: &[u8]) -> BundleEntryProto {
    BundleEntryProto {
        dtype: 1,
        shape: Some(TensorShapeProto {
            dim: vec![Dim { size: 2 }],
            unknown_rank: false,
        }),
        size: 8,
        crc32c: masked_crc32c(data),
        ..Default::default()
    }
}

#[test]
fn crafted_entries_are_errors() {
    let data = le(&[1f32, 2.], f32::to_le_bytes);
    let (_dir, prefix) = temp_prefix();
    write_raw(&prefix, good_header(), &[("x", f32_entry(&data))], &data);
    assert_eq!(
        read_bundle(&prefix).unwrap()["x"],
        numeric(DType::F32, &[2], data.clone())
    );
    let header = |f: fn(&mut BundleHeaderProto)| {
        let mut h = good_header();
        f(&mut h);
        h
    };
    let entry = |f: fn(&mut BundleEntryProto)| {
        let mut e = f32_entry(&le(&[1f32, 2.], f32::to_le_bytes));
        f(&mut e);
        e
    };
    let cases = [
        ("shards", header(|h| h.num_shards = 2), entry(|_| {})),
        ("big-endian", header(|h| h.endianness = 1), entry(|_| {})),
        (
            "consumer",
            header(|h| h.version.as_mut().unwrap().min_consumer = 2),
            entry(|_| {}),
        ),
        ("size", good_header(), entry(|e| e.size = 7)),
        ("crc", good_header(), entry(|e| e.crc32c ^= 1)),
        ("offset", good_header(), entry(|e| e.offset = 1)),
        ("huge offset", good_header(), entry(|e| e.offset = i64::MAX)),
        ("negative size", good_header(), entry(|e| e.size = -8)),
        ("dtype", good_header(), entry(|e| e.dtype = 20)),
        ("shard", good_header(), entry(|e| e.shard_id = 1)),
        ("sliced", good_header(), entry(|e| e.slices = vec![vec![]])),
        (
            "negative dim",
            good_header(),
            entry(|e| e.shape.as_mut().unwrap().dim[0].size = -2),
        ),
        (
            "unknown rank",
            good_header(),
            entry(|e| e.shape.as_mut().unwrap().unknown_rank = true),
        ),
        (
            "overflow",
            good_header(),
            entry(|e| e.shape.as_mut().unwrap().dim = vec![Dim { size: 1 << 40 }; 3]),
        ),
    ];
    for (what, header, entry) in cases {
        let (_dir, prefix) = temp_prefix();
        write_raw(&prefix, header, &[("x", entry)], &data);
        let e = err_of(read_bundle(&prefix));
        assert!(e.contains("checkpoint"), "{what}: {e}");
    }
    // The data file shorter than an entry's offset + size.
    let (_dir, prefix) = temp_prefix();
    write_raw(
        &prefix,
        good_header(),
        &[("x", f32_entry(&data))],
        &data[..7],
    );
    assert!(err_of(read_bundle(&prefix)).contains("outside"));
    // Two entries over the same bytes: more than the file holds.
    let (_dir, prefix) = temp_prefix();
    write_raw(
        &prefix,
        good_header(),
        &[("x", f32_entry(&data)), ("y", f32_entry(&data))],
        &data,
    );
    err_of(read_bundle(&prefix));
}

#[test]
fn crafted_strings_are_errors() {
    let (bytes, crc) = encode_strings(&[b"abc".to_vec()]);
    let entry = |size: usize, crc: u32, dims: Vec<Dim>| BundleEntryProto {
        dtype: DT_STRING,
        shape: Some(TensorShapeProto {
            dim: dims,
            unknown_rank: false,
        }),
        size: size as i64,
        crc32c: crc,
        ..Default::default()
    };
    let (_dir, prefix) = temp_prefix();
    write_raw(
        &prefix,
        good_header(),
        &[("s", entry(bytes.len(), crc, vec![]))],
        &bytes,
    );
    assert_eq!(read_bundle(&prefix).unwrap()["s"], strings(&[], &[b"abc"]));
    let mut bad_lengths_crc = bytes.clone();
    bad_lengths_crc[1] ^= 1;
    let mut long_length = bytes.clone();
    long_length[0] = 9;
    let cases = [
        (bytes.clone(), entry(bytes.len(), crc ^ 1, vec![])),
        (bad_lengths_crc, entry(bytes.len(), crc, vec![])),
        (long_length, entry(bytes.len(), crc, vec![])),
        (bytes.clone(), entry(bytes.len() - 1, crc, vec![])),
        // A billion elements claimed in 8 bytes: refused before any
        // allocation for them.
        (
            bytes.clone(),
            entry(bytes.len(), crc, vec![Dim { size: 1 << 30 }]),
        ),
        (vec![0xff; 16], entry(16, crc, vec![Dim { size: 1 }])),
    ];
    for (data, entry) in cases {
        let (_dir, prefix) = temp_prefix();
        write_raw(&prefix, good_header(), &[("s", entry)], &data);
        err_of(read_bundle(&prefix));
    }
}

/// A valid bundle's index bytes with `f` applied, read back.
fn read_mangled(f: impl FnOnce(&mut Vec<u8>)) -> Result<BTreeMap<String, BundleValue>> {
    let (_dir, prefix) = temp_prefix();
    write_bundle(&prefix, &sample()).unwrap();
    let mut index = std::fs::read(index_path(&prefix)).unwrap();
    f(&mut index);
    std::fs::remove_file(index_path(&prefix)).unwrap();
    std::fs::write(index_path(&prefix), &index).unwrap();
    read_bundle(&prefix)
}

/// Replaces the footer's handles with `handles`' encoding.
fn set_footer(index: &mut [u8], handles: &[u8]) {
    let end = index.len() - FOOTER_LEN;
    index[end..end + 40].fill(0);
    index[end..end + handles.len()].copy_from_slice(handles);
}

#[test]
fn damaged_indexes_are_errors() {
    let truncated = err_of(read_mangled(|i| i.truncate(i.len() - 1)));
    assert!(truncated.contains("magic"), "{truncated}");
    err_of(read_mangled(|i| i.truncate(20)));
    err_of(read_mangled(|i| i.clear()));
    err_of(read_mangled(|i| i.drain(..10).for_each(drop)));
    let magic = err_of(read_mangled(|i| *i.last_mut().unwrap() ^= 1));
    assert!(magic.contains("magic"), "{magic}");
    let flipped = err_of(read_mangled(|i| i[7] ^= 0x10));
    assert!(flipped.contains("checksum"), "{flipped}");
    let outside = err_of(read_mangled(|i| {
        let mut h = encode_handle((1 << 40, 20));
        h.extend(encode_handle((1 << 40, 20)));
        set_footer(i, &h);
    }));
    assert!(outside.contains("outside"), "{outside}");
    err_of(read_mangled(|i| {
        let mut h = encode_handle((u64::MAX, u64::MAX));
        h.extend(encode_handle((u64::MAX, u64::MAX)));
        set_footer(i, &h);
    }));
    let huge = err_of(read_mangled(|i| set_footer(i, &[0xff; 11])));
    assert!(huge.contains("overflows"), "{huge}");
    // A compressed block (type 1), its checksum made right.
    err_of(read_mangled(|i| {
        let contents_end = data_blocks_end(i);
        i[contents_end] = 1;
        let mut digest = CASTAGNOLI.digest();
        digest.update(&i[..=contents_end]);
        let crc = mask(digest.finalize()).to_le_bytes();
        i[contents_end + 1..contents_end + 5].copy_from_slice(&crc);
    }));
}

/// Where the first data block's contents end (its trailer starts).
fn data_blocks_end(index: &[u8]) -> usize {
    let end = index.len() - FOOTER_LEN;
    let mut cur = Cursor::new(&index[end..]);
    let (offset, _) = (cur.varint64().unwrap(), cur.varint64().unwrap());
    offset as usize - TRAILER_LEN
}

#[test]
fn crafted_blocks_are_errors() {
    // Each a block of the table's index, with a right checksum.
    let blocks: [&[u8]; 7] = [
        &[1, 0, 0],
        &[0, 0, 0, 0, 9, 0, 0, 0],
        &[0, 1, 0, b'a', 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0],
        &[0, 1, 0, b'a', 5, 0, 0, 0, 1, 0, 0, 0],
        &[3, 1, 0, b'a', 0, 0, 0, 0, 1, 0, 0, 0],
        &[0, 1, 9, b'a', 0, 0, 0, 0, 1, 0, 0, 0],
        &[0, 1, 0, b'b', 0, 1, 0, b'a', 0, 0, 0, 0, 1, 0, 0, 0],
    ];
    for block in blocks {
        let mut file = block.to_vec();
        file.push(0);
        file.extend_from_slice(&block_crc(block));
        let mut footer = encode_handle((0, block.len() as u64));
        footer.extend(encode_handle((0, block.len() as u64)));
        footer.resize(40, 0);
        file.extend(footer);
        file.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
        assert!(read_table(&file).is_err(), "{block:?}");
    }
}

#[test]
fn garbage_never_panics() {
    let (_dir, prefix) = temp_prefix();
    write_bundle(&prefix, &sample()).unwrap();
    let index = std::fs::read(index_path(&prefix)).unwrap();
    // Every truncation, every byte flipped: an error or (a flip the
    // format does not cover, in the footer's padding) the same bundle.
    for n in 0..index.len() {
        assert!(read_table(&index[..n]).is_err(), "{n} bytes");
    }
    for i in 0..index.len() {
        let mut damaged = index.clone();
        damaged[i] ^= 0x41;
        if let Ok(entries) = read_table(&damaged) {
            assert_eq!(entries, read_table(&index).unwrap(), "byte {i}");
        }
    }
    // Pseudo-random bytes, with and without the table's magic.
    let mut state = 0x2545_f491_4f6c_dd1du64;
    for len in [0, 1, 47, 48, 49, 100, 1000, 5000] {
        let mut bytes: Vec<u8> = (0..len)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        assert!(read_table(&bytes).is_err());
        if len >= 8 {
            let at = len - 8;
            bytes[at..].copy_from_slice(&TABLE_MAGIC.to_le_bytes());
            assert!(read_table(&bytes).is_err());
        }
        std::fs::remove_file(index_path(&prefix)).unwrap();
        std::fs::write(index_path(&prefix), &bytes).unwrap();
        err_of(read_bundle(&prefix));
    }
}

#[test]
fn damaged_data_is_an_error() {
    let (_dir, prefix) = temp_prefix();
    write_bundle(&prefix, &sample()).unwrap();
    let data = std::fs::read(data_path(&prefix)).unwrap();
    for i in [0, data.len() / 2, data.len() - 1] {
        let mut damaged = data.clone();
        damaged[i] ^= 1;
        std::fs::remove_file(data_path(&prefix)).unwrap();
        std::fs::write(data_path(&prefix), &damaged).unwrap();
        assert!(
            err_of(read_bundle(&prefix)).contains("checksum"),
            "byte {i}"
        );
    }
    std::fs::remove_file(data_path(&prefix)).unwrap();
    std::fs::write(data_path(&prefix), &data[..data.len() - 1]).unwrap();
    err_of(read_bundle(&prefix));
    // Not a regular file: refused, not waited on.
    std::fs::remove_file(data_path(&prefix)).unwrap();
    std::os::unix::fs::symlink("/dev/zero", data_path(&prefix)).unwrap();
    assert!(read_bundle(&prefix).is_err());
}

/// A tensor as JSON for the TensorFlow check: dtype, dims, and the
/// bytes (numeric) or the strings, as hex.
fn to_json(v: &BundleValue) -> serde_json::Value {
    match v {
        BundleValue::Numeric { dtype, dims, bytes } => serde_json::json!({
            "dtype": dtype.name(), "dims": dims, "hex": files::hex(bytes),
        }),
        BundleValue::Strings { dims, values } => serde_json::json!({
            "dtype": "string", "dims": dims,
            "strings": values.iter().map(|s| files::hex(s)).collect::<Vec<_>>(),
        }),
    }
}

/// The Rust half of `scripts/tf_bundle_check.py` (run that script; it
/// sets `XLAFN_TF_BUNDLE_DIR`). Writes `sample()` to `<dir>/xlafn`
/// with its JSON beside it, and for each TensorFlow bundle listed in
/// `<dir>/tf_prefixes.txt` writes what `read_bundle` read as JSON and
/// writes it again with `write_bundle` (`<prefix>.rewritten`).
#[test]
fn tensorflow_interop_files() {
    let Some(dir) = crate::environment::TF_BUNDLE_DIR.get().map(PathBuf::from) else {
        return;
    };
    let dump = |path: PathBuf, tensors: &BTreeMap<String, BundleValue>| {
        let json: serde_json::Map<_, _> = tensors
            .iter()
            .map(|(k, v)| (k.clone(), to_json(v)))
            .collect();
        std::fs::write(path, serde_json::to_string_pretty(&json).unwrap()).unwrap();
    };
    write_bundle(&dir.join("xlafn"), &sample()).unwrap();
    dump(dir.join("xlafn.json"), &sample());
    let list = std::fs::read_to_string(dir.join("tf_prefixes.txt")).unwrap_or_default();
    for prefix in list.lines().map(PathBuf::from) {
        let tensors = read_bundle(&prefix).unwrap();
        dump(with_suffix(&prefix, ".xlafn.json"), &tensors);
        write_bundle(&with_suffix(&prefix, ".rewritten"), &tensors).unwrap();
    }
}
