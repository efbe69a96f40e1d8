//! Per-kind field selector tables: the fields each kind exposes (upstream's `GetAttrs` /
//! `ToSelectableFields`) and the fields a request may name (upstream's field label conversion
//! funcs, each with its own error text).
//!
//! Upstream quirks kept on purpose: `status.podIPs` is accepted for pods but no pod exposes it
//! (so it only equals `""`); apps/v1 ReplicaSets expose `status.replicas` but no conversion func
//! admits it; Nodes, Namespaces and the certificate kinds do not admit `metadata.namespace`;
//! events.k8s.io/v1 Events are selected by their own field names (`regarding.*`,
//! `reportingController`) and reject the core `involvedObject.*` names.

use std::collections::BTreeMap;

use serde_json::Value;

use super::validate::go_quote;
use super::{FieldSelector, SelectorError};

const POD_FIELDS: &[&str] = &[
    "metadata.name",
    "metadata.namespace",
    "spec.nodeName",
    "spec.restartPolicy",
    "spec.schedulerName",
    "spec.serviceAccountName",
    "spec.hostNetwork",
    "status.phase",
    "status.podIP",
    "status.podIPs",
    "status.nominatedNodeName",
    // Old v1 clients' name for spec.nodeName; exposed as an alias by `selectable_fields`.
    "spec.host",
];
const CORE_EVENT_FIELDS: &[&str] = &[
    "involvedObject.kind",
    "involvedObject.namespace",
    "involvedObject.name",
    "involvedObject.uid",
    "involvedObject.apiVersion",
    "involvedObject.resourceVersion",
    "involvedObject.fieldPath",
    "reason",
    "reportingComponent",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const EVENTS_V1_FIELDS: &[&str] = &[
    "reason",
    "regarding.kind",
    "regarding.namespace",
    "regarding.name",
    "regarding.uid",
    "regarding.apiVersion",
    "regarding.resourceVersion",
    "regarding.fieldPath",
    "reportingController",
    "source",
    "type",
    "metadata.namespace",
    "metadata.name",
];
const OBJECT_REFERENCE_FIELDS: &[&str] = &[
    "kind",
    "namespace",
    "name",
    "uid",
    "apiVersion",
    "resourceVersion",
    "fieldPath",
];

/// How a kind's conversion func words a rejected field.
#[derive(Clone, Copy)]
enum Refusal {
    /// `field label not supported: <f>`
    Plain,
    /// `field label "<f>" not supported for batchv1.Job`
    BatchJob,
    /// `field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: <f>`
    ResourceSlice,
    /// No conversion func: `"<f>" is not a known field selector: only "metadata.name", …`
    Default,
}

/// The fields a request may name for a kind, and how refusals are worded.
fn accepted(group: &str, kind: &str) -> (&'static [&'static str], Refusal) {
    use Refusal::*;
    match (group, kind) {
        ("", "Pod") => (POD_FIELDS, Plain),
        ("", "Node") => (&["metadata.name", "spec.unschedulable"], Plain),
        ("", "ReplicationController") => (
            &["metadata.name", "metadata.namespace", "status.replicas"],
            Plain,
        ),
        ("", "Event") => (CORE_EVENT_FIELDS, Plain),
        ("", "Namespace") => (&["status.phase", "metadata.name"], Plain),
        ("", "Secret") => (&["type", "metadata.namespace", "metadata.name"], Plain),
        ("", "Service") => (
            &[
                "metadata.namespace",
                "metadata.name",
                "spec.clusterIP",
                "spec.type",
            ],
            Plain,
        ),
        ("batch", "Job") => (
            &["metadata.name", "metadata.namespace", "status.successful"],
            BatchJob,
        ),
        ("certificates.k8s.io", "CertificateSigningRequest" | "ClusterTrustBundle") => {
            (&["metadata.name", "spec.signerName"], Plain)
        }
        ("certificates.k8s.io", "PodCertificateRequest") => (
            &[
                "metadata.name",
                "spec.signerName",
                "spec.podName",
                "spec.nodeName",
            ],
            Plain,
        ),
        ("events.k8s.io", "Event") => (EVENTS_V1_FIELDS, Plain),
        ("resource.k8s.io", "ResourceSlice") => (
            &["metadata.name", "spec.nodeName", "spec.driver"],
            ResourceSlice,
        ),
        _ => (&["metadata.name", "metadata.namespace"], Default),
    }
}

/// `Err` with upstream's message for the first field (in the selector's sorted term order)
/// the kind does not support.
pub fn check_supported(
    group: &str,
    kind: &str,
    selector: &FieldSelector,
) -> Result<(), SelectorError> {
    let (fields, refusal) = accepted(group, kind);
    let Some(bad) = selector.fields().into_iter().find(|f| !fields.contains(f)) else {
        return Ok(());
    };
    let message = match refusal {
        Refusal::Plain => format!("field label not supported: {bad}"),
        Refusal::BatchJob => format!(
            "field label {} not supported for batchv1.Job",
            go_quote(bad)
        ),
        Refusal::ResourceSlice => {
            format!("field label not supported for resource.k8s.io/v1, Kind=ResourceSlice: {bad}")
        }
        Refusal::Default => format!(
            "{} is not a known field selector: only \"metadata.name\", \"metadata.namespace\"",
            go_quote(bad)
        ),
    };
    Err(SelectorError::UnsupportedField {
        field: bad.to_string(),
        message,
    })
}

