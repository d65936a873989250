//! Layer: tools, above `function`. Timing a function the way the guide
//! compares execution modes: eagerly, as a `jit_compile(false)` function
//! (traced, then run op by op) and compiled whole by XLA. Imports
//! `function` (the three modes and the stages' cost analysis), `tensor`
//! (to wait for results) and `error`.
//!
//! Each mode's first call (trace and compile for the functions) is timed
//! apart from its steady state. The steady state is measured as the
//! report example measures: a warm-up, then blocks of calls, each block
//! long enough to time (the number of calls per block is calibrated from
//! the warm-up), every call's results awaited. The statistics are over
//! the blocks' per-call times: the median, the spread (min, max and the
//! median absolute deviation) and the outliers, blocks further than
//! 3 scaled MADs and 10% from the median (a machine's other load shows up
//! there).
//! With XLA's cost analysis of the compiled program, each mode's median
//! becomes achieved GFLOP/s and GB/s.
//!
//! ```
//! use xlafn::bench::{BenchOptions, compare};
//! use xlafn::prelude::*;
//! let x = Tensor::ones(&[64, 64], DType::F32);
//! let body = |x: Tensor| x.matmul(&x)?.tanh();
//! let report = compare("matmul+tanh", body, (x,), &BenchOptions::quick())?;
//! println!("{report}");
//! assert_eq!(report.rows.len(), 3);
//! assert_eq!(report.flops, Some(2.0 * 64.0 * 64.0 * 64.0));
//! # Ok::<(), xlafn::Error>(())
//! ```

use crate::error::{Error, Result};
use crate::function::{
    ArgList, FunctionOptions, IntoArgs, IntoOutput, IntoTraceTypes, Output, TraceableFn,
};
use crate::tensor::Tensor;
use std::fmt;
use std::time::{Duration, Instant};

/// How long to warm up and to time.
#[derive(Clone, Debug, PartialEq)]
pub struct BenchOptions {
    /// Calls before timing, for at least this long (and at least one).
    pub warmup: Duration,
    /// Each timed block lasts at least this long.
    pub block: Duration,
    /// Timed blocks; their per-call times make the statistics (at least
    /// 1, at most [`MAX_BLOCKS`]).
    pub blocks: usize,
}

impl Default for BenchOptions {
    /// The report example's settings: 0.2 s of warm-up, 7 blocks of at
    /// least 0.2 s.
    fn default() -> Self {
        BenchOptions {
            warmup: Duration::from_millis(200),
            block: Duration::from_millis(200),
            blocks: 7,
        }
    }
}

impl BenchOptions {
    /// Short runs for tests and examples: 20 ms of warm-up, 5 blocks of
    /// 20 ms.
    pub fn quick() -> Self {
        BenchOptions {
            warmup: Duration::from_millis(20),
            block: Duration::from_millis(20),
            blocks: 5,
        }
    }
}

/// Statistics of a steady-state measurement, in µs per call.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Stats {
    /// Calls in each timed block.
    pub calls_per_block: u64,
    /// Each block's time per call.
    pub block_us: Vec<f64>,
    /// The median of `block_us`.
    pub median_us: f64,
    /// The fastest block.
    pub min_us: f64,
    /// The slowest block.
    pub max_us: f64,
    /// The median absolute deviation of `block_us` from the median.
    pub mad_us: f64,
    /// Blocks further from the median than 3 scaled MADs (1.4826 MAD, a
    /// standard deviation for normal noise) and than 10% of it.
    pub outliers: usize,
}

