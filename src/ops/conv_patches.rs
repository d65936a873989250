//! How a convolution is lowered: kernel taps that read only padding cut
//! first, then either StableHLO's `convolution` or, for the shapes the
//! pinned XLA's CPU convolution is slow at (few input features; a window
//! longer than the output), a matrix product over patches ("im2col").
//!
//! Layer: ops (imports `ops::conv::Conv`, `lower::Emitter`).
//!
//! The pinned XLA's CPU convolution is slow when the input has few
//! features: W10's first layer (`[32,28,28,1]` by a 3x3 kernel to 32
//! features) took 6-10 ms. Gathered into patches it is one `[N*H*W, 9] x
//! [9, 32]` product. Each kernel offset contributes one strided slice of
//! the padded input; the slices are concatenated along the feature axis
//! (offset-major, the order of a `[spatial.., in, out]` kernel's rows) and
//! contracted with the kernel in one `dot_general`. Transposes bring the
//! operands to `[batch, spatial.., features]` / `[spatial.., in, out]` and
//! the result back to the requested layout; XLA folds most of them.

use super::conv::{Conv, Layout};
use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::Scalar;
use crate::lower::{ConvAttrs, Emitter, Val};

/// Most `window elements x input features` a patch may have: up to this
/// the patch matrix is small and the product beats XLA's convolution.
const MAX_PATCH: i64 = 64;

/// Most input features for which patches are used (a 3x3 window with up
/// to 4 features, as images' first layers).
const MAX_FEATURES: i64 = 4;

/// Most patch elements in all for a convolution whose window outgrows its
/// output (64 MiB of float32). The pinned XLA's CPU convolution runs those
/// shapes an order of magnitude below its usual rate: CREPE's fourth block
/// (32 outputs of 64 taps, 128 to 128 channels, batch 61) took 1008 ms
/// for 4.1 GFLOP where its third (64 outputs) took 67 ms for 8.2; as
/// patches, 100 ms.
const MAX_LONG_PATCHES: i64 = 1 << 24;

impl Conv {
    /// Lowers this convolution of `lhs` by `kernel` (already reversed if
    /// asked) to `out`: as a product over patches when
    /// [`Conv::uses_patches`] says so, else as StableHLO's `convolution`.
    pub(super) fn lower_plain(
        &self,
        cx: &mut Emitter,
        lhs: &Val,
        kernel: &Val,
        out: &ArraySpec,
    ) -> Result<Vec<Val>> {
        let nonempty = |dims: &[i64]| dims.iter().all(|&x| x > 0);
        if self.uses_patches(&lhs.ty.dims, &kernel.ty.dims, &out.dims)
            && nonempty(&out.dims)
            && nonempty(&lhs.ty.dims)
            && nonempty(&kernel.ty.dims)
        {
            return Ok(vec![self.lower_as_patches(cx, lhs, kernel, out)]);
        }
        let layout = |l: &Layout| [&[l.batch, l.feature][..], &l.spatial].concat();
        let attrs = ConvAttrs {
            input: layout(&self.dims.lhs),
            kernel: layout(&self.dims.rhs),
            output: layout(&self.dims.out),
            window_strides: self.strides.clone(),
            padding: self.padding.clone(),
            lhs_dilation: self.lhs_dilation.clone(),
            rhs_dilation: self.rhs_dilation.clone(),
            feature_group_count: self.feature_group_count,
            batch_group_count: self.batch_group_count,
        };
        Ok(vec![cx.convolution(lhs, kernel, &attrs, out.clone())])
    }

