#!/usr/bin/env bash
# The page's time to interactive on a throttled connection (docs/performance.md): builds
# the release page as `scripts/run.sh` serves it (precompressed, hashed file names), runs it with
# the embedded defaults in a scratch folder, and times it in Chromium at Fast 3G and 4x CPU
# slowdown (end2end/perf/tti.mjs). Not part of the test command: a timing is not a test.
#
#   scripts/tti.sh [runs]
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$root/scripts/setup.sh" --browser
cd "$root"
cargo leptos build --release --precompress --split
exe="$CARGO_TARGET_DIR/release/exportd"
scratch=$(mktemp -d)
port=${TTI_PORT:-3200}
trap 'kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; rm -rf "$scratch"' EXIT
export DATABASE_URL="sqlite://$scratch/exportd.db" EXPORTD_STORE="file://$scratch/objects" EXPORTD_LOG=warn
"$exe" seed --demo --orders 2000 >/dev/null
"$exe" serve --bind "127.0.0.1:$port" &
server=$!
for _ in $(seq 1 100); do
  curl -fs "http://127.0.0.1:$port/healthz" >/dev/null && break
  sleep 0.1
done
wasm=$(ls target/site/pkg/exportd*.wasm)
echo "release wasm $(basename "$wasm"): $(stat -c %s "$wasm") bytes raw, $(gzip -9c "$wasm" | wc -c) gzip -9, $(stat -c %s "$wasm.br") brotli (what a browser sending Accept-Encoding: br receives: $(curl -s -H 'Accept-Encoding: br' "http://127.0.0.1:$port/pkg/$(basename "$wasm")" | wc -c) bytes)"
node end2end/perf/tti.mjs "http://127.0.0.1:$port" "${1:-3}"
