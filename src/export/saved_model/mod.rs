//! Layer: export (imports the export folder's reader and checks, `files`,
//! `dtype`, `error`, prost, and crc through `bundle`). TensorFlow
//! SavedModels of exported functions: TensorFlow 2 loads, calls and
//! serves what xlafn writes here, with nothing of xlafn installed.
//!
//! The bridge is TensorFlow's `XlaCallModule` op (the one `jax2tf` uses):
//! it carries a StableHLO module and runs it through TensorFlow's own XLA.
//! Each program of an export becomes a TensorFlow function whose body is
//! one `XlaCallModule` over xlafn's StableHLO text, fed by the inputs, the
//! variables (TensorFlow resource variables, read and, for a training
//! step, assigned) and the captured constants (frozen into the graph as
//! `Const` nodes). `graph` builds the messages (`proto`), `bundle` writes
//! the variables as a TensorFlow checkpoint (`variables/`), which
//! `tf.train.load_checkpoint` reads too.
//!
//! A SavedModel is written from an export folder ([`from_export`], also
//! `xlafn export --format saved_model`), so it passes every check an
//! export passes before anything is converted; a function with host
//! callbacks is refused (TensorFlow cannot call back into Rust). `read`
//! goes the other way for `xlafn::load` and `xlafn::export::inspect`: a
//! SavedModel xlafn wrote becomes its export folder again, checked as
//! any export is, after the digests xlafn wrote beside it
//! (`xlafn_saved_model.sha256`).
//!
//! Choices where TensorFlow leaves room, written down in the book's
//! export chapter: one signature per program (`serving_default`, then
//! `serving_1`, ...), keyword arguments named after the function's
//! parameters (made valid TensorFlow names: lower-case, `_` for other
//! characters), outputs `output_0`, ...; the variables are the root
//! object's attributes, named after the xlafn variables; `platforms` is
//! one platform (`CPU` by default), since a module for several platforms
//! must take the platform's index as an extra argument.

pub(crate) mod bundle;
mod graph;
mod proto;
mod read;
mod table;

pub(crate) use read::{is_saved_model, through_export};

use crate::error::{Error, ErrorCode, Result};
use crate::files;
use crate::function::{ArgList, ConcreteFunction, Output};
use bundle::BundleValue;
use graph::{Capture, Model, Program, Spec, Variable};
use prost::Message as _;
use std::collections::BTreeMap;
use std::path::Path;

/// The platform an exported SavedModel's programs run on in TensorFlow.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum TfPlatform {
    /// TensorFlow's CPU (the default).
    #[default]
    Cpu,
    /// TensorFlow's CUDA GPUs.
    Cuda,
}

impl TfPlatform {
    /// The name `XlaCallModule` knows it by.
    fn name(self) -> &'static str {
        match self {
            TfPlatform::Cpu => "CPU",
            TfPlatform::Cuda => "CUDA",
        }
    }
}

/// The largest `saved_model.pb` written: protocol buffers cannot exceed
/// 2 GiB, and TensorFlow refuses larger ones.
const MAX_SAVED_MODEL_BYTES: usize = (2 << 30) - 1;

/// How [`from_export_with`] writes a SavedModel.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SavedModelOptions {
    /// The TensorFlow platform the programs run on (the CPU by default).
    pub platform: TfPlatform,
    /// Freeze the variables into the graph as constants instead of
    /// writing them as TensorFlow variables (TensorFlow's "frozen graph":
    /// nothing to restore, nothing to fine-tune). A function that updates
    /// a variable cannot be frozen.
    pub freeze_variables: bool,
}

/// Writes the export at `export_dir` as a TensorFlow SavedModel in the
/// new folder `out_dir` (it must not exist yet), for TensorFlow's CPU,
/// its variables TensorFlow variables.
pub fn from_export(export_dir: impl AsRef<Path>, out_dir: impl AsRef<Path>) -> Result<()> {
    from_export_with(export_dir, out_dir, &SavedModelOptions::default())
}

/// [`from_export`] with `options`.
pub fn from_export_with(
    export_dir: impl AsRef<Path>,
    out_dir: impl AsRef<Path>,
    options: &SavedModelOptions,
) -> Result<()> {
    let mut model = model_of(export_dir.as_ref(), options.platform)?;
    if options.freeze_variables {
        freeze(&mut model)?;
    }
    write(&model, out_dir.as_ref())
}

