//! `einsum` in TensorFlow/NumPy notation (`"ij,jk->ik"`), planned onto
//! existing ops, so eager mode, tracing and gradients come from theirs.
//!
//! Notation: each operand's subscripts are ASCII letters with at most one
//! `...`, which stands for that operand's remaining (leading, trailing or
//! middle) dimensions; ellipsis dimensions broadcast NumPy-style
//! (right-aligned, size 1 stretches). Without `->` the output is the
//! ellipsis dimensions followed by the letters that appear exactly once,
//! in ASCII order (so `"ba"` transposes and `"ii"` is a trace). A letter
//! repeated within one operand takes a diagonal (`"ii->i"`); letters
//! absent from the output are summed over. Letters' sizes must agree
//! exactly (only ellipsis dimensions broadcast), as in TensorFlow.
//!
//! Plan, per operand: drop ellipsis dimensions of size 1 that broadcast
//! against a larger size (`squeeze`: a broadcast dimension is one the
//! operand does not have), take diagonals of repeated letters (a `select`
//! against an `iota`-equality mask, then `reduce_sum`), and sum letters no
//! other operand or the output uses. Then contract left to right with one
//! `dot_general` per pair (shared letters still needed later become batch
//! dimensions, the others are contracted), and finally `transpose` into
//! the output order.
//!
//! [`einsum_preferred`] accumulates in, and returns, a wider dtype than
//! the operands' (JAX's `preferred_element_type`): each pairwise product
//! is a `dot_general` with that result type (bf16 operands, f32 result:
//! one `dot_general` for two operands), an operand that is summed or
//! diagonalised on its own is cast up first so its sums are wide too, and
//! a later operand meets the wide partial result cast up to it. Gradients
//! come back in the operands' dtype (the ops' own rules).
//!
//! Layer: ops. Imports `tensor` (the ops it plans onto), `ir` (shapes),
//! `dtype` and `error`.

use super::elementwise::where_;
use super::{check_dtype, same_dtype};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ir::{Dim, Scalar, TensorType};
use crate::tensor::{Tensor, scalar_as};

/// A dimension's label: an ASCII letter's code, or `ELLIPSIS + k` for the
/// `k`-th of the broadcast ellipsis dimensions (counted from the left of
/// the widest one).
type Label = u32;
const ELLIPSIS: Label = 1000;

fn err(message: impl Into<String>) -> Error {
    Error::invalid("einsum", message)
}

fn show(l: Label) -> String {
    if l >= ELLIPSIS {
        format!("'...'[{}]", l - ELLIPSIS)
    } else {
        format!("'{}'", char::from_u32(l).unwrap_or('?'))
    }
}

/// One operand's (or the output's) subscripts: the letters before and
/// after its `...`, or all of them when it has none.
struct Term {
    before: Vec<Label>,
    after: Vec<Label>,
    ellipsis: bool,
}

impl Term {
    fn parse(s: &str, what: &str, spec: &str) -> Result<Term> {
        let mut term = Term {
            before: Vec::new(),
            after: Vec::new(),
            ellipsis: false,
        };
        let mut rest = s;
        while let Some(c) = rest.chars().next() {
            if let Some(tail) = rest.strip_prefix("...") {
                if term.ellipsis {
                    return Err(err(format!(
                        "{what} '{s}' has more than one '...' in spec '{spec}'"
                    )));
                }
                term.ellipsis = true;
                rest = tail;
                continue;
            }
            if !c.is_ascii_alphabetic() {
                let why = if c == '.' {
                    "a '.' that is not part of '...'".to_string()
                } else {
                    format!("the character '{c}' (subscripts are ASCII letters and '...')")
                };
                return Err(err(format!("{what} '{s}' has {why} in spec '{spec}'")));
            }
            if term.ellipsis {
                term.after.push(c as Label);
            } else {
                term.before.push(c as Label);
            }
            rest = &rest[1..];
        }
        Ok(term)
    }

    fn letters(&self) -> impl Iterator<Item = Label> + '_ {
        self.before.iter().chain(&self.after).copied()
    }

    /// The labels of a term with `n` ellipsis dimensions, out of `total`
    /// broadcast ones (right-aligned).
    fn labels(&self, n: usize, total: usize) -> Vec<Label> {
        let mut labels = self.before.clone();
        labels.extend((total - n..total).map(|k| ELLIPSIS + k as Label));
        labels.extend(&self.after);
        labels
    }
}

/// An operand being planned: its current value and one label per
/// dimension.
struct Part {
    x: Tensor,
    labels: Vec<Label>,
}

