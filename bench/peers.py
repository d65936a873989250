#!/usr/bin/env python3
"""Peer performance anchors: TF eager / tf.function / tf.function(jit_compile=True)
versus JAX op-by-op eager / jax.jit, on this (CPU-only) machine.

Usage:
    python peers.py [OUT_JSON]            # default: peers.json beside this script
    python peers.py OUT_JSON --rounds=3 --fresh=5 --poly-reps=3   # the defaults
    python peers.py OUT_JSON --quick      # 1 round, 1 fresh process each (smoke test only)
    python peers.py OUT_JSON --only=W9,W10,W11,W12   # only these workloads (any of W1..W12;
                                          # W1-W4/W7/W8 share one worker, so any of them runs all six)
    python peers.py --print OUT_JSON      # re-print the tables from a JSON file

The orchestrator (no argument flags) runs every measurement in a child process of
this same file so that TF and JAX never share a process (their thread pools would
compete for the 2 cores), and so that first-call / cold-start numbers come from
genuinely fresh processes:

    --worker {tf,jax,np}          steady-state W1-W4, W7, W8 for one framework
    --worker {tf_real,jax_real} [--only=...]   steady-state W9-W12 (real models: transformer
                                  block, CNN, LSTM train steps and forward losses, Keras
                                  Conv2D(100,3)); same timing method, ms per call
    --first PEER W                W5: first call (trace+compile+first run) in this fresh process
    --split PEER W                W5 breakdown: trace/lower vs compile+first run
    --poly VARIANT                W6: 49 distinct shapes, cold

Children print one line "@@RESULT@@ <json>" on stdout; their stderr goes to
logs/<name>.log beside the output JSON.

Timing method (steady state): a "block" runs a call N times (forcing completion
each call unless the row says "pipelined"); N is calibrated so a block takes
>= MIN_BLOCK seconds; a worker process times REPS blocks per cell.  The workers
are run ROUNDS times round-robin (np, jax, tf, np, jax, tf, ...) because this
VM's throughput drifts over minutes (noisy neighbours); a cell reports the median
per-call time over all ROUNDS x REPS blocks (per-round medians kept in the JSON).
Python's GC is disabled inside a block (as timeit does).  Everything is float32, inputs come from numpy RandomState
with fixed seeds.
"""
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_OUT = os.path.join(HERE, "peers.json")
MARK = "@@RESULT@@ "



def _flag(name, default):
    for a in sys.argv[1:]:
        if a.startswith("--%s=" % name):
            return int(a.split("=", 1)[1])
    return default


QUICK = "--quick" in sys.argv
MIN_BLOCK = 0.2           # every timed block lasts at least this long (seconds)
REPS = 5                  # timed blocks per cell per worker process (brief: >= 5)
ROUNDS = _flag("rounds", 1 if QUICK else 3)        # worker processes per framework
FRESH_REPS = _flag("fresh", 1 if QUICK else 5)     # fresh processes per W5 cell
POLY_REPS = _flag("poly-reps", 1 if QUICK else 3)  # fresh processes per W6 variant

N_W8 = 16 * 2**20         # 16M f32 = 64 MiB
BYTES_W8 = 2 * N_W8 * 4   # read x once + write y once = 128 MiB
N_W7 = 1024
POLY_LENGTHS = list(range(3, 100, 2))   # 3,5,...,99 -> 49 shapes
assert len(POLY_LENGTHS) == 49


# ----------------------------------------------------------------------------
# timing helpers
# ----------------------------------------------------------------------------
def bench(block, min_block=MIN_BLOCK, reps=REPS):
    """block(n) runs n iterations (and forces completion). Returns stats in seconds/iter.

    n is calibrated so a block takes ~1.5-1.8x min_block; if any timed block still
    came out shorter than min_block (the code got faster after calibration), n is
    doubled and the reps are redone, so every reported block is >= min_block."""
    block(1)  # warm-up (also first-call work if any is left)
    block(1)
    target = 1.5 * min_block
    n = 1
    while True:
        gc.collect()
        t0 = time.perf_counter()
        block(n)
        dt = time.perf_counter() - t0
        if dt >= target:
            break
        want = int(n * target * 1.2 / max(dt, 1e-9)) + 1
        n = max(n + 1, min(want, n * 10))
    for _attempt in range(4):
        per = []
        blocks = []
        flt0, st0 = _minflt(), _cpu_stat()
        for _ in range(reps):
            gc.collect()
            gc.disable()
            try:
                t0 = time.perf_counter()
                block(n)
                dt = time.perf_counter() - t0
            finally:
                gc.enable()
            blocks.append(dt)
            per.append(dt / n)
        flt1, st1 = _minflt(), _cpu_stat()
        if min(blocks) >= min_block:
            break
        n *= 2
    tot = sum(st1) - sum(st0)
    return {
        "per_call_s": per,
        "minflt_per_call": (flt1 - flt0) / float(reps * n),
        "steal_frac": ((st1[7] - st0[7]) / float(tot)) if tot > 0 and len(st1) > 7 else None,
        "median_s": statistics.median(per),
        "min_s": min(per),
        "max_s": max(per),
        "iters_per_block": n,
        "reps": reps,
        "min_block_s": min(blocks),
        "max_block_s": max(blocks),
    }


def _minflt():
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _cpu_stat():
    """Aggregate 'cpu' line of /proc/stat: user nice system idle iowait irq softirq steal ..."""
    try:
        with open("/proc/stat") as fh:
            return [int(v) for v in fh.readline().split()[1:]]
    except OSError:
        return [0] * 8


def guarded(results, key, fn):
    """Run fn() -> dict, store under results[key]; record the error text on failure."""
    t0 = time.perf_counter()
    try:
        r = fn()
    except Exception as e:  # noqa: BLE001 - we want the text of any failure
        import traceback
        r = {"error": "%s: %s" % (type(e).__name__, str(e).strip()[:2000]),
             "traceback": traceback.format_exc()[-3000:]}
    r["wall_s"] = round(time.perf_counter() - t0, 3)
    results[key] = r
    status = r.get("error", "")
    print("  %-34s %s" % (key, ("ERROR " + status[:150]) if status else "ok (%.1fs)" % r["wall_s"]),
          file=sys.stderr, flush=True)
    return r


def emit(obj):
    sys.stdout.write(MARK + json.dumps(obj) + "\n")
    sys.stdout.flush()


# ----------------------------------------------------------------------------
# data (numpy, fixed seeds) shared by all frameworks
# ----------------------------------------------------------------------------
def np_data(name):
    import numpy as np
    f32 = np.float32
    if name == "w1":
        return np.asarray(1.0, dtype=f32)
    if name == "w2":
        return np.random.RandomState(1).randn(1000).astype(f32)
    if name == "w3":
        rs = np.random.RandomState(0)
        W1 = (rs.randn(784, 256) * np.sqrt(2.0 / 784)).astype(f32)
        b1 = np.zeros(256, f32)
        W2 = (rs.randn(256, 10) * np.sqrt(1.0 / 256)).astype(f32)
        b2 = np.zeros(10, f32)
        x = rs.rand(128, 784).astype(f32)
        y = rs.randint(0, 10, size=128).astype(np.int32)
        return (W1, b1, W2, b2), x, y
    if name == "w4":
        return np.random.RandomState(4).rand(1000).astype(f32)
    if name == "w7":
        rs = np.random.RandomState(7)
        return rs.randn(N_W7, N_W7).astype(f32), rs.randn(N_W7, N_W7).astype(f32)
    if name == "w8":
        return np.random.RandomState(8).rand(N_W8).astype(f32)
    if name == "w6":
        return [np.arange(n, dtype=f32) / n for n in POLY_LENGTHS]
    raise KeyError(name)


def per_call(stats, scale=1e6, unit="us"):
    return dict(stats, value=stats["median_s"] * scale, unit=unit)


