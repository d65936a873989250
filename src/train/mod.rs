//! A training loop to use or leave: `fit`-style epochs of a compiled step
//! over a [`Dataset`], with evaluation, callbacks (checkpoints every N
//! steps, early stopping), resumption, a progress bar, and metrics out
//! (`tracing` events, a JSON-lines or CSV log, TensorBoard event files, a
//! loss-curve picture).
//!
//! The step is any closure from a batch to named scalar [`Metrics`]
//! (usually a [`Function`](crate::Function) call that also updates the
//! model): the loop owns no model and no optimizer, so it fits every
//! training style the rest of the crate allows.
//!
//! ```
//! use xlafn::data::{Dataset, Placement};
//! use xlafn::prelude::*;
//! use xlafn::runtime::HostArray;
//! use xlafn::train::{Metrics, Progress, Trainer};
//!
//! // Fit y = 3x with one weight.
//! let xs: Vec<f32> = (0..64).map(|i| i as f32 / 64.0).collect();
//! let ys: Vec<f32> = xs.iter().map(|x| 3.0 * x).collect();
//! let data = Dataset::from_tensor_slices((HostArray::from_vec(xs, &[64]), HostArray::from_vec(ys, &[64])))?
//!     .shuffle(64, 0)
//!     .batch(16, true)
//!     .prefetch_to_device(2, Placement::Default);
//! let w = Variable::new(Tensor::scalar(0f32));
//! let sgd = std::sync::Arc::new(xlafn::optimizers::Sgd::new(0.5));
//! let step = {
//!     let w = w.clone();
//!     function(move |x: Tensor, y: Tensor| {
//!         sgd.minimize(&[w.clone()], || ((x * w.read() - y).square()?).reduce_mean(&[], false))
//!     })
//! };
//! let history = Trainer::new(move |(x, y): (Tensor, Tensor)| Ok(Metrics::loss(step.call((&x, &y))?)))
//!     .epochs(20)
//!     .progress(Progress::Off)
//!     .fit(&data)?;
//! assert!(history.last("loss").unwrap() < 1e-3);
//! assert!((w.read().item::<f32>()? - 3.0).abs() < 0.05);
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! Layer: above `data`, `summary`, `function` and `checkpoint` (it calls
//! only their public APIs). Imports: `data::Dataset`, `summary`,
//! `tensor::Tensor`, `error`; `indicatif` for the bar, `tracing`.

mod callbacks;
mod progress;

pub use callbacks::{
    Callback, CheckpointEvery, Control, EarlyStopping, MAX_POSITION, TrainPosition,
    latest_checkpoint,
};
pub use progress::Progress;

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::summary::{EventWriter, MetricsLog, write_curve_svg};
use crate::tensor::Tensor;
use std::path::PathBuf;

/// What a step returns: named scalar tensors (the loss first, by
/// convention), read back after every step. A step's inputs are already
/// on the device by then (`prefetch_to_device`), so the read is the only
/// wait between steps.
#[derive(Clone, Debug, Default)]
pub struct Metrics(Vec<(String, Tensor)>);

impl Metrics {
    /// No metrics yet.
    pub fn new() -> Metrics {
        Metrics::default()
    }

    /// Just a loss, named `loss`.
    pub fn loss(loss: Tensor) -> Metrics {
        Metrics::new().with("loss", loss)
    }

    /// Adds a named scalar.
    pub fn with(mut self, name: &str, value: Tensor) -> Metrics {
        self.0.push((name.to_string(), value));
        self
    }

    /// Reads the values to the host (as f64). The conversion is done on
    /// the host: this runs after every step, where an eager cast would
    /// add a program launch per metric.
    fn read(&self) -> Result<Vec<(String, f64)>> {
        self.0
            .iter()
            .map(|(name, t)| match t.to_f64_vec()?.as_slice() {
                [v] => Ok((name.clone(), *v)),
                values => Err(Error::Value(format!(
                    "train: metric '{name}' must be one number, got {} ({} values)",
                    t.tensor_type(),
                    values.len()
                ))),
            })
            .collect()
    }
}

/// Where the loop is: epochs and steps are counted from 0; `step` counts
/// steps over the whole run (as the optimizer's iterations do).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TrainState {
    /// The epoch running.
    pub epoch: u64,
    /// Steps run so far in the whole run.
    pub step: u64,
    /// Steps run so far in this epoch.
    pub step_in_epoch: u64,
}

