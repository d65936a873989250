//! Weights from elsewhere: pretrained safetensors files (one file, or
//! shards listed by a `model.safetensors.index.json`) and PyTorch's
//! `torch.save` archives of a state dict (`.pth`, `.pt`, `.bin`, read by
//! a restricted unpickler that builds tensors and dicts and runs no code)
//! and Keras' `.weights.h5` files and `.keras` archives (feature `keras`)
//! loaded into a module whose names and layouts differ from the file's,
//! by a [`Mapping`] of renames and layout changes, or by a framework's
//! preset ([`Mapping::torch`], [`Mapping::flax`], [`Mapping::keras`]).
//!
//! Files are untrusted input. [`Weights::open`] reads headers only, with
//! [`checkpoint`](crate::checkpoint)'s reader: the header's length is
//! bounded, its offsets, dtypes and shapes are checked against each other
//! and against the file's size, and data is read later tensor by tensor at
//! its offset. A shard index may name files only inside its own folder
//! (no absolute paths, no `..`, no symbolic link leading out). Every error
//! is an `Error` naming the file or tensor, never a panic.
//!
//! [`load_into`] plans the whole load from the headers first (each file
//! tensor mapped to a variable path of [`Module::named_variables`], its
//! mapped dtype and dims checked against the variable's), then reads,
//! transforms and assigns; a load that fails assigns nothing.
//!
//! ```
//! use xlafn::prelude::*;
//! use xlafn::module::Module;
//! use xlafn::weights::{self, LoadOptions, Mapping, Weights};
//! #[derive(Module)]
//! struct Dense { kernel: Variable, bias: Variable }
//!
//! // A PyTorch Linear(2, 3): weight [out, in] = [3, 2].
//! let w: Vec<f32> = (0..6).map(|i| i as f32).collect();
//! let b = [0f32; 3];
//! let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
//! let (wb, bb) = (bytes(&w), bytes(&b));
//! use safetensors::{Dtype, tensor::TensorView};
//! let file = safetensors::serialize(
//!     [("weight", TensorView::new(Dtype::F32, vec![3, 2], &wb).unwrap()),
//!      ("bias", TensorView::new(Dtype::F32, vec![3], &bb).unwrap())],
//!     None,
//! ).unwrap();
//! let path = std::env::temp_dir().join(format!("linear-{}.safetensors", std::process::id()));
//! std::fs::write(&path, file).unwrap();
//!
//! let dense = Dense {
//!     kernel: Variable::new(Tensor::zeros(&[2, 3], DType::F32)),
//!     bias: Variable::new(Tensor::zeros(&[3], DType::F32)),
//! };
//! let mapping = Mapping::new()
//!     .replace_suffix("weight", "kernel")
//!     .torch_kernel(|name| name == "kernel");
//! let report = weights::load_into(&dense, &Weights::open(&path)?, &mapping, LoadOptions::default())?;
//! assert_eq!(report.loaded.len(), 2);
//! // kernel[i][o] = weight[o][i]
//! assert_eq!(dense.kernel.read().to_vec::<f32>()?, vec![0., 2., 4., 1., 3., 5.]);
//! # std::fs::remove_file(&path).ok();
//! # Ok::<(), xlafn::Error>(())
//! ```
//!
//! Layer: a user-facing module over `module`, `variable`, `tensor` ops,
//! `checkpoint` (its safetensors reader), `export` and `files` (file
//! helpers), `serde_json` (the index), `zip` (PyTorch's archives) and,
//! with `keras`, `hdf5-reader`.

#[cfg(feature = "keras")]
mod keras_file;
mod mapping;
mod presets;
mod torch_file;
mod torch_pickle;

pub use crate::variable::LayerKind;
pub use mapping::{Combine, Mapping, WeightInfo};

use crate::checkpoint::{Checkpoint, from_safetensors};
use crate::error::{Error, Result};
use crate::module::Module;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::collections::{BTreeMap, HashMap};
use std::path::{Component, Path, PathBuf};

/// The largest shard index read (16 MiB): an index lists names and file
/// names, kilobytes even for models of thousands of tensors.
const MAX_INDEX_BYTES: u64 = 16 << 20;

fn invalid(message: String) -> Error {
    Error::invalid("weights", message)
}

