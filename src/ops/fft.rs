//! Fast Fourier transforms: StableHLO's `fft` over the
//! innermost 1 to 3 dimensions, of four kinds, as `jax.lax.fft`:
//! - `Fft`/`Ifft`: complex to complex, the unnormalised forward DFT
//!   `y_k = sum_j x_j e^{-2 pi i jk/n}` and its inverse (with `1/n`);
//! - `Rfft`: real to complex, the forward DFT's first `n/2 + 1` entries
//!   along the last transformed axis (the rest follow by symmetry);
//! - `Irfft`: complex to real, the inverse of `Rfft` for output lengths
//!   `lengths` (input last axis `n/2 + 1`; the imaginary parts of the
//!   entries that must be real, 0 and `n/2` for even `n`, are ignored).
//!
//! NumPy's `norm` (`FftNorm`: `backward`, `ortho`, `forward`) rescales
//! the result of each method's `_norm` form.
//!
//! Every shape is checked before the program is built (XLA aborts the
//! process on an `fft_length` that does not match the operand): the
//! operand's innermost dimensions must be `lengths` (`Irfft`: the last one
//! `n/2 + 1`), each length at least 1. The methods on `Tensor` follow
//! NumPy (`fft`, `ifft`, `rfft`, `irfft` along the last axis; `fftn` and
//! friends over the innermost `rank` axes, TensorFlow's `fft2d`/`fft3d`):
//! real inputs of `fft`/`ifft` become complex first, and `irfft`'s output
//! length defaults to `2 * (m - 1)` for an input last axis of `m`.
//!
//! Gradients are JAX's transposes (see `ops::complex` for the convention):
//! `Fft` and `Ifft` are symmetric linear maps, so each is its own
//! transpose; `Rfft`'s is the real part of the `Fft` of the cotangent
//! zero-padded to `n`; `Irfft`'s is the conjugate of the `Rfft` of the
//! cotangent, divided by the number of elements transformed and doubled
//! at the entries that stand for two (all but 0 and, for even `n`, `n/2`).
//!
//! Layer: ops. Imports `ir`, `lower::Emitter`, `tensor`.

use super::batching;
use super::{OpDef, expect_arity};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Dim, Shape, TensorType};
use crate::lower::{Emitter, Val};
use crate::tensor::{Tensor, apply1};

/// Which direction carries the `1/n` of a transform pair (NumPy's and
/// JAX's `norm`; TensorFlow has `Backward` only): `Backward` (the
/// default) puts it on the inverse, `Forward` on the forward transform,
/// and `Ortho` puts `1/sqrt(n)` on each, so both are unitary. `n` is the
/// number of elements transformed (the product of the lengths).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum FftNorm {
    /// No scaling forward, `1/n` on the inverse.
    #[default]
    Backward,
    /// `1/sqrt(n)` each way.
    Ortho,
    /// `1/n` forward, none on the inverse.
    Forward,
}

impl FftNorm {
    /// `y` (a transform over `lengths`, scaled as `Backward` has it)
    /// rescaled for this norm.
    fn scale(self, y: Tensor, lengths: &[i64], inverse: bool) -> Result<Tensor> {
        let n = lengths.iter().product::<i64>() as f64;
        let factor = match (self, inverse) {
            (FftNorm::Backward, _) => return Ok(y),
            (FftNorm::Ortho, false) => 1.0 / n.sqrt(),
            (FftNorm::Ortho, true) => n.sqrt(),
            (FftNorm::Forward, false) => 1.0 / n,
            (FftNorm::Forward, true) => n,
        };
        let real = y.dtype().real_part();
        let factor = Tensor::fill(&[], factor, real)?;
        let factor = if y.dtype().is_complex() {
            factor.cast(y.dtype())?
        } else {
            factor
        };
        y.mul(&factor)
    }
}

/// The four transforms (StableHLO's `fft_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum FftType {
    Fft,
    Ifft,
    Rfft,
    Irfft,
}

impl FftType {
    fn keyword(self) -> &'static str {
        match self {
            FftType::Fft => "FFT",
            FftType::Ifft => "IFFT",
            FftType::Rfft => "RFFT",
            FftType::Irfft => "IRFFT",
        }
    }
}

/// A transform of kind `kind` over the innermost `lengths.len()` (1 to 3)
/// dimensions, whose (output, for `Irfft`) lengths are `lengths`.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fft {
    pub kind: FftType,
    pub lengths: Vec<i64>,
}

