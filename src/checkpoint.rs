//! Layer: a user-facing module over `module`, `variable`, `tensor` and the
//! `safetensors` crate. Checkpoints: a module's variables saved to and
//! restored from a safetensors file, each tensor under the variable's
//! module path (`"layers.0.kernel"`), so a checkpoint restores into a fresh
//! module of the same structure and pretrained weights written by other
//! tools (PyTorch, JAX, Keras via safetensors) load by name.
//!
//! Files are untrusted input: the safetensors crate checks the header and
//! the offsets, and a restore checks every name, dtype and shape against
//! the module *before* assigning anything, so a bad file changes nothing.
//! Saving writes a temporary file beside the target and renames it, so a
//! crash never leaves half a checkpoint under the real name.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::tensor::Tensor;
use crate::variable::Variable;
use safetensors::{Dtype, SafeTensors, tensor::TensorView};
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

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

fn from_safetensors(dtype: Dtype, name: &str) -> Result<DType> {
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
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| io_error("write", &tmp, e))?;
    std::fs::rename(&tmp, path).map_err(|e| {
        std::fs::remove_file(&tmp).ok();
        io_error("write", path, e)
    })
}

/// Every tensor of a safetensors file, by name (for inspecting pretrained
/// weights or restoring by hand).
pub fn read(path: impl AsRef<Path>) -> Result<BTreeMap<String, Tensor>> {
    eager_only("reading")?;
    let path = path.as_ref();
    let bytes = read_file(path)?;
    let file = parse(&bytes, path)?;
    file.tensors()
        .into_iter()
        .map(|(name, view)| Ok((name.clone(), tensor_of(&name, &view)?)))
        .collect()
}

/// The largest checkpoint read (1 TiB): a bound on what a file's declared
/// size may ask of memory, far above real models.
const MAX_CHECKPOINT_BYTES: u64 = 1 << 40;

/// A regular file's bytes; a FIFO or device would hang or never end, so
/// it is refused (the same reader exports and the CLI use).
fn read_file(path: &Path) -> Result<Vec<u8>> {
    crate::export::read_regular_file(path, MAX_CHECKPOINT_BYTES).map_err(|e| match e {
        // The I/O error stays the source, for callers to match its kind.
        Error::Io {
            doing,
            path,
            source,
        } => Error::Io {
            doing: format!("checkpoint: {doing}"),
            path,
            source,
        },
        other => Error::Value(format!(
            "checkpoint: cannot read {}: {other}",
            path.display()
        )),
    })
}

fn parse<'a>(bytes: &'a [u8], path: &Path) -> Result<SafeTensors<'a>> {
    SafeTensors::deserialize(bytes).map_err(|e| {
        Error::invalid(
            "checkpoint",
            format!("{} is not a valid safetensors file: {e}", path.display()),
        )
    })
}

fn tensor_of(name: &str, view: &TensorView) -> Result<Tensor> {
    let dtype = from_safetensors(view.dtype(), name)?;
    let dims: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
    if dtype == DType::Bool {
        // XLA's booleans are 0 or 1; a file may hold any byte.
        let bytes: Vec<u8> = view.data().iter().map(|&b| u8::from(b != 0)).collect();
        return Tensor::from_host_bytes(dtype, &dims, &bytes);
    }
    Tensor::from_host_bytes(dtype, &dims, view.data())
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
    let bytes = read_file(path)?;
    let file = parse(&bytes, path)?;
    let fail = |m: String| {
        Err(Error::invalid(
            "checkpoint",
            format!("cannot restore from {}: {m}", path.display()),
        ))
    };
    let missing: Vec<&str> = variables
        .iter()
        .map(|(n, _)| n.as_str())
        .filter(|n| file.tensor(n).is_err())
        .collect();
    if !missing.is_empty() {
        return fail(format!(
            "no tensor for variable(s) {} (the file has: {})",
            quoted(&missing),
            quoted(&sorted_names(&file))
        ));
    }
    let mut values = Vec::with_capacity(variables.len());
    for (name, v) in variables {
        let view = file.tensor(name).expect("checked above");
        let dims: Vec<i64> = view.shape().iter().map(|&d| d as i64).collect();
        let dtype = from_safetensors(view.dtype(), name)?;
        if dtype != v.dtype() || dims != v.dims() {
            return fail(format!(
                "variable '{name}' is {} {:?}, the file's tensor is {dtype} {dims:?}",
                v.dtype(),
                v.dims()
            ));
        }
        values.push(tensor_of(name, &view)?);
    }
    let wanted: std::collections::HashSet<&str> =
        variables.iter().map(|(n, _)| n.as_str()).collect();
    let unused: Vec<String> = sorted_names(&file)
        .into_iter()
        .filter(|n| !wanted.contains(n))
        .map(str::to_string)
        .collect();
    if !allow_unused && !unused.is_empty() {
        let names: Vec<&str> = unused.iter().map(String::as_str).collect();
        return fail(format!(
            "the module has no variable for {} (use restore_subset to skip them)",
            quoted(&names)
        ));
    }
    for ((_, v), value) in variables.iter().zip(values) {
        v.assign(&value)?;
    }
    Ok(unused)
}

fn sorted_names<'a>(file: &'a SafeTensors) -> Vec<&'a str> {
    let mut names = file.names();
    names.sort_unstable();
    names
}

/// `'a', 'b', ... (N more)`: at most ten names.
fn quoted(names: &[&str]) -> String {
    let shown: Vec<String> = names.iter().take(10).map(|n| format!("'{n}'")).collect();
    match names.len() {
        n if n > 10 => format!("{} ({} more)", shown.join(", "), n - 10),
        _ => shown.join(", "),
    }
}
