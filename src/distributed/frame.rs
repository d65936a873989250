//! Layer: distributed (imports only `error`). The wire format of the
//! coordination service: length-prefixed binary frames, one request or
//! reply each.
//!
//! A frame is the magic `xkv1`, a big-endian `u32` body length, then the
//! body: a tag byte and the fields of that message, integers big-endian,
//! strings and byte strings as a `u32` length and the bytes. The magic
//! turns a stray client (an HTTP probe, a port scanner) into a clear
//! "not a coordination frame" instead of a length read from its text.
//!
//! Both ends treat the other as untrusted input: a declared length is
//! checked against the limits below before a byte of the body is read, the
//! body is read as it arrives (a length the peer never sends allocates
//! nothing), every field is bounds-checked, and a body must be consumed
//! exactly. Every failure is an error for the caller, never a panic.

use crate::error::{Error, ErrorCode, Result};
use std::io::{ErrorKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

/// The first four bytes of every frame.
pub const MAGIC: [u8; 4] = *b"xkv1";
/// The longest key or barrier name, in bytes.
pub const MAX_KEY_BYTES: usize = 4 << 10;
/// The largest value, in bytes. PJRT's own values (NCCL ids, topologies)
/// are kilobytes at most.
pub const MAX_VALUE_BYTES: usize = 4 << 20;
/// The longest error message a reply carries, in bytes.
pub const MAX_MESSAGE_BYTES: usize = 4 << 10;
/// The largest frame body: a value with its key and the fixed fields.
pub const MAX_BODY_BYTES: usize = MAX_VALUE_BYTES + MAX_KEY_BYTES + 64;

const SET: u8 = 1;
const GET: u8 = 2;
const TRY_GET: u8 = 3;
const REGISTER: u8 = 4;
const BARRIER: u8 = 5;
const HEARTBEAT: u8 = 6;
const LEAVE: u8 = 7;
const DONE: u8 = 0x81;
const VALUE: u8 = 0x82;
const NOT_FOUND: u8 = 0x83;
const FAILED: u8 = 0x84;

/// What a client asks the service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Request {
    /// Store `value` under `key`, replacing any earlier value.
    Set {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
    },
    /// The value of `key`, waiting up to `timeout_ms` for it to be set.
    Get {
        /// The key.
        key: String,
        /// How long the service waits for the key, in milliseconds.
        timeout_ms: u64,
    },
    /// The value of `key` if it is set now.
    TryGet {
        /// The key.
        key: String,
    },
    /// Join as `process_id` of `num_processes`; `token` tells a repeated
    /// request of one process from a second process with the same id.
    Register {
        /// The joining process's id.
        process_id: u32,
        /// How many processes the joining process expects.
        num_processes: u32,
        /// A random number drawn once per joining client.
        token: u64,
    },
    /// Wait until every process has reached barrier `name`.
    Barrier {
        /// The barrier's name; each name is passed once.
        name: String,
        /// The arriving process's id.
        process_id: u32,
        /// How long the service waits for the others, in milliseconds.
        timeout_ms: u64,
    },
    /// Process `process_id` (registered with `token`) is alive. The first
    /// heartbeat makes its connection the process's liveness connection:
    /// the service answers it once (`Done`) and then only reads further
    /// heartbeats there. The process is taken for dead when the next one
    /// (or `Leave`) does not come within `timeout_ms`, or when that
    /// connection closes.
    Heartbeat {
        /// The process's id.
        process_id: u32,
        /// The token it registered with.
        token: u64,
        /// How long the service waits for the next heartbeat, in
        /// milliseconds.
        timeout_ms: u64,
    },
    /// The process leaves the run (on its liveness connection): its
    /// connection closing afterwards is not a death.
    Leave {
        /// The process's id.
        process_id: u32,
        /// The token it registered with.
        token: u64,
    },
}

/// What the service answers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// The request succeeded and returns nothing.
    Done,
    /// The value asked for.
    Value(Vec<u8>),
    /// `TryGet` of a key that is not set.
    NotFound,
    /// The request failed.
    Failed {
        /// The status class of the failure.
        code: ErrorCode,
        /// What went wrong.
        message: String,
    },
}

/// A malformed frame or message: the peer is not speaking this protocol.
fn malformed(message: impl std::fmt::Display) -> Error {
    Error::distributed(
        ErrorCode::InvalidArgument,
        format!("malformed coordination frame: {message}"),
    )
}

/// An I/O failure while reading or writing a frame.
fn io_error(e: std::io::Error, doing: &str) -> Error {
    match e.kind() {
        ErrorKind::WouldBlock | ErrorKind::TimedOut => Error::distributed(
            ErrorCode::DeadlineExceeded,
            format!("timed out {doing} a coordination frame"),
        ),
        _ => Error::distributed(
            ErrorCode::Unavailable,
            format!("connection failed {doing} a coordination frame: {e}"),
        ),
    }
}

