//! `xlafn::nn::layers` (all but the convolutions, in layers_conv.rs, and
//! the normalizations, dropout and pooling, in layers_norm_pool.rs)
//! against references written here as plain loops over `Vec<f64>` (no
//! xlafn ops): each layer eagerly and in a compiled function; gradients
//! with respect to inputs and weights against central differences; lazy
//! building (eager and inside a function); variable names; the errors;
//! and a small MLP trained with Adam.

#[path = "common/gradcheck.rs"]
mod gradcheck;

use gradcheck::check_gradient;
use std::sync::Arc;
use xlafn::module::Module;
use xlafn::nn::layers::*;
use xlafn::ops::conv::Padding;
use xlafn::prelude::*;

#[path = "common/layer_data.rs"]
mod layer_data;
use layer_data::{assert_close, check_eager_and_compiled, f32s, f64s, host, key, names, values};

/// d/dv `sum(out() * w)` from the tape against central differences,
/// moving `v`'s elements one at a time (f64 weights).
pub fn check_weight_gradient(out: &dyn Fn() -> Result<Tensor>, v: &Variable, tol: f64, what: &str) {
    let n = out().unwrap().size() as usize;
    let w: Vec<f64> = (0..n).map(|i| 0.5 + (i as f64 * 0.37) % 1.0).collect();
    let w = Tensor::from_vec(w, &out().unwrap().dims()).unwrap();
    let loss = || out()?.mul(&w)?.reduce_sum(&[], false);
    let tape = GradientTape::new();
    let l = loss().unwrap();
    let analytic = tape.gradient(&l, &[Source::from(v)]).unwrap()[0]
        .clone()
        .unwrap_or_else(|| panic!("{what}: no gradient"))
        .to_vec::<f64>()
        .unwrap();
    let start = v.read().to_vec::<f64>().unwrap();
    let dims = v.dims().to_vec();
    let h = 1e-6;
    for i in 0..start.len() {
        let shifted = |d: f64| {
            let mut p = start.clone();
            p[i] += d;
            v.assign(&f64s(&p, &dims)).unwrap();
            loss().unwrap().item::<f64>().unwrap()
        };
        let numeric = (shifted(h) - shifted(-h)) / (2.0 * h);
        assert!(
            (analytic[i] - numeric).abs() <= tol * (1.0 + numeric.abs()),
            "{what}: element {i}: analytic {} vs numeric {numeric}",
            analytic[i]
        );
    }
    v.assign(&f64s(&start, &dims)).unwrap();
}

fn erf(x: f64) -> f64 {
    // The Maclaurin series: 2/sqrt(pi) * sum (-1)^k x^(2k+1) / (k! (2k+1)).
    let mut sum: f64 = 0.0;
    let mut term = x;
    let mut k = 0.0;
    while k < 200.0 {
        sum += term / (2.0 * k + 1.0);
        k += 1.0;
        term *= -x * x / k;
    }
    sum * 2.0 / std::f64::consts::PI.sqrt()
}

/// The activations by their formulas, on one row (for the softmaxes).
fn activate(a: Activation, row: &[f64]) -> Vec<f64> {
    let sig = |x: f64| 1.0 / (1.0 + (-x).exp());
    match a {
        Activation::Softmax | Activation::LogSoftmax => {
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let s: f64 = row.iter().map(|x| (x - m).exp()).sum();
            row.iter()
                .map(|x| {
                    let l = x - m - s.ln();
                    if a == Activation::Softmax { l.exp() } else { l }
                })
                .collect()
        }
        _ => row
            .iter()
            .map(|&x| match a {
                Activation::Linear => x,
                Activation::Relu => x.max(0.0),
                Activation::Relu6 => x.clamp(0.0, 6.0),
                Activation::LeakyRelu(al) => {
                    if x > 0.0 {
                        x
                    } else {
                        al * x
                    }
                }
                Activation::Elu => {
                    if x > 0.0 {
                        x
                    } else {
                        x.exp() - 1.0
                    }
                }
                Activation::Selu => {
                    let (alpha, scale) = (1.673_263_242_354_377_3, 1.050_700_987_355_480_5);
                    scale * if x > 0.0 { x } else { alpha * (x.exp() - 1.0) }
                }
                Activation::Gelu { approximate: true } => {
                    let c = (2.0 / std::f64::consts::PI).sqrt();
                    0.5 * x * (1.0 + (c * (x + 0.044715 * x.powi(3))).tanh())
                }
                Activation::Gelu { approximate: false } => 0.5 * x * (1.0 + erf(x / 2f64.sqrt())),
                Activation::Silu => x * sig(x),
                Activation::Tanh => x.tanh(),
                Activation::Sigmoid => sig(x),
                Activation::Softplus => (1.0 + x.exp()).ln(),
                Activation::LogSigmoid => sig(x).ln(),
                _ => unreachable!(),
            })
            .collect(),
    }
}

