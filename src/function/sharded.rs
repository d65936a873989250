//! Running a concrete function over a mesh of devices, partitioned by
//! XLA (`jax.jit` with shardings). A call is sharded when the function
//! has `in_shardings`/`out_shardings` or a shard_map, or an argument, a
//! variable or a captured tensor holds a sharded value.
//!
//! Each input gets a sharding: the function's `in_shardings` entry, else
//! the sharding it already has, else replicated over the mesh (captured
//! tensors and variables too). Inputs not already laid out that way are
//! put there. The graph is lowered once per (argument types, input
//! shardings) with Shardy annotations: an `sdy.mesh`, an `sdy.sharding`
//! per parameter, and one per result whose `out_shardings` entry is
//! given; XLA chooses the others, and those are read back from the
//! optimized program and named on the mesh. The program is compiled for
//! the mesh's devices (one partition each) and run with each device's
//! blocks; results come back as sharded tensors.

use super::call::{lock_all, slot_of};
use super::concrete::ConcreteCore;
use crate::dtype::ArraySpec;
use crate::error::{Error, Result};
use crate::ir::Graph;
use crate::lower::{self, Annotations, Partitioning};
use crate::mesh::{
    Mesh, NamedSharding, ShardedArray, hlo_sharding_text, named_from_op, same_layout,
};
use crate::ops::Op;
use crate::runtime::{Buffer, Client, CompileOptions, Executable, OpSharding, Partitioner};
use crate::tensor::Tensor;
use crate::trace::CaptureSource;
use crate::variable::Variable;
use std::sync::Arc;

/// `FunctionOptions::in_shardings` and `out_shardings`.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ShardingOptions {
    /// Per flat argument, its sharding (`None`: as it comes).
    pub inputs: Vec<Option<NamedSharding>>,
    /// Per output, its sharding (`None`: XLA's choice).
    pub outputs: Vec<Option<NamedSharding>>,
}

/// A function compiled for one mesh, argument types and input shardings.
pub(crate) struct ShardedProgram {
    exe: Arc<Executable>,
    /// Per result: its sharding and its global type.
    results: Vec<(NamedSharding, ArraySpec)>,
}

/// What a sharded specialization is compiled for.
pub(crate) type ShardedKey = (Vec<ArraySpec>, Vec<NamedSharding>);

use crate::mesh::MESH_NAME as MESH;

/// A tensor holding `array`. Every sharded tensor is made here, so the
/// executor of eager ops on sharded tensors (`sharded_eager`) is
/// registered before the first one exists.
pub(crate) fn sharded_tensor(array: ShardedArray) -> Tensor {
    super::sharded_eager::register();
    Tensor::from_sharded(Arc::new(array))
}

/// The mesh a `shard_map` in `graph` (or in a region inside it) runs on:
/// a function holding one runs partitioned over it.
pub(crate) fn graph_mesh(graph: &Graph) -> Option<Arc<Mesh>> {
    let mut meshes = Vec::new();
    graph_meshes(graph, &mut meshes);
    meshes.into_iter().next()
}

/// Calls `f` on every op of `graph` and of the regions of its conds,
/// loops and calls, in order; `shard_map` bodies are not entered (they
/// run per device).
fn visit_ops(graph: &Graph, f: &mut dyn FnMut(&Op)) {
    for n in graph.nodes() {
        f(&n.op);
        match &n.op {
            Op::Cond(c) => {
                visit_ops(&c.then_branch.graph, f);
                visit_ops(&c.else_branch.graph, f);
            }
            Op::While(w) => {
                visit_ops(&w.cond.graph, f);
                visit_ops(&w.body.graph, f);
            }
            Op::Call(c) => visit_ops(&c.graph, f),
            _ => {}
        }
    }
}

