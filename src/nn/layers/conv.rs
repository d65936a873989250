//! Layer: the convolution layers [`Conv1d`], [`Conv2d`] and [`Conv3d`]
//! (Keras' `Conv1D`/`Conv2D`/`Conv3D`), over `Tensor::conv_general` from
//! `ops::conv`, [`Param`](super::Param) and the shared kernel-and-bias
//! weights. Imports `initializers` for its options.

use super::util::{KernelBias, check_built, check_positive, check_rank, dims_of, float_input};
use super::{Activation, Layer, Mode};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::Module;
use crate::nn::mixed_precision::Policy;
use crate::ops::conv::{ConvOptions, Padding};
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// A convolution over `N` spatial axes of a channels-last input
/// `[batch, spatial.., in]`, with a kernel `[k.., in / groups, filters]`:
/// `activation(conv(x, kernel) + bias)`, giving `[batch, spatial'..,
/// filters]`.
///
/// Defaults are Keras': unit strides and dilation, `Padding::Valid`, one
/// group, GlorotUniform kernel, zero bias (on), no activation, float32
/// weights. `groups > 1` splits the input channels into groups, each
/// convolved with its own `filters / groups` filters (XLA's
/// `feature_group_count`; `groups == in` is a depthwise convolution with
/// one filter per channel).
///
/// ```
/// use xlafn::nn::layers::{Conv2d, Layer};
/// use xlafn::ops::conv::Padding;
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let conv = Conv2d::new(&key, 3, 8, [3, 3])?.strides([2, 2]).padding(Padding::Same);
/// let y = conv.forward(&Tensor::ones(&[1, 8, 8, 3], DType::F32))?;
/// assert_eq!(y.dims(), vec![1, 4, 4, 8]);
/// assert!(y.to_vec::<f32>()?.iter().all(|v| v.is_finite()));
/// assert_eq!(conv.kernel().unwrap().dims(), vec![3, 3, 3, 8]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct Conv<const N: usize> {
    filters: i64,
    kernel_size: [i64; N],
    strides: [i64; N],
    padding: Padding,
    dilation: [i64; N],
    groups: i64,
    activation: Activation,
    weights: KernelBias,
}

/// A convolution over one spatial axis, `[batch, width, channels]`.
pub type Conv1d = Conv<1>;
/// A convolution over two spatial axes, `[batch, height, width, channels]`.
pub type Conv2d = Conv<2>;
/// A convolution over three spatial axes, `[batch, depth, height, width,
/// channels]`.
pub type Conv3d = Conv<3>;

impl<const N: usize> Conv<N> {
    fn name() -> String {
        format!("Conv{N}d")
    }

    /// A convolution with `filters` outputs and windows of `kernel_size`,
    /// its weights made on the first call from the input's channels
    /// (Keras' `Conv2D(filters, kernel_size)`), drawn from `key`.
    pub fn lazy(key: &Tensor, filters: i64, kernel_size: [i64; N]) -> Result<Conv<N>> {
        check_positive(&Self::name(), "filters", &[filters])?;
        check_positive(&Self::name(), "kernel_size", &kernel_size)?;
        Ok(Conv {
            filters,
            kernel_size,
            strides: [1; N],
            padding: Padding::Valid,
            dilation: [1; N],
            groups: 1,
            activation: Activation::Linear,
            weights: KernelBias::new(key)?,
        })
    }

    /// A convolution from `in_channels` to `filters`, its weights made now
    /// (PyTorch's `nn.Conv2d(in, out, kernel_size)`), drawn from `key`.
    pub fn new(
        key: &Tensor,
        in_channels: i64,
        filters: i64,
        kernel_size: [i64; N],
    ) -> Result<Conv<N>> {
        Conv::lazy(key, filters, kernel_size)?.build(in_channels)
    }

