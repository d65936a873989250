//! Layer: export (SavedModel; imports `crc`). LevelDB's table format, as
//! TensorFlow's `tensorflow/core/lib/io/table_builder.cc` writes it for a
//! checkpoint's index: blocks of prefix-compressed entries with restart
//! points, each with a masked CRC-32C trailer, an index block of block
//! handles, and the footer with the table magic. `bundle` puts the
//! tensor bundle's header and entries in it. The reader checks every
//! varint, handle, restart array, key order and checksum against the
//! bytes it has, within the caps below.

/// The most entries (tensors and the header) in a bundle. Each costs a
/// map node and two allocations however few bytes it takes in the index,
/// so their number is capped apart from the index's size; real models
/// have thousands.
pub(super) const MAX_ENTRIES: usize = 1 << 20;

/// The most bytes all keys may take once their shared prefixes are
/// expanded. Prefix compression lets a small index spell long keys (each
/// entry repeating its predecessor's key plus a byte), so this, not the
/// index's size, bounds the memory the keys take.
pub(super) const MAX_KEY_BYTES: usize = 256 << 20;

/// TensorFlow's table options: 256 KiB data blocks, a restart point every
/// 16 keys (every key in the index block).
pub(super) const TF_BLOCK_SIZE: usize = 256 << 10;
pub(super) const RESTART_INTERVAL: usize = 16;

/// A block's trailer: a compression byte (0, none) and a masked CRC-32C.
pub(super) const TRAILER_LEN: usize = 5;
/// The footer: two block handles, zero padding, the table magic.
pub(super) const FOOTER_LEN: usize = 48;
pub(super) const TABLE_MAGIC: u64 = 0xdb47_7524_8b80_fb57;

/// CRC-32C (Castagnoli), TensorFlow's checksum throughout the format.
pub(super) const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);

/// TensorFlow masks (rotates and offsets) a CRC it stores, because the CRC
/// of bytes that themselves hold CRCs is weak.
pub(super) fn mask(crc: u32) -> u32 {
    crc.rotate_right(15).wrapping_add(0xa282_ead8)
}

pub(super) fn masked_crc32c(bytes: &[u8]) -> u32 {
    mask(CASTAGNOLI.checksum(bytes))
}

pub(super) fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// A LevelDB block being built: entries whose keys share a prefix with
/// their predecessor's, a restart point (a full key) every `interval`.
pub(super) struct BlockBuilder {
    pub(super) buf: Vec<u8>,
    pub(super) restarts: Vec<u32>,
    pub(super) since_restart: usize,
    pub(super) interval: usize,
    pub(super) last_key: Vec<u8>,
}

impl BlockBuilder {
    pub(super) fn new(interval: usize) -> Self {
        BlockBuilder {
            buf: Vec::new(),
            restarts: vec![0],
            since_restart: 0,
            interval,
            last_key: Vec::new(),
        }
    }

    pub(super) fn add(&mut self, key: &[u8], value: &[u8]) {
        let shared = if self.since_restart < self.interval {
            self.last_key
                .iter()
                .zip(key)
                .take_while(|(a, b)| a == b)
                .count()
        } else {
            // In range: `write_bundle` bounds the whole index far below 4 GiB.
            self.restarts.push(self.buf.len() as u32);
            self.since_restart = 0;
            0
        };
        put_varint(&mut self.buf, shared as u64);
        put_varint(&mut self.buf, (key.len() - shared) as u64);
        put_varint(&mut self.buf, value.len() as u64);
        self.buf.extend_from_slice(&key[shared..]);
        self.buf.extend_from_slice(value);
        self.last_key.clear();
        self.last_key.extend_from_slice(key);
        self.since_restart += 1;
    }

    pub(super) fn size_estimate(&self) -> usize {
        self.buf.len() + 4 * self.restarts.len() + 4
    }