# ----------------------------------------------------------------------------
# TensorFlow
# ----------------------------------------------------------------------------
def tf_defs():
    import tensorflow as tf

    def w1(x):
        return x + 1.0

    def w2(x):
        for _ in range(50):          # unrolled at trace time: 150 ops
            x = tf.tanh(x) * 0.5 + 0.1
        return x

    def w4_graph(x, n):
        for _ in tf.range(n):        # autograph -> tf.while_loop
            x = x * 0.99 + 0.01
        return x

    def w4_eager(x, n):
        for _ in range(int(n)):      # eager: python loop, 2 ops / iteration
            x = x * 0.99 + 0.01
        return x

    def make_w3(params):
        W1, b1, W2, b2 = params

        def step(x, y):
            with tf.GradientTape() as tape:
                h = tf.nn.relu(tf.matmul(x, W1) + b1)
                logits = tf.matmul(h, W2) + b2
                loss = tf.reduce_mean(
                    tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
            grads = tape.gradient(loss, [W1, b1, W2, b2])
            for v, g in zip((W1, b1, W2, b2), grads):
                v.assign_sub(0.1 * g)
            return loss
        return step

    def w7(a, b):
        return tf.matmul(a, b)

    def w8(x):
        return (x * 2.0 + 1.0) * x - 3.0

    def k(x):
        return tf.reduce_sum(x * x)

    return dict(w1=w1, w2=w2, w4_graph=w4_graph, w4_eager=w4_eager, make_w3=make_w3,
                w7=w7, w8=w8, k=k)


TF_PEERS = ("tf_eager", "tf_function", "tf_xla")


def tf_wrap(peer, fn, **kw):
    import tensorflow as tf
    if peer == "tf_eager":
        return fn
    if peer == "tf_function":
        return tf.function(fn, **kw)
    if peer == "tf_xla":
        return tf.function(fn, jit_compile=True, **kw)
    raise KeyError(peer)


def tf_vars(params_np):
    import tensorflow as tf
    return [tf.Variable(p) for p in params_np]


def worker_tf():
    import tensorflow as tf
    import numpy as np
    D = tf_defs()
    R = {}
    # Zero-copy resolve of an EagerTensor: EagerTensor.numpy() is `_numpy().copy()`,
    # and the defensive copy of a 4-64 MiB result would dominate W7/W8.  _numpy()
    # still waits for the value (TFE_TensorHandleResolve), so it forces completion.
    big_sync = lambda t: t._numpy()  # noqa: E731

    x1 = tf.constant(np_data("w1"))
    x2 = tf.constant(np_data("w2"))
    params_np, x3np, y3np = np_data("w3")
    x3, y3 = tf.constant(x3np), tf.constant(y3np)
    x4 = tf.constant(np_data("w4"))
    n4 = tf.constant(1000, dtype=tf.int32)
    a7, b7 = (tf.constant(a) for a in np_data("w7"))
    x8 = tf.constant(np_data("w8"))

    for peer in TF_PEERS:
        # W1 dispatch
        f = tf_wrap(peer, D["w1"])

        def w1_sync(n, f=f):
            for _ in range(n):
                f(x1).numpy()

        def w1_pipe(n, f=f):
            y = x1
            for _ in range(n):
                y = f(y)
            y.numpy()
        guarded(R, "W1/" + peer, lambda: dict(per_call(bench(w1_sync)),
                                              check=float(f(x1).numpy())))
        guarded(R, "W1pipe/" + peer, lambda: per_call(bench(w1_pipe)))

        # W2 many small ops
        g = tf_wrap(peer, D["w2"])

        def w2_sync(n, g=g):
            for _ in range(n):
                g(x2).numpy()

        def w2_pipe(n, g=g):
            y = x2
            for _ in range(n):
                y = g(y)
            y.numpy()
        guarded(R, "W2/" + peer, lambda: dict(per_call(bench(w2_sync)),
                                              check=float(np.sum(g(x2).numpy()))))
        guarded(R, "W2pipe/" + peer, lambda: per_call(bench(w2_pipe)))

        # W3 MLP train step (fresh variables per peer, same init)
        def run_w3(peer=peer):
            vs = tf_vars(params_np)
            step = tf_wrap(peer, D["make_w3"](vs))
            first_loss = float(step(x3, y3).numpy())

            def blk(n):
                for _ in range(n):
                    step(x3, y3).numpy()
            r = per_call(bench(blk))
            r["check_first_loss"] = first_loss
            return r
        guarded(R, "W3/" + peer, run_w3)

        # W4 in-graph loop
        h = D["w4_eager"] if peer == "tf_eager" else tf_wrap(peer, D["w4_graph"])

        def w4(n, h=h):
            for _ in range(n):
                h(x4, n4).numpy()
        guarded(R, "W4/" + peer, lambda: dict(per_call(bench(w4)),
                                              check=float(np.sum(h(x4, n4).numpy()))))

        # W7 matmul 1024^3
        mm = tf_wrap(peer, D["w7"])

        def w7(n, mm=mm):
            for _ in range(n):
                big_sync(mm(a7, b7))

        def run_w7(mm=mm):
            r = bench(w7)
            return dict(r, value=2.0 * N_W7 ** 3 / r["median_s"] / 1e9, unit="GFLOP/s",
                        ms_per_call=r["median_s"] * 1e3,
                        check=float(np.sum(mm(a7, b7)._numpy()[:4, :4])))
        guarded(R, "W7/" + peer, run_w7)

        # W8 fused elementwise, 64 MiB in / 64 MiB out
        e = tf_wrap(peer, D["w8"])

        def w8(n, e=e):
            for _ in range(n):
                big_sync(e(x8))

        def run_w8(e=e):
            r = bench(w8)
            return dict(r, value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s",
                        ms_per_call=r["median_s"] * 1e3,
                        check=float(e(x8)._numpy()[:8].sum()))
        guarded(R, "W8/" + peer, run_w8)

    info = {"tf_version": tf.__version__,
            "tf_intra_op_threads_setting": tf.config.threading.get_intra_op_parallelism_threads(),
            "tf_inter_op_threads_setting": tf.config.threading.get_inter_op_parallelism_threads(),
            "tf_build_info": {k: str(v) for k, v in tf.sysconfig.get_build_info().items()}}
    emit({"results": R, "info": info})


# ----------------------------------------------------------------------------
# JAX
# ----------------------------------------------------------------------------
JAX_PEERS = ("jax_eager", "jax_jit")


def jax_defs():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def w1(x):
        return x + 1.0

    def w2(x):
        for _ in range(50):
            x = jnp.tanh(x) * 0.5 + 0.1
        return x

    def w4_graph(x, n):
        return lax.fori_loop(0, n, lambda i, x: x * 0.99 + 0.01, x)  # traced n -> while

    def w4_eager(x, n):
        for _ in range(int(n)):
            x = x * 0.99 + 0.01
        return x

    def loss_fn(params, x, y):
        W1, b1, W2, b2 = params
        h = jax.nn.relu(x @ W1 + b1)
        logits = h @ W2 + b2
        logp = jax.nn.log_softmax(logits)
        return -jnp.mean(jnp.take_along_axis(logp, y[:, None], axis=1))

    def w3_step(params, x, y):
        loss, grads = jax.value_and_grad(loss_fn)(params, x, y)
        new = tuple(p - 0.1 * g for p, g in zip(params, grads))
        return new, loss

    def w7(a, b):
        return a @ b

    def w8(x):
        return (x * 2.0 + 1.0) * x - 3.0

    def k(x):
        return jnp.sum(x * x)

    return dict(w1=w1, w2=w2, w4_graph=w4_graph, w4_eager=w4_eager, w3_step=w3_step,
                w7=w7, w8=w8, k=k)


def jax_wrap(peer, fn, **kw):
    import jax
    if peer == "jax_eager":
        return fn
    if peer == "jax_jit":
        return jax.jit(fn, **kw)
    raise KeyError(peer)


def worker_jax():
    import warnings
    import jax
    import jax.numpy as jnp
    import jaxlib
    import numpy as np
    D = jax_defs()
    R = {}
    put = jnp.asarray
    x1 = put(np_data("w1"))
    x2 = put(np_data("w2"))
    params_np, x3np, y3np = np_data("w3")
    x3, y3 = put(x3np), put(y3np)
    x4 = put(np_data("w4"))
    n4 = jnp.asarray(1000, dtype=jnp.int32)
    a7, b7 = (put(a) for a in np_data("w7"))
    x8 = put(np_data("w8"))
    caught = []

    for peer in JAX_PEERS:
        f = jax_wrap(peer, D["w1"])

        def w1_sync(n, f=f):
            for _ in range(n):
                f(x1).block_until_ready()

        def w1_pipe(n, f=f):
            y = x1
            for _ in range(n):
                y = f(y)
            y.block_until_ready()
        guarded(R, "W1/" + peer, lambda: dict(per_call(bench(w1_sync)), check=float(f(x1))))
        guarded(R, "W1pipe/" + peer, lambda: per_call(bench(w1_pipe)))

        g = jax_wrap(peer, D["w2"])

        def w2_sync(n, g=g):
            for _ in range(n):
                g(x2).block_until_ready()

        def w2_pipe(n, g=g):
            y = x2
            for _ in range(n):
                y = g(y)
            y.block_until_ready()
        guarded(R, "W2/" + peer, lambda: dict(per_call(bench(w2_sync)),
                                              check=float(np.sum(np.asarray(g(x2))))))
        guarded(R, "W2pipe/" + peer, lambda: per_call(bench(w2_pipe)))

        def run_w3(peer=peer):
            with warnings.catch_warnings(record=True) as wl:
                warnings.simplefilter("always")
                step = (jax.jit(D["w3_step"], donate_argnums=(0,)) if peer == "jax_jit"
                        else D["w3_step"])
                state = {"p": tuple(put(p) for p in params_np)}
                state["p"], l0 = step(state["p"], x3, y3)
                first_loss = float(l0)

                def blk(n):
                    p = state["p"]
                    for _ in range(n):
                        p, loss = step(p, x3, y3)
                        jax.block_until_ready((p, loss))
                    state["p"] = p
                r = per_call(bench(blk))
            caught.extend(str(w.message)[:300] for w in wl)
            r["check_first_loss"] = first_loss
            if wl:
                r["warnings"] = sorted({str(w.message)[:300] for w in wl})
            return r
        guarded(R, "W3/" + peer, run_w3)

        h = D["w4_eager"] if peer == "jax_eager" else jax.jit(D["w4_graph"])

        def w4(n, h=h):
            for _ in range(n):
                h(x4, n4).block_until_ready()
        guarded(R, "W4/" + peer, lambda: dict(per_call(bench(w4)),
                                              check=float(np.sum(np.asarray(h(x4, n4))))))

        mm = jax_wrap(peer, D["w7"])

        def w7(n, mm=mm):
            for _ in range(n):
                mm(a7, b7).block_until_ready()

        def run_w7(mm=mm):
            r = bench(w7)
            return dict(r, value=2.0 * N_W7 ** 3 / r["median_s"] / 1e9, unit="GFLOP/s",
                        ms_per_call=r["median_s"] * 1e3,
                        check=float(np.sum(np.asarray(mm(a7, b7))[:4, :4])))
        guarded(R, "W7/" + peer, run_w7)

        e = jax_wrap(peer, D["w8"])

        def w8(n, e=e):
            for _ in range(n):
                e(x8).block_until_ready()

        def run_w8(e=e):
            r = bench(w8)
            return dict(r, value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s",
                        ms_per_call=r["median_s"] * 1e3,
                        check=float(np.asarray(e(x8))[:8].sum()))
        guarded(R, "W8/" + peer, run_w8)

    # W8 extra: jit with the input donated (output reuses the input buffer, no fresh
    # 64 MiB allocation per call).  Values run off to +inf after a few calls; inf
    # arithmetic is full speed on x86 (no denormals involved).
    def run_w8_donate():
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            e = jax.jit(D["w8"], donate_argnums=(0,))
            state = {"x": jnp.array(x8, copy=True)}

            def blk(n):
                x = state["x"]
                for _ in range(n):
                    x = e(x)
                    x.block_until_ready()
                state["x"] = x
            r = bench(blk)
        out = dict(r, value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s",
                   ms_per_call=r["median_s"] * 1e3)
        if wl:
            out["warnings"] = sorted({str(w.message)[:300] for w in wl})
        return out
    guarded(R, "W8donate/jax_jit", run_w8_donate)

    info = {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "jax_devices": [str(d) for d in jax.devices()],
            "jax_warnings": sorted(set(caught))}
    emit({"results": R, "info": info})


# ----------------------------------------------------------------------------
# numpy reference (memcpy bandwidth, BLAS matmul, unfused expression)
# ----------------------------------------------------------------------------
def worker_np():
    import numpy as np
    from concurrent.futures import ThreadPoolExecutor
    R = {}
    x8 = np_data("w8")
    dst = np.empty_like(x8)
    dst[:] = 0  # pre-fault destination pages

    def cp1(n):
        for _ in range(n):
            np.copyto(dst, x8)
    r = guarded(R, "W8copy1t/numpy", lambda: bench(cp1))
    if "median_s" in r:
        r.update(value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s", ms_per_call=r["median_s"] * 1e3)

    pool = ThreadPoolExecutor(2)
    half = N_W8 // 2

    def cp2(n):  # numpy releases the GIL for the copy loop -> 2 threads in parallel
        for _ in range(n):
            a = pool.submit(np.copyto, dst[:half], x8[:half])
            b = pool.submit(np.copyto, dst[half:], x8[half:])
            a.result(); b.result()
    r = guarded(R, "W8copy2t/numpy", lambda: bench(cp2))
    if "median_s" in r:
        r.update(value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s", ms_per_call=r["median_s"] * 1e3)

    def cpalloc(n):  # fresh 64 MiB output every call (mmap + page faults), like a jit output
        for _ in range(n):
            x8.copy()
    r = guarded(R, "W8copyalloc/numpy", lambda: bench(cpalloc))
    if "median_s" in r:
        r.update(value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s", ms_per_call=r["median_s"] * 1e3)

    def expr(n):  # unfused: 4 passes + temporaries
        for _ in range(n):
            (x8 * 2.0 + 1.0) * x8 - 3.0
    r = guarded(R, "W8/numpy", lambda: bench(expr))
    if "median_s" in r:
        r.update(value=BYTES_W8 / r["median_s"] / 1e9, unit="GB/s", ms_per_call=r["median_s"] * 1e3)

    a7, b7 = np_data("w7")

    def mm(n):
        for _ in range(n):
            a7 @ b7
    r = guarded(R, "W7/numpy", lambda: bench(mm))
    if "median_s" in r:
        r.update(value=2.0 * N_W7 ** 3 / r["median_s"] / 1e9, unit="GFLOP/s",
                 ms_per_call=r["median_s"] * 1e3)

    blas = ""
    try:
        cfg = np.show_config(mode="dicts")
        blas = json.dumps(cfg.get("Build Dependencies", {}).get("blas", {}))
    except Exception as e:  # noqa: BLE001
        blas = "unknown (%s)" % e
    emit({"results": R, "info": {"numpy_version": np.__version__, "numpy_blas": blas}})


# ----------------------------------------------------------------------------
# W5: first call in a fresh process
# ----------------------------------------------------------------------------
def first_call(peer, wl, split=False):
    """Everything except the timed region (imports, input/variable creation, backend
    init) happens first; the timed region is: wrap + trace + compile + first run +
    force completion.  With split=True the timed region is broken into parts."""
    out = {}
    t_imp = time.perf_counter()
    if peer.startswith("tf"):
        import tensorflow as tf
        out["import_s"] = time.perf_counter() - t_imp
        D = tf_defs()
        if wl == "w2":
            x = tf.constant(np_data("w2"))
            args = (x,)
            fn = D["w2"]
        else:
            params_np, xnp, ynp = np_data("w3")
            vs = tf_vars(params_np)
            args = (tf.constant(xnp), tf.constant(ynp))
            fn = D["make_w3"](vs)
        sync = lambda r: r.numpy()  # noqa: E731
        if split:
            t0 = time.perf_counter()
            f = tf_wrap(peer, fn)
            cf = f.get_concrete_function(*args)        # trace only (python -> graph)
            t1 = time.perf_counter()
            sync(f(*args))                              # graph opt / XLA compile + run
            t2 = time.perf_counter()
            out.update(trace_s=t1 - t0, compile_and_first_run_s=t2 - t1, total_s=t2 - t0)
            out["graph_nodes"] = len(cf.graph.as_graph_def().node)
        else:
            t0 = time.perf_counter()
            f = tf_wrap(peer, fn)
            sync(f(*args))
            t1 = time.perf_counter()
            sync(f(*args))
            t2 = time.perf_counter()
            out.update(first_s=t1 - t0, second_s=t2 - t1)
    else:
        import jax
        import jax.numpy as jnp
        out["import_s"] = time.perf_counter() - t_imp
        D = jax_defs()
        if wl == "w2":
            args = (jnp.asarray(np_data("w2")),)
            fn = D["w2"]
            kw = {}
        else:
            params_np, xnp, ynp = np_data("w3")
            args = (tuple(jnp.asarray(p) for p in params_np), jnp.asarray(xnp), jnp.asarray(ynp))
            fn = D["w3_step"]
            kw = {"donate_argnums": (0,)}
        jax.block_until_ready(args)
        if split:
            t0 = time.perf_counter()
            lowered = jax.jit(fn, **kw).lower(*args)   # trace + lower to StableHLO
            t1 = time.perf_counter()
            compiled = lowered.compile()               # XLA compile
            t2 = time.perf_counter()
            jax.block_until_ready(compiled(*args))     # first run
            t3 = time.perf_counter()
            out.update(trace_s=t1 - t0, compile_s=t2 - t1, first_run_s=t3 - t2,
                       compile_and_first_run_s=t3 - t1, total_s=t3 - t0)
        else:
            t0 = time.perf_counter()
            f = jax_wrap(peer, fn, **kw)
            r = f(*args)
            jax.block_until_ready(r)
            t1 = time.perf_counter()
            if wl == "w3":   # params were donated: feed back the new ones
                args = (r[0],) + args[1:]
            jax.block_until_ready(f(*args))
            t2 = time.perf_counter()
            out.update(first_s=t1 - t0, second_s=t2 - t1)
    emit(out)


# ----------------------------------------------------------------------------
# W6: 49 distinct shapes, cold
# ----------------------------------------------------------------------------
W6_VARIANTS = ("tf_default", "tf_reduce_retracing", "tf_input_signature",
               "tf_xla_default", "tf_xla_reduce_retracing", "tf_xla_input_signature",
               "jax_jit")


def poly(variant):
    xs_np = np_data("w6")
    out = {}
    if variant.startswith("tf"):
        import tensorflow as tf
        xs = [tf.constant(a) for a in xs_np]
        kw = {}
        if variant.endswith("reduce_retracing"):
            kw["reduce_retracing"] = True
        if variant.endswith("input_signature"):
            kw["input_signature"] = [tf.TensorSpec([None], tf.float32)]
        if "_xla" in variant:
            kw["jit_compile"] = True
        per = []
        t0 = time.perf_counter()
        f = tf.function(tf_defs()["k"], **kw)
        for x in xs:
            t = time.perf_counter()
            v = f(x).numpy()
            per.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        out["traces"] = int(f.experimental_get_tracing_count())
        out["check_last"] = float(v)
    else:
        import jax
        import jax.numpy as jnp
        xs = [jnp.asarray(a) for a in xs_np]
        jax.block_until_ready(xs)
        counter = [0]
        kfn = jax_defs()["k"]

        def k(x):
            counter[0] += 1          # python side effect: runs once per trace
            return kfn(x)
        per = []
        t0 = time.perf_counter()
        f = jax.jit(k)
        for x in xs:
            t = time.perf_counter()
            v = f(x).block_until_ready()
            per.append(time.perf_counter() - t)
        total = time.perf_counter() - t0
        out["traces"] = counter[0]
        try:
            out["jit_cache_size"] = int(f._cache_size())
        except Exception:  # noqa: BLE001
            pass
        out["check_last"] = float(v)
    out.update(total_s=total, first_call_s=per[0], median_call_after_first_s=statistics.median(per[1:]),
               per_call_s=per)
    emit(out)


# ----------------------------------------------------------------------------
# W9-W12: real models (book/src/reference/benchmarks.md)
# ----------------------------------------------------------------------------
# Training steps are one compiled call each: forward, gradients and a hand-written
# Adam update (the benchmarks page's form, p -= lr * m_hat / (sqrt(v_hat) + 1e-7), written
# out identically in both frameworks; Keras' Adam puts epsilon elsewhere).  TF:
# tf.Variables (parameters, m, v, step count) updated in place by the step; JAX:
# the whole state (params, m, v, t) is one pytree argument, donated.  Every call is
# forced: TF .numpy() on the loss, JAX .block_until_ready() on the loss (one XLA
# executable: all its outputs become ready together).  Parameters and data come
# from np_real() (numpy, fixed seeds), so all peers start from the same state and
# their first losses ("check") should agree to ~1e-5.
REAL_WORKLOADS = ("W9", "W10", "W11", "W12")
W9_V, W9_D, W9_NH, W9_T, W9_B, W9_F = 256, 128, 4, 64, 8, 512
W9_DH = W9_D // W9_NH
W10_B = 32
W11_T, W11_B, W11_I, W11_H = 50, 16, 32, 64
W12_X = (1, 200, 200, 100)
W12_FLOP = 2 * 198 * 198 * 100 * 100 * 9      # 7.057e9 per call
ADAM_B1, ADAM_B2, ADAM_EPS = 0.9, 0.999, 1e-7
REAL_LR = {"W9": 3e-3, "W10": 1e-3, "W11": 1e-3}
REAL_FWD = ("W9", "W11")          # workloads that also time the forward loss alone
CHECK_STEPS = 3                   # "check" = the losses of the first 3 steps from the init
REAL_TIMEOUT = 560                # seconds per real-model child process
REAL_COLS = ("tf_eager", "tf_function", "tf_xla", "jax_eager", "jax_jit")
REAL_ROWS = [  # (result key prefix, label)
    ("W9step", "W9 transformer block, Adam step [ms/step]"),
    ("W9fwd", "W9 transformer block, forward loss [ms/call]"),
    ("W10step", "W10 CNN (conv/pool), Adam step [ms/step]"),
    ("W11step", "W11 LSTM T=50 (device loop), Adam step [ms/step]"),
    ("W11fwd", "W11 LSTM, forward loss [ms/call]"),
    ("W12", "W12 Conv2D(100,3) on zeros[1,200,200,100] [ms/call]"),
]


def only_flag():
    """--only=W9,W10,... -> list of upper-case workload names (None: everything)."""
    for a in sys.argv[1:]:
        if a.startswith("--only="):
            ws = [w.strip().upper() for w in a.split("=", 1)[1].split(",") if w.strip()]
            known = ("W1", "W2", "W3", "W4", "W5", "W6", "W7", "W8") + REAL_WORKLOADS
            bad = [w for w in ws if w not in known]
            if bad:
                sys.exit("--only: unknown workload(s) %s; known: %s" % (bad, ",".join(known)))
            return ws
    return None


def real_selected():
    ws = only_flag()
    return [w for w in REAL_WORKLOADS if ws is None or w in ws]


def loadavg():
    try:
        with open("/proc/loadavg") as fh:
            return fh.read().split()[:4]
    except OSError:
        return None


def np_real(name):
    """(params, data) as float32/int32 numpy arrays.  Weights ~ N(0, 0.02) (standard
    deviation 0.02), biases and layer-norm offsets 0, layer-norm scales 1."""
    import numpy as np
    f32 = np.float32
    rs = np.random.RandomState({"W9": 9, "W10": 10, "W11": 11, "W12": 12}[name])

    def nrm(*shape):
        return (rs.randn(*shape) * 0.02).astype(f32)

    def one(n):
        return np.ones(n, f32)

    def zero(n):
        return np.zeros(n, f32)
    if name == "W9":
        V, D, T, B, F = W9_V, W9_D, W9_T, W9_B, W9_F
        params = [nrm(V, D), nrm(T, D),                     # tok_emb, pos_emb
                  one(D), zero(D),                          # ln1 scale, offset
                  nrm(D, D), nrm(D, D), nrm(D, D), nrm(D, D),   # wq wk wv wo
                  one(D), zero(D),                          # ln2
                  nrm(D, F), zero(F), nrm(F, D), zero(D),   # mlp w1 b1 w2 b2
                  one(D), zero(D),                          # final ln
                  nrm(D, V)]                                # output projection
        seq = rs.randint(0, V, size=(B, T + 1)).astype(np.int32)
        return params, (seq[:, :-1].copy(), seq[:, 1:].copy())   # tokens, next tokens
    if name == "W10":
        params = [nrm(3, 3, 1, 32), zero(32), nrm(3, 3, 32, 64), zero(64),
                  nrm(7 * 7 * 64, 128), zero(128), nrm(128, 10), zero(10)]
        x = rs.rand(W10_B, 28, 28, 1).astype(f32)
        y = rs.randint(0, 10, size=W10_B).astype(np.int32)
        return params, (x, y)
    if name == "W11":
        T, B, I, H = W11_T, W11_B, W11_I, W11_H
        params = [nrm(I, 4 * H), nrm(H, 4 * H), zero(4 * H), nrm(H, 1), zero(1)]  # Wx Wh b Wy by
        xs = rs.randn(T, B, I).astype(f32)
        ys = rs.randn(T, B, 1).astype(f32)
        return params, (xs, ys)
    if name == "W12":
        lim = np.sqrt(6.0 / (3 * 3 * 100 + 3 * 3 * 100))       # Glorot uniform, Keras' fans
        kernel = rs.uniform(-lim, lim, size=(3, 3, 100, 100)).astype(f32)
        # the timed input is zeros (the guide); a random input checks that peers agree
        x_check = rs.rand(*W12_X).astype(f32)
        return [kernel, zero(100)], (np.zeros(W12_X, f32), x_check)
    raise KeyError(name)


def w9_mask():
    import numpy as np
    return np.triu(np.full((W9_T, W9_T), -1e9, np.float32), 1)   # -1e9 where key > query


def tf_real_defs():
    import math
    import tensorflow as tf
    mask = w9_mask()
    BETA1, BETA2, EPS = ADAM_B1, ADAM_B2, ADAM_EPS

    def ln(x, g, b):
        mu = tf.reduce_mean(x, -1, keepdims=True)
        xc = x - mu
        return xc * tf.math.rsqrt(tf.reduce_mean(xc * xc, -1, keepdims=True) + 1e-5) * g + b

    def w9(P, tokens, targets):
        (tok, pos, g1, o1, wq, wk, wv, wo, g2, o2, w1, b1, w2, b2, gf, of, wout) = P
        B, T, D, NH, DH = W9_B, W9_T, W9_D, W9_NH, W9_DH

        def heads(a):                                   # [B*T, D] -> [B, NH, T, DH]
            return tf.transpose(tf.reshape(a, [B, T, NH, DH]), [0, 2, 1, 3])
        x = tf.reshape(tf.gather(tok, tokens) + pos, [B * T, D])
        h = ln(x, g1, o1)
        q, k, v = heads(tf.matmul(h, wq)), heads(tf.matmul(h, wk)), heads(tf.matmul(h, wv))
        s = tf.matmul(q, k, transpose_b=True) * (1.0 / math.sqrt(DH)) + mask
        a = tf.matmul(tf.nn.softmax(s, axis=-1), v)
        a = tf.reshape(tf.transpose(a, [0, 2, 1, 3]), [B * T, D])
        x = x + tf.matmul(a, wo)
        h = ln(x, g2, o2)
        x = x + (tf.matmul(tf.nn.gelu(tf.matmul(h, w1) + b1, approximate=True), w2) + b2)
        logits = tf.matmul(ln(x, gf, of), wout)
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(
            labels=tf.reshape(targets, [-1]), logits=logits))

    def w10(P, x, y):
        k1, c1, k2, c2, wd1, bd1, wd2, bd2 = P
        h = tf.nn.relu(tf.nn.conv2d(x, k1, 1, "SAME") + c1)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.nn.relu(tf.nn.conv2d(h, k2, 1, "SAME") + c2)
        h = tf.nn.max_pool2d(h, 2, 2, "VALID")
        h = tf.reshape(h, [W10_B, 7 * 7 * 64])
        h = tf.nn.relu(tf.matmul(h, wd1) + bd1)
        logits = tf.matmul(h, wd2) + bd2
        return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))

    def w11(P, xs, ys):
        Wx, Wh, b, Wy, by = P
        T, B, H = W11_T, W11_B, W11_H
        h = tf.zeros([B, H])
        c = tf.zeros([B, H])
        hs = tf.TensorArray(tf.float32, size=T, element_shape=[B, H])
        for t in tf.range(T):            # AutoGraph -> tf.while_loop (not unrolled)
            z = tf.matmul(xs[t], Wx) + tf.matmul(h, Wh) + b
            i, f, g, o = tf.split(z, 4, axis=1)
            c = tf.sigmoid(f) * c + tf.sigmoid(i) * tf.tanh(g)
            h = tf.sigmoid(o) * tf.tanh(c)
            hs = hs.write(t, h)
        y = tf.matmul(tf.reshape(hs.stack(), [T * B, H]), Wy) + by
        return tf.reduce_mean(tf.square(y - tf.reshape(ys, [T * B, 1])))

    def make_adam(loss_fn, vs, lr):
        ms = [tf.Variable(tf.zeros_like(v)) for v in vs]
        vv = [tf.Variable(tf.zeros_like(v)) for v in vs]
        t = tf.Variable(0.0)

        def step(*data):
            with tf.GradientTape() as tape:
                loss = loss_fn(vs, *data)
            grads = tape.gradient(loss, vs)
            t.assign_add(1.0)
            c1 = 1.0 - tf.pow(BETA1, t)
            c2 = 1.0 - tf.pow(BETA2, t)
            for p, m, v, g in zip(vs, ms, vv, grads):
                g = tf.convert_to_tensor(g)          # embedding gather -> IndexedSlices
                m_new = BETA1 * m + (1.0 - BETA1) * g
                v_new = BETA2 * v + (1.0 - BETA2) * g * g
                m.assign(m_new)
                v.assign(v_new)
                p.assign_sub(lr * (m_new / c1) / (tf.sqrt(v_new / c2) + EPS))
            return loss
        return step

    return {"W9": w9, "W10": w10, "W11": w11, "make_adam": make_adam}


def jax_real_defs():
    import math
    import jax
    import jax.numpy as jnp
    from jax import lax
    mask = w9_mask()
    BETA1, BETA2, EPS = ADAM_B1, ADAM_B2, ADAM_EPS

    def ln(x, g, b):
        mu = jnp.mean(x, -1, keepdims=True)
        xc = x - mu
        return xc * lax.rsqrt(jnp.mean(xc * xc, -1, keepdims=True) + 1e-5) * g + b

    def xent(logits, y):
        return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), y[:, None], axis=1))

    def w9(P, tokens, targets):
        (tok, pos, g1, o1, wq, wk, wv, wo, g2, o2, w1, b1, w2, b2, gf, of, wout) = P
        B, T, D, NH, DH = W9_B, W9_T, W9_D, W9_NH, W9_DH

        def heads(a):
            return a.reshape(B, T, NH, DH).transpose(0, 2, 1, 3)
        x = (tok[tokens] + pos).reshape(B * T, D)
        h = ln(x, g1, o1)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        s = jnp.matmul(q, jnp.swapaxes(k, -1, -2)) * (1.0 / math.sqrt(DH)) + mask
        a = jnp.matmul(jax.nn.softmax(s, axis=-1), v)
        a = a.transpose(0, 2, 1, 3).reshape(B * T, D)
        x = x + a @ wo
        h = ln(x, g2, o2)
        x = x + (jax.nn.gelu(h @ w1 + b1, approximate=True) @ w2 + b2)
        logits = ln(x, gf, of) @ wout
        return xent(logits, targets.reshape(-1))

    def conv(x, k):
        return lax.conv_general_dilated(x, k, (1, 1), "SAME",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))

    def pool(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID")

    def w10(P, x, y):
        k1, c1, k2, c2, wd1, bd1, wd2, bd2 = P
        h = pool(jax.nn.relu(conv(x, k1) + c1))
        h = pool(jax.nn.relu(conv(h, k2) + c2))
        h = h.reshape(W10_B, 7 * 7 * 64)
        h = jax.nn.relu(h @ wd1 + bd1)
        return xent(h @ wd2 + bd2, y)

    def w11(P, xs, ys):
        Wx, Wh, b, Wy, by = P
        T, B, H = W11_T, W11_B, W11_H

        def cell(carry, x):
            h, c = carry
            z = x @ Wx + h @ Wh + b
            i, f, g, o = jnp.split(z, 4, axis=1)
            c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
            h = jax.nn.sigmoid(o) * jnp.tanh(c)
            return (h, c), h
        zeros = jnp.zeros((B, H), jnp.float32)
        _, hs = lax.scan(cell, (zeros, zeros), xs)
        y = hs.reshape(T * B, H) @ Wy + by
        return jnp.mean(jnp.square(y - ys.reshape(T * B, 1)))

    def w12(x, k, b):
        return lax.conv_general_dilated(x, k, (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC")) + b

    def make_adam(loss_fn, lr):
        def step(state, *data):
            p, m, v, t = state
            loss, g = jax.value_and_grad(loss_fn)(p, *data)
            t = t + 1.0
            c1 = 1.0 - BETA1 ** t
            c2 = 1.0 - BETA2 ** t
            m = tuple(BETA1 * mi + (1.0 - BETA1) * gi for mi, gi in zip(m, g))
            v = tuple(BETA2 * vi + (1.0 - BETA2) * gi * gi for vi, gi in zip(v, g))
            p = tuple(pi - lr * (mi / c1) / (jnp.sqrt(vi / c2) + EPS) for pi, mi, vi in zip(p, m, v))
            return (p, m, v, t), loss
        return step

    return {"W9": w9, "W10": w10, "W11": w11, "W12": w12, "make_adam": make_adam}


def _update_l1(params_now, params_np):
    """sum |p_now - p_init| over all parameters (float64): checks the Adam updates."""
    import numpy as np
    return float(sum(np.abs(np.asarray(a, np.float64) - b).sum() for a, b in zip(params_now, params_np)))


def worker_tf_real():
    import tensorflow as tf
    import numpy as np
    D = tf_real_defs()
    R = {}
    big_sync = lambda t: t._numpy()  # noqa: E731  (zero-copy resolve, as W7/W8)

    for wl in real_selected():
        params_np, data_np = np_real(wl)
        if wl == "W12":
            x0 = tf.zeros(list(W12_X))                      # the guide's input
            xchk = tf.constant(data_np[1])
            layer = tf.keras.layers.Conv2D(100, 3)
            layer.build(W12_X)
            layer.set_weights(params_np)                    # same Glorot draw as JAX
            for peer in TF_PEERS:
                f = tf_wrap(peer, lambda x: layer(x))

                def run_w12(f=f):
                    t0 = time.perf_counter()
                    zsum = float(np.sum(f(x0)._numpy(), dtype=np.float64))
                    first = time.perf_counter() - t0
                    out = f(xchk)._numpy()
                    chk = float(np.abs(out).sum(dtype=np.float64))
                    corner = [float(v) for v in out[0, 0, 0, :4]]

                    def blk(n):
                        for _ in range(n):
                            big_sync(f(x0))
                    r = per_call(bench(blk), 1e3, "ms")
                    r.update(gflops=W12_FLOP / r["median_s"] / 1e9, flop_per_call=W12_FLOP,
                             check=chk, check_corner=corner, check_zeros_sum=zsum,
                             first_call_s=first, loadavg=loadavg())
                    return r
                guarded(R, "W12/" + peer, run_w12)
            continue

        data = tuple(tf.constant(a) for a in data_np)
        for peer in ("tf_function", "tf_xla"):
            def run_step(peer=peer):
                vs = tf_vars(params_np)
                step = tf_wrap(peer, D["make_adam"](D[wl], vs, REAL_LR[wl]))
                t0 = time.perf_counter()
                losses = [float(step(*data).numpy())]
                first = time.perf_counter() - t0
                losses += [float(step(*data).numpy()) for _ in range(CHECK_STEPS - 1)]
                upd = _update_l1([v.numpy() for v in vs], params_np)

                def blk(n):
                    for _ in range(n):
                        step(*data).numpy()
                r = per_call(bench(blk), 1e3, "ms")
                r.update(check=losses, check_update_l1=upd, first_call_s=first,
                         loss_after_bench=float(step(*data).numpy()),
                         traces=int(step.experimental_get_tracing_count()), loadavg=loadavg())
                return r
            guarded(R, "%sstep/%s" % (wl, peer), run_step)

            if wl in REAL_FWD:
                def run_fwd(peer=peer):
                    vs = tf_vars(params_np)
                    fwd = tf_wrap(peer, lambda *d: D[wl](vs, *d))
                    t0 = time.perf_counter()
                    loss = float(fwd(*data).numpy())
                    first = time.perf_counter() - t0

                    def blk(n):
                        for _ in range(n):
                            fwd(*data).numpy()
                    r = per_call(bench(blk), 1e3, "ms")
                    r.update(check=loss, first_call_s=first,
                             traces=int(fwd.experimental_get_tracing_count()), loadavg=loadavg())
                    return r
                guarded(R, "%sfwd/%s" % (wl, peer), run_fwd)

    info = {"tf_version": tf.__version__, "numpy_version": np.__version__}
    try:
        import keras
        info["keras_version"] = keras.__version__
    except Exception:  # noqa: BLE001
        pass
    emit({"results": R, "info": info})


def worker_jax_real():
    import warnings
    import jax
    import jax.numpy as jnp
    import jaxlib
    import numpy as np
    D = jax_real_defs()
    R = {}
    put = jnp.asarray
    caught = []

    for wl in real_selected():
        params_np, data_np = np_real(wl)
        if wl == "W12":
            k, b = (put(a) for a in params_np)
            x0 = jnp.zeros(W12_X, jnp.float32)
            xchk = put(data_np[1])
            for peer in JAX_PEERS:
                f = jax_wrap(peer, D["W12"])       # eager: conv op, then the bias add op

                def run_w12(f=f):
                    t0 = time.perf_counter()
                    zsum = float(np.sum(np.asarray(f(x0, k, b)), dtype=np.float64))
                    first = time.perf_counter() - t0
                    out = np.asarray(f(xchk, k, b))
                    chk = float(np.abs(out).sum(dtype=np.float64))
                    corner = [float(v) for v in out[0, 0, 0, :4]]

                    def blk(n):
                        for _ in range(n):
                            f(x0, k, b).block_until_ready()
                    r = per_call(bench(blk), 1e3, "ms")
                    r.update(gflops=W12_FLOP / r["median_s"] / 1e9, flop_per_call=W12_FLOP,
                             check=chk, check_corner=corner, check_zeros_sum=zsum,
                             first_call_s=first, loadavg=loadavg())
                    return r
                guarded(R, "W12/" + peer, run_w12)
            continue

        data = tuple(put(a) for a in data_np)

        def run_step(wl=wl, params_np=params_np, data=data):
            with warnings.catch_warnings(record=True) as wlist:
                warnings.simplefilter("always")
                step = jax.jit(D["make_adam"](D[wl], REAL_LR[wl]), donate_argnums=(0,))
                zeros = tuple(jnp.zeros(p.shape, jnp.float32) for p in params_np)
                state = {"s": (tuple(put(p) for p in params_np), zeros,
                               tuple(jnp.zeros(p.shape, jnp.float32) for p in params_np),
                               jnp.zeros((), jnp.float32))}
                losses = []
                t0 = time.perf_counter()
                for i in range(CHECK_STEPS):
                    state["s"], loss = step(state["s"], *data)
                    losses.append(float(loss))
                    if i == 0:
                        first = time.perf_counter() - t0
                upd = _update_l1(state["s"][0], params_np)

                def blk(n):
                    s = state["s"]
                    for _ in range(n):
                        s, loss = step(s, *data)
                        loss.block_until_ready()
                    state["s"] = s
                r = per_call(bench(blk), 1e3, "ms")
                state["s"], loss = step(state["s"], *data)
            caught.extend(str(w.message)[:300] for w in wlist)
            r.update(check=losses, check_update_l1=upd, first_call_s=first,
                     loss_after_bench=float(loss), loadavg=loadavg())
            if wlist:
                r["warnings"] = sorted({str(w.message)[:300] for w in wlist})
            return r
        guarded(R, "%sstep/jax_jit" % wl, run_step)

        if wl in REAL_FWD:
            def run_fwd(wl=wl, params_np=params_np, data=data):
                fwd = jax.jit(D[wl])
                P = tuple(put(p) for p in params_np)
                t0 = time.perf_counter()
                loss = float(fwd(P, *data))
                first = time.perf_counter() - t0

                def blk(n):
                    for _ in range(n):
                        fwd(P, *data).block_until_ready()
                r = per_call(bench(blk), 1e3, "ms")
                r.update(check=loss, first_call_s=first, loadavg=loadavg())
                return r
            guarded(R, "%sfwd/jax_jit" % wl, run_fwd)

    info = {"jax_version": jax.__version__, "jaxlib_version": jaxlib.__version__,
            "jax_devices": [str(d) for d in jax.devices()],
            "jax_real_warnings": sorted(set(caught)), "numpy_version": np.__version__}
    emit({"results": R, "info": info})


def merge_real(lst):
    """merge_rounds plus the W9-W12 extras (ms value, GFLOP/s, per-round side data)."""
    m = merge_rounds(lst)
    ok = [s for s in lst if "error" not in s]
    if not ok:
        return m
    med = m["median_s"]
    m["value"] = med * 1e3
    m["unit"] = "ms"
    m["pooled_quartiles_ms"] = [q * 1e3 for q in statistics.quantiles(
        [v for s in ok for v in s["per_call_s"]], n=4)] if m["blocks"] > 1 else None
    if "flop_per_call" in ok[0]:
        m["flop_per_call"] = ok[0]["flop_per_call"]
        m["gflops"] = ok[0]["flop_per_call"] / med / 1e9
    for key in ("first_call_s", "loss_after_bench", "traces", "loadavg"):
        vals = [s[key] for s in ok if key in s]
        if vals:
            m[key + "_by_round"] = vals
    if len({json.dumps(s.get("check")) for s in ok}) > 1:
        m["check_by_round"] = [s.get("check") for s in ok]
    return m


def run_real_section(doc, logdir, workloads):
    """W9-W12: ROUNDS rounds of (jax_real, tf_real) worker processes, round-robin."""
    res = doc["results"]
    RM = doc["real_models"] = {"workloads": workloads, "rounds": ROUNDS, "check_steps": CHECK_STEPS,
                               "worker_wall_s": {}, "loadavg": {}, "errors": {}}
    t_sec = time.perf_counter()
    per_round = {}
    for rnd in range(ROUNDS):
        for w in ("jax_real", "tf_real"):
            t = time.perf_counter()
            name = "worker_%s_r%d" % (w, rnd)
            before = loadavg()
            try:
                r = run_child(["--worker", w, "--only=" + ",".join(workloads)], logdir, name,
                              timeout=REAL_TIMEOUT)
            except subprocess.TimeoutExpired:
                r = {"error": "child %s timed out after %ss" % (name, REAL_TIMEOUT),
                     "_process_wall_s": time.perf_counter() - t}
            RM["loadavg"][name] = {"before": before, "after": loadavg()}
            RM["worker_wall_s"][name] = r.get("_process_wall_s")
            if "error" in r:
                RM["errors"][name] = r["error"]
            else:
                for k, st in r["results"].items():
                    per_round.setdefault(k, []).append(st)
                for k, v in r["info"].items():
                    doc["info"].setdefault(k, v)
            print("   round %d worker %s: %.1fs (load before %s)" % (
                rnd, w, time.perf_counter() - t, " ".join((before or [])[:3])), file=sys.stderr, flush=True)
    for k, lst in per_round.items():
        res[k] = merge_real(lst)
    RM["section_wall_s"] = time.perf_counter() - t_sec


def print_real_tables(doc):
    res = doc["results"]
    rows = [row for row in REAL_ROWS if any("%s/%s" % (row[0], c) in res for c in REAL_COLS)]
    if not rows:
        return
    RM = doc.get("real_models", {})
    w = 54
    print("\nW9-W12 real models (the book's benchmarks page), ms per call, median over %s rounds x %d blocks; "
          "section wall %.0fs" % (RM.get("rounds", "?"), doc["method"]["reps_per_round"],
                                  RM.get("section_wall_s", float("nan"))))
    print("%-*s" % (w, "workload") + "".join("%12s" % c for c in REAL_COLS))
    print("-" * (w + 12 * len(REAL_COLS)))

    def cell(r, f):
        if r is None:
            return "-"
        if "error" in r:
            return "ERR"
        return f(r)
    for key, label in rows:
        print("%-*s" % (w, label) + "".join(
            "%12s" % cell(res.get("%s/%s" % (key, c)), lambda r: "%.4g" % (r["median_s"] * 1e3))
            for c in REAL_COLS))
    if any("W12/" + c in res for c in REAL_COLS):
        print("%-*s" % (w, "W12 Conv2D(100,3), 7.06 GFLOP/call [GFLOP/s]") + "".join(
            "%12s" % cell(res.get("W12/" + c), lambda r: "%.1f" % r["gflops"]) for c in REAL_COLS))
    print("\nspread: max/min of the per-round medians | min-max over all blocks [ms]")
    for key, label in rows:
        print("%-*s" % (w, label.split(" [")[0]) + "".join(
            "%12s" % cell(res.get("%s/%s" % (key, c)),
                          lambda r: "%.2f" % r["round_spread"] if "round_spread" in r else "-")
            for c in REAL_COLS))
        print("%-*s" % (w, "") + "".join(
            "%12s" % cell(res.get("%s/%s" % (key, c)),
                          lambda r: "%.3g-%.3g" % (r["min_s"] * 1e3, r["max_s"] * 1e3))
            for c in REAL_COLS))
    print("\nfirst call (trace + compile + first run) in the worker, median over rounds [ms]:")
    for key, label in rows:
        print("%-*s" % (w, label.split(" [")[0]) + "".join(
            "%12s" % cell(res.get("%s/%s" % (key, c)),
                          lambda r: "%.0f" % (statistics.median(r["first_call_s_by_round"]) * 1e3)
                          if r.get("first_call_s_by_round") else "-")
            for c in REAL_COLS))

    print("\nchecks (same numpy init for all peers): step rows = losses of the first %d steps "
          "and sum|p - p0| after them; fwd = loss at the init;\n  W12 = sum|out| on a random "
          "input [1,200,200,100] (zeros give 0) and out[0,0,0,:2]" % RM.get("check_steps", CHECK_STEPS))
    for key, _ in rows:
        ref = res.get(key + "/jax_jit", {})
        for c in REAL_COLS:
            r = res.get("%s/%s" % (key, c))
            if r is None or "error" in r:
                continue
            chk = r.get("check")
            vals = chk if isinstance(chk, list) else [chk]
            txt = " ".join("%.9g" % v for v in vals)
            if "check_update_l1" in r:
                txt += " | upd %.9g" % r["check_update_l1"]
            if "check_corner" in r:
                txt += " | " + " ".join("%.6g" % v for v in r["check_corner"][:2])
            rel = ""
            rc = ref.get("check")
            if rc is not None and c != "jax_jit":
                rv = rc if isinstance(rc, list) else [rc]
                pairs = list(zip(vals, rv))
                if "check_update_l1" in r and "check_update_l1" in ref:
                    pairs.append((r["check_update_l1"], ref["check_update_l1"]))
                d = max(abs(a - b) / max(abs(b), 1e-30) for a, b in pairs)
                rel = "  (max rel. diff vs jax_jit %.1e)" % d
            print("  %-8s %-12s %s%s" % (key, c, txt, rel))
    la = RM.get("loadavg", {})
    if la:
        print("\nload average (1/5/15 min) before each worker: " + "; ".join(
            "%s %s" % (n.replace("worker_", ""), "/".join(v["before"][:3]) if v.get("before") else "?")
            for n, v in sorted(la.items(), key=lambda nv: (nv[0].rsplit("_r", 1)[-1], nv[0]))))
    if RM.get("errors"):
        print("worker errors: %s" % RM["errors"])


# ----------------------------------------------------------------------------
# measured clock + FMA peak (tiny C program, compiled under /tmp)
# ----------------------------------------------------------------------------
PEAK_C = r"""#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
static double now(void){struct timespec t; clock_gettime(CLOCK_MONOTONIC,&t); return t.tv_sec+t.tv_nsec*1e-9;}
static long ITERS; static volatile float sink;
#define R12(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
static void* fma512(void* arg){
#define D(i) __m512 a##i=_mm512_set1_ps(1.0f+i*1e-3f);
  R12(D)
  __m512 m=_mm512_set1_ps(0.99999f), c=_mm512_set1_ps(1e-6f);
  for(long it=0; it<ITERS; it++){
#define F(i) a##i=_mm512_fmadd_ps(a##i,m,c);
    R12(F)
  }
  __m512 s=a0;
#define S(i) s=_mm512_add_ps(s,a##i);
  R12(S)
  sink=_mm512_reduce_add_ps(s); return 0;
}
static void* fma256(void* arg){
#define D2(i) __m256 a##i=_mm256_set1_ps(1.0f+i*1e-3f);
  R12(D2)
  __m256 m=_mm256_set1_ps(0.99999f), c=_mm256_set1_ps(1e-6f);
  for(long it=0; it<ITERS; it++){
#define F2(i) a##i=_mm256_fmadd_ps(a##i,m,c);
    R12(F2)
  }
  __m256 s=a0;
#define S2(i) s=_mm256_add_ps(s,a##i);
  R12(S2)
  float o[8]; _mm256_storeu_ps(o,s); sink=o[0]; return 0;
}
static void* addchain(void* arg){
  long x=0;
  for(long it=0; it<ITERS; it++){
    __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\t":"+r"(x));
  }
  sink=(float)x; return 0;
}
static double run(void*(*fn)(void*), int nt){
  pthread_t th[8]; double t0=now();
  for(int i=0;i<nt;i++) pthread_create(&th[i],0,fn,0);
  for(int i=0;i<nt;i++) pthread_join(th[i],0);
  return now()-t0;
}
static int cmp(const void*a,const void*b){double x=*(double*)a,y=*(double*)b; return x<y?-1:x>y;}
static double med(void*(*fn)(void*), int nt){double t[5]; for(int r=0;r<5;r++) t[r]=run(fn,nt); qsort(t,5,sizeof(double),cmp); return t[2];}
int main(int argc,char**argv){
  int nt = argc>1?atoi(argv[1]):2;
  ITERS=100000000; run(addchain,1);
  double t=med(addchain,1); double ghz1=10.0*ITERS/t/1e9;
  double t2=med(addchain,nt); double ghzn=10.0*ITERS/t2/1e9;
  ITERS=50000000;
  double f1=12.0*16*2*ITERS/med(fma512,1)/1e9;
  double fn=12.0*16*2*ITERS*nt/med(fma512,nt)/1e9;
  double g1=12.0*8*2*ITERS/med(fma256,1)/1e9;
  double gn=12.0*8*2*ITERS*nt/med(fma256,nt)/1e9;
  printf("{\"clock_ghz_1thread\": %.4f, \"clock_ghz_per_thread_%dthreads\": %.4f, \"fma512_gflops_1thread\": %.2f, \"fma512_gflops_%dthreads\": %.2f, \"fma256_gflops_1thread\": %.2f, \"fma256_gflops_%dthreads\": %.2f}\n", ghz1, nt, ghzn, f1, nt, fn, g1, nt, gn);
  return 0;
}
"""


def measure_peak():
    """Compile and run a C microbenchmark: effective clock (a chain of dependent integer
    adds = 1 cycle each) and f32 FMA throughput (12 independent accumulators,
    AVX-512 and AVX2) with 1 and nproc threads."""
    d = "/tmp/peers_peak"
    os.makedirs(d, exist_ok=True)
    src, exe = os.path.join(d, "peak.c"), os.path.join(d, "peak")
    with open(src, "w") as fh:
        fh.write(PEAK_C)
    try:
        c = subprocess.run(["cc", "-O2", "-mavx512f", "-mfma", "-mavx2", "-pthread", src, "-o", exe],
                           capture_output=True, text=True)
        if c.returncode != 0:
            return {"error": "cc failed: " + c.stderr[-1000:]}
        r = subprocess.run([exe, str(os.cpu_count() or 2)], capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout.strip().splitlines()[-1])
    except Exception as e:  # noqa: BLE001
        return {"error": "%s: %s" % (type(e).__name__, e)}


# ----------------------------------------------------------------------------
# orchestrator
# ----------------------------------------------------------------------------
def run_child(args, logdir, name, env_extra=None, timeout=560):
    env = dict(os.environ)
    if env_extra:
        env.update(env_extra)
    logpath = os.path.join(logdir, name + ".log")
    t0 = time.perf_counter()
    with open(logpath, "w") as log:
        p = subprocess.run([sys.executable, os.path.abspath(__file__)] + args, env=env,
                           stdout=subprocess.PIPE, stderr=log, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    for line in p.stdout.splitlines():
        if line.startswith(MARK):
            r = json.loads(line[len(MARK):])
            r["_process_wall_s"] = wall
            return r
    tail = open(logpath).read()[-1500:]
    return {"error": "child %s exited %s without result; stderr tail: %s" % (args, p.returncode, tail),
            "_process_wall_s": wall}


def merge_rounds(lst):
    """Pool the per-block per-call times of all rounds; median over the pool."""
    ok = [s for s in lst if "error" not in s]
    if not ok:
        return dict(lst[0], rounds_ok=0)
    pooled = [v for s in ok for v in s["per_call_s"]]
    med = statistics.median(pooled)
    m = {k: v for k, v in ok[0].items() if k.startswith(("check", "warnings", "unit"))}
    m.update(median_s=med, min_s=min(pooled), max_s=max(pooled), blocks=len(pooled),
             rounds_ok=len(ok), round_medians_s=[s["median_s"] for s in ok],
             round_spread=max(s["median_s"] for s in ok) / min(s["median_s"] for s in ok),
             iters_per_block=[s["iters_per_block"] for s in ok],
             min_block_s=min(s["min_block_s"] for s in ok),
             minflt_per_call=statistics.median(s["minflt_per_call"] for s in ok),
             steal_frac_max=max((s.get("steal_frac") or 0.0) for s in ok))
    if len(ok) < len(lst):
        m["round_errors"] = [s["error"] for s in lst if "error" in s]
    unit = m.get("unit")
    if unit == "us":
        m["value"] = med * 1e6
    elif unit == "GFLOP/s":
        m["value"] = 2.0 * N_W7 ** 3 / med / 1e9
    elif unit == "GB/s":
        m["value"] = BYTES_W8 / med / 1e9
    if unit in ("GFLOP/s", "GB/s"):
        m["ms_per_call"] = med * 1e3
    return m


def machine_info():
    info = {"python": sys.version.split()[0], "platform": platform.platform()}
    try:
        info["nproc"] = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
    except Exception:  # noqa: BLE001
        info["nproc"] = str(os.cpu_count())
    model, mhz, flags = "", [], ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith("model name") and not model:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("cpu MHz"):
                mhz.append(float(line.split(":", 1)[1]))
            elif line.startswith("flags") and not flags:
                flags = line
    fam = ""
    with open("/proc/cpuinfo") as fh:
        for line in fh:
            if line.startswith(("cpu family", "model\t")):
                fam += line.strip().replace("\t", "") + "; "
            if line.strip() == "":
                break
    info.update(cpu_model=model, cpu_family_model=fam.strip(), cpu_mhz=mhz,
                avx512f=" avx512f " in flags, avx512_bf16=" avx512_bf16 " in flags)
    with open("/proc/meminfo") as fh:
        info["mem_total"] = fh.readline().split(":", 1)[1].strip()
    for key, path in (("thp_enabled", "/sys/kernel/mm/transparent_hugepage/enabled"),
                      ("thp_defrag", "/sys/kernel/mm/transparent_hugepage/defrag")):
        try:
            with open(path) as fh:
                info[key] = fh.read().strip()
        except OSError:
            info[key] = None
    cores = int(info["nproc"])
    ghz = (statistics.median(mhz) if mhz else 0.0) / 1000.0
    info["assumed_peak_f32_gflops"] = cores * ghz * 32
    info["assumed_peak_note"] = (
        "%d cores x %.3f GHz (cpu MHz from /proc/cpuinfo; a KVM guest shows the nominal/TSC "
        "clock, the host may boost higher) x 32 f32 FLOP/cycle/core.  32 = 2 FMA pipes x 8 f32 "
        "lanes x 2 FLOP: Zen4 has two 256-bit FMA units (FP0, FP1); a 512-bit AVX-512 FMA is "
        "executed double-pumped as two 256-bit halves, so AVX-512 gives the same 32 FLOP/cycle "
        "as AVX2 (16 lanes x 2 FLOP x 1 instr/cycle)." % (cores, ghz))
    info["env"] = {k: os.environ.get(k) for k in (
        "TF_ENABLE_ONEDNN_OPTS", "TF_CPP_MIN_LOG_LEVEL", "XLA_FLAGS", "TF_XLA_FLAGS",
        "OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS",
        "JAX_PLATFORMS", "JAX_ENABLE_X64")}
    return info


PEER_COLS = ("tf_eager", "tf_function", "tf_xla", "jax_eager", "jax_jit", "numpy")
ROWS = [  # (result key prefix, label, kind)
    ("W1", "W1 dispatch x+1 scalar, sync each call [us/call]", "time_us"),
    ("W1pipe", "W1 dispatch, pipelined (sync at block end) [us/call]", "time_us"),
    ("W2", "W2 150 small ops [1000], sync each [us/call]", "time_us"),
    ("W2pipe", "W2 150 small ops, pipelined [us/call]", "time_us"),
    ("W3", "W3 MLP SGD train step [us/step]", "time_us"),
    ("W4", "W4 loop n=1000 in graph [us/call]", "time_us"),
    ("W7", "W7 matmul 1024^3 [GFLOP/s]", "value"),
    ("W8", "W8 (x*2+1)*x-3, 16M f32 [GB/s eff.]", "value"),
]


def fmt(r, kind):
    if r is None:
        return "-"
    if "error" in r:
        return "ERR"
    if kind == "time_us":
        v = r["median_s"] * 1e6
        return "%.4g" % v if v < 1e5 else "%.0f" % v
    return "%.1f" % r["value"]


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    out_path = os.path.abspath(args[0]) if args else DEFAULT_OUT
    outdir = os.path.dirname(out_path)
    logdir = os.path.join(outdir, "logs")
    os.makedirs(logdir, exist_ok=True)
    T0 = time.perf_counter()
    only = only_flag()
    steady = only is None or any(w in only for w in ("W1", "W2", "W3", "W4", "W7", "W8"))
    real = real_selected()
    doc = {"machine": machine_info(), "method": {
        "min_block_s": MIN_BLOCK, "reps_per_round": REPS, "rounds": ROUNDS,
        "fresh_process_reps_w5": FRESH_REPS, "fresh_process_reps_w6": POLY_REPS,
        "statistic": "median of per-call time over rounds x reps blocks; each block >= min_block_s",
        "sync": "TF: .numpy() each call (W7/W8: ._numpy(), the zero-copy resolve behind .numpy(), "
                "to avoid a 4-64 MiB defensive copy); JAX: .block_until_ready() each call. "
                "'pipe' rows chain y=f(y) and sync once per block.",
        "gc": "disabled inside timed blocks",
        "quick": QUICK, "only": only}, "results": {}, "fresh": {}, "info": {}}
    res = doc["results"]

    print("== clock / FMA peak microbenchmark", file=sys.stderr, flush=True)
    doc["machine"]["measured_peak"] = measure_peak()
    print("   %s" % doc["machine"]["measured_peak"], file=sys.stderr, flush=True)

    if steady:
        print("== steady state workers (%d rounds)" % ROUNDS, file=sys.stderr, flush=True)
        per_round = {}
        doc["worker_wall_s"] = {}
        for rnd in range(ROUNDS):
            for w in ("np", "jax", "tf"):
                t = time.perf_counter()
                name = "worker_%s_r%d" % (w, rnd)
                r = run_child(["--worker", w], logdir, name)
                doc["worker_wall_s"][name] = r.get("_process_wall_s")
                if "error" in r:
                    doc["worker_errors"] = doc.get("worker_errors", {})
                    doc["worker_errors"][name] = r["error"]
                else:
                    for k, st in r["results"].items():
                        per_round.setdefault(k, []).append(st)
                    doc["info"].update(r["info"])
                    if w == "tf":
                        with open(os.path.join(logdir, name + ".log")) as fh:
                            doc["info"]["tf_log_onednn_lines"] = sorted(
                                {ln.split("] ", 1)[-1].strip()[:300] for ln in fh if "oneDNN" in ln or "cpu_feature_guard" in ln})
                print("   round %d worker %s: %.1fs" % (rnd, w, time.perf_counter() - t), file=sys.stderr, flush=True)
        for k, lst in per_round.items():
            res[k] = merge_rounds(lst)

    if only is None or "W5" in only:
        print("== W5 first-call (fresh processes)", file=sys.stderr, flush=True)
        W5 = doc["fresh"]["W5"] = {}
        for wl in ("w2", "w3"):
            for peer in TF_PEERS + JAX_PEERS:
                runs = [run_child(["--first", peer, wl], logdir, "w5_%s_%s_%d" % (wl, peer, i))
                        for i in range(FRESH_REPS)]
                ok = [r for r in runs if "error" not in r]
                W5["%s/%s" % (wl, peer)] = {
                    "runs": runs,
                    "first_ms_median": statistics.median(r["first_s"] for r in ok) * 1e3 if ok else None,
                    "second_ms_median": statistics.median(r["second_s"] for r in ok) * 1e3 if ok else None,
                    "first_ms_min": min(r["first_s"] for r in ok) * 1e3 if ok else None,
                    "first_ms_max": max(r["first_s"] for r in ok) * 1e3 if ok else None,
                    "import_s_median": statistics.median(r["import_s"] for r in ok) if ok else None,
                    "error": runs[0].get("error") if not ok else None}
            for peer in ("tf_function", "tf_xla", "jax_jit"):
                runs = [run_child(["--split", peer, wl], logdir, "w5split_%s_%s_%d" % (wl, peer, i))
                        for i in range(FRESH_REPS)]
                ok = [r for r in runs if "error" not in r]
                d = {"runs": runs}
                for key in ("trace_s", "compile_s", "first_run_s", "compile_and_first_run_s", "total_s"):
                    if ok and key in ok[0]:
                        d[key.replace("_s", "_ms") + "_median"] = statistics.median(r[key] for r in ok) * 1e3
                if not ok:
                    d["error"] = runs[0].get("error")
                W5["split_%s/%s" % (wl, peer)] = d
            print("   %s done (%.0fs so far)" % (wl, time.perf_counter() - T0), file=sys.stderr, flush=True)

    if only is None or "W6" in only:
        print("== W6 shape polymorphism (fresh processes)", file=sys.stderr, flush=True)
        W6 = doc["fresh"]["W6"] = {}
        for v in W6_VARIANTS:
            env = {"TF_CPP_VMODULE": "device_compiler=1"} if v.startswith("tf_xla") else None
            runs = []
            for i in range(POLY_REPS):
                name = "w6_%s_%d" % (v, i)
                r = run_child(["--poly", v], logdir, name, env_extra=env)
                if env and "error" not in r:
                    with open(os.path.join(logdir, name + ".log")) as fh:
                        r["xla_compilations"] = sum("Compilation of XLA executable time" in ln for ln in fh)
                runs.append(r)
            ok = [r for r in runs if "error" not in r]
            W6[v] = {"runs": runs,
                     "total_ms_median": statistics.median(r["total_s"] for r in ok) * 1e3 if ok else None,
                     "traces": sorted({r["traces"] for r in ok}) if ok else None,
                     "xla_compilations": sorted({r["xla_compilations"] for r in ok if "xla_compilations" in r}) or None,
                     "jit_cache_size": sorted({r["jit_cache_size"] for r in ok if "jit_cache_size" in r}) or None,
                     "first_call_ms_median": statistics.median(r["first_call_s"] for r in ok) * 1e3 if ok else None,
                     "median_call_after_first_ms": statistics.median(r["median_call_after_first_s"] for r in ok) * 1e3 if ok else None,
                     "error": runs[0].get("error") if not ok else None}

    if real:
        print("== W9-W12 real models %s (%d rounds)" % (",".join(real), ROUNDS), file=sys.stderr, flush=True)
        run_real_section(doc, logdir, real)

    doc["total_script_wall_s"] = time.perf_counter() - T0
    with open(out_path, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)
    print_tables(doc)
    print("\nJSON written to %s ; child logs in %s" % (out_path, logdir))


def print_tables(doc):
    res = doc["results"]
    m = doc["machine"]
    i = doc["info"]
    print("Machine: %s (%s), nproc=%s, cpu MHz=%s, mem=%s, avx512f=%s, THP=%s" % (
        m["cpu_model"], m["cpu_family_model"], m["nproc"], m["cpu_mhz"], m["mem_total"], m["avx512f"],
        m.get("thp_enabled")))
    print("Versions: python %s, tensorflow-cpu %s, jax %s / jaxlib %s, numpy %s" % (
        m["python"], i.get("tf_version"), i.get("jax_version"), i.get("jaxlib_version"),
        i.get("numpy_version")))
    md = doc["method"]
    print("Method: median over %d rounds x %d blocks, each block >= %.2fs; total script wall %.0fs\n" % (
        md["rounds"], md["reps_per_round"], md["min_block_s"], doc["total_script_wall_s"]))
    w = 54
    rows = [row for row in ROWS if any("%s/%s" % (row[0], c) in res for c in PEER_COLS)]
    if rows:
        print("%-*s" % (w, "workload") + "".join("%12s" % c for c in PEER_COLS))
        print("-" * (w + 12 * len(PEER_COLS)))
    for key, label, kind in rows:
        print("%-*s" % (w, label) + "".join("%12s" % fmt(res.get("%s/%s" % (key, c)), kind)
                                             for c in PEER_COLS))
    if md["rounds"] > 1 and rows:
        print("\nspread = max/min of the %d per-round medians (1.00 = perfectly stable)" % md["rounds"])
        for key, label, kind in rows:
            print("%-*s" % (w, label.split(" [")[0]) + "".join(
                "%12s" % ("%.2f" % res["%s/%s" % (key, c)]["round_spread"]
                          if "round_spread" in res.get("%s/%s" % (key, c), {}) else "-") for c in PEER_COLS))
    if any("W8/" + c in res for c in PEER_COLS):
        print("\nminor page faults per call (getrusage) for W8:  " + ", ".join(
            "%s %.0f" % (c, res["W8/" + c]["minflt_per_call"]) for c in PEER_COLS
            if "minflt_per_call" in res.get("W8/" + c, {})))
    print()
    extra = [("W8donate/jax_jit", "W8 jax.jit donate_argnums=0 (in place)"),
             ("W8copy1t/numpy", "W8 ref: numpy copyto 64MiB, 1 thread"),
             ("W8copy2t/numpy", "W8 ref: numpy copyto 64MiB, 2 threads"),
             ("W8copyalloc/numpy", "W8 ref: numpy x.copy() (fresh alloc)")]
    for key, label in extra:
        r = res.get(key)
        if r is not None:
            print("%-*s %s" % (w, label, fmt(r, "value") + " GB/s  (%.2f ms)" % r["ms_per_call"]
                               if "error" not in r else "ERR " + r["error"][:100]))
    if any("W7/" + c in res for c in PEER_COLS):
        peak = m["assumed_peak_f32_gflops"]
        mp = m.get("measured_peak", {})
        mkey = "fma512_gflops_%sthreads" % m["nproc"]
        mpeak = mp.get(mkey)
        print("\nW7 assumed f32 peak: %.1f GFLOP/s (%s)" % (peak, m["assumed_peak_note"]))
        if mpeak:
            print("   measured: effective clock %.2f GHz (1 thread) / %.2f GHz per thread (%s threads); "
                  "FMA peak %.1f GFLOP/s AVX-512, %.1f AVX2 (%s threads), %.1f (1 thread)" % (
                      mp["clock_ghz_1thread"], mp["clock_ghz_per_thread_%sthreads" % m["nproc"]], m["nproc"],
                      mpeak, mp["fma256_gflops_%sthreads" % m["nproc"]], m["nproc"], mp["fma512_gflops_1thread"]))
        else:
            print("   measured peak: %s" % mp)
        for c in PEER_COLS:
            r = res.get("W7/" + c)
            if r and "error" not in r:
                print("   %-12s %7.1f GFLOP/s = %5.1f%% of assumed peak%s  (%.2f ms/matmul)" % (
                    c, r["value"], 100 * r["value"] / peak,
                    (", %5.1f%% of measured FMA peak" % (100 * r["value"] / mpeak)) if mpeak else "",
                    r["ms_per_call"]))
    copy = res.get("W8copy1t/numpy", {}).get("value")
    copy2 = res.get("W8copy2t/numpy", {}).get("value")
    if copy:
        print("\nW8 effective GB/s counts 128 MiB (read x + write y once); vs numpy copy 1t %.1f / 2t %.1f GB/s:" % (copy, copy2 or 0))
        for c in PEER_COLS:
            r = res.get("W8/" + c)
            if r and "error" not in r:
                print("   %-12s %6.1f GB/s (%.2f ms) = %4.0f%% of 1-thread copy, %4.0f%% of 2-thread copy" % (
                    c, r["value"], r["ms_per_call"], 100 * r["value"] / copy, 100 * r["value"] / (copy2 or copy)))
        r = res.get("W8donate/jax_jit")
        if r and "error" not in r:
            print("   %-12s %6.1f GB/s (%.2f ms) (donated input)" % ("jax_jit+don", r["value"], r["ms_per_call"]))

    if "W5" in doc["fresh"]:
        print("\nW5 first call in a fresh process (median of %d), ms: first call [second call]" % md["fresh_process_reps_w5"])
        W5 = doc["fresh"]["W5"]
        print("%-6s" % "" + "".join("%26s" % p for p in TF_PEERS + JAX_PEERS))
        for wl in ("w2", "w3"):
            cells, rng = [], []
            for p in TF_PEERS + JAX_PEERS:
                d = W5.get("%s/%s" % (wl, p), {})
                cells.append("ERR" if d.get("error") else "%.1f [%.2f]" % (d["first_ms_median"], d["second_ms_median"]))
                rng.append("" if d.get("error") else "(%.0f-%.0f)" % (d["first_ms_min"], d["first_ms_max"]))
            print("%-6s" % wl.upper() + "".join("%26s" % c for c in cells))
            print("%-6s" % "range" + "".join("%26s" % c for c in rng))
        print("  breakdown (ms): trace | compile+first run  (jax: lower | compile | first run)")
        for wl in ("w2", "w3"):
            for p in ("tf_function", "tf_xla", "jax_jit"):
                d = W5.get("split_%s/%s" % (wl, p), {})
                if d.get("error"):
                    print("   %s %-12s ERR %s" % (wl.upper(), p, d["error"][:100]))
                elif p == "jax_jit":
                    print("   %s %-12s trace+lower %.1f | compile %.1f | first run %.2f" % (
                        wl.upper(), p, d["trace_ms_median"], d["compile_ms_median"], d["first_run_ms_median"]))
                else:
                    print("   %s %-12s trace %.1f | compile+first run %.1f" % (
                        wl.upper(), p, d["trace_ms_median"], d["compile_and_first_run_ms_median"]))

    if "W6" in doc["fresh"]:
        print("\nW6 49 shapes (3..99 odd), cold fresh process, median of %d:" % md["fresh_process_reps_w6"])
        print("%-26s %10s %8s %10s %12s %14s" % ("variant", "total ms", "traces", "XLA comp.", "1st call ms", "median later ms"))
        for v, d in doc["fresh"]["W6"].items():
            if d.get("error"):
                print("%-26s ERR %s" % (v, d["error"][:100]))
                continue
            xc = d.get("xla_compilations") or d.get("jit_cache_size")
            print("%-26s %10.1f %8s %10s %12.1f %14.2f" % (
                v, d["total_ms_median"], ",".join(map(str, d["traces"])),
                ",".join(map(str, xc)) if xc else "-", d["first_call_ms_median"], d["median_call_after_first_ms"]))
    print_real_tables(doc)
    errs = {k: v["error"] for k, v in res.items() if isinstance(v, dict) and "error" in v}
    if errs:
        print("\nErrors:")
        for k, e in errs.items():
            print("  %s: %s" % (k, e[:400]))


if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "--worker":
        {"tf": worker_tf, "jax": worker_jax, "np": worker_np,
         "tf_real": worker_tf_real, "jax_real": worker_jax_real}[argv[1]]()
    elif argv and argv[0] == "--first":
        first_call(argv[1], argv[2])
    elif argv and argv[0] == "--split":
        first_call(argv[1], argv[2], split=True)
    elif argv and argv[0] == "--poly":
        poly(argv[1])
    elif argv and argv[0] == "--print":
        with open(argv[1] if len(argv) > 1 else DEFAULT_OUT) as fh:
            print_tables(json.load(fh))
    else:
        main()
