//! `TensorArray`: a list of same-typed tensors that can be loop state, for
//! accumulating values in a compiled loop (the guide's "Accumulating values
//! in a loop").
//!
//! It is stored as one buffer of shape `[capacity, ...element_shape]`;
//! `write` is a `dynamic_update_slice` and `read` a `dynamic_slice`, so a
//! loop that writes element `i` compiles to an in-place update on the
//! device. Like TensorFlow's, it is functional: `write` returns the updated
//! array (`ta = ta.write(i, x)?`).
//!
//! Under XLA every shape is static, so the capacity must be known when the
//! array is traced. A fixed size is; an unbounded dynamic array
//! (`TensorArray::dynamic`, TensorFlow's `dynamic_size=True`) grows as it
//! is written while its indices are known on the host: eagerly, and inside
//! a traced function as long as it is written from host loops (the API
//! page's `for i in range(n): ta = ta.write(i, ...)`). Written at an index
//! known only on the device (inside a `while_loop`/`for_range` body) it
//! needs a bound, `TensorArray::dynamic(dtype)?.with_max_size(n)`, and its
//! size is then a device value, so `stack()` has no static shape: use a
//! fixed size when the trip count is known, or `stack_padded()`.
//!
//! The element shape comes from the first write, or from
//! `with_element_shape`. When the first write happens inside a loop body,
//! `while_loop` learns it from a trial trace of the body and allocates the
//! array before the loop (see [`Output::define_like`]), as TensorFlow
//! infers it.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::function::args::IntoArg;
use crate::function::output::Output;
use crate::tensor::Tensor;
use crate::trace;

#[derive(Clone)]
enum Size {
    /// Known on the host: a fixed-size array.
    Fixed(i64),
    /// Tracked on the device (i32 scalar): a dynamic array.
    Dynamic(Tensor),
}

/// A list of tensors of one dtype and element shape.
///
/// ```
/// use xlafn::prelude::*;
/// // Squares of 0..4, written one element per iteration of a device loop.
/// let squares = function(|n: Tensor| -> Result<Tensor> {
///     let ta = TensorArray::new(DType::F32, 4);
///     let ta = for_range(0, &n, 1, ta, |i, ta| {
///         let x = i.cast(DType::F32)?;
///         ta.write(&i, &(&x * &x))
///     })?;
///     ta.stack()
/// });
/// let y = squares.call((Tensor::scalar(4i32),))?;
/// assert_eq!(y.to_vec::<f32>()?, vec![0., 1., 4., 9.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone)]
pub struct TensorArray {
    dtype: DType,
    size: Size,
    /// Capacity (fixed size or bound); `None` for an unbounded dynamic array.
    capacity: Option<i64>,
    element_shape: Option<Vec<i64>>,
    /// `[capacity, ...element_shape]`, once the element shape is known.
    buffer: Option<Tensor>,
}

fn op_error(message: impl Into<String>) -> Error {
    Error::invalid("TensorArray", message)
}

impl TensorArray {
    /// A fixed-size array of `size` elements of `dtype`.
    pub fn new(dtype: DType, size: i64) -> TensorArray {
        TensorArray {
            dtype,
            size: Size::Fixed(size),
            capacity: Some(size),
            element_shape: None,
            buffer: None,
        }
    }

    /// An empty array that grows as elements are written. Inside a traced
    /// function it needs a bound: see [`TensorArray::with_max_size`].
    pub fn dynamic(dtype: DType) -> Result<TensorArray> {
        let zero = Tensor::try_scalar(0i32)?;
        Ok(TensorArray {
            dtype,
            size: Size::Dynamic(zero),
            capacity: None,
            element_shape: None,
            buffer: None,
        })
    }

    /// Bounds a dynamic array's capacity, which compiled code needs.
    pub fn with_max_size(mut self, max_size: i64) -> TensorArray {
        self.capacity = Some(max_size);
        self
    }

    /// Declares the element shape before the first write, so the array has
    /// its final shape at once (needed for loop state: a `while_loop`'s
    /// state may not change structure inside the loop). Allocates the
    /// buffer when the capacity is known.
    pub fn with_element_shape(mut self, dims: &[i64]) -> Result<TensorArray> {
        self.element_shape = Some(dims.to_vec());
        if let (Some(capacity), None) = (self.capacity, &self.buffer) {
            self.buffer = Some(Tensor::fill(
                &[&[capacity][..], dims].concat(),
                0,
                self.dtype,
            )?);
        }
        Ok(self)
    }

