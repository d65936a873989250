//! Host callbacks and `print`: Rust code that runs on every execution of a
//! compiled program, TensorFlow's `tf.print` and
//! `tf.py_function`.
//!
//! Traced, a callback is a `custom_call` to the runtime's FFI handler,
//! marked as having side effects so XLA keeps it (and runs it on every
//! iteration of an in-graph loop, in program order). Eagerly, the closure
//! simply runs. Rust's own `println!` inside a traced closure, by contrast,
//! runs only while tracing.
//!
//! Callbacks exchange host arrays ([`HostArray`]), not tensors: the closure
//! may run inside an XLA execution, where starting other device work is not
//! safe in general.

use super::{OpDef, describe};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::TensorType;
use crate::lower::{Emitter, Val};
use crate::runtime::{
    CallbackKind, CallbackRegistration, HOST_CALLBACK_TARGET, HostArray, HostCallbackFn,
    register_host_callback,
};
use crate::tensor::{Tensor, apply, render_array};
use crate::trace;
use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

/// A call into a registered Rust closure, with declared result types.
///
/// The op owns its registration: the closure lives exactly as long as some
/// graph (and so some program) holds the op, and is freed with the last
/// one. Equality and hashing go by id, which is unique per registration.
#[derive(Clone, Debug)]
pub struct HostCallback {
    registration: Arc<CallbackRegistration>,
    pub results: Vec<ArraySpec>,
}

impl HostCallback {
    /// Registers `f` as a callback of `kind` returning `results`.
    pub(crate) fn register(
        f: Arc<HostCallbackFn>,
        kind: CallbackKind,
        results: Vec<ArraySpec>,
    ) -> HostCallback {
        HostCallback {
            registration: register_host_callback(f, kind),
            results,
        }
    }

    /// A callback op for an existing registration (a loaded export's).
    pub(crate) fn bound(
        registration: Arc<CallbackRegistration>,
        results: Vec<ArraySpec>,
    ) -> HostCallback {
        HostCallback {
            registration,
            results,
        }
    }

    /// The id the program passes to the FFI handler.
    pub fn id(&self) -> i64 {
        self.registration.id()
    }
}

impl PartialEq for HostCallback {
    fn eq(&self, other: &Self) -> bool {
        self.id() == other.id() && self.results == other.results
    }
}

impl Eq for HostCallback {}

impl std::hash::Hash for HostCallback {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.id().hash(state);
        self.results.hash(state);
    }
}

impl OpDef for HostCallback {
    fn name(&self) -> &'static str {
        "host_callback"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        for t in inputs {
            t.dtype.check_compilable()?;
        }
        let _ = describe(inputs);
        Ok(self
            .results
            .iter()
            .map(|r| TensorType::known(r.dtype, &r.dims))
            .collect())
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let operands: Vec<&Val> = inputs.iter().collect();
        Ok(cx.custom_call(HOST_CALLBACK_TARGET, &operands, self.id(), outputs, true))
    }

    fn has_side_effects(&self) -> bool {
        true
    }
}

fn to_host(t: &Tensor) -> Result<HostArray> {
    let buffer = t.buffer()?;
    Ok(HostArray {
        dtype: buffer.dtype(),
        dims: buffer.dims().to_vec(),
        bytes: buffer.to_bytes()?,
    })
}

fn from_host(a: &HostArray) -> Result<Tensor> {
    Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes)
}

/// Calls `f` with the values of `inputs` on every execution and returns
/// its results, which must have the types `results` declares (checked on
/// every call). Like `tf.py_function`; eagerly it just runs `f`.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::runtime::HostArray;
/// let f = function(|x: Tensor| -> Result<Tensor> {
///     let out = host_callback(&[&x], &[xlafn::ArraySpec::new(DType::F32, &[2])], |args| {
///         let v = args[0].to_vec::<f32>().map_err(|e| e.to_string())?;
///         Ok(vec![HostArray::from_vec(v.iter().map(|x| x * 10.0).collect::<Vec<f32>>(), &[2])])
///     })?;
///     Ok(out[0].clone())
/// });
/// assert_eq!(f.call((Tensor::vector(&[1f32, 2.])?,))?.to_vec::<f32>()?, vec![10., 20.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn host_callback(
    inputs: &[&Tensor],
    results: &[ArraySpec],
    f: impl Fn(&[HostArray]) -> std::result::Result<Vec<HostArray>, String> + Send + Sync + 'static,
) -> Result<Vec<Tensor>> {
    traced_callback(
        inputs,
        results,
        Arc::new(f),
        CallbackKind::Host { name: None },
    )
}

