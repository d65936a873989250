//! Layer: [`ConvTranspose2d`] (Keras' `Conv2DTranspose`) and
//! [`DepthwiseConv2d`] (Keras' `DepthwiseConv2D`), over
//! `Tensor::conv2d_transpose` and `Tensor::depthwise_conv2d` from
//! `ops::conv`, [`Param`](super::Param) and the shared kernel-and-bias
//! weights. Imports `initializers` for their options.

use super::conv::channels;
use super::util::{KernelBias, check_built, check_positive, check_rank, float_input};
use super::{Activation, Layer, Mode};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::Module;
use crate::nn::mixed_precision::Policy;
use crate::ops::conv::Padding;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// The setters both layers share (they differ only in the kernel's shape).
macro_rules! options {
    ($ty:ident, $kind:ident) => {
        impl $ty {
            /// The step per spatial axis (default 1).
            pub fn strides(mut self, strides: [i64; 2]) -> $ty {
                self.strides = strides;
                self
            }

            /// The padding (default `Padding::Valid`).
            pub fn padding(mut self, padding: Padding) -> $ty {
                self.padding = padding;
                self
            }

            /// The kernel's dilation per spatial axis (default 1).
            pub fn dilation(mut self, dilation: [i64; 2]) -> $ty {
                self.dilation = dilation;
                self
            }

            /// The activation applied last (default none).
            pub fn activation(mut self, activation: Activation) -> $ty {
                self.activation = activation;
                self
            }

            /// Whether the layer adds a bias (default true).
            pub fn use_bias(mut self, on: bool) -> $ty {
                self.weights.reset_bias(on);
                self
            }

            /// The kernel's initializer (default GlorotUniform). Weights
            /// already made are dropped: set options before `build`, or
            /// the next call builds them again.
            pub fn kernel_initializer(mut self, init: Initializer) -> $ty {
                self.weights.kernel_init = init;
                self.weights.reset();
                self
            }

            /// The bias' initializer (default zeros); drops weights
            /// already made.
            pub fn bias_initializer(mut self, init: Initializer) -> $ty {
                self.weights.bias_init = init;
                self.weights.reset();
                self
            }

            /// The weights' dtype (default float32); drops weights already
            /// made.
            pub fn dtype(mut self, dtype: DType) -> $ty {
                self.weights.dtype = dtype;
                self.weights.reset();
                self
            }

            /// The mixed-precision policy (default the global one when the
            /// layer was made): weights in its variable dtype, inputs and
            /// outputs in its compute dtype; weights already made in
            /// another dtype are dropped.
            pub fn dtype_policy(mut self, policy: Policy) -> $ty {
                self.weights.set_policy(policy);
                self
            }

            /// The kernel, once made.
            pub fn kernel(&self) -> Option<&Variable> {
                self.weights.kernel.variable()
            }

            /// The bias, once made.
            pub fn bias(&self) -> Option<&Variable> {
                self.weights.bias.as_ref().and_then(|b| b.variable())
            }
        }

        impl Module for $ty {
            fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
                let f = &mut super::util::noting(LayerKind::$kind, f);
                self.weights.visit_variables(prefix, f);
            }
        }
    };
}

/// The transpose of a 2-D convolution (Keras' `Conv2DTranspose`, often
/// called a deconvolution): the gradient of the forward convolution with
/// respect to its input, so it maps `[batch, h, w, in]` to `[batch, h',
/// w', filters]` with `h'` as large as the forward convolution's input.
///
/// The kernel is `[kh, kw, filters, in]` (Keras' layout: the forward
/// convolution's `[k.., in, out]` seen from the other side). The output
/// size per spatial axis is Keras' (without `output_padding`), with `k`
/// the dilated kernel size `1 + d * (kernel - 1)`:
/// - `Padding::Valid`: `size * stride + max(k - stride, 0)`;
/// - `Padding::Same`: `size * stride`;
/// - `Padding::Explicit((lo, hi))`: `(size - 1) * stride + k - lo - hi`.
///
/// The input's whole shape must be known (the output's is computed from
/// it). Defaults as for [`Conv2d`](super::Conv2d).
///
/// ```
/// use xlafn::nn::layers::{ConvTranspose2d, Layer};
/// use xlafn::ops::conv::Padding;
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let up = ConvTranspose2d::new(&key, 4, 2, [3, 3])?.strides([2, 2]).padding(Padding::Same);
/// let y = up.forward(&Tensor::ones(&[1, 5, 5, 4], DType::F32))?;
/// assert_eq!(y.dims(), vec![1, 10, 10, 2]);
/// assert!(y.to_vec::<f32>()?.iter().all(|v| v.is_finite()));
/// assert_eq!(up.kernel().unwrap().dims(), vec![3, 3, 2, 4]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct ConvTranspose2d {
    filters: i64,
    kernel_size: [i64; 2],
    strides: [i64; 2],
    padding: Padding,
    dilation: [i64; 2],
    activation: Activation,
    weights: KernelBias,
}

