"""W16's PyTorch peer: torchcrepe's "full" network at inference on the
parameters and frames tools/workloads/crepe_infer.rs draws (numpy's
RandomState(16), in the same order), timed as the bench report times
(median of 7 blocks of at least 0.2 s after warm-up), on the threads
torch chooses (set OMP_NUM_THREADS to pin them).

Prints one JSON object: the check (sum of the outputs and of their
squares, which the report compares with its own before timing) and the
milliseconds per call, eager and, with --compile, under torch.compile.

    python scripts/peers_w16.py [--compile] [--json OUT]

Needs numpy and torch; where torch is missing it says so and exits 2.
"""

import json
import sys
import time

import numpy as np

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("peers_w16: torch is not installed here; W16's peer needs it "
          "(pip install torch numpy)", file=sys.stderr)
    sys.exit(2)

BATCH, SAMPLES, BINS = 61, 1024, 360
BLOCKS = [  # kernel, filters, stride, padding before, after
    (512, 1024, 4, 254, 254),
    (64, 128, 1, 31, 32),
    (64, 128, 1, 31, 32),
    (64, 128, 1, 31, 32),
    (64, 256, 1, 31, 32),
    (64, 512, 1, 31, 32),
]


def draw():
    rs = np.random.RandomState(16)
    f32 = lambda a: np.asarray(a, np.float32)
    blocks, cin = [], 1
    for k, cout, stride, before, after in BLOCKS:
        kernel = f32(rs.randn(k * cin * cout) * np.sqrt(2.0 / (k * cin))).reshape(k, cin, cout)
        bias = f32(rs.uniform(-0.1, 0.1, cout))
        gamma = f32(rs.uniform(0.5, 1.5, cout))
        beta = f32(rs.uniform(-0.1, 0.1, cout))
        mean = f32(rs.uniform(-0.1, 0.1, cout))
        var = f32(rs.uniform(0.5, 1.5, cout))
        blocks.append((kernel, bias, gamma, beta, mean, var, stride, before, after))
        cin = cout
    features = 4 * 512
    head = f32(rs.randn(features * BINS) * np.sqrt(1.0 / features)).reshape(features, BINS)
    frames = f32(rs.randn(BATCH * SAMPLES)).reshape(BATCH, 1, SAMPLES)
    return blocks, head, frames


class Crepe(torch.nn.Module):
    def __init__(self, blocks, head):
        super().__init__()
        self.convs = torch.nn.ModuleList()
        self.bns = torch.nn.ModuleList()
        self.pads = []
        for kernel, bias, gamma, beta, mean, var, stride, before, after in blocks:
            k, cin, cout = kernel.shape
            conv = torch.nn.Conv1d(cin, cout, k, stride=stride)
            conv.weight.data = torch.from_numpy(np.ascontiguousarray(kernel.transpose(2, 1, 0)))
            conv.bias.data = torch.from_numpy(bias)
            bn = torch.nn.BatchNorm1d(cout, eps=1e-3)
            bn.weight.data, bn.bias.data = torch.from_numpy(gamma), torch.from_numpy(beta)
            bn.running_mean.data, bn.running_var.data = torch.from_numpy(mean), torch.from_numpy(var)
            self.convs.append(conv)
            self.bns.append(bn)
            self.pads.append((before, after))
        self.head = torch.nn.Linear(head.shape[0], head.shape[1])
        self.head.weight.data = torch.from_numpy(np.ascontiguousarray(head.T))
        self.head.bias.data.zero_()

    def forward(self, x):
        for conv, bn, pad in zip(self.convs, self.bns, self.pads):
            x = F.max_pool1d(bn(F.relu(conv(F.pad(x, pad)))), 2, 2)
        # torchcrepe flattens time-major: (t, c), as a channels-last flatten.
        x = x.permute(0, 2, 1).reshape(x.shape[0], -1)
        return torch.sigmoid(self.head(x))


def median_ms(f, blocks=7, block_s=0.2):
    for _ in range(3):
        f()
    times = []
    for _ in range(blocks):
        n, began = 0, time.perf_counter()
        while True:
            f()
            n += 1
            elapsed = time.perf_counter() - began
            if elapsed >= block_s:
                break
        times.append(elapsed / n * 1e3)
    return float(np.median(times))


def main(argv):
    blocks, head, frames = draw()
    model = Crepe(blocks, head).eval()
    x = torch.from_numpy(frames)
    out = {"threads": torch.get_num_threads(), "torch": torch.__version__}
    with torch.inference_mode():
        y = model(x).numpy().astype(np.float64)
        out["check"] = [float(y.sum()), float((y * y).sum())]
        out["eager_ms"] = median_ms(lambda: model(x))
        if "--compile" in argv:
            compiled = torch.compile(model)
            out["compile_check"] = float(compiled(x).numpy().astype(np.float64).sum())
            out["compiled_ms"] = median_ms(lambda: compiled(x))
    text = json.dumps(out)
    print(text)
    if "--json" in argv:
        with open(argv[argv.index("--json") + 1], "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main(sys.argv[1:])
