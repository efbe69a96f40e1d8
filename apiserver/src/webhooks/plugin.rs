//! MutatingAdmissionWebhook and ValidatingAdmissionWebhook: the admission plugins that call
//! the webhooks of the cluster's webhook configurations, read live (from the watch cache) on
//! every request, so a configuration applies as soon as it is stored.
//!
//! Per request, each webhook whose rules, namespace and object selectors and
//! `matchConditions` cover it is called; mutating webhooks one after another (configurations
//! by name, webhooks in order), their JSONPatches applied, and those with
//! `reinvocationPolicy: IfNeeded` called once more when a later webhook changed the object;
//! validating webhooks all at once. A refusal is the webhook's Status (`admission webhook
//! "<name>" denied the request: <message>`); a webhook that cannot be called fails the
//! request under `failurePolicy: Fail` and is skipped under `Ignore`. Warnings reach the
//! client.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine;
use serde_json::{json, Value};
use tracing::Instrument;

use rudder_admission::{Attributes, Denied, Mutating, Operation, Validating};

use super::call::post;
use super::cel::{Expression, Scope};
use super::matching::{self, operation_name};
use crate::authz::Authorizer;
use crate::kinds::admissionregistration::{
    MUTATING_WEBHOOK_CONFIGURATIONS, VALIDATING_WEBHOOK_CONFIGURATIONS,
};
use crate::registry::Registry;

/// The webhook plugins: reads configurations, namespaces and endpoints through `reader`
/// (a registry without admission).
pub struct Webhooks {
    reader: Registry,
    mutating: bool,
    /// Answers the `authorizer` variable of `matchConditions`.
    authorizer: Arc<dyn Authorizer>,
}

impl Webhooks {
    pub fn mutating(reader: Registry, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            reader,
            mutating: true,
            authorizer,
        }
    }

    pub fn validating(reader: Registry, authorizer: Arc<dyn Authorizer>) -> Self {
        Self {
            reader,
            mutating: false,
            authorizer,
        }
    }
}

/// What the request looks like to a webhook: the attributes and both objects.
struct Request<'a> {
    attributes: &'a Attributes,
    object: Option<&'a Value>,
    old: Option<&'a Value>,
    namespace: Option<&'a Value>,
}

/// What one webhook answered.
enum Answer {
    Allowed { patch: Option<json_patch::Patch> },
    Denied(Denied),
}

fn internal(message: String) -> Denied {
    Denied {
        code: 500,
        reason: "InternalError",
        message: format!("Internal error occurred: {message}"),
    }
}

fn reason_for(code: u16) -> &'static str {
    match code {
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Gone",
        422 => "Invalid",
        429 => "TooManyRequests",
        500 => "InternalError",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "BadRequest",
    }
}

impl Webhooks {
    async fn list(
        &self,
        info: &'static crate::catalog::ResourceInfo,
    ) -> Result<Vec<Value>, Denied> {
        let mut items = self
            .reader
            .list_cached(info, None, "", "")
            .await
            .map_err(|error| internal(format!("reading {}: {}", info.plural, error.message)))?;
        items.sort_by(|a, b| crate::json::name(a).cmp(crate::json::name(b)));
        Ok(items)
    }

    /// Every webhook of the stored configurations of `info`, configurations by name.
    async fn webhooks_of(
        &self,
        info: &'static crate::catalog::ResourceInfo,
    ) -> Result<Vec<Value>, Denied> {
        Ok(self
            .list(info)
            .await?
            .iter()
            .flat_map(|c| c["webhooks"].as_array().cloned().unwrap_or_default())
            .collect())
    }

    /// Whether `webhook` is called for the request (a selector or condition that cannot be
    /// evaluated is a failure of the webhook, judged by its failure policy).
    fn applies(&self, webhook: &Value, request: &Request<'_>) -> Result<bool, String> {
        if !matching::any_rule(&webhook["rules"], request.attributes) {
            return Ok(false);
        }
        if !matching::namespace_selector_matches(
            &webhook["namespaceSelector"],
            request.attributes,
            request.namespace,
        )? {
            return Ok(false);
        }
        if !matching::object_selector_matches(
            &webhook["objectSelector"],
            request.object,
            request.old,
        )? {
            return Ok(false);
        }
        let conditions = webhook["matchConditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if conditions.is_empty() {
            return Ok(true);
        }
        let review = review_request(request, "");
        let null = Value::Null;
        let mut scope = Scope::new(&[
            ("object", request.object.unwrap_or(&null)),
            ("oldObject", request.old.unwrap_or(&null)),
            ("request", &review),
        ]);
        let (caller, target) = super::authorizer_of(&self.authorizer, request.attributes);
        scope.bind_authorizer(caller, target);
        for condition in conditions {
            let name = condition["name"].as_str().unwrap_or("");
            let expression = Expression::cached(condition["expression"].as_str().unwrap_or(""))?;
            match expression.holds(&scope) {
                Ok(true) => {}
                Ok(false) => return Ok(false),
                Err(error) => return Err(format!("matchCondition {name:?}: {error}")),
            }
        }
        Ok(true)
    }

