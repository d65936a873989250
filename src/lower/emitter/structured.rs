//! The emitter's structured ops: those with dimension numbers, windows or
//! comparator regions (gather, scatter, convolution, `reduce_window`,
//! `select_and_scatter`, sort, cholesky, `triangular_solve`, fft). Split from
//! `emitter` by size; it uses the parent module's private printer (`op`,
//! `op1`, `region`) and attribute helpers.

use super::{Cmp, Combiner, Emitter, Val, i64_array, list, padding_attr};
use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::Scalar;

/// Dimension numbers of a gather (StableHLO's names). Batching
/// dimensions pair an operand dimension with an index dimension, one
/// slice per position (XLA's partitioner keeps them local).
#[derive(Clone, Debug, Default)]
pub struct GatherDims {
    pub offset_dims: Vec<i64>,
    pub collapsed_slice_dims: Vec<i64>,
    pub operand_batching_dims: Vec<i64>,
    pub start_indices_batching_dims: Vec<i64>,
    pub start_index_map: Vec<i64>,
    pub index_vector_dim: i64,
    pub slice_sizes: Vec<i64>,
}

/// Dimension numbers of a scatter (StableHLO's names; batching
/// dimensions as for [`GatherDims`]).
#[derive(Clone, Debug, Default)]
pub struct ScatterDims {
    pub update_window_dims: Vec<i64>,
    pub inserted_window_dims: Vec<i64>,
    pub input_batching_dims: Vec<i64>,
    pub scatter_indices_batching_dims: Vec<i64>,
    pub scatter_dims_to_operand_dims: Vec<i64>,
    pub index_vector_dim: i64,
}

/// A convolution's attributes (StableHLO's names): each layout is
/// `[batch, feature, spatial...]` dimension indices (for the kernel,
/// `[output feature, input feature, spatial...]`).
#[derive(Clone, Debug)]
pub struct ConvAttrs {
    pub input: Vec<i64>,
    pub kernel: Vec<i64>,
    pub output: Vec<i64>,
    pub window_strides: Vec<i64>,
    pub padding: Vec<(i64, i64)>,
    pub lhs_dilation: Vec<i64>,
    pub rhs_dilation: Vec<i64>,
    pub feature_group_count: i64,
    pub batch_group_count: i64,
}

impl Emitter {
    pub fn gather(&mut self, operand: &Val, indices: &Val, g: &GatherDims, out: ArraySpec) -> Val {
        let batching = match g.operand_batching_dims.is_empty() {
            true => String::new(),
            false => format!(
                "operand_batching_dims = {}, start_indices_batching_dims = {}, ",
                list(&g.operand_batching_dims),
                list(&g.start_indices_batching_dims)
            ),
        };
        let dn = format!(
            "#stablehlo.gather<offset_dims = {}, collapsed_slice_dims = {}, {batching}start_index_map = {}, index_vector_dim = {}>",
            list(&g.offset_dims),
            list(&g.collapsed_slice_dims),
            list(&g.start_index_map),
            g.index_vector_dim
        );
        let attrs = [
            ("dimension_numbers", dn),
            ("slice_sizes", i64_array(&g.slice_sizes)),
            ("indices_are_sorted", "false".to_string()),
        ];
        self.op1("stablehlo.gather", &[operand, indices], &attrs, out)
    }

