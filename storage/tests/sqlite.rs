//! The storage conformance suite against the sqlite driver.

rudder_storage::conformance_tests!(rudder_storage::testing::sqlite());
