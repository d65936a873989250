//! Layer: [`Dropout`] (Keras' `Dropout`, PyTorch's `nn.Dropout`), over
//! `random::dropout`; the key comes from the call's [`Mode`].

use super::{Layer, Mode};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::random;
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Zeroes each element with probability `rate` in training and scales the
/// rest by `1 / (1 - rate)`, so the expected value is unchanged (inverted
/// dropout, as Keras and PyTorch do); the identity in inference.
///
/// The draws come from the key of the training [`Mode`]
/// ([`Mode::training_with_key`]); a container gives each child its own
/// key, so two dropout layers of one model drop different elements. A
/// training call without a key is an error (with a nonzero rate) rather
/// than a fixed mask.
///
/// ```
/// use xlafn::nn::layers::{Dropout, Layer, Mode};
/// use xlafn::prelude::*;
/// let drop = Dropout::new(0.5)?;
/// let x = Tensor::ones(&[1000], DType::F32);
/// assert_eq!(drop.forward(&x)?.to_vec::<f32>()?, vec![1.0; 1000]);
/// let y = drop.call(&x, &Mode::training_with_key(&xlafn::random::key(1)?))?;
/// let kept = y.to_vec::<f32>()?.iter().filter(|&&v| v == 2.0).count();
/// assert!((400..600).contains(&kept));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct Dropout {
    rate: f64,
}

impl Dropout {
    /// A dropout of `rate`, in `[0, 1)`.
    pub fn new(rate: f64) -> Result<Dropout> {
        if !(0.0..1.0).contains(&rate) {
            return Err(Error::invalid(
                "Dropout",
                format!("rate must be in [0, 1), got {rate}"),
            ));
        }
        Ok(Dropout { rate })
    }

    /// The probability of dropping an element.
    pub fn rate(&self) -> f64 {
        self.rate
    }
}

/// No weights.
impl Module for Dropout {
    fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
}

impl Layer for Dropout {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        if !mode.is_training() || self.rate == 0.0 {
            return Ok(x.clone());
        }
        let key = mode.key().ok_or_else(|| {
            Error::invalid(
                "Dropout",
                format!(
                    "a training call with rate {} needs a random key: call with \
                     Mode::training_with_key(&key) (e.g. random::key(seed), a new key per step \
                     via random::fold_in)",
                    self.rate
                ),
            )
        })?;
        random::dropout(x, self.rate, key)
    }
}
