//! scheduling.k8s.io PriorityClasses.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// scheduling.k8s.io/v1 PriorityClass.
pub const PRIORITY_CLASSES: ResourceInfo = resource!("scheduling.k8s.io", "v1", "PriorityClass", "priorityclasses", "priorityclass", false, short: &["pc"], categories: NONE,
        sub: &[], prefix: "/registry/priorityclasses", k8s::scheduling::v1::PriorityClass,
        strategy: &PriorityClassStrategy, printer: &tables::other::PriorityClassTable);

/// The rules of PriorityClass objects.
pub struct PriorityClassStrategy;

impl Strategy for PriorityClassStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_priority_class(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::misc::validate_priority_class(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