    /// A convolution with these weights (`kernel [k.., in, filters]`,
    /// `bias [filters]` of the kernel's dtype), nothing drawn; ungrouped
    /// (a grouped one: `lazy(..).groups(g).kernel_initializer(
    /// Initializer::Value(kernel))`).
    pub fn from_weights(kernel: &Tensor, bias: Option<&Tensor>) -> Result<Conv<N>> {
        check_rank(&Self::name(), kernel, N + 2, "[k.., in_channels, filters]")?;
        let dims = kernel.dims();
        let kernel_size: [i64; N] = dims[..N].try_into().expect("rank checked");
        let mut conv = Conv::lazy(&crate::random::key(0)?, dims[N + 1], kernel_size)?;
        conv.weights = KernelBias::given(&Self::name(), kernel, bias, dims[N + 1])?;
        conv.build(dims[N])
    }

    /// Makes the weights now, for inputs of `in_channels`.
    pub fn build(self, in_channels: i64) -> Result<Conv<N>> {
        let dims = self.kernel_dims(in_channels)?;
        self.weights.build(&dims, self.filters)?;
        Ok(self)
    }

    /// `[k.., in / groups, filters]`, or an error when the groups do not
    /// divide the channels.
    fn kernel_dims(&self, in_channels: i64) -> Result<Vec<i64>> {
        check_positive(&Self::name(), "input channels", &[in_channels])?;
        check_positive(&Self::name(), "groups", &[self.groups])?;
        if in_channels % self.groups != 0 || self.filters % self.groups != 0 {
            return Err(Error::invalid(
                Self::name(),
                format!(
                    "groups ({}) must divide both the input channels ({in_channels}) and the \
                     filters ({})",
                    self.groups, self.filters
                ),
            ));
        }
        let mut dims = self.kernel_size.to_vec();
        dims.extend([in_channels / self.groups, self.filters]);
        Ok(dims)
    }

    /// The step between windows per spatial axis (default 1).
    pub fn strides(mut self, strides: [i64; N]) -> Conv<N> {
        self.strides = strides;
        self
    }

    /// The padding (default `Padding::Valid`; `Same` keeps
    /// `ceil(size / stride)` outputs).
    pub fn padding(mut self, padding: Padding) -> Conv<N> {
        self.padding = padding;
        self
    }

    /// The kernel's dilation per spatial axis (default 1; Keras'
    /// `dilation_rate`).
    pub fn dilation(mut self, dilation: [i64; N]) -> Conv<N> {
        self.dilation = dilation;
        self
    }

    /// The number of channel groups (default 1). It changes the kernel's
    /// shape, so weights already made are dropped: set it before
    /// [`Conv::build`], or the next call builds them again.
    pub fn groups(mut self, groups: i64) -> Conv<N> {
        self.groups = groups;
        self.weights.reset();
        self
    }

    /// The activation applied last (default none).
    pub fn activation(mut self, activation: Activation) -> Conv<N> {
        self.activation = activation;
        self
    }

    /// Whether the layer adds a bias (default true).
    pub fn use_bias(mut self, on: bool) -> Conv<N> {
        self.weights.reset_bias(on);
        self
    }

    /// The kernel's initializer (default GlorotUniform); drops weights
    /// already made, like [`Conv::groups`].
    pub fn kernel_initializer(mut self, init: Initializer) -> Conv<N> {
        self.weights.kernel_init = init;
        self.weights.reset();
        self
    }

    /// The bias' initializer (default zeros); drops weights already made.
    pub fn bias_initializer(mut self, init: Initializer) -> Conv<N> {
        self.weights.bias_init = init;
        self.weights.reset();
        self
    }

    /// The weights' dtype (default float32); drops weights already made.
    pub fn dtype(mut self, dtype: DType) -> Conv<N> {
        self.weights.dtype = dtype;
        self.weights.reset();
        self
    }

    /// The mixed-precision policy (default the global one when the layer
    /// was made): weights in its variable dtype, inputs and outputs in its
    /// compute dtype; weights already made in another dtype are dropped.
    pub fn dtype_policy(mut self, policy: Policy) -> Conv<N> {
        self.weights.set_policy(policy);
        self
    }