    /// Calls one webhook. `Err` is a call that failed (judged by the failure policy).
    async fn call(&self, webhook: &Value, request: &Request<'_>) -> Result<Answer, String> {
        let name = webhook["name"].as_str().unwrap_or("");
        let uid = uuid::Uuid::new_v4().to_string();
        let review = json!({
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": review_request(request, &uid),
        });
        let target = super::call::target_of(&self.reader, &webhook["clientConfig"]).await?;
        let timeout = Duration::from_secs(webhook["timeoutSeconds"].as_u64().unwrap_or(10));
        let ca_bundle = webhook["clientConfig"]["caBundle"].as_str();
        let answer = post(&target, ca_bundle, &review, timeout)
            .instrument(tracing::debug_span!("admission.webhook", webhook = name))
            .await?;
        let response = &answer["response"];
        if response["uid"].as_str() != Some(uid.as_str()) {
            return Err(format!(
                "expected response.uid={uid:?}, got {:?}",
                response["uid"].as_str().unwrap_or("")
            ));
        }
        for warning in response["warnings"].as_array().into_iter().flatten() {
            if let Some(text) = warning.as_str() {
                request.attributes.warnings.push(text);
            }
        }
        if response["allowed"] != true {
            let status = &response["status"];
            let code = status["code"]
                .as_u64()
                .and_then(|c| u16::try_from(c).ok())
                .filter(|c| *c >= 400)
                .unwrap_or(400);
            let denied_by = format!("admission webhook \"{name}\" denied the request");
            let message = match (status["message"].as_str(), status["reason"].as_str()) {
                (Some(message), _) if !message.is_empty() => format!("{denied_by}: {message}"),
                (_, Some(reason)) if !reason.is_empty() => format!("{denied_by}: {reason}"),
                _ => format!("{denied_by} without explanation"),
            };
            return Ok(Answer::Denied(Denied {
                code,
                reason: reason_for(code),
                message,
            }));
        }
        let Some(patch) = response["patch"].as_str() else {
            return Ok(Answer::Allowed { patch: None });
        };
        if !self.mutating {
            return Err("validating webhook may not return a patch".into());
        }
        if response["patchType"].as_str() != Some("JSONPatch") {
            return Err(format!(
                "unsupported patch type {:?}",
                response["patchType"].as_str().unwrap_or("")
            ));
        }
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(patch)
            .map_err(|error| format!("the patch is not base64: {error}"))?;
        let patch: json_patch::Patch = serde_json::from_slice(&bytes)
            .map_err(|error| format!("the patch is not a JSON patch: {error}"))?;
        Ok(Answer::Allowed { patch: Some(patch) })
    }

    /// A failed call under the webhook's failure policy: `Some` refusal under Fail.
    fn failed(webhook: &Value, error: &str) -> Option<Denied> {
        let name = webhook["name"].as_str().unwrap_or("");
        if webhook["failurePolicy"] == "Ignore" {
            tracing::warn!(webhook = name, %error, "admission webhook failed; ignored by its failure policy");
            return None;
        }
        Some(internal(format!(
            "failed calling webhook \"{name}\": failed to call webhook: {error}"
        )))
    }
}

fn review_request(request: &Request<'_>, uid: &str) -> Value {
    review_of(request.attributes, request.object, request.old, uid)
}

/// The AdmissionReview's `request` (the `request` CEL variable too, with an empty uid).
pub(super) fn review_of(
    attributes: &Attributes,
    object: Option<&Value>,
    old: Option<&Value>,
    uid: &str,
) -> Value {
    let kind = json!({"group": attributes.kind_group, "version": attributes.kind_version,
                      "kind": attributes.kind});
    let resource = json!({"group": attributes.group, "version": attributes.version, "resource": attributes.resource});
    let options_kind = match attributes.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => "ConnectOptions",
    };
    let mut review = json!({
        "uid": uid,
        "kind": kind,
        "resource": resource,
        "requestKind": kind,
        "requestResource": resource,
        "name": attributes.name,
        "operation": operation_name(attributes.operation),
        "userInfo": {"username": attributes.user, "uid": attributes.uid, "groups": attributes.groups, "extra": attributes.extra},
        "object": object.cloned().unwrap_or(Value::Null),
        "oldObject": old.cloned().unwrap_or(Value::Null),
        "dryRun": attributes.dry_run,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": options_kind},
    });
    if let Some(namespace) = &attributes.namespace {
        review["namespace"] = json!(namespace);
    }
    if let Some(sub) = &attributes.subresource {
        review["subResource"] = json!(sub);
        review["requestSubResource"] = json!(sub);
    }
    review
}

