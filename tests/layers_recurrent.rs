//! `nn::layers::{Lstm, Gru, Stacked, Bidirectional}` against references
//! written here as plain f64 loops over the Keras cell recurrences, one
//! batch row and one step at a time: sequences and last outputs, initial
//! states, masks (Keras' carried state and repeated output, and zeros
//! with `zero_output_for_mask`), `go_backwards`, stacks, bidirectional =
//! forward + reversed backward; eagerly and compiled (one device loop);
//! gradients against central differences; Keras' initial weights; errors.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use std::sync::Arc;
use xlafn::ArraySpec;
use xlafn::module::Module;
use xlafn::nn::layers::{Bidirectional, Gru, Layer, Lstm, Recurrent, RnnOutput, Stacked};
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, host, values};

fn tensor(v: &[f64], dims: &[i64]) -> Tensor {
    Tensor::from_vec(v.to_vec(), dims).unwrap()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

const B: usize = 2;
const T: usize = 5;
const F: usize = 3;
const U: usize = 4;

/// Which cell a reference runs.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Lstm,
    Gru { reset_after: bool },
}

/// A cell's weights as plain vectors.
#[derive(Clone, Debug)]
struct Cell {
    kind: Kind,
    f: usize,
    u: usize,
    kernel: Vec<f64>,
    recurrent: Vec<f64>,
    bias: Vec<f64>,
}

impl Cell {
    fn gates(&self) -> usize {
        if self.kind == Kind::Lstm { 4 } else { 3 }
    }

    fn states(&self) -> usize {
        if self.kind == Kind::Lstm { 2 } else { 1 }
    }

    /// `v [n] @ m [n, width]` restricted to columns `from..from + count`.
    fn dot(v: &[f64], m: &[f64], width: usize, from: usize, count: usize) -> Vec<f64> {
        (0..count)
            .map(|j| (0..v.len()).map(|i| v[i] * m[i * width + from + j]).sum())
            .collect()
    }

    /// One step for one batch row.
    fn step(&self, x: &[f64], s: &[Vec<f64>]) -> Vec<Vec<f64>> {
        let (u, w) = (self.u, self.gates() * self.u);
        let xk = Cell::dot(x, &self.kernel, w, 0, w);
        match self.kind {
            Kind::Lstm => {
                let hr = Cell::dot(&s[0], &self.recurrent, w, 0, w);
                let z: Vec<f64> = (0..w).map(|j| xk[j] + hr[j] + self.bias[j]).collect();
                let c: Vec<f64> = (0..u)
                    .map(|j| sigmoid(z[u + j]) * s[1][j] + sigmoid(z[j]) * z[2 * u + j].tanh())
                    .collect();
                let h = (0..u)
                    .map(|j| sigmoid(z[3 * u + j]) * c[j].tanh())
                    .collect();
                vec![h, c]
            }
            Kind::Gru { reset_after } => {
                let h = &s[0];
                let (bi, br) = if reset_after {
                    (&self.bias[..w], self.bias[w..].to_vec())
                } else {
                    (&self.bias[..], vec![0.0; w])
                };
                let xz: Vec<f64> = (0..w).map(|j| xk[j] + bi[j]).collect();
                let rec = Cell::dot(h, &self.recurrent, w, 0, w);
                let z: Vec<f64> = (0..u).map(|j| sigmoid(xz[j] + rec[j] + br[j])).collect();
                let r: Vec<f64> = (0..u)
                    .map(|j| sigmoid(xz[u + j] + rec[u + j] + br[u + j]))
                    .collect();
                let cand: Vec<f64> = if reset_after {
                    (0..u)
                        .map(|j| (xz[2 * u + j] + r[j] * (rec[2 * u + j] + br[2 * u + j])).tanh())
                        .collect()
                } else {
                    let rh: Vec<f64> = (0..u).map(|i| r[i] * h[i]).collect();
                    let m = Cell::dot(&rh, &self.recurrent, w, 2 * u, u);
                    (0..u).map(|j| (xz[2 * u + j] + m[j]).tanh()).collect()
                };
                vec![
                    (0..u)
                        .map(|j| z[j] * h[j] + (1.0 - z[j]) * cand[j])
                        .collect(),
                ]
            }
        }
    }
}