/// `tf.einsum` / `numpy.einsum`: see the module docs for the notation.
/// `einsum("ij,jk->ik", &[&a, &b])` is `a.matmul(&b)`; `"bi,ij,bj->b"` is a
/// batch of bilinear forms; `"...ij,...jk->...ik"` broadcasts the batch.
/// Operands share one numeric dtype and have known ranks.
#[track_caller]
pub fn einsum(spec: &str, operands: &[&Tensor]) -> Result<Tensor> {
    plan(spec, operands, None)
}

/// [`einsum`] accumulated in, and returning, `preferred`: the operands'
/// dtype or a wider one of the same kind (JAX's `preferred_element_type`;
/// see the module docs).
///
/// ```
/// use xlafn::prelude::*;
/// let a = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 4.0], &[2, 2])?.cast(DType::BF16)?;
/// let c = xlafn::einsum_preferred("ij,jk->ik", &[&a, &a], DType::F32)?;
/// assert_eq!(c.dtype(), DType::F32);
/// assert_eq!(c.to_vec::<f32>()?, vec![7.0, 10.0, 15.0, 22.0]);
/// # Ok::<(), xlafn::Error>(())
/// ```
#[track_caller]
pub fn einsum_preferred(spec: &str, operands: &[&Tensor], preferred: DType) -> Result<Tensor> {
    plan(spec, operands, Some(preferred))
}

