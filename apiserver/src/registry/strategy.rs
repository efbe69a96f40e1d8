//! The per-kind rules the generic store applies: what a create resets, what an update may
//! change (spec through the resource, status through `/status`), when the generation moves,
//! and the bridge to defaulting and validation.

use serde_json::Value;

use super::object::{self, metadata_mut};
use crate::catalog::{ResourceInfo, Subresource};
use crate::error::{ApiError, Cause, Result};
use crate::validation;

/// Whether the main resource ignores status changes (it has a `/status` subresource).
fn has_status_subresource(info: &ResourceInfo) -> bool {
    info.subresource(Subresource::Status).is_some()
}

/// Resets what a client may not set on create.
pub(super) fn prepare_for_create(info: &ResourceInfo, object: &mut Value) {
    let metadata = metadata_mut(object);
    for field in [
        "resourceVersion",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "uid",
        "creationTimestamp",
        "generation",
    ] {
        metadata.remove(field);
    }
    metadata.insert("uid".into(), uuid::Uuid::new_v4().to_string().into());
    metadata.insert("creationTimestamp".into(), object::now().into());
    if info.strategy.uses_generation() {
        metadata.insert("generation".into(), 1.into());
    }
    if has_status_subresource(info) && !info.strategy.keeps_status_on_create() {
        if let Some(map) = object.as_object_mut() {
            map.remove("status");
        }
    }
    info.strategy.prepare_for_create(object);
}

/// Carries over what an update may not change and moves the generation.
pub(super) fn prepare_for_update(
    info: &ResourceInfo,
    subresource: Option<Subresource>,
    new: &mut Value,
    old: &Value,
) {
    if subresource == Some(Subresource::Status) {
        // Through /status only the status changes (and labels/annotations stay as stored).
        let status = new.get("status").cloned();
        let mut merged = old.clone();
        match status {
            Some(status) => merged["status"] = status,
            None => {
                if let Some(map) = merged.as_object_mut() {
                    map.remove("status");
                }
            }
        }
        // The client's resourceVersion precondition travels with the new object.
        let version = object::meta_str(new, "resourceVersion").to_string();
        object::set_meta(&mut merged, "resourceVersion", version);
        *new = merged;
        info.strategy.prepare_for_update(new, old, subresource);
        return;
    }
    if subresource == Some(Subresource::Approval) {
        // Through /approval only the status conditions change.
        let conditions = new.pointer("/status/conditions").cloned();
        let mut merged = old.clone();
        if !merged.get("status").is_some_and(Value::is_object) {
            merged["status"] = serde_json::json!({});
        }
        match conditions {
            Some(conditions) => merged["status"]["conditions"] = conditions,
            None => {
                if let Some(map) = merged["status"].as_object_mut() {
                    map.remove("conditions");
                }
            }
        }
        let version = object::meta_str(new, "resourceVersion").to_string();
        object::set_meta(&mut merged, "resourceVersion", version);
        *new = merged;
        info.strategy.prepare_for_update(new, old, subresource);
        return;
    }
    if subresource == Some(Subresource::Binding) {
        // The binding builds the pod from the stored one (node, annotations, the PodScheduled
        // condition): nothing is carried over.
        return;
    }
    if has_status_subresource(info) {
        match old.get("status") {
            Some(status) => new["status"] = status.clone(),
            None => {
                if let Some(map) = new.as_object_mut() {
                    map.remove("status");
                }
            }
        }
    }
    info.strategy.prepare_for_update(new, old, subresource);
    let old_meta = old.get("metadata").cloned().unwrap_or(Value::Null);
    let metadata = metadata_mut(new);
    for field in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "generation",
    ] {
        match old_meta.get(field) {
            Some(value) => metadata.insert(field.to_string(), value.clone()),
            None => metadata.remove(field),
        };
    }
    metadata.remove("selfLink");
    if info.strategy.uses_generation() && object::spec_part(new) != object::spec_part(old) {
        let generation = old_meta["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(new).insert("generation".into(), generation.into());
    }
}

/// Fills in upstream's defaults.
pub(super) fn default(info: &ResourceInfo, object: &mut Value) {
    if object.is_object() {
        info.strategy.default(object);
    }
}

