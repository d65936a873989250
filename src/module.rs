//! Layer: a user-facing module over `variable` (imports `Variable` and
//! `Tensor` only). `tf.Module` for Rust structs: a [`Module`] lists the
//! variables it holds, with path names (`"layers.1.kernel"`), so that
//! optimizers, `value_and_grad` and checkpoints take a whole model instead
//! of a hand-kept list of variables.
//!
//! `#[derive(Module)]` writes the impl for a struct: every field is visited
//! under its name (tuple fields under their index). Fields are themselves
//! modules: variables, nested modules, and the containers below of them;
//! plain numbers, strings, dtypes and `Tensor`s (constants, not state) hold
//! no variables; any other field type needs `#[module(skip)]`.
//!
//! Paths are also names: listing a module's variables names each one by
//! its path (unless named by hand), the path from the outermost module
//! listed, so `tf.Module`'s `dense/kernel:0` reads `layers.0.kernel` in
//! exports, `xlafn show`, logs and errors.
//!
//! ```
//! use xlafn::prelude::*;
//! use xlafn::module::Module;
//!
//! #[derive(Module)]
//! struct Dense { kernel: Variable, bias: Variable }
//!
//! #[derive(Module)]
//! struct Mlp { layers: Vec<Dense>, #[module(skip)] activation: fn(&Tensor) -> Result<Tensor> }
//!
//! let dense = |i, o| Dense {
//!     kernel: Variable::new(Tensor::zeros(&[i, o], DType::F32)),
//!     bias: Variable::new(Tensor::zeros(&[o], DType::F32)),
//! };
//! let mlp = Mlp { layers: vec![dense(4, 8), dense(8, 2)], activation: Tensor::relu };
//! let names: Vec<String> = mlp.named_variables().into_iter().map(|(n, _)| n).collect();
//! assert_eq!(names, ["layers.0.kernel", "layers.0.bias", "layers.1.kernel", "layers.1.bias"]);
//! assert_eq!(mlp.trainable_variables().len(), 4);
//! assert_eq!(mlp.layers[1].bias.name(), "layers.1.bias");
//! ```

use crate::dtype::DType;
use crate::tensor::Tensor;
use crate::variable::Variable;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::rc::Rc;
use std::sync::Arc;

pub use xlafn_macros::Module;

/// Something that holds variables (`tf.Module`).
pub trait Module {
    /// Calls `f` with the path and the variable of each variable held,
    /// in declaration order; `prefix` is this module's own path ("" at the
    /// top).
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable));

    /// Every variable with its path, each variable once (a variable held
    /// in two places is listed under its first path, as `tf.Module` does).
    ///
    /// Listing also names each variable by its path
    /// ([`Variable::name_by_path`]) unless it was named by hand, so the
    /// paths reach exports, `xlafn show`, logs and errors: every method
    /// below (and optimizers, checkpoints) lists through here.
    fn named_variables(&self) -> Vec<(String, Variable)> {
        let mut seen = HashSet::new();
        let mut out = Vec::new();
        self.visit_variables("", &mut |name, v| {
            if seen.insert(v.id()) {
                v.name_by_path(&name);
                out.push((name, v.clone()));
            }
        });
        out
    }

    /// Every variable, each once (`tf.Module.variables`).
    fn variables(&self) -> Vec<Variable> {
        self.named_variables().into_iter().map(|(_, v)| v).collect()
    }

    /// The variables optimizers train (`tf.Module.trainable_variables`):
    /// those not marked [`Variable::non_trainable`] and not frozen.
    fn trainable_variables(&self) -> Vec<Variable> {
        self.variables()
            .into_iter()
            .filter(Variable::trainable)
            .collect()
    }

    /// Freezes every variable for fine-tuning (Keras' `trainable =
    /// False`, PyTorch's `requires_grad_(False)`): none is trainable until
    /// [`Module::unfreeze`]. Freeze a pretrained body and train its new
    /// head with `model.head.trainable_variables()` or the whole model's.
    fn freeze(&self) {
        for v in self.variables() {
            v.set_frozen(true);
        }
    }

    /// Thaws every variable: each is trainable again unless it was made
    /// non-trainable (a batch norm's moving statistics stay so).
    fn unfreeze(&self) {
        for v in self.variables() {
            v.set_frozen(false);
        }
    }

    /// How many numbers the variables hold: `(all, trainable)`.
    fn parameter_count(&self) -> (u64, u64) {
        let size = |v: &Variable| v.dims().iter().map(|&d| d as u64).product::<u64>();
        self.variables().iter().fold((0, 0), |(all, trainable), v| {
            let n = size(v);
            (all + n, trainable + if v.trainable() { n } else { 0 })
        })
    }

    /// A table of the variables (Keras' `model.summary()`): each path,
    /// dtype and shape, its count, and whether it is trained, then the
    /// totals.
    ///
    /// ```
    /// use xlafn::prelude::*;
    /// use xlafn::module::Module;
    /// use xlafn::nn::layers::Linear;
    /// let fc = Linear::new(&xlafn::random::key(0)?, 3, 2)?;
    /// let table = fc.summary();
    /// assert!(table.contains("kernel") && table.contains("f32[3, 2]"));
    /// assert!(table.ends_with("total 8 parameters, 8 trainable\n"));
    /// # Ok::<(), xlafn::Error>(())
    /// ```
    fn summary(&self) -> String {
        let rows: Vec<(String, String, u64, bool)> = self
            .named_variables()
            .into_iter()
            .map(|(path, v)| {
                let n = v.dims().iter().map(|&d| d as u64).product::<u64>();
                (
                    path,
                    format!("{}{:?}", v.dtype(), v.dims()),
                    n,
                    v.trainable(),
                )
            })
            .collect();
        let wp = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(8);
        let wt = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(4);
        let mut out = format!(
            "{:wp$}  {:wt$}  {:>12}  trained\n",
            "variable", "type", "parameters"
        );
        for (path, ty, n, trained) in &rows {
            let mark = if *trained { "yes" } else { "no" };
            out.push_str(&format!("{path:wp$}  {ty:wt$}  {n:>12}  {mark}\n"));
        }
        let (all, trainable) = self.parameter_count();
        out.push_str(&format!("total {all} parameters, {trainable} trainable\n"));
        out
    }
}