/// One epoch's results: the training metrics' means over its steps, then
/// the evaluation metrics (named `val_<name>`), and any logged scalars.
#[derive(Clone, Debug, PartialEq)]
pub struct EpochLogs {
    /// The epoch.
    pub epoch: u64,
    /// The run's step count when the epoch ended.
    pub last_step: u64,
    /// Name and value, in the step's order.
    pub metrics: Vec<(String, f64)>,
}

impl EpochLogs {
    /// The value of a metric, if logged.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.metrics
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| *v)
    }
}

/// What `fit` did.
#[derive(Clone, Debug, Default)]
pub struct History {
    /// Each epoch run.
    pub epochs: Vec<EpochLogs>,
    /// `(step, value)` of the first metric at every step (the loss curve).
    pub steps: Vec<(u64, f64)>,
    /// Did a callback stop the run?
    pub stopped_early: bool,
}

impl History {
    /// A metric's value in each epoch.
    pub fn metric(&self, name: &str) -> Vec<f64> {
        self.epochs.iter().filter_map(|e| e.get(name)).collect()
    }

    /// A metric's value in the last epoch.
    pub fn last(&self, name: &str) -> Option<f64> {
        self.epochs.last().and_then(|e| e.get(name))
    }
}

type StepFn<B> = Box<dyn FnMut(B) -> Result<Metrics>>;
type ScalarFn = Box<dyn FnMut(&TrainState) -> Result<f64>>;

/// The loop (see the module docs); built with its methods, run by
/// [`fit`](Trainer::fit).
pub struct Trainer<B> {
    step: StepFn<B>,
    epochs: u64,
    eval: Option<(Dataset<B>, StepFn<B>)>,
    callbacks: Vec<Box<dyn Callback>>,
    scalars: Vec<(String, ScalarFn)>,
    progress: Progress,
    events: Option<EventWriter>,
    log: Option<MetricsLog>,
    curve: Option<PathBuf>,
    histograms: Vec<(String, crate::Variable)>,
    start: TrainPosition,
    terminate_on_nan: bool,
    last: History,
}

