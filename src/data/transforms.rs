//! The transformations: each takes a dataset and gives a new one whose
//! passes wrap the old one's.

use super::example::{self, Example, fill_bytes, flatten, pad_to, stack, unflatten};
use super::ordered_map::{OrderedMap, call_guarded, prefetch};
use super::random::SplitMix64;
use super::{Cardinality, Dataset, Elements, Pass};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::runtime::HostArray;
use std::sync::Arc;

/// How `padded_batch` pads: to a shape per part (`None`, or `-1` in a
/// dimension, for the batch's longest) with a value per part (zero when
/// not given).
#[derive(Clone, Debug, Default)]
pub struct Pad {
    shapes: Vec<Option<Vec<i64>>>,
    values: Vec<Scalar>,
}

impl Pad {
    /// Pads every part to the batch's longest, with zeros.
    pub fn new() -> Pad {
        Pad::default()
    }

    /// Fixed shapes per part (`-1`: the batch's longest in that
    /// dimension). Fixed shapes give every batch one type, so a compiled
    /// step traces once.
    pub fn shapes(mut self, shapes: Vec<Option<Vec<i64>>>) -> Pad {
        self.shapes = shapes;
        self
    }

    /// The padding value per part, which the part's dtype must hold (as
    /// [`Scalar::fits`] decides): 300 for a `u8` part or NaN for an `i32`
    /// one is an error, as in `tf.data`, rather than a wrapped or zeroed
    /// value.
    pub fn values(mut self, values: Vec<Scalar>) -> Pad {
        self.values = values;
        self
    }
}

