//! ValidatingAdmissionPolicy: the validating plugin that judges requests by the CEL
//! validations of the policies their bindings bind, read live (from the watch cache) on every
//! request.
//!
//! For each binding whose policy's `matchConstraints` (and the binding's own
//! `matchResources`) cover the request and whose `matchConditions` hold: the params
//! (`paramKind` objects named or selected by the binding's `paramRef`; none found is
//! `parameterNotFoundAction`), the variables in order, then each validation; a failed one
//! is handled by the binding's `validationActions` — Deny refuses with upstream's message
//! (`ValidatingAdmissionPolicy '<p>' with binding '<b>' denied request: <message>`), Warn
//! returns a warning, Audit goes into the request's audit event (as do the policy's
//! `auditAnnotations`, under `<policy>/<key>`). An expression that fails to
//! evaluate is judged by the policy's `failurePolicy`.

use std::sync::Arc;

use async_trait::async_trait;
use serde_json::Value;

use rudder_admission::{Attributes, Denied, Validating};

use super::cel::{as_string, Expression, Scope};
use super::matching;
use super::plugin::review_of;
use crate::authz::Authorizer;
use crate::catalog::ResourceInfo;
use crate::kinds::admissionregistration::{
    VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS,
};
use crate::registry::Registry;
use crate::selectors::LabelSelector;

/// The policy plugin; reads policies, bindings, params and namespaces through `reader` (a
/// registry without admission).
pub struct Policies {
    reader: Registry,
    authorizer: Arc<dyn Authorizer>,
}

impl Policies {
    /// `authorizer` answers the `authorizer` CEL variable's checks.
    pub fn new(reader: Registry, authorizer: Arc<dyn Authorizer>) -> Self {
        Self { reader, authorizer }
    }
}

/// How one binding ended for the request.
enum Verdict {
    Pass,
    /// A validation failed: its message, the HTTP code of its reason, and which validation
    /// it was (none for a binding's own failure, such as missing params).
    Failed {
        message: String,
        code: u16,
        index: Option<usize>,
    },
    /// Something could not be evaluated.
    Error(String),
}

fn code_of(reason: Option<&str>) -> (u16, &'static str) {
    match reason {
        Some("Unauthorized") => (401, "Unauthorized"),
        Some("Forbidden") => (403, "Forbidden"),
        Some("RequestEntityTooLarge") => (413, "RequestEntityTooLarge"),
        _ => (422, "Invalid"),
    }
}

impl Policies {
    async fn list(
        &self,
        info: &'static ResourceInfo,
        namespace: Option<&str>,
        selector: &str,
    ) -> Result<Vec<Value>, String> {
        self.reader
            .list_cached(info, namespace, selector, "")
            .await
            .map_err(|error| format!("reading {}: {}", info.plural, error.message))
    }

    /// Whether a `MatchResources` covers the request.
    fn resources_match(
        &self,
        constraints: &Value,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
        namespace: Option<&Value>,
    ) -> Result<bool, String> {
        if !matching::any_rule(&constraints["resourceRules"], attributes) {
            return Ok(false);
        }
        if matching::any_rule(&constraints["excludeResourceRules"], attributes) {
            return Ok(false);
        }
        Ok(matching::namespace_selector_matches(
            &constraints["namespaceSelector"],
            attributes,
            namespace,
        )? && matching::object_selector_matches(&constraints["objectSelector"], object, old)?)
    }