impl<B: Send + 'static> Trainer<B> {
    /// A loop around `step`, one epoch, a progress bar on a terminal.
    pub fn new(step: impl FnMut(B) -> Result<Metrics> + 'static) -> Trainer<B> {
        Trainer {
            step: Box::new(step),
            epochs: 1,
            eval: None,
            callbacks: Vec::new(),
            scalars: Vec::new(),
            progress: Progress::Auto,
            events: None,
            log: None,
            curve: None,
            histograms: Vec::new(),
            start: TrainPosition::default(),
            terminate_on_nan: true,
            last: History::default(),
        }
    }

    /// Runs `epochs` epochs (counting from the resumed one, if any: the
    /// run ends after epoch `epochs - 1`).
    pub fn epochs(mut self, epochs: u64) -> Self {
        self.epochs = epochs;
        self
    }

    /// After each epoch, runs `step` over `data` and reports the metrics'
    /// means as `val_<name>`.
    pub fn evaluate(
        mut self,
        data: Dataset<B>,
        step: impl FnMut(B) -> Result<Metrics> + 'static,
    ) -> Self {
        self.eval = Some((data, Box::new(step)));
        self
    }

    /// Adds a callback (run in the order added).
    pub fn callback(mut self, callback: impl Callback + 'static) -> Self {
        self.callbacks.push(Box::new(callback));
        self
    }

    /// Logs another scalar at every step (and its epoch mean), computed on
    /// the host from the position: a learning rate, say.
    pub fn log_scalar(
        mut self,
        name: &str,
        value: impl FnMut(&TrainState) -> Result<f64> + 'static,
    ) -> Self {
        self.scalars.push((name.to_string(), Box::new(value)));
        self
    }

    /// Logs `learning_rate` from an optimizer's schedule at every step
    /// (the schedule is evaluated at the run's step count, as the
    /// optimizer evaluates it at its iteration count).
    pub fn log_learning_rate(
        self,
        schedule: std::sync::Arc<dyn crate::optimizers::Schedule>,
    ) -> Self {
        self.log_scalar("learning_rate", move |state| {
            let at = schedule.at(&Tensor::scalar(state.step as f32))?;
            Ok(at.item::<f32>()? as f64)
        })
    }

    /// The progress bar: on a terminal only (the default), always, or off.
    pub fn progress(mut self, progress: Progress) -> Self {
        self.progress = progress;
        self
    }

    /// Writes TensorBoard event files under `logdir`: `train/<name>` per
    /// step, `epoch/<name>` (and `epoch/val_<name>`) per epoch.
    pub fn tensorboard(mut self, logdir: impl AsRef<std::path::Path>) -> Result<Self> {
        self.events = Some(EventWriter::create(logdir)?);
        Ok(self)
    }

    /// After each epoch, writes a histogram of each variable's values to
    /// the TensorBoard files as `weights/<name>` (name them with
    /// `Module::named_variables`). Needs [`tensorboard`](Trainer::tensorboard).
    pub fn histograms(mut self, variables: Vec<(String, crate::Variable)>) -> Self {
        self.histograms = variables;
        self
    }

    /// Writes every step's metrics (with `epoch`) to a JSON-lines or CSV
    /// log.
    pub fn metrics_log(mut self, log: MetricsLog) -> Self {
        self.log = Some(log);
        self
    }

    /// Draws the loss curve (the first metric per step, and the epochs'
    /// `val_` value of it) as an SVG picture at the end of the run. The
    /// picture is written as [`write_curve_svg`] writes (a new file renamed
    /// over `path`; a link there is replaced, not followed), and `fit`
    /// checks before the first step that a file can be created there, so
    /// a bad path fails at once rather than after the last epoch.
    pub fn loss_curve(mut self, path: impl Into<PathBuf>) -> Self {
        self.curve = Some(path.into());
        self
    }

    /// Starts at a saved position (see [`CheckpointEvery`] and
    /// [`latest_checkpoint`]): the epoch's pass is the one an
    /// uninterrupted run would have iterated, and the steps it had run are
    /// skipped. Restore the model and optimizer first.
    pub fn resume_from(mut self, position: TrainPosition) -> Self {
        self.start = position;
        self
    }

    /// Whether a step whose first metric (the loss) is NaN or infinite
    /// stops the run with an error (the default, as Keras'
    /// `TerminateOnNaN` stops it: the steps after it would only train on
    /// NaN weights). The step is still logged, but no callback runs after
    /// it, so no checkpoint of the NaN weights is written. `false` trains
    /// on, as Keras does without the callback.
    pub fn terminate_on_nan(mut self, terminate: bool) -> Self {
        self.terminate_on_nan = terminate;
        self
    }

    /// What the last [`fit`](Trainer::fit) did, also when it failed (a
    /// NaN loss, a callback's error): the epochs it completed and every
    /// step's loss up to the failure.
    pub fn history(&self) -> &History {
        &self.last
    }

    /// Runs the loop over `data`, one pass per epoch (see
    /// [`Dataset::iter_epoch`]). An error from the data, a step or a
    /// callback (or a NaN loss, see
    /// [`terminate_on_nan`](Trainer::terminate_on_nan)) stops the run and
    /// is returned; what was logged so far is flushed first, and the
    /// history so far stays readable as [`history`](Trainer::history).
    ///
    /// Metric names are checked at every step: two metrics of one
    /// name (a step's and a [`log_scalar`](Trainer::log_scalar)'s, say)
    /// would be merged into one mean, so they are an error naming it, as
    /// are `epoch` and `step`, the names of the log's own columns (Keras'
    /// `History` keeps `epoch` apart from the metrics, too).
    pub fn fit(&mut self, data: &Dataset<B>) -> Result<History> {
        self.last = History::default();
        if !self.histograms.is_empty() && self.events.is_none() {
            return Err(Error::FailedPrecondition(
                "train: histograms go to TensorBoard files; add .tensorboard(dir)".into(),
            ));
        }
        check_position(&self.start, data.cardinality())?;
        if let Some(path) = &self.curve {
            crate::export::check_writable(path).map_err(|e| {
                Error::Value(format!(
                    "train: the loss curve cannot be written to {}: {e}",
                    path.display()
                ))
            })?;
        }
        let mut history = History::default();
        let result = self.run(data, &mut history);
        let flushed = self.finish(&history);
        self.last = history.clone();
        result.and(flushed).map(|_| history)
    }

    fn run(&mut self, data: &Dataset<B>, history: &mut History) -> Result<()> {
        let mut state = TrainState {
            epoch: self.start.epoch,
            step: self.start.step,
            step_in_epoch: 0,
        };
        for callback in &mut self.callbacks {
            callback.on_train_begin(&state)?;
        }
        while state.epoch < self.epochs {
            let skip = if state.epoch == self.start.epoch {
                self.start.step_in_epoch
            } else {
                0
            };
            let (logs, control) = self.run_epoch(data, &mut state, skip, history)?;
            history.epochs.push(logs);
            if control == Control::Stop {
                history.stopped_early = true;
                break;
            }
            state.epoch += 1;
        }
        Ok(())
    }

    fn run_epoch(
        &mut self,
        data: &Dataset<B>,
        state: &mut TrainState,
        skip: u64,
        history: &mut History,
    ) -> Result<(EpochLogs, Control)> {
        let bar =
            progress::EpochBar::new(self.progress, state.epoch, self.epochs, data.cardinality());
        let mut means = RunningMeans::default();
        let mut control = Control::Continue;
        state.step_in_epoch = skip;
        for callback in &mut self.callbacks {
            callback.on_epoch_begin(state)?;
        }
        for batch in data.iter_epoch(state.epoch).skip(skip as usize) {
            let metrics = (self.step)(batch?)?;
            // Bounded by `MAX_POSITION` at the start; checked all the same,
            // since a wrapped count would resume at a wrong place.
            state.step = state
                .step
                .checked_add(1)
                .ok_or_else(|| Error::Value("train: the step count overflows u64".to_string()))?;
            state.step_in_epoch += 1;
            // Read at once: a callback after step k (a checkpoint) must
            // see the model as step k left it.
            control = self.after_step(state, &metrics, &mut means, &bar, history)?;
            if control == Control::Stop {
                break;
            }
        }
        bar.finish();
        let mut logs = EpochLogs {
            epoch: state.epoch,
            last_step: state.step,
            metrics: means.means(),
        };
        self.evaluate_epoch(state.epoch, &mut logs)?;
        self.report_epoch(state, &logs)?;
        for callback in &mut self.callbacks {
            if callback.on_epoch_end(state, &logs)? == Control::Stop {
                control = Control::Stop;
            }
        }
        Ok((logs, control))
    }

    fn after_step(
        &mut self,
        state: &TrainState,
        metrics: &Metrics,
        means: &mut RunningMeans,
        bar: &progress::EpochBar,
        history: &mut History,
    ) -> Result<Control> {
        let mut values = metrics.read()?;
        for (name, f) in &mut self.scalars {
            values.push((name.clone(), f(state)?));
        }
        check_metric_names(&values, "")?;
        if let Some((_, first)) = values.first() {
            history.steps.push((state.step, *first));
        }
        means.add(&values);
        bar.step(&means.means());
        self.report_step(state, &values)?;
        if let Some((name, first)) = values.first()
            && self.terminate_on_nan
            && !first.is_finite()
        {
            return Err(Error::Value(format!(
                "train: {name} is {first} at step {} (epoch {}); stopped, as Keras' \
                 TerminateOnNaN stops (the history so far is Trainer::history; \
                 .terminate_on_nan(false) trains on)",
                state.step, state.epoch
            )));
        }
        let mut control = Control::Continue;
        for callback in &mut self.callbacks {
            if callback.on_step_end(state, &values)? == Control::Stop {
                control = Control::Stop;
            }
        }
        Ok(control)
    }

    fn report_step(&mut self, state: &TrainState, values: &[(String, f64)]) -> Result<()> {
        tracing::debug!(target: "xlafn::train", epoch = state.epoch, step = state.step, metrics = ?values, "step");
        if let Some(events) = &mut self.events {
            for (name, v) in values {
                events.add_scalar(&format!("train/{name}"), *v, state.step as i64)?;
            }
        }
        if let Some(log) = &mut self.log {
            let mut row: Vec<(&str, f64)> = vec![("epoch", state.epoch as f64)];
            row.extend(values.iter().map(|(n, v)| (n.as_str(), *v)));
            log.log(state.step as i64, &row)?;
        }
        Ok(())
    }

    fn report_epoch(&mut self, state: &TrainState, logs: &EpochLogs) -> Result<()> {
        let text: Vec<String> = logs
            .metrics
            .iter()
            .map(|(n, v)| format!("{n} {v:.4}"))
            .collect();
        tracing::info!(target: "xlafn::train", epoch = state.epoch, step = state.step, "epoch {} of {}: {}", state.epoch + 1, self.epochs, text.join(", "));
        if let Some(events) = &mut self.events {
            for (name, v) in &logs.metrics {
                events.add_scalar(&format!("epoch/{name}"), *v, state.epoch as i64)?;
            }
            for (name, variable) in &self.histograms {
                let values = variable.try_read()?.to_f64_vec()?;
                events.add_histogram(&format!("weights/{name}"), &values, state.epoch as i64)?;
            }
            events.flush()?;
        }
        Ok(())
    }

    fn evaluate_epoch(&mut self, epoch: u64, logs: &mut EpochLogs) -> Result<()> {
        let Some((data, step)) = &mut self.eval else {
            return Ok(());
        };
        let mut means = RunningMeans::default();
        for batch in data.iter_epoch(epoch) {
            let values = step(batch?)?.read()?;
            check_metric_names(&values, "evaluation ")?;
            means.add(&values);
        }
        for (name, _) in means.means() {
            let val = format!("val_{name}");
            if logs.get(&val).is_some() {
                return Err(Error::Value(format!(
                    "train: the training step logs '{val}', which is also the name of the \
                     evaluation's '{name}'; name one of them otherwise"
                )));
            }
        }
        logs.metrics.extend(
            means
                .means()
                .into_iter()
                .map(|(n, v)| (format!("val_{n}"), v)),
        );
        Ok(())
    }

    fn finish(&mut self, history: &History) -> Result<()> {
        for callback in &mut self.callbacks {
            callback.on_train_end(history)?;
        }
        if let Some(events) = &mut self.events {
            events.flush()?;
        }
        if let Some(log) = &mut self.log {
            log.flush()?;
        }
        match &self.curve {
            Some(path) if !history.steps.is_empty() => draw_curve(path, history),
            _ => Ok(()),
        }
    }
}

