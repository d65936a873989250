//! Layer: nn::layers (recurrent). Imports `tensor` ops, `random` (fold-in
//! keys), `initializers` and this folder's [`Param`], [`Layer`] and
//! [`Mode`]; the loop over time is `scan.rs`'s (`control::for_range`).
//!
//! Keras' `LSTM` and `GRU` ([`Lstm`], [`Gru`]), a stack of them
//! ([`Stacked`], PyTorch's `num_layers`) and [`Bidirectional`] (outputs
//! concatenated, Keras' default `merge_mode="concat"`), those two in
//! `wrappers.rs`.
//!
//! Each layer runs as ONE device loop over time (`for_range` over the
//! host-known length, a single `while` op, not unrolled), the mechanism
//! of the W11 benchmark: the input projection `x @ kernel + bias` of every
//! step is one matmul before the loop, each step reads its row of it and
//! writes its output row into a `TensorArray`. The gradient is then the
//! one that loop machinery builds: one forward loop that records its
//! states and one backward loop, whose output-array cotangent stays
//! loop-invariant (no per-step copy of the whole sequence).
//!
//! Semantics are Keras': inputs `[batch, time, features]`; `tanh`
//! activations and `sigmoid` recurrent activations; LSTM gates in the
//! order input, forget, cell, output; GRU gates update (z), reset (r),
//! candidate (h) with `h = z * h_prev + (1 - z) * candidate`.
//! Initial weights: Glorot-uniform input kernels, orthogonal recurrent
//! kernels, zero biases but for the LSTM forget gate's ones
//! (`unit_forget_bias=True`).
//!
//! Masks are `[batch, time]`, bool or integer (nonzero: a real step). At
//! a masked step every state keeps its previous value and the output
//! repeats the previous step's output (zeros before the first real step),
//! as Keras' default `zero_output_for_mask=False`; with
//! `zero_output_for_mask` (what Keras' `Bidirectional` sets when it
//! returns sequences) masked outputs are zeros instead. With
//! `go_backwards` the sequence is read from its end and the returned
//! sequence is in that (reversed) order, as Keras returns it.
//!
//! Weights are made in the input's dtype on the first call, or by
//! [`Recurrent::build`] (and `build` on stacks and pairs) before it. Under a
//! mixed-precision [`Policy`] (the global one when the layer is made, or
//! `dtype_policy`) they are made in its variable dtype and cast to its
//! compute dtype, and the input and initial states are cast to that: the
//! loop carries compute-dtype states.
//!
//! Keras' `dropout`/`recurrent_dropout` are not offered: the layers
//! ignore the [`Mode`].
//!
//! ```
//! use xlafn::nn::layers::{Layer, Lstm, Recurrent};
//! use xlafn::prelude::*;
//! let lstm = Lstm::new(&xlafn::random::key(0)?, 8)?.return_sequences(true);
//! let x = Tensor::ones(&[2, 5, 3], DType::F32);
//! let out = lstm.run(&x, None, None)?;
//! assert_eq!(out.outputs.dims(), vec![2, 5, 8]);
//! assert_eq!(out.states.len(), 2); // h and c, each [2, 8]
//! assert_eq!(lstm.forward(&x)?.dims(), vec![2, 5, 8]);
//! # Ok::<(), xlafn::Error>(())
//! ```

mod scan;
mod wrappers;

use super::util::{autocast, check_built, check_given, check_rank, read_as, variable_dtype};
use super::{Layer, Mode, Param};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::nn::mixed_precision::{Policy, current_policy};
use crate::random;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};
use scan::{
    Options, initial_states, project_inputs, scan, sequence_dims, time_major_mask, zero_states,
};
use std::sync::Arc;
pub use wrappers::{Bidirectional, Stacked};

/// What a recurrent layer returns: its outputs and its final states
/// (Keras' `return_state=True`).
#[derive(Clone, Debug)]
pub struct RnnOutput {
    /// `[batch, time, units]` with `return_sequences`, else the last
    /// step's output `[batch, units]`.
    pub outputs: Tensor,
    /// The final states, each `[batch, units]`: `[h, c]` for an LSTM,
    /// `[h]` for a GRU; a stack lists its layers' states in order, a
    /// bidirectional layer the forward then the backward ones.
    pub states: Vec<Tensor>,
}

