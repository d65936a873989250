//! Layer: export (tensor files). NumPy's `.npy` format, the tensor file
//! format of exports, of `xlafn::io` and of the command-line tool, so all
//! three read and write the same way. Imports only `dtype`, `error` and the
//! runtime's `HostArray` (bytes, no device): a file becomes host bytes here
//! and a tensor elsewhere.
//!
//! Reading takes what NumPy writes: header versions 1.0, 2.0 and 3.0,
//! little- (`<`), big- (`>`), native (`=`) and no byte order (`|`), C or
//! Fortran order (Fortran arrays are transposed to C order on read), every
//! dtype xlafn has. bf16 has no NumPy name: with `ml_dtypes` NumPy writes
//! it as `<V2` (two raw bytes; `>V2` after a byte swap), and reads the
//! descriptor `bfloat16` back as `ml_dtypes.bfloat16` (checked with NumPy
//! 2.4 and ml_dtypes 0.6, see `scripts/npy_fixtures.py`). So a 2-byte void
//! is read as bf16 (xlafn has no other 2-byte raw type) and `bfloat16` is
//! accepted too. Object, string and structured arrays are refused by name.
//!
//! Writing is always format 1.0, little-endian, C order, the header padded
//! so the data starts at a multiple of 64 bytes as NumPy does. bf16 is
//! written as `bfloat16`, which `np.load` reads as bf16 once `ml_dtypes`
//! is imported (and refuses with "not a valid dtype descriptor" otherwise,
//! rather than handing back raw bytes). Complex arrays are `<c8` (c64) and
//! `<c16` (c128): real and imaginary parts interleaved, as NumPy and XLA
//! both lay them out.

use crate::dtype::{DType, check_array_size};
use crate::error::{Error, Result};
use crate::runtime::HostArray;

const MAGIC: &[u8] = b"\x93NUMPY";

/// The descriptor xlafn writes for `dtype`.
fn descr(dtype: DType) -> Result<&'static str> {
    Ok(match dtype {
        DType::Bool => "|b1",
        DType::I8 => "|i1",
        DType::I16 => "<i2",
        DType::I32 => "<i4",
        DType::I64 => "<i8",
        DType::U8 => "|u1",
        DType::U16 => "<u2",
        DType::U32 => "<u4",
        DType::U64 => "<u8",
        DType::F16 => "<f2",
        DType::BF16 => "bfloat16",
        DType::F32 => "<f4",
        DType::F64 => "<f8",
        DType::C64 => "<c8",
        DType::C128 => "<c16",
        DType::String => return Err(dtype.unsupported("strings cannot be stored as tensors")),
    })
}

/// The dtype a type code (a descriptor without its byte-order mark) names.
fn dtype_of_code(code: &str) -> Option<DType> {
    Some(match code {
        "b1" | "?" => DType::Bool,
        "i1" => DType::I8,
        "i2" => DType::I16,
        "i4" => DType::I32,
        "i8" => DType::I64,
        "u1" => DType::U8,
        "u2" => DType::U16,
        "u4" => DType::U32,
        "u8" => DType::U64,
        "f2" => DType::F16,
        "V2" => DType::BF16,
        "f4" => DType::F32,
        "f8" => DType::F64,
        "c8" => DType::C64,
        "c16" => DType::C128,
        _ => return None,
    })
}

/// Why a descriptor xlafn cannot read is refused, in NumPy's terms.
fn unsupported_descr(descr: &str) -> Error {
    let code = descr.trim_start_matches(['<', '>', '|', '=']);
    let why = match code.chars().next() {
        Some('O') => "object arrays (pickled Python objects) are not read",
        Some('U' | 'S' | 'a') => "string arrays are not tensors",
        Some('M' | 'm') => "datetime arrays are not supported",
        Some('V') => "raw bytes of this width are no xlafn dtype (bf16 is V2; xlafn has no float8)",
        _ => "no xlafn dtype has this NumPy type",
    };
    bad(&format!("dtype {descr:?}: {why}"))
}

