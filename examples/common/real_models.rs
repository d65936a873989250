//! The real-model workloads W9-W12 of the book's benchmarks page, written with xlafn:
//! a transformer block (W9), a CNN (W10), an LSTM whose time loop is a
//! device loop (W11) and the guide's `Conv2D(100, 3)` layer (W12). Shared
//! by the benchmark report and `tests/real_models.rs`.
//!
//! Parameters and data are drawn exactly as `peers.py`'s `np_real` draws
//! them (numpy's legacy `RandomState` with the same seeds, reimplemented
//! in [`NpRandom`]), so the losses can be compared with the peers'
//! `check` figures ([`PEER_CHECKS`]). Training steps are one compiled
//! call each: forward, gradients and TensorFlow's Adam (epsilon 1e-7),
//! updating the variables in place.

#![allow(dead_code)]

use std::sync::Arc;
use xlafn::Padding;
use xlafn::nn;
use xlafn::optimizers::{Adam, Optimizer};
use xlafn::prelude::*;

// W9: vocabulary, width, heads, head width, sequence, batch, MLP width.
pub const W9_V: i64 = 256;
pub const W9_D: i64 = 128;
pub const W9_NH: i64 = 4;
pub const W9_DH: i64 = W9_D / W9_NH;
pub const W9_T: i64 = 64;
pub const W9_B: i64 = 8;
pub const W9_F: i64 = 512;
// W10: batch.
pub const W10_B: i64 = 32;
// W11: sequence, batch, input, hidden.
pub const W11_T: i64 = 50;
pub const W11_B: i64 = 16;
pub const W11_I: i64 = 32;
pub const W11_H: i64 = 64;
// W12: the guide's input and the work of one call.
pub const W12_X: [i64; 4] = [1, 200, 200, 100];
pub const W12_FLOP: f64 = 2.0 * 198.0 * 198.0 * 100.0 * 100.0 * 9.0;

/// What `peers.py` reported (`bench/peers_w9_12.json`, the `jax_jit`
/// cells; TensorFlow agrees to about 1e-7): the losses of the first three
/// Adam steps from the initial parameters, and `sum |p - p0|` after them.
pub struct PeerCheck {
    pub losses: [f64; 3],
    pub update_l1: f64,
}

pub const PEER_CHECKS: [(Workload, PeerCheck); 3] = [
    (
        Workload::W9,
        PeerCheck {
            losses: [5.568829536437988, 4.91342830657959, 4.482935428619385],
            update_l1: 1553.9452525518668,
        },
    ),
    (
        Workload::W10,
        PeerCheck {
            losses: [2.30303692817688, 2.2987418174743652, 2.292114734649658],
            update_l1: 545.4192106139569,
        },
    ),
    (
        Workload::W11,
        PeerCheck {
            losses: [0.9730548858642578, 0.97246253490448, 0.9718703031539917],
            update_l1: 56.76176028735347,
        },
    ),
];

/// W12's peer check: `sum |out|` of the layer on `x_check`, and the first
/// four channels of `out[0, 0, 0]`.
pub const W12_PEER_CHECK: (f64, [f64; 4]) = (
    1848727.94383851,
    [
        0.3750962018966675,
        -0.5783761739730835,
        0.8500082492828369,
        -0.6108582019805908,
    ],
);

/// numpy's legacy `RandomState(seed)` (MT19937 seeded by `init_genrand`):
/// `rand`, `randn` (polar Box-Muller, the second value kept for the next
/// draw), `randint` (masked rejection on 32-bit draws) and `uniform`,
/// bit for bit.
pub struct NpRandom {
    mt: [u32; 624],
    pos: usize,
    gauss: Option<f64>,
}

impl NpRandom {
    pub fn new(seed: u32) -> NpRandom {
        let mut mt = [0u32; 624];
        mt[0] = seed;
        for i in 1..624 {
            mt[i] = 1_812_433_253u32
                .wrapping_mul(mt[i - 1] ^ (mt[i - 1] >> 30))
                .wrapping_add(i as u32);
        }
        NpRandom {
            mt,
            pos: 624,
            gauss: None,
        }
    }

