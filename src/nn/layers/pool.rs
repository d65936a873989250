//! Layer: the pooling layers [`MaxPool`] and [`AvgPool`] (1 to 3 spatial
//! axes), [`GlobalAvgPool`], [`GlobalMaxPool`] and [`Flatten`], over
//! `Tensor::max_pool`/`avg_pool` from `ops::window` and the reductions.
//! None has weights.

use super::util::{check_positive, dims_of};
use super::{Layer, Mode};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::ops::conv::Padding;
use crate::tensor::Tensor;
use crate::variable::Variable;

/// No weights, for each layer of this file.
macro_rules! no_weights {
    ($($ty:ty),*) => {$(
        impl Module for $ty {
            fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
        }
    )*};
}

/// The options both window pools share (Keras' `MaxPooling2D` and
/// `AveragePooling2D`).
macro_rules! window_pool {
    ($ty:ident, $name:literal, $op:ident) => {
        impl<const N: usize> $ty<N> {
            /// A pool over windows of `pool_size`, with strides equal to the
            /// window (Keras' default) and `Padding::Valid`.
            pub fn new(pool_size: [i64; N]) -> $ty<N> {
                $ty {
                    pool_size,
                    strides: pool_size,
                    padding: Padding::Valid,
                }
            }

            /// The step between windows (default: the window size).
            pub fn strides(mut self, strides: [i64; N]) -> $ty<N> {
                self.strides = strides;
                self
            }

            /// The padding (default `Padding::Valid`).
            pub fn padding(mut self, padding: Padding) -> $ty<N> {
                self.padding = padding;
                self
            }
        }

        impl<const N: usize> Module for $ty<N> {
            fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
        }

        impl<const N: usize> Layer for $ty<N> {
            fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
                let name = format!("{}{N}d", $name);
                dims_of(x, &name, Some(N + 2))?;
                check_positive(&name, "pool_size", &self.pool_size)?;
                check_positive(&name, "strides", &self.strides)?;
                x.$op(&self.pool_size, &self.strides, self.padding.clone())
            }
        }
    };
}

/// The maximum over each window of a channels-last input `[batch,
/// spatial.., channels]` (Keras' `MaxPooling1D/2D/3D`): strides default to
/// the window, padding to `Valid`. Padding never wins the maximum.
///
/// ```
/// use xlafn::nn::layers::{Layer, MaxPool2d};
/// use xlafn::prelude::*;
/// let x = Tensor::from_vec((0..16).map(|v| v as f32).collect(), &[1, 4, 4, 1])?;
/// let y = MaxPool2d::new([2, 2]).forward(&x)?;
/// assert_eq!(y.to_vec::<f32>()?, vec![5.0, 7.0, 13.0, 15.0]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct MaxPool<const N: usize> {
    pool_size: [i64; N],
    strides: [i64; N],
    padding: Padding,
}

window_pool!(MaxPool, "MaxPool", max_pool);

/// Max pooling over one spatial axis.
pub type MaxPool1d = MaxPool<1>;
/// Max pooling over two spatial axes.
pub type MaxPool2d = MaxPool<2>;
/// Max pooling over three spatial axes.
pub type MaxPool3d = MaxPool<3>;

/// The mean over each window of a channels-last input (Keras'
/// `AveragePooling1D/2D/3D`): strides default to the window, padding to
/// `Valid`. With `Same` padding a window's mean is over its elements that
/// are not padding (Keras' and TensorFlow's rule; PyTorch's default
/// `count_include_pad=True` divides by the whole window).
#[derive(Clone, Debug)]
pub struct AvgPool<const N: usize> {
    pool_size: [i64; N],
    strides: [i64; N],
    padding: Padding,
}

window_pool!(AvgPool, "AvgPool", avg_pool);

/// Average pooling over one spatial axis.
pub type AvgPool1d = AvgPool<1>;
/// Average pooling over two spatial axes.
pub type AvgPool2d = AvgPool<2>;
/// Average pooling over three spatial axes.
pub type AvgPool3d = AvgPool<3>;

/// The spatial axes `1..rank-1` of a `[batch, spatial.., channels]` input.
fn spatial_axes(x: &Tensor, layer: &str) -> Result<Vec<i64>> {
    let rank = dims_of(x, layer, None)?.len();
    if rank < 3 {
        return Err(Error::invalid(
            layer,
            format!(
                "needs a channels-last input [batch, spatial.., channels] of rank >= 3, got {}",
                x.tensor_type()
            ),
        ));
    }
    Ok((1..rank as i64 - 1).collect())
}

/// The mean over the spatial axes of `[batch, spatial.., channels]`,
/// giving `[batch, channels]` (Keras' `GlobalAveragePooling1D/2D/3D`), or
/// with `keepdims` `[batch, 1.., channels]`.
///
/// ```
/// use xlafn::nn::layers::{GlobalAvgPool, Layer};
/// use xlafn::prelude::*;
/// let x = Tensor::from_vec(vec![1.0f32, 10.0, 3.0, 30.0], &[1, 2, 2])?;
/// assert_eq!(GlobalAvgPool::new().forward(&x)?.to_vec::<f32>()?, vec![2.0, 20.0]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct GlobalAvgPool {
    keepdims: bool,
}

/// The maximum over the spatial axes (Keras' `GlobalMaxPooling1D/2D/3D`);
/// see [`GlobalAvgPool`].
#[derive(Clone, Debug, Default)]
pub struct GlobalMaxPool {
    keepdims: bool,
}

macro_rules! global_pool {
    ($ty:ident, $name:literal, $op:ident) => {
        impl $ty {
            /// Without `keepdims`: `[batch, channels]`.
            pub fn new() -> $ty {
                $ty::default()
            }

            /// Whether the spatial axes stay, of size 1 (default false).
            pub fn keepdims(mut self, keepdims: bool) -> $ty {
                self.keepdims = keepdims;
                self
            }
        }

        impl Layer for $ty {
            fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
                let axes = spatial_axes(x, $name)?;
                x.$op(&axes, self.keepdims)
            }
        }
    };
}

global_pool!(GlobalAvgPool, "GlobalAvgPool", reduce_mean);
global_pool!(GlobalMaxPool, "GlobalMaxPool", reduce_max);

/// Flattens all but the batch axis: `[batch, d..]` to `[batch, prod(d..)]`
/// (Keras' `Flatten`; a `[batch]` input becomes `[batch, 1]`). The axes
/// after the batch must be known.
#[derive(Clone, Debug, Default)]
pub struct Flatten;

impl Flatten {
    /// The flatten layer.
    pub fn new() -> Flatten {
        Flatten
    }
}

impl Layer for Flatten {
    fn call(&self, x: &Tensor, _: &Mode) -> Result<Tensor> {
        let dims = dims_of(x, "Flatten", None)?;
        let Some((batch, rest)) = dims.split_first() else {
            return Err(Error::invalid(
                "Flatten",
                format!("needs an input with a batch axis, got {}", x.tensor_type()),
            ));
        };
        let rest: Option<Vec<i64>> = rest.iter().copied().collect();
        let rest = rest.ok_or_else(|| {
            Error::invalid(
                "Flatten",
                format!(
                    "needs the sizes of every axis after the batch, got {}",
                    x.tensor_type()
                ),
            )
        })?;
        x.reshape(&[batch.unwrap_or(-1), rest.iter().product()])
    }
}

no_weights!(GlobalAvgPool, GlobalMaxPool, Flatten);