/// The dtype and byte order (`true`: big-endian) of a descriptor such as
/// `<f4`, `>c16`, `|b1` or `bfloat16`.
fn parse_descr(descr: &str) -> Result<(DType, bool)> {
    if descr == "bfloat16" {
        return Ok((DType::BF16, cfg!(target_endian = "big")));
    }
    let mut chars = descr.chars();
    let order = chars.next().ok_or_else(|| bad("empty dtype"))?;
    let dtype = dtype_of_code(chars.as_str()).ok_or_else(|| unsupported_descr(descr))?;
    let big = match order {
        '<' => false,
        '>' => true,
        '=' => cfg!(target_endian = "big"),
        // No byte order: bytes, and the raw V2 of bf16 as NumPy writes it.
        '|' if dtype.size_in_bytes()? == 1 || dtype == DType::BF16 => cfg!(target_endian = "big"),
        _ => return Err(unsupported_descr(descr)),
    };
    Ok((dtype, big))
}

/// Encodes an array as `.npy` bytes.
pub fn encode(a: &HostArray) -> Result<Vec<u8>> {
    let shape = match a.dims.len() {
        1 => format!("({},)", a.dims[0]),
        _ => format!(
            "({})",
            a.dims
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    };
    let mut header = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {shape}, }}",
        descr(a.dtype)?
    );
    // Pad so the data starts at a multiple of 64 bytes, ending in '\n'.
    let unpadded = MAGIC.len() + 2 + 2 + header.len() + 1;
    header.push_str(&" ".repeat((64 - unpadded % 64) % 64));
    header.push('\n');
    let mut out = Vec::with_capacity(MAGIC.len() + 4 + header.len() + a.bytes.len());
    out.extend(MAGIC);
    out.extend([1u8, 0]);
    out.extend((header.len() as u16).to_le_bytes());
    out.extend(header.as_bytes());
    out.extend(&a.bytes);
    Ok(out)
}

fn bad(why: &str) -> Error {
    Error::Value(format!("not a valid .npy file: {why}"))
}

/// The longest header accepted; NumPy itself refuses headers over 10 000
/// bytes unless told otherwise, so this costs real files nothing.
const MAX_HEADER: usize = 1 << 16;

/// The values of an `.npy` header: the three keys NumPy writes.
#[derive(Default)]
struct Header {
    descr: Option<String>,
    fortran_order: Option<bool>,
    shape: Option<Vec<i64>>,
}

/// A cursor over the header, a Python dict literal such as
/// `{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }`. Written
/// as a small parser rather than string searches so that any byte sequence
/// ends in a value or an error naming what was expected, never a panic.
struct Cursor<'a> {
    text: &'a [u8],
    at: usize,
}

impl Cursor<'_> {
    fn skip_space(&mut self) {
        while self
            .text
            .get(self.at)
            .is_some_and(|b| *b == b' ' || *b == b'\n')
        {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.skip_space();
        self.text.get(self.at).copied()
    }

    fn eat(&mut self, b: u8) -> bool {
        if self.peek() == Some(b) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn expect(&mut self, b: u8) -> Result<()> {
        if self.eat(b) {
            Ok(())
        } else {
            Err(bad(&format!("expected '{}' in the header", b as char)))
        }
    }

    /// A single-quoted string without escapes (NumPy's keys and dtype
    /// descriptors never need them).
    fn string(&mut self) -> Result<String> {
        self.expect(b'\'')?;
        let start = self.at;
        while let Some(b) = self.text.get(self.at) {
            match b {
                b'\'' if self.at - start > 64 => {
                    return Err(bad("a header string is longer than 64 bytes"));
                }
                b'\'' => {
                    self.at += 1;
                    return Ok(String::from_utf8_lossy(&self.text[start..self.at - 1]).into());
                }
                b'\\' => return Err(bad("escapes in header strings are not supported")),
                _ => self.at += 1,
            }
        }
        Err(bad("unterminated string in the header"))
    }

    fn word(&mut self) -> &[u8] {
        self.skip_space();
        let start = self.at;
        while self
            .text
            .get(self.at)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_')
        {
            self.at += 1;
        }
        &self.text[start..self.at]
    }

    fn boolean(&mut self) -> Result<bool> {
        match self.word() {
            b"True" => Ok(true),
            b"False" => Ok(false),
            _ => Err(bad("expected True or False in the header")),
        }
    }

    /// `()`, `(3,)`, `(2, 3)`: non-negative decimal dimensions.
    fn shape(&mut self) -> Result<Vec<i64>> {
        self.expect(b'(')?;
        let mut dims = Vec::new();
        loop {
            if self.eat(b')') {
                return Ok(dims);
            }
            let digits = self.word();
            if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
                return Err(bad(
                    "a dimension of the shape is not a non-negative integer",
                ));
            }
            let d = std::str::from_utf8(digits)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| bad("a dimension of the shape is too large"))?;
            dims.push(d);
            if dims.len() > 64 {
                return Err(bad("the shape has more than 64 dimensions"));
            }
            if !self.eat(b',') && self.peek() != Some(b')') {
                return Err(bad("expected ',' or ')' in the shape"));
            }
        }
    }

    fn header(&mut self) -> Result<Header> {
        let mut h = Header::default();
        self.expect(b'{')?;
        while !self.eat(b'}') {
            let key = self.string()?;
            self.expect(b':')?;
            let repeated = match key.as_str() {
                "descr" => h.descr.replace(self.string()?).is_some(),
                "fortran_order" => h.fortran_order.replace(self.boolean()?).is_some(),
                "shape" => h.shape.replace(self.shape()?).is_some(),
                other => return Err(bad(&format!("unknown header key {other:?}"))),
            };
            if repeated {
                return Err(bad(&format!("header key {key:?} appears twice")));
            }
            if !self.eat(b',') && self.peek() != Some(b'}') {
                return Err(bad("expected ',' or '}' in the header"));
            }
        }
        if self.peek().is_some() {
            return Err(bad("text after the header's closing '}'"));
        }
        Ok(h)
    }
}

