//! How closure arguments become trace types, graph placeholders and flat
//! lists of tensors.
//!
//! Every parameter type of a traced closure implements [`Arg`]: tensors are
//! typed by dtype and shape and become placeholders; host literals are typed
//! by value and are passed through as they are; containers recurse. User
//! types implement [`Arg`] with a [`CustomTraceType`] (see
//! [`ByValue`] for types keyed by equality).

use super::trace_type::{CustomTraceType, Literal, TensorSpec, TraceType};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::Scalar;
use crate::ir::TensorType;
use crate::tensor::{Tensor, scalar_as};
use crate::trace;
use crate::variable::Variable;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;

/// A value a traced closure can take as a parameter.
pub trait Arg: Sized + 'static {
    /// The trace type of this value (what decides retracing).
    fn trace_type(&self) -> Result<TraceType>;
    /// Appends the tensors this value carries, in a fixed order.
    fn flatten(&self, out: &mut Vec<Tensor>);
    /// The value the closure sees while tracing `ty`: symbolic placeholders
    /// for tensors, the literal itself for host values.
    fn placeholder(ty: &TraceType) -> Result<Self>;
    /// Appends the variables this value carries, in a fixed order.
    fn variables(&self, _out: &mut Vec<Variable>) {}
}

thread_local! {
    /// Variable ids by first occurrence in the call whose types are being
    /// computed (which arguments share a variable is part of the type).
    static ALIASES: RefCell<Option<Vec<u64>>> = const { RefCell::new(None) };
    /// Stand-ins by alias index in the call being traced, so that one
    /// variable passed twice is one stand-in.
    static STAND_INS: RefCell<Option<Vec<Option<Variable>>>> = const { RefCell::new(None) };
    /// The variables actually passed to the call being traced, if known.
    static ACTUAL: RefCell<Vec<Variable>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` (the creation of placeholders) knowing the call's distinct
/// variable arguments, so each stand-in knows the variable it first stood
/// for (optimizers key their slot variables by it).
pub(crate) fn with_actual_variables<R>(variables: &[Variable], f: impl FnOnce() -> R) -> R {
    scoped(&ACTUAL, variables.to_vec(), f)
}

/// Runs `f` with a fresh aliasing scope (one per argument list).
pub(crate) fn alias_scope<R>(f: impl FnOnce() -> R) -> R {
    scoped(&ALIASES, Some(Vec::new()), f)
}

/// Runs `f` with a fresh set of variable stand-ins (one per trace).
pub(crate) fn stand_in_scope<R>(f: impl FnOnce() -> R) -> R {
    scoped(&STAND_INS, Some(Vec::new()), f)
}

/// Runs `f` with the thread-local `key` set to `value`, restoring the old
/// value on every exit, a panic in user code (a custom `Arg`) included.
fn scoped<T: 'static, R>(
    key: &'static std::thread::LocalKey<RefCell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: 'static> {
        key: &'static std::thread::LocalKey<RefCell<T>>,
        saved: Option<T>,
    }
    impl<T> Drop for Restore<T> {
        fn drop(&mut self) {
            if let Some(v) = self.saved.take() {
                self.key.with(|k| *k.borrow_mut() = v);
            }
        }
    }
    let saved = key.with(|k| k.replace(value));
    let _restore = Restore {
        key,
        saved: Some(saved),
    };
    f()
}

/// A variable is typed by dtype, shape and aliasing pattern; while tracing
/// the closure gets a stand-in whose reads and writes become the call's
/// reads and writes of whichever variable is passed.
impl Arg for Variable {
    fn trace_type(&self) -> Result<TraceType> {
        let alias = ALIASES.with(|a| {
            let mut a = a.borrow_mut();
            let ids = a.get_or_insert_with(Vec::new);
            match ids.iter().position(|id| *id == self.id()) {
                Some(i) => i,
                None => {
                    ids.push(self.id());
                    ids.len() - 1
                }
            }
        });
        Ok(TraceType::Variable(self.spec(alias)))
    }
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn placeholder(ty: &TraceType) -> Result<Self> {
        let TraceType::Variable(spec) = ty else {
            return Err(mismatch("variable", ty));
        };
        STAND_INS.with(|s| {
            let mut s = s.borrow_mut();
            let slots = s.get_or_insert_with(Vec::new);
            if slots.len() <= spec.alias {
                slots.resize(spec.alias + 1, None);
            }
            if let Some(v) = &slots[spec.alias] {
                return Ok(v.clone());
            }
            let actual = ACTUAL.with(|a| a.borrow().get(spec.alias).map(Variable::id));
            let v = Variable::stand_in(spec.alias, spec, actual)?;
            slots[spec.alias] = Some(v.clone());
            Ok(v)
        })
    }
    fn variables(&self, out: &mut Vec<Variable>) {
        out.push(self.clone());
    }
}

fn mismatch(expected: &str, ty: &TraceType) -> Error {
    Error::Type(format!("expected a {expected} trace type, got {ty}"))
}

impl Arg for Tensor {
    fn trace_type(&self) -> Result<TraceType> {
        Ok(TraceType::Tensor(TensorSpec {
            shape: self.shape(),
            dtype: self.dtype(),
            name: None,
        }))
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        out.push(self.clone());
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Tensor(spec) => {
                trace::placeholder(TensorType::new(spec.dtype, spec.shape.clone()))
            }
            other => Err(mismatch("tensor", other)),
        }
    }
}

macro_rules! literal_arg {
    ($($t:ty => $variant:ident($to:expr, $from:expr)),* $(,)?) => {$(
        impl Arg for $t {
            fn trace_type(&self) -> Result<TraceType> {
                let to: fn(&$t) -> Literal = $to;
                Ok(TraceType::Literal(to(self)))
            }
            fn flatten(&self, _out: &mut Vec<Tensor>) {}
            fn placeholder(ty: &TraceType) -> Result<Self> {
                let from: fn(&Literal) -> Option<$t> = $from;
                match ty {
                    TraceType::Literal(l) => from(l).ok_or_else(|| mismatch(stringify!($t), ty)),
                    other => Err(mismatch(stringify!($t), other)),
                }
            }
        }
    )*};
}

literal_arg! {
    i64 => Int(|v| Literal::Int(*v), |l| if let Literal::Int(v) = l { Some(*v) } else { None }),
    i32 => Int(|v| Literal::Int(*v as i64), |l| if let Literal::Int(v) = l { i32::try_from(*v).ok() } else { None }),
    usize => Int(|v| Literal::Int(*v as i64), |l| if let Literal::Int(v) = l { usize::try_from(*v).ok() } else { None }),
    f64 => Float(|v| Literal::Float(v.to_bits()), |l| if let Literal::Float(b) = l { Some(f64::from_bits(*b)) } else { None }),
    f32 => Float(|v| Literal::Float((*v as f64).to_bits()), |l| if let Literal::Float(b) = l { Some(f64::from_bits(*b) as f32) } else { None }),
    bool => Bool(|v| Literal::Bool(*v), |l| if let Literal::Bool(b) = l { Some(*b) } else { None }),
    String => Str(|v| Literal::Str(v.clone()), |l| if let Literal::Str(s) = l { Some(s.clone()) } else { None }),
    &'static str => Str(|v| Literal::Str(v.to_string()), |l| if let Literal::Str(s) = l { Some(intern(s)) } else { None }),
}

/// A `'static` copy of `s`, leaked once per distinct string (placeholders
/// for `&'static str` parameters need one; the set of such literals in a
/// program is small and fixed).
fn intern(s: &str) -> &'static str {
    use std::collections::HashSet;
    use std::sync::{LazyLock, Mutex};
    static INTERNED: LazyLock<Mutex<HashSet<&'static str>>> = LazyLock::new(Default::default);
    let mut set = INTERNED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(found) = set.get(s) {
        return found;
    }
    let leaked: &'static str = Box::leak(s.to_string().into_boxed_str());
    set.insert(leaked);
    leaked
}