/// Makes `model`'s variables constants of its graph.
fn freeze(model: &mut Model) -> Result<()> {
    if let Some(&v) = model.updates.first() {
        return Err(Error::Value(format!(
            "SavedModel export: the variables cannot be frozen: the function updates {:?}",
            model.variables[v].name
        )));
    }
    let first = model.constants.len();
    for capture in &mut model.captures {
        if let Capture::Variable(v) = *capture {
            *capture = Capture::Constant(first + v);
        }
    }
    let variables = std::mem::take(&mut model.variables);
    model.constants.extend(variables);
    Ok(())
}

impl<Args: ArgList, Out: Output> ConcreteFunction<Args, Out> {
    /// Writes this function as a TensorFlow SavedModel in the new folder
    /// `dir`, for TensorFlow's CPU: what [`ConcreteFunction::export`]
    /// writes (with the same `shapes`), converted by [`from_export`].
    /// TensorFlow loads it with `tf.saved_model.load(dir)` and calls
    /// `.signatures["serving_default"](x=...)`; the variables are
    /// TensorFlow variables, saved in `dir/variables/`.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// let dir = std::env::temp_dir().join(format!("doc-saved-model-{}", std::process::id()));
    /// let w = Variable::new(Tensor::vector(&[1f32, 2.])?);
    /// let f = function(move |x: Tensor| x.mul(&w.read()));
    /// let cf = f.get_concrete_function((TensorSpec::known(&[2], DType::F32),))?;
    /// cf.export_saved_model(&dir, &[])?;
    /// assert!(dir.join("saved_model.pb").is_file());
    /// assert!(dir.join("variables/variables.index").is_file());
    /// std::fs::remove_dir_all(&dir).unwrap();
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    pub fn export_saved_model(
        &self,
        dir: impl AsRef<Path>,
        shapes: &[Vec<Vec<i64>>],
    ) -> Result<()> {
        let dir = dir.as_ref();
        // The export is written beside `dir` (under a name nobody can
        // guess or plant) and removed once converted.
        let name = dir
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        let scratch = dir.with_file_name(format!(
            ".{name}.xlafn-export-{}",
            files::unpredictable_suffix()
        ));
        let converted = self
            .export(&scratch, shapes)
            .and_then(|()| from_export(&scratch, dir));
        let _ = std::fs::remove_dir_all(&scratch);
        converted
    }
}

/// The SavedModel's content from a checked export.
fn model_of(dir: &Path, platform: TfPlatform) -> Result<Model> {
    let export = super::read_checked(dir)?;
    let m = &export.manifest;
    if !m.callbacks.is_empty() {
        let names: Vec<String> = m.callbacks.iter().map(describe).collect();
        return Err(Error::distributed(
            ErrorCode::Unimplemented,
            format!(
                "SavedModel export: the function calls host callbacks ({}), and TensorFlow \
             cannot call back into Rust; export a function without them",
                names.join(", ")
            ),
        ));
    }
    let names: Vec<String> = m.inputs.iter().map(|s| s.name.clone()).collect();
    let input_names = graph::input_names(&names);
    let n_out = m.outputs.len();
    let programs = export
        .programs
        .iter()
        .map(|checked| Program {
            inputs: input_names
                .iter()
                .zip(&export.input_specs)
                .zip(&checked.json.input_shapes)
                .map(|((name, (dtype, _)), dims)| Spec {
                    name: name.clone(),
                    dtype: *dtype,
                    dims: dims.clone(),
                })
                .collect(),
            outputs: m
                .outputs
                .iter()
                .zip(&checked.signature.results)
                .map(|(o, r)| Spec {
                    name: o.name.clone(),
                    dtype: r.dtype,
                    dims: r.dims.clone(),
                })
                .collect(),
            text: checked.text.clone(),
        })
        .collect();
    let value = |name: String, a: &crate::runtime::HostArray| Variable {
        name,
        dtype: a.dtype,
        dims: a.dims.clone(),
        bytes: a.bytes.clone(),
    };
    let mut updates = Vec::new();
    for k in 0..m.updates.len() {
        let u = m
            .updates
            .iter()
            .find(|u| u.result == n_out + k)
            .ok_or_else(|| {
                Error::Value(format!(
                    "export: no update is result {} (updates follow the {n_out} outputs)",
                    n_out + k
                ))
            })?;
        updates.push(u.variable);
    }
    Ok(Model {
        programs,
        constants: export
            .constants
            .iter()
            .enumerate()
            .map(|(i, a)| value(format!("constant_{i}"), a))
            .collect(),
        variables: export
            .variables
            .iter()
            .zip(&m.variables)
            .map(|(a, f)| value(f.name.clone(), a))
            .collect(),
        captures: m
            .captures
            .iter()
            .map(|c| match *c {
                super::CaptureJson::Constant { index } => Capture::Constant(index),
                super::CaptureJson::Variable { index } => Capture::Variable(index),
            })
            .collect(),
        updates,
        platforms: vec![platform.name().into()],
    })
}

