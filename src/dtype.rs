//! Element types of tensors.
//!
//! Layer: foundation (no imports from other xlafn modules but `error`).
//! `DType` is shared by every layer: the IR types values with it, the
//! lowering prints its MLIR spelling, and the runtime maps it to a PJRT buffer
//! type. Display names are the crate's own short names (`f32`, `i64`,
//! `bool`, `c64`), which appear in tensor and signature printouts.
//!
//! Complex dtypes (`c64`, `c128`) follow the rule every dtype follows:
//! no implicit promotion between tensors (TensorFlow's rule), so `c64 +
//! f32` is an error and `Tensor::complex(re, im)` or a `cast` makes a
//! complex tensor from real ones; a host number given to a complex tensor's
//! op (`z.mul_scalar(2.0)`) is real.

use crate::error::{Error, Result};
use std::fmt;

/// The element type of a tensor.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DType {
    /// Booleans, one byte each (NumPy's `bool_`, TensorFlow's `tf.bool`).
    Bool,
    /// 8-bit signed integers (`int8`).
    I8,
    /// 16-bit signed integers (`int16`).
    I16,
    /// 32-bit signed integers (`int32`).
    I32,
    /// 64-bit signed integers (`int64`).
    I64,
    /// 8-bit unsigned integers (`uint8`).
    U8,
    /// 16-bit unsigned integers (`uint16`).
    U16,
    /// 32-bit unsigned integers (`uint32`).
    U32,
    /// 64-bit unsigned integers (`uint64`).
    U64,
    /// IEEE half precision, 2 bytes (`float16`; host type `half::f16`).
    F16,
    /// bfloat16, 2 bytes: f32's exponent range with a 7-bit mantissa
    /// (`bfloat16`; host type `half::bf16`).
    BF16,
    /// IEEE single precision, 4 bytes (`float32`), the default float dtype.
    F32,
    /// IEEE double precision, 8 bytes (`float64`).
    F64,
    /// Complex numbers of two f32 (real, imaginary), NumPy's `complex64`.
    C64,
    /// Complex numbers of two f64, NumPy's `complex128`.
    C128,
    /// Strings exist so that signatures can name them and reject them with
    /// a clear message: XLA cannot compile string tensors.
    String,
}

impl DType {
    /// Every dtype XLA can compute with: bool, ints, floats and complex.
    pub const NUMERIC_AND_BOOL: [DType; 15] = [
        DType::Bool,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
        DType::C64,
        DType::C128,
    ];

