//! Host callbacks and `print`: Rust code that runs on every execution of a
//! compiled program (B15, B16), TensorFlow's `tf.print` and
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
use crate::runtime::{HOST_CALLBACK_TARGET, HostArray, HostCallbackFn, register_host_callback};
use crate::tensor::{Tensor, apply, render_array};
use crate::trace;
use std::io::Write;
use std::sync::{Arc, LazyLock, Mutex};

/// A call into a registered Rust closure, with declared result types.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostCallback {
    pub id: i64,
    pub results: Vec<ArraySpec>,
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
        Ok(cx.custom_call(HOST_CALLBACK_TARGET, &operands, self.id, outputs, true))
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
    let f: Arc<HostCallbackFn> = Arc::new(f);
    let id = register_host_callback(f);
    apply(
        HostCallback {
            id,
            results: results.to_vec(),
        },
        inputs,
    )
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

/// Sends the output of [`print()`] to `writer` instead of stdout (process-wide).
pub fn set_print_output(writer: impl Write + Send + 'static) {
    *PRINT_SINK.lock().unwrap_or_else(|e| e.into_inner()) = Box::new(writer);
}

/// Sends the output of [`print()`] back to stdout.
pub fn reset_print_output() {
    set_print_output(std::io::stdout());
}

fn print_line(message: &str, values: &[HostArray]) -> std::result::Result<(), String> {
    let mut parts: Vec<String> = Vec::with_capacity(values.len() + 1);
    if !message.is_empty() {
        parts.push(message.to_string());
    }
    for v in values {
        parts.push(render_array(v.dtype, &v.dims, &v.bytes).map_err(|e| e.to_string())?);
    }
    let mut sink = PRINT_SINK.lock().unwrap_or_else(|e| e.into_inner());
    writeln!(sink, "{}", parts.join(" ")).map_err(|e| e.to_string())?;
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
    let message = message.to_string();
    host_callback(tensors, &[], move |values| {
        print_line(&message, values)?;
        Ok(Vec::new())
    })?;
    Ok(())
}