/// A host callback as the refusal names it.
fn describe(c: &super::callbacks::CallbackJson) -> String {
    use super::callbacks::CallbackJson;
    match c {
        CallbackJson::Print { .. } => "a print".into(),
        CallbackJson::CheckNumerics { what } => format!("check_numerics of {what}"),
        CallbackJson::NonZero { .. } => "a nonzero check".into(),
        CallbackJson::Host { name } => format!("the host callback {name:?}"),
    }
}

/// Writes `model` as a SavedModel in the new folder `dir`.
fn write(model: &Model, dir: &Path) -> Result<()> {
    let (saved_model, checkpoint_graph) = graph::saved_model(model)?;
    let bytes = saved_model.encode_to_vec();
    if bytes.len() > MAX_SAVED_MODEL_BYTES {
        return Err(Error::Value(format!(
            "SavedModel export: saved_model.pb would be {} bytes, over protocol buffers' \
             2 GiB limit (large captured constants are frozen into it; make them variables)",
            bytes.len()
        )));
    }
    let mut tensors = BTreeMap::new();
    let children = graph::variable_children(model);
    for (v, child) in model.variables.iter().zip(&children) {
        tensors.insert(
            graph::checkpoint_key(child),
            BundleValue::Numeric {
                dtype: v.dtype,
                dims: v.dims.clone(),
                bytes: v.bytes.clone(),
            },
        );
    }
    tensors.insert(
        "_CHECKPOINTABLE_OBJECT_GRAPH".to_string(),
        BundleValue::Strings {
            dims: Vec::new(),
            values: vec![checkpoint_graph.encode_to_vec()],
        },
    );
    std::fs::create_dir(dir).map_err(|e| files::io("creating", dir, e))?;
    let variables = dir.join("variables");
    std::fs::create_dir(&variables).map_err(|e| files::io("creating", &variables, e))?;
    let prefix = variables.join("variables");
    bundle::write_bundle(&prefix, &tensors)?;
    files::write_new(&dir.join("saved_model.pb"), &bytes)?;
    // Last, as an export's digest is: it says the folder is whole.
    let digests = [
        ("saved_model.pb".to_string(), files::sha256_hex(&bytes)),
        (
            relative(dir, &bundle::index_path(&prefix)),
            file_sha256(&bundle::index_path(&prefix))?,
        ),
        (
            relative(dir, &bundle::data_path(&prefix)),
            file_sha256(&bundle::data_path(&prefix))?,
        ),
    ];
    let text: String = digests.iter().map(|(f, h)| format!("{h}  {f}\n")).collect();
    files::write_new(&dir.join(DIGESTS), text.as_bytes())
}

/// The digests of an xlafn SavedModel's files (`sha256sum` format), which
/// TensorFlow ignores and xlafn's loader checks: a SavedModel itself
/// carries no checksum of its graph.
pub(crate) const DIGESTS: &str = "xlafn_saved_model.sha256";

/// `path` relative to `dir`, `/`-separated.
fn relative(dir: &Path, path: &Path) -> String {
    let rel = path.strip_prefix(dir).unwrap_or(path);
    rel.components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect::<Vec<_>>()
        .join("/")
}

/// The sha256 of the regular file at `path` (no link followed, no FIFO
/// waited on), read a piece at a time: a checkpoint may be large.
pub(crate) fn file_sha256(path: &Path) -> Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let (mut file, _) = files::open_regular(path, false)?;
    let mut hasher = sha2::Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file
            .read(&mut buf)
            .map_err(|e| files::io("reading", path, e))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(files::hex(&hasher.finalize()))
}
