#!/usr/bin/env bash
# Runs `rudder bench kubelet` (release build): starts a containerd of its own for the startup
# workload (scripts/containerd.sh) and etcd/PostgreSQL for the density workload's drivers, as
# scripts/bench-api.sh does. Extra arguments go to the bench (e.g. `--workloads startup`).
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
rudder_install_packages protobuf-compiler etcd-server etcd-client postgresql-client
dir=/tmp/rudder-bench-containerd
# containerd is stopped first, and the bench's status is handed to rudder_stop_services,
# which exits with it.
trap 'rc=$?; scripts/containerd.sh stop "$dir" || true; rudder_stop_services "$rc"' EXIT
rudder_start_etcd
rudder_start_postgres
socket=$(scripts/containerd.sh start "$dir" 10.244.78.0/24)
cargo build --release --locked
"$CARGO_TARGET_DIR/release/rudder" bench kubelet --container-runtime-endpoint "unix://$socket" \
  --etcd-endpoint "$RUDDER_ETCD_ENDPOINT" --postgres-url "$RUDDER_POSTGRES_URL" "$@"
