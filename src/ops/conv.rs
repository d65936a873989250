//! Convolution: StableHLO's `convolution` with N spatial dimensions, as
//! `jax.lax.conv_general_dilated`, and TensorFlow's helpers in their own
//! names and layouts (`conv1d`, `conv2d`, `conv3d`, `depthwise_conv2d`,
//! `conv2d_transpose`).
//!
//! One op, [`Conv`], carries every attribute: strides, explicit padding,
//! input (lhs) and kernel (rhs) dilation, the dimension numbers (where
//! batch, feature and spatial dimensions sit in each operand), feature and
//! batch group counts, and whether the kernel's spatial dimensions are
//! reversed. Both gradients are convolutions again: the input's is the
//! output gradient convolved with the reversed kernel (strides become
//! input dilation), the kernel's is the input convolved with the output
//! gradient (batch and feature roles swapped, feature groups becoming
//! batch groups). `SAME` padding follows TensorFlow: the output has
//! `ceil(input / stride)` positions, with the odd padding element after.
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor` and `error`.

pub use super::window_padding::Padding;
use super::window_padding::dilated;

use super::batching;
use super::{OpDef, check_dtype, describe, expect_arity, same_dtype};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// Where one operand's dimensions are: for an input or output, its batch
/// and feature dimensions; for a kernel, its output and input feature
/// dimensions. Then the spatial dimensions, in matching order.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Layout {
    pub batch: i64,
    pub feature: i64,
    pub spatial: Vec<i64>,
}

impl Layout {
    /// Parses a layout string: `N`/`C` (or for kernels `O`/`I`) name the
    /// batch and feature dimensions, any other letters the spatial ones,
    /// which are ordered as in `order` (the kernel's string).
    fn parse(spec: &str, batch: char, feature: char, order: &str) -> Result<Layout> {
        let bad = || {
            Error::invalid(
                "conv",
                format!("bad dimension layout {spec:?} (spatial letters must match {order:?})"),
            )
        };
        let find = |c: char| spec.find(c).map(|i| i as i64);
        let spatial_letters: Vec<char> = order.chars().filter(|c| !"NCOI".contains(*c)).collect();
        let spatial = spatial_letters
            .iter()
            .map(|c| find(*c))
            .collect::<Option<Vec<i64>>>()
            .ok_or_else(bad)?;
        let layout = Layout {
            batch: find(batch).ok_or_else(bad)?,
            feature: find(feature).ok_or_else(bad)?,
            spatial,
        };
        if spec.chars().count() != layout.spatial.len() + 2 {
            return Err(bad());
        }
        Ok(layout)
    }

    fn rank(&self) -> usize {
        self.spatial.len() + 2
    }

    /// Batch and feature swapped (for the kernel gradient).
    fn swapped(&self) -> Layout {
        Layout {
            batch: self.feature,
            feature: self.batch,
            spatial: self.spatial.clone(),
        }
    }

    /// Each dimension index 0..rank once.
    fn is_permutation(&self) -> bool {
        let mut seen = vec![false; self.rank()];
        for d in [self.batch, self.feature].iter().chain(&self.spatial) {
            match usize::try_from(*d).ok().and_then(|d| seen.get_mut(d)) {
                Some(s) if !*s => *s = true,
                _ => return false,
            }
        }
        true
    }
}

/// The three layouts of a convolution.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConvDims {
    pub lhs: Layout,
    pub rhs: Layout,
    pub out: Layout,
}

impl ConvDims {
    /// From layout strings as JAX writes them: `("NHWC", "HWIO", "NHWC")`.
    pub fn from_strings(lhs: &str, rhs: &str, out: &str) -> Result<ConvDims> {
        Ok(ConvDims {
            lhs: Layout::parse(lhs, 'N', 'C', rhs)?,
            rhs: Layout::parse(rhs, 'O', 'I', rhs)?,
            out: Layout::parse(out, 'N', 'C', rhs)?,
        })
    }
}

/// `conv_general_dilated` with every attribute explicit.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv {
    pub strides: Vec<i64>,
    pub padding: Vec<(i64, i64)>,
    pub lhs_dilation: Vec<i64>,
    pub rhs_dilation: Vec<i64>,
    pub dims: ConvDims,
    pub feature_group_count: i64,
    pub batch_group_count: i64,
    /// Reverse the kernel's spatial dimensions (the input gradient's).
    pub reverse_kernel: bool,
}

impl Conv {
    /// The rule of `batch` for a shared kernel: the examples' axis folded
    /// into the input's batch dimension (as its major part), and the
    /// output's unfolded and moved to the front.
    fn batch_into_n(&self, x: &Tensor, kernel: &Tensor, size: i64) -> Result<Vec<(Tensor, bool)>> {
        let folded = merge_axis(x, 0, self.dims.lhs.batch)?;
        let out = apply1(self.clone(), &[&folded, kernel])?;
        let m = self.dims.out.batch;
        let unfolded = split_axis(&out, m, size)?;
        Ok(vec![(batching::to_front(unfolded, m as usize)?, true)])
    }

    /// The rule of `batch` for a kernel per example (JAX's feature-group
    /// trick): the kernels are stacked along their output features
    /// (example-major) and each example's input features become a group
    /// of their own, so one convolution with `B` times the feature groups
    /// convolves every example with its kernel; the output's features are
    /// unfolded. An input every example shares (and no groups of its own)
    /// needs no groups: it meets all the kernels at once.
    fn batch_kernels(
        &self,
        (x, x_batched): (&Tensor, bool),
        kernel: &Tensor,
        size: i64,
    ) -> Result<Vec<(Tensor, bool)>> {
        let d = &self.dims;
        let kernels = merge_axis(kernel, 0, d.rhs.batch)?;
        let out = if !x_batched && self.feature_group_count == 1 {
            apply1(self.clone(), &[x, &kernels])?
        } else {
            let x = batching::materialized(x, x_batched, size)?;
            let features = merge_axis(&x, 0, d.lhs.feature)?;
            let grouped = Conv {
                feature_group_count: self.feature_group_count * size,
                ..self.clone()
            };
            apply1(grouped, &[&features, &kernels])?
        };
        let unfolded = split_axis(&out, d.out.feature, size)?;
        Ok(vec![(
            batching::to_front(unfolded, d.out.feature as usize)?,
            true,
        )])
    }

    /// The rule of `batch` for grouped batches (the kernel gradient of a
    /// grouped or depthwise convolution), as JAX's: every example's input
    /// batch becomes batch groups of their own (the examples folded into
    /// the input's batch as its major part, `B` times the batch groups) and
    /// its kernels output features of their own; the output's features
    /// are unfolded. A value every example shares is repeated first.
    fn batch_grouped(
        &self,
        inputs: &[Tensor],
        batched: &[bool],
        size: i64,
    ) -> Result<Vec<(Tensor, bool)>> {
        let d = &self.dims;
        let x = batching::materialized(&inputs[0], batched[0], size)?;
        let kernel = batching::materialized(&inputs[1], batched[1], size)?;
        let grouped = Conv {
            batch_group_count: self.batch_group_count * size,
            ..self.clone()
        };
        let out = apply1(
            grouped,
            &[
                &merge_axis(&x, 0, d.lhs.batch)?,
                &merge_axis(&kernel, 0, d.rhs.batch)?,
            ],
        )?;
        let unfolded = split_axis(&out, d.out.feature, size)?;
        Ok(vec![(
            batching::to_front(unfolded, d.out.feature as usize)?,
            true,
        )])
    }

    fn error(&self, inputs: &[TensorType], what: impl std::fmt::Display) -> Error {
        Error::invalid("conv", format!("{what} (operands: {})", describe(inputs)))
    }

    /// The attributes alone: lengths, signs and layouts.
    fn check_attributes(&self, inputs: &[TensorType]) -> Result<()> {
        let n = self.dims.rhs.spatial.len();
        let d = &self.dims;
        if d.lhs.spatial.len() != n || d.out.spatial.len() != n {
            return Err(self.error(inputs, "the layouts have different spatial ranks"));
        }
        if ![&d.lhs, &d.rhs, &d.out].iter().all(|l| l.is_permutation()) {
            return Err(self.error(inputs, "a layout names a dimension twice or out of range"));
        }
        let lists = [&self.strides, &self.lhs_dilation, &self.rhs_dilation];
        if lists.iter().any(|l| l.len() != n) || self.padding.len() != n {
            return Err(self.error(
                inputs,
                format!(
                    "strides, padding and dilations need {n} entries, one per spatial dimension"
                ),
            ));
        }
        if lists.iter().any(|l| l.iter().any(|&v| v < 1)) {
            return Err(self.error(inputs, "strides and dilations must be >= 1"));
        }
        if self
            .padding
            .iter()
            .any(|(lo, hi)| lo.unsigned_abs() > 1 << 40 || hi.unsigned_abs() > 1 << 40)
        {
            return Err(self.error(
                inputs,
                format!(
                    "padding {:?} is out of range: each side must be within 2^40",
                    self.padding
                ),
            ));
        }
        let (f, b) = (self.feature_group_count, self.batch_group_count);
        if f < 1 || b < 1 || (f > 1 && b > 1) {
            return Err(self.error(
                inputs,
                "feature_group_count and batch_group_count must be >= 1, and not both above 1",
            ));
        }
        Ok(())
    }

    /// One output spatial size, or an error when the window does not fit.
    fn out_size(&self, i: usize, input: i64, kernel: i64) -> Option<i64> {
        let (lo, hi) = self.padding[i];
        let padded = dilated(input, self.lhs_dilation[i])
            .saturating_add(lo)
            .saturating_add(hi);
        let window = dilated(kernel, self.rhs_dilation[i]);
        if padded < 0 {
            return None;
        }
        Some(if padded < window {
            0
        } else {
            (padded - window) / self.strides[i] + 1
        })
    }
}

impl OpDef for Conv {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        // Examples of an input with a shared kernel join the convolution's
        // own batch: [B, ..N..] -> [..B*N..], and back after.
        if self.batch_group_count != 1 {
            return Some(self.batch_grouped(inputs, batched, size));
        }
        if batched[1] {
            return Some(self.batch_kernels((&inputs[0], batched[0]), &inputs[1], size));
        }
        Some(self.batch_into_n(&inputs[0], &inputs[1], size))
    }

    fn name(&self) -> &'static str {
        "conv"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity("conv", inputs, 2)?;
        let dtype = same_dtype("conv", inputs)?;
        check_dtype("conv", dtype, dtype.is_float(), "floating-point")?;
        self.check_attributes(inputs)?;
        let d = &self.dims;
        let rank = d.rhs.rank();
        let (Some(lhs), Some(rhs)) = (inputs[0].shape.dims(), inputs[1].shape.dims()) else {
            return Ok(vec![TensorType::new(dtype, Shape::unknown_rank())]);
        };
        if lhs.len() != rank || rhs.len() != rank {
            return Err(self.error(inputs, format!("operands must have rank {rank}")));
        }
        let at = |dims: &[Dim], i: i64| dims[i as usize];
        let (f, b) = (self.feature_group_count, self.batch_group_count);
        let in_features = at(lhs, d.lhs.feature);
        let kernel_in = at(rhs, d.rhs.feature);
        let kernel_out = at(rhs, d.rhs.batch);
        let batch = at(lhs, d.lhs.batch);
        if let (Some(c), Some(k)) = (in_features, kernel_in)
            && c != k * f
        {
            return Err(self.error(
                inputs,
                format!(
                    "the input has {c} features, the kernel expects {k} per group times \
                     feature_group_count {f}"
                ),
            ));
        }
        if let Some(o) = kernel_out
            && (o % f != 0 || o % b != 0)
        {
            return Err(self.error(
                inputs,
                format!("the kernel's {o} output features are not divisible by the group counts"),
            ));
        }
        if let Some(n) = batch
            && n % b != 0
        {
            return Err(self.error(
                inputs,
                format!("the batch of {n} is not divisible by batch_group_count {b}"),
            ));
        }
        let mut out: Vec<Dim> = vec![None; rank];
        out[d.out.batch as usize] = batch.map(|n| n / b);
        out[d.out.feature as usize] = kernel_out;
        for (i, (&ls, &rs)) in d.lhs.spatial.iter().zip(&d.rhs.spatial).enumerate() {
            let size = match (at(lhs, ls), at(rhs, rs)) {
                (Some(x), Some(k)) => Some(self.out_size(i, x, k).ok_or_else(|| {
                    self.error(
                        inputs,
                        format!("spatial dimension {i} is padded below zero"),
                    )
                })?),
                _ => None,
            };
            out[d.out.spatial[i] as usize] = size;
        }
        Ok(vec![TensorType::new(dtype, Shape::from_dims(out))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        // The pinned XLA's CPU convolution with `window_reversal` took 37 ms
        // where a `reverse` of the kernel and a plain convolution took 3.1
        // ms (W10's input gradient), so the reversal is its own op, as
        // JAX emits it.
        let kernel = match self.reverse_kernel {
            true => cx.reverse(&inputs[1], &self.dims.rhs.spatial),
            false => inputs[1].clone(),
        };
        let (conv, kernel) = self.without_dead_taps(cx, &inputs[0].ty.dims, kernel);
        conv.lower_plain(cx, &inputs[0], &kernel, &outputs[0])
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &[true, true])
    }

    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None, None]);
        };
        let (lhs, rhs) = (&inputs[0], &inputs[1]);
        let dl = needed[0]
            .then(|| self.input_gradient(g, lhs, rhs))
            .transpose()?;
        let dr = needed[1]
            .then(|| self.kernel_gradient(g, lhs, rhs))
            .transpose()?;
        Ok(vec![dl, dr])
    }
}

/// Splits axis `axis` of `x` into `(groups, size / groups)`.
fn split_axis(x: &Tensor, axis: i64, groups: i64) -> Result<Tensor> {
    let mut dims = x.dims();
    let a = axis as usize;
    let rest = dims[a] / groups;
    dims.splice(a..=a, [groups, rest]);
    x.reshape(&dims)
}

/// Moves axis `from` next to axis `into` (as its major part) and merges
/// them; `into` counts axes as they are once `from` is taken out.
fn merge_axis(x: &Tensor, from: i64, into: i64) -> Result<Tensor> {
    let rank = x.dims().len() as i64;
    let mut perm: Vec<i64> = (0..rank).filter(|&i| i != from).collect();
    perm.insert(into as usize, from);
    let moved = x.transpose(&perm)?;
    let mut dims = moved.dims();
    let major = dims.remove(into as usize);
    dims[into as usize] *= major;
    moved.reshape(&dims)
}

fn spatial_sizes(x: &Tensor, layout: &Layout) -> Vec<i64> {
    let dims = x.dims();
    layout.spatial.iter().map(|&s| dims[s as usize]).collect()
}

impl Conv {
    /// d(loss)/d(input): the output gradient convolved with the reversed
    /// kernel, its roles transposed; strides become input dilation.
    pub(super) fn input_gradient(&self, g: &Tensor, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
        self.input_gradient_for(g, &spatial_sizes(lhs, &self.dims.lhs), rhs)
    }

    /// [`Conv::input_gradient`] for an input of spatial sizes `in_sizes`
    /// (its batch may be unknown: `conv2d_transpose` in a trace for any
    /// batch has no input tensor, only its sizes).
    fn input_gradient_for(&self, g: &Tensor, in_sizes: &[i64], rhs: &Tensor) -> Result<Tensor> {
        let d = &self.dims;
        let (mut kernel, mut groups) = (rhs.clone(), self.feature_group_count);
        let group_count = self.feature_group_count.max(self.batch_group_count);
        if group_count > 1 {
            // Move the groups from the kernel's output features into its
            // input features, which become the transposed output features.
            kernel = split_axis(&kernel, d.rhs.batch, group_count)?;
            kernel = merge_axis(&kernel, d.rhs.batch, d.rhs.feature)?;
            groups = group_count;
        }
        let k_sizes = spatial_sizes(&kernel, &d.rhs);
        let out_sizes = spatial_sizes(g, &d.out);
        let padding = (0..in_sizes.len())
            .map(|i| {
                let lhs_d = dilated(in_sizes[i], self.lhs_dilation[i]);
                let rhs_d = dilated(k_sizes[i], self.rhs_dilation[i]);
                let out_d = dilated(out_sizes[i], self.strides[i]);
                let before = rhs_d - self.padding[i].0 - 1;
                (before, lhs_d + rhs_d - 1 - out_d - before)
            })
            .collect();
        let transposed = Conv {
            strides: self.lhs_dilation.clone(),
            padding,
            lhs_dilation: self.strides.clone(),
            rhs_dilation: self.rhs_dilation.clone(),
            dims: ConvDims {
                lhs: d.out.clone(),
                rhs: d.rhs.swapped(),
                out: d.lhs.clone(),
            },
            feature_group_count: groups,
            batch_group_count: 1,
            reverse_kernel: !self.reverse_kernel,
        };
        let out = apply1(transposed, &[g, &kernel])?;
        if self.batch_group_count > 1 {
            let out = split_axis(&out, d.lhs.feature, self.batch_group_count)?;
            return merge_axis(&out, d.lhs.feature, d.lhs.batch);
        }
        Ok(out)
    }

    /// d(loss)/d(kernel): the input convolved with the output gradient,
    /// batch and feature roles swapped, feature groups as batch groups.
    fn kernel_gradient(&self, g: &Tensor, lhs: &Tensor, rhs: &Tensor) -> Result<Tensor> {
        let d = &self.dims;
        let (features, batches) = match (self.feature_group_count, self.batch_group_count) {
            (1, b) if b > 1 => (b, 1),
            (f, _) => (1, f),
        };
        let in_sizes = spatial_sizes(lhs, &d.lhs);
        let k_sizes = spatial_sizes(rhs, &d.rhs);
        let out_sizes = spatial_sizes(g, &d.out);
        let padding = (0..in_sizes.len())
            .map(|i| {
                let lhs_d = dilated(in_sizes[i], self.lhs_dilation[i]);
                let rhs_d = dilated(k_sizes[i], self.rhs_dilation[i]);
                let out_d = dilated(out_sizes[i], self.strides[i]);
                let lo = self.padding[i].0;
                (lo, (out_d - lhs_d) + (rhs_d - lo - 1))
            })
            .collect();
        let transposed = Conv {
            strides: self.rhs_dilation.clone(),
            padding,
            lhs_dilation: self.lhs_dilation.clone(),
            rhs_dilation: self.strides.clone(),
            dims: ConvDims {
                lhs: d.lhs.swapped(),
                rhs: d.out.swapped(),
                out: d.rhs.swapped(),
            },
            feature_group_count: features,
            batch_group_count: batches,
            reverse_kernel: false,
        };
        let out = apply1(transposed, &[lhs, g])?;
        if self.reverse_kernel {
            return out.reverse_spatial(&d.rhs.spatial);
        }
        Ok(out)
    }
}

/// Errors unless `x` could be the output of the forward convolution of an
/// input of `output_shape` (`like`): TensorFlow's rule for
/// `conv2d_transpose` (SAME: `ceil(out / stride) == in`; VALID:
/// `ceil((out - dilated kernel + 1) / stride) == in`), checked by inferring
/// that convolution's shape. Any other `output_shape` would silently give
/// a result of a shape the input cannot come from.
fn check_transpose_output(
    x: &Tensor,
    forward: &Conv,
    like: TensorType,
    filters: &Tensor,
    padding: &Padding,
) -> Result<()> {
    let computed = forward.infer(&[like.clone(), filters.tensor_type()])?;
    let shape = x.shape();
    let (Some(want), Some(got)) = (computed[0].shape.dims(), shape.dims()) else {
        return Ok(());
    };
    let fits = want.len() == got.len()
        && want
            .iter()
            .zip(got)
            .all(|(w, g)| w.is_none() || g.is_none() || w == g);
    if fits {
        return Ok(());
    }
    let padding = match padding {
        Padding::Same => "SAME".to_string(),
        Padding::Valid => "VALID".to_string(),
        Padding::Explicit(p) => format!("explicit {p:?}"),
    };
    let like_dims = match like.shape.dims() {
        Some(dims) => {
            let each: Vec<String> = dims
                .iter()
                .map(|d| d.map_or("None".to_string(), |v| v.to_string()))
                .collect();
            format!("[{}]", each.join(", "))
        }
        None => "of unknown rank".to_string(),
    };
    Err(Error::invalid(
        "conv2d_transpose",
        format!(
            "output_shape {} does not fit the input {}: a conv2d of output_shape \
             with strides {:?}, {padding} padding and dilations {:?} gives {}, not the input's \
             shape (TensorFlow: size of out_backprop doesn't match computed)",
            like_dims,
            x.tensor_type(),
            forward.strides,
            forward.rhs_dilation,
            computed[0]
        ),
    ))
}

/// The options of [`Tensor::conv_general`], with JAX's defaults.
#[derive(Clone, Debug)]
pub struct ConvOptions {
    pub strides: Vec<i64>,
    pub padding: Padding,
    pub lhs_dilation: Vec<i64>,
    pub rhs_dilation: Vec<i64>,
    /// `(input, kernel, output)` layouts, e.g. `("NHWC", "HWIO", "NHWC")`.
    pub layouts: (String, String, String),
    pub feature_group_count: i64,
    pub batch_group_count: i64,
}

impl ConvOptions {
    /// Unit strides and dilations, `VALID` padding, channels-last layouts
    /// for `spatial` dimensions (`NWC`/`WIO`, `NHWC`/`HWIO`, `NDHWC`/`DHWIO`).
    pub fn channels_last(spatial: usize) -> Result<ConvOptions> {
        let letters = match spatial {
            1 => "W",
            2 => "HW",
            3 => "DHW",
            n => {
                return Err(Error::invalid(
                    "conv",
                    format!(
                        "1 to 3 spatial dimensions are supported by the layout helpers, got {n}"
                    ),
                ));
            }
        };
        Ok(ConvOptions {
            strides: vec![1; spatial],
            padding: Padding::Valid,
            lhs_dilation: vec![1; spatial],
            rhs_dilation: vec![1; spatial],
            layouts: (
                format!("N{letters}C"),
                format!("{letters}IO"),
                format!("N{letters}C"),
            ),
            feature_group_count: 1,
            batch_group_count: 1,
        })
    }
}

/// **Convolution, pooling and scans**: convolutions and their transposes.
impl Tensor {
    /// A general dilated convolution (`jax.lax.conv_general_dilated`) of
    /// this input with `kernel`.
    #[track_caller]
    pub fn conv_general(&self, kernel: &Tensor, o: &ConvOptions) -> Result<Tensor> {
        let dims = ConvDims::from_strings(&o.layouts.0, &o.layouts.1, &o.layouts.2)?;
        let n = dims.rhs.spatial.len();
        let padding = match &o.padding {
            Padding::Explicit(p) => p.clone(),
            Padding::Valid => vec![(0, 0); n],
            Padding::Same => self.same_padding(kernel, &dims, o)?,
        };
        let op = Conv {
            strides: o.strides.clone(),
            padding,
            lhs_dilation: o.lhs_dilation.clone(),
            rhs_dilation: o.rhs_dilation.clone(),
            dims,
            feature_group_count: o.feature_group_count,
            batch_group_count: o.batch_group_count,
            reverse_kernel: false,
        };
        apply1(op, &[self, kernel])
    }

    /// TensorFlow's SAME padding for this input and kernel: needs their
    /// spatial sizes (the batch may be unknown).
    fn same_padding(
        &self,
        kernel: &Tensor,
        dims: &ConvDims,
        o: &ConvOptions,
    ) -> Result<Vec<(i64, i64)>> {
        let n = dims.rhs.spatial.len();
        let spatial = |t: &Tensor, l: &Layout| -> Option<Vec<i64>> {
            let d = t.shape().dims()?.to_vec();
            if d.len() != n + 2 {
                return None;
            }
            l.spatial.iter().map(|&s| d[s as usize]).collect()
        };
        let (Some(x), Some(k)) = (spatial(self, &dims.lhs), spatial(kernel, &dims.rhs)) else {
            return Err(Error::invalid(
                "conv",
                format!(
                    "SAME padding needs the spatial sizes of input {} and kernel {}, with layouts {:?}",
                    self.tensor_type(),
                    kernel.tensor_type(),
                    o.layouts
                ),
            ));
        };
        if o.strides.len() != n || o.rhs_dilation.len() != n || o.lhs_dilation.len() != n {
            return Err(Error::invalid(
                "conv",
                format!("strides and dilations need {n} entries, one per spatial dimension"),
            ));
        }
        let inputs: Vec<i64> = x
            .iter()
            .zip(&o.lhs_dilation)
            .map(|(&s, &d)| dilated(s, d))
            .collect();
        Padding::Same.resolve(&inputs, &k, &o.strides, &o.rhs_dilation)
    }

    fn dims_known(&self, op: &str) -> Result<Vec<i64>> {
        self.shape().as_known().ok_or_else(|| {
            Error::invalid(
                op,
                format!("needs operands of known shape, got {}", self.tensor_type()),
            )
        })
    }

    /// `tf.nn.conv1d`: input `[batch, width, in]` (NWC), filters
    /// `[width, in, out]`.
    #[track_caller]
    pub fn conv1d(
        &self,
        filters: &Tensor,
        stride: i64,
        padding: Padding,
        dilation: i64,
    ) -> Result<Tensor> {
        self.conv_nd(filters, 1, &[stride], padding, &[dilation])
    }

    /// `tf.nn.conv2d` in NHWC: input `[batch, h, w, in]`, filters
    /// `[h, w, in, out]`; per-dimension strides and dilations.
    #[track_caller]
    pub fn conv2d(
        &self,
        filters: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        self.conv_nd(filters, 2, &strides, padding, &dilations)
    }

    /// `tf.nn.conv3d` in NDHWC with filters `[d, h, w, in, out]`.
    #[track_caller]
    pub fn conv3d(
        &self,
        filters: &Tensor,
        strides: [i64; 3],
        padding: Padding,
        dilations: [i64; 3],
    ) -> Result<Tensor> {
        self.conv_nd(filters, 3, &strides, padding, &dilations)
    }

    fn conv_nd(
        &self,
        filters: &Tensor,
        n: usize,
        strides: &[i64],
        padding: Padding,
        dil: &[i64],
    ) -> Result<Tensor> {
        let mut o = ConvOptions::channels_last(n)?;
        o.strides = strides.to_vec();
        o.rhs_dilation = dil.to_vec();
        o.padding = padding;
        self.conv_general(filters, &o)
    }

    /// `tf.nn.depthwise_conv2d` in NHWC: filters `[h, w, in, multiplier]`;
    /// each input channel is convolved with its own `multiplier` filters,
    /// giving `in * multiplier` output channels.
    #[track_caller]
    pub fn depthwise_conv2d(
        &self,
        filters: &Tensor,
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        let f = filters.dims_known("depthwise_conv2d")?;
        if f.len() != 4 {
            return Err(Error::invalid(
                "depthwise_conv2d",
                format!(
                    "filters must be [h, w, in, multiplier], got {}",
                    filters.tensor_type()
                ),
            ));
        }
        let kernel = filters.reshape(&[f[0], f[1], 1, f[2] * f[3]])?;
        let mut o = ConvOptions::channels_last(2)?;
        o.strides = strides.to_vec();
        o.rhs_dilation = dilations.to_vec();
        o.padding = padding;
        o.feature_group_count = f[2];
        self.conv_general(&kernel, &o)
    }

    /// `tf.nn.conv2d_transpose` in NHWC: the gradient of `conv2d` with
    /// respect to its input, for an input of `output_shape`
    /// (`[batch, h, w, in]`); filters are `[h, w, in, out]` as for the
    /// forward `conv2d` (TensorFlow's `[h, w, output_channels, in_channels]`).
    #[track_caller]
    pub fn conv2d_transpose(
        &self,
        filters: &Tensor,
        output_shape: [i64; 4],
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        let shape = output_shape.map(Some);
        self.conv2d_transpose_to(filters, shape, strides, padding, dilations)
    }

    /// [`Tensor::conv2d_transpose`] whose output batch may be unknown
    /// (`None`), as in a trace for any batch; the spatial sizes and
    /// features must be known.
    pub(crate) fn conv2d_transpose_to(
        &self,
        filters: &Tensor,
        output_shape: [Option<i64>; 4],
        strides: [i64; 2],
        padding: Padding,
        dilations: [i64; 2],
    ) -> Result<Tensor> {
        let mut o = ConvOptions::channels_last(2)?;
        o.strides = strides.to_vec();
        o.rhs_dilation = dilations.to_vec();
        let f = filters.dims_known("conv2d_transpose")?;
        if f.len() != 4 {
            return Err(Error::invalid(
                "conv2d_transpose",
                format!(
                    "filters must be [h, w, out, in], got {}",
                    filters.tensor_type()
                ),
            ));
        }
        let (Some(h), Some(w)) = (output_shape[1], output_shape[2]) else {
            return Err(Error::invalid(
                "conv2d_transpose",
                format!("needs the output's spatial sizes, got {output_shape:?}"),
            ));
        };
        let inputs = [h, w];
        o.padding =
            Padding::Explicit(padding.resolve(&inputs, &f[..2], &o.strides, &o.rhs_dilation)?);
        let forward = Conv {
            strides: o.strides.clone(),
            padding: match &o.padding {
                Padding::Explicit(p) => p.clone(),
                _ => unreachable!("resolved above"),
            },
            lhs_dilation: vec![1, 1],
            rhs_dilation: o.rhs_dilation.clone(),
            dims: ConvDims::from_strings(&o.layouts.0, &o.layouts.1, &o.layouts.2)?,
            feature_group_count: 1,
            batch_group_count: 1,
            reverse_kernel: false,
        };
        let like = TensorType::new(self.dtype(), Shape::from_dims(output_shape.to_vec()));
        check_transpose_output(self, &forward, like, filters, &padding)?;
        forward.input_gradient_for(self, &inputs, filters)
    }

    /// Reverses the given axes (the kernel gradient of a reversed kernel).
    fn reverse_spatial(&self, axes: &[i64]) -> Result<Tensor> {
        let mut x = self.clone();
        for &a in axes {
            let n = x.dims()[a as usize];
            let idx: Vec<i64> = (0..n).rev().collect();
            x = x.gather(&Tensor::vector(&idx)?, a)?;
        }
        Ok(x)
    }
}
