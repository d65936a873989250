//! Input pipelines: `tf.data` for xlafn.
//!
//! A [`Dataset`] is a recipe for a stream of examples: a source (host
//! arrays, `.npy`/`.npz`/safetensors files, text and CSV files, Rust
//! iterators) followed by transformations (`map` on worker threads,
//! `filter`, `shuffle`, `batch`, `padded_batch`, `repeat`, `take`, `skip`,
//! `zip`, `interleave`, `shard`) and finally [`prefetch`](Dataset::prefetch)
//! or [`prefetch_to_device`](Dataset::prefetch_to_device), which run the
//! whole host side on their own thread so that it overlaps the compiled
//! step. Nothing runs until a pass is iterated; every pass starts from the
//! source again, so a dataset is iterated once per epoch.
//!
//! ```
//! use xlafn::data::{Dataset, Placement};
//! use xlafn::runtime::HostArray;
//! use xlafn::prelude::*;
//!
//! let features = HostArray::from_vec((0..20).map(|i| i as f32).collect(), &[10, 2]);
//! let labels = HostArray::from_vec((0..10).collect::<Vec<i32>>(), &[10]);
//! let batches = Dataset::from_tensor_slices((features, labels))?
//!     .shuffle(10, 42)
//!     .batch(4, true)
//!     .prefetch_to_device(2, Placement::Default);
//! let step = function(|x: Tensor, y: Tensor| Ok((x.reduce_sum(&[], false)?, y.reduce_max(&[], false)?)));
//! for epoch in 0..2 {
//!     for batch in batches.iter() {
//!         let (x, y) = batch?;
//!         assert_eq!(x.dims(), vec![4, 2]);
//!         step.call((&x, &y))?;
//!     }
//! }
//! assert_eq!(step.tracing_count(), 1); // every batch has one type
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! # Determinism
//!
//! Every random choice (the shuffle order) comes from the seed given and
//! the pass: [`Dataset::iter`] numbers its passes 0, 1, 2, ... and
//! [`Dataset::iter_epoch`] names one, so epoch `e` of a resumed run sees
//! exactly the order it would have seen uninterrupted. As in `tf.data`,
//! a shuffle reshuffles on every pass (and on every repetition under
//! `repeat`). Worker threads never change the order: `map_parallel` keeps
//! its input's order.
//!
//! # Errors
//!
//! A pass yields `Result`s. A failing source read, a `map` closure that
//! returns an error or panics, or a batch whose examples disagree in shape
//! yields an `Err` in that example's place, and the pass goes on with the
//! next example: nothing before or after it is lost or repeated (a batch
//! being filled keeps the examples it has). Arguments out of range (a
//! batch size of 0) are reported as the pass's first item.
//!
//! # Sizes
//!
//! Every size that comes from an argument or a file is checked for
//! overflow and bounded before anything is allocated, so that hostile
//! input is an error, never an allocation that aborts the process: a
//! padded batch (`padded_batch`, `batch_with_mask`) must fit in the memory
//! a program may use; a line of a text or CSV file is read up to
//! [`DEFAULT_MAX_LINE_BYTES`] (configurable); buffers and threads asked
//! for are capped ([`MAX_PREFETCH_DEPTH`], [`MAX_MAP_WORKERS`]); and error
//! messages quote at most a short prefix of bad input.
//!
//! # A smaller last batch
//!
//! `batch(n, false)` keeps the remainder as a smaller last batch: a
//! compiled step then traces once more for that shape (one extra program,
//! kept in the function's cache for every later epoch). `batch(n, true)`
//! drops it. [`Dataset::batch_with_mask`] pads it to `n` rows instead and
//! adds a boolean mask of the real rows, so one program serves every
//! batch and a masked loss ignores the padding.
//!
//! Layer: beside `nn` and `optimizers`, above `tensor`. Imports:
//! `runtime::HostArray`, `tensor::Tensor`, `sharding`, `export::io` (the
//! `.npy`/`.npz` codecs), `checkpoint` (safetensors dtypes), `error`;
//! `csv` for CSV files.

mod example;
mod ordered_map;
mod place;
mod random;
mod sources;
mod text;
mod transforms;

pub use example::Example;
pub use ordered_map::{MAX_MAP_WORKERS, MAX_PREFETCH_DEPTH};
pub use place::Placement;
pub use sources::CsvOptions;
pub use text::DEFAULT_MAX_LINE_BYTES;
pub use transforms::Pad;

use crate::error::{Error, Result};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// One pass's stream of examples.
pub type Elements<T> = Box<dyn Iterator<Item = Result<T>> + Send>;

