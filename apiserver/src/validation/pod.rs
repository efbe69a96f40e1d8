//! Pod spec validation (containers, ports, env, resources, volumes, probes, tolerations),
//! shared by Pods, PodTemplates and every workload's pod template.

use std::collections::HashSet;

use serde_json::Value;

use super::json::{self, child, key, Errs};
use super::meta::validate_labels;
use super::names::{self, is_dns1123_label, is_dns1123_subdomain, is_valid_port_name, range_error};
use super::quantity::{quantity_text, quantity_value};
use super::FieldError;

/// The fields of a volume that name its source (exactly one is set); defaulting uses it too.
pub const VOLUME_SOURCES: &[&str] = &[
    "hostPath",
    "emptyDir",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "gitRepo",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "persistentVolumeClaim",
    "rbd",
    "flexVolume",
    "cinder",
    "cephfs",
    "flocker",
    "downwardAPI",
    "fc",
    "azureFile",
    "configMap",
    "vsphereVolume",
    "quobyte",
    "azureDisk",
    "photonPersistentDisk",
    "projected",
    "portworxVolume",
    "scaleIO",
    "storageos",
    "csi",
    "ephemeral",
    "image",
];

/// Validates a PodTemplateSpec (`template` at `path`): its labels, annotations and pod spec.
pub fn validate_pod_template(template: &Value, path: &str, errs: &mut Errs) {
    if let Some(meta) = json::obj_at(template, path, "metadata", errs) {
        let mp = child(path, "metadata");
        let labels = json::str_map_at(meta, &mp, "labels", errs);
        validate_labels(&labels, &child(&mp, "labels"), errs);
        json::str_map_at(meta, &mp, "annotations", errs);
    }
    let empty = Value::Object(Default::default());
    let spec = json::obj_at(template, path, "spec", errs).unwrap_or(&empty);
    validate_pod_spec(spec, &child(path, "spec"), errs);
}

