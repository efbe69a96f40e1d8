//! Validation of the smaller groups: scheduling (PriorityClass), policy
//! (PodDisruptionBudget), storage (StorageClass), coordination (Lease) and discovery
//! (EndpointSlice).

use std::collections::HashSet;

use serde_json::Value;

use super::json::{self, child, Errs};
use super::meta::validate_label_selector;
use super::names::{
    is_dns1123_label, is_dns1123_subdomain, is_qualified_name, is_valid_percent, range_error,
};
use super::FieldError;

const HIGHEST_USER_PRIORITY: i64 = 1_000_000_000;

/// PodDisruptionBudget: its budget and selector.
pub fn validate_pdb_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_pdb(obj, errs);
}

/// Lease: its durations and transitions.
pub fn validate_lease_object(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_lease(obj, errs);
}

pub fn validate_priority_class(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let name = crate::json::opt_str_at(obj, &["metadata", "name"]).unwrap_or("");
    let value = json::int_at(obj, "", "value", errs).unwrap_or(0);
    let known_system = matches!(
        (name, value),
        ("system-node-critical", 2_000_001_000) | ("system-cluster-critical", 2_000_000_000)
    );
    if name.starts_with("system-") {
        if !known_system && old.is_none() {
            errs.push(FieldError::forbidden(
                "metadata.name",
                "priority class names with 'system-' prefix are reserved",
            ));
        }
    } else if value > HIGHEST_USER_PRIORITY {
        errs.push(FieldError::forbidden(
            "value",
            format!("maximum allowed value of a user defined priority is {HIGHEST_USER_PRIORITY}"),
        ));
    }
    json::bool_at(obj, "", "globalDefault", errs);
    if let Some(p) = json::str_at(obj, "", "preemptionPolicy", errs) {
        if p != "PreemptLowerPriority" && p != "Never" {
            errs.push(FieldError::not_supported(
                "preemptionPolicy",
                p,
                &["PreemptLowerPriority", "Never"],
            ));
        }
    }
    if let Some(old) = old {
        if obj.get("value") != old.get("value") {
            errs.push(FieldError::forbidden(
                "value",
                "may not be changed in an update.",
            ));
        }
        json::immutable(obj, old, "", "preemptionPolicy", errs);
    }
}

fn int_or_percent(s: &Value, p: &str, errs: &mut Errs) {
    match s.get(p.rsplit('.').next().unwrap_or(p)) {
        Some(Value::String(v)) => {
            let msgs = is_valid_percent(v);
            for msg in &msgs {
                errs.push(FieldError::invalid(p, v.as_str(), msg.clone()));
            }
            if msgs.is_empty()
                && v.trim_end_matches('%')
                    .parse::<u64>()
                    .is_ok_and(|n| n > 100)
            {
                errs.push(FieldError::invalid(
                    p,
                    v.as_str(),
                    "must not be greater than 100%",
                ));
            }
        }
        Some(v @ Value::Number(_)) => {
            if let Some(n) = json::as_int(v, p, errs) {
                json::non_negative(n, p, errs);
            }
        }
        None | Some(Value::Null) => {}
        Some(v) => errs.push(FieldError::invalid(
            p,
            v.clone(),
            "must be an integer or a percentage",
        )),
    }
}

fn validate_pdb(obj: &Value, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let s = json::obj_at(obj, "", "spec", errs).unwrap_or(&empty);
    if json::has(s, "minAvailable") && json::has(s, "maxUnavailable") {
        errs.push(FieldError::invalid(
            "spec",
            s.clone(),
            "minAvailable and maxUnavailable cannot be both set",
        ));
    }
    int_or_percent(s, "spec.minAvailable", errs);
    int_or_percent(s, "spec.maxUnavailable", errs);
    if let Some(sel) = json::obj_at(s, "spec", "selector", errs) {
        validate_label_selector(sel, "spec.selector", errs);
    }
    if let Some(p) = json::str_at(s, "spec", "unhealthyPodEvictionPolicy", errs) {
        if p != "IfHealthyBudget" && p != "AlwaysAllow" {
            errs.push(FieldError::not_supported(
                "spec.unhealthyPodEvictionPolicy",
                p,
                &["AlwaysAllow", "IfHealthyBudget"],
            ));
        }
    }
}

