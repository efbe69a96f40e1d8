//! Defaulting of the core ("") group's kinds: Pod, PodTemplate, ReplicationController,
//! Service, Secret, Namespace, PersistentVolume(Claim), Endpoints, Node and LimitRange.

use serde_json::{json, Map, Value};

use super::pod::default_template;
use super::{ensure_obj, get_obj, is_empty, objs_mut, set_if_absent, set_str_if_empty};

/// PodTemplate: its template, as a pod's.
pub fn default_pod_template(obj: &mut Value) {
    default_template(obj, "template");
}

/// PersistentVolume: reclaim policy, volume mode, hostPath type and a Pending phase.
pub fn default_pv(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        set_str_if_empty(spec, "persistentVolumeReclaimPolicy", "Retain");
        set_if_absent(spec, "volumeMode", json!("Filesystem"));
        if let Some(h) = get_obj(spec, "hostPath") {
            set_if_absent(h, "type", json!(""));
        }
    }
    if let Some(status) = ensure_obj(obj, "status") {
        set_str_if_empty(status, "phase", "Pending");
    }
}

/// Endpoints: each port's protocol.
pub fn default_endpoints(obj: &mut Value) {
    for subset in objs_mut(obj, "subsets") {
        for p in objs_mut(subset, "ports") {
            set_str_if_empty(p, "protocol", "TCP");
        }
    }
}

/// Node: allocatable defaults to capacity.
pub fn default_node(obj: &mut Value) {
    if let Some(status) = get_obj(obj, "status") {
        if is_empty(status, "allocatable") {
            if let Some(cap) = status.get("capacity").filter(|c| c.is_object()).cloned() {
                set_if_absent(status, "allocatable", cap);
            }
        }
    }
}

/// LimitRange: each container item's default and defaultRequest.
pub fn default_limit_range(obj: &mut Value) {
    if let Some(spec) = get_obj(obj, "spec") {
        for item in objs_mut(spec, "limits") {
            default_limit_range_item(item);
        }
    }
}

/// PVC defaults (also applied to StatefulSet volumeClaimTemplates).
pub fn default_pvc(obj: &mut Value) {
    if let Some(spec) = ensure_obj(obj, "spec") {
        set_if_absent(spec, "volumeMode", json!("Filesystem"));
    }
    if let Some(status) = ensure_obj(obj, "status") {
        set_str_if_empty(status, "phase", "Pending");
    }
}

pub fn default_rc(obj: &mut Value) {
    let labels = obj
        .pointer("/spec/template/metadata/labels")
        .filter(|l| l.is_object())
        .cloned();
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_if_absent(spec, "replicas", json!(1));
    if let Some(labels) = &labels {
        if is_empty(spec, "selector") {
            spec["selector"] = labels.clone();
        }
    }
    if spec.get("template").is_some_and(Value::is_object) {
        default_template(spec, "template");
    }
    if let Some(labels) = labels {
        if let Some(meta) = ensure_obj(obj, "metadata") {
            if is_empty(meta, "labels") {
                meta["labels"] = labels;
            }
        }
    }
}

pub fn default_service(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    set_str_if_empty(spec, "sessionAffinity", "None");
    match spec.get("sessionAffinity").and_then(Value::as_str) {
        Some("None") => {
            if let Some(m) = spec.as_object_mut() {
                m.remove("sessionAffinityConfig");
            }
        }
        Some("ClientIP") => {
            let has_timeout = spec
                .pointer("/sessionAffinityConfig/clientIP/timeoutSeconds")
                .is_some_and(|t| !t.is_null());
            if !has_timeout {
                spec["sessionAffinityConfig"] = json!({"clientIP": {"timeoutSeconds": 10800}});
            }
        }
        _ => {}
    }
    set_str_if_empty(spec, "type", "ClusterIP");
    for p in objs_mut(spec, "ports") {
        set_str_if_empty(p, "protocol", "TCP");
        let unset = match p.get("targetPort") {
            None | Some(Value::Null) => true,
            Some(Value::String(s)) => s.is_empty(),
            Some(v) => v.as_i64() == Some(0),
        };
        if unset {
            if let Some(port) = p.get("port").filter(|v| v.is_number()).cloned() {
                p["targetPort"] = port;
            }
        }
    }
    let typ = spec
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let external_ips = !is_empty(spec, "externalIPs");
    let externally_accessible =
        typ == "LoadBalancer" || typ == "NodePort" || (typ == "ClusterIP" && external_ips);
    if externally_accessible {
        set_str_if_empty(spec, "externalTrafficPolicy", "Cluster");
    }
    if matches!(typ.as_str(), "ClusterIP" | "NodePort" | "LoadBalancer") {
        set_if_absent(spec, "internalTrafficPolicy", json!("Cluster"));
    }
    if typ == "LoadBalancer" {
        set_if_absent(spec, "allocateLoadBalancerNodePorts", json!(true));
    }
    if typ != "ExternalName" {
        default_ip_families(spec);
    }
}

