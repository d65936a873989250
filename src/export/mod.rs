//! Layer: export (the counterpart of SavedModel for concrete
//! functions). `ConcreteFunction::export(dir)` writes a self-describing
//! folder; `xlafn::load(dir)` runs it in any process, with no closure.
//! Imports the function, lowering, runtime, tensor and variable layers.
//!
//! Layout of an export folder (format version 2, see `manifest`):
//! - `xlafn_export.json`: the manifest: format name and version, the
//!   function's name and parameter names, input and output specs, one
//!   program per specialization (StableHLO text files), the captured
//!   constants and variables (`.npy` files), each file with its size and
//!   sha256, and which results update which variable.
//! - `xlafn_export.json.sha256`: the manifest's sha256 (`sha256sum` format).
//! - `program_N.mlir`: StableHLO for one set of concrete input shapes
//!   (XLA compiles static shapes; unknown dims export one specialization
//!   per requested shape).
//! - `constant_N.npy`, `variable_N.npy`: captured values.
//!
//! An export folder is untrusted input: XLA aborts the process (or hangs)
//! on some programs it is handed, and nothing in Rust can catch that. So
//! loading checks everything before a byte reaches XLA, and damaged or
//! crafted exports give errors, not crashes:
//! - `files`: only regular files inside the folder, read with the sizes
//!   the manifest promises; exports write only new files;
//! - `manifest`: the digests (manifest included), then every index, name
//!   and shape in the manifest;
//! - `program_check`: each program uses only what xlafn emits, within
//!   bounded size and nesting, every type within `dtype::check_array_size`;
//!   here its `@main` signature is matched against the manifest's inputs,
//!   captured values, outputs and updates;
//! - `npy`: the `.npy` reader returns errors for any bytes.
//!
//! `npy`, `npz` and `io` are also the crate's tensor files (`xlafn::io`),
//! and `inspect` reads an export's signature and programs without
//! compiling anything (for `xlafn show` and `xlafn stablehlo`).
//!
//! What a loaded export can still do is what any function can: compute
//! for long (a `while` loop), use memory up to its types' sizes, and run
//! host callbacks registered in the loading process (see the book's
//! security page, `book/src/reference/security.md`).

mod callbacks;
mod inspect;
pub mod io;
mod manifest;
pub mod npy;
pub mod npz;
#[cfg(feature = "saved_model")]
pub mod saved_model;
/// The program check lives with the StableHLO it reads (`lower`); exports
/// are its main user.
pub use crate::lower::program_check;
mod specialize;
#[doc(hidden)]
pub mod testing;

pub use manifest::{FORMAT, SpecJson, VERSION};

pub use callbacks::SuppliedCallbacks;
pub use inspect::{ExportInfo, ProgramInfo, VariableInfo, inspect, printable};

use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::files;
use crate::function::trace_type::{TensorSpec, TraceType};
use crate::function::{ArgList, ConcreteFunction, Output, program_traits};
use crate::ir::Shape;
use crate::lower;
use crate::runtime::{Buffer, Client, CompileOptions, Executable, HostArray, ProgramTraits};
use crate::tensor::Tensor;
use crate::trace::CaptureSource;
use crate::variable::{VarRef, Variable};
use files::io;
use manifest::{
    CaptureJson, DIGEST, GraphFileJson, MANIFEST, Manifest, ProgramJson, TensorFileJson,
    UpdateJson, parse_spec, sha256_hex,
};
use program_check::Signature;
use std::path::Path;
use std::sync::Arc;

/// Reads the regular file at `path` (a final symlink is followed: this is
/// for files a user names, such as the CLI's `--input`), refusing FIFOs,
/// devices and files over `limit` bytes instead of hanging or filling
/// memory.
pub fn read_regular_file(path: &Path, limit: u64) -> Result<Vec<u8>> {
    files::read_limited(path, limit, true)
}

