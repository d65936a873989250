//! Running a concrete function: gathering argument, capture and variable
//! buffers, the compile cache of specializations, execution, and writing
//! variable updates back. Inside another trace, the graph is inlined
//! instead, with variable reads and writes replayed in the caller's
//! trace. Under an eager gradient tape the call runs compiled and is
//! recorded as one `call` op with a compiled backward function.

use super::concrete::{ConcreteCore, SpecializationKey};
use crate::dtype::ArraySpec;
use crate::error::Result;
use crate::ir::Graph;
use crate::lower;
use crate::ops::Op;
use crate::ops::control::Call;
use crate::runtime::{Buffer, Client, CompileOptions, Device, Executable, ProgramTraits, recycle};
use crate::tensor::Tensor;
use crate::trace::{self, CaptureSource};
use crate::variable::{Variable, VariableInner};
use std::sync::atomic::Ordering;
use std::sync::{Arc, MutexGuard};

impl ConcreteCore {
    /// Runs (or, inside a trace, inlines) the graph on flat argument tensors
    /// and the call's distinct variable arguments.
    pub(crate) fn call_flat(&self, args: &[Tensor], var_args: &[Variable]) -> Result<Vec<Tensor>> {
        // Inside a trace the graph is inlined. Under a recording
        // gradient tape the call runs compiled and is recorded as one op.
        if trace::is_tracing() {
            return self.inline(args, var_args);
        }
        if self.is_sharded_call(args, var_args) {
            if crate::tensor::hooks::recording() {
                return Err(crate::error::Error::Value(format!(
                    "function '{}' runs sharded over a mesh, which an eager gradient tape cannot \
                     record: take the gradient inside the function (XLA partitions it too)",
                    self.name
                )));
            }
            return self.call_sharded(args, var_args);
        }
        if !self.jit_compile {
            // `jit_compile(false)`: the same graph, op by op through the
            // eager op cache (a tape records each op as it runs).
            return self.with_locked_variables(args, var_args, |inputs| {
                let refs: Vec<&Tensor> = inputs.iter().collect();
                crate::tensor::replay(&self.graph, &refs)
            });
        }
        if crate::tensor::hooks::recording() {
            return self.call_on_tape(args, var_args);
        }
        // Lock every variable the call reads or writes, in id order, from
        // reading its buffer until its new value is written back.
        let vars = self.variables(var_args)?;
        let mut guards = lock_all(&vars)?;
        let slot = |v: &Arc<VariableInner>| slot_of(&vars, v);
        let mut outs = {
            let mut buffers: Vec<&Buffer> = Vec::with_capacity(args.len() + self.captures.len());
            for t in args {
                buffers.push(t.buffer()?);
            }
            let mut non_donatable = Vec::new();
            for c in &self.captures {
                match &c.source {
                    CaptureSource::Eager(b) => buffers.push(b),
                    CaptureSource::Outer(t) | CaptureSource::Sharded(t) => {
                        buffers.push(t.buffer()?)
                    }
                    CaptureSource::Variable(r) => {
                        let guard = &guards[slot(&r.resolve(var_args, &self.name)?)];
                        let shared = guard.shared_buffer()?;
                        // Another tensor still holds this value: update it
                        // into fresh memory rather than in place.
                        if Arc::strong_count(shared) > 1 {
                            non_donatable.push(buffers.len() as i64);
                        }
                        buffers.push(shared);
                    }
                }
            }
            let placement =
                crate::tensor::place(&buffers, &|| format!("function '{}'", self.name))?;
            let mut copies = Vec::new();
            let buffers = crate::tensor::gather_on(&buffers, placement.device, &mut copies)?;
            let exe = self.executable_for(&buffers, placement.device)?;
            let outs = exe.execute_with(&buffers, &non_donatable)?;
            outs.into_iter()
                .map(|b| b.with_committed(placement.committed))
                .collect::<Vec<_>>()
        };
        for (r, result) in self.updates.iter().rev() {
            let var = r.resolve(var_args, &self.name)?;
            let value = outs.remove(*result);
            *guards[slot(&var)] = Tensor::from_buffer(value);
        }
        drop(guards);
        Ok(outs.into_iter().map(Tensor::from_buffer).collect())
    }

