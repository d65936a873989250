//! Layer: export (imports `proto`, `graph`'s names, `bundle`, the export
//! folder's manifest types and writer, `files`, `npy` through the
//! writer). The other direction: a SavedModel written by xlafn, turned
//! back into the export folder it came from, so that `xlafn::load` and
//! `xlafn show` read it through every check they make of an export.
//!
//! Only the SavedModels `graph` writes are understood: programs are the
//! `XlaCallModule` of each signature's function, variables the root's
//! `SavedVariable` children with their values from the checkpoint
//! (TensorFlow's current values, if TensorFlow wrote the checkpoint
//! again), constants the functions' `Const` nodes. Anything else is an
//! error naming what is missing. The file is untrusted: it is read
//! bounded, decoded by prost (which bounds every field by the bytes it
//! came in), and every name, index and shape is checked before it is
//! used; what comes out is an export folder that `load` checks again.

use super::super::Pending;
use super::super::manifest::{
    CaptureJson, FORMAT, Manifest, ProgramJson, SpecJson, UpdateJson, VERSION,
};
use super::bundle::{self, BundleValue};
use super::graph::{checkpoint_key, signature_key};
use super::proto::*;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::files;
use crate::runtime::HostArray;
use prost::Message as _;
use std::collections::BTreeMap;
use std::path::Path;

/// The most signatures (programs) read.
const MAX_SIGNATURES: usize = 4096;

fn bad(dir: &Path, what: impl std::fmt::Display) -> Error {
    Error::Value(format!(
        "SavedModel {}: {what} (only SavedModels xlafn wrote can be loaded)",
        dir.display()
    ))
}

/// Is `dir` a SavedModel rather than an xlafn export folder?
pub(crate) fn is_saved_model(dir: &Path) -> bool {
    dir.join("saved_model.pb").exists() && !dir.join(super::super::manifest::MANIFEST).exists()
}

/// The dtype of TensorFlow's number `n`.
fn dtype(dir: &Path, n: i32) -> Result<DType> {
    bundle::dtype_of_tf(n)
        .filter(|d| *d != DType::String)
        .ok_or_else(|| bad(dir, format!("TensorFlow dtype {n} has no xlafn dtype")))
}

fn dims(dir: &Path, shape: Option<&TensorShapeProto>) -> Result<Vec<i64>> {
    let shape = shape.ok_or_else(|| bad(dir, "a shape is missing"))?;
    if shape.unknown_rank || shape.dim.iter().any(|d| d.size < 0) {
        return Err(bad(dir, "a shape is not fully known"));
    }
    Ok(shape.dim.iter().map(|d| d.size).collect())
}

fn attr<'a>(dir: &Path, node: &'a NodeDef, name: &str) -> Result<&'a Attr> {
    node.attr
        .get(name)
        .and_then(|a| a.value.as_ref())
        .ok_or_else(|| bad(dir, format!("node {:?} has no attribute {name}", node.name)))
}

/// One program as its function says it.
struct Function {
    inputs: Vec<(String, DType, Vec<i64>)>,
    outputs: Vec<(DType, Vec<i64>)>,
    text: String,
    captures: Vec<CaptureJson>,
    /// Per update (results after the outputs), its variable.
    updates: Vec<usize>,
    /// Per constant index, its value.
    constants: BTreeMap<usize, HostArray>,
}

/// `prefix<N>suffix` → N.
fn numbered(name: &str, prefix: &str, suffix: &str) -> Option<usize> {
    name.strip_prefix(prefix)?
        .strip_suffix(suffix)?
        .parse()
        .ok()
}