type MakeElements<T> = dyn Fn(Pass) -> Elements<T> + Send + Sync;

/// Which pass over a dataset is running: the seed that shuffles draw
/// from, together with their own. Passes of nested datasets (each
/// repetition of `repeat`, each side of `zip`, each inner dataset of
/// `interleave`) get their own derived pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pass(u64);

impl Pass {
    /// The pass of epoch `epoch`.
    pub fn epoch(epoch: u64) -> Pass {
        Pass(random::mix(epoch))
    }

    /// A derived pass for the `index`th nested stream.
    pub(crate) fn child(self, index: u64) -> Pass {
        Pass(random::mix(
            self.0 ^ random::mix(index.wrapping_add(0x9e37)),
        ))
    }

    pub(crate) fn seed(self) -> u64 {
        self.0
    }
}

/// How many examples one pass yields, when it can be known beforehand.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cardinality {
    /// Exactly this many.
    Finite(u64),
    /// The pass never ends (`repeat(None)`).
    Infinite,
    /// Not known without running it (after `filter`, `interleave`, a
    /// generator).
    Unknown,
}

impl Cardinality {
    /// The count, if finite and known.
    pub fn finite(self) -> Option<u64> {
        match self {
            Cardinality::Finite(n) => Some(n),
            _ => None,
        }
    }

    pub(crate) fn map(self, f: impl FnOnce(u64) -> u64) -> Cardinality {
        match self {
            Cardinality::Finite(n) => Cardinality::Finite(f(n)),
            other => other,
        }
    }
}

/// A re-iterable pipeline of examples of type `T` (see the module docs).
///
/// Cloning is cheap (the recipe is shared) and the clone shares the pass
/// counter of [`iter`](Dataset::iter).
pub struct Dataset<T> {
    make: Arc<MakeElements<T>>,
    cardinality: Cardinality,
    passes: Arc<AtomicU64>,
}

impl<T> Clone for Dataset<T> {
    fn clone(&self) -> Self {
        Dataset {
            make: self.make.clone(),
            cardinality: self.cardinality,
            passes: self.passes.clone(),
        }
    }
}

impl<T> std::fmt::Debug for Dataset<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Dataset<{}>({:?})",
            std::any::type_name::<T>(),
            self.cardinality
        )
    }
}

impl<T: Send + 'static> Dataset<T> {
    /// A dataset from a function that starts a pass. The building block
    /// of every source and transformation; for a user's own source,
    /// [`Dataset::from_generator`] is usually simpler.
    pub fn from_pass_fn(
        cardinality: Cardinality,
        make: impl Fn(Pass) -> Elements<T> + Send + Sync + 'static,
    ) -> Dataset<T> {
        Dataset {
            make: Arc::new(make),
            cardinality,
            passes: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A dataset whose one pass yields `error` (how arguments out of range
    /// are reported: lazily, as the pass's first item).
    pub(crate) fn failing(error: Error) -> Dataset<T> {
        Dataset::from_pass_fn(Cardinality::Unknown, move |_| {
            Box::new(std::iter::once(Err(error.clone())))
        })
    }

    /// Starts the next pass: the first call is epoch 0, the next epoch 1,
    /// and so on (counted per dataset and its clones).
    pub fn iter(&self) -> Elements<T> {
        self.iter_epoch(self.passes.fetch_add(1, Ordering::Relaxed))
    }

    /// Starts the pass of epoch `epoch` (a resumed run names the epoch it
    /// resumes). Later [`iter`](Dataset::iter) calls go on from the one
    /// after it.
    pub fn iter_epoch(&self, epoch: u64) -> Elements<T> {
        self.passes.fetch_max(epoch + 1, Ordering::Relaxed);
        (self.make)(Pass::epoch(epoch))
    }

    /// Starts a pass as a nested stream of another dataset's pass.
    pub(crate) fn iter_pass(&self, pass: Pass) -> Elements<T> {
        (self.make)(pass)
    }

    /// How many examples a pass yields, if known.
    pub fn cardinality(&self) -> Cardinality {
        self.cardinality
    }

    /// One pass's examples, collected: the first error stops it.
    pub fn collect_epoch(&self, epoch: u64) -> Result<Vec<T>> {
        self.iter_epoch(epoch).collect()
    }
}

impl<T: Send + 'static> IntoIterator for &Dataset<T> {
    type Item = Result<T>;
    type IntoIter = Elements<T>;

    /// The next pass, as [`Dataset::iter`].
    fn into_iter(self) -> Elements<T> {
        self.iter()
    }
}