/// A recurrent layer over `[batch, time, features]`: what [`Stacked`] and
/// [`Bidirectional`] need of the layers they hold.
pub trait Recurrent: Layer {
    /// The size of each output step.
    fn units(&self) -> i64;
    /// How many state tensors the layer carries.
    fn state_count(&self) -> usize;
    /// Runs the layer over `x` from `initial_state` (zeros if `None`;
    /// else `state_count()` tensors `[batch, units]`), with an optional
    /// `[batch, time]` mask.
    fn run(
        &self,
        x: &Tensor,
        initial_state: Option<&[Tensor]>,
        mask: Option<&Tensor>,
    ) -> Result<RnnOutput>;
    /// Whether the whole output sequence is returned.
    fn return_sequences(&self) -> bool;
    /// Sets [`Recurrent::return_sequences`].
    fn set_return_sequences(&mut self, on: bool);
    /// Whether the sequence is read from its end.
    fn go_backwards(&self) -> bool;
    /// Sets [`Recurrent::go_backwards`].
    fn set_go_backwards(&mut self, on: bool);
    /// Masked steps output zeros (true) or repeat the previous output.
    fn set_zero_output_for_mask(&mut self, on: bool);
    /// Makes the weights now, for inputs of `features` in `dtype` (under a
    /// policy, in its variable dtype whatever `dtype` says): Keras'
    /// `build`. A first call does this itself; build first to load or
    /// restore weights without a dummy forward pass, or before a first
    /// call inside a loop body or branch (a variable cannot be made from a
    /// value computed there). Building again for the same sizes does
    /// nothing; for other sizes it is an error.
    fn build(&self, features: i64, dtype: DType) -> Result<()>;
}

/// What a cell computes with under `policy`: `x` and the given initial
/// states cast to the compute dtype, and a reader of weights (kept in the
/// variable dtype, else `x`'s) in it.
struct Inputs {
    x: Tensor,
    states: Option<Vec<Tensor>>,
    stored: DType,
}

impl Inputs {
    fn new(x: &Tensor, states: Option<&[Tensor]>, policy: Option<&Policy>) -> Result<Inputs> {
        let x = autocast(x, policy)?;
        let states = states
            .map(|s| s.iter().map(|t| autocast(t, policy)).collect())
            .transpose()?;
        let stored = variable_dtype(policy, x.dtype());
        Ok(Inputs { x, states, stored })
    }

    /// Weight `p` of `dims`, in the compute dtype.
    fn read(&self, p: &Param, dims: &[i64]) -> Result<Tensor> {
        read_as(p, dims, self.stored, self.x.dtype())
    }
}

fn check_features(op: &str, features: i64) -> Result<()> {
    if features < 1 {
        return Err(Error::invalid(
            op,
            format!("build needs input features >= 1, got {features}"),
        ));
    }
    Ok(())
}

fn check_units(op: &str, units: i64) -> Result<()> {
    if units < 1 {
        return Err(Error::invalid(
            op,
            format!("units must be >= 1, got {units}"),
        ));
    }
    Ok(())
}

fn fold(key: &Tensor, index: u64) -> Result<Tensor> {
    random::fold_in(key, &Tensor::try_scalar(index)?)
}

/// Keras' LSTM bias with `unit_forget_bias`: zeros but ones for the
/// forget gate (the second quarter).
fn forget_bias_init() -> Initializer {
    Initializer::Custom(Arc::new(|_key: &Tensor, dims: &[i64], dtype: DType| {
        let units = dims.first().copied().unwrap_or(0) / 4;
        Tensor::concat(
            &[
                Tensor::try_zeros(&[units], dtype)?,
                Tensor::try_ones(&[units], dtype)?,
                Tensor::try_zeros(&[2 * units], dtype)?,
            ],
            0,
        )
    }))
}

