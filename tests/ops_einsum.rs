//! `einsum` and `dot_general` against a loop reference (every assignment of
//! the letters, product of the operands' entries, summed into the output
//! entry) and `ndarray`'s `dot`: matmul, batch matmul, outer product, dot,
//! transpose, sums, trace, diagonal, bilinear forms, `...` broadcasting,
//! implicit output, a 3-operand chain; eager and traced alike; gradients
//! against central differences; errors.

#[path = "common/scratch.rs"]
mod scratch;

use ndarray::Array2;
use xlafn::ir::{Shape, TensorType};
use xlafn::ops::OpDef;
use xlafn::ops::linalg::DotGeneral;
use xlafn::prelude::*;

/// Deterministic values in [-1, 1).
fn values(n: usize, seed: usize) -> Vec<f64> {
    (0..n)
        .map(|i| ((i * 37 + seed * 11 + 5) % 17) as f64 / 8.0 - 1.0)
        .collect()
}

fn tensor(v: &[f64], dims: &[usize]) -> Tensor {
    let d: Vec<i64> = dims.iter().map(|&x| x as i64).collect();
    Tensor::from_slice(v, &d).unwrap()
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "{what}: element {i}: got {g}, want {w}"
        );
    }
}

/// The loop reference for an explicit spec without `...`: each operand is
/// its row-major values and dimensions.
fn naive(spec: &str, ops: &[(&[f64], &[usize])]) -> (Vec<f64>, Vec<usize>) {
    let (lhs, out) = spec.split_once("->").unwrap();
    let terms: Vec<Vec<char>> = lhs.split(',').map(|t| t.chars().collect()).collect();
    let out: Vec<char> = out.chars().collect();
    let mut letters: Vec<char> = Vec::new();
    let mut sizes: Vec<usize> = Vec::new();
    for (t, (_, dims)) in terms.iter().zip(ops) {
        assert_eq!(t.len(), dims.len(), "reference: rank of {t:?}");
        for (c, &d) in t.iter().zip(dims.iter()) {
            match letters.iter().position(|l| l == c) {
                Some(p) => assert_eq!(sizes[p], d, "reference: size of {c}"),
                None => {
                    letters.push(*c);
                    sizes.push(d);
                }
            }
        }
    }
    let pos = |c: &char| letters.iter().position(|l| l == c).unwrap();
    let out_dims: Vec<usize> = out.iter().map(|c| sizes[pos(c)]).collect();
    let mut result = vec![0.0; out_dims.iter().product()];
    let offset = |labels: &[char], dims: &[usize], idx: &[usize]| -> usize {
        labels
            .iter()
            .zip(dims)
            .fold(0, |acc, (c, &d)| acc * d + idx[pos(c)])
    };
    let mut idx = vec![0usize; letters.len()];
    if sizes.contains(&0) {
        return (result, out_dims);
    }
    loop {
        let mut p = 1.0;
        for (t, (v, dims)) in terms.iter().zip(ops) {
            p *= v[offset(t, dims, &idx)];
        }
        result[offset(&out, &out_dims, &idx)] += p;
        // Next assignment (odometer).
        let mut k = letters.len();
        loop {
            if k == 0 {
                return (result, out_dims);
            }
            k -= 1;
            idx[k] += 1;
            if idx[k] < sizes[k] {
                break;
            }
            idx[k] = 0;
        }
    }
}

/// Checks `einsum(spec)` eagerly and traced against the loop reference
/// for `reference` (the same contraction written explicitly, without
/// `...`), on operands of dimensions `shapes`.
fn check(spec: &str, reference: &str, shapes: &[&[usize]]) {
    let vals: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| values(s.iter().product(), i + 1))
        .collect();
    let ops: Vec<(&[f64], &[usize])> = vals
        .iter()
        .zip(shapes)
        .map(|(v, s)| (v.as_slice(), *s))
        .collect();
    let (want, want_dims) = naive(reference, &ops);
    let want_dims: Vec<i64> = want_dims.iter().map(|&d| d as i64).collect();
    let ts: Vec<Tensor> = vals.iter().zip(shapes).map(|(v, s)| tensor(v, s)).collect();
    let refs: Vec<&Tensor> = ts.iter().collect();
    let eager = einsum(spec, &refs).unwrap();
    assert_eq!(eager.dims(), want_dims, "{spec}: eager dims");
    assert_close(&eager.to_vec::<f64>().unwrap(), &want, 1e-12, spec);
    let s = spec.to_string();
    let f = function(move |xs: Vec<Tensor>| einsum(&s, &xs.iter().collect::<Vec<_>>()));
    let traced = f.call((ts.clone(),)).unwrap();
    assert_eq!(traced.dims(), want_dims, "{spec}: traced dims");
    assert_close(
        &traced.to_vec::<f64>().unwrap(),
        &want,
        1e-12,
        &format!("{spec} (traced)"),
    );
}

