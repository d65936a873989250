//! Layer: distributed (imports only `error`). The wire format of the
//! coordination service: length-prefixed frames, one request or reply
//! each, whose bodies are protocol buffers.
//!
//! A frame is the magic `xkv1`, a big-endian `u32` body length, then the
//! body: one `Request` or `Reply` message (the messages below, derived
//! with prost; each kind is a `oneof` case). Protocol buffers carry no
//! framing of their own, hence the header; the magic turns a stray client
//! (an HTTP probe, a port scanner) into a clear "not a coordination frame"
//! instead of a length read from its text.
//!
//! Both ends treat the other as untrusted input: a declared length is
//! checked against the limits below before a byte of the body is read, the
//! body is read as it arrives (a length the peer never sends allocates
//! nothing), prost bounds every field by the body it came in, and keys,
//! values and messages are checked against their limits after decoding.
//! Every failure is an error for the caller, never a panic.

use crate::error::{Error, ErrorCode, Result};
use prost::Message as _;
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
/// The most known-dead processes an `AwaitDeath` may list (a run has at
/// most `u32::MAX` processes, but a frame holds at most this many ids).
pub const MAX_KNOWN_DEAD: usize = 64 << 10;
/// The largest frame body: a value with its key and the fixed fields.
pub const MAX_BODY_BYTES: usize = MAX_VALUE_BYTES + MAX_KEY_BYTES + 64;

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
    /// Wait up to `timeout_ms` until a process not in `known` is dead:
    /// `Dead` names it, `NotFound` says none died in time.
    AwaitDeath {
        /// The dead processes the asker already knows of.
        known: Vec<u32>,
        /// How long the service waits, in milliseconds.
        timeout_ms: u64,
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
    /// `AwaitDeath`: process `process_id` is dead.
    Dead {
        /// The dead process.
        process_id: u32,
        /// Why the service takes it for dead.
        why: String,
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

/// The messages on the wire (the structure of a `.proto` file, derived
/// with prost; field numbers are the protocol, names are not).
mod wire {
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Request {
        #[prost(oneof = "Kind", tags = "1, 2, 3, 4, 5, 6, 7, 8")]
        pub kind: Option<Kind>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Kind {
        #[prost(message, tag = "1")]
        Set(Set),
        #[prost(message, tag = "2")]
        Get(Get),
        #[prost(message, tag = "3")]
        TryGet(TryGet),
        #[prost(message, tag = "4")]
        Register(Register),
        #[prost(message, tag = "5")]
        Barrier(Barrier),
        #[prost(message, tag = "6")]
        Heartbeat(Heartbeat),
        #[prost(message, tag = "7")]
        Leave(Leave),
        #[prost(message, tag = "8")]
        AwaitDeath(AwaitDeath),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct AwaitDeath {
        #[prost(uint32, repeated, tag = "1")]
        pub known: Vec<u32>,
        #[prost(uint64, tag = "2")]
        pub timeout_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Set {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(bytes = "vec", tag = "2")]
        pub value: Vec<u8>,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Get {
        #[prost(string, tag = "1")]
        pub key: String,
        #[prost(uint64, tag = "2")]
        pub timeout_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct TryGet {
        #[prost(string, tag = "1")]
        pub key: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Register {
        #[prost(uint32, tag = "1")]
        pub process_id: u32,
        #[prost(uint32, tag = "2")]
        pub num_processes: u32,
        #[prost(fixed64, tag = "3")]
        pub token: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Barrier {
        #[prost(string, tag = "1")]
        pub name: String,
        #[prost(uint32, tag = "2")]
        pub process_id: u32,
        #[prost(uint64, tag = "3")]
        pub timeout_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Heartbeat {
        #[prost(uint32, tag = "1")]
        pub process_id: u32,
        #[prost(fixed64, tag = "2")]
        pub token: u64,
        #[prost(uint64, tag = "3")]
        pub timeout_ms: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Leave {
        #[prost(uint32, tag = "1")]
        pub process_id: u32,
        #[prost(fixed64, tag = "2")]
        pub token: u64,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Reply {
        #[prost(oneof = "Answer", tags = "1, 2, 3, 4, 5")]
        pub answer: Option<Answer>,
    }

    #[derive(Clone, PartialEq, prost::Oneof)]
    pub enum Answer {
        #[prost(message, tag = "1")]
        Done(Empty),
        #[prost(bytes = "vec", tag = "2")]
        Value(Vec<u8>),
        #[prost(message, tag = "3")]
        NotFound(Empty),
        #[prost(message, tag = "4")]
        Failed(Failed),
        #[prost(message, tag = "5")]
        Dead(Dead),
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Dead {
        #[prost(uint32, tag = "1")]
        pub process_id: u32,
        #[prost(string, tag = "2")]
        pub why: String,
    }

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Empty {}

    #[derive(Clone, PartialEq, prost::Message)]
    pub struct Failed {
        #[prost(uint32, tag = "1")]
        pub code: u32,
        #[prost(string, tag = "2")]
        pub message: String,
    }
}

/// `text` if it is at most `max` bytes, else an error naming `what`.
fn bounded<T: AsRef<[u8]>>(text: T, max: usize, what: &str) -> Result<T> {
    match text.as_ref().len() {
        n if n > max => Err(malformed(format!(
            "{what} of {n} bytes exceeds the limit of {max}"
        ))),
        _ => Ok(text),
    }
}

fn key(k: String) -> Result<String> {
    bounded(k, MAX_KEY_BYTES, "the key")
}

impl Request {
    /// The frame body of this request.
    pub fn encode(&self) -> Vec<u8> {
        use wire::Kind;
        let kind = match self.clone() {
            Request::Set { key, value } => Kind::Set(wire::Set { key, value }),
            Request::Get { key, timeout_ms } => Kind::Get(wire::Get { key, timeout_ms }),
            Request::TryGet { key } => Kind::TryGet(wire::TryGet { key }),
            Request::Register {
                process_id,
                num_processes,
                token,
            } => Kind::Register(wire::Register {
                process_id,
                num_processes,
                token,
            }),
            Request::Barrier {
                name,
                process_id,
                timeout_ms,
            } => Kind::Barrier(wire::Barrier {
                name,
                process_id,
                timeout_ms,
            }),
            Request::Heartbeat {
                process_id,
                token,
                timeout_ms,
            } => Kind::Heartbeat(wire::Heartbeat {
                process_id,
                token,
                timeout_ms,
            }),
            Request::Leave { process_id, token } => Kind::Leave(wire::Leave { process_id, token }),
            Request::AwaitDeath { known, timeout_ms } => {
                Kind::AwaitDeath(wire::AwaitDeath { known, timeout_ms })
            }
        };
        wire::Request { kind: Some(kind) }.encode_to_vec()
    }

    /// Parses a frame body sent by an untrusted client.
    pub fn decode(body: &[u8]) -> Result<Request> {
        use wire::Kind;
        let message =
            wire::Request::decode(body).map_err(|e| malformed(format!("not a request: {e}")))?;
        Ok(match message.kind {
            None => return Err(malformed("the request names no kind")),
            Some(Kind::Set(m)) => Request::Set {
                key: key(m.key)?,
                value: bounded(m.value, MAX_VALUE_BYTES, "the value")?,
            },
            Some(Kind::Get(m)) => Request::Get {
                key: key(m.key)?,
                timeout_ms: m.timeout_ms,
            },
            Some(Kind::TryGet(m)) => Request::TryGet { key: key(m.key)? },
            Some(Kind::Register(m)) => Request::Register {
                process_id: m.process_id,
                num_processes: m.num_processes,
                token: m.token,
            },
            Some(Kind::Barrier(m)) => Request::Barrier {
                name: bounded(m.name, MAX_KEY_BYTES, "the barrier name")?,
                process_id: m.process_id,
                timeout_ms: m.timeout_ms,
            },
            Some(Kind::Heartbeat(m)) => Request::Heartbeat {
                process_id: m.process_id,
                token: m.token,
                timeout_ms: m.timeout_ms,
            },
            Some(Kind::Leave(m)) => Request::Leave {
                process_id: m.process_id,
                token: m.token,
            },
            Some(Kind::AwaitDeath(m)) => Request::AwaitDeath {
                known: match m.known.len() {
                    n if n > MAX_KNOWN_DEAD => {
                        return Err(malformed(format!(
                            "{n} known dead processes exceed the limit of {MAX_KNOWN_DEAD}"
                        )));
                    }
                    _ => m.known,
                },
                timeout_ms: m.timeout_ms,
            },
        })
    }
}

impl Reply {
    /// The frame body of this reply. A failure's message is cut to
    /// `MAX_MESSAGE_BYTES` (at a character boundary).
    pub fn encode(&self) -> Vec<u8> {
        use wire::Answer;
        let answer = match self {
            Reply::Done => Answer::Done(wire::Empty {}),
            Reply::Value(v) => Answer::Value(v.clone()),
            Reply::NotFound => Answer::NotFound(wire::Empty {}),
            Reply::Failed { code, message } => Answer::Failed(wire::Failed {
                code: code.raw(),
                message: truncate(message, MAX_MESSAGE_BYTES).to_string(),
            }),
            Reply::Dead { process_id, why } => Answer::Dead(wire::Dead {
                process_id: *process_id,
                why: truncate(why, MAX_MESSAGE_BYTES).to_string(),
            }),
        };
        wire::Reply {
            answer: Some(answer),
        }
        .encode_to_vec()
    }

    /// Parses a frame body sent by the (untrusted) service.
    pub fn decode(body: &[u8]) -> Result<Reply> {
        use wire::Answer;
        let message =
            wire::Reply::decode(body).map_err(|e| malformed(format!("not a reply: {e}")))?;
        Ok(match message.answer {
            None => return Err(malformed("the reply names no kind")),
            Some(Answer::Done(_)) => Reply::Done,
            Some(Answer::Value(v)) => Reply::Value(bounded(v, MAX_VALUE_BYTES, "the value")?),
            Some(Answer::NotFound(_)) => Reply::NotFound,
            Some(Answer::Failed(f)) => Reply::Failed {
                code: ErrorCode::from_raw(f.code),
                message: bounded(f.message, MAX_MESSAGE_BYTES, "the message")?,
            },
            Some(Answer::Dead(d)) => Reply::Dead {
                process_id: d.process_id,
                why: bounded(d.why, MAX_MESSAGE_BYTES, "the reason")?,
            },
        })
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
            Request::AwaitDeath {
                known: vec![1, 3],
                timeout_ms: 500,
            },
            Request::AwaitDeath {
                known: Vec::new(),
                timeout_ms: 0,
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
            Reply::Dead {
                process_id: 2,
                why: "no heartbeat for 5s".into(),
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
    fn a_death_wait_listing_too_many_known_processes_is_malformed() {
        let request = Request::AwaitDeath {
            known: vec![7; MAX_KNOWN_DEAD + 1],
            timeout_ms: 1,
        };
        let e = message(Request::decode(&request.encode()));
        assert!(e.contains("known dead processes exceed the limit"), "{e}");
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
        let long_key = wire::Request {
            kind: Some(wire::Kind::TryGet(wire::TryGet {
                key: "k".repeat(MAX_KEY_BYTES + 1),
            })),
        }
        .encode_to_vec();
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![], "the request names no kind"),
            // Field 8, a length of 0, then a zero tag.
            (vec![0x42, 0, 0], "not a request"),
            // A TryGet whose key is 2 bytes that are not UTF-8.
            (vec![0x1a, 4, 0x0a, 2, 0xff, 0xfe], "not a request"),
            // A TryGet whose key claims 9 bytes and has 1.
            (vec![0x1a, 3, 0x0a, 9, b'a'], "not a request"),
            (long_key, "the key of 4097 bytes exceeds the limit of 4096"),
        ];
        for (body, expected) in cases {
            let e = message(Request::decode(&body));
            assert!(e.contains(expected), "{body:?}: {e}");
        }
        let e = message(Reply::decode(&[]));
        assert!(e.contains("the reply names no kind"), "{e}");
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
