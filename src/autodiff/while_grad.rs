//! The gradient of a `while` loop: a backward loop that walks the forward
//! iterations in reverse, applying the body's vector-Jacobian product (the
//! body region replayed under a tape) at the state that entered each one.
//!
//! Layer: autodiff (imports `ops::control::While`, the record's layout in
//! `ops::while_record`, `autodiff::while_rows`, `region_gradients_with`,
//! `control::{while_loop, cond}`, `tensor`).
//!
//! The states are the expensive part: the forward `while` keeps only its
//! last one and XLA needs static buffer sizes. A loop traced under a
//! recording tape therefore records them itself (`While::record`): each
//! iteration writes its entering state, and the results of its body's
//! dots and convolutions (`While::residuals`, which the replay then takes
//! instead of multiplying again), into a slot of per-value buffers. When
//! the budget allows without losing slots, the outputs of its `tanh`,
//! `sigmoid`, `exp` and `sqrt` too, as `lax.scan` keeps them: their
//! gradient reads them, and a second reader keeps XLA's CPU compiler from
//! fusing a whole recurrent cell into one scalar kernel (a bidirectional
//! GRU's step went from 5.5-6.1 ms to 4.1-4.9 ms). Values
//! the body only writes into (a `TensorArray` of outputs) are not
//! recorded, and their cotangent stays loop-invariant (`while_rows`).
//! Three plans, cheapest first:
//!
//! 1. **Stored, static count** (a `for_range` over host-known bounds, the
//!    loop's `trip_count`, and every state fits the memory budget): the
//!    forward loop records the `T` states into `[T, ...]` buffers and the
//!    backward loop reads state `k` from them. One forward and one
//!    backward loop, as `jax.lax.scan`.
//! 2. **Stored, dynamic count** (the count is known only on the device):
//!    the forward loop records the first `K` states (`K` slots fit the
//!    budget; later states go to one spare slot) and counts its trips. If
//!    the count is at most `K` the backward loop reads them as in plan 1;
//!    otherwise a `cond` takes plan 3.
//! 3. **Checkpointed**: every `ceil(T / K)`-th state is kept, and each
//!    backward step recomputes its state from the checkpoint before it:
//!    about `T * ceil(T / K) / 2` body runs instead of `T^2 / 2`, within
//!    the budget however long the loop runs. States whose shape is not
//!    fully known at trace time are recomputed from the initial values.
//!
//! A loop traced without a tape (its gradient taken later, or a loaded
//! export) records nothing; its gradient runs the recording loop itself.
//!
//! The gradient is written in the tensor language, so a tape around it
//! differentiates it again (Hessians, HVPs, nested tapes). Its backward
//! loop reads the record, an output of the forward op: the record's
//! cotangents come back to the forward op's gradient, which adds each
//! slot's to the iteration that wrote it (`RecordCotangents`).

use super::while_rows::{RowWrite, row_writes};
use crate::dtype::DType;
use crate::error::Result;
use crate::ir::{Graph, ValueId};
use crate::ops::control::While;
use crate::ops::while_record::budget_slots;
use crate::tensor::Tensor;
use std::cell::OnceCell;
use std::collections::HashMap;

/// One `while` op's gradient computation: which loop values and captured
/// values are differentiable, and how to rerun the body and condition.
pub(super) struct LoopGradient<'a> {
    op: &'a While,
    inputs: &'a [Tensor],
    /// Loop values with a float dtype (the others get no gradient).
    float_vars: Vec<usize>,
    /// Node inputs captured by the body with a float dtype, each once.
    float_caps: Vec<usize>,
    /// Per loop value, how the body fills it row by row, if it does (see
    /// `while_rows`): its gradient carries a mask of claimed rows instead.
    rows: Vec<Option<RowWrite>>,
    /// The body with each row write's update and start index as extra
    /// results after the loop values; `None` when there are no row writes
    /// (the op's own body is used).
    body: Option<Graph>,
    /// The cotangents of the row-written values' final values.
    row_cotangents: OnceCell<Vec<Option<Tensor>>>,
    zero: Tensor,
}