#[test]
fn matmul_matches_ndarray_dot() {
    let a: Vec<f32> = (0..12).map(|i| (i % 5) as f32 - 2.0).collect();
    let b: Vec<f32> = (0..8).map(|i| (i % 3) as f32 - 1.0).collect();
    let got = einsum(
        "ij,jk->ik",
        &[
            &Tensor::from_slice(&a, &[3, 4]).unwrap(),
            &Tensor::from_slice(&b, &[4, 2]).unwrap(),
        ],
    )
    .unwrap();
    let want = Array2::from_shape_vec((3, 4), a)
        .unwrap()
        .dot(&Array2::from_shape_vec((4, 2), b).unwrap());
    assert_eq!(got.to_ndarray::<f32>().unwrap(), want.into_dyn());
    // Integers too.
    let i = Tensor::from_slice(&[1i32, 2, 3, 4], &[2, 2]).unwrap();
    let j = Tensor::from_slice(&[5i32, 6, 7, 8], &[2, 2]).unwrap();
    let got = einsum("ij,jk", &[&i, &j]).unwrap();
    assert_eq!(got.to_vec::<i32>().unwrap(), vec![19, 22, 43, 50]);
}

#[test]
fn two_operand_forms() {
    check("ij,jk->ik", "ij,jk->ik", &[&[3, 4], &[4, 5]]);
    check("bij,bjk->bik", "bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]);
    check("i,j->ij", "i,j->ij", &[&[3], &[4]]);
    check("i,i->", "i,i->", &[&[5], &[5]]);
    check("ij,ij->", "ij,ij->", &[&[2, 3], &[2, 3]]);
    check("ij,ij->ij", "ij,ij->ij", &[&[2, 3], &[2, 3]]);
    check("ij,kj->ki", "ij,kj->ki", &[&[3, 4], &[2, 4]]);
    check(
        "bhqd,bhkd->bhqk",
        "bhqd,bhkd->bhqk",
        &[&[2, 2, 3, 4], &[2, 2, 5, 4]],
    );
    // Letters only one operand has that the output drops are summed.
    check("ij,k->i", "ij,k->i", &[&[3, 4], &[2]]);
    // Upper case letters.
    check("aB,Bc->ac", "aB,Bc->ac", &[&[2, 3], &[3, 4]]);
}

#[test]
fn single_operand_forms() {
    check("ij->ji", "ij->ji", &[&[3, 4]]);
    check("ijk->kij", "ijk->kij", &[&[2, 3, 4]]);
    check("ij->i", "ij->i", &[&[3, 4]]);
    check("ij->j", "ij->j", &[&[3, 4]]);
    check("ijk->", "ijk->", &[&[2, 3, 4]]);
    check("ij->ij", "ij->ij", &[&[3, 4]]);
    check("ii->", "ii->", &[&[4, 4]]);
    check("ii->i", "ii->i", &[&[4, 4]]);
    check("iji->j", "iji->j", &[&[3, 2, 3]]);
    check("iii->i", "iii->i", &[&[3, 3, 3]]);
    check("bii->bi", "bii->bi", &[&[2, 3, 3]]);
}

#[test]
fn implicit_output() {
    check("ij,jk", "ij,jk->ik", &[&[3, 4], &[4, 5]]);
    check("ba", "ba->ab", &[&[3, 4]]);
    check("ii", "ii->", &[&[4, 4]]);
    check("ij", "ij->ij", &[&[2, 3]]);
    check("i,i", "i,i->", &[&[5], &[5]]);
    check("ij,jk,kl", "ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 2]]);
    // ASCII order: upper case first.
    check("bA", "bA->Ab", &[&[2, 3]]);
    check("...ij,...jk", "bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]);
}

#[test]
fn three_operand_forms() {
    check("bi,ij,bj->b", "bi,ij,bj->b", &[&[3, 4], &[4, 5], &[3, 5]]);
    check("ij,jk,kl->il", "ij,jk,kl->il", &[&[2, 3], &[3, 4], &[4, 2]]);
    check("i,j,k->ijk", "i,j,k->ijk", &[&[2], &[3], &[2]]);
    // A letter shared by the first and last operand only.
    check("ai,ij,ja->", "ai,ij,ja->", &[&[2, 3], &[3, 4], &[4, 2]]);
    check(
        "ab,bc,cd,de->ae",
        "ab,bc,cd,de->ae",
        &[&[2, 3], &[3, 2], &[2, 4], &[4, 3]],
    );
    check("ii,ij,j->", "ii,ij,j->", &[&[3, 3], &[3, 2], &[2]]);
}

#[test]
fn ellipsis_broadcasting() {
    // Batch dims (2, 1) and (5,) broadcast to (2, 5).
    check(
        "...ij,...jk->...ik",
        "pxij,qjk->pqik",
        &[&[2, 1, 3, 4], &[5, 4, 2]],
    );
    // Equal batch dims.
    check(
        "...ij,...jk->...ik",
        "pij,pjk->pik",
        &[&[3, 2, 4], &[3, 4, 2]],
    );
    // No batch dims at all.
    check("...ij,...jk->...ik", "ij,jk->ik", &[&[2, 4], &[4, 3]]);
    // Ellipsis at the end and in the middle, and with a diagonal.
    check("i...->...i", "ipq->pqi", &[&[2, 3, 4]]);
    check("a...b->ba...", "apqb->bapq", &[&[2, 3, 1, 4]]);
    check("...ii->...i", "pii->pi", &[&[2, 3, 3]]);
    check("...,...->...", "pq,q->pq", &[&[2, 3], &[3]]);
    // A size-1 ellipsis dim on every operand stays.
    check("...i,...i->...", "pi,pi->p", &[&[1, 3], &[1, 3]]);
}

#[test]
fn whitespace_is_ignored() {
    check(" ij , jk -> ik ", "ij,jk->ik", &[&[2, 3], &[3, 2]]);
}

// ---------------------------------------------------------- dot_general

#[test]
fn dot_general_matches_the_reference() {
    // a: (x=3, c=2, f=4, d=5), b: (d=5, g=2, x=3, c=2); contract c and d
    // (listed in an order b's dims do not sort in), batch x.
    let (av, bv) = (values(3 * 2 * 4 * 5, 1), values(5 * 2 * 3 * 2, 2));
    let (a, b) = (tensor(&av, &[3, 2, 4, 5]), tensor(&bv, &[5, 2, 3, 2]));
    let got = a.dot_general(&b, &[1, 3], &[3, 0], &[0], &[2]).unwrap();
    let (want, dims) = naive(
        "xcfd,dgxc->xfg",
        &[(&av, &[3, 2, 4, 5]), (&bv, &[5, 2, 3, 2])],
    );
    assert_eq!(got.dims(), vec![3, 4, 2]);
    assert_eq!(dims, vec![3, 4, 2]);
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "dot_general");
    // Negative dimension numbers count from the end.
    let neg = a.dot_general(&b, &[-3, -1], &[-1, 0], &[0], &[-2]).unwrap();
    assert_close(&neg.to_vec::<f64>().unwrap(), &want, 1e-12, "negative");
    // Two batch dims listed out of order; no contraction (outer product).
    let (cv, dv) = (values(2 * 3 * 4, 3), values(4 * 2 * 5, 4));
    let (c, d) = (tensor(&cv, &[2, 3, 4]), tensor(&dv, &[4, 2, 5]));
    let got = c.dot_general(&d, &[], &[], &[2, 0], &[0, 1]).unwrap();
    let (want, dims) = naive("bfa,abk->abfk", &[(&cv, &[2, 3, 4]), (&dv, &[4, 2, 5])]);
    assert_eq!(got.dims(), vec![4, 2, 3, 5]);
    assert_eq!(dims, vec![4, 2, 3, 5]);
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "outer");
    // Traced.
    let f = function(|a: Tensor, b: Tensor| a.dot_general(&b, &[1], &[0], &[], &[]));
    let m = tensor(&values(6, 5), &[2, 3]);
    let n = tensor(&values(12, 6), &[3, 4]);
    assert_eq!(
        f.call((m.clone(), n.clone()))
            .unwrap()
            .to_vec::<f64>()
            .unwrap(),
        m.matmul(&n).unwrap().to_vec::<f64>().unwrap()
    );
}

/// The `InvalidArgument` error's op and message, or a panic.
fn invalid(r: xlafn::Result<Tensor>) -> (String, String) {
    match r {
        Err(Error::InvalidArgument { op, message }) => (op, message),
        Err(e) => panic!("expected InvalidArgument, got {e}"),
        Ok(t) => panic!("expected an error, got a tensor of shape {}", t.shape()),
    }
}

#[test]
fn dot_general_errors() {
    let a = tensor(&values(6, 1), &[2, 3]);
    let b = tensor(&values(12, 2), &[4, 3]);
    let cases: Vec<(xlafn::Result<Tensor>, &str)> = vec![
        (a.dot_general(&b, &[0], &[0], &[], &[]), "equal sizes"),
        (a.dot_general(&b, &[1], &[1], &[0], &[]), "same length"),
        (a.dot_general(&b, &[1], &[], &[], &[]), "same length"),
        (a.dot_general(&b, &[2], &[1], &[], &[]), "out of range"),
        (
            a.dot_general(&b, &[1, 1], &[1, 0], &[], &[]),
            "more than once",
        ),
        (a.dot_general(&b, &[0], &[0], &[0], &[0]), "more than once"),
        (a.dot_general(&b, &[], &[], &[0], &[0]), "equal sizes"),
        (
            a.dot_general(&b.cast(DType::F32).unwrap(), &[1], &[1], &[], &[]),
            "expected to be a f64",
        ),
    ];
    for (r, want) in cases {
        let (op, message) = invalid(r);
        assert_eq!(op, "dot_general");
        assert!(message.contains(want), "{message:?} lacks {want:?}");
    }
}

#[test]
fn dot_general_shape_rule_with_unknown_dims() {
    let op = DotGeneral {
        lhs_contracting: vec![2],
        rhs_contracting: vec![1],
        lhs_batch: vec![0],
        rhs_batch: vec![0],
        ..Default::default()
    };
    let t = |dims: Vec<Option<i64>>| TensorType::new(DType::F32, Shape::from_dims(dims));
    let out = op
        .infer(&[
            t(vec![None, Some(3), None]),
            t(vec![Some(2), Some(4), Some(5)]),
        ])
        .unwrap();
    assert_eq!(
        out[0].shape,
        Shape::from_dims(vec![Some(2), Some(3), Some(5)])
    );
    let unknown = TensorType::new(DType::F32, Shape::unknown_rank());
    let out = op.infer(&[unknown.clone(), unknown]).unwrap();
    assert_eq!(out[0].shape, Shape::unknown_rank());
}

// ---------------------------------------------------------- gradients

/// Central differences of `sum(f(xs) * r)`, computed with the loop
/// reference for `reference`, against the tape's gradients of the same
/// loss through `compute` (einsum or dot_general), for every operand.
fn check_gradients(
    what: &str,
    reference: &str,
    shapes: &[&[usize]],
    compute: &dyn Fn(&[&Tensor]) -> xlafn::Result<Tensor>,
) {
    let vals: Vec<Vec<f64>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| values(s.iter().product(), i + 7))
        .collect();
    let loss_ref = |vals: &[Vec<f64>], r: &[f64]| -> f64 {
        let ops: Vec<(&[f64], &[usize])> = vals
            .iter()
            .zip(shapes)
            .map(|(v, s)| (v.as_slice(), *s))
            .collect();
        let (y, _) = naive(reference, &ops);
        y.iter().zip(r).map(|(a, b)| a * b).sum()
    };
    let ts: Vec<Tensor> = vals.iter().zip(shapes).map(|(v, s)| tensor(v, s)).collect();
    let tape = GradientTape::new();
    for t in &ts {
        tape.watch(t);
    }
    let y = compute(&ts.iter().collect::<Vec<_>>()).unwrap();
    let r = values(y.size() as usize, 3);
    let ydims: Vec<usize> = y.dims().iter().map(|&d| d as usize).collect();
    let l = y
        .mul(&tensor(&r, &ydims))
        .unwrap()
        .reduce_sum(&[], false)
        .unwrap();
    let sources: Vec<Source> = ts.iter().map(Source::from).collect();
    let g = tape.gradient(&l, &sources).unwrap();
    let h = 1e-6;
    for (k, gk) in g.iter().enumerate() {
        let got = gk.as_ref().unwrap();
        assert_eq!(got.dims(), ts[k].dims(), "{what}: gradient {k} dims");
        let numeric: Vec<f64> = (0..vals[k].len())
            .map(|i| {
                let (mut up, mut down) = (vals.clone(), vals.clone());
                up[k][i] += h;
                down[k][i] -= h;
                (loss_ref(&up, &r) - loss_ref(&down, &r)) / (2.0 * h)
            })
            .collect();
        assert_close(
            &got.to_vec::<f64>().unwrap(),
            &numeric,
            1e-6,
            &format!("{what}: gradient of operand {k}"),
        );
    }
}

