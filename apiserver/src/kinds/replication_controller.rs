//! ReplicationControllers, the core group's original workload.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at_or;
use crate::selectors::{FieldSet, Fields, Refusal};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 ReplicationController.
pub const REPLICATION_CONTROLLERS: ResourceInfo = resource!("", "v1", "ReplicationController", "replicationcontrollers", "replicationcontroller", true, short: &["rc"], categories: ALL,
        sub: &[SCALE, status_of("", "v1", "ReplicationController")], prefix: "/registry/controllers", k8s::core::v1::ReplicationController,
        strategy: &ReplicationControllerStrategy, printer: &tables::core::ReplicationControllerTable);

/// The rules of ReplicationController objects.
pub struct ReplicationControllerStrategy;

impl Strategy for ReplicationControllerStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_rc(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_rc_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Workload
    }

    fn fields(&self) -> &'static FieldSet {
        &RC_FIELDS
    }
}

/// ReplicationControllers select by their observed replica count.
static RC_FIELDS: FieldSet = FieldSet {
    accepted: &["metadata.name", "metadata.namespace", "status.replicas"],
    refusal: Refusal::Plain,
    paths: &[],
    extract: replica_count,
};

/// `status.replicas`, 0 when unset (ReplicaSets expose it too).
pub(super) fn replica_count(obj: &Value, fields: &mut Fields) {
    let replicas = at_or(obj, "/status/replicas", "0");
    fields.insert("status.replicas".into(), replicas);
}