/// The registry's IP family fill for a single-stack IPv4 cluster: headless services without a
/// selector require dual-stack families; everything else is SingleStack IPv4.
fn default_ip_families(spec: &mut Value) {
    let headless = spec.get("clusterIP").and_then(Value::as_str) == Some("None");
    if headless && is_empty(spec, "selector") {
        set_if_absent(spec, "ipFamilyPolicy", json!("RequireDualStack"));
        let require_dual =
            spec.get("ipFamilyPolicy").and_then(Value::as_str) == Some("RequireDualStack");
        if is_empty(spec, "ipFamilies") {
            spec["ipFamilies"] = if require_dual {
                json!(["IPv4", "IPv6"])
            } else {
                json!(["IPv4"])
            };
        }
    } else {
        set_if_absent(spec, "ipFamilyPolicy", json!("SingleStack"));
        if is_empty(spec, "ipFamilies") {
            spec["ipFamilies"] = json!(["IPv4"]);
        }
    }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(B64[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

pub fn default_secret(obj: &mut Value) {
    set_str_if_empty(obj, "type", "Opaque");
    // The v1 -> internal conversion folds stringData into data (stringData wins).
    let string_data = match obj.get("stringData") {
        Some(Value::Object(m)) if m.values().all(Value::is_string) => m.clone(),
        _ => return,
    };
    if let Some(data) = ensure_obj(obj, "data").and_then(Value::as_object_mut) {
        for (k, v) in string_data {
            data.insert(k, Value::from(base64(v.as_str().unwrap_or("").as_bytes())));
        }
        if let Some(m) = obj.as_object_mut() {
            m.remove("stringData");
        }
    }
}

pub fn default_namespace(obj: &mut Value) {
    let name = obj
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !name.is_empty() {
        if let Some(labels) = ensure_obj(obj, "metadata").and_then(|m| ensure_obj(m, "labels")) {
            labels["kubernetes.io/metadata.name"] = Value::from(name);
        }
    }
    // spec.finalizers ["kubernetes"] is set on create only (the registry's strategy does it):
    // defaulting runs on every update, and must not bring back a finalizer that was removed.
    if let Some(status) = ensure_obj(obj, "status") {
        set_str_if_empty(status, "phase", "Active");
    }
}

fn default_limit_range_item(item: &mut Value) {
    if item.get("type").and_then(Value::as_str) != Some("Container") {
        return;
    }
    let get = |item: &Value, k: &str| {
        item.get(k)
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default()
    };
    let (max, min) = (get(item, "max"), get(item, "min"));
    let mut default: Map<String, Value> = get(item, "default");
    for (k, v) in max {
        default.entry(k).or_insert(v);
    }
    let mut default_request = get(item, "defaultRequest");
    for (k, v) in &default {
        default_request.entry(k.clone()).or_insert(v.clone());
    }
    for (k, v) in min {
        default_request.entry(k).or_insert(v);
    }
    if item
        .get("default")
        .is_none_or(|d| d.is_object() || d.is_null())
    {
        item["default"] = Value::Object(default);
    }
    if item
        .get("defaultRequest")
        .is_none_or(|d| d.is_object() || d.is_null())
    {
        item["defaultRequest"] = Value::Object(default_request);
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::apply;
    use serde_json::{json, Value};

    fn defaulted(kind: &str, mut v: Value) -> Value {
        apply("", kind, &mut v);
        v
    }

    #[test]
    fn services_get_type_affinity_ports_and_families() {
        let s = defaulted(
            "Service",
            json!({"spec": {"selector": {"a": "b"}, "ports": [{"port": 80}]}}),
        );
        assert_eq!(
            s["spec"],
            json!({
            "selector": {"a": "b"}, "ports": [{"port": 80, "protocol": "TCP", "targetPort": 80}],
            "sessionAffinity": "None", "type": "ClusterIP", "internalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "SingleStack", "ipFamilies": ["IPv4"]})
        );
        let lb = defaulted(
            "Service",
            json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80, "targetPort": "http"}]}}),
        );
        assert_eq!(lb["spec"]["externalTrafficPolicy"], json!("Cluster"));
        assert_eq!(lb["spec"]["allocateLoadBalancerNodePorts"], json!(true));
        assert_eq!(lb["spec"]["ports"][0]["targetPort"], json!("http"));
        let headless = defaulted("Service", json!({"spec": {"clusterIP": "None"}}));
        assert_eq!(
            headless["spec"]["ipFamilyPolicy"],
            json!("RequireDualStack")
        );
        assert_eq!(headless["spec"]["ipFamilies"], json!(["IPv4", "IPv6"]));
        let ext = defaulted(
            "Service",
            json!({"spec": {"type": "ExternalName", "externalName": "a.b"}}),
        );
        assert!(ext["spec"].get("ipFamilies").is_none());
        assert!(ext["spec"].get("internalTrafficPolicy").is_none());
        let client = defaulted("Service", json!({"spec": {"sessionAffinity": "ClientIP"}}));
        assert_eq!(
            client["spec"]["sessionAffinityConfig"],
            json!({"clientIP": {"timeoutSeconds": 10800}})
        );
    }

    #[test]
    fn secrets_default_to_opaque_and_fold_string_data() {
        let s = defaulted(
            "Secret",
            json!({"data": {"a": "eA=="}, "stringData": {"b": "hello", "a": "yz"}}),
        );
        assert_eq!(
            s,
            json!({"type": "Opaque", "data": {"a": "eXo=", "b": "aGVsbG8="}})
        );
        assert_eq!(super::base64(b"foobar"), "Zm9vYmFy");
        assert_eq!(super::base64(b"f"), "Zg==");
    }

    #[test]
    fn namespaces_get_name_label_finalizer_and_phase() {
        let ns = defaulted("Namespace", json!({"metadata": {"name": "dev"}}));
        assert_eq!(
            ns,
            json!({
            "metadata": {"name": "dev", "labels": {"kubernetes.io/metadata.name": "dev"}},
            "status": {"phase": "Active"}})
        );
    }

    #[test]
    fn volumes_and_claims_get_modes_and_phases() {
        let pv = defaulted("PersistentVolume", json!({"spec": {}}));
        assert_eq!(
            pv,
            json!({"spec": {"persistentVolumeReclaimPolicy": "Retain", "volumeMode": "Filesystem"}, "status": {"phase": "Pending"}})
        );
        let pvc = defaulted("PersistentVolumeClaim", json!({}));
        assert_eq!(
            pvc,
            json!({"spec": {"volumeMode": "Filesystem"}, "status": {"phase": "Pending"}})
        );
    }

    #[test]
    fn replication_controllers_copy_template_labels() {
        let rc = defaulted(
            "ReplicationController",
            json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}}),
        );
        assert_eq!(rc["spec"]["selector"], json!({"a": "b"}));
        assert_eq!(rc["metadata"]["labels"], json!({"a": "b"}));
        assert_eq!(rc["spec"]["replicas"], json!(1));
    }

    #[test]
    fn container_limit_ranges_fill_defaults_from_max_and_min() {
        let lr = defaulted(
            "LimitRange",
            json!({"spec": {"limits": [{"type": "Container", "max": {"cpu": "2"}, "min": {"memory": "1Mi"}}]}}),
        );
        assert_eq!(lr["spec"]["limits"][0]["default"], json!({"cpu": "2"}));
        assert_eq!(
            lr["spec"]["limits"][0]["defaultRequest"],
            json!({"cpu": "2", "memory": "1Mi"})
        );
    }
}