    /// The resource of a policy's `paramKind`.
    fn param_resource(&self, param_kind: &Value) -> Option<&'static ResourceInfo> {
        let api_version = param_kind["apiVersion"].as_str()?;
        let kind = param_kind["kind"].as_str()?;
        let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
        crate::catalog::by_kind(group, kind)
            .filter(|info| info.version == version)
            .or_else(|| {
                self.reader
                    .custom()
                    .served()
                    .resources
                    .iter()
                    .find(|info| {
                        info.group == group && info.version == version && info.kind == kind
                    })
                    .copied()
            })
    }

    /// The params a binding names for the request: `Ok(None)` when the policy takes none,
    /// `Ok(Some(list))` otherwise (empty when none is found and the binding allows that).
    async fn params(
        &self,
        policy: &Value,
        binding: &Value,
        attributes: &Attributes,
    ) -> Result<Option<Vec<Value>>, Verdict> {
        let param_kind = &policy["spec"]["paramKind"];
        if !param_kind.is_object() {
            return Ok(None);
        }
        let param_ref = &binding["spec"]["paramRef"];
        if !param_ref.is_object() {
            return Err(Verdict::Error(
                "the policy takes params but the binding names none (spec.paramRef)".into(),
            ));
        }
        let info = self
            .param_resource(param_kind)
            .ok_or_else(|| Verdict::Error(format!("paramKind {param_kind} is not served")))?;
        let namespace = if info.namespaced {
            param_ref["namespace"]
                .as_str()
                .map(str::to_string)
                .or_else(|| attributes.namespace.clone())
        } else {
            None
        };
        if info.namespaced && namespace.is_none() {
            return Err(Verdict::Error(
                "namespaced params need a namespace for a cluster-scoped request".into(),
            ));
        }
        let found = match param_ref["name"].as_str() {
            Some(name) => self
                .reader
                .get(info, namespace.as_deref(), name)
                .await
                .ok()
                .into_iter()
                .collect(),
            None => {
                let selector = if param_ref["selector"].is_object() {
                    LabelSelector::from_object(&param_ref["selector"])
                        .map_err(|error| Verdict::Error(error.to_string()))?
                        .to_string()
                } else {
                    String::new()
                };
                self.list(info, namespace.as_deref(), &selector)
                    .await
                    .map_err(Verdict::Error)?
            }
        };
        if found.is_empty() && param_ref["parameterNotFoundAction"] != "Allow" {
            let reference = param_ref["name"].as_str().unwrap_or("<selector>");
            return Err(Verdict::Failed {
                message: format!(
                    "failed to configure binding: no params found for policy binding with `Deny` parameterNotFoundAction (params {reference:?})"
                ),
                code: 403,
                index: None,
            });
        }
        Ok(Some(found))
    }

    /// The policy's `auditAnnotations` for the request: `<policy>/<key>` and each
    /// valueExpression's string (a null one is left out; one that fails is logged).
    fn audit_annotations(policy: &Value, scope: &Scope, into: &mut Vec<(String, String)>) {
        let name = crate::json::name(policy);
        for annotation in policy["spec"]["auditAnnotations"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let key = annotation["key"].as_str().unwrap_or("");
            let source = annotation["valueExpression"].as_str().unwrap_or("");
            match Expression::cached(source).and_then(|e| e.evaluate(scope)) {
                Ok(value) => {
                    if let Some(text) = as_string(&value) {
                        into.push((format!("{name}/{key}"), text));
                    }
                }
                Err(error) => {
                    tracing::warn!(policy = name, key, %error, "an audit annotation failed to evaluate")
                }
            }
        }
    }

    /// Evaluates one policy for the request with one param (or none).
    fn evaluate(&self, policy: &Value, scope: &mut Scope) -> Verdict {
        let spec = &policy["spec"];
        for variable in spec["variables"].as_array().into_iter().flatten() {
            let name = variable["name"].as_str().unwrap_or("");
            let value = Expression::cached(variable["expression"].as_str().unwrap_or(""))
                .and_then(|expression| expression.evaluate(scope));
            match value {
                Ok(value) => scope.bind_variable(name, value),
                Err(error) => return Verdict::Error(error),
            }
        }
        for (index, validation) in spec["validations"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let source = validation["expression"].as_str().unwrap_or("");
            let holds = Expression::cached(source).and_then(|expression| expression.holds(scope));
            match holds {
                Ok(true) => {}
                Ok(false) => {
                    let message = validation["messageExpression"]
                        .as_str()
                        .and_then(|source| Expression::cached(source).ok())
                        .and_then(|expression| expression.evaluate(scope).ok())
                        .and_then(|value| as_string(&value))
                        .filter(|message| !message.trim().is_empty())
                        .or_else(|| validation["message"].as_str().map(str::to_string))
                        .unwrap_or_else(|| format!("failed expression: {source}"));
                    let (code, _) = code_of(validation["reason"].as_str());
                    return Verdict::Failed {
                        message,
                        code,
                        index: Some(index),
                    };
                }
                Err(error) => return Verdict::Error(error),
            }
        }
        Verdict::Pass
    }

    async fn judge(
        &self,
        policy: &Value,
        binding: &Value,
        request: Judged<'_>,
        audit: &mut AuditRecord,
    ) -> Verdict {
        let Judged {
            attributes,
            object,
            old,
            namespace,
        } = request;
        let spec = &policy["spec"];
        let covered = self
            .resources_match(
                &spec["matchConstraints"],
                attributes,
                object,
                old,
                namespace,
            )
            .and_then(|covered| {
                let own = &binding["spec"]["matchResources"];
                if !covered || !own.is_object() {
                    return Ok(covered);
                }
                let has_rules = own["resourceRules"]
                    .as_array()
                    .is_some_and(|r| !r.is_empty());
                let own_rules = !has_rules || matching::any_rule(&own["resourceRules"], attributes);
                Ok(own_rules
                    && !matching::any_rule(&own["excludeResourceRules"], attributes)
                    && matching::namespace_selector_matches(
                        &own["namespaceSelector"],
                        attributes,
                        namespace,
                    )?
                    && matching::object_selector_matches(&own["objectSelector"], object, old)?)
            });
        match covered {
            Ok(true) => {}
            Ok(false) => return Verdict::Pass,
            Err(error) => return Verdict::Error(error),
        }
        let params = match self.params(policy, binding, attributes).await {
            Ok(params) => params,
            Err(verdict) => return verdict,
        };
        let request = review_of(attributes, object, old, "");
        let null = Value::Null;
        let namespace_object = namespace.cloned().unwrap_or(Value::Null);
        let each_param: Vec<Option<Value>> = match params {
            None => vec![None],
            Some(list) if list.is_empty() => return Verdict::Pass,
            Some(list) => list.into_iter().map(Some).collect(),
        };
        for param in each_param {
            let param = param.unwrap_or(Value::Null);
            let mut scope = Scope::new(&[
                ("object", object.unwrap_or(&null)),
                ("oldObject", old.unwrap_or(&null)),
                ("request", &request),
                ("params", &param),
                ("namespaceObject", &namespace_object),
            ]);
            let (caller, target) = super::authorizer_of(&self.authorizer, attributes);
            scope.bind_authorizer(caller, target);
            for condition in spec["matchConditions"].as_array().into_iter().flatten() {
                let source = condition["expression"].as_str().unwrap_or("");
                match Expression::cached(source).and_then(|e| e.holds(&scope)) {
                    Ok(true) => {}
                    Ok(false) => return Verdict::Pass,
                    Err(error) => return Verdict::Error(error),
                }
            }
            let verdict = self.evaluate(policy, &mut scope);
            Self::audit_annotations(policy, &scope, &mut audit.annotations);
            match verdict {
                Verdict::Pass => {}
                other => return other,
            }
        }
        Verdict::Pass
    }
}

