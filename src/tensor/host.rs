//! Moving data between the host and tensors: constructors from `Vec`,
//! slices, scalars and `ndarray` arrays, and read-back.

use super::Tensor;
use crate::dtype::DType;
use crate::error::{Error, OrPanic, Result};
use crate::ir::Scalar;
use crate::runtime::{Buffer, Client, Element};

fn upload<T: Element>(data: &[T], dims: &[i64]) -> Result<Tensor> {
    if let Some(d) = dims.iter().find(|d| **d < 0) {
        return Err(Error::Value(format!(
            "dimension {d} in shape {dims:?} is negative"
        )));
    }
    let client = Client::default_client()?;
    let buffer = Buffer::from_slice(&client, super::device::default_device()?, data, dims)?;
    Ok(Tensor::from_buffer(
        buffer.with_committed(super::device::in_device_scope()),
    ))
}

/// A scalar tensor of `dtype` holding `value` converted to it.
pub(crate) fn scalar_tensor(value: Scalar, dtype: DType) -> Result<Tensor> {
    Tensor::from_host_bytes(dtype, &[], &scalar_bytes(value, dtype)?)
}

/// The little-endian bytes of `value` converted to `dtype` (one element):
/// what scalar constants upload, and what `data::padded_batch` fills with.
pub(crate) fn scalar_bytes(value: Scalar, dtype: DType) -> Result<Vec<u8>> {
    fn bytes<T: Element>(v: T) -> Result<Vec<u8>> {
        Ok(crate::runtime::element::as_bytes(&[v]).to_vec())
    }
    let v = value.cast(dtype);
    match dtype {
        DType::Bool => bytes(v.as_f64() != 0.0),
        DType::I8 => bytes(v.as_i64() as i8),
        DType::I16 => bytes(v.as_i64() as i16),
        DType::I32 => bytes(v.as_i64() as i32),
        DType::I64 => bytes(v.as_i64()),
        DType::U8 => bytes(v.as_i64() as u8),
        DType::U16 => bytes(v.as_i64() as u16),
        DType::U32 => bytes(v.as_i64() as u32),
        DType::U64 => bytes(match v {
            Scalar::U64(u) => u,
            other => other.as_i64() as u64,
        }),
        DType::F16 => bytes(half::f16::from_f64(v.as_f64())),
        DType::BF16 => bytes(half::bf16::from_f64(v.as_f64())),
        DType::F32 => bytes(v.as_f64() as f32),
        DType::F64 => bytes(v.as_f64()),
        DType::C64 => bytes(num_complex::Complex32::new(v.as_f64() as f32, 0.0)),
        DType::C128 => bytes(num_complex::Complex64::new(v.as_f64(), 0.0)),
        DType::String => Err(dtype.unsupported("cannot make a string tensor")),
    }
}

/// **Constructors** from host data: vectors, slices, scalars, `ndarray`
/// arrays and raw bytes. Device-made constructors (`zeros`, `iota`,
/// random) are in the same section further on.
impl Tensor {
    /// A tensor of shape `dims` holding `data` in row-major order.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let t = Tensor::from_vec(vec![1f32, 2., 3., 4.], &[2, 2])?;
    /// assert_eq!(t.dims(), vec![2, 2]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn from_vec<T: Element>(data: Vec<T>, dims: &[i64]) -> Result<Tensor> {
        upload(&data, dims)
    }

    /// Like `from_vec`, borrowing the data.
    pub fn from_slice<T: Element>(data: &[T], dims: &[i64]) -> Result<Tensor> {
        upload(data, dims)
    }

    /// A rank-1 tensor of the values.
    pub fn vector<T: Element>(data: &[T]) -> Result<Tensor> {
        upload(data, &[data.len() as i64])
    }

    /// A scalar tensor. Panics only if no device can be opened (the same
    /// condition under which every eager op fails); see `try_scalar`.
    #[track_caller]
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Self::try_scalar(value).or_panic()
    }

    /// A scalar tensor, reporting device errors.
    pub fn try_scalar<T: Element>(value: T) -> Result<Tensor> {
        upload(&[value], &[])
    }

    /// Strings cannot become tensors: XLA cannot compile them. This
    /// constructor exists to say so clearly.
    pub fn from_strings(_values: &[&str]) -> Result<Tensor> {
        Err(DType::String.unsupported(
            "XLA cannot compile string tensors; map strings to integer ids on the host",
        ))
    }

    /// Copies an `ndarray` array of any dimensionality to the device.
    pub fn from_ndarray<T, S, D>(array: &ndarray::ArrayBase<S, D>) -> Result<Tensor>
    where
        T: Element,
        S: ndarray::Data<Elem = T>,
        D: ndarray::Dimension,
    {
        let dims: Vec<i64> = array.shape().iter().map(|&d| d as i64).collect();
        match array.as_slice() {
            Some(s) => upload(s, &dims),
            None => upload(&array.iter().copied().collect::<Vec<T>>(), &dims),
        }
    }

    /// A tensor from raw dense row-major bytes of `dtype`.
    pub fn from_host_bytes(dtype: DType, dims: &[i64], bytes: &[u8]) -> Result<Tensor> {
        let client = Client::default_client()?;
        let device = super::device::default_device()?;
        let buffer = Buffer::from_bytes(&client, device, dtype, bytes, dims)?;
        Ok(Tensor::from_buffer(
            buffer.with_committed(super::device::in_device_scope()),
        ))
    }
}