impl<T: Send + 'static> Dataset<T> {
    /// Applies `f` to every example, on the consumer's thread (or on the
    /// prefetch thread, after a [`prefetch`](Dataset::prefetch)). An error
    /// or panic in `f` becomes that example's `Err`.
    pub fn map<U: Send + 'static>(
        &self,
        f: impl Fn(T) -> Result<U> + Send + Sync + 'static,
    ) -> Dataset<U> {
        let (inner, f) = (self.clone(), Arc::new(f));
        Dataset::from_pass_fn(self.cardinality, move |pass| {
            let f = f.clone();
            Box::new(
                inner
                    .iter_pass(pass)
                    .zip(0u64..)
                    .map(move |(x, i)| x.and_then(|x| call_guarded("map", i, &*f, x))),
            )
        })
    }

    /// [`map`](Dataset::map) on `workers` threads (0: one per core; at
    /// most [`MAX_MAP_WORKERS`](super::MAX_MAP_WORKERS), each a thread
    /// started per pass), keeping the input order (`num_parallel_calls`
    /// with `deterministic=True`).
    pub fn map_parallel<U: Send + 'static>(
        &self,
        workers: usize,
        f: impl Fn(T) -> Result<U> + Send + Sync + 'static,
    ) -> Dataset<U> {
        let workers = if workers == 0 {
            std::thread::available_parallelism().map_or(1, |n| n.get())
        } else {
            workers.min(super::MAX_MAP_WORKERS)
        };
        let inner = self.clone();
        let f: Arc<dyn Fn(T) -> Result<U> + Send + Sync> = Arc::new(f);
        Dataset::from_pass_fn(self.cardinality, move |pass| {
            match OrderedMap::start(inner.iter_pass(pass), workers, f.clone()) {
                Ok(m) => Box::new(m),
                Err(e) => Box::new(std::iter::once(Err(e))),
            }
        })
    }

    /// Keeps the examples for which `keep` is true (errors pass through;
    /// a panic in `keep` becomes that example's `Err`, as in `map`).
    pub fn filter(&self, keep: impl Fn(&T) -> bool + Send + Sync + 'static) -> Dataset<T> {
        let inner = self.clone();
        let keep: Arc<dyn Fn(&T) -> bool + Send + Sync> = Arc::new(keep);
        Dataset::from_pass_fn(Cardinality::Unknown, move |pass| {
            let keep = keep.clone();
            Box::new(
                inner
                    .iter_pass(pass)
                    .zip(0u64..)
                    .filter_map(move |(x, i)| match x {
                        Ok(x) => kept(&*keep, i, x),
                        Err(e) => Some(Err(e)),
                    }),
            )
        })
    }

    /// Shuffles through a buffer of `buffer_size` examples (a buffer as
    /// large as the dataset shuffles uniformly), drawing from `seed` and
    /// the pass: each pass, and each repetition under `repeat`, has its
    /// own order, the same in every run.
    pub fn shuffle(&self, buffer_size: usize, seed: u64) -> Dataset<T> {
        if buffer_size == 0 {
            return Dataset::failing(Error::Value(
                "data: shuffle's buffer_size must be at least 1".into(),
            ));
        }
        let inner = self.clone();
        Dataset::from_pass_fn(self.cardinality, move |pass| {
            let mut upstream = inner.iter_pass(pass);
            let mut rng = SplitMix64::new(super::random::mix(seed) ^ pass.seed());
            let mut buffer: Vec<Result<T>> = Vec::with_capacity(buffer_size.min(1 << 16));
            Box::new(std::iter::from_fn(move || {
                while buffer.len() < buffer_size {
                    match upstream.next() {
                        Some(x) => buffer.push(x),
                        None => break,
                    }
                }
                if buffer.is_empty() {
                    return None;
                }
                let i = rng.below(buffer.len());
                Some(buffer.swap_remove(i))
            }))
        })
    }

    /// Repeats the dataset `count` times (`None`: forever). Each
    /// repetition is a new nested pass, so a shuffle before it reshuffles.
    pub fn repeat(&self, count: Option<u64>) -> Dataset<T> {
        let inner = self.clone();
        let cardinality = match (count, self.cardinality) {
            (Some(0), _) | (_, Cardinality::Finite(0)) => Cardinality::Finite(0),
            (None, _) => Cardinality::Infinite,
            (Some(k), c) => c.map(|n| n.saturating_mul(k)),
        };
        Dataset::from_pass_fn(cardinality, move |pass| {
            let inner = inner.clone();
            let mut round = 0u64;
            let mut current: Option<Elements<T>> = None;
            let mut yielded = false;
            Box::new(std::iter::from_fn(move || {
                loop {
                    if let Some(it) = current.as_mut() {
                        if let Some(x) = it.next() {
                            yielded = true;
                            return Some(x);
                        }
                        current = None;
                        if !yielded {
                            return None; // an empty pass repeated forever would spin
                        }
                    }
                    if count.is_some_and(|c| round >= c) {
                        return None;
                    }
                    current = Some(inner.iter_pass(pass.child(round)));
                    round += 1;
                    yielded = false;
                }
            }))
        })
    }

    /// The first `count` examples.
    pub fn take(&self, count: u64) -> Dataset<T> {
        let inner = self.clone();
        let cardinality = match self.cardinality {
            Cardinality::Finite(n) => Cardinality::Finite(n.min(count)),
            Cardinality::Infinite => Cardinality::Finite(count),
            Cardinality::Unknown => Cardinality::Unknown,
        };
        Dataset::from_pass_fn(cardinality, move |pass| {
            Box::new(inner.iter_pass(pass).take(count as usize))
        })
    }

    /// All but the first `count` examples.
    pub fn skip(&self, count: u64) -> Dataset<T> {
        let inner = self.clone();
        Dataset::from_pass_fn(
            self.cardinality.map(|n| n.saturating_sub(count)),
            move |pass| Box::new(inner.iter_pass(pass).skip(count as usize)),
        )
    }

    /// Every `num_shards`th example from `index` on (`tf.data`'s `shard`):
    /// worker `index` of `num_shards` reads its share. Shard before
    /// shuffling, so the shares stay disjoint.
    pub fn shard(&self, num_shards: u64, index: u64) -> Dataset<T> {
        if num_shards == 0 || index >= num_shards {
            return Dataset::failing(Error::Value(format!(
                "data: shard index {index} is not below num_shards {num_shards}"
            )));
        }
        let inner = self.clone();
        let cardinality = self.cardinality.map(|n| shard_length(n, num_shards, index));
        Dataset::from_pass_fn(cardinality, move |pass| {
            Box::new(
                inner
                    .iter_pass(pass)
                    .skip(index as usize)
                    .step_by(num_shards as usize),
            )
        })
    }

    /// Pairs the examples of two datasets, ending with the shorter.
    pub fn zip<U: Send + 'static>(&self, other: &Dataset<U>) -> Dataset<(T, U)> {
        let (a, b) = (self.clone(), other.clone());
        let cardinality = match (self.cardinality, other.cardinality) {
            (Cardinality::Finite(x), Cardinality::Finite(y)) => Cardinality::Finite(x.min(y)),
            (Cardinality::Finite(x), Cardinality::Infinite)
            | (Cardinality::Infinite, Cardinality::Finite(x)) => Cardinality::Finite(x),
            (Cardinality::Infinite, Cardinality::Infinite) => Cardinality::Infinite,
            _ => Cardinality::Unknown,
        };
        Dataset::from_pass_fn(cardinality, move |pass| {
            let pairs = a.iter_pass(pass.child(0)).zip(b.iter_pass(pass.child(1)));
            Box::new(pairs.map(|(x, y)| Ok((x?, y?))))
        })
    }

    /// Pairs each example with its index in the pass.
    pub fn enumerate(&self) -> Dataset<(u64, T)> {
        let inner = self.clone();
        Dataset::from_pass_fn(self.cardinality, move |pass| {
            Box::new(
                (0u64..)
                    .zip(inner.iter_pass(pass))
                    .map(|(i, x)| Ok((i, x?))),
            )
        })
    }

    /// Maps each example to a dataset and interleaves them: `cycle_length`
    /// of them open at once, `block_length` examples from each in turn,
    /// an exhausted one replaced by the next example's (`tf.data`'s
    /// `interleave`, deterministic). Reading several files at once is the
    /// usual use. Slots are made as inputs arrive, so a `cycle_length`
    /// beyond the number of inputs costs nothing. A panic in `f` becomes
    /// an error in that input's place, as in `map`.
    pub fn interleave<U: Send + 'static>(
        &self,
        cycle_length: usize,
        block_length: usize,
        f: impl Fn(T) -> Dataset<U> + Send + Sync + 'static,
    ) -> Dataset<U> {
        if cycle_length == 0 || block_length == 0 {
            return Dataset::failing(Error::Value(format!(
                "data: interleave's cycle_length ({cycle_length}) and block_length \
                 ({block_length}) must be at least 1"
            )));
        }
        let (inner, f) = (self.clone(), Arc::new(f));
        Dataset::from_pass_fn(Cardinality::Unknown, move |pass| {
            Box::new(Interleave {
                outer: inner.iter_pass(pass),
                outer_done: false,
                f: f.clone(),
                slots: Vec::new(),
                cycle_length,
                slot: 0,
                in_block: 0,
                block_length,
                opened: 0,
                pass,
            })
        })
    }

    /// Runs this pipeline on its own thread, up to `depth` examples ahead
    /// of the consumer (`tf.data`'s `prefetch`): reading, mapping and
    /// batching overlap the consumer's work. The buffer is allocated
    /// whole, so a depth above [`MAX_PREFETCH_DEPTH`](super::MAX_PREFETCH_DEPTH)
    /// is that depth (and 0 is 1).
    pub fn prefetch(&self, depth: usize) -> Dataset<T> {
        let inner = self.clone();
        Dataset::from_pass_fn(self.cardinality, move |pass| {
            prefetch(inner.iter_pass(pass), depth)
        })
    }
}

