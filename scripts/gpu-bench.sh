#!/usr/bin/env bash
# The GPU benchmark: the bench report's workloads (W1-W16 and DATA) timed
# on a CUDA GPU beside jax.jit (from the same numpy draws) and, where a
# workload has a PyTorch version (W3, W9, W13, W16), torch.compile, in one
# command, ending in one table of time ratios.
#
#   scripts/gpu-bench.sh build             here, with Rust: builds gpu-bench/
#                                          (the stripped release bench report
#                                          and the peers' scripts)
#   scripts/gpu-bench.sh run [DIR] [--only W1,W9,...] [--quick] [--cpu]
#                                          on the GPU machine (no Rust, no
#                                          network): runs gpu-bench/, prints
#                                          the table, writes it and every
#                                          side's JSON to DIR (default
#                                          gpu-bench/out)
#
# `run` finds the plugin as scripts/find-cuda-plugin.sh does and sets
# XLAFN_DEVICE=cuda; every side multiplies float32 in float32 (xlafn's
# XLAFN_DEFAULT_MATMUL_PRECISION=highest, JAX's
# JAX_DEFAULT_MATMUL_PRECISION=highest, torch's allow_tf32 off), so the
# sides do the same arithmetic. Without a GPU it stops with a clear error;
# `--cpu` runs the same steps on the CPU instead (a dry run of the scripts
# on a machine without one: xlafn on its CPU plugin, JAX and torch on the
# CPU). The peers run under $PYTHON (default python3), which needs jax,
# numpy and, for the PyTorch column, torch.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=gpu-bench
# What a device call carries in all (the working tree travels too).
carry_limit_bytes=$((64 * 1024 * 1024))

build() {
  scripts/setup.sh
  cargo build --release --example bench_report
  rm -rf "$dir" && mkdir -p "$dir/bench" "$dir/scripts"
  strip -o "$dir/bench_report" target/release/examples/bench_report
  cp bench/peers.py bench/peers_models.py bench/peers_torch.py bench/gpu_bench.py "$dir/bench/"
  cp scripts/peers_w16.py scripts/find-cuda-plugin.sh "$dir/scripts/"
  local bytes
  bytes="$(du -sb "$dir" | cut -f1)"
  echo "xlafn: built $dir/ ($((bytes / 1024 / 1024)) MiB)"
  if [ "$bytes" -ge "$carry_limit_bytes" ]; then
    echo "xlafn: $dir/ is over the 64 MiB a device call carries." >&2
    exit 1
  fi
  echo "xlafn: on the GPU machine run: scripts/gpu-bench.sh run [DIR] (carry $dir)"
}

run() {
  # Everything but DP, whose four devices are the CPU plugin's virtual
  # ones (one GPU has one).
  local out="$dir/out" only="W1,W2,W3,W4,W5,W6,W7,W8,W9,W10,W11,W12,W13,W14,W15,W16,DATA" quick="" cpu=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --only) only="$2"; shift 2 ;;
      --only=*) only="${1#--only=}"; shift ;;
      --quick) quick=--quick; shift ;;
      --cpu) cpu=--cpu; shift ;;
      -*) echo "xlafn: unknown option $1 (usage: scripts/gpu-bench.sh run [DIR] [--only W1,...] [--quick] [--cpu])" >&2; exit 2 ;;
      *) out="$1"; shift ;;
    esac
  done
  local exe="$dir/bench_report" py="${PYTHON:-python3}"
  if [ -z "$cpu" ]; then
    if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
      echo "xlafn: no NVIDIA GPU visible (nvidia-smi -L failed); the GPU benchmark needs one." >&2
      echo "  (scripts/gpu-bench.sh run --cpu runs the same steps on the CPU, to check the scripts.)" >&2
      exit 1
    fi
    export XLAFN_DEVICE=cuda
    XLAFN_CUDA_PLUGIN="$(scripts/find-cuda-plugin.sh)"
    export XLAFN_CUDA_PLUGIN
  fi
  [ -x "$exe" ] && [ -f "$dir/bench/gpu_bench.py" ] || {
    echo "xlafn: $exe is missing: run scripts/gpu-bench.sh build first (on a machine with Rust)." >&2
    exit 1
  }
  "$py" -c 'import jax, numpy' 2>/dev/null || {
    echo "xlafn: $py has no jax or numpy; the peers need them (set PYTHON to one that has)." >&2
    exit 1
  }
  export XLAFN_DEFAULT_MATMUL_PRECISION=highest PYTHONUNBUFFERED=1
  mkdir -p "$out"
  local began=$SECONDS gpu
  gpu="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -n 1 || true)"
  "$py" - "$out/machine.json" "${gpu:-none}" "${XLAFN_CUDA_PLUGIN:-cpu plugin}" <<'EOF'
import json, os, sys, time
json.dump({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "gpu": sys.argv[2],
           "plugin": os.path.basename(sys.argv[3]), "cpus": os.cpu_count()},
          open(sys.argv[1], "w"))
EOF
  echo "== xlafn (bench report)"
  local report_args=(--json "$out/xlafn.json")
  report_args+=(--only "$only")
  "$exe" "${report_args[@]}" 2>&1 | tee "$out/xlafn.txt" | grep -E '^(W[0-9]+|DATA|report took)' || true
  [ -f "$out/xlafn.json" ] || echo "xlafn: the bench report wrote no JSON (its output: $out/xlafn.txt)" >&2
  echo "== peers"
  "$py" "$dir/bench/gpu_bench.py" peers "$out" $cpu $quick "--only=$only"
  echo "== table ($((SECONDS - began)) s)"
  "$py" "$dir/bench/gpu_bench.py" table "$out"
}

case "${1:-}" in
  build) build ;;
  run) shift; run "$@" ;;
  *)
    echo "usage: scripts/gpu-bench.sh build | run [DIR] [--only W1,W9,...] [--quick] [--cpu]" >&2
    exit 2
    ;;
esac
