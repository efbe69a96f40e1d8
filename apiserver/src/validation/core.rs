//! Validation of the core ("") group's kinds other than Service: Pod, PodTemplate,
//! ReplicationController, ConfigMap, Secret, Namespace, Endpoints, ResourceQuota, LimitRange,
//! PersistentVolume(Claim), ServiceAccount, Node.

use serde_json::Value;

use super::json::{self, child, key, Errs};
use super::meta::{map_selector_matches, validate_labels};
use super::names::{is_config_map_key, is_qualified_name, range_error, IP_ERROR};
use super::pod::{validate_pod_spec, validate_pod_template, validate_protocol};
use super::quantity::{quantity_text, quantity_value};
use super::FieldError;

const MAX_SECRET_SIZE: usize = 1024 * 1024;

/// PodTemplate: its template, as a pod's.
pub fn validate_pod_template_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let t = json::obj_at(obj, "", "template", errs).unwrap_or(&empty);
    validate_pod_template(t, "template", errs);
}

/// ServiceAccount: each secret reference has a name.
pub fn validate_service_account(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    for (p, s) in json::objs_at(obj, "", "secrets", errs) {
        json::str_at(s, &p, "name", errs);
    }
}

/// The entry points with the one signature kinds' strategies call.
pub fn validate_rc_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_rc(obj, errs);
}

pub fn validate_namespace_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_namespace(obj, errs);
}

pub fn validate_endpoints_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_endpoints(obj, errs);
}

pub fn validate_resource_quota_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_resource_quota(obj, errs);
}

pub fn validate_limit_range_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_limit_range(obj, errs);
}

pub fn validate_pv_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_pv(obj, errs);
}

fn spec<'a>(obj: &'a Value, errs: &mut Errs) -> &'a Value {
    static EMPTY: std::sync::OnceLock<Value> = std::sync::OnceLock::new();
    json::obj_at(obj, "", "spec", errs)
        .unwrap_or_else(|| EMPTY.get_or_init(|| Value::Object(Default::default())))
}

