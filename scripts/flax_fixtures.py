"""Writes the Flax fixtures of tests/weights_presets.rs.

A Flax (linen) network holding one of each layer kind a Flax port meets
(Dense, Conv, ConvTranspose, LayerNorm, BatchNorm, an LSTM cell run over
a sequence, multi-head attention, Embed), initialized from a seed, with
BatchNorm statistics and biases drawn so that a mix-up shows. The
variables tree (`params` and `batch_stats`) is flattened with `.` and
written by safetensors' Flax saver (variables.safetensors); inputs and
each layer's outputs go to io.safetensors. A pre-norm transformer block
(LayerNorm, attention, LayerNorm, a GELU MLP, both residuals) goes to
block.safetensors and block_io.safetensors.

Run with a Python that has jax, flax and safetensors:
    python scripts/flax_fixtures.py tests/fixtures/flax
"""

import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import flax.linen as nn
from flax.traverse_util import flatten_dict, unflatten_dict
from safetensors.flax import save_file


class Net(nn.Module):
    @nn.compact
    def __call__(self, inputs):
        image, features, sequence, tokens, ids = inputs
        conv = nn.Conv(4, (3, 3), name="conv")(image)
        return {
            "conv_out": conv,
            "bn_out": nn.BatchNorm(use_running_average=True, name="bn")(conv),
            "fc_out": nn.Dense(5, name="fc")(features),
            "deconv_out": nn.ConvTranspose(2, (3, 3), strides=(2, 2), padding="VALID",
                                           name="deconv")(image),
            "ln_out": nn.LayerNorm(name="ln")(features),
            "lstm_out": nn.RNN(nn.LSTMCell(6, name="lstm"))(sequence),
            "attn_out": nn.MultiHeadDotProductAttention(2, name="attn")(tokens, tokens),
            "emb_out": nn.Embed(10, 3, name="emb")(ids),
        }


class Block(nn.Module):
    """A pre-norm transformer block, as Flax examples write one."""

    @nn.compact
    def __call__(self, x):
        h = nn.LayerNorm(name="ln1")(x)
        x = x + nn.MultiHeadDotProductAttention(2, name="attn")(h, h)
        h = nn.LayerNorm(name="ln2")(x)
        h = nn.Dense(8, name="fc2")(nn.gelu(nn.Dense(16, name="fc1")(h)))
        return x + h


def block(out: Path) -> None:
    """The transformer block's variables (block.safetensors) and one
    input and output (block_io.safetensors)."""
    keys = jax.random.split(jax.random.PRNGKey(7), 2)
    x = jax.random.normal(keys[0], (2, 5, 8))
    variables = flatten_dict(jax.device_get(Block().init(keys[1], x)), sep=".")
    for i, (name, value) in enumerate(sorted(variables.items())):
        if name.endswith(".bias"):
            variables[name] = jax.random.uniform(jax.random.PRNGKey(200 + i), value.shape,
                                                 minval=-0.5, maxval=0.5)
    y = Block().apply(unflatten_dict(variables, sep="."), x)
    save_file({k: jnp.asarray(v) for k, v in variables.items()}, str(out / "block.safetensors"))
    save_file({"x": x, "y": y}, str(out / "block_io.safetensors"))


def main(out: Path) -> None:
    keys = jax.random.split(jax.random.PRNGKey(0), 8)
    inputs = (
        jax.random.normal(keys[0], (2, 5, 5, 3)),
        jax.random.normal(keys[1], (2, 6)),
        jax.random.normal(keys[2], (2, 7, 4)),
        jax.random.normal(keys[3], (2, 5, 8)),
        jnp.array([[1, 4, 9], [0, 2, 2]], jnp.int32),
    )
    net = Net()
    variables = flatten_dict(jax.device_get(net.init(keys[4], inputs)), sep=".")
    # Biases, scales and statistics other than their initial 0 and 1.
    for i, (name, value) in enumerate(sorted(variables.items())):
        leaf = name.rsplit(".", 1)[-1]
        if leaf in ("bias", "mean"):
            variables[name] = jax.random.uniform(jax.random.PRNGKey(100 + i), value.shape,
                                                 minval=-0.5, maxval=0.5)
        elif leaf in ("scale", "var"):
            variables[name] = jax.random.uniform(jax.random.PRNGKey(100 + i), value.shape,
                                                 minval=0.5, maxval=1.5)
    outputs = net.apply(unflatten_dict(variables, sep="."), inputs)
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: jnp.asarray(v) for k, v in variables.items()}, str(out / "variables.safetensors"))
    names = ["image", "features", "sequence", "tokens", "ids"]
    io = dict(zip(names, inputs)) | outputs
    save_file({k: jnp.asarray(v) for k, v in io.items()}, str(out / "io.safetensors"))
    block(out)
    print(f"wrote {len(variables)} variables and {len(io)} inputs/outputs to {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/fixtures/flax"))