fn plan(spec: &str, operands: &[&Tensor], preferred: Option<DType>) -> Result<Tensor> {
    let spec_clean: String = spec.chars().filter(|c| !c.is_whitespace()).collect();
    let spec = spec_clean.as_str();
    let (lhs, rhs) = match spec.split_once("->") {
        Some((_, r)) if r.contains("->") => {
            return Err(err(format!("spec '{spec}' has more than one '->'")));
        }
        Some((l, r)) => (l, Some(r)),
        None => (spec, None),
    };
    let terms = lhs
        .split(',')
        .enumerate()
        .map(|(i, s)| Term::parse(s, &format!("operand {i}'s subscripts"), spec))
        .collect::<Result<Vec<_>>>()?;
    if operands.is_empty() {
        return Err(err("needs at least one operand"));
    }
    if terms.len() != operands.len() {
        return Err(err(format!(
            "spec '{spec}' has subscripts for {} operand(s), but {} operand(s) were given",
            terms.len(),
            operands.len()
        )));
    }
    let types: Vec<TensorType> = operands
        .iter()
        .map(|x| TensorType::new(x.dtype(), x.shape()))
        .collect();
    let dtype = same_dtype("einsum", &types)?;
    check_dtype(
        "einsum",
        dtype,
        dtype.is_numeric() || dtype.is_complex(),
        "numeric",
    )?;
    let preferred = match preferred {
        Some(p) => Some(super::linalg::product_dtype(
            "einsum",
            &types,
            dtype,
            Some(p),
        )?)
        .filter(|&p| p != dtype),
        None => None,
    };

    // Ranks, ellipsis widths and every operand's labels.
    let mut widths = Vec::new();
    for (i, (t, ty)) in terms.iter().zip(&types).enumerate() {
        let Some(rank) = ty.shape.rank() else {
            return Err(err(format!(
                "operand {i} has an unknown rank; einsum needs known ranks"
            )));
        };
        let n = t.before.len() + t.after.len();
        if rank < n || (!t.ellipsis && rank != n) {
            let want = if t.ellipsis {
                format!("at least {n}")
            } else {
                n.to_string()
            };
            return Err(err(format!(
                "operand {i} has rank {rank} but its subscripts in spec '{spec}' need rank {want} (operand: {ty})"
            )));
        }
        widths.push(rank - n);
    }
    let total = widths.iter().copied().max().unwrap_or(0);
    let labels: Vec<Vec<Label>> = terms
        .iter()
        .zip(&widths)
        .map(|(t, &n)| t.labels(n, total))
        .collect();

    // Each label's size, checked across (and within) operands.
    let mut sizes: std::collections::BTreeMap<Label, (Dim, usize, usize)> = Default::default();
    for (i, (ls, ty)) in labels.iter().zip(&types).enumerate() {
        let dims = ty.shape.dims().unwrap_or(&[]);
        for (axis, (&l, &d)) in ls.iter().zip(dims).enumerate() {
            let entry = sizes.entry(l).or_insert((d, i, axis));
            let (new, old) = match (d, entry.0) {
                (Some(new), Some(old)) if new != old => (new, old),
                (Some(_), None) => {
                    *entry = (d, i, axis);
                    continue;
                }
                _ => continue,
            };
            if l >= ELLIPSIS && (new == 1 || old == 1) {
                if old == 1 {
                    *entry = (d, i, axis);
                }
                continue;
            }
            let (j, other_axis) = (entry.1, entry.2);
            return Err(if l >= ELLIPSIS {
                err(format!(
                    "the dimensions covered by '...' cannot be broadcast: {new} (operand {i}, dimension {axis}) against {old} (operand {j}, dimension {other_axis}) in spec '{spec}' (operands: {})",
                    super::describe(&types)
                ))
            } else {
                err(format!(
                    "subscript {} has size {new} in operand {i} (dimension {axis}) but size {old} in operand {j} (dimension {other_axis}) in spec '{spec}' (operands: {})",
                    show(l),
                    super::describe(&types)
                ))
            });
        }
    }

    // The output's labels.
    let output: Vec<Label> = match rhs {
        Some(r) => {
            let t = Term::parse(r, "the output's subscripts", spec)?;
            if !t.ellipsis && total > 0 {
                return Err(err(format!(
                    "the operands have {total} dimension(s) covered by '...' but the output subscripts '{r}' have no '...' in spec '{spec}'"
                )));
            }
            let mut seen = Vec::new();
            for l in t.letters() {
                if seen.contains(&l) {
                    return Err(err(format!(
                        "output subscript {} appears more than once in spec '{spec}'",
                        show(l)
                    )));
                }
                if !labels.iter().any(|ls| ls.contains(&l)) {
                    return Err(err(format!(
                        "output subscript {} does not appear in any operand's subscripts in spec '{spec}'",
                        show(l)
                    )));
                }
                seen.push(l);
            }
            t.labels(total, total)
        }
        None => {
            let mut once: Vec<Label> = terms
                .iter()
                .flat_map(Term::letters)
                .filter(|l| {
                    terms
                        .iter()
                        .flat_map(Term::letters)
                        .filter(|m| m == l)
                        .count()
                        == 1
                })
                .collect();
            once.sort_unstable();
            let mut out: Vec<Label> = (0..total).map(|k| ELLIPSIS + k as Label).collect();
            out.extend(once);
            out
        }
    };

    // Per operand: broadcast dims, diagonals, labels used nowhere else.
    let mut parts = Vec::new();
    for (i, (x, ls)) in operands.iter().zip(labels).enumerate() {
        let mut part = Part {
            x: (*x).clone(),
            labels: ls,
        };
        squeeze_broadcast(&mut part, &sizes)?;
        let mut elsewhere = labels_of(&terms, total, &widths, i);
        elsewhere.extend(&output);
        if let Some(p) = preferred {
            // Sums of this operand alone happen before any product: cast
            // up first so they accumulate wide too.
            let ls = &part.labels;
            let repeats = (0..ls.len()).any(|a| ls[a + 1..].contains(&ls[a]));
            let sums = ls.iter().any(|l| !elsewhere.contains(l));
            if repeats || sums {
                part.x = part.x.cast(p)?;
            }
        }
        let part_dtype = part.x.dtype();
        take_diagonals(&mut part, part_dtype)?;
        sum_unused(&mut part, &elsewhere)?;
        parts.push(part);
    }

    // Contract left to right.
    let mut parts = parts.into_iter();
    let mut acc = parts.next().expect("at least one operand");
    let rest: Vec<Part> = parts.collect();
    for (k, b) in rest.iter().enumerate() {
        let mut needed: Vec<Label> = output.clone();
        for later in &rest[k + 1..] {
            needed.extend(&later.labels);
        }
        acc = contract(acc, b, &needed, preferred)?;
    }
    if let Some(p) = preferred
        && acc.x.dtype() != p
    {
        acc.x = acc.x.cast(p)?;
    }
    sum_unused(&mut acc, &output)?;

    // Into the output's order.
    let perm = output
        .iter()
        .map(|l| {
            acc.labels
                .iter()
                .position(|m| m == l)
                .map(|p| p as i64)
                .ok_or_else(|| err(format!("internal: output subscript {} was lost", show(*l))))
        })
        .collect::<Result<Vec<i64>>>()?;
    if perm.len() != acc.labels.len() {
        return Err(err("internal: result has labels the output does not"));
    }
    if perm.iter().enumerate().all(|(i, &p)| p == i as i64) {
        Ok(acc.x)
    } else {
        acc.x.transpose(&perm)
    }
}

/// Every label of the operands other than `skip` (before any planning).
fn labels_of(terms: &[Term], total: usize, widths: &[usize], skip: usize) -> Vec<Label> {
    terms
        .iter()
        .zip(widths)
        .enumerate()
        .filter(|(i, _)| *i != skip)
        .flat_map(|(_, (t, &n))| t.labels(n, total))
        .collect()
}

