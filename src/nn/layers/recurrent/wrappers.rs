//! Layer: nn::layers (recurrent). Imports `tensor` ops, `module`,
//! `variable`, `dtype`, `error`, the folder's [`Layer`] and [`Mode`], and
//! the parent's [`Recurrent`] trait: the layers made of other recurrent
//! layers, [`Stacked`] (PyTorch's `num_layers`) and [`Bidirectional`]
//! (Keras' `merge_mode="concat"`).

use super::{Recurrent, RnnOutput};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::{Module, join};
use crate::nn::layers::{Layer, Mode};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// Recurrent layers in sequence, each reading the previous one's output
/// sequence (PyTorch's `num_layers`; Keras' stacked layers with
/// `return_sequences=True`). Every layer but the last returns sequences;
/// the last returns what it was made to. The mask goes to every layer as
/// given (as Keras propagates it), also past a `go_backwards` layer,
/// whose sequence is reversed. Variables are `layers.{i}.…`.
#[derive(Debug)]
pub struct Stacked<R> {
    /// The layers, first to last.
    pub layers: Vec<R>,
}

impl<R: Recurrent> Stacked<R> {
    /// A stack of `layers` (at least one).
    pub fn new(mut layers: Vec<R>) -> Result<Stacked<R>> {
        let Some((_, inner)) = layers.split_last_mut() else {
            return Err(Error::invalid("Stacked", "needs at least one layer"));
        };
        for layer in inner {
            layer.set_return_sequences(true);
        }
        Ok(Stacked { layers })
    }

    /// Makes every layer's weights now ([`Recurrent::build`]): the first
    /// for inputs of `features`, each next one for the previous one's
    /// units.
    pub fn build(&self, features: i64, dtype: DType) -> Result<()> {
        let mut features = features;
        for layer in &self.layers {
            layer.build(features, dtype)?;
            features = layer.units();
        }
        Ok(())
    }

    /// Whether the last layer returns sequences.
    pub fn return_sequences(mut self, on: bool) -> Stacked<R> {
        if let Some(last) = self.layers.last_mut() {
            last.set_return_sequences(on);
        }
        self
    }

    #[doc(hidden)]
    #[deprecated(
        note = "renamed `return_sequences`: layer options are builders named as the option"
    )]
    pub fn with_return_sequences(self, on: bool) -> Stacked<R> {
        self.return_sequences(on)
    }

    /// Runs the stack; `initial_state` holds every layer's states in
    /// layer order, and so do the returned states.
    pub fn run(
        &self,
        x: &Tensor,
        initial_state: Option<&[Tensor]>,
        mask: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        let want: usize = self.layers.iter().map(Recurrent::state_count).sum();
        if let Some(given) = initial_state
            && given.len() != want
        {
            return Err(Error::invalid(
                "Stacked",
                format!(
                    "needs {want} initial states (every layer's), got {}",
                    given.len()
                ),
            ));
        }
        let mut input = x.clone();
        let mut states = Vec::with_capacity(want);
        let mut at = 0;
        for layer in &self.layers {
            let n = layer.state_count();
            let init = initial_state.map(|s| &s[at..at + n]);
            at += n;
            let out = layer.run(&input, init, mask)?;
            states.extend(out.states);
            input = out.outputs;
        }
        Ok(RnnOutput {
            outputs: input,
            states,
        })
    }
}

/// The outputs of [`Stacked::run`] without initial state or mask.
impl<R: Recurrent> Layer for Stacked<R> {
    fn call(&self, x: &Tensor, _mode: &Mode) -> Result<Tensor> {
        Ok(self.run(x, None, None)?.outputs)
    }
}

impl<R: Module> Module for Stacked<R> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.layers.visit_variables(&join(prefix, "layers"), f);
    }
}

/// Keras' `Bidirectional` with `merge_mode="concat"`: a forward layer
/// and a backward one (made to read the other way), their outputs
/// concatenated on the feature axis, forward first. Returned sequences
/// are in the input's time order (the backward one reversed back);
/// masked steps output zeros when sequences are returned (Keras sets
/// `zero_output_for_mask` so). Variables are `forward.…` and
/// `backward.…`.
#[derive(Debug)]
pub struct Bidirectional<R> {
    /// The layer reading the sequence in the forward layer's direction.
    pub forward: R,
    /// The layer reading it the other way.
    pub backward: R,
}

impl<R: Recurrent> Bidirectional<R> {
    /// Pairs `forward` with `backward`, which is set to read the other
    /// way and to return what `forward` returns.
    pub fn new(mut forward: R, mut backward: R) -> Bidirectional<R> {
        let sequences = forward.return_sequences();
        backward.set_go_backwards(!forward.go_backwards());
        backward.set_return_sequences(sequences);
        forward.set_zero_output_for_mask(sequences);
        backward.set_zero_output_for_mask(sequences);
        Bidirectional { forward, backward }
    }

    /// Makes both directions' weights now, for inputs of `features`
    /// ([`Recurrent::build`]).
    pub fn build(&self, features: i64, dtype: DType) -> Result<()> {
        self.forward.build(features, dtype)?;
        self.backward.build(features, dtype)
    }

    /// Whether both directions return sequences.
    pub fn return_sequences(mut self, on: bool) -> Bidirectional<R> {
        for layer in [&mut self.forward, &mut self.backward] {
            layer.set_return_sequences(on);
            layer.set_zero_output_for_mask(on);
        }
        self
    }

    #[doc(hidden)]
    #[deprecated(
        note = "renamed `return_sequences`: layer options are builders named as the option"
    )]
    pub fn with_return_sequences(self, on: bool) -> Bidirectional<R> {
        self.return_sequences(on)
    }

    /// Runs both directions; `initial_state` is the forward layer's states
    /// then the backward one's, and so are the returned states.
    pub fn run(
        &self,
        x: &Tensor,
        initial_state: Option<&[Tensor]>,
        mask: Option<&Tensor>,
    ) -> Result<RnnOutput> {
        let nf = self.forward.state_count();
        let want = nf + self.backward.state_count();
        if let Some(given) = initial_state
            && given.len() != want
        {
            return Err(Error::invalid(
                "Bidirectional",
                format!(
                    "needs {want} initial states (forward then backward), got {}",
                    given.len()
                ),
            ));
        }
        let fwd = self.forward.run(x, initial_state.map(|s| &s[..nf]), mask)?;
        let bwd = self
            .backward
            .run(x, initial_state.map(|s| &s[nf..]), mask)?;
        let back = if self.forward.return_sequences() {
            bwd.outputs.reverse(&[1])?
        } else {
            bwd.outputs
        };
        let outputs = Tensor::concat(&[fwd.outputs, back], -1)?;
        let mut states = fwd.states;
        states.extend(bwd.states);
        Ok(RnnOutput { outputs, states })
    }
}

/// The outputs of [`Bidirectional::run`] without initial state or mask.
impl<R: Recurrent> Layer for Bidirectional<R> {
    fn call(&self, x: &Tensor, _mode: &Mode) -> Result<Tensor> {
        Ok(self.run(x, None, None)?.outputs)
    }
}

impl<R: Module> Module for Bidirectional<R> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.forward.visit_variables(&join(prefix, "forward"), f);
        self.backward.visit_variables(&join(prefix, "backward"), f);
    }
}
