//! apiregistration.k8s.io/v1 APIServices: which group-version each API is served by. `Local`
//! ones (no `spec.service`) are served by this apiserver, every built-in and CRD group-version
//! registered at start (`aggregator::local`); the others are proxied to an extension
//! apiserver behind a Service (`aggregator`). The checks are upstream's `ValidateAPIService`.

use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as registration;
use serde_json::Value;

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables::format::{age, age_col, col, name_col};
use crate::tables::{Column, Printer};
use crate::validation::names::{is_dns1035_label, is_dns1123_subdomain};
use crate::validation::{Errs, FieldError, NameRule};

/// The API group.
pub const GROUP: &str = "apiregistration.k8s.io";

/// apiregistration.k8s.io/v1 APIService.
pub const API_SERVICES: ResourceInfo = resource!(GROUP, "v1", "APIService", "apiservices", "apiservice", false, short: NONE, categories: &["api-extensions"],
        sub: &[status_of(GROUP, "v1", "APIService")], prefix: "/registry/apiregistration.k8s.io/apiservices", registration::APIService,
        strategy: &ApiServiceStrategy, printer: &ApiServiceTable);

/// The rules of APIServices.
pub struct ApiServiceStrategy;

impl Strategy for ApiServiceStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::PathSegment
    }

    fn default(&self, object: &mut Value) {
        let service = &mut object["spec"]["service"];
        if service.is_object() && service["port"].is_null() {
            service["port"] = Value::from(443);
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>, errors: &mut Errs) {
        validate_api_service(object, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }

    fn openapi_schema(&self) -> Option<&Value> {
        static OUTLINE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            crate::openapi::custom::outline(
                "APIService represents a server for a particular GroupVersion. Name must be \"version.group\".",
                &["spec", "status"],
            )
        });
        Some(&OUTLINE)
    }
}

fn validate_api_service(object: &Value, errors: &mut Errs) {
    let spec = &object["spec"];
    let name = crate::json::name(object);
    let group = spec["group"].as_str().unwrap_or("");
    let version = spec["version"].as_str().unwrap_or("");
    if name != format!("{version}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be `spec.version+\".\"+spec.group`",
        ));
    }
    if version.is_empty() {
        errors.push(FieldError::required("spec.version", ""));
    } else {
        for why in is_dns1035_label(version) {
            errors.push(FieldError::invalid("spec.version", version, why));
        }
    }
    // The core group is the empty one (`v1.`); every other is a DNS subdomain.
    if !group.is_empty() {
        for why in is_dns1123_subdomain(group) {
            errors.push(FieldError::invalid("spec.group", group, why));
        }
    }
    let group_priority = spec["groupPriorityMinimum"].as_i64().unwrap_or(0);
    if !(1..=20000).contains(&group_priority) {
        errors.push(FieldError::invalid(
            "spec.groupPriorityMinimum",
            group_priority,
            "must be positive and less than 20000",
        ));
    }
    let version_priority = spec["versionPriority"].as_i64().unwrap_or(0);
    if !(1..=1000).contains(&version_priority) {
        errors.push(FieldError::invalid(
            "spec.versionPriority",
            version_priority,
            "must be positive and less than 1000",
        ));
    }
    let ca_bundle = spec["caBundle"].as_str().is_some_and(|b| !b.is_empty());
    let insecure = spec["insecureSkipTLSVerify"].as_bool().unwrap_or(false);
    let service = &spec["service"];
    if service.is_object() {
        for field in ["namespace", "name"] {
            if service[field].as_str().is_none_or(str::is_empty) {
                errors.push(FieldError::required(format!("spec.service.{field}"), ""));
            }
        }
        let port = service["port"].as_i64().unwrap_or(443);
        if !(1..=65535).contains(&port) {
            errors.push(FieldError::invalid(
                "spec.service.port",
                port,
                "must be between 1 and 65535, inclusive",
            ));
        }
        if insecure && ca_bundle {
            errors.push(FieldError::invalid(
                "spec.insecureSkipTLSVerify",
                insecure,
                "may not be true if caBundle is present",
            ));
        }
    } else {
        if ca_bundle {
            errors.push(FieldError::invalid(
                "spec.caBundle",
                "<bundle>",
                "local APIServices may not have a caBundle",
            ));
        }
        if insecure {
            errors.push(FieldError::invalid(
                "spec.insecureSkipTLSVerify",
                insecure,
                "local APIServices may not have insecureSkipTLSVerify",
            ));
        }
    }
}

