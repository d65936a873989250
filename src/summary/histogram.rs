//! Histograms as TensorFlow's v1 `HistogramSummary` builds them
//! (`tensorflow/core/lib/histogram/histogram.cc`): the default bucket
//! limits, a value counted in the bucket whose limit is the first one
//! above it, and runs of empty buckets collapsed into one when encoded.
//! Matching TensorFlow keeps TensorBoard's rebinning and distribution
//! charts the same as for a TensorFlow run.

use std::sync::OnceLock;

use super::proto::HistogramProto;
use crate::error::{Error, Result};

/// A histogram as stored in an event file (TensorFlow's `HistogramProto`).
///
/// Bucket `i` counts the values `v` with `bucket_limits[i - 1] <= v <
/// bucket_limits[i]` (from `-f64::MAX` for the first). Empty buckets are
/// not listed one by one: a run of them is one entry with count 0 and the
/// run's last limit, as TensorFlow writes them.
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// The smallest value (`f64::MAX` when there are none, as TensorFlow).
    pub min: f64,
    /// The largest value (`-f64::MAX` when there are none).
    pub max: f64,
    /// How many values.
    pub num: f64,
    /// Their sum.
    pub sum: f64,
    /// The sum of their squares.
    pub sum_squares: f64,
    /// Each bucket's upper limit (exclusive), increasing.
    pub bucket_limits: Vec<f64>,
    /// Each bucket's count, parallel to `bucket_limits`.
    pub buckets: Vec<f64>,
}

impl Histogram {
    /// The histogram of `values` over TensorFlow's default buckets.
    ///
    /// A value that is not finite is an `Error::Value` giving its index:
    /// TensorFlow's op rejects them too, and a NaN would poison `sum`.
    pub fn from_values(values: &[f64]) -> Result<Histogram> {
        Histogram::of_finite(values)
            .map_err(|(i, v)| Error::Value(format!("histogram value {i} is {v}, not finite")))
    }

    /// [`from_values`](Histogram::from_values), failing with the index and
    /// value of the first non-finite value, for callers that word their
    /// own error.
    pub(crate) fn of_finite(values: &[f64]) -> std::result::Result<Histogram, (usize, f64)> {
        let limits = default_bucket_limits();
        let mut counts = vec![0f64; limits.len()];
        let mut h = Histogram::empty();
        for (i, &v) in values.iter().enumerate() {
            if !v.is_finite() {
                return Err((i, v));
            }
            counts[bucket_index(limits, v)] += 1.0;
            h.min = h.min.min(v);
            h.max = h.max.max(v);
            h.num += 1.0;
            h.sum += v;
            h.sum_squares += v * v;
        }
        (h.bucket_limits, h.buckets) = collapse_empty(limits, &counts);
        Ok(h)
    }

    /// No values yet: the state TensorFlow's `Histogram::Clear` leaves.
    fn empty() -> Histogram {
        Histogram {
            min: f64::MAX,
            max: -f64::MAX,
            num: 0.0,
            sum: 0.0,
            sum_squares: 0.0,
            bucket_limits: Vec::new(),
            buckets: Vec::new(),
        }
    }

    /// The bucket of `value` in this histogram's (possibly collapsed)
    /// limits, for checking where a value was counted.
    pub fn bucket_of(&self, value: f64) -> usize {
        bucket_index(&self.bucket_limits, value)
    }

    pub(crate) fn to_proto(&self) -> HistogramProto {
        HistogramProto {
            min: self.min,
            max: self.max,
            num: self.num,
            sum: self.sum,
            sum_squares: self.sum_squares,
            bucket_limit: self.bucket_limits.clone(),
            bucket: self.buckets.clone(),
        }
    }

    pub(crate) fn from_proto(p: HistogramProto) -> Histogram {
        Histogram {
            min: p.min,
            max: p.max,
            num: p.num,
            sum: p.sum,
            sum_squares: p.sum_squares,
            bucket_limits: p.bucket_limit,
            buckets: p.bucket,
        }
    }
}

