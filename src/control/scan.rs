//! `scan`: a loop over the leading axis of arrays with a carried state,
//! stacking each step's outputs (`lax.scan`, `tf.scan`). Traced, it is one
//! `for_range` loop: one `while` op whatever the length, whose gradient
//! reads what the forward loop recorded per step (see `for_range`);
//! eagerly, a Rust loop of eager steps.

use super::{TensorArray, flat, for_range};
use crate::error::{Error, Result};
use crate::function::output::Output;
use crate::ir::TensorType;
use crate::tensor::Tensor;
use crate::trace;

/// How [`scan_with`] walks the sequence.
#[derive(Clone, Copy, Debug)]
pub struct ScanOptions {
    reverse: bool,
    unroll: usize,
    length: Option<i64>,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            reverse: false,
            unroll: 1,
            length: None,
        }
    }
}

impl ScanOptions {
    /// Forward, one step per loop iteration, the length from `xs`.
    pub fn new() -> ScanOptions {
        ScanOptions::default()
    }

    /// Runs from the last element to the first (`reverse=True`); the
    /// outputs stay aligned with the inputs (output `t` is step `t`'s).
    pub fn reverse(mut self, reverse: bool) -> ScanOptions {
        self.reverse = reverse;
        self
    }

    /// Steps per loop iteration (`unroll`, at least 1): the loop body
    /// holds `unroll` copies of the step, so XLA can fuse across steps;
    /// the remainder of the length runs after the loop.
    pub fn unroll(mut self, unroll: usize) -> ScanOptions {
        self.unroll = unroll.max(1);
        self
    }

    /// The number of steps, for a scan with no `xs` (`length=`); with
    /// `xs` it must equal their leading dimension.
    pub fn length(mut self, length: i64) -> ScanOptions {
        self.length = Some(length);
        self
    }
}

/// `scan(f, init, xs)`: `carry = init`, then for each `t`,
/// `(carry, ys[t]) = f(carry, xs[t])`; returns the last carry and the
/// stacked `ys` (`jax.lax.scan`). `xs` and the outputs are structures of
/// tensors (a tensor, a tuple, a `Vec`); each tensor of `xs` is sliced
/// along its first axis, and they must agree on its length. The carry
/// must keep its dtypes and shapes from step to step. A scan of zero
/// steps returns `init` and empty (`[0, ...]`) outputs of the types a
/// step gives, as `lax.scan` does: the step is traced aside to learn them,
/// and nothing of it runs.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::control::scan;
/// // A running sum and the partial sums.
/// let cumsum = function(|xs: Tensor| {
///     scan(|total: Tensor, x: Tensor| { let t = total + x; Ok((t.clone(), t)) }, Tensor::scalar(0f32), xs)
/// });
/// let (total, partial) = cumsum.call((Tensor::vector(&[1f32, 2., 3., 4.])?,))?;
/// assert_eq!(total.item::<f32>()?, 10.0);
/// assert_eq!(partial.to_vec::<f32>()?, vec![1., 3., 6., 10.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn scan<C, X, Y>(f: impl FnMut(C, X) -> Result<(C, Y)>, init: C, xs: X) -> Result<(C, Y)>
where
    C: Output,
    X: Output,
    Y: Output,
{
    scan_with(f, init, xs, ScanOptions::new())
}