/// Gradients being carried backward: of the float loop values, and the
/// sums so far for the float captured values.
type Carried = (Vec<Tensor>, Vec<Tensor>);

impl<'a> LoopGradient<'a> {
    /// `needed` says which node inputs want a gradient: a captured value
    /// that does not (a model's input data) is not accumulated at all.
    pub(super) fn new(
        op: &'a While,
        inputs: &'a [Tensor],
        needed: &[bool],
    ) -> Result<LoopGradient<'a>> {
        let n = op.loop_types.len();
        let float_vars = (0..n).filter(|&i| inputs[i].dtype().is_inexact()).collect();
        let mut float_caps: Vec<usize> = Vec::new();
        for &i in &op.body.captures {
            if inputs[i].dtype().is_inexact()
                && needed.get(i).copied().unwrap_or(true)
                && !float_caps
                    .iter()
                    .any(|&j| inputs[j].key() == inputs[i].key())
            {
                float_caps.push(i);
            }
        }
        let kept = op.recorded_values();
        let candidates: Vec<bool> = (0..n)
            .map(|i| !kept[i] && inputs[i].dtype().is_float())
            .collect();
        let rows = row_writes(&op.body.graph, &candidates);
        // A recording loop's residuals follow the row writes as results, so
        // that their record's cotangents (a gradient of the gradient) can
        // weigh them.
        let residuals = match op.record {
            Some(_) => op.residuals(),
            None => Vec::new(),
        };
        // Only a body with row writes or residuals needs a copy with extra
        // results.
        let body = (rows.iter().any(Option::is_some) || !residuals.is_empty()).then(|| {
            let mut body = (*op.body.graph).clone();
            let mut results = body.results().to_vec();
            results.extend(rows.iter().flatten().flat_map(|w| [w.update, w.start]));
            results.extend(&residuals);
            body.set_results(results);
            body
        });
        Ok(LoopGradient {
            op,
            inputs,
            float_vars,
            float_caps,
            rows,
            body,
            row_cotangents: OnceCell::new(),
            zero: Tensor::fill(&[], 0, DType::I32)?,
        })
    }

    /// The gradients of every node input (loop values, then captures).
    pub(super) fn run(
        &self,
        outputs: &[Tensor],
        grads: &[Option<Tensor>],
    ) -> Result<Vec<Option<Tensor>>> {
        let init = self.init();
        let finals: Vec<Option<Tensor>> = (0..self.op.loop_types.len())
            .map(|i| match &self.rows[i] {
                Some(_) => grads[i]
                    .clone()
                    .map_or_else(|| outputs[i].zeros_like(), Ok)
                    .map(Some),
                None => Ok(None),
            })
            .collect::<Result<_>>()?;
        let _ = self.row_cotangents.set(finals);
        let g_vars: Vec<Tensor> = self
            .float_vars
            .iter()
            .map(|&i| match &self.rows[i] {
                Some(w) => w.empty_mask(self.inputs[i].dtype()),
                None => grads[i].clone().map_or_else(|| outputs[i].zeros_like(), Ok),
            })
            .collect::<Result<_>>()?;
        let g_caps: Vec<Tensor> = self
            .float_caps
            .iter()
            .map(|&i| self.inputs[i].zeros_like())
            .collect::<Result<_>>()?;
        let carried = (g_vars, g_caps);
        let n = self.op.loop_types.len();
        let kept = self.op.recorded_values();
        let finals = &outputs[..n];
        let recorded = self.op.record.map(|slots| {
            let count = kept.iter().filter(|&&r| r).count();
            let residuals = self.op.residuals();
            let first = n + 1 + count;
            let stored = Stored {
                trips: outputs[n].clone(),
                buffers: outputs[n + 1..first].to_vec(),
                kept: kept.clone(),
                finals: finals.to_vec(),
                residuals: residuals
                    .into_iter()
                    .zip(outputs[first..].iter().cloned())
                    .collect(),
            };
            (slots, stored)
        });
        let (g_vars, g_caps) = match (recorded, state_slots(&init)?, self.op.trip_count) {
            (Some((slots, stored)), _, Some(trips)) if slots == trips.max(1) => {
                let record = RecordCotangents::new(self.op, grads, &kept, None);
                let trips = Tensor::fill(&[], trips, DType::I32)?;
                let state_at = |k: &Tensor| stored.state(k, &self.zero);
                self.backward(&trips, carried, &state_at, record.as_ref())?
            }
            (Some((slots, stored)), _, _) => {
                let record = RecordCotangents::new(self.op, grads, &kept, Some(slots - 1));
                self.stored_or_checkpointed(&init, stored, slots - 1, carried, record.as_ref())?
            }
            (None, Some(slots), Some(trips)) if trips <= slots => {
                let stored = self.record_states(&init, finals, &kept, trips.max(1))?;
                let trips = Tensor::fill(&[], trips, DType::I32)?;
                self.backward(&trips, carried, &|k| stored.state(k, &self.zero), None)?
            }
            (None, Some(slots), Some(trips)) => {
                let trips = Tensor::fill(&[], trips, DType::I32)?;
                self.checkpointed(&init, &trips, slots, carried, None)?
            }
            (None, Some(slots), None) => {
                let stored = self.record_states(&init, finals, &kept, slots + 1)?;
                self.stored_or_checkpointed(&init, stored, slots, carried, None)?
            }
            (None, None, _) => {
                let trips = self.count_trips(&init)?;
                let state_at =
                    |k: &Tensor| Ok((self.run_from(&self.zero, init.clone(), k)?, Provided::new()));
                self.backward(&trips, carried, &state_at, None)?
            }
        };
        let mut out = vec![None; self.inputs.len()];
        for (&slot, g) in self.float_vars.iter().zip(g_vars) {
            out[slot] = Some(match &self.rows[slot] {
                Some(w) => w.initial_cotangent(&self.row_cotangent(slot), &g)?,
                None => g,
            });
        }
        for (&slot, g) in self.float_caps.iter().zip(g_caps) {
            out[slot] = Some(g);
        }
        Ok(out)
    }

    /// Plan 2: the states `stored` recorded, of which the first `capacity`
    /// are exact; plan 3 on the device when the loop ran more often.
    fn stored_or_checkpointed(
        &self,
        init: &[Tensor],
        stored: Stored,
        capacity: i64,
        carried: Carried,
        record: Option<&RecordCotangents>,
    ) -> Result<Carried> {
        let trips = stored.trips.clone();
        let fits = trips.le(&Tensor::fill(&[], capacity, DType::I32)?)?;
        crate::control::cond(
            &fits,
            || -> Result<Carried> {
                let state_at = |k: &Tensor| stored.state(k, &self.zero);
                self.backward(&trips, carried.clone(), &state_at, record)
            },
            || self.checkpointed(init, &trips, capacity.max(2), carried.clone(), record),
        )
    }

    /// Plan 3 with `slots` checkpoints.
    fn checkpointed(
        &self,
        init: &[Tensor],
        trips: &Tensor,
        slots: i64,
        carried: Carried,
        record: Option<&RecordCotangents>,
    ) -> Result<Carried> {
        let checkpoints = Checkpoints::record(self, init, trips, slots)?;
        let state_at = |k: &Tensor| {
            let (from, start) = checkpoints.before(k, &self.zero)?;
            Ok((self.run_from(&from, start, k)?, Provided::new()))
        };
        self.backward(trips, carried, &state_at, record)
    }

    fn init(&self) -> Vec<Tensor> {
        self.inputs[..self.op.loop_types.len()].to_vec()
    }

    fn run_body(&self, state: &[Tensor]) -> Result<Vec<Tensor>> {
        let mut args: Vec<&Tensor> = state.iter().collect();
        args.extend(self.op.body.captures.iter().map(|&i| &self.inputs[i]));
        crate::tensor::recompute(&self.op.body.graph, &args)
    }

    fn run_cond(&self, state: &[Tensor]) -> Result<Tensor> {
        let mut args: Vec<&Tensor> = state.iter().collect();
        args.extend(self.op.cond.captures.iter().map(|&i| &self.inputs[i]));
        Ok(crate::tensor::recompute(&self.op.cond.graph, &args)?.remove(0))
    }

    /// How many times the loop runs from `init` (plan 3 without stored
    /// states).
    fn count_trips(&self, init: &[Tensor]) -> Result<Tensor> {
        let (trips, _) = crate::control::while_loop(
            |(_, s): &(Tensor, Vec<Tensor>)| self.run_cond(s),
            |(i, s): (Tensor, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>)> {
                Ok((i.add_scalar(1)?, self.run_body(&s)?))
            },
            (self.zero.clone(), init.to_vec()),
        )?;
        Ok(trips)
    }

    /// The state entering iteration `k`, by running the body from the
    /// state entering iteration `from`.
    fn run_from(&self, from: &Tensor, start: Vec<Tensor>, k: &Tensor) -> Result<Vec<Tensor>> {
        let (_, state) = crate::control::while_loop(
            |(j, _): &(Tensor, Vec<Tensor>)| j.lt(k),
            |(j, s): (Tensor, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>)> {
                Ok((j.add_scalar(1)?, self.run_body(&s)?))
            },
            (from.clone(), start),
        )?;
        Ok(state)
    }

    /// Runs the loop to its end, counting trips and writing the state that
    /// enters iteration `j` into slot `min(j, slots - 1)` of `[slots, ...]`
    /// buffers: with a static count `slots` is the count (at least one, so
    /// that the buffers are valid when the loop never runs); otherwise the
    /// last slot is a spare that takes every state past the others, so no
    /// write needs a branch.
    /// Only the `kept` loop values are recorded; `finals` (the loop's
    /// results) stand in for the others.
    fn record_states(
        &self,
        init: &[Tensor],
        finals: &[Tensor],
        kept: &[bool],
        slots: i64,
    ) -> Result<Stored> {
        let buffers = new_buffers(&only_kept(init, kept), slots)?;
        let last = Tensor::fill(&[], slots - 1, DType::I32)?;
        let (trips, _, buffers) = crate::control::while_loop(
            |(_, s, _): &(Tensor, Vec<Tensor>, Vec<Tensor>)| self.run_cond(s),
            |(j, s, b): (Tensor, Vec<Tensor>, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>, Vec<Tensor>)> {
                let b = write_slot(&b, &only_kept(&s, kept), &j.minimum(&last)?, &self.zero)?;
                Ok((j.add_scalar(1)?, self.run_body(&s)?, b))
            },
            (self.zero.clone(), init.to_vec(), buffers),
        )?;
        Ok(Stored {
            trips,
            buffers,
            kept: kept.to_vec(),
            finals: finals.to_vec(),
            residuals: Vec::new(),
        })
    }

    /// The backward loop over `trips` iterations, last first; `state_at(k)`
    /// gives the state that entered iteration `k`, and `record` the
    /// cotangents of the forward loop's own record of it, if any.
    fn backward(
        &self,
        trips: &Tensor,
        carried: Carried,
        state_at: &StateAt<'_>,
        record: Option<&RecordCotangents>,
    ) -> Result<Carried> {
        let (_, g_vars, g_caps) = crate::control::while_loop(
            |(k, _, _): &(Tensor, Vec<Tensor>, Vec<Tensor>)| k.gt_scalar(0),
            |(k, g_vars, g_caps): (Tensor, Vec<Tensor>, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>, Vec<Tensor>)> {
                let k = k.sub_scalar(1)?;
                let (state, provided) = state_at(&k)?;
                let at_k = match record {
                    Some(r) => r.at(&k, trips, &self.zero)?,
                    None => SlotCotangents::default(),
                };
                let (g_vars, g_caps) =
                    self.step_back(state, &provided, &g_vars, &g_caps, &at_k)?;
                Ok((k, g_vars, g_caps))
            },
            (trips.clone(), carried.0, carried.1),
        )?;
        Ok((g_vars, g_caps))
    }

    /// The cotangent of row-written loop value `slot`'s final value.
    fn row_cotangent(&self, slot: usize) -> Tensor {
        self.row_cotangents
            .get()
            .and_then(|g| g[slot].clone())
            .expect("set by run")
    }

    /// One iteration's vector-Jacobian product at `state`. `g_vars` holds,
    /// for a row-written value, its mask of claimed rows.
    fn step_back(
        &self,
        state: Vec<Tensor>,
        provided: &Provided,
        g_vars: &[Tensor],
        g_caps: &[Tensor],
        recorded: &SlotCotangents,
    ) -> Result<Carried> {
        let n = self.op.loop_types.len();
        let plain: Vec<usize> = (0..self.float_vars.len())
            .filter(|&k| self.rows[self.float_vars[k]].is_none())
            .collect();
        let mut wrt: Vec<Tensor> = plain
            .iter()
            .map(|&k| state[self.float_vars[k]].clone())
            .collect();
        wrt.extend(self.float_caps.iter().map(|&i| self.inputs[i].clone()));
        let mut region_inputs = state;
        region_inputs.extend(
            self.op
                .body
                .captures
                .iter()
                .map(|&i| self.inputs[i].clone()),
        );
        // Row writes, in the order of the body's extra results.
        let writes: Vec<(usize, &RowWrite)> = self
            .float_vars
            .iter()
            .enumerate()
            .filter_map(|(k, &slot)| self.rows[slot].as_ref().map(|w| (k, w)))
            .collect();
        let weights = |outs: &[Tensor]| -> Result<Vec<Option<Tensor>>> {
            let mut weights: Vec<Option<Tensor>> = vec![None; outs.len()];
            for &k in &plain {
                weights[self.float_vars[k]] = Some(g_vars[k].clone());
            }
            for (e, &(k, w)) in writes.iter().enumerate() {
                let g = self.row_cotangent(self.float_vars[k]);
                let start = &outs[n + 2 * e + 1];
                weights[n + 2 * e] = Some(w.update_cotangent(&g, &g_vars[k], start)?);
            }
            let first_residual = n + 2 * writes.len();
            for (r, g) in recorded.residuals.iter().enumerate() {
                weights[first_residual + r] = g.clone();
            }
            Ok(weights)
        };
        let (outs, step) = crate::autodiff::region_gradients_with(
            self.body.as_ref().unwrap_or(&self.op.body.graph),
            &region_inputs,
            provided,
            &wrt,
            &weights,
        )?;
        let (plain_steps, cap_steps) = step.split_at(plain.len());
        let mut new_vars = g_vars.to_vec();
        for (&k, g) in plain.iter().zip(plain_steps) {
            // The state entering this iteration was also recorded: its
            // slot's cotangent adds to what the body sends back.
            new_vars[k] = match recorded.states.get(self.float_vars[k]) {
                Some(Some(slot)) => g.add(slot)?,
                _ => g.clone(),
            };
        }
        for (e, &(k, w)) in writes.iter().enumerate() {
            new_vars[k] = w.claim(&g_vars[k], &outs[n + 2 * e + 1])?;
        }
        let caps = g_caps
            .iter()
            .zip(cap_steps)
            .map(|(a, b)| a.add(b))
            .collect::<Result<_>>()?;
        Ok((new_vars, caps))
    }
}

