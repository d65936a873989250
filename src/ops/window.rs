//! Windowed reductions: StableHLO's `reduce_window` (sum, max, min over a
//! sliding window with strides, padding, base and window dilation), the
//! pooling helpers in TensorFlow's names (`max_pool`, `avg_pool`, channels
//! last, 1-3 spatial dimensions, `SAME`/`VALID`), and cumulative sums,
//! products and maxima along an axis (`exclusive`, `reverse`), written as
//! one-dimensional windows (the log-sum-exp is `composite::cumlogsumexp`).
//!
//! Gradients: a sum window's is the transposed window sum, computed as the
//! input gradient of the equivalent convolution with a kernel of ones
//! (`ops::conv`); a product window's is that of `g * y`, divided by the
//! input (not finite at zeros; `Tensor::cumprod`, a composite in
//! `composite::cumprod`, has an exact one of its own); a max or min
//! window's scatters each output gradient to
//! the element its window chose, with StableHLO's `select_and_scatter`
//! ([`SelectAndScatterAdd`], no dilation). Padding a max window pads with
//! -inf, so padded elements are never chosen.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `ops::conv`, `ops::reduce`,
//! `dtype`, `error` and `tensor`.

use super::batching;
use super::conv::{Conv, ConvDims, Layout, Padding};
use super::reduce::{highest, lowest};
use super::window_padding::dilated;
use super::{OpDef, check_dtype, describe, expect_arity, same_dtype};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Scalar, Shape, TensorType};
use crate::lower::{Cmp, Combiner, Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// What a window computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum WindowKind {
    Sum,
    Max,
    Min,
    Prod,
}

impl WindowKind {
    fn combiner(self, dtype: DType) -> (Combiner, Scalar) {
        match self {
            WindowKind::Sum => (Combiner::Add, Scalar::I64(0)),
            WindowKind::Prod => (Combiner::Mul, Scalar::I64(1)),
            WindowKind::Max => (Combiner::Max, lowest(dtype)),
            WindowKind::Min => (Combiner::Min, highest(dtype)),
        }
    }
}

/// The geometry of a window over every dimension of an array.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WindowDims {
    pub window: Vec<i64>,
    pub strides: Vec<i64>,
    pub padding: Vec<(i64, i64)>,
    pub base_dilation: Vec<i64>,
    pub window_dilation: Vec<i64>,
}

impl WindowDims {
    /// A window of `window` with unit strides and dilations, no padding.
    pub fn new(window: &[i64]) -> WindowDims {
        let n = window.len();
        WindowDims {
            window: window.to_vec(),
            strides: vec![1; n],
            padding: vec![(0, 0); n],
            base_dilation: vec![1; n],
            window_dilation: vec![1; n],
        }
    }

    fn check(&self, op: &str, rank: usize) -> Result<()> {
        let lists = [
            &self.window,
            &self.strides,
            &self.base_dilation,
            &self.window_dilation,
        ];
        if lists.iter().any(|l| l.len() != rank) || self.padding.len() != rank {
            return Err(Error::invalid(
                op,
                format!(
                    "window, strides, padding and dilations need {rank} entries, one per dimension"
                ),
            ));
        }
        // StableHLO wants every window size >= 1 (XLA's compiler refuses 0
        // with an error of its own), as jax.lax.reduce_window does.
        if lists.iter().any(|l| l.iter().any(|&v| v < 1)) {
            return Err(Error::invalid(
                op,
                format!(
                    "window sizes, strides and dilations must be >= 1, got window {:?}, \
                     strides {:?}, base dilation {:?}, window dilation {:?}",
                    self.window, self.strides, self.base_dilation, self.window_dilation
                ),
            ));
        }
        if self
            .padding
            .iter()
            .any(|(l, h)| l.unsigned_abs() > 1 << 40 || h.unsigned_abs() > 1 << 40)
        {
            return Err(Error::invalid(
                op,
                format!(
                    "padding {:?} is out of range: each side must be within 2^40",
                    self.padding
                ),
            ));
        }
        Ok(())
    }

