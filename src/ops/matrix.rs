//! Matrix helpers on the last two dimensions, with leading batch
//! dimensions: identity matrices, bands and triangles, diagonals and
//! traces, transposes (`tf.eye`, `tf.linalg.band_part`, `diag`,
//! `diag_part`, `set_diag`, `trace`, `matrix_transpose`, `adjoint`; `jnp.eye`,
//! `tril`, `triu`, `diagonal`, `trace`, `matrix_transpose`), and the
//! shape helpers the linear-algebra composites share.
//!
//! Each is a composite of existing ops, so gradients, batching and
//! lowering come from those: a mask built from two `iota`s selects with
//! `where_` (exact, so a NaN outside the band does not leak into it), and
//! the diagonal is read with one `take_along_axis`, which touches
//! `min(rows, cols)` elements rather than the whole matrix.
//!
//! Layer: ops (composite). Imports `tensor` ops and `ir` (shapes, for
//! `set_diag`'s check).

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Shape, TensorType, merge_shapes};
use crate::tensor::Tensor;

/// The known `(rows, cols)` of the last two dimensions of `a`; leading
/// (batch) dimensions may be unknown, as in a function traced for any
/// batch.
fn matrix_dims(op: &str, a: &Tensor) -> Result<(i64, i64)> {
    match a.shape().dims() {
        Some(&[.., Some(rows), Some(cols)]) => Ok((rows, cols)),
        Some(d) if d.len() >= 2 => Err(Error::invalid(
            op,
            format!(
                "needs matrices of known size in the last two dimensions, got {}",
                a.tensor_type()
            ),
        )),
        _ => Err(Error::invalid(
            op,
            format!("needs a matrix (rank >= 2), got {}", a.tensor_type()),
        )),
    }
}

/// The known `(rows, cols)` of float matrices in the last two dimensions
/// of `a` (the linear-algebra composites' operands).
pub(crate) fn float_matrix_dims(op: &str, a: &Tensor) -> Result<(i64, i64)> {
    match a.shape().dims() {
        Some(&[.., Some(m), Some(n)]) if a.dtype().is_float() => Ok((m, n)),
        _ => Err(Error::invalid(
            op,
            format!(
                "needs float matrices of known size in the last two dimensions, got {}",
                a.tensor_type()
            ),
        )),
    }
}

/// The order of square float matrices of known size in the last two
/// dimensions of `a`.
pub(crate) fn square_float_dims(op: &str, a: &Tensor) -> Result<i64> {
    let (m, n) = float_matrix_dims(op, a)?;
    if m != n {
        return Err(Error::invalid(
            op,
            format!("needs square matrices, got {}", a.tensor_type()),
        ));
    }
    Ok(n)
}

/// The `n x n` identity in `a`'s dtype with the leading (batch)
/// dimensions of `a` `[..., m, k]`, also where those are only known when
/// the program is compiled (`a` resized by a padding, then zeroed).
pub(crate) fn identity_with_batch_of(a: &Tensor, n: i64) -> Result<Tensor> {
    let (m, k) = matrix_dims("identity", a)?;
    let r = a.rank();
    let mut resize = vec![0; r];
    (resize[r - 2], resize[r - 1]) = (n - m, n - k);
    let shaped = a.pad_general(&vec![0; r], &resize, &vec![0; r], 0i64)?;
    zeros_shaped_like(&shaped, a.dtype())?.add(&Tensor::eye(n, n, a.dtype())?)
}

/// `x` cut to `len` entries from `start` along `axis` (-2 or -1), which
/// holds `total`: a negative padding, so leading dimensions need not be
/// known.
pub(crate) fn cut(x: &Tensor, axis: i64, start: i64, len: i64, total: i64) -> Result<Tensor> {
    let r = x.rank();
    let at = (r as i64 + axis) as usize;
    let (mut low, mut high) = (vec![0; r], vec![0; r]);
    low[at] = -start;
    high[at] = -(total - start - len);
    x.pad_general(&low, &high, &vec![0; r], 0i64)
}

