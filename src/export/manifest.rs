//! Layer: export (manifest). The manifest's format, how the folder is
//! signed with sha256 digests, and every check on the manifest that needs
//! no file but the manifest itself: indices in range and unique, names
//! plain, shapes representable. The loader relies on these checks to index
//! without panicking.
//!
//! Integrity: `xlafn_export.json.sha256` holds the digest of the manifest
//! bytes (in `sha256sum` format, so `sha256sum -c` verifies it too), and
//! the manifest holds the digest and size of every other file. One flipped
//! byte anywhere is caught. The digests prove integrity, not origin: anyone
//! who can write the folder can re-sign it (`testing::resign`), which is
//! why the loader still checks everything as if the folder were hostile.

use super::program_check::MAX_PROGRAM_BYTES;
use crate::dtype::{DType, MAX_ARRAY_BYTES, check_array_size};
use crate::error::{Error, Result};
use crate::files::{self, check_name};
use crate::ir::Shape;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::path::Path;

/// The manifest's format name and the version this build writes and reads.
pub const FORMAT: &str = "xlafn.export";

/// Version 2 signs the folder with sha256 (version 1 had unkeyed 64-bit
/// checksums of the data files and none of the manifest). Version 1
/// folders are refused with a request to export again: loading them would
/// mean trusting a manifest nothing vouches for.
pub const VERSION: u32 = 2;

pub(crate) const MANIFEST: &str = "xlafn_export.json";
pub(crate) const DIGEST: &str = "xlafn_export.json.sha256";

/// The largest manifest read. Real manifests are a few kilobytes per
/// program and tensor; the bound keeps a huge file from being parsed.
const MAX_MANIFEST_BYTES: u64 = 16 << 20;

/// The largest `.npy` file: an array XLA can hold plus a header.
const MAX_NPY_BYTES: u64 = MAX_ARRAY_BYTES + (1 << 17);

/// The most dimensions a manifest shape may have (XLA's own limit is far
/// lower in practice; this only keeps absurd ranks out of printouts).
const MAX_RANK: usize = 64;

