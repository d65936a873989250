#!/usr/bin/env python3
"""The GPU benchmark's peers and its table (driven by scripts/gpu-bench.sh).

    python3 bench/gpu_bench.py peers DIR [--cpu] [--quick] [--only=W1,W9,...]
    python3 bench/gpu_bench.py table DIR

`peers` runs, each in a child process of its own so that no two
frameworks share a GPU context: `peers.py`'s JAX workers for W1-W4, W7,
W8 (`--worker jax`), W9-W12 (`--worker jax_real`), the fresh-process
first calls of W5 and the 49 shapes of W6; `peers_models.py`'s JAX worker
for W13-W15; and `peers_torch.py` for the PyTorch versions (W3, W9, W13,
W16: eager and `torch.compile`). Their results go to DIR/peers_jax.json,
DIR/peers_models.json and DIR/peers_torch.json, child logs to DIR/logs/.
JAX runs with `JAX_PLATFORMS=cuda` (`cpu` with `--cpu`, the dry run that
checks these scripts on a machine without a GPU) and float32 products in
float32 (`JAX_DEFAULT_MATMUL_PRECISION=highest`), as xlafn's side is run.

`table` reads DIR/xlafn.json (the bench report's fixed keys) beside those
files and prints one table: each workload's xlafn figure, jax.jit's and
torch.compile's, and the time ratios xlafn/peer (below 1: xlafn is
faster), with the GPU targets (every workload at or below jax.jit, W1-W4
at most half of it). It writes the same to DIR/table.txt and the numbers
to DIR/table.json.
"""

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MARK = "@@RESULT@@ "
CHILD_TIMEOUT_S = 400


def flag(name, default=None):
    for a in sys.argv[1:]:
        if a.startswith("--%s=" % name):
            return a.split("=", 1)[1]
    return default


def child(script, args, logdir, name, env):
    """Runs `script args` with `env`; returns its result line's JSON, or
    {"error": ...} with the tail of its log."""
    log_path = os.path.join(logdir, name + ".log")
    began = time.perf_counter()
    try:
        with open(log_path, "w") as log:
            run = subprocess.run([sys.executable, os.path.join(HERE, script)] + args, env=env,
                                 stdout=subprocess.PIPE, stderr=log, text=True,
                                 timeout=CHILD_TIMEOUT_S)
        out = run.stdout
    except subprocess.TimeoutExpired:
        return {"error": "%s %s: no result within %d s" % (script, args, CHILD_TIMEOUT_S)}
    wall = time.perf_counter() - began
    print("   %-28s %6.1f s" % (name, wall), file=sys.stderr, flush=True)
    for line in out.splitlines():
        if line.startswith(MARK):
            return json.loads(line[len(MARK):])
    with open(log_path) as log:
        tail = log.read()[-1200:]
    return {"error": "%s %s exited %s without a result: %s" % (script, args, run.returncode, tail)}


def peers_cmd(out_dir):
    cpu = "--cpu" in sys.argv
    quick = ["--quick"] if "--quick" in sys.argv else []
    only = flag("only")
    wanted = [w.strip().upper() for w in only.split(",")] if only else None

    def wants(*names):
        return wanted is None or any(n in wanted for n in names)
    logdir = os.path.join(out_dir, "logs")
    os.makedirs(logdir, exist_ok=True)
    env = dict(os.environ, JAX_PLATFORMS="cpu" if cpu else "cuda",
               JAX_DEFAULT_MATMUL_PRECISION="highest", PYTHONUNBUFFERED="1")
    jax = {"results": {}, "fresh": {}, "errors": {}}
    if wants("W1", "W2", "W3", "W4", "W7", "W8"):
        part = child("peers.py", ["--worker", "jax"] + quick, logdir, "jax_w1_w8", env)
        merge(jax, part, "W1-W8")
    real = [w for w in ("W9", "W10", "W11", "W12") if wants(w)]
    if real:
        part = child("peers.py", ["--worker", "jax_real", "--only=" + ",".join(real)] + quick,
                     logdir, "jax_w9_w12", env)
        merge(jax, part, "W9-W12")
    if wants("W5"):
        for wl in ("w2", "w3"):
            part = child("peers.py", ["--first", "jax_jit", wl], logdir, "jax_w5_" + wl, env)
            if "error" in part:
                jax["errors"]["W5 " + wl] = part["error"]
            else:
                jax["fresh"]["W5/%s" % wl] = part
    if wants("W6"):
        part = child("peers.py", ["--poly", "jax_jit"], logdir, "jax_w6", env)
        if "error" in part:
            jax["errors"]["W6"] = part["error"]
        else:
            jax["fresh"]["W6"] = part
    write(os.path.join(out_dir, "peers_jax.json"), jax)

    models = [w for w in ("W13", "W14", "W15") if wants(w)]
    if models:
        part = child("peers_models.py", ["--worker", "jax", "--only=" + ",".join(models)] + quick,
                     logdir, "jax_w13_w15", env)
        write(os.path.join(out_dir, "peers_models.json"), part)

    torch_names = [w for w in ("W3", "W9", "W13", "W16") if wants(w)]
    if torch_names:
        out = os.path.join(out_dir, "peers_torch.json")
        args = [out, "--device", "cpu" if cpu else "cuda", "--only=" + ",".join(torch_names)]
        log_path = os.path.join(logdir, "torch.log")
        began = time.perf_counter()
        with open(log_path, "w") as log:
            run = subprocess.run([sys.executable, os.path.join(HERE, "peers_torch.py")] + args
                                 + quick, env=env, stdout=log, stderr=log, timeout=CHILD_TIMEOUT_S)
        print("   %-28s %6.1f s" % ("torch", time.perf_counter() - began), file=sys.stderr)
        if run.returncode != 0:
            with open(log_path) as log:
                write(out, {"results": {}, "notes": ["peers_torch.py exited %d: %s" % (
                    run.returncode, log.read()[-600:])]})


