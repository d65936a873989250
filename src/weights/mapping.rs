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
//! Layer: part of `weights`, over `tensor` ops.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

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
enum Transform {
    Transpose(Vec<i64>),
    TorchKernel,
    Reshape(Vec<i64>),
    Cast(DType),
}

enum Rule {
    Rename(Box<dyn Fn(&str) -> String>),
    Skip(Select),
    Transform(Select, Transform),
}

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

/// The steps one tensor takes, found from its header entry.
#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub name: String,
    pub info: WeightInfo,
    steps: Vec<Transform>,
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

    /// What the file tensor `name` with header entry `info` becomes: the
    /// variable name and its dtype and dims, or `None` when skipped.
    /// Errors when a step does not fit (a reshape of another element
    /// count, a transpose of another rank), naming the tensor.
    pub fn map_info(&self, name: &str, info: &WeightInfo) -> Result<Option<(String, WeightInfo)>> {
        Ok(self.plan(name, info)?.map(|p| (p.name, p.info)))
    }

    pub(crate) fn plan(&self, file_name: &str, info: &WeightInfo) -> Result<Option<Plan>> {
        let mut plan = Plan {
            name: file_name.to_string(),
            info: info.clone(),
            steps: Vec::new(),
        };
        for rule in &self.rules {
            match rule {
                Rule::Rename(f) => plan.name = f(&plan.name),
                Rule::Skip(select) if select(&plan.name) => return Ok(None),
                Rule::Skip(_) => {}
                Rule::Transform(select, t) if select(&plan.name) => {
                    plan.info = apply_info(t, &plan.info).map_err(|m| {
                        Error::invalid(
                            "weights",
                            format!(
                                "tensor '{file_name}' (mapped to '{}', {}): {m}",
                                plan.name, plan.info
                            ),
                        )
                    })?;
                    plan.steps.push(t.clone());
                }
                Rule::Transform(..) => {}
            }
        }
        Ok(Some(plan))
    }
}

impl Plan {
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
            };
        }
        Ok(value)
    }
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
