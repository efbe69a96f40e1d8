#!/usr/bin/env bash
# Builds Rudder and runs it all-in-one on its embedded default storage (SQLite in
# ./rudder-data). Extra arguments go to `rudder server`, e.g. `--storage postgres://…`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler
cargo build --release --locked
# The node agent runs pods on a containerd of Rudder's own (scripts/containerd.sh: the
# settings this kind of machine needs, the pause and busybox images built locally).
# RUDDER_NO_CONTAINERD=1 skips it (the server then runs no agent).
agent_args=()
if [ "${RUDDER_NO_CONTAINERD:-}" != 1 ]; then
  socket=$(scripts/containerd.sh start "$PWD/rudder-data/containerd")
  agent_args=(--container-runtime-endpoint "unix://$socket")
fi
exec "$CARGO_TARGET_DIR/release/rudder" server "${agent_args[@]}" "$@"
