#!/usr/bin/env bash
# Starts exportd for the browser tests: a fresh PostgreSQL database (so the test can read it back
# with the `pg` client), a fresh local store, the demo data, and the built page.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
port=${E2E_PORT:-3100}
admin=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db_url="${admin%/*}/exportd_e2e"
exe=${EXPORTD_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/exportd}
run="$here/.run"
rm -rf "$run" && mkdir -p "$run"
psql "$admin" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS exportd_e2e WITH (FORCE)" -c "CREATE DATABASE exportd_e2e"
# Each chunk of rows waits a moment (a fault point of the test build), so an export of the whole
# range is running for a few seconds: long enough to reload, cancel or revoke during it.
# A large export (checkpointed) is cut into parts of 5,000 rows, so the whole range has several.
# An import goes in batches of 100 rows, each after a moment, so an apply of a few thousand rows
# runs for seconds too.
export DATABASE_URL="$db_url" EXPORTD_STORE="file://$run/objects" EXPORTD_LOG=warn EXPORTD_PART_ROWS=5000 \
  FAILPOINTS="each_chunk=sleep(700);import_before_batch=sleep(200)" EXPORTD_IMPORT_BATCH_ROWS=100
# Sign-in through the provider of oidc/provider.mjs as well as with passwords.
export EXPORTD_OIDC_ISSUER="http://127.0.0.1:${E2E_OIDC_PORT:-3102}" EXPORTD_OIDC_ALLOW_HTTP=1 \
  EXPORTD_OIDC_CLIENT_ID=exportd-e2e EXPORTD_OIDC_CLIENT_SECRET=e2e-secret-that-is-long-enough EXPORTD_OIDC_NAME="Example IdP"
cd "$root"
"$exe" seed --demo --orders 20000
# The server's errors are kept in .run/server.log as well, for the check after the run that no
# request made it panic (no-panics.ts).
exec "$exe" serve --bind "127.0.0.1:$port" 2> >(tee "$run/server.log" >&2)
