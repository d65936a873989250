//! What a dataset's examples are made of: host arrays, alone or in tuples,
//! and how they are sliced, stacked, padded and uploaded.

use super::Placement;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::runtime::HostArray;
use crate::tensor::Tensor;

/// An example a pipeline can batch and upload: a [`HostArray`], a tuple of
/// examples (up to four), or a `Vec<HostArray>` (as many arrays as a file
/// holds; as a tuple's part, only in the last place, since it takes every
/// array left).
///
/// Its arrays, flattened in order, are what `batch` stacks and
/// `prefetch_to_device` uploads; [`Example::OnDevice`] is the same shape
/// with each array a [`Tensor`].
pub trait Example: Sized + Send + 'static {
    /// The example on the device: each array a tensor.
    type OnDevice: Send + 'static;

    /// The arrays, in a fixed order.
    fn into_arrays(self, out: &mut Vec<HostArray>);

    /// Rebuilds an example from arrays in [`into_arrays`](Example::into_arrays)'s
    /// order.
    fn from_arrays(arrays: &mut std::vec::IntoIter<HostArray>) -> Result<Self>;

    /// Rebuilds the device form from tensors in the same order.
    fn on_device(tensors: &mut std::vec::IntoIter<Tensor>) -> Result<Self::OnDevice>;
}

fn missing() -> Error {
    Error::Value("data: an example has fewer arrays than its type has parts".into())
}

impl Example for HostArray {
    type OnDevice = Tensor;

    fn into_arrays(self, out: &mut Vec<HostArray>) {
        out.push(self);
    }

    fn from_arrays(arrays: &mut std::vec::IntoIter<HostArray>) -> Result<Self> {
        arrays.next().ok_or_else(missing)
    }

    fn on_device(tensors: &mut std::vec::IntoIter<Tensor>) -> Result<Tensor> {
        tensors.next().ok_or_else(missing)
    }
}

impl Example for Vec<HostArray> {
    type OnDevice = Vec<Tensor>;

    fn into_arrays(self, out: &mut Vec<HostArray>) {
        out.extend(self);
    }

    fn from_arrays(arrays: &mut std::vec::IntoIter<HostArray>) -> Result<Self> {
        Ok(arrays.collect())
    }

    fn on_device(tensors: &mut std::vec::IntoIter<Tensor>) -> Result<Vec<Tensor>> {
        Ok(tensors.collect())
    }
}

macro_rules! tuple_example {
    ($($part:ident),+) => {
        impl<$($part: Example),+> Example for ($($part,)+) {
            type OnDevice = ($($part::OnDevice,)+);

            #[allow(non_snake_case)]
            fn into_arrays(self, out: &mut Vec<HostArray>) {
                let ($($part,)+) = self;
                $($part.into_arrays(out);)+
            }

            fn from_arrays(arrays: &mut std::vec::IntoIter<HostArray>) -> Result<Self> {
                Ok(($($part::from_arrays(arrays)?,)+))
            }

            fn on_device(tensors: &mut std::vec::IntoIter<Tensor>) -> Result<Self::OnDevice> {
                Ok(($($part::on_device(tensors)?,)+))
            }
        }
    };
}

tuple_example!(A);
tuple_example!(A, B);
tuple_example!(A, B, C);
tuple_example!(A, B, C, D);

/// An example's arrays.
pub(crate) fn flatten<T: Example>(example: T) -> Vec<HostArray> {
    let mut out = Vec::new();
    example.into_arrays(&mut out);
    out
}

/// Rebuilds an example of type `T`, every array used.
pub(crate) fn unflatten<T: Example>(arrays: Vec<HostArray>) -> Result<T> {
    let count = arrays.len();
    let mut it = arrays.into_iter();
    let example = T::from_arrays(&mut it)?;
    if it.len() != 0 {
        return Err(Error::Value(format!(
            "data: an example of {count} arrays has more than its type {} takes",
            std::any::type_name::<T>()
        )));
    }
    Ok(example)
}

/// The number of elements `dims` holds, checked against overflow and
/// negative sizes.
fn element_count(dims: &[i64]) -> Result<usize> {
    dims.iter()
        .try_fold(1usize, |n, &d| {
            usize::try_from(d).ok().and_then(|d| n.checked_mul(d))
        })
        .ok_or_else(|| Error::Value(format!("data: shape {dims:?} is negative or too large")))
}

