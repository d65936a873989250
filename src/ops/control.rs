//! Control-flow ops with regions: `cond` (StableHLO `if`) and `while_loop`
//! (StableHLO `while`).
//!
//! A region is a traced graph. Its parameters are its own arguments (the
//! loop values of a `while`; none for a `cond` branch) followed by the
//! values it captured from outside; the op's node lists those captured
//! values as extra inputs, and `Region::captures` says which input feeds
//! which capture parameter. Lowered regions use the captured outer values
//! directly, as StableHLO allows.
//!
//! The user-facing `cond`/`while_loop` functions, which trace the regions,
//! live in `crate::control`; eagerly they are plain Rust control flow, so
//! these ops only ever appear in traced graphs (never in the eager cache).

use super::batching;
use super::{Op, OpDef, describe};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Graph, Scalar, TensorType, shape_is_subtype, shape_supertype};
use crate::lower::{Emitter, Val, lower_subgraph};
use crate::tensor::Tensor;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// A traced sub-graph and the node inputs feeding its captured values.
#[derive(Clone)]
pub struct Region {
    pub graph: Arc<Graph>,
    /// For each parameter after the region's own arguments: the index of
    /// the node input that feeds it.
    pub captures: Vec<usize>,
}

/// Short form for graph listings: the region's size, not its contents.
impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "<{} nodes, captures {:?}>",
            self.graph.nodes().len(),
            self.captures
        )
    }
}

impl Region {
    /// Regions compare by identity: two traces are never "the same" region.
    fn same(&self, other: &Region) -> bool {
        Arc::ptr_eq(&self.graph, &other.graph) && self.captures == other.captures
    }

    fn num_args(&self) -> usize {
        self.graph.params().len() - self.captures.len()
    }

    /// Parameter types: `args` then the captured inputs' types.
    fn param_types(&self, args: &[TensorType], inputs: &[TensorType]) -> Vec<TensorType> {
        let mut t = args.to_vec();
        t.extend(self.captures.iter().map(|&i| inputs[i].clone()));
        t
    }

    /// Lowers the region body with `args` as its own arguments.
    fn lower(&self, cx: &mut Emitter, args: &[Val], inputs: &[Val]) -> Result<Vec<Val>> {
        self.lower_with(cx, args, inputs, &[])
    }

    /// [`Region::lower`], returning after the results the lowered values
    /// of `extra` (values of the region's graph).
    fn lower_with(
        &self,
        cx: &mut Emitter,
        args: &[Val],
        inputs: &[Val],
        extra: &[crate::ir::ValueId],
    ) -> Result<Vec<Val>> {
        let mut all = args.to_vec();
        all.extend(self.captures.iter().map(|&i| inputs[i].clone()));
        if extra.is_empty() {
            return lower_subgraph(cx, &self.graph, &all);
        }
        let mut graph = (*self.graph).clone();
        let mut results = graph.results().to_vec();
        results.extend(extra);
        graph.set_results(results);
        lower_subgraph(cx, &graph, &all)
    }
}

impl Region {
    /// Which results depend on a marked value (a batched one for `vmap`, one
    /// with a tangent for `jvp`), when the region's own arguments are
    /// marked as `args` says and the op's inputs as `inputs` says; only
    /// results `admit` lets carry the mark count.
    pub(crate) fn reached(
        &self,
        args: &[bool],
        inputs: &[bool],
        admit: impl Fn(&TensorType) -> bool,
    ) -> Vec<bool> {
        let mut params = args.to_vec();
        params.extend(self.captures.iter().map(|&i| inputs[i]));
        let flags = batching::batched_values(&self.graph, &params);
        self.graph
            .results()
            .iter()
            .map(|v| flags[v.0 as usize] && admit(self.graph.value_type(*v)))
            .collect()
    }
}

fn hash_region<H: Hasher>(r: &Region, state: &mut H) {
    (Arc::as_ptr(&r.graph) as usize).hash(state);
    r.captures.hash(state);
}