/// Example `index` if `keep` keeps it; a panic in `keep` is its error.
fn kept<T>(keep: &(dyn Fn(&T) -> bool + Send + Sync), index: u64, x: T) -> Option<Result<T>> {
    match call_guarded("filter", index, &|x: &T| Ok(keep(x)), &x) {
        Ok(true) => Some(Ok(x)),
        Ok(false) => None,
        Err(e) => Some(Err(e)),
    }
}

/// How many of `n` elements shard `index` of `num_shards` takes: those at
/// `index`, `index + num_shards`, ... below `n` (written so that no sum
/// overflows, whatever the arguments).
fn shard_length(n: u64, num_shards: u64, index: u64) -> u64 {
    match n.checked_sub(index) {
        Some(rest) if rest > 0 => (rest - 1) / num_shards + 1,
        _ => 0,
    }
}

struct Interleave<T, U> {
    outer: Elements<T>,
    outer_done: bool,
    f: Arc<dyn Fn(T) -> Dataset<U> + Send + Sync>,
    /// The open datasets, at most `cycle_length`; `None` where one ran out.
    slots: Vec<Option<Elements<U>>>,
    cycle_length: usize,
    slot: usize,
    in_block: usize,
    block_length: usize,
    opened: u64,
    pass: Pass,
}

