//! Layer: nn::layers (multi-head attention). Imports `tensor` ops
//! (`matmul`, `softmax`, `dynamic_update_slice`, `iota`), `random`
//! (fold-in keys, dropout), `initializers`, `function::Output` (so a
//! [`KvCache`] can be loop state) and this folder's [`Param`], [`Layer`]
//! and [`Mode`].
//!
//! [`MultiHeadAttention`] is Keras' `MultiHeadAttention` (PyTorch's
//! `nn.MultiheadAttention`, batch first), with grouped-query attention
//! (`num_kv_heads` key/value heads shared by groups of query heads; 1 is
//! multi-query attention) and a key-value cache for incremental decoding
//! inside one compiled function.
//!
//! Weights keep Keras' `EinsumDense` layouts, so a Keras checkpoint maps
//! one to one: `query.kernel` `[query_features, heads, key_dim]`,
//! `key.kernel` `[key_features, kv_heads, key_dim]`, `value.kernel`
//! `[value_features, kv_heads, value_dim]`, `output.kernel` `[heads,
//! value_dim, output_dim]`, and biases of the kernels' trailing shapes
//! (`query.bias` `[heads, key_dim]`, `output.bias` `[output_dim]`).
//! Kernels start Glorot-uniform with Keras' fans for those shapes (the
//! leading axes count as the receptive field), biases zero.
//!
//! Query head `h` reads key/value head `h / (heads / kv_heads)`: each kv
//! head serves a run of consecutive query heads, as PyTorch's
//! `repeat_interleave` and Llama's `repeat_kv` arrange them. Scores are
//! `q k^T / sqrt(key_dim)`; for f16 and bf16 inputs the masking and the
//! softmax run in f32 and the probabilities are cast back.
//!
//! Weights are made in the inputs' dtype on the first call. Under a
//! mixed-precision [`Policy`] (the global one when the layer is made, or
//! [`MultiHeadAttention::dtype_policy`]) they are made in the policy's
//! variable dtype instead and cast to its compute dtype where used, the
//! inputs are cast to the compute dtype, and a [`KvCache`] holds it.
//!
//! ```
//! use xlafn::module::Module;
//! use xlafn::nn::layers::{AttentionOptions, Mode, MultiHeadAttention};
//! use xlafn::prelude::*;
//! let mha = MultiHeadAttention::new(&xlafn::random::key(0)?, 4, 8)?.num_kv_heads(2)?;
//! let x = Tensor::ones(&[2, 5, 16], DType::F32);
//! let y = mha.call_qkv(&x, &x, &x, &AttentionOptions::causal(), &Mode::inference())?;
//! assert_eq!(y.dims(), vec![2, 5, 16]);
//! assert_eq!(mha.named_variables()[0].0, "query.kernel");
//! # Ok::<(), xlafn::Error>(())
//! ```

use super::util::{autocast, read_as};
use super::{Layer, Mode, Param};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::function::Output;
use crate::initializers::Initializer;
use crate::module::{Module, join};
use crate::nn::mixed_precision::{Policy, current_policy};
use crate::random;
use crate::tensor::Tensor;
use crate::variable::{LayerKind, Variable};

mod cache;
pub use cache::{CrossKvCache, KvCache};

const OP: &str = "MultiHeadAttention";

fn invalid(message: impl Into<String>) -> Error {
    Error::invalid(OP, message)
}

/// One projection: a kernel and an optional bias (Keras' `EinsumDense`).
#[derive(Debug)]
pub struct Projection {
    /// The kernel, made on the first call from the input's feature size.
    pub kernel: Param,
    /// The bias, absent when the layer was made without biases.
    pub bias: Option<Param>,
}

impl Projection {
    /// Errors, naming the layer and the input, when the kernel was built
    /// for inputs of another feature size than `features`.
    fn check_features(&self, what: &str, features: i64) -> Result<()> {
        match self.kernel.variable().map(|k| k.dims()[0]) {
            Some(built) if built != features => Err(Error::invalid(
                "MultiHeadAttention",
                format!("built for {what} inputs of {built} features, called with {features}"),
            )),
            _ => Ok(()),
        }
    }