/// The meshes of every `shard_map` in `graph` and its regions, in order.
fn graph_meshes(graph: &Graph, out: &mut Vec<Arc<Mesh>>) {
    visit_ops(graph, &mut |op| {
        if let Op::ShardMap(s) = op {
            out.push(s.mesh.clone());
        }
    });
}

/// Does `graph` call back into the host (print, host_callback,
/// check_numerics) outside `shard_map` bodies? Such a program is
/// partitioned by GSPMD, which can place the call on one device.
fn calls_back_outside_shard_maps(graph: &Graph) -> bool {
    let mut found = false;
    visit_ops(graph, &mut |op| found |= matches!(op, Op::HostCallback(_)));
    found
}

impl ConcreteCore {
    /// Does this call run partitioned over a mesh: sharding options, a
    /// sharded argument, or a variable holding a sharded value?
    pub(super) fn is_sharded_call(&self, args: &[Tensor], var_args: &[Variable]) -> bool {
        self.shardings.is_some()
            || self.graph_mesh.is_some()
            || args.iter().any(Tensor::is_sharded)
            || crate::mesh::any_sharded_arrays()
                && self.captures.iter().any(|c| match &c.source {
                    // `lock_for_call`, not a plain lock: inside a host
                    // callback a variable held by the running call must
                    // give the usual error (from the call), not a wait.
                    CaptureSource::Variable(r) => r
                        .resolve(var_args, &self.name)
                        .is_ok_and(|v| v.lock_for_call().is_ok_and(|g| g.is_sharded())),
                    CaptureSource::Sharded(_) => true,
                    _ => false,
                })
    }

    /// Runs the function over a mesh (see the module docs). Variables are
    /// locked from their read to the write-back of their new values,
    /// which keep their sharding and are updated in place per device
    /// where no other tensor holds the old value.
    pub(super) fn call_sharded(
        &self,
        args: &[Tensor],
        var_args: &[Variable],
    ) -> Result<Vec<Tensor>> {
        let asked = self.shardings.as_deref().map_or(0, |o| o.inputs.len());
        if asked > args.len() {
            return Err(Error::Value(format!(
                "function '{}' takes {} tensor arguments, but in_shardings lists {asked}",
                self.name,
                args.len()
            )));
        }
        let vars = self.variables(var_args)?;
        let mut guards = lock_all(&vars)?;
        let mut inputs: Vec<Tensor> = args.to_vec();
        for c in &self.captures {
            inputs.push(match &c.source {
                CaptureSource::Variable(r) => {
                    guards[slot_of(&vars, &r.resolve(var_args, &self.name)?)].clone()
                }
                CaptureSource::Eager(b) => Tensor::from_shared_buffer(b.clone()),
                CaptureSource::Outer(t) | CaptureSource::Sharded(t) => t.clone(),
            });
        }
        let mesh = self.mesh_of(&inputs, args.len())?;
        let local_partitions = mesh.addressable_partitions().len();
        if local_partitions == 0 {
            return Err(Error::Value(format!(
                "function '{}' runs on {mesh}, none of whose devices belongs to this process: \
                 in a multi-process run, only the processes whose devices are in the mesh call it",
                self.name
            )));
        }
        let shardings: Vec<NamedSharding> = inputs
            .iter()
            .enumerate()
            .map(|(i, t)| self.input_sharding(i, t, &mesh))
            .collect::<Result<_>>()?;
        let aliases = self.variable_aliases(args.len());
        // A variable's old value still held elsewhere (beyond its variable
        // and `inputs`) must survive the call.
        let non_donatable: Vec<i64> = aliases
            .iter()
            .filter(|(p, _)| {
                inputs[*p]
                    .sharded()
                    .is_some_and(|a| Arc::strong_count(a) > 2)
            })
            .map(|(p, _)| *p as i64)
            .collect();
        let placed: Vec<Tensor> = inputs
            .iter()
            .zip(&shardings)
            .map(|(t, s)| match t.sharding().as_ref() == Some(s) {
                true => Ok(t.clone()),
                false => t.shard(s),
            })
            .collect::<Result<_>>()?;
        drop(inputs);
        let specs: Vec<ArraySpec> = placed
            .iter()
            .map(|t| ArraySpec::new(t.dtype(), &t.dims()))
            .collect();
        let program = self.sharded_program(&mesh, (specs, shardings), &aliases)?;
        let arrays: Vec<&Arc<ShardedArray>> = placed
            .iter()
            .map(|t| t.sharded().expect("placed on a sharding"))
            .collect();
        // One list per partition this process drives (every partition in
        // a one-process run): each process feeds its own blocks.
        let lists: Vec<Vec<&Buffer>> = (0..local_partitions)
            .map(|i| arrays.iter().map(|a| &*a.shards()[i]).collect())
            .collect();
        let outs = program.exe.execute_partitioned(&lists, &non_donatable)?;
        drop(lists);
        drop(arrays);
        drop(placed);
        let mut per_result: Vec<Vec<Buffer>> = program.results.iter().map(|_| Vec::new()).collect();
        for list in outs {
            for (r, b) in list.into_iter().enumerate() {
                per_result[r].push(b);
            }
        }
        let mut results: Vec<Tensor> = per_result
            .into_iter()
            .zip(&program.results)
            .map(|(blocks, (sharding, spec))| {
                let array = ShardedArray::from_shards(
                    sharding.clone(),
                    spec.dtype,
                    spec.dims.clone(),
                    blocks,
                )?;
                Ok(sharded_tensor(array))
            })
            .collect::<Result<_>>()?;
        for (r, result) in &self.updates {
            let var = r.resolve(var_args, &self.name)?;
            *guards[slot_of(&vars, &var)] = results[*result].clone();
        }
        drop(guards);
        results.truncate(self.num_outputs);
        Ok(results)
    }

