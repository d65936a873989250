//! Layer: composites. `Tensor::cumlogsumexp`, a running `logaddexp` by
//! `control::associative_scan`, so that each output is shifted by its own
//! running maximum and stays exact where the inputs span more than a
//! float's exponent range (`[-1000, 0]` gives `[-1000, 0]`; one global
//! shift gave `[-inf, 0]`), and so that an input of -inf has a finite
//! gradient. It lives above `control`. Imports `tensor`, `ops`
//! (`where_`, the dtype and axis checks), `control`, `composite::cumprod`
//! (the shift), `ir` and `error`.

use super::cumprod::shifted;
use crate::error::Result;
use crate::ir::Scalar;
use crate::ops::elementwise::where_;
use crate::tensor::Tensor;

/// **Convolution, pooling and scans**: the cumulative log-sum-exp.
impl Tensor {
    /// `tf.math.cumulative_logsumexp`: `log(cumsum(exp(x)))` along `axis`,
    /// each output shifted by its own running maximum, so it neither
    /// overflows nor underflows where `log(cumsum(exp(x)))` would (JAX's
    /// `lax.cumlogsumexp`). An exclusive output starts with -inf, the
    /// log of an empty sum.
    ///
    /// ```
    /// # use xlafn::prelude::*;
    /// let x = Tensor::vector(&[-1000f32, 0., -1000.])?;
    /// assert_eq!(x.cumlogsumexp(0, false, false)?.to_vec::<f32>()?, vec![-1000., 0., 0.]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn cumlogsumexp(&self, axis: i64, exclusive: bool, reverse: bool) -> Result<Tensor> {
        crate::ops::check_dtype(
            "cumlogsumexp",
            self.dtype(),
            self.dtype().is_float(),
            "floating-point",
        )?;
        let a = crate::ops::normalize_axis("cumlogsumexp", axis, self.rank())? as i64;
        let combine = |lo: &[Tensor], hi: &[Tensor]| Ok(vec![log_add_exp(&lo[0], &hi[0])?]);
        let y = crate::control::associative_scan(combine, std::slice::from_ref(self), reverse, a)?
            .remove(0);
        if !exclusive {
            return Ok(y);
        }
        shifted(&y, a, !reverse, Scalar::F64(f64::NEG_INFINITY))
    }
}

/// `log(exp(a) + exp(b))`, shifted by `m = max(a, b)` held constant for
/// the gradient (the value does not depend on it, so the gradient is
/// exact: `exp(a - out)` for `a`). Where `m` is infinite the shift is 0,
/// so `exp` never sees `inf - inf`: two -inf give -inf, a +inf gives +inf.
fn log_add_exp(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let m = a.maximum(b)?;
    let shift = where_(&m.is_finite()?, &m, &m.zeros_like()?)?.stop_gradient()?;
    let sum = a.sub(&shift)?.exp()?.add(&b.sub(&shift)?.exp()?)?;
    sum.log()?.add(&shift)
}
