#!/usr/bin/env python3
"""Rewrites the pins of a `third_party/*.sha256` file from its own
`# requirements:` lines.

A pin file is what `runtime::plugin_store` compiles in: comment lines
(`#`) saying why these versions, then one `sha256  file name` line per
wheel and platform (Linux x86_64 and aarch64). This script keeps the
comments, asks the package index (through pip, so the user's index,
proxy and certificates apply) which wheel each `name==version` names for
each platform, with its sha256, and writes the lines below them. Nothing
is downloaded: the digests come from pip's resolution report.

    scripts/pin-wheels.py third_party/jax-cuda13-runtime.sha256
"""

import json
import subprocess
import sys
import tempfile

# Every manylinux tag the wheels xlafn pins are published under; pip is
# given all of them so it picks the one wheel a version has per machine.
TAGS = ["manylinux_2_{}".format(m) for m in range(17, 36)] + ["manylinux2014"]
ARCHES = ["x86_64", "aarch64"]


def requirements(lines):
    reqs = []
    for line in lines:
        if line.startswith("# requirements:"):
            reqs += line.split(":", 1)[1].split()
    return reqs


def pins_for(arch, reqs):
    command = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed",
               "--no-deps", "--quiet", "--report", "-", "--only-binary=:all:",
               "--python-version", "3.12"]
    for tag in TAGS:
        command += ["--platform", "{}_{}".format(tag, arch)]
    with tempfile.TemporaryDirectory() as target:
        command += ["--target", target] + reqs
        report = json.loads(subprocess.run(command, check=True, capture_output=True,
                                           text=True).stdout)
    lines = []
    for item in report["install"]:
        info = item["download_info"]
        name = info["url"].rsplit("/", 1)[1]
        lines.append("{}  {}".format(info["archive_info"]["hashes"]["sha256"], name))
    if len(lines) != len(reqs):
        sys.exit("pin-wheels: {} wheels for {} requirements on {}".format(
            len(lines), len(reqs), arch))
    return lines


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    path = sys.argv[1]
    with open(path) as f:
        lines = f.read().splitlines()
    comments = [l for l in lines if l.startswith("#")]
    reqs = requirements(comments)
    if not reqs:
        sys.exit("pin-wheels: {} has no '# requirements:' line".format(path))
    body = []
    for arch in ARCHES:
        body += pins_for(arch, reqs)
    with open(path, "w") as f:
        f.write("\n".join(comments + body) + "\n")
    print("pin-wheels: {} wheels pinned in {}".format(len(body), path))


if __name__ == "__main__":
    main()
