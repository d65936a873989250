//! Shapes no listed program covers: a loaded export that kept its
//! traced graph (`ops::codec`) compiles it for a new compatible input
//! shape on first use, as a SavedModel serves any batch size its
//! signature allows, and keeps that program for later calls.
//!
//! The graph was rebuilt through each op's shape rule when read; here its
//! dtypes are checked against the manifest once, then each specialized
//! program is lowered like any traced function and checked exactly as a
//! listed one is (`program_check`, then `check_signature` against the
//! manifest's outputs and variable updates) before it reaches XLA: the
//! graph is as untrusted as the programs beside it.
//!
//! The programs kept are bounded (`bounded_cache`, as the eager op cache):
//! a server fed every batch size from 1 to 2000 kept 2000 executables
//! (+349 MiB); beyond `XLAFN_EXPORT_SHAPE_CACHE_ENTRIES` the least recently
//! used is dropped and compiled again if its shape comes back.

use super::manifest::{CaptureJson, UpdateJson};
use super::{Contract, check_signature, program_check};
use crate::bounded_cache::{BoundedCache, capacity_from_env};
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::function::{calls_host, program_traits};
use crate::ir::{Graph, TensorType};
use crate::lower;
use crate::runtime::{Client, CompileOptions, Executable};
use std::sync::{Arc, LazyLock, Mutex};

/// How many specialized programs a loaded function keeps by default
/// (about 180 KiB each on the CPU plugin: some 11 MiB per function).
pub const DEFAULT_SHAPE_CACHE_ENTRIES: usize = 64;

/// The bound: `XLAFN_EXPORT_SHAPE_CACHE_ENTRIES` (a positive integer),
/// read once, else [`DEFAULT_SHAPE_CACHE_ENTRIES`].
fn capacity() -> usize {
    static CAPACITY: LazyLock<usize> = LazyLock::new(|| {
        capacity_from_env(
            &crate::environment::EXPORT_SHAPE_CACHE_ENTRIES,
            DEFAULT_SHAPE_CACHE_ENTRIES,
        )
    });
    *CAPACITY
}

/// Compiled programs for shapes the export did not list.
pub(super) struct Specializer {
    graph: Arc<Graph>,
    contract: Contract,
    /// (parameter, result) pairs of variables read and updated in place.
    aliases: Vec<(usize, usize)>,
    /// Programs by input shapes.
    compiled: BoundedCache<Vec<Vec<i64>>, Arc<Executable>>,
    /// Held while compiling: concurrent first calls of one shape compile
    /// it once.
    compiling: Mutex<()>,
}

fn mismatch(what: impl std::fmt::Display) -> Error {
    Error::Value(format!(
        "export: the saved graph does not match the manifest: {what}"
    ))
}

impl Specializer {
    /// Checks `graph`'s parameters and result dtypes against the
    /// manifest's declarations and keeps it; shapes are checked per
    /// specialization, where they are known.
    pub(super) fn new(graph: Graph, c: Contract) -> Result<Specializer> {
        let mut params: Vec<TensorType> = c
            .inputs
            .iter()
            .map(|(dtype, shape)| TensorType::new(*dtype, shape.clone()))
            .collect();
        params.extend(
            c.capture_specs
                .iter()
                .map(|s| TensorType::known(s.dtype, &s.dims)),
        );
        if graph.params().len() != params.len() {
            return Err(mismatch(format!(
                "{} parameters for {} inputs and captures",
                graph.params().len(),
                params.len()
            )));
        }
        let results = graph.infer_results(&params)?;
        if results.len() != c.outputs.len() + c.updates.len() {
            return Err(mismatch(format!("{} results", results.len())));
        }
        for (i, (r, (dtype, _))) in results.iter().zip(&c.outputs).enumerate() {
            if r.dtype != *dtype {
                return Err(mismatch(format!("output {i} is {r}, declared {dtype}")));
            }
        }
        for u in &c.updates {
            let r = &results[u.result];
            if r.dtype != c.variable_specs[u.variable].dtype {
                return Err(mismatch(format!(
                    "the update of variable {} is {r}",
                    u.variable
                )));
            }
        }
        let aliases = if calls_host(&graph) {
            Vec::new()
        } else {
            variable_aliases(c.inputs.len(), &c.captures, &c.updates)
        };
        Ok(Specializer {
            graph: Arc::new(graph),
            contract: c,
            aliases,
            compiled: BoundedCache::new(),
            compiling: Mutex::new(()),
        })
    }

    /// The program for input shapes `dims` (already checked against the
    /// declared inputs), compiled on first use.
    pub(super) fn program_for(&self, dims: &[Vec<i64>]) -> Result<Arc<Executable>> {
        let key = dims.to_vec();
        if let Some(exe) = self.compiled.get(&key) {
            return Ok(exe);
        }
        let _compiling = self.compiling.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(exe) = self.compiled.get(&key) {
            return Ok(exe);
        }
        let mut specs: Vec<ArraySpec> = self
            .contract
            .inputs
            .iter()
            .zip(dims)
            .map(|((dtype, _), d)| ArraySpec::new(*dtype, d))
            .collect();
        specs.extend(self.contract.capture_specs.iter().cloned());
        let lowered = lower::lower_with_slots(&self.graph, &specs, &self.aliases, |_| false)?;
        let name = format!("the program specialized from graph.json for input shapes {dims:?}");
        let sig = program_check::check_program(&name, &lowered.text)?;
        check_signature(&name, &sig, &specs, &self.contract)?;
        let client = Client::default_client()?;
        let options = CompileOptions::for_program(client.platform(), program_traits(&lowered.size));
        let exe = Arc::new(Executable::compile_cached(
            &client,
            &lowered.text,
            specs,
            &options,
        )?);
        Ok(self.compiled.insert(key, exe, capacity()))
    }

    /// The shapes compiled and kept, in the order they were compiled.
    pub(super) fn shapes(&self) -> Vec<Vec<Vec<i64>>> {
        self.compiled.keys()
    }
}

/// Each variable both read (a capture) and updated: its parameter is
/// aliased to its update's result, as in the exporting process.
fn variable_aliases(
    num_inputs: usize,
    captures: &[CaptureJson],
    updates: &[UpdateJson],
) -> Vec<(usize, usize)> {
    captures
        .iter()
        .enumerate()
        .filter_map(|(k, c)| match c {
            CaptureJson::Variable { index } => updates
                .iter()
                .find(|u| u.variable == *index)
                .map(|u| (num_inputs + k, u.result)),
            CaptureJson::Constant { .. } => None,
        })
        .collect()
}
