//! `apiextensions.k8s.io/v1` CustomResourceDefinition: its catalog entry and rules. A CRD
//! is named `<plural>.<group>`, serves one or more versions with exactly one stored, and in
//! v1 every version carries a structural schema whose CEL rules compile. Its status
//! (accepted names, conditions, stored versions) is the CRD controller's to write; a delete
//! turns it Terminating with the `customresourcecleanup.apiextensions.k8s.io` finalizer,
//! which the controller removes once the CRD's objects are gone.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use serde_json::{json, Value};

use super::jsonpath::JsonPath;
use super::rules::Rules;
use super::schema::Schema;
use crate::catalog::*;
use crate::kinds::{Hold, Strategy};
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::validation::names::{is_dns1035_label, is_dns1123_label, is_dns1123_subdomain};
use crate::validation::{Errs, FieldError, NameRule};

/// The finalizer that holds a deleted CRD until its objects are gone.
pub const CLEANUP_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// apiextensions.k8s.io/v1 CustomResourceDefinition.
pub const CUSTOM_RESOURCE_DEFINITIONS: ResourceInfo = resource!("apiextensions.k8s.io", "v1", "CustomResourceDefinition", "customresourcedefinitions", "customresourcedefinition", false, short: &["crd", "crds"], categories: &["api-extensions"],
        sub: &[status_of("apiextensions.k8s.io", "v1", "CustomResourceDefinition")],
        prefix: "/registry/apiextensions.k8s.io/customresourcedefinitions", apiextensions::CustomResourceDefinition,
        strategy: &CrdStrategy, printer: &crate::tables::DefaultTable);

/// The rules of CustomResourceDefinition objects.
pub struct CrdStrategy;

impl Strategy for CrdStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        let spec = &mut object["spec"];
        if !spec.is_object() {
            return;
        }
        if let Some(kind) = spec["names"]["kind"].as_str().map(str::to_string) {
            if spec["names"]["singular"].as_str().is_none_or(str::is_empty) {
                spec["names"]["singular"] = json!(kind.to_ascii_lowercase());
            }
            if spec["names"]["listKind"].as_str().is_none_or(str::is_empty) {
                spec["names"]["listKind"] = json!(format!("{kind}List"));
            }
        }
        if spec["conversion"].is_null() {
            spec["conversion"] = json!({"strategy": "None"});
        }
        let service = spec
            .pointer_mut("/conversion/webhook/clientConfig/service")
            .and_then(Value::as_object_mut);
        if let Some(service) = service {
            service.entry("port").or_insert(json!(443));
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validate_crd(object, errors);
        if let Some(old) = old {
            for field in ["group", "scope"] {
                if object["spec"][field] != old["spec"][field] {
                    errors.push(FieldError::invalid(
                        format!("spec.{field}"),
                        object["spec"][field].clone(),
                        "field is immutable",
                    ));
                }
            }
        }
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &METADATA_ONLY
    }

    fn openapi_schema(&self) -> Option<&Value> {
        static OUTLINE: std::sync::LazyLock<Value> =
            std::sync::LazyLock::new(crate::openapi::custom::crd_outline);
        Some(&OUTLINE)
    }

    fn prepare_for_create(&self, object: &mut Value) {
        object["status"] = json!({
            "acceptedNames": {"kind": "", "plural": ""},
            "conditions": [],
            "storedVersions": storage_version(object).into_iter().collect::<Vec<_>>(),
        });
    }

    fn prepare_for_update(&self, new: &mut Value, _old: &Value, subresource: Option<Subresource>) {
        if subresource == Some(Subresource::Status) {
            return;
        }
        if let Some(storage) = storage_version(new) {
            if !new["status"].is_object() {
                new["status"] = json!({});
            }
            let stored = &mut new["status"]["storedVersions"];
            if !stored.is_array() {
                *stored = json!([]);
            }
            if let Some(list) = stored.as_array_mut() {
                if !list.iter().any(|v| v == storage.as_str()) {
                    list.push(json!(storage));
                }
            }
        }
    }

    fn deletion_hold(&self, _current: &Value, _grace_period_seconds: Option<i64>) -> Option<Hold> {
        Some(Hold::Finalizers)
    }

    fn begin_deletion(&self, object: &mut Value) {
        let finalizers = &mut object["metadata"]["finalizers"];
        if !finalizers.is_array() {
            *finalizers = json!([]);
        }
        if let Some(list) = finalizers.as_array_mut() {
            if !list.iter().any(|f| f == CLEANUP_FINALIZER) {
                list.push(json!(CLEANUP_FINALIZER));
            }
        }
        set_condition(
            object,
            "Terminating",
            "True",
            "InstanceDeletionPending",
            "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
        );
    }
}

