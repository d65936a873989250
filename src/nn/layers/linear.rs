//! Layer: [`Linear`], the densely connected layer (Keras' `Dense`,
//! PyTorch's `nn.Linear`), over `tensor` ops, [`Param`](super::Param) and
//! the shared kernel-and-bias weights. Imports `initializers` for its
//! options.

use super::util::{KernelBias, check_built, float_input, last_dim};
use super::{Activation, Layer, Mode};
use crate::dtype::DType;
use crate::error::Result;
use crate::initializers::Initializer;
use crate::module::Module;
use crate::nn::mixed_precision::Policy;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// `activation(x @ kernel + bias)` over the last axis of an input of any
/// rank `[..., in]`, giving `[..., units]` (Keras' `Dense`).
///
/// Defaults are Keras': kernel `[in, units]` from GlorotUniform (PyTorch
/// draws from a Kaiming-uniform instead), bias of zeros (on by default),
/// no activation, float32 weights. The weights are named `kernel` and
/// `bias` (Keras' names; PyTorch's `weight` is transposed, `[units, in]`).
/// Inputs of another float dtype run in that dtype, the weights cast to it.
/// Under a mixed-precision [`Policy`] (the global one when the layer is
/// made, or [`Linear::dtype_policy`]) the input is cast to the compute
/// dtype first and the weights are kept in the variable dtype (Keras'
/// `mixed_bfloat16`: float32 weights, bfloat16 compute and output).
///
/// ```
/// use xlafn::nn::layers::{Activation, Layer, Linear};
/// use xlafn::module::Module;
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let dense = Linear::new(&key, 3, 2)?.activation(Activation::Relu);
/// let y = dense.forward(&Tensor::ones(&[4, 3], DType::F32))?;
/// assert_eq!(y.dims(), vec![4, 2]);
/// assert!(y.to_vec::<f32>()?.iter().all(|v| *v >= 0.0));
/// // Built on the first call from the input's last axis (Keras' build).
/// let lazy = Linear::lazy(&key, 2)?.use_bias(false);
/// assert!(lazy.variables().is_empty());
/// let z = lazy.forward(&Tensor::ones(&[4, 5], DType::F32))?;
/// assert_eq!(z.to_vec::<f32>()?.len(), 8);
/// assert_eq!(lazy.named_variables()[0].0, "kernel");
/// assert_eq!(lazy.kernel().unwrap().dims(), vec![5, 2]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct Linear {
    units: i64,
    activation: Activation,
    weights: KernelBias,
}

impl Linear {
    /// A layer of `units` outputs whose weights are made on the first call
    /// (Keras' `Dense(units)`), drawn from `key`.
    pub fn lazy(key: &Tensor, units: i64) -> Result<Linear> {
        super::util::check_positive("Linear", "units", &[units])?;
        Ok(Linear {
            units,
            activation: Activation::Linear,
            weights: KernelBias::new(key)?,
        })
    }

    /// A layer from `in_features` to `units`, its weights made now
    /// (PyTorch's `nn.Linear(in, out)`), drawn from `key`.
    pub fn new(key: &Tensor, in_features: i64, units: i64) -> Result<Linear> {
        Linear::lazy(key, units)?.build(in_features)
    }

