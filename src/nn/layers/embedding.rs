//! Layer: [`Embedding`] (Keras' `Embedding`, PyTorch's `nn.Embedding`),
//! over `Tensor::gather`, `Tensor::dot_general` and [`Param`]. Imports
//! `initializers` for its option.

use super::util::{check_positive, read_as, subkey};
use super::{Layer, Mode, Param};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::tensor::Tensor;
use crate::variable::Variable;

/// A lookup table of `vocab` vectors of `dim` values: integer ids `[...]`
/// give `[..., dim]`, each id its row of `embeddings` (`[vocab, dim]`).
///
/// The initializer is Keras' default, uniform in `[-0.05, 0.05)`
/// (PyTorch draws from a standard normal, GPT-2 from a normal of standard
/// deviation 0.02: give `Initializer::Normal(0.02)`), float32. Ids outside
/// `0..vocab` read the nearest row (XLA clamps gathers), where Keras and
/// PyTorch raise on CPU.
///
/// [`Embedding::attend`] is the tied output projection (`x @
/// embeddings^T`), as language models that share their input and output
/// embeddings use.
///
/// ```
/// use xlafn::nn::layers::{Embedding, Layer};
/// use xlafn::prelude::*;
/// let key = xlafn::random::key(0)?;
/// let emb = Embedding::new(&key, 10, 4)?;
/// let ids = Tensor::from_vec(vec![1i32, 2, 3, 9, 0, 0], &[2, 3])?;
/// let x = emb.forward(&ids)?;
/// assert_eq!(x.dims(), vec![2, 3, 4]);
/// let logits = emb.attend(&x)?;
/// assert_eq!(logits.dims(), vec![2, 3, 10]);
/// assert!(logits.to_vec::<f32>()?.iter().all(|v| v.abs() < 0.01));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Debug)]
pub struct Embedding {
    vocab: i64,
    dim: i64,
    dtype: DType,
    embeddings: Param,
}

impl Embedding {
    /// A table of `vocab` rows of `dim` values, float32, made now from
    /// Keras' `RandomUniform(-0.05, 0.05)` drawn with `key`.
    pub fn new(key: &Tensor, vocab: i64, dim: i64) -> Result<Embedding> {
        Embedding::with_initializer(
            key,
            vocab,
            dim,
            Initializer::Uniform(-0.05, 0.05),
            DType::F32,
        )
    }

    /// A table drawn from `init`, of `dtype`.
    pub fn with_initializer(
        key: &Tensor,
        vocab: i64,
        dim: i64,
        init: Initializer,
        dtype: DType,
    ) -> Result<Embedding> {
        check_positive("Embedding", "vocab and dim", &[vocab, dim])?;
        let embeddings = Param::new(init, &subkey(key, 0)?, &[vocab, dim], dtype)?;
        Ok(Embedding {
            vocab,
            dim,
            dtype,
            embeddings,
        })
    }

    /// The table `[vocab, dim]`.
    pub fn embeddings(&self) -> Result<&Variable> {
        self.embeddings.get(&[self.vocab, self.dim], self.dtype)
    }

    /// The number of rows.
    pub fn vocab(&self) -> i64 {
        self.vocab
    }

    /// The size of each row.
    pub fn dim(&self) -> i64 {
        self.dim
    }

    /// The tied output projection: `x @ embeddings^T` over `x`'s last axis
    /// (`[..., dim]` to `[..., vocab]`), a logit per row of the table
    /// (Flax's `Embed.attend`). The table is cast to `x`'s dtype.
    pub fn attend(&self, x: &Tensor) -> Result<Tensor> {
        let got = x.shape().dims().and_then(|d| d.last().copied());
        if !x.dtype().is_float() || got != Some(Some(self.dim)) {
            return Err(Error::invalid(
                "Embedding.attend",
                format!(
                    "needs a floating-point input of {} features (axis -1), got {}",
                    self.dim,
                    x.tensor_type()
                ),
            ));
        }
        let table = read_as(
            &self.embeddings,
            &[self.vocab, self.dim],
            self.dtype,
            x.dtype(),
        )?;
        x.dot_general(&table, &[-1], &[1], &[], &[])
    }

    /// The same as [`Embedding::attend`] (PyTorch's tied `lm_head`).
    pub fn as_logits(&self, x: &Tensor) -> Result<Tensor> {
        self.attend(x)
    }
}

impl Module for Embedding {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.embeddings
            .visit_variables(&join(prefix, "embeddings"), f);
    }
}

impl Layer for Embedding {
    fn call(&self, ids: &Tensor, _: &Mode) -> Result<Tensor> {
        if !ids.dtype().is_int() {
            return Err(Error::invalid(
                "Embedding",
                format!("needs integer ids, got {}", ids.tensor_type()),
            ));
        }
        let table = self.embeddings.read(&[self.vocab, self.dim], self.dtype)?;
        table.gather(ids, 0)
    }
}