impl Fft {
    /// The operand's innermost dimensions the transform expects.
    fn input_tail(&self) -> Vec<i64> {
        let mut tail = self.lengths.clone();
        if self.kind == FftType::Irfft {
            let last = tail.len() - 1;
            tail[last] = tail[last] / 2 + 1;
        }
        tail
    }

    /// The result's innermost dimensions.
    fn output_tail(&self) -> Vec<i64> {
        let mut tail = self.lengths.clone();
        if self.kind == FftType::Rfft {
            let last = tail.len() - 1;
            tail[last] = tail[last] / 2 + 1;
        }
        tail
    }

    fn check_lengths(&self) -> Result<()> {
        if !(1..=3).contains(&self.lengths.len()) {
            return Err(Error::invalid(
                self.name(),
                format!(
                    "transforms 1 to 3 innermost dimensions, got lengths {:?}",
                    self.lengths
                ),
            ));
        }
        if let Some(n) = self.lengths.iter().find(|&&n| n < 1) {
            return Err(Error::invalid(
                self.name(),
                format!(
                    "lengths must be >= 1, got {n} in {:?}; a transform of no points is undefined",
                    self.lengths
                ),
            ));
        }
        Ok(())
    }

    fn result_dtype(&self, d: DType) -> Result<DType> {
        let (ok, out, wanted) = match self.kind {
            FftType::Fft | FftType::Ifft => (d.is_complex(), Some(d), "a complex (c64 or c128)"),
            FftType::Rfft => (
                matches!(d, DType::F32 | DType::F64),
                d.to_complex(),
                "a real f32 or f64",
            ),
            FftType::Irfft => (
                d.is_complex(),
                Some(d.real_part()),
                "a complex (c64 or c128)",
            ),
        };
        match out {
            Some(out) if ok => Ok(out),
            _ => Err(Error::invalid(
                self.name(),
                format!("expects {wanted} operand, got {d}"),
            )),
        }
    }

    /// Errors unless `dims` (the operand's, possibly unknown) end in the
    /// dimensions the transform expects.
    fn check_operand_dims(&self, dims: &[Dim], operand: &TensorType) -> Result<()> {
        let k = self.lengths.len();
        if dims.len() < k {
            return Err(Error::invalid(
                self.name(),
                format!(
                    "transforms the innermost {k} dimension(s), so the operand needs rank >= {k}, \
                     got {operand}"
                ),
            ));
        }
        let tail = self.input_tail();
        let fits = dims[dims.len() - k..]
            .iter()
            .zip(&tail)
            .all(|(d, t)| d.is_none_or(|d| d == *t));
        if !fits {
            let what = match self.kind {
                FftType::Irfft => format!(
                    "lengths {:?} (the last halved, plus one: {tail:?})",
                    self.lengths
                ),
                _ => format!("lengths {:?}", self.lengths),
            };
            return Err(Error::invalid(
                self.name(),
                format!("the operand's innermost dimensions must be the {what}, got {operand}"),
            ));
        }
        Ok(())
    }
}

impl OpDef for Fft {
    fn batch(&self, inputs: &[Tensor], _batched: &[bool], _size: i64) -> batching::Batched {
        // The transform runs over the innermost dimensions only.
        Some(batching::all_batched(self.clone(), inputs))
    }

    fn name(&self) -> &'static str {
        match self.kind {
            FftType::Fft => "fft",
            FftType::Ifft => "ifft",
            FftType::Rfft => "rfft",
            FftType::Irfft => "irfft",
        }
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        expect_arity(self.name(), inputs, 1)?;
        self.check_lengths()?;
        let x = &inputs[0];
        let dtype = self.result_dtype(x.dtype.check_compilable()?)?;
        let Some(dims) = x.shape.dims() else {
            return Ok(vec![TensorType::new(dtype, Shape::unknown_rank())]);
        };
        self.check_operand_dims(dims, x)?;
        let batch = dims.len() - self.lengths.len();
        let mut out: Vec<Dim> = dims[..batch].to_vec();
        out.extend(self.output_tail().into_iter().map(Some));
        Ok(vec![TensorType::new(dtype, Shape::from_dims(out))])
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        // Dimensions unknown while tracing are known now: check again, as
        // XLA would abort on a mismatch.
        let x = &inputs[0];
        let dims: Vec<Dim> = x.ty.dims.iter().map(|&d| Some(d)).collect();
        let operand = TensorType::known(x.ty.dtype, &x.ty.dims);
        self.check_operand_dims(&dims, &operand)?;
        let y = cx.fft(x, self.kind.keyword(), &self.lengths, outputs[0].clone());
        Ok(vec![y])
    }

    fn vjp(
        &self,
        _inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let Some(g) = &grads[0] else {
            return Ok(vec![None]);
        };
        let dx = match self.kind {
            FftType::Fft | FftType::Ifft => apply1(self.clone(), &[g])?,
            FftType::Rfft => self.rfft_transpose(g)?,
            FftType::Irfft => self.irfft_transpose(g)?,
        };
        Ok(vec![Some(dx)])
    }
}