/// Renders a JSON leaf the way upstream formats the Go field: strings as-is, numbers and
/// booleans in decimal / `true`/`false`, missing or null as `""`.
fn text(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

fn at(obj: &Value, pointer: &str) -> String {
    text(obj.pointer(pointer))
}

/// Like [`at`], with the Go zero value for a missing number or boolean.
fn at_or(obj: &Value, pointer: &str, zero: &str) -> String {
    match obj.pointer(pointer) {
        None | Some(Value::Null) => zero.to_string(),
        v => text(v),
    }
}

/// The first non-empty of several places (the same datum under either API's name).
fn first_of(obj: &Value, pointers: &[&str]) -> String {
    pointers
        .iter()
        .map(|p| at(obj, p))
        .find(|s| !s.is_empty())
        .unwrap_or_default()
}

/// The fields of `obj` (a kind in `group`, `""` = core) that field selectors compare against.
///
/// Always `metadata.name`; `metadata.namespace` when the object has one (cluster-scoped
/// objects have none, and a missing field reads as `""`, as upstream's sets do). Numbers and
/// booleans are rendered as strings (`"3"`, `"true"`).
pub fn selectable_fields(group: &str, kind: &str, obj: &Value) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    out.insert("metadata.name".to_string(), at(obj, "/metadata/name"));
    if let Some(ns) = obj.pointer("/metadata/namespace").and_then(Value::as_str) {
        out.insert("metadata.namespace".to_string(), ns.to_string());
    }
    let mut put = |k: &str, v: String| {
        out.insert(k.to_string(), v);
    };
    match (group, kind) {
        ("", "Pod") => {
            let node = at(obj, "/spec/nodeName");
            put("spec.host", node.clone());
            put("spec.nodeName", node);
            put("spec.restartPolicy", at(obj, "/spec/restartPolicy"));
            put("spec.schedulerName", at(obj, "/spec/schedulerName"));
            put(
                "spec.serviceAccountName",
                at(obj, "/spec/serviceAccountName"),
            );
            put("spec.hostNetwork", at_or(obj, "/spec/hostNetwork", "false"));
            put("status.phase", at(obj, "/status/phase"));
            put(
                "status.podIP",
                first_of(obj, &["/status/podIPs/0/ip", "/status/podIP"]),
            );
            put(
                "status.nominatedNodeName",
                at(obj, "/status/nominatedNodeName"),
            );
        }
        ("", "Node") => put(
            "spec.unschedulable",
            at_or(obj, "/spec/unschedulable", "false"),
        ),
        ("", "Namespace") => {
            put("status.phase", at(obj, "/status/phase"));
            // Upstream still exposes this legacy key (no conversion func admits it).
            put("name", at(obj, "/metadata/name"));
        }
        ("", "Secret") => put("type", at(obj, "/type")),
        ("", "Service") => {
            put("spec.clusterIP", at(obj, "/spec/clusterIP"));
            put("spec.type", at(obj, "/spec/type"));
        }
        ("", "ReplicationController") | ("apps", "ReplicaSet") => {
            put("status.replicas", at_or(obj, "/status/replicas", "0"))
        }
        ("batch", "Job") => put("status.successful", at_or(obj, "/status/succeeded", "0")),
        ("certificates.k8s.io", "CertificateSigningRequest" | "ClusterTrustBundle") => {
            put("spec.signerName", at(obj, "/spec/signerName"))
        }
        ("certificates.k8s.io", "PodCertificateRequest") => {
            for f in ["signerName", "podName", "nodeName"] {
                put(&format!("spec.{f}"), at(obj, &format!("/spec/{f}")));
            }
        }
        ("resource.k8s.io", "ResourceSlice") => {
            put("spec.nodeName", at(obj, "/spec/nodeName"));
            put("spec.driver", at(obj, "/spec/driver"));
        }
        ("", "Event") | ("events.k8s.io", "Event") => {
            let core = group.is_empty();
            let (prefix, controller_key) = if core {
                ("involvedObject", "reportingComponent")
            } else {
                ("regarding", "reportingController")
            };
            for f in OBJECT_REFERENCE_FIELDS {
                let (core_path, v1_path) =
                    (format!("/involvedObject/{f}"), format!("/regarding/{f}"));
                let v = first_of(obj, &[core_path.as_str(), v1_path.as_str()]);
                put(&format!("{prefix}.{f}"), v);
            }
            let controller = first_of(obj, &["/reportingComponent", "/reportingController"]);
            let component = first_of(obj, &["/source/component", "/deprecatedSource/component"]);
            let source = if component.is_empty() {
                controller.clone()
            } else {
                component
            };
            put(controller_key, controller);
            put("source", source);
            put("reason", at(obj, "/reason"));
            put("type", at(obj, "/type"));
        }
        _ => {}
    }
    out
}

#[cfg(test)]
#[path = "fields_by_kind_tests.rs"]
mod tests;
