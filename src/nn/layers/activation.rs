//! Layer: activations as values and as layers, over `tensor` ops only.
//! Imports the [`Layer`] trait and [`Module`].
//!
//! [`Activation`] names an elementwise (or last-axis) function, as Keras'
//! `activation="relu"` strings do: the weighted layers take one to apply
//! after their affine part, and it is itself a [`Layer`] with no weights
//! (Keras' `Activation` layer), so a [`Sequential`](super::Sequential)
//! can hold it. [`Lambda`] makes any function of a tensor a layer
//! (Keras' `Lambda`).

use super::{Layer, Mode};
use crate::error::Result;
use crate::module::Module;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::sync::Arc;

/// An activation function, Keras' names; [`Activation::Linear`] (the
/// identity, Keras' `None`/`"linear"`) is the default of every layer that
/// takes one.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum Activation {
    /// The identity.
    #[default]
    Linear,
    /// `max(x, 0)`.
    Relu,
    /// `min(max(x, 0), 6)`.
    Relu6,
    /// `x` for `x > 0`, else `alpha * x` (Keras' `LeakyReLU` default
    /// `alpha` is 0.3; `tf.nn.leaky_relu`'s and PyTorch's are 0.2 and 0.01:
    /// it is always given here).
    LeakyRelu(f64),
    /// `x` for `x > 0`, else `e^x - 1`.
    Elu,
    /// The self-normalizing `scale * elu(x)` with `tf.nn.selu`'s constants.
    Selu,
    /// The Gaussian error linear unit; `approximate` picks the tanh form
    /// (Keras' default is exact, `approximate=False`; GPT-2 uses the tanh
    /// form).
    Gelu {
        /// The tanh approximation instead of `erf`.
        approximate: bool,
    },
    /// `x * sigmoid(x)` (swish).
    Silu,
    /// `tanh(x)`.
    Tanh,
    /// `1 / (1 + e^-x)`.
    Sigmoid,
    /// `log(1 + e^x)`.
    Softplus,
    /// `log(sigmoid(x))`.
    LogSigmoid,
    /// The softmax over the last axis.
    Softmax,
    /// The log-softmax over the last axis.
    LogSoftmax,
}

impl Activation {
    /// Applies the activation to `x`.
    ///
    /// ```
    /// use xlafn::nn::layers::Activation;
    /// use xlafn::prelude::*;
    /// let x = Tensor::vector(&[-1.0f32, 2.0])?;
    /// assert_eq!(Activation::Relu.apply(&x)?.to_vec::<f32>()?, vec![0.0, 2.0]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    #[track_caller]
    pub fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match *self {
            Activation::Linear => Ok(x.clone()),
            Activation::Relu => x.relu(),
            Activation::Relu6 => x.relu6(),
            Activation::LeakyRelu(alpha) => x.leaky_relu(alpha),
            Activation::Elu => x.elu(),
            Activation::Selu => x.selu(),
            Activation::Gelu { approximate } => x.gelu(approximate),
            Activation::Silu => x.silu(),
            Activation::Tanh => x.tanh(),
            Activation::Sigmoid => x.sigmoid(),
            Activation::Softplus => x.softplus(),
            Activation::LogSigmoid => x.log_sigmoid(),
            Activation::Softmax => x.softmax(-1),
            Activation::LogSoftmax => x.log_softmax(-1),
        }
    }
}

/// No weights.
impl Module for Activation {
    fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
}

/// Keras' `Activation` layer: the same in training and inference.
impl Layer for Activation {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        self.apply(x)
    }
}

/// The function a [`Lambda`] holds.
pub type LambdaFn = Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

/// A function of a tensor as a layer without weights (Keras' `Lambda`),
/// e.g. a reshape between two layers of a [`Sequential`](super::Sequential).
/// Variables the function reads are its own business: they are not listed
/// (write a struct that is a [`Module`] for that).
#[derive(Clone)]
pub struct Lambda(pub LambdaFn);

impl Lambda {
    /// Wraps `f`.
    pub fn new(f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static) -> Lambda {
        Lambda(Arc::new(f))
    }
}

impl std::fmt::Debug for Lambda {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Lambda(..)")
    }
}

/// No weights.
impl Module for Lambda {
    fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
}

impl Layer for Lambda {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        (self.0)(x)
    }
}
