//! The one error type of the crate.
//!
//! Variants mirror the TensorFlow error classes users already know (the
//! Display text starts with the class name, `InvalidArgumentError: ...`), so
//! a message read in a log says both what went wrong and which kind of
//! mistake it is. Structured fields (op, shapes, argument) are kept so tests
//! and callers can match on them rather than on text.

use std::fmt;
use std::path::{Path, PathBuf};

/// Result alias used throughout xlafn.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Status codes reported by PJRT (absl status codes).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorCode {
    /// absl `kCancelled` (1): the operation was cancelled, typically by the caller.
    Cancelled,
    /// absl `kUnknown` (2): an error with no better code, and any code this crate does not know.
    Unknown,
    /// absl `kInvalidArgument` (3): the caller passed a bad argument (a malformed program, mismatched buffer types).
    InvalidArgument,
    /// absl `kDeadlineExceeded` (4): the operation did not finish before its deadline.
    DeadlineExceeded,
    /// absl `kNotFound` (5): a requested entity (a file, a device, an executable) does not exist.
    NotFound,
    /// absl `kAlreadyExists` (6): the entity being created already exists.
    AlreadyExists,
    /// absl `kPermissionDenied` (7): the caller may not perform the operation.
    PermissionDenied,
    /// absl `kResourceExhausted` (8): out of a resource; on a device, usually out of memory.
    ResourceExhausted,
    /// absl `kFailedPrecondition` (9): the system is not in the state the operation needs.
    FailedPrecondition,
    /// absl `kAborted` (10): the operation was aborted, e.g. by a concurrency conflict.
    Aborted,
    /// absl `kOutOfRange` (11): an index or offset lies past the valid range.
    OutOfRange,
    /// absl `kUnimplemented` (12): the plugin does not implement or support the operation.
    Unimplemented,
    /// absl `kInternal` (13): an invariant inside the plugin or XLA broke: a bug there.
    Internal,
    /// absl `kUnavailable` (14): the service or device is temporarily unavailable; retrying may help.
    Unavailable,
    /// absl `kDataLoss` (15): unrecoverable data loss or corruption.
    DataLoss,
    /// absl `kUnauthenticated` (16): the request lacks valid authentication credentials.
    Unauthenticated,
}

impl ErrorCode {
    /// Maps the numeric absl code; anything unknown becomes `Unknown`.
    pub fn from_raw(code: u32) -> Self {
        use ErrorCode::*;
        match code {
            1 => Cancelled,
            3 => InvalidArgument,
            4 => DeadlineExceeded,
            5 => NotFound,
            6 => AlreadyExists,
            7 => PermissionDenied,
            8 => ResourceExhausted,
            9 => FailedPrecondition,
            10 => Aborted,
            11 => OutOfRange,
            12 => Unimplemented,
            13 => Internal,
            14 => Unavailable,
            15 => DataLoss,
            16 => Unauthenticated,
            _ => Unknown,
        }
    }

    /// The numeric absl code (the inverse of `from_raw`), for handing a
    /// status back to a plugin or over the wire.
    pub fn raw(self) -> u32 {
        use ErrorCode::*;
        match self {
            Cancelled => 1,
            Unknown => 2,
            InvalidArgument => 3,
            DeadlineExceeded => 4,
            NotFound => 5,
            AlreadyExists => 6,
            PermissionDenied => 7,
            ResourceExhausted => 8,
            FailedPrecondition => 9,
            Aborted => 10,
            OutOfRange => 11,
            Unimplemented => 12,
            Internal => 13,
            Unavailable => 14,
            DataLoss => 15,
            Unauthenticated => 16,
        }
    }

    /// The code TensorFlow gives an I/O failure of this kind (its `errno`
    /// mapping: a missing file is `NotFound`, a full disk
    /// `ResourceExhausted`, a read-only file system `PermissionDenied`).
    pub fn from_io_kind(kind: std::io::ErrorKind) -> Self {
        use std::io::ErrorKind as K;
        match kind {
            K::NotFound => ErrorCode::NotFound,
            K::PermissionDenied | K::ReadOnlyFilesystem => ErrorCode::PermissionDenied,
            K::AlreadyExists => ErrorCode::AlreadyExists,
            K::InvalidInput | K::InvalidData | K::InvalidFilename => ErrorCode::InvalidArgument,
            K::IsADirectory | K::NotADirectory | K::DirectoryNotEmpty => {
                ErrorCode::FailedPrecondition
            }
            K::StorageFull | K::QuotaExceeded | K::OutOfMemory => ErrorCode::ResourceExhausted,
            K::FileTooLarge | K::UnexpectedEof => ErrorCode::OutOfRange,
            K::TimedOut => ErrorCode::DeadlineExceeded,
            K::Interrupted | K::WouldBlock => ErrorCode::Unavailable,
            K::Unsupported => ErrorCode::Unimplemented,
            _ => ErrorCode::Unknown,
        }
    }

