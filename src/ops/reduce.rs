//! Reductions: `reduce_sum`/`mean`/`max`/`min`/`prod`/`any`/`all` over a
//! set of axes, `argmax`/`argmin` along one axis, and `softmax` /
//! `log_softmax` (a max and a sum reduction around an exponential).
//!
//! Semantics follow TensorFlow:
//! - an empty axis list reduces every axis (`axis=None`); negative axes
//!   count from the end; a repeated axis is an error;
//! - reducing a size-0 axis gives the combiner's identity: 0 for sum, 1
//!   for prod, -inf (or the dtype's lowest value) for max, +inf (or the
//!   highest) for min, false for any and true for all; the mean of no
//!   floats is NaN (0/0) and the mean of no integers is 0;
//! - the mean of integers is the integer mean, truncated toward zero
//!   (`reduce_mean([1, 2]) == 1`). It is accumulated in 64 bits (f32 for
//!   f16/bf16), so narrow dtypes do not wrap where TensorFlow's kernel,
//!   which accumulates in the input dtype, might;
//! - max and min of floats propagate NaN, as in TensorFlow and NumPy (the
//!   lowering makes this explicit; XLA's CPU `maximum` may drop NaN);
//! - argmax/argmin return i64 indices, ties go to the smallest index, and a
//!   NaN counts as larger than every number for argmax *and* smaller than
//!   every number for argmin (NumPy's rule: the first NaN wins either way).

use super::batching;
use super::{OpDef, check_dtype, expect_arity, grad_or_zeros, normalize_axis};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Scalar, Shape, TensorType};
use crate::lower::{Cmp, Combiner, Emitter, Val};
use crate::tensor::{Tensor, apply1};

// ------------------------------------------------------------- helpers

/// The lowest value of `dtype` (-inf for floats): the identity of max.
pub(super) fn lowest(dtype: DType) -> Scalar {
    match dtype {
        DType::Bool => Scalar::Bool(false),
        DType::I8 => Scalar::I64(i8::MIN.into()),
        DType::I16 => Scalar::I64(i16::MIN.into()),
        DType::I32 => Scalar::I64(i32::MIN.into()),
        DType::I64 => Scalar::I64(i64::MIN),
        d if d.is_unsigned_int() => Scalar::U64(0),
        _ => Scalar::F64(f64::NEG_INFINITY),
    }
}

/// The highest value of `dtype` (+inf for floats): the identity of min.
pub(super) fn highest(dtype: DType) -> Scalar {
    match dtype {
        DType::Bool => Scalar::Bool(true),
        DType::I8 => Scalar::I64(i8::MAX.into()),
        DType::I16 => Scalar::I64(i16::MAX.into()),
        DType::I32 => Scalar::I64(i32::MAX.into()),
        DType::I64 => Scalar::I64(i64::MAX),
        DType::U8 => Scalar::U64(u8::MAX.into()),
        DType::U16 => Scalar::U64(u16::MAX.into()),
        DType::U32 => Scalar::U64(u32::MAX.into()),
        DType::U64 => Scalar::U64(u64::MAX),
        _ => Scalar::F64(f64::INFINITY),
    }
}

/// Normalises `axes` against `rank` (empty means all axes) and rejects
/// repeats, as TensorFlow does; the result is sorted.
fn reduced_axes(op: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>> {
    if axes.is_empty() {
        return Ok((0..rank).collect());
    }
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let n = normalize_axis(op, a, rank)?;
        if out.contains(&n) {
            return Err(Error::invalid(
                op,
                format!("axes {axes:?} name dimension {n} more than once"),
            ));
        }
        out.push(n);
    }
    out.sort_unstable();
    Ok(out)
}

/// The dimensions left after reducing `axes` (kept as 1 with `keepdims`).
fn reduced_dims(dims: &[Dim], axes: &[usize], keepdims: bool) -> Vec<Dim> {
    dims.iter()
        .enumerate()
        .filter_map(|(i, d)| match axes.contains(&i) {
            true => keepdims.then_some(Some(1)),
            false => Some(*d),
        })
        .collect()
}

/// Broadcasts `r`, which lacks dimension `axis`, back to `dims`.
fn broadcast_back(cx: &mut Emitter, r: &Val, axis: usize, dims: &[i64]) -> Val {
    let map: Vec<i64> = (0..dims.len() as i64)
        .filter(|&d| d != axis as i64)
        .collect();
    cx.broadcast_in_dim(r, &map, dims)
}