#[async_trait]
impl Validating for Policies {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        if matching::is_exempt(attributes) {
            return Ok(());
        }
        let failed = |message: String| Denied {
            code: 500,
            reason: "InternalError",
            message,
        };
        let bindings = self
            .list(&VALIDATING_ADMISSION_POLICY_BINDINGS, None, "")
            .await
            .map_err(failed)?;
        if bindings.is_empty() {
            return Ok(());
        }
        let policies = self
            .list(&VALIDATING_ADMISSION_POLICIES, None, "")
            .await
            .map_err(failed)?;
        let namespace = super::namespace_of(&self.reader, attributes, object).await;
        let request = Judged {
            attributes,
            object,
            old,
            namespace: namespace.as_ref(),
        };
        let mut audit = AuditRecord::default();
        let outcome = self
            .each_binding(request, &bindings, &policies, &mut audit)
            .await;
        audit.record();
        outcome
    }
}

/// The request a policy judges.
#[derive(Clone, Copy)]
struct Judged<'a> {
    attributes: &'a Attributes,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
    namespace: Option<&'a Value>,
}

/// What the policies give the request's audit event.
#[derive(Default)]
struct AuditRecord {
    /// `auditAnnotations` as `<policy>/<key>` and value.
    annotations: Vec<(String, String)>,
    /// The `Audit` failures.
    failures: Vec<Value>,
}