impl<T: Send + 'static, U: Send + 'static> Interleave<T, U> {
    /// Moves to the next slot: back to the first after `cycle_length`, or
    /// after the last one made once the inputs are done (no more will be).
    fn advance(&mut self) {
        self.slot += 1;
        if self.slot == self.cycle_length || (self.outer_done && self.slot >= self.slots.len()) {
            self.slot = 0;
        }
        self.in_block = 0;
    }

    /// Opens the next input's dataset in the current slot when it is empty
    /// (or not made yet) and inputs remain; an input's error is returned.
    fn refill(&mut self) -> Result<()> {
        let empty = self.slots.get(self.slot).is_none_or(Option::is_none);
        if !empty || self.outer_done {
            return Ok(());
        }
        match self.outer.next() {
            Some(Ok(x)) => {
                let (f, index) = (&*self.f, self.opened);
                self.opened += 1;
                let dataset = call_guarded("interleave's function", index, &|x| Ok(f(x)), x)?;
                let opened = dataset.iter_pass(self.pass.child(index));
                match self.slots.get_mut(self.slot) {
                    Some(slot) => *slot = Some(opened),
                    None => self.slots.push(Some(opened)),
                }
            }
            Some(Err(e)) => return Err(e),
            None => self.outer_done = true,
        }
        Ok(())
    }
}

impl<T: Send + 'static, U: Send + 'static> Iterator for Interleave<T, U> {
    type Item = Result<U>;

    fn next(&mut self) -> Option<Result<U>> {
        loop {
            if self.outer_done && self.slots.iter().all(Option::is_none) {
                return None;
            }
            if let Err(e) = self.refill() {
                return Some(Err(e));
            }
            let Some(Some(it)) = self.slots.get_mut(self.slot) else {
                self.advance();
                continue;
            };
            match it.next() {
                Some(x) => {
                    self.in_block += 1;
                    if self.in_block == self.block_length {
                        self.advance();
                    }
                    return Some(x);
                }
                None => {
                    self.slots[self.slot] = None;
                    self.advance();
                }
            }
        }
    }
}

/// Batching, for examples made of arrays.
impl<T: Example> Dataset<T> {
    /// Stacks `batch_size` examples at a time along a new first axis
    /// (every example's parts must agree in dtype and shape; see
    /// [`padded_batch`](Dataset::padded_batch) otherwise). The last batch
    /// may be smaller unless `drop_remainder`.
    pub fn batch(&self, batch_size: usize, drop_remainder: bool) -> Dataset<T> {
        self.batch_with(batch_size, drop_remainder, |parts: Vec<Vec<HostArray>>| {
            parts
                .into_iter()
                .enumerate()
                .map(|(p, arrays)| stack(p, arrays))
                .collect()
        })
    }