    fn new(key: &Tensor, index: u64, use_bias: bool) -> Result<Projection> {
        let k = random::fold_in(key, &Tensor::try_scalar(index)?)?;
        Ok(Projection {
            kernel: Param::lazy(Initializer::GlorotUniform, &k),
            bias: use_bias.then(|| Param::lazy(Initializer::Zeros, &k)),
        })
    }

    /// `x` `[b, t, in..]` contracted with the kernel `[in.., out..]`
    /// (`kernel_dims`, its first `n_in` axes the input's) plus the bias
    /// `[out..]`, giving `[b, t, out..]`.
    ///
    /// Written as a matrix product of `x` as `[b * t, in]` by the kernel
    /// as `[in, out]` between free reshapes (what `EinsumDense`'s einsum
    /// means), as in [`Linear`](super::Linear): the kernel gradient is
    /// then one plain product in the kernel's layout, where an einsum's
    /// comes out as `[out.., in..]` and is transposed, and contracts the
    /// `b` and `t` axes at once, which XLA prepares with another
    /// transpose.
    ///
    /// Weights made here take `policy`'s variable dtype (else `x`'s);
    /// weights already made in another (float32 ones from
    /// [`MultiHeadAttention::build`] called on bfloat16 inputs) keep
    /// theirs. Both are used in `x`'s.
    fn apply(
        &self,
        x: &Tensor,
        kernel_dims: &[i64],
        n_in: usize,
        policy: Option<&Policy>,
    ) -> Result<Tensor> {
        let dtype = x.dtype();
        let stored = |p: &Param| {
            p.variable().map_or(
                policy.map_or(dtype, |p| p.variable_dtype()),
                Variable::dtype,
            )
        };
        let dims = x.dims();
        let size_in: i64 = kernel_dims[..n_in].iter().product();
        let size_out: i64 = kernel_dims[n_in..].iter().product();
        let kernel = read_as(&self.kernel, kernel_dims, stored(&self.kernel), dtype)?
            .reshape(&[size_in, size_out])?;
        let mut out = dims[..2].to_vec();
        out.extend(&kernel_dims[n_in..]);
        // The batch may be unknown (-1, a trace for any batch): the
        // reshapes then leave it to the element count.
        let rows = if dims[0] < 0 { -1 } else { dims[0] * dims[1] };
        let y = x
            .reshape(&[rows, size_in])?
            .matmul(&kernel)?
            .reshape(&out)?;
        match &self.bias {
            Some(b) => y.add(&read_as(b, &kernel_dims[n_in..], stored(b), dtype)?),
            None => Ok(y),
        }
    }
}

impl Module for Projection {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.kernel.visit_variables(&join(prefix, "kernel"), f);
        self.bias.visit_variables(&join(prefix, "bias"), f);
    }
}

/// Which positions each query may attend to, for
/// [`MultiHeadAttention::call_qkv`]. Every mask says `true` (or nonzero)
/// for "attend"; they combine by logical and.
#[derive(Clone, Debug, Default)]
pub struct AttentionOptions {
    /// Query `i` attends to keys `j <= i` (Keras' `use_causal_mask`,
    /// PyTorch's `is_causal`): the triangle is aligned at the top left,
    /// as both do when the query and key lengths differ.
    pub causal: bool,
    /// `[batch, kv_len]`, bool or integer: the keys that are real tokens
    /// (Keras' `value` mask; PyTorch's `key_padding_mask` negated).
    pub padding_mask: Option<Tensor>,
    /// `[batch, q_len, kv_len]` (or `[1, q_len, kv_len]`), bool or integer:
    /// a general mask (Keras' `attention_mask`).
    pub attention_mask: Option<Tensor>,
}

impl AttentionOptions {
    /// No mask.
    pub fn new() -> AttentionOptions {
        AttentionOptions::default()
    }

    /// A causal mask only.
    pub fn causal() -> AttentionOptions {
        AttentionOptions {
            causal: true,
            ..AttentionOptions::default()
        }
    }

