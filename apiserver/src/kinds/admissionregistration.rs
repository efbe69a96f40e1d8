//! admissionregistration.k8s.io/v1: the webhook configurations the webhook admission plugins
//! call (`webhooks/`), and ValidatingAdmissionPolicies with their bindings, which the policy
//! plugin evaluates. Defaults and the checks that keep a configuration callable are
//! upstream's; the CEL expressions are compiled (and refused when they do not) by the
//! plugins' own compiler, so a policy that cannot run is refused at write time.

use k8s_openapi::api::admissionregistration::v1 as registration;
use serde_json::{json, Value};

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::selectors::{FieldSet, METADATA_ONLY};
use crate::tables::format::{age, age_col, col, name_col};
use crate::tables::{Column, Printer};
use crate::validation::{Errs, FieldError, NameRule};

const GROUP: &str = "admissionregistration.k8s.io";

/// admissionregistration.k8s.io/v1 MutatingWebhookConfiguration.
pub const MUTATING_WEBHOOK_CONFIGURATIONS: ResourceInfo = resource!(GROUP, "v1", "MutatingWebhookConfiguration", "mutatingwebhookconfigurations", "mutatingwebhookconfiguration", false, short: NONE, categories: &["api-extensions"],
        sub: &[], prefix: "/registry/mutatingwebhookconfigurations", registration::MutatingWebhookConfiguration,
        strategy: &WebhookConfigurationStrategy { mutating: true }, printer: &WebhookTable);

/// admissionregistration.k8s.io/v1 ValidatingWebhookConfiguration.
pub const VALIDATING_WEBHOOK_CONFIGURATIONS: ResourceInfo = resource!(GROUP, "v1", "ValidatingWebhookConfiguration", "validatingwebhookconfigurations", "validatingwebhookconfiguration", false, short: NONE, categories: &["api-extensions"],
        sub: &[], prefix: "/registry/validatingwebhookconfigurations", registration::ValidatingWebhookConfiguration,
        strategy: &WebhookConfigurationStrategy { mutating: false }, printer: &WebhookTable);

/// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicy.
pub const VALIDATING_ADMISSION_POLICIES: ResourceInfo = resource!(GROUP, "v1", "ValidatingAdmissionPolicy", "validatingadmissionpolicies", "validatingadmissionpolicy", false, short: NONE, categories: &["api-extensions"],
        sub: &[status_of(GROUP, "v1", "ValidatingAdmissionPolicy")], prefix: "/registry/validatingadmissionpolicies", registration::ValidatingAdmissionPolicy,
        strategy: &PolicyStrategy, printer: &PolicyTable);

/// admissionregistration.k8s.io/v1 ValidatingAdmissionPolicyBinding.
pub const VALIDATING_ADMISSION_POLICY_BINDINGS: ResourceInfo = resource!(GROUP, "v1", "ValidatingAdmissionPolicyBinding", "validatingadmissionpolicybindings", "validatingadmissionpolicybinding", false, short: NONE, categories: &["api-extensions"],
        sub: &[], prefix: "/registry/validatingadmissionpolicybindings", registration::ValidatingAdmissionPolicyBinding,
        strategy: &PolicyBindingStrategy, printer: &PolicyBindingTable);

/// The rules of webhook configurations.
pub struct WebhookConfigurationStrategy {
    mutating: bool,
}

