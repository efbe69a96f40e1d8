//! coordination.k8s.io Leases (leader election, node heartbeats).

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{tables, validation};

/// coordination.k8s.io/v1 Lease.
pub const LEASES: ResourceInfo = resource!("coordination.k8s.io", "v1", "Lease", "leases", "lease", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/leases", k8s::coordination::v1::Lease,
        strategy: &LeaseStrategy, printer: &tables::other::LeaseTable);

/// The rules of Lease objects.
pub struct LeaseStrategy;

impl Strategy for LeaseStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::misc::validate_lease_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
