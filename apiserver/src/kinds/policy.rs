//! policy PodDisruptionBudgets.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{tables, validation};

/// policy/v1 PodDisruptionBudget.
pub const POD_DISRUPTION_BUDGETS: ResourceInfo = resource!("policy", "v1", "PodDisruptionBudget", "poddisruptionbudgets", "poddisruptionbudget", true, short: &["pdb"], categories: NONE,
        sub: &[status_of("policy", "v1", "PodDisruptionBudget")], prefix: "/registry/poddisruptionbudgets", k8s::policy::v1::PodDisruptionBudget,
        strategy: &PodDisruptionBudgetStrategy, printer: &tables::other::PodDisruptionBudgetTable);

/// The rules of PodDisruptionBudget objects.
pub struct PodDisruptionBudgetStrategy;

impl Strategy for PodDisruptionBudgetStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::misc::validate_pdb_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::PodDisruptionBudget
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
