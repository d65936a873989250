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

use super::{OpDef, describe};
use crate::dtype::{ArraySpec, DType};
use crate::error::{Error, Result};
use crate::ir::{Graph, TensorType, shape_is_subtype, shape_supertype};
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
        let mut all = args.to_vec();
        all.extend(self.captures.iter().map(|&i| inputs[i].clone()));
        lower_subgraph(cx, &self.graph, &all)
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

    /// The gradient of a `cond` is a `cond` of the branches' gradients:
    /// each branch is replayed under a tape with respect to the captured
    /// values (zeros for the ones it does not use).
    fn vjp(
        &self,
        inputs: &[Tensor],
        _outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        // Each distinct float input once: a value captured by both branches
        // appears twice among the inputs but must get its gradient once.
        let mut float: Vec<usize> = Vec::new();
        for i in 1..inputs.len() {
            if inputs[i].dtype().is_inexact()
                && !float.iter().any(|&j| inputs[j].key() == inputs[i].key())
            {
                float.push(i);
            }
        }
        let wrt: Vec<Tensor> = float.iter().map(|&i| inputs[i].clone()).collect();
        let branch = |region: &Region| -> Result<Vec<Tensor>> {
            let region_inputs: Vec<Tensor> =
                region.captures.iter().map(|&i| inputs[i].clone()).collect();
            crate::autodiff::region_gradients(&region.graph, &region_inputs, &wrt, grads)
        };
        let branch_grads: Vec<Tensor> = crate::control::cond(
            &inputs[0],
            || branch(&self.then_branch),
            || branch(&self.else_branch),
        )?;
        let mut out = vec![None; inputs.len()];
        for (slot, g) in float.into_iter().zip(branch_grads) {
            out[slot] = Some(g);
        }
        Ok(out)
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
        self.cond.same(&other.cond) && self.body.same(&other.body)
    }
}
impl Eq for While {}
impl Hash for While {
    fn hash<H: Hasher>(&self, state: &mut H) {
        hash_region(&self.cond, state);
        hash_region(&self.body, state);
    }
}

