#!/usr/bin/env bash
# Fetches the CUDA PJRT plugin of the pinned CPU wheel's release family
# (xla-cuda13-pjrt 0.0.1, PJRT C API 0.81, the API xlafn's bindings are
# generated from), checks it against third_party/xla-cuda13-pjrt.sha256 and
# unpacks it into xlafn's cache, where `XLAFN_DEVICE=cuda` finds it when
# XLAFN_CUDA_PLUGIN is not set. Idempotent.
#
# With --with-runtime it also installs the CUDA 13 libraries the plugin
# links against (the NVIDIA pip wheels, several GB) into the cache and
# prints the LD_LIBRARY_PATH to use. The GPU driver (libcuda.so.1) must come
# from the machine.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-${HOME:?set HOME or XDG_CACHE_HOME}/.cache}/xlafn"
entry="$cache/xla-cuda13-pjrt-0.0.1"
plugin="$entry/xla_plugins/xla_cuda13_pjrt/xla_gpu_pjrt.so"
pin="$here/third_party/xla-cuda13-pjrt.sha256"

if [ ! -f "$plugin" ]; then
  command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || {
    echo "xlafn: python3 -m pip is needed to fetch the CUDA plugin (Debian: apt-get install python3-pip)." >&2
    exit 1
  }
  # The unpack goes to a folder beside the entry, renamed into place once
  # whole, so an interrupted fetch leaves no half-filled entry.
  mkdir -p "$cache"
  work="$(mktemp -d "$cache/partial.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --no-deps --disable-pip-version-check -q -d "$work" xla-cuda13-pjrt==0.0.1
  (cd "$work" && sha256sum -c "$pin") >/dev/null || {
    echo "xlafn: the downloaded xla-cuda13-pjrt wheel does not match $pin; refusing it." >&2
    exit 1
  }
  mkdir -p "$work/unpacked"
  python3 -m zipfile -e "$work"/xla_cuda13_pjrt-0.0.1-*.whl "$work/unpacked"
  rm -rf "$entry"
  mv "$work/unpacked" "$entry"
fi
echo "xlafn: CUDA plugin at $plugin"

if [ "${1:-}" = "--with-runtime" ]; then
  libs="$cache/nvidia-cu13"
  python3 -m pip install --disable-pip-version-check -q --target "$libs" \
    nvidia-cuda-runtime nvidia-cublas nvidia-cufft nvidia-cuda-cupti nvidia-cuda-nvrtc \
    nvidia-cudnn-cu13 nvidia-nccl-cu13
  echo "xlafn: CUDA libraries in $libs; run with"
  echo "  LD_LIBRARY_PATH=$libs/nvidia/cu13/lib:$libs/nvidia/cudnn/lib:$libs/nvidia/nccl/lib"
fi
echo "  XLAFN_DEVICE=cuda (XLAFN_CUDA_PLUGIN=$plugin is found without being set)"
