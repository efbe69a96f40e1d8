#!/usr/bin/env bash
# Runs Rudder's whole test suite. On a fresh machine it installs the system packages the tests
# need, starts a throw-away etcd and Cloud Spanner emulator, finds (or starts) a PostgreSQL and a
# MariaDB, runs every test against them, and stops what it started. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler etcd-server etcd-client postgresql-client python3 python3-pip
# Service networking tests (network/tests, tests/tests/network.rs) program nftables and
# iptables inside network namespaces of their own (iproute2, nsenter from util-linux).
rudder_install_packages nftables iptables iproute2 util-linux
# The python client test (tests/tests/kubectl_apply.rs) needs the `kubernetes` package.
rudder_install_python_packages kubernetes
rudder_make_disk_room
containerd_dir=/tmp/rudder-test-containerd
# What else is stopped goes first, and the tests' status is handed to rudder_stop_services,
# which exits with it. (Not by `(exit $rc)`: under `set -e` a failing status ended the trap
# there, and a failed run left etcd and the Spanner emulator running.)
trap 'rc=$?; scripts/containerd.sh stop "$containerd_dir" || true; scripts/containerd.sh stop "$containerd_dir-2" || true; rudder_stop_services "$rc"' EXIT
# A run that was killed may have left them running.
scripts/containerd.sh stop "$containerd_dir"
scripts/containerd.sh stop "$containerd_dir-2"
rudder_start_etcd
rudder_start_postgres
rudder_start_mysql
rudder_start_spanner
# The node agent's tests (tests/tests/kubelet.rs) run real pods on a containerd of their own.
export RUDDER_TEST_CONTAINERD
RUDDER_TEST_CONTAINERD=$(scripts/containerd.sh start "$containerd_dir" 10.244.77.0/24)
# A second machine's containerd, for the agent that joins with a bootstrap token.
export RUDDER_TEST_CONTAINERD_2
RUDDER_TEST_CONTAINERD_2=$(scripts/containerd.sh start "$containerd_dir-2" 10.244.79.0/24)

export RUDDER_TEST_ETCD_ENDPOINT="$RUDDER_ETCD_ENDPOINT"
export RUDDER_TEST_POSTGRES_URL="$RUDDER_POSTGRES_URL"
export RUDDER_TEST_MYSQL_URL="$RUDDER_MYSQL_URL"
export RUDDER_TEST_SPANNER_EMULATOR="$RUDDER_SPANNER_EMULATOR"
echo "==> cargo test --workspace (target dir $CARGO_TARGET_DIR)"
log=$(mktemp /tmp/rudder-test-log.XXXXXX)
set +e
cargo test --workspace --locked "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
set -e
# One closing line for the whole run, summed over every test binary.
awk '/^test result:/ { for (i = 1; i <= NF; i++) { if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i } }
     END { printf "%d passed, %d failed\n", p, f }' "$log"
rm -f "$log"
exit "$status"