fn read_function(dir: &Path, f: &FunctionDef, n_vars: usize) -> Result<Function> {
    let sig = f
        .signature
        .as_ref()
        .ok_or_else(|| bad(dir, "a function has no signature"))?;
    let inputs: Vec<&ArgDef> = sig
        .input_arg
        .iter()
        .filter(|a| a.r#type != DT_RESOURCE)
        .collect();
    if sig.input_arg.len() != inputs.len() + n_vars {
        return Err(bad(
            dir,
            format!(
                "function {} takes {} variables, the object graph has {n_vars}",
                sig.name,
                sig.input_arg.len() - inputs.len()
            ),
        ));
    }
    let node = |name: &str| f.node_def.iter().find(|n| n.name == name);
    let call = node("Call")
        .filter(|n| n.op == "XlaCallModule")
        .ok_or_else(|| bad(dir, format!("function {} has no XlaCallModule", sig.name)))?;
    let text = match attr(dir, call, "module")? {
        Attr::S(bytes) => String::from_utf8(bytes.clone())
            .map_err(|_| bad(dir, "the module of XlaCallModule is not StableHLO text"))?,
        _ => return Err(bad(dir, "the module of XlaCallModule is not bytes")),
    };
    let list = |name: &str| -> Result<AttrList> {
        match attr(dir, call, name)? {
            Attr::List(l) => Ok(l.clone()),
            _ => Err(bad(dir, format!("XlaCallModule's {name} is not a list"))),
        }
    };
    let (tout, sout) = (list("Tout")?, list("Sout")?);
    if tout.r#type.len() != sout.shape.len() {
        return Err(bad(dir, "XlaCallModule's Tout and Sout differ in length"));
    }
    let results: Vec<(DType, Vec<i64>)> = tout
        .r#type
        .iter()
        .zip(&sout.shape)
        .map(|(&t, s)| Ok((dtype(dir, t)?, dims(dir, Some(s))?)))
        .collect::<Result<_>>()?;
    let n_out = sig.output_arg.len();
    if n_out > results.len() {
        return Err(bad(dir, "the function has more outputs than XlaCallModule"));
    }
    let mut input_specs = Vec::new();
    for (i, a) in inputs.iter().enumerate() {
        let name = call.input.get(i).filter(|n| **n == a.name).ok_or_else(|| {
            bad(
                dir,
                format!("XlaCallModule's operand {i} is not {:?}", a.name),
            )
        })?;
        input_specs.push((name.clone(), dtype(dir, a.r#type)?, Vec::new()));
    }
    let mut captures = Vec::new();
    let mut constants = BTreeMap::new();
    for operand in &call.input[inputs.len()..] {
        if let Some(v) = numbered(operand, "ReadVar_", ":value:0") {
            if v >= n_vars {
                return Err(bad(dir, format!("{operand} reads no variable")));
            }
            captures.push(CaptureJson::Variable { index: v });
        } else if let Some(c) = numbered(operand, "Const_", ":output:0") {
            let k = node(&format!("Const_{c}"))
                .filter(|n| n.op == "Const")
                .ok_or_else(|| bad(dir, format!("{operand} is no Const node")))?;
            let Attr::Tensor(t) = attr(dir, k, "value")? else {
                return Err(bad(dir, format!("Const_{c} holds no tensor")));
            };
            let value = HostArray {
                dtype: dtype(dir, t.dtype)?,
                dims: dims(dir, t.tensor_shape.as_ref())?,
                bytes: t.tensor_content.clone(),
            };
            let want = crate::dtype::ArraySpec::new(value.dtype, &value.dims).byte_size();
            if want != value.bytes.len() as u64 {
                return Err(bad(
                    dir,
                    format!("Const_{c} holds {} bytes, not {want}", value.bytes.len()),
                ));
            }
            constants.insert(c, value);
            captures.push(CaptureJson::Constant { index: c });
        } else {
            return Err(bad(
                dir,
                format!("XlaCallModule's operand {operand:?} is not xlafn's"),
            ));
        }
    }
    let mut updates = Vec::new();
    for k in 0..results.len() - n_out {
        let assign = node(&format!("Assign_{k}"))
            .filter(|n| n.op == "AssignVariableOp" && n.input.len() == 2)
            .ok_or_else(|| {
                bad(
                    dir,
                    format!("result {} of XlaCallModule assigns nothing", n_out + k),
                )
            })?;
        let v = numbered(&assign.input[0], "var_", "")
            .filter(|&v| v < n_vars)
            .ok_or_else(|| bad(dir, format!("Assign_{k} assigns no variable")))?;
        if assign.input[1] != format!("Call:output:{}", n_out + k) {
            return Err(bad(dir, format!("Assign_{k} assigns another result")));
        }
        updates.push(v);
    }
    Ok(Function {
        inputs: input_specs,
        outputs: results[..n_out].to_vec(),
        text,
        captures,
        updates,
        constants,
    })
}

/// Checks `saved_model.pb` (its bytes `pb`) and the checkpoint against
/// the digests xlafn wrote beside them.
fn check_digests(dir: &Path, pb: &[u8]) -> Result<()> {
    let text = files::read_limited(&dir.join(super::DIGESTS), 4096, false).map_err(|e| {
        bad(
            dir,
            format!("{} is missing or unreadable ({e})", super::DIGESTS),
        )
    })?;
    let text =
        String::from_utf8(text).map_err(|_| bad(dir, format!("{} is not text", super::DIGESTS)))?;
    let mut seen = std::collections::BTreeSet::new();
    for line in text.lines() {
        let (digest, file) = line
            .split_once("  ")
            .ok_or_else(|| bad(dir, format!("{} has a malformed line", super::DIGESTS)))?;
        let actual = match file {
            "saved_model.pb" => files::sha256_hex(pb),
            "variables/variables.index" | "variables/variables.data-00000-of-00001" => {
                super::file_sha256(&dir.join(file))?
            }
            other => return Err(bad(dir, format!("{} names {other:?}", super::DIGESTS))),
        };
        if actual != digest {
            return Err(Error::Value(format!(
                "SavedModel {}: {file} is damaged or was changed (sha256 mismatch)",
                dir.display()
            )));
        }
        seen.insert(file);
    }
    if seen.len() != 3 {
        return Err(bad(
            dir,
            format!("{} does not cover its 3 files", super::DIGESTS),
        ));
    }
    Ok(())
}

/// The export folder `saved_model` came from, written into the new
/// folder `export_dir`.
pub(crate) fn to_export(saved_model: &Path, export_dir: &Path) -> Result<()> {
    let dir = saved_model;
    let pb = files::read_limited(
        &dir.join("saved_model.pb"),
        super::MAX_SAVED_MODEL_BYTES as u64,
        false,
    )?;
    check_digests(dir, &pb)?;
    let model = SavedModel::decode(pb.as_slice())
        .map_err(|e| bad(dir, format!("saved_model.pb is not a SavedModel: {e}")))?;
    let [meta] = model.meta_graphs.as_slice() else {
        return Err(bad(
            dir,
            format!("it has {} meta graphs, not 1", model.meta_graphs.len()),
        ));
    };
    let objects = meta
        .object_graph_def
        .as_ref()
        .ok_or_else(|| bad(dir, "it has no object graph"))?;
    let library = meta
        .graph_def
        .as_ref()
        .and_then(|g| g.library.as_ref())
        .ok_or_else(|| bad(dir, "it has no function library"))?;
    let root = objects
        .nodes
        .first()
        .ok_or_else(|| bad(dir, "the object graph is empty"))?;
    let object = |id: i32| {
        usize::try_from(id)
            .ok()
            .and_then(|i| objects.nodes.get(i))
            .ok_or_else(|| bad(dir, format!("object {id} does not exist")))
    };
    // The variables: the root's children that are variables, in order.
    let mut variables = Vec::new();
    let mut signature_map = None;
    for child in &root.children {
        match &object(child.node_id)?.kind {
            Some(SavedKind::Variable(v)) => variables.push((child.local_name.clone(), v.clone())),
            Some(SavedKind::UserObject(u))
                if child.local_name == "signatures" && u.identifier == "signature_map" =>
            {
                signature_map = Some(object(child.node_id)?)
            }
            _ => {}
        }
    }
    let signature_map = signature_map.ok_or_else(|| bad(dir, "it has no signatures"))?;
    if signature_map.children.len() > MAX_SIGNATURES {
        return Err(bad(dir, "it has too many signatures"));
    }
    let checkpoint = bundle::read_bundle(&dir.join("variables").join("variables"))?;
    let mut pending = Pending::default();
    let mut variable_files = Vec::new();
    for (i, (child, v)) in variables.iter().enumerate() {
        let key = checkpoint_key(child);
        let Some(BundleValue::Numeric {
            dtype: d,
            dims: shape,
            bytes,
        }) = checkpoint.get(&key)
        else {
            return Err(bad(dir, format!("the checkpoint has no numeric {key}")));
        };
        if *d != dtype(dir, v.dtype)? || *shape != dims(dir, v.shape.as_ref())? {
            return Err(bad(
                dir,
                format!("{key} in the checkpoint is not the variable's type"),
            ));
        }
        let value = HostArray {
            dtype: *d,
            dims: shape.clone(),
            bytes: bytes.clone(),
        };
        variable_files.push(pending.array(format!("variable_{i}.npy"), v.name.clone(), &value)?);
    }
    let mut functions = Vec::new();
    for i in 0..signature_map.children.len() {
        let key = signature_key(i);
        let child = signature_map
            .children
            .iter()
            .find(|c| c.local_name == key)
            .ok_or_else(|| bad(dir, format!("signature {key} is missing")))?;
        let Some(SavedKind::BareConcreteFunction(b)) = &object(child.node_id)?.kind else {
            return Err(bad(
                dir,
                format!("signature {key} is not a concrete function"),
            ));
        };
        let f = library
            .function
            .iter()
            .find(|f| {
                f.signature
                    .as_ref()
                    .is_some_and(|s| s.name == b.concrete_function_name)
            })
            .ok_or_else(|| {
                bad(
                    dir,
                    format!("function {} is missing", b.concrete_function_name),
                )
            })?;
        let mut function = read_function(dir, f, variables.len())?;
        // The input shapes: the signature's, in the meta graph.
        let def = meta
            .signature_def
            .get(&key)
            .ok_or_else(|| bad(dir, format!("signature_def {key} is missing")))?;
        for (name, _, shape) in &mut function.inputs {
            let info = def
                .inputs
                .get(name.as_str())
                .ok_or_else(|| bad(dir, format!("signature_def {key} has no input {name}")))?;
            *shape = dims(dir, info.tensor_shape.as_ref())?;
        }
        functions.push(function);
    }
    let first = functions
        .first()
        .ok_or_else(|| bad(dir, "it has no signatures"))?;
    for f in &functions[1..] {
        let same_inputs = f.inputs.len() == first.inputs.len()
            && f.inputs
                .iter()
                .zip(&first.inputs)
                .all(|(a, b)| a.0 == b.0 && a.1 == b.1);
        if !same_inputs
            || f.captures != first.captures
            || f.updates != first.updates
            || f.outputs.len() != first.outputs.len()
        {
            return Err(bad(dir, "its signatures are not one function's programs"));
        }
    }
    // A dimension the programs differ in is unknown in the manifest.
    let merged = |all: Vec<&Vec<i64>>| -> Vec<Option<i64>> {
        (0..all[0].len())
            .map(|d| {
                match all
                    .iter()
                    .all(|s| s.len() == all[0].len() && s[d] == all[0][d])
                {
                    true => Some(all[0][d]),
                    false => None,
                }
            })
            .collect()
    };
    let inputs = (0..first.inputs.len())
        .map(|i| SpecJson {
            name: first.inputs[i].0.clone(),
            dtype: first.inputs[i].1.name().into(),
            shape: Some(merged(functions.iter().map(|f| &f.inputs[i].2).collect())),
        })
        .collect();
    let outputs = (0..first.outputs.len())
        .map(|j| SpecJson {
            name: format!("output_{j}"),
            dtype: first.outputs[j].0.name().into(),
            shape: Some(merged(functions.iter().map(|f| &f.outputs[j].1).collect())),
        })
        .collect();
    let mut constant_files = Vec::new();
    let n_constants = first.constants.keys().next_back().map_or(0, |c| c + 1);
    for c in 0..n_constants {
        let value = first
            .constants
            .get(&c)
            .ok_or_else(|| bad(dir, format!("constant {c} is missing")))?;
        constant_files.push(pending.array(
            format!("constant_{c}.npy"),
            format!("constant_{c}"),
            value,
        )?);
    }
    let mut programs = Vec::new();
    for (k, f) in functions.iter().enumerate() {
        let (file, size, sha256) =
            pending.add(format!("program_{k}.mlir"), f.text.clone().into_bytes());
        programs.push(ProgramJson {
            input_shapes: f.inputs.iter().map(|i| i.2.clone()).collect(),
            file,
            size,
            sha256,
            light: false,
            small_array_graph: false,
        });
    }
    let n_out = first.outputs.len();
    let manifest = Manifest {
        format: FORMAT.into(),
        version: VERSION,
        name: "serving_default".into(),
        implements: None,
        inputs,
        outputs,
        programs,
        constants: constant_files,
        variables: variable_files,
        captures: first.captures.clone(),
        updates: first
            .updates
            .iter()
            .enumerate()
            .map(|(k, &variable)| UpdateJson {
                variable,
                result: n_out + k,
            })
            .collect(),
        callbacks: Vec::new(),
        graph: None,
    };
    pending.write(export_dir, &manifest)
}

/// Turns the SavedModel at `dir` into an export folder in a new private
/// scratch folder, runs `then` on it, and removes it.
pub(crate) fn through_export<T>(dir: &Path, then: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    let scratch = std::env::temp_dir().join(format!(
        "xlafn-saved-model-{}",
        files::unpredictable_suffix()
    ));
    // A new folder (creating fails on anything already there, a planted
    // link included), readable by this user only from the start.
    let mut builder = std::fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder
        .create(&scratch)
        .map_err(|e| files::io("creating", &scratch, e))?;
    let export = scratch.join("export");
    let result = to_export(dir, &export).and_then(|()| then(&export));
    let _ = std::fs::remove_dir_all(&scratch);
    result
}
