#!/usr/bin/env bash
# One-time (idempotent) machine setup for xlafn's guided tour and test
# suite on Debian. Building needs none of it (the PJRT bindings ship in
# third_party/, the plugin is found at run time):
# - python3 with pip, with which the first run fetches the pinned XLA CPU
#   plugin wheel into xlafn's cache (runtime::plugin_store verifies and
#   unpacks it), and which tests/plugin_fetch.rs drives against a
#   loopback index;
# - libclang (libclang-dev), only when XLAFN_PJRT_HEADER names another
#   plugin's header: bindgen (xlafn's `bindgen` feature) then reads it;
# - etcd (etcd-server), which tests/distributed_etcd.rs starts on loopback
#   to test the etcd coordination store; where it cannot be installed
#   those tests say `skipped:` and pass.
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

if [ -n "${XLAFN_PJRT_HEADER:-}" ] && ! have_libclang; then
  echo "xlafn setup: libclang not found (bindgen needs it for XLAFN_PJRT_HEADER); installing Debian's libclang-dev" >&2
  if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    echo "xlafn setup: cannot install it here (needs root and apt-get)." >&2
    echo "  Install libclang-dev yourself, or set LIBCLANG_PATH to a folder with libclang.so." >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq libclang-dev >/dev/null
fi

if ! command -v etcd >/dev/null 2>&1 && [ -z "${XLAFN_TEST_ETCD:-}" ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "xlafn setup: installing Debian's etcd-server (for the etcd store's tests)" >&2
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq etcd-server; } >/dev/null 2>&1 ||
      echo "xlafn setup: could not install etcd-server; the etcd store's tests will be skipped" >&2
  else
    echo "xlafn setup: no etcd (needs root and apt-get to install etcd-server); the etcd store's tests will be skipped" >&2
  fi
fi

if ! python3 -m pip --version >/dev/null 2>&1; then
  echo "xlafn setup: python3 -m pip is missing; the first run fetches the XLA plugin with it," >&2
  echo "  and the test suite tests that fetch. Install it (Debian: apt-get install python3-pip)." >&2
  echo "  Without pip, a program can still use a wheel you have: xlafn fetch --wheel FILE.whl" >&2
  exit 1
fi