fn as_i64(axes: &[usize]) -> Vec<i64> {
    axes.iter().map(|&a| a as i64).collect()
}

// -------------------------------------------------------------- reduce

/// Which reduction `Reduce` computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ReduceKind {
    Sum,
    Mean,
    Max,
    Min,
    Prod,
    Any,
    All,
}

impl ReduceKind {
    /// The combiner and its identity for `dtype`.
    fn combiner(self, dtype: DType) -> (Combiner, Scalar) {
        match self {
            ReduceKind::Sum | ReduceKind::Mean => (Combiner::Add, Scalar::I64(0)),
            ReduceKind::Prod => (Combiner::Mul, Scalar::I64(1)),
            ReduceKind::Max => (Combiner::Max, lowest(dtype)),
            ReduceKind::Min => (Combiner::Min, highest(dtype)),
            ReduceKind::Any => (Combiner::Or, Scalar::Bool(false)),
            ReduceKind::All => (Combiner::And, Scalar::Bool(true)),
        }
    }

    fn is_logical(self) -> bool {
        matches!(self, ReduceKind::Any | ReduceKind::All)
    }
}

/// Reduces over `axes` (empty: all axes), keeping reduced axes as size 1
/// when `keepdims` is set. Axes are kept as the user wrote them (possibly
/// negative) so the op can be inferred before the rank is known.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Reduce {
    pub kind: ReduceKind,
    pub axes: Vec<i64>,
    pub keepdims: bool,
}

impl Reduce {
    #[track_caller]
    pub fn new(kind: ReduceKind, axes: &[i64], keepdims: bool) -> Reduce {
        Reduce {
            kind,
            axes: axes.to_vec(),
            keepdims,
        }
    }

    fn check_operand(&self, dtype: DType) -> Result<()> {
        if self.kind.is_logical() {
            check_dtype(self.name(), dtype, dtype == DType::Bool, "bool")
        } else if dtype.is_complex() {
            let ok = matches!(
                self.kind,
                ReduceKind::Sum | ReduceKind::Mean | ReduceKind::Prod
            );
            super::complex::check_complex_operand(self.name(), dtype, ok)
        } else {
            check_dtype(self.name(), dtype, dtype.is_numeric(), "numeric")
        }
    }
}

impl OpDef for Reduce {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let rank = inputs[0].rank() - 1;
        let axes = match reduced_axes(self.name(), &self.axes, rank) {
            Ok(a) => a,
            Err(e) => return Some(Err(e)),
        };
        if axes.is_empty() {
            // A reduction over no axis of the example (a scalar one).
            return Some(Ok(vec![(inputs[0].clone(), true)]));
        }
        let op = Reduce {
            kind: self.kind,
            axes: axes.iter().map(|&a| a as i64 + 1).collect(),
            keepdims: self.keepdims,
        };
        Some(batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            ReduceKind::Sum => "reduce_sum",
            ReduceKind::Mean => "reduce_mean",
            ReduceKind::Max => "reduce_max",
            ReduceKind::Min => "reduce_min",
            ReduceKind::Prod => "reduce_prod",
            ReduceKind::Any => "reduce_any",
            ReduceKind::All => "reduce_all",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        let x = &inputs[0];
        self.check_operand(x.dtype)?;
        let shape = match x.shape.dims() {
            Some(dims) => {
                let axes = reduced_axes(self.name(), &self.axes, dims.len())?;
                Shape::from_dims(reduced_dims(dims, &axes, self.keepdims))
            }
            // Reducing every axis away gives a scalar whatever the rank.
            None if self.axes.is_empty() && !self.keepdims => Shape::scalar(),
            None => Shape::unknown_rank(),
        };
        Ok(vec![TensorType::new(x.dtype, shape)])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let axes = reduced_axes(self.name(), &self.axes, x.ty.rank())?;
        let float = x.ty.dtype.is_float();
        let r = match self.kind {
            ReduceKind::Mean => lower_mean(cx, x, &axes)?,
            ReduceKind::Max | ReduceKind::Min if float && !axes.is_empty() => {
                lower_nan_extreme(cx, self.kind, x, &axes)?
            }
            kind => {
                let (combiner, init) = kind.combiner(x.ty.dtype);
                reduce_or_identity(cx, x, init, &axes, combiner)?
            }
        };
        Ok(vec![cx.reshape(&r, &outputs[0].dims)])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (x, y) = (&inputs[0], &outputs[0]);
        if !x.dtype().is_inexact() || matches!(self.kind, ReduceKind::Any | ReduceKind::All) {
            return Ok(vec![None]);
        }
        let rank = x.rank();
        let axes: Vec<usize> = if self.axes.is_empty() {
            (0..rank).collect()
        } else {
            self.axes
                .iter()
                .map(|&a| normalize_axis("gradient", a, rank))
                .collect::<Result<_>>()?
        };
        let mut kept = x.dims();
        for &a in &axes {
            kept[a] = 1;
        }
        let g = grad_or_zeros(grads, y)?.reshape(&kept)?;
        let dx = match self.kind {
            ReduceKind::Sum => x.zeros_like()?.add(&g)?,
            ReduceKind::Prod => match product_of_others(x, &axes)? {
                Some(others) => g.mul(&others)?,
                None => g.mul(&y.reshape(&kept)?)?.div(x)?,
            },
            ReduceKind::Mean => {
                let count: i64 = axes.iter().map(|&a| x.dims()[a]).product();
                x.zeros_like()?.add(&g)?.div_scalar(count as f64)?
            }
            // The gradient is shared among the elements equal to the extreme.
            _ => {
                let mask = x.eq(&y.reshape(&kept)?)?.cast(x.dtype())?;
                let ties =
                    mask.reduce_sum(&axes.iter().map(|&a| a as i64).collect::<Vec<_>>(), true)?;
                mask.mul(&g)?.div(&ties)?
            }
        };
        Ok(vec![Some(dx)])
    }
}

