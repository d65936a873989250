#!/usr/bin/env python3
"""The peers of the bench report's model workloads (W13, W14, W15),
measured on this machine: each workload's training step in JAX
(`jax.jit`) and in TensorFlow (`tf.function`, and with
`jit_compile=True`), from the same numpy-drawn parameters and data as the
Rust side (tools/workloads/gpt_step.rs, resnet_step.rs, bigru_step.rs), so
that the first losses agree before anything is timed.

    python3 bench/peers_models.py OUT.json [--only=W13,W14,W15] [--quick]

Each framework runs in its own child process (`--worker jax|tf`); a
framework that is not installed is skipped with a note. A cell is the
median per-step time over timed blocks of at least 0.2 s (5 blocks, or 3
with --quick) after two warm-up steps, every step's loss awaited. The
JSON holds, per cell `<W>step/<peer>`: `value` (ms per step), every
block's figure, and `check`, the losses of the first three steps (W14's
also `check_moving`: after them, the sum over its BatchNorms of
`|moving mean|` and of the moving variance).

Every optimizer is written out by hand, as xlafn's optimizers
(src/optimizers/) compute it, rather than taken from optax or Keras
(whose epsilon placement, schedule step and weight-decay scaling differ
in places):
- Adam: `m = b1 m + (1 - b1) g`, `v = b2 v + (1 - b2) g^2`, then
  `p -= lr (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)`, `t` the
  update's number (1 on the first), eps 1e-7 outside the square root.
- AdamW's decoupled weight decay: `p -= lr wd p` before the Adam update
  (scaled by the scheduled rate, on the decayed variables only), the
  gradient being the one taken at the undecayed value.
- A schedule is read at `n`, the number of updates before this one (0 on
  the first): a linear warmup `init + n / warmup (peak - init)` while
  `n < warmup`, then `peak (1 + cos(pi s / decay)) / 2` with
  `s = min(max(n - warmup, 0), decay)` (Keras 3's `CosineDecay`).
- Clipping by global norm over all gradients: `g *= clip min(1 / |g|,
  1 / clip)`.
- SGD with momentum: `m = mu m + g`, `p -= lr m`.

W13: a GPT-style decoder (vocabulary 256, sequence 64, batch 8, width
128, 4 heads, MLP 512, 2 pre-LayerNorm blocks with causal attention and a
tanh-GELU MLP, token and learned position embeddings, logits tied to the
token table, mean next-token cross-entropy). AdamW (b1 0.9, b2 0.95, eps
1e-7) at a rate warming up linearly from 3e-4 to 3e-3 over 10 steps and
decaying by a cosine over 1000; weight decay 0.1 on the matrices (not on
biases, norms or the embeddings); gradients clipped to a global norm of
1. Dropout 0.1 on the attention's and the MLP's outputs, its key folded
from the step number. Random bits differ between frameworks, so the
losses are checked on a step built with dropout rate 0 (from the same
parameters, in a separate state) and the timed step uses 0.1.

W14: a ResNet on [16, 32, 32, 3] NHWC images: a 3x3 stem to 16 channels,
BatchNorm, relu; three stages of one basic block (16, 32, 64 channels,
the last two at stride 2 with a strided 1x1 projection and BatchNorm on
the shortcut), each conv3x3-BN-relu-conv3x3-BN plus the shortcut, relu;
global average pooling and a dense layer to 10 classes; mean sparse
cross-entropy; SGD with momentum 0.9 at 0.05. Convolutions have no bias
(a BatchNorm follows each) and SAME padding. BatchNorm in training mode
as xlafn's (src/nn/layers/norm.rs): the batch's mean and biased variance
over N, H, W, `(x - mean) rsqrt(var + 1e-3) gamma + beta`, the moving
statistics moved by `m = 0.99 m + 0.01 stat` (the biased variance too).

W15: a bidirectional GRU classifier (Keras' reset_after gates) over
padded sequences [B=16, T=50, I=32], 64 units per direction, the two
final states into a dense layer over 10 classes, mean sparse
cross-entropy, Adam (lr 1e-3, epsilon 1e-7). The input projection of
every step is one matmul before each scan, as a careful user writes it
and as xlafn's layer does.
"""
import json
import math
import os
import statistics
import subprocess
import sys
import time

