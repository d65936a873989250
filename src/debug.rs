//! Check-numerics mode: find the first op whose result contains NaN
//! or Inf, like `tf.debugging.enable_check_numerics`.
//!
//! While enabled, every op with a floating-point result is followed by a
//! check: eagerly the result is read back and inspected at once; in traced
//! functions a host callback inspects it on every execution, so a compiled
//! program stops at the first bad value (callbacks run in program order).
//! The error names the op, the function being traced and the source line
//! of the op's call in user code. Every public op method (and operator)
//! is `#[track_caller]` down to `tensor::apply`, so the line is known
//! without debug info, in release builds too; for an op that xlafn's own
//! code applies (a gradient rule, say) a backtrace finds the user's frame
//! where debug info allows. This mode is a debugging aid: eagerly each
//! result is read back. Programs traced before enabling it are not
//! checked; ops run or traced while it is on are.

use crate::error::{Error, Result};
use crate::ops::callback::HostCallback;
use crate::runtime::{CallbackKind, HostArray, HostCallbackFn};
use crate::tensor::Tensor;
use crate::trace;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

static ENABLED: AtomicBool = AtomicBool::new(false);

/// Turns check-numerics on for ops run or traced from now on (process-wide).
pub fn enable_check_numerics() {
    crate::tensor::hooks::register_numerics_check(crate::tensor::hooks::NumericsCheck {
        active: enabled,
        check: check_results,
    });
    ENABLED.store(true, Ordering::SeqCst);
}

/// Turns check-numerics off.
pub fn disable_check_numerics() {
    ENABLED.store(false, Ordering::SeqCst);
}

pub(crate) fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Where the user called the op, from `#[track_caller]` (which needs no
/// debug info, so it works in release builds): `None` when the caller is
/// inside xlafn itself (an op one of xlafn's own methods or gradient rules
/// applies), where the backtrace must find the user's frame instead.
fn caller_location(caller: &std::panic::Location<'_>) -> Option<String> {
    // This file's path as the compiler saw it ("src/debug.rs" in xlafn's
    // workspace, an absolute path when xlafn is a dependency) gives the
    // prefix of every xlafn source file.
    let own_src = file!().strip_suffix("debug.rs").unwrap_or(file!());
    if caller.file().starts_with(own_src) {
        return None;
    }
    Some(format!(
        "{}:{}:{}",
        caller.file(),
        caller.line(),
        caller.column()
    ))
}

/// The first backtrace frame in user code: the first frame whose function
/// is not in xlafn, the standard library or a closure shim around them.
fn user_location() -> Option<String> {
    let trace = std::backtrace::Backtrace::force_capture().to_string();
    let library = |symbol: &str| {
        let s = symbol.trim_start_matches('<');
        [
            "xlafn::",
            "xlafn_macros::",
            "std::",
            "core::",
            "alloc::",
            "__rustc",
        ]
        .iter()
        .any(|p| s.starts_with(p))
    };
    let mut symbol = "";
    for line in trace.lines().map(str::trim) {
        match line.strip_prefix("at ") {
            Some(location) if !library(symbol) => {
                return Some(location.trim_start_matches("./").to_string());
            }
            Some(_) => {}
            None => symbol = line.split_once(": ").map_or("", |(_, s)| s),
        }
    }
    None
}
fn describe(op: &str, location: &Option<String>) -> String {
    let function = trace::current_function()
        .map(|f| format!(" in function '{f}'"))
        .unwrap_or_default();
    let at = location
        .as_ref()
        .map(|l| format!(" (called at {l})"))
        .unwrap_or_default();
    format!("op '{op}'{function}{at}")
}

fn bad_value(values: &[f64]) -> Option<&'static str> {
    if values.iter().any(|v| v.is_nan()) {
        Some("NaN")
    } else if values.iter().any(|v| v.is_infinite()) {
        Some("Inf")
    } else {
        None
    }
}

fn host_values(a: &HostArray) -> Vec<f64> {
    use crate::dtype::DType;
    use crate::runtime::element::{Element, from_bytes};
    match a.dtype {
        DType::F16 => from_bytes::<half::f16>(&a.bytes)
            .into_iter()
            .map(Element::to_f64)
            .collect(),
        DType::BF16 => from_bytes::<half::bf16>(&a.bytes)
            .into_iter()
            .map(Element::to_f64)
            .collect(),
        DType::F32 => from_bytes::<f32>(&a.bytes)
            .into_iter()
            .map(Element::to_f64)
            .collect(),
        DType::F64 => from_bytes::<f64>(&a.bytes),
        _ => Vec::new(),
    }
}

/// Checks the floating-point results of `op` (called by `tensor::apply`,
/// through `tensor::hooks`, when the mode is on).
pub(crate) fn check_results(
    op: &str,
    results: &[Tensor],
    caller: &'static std::panic::Location<'static>,
) -> Result<()> {
    let floats: Vec<&Tensor> = results.iter().filter(|t| t.dtype().is_float()).collect();
    if floats.is_empty() {
        return Ok(());
    }
    let what = describe(op, &caller_location(caller).or_else(user_location));
    if !trace::is_tracing() {
        for t in floats {
            if let Some(bad) = bad_value(&t.to_f64_vec()?) {
                return Err(Error::invalid(
                    "check_numerics",
                    format!("{what} produced {bad}"),
                ));
            }
        }
        return Ok(());
    }
    for t in floats {
        let kind = CallbackKind::CheckNumerics { what: what.clone() };
        let op = HostCallback::register(numerics_checker(what.clone()), kind, Vec::new());
        let _: Vec<Tensor> = trace::add_op(op.into(), &[t])?;
    }
    Ok(())
}

/// The closure a traced `check_numerics` probe runs; a loader binds a
/// fresh one for an exported probe.
pub(crate) fn numerics_checker(what: String) -> Arc<HostCallbackFn> {
    Arc::new(
        move |values: &[HostArray]| match bad_value(&host_values(&values[0])) {
            Some(bad) => Err(format!("check_numerics: {what} produced {bad}")),
            None => Ok(Vec::new()),
        },
    )
}