/// Opens the regular file at `path` for reading (a final symlink is
/// followed, as for [`read_regular_file`]) and gives its size, for readers
/// that check a header before deciding how much more to read.
pub(crate) fn open_regular_file(path: &Path) -> Result<(std::fs::File, u64)> {
    files::open_regular(path, true)
}

/// Writes `bytes` to a new file at `path`: an existing file or symlink
/// there is an error, never overwritten or followed.
pub fn write_new_file(path: &Path, bytes: &[u8]) -> Result<()> {
    files::write_new(path, bytes)
}

/// Writes `bytes` to `path`, replacing a file there: written to a new
/// file beside it under an unpredictable name, synced, then renamed over
/// it (a symlink at `path` is replaced, not followed; readers never see
/// half a file; concurrent writers never share a temporary file).
pub fn replace_file(path: &Path, bytes: &[u8]) -> Result<()> {
    files::replace(path, bytes)
}

/// Creates the file `path` for writing a piece at a time, replacing what
/// is there as [`replace_file`] does (a new file beside it, renamed over
/// it at once): the handle writes to that new file, never through a link
/// or into a FIFO planted at `path`.
#[cfg_attr(not(feature = "summary"), allow(dead_code))]
pub(crate) fn replace_file_streaming(path: &Path) -> Result<std::fs::File> {
    files::replace_streaming(path)
}

/// Errors unless a file can be created beside `path` (checked by making
/// and removing a temporary one); `path` itself is left alone.
#[cfg_attr(not(feature = "summary"), allow(dead_code))]
pub(crate) fn check_writable(path: &Path) -> Result<()> {
    files::check_writable(path)
}

fn spec_json(name: &str, spec: &TensorSpec) -> SpecJson {
    SpecJson {
        name: name.to_string(),
        dtype: spec.dtype.name().to_string(),
        shape: spec.shape.dims().map(<[_]>::to_vec),
    }
}

fn host_of(t: &Tensor) -> Result<HostArray> {
    let b = t.buffer()?;
    Ok(HostArray {
        dtype: b.dtype(),
        dims: b.dims().to_vec(),
        bytes: b.to_bytes()?,
    })
}

/// The files of an export, kept in memory until everything is computed,
/// so an export that fails writes nothing (or removes what it wrote).
#[derive(Default)]
struct Pending {
    files: Vec<(String, Vec<u8>)>,
}

impl Pending {
    fn add(&mut self, file: String, bytes: Vec<u8>) -> (String, u64, String) {
        let entry = (file.clone(), bytes.len() as u64, sha256_hex(&bytes));
        self.files.push((file, bytes));
        entry
    }

    fn tensor(&mut self, file: String, name: String, t: &Tensor) -> Result<TensorFileJson> {
        self.array(file, name, &host_of(t)?)
    }

    fn array(&mut self, file: String, name: String, a: &HostArray) -> Result<TensorFileJson> {
        let (file, size, sha256) = self.add(file, npy::encode(a)?);
        Ok(TensorFileJson {
            name,
            file,
            size,
            sha256,
        })
    }

    /// Writes the files, then `manifest` and its digest, into `dir`
    /// (created if missing). Every file is created new; on failure the
    /// files this call created are removed.
    fn write(mut self, dir: &Path, manifest: &Manifest) -> Result<()> {
        let text =
            serde_json::to_string_pretty(manifest).map_err(|e| Error::Value(e.to_string()))?;
        std::fs::create_dir_all(dir).map_err(|e| io("cannot create the folder", dir, e))?;
        // The manifest and its digest last: a folder without them is an
        // unfinished export, refused by `load`.
        let digest = manifest::digest_line(text.as_bytes());
        self.files.push((MANIFEST.into(), text.into_bytes()));
        self.files.push((DIGEST.into(), digest.into_bytes()));
        let mut written = Vec::new();
        for (file, bytes) in &self.files {
            let path = dir.join(file);
            if let Err(e) = files::write_new(&path, bytes) {
                // Only files this call created (`create_new`) are removed.
                for p in written {
                    let _ = std::fs::remove_file(p);
                }
                return Err(e);
            }
            written.push(path);
        }
        Ok(())
    }
}