/// Open weight files, headers read and checked, data still on disk: one
/// safetensors file, the shards of an index, or a PyTorch `torch.save`
/// archive.
pub struct Weights {
    files: Vec<Source>,
    /// Each tensor's file (an index into `files`).
    names: BTreeMap<String, usize>,
}

impl std::fmt::Debug for Weights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Weights({} tensors in {} files)",
            self.names.len(),
            self.files.len()
        )
    }
}

/// One opened file.
enum Source {
    Safetensors(Checkpoint),
    Torch(torch_file::TorchFile),
    #[cfg(feature = "keras")]
    Keras(keras_file::KerasFile),
}

impl Source {
    fn path(&self) -> &Path {
        match self {
            Source::Safetensors(c) => c.path(),
            Source::Torch(t) => t.path(),
            #[cfg(feature = "keras")]
            Source::Keras(k) => k.path(),
        }
    }

    fn names(&self) -> Vec<&str> {
        match self {
            Source::Safetensors(c) => c.names(),
            Source::Torch(t) => t.names(),
            #[cfg(feature = "keras")]
            Source::Keras(k) => k.names(),
        }
    }

    fn has(&self, name: &str) -> bool {
        match self {
            Source::Safetensors(c) => c.info(name).is_some(),
            Source::Torch(t) => t.info(name).is_some(),
            #[cfg(feature = "keras")]
            Source::Keras(k) => k.info(name).is_some(),
        }
    }

    fn info(&self, name: &str) -> Result<WeightInfo> {
        match self {
            Source::Safetensors(c) => {
                let info = c.info(name).expect("listed in the header");
                Ok(WeightInfo {
                    dtype: from_safetensors(info.dtype, name)?,
                    dims: info.shape.iter().map(|&d| d as i64).collect(),
                })
            }
            Source::Torch(t) => Ok(t.info(name).expect("listed in the pickle")),
            #[cfg(feature = "keras")]
            Source::Keras(k) => Ok(k.info(name).expect("listed in the file")),
        }
    }

    fn tensor(&self, name: &str) -> Result<Tensor> {
        match self {
            Source::Safetensors(c) => c.tensor(name),
            Source::Torch(t) => t.tensor(name),
            #[cfg(feature = "keras")]
            Source::Keras(k) => k.tensor(name),
        }
    }
}

/// The shard index format of Hugging Face's sharded checkpoints.
#[derive(serde::Deserialize)]
struct IndexJson {
    weight_map: BTreeMap<String, String>,
}

impl Weights {
    /// Opens `path`: a shard index when its name ends in `.json`
    /// ([`Weights::open_index`]), else one file ([`Weights::open_file`]).
    pub fn open(path: impl AsRef<Path>) -> Result<Weights> {
        let path = path.as_ref();
        match path.extension().and_then(|e| e.to_str()) {
            Some("json") => Weights::open_index(path),
            _ => Weights::open_file(path),
        }
    }

    /// Opens one file, its header only: a PyTorch `torch.save` archive
    /// (a state dict, told by its zip signature whatever its name:
    /// `.pth`, `.pt`, `.bin`) read with a restricted unpickler that runs
    /// no code, or else a safetensors file.
    pub fn open_file(path: impl AsRef<Path>) -> Result<Weights> {
        eager_only()?;
        let path = path.as_ref();
        let file = open_source(path)?;
        let names = file
            .names()
            .into_iter()
            .map(|n| (n.to_string(), 0))
            .collect();
        Ok(Weights {
            files: vec![file],
            names,
        })
    }

