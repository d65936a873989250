#!/usr/bin/env bash
# Runs the whole test suite on a CUDA GPU: the default client
# is the CUDA plugin, and the tests that need the CPU plugin (host
# callbacks, its 4 devices) are reported as ignored with their reason.
#
# The plugin: as scripts/find-cuda-plugin.sh finds it, else the pinned one
# `xlafn fetch --cuda` fetches with its CUDA libraries.
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

if [ -n "${XLAFN_CUDA_PLUGIN:-}" ]; then
  plugin="$(scripts/find-cuda-plugin.sh)"
else
  plugin="$(scripts/find-cuda-plugin.sh 2>/dev/null)" ||
    plugin="$(cargo run -q --release --bin xlafn -- fetch --cuda)"
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
# f32 products in f32, not TF32, so the tests' f32 references apply.
export XLAFN_DEFAULT_MATMUL_PRECISION="${XLAFN_DEFAULT_MATMUL_PRECISION:-highest}"
# Bitwise-repeatable runs (the resume tests compare bit for bit): XLA's
# CUDA reductions may otherwise use atomics.
export XLAFN_XLA_FLAGS="${XLAFN_XLA_FLAGS:-xla_gpu_exclude_nondeterministic_ops=true}"
cargo test --no-fail-fast "$@"