impl Stats {
    fn from_blocks(calls_per_block: u64, block_us: Vec<f64>) -> Stats {
        let median_us = median(&block_us);
        let deviations: Vec<f64> = block_us.iter().map(|t| (t - median_us).abs()).collect();
        let mad_us = median(&deviations);
        // A tight spread would make a few percent an outlier: a block must
        // also be 10% off the median.
        let limit = (3.0 * 1.4826 * mad_us).max(0.1 * median_us);
        let outliers = deviations.iter().filter(|&&d| d > limit).count();
        Stats {
            calls_per_block,
            min_us: block_us.iter().copied().fold(f64::INFINITY, f64::min),
            max_us: block_us.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            median_us,
            mad_us,
            outliers,
            block_us,
        }
    }
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

/// The most timed blocks a measurement takes (100 000): statistics over
/// more add nothing, and the count sizes an allocation made before the
/// first call, so an absurd one (`usize::MAX`) is refused rather than
/// aborting the process.
pub const MAX_BLOCKS: usize = 100_000;

/// Times `call` in its steady state: warm-up, calibration, then
/// `options.blocks` blocks (1 to [`MAX_BLOCKS`]). `call` must finish its
/// work before returning (await results: a call that only launches work
/// times the launch).
pub fn measure(options: &BenchOptions, mut call: impl FnMut() -> Result<()>) -> Result<Stats> {
    if !(1..=MAX_BLOCKS).contains(&options.blocks) {
        return Err(Error::Value(format!(
            "bench: blocks must be 1 to {MAX_BLOCKS}, got {}",
            options.blocks
        )));
    }
    let began = Instant::now();
    let mut warm_calls = 0u32;
    while warm_calls == 0 || began.elapsed() < options.warmup {
        call()?;
        warm_calls += 1;
    }
    let per_call = began.elapsed().as_secs_f64() / f64::from(warm_calls);
    let calls = ((options.block.as_secs_f64() / per_call.max(1e-9)).ceil() as u64).max(1);
    let mut block_us = Vec::with_capacity(options.blocks);
    for _ in 0..options.blocks {
        let t = Instant::now();
        for _ in 0..calls {
            call()?;
        }
        block_us.push(t.elapsed().as_secs_f64() * 1e6 / calls as f64);
    }
    Ok(Stats::from_blocks(calls, block_us))
}

/// How a function ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// The closure called directly: one compiled program per op.
    Eager,
    /// A `Function` with `jit_compile(false)`: traced once, run op by op.
    Unfused,
    /// A `Function` compiled whole by XLA.
    Compiled,
}

impl fmt::Display for Mode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Mode::Eager => "eager",
            Mode::Unfused => "unfused",
            Mode::Compiled => "compiled",
        })
    }
}

/// One mode's figures.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Row {
    /// The mode.
    pub mode: Mode,
    /// The first call, in ms: trace and compile included for functions.
    pub first_call_ms: f64,
    /// The steady state.
    pub steady: Stats,
    /// The compiled program's flops per median call, in GFLOP/s.
    pub gflops: Option<f64>,
    /// The compiled program's bytes accessed per median call, in GB/s.
    pub gbps: Option<f64>,
}

/// A function timed in every mode (see [`compare`]).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Comparison {
    /// What was timed.
    pub name: String,
    /// Eager, unfused and compiled, in that order.
    pub rows: Vec<Row>,
    /// XLA's flops for one call of the compiled program (`None` where the
    /// plugin could not count them: cuBLAS and cuDNN calls on CUDA).
    pub flops: Option<f64>,
    /// XLA's bytes accessed for one call of the compiled program.
    pub bytes_accessed: Option<f64>,
}

impl Comparison {
    /// The row of `mode`.
    pub fn row(&self, mode: Mode) -> Option<&Row> {
        self.rows.iter().find(|r| r.mode == mode)
    }

    /// The comparison as JSON (the struct's fields).
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).expect("plain numbers and strings")
    }

    /// Writes [`to_json`](Self::to_json), pretty-printed, to `path`, as
    /// every file of the crate is written (a new file beside it, synced,
    /// renamed over it: a link or FIFO at `path` is replaced, never
    /// followed or waited on).
    pub fn write_json(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        let path = path.as_ref();
        let text = serde_json::to_string_pretty(&self.to_json()).expect("valid JSON");
        crate::export::replace_file(path, text.as_bytes())
    }
}