impl<Args: ArgList, Out: Output> ConcreteFunction<Args, Out> {
    /// Writes this function to `dir` so `xlafn::load` can run it without
    /// its closure. `shapes` lists the concrete argument shapes to compile
    /// for (one program each); empty means the function's own input shapes,
    /// which must then be fully known. Parameters must be tensors or host
    /// literals (literals are baked in); variables are saved with their
    /// current values and stay variables when loaded. Files are created
    /// new, so `dir` must not hold an earlier export: a file (or a planted
    /// symlink) already there is an error, never overwritten. [`load`]'s
    /// documentation has an example of both.
    pub fn export(&self, dir: impl AsRef<Path>, shapes: &[Vec<Vec<i64>>]) -> Result<()> {
        let dir = dir.as_ref();
        let core = &self.core;
        let mut pending = Pending::default();
        let mut inputs = Vec::new();
        for (name, ty) in core.arg_names.iter().zip(&core.function_type) {
            match ty {
                TraceType::Tensor(spec) => inputs.push((name.clone(), spec.clone())),
                TraceType::Literal(_) => {}
                other => {
                    return Err(Error::Value(format!(
                        "export supports tensor and literal parameters; '{name}' is {other}"
                    )));
                }
            }
        }
        let mut constants = Vec::new();
        let mut variables: Vec<(VarRef, TensorFileJson)> = Vec::new();
        let mut captures = Vec::new();
        let mut capture_specs = Vec::new();
        for c in &core.captures {
            // A captured constant; a sharded one is saved whole, since an
            // export runs on one device.
            let constant = match &c.source {
                CaptureSource::Eager(b) => Some(Tensor::from_shared_buffer(b.clone())),
                CaptureSource::Sharded(t) => Some(t.unshard()?),
                _ => None,
            };
            if let Some(t) = constant {
                let i = constants.len();
                constants.push(pending.tensor(
                    format!("constant_{i}.npy"),
                    format!("constant_{i}"),
                    &t,
                )?);
                capture_specs.push(ArraySpec::new(t.dtype(), &t.dims()));
                captures.push(CaptureJson::Constant { index: i });
                continue;
            }
            match &c.source {
                CaptureSource::Variable(r @ VarRef::Captured(_)) => {
                    let var = Variable::from_inner(r.resolve(&[], &core.name)?);
                    let i = variables.len();
                    let file = pending.tensor(
                        format!("variable_{i}.npy"),
                        var.name().to_string(),
                        &var.try_read()?,
                    )?;
                    capture_specs.push(ArraySpec::new(var.dtype(), var.dims()));
                    variables.push((r.clone(), file));
                    captures.push(CaptureJson::Variable { index: i });
                }
                _ => {
                    return Err(Error::Value(
                        "export: variable parameters and outer captures cannot be exported".into(),
                    ));
                }
            }
        }
        let mut updates = Vec::new();
        for (r, result) in &core.updates {
            let index = match variables.iter().position(|(v, _)| v.same(r)) {
                Some(i) => i,
                None => {
                    let var = Variable::from_inner(r.resolve(&[], &core.name)?);
                    let i = variables.len();
                    let file = pending.tensor(
                        format!("variable_{i}.npy"),
                        var.name().to_string(),
                        &var.try_read()?,
                    )?;
                    variables.push((r.clone(), file));
                    i
                }
            };
            updates.push(UpdateJson {
                variable: index,
                result: *result,
            });
        }
        let wanted: Vec<Vec<i64>> = inputs
            .iter()
            .map(|(_, s)| s.shape.as_known().unwrap_or_default())
            .collect();
        let shape_sets: Vec<Vec<Vec<i64>>> = if shapes.is_empty() {
            if inputs.iter().any(|(_, s)| !s.shape.is_fully_known()) {
                return Err(Error::Value(
                    "export: the inputs have unknown dimensions; list the shapes to compile for"
                        .into(),
                ));
            }
            vec![wanted]
        } else {
            shapes.to_vec()
        };
        let mut programs = Vec::new();
        let mut declared = callbacks::Declared::default();
        for (k, set) in shape_sets.iter().enumerate() {
            if set.len() != inputs.len() {
                return Err(Error::Value(format!(
                    "export: shape set {k} has {} shapes for {} inputs",
                    set.len(),
                    inputs.len()
                )));
            }
            let mut specs: Vec<ArraySpec> = inputs
                .iter()
                .zip(set)
                .map(|((_, s), d)| ArraySpec::new(s.dtype, d))
                .collect();
            specs.extend(capture_specs.iter().cloned());
            let aliases = core.variable_aliases(inputs.len());
            let lowered = lower::lower_with_slots(&core.graph, &specs, &aliases, |_| false)?;
            let text = declared.rewrite(&lowered.text)?;
            // What `load` would refuse is refused now, with the same words,
            // rather than in another process later.
            program_check::check_program(&format!("program_{k}.mlir"), &text)?;
            let traits = program_traits(&lowered.size);
            let (file, size, sha256) = pending.add(format!("program_{k}.mlir"), text.into_bytes());
            programs.push(ProgramJson {
                input_shapes: set.clone(),
                file,
                size,
                sha256,
                light: traits.light,
                small_array_graph: traits.small_array_graph,
            });
        }
        // The graph itself, so a loader can compile shapes not listed.
        let graph_json =
            crate::ops::codec::encode_graph(&core.graph, &mut |id| declared.declare(id))?;
        let graph_bytes =
            serde_json::to_vec(&graph_json).map_err(|e| Error::Value(e.to_string()))?;
        let (file, size, sha256) = pending.add("graph.json".into(), graph_bytes);
        let graph = Some(GraphFileJson { file, size, sha256 });
        let results = core.graph.results();
        let outputs = results[..core.num_outputs]
            .iter()
            .enumerate()
            .map(|(i, r)| {
                let t = core.graph.value_type(*r);
                spec_json(
                    &format!("output_{i}"),
                    &TensorSpec {
                        shape: t.shape.clone(),
                        dtype: t.dtype,
                        name: None,
                    },
                )
            })
            .collect();
        let manifest = Manifest {
            format: FORMAT.into(),
            version: VERSION,
            name: core.name.clone(),
            implements: core.implements.clone(),
            inputs: inputs.iter().map(|(n, s)| spec_json(n, s)).collect(),
            outputs,
            programs,
            constants,
            variables: variables.into_iter().map(|(_, f)| f).collect(),
            captures,
            updates,
            callbacks: declared.into_json(),
            graph,
        };
        pending.write(dir, &manifest)
    }
}

