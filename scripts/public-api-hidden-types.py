#!/usr/bin/env python3
"""Lists public signatures that name a type users cannot see in the docs.

The crate keeps its internals (`ir`, `ops`, `trace`, `lower`, `autograph`)
in `#[doc(hidden)]` modules; a visible function, field or impl that names a
type from them which is not re-exported somewhere visible leaves the reader
with an unlinked name. Needs a nightly toolchain (rustdoc's JSON output):

    cargo +nightly rustdoc --lib -- -Z unstable-options --output-format json
    python3 scripts/public-api-hidden-types.py target/doc/xlafn.json

Prints one line per hidden type with the items that name it; exits 1 when
there is any.
"""
import json
import sys


def main(path):
    doc = json.load(open(path))
    index, paths = doc["index"], doc["paths"]
    reexported = {
        str(item["inner"]["use"]["id"])
        for item in index.values()
        if "use" in item["inner"] and item["inner"]["use"].get("id") is not None
    }
    owner_of = {}
    for item in index.values():
        impl = item["inner"].get("impl")
        if impl:
            target = impl.get("for", {}).get("resolved_path", {}).get("path", "?")
            for child in impl["items"]:
                owner_of[str(child)] = target
    found = {}

    def walk(node, owner):
        if isinstance(node, dict):
            ref = node.get("resolved_path")
            if isinstance(ref, dict):
                id_ = str(ref.get("id"))
                if id_ not in index and id_ not in paths and id_ not in reexported:
                    found.setdefault(ref.get("path"), set()).add(owner)
            for value in node.values():
                walk(value, owner)
        elif isinstance(node, list):
            for value in node:
                walk(value, owner)

    for id_, item in index.items():
        if item.get("crate_id") != 0:
            continue
        kind = next(iter(item["inner"]))
        if kind == "module":
            continue
        if kind == "impl":
            header = {k: v for k, v in item["inner"]["impl"].items() if k != "items"}
            walk(header, "impl")
            continue
        walk(item["inner"], f"{owner_of.get(id_, '')}::{item.get('name')}")
    for type_path, owners in sorted(found.items()):
        print(f"{type_path}: {', '.join(sorted(owners))}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "target/doc/xlafn.json"))