#[test]
fn einsum_gradients_match_finite_differences() {
    for (spec, reference, shapes) in [
        ("ij,jk->ik", "ij,jk->ik", vec![&[3usize, 4][..], &[4, 2]]),
        (
            "bi,ij,bj->b",
            "bi,ij,bj->b",
            vec![&[2, 3], &[3, 4], &[2, 4]],
        ),
        ("ii,ij->j", "ii,ij->j", vec![&[3, 3], &[3, 2]]),
        ("iji->j", "iji->j", vec![&[3, 2, 3]]),
        (
            "...ij,...jk->...ik",
            "pxij,qjk->pqik",
            vec![&[2, 1, 3, 2], &[3, 2, 2]],
        ),
        ("ij,jk,kl", "ij,jk,kl->il", vec![&[2, 3], &[3, 2], &[2, 2]]),
    ] {
        check_gradients(spec, reference, &shapes, &|xs| einsum(spec, xs));
    }
}

#[test]
fn dot_general_gradients_match_finite_differences() {
    check_gradients(
        "dot_general contract 2, batch 1",
        "xcfd,dgxc->xfg",
        &[&[3, 2, 2, 3], &[3, 2, 3, 2]],
        &|xs| xs[0].dot_general(xs[1], &[1, 3], &[3, 0], &[0], &[2]),
    );
    check_gradients(
        "dot_general batch out of order",
        "bfa,abk->abfk",
        &[&[2, 3, 2], &[2, 2, 3]],
        &|xs| xs[0].dot_general(xs[1], &[], &[], &[2, 0], &[0, 1]),
    );
    check_gradients(
        "dot_general full contraction",
        "ij,ji->",
        &[&[2, 3], &[3, 2]],
        &|xs| xs[0].dot_general(xs[1], &[0, 1], &[1, 0], &[], &[]),
    );
    check_gradients(
        "dot_general rhs first in contraction order",
        "kib,bjk->bij",
        &[&[3, 2, 2], &[2, 4, 3]],
        &|xs| xs[0].dot_general(xs[1], &[0], &[2], &[2], &[0]),
    );
}