/// The bytes an array of `dtype` and `dims` would take, refused before
/// anything is allocated unless it could exist: within
/// [`check_array_size`](crate::dtype::check_array_size) (overflow-checked,
/// XLA's bound) and within the memory a program may use
/// ([`program_memory_bytes`](crate::dtype::program_memory_bytes), by
/// default the machine's memory). A larger host array could never be
/// allocated, let alone uploaded: asking for one would abort the process.
/// `what` names the array in the error.
pub(crate) fn array_bytes(dtype: DType, dims: &[i64], what: &str) -> Result<usize> {
    crate::dtype::check_array_size(dtype, dims).map_err(|e| e.context(&format!("data: {what}")))?;
    let bytes = element_count(dims)?
        .checked_mul(dtype.size_in_bytes()?)
        .ok_or_else(|| Error::Value(format!("data: {what} is too large")))?;
    let memory = crate::dtype::program_memory_bytes();
    if bytes as u64 > memory {
        return Err(Error::Value(format!(
            "data: {what}, a {dtype}{dims:?} array, would take {bytes} bytes, more than the \
             {memory} bytes of memory a program may use (XLAFN_PROGRAM_MEMORY_BYTES, by default \
             this machine's physical memory)"
        )));
    }
    Ok(bytes)
}

/// Checks that an array's bytes are what its dtype and dims call for (the
/// fields are public, so a hand-made array can disagree with itself).
pub(crate) fn check_array(a: &HostArray, what: &str) -> Result<()> {
    let want = element_count(&a.dims)?
        .checked_mul(a.dtype.size_in_bytes()?)
        .ok_or_else(|| Error::Value(format!("data: {what} is too large")))?;
    if a.bytes.len() != want {
        return Err(Error::Value(format!(
            "data: {what}, a {}{:?} array, needs {want} bytes but holds {}",
            a.dtype,
            a.dims,
            a.bytes.len()
        )));
    }
    Ok(())
}

/// Row `index` of `a` (its first axis dropped).
pub(crate) fn row(a: &HostArray, index: usize) -> HostArray {
    let dims = a.dims[1..].to_vec();
    let size = a.bytes.len() / a.dims[0].max(1) as usize;
    HostArray {
        dtype: a.dtype,
        dims,
        bytes: a.bytes[index * size..(index + 1) * size].to_vec(),
    }
}

/// Stacks the `part`th arrays of several examples along a new first axis.
pub(crate) fn stack(part: usize, arrays: Vec<HostArray>) -> Result<HostArray> {
    let first = &arrays[0];
    let (dtype, dims) = (first.dtype, first.dims.clone());
    for (i, a) in arrays.iter().enumerate() {
        if a.dtype != dtype || a.dims != dims {
            return Err(Error::Value(format!(
                "data: batch: part {part} of example {i} in the batch is {}{:?}, but example 0's \
                 is {dtype}{dims:?}; use padded_batch for examples of different shapes",
                a.dtype, a.dims
            )));
        }
        check_array(a, &format!("part {part} of example {i}"))?;
    }
    let mut out_dims = vec![arrays.len() as i64];
    out_dims.extend(&dims);
    let mut bytes = Vec::with_capacity(first.bytes.len() * arrays.len());
    arrays
        .iter()
        .for_each(|a| bytes.extend_from_slice(&a.bytes));
    Ok(HostArray {
        dtype,
        dims: out_dims,
        bytes,
    })
}

/// Copies `a` into a `dims`-shaped array filled with `fill` (one element's
/// bytes), at the origin; `dims` is refused first, as [`array_bytes`]
/// decides (`what` names the result).
pub(crate) fn pad_to(a: &HostArray, dims: &[i64], fill: &[u8], what: &str) -> Result<HostArray> {
    let size = fill.len();
    let total = array_bytes(a.dtype, dims, what)? / size;
    let mut bytes = fill.repeat(total);
    if a.dims.is_empty() {
        bytes[..size].copy_from_slice(&a.bytes);
    } else if !a.bytes.is_empty() {
        copy_block(&a.bytes, &a.dims, &mut bytes, dims, size);
    }
    Ok(HostArray {
        dtype: a.dtype,
        dims: dims.to_vec(),
        bytes,
    })
}

/// Copies a row-major block of `src_dims` into the corner of a larger one.
fn copy_block(src: &[u8], src_dims: &[i64], dst: &mut [u8], dst_dims: &[i64], size: usize) {
    if src_dims.len() == 1 {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    let src_row: usize = src_dims[1..].iter().product::<i64>() as usize * size;
    let dst_row: usize = dst_dims[1..].iter().product::<i64>() as usize * size;
    for r in 0..src_dims[0] as usize {
        copy_block(
            &src[r * src_row..(r + 1) * src_row],
            &src_dims[1..],
            &mut dst[r * dst_row..(r + 1) * dst_row],
            &dst_dims[1..],
            size,
        );
    }
}

/// The bytes of `value` as one element of `dtype`.
pub(crate) fn fill_bytes(value: Scalar, dtype: DType) -> Result<Vec<u8>> {
    crate::tensor::scalar_bytes(value, dtype)
}

/// Uploads an example's arrays to `placement`.
pub(crate) fn upload<T: Example>(example: T, placement: &Placement) -> Result<T::OnDevice> {
    let tensors = flatten(example)
        .iter()
        .map(|a| placement.upload(a))
        .collect::<Result<Vec<Tensor>>>()?;
    T::on_device(&mut tensors.into_iter())
}
