//! rudder-tests: cross-crate tests that run the real `rudder` binary as a user would.
//!
//! The tests live in `tests/tests/`; this library holds nothing yet but the crate's role.
