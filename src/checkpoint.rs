//! Layer: a user-facing module over `module`, `optimizers`, `variable`,
//! `tensor` and the `safetensors` crate. Checkpoints: a module's variables saved to and
//! restored from a safetensors file, each tensor under the variable's
//! module path (`"layers.0.kernel"`), so a checkpoint restores into a fresh
//! module of the same structure and pretrained weights written by other
//! tools (PyTorch, JAX, Keras via safetensors) load by name.
//!
//! Files are untrusted input. A read starts with the header alone (its
//! 8-byte length bounded, then the JSON the safetensors crate checks for
//! offsets and sizes that add up to the file's length), so a garbage or
//! huge file is refused before any of its data is read; only then are the
//! bytes the header names for the wanted tensors read. A restore checks
//! every name, dtype and shape against the module *before* reading or
//! assigning anything, so a bad file changes nothing.
//!
//! Saving writes a new temporary file under an unpredictable name beside
//! the target, syncs it and renames it into place (the writer exports use):
//! a crash never leaves half a checkpoint under the real name, a link
//! planted at either name is never written through (one at the target is
//! replaced), and concurrent saves never share a temporary file.
//!
//! [`save_training`] and [`restore_training`] also keep an optimizer's
//! state (its step count and slot variables, named by
//! [`Optimizer::state_variables`] under `optimizer.`), so a run stopped
//! at step N and restored continues exactly as the uninterrupted run.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::{Module, join};
use crate::optimizers::Optimizer;
use crate::tensor::Tensor;
use crate::variable::Variable;
use safetensors::Dtype;
use safetensors::tensor::{Metadata, TensorInfo, TensorView};
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

fn to_safetensors(dtype: DType, name: &str) -> Result<Dtype> {
    Ok(match dtype {
        DType::Bool => Dtype::BOOL,
        DType::I8 => Dtype::I8,
        DType::I16 => Dtype::I16,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::U8 => Dtype::U8,
        DType::U16 => Dtype::U16,
        DType::U32 => Dtype::U32,
        DType::U64 => Dtype::U64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
        DType::C64 => Dtype::C64,
        other => {
            return Err(Error::Type(format!(
                "checkpoint: variable '{name}' is {other}, which safetensors cannot store"
            )));
        }
    })
}

pub(crate) fn from_safetensors(dtype: Dtype, name: &str) -> Result<DType> {
    Ok(match dtype {
        Dtype::BOOL => DType::Bool,
        Dtype::I8 => DType::I8,
        Dtype::I16 => DType::I16,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::U8 => DType::U8,
        Dtype::U16 => DType::U16,
        Dtype::U32 => DType::U32,
        Dtype::U64 => DType::U64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        Dtype::C64 => DType::C64,
        other => {
            return Err(Error::Type(format!(
                "checkpoint: tensor '{name}' has dtype {other:?}, which xlafn does not have"
            )));
        }
    })
}

fn eager_only(what: &str) -> Result<()> {
    if crate::trace::is_tracing() {
        return Err(Error::FailedPrecondition(format!(
            "checkpoint: {what} runs eagerly, not inside a traced function"
        )));
    }
    Ok(())
}

fn io_error(what: &str, path: &Path, e: std::io::Error) -> Error {
    Error::io(format!("checkpoint: cannot {what}"), path, e)
}

/// An error of the export layer's file helpers, said of the checkpoint:
/// an I/O failure keeps its `io::Error` as the source (callers match its
/// kind); any other (a FIFO refused, say) is a ValueError naming the file.
fn file_error(what: &str, path: &Path, e: Error) -> Error {
    match e {
        Error::Io {
            doing,
            path,
            detail,
            source,
        } => Error::Io {
            doing: format!("checkpoint: {doing}"),
            path,
            detail,
            source,
        },
        other => Error::Value(format!(
            "checkpoint: cannot {what} {}: {other}",
            path.display()
        )),
    }
}

