//! ObjectMeta validation shared by every kind (names, namespace, labels, annotations,
//! finalizers, owner references, immutable fields on update) and label selectors.

use serde_json::Value;

use super::json::{self, child, index, Errs};
use super::names::{is_label_value, is_qualified_name};
use super::FieldError;
use crate::selectors::LabelSelector;

const ANNOTATIONS_LIMIT: usize = 256 * 1024;

fn metadata<'a>(obj: &'a Value, errs: &mut Errs) -> Option<&'a Value> {
    json::obj_at(obj, "", "metadata", errs)
}

/// Create-time ObjectMeta checks.
pub fn validate_object_meta(
    obj: &Value,
    namespaced: bool,
    name_fn: &dyn Fn(&str, bool) -> Vec<String>,
    errs: &mut Errs,
) {
    let empty = Value::Object(Default::default());
    let meta = metadata(obj, errs).unwrap_or(&empty);
    let p = "metadata";
    let generate_name = json::str_or_empty(meta, p, "generateName", errs);
    if !generate_name.is_empty() {
        for msg in name_fn(generate_name, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                generate_name,
                msg,
            ));
        }
    }
    let name = json::str_or_empty(meta, p, "name", errs);
    if name.is_empty() {
        errs.push(FieldError::required(
            "metadata.name",
            "name or generateName is required",
        ));
    } else {
        for msg in name_fn(name, false) {
            errs.push(FieldError::invalid("metadata.name", name, msg));
        }
    }
    let namespace = json::str_or_empty(meta, p, "namespace", errs);
    if namespaced {
        if namespace.is_empty() {
            errs.push(FieldError::required("metadata.namespace", ""));
        } else {
            for msg in super::names::is_dns1123_label(namespace) {
                errs.push(FieldError::invalid("metadata.namespace", namespace, msg));
            }
        }
    } else if !namespace.is_empty() {
        errs.push(FieldError::forbidden(
            "metadata.namespace",
            "not allowed on this type",
        ));
    }
    if let Some(g) = json::int_at(meta, p, "generation", errs) {
        json::non_negative(g, "metadata.generation", errs);
    }
    validate_common(meta, errs);
    validate_finalizers(meta, errs);
}

fn validate_common(meta: &Value, errs: &mut Errs) {
    let labels = json::str_map_at(meta, "metadata", "labels", errs);
    validate_labels(&labels, "metadata.labels", errs);
    validate_annotations(meta, errs);
    validate_owner_references(meta, errs);
}

/// Update-time ObjectMeta checks against the stored object.
pub fn validate_object_meta_update(
    obj: &Value,
    old: &Value,
    _namespaced: bool,
    _name_fn: &dyn Fn(&str, bool) -> Vec<String>,
    errs: &mut Errs,
) {
    let empty = Value::Object(Default::default());
    let meta = metadata(obj, errs).unwrap_or(&empty);
    let old_meta = old
        .get("metadata")
        .filter(|m| m.is_object())
        .unwrap_or(&empty);
    if json::has(old_meta, "deletionTimestamp") {
        let mut scratch = Vec::new();
        let new_f: Vec<&str> = json::strs_at(meta, "", "finalizers", &mut scratch)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let old_f: Vec<&str> = json::strs_at(old_meta, "", "finalizers", &mut scratch)
            .into_iter()
            .map(|(_, s)| s)
            .collect();
        let mut extra: Vec<&str> = new_f.into_iter().filter(|f| !old_f.contains(f)).collect();
        extra.sort_unstable();
        extra.dedup();
        if !extra.is_empty() {
            let quoted: Vec<String> = extra.iter().map(|s| super::go_quote(s)).collect();
            errs.push(FieldError::forbidden(
                "metadata.finalizers",
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    quoted.join(", ")
                ),
            ));
        }
    }
    let gen = json::int_at(meta, "metadata", "generation", errs).unwrap_or(0);
    let old_gen = old_meta
        .get("generation")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    if gen < old_gen {
        errs.push(FieldError::invalid(
            "metadata.generation",
            gen,
            "must not be decremented",
        ));
    }
    for f in [
        "name",
        "namespace",
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        let a = meta
            .get(f)
            .filter(|v| !v.is_null() && v.as_str() != Some(""));
        let b = old_meta
            .get(f)
            .filter(|v| !v.is_null() && v.as_str() != Some(""));
        if a != b {
            let bad = a.cloned().unwrap_or(Value::from(""));
            errs.push(FieldError::invalid(
                child("metadata", f),
                bad,
                "field is immutable",
            ));
        }
    }
    validate_common(meta, errs);
    validate_finalizers(meta, errs);
}

/// Label keys must be qualified names and values valid label values.
pub fn validate_labels(labels: &[(&str, &str)], path: &str, errs: &mut Errs) {
    for (k, v) in labels {
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(path, *k, msg));
        }
        for msg in is_label_value(v) {
            errs.push(FieldError::invalid(path, *v, msg));
        }
    }
}