#[test]
fn gradients_inside_a_compiled_function() {
    let a = tensor(&values(12, 1), &[3, 4]);
    let b = tensor(&values(8, 2), &[4, 2]);
    let grads = |a: &Tensor, b: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(a);
        tape.watch(b);
        let l = einsum("ij,jk->ik", &[a, b])?
            .square()?
            .reduce_sum(&[], false)?;
        let g = tape.gradient(&l, &[Source::from(a), Source::from(b)])?;
        Ok((g[0].clone().unwrap(), g[1].clone().unwrap()))
    };
    let (ea, eb) = grads(&a, &b).unwrap();
    let f = function(move |a: Tensor, b: Tensor| grads(&a, &b));
    let (ta, tb) = f.call((a, b)).unwrap();
    assert_close(
        &ta.to_vec::<f64>().unwrap(),
        &ea.to_vec::<f64>().unwrap(),
        1e-12,
        "da",
    );
    assert_close(
        &tb.to_vec::<f64>().unwrap(),
        &eb.to_vec::<f64>().unwrap(),
        1e-12,
        "db",
    );
}

// ---------------------------------------------------------- errors

#[test]
fn einsum_errors() {
    let m = tensor(&values(6, 1), &[2, 3]);
    let n = tensor(&values(20, 2), &[4, 5]);
    let sq = tensor(&values(9, 3), &[3, 3]);
    let cube = tensor(&values(24, 4), &[2, 3, 4]);
    let v = tensor(&values(20, 5), &[5, 4]);
    let cases: Vec<(xlafn::Result<Tensor>, &str)> = vec![
        (einsum("ij,jk->ik", &[&m]), "subscripts for 2 operand(s)"),
        (einsum("ij->ij", &[&m, &m]), "subscripts for 1 operand(s)"),
        (einsum("->", &[]), "at least one operand"),
        (einsum("ij->ik", &[&m]), "does not appear"),
        (einsum("ij->ii", &[&m]), "more than once"),
        (einsum("i.j->ij", &[&m]), "'.' that is not part of '...'"),
        (einsum("i1->i", &[&m]), "the character '1'"),
        (einsum("ij->i->j", &[&m]), "more than one '->'"),
        (einsum("...i...->i", &[&m]), "more than one '...'"),
        (einsum("ij,jk->ik", &[&m, &n]), "subscript 'j' has size"),
        (einsum("ij->i", &[&cube]), "rank 3"),
        (einsum("ijkl->i", &[&cube]), "rank 3"),
        (einsum("ii->i", &[&m]), "subscript 'i' has size"),
        (einsum("...ij->ij", &[&cube]), "no '...'"),
        (
            einsum("...i,...i->...i", &[&cube, &v]),
            "cannot be broadcast",
        ),
        (
            einsum("ij,jk->ik", &[&sq, &sq.cast(DType::F32).unwrap()]),
            "expected to be a f64",
        ),
        (einsum("ij->", &[&sq.cast(DType::Bool).unwrap()]), "numeric"),
    ];
    for (r, want) in cases {
        let (op, message) = invalid(r);
        assert_eq!(op, "einsum", "{message}");
        assert!(message.contains(want), "{message:?} lacks {want:?}");
    }
}

