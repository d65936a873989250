//! The dispatch table: which cached concrete function serves a call.
//!
//! A function type here is the list of its arguments' trace types. The rules,
//! in order (TensorFlow's `type_dispatch.py`):
//! 1. Candidates are the entries whose type is a supertype of the call's.
//! 2. Among candidates, the most specific wins: one that is a subtype of
//!    every other candidate it is comparable with.
//! 3. Among equally specific or incomparable candidates, the first inserted
//!    wins.
//! 4. No candidate: the caller traces. Under `reduce_retracing` it traces
//!    a generalized type (`generalize`): starting from the call's type, it
//!    widens to the most specific common supertype with each cached type in
//!    turn (skipping those it has none with), so a second shape already
//!    produces a trace general enough for the third.

use super::trace_type::TraceType;

/// A function type: the trace types of the positional arguments.
pub type FunctionType = Vec<TraceType>;

/// Is every argument of `a` a subtype of the matching argument of `b`?
pub fn is_subtype(a: &[TraceType], b: &[TraceType]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.is_subtype_of(y))
}

/// The most specific common supertype, argument by argument.
pub fn common_supertype(a: &[TraceType], b: &[TraceType]) -> Option<FunctionType> {
    if a.len() != b.len() {
        return None;
    }
    a.iter()
        .zip(b)
        .map(|(x, y)| x.common_supertype(y))
        .collect()
}

/// Cached entries in insertion order, looked up by subtyping.
#[derive(Debug)]
pub struct DispatchTable<T> {
    entries: Vec<(FunctionType, T)>,
}

impl<T> Default for DispatchTable<T> {
    fn default() -> Self {
        DispatchTable {
            entries: Vec::new(),
        }
    }
}

impl<T> DispatchTable<T> {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of cached entries (concrete functions traced so far).
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether nothing has been cached yet.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Adds an entry (after existing ones: it loses ties).
    pub fn insert(&mut self, ty: FunctionType, value: T) {
        self.entries.push((ty, value));
    }

    /// The entry that serves a call of type `call` (rules 1-3).
    pub fn lookup(&self, call: &[TraceType]) -> Option<(&FunctionType, &T)> {
        let strictly_narrower =
            |a: &FunctionType, b: &FunctionType| is_subtype(a, b) && !is_subtype(b, a);
        let mut best: Option<&(FunctionType, T)> = None;
        for entry in self.entries.iter().filter(|(ty, _)| is_subtype(call, ty)) {
            best = match best {
                Some(b) if !strictly_narrower(&entry.0, &b.0) => Some(b),
                _ => Some(entry),
            };
        }
        best.map(|(ty, v)| (ty, v))
    }

    /// The type to trace for `call` under `reduce_retracing` (rule 4).
    pub fn generalize(&self, call: &[TraceType]) -> FunctionType {
        self.entries.iter().fold(call.to_vec(), |relaxed, (ty, _)| {
            common_supertype(&relaxed, ty).unwrap_or(relaxed)
        })
    }

    /// All entries in insertion order.
    pub fn entries(&self) -> impl Iterator<Item = (&FunctionType, &T)> {
        self.entries.iter().map(|(t, v)| (t, v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::function::trace_type::TensorSpec;

    fn t(dims: &[Option<i64>]) -> TraceType {
        TraceType::Tensor(TensorSpec::new(dims, DType::F32))
    }

    #[test]
    fn most_specific_supertype_wins() {
        let mut table = DispatchTable::new();
        table.insert(vec![t(&[None, None])], "wide");
        table.insert(vec![t(&[Some(1), None])], "narrow");
        assert_eq!(
            table.lookup(&[t(&[Some(1), Some(2)])]).unwrap().1,
            &"narrow"
        );
        assert_eq!(table.lookup(&[t(&[Some(3), Some(2)])]).unwrap().1, &"wide");
        assert!(table.lookup(&[t(&[Some(3)])]).is_none());
    }

    #[test]
    fn incomparable_candidates_go_to_the_first_inserted() {
        let mut table = DispatchTable::new();
        table.insert(vec![t(&[Some(1), None])], "first");
        table.insert(vec![t(&[None, Some(2)])], "second");
        assert_eq!(table.lookup(&[t(&[Some(1), Some(2)])]).unwrap().1, &"first");
    }

    #[test]
    fn generalize_widens_against_the_cache() {
        let mut table = DispatchTable::new();
        assert_eq!(table.generalize(&[t(&[Some(3)])]), vec![t(&[Some(3)])]);
        table.insert(vec![t(&[Some(3)])], ());
        assert_eq!(table.generalize(&[t(&[Some(5)])]), vec![t(&[None])]);
    }
}