    /// The variables this call reads or assigns, sorted by id; an error if
    /// a captured one was dropped.
    pub(super) fn variables(&self, var_args: &[Variable]) -> Result<Vec<Arc<VariableInner>>> {
        let read = self.captures.iter().filter_map(|c| match &c.source {
            CaptureSource::Variable(r) => Some(r),
            _ => None,
        });
        let written = self.updates.iter().map(|(r, _)| r);
        let mut vars: Vec<Arc<VariableInner>> = read
            .chain(written)
            .map(|r| r.resolve(var_args, &self.name))
            .collect::<Result<_>>()?;
        vars.sort_by_key(|v| v.id);
        vars.dedup_by_key(|v| v.id);
        Ok(vars)
    }

    pub(super) fn capture_buffers(&self, var_args: &[Variable]) -> Result<Vec<Arc<Buffer>>> {
        self.captures
            .iter()
            .map(|c| match &c.source {
                CaptureSource::Eager(b) => Ok(b.clone()),
                CaptureSource::Outer(t) | CaptureSource::Sharded(t) => t
                    .eager_buffer()
                    .ok_or_else(|| trace::out_of_scope_tensor(t)),
                CaptureSource::Variable(r) => Ok(r
                    .resolve(var_args, &self.name)?
                    .lock()
                    .shared_buffer()?
                    .clone()),
            })
            .collect()
    }

    /// The values the captures feed in: variables are read (so a tape
    /// sees the reads), other captures as they are.
    fn capture_values(&self, var_args: &[Variable]) -> Result<Vec<Tensor>> {
        self.captures
            .iter()
            .map(|c| match &c.source {
                CaptureSource::Variable(r) => {
                    Variable::from_inner(r.resolve(var_args, &self.name)?).try_read()
                }
                _ => Ok(trace::capture_inputs(std::slice::from_ref(c))?.remove(0)),
            })
            .collect()
    }

    /// Writes the variable updates among `outs` and keeps the function's
    /// own outputs.
    fn finish_outputs(&self, mut outs: Vec<Tensor>, var_args: &[Variable]) -> Result<Vec<Tensor>> {
        for (r, result) in &self.updates {
            Variable::from_inner(r.resolve(var_args, &self.name)?).assign(&outs[*result])?;
        }
        outs.truncate(self.num_outputs);
        Ok(outs)
    }

    fn inline(&self, args: &[Tensor], var_args: &[Variable]) -> Result<Vec<Tensor>> {
        let captured = self.capture_values(var_args)?;
        // An argument less specific than the traced parameter (bound to an
        // input_signature while tracing) is checked to have its shape.
        let args: Vec<Tensor> = args
            .iter()
            .zip(self.graph.param_types())
            .map(|(a, p)| match p.shape.dims() {
                Some(dims) if !crate::ir::shape_is_subtype(&a.shape(), &p.shape) => {
                    a.ensure_shape(dims)
                }
                _ => Ok(a.clone()),
            })
            .collect::<Result<_>>()?;
        let inputs: Vec<&Tensor> = args.iter().chain(&captured).collect();
        let outs = crate::tensor::replay(&self.graph, &inputs)?;
        self.finish_outputs(outs, var_args)
    }