const ACTIVATIONS: [Activation; 14] = [
    Activation::Linear,
    Activation::Relu,
    Activation::Relu6,
    Activation::LeakyRelu(0.2),
    Activation::Elu,
    Activation::Selu,
    Activation::Gelu { approximate: true },
    Activation::Gelu { approximate: false },
    Activation::Silu,
    Activation::Tanh,
    Activation::Sigmoid,
    Activation::Softplus,
    Activation::LogSigmoid,
    Activation::Softmax,
];

/// `x [rows, n_in] @ kernel [n_in, units] + bias`, by loops.
fn dense_ref(
    x: &[f64],
    kernel: &[f64],
    bias: Option<&[f64]>,
    n_in: usize,
    units: usize,
) -> Vec<f64> {
    let rows = x.len() / n_in;
    let mut y = vec![0.0; rows * units];
    for r in 0..rows {
        for u in 0..units {
            let mut s = bias.map_or(0.0, |b| b[u]);
            for i in 0..n_in {
                s += x[r * n_in + i] * kernel[i * units + u];
            }
            y[r * units + u] = s;
        }
    }
    y
}

#[test]
fn linear_matches_loops_on_any_rank_with_each_activation() {
    let x = values(2 * 5 * 3, 1, -2.0, 2.0);
    let xt = f32s(&x, &[2, 5, 3]);
    for (i, a) in ACTIVATIONS.iter().enumerate() {
        let layer = Linear::new(&key(i as u64), 3, 4)
            .unwrap()
            .bias_initializer(xlafn::initializers::Initializer::Uniform(-1.0, 1.0))
            .activation(*a)
            .build(3)
            .unwrap();
        let kernel = host(&layer.kernel().unwrap().read());
        let bias = host(&layer.bias().unwrap().read());
        assert!(bias.iter().any(|b| *b != 0.0));
        let pre = dense_ref(&x, &kernel, Some(&bias), 3, 4);
        let want: Vec<f64> = pre.chunks(4).flat_map(|r| activate(*a, r)).collect();
        let layer = Arc::new(layer);
        check_eager_and_compiled(layer.clone(), &xt, &want, 2e-5, &format!("{a:?}"));
        assert_eq!(layer.forward(&xt).unwrap().dims(), vec![2, 5, 4]);
    }
    // Also as a layer of its own, Activation::LogSoftmax on a row.
    let row = [0.5, -1.0, 2.0];
    let got = host(&Activation::LogSoftmax.forward(&f64s(&row, &[3])).unwrap());
    assert_close(
        &got,
        &activate(Activation::LogSoftmax, &row),
        1e-12,
        "log_softmax",
    );
}

#[test]
fn linear_without_bias_and_on_a_vector() {
    let layer = Linear::new(&key(3), 3, 2).unwrap().use_bias(false);
    assert_eq!(names(&layer), ["kernel"]);
    let kernel = host(&layer.kernel().unwrap().read());
    let x = [1.0, -2.0, 0.5];
    let got = host(&layer.forward(&f32s(&x, &[3])).unwrap());
    assert_close(&got, &dense_ref(&x, &kernel, None, 3, 2), 1e-6, "vector");
}