    /// Batches examples of different shapes, padding each part to a
    /// common shape first (`tf.data`'s `padded_batch`; see [`Pad`]).
    ///
    /// A padded batch that could not be allocated is an error in its
    /// place, found before any of it is: one beyond what XLA holds
    /// ([`check_array_size`](crate::dtype::check_array_size)) or larger
    /// than the memory a program may use
    /// ([`program_memory_bytes`](crate::dtype::program_memory_bytes): the
    /// machine's memory unless `XLAFN_PROGRAM_MEMORY_BYTES` says otherwise).
    pub fn padded_batch(&self, batch_size: usize, drop_remainder: bool, pad: Pad) -> Dataset<T> {
        self.batch_with(batch_size, drop_remainder, move |parts| {
            parts
                .into_iter()
                .enumerate()
                .map(|(p, arrays)| pad_part(p, arrays, &pad))
                .collect()
        })
    }

    /// Batches of exactly `batch_size` rows, each with a boolean `[batch_size]`
    /// mask of its real rows: the last batch is padded with zero rows, so
    /// every batch has one type and a compiled step traces once (weight a
    /// loss by the mask to ignore the padding).
    ///
    /// A `batch_size` whose mask alone could not be allocated (see
    /// [`Dataset::padded_batch`] for the bound) is an error at once, and so
    /// is a padded batch that could not be.
    pub fn batch_with_mask(&self, batch_size: usize) -> Dataset<(T, HostArray)> {
        let rows_per_batch = match mask_rows(batch_size) {
            Ok(n) => n,
            Err(e) => return Dataset::failing(e),
        };
        let rows = self.batch(batch_size, false);
        let cardinality = rows.cardinality;
        Dataset::from_pass_fn(cardinality, move |pass| {
            Box::new(
                rows.iter_pass(pass)
                    .map(move |b| masked_batch(flatten(b?), rows_per_batch)),
            )
        })
    }

    fn batch_with(
        &self,
        batch_size: usize,
        drop_remainder: bool,
        combine: impl Fn(Vec<Vec<HostArray>>) -> Result<Vec<HostArray>> + Send + Sync + 'static,
    ) -> Dataset<T> {
        if batch_size == 0 {
            return Dataset::failing(Error::Value("data: batch_size must be at least 1".into()));
        }
        let (inner, combine) = (self.clone(), Arc::new(combine));
        let size = batch_size as u64;
        let cardinality = self.cardinality.map(|n| {
            if drop_remainder {
                n / size
            } else {
                n.div_ceil(size)
            }
        });
        Dataset::from_pass_fn(cardinality, move |pass| {
            let mut upstream = inner.iter_pass(pass);
            let combine = combine.clone();
            let mut pending: Vec<Vec<HostArray>> = Vec::new();
            Box::new(std::iter::from_fn(move || {
                while pending.len() < batch_size {
                    match upstream.next() {
                        Some(Ok(x)) => pending.push(flatten(x)),
                        // The examples gathered so far wait for the next call.
                        Some(Err(e)) => return Some(Err(e)),
                        None => break,
                    }
                }
                if pending.is_empty() || (drop_remainder && pending.len() < batch_size) {
                    return None;
                }
                Some(batch_of(std::mem::take(&mut pending), &*combine))
            }))
        })
    }
}

/// `batch_with_mask`'s rows per batch, refused unless its mask could be
/// allocated.
fn mask_rows(batch_size: usize) -> Result<i64> {
    let rows = i64::try_from(batch_size).map_err(|_| {
        Error::Value(format!(
            "data: batch_with_mask: batch_size {batch_size} is not below 2^63"
        ))
    })?;
    example::array_bytes(DType::Bool, &[rows], "batch_with_mask's mask")?;
    Ok(rows)
}

/// A batch's parts padded with zero rows to `rows`, and the mask of its
/// real rows.
fn masked_batch<T: Example>(parts: Vec<HostArray>, rows: i64) -> Result<(T, HostArray)> {
    let real = parts
        .first()
        .map_or(0, |a| a.dims.first().copied().unwrap_or(0));
    let padded = parts
        .iter()
        .map(|a| {
            let mut dims = a.dims.clone();
            dims[0] = rows;
            let zero = vec![0u8; a.dtype.size_in_bytes()?];
            pad_to(a, &dims, &zero, "batch_with_mask: a padded batch")
        })
        .collect::<Result<Vec<HostArray>>>()?;
    let mask: Vec<bool> = (0..rows).map(|i| i < real).collect();
    Ok((unflatten(padded)?, HostArray::from_vec(mask, &[rows])))
}