/// Saves the variables of `module` to the safetensors file `path`, each
/// under its module path (replacing the file if it exists).
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::{checkpoint, module::Module};
/// #[derive(Module)]
/// struct Linear { w: Variable, b: Variable }
/// let make = |v: f32| Linear {
///     w: Variable::new(Tensor::from_vec(vec![v; 6], &[2, 3]).unwrap()),
///     b: Variable::new(Tensor::zeros(&[3], DType::F32)),
/// };
/// let path = std::env::temp_dir().join(format!("linear-{}.safetensors", std::process::id()));
/// checkpoint::save(&make(0.5), &path)?;
/// let fresh = make(0.0);
/// checkpoint::restore(&fresh, &path)?;
/// assert_eq!(fresh.w.read().to_vec::<f32>()?, vec![0.5; 6]);
/// # std::fs::remove_file(&path).ok();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn save(module: &(impl Module + ?Sized), path: impl AsRef<Path>) -> Result<()> {
    save_named(&module.named_variables(), path)
}

/// [`save`] for variables named by hand.
pub fn save_named(variables: &[(String, Variable)], path: impl AsRef<Path>) -> Result<()> {
    eager_only("saving")?;
    let path = path.as_ref();
    let mut seen = HashMap::new();
    let mut arrays = Vec::with_capacity(variables.len());
    for (name, v) in variables {
        if seen.insert(name.as_str(), ()).is_some() {
            return Err(Error::invalid(
                "checkpoint",
                format!("two variables are named '{name}'"),
            ));
        }
        let dtype = to_safetensors(v.dtype(), name)?;
        arrays.push((name.clone(), dtype, v.try_read()?.to_host_array()?));
    }
    let views = arrays
        .iter()
        .map(|(name, dtype, a)| {
            let shape = a.dims.iter().map(|&d| d as usize).collect();
            TensorView::new(*dtype, shape, &a.bytes)
                .map(|view| (name.as_str(), view))
                .map_err(|e| Error::Value(format!("checkpoint: variable '{name}': {e}")))
        })
        .collect::<Result<Vec<_>>>()?;
    let bytes = safetensors::serialize(views, None)
        .map_err(|e| Error::Value(format!("checkpoint: cannot encode: {e}")))?;
    crate::export::replace_file(path, &bytes).map_err(|e| file_error("write", path, e))
}

/// The model's variables and the optimizer's state for its trainable
/// ones, the optimizer's under `optimizer.`.
fn training_variables(
    model: &(impl Module + ?Sized),
    optimizer: &(impl Optimizer + ?Sized),
    build: bool,
) -> Result<Vec<(String, Variable)>> {
    let mut variables = model.named_variables();
    let trainable: Vec<(String, Variable)> = variables
        .iter()
        .filter(|(_, v)| v.trainable())
        .cloned()
        .collect();
    for (name, v) in optimizer.state_variables(&trainable, build)? {
        variables.push((join("optimizer", &name), v));
    }
    Ok(variables)
}

/// Saves a training run: the variables of `model` as [`save`] does, and
/// the state of `optimizer` for the model's trainable variables (the
/// step count `optimizer.iterations` and each slot under
/// `optimizer.<slot>.<model path>`, `optimizer.momentum.layers.0.kernel`).
/// [`restore_training`] into a fresh model and optimizer of the same
/// configuration then continues the run bit for bit. Saving creates no
/// variable (see [`Optimizer::state_variables`]).
pub fn save_training(
    model: &(impl Module + ?Sized),
    optimizer: &(impl Optimizer + ?Sized),
    path: impl AsRef<Path>,
) -> Result<()> {
    eager_only("saving")?;
    save_named(&training_variables(model, optimizer, false)?, path)
}