    /// An array holding the slices of `t` along its first dimension.
    pub fn unstack(t: &Tensor) -> Result<TensorArray> {
        let dims = t
            .shape()
            .as_known()
            .filter(|d| !d.is_empty())
            .ok_or_else(|| {
                op_error(format!(
                    "unstack needs a tensor of known shape and rank >= 1, got {}",
                    t.tensor_type()
                ))
            })?;
        Ok(TensorArray {
            dtype: t.dtype(),
            size: Size::Fixed(dims[0]),
            capacity: Some(dims[0]),
            element_shape: Some(dims[1..].to_vec()),
            buffer: Some(t.clone()),
        })
    }

    /// The element type every element must have.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The number of elements (an i32 scalar tensor).
    pub fn size(&self) -> Result<Tensor> {
        match &self.size {
            Size::Fixed(n) => i64_scalar(*n),
            Size::Dynamic(t) => Ok(t.clone()),
        }
    }

    /// Returns the array with element `index` set to `value`.
    pub fn write(&self, index: impl IntoArg<Tensor>, value: &Tensor) -> Result<TensorArray> {
        let index = index.into_arg()?;
        // An index known on the host (a host number, an eager tensor) lets
        // an unbounded array grow, and its size stay known, while tracing.
        let host_index = trace::static_scalar(&index).map(|s| s.as_i64());
        let index = index.cast(DType::I32)?;
        if value.dtype() != self.dtype {
            return Err(op_error(format!(
                "cannot write a {} tensor into a {} array",
                value.dtype(),
                self.dtype
            )));
        }
        if self.capacity.is_none() && host_index.is_none() {
            return Err(op_error(
                "a dynamically sized TensorArray written at an index known only on the device \
                 (inside a while_loop or for_range body) needs a bound inside a compiled \
                 function: use TensorArray::dynamic(dtype)?.with_max_size(n), or a fixed size \
                 TensorArray::new(dtype, n)",
            ));
        }
        if let Some(i) = host_index
            && (i < 0 || self.capacity.is_some_and(|c| i >= c))
        {
            return Err(op_error(format!(
                "index {i} is out of range for an array of {} elements",
                self.capacity
                    .map_or("a growing number of".to_string(), |c| c.to_string())
            )));
        }
        let mut next = self.with_buffer_for(value)?;
        if let (None, Some(i)) = (next.capacity, host_index) {
            next = next.grown_for(i)?;
        }
        let buffer = next.buffer.as_ref().expect("buffer allocated");
        let update = value.expand_dims(0)?;
        let starts = next.starts(&index)?;
        next.buffer = Some(buffer.dynamic_update_slice(&update, &starts)?);
        if let Size::Dynamic(size) = &next.size {
            let known = trace::static_scalar(size).map(|s| s.as_i64());
            next.size = Size::Dynamic(match (known, host_index) {
                (Some(known), Some(i)) => Tensor::try_scalar(known.max(i + 1) as i32)?,
                _ => size.maximum(&index.add_scalar(1)?)?,
            });
        }
        Ok(next)
    }

    /// Element `index`.
    pub fn read(&self, index: impl IntoArg<Tensor>) -> Result<Tensor> {
        let index = index.into_arg()?.cast(DType::I32)?;
        let (buffer, elem) = match (&self.buffer, &self.element_shape) {
            (Some(b), Some(e)) => (b, e),
            _ => {
                return Err(op_error(
                    "read from an array that has no elements and no element shape",
                ));
            }
        };
        let mut sizes = vec![1];
        sizes.extend(elem);
        buffer
            .dynamic_slice(&self.starts(&index)?, &sizes)?
            .squeeze(&[0])
    }

    /// All elements stacked along a new first dimension.
    pub fn stack(&self) -> Result<Tensor> {
        let elem = self
            .element_shape
            .clone()
            .ok_or_else(|| op_error("stack of an array with unknown element shape"))?;
        let buffer = match &self.buffer {
            Some(b) => b.clone(),
            None => Tensor::fill(
                &[&[self.capacity.unwrap_or(0)][..], &elem].concat(),
                0,
                self.dtype,
            )?,
        };
        match &self.size {
            Size::Fixed(_) => Ok(buffer),
            Size::Dynamic(size) if trace::static_scalar(size).is_some() => {
                let n = trace::static_scalar(size).expect("checked").as_i64();
                let mut sizes = vec![n];
                sizes.extend(&elem);
                buffer.slice(&vec![0; sizes.len()], &sizes)
            }
            Size::Dynamic(_) => Err(op_error(
                "stack() of a dynamically sized TensorArray whose size is known only on the \
                 device (it was written inside a device loop) has no static shape in a compiled \
                 function: give the array a fixed size (TensorArray::new(dtype, n)) when the trip \
                 count is known, or use stack_padded() for the [max_size, ...] buffer and the size",
            )),
        }
    }