/// Keras' GlorotUniform bound sqrt(6 / (in + out)), a zero bias, and the
/// same key giving the same weights.
#[test]
fn linear_defaults_follow_keras() {
    let a = Linear::new(&key(5), 30, 20).unwrap();
    let b = Linear::new(&key(5), 30, 20).unwrap();
    let ka = host(&a.kernel().unwrap().read());
    assert_eq!(ka, host(&b.kernel().unwrap().read()));
    let bound = (6.0f64 / 50.0).sqrt();
    assert!(ka.iter().all(|v| v.abs() <= bound));
    assert!(ka.iter().any(|v| v.abs() > 0.8 * bound));
    assert_eq!(host(&a.bias().unwrap().read()), vec![0.0; 20]);
    assert_eq!(a.kernel().unwrap().dtype(), DType::F32);
    // Another key, other weights; the kernel and the bias draw apart.
    let c = Linear::new(&key(6), 30, 20).unwrap();
    assert_ne!(ka, host(&c.kernel().unwrap().read()));
}

#[test]
fn lazy_linear_is_built_on_the_first_call() {
    let layer = Linear::lazy(&key(7), 4).unwrap();
    assert!(layer.variables().is_empty());
    let x = f32s(&values(6, 2, -1.0, 1.0), &[2, 3]);
    let y = layer.forward(&x).unwrap();
    assert_eq!(names(&layer), ["kernel", "bias"]);
    assert_eq!(layer.kernel().unwrap().dims(), &[3, 4]);
    assert_eq!(layer.bias().unwrap().dims(), &[4]);
    // The weights are what `new` with the same key draws.
    let eager = Linear::new(&key(7), 3, 4).unwrap();
    assert_eq!(
        host(&layer.kernel().unwrap().read()),
        host(&eager.kernel().unwrap().read())
    );
    assert_eq!(host(&y), host(&eager.forward(&x).unwrap()));
    // Built for 3 features: 5 is an error naming the layer.
    let e = layer.forward(&f32s(&[0.0; 10], &[2, 5])).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument { op, .. } if op == "Linear"),
        "{e:?}"
    );
    assert!(e.to_string().contains("built for 3 input features"), "{e}");
}

#[test]
fn lazy_layers_built_inside_a_compiled_function() {
    let model = Arc::new(
        Sequential::new()
            .add(Linear::lazy(&key(8), 5).unwrap())
            .add(LayerNorm::lazy().unwrap())
            .add(Activation::Tanh)
            .add(Linear::lazy(&key(9), 2).unwrap()),
    );
    assert!(model.variables().is_empty());
    let f = function({
        let m = model.clone();
        move |x: Tensor| m.forward(&x)
    });
    let x = f32s(&values(12, 4, -1.0, 1.0), &[4, 3]);
    let compiled = f.call((&x,)).unwrap();
    assert_eq!(
        names(&*model),
        [
            "layers.0.kernel",
            "layers.0.bias",
            "layers.1.gamma",
            "layers.1.beta",
            "layers.3.kernel",
            "layers.3.bias"
        ]
    );
    let shapes: Vec<Vec<i64>> = model
        .variables()
        .iter()
        .map(|v| v.dims().to_vec())
        .collect();
    assert_eq!(
        shapes,
        [vec![3, 5], vec![5], vec![5], vec![5], vec![5, 2], vec![2]]
    );
    // The variables hold the initial values, readable eagerly, and the
    // eager call agrees with the compiled one.
    assert_close(
        &host(&model.forward(&x).unwrap()),
        &host(&compiled),
        1e-6,
        "eager",
    );
    let k0 = Linear::new(&key(8), 3, 5).unwrap();
    assert_eq!(
        host(&model.variables()[0].read()),
        host(&k0.kernel().unwrap().read())
    );
    // The first call traced twice (once creating the variables, once
    // using them, as tf.function does); the second reused the trace.
    f.call((&x,)).unwrap();
    assert_eq!(f.tracing_count(), 2);
}

