"""Writes the .npy/.npz fixtures of tests/tensor_files.rs with NumPy itself.

Usage: python scripts/npy_fixtures.py tests/data/npy
       python scripts/npy_fixtures.py --check DIR   (reads files xlafn wrote)

Needs numpy and ml_dtypes (for bfloat16). The fixtures are checked in so
that the Rust tests need no Python; `expected.json` holds what NumPy says
each file contains (dtype, shape, values in C order), so the tests compare
xlafn's reader against NumPy rather than against xlafn's own writer.
Complex values are [real, imaginary] pairs; values are exact in JSON
(floats print as the shortest text that round-trips).
"""

import io
import json
import os
import sys

import ml_dtypes
import numpy as np

BF16 = np.dtype(ml_dtypes.bfloat16)

# xlafn's dtype names -> NumPy dtypes.
DTYPES = {
    "bool": np.dtype(np.bool_),
    "i8": np.dtype(np.int8),
    "i16": np.dtype(np.int16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8),
    "u16": np.dtype(np.uint16),
    "u32": np.dtype(np.uint32),
    "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16),
    "bf16": BF16,
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "c64": np.dtype(np.complex64),
    "c128": np.dtype(np.complex128),
}


def values(name, dt):
    """Six values of `dt` that exercise its range and its sign."""
    if name == "bool":
        return [True, False, True, True, False, False]
    if dt.kind == "i":
        info = np.iinfo(dt)
        return [info.min, -1, 0, 1, info.max, 7]
    if dt.kind == "u":
        return [0, 1, 2, 3, np.iinfo(dt).max, 7]
    if dt.kind == "c":
        return [1 + 2j, -0.5j, 3, -1.25 - 4j, 0.1 + 0.2j, 1e30j]
    return [-1.5, 0.0, 0.25, 3.140625, 1000.5, -7.0]


def flat(a):
    """The values of `a` in C order, as JSON can hold them."""
    out = []
    for v in a.reshape(-1).tolist():
        if isinstance(v, complex):
            out.append([v.real, v.imag])
        else:
            out.append(float(v) if a.dtype == BF16 else v)
    return out


def describe(name, a):
    return {"dtype": name, "shape": list(a.shape), "values": flat(np.ascontiguousarray(a))}


def save(folder, file, a, version=None):
    with open(os.path.join(folder, file), "wb") as f:
        if version is None:
            np.save(f, a)
        else:
            np.lib.format.write_array(f, a, version=version)


def write(folder):
    expected = {}
    for name, dt in DTYPES.items():
        a = np.array(values(name, dt), dtype=dt).reshape(2, 3)
        variants = {"le": a, "f": np.asfortranarray(a)}
        if dt.itemsize > 1:
            be = a.astype(dt.newbyteorder(">"))
            variants["be"] = be
            variants["be_f"] = np.asfortranarray(be)
        for tag, v in variants.items():
            save(folder, f"{name}_{tag}.npy", v)
            # The values of `a`: NumPy converts byte orders on read, but
            # ml_dtypes reads a big-endian bf16 without swapping.
            expected[f"{name}_{tag}.npy"] = describe(name, a)
    cube = np.asfortranarray(np.arange(24, dtype=np.float32).reshape(2, 3, 4) * 0.5)
    extra = {
        "f32_cube_f.npy": ("f32", cube, None),
        "f64_scalar.npy": ("f64", np.array(2.5), None),
        "i32_empty_0x3.npy": ("i32", np.zeros((0, 3), np.int32), None),
        "f32_empty_2x0_f.npy": ("f32", np.asfortranarray(np.zeros((2, 0), np.float32)), None),
        "f32_v2.npy": ("f32", np.array([1.0, -2.0], np.float32), (2, 0)),
        "f32_v3.npy": ("f32", np.array([[3.5], [4.5]], np.float32), (3, 0)),
    }
    for file, (name, a, version) in extra.items():
        save(folder, file, a, version)
        expected[file] = describe(name, a)
    arrays = {
        "x": np.array([[1.0, 2.0], [3.0, 4.0]], np.float32),
        "n": np.array(7, np.int64),
        "bf": np.array([0.5, -3.0], BF16),
        "z": np.array([1 - 1j], np.complex128),
    }
    with open(os.path.join(folder, "several.npz"), "wb") as f:
        np.savez(f, **arrays)
    with open(os.path.join(folder, "several_compressed.npz"), "wb") as f:
        np.savez_compressed(f, **arrays)
    names = {"x": "f32", "n": "i64", "bf": "bf16", "z": "c128"}
    content = {k: describe(names[k], v) for k, v in arrays.items()}
    expected["several.npz"] = content
    expected["several_compressed.npz"] = content
    with open(os.path.join(folder, "expected.json"), "w") as f:
        # One file per line, so a diff names the fixture that changed.
        lines = [f" {json.dumps(k)}: {json.dumps(v)}" for k, v in sorted(expected.items())]
        f.write("{\n" + ",\n".join(lines) + "\n}\n")


def check(folder):
    """Loads every file xlafn wrote into `folder` and prints what NumPy sees."""
    for file in sorted(os.listdir(folder)):
        path = os.path.join(folder, file)
        if file.endswith(".npy"):
            a = np.load(path)
            print(file, a.dtype, a.shape, flat(a))
        elif file.endswith(".npz"):
            with np.load(path) as z:
                for k in z.files:
                    print(file, k, z[k].dtype, z[k].shape, flat(z[k]))


if __name__ == "__main__":
    if sys.argv[1] == "--check":
        check(sys.argv[2])
    else:
        write(sys.argv[1])