    fn next_u32(&mut self) -> u32 {
        if self.pos == 624 {
            for i in 0..624 {
                let y = (self.mt[i] & 0x8000_0000) | (self.mt[(i + 1) % 624] & 0x7fff_ffff);
                let mag = if y & 1 == 1 { 0x9908_b0df } else { 0 };
                self.mt[i] = self.mt[(i + 397) % 624] ^ (y >> 1) ^ mag;
            }
            self.pos = 0;
        }
        let mut y = self.mt[self.pos];
        self.pos += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `random_sample`: a double in [0, 1) from 53 random bits.
    pub fn next_double(&mut self) -> f64 {
        let a = f64::from(self.next_u32() >> 5);
        let b = f64::from(self.next_u32() >> 6);
        (a * 67_108_864.0 + b) / 9_007_199_254_740_992.0
    }

    /// One `randn` draw.
    pub fn gauss(&mut self) -> f64 {
        if let Some(g) = self.gauss.take() {
            return g;
        }
        loop {
            let x1 = 2.0 * self.next_double() - 1.0;
            let x2 = 2.0 * self.next_double() - 1.0;
            let r2 = x1 * x1 + x2 * x2;
            if r2 < 1.0 && r2 != 0.0 {
                let f = (-2.0 * r2.ln() / r2).sqrt();
                self.gauss = Some(f * x1);
                return f * x2;
            }
        }
    }

    /// `randn(n) * scale` as float32.
    pub fn randn(&mut self, n: i64, scale: f64) -> Vec<f32> {
        (0..n).map(|_| (self.gauss() * scale) as f32).collect()
    }

    /// `rand(n)` as float32.
    pub fn rand(&mut self, n: i64) -> Vec<f32> {
        (0..n).map(|_| self.next_double() as f32).collect()
    }

    /// `uniform(low, high, n)` as float32.
    pub fn uniform(&mut self, low: f64, high: f64, n: i64) -> Vec<f32> {
        let range = high - low;
        (0..n)
            .map(|_| (low + range * self.next_double()) as f32)
            .collect()
    }

    /// `randint(0, high, n)` as int32.
    pub fn randint(&mut self, high: u32, n: i64) -> Vec<i32> {
        let max = high - 1;
        let mask = if max == 0 {
            0
        } else {
            u32::MAX >> max.leading_zeros()
        };
        (0..n)
            .map(|_| {
                loop {
                    let v = self.next_u32() & mask;
                    if v <= max {
                        break v as i32;
                    }
                }
            })
            .collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Workload {
    W9,
    W10,
    W11,
}

impl Workload {
    pub fn name(self) -> &'static str {
        match self {
            Workload::W9 => "W9",
            Workload::W10 => "W10",
            Workload::W11 => "W11",
        }
    }

    /// Adam's learning rate.
    pub fn learning_rate(self) -> f64 {
        match self {
            Workload::W9 => 3e-3,
            Workload::W10 | Workload::W11 => 1e-3,
        }
    }

    pub fn peer_check(self) -> &'static PeerCheck {
        &PEER_CHECKS
            .iter()
            .find(|(w, _)| *w == self)
            .expect("every workload has a check")
            .1
    }
}

/// A host array: float32 or int32 values and their dimensions.
#[derive(Clone, Debug)]
pub enum Host {
    F32(Vec<f32>, Vec<i64>),
    I32(Vec<i32>, Vec<i64>),
}

impl Host {
    pub fn tensor(&self) -> Result<Tensor> {
        match self {
            Host::F32(v, d) => Tensor::from_slice(v, d),
            Host::I32(v, d) => Tensor::from_slice(v, d),
        }
    }

    pub fn f32s(&self) -> &[f32] {
        match self {
            Host::F32(v, _) => v,
            Host::I32(..) => panic!("not a float32 array"),
        }
    }

