#!/usr/bin/env bash
# Runs the Kubernetes API benchmark (ConfigMap creates by concurrent clients, full and paged
# LISTs of many pods, over HTTPS) on an in-process apiserver per driver, in one run:
# `rudder bench api` with a fresh etcd and the local PostgreSQL. Extra arguments go to the
# bench, e.g. `--out DIR` for results.json, or `--rounds 3 --creates 20000 --clients 64` for a
# bigger run (`rudder bench api --help` lists every flag).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler etcd-server etcd-client postgresql-client python3
trap rudder_stop_services EXIT
rudder_start_etcd
rudder_start_postgres
cargo build --release --locked
echo "==> machine: $(nproc) cores, $(free -g | awk '/Mem:/ {print $2}') GiB"
"$CARGO_TARGET_DIR/release/rudder" bench api \
  --etcd-endpoint "$RUDDER_ETCD_ENDPOINT" --postgres-url "$RUDDER_POSTGRES_URL" "$@"