    /// TensorFlow's name for errors of this code (`DeadlineExceededError`,
    /// `AlreadyExistsError`, ...), which starts their messages.
    pub fn error_class(self) -> &'static str {
        use ErrorCode::*;
        match self {
            Cancelled => "CancelledError",
            Unknown => "UnknownError",
            InvalidArgument => "InvalidArgumentError",
            DeadlineExceeded => "DeadlineExceededError",
            NotFound => "NotFoundError",
            AlreadyExists => "AlreadyExistsError",
            PermissionDenied => "PermissionDeniedError",
            ResourceExhausted => "ResourceExhaustedError",
            FailedPrecondition => "FailedPreconditionError",
            Aborted => "AbortedError",
            OutOfRange => "OutOfRangeError",
            Unimplemented => "UnimplementedError",
            Internal => "InternalError",
            Unavailable => "UnavailableError",
            DataLoss => "DataLossError",
            Unauthenticated => "UnauthenticatedError",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// Every failure xlafn reports. `Clone`, so that one failure can reach
/// every caller waiting on the same work (a trace, a compile).
///
/// `#[non_exhaustive]`: new kinds of failure get their own variant (as
/// file errors did), which must not break a caller's `match`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An op was given operands it cannot accept (shapes, dtypes, attributes).
    /// Raised when the op is added, eagerly or while tracing, never by XLA.
    #[error("InvalidArgumentError: {op}: {message}")]
    InvalidArgument {
        /// The op (or API function) that rejected its operands.
        op: String,
        /// What was wrong with them.
        message: String,
    },

    /// Arguments do not match a signature (TensorFlow's TypeError).
    #[error("TypeError: {0}")]
    Type(String),

    /// A value is unacceptable for reasons other than its type (ValueError).
    #[error("ValueError: {0}")]
    Value(String),

    /// The program is fine but the state it needs is not (FailedPreconditionError).
    #[error("FailedPreconditionError: {0}")]
    FailedPrecondition(String),

    /// A dtype XLA cannot compile (strings) or an operation does not support.
    #[error("InvalidArgumentError: dtype {dtype} is not supported: {reason}")]
    UnsupportedDType {
        /// The dtype's display name (`string`, `c64`, ...).
        dtype: String,
        /// Why it cannot be used here.
        reason: String,
    },

    /// A symbolic tensor was used outside the trace that made it (leaked
    /// from a function body).
    #[error("OutOfScopeError: {0}")]
    OutOfScope(String),

    /// A function re-entered its own trace with the same input type, which
    /// would never finish tracing (Python's RecursionError).
    #[error("RecursionError: {0}")]
    Recursion(String),

    /// The PJRT plugin reported an error; `call` names the C API function.
    #[error("XLA {code} error in {call}: {message}")]
    Xla {
        /// The PJRT C API function that failed (`PJRT_Client_Compile`, ...).
        call: &'static str,
        /// The absl status code the plugin returned.
        code: ErrorCode,
        /// The plugin's own message.
        message: String,
    },

    /// The plugin could not be found or loaded.
    #[error("PJRT plugin error: {0}")]
    Plugin(String),

    /// Multi-process coordination failed: the coordination service or a
    /// peer process (a timeout, a duplicate process id, a malformed frame),
    /// or a plugin that cannot run across processes. The code picks the
    /// TensorFlow class the message starts with (`DeadlineExceededError:`),
    /// and lets a key-value callback hand the same status to a plugin.
    #[error("{}: {message}", code.error_class())]
    Distributed {
        /// The status class of the failure.
        code: ErrorCode,
        /// What went wrong, naming the key, barrier or process involved.
        message: String,
    },

    /// Reading or writing a file failed. The `io::Error` stays the
    /// [`source`](std::error::Error::source), so a caller can match its
    /// `kind()` (retry on `Interrupted`, create on `NotFound`) instead of
    /// parsing text; the message starts with the TensorFlow class of that
    /// kind (`NotFoundError:`, `PermissionDeniedError:`), as TensorFlow's
    /// file errors do. The operating system's text is not repeated in
    /// the message: an error chain (`anyhow`, `eyre`, the `xlafn` tool,
    /// [`Error::with_sources`]) prints it after the message, and would
    /// print it twice. What xlafn itself says about the file (a corrupt
    /// record's offset, why it writes only new files) is the `detail`,
    /// which ends the message.
    #[error(
        "{}: {doing} {}{}",
        ErrorCode::from_io_kind(source.kind()).error_class(),
        path.display(),
        detail.as_deref().map(|d| format!(": {d}")).unwrap_or_default()
    )]
    Io {
        /// What xlafn was doing with the file (`cannot read`, `cannot write`).
        doing: String,
        /// The file (or folder) involved.
        path: PathBuf,
        /// What xlafn found wrong with it, beyond the kind of failure.
        detail: Option<String>,
        /// The operating system's error (or, for a failure xlafn found,
        /// one of its kind).
        #[source]
        source: std::io::Error,
    },
}