WORKLOADS = ("W13", "W14", "W15")
CHECK_STEPS = 3
QUICK = "--quick" in sys.argv
BLOCKS = 3 if QUICK else 5
MIN_BLOCK = 0.2
EPS = 1e-7

# W13: vocabulary, sequence, batch, width, heads, MLP width, blocks.
V13, T13, BATCH13, D13, NH13, F13, L13 = 256, 64, 8, 128, 4, 512, 2
DH13 = D13 // NH13
LN_EPS13 = 1e-5
INIT13, PEAK13, WARMUP13, DECAY13 = 3e-4, 3e-3, 10, 1000
B1_13, B2_13, WD13, CLIP13, DROP13 = 0.9, 0.95, 0.1, 1.0, 0.1
# W14: batch, image side, input channels, classes, stage widths.
BATCH14, S14, CIN14, C14 = 16, 32, 3, 10
WIDTHS14 = (16, 32, 64)
LR14, MOM14, BN_MOM14, BN_EPS14 = 0.05, 0.9, 0.99, 1e-3
# W15: batch, time, inputs, units per direction, classes; Adam.
B, T, I, H, C = 16, 50, 32, 64, 10
LR, BETA1, BETA2 = 1e-3, 0.9, 0.999


def w13_decayed():
    """Which W13 parameters take weight decay: the matrices (the four
    attention projections and the two MLP kernels of each block)."""
    block = [False, False, True, False, True, False, True, False, True, False,
             False, False, True, False, True, False]
    return [False, False] + block * L13 + [False, False]


def w14_layout():
    """W14's convolutions in parameter order: (kh, cin, cout, stride), each
    followed by a BatchNorm; the block structure is implied by
    `WIDTHS14` (a block of three convolutions has a projection)."""
    convs = [(3, CIN14, WIDTHS14[0], 1)]
    cin = WIDTHS14[0]
    for i, cout in enumerate(WIDTHS14):
        stride = 1 if i == 0 else 2
        convs.append((3, cin, cout, stride))
        convs.append((3, cout, cout, 1))
        if cin != cout or stride != 1:
            convs.append((1, cin, cout, stride))
        cin = cout
    return convs


