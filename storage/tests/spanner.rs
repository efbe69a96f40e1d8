//! The storage conformance suite against the Cloud Spanner driver, on the emulator named by
//! `RUDDER_TEST_SPANNER_EMULATOR` (scripts/test.sh starts one).
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::spanner());