    /// Opens a shard index (`model.safetensors.index.json`): its
    /// `weight_map` names each tensor's file, relative to the index's
    /// folder. Every file named is opened (headers only) and must hold the
    /// tensors the index puts in it; a tensor a shard holds but the index
    /// does not list is left out, as the index is what loaders follow.
    pub fn open_index(path: impl AsRef<Path>) -> Result<Weights> {
        eager_only()?;
        let path = path.as_ref();
        let text = crate::export::read_regular_file(path, MAX_INDEX_BYTES)?;
        let index: IndexJson = serde_json::from_slice(&text).map_err(|e| {
            invalid(format!(
                "{} is not a shard index (a JSON object with a \"weight_map\" of tensor names \
                 to file names): {e}",
                path.display()
            ))
        })?;
        let folder = path.parent().unwrap_or(Path::new("."));
        let folder = if folder.as_os_str().is_empty() {
            Path::new(".")
        } else {
            folder
        };
        let root = folder
            .canonicalize()
            .map_err(|e| Error::io("weights: cannot resolve the index's folder", folder, e))?;
        let mut files: Vec<Source> = Vec::new();
        let mut by_file: HashMap<String, usize> = HashMap::new();
        let mut names = BTreeMap::new();
        for (tensor, file) in &index.weight_map {
            let i = match by_file.get(file) {
                Some(&i) => i,
                None => {
                    let shard = shard_path(&root, file, path)?;
                    files.push(Source::Safetensors(Checkpoint::open(&shard)?));
                    by_file.insert(file.clone(), files.len() - 1);
                    files.len() - 1
                }
            };
            if !files[i].has(tensor) {
                return Err(invalid(format!(
                    "the index {} puts tensor '{tensor}' in '{file}', which has no such tensor",
                    path.display()
                )));
            }
            names.insert(tensor.clone(), i);
        }
        Ok(Weights { files, names })
    }

    /// The tensors' names, sorted.
    pub fn names(&self) -> Vec<&str> {
        self.names.keys().map(String::as_str).collect()
    }

    /// The files opened (one, or the index's shards in first-use order).
    pub fn files(&self) -> Vec<&Path> {
        self.files.iter().map(Source::path).collect()
    }

    /// Tensor `name`'s dtype and dims, from its header; an error if the
    /// file has no such tensor or a dtype xlafn lacks (the 8-bit floats).
    /// Dims are exact: opening the file refused any above `i64::MAX`.
    pub fn info(&self, name: &str) -> Result<WeightInfo> {
        self.file_of(name)?.info(name)
    }

    /// Reads tensor `name` (only its bytes), as the file holds it.
    pub fn tensor(&self, name: &str) -> Result<Tensor> {
        eager_only()?;
        self.file_of(name)?.tensor(name)
    }

    fn file_of(&self, name: &str) -> Result<&Source> {
        self.names
            .get(name)
            .map(|&i| &self.files[i])
            .ok_or_else(|| invalid(format!("no tensor '{name}' in {}", self.describe())))
    }

    fn describe(&self) -> String {
        match self.files.as_slice() {
            [one] => one.path().display().to_string(),
            many => format!("{} files", many.len()),
        }
    }
}

/// Opens one file by its content: a zip archive is PyTorch's `torch.save`
/// or, when it holds `model.weights.h5`, a `.keras` model; an HDF5 file
/// is Keras' weights; anything else is read as safetensors.
fn open_source(path: &Path) -> Result<Source> {
    #[cfg(feature = "keras")]
    {
        if keras_file::looks_like_hdf5(path) {
            return Ok(Source::Keras(keras_file::KerasFile::open(path)?));
        }
        if torch_file::looks_like_torch(path) && keras_file::is_keras_archive(path) {
            return Ok(Source::Keras(keras_file::KerasFile::open_archive(path)?));
        }
    }
    #[cfg(not(feature = "keras"))]
    if is_hdf5(path) {
        return Err(invalid(format!(
            "{} is an HDF5 file (Keras' weights): this build of xlafn leaves out the `keras` \
             feature that reads them",
            path.display()
        )));
    }
    match torch_file::looks_like_torch(path) {
        true => Ok(Source::Torch(torch_file::TorchFile::open(path)?)),
        false => Ok(Source::Safetensors(Checkpoint::open(path)?)),
    }
}

#[cfg(not(feature = "keras"))]
fn is_hdf5(path: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 8];
    crate::files::open_regular(path, true)
        .ok()
        .and_then(|(mut f, _)| f.read_exact(&mut magic).ok())
        .is_some_and(|_| magic == *b"\x89HDF\r\n\x1a\n")
}

/// The shard `file` inside `root` (the index's folder, resolved): a
/// relative path of plain components whose resolved path (links followed)
/// stays inside `root`.
fn shard_path(root: &Path, file: &str, index: &Path) -> Result<PathBuf> {
    let rel = Path::new(file);
    let plain = !file.is_empty() && rel.components().all(|c| matches!(c, Component::Normal(_)));
    let escapes = || {
        invalid(format!(
            "the index {} names shard '{file}', which is not a file inside the index's folder",
            index.display()
        ))
    };
    if !plain {
        return Err(escapes());
    }
    let full = root.join(rel);
    let resolved = full
        .canonicalize()
        .map_err(|e| Error::io("weights: cannot open shard", &full, e))?;
    if !resolved.starts_with(root) {
        return Err(escapes());
    }
    Ok(resolved)
}

