//! `xlafn::train`: the fit loop's epochs, means, evaluation, callbacks,
//! checkpoints and resumption (bit for bit), and its metrics out (JSON
//! lines, TensorBoard event files read back, the loss curve).

#[path = "common/bounded.rs"]
mod bounded;
#[path = "common/scratch.rs"]
mod scratch;

use std::sync::Arc;
use xlafn::data::{Dataset, Placement};
use xlafn::module::Module;
use xlafn::optimizers::{ExponentialDecay, Optimizer, Sgd};
use xlafn::prelude::*;
use xlafn::runtime::HostArray;
use xlafn::summary::{EventWhat, MetricsLog, read_events};
use xlafn::train::{
    Callback, CheckpointEvery, Control, EarlyStopping, Metrics, Progress, TrainPosition,
    TrainState, Trainer, latest_checkpoint,
};

/// 40 examples of y = 2x - 1, shuffled per epoch, in batches of 8.
fn line_data() -> Dataset<(Tensor, Tensor)> {
    let xs: Vec<f32> = (0..40).map(|i| i as f32 / 40.0).collect();
    let ys: Vec<f32> = xs.iter().map(|x| 2.0 * x - 1.0).collect();
    Dataset::from_tensor_slices((
        HostArray::from_vec(xs, &[40]),
        HostArray::from_vec(ys, &[40]),
    ))
    .unwrap()
    .shuffle(40, 11)
    .batch(8, true)
    .prefetch_to_device(2, Placement::Default)
}

#[derive(Module)]
struct LineModel {
    w: Variable,
    b: Variable,
}

struct Line {
    model: Arc<LineModel>,
    sgd: Arc<Sgd>,
}

impl Line {
    fn new() -> Line {
        Line {
            model: Arc::new(LineModel {
                w: Variable::new(Tensor::scalar(0f32)),
                b: Variable::new(Tensor::scalar(0f32)),
            }),
            sgd: Arc::new(Sgd::new(0.3).momentum(0.5)),
        }
    }

    fn step(&self) -> impl FnMut((Tensor, Tensor)) -> Result<Metrics> + 'static {
        let (model, sgd) = (self.model.clone(), self.sgd.clone());
        let step = function(move |x: Tensor, y: Tensor| {
            sgd.minimize(&model.trainable_variables(), || {
                (x * model.w.read() + model.b.read() - y)
                    .square()?
                    .reduce_mean(&[], false)
            })
        });
        move |(x, y)| Ok(Metrics::loss(step.call((&x, &y))?))
    }

    fn values(&self) -> (f32, f32) {
        (
            self.model.w.read().item().unwrap(),
            self.model.b.read().item().unwrap(),
        )
    }

    fn saver(&self) -> impl FnMut(&std::path::Path) -> Result<()> + 'static {
        let (model, sgd) = (self.model.clone(), self.sgd.clone());
        move |path| xlafn::checkpoint::save_training(&*model, &*sgd, path)
    }

    fn restore(&self, path: &std::path::Path) -> Result<()> {
        xlafn::checkpoint::restore_training(&*self.model, &*self.sgd, path)
    }
}

#[test]
fn fit_learns_and_reports_epoch_means() {
    let line = Line::new();
    let history = Trainer::new(line.step())
        .epochs(30)
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    assert_eq!(history.epochs.len(), 30);
    assert_eq!(history.steps.len(), 150, "5 batches an epoch");
    let (w, b) = line.values();
    assert!(
        (w - 2.0).abs() < 0.05 && (b + 1.0).abs() < 0.05,
        "w {w} b {b}"
    );
    // Each epoch's loss is the mean of its steps' losses.
    for (e, logs) in history.epochs.iter().enumerate() {
        let steps = &history.steps[e * 5..e * 5 + 5];
        let mean = steps.iter().map(|(_, v)| v).sum::<f64>() / 5.0;
        assert!((logs.get("loss").unwrap() - mean).abs() < 1e-12);
        assert_eq!(logs.last_step, (e as u64 + 1) * 5);
    }
    let losses = history.metric("loss");
    assert!(losses[29] < losses[0] / 100.0, "{losses:?}");
}