    /// The compiled sharded specializations.
    pub(super) fn sharded_executables(&self) -> Vec<Arc<Executable>> {
        self.sharded_cache()
            .values()
            .map(|p| p.exe.clone())
            .collect()
    }

    /// The one mesh of the call: of the shardings asked for and of the
    /// sharded arguments, which must all agree.
    /// The one mesh the call runs on; `inputs` are the `arguments` tensor
    /// arguments followed by the captures' values.
    fn mesh_of(&self, inputs: &[Tensor], arguments: usize) -> Result<Arc<Mesh>> {
        let options = self.shardings.as_deref();
        let asked = options
            .into_iter()
            .flat_map(|o| o.inputs.iter().chain(&o.outputs))
            .flatten()
            .map(|s| {
                (
                    s.mesh().clone(),
                    "a sharding in the function's options".to_string(),
                )
            });
        let given = inputs.iter().enumerate().filter_map(|(i, t)| {
            t.sharding()
                .map(|s| (s.mesh().clone(), self.input_label(i, arguments)))
        });
        let in_graph = self
            .graph_mesh
            .iter()
            .map(|m| (m.clone(), "its shard_map".to_string()));
        let mut meshes = asked.chain(in_graph).chain(given);
        let (mesh, first) = meshes.next().ok_or_else(|| {
            Error::Value(format!(
                "function '{}' has sharding options that name no mesh",
                self.name
            ))
        })?;
        for (other, what) in meshes {
            if other != mesh {
                return Err(Error::Value(format!(
                    "function '{}': {what} is on another mesh than {first}: one call runs on one \
                     mesh",
                    self.name
                )));
            }
        }
        Ok(mesh)
    }

    /// How an error names input `i`: an argument, a variable or a
    /// captured tensor.
    fn input_label(&self, i: usize, arguments: usize) -> String {
        if i < arguments {
            return format!("argument {i}");
        }
        match self.captures.get(i - arguments).map(|c| &c.source) {
            Some(CaptureSource::Variable(r)) => r
                .resolve(&[], &self.name)
                .map_or("a variable".to_string(), |v| {
                    format!("variable '{}'", v.name)
                }),
            _ => "a captured tensor".to_string(),
        }
    }