/// Splits `.npy` bytes into the header text and the data after it.
fn split_header(bytes: &[u8]) -> Result<(&[u8], &[u8])> {
    let rest = bytes
        .strip_prefix(MAGIC)
        .ok_or_else(|| bad("missing magic"))?;
    let (version, rest) = rest.split_at_checked(2).ok_or_else(|| bad("truncated"))?;
    let (len, rest) = match version[0] {
        1 => {
            let (l, r) = rest.split_at_checked(2).ok_or_else(|| bad("truncated"))?;
            (u16::from_le_bytes([l[0], l[1]]) as usize, r)
        }
        // 2.0 has a 4-byte length; 3.0 also allows UTF-8 in the header,
        // which only structured dtypes' field names need (refused below).
        2 | 3 => {
            let (l, r) = rest.split_at_checked(4).ok_or_else(|| bad("truncated"))?;
            (u32::from_le_bytes([l[0], l[1], l[2], l[3]]) as usize, r)
        }
        v => return Err(bad(&format!("unknown version {v}"))),
    };
    if len > MAX_HEADER {
        return Err(bad(&format!(
            "the header has {len} bytes, over {MAX_HEADER}"
        )));
    }
    let (header, data) = rest
        .split_at_checked(len)
        .ok_or_else(|| bad("truncated header"))?;
    if !header.is_ascii() {
        return Err(bad("the header is not ASCII text"));
    }
    Ok((header, data))
}

/// Decodes `.npy` bytes, checking the header against the data length,
/// into a little-endian C-order array (byte-swapped and transposed as the
/// header says). Any input gives an array or an error, never a panic (a
/// proptest checks it), because `.npy` files come from exports and
/// command lines.
pub fn decode(bytes: &[u8]) -> Result<HostArray> {
    let (header, data) = split_header(bytes)?;
    let h = Cursor {
        text: header,
        at: 0,
    }
    .header()?;
    let descr = h.descr.ok_or_else(|| bad("no 'descr' in the header"))?;
    let (dtype, big_endian) = parse_descr(&descr)?;
    let fortran = h
        .fortran_order
        .ok_or_else(|| bad("no 'fortran_order' in the header"))?;
    let dims = h.shape.ok_or_else(|| bad("no 'shape' in the header"))?;
    check_array_size(dtype, &dims).map_err(|e| bad(&e.to_string()))?;
    let width = dtype.size_in_bytes()?;
    let size = dims
        .iter()
        .try_fold(width as u64, |a, d| a.checked_mul(*d as u64))
        .ok_or_else(|| bad("shape too large"))?;
    if size != data.len() as u64 {
        return Err(bad(&format!(
            "shape {dims:?} of {dtype} needs {size} bytes, the file has {}",
            data.len()
        )));
    }
    let mut bytes = if fortran && dims.len() > 1 {
        fortran_to_c(data, &dims, width)
    } else {
        data.to_vec()
    };
    if big_endian != cfg!(target_endian = "big") {
        // A complex number is two floats, each swapped on its own.
        let scalar = if dtype.is_complex() { width / 2 } else { width };
        bytes.chunks_exact_mut(scalar).for_each(<[u8]>::reverse);
    }
    crate::dtype::normalize_bools(dtype, &mut bytes);
    Ok(HostArray { dtype, dims, bytes })
}