def np_models(name):
    """(params, data) as float32/int32 numpy arrays, drawn in a fixed order."""
    import numpy as np
    f32 = np.float32
    if name == "W13":
        # RandomState(13): the token table [V, D] and the position table
        # [T, D] from N(0, 0.02^2); per block LayerNorm 1 (gamma ones,
        # beta zeros), the query, key, value and output kernels [D, D]
        # from N(0, 0.02^2), each followed by its zero bias [D], LayerNorm
        # 2, the MLP kernels [D, F] and [F, D] from N(0, 0.02^2) with zero
        # biases; the final LayerNorm. Then the tokens [B, T + 1] uniform
        # in 0..V: inputs are the first T, targets the last T.
        rs = np.random.RandomState(13)
        normal = lambda *shape: (rs.randn(*shape) * 0.02).astype(f32)  # noqa: E731
        params = [normal(V13, D13), normal(T13, D13)]
        for _block in range(L13):
            params += [np.ones(D13, f32), np.zeros(D13, f32)]
            for _proj in range(4):
                params += [normal(D13, D13), np.zeros(D13, f32)]
            params += [np.ones(D13, f32), np.zeros(D13, f32)]
            params += [normal(D13, F13), np.zeros(F13, f32)]
            params += [normal(F13, D13), np.zeros(D13, f32)]
        params += [np.ones(D13, f32), np.zeros(D13, f32)]
        tokens = rs.randint(0, V13, size=(BATCH13, T13 + 1)).astype(np.int32)
        return params, (tokens[:, :-1].copy(), tokens[:, 1:].copy())
    if name == "W14":
        # RandomState(14): each convolution's kernel [kh, kw, cin, cout]
        # He-normal (N(0, 1) times sqrt(2 / (kh kw cin))) followed by its
        # BatchNorm's gamma (ones) and beta (zeros), in `w14_layout`'s
        # order; the head's kernel [64, 10] from N(0, 1 / 64) and its zero
        # bias. Then the images [B, 32, 32, 3] from N(0, 1) and the labels.
        # The moving statistics (zeros, ones) are state, not listed.
        rs = np.random.RandomState(14)
        params = []
        for k, cin, cout, _stride in w14_layout():
            scale = math.sqrt(2.0 / (k * k * cin))
            params.append((rs.randn(k, k, cin, cout) * scale).astype(f32))
            params += [np.ones(cout, f32), np.zeros(cout, f32)]
        width = WIDTHS14[-1]
        params.append((rs.randn(width, C14) * math.sqrt(1.0 / width)).astype(f32))
        params.append(np.zeros(C14, f32))
        x = rs.randn(BATCH14, S14, S14, CIN14).astype(f32)
        labels = rs.randint(0, C14, size=BATCH14).astype(np.int32)
        return params, (x, labels)
    if name != "W15":
        raise KeyError(name)
    rs = np.random.RandomState(15)
    params = []
    for _direction in range(2):
        params.append((rs.randn(I, 3 * H) * 0.1).astype(f32))      # kernel
        params.append((rs.randn(H, 3 * H) * 0.1).astype(f32))      # recurrent kernel
        params.append(np.zeros((2, 3 * H), f32))                   # input bias, recurrent bias
    params.append((rs.randn(2 * H, C) * 0.1).astype(f32))          # head kernel
    params.append(np.zeros(C, f32))                                # head bias
    x = rs.randn(B, T, I).astype(f32)
    lengths = rs.randint(0, T // 2 + 1, size=B) + T // 2
    mask = (np.arange(T)[None, :] < lengths[:, None]).astype(np.int32)
    labels = rs.randint(0, C, size=B).astype(np.int32)
    return params, (x, mask, labels)


def timed(step):
    """Median ms per call of step() over BLOCKS blocks of >= MIN_BLOCK s."""
    step()
    step()
    n = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        dt = time.perf_counter() - t0
        if dt >= 1.5 * MIN_BLOCK:
            break
        n = max(n + 1, min(int(n * 1.5 * MIN_BLOCK * 1.2 / max(dt, 1e-9)) + 1, n * 10))
    per = []
    for _ in range(BLOCKS):
        t0 = time.perf_counter()
        for _ in range(n):
            step()
        per.append((time.perf_counter() - t0) / n * 1e3)
    return {"value": statistics.median(per), "unit": "ms", "blocks_ms": per,
            "steps_per_block": n, "loadavg": os.getloadavg()[0]}


def w13_rate(n, cos, where, clip):
    """The W13 learning rate after `n` updates (a float32 scalar), with the
    framework's cosine, select and clip."""
    warm = INIT13 + n / WARMUP13 * (PEAK13 - INIT13)
    s = clip(n - WARMUP13, 0.0, float(DECAY13))
    decayed = PEAK13 * (0.5 * (1.0 + cos(s * (math.pi / DECAY13))))
    return where(n < WARMUP13, warm, decayed)


# ---------------------------------------------------------------- JAX

def jax_w13(params, rate):
    """(state, step): W13's AdamW step with dropout `rate`; the state holds
    the parameters, Adam's moments and the update count (which also keys
    the dropout)."""
    import jax
    import jax.numpy as jnp
    decayed = w13_decayed()
    base = jax.random.PRNGKey(13)
    causal = jnp.tril(jnp.ones((T13, T13), bool))

    def ln(x, g, b):
        c = x - jnp.mean(x, -1, keepdims=True)
        return c * jax.lax.rsqrt(jnp.mean(c * c, -1, keepdims=True) + LN_EPS13) * g + b

    def heads(x):
        return x.reshape(BATCH13, T13, NH13, DH13).transpose(0, 2, 1, 3)

    def drop(x, key):
        if rate == 0.0:
            return x
        keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
        return jnp.where(keep, x / (1.0 - rate), 0.0)

    def loss(p, x, y, key):
        wte = p[0]
        h = wte[x] + p[1]
        for l in range(L13):
            g1, b1, wq, bq, wk, bk, wv, bv, wo, bo, g2, b2, w1, c1, w2, c2 = p[2 + 16 * l: 18 + 16 * l]
            a = ln(h, g1, b1)
            q = heads(a @ wq + bq) * (1.0 / math.sqrt(DH13))
            k, v = heads(a @ wk + bk), heads(a @ wv + bv)
            s = jnp.where(causal, q @ k.transpose(0, 1, 3, 2), -1e30)
            o = (jax.nn.softmax(s, -1) @ v).transpose(0, 2, 1, 3).reshape(BATCH13, T13, D13)
            h = h + drop(o @ wo + bo, jax.random.fold_in(key, 2 * l))
            m = jax.nn.gelu(ln(h, g2, b2) @ w1 + c1, approximate=True) @ w2 + c2
            h = h + drop(m, jax.random.fold_in(key, 2 * l + 1))
        logits = ln(h, p[-2], p[-1]) @ wte.T
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[..., None], axis=-1))

    def step(state, x, y):
        p, m, v, n = state
        value, g = jax.value_and_grad(loss)(p, x, y, jax.random.fold_in(base, n))
        norm = jnp.sqrt(sum(jnp.sum(gi * gi) for gi in g))
        g = [gi * (jnp.minimum(1.0 / norm, 1.0 / CLIP13) * CLIP13) for gi in g]
        nf = n.astype(jnp.float32)
        lr = w13_rate(nf, jnp.cos, jnp.where, jnp.clip)
        t = nf + 1.0
        c1, c2 = 1.0 - B1_13 ** t, 1.0 - B2_13 ** t
        p = [pi - lr * WD13 * pi if d else pi for pi, d in zip(p, decayed)]
        m = [B1_13 * mi + (1.0 - B1_13) * gi for mi, gi in zip(m, g)]
        v = [B2_13 * vi + (1.0 - B2_13) * gi * gi for vi, gi in zip(v, g)]
        p = [pi - lr * (mi / c1) / (jnp.sqrt(vi / c2) + EPS) for pi, mi, vi in zip(p, m, v)]
        return (p, m, v, n + 1), value

    zeros = lambda: [jnp.zeros_like(a) for a in params]  # noqa: E731
    return ([jnp.asarray(a) for a in params], zeros(), zeros(), jnp.zeros((), jnp.int32)), step