/// `LoadedFunction("name", 2 inputs, 1 outputs, 3 variables, 1 programs)`.
impl std::fmt::Debug for LoadedFunction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "LoadedFunction({:?}, {} inputs, {} outputs, {} variables, {} programs)",
            self.name,
            self.inputs.len(),
            self.outputs.len(),
            self.variables.len(),
            self.programs.len()
        )
    }
}

/// A function loaded from an export folder.
pub struct LoadedFunction {
    name: String,
    implements: Option<String>,
    inputs: Vec<SpecJson>,
    outputs: Vec<SpecJson>,
    input_specs: Vec<(DType, Shape)>,
    programs: Vec<(Vec<Vec<i64>>, Arc<Executable>)>,
    constants: Vec<Tensor>,
    variables: Vec<Variable>,
    captures: Vec<CaptureJson>,
    updates: Vec<UpdateJson>,
    /// Compiles shapes the listed programs do not cover, when the export
    /// kept its graph.
    specializer: Option<specialize::Specializer>,
    /// This process's callbacks bound for the programs (freed with them).
    _callbacks: callbacks::Bound,
}

/// Reads `file` of the export, which must have the size and sha256 the
/// manifest gives.
fn read_signed(dir: &Path, file: &str, size: u64, sha256: &str) -> Result<Vec<u8>> {
    let bytes = files::read_exact_size(dir, file, size)?;
    if sha256_hex(&bytes) != sha256 {
        return Err(Error::Value(format!(
            "export: {} is damaged or was changed (sha256 mismatch)",
            dir.join(file).display()
        )));
    }
    Ok(bytes)
}