#[test]
fn sequential_names_its_layers_variables() {
    let model = Sequential::new()
        .add(
            Conv2d::new(&key(1), 3, 4, [3, 3])
                .unwrap()
                .padding(Padding::Same),
        )
        .add(LayerNorm::new(4).unwrap())
        .add(GlobalAvgPool::new())
        .add(Linear::new(&key(2), 4, 2).unwrap())
        .add(BatchNorm::new(2, DType::F32).unwrap())
        .add_fn(|x| x.mul_scalar(2.0));
    assert_eq!(
        names(&model),
        [
            "layers.0.kernel",
            "layers.0.bias",
            "layers.1.gamma",
            "layers.1.beta",
            "layers.3.kernel",
            "layers.3.bias",
            "layers.4.gamma",
            "layers.4.beta",
            "layers.4.moving_mean",
            "layers.4.moving_variance"
        ]
    );
    assert_eq!(model.trainable_variables().len(), 8);
    let y = model
        .forward(&Tensor::ones(&[2, 5, 5, 3], DType::F32))
        .unwrap();
    assert_eq!(y.dims(), vec![2, 2]);
    // Reading the values also waits for the computation: a process that
    // exits while the CPU plugin still runs a convolution can crash.
    assert!(host(&y).iter().all(|v| v.is_finite()));
    // Nested under a struct field, the prefix joins.
    let outer = Sequential::new().add(model);
    assert_eq!(names(&outer)[0], "layers.0.layers.0.kernel");
}

#[test]
fn embedding_looks_up_rows_and_attends() {
    let emb = Embedding::new(&key(11), 7, 3).unwrap();
    assert_eq!(names(&emb), ["embeddings"]);
    let table = host(&emb.embeddings().unwrap().read());
    // Keras' RandomUniform(-0.05, 0.05).
    assert!(table.iter().all(|v| v.abs() <= 0.05));
    assert!(table.iter().any(|v| v.abs() > 0.03));
    let ids = [3i32, 0, 6, 6, 1, 2];
    let idt = Tensor::from_vec(ids.to_vec(), &[2, 3]).unwrap();
    let want: Vec<f64> = ids
        .iter()
        .flat_map(|&i| table[i as usize * 3..i as usize * 3 + 3].to_vec())
        .collect();
    check_eager_and_compiled(Arc::new(emb), &idt, &want, 0.0, "embedding");

    let emb = Embedding::new(&key(11), 7, 3).unwrap();
    let x = values(4 * 3, 5, -1.0, 1.0);
    let logits = host(&emb.attend(&f32s(&x, &[2, 2, 3])).unwrap());
    let mut want = vec![0.0; 4 * 7];
    for r in 0..4 {
        for v in 0..7 {
            want[r * 7 + v] = (0..3).map(|d| x[r * 3 + d] * table[v * 3 + d]).sum();
        }
    }
    assert_close(&logits, &want, 1e-5, "attend");
    assert_eq!(host(&emb.as_logits(&f32s(&x, &[4, 3])).unwrap()), logits);
    // Float ids and a wrong width are errors naming the layer.
    let e = emb.forward(&f32s(&[0.0], &[1])).unwrap_err();
    assert!(
        e.to_string().contains("Embedding: needs integer ids"),
        "{e}"
    );
    assert!(emb.attend(&f32s(&[0.0; 4], &[1, 4])).is_err());
}

#[test]
fn bad_inputs_are_errors_naming_the_layer() {
    let x2 = Tensor::ones(&[2, 3], DType::F32);
    let check = |r: Result<Tensor>, op: &str, text: &str| {
        let e = r.unwrap_err();
        assert!(
            matches!(&e, Error::InvalidArgument { op: o, .. } if o == op),
            "{op}: {e:?}"
        );
        assert!(e.to_string().contains(text), "{op}: {e}");
    };
    check(MaxPool2d::new([2, 2]).forward(&x2), "MaxPool2d", "rank 4");
    check(
        GlobalAvgPool::new().forward(&x2),
        "GlobalAvgPool",
        "rank >= 3",
    );
    check(
        Flatten::new().forward(&Tensor::scalar(1f32)),
        "Flatten",
        "batch axis",
    );
    check(
        Linear::new(&key(1), 3, 2)
            .unwrap()
            .forward(&Tensor::ones(&[2, 3], DType::I32)),
        "Linear",
        "floating-point",
    );
    check(
        Linear::new(&key(1), 3, 2)
            .unwrap()
            .forward(&Tensor::scalar(1f32)),
        "Linear",
        "rank >= 1",
    );
    check(
        LayerNorm::new(4).unwrap().forward(&x2),
        "LayerNorm",
        "built for 4 features",
    );
    check(
        RmsNorm::new(4).unwrap().forward(&x2),
        "RmsNorm",
        "built for 4 features",
    );
    check(
        GroupNorm::new(1, 4).unwrap().forward(&x2),
        "GroupNorm",
        "built for 4 channels",
    );
    check(
        GroupNorm::new(1, 3)
            .unwrap()
            .forward(&f32s(&[0.0; 3], &[3])),
        "GroupNorm",
        "channels-last",
    );
    assert!(Linear::lazy(&key(1), 0).is_err());
    // In a compiled function the same error comes back.
    let ln = Arc::new(LayerNorm::new(4).unwrap());
    let f = function(move |x: Tensor| ln.forward(&x));
    assert!(
        f.call((&x2,))
            .unwrap_err()
            .to_string()
            .contains("built for 4 features")
    );
}

