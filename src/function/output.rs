//! What traced closures may return: tensors, host values, and containers of
//! them. The traced output is kept as a template; a call rebuilds the same
//! structure around the executed program's result tensors.

use super::trace_type::TensorSpec;
use crate::error::Result;
use crate::tensor::Tensor;
use std::collections::BTreeMap;

/// The host leaves of a value (see [`Output::host_values`]).
pub(crate) fn host_values_of<T: Output>(value: &T) -> Vec<String> {
    let mut out = Vec::new();
    value.host_values(&mut out);
    out
}

/// A value a traced closure can return.
pub trait Output: Sized + Send + Sync + 'static {
    /// Appends the tensors of this value, in a fixed order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// Rebuilds a value shaped like `template` from result tensors.
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self;
    /// The output type as signatures print it.
    fn describe(&self) -> String;
    /// The same value with every host-side control flag turned into a
    /// tensor (see `autograph::Flag`), so that a structure can enter tensor
    /// control flow, where both branches must agree on it.
    fn promote(self) -> Result<Self> {
        Ok(self)
    }
    /// Whether every part of this value has a value. Only the slot that an
    /// AutoGraph `return` fills (`autograph::ReturnValue`) can be undefined:
    /// before a converted `return` runs, it holds nothing yet.
    fn is_defined(&self) -> bool {
        true
    }
    /// This value with its undefined parts filled with zeros shaped like
    /// the same parts of `like` (what a trial trace of the construct
    /// produced), so that it can enter tensor control flow, whose state
    /// keeps one structure throughout.
    fn define_like(self, _like: &Self) -> Result<Self> {
        Ok(self)
    }
    /// Appends the host (non-tensor) leaves of this value, in a fixed
    /// order, as text. Tensor control flow carries only tensors, so a loop
    /// body or branch that changes one of these is refused instead of
    /// having its change silently dropped.
    fn host_values(&self, _out: &mut Vec<String>) {}
}

/// The return type of a traced closure: an [`Output`], or a `Result` of one
/// (an `Err` while tracing is the call's error).
pub trait IntoOutput {
    /// The `Output` inside (`T` for both `T` and `Result<T>`).
    type Out: Output;
    /// The output, or the body's error.
    fn into_output(self) -> Result<Self::Out>;
}

impl<T: Output> IntoOutput for T {
    type Out = T;
    fn into_output(self) -> Result<T> {
        Ok(self)
    }
}

impl<T: Output> IntoOutput for Result<T> {
    type Out = T;
    fn into_output(self) -> Result<T> {
        self
    }
}

impl Output for Tensor {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(self.clone());
    }
    fn rebuild(_template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        tensors.next().expect("one result tensor per output tensor")
    }
    fn describe(&self) -> String {
        TensorSpec {
            shape: self.shape(),
            dtype: self.dtype(),
            name: None,
        }
        .to_string()
    }
}

impl Output for () {
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn rebuild(_template: &Self, _tensors: &mut dyn Iterator<Item = Tensor>) -> Self {}
    fn describe(&self) -> String {
        "None".into()
    }
}

macro_rules! host_output {
    ($($t:ty),*) => {$(
        /// Host values computed while tracing are returned as they were.
        impl Output for $t {
            fn flatten(&self, _out: &mut Vec<Tensor>) {}
            fn rebuild(template: &Self, _tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
                template.clone()
            }
            fn describe(&self) -> String {
                format!("Literal[{self:?}]")
            }
            fn host_values(&self, out: &mut Vec<String>) {
                out.push(format!("{self:?}"));
            }
        }
    )*};
}
host_output!(i64, i32, u64, u32, usize, f64, f32, bool, String);