    pub fn i32s(&self) -> &[i32] {
        match self {
            Host::I32(v, _) => v,
            Host::F32(..) => panic!("not an int32 array"),
        }
    }
}

/// The initial parameters and the fixed data of a workload, drawn as
/// `peers.py`'s `np_real` draws them.
pub struct Init {
    pub params: Vec<Host>,
    pub data: Vec<Host>,
}

/// `np_real(name)` of `peers.py`, for W9-W11.
pub fn init(workload: Workload) -> Init {
    let mut rs = NpRandom::new(match workload {
        Workload::W9 => 9,
        Workload::W10 => 10,
        Workload::W11 => 11,
    });
    let mut nrm = |dims: &[i64]| Host::F32(rs.randn(dims.iter().product(), 0.02), dims.to_vec());
    let one = |n: i64| Host::F32(vec![1.0; n as usize], vec![n]);
    let zero = |n: i64| Host::F32(vec![0.0; n as usize], vec![n]);
    match workload {
        Workload::W9 => {
            let (v, d, t, b, f) = (W9_V, W9_D, W9_T, W9_B, W9_F);
            let params = vec![
                nrm(&[v, d]), // token embedding
                nrm(&[t, d]), // position embedding
                one(d),
                zero(d), // layer norm 1
                nrm(&[d, d]),
                nrm(&[d, d]),
                nrm(&[d, d]),
                nrm(&[d, d]), // wq wk wv wo
                one(d),
                zero(d), // layer norm 2
                nrm(&[d, f]),
                zero(f),
                nrm(&[f, d]),
                zero(d), // MLP
                one(d),
                zero(d),      // final layer norm
                nrm(&[d, v]), // output projection
            ];
            let seq = rs.randint(v as u32, b * (t + 1));
            let row = |r: usize, skip: usize| -> Vec<i32> {
                let start = r * (t as usize + 1) + skip;
                seq[start..start + t as usize].to_vec()
            };
            let tokens: Vec<i32> = (0..b as usize).flat_map(|r| row(r, 0)).collect();
            let targets: Vec<i32> = (0..b as usize).flat_map(|r| row(r, 1)).collect();
            Init {
                params,
                data: vec![
                    Host::I32(tokens, vec![b, t]),
                    Host::I32(targets, vec![b, t]),
                ],
            }
        }
        Workload::W10 => {
            let params = vec![
                nrm(&[3, 3, 1, 32]),
                zero(32),
                nrm(&[3, 3, 32, 64]),
                zero(64),
                nrm(&[7 * 7 * 64, 128]),
                zero(128),
                nrm(&[128, 10]),
                zero(10),
            ];
            let x = Host::F32(rs.rand(W10_B * 28 * 28), vec![W10_B, 28, 28, 1]);
            let y = Host::I32(rs.randint(10, W10_B), vec![W10_B]);
            Init {
                params,
                data: vec![x, y],
            }
        }
        Workload::W11 => {
            let (t, b, i, h) = (W11_T, W11_B, W11_I, W11_H);
            let params = vec![
                nrm(&[i, 4 * h]),
                nrm(&[h, 4 * h]),
                zero(4 * h),
                nrm(&[h, 1]),
                zero(1),
            ];
            let xs = Host::F32(rs.randn(t * b * i, 1.0), vec![t, b, i]);
            let ys = Host::F32(rs.randn(t * b, 1.0), vec![t, b, 1]);
            Init {
                params,
                data: vec![xs, ys],
            }
        }
    }
}

/// `peers.py`'s layer norm over the last axis (epsilon 1e-5).
fn ln(x: &Tensor, g: &Tensor, b: &Tensor) -> Result<Tensor> {
    let xc = x.sub(&x.reduce_mean(&[-1], true)?)?;
    let var = xc.square()?.reduce_mean(&[-1], true)?;
    xc.mul(&var.add_scalar(1e-5)?.rsqrt()?)?.mul(g)?.add(b)
}

fn mean_sparse_xent(labels: &Tensor, logits: &Tensor) -> Result<Tensor> {
    nn::sparse_softmax_cross_entropy_with_logits(labels, logits)?.reduce_mean(&[], false)
}

/// The causal mask: -1e9 where the key comes after the query.
pub fn w9_mask() -> Result<Tensor> {
    let t = W9_T as usize;
    let mask: Vec<f32> = (0..t * t)
        .map(|k| if k % t > k / t { -1e9 } else { 0.0 })
        .collect();
    Tensor::from_vec(mask, &[W9_T, W9_T])
}

/// W9's loss: one pre-layer-norm transformer block on `tokens` `[B, T]`,
/// mean cross-entropy of the next tokens `targets` `[B, T]`.
pub fn w9_loss(p: &[Tensor], tokens: &Tensor, targets: &Tensor) -> Result<Tensor> {
    let [
        tok,
        pos,
        g1,
        o1,
        wq,
        wk,
        wv,
        wo,
        g2,
        o2,
        w1,
        b1,
        w2,
        b2,
        gf,
        of,
        wout,
    ] = p
    else {
        return Err(Error::Value("W9 has 17 parameters".into()));
    };
    let (b, t, d, nh, dh) = (W9_B, W9_T, W9_D, W9_NH, W9_DH);
    let heads = |a: Tensor| a.reshape(&[b, t, nh, dh])?.transpose(&[0, 2, 1, 3]);
    let x = nn::embedding_lookup(tok, tokens)?
        .add(pos)?
        .reshape(&[b * t, d])?;
    let h = ln(&x, g1, o1)?;
    let (q, k, v) = (
        heads(h.matmul(wq)?)?,
        heads(h.matmul(wk)?)?,
        heads(h.matmul(wv)?)?,
    );
    let s = q
        .matmul_t(&k, false, true)?
        .mul_scalar(1.0 / (dh as f64).sqrt())?
        .add(&w9_mask()?)?;
    let a = s
        .softmax(-1)?
        .matmul(&v)?
        .transpose(&[0, 2, 1, 3])?
        .reshape(&[b * t, d])?;
    let x = x.add(&a.matmul(wo)?)?;
    let h = ln(&x, g2, o2)?;
    let mlp = h.matmul(w1)?.add(b1)?.gelu(true)?.matmul(w2)?.add(b2)?;
    let x = x.add(&mlp)?;
    let logits = ln(&x, gf, of)?.matmul(wout)?;
    mean_sparse_xent(&targets.reshape(&[b * t])?, &logits)
}

/// W10's loss: two conv 3x3 SAME + bias + relu + 2x2 max pool blocks, two
/// dense layers, mean sparse cross-entropy.
pub fn w10_loss(p: &[Tensor], x: &Tensor, y: &Tensor) -> Result<Tensor> {
    let [k1, c1, k2, c2, wd1, bd1, wd2, bd2] = p else {
        return Err(Error::Value("W10 has 8 parameters".into()));
    };
    let block = |h: &Tensor, k: &Tensor, c: &Tensor| -> Result<Tensor> {
        h.conv2d(k, [1, 1], Padding::Same, [1, 1])?
            .add(c)?
            .relu()?
            .max_pool(&[2, 2], &[2, 2], Padding::Valid)
    };
    let h = block(&block(x, k1, c1)?, k2, c2)?;
    let logits = h
        .reshape(&[W10_B, 7 * 7 * 64])?
        .matmul(wd1)?
        .add(bd1)?
        .relu()?
        .matmul(wd2)?
        .add(bd2)?;
    mean_sparse_xent(y, &logits)
}

/// W11's loss: one LSTM layer over `xs` `[T, B, I]` as a device loop
/// (`for_range`, one `while` op, not unrolled) collecting the hidden
/// states in a `TensorArray`, then `y = h @ Wy + by` and the mean squared
/// error against `ys` `[T, B, 1]`.
pub fn w11_loss(p: &[Tensor], xs: &Tensor, ys: &Tensor) -> Result<Tensor> {
    let [wx, wh, b, wy, by] = p else {
        return Err(Error::Value("W11 has 5 parameters".into()));
    };
    let (t, bs, h) = (W11_T, W11_B, W11_H);
    let inputs = TensorArray::unstack(xs)?;
    let zeros = Tensor::try_zeros(&[bs, h], DType::F32)?;
    let cell = |i: &Tensor, h_prev: &Tensor, c_prev: &Tensor| -> Result<(Tensor, Tensor)> {
        let z = inputs
            .read(i)?
            .matmul(wx)?
            .add(&h_prev.matmul(wh)?)?
            .add(b)?;
        let [ig, fg, gg, og]: [Tensor; 4] = z.split(4, 1)?.try_into().expect("four gates");
        let c = fg
            .sigmoid()?
            .mul(c_prev)?
            .add(&ig.sigmoid()?.mul(&gg.tanh()?)?)?;
        let h_next = og.sigmoid()?.mul(&c.tanh()?)?;
        Ok((h_next, c))
    };
    // A device loop over host-known bounds: its gradient reads the states
    // the forward loop recorded (one forward and one backward loop).
    let hs = TensorArray::new(DType::F32, t).with_element_shape(&[bs, h])?;
    let (_, _, hs) = for_range(
        0i64,
        t,
        1i64,
        (zeros.clone(), zeros, hs),
        |i, (h_prev, c_prev, hs): (Tensor, Tensor, TensorArray)| -> Result<_> {
            let (h_next, c) = cell(&i, &h_prev, &c_prev)?;
            let hs = hs.write(&i, &h_next)?;
            Ok((h_next, c, hs))
        },
    )?;
    let y = hs.stack()?.reshape(&[t * bs, h])?.matmul(wy)?.add(by)?;
    y.sub(&ys.reshape(&[t * bs, 1])?)?
        .square()?
        .reduce_mean(&[], false)
}

/// W11's loss written with `scan` (`lax.scan`): the same cell, the carry
/// `(h, c)`, the hidden states stacked as the scan's outputs.
pub fn w11_scan_loss(p: &[Tensor], xs: &Tensor, ys: &Tensor) -> Result<Tensor> {
    let [wx, wh, b, wy, by] = p else {
        return Err(Error::Value("W11 has 5 parameters".into()));
    };
    let (t, bs, h) = (W11_T, W11_B, W11_H);
    let zeros = Tensor::try_zeros(&[bs, h], DType::F32)?;
    let (_, hs) = xlafn::control::scan(
        |(h_prev, c_prev): (Tensor, Tensor), x: Tensor| {
            let z = x.matmul(wx)?.add(&h_prev.matmul(wh)?)?.add(b)?;
            let [ig, fg, gg, og]: [Tensor; 4] = z.split(4, 1)?.try_into().expect("four gates");
            let c = fg
                .sigmoid()?
                .mul(&c_prev)?
                .add(&ig.sigmoid()?.mul(&gg.tanh()?)?)?;
            let h_next = og.sigmoid()?.mul(&c.tanh()?)?;
            Ok(((h_next.clone(), c), h_next))
        },
        (zeros.clone(), zeros),
        xs.clone(),
    )?;
    let y = hs.reshape(&[t * bs, h])?.matmul(wy)?.add(by)?;
    y.sub(&ys.reshape(&[t * bs, 1])?)?
        .square()?
        .reduce_mean(&[], false)
}

/// The loss of `workload` on parameter values `p` and its two data tensors.
pub fn loss(workload: Workload, p: &[Tensor], a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match workload {
        Workload::W9 => w9_loss(p, a, b),
        Workload::W10 => w10_loss(p, a, b),
        Workload::W11 => w11_loss(p, a, b),
    }
}

/// A compiled function of the two data tensors.
pub type DataFn = Function<(Tensor, Tensor), Tensor>;

/// A workload's variables (at the initial values) and its data, on the
/// device.
#[derive(Clone)]
pub struct Model {
    pub workload: Workload,
    pub init: Arc<Init>,
    pub params: Vec<Variable>,
    pub data: (Tensor, Tensor),
}

impl Model {
    pub fn new(workload: Workload) -> Result<Model> {
        let init = Arc::new(init(workload));
        let params = init
            .params
            .iter()
            .map(|p| Variable::try_new(p.tensor()?))
            .collect::<Result<Vec<_>>>()?;
        let data = (init.data[0].tensor()?, init.data[1].tensor()?);
        Ok(Model {
            workload,
            init,
            params,
            data,
        })
    }