    /// All `capacity` slots stacked (unwritten ones are zeros) and the
    /// number of elements: what a bounded dynamic array written inside a
    /// device loop can give with static shapes.
    pub fn stack_padded(&self) -> Result<(Tensor, Tensor)> {
        let elem = self
            .element_shape
            .clone()
            .ok_or_else(|| op_error("stack of an array with unknown element shape"))?;
        let buffer = match &self.buffer {
            Some(b) => b.clone(),
            None => Tensor::fill(
                &[&[self.capacity.unwrap_or(0)][..], &elem].concat(),
                0,
                self.dtype,
            )?,
        };
        Ok((buffer, self.size()?))
    }

    fn starts(&self, index: &Tensor) -> Result<Vec<Tensor>> {
        let rank = self.element_shape.as_ref().map_or(0, Vec::len);
        let mut starts = vec![index.clone()];
        for _ in 0..rank {
            starts.push(index.zeros_like()?);
        }
        Ok(starts)
    }

    /// Allocates the buffer (zeros) once the element shape is known.
    fn with_buffer_for(&self, value: &Tensor) -> Result<TensorArray> {
        let shape = value.shape().as_known().ok_or_else(|| {
            op_error(format!(
                "elements must have a known shape, got {}",
                value.tensor_type()
            ))
        })?;
        if let Some(e) = &self.element_shape
            && *e != shape
        {
            return Err(op_error(format!(
                "elements have shape {e:?}; cannot write one of shape {shape:?}"
            )));
        }
        let mut next = self.clone();
        next.element_shape = Some(shape.clone());
        if next.buffer.is_none() {
            // An unbounded array starts empty and grows with host indices.
            let capacity = self.capacity.unwrap_or(0);
            next.buffer = Some(Tensor::fill(
                &[&[capacity][..], &shape].concat(),
                0,
                self.dtype,
            )?);
        }
        Ok(next)
    }

    /// Grows an unbounded array's buffer (at least doubling it) until
    /// host index `i` fits.
    fn grown_for(mut self, i: i64) -> Result<TensorArray> {
        let buffer = self.buffer.clone().expect("buffer allocated");
        let have = buffer.dims()[0];
        if i < have {
            return Ok(self);
        }
        let want = (i + 1).max(have * 2);
        let mut extra_dims = buffer.dims();
        extra_dims[0] = want - have;
        let extra = Tensor::fill(&extra_dims, 0, self.dtype)?;
        self.buffer = Some(Tensor::concat(&[buffer, extra], 0)?);
        Ok(self)
    }
}

fn i64_scalar(n: i64) -> Result<Tensor> {
    if trace::is_tracing() {
        return Tensor::fill(&[], n, DType::I32);
    }
    Tensor::try_scalar(n as i32)
}

/// A `TensorArray` is loop state: its buffer and (if dynamic) its size
/// tensor travel through `while_loop`.
impl Output for TensorArray {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let Some(b) = &self.buffer {
            out.push(b.clone());
        }
        if let Size::Dynamic(s) = &self.size {
            out.push(s.clone());
        }
    }

    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        let mut t = template.clone();
        if t.buffer.is_some() {
            t.buffer = tensors.next();
        }
        if let Size::Dynamic(_) = &t.size {
            t.size = Size::Dynamic(tensors.next().expect("size tensor"));
        }
        t
    }

    fn describe(&self) -> String {
        format!("TensorArray[{}]", self.dtype)
    }

    /// An array with no buffer yet (no element shape) carries no tensors:
    /// as loop state it must be allocated before the loop.
    fn is_defined(&self) -> bool {
        self.buffer.is_some() || self.capacity.is_none()
    }

    /// Allocates the buffer with the element shape a trial trace of the
    /// loop body gave its first write.
    fn define_like(self, like: &Self) -> Result<Self> {
        match (&self.buffer, &like.element_shape, self.capacity) {
            (None, Some(elem), Some(_)) => self.with_element_shape(elem),
            _ => Ok(self),
        }
    }
}
