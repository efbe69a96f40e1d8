#!/usr/bin/env bash
# Runs every fuzz target of fuzz/ (the apiserver's decoders and patch engines) for a bounded
# time each, one after another, growing the corpus kept in fuzz/corpus/<target>. Not run in
# CI: cargo fuzz needs nightly features, which RUSTC_BOOTSTRAP=1 unlocks on stable.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET…]     (default: 600 seconds, every target)
#
# A crash leaves its input in fuzz/artifacts/<target>/ and stops the script; rerun it with
# `cargo fuzz run -s none <target> <file>` in fuzz/, then add a regression test and fix it.
# Afterwards `cargo fuzz cmin -s none <target>` keeps the corpus small before committing it
# (fuzz/README.md: a few hundred KB in all).
set -euo pipefail

cd "$(dirname "$0")/../fuzz"
seconds="${1:-600}"
shift || true
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/tmp/rudder-target}"
targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo fuzz list)
fi
for target in "${targets[@]}"; do
    mkdir -p "corpus/$target"
    echo "== $target: ${seconds}s"
    # -s none: the code is safe Rust, so a sanitizer adds cost and finds nothing a panic,
    # an abort or a stack overflow would not show.
    cargo fuzz run -s none "$target" "corpus/$target" -- \
        -max_total_time="$seconds" -rss_limit_mb=4096 -max_len=65536 -timeout=30
done
