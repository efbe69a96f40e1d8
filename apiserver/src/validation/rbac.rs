//! Validation of rbac.authorization.k8s.io: Role, ClusterRole, RoleBinding, ClusterRoleBinding.

use serde_json::Value;

use super::json::{self, child, Errs};
use super::names::{is_dns1123_subdomain, path_segment_name};
use super::FieldError;

const GROUP: &str = "rbac.authorization.k8s.io";

/// Role: its rules.
pub fn validate_role(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_rules(obj, true, errs);
}

/// ClusterRole: its rules and aggregation rule.
pub fn validate_cluster_role(obj: &Value, _old: Option<&Value>, errs: &mut Errs) {
    validate_rules(obj, false, errs);
    if let Some(agg) = json::obj_at(obj, "", "aggregationRule", errs) {
        let sels = json::objs_at(agg, "aggregationRule", "clusterRoleSelectors", errs);
        if sels.is_empty() {
            errs.push(FieldError::required(
                "aggregationRule.clusterRoleSelectors",
                "at least one clusterRoleSelector required if aggregationRule is non-nil",
            ));
        }
        for (p, sel) in sels {
            super::meta::validate_label_selector(sel, &p, errs);
        }
    }
}

/// RoleBinding: its role reference and subjects.
pub fn validate_role_binding(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    validate_binding(obj, old, true, errs);
}

/// ClusterRoleBinding: its role reference and subjects.
pub fn validate_cluster_role_binding(obj: &Value, old: Option<&Value>, errs: &mut Errs) {
    validate_binding(obj, old, false, errs);
}

fn validate_rules(obj: &Value, namespaced: bool, errs: &mut Errs) {
    for (p, rule) in json::objs_at(obj, "", "rules", errs) {
        let verbs = json::strs_at(rule, &p, "verbs", errs);
        let groups = json::strs_at(rule, &p, "apiGroups", errs);
        let resources = json::strs_at(rule, &p, "resources", errs);
        let resource_names = json::strs_at(rule, &p, "resourceNames", errs);
        let urls = json::strs_at(rule, &p, "nonResourceURLs", errs);
        if verbs.is_empty() {
            errs.push(FieldError::required(
                child(&p, "verbs"),
                "verbs must contain at least one value",
            ));
        }
        if !urls.is_empty() {
            let shown = rule.get("nonResourceURLs").cloned().unwrap_or(Value::Null);
            if namespaced {
                errs.push(FieldError::invalid(
                    child(&p, "nonResourceURLs"),
                    shown.clone(),
                    "namespaced rules cannot apply to non-resource URLs",
                ));
            }
            if !groups.is_empty() || !resources.is_empty() || !resource_names.is_empty() {
                errs.push(FieldError::invalid(
                    child(&p, "nonResourceURLs"),
                    shown,
                    "rules cannot apply to both regular resources and non-resource URLs",
                ));
            }
            continue;
        }
        if groups.is_empty() {
            errs.push(FieldError::required(
                child(&p, "apiGroups"),
                "resource rules must supply at least one api group",
            ));
        }
        if resources.is_empty() {
            errs.push(FieldError::required(
                child(&p, "resources"),
                "resource rules must supply at least one resource",
            ));
        }
    }
}

fn validate_binding(obj: &Value, old: Option<&Value>, namespaced: bool, errs: &mut Errs) {
    let empty = Value::Object(Default::default());
    let role_ref = json::obj_at(obj, "", "roleRef", errs).unwrap_or(&empty);
    let group = json::str_or_empty(role_ref, "roleRef", "apiGroup", errs);
    if group != GROUP {
        errs.push(FieldError::not_supported(
            "roleRef.apiGroup",
            group,
            &[GROUP],
        ));
    }
    let kind = json::str_or_empty(role_ref, "roleRef", "kind", errs);
    let kinds: &[&str] = if namespaced {
        &["Role", "ClusterRole"]
    } else {
        &["ClusterRole"]
    };
    if !kinds.contains(&kind) {
        errs.push(FieldError::not_supported("roleRef.kind", kind, kinds));
    }
    let name = json::str_or_empty(role_ref, "roleRef", "name", errs);
    if name.is_empty() {
        errs.push(FieldError::required("roleRef.name", ""));
    } else {
        for msg in path_segment_name(name, false) {
            errs.push(FieldError::invalid("roleRef.name", name, msg));
        }
    }
    for (p, subject) in json::objs_at(obj, "", "subjects", errs) {
        validate_subject(subject, &p, namespaced, errs);
    }
    if let Some(old) = old {
        if obj.get("roleRef") != old.get("roleRef") {
            errs.push(FieldError::invalid(
                "roleRef",
                role_ref.clone(),
                "cannot change roleRef",
            ));
        }
    }
}

