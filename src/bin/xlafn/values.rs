//! Layer: the `xlafn` tool (element values). One scalar type between host
//! bytes and text: `--input-expr` literals are encoded into an array's
//! bytes here, and outputs are decoded from bytes here for printing, so
//! the tool's input and output agree on every dtype. Imports xlafn's
//! `DType` and `HostArray`, `half` for f16/bf16 and `serde_json` for the
//! `--json` form.

use xlafn::half::{bf16, f16};
use xlafn::runtime::HostArray;
use xlafn::{DType, Error, Result};

/// A value as text gives it or an element holds it. Integers are `i128`
/// so that every `i64` and `u64` fits exactly.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scalar {
    Bool(bool),
    Int(i128),
    Float(f64),
    Complex(f64, f64),
}

impl std::fmt::Display for Scalar {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scalar::Bool(b) => write!(f, "{}", if *b { "True" } else { "False" }),
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) => write!(f, "{x}"),
            Scalar::Complex(re, im) => write!(f, "{re}{im:+}j"),
        }
    }
}

fn refuse(value: Scalar, dtype: DType, why: &str) -> Error {
    Error::Value(format!("{value} cannot be {dtype}: {why}"))
}

/// `value` as an integer of `dtype`, refusing fractions and values out of
/// range rather than wrapping or truncating them.
fn integer(value: Scalar, dtype: DType) -> Result<i128> {
    let i = match value {
        Scalar::Bool(b) => b as i128,
        Scalar::Int(i) => i,
        Scalar::Float(x) if x.fract() == 0.0 && x.abs() < 2f64.powi(100) => x as i128,
        _ => return Err(refuse(value, dtype, "not an integer")),
    };
    let (lo, hi) = dtype.int_range().unwrap_or((0, 1));
    if i < lo || i > hi {
        return Err(refuse(value, dtype, &format!("outside {lo}..={hi}")));
    }
    Ok(i)
}

/// `value` as a real number (bools as 0 and 1, like NumPy).
fn real(value: Scalar, dtype: DType) -> Result<f64> {
    match value {
        Scalar::Bool(b) => Ok(b as u8 as f64),
        Scalar::Int(i) => Ok(i as f64),
        Scalar::Float(x) => Ok(x),
        Scalar::Complex(..) => Err(refuse(value, dtype, "it is complex")),
    }
}

/// Appends `value` as one element of `dtype` (native byte order, as
/// `HostArray` holds it).
pub fn push(value: Scalar, dtype: DType, out: &mut Vec<u8>) -> Result<()> {
    match dtype {
        DType::Bool => match value {
            Scalar::Bool(b) => out.push(b as u8),
            Scalar::Int(i @ (0 | 1)) => out.push(i as u8),
            _ => return Err(refuse(value, dtype, "use True or False")),
        },
        DType::I8 => out.extend((integer(value, dtype)? as i8).to_ne_bytes()),
        DType::I16 => out.extend((integer(value, dtype)? as i16).to_ne_bytes()),
        DType::I32 => out.extend((integer(value, dtype)? as i32).to_ne_bytes()),
        DType::I64 => out.extend((integer(value, dtype)? as i64).to_ne_bytes()),
        DType::U8 => out.push(integer(value, dtype)? as u8),
        DType::U16 => out.extend((integer(value, dtype)? as u16).to_ne_bytes()),
        DType::U32 => out.extend((integer(value, dtype)? as u32).to_ne_bytes()),
        DType::U64 => out.extend((integer(value, dtype)? as u64).to_ne_bytes()),
        DType::F16 => out.extend(f16::from_f64(real(value, dtype)?).to_ne_bytes()),
        DType::BF16 => out.extend(bf16::from_f64(real(value, dtype)?).to_ne_bytes()),
        DType::F32 => out.extend((real(value, dtype)? as f32).to_ne_bytes()),
        DType::F64 => out.extend(real(value, dtype)?.to_ne_bytes()),
        DType::C64 | DType::C128 => {
            let (re, im) = match value {
                Scalar::Complex(re, im) => (re, im),
                other => (real(other, dtype)?, 0.0),
            };
            if dtype == DType::C64 {
                out.extend((re as f32).to_ne_bytes());
                out.extend((im as f32).to_ne_bytes());
            } else {
                out.extend(re.to_ne_bytes());
                out.extend(im.to_ne_bytes());
            }
        }
        DType::String => return Err(dtype.unsupported("strings are not tensors")),
    }
    Ok(())
}

fn bytes<const N: usize>(b: &[u8]) -> [u8; N] {
    let mut out = [0; N];
    out.copy_from_slice(&b[..N]);
    out
}

