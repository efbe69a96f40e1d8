//! Validation of networking.k8s.io: Ingress, IngressClass and NetworkPolicy.

use serde_json::Value;

use super::json::{self, child, Errs};
use super::meta::validate_label_selector;
use super::names::{
    is_dns1035_label, is_dns1123_subdomain, is_valid_port_name, is_wildcard_dns1123_subdomain,
    range_error,
};
use super::FieldError;

/// Ingress: its rules, backends and TLS.
pub fn validate_ingress_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    validate_ingress(s, errs);
}

/// IngressClass: a controller name, which never changes.
pub fn validate_ingress_class(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    let c = json::str_or_empty(s, "spec", "controller", errs);
    if c.is_empty() {
        errs.push(FieldError::required("spec.controller", ""));
    } else {
        validate_domain_prefixed_path(c, "spec.controller", errs);
    }
    if let Some(old_spec) = old.and_then(|o| o.get("spec")) {
        json::immutable(s, old_spec, "spec", "controller", errs);
    }
}

/// NetworkPolicy: its selectors, peers and ports.
pub fn validate_network_policy_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    validate_network_policy(s, errs);
}

fn validate_domain_prefixed_path(v: &str, p: &str, errs: &mut Errs) {
    match v.split_once('/') {
        Some((host, path)) if !host.is_empty() && !path.is_empty() => {
            for msg in is_dns1123_subdomain(host) {
                errs.push(FieldError::invalid(p, host, msg));
            }
            let ok = path
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || b"/-._~%!$&'()*+,;=:".contains(&c));
            if !ok {
                errs.push(FieldError::invalid(p, path, "Invalid path (regex used for validation is '[A-Za-z0-9/\\-._~%!$&'()*+,;=:]+')"));
            }
        }
        _ => errs.push(FieldError::invalid(
            p,
            v,
            "must be a domain-prefixed path (such as \"acme.io/foo\")",
        )),
    }
}

fn validate_backend(b: &Value, p: &str, errs: &mut Errs) {
    let svc = json::obj_at(b, p, "service", errs);
    let res = json::obj_at(b, p, "resource", errs);
    match (svc, res) {
        (Some(_), Some(_)) => errs.push(FieldError::invalid(
            p,
            b.clone(),
            "cannot set both service and resource backends",
        )),
        (None, None) => errs.push(FieldError::invalid(
            p,
            b.clone(),
            "resource or service backend is required",
        )),
        (Some(svc), None) => {
            let sp = child(p, "service");
            let name = json::str_or_empty(svc, &sp, "name", errs);
            if name.is_empty() {
                errs.push(FieldError::required(child(&sp, "name"), ""));
            } else {
                for msg in is_dns1035_label(name) {
                    errs.push(FieldError::invalid(child(&sp, "name"), name, msg));
                }
            }
            let pp = child(&sp, "port");
            let port = json::obj_at(svc, &sp, "port", errs)
                .cloned()
                .unwrap_or(Value::Null);
            let pname = json::str_or_empty(&port, &pp, "name", errs);
            let pnum = json::int_at(&port, &pp, "number", errs).unwrap_or(0);
            if !pname.is_empty() && pnum != 0 {
                errs.push(FieldError::invalid(
                    &pp,
                    port.clone(),
                    "cannot set both port name & port number",
                ));
            } else if !pname.is_empty() {
                for msg in is_valid_port_name(pname) {
                    errs.push(FieldError::invalid(child(&pp, "name"), pname, msg));
                }
            } else if pnum != 0 {
                if !(1..=65535).contains(&pnum) {
                    errs.push(FieldError::invalid(
                        child(&pp, "number"),
                        pnum,
                        range_error(1, 65535),
                    ));
                }
            } else {
                errs.push(FieldError::required(&pp, "port name or number is required"));
            }
        }
        (None, Some(res)) => {
            let rp = child(p, "resource");
            for f in ["kind", "name"] {
                if json::str_or_empty(res, &rp, f, errs).is_empty() {
                    errs.push(FieldError::required(child(&rp, f), ""));
                }
            }
        }
    }
}

