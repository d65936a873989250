#!/usr/bin/env bash
# Runs the whole test suite on a CUDA GPU (#18 item 6): the default client
# is the CUDA plugin, and the tests that need the CPU plugin (host
# callbacks, its 4 devices) are reported as ignored with their reason.
#
# The plugin, first found first used:
#   1. XLAFN_CUDA_PLUGIN, if set;
#   2. an installed jax-cuda13-pjrt (jax_plugins/xla_cuda13), loaded in
#      place so that its RPATH finds the pip CUDA libraries beside it;
#   3. the pinned xla-cuda13-pjrt that scripts/fetch-cuda-plugin.sh puts
#      into xlafn's cache.
# Extra arguments go to `cargo test` (e.g. `--test sharding`).
#
# Written without a GPU at hand: the first run on a GPU machine is also
# the first check of this script.
set -euo pipefail
cd "$(dirname "$0")/.."

if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
  echo "xlafn: no NVIDIA GPU visible (nvidia-smi -L failed); the CUDA suite needs one." >&2
  exit 1
fi
nvidia-smi -L

plugin="${XLAFN_CUDA_PLUGIN:-}"
if [ -z "$plugin" ]; then
  for py in python3 /opt/torch/.venv/bin/python; do
    command -v "$py" >/dev/null 2>&1 || continue
    found="$("$py" -c 'import os, jax_plugins.xla_cuda13 as m; print(os.path.join(os.path.dirname(m.__file__), "xla_cuda_plugin.so"))' 2>/dev/null || true)"
    if [ -n "$found" ] && [ -f "$found" ]; then
      plugin="$found"
      break
    fi
  done
fi
if [ -z "$plugin" ]; then
  plugin="$(scripts/fetch-cuda-plugin.sh | sed -n 's/^xlafn: CUDA plugin at //p')"
fi
if [ -z "$plugin" ] || [ ! -f "$plugin" ]; then
  echo "xlafn: no CUDA PJRT plugin found; set XLAFN_CUDA_PLUGIN to one." >&2
  exit 1
fi
echo "xlafn: CUDA plugin $plugin"

scripts/setup.sh
# The build reads XLAFN_DEVICE (cfg xlafn_device_cuda marks the CPU-only
# tests ignored) and XLAFN_CUDA_PLUGIN (the device_tests! CUDA variants
# run instead of being ignored).
export XLAFN_DEVICE=cuda XLAFN_CUDA_PLUGIN="$plugin"
cargo test --no-fail-fast "$@"