options!(ConvTranspose2d, ConvTranspose);

impl ConvTranspose2d {
    /// A transposed convolution with `filters` outputs and windows of
    /// `kernel_size`, its weights made on the first call, drawn from `key`.
    pub fn lazy(key: &Tensor, filters: i64, kernel_size: [i64; 2]) -> Result<ConvTranspose2d> {
        check_positive("ConvTranspose2d", "filters", &[filters])?;
        check_positive("ConvTranspose2d", "kernel_size", &kernel_size)?;
        Ok(ConvTranspose2d {
            filters,
            kernel_size,
            strides: [1; 2],
            padding: Padding::Valid,
            dilation: [1; 2],
            activation: Activation::Linear,
            weights: KernelBias::new(key)?,
        })
    }

    /// A transposed convolution from `in_channels` to `filters`, its
    /// weights made now.
    pub fn new(
        key: &Tensor,
        in_channels: i64,
        filters: i64,
        kernel_size: [i64; 2],
    ) -> Result<ConvTranspose2d> {
        ConvTranspose2d::lazy(key, filters, kernel_size)?.build(in_channels)
    }

    /// A transposed convolution with these weights (`kernel [kh, kw,
    /// filters, in]`, Keras' layout; `bias [filters]` of the kernel's
    /// dtype), nothing drawn.
    pub fn from_weights(kernel: &Tensor, bias: Option<&Tensor>) -> Result<ConvTranspose2d> {
        const LAYER: &str = "ConvTranspose2d";
        check_rank(LAYER, kernel, 4, "[kh, kw, filters, in_channels]")?;
        let d = kernel.dims();
        let mut conv = ConvTranspose2d::lazy(&crate::random::key(0)?, d[2], [d[0], d[1]])?;
        conv.weights = KernelBias::given(LAYER, kernel, bias, d[2])?;
        conv.build(d[3])
    }

    /// Makes the weights now, for inputs of `in_channels`.
    pub fn build(self, in_channels: i64) -> Result<ConvTranspose2d> {
        check_positive("ConvTranspose2d", "input channels", &[in_channels])?;
        self.weights
            .build(&self.kernel_dims(in_channels), self.filters)?;
        Ok(self)
    }

    fn kernel_dims(&self, in_channels: i64) -> [i64; 4] {
        let [kh, kw] = self.kernel_size;
        [kh, kw, self.filters, in_channels]
    }

    /// The output's spatial size along axis `i` for an input of `size`.
    fn output_size(&self, i: usize, size: i64) -> Result<i64> {
        let (s, k) = (
            self.strides[i],
            1 + self.dilation[i] * (self.kernel_size[i] - 1),
        );
        match &self.padding {
            Padding::Valid => Ok(size * s + (k - s).max(0)),
            Padding::Same => Ok(size * s),
            Padding::Explicit(p) if p.len() == 2 => Ok((size - 1) * s + k - p[i].0 - p[i].1),
            Padding::Explicit(p) => Err(Error::invalid(
                "ConvTranspose2d",
                format!("explicit padding needs 2 (low, high) pairs, got {p:?}"),
            )),
        }
    }
}

impl Layer for ConvTranspose2d {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        let name = "ConvTranspose2d";
        float_input(x, name)?;
        let x = &self.weights.autocast(x)?;
        let channels = channels(x, name, 2)?;
        let built = self.weights.built_dims().map(|d| d[3]);
        check_built(name, "input channels (axis -1)", built, channels, x)?;
        check_positive(name, "strides", &self.strides)?;
        check_positive(name, "dilation", &self.dilation)?;
        // The batch may be unknown (an export for any batch); the output's
        // spatial sizes are computed from the input's, which must be known.
        let shape = x.shape();
        let spatial = match shape.dims() {
            Some([_, Some(h), Some(w), _]) => [*h, *w],
            _ => {
                return Err(Error::invalid(
                    name,
                    format!(
                        "needs an input of known spatial sizes (the output's are computed from \
                         them), got {}",
                        x.tensor_type()
                    ),
                ));
            }
        };
        let batch = shape.dims().and_then(|d| d[0]);
        let out = [
            self.output_size(0, spatial[0])?,
            self.output_size(1, spatial[1])?,
        ];
        if out[0] < 1 || out[1] < 1 {
            return Err(Error::invalid(
                name,
                format!(
                    "the padding {:?} leaves no output for input {}",
                    self.padding,
                    x.tensor_type()
                ),
            ));
        }
        let kernel = self
            .weights
            .kernel(&self.kernel_dims(channels), x.dtype())?;
        let y = x.conv2d_transpose_to(
            &kernel,
            [batch, Some(out[0]), Some(out[1]), Some(self.filters)],
            self.strides,
            self.padding.clone(),
            self.dilation,
        )?;
        let y = self.weights.add_bias(y, self.filters)?;
        self.activation.apply(&y)
    }
}