/// The most steps a resumed run skips in an epoch of a dataset whose
/// length is infinite or unknown (2^24): resuming skips the steps the
/// epoch had run, one item at a time, and nothing else bounds a count
/// read from a (forged or damaged) position file there. Longer epochs of
/// such data resume from an epoch boundary, or give the data a length
/// (`take`) so that the count is checked against it instead.
pub const MAX_UNBOUNDED_SKIP: u64 = 1 << 24;

/// A position to resume from must be one a run over `data` could reach
/// (the position file is untrusted input: a bogus count must not make the
/// loop skip forever): no count above [`MAX_POSITION`], no more steps in
/// the epoch than in the run nor than the epoch has (or than
/// [`MAX_UNBOUNDED_SKIP`] where its length is not known).
fn check_position(position: &TrainPosition, steps: crate::data::Cardinality) -> Result<()> {
    let problem = match (position.check(), steps.finite()) {
        (Err(m), _) => Some(m),
        (Ok(()), Some(n)) if position.step_in_epoch > n => Some(format!("an epoch has {n} steps")),
        (Ok(()), None) if position.step_in_epoch > MAX_UNBOUNDED_SKIP => Some(format!(
            "the data's length is not known, and a resumed run skips at most \
             {MAX_UNBOUNDED_SKIP} steps of such data"
        )),
        _ => None,
    };
    if let Some(problem) = problem {
        return Err(Error::Value(format!(
            "train: cannot resume at step {} of epoch {} (step {} of the run): {problem}",
            position.step_in_epoch, position.epoch, position.step,
        )));
    }
    Ok(())
}

