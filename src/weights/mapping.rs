//! The mapping from a file's tensors to a module's variables: renames, then
//! layout changes (transposes, reshapes, casts), as an ordered list of
//! rules. Each rule sees the name as the rules before it left it, so
//! `replace_suffix(".weight", ".kernel")` followed by
//! `torch_kernel(|n| n.ends_with(".kernel"))` reads naturally.
//!
//! A mapping works on a tensor's header entry (name, dtype, dims) first,
//! so a whole file is checked against a module before any data is read;
//! the same steps then apply to each tensor's value.
//!
//! A framework preset ([`Mapping::torch`], [`Mapping::flax`],
//! [`Mapping::keras`]) is one rule built from a module: every variable of a built-in layer (its
//! [`LayerKind`]) with the names and layouts that framework gives it. A
//! preset may make one variable from several file tensors (PyTorch's two
//! LSTM biases are summed, Flax's per-gate LSTM kernels concatenated) and
//! several variables from one (PyTorch's `in_proj_weight` is cut into the
//! query, key and value kernels); the load then checks that every part of
//! a combined variable is there. `presets.rs` holds the frameworks'
//! conventions.
//!
//! Layer: part of `weights`, over `tensor` ops and `module` (the
//! variables a preset reads).

use super::presets;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::module::Module;
use crate::tensor::Tensor;
use crate::variable::LayerKind;
use std::collections::HashMap;

/// A tensor's dtype and dimensions, as a header gives them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WeightInfo {
    /// The element type.
    pub dtype: DType,
    /// The dimensions.
    pub dims: Vec<i64>,
}

impl std::fmt::Display for WeightInfo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}{:?}", self.dtype, self.dims)
    }
}

type Select = Box<dyn Fn(&str) -> bool>;

/// One change of a tensor's layout or type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Transform {
    Transpose(Vec<i64>),
    TorchKernel,
    Reshape(Vec<i64>),
    Cast(DType),
    /// Reverses these axes (a kernel's spatial axes).
    Flip(Vec<i64>),
    /// Cuts `axis` into `order.len()` equal blocks and puts block
    /// `order[i]` at place `i` (gate orders).
    ReorderBlocks {
        axis: i64,
        order: Vec<usize>,
    },
    /// `len` entries of `axis` from `start` (one of PyTorch's fused
    /// `in_proj` rows).
    Slice {
        axis: i64,
        start: i64,
        len: i64,
    },
}

/// How the parts of a variable made from several file tensors combine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Combine {
    /// Added (PyTorch's `bias_ih + bias_hh`).
    Sum,
    /// Stacked along a new first axis, in part order (a GRU's input and
    /// recurrent biases).
    Stack,
    /// Concatenated along this axis, in part order (Flax's per-gate LSTM
    /// kernels).
    Concat(i64),
}

impl Combine {
    pub(crate) fn describe(self) -> &'static str {
        match self {
            Combine::Sum => "summed",
            Combine::Stack => "stacked",
            Combine::Concat(_) => "concatenated",
        }
    }
}

/// Which part of a combined variable a file tensor is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Part {
    pub combine: Combine,
    pub slot: usize,
    pub of: usize,
}

/// What a preset makes of one file tensor: a variable, the steps on the
/// way, and the part it is when the variable has several.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub variable: String,
    pub steps: Vec<Transform>,
    pub part: Option<Part>,
}

/// A framework's names for a module's variables: file tensor name to
/// what it becomes (no targets: skipped, as PyTorch's
/// `num_batches_tracked`).
pub(crate) struct Preset {
    pub framework: &'static str,
    pub table: HashMap<String, Vec<Target>>,
}

enum Rule {
    Rename(Box<dyn Fn(&str) -> String>),
    Skip(Select),
    Transform(Select, Transform),
    Preset(Preset),
    /// A preset made once the file's names are known: Keras numbers its
    /// layers by class (`dense`, `dense_1`), so which file layer a
    /// variable reads depends on the numbers the file holds.
    Keras(Vec<LayerVariable>),
}

/// A module's built-in layer variables: path, kind, dims.
type LayerVariable = (String, LayerKind, Vec<i64>);

/// The presets of a mapping's file-dependent rules, made for one file
/// (by rule index; `None` for the other rules).
pub(crate) struct Resolved(Vec<Option<Preset>>);

