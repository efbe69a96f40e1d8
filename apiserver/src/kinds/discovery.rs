//! discovery.k8s.io EndpointSlices.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// discovery.k8s.io/v1 EndpointSlice.
pub const ENDPOINT_SLICES: ResourceInfo = resource!("discovery.k8s.io", "v1", "EndpointSlice", "endpointslices", "endpointslice", true, short: NONE, categories: NONE,
        sub: &[], prefix: "/registry/endpointslices", k8s::discovery::v1::EndpointSlice,
        strategy: &EndpointSliceStrategy, printer: &tables::networking::EndpointSliceTable);

/// The rules of EndpointSlice objects.
pub struct EndpointSliceStrategy;

impl Strategy for EndpointSliceStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::other::default_endpoint_slice(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::misc::validate_endpoint_slice(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}