fn load_array(dir: &Path, f: &TensorFileJson) -> Result<HostArray> {
    npy::decode(&read_signed(dir, &f.file, f.size, &f.sha256)?)
        .map_err(|e| Error::Value(format!("export: {}: {e}", f.file)))
}

/// An export folder read and checked, nothing compiled: what [`load`]
/// compiles, and what the SavedModel writer converts. Every check of the
/// module docs has passed.
pub(crate) struct CheckedExport {
    manifest: Manifest,
    input_specs: Vec<(DType, Shape)>,
    constants: Vec<HostArray>,
    variables: Vec<HostArray>,
    contract: Contract,
    /// Each listed program, checked against the manifest.
    programs: Vec<CheckedProgram>,
}

/// One listed program of a [`CheckedExport`].
pub(crate) struct CheckedProgram {
    /// Its manifest entry.
    json: ProgramJson,
    /// Its StableHLO text.
    text: String,
    /// Its `@main` signature, as read from the text (the SavedModel
    /// writer's output types; `load` needs only `params`).
    #[cfg_attr(not(feature = "saved_model"), allow(dead_code))]
    signature: Signature,
    /// Its parameters, as the manifest declares them (the inputs at this
    /// program's shapes, then the captures): what it is compiled for.
    params: Vec<ArraySpec>,
}

/// Reads the export at `dir` and checks it: the manifest and its digests,
/// every value file, and every program against the manifest.
pub(crate) fn read_checked(dir: &Path) -> Result<CheckedExport> {
    let m = manifest::read(dir)?;
    let input_specs: Vec<(DType, Shape)> =
        m.inputs.iter().map(parse_spec).collect::<Result<_>>()?;
    let output_specs: Vec<(DType, Shape)> =
        m.outputs.iter().map(parse_spec).collect::<Result<_>>()?;
    let constants: Vec<HostArray> = m
        .constants
        .iter()
        .map(|f| load_array(dir, f))
        .collect::<Result<_>>()?;
    let variables: Vec<HostArray> = m
        .variables
        .iter()
        .map(|f| load_array(dir, f))
        .collect::<Result<_>>()?;
    let spec = |a: &HostArray| ArraySpec::new(a.dtype, &a.dims);
    // In range: `manifest::read` checked every index.
    let capture_specs: Vec<ArraySpec> = m
        .captures
        .iter()
        .map(|c| match c {
            CaptureJson::Constant { index } => spec(&constants[*index]),
            CaptureJson::Variable { index } => spec(&variables[*index]),
        })
        .collect();
    let contract = Contract {
        inputs: input_specs.clone(),
        outputs: output_specs,
        capture_specs: capture_specs.clone(),
        captures: m.captures.clone(),
        updates: m.updates.clone(),
        variable_specs: variables.iter().map(spec).collect(),
    };
    let mut programs = Vec::new();
    for p in &m.programs {
        let mut params: Vec<ArraySpec> = input_specs
            .iter()
            .zip(&p.input_shapes)
            .map(|((d, _), dims)| ArraySpec::new(*d, dims))
            .collect();
        params.extend(capture_specs.iter().cloned());
        let text = String::from_utf8(read_signed(dir, &p.file, p.size, &p.sha256)?)
            .map_err(|_| Error::Value(format!("export: {} is not text", p.file)))?;
        let signature = program_check::check_program(&p.file, &text)?;
        check_signature(&p.file, &signature, &params, &contract)?;
        programs.push(CheckedProgram {
            json: p.clone(),
            text,
            signature,
            params,
        });
    }
    Ok(CheckedExport {
        manifest: m,
        input_specs,
        constants,
        variables,
        contract,
        programs,
    })
}

