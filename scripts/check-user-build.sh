#!/usr/bin/env bash
# What a user's build of xlafn does, checked after the test suite (the
# README's test command runs it, and so .ci/run):
# - `cargo doc` with warnings denied, offline and with an empty plugin
#   cache: documentation (as docs.rs builds it) needs no plugin, no
#   Python and no network;
# - the core alone (`--no-default-features`: no csv, crc, plotters,
#   indicatif, clap, ureq), with clippy's warnings denied, and `cargo tree`
#   showing none of those crates;
# - a second build with nothing changed recompiles nothing (the build
#   script watches only this package's files);
# - `cargo publish --dry-run`: both crates package, and the packaged
#   sources build on their own.
set -euo pipefail
cd "$(dirname "$0")/.."

empty_cache="$(mktemp -d)"
trap 'rm -rf "$empty_cache"' EXIT

echo "xlafn check: cargo doc (offline, empty plugin cache, warnings denied)" >&2
XDG_CACHE_HOME="$empty_cache" CARGO_NET_OFFLINE=true RUSTDOCFLAGS="-D warnings" \
  cargo doc --no-deps --workspace --quiet

echo "xlafn check: the core alone (--no-default-features)" >&2
XDG_CACHE_HOME="$empty_cache" CARGO_NET_OFFLINE=true \
  cargo clippy --quiet --no-default-features --lib -- -D warnings
optional="$(cargo tree --offline -e normal --no-default-features --prefix none |
  grep -E '^(csv|crc|plotters|indicatif|clap|ureq) ' || true)"
if [ -n "$optional" ]; then
  echo "xlafn check: the core depends on optional crates:" >&2
  echo "$optional" >&2
  exit 1
fi

echo "xlafn check: a second build recompiles nothing" >&2
cargo check --offline --quiet --lib
again="$(cargo check --offline -v --lib 2>&1 | grep -E '^ *(Compiling|Dirty|Running) ' || true)"
if [ -n "$again" ]; then
  echo "xlafn check: the second build did work again:" >&2
  echo "$again" >&2
  exit 1
fi

echo "xlafn check: cargo publish --dry-run" >&2
cargo publish --dry-run --workspace --allow-dirty --quiet
echo "xlafn check: a user's build is fine" >&2