/// The name of the version marked `storage: true`.
pub fn storage_version(crd: &Value) -> Option<String> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"] == true)
        .and_then(|v| v["name"].as_str())
        .map(str::to_string)
}

/// Sets (or replaces) a status condition, moving its transition time only on a change.
pub fn set_condition(crd: &mut Value, type_: &str, status: &str, reason: &str, message: &str) {
    if !crd["status"].is_object() {
        crd["status"] = json!({});
    }
    let conditions = &mut crd["status"]["conditions"];
    if !conditions.is_array() {
        *conditions = json!([]);
    }
    let Some(list) = conditions.as_array_mut() else {
        return;
    };
    let now = crate::registry::object::now();
    match list.iter_mut().find(|c| c["type"] == type_) {
        Some(existing) => {
            if existing["status"] != status {
                existing["lastTransitionTime"] = json!(now);
            }
            existing["status"] = json!(status);
            existing["reason"] = json!(reason);
            existing["message"] = json!(message);
        }
        None => list.push(json!({
            "type": type_, "status": status, "reason": reason, "message": message,
            "lastTransitionTime": now,
        })),
    }
}

fn validate_crd(object: &Value, errors: &mut Errs) {
    let spec = &object["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let names = &spec["names"];
    let plural = names["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        errors.push(FieldError::required("spec.group", ""));
    } else if !is_dns1123_subdomain(group).is_empty() || !group.contains('.') {
        errors.push(FieldError::invalid(
            "spec.group",
            group,
            "should be a domain with at least one dot",
        ));
    }
    let name = crate::json::name(object);
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    for (field, value) in [
        ("plural", plural),
        ("singular", names["singular"].as_str().unwrap_or("")),
    ] {
        if value.is_empty() {
            if field == "plural" {
                errors.push(FieldError::required("spec.names.plural", ""));
            }
        } else if !is_dns1035_label(value).is_empty() {
            errors.push(FieldError::invalid(
                format!("spec.names.{field}"),
                value,
                is_dns1035_label(value).join("; "),
            ));
        }
    }
    if names["kind"].as_str().is_none_or(str::is_empty) {
        errors.push(FieldError::required("spec.names.kind", ""));
    }
    if let Some(short) = names["shortNames"].as_array() {
        for (i, s) in short.iter().enumerate() {
            let text = s.as_str().unwrap_or("");
            if !is_dns1123_label(text).is_empty() {
                errors.push(FieldError::invalid(
                    format!("spec.names.shortNames[{i}]"),
                    text,
                    is_dns1123_label(text).join("; "),
                ));
            }
        }
    }
    match spec["scope"].as_str() {
        Some("Namespaced" | "Cluster") => {}
        Some(other) => errors.push(FieldError::not_supported(
            "spec.scope",
            other,
            &["Cluster", "Namespaced"],
        )),
        None => errors.push(FieldError::required("spec.scope", "")),
    }
    validate_conversion(&spec["conversion"], errors);
    validate_versions(spec, errors);
}

/// upstream's checks of `spec.conversion`: a webhook exactly when the strategy is Webhook,
/// with a URL or a Service to call and a ConversionReview version Rudder speaks.
fn validate_conversion(conversion: &Value, errors: &mut Errs) {
    let strategy = conversion["strategy"].as_str().unwrap_or("None");
    let webhook = &conversion["webhook"];
    match strategy {
        "None" => {
            if webhook.is_object() {
                errors.push(FieldError::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            if !webhook.is_object() {
                errors.push(FieldError::required(
                    "spec.conversion.webhook",
                    "required when strategy is set to Webhook",
                ));
                return;
            }
            let client = &webhook["clientConfig"];
            let url = client["url"].as_str().filter(|u| !u.is_empty());
            let service = client["service"].is_object();
            if url.is_some() == service {
                errors.push(FieldError::required(
                    "spec.conversion.webhook.clientConfig",
                    "exactly one of url or service is required",
                ));
            }
            if let Some(url) = url {
                if !url.starts_with("https://") {
                    errors.push(FieldError::invalid(
                        "spec.conversion.webhook.clientConfig.url",
                        url,
                        "'https' is the only allowed URL scheme",
                    ));
                }
            }
            let versions: Vec<&str> = webhook["conversionReviewVersions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !versions.iter().any(|v| *v == "v1" || *v == "v1beta1") {
                errors.push(FieldError::invalid(
                    "spec.conversion.webhook.conversionReviewVersions",
                    json!(versions),
                    "must include at least one of v1, v1beta1",
                ));
            }
        }
        other => errors.push(FieldError::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
}

fn validate_versions(spec: &Value, errors: &mut Errs) {
    let Some(versions) = spec["versions"].as_array().filter(|v| !v.is_empty()) else {
        errors.push(FieldError::invalid(
            "spec.versions",
            Value::Null,
            "must have exactly one version marked as storage version",
        ));
        return;
    };
    let storage = versions.iter().filter(|v| v["storage"] == true).count();
    if storage != 1 {
        errors.push(FieldError::invalid(
            "spec.versions",
            Value::Array(versions.clone()),
            "must have exactly one version marked as storage version",
        ));
    }
    if !versions.iter().any(|v| v["served"] == true) {
        errors.push(FieldError::invalid(
            "spec.versions",
            Value::Array(versions.clone()),
            "must have at least one version marked as served",
        ));
    }
    let mut seen: Vec<&str> = Vec::new();
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = version["name"].as_str().unwrap_or("");
        if !is_dns1035_label(name).is_empty() {
            errors.push(FieldError::invalid(
                format!("{path}.name"),
                name,
                is_dns1035_label(name).join("; "),
            ));
        }
        if seen.contains(&name) {
            errors.push(FieldError::duplicate(format!("{path}.name"), name));
        }
        seen.push(name);
        let schema = &version["schema"]["openAPIV3Schema"];
        if !schema.is_object() {
            errors.push(FieldError::required(
                format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            ));
        } else {
            validate_schema(schema, &path, spec, name, errors);
        }
        super::selectable::validate(version, &path, errors);
        if let Some(columns) = version["additionalPrinterColumns"].as_array() {
            for (c, column) in columns.iter().enumerate() {
                let json_path = column["jsonPath"].as_str().unwrap_or("");
                if let Err(why) = JsonPath::parse(json_path) {
                    errors.push(FieldError::invalid(
                        format!("{path}.additionalPrinterColumns[{c}].jsonPath"),
                        json_path,
                        why,
                    ));
                }
            }
        }
    }
}

fn validate_schema(schema: &Value, path: &str, spec: &Value, version: &str, errors: &mut Errs) {
    let at = format!("{path}.schema.openAPIV3Schema");
    match Schema::compile(schema, &at) {
        Err(why) => errors.push(FieldError::invalid(at.clone(), "object", why)),
        Ok(compiled) => {
            let mut problems = Vec::new();
            if compiled.type_name() != "object" {
                problems.push(format!(
                    "{at}.type: Invalid value: must be object at the root"
                ));
            }
            compiled.structural_problems(&at, &mut problems);
            for problem in problems {
                errors.push(FieldError::invalid(at.clone(), "object", problem));
            }
        }
    }
    let group = spec["group"].as_str().unwrap_or("");
    let root = kube_cel::RootContext {
        api_version: format!("{group}/{version}"),
        api_group: group.to_string(),
        kind: spec["names"]["kind"].as_str().unwrap_or("").to_string(),
    };
    match Rules::compile(schema, root) {
        Err(problems) => {
            for problem in problems {
                errors.push(FieldError::invalid(at.clone(), "object", problem));
            }
        }
        Ok(_) => super::cost::check(schema, &at, errors),
    }
}
