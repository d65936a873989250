//! Trace types: the lattice that decides when a traced graph may be reused.
//!
//! Layer: function. Imports only `dtype`, `ir::Shape`, `error` and the
//! `VariableSpec` a variable states its own type with (`variable`);
//! nothing about graphs, lowering or the runtime, so the rules can be
//! tested alone.
//!
//! The rules are TensorFlow's (`tensorflow/core/function/trace_type`):
//! 1. A tensor's type is its dtype and shape. `T1 <: T2` when the dtypes are
//!    equal and the shape of `T1` is at least as specific: `T2` has unknown
//!    rank, or the same rank with every dimension unknown or equal.
//! 2. Host literals (ints, floats, bools, strings) are typed by value: a
//!    literal is a subtype only of itself.
//! 3. Tuples and lists are typed by their elements in order (same length);
//!    maps by key → element type, regardless of insertion order.
//! 4. `None` and `Some(_)` of an `Option` are different types.
//! 5. User types bring their own rules through [`CustomTraceType`].
//!
//! The most specific common supertype of tensor types widens differing
//! dimensions to unknown and differing ranks to unknown rank; literals have
//! one only when they are all equal.

use crate::dtype::DType;
use crate::ir::{Shape, shape_is_subtype, shape_supertype};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;

/// The type of a tensor argument: TensorFlow's `TensorSpec`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TensorSpec {
    /// The shape, possibly with unknown dimensions or unknown rank.
    pub shape: Shape,
    /// The element type (always exact: dtypes are never widened).
    pub dtype: DType,
    /// The parameter name signatures print; ignored by subtyping.
    pub name: Option<String>,
}

impl TensorSpec {
    /// A spec with the given dims (`None` = unknown).
    pub fn new(dims: &[Option<i64>], dtype: DType) -> TensorSpec {
        TensorSpec {
            shape: Shape::from_dims(dims.to_vec()),
            dtype,
            name: None,
        }
    }

    /// A spec of fully known shape.
    pub fn known(dims: &[i64], dtype: DType) -> TensorSpec {
        TensorSpec {
            shape: Shape::known(dims),
            dtype,
            name: None,
        }
    }

    /// A spec whose rank is unknown.
    pub fn unknown_rank(dtype: DType) -> TensorSpec {
        TensorSpec {
            shape: Shape::unknown_rank(),
            dtype,
            name: None,
        }
    }

    /// The same spec with a name (used in signatures).
    pub fn named(mut self, name: impl Into<String>) -> TensorSpec {
        self.name = Some(name.into());
        self
    }

    /// Is every value of `self` also a value of `other`? (Names are ignored.)
    pub fn is_subtype_of(&self, other: &TensorSpec) -> bool {
        self.dtype == other.dtype && shape_is_subtype(&self.shape, &other.shape)
    }

    /// The most specific spec both fit, if the dtypes agree.
    pub fn common_supertype(&self, other: &TensorSpec) -> Option<TensorSpec> {
        (self.dtype == other.dtype).then(|| TensorSpec {
            shape: shape_supertype(&self.shape, &other.shape),
            dtype: self.dtype,
            name: if self.name == other.name {
                self.name.clone()
            } else {
                None
            },
        })
    }
}

/// `TensorSpec(shape=(None,), dtype=i32, name=None)`.
impl fmt::Display for TensorSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = self
            .name
            .as_deref()
            .map_or("None".to_string(), |n| format!("'{n}'"));
        write!(
            f,
            "TensorSpec(shape={}, dtype={}, name={name})",
            self.shape, self.dtype
        )
    }
}

pub use crate::variable::VariableSpec;

/// A host value that is part of a function's type by value.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Literal {
    /// An `i64`, `i32` or `usize` argument.
    Int(i64),
    /// Stored as bits so the type can be hashed; `-0.0` and `0.0` differ.
    Float(u64),
    /// A `bool` argument.
    Bool(bool),
    /// A `String` or `&'static str` argument.
    Str(String),
}

impl fmt::Display for Literal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Literal::Int(v) => write!(f, "{v}"),
            Literal::Float(bits) => write!(f, "{:?}", f64::from_bits(*bits)),
            Literal::Bool(true) => f.write_str("True"),
            Literal::Bool(false) => f.write_str("False"),
            Literal::Str(s) => write!(f, "'{s}'"),
        }
    }
}

/// The tracing protocol for user types (TensorFlow's `TraceType`).
pub trait CustomTraceType: fmt::Debug + Send + Sync {
    /// A stable name of the Rust type, so values of different types never
    /// compare as the same trace type.
    fn type_name(&self) -> &'static str;
    /// Is every value of `self` also a value of `other` (same `type_name`)?
    fn is_subtype_of(&self, other: &dyn CustomTraceType) -> bool;
    /// The most specific type both fit, if any.
    fn most_specific_common_supertype(
        &self,
        other: &dyn CustomTraceType,
    ) -> Option<Arc<dyn CustomTraceType>>;
    /// Equality, for the dispatch cache's exact lookups.
    fn equals(&self, other: &dyn CustomTraceType) -> bool;
    /// A hash consistent with `equals`.
    fn hash_value(&self) -> u64;
    /// Lets implementations downcast `other` in the methods above.
    fn as_any(&self) -> &dyn std::any::Any;
}