/// **Read-back**: copying a value to the host as a `Vec`, an `ndarray`
/// array, one scalar or raw bytes. Each waits for the value to be computed.
impl Tensor {
    /// Copies the value to a host array (dtype, dims and raw bytes).
    pub fn to_host_array(&self) -> Result<crate::runtime::HostArray> {
        if let Some(array) = self.sharded() {
            return Ok(crate::runtime::HostArray {
                dtype: array.dtype(),
                dims: array.dims().to_vec(),
                bytes: array.to_host_bytes()?,
            });
        }
        let b = self.buffer()?;
        Ok(crate::runtime::HostArray {
            dtype: b.dtype(),
            dims: b.dims().to_vec(),
            bytes: b.to_bytes()?,
        })
    }

    /// Reads the values back (row-major). `T` must match the dtype.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        if self.sharded().is_some() {
            let host = self.to_host_array()?;
            if T::DTYPE != host.dtype {
                return Err(Error::Type(format!(
                    "cannot read a {} tensor as {}",
                    host.dtype,
                    T::DTYPE
                )));
            }
            return Ok(crate::runtime::element::from_bytes(&host.bytes));
        }
        self.buffer()?.to_vec::<T>()
    }

    /// Reads the values back as a dynamic-dimensional `ndarray` array.
    pub fn to_ndarray<T: Element>(&self) -> Result<ndarray::ArrayD<T>> {
        let dims: Vec<usize> = self.dims().iter().map(|&d| d as usize).collect();
        let data = self.to_vec::<T>()?;
        ndarray::ArrayD::from_shape_vec(dims, data).map_err(|e| Error::Value(e.to_string()))
    }

    /// Reads a one-element tensor as a single value.
    pub fn item<T: Element>(&self) -> Result<T> {
        let v = self.to_vec::<T>()?;
        if v.len() != 1 {
            return Err(Error::Value(format!(
                "item() needs a tensor with one element, got shape {}",
                self.shape()
            )));
        }
        Ok(v[0])
    }

    /// Reads any real numeric or bool tensor as `f64` values (for printing
    /// and comparisons in tests; exact except for 64-bit ints beyond 2^53).
    /// Complex tensors are refused: they have two parts.
    pub fn to_f64_vec(&self) -> Result<Vec<f64>> {
        Ok(match self.dtype() {
            DType::Bool => self
                .to_vec::<bool>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::I8 => self
                .to_vec::<i8>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::I16 => self
                .to_vec::<i16>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::I32 => self
                .to_vec::<i32>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::I64 => self
                .to_vec::<i64>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::U8 => self
                .to_vec::<u8>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::U16 => self
                .to_vec::<u16>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::U32 => self
                .to_vec::<u32>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::U64 => self
                .to_vec::<u64>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::F16 => self
                .to_vec::<half::f16>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::BF16 => self
                .to_vec::<half::bf16>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::F32 => self
                .to_vec::<f32>()?
                .into_iter()
                .map(Element::to_f64)
                .collect(),
            DType::F64 => self.to_vec::<f64>()?,
            DType::C64 | DType::C128 => {
                return Err(self.dtype().unsupported(
                    "a complex tensor has no f64 values; read it with to_vec::<Complex32>() \
                     (c64) or to_vec::<Complex64>() (c128), or take .real() or .abs() first",
                ));
            }
            DType::String => return Err(DType::String.unsupported("no string tensors exist")),
        })
    }
}

macro_rules! from_host_scalar {
    ($($t:ty),*) => {$(
        impl From<$t> for Tensor {
            fn from(v: $t) -> Tensor { Tensor::scalar(v) }
        }
    )*};
}
from_host_scalar!(
    f32,
    f64,
    i32,
    i64,
    u8,
    u32,
    bool,
    num_complex::Complex32,
    num_complex::Complex64
);