pub fn validate_pod(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let s = spec(obj, errs);
    validate_pod_spec(s, "spec", errs);
    match old {
        Some(old) => super::pod_update::validate_pod_update(obj, old, errs),
        None => {
            let gated = s["schedulingGates"]
                .as_array()
                .is_some_and(|g| !g.is_empty());
            let on_node = s["nodeName"].as_str().is_some_and(|n| !n.is_empty());
            if gated && on_node {
                errs.push(FieldError::forbidden(
                    "spec.nodeName",
                    "cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
    }
}

fn validate_rc(obj: &Value, errs: &mut Errs) {
    let s = spec(obj, errs);
    json::non_negative_at(s, "spec", "replicas", errs);
    json::non_negative_at(s, "spec", "minReadySeconds", errs);
    let selector = json::str_map_at(s, "spec", "selector", errs);
    if selector.is_empty() {
        errs.push(FieldError::required("spec.selector", ""));
    } else {
        validate_labels(&selector, "spec.selector", errs);
    }
    let Some(t) = json::obj_at(s, "spec", "template", errs) else {
        errs.push(FieldError::required("spec.template", ""));
        return;
    };
    let labels = crate::json::value_at(t, &["metadata", "labels"])
        .cloned()
        .unwrap_or(Value::Null);
    if !selector.is_empty() {
        let sel = s.get("selector").unwrap_or(&Value::Null);
        if !map_selector_matches(sel, &labels) {
            errs.push(FieldError::invalid(
                "spec.template.metadata.labels",
                labels.clone(),
                "`selector` does not match template `labels`",
            ));
        }
    }
    validate_pod_template(t, "spec.template", errs);
    let policy = crate::json::opt_str_at(t, &["spec", "restartPolicy"]).unwrap_or("");
    if policy != "Always" {
        errs.push(FieldError::not_supported(
            "spec.template.spec.restartPolicy",
            policy,
            &["Always"],
        ));
    }
    if crate::json::value_at(t, &["spec", "activeDeadlineSeconds"]).is_some() {
        errs.push(FieldError::invalid(
            "spec.template.spec.activeDeadlineSeconds",
            t["spec"]["activeDeadlineSeconds"].clone(),
            "activeDeadlineSeconds in ReplicationController is not Supported",
        ));
    }
}

fn validate_data_keys(obj: &Value, field: &str, errs: &mut Errs) -> Vec<String> {
    let mut keys = Vec::new();
    if let Some(m) = json::map_at(obj, "", field, errs) {
        for (k, v) in m {
            for msg in is_config_map_key(k) {
                errs.push(FieldError::invalid(key(field, k), k.as_str(), msg));
            }
            if !v.is_string() {
                errs.push(FieldError::invalid(
                    key(field, k),
                    v.clone(),
                    "must be a string",
                ));
            }
            keys.push(k.clone());
        }
    }
    keys
}

fn immutable_data(obj: &Value, old: Option<&Value>, fields: &[&str], errs: &mut Errs) {
    let Some(old) = old else { return };
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if obj.get("immutable").and_then(Value::as_bool) != Some(true) {
        errs.push(FieldError::forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in fields {
        if obj.get(f) != old.get(f) {
            errs.push(FieldError::forbidden(
                *f,
                "field is immutable when `immutable` is set",
            ));
        }
    }
}

pub fn validate_config_map(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let data = validate_data_keys(obj, "data", errs);
    let binary = validate_data_keys(obj, "binaryData", errs);
    for k in &binary {
        if data.contains(k) {
            errs.push(FieldError::invalid(
                key("data", k),
                k.as_str(),
                "duplicate of key present in binaryData",
            ));
        }
    }
    let size: usize = ["data", "binaryData"]
        .iter()
        .filter_map(|f| obj.get(f).and_then(Value::as_object))
        .flat_map(|m| m.iter())
        .map(|(k, v)| k.len() + v.as_str().map_or(0, str::len))
        .sum();
    if size > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("", MAX_SECRET_SIZE));
    }
    json::bool_at(obj, "", "immutable", errs);
    immutable_data(obj, old, &["data", "binaryData"], errs);
}

fn base64_decoded_len(s: &str) -> Option<usize> {
    let valid = s.len().is_multiple_of(4)
        && s.trim_end_matches('=')
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || c == b'+' || c == b'/')
        && s.len() - s.trim_end_matches('=').len() <= 2;
    valid.then(|| s.len() / 4 * 3 - (s.len() - s.trim_end_matches('=').len()))
}

pub fn validate_secret(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    validate_data_keys(obj, "data", errs);
    let mut size = 0;
    let data = obj.get("data").and_then(Value::as_object);
    for (k, v) in data.into_iter().flatten() {
        if let Some(s) = v.as_str() {
            match base64_decoded_len(s) {
                Some(n) => size += k.len() + n,
                None => errs.push(FieldError::invalid(
                    key("data", k),
                    "<secret contents redacted>",
                    "illegal base64 data",
                )),
            }
        }
    }
    if size > MAX_SECRET_SIZE {
        errs.push(FieldError::too_long("data", MAX_SECRET_SIZE));
    }
    let has = |k: &str| data.is_some_and(|d| d.contains_key(k));
    let typ = json::str_or_empty(obj, "", "type", errs);
    match typ {
        "kubernetes.io/service-account-token" => {
            let sa = crate::json::opt_str_at(
                obj,
                &[
                    "metadata",
                    "annotations",
                    "kubernetes.io/service-account.name",
                ],
            );
            if sa.unwrap_or("").is_empty() {
                errs.push(FieldError::required(
                    "metadata.annotations[kubernetes.io/service-account.name]",
                    "",
                ));
            }
        }
        "kubernetes.io/dockercfg" if !has(".dockercfg") => {
            errs.push(FieldError::required("data[.dockercfg]", ""));
        }
        "kubernetes.io/dockerconfigjson" if !has(".dockerconfigjson") => {
            errs.push(FieldError::required("data[.dockerconfigjson]", ""));
        }
        "kubernetes.io/basic-auth" if !has("username") && !has("password") => {
            errs.push(FieldError::required("data[username]", ""));
            errs.push(FieldError::required("data[password]", ""));
        }
        "kubernetes.io/ssh-auth" if !has("ssh-privatekey") => {
            errs.push(FieldError::required("data[ssh-privatekey]", ""));
        }
        "kubernetes.io/tls" => {
            for k in ["tls.crt", "tls.key"] {
                if !has(k) {
                    errs.push(FieldError::required(key("data", k), ""));
                }
            }
        }
        _ => {}
    }
    json::bool_at(obj, "", "immutable", errs);
    if let Some(old) = old {
        let old_type = old.get("type").and_then(Value::as_str).unwrap_or("");
        if old_type != typ {
            errs.push(FieldError::invalid("type", typ, "field is immutable"));
        }
    }
    immutable_data(obj, old, &["data"], errs);
}

fn validate_namespace(obj: &Value, errs: &mut Errs) {
    let Some(s) = json::obj_at(obj, "", "spec", errs) else {
        return;
    };
    for (i, f) in json::strs_at(s, "spec", "finalizers", errs) {
        let p = json::index("spec.finalizers", i);
        let msgs = is_qualified_name(f);
        for msg in &msgs {
            errs.push(FieldError::invalid(&p, f, msg.clone()));
        }
        if msgs.is_empty() && !f.contains('/') && f != "kubernetes" {
            errs.push(FieldError::invalid(
                &p,
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
}

fn validate_endpoints(obj: &Value, errs: &mut Errs) {
    for (sp, subset) in json::objs_at(obj, "", "subsets", errs) {
        for list in ["addresses", "notReadyAddresses"] {
            for (ap, addr) in json::objs_at(subset, &sp, list, errs) {
                let ip = json::str_or_empty(addr, &ap, "ip", errs);
                if !super::names::is_ip(ip) {
                    errs.push(FieldError::invalid(child(&ap, "ip"), ip, IP_ERROR));
                }
            }
        }
        let ports = json::objs_at(subset, &sp, "ports", errs);
        let require_name = ports.len() > 1;
        for (pp, port) in ports {
            let name = json::str_or_empty(port, &pp, "name", errs);
            if require_name && name.is_empty() {
                errs.push(FieldError::required(child(&pp, "name"), ""));
            } else if !name.is_empty() {
                for msg in super::names::is_dns1123_label(name) {
                    errs.push(FieldError::invalid(child(&pp, "name"), name, msg));
                }
            }
            let port_num = json::int_at(port, &pp, "port", errs).unwrap_or(0);
            if !(1..=65535).contains(&port_num) {
                errs.push(FieldError::invalid(
                    child(&pp, "port"),
                    port_num,
                    range_error(1, 65535),
                ));
            }
            validate_protocol(port, &pp, errs);
        }
    }
}

fn validate_resource_list(obj: &Value, path: &str, field: &str, errs: &mut Errs) {
    let Some(m) = json::map_at(obj, path, field, errs) else {
        return;
    };
    let base = child(path, field);
    for (name, v) in m {
        let kp = key(&base, name);
        for msg in is_qualified_name(name) {
            errs.push(FieldError::invalid(&kp, name.as_str(), msg));
        }
        if let Some(q) = quantity_value(v, &kp, errs) {
            if q.value < 0.0 {
                errs.push(FieldError::invalid(
                    &kp,
                    quantity_text(v),
                    "must be greater than or equal to 0",
                ));
            }
        }
    }
}

fn validate_resource_quota(obj: &Value, errs: &mut Errs) {
    let s = spec(obj, errs);
    validate_resource_list(s, "spec", "hard", errs);
    const SCOPES: &[&str] = &[
        "BestEffort",
        "CrossNamespacePodAffinity",
        "NotBestEffort",
        "NotTerminating",
        "PriorityClass",
        "Terminating",
        "VolumeAttributesClass",
    ];
    for (i, scope) in json::strs_at(s, "spec", "scopes", errs) {
        if !SCOPES.contains(&scope) {
            errs.push(FieldError::not_supported(
                json::index("spec.scopes", i),
                scope,
                SCOPES,
            ));
        }
    }
}

fn validate_limit_range(obj: &Value, errs: &mut Errs) {
    let s = spec(obj, errs);
    for (p, item) in json::objs_at(s, "spec", "limits", errs) {
        let typ = json::str_or_empty(item, &p, "type", errs);
        if typ.is_empty() {
            errs.push(FieldError::required(child(&p, "type"), ""));
        }
        for f in [
            "max",
            "min",
            "default",
            "defaultRequest",
            "maxLimitRequestRatio",
        ] {
            validate_resource_list(item, &p, f, errs);
        }
    }
}

const ACCESS_MODES: &[&str] = &[
    "ReadOnlyMany",
    "ReadWriteMany",
    "ReadWriteOnce",
    "ReadWriteOncePod",
];

fn validate_access_modes(s: &Value, errs: &mut Errs) {
    let modes = json::strs_at(s, "spec", "accessModes", errs);
    if modes.is_empty() {
        errs.push(FieldError::required(
            "spec.accessModes",
            "at least 1 access mode is required",
        ));
    }
    for (_, m) in modes {
        if !ACCESS_MODES.contains(&m) {
            errs.push(FieldError::not_supported(
                "spec.accessModes",
                m,
                ACCESS_MODES,
            ));
        }
    }
}

fn validate_volume_mode(s: &Value, errs: &mut Errs) {
    if let Some(mode) = json::str_at(s, "spec", "volumeMode", errs) {
        if mode != "Block" && mode != "Filesystem" {
            errs.push(FieldError::not_supported(
                "spec.volumeMode",
                mode,
                &["Block", "Filesystem"],
            ));
        }
    }
}

fn validate_pv(obj: &Value, errs: &mut Errs) {
    let s = spec(obj, errs);
    validate_access_modes(s, errs);
    match json::map_at(s, "spec", "capacity", errs) {
        None => errs.push(FieldError::required("spec.capacity", "")),
        Some(m) if !m.contains_key("storage") || m.len() != 1 => {
            let keys: Vec<Value> = m.keys().map(|k| Value::from(k.as_str())).collect();
            errs.push(FieldError::not_supported(
                "spec.capacity",
                Value::Array(keys),
                &["storage"],
            ));
        }
        Some(_) => validate_resource_list(s, "spec", "capacity", errs),
    }
    if let Some(p) = json::str_at(s, "spec", "persistentVolumeReclaimPolicy", errs) {
        if !matches!(p, "Delete" | "Recycle" | "Retain") {
            errs.push(FieldError::not_supported(
                "spec.persistentVolumeReclaimPolicy",
                p,
                &["Delete", "Recycle", "Retain"],
            ));
        }
    }
    validate_volume_mode(s, errs);
    const SOURCES: &[&str] = &[
        "hostPath",
        "gcePersistentDisk",
        "awsElasticBlockStore",
        "glusterfs",
        "nfs",
        "rbd",
        "quobyte",
        "iscsi",
        "cinder",
        "cephfs",
        "fc",
        "flocker",
        "flexVolume",
        "azureFile",
        "vsphereVolume",
        "azureDisk",
        "photonPersistentDisk",
        "portworxVolume",
        "scaleIO",
        "local",
        "storageos",
        "csi",
    ];
    let n = SOURCES.iter().filter(|k| json::has(s, k)).count();
    if n == 0 {
        errs.push(FieldError::required("spec", "must specify a volume type"));
    } else if n > 1 {
        errs.push(FieldError::forbidden(
            "spec",
            "may not specify more than 1 volume type",
        ));
    }
}

pub fn validate_pvc(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let s = spec(obj, errs);
    validate_access_modes(s, errs);
    validate_volume_mode(s, errs);
    let has_storage = crate::json::value_at(s, &["resources", "requests", "storage"]).is_some();
    if let Some(r) = json::obj_at(s, "spec", "resources", errs) {
        validate_resource_list(r, "spec.resources", "requests", errs);
        validate_resource_list(r, "spec.resources", "limits", errs);
    }
    if !has_storage {
        errs.push(FieldError::required("spec.resources[storage]", ""));
    }
    if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(m) = v.as_object_mut() {
                for f in ["resources", "volumeName", "volumeAttributesClassName"] {
                    m.remove(f);
                }
            }
            v
        };
        if strip(s) != strip(old_spec) {
            errs.push(FieldError::forbidden("spec", "spec is immutable after creation except resources.requests and volumeAttributesClassName for bound claims"));
        }
    }
}