/// The trace type of one argument.
#[derive(Clone, Debug)]
pub enum TraceType {
    /// A `Tensor` argument: its dtype and (possibly relaxed) shape.
    Tensor(TensorSpec),
    /// A host number, bool or string, typed by its value.
    Literal(Literal),
    /// A Rust tuple: its elements' types in order.
    Tuple(Vec<TraceType>),
    /// A `Vec`: its elements' types in order (the length is part of the type).
    List(Vec<TraceType>),
    /// A `BTreeMap` or `HashMap` with `String` keys: key → value type.
    Dict(BTreeMap<String, TraceType>),
    /// `None` of an `Option` argument.
    OptionNone,
    /// `Some(x)` of an `Option` argument, typed by `x`.
    OptionSome(Box<TraceType>),
    /// A `Variable` argument: typed by dtype, shape and aliasing pattern.
    Variable(VariableSpec),
    /// A user type's own trace type (`CustomTraceType`), e.g. `ByValue`.
    Custom(Arc<dyn CustomTraceType>),
}

impl PartialEq for TraceType {
    fn eq(&self, other: &Self) -> bool {
        use TraceType::*;
        match (self, other) {
            (Tensor(a), Tensor(b)) => a == b,
            (Literal(a), Literal(b)) => a == b,
            (Tuple(a), Tuple(b)) | (List(a), List(b)) => a == b,
            (Dict(a), Dict(b)) => a == b,
            (OptionNone, OptionNone) => true,
            (OptionSome(a), OptionSome(b)) => a == b,
            (Variable(a), Variable(b)) => a == b,
            (Custom(a), Custom(b)) => a.type_name() == b.type_name() && a.equals(b.as_ref()),
            _ => false,
        }
    }
}
impl Eq for TraceType {}

impl std::hash::Hash for TraceType {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        use TraceType::*;
        std::mem::discriminant(self).hash(state);
        match self {
            Tensor(t) => t.hash(state),
            Literal(l) => l.hash(state),
            Tuple(v) | List(v) => v.hash(state),
            Dict(m) => m.hash(state),
            OptionNone => {}
            OptionSome(t) => t.hash(state),
            Variable(v) => v.hash(state),
            Custom(c) => {
                c.type_name().hash(state);
                c.hash_value().hash(state);
            }
        }
    }
}

fn all_pairs(a: &[TraceType], b: &[TraceType], f: impl Fn(&TraceType, &TraceType) -> bool) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| f(x, y))
}

fn pairwise_supertype(a: &[TraceType], b: &[TraceType]) -> Option<Vec<TraceType>> {
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| x.common_supertype(y))
        .collect()
}

impl TraceType {
    /// Is every value of `self` also a value of `other`?
    pub fn is_subtype_of(&self, other: &TraceType) -> bool {
        use TraceType::*;
        match (self, other) {
            (Tensor(a), Tensor(b)) => a.is_subtype_of(b),
            (Literal(a), Literal(b)) => a == b,
            (Tuple(a), Tuple(b)) | (List(a), List(b)) => all_pairs(a, b, TraceType::is_subtype_of),
            (Dict(a), Dict(b)) => {
                a.len() == b.len()
                    && a.iter()
                        .all(|(k, v)| b.get(k).is_some_and(|w| v.is_subtype_of(w)))
            }
            (OptionNone, OptionNone) => true,
            (OptionSome(a), OptionSome(b)) => a.is_subtype_of(b),
            (Variable(a), Variable(b)) => a == b,
            (Custom(a), Custom(b)) => a.type_name() == b.type_name() && a.is_subtype_of(b.as_ref()),
            _ => false,
        }
    }

    /// The most specific type that both `self` and `other` are subtypes of.
    pub fn common_supertype(&self, other: &TraceType) -> Option<TraceType> {
        use TraceType::*;
        Some(match (self, other) {
            (Tensor(a), Tensor(b)) => Tensor(a.common_supertype(b)?),
            (Literal(a), Literal(b)) => (a == b).then(|| Literal(a.clone()))?,
            (Tuple(a), Tuple(b)) => Tuple(pairwise_supertype(a, b)?),
            (List(a), List(b)) => List(pairwise_supertype(a, b)?),
            (Dict(a), Dict(b)) if a.len() == b.len() => {
                let mut out = BTreeMap::new();
                for (k, v) in a {
                    out.insert(k.clone(), v.common_supertype(b.get(k)?)?);
                }
                Dict(out)
            }
            (OptionNone, OptionNone) => OptionNone,
            (OptionSome(a), OptionSome(b)) => OptionSome(Box::new(a.common_supertype(b)?)),
            (Variable(a), Variable(b)) => (a == b).then(|| Variable(a.clone()))?,
            (Custom(a), Custom(b)) if a.type_name() == b.type_name() => {
                Custom(a.most_specific_common_supertype(b.as_ref())?)
            }
            _ => return None,
        })
    }
}

