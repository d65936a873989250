#!/usr/bin/env python3
"""PyTorch peers of the bench report's workloads that have a PyTorch
version: W3 (the MLP's SGD step), W9 (the transformer block's Adam
step), W13 (the GPT decoder's AdamW step) and W16 (CREPE's inference),
each eager and under `torch.compile`, on the GPU when there is one (or
`--device cpu`).

    python3 bench/peers_torch.py OUT.json [--device cuda|cpu] [--only=W3,W9,W13,W16]
                                 [--quick] [--tf32] [--no-compile]

Parameters and data are the numpy draws of the other peers (`peers.py`'s
`np_data`/`np_real`, `peers_models.py`'s `np_models`,
`scripts/peers_w16.py`'s `draw`), imported from those scripts, so the
first losses can be compared with JAX's and xlafn's before anything is
timed. The optimizers are written out as those scripts write them
(TensorFlow's Adam: `p -= lr m_hat / (sqrt(v_hat) + 1e-7)`; W13's AdamW
with its schedule, decay and clipping), so `check` (the losses of the
first three steps, W13's at dropout 0) is the same quantity.

The step is what a PyTorch user compiles: the loss (its backward compiled
by AOTAutograd) and the optimizer's update, each under `torch.compile`,
with `torch.autograd.grad` between them. Every timed step is awaited
(`torch.cuda.synchronize()`, as jax's `block_until_ready`). Float32
products stay float32 (`allow_tf32 = False` for matmuls and cuDNN) unless
`--tf32`, matching `XLAFN_DEFAULT_MATMUL_PRECISION=highest` and JAX's
`jax_default_matmul_precision=highest` in `scripts/gpu-bench.sh`.

A cell `<W>/<peer>` (peer `torch_eager` or `torch_compile`) holds `value`
(ms per call, the median over timed blocks of at least 0.2 s), the
blocks' figures, `check` and, for compiled cells, `compile_s` (the first
call). Where torch is missing the script says so and exits 2.
"""

import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "scripts"))

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as missing:
    print("peers_torch: %s; the PyTorch peers need torch and numpy" % missing, file=sys.stderr)
    sys.exit(2)

import peers  # noqa: E402  (np_data, np_real: the shared numpy draws)
import peers_models  # noqa: E402  (np_models, W13's constants)

WORKLOADS = ("W3", "W9", "W13", "W16")
CHECK_STEPS = 3


def flag_value(name, default):
    for i, a in enumerate(sys.argv):
        if a == "--" + name and i + 1 < len(sys.argv):
            return sys.argv[i + 1]
        if a.startswith("--%s=" % name):
            return a.split("=", 1)[1]
    return default


DEVICE = flag_value("device", "cuda" if torch.cuda.is_available() else "cpu")


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def put(a):
    """A copy on DEVICE (on the CPU, `from_numpy(..).to` would share the
    array's memory, and the in-place updates would change the draws)."""
    return torch.tensor(np.ascontiguousarray(a), device=DEVICE)


def timed(call):
    """peers_models.py's timing (median ms per call over timed blocks of at
    least 0.2 s, after warm-up), each call awaited."""
    def awaited():
        call()
        sync()
    return peers_models.timed(awaited)


# ---------------------------------------------------------------- W3
# Each training workload is (make_state, loss, update, data): `loss(p,
# *data)` the forward pass, `update(state, grads)` the optimizer step in
# place under no_grad. A step is `loss`, `torch.autograd.grad`, `update`;
# under torch.compile the loss and the update are compiled (AOTAutograd
# compiles the loss's backward too), as a PyTorch user compiles a model and
# its optimizer step: Dynamo cannot trace `torch.autograd.grad` itself, and
# a step compiled whole would fall back to eager.

def w3():
    """The MLP, SGD at 0.1."""
    params_np, x, y = peers.np_data("w3")
    data = (put(x), put(y).long())

    def make_state():
        return {"p": [put(p).requires_grad_() for p in params_np]}

    def loss(params, x, y):
        w1, b1, w2, b2 = params
        return F.cross_entropy(F.relu(x @ w1 + b1) @ w2 + b2, y)

    def update(state, grads):
        with torch.no_grad():
            for p, g in zip(state["p"], grads):
                p.sub_(0.1 * g)
    return make_state, loss, update, data


# ---------------------------------------------------------------- W9

def adam_state(params_np):
    zeros = lambda: [torch.zeros(p.shape, device=DEVICE) for p in params_np]  # noqa: E731
    return {"p": [put(p).requires_grad_() for p in params_np], "m": zeros(), "v": zeros(),
            "t": torch.zeros((), device=DEVICE)}