/// TensorFlow's default bucket limits: `-f64::MAX`, then the negated
/// series `1e-12 * 1.1^k` below `1e20` from large to small, `0`, the
/// series from small to large, and `f64::MAX`. Built by the same repeated
/// multiplication as TensorFlow, so the limits are bit-for-bit equal.
pub fn default_bucket_limits() -> &'static [f64] {
    static LIMITS: OnceLock<Vec<f64>> = OnceLock::new();
    LIMITS.get_or_init(|| {
        let mut positive = Vec::new();
        let mut v = 1.0e-12;
        while v < 1.0e20 {
            positive.push(v);
            v *= 1.1;
        }
        positive.push(f64::MAX);
        let negative = positive.iter().rev().map(|v| -v);
        negative
            .chain(std::iter::once(0.0))
            .chain(positive.iter().copied())
            .collect()
    })
}

/// The index of the first limit above `value` (C++'s `upper_bound`),
/// clamped to the last bucket so that `f64::MAX` itself, which
/// TensorFlow would count one past the end, lands in the last bucket.
fn bucket_index(limits: &[f64], value: f64) -> usize {
    limits
        .partition_point(|&limit| limit <= value)
        .min(limits.len().saturating_sub(1))
}

/// TensorFlow's `EncodeToProto(.., preserve_zero_buckets = false)`: each
/// non-empty bucket as it is, each run of empty buckets as one entry with
/// count 0 and the run's last limit; at least one entry.
fn collapse_empty(limits: &[f64], counts: &[f64]) -> (Vec<f64>, Vec<f64>) {
    let (mut out_limits, mut out_counts) = (Vec::new(), Vec::new());
    let mut i = 0;
    while i < counts.len() {
        let (mut end, mut count) = (limits[i], counts[i]);
        i += 1;
        if count <= 0.0 {
            while i < counts.len() && counts[i] <= 0.0 {
                (end, count) = (limits[i], counts[i]);
                i += 1;
            }
        }
        out_limits.push(end);
        out_counts.push(count);
    }
    if out_limits.is_empty() {
        out_limits.push(f64::MAX);
        out_counts.push(0.0);
    }
    (out_limits, out_counts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_limits_are_symmetric_and_sorted() {
        let limits = default_bucket_limits();
        let n = limits.len();
        assert_eq!(n % 2, 1);
        assert_eq!(limits[n / 2], 0.0);
        assert_eq!(limits[n / 2 + 1], 1e-12);
        assert_eq!((limits[0], limits[n - 1]), (-f64::MAX, f64::MAX));
        assert!(limits.windows(2).all(|w| w[0] < w[1]));
        assert!((0..n).all(|i| limits[i] == -limits[n - 1 - i]));
    }

    #[test]
    fn empty_runs_collapse_as_tensorflow_does() {
        let h = Histogram::from_values(&[1.0, 1.0, -2.0]).unwrap();
        assert_eq!(h.buckets.iter().sum::<f64>(), 3.0);
        assert_eq!(h.buckets.len(), 5); // empty, -2, empty, 1 (twice), empty
        assert_eq!(*h.bucket_limits.last().unwrap(), f64::MAX);
        let empty = Histogram::from_values(&[]).unwrap();
        assert_eq!(
            (empty.bucket_limits, empty.buckets),
            (vec![f64::MAX], vec![0.0])
        );
        assert_eq!(Histogram::of_finite(&[0.0, f64::NAN]).unwrap_err().0, 1);
        assert!(Histogram::from_values(&[f64::INFINITY]).is_err());
    }

    #[test]
    fn extreme_values_stay_in_range() {
        let h = Histogram::from_values(&[f64::MAX, -f64::MAX, 0.0]).unwrap();
        assert_eq!(h.buckets.iter().sum::<f64>(), 3.0);
    }
}