impl fmt::Display for Comparison {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.name)?;
        writeln!(
            f,
            "{:<9} {:>12} {:>12} {:>10} {:>10} {:>8} {:>9} {:>8}",
            "mode", "median µs", "first ms", "min µs", "max µs", "outliers", "GFLOP/s", "GB/s"
        )?;
        let opt = |v: Option<f64>| v.map_or_else(|| "-".to_string(), |v| format!("{v:.2}"));
        for r in &self.rows {
            writeln!(
                f,
                "{:<9} {:>12.2} {:>12.2} {:>10.2} {:>10.2} {:>8} {:>9} {:>8}",
                r.mode.to_string(),
                r.steady.median_us,
                r.first_call_ms,
                r.steady.min_us,
                r.steady.max_us,
                r.steady.outliers,
                opt(r.gflops),
                opt(r.gbps)
            )?;
        }
        Ok(())
    }
}

/// Waits for every tensor of `out`.
fn finish<O: IntoOutput>(out: O) -> Result<()> {
    let mut tensors = Vec::new();
    out.into_output()?.flatten(&mut tensors);
    tensors.iter().try_for_each(Tensor::block_until_ready)
}

/// Times `body` on `args` eagerly, as a `jit_compile(false)` function and
/// compiled, each from a fresh function (so the first calls trace and
/// compile), with XLA's cost analysis of the compiled program.
pub fn compare<Args, F>(
    name: &str,
    body: F,
    args: Args,
    options: &BenchOptions,
) -> Result<Comparison>
where
    Args: ArgList + Clone + IntoArgs<Args> + IntoTraceTypes<Args>,
    F: TraceableFn<Args> + Clone,
{
    let mut rows = Vec::with_capacity(3);
    let eager = |args: &Args| finish(body.call_with(args.clone()));
    let first = Instant::now();
    eager(&args)?;
    let first_call = first.elapsed();
    rows.push((Mode::Eager, first_call, measure(options, || eager(&args))?));

    let unfused = FunctionOptions::new()
        .jit_compile(false)
        .build(body.clone());
    let first = Instant::now();
    finish(unfused.call(args.clone())?)?;
    let first_call = first.elapsed();
    let steady = measure(options, || finish(unfused.call(args.clone())?))?;
    rows.push((Mode::Unfused, first_call, steady));

    let compiled = FunctionOptions::new().build(body);
    let first = Instant::now();
    finish(compiled.call(args.clone())?)?;
    let first_call = first.elapsed();
    let steady = measure(options, || finish(compiled.call(args.clone())?))?;
    rows.push((Mode::Compiled, first_call, steady));

    let cost = compiled.lower(args)?.compile()?.cost_analysis()?;
    let flops = cost.flops().filter(|&f| f > 0.0);
    let bytes = cost.bytes_accessed().filter(|&b| b > 0.0);
    let rate = |amount: Option<f64>, us: f64| amount.map(|a| a / (us * 1e-6) / 1e9);
    Ok(Comparison {
        name: name.to_string(),
        rows: rows
            .into_iter()
            .map(|(mode, first_call, steady)| Row {
                mode,
                first_call_ms: first_call.as_secs_f64() * 1e3,
                gflops: rate(flops, steady.median_us),
                gbps: rate(bytes, steady.median_us),
                steady,
            })
            .collect(),
        flops,
        bytes_accessed: bytes,
    })
}

impl Comparison {
    /// Writes [`write_chart`] of this comparison alone.
    pub fn write_chart(&self, path: impl AsRef<std::path::Path>) -> Result<()> {
        write_chart(std::slice::from_ref(self), path)
    }
}

/// The span of times a chart's axis covers: from 1e-300 to 1e300 µs.
/// Times beyond it (none a clock measures) are drawn at the frame: the
/// axis and plotters' tick placement need finite ends.
const CHART_LIMIT: (f64, f64) = (1e-300, 1e300);