    /// Under an eager gradient tape: runs the compiled program and records
    /// the whole call as one op, whose gradient is a compiled backward
    /// function (TensorFlow records a function call the same way). The
    /// variables are locked from their reads to the write-back, as in
    /// `call_flat`, so concurrent taped calls never lose updates.
    fn call_on_tape(&self, args: &[Tensor], var_args: &[Variable]) -> Result<Vec<Tensor>> {
        self.with_locked_variables(args, var_args, |inputs| {
            let buffers: Vec<&Buffer> = inputs.iter().map(Tensor::buffer).collect::<Result<_>>()?;
            let placement =
                crate::tensor::place(&buffers, &|| format!("function '{}'", self.name))?;
            let mut copies = Vec::new();
            let buffers = crate::tensor::gather_on(&buffers, placement.device, &mut copies)?;
            let exe = self.executable_for(&buffers, placement.device)?;
            // The tape keeps every input, so none may be donated to a result.
            let keep: Vec<i64> = (0..buffers.len() as i64).collect();
            let outs: Vec<Tensor> = exe
                .execute_with(&buffers, &keep)?
                .into_iter()
                .map(|b| Tensor::from_buffer(b.with_committed(placement.committed)))
                .collect();
            let refs: Vec<&Tensor> = inputs.iter().collect();
            if let Some(recorder) = crate::tensor::hooks::recorder() {
                (recorder.record_op)(&self.tape_op()?, &refs, &outs[..self.num_outputs]);
            }
            Ok(outs)
        })
    }

    /// Runs `run` on the call's inputs (the arguments, then the captured
    /// values) with every variable it reads or writes locked, in id order,
    /// from its read to the write-back of the updates among the results;
    /// returns the function's own outputs. A recording tape sees the
    /// variable reads.
    fn with_locked_variables(
        &self,
        args: &[Tensor],
        var_args: &[Variable],
        run: impl FnOnce(&[Tensor]) -> Result<Vec<Tensor>>,
    ) -> Result<Vec<Tensor>> {
        let vars = self.variables(var_args)?;
        let mut guards = lock_all(&vars)?;
        let mut inputs: Vec<Tensor> = args.to_vec();
        for c in &self.captures {
            inputs.push(match &c.source {
                CaptureSource::Variable(r) => {
                    let var = r.resolve(var_args, &self.name)?;
                    let value = guards[slot_of(&vars, &var)].clone();
                    // The tape watches variables through their reads.
                    if let Some(recorder) = crate::tensor::hooks::recorder() {
                        (recorder.record_variable_read)(var.id, &value);
                    }
                    value
                }
                _ => trace::capture_inputs(std::slice::from_ref(c))?.remove(0),
            });
        }
        let mut outs = run(&inputs)?;
        for (r, result) in &self.updates {
            let var = r.resolve(var_args, &self.name)?;
            let value = &outs[*result];
            if value.is_symbolic() {
                return Err(trace::out_of_scope_tensor(value));
            }
            *guards[slot_of(&vars, &var)] = value.clone();
        }
        drop(guards);
        outs.truncate(self.num_outputs);
        Ok(outs)
    }

    fn tape_op(&self) -> Result<Op> {
        if let Some(op) = self.tape_op.get() {
            return Ok(op.clone());
        }
        let vjp = crate::tensor::hooks::call_vjp(self.graph.clone(), &self.name)?;
        Ok(self
            .tape_op
            .get_or_init(|| {
                Op::from(Call {
                    graph: self.graph.clone(),
                    num_outputs: self.num_outputs,
                    vjp,
                })
            })
            .clone())
    }

    /// (parameter, result) pairs: each variable both read and assigned is
    /// updated in place (its input buffer donated to its new value). Not
    /// when the program calls host callbacks: a callback can fail the run
    /// after XLA has taken the donated buffers, which would leave the
    /// variables without a value; their updates are copied instead.
    pub(crate) fn variable_aliases(&self, num_args: usize) -> Vec<(usize, usize)> {
        if calls_host(&self.graph) {
            return Vec::new();
        }
        let mut pairs = Vec::new();
        for (i, c) in self.captures.iter().enumerate() {
            let CaptureSource::Variable(r) = &c.source else {
                continue;
            };
            if let Some((_, result)) = self.updates.iter().find(|(u, _)| u.same(r)) {
                pairs.push((num_args + i, *result));
            }
        }
        pairs
    }

