#!/usr/bin/env python3
"""Checks xlafn's TensorFlow checkpoint (tensor bundle) format against
TensorFlow itself, both ways. Not part of `cargo test`: it needs TensorFlow.

    TF_CPP_MIN_LOG_LEVEL=3 <venv>/bin/python scripts/tf_bundle_check.py

(a TensorFlow 2 venv, e.g. /root/.cache/xlafn/tensorflow-venv). Run from
the repository root; CARGO_TARGET_DIR and other cargo settings in the
environment are passed on.

1. TensorFlow writes bundles: `tf.raw_ops.SaveV2` of one tensor of every
   dtype xlafn has (names given sorted, so TensorFlow lays out the data
   file in key order as xlafn does), and `tf.train.Checkpoint(...).write`.
2. The Rust test `tensorflow_interop_files` (src/export/saved_model/
   bundle_tests.rs) writes its own sample bundle, reads TensorFlow's bundles
   with `read_bundle` (dumping what it read as JSON), and writes each
   again with `write_bundle`.
3. Here TensorFlow reads xlafn's bundles (`tf.train.load_checkpoint`,
   which checks every checksum) and every value is compared exactly; what
   xlafn read from TensorFlow's bundles is compared with TensorFlow's own
   reading; and xlafn's rewrite of the SaveV2 bundle must equal
   TensorFlow's files byte for byte.
"""

import json
import os
import subprocess
import sys
import tempfile

import numpy as np
import tensorflow as tf

# xlafn's dtype names (`DType::name`) as TensorFlow names them.
TF_NAMES = {
    "bool": "bool", "i8": "int8", "i16": "int16", "i32": "int32",
    "i64": "int64", "u8": "uint8", "u16": "uint16", "u32": "uint32",
    "u64": "uint64", "f16": "float16", "bf16": "bfloat16", "f32": "float32",
    "f64": "float64", "c64": "complex64", "c128": "complex128",
    "string": "string",
}


def savev2_tensors():
    """One tensor of each dtype, scalars, empty tensors and strings."""
    t = {}
    for i, name in enumerate(sorted(set(TF_NAMES.values()) - {"string"})):
        dtype = tf.as_dtype(name)
        values = np.arange(6).reshape(2, 3) - 2 * i
        if dtype.is_complex:
            values = values + 1j * values
        t[f"x_{name}"] = tf.cast(values, dtype)
    t["scalar_f64"] = tf.constant(np.pi, tf.float64)
    t["empty_f32"] = tf.zeros([0, 4], tf.float32)
    t["string_scalar"] = tf.constant(b"\x00bytes\xff")
    t["strings"] = tf.constant([b"a", b"", b"a longer string"])
    t["strings_empty"] = tf.constant([], tf.string)
    return t


def tf_write(out):
    """Writes TensorFlow's bundles; returns their prefixes."""
    tensors = savev2_tensors()
    names = sorted(tensors)
    savev2 = os.path.join(out, "tf", "savev2")
    tf.raw_ops.SaveV2(prefix=savev2, tensor_names=names,
                      shape_and_slices=[""] * len(names),
                      tensors=[tensors[n] for n in names])
    ckpt = tf.train.Checkpoint(
        v=tf.Variable([[1.5, -2.0], [3.0, 4.0]]),
        step=tf.Variable(7, dtype=tf.int64),
        half=tf.Variable(tf.constant([1.0, 2.0], tf.bfloat16)))
    return [savev2, ckpt.write(os.path.join(out, "tf", "ckpt"))]


def as_json(value):
    """A tensor as the Rust test dumps one (see `to_json` there)."""
    if isinstance(value, bytes):  # a scalar string (NumPy would strip trailing NULs)
        return {"dims": [], "strings": [value.hex()]}
    a = np.asarray(value)
    if a.dtype == object or a.dtype.kind == "S":
        return {"dims": list(a.shape),
                "strings": [bytes(s).hex() for s in a.reshape(-1)]}
    return {"dims": list(a.shape), "hex": np.ascontiguousarray(a).tobytes().hex()}


def tf_read(prefix):
    """Every tensor of a bundle as TensorFlow reads it, with its dtype."""
    r = tf.train.load_checkpoint(prefix)
    out = {}
    for key, dtype in r.get_variable_to_dtype_map().items():
        out[key] = dict(as_json(r.get_tensor(key)), dtype=dtype.name)
    return out


def compare(what, ours, theirs):
    """ours: xlafn's JSON (xlafn dtype names); theirs: `tf_read`'s."""
    ours = {k: dict(v, dtype=TF_NAMES[v["dtype"]]) for k, v in ours.items()}
    if ours != theirs:
        for k in sorted(set(ours) | set(theirs)):
            if ours.get(k) != theirs.get(k):
                print(f"  {k}: xlafn {ours.get(k)}\n  {k}: tf    {theirs.get(k)}")
        sys.exit(f"FAIL: {what}")
    print(f"ok: {what} ({len(ours)} tensors)")


def same_bytes(a, b):
    with open(a, "rb") as fa, open(b, "rb") as fb:
        return fa.read() == fb.read()


def main():
    with tempfile.TemporaryDirectory() as out:
        prefixes = tf_write(out)
        with open(os.path.join(out, "tf_prefixes.txt"), "w") as f:
            f.write("".join(p + "\n" for p in prefixes))
        subprocess.run(
            ["cargo", "test", "--lib", "--quiet", "tensorflow_interop_files"],
            check=True, env=dict(os.environ, XLAFN_TF_BUNDLE_DIR=out))

        def load(path):
            with open(path) as f:
                return json.load(f)

        compare("TensorFlow reads xlafn's bundle",
                load(os.path.join(out, "xlafn.json")),
                tf_read(os.path.join(out, "xlafn")))
        for p in prefixes:
            name = os.path.basename(p)
            theirs = tf_read(p)
            compare(f"xlafn reads TensorFlow's {name}", load(p + ".xlafn.json"), theirs)
            if theirs != tf_read(p + ".rewritten"):
                sys.exit(f"FAIL: xlafn's rewrite of {name} reads differently")
            print(f"ok: TensorFlow reads xlafn's rewrite of {name}")
            for suffix in [".index", ".data-00000-of-00001"]:
                same = same_bytes(p + suffix, p + ".rewritten" + suffix)
                print(f"{'ok' if same else '--'}: {name}{suffix} "
                      f"{'is' if same else 'is not'} byte-identical to xlafn's rewrite")
                if name == "savev2" and not same:
                    sys.exit("FAIL: SaveV2's bundle must be byte-identical")
        graph = tf.train.load_checkpoint(prefixes[1]).get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH")
        print(f"ok: the object graph is a {len(graph)}-byte string")


if __name__ == "__main__":
    main()