/// Restores what [`save_training`] saved into `model` and `optimizer`
/// (usually fresh ones): the optimizer is built for the model's trainable
/// variables first (its slots and step count created, as `build` does),
/// then every variable is checked and assigned as [`restore`] does. A
/// name the file lacks (a slot this optimizer's configuration uses, say
/// momentum the saved run had not) or has beyond them, or a dtype or
/// shape that differs, is an error naming it, and then nothing is
/// assigned (the slots built stay at their starting values).
///
/// A checkpoint of another optimizer (SGD's restored into Adam) is told
/// apart by its slots: the file does not record the optimizer's kind, so
/// the error names the kind its slot names suggest (`m` and `v`: Adam;
/// `momentum` alone: SGD with momentum; none: plain SGD) beside this
/// optimizer's.
pub fn restore_training(
    model: &(impl Module + ?Sized),
    optimizer: &(impl Optimizer + ?Sized),
    path: impl AsRef<Path>,
) -> Result<()> {
    eager_only("restoring")?;
    let path = path.as_ref();
    let variables = training_variables(model, optimizer, true)?;
    match restore_from(&variables, path, false) {
        Ok(_) => Ok(()),
        Err(Error::InvalidArgument { op, message }) => {
            // Header only: the file was readable a moment ago.
            let Ok(file) = Checkpoint::open(path) else {
                return Err(Error::InvalidArgument { op, message });
            };
            let saved = slot_names(file.names());
            let wanted = slot_names(variables.iter().map(|(n, _)| n.as_str()));
            if saved == wanted {
                return Err(Error::InvalidArgument { op, message });
            }
            Err(Error::InvalidArgument {
                op,
                message: format!(
                    "{message}. The file holds the state of {} (judged by its slot names: \
                     checkpoints do not record the optimizer), this optimizer is {}: restore \
                     with the optimizer (and options) that saved it",
                    optimizer_kind(&saved),
                    optimizer_kind(&wanted)
                ),
            })
        }
        Err(e) => Err(e),
    }
}

/// The optimizer slots among checkpoint names: `<slot>` of each
/// `optimizer.<slot>.<variable path>`.
fn slot_names<'a>(names: impl IntoIterator<Item = &'a str>) -> std::collections::BTreeSet<&'a str> {
    names
        .into_iter()
        .filter_map(|n| {
            let (slot, rest) = n.strip_prefix("optimizer.")?.split_once('.')?;
            (!rest.is_empty()).then_some(slot)
        })
        .collect()
}

/// The optimizer a set of slot names suggests, for messages.
fn optimizer_kind(slots: &std::collections::BTreeSet<&str>) -> String {
    let has = |s: &str| slots.contains(s);
    let kind = if has("m") && has("v") {
        if has("v_max") {
            "Adam (amsgrad)"
        } else {
            "Adam"
        }
    } else if has("mean_square") {
        "RMSprop"
    } else if has("accumulator") {
        "Adagrad"
    } else if slots.len() == 1 && has("momentum") {
        "SGD with momentum"
    } else if slots.is_empty() {
        "an optimizer without slots (SGD without momentum)"
    } else {
        "an optimizer"
    };
    if slots.is_empty() {
        kind.to_string()
    } else {
        let list: Vec<String> = slots.iter().map(|s| format!("'{s}'")).collect();
        format!("{kind} (slots {})", list.join(", "))
    }
}

/// Every tensor of a safetensors file, by name (for inspecting pretrained
/// weights or restoring by hand).
pub fn read(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    eager_only("reading")?;
    let file = Checkpoint::open(path.as_ref())?;
    file.names()
        .into_iter()
        .map(|name| Ok((name.to_string(), file.tensor(name)?)))
        .collect()
}

/// The largest checkpoint read (1 TiB): a bound on what a file's declared
/// size may ask of memory, far above real models.
const MAX_CHECKPOINT_BYTES: u64 = 1 << 40;

/// The largest header read (100 MB, the safetensors crate's own bound):
/// a header of names, dtypes, shapes and offsets is kilobytes even for
/// models of thousands of tensors.
const MAX_HEADER_BYTES: u64 = 100_000_000;

/// The largest dimension a tensor of a file may have (`i64::MAX`, as
/// xlafn's and XLA's dimensions are `i64`).
const MAX_DIM: u64 = i64::MAX as u64;