def jax_w14(params):
    """(state, step): W14's SGD-momentum step; the state holds the
    parameters, the momenta and the BatchNorms' moving statistics."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    layout = w14_layout()

    def conv_bn(x, p, i):
        kernel, gamma, beta = p[3 * i: 3 * i + 3]
        stride = layout[i][3]
        y = lax.conv_general_dilated(x, kernel, (stride, stride), "SAME",
                                     dimension_numbers=("NHWC", "HWIO", "NHWC"))
        mean = jnp.mean(y, (0, 1, 2))
        var = jnp.mean(jnp.square(y - mean), (0, 1, 2))
        return (y - mean) * (lax.rsqrt(var + BN_EPS14) * gamma) + beta, (mean, var)

    def loss(p, x, labels):
        stats = []

        def unit(x, i):
            y, s = conv_bn(x, p, i)
            stats.append(s)
            return y
        h = jax.nn.relu(unit(x, 0))
        i = 1
        cin = WIDTHS14[0]
        for j, cout in enumerate(WIDTHS14):
            stride = 1 if j == 0 else 2
            y = jax.nn.relu(unit(h, i))
            y = unit(y, i + 1)
            if cin != cout or stride != 1:
                skip = unit(h, i + 2)
                i += 3
            else:
                skip = h
                i += 2
            h = jax.nn.relu(y + skip)
            cin = cout
        logits = jnp.mean(h, (1, 2)) @ p[-2] + p[-1]
        logp = jax.nn.log_softmax(logits)
        value = -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))
        return value, stats

    def step(state, x, labels):
        p, mom, moving = state
        (value, stats), g = jax.value_and_grad(loss, has_aux=True)(p, x, labels)
        mom = [MOM14 * mi + gi for mi, gi in zip(mom, g)]
        p = [pi - LR14 * mi for pi, mi in zip(p, mom)]
        moving = [(BN_MOM14 * mm + (1.0 - BN_MOM14) * bm, BN_MOM14 * mv + (1.0 - BN_MOM14) * bv)
                  for (mm, mv), (bm, bv) in zip(moving, stats)]
        return (p, mom, moving), value

    p = [jnp.asarray(a) for a in params]
    moving = [(jnp.zeros(cout, jnp.float32), jnp.ones(cout, jnp.float32))
              for _k, _cin, cout, _s in layout]
    return (p, [jnp.zeros_like(a) for a in p], moving), step


def jax_w15(params):
    import jax
    import jax.numpy as jnp
    from jax import lax

    def direction(x, mask, kernel, recurrent, bias, reverse):
        xw = jnp.einsum("bti,ig->tbg", x, kernel) + bias[0]        # [T, B, 3H]
        m = mask.T[:, :, None] != 0                                # [T, B, 1]

        def cell(h, inputs):
            xw_t, m_t = inputs
            inner = h @ recurrent + bias[1]
            xz, xr, xh = jnp.split(xw_t, 3, axis=1)
            rz, rr, rh = jnp.split(inner, 3, axis=1)
            z = jax.nn.sigmoid(xz + rz)
            r = jax.nn.sigmoid(xr + rr)
            cand = jnp.tanh(xh + r * rh)
            return jnp.where(m_t, cand + z * (h - cand), h), None
        h, _ = lax.scan(cell, jnp.zeros((B, H), jnp.float32), (xw, m), reverse=reverse)
        return h

    def loss(p, x, mask, labels):
        hf = direction(x, mask, p[0], p[1], p[2], False)
        hb = direction(x, mask, p[3], p[4], p[5], True)
        logits = jnp.concatenate([hf, hb], axis=1) @ p[6] + p[7]
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))

    def step(state, *data):
        p, m, v, t = state
        value, g = jax.value_and_grad(loss)(p, *data)
        t = t + 1.0
        c1, c2 = 1.0 - BETA1 ** t, 1.0 - BETA2 ** t
        m = tuple(BETA1 * mi + (1.0 - BETA1) * gi for mi, gi in zip(m, g))
        v = tuple(BETA2 * vi + (1.0 - BETA2) * gi * gi for vi, gi in zip(v, g))
        p = tuple(pi - LR * (mi / c1) / (jnp.sqrt(vi / c2) + EPS) for pi, mi, vi in zip(p, m, v))
        return (p, m, v, t), value

    zeros = lambda: tuple(jnp.zeros(p.shape, jnp.float32) for p in params)  # noqa: E731
    return (tuple(jnp.asarray(p) for p in params), zeros(), zeros(), jnp.zeros((), jnp.float32)), step


def moving_check(moving):
    """W14's moving statistics after the checked steps, summed over every
    BatchNorm: (sum |moving mean|, sum moving variance)."""
    import numpy as np
    return [float(sum(np.abs(np.asarray(mm)).sum() for mm, _mv in moving)),
            float(sum(np.asarray(mv).sum() for _mm, mv in moving))]


def jax_steps(name, params):
    """(checked, timed) builders of `name`'s (state, step): the first gives
    the losses compared with xlafn's, the second is timed (W13's differ in
    the dropout rate; the others are one)."""
    if name == "W13":
        return (lambda: jax_w13(params, 0.0)), (lambda: jax_w13(params, DROP13))
    make = {"W14": jax_w14, "W15": jax_w15}[name]
    return (lambda: make(params)), (lambda: make(params))


def worker_jax(names):
    import jax
    results = {}
    for name in names:
        params, data = np_models(name)
        data = tuple(jax.numpy.asarray(a) for a in data)
        checked, timed_step = jax_steps(name, params)
        state, step = checked()
        step = jax.jit(step, donate_argnums=(0,))
        losses = []
        for _ in range(CHECK_STEPS):
            state, value = step(state, *data)
            losses.append(float(value))
        moving = moving_check(state[2]) if name == "W14" else None
        state, step = timed_step()
        holder = [state]
        step = jax.jit(step, donate_argnums=(0,))

        def one():
            holder[0], value = step(holder[0], *data)
            value.block_until_ready()
        cell = timed(one)
        cell["check"] = losses
        if moving:
            cell["check_moving"] = moving
        results["%sstep/jax_jit" % name] = cell
    return {"results": results, "info": {"jax_version": jax.__version__}}


# ---------------------------------------------------------------- TensorFlow

def tf_w13(params, rate):
    """W13's AdamW step with dropout `rate` over new variables."""
    import tensorflow as tf
    decayed = w13_decayed()
    variables = [tf.Variable(a) for a in params]
    ms = [tf.Variable(tf.zeros_like(a)) for a in params]
    vs = [tf.Variable(tf.zeros_like(a)) for a in params]
    n = tf.Variable(0, dtype=tf.int32)
    causal = tf.linalg.band_part(tf.ones([T13, T13], tf.bool), -1, 0)

    def ln(x, g, b):
        c = x - tf.reduce_mean(x, -1, keepdims=True)
        return c * tf.math.rsqrt(tf.reduce_mean(c * c, -1, keepdims=True) + LN_EPS13) * g + b

    def dense(x, w, b):
        return tf.matmul(x, w) + b                 # x [B*T, in]

    def heads(x):
        return tf.transpose(tf.reshape(x, [BATCH13, T13, NH13, DH13]), [0, 2, 1, 3])

    def drop(x, seed):
        if rate == 0.0:
            return x
        return tf.nn.experimental.stateless_dropout(x, rate, seed)

    def loss(x, y, step):
        p = variables
        wte = p[0]
        h = tf.reshape(tf.gather(wte, x) + p[1], [BATCH13 * T13, D13])
        for l in range(L13):
            g1, b1, wq, bq, wk, bk, wv, bv, wo, bo, g2, b2, w1, c1, w2, c2 = p[2 + 16 * l: 18 + 16 * l]
            a = ln(h, g1, b1)
            q = heads(dense(a, wq, bq)) * (1.0 / math.sqrt(DH13))
            k, v = heads(dense(a, wk, bk)), heads(dense(a, wv, bv))
            s = tf.where(causal, tf.matmul(q, k, transpose_b=True), -1e30)
            o = tf.reshape(tf.transpose(tf.matmul(tf.nn.softmax(s, -1), v), [0, 2, 1, 3]),
                           [BATCH13 * T13, D13])
            h = h + drop(dense(o, wo, bo), tf.stack([step, 2 * l]))
            m = dense(tf.nn.gelu(dense(ln(h, g2, b2), w1, c1), approximate=True), w2, c2)
            h = h + drop(m, tf.stack([step, 2 * l + 1]))
        logits = tf.matmul(ln(h, p[-2], p[-1]), wte, transpose_b=True)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            tf.reshape(y, [-1]), logits))

    def step(x, y):
        with tf.GradientTape() as tape:
            value = loss(x, y, n.read_value())
        grads = [tf.convert_to_tensor(g) for g in tape.gradient(value, variables)]
        norm = tf.linalg.global_norm(grads)
        scale = tf.minimum(1.0 / norm, 1.0 / CLIP13) * CLIP13
        nf = tf.cast(n, tf.float32)
        lr = w13_rate(nf, tf.cos, tf.where, tf.clip_by_value)
        t = nf + 1.0
        c1, c2 = 1.0 - tf.pow(B1_13, t), 1.0 - tf.pow(B2_13, t)
        for p, m, v, g, d in zip(variables, ms, vs, grads, decayed):
            g = g * scale
            if d:
                p.assign_sub(lr * WD13 * p)
            m.assign(B1_13 * m + (1.0 - B1_13) * g)
            v.assign(B2_13 * v + (1.0 - B2_13) * g * g)
            p.assign_sub(lr * (m / c1) / (tf.sqrt(v / c2) + EPS))
        n.assign_add(1)
        return value
    return step