fn join(op: &str, a: &TensorType, b: &TensorType) -> Result<TensorType> {
    if a.dtype != b.dtype {
        return Err(Error::invalid(
            op,
            format!("branches disagree on dtype: {a} vs {b}"),
        ));
    }
    Ok(TensorType::new(
        a.dtype,
        shape_supertype(&a.shape, &b.shape),
    ))
}

/// Errors when the body gives loop value `name` a shape other than the one
/// it entered with (another rank, or another size in a dimension known in
/// both). XLA compiles a loop only for values that keep their shape, so
/// such a loop could never run; without this check the relaxed shape
/// surfaces later as `the shape of f32(None, 3) is not fully known`,
/// naming neither the loop value nor the fix. TensorFlow raises the same
/// for a loop variable without `shape_invariants`. Checked here, where the
/// loop's types are inferred, it fires at trace time for shapes known then
/// and when the program is compiled for the others.
fn check_keeps_shape(name: &str, before: &TensorType, after: &TensorType) -> Result<()> {
    let (Some(a), Some(b)) = (before.shape.dims(), after.shape.dims()) else {
        return Ok(());
    };
    let differs = a.len() != b.len()
        || a.iter()
            .zip(b)
            .any(|(x, y)| matches!((x, y), (Some(x), Some(y)) if x != y));
    if !differs {
        return Ok(());
    }
    Err(Error::invalid(
        "while_loop",
        format!(
            "{name} has shape {} before the loop, but shape {} after one iteration. \
             XLA compiles only loops whose values keep their shape, so there are no shape \
             invariants to let it vary: give the value its final shape before the loop (e.g. \
             zeros of the largest size, filled with dynamic_update_slice), or write the pieces \
             into a TensorArray",
            before.shape, after.shape
        ),
    ))
}

fn check_same_concrete(op: &str, what: &str, got: &[Val], want: &[ArraySpec]) -> Result<()> {
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        if g.ty != *w {
            return Err(Error::invalid(
                op,
                format!(
                    "{what} {i} has type {} where {} is needed; XLA compiles static shapes, so both \
                     must agree for these input shapes",
                    g.ty, w
                ),
            ));
        }
    }
    Ok(())
}

// ------------------------------------------------------------------- cond

/// `cond(pred, then, else)`: node inputs are `[pred, captures...]`; the
/// branches take no arguments and return values of matching dtypes.
#[derive(Clone, Debug)]
pub struct Cond {
    pub then_branch: Region,
    pub else_branch: Region,
}

impl PartialEq for Cond {
    fn eq(&self, other: &Self) -> bool {
        self.then_branch.same(&other.then_branch) && self.else_branch.same(&other.else_branch)
    }
}
impl Eq for Cond {}
impl Hash for Cond {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_region(&self.then_branch, state);
        hash_region(&self.else_branch, state);
    }
}