/// The one way the infallible constructors (`Tensor::ones`,
/// `Variable::new`) panic: with the error's message, which says what to
/// fix, located at the caller's line. They are `#[track_caller]` too, so
/// the panic names the user's line rather than one inside xlafn (a closure
/// passed to `unwrap_or_else` would lose it).
pub(crate) trait OrPanic<T> {
    /// The value, or a panic with the error's message.
    fn or_panic(self) -> T;
}

impl<T> OrPanic<T> for Result<T> {
    #[track_caller]
    fn or_panic(self) -> T {
        match self {
            Ok(t) => t,
            Err(e) => panic!("{e}"),
        }
    }
}

/// A copy of an `io::Error` (which is not `Clone`) with the same kind and
/// message, and the same OS error code when it has one.
fn clone_io(e: &std::io::Error) -> std::io::Error {
    match e.raw_os_error() {
        Some(code) => std::io::Error::from_raw_os_error(code),
        None => std::io::Error::new(e.kind(), e.to_string()),
    }
}

/// By hand because `io::Error` is not `Clone`: every other variant is
/// copied field by field, an `Io` failure by `clone_io`.
impl Clone for Error {
    fn clone(&self) -> Self {
        use Error::*;
        match self {
            InvalidArgument { op, message } => InvalidArgument {
                op: op.clone(),
                message: message.clone(),
            },
            Type(m) => Type(m.clone()),
            Value(m) => Value(m.clone()),
            FailedPrecondition(m) => FailedPrecondition(m.clone()),
            UnsupportedDType { dtype, reason } => UnsupportedDType {
                dtype: dtype.clone(),
                reason: reason.clone(),
            },
            OutOfScope(m) => OutOfScope(m.clone()),
            Recursion(m) => Recursion(m.clone()),
            Xla {
                call,
                code,
                message,
            } => Xla {
                call,
                code: *code,
                message: message.clone(),
            },
            Plugin(m) => Plugin(m.clone()),
            Distributed { code, message } => Distributed {
                code: *code,
                message: message.clone(),
            },
            Io {
                doing,
                path,
                detail,
                source,
            } => Io {
                doing: doing.clone(),
                path: path.clone(),
                detail: detail.clone(),
                source: clone_io(source),
            },
        }
    }
}

impl Error {
    /// Shorthand for the common op-level invalid-argument error.
    pub fn invalid(op: impl Into<String>, message: impl Into<String>) -> Self {
        Error::InvalidArgument {
            op: op.into(),
            message: message.into(),
        }
    }

    /// The error for an I/O failure `doing` something (`cannot read`) with
    /// `path`, keeping `source` for callers to match.
    ///
    /// An `io::Error` xlafn made with a message of its own (`io::Error::new`)
    /// gives that message as the `detail`, and leaves a source of its kind
    /// alone, so that the message says it once.
    pub fn io(doing: impl Into<String>, path: &Path, source: std::io::Error) -> Self {
        let (detail, source) = match source.get_ref() {
            Some(inner) => (Some(inner.to_string()), std::io::Error::from(source.kind())),
            None => (None, source),
        };
        Error::Io {
            doing: doing.into(),
            path: path.to_path_buf(),
            detail,
            source,
        }
    }

    /// The kind of the I/O failure behind an [`Error::Io`], to match on
    /// (`NotFound`, `AlreadyExists`, ...); `None` for every other error.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            Error::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }

    /// The message followed by the messages of its sources, `: `-joined,
    /// as an error chain prints it: for showing an error to a person.
    pub fn with_sources(&self) -> String {
        let mut text = self.to_string();
        let mut source = std::error::Error::source(self);
        while let Some(s) = source {
            text.push_str(": ");
            text.push_str(&s.to_string());
            source = s.source();
        }
        text
    }

    /// The same error with `context` (what was being done) put before its
    /// message, its class kept. Wrapping an error's text into a new
    /// `Error::Value` instead would print the class twice
    /// (`ValueError: ...: ValueError: ...`) and lose the original class.
    pub(crate) fn context(self, context: &str) -> Error {
        use Error::*;
        let before = |m: String| format!("{context}: {m}");
        match self {
            InvalidArgument { op, message } => InvalidArgument {
                op: before(op),
                message,
            },
            Type(m) => Type(before(m)),
            Value(m) => Value(before(m)),
            FailedPrecondition(m) => FailedPrecondition(before(m)),
            UnsupportedDType { dtype, reason } => UnsupportedDType {
                dtype,
                reason: before(reason),
            },
            OutOfScope(m) => OutOfScope(before(m)),
            Recursion(m) => Recursion(before(m)),
            Xla {
                call,
                code,
                message,
            } => Xla {
                call,
                code,
                message: before(message),
            },
            Plugin(m) => Plugin(before(m)),
            Distributed { code, message } => Distributed {
                code,
                message: before(message),
            },
            Io {
                doing,
                path,
                detail,
                source,
            } => Io {
                doing: before(doing),
                path,
                detail,
                source,
            },
        }
    }

    /// Shorthand for a multi-process coordination error with `code`.
    pub fn distributed(code: ErrorCode, message: impl Into<String>) -> Self {
        Error::Distributed {
            code,
            message: message.into(),
        }
    }
}
