//! Which requests a webhook or a policy is called for: upstream's rules (operations, groups,
//! versions, resources with `*` and `resource/subresource` forms, scope), the namespace
//! selector (matched against the namespace's labels; a Namespace is matched by its own,
//! other cluster-scoped objects always match) and the object selector (the new or the old
//! object's labels).

use serde_json::{Map, Value};

use rudder_admission::{Attributes, Operation};

use crate::selectors::LabelSelector;

/// The operation as rules and AdmissionReviews name it.
pub fn operation_name(operation: Operation) -> &'static str {
    match operation {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
}

fn listed(list: &Value, wanted: &str) -> bool {
    list.as_array()
        .is_some_and(|items| items.iter().any(|item| item == "*" || item == wanted))
}

/// Whether one rule (`RuleWithOperations`, or a policy's `NamedRuleWithOperations`)
/// covers the request.
pub fn rule_matches(rule: &Value, attributes: &Attributes) -> bool {
    if !listed(&rule["operations"], operation_name(attributes.operation)) {
        return false;
    }
    if !listed(&rule["apiGroups"], &attributes.group)
        || !listed(&rule["apiVersions"], &attributes.version)
    {
        return false;
    }
    let resource = &attributes.resource;
    let covers = |entry: &str| -> bool {
        let (res, sub) = entry.split_once('/').unwrap_or((entry, ""));
        let resource_ok = res == "*" || res == resource;
        match attributes.subresource.as_deref() {
            None => resource_ok && entry.split_once('/').is_none(),
            Some(wanted) => resource_ok && (sub == "*" || sub == wanted),
        }
    };
    let resources = rule["resources"].as_array();
    if !resources.is_some_and(|list| list.iter().filter_map(Value::as_str).any(covers)) {
        return false;
    }
    let in_scope = match rule["scope"].as_str().unwrap_or("*") {
        "Cluster" => attributes.namespace.is_none(),
        "Namespaced" => attributes.namespace.is_some(),
        _ => true,
    };
    in_scope
        && rule["resourceNames"].as_array().is_none_or(|names| {
            names.is_empty() || names.iter().any(|n| n == attributes.name.as_str())
        })
}

/// Whether any of `rules` covers the request.
pub fn any_rule(rules: &Value, attributes: &Attributes) -> bool {
    rules
        .as_array()
        .is_some_and(|rules| rules.iter().any(|rule| rule_matches(rule, attributes)))
}

fn labels_of(object: Option<&Value>) -> Map<String, Value> {
    object
        .and_then(|o| o["metadata"]["labels"].as_object())
        .cloned()
        .unwrap_or_default()
}

/// The object selector: the new object's or the old object's labels match.
pub fn object_selector_matches(
    selector: &Value,
    object: Option<&Value>,
    old: Option<&Value>,
) -> Result<bool, String> {
    if selector.is_null() || selector.as_object().is_some_and(Map::is_empty) {
        return Ok(true);
    }
    let selector = LabelSelector::from_object(selector).map_err(|error| error.to_string())?;
    Ok(selector.matches(&labels_of(object)) || selector.matches(&labels_of(old)))
}

/// The namespace selector against the labels of the request's namespace (`namespace`: the
/// Namespace object, when the request is in one or is one).
pub fn namespace_selector_matches(
    selector: &Value,
    attributes: &Attributes,
    namespace: Option<&Value>,
) -> Result<bool, String> {
    if selector.is_null() || selector.as_object().is_some_and(Map::is_empty) {
        return Ok(true);
    }
    let is_namespace = attributes.group.is_empty() && attributes.resource == "namespaces";
    if attributes.namespace.is_none() && !is_namespace {
        return Ok(true);
    }
    let selector = LabelSelector::from_object(selector).map_err(|error| error.to_string())?;
    Ok(selector.matches(&labels_of(namespace)))
}

/// Whether the request is about what admission configures itself with (never sent to a
/// webhook or a policy, so a broken one cannot lock its own fix out), as upstream exempts.
pub fn is_exempt(attributes: &Attributes) -> bool {
    attributes.group == "admissionregistration.k8s.io"
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(resource: &str, subresource: Option<&str>, namespace: Option<&str>) -> Attributes {
        Attributes {
            operation: Operation::Create,
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            kind_group: "apps".into(),
            kind_version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.map(str::to_string),
            namespace: namespace.map(str::to_string),
            name: "web".into(),
            user: "alice".into(),
            groups: vec![],
            dry_run: false,
            uid: String::new(),
            extra: Default::default(),
            warnings: Default::default(),
        }
    }

    #[test]
    fn rules_match_operations_groups_resources_subresources_and_scope() {
        let rule = |resources: Value, scope: &str| {
            json!({"operations": ["CREATE"], "apiGroups": ["apps"], "apiVersions": ["*"],
                   "resources": resources, "scope": scope})
        };
        let plain = request("deployments", None, Some("default"));
        let scale = request("deployments", Some("scale"), Some("default"));
        assert!(rule_matches(&rule(json!(["deployments"]), "*"), &plain));
        assert!(!rule_matches(&rule(json!(["deployments"]), "*"), &scale));
        assert!(rule_matches(
            &rule(json!(["deployments/scale"]), "*"),
            &scale
        ));
        assert!(rule_matches(&rule(json!(["*/scale"]), "*"), &scale));
        assert!(rule_matches(&rule(json!(["*/*"]), "*"), &scale));
        assert!(!rule_matches(&rule(json!(["*/*"]), "*"), &plain));
        assert!(rule_matches(&rule(json!(["*"]), "Namespaced"), &plain));
        assert!(!rule_matches(&rule(json!(["*"]), "Cluster"), &plain));
        assert!(!rule_matches(&rule(json!(["pods"]), "*"), &plain));
        let mut update = plain.clone();
        update.operation = Operation::Update;
        assert!(!rule_matches(&rule(json!(["*"]), "*"), &update));
    }

    #[test]
    fn selectors_read_object_and_namespace_labels() {
        let selector = json!({"matchLabels": {"team": "a"}});
        let object = json!({"metadata": {"labels": {"team": "a"}}});
        let other = json!({"metadata": {"labels": {"team": "b"}}});
        assert_eq!(
            object_selector_matches(&selector, Some(&other), Some(&object)),
            Ok(true)
        );
        assert_eq!(
            object_selector_matches(&selector, Some(&other), None),
            Ok(false)
        );
        assert_eq!(object_selector_matches(&json!({}), None, None), Ok(true));
        let namespaced = request("deployments", None, Some("default"));
        assert_eq!(
            namespace_selector_matches(&selector, &namespaced, Some(&object)),
            Ok(true)
        );
        assert_eq!(
            namespace_selector_matches(&selector, &namespaced, Some(&other)),
            Ok(false)
        );
        let cluster = request("clusterthings", None, None);
        assert_eq!(
            namespace_selector_matches(&selector, &cluster, None),
            Ok(true)
        );
    }
}