/// How file tensors become module variables: an ordered list of rules
/// (see the module docs). An empty mapping loads every tensor under its
/// own name, unchanged.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::weights::{Mapping, WeightInfo};
/// let mapping = Mapping::new()
///     .replace_prefix("model.", "")
///     .replace_suffix(".weight", ".kernel")
///     .torch_kernel(|name| name.ends_with(".kernel"));
/// let file = WeightInfo { dtype: DType::F32, dims: vec![8, 3] }; // Linear(3, 8)
/// let (name, info) = mapping.map_info("model.fc.weight", &file)?.unwrap();
/// assert_eq!((name.as_str(), info.dims), ("fc.kernel", vec![3, 8]));
/// # Ok::<(), xlafn::Error>(())
/// ```
#[derive(Default)]
pub struct Mapping {
    rules: Vec<Rule>,
}

impl std::fmt::Debug for Mapping {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mapping({} rules)", self.rules.len())
    }
}

/// The steps one tensor takes to one variable, found from its header
/// entry.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub name: String,
    pub info: WeightInfo,
    steps: Vec<Transform>,
    /// The part it is of a variable made from several tensors.
    pub part: Option<Part>,
}

impl Mapping {
    /// No rules: names and values as in the file.
    pub fn new() -> Mapping {
        Mapping::default()
    }

    /// Renames by a closure (applied to every name; return it unchanged to
    /// leave a name alone).
    pub fn rename(mut self, f: impl Fn(&str) -> String + 'static) -> Mapping {
        self.rules.push(Rule::Rename(Box::new(f)));
        self
    }

    /// Names starting with `from` start with `to` instead
    /// (`"model."` → `""` drops a wrapper's prefix).
    pub fn replace_prefix(self, from: &str, to: &str) -> Mapping {
        let (from, to) = (from.to_string(), to.to_string());
        self.rename(move |n| match n.strip_prefix(from.as_str()) {
            Some(rest) => format!("{to}{rest}"),
            None => n.to_string(),
        })
    }

    /// Names ending with `from` end with `to` instead
    /// (`".weight"` → `".kernel"`).
    pub fn replace_suffix(self, from: &str, to: &str) -> Mapping {
        let (from, to) = (from.to_string(), to.to_string());
        self.rename(move |n| match n.strip_suffix(from.as_str()) {
            Some(rest) => format!("{rest}{to}"),
            None => n.to_string(),
        })
    }

    /// Leaves out the selected tensors (PyTorch's `num_batches_tracked`,
    /// a head not wanted): they are reported as skipped, not as unused.
    pub fn skip(mut self, select: impl Fn(&str) -> bool + 'static) -> Mapping {
        self.rules.push(Rule::Skip(Box::new(select)));
        self
    }

    /// Permutes the selected tensors' axes: result axis `i` is axis
    /// `perm[i]` (as [`Tensor::transpose`]).
    pub fn transpose(self, select: impl Fn(&str) -> bool + 'static, perm: &[i64]) -> Mapping {
        self.transform(select, Transform::Transpose(perm.to_vec()))
    }

    /// Changes the selected tensors from PyTorch's weight layouts to the
    /// channels-last ones xlafn and Keras use, by rank: a `Linear` weight
    /// `[out, in]` becomes a kernel `[in, out]`; a `Conv1d`/`Conv2d`/
    /// `Conv3d` weight `[out, in, k...]` becomes `[k..., in, out]` (HWIO
    /// for 2-D). Other ranks are an error naming the tensor. (A depthwise
    /// or transposed convolution has other layouts: use
    /// [`Mapping::transpose`].)
    pub fn torch_kernel(self, select: impl Fn(&str) -> bool + 'static) -> Mapping {
        self.transform(select, Transform::TorchKernel)
    }

    /// Reorders the input rows of the selected dense kernels (`[in,
    /// out]`, xlafn's layout: put this after `torch` or `torch_kernel`)
    /// from a flatten of channels-first `[channels, height, width]`
    /// features, PyTorch's `x.flatten(1)` after a convolution, to a
    /// flatten of xlafn's channels-last `[height, width, channels]`: a
    /// `Linear` after `Flatten` then computes what PyTorch's did.
    pub fn channels_first_flatten(
        self,
        select: impl Fn(&str) -> bool + 'static,
        [channels, height, width]: [i64; 3],
    ) -> Mapping {
        let select = std::rc::Rc::new(select);
        let (a, b, c) = (select.clone(), select.clone(), select);
        self.reshape(move |n| a(n), &[channels, height, width, -1])
            .transpose(move |n| b(n), &[1, 2, 0, 3])
            .reshape(move |n| c(n), &[channels * height * width, -1])
    }

    /// Gives the selected tensors new dimensions with the same element
    /// count (row-major; one entry may be -1, computed from the count).
    pub fn reshape(self, select: impl Fn(&str) -> bool + 'static, dims: &[i64]) -> Mapping {
        self.transform(select, Transform::Reshape(dims.to_vec()))
    }

