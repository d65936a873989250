//! The batching rule of a `while` loop: `vmap` of a function that loops.
//!
//! The batched loop is one `while` over the batched carries, as JAX's
//! rule builds it:
//! - a carry is batched when its initial value is, or when the body makes
//!   it depend on a batched value (found by dependence, to a fixed point,
//!   before anything is replayed);
//! - when the condition depends only on unbatched values every example
//!   runs the same number of steps: the condition and the body are
//!   replayed batched and nothing else changes;
//! - when the condition is batched each example stops on its own step: the
//!   loop runs while any example's condition holds, every carry is
//!   batched, and each step keeps the old carry of an example whose
//!   condition is already false (a `select`).
//!
//! A loop traced under a gradient tape also records its states for the
//! gradient (`While::record`). With an unbatched condition the batched
//! loop writes the same record, one buffer per recorded value with the
//! batch first, so the gradient's backward loop (itself batched by this
//! rule) reads it as before: per-example gradients of a recurrent model
//! stay one program without a loop over the examples. With a batched
//! condition each example counts its own trips and writes its own slots
//! while it runs; the gradient's backward loop, batched by this rule too,
//! then walks each example's record back from its own count.
//!
//! Layer: vmap (registered into `tensor::hooks`, which `While::batch`
//! calls). Imports `ops::control::While`, `ops::batching`,
//! `control::counted_while_loop` (the loop builder), `ir`, `dtype`,
//! `tensor` and `error`.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Graph, ValueId};
use crate::ops::batching::{self, Batched, materialized};
use crate::ops::control::While;
use crate::tensor::Tensor;
use std::cell::Cell;

/// The rule (see the module docs); `None` when the loop cannot be batched
/// without a loop over the examples.
pub(crate) fn batch_while(op: &While, inputs: &[Tensor], batched: &[bool], size: i64) -> Batched {
    let (carry, pred_batched) = batched_carries(op, batched);
    let plan = Plan {
        op,
        inputs,
        batched,
        size,
        carry,
        pred_batched,
        missing: Cell::new(None),
    };
    match plan.run() {
        Err(_) if plan.missing.get().is_some() => None,
        outs => Some(outs),
    }
}

/// Which carries are batched, and whether the condition is.
fn batched_carries(op: &While, batched: &[bool]) -> (Vec<bool>, bool) {
    let carry = op.carries_reached(batched, |_| true);
    let pred_batched = op.cond.reached(&carry, batched, |_| true)[0];
    match pred_batched {
        true => (vec![true; carry.len()], true),
        false => (carry, false),
    }
}

/// What building the batched loop needs.
struct Plan<'a> {
    op: &'a While,
    inputs: &'a [Tensor],
    batched: &'a [bool],
    size: i64,
    /// Which carries are batched in the batched loop.
    carry: Vec<bool>,
    pred_batched: bool,
    /// The op a replay found without a rule (the closures can only return
    /// an error; this tells it apart from a real one).
    missing: Cell<Option<&'static str>>,
}