/// [`scan`] with [`ScanOptions`] (`reverse`, `unroll`, `length`).
#[track_caller]
pub fn scan_with<C, X, Y>(
    mut f: impl FnMut(C, X) -> Result<(C, Y)>,
    init: C,
    xs: X,
    options: ScanOptions,
) -> Result<(C, Y)>
where
    C: Output,
    X: Output,
    Y: Output,
{
    let xs_flat = flat(&xs);
    let length = scan_length(&xs_flat, options.length)?;
    if length == 0 {
        return zero_steps(&mut f, init, &xs);
    }
    let inputs = xs_flat
        .iter()
        .map(TensorArray::unstack)
        .collect::<Result<Vec<_>>>()?;
    let mut step = |carry: C, index: &Tensor| -> Result<(C, Y)> {
        let slices = inputs
            .iter()
            .map(|a| a.read(index))
            .collect::<Result<Vec<_>>>()?;
        f(carry, X::rebuild(&xs, &mut slices.into_iter()))
    };
    let order = |t: i64| if options.reverse { length - 1 - t } else { t };
    if !trace::is_tracing() {
        return eager(&mut step, init, length, order);
    }
    let (ys_template, y_types) = learn_outputs(&mut step, &init)?;
    let arrays = y_types
        .iter()
        .map(|t| output_array(t, length))
        .collect::<Result<Vec<_>>>()?;
    // More copies than steps would only be dead code (and a huge count
    // must not wrap when it becomes an i64).
    let unroll = (options.unroll as u64).min(length.max(1) as u64) as i64;
    let one_step =
        |carry: C, arrays: Vec<TensorArray>, t: &Tensor| -> Result<(C, Vec<TensorArray>)> {
            let (carry, y) = step(carry, t)?;
            let arrays = arrays
                .iter()
                .zip(flat(&y))
                .map(|(a, y)| a.write(t, &y))
                .collect::<Result<Vec<_>>>()?;
            Ok((carry, arrays))
        };
    let mut one_step = one_step;
    let rounds = length / unroll;
    let (carry, arrays) = for_range(
        0i64,
        rounds,
        1i64,
        (init, arrays),
        |i, (mut carry, mut arrays): (C, Vec<TensorArray>)| -> Result<(C, Vec<TensorArray>)> {
            for u in 0..unroll {
                let forward = i.mul_scalar(unroll)?.add_scalar(u)?;
                let t = if options.reverse {
                    forward.neg()?.add_scalar(length - 1)?
                } else {
                    forward
                };
                (carry, arrays) = one_step(carry, arrays, &t)?;
            }
            Ok((carry, arrays))
        },
    )?;
    // The steps that do not fill a whole unrolled iteration.
    let (mut carry, mut arrays) = (carry, arrays);
    for t in rounds * unroll..length {
        let index = Tensor::try_scalar(order(t))?;
        (carry, arrays) = one_step(carry, arrays, &index)?;
    }
    let stacked = arrays
        .iter()
        .map(TensorArray::stack)
        .collect::<Result<Vec<_>>>()?;
    Ok((carry, Y::rebuild(&ys_template, &mut stacked.into_iter())))
}

/// The number of steps: the common leading dimension of `xs`, or the
/// `length` option.
fn scan_length(xs: &[Tensor], length: Option<i64>) -> Result<i64> {
    let mut found = length;
    for (k, x) in xs.iter().enumerate() {
        let lead = x
            .shape()
            .as_known()
            .and_then(|d| d.first().copied())
            .ok_or_else(|| {
                Error::invalid(
                    "scan",
                    format!(
                        "xs part {k} needs a known leading dimension, got {}",
                        x.tensor_type()
                    ),
                )
            })?;
        match found {
            Some(n) if n != lead => {
                return Err(Error::invalid(
                    "scan",
                    format!(
                        "xs part {k} has leading dimension {lead}, but the scan's length is {n} \
                         (every part of xs, and the length option, must agree)"
                    ),
                ));
            }
            _ => found = Some(lead),
        }
    }
    let n = found.ok_or_else(|| {
        Error::invalid(
            "scan",
            "with no xs, give the number of steps with ScanOptions::length",
        )
    })?;
    if n < 0 {
        return Err(Error::invalid("scan", format!("length {n} is negative")));
    }
    Ok(n)
}

