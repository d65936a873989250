//! Functions shared between threads: concurrent first calls of one type
//! trace once (single-flight tracing), `Function` is `Send + Sync`, and a
//! function that keeps retracing says so through the `tracing` crate,
//! naming the argument whose type changed.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::Duration;
use xlafn::prelude::*;

const THREADS: usize = 8;

fn assert_send_sync<T: Send + Sync>() {}

#[test]
fn functions_and_tensors_are_send_and_sync() {
    assert_send_sync::<Function<(Tensor,), Tensor>>();
    assert_send_sync::<Function<(Tensor, i64), (Tensor, Tensor)>>();
    assert_send_sync::<ConcreteFunction<(Tensor,), Tensor>>();
    assert_send_sync::<Tensor>();
}

/// A function whose trace is slow, so that concurrent first calls overlap
/// it, and which counts how often its body runs.
fn slow_triple(body_runs: &Arc<AtomicUsize>) -> Function<(Tensor,), Tensor> {
    let body_runs = body_runs.clone();
    FunctionOptions::new()
        .name("slow_triple")
        .build(move |x: Tensor| -> Result<Tensor> {
            body_runs.fetch_add(1, Ordering::SeqCst);
            std::thread::sleep(Duration::from_millis(100));
            x.mul_scalar(3.0)
        })
}

#[test]
fn concurrent_first_calls_of_one_type_trace_once() -> Result<()> {
    let body_runs = Arc::new(AtomicUsize::new(0));
    let f = slow_triple(&body_runs);
    let barrier = Barrier::new(THREADS);
    let results: Vec<Result<Vec<f32>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let (f, barrier) = (&f, &barrier);
                s.spawn(move || -> Result<Vec<f32>> {
                    let x = Tensor::vector(&[i as f32, 1., -0.5])?;
                    barrier.wait();
                    f.call((&x,))?.to_vec::<f32>()
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("no panic"))
            .collect()
    });
    for (i, r) in results.into_iter().enumerate() {
        assert_eq!(r?, vec![3. * i as f32, 3., -1.5]);
    }
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(body_runs.load(Ordering::SeqCst), 1);
    assert_eq!(f.concrete_functions().len(), 1);
    Ok(())
}

/// Runs `f` once on each of `THREADS` threads released together by a
/// barrier, each with its own vector of the same shape.
fn call_together(f: &Function<(Tensor,), Tensor>) -> Result<()> {
    let barrier = Barrier::new(THREADS);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|i| {
                let barrier = &barrier;
                s.spawn(move || -> Result<()> {
                    let x = Tensor::vector(&[i as f32, 2.])?;
                    barrier.wait();
                    let y = f.call((&x,))?.to_vec::<f32>()?;
                    assert_eq!(y, vec![3. * i as f32, 6.]);
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .try_for_each(|h| h.join().expect("no panic"))
    })
}

#[test]
fn concurrent_first_calls_of_one_shape_compile_once() -> Result<()> {
    let body_runs = Arc::new(AtomicUsize::new(0));
    let f = slow_triple(&body_runs);
    // Trace ahead, so the threads race only on the compile.
    f.get_concrete_function((TensorSpec::new(&[None], DType::F32),))?;
    assert_eq!(f.compile_count(), 0);
    call_together(&f)?;
    assert_eq!(f.tracing_count(), 1);
    assert_eq!(f.compile_count(), 1);
    Ok(())
}

#[test]
fn concurrent_calls_of_two_types_trace_each_once() -> Result<()> {
    let body_runs = Arc::new(AtomicUsize::new(0));
    let f = slow_triple(&body_runs);
    let barrier = Arc::new(Barrier::new(THREADS));
    // Clones moved into 'static threads share the same caches.
    let handles: Vec<_> = (0..THREADS)
        .map(|i| {
            let (f, barrier) = (f.clone(), barrier.clone());
            std::thread::spawn(move || -> Result<(usize, Vec<i32>)> {
                let n = if i % 2 == 0 { 2 } else { 3 };
                let data: Vec<i32> = (0..n).map(|k| k + i as i32).collect();
                let x = Tensor::vector(&data)?;
                barrier.wait();
                Ok((i, f.call((x,))?.to_vec::<i32>()?))
            })
        })
        .collect();
    for h in handles {
        let (i, got) = h.join().expect("no panic")?;
        let n = if i % 2 == 0 { 2 } else { 3 };
        let want: Vec<i32> = (0..n).map(|k| 3 * (k + i as i32)).collect();
        assert_eq!(got, want);
    }
    assert_eq!(f.tracing_count(), 2);
    assert_eq!(body_runs.load(Ordering::SeqCst), 2);
    Ok(())
}

#[test]
fn traces_on_different_threads_do_not_mix() -> Result<()> {
    // Two different functions traced at the same time on two threads each
    // build their own graph.
    let barrier = Barrier::new(2);
    let add_one = FunctionOptions::new()
        .name("add_one")
        .build(|x: Tensor| -> Result<Tensor> {
            std::thread::sleep(Duration::from_millis(50));
            x.add_scalar(1i64)
        });
    let negate = FunctionOptions::new()
        .name("negate")
        .build(|x: Tensor| -> Result<Tensor> {
            std::thread::sleep(Duration::from_millis(50));
            x.neg()
        });
    let (a, b) = std::thread::scope(|s| {
        let ha = s.spawn(|| {
            barrier.wait();
            add_one.call((Tensor::vector(&[1i32, 2])?,))
        });
        let hb = s.spawn(|| {
            barrier.wait();
            negate.call((Tensor::vector(&[1i32, 2])?,))
        });
        (ha.join().expect("no panic"), hb.join().expect("no panic"))
    });
    assert_eq!(a?.to_vec::<i32>()?, vec![2, 3]);
    assert_eq!(b?.to_vec::<i32>()?, vec![-1, -2]);
    let ga = add_one.concrete_functions()[0].graph().to_string();
    let gb = negate.concrete_functions()[0].graph().to_string();
    assert!(ga.contains("add(") && !ga.contains("neg("), "{ga}");
    assert!(gb.contains("neg(") && !gb.contains("add("), "{gb}");
    Ok(())
}

// ---------------------------------------------------------------- warnings

/// One event seen by [`Recorder`].
#[derive(Clone, Debug)]
struct Recorded {
    level: tracing::Level,
    message: String,
    fields: BTreeMap<String, String>,
}

/// A minimal `tracing` subscriber that keeps every event it is given.
#[derive(Clone, Default)]
struct Recorder {
    events: Arc<Mutex<Vec<Recorded>>>,
}

impl Recorder {
    fn warnings(&self) -> Vec<Recorded> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.level == tracing::Level::WARN)
            .cloned()
            .collect()
    }
}

