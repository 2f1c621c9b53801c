#!/usr/bin/env bash
# Builds exportd and runs it with the embedded defaults (SQLite in data/, files in data/objects)
# and the demo data, at http://127.0.0.1:3000. Log in as bob@acme.test / export-demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$root/scripts/setup.sh"
cd "$root"
# What a user gets: a release build whose static files are precompressed (brotli and gzip).
# `scripts/run.sh --dev` builds the debug binary instead: faster to build from scratch and shared
# with the test command, but its wasm is about 9 MB. Every build splits the import section into a
# wasm file of its own (`--split`), loaded only for users who may import.
if [[ "${1:-}" == "--dev" ]]; then
  shift
  cargo leptos build --split
  exe="$CARGO_TARGET_DIR/debug/exportd"
else
  cargo leptos build --release --precompress --split
  exe="$CARGO_TARGET_DIR/release/exportd"
fi
"$exe" seed --demo
exec "$exe" serve "$@"
