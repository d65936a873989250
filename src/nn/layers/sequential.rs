//! Layer: [`Sequential`], a stack of layers applied in order (Keras'
//! `Sequential`, PyTorch's `nn.Sequential`), over the [`Layer`] trait.

use super::{Activation, Lambda, Layer, Mode};
use crate::error::Result;
use crate::module::{Module, join};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// A boxed layer of a [`Sequential`]: `Send + Sync`, so a model can be put
/// in an `Arc` and captured by a compiled function.
pub type BoxedLayer = Box<dyn Layer + Send + Sync>;

/// Layers applied one after another. Layer `i` is called with
/// [`Mode::child`]`(i)`, so each draws from its own key, and its variables
/// are visited under `layers.{i}` (`layers.0.kernel`, `layers.0.bias`,
/// ...).
///
/// ```
/// use xlafn::nn::layers::{Activation, Layer, Linear, Sequential};
/// use xlafn::module::Module;
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let k = |i| xlafn::random::fold_in(&key, &Tensor::scalar(i as u32));
/// let mlp = Sequential::new()
///     .add(Linear::new(&k(0)?, 4, 8)?)
///     .add(Activation::Relu)
///     .add(Linear::new(&k(1)?, 8, 2)?)
///     .add_fn(|x| x.softmax(-1));
/// let y = mlp.forward(&Tensor::ones(&[3, 4], DType::F32))?;
/// assert_eq!(y.dims(), vec![3, 2]);
/// let p = y.to_vec::<f32>()?;
/// assert!((p[0] + p[1] - 1.0).abs() < 1e-6);
/// let names: Vec<String> = mlp.named_variables().into_iter().map(|(n, _)| n).collect();
/// assert_eq!(names, ["layers.0.kernel", "layers.0.bias", "layers.2.kernel", "layers.2.bias"]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Default)]
pub struct Sequential {
    layers: Vec<BoxedLayer>,
}

impl Sequential {
    /// An empty stack (the identity).
    pub fn new() -> Sequential {
        Sequential::default()
    }

    /// Appends `layer` (Keras' `Sequential.add`; it is not `+`).
    #[allow(clippy::should_implement_trait)]
    pub fn add(mut self, layer: impl Layer + Send + Sync + 'static) -> Sequential {
        self.layers.push(Box::new(layer));
        self
    }

    /// Appends a boxed layer.
    pub fn add_boxed(mut self, layer: BoxedLayer) -> Sequential {
        self.layers.push(layer);
        self
    }

    /// Appends a function of a tensor as a layer without weights
    /// ([`Lambda`]).
    pub fn add_fn(
        self,
        f: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Sequential {
        self.add(Lambda::new(f))
    }

    /// Appends an activation.
    pub fn add_activation(self, activation: Activation) -> Sequential {
        self.add(activation)
    }

    /// The layers, in order.
    pub fn layers(&self) -> &[BoxedLayer] {
        &self.layers
    }

    /// The number of layers.
    pub fn len(&self) -> usize {
        self.layers.len()
    }

    /// Whether there are no layers.
    pub fn is_empty(&self) -> bool {
        self.layers.is_empty()
    }
}

impl std::fmt::Debug for Sequential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Sequential({} layers)", self.layers.len())
    }
}

impl Module for Sequential {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.layers.visit_variables(&join(prefix, "layers"), f);
    }
}

impl Layer for Sequential {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        let mut y = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            y = layer.call(&y, &mode.child(i as u64)?)?;
        }
        Ok(y)
    }
}
