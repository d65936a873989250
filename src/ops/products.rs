//! Products beyond `matmul` (`tf.tensordot`, `jnp.tensordot`, `outer`,
//! `kron`, `cross`; `tf.linalg.matvec`, `tf.linalg.cross`): each is one
//! `dot_general`, one broadcast multiply, or slices of one, so shapes,
//! gradients and batching come from those ops.
//!
//! Layer: ops (composite). Imports `tensor` ops and `ops::matrix::cut`.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// **Linear algebra**: tensor, outer, vector and Kronecker products.
impl Tensor {
    /// `tf.tensordot(a, b, [a_axes, b_axes])`: sums the products over
    /// `a_axes` of `self` paired with `b_axes` of `other` (same lengths,
    /// equal sizes); the result has `self`'s other axes, then `other`'s.
    /// One `dot_general`, no transposes.
    #[track_caller]
    pub fn tensordot(&self, other: &Tensor, a_axes: &[i64], b_axes: &[i64]) -> Result<Tensor> {
        if a_axes.len() != b_axes.len() {
            return Err(Error::invalid(
                "tensordot",
                format!(
                    "needs as many axes of each operand, got {a_axes:?} of {} and {b_axes:?} of {}",
                    self.tensor_type(),
                    other.tensor_type()
                ),
            ));
        }
        self.dot_general(other, a_axes, b_axes, &[], &[])
    }

    /// `tf.tensordot(a, b, n)`: contracts the last `n` axes of `self` with
    /// the first `n` of `other`.
    #[track_caller]
    pub fn tensordot_n(&self, other: &Tensor, n: usize) -> Result<Tensor> {
        let (ra, rb) = (self.rank(), other.rank());
        if n > ra || n > rb {
            return Err(Error::invalid(
                "tensordot",
                format!(
                    "cannot contract {n} axes of {} with {}",
                    self.tensor_type(),
                    other.tensor_type()
                ),
            ));
        }
        let a_axes: Vec<i64> = (ra - n..ra).map(|a| a as i64).collect();
        let b_axes: Vec<i64> = (0..n).map(|a| a as i64).collect();
        self.tensordot(other, &a_axes, &b_axes)
    }

    /// `jnp.outer`: every element of `self` (flattened) times every element
    /// of `other` (flattened), `[len(self), len(other)]`.
    #[track_caller]
    pub fn outer(&self, other: &Tensor) -> Result<Tensor> {
        let column = self.reshape(&[-1, 1])?;
        column.mul(&other.reshape(&[1, -1])?)
    }

    /// `tf.linalg.matvec(a, x)`: each matrix `[..., m, n]` times each
    /// vector `[..., n]`, with broadcast batch dimensions: `[..., m]`.
    #[track_caller]
    pub fn matvec(&self, x: &Tensor) -> Result<Tensor> {
        self.matmul(&x.expand_dims(-1)?)?.squeeze(&[-1])
    }

    /// `jnp.kron` for operands of one rank: the block tensor whose block
    /// `i` is `self[i] * other`, dimensions `self.dims[k] * other.dims[k]`.
    #[track_caller]
    pub fn kron(&self, other: &Tensor) -> Result<Tensor> {
        let (a, b) = (self.dims(), other.dims());
        if a.len() != b.len() || a.iter().chain(&b).any(|&d| d < 0) {
            return Err(Error::invalid(
                "kron",
                format!(
                    "needs operands of one rank and known shapes, got {} and {}",
                    self.tensor_type(),
                    other.tensor_type()
                ),
            ));
        }
        // self's axes interleaved with size-1 axes, other's the other way
        // round: the product's axes (a0, b0, a1, b1, ...) flatten in pairs.
        let (mut wide_a, mut wide_b) = (Vec::new(), Vec::new());
        for (&x, &y) in a.iter().zip(&b) {
            wide_a.extend([x, 1]);
            wide_b.extend([1, y]);
        }
        let out = a
            .iter()
            .zip(&b)
            .map(|(x, y)| x.checked_mul(*y))
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(|| {
                Error::invalid(
                    "kron",
                    format!(
                        "the product of {} and {} has a dimension beyond i64",
                        self.tensor_type(),
                        other.tensor_type()
                    ),
                )
            })?;
        self.reshape(&wide_a)?
            .mul(&other.reshape(&wide_b)?)?
            .reshape(&out)
    }

    /// `jnp.vecdot`, `tf.tensordot`'s pairwise form: `sum(conj(self) *
    /// other)` over `axis`, with broadcast other dimensions.
    #[track_caller]
    pub fn vecdot(&self, other: &Tensor, axis: i64) -> Result<Tensor> {
        let left = if self.dtype().is_complex() {
            self.conj()?
        } else {
            self.clone()
        };
        left.mul(other)?.reduce_sum(&[axis], false)
    }