    /// Whether this convolution (input `lhs`, kernel `kernel`, output
    /// `out` dims) is lowered as a product over patches: no groups and no
    /// input dilation, and either few input features and a small window
    /// (an image's first layer), or, for a convolution whose input and
    /// output share a layout (not a kernel's gradient), every output
    /// extent shorter than the window's (a "same" convolution whose kernel
    /// outgrows its input) with at most [`MAX_LONG_PATCHES`] patch
    /// elements in all.
    pub(super) fn uses_patches(&self, lhs: &[i64], kernel: &[i64], out: &[i64]) -> bool {
        let d = &self.dims;
        let features = kernel[d.rhs.feature as usize];
        let window: Vec<i64> = d.rhs.spatial.iter().map(|&s| kernel[s as usize]).collect();
        let extent: Vec<i64> = d.out.spatial.iter().map(|&s| out[s as usize]).collect();
        let plain = self.feature_group_count == 1
            && self.batch_group_count == 1
            && self.lhs_dilation.iter().all(|&x| x == 1);
        let size: i64 = window.iter().product();
        let few_features = features <= MAX_FEATURES && size * features <= MAX_PATCH;
        let patches = (lhs[d.lhs.batch as usize] as i128)
            * extent.iter().map(|&e| e as i128).product::<i128>()
            * size as i128
            * features as i128;
        // Not a kernel's gradient (input and output laid out differently):
        // its "window" is the output gradient, long by nature, and XLA's
        // convolution does it well (as patches W14's step took 72 ms, not
        // 28).
        let long_window = d.lhs == d.out
            && window.iter().zip(&extent).all(|(&w, &e)| e < w)
            && patches <= MAX_LONG_PATCHES as i128;
        plain && (few_features || long_window)
    }

    /// This convolution without the kernel taps that read only padding,
    /// and `kernel` cut to match; the same convolution and kernel when
    /// every tap reads input.
    ///
    /// A "same" convolution whose kernel is longer than its input (the
    /// last blocks of a CREPE-like stack: 64 taps over 8 positions, padded
    /// by 31 and 32) spends most of its work multiplying the padding's
    /// zeros. Tap `j` of a spatial dimension reads input positions `t *
    /// stride + j * dilation - pad_before` for the outputs `t`; when even
    /// the last output's is below 0, or even the first's past the input,
    /// the tap only ever sees zeros and is cut, with the padding it alone
    /// needed. The output's size and values are the same (a convolution
    /// pads with zeros). Not with input dilation (a transposed
    /// convolution's zeros are inside the input) or batch groups, and
    /// never making a padding negative.
    pub(super) fn without_dead_taps(
        &self,
        cx: &mut Emitter,
        lhs: &[i64],
        kernel: Val,
    ) -> (Conv, Val) {
        let d = &self.dims;
        let n = d.rhs.spatial.len();
        let k = kernel.ty.dims.clone();
        let plain = self.batch_group_count == 1
            && self.lhs_dilation.iter().all(|&x| x == 1)
            && self.padding.len() == n
            && lhs.len() == n + 2
            && k.len() == n + 2;
        if !plain {
            return (self.clone(), kernel);
        }
        let mut conv = self.clone();
        let (mut start, mut limit) = (vec![0; n + 2], k.clone());
        for i in 0..n {
            let (len, taps) = (lhs[d.lhs.spatial[i] as usize], k[d.rhs.spatial[i] as usize]);
            let (s, dil) = (self.strides[i], self.rhs_dilation[i]);
            let (before, after) = self.padding[i];
            if s < 1 || dil < 1 || taps < 1 || len < 1 {
                return (self.clone(), kernel);
            }
            let outputs = (len + before + after - (taps - 1) * dil - 1).div_euclid(s) + 1;
            if outputs < 1 {
                return (self.clone(), kernel);
            }
            // Taps below `first` read left padding only; above `last`,
            // right padding only.
            let first = (((before - (outputs - 1) * s).max(0) + dil - 1) / dil).min(taps - 1);
            let last = (len - 1 + before).div_euclid(dil).clamp(0, taps - 1);
            let padding = (before - first * dil, after - (taps - 1 - last) * dil);
            if first > last || padding.0 < 0 || padding.1 < 0 {
                continue;
            }
            let axis = d.rhs.spatial[i] as usize;
            (start[axis], limit[axis]) = (first, last + 1);
            conv.padding[i] = padding;
        }
        if conv.padding == self.padding {
            return (conv, kernel);
        }
        let strides = vec![1; n + 2];
        let cut = cx.slice(&kernel, &start, &limit, &strides);
        (conv, cut)
    }