#[test]
fn gradients_match_finite_differences() {
    let x = values(2 * 3, 41, -1.0, 1.0);
    // Linear: input, kernel, bias.
    let dense = Linear::lazy(&key(1), 4)
        .unwrap()
        .dtype(DType::F64)
        .bias_initializer(xlafn::initializers::Initializer::Uniform(-1.0, 1.0))
        .activation(Activation::Tanh)
        .build(3)
        .unwrap();
    check_gradient(&|x| dense.forward(x), &x, &[2, 3], 1e-6, "Linear dx");
    let xt = f64s(&x, &[2, 3]);
    check_weight_gradient(
        &|| dense.forward(&xt),
        dense.kernel().unwrap(),
        1e-6,
        "Linear dkernel",
    );
    check_weight_gradient(
        &|| dense.forward(&xt),
        dense.bias().unwrap(),
        1e-6,
        "Linear dbias",
    );

    // The normalizations, with non-trivial gamma and beta.
    let xn = values(3 * 4, 42, -2.0, 2.0);
    let xnt = f64s(&xn, &[3, 4]);
    let ln = LayerNorm::new(4)
        .unwrap()
        .dtype(DType::F64)
        .unwrap()
        .build(4)
        .unwrap();
    ln.gamma()
        .unwrap()
        .assign(&f64s(&values(4, 43, 0.5, 1.5), &[4]))
        .unwrap();
    check_gradient(&|x| ln.forward(x), &xn, &[3, 4], 1e-6, "LayerNorm dx");
    check_weight_gradient(
        &|| ln.forward(&xnt),
        ln.gamma().unwrap(),
        1e-6,
        "LayerNorm dgamma",
    );
    check_weight_gradient(
        &|| ln.forward(&xnt),
        ln.beta().unwrap(),
        1e-6,
        "LayerNorm dbeta",
    );

    let rms = RmsNorm::lazy()
        .unwrap()
        .dtype(DType::F64)
        .unwrap()
        .build(4)
        .unwrap();
    rms.gamma()
        .unwrap()
        .assign(&f64s(&values(4, 44, 0.5, 1.5), &[4]))
        .unwrap();
    check_gradient(&|x| rms.forward(x), &xn, &[3, 4], 1e-6, "RmsNorm dx");
    check_weight_gradient(
        &|| rms.forward(&xnt),
        rms.gamma().unwrap(),
        1e-6,
        "RmsNorm dgamma",
    );

    let xg = values(2 * 3 * 4, 45, -2.0, 2.0);
    let xgt = f64s(&xg, &[2, 3, 4]);
    let gn64 = GroupNorm::lazy(2)
        .unwrap()
        .dtype(DType::F64)
        .unwrap()
        .build(4)
        .unwrap();
    gn64.gamma()
        .unwrap()
        .assign(&f64s(&values(4, 46, 0.5, 1.5), &[4]))
        .unwrap();
    gn64.beta()
        .unwrap()
        .assign(&f64s(&values(4, 47, -0.5, 0.5), &[4]))
        .unwrap();
    check_gradient(&|x| gn64.forward(x), &xg, &[2, 3, 4], 1e-6, "GroupNorm dx");
    check_weight_gradient(
        &|| gn64.forward(&xgt),
        gn64.gamma().unwrap(),
        1e-6,
        "GroupNorm dgamma",
    );
    check_weight_gradient(
        &|| gn64.forward(&xgt),
        gn64.beta().unwrap(),
        1e-6,
        "GroupNorm dbeta",
    );

    // Embedding: the table's gradient (ids are not differentiable), and
    // attend's with respect to its input and the table.
    let emb = Embedding::with_initializer(
        &key(2),
        5,
        3,
        xlafn::initializers::Initializer::Normal(1.0),
        DType::F64,
    )
    .unwrap();
    let ids = Tensor::from_vec(vec![4i32, 0, 4, 2], &[4]).unwrap();
    let table = emb.embeddings().unwrap().clone();
    check_weight_gradient(&|| emb.forward(&ids), &table, 1e-6, "Embedding dtable");
    check_gradient(&|x| emb.attend(x), &x, &[2, 3], 1e-6, "attend dx");
    check_weight_gradient(&|| emb.attend(&xt), &table, 1e-6, "attend dtable");
}

