//! Layer: composites. `Tensor::cumprod` with a gradient that never
//! divides by the input: the forward product is `ops::window`'s product
//! window, and the gradient is a reverse linear recurrence solved by
//! `control::associative_scan`, so it lives above `control`. Imports
//! `tensor`, `ops::window` (`WindowKind`, the one-dimensional window),
//! `ops::custom_gradient`, `control` and `error`.

use crate::error::Result;
use crate::ir::Scalar;
use crate::ops::window::WindowKind;
use crate::tensor::Tensor;

/// **Convolution, pooling and scans**: the cumulative product.
impl Tensor {
    /// `tf.math.cumprod` along `axis`. Its gradient never divides by the
    /// input, so it is exact where elements are 0, as JAX's
    /// (TensorFlow's divides by the input, which is wrong there).
    #[track_caller]
    pub fn cumprod(&self, axis: i64, exclusive: bool, reverse: bool) -> Result<Tensor> {
        let shape = self.shape();
        let dims = shape.dims().unwrap_or(&[]);
        let rank = dims.len() as i64;
        let a = if axis < 0 { axis + rank } else { axis };
        let known = (0..rank).contains(&a) && dims[a as usize].is_some();
        if !self.dtype().is_float() || !known {
            // Integers (no gradient), or the window's own error.
            return self.cumulative(WindowKind::Prod, axis, exclusive, reverse);
        }
        // Every variant from the inclusive forward one: reversing and
        // shifting are ops the gradient passes through.
        let axis = a;
        let x = if reverse {
            self.reverse(&[axis])?
        } else {
            self.clone()
        };
        let y = cumprod_with_exact_gradient(&x, axis)?;
        let y = if exclusive {
            shifted(&y, axis, true, Scalar::I64(1))?
        } else {
            y
        };
        if reverse { y.reverse(&[axis]) } else { Ok(y) }
    }
}

/// The inclusive forward cumulative product along `axis`, with a gradient
/// that never divides: for `y = cumprod(x)` and output gradient `g`,
/// `dx[i] = E[i] R[i]` with `E` the exclusive product (of the elements
/// before `i`) and `R[i] = g[i] + x[i+1] R[i+1]`, the reverse linear
/// recurrence that [`crate::control::associative_scan`] computes in
/// `log2(n)` rounds. Written with ops, so it can be differentiated again.
fn cumprod_with_exact_gradient(x: &Tensor, axis: i64) -> Result<Tensor> {
    let f = crate::ops::custom_gradient::custom_gradient(move |xs: &[Tensor]| {
        let x = xs[0].clone();
        let y = x.cumulative(WindowKind::Prod, axis, false, false)?;
        let grad = move |g: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            let before = shifted(&x.cumprod(axis, false, false)?, axis, true, Scalar::I64(1))?;
            // a[i] = x[i+1] (the last one is never read), b[i] = g[i].
            let next = shifted(&x, axis, false, Scalar::I64(1))?;
            let compose = |lo: &[Tensor], hi: &[Tensor]| -> Result<Vec<Tensor>> {
                Ok(vec![lo[0].mul(&hi[0])?, hi[0].mul(&lo[1])?.add(&hi[1])?])
            };
            let r = crate::control::associative_scan(compose, &[next, g[0].clone()], true, axis)?;
            Ok(vec![Some(before.mul(&r[1])?)])
        };
        Ok((vec![y], grad))
    });
    Ok(f(std::slice::from_ref(x))?.remove(0))
}

/// `x` moved one place along `axis`, `fill` entering at the end it
/// leaves: towards its end (`toward_end`, an inclusive cumulative result
/// made exclusive) or towards its start.
pub(super) fn shifted(x: &Tensor, axis: i64, toward_end: bool, fill: Scalar) -> Result<Tensor> {
    // One padded 1 in, one element cut off (a negative padding): shapes
    // need not be known.
    let rank = x.rank();
    let (mut low, mut high) = (vec![0; rank], vec![0; rank]);
    let (into, out) = if toward_end {
        (&mut low, &mut high)
    } else {
        (&mut high, &mut low)
    };
    into[axis as usize] = 1;
    out[axis as usize] = -1;
    x.pad_general(&low, &high, &vec![0; rank], fill)
}