def merge(doc, part, what):
    if "error" in part:
        doc["errors"][what] = part["error"]
        return
    for key, cell in part.get("results", {}).items():
        if "error" in cell:
            doc["errors"][key] = cell["error"]
        else:
            doc["results"][key] = cell
    doc.setdefault("info", {}).update(part.get("info", {}))


def write(path, doc):
    with open(path, "w") as fh:
        json.dump(doc, fh, indent=1, sort_keys=True)


def load(path):
    try:
        with open(path) as fh:
            return json.load(fh)
    except (OSError, ValueError):
        return {}


# ---------------------------------------------------------------- the table

def dig(doc, *keys):
    for k in keys:
        if not isinstance(doc, dict) or k not in doc:
            return None
        doc = doc[k]
    return doc if isinstance(doc, (int, float)) and doc > 0 else None


# (workload, label, unit, xlafn keys, how to read jax.jit, torch cell, target ratio to jax.jit)
# A rate ("GFLOP/s", "GB/s") is turned into a time ratio (peer rate / xlafn rate).
def rows(x, jax, models, torch):
    res = jax.get("results", {})
    fresh = jax.get("fresh", {})

    def steady(cell, scale):
        s = dig(res, cell, "median_s")
        return s * scale if s else None

    def model(cell):
        return dig(models, "results", cell, "value")

    def tcell(cell, scale=1.0):
        v = dig(torch, "results", cell, "value")
        return v * scale if v else None
    return [
        ("W1", "x+1 scalar, one call", "us", dig(x, "W1", "function_us"),
         steady("W1/jax_jit", 1e6), None, 0.5),
        ("W2", "150 small ops", "us", dig(x, "W2", "function_us"),
         steady("W2/jax_jit", 1e6), None, 0.5),
        ("W3", "MLP SGD step", "us", dig(x, "W3", "function_us"),
         steady("W3/jax_jit", 1e6), tcell("W3/torch_compile", 1e3), 0.5),
        ("W4", "loop n=1000", "us", dig(x, "W4", "function_us"),
         steady("W4/jax_jit", 1e6), None, 0.5),
        ("W5", "first call of W2", "ms", dig(x, "W5", "w2_first_call_ms"),
         (dig(fresh, "W5/w2", "first_s") or 0) * 1e3 or None, None, 1.0),
        ("W5", "first call of W3", "ms", dig(x, "W5", "w3_first_call_ms"),
         (dig(fresh, "W5/w3", "first_s") or 0) * 1e3 or None, None, 1.0),
        ("W6", "49 shapes, cold (default)", "ms", dig(x, "W6", "default", "total_ms"),
         (dig(fresh, "W6", "total_s") or 0) * 1e3 or None, None, 1.0),
        ("W7", "matmul 1024^3", "GFLOP/s", dig(x, "W7", "gflops"),
         dig(res, "W7/jax_jit", "value"), None, 1.0),
        ("W8", "elementwise, 64 MB", "GB/s", dig(x, "W8", "gbps"),
         dig(res, "W8/jax_jit", "value"), None, 1.0),
        ("W9", "transformer block step", "ms", dig(x, "W9", "step_ms"),
         steady("W9step/jax_jit", 1e3), tcell("W9/torch_compile"), 1.0),
        ("W9", "transformer block forward", "ms", dig(x, "W9", "forward_ms"),
         steady("W9fwd/jax_jit", 1e3), None, 1.0),
        ("W10", "CNN step", "ms", dig(x, "W10", "step_ms"),
         steady("W10step/jax_jit", 1e3), None, 1.0),
        ("W11", "LSTM step (device loop)", "ms", dig(x, "W11", "step_ms"),
         steady("W11step/jax_jit", 1e3), None, 1.0),
        ("W11", "LSTM forward", "ms", dig(x, "W11", "forward_ms"),
         steady("W11fwd/jax_jit", 1e3), None, 1.0),
        ("W12", "Conv2D(100, 3) layer", "ms", dig(x, "W12", "function_ms"),
         steady("W12/jax_jit", 1e3), None, 1.0),
        ("W13", "GPT decoder AdamW step", "ms", dig(x, "W13", "step_ms"),
         model("W13step/jax_jit"), tcell("W13/torch_compile"), 1.0),
        ("W14", "ResNet SGD step", "ms", dig(x, "W14", "step_ms"),
         model("W14step/jax_jit"), None, 1.0),
        ("W15", "bidirectional GRU step", "ms", dig(x, "W15", "step_ms"),
         model("W15step/jax_jit"), None, 1.0),
        ("W16", "CREPE full inference", "ms", dig(x, "W16", "forward_ms"),
         None, tcell("W16/torch_compile"), None),
        ("DATA", "W10 step fed by a pipeline", "ms", dig(x, "DATA", "step_ms"),
         None, None, None),
    ]