    /// The output size of dimension `i` for an input of size `n`.
    fn out_size(&self, i: usize, n: i64) -> Option<i64> {
        let (lo, hi) = self.padding[i];
        let padded = dilated(n, self.base_dilation[i])
            .saturating_add(lo)
            .saturating_add(hi);
        let w = dilated(self.window[i], self.window_dilation[i]);
        if padded < 0 {
            return None;
        }
        Some(if padded < w {
            0
        } else {
            (padded - w) / self.strides[i] + 1
        })
    }

    fn infer(&self, op: &str, input: &TensorType) -> Result<TensorType> {
        let Some(dims) = input.shape.dims() else {
            return Ok(TensorType::new(input.dtype, Shape::unknown_rank()));
        };
        self.check(op, dims.len())?;
        let out = dims
            .iter()
            .enumerate()
            .map(|(i, d)| match d {
                Some(n) => self.out_size(i, *n).map(Some).ok_or_else(|| {
                    Error::invalid(op, format!("dimension {i} is padded below zero"))
                }),
                None => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(TensorType::new(input.dtype, Shape::from_dims(out)))
    }

    fn undilated(&self) -> bool {
        self.base_dilation
            .iter()
            .chain(&self.window_dilation)
            .all(|&d| d == 1)
    }

    /// The convolution that computes this window's sum of `[1, x.., 1]`
    /// with a kernel of ones `[window.., 1, 1]`.
    fn as_conv(&self) -> Conv {
        let r = self.window.len() as i64;
        Conv {
            strides: self.strides.clone(),
            padding: self.padding.clone(),
            lhs_dilation: self.base_dilation.clone(),
            rhs_dilation: self.window_dilation.clone(),
            dims: ConvDims {
                lhs: Layout {
                    batch: 0,
                    feature: r + 1,
                    spatial: (1..=r).collect(),
                },
                rhs: Layout {
                    batch: r + 1,
                    feature: r,
                    spatial: (0..r).collect(),
                },
                out: Layout {
                    batch: 0,
                    feature: r + 1,
                    spatial: (1..=r).collect(),
                },
            },
            feature_group_count: 1,
            batch_group_count: 1,
            reverse_kernel: false,
        }
    }
}

/// `reduce_window` with one of the [`WindowKind`] combiners.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReduceWindow {
    pub kind: WindowKind,
    pub dims: WindowDims,
}

impl OpDef for ReduceWindow {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        if batched[1..].contains(&true) {
            return None; // an initial value per example
        }
        let x = match batching::materialized(&inputs[0], batched[0], size) {
            Ok(x) => x,
            Err(e) => return Some(Err(e)),
        };
        // A window of 1 over the batch axis.
        let d = &self.dims;
        let front = |first: i64, v: &[i64]| [&[first][..], v].concat();
        let dims = WindowDims {
            window: front(1, &d.window),
            strides: front(1, &d.strides),
            padding: [&[(0, 0)][..], &d.padding].concat(),
            base_dilation: front(1, &d.base_dilation),
            window_dilation: front(1, &d.window_dilation),
        };
        let mut ins = vec![x];
        ins.extend(inputs[1..].iter().cloned());
        Some(batching::all_batched(
            ReduceWindow {
                kind: self.kind,
                dims,
            },
            &ins,
        ))
    }

    fn name(&self) -> &'static str {
        "reduce_window"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("reduce_window", inputs, 1)?;
        let d = inputs[0].dtype;
        check_dtype("reduce_window", d, d.is_numeric(), "numeric")?;
        Ok(vec![self.dims.infer("reduce_window", &inputs[0])?])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let (combiner, init) = self.kind.combiner(inputs[0].ty.dtype);
        let d = &self.dims;
        Ok(vec![cx.reduce_window(
            &inputs[0],
            init,
            combiner,
            &[&d.window, &d.strides, &d.base_dilation, &d.window_dilation],
            &d.padding,
            outputs[0].clone(),
        )?])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let (x, Some(g)) = (&inputs[0], &grads[0]) else {
            return Ok(vec![None]);
        };
        if !x.dtype().is_float() {
            return Ok(vec![None]);
        }
        let dx = match self.kind {
            WindowKind::Sum => self.sum_gradient(x, g)?,
            // d prod(w) / d x_i = prod(w) / x_i for every window w holding
            // x_i: the transposed window sum of g * y, divided by x; not
            // finite where x is 0 (`cumprod` does not come here).
            WindowKind::Prod => self.sum_gradient(x, &g.mul(&outputs[0])?)?.div(x)?,
            WindowKind::Max | WindowKind::Min if self.dims.undilated() => apply1(
                SelectAndScatterAdd {
                    dims: self.dims.clone(),
                    pick_max: self.kind == WindowKind::Max,
                },
                &[x, g],
            )?,
            _ => {
                return Err(Error::invalid(
                    "reduce_window",
                    format!(
                        "has no gradient for a {:?} window with dilation (operands: {})",
                        self.kind,
                        describe(&[x.tensor_type()])
                    ),
                ));
            }
        };
        Ok(vec![Some(dx)])
    }
}

