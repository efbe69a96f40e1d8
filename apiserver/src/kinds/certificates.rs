//! certificates.k8s.io CertificateSigningRequests: how a client (a joining kubelet) asks a
//! signer for a certificate. A request is created with its requestor recorded by the server,
//! approved or denied through `/approval`, and issued (or failed) through `/status`; its spec
//! never changes after create. Who may approve or sign is checked by the admission plugins in
//! [`crate::authz::certificates`].

use k8s_openapi::api as k8s;
use serde_json::{json, Value};

use super::Strategy;
use crate::catalog::*;
use crate::patch::strategic::Ty;
use crate::registry::Caller;
use crate::selectors::field_set::at_or;
use crate::selectors::{FieldSet, Fields, Refusal};
use crate::validation::{Errs, NameRule};
use crate::{tables, validation};

/// certificates.k8s.io/v1 CertificateSigningRequest.
pub const CERTIFICATE_SIGNING_REQUESTS: ResourceInfo = resource!("certificates.k8s.io", "v1", "CertificateSigningRequest", "certificatesigningrequests", "certificatesigningrequest", false, short: &["csr"], categories: NONE,
        sub: &[status_of("certificates.k8s.io", "v1", "CertificateSigningRequest"), SubresourceInfo { name: Subresource::Approval, kind: GroupVersionKind { group: "certificates.k8s.io", version: "v1", kind: "CertificateSigningRequest" }, verbs: STATUS_VERBS }],
        prefix: "/registry/certificatesigningrequests", k8s::certificates::v1::CertificateSigningRequest,
        strategy: &CsrStrategy, printer: &tables::certificates::CsrTable);

/// The condition types only `/approval` may add.
const APPROVAL_CONDITIONS: [&str; 2] = ["Approved", "Denied"];

/// The rules of CertificateSigningRequest objects.
pub struct CsrStrategy;

impl Strategy for CsrStrategy {
    fn uses_generation(&self) -> bool {
        false
    }

    fn name_rule(&self) -> NameRule {
        NameRule::Subdomain
    }

    fn default(&self, object: &mut Value) {
        // v1 defaulting: a condition without a status is True.
        if let Some(conditions) = object
            .pointer_mut("/status/conditions")
            .and_then(Value::as_array_mut)
        {
            for condition in conditions.iter_mut().filter(|c| c.is_object()) {
                let empty = condition
                    .get("status")
                    .and_then(Value::as_str)
                    .is_none_or(str::is_empty);
                if empty {
                    condition["status"] = json!("True");
                }
            }
        }
    }

    fn validate(&self, object: &Value, old: Option<&Value>, errors: &mut Errs) {
        validation::certificates::validate_csr(object, old, errors);
    }

    fn merge_schema(&self) -> Ty {
        Ty::Object
    }

    fn fields(&self) -> &'static FieldSet {
        &CSR_FIELDS
    }

    fn prepare_for_create_by(&self, object: &mut Value, caller: &Caller) {
        // As upstream: whatever the client sent, the requestor is who created it.
        let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) else {
            return;
        };
        spec.insert("username".into(), json!(caller.user));
        set_or_remove(
            spec,
            "uid",
            (!caller.uid.is_empty()).then(|| json!(caller.uid)),
        );
        set_or_remove(
            spec,
            "groups",
            (!caller.groups.is_empty()).then(|| json!(caller.groups)),
        );
        set_or_remove(
            spec,
            "extra",
            (!caller.extra.is_empty()).then(|| json!(caller.extra)),
        );
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value, subresource: Option<Subresource>) {
        // The spec never changes after create; the generic store has already limited /status
        // and /approval to their part of the status.
        match old.get("spec") {
            Some(spec) => new["spec"] = spec.clone(),
            None => {
                if let Some(map) = new.as_object_mut() {
                    map.remove("spec");
                }
            }
        }
        if subresource == Some(Subresource::Status) {
            keep_conditions(new, old, |kind| APPROVAL_CONDITIONS.contains(&kind));
        }
        if subresource == Some(Subresource::Approval) {
            keep_conditions(new, old, |kind| !APPROVAL_CONDITIONS.contains(&kind));
        }
        stamp_conditions(new, old);
    }
}

fn set_or_remove(map: &mut serde_json::Map<String, Value>, key: &str, value: Option<Value>) {
    match value {
        Some(value) => map.insert(key.into(), value),
        None => map.remove(key),
    };
}

fn conditions(object: &Value) -> &[Value] {
    crate::json::array_at(object, &["status", "conditions"])
}

fn condition_type(condition: &Value) -> &str {
    condition.get("type").and_then(Value::as_str).unwrap_or("")
}

