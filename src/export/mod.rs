//! Layer: export (B27, the counterpart of SavedModel for concrete
//! functions). `ConcreteFunction::export(dir)` writes a self-describing
//! folder; `xlafn::load(dir)` runs it in any process, with no closure.
//!
//! Layout of an export folder:
//! - `xlafn_export.json`: the manifest: format name and version, the
//!   function's name and parameter names, input and output specs, one
//!   program per specialization (StableHLO text files, with checksums), the
//!   captured constants and variables (`.npy` files, with checksums), and
//!   which results update which variable.
//! - `program_N.mlir`: StableHLO for one set of concrete input shapes
//!   (XLA compiles static shapes; unknown dims export one specialization
//!   per requested shape).
//! - `constant_N.npy`, `variable_N.npy`: captured values.
//!
//! Loading checks the version, every checksum and every shape before any
//! byte reaches XLA, so damaged exports give errors, not crashes.

mod callbacks;
pub mod npy;

pub use callbacks::SuppliedCallbacks;

use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::function::trace_type::{TensorSpec, TraceType};
use crate::function::{ArgList, ConcreteFunction, Output, program_traits};
use crate::ir::Shape;
use crate::lower;
use crate::runtime::{Buffer, Client, CompileOptions, Executable, HostArray, ProgramTraits};
use crate::tensor::Tensor;
use crate::trace::CaptureSource;
use crate::variable::{VarRef, Variable};
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::sync::Arc;