pub fn validate_storage_class(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let provisioner = json::str_or_empty(obj, "", "provisioner", errs);
    if provisioner.is_empty() {
        errs.push(FieldError::required("provisioner", ""));
    } else {
        for msg in is_qualified_name(&provisioner.to_lowercase()) {
            errs.push(FieldError::invalid("provisioner", provisioner, msg));
        }
    }
    let params = json::str_map_at(obj, "", "parameters", errs);
    let mut size = 0;
    for (k, v) in &params {
        if k.is_empty() {
            errs.push(FieldError::invalid(
                "parameters",
                *k,
                "field can not be empty.",
            ));
        }
        size += k.len() + v.len();
    }
    if size > 256 * 1024 {
        errs.push(FieldError::too_long("parameters", 256 * 1024));
    }
    if let Some(p) = json::str_at(obj, "", "reclaimPolicy", errs) {
        if p != "Delete" && p != "Retain" {
            errs.push(FieldError::not_supported(
                "reclaimPolicy",
                p,
                &["Delete", "Retain"],
            ));
        }
    }
    match json::str_at(obj, "", "volumeBindingMode", errs) {
        None => errs.push(FieldError::required("volumeBindingMode", "")),
        Some("Immediate" | "WaitForFirstConsumer") => {}
        Some(other) => errs.push(FieldError::not_supported(
            "volumeBindingMode",
            other,
            &["Immediate", "WaitForFirstConsumer"],
        )),
    }
    json::bool_at(obj, "", "allowVolumeExpansion", errs);
    if let Some(old) = old {
        for (f, msg) in [
            ("parameters", "updates to parameters are forbidden."),
            ("provisioner", "updates to provisioner are forbidden."),
            ("reclaimPolicy", "updates to reclaimPolicy are forbidden."),
        ] {
            if obj.get(f) != old.get(f) {
                errs.push(FieldError::forbidden(f, msg));
            }
        }
        json::immutable(obj, old, "", "volumeBindingMode", errs);
    }
}

fn validate_lease(obj: &Value, errs: &mut Errs) {
    let Some(s) = json::obj_at(obj, "", "spec", errs) else {
        return;
    };
    json::str_at(s, "spec", "holderIdentity", errs);
    if let Some(d) = json::int_at(s, "spec", "leaseDurationSeconds", errs) {
        if d <= 0 {
            errs.push(FieldError::invalid(
                "spec.leaseDurationSeconds",
                d,
                "must be greater than 0",
            ));
        }
    }
    json::non_negative_at(s, "spec", "leaseTransitions", errs);
    for f in ["acquireTime", "renewTime"] {
        if let Some(t) = json::str_at(s, "spec", f, errs) {
            if !looks_like_rfc3339(t) {
                errs.push(FieldError::invalid(
                    child("spec", f),
                    t,
                    "must be an RFC3339 timestamp with microseconds",
                ));
            }
        }
    }
}

fn looks_like_rfc3339(t: &str) -> bool {
    let b = t.as_bytes();
    b.len() >= 20
        && b[4] == b'-'
        && b[7] == b'-'
        && (b[10] == b'T' || b[10] == b't')
        && b[13] == b':'
        && b[16] == b':'
        && b[..4].iter().all(u8::is_ascii_digit)
        && (t.ends_with('Z')
            || t.ends_with('z')
            || b[19..].iter().any(|c| matches!(c, b'+' | b'-')))
}

