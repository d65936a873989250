//! Linear algebra: batched matrix multiplication, as `tf.linalg.matmul`,
//! and the general `dot_general` (`jax.lax.dot_general`) that `einsum`
//! plans onto.
//!
//! Both operands have rank >= 2: the last two dimensions are the matrices,
//! the leading ones are batch dimensions that broadcast NumPy-style (so a
//! `(5, 1, 2, 3)` times a `(4, 3, 7)` is a `(5, 4, 2, 7)`). Operands must
//! share a numeric dtype (TensorFlow does not promote). When one operand is
//! a plain matrix (rank 2) and the other is batched, as a dense layer on a
//! `[batch, time, features]` input, the lowering is one `dot_general` with
//! no batching dimensions: broadcasting the weight to every batch entry
//! and multiplying batch by batch cost twice as much (measured), and
//! the weight's gradient is likewise one `dot_general` contracting the
//! batch and row dimensions instead of a batched product summed over the
//! batch. Otherwise the lowering broadcasts both operands to the common
//! batch shape with `broadcast_in_dim` and emits one `dot_general` with
//! batching dimensions. Transposes are folded into the contracting
//! dimensions rather than emitted as separate ops.
//!
//! `dot_general` takes explicit batch and contracting dimension lists (no
//! broadcasting) and lowers to one StableHLO `dot_general`; its gradient
//! for each operand is another `dot_general` of the output gradient with
//! the other operand, then one transpose.
//!
//! Precision: f32 dots use XLA's default precision, which on CPU is full
//! f32; some GPUs may use reduced-precision (TF32) arithmetic.
//!
//! Preferred element type (`jax.lax.dot_general`'s
//! `preferred_element_type`): both products can accumulate in, and
//! return, a wider type of the same kind than their operands
//! ([`Tensor::matmul_preferred`], [`Tensor::dot_general_preferred`]): bf16
//! operands with an f32 result, as mixed-precision training wants, with no
//! casts around the product. The lowering is the same single `dot_general`
//! with the wider result type, except for an f64 result from narrower
//! floats: its operands are widened first (the same values; no GPU library
//! has that mixed product). The gradient follows the forward product:
//! the output gradient is rounded to the operands' dtype, each operand's
//! gradient is a product accumulated in the preferred type, and it is cast
//! back to its operand's dtype (JAX's rule), so gradients keep their
//! variables' dtypes.

use super::batching;
use super::{OpDef, check_dtype, describe, expect_arity, same_dtype};
use super::{grad_or_zeros, unbroadcast};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType, broadcast_shapes};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// `a @ b` over the last two dimensions, with each operand optionally
/// transposed (its last two dimensions swapped) first.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MatMul {
    pub transpose_a: bool,
    pub transpose_b: bool,
    /// The accumulation and result dtype when wider than the operands'
    /// (see the module docs); `None` keeps the operands' dtype.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_element_type: Option<DType>,
}

/// The result dtype of a product of `d` operands asked for `preferred`:
/// `d` itself, or a wider dtype of the same kind (float, signed or
/// unsigned integer), which the product accumulates in.
pub(crate) fn product_dtype(
    op: &str,
    inputs: &[TensorType],
    d: DType,
    preferred: Option<DType>,
) -> Result<DType> {
    let Some(p) = preferred.filter(|&p| p != d) else {
        return Ok(d);
    };
    let same_kind = (d.is_float() && p.is_float())
        || (d.is_complex() && p.is_complex())
        || (d.is_signed_int() && p.is_signed_int())
        || (d.is_unsigned_int() && p.is_unsigned_int());
    if same_kind && p.size_in_bytes()? > d.size_in_bytes()? {
        return Ok(p);
    }
    Err(Error::invalid(
        op,
        format!(
            "preferred_element_type {p} must be the operands' dtype or a wider one of the same \
             kind (e.g. f32 for bf16, i32 for i8), got operands {}",
            describe(inputs)
        ),
    ))
}

/// The preferred type of a product of `x`-typed operands, when it is not
/// the operands' own (so the gradient casts).
fn widened(preferred: Option<DType>, x: &Tensor) -> Option<DType> {
    preferred.filter(|&p| p != x.dtype())
}