impl<T: Arg> Arg for Vec<T> {
    fn variables(&self, out: &mut Vec<Variable>) {
        self.iter().for_each(|x| x.variables(out));
    }
    fn trace_type(&self) -> Result<TraceType> {
        Ok(TraceType::List(
            self.iter().map(Arg::trace_type).collect::<Result<_>>()?,
        ))
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.iter().for_each(|x| x.flatten(out));
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::List(items) => items.iter().map(T::placeholder).collect(),
            other => Err(mismatch("list", other)),
        }
    }
}

impl<T: Arg> Arg for Option<T> {
    fn variables(&self, out: &mut Vec<Variable>) {
        if let Some(x) = self {
            x.variables(out);
        }
    }
    fn trace_type(&self) -> Result<TraceType> {
        Ok(match self {
            None => TraceType::OptionNone,
            Some(x) => TraceType::OptionSome(Box::new(x.trace_type()?)),
        })
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        if let Some(x) = self {
            x.flatten(out);
        }
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::OptionNone => Ok(None),
            TraceType::OptionSome(inner) => Ok(Some(T::placeholder(inner)?)),
            other => Err(mismatch("option", other)),
        }
    }
}

impl<T: Arg> Arg for BTreeMap<String, T> {
    fn variables(&self, out: &mut Vec<Variable>) {
        self.values().for_each(|v| v.variables(out));
    }
    fn trace_type(&self) -> Result<TraceType> {
        let mut m = BTreeMap::new();
        for (k, v) in self {
            m.insert(k.clone(), v.trace_type()?);
        }
        Ok(TraceType::Dict(m))
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        self.values().for_each(|v| v.flatten(out));
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Dict(m) => m
                .iter()
                .map(|(k, t)| Ok((k.clone(), T::placeholder(t)?)))
                .collect(),
            other => Err(mismatch("dict", other)),
        }
    }
}

