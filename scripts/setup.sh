#!/usr/bin/env bash
# One-time (idempotent) machine setup for building xlafn on Debian:
# - python3 with pip, which build.rs uses to fetch the pinned XLA plugin wheel;
# - libclang (libclang-dev), only when XLAFN_PJRT_PLUGIN names another plugin:
#   bindgen (xlafn's `bindgen` feature) then reads that plugin's PJRT
#   header. The pinned wheel's bindings ship pre-generated in third_party/
#   and need no libclang.
# The plugin itself is fetched, verified and cached by build.rs on first build.
set -euo pipefail

have_libclang() {
  [ -n "${LIBCLANG_PATH:-}" ] && return 0
  # libclang.so / libclang-14.so.1, not libclang-cpp (a different library
  # that other packages bring along, which bindgen cannot use).
  local found
  for found in /usr/lib/llvm-*/lib/libclang.so* /usr/lib/llvm-*/lib/libclang-[0-9]*.so* \
    /usr/lib/*-linux-gnu/libclang.so* /usr/lib/*-linux-gnu/libclang-[0-9]*.so*; do
    [ -e "$found" ] && return 0
  done
  return 1
}

if [ -n "${XLAFN_PJRT_PLUGIN:-}" ] && ! have_libclang; then
  echo "xlafn setup: libclang not found (needed for XLAFN_PJRT_PLUGIN's header); installing Debian's libclang-dev" >&2
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "xlafn setup: cannot install it here (needs root and apt-get)." >&2
    echo "  Install libclang-dev yourself, or set LIBCLANG_PATH to a folder with libclang.so." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq libclang-dev >/dev/null
fi

if [ -z "${XLAFN_PJRT_PLUGIN:-}" ] && ! python3 -m pip --version >/dev/null 2>&1; then
  echo "xlafn setup: python3 -m pip is missing; build.rs needs it to fetch the XLA plugin." >&2
  echo "  Install it (Debian: apt-get install python3-pip), or set XLAFN_PJRT_PLUGIN to a plugin .so." >&2
  exit 1
fi
