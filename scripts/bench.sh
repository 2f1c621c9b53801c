#!/usr/bin/env bash
# The benchmark (docs/performance.md); not part of the test command. Builds exportd in release,
# prepares its own data (a PostgreSQL database and a SQLite file, `seed --demo --orders N`),
# measures every figure beside a baseline run on this machine in the same run (psql \copy,
# sqlite3 -csv, pgbench), prints the table and writes it to docs/benchmarks.md.
#
#   scripts/bench.sh                  # 1,000,000 orders per tenant
#   BENCH_ORDERS=100000 scripts/bench.sh
#   BENCH_ONLY=imports BENCH_ORDERS=1000 scripts/bench.sh   # the import figures alone
#   BENCH_ONLY=exports scripts/bench.sh                     # the export figures alone, both backends
#   BENCH_ONLY=checkpointed scripts/bench.sh                # the checkpointed export and its resume alone
#   BENCH_ONLY=xlsx scripts/bench.sh                        # the workbook figures alone
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
"$root/scripts/setup.sh" --test
cd "$root"

need() { command -v "$1" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "$2"; }
need wrk wrk
need sqlite3 sqlite3
need pgbench postgresql-contrib
need psql postgresql-client

export TEST_DATABASE_URL=${TEST_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/postgres}
cargo leptos build --release --split
exec python3 "$root/scripts/bench.py" \
  --exe "$CARGO_TARGET_DIR/release/exportd" \
  --site "$root/target/site" \
  --admin-url "$TEST_DATABASE_URL" \
  --orders "${BENCH_ORDERS:-1000000}" \
  --only "${BENCH_ONLY:-}" \
  --out "$root/docs/benchmarks.md"