/// Body values known without running the body again.
type Provided = HashMap<ValueId, Tensor>;

/// The cotangents of a recording loop's record (`While::record`): its
/// buffers of states and residuals are outputs of the forward op, which a
/// gradient of the gradient reads (the first gradient's backward loop
/// computes from them) and so sends cotangents to. Slot `j` of a buffer
/// holds what iteration `j` entered with or computed, so the backward
/// loop adds slot `k`'s cotangent at iteration `k`: to the state's
/// cotangent, and as a weight on the residual's body value. Without this a
/// second derivative through a loop keeps only its path through captured
/// values.
struct RecordCotangents {
    /// Per loop value (all of them, in order): its buffer's cotangent,
    /// for a recorded float value that has one.
    states: Vec<Option<Tensor>>,
    /// Per residual (`While::residuals`' order): its buffer's cotangent.
    residuals: Vec<Option<Tensor>>,
    /// The spare last slot of a record whose count is known only on the
    /// device: it holds what the last iteration wrote, so only the last
    /// iteration past it takes its cotangent.
    spare: Option<i64>,
}

/// The record's cotangents for one iteration (see [`RecordCotangents`]).
#[derive(Default)]
struct SlotCotangents {
    states: Vec<Option<Tensor>>,
    residuals: Vec<Option<Tensor>>,
}