    /// A layer with these weights (`kernel [in, units]`, `bias [units]`
    /// of the kernel's dtype), nothing drawn: a pretrained layer in one
    /// call.
    ///
    /// ```
    /// use xlafn::nn::layers::{Layer, Linear};
    /// use xlafn::prelude::*;
    /// let kernel = Tensor::from_vec(vec![1f32, 0., 0., 1., 1., 1.], &[3, 2])?;
    /// let fc = Linear::from_weights(&kernel, Some(&Tensor::from_vec(vec![0.5f32, 0.], &[2])?))?;
    /// let y = fc.forward(&Tensor::from_vec(vec![1f32, 2., 3.], &[1, 3])?)?;
    /// assert_eq!(y.to_vec::<f32>()?, vec![4.5, 5.0]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn from_weights(kernel: &Tensor, bias: Option<&Tensor>) -> Result<Linear> {
        super::util::check_rank("Linear", kernel, 2, "[in_features, units]")?;
        let [in_features, units] = [kernel.dims()[0], kernel.dims()[1]];
        Linear {
            units,
            activation: Activation::Linear,
            weights: KernelBias::given("Linear", kernel, bias, units)?,
        }
        .build(in_features)
    }

    /// Makes the weights now, for inputs of `in_features`.
    pub fn build(self, in_features: i64) -> Result<Linear> {
        super::util::check_positive("Linear", "in_features", &[in_features])?;
        self.weights.build(&[in_features, self.units], self.units)?;
        Ok(self)
    }

    /// The activation applied last (default none).
    pub fn activation(mut self, activation: Activation) -> Linear {
        self.activation = activation;
        self
    }

    /// Whether the layer adds a bias (default true). Turning it off drops
    /// the bias; turning it on again makes a new one on the next call.
    pub fn use_bias(mut self, on: bool) -> Linear {
        self.weights.reset_bias(on);
        self
    }

    /// The kernel's initializer (default GlorotUniform). Weights already
    /// made are dropped: set options before [`Linear::build`], or the next
    /// call builds them again.
    pub fn kernel_initializer(mut self, init: Initializer) -> Linear {
        self.weights.kernel_init = init;
        self.weights.reset();
        self
    }

    /// The bias' initializer (default zeros); drops weights already made,
    /// like [`Linear::kernel_initializer`].
    pub fn bias_initializer(mut self, init: Initializer) -> Linear {
        self.weights.bias_init = init;
        self.weights.reset();
        self
    }

    /// The weights' dtype (default float32); drops weights already made,
    /// like [`Linear::kernel_initializer`].
    pub fn dtype(mut self, dtype: DType) -> Linear {
        self.weights.dtype = dtype;
        self.weights.reset();
        self
    }

    /// The mixed-precision policy (default the global one when the layer
    /// was made; Keras' `dtype=` argument): weights in its variable dtype,
    /// inputs and outputs in its compute dtype. Weights already made in
    /// another dtype are dropped, like [`Linear::dtype`] (a mixed policy
    /// keeps float32 ones).
    pub fn dtype_policy(mut self, policy: Policy) -> Linear {
        self.weights.set_policy(policy);
        self
    }

    /// The policy the layer follows, if any.
    pub fn policy(&self) -> Option<Policy> {
        self.weights.policy
    }

    /// The number of outputs.
    pub fn units(&self) -> i64 {
        self.units
    }

    /// The kernel `[in, units]`, once made.
    pub fn kernel(&self) -> Option<&Variable> {
        self.weights.kernel.variable()
    }

    /// The bias `[units]`, once made (never without a bias).
    pub fn bias(&self) -> Option<&Variable> {
        self.weights.bias.as_ref().and_then(|b| b.variable())
    }
}

impl Module for Linear {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        let f = &mut super::util::noting(LayerKind::Linear, f);
        self.weights.visit_variables(prefix, f);
    }
}

impl Layer for Linear {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        float_input(x, "Linear")?;
        let x = &self.weights.autocast(x)?;
        let n_in = last_dim(x, "Linear")?;
        let built = self.weights.built_dims().map(|d| d[0]);
        check_built("Linear", "input features (axis -1)", built, n_in, x)?;
        let kernel = self.weights.kernel(&[n_in, self.units], x.dtype())?;
        // As a careful hand writes it: with the leading shape known, the
        // rows are flattened into one matrix (`[rows, n_in] @ [n_in,
        // units]`, bias, activation) between free reshapes. The kernel's
        // gradient is then one plain product of two `[rows, ..]` matrices
        // and the bias' a sum over one axis; contracting several leading
        // axes at once instead makes XLA rearrange the input with a
        // transpose, and the general `dot_general` gradient adds another to
        // put the result in place.
        let affine = |rows: &Tensor| -> Result<Tensor> {
            let y = self.weights.add_bias(rows.matmul(&kernel)?, self.units)?;
            self.activation.apply(&y)
        };
        match x.shape().as_known() {
            Some(dims) if dims.len() == 2 => affine(x),
            Some(dims) if dims.len() > 2 => {
                let lead = &dims[..dims.len() - 1];
                let mut out = lead.to_vec();
                out.push(self.units);
                affine(&x.reshape(&[lead.iter().product(), n_in])?)?.reshape(&out)
            }
            // A vector, or leading axes unknown until run time: contract
            // the last axis, keeping the others.
            _ => {
                let y = x.dot_general(&kernel, &[-1], &[0], &[], &[])?;
                let y = self.weights.add_bias(y, self.units)?;
                self.activation.apply(&y)
            }
        }
    }
}
