//! The protobuf messages of a TensorBoard event file, derived by hand with
//! prost (no protoc, no `.proto` files), holding only the fields this
//! module writes or reads.
//!
//! Field numbers are TensorFlow's: `tensorflow/core/util/event.proto`
//! (`Event`) and `tensorflow/core/framework/summary.proto` (`Summary`,
//! `Summary.Value`, `HistogramProto`). Fields left out (a graph, a session
//! log, a value's metadata, images, tensors) are skipped when decoding, as
//! protobuf skips any unknown field, so reading a file TensorFlow wrote
//! never fails on them.

/// `tensorflow.Event`: one record of an event file.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct EventProto {
    /// Seconds since the Unix epoch when the event was written.
    #[prost(double, tag = "1")]
    pub wall_time: f64,
    /// The training step the event belongs to.
    #[prost(int64, tag = "2")]
    pub step: i64,
    /// `oneof what`: only the two members this module knows.
    #[prost(oneof = "WhatProto", tags = "3, 5")]
    pub what: Option<WhatProto>,
}

/// The members of `Event.what` kept here: `file_version = 3` and
/// `summary = 5`. Any other member (a graph, a log message) decodes as
/// `None`.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum WhatProto {
    /// The first event of a file: `brain.Event:2`.
    #[prost(string, tag = "3")]
    FileVersion(String),
    /// Summary values (scalars, histograms).
    #[prost(message, tag = "5")]
    Summary(SummaryProto),
}

/// `tensorflow.Summary`: `repeated Value value = 1`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct SummaryProto {
    /// The named values of one event.
    #[prost(message, repeated, tag = "1")]
    pub value: Vec<ValueProto>,
}

/// `tensorflow.Summary.Value`: a tag and one value.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct ValueProto {
    /// The name TensorBoard groups charts by (`loss`, `train/accuracy`).
    #[prost(string, tag = "1")]
    pub tag: String,
    /// `oneof value`: a scalar or a histogram; anything else is `None`.
    #[prost(oneof = "ValueKindProto", tags = "2, 5")]
    pub value: Option<ValueKindProto>,
}

/// The members of `Summary.Value.value` kept here.
#[derive(Clone, PartialEq, prost::Oneof)]
pub(crate) enum ValueKindProto {
    /// `simple_value = 2`: a v1 scalar summary, a 32-bit float.
    #[prost(float, tag = "2")]
    SimpleValue(f32),
    /// `histo = 5`: a v1 histogram summary.
    #[prost(message, tag = "5")]
    Histo(HistogramProto),
}

/// `tensorflow.HistogramProto`, the encoding of TensorFlow's
/// `histogram::Histogram`: bucket `i` counts the values in
/// `[bucket_limit[i-1], bucket_limit[i])`, the first from `-DBL_MAX`.
#[derive(Clone, PartialEq, prost::Message)]
pub(crate) struct HistogramProto {
    /// The smallest value.
    #[prost(double, tag = "1")]
    pub min: f64,
    /// The largest value.
    #[prost(double, tag = "2")]
    pub max: f64,
    /// How many values.
    #[prost(double, tag = "3")]
    pub num: f64,
    /// Their sum.
    #[prost(double, tag = "4")]
    pub sum: f64,
    /// The sum of their squares.
    #[prost(double, tag = "5")]
    pub sum_squares: f64,
    /// Upper bucket limits (packed, as proto3 packs repeated doubles).
    #[prost(double, repeated, tag = "6")]
    pub bucket_limit: Vec<f64>,
    /// Bucket counts, parallel to `bucket_limit` (packed).
    #[prost(double, repeated, tag = "7")]
    pub bucket: Vec<f64>,
}