/// `d(prod)/dx_i`: the product of the other elements of `x`'s slice over
/// `axes`, as exclusive running products from both ends (TensorFlow's
/// and JAX's rule), so it is exact where some elements are 0; `prod /
/// x_i` would give `0 / 0`. Several axes are first moved last and
/// flattened into one, which needs their sizes and the others'. A traced
/// shape with an unknown one, and a complex `x` (XLA's running products,
/// `reduce_window`, take real numbers only), get `None`, and the caller
/// falls back to `prod / x_i`.
fn product_of_others(x: &Tensor, axes: &[usize]) -> Result<Option<Tensor>> {
    if x.dtype().is_complex() {
        return Ok(None);
    }
    let running = |t: &Tensor, axis: i64| -> Result<Tensor> {
        t.cumprod(axis, true, false)?
            .mul(&t.cumprod(axis, true, true)?)
    };
    if let [axis] = axes {
        return Ok(Some(running(x, *axis as i64)?));
    }
    let dims = x.dims();
    if dims.iter().any(|&d| d < 0) {
        return Ok(None);
    }
    if dims.contains(&0) {
        return Ok(Some(x.zeros_like()?));
    }
    let rank = dims.len();
    let mut perm: Vec<usize> = (0..rank).filter(|a| !axes.contains(a)).collect();
    perm.extend_from_slice(axes);
    let moved: Vec<i64> = perm.iter().map(|&a| dims[a]).collect();
    let reduced: i64 = axes.iter().map(|&a| dims[a]).product();
    let perm_i64: Vec<i64> = perm.iter().map(|&a| a as i64).collect();
    let flat = x.transpose(&perm_i64)?.reshape(&[-1, reduced])?;
    let mut inverse = vec![0i64; rank];
    for (to, &from) in perm.iter().enumerate() {
        inverse[from] = to as i64;
    }
    let others = running(&flat, 1)?.reshape(&moved)?.transpose(&inverse)?;
    Ok(Some(others))
}

/// `cx.reduce`, skipping the op when there is nothing to reduce (a scalar
/// with all axes). Float sums go through [`float_sum`].
fn reduce_or_identity(
    cx: &mut Emitter,
    x: &Val,
    init: Scalar,
    axes: &[usize],
    combiner: Combiner,
) -> Result<Val> {
    if axes.is_empty() {
        return Ok(x.clone());
    }
    if combiner == Combiner::Add && x.ty.dtype.is_float() && !cx.is_partitioned() {
        return float_sum(cx, x, axes);
    }
    cx.reduce(x, init, &as_i64(axes), combiner)
}

