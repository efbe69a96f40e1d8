#!/usr/bin/env bash
# Runs the controller-manager benchmark (1,000 Deployments × 10 replicas brought to available,
# `rudder controller-manager` as its own process, hollow nodes marking the pods Ready) on an
# in-process apiserver per driver, in one run: `rudder bench controllers` with a fresh etcd
# and the local PostgreSQL. Extra arguments go to the bench, e.g. `--subjects sqlite
# --deployments 100` for a short run (`rudder bench controllers --help` lists every flag).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler etcd-server etcd-client postgresql-client python3
trap rudder_stop_services EXIT
rudder_start_etcd
rudder_start_postgres
cargo build --release --locked
echo "==> machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
"$CARGO_TARGET_DIR/release/rudder" bench controllers \
  --etcd-endpoint "$RUDDER_ETCD_ENDPOINT" --postgres-url "$RUDDER_POSTGRES_URL" "$@"