    /// These options with a padding mask `[batch, kv_len]`.
    pub fn padding_mask(mut self, mask: &Tensor) -> AttentionOptions {
        self.padding_mask = Some(mask.clone());
        self
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `padding_mask`: layer options are builders named as the option")]
    pub fn with_padding_mask(self, mask: &Tensor) -> AttentionOptions {
        self.padding_mask(mask)
    }

    /// These options with a general mask `[batch, q_len, kv_len]`.
    pub fn attention_mask(mut self, mask: &Tensor) -> AttentionOptions {
        self.attention_mask = Some(mask.clone());
        self
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `attention_mask`: layer options are builders named as the option")]
    pub fn with_attention_mask(self, mask: &Tensor) -> AttentionOptions {
        self.attention_mask(mask)
    }
}

/// Multi-head (and grouped-query) scaled dot-product attention with
/// learned projections (Keras' `MultiHeadAttention`).
///
/// Defaults follow Keras: `value_dim = key_dim`, the output has the
/// query's feature size, biases on, attention dropout 0.
///
/// A query row whose every key is masked gets zero attention weights, so
/// its attention output is zero and the layer's output there is the
/// output bias alone (Keras gives such a row uniform weights over all
/// keys, PyTorch NaN); its gradient is zero, never NaN.
#[derive(Debug)]
pub struct MultiHeadAttention {
    num_heads: i64,
    num_kv_heads: i64,
    key_dim: i64,
    value_dim: i64,
    output_dim: Option<i64>,
    dropout: f64,
    /// The query projection, `[query_features, heads, key_dim]`.
    pub query: Projection,
    /// The key projection, `[key_features, kv_heads, key_dim]`.
    pub key: Projection,
    /// The value projection, `[value_features, kv_heads, value_dim]`.
    pub value: Projection,
    /// The output projection, `[heads, value_dim, output_dim]`.
    pub output: Projection,
    key_seed: Tensor,
    policy: Option<Policy>,
}

impl MultiHeadAttention {
    /// `num_heads` heads of size `key_dim`, weights drawn from `key`
    /// (each projection from its own fold of it) on the first call.
    pub fn new(key: &Tensor, num_heads: i64, key_dim: i64) -> Result<MultiHeadAttention> {
        if num_heads < 1 || key_dim < 1 {
            return Err(invalid(format!(
                "needs num_heads >= 1 and key_dim >= 1, got {num_heads} and {key_dim}"
            )));
        }
        Ok(MultiHeadAttention {
            num_heads,
            num_kv_heads: num_heads,
            key_dim,
            value_dim: key_dim,
            output_dim: None,
            dropout: 0.0,
            query: Projection::new(key, 0, true)?,
            key: Projection::new(key, 1, true)?,
            value: Projection::new(key, 2, true)?,
            output: Projection::new(key, 3, true)?,
            key_seed: key.clone(),
            policy: current_policy(),
        })
    }

    /// The mixed-precision policy (default the global one when the layer
    /// was made): weights in its variable dtype, inputs, outputs and a
    /// [`KvCache`] in its compute dtype (the softmax in float32 for half
    /// precision, as always). Set it before the weights are made.
    pub fn dtype_policy(mut self, policy: Policy) -> MultiHeadAttention {
        self.policy = Some(policy);
        self
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `dtype_policy`: layer options are builders named as the option")]
    pub fn with_dtype_policy(self, policy: Policy) -> MultiHeadAttention {
        self.dtype_policy(policy)
    }

    /// Grouped-query attention with `n` key/value heads, which must divide
    /// the query heads (`n == num_heads` is plain multi-head attention,
    /// `1` multi-query attention).
    pub fn num_kv_heads(mut self, n: i64) -> Result<MultiHeadAttention> {
        if n < 1 || self.num_heads % n != 0 {
            return Err(invalid(format!(
                "num_kv_heads {n} must be >= 1 and divide num_heads {}",
                self.num_heads
            )));
        }
        self.num_kv_heads = n;
        Ok(self)
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `num_kv_heads`: layer options are builders named as the option")]
    pub fn with_num_kv_heads(self, n: i64) -> Result<MultiHeadAttention> {
        self.num_kv_heads(n)
    }

    /// Value heads of size `value_dim` (Keras' `value_dim`; default
    /// `key_dim`).
    pub fn value_dim(mut self, value_dim: i64) -> Result<MultiHeadAttention> {
        if value_dim < 1 {
            return Err(invalid(format!("value_dim must be >= 1, got {value_dim}")));
        }
        self.value_dim = value_dim;
        Ok(self)
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `value_dim`: layer options are builders named as the option")]
    pub fn with_value_dim(self, value_dim: i64) -> Result<MultiHeadAttention> {
        self.value_dim(value_dim)
    }

    /// The output's feature size (Keras' `output_shape`; default the
    /// query's).
    pub fn output_dim(mut self, output_dim: i64) -> Result<MultiHeadAttention> {
        if output_dim < 1 {
            return Err(invalid(format!(
                "output_dim must be >= 1, got {output_dim}"
            )));
        }
        self.output_dim = Some(output_dim);
        Ok(self)
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `output_dim`: layer options are builders named as the option")]
    pub fn with_output_dim(self, output_dim: i64) -> Result<MultiHeadAttention> {
        self.output_dim(output_dim)
    }

    /// With or without biases on all four projections (Keras'
    /// `use_bias`, default true).
    pub fn use_bias(mut self, use_bias: bool) -> Result<MultiHeadAttention> {
        for (i, p) in [
            &mut self.query,
            &mut self.key,
            &mut self.value,
            &mut self.output,
        ]
        .into_iter()
        .enumerate()
        {
            *p = Projection::new(&self.key_seed, i as u64, use_bias)?;
        }
        Ok(self)
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `use_bias`: layer options are builders named as the option")]
    pub fn with_bias(self, use_bias: bool) -> Result<MultiHeadAttention> {
        self.use_bias(use_bias)
    }

    /// Dropout on the attention probabilities in training (Keras'
    /// `dropout`, default 0); a training call with a nonzero rate needs a
    /// key in its [`Mode`].
    pub fn dropout(mut self, rate: f64) -> Result<MultiHeadAttention> {
        if !(0.0..1.0).contains(&rate) {
            return Err(invalid(format!("dropout must be in [0, 1), got {rate}")));
        }
        self.dropout = rate;
        Ok(self)
    }

    #[doc(hidden)]
    #[deprecated(note = "renamed `dropout`: layer options are builders named as the option")]
    pub fn with_dropout(self, rate: f64) -> Result<MultiHeadAttention> {
        self.dropout(rate)
    }

    /// The number of query heads.
    pub fn num_heads(&self) -> i64 {
        self.num_heads
    }

    /// The number of key/value heads (set by the `num_kv_heads` builder).
    pub fn kv_heads(&self) -> i64 {
        self.num_kv_heads
    }

    /// The size of each query/key head.
    pub fn key_dim(&self) -> i64 {
        self.key_dim
    }

    /// The size of each value head (set by the `value_dim` builder).
    pub fn value_head_dim(&self) -> i64 {
        self.value_dim
    }

    /// Makes the weights now, for inputs of `query_features`,
    /// `key_features` and `value_features` in `dtype` (Keras' `build`;
    /// under a policy, in its variable dtype whatever `dtype` says).
    /// A first call does this itself, but not from inside a loop body or
    /// branch (a variable cannot be created from a value computed there):
    /// build before decoding in a `for_range` whose body makes the first
    /// call.
    pub fn build(
        &self,
        query_features: i64,
        key_features: i64,
        value_features: i64,
        dtype: DType,
    ) -> Result<()> {
        let (h, g, kd, vd) = (
            self.num_heads,
            self.num_kv_heads,
            self.key_dim,
            self.value_dim,
        );
        let dtype = self.policy.map_or(dtype, |p| p.variable_dtype());
        let out = self.output_dim.unwrap_or(query_features);
        let parts: [(&str, &Projection, [i64; 3], usize); 4] = [
            ("query", &self.query, [query_features, h, kd], 1),
            ("key", &self.key, [key_features, g, kd], 1),
            ("value", &self.value, [value_features, g, vd], 1),
            ("output", &self.output, [h, vd, out], 2),
        ];
        for (name, p, dims, bias_from) in parts {
            p.check_features(name, dims[0])?;
            p.kernel.get(&dims, dtype)?;
            if let Some(b) = &p.bias {
                b.get(&dims[bias_from..], dtype)?;
            }
        }
        Ok(())
    }

    /// A layer with these weights, each projection a `(kernel, bias)` in
    /// Keras' layouts (`query [query_features, heads, key_dim]` with bias
    /// `[heads, key_dim]`, `key [key_features, kv_heads, key_dim]`,
    /// `value [value_features, kv_heads, value_dim]`, `output [heads,
    /// value_dim, output_dim]` with bias `[output_dim]`), nothing drawn;
    /// the sizes come from the kernels. Either every projection has a
    /// bias or none has.
    pub fn from_weights(
        query: (&Tensor, Option<&Tensor>),
        key: (&Tensor, Option<&Tensor>),
        value: (&Tensor, Option<&Tensor>),
        output: (&Tensor, Option<&Tensor>),
    ) -> Result<MultiHeadAttention> {
        const LAYER: &str = "MultiHeadAttention";
        let layouts = [
            (query.0, "[query_features, heads, key_dim]"),
            (key.0, "[key_features, kv_heads, key_dim]"),
            (value.0, "[value_features, kv_heads, value_dim]"),
            (output.0, "[heads, value_dim, output_dim]"),
        ];
        for (kernel, layout) in layouts {
            super::util::check_rank(LAYER, kernel, 3, layout)?;
        }
        let biases = [query.1, key.1, value.1, output.1];
        let use_bias = biases.iter().all(Option::is_some);
        if !use_bias && biases.iter().any(Option::is_some) {
            return Err(invalid(
                "give a bias for every projection or for none".to_string(),
            ));
        }
        let (q, k, v, o) = (
            query.0.dims(),
            key.0.dims(),
            value.0.dims(),
            output.0.dims(),
        );
        let seed = random::key(0)?;
        let mut mha = MultiHeadAttention::new(&seed, q[1], q[2])?
            .num_kv_heads(k[1])?
            .value_dim(v[2])?
            .output_dim(o[2])?
            .use_bias(use_bias)?;
        let given = |t: &Tensor| Param::lazy(Initializer::Value(t.clone()), &seed);
        for (projection, (kernel, bias)) in [
            (&mut mha.query, query),
            (&mut mha.key, key),
            (&mut mha.value, value),
            (&mut mha.output, output),
        ] {
            projection.kernel = given(kernel);
            projection.bias = bias.map(given);
        }
        mha.build(q[0], k[0], v[0], query.0.dtype())?;
        Ok(mha)
    }

    /// Attention of `query` `[batch, q_len, features]` over `key` and
    /// `value` `[batch, kv_len, features']`, with the masks of `options`;
    /// returns `[batch, q_len, output_dim]`.
    pub fn call_qkv(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionOptions,
        mode: &Mode,
    ) -> Result<Tensor> {
        Ok(self
            .call_qkv_with_scores(query, key, value, options, mode)?
            .0)
    }

    /// [`MultiHeadAttention::call_qkv`] that also returns the attention
    /// probabilities `[batch, heads, q_len, kv_len]` (Keras'
    /// `return_attention_scores`), after dropout.
    pub fn call_qkv_with_scores(
        &self,
        query: &Tensor,
        key: &Tensor,
        value: &Tensor,
        options: &AttentionOptions,
        mode: &Mode,
    ) -> Result<(Tensor, Tensor)> {
        let [b, t, _] = known3("query", query)?;
        let [kb, s, _] = known3("key", key)?;
        let [vb, vs, _] = known3("value", value)?;
        if kb != b || vb != b || vs != s {
            return Err(invalid(format!(
                "query, key and value need one batch size and key and value one length, \
                 got {}, {} and {}",
                query.tensor_type(),
                key.tensor_type(),
                value.tensor_type()
            )));
        }
        same_dtype(&[query, key, value])?;
        let policy = self.policy.as_ref();
        let (query, key, value) = (
            &autocast(query, policy)?,
            &autocast(key, policy)?,
            &autocast(value, policy)?,
        );
        let q = self.project_query(query)?;
        let k = self.project_kv("key", &self.key, key, self.key_dim)?;
        let v = self.project_kv("value", &self.value, value, self.value_dim)?;
        let mask = build_mask(options, b, t, s)?;
        // A causal mask alone leaves every query a key to attend to (its
        // own position, or key 0): only the other masks can empty a row.
        let may_empty = options.padding_mask.is_some() || options.attention_mask.is_some();
        let (attended, probs) = self.attend(&q, &k, &v, mask.as_ref(), may_empty, mode)?;
        let y = self.project_output(&attended, query)?;
        let probs = probs.reshape(&[b, self.num_heads, t, s])?;
        Ok((y, probs))
    }

    /// `[b, t, heads, key_dim]` queries (query head `h` reads kv head `h /
    /// (heads / kv_heads)`).
    fn project_query(&self, query: &Tensor) -> Result<Tensor> {
        let d = feature_dim("query", query)?;
        self.query.check_features("query", d)?;
        self.query.apply(
            query,
            &[d, self.num_heads, self.key_dim],
            1,
            self.policy.as_ref(),
        )
    }

    /// `[b, s, kv_heads, size]` keys or values.
    fn project_kv(&self, what: &str, proj: &Projection, x: &Tensor, size: i64) -> Result<Tensor> {
        let d = feature_dim(what, x)?;
        proj.check_features(what, d)?;
        proj.apply(x, &[d, self.num_kv_heads, size], 1, self.policy.as_ref())
    }

    /// `[b, t, heads, value_dim]` back to `[b, t, output_dim]`.
    fn project_output(&self, attended: &Tensor, query: &Tensor) -> Result<Tensor> {
        let out = match self.output_dim {
            Some(o) => o,
            None => feature_dim("query", query)?,
        };
        let (h, vd) = (self.num_heads, self.value_dim);
        self.output
            .apply(attended, &[h, vd, out], 2, self.policy.as_ref())
    }

    /// Scaled dot-product attention: `q` `[b, t, heads, k]`, `k` `[b, s,
    /// g, k]`, `v` `[b, s, g, v]` (`g` kv heads, each serving `r = heads /
    /// g` query heads), `mask` bool `[b, t, s]`; `may_empty` when the mask
    /// can hide every key from a query. Returns the attended values `[b,
    /// t, heads, v]` and the probabilities `[b, g, r, t, s]`.
    ///
    /// The heads are moved ahead of the positions first (`[b, g, r * t,
    /// k]`, `[b, g, s, k]`, `[b, g, s, v]`), so both products are batched
    /// matmuls over leading batch axes, as one writes attention by hand:
    /// XLA takes those as they are, where products batched over axes in
    /// the middle (an einsum's `btgrk,bsgk->bgrts`) are first rearranged
    /// by copies and transposes of their operands and gradients.
    fn attend(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
        may_empty: bool,
        mode: &Mode,
    ) -> Result<(Tensor, Tensor)> {
        let dtype = q.dtype();
        let compute = match dtype {
            DType::F16 | DType::BF16 => DType::F32,
            other => other,
        };
        let (qd, kd, vd) = (q.dims(), k.dims(), v.dims());
        let [b, t, h, key_dim] = [qd[0], qd[1], qd[2], qd[3]];
        let [s, g, value_dim] = [kd[1], kd[2], vd[3]];
        let r = h / g;
        // Keras scales the query before the product (smaller values in
        // half precision than scaling the scores).
        let q = q
            .mul_scalar(1.0 / (self.key_dim as f64).sqrt())?
            .transpose(&[0, 2, 1, 3])?
            .reshape(&[b, g, r * t, key_dim])?;
        let k = k.transpose(&[0, 2, 1, 3])?;
        let v = v.transpose(&[0, 2, 1, 3])?;
        let scores = q
            .matmul_t(&k, false, true)?
            .reshape(&[b, g, r, t, s])?
            .cast(compute)?;
        let probs = match mask {
            None => scores.softmax(-1)?,
            Some(mask) => {
                let mask = mask.reshape(&[mask.dims()[0], 1, 1, t, s])?;
                // A large finite negative (Keras' choice for half
                // precision), chosen by `where`, never added: no overflow,
                // and exactly zero weight where any key is visible.
                let lowest = Tensor::fill(&[], -0.7 * max_finite(compute), compute)?;
                let probs = mask.where_(&scores, &lowest)?.softmax(-1)?;
                if may_empty {
                    // Rows with no visible key would be uniform: zero them.
                    let any = mask.cast(compute)?.reduce_max(&[-1], true)?;
                    probs.mul(&any)?
                } else {
                    probs
                }
            }
        };
        let mut probs = probs.cast(dtype)?;
        if mode.is_training() && self.dropout > 0.0 {
            let key = mode.key().ok_or_else(|| {
                invalid(format!(
                    "attention dropout {} in training needs a key: use Mode::training_with_key",
                    self.dropout
                ))
            })?;
            probs = random::dropout(&probs, self.dropout, key)?;
        }
        let attended = probs
            .reshape(&[b, g, r * t, s])?
            .matmul(&v)?
            .reshape(&[b, h, t, value_dim])?
            .transpose(&[0, 2, 1, 3])?;
        Ok((attended, probs))
    }
}

/// Self-attention without a mask: `call_qkv(x, x, x)`.
impl Layer for MultiHeadAttention {
    fn call(&self, x: &Tensor, mode: &Mode) -> Result<Tensor> {
        self.call_qkv(x, x, x, &AttentionOptions::default(), mode)
    }
}

/// `query`, `key`, `value`, `output`, each with `kernel` and `bias`.
impl Module for MultiHeadAttention {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        {
            let f = &mut super::util::noting(LayerKind::AttentionInput, f);
            self.query.visit_variables(&join(prefix, "query"), f);
            self.key.visit_variables(&join(prefix, "key"), f);
            self.value.visit_variables(&join(prefix, "value"), f);
        }
        let f = &mut super::util::noting(LayerKind::AttentionOutput, f);
        self.output.visit_variables(&join(prefix, "output"), f);
    }
}

/// The largest finite value of a float dtype.
fn max_finite(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::MAX,
        _ => f32::MAX as f64,
    }
}

/// The three known dimensions of a `[batch, length, features]` input.
/// `[batch, length, features]` of `x`: length and features known, the
/// batch -1 when unknown (a trace for any batch).
fn known3(what: &str, x: &Tensor) -> Result<[i64; 3]> {
    let ok = x.dtype().is_float();
    match x.shape().dims() {
        Some(&[b, Some(t), Some(f)]) if ok => Ok([b.unwrap_or(-1), t, f]),
        _ => Err(invalid(format!(
            "{what} must be a float [batch, length, features] tensor of known length and \
             features, got {}",
            x.tensor_type()
        ))),
    }
}

fn feature_dim(what: &str, x: &Tensor) -> Result<i64> {
    Ok(known3(what, x)?[2])
}

fn same_dtype(xs: &[&Tensor]) -> Result<()> {
    if xs.iter().any(|x| x.dtype() != xs[0].dtype()) {
        let types: Vec<String> = xs.iter().map(|x| x.tensor_type().to_string()).collect();
        return Err(invalid(format!(
            "query, key and value need one dtype, got {}",
            types.join(", ")
        )));
    }
    Ok(())
}

/// A bool `[b|1, t, s]` mask (true: attend), or none.
fn as_bool(what: &str, mask: &Tensor, want: &[i64]) -> Result<Tensor> {
    // The batch (first) dimension may be 1 (broadcast), or unknown on
    // either side in a trace for any batch.
    let known_rank = mask.shape().dims().is_some();
    let d = mask.dims();
    let fits = known_rank
        && d.len() == want.len()
        && d.iter()
            .zip(want)
            .enumerate()
            .all(|(i, (g, w))| g == w || (i == 0 && (*g == 1 || *g == -1 || *w == -1)));
    let dtype = mask.dtype();
    if !fits || !(dtype == DType::Bool || dtype.is_int()) {
        return Err(invalid(format!(
            "{what} must be bool or integer of shape {want:?}, got {}",
            mask.tensor_type()
        )));
    }
    if dtype == DType::Bool {
        Ok(mask.clone())
    } else {
        mask.ne(&Tensor::try_scalar(0i64)?.cast(dtype)?)
    }
}

fn build_mask(options: &AttentionOptions, b: i64, t: i64, s: i64) -> Result<Option<Tensor>> {
    let mut parts = Vec::new();
    if options.causal {
        let rows = Tensor::iota(&[t, s], 0, DType::I32)?;
        let cols = Tensor::iota(&[t, s], 1, DType::I32)?;
        parts.push(cols.le(&rows)?.expand_dims(0)?);
    }
    if let Some(m) = &options.padding_mask {
        parts.push(as_bool("padding_mask", m, &[b, s])?.expand_dims(1)?);
    }
    if let Some(m) = &options.attention_mask {
        parts.push(as_bool("attention_mask", m, &[b, t, s])?);
    }
    let mut mask: Option<Tensor> = None;
    for p in parts {
        mask = Some(match mask {
            None => p,
            Some(m) => m.logical_and(&p)?,
        });
    }
    // With the batch unknown the mask keeps its own first dimension (1 or
    // the batch), which the scores broadcast against.
    match b < 0 {
        true => Ok(mask),
        false => mask.map(|m| m.broadcast_to(&[b, t, s])).transpose(),
    }
}