/// A float sum accumulated in float64 and rounded once to the input's
/// dtype: the float32 (or 16-bit) result nearest the exact sum, which no
/// order of float32 additions betters. The pinned CPU compiler adds a
/// reduction's elements in one sequence (a few vector lanes at best), so
/// in float32 a sum over the 8192 rows of a `[32, 16, 16, 16]` activation
/// erred by 2e-6 to 6e-6 against float64 and the mean of its 131072
/// squares by 2e-5, where `jax.jit` (a newer XLA, pairwise) errs by
/// 4e-9 to 1.5e-7. The float64 accumulator costs no extra pass: the
/// conversion fuses into the reduce, which reads the float32 input once.
/// (`jnp.sum` likewise sums 16-bit floats in float32.) Many leading rows
/// start as a product ([`leading_rows_sum`]) whose blocks of 16 rows add
/// in float32, within JAX's error rather than exactly nearest. Float64
/// sums, and sums in
/// partitioned programs (which become collectives), stay as they are.
fn float_sum(cx: &mut Emitter, x: &Val, axes: &[usize]) -> Result<Val> {
    let sum = wide_sum(cx, x, axes)?;
    Ok(cx.convert(&sum, x.ty.dtype))
}

/// The float64 sum of float `x` over `axes` (see [`float_sum`]).
fn wide_sum(cx: &mut Emitter, x: &Val, axes: &[usize]) -> Result<Val> {
    if x.ty.dtype != DType::F64
        && let Some(sums) = leading_rows_sum(cx, x, axes)
    {
        return Ok(sums);
    }
    let wide = cx.convert(x, DType::F64);
    cx.reduce(&wide, Scalar::F64(0.0), &as_i64(axes), Combiner::Add)
}

/// Rows (the product of the reduced leading axes) from which a sum over
/// leading axes into a narrow output is a product with ones (see
/// [`leading_rows_sum`]).
const MANY_ROWS: i64 = 1024;

/// How many rows each block of [`leading_rows_sum`]'s product adds up:
/// at most this many, at least half.
const BLOCK_ROWS: i64 = 16;

/// A sum over many leading rows into a narrow output (BatchNorm's
/// statistics and its gain and bias gradients, a convolution's bias
/// gradient) as a batched product with ones: the rows of `[rows, cols]` in
/// blocks of [`BLOCK_ROWS`], `[rows / k, k, cols]`, each block's column
/// sums one small float32 product, then those block sums added in
/// float64. The pinned CPU compiler runs such products faster than its
/// column reduction (on W14's ResNet step, 21-25 ms against 27-28 ms with
/// float64 column reductions; `[32, 8, 8, 64]` summed over its 2048 rows
/// in 113 µs against 285 µs as one product over all rows, which also
/// added them in one float32 sequence and erred by 2e-6 to 6e-6 on 8192
/// rows). Only the 16 additions inside a block round in float32, so the
/// error is at most `15 u` times the sum of magnitudes (`u = 2^-24`) plus
/// the final rounding: on a `[32, 16, 16, 16]` activation 6e-8 relative,
/// where `jax.jit` errs by up to 8.2e-8. Converting every element to
/// float64 first instead, for the float32 nearest the exact sum, made
/// W10's step 5-10% slower (three interleaved runs of its program); the
/// block sums are 1/16 of the conversions. `None` (a plain float64
/// reduce) for fewer rows, other axes, a row count with no divisor in
/// `[BLOCK_ROWS / 2, BLOCK_ROWS]`, and in partitioned programs, whose
/// sums become collectives.
fn leading_rows_sum(cx: &mut Emitter, x: &Val, axes: &[usize]) -> Option<Val> {
    let k = axes.len();
    let leading = axes.iter().enumerate().all(|(i, &a)| a == i);
    if cx.is_partitioned() || !leading || k == x.ty.rank() {
        return None;
    }
    let rows: i64 = x.ty.dims[..k].iter().product();
    let cols: i64 = x.ty.dims[k..].iter().product();
    if rows < MANY_ROWS || cols < 2 {
        return None;
    }
    let block = (BLOCK_ROWS / 2..=BLOCK_ROWS)
        .rev()
        .find(|b| rows % b == 0)?;
    let narrow = match x.ty.dtype {
        DType::F32 => x.clone(),
        _ => cx.convert(x, DType::F32),
    };
    let blocks = cx.reshape(&narrow, &[rows / block, block, cols]);
    let partial = cx.blocked_column_sums(&blocks);
    let partial = cx.convert(&partial, DType::F64);
    let sums = cx
        .reduce(&partial, Scalar::F64(0.0), &[0], Combiner::Add)
        .ok()?;
    Some(cx.reshape(&sums, &x.ty.dims[k..]))
}