/// [`host_callback`] under a `name`, so that an exported program that uses
/// it can be loaded again: `xlafn::load_with_callbacks` binds the closure
/// the loading process supplies under that name (an unnamed callback
/// cannot be bound, so such an export does not load).
pub fn named_host_callback(
    name: &str,
    inputs: &[&Tensor],
    results: &[ArraySpec],
    f: impl Fn(&[HostArray]) -> std::result::Result<Vec<HostArray>, String> + Send + Sync + 'static,
) -> Result<Vec<Tensor>> {
    let kind = CallbackKind::Host {
        name: Some(name.to_string()),
    };
    traced_callback(inputs, results, Arc::new(f), kind)
}

/// Runs `f` now (eagerly) or adds a callback op of `kind` to the trace.
pub(crate) fn traced_callback(
    inputs: &[&Tensor],
    results: &[ArraySpec],
    f: Arc<HostCallbackFn>,
    kind: CallbackKind,
) -> Result<Vec<Tensor>> {
    if !trace::is_tracing() {
        let args: Vec<HostArray> = inputs.iter().map(|t| to_host(t)).collect::<Result<_>>()?;
        let outs = f(&args).map_err(|m| Error::Value(format!("host callback failed: {m}")))?;
        check_results(&outs, results)?;
        return outs.iter().map(from_host).collect();
    }
    let client = crate::runtime::Client::default_client()?;
    if !client.supports_host_callbacks() {
        return Err(Error::Plugin(format!(
            "print and host_callback need host callbacks, which the {} client does not support \
             (only the CPU plugin offers them)",
            client.platform_name()
        )));
    }
    apply(HostCallback::register(f, kind, results.to_vec()), inputs)
}

fn check_results(outs: &[HostArray], declared: &[ArraySpec]) -> Result<()> {
    let fits = outs.len() == declared.len()
        && outs
            .iter()
            .zip(declared)
            .all(|(o, d)| o.dtype == d.dtype && o.dims == d.dims);
    if !fits {
        return Err(Error::Value(format!(
            "host callback returned {:?}, declared {declared:?}",
            outs.iter()
                .map(|o| ArraySpec::new(o.dtype, &o.dims))
                .collect::<Vec<_>>()
        )));
    }
    Ok(())
}

type Sink = Box<dyn Write + Send>;

static PRINT_SINK: LazyLock<Mutex<Sink>> =
    LazyLock::new(|| Mutex::new(Box::new(std::io::stdout())));

/// Sends the output of [`print()`] to `writer` instead of stdout
/// (process-wide: the default for prints outside any
/// [`with_print_output`] scope).
pub fn set_print_output(writer: impl Write + Send + 'static) {
    *PRINT_SINK.lock().unwrap_or_else(|e| e.into_inner()) = Box::new(writer);
}

/// Sends the output of [`print()`] back to stdout.
pub fn reset_print_output() {
    set_print_output(std::io::stdout());
}

/// Where the prints of the calls inside one [`with_print_output`] go.
struct PrintScope(Mutex<Sink>);