/// What the manifest declares about every program of an export, listed
/// or compiled later from its graph (`specialize`): each is checked
/// against it by [`check_signature`] before it is compiled.
#[derive(Clone)]
struct Contract {
    inputs: Vec<(DType, Shape)>,
    outputs: Vec<(DType, Shape)>,
    /// The type of each captured value, in parameter order after the inputs.
    capture_specs: Vec<ArraySpec>,
    captures: Vec<CaptureJson>,
    updates: Vec<UpdateJson>,
    /// The type of each variable (what its update must be).
    variable_specs: Vec<ArraySpec>,
}

/// Errors unless a program's `@main` signature is the one the manifest
/// implies (`file` names the program): XLA's execute checks only byte
/// sizes, so a program whose parameter is `f32` where the manifest says
/// `i32` (or `[3, 1]` where it says `[3]`) would run and reinterpret the
/// bits, and one whose update result is `f32[4]` for an `f32[2]` variable
/// would silently make it four values.
fn check_signature(file: &str, sig: &Signature, params: &[ArraySpec], c: &Contract) -> Result<()> {
    let bad = |what: String| Error::Value(format!("export: {file}: {what}"));
    if sig.params.len() != params.len() {
        return Err(bad(format!(
            "@main takes {} parameters; the manifest has {} inputs and captures",
            sig.params.len(),
            params.len()
        )));
    }
    let inputs = c.inputs.len();
    for (i, ((got, alias), want)) in sig.params.iter().zip(params).enumerate() {
        if got != want {
            return Err(bad(format!(
                "parameter {i} of @main is {got}; the manifest and its files say {want}"
            )));
        }
        if let Some(r) = alias {
            let updated = match i.checked_sub(inputs).and_then(|k| c.captures.get(k)) {
                Some(CaptureJson::Variable { index }) => c
                    .updates
                    .iter()
                    .any(|u| u.variable == *index && u.result == *r),
                _ => false,
            };
            if !updated {
                return Err(bad(format!(
                    "parameter {i} of @main is aliased to result {r}, which does not update it"
                )));
            }
        }
    }
    if sig.results.len() != c.outputs.len() + c.updates.len() {
        return Err(bad(format!(
            "@main has {} results; the manifest has {} outputs and {} updates",
            sig.results.len(),
            c.outputs.len(),
            c.updates.len()
        )));
    }
    for (i, (got, (dtype, shape))) in sig.results.iter().zip(&c.outputs).enumerate() {
        if got.dtype != *dtype || !crate::ir::shape_is_subtype(&Shape::known(&got.dims), shape) {
            return Err(bad(format!(
                "result {i} of @main is {got}; the manifest says {dtype}{shape}"
            )));
        }
    }
    for u in &c.updates {
        let want = &c.variable_specs[u.variable];
        if sig.results[u.result] != *want {
            return Err(bad(format!(
                "result {} of @main is {} but updates variable {} of type {want}",
                u.result, sig.results[u.result], u.variable
            )));
        }
    }
    Ok(())
}

/// Loads an export folder written by `ConcreteFunction::export`, compiling
/// its programs for the default device. Every check in the module docs
/// runs first; only programs that pass them reach XLA. Built-in callbacks
/// (`print`, `check_numerics`) are bound to this process's; an export that
/// calls a user callback needs [`load_with_callbacks`].
///
/// ```
/// use xlafn::prelude::*;
/// let dir = std::env::temp_dir().join(format!("doc-export-{}", std::process::id()));
/// let f = function(|x: Tensor| x.mul_scalar(3.0));
/// let cf = f.get_concrete_function((TensorSpec::known(&[2], DType::F32),))?;
/// cf.export(&dir, &[])?; // one program, for the traced shape
///
/// let loaded = xlafn::load(&dir)?; // no closure needed
/// let y = loaded.call(&[&Tensor::vector(&[1f32, 2.])?])?;
/// assert_eq!(y[0].to_vec::<f32>()?, vec![3., 6.]);
/// assert_eq!(loaded.inputs()[0].dtype, "f32");
/// std::fs::remove_dir_all(&dir).unwrap();
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn load(dir: impl AsRef<Path>) -> Result<LoadedFunction> {
    load_with_callbacks(dir, &[])
}