/// An open safetensors file whose header has been read and checked; the
/// tensor data stays on disk until a tensor is asked for, so checking a
/// file against a module costs the header, not the whole file (also the
/// reader of `weights`, for pretrained files and their shards).
pub(crate) struct Checkpoint {
    path: PathBuf,
    file: File,
    /// Where the data section starts (8 + the header's length).
    data_start: u64,
    metadata: Metadata,
    /// The tensors' names, sorted (for messages and [`read`]).
    names: Vec<String>,
}

impl Checkpoint {
    /// Opens `path` (a regular file: a FIFO or device would hang or never
    /// end, so it is refused, as by the reader exports and the CLI use)
    /// and reads its header: the 8-byte little-endian length, bounded by
    /// [`MAX_HEADER_BYTES`] and the file's size, then the JSON it
    /// announces, whose offsets must cover the rest of the file exactly.
    pub(crate) fn open(path: &Path) -> Result<Self> {
        let (file, len) =
            crate::export::open_regular_file(path).map_err(|e| file_error("read", path, e))?;
        let invalid = |m: String| {
            Error::invalid(
                "checkpoint",
                format!("{} is not a valid safetensors file: {m}", path.display()),
            )
        };
        if len > MAX_CHECKPOINT_BYTES {
            return Err(invalid(format!(
                "it has {len} bytes, more than the {MAX_CHECKPOINT_BYTES} a checkpoint may have"
            )));
        }
        if len < 8 {
            return Err(invalid(format!(
                "it has {len} bytes, too few for the 8-byte header length"
            )));
        }
        let mut n = [0u8; 8];
        file.read_exact_at(&mut n, 0)
            .map_err(|e| io_error("read", path, e))?;
        let n = u64::from_le_bytes(n);
        if n > MAX_HEADER_BYTES {
            return Err(invalid(format!(
                "its header length {n} is over the {MAX_HEADER_BYTES} bytes allowed"
            )));
        }
        if n > len - 8 {
            return Err(invalid(format!(
                "its header length {n} runs past the end of the file ({len} bytes)"
            )));
        }
        let mut header = vec![0u8; n as usize];
        file.read_exact_at(&mut header, 8)
            .map_err(|e| io_error("read", path, e))?;
        // Deserializing `Metadata` runs the crate's own checks: offsets in
        // order and contiguous, each tensor's byte size matching its dtype
        // and shape (with overflow checked).
        let metadata: Metadata =
            serde_json::from_slice(&header).map_err(|e| invalid(format!("bad header: {e}")))?;
        let data_start = 8 + n;
        let data_len = len - data_start;
        if metadata.data_len() as u64 != data_len {
            return Err(invalid(format!(
                "its header describes {} bytes of tensor data, the file has {data_len}",
                metadata.data_len()
            )));
        }
        let mut names = metadata.offset_keys();
        names.sort_unstable();
        // The crate checks that sizes add up, which a dimension of 2^64 - 1
        // beside a 0 does: xlafn's dims are i64, so a dimension must fit.
        for name in &names {
            let info = metadata.info(name).expect("a name of the header");
            if let Some(d) = info.shape.iter().find(|&&d| d as u64 > MAX_DIM) {
                return Err(invalid(format!(
                    "tensor '{name}' has dimension {d}, more than the {MAX_DIM} a dimension may be"
                )));
            }
        }
        Ok(Checkpoint {
            path: path.to_path_buf(),
            file,
            data_start,
            metadata,
            names,
        })
    }

    /// The file's path, as given to [`Checkpoint::open`].
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn info(&self, name: &str) -> Option<&TensorInfo> {
        self.metadata.info(name)
    }

    /// The names of the file's tensors, sorted.
    pub(crate) fn names(&self) -> Vec<&str> {
        self.names.iter().map(String::as_str).collect()
    }