#[async_trait]
impl Mutating for Webhooks {
    fn name(&self) -> &'static str {
        "MutatingAdmissionWebhook"
    }

    async fn admit(
        &self,
        attributes: &Attributes,
        mut object: Option<&mut Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        if matching::is_exempt(attributes) {
            return Ok(());
        }
        let webhooks = self.webhooks_of(&MUTATING_WEBHOOK_CONFIGURATIONS).await?;
        if webhooks.is_empty() {
            return Ok(());
        }
        let namespace = super::namespace_of(&self.reader, attributes, object.as_deref()).await;
        // Every webhook once, in order; then, once more, each IfNeeded webhook a later one
        // changed the object after.
        let mut called_if_needed = Vec::new();
        let mut last_change = None;
        for (index, webhook) in webhooks.iter().enumerate() {
            let called = self
                .mutate_once(
                    webhook,
                    attributes,
                    object.as_deref_mut(),
                    old,
                    namespace.as_ref(),
                )
                .await?;
            if called.changed {
                last_change = Some(index);
            }
            if called.called && webhook["reinvocationPolicy"] == "IfNeeded" {
                called_if_needed.push(index);
            }
        }
        for index in called_if_needed {
            if last_change.is_some_and(|changed| changed > index) {
                self.mutate_once(
                    &webhooks[index],
                    attributes,
                    object.as_deref_mut(),
                    old,
                    namespace.as_ref(),
                )
                .await?;
            }
        }
        Ok(())
    }
}

/// What one mutating webhook did.
struct Called {
    called: bool,
    changed: bool,
}

impl Webhooks {
    /// Calls one mutating webhook if it applies, and applies its patch.
    async fn mutate_once(
        &self,
        webhook: &Value,
        attributes: &Attributes,
        object: Option<&mut Value>,
        old: Option<&Value>,
        namespace: Option<&Value>,
    ) -> Result<Called, Denied> {
        let skipped = Called {
            called: false,
            changed: false,
        };
        let current = object.as_deref().cloned();
        let request = Request {
            attributes,
            object: current.as_ref(),
            old,
            namespace,
        };
        let outcome = match self.applies(webhook, &request) {
            Ok(false) => return Ok(skipped),
            Ok(true) => self.call(webhook, &request).await,
            Err(error) => Err(error),
        };
        let patch = match outcome {
            Ok(Answer::Denied(denied)) => return Err(denied),
            Ok(Answer::Allowed { patch }) => patch,
            Err(error) => {
                return match Self::failed(webhook, &error) {
                    Some(denied) => Err(denied),
                    None => Ok(skipped),
                }
            }
        };
        let (Some(patch), Some(target)) = (patch, object) else {
            return Ok(Called {
                called: true,
                changed: false,
            });
        };
        let mut patched = target.clone();
        if let Err(error) = json_patch::patch(&mut patched, &patch) {
            return match Self::failed(webhook, &format!("the JSON patch does not apply: {error}")) {
                Some(denied) => Err(denied),
                None => Ok(skipped),
            };
        }
        let changed = patched != *target;
        *target = patched;
        Ok(Called {
            called: true,
            changed,
        })
    }
}

#[async_trait]
impl Validating for Webhooks {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionWebhook"
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
        let webhooks = self.webhooks_of(&VALIDATING_WEBHOOK_CONFIGURATIONS).await?;
        if webhooks.is_empty() {
            return Ok(());
        }
        let namespace = super::namespace_of(&self.reader, attributes, object).await;
        let request = Request {
            attributes,
            object,
            old,
            namespace: namespace.as_ref(),
        };
        let calls = webhooks.iter().map(|webhook| {
            let request = &request;
            async move {
                match self.applies(webhook, request) {
                    Ok(false) => return None,
                    Ok(true) => {}
                    Err(error) => return Self::failed(webhook, &error),
                }
                match self.call(webhook, request).await {
                    Ok(Answer::Allowed { .. }) => None,
                    Ok(Answer::Denied(denied)) => Some(denied),
                    Err(error) => Self::failed(webhook, &error),
                }
            }
        });
        let refusals = futures::future::join_all(calls).await;
        match refusals.into_iter().flatten().next() {
            Some(denied) => Err(denied),
            None => Ok(()),
        }
    }
}
