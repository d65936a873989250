//! The `tracing` events xlafn emits, recorded by a subscriber made here:
//! a trace says which function, its input types and why the cache missed
//! (first call, or which argument changed and how); a compile says the
//! program's size, the disk cache's answer and the time, inside a span
//! naming the function; an eager op cache miss names the op; calls run in
//! a span; repeated retracing warns with the argument that changed.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::{Layer, Registry};
use xlafn::prelude::*;

#[derive(Clone, Debug)]
struct Event {
    target: String,
    level: tracing::Level,
    fields: BTreeMap<String, String>,
    spans: Vec<String>,
}

#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }
}

/// Keeps every event with the names of the spans it happened in.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Event>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, cx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let spans = cx
            .event_scope(event)
            .map(|scope| scope.from_root().map(|s| s.name().to_string()).collect())
            .unwrap_or_default();
        self.0.lock().unwrap().push(Event {
            target: event.metadata().target().to_string(),
            level: *event.metadata().level(),
            fields: fields.0,
            spans,
        });
    }
}

fn recorded(f: impl FnOnce()) -> Vec<Event> {
    let recorder = Recorder::default();
    let subscriber = Registry::default().with(recorder.clone());
    tracing::subscriber::with_default(subscriber, f);
    recorder.0.lock().unwrap().clone()
}

fn with_target<'a>(events: &'a [Event], target: &str) -> Vec<&'a Event> {
    events.iter().filter(|e| e.target == target).collect()
}

#[test]
fn traces_say_why_the_cache_missed() {
    let f = FunctionOptions::new()
        .name("scale")
        .arg_names(&["x", "factor"])
        .build(|x: Tensor, factor: f64| x.mul_scalar(factor));
    let events = recorded(|| {
        f.call((Tensor::vector(&[1.0f32]).unwrap(), 2.0)).unwrap();
        f.call((Tensor::vector(&[1.0f32]).unwrap(), 2.0)).unwrap(); // cached
        f.call((Tensor::vector(&[1.0f64]).unwrap(), 2.0)).unwrap();
        f.call((Tensor::vector(&[1.0f64]).unwrap(), 3.0)).unwrap();
    });
    let traces = with_target(&events, "xlafn::trace");
    assert_eq!(traces.len(), 3, "{events:#?}");
    assert!(traces.iter().all(|e| e.level == tracing::Level::INFO));
    assert_eq!(traces[0].fields["function"], "scale");
    assert_eq!(traces[0].fields["reason"], "first call");
    let second = &traces[1].fields["reason"];
    assert!(
        second.contains("argument 'x' changed from") && second.contains("f64"),
        "{second}"
    );
    let third = &traces[2].fields["reason"];
    assert_eq!(
        third,
        "argument 'factor' changed from Literal[2.0] to Literal[3.0]"
    );
    assert!(
        traces[2].fields["types"].contains('3'),
        "{:?}",
        traces[2].fields
    );
    // Every trace happened inside a call span.
    assert!(traces.iter().all(|e| e.spans == ["call"]), "{traces:#?}");
}

#[test]
fn compiles_report_size_cache_and_time_inside_a_span_naming_the_function() {
    let f = FunctionOptions::new()
        .name("poly")
        .build(|x: Tensor| -> Result<Tensor> { x.square()?.add_scalar(1.0) });
    let events = recorded(|| {
        f.call((Tensor::vector(&[1.0f32, 2.0, 3.0]).unwrap(),))
            .unwrap();
    });
    let compiles: Vec<&Event> = with_target(&events, "xlafn::compile")
        .into_iter()
        .filter(|e| e.spans.contains(&"compile".to_string()))
        .collect();
    assert_eq!(compiles.len(), 1, "{events:#?}");
    let c = &compiles[0].fields;
    assert!(c["program_bytes"].parse::<usize>().unwrap() > 100, "{c:?}");
    assert_eq!(c["parameters"], "1");
    assert!(
        ["hit", "miss", "off"].contains(&c["disk_cache"].as_str()),
        "{c:?}"
    );
    assert!(c["ms"].parse::<f64>().unwrap() >= 0.0);
    assert_eq!(compiles[0].spans, ["call", "compile"]);
}

#[test]
fn eager_cache_misses_name_the_op() {
    // A shape no other test uses, so this op is compiled here.
    let x = Tensor::from_vec(vec![1.0f32; 7 * 13], &[7, 13]).unwrap();
    let events = recorded(|| {
        x.atan().unwrap();
    });
    let misses = with_target(&events, "xlafn::eager");
    assert!(
        misses
            .iter()
            .any(|e| e.level == tracing::Level::DEBUG && e.fields["op"] == "atan"),
        "{events:#?}"
    );
}

#[test]
fn repeated_retracing_warns_with_the_changed_argument() {
    let f = FunctionOptions::new()
        .name("lit")
        .arg_names(&["n"])
        .build(|n: i64| Tensor::scalar(n as f32).mul_scalar(2.0));
    let events = recorded(|| {
        for n in 0..8 {
            f.call((n,)).unwrap();
        }
    });
    let warnings: Vec<&Event> = events
        .iter()
        .filter(|e| e.level == tracing::Level::WARN)
        .collect();
    assert!(!warnings.is_empty(), "{events:#?}");
    let message = &warnings[0].fields["message"];
    assert!(message.contains("argument 'n' changed from"), "{message}");
}