fn eager_only() -> Result<()> {
    if crate::trace::is_tracing() {
        return Err(Error::FailedPrecondition(
            "weights: loading runs eagerly, not inside a traced function".into(),
        ));
    }
    Ok(())
}

/// What [`load_into`] may accept.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadOptions {
    /// Accept file tensors that map to no variable (weights of a larger
    /// model, a head not used); by default they are an error.
    pub allow_unused: bool,
    /// Accept variables no file tensor maps to (left as they are: a new
    /// head); by default they are an error.
    pub allow_missing: bool,
}

impl LoadOptions {
    /// Sets [`LoadOptions::allow_unused`].
    pub fn allow_unused(mut self, allow: bool) -> Self {
        self.allow_unused = allow;
        self
    }

    /// Sets [`LoadOptions::allow_missing`].
    pub fn allow_missing(mut self, allow: bool) -> Self {
        self.allow_missing = allow;
        self
    }
}

/// What a load did ([`check`] gives what one would do).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// `(file tensor, variable path)` for each file tensor a variable was
    /// made from, in the module's order (a combined variable once per
    /// part; a tensor cut into several variables once per variable).
    pub loaded: Vec<(String, String)>,
    /// File tensors mapped to no variable, sorted.
    pub unused: Vec<String>,
    /// Variable paths no file tensor mapped to, in the module's order.
    pub missing: Vec<String>,
    /// File tensors the mapping skipped, sorted.
    pub skipped: Vec<String>,
    /// Variables made from several file tensors, in the module's order.
    pub combined: Vec<CombinedWeight>,
}

/// A variable a preset made from several file tensors (PyTorch's two LSTM
/// biases, Flax's per-gate kernels).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CombinedWeight {
    /// The variable's path.
    pub variable: String,
    /// The file tensors, in part order.
    pub sources: Vec<String>,
    /// How they were combined.
    pub how: Combine,
}

/// How one variable is made: one file tensor's plan, or the parts of a
/// combined one, by slot.
#[derive(Default)]
struct Recipe {
    parts: Vec<(String, mapping::Plan)>,
}

impl Recipe {
    /// Adds `file`'s plan; two whole tensors, or two for one slot, are
    /// an error.
    fn add(&mut self, file: &str, plan: mapping::Plan) -> Result<()> {
        let clash = self.parts.iter().find(|(_, p)| match (p.part, plan.part) {
            (Some(a), Some(b)) => a.slot == b.slot || a.combine != b.combine || a.of != b.of,
            _ => true,
        });
        if let Some((other, _)) = clash {
            return Err(invalid(format!(
                "file tensors '{other}' and '{file}' both map to variable '{}'",
                plan.name
            )));
        }
        self.parts.push((file.to_string(), plan));
        self.parts.sort_by_key(|(_, p)| p.part.map(|p| p.slot));
        Ok(())
    }

    fn combine(&self) -> Option<Combine> {
        self.parts
            .first()
            .and_then(|(_, p)| p.part.map(|p| p.combine))
    }

    /// Refuses a combined variable with parts missing, or whose parts do
    /// not add up to it: loading half of one would be a silent wrong
    /// answer (an LSTM with one of its two biases).
    fn check_complete(&self, path: &str, dims: &[i64]) -> Result<()> {
        let Some(part) = self.parts.first().and_then(|(_, p)| p.part) else {
            return Ok(());
        };
        let files: Vec<String> = self.parts.iter().map(|(f, _)| f.clone()).collect();
        if self.parts.len() != part.of {
            return Err(invalid(format!(
                "variable '{path}' is {} from {} file tensors, but the file has only {} of them: \
                 [{}]",
                part.combine.describe(),
                part.of,
                self.parts.len(),
                quoted(&files)
            )));
        }
        if let Combine::Concat(axis) = part.combine {
            let total: i64 = self
                .parts
                .iter()
                .map(|(_, p)| p.info.dims[axis as usize])
                .sum();
            if dims.get(axis as usize) != Some(&total) {
                return Err(invalid(format!(
                    "variable '{path}' is {dims:?}, but its parts [{}] concatenate to {total} \
                     along axis {axis}",
                    quoted(&files)
                )));
            }
        }
        Ok(())
    }

