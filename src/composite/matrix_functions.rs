//! Functions of square matrices: `matrix_power` (`jnp.linalg.matrix_power`)
//! and the matrix exponential `expm` (`tf.linalg.expm`,
//! `jax.scipy.linalg.expm`).
//!
//! `expm` is Higham's (2005) scaling and squaring with the degree-13 Padé
//! approximant, the one JAX and SciPy use for f64: the matrix is halved
//! `s` times until its 1-norm is below `θ13 = 5.37`, the approximant `Q⁻¹
//! P` is formed from `A²`, `A⁴`, `A⁶` (six products and one solve), and
//! the result squared back `s` times in a device loop whose trip count is
//! computed on the device, so one program serves every input. Degree 13
//! is used for every dtype (for f32, JAX picks degree 7: more accuracy
//! here for a few more products). Gradients come through the ops (the
//! products, `solve`'s written gradient and the loop's).
//!
//! Layer: composites. Imports `tensor` ops, `ops::matrix`,
//! `control::for_range`.

use crate::control::for_range;
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::matrix::{identity_with_batch_of, square_float_dims};
use crate::tensor::Tensor;

/// Higham's bound on the 1-norm for the degree-13 approximant.
const THETA_13: f64 = 5.371920351148152;

/// The degree-13 Padé coefficients `b_0 .. b_13`.
const PADE_13: [f64; 14] = [
    64764752532480000.0,
    32382376266240000.0,
    7771770303897600.0,
    1187353796428800.0,
    129060195264000.0,
    10559470521600.0,
    670442572800.0,
    33522128640.0,
    1323241920.0,
    40840800.0,
    960960.0,
    16380.0,
    182.0,
    1.0,
];

/// **Linear algebra**: matrix powers and the exponential.
impl Tensor {
    /// `jnp.linalg.matrix_power`: each matrix to the integer power `k` by
    /// repeated squaring (`k = 0`: the identity; `k < 0`: of the inverse).
    #[track_caller]
    pub fn matrix_power(&self, k: i64) -> Result<Tensor> {
        let n = square_float_dims("matrix_power", self)?;
        let identity = identity_with_batch_of(self, n)?;
        let mut base = if k < 0 { self.inv()? } else { self.clone() };
        let mut result: Option<Tensor> = None;
        let mut e = k.unsigned_abs();
        while e > 0 {
            if e & 1 == 1 {
                result = Some(match result {
                    Some(r) => r.matmul(&base)?,
                    None => base.clone(),
                });
            }
            e >>= 1;
            if e > 0 {
                base = base.matmul(&base)?;
            }
        }
        Ok(result.unwrap_or(identity))
    }

    /// The matrix exponential of each square matrix (`tf.linalg.expm`,
    /// `jax.scipy.linalg.expm`), by scaling and squaring with the
    /// degree-13 Padé approximant; floats.
    #[track_caller]
    pub fn expm(&self) -> Result<Tensor> {
        let n = square_float_dims("expm", self)?;
        let dtype = self.dtype();
        let scalar = |v: f64| Tensor::fill(&[], v, dtype);
        // s = max(0, ceil(log2(‖a‖₁ / θ13))), per matrix.
        let one_norm = self
            .abs()?
            .reduce_sum(&[-2], false)?
            .reduce_max(&[-1], true)?;
        let ratio = one_norm.div(&scalar(THETA_13)?)?;
        let s = ratio.log()?.div(&scalar(std::f64::consts::LN_2)?)?.ceil()?;
        let zero = scalar(0.0)?;
        // NaN and infinite norms square nothing: the result says so anyway.
        let s = s.is_finite()?.where_(&s.maximum(&zero)?, &zero)?;
        let scale = scalar(2.0)?.pow(&s.neg()?)?.expand_dims(-1)?;
        let a = self.mul(&scale)?;
        let identity = identity_with_batch_of(&a, n)?;
        let b = |i: usize| scalar(PADE_13[i]);
        let a2 = a.matmul(&a)?;
        let a4 = a2.matmul(&a2)?;
        let a6 = a4.matmul(&a2)?;
        let terms = |c: [usize; 4]| -> Result<Tensor> {
            a6.mul(&b(c[0])?)?
                .add(&a4.mul(&b(c[1])?)?)?
                .add(&a2.mul(&b(c[2])?)?)?
                .add(&identity.mul(&b(c[3])?)?)
        };
        let high_u = a6
            .mul(&b(13)?)?
            .add(&a4.mul(&b(11)?)?)?
            .add(&a2.mul(&b(9)?)?)?;
        let u = a.matmul(&a6.matmul(&high_u)?.add(&terms([7, 5, 3, 1])?)?)?;
        let high_v = a6
            .mul(&b(12)?)?
            .add(&a4.mul(&b(10)?)?)?
            .add(&a2.mul(&b(8)?)?)?;
        let v = a6.matmul(&high_v)?.add(&terms([6, 4, 2, 0])?)?;
        let r = v.sub(&u)?.solve(&v.add(&u)?)?;
        // Squared back s times: each matrix as often as its own s says,
        // the loop running to the batch's largest.
        let steps = s.cast(DType::I64)?;
        let most = steps.reduce_max(&[], false)?;
        for_range(
            0i64,
            &most,
            1i64,
            r,
            |i: Tensor, r: Tensor| -> Result<Tensor> {
                let square = r.matmul(&r)?;
                let more = i.cast(DType::I64)?.lt(&steps)?.expand_dims(-1)?;
                more.where_(&square, &r)
            },
        )
    }
}