    /// `tf.linalg.cross`, `jnp.cross`: the cross product of 3-vectors on
    /// the last axis, with broadcast leading dimensions.
    #[track_caller]
    pub fn cross(&self, other: &Tensor) -> Result<Tensor> {
        let three = |t: &Tensor| matches!(t.shape().dims(), Some(&[.., Some(3)]));
        if !three(self) || !three(other) {
            return Err(Error::invalid(
                "cross",
                format!(
                    "needs vectors of 3 on the last axis, got {} and {}",
                    self.tensor_type(),
                    other.tensor_type()
                ),
            ));
        }
        let part = |t: &Tensor, k: i64| -> Result<Tensor> { super::matrix::cut(t, -1, k, 1, 3) };
        let (a0, a1, a2) = (part(self, 0)?, part(self, 1)?, part(self, 2)?);
        let (b0, b1, b2) = (part(other, 0)?, part(other, 1)?, part(other, 2)?);
        let x = a1.mul(&b2)?.sub(&a2.mul(&b1)?)?;
        let y = a2.mul(&b0)?.sub(&a0.mul(&b2)?)?;
        let z = a0.mul(&b1)?.sub(&a1.mul(&b0)?)?;
        Tensor::concat(&[x, y, z], -1)
    }
}

/// `jnp.linalg.multi_dot`: the product of a chain of matrices, multiplied
/// in the order that costs the fewest scalar products (the classic
/// dynamic program over the chain's dimensions, as NumPy does); a vector
/// first is a row, a vector last a column, and their axes are dropped.
#[track_caller]
pub fn multi_dot(operands: &[&Tensor]) -> Result<Tensor> {
    let k = operands.len();
    if k < 2 {
        return Err(Error::invalid(
            "multi_dot",
            format!("needs at least two operands, got {k}"),
        ));
    }
    let (first_vector, last_vector) = (operands[0].rank() == 1, operands[k - 1].rank() == 1);
    let mut mats: Vec<Tensor> = operands.iter().map(|t| (*t).clone()).collect();
    if first_vector {
        mats[0] = mats[0].expand_dims(0)?;
    }
    if last_vector {
        mats[k - 1] = mats[k - 1].expand_dims(-1)?;
    }
    let mut dims = Vec::with_capacity(k + 1);
    for (i, t) in mats.iter().enumerate() {
        let d = t.dims();
        if d.len() != 2 || d.iter().any(|&x| x < 0) {
            return Err(Error::invalid(
                "multi_dot",
                format!(
                    "operand {i} must be a matrix of known shape (a vector first or last), got {}",
                    operands[i].tensor_type()
                ),
            ));
        }
        if i == 0 {
            dims.push(d[0]);
        } else if dims[i] != d[0] {
            return Err(Error::invalid(
                "multi_dot",
                format!(
                    "operand {i} {} does not follow operand {} with {} columns",
                    operands[i].tensor_type(),
                    i - 1,
                    dims[i]
                ),
            ));
        }
        dims.push(d[1]);
    }
    let split = cheapest_order(&dims);
    let mut out = chain(&mats, &split, 0, k - 1)?;
    if first_vector {
        out = out.squeeze(&[0])?;
    }
    if last_vector {
        out = out.squeeze(&[-1])?;
    }
    Ok(out)
}

/// For the chain `dims[0] x dims[1] x ... x dims[k]`, `split[i][j]`: where
/// the cheapest product of matrices `i..=j` splits.
fn cheapest_order(dims: &[i64]) -> Vec<Vec<usize>> {
    let k = dims.len() - 1;
    let mut cost = vec![vec![0f64; k]; k];
    let mut split = vec![vec![0usize; k]; k];
    for len in 1..k {
        for i in 0..k - len {
            let j = i + len;
            cost[i][j] = f64::INFINITY;
            for s in i..j {
                let c = cost[i][s]
                    + cost[s + 1][j]
                    + (dims[i] as f64) * (dims[s + 1] as f64) * (dims[j + 1] as f64);
                if c < cost[i][j] {
                    cost[i][j] = c;
                    split[i][j] = s;
                }
            }
        }
    }
    split
}

/// The product of `mats[i..=j]` in the order `split` gives.
fn chain(mats: &[Tensor], split: &[Vec<usize>], i: usize, j: usize) -> Result<Tensor> {
    if i == j {
        return Ok(mats[i].clone());
    }
    let s = split[i][j];
    chain(mats, split, i, s)?.matmul(&chain(mats, split, s + 1, j)?)
}