    /// The block's contents (entries, restart offsets, their count); the
    /// builder is left empty.
    pub(super) fn finish(&mut self) -> Vec<u8> {
        let mut out = std::mem::take(&mut self.buf);
        for r in &self.restarts {
            out.extend_from_slice(&r.to_le_bytes());
        }
        out.extend_from_slice(&(self.restarts.len() as u32).to_le_bytes());
        *self = BlockBuilder::new(self.interval);
        out
    }
}

/// Appends a finished block and its trailer; gives its handle.
pub(super) fn write_block(file: &mut Vec<u8>, block: &mut BlockBuilder) -> (u64, u64) {
    let contents = block.finish();
    let handle = (file.len() as u64, contents.len() as u64);
    file.extend_from_slice(&contents);
    let mut digest = CASTAGNOLI.digest();
    digest.update(&contents);
    digest.update(&[0]);
    file.push(0);
    file.extend_from_slice(&mask(digest.finalize()).to_le_bytes());
    handle
}

pub(super) fn encode_handle((offset, size): (u64, u64)) -> Vec<u8> {
    let mut out = Vec::new();
    put_varint(&mut out, offset);
    put_varint(&mut out, size);
    out
}

/// TensorFlow's `FindShortestSeparator`: shortens `start` to a key still
/// `>= start` and `< limit`, for the index entry between two blocks.
pub(super) fn shortest_separator(start: &mut Vec<u8>, limit: &[u8]) {
    let common = start.iter().zip(limit).take_while(|(a, b)| a == b).count();
    if common < start.len().min(limit.len()) {
        let byte = start[common];
        if byte < 0xff && byte + 1 < limit[common] {
            start[common] += 1;
            start.truncate(common + 1);
        }
    }
}

/// TensorFlow's `FindShortSuccessor`: a short key `>= key`, for the index
/// entry of the last block.
pub(super) fn short_successor(key: &mut Vec<u8>) {
    if let Some(i) = key.iter().position(|&b| b != 0xff) {
        key[i] += 1;
        key.truncate(i + 1);
    }
}

/// The table of `entries` (sorted, distinct keys), laid out as
/// TensorFlow's `TableBuilder` lays it out with no compression.
pub(super) fn build_table(entries: &[(Vec<u8>, Vec<u8>)], block_size: usize) -> Vec<u8> {
    let mut file = Vec::new();
    let mut data = BlockBuilder::new(RESTART_INTERVAL);
    let mut index = BlockBuilder::new(1);
    let mut pending: Option<(u64, u64)> = None;
    let mut last_key = Vec::new();
    let flush = |file: &mut Vec<u8>, data: &mut BlockBuilder, pending: &mut Option<_>| {
        if !data.buf.is_empty() {
            *pending = Some(write_block(file, data));
        }
    };
    for (i, (key, value)) in entries.iter().enumerate() {
        // An entry over twice the block size gets a block of its own.
        if i > 0 && key.len() + value.len() >= 2 * block_size {
            flush(&mut file, &mut data, &mut pending);
        }
        if let Some(handle) = pending.take() {
            shortest_separator(&mut last_key, key);
            index.add(&last_key, &encode_handle(handle));
        }
        last_key.clone_from(key);
        data.add(key, value);
        if data.size_estimate() >= block_size {
            flush(&mut file, &mut data, &mut pending);
        }
    }
    flush(&mut file, &mut data, &mut pending);
    let metaindex = write_block(&mut file, &mut BlockBuilder::new(RESTART_INTERVAL));
    if let Some(handle) = pending.take() {
        short_successor(&mut last_key);
        index.add(&last_key, &encode_handle(handle));
    }
    let index = write_block(&mut file, &mut index);
    let mut footer = encode_handle(metaindex);
    footer.extend(encode_handle(index));
    footer.resize(FOOTER_LEN - 8, 0);
    footer.extend_from_slice(&TABLE_MAGIC.to_le_bytes());
    file.extend(footer);
    file
}

/// Reads bytes front to back; every read is checked against the end.
pub(super) struct Cursor<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