/// What a reference run gives: the outputs in processing order `[b, t,
/// u]`, the last output `[b, u]`, the final states (each `[b, u]`).
struct RefOut {
    seq: Vec<f64>,
    last: Vec<f64>,
    states: Vec<Vec<f64>>,
}

struct RefOptions<'a> {
    mask: Option<&'a dyn Fn(usize, usize) -> bool>,
    init: Option<&'a [Vec<f64>]>,
    go_backwards: bool,
    zero_output: bool,
}

const PLAIN: RefOptions<'static> = RefOptions {
    mask: None,
    init: None,
    go_backwards: false,
    zero_output: false,
};

/// Keras' recurrence over `x [b, t, f]`, row by row, step by step.
fn run_ref(cell: &Cell, x: &[f64], b: usize, t: usize, o: &RefOptions) -> RefOut {
    let (f, u, n) = (cell.f, cell.u, cell.states());
    let mut seq = vec![0.0; b * t * u];
    let mut last = vec![0.0; b * u];
    let mut states = vec![vec![0.0; b * u]; n];
    for r in 0..b {
        let mut s: Vec<Vec<f64>> = (0..n)
            .map(|k| match o.init {
                Some(init) => init[k][r * u..(r + 1) * u].to_vec(),
                None => vec![0.0; u],
            })
            .collect();
        let mut prev = vec![0.0; u];
        for i in 0..t {
            let step = if o.go_backwards { t - 1 - i } else { i };
            let xi = &x[(r * t + step) * f..(r * t + step + 1) * f];
            let new = cell.step(xi, &s);
            let real = o.mask.is_none_or(|m| m(r, step));
            let out = if real {
                s = new;
                s[0].clone()
            } else if o.zero_output {
                vec![0.0; u]
            } else {
                prev.clone()
            };
            seq[(r * t + i) * u..(r * t + i + 1) * u].copy_from_slice(&out);
            prev = out;
        }
        last[r * u..(r + 1) * u].copy_from_slice(&prev);
        for k in 0..n {
            states[k][r * u..(r + 1) * u].copy_from_slice(&s[k]);
        }
    }
    RefOut { seq, last, states }
}

/// Builds `layer` with a call on `[1, 1, f]` and gives its weights
/// distinct values (biases included); returns them as a [`Cell`].
fn randomize(layer: &dyn Recurrent, kind: Kind, f: usize, seed: u64) -> Cell {
    layer
        .run(&Tensor::zeros(&[1, 1, f as i64], DType::F64), None, None)
        .unwrap();
    let mut weights = Vec::new();
    for (i, (_, v)) in layer.named_variables().into_iter().enumerate() {
        let n = v.dims().iter().product::<i64>() as usize;
        let w = values(n, seed + i as u64, -0.7, 0.7);
        v.assign(&tensor(&w, v.dims())).unwrap();
        weights.push(w);
    }
    let bias = weights.get(2).cloned().unwrap_or_default();
    Cell {
        kind,
        f,
        u: layer.units() as usize,
        kernel: weights[0].clone(),
        recurrent: weights[1].clone(),
        bias,
    }
}

fn lstm(seed: u64) -> Lstm {
    Lstm::new(&xlafn::random::key(seed).unwrap(), U as i64).unwrap()
}

fn gru(seed: u64, reset_after: bool) -> Gru {
    Gru::new(&xlafn::random::key(seed).unwrap(), U as i64)
        .unwrap()
        .reset_after(reset_after)
}

fn input(seed: u64) -> (Vec<f64>, Tensor) {
    let x = values(B * T * F, seed, -1.0, 1.0);
    let t = tensor(&x, &[B as i64, T as i64, F as i64]);
    (x, t)
}

/// Step `t` of row `b` is real: row 0 all, row 1 with a masked first,
/// middle and last step.
fn mask_fn(b: usize, t: usize) -> bool {
    b == 0 || !matches!(t, 0 | 2 | 4)
}