impl<T: Output> Output for Vec<T> {
    fn promote(self) -> Result<Self> {
        self.into_iter().map(Output::promote).collect()
    }
    fn is_defined(&self) -> bool {
        self.iter().all(Output::is_defined)
    }
    fn host_values(&self, out: &mut Vec<String>) {
        self.iter().for_each(|x| x.host_values(out));
    }
    fn define_like(self, like: &Self) -> Result<Self> {
        if self.len() != like.len() {
            return Ok(self);
        }
        self.into_iter()
            .zip(like)
            .map(|(x, l)| x.define_like(l))
            .collect()
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|x| x.flatten(out));
    }
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        template.iter().map(|t| T::rebuild(t, tensors)).collect()
    }
    fn describe(&self) -> String {
        format!(
            "List[{}]",
            self.iter()
                .map(Output::describe)
                .collect::<Vec<_>>()
                .join(", ")
        )
    }
}

impl<T: Output> Output for Option<T> {
    fn promote(self) -> Result<Self> {
        self.map(Output::promote).transpose()
    }
    fn is_defined(&self) -> bool {
        self.as_ref().is_none_or(Output::is_defined)
    }
    fn host_values(&self, out: &mut Vec<String>) {
        match self {
            Some(x) => x.host_values(out),
            None => out.push("None".into()),
        }
    }
    fn define_like(self, like: &Self) -> Result<Self> {
        match (self, like) {
            (Some(x), Some(l)) => Ok(Some(x.define_like(l)?)),
            (x, _) => Ok(x),
        }
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let Some(x) = self {
            x.flatten(out);
        }
    }
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        template.as_ref().map(|t| T::rebuild(t, tensors))
    }
    fn describe(&self) -> String {
        self.as_ref().map_or("None".into(), Output::describe)
    }
}

impl<T: Output> Output for BTreeMap<String, T> {
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.values().for_each(|v| v.flatten(out));
    }
    fn host_values(&self, out: &mut Vec<String>) {
        self.values().for_each(|v| v.host_values(out));
    }
    fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
        template
            .iter()
            .map(|(k, v)| (k.clone(), T::rebuild(v, tensors)))
            .collect()
    }
    fn describe(&self) -> String {
        let items: Vec<String> = self
            .iter()
            .map(|(k, v)| format!("'{k}': {}", v.describe()))
            .collect();
        format!("Dict[{}]", items.join(", "))
    }
}

macro_rules! tuple_output {
    ($($T:ident $v:ident $t:ident),+) => {
        impl<$($T: Output),+> Output for ($($T,)+) {
            fn flatten(&self, out: &mut Vec<Tensor>) {
                let ($($v,)+) = self;
                $($v.flatten(out);)+
            }
            fn rebuild(template: &Self, tensors: &mut dyn Iterator<Item = Tensor>) -> Self {
                let ($($t,)+) = template;
                ($($T::rebuild($t, tensors),)+)
            }
            fn describe(&self) -> String {
                let ($($v,)+) = self;
                format!("Tuple[{}]", [$($v.describe()),+].join(", "))
            }
            fn promote(self) -> Result<Self> {
                let ($($v,)+) = self;
                Ok(($($v.promote()?,)+))
            }
            fn is_defined(&self) -> bool {
                let ($($v,)+) = self;
                true $(&& $v.is_defined())+
            }
            fn host_values(&self, out: &mut Vec<String>) {
                let ($($v,)+) = self;
                $($v.host_values(out);)+
            }
            fn define_like(self, like: &Self) -> Result<Self> {
                let ($($v,)+) = self;
                let ($($t,)+) = like;
                Ok(($($v.define_like($t)?,)+))
            }
        }
    };
}
tuple_output!(A a ta);
tuple_output!(A a ta, B b tb);
tuple_output!(A a ta, B b tb, C c tc);
tuple_output!(A a ta, B b tb, C c tc, D d td);
tuple_output!(A a ta, B b tb, C c tc, D d td, E e te);
tuple_output!(A a ta, B b tb, C c tc, D d td, E e te, F f tf);
tuple_output!(A a ta, B b tb, C c tc, D d td, E e te, F f tf, G g tg);
tuple_output!(A a ta, B b tb, C c tc, D d td, E e te, F f tf, G g tg, H h th);
