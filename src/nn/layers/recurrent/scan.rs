//! The loop over time every recurrent layer runs: the input projection
//! as one matmul before the loop, the initial states, masks, and the one
//! `for_range` whose steps read their row of the projection and write
//! their output. With the batch unknown (a trace for any batch) the rows
//! are read by gather and written in place, as a `TensorArray` needs every
//! dimension known.
//!
//! Layer: nn::layers (recurrent). Imports `tensor` ops, `control`
//! (`for_range`, `TensorArray`), `dtype` and `error`.

use super::RnnOutput;
use crate::control::{TensorArray, for_range};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The options every recurrent layer shares.
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct Options {
    pub(super) return_sequences: bool,
    pub(super) go_backwards: bool,
    pub(super) zero_output_for_mask: bool,
}

/// One step: the step's projected input `[batch, gates * units]` and the
/// states to the new states (the output is the first).
type Step<'a> = dyn Fn(&Tensor, &[Tensor]) -> Result<Vec<Tensor>> + 'a;

/// The `[batch, time, features]` dims of `x`: time and features known,
/// the batch -1 when unknown (a trace for any batch).
pub(super) fn sequence_dims(op: &str, x: &Tensor) -> Result<[i64; 3]> {
    match x.shape().dims() {
        Some(&[b, Some(t), Some(f)]) if t > 0 && x.dtype().is_float() => {
            Ok([b.unwrap_or(-1), t, f])
        }
        _ => Err(Error::invalid(
            op,
            format!(
                "needs a float input [batch, time, features] of known time and features with \
                 at least one step, got {}",
                x.tensor_type()
            ),
        )),
    }
}

/// Do `dims` fit `[batch, rest..]`, an unknown batch (-1) on either side
/// fitting any?
fn fits_batch(dims: &[i64], batch: i64, rest: &[i64]) -> bool {
    dims.len() == rest.len() + 1
        && (dims[0] == batch || dims[0] == -1 || batch == -1)
        && dims[1..] == *rest
}

/// Zeros `[batch, units]` in the dtype of `projected` (`[time, batch,
/// gates * units]`), and, when the batch is unknown, zeros `[time, batch,
/// units]` to hold the output sequence: made from `projected`'s shape, as
/// a trace for any batch has no batch size to make them from.
pub(super) fn zero_states(projected: &Tensor, units: i64) -> Result<(Tensor, Option<Tensor>)> {
    let dims = projected.dims();
    let (batch, dtype) = (dims[1], projected.dtype());
    if batch >= 0 {
        return Ok((Tensor::try_zeros(&[batch, units], dtype)?, None));
    }
    let gates = dims[2] / units;
    let sequence = projected.split(gates, 2)?.swap_remove(0).zeros_like()?;
    Ok((sequence.reduce_sum(&[0], false)?, Some(sequence)))
}

/// The initial states: given ones checked, or `zeros` (`[batch, units]`).
pub(super) fn initial_states(
    op: &str,
    given: Option<&[Tensor]>,
    count: usize,
    zeros: &Tensor,
    dtype: DType,
) -> Result<Vec<Tensor>> {
    let Some(given) = given else {
        return Ok(vec![zeros.clone(); count]);
    };
    let [batch, units] = [zeros.dims()[0], zeros.dims()[1]];
    let fits = given.len() == count
        && given
            .iter()
            .all(|s| fits_batch(&s.dims(), batch, &[units]) && s.dtype() == dtype);
    if !fits {
        let got: Vec<String> = given.iter().map(|s| s.tensor_type().to_string()).collect();
        let batch = if batch < 0 {
            "None".to_string()
        } else {
            batch.to_string()
        };
        return Err(Error::invalid(
            op,
            format!(
                "needs {count} initial states {dtype}[{batch}, {units}], got [{}]",
                got.join(", ")
            ),
        ));
    }
    Ok(given.to_vec())
}

/// A `[batch, time]` mask as bool `[time, batch, 1]`.
pub(super) fn time_major_mask(op: &str, mask: &Tensor, batch: i64, time: i64) -> Result<Tensor> {
    let dtype = mask.dtype();
    let known_rank = mask.shape().dims().is_some();
    if !known_rank
        || !fits_batch(&mask.dims(), batch, &[time])
        || !(dtype == DType::Bool || dtype.is_int())
    {
        return Err(Error::invalid(
            op,
            format!(
                "needs a bool or integer mask [{batch}, {time}], got {}",
                mask.tensor_type()
            ),
        ));
    }
    let mask = if dtype == DType::Bool {
        mask.clone()
    } else {
        mask.ne(&Tensor::try_scalar(0i64)?.cast(dtype)?)?
    };
    mask.transpose(&[1, 0])?.expand_dims(2)
}