/// Maps with string keys are typed by key → value type regardless of
/// insertion order (the trace type sorts the keys).
impl<T: Arg, S: std::hash::BuildHasher + Default + 'static> Arg
    for std::collections::HashMap<String, T, S>
{
    fn trace_type(&self) -> Result<TraceType> {
        let mut m = BTreeMap::new();
        for (k, v) in self {
            m.insert(k.clone(), v.trace_type()?);
        }
        Ok(TraceType::Dict(m))
    }
    fn flatten(&self, out: &mut Vec<Tensor>) {
        let mut keys: Vec<&String> = self.keys().collect();
        keys.sort();
        keys.into_iter().for_each(|k| self[k].flatten(out));
    }
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Dict(m) => m
                .iter()
                .map(|(k, t)| Ok((k.clone(), T::placeholder(t)?)))
                .collect(),
            other => Err(mismatch("dict", other)),
        }
    }
}

macro_rules! tuple_arg {
    ($($name:ident),+) => {
        impl<$($name: Arg),+> Arg for ($($name,)+) {
            fn trace_type(&self) -> Result<TraceType> {
                #[allow(non_snake_case)]
                let ($($name,)+) = self;
                Ok(TraceType::Tuple(vec![$($name.trace_type()?),+]))
            }
            fn flatten(&self, out: &mut Vec<Tensor>) {
                #[allow(non_snake_case)]
                let ($($name,)+) = self;
                $($name.flatten(out);)+
            }
            fn variables(&self, out: &mut Vec<Variable>) {
                #[allow(non_snake_case)]
                let ($($name,)+) = self;
                $($name.variables(out);)+
            }
            fn placeholder(ty: &TraceType) -> Result<Self> {
                let TraceType::Tuple(items) = ty else { return Err(mismatch("tuple", ty)) };
                let mut it = items.iter();
                Ok(($($name::placeholder(it.next().ok_or_else(|| mismatch("longer tuple", ty))?)?,)+))
            }
        }
    };
}
tuple_arg!(A);
tuple_arg!(A, B);
tuple_arg!(A, B, C);
tuple_arg!(A, B, C, D);

/// Wraps a user value that has no tracing rules of its own: it is typed by
/// equality (and hash), so equal values share a trace and any other value
/// retraces, the way TensorFlow treats plain Python objects.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ByValue<T>(pub T);

#[derive(Debug)]
struct ByValueType<T>(T);

impl<T> CustomTraceType for ByValueType<T>
where
    T: Clone + PartialEq + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static,
{
    fn type_name(&self) -> &'static str {
        std::any::type_name::<T>()
    }
    fn is_subtype_of(&self, other: &dyn CustomTraceType) -> bool {
        self.equals(other)
    }
    fn most_specific_common_supertype(
        &self,
        other: &dyn CustomTraceType,
    ) -> Option<Arc<dyn CustomTraceType>> {
        self.equals(other)
            .then(|| Arc::new(ByValueType(self.0.clone())) as Arc<dyn CustomTraceType>)
    }
    fn equals(&self, other: &dyn CustomTraceType) -> bool {
        other
            .as_any()
            .downcast_ref::<ByValueType<T>>()
            .is_some_and(|o| o.0 == self.0)
    }
    fn hash_value(&self) -> u64 {
        use std::hash::{BuildHasher, BuildHasherDefault};
        BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(&self.0)
    }
    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl<T> Arg for ByValue<T>
where
    T: Clone + PartialEq + std::hash::Hash + std::fmt::Debug + Send + Sync + 'static,
{
    fn trace_type(&self) -> Result<TraceType> {
        Ok(TraceType::Custom(Arc::new(ByValueType(self.0.clone()))))
    }
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn placeholder(ty: &TraceType) -> Result<Self> {
        match ty {
            TraceType::Custom(c) => c
                .as_any()
                .downcast_ref::<ByValueType<T>>()
                .map(|v| ByValue(v.0.clone()))
                .ok_or_else(|| mismatch(std::any::type_name::<T>(), ty)),
            other => Err(mismatch(std::any::type_name::<T>(), other)),
        }
    }
}

