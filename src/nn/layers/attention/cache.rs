//! Caches for decoding with attention: [`KvCache`], the keys and values
//! of the positions decoded so far (self-attention, written one step at a
//! time), and [`CrossKvCache`], an encoder's output projected once
//! (cross-attention, read at every step), with the
//! [`MultiHeadAttention`] calls that use them.
//!
//! Layer: part of `nn::layers::attention` (a child module: it uses the
//! layer's projections and its attention core). Imports `tensor`,
//! `function::Output` and the parent's items.

use super::*;

/// Keys and values of the positions decoded so far, for
/// [`MultiHeadAttention::call_cached`]: `key` `[batch, max_len, kv_heads,
/// key_dim]`, `value` `[batch, max_len, kv_heads, value_dim]`, and
/// `length`, an integer scalar tensor (i32 or i64): how many positions
/// are filled. Its shapes never change, so it can be the state of a
/// `for_range`/`while_loop` inside a compiled function (it is an
/// [`Output`]: three tensors) and a decoding loop compiles once.
#[derive(Clone, Debug)]
pub struct KvCache {
    /// The projected keys; rows at and after `length` are unused.
    pub key: Tensor,
    /// The projected values, likewise.
    pub value: Tensor,
    /// The number of positions written, an integer scalar.
    pub length: Tensor,
}

impl KvCache {
    /// An empty cache (zeros, `length` an i32 0).
    pub fn zeros(
        batch: i64,
        max_len: i64,
        kv_heads: i64,
        key_dim: i64,
        value_dim: i64,
        dtype: DType,
    ) -> Result<KvCache> {
        Ok(KvCache {
            key: Tensor::try_zeros(&[batch, max_len, kv_heads, key_dim], dtype)?,
            value: Tensor::try_zeros(&[batch, max_len, kv_heads, value_dim], dtype)?,
            length: Tensor::try_scalar(0i32)?,
        })
    }

    /// The number of positions the cache holds.
    pub fn max_len(&self) -> i64 {
        self.key.dims().get(1).copied().unwrap_or(0)
    }
}

/// The projected keys and values of a sequence every decoding step
/// attends to unchanged (an encoder's output, in a decoder's
/// cross-attention), for [`MultiHeadAttention::call_cross_cached`]:
/// `key` `[batch, len, kv_heads, key_dim]`, `value` `[batch, len,
/// kv_heads, value_dim]`. Made once by
/// [`MultiHeadAttention::cross_cache`], so a decoding loop does not
/// project the encoder's output again at every step (what Hugging Face's
/// encoder-decoder models keep as the cross-attention `past_key_values`).
/// An [`Output`] of two tensors: it can be captured by, or carried
/// through, a compiled loop.
#[derive(Clone, Debug)]
pub struct CrossKvCache {
    /// The projected keys.
    pub key: Tensor,
    /// The projected values.
    pub value: Tensor,
}

/// Two tensors in the order key, value.
impl Output for CrossKvCache {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.extend([self.key.clone(), self.value.clone()]);
    }
    fn rebuild(_template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        let mut next = || tensors.next().expect("two tensors per CrossKvCache");
        CrossKvCache {
            key: next(),
            value: next(),
        }
    }
    fn describe(&self) -> String {
        format!(
            "CrossKvCache(key={}, value={})",
            self.key.tensor_type(),
            self.value.tensor_type()
        )
    }
}

/// Three tensors in the order key, value, length.
impl Output for KvCache {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.extend([self.key.clone(), self.value.clone(), self.length.clone()]);
    }
    fn rebuild(_template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        let mut next = || tensors.next().expect("three tensors per KvCache");
        KvCache {
            key: next(),
            value: next(),
            length: next(),
        }
    }
    fn describe(&self) -> String {
        format!(
            "KvCache(key={}, value={}, length={})",
            self.key.tensor_type(),
            self.value.tensor_type(),
            self.length.tensor_type()
        )
    }
}

impl MultiHeadAttention {
    /// An empty [`KvCache`] for `batch` sequences of up to `max_len`
    /// positions, in `dtype` (the inputs' dtype; under a policy, its
    /// compute dtype).
    pub fn empty_cache(&self, batch: i64, max_len: i64, dtype: DType) -> Result<KvCache> {
        KvCache::zeros(
            batch,
            max_len,
            self.num_kv_heads,
            self.key_dim,
            self.value_dim,
            dtype,
        )
    }