/// The output cotangent of a product with float or complex operands (`a`
/// is the first), in the operands' dtype, and the wider type the
/// gradient's own products accumulate in, if any: a wider product's
/// gradient is rounded to the operands' dtype and multiplied like the
/// forward product, each result cast back ([`in_operand_dtype`]). `None`
/// for integer operands, which get no gradient. Complex products follow
/// JAX's convention, as the elementwise rules do: the gradient products
/// are the real formulas' (transposes, no conjugates).
fn product_cotangent(
    preferred: Option<DType>,
    a: &Tensor,
    grads: &[Option<Tensor>],
    output: &Tensor,
) -> Result<Option<(Tensor, Option<DType>)>> {
    if !a.dtype().is_inexact() {
        return Ok(None);
    }
    let preferred = widened(preferred, a);
    let g = grad_or_zeros(grads, output)?;
    let g = match preferred {
        Some(_) => g.cast(a.dtype())?,
        None => g,
    };
    Ok(Some((g, preferred)))
}

/// A gradient computed in a product's preferred type, cast back to its
/// operand's dtype (JAX's rule for `preferred_element_type`).
fn in_operand_dtype(grad: Option<Tensor>, operand: &Tensor) -> Result<Option<Tensor>> {
    match grad {
        Some(g) if g.dtype() != operand.dtype() => Ok(Some(g.cast(operand.dtype())?)),
        g => Ok(g),
    }
}

impl MatMul {
    /// The error for operands `inputs`, naming both operand types and the
    /// transpose flags that shaped the check.
    fn error(&self, inputs: &[TensorType], what: String) -> Error {
        let flags = match (self.transpose_a, self.transpose_b) {
            (false, false) => String::new(),
            (ta, tb) => format!(" with transpose_a={ta}, transpose_b={tb}"),
        };
        Error::invalid(
            "matmul",
            format!("{what} (operands: {}{flags})", describe(inputs)),
        )
    }

    /// Rows and columns of an operand's matrix after its transpose flag.
    fn matrix(dims: &[Dim], transpose: bool) -> (Dim, Dim) {
        let r = dims.len();
        let (rows, cols) = (dims[r - 2], dims[r - 1]);
        if transpose {
            (cols, rows)
        } else {
            (rows, cols)
        }
    }

    /// Rejects operands of known rank below 2 (tf.linalg.matmul does too:
    /// use `reshape` or elementwise `mul` for vectors).
    fn check_ranks(&self, inputs: &[TensorType]) -> Result<()> {
        for (name, t) in ["a", "b"].iter().zip(inputs) {
            if let Some(r) = t.rank().filter(|&r| r < 2) {
                return Err(self.error(
                    inputs,
                    format!("operand {name} must have rank >= 2, got rank {r}"),
                ));
            }
        }
        Ok(())
    }
}

