//! Layer: helpers the layers of `nn::layers` share (input checks, the
//! kernel-and-bias pair of the weighted layers, half-precision
//! statistics, the mixed-precision casts). Imports `tensor`, `random`,
//! `initializers`, `nn::mixed_precision` and [`Param`].

use super::Param;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::nn::mixed_precision::{Policy, current_policy};
use crate::random;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// The `i`-th key derived from a layer's key, one per weight, so no two
/// weights of a layer draw the same bits.
pub(crate) fn subkey(key: &Tensor, i: u64) -> Result<Tensor> {
    random::fold_in(key, &Tensor::try_scalar(i)?)
}

/// The dims of `x`, which must be of known rank `rank` (or any known rank
/// when `None`); unknown dimensions are `None`.
pub(crate) fn dims_of(x: &Tensor, layer: &str, rank: Option<usize>) -> Result<Vec<Option<i64>>> {
    let shape = x.shape();
    let dims = shape.dims().ok_or_else(|| {
        Error::invalid(
            layer,
            format!("needs an input of known rank, got {}", x.tensor_type()),
        )
    })?;
    if rank.is_some_and(|r| dims.len() != r) {
        let r = rank.unwrap_or(0);
        return Err(Error::invalid(
            layer,
            format!("needs an input of rank {r}, got {}", x.tensor_type()),
        ));
    }
    Ok(dims.to_vec())
}

/// The size of `x`'s last axis, which must be known.
pub(crate) fn last_dim(x: &Tensor, layer: &str) -> Result<i64> {
    match dims_of(x, layer, None)?.last() {
        Some(Some(n)) => Ok(*n),
        Some(None) => Err(Error::invalid(
            layer,
            format!(
                "needs the size of the input's last axis (features), got {}",
                x.tensor_type()
            ),
        )),
        None => Err(Error::invalid(
            layer,
            format!("needs an input of rank >= 1, got {}", x.tensor_type()),
        )),
    }
}

/// Errors unless `x` is floating-point.
pub(crate) fn float_input(x: &Tensor, layer: &str) -> Result<()> {
    if x.dtype().is_float() {
        Ok(())
    } else {
        Err(Error::invalid(
            layer,
            format!("needs a floating-point input, got {}", x.tensor_type()),
        ))
    }
}

/// The dtype the normalizations compute their statistics in: f32 for
/// half-precision inputs (a bf16 mean of many values loses most of its
/// digits, and a variance of them can come out negative), else the
/// input's own.
pub(crate) fn statistics_dtype(x: DType) -> DType {
    match x {
        DType::F16 | DType::BF16 => DType::F32,
        d => d,
    }
}

/// Reads a weight and casts it to the dtype the layer computes in (the
/// input's): float32 weights run in bfloat16 for bfloat16 inputs, as
/// Keras' mixed precision does, and the cast's gradient reaches them.
pub(crate) fn read_as(p: &Param, dims: &[i64], dtype: DType, like: DType) -> Result<Tensor> {
    let w = p.read(dims, dtype)?;
    if dtype == like { Ok(w) } else { w.cast(like) }
}

/// `x` as a layer under `policy` computes on it: a floating input cast to
/// the compute dtype (Keras' autocasting), anything else, or any input
/// without a policy, as it is. Every layer with a policy calls this first,
/// so the weights it reads are then cast to `x`'s dtype by [`read_as`].
pub(crate) fn autocast(x: &Tensor, policy: Option<&Policy>) -> Result<Tensor> {
    match policy {
        Some(p) => p.cast_input(x),
        None => Ok(x.clone()),
    }
}

/// The dtype of a layer's variables: its policy's variable dtype, else
/// `fallback` (the layer's own default).
pub(crate) fn variable_dtype(policy: Option<&Policy>, fallback: DType) -> DType {
    policy.map_or(fallback, |p| p.variable_dtype())
}

/// Refuses a given weight `name` of `layer` whose dims or dtype are not
/// `dims` and `dtype`.
pub(crate) fn check_given(
    layer: &str,
    name: &str,
    value: &Tensor,
    dims: &[i64],
    dtype: DType,
) -> Result<()> {
    if value.dims() != dims || value.dtype() != dtype {
        return Err(Error::invalid(
            layer,
            format!(
                "the {name} given is {}{:?}, the layer needs {dtype}{dims:?}",
                value.dtype(),
                value.dims()
            ),
        ));
    }
    Ok(())
}

/// Refuses a given kernel of `layer` whose rank is not `rank`, naming
/// the layout expected.
pub(crate) fn check_rank(layer: &str, kernel: &Tensor, rank: usize, layout: &str) -> Result<()> {
    if kernel.dims().len() != rank || kernel.dims().iter().any(|&d| d <= 0) {
        return Err(Error::invalid(
            layer,
            format!(
                "the kernel given is {}{:?}: the layer's kernel is {layout}",
                kernel.dtype(),
                kernel.dims()
            ),
        ));
    }
    Ok(())
}

/// The kernel and the optional bias of a weighted layer ([`Linear`] and
/// the convolutions), with what it takes to make them again when an
/// option changes: initializers, keys, dtype. Visited as `kernel` and
/// `bias` at the layer's own path.
///
/// [`Linear`]: super::Linear
#[derive(Debug)]
pub(crate) struct KernelBias {
    kernel_key: Tensor,
    bias_key: Tensor,
    pub kernel: Param,
    pub bias: Option<Param>,
    pub kernel_init: Initializer,
    pub bias_init: Initializer,
    pub dtype: DType,
    /// The mixed-precision policy, from the global one when made.
    pub policy: Option<Policy>,
}

