#!/usr/bin/env bash
# Prints the path of the CUDA PJRT plugin xlafn's GPU scripts use, first
# found first used:
#   1. XLAFN_CUDA_PLUGIN, if set (it must name a file);
#   2. an installed jax-cuda13-pjrt (jax_plugins/xla_cuda13), loaded in
#      place so that its RPATH finds the pip CUDA libraries beside it;
#   3. the pinned jax-cuda13-pjrt that `xlafn fetch --cuda` put into
#      xlafn's cache with its CUDA libraries (not fetched here).
# Exits 1 with a message naming what to do when none is found.
set -euo pipefail

if [ -n "${XLAFN_CUDA_PLUGIN:-}" ]; then
  if [ ! -f "$XLAFN_CUDA_PLUGIN" ]; then
    echo "xlafn: XLAFN_CUDA_PLUGIN=$XLAFN_CUDA_PLUGIN is not a file." >&2
    exit 1
  fi
  echo "$XLAFN_CUDA_PLUGIN"
  exit 0
fi
for py in python3 /opt/torch/.venv/bin/python3; do
  command -v "$py" >/dev/null 2>&1 || continue
  found="$("$py" -c 'import os, jax_plugins.xla_cuda13 as m; print(os.path.join(os.path.dirname(m.__file__), "xla_cuda_plugin.so"))' 2>/dev/null || true)"
  if [ -n "$found" ] && [ -f "$found" ]; then
    echo "$found"
    exit 0
  fi
done
cache="${XDG_CACHE_HOME:-${HOME:-/nonexistent}/.cache}/xlafn"
pinned="$cache/jax-cuda13-pjrt-0.12.0.1/jax_plugins/xla_cuda13/xla_cuda_plugin.so"
if [ -f "$pinned" ]; then
  echo "$pinned"
  exit 0
fi
echo "xlafn: no CUDA PJRT plugin found: set XLAFN_CUDA_PLUGIN to one, install jax-cuda13-pjrt, or run \`xlafn fetch --cuda\`." >&2
exit 1