/// [`Recurrent`]'s option accessors, the same for every cell layer (each
/// keeps its options in `opts`); expanded inside each `impl Recurrent`.
macro_rules! cell_options {
    ($op:literal) => {
        fn build(&self, features: i64, dtype: DType) -> Result<()> {
            check_features($op, features)?;
            let dtype = variable_dtype(self.policy.as_ref(), dtype);
            let [kernel, recurrent, bias] = self.weight_dims(features);
            self.kernel.get(&kernel, dtype)?;
            self.recurrent_kernel.get(&recurrent, dtype)?;
            if let Some(b) = &self.bias {
                b.get(&bias, dtype)?;
            }
            Ok(())
        }
        fn return_sequences(&self) -> bool {
            self.opts.return_sequences
        }
        fn set_return_sequences(&mut self, on: bool) {
            self.opts.return_sequences = on;
        }
        fn go_backwards(&self) -> bool {
            self.opts.go_backwards
        }
        fn set_go_backwards(&mut self, on: bool) {
            self.opts.go_backwards = on;
        }
        fn set_zero_output_for_mask(&mut self, on: bool) {
            self.opts.zero_output_for_mask = on;
        }
    };
}

/// What a cell layer ([`Lstm`], [`Gru`]) offers whatever its cell: stacks
/// and bidirectional pairs of it, the option builders, and its [`Layer`]
/// and [`Module`] impls. One definition, expanded for each cell type.
macro_rules! cell_layer_api {
    ($cell:ident) => {
        impl $cell {
            /// `num_layers` such layers of `units`, each feeding its sequence
            /// to the next (PyTorch's `num_layers`), layer `i` drawn from
            /// `key` folded with `i`.
            pub fn stacked(key: &Tensor, units: i64, num_layers: usize) -> Result<Stacked<$cell>> {
                let layers = (0..num_layers)
                    .map(|i| $cell::new(&fold(key, i as u64)?, units))
                    .collect::<Result<Vec<_>>>()?;
                Stacked::new(layers)
            }

            /// A bidirectional layer of `units` per direction (the forward
            /// layer from `key` folded with 0, the backward with 1).
            pub fn bidirectional(key: &Tensor, units: i64) -> Result<Bidirectional<$cell>> {
                Ok(Bidirectional::new(
                    $cell::new(&fold(key, 0)?, units)?,
                    $cell::new(&fold(key, 1)?, units)?,
                ))
            }

            /// Returns the whole output sequence (Keras' `return_sequences`).
            pub fn return_sequences(mut self, on: bool) -> $cell {
                self.opts.return_sequences = on;
                self
            }

            #[doc(hidden)]
            #[deprecated(note = "renamed `return_sequences`: layer options are builders named as the option")]
            pub fn with_return_sequences(self, on: bool) -> $cell {
                self.return_sequences(on)
            }

            /// Reads the sequence from its end (Keras' `go_backwards`).
            pub fn go_backwards(mut self, on: bool) -> $cell {
                self.opts.go_backwards = on;
                self
            }

            #[doc(hidden)]
            #[deprecated(note = "renamed `go_backwards`: layer options are builders named as the option")]
            pub fn with_go_backwards(self, on: bool) -> $cell {
                self.go_backwards(on)
            }

            /// Masked steps output zeros instead of the previous output.
            pub fn zero_output_for_mask(mut self, on: bool) -> $cell {
                self.opts.zero_output_for_mask = on;
                self
            }

            #[doc(hidden)]
            #[deprecated(note = "renamed `zero_output_for_mask`: layer options are builders named as the option")]
            pub fn with_zero_output_for_mask(self, on: bool) -> $cell {
                self.zero_output_for_mask(on)
            }

            /// The mixed-precision policy (default the global one when the
            /// layer was made): weights in its variable dtype, input, states
            /// and outputs in its compute dtype. Call before the first call.
            pub fn dtype_policy(mut self, policy: Policy) -> $cell {
                self.policy = Some(policy);
                self
            }

            #[doc(hidden)]
            #[deprecated(note = "renamed `dtype_policy`: layer options are builders named as the option")]
            pub fn with_dtype_policy(self, policy: Policy) -> $cell {
                self.dtype_policy(policy)
            }
        }

        /// The outputs of [`Recurrent::run`] without initial state or mask;
        /// the mode is ignored (no recurrent dropout).
        impl Layer for $cell {
            fn call(&self, x: &Tensor, _mode: &Mode) -> Result<Tensor> {
                Ok(self.run(x, None, None)?.outputs)
            }
        }

        /// `kernel`, `recurrent_kernel`, `bias` (Keras' names).
        impl Module for $cell {
            fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
                let f = &mut super::util::noting(LayerKind::$cell, f);
                self.kernel.visit_variables(&join(prefix, "kernel"), f);
                self.recurrent_kernel
                    .visit_variables(&join(prefix, "recurrent_kernel"), f);
                self.bias.visit_variables(&join(prefix, "bias"), f);
            }
        }
    };
}