    /// Converts the selected tensors to `dtype` (bf16 or f16 files into an
    /// f32 model, say).
    pub fn cast(self, select: impl Fn(&str) -> bool + 'static, dtype: DType) -> Mapping {
        self.transform(select, Transform::Cast(dtype))
    }

    fn transform(mut self, select: impl Fn(&str) -> bool + 'static, t: Transform) -> Mapping {
        self.rules.push(Rule::Transform(Box::new(select), t));
        self
    }

    /// PyTorch's names and layouts for the built-in layers of `module`
    /// (by each variable's [`LayerKind`]; build lazy layers first): a
    /// `state_dict` loads with no renames. Rules before this one see the
    /// file's names (drop a wrapper's prefix there); rules after it see
    /// the module's. The conventions, layer by layer, are in the book's
    /// porting chapter; in short: `weight`/`bias` with `[out, in, k..]`
    /// kernels transposed to channels-last; BatchNorm's running
    /// statistics (`num_batches_tracked` skipped); `weight_ih_l{k}`,
    /// `weight_hh_l{k}` and the sum of both biases for `Lstm` (stacks
    /// and `_reverse` directions too); GRU gates reordered from r, z, n
    /// to z, r, h; `MultiheadAttention`'s fused `in_proj_weight` cut into
    /// query, key and value; an `nn.Sequential`'s `N.` for `layers.N.`.
    pub fn torch(mut self, module: &(impl Module + ?Sized)) -> Mapping {
        self.rules
            .push(Rule::Preset(presets::torch(&layer_variables(module))));
        self
    }

    /// Flax's names and layouts for the built-in layers of `module` (a
    /// flattened `params` tree, `.`-separated, with or without the
    /// `params.`/`batch_stats.` collection in front): `scale`/`bias`,
    /// `embedding`, `mean`/`var`, attention's `out`, per-gate LSTM cells
    /// (`ii`..`ho`) concatenated, `ConvTranspose` kernels flipped.
    pub fn flax(mut self, module: &(impl Module + ?Sized)) -> Mapping {
        self.rules
            .push(Rule::Preset(presets::flax(&layer_variables(module))));
        self
    }

    /// Keras 3's names for the built-in layers of `module`, as
    /// `model.save_weights("x.weights.h5")` and a `.keras` archive write
    /// them: `<layer>/vars/<n>`, a layer's variables numbered in the
    /// order Keras makes them (`kernel`, `bias`; `gamma`, `beta`,
    /// `moving_mean`, `moving_variance`), recurrent cells under `cell`,
    /// attention's projections under `query_dense`..`output_dense`.
    /// Keras' layouts are xlafn's, so nothing is transposed.
    ///
    /// A layer in an xlafn list (`Sequential`'s `layers.N`, a `Vec`
    /// field) is found among the layers Keras lists by name under the
    /// same place (`layers/dense`, `layers/dense_1`): the k-th layer of a
    /// class in the module reads the file's k-th of that class, numbered
    /// as Keras numbers automatic names (so a model built after others,
    /// whose layers start at `dense_4`, still lines up). Any other layer
    /// is looked for at its own path (a subclassed model's attribute,
    /// `fc/vars/0`) and among a functional model's `layers/..`. Layers
    /// given names of their own in Keras need a rename before this rule.
    /// An `optimizer/..` state is skipped.
    pub fn keras(mut self, module: &(impl Module + ?Sized)) -> Mapping {
        self.rules.push(Rule::Keras(layer_variables(module)));
        self
    }

    /// What the file tensor `name` with header entry `info` becomes: the
    /// variable name and its dtype and dims, or `None` when skipped (the
    /// first variable, when a preset makes several from it).
    /// Errors when a step does not fit (a reshape of another element
    /// count, a transpose of another rank), naming the tensor. A rule
    /// that depends on the whole file ([`Mapping::keras`]) sees this one
    /// name as the file.
    pub fn map_info(&self, name: &str, info: &WeightInfo) -> Result<Option<(String, WeightInfo)>> {
        let resolved = self.resolve(&[(name.to_string(), info.clone())])?;
        Ok(self
            .plan(&resolved, name, info)?
            .into_iter()
            .next()
            .map(|p| (p.name, p.info)))
    }

