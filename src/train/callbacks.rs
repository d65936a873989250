//! Callbacks: code the loop runs at the start, after each step and epoch,
//! and at the end; checkpoints every N steps (with the position to resume
//! from) and early stopping come with the crate.

use super::{EpochLogs, History, TrainState};
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// Whether the loop goes on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Go on.
    Continue,
    /// Stop after this step (or epoch): the epoch's logs and evaluation
    /// are still reported.
    Stop,
}

/// Code run by [`Trainer::fit`](super::Trainer::fit) at fixed points; each
/// method does nothing unless overridden. An error stops the run.
pub trait Callback {
    /// Before the first step.
    fn on_train_begin(&mut self, _state: &TrainState) -> Result<()> {
        Ok(())
    }

    /// Before an epoch's first step (Keras' `on_epoch_begin`): `state`
    /// has the epoch about to run, and the step count so far (a resumed
    /// run begins mid-epoch with `step_in_epoch` steps already done).
    /// Where a per-epoch learning rate or data change goes.
    fn on_epoch_begin(&mut self, _state: &TrainState) -> Result<()> {
        Ok(())
    }

    /// After each step, with its metrics (read back).
    fn on_step_end(&mut self, _state: &TrainState, _metrics: &[(String, f64)]) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// After each epoch (and its evaluation).
    fn on_epoch_end(&mut self, _state: &TrainState, _logs: &EpochLogs) -> Result<Control> {
        Ok(Control::Continue)
    }

    /// After the last step, also when the run failed.
    fn on_train_end(&mut self, _history: &History) -> Result<()> {
        Ok(())
    }
}

/// Where a run is, saved beside each checkpoint so that a restarted run
/// goes on at the next step with the data order it would have had.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainPosition {
    /// The epoch to run next (or go on with).
    pub epoch: u64,
    /// Steps of that epoch already run.
    pub step_in_epoch: u64,
    /// Steps run in the whole run.
    pub step: u64,
}

/// The largest step or epoch count a position may hold (2^53): steps are
/// logged as `f64` (and TensorBoard steps as `i64`), which count exactly
/// up to 2^53, and no run comes near it, so a larger number is a damaged
/// or forged file, refused before the loop's counters could wrap.
pub const MAX_POSITION: u64 = 1 << 53;

impl TrainPosition {
    /// Reads a position file written beside a checkpoint. The file is
    /// untrusted input: one that does not parse, or holds a count above
    /// [`MAX_POSITION`] or more steps in the epoch than in the run, is an
    /// error naming it.
    pub fn read(path: impl AsRef<Path>) -> Result<TrainPosition> {
        let path = path.as_ref();
        // A position is a few numbers: a larger file is not one.
        let bytes = crate::export::read_regular_file(path, 64 << 10)?;
        let position: TrainPosition = serde_json::from_slice(&bytes).map_err(|e| {
            Error::Value(format!(
                "train: {} is not a training position: {e}",
                path.display()
            ))
        })?;
        position.check().map_err(|m| {
            Error::Value(format!(
                "train: {} is not a valid training position: {m}",
                path.display()
            ))
        })?;
        Ok(position)
    }

    /// Why this position cannot be one a run reached, if it cannot.
    pub(crate) fn check(&self) -> std::result::Result<(), String> {
        for (name, value) in [
            ("epoch", self.epoch),
            ("step_in_epoch", self.step_in_epoch),
            ("step", self.step),
        ] {
            if value > MAX_POSITION {
                return Err(format!(
                    "{name} {value} is above the largest count a run keeps ({MAX_POSITION})"
                ));
            }
        }
        if self.step_in_epoch > self.step {
            return Err(format!(
                "{} steps in the epoch, more than the run's {}",
                self.step_in_epoch, self.step
            ));
        }
        Ok(())
    }
}

type SaveFn = Box<dyn FnMut(&Path) -> Result<()>>;