    /// Reads, transforms and combines the parts.
    fn value(&self, weights: &Weights) -> Result<Tensor> {
        let values: Vec<Tensor> = self
            .parts
            .iter()
            .map(|(file, plan)| plan.apply(weights.tensor(file)?))
            .collect::<Result<_>>()?;
        match self.combine() {
            None => Ok(values.into_iter().next().expect("a recipe has a part")),
            Some(Combine::Sum) => values[1..]
                .iter()
                .try_fold(values[0].clone(), |a, b| a.add(b)),
            Some(Combine::Stack) => Tensor::stack(&values, 0),
            Some(Combine::Concat(axis)) => Tensor::concat(&values, axis),
        }
    }
}

/// What a part's header must be for variable `v`: the whole variable,
/// one entry of a stack, or a piece of a concatenation (the same rank,
/// and the same sizes off the axis).
fn part_fits(plan: &mapping::Plan, v: &Variable) -> bool {
    let (got, want) = (&plan.info.dims, v.dims());
    if plan.info.dtype != v.dtype() {
        return false;
    }
    match plan.part.map(|p| p.combine) {
        None | Some(Combine::Sum) => *got == want,
        Some(Combine::Stack) => {
            want.first() == plan.part.map(|p| p.of as i64).as_ref() && got[..] == want[1..]
        }
        Some(Combine::Concat(axis)) => {
            got.len() == want.len()
                && got
                    .iter()
                    .zip(want.iter())
                    .enumerate()
                    .all(|(i, (g, w))| i == axis as usize || g == w)
        }
    }
}

/// Loads `weights` into the variables of `module` through `mapping`.
///
/// Every file tensor is mapped (renamed, its layout and dtype changed) and
/// matched to the variable of that path; the mapped dtype and dims must be
/// the variable's (an error names the variable, the file tensor and both
/// types). By default a file tensor with no variable, or a variable with
/// no tensor, is an error listing both kinds; [`LoadOptions`] accepts
/// either ([`check`] gives the same lists without loading). All of this is
/// decided from the headers; then each tensor is read, transformed and,
/// once all are, assigned, so a failed load changes nothing. The values of
/// every matched tensor are held at once before assignment.
pub fn load_into(
    module: &(impl Module + ?Sized),
    weights: &Weights,
    mapping: &Mapping,
    options: LoadOptions,
) -> Result<LoadReport> {
    eager_only()?;
    let variables = module.named_variables();
    if variables.is_empty() && !weights.names().is_empty() {
        return Err(invalid(
            "the module has no variables yet: a layer made lazily builds its weights on its \
             first call; build them before loading (`build` with the input sizes: \
             `Lstm::build(features, dtype)`, `MultiHeadAttention::build(..)`, a builder's \
             `build(in_features)`) or call the model once on an example input"
                .to_string(),
        ));
    }
    let (report, recipes) = plan(&variables, weights, mapping)?;
    let refused = (!report.missing.is_empty() && !options.allow_missing)
        || (!report.unused.is_empty() && !options.allow_unused);
    if refused {
        let unbuilt_hint = match report.unused.is_empty() {
            true => "",
            // A lazy layer lists no variables until it is built.
            false => "; a layer not built yet has none: build it first",
        };
        return Err(invalid(format!(
            "the file and the module do not match: variables with no tensor: [{}]; file \
             tensors with no variable: [{}] (LoadOptions allows either; Mapping renames{})",
            quoted(&report.missing),
            quoted(&report.unused),
            unbuilt_hint
        )));
    }
    let by_path: HashMap<&str, &Variable> =
        variables.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let mut values = Vec::with_capacity(recipes.len());
    for (path, _) in &variables {
        if let Some(recipe) = recipes.get(path) {
            values.push((by_path[path.as_str()], recipe.value(weights)?));
        }
    }
    for (v, value) in values {
        v.assign(&value)?;
    }
    Ok(report)
}

