//! Layer: lowering. Graph IR → StableHLO text for one set of concrete input
//! types. Imports `ir`, the op catalog (each op lowers itself through the
//! `Emitter`), `dtype`, `error`, and from the runtime only its profile
//! spans and the host-callback target name. xlafn's own
//! tests also run `program_check`'s vocabulary over every program
//! written here (`check_vocabulary_in_own_tests`), which keeps the export
//! check in step with the emitter.
//!
//! Lowering re-infers every node with the concrete input types (a traced
//! graph may carry unknown dimensions), then asks the op to emit itself and
//! verifies that what it emitted has the inferred types, so an op whose
//! `infer` and `lower` disagree fails here with its name, not inside XLA.

pub mod emitter;
pub mod program_check;

use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::{Graph, Shape, TensorType, ValueId};
use crate::ops::OpDef;
pub use emitter::{
    Annotations, Cmp, Combiner, ConvAttrs, Emitter, GatherDims, MATMUL_PRECISION_VAR,
    MatmulPrecision, Partitioning, ProgramSize, ScatterDims, Val,
};
use std::collections::HashMap;

/// A lowered program: its text plus parameter and result types.
#[derive(Clone, Debug)]
pub struct Lowered {
    pub text: String,
    /// All parameters: the graph's, then one per output slot.
    pub params: Vec<ArraySpec>,
    pub results: Vec<ArraySpec>,
    /// For each trailing output-slot parameter, the result written into it.
    pub output_slots: Vec<usize>,
    pub size: ProgramSize,
}

/// Does the concrete `spec` fit the (possibly partial) type `ty`?
pub fn fits(spec: &ArraySpec, ty: &TensorType) -> bool {
    if spec.dtype != ty.dtype {
        return false;
    }
    match ty.shape.dims() {
        None => true,
        Some(dims) => {
            dims.len() == spec.dims.len()
                && dims
                    .iter()
                    .zip(&spec.dims)
                    .all(|(d, s)| d.is_none_or(|d| d == *s))
        }
    }
}

fn concrete(t: &TensorType, what: &str) -> Result<ArraySpec> {
    let dims = t.shape.as_known().ok_or_else(|| {
        Error::invalid(
            what,
            format!("cannot compile: the shape of {t} is not fully known"),
        )
    })?;
    Ok(ArraySpec {
        dtype: t.dtype.check_compilable()?,
        dims,
    })
}

/// Lowers `graph` for the concrete parameter types `inputs`.
pub fn lower(graph: &Graph, inputs: &[ArraySpec]) -> Result<Lowered> {
    lower_with_slots(graph, inputs, &[], |_| false)
}

/// Lowers `graph` with buffer aliasing: each `(parameter, result)` pair in
/// `aliases` lets XLA write the result into the parameter's (donated)
/// buffer, as variable updates do; and every other result for which
/// `wants_slot` holds gets an output-slot parameter of its type, aliased to
/// it, into which the caller passes a recycled buffer, so the result needs
/// no fresh memory (no page faults for large outputs).
pub fn lower_with_slots(
    graph: &Graph,
    inputs: &[ArraySpec],
    aliases: &[(usize, usize)],
    wants_slot: impl Fn(&ArraySpec) -> bool,
) -> Result<Lowered> {
    let _span = crate::runtime::profile::span("lower").arg("parameters", inputs.len());
    let (cx, results) = lower_body(graph, inputs, None)?;
    let result_types: Vec<ArraySpec> = results.iter().map(|r| r.ty.clone()).collect();
    let aliased = |r: usize| aliases.iter().any(|(_, a)| *a == r);
    let output_slots: Vec<usize> = (0..result_types.len())
        .filter(|r| !aliased(*r) && wants_slot(&result_types[*r]))
        .collect();
    let mut all_params = inputs.to_vec();
    let mut aliases = aliases.to_vec();
    for &r in &output_slots {
        aliases.push((all_params.len(), r));
        all_params.push(result_types[r].clone());
    }
    let size = cx.size();
    let text = cx.finish_with_aliases(&all_params, &aliases, &results);
    #[cfg(debug_assertions)]
    check_vocabulary_in_own_tests(&text);
    Ok(Lowered {
        text,
        params: all_params,
        results: result_types,
        output_slots,
        size,
    })
}

/// In xlafn's own tests, every program written here must pass the export
/// check's vocabulary (`program_check::check_vocabulary`), so an
/// op or attribute the emitter learns fails the first test that lowers it
/// until the export check knows it too. The check runs in debug builds
/// where `XLAFN_CHECK_LOWERED_PROGRAMS=1`, which the project's
/// `.cargo/config.toml` sets for its cargo commands; a user's build, debug
/// or not, neither pays for it nor panics on it.
#[cfg(debug_assertions)]
fn check_vocabulary_in_own_tests(text: &str) {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let on = *ON.get_or_init(|| {
        crate::environment::CHECK_LOWERED_PROGRAMS
            .get_os()
            .is_some_and(|v| v == "1")
    });
    if !on {
        return;
    }
    if let Err(e) = program_check::check_vocabulary(text) {
        panic!(
            "the export check refuses what the emitter wrote, so exporting it would fail: \
             {e}; add the new word to lower::program_check"
        );
    }
}