impl Fft {
    fn with_kind(&self, kind: FftType) -> Fft {
        Fft {
            kind,
            lengths: self.lengths.clone(),
        }
    }

    /// `Re(FFT(g padded with zeros to n along the last axis))`.
    fn rfft_transpose(&self, g: &Tensor) -> Result<Tensor> {
        let rank = g.shape().rank().ok_or_else(|| {
            Error::invalid(
                "gradient",
                format!(
                    "the gradient of rfft needs a known rank, got {}",
                    g.tensor_type()
                ),
            )
        })?;
        let n = self.lengths[self.lengths.len() - 1];
        let mut high = vec![0; rank];
        high[rank - 1] = n - (n / 2 + 1);
        let full = g.pad_general(&vec![0; rank], &high, &vec![0; rank], 0.0)?;
        apply1(self.with_kind(FftType::Fft), &[&full])?.real()
    }

    /// `conj(RFFT(g) * mask / prod(lengths))`, `mask` 1 at entry 0 (and
    /// `n/2` for even `n`) and 2 elsewhere along the last axis.
    fn irfft_transpose(&self, g: &Tensor) -> Result<Tensor> {
        let n = self.lengths[self.lengths.len() - 1];
        let m = n / 2 + 1;
        let doubled = m - 1 - i64::from(n % 2 == 0);
        let real = g.dtype();
        let count: i64 = self.lengths.iter().product();
        let scale = 1.0 / count as f64;
        let mut pieces = vec![Tensor::fill(&[1], scale, real)?];
        if doubled > 0 {
            pieces.push(Tensor::fill(&[doubled], 2.0 * scale, real)?);
        }
        if m - 1 - doubled > 0 {
            pieces.push(Tensor::fill(&[1], scale, real)?);
        }
        let mask = Tensor::concat(&pieces, 0)?.cast(g.dtype().to_complex().unwrap_or(real))?;
        apply1(self.with_kind(FftType::Rfft), &[g])?
            .mul(&mask)?
            .conj()
    }
}

// -------------------------------------------------------- tensor methods

/// The transform `kind` over the innermost `lengths.len()` dimensions of
/// `x`, exactly as StableHLO's `fft` (`jax.lax.fft`): no casts, no
/// padding; see the module docs for what each kind expects.
#[track_caller]
pub fn fft_op(x: &Tensor, kind: FftType, lengths: &[i64]) -> Result<Tensor> {
    let op = Fft {
        kind,
        lengths: lengths.to_vec(),
    };
    apply1(op, &[x])
}

/// **Fourier transforms**: complex and real FFTs over the last axes.
impl Tensor {
    /// The innermost `rank` dimensions' sizes, or a clear error.
    fn fft_tail(&self, op: &str, rank: usize) -> Result<Vec<i64>> {
        if !(1..=3).contains(&rank) {
            return Err(Error::invalid(
                op,
                format!("transforms 1 to 3 innermost dimensions, got rank {rank}"),
            ));
        }
        let dims = self.shape().dims().map(<[Dim]>::to_vec);
        match dims {
            Some(d) if d.len() >= rank && d[d.len() - rank..].iter().all(Option::is_some) => {
                Ok(d[d.len() - rank..].iter().flatten().copied().collect())
            }
            Some(d) if d.len() < rank => Err(Error::invalid(
                op,
                format!(
                    "transforms the innermost {rank} dimension(s), so the operand needs rank >= \
                     {rank}, got {}",
                    self.tensor_type()
                ),
            )),
            _ => Err(Error::invalid(
                op,
                format!(
                    "needs the innermost {rank} dimension(s) known, got {}",
                    self.tensor_type()
                ),
            )),
        }
    }

    /// A real f32/f64 tensor as c64/c128 (`fft` of real input, as NumPy).
    fn as_complex(&self, op: &str) -> Result<Tensor> {
        match self.dtype() {
            d if d.is_complex() => Ok(self.clone()),
            DType::F32 | DType::F64 => self.cast(self.dtype().to_complex().unwrap_or(DType::C128)),
            d => Err(Error::invalid(
                op,
                format!("expects a complex or f32/f64 operand, got {d}"),
            )),
        }
    }