fn mask_tensor() -> Tensor {
    let v: Vec<i32> = (0..B)
        .flat_map(|b| (0..T).map(move |t| i32::from(mask_fn(b, t))))
        .collect();
    Tensor::from_vec(v, &[B as i64, T as i64]).unwrap()
}

/// Checks one layer kind's `run` (sequences and last output, states)
/// against the reference, eagerly and compiled, for every option mix.
type Shared = Box<dyn Recurrent + Send + Sync>;

fn check_cell(make: &dyn Fn(u64) -> Shared, kind: Kind) {
    for (case, (sequences, backwards, masked, zero, with_init)) in [
        (false, false, false, false, false),
        (true, false, false, false, true),
        (true, true, false, false, false),
        (true, false, true, false, true),
        (false, false, true, false, true),
        (true, true, true, false, true),
        (true, false, true, true, true),
    ]
    .into_iter()
    .enumerate()
    {
        let mut layer = make(100 + case as u64);
        layer.set_return_sequences(sequences);
        layer.set_go_backwards(backwards);
        layer.set_zero_output_for_mask(zero);
        let cell = randomize(&*layer, kind, F, 200 + 10 * case as u64);
        let (x, xt) = input(300 + case as u64);
        let n = cell.states();
        let init: Vec<Vec<f64>> = (0..n)
            .map(|k| values(B * U, 400 + k as u64, -0.5, 0.5))
            .collect();
        let init_t: Vec<Tensor> = init
            .iter()
            .map(|v| tensor(v, &[B as i64, U as i64]))
            .collect();
        let mask = mask_tensor();
        let options = RefOptions {
            mask: masked.then_some(&mask_fn as &dyn Fn(usize, usize) -> bool),
            init: with_init.then_some(init.as_slice()),
            go_backwards: backwards,
            zero_output: zero,
        };
        let want = run_ref(&cell, &x, B, T, &options);
        let what = format!("{kind:?} case {case}");
        let check = |out: &RnnOutput, how: &str| {
            let want_out = if sequences { &want.seq } else { &want.last };
            assert_close(
                &host(&out.outputs),
                want_out,
                1e-10,
                &format!("{what} {how} outputs"),
            );
            assert_eq!(out.states.len(), n);
            for (k, s) in out.states.iter().enumerate() {
                assert_close(
                    &host(s),
                    &want.states[k],
                    1e-10,
                    &format!("{what} {how} state {k}"),
                );
            }
        };
        let init_arg = with_init.then_some(init_t.as_slice());
        let mask_arg = masked.then_some(&mask);
        check(&layer.run(&xt, init_arg, mask_arg).unwrap(), "eager");
        let layer: Arc<dyn Recurrent + Send + Sync> = Arc::from(layer);
        let f = function(
            move |x: Tensor, init: Vec<Tensor>, mask: Tensor| -> Result<(Tensor, Vec<Tensor>)> {
                let out = layer.run(
                    &x,
                    with_init.then_some(init.as_slice()),
                    masked.then_some(&mask),
                )?;
                Ok((out.outputs, out.states))
            },
        );
        let (outputs, states) = f.call((xt.clone(), init_t.clone(), mask.clone())).unwrap();
        check(&RnnOutput { outputs, states }, "compiled");
    }
}

#[test]
fn lstm_matches_the_keras_recurrence_eager_and_compiled() {
    check_cell(&|seed| Box::new(lstm(seed)), Kind::Lstm);
}

#[test]
fn gru_reset_after_matches_the_keras_recurrence_eager_and_compiled() {
    check_cell(
        &|seed| Box::new(gru(seed, true)),
        Kind::Gru { reset_after: true },
    );
}

#[test]
fn gru_reset_before_matches_the_keras_recurrence_eager_and_compiled() {
    check_cell(
        &|seed| Box::new(gru(seed, false)),
        Kind::Gru { reset_after: false },
    );
}