/// Transposes examples' arrays into parts and combines each part.
fn batch_of<T: Example>(
    examples: Vec<Vec<HostArray>>,
    combine: &(dyn Fn(Vec<Vec<HostArray>>) -> Result<Vec<HostArray>> + Send + Sync),
) -> Result<T> {
    let width = examples[0].len();
    if let Some((i, e)) = examples.iter().enumerate().find(|(_, e)| e.len() != width) {
        return Err(Error::Value(format!(
            "data: batch: example {i} has {} arrays, example 0 has {width}",
            e.len()
        )));
    }
    let mut parts: Vec<Vec<HostArray>> = (0..width).map(|_| Vec::new()).collect();
    for e in examples {
        for (p, a) in e.into_iter().enumerate() {
            parts[p].push(a);
        }
    }
    unflatten(combine(parts)?)
}

/// Pads one part's arrays to a common shape and stacks them.
fn pad_part(part: usize, arrays: Vec<HostArray>, pad: &Pad) -> Result<HostArray> {
    let rank = arrays[0].dims.len();
    if let Some(a) = arrays
        .iter()
        .find(|a| a.dims.len() != rank || a.dtype != arrays[0].dtype)
    {
        return Err(Error::Value(format!(
            "data: padded_batch: part {part} is {}{:?} in one example and {}{:?} in another; \
             padding needs one dtype and rank",
            arrays[0].dtype, arrays[0].dims, a.dtype, a.dims
        )));
    }
    let longest: Vec<i64> = (0..rank)
        .map(|d| arrays.iter().map(|a| a.dims[d]).max().unwrap_or(0))
        .collect();
    let target = match pad.shapes.get(part).cloned().flatten() {
        None => longest,
        Some(shape) => fixed_shape(part, &shape, &longest)?,
    };
    let fill = pad_fill(part, pad, arrays[0].dtype)?;
    // The padded examples together take what their stacked batch does.
    let batch_dims: Vec<i64> = std::iter::once(arrays.len() as i64)
        .chain(target.iter().copied())
        .collect();
    let what = format!("padded_batch: part {part}, a batch padded to {batch_dims:?}");
    example::array_bytes(arrays[0].dtype, &batch_dims, &what)?;
    let padded = arrays
        .iter()
        .enumerate()
        .map(|(i, a)| {
            example::check_array(a, &format!("part {part} of example {i}"))?;
            pad_to(a, &target, &fill, &what)
        })
        .collect::<Result<Vec<HostArray>>>()?;
    stack(part, padded)
}

/// One element of part `part`'s padding, refused unless `dtype` holds the
/// value asked for.
fn pad_fill(part: usize, pad: &Pad, dtype: DType) -> Result<Vec<u8>> {
    let value = pad.values.get(part).copied().unwrap_or(Scalar::I64(0));
    let held = value.convert_exact(dtype).map_err(|e| {
        e.context(&format!(
            "data: padded_batch: the padding value {value} of part {part}, a {dtype} part"
        ))
    })?;
    fill_bytes(held, dtype)
}

fn fixed_shape(part: usize, shape: &[i64], longest: &[i64]) -> Result<Vec<i64>> {
    if shape.len() != longest.len() {
        return Err(Error::Value(format!(
            "data: padded_batch: part {part}'s padded shape {shape:?} has rank {}, its examples \
             rank {}",
            shape.len(),
            longest.len()
        )));
    }
    shape
        .iter()
        .zip(longest)
        .map(|(&s, &l)| match s {
            -1 => Ok(l),
            s if s >= l => Ok(s),
            s => Err(Error::Value(format!(
                "data: padded_batch: part {part} has an example {l} long in a dimension padded \
                 to {s}"
            ))),
        })
        .collect()
}