/// Validates a PodSpec at `path`.
pub fn validate_pod_spec(spec: &Value, path: &str, errs: &mut Errs) {
    let volumes = validate_volumes(spec, path, errs);
    let mut names_seen = HashSet::new();
    let containers = json::objs_at(spec, path, "containers", errs);
    if json::arr_at(spec, path, "containers", &mut Vec::new()).is_empty() {
        errs.push(FieldError::required(child(path, "containers"), ""));
    }
    for (p, c) in json::objs_at(spec, path, "initContainers", errs) {
        validate_container(c, &p, &volumes, &mut names_seen, errs);
    }
    for (p, c) in containers {
        validate_container(c, &p, &volumes, &mut names_seen, errs);
    }
    match json::str_or_empty(spec, path, "restartPolicy", errs) {
        "" => errs.push(FieldError::required(child(path, "restartPolicy"), "")),
        "Always" | "OnFailure" | "Never" => {}
        other => errs.push(FieldError::not_supported(
            child(path, "restartPolicy"),
            other,
            &["Always", "OnFailure", "Never"],
        )),
    }
    match json::str_or_empty(spec, path, "dnsPolicy", errs) {
        "" => errs.push(FieldError::required(child(path, "dnsPolicy"), "")),
        "ClusterFirstWithHostNet" | "ClusterFirst" | "Default" | "None" => {}
        other => errs.push(FieldError::not_supported(
            child(path, "dnsPolicy"),
            other,
            &["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"],
        )),
    }
    let node_selector = json::str_map_at(spec, path, "nodeSelector", errs);
    validate_labels(&node_selector, &child(path, "nodeSelector"), errs);
    for (field, check) in [
        (
            "serviceAccountName",
            is_dns1123_subdomain as fn(&str) -> Vec<String>,
        ),
        ("nodeName", is_dns1123_subdomain),
        ("priorityClassName", is_dns1123_subdomain),
        ("hostname", is_dns1123_label),
        ("subdomain", is_dns1123_label),
    ] {
        if let Some(v) = json::str_at(spec, path, field, errs).filter(|s| !s.is_empty()) {
            for msg in check(v) {
                errs.push(FieldError::invalid(child(path, field), v, msg));
            }
        }
    }
    if let Some(v) = json::int_at(spec, path, "activeDeadlineSeconds", errs) {
        if !(1..=i64::from(i32::MAX)).contains(&v) {
            errs.push(FieldError::invalid(
                child(path, "activeDeadlineSeconds"),
                v,
                range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    json::int_at(spec, path, "terminationGracePeriodSeconds", errs);
    for f in ["hostNetwork", "hostPID", "hostIPC", "enableServiceLinks"] {
        json::bool_at(spec, path, f, errs);
    }
    validate_tolerations(spec, path, errs);
    validate_scheduling_gates(spec, path, errs);
    for (p, s) in json::objs_at(spec, path, "imagePullSecrets", errs) {
        json::str_at(s, &p, "name", errs);
    }
    if let Some(sc) = json::obj_at(spec, path, "securityContext", errs) {
        let sp = child(path, "securityContext");
        for f in ["runAsUser", "runAsGroup", "fsGroup"] {
            if let Some(v) = json::int_at(sc, &sp, f, errs) {
                if !(0..=i64::from(i32::MAX)).contains(&v) {
                    errs.push(FieldError::invalid(
                        child(&sp, f),
                        v,
                        range_error(0, i64::from(i32::MAX)),
                    ));
                }
            }
        }
    }
}

fn validate_volumes(spec: &Value, path: &str, errs: &mut Errs) -> HashSet<String> {
    let mut seen = HashSet::new();
    for (p, vol) in json::objs_at(spec, path, "volumes", errs) {
        let name = json::str_or_empty(vol, &p, "name", errs);
        if name.is_empty() {
            errs.push(FieldError::required(child(&p, "name"), ""));
        } else {
            for msg in is_dns1123_label(name) {
                errs.push(FieldError::invalid(child(&p, "name"), name, msg));
            }
            if !seen.insert(name.to_string()) {
                errs.push(FieldError::duplicate(child(&p, "name"), name));
            }
        }
        let mut count = 0;
        for src in VOLUME_SOURCES {
            if !json::has(vol, src) {
                continue;
            }
            count += 1;
            if count > 1 {
                errs.push(FieldError::forbidden(
                    child(&p, src),
                    "may not specify more than 1 volume type",
                ));
                continue;
            }
            let Some(s) = json::obj_at(vol, &p, src, errs) else {
                continue;
            };
            let sp = child(&p, src);
            let required = match *src {
                "configMap" => Some("name"),
                "secret" => Some("secretName"),
                "persistentVolumeClaim" => Some("claimName"),
                "hostPath" | "nfs" => Some("path"),
                _ => None,
            };
            if let Some(f) = required {
                if json::str_or_empty(s, &sp, f, errs).is_empty() {
                    errs.push(FieldError::required(child(&sp, f), ""));
                }
            }
            if let Some(mode) = json::int_at(s, &sp, "defaultMode", errs) {
                if !(0..=0o777).contains(&mode) {
                    errs.push(FieldError::invalid(
                        child(&sp, "defaultMode"),
                        mode,
                        "must be a number between 0 and 0777 (octal), both inclusive",
                    ));
                }
            }
        }
        if count == 0 {
            errs.push(FieldError::required(
                p.clone(),
                "must specify a volume type",
            ));
        }
    }
    seen
}

fn validate_container(
    c: &Value,
    p: &str,
    volumes: &HashSet<String>,
    names_seen: &mut HashSet<String>,
    errs: &mut Errs,
) {
    let name = json::str_or_empty(c, p, "name", errs);
    if name.is_empty() {
        errs.push(FieldError::required(child(p, "name"), ""));
    } else {
        for msg in is_dns1123_label(name) {
            errs.push(FieldError::invalid(child(p, "name"), name, msg));
        }
        if !names_seen.insert(name.to_string()) {
            errs.push(FieldError::duplicate(child(p, "name"), name));
        }
    }
    let image = json::str_or_empty(c, p, "image", errs);
    if image.is_empty() {
        errs.push(FieldError::required(child(p, "image"), ""));
    } else if image.trim() != image {
        errs.push(FieldError::invalid(
            child(p, "image"),
            image,
            "must not have leading or trailing whitespace",
        ));
    }
    match json::str_or_empty(c, p, "imagePullPolicy", errs) {
        "" => errs.push(FieldError::required(child(p, "imagePullPolicy"), "")),
        "Always" | "IfNotPresent" | "Never" => {}
        other => errs.push(FieldError::not_supported(
            child(p, "imagePullPolicy"),
            other,
            &["Always", "IfNotPresent", "Never"],
        )),
    }
    match json::str_or_empty(c, p, "terminationMessagePolicy", errs) {
        "" => errs.push(FieldError::required(
            child(p, "terminationMessagePolicy"),
            "",
        )),
        "File" | "FallbackToLogsOnError" => {}
        other => errs.push(FieldError::not_supported(
            child(p, "terminationMessagePolicy"),
            other,
            &["File", "FallbackToLogsOnError"],
        )),
    }
    json::strs_at(c, p, "command", errs);
    json::strs_at(c, p, "args", errs);
    validate_ports(c, p, errs);
    validate_env(c, p, errs);
    let mut mount_paths = HashSet::new();
    for (mp, m) in json::objs_at(c, p, "volumeMounts", errs) {
        let vname = json::str_or_empty(m, &mp, "name", errs);
        if vname.is_empty() {
            errs.push(FieldError::required(child(&mp, "name"), ""));
        } else if !volumes.contains(vname) {
            errs.push(FieldError::not_found(child(&mp, "name"), vname));
        }
        let mount_path = json::str_or_empty(m, &mp, "mountPath", errs);
        if mount_path.is_empty() {
            errs.push(FieldError::required(child(&mp, "mountPath"), ""));
        } else if !mount_paths.insert(mount_path.to_string()) {
            errs.push(FieldError::invalid(
                child(&mp, "mountPath"),
                mount_path,
                "must be unique",
            ));
        }
    }
    if let Some(r) = json::obj_at(c, p, "resources", errs) {
        validate_resources(r, &child(p, "resources"), errs);
    }
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        if let Some(pr) = json::obj_at(c, p, probe, errs) {
            validate_probe(pr, &child(p, probe), probe != "readinessProbe", errs);
        }
    }
}

fn validate_ports(c: &Value, p: &str, errs: &mut Errs) {
    let mut port_names = HashSet::new();
    for (pp, port) in json::objs_at(c, p, "ports", errs) {
        if let Some(name) = json::str_at(port, &pp, "name", errs).filter(|s| !s.is_empty()) {
            for msg in is_valid_port_name(name) {
                errs.push(FieldError::invalid(child(&pp, "name"), name, msg));
            }
            if !port_names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(child(&pp, "name"), name));
            }
        }
        match json::int_at(port, &pp, "containerPort", errs) {
            None | Some(0) => errs.push(FieldError::required(child(&pp, "containerPort"), "")),
            Some(n) if !(1..=65535).contains(&n) => errs.push(FieldError::invalid(
                child(&pp, "containerPort"),
                n,
                range_error(1, 65535),
            )),
            _ => {}
        }
        if let Some(n) = json::int_at(port, &pp, "hostPort", errs) {
            if n != 0 && !(1..=65535).contains(&n) {
                errs.push(FieldError::invalid(
                    child(&pp, "hostPort"),
                    n,
                    range_error(1, 65535),
                ));
            }
        }
        validate_protocol(port, &pp, errs);
    }
}

/// Checks `obj.protocol` is TCP, UDP or SCTP (required).
pub fn validate_protocol(obj: &Value, p: &str, errs: &mut Errs) {
    match json::str_or_empty(obj, p, "protocol", errs) {
        "" => errs.push(FieldError::required(child(p, "protocol"), "")),
        "TCP" | "UDP" | "SCTP" => {}
        other => errs.push(FieldError::not_supported(
            child(p, "protocol"),
            other,
            &["SCTP", "TCP", "UDP"],
        )),
    }
}

fn validate_env(c: &Value, p: &str, errs: &mut Errs) {
    for (ep, env) in json::objs_at(c, p, "env", errs) {
        let name = json::str_or_empty(env, &ep, "name", errs);
        if name.is_empty() {
            errs.push(FieldError::required(child(&ep, "name"), ""));
        } else if name
            .bytes()
            .any(|b| !(0x20..0x7f).contains(&b) || b == b'=')
        {
            errs.push(FieldError::invalid(
                child(&ep, "name"),
                name,
                "a valid environment variable name must consist only of printable ASCII characters other than '='",
            ));
        }
        let value = json::str_or_empty(env, &ep, "value", errs);
        if let Some(from) = json::obj_at(env, &ep, "valueFrom", errs) {
            let fp = child(&ep, "valueFrom");
            let sources = [
                "fieldRef",
                "resourceFieldRef",
                "configMapKeyRef",
                "secretKeyRef",
                "fileKeyRef",
            ];
            let n = sources.iter().filter(|s| json::has(from, s)).count();
            if n == 0 {
                errs.push(FieldError::invalid(fp.clone(), "", "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`"));
            } else if n > 1 {
                errs.push(FieldError::invalid(
                    fp.clone(),
                    "",
                    "may not have more than one field specified at a time",
                ));
            }
            if !value.is_empty() {
                errs.push(FieldError::invalid(
                    fp,
                    "",
                    "may not be specified when `value` is not empty",
                ));
            }
        }
    }
    for (ep, from) in json::objs_at(c, p, "envFrom", errs) {
        if let Some(prefix) = json::str_at(from, &ep, "prefix", errs).filter(|s| !s.is_empty()) {
            if prefix
                .bytes()
                .any(|b| !(0x20..0x7f).contains(&b) || b == b'=')
            {
                errs.push(FieldError::invalid(child(&ep, "prefix"), prefix, "a valid environment variable name must consist only of printable ASCII characters other than '='"));
            }
        }
    }
}

fn is_standard_container_resource(name: &str) -> bool {
    matches!(name, "cpu" | "memory" | "ephemeral-storage") || name.starts_with("hugepages-")
}

/// Validates a container's ResourceRequirements at `p` (names, quantities, requests ≤ limits).
pub fn validate_resources(r: &Value, p: &str, errs: &mut Errs) {
    let mut limits = Vec::new();
    for section in ["limits", "requests"] {
        let Some(m) = json::map_at(r, p, section, errs) else {
            continue;
        };
        let sp = child(p, section);
        for (name, v) in m {
            let kp = key(&sp, name);
            for msg in names::is_qualified_name(name) {
                errs.push(FieldError::invalid(&kp, name.as_str(), msg));
            }
            if !name.contains('/') && !is_standard_container_resource(name) {
                errs.push(FieldError::invalid(
                    &kp,
                    name.as_str(),
                    "must be a standard resource for containers",
                ));
            }
            let Some(q) = quantity_value(v, &kp, errs) else {
                continue;
            };
            if q.value < 0.0 {
                errs.push(FieldError::invalid(
                    &kp,
                    quantity_text(v),
                    "must be greater than or equal to 0",
                ));
                continue;
            }
            if section == "limits" {
                limits.push((name.clone(), q.value, quantity_text(v)));
            } else if let Some((_, lim, lim_text)) = limits.iter().find(|(n, _, _)| n == name) {
                if q.value > *lim {
                    errs.push(FieldError::invalid(
                        &kp,
                        quantity_text(v),
                        format!("must be less than or equal to {name} limit of {lim_text}"),
                    ));
                }
            }
        }
    }
}

fn validate_probe(pr: &Value, p: &str, success_must_be_one: bool, errs: &mut Errs) {
    let handlers = ["exec", "httpGet", "tcpSocket", "grpc"];
    let n = handlers.iter().filter(|h| json::has(pr, h)).count();
    if n == 0 {
        errs.push(FieldError::required(p, "must specify a handler type"));
    } else if n > 1 {
        errs.push(FieldError::forbidden(
            p,
            "may not specify more than 1 handler type",
        ));
    }
    for f in [
        "initialDelaySeconds",
        "timeoutSeconds",
        "periodSeconds",
        "successThreshold",
        "failureThreshold",
    ] {
        json::non_negative_at(pr, p, f, errs);
    }
    if success_must_be_one {
        if let Some(v) = json::int_at(pr, p, "successThreshold", &mut Vec::new()) {
            if v != 1 {
                errs.push(FieldError::invalid(
                    child(p, "successThreshold"),
                    v,
                    "must be 1",
                ));
            }
        }
    }
    if let Some(h) = json::obj_at(pr, p, "httpGet", errs) {
        let hp = child(p, "httpGet");
        if let Some(scheme) = json::str_at(h, &hp, "scheme", errs) {
            if scheme != "HTTP" && scheme != "HTTPS" {
                errs.push(FieldError::not_supported(
                    child(&hp, "scheme"),
                    scheme,
                    &["HTTP", "HTTPS"],
                ));
            }
        }
        validate_port_ref(h, &hp, errs);
    }
    if let Some(t) = json::obj_at(pr, p, "tcpSocket", errs) {
        validate_port_ref(t, &child(p, "tcpSocket"), errs);
    }
}

/// Checks an int-or-string `port` field: a port number or an IANA port name.
pub fn validate_port_ref(obj: &Value, p: &str, errs: &mut Errs) {
    let fp = child(p, "port");
    match obj.get("port") {
        Some(Value::String(s)) => {
            for msg in is_valid_port_name(s) {
                errs.push(FieldError::invalid(&fp, s.as_str(), msg));
            }
        }
        Some(v @ Value::Number(_)) => {
            if let Some(n) = json::as_int(v, &fp, errs) {
                if !(1..=65535).contains(&n) {
                    errs.push(FieldError::invalid(&fp, n, range_error(1, 65535)));
                }
            }
        }
        None | Some(Value::Null) => errs.push(FieldError::required(fp, "")),
        Some(other) => errs.push(FieldError::invalid(
            fp,
            other.clone(),
            "must be an integer or a string",
        )),
    }
}

fn validate_tolerations(spec: &Value, path: &str, errs: &mut Errs) {
    for (tp, t) in json::objs_at(spec, path, "tolerations", errs) {
        let k = json::str_or_empty(t, &tp, "key", errs);
        if !k.is_empty() {
            for msg in names::is_qualified_name(k) {
                errs.push(FieldError::invalid(child(&tp, "key"), k, msg));
            }
        }
        let op = json::str_or_empty(t, &tp, "operator", errs);
        let value = json::str_or_empty(t, &tp, "value", errs);
        match op {
            "" | "Equal" => {
                if k.is_empty() {
                    errs.push(FieldError::invalid(child(&tp, "operator"), op, "operator must be Exists when `key` is empty, which means \"match all values and all keys\""));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    errs.push(FieldError::invalid(
                        child(&tp, "operator"),
                        t.clone(),
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            other => errs.push(FieldError::not_supported(
                child(&tp, "operator"),
                other,
                &["Equal", "Exists"],
            )),
        }
        let effect = json::str_or_empty(t, &tp, "effect", errs);
        if !effect.is_empty() && !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute")
        {
            errs.push(FieldError::not_supported(
                child(&tp, "effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
        if json::has(t, "tolerationSeconds") && effect != "NoExecute" {
            errs.push(FieldError::invalid(
                child(&tp, "effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        json::int_at(t, &tp, "tolerationSeconds", errs);
    }
}

/// Each scheduling gate has a qualified name, once.
fn validate_scheduling_gates(spec: &Value, path: &str, errs: &mut Errs) {
    let mut seen = HashSet::new();
    for (gp, gate) in json::objs_at(spec, path, "schedulingGates", errs) {
        let name = json::str_or_empty(gate, &gp, "name", errs);
        for msg in names::is_qualified_name(name) {
            errs.push(FieldError::invalid(&gp, name, msg));
        }
        if !seen.insert(name) {
            errs.push(FieldError::duplicate(&gp, name));
        }
    }
}