/// [`load`], binding each host callback the export declares under a name
/// (`named_host_callback`) to the closure `callbacks` supply for it.
pub fn load_with_callbacks(
    dir: impl AsRef<Path>,
    callbacks: SuppliedCallbacks,
) -> Result<LoadedFunction> {
    let dir = dir.as_ref();
    #[cfg(feature = "saved_model")]
    if saved_model::is_saved_model(dir) {
        return saved_model::through_export(dir, |export| load_with_callbacks(export, callbacks));
    }
    let CheckedExport {
        manifest: m,
        input_specs,
        constants,
        variables,
        contract,
        programs: checked,
    } = read_checked(dir)?;
    let tensor = |a: &HostArray| Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes);
    let constants: Vec<Tensor> = constants.iter().map(tensor).collect::<Result<_>>()?;
    let variables: Vec<Variable> = variables
        .iter()
        .zip(&m.variables)
        .map(|(a, f)| Ok(Variable::try_new(tensor(a)?)?.named(f.name.clone())))
        .collect::<Result<_>>()?;
    let client = Client::default_client()?;
    let bound = callbacks::Bound::bind(&m.callbacks, callbacks)?;
    let mut programs = Vec::new();
    for CheckedProgram {
        json: p,
        text,
        params,
        ..
    } in checked
    {
        let text = bound.rewrite(&text, &p.file)?;
        let traits = ProgramTraits {
            light: p.light,
            small_array_graph: p.small_array_graph,
        };
        let options = CompileOptions::for_program(client.platform(), traits);
        let exe = Executable::compile_cached(&client, &text, params, &options)?;
        programs.push((p.input_shapes, Arc::new(exe)));
    }
    let specializer = match &m.graph {
        Some(g) => {
            let bytes = read_signed(dir, &g.file, g.size, &g.sha256)?;
            let json: crate::ops::codec::GraphJson =
                serde_json::from_slice(&bytes).map_err(|e| {
                    Error::Value(format!("export: {} is not a saved graph: {e}", g.file))
                })?;
            let graph = crate::ops::codec::decode_graph(&json, &|i| bound.registration(i))
                .map_err(|e| {
                    Error::Value(format!("export: {} is not a valid graph: {e}", g.file))
                })?;
            Some(specialize::Specializer::new(graph, contract)?)
        }
        None => None,
    };
    Ok(LoadedFunction {
        name: m.name,
        implements: m.implements,
        inputs: m.inputs,
        outputs: m.outputs,
        input_specs,
        programs,
        constants,
        variables,
        captures: m.captures,
        updates: m.updates,
        specializer,
        _callbacks: bound,
    })
}

impl LoadedFunction {
    /// The compiled programs, each with the input shapes it is for (for
    /// inspection: `cost_analysis`, `memory_stats`, `optimized`).
    pub fn programs(&self) -> Vec<(Vec<Vec<i64>>, Arc<Executable>)> {
        self.programs.clone()
    }

    /// The exported function's name (the traced `Function`'s name).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The operation the exported function implements, if it named one.
    pub fn implements(&self) -> Option<&str> {
        self.implements.as_deref()
    }

    /// The input specs, with parameter names.
    pub fn inputs(&self) -> &[SpecJson] {
        &self.inputs
    }

    /// The output specs (`output_0`, `output_1`, ...), in result order.
    pub fn outputs(&self) -> &[SpecJson] {
        &self.outputs
    }

