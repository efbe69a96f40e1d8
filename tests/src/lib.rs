//! rudder-tests: support for the cross-crate tests in `tests/tests/`, which run the real
//! `rudder` binary (registered as test targets of the root package, so cargo builds the binary
//! for them and hands its path over as `CARGO_BIN_EXE_rudder`).

use std::process::{Command, Output};

/// Runs `binary` with `args` and returns its output.
pub fn run(binary: &str, args: &[&str]) -> Output {
    Command::new(binary)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("cannot run {binary}: {error}"))
}