impl RecordCotangents {
    /// From the forward op's output cotangents `grads` (loop values, the
    /// trip count, the kept states' buffers, the residuals' buffers);
    /// `None` when none of the record's has one (a first derivative).
    fn new(
        op: &While,
        grads: &[Option<Tensor>],
        kept: &[bool],
        spare: Option<i64>,
    ) -> Option<RecordCotangents> {
        let n = op.loop_types.len();
        let record = grads.get(n + 1..)?;
        if record.iter().all(Option::is_none) {
            return None;
        }
        let mut buffers = record.iter();
        let states = kept
            .iter()
            .map(|&k| match k {
                true => buffers.next().cloned().flatten(),
                false => None,
            })
            .collect();
        Some(RecordCotangents {
            states,
            residuals: buffers.cloned().collect(),
            spare,
        })
    }

    /// The cotangents of the slots iteration `k` (of `trips`) wrote.
    fn at(&self, k: &Tensor, trips: &Tensor, zero: &Tensor) -> Result<SlotCotangents> {
        let (slot, mask) = match self.spare {
            None => (k.clone(), None),
            Some(spare) => {
                let spare = Tensor::fill(&[], spare, DType::I32)?;
                let last = k.eq(&trips.sub_scalar(1)?)?;
                (k.minimum(&spare)?, Some(k.lt(&spare)?.logical_or(&last)?))
            }
        };
        let read = |buffers: &[Option<Tensor>]| -> Result<Vec<Option<Tensor>>> {
            buffers
                .iter()
                .map(|b| {
                    let Some(b) = b else { return Ok(None) };
                    let g = read_slot(std::slice::from_ref(b), &slot, zero)?.remove(0);
                    match &mask {
                        Some(m) => Ok(Some(m.where_(&g, &g.zeros_like()?)?)),
                        None => Ok(Some(g)),
                    }
                })
                .collect()
        };
        Ok(SlotCotangents {
            states: read(&self.states)?,
            residuals: read(&self.residuals)?,
        })
    }
}

