//! The gradients of several static slices of one array are
//! assembled as one concatenate (zeros where no slice reads), not summed
//! as one padded copy per slice; overlapping slices, slices along two
//! axes, a slice read twice and a whole use of the array still add up.
//! Values are checked against a host loop, eagerly and compiled, and the
//! emitted programs are pinned. A strided slice's gradient is a `pad`,
//! not products with one-hot matrices.
use xlafn::ArraySpec;
use xlafn::prelude::*;

const ROWS: i64 = 3;
const COLS: i64 = 8;

/// A region of `x`: its start and size in each dimension.
type Region = ([i64; 2], [i64; 2]);

fn input() -> Tensor {
    let v: Vec<f64> = (0..ROWS * COLS)
        .map(|k| ((k as f64 + 0.5) * 0.61).sin())
        .collect();
    Tensor::from_vec(v, &[ROWS, COLS]).unwrap()
}

/// `whole * sum(x) + sum_k (k + 1) * sum(x[region_k]^2)`, and its
/// gradient with respect to `x` from the tape.
fn gradient(x: &Tensor, regions: &[Region], whole: f64) -> Result<Tensor> {
    let tape = GradientTape::new();
    tape.watch(x);
    let mut loss = x.reduce_sum(&[], false)?.mul_scalar(whole)?;
    for (k, (begin, size)) in regions.iter().enumerate() {
        let part = x.slice(begin, size)?.square()?.reduce_sum(&[], false)?;
        loss = loss.add(&part.mul_scalar((k + 1) as f64)?)?;
    }
    Ok(tape.gradient(&loss, &[x.into()])?.remove(0).unwrap())
}

/// The same gradient by a host loop: `whole` everywhere, plus
/// `2 (k + 1) x` inside each region.
fn host_gradient(x: &[f64], regions: &[Region], whole: f64) -> Vec<f64> {
    let mut g = vec![whole; x.len()];
    for (k, (begin, size)) in regions.iter().enumerate() {
        for r in begin[0]..begin[0] + size[0] {
            for c in begin[1]..begin[1] + size[1] {
                let i = (r * COLS + c) as usize;
                g[i] += 2.0 * (k + 1) as f64 * x[i];
            }
        }
    }
    g
}

/// Checks the eager and compiled gradients against the host loop and
/// returns the compiled program's text.
fn check(regions: &'static [Region], whole: f64) -> String {
    let x = input();
    let want = host_gradient(&x.to_vec::<f64>().unwrap(), regions, whole);
    let eager = gradient(&x, regions, whole).unwrap();
    let f = function(move |x: Tensor| gradient(&x, regions, whole));
    let compiled = f.call((&x,)).unwrap();
    for (name, got) in [("eager", eager), ("compiled", compiled)] {
        let got = got.to_vec::<f64>().unwrap();
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert!(
                (g - w).abs() < 1e-12,
                "{name} {regions:?} [{i}]: {g} vs {w}"
            );
        }
    }
    let spec = ArraySpec::new(DType::F64, &[ROWS, COLS]);
    f.get_concrete_function((&x,))
        .unwrap()
        .stablehlo(&[spec])
        .unwrap()
}

fn count(text: &str, op: &str) -> usize {
    text.matches(&format!("stablehlo.{op}")).count()
}

#[test]
fn gate_slices_give_one_concatenate() {
    // Four column blocks of one array, as an LSTM cuts its gates.
    static GATES: [Region; 4] = [
        ([0, 0], [ROWS, 2]),
        ([0, 2], [ROWS, 2]),
        ([0, 4], [ROWS, 2]),
        ([0, 6], [ROWS, 2]),
    ];
    let text = check(&GATES, 0.0);
    assert_eq!(count(&text, "concatenate"), 1, "{text}");
    assert_eq!(count(&text, "dynamic_update_slice"), 0, "{text}");
    assert_eq!(count(&text, "pad"), 0, "{text}");
}

#[test]
fn gaps_are_zero_blocks_and_edges_are_one_pad() {
    // Columns 1-2 and 5-6 read; 0, 3-4 and 7 not.
    static GAPPED: [Region; 2] = [([0, 1], [ROWS, 2]), ([0, 5], [ROWS, 2])];
    let text = check(&GAPPED, 0.0);
    assert_eq!(count(&text, "concatenate"), 1, "{text}");
    assert_eq!(count(&text, "pad"), 1, "{text}");
    assert_eq!(count(&text, "dynamic_update_slice"), 0, "{text}");
    // One slice alone is one pad.
    static ONE: [Region; 1] = [([1, 0], [1, COLS])];
    let text = check(&ONE, 0.0);
    assert_eq!((count(&text, "pad"), count(&text, "concatenate")), (1, 0));
}

