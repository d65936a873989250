//! `jax.lax.associative_scan`: every prefix of a sequence combined with an
//! associative function, in `O(log n)` rounds of whole-array ops instead
//! of `n` dependent steps.
//!
//! The sequence is split into its pairs, which are combined at once; the
//! scan of those (half as long) gives the prefixes ending at odd
//! positions, and one more combination gives the even ones; the two are
//! interleaved. Every round is strided slices, one call of the function on
//! whole arrays, and a stack: nothing loops on the device, and gradients
//! follow from those ops. The function must be associative; it need not
//! be commutative (its left operand always comes first in the sequence).
//!
//! Layer: control. Imports `tensor` ops.

use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// The inclusive prefixes of `elems` along `axis` under the associative
/// `f` (`jax.lax.associative_scan(f, elems, reverse, axis)`): output `i`
/// combines elements `0..=i`. With `reverse` it combines `i..n`, as JAX's
/// does: the scan of the reversed sequence, reversed back, so `f`'s left
/// operand is then the later element. `elems` is a list
/// of tensors scanned together, all with the same length along `axis`;
/// `f(a, b)` combines two lists of the same structure, whose tensors hold
/// any number of consecutive elements along `axis` (the earlier ones in
/// `a`), and returns a list of tensors of `a`'s types.
///
/// ```
/// use xlafn::prelude::*;
/// use xlafn::control::associative_scan;
/// let x = Tensor::vector(&[1f32, 2., 3., 4., 5.])?;
/// let sums = associative_scan(|a, b| Ok(vec![a[0].add(&b[0])?]), &[x], false, 0)?;
/// assert_eq!(sums[0].to_vec::<f32>()?, vec![1., 3., 6., 10., 15.]);
/// # Ok::<(), xlafn::Error>(())
/// ```
pub fn associative_scan(
    f: impl Fn(&[Tensor], &[Tensor]) -> Result<Vec<Tensor>>,
    elems: &[Tensor],
    reverse: bool,
    axis: i64,
) -> Result<Vec<Tensor>> {
    let first = elems
        .first()
        .ok_or_else(|| Error::invalid("associative_scan", "needs at least one tensor to scan"))?;
    let rank = first.rank() as i64;
    let a = if axis < 0 { axis + rank } else { axis };
    let mut length = None;
    for (i, x) in elems.iter().enumerate() {
        let dims = x.shape().as_known().ok_or_else(|| {
            Error::invalid(
                "associative_scan",
                format!("elems[{i}] needs a known shape, got {}", x.tensor_type()),
            )
        })?;
        if a < 0 || a >= dims.len() as i64 || dims.len() as i64 != rank {
            return Err(Error::invalid(
                "associative_scan",
                format!(
                    "axis {axis} is out of range for elems[{i}], {} (every tensor needs it)",
                    x.tensor_type()
                ),
            ));
        }
        let n = dims[a as usize];
        if *length.get_or_insert(n) != n {
            return Err(Error::invalid(
                "associative_scan",
                format!(
                    "elems[{i}] has {n} elements along axis {axis}, elems[0] has {}",
                    length.unwrap_or(n)
                ),
            ));
        }
    }
    // The scanned axis first; a reverse scan is the scan of the reversed
    // sequence, reversed back (as JAX's: `f` then sees the later element
    // of the original order as its left operand).
    let mut perm: Vec<i64> = (0..rank).collect();
    perm.remove(a as usize);
    perm.insert(0, a);
    let mut back: Vec<i64> = vec![0; rank as usize];
    for (i, p) in perm.iter().enumerate() {
        back[*p as usize] = i as i64;
    }
    let flip = |x: Tensor| -> Result<Tensor> { if reverse { x.reverse(&[0]) } else { Ok(x) } };
    let front: Vec<Tensor> = elems
        .iter()
        .map(|x| flip(x.transpose(&perm)?))
        .collect::<Result<_>>()?;
    // `f` sees its operands in the input's layout.
    let combine = |lo: &[Tensor], hi: &[Tensor]| -> Result<Vec<Tensor>> {
        let layout = |v: &[Tensor]| -> Result<Vec<Tensor>> {
            v.iter().map(|x| x.transpose(&back)).collect()
        };
        let lo = layout(lo)?;
        let out = f(&lo, &layout(hi)?)?;
        if out.len() != lo.len()
            || out
                .iter()
                .zip(&lo)
                .any(|(o, l)| o.dtype() != l.dtype() || o.dims() != l.dims())
        {
            let types = |v: &[Tensor]| -> Vec<String> {
                v.iter().map(|t| t.tensor_type().to_string()).collect()
            };
            return Err(Error::invalid(
                "associative_scan",
                format!(
                    "the function must return its operands' types, [{}]; got [{}]",
                    types(&lo).join(", "),
                    types(&out).join(", ")
                ),
            ));
        }
        out.iter().map(|x| x.transpose(&perm)).collect()
    };
    scan_front(&combine, &front)?
        .into_iter()
        .map(|x| flip(x)?.transpose(&back))
        .collect()
}

