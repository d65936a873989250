//! Layer: export (inspection). What an export folder declares, read
//! without compiling anything and without a device: its signature, its
//! variables' types and which of them calls update, and its programs'
//! text. `xlafn show` and `xlafn stablehlo` are built on it, so looking at
//! an export never hands a program to XLA. Imports the manifest (which
//! authenticates and validates the folder exactly as `load` does), `npy`
//! for the variables' headers and `program_check` for program text.

use super::manifest::{self, ProgramJson, SpecJson, parse_spec};
use super::{npy, program_check, read_signed};
use crate::dtype::DType;
use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// `text` with control characters and the invisible ones that reorder or
/// hide text (bidi overrides, zero-width marks) escaped as `\u{..}`, so
/// text from an export's manifest (names, print messages) reaches a
/// terminal as what it is: it cannot clear the screen, move the cursor or
/// forge lines of output. `keep_newlines` keeps `\n` for multi-line text
/// that is not the manifest's (programs, error messages). `xlafn show`,
/// `xlafn run` and a loaded export's print callbacks all escape with it.
///
/// ```
/// use xlafn::export::printable;
/// assert_eq!(printable("a\u{1b}[2J\u{202e}b", false), "a\\u{1b}[2J\\u{202e}b");
/// assert_eq!(printable("x\ny", false), "x\\u{a}y");
/// assert_eq!(printable("x\ny", true), "x\ny");
/// ```
pub fn printable(text: &str, keep_newlines: bool) -> String {
    let hidden = |c: char| {
        c.is_control()
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}' | '\u{feff}')
    };
    text.chars()
        .map(|c| match c {
            '\n' if keep_newlines => "\n".to_string(),
            c if hidden(c) => c.escape_unicode().to_string(),
            c => c.to_string(),
        })
        .collect()
}

/// A variable an export holds, as its file declares it.
#[derive(Clone, Debug, PartialEq)]
pub struct VariableInfo {
    /// The variable's name as the manifest records it.
    pub name: String,
    /// Its element type, from its `.npy` header.
    pub dtype: DType,
    /// Its dimensions, from its `.npy` header.
    pub dims: Vec<i64>,
    /// Whether calling the function assigns it a new value.
    pub updated: bool,
}

/// One compiled-ahead program: the input shapes it serves and its file.
#[derive(Clone, Debug, PartialEq)]
pub struct ProgramInfo {
    /// The concrete shape of each input, in parameter order.
    pub input_shapes: Vec<Vec<i64>>,
    /// The StableHLO text file in the export folder.
    pub file: String,
}

/// An export's signature, read by [`inspect`].
#[derive(Clone, Debug)]
pub struct ExportInfo {
    /// The exported function's name.
    pub name: String,
    /// The operation it implements (`FunctionOptions::implements`), if it
    /// named one.
    pub implements: Option<String>,
    /// The input specs, with parameter names, in call order.
    pub inputs: Vec<SpecJson>,
    /// The output specs (`output_0`, `output_1`, ...), in result order.
    pub outputs: Vec<SpecJson>,
    /// The variables the export captured, in manifest order.
    pub variables: Vec<VariableInfo>,
    /// The compiled-ahead programs, in manifest order (the indices
    /// [`ExportInfo::program_text`] takes).
    pub programs: Vec<ProgramInfo>,
    /// Whether the export kept its graph, so a loader can compile input
    /// shapes no listed program serves.
    pub has_graph: bool,
    dir: PathBuf,
    program_files: Vec<ProgramJson>,
    /// The programs' checked text, read at once when the folder was a
    /// SavedModel (its export existed only while it was inspected).
    texts: Vec<String>,
}

/// Reads what the export in `dir` declares, with the same checks as
/// [`load`](super::load) up to (not including) compiling: the digests,
/// the manifest, every spec, and each variable file (its header gives the
/// variable's type).
pub fn inspect(dir: impl AsRef<Path>) -> Result<ExportInfo> {
    let dir = dir.as_ref();
    #[cfg(feature = "saved_model")]
    if super::saved_model::is_saved_model(dir) {
        // The scratch export is gone afterwards: its programs are read
        // (and checked) now.
        return super::saved_model::through_export(dir, |export| {
            let mut info = inspect(export)?;
            info.texts = (0..info.programs.len())
                .map(|i| info.program_text(i))
                .collect::<Result<_>>()?;
            Ok(info)
        });
    }
    let m = manifest::read(dir)?;
    for spec in m.inputs.iter().chain(&m.outputs) {
        parse_spec(spec)?;
    }
    let variables = m
        .variables
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let a = npy::decode(&read_signed(dir, &f.file, f.size, &f.sha256)?)
                .map_err(|e| Error::Value(format!("export: {}: {e}", f.file)))?;
            Ok(VariableInfo {
                name: f.name.clone(),
                dtype: a.dtype,
                dims: a.dims,
                updated: m.updates.iter().any(|u| u.variable == i),
            })
        })
        .collect::<Result<_>>()?;
    let programs = m
        .programs
        .iter()
        .map(|p| ProgramInfo {
            input_shapes: p.input_shapes.clone(),
            file: p.file.clone(),
        })
        .collect();
    Ok(ExportInfo {
        name: m.name,
        implements: m.implements,
        inputs: m.inputs,
        outputs: m.outputs,
        variables,
        programs,
        has_graph: m.graph.is_some(),
        dir: dir.to_path_buf(),
        program_files: m.programs,
        texts: Vec::new(),
    })
}

impl ExportInfo {
    /// The StableHLO text of program `index` (see [`ExportInfo::programs`]),
    /// after the digest and program checks `load` applies, so what is
    /// shown is what `load` would compile.
    pub fn program_text(&self, index: usize) -> Result<String> {
        if let Some(text) = self.texts.get(index) {
            return Ok(text.clone());
        }
        let p = self.program_files.get(index).ok_or_else(|| {
            Error::Value(format!(
                "the export has {} programs; there is no program {index}",
                self.program_files.len()
            ))
        })?;
        let bytes = read_signed(&self.dir, &p.file, p.size, &p.sha256)?;
        let text = String::from_utf8(bytes)
            .map_err(|_| Error::Value(format!("export: {} is not text", p.file)))?;
        program_check::check_program(&p.file, &text)?;
        Ok(text)
    }
}