/// Runs `f` with the output of every [`print()`] it causes sent to
/// `writer`: eager prints, and prints of the compiled programs it runs,
/// whichever thread XLA runs them on (the scope travels with each
/// execution). Other threads keep their own output, so concurrent callers
/// (and tests) never see each other's lines; outside any scope, prints go
/// to the process-wide writer ([`set_print_output`], stdout by default).
/// Scopes nest: the innermost one wins.
///
/// ```
/// use std::io::Write;
/// use std::sync::{Arc, Mutex};
/// use xlafn::prelude::*;
///
/// #[derive(Clone, Default)]
/// struct Lines(Arc<Mutex<Vec<u8>>>);
/// impl Write for Lines {
///     fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
///         self.0.lock().unwrap().write(b)
///     }
///     fn flush(&mut self) -> std::io::Result<()> {
///         Ok(())
///     }
/// }
///
/// let f = function(|x: Tensor| -> Result<Tensor> {
///     xlafn::print("x is", &[&x])?;
///     Ok(x.clone())
/// });
/// let lines = Lines::default();
/// xlafn::with_print_output(lines.clone(), || f.call((Tensor::scalar(3i32),)))?;
/// assert_eq!(String::from_utf8(lines.0.lock().unwrap().clone()).unwrap(), "x is 3\n");
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn with_print_output<R>(writer: impl Write + Send + 'static, f: impl FnOnce() -> R) -> R {
    let scope: crate::runtime::CallScope = Arc::new(PrintScope(Mutex::new(Box::new(writer))));
    crate::runtime::with_call_scope(Some(scope), f)
}

fn print_line(message: &str, values: &[HostArray]) -> std::result::Result<(), String> {
    let mut parts: Vec<String> = Vec::with_capacity(values.len() + 1);
    if !message.is_empty() {
        parts.push(message.to_string());
    }
    for v in values {
        parts.push(render_array(v.dtype, &v.dims, &v.bytes).map_err(|e| e.to_string())?);
    }
    let line = parts.join(" ");
    let scope = crate::runtime::current_call_scope();
    let mut sink = match scope.as_ref().and_then(|s| s.downcast_ref::<PrintScope>()) {
        Some(scoped) => scoped.0.lock(),
        None => PRINT_SINK.lock(),
    }
    .unwrap_or_else(|e| e.into_inner());
    writeln!(sink, "{line}").map_err(|e| e.to_string())?;
    sink.flush().map_err(|e| e.to_string())
}

/// Prints `message` and the values of `tensors` (NumPy style, separated by
/// spaces) on every execution, like `tf.print`, including inside compiled
/// loops, in the order the program runs them.
///
/// ```
/// use xlafn::prelude::*;
/// let f = function(|x: Tensor| -> Result<Tensor> {
///     xlafn::print("x is", &[&x])?;   // runs on every call
///     Ok(x.clone())
/// });
/// f.call((Tensor::vector(&[1i32, 2])?,))?;   // prints "x is [1 2]"
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn print(message: &str, tensors: &[&Tensor]) -> Result<()> {
    let kind = CallbackKind::Print {
        message: message.to_string(),
    };
    traced_callback(tensors, &[], print_callback(message), kind)?;
    Ok(())
}

/// The closure behind `print(message, ..)`; a loader binds a fresh one for
/// an exported print.
pub(crate) fn print_callback(message: &str) -> Arc<HostCallbackFn> {
    let message = message.to_string();
    Arc::new(move |values: &[HostArray]| {
        print_line(&message, values)?;
        Ok(Vec::new())
    })
}

/// Fails the running program with `message` when any element of `t` is
/// zero (a run-time check for values only known then, like a loop step).
pub(crate) fn assert_nonzero(t: &Tensor, message: &str) -> Result<()> {
    let kind = CallbackKind::NonZero {
        message: message.to_string(),
    };
    traced_callback(&[t], &[], nonzero_check(message), kind)?;
    Ok(())
}

/// The closure behind [`assert_nonzero`]. It reads the bytes directly (no
/// device work inside a running program): an element is zero when all its
/// bytes are, ignoring a float's sign bit (so `-0.0` counts).
pub(crate) fn nonzero_check(message: &str) -> Arc<HostCallbackFn> {
    let message = message.to_string();
    Arc::new(move |values: &[HostArray]| {
        let v = values.first().ok_or("assert_nonzero takes one value")?;
        let size = v.dtype.size_in_bytes().map_err(|e| e.to_string())?;
        let sign_bit = if v.dtype.is_float() { 0x7f } else { 0xff };
        let zero = v.bytes.chunks(size.max(1)).any(|element| {
            let (last, rest) = element.split_last().unwrap_or((&0, &[]));
            rest.iter().all(|b| *b == 0) && last & sign_bit == 0
        });
        if zero {
            return Err(message.clone());
        }
        Ok(Vec::new())
    })
}
