#!/usr/bin/env bash
# The GPU check: a chosen part of the suite (tests/gpu_check.rs: device
# paths, the guide's basics, control flow, op families, gradients, the
# real-model steps W9-W12, optimizers and checkpoints, an export round
# trip through the `xlafn` tool, sharding over the GPU's devices) run on a
# CUDA GPU in one command, ending in a pass/fail table.
#
#   scripts/gpu-check.sh build        here, with Rust: builds gpu-check/
#                                     (the test binary and the xlafn tool,
#                                     stripped, about 60 MB in all)
#   scripts/gpu-check.sh run [DIR]    on the GPU machine (no Rust needed):
#                                     runs gpu-check/, prints the table,
#                                     writes table.txt and gpu-check.log
#                                     to DIR (default gpu-check/out)
#
# `run` finds the plugin as scripts/find-cuda-plugin.sh does, sets
# XLAFN_DEVICE=cuda (every test's default device is the GPU),
# XLAFN_DEFAULT_MATMUL_PRECISION=highest (f32 products in f32, not TF32,
# so the tests' f32 references apply) and, unless XLAFN_XLA_FLAGS is set,
# xla_gpu_exclude_nondeterministic_ops=true (bitwise-repeatable runs), and
# runs one process per test
# module, all at once, each under a time limit: a crash or a hang costs
# one row of the table, not the run. It exits 0 only if every row passed.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=gpu-check
module_limit_s="${XLAFN_GPU_CHECK_MODULE_LIMIT_S:-300}"
# Modules run at once: each is a process with its own CUDA context and
# compiles on its own threads.
parallel="${XLAFN_GPU_CHECK_PARALLEL:-8}"