def tf_w14(params):
    """W14's SGD-momentum step over new variables."""
    import tensorflow as tf
    layout = w14_layout()
    variables = [tf.Variable(a) for a in params]
    moms = [tf.Variable(tf.zeros_like(a)) for a in params]
    moving = [(tf.Variable(tf.zeros([cout])), tf.Variable(tf.ones([cout])))
              for _k, _cin, cout, _s in layout]

    def unit(x, i):
        kernel, gamma, beta = variables[3 * i: 3 * i + 3]
        stride = layout[i][3]
        y = tf.nn.conv2d(x, kernel, stride, "SAME")
        mean, var = tf.nn.moments(y, [0, 1, 2])
        mm, mv = moving[i]
        mm.assign(BN_MOM14 * mm + (1.0 - BN_MOM14) * mean)
        mv.assign(BN_MOM14 * mv + (1.0 - BN_MOM14) * var)
        return tf.nn.batch_normalization(y, mean, var, beta, gamma, BN_EPS14)

    def loss(x, labels):
        h = tf.nn.relu(unit(x, 0))
        i = 1
        cin = WIDTHS14[0]
        for j, cout in enumerate(WIDTHS14):
            stride = 1 if j == 0 else 2
            y = unit(tf.nn.relu(unit(h, i)), i + 1)
            if cin != cout or stride != 1:
                skip = unit(h, i + 2)
                i += 3
            else:
                skip = h
                i += 2
            h = tf.nn.relu(y + skip)
            cin = cout
        logits = tf.matmul(tf.reduce_mean(h, [1, 2]), variables[-2]) + variables[-1]
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

    def step(x, labels):
        with tf.GradientTape() as tape:
            value = loss(x, labels)
        grads = tape.gradient(value, variables)
        for p, m, g in zip(variables, moms, grads):
            m.assign(MOM14 * m + g)
            p.assign_sub(LR14 * m)
        return value
    step.moving = moving
    return step