    /// Reads tensor `name`: only the bytes its header entry names.
    pub(crate) fn tensor(&self, name: &str) -> Result<Tensor> {
        let info = self.info(name).ok_or_else(|| {
            Error::invalid(
                "checkpoint",
                format!("{} has no tensor '{name}'", self.path.display()),
            )
        })?;
        let dtype = from_safetensors(info.dtype, name)?;
        let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        let (start, end) = info.data_offsets;
        let mut bytes = vec![0u8; end - start];
        self.file
            .read_exact_at(&mut bytes, self.data_start + start as u64)
            .map_err(|e| io_error("read", &self.path, e))?;
        crate::dtype::normalize_bools(dtype, &mut bytes);
        Tensor::from_host_bytes(dtype, &dims, &bytes)
    }
}

/// Restores every variable of `module` from `path`: each must be in the
/// file under its path with the same dtype and shape, and the file may
/// hold nothing else (Keras' `load_weights`). Nothing is assigned unless
/// all of it matches.
pub fn restore(module: &(impl Module + ?Sized), path: impl AsRef<Path>) -> Result<()> {
    restore_from(&module.named_variables(), path.as_ref(), false).map(|_| ())
}

/// Like [`restore`], but the file may hold tensors the module has no
/// variable for (pretrained weights for a larger model, a head replaced);
/// returns their names. Every variable of the module must still be there.
pub fn restore_subset(
    module: &(impl Module + ?Sized),
    path: impl AsRef<Path>,
) -> Result<Vec<String>> {
    restore_from(&module.named_variables(), path.as_ref(), true)
}

fn restore_from(
    variables: &[(String, Variable)],
    path: &Path,
    allow_unused: bool,
) -> Result<Vec<String>> {
    eager_only("restoring")?;
    let file = Checkpoint::open(path)?;
    let fail = |m: String| {
        Err(Error::invalid(
            "checkpoint",
            format!("cannot restore from {}: {m}", path.display()),
        ))
    };
    let missing: Vec<&str> = variables
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| file.info(n).is_none())
        .collect();
    if !missing.is_empty() {
        return fail(format!(
            "no tensor for variable(s) {} (the file has: {})",
            quoted(&missing),
            quoted(&file.names())
        ));
    }
    // Every dtype and shape is checked from the header before any data is
    // read, so a mismatched file costs nothing but its header.
    for (name, v) in variables {
        let info = file.info(name).expect("checked above");
        let dims: Vec<i64> = info.shape.iter().map(|&d| d as i64).collect();
        let dtype = from_safetensors(info.dtype, name)?;
        if dtype != v.dtype() || dims != v.dims() {
            return fail(format!(
                "variable '{name}' is {} {:?}, the file's tensor is {dtype} {dims:?}",
                v.dtype(),
                v.dims()
            ));
        }
    }
    let wanted: std::collections::HashSet<&str> =
        variables.iter().map(|(n, _)| n.as_str()).collect();
    let unused: Vec<String> = file
        .names()
        .into_iter()
        .filter(|n| !wanted.contains(n))
        .map(str::to_string)
        .collect();
    if variables.is_empty() && !unused.is_empty() {
        return fail(
            "the module has no variables yet: a layer made lazily builds its weights on its \
             first call; build them before restoring (`build` with the input sizes: \
             `Lstm::build(features, dtype)`, `MultiHeadAttention::build(..)`, a builder's \
             `build(in_features)`) or call the model once on an example input"
                .to_string(),
        );
    }
    if !allow_unused && !unused.is_empty() {
        let names: Vec<&str> = unused.iter().map(String::as_str).collect();
        return fail(format!(
            "the module has no variable for {} (use restore_subset to skip them)",
            quoted(&names)
        ));
    }
    let values = variables
        .iter()
        .map(|(name, _)| file.tensor(name))
        .collect::<Result<Vec<_>>>()?;
    for ((_, v), value) in variables.iter().zip(values) {
        v.assign(&value)?;
    }
    Ok(unused)
}

/// `'a', 'b', ... (N more)`: at most ten names.
pub(crate) fn quoted(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(10).map(|n| format!("'{n}'")).collect();
    match names.len() {
        n if n > 10 => format!("{} ({} more)", shown.join(", "), n - 10),
        _ => shown.join(", "),
    }
}
