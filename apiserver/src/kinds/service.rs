//! Services and Endpoints. A Service's ClusterIPs and NodePorts are allocated on write and
//! kept by updates that leave them out.

use k8s_openapi::api as k8s;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::field_set::at;
use crate::selectors::{FieldSet, Fields, Refusal, METADATA_ONLY};
use crate::validation::{Errs, NameRule};
use crate::{defaults, tables, validation};

/// core/v1 Service.
pub const SERVICES: ResourceInfo = resource!("", "v1", "Service", "services", "service", true, short: &["svc"], categories: ALL,
        sub: &[status_of("", "v1", "Service")], prefix: "/registry/services/specs", k8s::core::v1::Service,
        strategy: &ServiceStrategy, printer: &tables::core::ServiceTable);

/// core/v1 Endpoints.
pub const ENDPOINTS: ResourceInfo = resource!("", "v1", "Endpoints", "endpoints", "endpoints", true, short: &["ep"], categories: NONE,
        sub: &[], prefix: "/registry/services/endpoints", k8s::core::v1::Endpoints,
        strategy: &EndpointsStrategy, printer: &tables::core::EndpointsTable);

/// The rules of Service objects.
pub struct ServiceStrategy;

impl Strategy for ServiceStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Dns1035
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_service(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::service::validate_service(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Service
    }

    fn fields(&self) -> &'static FieldSet {
        &SERVICE_FIELDS
    }
    fn prepare_for_update(&self, new: &mut Value, old: &Value, _subresource: Option<Subresource>) {
        keep_allocated(new, old);
    }

    fn delete_returns_object(&self) -> bool {
        true
    }

    fn allocates_service_addresses(&self) -> bool {
        true
    }
}

/// The rules of Endpoints objects.
pub struct EndpointsStrategy;

impl Strategy for EndpointsStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        defaults::core::default_endpoints(object);
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::core::validate_endpoints_object(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }
}

/// Services select by cluster IP and type.
static SERVICE_FIELDS: FieldSet = FieldSet {
    accepted: &[
        "metadata.namespace",
        "metadata.name",
        "spec.clusterIP",
        "spec.type",
    ],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        fields.insert("spec.clusterIP".into(), at(obj, "/spec/clusterIP"));
        fields.insert("spec.type".into(), at(obj, "/spec/type"));
    },
};

/// A Service update that leaves out what was allocated keeps it, as upstream does: the
/// ClusterIP(s) and the NodePort of each port still there.
fn keep_allocated(new: &mut Value, old: &Value) {
    let unset = |value: &Value| value.is_null() || value.as_str() == Some("");
    if unset(&new["spec"]["clusterIP"]) && !unset(&old["spec"]["clusterIP"]) {
        new["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
        if new["spec"]["clusterIPs"]
            .as_array()
            .is_none_or(Vec::is_empty)
        {
            new["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
        }
    }
    let old_ports = old["spec"]["ports"].as_array().cloned().unwrap_or_default();
    if let Some(ports) = new["spec"]["ports"].as_array_mut() {
        for port in ports {
            if !port["nodePort"].is_null() {
                continue;
            }
            let protocol = |p: &Value| p["protocol"].as_str().unwrap_or("TCP").to_string();
            if let Some(previous) = old_ports
                .iter()
                .find(|o| o["port"] == port["port"] && protocol(o) == protocol(port))
            {
                if !previous["nodePort"].is_null() {
                    port["nodePort"] = previous["nodePort"].clone();
                }
            }
        }
    }
}