    /// The crate's short name, used in every printout.
    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::I8 => "i8",
            DType::I16 => "i16",
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::U8 => "u8",
            DType::U16 => "u16",
            DType::U32 => "u32",
            DType::U64 => "u64",
            DType::F16 => "f16",
            DType::BF16 => "bf16",
            DType::F32 => "f32",
            DType::F64 => "f64",
            DType::C64 => "c64",
            DType::C128 => "c128",
            DType::String => "string",
        }
    }

    /// Parses a short name (`"f32"`) or a TensorFlow name (`"float32"`).
    pub fn from_name(name: &str) -> Result<DType> {
        let d = match name {
            "bool" => DType::Bool,
            "i8" | "int8" => DType::I8,
            "i16" | "int16" => DType::I16,
            "i32" | "int32" => DType::I32,
            "i64" | "int64" => DType::I64,
            "u8" | "uint8" => DType::U8,
            "u16" | "uint16" => DType::U16,
            "u32" | "uint32" => DType::U32,
            "u64" | "uint64" => DType::U64,
            "f16" | "float16" | "half" => DType::F16,
            "bf16" | "bfloat16" => DType::BF16,
            "f32" | "float32" | "float" => DType::F32,
            "f64" | "float64" | "double" => DType::F64,
            "c64" | "complex64" => DType::C64,
            "c128" | "complex128" => DType::C128,
            "string" => DType::String,
            other => return Err(Error::Value(format!("unknown dtype name {other:?}"))),
        };
        Ok(d)
    }

    /// Bytes per element; strings have no fixed size.
    pub fn size_in_bytes(self) -> Result<usize> {
        Ok(match self {
            DType::Bool | DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 | DType::F16 | DType::BF16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 | DType::C64 => 8,
            DType::C128 => 16,
            DType::String => return Err(self.unsupported("strings have no fixed element size")),
        })
    }

    /// The least and greatest value of an integer dtype; `None` for
    /// floats, bool and strings.
    pub fn int_range(self) -> Option<(i128, i128)> {
        if !self.is_int() {
            return None;
        }
        let bits = 8 * self.size_in_bytes().ok()? as u32;
        Some(match self.is_unsigned_int() {
            true => (0, (1i128 << bits) - 1),
            false => (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1),
        })
    }

    /// Floating-point dtypes: f16, bf16, f32, f64 (not complex).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }

    /// Signed integer dtypes: i8, i16, i32, i64.
    pub fn is_signed_int(self) -> bool {
        matches!(self, DType::I8 | DType::I16 | DType::I32 | DType::I64)
    }

    /// Unsigned integer dtypes: u8, u16, u32, u64.
    pub fn is_unsigned_int(self) -> bool {
        matches!(self, DType::U8 | DType::U16 | DType::U32 | DType::U64)
    }

    /// Integer dtypes, signed or unsigned (not bool).
    pub fn is_int(self) -> bool {
        self.is_signed_int() || self.is_unsigned_int()
    }

    /// Real numbers: ints and floats (not bool, not complex, not string).
    /// Ops that take "numeric" operands take these; the few that also take
    /// complex ones (arithmetic, `exp`, `log`, ...) say so themselves.
    pub fn is_numeric(self) -> bool {
        self.is_int() || self.is_float()
    }

    /// Complex dtypes: c64 and c128.
    pub fn is_complex(self) -> bool {
        matches!(self, DType::C64 | DType::C128)
    }

    /// Floats and complex numbers: the dtypes values are differentiated
    /// in (NumPy's and JAX's "inexact").
    pub fn is_inexact(self) -> bool {
        self.is_float() || self.is_complex()
    }

    /// The complex dtype whose parts are `self` (f32 -> c64, f64 -> c128);
    /// complex dtypes map to themselves; `None` for every other dtype.
    pub fn to_complex(self) -> Option<DType> {
        match self {
            DType::F32 | DType::C64 => Some(DType::C64),
            DType::F64 | DType::C128 => Some(DType::C128),
            _ => None,
        }
    }

    /// The dtype of a complex dtype's parts (c64 -> f32, c128 -> f64);
    /// every other dtype maps to itself.
    pub fn real_part(self) -> DType {
        match self {
            DType::C64 => DType::F32,
            DType::C128 => DType::F64,
            d => d,
        }
    }

    /// Errors unless XLA can hold values of this dtype. Called wherever a
    /// dtype is about to reach a device or a program.
    pub fn check_compilable(self) -> Result<DType> {
        if self == DType::String {
            return Err(self.unsupported(
                "XLA cannot compile string tensors; encode strings as integer ids on the host",
            ));
        }
        Ok(self)
    }

    /// The error for an unsupported use of this dtype.
    pub fn unsupported(self, reason: &str) -> Error {
        Error::UnsupportedDType {
            dtype: self.name().to_string(),
            reason: reason.to_string(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fully known array type: dtype and dimensions. What the runtime checks
/// buffers against and what lowering types every StableHLO value with.
#[derive(Clone, Debug, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArraySpec {
    /// The element type.
    pub dtype: DType,
    /// The dimensions, outermost first; empty for a scalar.
    pub dims: Vec<i64>,
}

/// Written out rather than derived: the derived comparison compares the
/// dimensions as slices, through a call to `memcmp`. On a scalar call's
/// path (W1) the two comparisons, of the arguments with the last
/// executable's types and with the program's parameters, cost 5-7% of the
/// call that way, and the eager op cache's key lookup about as much.
impl PartialEq for ArraySpec {
    fn eq(&self, other: &ArraySpec) -> bool {
        self.describes(other.dtype, &other.dims)
    }
}

/// Hashes what `eq` compares, as the derived hash would.
impl std::hash::Hash for ArraySpec {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.dtype.hash(state);
        self.dims.hash(state);
    }
}

impl ArraySpec {
    /// An array type of `dtype` with dimensions `dims`.
    pub fn new(dtype: DType, dims: &[i64]) -> ArraySpec {
        ArraySpec {
            dtype,
            dims: dims.to_vec(),
        }
    }

    /// A rank-0 (scalar) array type of `dtype`.
    pub fn scalar(dtype: DType) -> ArraySpec {
        ArraySpec {
            dtype,
            dims: Vec::new(),
        }
    }

    /// Is this the type of an array of `dtype` with dimensions `dims`?
    /// Compared element by element, for the few dimensions an array has
    /// (see `PartialEq`).
    pub fn describes(&self, dtype: DType, dims: &[i64]) -> bool {
        self.dtype == dtype
            && self.dims.len() == dims.len()
            && self.dims.iter().zip(dims).all(|(a, b)| a == b)
    }

    /// The number of dimensions (0 for a scalar).
    pub fn rank(&self) -> usize {
        self.dims.len()
    }

    /// The number of elements: the product of the dimensions (1 for a
    /// scalar, 0 when any dimension is 0).
    pub fn num_elements(&self) -> i64 {
        self.dims.iter().product()
    }

    /// Errors unless XLA can hold an array of this type (see
    /// [`check_array_size`]).
    pub fn check_size(&self) -> Result<()> {
        check_array_size(self.dtype, &self.dims)
    }

    /// The bytes its elements take (saturating; 0 when a dimension is 0).
    pub fn byte_size(&self) -> u64 {
        let width = self.dtype.size_in_bytes().unwrap_or(1) as u64;
        self.dims
            .iter()
            .fold(width, |n, &d| n.saturating_mul(d.max(0) as u64))
    }

    /// The same dims with another dtype.
    pub fn with_dtype(&self, dtype: DType) -> ArraySpec {
        ArraySpec {
            dtype,
            dims: self.dims.clone(),
        }
    }
}

/// The largest array xlafn hands to XLA, in bytes: 2^62. XLA computes
/// sizes in `int64` and aborts the process (an exception thrown through the
/// C API) on a shape whose element count or byte size overflows; no machine
/// holds an array this large, so the bound costs nothing real.
pub const MAX_ARRAY_BYTES: u64 = 1 << 62;

/// Errors unless an array of `dtype` with `dims` is representable: every
/// dimension non-negative, and the product of the dimensions (a zero
/// dimension counted as 1, so `[0, 2^62]` is refused like `[2^62]`: XLA
/// multiplies the extents it is given) times the element size within
/// [`MAX_ARRAY_BYTES`]. Checked with overflow-safe arithmetic. This is the
/// one size rule: ops' result types, parameters, host arrays and loaded
/// programs all go through it before anything reaches XLA.
pub fn check_array_size(dtype: DType, dims: &[i64]) -> Result<()> {
    let width = dtype.size_in_bytes().unwrap_or(1) as u64;
    let mut bytes = width;
    for &d in dims {
        let extent = u64::try_from(d).map_err(|_| {
            Error::Value(format!(
                "dimension {d} of shape {dims:?} is negative; dimensions must be >= 0"
            ))
        })?;
        bytes = bytes.saturating_mul(extent.max(1));
    }
    if bytes > MAX_ARRAY_BYTES {
        return Err(Error::Value(format!(
            "a {dtype} array of shape {dims:?} is too large: XLA holds arrays of at most 2^62 \
             bytes (dimensions multiplied, zero counted as one)"
        )));
    }
    Ok(())
}

/// The memory a program's arrays may need, by default, when the machine's
/// physical memory cannot be read (`/proc/meminfo` on Linux).
pub const DEFAULT_PROGRAM_MEMORY_BYTES: u64 = 64 << 30;

/// How many times the memory bound the arrays of one program may add up
/// to (see [`check_program_memory`]).
pub const PROGRAM_MEMORY_FACTOR: u64 = 16;

/// The memory a program's arrays are measured against:
/// `XLAFN_PROGRAM_MEMORY_BYTES` (bytes, with an optional `K`, `M`, `G` or
/// `T` suffix, powers of 1024), else the machine's physical memory, else
/// [`DEFAULT_PROGRAM_MEMORY_BYTES`]. Read once per process; a value that
/// is not a positive size is ignored with a warning.
pub fn program_memory_bytes() -> u64 {
    static BYTES: std::sync::LazyLock<u64> = std::sync::LazyLock::new(|| {
        let default = physical_memory().unwrap_or(DEFAULT_PROGRAM_MEMORY_BYTES);
        let Some(raw) = crate::environment::PROGRAM_MEMORY_BYTES.get() else {
            return default;
        };
        match parse_byte_size(&raw) {
            Some(n) if n > 0 => n,
            _ => {
                tracing::warn!(
                    "XLAFN_PROGRAM_MEMORY_BYTES={raw:?} is not a positive size (bytes, optionally \
                     with a K, M, G or T suffix); keeping {default} bytes"
                );
                default
            }
        }
    });
    *BYTES
}

/// The machine's physical memory (`MemTotal`), where it can be read.
fn physical_memory() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line
        .trim_start_matches("MemTotal:")
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    kib.checked_mul(1024)
}