impl AuditRecord {
    /// Writes the annotations (distinct values of one key joined by ", ", as upstream's) and
    /// the failures as one JSON list under `validation.policy.admission.k8s.io/
    /// validation_failure`.
    fn record(self) {
        let mut by_key: std::collections::BTreeMap<String, Vec<String>> = Default::default();
        for (key, value) in self.annotations {
            let values = by_key.entry(key).or_default();
            if !values.contains(&value) {
                values.push(value);
            }
        }
        for (key, values) in by_key {
            rudder_admission::audit_annotations::record(key, values.join(", "));
        }
        if !self.failures.is_empty() {
            rudder_admission::audit_annotations::record(
                "validation.policy.admission.k8s.io/validation_failure",
                Value::Array(self.failures).to_string(),
            );
        }
    }
}

impl Policies {
    /// Judges the request by every binding; the first Deny refuses it.
    async fn each_binding(
        &self,
        request: Judged<'_>,
        bindings: &[Value],
        policies: &[Value],
        audit: &mut AuditRecord,
    ) -> Result<(), Denied> {
        for binding in bindings {
            let policy_name = binding["spec"]["policyName"].as_str().unwrap_or("");
            let binding_name = crate::json::name(binding);
            let Some(policy) = policies
                .iter()
                .find(|p| crate::json::name(p) == policy_name)
            else {
                continue;
            };
            let verdict = self.judge(policy, binding, request, audit).await;
            let actions: Vec<&str> = binding["spec"]["validationActions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let (message, code, index) = match verdict {
                Verdict::Pass => continue,
                Verdict::Failed {
                    message,
                    code,
                    index,
                } => (message, code, index),
                Verdict::Error(error) => {
                    if policy["spec"]["failurePolicy"] == "Ignore" {
                        tracing::warn!(policy = policy_name, binding = binding_name, %error, "policy failed to evaluate; ignored by its failure policy");
                        continue;
                    }
                    (error, 403, None)
                }
            };
            if actions.contains(&"Warn") {
                request.attributes.warnings.push(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}': {message}"
                ));
            }
            if actions.contains(&"Audit") {
                let mut failure = serde_json::json!({
                    "message": message,
                    "policy": policy_name,
                    "binding": binding_name,
                    "validationActions": actions,
                });
                if let Some(index) = index {
                    failure["expressionIndex"] = index.into();
                }
                audit.failures.push(failure);
            }
            if actions.contains(&"Deny") {
                let reason = match code {
                    401 => "Unauthorized",
                    403 => "Forbidden",
                    413 => "RequestEntityTooLarge",
                    _ => "Invalid",
                };
                return Err(Denied {
                    code,
                    reason,
                    message: format!(
                        "ValidatingAdmissionPolicy '{policy_name}' with binding '{binding_name}' denied request: {message}"
                    ),
                });
            }
        }
        Ok(())
    }
}
