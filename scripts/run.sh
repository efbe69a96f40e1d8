#!/usr/bin/env bash
# Builds Rudder and runs it on its embedded default storage (SQLite in ./rudder-data).
# Extra arguments go to the command, e.g. `scripts/run.sh --listen 127.0.0.1:2379`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler
cargo build --release --locked
exec "$CARGO_TARGET_DIR/release/rudder" storage check --storage "sqlite://rudder-data/state.db" "$@"