fn validate_subject(s: &Value, p: &str, namespaced: bool, errs: &mut Errs) {
    let name = json::str_or_empty(s, p, "name", errs);
    if name.is_empty() {
        errs.push(FieldError::required(child(p, "name"), ""));
    }
    let group = json::str_or_empty(s, p, "apiGroup", errs);
    let namespace = json::str_or_empty(s, p, "namespace", errs);
    match json::str_or_empty(s, p, "kind", errs) {
        "ServiceAccount" => {
            if !name.is_empty() {
                for msg in is_dns1123_subdomain(name) {
                    errs.push(FieldError::invalid(child(p, "name"), name, msg));
                }
            }
            if !group.is_empty() {
                errs.push(FieldError::not_supported(
                    child(p, "apiGroup"),
                    group,
                    &[""],
                ));
            }
            if !namespaced && namespace.is_empty() {
                errs.push(FieldError::required(child(p, "namespace"), ""));
            }
        }
        "User" | "Group" => {
            if group != GROUP {
                errs.push(FieldError::not_supported(
                    child(p, "apiGroup"),
                    group,
                    &[GROUP],
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            child(p, "kind"),
            other,
            &["ServiceAccount", "User", "Group"],
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::super::validate_kind as validate;
    use serde_json::{json, Value};

    fn msgs(kind: &str, namespaced: bool, body: Value, old: Option<&Value>) -> Vec<String> {
        let mut obj = body;
        obj["metadata"] = if namespaced {
            json!({"name": "r", "namespace": "d"})
        } else {
            json!({"name": "r"})
        };
        validate(GROUP_NAME, kind, namespaced, &obj, old)
            .iter()
            .map(|e| e.message())
            .collect()
    }

    const GROUP_NAME: &str = "rbac.authorization.k8s.io";

    #[test]
    fn role_rule_cases() {
        let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
            ("a complete rule passes", "Role", json!({"rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]}), vec![]),
            ("verbs are required", "Role", json!({"rules": [{"apiGroups": [""], "resources": ["pods"]}]}),
                vec!["rules[0].verbs: Required value: verbs must contain at least one value"]),
            ("resource rules need groups and resources", "ClusterRole", json!({"rules": [{"verbs": ["get"]}]}),
                vec!["rules[0].apiGroups: Required value: resource rules must supply at least one api group",
                     "rules[0].resources: Required value: resource rules must supply at least one resource"]),
            ("roles may not name URLs", "Role", json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}),
                vec!["rules[0].nonResourceURLs: Invalid value: []string{\"/healthz\"}: namespaced rules cannot apply to non-resource URLs"]),
            ("cluster roles may name URLs", "ClusterRole", json!({"rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}]}), vec![]),
            ("rules of the wrong type are reported", "Role", json!({"rules": [1]}),
                vec!["rules[0]: Invalid value: 1: must be an object"]),
        ];
        for (name, kind, body, want) in cases {
            assert_eq!(msgs(kind, kind == "Role", body, None), want, "{name}");
        }
    }

    #[test]
    fn binding_cases() {
        let rr = json!({"apiGroup": GROUP_NAME, "kind": "ClusterRole", "name": "view"});
        let cases: Vec<(&str, &str, Value, Vec<&str>)> = vec![
            ("a good binding passes", "RoleBinding", json!({"roleRef": rr, "subjects": [{"kind": "ServiceAccount", "name": "default"}]}), vec![]),
            ("cluster bindings need subject namespaces", "ClusterRoleBinding", json!({"roleRef": rr, "subjects": [{"kind": "ServiceAccount", "name": "default"}]}),
                vec!["subjects[0].namespace: Required value"]),
            ("a bad roleRef kind is unsupported", "ClusterRoleBinding", json!({"roleRef": {"apiGroup": GROUP_NAME, "kind": "Role", "name": "x"}}),
                vec!["roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\""]),
            ("users need the rbac group", "RoleBinding", json!({"roleRef": rr, "subjects": [{"kind": "User", "name": "u"}]}),
                vec!["subjects[0].apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\""]),
            ("a missing roleRef is reported field by field", "RoleBinding", json!({}),
                vec!["roleRef.apiGroup: Unsupported value: \"\": supported values: \"rbac.authorization.k8s.io\"",
                     "roleRef.kind: Unsupported value: \"\": supported values: \"Role\", \"ClusterRole\"",
                     "roleRef.name: Required value"]),
        ];
        for (name, kind, body, want) in cases {
            assert_eq!(
                msgs(kind, kind == "RoleBinding", body, None),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn role_ref_cannot_change() {
        let old = json!({"metadata": {"name": "r", "namespace": "d"}, "roleRef": {"apiGroup": GROUP_NAME, "kind": "Role", "name": "a"}});
        let mut new = old.clone();
        new["roleRef"]["name"] = json!("b");
        let errs = validate(GROUP_NAME, "RoleBinding", true, &new, Some(&old));
        assert_eq!(errs.len(), 1);
        assert_eq!(errs[0].field, "roleRef");
        assert_eq!(errs[0].detail, "cannot change roleRef");
    }
}