/// The elements of a Fortran-order (first index fastest) array of `dims`,
/// each `width` bytes, reordered to C order (last index fastest). `data`
/// holds exactly the elements `dims` calls for (checked by the caller).
fn fortran_to_c(data: &[u8], dims: &[i64], width: usize) -> Vec<u8> {
    let mut strides = Vec::with_capacity(dims.len());
    let mut stride = 1;
    for &d in dims {
        strides.push(stride);
        stride *= d;
    }
    gather_strided(data, width, 0, dims, &strides)
}

/// The view of `data` (elements of `width` bytes) at element `offset`
/// with `dims` and element `strides`, copied dense in C order (last index
/// fastest): a Fortran-order `.npy` file's elements, or a PyTorch
/// tensor's view of its storage. The caller has checked that every index
/// the view reaches lies inside `data` and that dims and strides are
/// non-negative.
pub(crate) fn gather_strided(
    data: &[u8],
    width: usize,
    offset: u64,
    dims: &[i64],
    strides: &[i64],
) -> Vec<u8> {
    let count: usize = dims.iter().map(|&d| d as usize).product();
    let mut out = Vec::with_capacity(count * width);
    if count == 0 {
        return out;
    }
    let mut index = vec![0i64; dims.len()];
    for _ in 0..count {
        let at = offset as usize
            + index
                .iter()
                .zip(strides)
                .map(|(&i, &s)| (i * s) as usize)
                .sum::<usize>();
        out.extend_from_slice(&data[at * width..(at + 1) * width]);
        for k in (0..dims.len()).rev() {
            index[k] += 1;
            if index[k] < dims[k] {
                break;
            }
            index[k] = 0;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let a = HostArray::from_vec(vec![1.5f32, -2.0, 3.25, 0.0, 1.0, 2.0], &[2, 3]);
        let bytes = encode(&a).unwrap();
        assert_eq!((bytes.len() - a.bytes.len()) % 64, 0);
        assert_eq!(decode(&bytes).unwrap(), a);
        let scalar = HostArray::from_vec(vec![7i64], &[]);
        assert_eq!(decode(&encode(&scalar).unwrap()).unwrap(), scalar);
        assert!(decode(&bytes[..bytes.len() - 1]).is_err());
        assert!(decode(b"garbage").is_err());
        for cut in 0..80 {
            assert!(decode(&bytes[..cut.min(bytes.len())]).is_err());
        }
    }

    /// `.npy` bytes with `header` as the (version 1) header and `data`.
    fn with_header(header: &str, data: &[u8]) -> Vec<u8> {
        let mut out = MAGIC.to_vec();
        out.extend([1u8, 0]);
        out.extend((header.len() as u16).to_le_bytes());
        out.extend(header.as_bytes());
        out.extend(data);
        out
    }

    #[test]
    fn malformed_headers_are_errors() {
        for header in [
            "{'descr': '<f4', 'fortran_order': False, 'shape': )3,(, }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (\u{e9}3,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), }\u{2603}",
            "{'descr': '<f\u{e9}', 'fortran_order': False, 'shape': (3,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-3,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'shape': (3,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (3,)",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr: '<f4', 'fortran_order': False, 'shape': (3,), }",
            "{'descr': '<c32', 'fortran_order': False, 'shape': (3,), }",
            "",
        ] {
            let e = decode(&with_header(header, &[0; 12])).unwrap_err();
            assert!(
                e.to_string().contains("not a valid .npy file"),
                "{header:?}: {e}"
            );
        }
        let ok = "{'shape': (3,), 'fortran_order': False, 'descr': '<f4'}   \n";
        assert_eq!(decode(&with_header(ok, &[0; 12])).unwrap().dims, vec![3]);
    }

    fn dtypes() -> impl Strategy<Value = DType> {
        proptest::sample::select(DType::NUMERIC_AND_BOOL.to_vec())
    }

    /// `a` as NumPy would store it big-endian in Fortran order, built the
    /// other way round from `fortran_to_c`: walking the file's order and
    /// looking each element up in C order.
    fn big_endian_fortran(a: &HostArray) -> Vec<u8> {
        let width = a.dtype.size_in_bytes().unwrap();
        let scalar = if a.dtype.is_complex() {
            width / 2
        } else {
            width
        };
        let dims: Vec<usize> = a.dims.iter().map(|&d| d as usize).collect();
        let n: usize = dims.iter().product();
        let mut data = Vec::with_capacity(a.bytes.len());
        let mut c_stride: Vec<usize> = dims
            .iter()
            .rev()
            .scan(1, |s, d| {
                let here = *s;
                *s *= d;
                Some(here)
            })
            .collect();
        c_stride.reverse();
        for f in 0..n {
            // Fortran index f -> multi-index (first fastest) -> C offset.
            let (mut rest, mut c) = (f, 0);
            for (d, stride) in dims.iter().zip(&c_stride) {
                c += (rest % d) * stride;
                rest /= d;
            }
            let mut element = a.bytes[c * width..(c + 1) * width].to_vec();
            element.chunks_exact_mut(scalar).for_each(<[u8]>::reverse);
            data.extend(element);
        }
        let shape: Vec<String> = a.dims.iter().map(|d| format!("{d},")).collect();
        let code = match descr(a.dtype).unwrap() {
            "bfloat16" => "V2".to_string(),
            d => d[1..].to_string(),
        };
        let header = format!(
            "{{'descr': '>{code}', 'fortran_order': True, 'shape': ({}), }}",
            shape.join(" ")
        );
        with_header(&header, &data)
    }

    proptest! {
        #[test]
        fn big_endian_fortran_files_read_as_their_c_order_values(
            dtype in dtypes(),
            dims in proptest::collection::vec(0i64..4, 0..4),
            seed in any::<u8>(),
        ) {
            let n: i64 = dims.iter().product();
            let len = n as usize * dtype.size_in_bytes().unwrap();
            let mut bytes: Vec<u8> = (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect();
            // Booleans read back as 0 or 1 whatever the byte: the values a
            // file's booleans stand for.
            crate::dtype::normalize_bools(dtype, &mut bytes);
            let a = HostArray { dtype, dims, bytes };
            prop_assert_eq!(decode(&big_endian_fortran(&a)).unwrap(), a);
        }

        #[test]
        fn any_bytes_decode_to_a_value_or_an_error(
            bytes in proptest::collection::vec(any::<u8>(), 0..300),
        ) {
            let _ = decode(&bytes);
        }

        #[test]
        fn any_header_text_decodes_to_a_value_or_an_error(
            header in "[{}()',: 0-9a-z_<>TF\u{e9}\u{2603}-]{0,80}",
            data in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let _ = decode(&with_header(&header, &data));
        }

        #[test]
        fn damaged_valid_files_decode_to_a_value_or_an_error(
            dtype in dtypes(),
            dims in proptest::collection::vec(0i64..4, 0..4),
            at in any::<usize>(),
            to in any::<u8>(),
        ) {
            let n: i64 = dims.iter().product();
            let width = dtype.size_in_bytes().unwrap();
            let a = HostArray { dtype, dims, bytes: vec![1; n as usize * width] };
            let mut bytes = encode(&a).unwrap();
            prop_assert_eq!(decode(&bytes).unwrap(), a);
            let i = at % bytes.len();
            bytes[i] = to;
            if let Ok(b) = decode(&bytes) {
                let n: i64 = b.dims.iter().product();
                prop_assert_eq!(b.bytes.len(), n as usize * b.dtype.size_in_bytes().unwrap());
            }
        }
    }
}