/// Removes the operand's size-1 ellipsis dimensions that broadcast against
/// a larger size elsewhere: the dimension is then simply one the operand
/// lacks, which the contraction treats as an outer product.
fn squeeze_broadcast(
    part: &mut Part,
    sizes: &std::collections::BTreeMap<Label, (Dim, usize, usize)>,
) -> Result<()> {
    let dims = part.x.dims();
    let axes: Vec<usize> = (0..part.labels.len())
        .filter(|&a| {
            let l = part.labels[a];
            l >= ELLIPSIS
                && dims[a] == 1
                && matches!(sizes.get(&l), Some((Some(n), _, _)) if *n != 1)
        })
        .collect();
    if axes.is_empty() {
        return Ok(());
    }
    let axes_i64: Vec<i64> = axes.iter().map(|&a| a as i64).collect();
    part.x = part.x.squeeze(&axes_i64)?;
    let mut a = 0;
    part.labels.retain(|_| {
        a += 1;
        !axes.contains(&(a - 1))
    });
    Ok(())
}

/// Takes the diagonal over each letter repeated within the operand: keeps
/// the entries whose two indices agree (a `select` against an
/// `iota`-equality mask) and sums the second index away.
fn take_diagonals(part: &mut Part, dtype: DType) -> Result<()> {
    loop {
        let ls = &part.labels;
        let Some((p, q)) = (0..ls.len())
            .flat_map(|p| (p + 1..ls.len()).map(move |q| (p, q)))
            .find(|&(p, q)| ls[p] == ls[q])
        else {
            return Ok(());
        };
        let n = part.x.dims()[p];
        if n < 0 {
            return Err(err(format!(
                "the repeated subscript {} needs a known dimension size (operand shape {})",
                show(ls[p]),
                part.x.shape()
            )));
        }
        let mut mask_dims = vec![1i64; ls.len()];
        mask_dims[p] = n;
        mask_dims[q] = n;
        let mask = Tensor::iota(&mask_dims, p as i64, DType::I32)?.eq(&Tensor::iota(
            &mask_dims,
            q as i64,
            DType::I32,
        )?)?;
        let zero = scalar_as(Scalar::I64(0), dtype)?;
        part.x = where_(&mask, &part.x, &zero)?.reduce_sum(&[q as i64], false)?;
        part.labels.remove(q);
    }
}

/// Sums over the operand's labels that `keep` does not mention.
fn sum_unused(part: &mut Part, keep: &[Label]) -> Result<()> {
    let axes: Vec<i64> = (0..part.labels.len())
        .filter(|&a| !keep.contains(&part.labels[a]))
        .map(|a| a as i64)
        .collect();
    if axes.is_empty() {
        return Ok(());
    }
    part.x = part.x.reduce_sum(&axes, false)?;
    part.labels.retain(|l| keep.contains(l));
    Ok(())
}

/// One pairwise step: letters both share and `needed` mentions become
/// batch dimensions, the other shared ones are contracted.
fn contract(mut a: Part, b: &Part, needed: &[Label], preferred: Option<DType>) -> Result<Part> {
    let mut b = Part {
        x: b.x.clone(),
        labels: b.labels.clone(),
    };
    let keep_a: Vec<Label> = needed.iter().chain(&b.labels).copied().collect();
    sum_unused(&mut a, &keep_a)?;
    let keep_b: Vec<Label> = needed.iter().chain(&a.labels).copied().collect();
    sum_unused(&mut b, &keep_b)?;
    let (mut lb, mut rb, mut lc, mut rc) = (vec![], vec![], vec![], vec![]);
    let mut labels = Vec::new();
    for (i, l) in a.labels.iter().enumerate() {
        if let Some(j) = b.labels.iter().position(|m| m == l) {
            if needed.contains(l) {
                lb.push(i as i64);
                rb.push(j as i64);
                labels.push(*l);
            } else {
                lc.push(i as i64);
                rc.push(j as i64);
            }
        }
    }
    labels.extend(a.labels.iter().filter(|l| !b.labels.contains(l)));
    labels.extend(b.labels.iter().filter(|l| !a.labels.contains(l)));
    let x = match preferred {
        Some(p) => {
            // A wide partial result meets a narrow operand: cast it up.
            let up = |t: &Tensor| {
                if t.dtype() == p {
                    Ok(t.clone())
                } else {
                    t.cast(p)
                }
            };
            let (l, r) = match a.x.dtype() == b.x.dtype() {
                true => (a.x.clone(), b.x.clone()),
                false => (up(&a.x)?, up(&b.x)?),
            };
            l.dot_general_preferred(&r, &lc, &rc, &lb, &rb, p)?
        }
        None => a.x.dot_general(&b.x, &lc, &rc, &lb, &rb)?,
    };
    Ok(Part { x, labels })
}