impl OpDef for Cond {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        // Both branches, batched, and a select (JAX's rule for a batched
        // predicate; for a shared one it is the same values).
        let branch = |region: &Region| {
            let params = region
                .captures
                .iter()
                .map(|&i| (inputs[i].clone(), batched[i]))
                .collect();
            batching::replay_in_rule(&region.graph, params, size)
        };
        let then = branch(&self.then_branch)?;
        let otherwise = branch(&self.else_branch)?;
        let select = || -> Result<Vec<(Tensor, bool)>> {
            let (then, otherwise) = (then?, otherwise?);
            let pred = (&inputs[0], batched[0]);
            then.into_iter()
                .zip(otherwise)
                .map(|(a, b)| select_batched(pred, a, b, size))
                .collect()
        };
        Some(select())
    }

    fn name(&self) -> &'static str {
        "cond"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let pred = inputs
            .first()
            .ok_or_else(|| Error::invalid("cond", "needs a predicate"))?;
        if pred.dtype != DType::Bool || pred.rank().is_some_and(|r| r != 0) {
            return Err(Error::invalid(
                "cond",
                format!(
                    "the predicate must be a bool scalar, got {pred} (operands: {})",
                    describe(inputs)
                ),
            ));
        }
        let then_t = self
            .then_branch
            .graph
            .infer_results(&self.then_branch.param_types(&[], inputs))?;
        let else_t = self
            .else_branch
            .graph
            .infer_results(&self.else_branch.param_types(&[], inputs))?;
        if then_t.len() != else_t.len() {
            return Err(Error::invalid(
                "cond",
                format!(
                    "the true branch returns {} tensors and the false branch {}",
                    then_t.len(),
                    else_t.len()
                ),
            ));
        }
        then_t
            .iter()
            .zip(&else_t)
            .map(|(a, b)| join("cond", a, b))
            .collect()
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let then_r = cx.region(&[], |cx, _| {
            let r = self.then_branch.lower(cx, &[], inputs)?;
            check_same_concrete("cond", "true-branch result", &r, outputs)?;
            Ok(r)
        })?;
        let else_r = cx.region(&[], |cx, _| {
            let r = self.else_branch.lower(cx, &[], inputs)?;
            check_same_concrete("cond", "false-branch result", &r, outputs)?;
            Ok(r)
        })?;
        Ok(cx.if_(&inputs[0], then_r, else_r, outputs))
    }

    /// A `cond` of the branches' gradients: the rule is
    /// `autodiff::region_rules`, reached through the tape's recorder.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &vec![true; inputs.len()])
    }

    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let op = crate::tensor::hooks::RegionOp::Cond(self);
        crate::tensor::hooks::region_vjp(op, inputs, outputs, grads, needed)
    }
}

// ------------------------------------------------------------------ while

/// `while_loop(cond, body, init)`: node inputs are `[loop values...,
/// captures...]`; `cond` maps the loop values to a bool scalar and `body`
/// to the next loop values, of the same types.
#[derive(Clone)]
pub struct While {
    pub cond: Region,
    pub body: Region,
    /// The loop values' types as traced (possibly relaxed to unknown dims,
    /// like TensorFlow's shape invariants).
    pub loop_types: Vec<TensorType>,
    /// How many times the loop runs, when that is known at trace time (a
    /// `for_range` over host-known bounds). Only the gradient reads it, to
    /// size its buffer of forward states; it is not part of the op's
    /// identity and exports do not carry it (a loaded loop's gradient
    /// counts on the device instead of trusting a file).
    pub trip_count: Option<i64>,
    /// How many leading loop values xlafn added before the user's (1 for
    /// a `for_range`'s counter), so that errors number the user's own
    /// values from 0. Like `trip_count`, not part of the op's identity and
    /// not carried by exports (a loaded loop numbers all its values).
    pub hidden_values: usize,
    /// Set when the loop was traced under a recording gradient tape: the
    /// number of slots of a buffer, per loop value, into which each
    /// iteration writes the state that entered it (the last slot taking
    /// every state past the others), so that the gradient reads the states
    /// instead of running the loop again. The op then has, after the loop
    /// values, the trip count (i32) and one `[slots, ...]` buffer per loop
    /// value as extra outputs. XLA drops them when nothing reads them.
    pub record: Option<i64>,
    /// Whether the record also keeps the body's activations (see
    /// `While::residuals`): set when they fit the budget beside the
    /// states without costing slots.
    pub record_activations: bool,
}

impl std::fmt::Debug for While {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let types: Vec<String> = self.loop_types.iter().map(|t| t.to_string()).collect();
        write!(
            f,
            "While {{ cond: {:?}, body: {:?}, loop: [{}] }}",
            self.cond,
            self.body,
            types.join(", ")
        )
    }
}

impl PartialEq for While {
    fn eq(&self, other: &Self) -> bool {
        self.cond.same(&other.cond)
            && self.body.same(&other.body)
            && self.record == other.record
            && self.record_activations == other.record_activations
    }
}
impl Eq for While {}
impl Hash for While {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_region(&self.cond, state);
        hash_region(&self.body, state);
        self.record.hash(state);
        self.record_activations.hash(state);
    }
}