impl OpDef for MatMul {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        // The batch axis becomes one more (broadcast) batch dimension.
        Some(
            batching::aligned(inputs, batched)
                .and_then(|x| batching::all_batched(self.clone(), &x)),
        )
    }

    fn name(&self) -> &'static str {
        "matmul"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("matmul", inputs, 2)?;
        let d = same_dtype("matmul", inputs)?;
        check_dtype("matmul", d, d.is_numeric() || d.is_complex(), "numeric")?;
        let out = product_dtype("matmul", inputs, d, self.preferred_element_type)?;
        self.check_ranks(inputs)?;
        let (Some(a), Some(b)) = (inputs[0].shape.dims(), inputs[1].shape.dims()) else {
            return Ok(vec![TensorType::new(out, Shape::unknown_rank())]);
        };
        let (m, ka) = Self::matrix(a, self.transpose_a);
        let (kb, n) = Self::matrix(b, self.transpose_b);
        if let (Some(x), Some(y)) = (ka, kb)
            && x != y
        {
            return Err(self.error(
                inputs,
                format!("inner dimensions must agree, got {x} (from a) and {y} (from b)"),
            ));
        }
        let batch_a = Shape::from_dims(a[..a.len() - 2].to_vec());
        let batch_b = Shape::from_dims(b[..b.len() - 2].to_vec());
        let batch = broadcast_shapes(&batch_a, &batch_b).ok_or_else(|| {
            self.error(
                inputs,
                format!("batch dimensions {batch_a} and {batch_b} cannot be broadcast"),
            )
        })?;
        let mut dims = batch.dims().map(<[Dim]>::to_vec).unwrap_or_default();
        dims.extend([m, n]);
        Ok(vec![TensorType::new(out, Shape::from_dims(dims))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let out = &outputs[0];
        let nb = out.rank() - 2;
        let (ra, rb) = (inputs[0].ty.rank(), inputs[1].ty.rank());
        if nb > 0 && rb == 2 && ra == nb + 2 {
            return Ok(vec![self.lower_batched_by_matrix(cx, inputs, out)]);
        }
        if nb > 0 && ra == 2 && rb == nb + 2 {
            return Ok(vec![self.lower_matrix_by_batched(cx, inputs, out)]);
        }
        let a = broadcast_batch(cx, &inputs[0], &out.dims[..nb]);
        let b = broadcast_batch(cx, &inputs[1], &out.dims[..nb]);
        let batch: Vec<i64> = (0..nb as i64).collect();
        let nb = nb as i64;
        let lhs_contract = if self.transpose_a { nb } else { nb + 1 };
        let rhs_contract = if self.transpose_b { nb + 1 } else { nb };
        Ok(vec![cx.dot_general(
            &a,
            &b,
            &batch,
            &batch,
            &[lhs_contract],
            &[rhs_contract],
            out.clone(),
        )])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &[true, true])
    }

    /// Each operand's gradient is a matmul of its own: skipped when not
    /// needed (e.g. the batch fed to a network's first layer).
    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let Some((g, preferred)) =
            product_cotangent(self.preferred_element_type, a, grads, &outputs[0])?
        else {
            return Ok(vec![None, None]);
        };
        let mm = |x: &Tensor, y: &Tensor, transpose_a: bool, transpose_b: bool| {
            apply1(
                MatMul {
                    transpose_a,
                    transpose_b,
                    preferred_element_type: preferred,
                },
                &[x, y],
            )
        };
        // With C = op(A) op(B): dop(A) = G op(B)^T and dop(B) = op(A)^T G.
        let da = || match (self.transpose_a, self.transpose_b) {
            (false, false) => mm(&g, b, false, true),
            (false, true) => mm(&g, b, false, false),
            (true, false) => mm(b, &g, false, true),
            (true, true) => mm(b, &g, true, true),
        };
        let db = || match (self.transpose_a, self.transpose_b) {
            (false, false) => mm(a, &g, true, false),
            (false, true) => mm(&g, a, true, false),
            (true, false) => mm(a, &g, false, false),
            (true, true) => mm(&g, a, true, true),
        };
        let (ra, rb) = (a.rank(), b.rank());
        let matrix = |r: usize| MatrixGrad {
            nb: r as i64 - 2,
            preferred,
        };
        let da = needed[0]
            .then(|| match (ra, rb) {
                (2, r) if r > 2 => matrix(r).of_lhs(self, b, &g),
                _ => unbroadcast(&da()?, a),
            })
            .transpose()?;
        let db = needed[1]
            .then(|| match (ra, rb) {
                (r, 2) if r > 2 => matrix(r).of_rhs(self, a, &g),
                _ => unbroadcast(&db()?, b),
            })
            .transpose()?;
        Ok(vec![in_operand_dtype(da, a)?, in_operand_dtype(db, b)?])
    }
}

/// Broadcasts `x`'s batch dimensions (all but the last two) to `batch`,
/// NumPy-style; a no-op when they already match.
fn broadcast_batch(cx: &mut Emitter, x: &Val, batch: &[i64]) -> Val {
    let r = x.ty.rank();
    let mut target = batch.to_vec();
    target.extend_from_slice(&x.ty.dims[r - 2..]);
    cx.broadcast_to(x, &target)
}

impl MatMul {
    /// `[B..., m, k] @ [k, n]`: one `dot_general` without batching
    /// dimensions, so XLA sees a single `[B*m, k] x [k, n]` product instead
    /// of the matrix broadcast to every batch entry. Its free dimensions
    /// come out as `[B..., m, n]`, already the result's order.
    fn lower_batched_by_matrix(&self, cx: &mut Emitter, inputs: &[Val], out: &ArraySpec) -> Val {
        let nb = (out.rank() - 2) as i64;
        let lhs_contract = if self.transpose_a { nb } else { nb + 1 };
        let rhs_contract = if self.transpose_b { 1 } else { 0 };
        cx.dot_general(
            &inputs[0],
            &inputs[1],
            &[],
            &[],
            &[lhs_contract],
            &[rhs_contract],
            out.clone(),
        )
    }