impl Plan<'_> {
    fn run(&self) -> Result<Vec<(Tensor, bool)>> {
        let n = self.carry.len();
        let mut init: Vec<Tensor> = (0..n)
            .map(|k| match self.carry[k] {
                true => materialized(&self.inputs[k], self.batched[k], self.size),
                false => Ok(self.inputs[k].clone()),
            })
            .collect::<Result<_>>()?;
        let record = self.op.record.map(|slots| Record::new(self, slots));
        if let Some(record) = &record {
            let counter = Tensor::try_scalar(0i32)?;
            init.push(match self.pred_batched {
                true => materialized(&counter, false, self.size)?,
                false => counter,
            });
            init.extend(record.empty_buffers(self.size));
        }
        let trip_count = (!self.pred_batched).then_some(self.op.trip_count).flatten();
        let body_graph = match &record {
            Some(r) => r.body_graph(&self.op.body.graph),
            None => (*self.op.body.graph).clone(),
        };
        let outs = crate::control::counted_while_loop(
            |state: &Vec<Tensor>| self.condition(&state[..n]),
            |state: Vec<Tensor>| self.step(&body_graph, record.as_ref(), state, n),
            init,
            trip_count,
            self.op.hidden_values,
        )?;
        let mut flags = self.carry.clone();
        if let Some(record) = &record {
            flags.push(self.pred_batched);
            flags.extend(&record.batched);
        }
        Ok(outs.into_iter().zip(flags).collect())
    }

    /// The region replayed on the carries `state` (with `self.carry`'s
    /// flags) and its captured inputs.
    fn replay(
        &self,
        region: &crate::ops::control::Region,
        graph: &Graph,
        state: &[Tensor],
    ) -> Result<Vec<(Tensor, bool)>> {
        let mut params: Vec<(Tensor, bool)> =
            state.iter().cloned().zip(self.carry.clone()).collect();
        params.extend(
            region
                .captures
                .iter()
                .map(|&i| (self.inputs[i].clone(), self.batched[i])),
        );
        match batching::replay(graph, params, self.size)? {
            Ok(outs) => Ok(outs),
            Err(op) => {
                self.missing.set(Some(op));
                Err(Error::invalid(
                    "vmap",
                    format!("`{op}` in a loop has no batching rule"),
                ))
            }
        }
    }

    /// Each example's condition: `[B]` bools when batched, else a scalar.
    fn predicate(&self, state: &[Tensor]) -> Result<(Tensor, bool)> {
        let cond = &self.op.cond;
        let mut outs = self.replay(cond, &cond.graph, state)?;
        Ok(outs.remove(0))
    }

    /// The batched loop's condition: any example's.
    fn condition(&self, state: &[Tensor]) -> Result<Tensor> {
        let (pred, pred_batched) = self.predicate(state)?;
        if pred_batched {
            pred.reduce_any(&[], false)
        } else {
            Ok(pred)
        }
    }

    /// One step: the body on every example (the examples whose condition
    /// is false keep their carries), then the record's writes.
    fn step(
        &self,
        body_graph: &Graph,
        record: Option<&Record>,
        state: Vec<Tensor>,
        n: usize,
    ) -> Result<Vec<Tensor>> {
        let carries = &state[..n];
        let mut outs = self.replay(&self.op.body, body_graph, carries)?;
        let residuals = outs.split_off(n);
        let active = match self.pred_batched {
            true => Some(self.predicate(carries)?),
            false => None,
        };
        let mut next = Vec::with_capacity(state.len());
        for ((out, &batched), old) in outs.into_iter().zip(&self.carry).zip(carries) {
            let value = self.carried(out, batched)?;
            next.push(match &active {
                Some(pred) => self.running(pred, old.rank())?.where_(&value, old)?,
                None => value,
            });
        }
        if let Some(record) = record {
            next.extend(record.write(self, &state, carries, residuals, active.as_ref(), n)?);
        }
        Ok(next)
    }

    /// A body result as the carry it becomes: materialized when the carry
    /// is batched.
    fn carried(&self, (t, b): (Tensor, bool), batched: bool) -> Result<Tensor> {
        if b && !batched {
            return Err(Error::invalid(
                "vmap",
                "a loop value came out batched where the loop's analysis found it unbatched",
            ));
        }
        match batched {
            true => materialized(&t, b, self.size),
            false => Ok(t),
        }
    }

    /// Which examples are still running (`pred`, the condition replayed),
    /// shaped `[B, 1, ...]` to select between values of rank `rank`.
    fn running(&self, (pred, pred_batched): &(Tensor, bool), rank: usize) -> Result<Tensor> {
        let pred = materialized(pred, *pred_batched, self.size)?;
        let mut dims = vec![self.size];
        dims.extend(std::iter::repeat_n(1, rank.saturating_sub(1)));
        pred.reshape(&dims)
    }
}

/// The state record of a batched recording loop: the same slots as the
/// op's, one buffer per recorded loop value and residual, batched
/// (`[B, slots, ...]`) when the value is.
struct Record {
    slots: i64,
    /// Which loop values are recorded (`While::recorded_values`).
    recorded: Vec<bool>,
    /// The body values recorded besides them (`While::residuals`).
    residuals: Vec<ValueId>,
    /// Per buffer: whether it is batched.
    batched: Vec<bool>,
    /// Per buffer: one example's `[slots, ...]` dims and dtype.
    types: Vec<(Vec<i64>, DType)>,
}

