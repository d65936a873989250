//! Position information for attention: the sinusoidal encodings of
//! "Attention Is All You Need", rotary embeddings (RoPE, as LLaMA and
//! GPT-NeoX apply them), and ALiBi's linear biases. Each is a function of
//! tensors, so it traces and differentiates like any op, and takes the
//! positions as a tensor: a decoder with a KV cache passes the positions
//! of its new tokens (`length + i`), not `0..t`.
//!
//! Layer: nn. Imports `tensor` ops, `dtype` and `error`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

fn invalid(message: String) -> Error {
    Error::invalid("positional", message)
}

/// The sinusoidal encodings `[positions, dim]` of the transformer paper:
/// column `2i` is `sin(p / 10000^(2i / dim))`, column `2i + 1` the cosine
/// of the same angle, for the positions `positions` (`[t]`, integer or
/// float), in `dtype`. `dim` must be even.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::nn::positional::sinusoidal;
/// let pe = sinusoidal(&Tensor::range(0.0, 4.0, 1.0, DType::I32)?, 6, DType::F32)?;
/// assert_eq!(pe.dims(), vec![4, 6]);
/// let row1 = pe.to_vec::<f32>()?[6..12].to_vec();
/// assert!((row1[0] - 1f32.sin()).abs() < 1e-6 && (row1[1] - 1f32.cos()).abs() < 1e-6);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn sinusoidal(positions: &Tensor, dim: i64, dtype: DType) -> Result<Tensor> {
    if dim < 2 || dim % 2 != 0 || !dtype.is_float() {
        return Err(invalid(format!(
            "sinusoidal needs an even dim >= 2 and a float dtype, got {dim} and {dtype}"
        )));
    }
    let angles = angles(positions, dim, 10000.0)?; // [t, dim / 2]
    let t = angles.dims()[0];
    // Interleave: [t, dim/2, 2] of (sin, cos), then [t, dim].
    let both = Tensor::stack(&[angles.sin()?, angles.cos()?], 2)?;
    both.reshape(&[t, dim])?.cast(dtype)
}

/// `positions[p] / base^(2i / dim)` for `i < dim / 2`, `[t, dim / 2]` in
/// float64 then float32 (the angles of both encodings).
fn angles(positions: &Tensor, dim: i64, base: f64) -> Result<Tensor> {
    if positions.rank() != 1 {
        return Err(invalid(format!(
            "positions must be a vector [t], got {}",
            positions.tensor_type()
        )));
    }
    let half = dim / 2;
    let inverse: Vec<f32> = (0..half)
        .map(|i| base.powf(-2.0 * i as f64 / dim as f64) as f32)
        .collect();
    let inverse = Tensor::from_vec(inverse, &[1, half])?;
    positions.cast(DType::F32)?.expand_dims(1)?.matmul(&inverse)
}

/// Rotary position embeddings applied to `x` `[batch, t, heads, head_dim]`
/// (queries or keys, in the layout `MultiHeadAttention` projects to) at
/// `positions` `[t]`, in the "rotate half" convention of LLaMA and
/// GPT-NeoX: with `x1`, `x2` the two halves of the head dimension and
/// `θ_i = p / base^(2i / head_dim)`, the result is `x1 cos θ - x2 sin θ`
/// and `x2 cos θ + x1 sin θ`. `base` is 10000 in the paper. The dot
/// product of a rotated query and key then depends on their positions
/// only through their distance.
pub fn rotary(x: &Tensor, positions: &Tensor, base: f64) -> Result<Tensor> {
    let dims = x.dims();
    let head_dim = *dims.last().unwrap_or(&0);
    if dims.len() != 4 || head_dim < 2 || head_dim % 2 != 0 || !x.dtype().is_float() {
        return Err(invalid(format!(
            "rotary needs a float [batch, t, heads, head_dim] tensor with an even head_dim, got {}",
            x.tensor_type()
        )));
    }
    let angles = angles(positions, head_dim, base)?; // [t, d/2]
    let t = angles.dims()[0];
    let (cos, sin) = (
        angles
            .cos()?
            .reshape(&[1, t, 1, head_dim / 2])?
            .cast(x.dtype())?,
        angles
            .sin()?
            .reshape(&[1, t, 1, head_dim / 2])?
            .cast(x.dtype())?,
    );
    let [x1, x2]: [Tensor; 2] = x.split(2, 3)?.try_into().expect("two halves");
    let first = x1.mul(&cos)?.sub(&x2.mul(&sin)?)?;
    let second = x2.mul(&cos)?.add(&x1.mul(&sin)?)?;
    Tensor::concat(&[first, second], 3)
}

/// ALiBi's head slopes (`[heads]`, float32): `2^(-8h / n)` for heads
/// `h = 1..n` when `n` is a power of two; otherwise those of the nearest
/// smaller power of two, then every other slope of twice that many, as
/// the paper's reference code does.
pub fn alibi_slopes(heads: i64) -> Result<Tensor> {
    if heads < 1 {
        return Err(invalid(format!("alibi needs heads >= 1, got {heads}")));
    }
    let power_of_two = |n: i64| -> Vec<f32> {
        let start = 2f64.powf(-8.0 / n as f64);
        (1..=n).map(|h| start.powi(h as i32) as f32).collect()
    };
    let closest = 1i64 << (63 - heads.leading_zeros() as i64);
    let mut slopes = power_of_two(closest);
    if closest < heads {
        let extra = power_of_two(2 * closest);
        slopes.extend(extra.iter().step_by(2).take((heads - closest) as usize));
    }
    Tensor::from_vec(slopes, &[heads])
}

/// ALiBi's attention biases `[heads, q_len, k_len]` (float32): `slope_h *
/// (k_pos - q_pos)`, zero on the diagonal and more negative the farther a
/// key lies behind its query, for queries at `q_positions` and keys at
/// `k_positions` (`[q_len]`, `[k_len]`); added to the scores before the
/// softmax, with a causal mask for a decoder.
pub fn alibi_bias(heads: i64, q_positions: &Tensor, k_positions: &Tensor) -> Result<Tensor> {
    let slopes = alibi_slopes(heads)?.reshape(&[heads, 1, 1])?;
    let q = q_positions.cast(DType::F32)?.expand_dims(1)?; // [q, 1]
    let k = k_positions.cast(DType::F32)?.expand_dims(0)?; // [1, k]
    let distance = k.sub(&q)?.expand_dims(0)?; // [1, q, k]
    slopes.mul(&distance)
}