def time_ratio(unit, ours, peer):
    if ours is None or peer is None:
        return None
    return peer / ours if unit in ("GFLOP/s", "GB/s") else ours / peer


def fmt(v):
    if v is None:
        return "-"
    return "%.4g" % v if v < 1e4 else "%.0f" % v


def table_cmd(out_dir):
    x = load(os.path.join(out_dir, "xlafn.json"))
    jax = load(os.path.join(out_dir, "peers_jax.json"))
    models = load(os.path.join(out_dir, "peers_models.json"))
    torch = load(os.path.join(out_dir, "peers_torch.json"))
    machine = load(os.path.join(out_dir, "machine.json"))
    lines = []
    head = "%-5s %-28s %-8s %10s %10s %8s %12s %8s %7s %4s" % (
        "work", "figure", "unit", "xlafn", "jax.jit", "ratio", "torch.comp", "ratio",
        "target", "met")
    lines.append(head)
    lines.append("-" * len(head))
    summary = []
    for work, label, unit, ours, jax_v, torch_v, target in rows(x, jax, models, torch):
        if ours is None and jax_v is None and torch_v is None:
            continue
        r_jax, r_torch = time_ratio(unit, ours, jax_v), time_ratio(unit, ours, torch_v)
        if work == "DATA":
            pre = dig(x, "DATA", "preplaced_ms")
            r_jax, target, label = (ours / pre if ours and pre else None), 1.05, label + " / pre-placed"
        met = "-" if target is None or r_jax is None else ("yes" if r_jax <= target else "NO")
        lines.append("%-5s %-28s %-8s %10s %10s %8s %12s %8s %7s %4s" % (
            work, label[:28], unit, fmt(ours), fmt(jax_v), fmt(r_jax), fmt(torch_v), fmt(r_torch),
            "<=%g" % target if target else "-", met))
        summary.append({"work": work, "figure": label, "unit": unit, "xlafn": ours,
                        "jax_jit": jax_v, "ratio_jax": r_jax, "torch_compile": torch_v,
                        "ratio_torch": r_torch, "target": target, "met": met})
    lines.append("")
    lines.append("ratios are xlafn's time over the peer's (below 1: xlafn is faster); rates "
                 "(GFLOP/s, GB/s) are turned into time ratios")
    for name, doc in (("jax", jax), ("torch", torch)):
        for key, err in sorted(doc.get("errors", {}).items()):
            lines.append("%s error %s: %s" % (name, key, str(err)[:300]))
        for note in doc.get("notes", []):
            lines.append("%s note: %s" % (name, str(note)[:300]))
    if models.get("error"):
        lines.append("jax models error: %s" % str(models["error"])[:300])
    checks = check_lines(jax, models, torch)
    lines += checks
    if machine:
        lines.insert(0, "machine: %s" % ", ".join("%s %s" % kv for kv in sorted(machine.items())))
    text = "\n".join(lines)
    print(text)
    with open(os.path.join(out_dir, "table.txt"), "w") as fh:
        fh.write(text + "\n")
    write(os.path.join(out_dir, "table.json"), {"rows": summary, "machine": machine})


def check_lines(jax, models, torch):
    """The peers' first losses side by side: the same draws give the same
    losses, so a mismatch says a peer computes something else."""
    out = []
    pairs = [("W3", dig(jax, "results", "W3/jax_jit", "check_first_loss"), "W3/torch_compile"),
             ("W9", (jax.get("results", {}).get("W9step/jax_jit", {}).get("check") or [None])[0],
              "W9/torch_compile"),
             ("W13", (models.get("results", {}).get("W13step/jax_jit", {}).get("check") or [None])[0],
              "W13/torch_compile")]
    for work, jax_loss, cell in pairs:
        t = torch.get("results", {}).get(cell, {}).get("check")
        if jax_loss is not None and t:
            out.append("%s first loss: jax.jit %.7f, torch.compile %.7f (rel. %.1e)" % (
                work, jax_loss, t[0], abs(t[0] - jax_loss) / abs(jax_loss)))
    return out


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in ("peers", "table"):
        sys.exit(__doc__)
    out_dir = os.path.abspath(sys.argv[2])
    os.makedirs(out_dir, exist_ok=True)
    (peers_cmd if sys.argv[1] == "peers" else table_cmd)(out_dir)


if __name__ == "__main__":
    main()