def tf_w15(params):
    import tensorflow as tf
    variables = [tf.Variable(p) for p in params]

    def direction(x, mask, kernel, recurrent, bias, reverse):
        xw = tf.einsum("bti,ig->tbg", x, kernel) + bias[0]
        m = tf.transpose(mask)[:, :, None] != 0
        if reverse:
            xw, m = tf.reverse(xw, [0]), tf.reverse(m, [0])
        h = tf.zeros([B, H])
        for t in tf.range(T):                 # AutoGraph: one tf.while_loop
            inner = tf.matmul(h, recurrent) + bias[1]
            xz, xr, xh = tf.split(xw[t], 3, axis=1)
            rz, rr, rh = tf.split(inner, 3, axis=1)
            z = tf.sigmoid(xz + rz)
            r = tf.sigmoid(xr + rr)
            cand = tf.tanh(xh + r * rh)
            h = tf.where(m[t], cand + z * (h - cand), h)
        return h

    def loss(x, mask, labels):
        p = variables
        hf = direction(x, mask, p[0], p[1], p[2], False)
        hb = direction(x, mask, p[3], p[4], p[5], True)
        logits = tf.matmul(tf.concat([hf, hb], 1), p[6]) + p[7]
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))

    ms = [tf.Variable(tf.zeros_like(v)) for v in variables]
    vs = [tf.Variable(tf.zeros_like(v)) for v in variables]
    t = tf.Variable(0.0)

    def step(x, mask, labels):
        with tf.GradientTape() as tape:
            value = loss(x, mask, labels)
        grads = tape.gradient(value, variables)
        t.assign_add(1.0)
        c1, c2 = 1.0 - tf.pow(BETA1, t), 1.0 - tf.pow(BETA2, t)
        for p, m, v, g in zip(variables, ms, vs, grads):
            m.assign(BETA1 * m + (1.0 - BETA1) * g)
            v.assign(BETA2 * v + (1.0 - BETA2) * g * g)
            p.assign_sub(LR * (m / c1) / (tf.sqrt(v / c2) + EPS))
        return value
    return step


