//! Layer: user-facing layers over `tensor` ops, `variable`, `module`,
//! `random` and `initializers`. Each layer is a struct that
//! is a [`Module`] (its variables are listed by path, so checkpoints,
//! optimizers and names see them) and a [`Layer`] (`call(x, mode)`), and
//! is written with the public ops only: it runs eagerly and inside
//! compiled functions alike, and its program is what a hand-written one
//! would be.
//!
//! Conventions, shared by every layer here:
//! - **Data layout** is channels-last (`[batch, ..., features]`), as
//!   Keras and `tf.nn` use.
//! - **Weights** are [`Param`]s: drawn from an [`Initializer`] with a key
//!   given at construction, either at once (the input size given) or on
//!   the first call (Keras' `build`, from the input's last dimension). A
//!   first call inside a compiled function creates them through the
//!   variable lifting that `Variable::try_new` already does.
//! - **Training** is a [`Mode`]: inference, or training with an optional
//!   random key for the layers that draw (dropout). Containers give each
//!   child its own key with [`Mode::child`].

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::Module;
use crate::random;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::sync::OnceLock;

/// How one call runs: inference or training, and in training the key
/// the randomized layers draw from (`training=True` and Flax's `rngs`).
#[derive(Clone, Debug, Default)]
pub struct Mode {
    training: bool,
    key: Option<Tensor>,
}

impl Mode {
    /// Inference: dropout off, batch norm on its moving statistics.
    pub fn inference() -> Mode {
        Mode::default()
    }

    /// Training without randomness: batch norm on batch statistics; a
    /// dropout layer with a nonzero rate refuses it (give a key).
    pub fn training() -> Mode {
        Mode {
            training: true,
            key: None,
        }
    }

    /// Training, with `key` for the layers that draw.
    pub fn training_with_key(key: &Tensor) -> Mode {
        Mode {
            training: true,
            key: Some(key.clone()),
        }
    }

    /// Whether this is a training call.
    pub fn is_training(&self) -> bool {
        self.training
    }

    /// The key for this call's draws, if one was given.
    pub fn key(&self) -> Option<&Tensor> {
        self.key.as_ref()
    }

    /// The mode for a container's `index`-th child: the same training
    /// flag, and the key folded with `index` so no two children draw the
    /// same bits.
    pub fn child(&self, index: u64) -> Result<Mode> {
        let key = match &self.key {
            Some(k) => Some(random::fold_in(k, &Tensor::try_scalar(index)?)?),
            None => None,
        };
        Ok(Mode {
            training: self.training,
            key,
        })
    }
}

/// A layer: a module with a call (Keras' `Layer.call(inputs, training)`,
/// PyTorch's `forward`).
pub trait Layer: Module {
    /// Applies the layer to `x` in `mode`.
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor>;

    /// Applies the layer in inference mode.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.call(x, &Mode::inference())
    }
}

/// One weight of a layer: a variable drawn from an initializer and a key,
/// made at construction or on the layer's first call, when its shape is
/// known (Keras' `build`).
#[derive(Debug)]
pub struct Param {
    variable: OnceLock<Variable>,
    init: Initializer,
    key: Tensor,
    trainable: bool,
}

impl Param {
    /// A weight made on first use, from `init` drawn with `key`.
    pub fn lazy(init: Initializer, key: &Tensor) -> Param {
        Param {
            variable: OnceLock::new(),
            init,
            key: key.clone(),
            trainable: true,
        }
    }

    /// A weight of `dims` and `dtype`, made now.
    pub fn new(init: Initializer, key: &Tensor, dims: &[i64], dtype: DType) -> Result<Param> {
        let p = Param::lazy(init, key);
        p.get(dims, dtype)?;
        Ok(p)
    }

    /// Marks the weight as not trained (moving statistics); before it is
    /// made.
    pub fn non_trainable(mut self) -> Param {
        self.trainable = false;
        self
    }

    /// The variable, made now if it was not, with `dims` and `dtype`;
    /// errors when it was made with another shape or dtype (a layer built
    /// for 4 features called on 5).
    pub fn get(&self, dims: &[i64], dtype: DType) -> Result<&Variable> {
        if self.variable.get().is_none() {
            let value = self.init.init(&self.key, dims, dtype)?;
            let v = Variable::try_new(value)?;
            let v = if self.trainable { v } else { v.non_trainable() };
            // A racing first call may have set it: the first one stays.
            let _ = self.variable.set(v);
        }
        let v = self.variable.get().expect("set above");
        if v.dims() != dims || v.dtype() != dtype {
            return Err(Error::invalid(
                "layer",
                format!(
                    "a weight built as {}{:?} is asked for as {}{:?}: the layer was built \
                     for inputs of another size or dtype",
                    v.dtype(),
                    v.dims(),
                    dtype,
                    dims
                ),
            ));
        }
        Ok(v)
    }

    /// The variable if it has been made.
    pub fn variable(&self) -> Option<&Variable> {
        self.variable.get()
    }

    /// Reads the variable, making it first if needed.
    pub fn read(&self, dims: &[i64], dtype: DType) -> Result<Tensor> {
        self.get(dims, dtype)?.try_read()
    }
}

/// Visits the variable once it is made; an unbuilt layer lists nothing.
impl Module for Param {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        if let Some(v) = self.variable.get() {
            f(prefix.to_string(), v);
        }
    }
}

mod activation;
mod conv;
mod conv_transpose;
mod dropout;
mod embedding;
mod linear;
mod norm;
mod pool;
mod sequential;
mod util;

pub use activation::{Activation, Lambda, LambdaFn};
pub use conv::{Conv, Conv1d, Conv2d, Conv3d};
pub use conv_transpose::{ConvTranspose2d, DepthwiseConv2d};
pub use dropout::Dropout;
pub use embedding::Embedding;
pub use linear::Linear;
pub use norm::{BatchNorm, GroupNorm, LayerNorm, RmsNorm};
pub use pool::{
    AvgPool, AvgPool1d, AvgPool2d, AvgPool3d, Flatten, GlobalAvgPool, GlobalMaxPool, MaxPool,
    MaxPool1d, MaxPool2d, MaxPool3d,
};
pub use sequential::{BoxedLayer, Sequential};

mod attention;
mod recurrent;

pub use attention::{AttentionOptions, CrossKvCache, KvCache, MultiHeadAttention, Projection};
pub use recurrent::{Bidirectional, Gru, Lstm, Recurrent, RnnOutput, Stacked};
