//! The progress bar: one per epoch, with steps/s, the time left and the
//! running means of the metrics (`indicatif`). Off a terminal it draws
//! nothing, so logs and CI output stay clean.

use crate::data::Cardinality;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// When the loop shows a progress bar.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Progress {
    /// On a terminal (stderr) only.
    #[default]
    Auto,
    /// Never.
    Off,
}

pub(super) struct EpochBar(Option<ProgressBar>);

impl EpochBar {
    pub(super) fn new(progress: Progress, epoch: u64, epochs: u64, steps: Cardinality) -> EpochBar {
        let target = ProgressDrawTarget::stderr();
        if progress == Progress::Off || target.is_hidden() {
            return EpochBar(None);
        }
        let bar = match steps.finite() {
            Some(n) => ProgressBar::with_draw_target(Some(n), target),
            None => ProgressBar::with_draw_target(None, target),
        };
        let template = if steps.finite().is_some() {
            "{prefix} [{bar:28}] {pos}/{len} eta {eta} {msg}"
        } else {
            "{prefix} {spinner} {pos} steps {msg}"
        };
        if let Ok(style) = ProgressStyle::with_template(template) {
            bar.set_style(style.progress_chars("=> "));
        }
        bar.set_prefix(format!("epoch {}/{epochs}", epoch + 1));
        EpochBar(Some(bar))
    }

    pub(super) fn step(&self, means: &[(String, f64)]) {
        if let Some(bar) = &self.0 {
            bar.inc(1);
            let rate = bar.position() as f64 / bar.elapsed().as_secs_f64().max(1e-9);
            let mut text = vec![format!("{rate:.1} steps/s")];
            text.extend(means.iter().map(|(n, v)| format!("{n} {v:.4}")));
            bar.set_message(text.join("  "));
        }
    }

    pub(super) fn finish(&self) {
        if let Some(bar) = &self.0 {
            bar.finish();
        }
    }
}