impl ReduceWindow {
    /// The transposed window sum: the input gradient of the equivalent
    /// convolution with a kernel of ones.
    ///
    /// Dimensions the window leaves alone (size 1, stride 1, no padding
    /// or dilation) are independent rows: they are folded into the
    /// convolution's batch, so a pooling window over `[N, H, W, C]` is a
    /// 2-D convolution, not a 4-D one. XLA's CUDA backend aborts the
    /// process on convolutions with more than 3 spatial dimensions
    /// (cuDNN takes at most 3), and every backend does less work.
    fn sum_gradient(&self, x: &Tensor, g: &Tensor) -> Result<Tensor> {
        let d = &self.dims;
        let (rows, kept): (Vec<usize>, Vec<usize>) = (0..x.rank()).partition(|&i| {
            d.window[i] == 1
                && d.strides[i] == 1
                && d.padding[i] == (0, 0)
                && d.base_dilation[i] == 1
                && d.window_dilation[i] == 1
        });
        if kept.is_empty() {
            return Ok(g.clone()); // every window is one element
        }
        let perm: Vec<i64> = rows.iter().chain(&kept).map(|&i| i as i64).collect();
        let (x_dims, g_dims) = (x.dims(), g.dims());
        let row_count: i64 = rows.iter().map(|&i| x_dims[i]).product();
        let batched = |dims: &[i64]| -> Vec<i64> {
            let mut b = vec![row_count];
            b.extend(kept.iter().map(|&i| dims[i]));
            b.push(1);
            b
        };
        let kept_dims = WindowDims {
            window: kept.iter().map(|&i| d.window[i]).collect(),
            strides: kept.iter().map(|&i| d.strides[i]).collect(),
            padding: kept.iter().map(|&i| d.padding[i]).collect(),
            base_dilation: kept.iter().map(|&i| d.base_dilation[i]).collect(),
            window_dilation: kept.iter().map(|&i| d.window_dilation[i]).collect(),
        };
        let mut k_dims = kept_dims.window.clone();
        k_dims.extend([1, 1]);
        let ones = Tensor::fill(&k_dims, 1, x.dtype())?;
        let like = Tensor::fill(&batched(&x_dims), 0, x.dtype())?;
        let in_order = perm.iter().enumerate().all(|(at, &from)| at as i64 == from);
        let g_rows = match in_order {
            true => g.reshape(&batched(&g_dims))?,
            false => g.transpose(&perm)?.reshape(&batched(&g_dims))?,
        };
        let dx = kept_dims.as_conv().input_gradient(&g_rows, &like, &ones)?;
        let permuted: Vec<i64> = perm.iter().map(|&i| x_dims[i as usize]).collect();
        let mut inverse = vec![0i64; perm.len()];
        for (at, &from) in perm.iter().enumerate() {
            inverse[from as usize] = at as i64;
        }
        match in_order {
            true => dx.reshape(&permuted),
            false => dx.reshape(&permuted)?.transpose(&inverse),
        }
    }
}

/// The gradient of a max (or min) window: each element of `source` added
/// to the element of `operand` its window picked. Inputs `[operand,
/// source]`; the result has the operand's shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SelectAndScatterAdd {
    pub dims: WindowDims,
    pub pick_max: bool,
}

