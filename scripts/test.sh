#!/usr/bin/env bash
# Runs every test: the Rust unit and integration tests (each against SQLite and against the
# PostgreSQL at TEST_DATABASE_URL), then the Playwright test in Debian's Chromium.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$root/scripts/setup.sh" --test
cd "$root"

export TEST_DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
if ! psql "$TEST_DATABASE_URL" -qtAc 'SELECT 1' >/dev/null 2>&1; then
  # This machine kind runs PostgreSQL; start it if it stopped.
  if command -v pg_ctlcluster >/dev/null; then
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n1)" main start || true
  fi
  if ! psql "$TEST_DATABASE_URL" -qtAc 'SELECT 1' >/dev/null 2>&1; then
    echo "test.sh: PostgreSQL at $TEST_DATABASE_URL is not reachable; the tests need it" >&2
    exit 1
  fi
fi

# The fault points are compiled in for the tests only (the `failpoints` feature). Every test
# binary runs even after one fails, so one run shows every failure.
cargo test --locked --no-fail-fast -p app -p migrations -p server --features server/failpoints

# The browser tests slow the worker down with a fault point, so the binary they run has them.
# `--split` puts the import section (`#[lazy]`) in a wasm file of its own, as every build must:
# a build without it leaves the page's glue importing a module that does not exist.
cargo leptos build --split --bin-features failpoints
(cd end2end && npx playwright test)

# The release binary carries its page's files: alone in an empty folder it serves the page.
cargo leptos build --release --precompress --split
"$root/scripts/binary_alone.sh"