/// Errors unless a program's arrays can fit in memory: its largest array
/// (`largest` bytes) within [`program_memory_bytes`] M, and all its arrays
/// together (`total` bytes: every parameter and every op's result, each
/// region's body counted once) within [`PROGRAM_MEMORY_FACTOR`] times M.
///
/// Why: [`check_array_size`] bounds each array by what XLA can index, far
/// beyond any machine, and a program can stay under it while needing more
/// memory than exists: 38 chained `concat(v, v)` compiled, then aborted
/// the process inside XLA when an allocation failed (a C++ exception Rust
/// cannot catch). An array larger than the memory can never be allocated.
/// The total counts every array as if XLA fused and freed nothing; buffer
/// reuse and fusion make the real peak a fraction of it, hence the factor,
/// which keeps ordinary programs far from the bound while a program whose
/// arrays grow without end meets it. This is the one memory rule: every
/// lowered program (traced functions, eager ops, programs specialized from
/// a loaded export's graph) is checked by `lower` before it reaches XLA,
/// and an export's listed programs by `lower::program_check`.
pub fn check_program_memory(largest: u64, total: u64) -> Result<()> {
    let memory = program_memory_bytes();
    let limit = memory.saturating_mul(PROGRAM_MEMORY_FACTOR);
    if largest > memory {
        return Err(Error::Value(format!(
            "the program needs an array of {largest} bytes ({}), more than the {memory} bytes \
             ({}) of memory a program may use (XLAFN_PROGRAM_MEMORY_BYTES, by default this \
             machine's physical memory)",
            human_bytes(largest),
            human_bytes(memory)
        )));
    }
    if total > limit {
        return Err(Error::Value(format!(
            "the program's arrays need {total} bytes ({}) together, more than \
             {PROGRAM_MEMORY_FACTOR} times the {memory} bytes ({}) of memory a program may use \
             (XLAFN_PROGRAM_MEMORY_BYTES, by default this machine's physical memory)",
            human_bytes(total),
            human_bytes(memory)
        )));
    }
    Ok(())
}