    /// The compiled specialization for these buffers' shapes on `device`.
    /// Compiles are single-flight: concurrent first calls with one shape
    /// compile once.
    pub(super) fn executable_for(
        &self,
        buffers: &[&Buffer],
        device: Device,
    ) -> Result<Arc<Executable>> {
        if let Some((specs, exe)) = &*self.last.read().unwrap_or_else(|e| e.into_inner())
            && exe.devices()[0] == device
            && specs.len() == buffers.len()
            && specs
                .iter()
                .zip(buffers)
                .all(|(s, b)| s.describes(b.dtype(), b.dims()))
        {
            return Ok(exe.clone());
        }
        let exe = self.executable_for_specs(buffers, device)?;
        let specs = buffers
            .iter()
            .map(|b| ArraySpec::new(b.dtype(), b.dims()))
            .collect();
        *self.last.write().unwrap_or_else(|e| e.into_inner()) = Some((specs, exe.clone()));
        Ok(exe)
    }

    fn executable_for_specs(&self, buffers: &[&Buffer], device: Device) -> Result<Arc<Executable>> {
        let specs: Vec<ArraySpec> = buffers
            .iter()
            .map(|b| ArraySpec::new(b.dtype(), b.dims()))
            .collect();
        let key = (device.index, specs);
        if let Some(exe) = self.cached(&key) {
            return Ok(exe);
        }
        let _compiling = self.compile_lock.lock().unwrap_or_else(|e| e.into_inner());
        // The compile event (runtime) is logged inside this span, which
        // names the function and its argument shapes.
        let _span = tracing::info_span!("compile", function = %self.name, inputs = ?key.1, %device)
            .entered();
        if let Some(exe) = self.cached(&key) {
            return Ok(exe);
        }
        let specs = &key.1;
        let client = match buffers.first() {
            Some(b) => b.client().clone(),
            None => Client::default_client()?,
        };
        let aliases = self.variable_aliases(specs.len() - self.captures.len());
        // Large results are written into recycled buffers (no page faults).
        let lowered = lower::lower_with_slots(&self.graph, specs, &aliases, recycle::eligible)
            .map_err(|e| self.frame(e))?;
        let slots = lowered.output_slots.len();
        let mut options =
            CompileOptions::for_program(client.platform(), program_traits(&lowered.size));
        options.devices = vec![device.id];
        let exe = Executable::compile_cached(&client, &lowered.text, lowered.params, &options)?;
        let exe = Arc::new(exe.with_output_slots(slots));
        self.compiles.fetch_add(1, Ordering::Relaxed);
        self.executables
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, exe.clone());
        Ok(exe)
    }

    fn cached(&self, key: &SpecializationKey) -> Option<Arc<Executable>> {
        self.executables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }
}

/// Does `graph` (or a region or function inside it) call a host callback?
pub(crate) fn calls_host(graph: &Graph) -> bool {
    graph.nodes().iter().any(|n| match &n.op {
        Op::HostCallback(_) => true,
        Op::Cond(c) => calls_host(&c.then_branch.graph) || calls_host(&c.else_branch.graph),
        Op::While(w) => calls_host(&w.cond.graph) || calls_host(&w.body.graph),
        Op::Call(c) => calls_host(&c.graph),
        _ => false,
    })
}

/// Locks `vars` (sorted by id, so concurrent calls cannot deadlock) for
/// the length of a call.
pub(super) fn lock_all(vars: &[Arc<VariableInner>]) -> Result<Vec<MutexGuard<'_, Tensor>>> {
    vars.iter().map(|v| v.lock_for_call()).collect()
}

/// The position of `v` among the locked `vars`.
pub(super) fn slot_of(vars: &[Arc<VariableInner>], v: &Arc<VariableInner>) -> usize {
    vars.iter()
        .position(|x| x.id == v.id)
        .expect("every variable a call uses is locked")
}

/// The traits a traced function's program is compiled by (see
/// `runtime::CompileOptions::for_program`).
pub(crate) fn program_traits(size: &lower::ProgramSize) -> ProgramTraits {
    ProgramTraits {
        light: size.is_light(),
        small_array_graph: size.has_only_small_arrays(),
    }
}
