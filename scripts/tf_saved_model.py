"""Loads a SavedModel xlafn wrote, with TensorFlow alone, and reports what
TensorFlow sees: the tests in tests/saved_model.rs compare it with xlafn.

    python tf_saved_model.py SAVED_MODEL INPUTS OUT [--signature NAME]

- calls `tf.saved_model.load(SAVED_MODEL).signatures[NAME]` (default
  `serving_default`) with one keyword argument per `INPUTS/<name>.npy`,
  and writes each output as `OUT/<output name>.npy`;
- loads it again as TensorFlow 1 loaders (TF Serving's) do, in a graph
  and session (`tf.compat.v1.saved_model.loader.load`, which restores
  the variables through the meta graph's saver), runs the same
  signature's `signature_def` there and writes its outputs as
  `OUT/tf1/<output name>.npy`;
- writes `OUT/signatures.txt`: the signature names, one per line;
- reads the variables back with `tf.train.load_checkpoint` and writes
  each as `OUT/checkpoint/<n>.npy`, with `OUT/checkpoint.txt` listing
  `<n> <checkpoint key>` per line (the object graph entry is left out);
- writes each variable of the loaded object, after the call, as
  `OUT/variables/<n>.npy`, with `OUT/variables.txt` listing `<n> <name>`.

Set up the TensorFlow it needs with scripts/setup-tensorflow.sh.
"""

import argparse
import os
import pathlib

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("saved_model")
    parser.add_argument("inputs")
    parser.add_argument("out")
    parser.add_argument("--signature", default="serving_default")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    (out / "checkpoint").mkdir(parents=True, exist_ok=True)
    (out / "variables").mkdir(parents=True, exist_ok=True)

    loaded = tf.saved_model.load(args.saved_model)
    (out / "signatures.txt").write_text("".join(f"{k}\n" for k in loaded.signatures))
    feeds = {
        p.stem: tf.constant(np.load(p)) for p in sorted(pathlib.Path(args.inputs).glob("*.npy"))
    }
    results = loaded.signatures[args.signature](**feeds)
    for name, value in results.items():
        np.save(out / f"{name}.npy", value.numpy())

    (out / "tf1").mkdir(exist_ok=True)
    with tf.Graph().as_default(), tf.compat.v1.Session() as session:
        meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], args.saved_model)
        signature = meta_graph.signature_def[args.signature]
        feed = {signature.inputs[k].name: v.numpy() for k, v in feeds.items()}
        fetch = {k: v.name for k, v in signature.outputs.items()}
        for name, value in session.run(fetch, feed).items():
            np.save(out / "tf1" / f"{name}.npy", value)

    reader = tf.train.load_checkpoint(os.path.join(args.saved_model, "variables", "variables"))
    keys = sorted(k for k in reader.get_variable_to_shape_map() if k != "_CHECKPOINTABLE_OBJECT_GRAPH")
    lines = []
    for n, key in enumerate(keys):
        np.save(out / "checkpoint" / f"{n}.npy", reader.get_tensor(key))
        lines.append(f"{n} {key}\n")
    (out / "checkpoint.txt").write_text("".join(lines))
    restored = [v for v in vars(loaded).values() if isinstance(v, tf.Variable)]
    for n, v in enumerate(restored):
        np.save(out / "variables" / f"{n}.npy", v.numpy())
    (out / "variables.txt").write_text("".join(f"{n} {v.name}\n" for n, v in enumerate(restored)))


if __name__ == "__main__":
    main()
