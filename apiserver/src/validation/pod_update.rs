//! What an update may change in a stored pod (upstream's `ValidatePodUpdate` and the status
//! checks of `ValidatePodStatusUpdate`). The spec is immutable but for a few fields: container
//! images, `activeDeadlineSeconds`, `terminationGracePeriodSeconds`, tolerations (only added
//! to; an existing one may change only its `tolerationSeconds`) and scheduling gates (only
//! removed). While the stored pod still has scheduling gates, its scheduling directives may
//! be narrowed too: `nodeSelector` may gain entries, and a required node affinity may gain
//! match expressions and fields in each of its terms (any, when it had none).
//!
//! Every allowed change is checked on its own and then taken back from a copy of the new
//! spec; whatever still differs from the stored spec is a forbidden change.

use serde_json::{Map, Value};

use super::json::{child, index, Errs};
use super::names::is_dns1123_subdomain;
use super::FieldError;

const IMMUTABLE_SPEC: &str = "pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

/// Checks the update of a pod whose stored form is `old`.
pub fn validate_pod_update(new: &Value, old: &Value, errs: &mut Errs) {
    validate_status_update(new, old, errs);
    let empty = Value::Object(Map::new());
    let spec = new.get("spec").unwrap_or(&empty);
    let old_spec = old.get("spec").unwrap_or(&empty);
    validate_only_added_tolerations(spec, old_spec, errs);
    validate_only_deleted_gates(spec, old_spec, errs);

    let mut masked = spec.clone();
    take_back_images(&mut masked, old_spec);
    for field in [
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
        "schedulingGates",
    ] {
        take_back(&mut masked, old_spec, field);
    }
    if !list(old_spec, "schedulingGates").is_empty() {
        narrow_scheduling_directives(&mut masked, old_spec, errs);
    }
    if !same(&masked, old_spec) {
        errs.push(FieldError::forbidden("spec", IMMUTABLE_SPEC));
    }
}

/// The checks of a status update that apply to Rudder's pods: a new nominated node is a node
/// name, and a terminated container stays terminated unless it restarts.
fn validate_status_update(new: &Value, old: &Value, errs: &mut Errs) {
    validate_container_states(new, old, errs);

    let nominated = new["status"]["nominatedNodeName"].as_str().unwrap_or("");
    if !nominated.is_empty() && old["status"]["nominatedNodeName"].as_str() != Some(nominated) {
        for msg in is_dns1123_subdomain(nominated) {
            errs.push(FieldError::invalid(
                "status.nominatedNodeName",
                nominated,
                msg,
            ));
        }
    }
}

/// Terminated containers stay terminated unless the pod's restart policy (or, for a sidecar,
/// its own) restarts them.
fn validate_container_states(new: &Value, old: &Value, errs: &mut Errs) {
    let policy = old["spec"]["restartPolicy"].as_str().unwrap_or("Always");
    if policy == "Always" {
        return;
    }
    // With OnFailure a container that failed restarts; init containers follow the pod's
    // policy, but for sidecars (their own `Always`).
    let restarts = |status: &Value| {
        policy == "OnFailure" && status["state"]["terminated"]["exitCode"].as_i64() != Some(0)
    };
    let sidecar = |status: &Value| {
        list(&old["spec"], "initContainers")
            .iter()
            .any(|c| c["name"] == status["name"] && c["restartPolicy"].as_str() == Some("Always"))
    };
    validate_stays_terminated(new, old, "containerStatuses", &restarts, errs);
    let init_restarts = |status: &Value| restarts(status) || sidecar(status);
    validate_stays_terminated(new, old, "initContainerStatuses", &init_restarts, errs);
}

/// upstream's ValidateContainerStateTransition: a container the stored status shows
/// terminated may not be running or waiting in the new one (unless `restarts` says it may).
fn validate_stays_terminated(
    new: &Value,
    old: &Value,
    field: &str,
    restarts: &dyn Fn(&Value) -> bool,
    errs: &mut Errs,
) {
    for (i, before) in list(&old["status"], field).iter().enumerate() {
        let name = before["name"].as_str().unwrap_or("");
        if before["state"]["terminated"].is_null() || restarts(before) {
            continue;
        }
        let revived = list(&new["status"], field).iter().any(|after| {
            after["name"].as_str() == Some(name) && after["state"]["terminated"].is_null()
        });
        if revived {
            errs.push(FieldError::forbidden(
                format!("status.{field}[{i}].state"),
                "may not be transitioned to non-terminated state",
            ));
        }
    }
}

/// `obj[field]` as a list (absent, null and not-a-list are the empty list).
fn list<'a>(obj: &'a Value, field: &str) -> &'a [Value] {
    obj.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// Whether two values are equal the way upstream compares API objects, where an absent
/// field, null, an empty list and an empty map are the same.
fn same(a: &Value, b: &Value) -> bool {
    fn empty(v: &Value) -> bool {
        match v {
            Value::Null => true,
            Value::Array(a) => a.is_empty(),
            Value::Object(m) => m.is_empty(),
            _ => false,
        }
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys = x.keys().chain(y.keys());
            keys.into_iter().all(|k| match (x.get(k), y.get(k)) {
                (Some(p), Some(q)) => same(p, q),
                (Some(v), None) | (None, Some(v)) => empty(v),
                (None, None) => true,
            })
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| same(p, q))
        }
        _ => a == b || (empty(a) && empty(b)),
    }
}

/// Sets `masked[field]` back to the stored spec's (removing it when that has none).
fn take_back(masked: &mut Value, old_spec: &Value, field: &str) {
    if let Some(m) = masked.as_object_mut() {
        match old_spec.get(field) {
            Some(v) => m.insert(field.into(), v.clone()),
            None => m.remove(field),
        };
    }
}