fn validate_annotations(meta: &Value, errs: &mut Errs) {
    let annotations = json::str_map_at(meta, "metadata", "annotations", errs);
    let mut total = 0usize;
    for (k, v) in &annotations {
        for msg in is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid("metadata.annotations", *k, msg));
        }
        total += k.len() + v.len();
    }
    if total > ANNOTATIONS_LIMIT {
        errs.push(FieldError::too_long(
            "metadata.annotations",
            ANNOTATIONS_LIMIT,
        ));
    }
}

fn validate_finalizers(meta: &Value, errs: &mut Errs) {
    let finalizers = json::strs_at(meta, "metadata", "finalizers", errs);
    for (_, f) in &finalizers {
        for msg in is_qualified_name(f) {
            errs.push(FieldError::invalid("metadata.finalizers", *f, msg));
        }
    }
    let has = |n: &str| finalizers.iter().any(|(_, f)| *f == n);
    if has("orphan") && has("foregroundDeletion") {
        let all: Vec<Value> = finalizers.iter().map(|(_, f)| Value::from(*f)).collect();
        errs.push(FieldError::invalid(
            "metadata.finalizers",
            Value::Array(all),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
}

fn validate_owner_references(meta: &Value, errs: &mut Errs) {
    let p = "metadata.ownerReferences";
    let mut controller: Option<String> = None;
    for (_, r) in json::objs_at(meta, "metadata", "ownerReferences", errs) {
        let api_version = json::str_or_empty(r, p, "apiVersion", errs);
        let kind = json::str_or_empty(r, p, "kind", errs);
        let name = json::str_or_empty(r, p, "name", errs);
        let uid = json::str_or_empty(r, p, "uid", errs);
        let version = api_version.rsplit('/').next().unwrap_or("");
        if version.is_empty() || api_version.matches('/').count() > 1 {
            errs.push(FieldError::invalid(
                child(p, "apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                child(p, "kind"),
                kind,
                "kind must not be empty",
            ));
        }
        if name.is_empty() {
            errs.push(FieldError::invalid(
                child(p, "name"),
                name,
                "name must not be empty",
            ));
        }
        if uid.is_empty() {
            errs.push(FieldError::invalid(
                child(p, "uid"),
                uid,
                "uid must not be empty",
            ));
        }
        if api_version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid(
                p,
                r.clone(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if json::bool_at(r, p, "controller", errs) == Some(true) {
            let this = format!("{kind}/{name}");
            match &controller {
                Some(first) => errs.push(FieldError::invalid(
                    p,
                    meta.get("ownerReferences").cloned().unwrap_or(Value::Null),
                    format!("Only one reference can have Controller set to true. Found \"true\" in references for {first} and {this}"),
                )),
                None => controller = Some(this),
            }
        }
    }
}

/// Validates a LabelSelector object at `path`.
pub fn validate_label_selector(sel: &Value, path: &str, errs: &mut Errs) {
    let labels = json::str_map_at(sel, path, "matchLabels", errs);
    validate_labels(&labels, &child(path, "matchLabels"), errs);
    for (p, req) in json::objs_at(sel, path, "matchExpressions", errs) {
        let op = json::str_or_empty(req, &p, "operator", errs);
        let values = json::strs_at(req, &p, "values", errs);
        let n_values = json::arr_at(req, &p, "values", &mut Vec::new()).len();
        match op {
            "In" | "NotIn" if n_values == 0 => errs.push(FieldError::required(
                child(&p, "values"),
                "must be specified when `operator` is 'In' or 'NotIn'",
            )),
            "Exists" | "DoesNotExist" if n_values > 0 => errs.push(FieldError::forbidden(
                child(&p, "values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            _ => errs.push(FieldError::invalid(
                child(&p, "operator"),
                op,
                "not a valid selector operator",
            )),
        }
        let k = json::str_or_empty(req, &p, "key", errs);
        for msg in is_qualified_name(k) {
            errs.push(FieldError::invalid(child(&p, "key"), k, msg));
        }
        for (i, v) in values {
            for msg in is_label_value(v) {
                errs.push(FieldError::invalid(index(&child(&p, "values"), i), v, msg));
            }
        }
    }
}

/// Whether a LabelSelector selects nothing-in-particular (no labels, no expressions).
pub fn selector_is_empty(sel: &Value) -> bool {
    let no_labels = sel
        .get("matchLabels")
        .and_then(Value::as_object)
        .is_none_or(|m| m.is_empty());
    let no_exprs = sel
        .get("matchExpressions")
        .and_then(Value::as_array)
        .is_none_or(|a| a.is_empty());
    no_labels && no_exprs
}

/// Whether a LabelSelector matches `labels` (a JSON object of strings); a malformed one
/// matches nothing.
pub fn selector_matches(sel: &Value, labels: &Value) -> bool {
    let empty = serde_json::Map::new();
    let labels = labels.as_object().unwrap_or(&empty);
    LabelSelector::from_object(sel).is_ok_and(|selector| selector.matches(labels))
}

/// Whether a plain map selector (Service, ReplicationController) matches `labels`.
pub fn map_selector_matches(sel: &Value, labels: &Value) -> bool {
    let empty = serde_json::Map::new();
    let labels = labels.as_object().unwrap_or(&empty);
    LabelSelector::from_set(sel).matches(labels)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn create(obj: Value, namespaced: bool) -> Vec<String> {
        let mut errs = Vec::new();
        let f = |n: &str, p: bool| {
            super::super::names::validate_name_for(super::super::names::NameRule::Subdomain, n, p)
        };
        validate_object_meta(&obj, namespaced, &f, &mut errs);
        errs.iter().map(FieldError::message).collect()
    }

    #[test]
    fn object_meta_create_cases() {
        let long = "a".repeat(256 * 1024);
        let cases: Vec<(&str, Value, bool, Vec<&str>)> = vec![
            ("a good namespaced object passes", json!({"metadata": {"name": "a", "namespace": "ns"}}), true, vec![]),
            ("a missing name is required", json!({"metadata": {"namespace": "ns"}}), true,
                vec!["metadata.name: Required value: name or generateName is required"]),
            ("generateName stands in for name at validation only", json!({"metadata": {"generateName": "a-", "namespace": "ns"}}), true,
                vec!["metadata.name: Required value: name or generateName is required"]),
            ("a namespaced kind needs a namespace", json!({"metadata": {"name": "a"}}), true,
                vec!["metadata.namespace: Required value"]),
            ("a cluster kind forbids a namespace", json!({"metadata": {"name": "a", "namespace": "x"}}), false,
                vec!["metadata.namespace: Forbidden: not allowed on this type"]),
            ("a bad label value is invalid", json!({"metadata": {"name": "a", "labels": {"k": "a b"}}}), false,
                vec!["metadata.labels: Invalid value: \"a b\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')"]),
            ("oversized annotations are too long", json!({"metadata": {"name": "a", "annotations": {"k": long}}}), false,
                vec!["metadata.annotations: Too long: may not be more than 262144 bytes"]),
            ("bad finalizers are invalid", json!({"metadata": {"name": "a", "finalizers": ["a/b/c"]}}), false,
                vec!["metadata.finalizers: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"]),
            ("metadata of the wrong type is reported", json!({"metadata": "x"}), false,
                vec!["metadata: Invalid value: \"x\": must be an object", "metadata.name: Required value: name or generateName is required"]),
            ("a wrong-typed label value is reported", json!({"metadata": {"name": "a", "labels": {"k": 1}}}), false,
                vec!["metadata.labels[k]: Invalid value: 1: must be a string"]),
        ];
        for (name, obj, namespaced, want) in cases {
            assert_eq!(create(obj, namespaced), want, "{name}");
        }
    }

    #[test]
    fn regex_examples_are_joined_like_upstream() {
        // Upstream joins examples with "or " after "', " so a double space appears.
        let m = super::super::names::regex_error("m", "f", &["a", "b"]);
        assert_eq!(m, "m (e.g. 'a',  or 'b', regex used for validation is 'f')");
    }

    #[test]
    fn immutable_meta_fields_are_reported_on_update() {
        let old = json!({"metadata": {"name": "a", "uid": "1", "generation": 2}});
        let new = json!({"metadata": {"name": "b", "uid": "1", "generation": 1}});
        let mut errs = Vec::new();
        validate_object_meta_update(&new, &old, false, &|_, _| vec![], &mut errs);
        let msgs: Vec<String> = errs.iter().map(FieldError::message).collect();
        assert_eq!(
            msgs,
            vec![
                "metadata.generation: Invalid value: 1: must not be decremented",
                "metadata.name: Invalid value: \"b\": field is immutable",
            ]
        );
    }

    #[test]
    fn selectors_match_labels_and_expressions() {
        let labels = json!({"app": "web", "tier": "fe"});
        let cases = vec![
            (json!({"matchLabels": {"app": "web"}}), true),
            (json!({"matchLabels": {"app": "db"}}), false),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["fe"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "DoesNotExist"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "Exists"}]}),
                false,
            ),
        ];
        for (sel, want) in cases {
            assert_eq!(selector_matches(&sel, &labels), want, "{sel}");
        }
    }

    #[test]
    fn selector_requirements_are_checked() {
        let sel = json!({"matchExpressions": [{"key": "a", "operator": "In"}, {"key": "b", "operator": "Foo"}]});
        let mut errs = Vec::new();
        validate_label_selector(&sel, "spec.selector", &mut errs);
        let msgs: Vec<String> = errs.iter().map(FieldError::message).collect();
        assert_eq!(msgs, vec![
            "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'",
            "spec.selector.matchExpressions[1].operator: Invalid value: \"Foo\": not a valid selector operator",
        ]);
    }
}