impl Strategy for WebhookConfigurationStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        let Some(webhooks) = object["webhooks"].as_array_mut() else {
            return;
        };
        for webhook in webhooks {
            let defaults = [
                ("failurePolicy", json!("Fail")),
                ("matchPolicy", json!("Equivalent")),
                ("namespaceSelector", json!({})),
                ("objectSelector", json!({})),
                ("timeoutSeconds", json!(10)),
            ];
            for (field, value) in defaults {
                if webhook[field].is_null() {
                    webhook[field] = value;
                }
            }
            if self.mutating && webhook["reinvocationPolicy"].is_null() {
                webhook["reinvocationPolicy"] = json!("Never");
            }
            if let Some(rules) = webhook["rules"].as_array_mut() {
                for rule in rules {
                    if rule["scope"].is_null() {
                        rule["scope"] = json!("*");
                    }
                }
            }
            if let Some(port) = webhook["clientConfig"]["service"].as_object_mut() {
                port.entry("port").or_insert(json!(443));
            }
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>, errors: &mut Errs) {
        let Some(webhooks) = object["webhooks"].as_array() else {
            return;
        };
        let mut names: Vec<&str> = Vec::new();
        for (i, webhook) in webhooks.iter().enumerate() {
            let path = format!("webhooks[{i}]");
            let name = webhook["name"].as_str().unwrap_or("");
            if name.is_empty() {
                errors.push(FieldError::required(format!("{path}.name"), ""));
            } else if name.split('.').count() < 3 {
                errors.push(FieldError::invalid(
                    format!("{path}.name"),
                    name,
                    "should be a domain with at least three segments separated by dots",
                ));
            }
            if names.contains(&name) {
                errors.push(FieldError::duplicate(format!("{path}.name"), name));
            }
            names.push(name);
            validate_client_config(
                &webhook["clientConfig"],
                &format!("{path}.clientConfig"),
                errors,
            );
            one_of(webhook, &path, "failurePolicy", &["Fail", "Ignore"], errors);
            one_of(
                webhook,
                &path,
                "matchPolicy",
                &["Equivalent", "Exact"],
                errors,
            );
            match webhook["sideEffects"].as_str() {
                None => errors.push(FieldError::required(
                    format!("{path}.sideEffects"),
                    "must specify one of None, NoneOnDryRun",
                )),
                Some("None" | "NoneOnDryRun") => {}
                Some(other) => errors.push(FieldError::not_supported(
                    format!("{path}.sideEffects"),
                    other,
                    &["None", "NoneOnDryRun"],
                )),
            }
            let versions = webhook["admissionReviewVersions"].as_array();
            if !versions.is_some_and(|v| v.iter().any(|v| v == "v1" || v == "v1beta1")) {
                errors.push(FieldError::required(
                    format!("{path}.admissionReviewVersions"),
                    "must specify one of v1, v1beta1",
                ));
            }
            if let Some(timeout) = webhook["timeoutSeconds"].as_i64() {
                if !(1..=30).contains(&timeout) {
                    errors.push(FieldError::invalid(
                        format!("{path}.timeoutSeconds"),
                        timeout,
                        "the timeout value must be between 1 and 30 seconds",
                    ));
                }
            }
            if self.mutating {
                one_of(
                    webhook,
                    &path,
                    "reinvocationPolicy",
                    &["Never", "IfNeeded"],
                    errors,
                );
            }
            for (c, condition) in webhook["matchConditions"]
                .as_array()
                .into_iter()
                .flatten()
                .enumerate()
            {
                let at = format!("{path}.matchConditions[{c}].expression");
                let expression = condition["expression"].as_str().unwrap_or("");
                if let Err(why) = crate::webhooks::cel::check(expression) {
                    errors.push(FieldError::invalid(at, expression, why));
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
        static OUTLINE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            crate::openapi::custom::outline(
                "A webhook configuration: the admission webhooks to call and when.",
                &["webhooks"],
            )
        });
        Some(&OUTLINE)
    }
}

fn one_of(object: &Value, path: &str, field: &str, allowed: &[&str], errors: &mut Errs) {
    if let Some(value) = object[field].as_str() {
        if !allowed.contains(&value) {
            errors.push(FieldError::not_supported(
                format!("{path}.{field}"),
                value,
                allowed,
            ));
        }
    }
}

fn validate_client_config(config: &Value, path: &str, errors: &mut Errs) {
    let url = config["url"].as_str();
    let service = config.get("service").filter(|s| s.is_object());
    match (url, service) {
        (Some(_), Some(_)) | (None, None) => errors.push(FieldError::required(
            path,
            "exactly one of url or service is required",
        )),
        (Some(url), None) => {
            let parsed = url.parse::<http::Uri>();
            let ok = parsed
                .as_ref()
                .is_ok_and(|uri| uri.scheme_str() == Some("https") && uri.host().is_some());
            if !ok {
                errors.push(FieldError::invalid(
                    format!("{path}.url"),
                    url,
                    "'https' is the only allowed URL scheme",
                ));
            }
        }
        (None, Some(service)) => {
            for field in ["namespace", "name"] {
                if service[field].as_str().is_none_or(str::is_empty) {
                    errors.push(FieldError::required(format!("{path}.service.{field}"), ""));
                }
            }
        }
    }
    if let Some(bundle) = config["caBundle"].as_str() {
        use base64::Engine;
        if base64::engine::general_purpose::STANDARD
            .decode(bundle)
            .is_err()
        {
            errors.push(FieldError::invalid(
                format!("{path}.caBundle"),
                "<bytes>",
                "must be base64",
            ));
        }
    }
}

/// The rules of ValidatingAdmissionPolicies.
pub struct PolicyStrategy;

