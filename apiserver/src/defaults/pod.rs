//! Pod spec defaulting (SetDefaults_PodSpec, _Container, _Probe, _Volume, … and, for Pods
//! only, SetDefaults_Pod), applied to Pods and to every pod template.

use serde_json::{json, Value};

use super::{
    ensure_obj, get_obj, is_empty, objs_mut, set_if_absent, set_int_if_zero, set_str_if_empty,
};

/// Defaults a Pod object (spec-level defaults plus the Pod-only ones).
pub fn default_pod(obj: &mut Value) {
    let Some(spec) = ensure_obj(obj, "spec") else {
        return;
    };
    for list in ["containers", "initContainers"] {
        for c in objs_mut(spec, list) {
            requests_from_limits(c);
        }
    }
    set_if_absent(spec, "enableServiceLinks", json!(true));
    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for list in ["containers", "initContainers"] {
            for c in objs_mut(spec, list) {
                for p in objs_mut(c, "ports") {
                    if let Some(cp) = p.get("containerPort").cloned() {
                        set_int_if_zero(p, "hostPort", cp.as_i64().unwrap_or(0));
                    }
                }
            }
        }
    }
    default_pod_spec(spec);
}

fn requests_from_limits(c: &mut Value) {
    let Some(res) = get_obj(c, "resources") else {
        return;
    };
    let Some(limits) = res.get("limits").and_then(Value::as_object).cloned() else {
        return;
    };
    let Some(requests) = ensure_obj(res, "requests").and_then(Value::as_object_mut) else {
        return;
    };
    for (k, v) in limits {
        requests.entry(k).or_insert(v);
    }
}

/// Defaults a PodTemplateSpec's spec (creating the spec when absent).
pub fn default_template(parent: &mut Value, key: &str) {
    let Some(t) = ensure_obj(parent, key) else {
        return;
    };
    if let Some(spec) = ensure_obj(t, "spec") {
        default_pod_spec(spec);
    }
}

/// SetDefaults_PodSpec and the defaults of everything a PodSpec holds.
pub fn default_pod_spec(spec: &mut Value) {
    set_str_if_empty(spec, "dnsPolicy", "ClusterFirst");
    set_str_if_empty(spec, "restartPolicy", "Always");
    set_if_absent(spec, "securityContext", json!({}));
    set_if_absent(spec, "terminationGracePeriodSeconds", json!(30));
    set_str_if_empty(spec, "schedulerName", "default-scheduler");
    for list in ["containers", "initContainers", "ephemeralContainers"] {
        for c in objs_mut(spec, list) {
            default_container(c);
        }
    }
    for v in objs_mut(spec, "volumes") {
        default_volume(v);
    }
}

/// The tag of an image reference: "latest" when neither a tag nor a digest is given.
fn image_tag(image: &str) -> &str {
    if image.contains('@') {
        let before = image.split('@').next().unwrap_or("");
        let last = before.rsplit('/').next().unwrap_or("");
        return last.split_once(':').map_or("", |(_, t)| t);
    }
    let last = image.rsplit('/').next().unwrap_or("");
    last.split_once(':').map_or("latest", |(_, t)| t)
}

fn default_container(c: &mut Value) {
    if is_empty(c, "imagePullPolicy") {
        let image = c.get("image").and_then(Value::as_str).unwrap_or("");
        let policy = if image_tag(image) == "latest" {
            "Always"
        } else {
            "IfNotPresent"
        };
        set_str_if_empty(c, "imagePullPolicy", policy);
    }
    set_str_if_empty(c, "terminationMessagePath", "/dev/termination-log");
    set_str_if_empty(c, "terminationMessagePolicy", "File");
    set_if_absent(c, "resources", json!({}));
    for p in objs_mut(c, "ports") {
        set_str_if_empty(p, "protocol", "TCP");
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(p) = get_obj(c, probe) {
            set_int_if_zero(p, "timeoutSeconds", 1);
            set_int_if_zero(p, "periodSeconds", 10);
            set_int_if_zero(p, "successThreshold", 1);
            set_int_if_zero(p, "failureThreshold", 3);
            default_handler(p);
        }
    }
    if let Some(lc) = get_obj(c, "lifecycle") {
        for hook in ["postStart", "preStop"] {
            if let Some(h) = get_obj(lc, hook) {
                default_handler(h);
            }
        }
    }
    for e in objs_mut(c, "env") {
        if let Some(fr) = get_obj(e, "valueFrom").and_then(|vf| get_obj(vf, "fieldRef")) {
            set_str_if_empty(fr, "apiVersion", "v1");
        }
    }
}

fn default_handler(h: &mut Value) {
    if let Some(g) = get_obj(h, "httpGet") {
        set_str_if_empty(g, "path", "/");
        set_str_if_empty(g, "scheme", "HTTP");
    }
}

use crate::validation::pod::VOLUME_SOURCES;