#[test]
fn layer_call_variable_names_and_shapes() {
    let l = lstm(1);
    let (_, x) = input(1);
    assert_eq!(l.forward(&x).unwrap().dims(), vec![B as i64, U as i64]);
    let shapes: Vec<(String, Vec<i64>)> = l
        .named_variables()
        .into_iter()
        .map(|(n, v)| (n, v.dims().to_vec()))
        .collect();
    let want = |g: i64, bias: Vec<i64>| {
        vec![
            ("kernel".to_string(), vec![F as i64, g * U as i64]),
            ("recurrent_kernel".to_string(), vec![U as i64, g * U as i64]),
            ("bias".to_string(), bias),
        ]
    };
    assert_eq!(shapes, want(4, vec![4 * U as i64]));
    for (reset_after, bias) in [(true, vec![2, 3 * U as i64]), (false, vec![3 * U as i64])] {
        let g = gru(2, reset_after).return_sequences(true);
        assert_eq!(
            g.forward(&x).unwrap().dims(),
            vec![B as i64, T as i64, U as i64]
        );
        let shapes: Vec<(String, Vec<i64>)> = g
            .named_variables()
            .into_iter()
            .map(|(n, v)| (n, v.dims().to_vec()))
            .collect();
        assert_eq!(shapes, want(3, bias));
    }
    let no_bias = lstm(3).use_bias(false).unit_forget_bias(false);
    no_bias.forward(&x).unwrap();
    assert_eq!(no_bias.named_variables().len(), 2);
    let stacked = Lstm::stacked(&xlafn::random::key(4).unwrap(), U as i64, 2).unwrap();
    stacked.forward(&x).unwrap();
    let names: Vec<String> = stacked
        .named_variables()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names[0], "layers.0.kernel");
    assert_eq!(names[5], "layers.1.bias");
    let bi = Gru::bidirectional(&xlafn::random::key(5).unwrap(), U as i64).unwrap();
    assert_eq!(bi.forward(&x).unwrap().dims(), vec![B as i64, 2 * U as i64]);
    let names: Vec<String> = bi.named_variables().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names[0], "forward.kernel");
    assert_eq!(names[3], "backward.kernel");
}

/// Keras' initial weights: Glorot-uniform kernels, orthogonal recurrent
/// kernels, zero biases but the LSTM forget gate's ones.
#[test]
fn initial_weights_follow_keras() {
    let (_, x) = input(2);
    let l = lstm(6);
    l.forward(&x).unwrap();
    let w = |name: &str, layer: &dyn Module| {
        let v = layer
            .named_variables()
            .into_iter()
            .find(|(n, _)| n == name)
            .unwrap()
            .1;
        host(&v.read())
    };
    let bias = w("bias", &l);
    let want: Vec<f64> = (0..4 * U)
        .map(|j| if (U..2 * U).contains(&j) { 1.0 } else { 0.0 })
        .collect();
    assert_eq!(bias, want);
    check_init(&w("kernel", &l), &w("recurrent_kernel", &l), 4);
    let g = gru(7, true);
    g.forward(&x).unwrap();
    assert!(w("bias", &g).iter().all(|v| *v == 0.0));
    check_init(&w("kernel", &g), &w("recurrent_kernel", &g), 3);
}

fn check_init(kernel: &[f64], recurrent: &[f64], gates: usize) {
    let width = gates * U;
    let limit = (6.0 / (F + width) as f64).sqrt();
    assert!(kernel.iter().all(|v| v.abs() <= limit));
    assert!(kernel.iter().any(|v| v.abs() > limit / 4.0));
    // [U, gates * U] with orthonormal rows: R R^T = I.
    for i in 0..U {
        for j in 0..U {
            let d: f64 = (0..width)
                .map(|k| recurrent[i * width + k] * recurrent[j * width + k])
                .sum();
            let want = if i == j { 1.0 } else { 0.0 };
            assert!((d - want).abs() < 1e-5, "R R^T[{i}][{j}] = {d}");
        }
    }
}