impl OpDef for While {
    fn name(&self) -> &'static str {
        "while"
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
        // The loop values keep the initial types when the body preserves them.
        init.iter()
            .zip(&next)
            .map(|(a, b)| join("while", a, b))
            .collect()
    }

    fn lower(&self, cx: &mut Emitter, inputs: &[Val], outputs: &[ArraySpec]) -> Result<Vec<Val>> {
        let n = self.loop_types.len();
        let init: Vec<&Val> = inputs[..n].iter().collect();
        let types: Vec<ArraySpec> = init.iter().map(|v| v.ty.clone()).collect();
        check_same_concrete("while", "loop value", &inputs[..n], outputs)?;
        let cond_r = cx.region(&types, |cx, args| {
            let r = self.cond.lower(cx, args, inputs)?;
            match r.as_slice() {
                [p] if p.ty == ArraySpec::scalar(DType::Bool) => Ok(r),
                _ => Err(Error::invalid(
                    "while",
                    "the loop condition must return one bool scalar",
                )),
            }
        })?;
        let body_r = cx.region(&types, |cx, args| {
            let r = self.body.lower(cx, args, inputs)?;
            check_same_concrete("while", "next loop value", &r, &types)?;
            Ok(r)
        })?;
        Ok(cx.while_(&init, cond_r, body_r))
    }

    /// The gradient of a `while`: the trip count `T` is found by running
    /// the loop again, then a backward loop walks the iterations in
    /// reverse, applying the body's vector-Jacobian product (its region
    /// replayed under a tape) at each iteration's state.
    ///
    /// XLA needs static buffers and `T` is known only at run time, so the
    /// states are checkpointed: `K` slots (as many as fit in
    /// `CHECKPOINT_BYTES`, at most `MAX_CHECKPOINTS`) hold every
    /// `ceil(T / K)`-th state, filled by a forward pass, and each backward
    /// step recomputes its state from the checkpoint before it. That costs
    /// about `T * ceil(T / K) / 2` body runs instead of `T^2 / 2`, and is
    /// linear while `T <= K`. When a state's shape is not fully known at
    /// trace time, states are recomputed from the initial values.
    fn vjp(
        &self,
        inputs: &[Tensor],
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let n = self.loop_types.len();
        let init: Vec<Tensor> = inputs[..n].to_vec();
        let float_vars: Vec<usize> = (0..n).filter(|&i| init[i].dtype().is_inexact()).collect();
        let mut float_caps: Vec<usize> = Vec::new();
        for &i in &self.body.captures {
            if inputs[i].dtype().is_inexact()
                && !float_caps
                    .iter()
                    .any(|&j| inputs[j].key() == inputs[i].key())
            {
                float_caps.push(i);
            }
        }
        let run_body = |state: &[Tensor]| -> Result<Vec<Tensor>> {
            let mut args: Vec<&Tensor> = state.iter().collect();
            args.extend(self.body.captures.iter().map(|&i| &inputs[i]));
            crate::tensor::recompute(&self.body.graph, &args)
        };
        let run_cond = |state: &[Tensor]| -> Result<Tensor> {
            let mut args: Vec<&Tensor> = state.iter().collect();
            args.extend(self.cond.captures.iter().map(|&i| &inputs[i]));
            Ok(crate::tensor::recompute(&self.cond.graph, &args)?.remove(0))
        };
        // The trip count.
        let zero = Tensor::fill(&[], 0, crate::dtype::DType::I32)?;
        let (trips, _) = crate::control::while_loop(
            |(_, s): &(Tensor, Vec<Tensor>)| run_cond(s),
            |(i, s): (Tensor, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>)> {
                Ok((i.add_scalar(1)?, run_body(&s)?))
            },
            (zero.clone(), init.clone()),
        )?;
        let checkpoints = Checkpoints::record(&init, &trips, &zero, &run_body)?;
        // Backward, from the last iteration to the first.
        let g_vars: Vec<Tensor> = float_vars
            .iter()
            .map(|&i| grads[i].clone().map_or_else(|| outputs[i].zeros_like(), Ok))
            .collect::<Result<_>>()?;
        let g_caps: Vec<Tensor> = float_caps
            .iter()
            .map(|&i| inputs[i].zeros_like())
            .collect::<Result<_>>()?;
        let (_, g_vars, g_caps) = crate::control::while_loop(
            |(k, _, _): &(Tensor, Vec<Tensor>, Vec<Tensor>)| k.gt_scalar(0),
            |(k, g_vars, g_caps): (Tensor, Vec<Tensor>, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>, Vec<Tensor>)> {
                let k = k.sub_scalar(1)?;
                // The state entering iteration k, recomputed from the
                // nearest checkpoint before it.
                let (from, start) = match &checkpoints {
                    Some(c) => c.before(&k, &zero)?,
                    None => (zero.clone(), init.clone()),
                };
                let (_, state) = crate::control::while_loop(
                    |(j, _): &(Tensor, Vec<Tensor>)| j.lt(&k),
                    |(j, s): (Tensor, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>)> { Ok((j.add_scalar(1)?, run_body(&s)?)) },
                    (from, start),
                )?;
                let mut region_inputs = state.clone();
                region_inputs.extend(self.body.captures.iter().map(|&i| inputs[i].clone()));
                let mut wrt: Vec<Tensor> = float_vars.iter().map(|&i| state[i].clone()).collect();
                wrt.extend(float_caps.iter().map(|&i| inputs[i].clone()));
                let mut out_grads: Vec<Option<Tensor>> = vec![None; n];
                for (slot, g) in float_vars.iter().zip(&g_vars) {
                    out_grads[*slot] = Some(g.clone());
                }
                let step = crate::autodiff::region_gradients(&self.body.graph, &region_inputs, &wrt, &out_grads)?;
                let (new_vars, cap_steps) = step.split_at(float_vars.len());
                let caps: Vec<Tensor> = g_caps.iter().zip(cap_steps).map(|(a, b)| a.add(b)).collect::<Result<_>>()?;
                Ok((k, new_vars.to_vec(), caps))
            },
            (trips, g_vars, g_caps),
        )?;
        let mut out = vec![None; inputs.len()];
        for (slot, g) in float_vars.into_iter().zip(g_vars) {
            out[slot] = Some(g);
        }
        for (slot, g) in float_caps.into_iter().zip(g_caps) {
            out[slot] = Some(g);
        }
        Ok(out)
    }
}