build() {
  scripts/setup.sh
  # The cfg flags: xlafn_gpu_check fills tests/gpu_check.rs, and
  # xlafn_device_cuda marks the CPU-plugin-only tests ignored.
  export XLAFN_GPU_CHECK=1 XLAFN_DEVICE=cuda
  unset XLAFN_CUDA_PLUGIN
  cargo build --release --bin xlafn
  local listing exe
  listing="$(cargo test --release --test gpu_check --no-run 2>&1)" || {
    echo "$listing" >&2
    exit 1
  }
  exe="$(echo "$listing" | sed -n 's/.*Executable tests\/gpu_check.rs (\(.*\))/\1/p' | tail -n 1)"
  [ -n "$exe" ] && [ -f "$exe" ] || {
    echo "$listing" >&2
    echo "xlafn: cargo did not name the gpu_check test binary." >&2
    exit 1
  }
  rm -rf "$dir" && mkdir -p "$dir"
  strip -o "$dir/xlafn-gpu-check" "$exe"
  strip -o "$dir/xlafn" target/release/xlafn
  du -ch "$dir"/* | tail -n 1
  echo "xlafn: built $dir/; on the GPU machine run: scripts/gpu-check.sh run [DIR] (carry $dir)"
}

# Runs the tests of module $1 in a process of their own, under the time
# limit; leaves its output, exit status and seconds in $logs.
run_module() {
  local m="$1" began=$SECONDS other skips=()
  # The filter matches anywhere in a test's path: `export::` also matches
  # `robust_export::...`, so such modules are skipped here.
  for other in $modules; do
    [ "$other" != "$m" ] && [[ "$other" == *"$m" ]] && skips+=(--skip "$other::")
  done
  timeout -k 10 "$module_limit_s" "$exe" "$m::" "${skips[@]}" --test-threads=4 --show-output >"$logs/m-$m.log" 2>&1
  echo $? >"$logs/m-$m.rc"
  echo $((SECONDS - began)) >"$logs/m-$m.secs"
}

run() {
  local out="${1:-$dir/out}"
  exe="$dir/xlafn-gpu-check"
  [ -x "$exe" ] && [ -x "$dir/xlafn" ] || {
    echo "xlafn: $exe is missing: run scripts/gpu-check.sh build first (on a machine with Rust)." >&2
    exit 1
  }
  if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L >/dev/null 2>&1; then
    echo "xlafn: no NVIDIA GPU visible (nvidia-smi -L failed); the GPU check needs one." >&2
    exit 1
  fi
  local plugin
  plugin="$(scripts/find-cuda-plugin.sh)"
  mkdir -p "$out"
  logs="$(mktemp -d)"
  {
    echo "date: $(date -u +%FT%TZ)"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | sed 's/^/gpu: /'
    echo "ptxas: $(command -v ptxas || ls /usr/local/cuda/bin/ptxas 2>/dev/null || echo 'not found')"
  } | tee "$logs/0-machine.log"

  export XLAFN_DEVICE=cuda XLAFN_CUDA_PLUGIN="$plugin" XLAFN_TEST_CLI="$PWD/$dir/xlafn"
  export XLAFN_DEFAULT_MATMUL_PRECISION=highest RUST_BACKTRACE=1
  # XLA's CUDA reductions may use atomics, so two runs can differ in the
  # last bits; the resume tests compare bit for bit (H200: 1-4 ULP apart
  # without this flag, equal in 3 of 3 runs with it).
  export XLAFN_XLA_FLAGS="${XLAFN_XLA_FLAGS:-xla_gpu_exclude_nondeterministic_ops=true}"
  timeout 120 "$exe" report --exact --nocapture --test-threads=1 >"$logs/1-report.log" 2>&1 || true
  grep -E '^(plugin|PJRT C API|platform|device):' "$logs/1-report.log" || cat "$logs/1-report.log"

  local modules
  modules="$("$exe" --list 2>/dev/null | sed -n 's/^\([a-z_0-9]*\)::.*: test$/\1/p' | sort -u)"
  # XLAFN_GPU_CHECK_ONLY="a b": run only these modules (a short check of
  # new files when device time is scarce).
  if [ -n "${XLAFN_GPU_CHECK_ONLY:-}" ]; then
    modules="$(printf '%s\n' $modules | grep -Fx -f <(printf '%s\n' $XLAFN_GPU_CHECK_ONLY) || true)"
  fi
  local start=$SECONDS
  export exe logs module_limit_s modules
  export -f run_module
  printf '%s\n' $modules | xargs -P "$parallel" -I{} bash -c 'run_module {}'
  local elapsed=$((SECONDS - start))

  local table="$logs/table.txt" failed=0
  printf '%-26s %-9s %6s %6s %7s %5s\n' module result passed failed ignored secs >"$table"
  for m in $modules; do
    local rc summary passed=0 nfail=0 ignored=0 result
    rc="$(cat "$logs/m-$m.rc")"
    summary="$(grep -E '^test result:' "$logs/m-$m.log" | tail -n 1 || true)"
    if [ -n "$summary" ]; then
      passed="$(echo "$summary" | sed -n 's/.* \([0-9]*\) passed.*/\1/p')"
      nfail="$(echo "$summary" | sed -n 's/.* \([0-9]*\) failed.*/\1/p')"
      ignored="$(echo "$summary" | sed -n 's/.* \([0-9]*\) ignored.*/\1/p')"
    fi
    case "$rc" in
      0) result=pass ;;
      124 | 137) result=TIMEOUT ;;
      *) [ -n "$summary" ] && result=FAIL || result="CRASH($rc)" ;;
    esac
    [ "$rc" = 0 ] || failed=1
    printf '%-26s %-9s %6s %6s %7s %5s\n' "$m" "$result" "$passed" "$nfail" "$ignored" \
      "$(cat "$logs/m-$m.secs")" >>"$table"
  done
  {
    echo
    echo "failing tests (the first 80; all of them in the log):"
    grep -hE '^test .* \.\.\. FAILED$' "$logs"/m-*.log | sed 's/^test /  /; s/ \.\.\. FAILED$//' | head -n 80 || true
    echo
    echo "skipped (each test that passed without running says why):"
    for m in $modules; do
      grep -hoE 'skipped: .*' "$logs/m-$m.log" | sort -u | sed "s/^/  $m: /" || true
    done
  } >>"$table"

  for f in "$logs"/0-machine.log "$logs"/1-report.log "$logs"/m-*.log; do
    echo "===== $(basename "$f")"
    cat "$f"
  done >"$out/gpu-check.log"
  cp "$table" "$out/table.txt"
  echo
  echo "GPU check, $elapsed s (logs: $out/gpu-check.log)"
  cat "$table"
  rm -rf "$logs"
  return "$failed"
}

case "${1:-}" in
  build) build ;;
  run) run "${2:-}" ;;
  *)
    echo "usage: scripts/gpu-check.sh build | run [DIR]" >&2
    exit 2
    ;;
esac