    /// Makes the file-dependent presets for a file of these tensors: each
    /// from the names as the rules before it leave them.
    pub(crate) fn resolve(&self, file: &[(String, WeightInfo)]) -> Result<Resolved> {
        let mut resolved = Resolved(self.rules.iter().map(|_| None).collect());
        for (i, rule) in self.rules.iter().enumerate() {
            if let Rule::Keras(variables) = rule {
                let mut names = Vec::with_capacity(file.len());
                for (name, info) in file {
                    let plans = self.plan_through(i, &resolved, name, info)?;
                    names.extend(plans.into_iter().map(|p| p.name));
                }
                resolved.0[i] = Some(presets::keras(variables, &names));
            }
        }
        Ok(resolved)
    }

    /// Every variable the file tensor becomes (none: skipped), with the
    /// file-dependent presets `resolved` made for its file.
    pub(crate) fn plan(
        &self,
        resolved: &Resolved,
        file_name: &str,
        info: &WeightInfo,
    ) -> Result<Vec<Plan>> {
        self.plan_through(self.rules.len(), resolved, file_name, info)
    }

    /// The plans after the first `upto` rules.
    fn plan_through(
        &self,
        upto: usize,
        resolved: &Resolved,
        file_name: &str,
        info: &WeightInfo,
    ) -> Result<Vec<Plan>> {
        let mut plans = vec![Plan {
            name: file_name.to_string(),
            info: info.clone(),
            steps: Vec::new(),
            part: None,
        }];
        for (i, rule) in self.rules[..upto].iter().enumerate() {
            let preset = match rule {
                Rule::Preset(preset) => Some(preset),
                Rule::Keras(_) => resolved.0.get(i).and_then(Option::as_ref),
                _ => None,
            };
            let mut next = Vec::with_capacity(plans.len());
            for mut plan in plans {
                match rule {
                    Rule::Rename(f) => {
                        plan.name = f(&plan.name);
                        next.push(plan);
                    }
                    Rule::Skip(select) if select(&plan.name) => {}
                    Rule::Transform(select, t) if select(&plan.name) => {
                        plan.step(file_name, t)?;
                        next.push(plan);
                    }
                    Rule::Preset(_) | Rule::Keras(_) => {
                        match preset.and_then(|p| p.table.get(&plan.name).map(|t| (p, t))) {
                            None => next.push(plan),
                            Some((preset, targets)) => {
                                for target in targets {
                                    let mut branch = plan.clone();
                                    branch.name = target.variable.clone();
                                    for t in &target.steps {
                                        branch.step(file_name, t).map_err(|e| {
                                            preset_error(preset.framework, &plan.name, e)
                                        })?;
                                    }
                                    branch.part = target.part;
                                    next.push(branch);
                                }
                            }
                        }
                    }
                    Rule::Skip(_) | Rule::Transform(..) => next.push(plan),
                }
            }
            plans = next;
        }
        Ok(plans)
    }
}

/// The variables of `module` that a built-in layer holds: path, kind and
/// dims, what a preset is made from.
fn layer_variables(module: &(impl Module + ?Sized)) -> Vec<LayerVariable> {
    module
        .named_variables()
        .into_iter()
        .filter_map(|(path, v)| Some((path, v.layer_kind()?, v.dims().to_vec())))
        .collect()
}

fn preset_error(framework: &str, name: &str, e: Error) -> Error {
    Error::invalid(
        "weights",
        format!(
            "{e} (in {framework}'s layout for '{name}': the file's tensor is not the shape that layer has there)"
        ),
    )
}

impl Plan {
    /// Adds step `t`, checked against the header entry so far.
    fn step(&mut self, file_name: &str, t: &Transform) -> Result<()> {
        self.info = apply_info(t, &self.info).map_err(|m| {
            Error::invalid(
                "weights",
                format!(
                    "tensor '{file_name}' (mapped to '{}', {}): {m}",
                    self.name, self.info
                ),
            )
        })?;
        self.steps.push(t.clone());
        Ok(())
    }

    /// Applies the steps to the tensor's value.
    pub(crate) fn apply(&self, value: Tensor) -> Result<Tensor> {
        let mut value = value;
        for t in &self.steps {
            value = match t {
                Transform::Transpose(perm) => value.transpose(perm)?,
                Transform::TorchKernel => {
                    let perm = torch_perm(value.dims().len())
                        .map_err(|m| Error::invalid("weights", format!("'{}': {m}", self.name)))?;
                    value.transpose(&perm)?
                }
                Transform::Reshape(dims) => value.reshape(dims)?,
                Transform::Cast(d) if *d == value.dtype() => value,
                Transform::Cast(d) => value.cast(*d)?,
                Transform::Flip(axes) => value.reverse(axes)?,
                Transform::ReorderBlocks { axis, order } => {
                    let block = value.dims()[*axis as usize] / order.len() as i64;
                    let blocks: Vec<Tensor> = order
                        .iter()
                        .map(|&b| slice_axis(&value, *axis, b as i64 * block, block))
                        .collect::<Result<_>>()?;
                    Tensor::concat(&blocks, *axis)?
                }
                Transform::Slice { axis, start, len } => slice_axis(&value, *axis, *start, *len)?,
            };
        }
        Ok(value)
    }
}

