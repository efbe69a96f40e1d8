#!/usr/bin/env bash
# Builds Rudder and runs it all-in-one on its embedded default storage (SQLite in
# ./rudder-data). Extra arguments go to `rudder server`, e.g. `--storage postgres://…`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler
cargo build --release --locked
# The node agent runs pods on a containerd that `rudder server` starts of its own (in
# rudder-data/containerd: the settings these machines need, the pause and busybox images built
# locally); these packages are what it needs. RUDDER_NO_AGENT=1 runs no agent.
if [ "${RUDDER_NO_AGENT:-}" = 1 ]; then
  exec "$CARGO_TARGET_DIR/release/rudder" server --disable-agent "$@"
fi
rudder_install_packages containerd runc containernetworking-plugins iptables busybox-static nftables
exec "$CARGO_TARGET_DIR/release/rudder" server "$@"