/// Layers must be shareable across threads and capturable by `function`.
#[test]
fn every_layer_is_send_and_sync() {
    fn check<T: Send + Sync + 'static>() {}
    check::<Linear>();
    check::<Conv1d>();
    check::<Conv2d>();
    check::<Conv3d>();
    check::<ConvTranspose2d>();
    check::<DepthwiseConv2d>();
    check::<Embedding>();
    check::<LayerNorm>();
    check::<RmsNorm>();
    check::<GroupNorm>();
    check::<BatchNorm>();
    check::<Dropout>();
    check::<MaxPool2d>();
    check::<AvgPool1d>();
    check::<GlobalAvgPool>();
    check::<GlobalMaxPool>();
    check::<Flatten>();
    check::<Activation>();
    check::<Lambda>();
    check::<Sequential>();
}

/// A Sequential MLP trained with Adam on a tiny synthetic problem (the
/// sign of x0 * x1, a problem no linear model solves): the loss falls and
/// the accuracy rises, eagerly and in a compiled step.
#[test]
fn a_sequential_mlp_trains_with_adam() {
    let n = 64;
    let xs = values(n * 2, 51, -1.0, 1.0);
    let labels: Vec<i32> = xs.chunks(2).map(|p| (p[0] * p[1] > 0.0) as i32).collect();
    let x = f32s(&xs, &[n as i64, 2]);
    let y = Tensor::from_vec(labels.clone(), &[n as i64]).unwrap();
    let model = Arc::new(
        Sequential::new()
            .add(
                Linear::new(&key(61), 2, 16)
                    .unwrap()
                    .activation(Activation::Relu),
            )
            .add(Dropout::new(0.0).unwrap())
            .add(Linear::new(&key(62), 16, 2).unwrap()),
    );
    let opt = Arc::new(Adam::new(0.05));
    let vars = model.trainable_variables();
    assert_eq!(vars.len(), 4);
    let loss_of = |m: &Sequential, x: &Tensor, y: &Tensor| -> Result<Tensor> {
        let logits = m.call(x, &Mode::training())?;
        xlafn::nn::sparse_softmax_cross_entropy_with_logits(y, &logits)?.reduce_mean(&[], false)
    };
    let first = loss_of(&model, &x, &y).unwrap().item::<f32>().unwrap();
    // Eager steps.
    for _ in 0..5 {
        opt.minimize(&vars, || loss_of(&model, &x, &y)).unwrap();
    }
    // Compiled steps.
    let step = function({
        let (m, o) = (model.clone(), opt.clone());
        move |x: Tensor, y: Tensor| -> Result<Tensor> {
            let vars = m.trainable_variables();
            o.minimize(&vars, || loss_of(&m, &x, &y))
        }
    });
    for _ in 0..150 {
        step.call((&x, &y)).unwrap();
    }
    assert_eq!(step.tracing_count(), 1);
    let last = loss_of(&model, &x, &y).unwrap().item::<f32>().unwrap();
    assert!(last < 0.5 * first, "loss {first} -> {last}");
    let logits = host(&model.forward(&x).unwrap());
    let right = logits
        .chunks(2)
        .zip(&labels)
        .filter(|(l, y)| ((l[1] > l[0]) as i32) == **y)
        .count();
    assert!(right >= 56, "{right} of {n} right");
}