#[test]
fn evaluation_and_logged_scalars_join_the_epoch_logs() {
    let line = Line::new();
    let eval_step = {
        let model = line.model.clone();
        let f = function(move |x: Tensor, y: Tensor| {
            (x * model.w.read() + model.b.read() - y)
                .abs()?
                .reduce_mean(&[], false)
        });
        move |(x, y): (Tensor, Tensor)| Ok(Metrics::new().with("mae", f.call((&x, &y))?))
    };
    let schedule = Arc::new(ExponentialDecay::new(0.3, 5, 0.5).unwrap());
    let history = Trainer::new(line.step())
        .epochs(3)
        .evaluate(line_data(), eval_step)
        .log_learning_rate(schedule)
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    let names: Vec<&str> = history.epochs[0]
        .metrics
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(names, vec!["loss", "learning_rate", "val_mae"]);
    // The rate at steps 1..=5 is 0.3 * 0.5^(s/5); the epoch logs its mean.
    let expected: f64 = (1..=5)
        .map(|s| 0.3 * 0.5f64.powf(s as f64 / 5.0))
        .sum::<f64>()
        / 5.0;
    assert!((history.epochs[0].get("learning_rate").unwrap() - expected).abs() < 1e-6);
    assert!(history.last("val_mae").unwrap() < history.epochs[0].get("val_mae").unwrap());
}

#[test]
fn early_stopping_stops_after_patience_epochs_without_improvement() {
    let flat = |_: i64| Ok(Metrics::loss(Tensor::scalar(1.0f32)));
    let history = Trainer::new(flat)
        .epochs(50)
        .callback(EarlyStopping::new("loss", 3))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 4))
        .unwrap();
    assert!(history.stopped_early);
    assert_eq!(
        history.epochs.len(),
        4,
        "one epoch sets the best, three more wait"
    );
    let missing = Trainer::new(flat)
        .callback(EarlyStopping::new("val_loss", 1))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 2));
    assert!(missing.unwrap_err().to_string().contains("val_loss"));
}

/// Fails the run at a given step, as a crash would.
struct CrashAt(u64);

impl Callback for CrashAt {
    fn on_step_end(&mut self, state: &TrainState, _: &[(String, f64)]) -> Result<Control> {
        if state.step == self.0 {
            return Err(Error::Value("simulated crash".into()));
        }
        Ok(Control::Continue)
    }
}