cell_layer_api!(Lstm);
cell_layer_api!(Gru);

/// Keras' `LSTM`: `kernel` `[features, 4 * units]`, `recurrent_kernel`
/// `[units, 4 * units]`, `bias` `[4 * units]`, gates in the order i, f,
/// c, o; `c = f * c + i * tanh(c~)`, `h = o * tanh(c)`. Defaults: one
/// output (`return_sequences` off), forward, biases on with
/// `unit_forget_bias`.
#[derive(Debug)]
pub struct Lstm {
    units: i64,
    opts: Options,
    /// The input kernel, Glorot-uniform, made on the first call.
    pub kernel: Param,
    /// The recurrent kernel, orthogonal.
    pub recurrent_kernel: Param,
    /// The bias, absent without biases.
    pub bias: Option<Param>,
    use_bias: bool,
    unit_forget_bias: bool,
    key: Tensor,
    policy: Option<Policy>,
}

impl Lstm {
    /// An LSTM of `units` whose weights are drawn from `key` on the first
    /// call.
    pub fn new(key: &Tensor, units: i64) -> Result<Lstm> {
        check_units("Lstm", units)?;
        Ok(Lstm {
            units,
            opts: Options::default(),
            kernel: Param::lazy(Initializer::GlorotUniform, &fold(key, 0)?),
            recurrent_kernel: Param::lazy(Initializer::Orthogonal(1.0), &fold(key, 1)?),
            bias: Some(Param::lazy(forget_bias_init(), key)),
            use_bias: true,
            unit_forget_bias: true,
            key: key.clone(),
            policy: current_policy(),
        })
    }

    /// An LSTM with these weights (`kernel [features, 4u]`,
    /// `recurrent_kernel [u, 4u]`, `bias [4u]` of the kernel's dtype;
    /// gates i, f, c, o), nothing drawn.
    pub fn from_weights(
        kernel: &Tensor,
        recurrent_kernel: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Lstm> {
        let (features, units) = given_dims("Lstm", kernel, recurrent_kernel, 4)?;
        let mut lstm = Lstm::new(&crate::random::key(0)?, units)?;
        let (k, r, b) = given_params("Lstm", kernel, recurrent_kernel, bias, &[4 * units])?;
        (lstm.kernel, lstm.recurrent_kernel, lstm.bias) = (k, r, b);
        lstm.use_bias = bias.is_some();
        lstm.build(features, kernel.dtype())?;
        Ok(lstm)
    }

    /// With or without a bias (Keras' `use_bias`, default true). Call
    /// before the first call.
    pub fn use_bias(mut self, on: bool) -> Lstm {
        self.use_bias = on;
        self.bias = self.bias_param();
        self
    }

    /// The forget gate's bias starts at 1 (Keras' `unit_forget_bias`,
    /// default true) or 0. Call before the first call.
    pub fn unit_forget_bias(mut self, on: bool) -> Lstm {
        self.unit_forget_bias = on;
        self.bias = self.bias_param();
        self
    }

    #[doc(hidden)]
    #[deprecated(
        note = "use `use_bias(..)` and `unit_forget_bias(..)`: layer options are builders \
                         named as the option"
    )]
    pub fn with_bias(self, use_bias: bool, unit_forget_bias: bool) -> Lstm {
        self.use_bias(use_bias).unit_forget_bias(unit_forget_bias)
    }

    fn bias_param(&self) -> Option<Param> {
        let init = match self.unit_forget_bias {
            true => forget_bias_init(),
            false => Initializer::Zeros,
        };
        self.use_bias.then(|| Param::lazy(init, &self.key))
    }

    /// The dims of `kernel`, `recurrent_kernel` and `bias` for inputs of
    /// `features`: what a call reads and `build` makes.
    fn weight_dims(&self, features: i64) -> [Vec<i64>; 3] {
        let u = self.units;
        [vec![features, 4 * u], vec![u, 4 * u], vec![4 * u]]
    }
}