/// Binds `inputs` to the graph's parameters and emits its nodes; returns
/// the emitter and the result values, sizes checked.
fn lower_body(
    graph: &Graph,
    inputs: &[ArraySpec],
    partitioning: Option<Partitioning>,
) -> Result<(Emitter, Vec<Val>)> {
    let params = graph.params();
    if params.len() != inputs.len() {
        return Err(Error::Value(format!(
            "the graph takes {} inputs, got {}",
            params.len(),
            inputs.len()
        )));
    }
    let mut cx = Emitter::new();
    cx.set_partitioning(partitioning);
    cx.set_matmul_precision(MatmulPrecision::from_env()?);
    let mut args = Vec::with_capacity(inputs.len());
    for (i, (p, spec)) in params.iter().zip(inputs).enumerate() {
        let declared = graph.value_type(*p);
        if !fits(spec, declared) {
            return Err(Error::Type(format!(
                "input {i}: expected {declared}, got {spec}"
            )));
        }
        spec.dtype.check_compilable()?;
        args.push(cx.param(i, spec.clone()));
    }
    let results = lower_subgraph(&mut cx, graph, &args)?;
    cx.check_sizes()?;
    Ok((cx, results))
}

/// Lowers `graph` for `inputs` with `annotations` on the module, its
/// parameters and its results (a partitioned program's shardings), and
/// the (parameter, result) buffer `aliases` of `lower_with_slots`.
pub fn lower_annotated(
    graph: &Graph,
    inputs: &[ArraySpec],
    aliases: &[(usize, usize)],
    annotations: &Annotations,
) -> Result<Lowered> {
    let _span = crate::runtime::profile::span("lower").arg("parameters", inputs.len());
    let (cx, results) = lower_body(graph, inputs, annotations.partitioning.clone())?;
    let result_types: Vec<ArraySpec> = results.iter().map(|r| r.ty.clone()).collect();
    let size = cx.size();
    let text = cx.finish_annotated(inputs, aliases, annotations, &results);
    Ok(Lowered {
        text,
        params: inputs.to_vec(),
        results: result_types,
        output_slots: Vec::new(),
        size,
    })
}

/// Emits `graph`'s nodes into `cx` with its parameters bound to `args`
/// (values already in scope: function arguments, region arguments, or
/// outer values a region uses implicitly); returns its results. Control-flow
/// ops lower their region graphs through this.
pub fn lower_subgraph(cx: &mut Emitter, graph: &Graph, args: &[Val]) -> Result<Vec<Val>> {
    let mut vals: HashMap<ValueId, Val> = graph
        .params()
        .iter()
        .copied()
        .zip(args.iter().cloned())
        .collect();
    for node in graph.nodes() {
        let ins: Vec<Val> = node.inputs.iter().map(|v| vals[v].clone()).collect();
        let in_types: Vec<TensorType> = ins
            .iter()
            .map(|v| TensorType::new(v.ty.dtype, Shape::known(&v.ty.dims)))
            .collect();
        let out_types = node.op.infer(&in_types)?;
        let outs: Vec<ArraySpec> = out_types
            .iter()
            .map(|t| concrete(t, node.op.name()))
            .collect::<Result<_>>()?;
        let emitted = node.op.lower(cx, &ins, &outs)?;
        verify(node.op.name(), &emitted, &outs)?;
        for (id, v) in node.outputs.iter().zip(emitted) {
            vals.insert(*id, v);
        }
    }
    Ok(graph.results().iter().map(|r| vals[r].clone()).collect())
}

fn verify(op: &str, emitted: &[Val], expected: &[ArraySpec]) -> Result<()> {
    let got: Vec<&ArraySpec> = emitted.iter().map(|v| &v.ty).collect();
    if got.len() != expected.len() || got.iter().zip(expected).any(|(g, e)| *g != e) {
        return Err(emitter::lowering_bug(
            op,
            format!("emitted {got:?} but infer promised {expected:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::{Op, elementwise::Binary};

    fn size_of_add(dims: &[i64]) -> ProgramSize {
        let ty = TensorType::known(DType::F32, dims);
        let graph = Graph::single_op(&Op::from(Binary::Add), &[ty.clone(), ty]).unwrap();
        let spec = ArraySpec::new(DType::F32, dims);
        lower(&graph, &[spec.clone(), spec]).unwrap().size
    }

    #[test]
    fn program_size_counts_result_elements_and_loops() {
        let small = size_of_add(&[4, 8]);
        assert_eq!(small.result_elements, 32);
        assert_eq!(small.largest_array, 32);
        assert!(small.is_light() && small.has_only_small_arrays());
        let medium = size_of_add(&[256, 256]);
        assert!(!medium.is_light() && medium.has_only_small_arrays());
        assert!(!size_of_add(&[512, 256]).has_only_small_arrays());
        // A large input counts even when every result is small.
        let mut big_input = Emitter::new();
        big_input.param(0, ArraySpec::new(DType::F32, &[1 << 20]));
        assert!(!big_input.size().has_only_small_arrays());
        let mut cx = Emitter::new();
        let x = cx.param(0, ArraySpec::scalar(DType::F32));
        cx.while_(&[&x], String::new(), String::new());
        assert!(cx.size().has_loops && !cx.size().is_light());
        assert!(!cx.size().has_only_small_arrays());
    }

    #[test]
    fn dots_half_floats_and_high_ranks_keep_small_programs_off_xnnpack() {
        assert!(size_of_add(&[1, 2, 1, 2, 1, 2]).has_only_small_arrays());
        assert!(!size_of_add(&[1, 2, 1, 2, 1, 2, 1]).has_only_small_arrays());
        let mut cx = Emitter::new();
        let spec = ArraySpec::new(DType::F32, &[4, 4]);
        let (a, b) = (cx.param(0, spec.clone()), cx.param(1, spec.clone()));
        assert!(cx.size().has_only_small_arrays());
        cx.dot_general(&a, &b, &[], &[], &[1], &[0], spec);
        assert!(cx.size().has_contractions && !cx.size().has_only_small_arrays());
        let mut cx = Emitter::new();
        cx.param(0, ArraySpec::new(DType::F16, &[4]));
        assert!(cx.size().has_half_floats && !cx.size().has_only_small_arrays());
    }
}