#[test]
fn stacked_layers_feed_sequences_to_each_other() {
    let key = xlafn::random::key(8).unwrap();
    for sequences in [false, true] {
        let stack = Lstm::stacked(&key, U as i64, 2)
            .unwrap()
            .return_sequences(sequences);
        let first = randomize(&stack.layers[0], Kind::Lstm, F, 500);
        let second = randomize(&stack.layers[1], Kind::Lstm, U, 510);
        let (x, xt) = input(520);
        let mask = mask_tensor();
        let masked = RefOptions {
            mask: Some(&mask_fn),
            ..PLAIN
        };
        let a = run_ref(&first, &x, B, T, &masked);
        let b = run_ref(&second, &a.seq, B, T, &masked);
        let out = stack.run(&xt, None, Some(&mask)).unwrap();
        let want = if sequences { &b.seq } else { &b.last };
        assert_close(&host(&out.outputs), want, 1e-10, "stack outputs");
        let states: Vec<Vec<f64>> = a.states.into_iter().chain(b.states).collect();
        assert_eq!(out.states.len(), 4);
        for (k, s) in out.states.iter().enumerate() {
            assert_close(&host(s), &states[k], 1e-10, &format!("stack state {k}"));
        }
    }
}

/// Bidirectional = the forward run concatenated with the backward run
/// (the sequence read from the end), reversed back into input order;
/// masked outputs are zeros when sequences are returned.
#[test]
fn bidirectional_is_forward_plus_reversed_backward() {
    for (sequences, masked) in [(true, false), (true, true), (false, true)] {
        let bi = Gru::bidirectional(&xlafn::random::key(9).unwrap(), U as i64)
            .unwrap()
            .return_sequences(sequences);
        let kind = Kind::Gru { reset_after: true };
        let fwd = randomize(&bi.forward, kind, F, 600);
        let bwd = randomize(&bi.backward, kind, F, 610);
        let (x, xt) = input(620);
        let mask = mask_tensor();
        let o = RefOptions {
            mask: masked.then_some(&mask_fn as &dyn Fn(usize, usize) -> bool),
            zero_output: sequences,
            ..PLAIN
        };
        let f = run_ref(&fwd, &x, B, T, &o);
        let b = run_ref(
            &bwd,
            &x,
            B,
            T,
            &RefOptions {
                go_backwards: true,
                ..o
            },
        );
        let mut want = Vec::new();
        for r in 0..B {
            if sequences {
                for t in 0..T {
                    want.extend_from_slice(&f.seq[(r * T + t) * U..(r * T + t + 1) * U]);
                    let back = T - 1 - t;
                    want.extend_from_slice(&b.seq[(r * T + back) * U..(r * T + back + 1) * U]);
                }
            } else {
                want.extend_from_slice(&f.last[r * U..(r + 1) * U]);
                want.extend_from_slice(&b.last[r * U..(r + 1) * U]);
            }
        }
        let out = bi.run(&xt, None, masked.then_some(&mask)).unwrap();
        assert_close(&host(&out.outputs), &want, 1e-10, "bidirectional");
        assert_close(&host(&out.states[0]), &f.states[0], 1e-10, "forward state");
        assert_close(&host(&out.states[1]), &b.states[0], 1e-10, "backward state");
    }
}

#[test]
fn gradients_match_finite_differences() {
    let (b, t, f, u) = (2usize, 3usize, 2usize, 2usize);
    let x = values(b * t * f, 700, -1.0, 1.0);
    let dims = [b as i64, t as i64, f as i64];
    let mask = Tensor::from_vec(vec![1i32, 1, 1, 0, 1, 0], &[2, 3]).unwrap();
    let key = xlafn::random::key(10).unwrap();
    let layers: Vec<(&str, Box<dyn Recurrent>)> = vec![
        (
            "lstm",
            Box::new(Lstm::new(&key, u as i64).unwrap().return_sequences(true)),
        ),
        (
            "gru",
            Box::new(Gru::new(&key, u as i64).unwrap().go_backwards(true)),
        ),
        (
            "gru reset before",
            Box::new(
                Gru::new(&key, u as i64)
                    .unwrap()
                    .reset_after(false)
                    .return_sequences(true),
            ),
        ),
    ];
    for (what, layer) in layers {
        for m in [None, Some(&mask)] {
            check_gradient(
                &|x| {
                    let out = layer.run(x, None, m)?;
                    // The loss sees the outputs and the final cell state.
                    let last = out.states[out.states.len() - 1].reduce_sum(&[], false)?;
                    out.outputs.add(&last)
                },
                &x,
                &dims,
                1e-6,
                &format!("{what}, mask {}", m.is_some()),
            );
        }
    }
}