def layer_norm(x, g, b, eps):
    mu = x.mean(-1, keepdim=True)
    xc = x - mu
    return xc * torch.rsqrt((xc * xc).mean(-1, keepdim=True) + eps) * g + b


def w9():
    """The transformer block, TensorFlow's Adam at 3e-3."""
    params_np, (tokens, targets) = peers.np_real("W9")
    mask = put(peers.w9_mask())
    data = (put(tokens).long(), put(targets).long())
    B, T, D, NH, DH = peers.W9_B, peers.W9_T, peers.W9_D, peers.W9_NH, peers.W9_DH
    lr, b1, b2, eps = peers.REAL_LR["W9"], peers.ADAM_B1, peers.ADAM_B2, peers.ADAM_EPS

    def heads(a):
        return a.reshape(B, T, NH, DH).permute(0, 2, 1, 3)

    def loss(P, tokens, targets):
        (tok, pos, g1, o1, wq, wk, wv, wo, g2, o2, w1, c1, w2, c2, gf, of, wout) = P
        x = (tok[tokens] + pos).reshape(B * T, D)
        h = layer_norm(x, g1, o1, 1e-5)
        q, k, v = heads(h @ wq), heads(h @ wk), heads(h @ wv)
        s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(DH)) + mask
        a = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B * T, D)
        x = x + a @ wo
        h = layer_norm(x, g2, o2, 1e-5)
        x = x + (F.gelu(h @ w1 + c1, approximate="tanh") @ w2 + c2)
        logits = layer_norm(x, gf, of, 1e-5) @ wout
        return F.cross_entropy(logits, targets.reshape(-1))

    def update(state, grads):
        """TensorFlow's Adam as peers.py writes it."""
        with torch.no_grad():
            state["t"].add_(1.0)
            k1 = 1.0 - b1 ** state["t"]
            k2 = 1.0 - b2 ** state["t"]
            for p, m, v, g in zip(state["p"], state["m"], state["v"], grads):
                m.mul_(b1).add_((1.0 - b1) * g)
                v.mul_(b2).add_((1.0 - b2) * g * g)
                p.sub_(lr * (m / k1) / (torch.sqrt(v / k2) + eps))
    return (lambda: adam_state(params_np)), loss, update, data


# ---------------------------------------------------------------- W13

def w13(rate):
    """The GPT decoder at dropout `rate`: AdamW with its schedule, decay
    and clipping, as peers_models.py writes it."""
    pm = peers_models
    params_np, (x, y) = pm.np_models("W13")
    decayed = pm.w13_decayed()
    data = (put(x).long(), put(y).long())
    B, T, D, NH, DH = pm.BATCH13, pm.T13, pm.D13, pm.NH13, pm.DH13
    causal = torch.tril(torch.ones((T, T), dtype=torch.bool, device=DEVICE))
    very_negative = torch.tensor(-1e30, device=DEVICE)
    inverse_clip = torch.tensor(1.0 / pm.CLIP13, device=DEVICE)

    def heads(a):
        return a.reshape(B, T, NH, DH).permute(0, 2, 1, 3)

    def drop(a):
        return F.dropout(a, rate, training=True) if rate > 0.0 else a

    def loss(p, x, y):
        wte = p[0]
        h = wte[x] + p[1]
        for layer in range(pm.L13):
            g1, b1, wq, bq, wk, bk, wv, bv, wo, bo, g2, b2, w1, c1, w2, c2 = \
                p[2 + 16 * layer: 18 + 16 * layer]
            a = layer_norm(h, g1, b1, pm.LN_EPS13)
            q = heads(a @ wq + bq) * (1.0 / math.sqrt(DH))
            k, v = heads(a @ wk + bk), heads(a @ wv + bv)
            s = torch.where(causal, q @ k.transpose(-1, -2), very_negative)
            o = (torch.softmax(s, -1) @ v).permute(0, 2, 1, 3).reshape(B, T, D)
            h = h + drop(o @ wo + bo)
            m = F.gelu(layer_norm(h, g2, b2, pm.LN_EPS13) @ w1 + c1, approximate="tanh") @ w2 + c2
            h = h + drop(m)
        logits = layer_norm(h, p[-2], p[-1], pm.LN_EPS13) @ wte.T
        return F.cross_entropy(logits.reshape(B * T, -1), y.reshape(-1))

    def update(state, grads):
        with torch.no_grad():
            norm = torch.sqrt(sum((g * g).sum() for g in grads))
            scale = torch.minimum(1.0 / norm, inverse_clip) * pm.CLIP13
            n = state["t"]
            lr = pm.w13_rate(n, torch.cos, torch.where, torch.clamp)
            t = n + 1.0
            k1, k2 = 1.0 - pm.B1_13 ** t, 1.0 - pm.B2_13 ** t
            for p, m, v, g, d in zip(state["p"], state["m"], state["v"], grads, decayed):
                g = g * scale
                if d:
                    p.sub_(lr * pm.WD13 * p)
                m.mul_(pm.B1_13).add_((1.0 - pm.B1_13) * g)
                v.mul_(pm.B2_13).add_((1.0 - pm.B2_13) * g * g)
                p.sub_(lr * (m / k1) / (torch.sqrt(v / k2) + pm.EPS))
            state["t"].add_(1.0)
    return (lambda: adam_state(params_np)), loss, update, data


