#!/usr/bin/env bash
# Runs the storage benchmark (create, update, get, list, watch, compact, revoke) against a
# throw-away real etcd, in one run: `rudder bench storage` with a fresh etcd, the local
# PostgreSQL and MariaDB, and a throw-away Cloud Spanner emulator. Extra arguments go to the
# bench, e.g. `--subjects sqlite,postgres,mysql,spanner,etcd` for every driver, `--out DIR` for
# results.json, results.csv and charts, or `--writers 64 --keys 10000 --watchers 100
# --rounds 5` for a bigger run (`rudder bench storage --help` lists every flag).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler etcd-server etcd-client postgresql-client python3
trap rudder_stop_services EXIT
rudder_start_etcd
rudder_start_postgres
rudder_start_mysql
rudder_start_spanner
cargo build --release --locked
echo "==> machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
"$CARGO_TARGET_DIR/release/rudder" bench storage \
  --etcd-endpoint "$RUDDER_ETCD_ENDPOINT" --postgres-url "$RUDDER_POSTGRES_URL" \
  --mysql-url "$RUDDER_MYSQL_URL" --spanner-emulator "$RUDDER_SPANNER_EMULATOR" "$@"