impl Recurrent for Lstm {
    fn units(&self) -> i64 {
        self.units
    }
    fn state_count(&self) -> usize {
        2
    }
    fn run(
        &self,
        x: &Tensor,
        initial_state: Option<&[Tensor]>,
        mask: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        const OP: &str = "Lstm";
        let [b, t, f] = sequence_dims(OP, x)?;
        let built = self.kernel.variable().map(|k| k.dims()[0]);
        check_built(OP, "input features (axis -1)", built, f, x)?;
        let inputs = Inputs::new(x, initial_state, self.policy.as_ref())?;
        let x = &inputs.x;
        let (u, dtype) = (self.units, x.dtype());
        let [kernel_dims, recurrent_dims, bias_dims] = self.weight_dims(f);
        let kernel = inputs.read(&self.kernel, &kernel_dims)?;
        let recurrent = inputs.read(&self.recurrent_kernel, &recurrent_dims)?;
        let bias = self
            .bias
            .as_ref()
            .map(|p| inputs.read(p, &bias_dims))
            .transpose()?;
        let projected = project_inputs(x, &kernel, bias.as_ref())?;
        let zeros = zero_states(&projected, u)?;
        let states = initial_states(OP, inputs.states.as_deref(), 2, &zeros.0, dtype)?;
        let mask = mask.map(|m| time_major_mask(OP, m, b, t)).transpose()?;
        let step = |xw: &Tensor, s: &[Tensor]| -> Result<Vec<Tensor>> {
            let z = xw.add(&s[0].matmul(&recurrent)?)?;
            let [i, f, g, o]: [Tensor; 4] = z.split(4, 1)?.try_into().expect("four gates");
            let c = f
                .sigmoid()?
                .mul(&s[1])?
                .add(&i.sigmoid()?.mul(&g.tanh()?)?)?;
            let h = o.sigmoid()?.mul(&c.tanh()?)?;
            Ok(vec![h, c])
        };
        scan(&projected, states, mask, zeros, self.opts, &step)
    }
    cell_options!("Lstm");
}

/// `(features, units)` of a recurrent layer's given kernels, `gates`
/// blocks wide: `kernel [features, gates * u]`, `recurrent_kernel [u,
/// gates * u]` of one dtype.
fn given_dims(
    layer: &str,
    kernel: &Tensor,
    recurrent_kernel: &Tensor,
    gates: i64,
) -> Result<(i64, i64)> {
    let layout = format!("[features, {gates} * units]");
    check_rank(layer, kernel, 2, &layout)?;
    check_rank(
        layer,
        recurrent_kernel,
        2,
        &format!("[units, {gates} * units]"),
    )?;
    let units = recurrent_kernel.dims()[0];
    let wide = [gates * units];
    check_given(
        layer,
        "recurrent kernel",
        recurrent_kernel,
        &[units, wide[0]],
        kernel.dtype(),
    )?;
    check_given(
        layer,
        "kernel",
        kernel,
        &[kernel.dims()[0], wide[0]],
        kernel.dtype(),
    )?;
    Ok((kernel.dims()[0], units))
}

/// The weights of a recurrent layer's `from_weights`, as parameters
/// holding the given values; the bias checked against `bias_dims`.
fn given_params(
    layer: &str,
    kernel: &Tensor,
    recurrent_kernel: &Tensor,
    bias: Option<&Tensor>,
    bias_dims: &[i64],
) -> Result<(Param, Param, Option<Param>)> {
    if let Some(b) = bias {
        check_given(layer, "bias", b, bias_dims, kernel.dtype())?;
    }
    let key = crate::random::key(0)?;
    let given = |t: &Tensor| Param::lazy(Initializer::Value(t.clone()), &key);
    Ok((given(kernel), given(recurrent_kernel), bias.map(given)))
}