    /// `scatter` of `updates` into `operand` at `indices`, combining with
    /// the binary op `combiner` (`add`, `maximum`...) or replacing (`None`).
    pub fn scatter(
        &mut self,
        operand: &Val,
        indices: &Val,
        updates: &Val,
        d: &ScatterDims,
        combiner: Option<&str>,
        out: ArraySpec,
    ) -> Result<Val> {
        // XLA's CPU backend expands a scatter into a while loop, and its
        // XNNPACK graph fusion cannot compile fusions inside one ("Fusion
        // kind not implemented on CPU", measured on the gradient of a
        // [32, 10] sparse cross-entropy): count it as a loop.
        self.size.has_loops = true;
        let scalar = ArraySpec::scalar(operand.ty.dtype);
        let region = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![match combiner {
                Some(op) => cx.binary(op, &args[0], &args[1]),
                None => args[1].clone(),
            }])
        })?;
        let batching = match d.input_batching_dims.is_empty() {
            true => String::new(),
            false => format!(
                "input_batching_dims = {}, scatter_indices_batching_dims = {}, ",
                list(&d.input_batching_dims),
                list(&d.scatter_indices_batching_dims)
            ),
        };
        let dn = format!(
            "#stablehlo.scatter<update_window_dims = {}, inserted_window_dims = {}, {batching}scatter_dims_to_operand_dims = {}, index_vector_dim = {}>",
            list(&d.update_window_dims),
            list(&d.inserted_window_dims),
            list(&d.scatter_dims_to_operand_dims),
            d.index_vector_dim
        );
        let attrs = [
            ("indices_are_sorted", "false".to_string()),
            ("scatter_dimension_numbers", dn),
            ("unique_indices", "false".to_string()),
        ];
        Ok(self
            .op(
                "stablehlo.scatter",
                &[operand, indices, updates],
                &[region],
                &attrs,
                &[out],
            )
            .remove(0))
    }

    /// The lower Cholesky factor of `a` (batched).
    pub fn cholesky(&mut self, a: &Val, out: ArraySpec) -> Val {
        self.op1(
            "stablehlo.cholesky",
            &[a],
            &[("lower", "true".to_string())],
            out,
        )
    }

    /// `fft` of kind `fft_type` (`FFT`, `IFFT`, `RFFT`, `IRFFT`) over the
    /// innermost `lengths.len()` dimensions.
    pub fn fft(&mut self, x: &Val, fft_type: &str, lengths: &[i64], out: ArraySpec) -> Val {
        let attrs = [
            ("fft_type", format!("#stablehlo<fft_type {fft_type}>")),
            ("fft_length", i64_array(lengths)),
        ];
        self.op1("stablehlo.fft", &[x], &attrs, out)
    }

    /// `triangular_solve` with flags `[left_side, lower, transpose_a,
    /// unit_diagonal]`.
    pub fn triangular_solve(&mut self, a: &Val, b: &Val, flags: [bool; 4], out: ArraySpec) -> Val {
        let [left_side, lower, transpose_a, unit_diagonal] = flags;
        let transpose = if transpose_a {
            "TRANSPOSE"
        } else {
            "NO_TRANSPOSE"
        };
        let attrs = [
            ("left_side", left_side.to_string()),
            ("lower", lower.to_string()),
            ("transpose_a", format!("#stablehlo<transpose {transpose}>")),
            ("unit_diagonal", unit_diagonal.to_string()),
        ];
        self.op1("stablehlo.triangular_solve", &[a, b], &attrs, out)
    }

    /// `convolution` of `lhs` (input) with `rhs` (kernel).
    pub fn convolution(&mut self, lhs: &Val, rhs: &Val, c: &ConvAttrs, out: ArraySpec) -> Val {
        self.size.has_contractions = true;
        let dn = format!(
            "#stablehlo.conv<raw input_batch_dimension = {}, input_feature_dimension = {}, \
             input_spatial_dimensions = {}, kernel_input_feature_dimension = {}, \
             kernel_output_feature_dimension = {}, kernel_spatial_dimensions = {}, \
             output_batch_dimension = {}, output_feature_dimension = {}, \
             output_spatial_dimensions = {}>",
            c.input[0],
            c.input[1],
            list(&c.input[2..]),
            c.kernel[1],
            c.kernel[0],
            list(&c.kernel[2..]),
            c.output[0],
            c.output[1],
            list(&c.output[2..])
        );
        let padding = padding_attr(&c.padding);
        let mut attrs = vec![
            (
                "batch_group_count",
                format!("{} : i64", c.batch_group_count),
            ),
            ("dimension_numbers", dn),
            (
                "feature_group_count",
                format!("{} : i64", c.feature_group_count),
            ),
            ("lhs_dilation", i64_array(&c.lhs_dilation)),
            ("padding", padding),
            ("rhs_dilation", i64_array(&c.rhs_dilation)),
            ("window_strides", i64_array(&c.window_strides)),
        ];
        attrs.extend(self.matmul_precision.attribute());
        self.op1("stablehlo.convolution", &[lhs, rhs], &attrs, out)
    }

    /// `reduce_window` of `x` with a scalar combiner starting from `init`;
    /// `sizes` are the window dimensions, strides, base dilations and
    /// window dilations, in that order.
    #[allow(clippy::too_many_arguments)]
    pub fn reduce_window(
        &mut self,
        x: &Val,
        init: Scalar,
        combiner: Combiner,
        sizes: &[&Vec<i64>; 4],
        padding: &[(i64, i64)],
        out: ArraySpec,
    ) -> Result<Val> {
        let scalar = ArraySpec::scalar(x.ty.dtype);
        let init = self.constant(init, scalar.clone());
        let region = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![cx.binary(combiner.op_name(), &args[0], &args[1])])
        })?;
        let attrs = [
            ("base_dilations", i64_array(sizes[2])),
            ("padding", padding_attr(padding)),
            ("window_dilations", i64_array(sizes[3])),
            ("window_dimensions", i64_array(sizes[0])),
            ("window_strides", i64_array(sizes[1])),
        ];
        Ok(self
            .op(
                "stablehlo.reduce_window",
                &[x, &init],
                &[region],
                &attrs,
                &[out],
            )
            .remove(0))
    }

    /// `select_and_scatter` adding each `source` element to the operand
    /// element its window selects by `cmp` (Ge: the first maximum).
    #[allow(clippy::too_many_arguments)]
    pub fn select_and_scatter_add(
        &mut self,
        operand: &Val,
        source: &Val,
        cmp: Cmp,
        window: &[i64],
        strides: &[i64],
        padding: &[(i64, i64)],
        out: ArraySpec,
    ) -> Result<Val> {
        let scalar = ArraySpec::scalar(operand.ty.dtype);
        let init = self.constant(Scalar::I64(0), scalar.clone());
        let select = self.region(&[scalar.clone(), scalar.clone()], |cx, args| {
            Ok(vec![cx.compare(cmp, &args[0], &args[1])])
        })?;
        let scatter = self.region(&[scalar.clone(), scalar], |cx, args| {
            Ok(vec![cx.binary("add", &args[0], &args[1])])
        })?;
        let attrs = [
            ("padding", padding_attr(padding)),
            ("window_dimensions", i64_array(window)),
            ("window_strides", i64_array(strides)),
        ];
        Ok(self
            .op(
                "stablehlo.select_and_scatter",
                &[operand, source, &init],
                &[select, scatter],
                &attrs,
                &[out],
            )
            .remove(0))
    }

    /// `select_and_scatter_add` for windows that tile the operand (strides
    /// equal to the window, no padding, every dimension a multiple of its
    /// window: 2x2 pooling with stride 2), written with elementwise ops
    /// over the operand reshaped to `[d0/w0, w0, d1/w1, w1, ...]`: each
    /// window's first element (row-major) equal to its extreme (`Max` or
    /// `Min`, reduced from `init`) takes the window's source value. The same result as
    /// `select_and_scatter` with `GE`/`LE`, which the pinned XLA CPU runs
    /// as a reduce-window and a scatter several times slower (a 2x2 max
    /// pool's gradient on `[32,28,28,32]`: 7.2 ms). A window holding
    /// NaN routes its gradient nowhere.
    pub fn tiled_select_and_scatter_add(
        &mut self,
        operand: &Val,
        source: &Val,
        (extreme, init): (Combiner, Scalar),
        window: &[i64],
    ) -> Result<Val> {
        let dtype = operand.ty.dtype;
        // Only dimensions with a window wider than one are split, which
        // keeps a pooling's rank at 6 (within XNNPACK's limit).
        let (mut split, mut outer, mut inner, mut widths) = (vec![], vec![], vec![], vec![]);
        for (&d, &w) in operand.ty.dims.iter().zip(window) {
            outer.push(split.len() as i64);
            if w == 1 {
                split.push(d);
            } else {
                split.extend([d / w, w]);
                inner.push(split.len() as i64 - 1);
                widths.push(w);
            }
        }
        let x = self.reshape(operand, &split);
        let best = self.reduce(&x, init, &inner, extreme)?;
        let best = self.broadcast_in_dim(&best, &outer, &split);
        let is_best = self.compare(Cmp::Eq, &x, &best);
        // Each element's row-major position in its window.
        let index_type = ArraySpec::new(crate::dtype::DType::I32, &split);
        let mut position: Option<Val> = None;
        let mut stride = 1;
        for (&dim, &w) in inner.iter().zip(&widths).rev() {
            let along = self.iota(index_type.clone(), dim);
            let scale = self.constant(Scalar::I64(stride), index_type.clone());
            let term = self.binary("multiply", &along, &scale);
            position = Some(match position {
                Some(p) => self.binary("add", &p, &term),
                None => term,
            });
            stride *= w;
        }
        let Some(position) = position else {
            // Every window is one element: each takes its own source value.
            return Ok(self.reshape(source, &operand.ty.dims));
        };
        let beyond = self.constant(Scalar::I64(stride), index_type);
        let candidate = self.select(&is_best, &position, &beyond);
        let first = self.reduce(&candidate, Scalar::I64(stride), &inner, Combiner::Min)?;
        let first = self.broadcast_in_dim(&first, &outer, &split);
        let chosen = self.compare(Cmp::Eq, &position, &first);
        let spread = self.broadcast_in_dim(source, &outer, &split);
        let zero = self.constant(Scalar::I64(0), ArraySpec::new(dtype, &split));
        let routed = self.select(&chosen, &spread, &zero);
        Ok(self.reshape(&routed, &operand.ty.dims))
    }

    /// `sort` of `operands` (all of one shape) along `dim`, ordered by
    /// `comparator`: a region over two scalars per operand (its left and
    /// right element, in operand order) returning whether left comes first.
    pub fn sort(
        &mut self,
        operands: &[&Val],
        dim: i64,
        is_stable: bool,
        comparator: String,
    ) -> Vec<Val> {
        let types: Vec<ArraySpec> = operands.iter().map(|v| v.ty.clone()).collect();
        let attrs = [
            ("dimension", format!("{dim} : i64")),
            ("is_stable", is_stable.to_string()),
        ];
        self.op("stablehlo.sort", operands, &[comparator], &attrs, &types)
    }
}
