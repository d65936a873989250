#!/usr/bin/env python3
"""The 2x2 for the model workloads: each side's program (xlafn's
StableHLO, jax.jit's) compiled by each side's compiler (the pinned PJRT
plugin, jaxlib's CPU client), same inputs, timed interleaved.

    cargo run --release --example bench_report -- --only W9,W10,W11,W13,W14,W15 --hlo DIR
    python3 bench/two_by_two.py lower DIR [--only=W9,W10,W11,W13,W14,W15]
                                          [--peers=PATH/peers.py]
    cargo run --release --example two_by_two -- DIR/*.mlir     # pinned plugin
    python3 bench/two_by_two.py time DIR/*.mlir                # jaxlib

`bench_report --hlo` writes xlafn's steps (DIR/xlafn_w14_step.mlir).
`lower` writes jax.jit's, DIR/jax_w14_step.mlir: the training step the
peers time, `jax.jit(step).lower(state, *data).as_text()`, without
donation. W13-W15 come from bench/peers_models.py beside this file; W9-W11
from the W1-W12 peers script, whose path `--peers` gives (they are skipped
without it).

`time` compiles every file with jaxlib's default options and fills each
argument from its type in `@main`'s signature exactly as the Rust half
does (f32 values small and varied, everything else zero). Both halves
print each file's f32 scalar results (the loss) from one run; the same
file must give the same values on both. Then 15 rounds, in which every
file runs for at least 0.2 s, and each file's median.
"""
import importlib.util
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def load(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lower(out_dir, names, peers_path):
    import jax
    import jax.numpy as jnp
    os.makedirs(out_dir, exist_ok=True)
    models = load(os.path.join(HERE, "peers_models.py"), "peers_models")
    peers = load(peers_path, "peers") if peers_path else None
    for name in names:
        if name in ("W13", "W14", "W15"):
            params, data = models.np_models(name)
            _checked, timed_step = models.jax_steps(name, params)
            state, step = timed_step()
        elif peers is None:
            print("%s: skipped (no --peers=PATH/peers.py)" % name)
            continue
        else:
            defs = peers.jax_real_defs()
            params, data = peers.np_real(name)
            step = defs["make_adam"](defs[name], peers.REAL_LR[name])
            zeros = tuple(jnp.zeros(p.shape, jnp.float32) for p in params)
            state = (tuple(jnp.asarray(p) for p in params), zeros, zeros,
                     jnp.zeros((), jnp.float32))
        data = tuple(jnp.asarray(a) for a in data)
        text = jax.jit(step).lower(state, *data).as_text()
        path = os.path.join(out_dir, "jax_%s_step.mlir" % name.lower())
        with open(path, "w") as fh:
            fh.write(text)
        print("wrote", path)


ELEMENT = {"f16": "float16", "f32": "float32", "f64": "float64", "bf16": "bfloat16",
           "i1": "bool", "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
           "ui8": "uint8", "ui16": "uint16", "ui32": "uint32", "ui64": "uint64"}


def main_arguments(text):
    """(shape, numpy dtype name) of each of @main's arguments."""
    header = text[text.index("@main(") + len("@main("):]
    header = header[:header.index(") ->")]
    out = []
    for ty in re.findall(r"%arg\d+: tensor<([^>]*)>", header):
        *dims, element = ty.split("x")
        out.append((tuple(int(d) for d in dims), ELEMENT[element]))
    return out


def argument(shape, dtype, seed):
    import numpy as np
    n = int(np.prod(shape)) if shape else 1
    if dtype == "float32":
        i = np.arange(n, dtype=np.int64) + seed
        values = ((i * 7919 % 1000).astype(np.float32) / 1000.0 - 0.5) * 0.1
        return values.reshape(shape)
    if dtype == "bfloat16":
        import ml_dtypes
        return np.zeros(shape, ml_dtypes.bfloat16)
    return np.zeros(shape, dtype)


def time_files(files):
    import jax
    from jax._src import xla_bridge
    from jax._src.lib import xla_client as xc
    # 64-bit arguments (xlafn's RNG state is u64[2]) stay 64-bit; the
    # programs themselves are given as text, so nothing else changes.
    jax.config.update("jax_enable_x64", True)
    backend = xla_bridge.get_backend("cpu")
    device = backend.devices()[0]
    runs = []
    for path in files:
        with open(path) as fh:
            text = fh.read()
        text = text.replace("tf.aliasing_output", "xlafn.unaliased")
        text = text.replace("jax.buffer_donor", "xlafn.not_donated")
        t0 = time.perf_counter()
        try:
            exe = backend.compile_and_load(text, xc.DeviceList((device,)), xc.CompileOptions())
        except AttributeError:
            exe = backend.compile(text, xc.CompileOptions())
        compiled_ms = (time.perf_counter() - t0) * 1e3
        inputs = [jax.device_put(argument(s, d, i), device)
                  for i, (s, d) in enumerate(main_arguments(text))]
        # The f32 scalar results (the loss): the Rust half prints the same
        # file's, so the two fills and readings can be compared.
        scalars = [float(o) for o in exe.execute(inputs)
                   if o.shape == () and str(o.dtype) == "float32"]
        print("%s: compiled in %.0f ms; f32 scalar results %s" % (path, compiled_ms, scalars))
        runs.append((path, exe, inputs))

    def run(exe, inputs):
        for out in exe.execute(inputs):
            out.block_until_ready()
    for _path, exe, inputs in runs:
        for _ in range(3):
            run(exe, inputs)
    blocks = [[] for _ in runs]
    for _ in range(15):
        for (_path, exe, inputs), times in zip(runs, blocks):
            t0 = time.perf_counter()
            n = 0
            while time.perf_counter() - t0 < 0.2:
                run(exe, inputs)
                n += 1
            times.append((time.perf_counter() - t0) / n * 1e3)
    for (path, _exe, _inputs), times in zip(runs, blocks):
        times.sort()
        print("%s: median %.3f ms, quartiles %.3f-%.3f, min %.3f (jaxlib %s)"
              % (path, times[7], times[3], times[11], times[0], jax.__version__))


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    flags = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--") and "=" in a)
    if len(args) >= 2 and args[0] == "lower":
        names = [n.strip().upper() for n in flags.get("only", "W9,W10,W11,W13,W14,W15").split(",")]
        lower(args[1], names, flags.get("peers"))
    elif len(args) >= 2 and args[0] == "time":
        time_files(args[1:])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