    /// The kernel `[k.., in / groups, filters]`, once made.
    pub fn kernel(&self) -> Option<&Variable> {
        self.weights.kernel.variable()
    }

    /// The bias `[filters]`, once made.
    pub fn bias(&self) -> Option<&Variable> {
        self.weights.bias.as_ref().and_then(|b| b.variable())
    }
}

impl<const N: usize> Module for Conv<N> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        let f = &mut super::util::noting(LayerKind::Conv, f);
        self.weights.visit_variables(prefix, f);
    }
}

impl<const N: usize> Layer for Conv<N> {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        let name = Self::name();
        float_input(x, &name)?;
        let x = &self.weights.autocast(x)?;
        let channels = channels(x, &name, N)?;
        let built = self.weights.built_dims().map(|d| d[N] * self.groups.max(1));
        check_built(&name, "input channels (axis -1)", built, channels, x)?;
        check_positive(&name, "strides", &self.strides)?;
        check_positive(&name, "dilation", &self.dilation)?;
        self.check_window_fits(&name, x)?;
        let kernel = self
            .weights
            .kernel(&self.kernel_dims(channels)?, x.dtype())?;
        let mut o = ConvOptions::channels_last(N)?;
        o.strides = self.strides.to_vec();
        o.padding = self.padding.clone();
        o.rhs_dilation = self.dilation.to_vec();
        o.feature_group_count = self.groups;
        let y = x.conv_general(&kernel, &o)?;
        let y = self.weights.add_bias(y, self.filters)?;
        self.activation.apply(&y)
    }
}

impl<const N: usize> Conv<N> {
    /// Errors when a window is larger than the (padded) input: the output
    /// would be empty, which TensorFlow refuses too. Checked before a lazy
    /// layer builds its kernel, since the usual cause is a channels-first
    /// input (PyTorch's layout), whose channels would build a wrong one.
    fn check_window_fits(&self, name: &str, x: &Tensor) -> Result<()> {
        let dims = dims_of(x, name, None)?;
        let Some(spatial) = dims[1..=N].iter().copied().collect::<Option<Vec<i64>>>() else {
            return Ok(());
        };
        let pads =
            self.padding
                .resolve(&spatial, &self.kernel_size, &self.strides, &self.dilation)?;
        for (i, (&size, &(lo, hi))) in spatial.iter().zip(&pads).enumerate() {
            let window = (self.kernel_size[i] - 1) * self.dilation[i] + 1;
            if size > 0 && size.saturating_add(lo).saturating_add(hi) < window {
                return Err(Error::invalid(
                    name,
                    format!(
                        "spatial axis {i} of the input {} has {size} positions (padded {lo} + \
                         {hi}), fewer than the window of {window} (kernel_size {:?}, dilation \
                         {:?}): the output would be empty. The layer reads channels-last input \
                         [batch, spatial.., channels]; a channels-first [batch, channels, \
                         spatial..] tensor (PyTorch's layout) must be transposed first",
                        x.tensor_type(),
                        self.kernel_size,
                        self.dilation
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The channels (last axis) of a `[batch, spatial.., channels]` input with
/// `spatial` spatial axes; the rank and the channel count must be known.
pub(crate) fn channels(x: &Tensor, layer: &str, spatial: usize) -> Result<i64> {
    let dims = dims_of(x, layer, None)?;
    if dims.len() != spatial + 2 {
        return Err(Error::invalid(
            layer,
            format!(
                "needs a channels-last input of rank {} ([batch, {spatial} spatial axes, \
                 channels]), got {}",
                spatial + 2,
                x.tensor_type()
            ),
        ));
    }
    dims[spatial + 1].ok_or_else(|| {
        Error::invalid(
            layer,
            format!(
                "needs the number of input channels, got {}",
                x.tensor_type()
            ),
        )
    })
}