/// `bytes` in the largest binary unit that keeps it at least 1 (`1.5 GiB`).
fn human_bytes(bytes: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    let mut value = bytes as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < units.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", units[unit])
}

/// A size in bytes with an optional `K`, `M`, `G` or `T` suffix (powers of
/// 1024), as the `XLAFN_*_BYTES` variables take; `None` unless it is one.
pub(crate) fn parse_byte_size(raw: &str) -> Option<u64> {
    let raw = raw.trim();
    let (digits, shift) = match raw.char_indices().last()? {
        (i, 'K' | 'k') => (&raw[..i], 10),
        (i, 'M' | 'm') => (&raw[..i], 20),
        (i, 'G' | 'g') => (&raw[..i], 30),
        (i, 'T' | 't') => (&raw[..i], 40),
        _ => (raw, 0),
    };
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

impl fmt::Display for ArraySpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let dims: Vec<String> = self.dims.iter().map(|d| d.to_string()).collect();
        write!(f, "{}[{}]", self.dtype, dims.join(","))
    }
}

/// Makes every byte of a `bool` array's `bytes` 0 or 1 (nonzero is true):
/// XLA's booleans are 0 or 1, a file may hold any byte, and XLA computes
/// with the byte as it is (`logical_not` of a stored 2 would be true). Other
/// dtypes are left alone. Every reader of files with booleans calls this
/// (checkpoints, safetensors and `.npy`/`.npz` decoding).
pub(crate) fn normalize_bools(dtype: DType, bytes: &mut [u8]) {
    if dtype == DType::Bool {
        for b in bytes {
            *b = u8::from(*b != 0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_array_spec_describes_its_own_dtype_and_dims_only() {
        let s = ArraySpec::new(DType::F32, &[2, 3]);
        assert!(s.describes(DType::F32, &[2, 3]));
        assert!(!s.describes(DType::F64, &[2, 3]));
        assert!(!s.describes(DType::F32, &[3, 2]));
        assert!(!s.describes(DType::F32, &[2, 3, 1]));
        assert!(!s.describes(DType::F32, &[2]));
        assert!(ArraySpec::scalar(DType::I32).describes(DType::I32, &[]));
        assert!(!ArraySpec::scalar(DType::I32).describes(DType::I32, &[1]));
    }

    #[test]
    fn byte_sizes_take_suffixes_and_refuse_overflow() {
        assert_eq!(parse_byte_size("4096"), Some(4096));
        assert_eq!(parse_byte_size(" 3m "), Some(3 << 20));
        assert_eq!(parse_byte_size("2T"), Some(2 << 40));
        assert_eq!(parse_byte_size("-1"), None);
        assert_eq!(parse_byte_size("99999999999T"), None);
    }

    #[test]
    fn program_memory_bounds_the_largest_array_and_the_sum() {
        let m = program_memory_bytes();
        assert!(m > 0);
        assert!(check_program_memory(m, m * PROGRAM_MEMORY_FACTOR).is_ok());
        let one = check_program_memory(m + 1, m + 1).unwrap_err().to_string();
        assert!(one.contains("needs an array of"), "{one}");
        let sum = check_program_memory(1, m * PROGRAM_MEMORY_FACTOR + 1)
            .unwrap_err()
            .to_string();
        assert!(sum.contains("together, more than 16 times"), "{sum}");
    }
}