/// Writes one frame holding `body`.
pub fn write_frame(w: &mut impl Write, body: &[u8]) -> Result<()> {
    let len = u32::try_from(body.len())
        .ok()
        .filter(|&n| n as usize <= MAX_BODY_BYTES)
        .ok_or_else(|| malformed(format!("a body of {} bytes is too large", body.len())))?;
    let mut frame = Vec::with_capacity(8 + body.len());
    frame.extend_from_slice(&MAGIC);
    frame.extend_from_slice(&len.to_be_bytes());
    frame.extend_from_slice(body);
    w.write_all(&frame)
        .and_then(|()| w.flush())
        .map_err(|e| io_error(e, "writing"))
}

/// Reads one frame's body; `None` if the peer closed the connection
/// cleanly before the frame began.
pub fn read_frame(r: &mut impl Read) -> Result<Option<Vec<u8>>> {
    let mut header = [0u8; 8];
    match read_up_to(r, &mut header)? {
        0 => return Ok(None),
        8 => {}
        n => {
            return Err(malformed(format!(
                "truncated header: the connection ended after {n} of 8 bytes"
            )));
        }
    }
    if header[..4] != MAGIC {
        return Err(malformed(format!(
            "not a coordination frame (it starts with {:02x?}, not {:02x?})",
            &header[..4],
            MAGIC
        )));
    }
    let len = u32::from_be_bytes([header[4], header[5], header[6], header[7]]) as usize;
    if len > MAX_BODY_BYTES {
        return Err(malformed(format!(
            "a body of {len} bytes exceeds the limit of {MAX_BODY_BYTES}"
        )));
    }
    // Grows as bytes arrive: a peer that declares 4 MiB and sends nothing
    // costs nothing.
    let mut body = Vec::with_capacity(len.min(64 << 10));
    r.take(len as u64)
        .read_to_end(&mut body)
        .map_err(|e| io_error(e, "reading"))?;
    if body.len() < len {
        return Err(malformed(format!(
            "truncated body: the header declares {len} bytes, the connection ended after {}",
            body.len()
        )));
    }
    Ok(Some(body))
}

/// A connection read under one deadline for a whole frame: a socket's own
/// read timeout bounds each `read` only, so a peer trickling a byte at a
/// time could stretch one frame without end.
pub(super) struct Deadlined<'a> {
    stream: &'a TcpStream,
    deadline: Instant,
}

impl<'a> Deadlined<'a> {
    /// Reads from `stream` until `within` from now.
    pub(super) fn new(stream: &'a TcpStream, within: Duration) -> Deadlined<'a> {
        let now = Instant::now();
        Deadlined {
            stream,
            deadline: now
                .checked_add(within)
                .unwrap_or(now + Duration::from_secs(86_400 * 365)),
        }
    }
}

impl Read for Deadlined<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ErrorKind::TimedOut.into());
        }
        self.stream.set_read_timeout(Some(left))?;
        let mut stream = self.stream;
        stream.read(buf)
    }
}

/// Fills as much of `buf` as the reader gives before its end.
fn read_up_to(r: &mut impl Read, buf: &mut [u8]) -> Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match r.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(io_error(e, "reading")),
        }
    }
    Ok(filled)
}

/// Appends the fields of a message.
#[derive(Default)]
struct Encoder(Vec<u8>);

impl Encoder {
    fn tag(tag: u8) -> Encoder {
        Encoder(vec![tag])
    }

    fn u32(mut self, x: u32) -> Self {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }

    fn u64(mut self, x: u64) -> Self {
        self.0.extend_from_slice(&x.to_be_bytes());
        self
    }

    /// A length-prefixed byte string. Lengths past `u32` cannot occur:
    /// callers check keys and values against the limits first, and an
    /// oversized body is refused by `write_frame`.
    fn bytes(mut self, b: &[u8]) -> Self {
        let len = u32::try_from(b.len()).unwrap_or(u32::MAX);
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0.extend_from_slice(b);
        self
    }
}

/// Reads the fields of a message, checking every length.
struct Decoder<'a> {
    rest: &'a [u8],
}