impl SelectAndScatterAdd {
    /// Do the windows tile an operand of `dims` (strides equal to the
    /// windows, no padding, each dimension a whole number of windows)?
    fn tiles(&self, dims: &[i64]) -> bool {
        let d = &self.dims;
        d.strides == d.window
            && d.padding.iter().all(|&p| p == (0, 0))
            && dims
                .iter()
                .zip(&d.window)
                .all(|(&n, &w)| w > 0 && n % w == 0)
    }
}

impl OpDef for SelectAndScatterAdd {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        // A window of 1 over the batch axis, as for `ReduceWindow`.
        let all = batching::all_materialized(inputs, batched, size);
        let d = &self.dims;
        let front = |first: i64, v: &[i64]| [&[first][..], v].concat();
        let op = SelectAndScatterAdd {
            dims: WindowDims {
                window: front(1, &d.window),
                strides: front(1, &d.strides),
                padding: [&[(0, 0)][..], &d.padding].concat(),
                base_dilation: front(1, &d.base_dilation),
                window_dilation: front(1, &d.window_dilation),
            },
            pick_max: self.pick_max,
        };
        Some(all.and_then(|x| batching::all_batched(op, &x)))
    }

    fn name(&self) -> &'static str {
        "select_and_scatter_add"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("select_and_scatter_add", inputs, 2)?;
        let d = same_dtype("select_and_scatter_add", inputs)?;
        check_dtype("select_and_scatter_add", d, d.is_float(), "floating-point")?;
        if !self.dims.undilated() {
            return Err(Error::invalid(
                "select_and_scatter_add",
                "windows may not be dilated",
            ));
        }
        let out = self.dims.infer("select_and_scatter_add", &inputs[0])?;
        if let (Some(a), Some(b)) = (out.shape.as_known(), inputs[1].shape.as_known())
            && a != b
        {
            return Err(Error::invalid(
                "select_and_scatter_add",
                format!("the source must have the window output's shape {a:?}, got {b:?}"),
            ));
        }
        Ok(vec![inputs[0].clone()])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        if self.tiles(&inputs[0].ty.dims) {
            let dtype = inputs[0].ty.dtype;
            let extreme = match self.pick_max {
                true => (Combiner::Max, lowest(dtype)),
                false => (Combiner::Min, highest(dtype)),
            };
            return Ok(vec![cx.tiled_select_and_scatter_add(
                &inputs[0],
                &inputs[1],
                extreme,
                &self.dims.window,
            )?]);
        }
        let cmp = if self.pick_max { Cmp::Ge } else { Cmp::Le };
        Ok(vec![cx.select_and_scatter_add(
            &inputs[0],
            &inputs[1],
            cmp,
            &self.dims.window,
            &self.dims.strides,
            &self.dims.padding,
            outputs[0].clone(),
        )?])
    }
}

/// The pooling geometry over `[batch, spatial.., channels]`.
fn pool_dims(
    x: &Tensor,
    op: &str,
    ksize: &[i64],
    strides: &[i64],
    padding: &Padding,
) -> Result<WindowDims> {
    // Only the rank must be known, and for SAME padding the spatial sizes
    // (the padding depends on them): the batch may be unknown, as in an
    // export that serves any batch.
    let shape = x.shape();
    let dims = shape.dims().ok_or_else(|| {
        Error::invalid(
            op,
            format!("needs an input of known rank, got {}", x.tensor_type()),
        )
    })?;
    let n = dims.len().saturating_sub(2);
    if !(1..=3).contains(&n) || ksize.len() != n || strides.len() != n {
        return Err(Error::invalid(
            op,
            format!(
                "needs a [batch, spatial.., channels] input with 1 to 3 spatial dimensions and \
                 one window size and stride per spatial dimension; got {} with ksize {ksize:?} \
                 and strides {strides:?}",
                x.tensor_type()
            ),
        ));
    }
    let mut w = WindowDims::new(&[&[1][..], ksize, &[1]].concat());
    w.strides = [&[1][..], strides, &[1]].concat();
    w.padding = match padding {
        Padding::Valid => vec![(0, 0); n + 2],
        Padding::Explicit(p) => [&[(0, 0)][..], p, &[(0, 0)]].concat(),
        Padding::Same => {
            let mut p = vec![(0, 0)];
            for i in 0..n {
                let (k, s) = (ksize[i], strides[i]);
                if s < 1 {
                    return Err(Error::invalid(op, "strides must be >= 1"));
                }
                let size = dims[i + 1].ok_or_else(|| {
                    Error::invalid(
                        op,
                        format!(
                            "SAME padding needs the spatial sizes, and spatial dimension {i} \
                             of {} is unknown (VALID or explicit padding does not)",
                            x.tensor_type()
                        ),
                    )
                })?;
                p.push(super::window_padding::same_padding(op, size, k, s, 1)?);
            }
            p.push((0, 0));
            p
        }
    };
    Ok(w)
}