/// Keras' `GRU`: `kernel` `[features, 3 * units]`, `recurrent_kernel`
/// `[units, 3 * units]`, gates z, r, h. With `reset_after` (Keras'
/// default since 2.0, and cuDNN's form) the reset gate multiplies the
/// recurrent candidate after its matmul, `h~ = tanh(x W_h + b_h + r *
/// (h U_h + c_h))`, and `bias` is `[2, 3 * units]` (input bias, recurrent
/// bias); without it, `h~ = tanh(x W_h + b_h + (r * h) U_h)` and `bias`
/// is `[3 * units]`. `h = z * h_prev + (1 - z) * h~`.
#[derive(Debug)]
pub struct Gru {
    units: i64,
    reset_after: bool,
    opts: Options,
    /// The input kernel, Glorot-uniform, made on the first call.
    pub kernel: Param,
    /// The recurrent kernel, orthogonal.
    pub recurrent_kernel: Param,
    /// The bias (zeros), absent without biases.
    pub bias: Option<Param>,
    key: Tensor,
    policy: Option<Policy>,
}

impl Gru {
    /// A GRU of `units` (`reset_after`, biases on) whose weights are
    /// drawn from `key` on the first call.
    pub fn new(key: &Tensor, units: i64) -> Result<Gru> {
        check_units("Gru", units)?;
        Ok(Gru {
            units,
            reset_after: true,
            opts: Options::default(),
            kernel: Param::lazy(Initializer::GlorotUniform, &fold(key, 0)?),
            recurrent_kernel: Param::lazy(Initializer::Orthogonal(1.0), &fold(key, 1)?),
            bias: Some(Param::lazy(Initializer::Zeros, key)),
            key: key.clone(),
            policy: current_policy(),
        })
    }