    /// `[m, k] @ [B..., k, n]`: one `dot_general` without batching
    /// dimensions (result `[m, B..., n]`), then one transpose to
    /// `[B..., m, n]`.
    fn lower_matrix_by_batched(&self, cx: &mut Emitter, inputs: &[Val], out: &ArraySpec) -> Val {
        let nb = out.rank() - 2;
        let lhs_contract = if self.transpose_a { 0 } else { 1 };
        let rhs_contract = if self.transpose_b { nb + 1 } else { nb } as i64;
        let m = out.dims[nb];
        let mut dot_dims = vec![m];
        dot_dims.extend_from_slice(&out.dims[..nb]);
        dot_dims.push(out.dims[nb + 1]);
        let dot = cx.dot_general(
            &inputs[0],
            &inputs[1],
            &[],
            &[],
            &[lhs_contract],
            &[rhs_contract],
            ArraySpec::new(out.dtype, &dot_dims),
        );
        let mut perm: Vec<i64> = (1..=nb as i64).collect();
        perm.extend([0, nb as i64 + 1]);
        cx.transpose(&dot, &perm)
    }
}

/// The gradient of the rank-2 operand of a matmul whose other operand is
/// batched (`[B..., r, c]`): one `dot_general` contracting the batch
/// dimensions and the matrix dimension the two share with `g`
/// (`[B..., m, n]`), rather than a batched product reduced over the batch.
struct MatrixGrad {
    nb: i64,
    /// The forward product's wider result type, if any.
    preferred: Option<DType>,
}

impl MatrixGrad {
    fn batch_and(&self, d: i64) -> Vec<i64> {
        let mut v: Vec<i64> = (0..self.nb).collect();
        v.push(d);
        v
    }

    /// `x` and `y` contracted over `lc` and `rc`, without batching.
    fn contract(&self, x: &Tensor, y: &Tensor, lc: Vec<i64>, rc: Vec<i64>) -> Result<Tensor> {
        apply1(
            DotGeneral {
                lhs_contracting: lc,
                rhs_contracting: rc,
                preferred_element_type: self.preferred,
                ..DotGeneral::default()
            },
            &[x, y],
        )
    }

    /// `dB` for `A` batched, `B` a matrix.
    fn of_rhs(&self, m: &MatMul, a: &Tensor, g: &Tensor) -> Result<Tensor> {
        let nb = self.nb;
        let a_m = if m.transpose_a { nb + 1 } else { nb };
        if m.transpose_b {
            self.contract(g, a, self.batch_and(nb), self.batch_and(a_m))
        } else {
            self.contract(a, g, self.batch_and(a_m), self.batch_and(nb))
        }
    }

    /// `dA` for `A` a matrix, `B` batched.
    fn of_lhs(&self, m: &MatMul, b: &Tensor, g: &Tensor) -> Result<Tensor> {
        let nb = self.nb;
        let b_n = if m.transpose_b { nb } else { nb + 1 };
        if m.transpose_a {
            self.contract(b, g, self.batch_and(b_n), self.batch_and(nb + 1))
        } else {
            self.contract(g, b, self.batch_and(nb + 1), self.batch_and(b_n))
        }
    }
}

/// **Linear algebra**: matrix products.
impl Tensor {
    /// Batched matrix product `self @ other` (`tf.linalg.matmul`): rank >= 2
    /// operands of one numeric dtype, batch dimensions broadcast.
    #[track_caller]
    pub fn matmul(&self, other: &Tensor) -> Result<Tensor> {
        self.matmul_t(other, false, false)
    }

    /// `matmul` with either operand's last two dimensions swapped first
    /// (`transpose_a`/`transpose_b`), without materialising the transpose.
    #[track_caller]
    pub fn matmul_t(&self, other: &Tensor, transpose_a: bool, transpose_b: bool) -> Result<Tensor> {
        apply1(
            MatMul {
                transpose_a,
                transpose_b,
                preferred_element_type: None,
            },
            &[self, other],
        )
    }