pub fn validate_endpoint_slice(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    let addr_type = json::str_or_empty(obj, "", "addressType", errs);
    match addr_type {
        "" => errs.push(FieldError::required("addressType", "")),
        "IPv4" | "IPv6" | "FQDN" => {}
        other => errs.push(FieldError::not_supported(
            "addressType",
            other,
            &["FQDN", "IPv4", "IPv6"],
        )),
    }
    let endpoints = json::objs_at(obj, "", "endpoints", errs);
    if endpoints.len() > 1000 {
        errs.push(FieldError::too_many("endpoints", endpoints.len(), 1000));
    }
    for (p, ep) in endpoints {
        let addrs = json::strs_at(ep, &p, "addresses", errs);
        let ap = child(&p, "addresses");
        if addrs.is_empty() {
            errs.push(FieldError::required(&ap, "must contain at least 1 address"));
        } else if addrs.len() > 100 {
            errs.push(FieldError::too_many(&ap, addrs.len(), 100));
        }
        for (i, a) in addrs {
            let ip = a.parse::<std::net::IpAddr>().ok();
            let msgs = match addr_type {
                "IPv4" if !ip.is_some_and(|i| i.is_ipv4()) => {
                    vec!["must be a valid IPv4 address".to_string()]
                }
                "IPv6" if !ip.is_some_and(|i| i.is_ipv6()) => {
                    vec!["must be a valid IPv6 address".to_string()]
                }
                "FQDN" => is_dns1123_subdomain(a.strip_suffix('.').unwrap_or(a)),
                _ => vec![],
            };
            for msg in msgs {
                errs.push(FieldError::invalid(json::index(&ap, i), a, msg));
            }
        }
        if let Some(h) = json::str_at(ep, &p, "hostname", errs) {
            for msg in is_dns1123_label(h) {
                errs.push(FieldError::invalid(child(&p, "hostname"), h, msg));
            }
        }
    }
    let mut names = HashSet::new();
    for (p, port) in json::objs_at(obj, "", "ports", errs) {
        let name = json::str_or_empty(port, &p, "name", errs);
        if !name.is_empty() {
            for msg in is_dns1123_label(name) {
                errs.push(FieldError::invalid(child(&p, "name"), name, msg));
            }
        }
        if !names.insert(name.to_string()) {
            errs.push(FieldError::duplicate(child(&p, "name"), name));
        }
        if let Some(n) = json::int_at(port, &p, "port", errs) {
            if !(1..=65535).contains(&n) {
                errs.push(FieldError::invalid(
                    child(&p, "port"),
                    n,
                    range_error(1, 65535),
                ));
            }
        }
        if let Some(proto) = json::str_at(port, &p, "protocol", errs) {
            if !matches!(proto, "TCP" | "UDP" | "SCTP") {
                errs.push(FieldError::not_supported(
                    child(&p, "protocol"),
                    proto,
                    &["SCTP", "TCP", "UDP"],
                ));
            }
        }
    }
    if let Some(old) = old {
        json::immutable(obj, old, "", "addressType", errs);
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn msgs(
        group: &str,
        kind: &str,
        namespaced: bool,
        obj: Value,
        old: Option<&Value>,
    ) -> Vec<String> {
        validate(group, kind, namespaced, &obj, old)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    #[test]
    fn a_lease_time_with_a_multibyte_character_at_byte_19_is_invalid_not_a_panic() {
        let lease = json!({"metadata": {"name": "l", "namespace": "d"},
            "spec": {"renewTime": "2024-01-01T00:00:0\u{e9}0000"}});
        let found = msgs("coordination.k8s.io", "Lease", true, lease, None);
        assert!(found.iter().any(|m| m.contains("RFC3339")), "{found:?}");
    }

    #[test]
    fn priority_class_cases() {
        let g = "scheduling.k8s.io";
        assert_eq!(
            msgs(
                g,
                "PriorityClass",
                false,
                json!({"metadata": {"name": "hi"}, "value": 2_000_000_000}),
                None
            ),
            vec![
                "value: Forbidden: maximum allowed value of a user defined priority is 1000000000"
            ]
        );
        assert_eq!(
            msgs(
                g,
                "PriorityClass",
                false,
                json!({"metadata": {"name": "system-x"}, "value": 1}),
                None
            ),
            vec![
                "metadata.name: Forbidden: priority class names with 'system-' prefix are reserved"
            ]
        );
        let old = json!({"metadata": {"name": "a"}, "value": 1});
        assert_eq!(
            msgs(
                g,
                "PriorityClass",
                false,
                json!({"metadata": {"name": "a"}, "value": 2}),
                Some(&old)
            ),
            vec!["value: Forbidden: may not be changed in an update."]
        );
    }

    #[test]
    fn pdb_limits_are_exclusive() {
        let obj = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"minAvailable": 1, "maxUnavailable": "200%"}});
        let m = msgs("policy", "PodDisruptionBudget", true, obj, None);
        assert_eq!(m.len(), 2, "{m:?}");
        assert!(m[0].ends_with("minAvailable and maxUnavailable cannot be both set"));
        assert_eq!(
            m[1],
            "spec.maxUnavailable: Invalid value: \"200%\": must not be greater than 100%"
        );
    }

    #[test]
    fn storage_class_cases() {
        let g = "storage.k8s.io";
        assert_eq!(
            msgs(
                g,
                "StorageClass",
                false,
                json!({"metadata": {"name": "s"}, "volumeBindingMode": "Immediate"}),
                None
            ),
            vec!["provisioner: Required value"]
        );
        let old = json!({"metadata": {"name": "s"}, "provisioner": "a.io/b", "parameters": {"x": "1"}, "volumeBindingMode": "Immediate"});
        let mut new = old.clone();
        new["parameters"]["x"] = json!("2");
        assert_eq!(
            msgs(g, "StorageClass", false, new, Some(&old)),
            vec!["parameters: Forbidden: updates to parameters are forbidden."]
        );
    }

    #[test]
    fn lease_and_endpoint_slice_cases() {
        let lease = json!({"metadata": {"name": "l", "namespace": "d"}, "spec": {"leaseDurationSeconds": 0, "holderIdentity": 3}});
        assert_eq!(
            msgs("coordination.k8s.io", "Lease", true, lease, None),
            vec![
                "spec.holderIdentity: Invalid value: 3: must be a string",
                "spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0",
            ]
        );
        let slice = json!({"metadata": {"name": "e", "namespace": "d"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["::1"]}], "ports": [{"port": 80, "protocol": "TCP"}]});
        assert_eq!(
            msgs("discovery.k8s.io", "EndpointSlice", true, slice, None),
            vec!["endpoints[0].addresses[0]: Invalid value: \"::1\": must be a valid IPv4 address"]
        );
    }
}