#[test]
fn a_run_resumed_from_its_checkpoint_ends_bit_for_bit_where_an_uninterrupted_one_does() {
    let uninterrupted = Line::new();
    Trainer::new(uninterrupted.step())
        .epochs(4)
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();

    let dir = scratch::scratch_dir("fit-resume");
    let crashed = Line::new();
    let err = Trainer::new(crashed.step())
        .epochs(4)
        .callback(CheckpointEvery::new(3, dir.to_path_buf(), crashed.saver()).keep(2))
        .callback(CrashAt(13))
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap_err();
    assert!(err.to_string().contains("simulated crash"));
    // Checkpoints at steps 3, 6, 9, 12; the newest two are kept.
    let mut files: Vec<String> = std::fs::read_dir(&*dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json"))
        .collect();
    files.sort();
    assert_eq!(files, vec!["ckpt-12.json", "ckpt-9.json"]);
    let (path, position) = latest_checkpoint(&*dir).unwrap().unwrap();
    assert_eq!(
        (position.epoch, position.step_in_epoch, position.step),
        (2, 2, 12)
    );

    let resumed = Line::new();
    resumed.restore(&path).unwrap();
    let history = Trainer::new(resumed.step())
        .epochs(4)
        .resume_from(position)
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    assert_eq!(history.steps.first().unwrap().0, 13);
    assert_eq!(history.steps.len(), 8);
    let (a, b) = (resumed.values(), uninterrupted.values());
    assert_eq!(a.0.to_bits(), b.0.to_bits());
    assert_eq!(a.1.to_bits(), b.1.to_bits());
}

#[test]
fn untrusted_position_files_are_clear_errors() {
    let dir = scratch::scratch_dir("fit-position");
    assert!(latest_checkpoint(&*dir).unwrap().is_none());
    std::fs::write(dir.join("ckpt-5.safetensors"), b"x").unwrap();
    std::fs::write(dir.join("ckpt-5.json"), b"{\"epoch\": -1}").unwrap();
    let err = latest_checkpoint(&*dir).unwrap_err().to_string();
    assert!(err.contains("not a training position"), "{err}");
    // A position no run over the data could reach is refused before a
    // step runs.
    let line = Line::new();
    for (in_epoch, step) in [(6, 100), (3, 2)] {
        let position = TrainPosition {
            epoch: 0,
            step_in_epoch: in_epoch,
            step,
        };
        let e = Trainer::new(line.step())
            .resume_from(position)
            .progress(Progress::Off)
            .fit(&line_data())
            .unwrap_err()
            .to_string();
        assert!(e.contains("cannot resume"), "{e}");
    }
    std::fs::write(
        dir.join("ckpt-5.json"),
        b"{\"epoch\":0,\"step_in_epoch\":1,\"step\":9}",
    )
    .unwrap();
    assert!(
        latest_checkpoint(&*dir)
            .unwrap_err()
            .to_string()
            .contains("step 9")
    );
}

#[test]
fn metrics_go_to_a_json_log_tensorboard_and_a_curve() {
    let dir = scratch::scratch_dir("fit-out");
    let line = Line::new();
    let history = Trainer::new(line.step())
        .epochs(2)
        .tensorboard(dir.join("tb"))
        .unwrap()
        .histograms(line.model.named_variables())
        .metrics_log(MetricsLog::json_lines(dir.join("log.jsonl")).unwrap())
        .loss_curve(dir.join("loss.svg"))
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("log.jsonl"))
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 10);
    assert_eq!(lines[6]["step"], 7);
    assert_eq!(lines[6]["epoch"], 1.0);
    assert!((lines[6]["loss"].as_f64().unwrap() - history.steps[6].1).abs() < 1e-12);

    let event_file = std::fs::read_dir(dir.join("tb"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let events = read_events(&event_file).unwrap();
    let mut train_loss = Vec::new();
    let mut epoch_loss = Vec::new();
    for e in &events {
        if let EventWhat::Scalars(values) = &e.what {
            for (tag, v) in values {
                match tag.as_str() {
                    "train/loss" => train_loss.push((e.step, *v)),
                    "epoch/loss" => epoch_loss.push((e.step, *v)),
                    _ => {}
                }
            }
        }
    }
    assert_eq!(train_loss.len(), 10);
    assert_eq!(train_loss[3], (4, history.steps[3].1 as f32));
    assert_eq!(
        epoch_loss,
        vec![
            (0, history.epochs[0].get("loss").unwrap() as f32),
            (1, history.epochs[1].get("loss").unwrap() as f32)
        ]
    );
    // Each epoch writes a histogram of each weight: one value each here.
    let histograms: Vec<(i64, String, f64)> = events
        .iter()
        .filter_map(|e| match &e.what {
            EventWhat::Histogram { tag, histogram } => Some((e.step, tag.clone(), histogram.sum)),
            _ => None,
        })
        .collect();
    assert_eq!(histograms.len(), 4);
    let (w, _) = line.values();
    assert_eq!(histograms[2].1, "weights/w");
    assert_eq!(histograms[2].2, f64::from(w));
    let svg = std::fs::read_to_string(dir.join("loss.svg")).unwrap();
    assert!(svg.contains("loss per step"));
}

#[test]
fn a_failing_batch_stops_the_run_with_its_error() {
    let data = Dataset::range(0, 10).map(|i| {
        if i == 6 {
            Err(Error::Value("unreadable record".into()))
        } else {
            Ok(i)
        }
    });
    let mut seen = 0;
    let result = Trainer::new(move |_: i64| {
        seen += 1;
        Ok(Metrics::loss(Tensor::scalar(seen as f32)))
    })
    .progress(Progress::Off)
    .fit(&data);
    let err = result.unwrap_err().to_string();
    assert!(
        err.contains("unreadable record") && err.contains("example 6"),
        "{err}"
    );
}

// ---- hardening: checkpoints, positions, names, NaN, outputs ------------

/// A step whose loss is the batch's value.
fn echo(i: i64) -> Result<Metrics> {
    Ok(Metrics::loss(Tensor::scalar(i as f32)))
}

/// Writes a stand-in weights file (the checkpoint callback's own files
/// are what these tests look at).
fn stand_in_weights(path: &std::path::Path) -> Result<()> {
    std::fs::write(path, b"weights").map_err(|e| Error::io("write", path, e))
}

/// The `.json` and `.safetensors` names in `dir`, sorted.
fn checkpoint_files(dir: &std::path::Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.ends_with(".json") || n.ends_with(".safetensors"))
        .collect();
    names.sort();
    names
}