    /// `matmul` accumulated in, and returning, `preferred`: the operands'
    /// dtype or a wider one of the same kind (`jax.lax.dot`'s
    /// `preferred_element_type`). bf16 operands with an f32 result give
    /// mixed precision's product without a cast around it; the gradients
    /// come back in the operands' dtype.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?.cast(DType::BF16)?;
    /// let c = a.matmul_preferred(&a, DType::F32)?;
    /// assert_eq!(c.dtype(), DType::F32);
    /// assert_eq!(c.to_vec::<f32>()?, vec![7.0, 10.0, 15.0, 22.0]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn matmul_preferred(&self, other: &Tensor, preferred: DType) -> Result<Tensor> {
        apply1(
            MatMul {
                transpose_a: false,
                transpose_b: false,
                preferred_element_type: (preferred != self.dtype()).then_some(preferred),
            },
            &[self, other],
        )
    }
}

/// `jax.lax.dot_general`: contracts `lhs_contracting` of the left operand
/// with `rhs_contracting` of the right one (pairwise, in order), and takes
/// `lhs_batch`/`rhs_batch` as batch dimensions (pairwise, same sizes). The
/// result's dimensions are the batch ones (in the order listed), then the
/// left operand's remaining ("free") dimensions, then the right operand's,
/// each in their original order, as StableHLO's `dot_general`. Dimension
/// numbers are non-negative (the `Tensor` method normalises negative ones).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DotGeneral {
    pub lhs_contracting: Vec<i64>,
    pub rhs_contracting: Vec<i64>,
    pub lhs_batch: Vec<i64>,
    pub rhs_batch: Vec<i64>,
    /// The accumulation and result dtype when wider than the operands'
    /// (see the module docs); `None` keeps the operands' dtype.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preferred_element_type: Option<DType>,
}

/// One operand's dimension roles: batch, contracting and free dimensions.
struct Roles {
    batch: Vec<usize>,
    contracting: Vec<usize>,
    free: Vec<usize>,
}

impl DotGeneral {
    fn error(&self, inputs: &[TensorType], what: String) -> Error {
        Error::invalid(
            "dot_general",
            format!(
                "{what} (operands: {}; lhs_contracting={:?}, rhs_contracting={:?}, lhs_batch={:?}, rhs_batch={:?})",
                describe(inputs),
                self.lhs_contracting,
                self.rhs_contracting,
                self.lhs_batch,
                self.rhs_batch
            ),
        )
    }

    /// Checks one operand's dimension numbers against its rank (each in
    /// range, none used twice) and splits its dimensions by role.
    fn roles(
        &self,
        inputs: &[TensorType],
        side: &str,
        rank: usize,
        batch: &[i64],
        contracting: &[i64],
    ) -> Result<Roles> {
        let mut used = vec![false; rank];
        let mut check = |list: &[i64], what: &str| -> Result<Vec<usize>> {
            list.iter()
                .map(|&d| {
                    if d < 0 || d >= rank as i64 {
                        return Err(self.error(
                            inputs,
                            format!(
                                "{side}_{what} dimension {d} is out of range for the {side} operand of rank {rank}"
                            ),
                        ));
                    }
                    if std::mem::replace(&mut used[d as usize], true) {
                        return Err(self.error(
                            inputs,
                            format!(
                                "dimension {d} of the {side} operand is used more than once as a batch or contracting dimension"
                            ),
                        ));
                    }
                    Ok(d as usize)
                })
                .collect()
        };
        let batch = check(batch, "batch")?;
        let contracting = check(contracting, "contracting")?;
        let free = (0..rank).filter(|&d| !used[d]).collect();
        Ok(Roles {
            batch,
            contracting,
            free,
        })
    }
}