/// Saves a checkpoint every `every` steps as `dir/ckpt-<step>.safetensors`
/// with `ckpt-<step>.json` (the [`TrainPosition`]) beside it, keeping the
/// newest `keep` (`tf.train.CheckpointManager`'s `max_to_keep`). `save`
/// writes the file: usually `checkpoint::save_training(&model,
/// &optimizer, path)`.
///
/// The checkpoints already in `dir` when a run begins (a resumed run's)
/// count toward `keep`, as `CheckpointManager` recovers its list, so a
/// restarted run does not leave `keep` more behind each time; any beyond
/// the step the run starts at (it resumed from an older one) are the
/// first to go. The position file is written as every file of the crate
/// is (a new file renamed into place): a link planted at its name is
/// replaced, never written through, and a crash leaves the old file or
/// the new one.
pub struct CheckpointEvery {
    every: u64,
    dir: PathBuf,
    keep: usize,
    save: SaveFn,
    saved: Vec<u64>,
}

impl CheckpointEvery {
    /// Every `every` steps (at least 1) into `dir` (created if missing),
    /// keeping the newest 3.
    pub fn new(
        every: u64,
        dir: impl Into<PathBuf>,
        save: impl FnMut(&Path) -> Result<()> + 'static,
    ) -> CheckpointEvery {
        CheckpointEvery {
            every: every.max(1),
            dir: dir.into(),
            keep: 3,
            save: Box::new(save),
            saved: Vec::new(),
        }
    }

    /// Keeps the newest `keep` checkpoints (at least 1).
    pub fn keep(mut self, keep: usize) -> CheckpointEvery {
        self.keep = keep.max(1);
        self
    }

    /// The steps of the checkpoints in the folder, in the order they go
    /// when `keep` is exceeded: any beyond `step` (the run resumes before
    /// them, so they belong to a run it abandons) first, then the oldest.
    fn existing(&self, step: u64) -> Result<Vec<u64>> {
        let mut steps = checkpoint_steps(&self.dir)?;
        steps.sort_unstable_by_key(|&s| (s <= step, s));
        if let Some(&newer) = steps.first().filter(|&&s| s > step) {
            tracing::warn!(target: "xlafn::train", "{} holds checkpoints beyond step {step}, where this run starts (ckpt-{newer}, ...): they are removed first as new ones are kept", self.dir.display());
        }
        Ok(steps)
    }

    fn write(&mut self, state: &TrainState, next_epoch: bool) -> Result<()> {
        std::fs::create_dir_all(&self.dir)
            .map_err(|e| Error::io("train: cannot create", &self.dir, e))?;
        let weights = self.dir.join(format!("ckpt-{}.safetensors", state.step));
        (self.save)(&weights)?;
        let position = TrainPosition {
            epoch: state.epoch + next_epoch as u64,
            step_in_epoch: if next_epoch { 0 } else { state.step_in_epoch },
            step: state.step,
        };
        let json = serde_json::to_vec_pretty(&position).map_err(|e| Error::Value(e.to_string()))?;
        // The position is written last: a checkpoint without one is
        // incomplete and `latest_checkpoint` passes it over.
        let path = self.dir.join(format!("ckpt-{}.json", state.step));
        crate::export::replace_file(&path, &json)?;
        self.saved.retain(|s| *s != state.step);
        self.saved.push(state.step);
        while self.saved.len() > self.keep {
            let old = self.saved.remove(0);
            for ext in ["json", "safetensors"] {
                std::fs::remove_file(self.dir.join(format!("ckpt-{old}.{ext}"))).ok();
            }
        }
        Ok(())
    }
}

impl Callback for CheckpointEvery {
    fn on_train_begin(&mut self, state: &TrainState) -> Result<()> {
        self.saved = self.existing(state.step)?;
        Ok(())
    }

    fn on_step_end(&mut self, state: &TrainState, _metrics: &[(String, f64)]) -> Result<Control> {
        if state.step.is_multiple_of(self.every) {
            self.write(state, false)?;
        }
        Ok(Control::Continue)
    }
}

/// The step of a checkpoint position file's name, `ckpt-<step>.json`,
/// where `<step>` is ASCII digits without leading zeros, as the callback
/// writes it (`str::parse` would also take `+7` or `007`, names whose
/// step then points at another file).
fn position_step(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("ckpt-")?.strip_suffix(".json")?;
    let canonical = digits == "0" || !digits.starts_with('0');
    if digits.is_empty() || !canonical || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The steps of the position files in `dir` whose weights file is there
/// too (none when `dir` does not exist).
fn checkpoint_steps(dir: &Path) -> Result<Vec<u64>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io("train: cannot list", dir, e)),
    };
    Ok(entries
        .filter_map(|e| e.ok())
        .filter_map(|e| position_step(e.file_name().to_str()?))
        .filter(|step| dir.join(format!("ckpt-{step}.safetensors")).is_file())
        .collect())
}