/// Zeros of `dtype` with the shape of `like`, also when some of its
/// dimensions are only known when the program is compiled.
pub(crate) fn zeros_shaped_like(like: &Tensor, dtype: DType) -> Result<Tensor> {
    match like.shape().as_known() {
        Some(dims) => Ok(Tensor::zeros(&dims, dtype)),
        None => like.fill_like(0i64)?.cast(dtype),
    }
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
    let r = a.rank();
    let mut cut = vec![0; r];
    cut[r - 2] = rows.min(cols) - rows;
    let top = a.pad_general(&vec![0; r], &cut, &vec![0; r], 0i64)?;
    // Indices `[..., k, 1]`: row i takes column i.
    let mut to_one_column = vec![0; r];
    to_one_column[r - 1] = 1 - cols;
    let column = top.pad_general(&vec![0; r], &to_one_column, &vec![0; r], 0i64)?;
    let rows_index = Tensor::iota(&[rows.min(cols), 1], 0, DType::I64)?;
    let at = zeros_shaped_like(&column, DType::I64)?.add(&rows_index)?;
    top.gather_along_axis(&at, -1)?.squeeze(&[-1])
}

/// **Linear algebra**: identity, bands, diagonals, transposes and trace.
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
        let n = match self.shape().dims() {
            Some(&[.., Some(n)]) => n,
            _ => {
                return Err(Error::invalid(
                    "diag",
                    format!(
                        "needs a vector (rank >= 1) of known length, got {}",
                        self.tensor_type()
                    ),
                ));
            }
        };
        let on_rows = self.expand_dims(-1)?;
        masked(&on_rows, &Tensor::eye(n, n, DType::Bool)?)
    }

    /// Each matrix with its main diagonal replaced by `diagonal`
    /// (`tf.linalg.set_diag`): `diagonal` is `[..., min(rows, cols)]` with
    /// the matrices' leading dimensions and dtype.
    #[track_caller]
    pub fn set_diag(&self, diagonal: &Tensor) -> Result<Tensor> {
        let (rows, cols) = matrix_dims("set_diag", self)?;
        let mut want = self.shape().dims().unwrap_or(&[]).to_vec();
        want.pop();
        *want.last_mut().expect("rank >= 2") = Some(rows.min(cols));
        let want = Shape::from_dims(want);
        let fits = diagonal.dtype() == self.dtype()
            && merge_shapes(&diagonal.shape(), &want).is_some_and(|m| m.rank().is_some());
        if !fits {
            return Err(Error::invalid(
                "set_diag",
                format!(
                    "needs a diagonal {} for matrices {}, got {}",
                    TensorType::new(self.dtype(), want),
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
        Tensor::eye(rows, cols, DType::Bool)?.where_(&spread, self)
    }

    /// Each matrix transposed: the last two dimensions swapped
    /// (`tf.linalg.matrix_transpose`, `jnp.matrix_transpose`).
    #[track_caller]
    pub fn matrix_transpose(&self) -> Result<Tensor> {
        let r = match self.shape().rank() {
            Some(r) if r >= 2 => r as i64,
            _ => {
                return Err(Error::invalid(
                    "matrix_transpose",
                    format!("needs a matrix (rank >= 2), got {}", self.tensor_type()),
                ));
            }
        };
        let mut perm: Vec<i64> = (0..r).collect();
        perm.swap(r as usize - 1, r as usize - 2);
        self.transpose(&perm)
    }

    /// Each matrix's conjugate transpose (`tf.linalg.adjoint`,
    /// `jnp.matrix_transpose(x).conj()`); the transpose for real dtypes.
    #[track_caller]
    pub fn adjoint(&self) -> Result<Tensor> {
        let t = self.matrix_transpose()?;
        if self.dtype().is_complex() {
            t.conj()
        } else {
            Ok(t)
        }
    }

    /// The sum of each matrix's main diagonal (`tf.linalg.trace`,
    /// `jnp.trace` over the last two axes).
    #[track_caller]
    pub fn trace(&self) -> Result<Tensor> {
        main_diagonal("trace", self)?.reduce_sum(&[-1], false)
    }
}
