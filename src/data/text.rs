//! Text input with every size bounded: a text or CSV file is read a line
//! (a record) at a time, and a line is held only up to a limit, since a
//! file may hold anything: one 4 GiB line read whole is 4 GiB allocated,
//! and a larger one aborts the process. Errors quote at most a short
//! prefix of the input they are about.

use std::io::{BufRead, Read};

/// The longest line [`Dataset::text_lines`](super::Dataset::text_lines)
/// and [`Dataset::csv`](super::Dataset::csv) read by default, in bytes
/// (64 MiB), line ending excluded. Far above any line of text or row of
/// numbers; what it refuses is a file that is not lines at all. Another
/// bound: [`Dataset::text_lines_with_limit`](super::Dataset::text_lines_with_limit),
/// [`CsvOptions::max_line_bytes`](super::CsvOptions::max_line_bytes).
pub const DEFAULT_MAX_LINE_BYTES: usize = 64 << 20;

/// The most characters of bad input an error quotes.
const QUOTED_CHARS: usize = 64;

/// `'text'`, or its first characters and its length when it is long, for
/// an error message: a message that quoted a huge field whole would be as
/// huge.
pub(crate) fn excerpt(text: &str) -> String {
    match text.char_indices().nth(QUOTED_CHARS) {
        None => format!("'{text}'"),
        Some((end, _)) => format!("'{}...' ({} bytes)", &text[..end], text.len()),
    }
}

/// One line as [`next_line`] reads it.
#[derive(Debug, PartialEq)]
pub(crate) enum Line {
    /// The line's bytes, without its `\n`.
    Bytes(Vec<u8>),
    /// A line longer than the limit: reading stopped in it, so where the
    /// next line starts is unknown (finding it could mean reading a
    /// terabyte).
    TooLong,
}

/// Reads the next line of `reader` (`None` at the end), holding at most
/// `max` bytes of it: reading stops `max` bytes into a longer one.
pub(crate) fn next_line(reader: &mut impl BufRead, max: usize) -> std::io::Result<Option<Line>> {
    let mut line = Vec::new();
    let mut started = false;
    loop {
        let buffer = reader.fill_buf()?;
        if buffer.is_empty() {
            return Ok(started.then_some(Line::Bytes(line)));
        }
        started = true;
        let newline = buffer.iter().position(|&b| b == b'\n');
        let chunk = &buffer[..newline.unwrap_or(buffer.len())];
        if line.len() + chunk.len() > max {
            return Ok(Some(Line::TooLong));
        }
        line.extend_from_slice(chunk);
        let used = chunk.len() + usize::from(newline.is_some());
        reader.consume(used);
        if newline.is_some() {
            return Ok(Some(Line::Bytes(line)));
        }
    }
}

/// A reader that hands out at most `max` bytes past the start of the
/// record being parsed, and two more for a line ending (`\r\n`), so that
/// a CSV reader, which buffers a whole record, never holds more than that:
/// reading on fails, and the CSV reader stops there.
pub(crate) struct RecordBound<R> {
    inner: R,
    read: u64,
    record_start: u64,
    max: u64,
    exceeded: bool,
}

/// Bytes a record may read past its limit: its line ending, `\r\n`.
const LINE_ENDING: u64 = 2;

impl<R> RecordBound<R> {
    pub(crate) fn new(inner: R, max: usize) -> RecordBound<R> {
        RecordBound {
            inner,
            read: 0,
            record_start: 0,
            max: max as u64,
            exceeded: false,
        }
    }

    /// The next record starts at byte `offset`.
    pub(crate) fn record_starts_at(&mut self, offset: u64) {
        self.record_start = offset;
    }

    /// Whether a record ran past the limit.
    pub(crate) fn exceeded(&self) -> bool {
        self.exceeded
    }
}

impl<R: Read> Read for RecordBound<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let held = self.read - self.record_start;
        let room = (self.max + LINE_ENDING).saturating_sub(held);
        if room == 0 {
            self.exceeded = true;
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("a record is longer than {} bytes", self.max),
            ));
        }
        let take = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..take])?;
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The lines `next_line` reads, up to and including a long one.
    fn lines(text: &[u8], max: usize) -> Vec<Line> {
        let mut reader = std::io::BufReader::with_capacity(4, text);
        let mut out = Vec::new();
        while let Some(line) = next_line(&mut reader, max).unwrap() {
            let long = line == Line::TooLong;
            out.push(line);
            if long {
                break;
            }
        }
        out
    }

    #[test]
    fn reading_stops_in_a_line_longer_than_the_limit() {
        let bytes = |b: &[u8]| Line::Bytes(b.to_vec());
        let got = lines(b"ab\n\n12345\nlast", 5);
        assert_eq!(
            got,
            vec![bytes(b"ab"), bytes(b""), bytes(b"12345"), bytes(b"last")]
        );
        assert_eq!(
            lines(b"ab\n123456\nc", 5),
            vec![bytes(b"ab"), Line::TooLong]
        );
        assert!(lines(b"", 5).is_empty());
    }

    #[test]
    fn excerpts_keep_short_text_and_cut_long_text_at_a_character() {
        assert_eq!(excerpt("1.5x"), "'1.5x'");
        let long = "é".repeat(100);
        let cut = excerpt(&long);
        assert_eq!(cut, format!("'{}...' (200 bytes)", "é".repeat(64)));
    }

    #[test]
    fn a_record_bound_reader_stops_past_the_limit() {
        let mut bounded = RecordBound::new(&[7u8; 100][..], 10);
        let mut buffer = [0u8; 64];
        assert_eq!(bounded.read(&mut buffer).unwrap(), 12);
        assert!(bounded.read(&mut buffer).is_err() && bounded.exceeded());
        bounded.record_starts_at(12);
        assert_eq!(bounded.read(&mut buffer).unwrap(), 12);
    }
}