/// A float max/min that propagates NaN. XLA's CPU backend compiles
/// `maximum`/`minimum` with fast-math semantics by default (NaN operands
/// may be dropped), so the reduction body says explicitly: a NaN on either
/// side wins, otherwise the combiner decides.
///
/// In a partitioned program that body cannot become an all-reduce, so the
/// NaN is found by a second, `or` reduction of `x != x` instead.
fn lower_nan_extreme(cx: &mut Emitter, kind: ReduceKind, x: &Val, axes: &[usize]) -> Result<Val> {
    let (combiner, init) = kind.combiner(x.ty.dtype);
    if cx.is_partitioned() {
        let extreme = cx.reduce(x, init, &as_i64(axes), combiner)?;
        let is_nan = cx.compare(Cmp::Ne, x, x);
        let any_nan = cx.reduce(&is_nan, Scalar::Bool(false), &as_i64(axes), Combiner::Or)?;
        let nan = cx.constant(Scalar::F64(f64::NAN), extreme.ty.clone());
        return Ok(cx.select(&any_nan, &nan, &extreme));
    }
    let op = match combiner {
        Combiner::Max => "maximum",
        _ => "minimum",
    };
    let init = cx.constant(init, ArraySpec::scalar(x.ty.dtype));
    let mut out = cx.reduce_with(&[x], &[&init], &as_i64(axes), |cx, a| {
        let (acc, new) = (&a[0], &a[1]);
        let best = cx.binary(op, acc, new);
        let acc_nan = cx.compare(Cmp::Ne, acc, acc);
        let best = cx.select(&acc_nan, acc, &best);
        let new_nan = cx.compare(Cmp::Ne, new, new);
        Ok(vec![cx.select(&new_nan, new, &best)])
    })?;
    Ok(out.remove(0))
}