impl KernelBias {
    /// Unbuilt weights: a GlorotUniform kernel and a zero bias (Keras'
    /// defaults for `Dense` and `Conv*`), float32 or the global policy's
    /// variable dtype.
    pub fn new(key: &Tensor) -> Result<KernelBias> {
        let (kernel_key, bias_key) = (subkey(key, 0)?, subkey(key, 1)?);
        let policy = current_policy();
        Ok(KernelBias {
            kernel: Param::lazy(Initializer::GlorotUniform, &kernel_key),
            bias: Some(Param::lazy(Initializer::Zeros, &bias_key)),
            kernel_key,
            bias_key,
            kernel_init: Initializer::GlorotUniform,
            bias_init: Initializer::Zeros,
            dtype: variable_dtype(policy.as_ref(), DType::F32),
            policy,
        })
    }

    /// Weights given as values (a layer's `from_weights`): nothing is
    /// drawn, and an option that makes the weights again (`use_bias`, a
    /// policy of the same dtype) makes them from the same values. The
    /// bias must be `[units]` of the kernel's dtype.
    pub fn given(
        layer: &str,
        kernel: &Tensor,
        bias: Option<&Tensor>,
        units: i64,
    ) -> Result<KernelBias> {
        if let Some(b) = bias {
            check_given(layer, "bias", b, &[units], kernel.dtype())?;
        }
        let mut w = KernelBias::new(&random::key(0)?)?;
        w.kernel_init = Initializer::Value(kernel.clone());
        w.bias_init = bias.map_or(Initializer::Zeros, |b| Initializer::Value(b.clone()));
        w.dtype = kernel.dtype();
        w.reset();
        w.reset_bias(bias.is_some());
        Ok(w)
    }

    /// Follows `policy`: its variable dtype for the weights (weights
    /// already made in another dtype are dropped and made again on the
    /// next call, from the same keys), its compute dtype for the call.
    pub fn set_policy(&mut self, policy: Policy) {
        self.policy = Some(policy);
        if self.dtype != policy.variable_dtype() {
            self.dtype = policy.variable_dtype();
            self.reset();
        }
    }

    /// The layer's input under its policy ([`autocast`]).
    pub fn autocast(&self, x: &Tensor) -> Result<Tensor> {
        autocast(x, self.policy.as_ref())
    }

    /// Forgets weights already made, so the next build uses the current
    /// options.
    pub fn reset(&mut self) {
        self.kernel = Param::lazy(self.kernel_init.clone(), &self.kernel_key);
        if self.bias.is_some() {
            self.reset_bias(true);
        }
    }

    /// Drops the bias or makes it again (unbuilt).
    pub fn reset_bias(&mut self, on: bool) {
        self.bias = on.then(|| Param::lazy(self.bias_init.clone(), &self.bias_key));
    }

    /// Makes both weights now.
    pub fn build(&self, kernel_dims: &[i64], units: i64) -> Result<()> {
        self.kernel.get(kernel_dims, self.dtype)?;
        if let Some(b) = &self.bias {
            b.get(&[units], self.dtype)?;
        }
        Ok(())
    }

    /// The kernel's dims once it is made.
    pub fn built_dims(&self) -> Option<Vec<i64>> {
        self.kernel.variable().map(|v| v.dims().to_vec())
    }

    /// The kernel, made if needed, in dtype `like`.
    pub fn kernel(&self, dims: &[i64], like: DType) -> Result<Tensor> {
        read_as(&self.kernel, dims, self.dtype, like)
    }

    /// `y + bias` (broadcast over the last axis), or `y` without a bias.
    pub fn add_bias(&self, y: Tensor, units: i64) -> Result<Tensor> {
        match &self.bias {
            Some(b) => y.add(&read_as(b, &[units], self.dtype, y.dtype())?),
            None => Ok(y),
        }
    }
}

impl Module for KernelBias {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.kernel.visit_variables(&join(prefix, "kernel"), f);
        self.bias.visit_variables(&join(prefix, "bias"), f);
    }
}

/// Errors when `x`'s size `got` differs from the `built` size the layer's
/// weights were made for; checked before the weights are read, so the
/// error names the layer and the axis rather than a weight's shape.
pub(crate) fn check_built(
    layer: &str,
    what: &str,
    built: Option<i64>,
    got: i64,
    x: &Tensor,
) -> Result<()> {
    match built {
        Some(b) if b != got => Err(Error::invalid(
            layer,
            format!(
                "built for {b} {what}, called on input {} with {got}",
                x.tensor_type()
            ),
        )),
        _ => Ok(()),
    }
}

/// Errors unless every entry of `values` is at least 1.
pub(crate) fn check_positive(layer: &str, what: &str, values: &[i64]) -> Result<()> {
    if values.iter().all(|&v| v >= 1) {
        Ok(())
    } else {
        Err(Error::invalid(
            layer,
            format!("{what} must be >= 1, got {values:?}"),
        ))
    }
}

/// `f`, noting `kind` on each variable it is handed: how a built-in
/// layer's `visit_variables` tells framework presets
/// (`weights::Mapping::torch`) what its variables are.
pub(crate) fn noting(
    kind: LayerKind,
    f: &mut dyn FnMut(String, &Variable),
) -> impl FnMut(String, &Variable) + '_ {
    move |path, v| {
        v.note_layer_kind(kind);
        f(path, v)
    }
}
