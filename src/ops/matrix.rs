//! Matrix helpers on the last two dimensions, with leading batch
//! dimensions: identity matrices, bands and triangles, diagonals and
//! traces (`tf.eye`, `tf.linalg.band_part`, `diag`, `diag_part`,
//! `set_diag`, `trace`; `jnp.eye`, `tril`, `triu`, `diagonal`, `trace`).
//!
//! Each is a composite of existing ops, so gradients, batching and
//! lowering come from those: a mask built from two `iota`s selects with
//! `where_` (exact, so a NaN outside the band does not leak into it), and
//! the diagonal is read with one `take_along_axis`, which touches
//! `min(rows, cols)` elements rather than the whole matrix.
//!
//! Layer: ops (composite). Imports `tensor` ops only.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The known `(rows, cols)` of the last two dimensions of `a`.
fn matrix_dims(op: &str, a: &Tensor) -> Result<(i64, i64)> {
    let dims = a.shape().as_known().ok_or_else(|| {
        Error::invalid(op, format!("needs a known shape, got {}", a.tensor_type()))
    })?;
    let r = dims.len();
    if r < 2 {
        return Err(Error::invalid(
            op,
            format!("needs a matrix (rank >= 2), got {}", a.tensor_type()),
        ));
    }
    Ok((dims[r - 2], dims[r - 1]))
}

/// `j - i` for each element `(i, j)` of a `rows x cols` matrix.
fn column_minus_row(rows: i64, cols: i64) -> Result<Tensor> {
    let i = Tensor::iota(&[rows, cols], 0, DType::I64)?;
    Tensor::iota(&[rows, cols], 1, DType::I64)?.sub(&i)
}

/// `a` where `keep` holds, zero elsewhere.
fn masked(a: &Tensor, keep: &Tensor) -> Result<Tensor> {
    keep.where_(a, &Tensor::zeros(&[], a.dtype()))
}

/// The main diagonal of each matrix of `a`, `[..., min(rows, cols)]`:
/// the first `min` rows, then one element of each.
fn main_diagonal(op: &str, a: &Tensor) -> Result<Tensor> {
    let (rows, cols) = matrix_dims(op, a)?;
    let mut dims = a.dims();
    let r = dims.len();
    dims[r - 2] = rows.min(cols);
    let top = a.slice(&vec![0; r], &dims)?;
    dims[r - 1] = 1;
    let at = Tensor::iota(&dims, (r - 2) as i64, DType::I64)?;
    top.take_along_axis(&at, -1)?.squeeze(&[-1])
}

impl Tensor {
    /// A `rows x cols` matrix with ones on its main diagonal (`tf.eye`,
    /// `jnp.eye`); broadcast it for a batch.
    pub fn eye(rows: i64, cols: i64, dtype: DType) -> Result<Tensor> {
        if rows < 0 || cols < 0 {
            return Err(Error::invalid(
                "eye",
                format!("needs non-negative sizes, got {rows} x {cols}"),
            ));
        }
        column_minus_row(rows, cols)?
            .eq(&Tensor::zeros(&[], DType::I64))?
            .cast(dtype)
    }

    /// `tf.linalg.band_part`: keeps the `num_lower` subdiagonals and the
    /// `num_upper` superdiagonals of each matrix and zeroes the rest; a
    /// negative count keeps that whole triangle (`band_part(-1, 0)` is the
    /// lower triangle).
    #[track_caller]
    pub fn band_part(&self, num_lower: i64, num_upper: i64) -> Result<Tensor> {
        let (rows, cols) = matrix_dims("band_part", self)?;
        let offset = column_minus_row(rows, cols)?;
        let mut keep = Tensor::ones(&[rows, cols], DType::Bool);
        if num_lower >= 0 {
            keep = keep.logical_and(&offset.ge(&Tensor::scalar(-num_lower))?)?;
        }
        if num_upper >= 0 {
            keep = keep.logical_and(&offset.le(&Tensor::scalar(num_upper))?)?;
        }
        masked(self, &keep)
    }

    /// `jnp.tril`: the elements on and below diagonal `k` (`k > 0` above
    /// the main diagonal, `k < 0` below it); zeros elsewhere.
    #[track_caller]
    pub fn tril(&self, k: i64) -> Result<Tensor> {
        let (rows, cols) = matrix_dims("tril", self)?;
        masked(self, &column_minus_row(rows, cols)?.le(&Tensor::scalar(k))?)
    }

    /// `jnp.triu`: the elements on and above diagonal `k`; zeros elsewhere.
    #[track_caller]
    pub fn triu(&self, k: i64) -> Result<Tensor> {
        let (rows, cols) = matrix_dims("triu", self)?;
        masked(self, &column_minus_row(rows, cols)?.ge(&Tensor::scalar(k))?)
    }

    /// The main diagonal of each matrix, `[..., min(rows, cols)]`
    /// (`tf.linalg.diag_part`, `jnp.diagonal` over the last two axes).
    #[track_caller]
    pub fn diag_part(&self) -> Result<Tensor> {
        main_diagonal("diag_part", self)
    }

    /// Square matrices with this tensor's last axis on their diagonals,
    /// `[..., n] -> [..., n, n]` (`tf.linalg.diag`; `jnp.diag` of a
    /// vector).
    #[track_caller]
    pub fn diag(&self) -> Result<Tensor> {
        let dims = self.shape().as_known().ok_or_else(|| {
            Error::invalid(
                "diag",
                format!("needs a known shape, got {}", self.tensor_type()),
            )
        })?;
        let Some(&n) = dims.last() else {
            return Err(Error::invalid(
                "diag",
                format!("needs a vector (rank >= 1), got {}", self.tensor_type()),
            ));
        };
        let full = [dims.as_slice(), &[n]].concat();
        let on_rows = self.expand_dims(-1)?.broadcast_to(&full)?;
        masked(&on_rows, &Tensor::eye(n, n, DType::Bool)?)
    }

    /// Each matrix with its main diagonal replaced by `diagonal`
    /// (`tf.linalg.set_diag`): `diagonal` is `[..., min(rows, cols)]` with
    /// the matrices' leading dimensions and dtype.
    #[track_caller]
    pub fn set_diag(&self, diagonal: &Tensor) -> Result<Tensor> {
        let (rows, cols) = matrix_dims("set_diag", self)?;
        let dims = self.dims();
        let r = dims.len();
        let want = [&dims[..r - 2], &[rows.min(cols)]].concat();
        if diagonal.dtype() != self.dtype() || diagonal.shape().as_known() != Some(want.clone()) {
            return Err(Error::invalid(
                "set_diag",
                format!(
                    "needs a diagonal {}{want:?} for matrices {}, got {}",
                    self.dtype(),
                    self.tensor_type(),
                    diagonal.tensor_type()
                ),
            ));
        }
        // Row i holds d[i] when the matrices are wide, column j holds d[j]
        // when they are tall; the diagonal mask picks (i, i) either way.
        let spread = if rows <= cols {
            diagonal.expand_dims(-1)?
        } else {
            diagonal.expand_dims(-2)?
        };
        let spread = spread.broadcast_to(&dims)?;
        Tensor::eye(rows, cols, DType::Bool)?.where_(&spread, self)
    }

    /// The sum of each matrix's main diagonal (`tf.linalg.trace`,
    /// `jnp.trace` over the last two axes).
    #[track_caller]
    pub fn trace(&self) -> Result<Tensor> {
        main_diagonal("trace", self)?.reduce_sum(&[-1], false)
    }
}