/// The manifest's format name and the version this build writes and reads.
pub const FORMAT: &str = "xlafn.export";
pub const VERSION: u32 = 1;
const MANIFEST: &str = "xlafn_export.json";

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SpecJson {
    pub name: String,
    pub dtype: String,
    /// Dimensions (`null` = unknown); `None` for unknown rank.
    pub shape: Option<Vec<Option<i64>>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct ProgramJson {
    input_shapes: Vec<Vec<i64>>,
    file: String,
    checksum: String,
    /// The traits its compile options follow, so that a loaded copy
    /// computes bit for bit what the original did (absent in older
    /// exports, which compiled with the defaults).
    #[serde(default)]
    light: bool,
    #[serde(default)]
    small_array_graph: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct TensorFileJson {
    name: String,
    file: String,
    checksum: String,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum CaptureJson {
    Constant { index: usize },
    Variable { index: usize },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct UpdateJson {
    variable: usize,
    result: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
struct Manifest {
    format: String,
    version: u32,
    name: String,
    /// `FunctionOptions::implements` (absent in older exports).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    implements: Option<String>,
    inputs: Vec<SpecJson>,
    outputs: Vec<SpecJson>,
    programs: Vec<ProgramJson>,
    constants: Vec<TensorFileJson>,
    variables: Vec<TensorFileJson>,
    captures: Vec<CaptureJson>,
    updates: Vec<UpdateJson>,
    /// The host callbacks the programs call; their `callback_id`s are
    /// indices into this list (see `callbacks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    callbacks: Vec<callbacks::CallbackJson>,
}

fn checksum(bytes: &[u8]) -> String {
    let h = bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    });
    format!("{h:016x}")
}

fn io(path: &Path, e: std::io::Error) -> Error {
    Error::Value(format!("{}: {e}", path.display()))
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

fn write_tensor(dir: &Path, file: String, name: String, t: &Tensor) -> Result<TensorFileJson> {
    let bytes = npy::encode(&host_of(t)?)?;
    std::fs::write(dir.join(&file), &bytes).map_err(|e| io(&dir.join(&file), e))?;
    Ok(TensorFileJson {
        name,
        file,
        checksum: checksum(&bytes),
    })
}

impl<Args: ArgList, Out: Output> ConcreteFunction<Args, Out> {
    /// Writes this function to `dir` so `xlafn::load` can run it without
    /// its closure. `shapes` lists the concrete argument shapes to compile
    /// for (one program each); empty means the function's own input shapes,
    /// which must then be fully known. Parameters must be tensors or host
    /// literals (literals are baked in); variables are saved with their
    /// current values and stay variables when loaded.
    pub fn export(&self, dir: impl AsRef<Path>, shapes: &[Vec<Vec<i64>>]) -> Result<()> {
        let dir = dir.as_ref();
        std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        let core = &self.core;
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
            match &c.source {
                CaptureSource::Eager(b) => {
                    let t = Tensor::from_shared_buffer(b.clone());
                    let i = constants.len();
                    constants.push(write_tensor(
                        dir,
                        format!("constant_{i}.npy"),
                        format!("constant_{i}"),
                        &t,
                    )?);
                    capture_specs.push(ArraySpec::new(b.dtype(), b.dims()));
                    captures.push(CaptureJson::Constant { index: i });
                }
                CaptureSource::Variable(r @ VarRef::Captured(_)) => {
                    let var = Variable::from_inner(r.resolve(&[], &core.name)?);
                    let i = variables.len();
                    let file = write_tensor(
                        dir,
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
                    let file = write_tensor(
                        dir,
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
            let traits = program_traits(&lowered.size);
            let file = format!("program_{k}.mlir");
            std::fs::write(dir.join(&file), &text).map_err(|e| io(&dir.join(&file), e))?;
            programs.push(ProgramJson {
                input_shapes: set.clone(),
                file,
                checksum: checksum(text.as_bytes()),
                light: traits.light,
                small_array_graph: traits.small_array_graph,
            });
        }
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
        };
        let text =
            serde_json::to_string_pretty(&manifest).map_err(|e| Error::Value(e.to_string()))?;
        std::fs::write(dir.join(MANIFEST), text).map_err(|e| io(&dir.join(MANIFEST), e))
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
    /// This process's callbacks bound for the programs (freed with them).
    _callbacks: callbacks::Bound,
}

fn read_checked(dir: &Path, file: &str, sum: &str) -> Result<Vec<u8>> {
    if file.contains('/') || file.contains("..") {
        return Err(Error::Value(format!(
            "export: file name {file:?} leaves the export folder"
        )));
    }
    let path = dir.join(file);
    let bytes = std::fs::read(&path).map_err(|e| io(&path, e))?;
    if checksum(&bytes) != sum {
        return Err(Error::Value(format!(
            "export: {} is damaged (checksum mismatch)",
            path.display()
        )));
    }
    Ok(bytes)
}

fn load_tensor(dir: &Path, f: &TensorFileJson) -> Result<Tensor> {
    let a = npy::decode(&read_checked(dir, &f.file, &f.checksum)?)?;
    Tensor::from_host_bytes(a.dtype, &a.dims, &a.bytes)
}

fn parse_spec(s: &SpecJson) -> Result<(DType, Shape)> {
    let dtype = DType::from_name(&s.dtype)?.check_compilable()?;
    let shape = match &s.shape {
        Some(d) => Shape::from_dims(d.clone()),
        None => Shape::unknown_rank(),
    };
    Ok((dtype, shape))
}

/// Loads an export folder written by `ConcreteFunction::export`, compiling
/// its programs for the default device. Built-in callbacks (`print`,
/// `check_numerics`) are bound to this process's; an export that calls a
/// user callback needs [`load_with_callbacks`].
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
    let text =
        std::fs::read_to_string(dir.join(MANIFEST)).map_err(|e| io(&dir.join(MANIFEST), e))?;
    let m: Manifest = serde_json::from_str(&text)
        .map_err(|e| Error::Value(format!("export: bad manifest: {e}")))?;
    if m.format != FORMAT {
        return Err(Error::Value(format!(
            "export: format {:?} is not {FORMAT:?}",
            m.format
        )));
    }
    if m.version != VERSION {
        return Err(Error::Value(format!(
            "export: version {} cannot be loaded by this xlafn, which reads version {VERSION}",
            m.version
        )));
    }
    let input_specs: Vec<(DType, Shape)> =
        m.inputs.iter().map(parse_spec).collect::<Result<_>>()?;
    m.outputs
        .iter()
        .map(parse_spec)
        .collect::<Result<Vec<_>>>()?;
    let constants: Vec<Tensor> = m
        .constants
        .iter()
        .map(|f| load_tensor(dir, f))
        .collect::<Result<_>>()?;
    let variables: Vec<Variable> = m
        .variables
        .iter()
        .map(|f| Ok(Variable::try_new(load_tensor(dir, f)?)?.named(f.name.clone())))
        .collect::<Result<_>>()?;
    let capture_specs: Vec<ArraySpec> = m
        .captures
        .iter()
        .map(|c| {
            let t = match c {
                CaptureJson::Constant { index } => {
                    constants.get(*index).map(|t| (t.dtype(), t.dims()))
                }
                CaptureJson::Variable { index } => variables
                    .get(*index)
                    .map(|v| (v.dtype(), v.dims().to_vec())),
            };
            t.map(|(d, dims)| ArraySpec::new(d, &dims))
                .ok_or_else(|| Error::Value("export: capture index out of range".into()))
        })
        .collect::<Result<_>>()?;
    if m.updates.iter().any(|u| u.variable >= variables.len()) {
        return Err(Error::Value("export: update of an unknown variable".into()));
    }
    let client = Client::default_client()?;
    let bound = callbacks::Bound::bind(&m.callbacks, callbacks)?;
    let mut programs = Vec::new();
    for p in &m.programs {
        if p.input_shapes.len() != input_specs.len() {
            return Err(Error::Value(format!(
                "export: {} has the wrong number of input shapes",
                p.file
            )));
        }
        let mut params: Vec<ArraySpec> = input_specs
            .iter()
            .zip(&p.input_shapes)
            .map(|((d, _), dims)| ArraySpec::new(*d, dims))
            .collect();
        params.extend(capture_specs.iter().cloned());
        let text = String::from_utf8(read_checked(dir, &p.file, &p.checksum)?)
            .map_err(|_| Error::Value(format!("export: {} is not text", p.file)))?;
        let text = bound.rewrite(&text, &p.file)?;
        let traits = ProgramTraits {
            light: p.light,
            small_array_graph: p.small_array_graph,
        };
        let options = CompileOptions::for_program(client.platform(), traits);
        // Bound callback ids are fresh per load: no disk cache entry.
        let exe = if bound.is_empty() {
            Executable::compile_cached(&client, &text, params, &options)?
        } else {
            Executable::compile(&client, &text, params, &options)?
        };
        programs.push((p.input_shapes.clone(), Arc::new(exe)));
    }
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
        _callbacks: bound,
    })
}

impl LoadedFunction {
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

    pub fn outputs(&self) -> &[SpecJson] {
        &self.outputs
    }

    /// The concrete input shapes there are programs for.
    pub fn specializations(&self) -> Vec<Vec<Vec<i64>>> {
        self.programs.iter().map(|(s, _)| s.clone()).collect()
    }

    /// The loaded variables (their values change as calls update them).
    pub fn variables(&self) -> &[Variable] {
        &self.variables
    }

    /// Calls with one tensor per tensor parameter; the same signature
    /// checks as the original function (B6).
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
        let (_, exe) = self
            .programs
            .iter()
            .find(|(s, _)| *s == dims)
            .ok_or_else(|| {
                Error::Value(format!(
                    "{} was exported without a program for input shapes {dims:?}",
                    self.name
                ))
            })?;
        let guards: Vec<_> = self.variables.iter().map(|v| v.lock_buffer()).collect();
        let mut buffers: Vec<&Buffer> = inputs.iter().map(|t| t.buffer()).collect::<Result<_>>()?;
        for c in &self.captures {
            match c {
                CaptureJson::Constant { index } => buffers.push(self.constants[*index].buffer()?),
                CaptureJson::Variable { index } => buffers.push(&guards[*index]),
            }
        }
        let non_donatable: Vec<i64> = (inputs.len()..buffers.len())
            .filter(|&i| match &self.captures[i - inputs.len()] {
                CaptureJson::Variable { index } => Arc::strong_count(&guards[*index]) > 1,
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
            *guards[u.variable] = Arc::new(outs.remove(u.result));
        }
        Ok(outs.into_iter().map(Tensor::from_buffer).collect())
    }
}