/// **Convolution, pooling and scans**: windowed reductions, pooling and
/// cumulative scans.
impl Tensor {
    /// `reduce_window` (`jax.lax.reduce_window`) over every dimension.
    #[track_caller]
    pub fn reduce_window(&self, kind: WindowKind, dims: &WindowDims) -> Result<Tensor> {
        apply1(
            ReduceWindow {
                kind,
                dims: dims.clone(),
            },
            &[self],
        )
    }

    /// `tf.nn.max_pool` over `[batch, spatial.., channels]` (1 to 3
    /// spatial dimensions).
    #[track_caller]
    pub fn max_pool(&self, ksize: &[i64], strides: &[i64], padding: Padding) -> Result<Tensor> {
        let w = pool_dims(self, "max_pool", ksize, strides, &padding)?;
        self.reduce_window(WindowKind::Max, &w)
    }

    /// `tf.nn.avg_pool`: the mean over each window's elements that are not
    /// padding (TensorFlow's rule for `SAME`).
    #[track_caller]
    pub fn avg_pool(&self, ksize: &[i64], strides: &[i64], padding: Padding) -> Result<Tensor> {
        let w = pool_dims(self, "avg_pool", ksize, strides, &padding)?;
        check_dtype(
            "avg_pool",
            self.dtype(),
            self.dtype().is_float(),
            "floating-point",
        )?;
        let sums = self.reduce_window(WindowKind::Sum, &w)?;
        let counts = self.ones_like()?.reduce_window(WindowKind::Sum, &w)?;
        sums.div(&counts)
    }

    /// A one-dimensional window along `axis` covering, for each position,
    /// the elements before it (or after it, `reverse`), itself included
    /// unless `exclusive`.
    pub(crate) fn cumulative(
        &self,
        kind: WindowKind,
        axis: i64,
        exclusive: bool,
        reverse: bool,
    ) -> Result<Tensor> {
        // Only the axis must be known: the window spans it; other
        // dimensions may be known only when the program is compiled.
        let shape = self.shape();
        let dims = shape.dims().ok_or_else(|| {
            Error::invalid(
                "cumulative",
                format!("needs a known rank, got {}", self.tensor_type()),
            )
        })?;
        let rank = dims.len() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        if !(0..rank).contains(&a) {
            return Err(Error::invalid(
                "cumulative",
                format!("axis {axis} is out of range for {}", self.tensor_type()),
            ));
        }
        let n = dims[a as usize].ok_or_else(|| {
            Error::invalid(
                "cumulative",
                format!(
                    "needs a known size along axis {axis}, got {}",
                    self.tensor_type()
                ),
            )
        })?;
        let mut window = vec![1; dims.len()];
        window[a as usize] = n.max(1);
        let mut w = WindowDims::new(&window);
        let before = n.max(1) - 1;
        w.padding[a as usize] = match (exclusive, reverse) {
            (false, false) => (before, 0),
            (false, true) => (0, before),
            (true, false) => (before + 1, -1),
            (true, true) => (-1, before + 1),
        };
        self.reduce_window(kind, &w)
    }

    /// `tf.math.cumsum` along `axis`.
    #[track_caller]
    pub fn cumsum(&self, axis: i64, exclusive: bool, reverse: bool) -> Result<Tensor> {
        self.cumulative(WindowKind::Sum, axis, exclusive, reverse)
    }

    /// The running maximum along `axis` (`jax.lax.cummax`).
    #[track_caller]
    pub fn cummax(&self, axis: i64, exclusive: bool, reverse: bool) -> Result<Tensor> {
        self.cumulative(WindowKind::Max, axis, exclusive, reverse)
    }
}