def tf_steps(name, params):
    """(checked, timed) builders of `name`'s step, as `jax_steps`."""
    if name == "W13":
        return (lambda: tf_w13(params, 0.0)), (lambda: tf_w13(params, DROP13))
    make = {"W14": tf_w14, "W15": tf_w15}[name]
    return (lambda: make(params)), (lambda: make(params))


def worker_tf(names):
    import tensorflow as tf
    results = {}
    for name in names:
        params, data = np_models(name)
        data = tuple(tf.constant(a) for a in data)
        checked, timed_step = tf_steps(name, params)
        for peer, jit in (("tf_function", False), ("tf_xla", True)):
            raw = checked()
            step = tf.function(raw, jit_compile=jit)
            losses = [float(step(*data).numpy()) for _ in range(CHECK_STEPS)]
            moving = getattr(raw, "moving", None)
            moving = moving_check(moving) if moving else None
            if name == "W13":
                step = tf.function(timed_step(), jit_compile=jit)
            cell = timed(lambda: step(*data).numpy())
            cell["check"] = losses
            if moving:
                cell["check_moving"] = moving
            results["%sstep/%s" % (name, peer)] = cell
    return {"results": results, "info": {"tf_version": tf.__version__}}


# ---------------------------------------------------------------- driver

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    names = [n.strip().upper() for n in only[0].split(",")] if only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        sys.exit("unknown workloads %s (known: %s)" % (unknown, ", ".join(WORKLOADS)))
    if "--worker" in sys.argv:
        which = sys.argv[sys.argv.index("--worker") + 1]
        out = worker_jax(names) if which == "jax" else worker_tf(names)
        print("@@RESULT@@ " + json.dumps(out))
        return
    out_path = args[0] if args else "peers_models.json"
    report = {"results": {}, "info": {}, "notes": []}
    for which in ("jax", "tf"):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", which,
               "--only=" + ",".join(names)] + (["--quick"] if QUICK else [])
        run = subprocess.run(cmd, capture_output=True, text=True)
        line = [ln for ln in run.stdout.splitlines() if ln.startswith("@@RESULT@@ ")]
        if not line:
            tail = run.stderr.strip().splitlines()[-1:] or ["no output"]
            report["notes"].append("%s worker gave no result: %s" % (which, tail[0]))
            continue
        part = json.loads(line[0][len("@@RESULT@@ "):])
        report["results"].update(part["results"])
        report["info"].update(part["info"])
    with open(out_path, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)
    for key, cell in sorted(report["results"].items()):
        print("%-22s %9.3f ms   losses %s" % (key, cell["value"], ["%.6f" % v for v in cell["check"]]))
    for note in report["notes"]:
        print("note:", note)


if __name__ == "__main__":
    main()