/// Validates a create or update; failures are 422 Invalid with one cause per field. A
/// binding sets `spec.nodeName`, which no update through the resource may change, so its own
/// rule (the pod is not yet bound) is all that applies.
pub(super) fn validate(
    info: &ResourceInfo,
    subresource: Option<Subresource>,
    object: &Value,
    old: Option<&Value>,
) -> Result<()> {
    if subresource == Some(Subresource::Binding) {
        return Ok(());
    }
    let errors = validation::validate(info, object, old);
    if errors.is_empty() {
        return Ok(());
    }
    let causes = errors
        .iter()
        .map(|error| Cause {
            reason: error.reason().to_string(),
            message: error.cause_message(),
            field: error.field.clone(),
        })
        .collect();
    Err(ApiError::invalid(
        info.kind,
        info.group,
        object::name(object),
        causes,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog;
    use serde_json::json;

    #[test]
    fn pods_start_pending_with_their_qos_class() {
        let pods = catalog::find("", "v1", "pods").expect("pods");
        let mut pod = json!({"metadata": {"name": "p", "uid": "forged"}, "spec": {"containers": [
            {"name": "c", "image": "x", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}
        ]}, "status": {"phase": "Running"}});
        prepare_for_create(pods, &mut pod);
        assert_eq!(
            pod["status"],
            json!({"phase": "Pending", "qosClass": "Guaranteed"})
        );
        assert_ne!(pod["metadata"]["uid"], "forged");
        assert!(pod["metadata"].get("generation").is_none());
    }

    #[test]
    fn a_gated_pod_starts_unscheduled_with_the_reason() {
        let pods = catalog::find("", "v1", "pods").expect("pods");
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}],
            "schedulingGates": [{"name": "example.com/wait"}]}});
        prepare_for_create(pods, &mut pod);
        assert_eq!(
            pod["status"]["conditions"],
            json!([{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                "message": "Scheduling is blocked due to non-empty scheduling gates",
                "lastProbeTime": null, "lastTransitionTime": null}])
        );
        let mut ungated = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c", "image": "x"}],
            "schedulingGates": []}});
        prepare_for_create(pods, &mut ungated);
        assert!(ungated["status"].get("conditions").is_none(), "{ungated}");
    }

    #[test]
    fn generation_moves_on_spec_changes_only() {
        let deployments = catalog::find("apps", "v1", "deployments").expect("deployments");
        let mut old = json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}});
        prepare_for_create(deployments, &mut old);
        assert_eq!(old["metadata"]["generation"], 1);
        let mut relabelled = old.clone();
        relabelled["metadata"]["labels"] = json!({"a": "b"});
        prepare_for_update(deployments, None, &mut relabelled, &old);
        assert_eq!(relabelled["metadata"]["generation"], 1);
        let mut scaled = old.clone();
        scaled["spec"]["replicas"] = json!(3);
        prepare_for_update(deployments, None, &mut scaled, &old);
        assert_eq!(scaled["metadata"]["generation"], 2);
    }

    #[test]
    fn namespace_finalizers_change_only_through_finalize() {
        let namespaces = catalog::find("", "v1", "namespaces").expect("namespaces");
        let old = json!({"metadata": {"name": "n"}, "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active"}});
        let mut emptied = json!({"metadata": {"name": "n"}, "spec": {"finalizers": []}});
        prepare_for_update(namespaces, None, &mut emptied, &old);
        assert_eq!(emptied["spec"]["finalizers"], json!(["kubernetes"]));
        let mut dropped = json!({"metadata": {"name": "n"}});
        prepare_for_update(namespaces, None, &mut dropped, &old);
        assert_eq!(dropped["spec"]["finalizers"], json!(["kubernetes"]));
        let mut finalized = json!({"metadata": {"name": "n"}, "spec": {"finalizers": []}, "status": {"phase": "Gone"}});
        prepare_for_update(
            namespaces,
            Some(Subresource::Finalize),
            &mut finalized,
            &old,
        );
        assert_eq!(finalized["spec"]["finalizers"], json!([]));
        assert_eq!(finalized["status"]["phase"], "Active");
    }

    #[test]
    fn the_main_resource_keeps_status_and_status_keeps_the_rest() {
        let deployments = catalog::find("apps", "v1", "deployments").expect("deployments");
        let old = json!({"metadata": {"name": "d", "generation": 1}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut through_main =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 1}, "status": {"replicas": 9}});
        prepare_for_update(deployments, None, &mut through_main, &old);
        assert_eq!(through_main["status"]["replicas"], 1);
        let mut through_status =
            json!({"metadata": {"name": "d"}, "spec": {"replicas": 5}, "status": {"replicas": 2}});
        prepare_for_update(
            deployments,
            Some(Subresource::Status),
            &mut through_status,
            &old,
        );
        assert_eq!(through_status["spec"]["replicas"], 1);
        assert_eq!(through_status["status"]["replicas"], 2);
    }
}
