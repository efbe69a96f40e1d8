//! The per-kind rules the generic store applies: what a create resets, what an update may
//! change (spec through the resource, status through `/status`), when the generation moves,
//! and the bridge to defaulting and validation.

use serde_json::{json, Value};

use super::object::{self, metadata_mut};
use crate::catalog::ResourceInfo;
use crate::error::{ApiError, Cause, Result};
use crate::{defaults, validation};

/// Kinds whose `metadata.generation` counts spec changes (upstream's strategies set it).
fn uses_generation(info: &ResourceInfo) -> bool {
    matches!(
        (info.group, info.kind),
        ("apps", _)
            | ("batch", _)
            | ("", "ReplicationController")
            | ("networking.k8s.io", "Ingress" | "NetworkPolicy")
            | ("policy", "PodDisruptionBudget")
    ) && info.kind != "ControllerRevision"
}

/// Whether the main resource ignores status changes (it has a `/status` subresource).
fn has_status_subresource(info: &ResourceInfo) -> bool {
    info.subresource("status").is_some()
}

/// Upstream's pod QoS class from container requests and limits.
fn qos_class(pod: &Value) -> &'static str {
    let containers: Vec<&Value> = ["containers", "initContainers"]
        .iter()
        .filter_map(|list| pod["spec"][list].as_array())
        .flatten()
        .collect();
    let mut any_resources = false;
    let mut guaranteed = true;
    for container in &containers {
        let requests = container["resources"]["requests"].as_object();
        let limits = container["resources"]["limits"].as_object();
        if requests.is_some_and(|r| !r.is_empty()) || limits.is_some_and(|l| !l.is_empty()) {
            any_resources = true;
        }
        for resource in ["cpu", "memory"] {
            let limit = limits.and_then(|limits| limits.get(resource));
            let request = requests
                .and_then(|requests| requests.get(resource))
                .or(limit);
            if limit.is_none() || request != limit {
                guaranteed = false;
            }
        }
    }
    if !any_resources {
        "BestEffort"
    } else if guaranteed && !containers.is_empty() {
        "Guaranteed"
    } else {
        "Burstable"
    }
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
    if uses_generation(info) {
        metadata.insert("generation".into(), 1.into());
    }
    match (info.group, info.kind) {
        ("", "Pod") => {
            let qos = qos_class(object);
            object["status"] = json!({"phase": "Pending", "qosClass": qos});
        }
        ("", "Namespace") => {
            object["status"] = json!({"phase": "Active"});
            let mut finalizers: Vec<Value> = object["spec"]["finalizers"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            if !finalizers.iter().any(|f| f == "kubernetes") {
                finalizers.push(json!("kubernetes"));
            }
            object["spec"] = json!({"finalizers": finalizers});
        }
        ("", "PersistentVolume" | "PersistentVolumeClaim") => {
            object["status"] = json!({"phase": "Pending"})
        }
        // The kubelet registers its node with a status.
        ("", "Node") => {}
        _ if has_status_subresource(info) => {
            if let Some(map) = object.as_object_mut() {
                map.remove("status");
            }
        }
        _ => {}
    }
}

/// Carries over what an update may not change and moves the generation.
pub(super) fn prepare_for_update(
    info: &ResourceInfo,
    subresource: Option<&str>,
    new: &mut Value,
    old: &Value,
) {
    if subresource == Some("status") {
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
    if info.group.is_empty() && info.kind == "Service" {
        keep_allocated(new, old);
    }
    if info.group.is_empty() && info.kind == "Namespace" && subresource != Some("finalize") {
        // As upstream: `spec.finalizers` changes only through `namespaces/{name}/finalize`,
        // or a namespace could be deleted with its content left behind in storage.
        keep_namespace_finalizers(new, old);
    }
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
    if uses_generation(info) && object::spec_part(new) != object::spec_part(old) {
        let generation = old_meta["generation"].as_i64().unwrap_or(0) + 1;
        metadata_mut(new).insert("generation".into(), generation.into());
    }
}

/// Puts the stored namespace's `spec.finalizers` back on an update through the main resource.
fn keep_namespace_finalizers(new: &mut Value, old: &Value) {
    let kept = old
        .get("spec")
        .and_then(|spec| spec.get("finalizers"))
        .cloned();
    if !new.get("spec").is_some_and(Value::is_object) {
        if kept.is_none() {
            return;
        }
        new["spec"] = json!({});
    }
    if let Some(spec) = new.get_mut("spec").and_then(Value::as_object_mut) {
        match kept {
            Some(finalizers) => spec.insert("finalizers".into(), finalizers),
            None => spec.remove("finalizers"),
        };
    }
}

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

/// Fills in upstream's defaults.
pub(super) fn default(info: &ResourceInfo, object: &mut Value) {
    defaults::apply(info.group, info.kind, object);
}

/// Validates a create or update; failures are 422 Invalid with one cause per field. A
/// binding sets `spec.nodeName`, which no update through the resource may change, so its own
/// rule (the pod is not yet bound) is all that applies.
pub(super) fn validate(
    info: &ResourceInfo,
    subresource: Option<&str>,
    object: &Value,
    old: Option<&Value>,
) -> Result<()> {
    if subresource == Some("binding") {
        return Ok(());
    }
    let errors = validation::validate(info.group, info.kind, info.namespaced, object, old);
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
        prepare_for_update(namespaces, Some("finalize"), &mut finalized, &old);
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
        prepare_for_update(deployments, Some("status"), &mut through_status, &old);
        assert_eq!(through_status["spec"]["replicas"], 1);
        assert_eq!(through_status["status"]["replicas"], 2);
    }
}