fn validate_ingress(s: &Value, errs: &mut Errs) {
    let rules = json::objs_at(s, "spec", "rules", errs);
    let default = json::obj_at(s, "spec", "defaultBackend", errs);
    if rules.is_empty() && default.is_none() {
        errs.push(FieldError::invalid(
            "spec",
            s.clone(),
            "either `defaultBackend` or `rules` must be specified",
        ));
    }
    if let Some(b) = default {
        validate_backend(b, "spec.defaultBackend", errs);
    }
    if let Some(c) = json::str_at(s, "spec", "ingressClassName", errs) {
        for msg in is_dns1123_subdomain(c) {
            errs.push(FieldError::invalid("spec.ingressClassName", c, msg));
        }
    }
    for (p, rule) in rules {
        if let Some(host) = json::str_at(rule, &p, "host", errs).filter(|h| !h.is_empty()) {
            let msgs = if host.starts_with("*.") {
                is_wildcard_dns1123_subdomain(host)
            } else {
                is_dns1123_subdomain(host)
            };
            for msg in msgs {
                errs.push(FieldError::invalid(child(&p, "host"), host, msg));
            }
            if host.parse::<std::net::IpAddr>().is_ok() {
                errs.push(FieldError::invalid(
                    child(&p, "host"),
                    host,
                    "must be a DNS name, not an IP address",
                ));
            }
        }
        let Some(http) = json::obj_at(rule, &p, "http", errs) else {
            continue;
        };
        let hp = child(&p, "http");
        let paths = json::objs_at(http, &hp, "paths", errs);
        if paths.is_empty() {
            errs.push(FieldError::required(child(&hp, "paths"), ""));
        }
        for (pp, path) in paths {
            let path_type = json::str_or_empty(path, &pp, "pathType", errs);
            let value = json::str_or_empty(path, &pp, "path", errs);
            match path_type {
                "" => errs.push(FieldError::required(
                    child(&pp, "pathType"),
                    "pathType must be specified",
                )),
                "Exact" | "Prefix" => {
                    if !value.starts_with('/') {
                        errs.push(FieldError::invalid(
                            child(&pp, "path"),
                            value,
                            "must be an absolute path",
                        ));
                    }
                    for bad in ["//", "/./", "/../", "%2f", "%2F"] {
                        if value.contains(bad) {
                            errs.push(FieldError::invalid(
                                child(&pp, "path"),
                                value,
                                format!("must not contain '{bad}'"),
                            ));
                        }
                    }
                }
                "ImplementationSpecific" => {
                    if !value.is_empty() && !value.starts_with('/') {
                        errs.push(FieldError::invalid(
                            child(&pp, "path"),
                            value,
                            "must be an absolute path",
                        ));
                    }
                }
                other => errs.push(FieldError::not_supported(
                    child(&pp, "pathType"),
                    other,
                    &["Exact", "ImplementationSpecific", "Prefix"],
                )),
            }
            let empty = Value::Object(Default::default());
            let b = json::obj_at(path, &pp, "backend", errs).unwrap_or(&empty);
            validate_backend(b, &child(&pp, "backend"), errs);
        }
    }
    for (p, tls) in json::objs_at(s, "spec", "tls", errs) {
        for (i, host) in json::strs_at(tls, &p, "hosts", errs) {
            let msgs = if host.starts_with("*.") {
                is_wildcard_dns1123_subdomain(host)
            } else {
                is_dns1123_subdomain(host)
            };
            for msg in msgs {
                errs.push(FieldError::invalid(
                    json::index(&child(&p, "hosts"), i),
                    host,
                    msg,
                ));
            }
        }
    }
}

