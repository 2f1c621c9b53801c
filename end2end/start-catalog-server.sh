#!/usr/bin/env bash
# Starts a second exportd for the browser tests, on a catalog that is not the demo's
# (end2end/catalog.toml): a fresh PostgreSQL database with the demo's users and a schema of its
# own, and a fresh local store.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
port=${E2E_CATALOG_PORT:-3101}
admin=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
db_url="${admin%/*}/exportd_e2e_catalog"
exe=${EXPORTD_BIN:-${CARGO_TARGET_DIR:-$root/target}/debug/exportd}
run="$here/.run-catalog"
rm -rf "$run" && mkdir -p "$run"
psql "$admin" -q -v ON_ERROR_STOP=1 -c "DROP DATABASE IF EXISTS exportd_e2e_catalog WITH (FORCE)" -c "CREATE DATABASE exportd_e2e_catalog"
psql "$db_url" -q -v ON_ERROR_STOP=1 <<'SQL'
CREATE TABLE clinics (org TEXT NOT NULL, id BIGINT NOT NULL, name TEXT NOT NULL, PRIMARY KEY (org, id));
CREATE TABLE visits (id BIGINT PRIMARY KEY, org TEXT NOT NULL, clinic_id BIGINT NOT NULL, visited_on DATE,
  checked_in_at TIMESTAMPTZ NOT NULL, fee_minor BIGINT, currency TEXT, paid BOOLEAN);
INSERT INTO clinics VALUES ('ten_acme', 1, 'عيادة النور'), ('ten_acme', 2, 'North'), ('ten_globex', 1, 'Other');
INSERT INTO visits VALUES
  (1, 'ten_acme', 1, CURRENT_DATE - 1, now() - interval '1 day', 12500, 'SAR', TRUE),
  (2, 'ten_acme', 2, CURRENT_DATE - 2, now() - interval '2 days', 2500, 'KWD', FALSE),
  (3, 'ten_acme', 1, CURRENT_DATE - 3, now() - interval '3 days', 50, 'SAR', TRUE),
  (4, 'ten_globex', 1, CURRENT_DATE - 1, now() - interval '1 day', 100, 'SAR', TRUE);
SQL
export DATABASE_URL="$db_url" EXPORTD_STORE="file://$run/objects" EXPORTD_LOG=warn EXPORTD_CATALOG="$here/catalog.toml"
cd "$root"
"$exe" seed --demo --orders 10
exec "$exe" serve --bind "127.0.0.1:$port" 2> >(tee "$run/server.log" >&2)
