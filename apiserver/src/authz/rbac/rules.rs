//! RBAC's matching, as upstream defines it: whether a PolicyRule covers a request, and whether
//! a binding's subject is the caller.

use k8s_openapi::api::rbac::v1::{PolicyRule, Subject};

use crate::authz::Attributes;

/// Whether `rule` allows the request `attributes` describes.
pub fn allows(rule: &PolicyRule, attributes: &Attributes) -> bool {
    if !has(&rule.verbs, &attributes.verb) {
        return false;
    }
    if !attributes.resource_request {
        return rule
            .non_resource_urls
            .iter()
            .flatten()
            .any(|url| url_matches(url, &attributes.path));
    }
    let groups = rule.api_groups.as_deref().unwrap_or_default();
    if !groups
        .iter()
        .any(|group| group == "*" || *group == attributes.group)
    {
        return false;
    }
    let resources = rule.resources.as_deref().unwrap_or_default();
    if !resources
        .iter()
        .any(|resource| resource_matches(resource, &attributes.resource, &attributes.subresource))
    {
        return false;
    }
    match rule.resource_names.as_deref() {
        None | Some([]) => true,
        Some(names) => names.contains(&attributes.name),
    }
}

fn has(values: &[String], wanted: &str) -> bool {
    values.iter().any(|value| value == "*" || value == wanted)
}

/// `pods` covers `pods`; `pods/log` covers that subresource only; `*` covers everything and
/// `*/scale` every resource's scale.
fn resource_matches(rule: &str, resource: &str, subresource: &str) -> bool {
    if rule == "*" {
        return true;
    }
    if subresource.is_empty() {
        return rule == resource;
    }
    match rule.split_once('/') {
        Some((ruled, sub)) => sub == subresource && (ruled == "*" || ruled == resource),
        None => false,
    }
}

/// An exact path, `*` for all, or a prefix ending in `*` (`/healthz*`).
fn url_matches(rule: &str, path: &str) -> bool {
    if rule == "*" || rule == path {
        return true;
    }
    rule.strip_suffix('*')
        .is_some_and(|prefix| path.starts_with(prefix))
}

/// Whether `subject` of a binding in `namespace` ("" for a ClusterRoleBinding) names the
/// caller. A ServiceAccount subject without a namespace is the binding's namespace's.
pub fn applies_to(subject: &Subject, user: &str, groups: &[String], namespace: &str) -> bool {
    match subject.kind.as_str() {
        "User" => subject.name == user,
        "Group" => groups.contains(&subject.name),
        "ServiceAccount" => {
            let account_namespace = subject
                .namespace
                .as_deref()
                .filter(|ns| !ns.is_empty())
                .unwrap_or(namespace);
            !account_namespace.is_empty()
                && user == format!("system:serviceaccount:{account_namespace}:{}", subject.name)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> PolicyRule {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        PolicyRule {
            verbs: strings(verbs),
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            resource_names: (!names.is_empty()).then(|| strings(names)),
            non_resource_urls: None,
        }
    }

    fn request(verb: &str, group: &str, resource: &str, sub: &str, name: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            resource: resource.into(),
            subresource: sub.into(),
            name: name.into(),
            ..Attributes::default()
        }
    }

    #[test]
    fn verbs_groups_and_resources_must_all_match() {
        let read_pods = rule(&["get", "list", "watch"], &[""], &["pods"], &[]);
        assert!(allows(&read_pods, &request("get", "", "pods", "", "a")));
        assert!(allows(&read_pods, &request("watch", "", "pods", "", "")));
        assert!(!allows(&read_pods, &request("delete", "", "pods", "", "a")));
        assert!(!allows(
            &read_pods,
            &request("get", "apps", "pods", "", "a")
        ));
        assert!(!allows(&read_pods, &request("get", "", "secrets", "", "a")));
        let everything = rule(&["*"], &["*"], &["*"], &[]);
        assert!(allows(
            &everything,
            &request("deletecollection", "x.io", "things", "status", "")
        ));
    }

    #[test]
    fn a_subresource_is_its_own_resource() {
        let pods = rule(&["get"], &[""], &["pods"], &[]);
        assert!(!allows(&pods, &request("get", "", "pods", "log", "a")));
        let logs = rule(&["get"], &[""], &["pods/log"], &[]);
        assert!(allows(&logs, &request("get", "", "pods", "log", "a")));
        assert!(!allows(&logs, &request("get", "", "pods", "", "a")));
        let scales = rule(&["update"], &["apps"], &["*/scale"], &[]);
        assert!(allows(
            &scales,
            &request("update", "apps", "deployments", "scale", "web")
        ));
        assert!(!allows(
            &scales,
            &request("update", "apps", "deployments", "", "web")
        ));
    }

    #[test]
    fn resource_names_narrow_a_rule() {
        let one = rule(&["get", "update"], &[""], &["configmaps"], &["settings"]);
        assert!(allows(
            &one,
            &request("get", "", "configmaps", "", "settings")
        ));
        assert!(!allows(
            &one,
            &request("get", "", "configmaps", "", "other")
        ));
        // A list has no name: a named rule never allows it.
        assert!(!allows(&one, &request("list", "", "configmaps", "", "")));
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_a_trailing_star() {
        let health = PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(vec!["/healthz".into(), "/api/*".into()]),
            ..PolicyRule::default()
        };
        let path = |path: &str| Attributes {
            verb: "get".into(),
            path: path.into(),
            ..Attributes::default()
        };
        assert!(allows(&health, &path("/healthz")));
        assert!(!allows(&health, &path("/healthz/etcd")));
        assert!(allows(&health, &path("/api/v1")));
        assert!(!allows(&health, &path("/apis")));
        // A resource rule never covers a path.
        assert!(!allows(
            &rule(&["*"], &["*"], &["*"], &[]),
            &path("/healthz")
        ));
    }

    #[test]
    fn subjects_are_users_groups_or_service_accounts() {
        let subject = |kind: &str, name: &str, namespace: Option<&str>| Subject {
            kind: kind.into(),
            name: name.into(),
            namespace: namespace.map(str::to_string),
            api_group: None,
        };
        let groups = vec!["dev".to_string()];
        assert!(applies_to(
            &subject("User", "alice", None),
            "alice",
            &groups,
            "a"
        ));
        assert!(!applies_to(
            &subject("User", "bob", None),
            "alice",
            &groups,
            "a"
        ));
        assert!(applies_to(
            &subject("Group", "dev", None),
            "alice",
            &groups,
            ""
        ));
        let robot = "system:serviceaccount:a:robot";
        assert!(applies_to(
            &subject("ServiceAccount", "robot", Some("a")),
            robot,
            &[],
            ""
        ));
        // Without a namespace, the binding's own.
        assert!(applies_to(
            &subject("ServiceAccount", "robot", None),
            robot,
            &[],
            "a"
        ));
        assert!(!applies_to(
            &subject("ServiceAccount", "robot", None),
            robot,
            &[],
            "b"
        ));
        assert!(!applies_to(
            &subject("ServiceAccount", "robot", None),
            robot,
            &[],
            ""
        ));
    }
}
