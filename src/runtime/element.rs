//! Host element types and their byte views.
//!
//! `Element` is sealed: only plain-old-data types whose every byte pattern
//! the device can produce are implemented, which is what makes the byte
//! casts below sound. `bool` is the exception on the read side (a byte other
//! than 0 or 1 is not a valid `bool`), so reads go through `from_bytes`, which
//! decodes bools byte by byte.

use crate::dtype::DType;

mod sealed {
    pub trait Sealed {}
}

/// A Rust type that can be an element of a tensor.
pub trait Element:
    sealed::Sealed + Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static
{
    /// The tensor dtype this type maps to.
    const DTYPE: DType;
    /// Converts from `f64` with `as` semantics (saturating for ints).
    fn from_f64(v: f64) -> Self;
    /// Converts to `f64` (exact for every type but `i64`/`u64` beyond 2^53).
    fn to_f64(self) -> f64;
}

macro_rules! plain_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
            fn from_f64(v: f64) -> Self { v as $t }
            fn to_f64(self) -> f64 { self as f64 }
        }
    )*};
}
plain_element!(f32 => F32, f64 => F64, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
               u8 => U8, u16 => U16, u32 => U32, u64 => U64);

impl sealed::Sealed for bool {}
impl Element for bool {
    const DTYPE: DType = DType::Bool;
    fn from_f64(v: f64) -> Self {
        v != 0.0
    }
    fn to_f64(self) -> f64 {
        if self { 1.0 } else { 0.0 }
    }
}

impl sealed::Sealed for half::f16 {}
impl Element for half::f16 {
    const DTYPE: DType = DType::F16;
    fn from_f64(v: f64) -> Self {
        half::f16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        half::f16::to_f64(self)
    }
}

impl sealed::Sealed for half::bf16 {}
impl Element for half::bf16 {
    const DTYPE: DType = DType::BF16;
    fn from_f64(v: f64) -> Self {
        half::bf16::from_f64(v)
    }
    fn to_f64(self) -> f64 {
        half::bf16::to_f64(self)
    }
}

/// Complex elements: `num_complex::Complex<f32>` (c64) and
/// `Complex<f64>` (c128), `#[repr(C)]` pairs (real, imaginary) as XLA lays
/// them out. `from_f64` gives a real number; `to_f64` is the real part.
macro_rules! complex_element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for num_complex::Complex<$t> {}
        impl Element for num_complex::Complex<$t> {
            const DTYPE: DType = DType::$d;
            fn from_f64(v: f64) -> Self { num_complex::Complex::new(v as $t, 0.0) }
            fn to_f64(self) -> f64 { self.re as f64 }
        }
    )*};
}
complex_element!(f32 => C64, f64 => C128);

/// Views a slice of elements as its bytes (native endianness, as the device
/// expects on the host platforms PJRT supports).
pub fn as_bytes<T: Element>(data: &[T]) -> &[u8] {
    // SAFETY: `T` is one of the sealed plain-old-data types above (no padding,
    // no pointers), so every byte of the slice is initialised; the returned
    // slice covers exactly the same memory and borrows `data`.
    unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }
}

/// Decodes elements from bytes written by the device.
pub fn from_bytes<T: Element>(bytes: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let n = bytes.len() / size;
    if T::DTYPE == DType::Bool {
        return bytes[..n]
            .iter()
            .map(|&b| T::from_f64(if b != 0 { 1.0 } else { 0.0 }))
            .collect();
    }
    let mut out = Vec::<T>::with_capacity(n);
    // SAFETY: `T` is a sealed numeric type for which every bit pattern is a
    // valid value; we copy `n * size` bytes (within `bytes`) into the vector's
    // allocation of capacity `n` and only then set its length.
    unsafe {
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.as_mut_ptr().cast::<u8>(), n * size);
        out.set_len(n);
    }
    out
}
