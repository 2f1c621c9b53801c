#!/usr/bin/env bash
# Builds exportd and runs it with the embedded defaults (SQLite in data/, files in data/objects)
# and the demo data, at http://127.0.0.1:3000. Log in as bob@acme.test / export-demo.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$root/scripts/setup.sh"
cd "$root"
# A debug build: it shares its artifacts with the test command and builds fastest from scratch.
cargo leptos build
exe="$CARGO_TARGET_DIR/debug/exportd"
"$exe" seed --demo
exec "$exe" serve "$@"