pub(super) type Parsed<T> = std::result::Result<T, String>;

impl<'a> Cursor<'a> {
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        Cursor { bytes, pos: 0 }
    }

    pub(super) fn at_end(&self) -> bool {
        self.pos == self.bytes.len()
    }

    pub(super) fn varint64(&mut self) -> Parsed<u64> {
        let mut value = 0u64;
        for i in 0..10 {
            let Some(&b) = self.bytes.get(self.pos) else {
                return Err(format!("a varint at byte {} runs past the end", self.pos));
            };
            self.pos += 1;
            // The tenth byte holds bit 63 only.
            if i == 9 && b > 1 {
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(format!(
            "a varint ending at byte {} overflows 64 bits",
            self.pos
        ))
    }

    pub(super) fn varint32(&mut self) -> Parsed<usize> {
        let at = self.pos;
        let v = self.varint64()?;
        u32::try_from(v)
            .map(|v| v as usize)
            .map_err(|_| format!("the varint32 at byte {at} is {v}"))
    }

    pub(super) fn take(&mut self, n: u64) -> Parsed<&'a [u8]> {
        let left = self.bytes.len() - self.pos;
        if n > left as u64 {
            return Err(format!(
                "{n} bytes at byte {} run past the end ({left} left)",
                self.pos
            ));
        }
        let out = &self.bytes[self.pos..self.pos + n as usize];
        self.pos += n as usize;
        Ok(out)
    }

    pub(super) fn u32_le(&mut self) -> Parsed<u32> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// What a table's parse has spent so far (see the caps above).
#[derive(Default)]
pub(super) struct Budget {
    pub(super) entries: usize,
    pub(super) key_bytes: usize,
}

pub(super) type Entries<'a> = Vec<(Vec<u8>, &'a [u8])>;

/// Appends the entries of one block to `out`, checking the restart array
/// (each restart point starts an entry with no shared prefix), that every
/// key is greater than the one before it in `out`, and the caps.
pub(super) fn parse_block<'a>(
    block: &'a [u8],
    out: &mut Entries<'a>,
    budget: &mut Budget,
) -> Parsed<()> {
    let len = block.len();
    if len < 4 {
        return Err(format!("a block of {len} bytes has no restart count"));
    }
    let count = Cursor::new(&block[len - 4..]).u32_le()? as usize;
    if count == 0 || count > (len - 4) / 4 {
        return Err(format!(
            "a block of {len} bytes claims {count} restart points"
        ));
    }
    let limit = len - 4 - 4 * count;
    let mut restarts = Cursor::new(&block[limit..len - 4]);
    let mut next_restart = Some(restarts.u32_le()? as usize);
    let mut cur = Cursor::new(&block[..limit]);
    let mut key: Vec<u8> = Vec::new();
    let first = out.len();
    while !cur.at_end() {
        let at = cur.pos;
        let restart = next_restart == Some(at);
        if next_restart.is_some_and(|r| r < at) || (out.len() == first && !restart) {
            return Err(format!(
                "a restart point ({next_restart:?}) is not at an entry"
            ));
        }
        if restart {
            next_restart = match restarts.at_end() {
                true => None,
                false => Some(restarts.u32_le()? as usize),
            };
        }
        let shared = cur.varint32()?;
        let non_shared = cur.varint32()?;
        let value_len = cur.varint32()?;
        if shared > key.len() || (restart && shared != 0) {
            return Err(format!(
                "the entry at byte {at} shares {shared} bytes of a {}-byte key",
                key.len()
            ));
        }
        key.truncate(shared);
        key.extend_from_slice(cur.take(non_shared as u64)?);
        let value = cur.take(value_len as u64)?;
        budget.entries += 1;
        budget.key_bytes += key.len();
        // Twice the caps: the index block's entries count too, and there
        // are at most as many of them (and their keys are no longer) as
        // data entries.
        if budget.entries > 2 * MAX_ENTRIES || budget.key_bytes > 2 * MAX_KEY_BYTES {
            return Err(format!(
                "more than {MAX_ENTRIES} entries or {MAX_KEY_BYTES} bytes of keys"
            ));
        }
        if out.last().is_some_and(|(prev, _)| *prev >= key) {
            return Err(format!(
                "the key {:?} is out of order",
                String::from_utf8_lossy(&key)
            ));
        }
        out.push((key.clone(), value));
    }
    let lone_empty = out.len() == first && next_restart == Some(0) && restarts.at_end();
    if next_restart.is_some() && !lone_empty {
        return Err(format!(
            "a restart point ({next_restart:?}) is past the last entry"
        ));
    }
    Ok(())
}

