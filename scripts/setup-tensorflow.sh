#!/usr/bin/env bash
# Sets up the TensorFlow that tests/saved_model.rs checks xlafn's
# SavedModels against: a virtual environment with the pinned
# tensorflow-cpu (about 600 MB), at $XLAFN_TENSORFLOW_VENV (default
# ~/.cache/xlafn/tensorflow-venv). Idempotent: an environment that already
# has the pinned version is left as it is. Prints the environment's python.
#
# The tests find it there, or at $XLAFN_TENSORFLOW_PYTHON; without it they
# say they were skipped. Not part of scripts/setup.sh: the suite runs
# without TensorFlow.
set -euo pipefail
version=2.21.0
venv="${XLAFN_TENSORFLOW_VENV:-$HOME/.cache/xlafn/tensorflow-venv}"
python="$venv/bin/python"
have() {
  [ -x "$python" ] && "$python" -c "import importlib.metadata as m, sys; sys.exit(m.version('tensorflow-cpu') != '$version')" 2>/dev/null
}
if ! have; then
  command -v python3 >/dev/null || {
    echo "xlafn: python3 is needed to set up TensorFlow" >&2
    exit 1
  }
  [ -x "$python" ] || python3 -m venv "$venv" || {
    echo "xlafn: python3 -m venv failed (on Debian: apt-get install python3-venv)" >&2
    exit 1
  }
  "$python" -m pip install --quiet "tensorflow-cpu==$version" || {
    echo "xlafn: pip could not install tensorflow-cpu==$version (no network?)" >&2
    exit 1
  }
  have || {
    echo "xlafn: $venv does not hold tensorflow-cpu $version after installing it" >&2
    exit 1
  }
fi
echo "$python"