/// The dtype a mean is accumulated in: 64-bit for ints, f32 for 16-bit
/// floats.
fn mean_accumulator(dtype: DType) -> DType {
    match dtype {
        d if d.is_signed_int() => DType::I64,
        d if d.is_unsigned_int() => DType::U64,
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Sum in the accumulator dtype, divided by the element count (at least 1
/// for ints, so no division by zero; floats give 0/0 = NaN like TF).
fn lower_mean(cx: &mut Emitter, x: &Val, axes: &[usize]) -> Result<Val> {
    let dtype = x.ty.dtype;
    if dtype.is_float() && !axes.is_empty() && !cx.is_partitioned() {
        // Summed and divided in float64, rounded once (see `float_sum`).
        let sum = wide_sum(cx, x, axes)?;
        let count: i64 = axes.iter().map(|&a| x.ty.dims[a]).product();
        let n = cx.constant(Scalar::F64(count as f64), sum.ty.clone());
        let mean = cx.binary("divide", &sum, &n);
        return Ok(cx.convert(&mean, dtype));
    }
    let acc = mean_accumulator(dtype);
    let wide = cx.convert(x, acc);
    let sum = reduce_or_identity(cx, &wide, Scalar::I64(0), axes, Combiner::Add)?;
    let count: i64 = axes.iter().map(|&a| x.ty.dims[a]).product();
    let count = match acc.is_int() {
        true => Scalar::I64(count.max(1)),
        false => Scalar::F64(count as f64),
    };
    let n = cx.constant(count, sum.ty.clone());
    let mean = cx.binary("divide", &sum, &n);
    Ok(cx.convert(&mean, dtype))
}

// ----------------------------------------------------------- argreduce

/// Which extreme `ArgReduce` looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ArgKind {
    Max,
    Min,
}

/// The index (i64) of the largest or smallest element along `axis`; ties
/// go to the smallest index and NaN wins (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ArgReduce {
    pub kind: ArgKind,
    pub axis: i64,
}

impl OpDef for ArgReduce {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let op = ArgReduce {
            kind: self.kind,
            axis: batching::shifted(self.axis, inputs[0].rank() - 1),
        };
        Some(batching::all_batched(op, inputs))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            ArgKind::Max => "argmax",
            ArgKind::Min => "argmin",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let name = self.name();
        expect_arity(name, inputs, 1)?;
        let x = &inputs[0];
        let d = x.dtype;
        check_dtype(
            name,
            d,
            d.is_numeric() || d == DType::Bool,
            "numeric or bool",
        )?;
        let Some(dims) = x.shape.dims() else {
            return Ok(vec![TensorType::new(DType::I64, Shape::unknown_rank())]);
        };
        let axis = normalize_axis(name, self.axis, dims.len())?;
        if dims[axis] == Some(0) {
            return Err(Error::invalid(
                name,
                format!("cannot take the {name} of an empty axis {axis} of {x}"),
            ));
        }
        let out = reduced_dims(dims, &[axis], false);
        Ok(vec![TensorType::new(DType::I64, Shape::from_dims(out))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let axis = normalize_axis(self.name(), self.axis, x.ty.rank())? as i64;
        let dtype = x.ty.dtype;
        let idx = cx.iota(x.ty.with_dtype(DType::I64), axis);
        let start = match self.kind {
            ArgKind::Max => lowest(dtype),
            ArgKind::Min => highest(dtype),
        };
        let init_v = cx.constant(start, ArraySpec::scalar(dtype));
        let init_i = cx.constant(Scalar::I64(0), ArraySpec::scalar(DType::I64));
        let kind = self.kind;
        let mut out = cx.reduce_with(&[x, &idx], &[&init_v, &init_i], &[axis], |cx, a| {
            Ok(arg_step(cx, kind, dtype.is_float(), a))
        })?;
        Ok(vec![out.remove(1)])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        _grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        Ok(vec![None])
    }
}

/// One step of the arg reduction on `[value_a, index_a, value_b, index_b]`:
/// keeps the better pair, where better is NaN first (floats), then the
/// larger (argmax) or smaller (argmin) value, then the smaller index. This
/// is a total preorder, so the step is associative and commutative as
/// XLA's reduce requires.
fn arg_step(cx: &mut Emitter, kind: ArgKind, float: bool, a: &[Val]) -> Vec<Val> {
    let (av, ai, bv, bi) = (&a[0], &a[1], &a[2], &a[3]);
    let dir = match kind {
        ArgKind::Max => Cmp::Gt,
        ArgKind::Min => Cmp::Lt,
    };
    let mut a_wins = cx.compare(dir, av, bv);
    let mut same = cx.compare(Cmp::Eq, av, bv);
    if float {
        let a_nan = cx.compare(Cmp::Ne, av, av);
        let b_nan = cx.compare(Cmp::Ne, bv, bv);
        let b_num = cx.unary("not", &b_nan);
        let only_a_nan = cx.binary("and", &a_nan, &b_num);
        a_wins = cx.binary("or", &a_wins, &only_a_nan);
        let both_nan = cx.binary("and", &a_nan, &b_nan);
        same = cx.binary("or", &same, &both_nan);
    }
    let earlier = cx.compare(Cmp::Lt, ai, bi);
    let tie_to_a = cx.binary("and", &same, &earlier);
    let a_wins = cx.binary("or", &a_wins, &tie_to_a);
    vec![cx.select(&a_wins, av, bv), cx.select(&a_wins, ai, bi)]
}

// ------------------------------------------------------------- softmax

/// `softmax(x) = exp(x - max) / sum(exp(x - max))` along `axis`, or its
/// logarithm `(x - max) - log(sum(exp(x - max)))` when `log` is set.
/// Subtracting the max keeps `exp` from overflowing.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Softmax {
    pub axis: i64,
    pub log: bool,
}

impl OpDef for Softmax {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        let axis = batching::shifted(self.axis, inputs[0].rank() - 1);
        Some(batching::all_batched(
            Softmax {
                axis,
                log: self.log,
            },
            inputs,
        ))
    }

    fn name(&self) -> &'static str {
        if self.log { "log_softmax" } else { "softmax" }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let name = self.name();
        expect_arity(name, inputs, 1)?;
        let x = &inputs[0];
        check_dtype(name, x.dtype, x.dtype.is_float(), "floating-point")?;
        if let Some(rank) = x.rank() {
            normalize_axis(name, self.axis, rank)?;
        }
        Ok(vec![x.clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let x = &inputs[0];
        let dims = x.ty.dims.clone();
        let axis = normalize_axis(self.name(), self.axis, dims.len())?;
        let max = cx.reduce(x, lowest(x.ty.dtype), &[axis as i64], Combiner::Max)?;
        let max = broadcast_back(cx, &max, axis, &dims);
        let shifted = cx.binary("subtract", x, &max);
        let e = cx.unary("exponential", &shifted);
        let sum = cx.reduce(&e, Scalar::I64(0), &[axis as i64], Combiner::Add)?;
        let sum = broadcast_back(cx, &sum, axis, &dims);
        let out = if self.log {
            let log_sum = cx.unary("log", &sum);
            cx.binary("subtract", &shifted, &log_sum)
        } else {
            cx.binary("divide", &e, &sum)
        };
        Ok(vec![out])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let y = &outputs[0];
        let g = grad_or_zeros(grads, y)?;
        let dx = if self.log {
            g.sub(&y.exp()?.mul(&g.reduce_sum(&[self.axis], true)?)?)?
        } else {
            y.mul(&g.sub(&g.mul(y)?.reduce_sum(&[self.axis], true)?)?)?
        };
        let _ = inputs;
        Ok(vec![Some(dx)])
    }
}

// -------------------------------------------------------- tensor methods

macro_rules! reduce_methods {
    ($($(#[$doc:meta])* $method:ident => $kind:ident),* $(,)?) => {
        /// **Reductions and statistics**: sums, products, extremes and logical
        /// reductions over axes.
        impl Tensor {$(
            $(#[$doc])*
            ///
            /// `axes` empty reduces every axis; negative axes count from the
            /// end; `keepdims` keeps reduced axes as size 1.
            #[track_caller]
            pub fn $method(&self, axes: &[i64], keepdims: bool) -> Result<Tensor> {
                apply1(Reduce::new(ReduceKind::$kind, axes, keepdims), &[self])
            }
        )*}
    };
}

reduce_methods! {
    /// Sum of elements (0 over an empty axis); ints wrap on overflow.
    reduce_sum => Sum,
    /// Arithmetic mean; for ints the truncated integer mean, as in
    /// TensorFlow (see the module docs for accumulation and empty axes).
    reduce_mean => Mean,
    /// Largest element (-inf or the dtype's lowest over an empty axis);
    /// NaN propagates.
    reduce_max => Max,
    /// Smallest element (+inf or the dtype's highest over an empty axis);
    /// NaN propagates.
    reduce_min => Min,
    /// Product of elements (1 over an empty axis).
    reduce_prod => Prod,
    /// Logical or of bool elements (false over an empty axis).
    reduce_any => Any,
    /// Logical and of bool elements (true over an empty axis).
    reduce_all => All,
}

/// **Reductions and statistics**: the index of the extreme, and the
/// softmax family.
impl Tensor {
    /// Index (i64) of the largest element along `axis`; ties give the
    /// smallest index and the first NaN wins.
    #[track_caller]
    pub fn argmax(&self, axis: i64) -> Result<Tensor> {
        apply1(
            ArgReduce {
                kind: ArgKind::Max,
                axis,
            },
            &[self],
        )
    }

    /// Index (i64) of the smallest element along `axis`; ties give the
    /// smallest index and the first NaN wins.
    #[track_caller]
    pub fn argmin(&self, axis: i64) -> Result<Tensor> {
        apply1(
            ArgReduce {
                kind: ArgKind::Min,
                axis,
            },
            &[self],
        )
    }

    /// Normalised exponentials along `axis` (each slice sums to 1);
    /// numerically stable for large inputs.
    #[track_caller]
    pub fn softmax(&self, axis: i64) -> Result<Tensor> {
        apply1(Softmax { axis, log: false }, &[self])
    }

    /// `log(softmax(x))` along `axis`, computed without forming the
    /// softmax, so it stays finite where the softmax underflows to 0.
    #[track_caller]
    pub fn log_softmax(&self, axis: i64) -> Result<Tensor> {
        apply1(Softmax { axis, log: true }, &[self])
    }
}