fn default_volume(v: &mut Value) {
    if VOLUME_SOURCES
        .iter()
        .all(|s| v.get(*s).is_none_or(Value::is_null))
    {
        set_if_absent(v, "emptyDir", json!({}));
    }
    for src in ["secret", "configMap", "downwardAPI", "projected"] {
        if let Some(s) = get_obj(v, src) {
            set_if_absent(s, "defaultMode", json!(420));
            if src == "downwardAPI" {
                for item in objs_mut(s, "items") {
                    if let Some(fr) = get_obj(item, "fieldRef") {
                        set_str_if_empty(fr, "apiVersion", "v1");
                    }
                }
            }
        }
    }
    if let Some(p) = get_obj(v, "projected") {
        for src in objs_mut(p, "sources") {
            if let Some(t) = get_obj(src, "serviceAccountToken") {
                set_if_absent(t, "expirationSeconds", json!(3600));
            }
            if let Some(d) = get_obj(src, "downwardAPI") {
                for item in objs_mut(d, "items") {
                    if let Some(fr) = get_obj(item, "fieldRef") {
                        set_str_if_empty(fr, "apiVersion", "v1");
                    }
                }
            }
        }
    }
    if let Some(h) = get_obj(v, "hostPath") {
        set_if_absent(h, "type", json!(""));
    }
    if let Some(i) = get_obj(v, "iscsi") {
        set_str_if_empty(i, "iscsiInterface", "default");
    }
    if let Some(r) = get_obj(v, "rbd") {
        set_str_if_empty(r, "pool", "rbd");
        set_str_if_empty(r, "user", "admin");
        set_str_if_empty(r, "keyring", "/etc/ceph/keyring");
    }
    if let Some(a) = get_obj(v, "azureDisk") {
        set_if_absent(a, "cachingMode", json!("ReadWrite"));
        set_if_absent(a, "fsType", json!("ext4"));
        set_if_absent(a, "readOnly", json!(false));
        set_if_absent(a, "kind", json!("Shared"));
    }
    if let Some(s) = get_obj(v, "scaleIO") {
        set_str_if_empty(s, "storageMode", "ThinProvisioned");
        set_str_if_empty(s, "fsType", "xfs");
    }
    if let Some(i) = get_obj(v, "image") {
        if is_empty(i, "pullPolicy") {
            let reference = i.get("reference").and_then(Value::as_str).unwrap_or("");
            let policy = if image_tag(reference) == "latest" {
                "Always"
            } else {
                "IfNotPresent"
            };
            set_str_if_empty(i, "pullPolicy", policy);
        }
    }
    if let Some(spec) = get_obj(v, "ephemeral")
        .and_then(|e| get_obj(e, "volumeClaimTemplate"))
        .and_then(|t| get_obj(t, "spec"))
    {
        set_if_absent(spec, "volumeMode", json!("Filesystem"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_pull_policy_follows_the_tag() {
        let cases = vec![
            ("nginx", "Always"),
            ("nginx:latest", "Always"),
            ("nginx:1.25", "IfNotPresent"),
            ("registry:5000/team/app", "Always"),
            ("registry:5000/team/app:v1", "IfNotPresent"),
            ("nginx@sha256:abcd", "IfNotPresent"),
            ("nginx:latest@sha256:abcd", "Always"),
        ];
        for (image, want) in cases {
            let mut c = json!({"name": "c", "image": image});
            default_container(&mut c);
            assert_eq!(c["imagePullPolicy"], json!(want), "{image}");
        }
    }

    #[test]
    fn a_bare_pod_gets_upstreams_defaults() {
        let mut pod = json!({"spec": {"containers": [{"name": "c", "image": "nginx:1",
            "ports": [{"containerPort": 80}],
            "livenessProbe": {"httpGet": {"port": 80}},
            "resources": {"limits": {"cpu": "1"}}}],
            "volumes": [{"name": "v"}, {"name": "s", "secret": {"secretName": "x"}}]}});
        default_pod(&mut pod);
        assert_eq!(
            pod,
            json!({"spec": {
            "containers": [{"name": "c", "image": "nginx:1", "imagePullPolicy": "IfNotPresent",
                "terminationMessagePath": "/dev/termination-log", "terminationMessagePolicy": "File",
                "ports": [{"containerPort": 80, "protocol": "TCP"}],
                "livenessProbe": {"httpGet": {"port": 80, "path": "/", "scheme": "HTTP"},
                    "timeoutSeconds": 1, "periodSeconds": 10, "successThreshold": 1, "failureThreshold": 3},
                "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}}],
            "volumes": [{"name": "v", "emptyDir": {}}, {"name": "s", "secret": {"secretName": "x", "defaultMode": 420}}],
            "enableServiceLinks": true,
            "dnsPolicy": "ClusterFirst", "restartPolicy": "Always", "securityContext": {},
            "terminationGracePeriodSeconds": 30, "schedulerName": "default-scheduler"}})
        );
    }

    #[test]
    fn host_network_pods_default_host_ports() {
        let mut pod = json!({"spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "x", "ports": [{"containerPort": 53}]}]}});
        default_pod(&mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["ports"][0]["hostPort"],
            json!(53)
        );
    }

    #[test]
    fn templates_do_not_get_pod_only_defaults() {
        let mut parent = json!({"template": {"spec": {"containers": [{"name": "c", "image": "x", "resources": {"limits": {"cpu": "1"}}}]}}});
        default_template(&mut parent, "template");
        assert!(parent["template"]["spec"]
            .get("enableServiceLinks")
            .is_none());
        assert!(parent["template"]["spec"]["containers"][0]["resources"]
            .get("requests")
            .is_none());
        assert_eq!(parent["template"]["spec"]["restartPolicy"], json!("Always"));
    }
}
