//! Shapes whose rank or dimensions may be unknown, as in TensorFlow's
//! `TensorShape`: `Shape::unknown_rank()` is `TensorShape(None)`, a `None`
//! dimension is an unknown size. Concrete programs (lowering, eager) only
//! ever see fully known shapes; tracing may carry unknowns.

use std::fmt;

/// One dimension: `Some(n)` or unknown.
pub type Dim = Option<i64>;

/// A shape with possibly unknown rank or dimensions.
#[derive(Clone, PartialEq, Eq, Hash, Debug, serde::Serialize, serde::Deserialize)]
pub struct Shape(Option<Vec<Dim>>);

impl Shape {
    /// A fully known shape.
    pub fn known(dims: &[i64]) -> Shape {
        Shape(Some(dims.iter().map(|&d| Some(d)).collect()))
    }

    /// A shape of known rank with some dimensions unknown.
    pub fn from_dims(dims: Vec<Dim>) -> Shape {
        Shape(Some(dims))
    }

    /// Rank and dimensions unknown.
    pub fn unknown_rank() -> Shape {
        Shape(None)
    }

    pub fn scalar() -> Shape {
        Shape(Some(Vec::new()))
    }

    pub fn rank(&self) -> Option<usize> {
        self.0.as_ref().map(Vec::len)
    }

    pub fn dims(&self) -> Option<&[Dim]> {
        self.0.as_deref()
    }

    /// The dimensions if every one is known.
    pub fn as_known(&self) -> Option<Vec<i64>> {
        self.0.as_ref()?.iter().copied().collect()
    }

    pub fn is_fully_known(&self) -> bool {
        self.as_known().is_some()
    }

    /// Number of elements, when known.
    pub fn num_elements(&self) -> Option<i64> {
        self.as_known().map(|d| d.iter().product())
    }
}

impl From<&[i64]> for Shape {
    fn from(dims: &[i64]) -> Shape {
        Shape::known(dims)
    }
}

/// TensorFlow's spelling: `(2, None)`, `()`, `(3,)`, `<unknown>`.
impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Some(dims) = &self.0 else {
            return f.write_str("<unknown>");
        };
        let parts: Vec<String> = dims
            .iter()
            .map(|d| d.map_or("None".into(), |n| n.to_string()))
            .collect();
        match parts.len() {
            1 => write!(f, "({},)", parts[0]),
            _ => write!(f, "({})", parts.join(", ")),
        }
    }
}

/// NumPy broadcasting of two shapes; `None` if they are incompatible.
/// Unknown dimensions broadcast optimistically: against 1 they stay
/// unknown, against n > 1 they become n (a mismatch would fail at run time
/// in TensorFlow; under XLA it fails when the concrete shape is compiled).
pub fn broadcast_shapes(a: &Shape, b: &Shape) -> Option<Shape> {
    let (Some(a), Some(b)) = (a.dims(), b.dims()) else {
        return Some(Shape::unknown_rank());
    };
    let rank = a.len().max(b.len());
    let pad = |d: &[Dim], i: usize| -> Dim {
        let off = rank - d.len();
        if i < off { Some(1) } else { d[i - off] }
    };
    let mut out = Vec::with_capacity(rank);
    for i in 0..rank {
        let d = match (pad(a, i), pad(b, i)) {
            (Some(x), Some(y)) if x == y => Some(x),
            (Some(1), y) => y,
            (x, Some(1)) => x,
            (Some(_), Some(_)) => return None,
            (None, Some(y)) | (Some(y), None) => Some(y),
            (None, None) => None,
        };
        out.push(d);
    }
    Some(Shape::from_dims(out))
}

/// Is every array of shape `sub` also of shape `sup`? Unknown rank is the
/// top; an unknown dimension accepts any size.
pub fn shape_is_subtype(sub: &Shape, sup: &Shape) -> bool {
    match (sub.dims(), sup.dims()) {
        (_, None) => true,
        (None, Some(_)) => false,
        (Some(a), Some(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| y.is_none() || x == y)
        }
    }
}

/// The most specific shape both fit: differing dimensions become unknown,
/// differing ranks an unknown rank.
pub fn shape_supertype(a: &Shape, b: &Shape) -> Shape {
    match (a.dims(), b.dims()) {
        (Some(x), Some(y)) if x.len() == y.len() => Shape::from_dims(
            x.iter()
                .zip(y)
                .map(|(p, q)| if p == q { *p } else { None })
                .collect(),
        ),
        _ => Shape::unknown_rank(),
    }
}

/// The most specific shape compatible with both, or `None` if they
/// disagree on the rank or on a known dimension.
pub fn merge_shapes(a: &Shape, b: &Shape) -> Option<Shape> {
    let (Some(x), Some(y)) = (a.dims(), b.dims()) else {
        return Some(if a.rank().is_some() {
            a.clone()
        } else {
            b.clone()
        });
    };
    if x.len() != y.len() {
        return None;
    }
    let dims = x.iter().zip(y).map(|(p, q)| match (p, q) {
        (Some(p), Some(q)) if p != q => Err(()),
        (Some(p), _) | (_, Some(p)) => Ok(Some(*p)),
        (None, None) => Ok(None),
    });
    dims.collect::<std::result::Result<Vec<_>, ()>>()
        .ok()
        .map(Shape::from_dims)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_merge_to_the_most_specific_compatible_one() {
        let s = |d: &[Option<i64>]| Shape::from_dims(d.to_vec());
        assert_eq!(
            merge_shapes(&s(&[None, Some(3)]), &s(&[Some(2), None])),
            Some(s(&[Some(2), Some(3)]))
        );
        assert_eq!(
            merge_shapes(&Shape::unknown_rank(), &s(&[Some(1)])),
            Some(s(&[Some(1)]))
        );
        assert_eq!(
            merge_shapes(&s(&[Some(1)]), &Shape::unknown_rank()),
            Some(s(&[Some(1)]))
        );
        assert_eq!(merge_shapes(&s(&[Some(1)]), &s(&[Some(2)])), None);
        assert_eq!(merge_shapes(&s(&[Some(1)]), &s(&[Some(1), Some(1)])), None);
    }
}