/// What [`load_into`] would load, leave unused and find missing, from
/// the headers alone (no data read, nothing assigned): to inspect a file
/// against a model, or to build a mapping step by step. Errors as
/// [`load_into`] does for a dtype or shape that does not fit and for two
/// tensors mapped to one variable, not for unused or missing ones.
pub fn check(
    module: &(impl Module + ?Sized),
    weights: &Weights,
    mapping: &Mapping,
) -> Result<LoadReport> {
    Ok(plan(&module.named_variables(), weights, mapping)?.0)
}

/// The report, and each matched variable's recipe by path.
fn plan(
    variables: &[(String, Variable)],
    weights: &Weights,
    mapping: &Mapping,
) -> Result<(LoadReport, HashMap<String, Recipe>)> {
    let by_path: HashMap<&str, &Variable> =
        variables.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let mut report = LoadReport::default();
    let mut recipes: HashMap<String, Recipe> = HashMap::new();
    let file: Vec<(String, WeightInfo)> = weights
        .names()
        .into_iter()
        .map(|n| Ok((n.to_string(), weights.info(n)?)))
        .collect::<Result<_>>()?;
    let resolved = mapping.resolve(&file)?;
    for (name, info) in &file {
        let name = name.as_str();
        let plans = mapping.plan(&resolved, name, info)?;
        if plans.is_empty() {
            report.skipped.push(name.to_string());
            continue;
        }
        let mut used = false;
        for plan in plans {
            let Some(v) = by_path.get(plan.name.as_str()) else {
                continue;
            };
            used = true;
            if !part_fits(&plan, v) {
                let part = match plan.part {
                    Some(p) => format!(
                        " as part {} of {} ({})",
                        p.slot + 1,
                        p.of,
                        p.combine.describe()
                    ),
                    None => String::new(),
                };
                return Err(invalid(format!(
                    "variable '{}' is {}{:?}, but file tensor '{name}' ({}) maps to {}{part}{}",
                    plan.name,
                    v.dtype(),
                    v.dims(),
                    weights.info(name)?,
                    plan.info,
                    layout_hint(&plan.info.dims, v.dims(), plan.info.dtype != v.dtype())
                )));
            }
            recipes
                .entry(plan.name.clone())
                .or_default()
                .add(name, plan)?;
        }
        if !used {
            report.unused.push(name.to_string());
        }
    }
    for (path, v) in variables {
        let Some(recipe) = recipes.get(path) else {
            report.missing.push(path.clone());
            continue;
        };
        recipe.check_complete(path, v.dims())?;
        for (file, _) in &recipe.parts {
            report.loaded.push((file.clone(), path.clone()));
        }
        if let Some(how) = recipe.combine() {
            report.combined.push(CombinedWeight {
                variable: path.clone(),
                sources: recipe.parts.iter().map(|(f, _)| f.clone()).collect(),
                how,
            });
        }
    }
    Ok((report, recipes))
}

/// What to try when a file tensor's dims do not fit its variable's: a
/// permutation of the same sizes is a layout the mapping has not
/// converted (PyTorch's `[out, in]` against `[in, out]`), a dtype differs
/// by a cast.
fn layout_hint(file: &[i64], variable: &[i64], dtype_differs: bool) -> String {
    let mut hints = Vec::new();
    if file != variable && file.len() == variable.len() {
        let mut unused: Vec<Option<i64>> = file.iter().copied().map(Some).collect();
        let perm: Option<Vec<i64>> = variable
            .iter()
            .map(|d| {
                let i = unused.iter().position(|u| *u == Some(*d))?;
                unused[i] = None;
                Some(i as i64)
            })
            .collect();
        if let Some(perm) = perm {
            hints.push(format!(
                "the sizes are the same in another order: Mapping::transpose(.., &{perm:?}) \
                 (or torch_kernel for PyTorch's layouts) converts it"
            ));
        }
    }
    if dtype_differs {
        hints.push("Mapping::cast converts the dtype".to_string());
    }
    match hints.is_empty() {
        true => String::new(),
        false => format!("; {}", hints.join("; ")),
    }
}

/// `'a', 'b', ... (N more)`: at most ten names.
fn quoted(names: &[String]) -> String {
    let shown: Vec<String> = names.iter().take(10).map(|n| format!("'{n}'")).collect();
    match names.len() {
        n if n > 10 => format!("{} ({} more)", shown.join(", "), n - 10),
        _ => shown.join(", "),
    }
}