/// The state that entered iteration `k`, and the body values known for it.
type StateAt<'a> = dyn Fn(&Tensor) -> Result<(Vec<Tensor>, Provided)> + 'a;

/// States recorded by a forward run, and its trip count.
struct Stored {
    trips: Tensor,
    /// One buffer per kept loop value.
    buffers: Vec<Tensor>,
    kept: Vec<bool>,
    /// The loop's results, standing in for the values not kept.
    finals: Vec<Tensor>,
    /// Body values recorded per iteration (`While::residuals`), each with
    /// its buffer.
    residuals: Vec<(ValueId, Tensor)>,
}

impl Stored {
    /// The state that entered iteration `k`, and the body values that
    /// iteration recorded.
    fn state(&self, k: &Tensor, zero: &Tensor) -> Result<(Vec<Tensor>, Provided)> {
        let mut read = read_slot(&self.buffers, k, zero)?.into_iter();
        let state = self
            .kept
            .iter()
            .zip(&self.finals)
            .map(|(&kept, last)| match kept {
                true => Ok(read.next().expect("one buffer per kept value")),
                false => Ok(last.clone()),
            })
            .collect::<Result<_>>()?;
        let (ids, buffers): (Vec<ValueId>, Vec<Tensor>) = self.residuals.iter().cloned().unzip();
        let values = read_slot(&buffers, k, zero)?;
        Ok((state, ids.into_iter().zip(values).collect()))
    }
}