impl While {
    /// The body values a state record keeps besides the loop values: the
    /// results of its dots and convolutions (float, of known shape), so
    /// that the gradient's replay of the body takes them from the record
    /// instead of multiplying again, as JAX's scan keeps its residuals;
    /// with [`While::record_activations`], also the outputs of the
    /// activations whose gradient reads their output (`tanh`, `sigmoid`,
    /// `exp`, `sqrt`). Stored, they are not recomputed in the backward
    /// loop, and in the forward loop their second reader (the record)
    /// keeps XLA from fusing a whole recurrent cell into one kernel that
    /// its CPU emitter compiles to scalar code.
    /// An activation that is itself the next loop value is left out: the
    /// next iteration's recorded state holds it already.
    pub(crate) fn residuals(&self) -> Vec<crate::ir::ValueId> {
        self.residuals_with(self.record_activations)
    }

    /// [`While::residuals`] as they would be with `activations` recorded
    /// or not, whatever the op says (the tracer compares the two).
    pub(crate) fn residuals_with(&self, activations: bool) -> Vec<crate::ir::ValueId> {
        let g = &self.body.graph;
        g.nodes()
            .iter()
            .filter(|node| match &node.op {
                Op::MatMul(_) | Op::DotGeneral(_) | Op::Conv(_) => true,
                Op::Unary(u) => {
                    activations
                        && u.gradient_reads_output()
                        && !node.outputs.iter().any(|v| g.results().contains(v))
                }
                _ => false,
            })
            .flat_map(|node| node.outputs.iter().copied())
            .filter(|&v| {
                let t = g.value_type(v);
                t.dtype.is_float() && t.shape.as_known().is_some()
            })
            .collect()
    }

    /// Which loop values a mark spreading by dependence reaches (see
    /// [`Region::reached`]): those marked on entry (`inputs`, the op's
    /// inputs) and those the body makes depend on a marked one, to a fixed
    /// point.
    pub(crate) fn carries_reached(
        &self,
        inputs: &[bool],
        admit: impl Fn(&TensorType) -> bool,
    ) -> Vec<bool> {
        let mut carried = inputs[..self.loop_types.len()].to_vec();
        loop {
            let next = self.body.reached(&carried, inputs, &admit);
            let joined: Vec<bool> = carried.iter().zip(&next).map(|(a, b)| *a || *b).collect();
            if joined == carried {
                return carried;
            }
            carried = joined;
        }
    }

    /// Which loop values a state record keeps (see
    /// [`super::while_record::recorded_values`]).
    pub(crate) fn recorded_values(&self) -> Vec<bool> {
        super::while_record::recorded_values(
            &self.body.graph,
            &self.cond.graph,
            self.loop_types.len(),
        )
    }

    /// The types of the recording outputs (see [`While::record`]): the
    /// trip count, then a `[slots, ...]` buffer per recorded loop value.
    fn record_types(&self, loop_values: &[TensorType], slots: i64) -> Result<Vec<TensorType>> {
        if !(1..=super::while_record::MAX_RECORD_SLOTS).contains(&slots) {
            return Err(Error::invalid(
                "while",
                format!("a state record of {slots} slots is out of range"),
            ));
        }
        let mut types = vec![TensorType::new(DType::I32, crate::ir::Shape::scalar())];
        let recorded = self.recorded_values();
        let residuals = self.residuals();
        let residual_types = residuals.iter().map(|&v| self.body.graph.value_type(v));
        for t in loop_values
            .iter()
            .zip(&recorded)
            .filter_map(|(t, &r)| r.then_some(t))
            .chain(residual_types)
        {
            let Some(dims) = t.shape.as_known() else {
                return Err(Error::invalid(
                    "while",
                    format!("a recorded loop value must have a known shape, got {t}"),
                ));
            };
            let mut dims = dims.to_vec();
            dims.insert(0, slots);
            crate::dtype::check_array_size(t.dtype, &dims)?;
            types.push(TensorType::new(t.dtype, crate::ir::Shape::known(&dims)));
        }
        Ok(types)
    }

