//! Host callbacks across exports: what an exported program may call.
//!
//! In a running process a program's `callback_id` attributes hold random
//! registry ids (see `runtime::ffi`). Those mean nothing in another
//! process, and a program read from a file must not reach the loading
//! process's own callbacks. So an export declares every callback its
//! programs use in the manifest (`callbacks`: kind and message or name)
//! and writes each program's ids as indices into that list. The loader
//! binds each declaration to a fresh registration of the loading process
//! (`print` and the other built-ins to its own, a user callback only to a
//! closure the caller supplies under the same name) and rewrites the
//! indices into those ids. A program naming an index the manifest does not
//! declare, or writing `callback_id` in any other form, is refused before
//! it is compiled; the registrations live as long as the loaded function.

use crate::error::{Error, Result};
use crate::runtime::{
    CallbackKind, CallbackRegistration, HostCallbackFn, host_callback_kind, register_host_callback,
};
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// One declared callback in the manifest.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub(super) enum CallbackJson {
    Print { message: String },
    CheckNumerics { what: String },
    NonZero { message: String },
    Host { name: String },
}

const ATTRIBUTE: &str = "callback_id";

/// Replaces the value of every `callback_id = <value> : i64` in `text`
/// with `map(value)`; any other spelling of the attribute is an error, so
/// no callback id reaches XLA unexamined.
fn rewrite_ids(text: &str, mut map: impl FnMut(&str) -> Result<i64>) -> Result<String> {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(ATTRIBUTE) {
        out.push_str(&rest[..at]);
        let after = &rest[at + ATTRIBUTE.len()..];
        let value = after
            .strip_prefix(" = ")
            .and_then(|v| v.split_once(" : i64"))
            .map(|(v, _)| v)
            .filter(|v| !v.is_empty() && v.len() <= 20 && !v.contains(char::is_whitespace))
            .ok_or_else(|| {
                Error::Value(format!(
                    "export: a program names a host callback in a form xlafn does not write \
                     ({:?})",
                    &rest[at..(at + 40).min(rest.len())]
                ))
            })?;
        out.push_str(&format!("{ATTRIBUTE} = {} : i64", map(value)?));
        rest = &after[" = ".len() + value.len() + " : i64".len()..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The callbacks an export's programs use, in first-use order.
#[derive(Default)]
pub(super) struct Declared {
    ids: Vec<i64>,
    json: Vec<CallbackJson>,
}

impl Declared {
    /// `text` (a lowered program of this process) with its callback ids
    /// replaced by their index in the declarations, adding new ones.
    pub(super) fn rewrite(&mut self, text: &str) -> Result<String> {
        rewrite_ids(text, |value| {
            let id: i64 = value
                .parse()
                .map_err(|_| Error::Value(format!("export: bad callback id {value}")))?;
            Ok(self.declare(id)? as i64)
        })
    }

    /// The index of the callback registered under `id` among the declared
    /// ones, declaring it on first sight.
    pub(super) fn declare(&mut self, id: i64) -> Result<usize> {
        if let Some(i) = self.ids.iter().position(|x| *x == id) {
            return Ok(i);
        }
        let json = match host_callback_kind(id) {
            Some(CallbackKind::Print { message }) => CallbackJson::Print { message },
            Some(CallbackKind::CheckNumerics { what }) => CallbackJson::CheckNumerics { what },
            Some(CallbackKind::NonZero { message }) => CallbackJson::NonZero { message },
            Some(CallbackKind::Host { name: Some(name) }) => CallbackJson::Host { name },
            Some(CallbackKind::Host { name: None }) => {
                return Err(Error::Value(
                    "export: the function calls an unnamed host_callback, which a loading \
                     process could not bind; use named_host_callback and supply the \
                     closure to load_with_callbacks"
                        .into(),
                ));
            }
            None => {
                return Err(Error::Value(format!(
                    "export: the program calls host callback {id}, which is not registered"
                )));
            }
        };
        self.ids.push(id);
        self.json.push(json);
        Ok(self.ids.len() - 1)
    }

    pub(super) fn into_json(self) -> Vec<CallbackJson> {
        self.json
    }
}

/// Closures the caller offers a loaded export, by the name its
/// `named_host_callback` had.
pub type SuppliedCallbacks<'a> = &'a [(&'a str, Arc<HostCallbackFn>)];

/// The loading process's registrations for an export's declarations;
/// dropping them (with the loaded function) frees the closures.
#[derive(Default)]
pub(super) struct Bound {
    registrations: Vec<Arc<CallbackRegistration>>,
}

impl Bound {
    /// Registers this process's callback for each declaration.
    pub(super) fn bind(declared: &[CallbackJson], supplied: SuppliedCallbacks) -> Result<Bound> {
        let mut registrations = Vec::with_capacity(declared.len());
        for d in declared {
            let (f, kind) = match d {
                // The message is the manifest's text, printed on every
                // call: escaped (newlines too) so a crafted export cannot
                // send terminal escapes or forge lines of output. The kind
                // keeps the text as declared, for a re-export.
                CallbackJson::Print { message } => (
                    crate::ops::callback::print_callback(&super::printable(message, false)),
                    CallbackKind::Print {
                        message: message.clone(),
                    },
                ),
                CallbackJson::CheckNumerics { what } => (
                    crate::debug::numerics_checker(what.clone()),
                    CallbackKind::CheckNumerics { what: what.clone() },
                ),
                CallbackJson::NonZero { message } => (
                    crate::ops::callback::nonzero_check(message),
                    CallbackKind::NonZero {
                        message: message.clone(),
                    },
                ),
                CallbackJson::Host { name } => {
                    let f = supplied
                        .iter()
                        .find(|(n, _)| n == name)
                        .map(|(_, f)| f.clone())
                        .ok_or_else(|| {
                            Error::Value(format!(
                                "export: the function calls host callback '{name}'; supply a \
                                 closure under that name to load_with_callbacks"
                            ))
                        })?;
                    let name = Some(name.clone());
                    (f, CallbackKind::Host { name })
                }
            };
            registrations.push(register_host_callback(f, kind));
        }
        Ok(Bound { registrations })
    }

    /// `text` (a program read from `file`) with each declared index
    /// replaced by this process's id; undeclared indices are refused.
    /// The registration bound to declared callback `index`.
    pub(super) fn registration(&self, index: usize) -> Result<Arc<CallbackRegistration>> {
        self.registrations.get(index).cloned().ok_or_else(|| {
            Error::Value(format!(
                "export: the saved graph calls host callback {index}, which the manifest does not \
                 declare ({} declared)",
                self.registrations.len()
            ))
        })
    }

    pub(super) fn rewrite(&self, text: &str, file: &str) -> Result<String> {
        rewrite_ids(text, |value| {
            value
                .parse::<usize>()
                .ok()
                .and_then(|i| self.registrations.get(i))
                .map(|r| r.id())
                .ok_or_else(|| {
                    Error::Value(format!(
                        "export: {file} calls host callback {value}, which the manifest does not \
                         declare ({} declared); a loaded program may only call its own callbacks",
                        self.registrations.len()
                    ))
                })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_rewritten_and_other_spellings_refused() {
        let text = "a {callback_id = 17 : i64} b {callback_id = -4 : i64}";
        let out = rewrite_ids(text, |v| Ok(v.parse::<i64>().unwrap() * 2)).unwrap();
        assert_eq!(out, "a {callback_id = 34 : i64} b {callback_id = -8 : i64}");
        for bad in [
            "{callback_id = 0x11 : i32}",
            "{\"callback_id\" = 1 : i64}",
            "{callback_id=1 : i64}",
        ] {
            assert!(rewrite_ids(bad, |_| Ok(0)).is_err(), "{bad}");
        }
    }

    #[test]
    fn undeclared_indices_are_refused() {
        let bound = Bound::default();
        let e = bound
            .rewrite("{callback_id = 0 : i64}", "program_0.mlir")
            .unwrap_err();
        assert!(e.to_string().contains("does not declare"), "{e}");
    }
}