/// `prefix.name`, or `name` at the top.
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

impl Module for Variable {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        f(prefix.to_string(), self);
    }
}

/// Types that hold no variables, so structs can keep them as plain fields.
macro_rules! no_variables {
    ($($ty:ty),* $(,)?) => {$(
        impl Module for $ty {
            fn visit_variables(&self, _: &str, _: &mut dyn FnMut(String, &Variable)) {}
        }
    )*};
}

no_variables!(
    bool,
    u8,
    u16,
    u32,
    u64,
    usize,
    i8,
    i16,
    i32,
    i64,
    isize,
    f32,
    f64,
    String,
    &str,
    DType,
    Tensor,
    ()
);

impl<T: Module> Module for Vec<T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.as_slice().visit_variables(prefix, f);
    }
}

impl<T: Module> Module for [T] {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        for (i, m) in self.iter().enumerate() {
            m.visit_variables(&join(prefix, &i.to_string()), f);
        }
    }
}

impl<T: Module, const N: usize> Module for [T; N] {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        self.as_slice().visit_variables(prefix, f);
    }
}

impl<T: Module> Module for Option<T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        if let Some(m) = self {
            m.visit_variables(prefix, f);
        }
    }
}

impl<T: Module + ?Sized> Module for Box<T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        (**self).visit_variables(prefix, f);
    }
}

impl<T: Module + ?Sized> Module for Arc<T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        (**self).visit_variables(prefix, f);
    }
}

impl<T: Module + ?Sized> Module for Rc<T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        (**self).visit_variables(prefix, f);
    }
}

impl<T: Module + ?Sized> Module for &T {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        (**self).visit_variables(prefix, f);
    }
}

impl<T: Module> Module for BTreeMap<String, T> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        for (k, m) in self {
            m.visit_variables(&join(prefix, k), f);
        }
    }
}

/// Visited in key order, so names and checkpoints do not depend on the
/// map's iteration order.
impl<T: Module, S> Module for HashMap<String, T, S> {
    fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
        let mut entries: Vec<(&String, &T)> = self.iter().collect();
        entries.sort_by_key(|(k, _)| *k);
        for (k, m) in entries {
            m.visit_variables(&join(prefix, k), f);
        }
    }
}

macro_rules! tuples {
    ($(($($t:ident $i:tt),+)),* $(,)?) => {$(
        impl<$($t: Module),+> Module for ($($t,)+) {
            fn visit_variables(&self, prefix: &str, f: &mut dyn FnMut(String, &Variable)) {
                $(self.$i.visit_variables(&join(prefix, stringify!($i)), f);)+
            }
        }
    )*};
}

tuples!((A 0, B 1), (A 0, B 1, C 2), (A 0, B 1, C 2, D 3));