#[test]
fn kept_checkpoints_stay_kept_across_a_resumed_run() {
    let dir = scratch::scratch_dir("fit-keep");
    Trainer::new(echo)
        .callback(CheckpointEvery::new(1, dir.to_path_buf(), stand_in_weights).keep(2))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 6))
        .unwrap();
    let (_, position) = latest_checkpoint(&*dir).unwrap().unwrap();
    assert_eq!(position.step, 6);
    // The restarted run counts the first run's two checkpoints toward
    // its `keep`, so two are left, not four.
    Trainer::new(echo)
        .epochs(2)
        .resume_from(position)
        .callback(CheckpointEvery::new(1, dir.to_path_buf(), stand_in_weights).keep(2))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 6))
        .unwrap();
    assert_eq!(
        checkpoint_files(&dir),
        [
            "ckpt-11.json",
            "ckpt-11.safetensors",
            "ckpt-12.json",
            "ckpt-12.safetensors"
        ]
    );
}

#[test]
fn a_planted_position_link_is_replaced_not_written_through() {
    let dir = scratch::scratch_dir("fit-link");
    let outside = scratch::scratch_dir("fit-link-victim");
    let victim = outside.join("victim.json");
    std::fs::write(&victim, "precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.join("ckpt-2.json")).unwrap();
    Trainer::new(echo)
        .callback(CheckpointEvery::new(2, dir.to_path_buf(), stand_in_weights))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 3))
        .unwrap();
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious");
    let link = dir.join("ckpt-2.json");
    assert!(std::fs::symlink_metadata(&link).unwrap().is_file());
    assert_eq!(TrainPosition::read(&link).unwrap().step, 2);
}

#[test]
fn latest_checkpoint_passes_over_a_damaged_newest_and_stray_names() {
    let dir = scratch::scratch_dir("fit-fallback");
    let position = |step: u64| format!("{{\"epoch\":0,\"step_in_epoch\":{step},\"step\":{step}}}");
    for step in [3, 6, 7] {
        std::fs::write(dir.join(format!("ckpt-{step}.safetensors")), b"w").unwrap();
    }
    std::fs::write(dir.join("ckpt-3.json"), position(3)).unwrap();
    // The newest position cut short (a crash mid-copy), and a name that
    // `str::parse` reads as 7 but the callback never writes.
    std::fs::write(dir.join("ckpt-6.json"), &position(6)[..10]).unwrap();
    std::fs::write(dir.join("ckpt-+7.json"), position(7)).unwrap();
    let (path, found) = latest_checkpoint(&*dir).unwrap().unwrap();
    assert_eq!(path, dir.join("ckpt-3.safetensors"));
    assert_eq!(found.step, 3);
}

