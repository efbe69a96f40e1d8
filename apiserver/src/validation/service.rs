//! Service validation: type, ports, cluster IPs, external names, session affinity, IP families
//! and the fields that may not change on update.

use std::collections::HashSet;

use serde_json::{json, Value};

use super::json::{self, child, Errs};
use super::meta::validate_labels;
use super::names::{
    is_dns1123_label, is_dns1123_subdomain, is_ip, is_valid_port_name, range_error, IP_ERROR,
};
use super::pod::validate_protocol;
use super::FieldError;

const TYPES: &[&str] = &["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];

/// Validates a Service (create or update).
pub fn validate_service(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    let typ = json::str_or_empty(s, "spec", "type", errs);
    match typ {
        "" => errs.push(FieldError::required("spec.type", "")),
        t if !TYPES.contains(&t) => errs.push(FieldError::not_supported("spec.type", t, TYPES)),
        _ => {}
    }
    let cluster_ip = json::str_or_empty(s, "spec", "clusterIP", errs);
    let cluster_ips = json::strs_at(s, "spec", "clusterIPs", errs);
    let headless = cluster_ip == "None";
    let ports = json::objs_at(s, "spec", "ports", errs);
    if ports.is_empty() && !headless && typ != "ExternalName" {
        errs.push(FieldError::required("spec.ports", ""));
    }
    if typ == "ExternalName" {
        if !cluster_ip.is_empty() {
            errs.push(FieldError::forbidden(
                "spec.clusterIP",
                "may not be set for ExternalName services",
            ));
        }
        let name = json::str_or_empty(s, "spec", "externalName", errs);
        let trimmed = name.strip_suffix('.').unwrap_or(name);
        if trimmed.is_empty() {
            errs.push(FieldError::required("spec.externalName", ""));
        } else {
            for msg in is_dns1123_subdomain(trimmed) {
                errs.push(FieldError::invalid("spec.externalName", name, msg));
            }
        }
    } else {
        if cluster_ips.is_empty() && !cluster_ip.is_empty() && !headless && !is_ip(cluster_ip) {
            errs.push(FieldError::invalid(
                "spec.clusterIPs[0]",
                cluster_ip,
                IP_ERROR,
            ));
        }
        for (i, ip) in &cluster_ips {
            let headless_marker = *i == 0 && *ip == "None";
            if !headless_marker && !is_ip(ip) {
                errs.push(FieldError::invalid(
                    json::index("spec.clusterIPs", *i),
                    *ip,
                    IP_ERROR,
                ));
            }
        }
        if !cluster_ips.is_empty() && cluster_ips[0].1 != cluster_ip && !cluster_ip.is_empty() {
            errs.push(FieldError::invalid(
                "spec.clusterIPs",
                s.get("clusterIPs").cloned().unwrap_or(Value::Null),
                "first value must match `clusterIP`",
            ));
        }
    }
    validate_ports(&ports, typ, errs);
    match json::str_or_empty(s, "spec", "sessionAffinity", errs) {
        "" => errs.push(FieldError::required("spec.sessionAffinity", "")),
        "None" | "ClientIP" => {}
        other => errs.push(FieldError::not_supported(
            "spec.sessionAffinity",
            other,
            &["ClientIP", "None"],
        )),
    }
    if let Some(t) =
        crate::json::value_at(s, &["sessionAffinityConfig", "clientIP", "timeoutSeconds"])
    {
        let p = "spec.sessionAffinityConfig.clientIP.timeoutSeconds";
        if let Some(v) = json::as_int(t, p, errs) {
            if !(1..=86400).contains(&v) {
                errs.push(FieldError::invalid(p, v, range_error(1, 86400)));
            }
        }
    }
    let selector = json::str_map_at(s, "spec", "selector", errs);
    validate_labels(&selector, "spec.selector", errs);
    if let Some(p) = json::str_at(s, "spec", "ipFamilyPolicy", errs) {
        if !matches!(p, "SingleStack" | "PreferDualStack" | "RequireDualStack") {
            errs.push(FieldError::not_supported(
                "spec.ipFamilyPolicy",
                p,
                &["PreferDualStack", "RequireDualStack", "SingleStack"],
            ));
        }
    }
    let families = json::strs_at(s, "spec", "ipFamilies", errs);
    let mut seen = HashSet::new();
    for (i, f) in &families {
        let p = json::index("spec.ipFamilies", *i);
        if *f != "IPv4" && *f != "IPv6" {
            errs.push(FieldError::not_supported(&p, *f, &["IPv4", "IPv6"]));
        } else if !seen.insert(*f) {
            errs.push(FieldError::duplicate(&p, *f));
        }
    }
    if families.len() > 2 {
        errs.push(FieldError::invalid(
            "spec.ipFamilies",
            s["ipFamilies"].clone(),
            "may specify no more than one IP for each IP family",
        ));
    }
    for f in ["externalTrafficPolicy", "internalTrafficPolicy"] {
        if let Some(v) = json::str_at(s, "spec", f, errs) {
            if v != "Cluster" && v != "Local" {
                errs.push(FieldError::not_supported(
                    child("spec", f),
                    v,
                    &["Cluster", "Local"],
                ));
            }
        }
    }
    for (i, ip) in json::strs_at(s, "spec", "externalIPs", errs) {
        if !is_ip(ip) {
            errs.push(FieldError::invalid(
                json::index("spec.externalIPs", i),
                ip,
                IP_ERROR,
            ));
        }
    }
    if let Some(old) = old {
        validate_update(s, old, typ, errs);
    }
}

fn validate_ports(ports: &[(String, &Value)], typ: &str, errs: &mut Errs) {
    let require_name = ports.len() > 1;
    let mut names = HashSet::new();
    let mut keys = HashSet::new();
    for (p, port) in ports {
        let name = json::str_or_empty(port, p, "name", errs);
        if require_name && name.is_empty() {
            errs.push(FieldError::required(child(p, "name"), ""));
        } else if !name.is_empty() {
            for msg in is_dns1123_label(name) {
                errs.push(FieldError::invalid(child(p, "name"), name, msg));
            }
            if !names.insert(name.to_string()) {
                errs.push(FieldError::duplicate(child(p, "name"), name));
            }
        }
        let num = json::int_at(port, p, "port", errs).unwrap_or(0);
        if !(1..=65535).contains(&num) {
            errs.push(FieldError::invalid(
                child(p, "port"),
                num,
                range_error(1, 65535),
            ));
        }
        validate_protocol(port, p, errs);
        let protocol = port.get("protocol").and_then(Value::as_str).unwrap_or("");
        if !keys.insert((num, protocol.to_string())) {
            errs.push(FieldError::duplicate(
                p.clone(),
                json!({"port": num, "protocol": protocol}),
            ));
        }
        let tp = child(p, "targetPort");
        match port.get("targetPort") {
            Some(Value::String(t)) if !t.is_empty() => {
                for msg in is_valid_port_name(t) {
                    errs.push(FieldError::invalid(&tp, t.as_str(), msg));
                }
            }
            Some(v @ Value::Number(_)) => {
                if let Some(n) = json::as_int(v, &tp, errs) {
                    if !(1..=65535).contains(&n) {
                        errs.push(FieldError::invalid(&tp, n, range_error(1, 65535)));
                    }
                }
            }
            None | Some(Value::Null) | Some(Value::String(_)) => {}
            Some(v) => errs.push(FieldError::invalid(
                &tp,
                v.clone(),
                "must be an integer or a string",
            )),
        }
        if let Some(np) = json::int_at(port, p, "nodePort", errs).filter(|n| *n != 0) {
            let np_path = child(p, "nodePort");
            if typ == "ClusterIP" || typ == "ExternalName" {
                errs.push(FieldError::forbidden(
                    np_path,
                    format!("may not be used when `type` is '{typ}'"),
                ));
            } else if !(1..=65535).contains(&np) {
                errs.push(FieldError::invalid(np_path, np, range_error(1, 65535)));
            }
        }
        if let Some(ap) = json::str_at(port, p, "appProtocol", errs) {
            for msg in super::names::is_qualified_name(ap) {
                errs.push(FieldError::invalid(child(p, "appProtocol"), ap, msg));
            }
        }
    }
}

fn validate_update(s: &Value, old: &Value, typ: &str, errs: &mut Errs) {
    let old_spec = old.get("spec").unwrap_or(&Value::Null);
    let old_type = old_spec.get("type").and_then(Value::as_str).unwrap_or("");
    if typ == "ExternalName" || old_type == "ExternalName" {
        return;
    }
    let old_ip = old_spec
        .get("clusterIP")
        .and_then(Value::as_str)
        .unwrap_or("");
    let new_ip = s.get("clusterIP").and_then(Value::as_str).unwrap_or("");
    if !old_ip.is_empty() && new_ip != old_ip {
        errs.push(FieldError::invalid(
            "spec.clusterIPs[0]",
            new_ip,
            "may not change once set",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn svc(spec: Value) -> Value {
        json!({"metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn msgs(obj: &Value, old: Option<&Value>) -> Vec<String> {
        validate("", "Service", true, obj, old)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    #[test]
    fn service_cases() {
        let base = json!({"type": "ClusterIP", "sessionAffinity": "None",
            "ports": [{"port": 80, "protocol": "TCP", "targetPort": 8080}]});
        let mut bad_type = base.clone();
        bad_type["type"] = json!("Foo");
        let mut two_unnamed = base.clone();
        two_unnamed["ports"] =
            json!([{"port": 80, "protocol": "TCP"}, {"port": 81, "protocol": "TCP"}]);
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a plain ClusterIP service passes", base.clone(), vec![]),
            ("an unknown type is unsupported", bad_type,
                vec!["spec.type: Unsupported value: \"Foo\": supported values: \"ClusterIP\", \"ExternalName\", \"LoadBalancer\", \"NodePort\""]),
            ("ports are required", json!({"type": "ClusterIP", "sessionAffinity": "None"}),
                vec!["spec.ports: Required value"]),
            ("headless services need no ports", json!({"type": "ClusterIP", "clusterIP": "None", "sessionAffinity": "None"}), vec![]),
            ("several ports need names", two_unnamed,
                vec!["spec.ports[0].name: Required value", "spec.ports[1].name: Required value"]),
            ("a port out of range is invalid", json!({"type": "ClusterIP", "sessionAffinity": "None", "ports": [{"port": 70000, "protocol": "TCP"}]}),
                vec!["spec.ports[0].port: Invalid value: 70000: must be between 1 and 65535, inclusive"]),
            ("a bad cluster IP is invalid", json!({"type": "ClusterIP", "clusterIP": "x", "sessionAffinity": "None", "ports": [{"port": 1, "protocol": "TCP"}]}),
                vec!["spec.clusterIPs[0]: Invalid value: \"x\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"]),
            ("ExternalName needs a name", json!({"type": "ExternalName", "sessionAffinity": "None"}),
                vec!["spec.externalName: Required value"]),
            ("nodePort is forbidden on ClusterIP", json!({"type": "ClusterIP", "sessionAffinity": "None", "ports": [{"port": 1, "protocol": "TCP", "nodePort": 30000}]}),
                vec!["spec.ports[0].nodePort: Forbidden: may not be used when `type` is 'ClusterIP'"]),
            ("wrong JSON types are errors", json!({"type": 1, "ports": "x", "sessionAffinity": "None"}),
                vec!["spec.type: Invalid value: 1: must be a string", "spec.type: Required value", "spec.ports: Invalid value: \"x\": must be an array", "spec.ports: Required value"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs(&svc(spec), None), want, "{name}");
        }
    }

    #[test]
    fn the_cluster_ip_may_not_change() {
        let old = svc(
            json!({"type": "ClusterIP", "clusterIP": "10.0.0.1", "sessionAffinity": "None", "ports": [{"port": 1, "protocol": "TCP"}]}),
        );
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.0.0.2");
        assert_eq!(
            msgs(&new, Some(&old)),
            vec!["spec.clusterIPs[0]: Invalid value: \"10.0.0.2\": may not change once set"]
        );
    }
}
