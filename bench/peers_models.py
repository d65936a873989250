#!/usr/bin/env python3
"""The peers of the bench report's model workloads (W15 so far), measured
on this machine: each workload's training step in JAX (`jax.jit`) and in
TensorFlow (`tf.function`, and with `jit_compile=True`), from the same
numpy-drawn parameters and data as the Rust side (examples/common/), so
that the first losses agree before anything is timed.

    python3 bench/peers_models.py OUT.json [--only=W15] [--quick]

Each framework runs in its own child process (`--worker jax|tf`); a
framework that is not installed is skipped with a note. A cell is the
median per-step time over timed blocks of at least 0.2 s (5 blocks, or 3
with --quick) after two warm-up steps, every step's loss awaited. The
JSON holds, per cell `W15step/<peer>`: `value` (ms per step), every
block's figure, and `check`, the losses of the first three steps.

W15: a bidirectional GRU classifier (Keras' reset_after gates) over
padded sequences [B=16, T=50, I=32], 64 units per direction, the two
final states into a dense layer over 10 classes, mean sparse
cross-entropy, Adam (lr 1e-3, epsilon 1e-7). The input projection of
every step is one matmul before each scan, as a careful user writes it
and as xlafn's layer does.
"""
import json
import os
import statistics
import subprocess
import sys
import time

B, T, I, H, C = 16, 50, 32, 64, 10
LR, B1, B2, EPS = 1e-3, 0.9, 0.999, 1e-7
CHECK_STEPS = 3
QUICK = "--quick" in sys.argv
BLOCKS = 3 if QUICK else 5
MIN_BLOCK = 0.2


def np_models(name):
    """(params, data) as float32/int32 numpy arrays, drawn in a fixed order."""
    import numpy as np
    if name != "W15":
        raise KeyError(name)
    rs = np.random.RandomState(15)
    f32 = np.float32
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


# ---------------------------------------------------------------- JAX

def jax_w15():
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
        c1, c2 = 1.0 - B1 ** t, 1.0 - B2 ** t
        m = tuple(B1 * mi + (1.0 - B1) * gi for mi, gi in zip(m, g))
        v = tuple(B2 * vi + (1.0 - B2) * gi * gi for vi, gi in zip(v, g))
        p = tuple(pi - LR * (mi / c1) / (jnp.sqrt(vi / c2) + EPS) for pi, mi, vi in zip(p, m, v))
        return (p, m, v, t), value
    return step


def worker_jax(names):
    import jax
    import jax.numpy as jnp
    results = {}
    for name in names:
        params, data = np_models(name)
        step = jax.jit(jax_w15(), donate_argnums=(0,))
        zeros = lambda: tuple(jnp.zeros(p.shape, jnp.float32) for p in params)  # noqa: E731
        state = [(tuple(jnp.asarray(p) for p in params), zeros(), zeros(), jnp.zeros((), jnp.float32))]
        data = tuple(jnp.asarray(a) for a in data)
        losses = []
        for _ in range(CHECK_STEPS):
            state[0], value = step(state[0], *data)
            losses.append(float(value))

        def one():
            state[0], value = step(state[0], *data)
            value.block_until_ready()
        cell = timed(one)
        cell["check"] = losses
        results["%sstep/jax_jit" % name] = cell
    return {"results": results, "info": {"jax_version": jax.__version__}}


# ---------------------------------------------------------------- TensorFlow

def tf_w15(variables):
    import tensorflow as tf

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
        c1, c2 = 1.0 - tf.pow(B1, t), 1.0 - tf.pow(B2, t)
        for p, m, v, g in zip(variables, ms, vs, grads):
            m.assign(B1 * m + (1.0 - B1) * g)
            v.assign(B2 * v + (1.0 - B2) * g * g)
            p.assign_sub(LR * (m / c1) / (tf.sqrt(v / c2) + EPS))
        return value
    return step


def worker_tf(names):
    import tensorflow as tf
    results = {}
    for name in names:
        params, data = np_models(name)
        data = tuple(tf.constant(a) for a in data)
        for peer, jit in (("tf_function", False), ("tf_xla", True)):
            variables = [tf.Variable(p) for p in params]
            step = tf.function(tf_w15(variables), jit_compile=jit)
            losses = [float(step(*data).numpy()) for _ in range(CHECK_STEPS)]
            cell = timed(lambda: step(*data).numpy())
            cell["check"] = losses
            results["%sstep/%s" % (name, peer)] = cell
    return {"results": results, "info": {"tf_version": tf.__version__}}


# ---------------------------------------------------------------- driver

def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    only = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--only=")]
    names = only[0].split(",") if only else ["W15"]
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