#[test]
fn positions_beyond_any_run_are_refused_before_a_step() {
    let dir = scratch::scratch_dir("fit-max");
    let path = dir.join("ckpt-5.json");
    std::fs::write(
        &path,
        format!("{{\"epoch\":0,\"step_in_epoch\":0,\"step\":{}}}", u64::MAX),
    )
    .unwrap();
    let e = TrainPosition::read(&path).unwrap_err().to_string();
    assert!(e.contains("above the largest count"), "{e}");
    // Resuming at u64::MAX would wrap the step counter after one step.
    let e = Trainer::new(echo)
        .resume_from(TrainPosition {
            epoch: 0,
            step_in_epoch: 0,
            step: u64::MAX,
        })
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 3))
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot resume"), "{e}");
    // On endless data nothing bounds the skip but the documented limit:
    // a forged position is refused at once instead of skipped for ever.
    let e = bounded::within(5, "resuming far into endless data", || {
        Trainer::new(echo)
            .resume_from(TrainPosition {
                epoch: 0,
                step_in_epoch: 1 << 40,
                step: 1 << 40,
            })
            .progress(Progress::Off)
            .fit(&Dataset::range(0, 3).repeat(None))
            .unwrap_err()
            .to_string()
    });
    assert!(e.contains("length is not known"), "{e}");
    assert!(
        e.contains(&xlafn::train::MAX_UNBOUNDED_SKIP.to_string()),
        "{e}"
    );
}

#[test]
fn metric_names_are_unique_and_epoch_is_reserved() {
    let twice = Trainer::new(|i: i64| {
        Ok(Metrics::loss(Tensor::scalar(i as f32)).with("loss", Tensor::scalar(0f32)))
    })
    .progress(Progress::Off)
    .fit(&Dataset::range(0, 2))
    .unwrap_err()
    .to_string();
    assert!(twice.contains("two metrics are named 'loss'"), "{twice}");
    let scalar = Trainer::new(echo)
        .log_scalar("loss", |_| Ok(1.0))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 2))
        .unwrap_err()
        .to_string();
    assert!(scalar.contains("named 'loss'"), "{scalar}");
    let epoch = Trainer::new(|i: i64| {
        Ok(Metrics::loss(Tensor::scalar(i as f32)).with("epoch", Tensor::scalar(0f32)))
    })
    .metrics_log(MetricsLog::json_lines(scratch::scratch_dir("fit-epoch").join("m.jsonl")).unwrap())
    .progress(Progress::Off)
    .fit(&Dataset::range(0, 2))
    .unwrap_err()
    .to_string();
    assert!(
        epoch.contains("'epoch' is a reserved column name"),
        "{epoch}"
    );
    // A training metric named as an evaluation one would be.
    let val = Trainer::new(|i: i64| {
        Ok(Metrics::loss(Tensor::scalar(i as f32)).with("val_loss", Tensor::scalar(0f32)))
    })
    .evaluate(Dataset::range(0, 2), echo)
    .progress(Progress::Off)
    .fit(&Dataset::range(0, 2))
    .unwrap_err()
    .to_string();
    assert!(val.contains("'val_loss'"), "{val}");
}

#[test]
fn a_nan_loss_stops_the_run_and_keeps_its_history() {
    let dir = scratch::scratch_dir("fit-nan");
    let nan_at_3 = |i: i64| {
        let loss = if i == 2 { f32::NAN } else { i as f32 };
        Ok(Metrics::loss(Tensor::scalar(loss)))
    };
    let mut trainer = Trainer::new(nan_at_3)
        .epochs(3)
        .callback(CheckpointEvery::new(1, dir.to_path_buf(), stand_in_weights))
        .progress(Progress::Off);
    let e = trainer.fit(&Dataset::range(0, 5)).unwrap_err().to_string();
    assert!(e.contains("loss is NaN at step 3"), "{e}");
    let history = trainer.history();
    assert_eq!(history.steps.len(), 3);
    assert_eq!(history.steps[1], (2, 1.0));
    assert!(history.steps[2].1.is_nan());
    // No checkpoint of the NaN step.
    assert_eq!(latest_checkpoint(&*dir).unwrap().unwrap().1.step, 2);
    // Opting out trains on, as Keras does without TerminateOnNaN.
    let history = Trainer::new(nan_at_3)
        .terminate_on_nan(false)
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 5))
        .unwrap();
    assert_eq!(history.steps.len(), 5);
}