#[derive(Default)]
struct Fields {
    message: String,
    fields: BTreeMap<String, String>,
}

impl tracing::field::Visit for Fields {
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.message, "{value:?}");
        } else {
            self.fields
                .insert(field.name().to_string(), format!("{value:?}"));
        }
    }

    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        if field.name() == "message" {
            self.message.push_str(value);
        } else {
            self.fields
                .insert(field.name().to_string(), value.to_string());
        }
    }
}

impl tracing::Subscriber for Recorder {
    fn enabled(&self, _: &tracing::Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }
    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.events.lock().unwrap().push(Recorded {
            level: *event.metadata().level(),
            message: fields.message,
            fields: fields.fields,
        });
    }
    fn enter(&self, _: &tracing::span::Id) {}
    fn exit(&self, _: &tracing::span::Id) {}
}

#[test]
fn retracing_five_times_warns_naming_the_changing_argument() -> Result<()> {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || -> Result<()> {
        let f = FunctionOptions::new()
            .name("retracer")
            .arg_names(&["x", "n"])
            .build(|x: Tensor, n: i64| x * n as f64);
        let x = Tensor::vector(&[1f32, 2.])?;
        for n in 0..4i64 {
            let y = f.call((&x, n))?;
            assert_eq!(y.to_vec::<f32>()?, vec![n as f32, 2. * n as f32]);
        }
        assert_eq!(f.tracing_count(), 4);
        assert!(recorder.warnings().is_empty(), "{:?}", recorder.warnings());

        let y = f.call((&x, 4i64))?;
        assert_eq!(y.to_vec::<f32>()?, vec![4., 8.]);
        assert_eq!(f.tracing_count(), 5);
        let warnings = recorder.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let w = &warnings[0];
        assert!(w.message.contains("'retracer'"), "{}", w.message);
        assert!(w.message.contains("traced 5 times"), "{}", w.message);
        assert!(w.message.contains("argument 'n'"), "{}", w.message);
        assert!(
            w.message.contains("from Literal[3] to Literal[4]"),
            "{}",
            w.message
        );
        assert_eq!(w.fields.get("argument").map(String::as_str), Some("n"));
        assert_eq!(
            w.fields.get("function").map(String::as_str),
            Some("retracer")
        );
        assert_eq!(w.fields.get("traces").map(String::as_str), Some("5"));

        // Cached calls do not warn; every further retrace does.
        f.call((&x, 2i64))?;
        assert_eq!(recorder.warnings().len(), 1);
        f.call((&x, 5i64))?;
        assert_eq!(recorder.warnings().len(), 2);
        Ok(())
    })
}

#[test]
fn retrace_warning_names_a_tensor_argument_whose_shape_changes() -> Result<()> {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || -> Result<()> {
        let f = FunctionOptions::new()
            .name("shapes")
            .arg_names(&["scale", "values"])
            .build(|scale: Tensor, values: Tensor| &values * &scale);
        let scale = Tensor::scalar(2f32);
        for n in 1..=5usize {
            let values = Tensor::vector(&vec![1f32; n])?;
            let y = f.call((&scale, &values))?;
            assert_eq!(y.to_vec::<f32>()?, vec![2f32; n]);
        }
        assert_eq!(f.tracing_count(), 5);
        let warnings = recorder.warnings();
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        let w = &warnings[0];
        assert!(w.message.contains("argument 'values'"), "{}", w.message);
        assert!(w.message.contains("shape=(4,)"), "{}", w.message);
        assert!(w.message.contains("shape=(5,)"), "{}", w.message);
        Ok(())
    })
}

#[test]
fn calls_that_never_retrace_never_warn() -> Result<()> {
    let recorder = Recorder::default();
    tracing::subscriber::with_default(recorder.clone(), || -> Result<()> {
        let f = function(|x: Tensor| x.square());
        for i in 0..10 {
            let y = f.call((Tensor::scalar(i as f32),))?;
            assert_eq!(y.to_vec::<f32>()?, vec![(i * i) as f32]);
        }
        assert_eq!(f.tracing_count(), 1);
        Ok(())
    })?;
    assert!(recorder.warnings().is_empty(), "{:?}", recorder.warnings());
    Ok(())
}