# ---------------------------------------------------------------- the cells

def stepper(workload, compiled):
    """(state, step) of one workload; step() runs one training step and
    returns its loss."""
    make, loss, update, data = workload
    if compiled:
        loss, update = torch.compile(loss), torch.compile(update)
    state = make()

    def step():
        value = loss(state["p"], *data)
        update(state, torch.autograd.grad(value, state["p"]))
        return value.detach()
    return step


def train_cells(name, results, compile_too):
    """Times `name`'s step eagerly and compiled; the check runs first."""
    for peer in ("torch_eager",) + (("torch_compile",) if compile_too else ()):
        compiled = peer == "torch_compile"
        checked = w13(0.0) if name == "W13" else {"W3": w3, "W9": w9}[name]()
        step = stepper(checked, compiled)
        t0 = time.perf_counter()
        losses = []
        for i in range(CHECK_STEPS):
            losses.append(float(step()))
            if i == 0:
                first_s = time.perf_counter() - t0
        if name == "W13":
            step = stepper(w13(peers_models.DROP13), compiled)
        else:
            step = stepper(checked, compiled)
        cell = timed(step)
        cell.update(check=losses, first_call_s=first_s)
        results["%s/%s" % (name, peer)] = cell
        print("  %-4s %-14s %9.3f ms  losses %s" % (name, peer, cell["value"],
              ["%.6f" % v for v in losses]), file=sys.stderr, flush=True)


def w16_cells(results, compile_too):
    import peers_w16
    blocks, head, frames = peers_w16.draw()
    model = peers_w16.Crepe(blocks, head).eval().to(DEVICE)
    x = put(frames)
    with torch.inference_mode():
        for peer in ("torch_eager",) + (("torch_compile",) if compile_too else ()):
            f = torch.compile(model) if peer == "torch_compile" else model
            t0 = time.perf_counter()
            y = f(x).double().cpu().numpy()
            first_s = time.perf_counter() - t0
            cell = timed(lambda: f(x))
            cell.update(check=[float(y.sum()), float((y * y).sum())], first_call_s=first_s)
            results["W16/" + peer] = cell
            print("  W16  %-14s %9.3f ms  check %s" % (peer, cell["value"], cell["check"]),
                  file=sys.stderr, flush=True)


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--") and a not in ("cuda", "cpu")]
    out_path = args[0] if args else "peers_torch.json"
    only = flag_value("only", None)
    names = [n.strip().upper() for n in only.split(",")] if only else list(WORKLOADS)
    unknown = [n for n in names if n not in WORKLOADS]
    if unknown:
        sys.exit("peers_torch: unknown workloads %s (known: %s)" % (unknown, ", ".join(WORKLOADS)))
    if DEVICE.startswith("cuda") and not torch.cuda.is_available():
        sys.exit("peers_torch: --device cuda, but torch sees no GPU")
    tf32 = "--tf32" in sys.argv
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    compile_too = "--no-compile" not in sys.argv
    report = {"results": {}, "notes": [], "info": {
        "torch": torch.__version__, "device": DEVICE, "tf32": tf32,
        "gpu": torch.cuda.get_device_name() if DEVICE.startswith("cuda") else None,
        "threads": torch.get_num_threads()}}
    for name in names:
        try:
            if name == "W16":
                w16_cells(report["results"], compile_too)
            else:
                train_cells(name, report["results"], compile_too)
        except Exception as error:  # one workload's failure is a note, not the run's end
            report["notes"].append("%s: %s: %s" % (name, type(error).__name__, str(error)[:400]))
            print("  %s failed: %s" % (name, report["notes"][-1]), file=sys.stderr, flush=True)
    with open(out_path, "w") as fh:
        json.dump(report, fh, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