/// Eagerly: a Rust loop; each step's outputs are stacked at its index.
fn eager<C: Output, Y: Output>(
    step: &mut impl FnMut(C, &Tensor) -> Result<(C, Y)>,
    init: C,
    length: i64,
    order: impl Fn(i64) -> i64,
) -> Result<(C, Y)> {
    let carry_types: Vec<TensorType> = flat(&init).iter().map(Tensor::tensor_type).collect();
    let mut carry = init;
    // Grown step by step: a huge `length` costs time as it runs, never a
    // huge allocation up front.
    let mut outputs: Vec<(i64, Vec<Tensor>)> = Vec::new();
    let mut template = None;
    for t in 0..length {
        let index = order(t);
        let (next, y) = step(carry, &Tensor::try_scalar(index)?)?;
        let next_types: Vec<TensorType> = flat(&next).iter().map(Tensor::tensor_type).collect();
        check_carry_kept(&carry_types, &next_types)?;
        carry = next;
        outputs.push((index, flat(&y)));
        template.get_or_insert(y);
    }
    outputs.sort_by_key(|(index, _)| *index);
    let template = template.expect("a scan of zero steps returns before its loop");
    let per_step: Vec<Vec<Tensor>> = outputs.into_iter().map(|(_, y)| y).collect();
    let stacked = (0..per_step[0].len())
        .map(|k| {
            Tensor::stack(
                &per_step.iter().map(|y| y[k].clone()).collect::<Vec<_>>(),
                0,
            )
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((carry, Y::rebuild(&template, &mut stacked.into_iter())))
}

/// Traces one step aside (nothing of it enters the program) to learn the
/// outputs' structure and types.
fn learn_outputs<C: Output, Y: Output>(
    step: &mut impl FnMut(C, &Tensor) -> Result<(C, Y)>,
    init: &C,
) -> Result<(Y, Vec<TensorType>)> {
    let carry_types: Vec<TensorType> = flat(init).iter().map(Tensor::tensor_type).collect();
    trace::trial(&carry_types, |args| {
        let carry = C::rebuild(init, &mut args.into_iter());
        let (next, y) = step(carry, &Tensor::try_scalar(0i64)?)?;
        let next_types: Vec<TensorType> = flat(&next).iter().map(Tensor::tensor_type).collect();
        check_carry_kept(&carry_types, &next_types)?;
        let types: Vec<TensorType> = flat(&y).iter().map(Tensor::tensor_type).collect();
        Ok((y, types))
    })
}

/// A fixed-size array for one output, `length` elements of its type.
fn output_array(t: &TensorType, length: i64) -> Result<TensorArray> {
    let dims = t.shape.as_known().ok_or_else(|| {
        Error::invalid(
            "scan",
            format!("a step's output {t} needs a known shape to be stacked"),
        )
    })?;
    TensorArray::new(t.dtype, length).with_element_shape(&dims)
}

/// Zero steps, as `lax.scan`: the carry is `init` and each output is
/// empty, `[0, ...]` of the type a step would give it, learned from one
/// step traced aside on placeholders of one slice of `xs` (nothing of it
/// runs or enters the program).
fn zero_steps<C: Output, X: Output, Y: Output>(
    f: &mut impl FnMut(C, X) -> Result<(C, Y)>,
    init: C,
    xs: &X,
) -> Result<(C, Y)> {
    let carry_flat = flat(&init);
    let xs_flat = flat(xs);
    let mut types: Vec<TensorType> = carry_flat.iter().map(Tensor::tensor_type).collect();
    for x in &xs_flat {
        let dims = x.dims();
        types.push(TensorType::new(
            x.dtype(),
            crate::ir::Shape::known(&dims[1..]),
        ));
    }
    let (template, y_types, carry_types) = trace::trial(&types, |args| {
        let mut args = args.into_iter();
        let carry = C::rebuild(&init, &mut args);
        let x = X::rebuild(xs, &mut args);
        let (carry, y) = f(carry, x)?;
        let y_types: Vec<TensorType> = flat(&y).iter().map(Tensor::tensor_type).collect();
        let carry_types: Vec<TensorType> = flat(&carry).iter().map(Tensor::tensor_type).collect();
        Ok((y, y_types, carry_types))
    })?;
    let before: Vec<TensorType> = carry_flat.iter().map(Tensor::tensor_type).collect();
    check_carry_kept(&before, &carry_types)?;
    let empty = y_types
        .iter()
        .map(|t| output_array(t, 0)?.stack())
        .collect::<Result<Vec<_>>>()?;
    Ok((init, Y::rebuild(&template, &mut empty.into_iter())))
}

/// Errors unless a step's carry `after` has the types it entered with,
/// `before`: a traced scan is one loop whose carry cannot change type,
/// and an eager scan holds to the same rule rather than accept what the
/// compiled one refuses.
fn check_carry_kept(before: &[TensorType], after: &[TensorType]) -> Result<()> {
    if before == after {
        return Ok(());
    }
    Err(Error::invalid(
        "scan",
        format!(
            "the step changes the carry from [{}] to [{}]; the carry must keep its dtypes and \
             shapes",
            describe(before),
            describe(after)
        ),
    ))
}

fn describe(types: &[TensorType]) -> String {
    types
        .iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join(", ")
}