/// The block `handle` points at within `file[..end]`, its trailer checked.
pub(super) fn block_at<'a>(
    file: &'a [u8],
    end: usize,
    handle: (u64, u64),
    what: &str,
) -> Parsed<&'a [u8]> {
    let (offset, size) = handle;
    let fits = offset
        .checked_add(size)
        .and_then(|e| e.checked_add(TRAILER_LEN as u64))
        .is_some_and(|e| e <= end as u64);
    if !fits {
        return Err(format!(
            "the {what} block ({size} bytes at offset {offset}) lies outside the {end} bytes before the footer"
        ));
    }
    // In range: checked just above.
    let (offset, size) = (offset as usize, size as usize);
    let contents = &file[offset..offset + size];
    let trailer = &file[offset + size..offset + size + TRAILER_LEN];
    if trailer[0] != 0 {
        return Err(format!(
            "the {what} block at offset {offset} is compressed (type {}); TensorFlow writes none",
            trailer[0]
        ));
    }
    let mut digest = CASTAGNOLI.digest();
    digest.update(contents);
    digest.update(&trailer[..1]);
    let stored = Cursor::new(&trailer[1..]).u32_le()?;
    if mask(digest.finalize()) != stored {
        return Err(format!(
            "the {what} block at offset {offset} fails its checksum"
        ));
    }
    Ok(contents)
}

pub(super) fn decode_handle(bytes: &[u8]) -> Parsed<(u64, u64)> {
    let mut cur = Cursor::new(bytes);
    Ok((cur.varint64()?, cur.varint64()?))
}

/// Every entry of the table `file`, in key order, checked.
pub(super) fn read_table(file: &[u8]) -> Parsed<Entries<'_>> {
    if file.len() < FOOTER_LEN {
        return Err(format!(
            "{} bytes is shorter than a table's footer",
            file.len()
        ));
    }
    let end = file.len() - FOOTER_LEN;
    let footer = &file[end..];
    if footer[FOOTER_LEN - 8..] != TABLE_MAGIC.to_le_bytes() {
        return Err("it is not a table (bad magic number)".into());
    }
    let mut cur = Cursor::new(&footer[..FOOTER_LEN - 8]);
    let metaindex = (cur.varint64()?, cur.varint64()?);
    let index = (cur.varint64()?, cur.varint64()?);
    block_at(file, end, metaindex, "metaindex")?;
    let mut budget = Budget::default();
    let mut handles = Vec::new();
    parse_block(
        block_at(file, end, index, "index")?,
        &mut handles,
        &mut budget,
    )?;
    let mut entries: Entries = Vec::new();
    for (i, (separator, handle)) in handles.iter().enumerate() {
        let first = entries.len();
        let block = block_at(file, end, decode_handle(handle)?, "data")?;
        parse_block(block, &mut entries, &mut budget)?;
        let (Some((low, _)), Some((high, _))) = (entries.get(first), entries.last()) else {
            return Err(format!("data block {i} is empty"));
        };
        let above_previous = i == 0 || *low > handles[i - 1].0;
        if !above_previous || high > separator {
            return Err(format!(
                "data block {i}'s keys are not within its index entry's"
            ));
        }
    }
    Ok(entries)
}