/// The Available condition as `kubectl get apiservices` shows it: its status, and the reason
/// in parentheses when it is not True (`False (MissingEndpoints)`).
pub fn available_cell(object: &Value) -> String {
    let conditions = object["status"]["conditions"].as_array();
    let Some(available) = conditions
        .into_iter()
        .flatten()
        .find(|condition| condition["type"] == "Available")
    else {
        return "Unknown".into();
    };
    let status = available["status"].as_str().unwrap_or("Unknown");
    match available["reason"].as_str() {
        Some(reason) if status != "True" && !reason.is_empty() => format!("{status} ({reason})"),
        _ => status.to_string(),
    }
}

/// upstream's APIService columns: Name, Service (`Local` or `namespace/name`), Available, Age.
pub struct ApiServiceTable;

impl Printer for ApiServiceTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Service",
                "string",
                "The service that serves this API, or Local for this apiserver.",
            ),
            col(
                "Available",
                "string",
                "Whether this API is available, with the reason when it is not.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let service = &obj["spec"]["service"];
        let service = if service.is_object() {
            format!(
                "{}/{}",
                service["namespace"].as_str().unwrap_or(""),
                service["name"].as_str().unwrap_or("")
            )
        } else {
            "Local".to_string()
        };
        vec![
            Value::from(crate::json::name(obj)),
            Value::from(service),
            Value::from(available_cell(obj)),
            age(obj, now),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn errors_of(object: &Value) -> Vec<String> {
        let mut errors = Vec::new();
        let mut object = object.clone();
        ApiServiceStrategy.default(&mut object);
        validate_api_service(&object, &mut errors);
        errors.iter().map(FieldError::message).collect()
    }

    fn wardle() -> Value {
        json!({"metadata": {"name": "v1alpha1.wardle.example.com"},
            "spec": {"group": "wardle.example.com", "version": "v1alpha1",
                "groupPriorityMinimum": 2000, "versionPriority": 200,
                "service": {"namespace": "wardle", "name": "api"}, "caBundle": "Y2E="}})
    }

    #[test]
    fn upstreams_checks_hold_apiservices_to_their_names_and_priorities() {
        assert_eq!(errors_of(&wardle()), Vec::<String>::new());
        let mut local = json!({"metadata": {"name": "v1."},
            "spec": {"version": "v1", "groupPriorityMinimum": 18000, "versionPriority": 1}});
        assert_eq!(errors_of(&local), Vec::<String>::new());
        local["spec"]["caBundle"] = json!("Y2E=");
        assert_eq!(errors_of(&local).len(), 1, "{:?}", errors_of(&local));

        let mut misnamed = wardle();
        misnamed["metadata"]["name"] = json!("v1.wardle.example.com");
        let errors = errors_of(&misnamed);
        assert!(
            errors[0].contains("must be `spec.version+\".\"+spec.group`"),
            "{errors:?}"
        );

        let mut bad = wardle();
        bad["spec"]["groupPriorityMinimum"] = json!(0);
        bad["spec"]["versionPriority"] = json!(5000);
        bad["spec"]["insecureSkipTLSVerify"] = json!(true);
        bad["spec"]["service"] = json!({"namespace": "wardle", "port": 70000});
        let errors = errors_of(&bad).join("\n");
        for wanted in [
            "spec.groupPriorityMinimum",
            "spec.versionPriority",
            "may not be true if caBundle is present",
            "spec.service.name",
            "spec.service.port",
        ] {
            assert!(errors.contains(wanted), "{wanted} in {errors}");
        }
    }

    #[test]
    fn the_table_shows_local_or_the_service_and_why_it_is_unavailable() {
        let mut object = wardle();
        object["status"] = json!({"conditions": [{"type": "Available", "status": "False",
            "reason": "MissingEndpoints"}]});
        let cells = ApiServiceTable.cells(&object, jiff::Timestamp::now());
        assert_eq!(cells[1], json!("wardle/api"));
        assert_eq!(cells[2], json!("False (MissingEndpoints)"));
        let local = json!({"metadata": {"name": "v1.apps"}, "spec": {},
            "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        let cells = ApiServiceTable.cells(&local, jiff::Timestamp::now());
        assert_eq!(cells[1..3], [json!("Local"), json!("True")]);
    }
}
