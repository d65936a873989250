//! Padding of convolution and pooling windows in TensorFlow's terms:
//! `VALID`, `SAME` (`ceil(input / stride)` outputs, the odd padding
//! element after) and explicit `(low, high)` pairs. The sizes come from
//! the caller, so `SAME`'s arithmetic is checked and done in i128: a
//! stride of 0 or a window past `i64` is an error naming the op, not a
//! division by zero or a wrapped size. `ops::conv` and `ops::window`
//! resolve their padding and dilated sizes here (`ops::conv` re-exports
//! [`Padding`]).
//!
//! Layer: ops. Imports `error`.

use crate::error::{Error, Result};

/// `1 + d * (s - 1)`: a size after dilation by `d` (0 stays 0), saturating
/// at `i64::MAX` so that a caller's huge dilation gives a size the shape
/// rules refuse instead of a wrapped one.
pub(super) fn dilated(s: i64, d: i64) -> i64 {
    if s == 0 {
        0
    } else {
        d.saturating_mul(s - 1).saturating_add(1)
    }
}

/// Padding of a convolution's spatial dimensions.
#[derive(Clone, Debug, PartialEq)]
pub enum Padding {
    /// No padding: only windows that fit.
    Valid,
    /// TensorFlow's `SAME`: `ceil(input / stride)` outputs.
    Same,
    /// `(low, high)` per spatial dimension; negative values crop.
    Explicit(Vec<(i64, i64)>),
}

impl Padding {
    /// The `(low, high)` padding of each spatial dimension for inputs of
    /// `inputs` and windows of `kernels`. The sizes come from the caller,
    /// so `SAME`'s arithmetic is checked here: one stride and dilation per
    /// dimension, each >= 1, and no sum past `i64`.
    pub(crate) fn resolve(
        &self,
        inputs: &[i64],
        kernels: &[i64],
        strides: &[i64],
        dil: &[i64],
    ) -> Result<Vec<(i64, i64)>> {
        match self {
            Padding::Valid => Ok(vec![(0, 0); inputs.len()]),
            Padding::Explicit(p) => Ok(p.clone()),
            Padding::Same => {
                let n = inputs.len();
                if kernels.len() != n || strides.len() != n || dil.len() != n {
                    return Err(Error::invalid(
                        "conv",
                        format!(
                            "SAME padding needs one window size, stride and dilation per spatial \
                             dimension ({n}), got {kernels:?}, {strides:?}, {dil:?}"
                        ),
                    ));
                }
                if strides.iter().chain(dil).any(|&v| v < 1) {
                    return Err(Error::invalid(
                        "conv",
                        format!("strides and dilations must be >= 1, got {strides:?} and {dil:?}"),
                    ));
                }
                (0..n)
                    .map(|i| same_padding("conv", inputs[i], kernels[i], strides[i], dil[i]))
                    .collect()
            }
        }
    }
}

/// TensorFlow's `SAME` padding of one dimension: `ceil(input / stride)`
/// outputs, the padding split with the extra element after. Computed in
/// i128, since every size is the caller's; `stride` must be >= 1.
pub(crate) fn same_padding(
    op: &str,
    input: i64,
    kernel: i64,
    stride: i64,
    dilation: i64,
) -> Result<(i64, i64)> {
    let (input, stride) = (i128::from(input), i128::from(stride));
    let window = if kernel <= 0 {
        0
    } else {
        1 + i128::from(dilation) * (i128::from(kernel) - 1)
    };
    let out = (input + stride - 1).div_euclid(stride);
    let total = ((out - 1) * stride + window - input).max(0);
    let half = total / 2;
    match (i64::try_from(half), i64::try_from(total - half)) {
        (Ok(low), Ok(high)) => Ok((low, high)),
        _ => Err(Error::invalid(
            op,
            format!(
                "SAME padding of {total} for an input of {input}, a window of {window} and \
                 stride {stride} is past the largest dimension XLA holds"
            ),
        )),
    }
}