// ---------------------------------------------------------- export

#[test]
fn einsum_exports_and_serves_new_batch_sizes() {
    let w = tensor(&values(4 * 3, 9), &[4, 3]);
    let spec = vec![TensorSpec::new(&[None, Some(2), Some(4)], DType::F64)];
    let f = FunctionOptions::new().input_signature(spec).build({
        let w = w.clone();
        move |x: Tensor| einsum("bij,jk->bik", &[&x, &w])
    });
    let cf = f
        .get_concrete_function((TensorSpec::new(&[None, Some(2), Some(4)], DType::F64),))
        .unwrap();
    let scratch = scratch::scratch_dir("einsum-export");
    let dir = scratch.join("einsum-export");
    let _ = std::fs::remove_dir_all(&dir);
    cf.export(&dir, &[vec![vec![1, 2, 4]]]).unwrap();
    let loaded = xlafn::load(&dir).unwrap();
    let xv = values(3 * 2 * 4, 10);
    let x = tensor(&xv, &[3, 2, 4]);
    let got = loaded.call(&[&x]).unwrap().remove(0);
    let (want, _) = naive(
        "bij,jk->bik",
        &[(&xv, &[3, 2, 4]), (&values(12, 9), &[4, 3])],
    );
    assert_eq!(got.dims(), vec![3, 2, 3]);
    assert_close(&got.to_vec::<f64>().unwrap(), &want, 1e-12, "exported");
    let _ = std::fs::remove_dir_all(&dir);
}