/// Errors on a metric name given twice in one step (their values would be
/// merged into one mean) and on `epoch` and `step`, the log's own columns.
fn check_metric_names(values: &[(String, f64)], what: &str) -> Result<()> {
    for (i, (name, _)) in values.iter().enumerate() {
        if name == "epoch" || name == "step" {
            return Err(Error::Value(format!(
                "train: '{name}' is a reserved column name (the loop logs the {name} itself); \
                 name the {what}metric otherwise"
            )));
        }
        if values[..i].iter().any(|(n, _)| n == name) {
            return Err(Error::Value(format!(
                "train: two {what}metrics are named '{name}' (they would be merged into one \
                 mean); name them apart"
            )));
        }
    }
    Ok(())
}

fn draw_curve(path: &std::path::Path, history: &History) -> Result<()> {
    let first = history.epochs.first().and_then(|e| e.metrics.first());
    let name = first.map_or_else(|| "loss".to_string(), |(n, _)| n.clone());
    let val_name = format!("val_{name}");
    let steps: Vec<(f64, f64)> = history.steps.iter().map(|&(s, v)| (s as f64, v)).collect();
    // Each validation value sits at the step that ended its epoch.
    let ends: Vec<(f64, f64)> = history
        .epochs
        .iter()
        .filter_map(|e| Some((e.last_step as f64, e.get(&val_name)?)))
        .collect();
    let mut series: Vec<(&str, &[(f64, f64)])> = vec![(name.as_str(), &steps)];
    if !ends.is_empty() {
        series.push((val_name.as_str(), &ends));
    }
    write_curve_svg(path, &format!("{name} per step"), &series)
}

/// Means of named values over an epoch, in first-seen order.
#[derive(Default)]
struct RunningMeans(Vec<(String, f64, u64)>);

impl RunningMeans {
    fn add(&mut self, values: &[(String, f64)]) {
        for (name, v) in values {
            match self.0.iter_mut().find(|(n, _, _)| n == name) {
                Some((_, sum, count)) => {
                    *sum += v;
                    *count += 1;
                }
                None => self.0.push((name.clone(), *v, 1)),
            }
        }
    }

    fn means(&self) -> Vec<(String, f64)> {
        self.0
            .iter()
            .map(|(n, s, c)| (n.clone(), s / *c as f64))
            .collect()
    }
}