    fn values(&self) -> Result<Vec<Tensor>> {
        self.params.iter().map(Variable::try_read).collect()
    }

    /// The loss alone, compiled.
    pub fn forward(&self) -> DataFn {
        let model = self.clone();
        function(move |a: Tensor, b: Tensor| loss(model.workload, &model.values()?, &a, &b))
    }

    /// The loss at the current parameters, op by op (no function).
    pub fn eager_loss(&self) -> Result<Tensor> {
        loss(self.workload, &self.values()?, &self.data.0, &self.data.1)
    }

    /// The training step: forward, gradients and Adam updating the
    /// variables in place, one compiled program. Adam's slots are made
    /// now (`Adam::build`), so the step is traced once.
    pub fn train_step(&self) -> Result<DataFn> {
        let workload = self.workload;
        self.train_step_of(move |p: &[Tensor], a: &Tensor, b: &Tensor| loss(workload, p, a, b))
    }

    /// [`train_step`](Model::train_step) with another form of the loss
    /// (W11 written with `scan`).
    pub fn train_step_of(
        &self,
        loss: impl Fn(&[Tensor], &Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
    ) -> Result<DataFn> {
        let adam = Arc::new(Adam::new(self.workload.learning_rate()));
        adam.build(&self.params.iter().collect::<Vec<_>>())?;
        let model = self.clone();
        Ok(function(move |a: Tensor, b: Tensor| -> Result<Tensor> {
            let tape = GradientTape::new();
            let loss = loss(&model.values()?, &a, &b)?;
            let sources: Vec<Source> = model.params.iter().map(Source::from).collect();
            let grads = tape.gradient(&loss, &sources)?;
            let pairs: Vec<(Option<Tensor>, &Variable)> =
                grads.into_iter().zip(model.params.iter()).collect();
            adam.apply_gradients(&pairs)?;
            Ok(loss)
        }))
    }

    /// `sum |p - p0|` over all parameters (float64), as `peers.py`'s
    /// `check_update_l1`.
    pub fn update_l1(&self) -> Result<f64> {
        let mut total = 0.0;
        for (v, p0) in self.params.iter().zip(&self.init.params) {
            let now = v.try_read()?.to_vec::<f32>()?;
            total += now
                .iter()
                .zip(p0.f32s())
                .map(|(a, b)| (f64::from(*a) - f64::from(*b)).abs())
                .sum::<f64>();
        }
        Ok(total)
    }
}

/// W12: the guide's `Conv2D(100, 3)`: kernel `[3, 3, 100, 100]` (Glorot
/// uniform, Keras' fans) and a zero bias, as `np_real("W12")` draws them,
/// with the timed input (zeros) and the checking input (uniform).
pub struct ConvLayer {
    pub kernel: Tensor,
    pub bias: Tensor,
    pub zeros: Tensor,
    pub x_check: Tensor,
}

impl ConvLayer {
    pub fn new() -> Result<ConvLayer> {
        let mut rs = NpRandom::new(12);
        let lim = (6.0f64 / (3.0 * 3.0 * 100.0 + 3.0 * 3.0 * 100.0)).sqrt();
        let kernel = rs.uniform(-lim, lim, 3 * 3 * 100 * 100);
        let n: i64 = W12_X.iter().product();
        let x_check = rs.rand(n);
        Ok(ConvLayer {
            kernel: Tensor::from_vec(kernel, &[3, 3, 100, 100])?,
            bias: Tensor::from_vec(vec![0f32; 100], &[100])?,
            zeros: Tensor::try_zeros(&W12_X, DType::F32)?,
            x_check: Tensor::from_vec(x_check, &W12_X)?,
        })
    }
}

/// The layer: a VALID 3x3 convolution plus the bias.
pub fn conv_layer(x: &Tensor, kernel: &Tensor, bias: &Tensor) -> Result<Tensor> {
    x.conv2d(kernel, [1, 1], Padding::Valid, [1, 1])?.add(bias)
}
