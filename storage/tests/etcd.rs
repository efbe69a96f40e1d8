//! The storage conformance suite against the etcd driver.

rudder_storage::conformance_tests!(rudder_storage::testing::etcd());