fn take_back_images(masked: &mut Value, old_spec: &Value) {
    for field in ["containers", "initContainers"] {
        let olds = list(old_spec, field);
        if let Some(new) = masked.get_mut(field).and_then(Value::as_array_mut) {
            for (c, oc) in new.iter_mut().zip(olds) {
                if let (Some(c), Some(image)) = (c.as_object_mut(), oc.get("image")) {
                    c.insert("image".into(), image.clone());
                }
            }
        }
    }
}

/// Each stored toleration must still be there, but for its `tolerationSeconds`.
fn validate_only_added_tolerations(spec: &Value, old_spec: &Value, errs: &mut Errs) {
    let without_seconds = |t: &Value| {
        let mut t = t.clone();
        if let Some(m) = t.as_object_mut() {
            m.remove("tolerationSeconds");
        }
        t
    };
    let new: Vec<Value> = list(spec, "tolerations")
        .iter()
        .map(without_seconds)
        .collect();
    for old in list(old_spec, "tolerations") {
        let old = without_seconds(old);
        if !new.iter().any(|t| same(t, &old)) {
            errs.push(FieldError::forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            return;
        }
    }
}

/// No gate the stored pod lacks (gates are only ever removed).
fn validate_only_deleted_gates(spec: &Value, old_spec: &Value, errs: &mut Errs) {
    let gate_name = |g: &Value| g["name"].as_str().unwrap_or("").to_string();
    let old: Vec<String> = list(old_spec, "schedulingGates")
        .iter()
        .map(gate_name)
        .collect();
    let path = child("spec", "schedulingGates");
    let mut reported = Vec::new();
    for (i, gate) in list(spec, "schedulingGates").iter().enumerate() {
        let name = gate_name(gate);
        if !old.contains(&name) && !reported.contains(&name) {
            errs.push(FieldError::forbidden(
                child(&index(&path, i), "name"),
                format!("only deletion is allowed, but found new scheduling gate '{name}'"),
            ));
            reported.push(name);
        }
    }
}

/// A gated pod's node selector and required node affinity: checked for narrowing, then taken
/// back from `masked`.
fn narrow_scheduling_directives(masked: &mut Value, old_spec: &Value, errs: &mut Errs) {
    let empty = Value::Object(Map::new());
    let new_selector = masked.get("nodeSelector").unwrap_or(&empty).clone();
    let old_selector = old_spec.get("nodeSelector").unwrap_or(&empty);
    if !same(&new_selector, old_selector) {
        let kept = old_selector
            .as_object()
            .into_iter()
            .flatten()
            .all(|(k, v)| new_selector.get(k) == Some(v));
        if !kept {
            errs.push(FieldError::invalid(
                "spec.nodeSelector",
                new_selector,
                "only additions to spec.nodeSelector are allowed (no mutations or deletions)",
            ));
        }
        take_back(masked, old_spec, "nodeSelector");
    }

    let old_affinity = &old_spec["affinity"]["nodeAffinity"];
    let new_affinity = masked["affinity"]["nodeAffinity"].clone();
    if same(&new_affinity, old_affinity) {
        return;
    }
    validate_node_affinity_narrowing(&new_affinity, old_affinity, errs);
    // Only the node affinity goes back: the rest of the affinity stays as the update has it.
    let old_node_affinity = old_spec["affinity"].get("nodeAffinity").cloned();
    if let Some(spec) = masked.as_object_mut() {
        let affinity = spec
            .entry("affinity")
            .or_insert_with(|| Value::Object(Map::new()));
        if affinity.is_null() {
            *affinity = Value::Object(Map::new());
        }
        if let Some(affinity) = affinity.as_object_mut() {
            match old_node_affinity {
                Some(v) => affinity.insert("nodeAffinity".into(), v),
                None => affinity.remove("nodeAffinity"),
            };
        }
    }
}

/// The stored required terms stay, each as it was or with expressions and fields appended;
/// no term is added or removed once there are any.
fn validate_node_affinity_narrowing(new: &Value, old: &Value, errs: &mut Errs) {
    let required = "requiredDuringSchedulingIgnoredDuringExecution";
    let Some(old_required) = old.get(required).filter(|v| !v.is_null()) else {
        return;
    };
    let old_terms = list(old_required, "nodeSelectorTerms");
    let new_terms = list(&new[required], "nodeSelectorTerms");
    let path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms";
    if !old_terms.is_empty() && old_terms.len() != new_terms.len() {
        errs.push(FieldError::invalid(
            path,
            Value::Array(new_terms.to_vec()),
            "no additions/deletions to non-empty NodeSelectorTerms list are allowed",
        ));
        return;
    }
    for (i, (new_term, old_term)) in new_terms.iter().zip(old_terms).enumerate() {
        if !term_only_added_to(new_term, old_term) {
            errs.push(FieldError::invalid(
                index(path, i),
                new_term.clone(),
                "only additions are allowed (no mutations or deletions)",
            ));
        }
    }
}

fn term_only_added_to(new: &Value, old: &Value) -> bool {
    let fields = ["matchExpressions", "matchFields"];
    let old_empty = fields.iter().all(|f| list(old, f).is_empty());
    if old_empty && fields.iter().any(|f| !list(new, f).is_empty()) {
        return false;
    }
    fields.iter().all(|f| {
        let (new, old) = (list(new, f), list(old, f));
        old.is_empty() || (new.len() >= old.len() && new.iter().zip(old).all(|(n, o)| same(n, o)))
    })
}