impl<'a> Decoder<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        if self.rest.len() < n {
            return Err(malformed(format!(
                "{what} needs {n} bytes, only {} are left",
                self.rest.len()
            )));
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }

    fn u8(&mut self, what: &str) -> Result<u8> {
        Ok(self.take(1, what)?[0])
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        let b = self.take(4, what)?;
        Ok(u32::from_be_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        let mut b = [0u8; 8];
        b.copy_from_slice(self.take(8, what)?);
        Ok(u64::from_be_bytes(b))
    }

    fn bytes(&mut self, max: usize, what: &str) -> Result<&'a [u8]> {
        let len = self.u32(what)? as usize;
        if len > max {
            return Err(malformed(format!(
                "{what} of {len} bytes exceeds the limit of {max}"
            )));
        }
        self.take(len, what)
    }

    fn string(&mut self, max: usize, what: &str) -> Result<String> {
        let b = self.bytes(max, what)?;
        String::from_utf8(b.to_vec()).map_err(|_| malformed(format!("{what} is not UTF-8")))
    }

    fn finish<T>(self, message: T) -> Result<T> {
        match self.rest.len() {
            0 => Ok(message),
            n => Err(malformed(format!("{n} bytes follow the message"))),
        }
    }
}

impl Request {
    /// The frame body of this request.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Request::Set { key, value } => Encoder::tag(SET).bytes(key.as_bytes()).bytes(value),
            Request::Get { key, timeout_ms } => {
                Encoder::tag(GET).bytes(key.as_bytes()).u64(*timeout_ms)
            }
            Request::TryGet { key } => Encoder::tag(TRY_GET).bytes(key.as_bytes()),
            Request::Register {
                process_id,
                num_processes,
                token,
            } => Encoder::tag(REGISTER)
                .u32(*process_id)
                .u32(*num_processes)
                .u64(*token),
            Request::Barrier {
                name,
                process_id,
                timeout_ms,
            } => Encoder::tag(BARRIER)
                .bytes(name.as_bytes())
                .u32(*process_id)
                .u64(*timeout_ms),
            Request::Heartbeat {
                process_id,
                token,
                timeout_ms,
            } => Encoder::tag(HEARTBEAT)
                .u32(*process_id)
                .u64(*token)
                .u64(*timeout_ms),
            Request::Leave { process_id, token } => {
                Encoder::tag(LEAVE).u32(*process_id).u64(*token)
            }
        }
        .0
    }

    /// Parses a frame body sent by an untrusted client.
    pub fn decode(body: &[u8]) -> Result<Request> {
        let mut d = Decoder { rest: body };
        let request = match d.u8("the request tag")? {
            SET => Request::Set {
                key: d.string(MAX_KEY_BYTES, "the key")?,
                value: d.bytes(MAX_VALUE_BYTES, "the value")?.to_vec(),
            },
            GET => Request::Get {
                key: d.string(MAX_KEY_BYTES, "the key")?,
                timeout_ms: d.u64("the timeout")?,
            },
            TRY_GET => Request::TryGet {
                key: d.string(MAX_KEY_BYTES, "the key")?,
            },
            REGISTER => Request::Register {
                process_id: d.u32("the process id")?,
                num_processes: d.u32("the process count")?,
                token: d.u64("the token")?,
            },
            BARRIER => Request::Barrier {
                name: d.string(MAX_KEY_BYTES, "the barrier name")?,
                process_id: d.u32("the process id")?,
                timeout_ms: d.u64("the timeout")?,
            },
            HEARTBEAT => Request::Heartbeat {
                process_id: d.u32("the process id")?,
                token: d.u64("the token")?,
                timeout_ms: d.u64("the timeout")?,
            },
            LEAVE => Request::Leave {
                process_id: d.u32("the process id")?,
                token: d.u64("the token")?,
            },
            tag => return Err(malformed(format!("unknown request tag {tag:#04x}"))),
        };
        d.finish(request)
    }
}

impl Reply {
    /// The frame body of this reply. A failure's message is cut to
    /// `MAX_MESSAGE_BYTES` (at a character boundary).
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Reply::Done => Encoder::tag(DONE),
            Reply::Value(v) => Encoder::tag(VALUE).bytes(v),
            Reply::NotFound => Encoder::tag(NOT_FOUND),
            Reply::Failed { code, message } => Encoder::tag(FAILED)
                .u32(code.raw())
                .bytes(truncate(message, MAX_MESSAGE_BYTES).as_bytes()),
        }
        .0
    }

    /// Parses a frame body sent by the (untrusted) service.
    pub fn decode(body: &[u8]) -> Result<Reply> {
        let mut d = Decoder { rest: body };
        let reply = match d.u8("the reply tag")? {
            DONE => Reply::Done,
            VALUE => Reply::Value(d.bytes(MAX_VALUE_BYTES, "the value")?.to_vec()),
            NOT_FOUND => Reply::NotFound,
            FAILED => Reply::Failed {
                code: ErrorCode::from_raw(d.u32("the status code")?),
                message: d.string(MAX_MESSAGE_BYTES, "the message")?,
            },
            tag => return Err(malformed(format!("unknown reply tag {tag:#04x}"))),
        };
        d.finish(reply)
    }
}