/// The newest complete checkpoint in `dir` (its weights file and the
/// position to resume from), if any.
///
/// Position files are untrusted input, and the newest may be damaged (a
/// crash mid-write on a filesystem without atomic renames, a truncated
/// copy): one that does not parse, holds an impossible position or names
/// a step other than its file name's is passed over with a warning, and
/// the newest valid one is used, as an older checkpoint is still a good
/// place to resume. Only when none is valid is the newest one's problem
/// the error (starting afresh silently would hide the damage). Names
/// other than `ckpt-<digits>.json` are ignored.
pub fn latest_checkpoint(dir: impl AsRef<Path>) -> Result<Option<(PathBuf, TrainPosition)>> {
    let dir = dir.as_ref();
    let mut steps = checkpoint_steps(dir)?;
    steps.sort_unstable_by(|a, b| b.cmp(a));
    let mut newest_error = None;
    for step in steps {
        let path = dir.join(format!("ckpt-{step}.json"));
        let problem = match TrainPosition::read(&path) {
            Ok(position) if position.step == step => {
                if let Some(e) = &newest_error {
                    tracing::warn!(target: "xlafn::train", "resuming from the older checkpoint {}: {e}", path.display());
                }
                return Ok(Some((
                    dir.join(format!("ckpt-{step}.safetensors")),
                    position,
                )));
            }
            Ok(position) => Error::Value(format!(
                "train: {} says step {}, its name step {step}",
                path.display(),
                position.step
            )),
            Err(e) => e,
        };
        newest_error.get_or_insert(problem);
    }
    newest_error.map_or(Ok(None), Err)
}

/// Stops when an epoch metric has not improved for `patience` epochs
/// (`tf.keras.callbacks.EarlyStopping`, mode `min`: a lower value is
/// better, by more than `min_delta`).
pub struct EarlyStopping {
    monitor: String,
    patience: u64,
    min_delta: f64,
    best: f64,
    waited: u64,
}

impl EarlyStopping {
    /// Watches `monitor` (`"val_loss"`, `"loss"`) with `patience` epochs.
    pub fn new(monitor: &str, patience: u64) -> EarlyStopping {
        EarlyStopping {
            monitor: monitor.to_string(),
            patience,
            min_delta: 0.0,
            best: f64::INFINITY,
            waited: 0,
        }
    }

    /// The least decrease that counts as an improvement.
    pub fn min_delta(mut self, min_delta: f64) -> EarlyStopping {
        self.min_delta = min_delta.abs();
        self
    }
}

impl Callback for EarlyStopping {
    fn on_epoch_end(&mut self, _state: &TrainState, logs: &EpochLogs) -> Result<Control> {
        let Some(value) = logs.get(&self.monitor) else {
            let have: Vec<&str> = logs.metrics.iter().map(|(n, _)| n.as_str()).collect();
            return Err(Error::Value(format!(
                "train: early stopping watches '{}', but the epoch logged {have:?}",
                self.monitor
            )));
        };
        if value < self.best - self.min_delta {
            self.best = value;
            self.waited = 0;
            return Ok(Control::Continue);
        }
        self.waited += 1;
        if self.waited >= self.patience {
            tracing::info!(target: "xlafn::train", "early stopping: {} has not improved on {:.6} for {} epochs", self.monitor, self.best, self.waited);
            return Ok(Control::Stop);
        }
        Ok(Control::Continue)
    }
}

#[cfg(test)]
mod tests {
    use super::position_step;

    #[test]
    fn position_names_are_canonical_digits() {
        assert_eq!(position_step("ckpt-0.json"), Some(0));
        assert_eq!(position_step("ckpt-12.json"), Some(12));
        for stray in [
            "ckpt-+7.json",
            "ckpt-007.json",
            "ckpt-.json",
            "ckpt--1.json",
            "ckpt- 7.json",
            "ckpt-7.json.tmp",
            "ckpt-99999999999999999999.json",
        ] {
            assert_eq!(position_step(stray), None, "{stray}");
        }
    }
}