/// Takes the conditions whose type `kept` selects from `old`, whatever `new` says about them:
/// through `/status` a signer cannot approve, through `/approval` an approver cannot fail.
fn keep_conditions(new: &mut Value, old: &Value, kept: impl Fn(&str) -> bool) {
    let merged: Vec<Value> = conditions(old)
        .iter()
        .filter(|c| kept(condition_type(c)))
        .chain(conditions(new).iter().filter(|c| !kept(condition_type(c))))
        .cloned()
        .collect();
    if merged.is_empty() {
        if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
            status.remove("conditions");
        }
        return;
    }
    if !new.get("status").is_some_and(Value::is_object) {
        new["status"] = json!({});
    }
    new["status"]["conditions"] = Value::Array(merged);
}

/// Fills each condition's missing `lastUpdateTime`, and its missing `lastTransitionTime`
/// (kept from `old` when the condition's status did not change), as upstream does.
fn stamp_conditions(new: &mut Value, old: &Value) {
    let now = crate::registry::object::now();
    let Some(list) = new
        .pointer_mut("/status/conditions")
        .and_then(Value::as_array_mut)
    else {
        return;
    };
    for condition in list.iter_mut().filter(|c| c.is_object()) {
        let missing = |field: &str, c: &Value| c.get(field).is_none_or(Value::is_null);
        if missing("lastUpdateTime", condition) {
            condition["lastUpdateTime"] = json!(now);
        }
        if missing("lastTransitionTime", condition) {
            let kind = condition_type(condition).to_string();
            let status = condition.get("status").cloned();
            let before = conditions(old)
                .iter()
                .find(|c| condition_type(c) == kind && c.get("status") == status.as_ref())
                .and_then(|c| c.get("lastTransitionTime"))
                .filter(|t| !t.is_null())
                .cloned();
            condition["lastTransitionTime"] = before.unwrap_or_else(|| json!(now));
        }
    }
}

/// CertificateSigningRequests also select by `spec.signerName`, as upstream.
static CSR_FIELDS: FieldSet = FieldSet {
    accepted: &["metadata.name", "spec.signerName"],
    refusal: Refusal::Plain,
    paths: &[],
    extract: |obj: &Value, fields: &mut Fields| {
        fields.insert("spec.signerName".into(), at_or(obj, "/spec/signerName", ""));
    },
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_requestor_is_the_caller_whatever_the_client_sent() {
        let mut csr = json!({"spec": {"username": "forged", "groups": ["system:masters"], "uid": "x", "extra": {"a": ["b"]}}});
        let caller = Caller {
            user: "system:bootstrap:abcdef".into(),
            groups: vec!["system:bootstrappers".into(), "system:authenticated".into()],
            ..Caller::default()
        };
        CsrStrategy.prepare_for_create_by(&mut csr, &caller);
        assert_eq!(csr["spec"]["username"], "system:bootstrap:abcdef");
        assert_eq!(
            csr["spec"]["groups"],
            json!(["system:bootstrappers", "system:authenticated"])
        );
        assert!(csr["spec"].get("uid").is_none());
        assert!(csr["spec"].get("extra").is_none());
    }

    #[test]
    fn status_keeps_the_approval_and_approval_keeps_the_rest() {
        let old = json!({"spec": {"signerName": "a/b"}, "status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "R", "lastUpdateTime": "2024-01-01T00:00:00Z", "lastTransitionTime": "2024-01-01T00:00:00Z"}]}});
        let mut through_status = json!({"spec": {"signerName": "c/d"}, "status": {"conditions": [
            {"type": "Approved", "status": "True", "reason": "Changed"},
            {"type": "Failed", "status": "True"}]}});
        CsrStrategy.prepare_for_update(&mut through_status, &old, Some(Subresource::Status));
        assert_eq!(through_status["spec"]["signerName"], "a/b");
        assert_eq!(through_status["status"]["conditions"][0]["reason"], "R");
        assert_eq!(through_status["status"]["conditions"][1]["type"], "Failed");
        assert!(through_status["status"]["conditions"][1]["lastUpdateTime"].is_string());
        let mut unapproving = json!({"status": {"conditions": []}});
        CsrStrategy.prepare_for_update(&mut unapproving, &old, Some(Subresource::Status));
        assert_eq!(conditions(&unapproving).len(), 1);
        let mut through_approval = json!({"status": {"conditions": [
            {"type": "Denied", "status": "True"},
            {"type": "Failed", "status": "True"}]}});
        CsrStrategy.prepare_for_update(&mut through_approval, &old, Some(Subresource::Approval));
        let kinds: Vec<&str> = conditions(&through_approval)
            .iter()
            .map(condition_type)
            .collect();
        assert_eq!(kinds, ["Denied"], "{through_approval}");
    }
}