    /// Lowers the body of a recording loop: the user's body on the loop
    /// values, then the state that entered this iteration written into slot
    /// `min(j, slots - 1)` of each buffer, and `j + 1`.
    fn lower_recording_body(
        &self,
        cx: &mut Emitter,
        args: &[Val],
        inputs: &[Val],
        slots: i64,
    ) -> Result<Vec<Val>> {
        let n = self.loop_types.len();
        let residuals = self.residuals();
        let mut next = self.body.lower_with(cx, &args[..n], inputs, &residuals)?;
        let stored = next.split_off(n);
        let counter = ArraySpec::scalar(DType::I32);
        let j = &args[n];
        let last = cx.constant(Scalar::I64(slots - 1), counter.clone());
        let slot = cx.binary("minimum", j, &last);
        let zero = cx.constant(Scalar::I64(0), counter.clone());
        let one = cx.constant(Scalar::I64(1), counter);
        next.push(cx.binary("add", j, &one));
        let recorded = self.recorded_values();
        let states = args[..n]
            .iter()
            .zip(recorded)
            .filter_map(|(a, r)| r.then_some(a))
            .chain(&stored);
        for (state, buffer) in states.zip(&args[n + 1..]) {
            let mut one_slot = vec![1];
            one_slot.extend(&state.ty.dims);
            let update = cx.reshape(state, &one_slot);
            let mut starts = vec![&slot];
            starts.extend(std::iter::repeat_n(&zero, state.ty.rank()));
            next.push(cx.dynamic_update_slice(buffer, &update, &starts));
        }
        Ok(next)
    }
}

impl OpDef for While {
    fn name(&self) -> &'static str {
        "while"
    }

    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let op = crate::tensor::hooks::RegionBatchOp::While(self);
        crate::tensor::hooks::region_batch(op, inputs, batched, size)
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let n = self.loop_types.len();
        if inputs.len() < n || self.body.num_args() != n || self.cond.num_args() != n {
            return Err(Error::invalid(
                "while",
                format!("malformed loop with operands {}", describe(inputs)),
            ));
        }
        let init = &inputs[..n];
        for (i, (t, declared)) in init.iter().zip(&self.loop_types).enumerate() {
            if t.dtype != declared.dtype || !shape_is_subtype(&t.shape, &declared.shape) {
                return Err(Error::invalid(
                    "while",
                    format!(
                        "loop value {i} has type {t}, which does not fit the traced {declared}"
                    ),
                ));
            }
        }
        let next = self
            .body
            .graph
            .infer_results(&self.body.param_types(init, inputs))?;
        for (i, (before, after)) in init.iter().zip(&next).enumerate() {
            let name = match i.checked_sub(self.hidden_values) {
                Some(user) => format!("loop value {user}"),
                None => "the loop's counter".to_string(),
            };
            check_keeps_shape(&name, before, after)?;
        }
        // The loop values keep the initial types when the body preserves them.
        let mut types = init
            .iter()
            .zip(&next)
            .map(|(a, b)| join("while", a, b))
            .collect::<Result<Vec<_>>>()?;
        if let Some(slots) = self.record {
            types.extend(self.record_types(&types, slots)?);
        }
        Ok(types)
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let n = self.loop_types.len();
        check_same_concrete("while", "loop value", &inputs[..n], &outputs[..n])?;
        let mut init: Vec<Val> = inputs[..n].to_vec();
        if self.record.is_some() {
            init.push(cx.constant(Scalar::I64(0), ArraySpec::scalar(DType::I32)));
            for spec in &outputs[n + 1..] {
                init.push(cx.constant(Scalar::I64(0), spec.clone()));
            }
        }
        let types: Vec<ArraySpec> = init.iter().map(|v| v.ty.clone()).collect();
        let cond_r = cx.region(&types, |cx, args| {
            let r = self.cond.lower(cx, &args[..n], inputs)?;
            match r.as_slice() {
                [p] if p.ty == ArraySpec::scalar(DType::Bool) => Ok(r),
                _ => Err(Error::invalid(
                    "while",
                    "the loop condition must return one bool scalar",
                )),
            }
        })?;
        let body_r = cx.region(&types, |cx, args| {
            let r = match self.record {
                Some(slots) => self.lower_recording_body(cx, args, inputs, slots)?,
                None => self.body.lower(cx, args, inputs)?,
            };
            check_same_concrete("while", "next loop value", &r, &types)?;
            Ok(r)
        })?;
        let init: Vec<&Val> = init.iter().collect();
        Ok(cx.while_(&init, cond_r, body_r))
    }

    /// A backward loop over the forward states: the rule is
    /// `autodiff::while_grad`, reached through the tape's recorder.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &vec![true; inputs.len()])
    }

    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        let op = crate::tensor::hooks::RegionOp::While(self);
        crate::tensor::hooks::region_vjp(op, inputs, outputs, grads, needed)
    }
}

