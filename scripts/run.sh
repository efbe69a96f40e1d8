#!/usr/bin/env bash
# Builds Rudder and runs it all-in-one on its embedded default storage (SQLite in
# ./rudder-data). Extra arguments go to `rudder server`, e.g. `--storage postgres://…`.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh

rudder_install_packages protobuf-compiler
cargo build --release --locked
exec "$CARGO_TARGET_DIR/release/rudder" server "$@"