/// The longest prefix of `s` of at most `max` bytes that ends at a
/// character boundary.
fn truncate(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn requests() -> Vec<Request> {
        vec![
            Request::Set {
                key: "k/é".into(),
                value: vec![0, 1, 255],
            },
            Request::Set {
                key: String::new(),
                value: Vec::new(),
            },
            Request::Get {
                key: "a".into(),
                timeout_ms: u64::MAX,
            },
            Request::TryGet { key: "b".into() },
            Request::Register {
                process_id: 3,
                num_processes: 4,
                token: 0xdead_beef_0123_4567,
            },
            Request::Barrier {
                name: "step".into(),
                process_id: 1,
                timeout_ms: 5,
            },
            Request::Heartbeat {
                process_id: 2,
                token: 9,
                timeout_ms: 10_000,
            },
            Request::Leave {
                process_id: 0,
                token: u64::MAX,
            },
        ]
    }

    fn replies() -> Vec<Reply> {
        vec![
            Reply::Done,
            Reply::Value(vec![7; 100]),
            Reply::NotFound,
            Reply::Failed {
                code: ErrorCode::AlreadyExists,
                message: "process id 1 has already joined".into(),
            },
        ]
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        write_frame(&mut out, body).unwrap();
        out
    }

    fn read(bytes: &[u8]) -> Result<Option<Vec<u8>>> {
        read_frame(&mut std::io::Cursor::new(bytes))
    }

    fn message(r: Result<impl std::fmt::Debug>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn every_message_round_trips_through_a_frame() {
        for request in requests() {
            let body = read(&framed(&request.encode())).unwrap().unwrap();
            assert_eq!(Request::decode(&body).unwrap(), request);
        }
        for reply in replies() {
            let body = read(&framed(&reply.encode())).unwrap().unwrap();
            assert_eq!(Reply::decode(&body).unwrap(), reply);
        }
    }

    #[test]
    fn a_closed_connection_before_a_frame_is_none_not_an_error() {
        assert_eq!(read(&[]).unwrap(), None);
    }

    #[test]
    fn truncated_frames_are_errors() {
        let whole = framed(&requests()[0].encode());
        for cut in 1..whole.len() {
            let e = message(read(&whole[..cut]));
            assert!(e.contains("truncated"), "cut at {cut}: {e}");
        }
    }

    #[test]
    fn garbage_and_oversized_lengths_are_refused_before_reading_a_body() {
        let e = message(read(b"GET / HTTP/1.1\r\n\r\n"));
        assert!(
            e.starts_with(
                "InvalidArgumentError: malformed coordination frame: not a coordination frame"
            ),
            "{e}"
        );
        let mut huge = MAGIC.to_vec();
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        let e = message(read(&huge));
        assert!(e.contains("4294967295 bytes exceeds the limit"), "{e}");
        assert!(write_frame(&mut Vec::new(), &vec![0; MAX_BODY_BYTES + 1]).is_err());
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![], "the request tag needs 1 bytes"),
            (vec![0x42], "unknown request tag 0x42"),
            (vec![DONE], "unknown request tag 0x81"),
            (
                vec![TRY_GET, 0, 0, 0, 2, 0xff, 0xfe],
                "the key is not UTF-8",
            ),
            (vec![TRY_GET, 0, 0, 0, 9, b'a'], "the key needs 9 bytes"),
            (
                vec![TRY_GET, 0xff, 0xff, 0xff, 0xff],
                "exceeds the limit of 4096",
            ),
            (
                vec![TRY_GET, 0, 0, 0, 1, b'a', 0],
                "1 bytes follow the message",
            ),
            (
                vec![REGISTER, 0, 0, 0, 1],
                "the process count needs 4 bytes",
            ),
        ];
        for (body, expected) in cases {
            let e = message(Request::decode(&body));
            assert!(e.contains(expected), "{body:?}: {e}");
        }
        let e = message(Reply::decode(&[SET]));
        assert!(e.contains("unknown reply tag 0x01"), "{e}");
    }

    #[test]
    fn any_bytes_decode_to_a_message_or_an_error() {
        // A cheap exhaustive-ish sweep: every prefix and every single-byte
        // change of each valid body.
        for body in requests().iter().map(Request::encode) {
            for i in 0..body.len() {
                let _ = Request::decode(&body[..i]);
                for b in [0u8, 1, 0x7f, 0x80, 0xff] {
                    let mut changed = body.clone();
                    changed[i] = b;
                    let _ = Request::decode(&changed);
                }
            }
        }
    }

    #[test]
    fn long_failure_messages_are_cut_at_a_character_boundary() {
        let reply = Reply::Failed {
            code: ErrorCode::Internal,
            message: "é".repeat(MAX_MESSAGE_BYTES),
        };
        match Reply::decode(&reply.encode()).unwrap() {
            Reply::Failed { message, .. } => assert_eq!(message.len(), MAX_MESSAGE_BYTES),
            other => panic!("{other:?}"),
        }
    }
}