// ------------------------------------------------------------------- call

/// The backward of a [`Call`]: from the call's inputs, outputs, output
/// gradients and which inputs need a gradient, the gradients of those.
pub type CallVjp = Arc<
    dyn Fn(&[Tensor], &[Tensor], &[Option<Tensor>], &[bool]) -> Result<Vec<Option<Tensor>>>
        + Send
        + Sync,
>;

/// A traced function's graph run as one op: what an eager gradient tape
/// records for a `Function` call, so that the call runs compiled and its
/// gradient comes from `vjp` (a compiled backward function), as TensorFlow
/// records a function call. Inputs: the graph's parameters (arguments,
/// then captured values); outputs: its first `num_outputs` results (the
/// rest are variable updates, which have no gradient).
#[derive(Clone)]
pub struct Call {
    pub graph: Arc<Graph>,
    pub num_outputs: usize,
    pub vjp: CallVjp,
}

impl std::fmt::Debug for Call {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "<{} nodes>", self.graph.nodes().len())
    }
}

/// Calls compare by identity, like regions.
impl PartialEq for Call {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.graph, &other.graph) && self.num_outputs == other.num_outputs
    }
}
impl Eq for Call {}
impl Hash for Call {
    fn hash<H: Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.graph) as usize).hash(state);
        self.num_outputs.hash(state);
    }
}

impl OpDef for Call {
    fn batch(&self, inputs: &[Tensor], batched: &[bool], size: i64) -> batching::Batched {
        let params = inputs
            .iter()
            .cloned()
            .zip(batched.iter().copied())
            .collect();
        let outs = batching::replay_in_rule(&self.graph, params, size)?;
        Some(outs.map(|mut o| {
            o.truncate(self.num_outputs);
            o
        }))
    }

    fn name(&self) -> &'static str {
        "call"
    }

    fn infer(&self, inputs: &[TensorType]) -> Result<Vec<TensorType>> {
        let mut results = self.graph.infer_results(inputs)?;
        results.truncate(self.num_outputs);
        Ok(results)
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], _outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let mut results = lower_subgraph(cx, &self.graph, inputs)?;
        results.truncate(self.num_outputs);
        Ok(results)
    }

    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        self.vjp_needed(inputs, outputs, grads, &vec![true; inputs.len()])
    }

    fn vjp_needed(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
        needed: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        (self.vjp)(inputs, outputs, grads, needed)
    }
}

/// `where(pred, a, b)` for a `cond`'s batched results: the predicate (one
/// per example when batched) broadcast over each example's values.
fn select_batched(
    (pred, pred_batched): (&Tensor, bool),
    (a, a_batched): (Tensor, bool),
    (b, b_batched): (Tensor, bool),
    size: i64,
) -> Result<(Tensor, bool)> {
    let any = pred_batched || a_batched || b_batched;
    if !any {
        return Ok((pred.where_(&a, &b)?, false));
    }
    let a = batching::materialized(&a, a_batched, size)?;
    let b = batching::materialized(&b, b_batched, size)?;
    let pred = if pred_batched {
        let mut dims = vec![size];
        dims.extend(std::iter::repeat_n(1, a.rank() - 1));
        pred.reshape(&dims)?
    } else {
        pred.clone()
    };
    Ok((pred.where_(&a, &b)?, true))
}