/// The compiled layer is one `while` loop; its compiled gradient is one
/// forward and one backward loop, and equals the eager gradient, with
/// respect to the input and the recurrent kernel.
/// The gradients of `sum(y^2)` (y: `layer`'s masked output sequence)
/// with respect to the input and the recurrent kernel, eagerly and
/// compiled, checked equal; returns the compiled function's StableHLO.
fn compiled_gradients_match_eager<R>(layer: Arc<R>, recurrent: Variable, seed: u64) -> String
where
    R: Recurrent + Send + Sync + 'static,
{
    let (_, xt) = input(seed);
    let grads = move |layer: &R, x: &Tensor| -> Result<(Tensor, Tensor)> {
        let tape = GradientTape::new();
        tape.watch(x);
        let y = layer.run(x, None, Some(&mask_tensor()))?.outputs;
        let loss = y.square()?.reduce_sum(&[], false)?;
        let g = tape.gradient(&loss, &[Source::from(x), Source::from(&recurrent)])?;
        Ok((g[0].clone().expect("dx"), g[1].clone().expect("dR")))
    };
    let (dx, dr) = grads(&layer, &xt).unwrap();
    let f = function(move |x: Tensor| grads(&layer, &x));
    let (cx, cr) = f.call((xt,)).unwrap();
    assert_close(&host(&cx), &host(&dx), 1e-10, "compiled dx");
    assert_close(&host(&cr), &host(&dr), 1e-10, "compiled dR");
    let spec = [ArraySpec::new(DType::F64, &[B as i64, T as i64, F as i64])];
    f.concrete_functions()[0].stablehlo(&spec).unwrap()
}

#[test]
fn compiled_gradient_is_two_loops_and_matches_eager() {
    let layer = Arc::new(
        Lstm::new(&xlafn::random::key(11).unwrap(), U as i64)
            .unwrap()
            .return_sequences(true),
    );
    randomize(&*layer, Kind::Lstm, F, 800);
    let recurrent = layer.recurrent_kernel.variable().unwrap().clone();
    let text = compiled_gradients_match_eager(layer.clone(), recurrent, 810);
    assert_eq!(text.matches("stablehlo.while").count(), 2, "{text}");
    let forward = function(move |x: Tensor| layer.forward(&x));
    let (_, xt) = input(810);
    forward.call((xt,)).unwrap();
    let spec = [ArraySpec::new(DType::F64, &[B as i64, T as i64, F as i64])];
    let text = forward.concrete_functions()[0].stablehlo(&spec).unwrap();
    assert_eq!(text.matches("stablehlo.while").count(), 1, "{text}");
}

/// Under a tape, the GRU's forward loop records its gates
/// (the two sigmoids and the tanh candidate: the activations whose
/// gradient reads their output) beside its state and its recurrent dot,
/// and the backward loop reads them instead of recomputing them. The
/// recorded `[T, B, U]` buffers are the two states and the three gates
/// (before: the two states only). The compiled gradient still equals the
/// eager one.
#[test]
fn the_grus_forward_loop_records_its_gates() {
    let layer = Arc::new(gru(21, true));
    randomize(&*layer, Kind::Gru { reset_after: true }, F, 820);
    let recurrent = layer.recurrent_kernel.variable().unwrap().clone();
    let text = compiled_gradients_match_eager(layer, recurrent, 830);
    // The forward loop's result types: its loop values, then the record.
    let start = text.find("stablehlo.while").expect("a forward loop");
    let types = text[start..]
        .lines()
        .find(|l| l.trim_start().starts_with("}) : ("))
        .expect("the loop's types");
    let results = types.split(") -> (").nth(1).expect("result types");
    // Two states (h, the last output), then recorded: both states and the
    // three gates.
    let per_step = format!("tensor<{T}x{B}x{U}xf64>");
    assert_eq!(results.matches(&per_step).count(), 5, "{types}");
    let dot = format!("tensor<{T}x{B}x{}xf64>", 3 * U);
    assert_eq!(results.matches(&dot).count(), 1, "{types}");
}

