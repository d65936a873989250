#!/usr/bin/env bash
# Fetches a CUDA PJRT plugin of the pinned CPU wheel's release family
# (PJRT C API 0.81, the API xlafn's bindings are generated from), checks it
# against its sha256 in third_party/ and unpacks it into xlafn's cache,
# where `XLAFN_DEVICE=cuda` finds it when XLAFN_CUDA_PLUGIN is not set.
# Idempotent. Linux x86_64 and aarch64 only (the wheels exist for those).
#
#   --cuda 13      xla-cuda13-pjrt 0.0.1 (the default; CUDA 13.0, driver 580+)
#   --cuda 12      xla-cuda12-pjrt 0.0.1 (CUDA 12.9, driver 575+)
#   --with-runtime also installs the CUDA libraries the plugin links against
#                  (pinned NVIDIA wheels, third_party/xla-cuda1N-runtime.txt,
#                  verified by pip with --require-hashes) into the plugin's
#                  own folder, where its built-in library path (DT_RUNPATH
#                  $ORIGIN/../../nvidia/...) finds them: no LD_LIBRARY_PATH.
#
# The plugin links the CUDA libraries directly, so it cannot even be loaded
# without them: fetch with --with-runtime before using it. The driver
# libraries (libcuda.so.1, libcuda.so, libnvidia-ptxjitcompiler.so.1) must
# come from the machine.
set -euo pipefail

here="$(cd "$(dirname "$0")/.." && pwd)"
cache="${XDG_CACHE_HOME:-${HOME:?set HOME or XDG_CACHE_HOME}/.cache}/xlafn"

cuda=13
with_runtime=0
while [ $# -gt 0 ]; do
  case "$1" in
    --with-runtime) with_runtime=1 ;;
    --cuda) cuda="${2:-}"; shift ;;
    --cuda=*) cuda="${1#--cuda=}" ;;
    -h|--help) sed -n '2,/^set -e/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "xlafn: unknown argument $1 (see $0 --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$cuda" in
  12|13) ;;
  *) echo "xlafn: --cuda takes 12 or 13, not '$cuda'" >&2; exit 2 ;;
esac
case "$(uname -s)/$(uname -m)" in
  Linux/x86_64|Linux/aarch64) ;;
  *)
    echo "xlafn: the xla-cuda$cuda-pjrt wheels exist only for Linux x86_64 and aarch64, not $(uname -s)/$(uname -m); set XLAFN_CUDA_PLUGIN to a CUDA PJRT plugin built for this machine." >&2
    exit 1
    ;;
esac

name="xla-cuda$cuda-pjrt"
entry="$cache/$name-0.0.1"
plugin="$entry/xla_plugins/xla_cuda${cuda}_pjrt/xla_gpu_pjrt.so"
pin="$here/third_party/$name.sha256"
runtime_pins="$here/third_party/xla-cuda$cuda-runtime.txt"

command -v python3 >/dev/null && python3 -m pip --version >/dev/null 2>&1 || {
  echo "xlafn: python3 -m pip is needed to fetch the CUDA plugin (Debian: apt-get install python3-pip)." >&2
  exit 1
}

if [ ! -f "$plugin" ]; then
  # The unpack goes to a folder beside the entry, renamed into place once
  # whole, so an interrupted fetch leaves no half-filled entry.
  mkdir -p "$cache"
  work="$(mktemp -d "$cache/partial.XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  python3 -m pip download --no-deps --disable-pip-version-check -q -d "$work" "$name==0.0.1"
  wheel="$(ls "$work"/*.whl)"
  # The exact `sha256  file name` line must be in the pin file: the digest
  # and the wheel's platform are checked together.
  line="$(cd "$work" && sha256sum "$(basename "$wheel")")"
  grep -qxF "$line" "$pin" || {
    echo "xlafn: the downloaded $(basename "$wheel") (sha256 ${line%% *}) is not pinned in $pin; refusing it." >&2
    exit 1
  }
  mkdir -p "$work/unpacked"
  python3 -m zipfile -e "$wheel" "$work/unpacked"
  rm -rf "$entry"
  mv "$work/unpacked" "$entry"
fi
echo "xlafn: CUDA plugin at $plugin"

if [ "$with_runtime" = 1 ]; then
  # pip --target skips folders that already exist, so the wheels go into a
  # fresh folder first and replace the plugin's nvidia/ as a whole; a stamp
  # holding the pin file's digest makes a second run a no-op.
  stamp="$entry/nvidia/.xlafn-runtime.sha256"
  want="$(sha256sum <"$runtime_pins" | cut -d' ' -f1)"
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    libs="$(mktemp -d "$entry/runtime.XXXXXX")"
    trap 'rm -rf "$libs" "${work:-}"' EXIT
    PIP_ROOT_USER_ACTION=ignore python3 -m pip install --disable-pip-version-check -q --no-cache-dir --no-deps --only-binary=:all: \
      --require-hashes -r "$runtime_pins" --target "$libs"
    rm -rf "$entry/nvidia" "$entry"/nvidia_*.dist-info
    mv "$libs"/nvidia "$libs"/nvidia_*.dist-info "$entry"/
    echo "$want" >"$stamp"
  fi
  echo "xlafn: CUDA $cuda libraries (third_party/xla-cuda$cuda-runtime.txt) in $entry/nvidia"
  # The driver's libraries: the plugin also needs the unversioned
  # libcuda.so, which only a driver's development files provide. When
  # the loader knows libcuda.so.1 but not libcuda.so, a link beside the
  # CUDA libraries (on the plugin's DT_RUNPATH) stands in for it.
  known="$( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null || true) | awk '{print $1}')"
  libdir="$entry/nvidia/$([ "$cuda" = 13 ] && echo cu13 || echo cuda_runtime)/lib"
  for lib in libcuda.so.1 libnvidia-ptxjitcompiler.so.1; do
    grep -qxF "$lib" <<<"$known" ||
      echo "xlafn: $lib (from the NVIDIA driver) is not known to the loader; the plugin will not load without it." >&2
  done
  if ! grep -qxF libcuda.so <<<"$known" && [ ! -e "$libdir/libcuda.so" ]; then
    driver="$( (/sbin/ldconfig -p 2>/dev/null || ldconfig -p 2>/dev/null || true) | awk '$1 == "libcuda.so.1" {print $NF; exit}')"
    if [ -n "$driver" ]; then
      ln -s "$driver" "$libdir/libcuda.so"
      echo "xlafn: linked $libdir/libcuda.so -> $driver (the driver ships only libcuda.so.1)"
    fi
  fi
else
  echo "  The plugin loads only with its CUDA $cuda libraries: add --with-runtime to install them."
fi
if [ "$cuda" = 13 ]; then
  echo "  XLAFN_DEVICE=cuda (XLAFN_CUDA_PLUGIN=$plugin is found without being set)"
else
  echo "  XLAFN_DEVICE=cuda XLAFN_CUDA_PLUGIN=$plugin (found without being set when no CUDA 13 plugin is fetched)"
fi