/// `x[start..end:step]` along axis 0.
fn every_other(x: &Tensor, start: i64, end: i64) -> Result<Tensor> {
    let dims = x.dims();
    let mut begin = vec![0; dims.len()];
    let mut stop = dims.clone();
    let mut strides = vec![1; dims.len()];
    begin[0] = start;
    stop[0] = end;
    strides[0] = 2;
    x.strided_slice(&begin, &stop, &strides)
}

/// The combining function, on lists of tensors.
type Combine<'a> = dyn Fn(&[Tensor], &[Tensor]) -> Result<Vec<Tensor>> + 'a;

/// The prefix scan along axis 0 (see the module docs).
fn scan_front(f: &Combine<'_>, elems: &[Tensor]) -> Result<Vec<Tensor>> {
    let n = elems[0].dims()[0];
    if n < 2 {
        return Ok(elems.to_vec());
    }
    let pick = |start: i64, end: i64| -> Result<Vec<Tensor>> {
        elems.iter().map(|x| every_other(x, start, end)).collect()
    };
    // Pairs (0,1), (2,3), ... combined: their scan gives the odd prefixes.
    let odd = scan_front(f, &f(&pick(0, n - 1)?, &pick(1, n)?)?)?;
    // Each even prefix is the odd prefix before it with one element more.
    let before: Vec<Tensor> = odd
        .iter()
        .map(|x| x.slice_axis0(0, (n - 1) / 2))
        .collect::<Result<_>>()?;
    let even_rest = f(&before, &pick(2, n)?)?;
    elems
        .iter()
        .zip(even_rest)
        .zip(&odd)
        .map(|((x, rest), odd)| {
            let even = Tensor::concat(&[x.slice_axis0(0, 1)?, rest], 0)?;
            interleave(&even, odd)
        })
        .collect()
}

/// `even[0], odd[0], even[1], odd[1], ...` along axis 0; `even` may be one
/// longer.
fn interleave(even: &Tensor, odd: &Tensor) -> Result<Tensor> {
    let (ne, no) = (even.dims()[0], odd.dims()[0]);
    let mut dims = odd.dims();
    dims[0] = 2 * no;
    let pairs = Tensor::stack(&[even.slice_axis0(0, no)?, odd.clone()], 1)?.reshape(&dims)?;
    if ne == no {
        Ok(pairs)
    } else {
        Tensor::concat(&[pairs, even.slice_axis0(no, 1)?], 0)
    }
}

trait SliceAxis0 {
    fn slice_axis0(&self, start: i64, len: i64) -> Result<Tensor>;
}

impl SliceAxis0 for Tensor {
    /// `len` elements from `start` along axis 0.
    fn slice_axis0(&self, start: i64, len: i64) -> Result<Tensor> {
        let mut begin = vec![0; self.rank()];
        let mut size = self.dims();
        begin[0] = start;
        size[0] = len;
        self.slice(&begin, &size)
    }
}