#[test]
fn an_unwritable_curve_fails_before_the_first_step() {
    let dir = scratch::scratch_dir("fit-curve");
    let steps = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counted = steps.clone();
    let e = Trainer::new(move |i: i64| {
        counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        echo(i)
    })
    .loss_curve(dir.join("no-such-folder").join("loss.svg"))
    .progress(Progress::Off)
    .fit(&Dataset::range(0, 3))
    .unwrap_err()
    .to_string();
    assert!(e.contains("loss curve cannot be written"), "{e}");
    assert_eq!(steps.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Nothing is left behind beside a writable path by the check.
    let path = dir.join("loss.svg");
    let p = path.clone();
    // Losses of ±1e308 made the chart's tick placement loop for ever.
    let history = bounded::within(10, "fit with a curve of ±1e308", move || {
        Trainer::new(|i: i64| {
            let loss = if i % 2 == 0 { 1e308 } else { -1e308 };
            Ok(Metrics::loss(Tensor::scalar(loss)))
        })
        .terminate_on_nan(false)
        .loss_curve(p)
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 4))
        .unwrap()
    });
    assert_eq!(history.steps.len(), 4);
    assert!(std::fs::read_to_string(&path).unwrap().contains("</svg>"));
    assert_eq!(std::fs::read_dir(&*dir).unwrap().count(), 1);
}

#[test]
fn checkpoints_beyond_the_resumed_step_are_the_first_to_go() {
    let dir = scratch::scratch_dir("fit-branch");
    Trainer::new(echo)
        .callback(CheckpointEvery::new(2, dir.to_path_buf(), stand_in_weights).keep(3))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 6))
        .unwrap();
    // Resumed from step 2 of 2, 4, 6: 4 and 6 belong to the abandoned run
    // and go first as the run writes 3, 4 (anew) and 5, then 2.
    let position = TrainPosition::read(dir.join("ckpt-2.json")).unwrap();
    Trainer::new(echo)
        .resume_from(position)
        .callback(CheckpointEvery::new(1, dir.to_path_buf(), stand_in_weights).keep(3))
        .progress(Progress::Off)
        .fit(&Dataset::range(0, 5))
        .unwrap();
    let json: Vec<String> = checkpoint_files(&dir)
        .into_iter()
        .filter(|n| n.ends_with(".json"))
        .collect();
    assert_eq!(json, ["ckpt-3.json", "ckpt-4.json", "ckpt-5.json"]);
    assert_eq!(latest_checkpoint(&*dir).unwrap().unwrap().1.step, 5);
}

/// Writes down each callback event, as Keras' callbacks see them.
struct Events(Arc<std::sync::Mutex<Vec<String>>>);

impl Callback for Events {
    fn on_train_begin(&mut self, state: &TrainState) -> Result<()> {
        self.0.lock().unwrap().push(format!("train {}", state.step));
        Ok(())
    }
    fn on_epoch_begin(&mut self, state: &TrainState) -> Result<()> {
        let (epoch, step, done) = (state.epoch, state.step, state.step_in_epoch);
        self.0
            .lock()
            .unwrap()
            .push(format!("begin {epoch} at {step} ({done} done)"));
        Ok(())
    }
    fn on_epoch_end(&mut self, state: &TrainState, _: &xlafn::train::EpochLogs) -> Result<Control> {
        let line = format!("end {} at {}", state.epoch, state.step);
        self.0.lock().unwrap().push(line);
        Ok(Control::Continue)
    }
}

#[test]
fn each_epoch_begins_before_its_first_step_and_a_resumed_one_says_where() {
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let line = Line::new();
    Trainer::new(line.step())
        .epochs(2)
        .callback(Events(events.clone()))
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    assert_eq!(
        *events.lock().unwrap(),
        [
            "train 0",
            "begin 0 at 0 (0 done)",
            "end 0 at 5",
            "begin 1 at 5 (0 done)",
            "end 1 at 10",
        ]
    );
    // Resumed three steps into epoch 1 (step 8).
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    Trainer::new(Line::new().step())
        .epochs(2)
        .callback(Events(events.clone()))
        .resume_from(TrainPosition {
            epoch: 1,
            step: 8,
            step_in_epoch: 3,
        })
        .progress(Progress::Off)
        .fit(&line_data())
        .unwrap();
    assert_eq!(
        *events.lock().unwrap(),
        ["train 8", "begin 1 at 8 (3 done)", "end 1 at 10"]
    );
}