impl Strategy for PolicyStrategy {
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
        if spec["failurePolicy"].is_null() {
            spec["failurePolicy"] = json!("Fail");
        }
        let constraints = &mut spec["matchConstraints"];
        if constraints.is_object() {
            for (field, value) in [
                ("matchPolicy", json!("Equivalent")),
                ("namespaceSelector", json!({})),
                ("objectSelector", json!({})),
            ] {
                if constraints[field].is_null() {
                    constraints[field] = value;
                }
            }
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>, errors: &mut Errs) {
        let spec = &object["spec"];
        if !spec["matchConstraints"].is_object() {
            errors.push(FieldError::required("spec.matchConstraints", ""));
        }
        let has_checks = ["validations", "auditAnnotations"]
            .iter()
            .any(|field| spec[field].as_array().is_some_and(|list| !list.is_empty()));
        if !has_checks {
            errors.push(FieldError::required(
                "spec.validations",
                "validations or auditAnnotations must contain at least one item",
            ));
        }
        one_of(spec, "spec", "failurePolicy", &["Fail", "Ignore"], errors);
        let expressions = [
            ("validations", "expression"),
            ("validations", "messageExpression"),
            ("auditAnnotations", "valueExpression"),
            ("variables", "expression"),
            ("matchConditions", "expression"),
        ];
        for (list, field) in expressions {
            for (i, item) in spec[list].as_array().into_iter().flatten().enumerate() {
                let Some(expression) = item[field].as_str() else {
                    if field == "expression" && list == "validations" {
                        errors.push(FieldError::required(
                            format!("spec.{list}[{i}].{field}"),
                            "",
                        ));
                    }
                    continue;
                };
                if let Err(why) = crate::webhooks::cel::check(expression) {
                    errors.push(FieldError::invalid(
                        format!("spec.{list}[{i}].{field}"),
                        expression,
                        why,
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
        static OUTLINE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            crate::openapi::custom::outline(
                "A ValidatingAdmissionPolicy: CEL validations of the requests it matches.",
                &["spec", "status"],
            )
        });
        Some(&OUTLINE)
    }
}

/// The rules of ValidatingAdmissionPolicyBindings.
pub struct PolicyBindingStrategy;

impl Strategy for PolicyBindingStrategy {
    fn uses_generation(&self) -> bool {
        true
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        let param_ref = &mut object["spec"]["paramRef"];
        if param_ref.is_object() && param_ref["parameterNotFoundAction"].is_null() {
            param_ref["parameterNotFoundAction"] = json!("Deny");
        }
    }

    fn validate(&self, object: &Value, _old: Option<&Value>, errors: &mut Errs) {
        let spec = &object["spec"];
        if spec["policyName"].as_str().is_none_or(str::is_empty) {
            errors.push(FieldError::required("spec.policyName", ""));
        }
        let actions = spec["validationActions"].as_array();
        match actions {
            None => errors.push(FieldError::required("spec.validationActions", "")),
            Some(actions) => {
                for (i, action) in actions.iter().enumerate() {
                    let text = action.as_str().unwrap_or("");
                    if !matches!(text, "Deny" | "Warn" | "Audit") {
                        errors.push(FieldError::not_supported(
                            format!("spec.validationActions[{i}]"),
                            text,
                            &["Audit", "Deny", "Warn"],
                        ));
                    }
                }
                if actions.iter().any(|a| a == "Deny") && actions.iter().any(|a| a == "Warn") {
                    errors.push(FieldError::invalid(
                        "spec.validationActions",
                        Value::Array(actions.clone()),
                        "must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
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
        static OUTLINE: std::sync::LazyLock<Value> = std::sync::LazyLock::new(|| {
            crate::openapi::custom::outline(
                "Binds a ValidatingAdmissionPolicy to the resources it applies to, with its params.",
                &["spec"],
            )
        });
        Some(&OUTLINE)
    }
}

/// Webhook configurations: how many webhooks.
pub struct WebhookTable;

impl Printer for WebhookTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col(
                "Webhooks",
                "integer",
                "The number of webhooks in the configuration.",
            ),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let count = obj["webhooks"].as_array().map_or(0, Vec::len);
        vec![json!(crate::json::name(obj)), json!(count), age(obj, now)]
    }
}

/// ValidatingAdmissionPolicies: validations and the param kind.
pub struct PolicyTable;

impl Printer for PolicyTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("Validations", "integer", "The number of validations."),
            col("ParamKind", "string", "The kind of the policy's params."),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let count = obj["spec"]["validations"].as_array().map_or(0, Vec::len);
        let param = &obj["spec"]["paramKind"];
        let param = match (param["apiVersion"].as_str(), param["kind"].as_str()) {
            (Some(version), Some(kind)) => format!("{version}/{kind}"),
            _ => "<unset>".to_string(),
        };
        vec![
            json!(crate::json::name(obj)),
            json!(count),
            json!(param),
            age(obj, now),
        ]
    }
}

/// ValidatingAdmissionPolicyBindings: the policy and its params.
pub struct PolicyBindingTable;

impl Printer for PolicyBindingTable {
    fn columns(&self) -> Vec<Column> {
        vec![
            name_col(),
            col("PolicyName", "string", "The policy bound."),
            col("ParamRef", "string", "The params the policy is bound with."),
            age_col(),
        ]
    }

    fn cells(&self, obj: &Value, now: jiff::Timestamp) -> Vec<Value> {
        let spec = &obj["spec"];
        let param = &spec["paramRef"];
        let param = if param.is_object() {
            let name = param["name"].as_str().unwrap_or("*");
            match param["namespace"].as_str() {
                Some(namespace) => format!("{namespace}/{name}"),
                None => name.to_string(),
            }
        } else {
            "<unset>".to_string()
        };
        vec![
            json!(crate::json::name(obj)),
            json!(spec["policyName"].as_str().unwrap_or("")),
            json!(param),
            age(obj, now),
        ]
    }
}