impl OpDef for DotGeneral {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], _size: i64) -> batching::Batched {
        let shift = |dims: &[i64], by: bool| -> Vec<i64> {
            dims.iter().map(|&d| d + i64::from(by)).collect()
        };
        let (l, r) = (batched[0], batched[1]);
        let mut op = DotGeneral {
            lhs_contracting: shift(&self.lhs_contracting, l),
            rhs_contracting: shift(&self.rhs_contracting, r),
            lhs_batch: shift(&self.lhs_batch, l),
            rhs_batch: shift(&self.rhs_batch, r),
            preferred_element_type: self.preferred_element_type,
        };
        let nb = self.lhs_batch.len();
        if l && r {
            // One more batch dimension, the first: the output's too.
            op.lhs_batch.insert(0, 0);
            op.rhs_batch.insert(0, 0);
            return Some(batching::all_batched(op, inputs));
        }
        // A free dimension of one operand: the output puts it after the
        // batch dimensions (and, for the right operand, after the left
        // operand's free dimensions).
        let lhs_free = inputs[0].rank() - usize::from(l) - nb - self.lhs_contracting.len();
        let at = if l { nb } else { nb + lhs_free };
        Some(batching::front_at(batching::all_batched(op, inputs), at))
    }

    fn name(&self) -> &'static str {
        "dot_general"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("dot_general", inputs, 2)?;
        let d = same_dtype("dot_general", inputs)?;
        check_dtype(
            "dot_general",
            d,
            d.is_numeric() || d.is_complex(),
            "numeric",
        )?;
        let out = product_dtype("dot_general", inputs, d, self.preferred_element_type)?;
        if self.lhs_batch.len() != self.rhs_batch.len() {
            return Err(self.error(
                inputs,
                format!(
                    "lhs_batch and rhs_batch must have the same length, got {} and {}",
                    self.lhs_batch.len(),
                    self.rhs_batch.len()
                ),
            ));
        }
        if self.lhs_contracting.len() != self.rhs_contracting.len() {
            return Err(self.error(
                inputs,
                format!(
                    "lhs_contracting and rhs_contracting must have the same length, got {} and {}",
                    self.lhs_contracting.len(),
                    self.rhs_contracting.len()
                ),
            ));
        }
        let (Some(a), Some(b)) = (inputs[0].shape.dims(), inputs[1].shape.dims()) else {
            return Ok(vec![TensorType::new(out, Shape::unknown_rank())]);
        };
        let l = self.roles(
            inputs,
            "lhs",
            a.len(),
            &self.lhs_batch,
            &self.lhs_contracting,
        )?;
        let r = self.roles(
            inputs,
            "rhs",
            b.len(),
            &self.rhs_batch,
            &self.rhs_contracting,
        )?;
        let mut dims = Vec::new();
        for (what, ls, rs) in [
            ("batch", &l.batch, &r.batch),
            ("contracting", &l.contracting, &r.contracting),
        ] {
            for (&i, &j) in ls.iter().zip(rs) {
                if let (Some(x), Some(y)) = (a[i], b[j])
                    && x != y
                {
                    return Err(self.error(
                        inputs,
                        format!(
                            "{what} dimensions must have equal sizes, got {x} (lhs dimension {i}) and {y} (rhs dimension {j})"
                        ),
                    ));
                }
                if what == "batch" {
                    dims.push(a[i].or(b[j]));
                }
            }
        }
        dims.extend(l.free.iter().map(|&i| a[i]));
        dims.extend(r.free.iter().map(|&j| b[j]));
        Ok(vec![TensorType::new(out, Shape::from_dims(dims))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        Ok(vec![cx.dot_general(
            &inputs[0],
            &inputs[1],
            &self.lhs_batch,
            &self.rhs_batch,
            &self.lhs_contracting,
            &self.rhs_contracting,
            outputs[0].clone(),
        )])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &[true, true])
    }

    /// With `G` the output gradient (dimensions: batch, lhs free, rhs free),
    /// `dA` is `dot_general(G, B)` batching G's batch dimensions with B's
    /// and contracting G's rhs-free dimensions with B's free ones; its
    /// dimensions are then A's batch, A's free, and A's contracting ones
    /// (in the order of B's matching contracting dimensions), which one
    /// transpose puts back in A's order. `dB` is the mirror image.
    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let (a, b) = (&inputs[0], &inputs[1]);
        let Some((g, preferred)) =
            product_cotangent(self.preferred_element_type, a, grads, &outputs[0])?
        else {
            return Ok(vec![None, None]);
        };
        let types = [
            TensorType::new(a.dtype(), a.shape()),
            TensorType::new(b.dtype(), b.shape()),
        ];
        let l = self.roles(
            &types,
            "lhs",
            a.rank(),
            &self.lhs_batch,
            &self.lhs_contracting,
        )?;
        let r = self.roles(
            &types,
            "rhs",
            b.rank(),
            &self.rhs_batch,
            &self.rhs_contracting,
        )?;
        let nb = l.batch.len();
        let (nlf, nrf) = (l.free.len(), r.free.len());
        let gbatch: Vec<i64> = (0..nb as i64).collect();
        let g_lfree: Vec<i64> = (nb..nb + nlf).map(|i| i as i64).collect();
        let g_rfree: Vec<i64> = (nb + nlf..nb + nlf + nrf).map(|i| i as i64).collect();
        let as_i64 = |v: &[usize]| v.iter().map(|&x| x as i64).collect::<Vec<_>>();
        // `grad_for(x's roles, other's roles, the other operand, G's dims
        // that pair with the other's free ones, x's contracting dims paired
        // with the other's)`.
        let grad_for = |mine: &Roles,
                        theirs: &Roles,
                        other: &Tensor,
                        g_theirs: &[i64],
                        my_contract: &[usize],
                        their_contract: &[usize]|
         -> Result<Tensor> {
            let d = apply1(
                DotGeneral {
                    lhs_contracting: g_theirs.to_vec(),
                    rhs_contracting: as_i64(&theirs.free),
                    lhs_batch: gbatch.clone(),
                    rhs_batch: as_i64(&theirs.batch),
                    preferred_element_type: preferred,
                },
                &[&g, other],
            )?;
            // The result's dimensions, as dimensions of x: batch, x's free,
            // then x's contracting dims in ascending order of the other
            // operand's matching dims (the other's leftover free dims).
            let mut pairs: Vec<(usize, usize)> = their_contract
                .iter()
                .copied()
                .zip(my_contract.iter().copied())
                .collect();
            pairs.sort_unstable();
            let mut src = mine.batch.clone();
            src.extend(&mine.free);
            src.extend(pairs.iter().map(|&(_, m)| m));
            let mut perm = vec![0i64; src.len()];
            for (i, &s) in src.iter().enumerate() {
                perm[s] = i as i64;
            }
            if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
                Ok(d)
            } else {
                d.transpose(&perm)
            }
        };
        let da = needed[0]
            .then(|| grad_for(&l, &r, b, &g_rfree, &l.contracting, &r.contracting))
            .transpose()?;
        let db = needed[1]
            .then(|| grad_for(&r, &l, a, &g_lfree, &r.contracting, &l.contracting))
            .transpose()?;
        Ok(vec![in_operand_dtype(da, a)?, in_operand_dtype(db, b)?])
    }
}