/// The values of `state` that `kept` marks.
fn only_kept(state: &[Tensor], kept: &[bool]) -> Vec<Tensor> {
    state
        .iter()
        .zip(kept)
        .filter(|(_, k)| **k)
        .map(|(t, _)| t.clone())
        .collect()
}

/// Every `stride`-th state of a loop's forward run (plan 3), in buffers
/// with a leading slot dimension (one buffer per loop value).
struct Checkpoints {
    buffers: Vec<Tensor>,
    stride: Tensor,
}

impl Checkpoints {
    /// Runs the loop from `init` for `trips` iterations, keeping every
    /// `ceil(trips / slots)`-th state.
    fn record(
        grad: &LoopGradient<'_>,
        init: &[Tensor],
        trips: &Tensor,
        slots: i64,
    ) -> Result<Checkpoints> {
        let zero = &grad.zero;
        let stride = trips
            .add_scalar(slots - 1)?
            .floordiv_scalar(slots)?
            .maximum_scalar(1)?;
        let buffers = new_buffers(init, slots)?;
        let (_, _, buffers) = crate::control::while_loop(
            |(c, _, _): &(Tensor, Vec<Tensor>, Vec<Tensor>)| c.mul(&stride)?.lt(trips),
            |(c, state, buffers): (Tensor, Vec<Tensor>, Vec<Tensor>)| -> Result<(Tensor, Vec<Tensor>, Vec<Tensor>)> {
                let buffers = write_slot(&buffers, &state, &c, zero)?;
                let from = c.mul(&stride)?;
                let to = from.add(&stride)?.minimum(trips)?;
                let state = grad.run_from(&from, state, &to)?;
                Ok((c.add_scalar(1)?, state, buffers))
            },
            (zero.clone(), init.to_vec(), buffers),
        )?;
        Ok(Checkpoints { buffers, stride })
    }

