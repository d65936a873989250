"""Writes the PyTorch fixtures of tests/weights_presets.rs.

A small network holding one of each layer kind a PyTorch port meets
(Conv2d, BatchNorm2d, Linear, a 2-layer LSTM with both biases, GRU,
MultiheadAttention, Embedding, ConvTranspose2d, a depthwise Conv2d, an
nn.Sequential), with seeded random weights and BatchNorm statistics. The
state dict is written by torch's own savers: `torch.save` (state_dict.pth)
and safetensors' torch saver (state_dict.safetensors). Inputs and each
layer's outputs, in PyTorch's own layouts, go to io.safetensors.

Run with a Python that has torch and safetensors:
    python scripts/torch_fixtures.py tests/fixtures/torch
"""

import sys
from pathlib import Path

import torch
from safetensors.torch import save_file


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(6, 5)
        self.lstm = torch.nn.LSTM(4, 6, num_layers=2, batch_first=True)
        self.gru = torch.nn.GRU(4, 5, batch_first=True)
        self.attn = torch.nn.MultiheadAttention(8, 2, batch_first=True)
        self.emb = torch.nn.Embedding(10, 3)
        self.deconv = torch.nn.ConvTranspose2d(3, 2, 3, stride=2)
        self.dw = torch.nn.Conv2d(3, 6, 3, groups=3)
        self.seq = torch.nn.Sequential(
            torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)
        )


def main(out: Path) -> None:
    torch.manual_seed(0)
    net = Net().eval()
    with torch.no_grad():
        # Statistics other than the initial 0 and 1, so a mix-up shows.
        net.bn.running_mean.uniform_(-1, 1)
        net.bn.running_var.uniform_(0.5, 2)
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
        for name, p in net.named_parameters():
            if "bias" in name:
                p.uniform_(-0.5, 0.5)
    io = {
        "image": torch.randn(2, 3, 5, 5),
        "features": torch.randn(2, 6),
        "sequence": torch.randn(2, 7, 4),
        "tokens_in": torch.randn(2, 5, 8),
        "ids": torch.tensor([[1, 4, 9], [0, 2, 2]]),
        "small": torch.randn(2, 3),
    }
    with torch.no_grad():
        io["conv_out"] = net.conv(io["image"])
        io["bn_out"] = net.bn(io["conv_out"])
        io["fc_out"] = net.fc(io["features"])
        io["lstm_out"] = net.lstm(io["sequence"])[0]
        io["gru_out"] = net.gru(io["sequence"])[0]
        x = io["tokens_in"]
        io["attn_out"] = net.attn(x, x, x, need_weights=False)[0]
        io["emb_out"] = net.emb(io["ids"])
        io["deconv_out"] = net.deconv(io["image"])
        io["dw_out"] = net.dw(io["image"])
        io["seq_out"] = net.seq(io["small"])
    io["ids"] = io["ids"].to(torch.int32)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.contiguous() for k, v in net.state_dict().items()}
    torch.save(net.state_dict(), out / "state_dict.pth")  # an OrderedDict with _metadata
    save_file(state, str(out / "state_dict.safetensors"))
    save_file({k: v.contiguous() for k, v in io.items()}, str(out / "io.safetensors"))
    print(f"wrote {len(state)} tensors and {len(io)} inputs/outputs to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/torch"))