/// Float text as NumPy prints it: the shortest text that reads back as
/// the same value of its own width, `nan` and `inf` in lower case.
fn float_text(x: f64, shortest: String) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        shortest
    }
}

/// The elements of `a` as text, in C order. `a` came from a tensor, so its
/// bytes hold exactly its elements.
pub fn texts(a: &HostArray) -> Vec<String> {
    let width = a.dtype.size_in_bytes().unwrap_or(1);
    a.bytes
        .chunks_exact(width)
        .map(|b| text(a.dtype, b))
        .collect()
}

fn text(dtype: DType, b: &[u8]) -> String {
    let f32_text = |x: f32| float_text(x as f64, format!("{x:?}"));
    let f64_text = |x: f64| float_text(x, format!("{x:?}"));
    match dtype {
        DType::C64 => complex_text(
            f32_text(f32::from_ne_bytes(bytes(b))),
            f32_text(f32::from_ne_bytes(bytes(&b[4..]))),
        ),
        DType::C128 => complex_text(
            f64_text(f64::from_ne_bytes(bytes(b))),
            f64_text(f64::from_ne_bytes(bytes(&b[8..]))),
        ),
        DType::F16 => f32_text(f16::from_ne_bytes(bytes(b)).to_f32()),
        DType::BF16 => f32_text(bf16::from_ne_bytes(bytes(b)).to_f32()),
        DType::F32 => f32_text(f32::from_ne_bytes(bytes(b))),
        DType::F64 => f64_text(f64::from_ne_bytes(bytes(b))),
        _ => scalar(dtype, b).to_string(),
    }
}

fn complex_text(re: String, im: String) -> String {
    let sign = if im.starts_with('-') { "" } else { "+" };
    format!("{re}{sign}{im}j")
}

/// One element of `dtype` from its bytes.
fn scalar(dtype: DType, b: &[u8]) -> Scalar {
    match dtype {
        DType::Bool => Scalar::Bool(b[0] != 0),
        DType::I8 => Scalar::Int(b[0] as i8 as i128),
        DType::I16 => Scalar::Int(i16::from_ne_bytes(bytes(b)) as i128),
        DType::I32 => Scalar::Int(i32::from_ne_bytes(bytes(b)) as i128),
        DType::I64 => Scalar::Int(i64::from_ne_bytes(bytes(b)) as i128),
        DType::U8 => Scalar::Int(b[0] as i128),
        DType::U16 => Scalar::Int(u16::from_ne_bytes(bytes(b)) as i128),
        DType::U32 => Scalar::Int(u32::from_ne_bytes(bytes(b)) as i128),
        DType::U64 => Scalar::Int(u64::from_ne_bytes(bytes(b)) as i128),
        DType::F16 => Scalar::Float(f16::from_ne_bytes(bytes(b)).to_f64()),
        DType::BF16 => Scalar::Float(bf16::from_ne_bytes(bytes(b)).to_f64()),
        DType::F32 => Scalar::Float(f32::from_ne_bytes(bytes(b)) as f64),
        DType::F64 => Scalar::Float(f64::from_ne_bytes(bytes(b))),
        DType::C64 => Scalar::Complex(
            f32::from_ne_bytes(bytes(b)) as f64,
            f32::from_ne_bytes(bytes(&b[4..])) as f64,
        ),
        DType::C128 => Scalar::Complex(
            f64::from_ne_bytes(bytes(b)),
            f64::from_ne_bytes(bytes(&b[8..])),
        ),
        DType::String => Scalar::Bool(false),
    }
}

/// A float for JSON, which has no NaN or infinity: those become the
/// strings `"nan"`, `"inf"` and `"-inf"`.
fn json_float(x: f64) -> serde_json::Value {
    serde_json::Number::from_f64(x)
        .map(serde_json::Value::Number)
        .unwrap_or_else(|| float_text(x, String::new()).into())
}

/// The elements of `a` as JSON values, in C order: numbers, booleans, and
/// `[real, imaginary]` pairs for complex elements.
pub fn json_values(a: &HostArray) -> Vec<serde_json::Value> {
    let width = a.dtype.size_in_bytes().unwrap_or(1);
    a.bytes
        .chunks_exact(width)
        .map(|b| match scalar(a.dtype, b) {
            Scalar::Bool(v) => v.into(),
            Scalar::Int(i) => i64::try_from(i)
                .map(Into::into)
                .unwrap_or_else(|_| (i as u64).into()),
            Scalar::Float(x) => json_float(x),
            Scalar::Complex(re, im) => vec![json_float(re), json_float(im)].into(),
        })
        .collect()
}