    /// Keras' `reset_after` (default true). Call before the first call.
    pub fn reset_after(mut self, on: bool) -> Gru {
        self.reset_after = on;
        self
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `reset_after`: layer options are builders named as the option")]
    pub fn with_reset_after(self, on: bool) -> Gru {
        self.reset_after(on)
    }

    /// A GRU with these weights (`kernel [features, 3u]`,
    /// `recurrent_kernel [u, 3u]`, gates z, r, h; `bias [2, 3u]` with
    /// `reset_after`, `[3u]` without, which the bias's shape decides),
    /// nothing drawn.
    pub fn from_weights(
        kernel: &Tensor,
        recurrent_kernel: &Tensor,
        bias: Option<&Tensor>,
    ) -> Result<Gru> {
        let (features, units) = given_dims("Gru", kernel, recurrent_kernel, 3)?;
        let reset_after = bias.is_none_or(|b| b.dims().len() == 2);
        let bias_dims = match reset_after {
            true => vec![2, 3 * units],
            false => vec![3 * units],
        };
        let mut gru = Gru::new(&crate::random::key(0)?, units)?.reset_after(reset_after);
        let (k, r, b) = given_params("Gru", kernel, recurrent_kernel, bias, &bias_dims)?;
        (gru.kernel, gru.recurrent_kernel, gru.bias) = (k, r, b);
        gru.build(features, kernel.dtype())?;
        Ok(gru)
    }

    /// With or without a bias (Keras' `use_bias`, default true). Call
    /// before the first call.
    pub fn use_bias(mut self, on: bool) -> Gru {
        self.bias = on.then(|| Param::lazy(Initializer::Zeros, &self.key));
        self
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `use_bias`: layer options are builders named as the option")]
    pub fn with_bias(self, use_bias: bool) -> Gru {
        self.use_bias(use_bias)
    }

    /// The dims of `kernel`, `recurrent_kernel` and `bias` (two rows, input
    /// and recurrent, with `reset_after`) for inputs of `features`.
    fn weight_dims(&self, features: i64) -> [Vec<i64>; 3] {
        let u = self.units;
        let bias = match self.reset_after {
            true => vec![2, 3 * u],
            false => vec![3 * u],
        };
        [vec![features, 3 * u], vec![u, 3 * u], bias]
    }
}

impl Recurrent for Gru {
    fn units(&self) -> i64 {
        self.units
    }
    fn state_count(&self) -> usize {
        1
    }
    fn run(
        &self,
        x: &Tensor,
        initial_state: Option<&[Tensor]>,
        mask: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        const OP: &str = "Gru";
        let [b, t, f] = sequence_dims(OP, x)?;
        let built = self.kernel.variable().map(|k| k.dims()[0]);
        check_built(OP, "input features (axis -1)", built, f, x)?;
        let inputs = Inputs::new(x, initial_state, self.policy.as_ref())?;
        let x = &inputs.x;
        let (u, dtype) = (self.units, x.dtype());
        let [kernel_dims, recurrent_dims, bias_dims] = self.weight_dims(f);
        let kernel = inputs.read(&self.kernel, &kernel_dims)?;
        let recurrent = inputs.read(&self.recurrent_kernel, &recurrent_dims)?;
        let (input_bias, recurrent_bias) = match (&self.bias, self.reset_after) {
            (None, _) => (None, None),
            (Some(p), false) => (Some(inputs.read(p, &bias_dims)?), None),
            (Some(p), true) => {
                let both = inputs.read(p, &bias_dims)?;
                let [i, r]: [Tensor; 2] = both.split(2, 0)?.try_into().expect("two rows");
                (Some(i.reshape(&[3 * u])?), Some(r.reshape(&[3 * u])?))
            }
        };
        let projected = project_inputs(x, &kernel, input_bias.as_ref())?;
        let zeros = zero_states(&projected, u)?;
        let states = initial_states(OP, inputs.states.as_deref(), 1, &zeros.0, dtype)?;
        let mask = mask.map(|m| time_major_mask(OP, m, b, t)).transpose()?;
        let gates = |x: &Tensor| -> Result<[Tensor; 3]> {
            Ok(x.split(3, 1)?.try_into().expect("three gates"))
        };
        // Without reset_after, the candidate's recurrent matmul waits for
        // the reset gate: the kernel's z, r columns and h columns apart.
        let (recurrent_zr, recurrent_h) = if self.reset_after {
            (None, None)
        } else {
            (
                Some(recurrent.slice(&[0, 0], &[u, 2 * u])?),
                Some(recurrent.slice(&[0, 2 * u], &[u, u])?),
            )
        };
        let step = |xw: &Tensor, s: &[Tensor]| -> Result<Vec<Tensor>> {
            let h_prev = &s[0];
            let [xz, xr, xh] = gates(xw)?;
            let (z, candidate) = match (&recurrent_zr, &recurrent_h) {
                (Some(zr), Some(uh)) => {
                    let [rz, rr]: [Tensor; 2] = h_prev
                        .matmul(zr)?
                        .split(2, 1)?
                        .try_into()
                        .expect("two gates");
                    let z = xz.add(&rz)?.sigmoid()?;
                    let r = xr.add(&rr)?.sigmoid()?;
                    let candidate = xh.add(&r.mul(h_prev)?.matmul(uh)?)?.tanh()?;
                    (z, candidate)
                }
                _ => {
                    let inner = h_prev.matmul(&recurrent)?;
                    let inner = match &recurrent_bias {
                        Some(rb) => inner.add(rb)?,
                        None => inner,
                    };
                    let [rz, rr, rh] = gates(&inner)?;
                    let z = xz.add(&rz)?.sigmoid()?;
                    let r = xr.add(&rr)?.sigmoid()?;
                    let candidate = xh.add(&r.mul(&rh)?)?.tanh()?;
                    (z, candidate)
                }
            };
            // z * h_prev + (1 - z) * candidate, as candidate + z * (h_prev - candidate).
            let h = candidate.add(&z.mul(&h_prev.sub(&candidate)?)?)?;
            Ok(vec![h])
        };
        scan(&projected, states, mask, zeros, self.opts, &step)
    }
    cell_options!("Gru");
}
