//! The storage conformance suite against the MySQL/MariaDB driver.
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::mysql());
