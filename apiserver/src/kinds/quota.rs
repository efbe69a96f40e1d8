//! LimitRanges and ResourceQuotas.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 LimitRange.
pub const LIMIT_RANGES: ResourceInfo = resource!("", "v1", "LimitRange", "limitranges", "limitrange", true, short: &["limits"], categories: NONE,
        sub: &[], prefix: "/registry/limitranges", k8s::core::v1::LimitRange,
        strategy: &LimitRangeStrategy, printer: &tables::DefaultTable);

/// core/v1 ResourceQuota.
pub const RESOURCE_QUOTAS: ResourceInfo = resource!("", "v1", "ResourceQuota", "resourcequotas", "resourcequota", true, short: &["quota"], categories: NONE,
        sub: &[status_of("", "v1", "ResourceQuota")], prefix: "/registry/resourcequotas", k8s::core::v1::ResourceQuota,
        strategy: &ResourceQuotaStrategy, printer: &tables::core::ResourceQuotaTable);

/// The rules of LimitRange objects.
pub struct LimitRangeStrategy;

impl Strategy for LimitRangeStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_limit_range(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_limit_range_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// The rules of ResourceQuota objects.
pub struct ResourceQuotaStrategy;

impl Strategy for ResourceQuotaStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, _object: &mut Value) {}

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_resource_quota_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