#[test]
fn errors_name_the_problem() {
    let key = xlafn::random::key(12).unwrap();
    assert!(
        Lstm::new(&key, 0)
            .unwrap_err()
            .to_string()
            .contains("units")
    );
    let l = lstm(13);
    let (_, x) = input(13);
    let flat = Tensor::zeros(&[B as i64, F as i64], DType::F64);
    let e = l.run(&flat, None, None).unwrap_err();
    assert!(e.to_string().contains("[batch, time, features]"), "{e}");
    let e = l
        .run(&x, None, Some(&Tensor::ones(&[B as i64, 2], DType::Bool)))
        .unwrap_err();
    assert!(e.to_string().contains("mask"), "{e}");
    let e = l
        .run(
            &x,
            None,
            Some(&Tensor::ones(&[B as i64, T as i64], DType::F32)),
        )
        .unwrap_err();
    assert!(e.to_string().contains("mask"), "{e}");
    let one = [Tensor::zeros(&[B as i64, U as i64], DType::F64)];
    let e = l.run(&x, Some(&one), None).unwrap_err();
    assert!(e.to_string().contains("2 initial states"), "{e}");
    let wrong = [
        Tensor::zeros(&[B as i64, U as i64 + 1], DType::F64),
        Tensor::zeros(&[B as i64, U as i64], DType::F64),
    ];
    assert!(l.run(&x, Some(&wrong), None).is_err());
    // Built for 3 features, called on 2.
    let other = Tensor::zeros(&[B as i64, T as i64, 2], DType::F64);
    let e = l.run(&other, None, None).unwrap_err();
    assert!(e.to_string().contains("built"), "{e}");
    let e = Stacked::<Gru>::new(Vec::new()).unwrap_err();
    assert!(e.to_string().contains("at least one"), "{e}");
    let stack = Gru::stacked(&key, U as i64, 2).unwrap();
    let e = stack.run(&x, Some(&one), None).unwrap_err();
    assert!(e.to_string().contains("2 initial states"), "{e}");
    let bi: Bidirectional<Lstm> = Lstm::bidirectional(&key, U as i64).unwrap();
    let e = bi.run(&x, Some(&one), None).unwrap_err();
    assert!(e.to_string().contains("4 initial states"), "{e}");
}

/// Every variable as (name, dims, values).
fn snapshot(m: &dyn Module) -> Vec<(String, Vec<i64>, Vec<f64>)> {
    m.named_variables()
        .into_iter()
        .map(|(n, v)| {
            let t = v.read();
            (n, t.dims(), t.to_f64_vec().unwrap())
        })
        .collect()
}