    fn input_sharding(&self, i: usize, t: &Tensor, mesh: &Arc<Mesh>) -> Result<NamedSharding> {
        let asked = self
            .shardings
            .as_deref()
            .and_then(|o| o.inputs.get(i).cloned().flatten());
        let sharding = asked
            .or_else(|| t.sharding())
            .unwrap_or_else(|| NamedSharding::replicated(mesh));
        sharding
            .check_rank(t.rank())
            .map_err(|e| Error::Value(format!("function '{}', input {i}: {e}", self.name)))?;
        Ok(sharding)
    }

    fn sharded_program(
        &self,
        mesh: &Arc<Mesh>,
        key: ShardedKey,
        aliases: &[(usize, usize)],
    ) -> Result<Arc<ShardedProgram>> {
        if let Some(p) = self.sharded_cache().get(&key) {
            return Ok(p.clone());
        }
        let _compiling = self.compile_lock.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = self.sharded_cache().get(&key) {
            return Ok(p.clone());
        }
        let _span = tracing::info_span!("compile", function = %self.name, inputs = ?key.0, mesh = ?mesh.axes())
            .entered();
        let program = Arc::new(self.compile_sharded(mesh, &key, aliases)?);
        self.compiles
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.sharded
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, program.clone());
        Ok(program)
    }

    fn sharded_cache(
        &self,
    ) -> std::sync::RwLockReadGuard<'_, std::collections::HashMap<ShardedKey, Arc<ShardedProgram>>>
    {
        self.sharded.read().unwrap_or_else(|e| e.into_inner())
    }

    fn compile_sharded(
        &self,
        mesh: &Arc<Mesh>,
        key: &ShardedKey,
        aliases: &[(usize, usize)],
    ) -> Result<ShardedProgram> {
        let outputs: &[Option<NamedSharding>] =
            self.shardings.as_deref().map_or(&[], |o| &o.outputs);
        // Every shard_map runs on the call's mesh: two over the same axes
        // but other devices would otherwise run on the first one's.
        let mut in_graph = Vec::new();
        graph_meshes(&self.graph, &mut in_graph);
        if in_graph.iter().any(|m| m != mesh) {
            return Err(Error::Value(format!(
                "function '{}': a shard_map in it is on another mesh than the call's (mesh of \
                 devices {:?}): one call runs on one mesh",
                self.name,
                mesh.devices().iter().map(|d| d.id).collect::<Vec<_>>()
            )));
        }
        if outputs.len() > self.num_outputs {
            return Err(Error::Value(format!(
                "function '{}' has {} outputs, but out_shardings lists {}",
                self.name,
                self.num_outputs,
                outputs.len()
            )));
        }
        // Fixed result shardings: the caller's, and a variable's new value
        // keeps the sharding of the old; XLA chooses the others.
        let fixed: Vec<Option<NamedSharding>> = (0..self.graph.results().len())
            .map(|r| match aliases.iter().find(|(_, a)| *a == r) {
                Some((p, _)) => Some(key.1[*p].clone()),
                None => outputs.get(r).cloned().flatten(),
            })
            .collect();
        let (exe, types, named) = self.compile_for(mesh, key, aliases, &fixed)?;
        if named.iter().all(Option::is_some) {
            return self.finish_program(exe, types, named);
        }
        // XLA chose a layout no spec over the mesh names (an uneven split
        // over part of an axis, say). Such results take the sharding of
        // an input of the same shape, else are replicated, and the program
        // is compiled again with them fixed.
        let fallback: Vec<Option<NamedSharding>> = named
            .iter()
            .zip(&types)
            .map(|(n, ty)| {
                let like_input = key.0.iter().position(|s| s.dims == ty.dims);
                Some(n.clone().unwrap_or_else(|| match like_input {
                    Some(i) => key.1[i].clone(),
                    None => NamedSharding::replicated(mesh),
                }))
            })
            .collect();
        let (exe, types, named) = self.compile_for(mesh, key, aliases, &fallback)?;
        self.finish_program(exe, types, named)
    }

    /// Lowers and compiles for `fixed` result shardings; returns the
    /// program, the global result types and each result's sharding (the
    /// fixed one, or XLA's choice when the mesh can name it).
    fn compile_for(
        &self,
        mesh: &Arc<Mesh>,
        (specs, shardings): &ShardedKey,
        aliases: &[(usize, usize)],
        fixed: &[Option<NamedSharding>],
    ) -> Result<(Executable, Vec<ArraySpec>, Vec<Option<NamedSharding>>)> {
        // Shardy refuses to split a dimension unevenly (it shrinks such
        // a sharding to the axis part that divides it), so programs with
        // an uneven input or fixed result go through GSPMD, which pads.
        let uneven_input = shardings
            .iter()
            .zip(specs)
            .any(|(s, t)| s.is_uneven(&t.dims));
        // A host callback outside shard_map bodies runs on one device,
        // which only GSPMD can express here (`{maximal device=0}`).
        let calls_back = calls_back_outside_shard_maps(&self.graph);
        if calls_back && self.graph_mesh.is_some() {
            return Err(Error::Value(format!(
                "function '{}' holds a shard_map and calls back to the host (print, \
                 host_callback or check_numerics) outside it, which xlafn cannot partition \
                 together: print inside the shard_map body, or outside the function",
                self.name
            )));
        }
        let mut partitioner = match uneven_input || calls_back {
            true => Partitioner::Gspmd,
            false => Partitioner::Shardy,
        };
        // The result ranks are known only once lowered: lower once to
        // learn them, then with the result annotations.
        let plain = lower::lower_annotated(
            &self.graph,
            specs,
            &[],
            &self.annotations(mesh, partitioner, shardings, specs),
        )
        .map_err(|e| self.frame(e))?;
        for (r, (s, ty)) in fixed.iter().zip(&plain.results).enumerate() {
            let Some(s) = s else { continue };
            s.check_rank(ty.dims.len()).map_err(|e| {
                Error::Value(format!("function '{}', out_shardings[{r}]: {e}", self.name))
            })?;
            if s.is_uneven(&ty.dims) {
                partitioner = Partitioner::Gspmd;
            }
        }
        let mut annotations = self.annotations(mesh, partitioner, shardings, specs);
        annotations.results = fixed
            .iter()
            .zip(&plain.results)
            .map(|(s, ty)| {
                s.as_ref().map_or(String::new(), |s| {
                    sharding_attribute(partitioner, s, ty.dims.len())
                })
            })
            .collect();
        let lowered = lower::lower_annotated(&self.graph, specs, aliases, &annotations)
            .map_err(|e| self.frame(e))?;
        let client = Client::default_client()?;
        let mut options = CompileOptions::for_platform(client.platform());
        options.devices = mesh.devices().iter().map(|d| d.id).collect();
        options.partitioner = partitioner;
        options.propagate_to_results = fixed.iter().map(Option::is_none).collect();
        let block_specs: Vec<ArraySpec> = specs
            .iter()
            .zip(shardings)
            .map(|(spec, s)| ArraySpec::new(spec.dtype, &s.shard_dims(&spec.dims)))
            .collect();
        let exe = Executable::compile_cached(&client, &lowered.text, block_specs, &options)?;
        let program = exe.optimized()?;
        self.check_parameter_layouts(&program.parameter_shardings, specs, shardings)?;
        let chosen = program.result_shardings();
        let named = fixed
            .iter()
            .zip(&lowered.results)
            .enumerate()
            .map(|(r, (f, ty))| {
                f.clone().or_else(|| match mesh.size() {
                    1 => Some(NamedSharding::replicated(mesh)),
                    _ => named_from_op(mesh, chosen.get(r)?, &ty.dims),
                })
            })
            .collect();
        Ok((exe, lowered.results, named))
    }

    /// The module's partitioning annotations for the parameters (the
    /// results' are added once their ranks are known).
    fn annotations(
        &self,
        mesh: &Mesh,
        partitioner: Partitioner,
        shardings: &[NamedSharding],
        specs: &[ArraySpec],
    ) -> Annotations {
        Annotations {
            module_attributes: Some(format!(
                "mhlo.num_partitions = {} : i32, mhlo.num_replicas = 1 : i32",
                mesh.size()
            )),
            declarations: match partitioner {
                Partitioner::Shardy => vec![mesh.sdy_declaration(MESH)],
                _ => Vec::new(),
            },
            partitioning: Some(Partitioning {
                gspmd: partitioner == Partitioner::Gspmd,
                mesh_axes: mesh.axes().to_vec(),
            }),
            params: shardings
                .iter()
                .zip(specs)
                .map(|(s, spec)| sharding_attribute(partitioner, s, spec.dims.len()))
                .collect(),
            results: Vec::new(),
        }
    }

    /// Refuses a program whose parameters XLA laid out otherwise than the
    /// blocks the call will pass (the byte sizes might even agree).
    fn check_parameter_layouts(
        &self,
        compiled: &[OpSharding],
        specs: &[ArraySpec],
        shardings: &[NamedSharding],
    ) -> Result<()> {
        // Over one device every layout is the whole array (and XLA
        // reports none for a program of one partition).
        if shardings.first().is_some_and(|s| s.mesh().size() == 1) {
            return Ok(());
        }
        if compiled.len() != specs.len() {
            return Err(Error::Value(format!(
                "function '{}': the partitioned program reports {} parameter shardings for {} \
                 inputs",
                self.name,
                compiled.len(),
                specs.len()
            )));
        }
        for (i, ((op, spec), s)) in compiled.iter().zip(specs).zip(shardings).enumerate() {
            if !same_layout(s, op, &spec.dims) {
                return Err(Error::Value(format!(
                    "function '{}': XLA partitioned input {i} ({spec}) otherwise than {s}; shard \
                     it evenly, or over fewer devices",
                    self.name
                )));
            }
        }
        Ok(())
    }

    /// Checks that each result comes back in the blocks its sharding
    /// implies, and keeps the program.
    fn finish_program(
        &self,
        exe: Executable,
        types: Vec<ArraySpec>,
        named: Vec<Option<NamedSharding>>,
    ) -> Result<ShardedProgram> {
        let results = types
            .into_iter()
            .zip(named)
            .enumerate()
            .map(|(r, (spec, sharding))| {
                let sharding = sharding.ok_or_else(|| {
                    Error::Value(format!(
                        "function '{}': XLA laid result {r} out in a way no partition spec over \
                         the mesh names; give it in out_shardings",
                        self.name
                    ))
                })?;
                let block = sharding.shard_dims(&spec.dims);
                if exe.outputs().get(r).map(|o| &o.dims) != Some(&block) {
                    return Err(Error::Value(format!(
                        "function '{}': result {r} should come back in blocks of {block:?} for \
                         {sharding}, but the program returns {:?}",
                        self.name,
                        exe.outputs().get(r)
                    )));
                }
                Ok((sharding, spec))
            })
            .collect::<Result<_>>()?;
        Ok(ShardedProgram {
            exe: Arc::new(exe),
            results,
        })
    }
}

/// A parameter's or result's sharding attribute for `partitioner`.
fn sharding_attribute(partitioner: Partitioner, s: &NamedSharding, rank: usize) -> String {
    match partitioner {
        Partitioner::Gspmd => format!("mhlo.sharding = \"{}\"", hlo_sharding_text(s, rank)),
        _ => format!("sdy.sharding = {}", s.sdy_attribute(MESH, rank)),
    }
}