/// `len` entries of `value` along `axis` from `start`.
fn slice_axis(value: &Tensor, axis: i64, start: i64, len: i64) -> Result<Tensor> {
    let dims = value.dims();
    let mut begin = vec![0; dims.len()];
    let mut size = dims.clone();
    begin[axis as usize] = start;
    size[axis as usize] = len;
    value.slice(&begin, &size)
}

/// PyTorch's `[out, in, k...]` to `[k..., in, out]` (`[out, in]` to `[in,
/// out]`), as a permutation.
fn torch_perm(rank: usize) -> std::result::Result<Vec<i64>, String> {
    if !(2..=5).contains(&rank) {
        return Err(format!(
            "torch_kernel needs a Linear or Conv weight of rank 2 to 5, got rank {rank}"
        ));
    }
    let r = rank as i64;
    let mut perm: Vec<i64> = (2..r).collect();
    perm.extend([1, 0]);
    Ok(perm)
}

fn apply_info(t: &Transform, info: &WeightInfo) -> std::result::Result<WeightInfo, String> {
    let dims = &info.dims;
    let permuted = |perm: &[i64]| -> std::result::Result<WeightInfo, String> {
        let mut seen = vec![false; dims.len()];
        let ok = perm.len() == dims.len()
            && perm.iter().all(|&p| {
                (0..dims.len() as i64).contains(&p)
                    && !std::mem::replace(&mut seen[p as usize], true)
            });
        if !ok {
            return Err(format!(
                "{perm:?} is not a permutation of its {} axes",
                dims.len()
            ));
        }
        Ok(WeightInfo {
            dtype: info.dtype,
            dims: perm.iter().map(|&p| dims[p as usize]).collect(),
        })
    };
    match t {
        Transform::Transpose(perm) => permuted(perm),
        Transform::TorchKernel => permuted(&torch_perm(dims.len())?),
        Transform::Reshape(target) => Ok(WeightInfo {
            dtype: info.dtype,
            dims: reshaped(dims, target)?,
        }),
        Transform::Cast(d) => Ok(WeightInfo {
            dtype: *d,
            dims: dims.clone(),
        }),
        Transform::Flip(axes) => match axes.iter().all(|&a| (0..dims.len() as i64).contains(&a)) {
            true => Ok(info.clone()),
            false => Err(format!(
                "cannot flip axes {axes:?} of a rank-{} tensor",
                dims.len()
            )),
        },
        Transform::ReorderBlocks { axis, order } => {
            let size = dims.get(*axis as usize).copied().unwrap_or(-1);
            match size >= 0 && !order.is_empty() && size % order.len() as i64 == 0 {
                true => Ok(info.clone()),
                false => Err(format!(
                    "cannot cut axis {axis} of {dims:?} into {} equal blocks",
                    order.len()
                )),
            }
        }
        Transform::Slice { axis, start, len } => {
            let size = dims.get(*axis as usize).copied().unwrap_or(-1);
            match *start >= 0 && *len >= 0 && start.checked_add(*len).is_some_and(|e| e <= size) {
                true => {
                    let mut dims = dims.clone();
                    dims[*axis as usize] = *len;
                    Ok(WeightInfo {
                        dtype: info.dtype,
                        dims,
                    })
                }
                false => Err(format!(
                    "cannot take {len} entries of axis {axis} from {start} in {dims:?}"
                )),
            }
        }
    }
}

/// `target` with its -1 filled in, when it holds `dims`' element count.
fn reshaped(dims: &[i64], target: &[i64]) -> std::result::Result<Vec<i64>, String> {
    let count: i64 = dims.iter().product();
    let unknown = target.iter().filter(|&&d| d == -1).count();
    let known: Option<i64> = target
        .iter()
        .filter(|&&d| d != -1)
        .try_fold(1i64, |a, &d| if d < 0 { None } else { a.checked_mul(d) });
    let bad = || format!("cannot reshape {dims:?} ({count} elements) to {target:?}");
    let known = known.ok_or_else(bad)?;
    match unknown {
        0 if known == count => Ok(target.to_vec()),
        1 if known > 0 && count % known == 0 => Ok(target
            .iter()
            .map(|&d| if d == -1 { count / known } else { d })
            .collect()),
        _ => Err(bad()),
    }
}
