//! Layer: [`Embedding`] (Keras' `Embedding`, PyTorch's `nn.Embedding`),
//! over `Tensor::gather`, `Tensor::dot_general` and [`Param`]. Imports
//! `initializers` for its option.

use super::util::{autocast, check_positive, read_as, subkey, variable_dtype};
use super::{Layer, Mode, Param};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::nn::mixed_precision::{Policy, current_policy};
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

/// A lookup table of `vocab` vectors of `dim` values: integer ids `[...]`
/// give `[..., dim]`, each id its row of `embeddings` (`[vocab, dim]`).
///
/// The initializer is Keras' default, uniform in `[-0.05, 0.05)`
/// (PyTorch draws from a standard normal, GPT-2 from a normal of standard
/// deviation 0.02: give `Initializer::Normal(0.02)`), float32. Ids outside
/// `0..vocab` read the nearest row (XLA clamps gathers), where Keras and
/// PyTorch raise on CPU.
///
/// Under a mixed-precision [`Policy`] (the global one when the layer is
/// made, or [`Embedding::dtype_policy`]) the table is kept in the
/// variable dtype and the looked-up rows are cast to the compute dtype
/// (Keras' `Embedding` casts its output so), so the layers after it
/// compute in half precision while the table's gradient is float32.
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
    policy: Option<Policy>,
}

impl Embedding {
    /// A table of `vocab` rows of `dim` values, float32 (or the global
    /// policy's variable dtype), made now from Keras'
    /// `RandomUniform(-0.05, 0.05)` drawn with `key`.
    pub fn new(key: &Tensor, vocab: i64, dim: i64) -> Result<Embedding> {
        let dtype = variable_dtype(current_policy().as_ref(), DType::F32);
        Embedding::with_initializer(key, vocab, dim, Initializer::Uniform(-0.05, 0.05), dtype)
    }

    /// A layer with this table (`[vocab, dim]`), nothing drawn.
    pub fn from_weights(embeddings: &Tensor) -> Result<Embedding> {
        super::util::check_rank("Embedding", embeddings, 2, "[vocab, dim]")?;
        let [vocab, dim] = [embeddings.dims()[0], embeddings.dims()[1]];
        let init = Initializer::Value(embeddings.clone());
        let key = crate::random::key(0)?;
        Embedding::with_initializer(&key, vocab, dim, init, embeddings.dtype())
    }

    /// A table drawn from `init`, of `dtype` (which a global policy does
    /// not change; its compute dtype still applies).
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
            policy: current_policy(),
        })
    }

    /// The mixed-precision policy (default the global one when the layer
    /// was made): the table in its variable dtype (made again from the
    /// same key when that differs), the rows returned in its compute
    /// dtype.
    pub fn dtype_policy(mut self, policy: Policy) -> Result<Embedding> {
        self.policy = Some(policy);
        if self.dtype != policy.variable_dtype() {
            self.dtype = policy.variable_dtype();
            let p = &self.embeddings;
            let fresh = Param::lazy(p.init.clone(), &p.key);
            fresh.get(&[self.vocab, self.dim], self.dtype)?;
            self.embeddings = fresh;
        }
        Ok(self)
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
    /// (Flax's `Embed.attend`). The table is cast to `x`'s dtype (under a
    /// policy, `x` to the compute dtype first).
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
        let x = &autocast(x, self.policy.as_ref())?;
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
        let f = &mut super::util::noting(LayerKind::Embedding, f);
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
        // The rows, then the cast: cheaper than casting the whole table.
        autocast(&table.gather(ids, 0)?, self.policy.as_ref())
    }
}