/// A depthwise 2-D convolution (Keras' `DepthwiseConv2D`): each input
/// channel convolved with its own `depth_multiplier` filters, giving `in *
/// depth_multiplier` channels, the outputs of channel `c` at `c *
/// multiplier ..`. The kernel is `[kh, kw, in, depth_multiplier]`, the
/// bias `[in * depth_multiplier]`. Defaults are Keras': multiplier 1,
/// otherwise as for [`Conv2d`](super::Conv2d).
///
/// ```
/// use xlafn::nn::layers::{DepthwiseConv2d, Layer};
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let dw = DepthwiseConv2d::new(&key, 3, [3, 3])?.depth_multiplier(2);
/// let y = dw.forward(&Tensor::ones(&[1, 6, 6, 3], DType::F32))?;
/// assert_eq!(y.dims(), vec![1, 4, 4, 6]);
/// assert!(y.to_vec::<f32>()?.iter().all(|v| v.is_finite()));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct DepthwiseConv2d {
    kernel_size: [i64; 2],
    multiplier: i64,
    strides: [i64; 2],
    padding: Padding,
    dilation: [i64; 2],
    activation: Activation,
    weights: KernelBias,
}

options!(DepthwiseConv2d, DepthwiseConv);

impl DepthwiseConv2d {
    /// A depthwise convolution with windows of `kernel_size`, its weights
    /// made on the first call, drawn from `key`.
    pub fn lazy(key: &Tensor, kernel_size: [i64; 2]) -> Result<DepthwiseConv2d> {
        check_positive("DepthwiseConv2d", "kernel_size", &kernel_size)?;
        Ok(DepthwiseConv2d {
            kernel_size,
            multiplier: 1,
            strides: [1; 2],
            padding: Padding::Valid,
            dilation: [1; 2],
            activation: Activation::Linear,
            weights: KernelBias::new(key)?,
        })
    }

    /// A depthwise convolution of `in_channels`, its weights made now.
    /// With [`DepthwiseConv2d::depth_multiplier`] after it, the weights are
    /// made again on the next call; use `lazy(..).depth_multiplier(m)
    /// .build(in)` to make them now.
    pub fn new(key: &Tensor, in_channels: i64, kernel_size: [i64; 2]) -> Result<DepthwiseConv2d> {
        DepthwiseConv2d::lazy(key, kernel_size)?.build(in_channels)
    }

    /// A depthwise convolution with these weights (`kernel [kh, kw, in,
    /// multiplier]`, `bias [in * multiplier]` of the kernel's dtype),
    /// nothing drawn.
    pub fn from_weights(kernel: &Tensor, bias: Option<&Tensor>) -> Result<DepthwiseConv2d> {
        const LAYER: &str = "DepthwiseConv2d";
        check_rank(LAYER, kernel, 4, "[kh, kw, in_channels, multiplier]")?;
        let d = kernel.dims();
        let mut conv = DepthwiseConv2d::lazy(&crate::random::key(0)?, [d[0], d[1]])?;
        conv.multiplier = d[3];
        conv.weights = KernelBias::given(LAYER, kernel, bias, d[2] * d[3])?;
        conv.build(d[2])
    }

    /// Makes the weights now, for inputs of `in_channels`.
    pub fn build(self, in_channels: i64) -> Result<DepthwiseConv2d> {
        check_positive("DepthwiseConv2d", "input channels", &[in_channels])?;
        check_positive("DepthwiseConv2d", "depth_multiplier", &[self.multiplier])?;
        self.weights.build(
            &self.kernel_dims(in_channels),
            in_channels * self.multiplier,
        )?;
        Ok(self)
    }

    /// The filters per input channel (default 1). It changes the kernel's
    /// shape, so weights already made are dropped.
    pub fn depth_multiplier(mut self, multiplier: i64) -> DepthwiseConv2d {
        self.multiplier = multiplier;
        self.weights.reset();
        self
    }

    fn kernel_dims(&self, in_channels: i64) -> [i64; 4] {
        let [kh, kw] = self.kernel_size;
        [kh, kw, in_channels, self.multiplier]
    }
}

impl Layer for DepthwiseConv2d {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        let name = "DepthwiseConv2d";
        float_input(x, name)?;
        let x = &self.weights.autocast(x)?;
        let channels = channels(x, name, 2)?;
        let built = self.weights.built_dims().map(|d| d[2]);
        check_built(name, "input channels (axis -1)", built, channels, x)?;
        check_positive(name, "depth_multiplier", &[self.multiplier])?;
        check_positive(name, "strides", &self.strides)?;
        check_positive(name, "dilation", &self.dilation)?;
        let kernel = self
            .weights
            .kernel(&self.kernel_dims(channels), x.dtype())?;
        let y = x.depthwise_conv2d(&kernel, self.strides, self.padding.clone(), self.dilation)?;
        let y = self.weights.add_bias(y, channels * self.multiplier)?;
        self.activation.apply(&y)
    }
}
