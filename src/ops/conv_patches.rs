//! A convolution with few input features, lowered as a matrix product over
//! patches ("im2col") instead of StableHLO's `convolution`.
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

use super::conv::Conv;
use crate::dtype::ArraySpec;
use crate::ir::Scalar;
use crate::lower::{Emitter, Val};

/// Most `window elements x input features` a patch may have: up to this
/// the patch matrix is small and the product beats XLA's convolution.
const MAX_PATCH: i64 = 64;

/// Most input features for which patches are used (a 3x3 window with up
/// to 4 features, as images' first layers).
const MAX_FEATURES: i64 = 4;

impl Conv {
    /// Whether this convolution, with a kernel of `kernel` dims, is lowered
    /// as a product over patches: no groups, no input dilation, few input
    /// features and a small window.
    pub(super) fn uses_patches(&self, kernel: &[i64]) -> bool {
        let d = &self.dims;
        let features = kernel[d.rhs.feature as usize];
        let window: i64 = d.rhs.spatial.iter().map(|&s| kernel[s as usize]).product();
        self.feature_group_count == 1
            && self.batch_group_count == 1
            && self.lhs_dilation.iter().all(|&x| x == 1)
            && features <= MAX_FEATURES
            && window * features <= MAX_PATCH
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
