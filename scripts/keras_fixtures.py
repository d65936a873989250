"""Writes the Keras fixtures of tests/weights_presets.rs.

A Keras 3 functional model holding one of each layer kind a Keras port
meets (Conv2D, BatchNormalization, two Dense, LayerNormalization,
GroupNormalization, Conv2DTranspose, DepthwiseConv2D, LSTM, GRU, a
Bidirectional LSTM, MultiHeadAttention, Embedding), its layers named by
Keras itself (`dense`, `dense_1`, ...), initialized from a seed, with
BatchNorm statistics and biases drawn so that a mix-up shows. Its
weights are written by Keras' own saver, `model.save_weights`
(model.weights.h5, and a whole `.keras` archive, model.keras); inputs
and each layer's outputs go to io.safetensors. A subclassed model with
layers as attributes and in a list goes to subclassed.weights.h5.

Run with a Python that has keras, jax (the backend), h5py and
safetensors:
    KERAS_BACKEND=jax python scripts/keras_fixtures.py tests/fixtures/keras
"""

import os
import sys
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "jax")

import keras
import numpy as np
from keras import layers
from safetensors.numpy import save_file


def model() -> keras.Model:
    image = keras.Input((5, 5, 3), name="image")
    features = keras.Input((6,), name="features")
    sequence = keras.Input((7, 4), name="sequence")
    tokens = keras.Input((5, 8), name="tokens")
    ids = keras.Input((3,), dtype="int32", name="ids")
    conv = layers.Conv2D(4, 3, padding="same")(image)
    fc = layers.Dense(5)(features)
    outputs = {
        "conv_out": conv,
        "bn_out": layers.BatchNormalization()(conv, training=False),
        "fc_out": fc,
        "fc2_out": layers.Dense(3, activation="relu")(fc),
        "ln_out": layers.LayerNormalization()(features),
        "gn_out": layers.GroupNormalization(2)(features),
        "deconv_out": layers.Conv2DTranspose(2, 3, strides=2)(image),
        "dw_out": layers.DepthwiseConv2D(3, depth_multiplier=2)(image),
        "lstm_out": layers.LSTM(6, return_sequences=True)(sequence),
        "gru_out": layers.GRU(5, return_sequences=True)(sequence),
        "bi_out": layers.Bidirectional(layers.LSTM(3, return_sequences=True))(sequence),
        "attn_out": layers.MultiHeadAttention(2, 4)(tokens, tokens),
        "emb_out": layers.Embedding(10, 3)(ids),
    }
    return keras.Model([image, features, sequence, tokens, ids], outputs)


class Subclassed(keras.Model):
    """Layers as attributes, and a list of them: Keras names the
    attributes by attribute name and the list's layers by layer name."""

    def __init__(self):
        super().__init__()
        self.fc = layers.Dense(3)
        self.blocks = [layers.Dense(4), layers.Dense(2)]
        self.norm = layers.LayerNormalization()

    def call(self, x):
        x = self.fc(x)
        for block in self.blocks:
            x = block(x)
        return self.norm(x)


def main(out: Path) -> None:
    keras.utils.set_random_seed(0)
    net = model()
    rng = np.random.default_rng(1)
    # Biases, offsets and statistics other than their initial 0 and 1.
    for layer in net.layers:
        for v in layer.weights:
            leaf = v.path.rsplit("/", 1)[-1]
            if leaf in ("bias", "beta", "moving_mean"):
                v.assign(rng.uniform(-0.5, 0.5, v.shape).astype(np.float32))
            elif leaf in ("gamma", "moving_variance"):
                v.assign(rng.uniform(0.5, 1.5, v.shape).astype(np.float32))
    inputs = {
        "image": rng.normal(size=(2, 5, 5, 3)).astype(np.float32),
        "features": rng.normal(size=(2, 6)).astype(np.float32),
        "sequence": rng.normal(size=(2, 7, 4)).astype(np.float32),
        "tokens": rng.normal(size=(2, 5, 8)).astype(np.float32),
        "ids": np.array([[1, 4, 9], [0, 2, 2]], np.int32),
    }
    outputs = net([inputs[k] for k in ("image", "features", "sequence", "tokens", "ids")])
    out.mkdir(parents=True, exist_ok=True)
    net.save_weights(out / "model.weights.h5")
    net.save(out / "model.keras")
    sub = Subclassed()
    sub(np.zeros((1, 6), np.float32))
    sub.save_weights(out / "subclassed.weights.h5")
    tensors = dict(inputs)
    tensors.update({k: np.asarray(v) for k, v in outputs.items()})
    save_file(tensors, str(out / "io.safetensors"))
    print("layers:", [layer.name for layer in net.layers])


if __name__ == "__main__":
    main(Path(sys.argv[1]))