/// Python-like spelling used in signatures: `TensorSpec(...)`,
/// `Literal[2]`, `Tuple[...]`, `List[...]`, `Dict[...]`.
impl fmt::Display for TraceType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use TraceType::*;
        let join = |v: &[TraceType]| {
            v.iter()
                .map(|t| t.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            Tensor(t) => write!(f, "{t}"),
            Literal(l) => write!(f, "Literal[{l}]"),
            Tuple(v) => write!(f, "Tuple[{}]", join(v)),
            List(v) => write!(f, "List[{}]", join(v)),
            Dict(m) => {
                let items: Vec<String> = m.iter().map(|(k, v)| format!("'{k}': {v}")).collect();
                write!(f, "Dict[{}]", items.join(", "))
            }
            OptionNone => f.write_str("None"),
            OptionSome(t) => write!(f, "{t}"),
            Variable(v) => write!(f, "{v}"),
            Custom(c) => write!(f, "{c:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(dims: &[Option<i64>]) -> TraceType {
        TraceType::Tensor(TensorSpec::new(dims, DType::F32))
    }

    #[test]
    fn tensor_subtyping_follows_the_shape_lattice() {
        let (a, b, c) = (
            t(&[Some(1), Some(2)]),
            t(&[Some(1), None]),
            t(&[None, None]),
        );
        let top = TraceType::Tensor(TensorSpec::unknown_rank(DType::F32));
        assert!(a.is_subtype_of(&b) && b.is_subtype_of(&c) && c.is_subtype_of(&top));
        assert!(a.is_subtype_of(&c) && a.is_subtype_of(&a));
        assert!(!b.is_subtype_of(&a) && !top.is_subtype_of(&c));
        assert!(!t(&[Some(3)]).is_subtype_of(&t(&[None, None])));
        let ints = TraceType::Tensor(TensorSpec::new(&[None], DType::I32));
        assert!(!t(&[Some(3)]).is_subtype_of(&ints));
    }

    #[test]
    fn common_supertype_widens_dims_then_rank() {
        assert_eq!(
            t(&[Some(3)]).common_supertype(&t(&[Some(5)])),
            Some(t(&[None]))
        );
        assert_eq!(
            t(&[Some(3), Some(4)]).common_supertype(&t(&[Some(3), Some(5)])),
            Some(t(&[Some(3), None]))
        );
        let top = TraceType::Tensor(TensorSpec::unknown_rank(DType::F32));
        assert_eq!(
            t(&[Some(3)]).common_supertype(&t(&[Some(3), Some(1)])),
            Some(top)
        );
        let ints = TraceType::Tensor(TensorSpec::new(&[Some(3)], DType::I32));
        assert_eq!(t(&[Some(3)]).common_supertype(&ints), None);
    }

    #[test]
    fn literals_are_typed_by_value() {
        let two = TraceType::Literal(Literal::Int(2));
        let three = TraceType::Literal(Literal::Int(3));
        assert!(two.is_subtype_of(&two) && !two.is_subtype_of(&three));
        assert_eq!(two.common_supertype(&three), None);
        assert_eq!(two.to_string(), "Literal[2]");
        assert_ne!(
            TraceType::Literal(Literal::Float(1f64.to_bits())),
            TraceType::Literal(Literal::Int(1))
        );
    }

    #[test]
    fn containers_compare_by_position_and_maps_by_key() {
        let tup = |x, y| TraceType::Tuple(vec![x, y]);
        assert!(tup(t(&[Some(1)]), t(&[Some(2)])).is_subtype_of(&tup(t(&[None]), t(&[None]))));
        assert!(
            !TraceType::Tuple(vec![t(&[None])]).is_subtype_of(&TraceType::List(vec![t(&[None])]))
        );
        let dict = |pairs: Vec<(&str, TraceType)>| {
            TraceType::Dict(pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
        };
        let d1 = dict(vec![("a", t(&[Some(1)])), ("b", t(&[Some(2)]))]);
        let d2 = dict(vec![("b", t(&[Some(2)])), ("a", t(&[Some(1)]))]);
        assert_eq!(d1, d2);
        let wide = dict(vec![("a", t(&[None])), ("b", t(&[Some(2)]))]);
        assert!(d1.is_subtype_of(&wide));
        assert!(!d1.is_subtype_of(&dict(vec![("a", t(&[None]))])));
        assert!(!TraceType::OptionNone.is_subtype_of(&TraceType::OptionSome(Box::new(t(&[None])))));
    }

    #[test]
    fn specs_print_like_tensorflow() {
        assert_eq!(
            TensorSpec::new(&[None], DType::I32).to_string(),
            "TensorSpec(shape=(None,), dtype=i32, name=None)"
        );
        assert_eq!(
            TensorSpec::known(&[2, 2], DType::F32)
                .named("x")
                .to_string(),
            "TensorSpec(shape=(2, 2), dtype=f32, name='x')"
        );
        assert_eq!(
            TensorSpec::unknown_rank(DType::F32).to_string(),
            "TensorSpec(shape=<unknown>, dtype=f32, name=None)"
        );
    }
}