impl Record {
    fn new(plan: &Plan, slots: i64) -> Record {
        let op = plan.op;
        let recorded = op.recorded_values();
        let residuals = op.residuals();
        let body = &op.body.graph;
        let mut flags = plan.carry.clone();
        flags.extend(op.body.captures.iter().map(|&i| plan.batched[i]));
        let values = batching::batched_values(body, &flags);
        let mut batched = Vec::new();
        let mut types = Vec::new();
        let loop_values = op
            .loop_types
            .iter()
            .zip(&recorded)
            .zip(&plan.carry)
            .filter(|((_, r), _)| **r)
            .map(|((t, _), &b)| (t.clone(), b));
        let residual_values = residuals
            .iter()
            .map(|&v| (body.value_type(v).clone(), values[v.0 as usize]));
        for (t, b) in loop_values.chain(residual_values) {
            let mut dims = vec![slots];
            dims.extend(t.shape.as_known().unwrap_or_default());
            // Examples that stop on different steps fill their own slots.
            batched.push(b || plan.pred_batched);
            types.push((dims, t.dtype));
        }
        Record {
            slots,
            recorded,
            residuals,
            batched,
            types,
        }
    }

    /// The body with the residuals as extra results, after the next
    /// loop values.
    fn body_graph(&self, body: &Graph) -> Graph {
        let mut graph = body.clone();
        let mut results = graph.results().to_vec();
        results.extend(&self.residuals);
        graph.set_results(results);
        graph
    }

    fn empty_buffers(&self, size: i64) -> Vec<Tensor> {
        self.types
            .iter()
            .zip(&self.batched)
            .map(|((dims, dtype), &b)| {
                let mut dims = dims.clone();
                if b {
                    dims.insert(0, size);
                }
                Tensor::zeros(&dims, *dtype)
            })
            .collect()
    }

    /// The trip counter plus one and each buffer with this step's entering
    /// state and residuals in slot `min(j, slots - 1)`, as the op's own
    /// recording body writes them. With a condition per example (`active`,
    /// the replayed condition), each example counts and writes only while
    /// it runs, into its own slot.
    fn write(
        &self,
        plan: &Plan,
        state: &[Tensor],
        carries: &[Tensor],
        residuals: Vec<(Tensor, bool)>,
        active: Option<&(Tensor, bool)>,
        n: usize,
    ) -> Result<Vec<Tensor>> {
        let j = &state[n];
        let slot = j.minimum_scalar(self.slots - 1)?;
        let zero = Tensor::try_scalar(0i32)?;
        let entering = carries
            .iter()
            .zip(&self.recorded)
            .filter(|(_, r)| **r)
            .map(|(t, _)| (t.clone(), true));
        let values = entering.chain(residuals);
        let mut out = vec![match active {
            Some(pred) => j.add(&plan.running(pred, 1)?.cast(DType::I32)?)?,
            None => j.add_scalar(1)?,
        }];
        for (((value, is_batched), &want), buffer) in values.zip(&self.batched).zip(&state[n + 1..])
        {
            // A recorded carry is already as batched as its buffer.
            let value = if want {
                materialized(&value, is_batched, plan.size)?
            } else {
                value
            };
            let axis = i64::from(want);
            let update = value.expand_dims(axis)?;
            let written = match active {
                Some(pred) => {
                    let written = per_example_write(buffer, &update, &slot, plan.size)?;
                    plan.running(pred, buffer.rank())?
                        .where_(&written, buffer)?
                }
                None => {
                    let mut starts = vec![zero.clone(); update.rank()];
                    starts[axis as usize] = slot.clone();
                    buffer.dynamic_update_slice(&update, &starts)?
                }
            };
            out.push(written);
        }
        Ok(out)
    }
}

/// `buffer` (`[B, slots, ...]`) with each example's `update`
/// (`[B, 1, ...]`) written at its own `slot` (`[B]`): the batching rule of
/// `dynamic_update_slice` for a start per example.
fn per_example_write(buffer: &Tensor, update: &Tensor, slot: &Tensor, size: i64) -> Result<Tensor> {
    use crate::ops::OpDef;
    let zero = Tensor::try_scalar(0i32)?;
    let mut inputs = vec![buffer.clone(), update.clone(), slot.clone()];
    inputs.extend(std::iter::repeat_n(zero, buffer.rank() - 2));
    let mut batched = vec![true, true, true];
    batched.extend(std::iter::repeat_n(false, buffer.rank() - 2));
    let op = crate::ops::Op::DynamicUpdateSlice(crate::ops::indexing::DynamicUpdateSlice);
    let rule = op
        .batch(&inputs, &batched, size)
        .ok_or_else(|| Error::invalid("vmap", "dynamic_update_slice lost its batching rule"))?;
    Ok(rule?.remove(0).0)
}