    /// Incremental self-attention over a cache: projects `x` `[batch, t,
    /// features]` (the `t` newest positions), writes its keys and values
    /// into `cache` at `cache.length` (a `dynamic_update_slice`), and lets
    /// new position `i` attend to every cached position `<= length + i`
    /// (causal by construction). Returns the output `[batch, t,
    /// output_dim]` and the cache with `length + t`.
    ///
    /// Every shape is static (the cache's `max_len`, not the length, sizes
    /// the scores), so a decoding loop of these calls in a `for_range`
    /// inside a compiled function compiles once. Eagerly, a write past
    /// `max_len` is an error; inside a compiled function the length is
    /// unknown at trace time and XLA clamps the write into the buffer, so
    /// the caller must keep `length + t <= max_len`.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use xlafn::nn::layers::{KvCache, Mode, MultiHeadAttention};
    /// use xlafn::prelude::*;
    /// let mha = Arc::new(MultiHeadAttention::new(&xlafn::random::key(0)?, 2, 4)?);
    /// // Weights made before the loop (a loop body cannot create them).
    /// mha.build(8, 8, 8, DType::F32)?;
    /// // Four steps of a recurrence through the cache, one compiled loop.
    /// let decode = function({
    ///     let mha = mha.clone();
    ///     move |x0: Tensor| -> Result<Tensor> {
    ///         let cache = mha.empty_cache(1, 4, DType::F32)?;
    ///         let (x, _) = for_range(0, 4, 1, (x0, cache), |_, (x, cache): (Tensor, KvCache)| {
    ///             mha.call_cached(&x, &cache, &Mode::inference())
    ///         })?;
    ///         Ok(x)
    ///     }
    /// });
    /// let y = decode.call((Tensor::ones(&[1, 1, 8], DType::F32),))?;
    /// assert_eq!(y.dims(), vec![1, 1, 8]);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn call_cached(
        &self,
        x: &Tensor,
        cache: &KvCache,
        mode: &Mode,
    ) -> Result<(Tensor, KvCache)> {
        let [b, t, _] = known3("x", x)?;
        let x = &autocast(x, self.policy.as_ref())?;
        let m = cache.max_len();
        let want_k = [b, m, self.num_kv_heads, self.key_dim];
        let want_v = [b, m, self.num_kv_heads, self.value_dim];
        let len = &cache.length;
        let ok = cache.key.dims() == want_k
            && cache.value.dims() == want_v
            && cache.key.dtype() == x.dtype()
            && cache.value.dtype() == x.dtype()
            && len.rank() == 0
            && len.dtype().is_int();
        if !ok {
            return Err(invalid(format!(
                "the cache needs key {:?}, value {:?} of {} and an integer scalar length, got {}, \
                 {} and {}",
                want_k,
                want_v,
                x.dtype(),
                cache.key.tensor_type(),
                cache.value.tensor_type(),
                len.tensor_type()
            )));
        }
        if !len.is_symbolic() {
            // Read on the host: a cast here would be an op, traced (and
            // unreadable) when a concrete cache meets a compiled function.
            let n = len.to_f64_vec()?[0] as i64;
            if n < 0 || n + t > m {
                return Err(invalid(format!(
                    "the cache holds {m} positions: {n} written plus {t} new do not fit"
                )));
            }
        }
        let q = self.project_query(x)?;
        let k = self.project_kv("x", &self.key, x, self.key_dim)?;
        let v = self.project_kv("x", &self.value, x, self.value_dim)?;
        let start = len.cast(DType::I32)?;
        let zero = Tensor::try_scalar(0i32)?;
        let at = [zero.clone(), start.clone(), zero.clone(), zero];
        let keys = cache.key.dynamic_update_slice(&k, &at)?;
        let values = cache.value.dynamic_update_slice(&v, &at)?;
        // New position i is absolute position length + i.
        let rows = Tensor::iota(&[t, m], 0, DType::I32)?.add(&start)?;
        let cols = Tensor::iota(&[t, m], 1, DType::I32)?;
        let mask = cols.le(&rows)?.expand_dims(0)?.broadcast_to(&[b, t, m])?;
        // Cached position 0 is always visible: no row is empty.
        let (attended, _) = self.attend(&q, &keys, &values, Some(&mask), false, mode)?;
        let y = self.project_output(&attended, x)?;
        let length = len.add(&Tensor::try_scalar(t)?.cast(len.dtype())?)?;
        Ok((
            y,
            KvCache {
                key: keys,
                value: values,
                length,
            },
        ))
    }

    /// Projects `key` and `value` `[batch, len, features]` (an encoder's
    /// output, usually both) once, for
    /// [`MultiHeadAttention::call_cross_cached`] at every decoding step.
    pub fn cross_cache(&self, key: &Tensor, value: &Tensor) -> Result<CrossKvCache> {
        let [kb, s, _] = known3("key", key)?;
        let [vb, vs, _] = known3("value", value)?;
        if kb != vb || vs != s {
            return Err(invalid(format!(
                "key and value need one batch size and length, got {} and {}",
                key.tensor_type(),
                value.tensor_type()
            )));
        }
        same_dtype(&[key, value])?;
        let policy = self.policy.as_ref();
        let (key, value) = (&autocast(key, policy)?, &autocast(value, policy)?);
        Ok(CrossKvCache {
            key: self.project_kv("key", &self.key, key, self.key_dim)?,
            value: self.project_kv("value", &self.value, value, self.value_dim)?,
        })
    }

    /// [`MultiHeadAttention::call_qkv`] of `query` over keys and values
    /// projected before by [`MultiHeadAttention::cross_cache`]: the same
    /// result, without projecting them again. The masks of `options`
    /// apply as in `call_qkv` (a padding mask over the cached sequence).
    ///
    /// ```
    /// use xlafn::nn::layers::{AttentionOptions, Mode, MultiHeadAttention};
    /// use xlafn::prelude::*;
    /// let mha = MultiHeadAttention::new(&xlafn::random::key(0)?, 2, 4)?;
    /// let encoded = Tensor::ones(&[1, 6, 8], DType::F32);
    /// let memory = mha.cross_cache(&encoded, &encoded)?; // projected once
    /// let step = Tensor::ones(&[1, 1, 8], DType::F32);
    /// let (options, mode) = (AttentionOptions::new(), Mode::inference());
    /// let y = mha.call_cross_cached(&step, &memory, &options, &mode)?;
    /// let direct = mha.call_qkv(&step, &encoded, &encoded, &options, &mode)?;
    /// assert_eq!(y.to_vec::<f32>()?, direct.to_vec::<f32>()?);
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn call_cross_cached(
        &self,
        query: &Tensor,
        cache: &CrossKvCache,
        options: &AttentionOptions,
        mode: &Mode,
    ) -> Result<Tensor> {
        let [b, t, _] = known3("query", query)?;
        let query = &autocast(query, self.policy.as_ref())?;
        let s = cache.key.dims().get(1).copied().unwrap_or(-1);
        let fits = |x: &Tensor, size: i64| {
            let d = x.dims();
            d.len() == 4
                && (d[0] == b || b < 0 || d[0] < 0)
                && d[1] == s
                && s >= 0
                && d[2..] == [self.num_kv_heads, size]
                && x.dtype() == query.dtype()
        };
        if !fits(&cache.key, self.key_dim) || !fits(&cache.value, self.value_dim) {
            return Err(invalid(format!(
                "the cross cache needs key [{b}, len, {}, {}] and value [{b}, len, {}, {}] of {} \
                 (from this layer's cross_cache), got {} and {}",
                self.num_kv_heads,
                self.key_dim,
                self.num_kv_heads,
                self.value_dim,
                query.dtype(),
                cache.key.tensor_type(),
                cache.value.tensor_type()
            )));
        }
        let q = self.project_query(query)?;
        let mask = build_mask(options, b, t, s)?;
        let may_empty = options.padding_mask.is_some() || options.attention_mask.is_some();
        let (attended, _) =
            self.attend(&q, &cache.key, &cache.value, mask.as_ref(), may_empty, mode)?;
        self.project_output(&attended, query)
    }
}