/// **Linear algebra**: general dot products over named contracting and
/// batch axes.
impl Tensor {
    /// `jax.lax.dot_general`: contracts `lhs_contracting` dimensions of
    /// `self` with `rhs_contracting` dimensions of `other` (pairwise) and
    /// treats `lhs_batch`/`rhs_batch` as batch dimensions; the result has
    /// the batch dimensions, then `self`'s remaining dimensions, then
    /// `other`'s. Negative dimension numbers count from the end.
    #[track_caller]
    pub fn dot_general(
        &self,
        other: &Tensor,
        lhs_contracting: &[i64],
        rhs_contracting: &[i64],
        lhs_batch: &[i64],
        rhs_batch: &[i64],
    ) -> Result<Tensor> {
        let dtype = self.dtype();
        self.dot_general_preferred(
            other,
            lhs_contracting,
            rhs_contracting,
            lhs_batch,
            rhs_batch,
            dtype,
        )
    }

    /// [`Tensor::dot_general`] accumulated in, and returning, `preferred`:
    /// the operands' dtype or a wider one of the same kind (JAX's
    /// `preferred_element_type`; see [`Tensor::matmul_preferred`]).
    #[track_caller]
    pub fn dot_general_preferred(
        &self,
        other: &Tensor,
        lhs_contracting: &[i64],
        rhs_contracting: &[i64],
        lhs_batch: &[i64],
        rhs_batch: &[i64],
        preferred: DType,
    ) -> Result<Tensor> {
        let norm = |list: &[i64], x: &Tensor| -> Vec<i64> {
            let r = x.shape().rank().unwrap_or(0) as i64;
            list.iter()
                .map(|&d| if d < 0 && d >= -r { d + r } else { d })
                .collect()
        };
        apply1(
            DotGeneral {
                lhs_contracting: norm(lhs_contracting, self),
                rhs_contracting: norm(rhs_contracting, other),
                lhs_batch: norm(lhs_batch, self),
                rhs_batch: norm(rhs_batch, other),
                preferred_element_type: (preferred != self.dtype()).then_some(preferred),
            },
            &[self, other],
        )
    }
}