/// A tensor spec as the manifest writes it: one input (named after its
/// parameter) or output (`output_N`) of an exported function.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpecJson {
    /// The parameter name for an input, `output_N` for an output.
    pub name: String,
    /// The dtype's short name (`f32`, `i64`, ...; see `DType::name`).
    pub dtype: String,
    /// Dimensions (`null` = unknown); `None` for unknown rank.
    pub shape: Option<Vec<Option<i64>>>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProgramJson {
    pub input_shapes: Vec<Vec<i64>>,
    pub file: String,
    pub size: u64,
    pub sha256: String,
    /// The traits its compile options follow, so that a loaded copy
    /// computes bit for bit what the original did.
    pub light: bool,
    pub small_array_graph: bool,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct TensorFileJson {
    pub name: String,
    pub file: String,
    pub size: u64,
    pub sha256: String,
}

#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum CaptureJson {
    Constant { index: usize },
    Variable { index: usize },
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UpdateJson {
    pub variable: usize,
    pub result: usize,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Manifest {
    pub format: String,
    pub version: u32,
    pub name: String,
    /// `FunctionOptions::implements`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub implements: Option<String>,
    pub inputs: Vec<SpecJson>,
    pub outputs: Vec<SpecJson>,
    pub programs: Vec<ProgramJson>,
    pub constants: Vec<TensorFileJson>,
    pub variables: Vec<TensorFileJson>,
    pub captures: Vec<CaptureJson>,
    /// Which results update which variable; the update results follow the
    /// outputs (results `outputs.len()..`), one per update.
    pub updates: Vec<UpdateJson>,
    /// The host callbacks the programs call; their `callback_id`s are
    /// indices into this list (see `callbacks`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub callbacks: Vec<super::callbacks::CallbackJson>,
    /// The traced graph (`ops::codec`), from which a loading process
    /// compiles input shapes no listed program covers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub graph: Option<GraphFileJson>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct GraphFileJson {
    pub file: String,
    pub size: u64,
    pub sha256: String,
}

/// The largest saved graph a loader reads.
pub(crate) const MAX_GRAPH_BYTES: u64 = MAX_PROGRAM_BYTES;

pub(crate) use crate::files::sha256_hex;

/// The digest file's text for manifest bytes `manifest`.
pub(crate) fn digest_line(manifest: &[u8]) -> String {
    format!("{}  {MANIFEST}\n", sha256_hex(manifest))
}

fn bad(what: impl std::fmt::Display) -> Error {
    Error::Value(format!("export: bad manifest: {what}"))
}

/// The format and version of a manifest, read on their own so that an
/// older or newer folder is named as such rather than as damaged.
#[derive(Deserialize)]
struct Head {
    format: String,
    version: u32,
}

fn check_head(head: &Head) -> Result<()> {
    if head.format != FORMAT {
        return Err(Error::Value(format!(
            "export: format {:?} is not {FORMAT:?}",
            head.format
        )));
    }
    match head.version {
        VERSION => Ok(()),
        1 => Err(Error::Value(format!(
            "export: version 1 exports carry no manifest digest and cannot be loaded by this \
             xlafn, which reads version {VERSION}; export the function again"
        ))),
        v => Err(Error::Value(format!(
            "export: version {v} cannot be loaded by this xlafn, which reads version {VERSION}"
        ))),
    }
}

/// Reads and authenticates the manifest of `dir`: its bytes must match
/// the digest file before anything in it is parsed into a `Manifest`.
pub(crate) fn read(dir: &Path) -> Result<Manifest> {
    let bytes = files::read_limited(&dir.join(MANIFEST), MAX_MANIFEST_BYTES, false)?;
    let digest_path = dir.join(DIGEST);
    let digest = match files::read_limited(&digest_path, 256, false) {
        Ok(d) => d,
        Err(e) => {
            // Without a digest, say what the folder is if its head says it.
            if let Ok(head) = serde_json::from_slice::<Head>(&bytes) {
                check_head(&head)?;
            }
            return Err(e);
        }
    };
    if digest != digest_line(&bytes).as_bytes() {
        return Err(Error::Value(format!(
            "export: {} is damaged or was changed: its sha256 does not match {}",
            dir.join(MANIFEST).display(),
            digest_path.display()
        )));
    }
    let head: Head = serde_json::from_slice(&bytes).map_err(bad)?;
    check_head(&head)?;
    let m: Manifest = serde_json::from_slice(&bytes).map_err(bad)?;
    m.validate()?;
    Ok(m)
}

/// Parses a manifest spec; its known dims must be representable.
pub(crate) fn parse_spec(s: &SpecJson) -> Result<(DType, Shape)> {
    let dtype = DType::from_name(&s.dtype)?.check_compilable()?;
    let shape = match &s.shape {
        Some(d) => {
            if d.len() > MAX_RANK {
                return Err(bad(format!("{:?} has over {MAX_RANK} dimensions", s.name)));
            }
            let known: Vec<i64> = d.iter().map(|d| d.unwrap_or(0)).collect();
            check_array_size(dtype, &known).map_err(|e| bad(format!("{:?}: {e}", s.name)))?;
            Shape::from_dims(d.clone())
        }
        None => Shape::unknown_rank(),
    };
    Ok((dtype, shape))
}

fn check_digest(file: &str, sha: &str) -> Result<()> {
    if sha.len() != 64 || !sha.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Err(bad(format!("the sha256 of {file:?} is not 64 hex digits")));
    }
    Ok(())
}

/// The files a manifest lists, each checked once: a plain name, a
/// well-formed digest, a size within its kind's limit, listed once.
#[derive(Default)]
struct FileList(HashSet<String>);

impl FileList {
    fn add(&mut self, name: &str, size: u64, sha: &str, ext: &str, limit: u64) -> Result<()> {
        check_name(name, &[ext])?;
        check_digest(name, sha)?;
        if size > limit {
            return Err(bad(format!(
                "{name:?} is said to have {size} bytes, over {limit}"
            )));
        }
        if !self.0.insert(name.to_string()) {
            return Err(bad(format!("{name:?} is listed twice")));
        }
        Ok(())
    }
}

impl Manifest {
    /// Everything that can be checked without reading another file.
    fn validate(&self) -> Result<()> {
        let inputs: Vec<(DType, Shape)> =
            self.inputs.iter().map(parse_spec).collect::<Result<_>>()?;
        for o in &self.outputs {
            parse_spec(o)?;
        }
        let mut names = HashSet::new();
        if let Some(dup) = self.inputs.iter().find(|s| !names.insert(&s.name)) {
            return Err(bad(format!("two inputs are named {:?}", dup.name)));
        }
        let mut files = FileList::default();
        self.validate_programs(&inputs, &mut files)?;
        for t in self.constants.iter().chain(&self.variables) {
            files.add(&t.file, t.size, &t.sha256, "npy", MAX_NPY_BYTES)?;
        }
        if let Some(g) = &self.graph {
            files.add(&g.file, g.size, &g.sha256, "json", MAX_GRAPH_BYTES)?;
        }
        self.validate_captures()?;
        self.validate_updates()
    }

    /// One program per distinct set of input shapes, each fitting the
    /// declared input specs.
    fn validate_programs(&self, inputs: &[(DType, Shape)], files: &mut FileList) -> Result<()> {
        if self.programs.is_empty() {
            return Err(bad("it lists no programs"));
        }
        let mut shape_sets = HashSet::new();
        for p in &self.programs {
            files.add(&p.file, p.size, &p.sha256, "mlir", MAX_PROGRAM_BYTES)?;
            if p.input_shapes.len() != inputs.len() {
                return Err(bad(format!(
                    "{} has {} input shapes for {} inputs",
                    p.file,
                    p.input_shapes.len(),
                    inputs.len()
                )));
            }
            for (dims, (spec, (dtype, shape))) in
                p.input_shapes.iter().zip(self.inputs.iter().zip(inputs))
            {
                check_array_size(*dtype, dims).map_err(|e| bad(format!("{}: {e}", p.file)))?;
                if !crate::ir::shape_is_subtype(&Shape::known(dims), shape) {
                    return Err(bad(format!(
                        "{} is compiled for shape {dims:?} of input {:?}, which is declared {shape}",
                        p.file, spec.name
                    )));
                }
            }
            if !shape_sets.insert(&p.input_shapes) {
                return Err(bad(format!(
                    "two programs for input shapes {:?}",
                    p.input_shapes
                )));
            }
        }
        Ok(())
    }

    /// Captures name existing constants and variables, each once (a value
    /// passed twice could be donated twice).
    fn validate_captures(&self) -> Result<()> {
        let mut seen = HashSet::new();
        for c in &self.captures {
            let (index, count) = match c {
                CaptureJson::Constant { index } => (*index, self.constants.len()),
                CaptureJson::Variable { index } => (*index, self.variables.len()),
            };
            if index >= count {
                return Err(bad(format!("capture {c:?} is out of range")));
            }
            if !seen.insert(*c) {
                return Err(bad(format!("capture {c:?} is listed twice")));
            }
        }
        Ok(())
    }

    /// Each update names an existing variable, once, and one of the
    /// results after the outputs, once: `LoadedFunction::call` removes
    /// those results by index and writes the variables by index.
    fn validate_updates(&self) -> Result<()> {
        let outputs = self.outputs.len();
        let range = outputs..outputs + self.updates.len();
        let mut variables = HashSet::new();
        let mut results = HashSet::new();
        for u in &self.updates {
            if u.variable >= self.variables.len() {
                return Err(bad(format!("update of unknown variable {}", u.variable)));
            }
            if !variables.insert(u.variable) {
                return Err(bad(format!("variable {} is updated twice", u.variable)));
            }
            if !range.contains(&u.result) {
                return Err(bad(format!(
                    "update of variable {} by result {}, outside the update results {range:?}",
                    u.variable, u.result
                )));
            }
            if !results.insert(u.result) {
                return Err(bad(format!("result {} updates two variables", u.result)));
            }
        }
        Ok(())
    }
}