/// A bar chart of comparisons as SVG: per comparison, one bar per mode
/// (its median µs per call, on a log scale, since eager and compiled
/// runs differ by orders of magnitude), with the min-max spread drawn as
/// a line through each bar.
///
/// Every time drawn must be finite and positive (a log scale has no place
/// for 0, NaN or infinity): anything else is an `Error::Value` naming the
/// comparison and mode, and nothing is written. The file is written as
/// every file of the crate is (a new file beside `path`, synced, renamed
/// over it: a link or FIFO there is replaced, never followed or waited
/// on).
pub fn write_chart(comparisons: &[Comparison], path: impl AsRef<std::path::Path>) -> Result<()> {
    let path = path.as_ref();
    let rows = || comparisons.iter().flat_map(|c| c.rows.iter());
    if rows().next().is_none() {
        return Err(Error::Value("bench chart: nothing to draw".into()));
    }
    for c in comparisons {
        for r in &c.rows {
            let s = &r.steady;
            for (what, v) in [
                ("min", s.min_us),
                ("median", s.median_us),
                ("max", s.max_us),
            ] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(Error::Value(format!(
                        "bench chart: {} ({}) has a {what} of {v} µs per call; a chart needs \
                         finite positive times",
                        c.name, r.mode
                    )));
                }
            }
        }
    }
    let (floor, ceiling) = CHART_LIMIT;
    let low = (rows()
        .map(|r| r.steady.min_us)
        .fold(f64::INFINITY, f64::min)
        / 2.0)
        .clamp(floor, ceiling / 10.0);
    let high =
        (rows().map(|r| r.steady.max_us).fold(0.0, f64::max) * 2.0).clamp(low * 10.0, ceiling);
    let mut svg = String::new();
    draw_chart(&mut svg, comparisons, low, high)
        .map_err(|e| Error::Value(format!("cannot draw {}: {e}", path.display())))?;
    crate::export::replace_file(path, svg.as_bytes())
}

/// Draws [`write_chart`]'s picture into `svg`, its axis from `low` to
/// `high` µs.
fn draw_chart(
    svg: &mut String,
    comparisons: &[Comparison],
    low: f64,
    high: f64,
) -> std::result::Result<(), String> {
    use plotters::prelude::*;
    let fail = |e: &dyn fmt::Display| e.to_string();
    let groups = comparisons.len() as f64;
    let root = SVGBackend::with_string(svg, (260 + 220 * comparisons.len() as u32, 480))
        .into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let mut chart = ChartBuilder::on(&root)
        .caption("µs per call (median; line: min to max)", ("sans-serif", 20))
        .margin(16)
        .x_label_area_size(36)
        .y_label_area_size(72)
        .build_cartesian_2d(0f64..groups, (low..high).log_scale())
        .map_err(|e| fail(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_labels(0)
        .y_desc("µs per call")
        .draw()
        .map_err(|e| fail(&e))?;
    let colors = [
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(0, 158, 115),
    ];
    for (k, mode) in [Mode::Eager, Mode::Unfused, Mode::Compiled]
        .into_iter()
        .enumerate()
    {
        let color = colors[k];
        let bars: Vec<(f64, &Row)> = comparisons
            .iter()
            .enumerate()
            .filter_map(|(i, c)| c.row(mode).map(|r| (i as f64 + 0.12 + 0.26 * k as f64, r)))
            .collect();
        chart
            .draw_series(bars.iter().map(|(x, r)| {
                Rectangle::new([(*x, low), (x + 0.24, r.steady.median_us)], color.filled())
            }))
            .map_err(|e| fail(&e))?
            .label(mode.to_string())
            .legend(move |(x, y)| Rectangle::new([(x, y - 5), (x + 10, y + 5)], color.filled()));
        chart
            .draw_series(bars.iter().map(|(x, r)| {
                PathElement::new(
                    vec![(x + 0.12, r.steady.min_us), (x + 0.12, r.steady.max_us)],
                    BLACK.stroke_width(2),
                )
            }))
            .map_err(|e| fail(&e))?;
    }
    chart
        .draw_series(
            comparisons.iter().enumerate().map(|(i, c)| {
                Text::new(c.name.clone(), (i as f64 + 0.12, low), ("sans-serif", 15))
            }),
        )
        .map_err(|e| fail(&e))?;
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE.mix(0.85))
        .draw()
        .map_err(|e| fail(&e))?;
    root.present().map_err(|e| fail(&e))
}