/// Bytes of checkpointed loop states a `while` gradient may hold.
const CHECKPOINT_BYTES: i64 = 64 << 20;
/// Most checkpoints a `while` gradient keeps.
const MAX_CHECKPOINTS: i64 = 256;

/// Every `stride`-th state of a loop's forward run, in buffers with a
/// leading slot dimension (one buffer per loop value).
struct Checkpoints {
    buffers: Vec<Tensor>,
    stride: Tensor,
}

impl Checkpoints {
    /// Runs the loop from `init` for `trips` iterations, keeping every
    /// `ceil(trips / K)`-th state. `None` when a state's shape is not fully
    /// known or fewer than two slots fit in the budget.
    fn record(
        init: &[Tensor],
        trips: &Tensor,
        zero: &Tensor,
        run_body: &dyn Fn(&[Tensor]) -> Result<Vec<Tensor>>,
    ) -> Result<Option<Checkpoints>> {
        let Some(slots) = checkpoint_slots(init)? else {
            return Ok(None);
        };
        let stride = trips
            .add_scalar(slots - 1)?
            .floordiv_scalar(slots)?
            .maximum_scalar(1)?;
        let buffers = init
            .iter()
            .map(|t| {
                let mut dims = vec![slots];
                dims.extend(t.dims());
                Tensor::fill(&dims, 0, t.dtype())
            })
            .collect::<Result<Vec<_>>>()?;
        let (_, _, buffers) = crate::control::while_loop(
            |(c, _, _): &(Tensor, Vec<Tensor>, Vec<Tensor>)| c.mul(&stride)?.lt(trips),
            |(c, state, buffers): (Tensor, Vec<Tensor>, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>, Vec<Tensor>)> {
                let buffers = buffers
                    .iter()
                    .zip(&state)
                    .map(|(b, x)| {
                        let mut one = vec![1];
                        one.extend(x.dims());
                        b.dynamic_update_slice(&x.reshape(&one)?, &slot_starts(&c, zero, x.rank()))
                    })
                    .collect::<Result<Vec<_>>>()?;
                let steps = stride.minimum(&trips.sub(&c.mul(&stride)?)?)?;
                let (_, state) = crate::control::while_loop(
                    |(j, _): &(Tensor, Vec<Tensor>)| j.lt(&steps),
                    |(j, s): (Tensor, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>)> { Ok((j.add_scalar(1)?, run_body(&s)?)) },
                    (zero.clone(), state),
                )?;
                Ok((c.add_scalar(1)?, state, buffers))
            },
            (zero.clone(), init.to_vec(), buffers),
        )?;
        Ok(Some(Checkpoints { buffers, stride }))
    }

    /// The checkpoint at or before iteration `k`: its iteration number and
    /// the state entering it.
    fn before(&self, k: &Tensor, zero: &Tensor) -> Result<(Tensor, Vec<Tensor>)> {
        let slot = k.floordiv(&self.stride)?;
        let state = self
            .buffers
            .iter()
            .map(|b| {
                let dims = b.dims()[1..].to_vec();
                let mut sizes = vec![1];
                sizes.extend(&dims);
                b.dynamic_slice(&slot_starts(&slot, zero, dims.len()), &sizes)?
                    .reshape(&dims)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok((slot.mul(&self.stride)?, state))
    }
}

/// `[slot, 0, 0, ...]`: the start of one slot of a checkpoint buffer.
fn slot_starts(slot: &Tensor, zero: &Tensor, rank: usize) -> Vec<Tensor> {
    std::iter::once(slot.clone())
        .chain(std::iter::repeat_n(zero.clone(), rank))
        .collect()
}

/// How many checkpoints of `state` fit in the budget (`None`: below two,
/// or a shape not fully known).
fn checkpoint_slots(state: &[Tensor]) -> Result<Option<i64>> {
    let mut bytes = 0i64;
    for t in state {
        let Some(n) = t.shape().num_elements() else {
            return Ok(None);
        };
        bytes += n * t.dtype().size_in_bytes()? as i64;
    }
    let slots = (CHECKPOINT_BYTES / bytes.max(1)).min(MAX_CHECKPOINTS);
    Ok((slots >= 2).then_some(slots))
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