#[test]
fn overlaps_repeats_crossing_axes_and_whole_uses_add_up() {
    static OVERLAPPING: [Region; 2] = [([0, 0], [ROWS, 5]), ([0, 3], [ROWS, 5])];
    static REPEATED: [Region; 3] = [
        ([0, 2], [ROWS, 3]),
        ([0, 2], [ROWS, 3]),
        ([0, 5], [ROWS, 3]),
    ];
    static CROSSING: [Region; 2] = [([1, 0], [2, COLS]), ([0, 3], [ROWS, 2])];
    static TILES: [Region; 2] = [([0, 0], [1, 4]), ([1, 4], [2, 4])];
    for regions in [&OVERLAPPING[..], &REPEATED, &CROSSING, &TILES] {
        for whole in [0.0, 1.5] {
            check(regions, whole);
        }
    }
    // A slice read twice is one block of the concatenate.
    let text = check(&REPEATED, 0.0);
    assert_eq!(count(&text, "concatenate"), 1, "{text}");
}

#[test]
fn second_derivatives_through_the_assembled_gradient() {
    // d/dx sum(dL/dx) with L = sum_k (k + 1) sum(x[k]^2) over row slices:
    // dL/dx = 2 (k + 1) x in row k, so the result is 2 (k + 1) there.
    let x = input();
    let outer = GradientTape::new();
    outer.watch(&x);
    let inner = GradientTape::new();
    inner.watch(&x);
    let mut loss = Tensor::scalar(0f64);
    for k in 0..ROWS {
        let row = x.slice(&[k, 0], &[1, COLS]).unwrap();
        let part = row.square().unwrap().reduce_sum(&[], false).unwrap();
        loss = loss.add(&part.mul_scalar((k + 1) as f64).unwrap()).unwrap();
    }
    let g = inner.gradient(&loss, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap();
    let total = g.reduce_sum(&[], false).unwrap();
    let gg = outer.gradient(&total, &[(&x).into()]).unwrap()[0]
        .clone()
        .unwrap()
        .to_vec::<f64>()
        .unwrap();
    let want: Vec<f64> = (0..ROWS * COLS)
        .map(|i| 2.0 * (i / COLS + 1) as f64)
        .collect();
    assert_eq!(gg, want);
}

#[test]
fn a_strided_slices_gradient_is_a_pad() {
    // x[:, 7:0:-3] reads columns 7, 4 and 1; x[1:, ::2] every other one.
    let x = input();
    let grad = |x: &Tensor| -> Result<Tensor> {
        let tape = GradientTape::new();
        tape.watch(x);
        let a = x.strided_slice(&[0, 7], &[i64::MAX, 0], &[1, -3])?;
        let b = x.strided_slice(&[1, 0], &[i64::MAX, i64::MAX], &[1, 2])?;
        let loss = a
            .mul_scalar(3.0)?
            .reduce_sum(&[], false)?
            .add(&b.square()?.reduce_sum(&[], false)?)?;
        Ok(tape.gradient(&loss, &[x.into()])?.remove(0).unwrap())
    };
    let xv = x.to_vec::<f64>().unwrap();
    let want: Vec<f64> = (0..ROWS * COLS)
        .map(|i| {
            let (r, c) = (i / COLS, i % COLS);
            let a = if [1, 4, 7].contains(&c) { 3.0 } else { 0.0 };
            let b = if r >= 1 && c % 2 == 0 {
                2.0 * xv[i as usize]
            } else {
                0.0
            };
            a + b
        })
        .collect();
    let f = function(move |x: Tensor| grad(&x));
    for got in [grad(&x).unwrap(), f.call((&x,)).unwrap()] {
        let got = got.to_vec::<f64>().unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert!((g - w).abs() < 1e-12, "{got:?} vs {want:?}");
        }
    }
    let text = f
        .get_concrete_function((&x,))
        .unwrap()
        .stablehlo(&[ArraySpec::new(DType::F64, &[ROWS, COLS])])
        .unwrap();
    assert_eq!(count(&text, "dot_general"), 0, "{text}");
    assert!(count(&text, "pad") >= 1, "{text}");
}