    /// The concrete input shapes there are programs for: those the export
    /// listed, then those compiled since loading.
    pub fn specializations(&self) -> Vec<Vec<Vec<i64>>> {
        let mut shapes: Vec<Vec<Vec<i64>>> = self.programs.iter().map(|(s, _)| s.clone()).collect();
        if let Some(s) = &self.specializer {
            shapes.extend(s.shapes());
        }
        shapes
    }

    /// The loaded variables (their values change as calls update them).
    pub fn variables(&self) -> &[Variable] {
        &self.variables
    }

    /// The indices into [`variables`](Self::variables) of those a call
    /// assigns, in order, so a caller can persist exactly what changed.
    pub fn updated_variables(&self) -> Vec<usize> {
        let mut updated: Vec<usize> = self.updates.iter().map(|u| u.variable).collect();
        updated.sort_unstable();
        updated.dedup();
        updated
    }

    /// Calls with one tensor per tensor parameter; the same signature
    /// checks as the original function.
    pub fn call(&self, inputs: &[&Tensor]) -> Result<Vec<Tensor>> {
        if inputs.len() != self.input_specs.len() {
            return Err(Error::Type(format!(
                "{} takes {} tensors, got {}",
                self.name,
                self.input_specs.len(),
                inputs.len()
            )));
        }
        for ((t, (dtype, shape)), spec) in inputs.iter().zip(&self.input_specs).zip(&self.inputs) {
            let ok = t.dtype() == *dtype && crate::ir::shape_is_subtype(&t.shape(), shape);
            if !ok {
                let expected = TensorSpec {
                    shape: shape.clone(),
                    dtype: *dtype,
                    name: None,
                };
                let got = TensorSpec {
                    shape: t.shape(),
                    dtype: t.dtype(),
                    name: None,
                };
                return Err(Error::Type(format!(
                    "Can not cast {got} to {expected} for argument {}",
                    spec.name
                )));
            }
        }
        let dims: Vec<Vec<i64>> = inputs.iter().map(|t| t.dims()).collect();
        let exe = match self.programs.iter().find(|(s, _)| *s == dims) {
            Some((_, exe)) => exe.clone(),
            None => match &self.specializer {
                Some(s) => s.program_for(&dims)?,
                None => {
                    return Err(Error::Value(format!(
                        "{} was exported without a program for input shapes {dims:?} (and \
                         without its graph, so no other shape can be compiled: export it again)",
                        self.name
                    )));
                }
            },
        };
        let guards = self
            .variables
            .iter()
            .map(|v| v.lock_buffer())
            .collect::<Result<Vec<_>>>()?;
        let mut buffers: Vec<&Buffer> = inputs.iter().map(|t| t.buffer()).collect::<Result<_>>()?;
        for c in &self.captures {
            match c {
                CaptureJson::Constant { index } => buffers.push(self.constants[*index].buffer()?),
                CaptureJson::Variable { index } => buffers.push(guards[*index].buffer()?),
            }
        }
        let non_donatable: Vec<i64> = (inputs.len()..buffers.len())
            .filter(|&i| match &self.captures[i - inputs.len()] {
                CaptureJson::Variable { index } => guards[*index]
                    .shared_buffer()
                    .map_or(true, |b| Arc::strong_count(b) > 1),
                CaptureJson::Constant { .. } => true,
            })
            .map(|i| i as i64)
            .collect();
        let mut outs = exe.execute_with(&buffers, &non_donatable)?;
        drop(buffers);
        let mut guards = guards;
        let mut order: Vec<&UpdateJson> = self.updates.iter().collect();
        order.sort_by_key(|u| std::cmp::Reverse(u.result));
        for u in order {
            *guards[u.variable] = Tensor::from_buffer(outs.remove(u.result));
        }
        Ok(outs.into_iter().map(Tensor::from_buffer).collect())
    }
}
