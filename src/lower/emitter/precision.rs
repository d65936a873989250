//! Layer: lowering. The precision every `dot_general` and `convolution`
//! asks of the compiler, as `jax.default_matmul_precision` sets it, and
//! the one product that ignores it (`blocked_column_sums`, a sum written
//! as a product, which must stay exact). Imports `error`, `ir` and `dtype`.
//!
//! Why it exists: on the CPU plugin f32 products are always computed in
//! f32, but XLA's CUDA backend computes an f32 product at the `DEFAULT`
//! precision with TF32 tensor cores (10 mantissa bits), so results differ
//! from the CPU's by about 1e-3 relative. A user comparing devices, or a
//! test suite checking a GPU against f32 references, asks for `highest`;
//! a user after speed leaves the default.

use crate::error::{Error, Result};
use std::sync::OnceLock;

/// The environment variable read once per process (JAX's
/// `JAX_DEFAULT_MATMUL_PRECISION`).
pub const MATMUL_PRECISION_VAR: &str = crate::environment::DEFAULT_MATMUL_PRECISION.name;

/// StableHLO's `Precision` for both operands of a product.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatmulPrecision {
    /// The compiler's choice: on CUDA, TF32 for f32 operands.
    #[default]
    Default,
    /// At least TF32 (or three bf16 passes), as XLA reads `HIGH`.
    High,
    /// Full f32 (or f64) products.
    Highest,
}

impl MatmulPrecision {
    /// Parses JAX's names: `default`/`bfloat16`, `high`/`tensorfloat32`,
    /// `highest`/`float32` (case-insensitive, surrounding blanks ignored).
    pub fn parse(text: &str) -> Result<MatmulPrecision> {
        match text.trim().to_ascii_lowercase().as_str() {
            "" | "default" | "bfloat16" => Ok(MatmulPrecision::Default),
            "high" | "tensorfloat32" => Ok(MatmulPrecision::High),
            "highest" | "float32" => Ok(MatmulPrecision::Highest),
            _ => Err(Error::Value(format!(
                "{MATMUL_PRECISION_VAR}={:?} is not a precision: use default, high or highest \
                 (or JAX's bfloat16, tensorfloat32, float32)",
                text.chars().take(64).collect::<String>()
            ))),
        }
    }

    /// The precision named by [`MATMUL_PRECISION_VAR`], read on first use
    /// and kept for the process (programs already compiled keep theirs).
    pub fn from_env() -> Result<MatmulPrecision> {
        static FROM_ENV: OnceLock<Result<MatmulPrecision>> = OnceLock::new();
        FROM_ENV
            .get_or_init(
                || match crate::environment::DEFAULT_MATMUL_PRECISION.get_os() {
                    None => Ok(MatmulPrecision::Default),
                    Some(v) => MatmulPrecision::parse(&v.to_string_lossy()),
                },
            )
            .clone()
    }

    /// The `precision_config` attribute of a product, or none for the
    /// compiler's default (the program text then stays as before).
    pub(super) fn attribute(self) -> Option<(&'static str, String)> {
        let name = match self {
            MatmulPrecision::Default => return None,
            MatmulPrecision::High => "HIGH",
            MatmulPrecision::Highest => "HIGHEST",
        };
        Some((
            "precision_config",
            format!("[#stablehlo<precision {name}>, #stablehlo<precision {name}>]"),
        ))
    }
}

impl super::Emitter {
    /// The column sums of each block of `x` (`[blocks, rows, cols]` to
    /// `[blocks, cols]`) as a batched product with ones, at full precision
    /// whatever the program's matmul precision: a sum must not lose bits
    /// to TF32.
    pub fn blocked_column_sums(&mut self, x: &super::Val) -> super::Val {
        let (blocks, rows, cols) = (x.ty.dims[0], x.ty.dims[1], x.ty.dims[2]);
        let ones = self.constant(
            crate::ir::Scalar::F64(1.0),
            crate::dtype::ArraySpec::new(x.ty.dtype, &[blocks, rows]),
        );
        let saved = std::mem::replace(&mut self.matmul_precision, MatmulPrecision::Highest);
        let out = crate::dtype::ArraySpec::new(x.ty.dtype, &[blocks, cols]);
        let sums = self.dot_general(&ones, x, &[0], &[0], &[1], &[1], out);
        self.matmul_precision = saved;
        sums
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jax_names_parse_and_others_are_refused_by_name() {
        assert_eq!(
            MatmulPrecision::parse(" Highest ").unwrap(),
            MatmulPrecision::Highest
        );
        assert_eq!(
            MatmulPrecision::parse("float32").unwrap(),
            MatmulPrecision::Highest
        );
        assert_eq!(
            MatmulPrecision::parse("tensorfloat32").unwrap(),
            MatmulPrecision::High
        );
        assert_eq!(
            MatmulPrecision::parse("").unwrap(),
            MatmulPrecision::Default
        );
        let e = MatmulPrecision::parse("fp64").unwrap_err().to_string();
        assert!(
            e.contains("XLAFN_DEFAULT_MATMUL_PRECISION") && e.contains("highest"),
            "{e}"
        );
    }

    #[test]
    fn only_explicit_precisions_write_an_attribute() {
        assert_eq!(MatmulPrecision::Default.attribute(), None);
        let (name, value) = MatmulPrecision::Highest.attribute().unwrap();
        assert_eq!(name, "precision_config");
        assert_eq!(
            value,
            "[#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]"
        );
    }
}