    /// `np.fft.fftn` over the innermost `rank` (1 to 3) axes (TensorFlow's
    /// `fft`, `fft2d`, `fft3d`); real f32/f64 input becomes complex.
    #[track_caller]
    pub fn fftn(&self, rank: usize) -> Result<Tensor> {
        self.fftn_norm(rank, FftNorm::Backward)
    }

    /// [`Tensor::fftn`] with NumPy's `norm`.
    #[track_caller]
    pub fn fftn_norm(&self, rank: usize, norm: FftNorm) -> Result<Tensor> {
        let lengths = self.fft_tail("fft", rank)?;
        let y = fft_op(&self.as_complex("fft")?, FftType::Fft, &lengths)?;
        norm.scale(y, &lengths, false)
    }

    /// `np.fft.ifftn` over the innermost `rank` (1 to 3) axes, with the
    /// `1/n` normalisation; real f32/f64 input becomes complex.
    #[track_caller]
    pub fn ifftn(&self, rank: usize) -> Result<Tensor> {
        self.ifftn_norm(rank, FftNorm::Backward)
    }

    /// [`Tensor::ifftn`] with NumPy's `norm`.
    #[track_caller]
    pub fn ifftn_norm(&self, rank: usize, norm: FftNorm) -> Result<Tensor> {
        let lengths = self.fft_tail("ifft", rank)?;
        let y = fft_op(&self.as_complex("ifft")?, FftType::Ifft, &lengths)?;
        norm.scale(y, &lengths, true)
    }

    /// `np.fft.rfftn` over the innermost `rank` (1 to 3) axes of a real
    /// f32/f64 tensor: the last axis of `n` becomes `n/2 + 1` entries.
    #[track_caller]
    pub fn rfftn(&self, rank: usize) -> Result<Tensor> {
        self.rfftn_norm(rank, FftNorm::Backward)
    }

    /// [`Tensor::rfftn`] with NumPy's `norm`.
    #[track_caller]
    pub fn rfftn_norm(&self, rank: usize, norm: FftNorm) -> Result<Tensor> {
        let lengths = self.fft_tail("rfft", rank)?;
        norm.scale(fft_op(self, FftType::Rfft, &lengths)?, &lengths, false)
    }

    /// `np.fft.irfftn` over the innermost `rank` (1 to 3) axes of a
    /// complex tensor: a real result whose last axis has `n` entries
    /// (default `2 * (m - 1)` for an input last axis of `m`; the input is
    /// cut or zero-padded to `n/2 + 1` entries first, as NumPy does).
    #[track_caller]
    pub fn irfftn(&self, rank: usize, n: Option<i64>) -> Result<Tensor> {
        self.irfftn_norm(rank, n, FftNorm::Backward)
    }

    /// [`Tensor::irfftn`] with NumPy's `norm`.
    #[track_caller]
    pub fn irfftn_norm(&self, rank: usize, n: Option<i64>, norm: FftNorm) -> Result<Tensor> {
        let mut lengths = self.fft_tail("irfft", rank)?;
        let last = lengths.len() - 1;
        let m = lengths[last];
        let n = n.unwrap_or(2 * (m - 1));
        if n < 1 {
            return Err(Error::invalid(
                "irfft",
                format!(
                    "the output length must be >= 1, got {n} (for an input last axis of {m} the \
                     default is 2 * (m - 1))"
                ),
            ));
        }
        lengths[last] = n;
        let want = n / 2 + 1;
        let rank_all = self.rank();
        let x = if want < m {
            let mut size = vec![-1; rank_all];
            size[rank_all - 1] = want;
            self.slice(&vec![0; rank_all], &size)?
        } else if want > m {
            let mut high = vec![0; rank_all];
            high[rank_all - 1] = want - m;
            self.pad_general(&vec![0; rank_all], &high, &vec![0; rank_all], 0.0)?
        } else {
            self.clone()
        };
        norm.scale(fft_op(&x, FftType::Irfft, &lengths)?, &lengths, true)
    }

    /// `np.fft.fft` along the last axis.
    #[track_caller]
    pub fn fft(&self) -> Result<Tensor> {
        self.fftn(1)
    }

    /// `np.fft.ifft` along the last axis.
    #[track_caller]
    pub fn ifft(&self) -> Result<Tensor> {
        self.ifftn(1)
    }

    /// `np.fft.rfft` along the last axis.
    #[track_caller]
    pub fn rfft(&self) -> Result<Tensor> {
        self.rfftn(1)
    }

    /// `np.fft.irfft` along the last axis, `n` output entries (default
    /// `2 * (m - 1)`).
    #[track_caller]
    pub fn irfft(&self, n: Option<i64>) -> Result<Tensor> {
        self.irfftn(1, n)
    }
}
