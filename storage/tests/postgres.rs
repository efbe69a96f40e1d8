//! The storage conformance suite against the postgres driver.

rudder_storage::conformance_tests!(rudder_storage::testing::postgres());