    /// The convolution of `lhs` with `kernel` (already reversed if asked)
    /// as a product over patches; `out` is the result's type.
    pub(super) fn lower_as_patches(
        &self,
        cx: &mut Emitter,
        lhs: &Val,
        kernel: &Val,
        out: &ArraySpec,
    ) -> Val {
        let d = &self.dims;
        let n = d.rhs.spatial.len();
        // [batch, spatial.., features]
        let mut lhs_order = vec![d.lhs.batch];
        lhs_order.extend(&d.lhs.spatial);
        lhs_order.push(d.lhs.feature);
        let x = cx.transpose(lhs, &lhs_order);
        // [spatial.., in, out]
        let mut rhs_order = d.rhs.spatial.clone();
        rhs_order.extend([d.rhs.feature, d.rhs.batch]);
        let k = cx.transpose(kernel, &rhs_order);
        let (window, c_in, c_out) = (&k.ty.dims[..n], k.ty.dims[n], k.ty.dims[n + 1]);
        let out_spatial: Vec<i64> = d
            .out
            .spatial
            .iter()
            .map(|&s| out.dims[s as usize])
            .collect();
        let x = self.pad_spatial(cx, &x);
        let batch = x.ty.dims[0];
        let mut patches = Vec::new();
        for offset in offsets(window) {
            let mut start = vec![0];
            let mut limit = vec![batch];
            let mut strides = vec![1];
            for i in 0..n {
                let first = offset[i] * self.rhs_dilation[i];
                start.push(first);
                limit.push(first + (out_spatial[i] - 1) * self.strides[i] + 1);
                strides.push(self.strides[i]);
            }
            start.push(0);
            limit.push(c_in);
            strides.push(1);
            patches.push(cx.slice(&x, &start, &limit, &strides));
        }
        let refs: Vec<&Val> = patches.iter().collect();
        let patches = cx.concatenate(&refs, n as i64 + 1);
        let rows = window.iter().product::<i64>() * c_in;
        let k = cx.reshape(&k, &[rows, c_out]);
        let mut product_dims = vec![batch];
        product_dims.extend(&out_spatial);
        product_dims.push(c_out);
        let product = cx.dot_general(
            &patches,
            &k,
            &[],
            &[],
            &[n as i64 + 1],
            &[0],
            ArraySpec::new(out.dtype, &product_dims),
        );
        // From [batch, spatial.., features] to the output's layout.
        let mut from = vec![d.out.batch];
        from.extend(&d.out.spatial);
        from.push(d.out.feature);
        let mut perm = vec![0i64; from.len()];
        for (i, &dim) in from.iter().enumerate() {
            perm[dim as usize] = i as i64;
        }
        cx.transpose(&product, &perm)
    }

    /// `x` (`[batch, spatial.., features]`) with the convolution's padding
    /// (negative padding crops, as in `convolution`).
    fn pad_spatial(&self, cx: &mut Emitter, x: &Val) -> Val {
        if self.padding.iter().all(|&p| p == (0, 0)) {
            return x.clone();
        }
        let mut low = vec![0];
        let mut high = vec![0];
        for &(lo, hi) in &self.padding {
            low.push(lo);
            high.push(hi);
        }
        low.push(0);
        high.push(0);
        let dims: Vec<i64> = (0..x.ty.rank())
            .map(|i| x.ty.dims[i] + low[i] + high[i])
            .collect();
        let zero = cx.constant(Scalar::I64(0), ArraySpec::scalar(x.ty.dtype));
        let interior = vec![0; x.ty.rank()];
        cx.pad(
            x,
            &zero,
            &low,
            &high,
            &interior,
            ArraySpec::new(x.ty.dtype, &dims),
        )
    }
}

/// Every offset in a window of `window` sizes, row-major.
fn offsets(window: &[i64]) -> Vec<Vec<i64>> {
    let mut all = vec![Vec::new()];
    for &w in window {
        all = all
            .into_iter()
            .flat_map(|prefix| {
                (0..w).map(move |i| {
                    let mut o = prefix.clone();
                    o.push(i);
                    o
                })
            })
            .collect();
    }
    all
}