#[test]
fn build_makes_the_weights_a_first_call_would() {
    // The inputs here are float64, so a first call builds float64 weights.
    let (_, x) = input(7);
    let key = xlafn::random::key(11).unwrap();
    // Built ahead: the same names, shapes and values as built by a call.
    let ahead = Lstm::new(&key, U as i64).unwrap();
    assert!(ahead.named_variables().is_empty());
    ahead.build(F as i64, x.dtype()).unwrap();
    let by_call = Lstm::new(&key, U as i64).unwrap();
    by_call.forward(&x).unwrap();
    assert_eq!(snapshot(&ahead), snapshot(&by_call));
    // The call then uses them as they are.
    let before = snapshot(&ahead);
    assert_close(
        &host(&ahead.forward(&x).unwrap()),
        &host(&by_call.forward(&x).unwrap()),
        0.0,
        "built-ahead output",
    );
    assert_eq!(snapshot(&ahead), before);
    // Again for the same sizes: nothing changes.
    ahead.build(F as i64, x.dtype()).unwrap();
    assert_eq!(snapshot(&ahead), before);
    for reset_after in [true, false] {
        let ahead = Gru::new(&key, U as i64).unwrap().reset_after(reset_after);
        ahead.build(F as i64, x.dtype()).unwrap();
        let by_call = Gru::new(&key, U as i64).unwrap().reset_after(reset_after);
        by_call.forward(&x).unwrap();
        assert_eq!(
            snapshot(&ahead),
            snapshot(&by_call),
            "reset_after {reset_after}"
        );
    }
    // Stacks and pairs build each layer for what it reads.
    let stacked = Gru::stacked(&key, U as i64 + 1, 2).unwrap();
    stacked.build(F as i64, x.dtype()).unwrap();
    let dims: Vec<(String, Vec<i64>)> = stacked
        .named_variables()
        .into_iter()
        .map(|(n, v)| (n, v.dims().to_vec()))
        .collect();
    let u = U as i64 + 1;
    assert_eq!(dims[0], ("layers.0.kernel".into(), vec![F as i64, 3 * u]));
    assert_eq!(dims[3], ("layers.1.kernel".into(), vec![u, 3 * u]));
    let by_call = Gru::stacked(&key, U as i64 + 1, 2).unwrap();
    by_call.forward(&x).unwrap();
    assert_eq!(snapshot(&stacked), snapshot(&by_call));
    let bi = Lstm::bidirectional(&key, U as i64).unwrap();
    bi.build(F as i64, x.dtype()).unwrap();
    let by_call = Lstm::bidirectional(&key, U as i64).unwrap();
    by_call.forward(&x).unwrap();
    assert_eq!(snapshot(&bi), snapshot(&by_call));
}

#[test]
fn build_errors_name_the_problem() {
    let key = xlafn::random::key(12).unwrap();
    let l = Lstm::new(&key, U as i64).unwrap();
    let e = l.build(0, DType::F32).unwrap_err().to_string();
    assert!(e.contains("Lstm") && e.contains("features >= 1"), "{e}");
    assert!(
        l.named_variables().is_empty(),
        "a refused build makes nothing"
    );
    l.build(F as i64, DType::F32).unwrap();
    // Built for 3 features, then asked for 5, or called on 5.
    let e = l.build(5, DType::F32).unwrap_err().to_string();
    assert!(e.contains("another size"), "{e}");
    let x = Tensor::ones(&[B as i64, T as i64, 5], DType::F32);
    let e = l.forward(&x).unwrap_err().to_string();
    assert!(e.contains("built for 3"), "{e}");
    let g = Gru::new(&key, U as i64).unwrap();
    let e = g.build(-1, DType::F32).unwrap_err().to_string();
    assert!(e.contains("Gru") && e.contains("got -1"), "{e}");
}

#[test]
fn build_under_a_policy_makes_variables_in_its_variable_dtype() {
    use xlafn::nn::mixed_precision::Policy;
    let key = xlafn::random::key(15).unwrap();
    let l = Lstm::new(&key, U as i64)
        .unwrap()
        .dtype_policy(Policy::mixed_bfloat16());
    // Built "for bf16 inputs", the variables are the policy's float32.
    l.build(F as i64, DType::BF16).unwrap();
    for (name, v) in l.named_variables() {
        assert_eq!(v.dtype(), DType::F32, "{name}");
    }
    let x = Tensor::ones(&[B as i64, T as i64, F as i64], DType::F32);
    assert_eq!(l.forward(&x).unwrap().dtype(), DType::BF16);
}

#[test]
fn a_built_layer_restores_a_checkpoint_without_a_forward_pass() {
    let (_, x) = input(8);
    let trained = Lstm::new(&xlafn::random::key(13).unwrap(), U as i64).unwrap();
    let want = host(&trained.forward(&x).unwrap());
    let path = std::env::temp_dir().join(format!("built-lstm-{}.ckpt", std::process::id()));
    xlafn::checkpoint::save(&trained, &path).unwrap();
    let fresh = Lstm::new(&xlafn::random::key(14).unwrap(), U as i64).unwrap();
    fresh.build(F as i64, x.dtype()).unwrap();
    xlafn::checkpoint::restore(&fresh, &path).unwrap();
    assert_close(
        &host(&fresh.forward(&x).unwrap()),
        &want,
        0.0,
        "restored output",
    );
    let _ = std::fs::remove_file(&path);
}