    /// The checkpoint at or before iteration `k`: its iteration number and
    /// the state entering it.
    fn before(&self, k: &Tensor, zero: &Tensor) -> Result<(Tensor, Vec<Tensor>)> {
        let slot = k.floordiv(&self.stride)?;
        Ok((
            slot.mul(&self.stride)?,
            read_slot(&self.buffers, &slot, zero)?,
        ))
    }
}

/// Zero buffers of `[slots, ...]` for each loop value of `state`.
fn new_buffers(state: &[Tensor], slots: i64) -> Result<Vec<Tensor>> {
    state
        .iter()
        .map(|t| {
            let mut dims = vec![slots];
            dims.extend(t.dims());
            Tensor::fill(&dims, 0, t.dtype())
        })
        .collect()
}

/// `buffers` with `state` written into slot `slot`.
fn write_slot(
    buffers: &[Tensor],
    state: &[Tensor],
    slot: &Tensor,
    zero: &Tensor,
) -> Result<Vec<Tensor>> {
    buffers
        .iter()
        .zip(state)
        .map(|(b, x)| {
            let mut one = vec![1];
            one.extend(x.dims());
            b.dynamic_update_slice(&x.reshape(&one)?, &slot_starts(slot, zero, x.rank()))
        })
        .collect()
}

/// The state held in slot `slot` of `buffers`.
fn read_slot(buffers: &[Tensor], slot: &Tensor, zero: &Tensor) -> Result<Vec<Tensor>> {
    buffers
        .iter()
        .map(|b| {
            let dims = b.dims()[1..].to_vec();
            let mut sizes = vec![1];
            sizes.extend(&dims);
            b.dynamic_slice(&slot_starts(slot, zero, dims.len()), &sizes)?
                .reshape(&dims)
        })
        .collect()
}

/// `[slot, 0, 0, ...]`: the start of one slot of a state buffer.
fn slot_starts(slot: &Tensor, zero: &Tensor, rank: usize) -> Vec<Tensor> {
    std::iter::once(slot.clone())
        .chain(std::iter::repeat_n(zero.clone(), rank))
        .collect()
}

/// How many states of the loop fit in the budget (`None`: below two, or a
/// shape not fully known).
fn state_slots(state: &[Tensor]) -> Result<Option<i64>> {
    let shapes: Option<Vec<(Vec<i64>, DType)>> = state
        .iter()
        .map(|t| Some((t.shape().as_known()?, t.dtype())))
        .collect();
    match shapes {
        Some(shapes) => budget_slots(&shapes),
        None => Ok(None),
    }
}