/// What a call site may pass for a parameter of type `T`: the value itself,
/// or, for `Tensor` parameters, a host number (converted the way
/// `tf.convert_to_tensor` does: floats to f32, ints to i32 when they fit,
/// else i64) or a borrowed tensor.
pub trait IntoArg<T> {
    /// The parameter value (a host number becomes a scalar tensor).
    fn into_arg(self) -> Result<T>;
}

impl<T: Arg> IntoArg<T> for T {
    fn into_arg(self) -> Result<T> {
        Ok(self)
    }
}

impl IntoArg<Tensor> for &Tensor {
    fn into_arg(self) -> Result<Tensor> {
        Ok(self.clone())
    }
}

// Host numbers become scalars (constants while tracing).
impl IntoArg<Tensor> for f64 {
    fn into_arg(self) -> Result<Tensor> {
        scalar_as(Scalar::F64(self), DType::F32)
    }
}

impl IntoArg<Tensor> for i64 {
    fn into_arg(self) -> Result<Tensor> {
        let dtype = if i32::try_from(self).is_ok() {
            DType::I32
        } else {
            DType::I64
        };
        scalar_as(Scalar::I64(self), dtype)
    }
}

// The other host numbers people write as loop bounds and factors
// (`for_range(0, n as i32, 1, ..)`, `for i in 0..v.len()`): each through
// the conversion above, so every integer gives i32 when it fits.
impl IntoArg<Tensor> for f32 {
    fn into_arg(self) -> Result<Tensor> {
        f64::from(self).into_arg()
    }
}

macro_rules! integer_args {
    ($($ty:ty),*) => {$(
        impl IntoArg<Tensor> for $ty {
            fn into_arg(self) -> Result<Tensor> {
                match i64::try_from(self) {
                    Ok(v) => v.into_arg(),
                    Err(_) => Err(crate::error::Error::invalid(
                        "convert_to_tensor",
                        format!("{self} does not fit in an int64"),
                    )),
                }
            }
        }
    )*};
}

integer_args!(i32, u32, usize, u64);

impl IntoArg<Tensor> for bool {
    fn into_arg(self) -> Result<Tensor> {
        scalar_as(Scalar::Bool(self), DType::Bool)
    }
}

/// What `get_concrete_function` accepts for a parameter of type `T`: a
/// value of it, or a `TensorSpec` for a `Tensor` parameter.
pub trait IntoTraceType<T> {
    /// The trace type a parameter of this value (or spec) would have.
    fn into_trace_type(self) -> Result<TraceType>;
}

impl<T: Arg> IntoTraceType<T> for T {
    fn into_trace_type(self) -> Result<TraceType> {
        self.trace_type()
    }
}

impl IntoTraceType<Tensor> for TensorSpec {
    fn into_trace_type(self) -> Result<TraceType> {
        self.dtype.check_compilable()?;
        Ok(TraceType::Tensor(TensorSpec { name: None, ..self }))
    }
}

impl IntoTraceType<Tensor> for &Tensor {
    fn into_trace_type(self) -> Result<TraceType> {
        self.trace_type()
    }
}

/// A list of specs for a `Vec<Tensor>` parameter.
impl IntoTraceType<Vec<Tensor>> for Vec<TensorSpec> {
    fn into_trace_type(self) -> Result<TraceType> {
        let items = self
            .into_iter()
            .map(<TensorSpec as IntoTraceType<Tensor>>::into_trace_type);
        Ok(TraceType::List(items.collect::<Result<_>>()?))
    }
}

/// A shared object passed to a function (an optimizer, a model): typed by
/// identity, so the same `Arc` shares a trace and another object retraces,
/// the way TensorFlow treats plain Python objects.
pub struct Shared<T>(pub Arc<T>);

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T> std::ops::Deref for Shared<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// An `Arc` compared and hashed by address: `Shared`'s trace type is
/// `ByValue`'s rule applied to the object's identity.
struct Identity<T>(Arc<T>);

impl<T> Clone for Identity<T> {
    fn clone(&self) -> Self {
        Identity(self.0.clone())
    }
}

impl<T> PartialEq for Identity<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl<T> std::hash::Hash for Identity<T> {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        (Arc::as_ptr(&self.0) as *const () as usize).hash(state);
    }
}

impl<T> std::fmt::Debug for Identity<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "Shared<{}>@{:p}",
            std::any::type_name::<T>(),
            Arc::as_ptr(&self.0)
        )
    }
}

impl<T: Send + Sync + 'static> Arg for Shared<T> {
    fn trace_type(&self) -> Result<TraceType> {
        ByValue(Identity(self.0.clone())).trace_type()
    }
    fn flatten(&self, _out: &mut Vec<Tensor>) {}
    fn placeholder(ty: &TraceType) -> Result<Self> {
        Ok(Shared(ByValue::<Identity<T>>::placeholder(ty)?.0.0))
    }
}