/// The loop over time shared by the layers. `projected` is `x @ kernel +
/// bias` time-major `[time, batch, gates * units]`.
pub(super) fn scan(
    projected: &Tensor,
    states: Vec<Tensor>,
    mask: Option<Tensor>,
    (zeros, unknown_batch_sequence): (Tensor, Option<Tensor>),
    opts: Options,
    step: &Step<'_>,
) -> Result<RnnOutput> {
    let dims = projected.dims();
    let (time, batch, dtype) = (dims[0], dims[1], projected.dtype());
    let units = zeros.dims()[1];
    let (projected, mask) = if opts.go_backwards {
        let mask = mask.map(|m| m.reverse(&[0])).transpose()?;
        (projected.reverse(&[0])?, mask)
    } else {
        (projected.clone(), mask)
    };
    let inputs = TimeMajor::new(&projected)?;
    let masks = mask.as_ref().map(TimeMajor::new).transpose()?;
    let n = states.len();
    // With a mask the previous output is carried too: it differs from
    // the state before the first real step (zeros, whatever the state).
    let mut carry = states;
    if masks.is_some() {
        carry.push(zeros.clone());
    }
    // The output sequence: a TensorArray, or with the batch unknown a
    // `[time, batch, units]` buffer carried last and written in place.
    let held_at = carry.len();
    let sequence = match (opts.return_sequences, unknown_batch_sequence) {
        (false, _) => None,
        (true, Some(buffer)) => {
            carry.push(buffer);
            None
        }
        (true, None) => Some(TensorArray::new(dtype, time).with_element_shape(&[batch, units])?),
    };
    let buffered = opts.return_sequences && sequence.is_none();
    let (carry, sequence) = for_range(
        0i64,
        time,
        1i64,
        (carry, sequence),
        |i, (carry, sequence): (Vec<Tensor>, Option<TensorArray>)| -> Result<_> {
            let new = step(&inputs.read(&i)?, &carry[..n])?;
            let (mut next, out) = match &masks {
                None => {
                    let out = new[0].clone();
                    (new, out)
                }
                Some(masks) => {
                    let m = masks.read(&i)?;
                    let mut next = new
                        .iter()
                        .zip(&carry)
                        .map(|(new, old)| m.where_(new, old))
                        .collect::<Result<Vec<_>>>()?;
                    let held = if opts.zero_output_for_mask {
                        &zeros
                    } else {
                        &carry[n]
                    };
                    let out = m.where_(&new[0], held)?;
                    next.push(out.clone());
                    (next, out)
                }
            };
            if buffered {
                next.push(TimeMajor::write(&carry[held_at], &i, &out)?);
            }
            let sequence = sequence.map(|s| s.write(&i, &out)).transpose()?;
            Ok((next, sequence))
        },
    )?;
    // The last output: the carried one with a mask, else the new h.
    let outputs = match sequence {
        Some(s) => s.stack()?.transpose(&[1, 0, 2])?,
        None if buffered => carry[held_at].transpose(&[1, 0, 2])?,
        None if masks.is_some() => carry[n].clone(),
        None => carry[0].clone(),
    };
    Ok(RnnOutput {
        outputs,
        states: carry[..n].to_vec(),
    })
}

/// Steps of a time-major tensor, read inside the loop over time: a
/// `TensorArray` when its shape is known, else (the batch unknown, in a
/// trace for any batch) a gather of step `i`, which needs no sizes.
enum TimeMajor {
    Known(TensorArray),
    AnyBatch(Tensor),
}

impl TimeMajor {
    fn new(t: &Tensor) -> Result<TimeMajor> {
        match t.shape().as_known() {
            Some(_) => Ok(TimeMajor::Known(TensorArray::unstack(t)?)),
            None => Ok(TimeMajor::AnyBatch(t.clone())),
        }
    }

    fn read(&self, i: &Tensor) -> Result<Tensor> {
        match self {
            TimeMajor::Known(a) => a.read(i),
            TimeMajor::AnyBatch(t) => t.gather(&i.cast(DType::I32)?, 0),
        }
    }

    /// `buffer` (`[time, batch, units]`) with step `i` set to `value`.
    fn write(buffer: &Tensor, i: &Tensor, value: &Tensor) -> Result<Tensor> {
        let i = i.cast(DType::I32)?;
        let zero = Tensor::try_scalar(0i32)?;
        buffer.dynamic_update_slice(&value.expand_dims(0)?, &[i, zero.clone(), zero])
    }
}

/// `x` `[batch, time, features]` times `kernel` `[features, width]` plus
/// `bias`, as one matmul, time-major `[time, batch, width]`.
pub(super) fn project_inputs(x: &Tensor, kernel: &Tensor, bias: Option<&Tensor>) -> Result<Tensor> {
    // The batch may be unknown (-1): reshapes leave it to the element count.
    let [b, t, f] = [x.dims()[0], x.dims()[1], x.dims()[2]];
    let width = kernel.dims()[1];
    let rows = if b < 0 { -1 } else { t * b };
    let y = x
        .transpose(&[1, 0, 2])?
        .reshape(&[rows, f])?
        .matmul(kernel)?;
    let y = match bias {
        Some(bias) => y.add(bias)?,
        None => y,
    };
    y.reshape(&[t, b, width])
}