fn validate_np_peers_and_ports(rule: &Value, p: &str, peers: &str, errs: &mut Errs) {
    for (pp, port) in json::objs_at(rule, p, "ports", errs) {
        if let Some(proto) = json::str_at(port, &pp, "protocol", errs) {
            if !matches!(proto, "TCP" | "UDP" | "SCTP") {
                errs.push(FieldError::not_supported(
                    child(&pp, "protocol"),
                    proto,
                    &["SCTP", "TCP", "UDP"],
                ));
            }
        }
        match port.get("port") {
            Some(Value::String(s)) => {
                for msg in is_valid_port_name(s) {
                    errs.push(FieldError::invalid(child(&pp, "port"), s.as_str(), msg));
                }
            }
            Some(v @ Value::Number(_)) => {
                if let Some(n) = json::as_int(v, &child(&pp, "port"), errs) {
                    if !(1..=65535).contains(&n) {
                        errs.push(FieldError::invalid(
                            child(&pp, "port"),
                            n,
                            range_error(1, 65535),
                        ));
                    }
                }
            }
            _ => {}
        }
    }
    for (pp, peer) in json::objs_at(rule, p, peers, errs) {
        let kinds = ["podSelector", "namespaceSelector", "ipBlock"];
        let n = kinds.iter().filter(|k| json::has(peer, k)).count();
        if n == 0 {
            errs.push(FieldError::required(pp.clone(), "must specify a peer"));
        } else if json::has(peer, "ipBlock") && n > 1 {
            errs.push(FieldError::forbidden(
                pp.clone(),
                "may not specify both ipBlock and another peer",
            ));
        }
        for sel in ["podSelector", "namespaceSelector"] {
            if let Some(s) = json::obj_at(peer, &pp, sel, errs) {
                validate_label_selector(s, &child(&pp, sel), errs);
            }
        }
        if let Some(b) = json::obj_at(peer, &pp, "ipBlock", errs) {
            let bp = child(&pp, "ipBlock");
            let cidr = json::str_or_empty(b, &bp, "cidr", errs);
            if cidr.is_empty() {
                errs.push(FieldError::required(child(&bp, "cidr"), ""));
            } else if !is_cidr(cidr) {
                errs.push(FieldError::invalid(
                    child(&bp, "cidr"),
                    cidr,
                    "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                ));
            }
            for (i, ex) in json::strs_at(b, &bp, "except", errs) {
                if !is_cidr(ex) {
                    errs.push(FieldError::invalid(
                        json::index(&child(&bp, "except"), i),
                        ex,
                        "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
                    ));
                }
            }
        }
    }
}

fn is_cidr(s: &str) -> bool {
    let Some((ip, bits)) = s.split_once('/') else {
        return false;
    };
    let Ok(addr) = ip.parse::<std::net::IpAddr>() else {
        return false;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    bits.parse::<u8>().is_ok_and(|b| b <= max) && !bits.starts_with('+')
}

fn validate_network_policy(s: &Value, errs: &mut Errs) {
    if let Some(sel) = json::obj_at(s, "spec", "podSelector", errs) {
        validate_label_selector(sel, "spec.podSelector", errs);
    }
    for (p, rule) in json::objs_at(s, "spec", "ingress", errs) {
        validate_np_peers_and_ports(rule, &p, "from", errs);
    }
    for (p, rule) in json::objs_at(s, "spec", "egress", errs) {
        validate_np_peers_and_ports(rule, &p, "to", errs);
    }
    let types = json::strs_at(s, "spec", "policyTypes", errs);
    for (i, t) in &types {
        if *t != "Ingress" && *t != "Egress" {
            errs.push(FieldError::not_supported(
                json::index("spec.policyTypes", *i),
                *t,
                &["Egress", "Ingress"],
            ));
        }
    }
    if types.len() > 2 {
        errs.push(FieldError::invalid(
            "spec.policyTypes",
            s["policyTypes"].clone(),
            "may not specify more than two policyTypes",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn msgs(kind: &str, spec: Value) -> Vec<String> {
        let obj = json!({"metadata": {"name": "x", "namespace": "d"}, "spec": spec});
        validate("networking.k8s.io", kind, true, &obj, None)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    #[test]
    fn ingress_cases() {
        let backend = json!({"service": {"name": "web", "port": {"number": 80}}});
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("a prefix rule passes", json!({"rules": [{"host": "a.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix", "backend": backend}]}}]}), vec![]),
            ("pathType is required", json!({"rules": [{"http": {"paths": [{"path": "/", "backend": backend}]}}]}),
                vec!["spec.rules[0].http.paths[0].pathType: Required value: pathType must be specified"]),
            ("prefix paths must be absolute", json!({"rules": [{"http": {"paths": [{"path": "a", "pathType": "Prefix", "backend": backend}]}}]}),
                vec!["spec.rules[0].http.paths[0].path: Invalid value: \"a\": must be an absolute path"]),
            ("rules or a default backend are needed", json!({}),
                vec!["spec: Invalid value: map[string]string{}: either `defaultBackend` or `rules` must be specified"]),
            ("a port name or number is needed", json!({"defaultBackend": {"service": {"name": "web", "port": {}}}}),
                vec!["spec.defaultBackend.service.port: Required value: port name or number is required"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs("Ingress", spec), want, "{name}");
        }
    }

    #[test]
    fn network_policy_cases() {
        let cases: Vec<(&str, Value, Vec<&str>)> = vec![
            ("an empty selector passes", json!({"podSelector": {}, "policyTypes": ["Ingress"]}), vec![]),
            ("an unknown policy type is unsupported", json!({"podSelector": {}, "policyTypes": ["Sideways"]}),
                vec!["spec.policyTypes[0]: Unsupported value: \"Sideways\": supported values: \"Egress\", \"Ingress\""]),
            ("a bad cidr is invalid", json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "10.0.0.0/33"}}]}]}),
                vec!["spec.ingress[0].from[0].ipBlock.cidr: Invalid value: \"10.0.0.0/33\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"]),
        ];
        for (name, spec, want) in cases {
            assert_eq!(msgs("NetworkPolicy", spec), want, "{name}");
        }
    }
}
