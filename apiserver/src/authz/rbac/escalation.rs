//! Escalation prevention, as upstream's RBAC storage enforces it: a Role or ClusterRole may be
//! written only by someone who holds every permission it grants (or may `escalate` it), and a
//! binding only by someone who holds every permission of the role it references (or may `bind`
//! that role). Checked after the object's own validation, like a validating admission plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::rbac::v1::{PolicyRule, RoleRef};
use rudder_admission::{Attributes, Denied, Operation, Validating};
use serde_json::Value;

use super::PolicyCache;
use crate::authz::{self, Authorizer, Decision};

const GROUP: &str = "rbac.authorization.k8s.io";

/// The check, over the authorizer chain and the RBAC policy.
pub struct RbacEscalation {
    authorizer: Arc<dyn Authorizer>,
    policy: Arc<PolicyCache>,
}

impl RbacEscalation {
    pub fn new(authorizer: Arc<dyn Authorizer>, policy: Arc<PolicyCache>) -> Self {
        Self { authorizer, policy }
    }

    fn allowed(&self, attributes: &Attributes, verb: &str, resource: &str, name: &str) -> bool {
        let asked = authz::Attributes {
            user: attributes.user.clone(),
            groups: attributes.groups.clone(),
            verb: verb.into(),
            resource_request: true,
            group: GROUP.into(),
            resource: resource.into(),
            namespace: attributes.namespace.clone().unwrap_or_default(),
            name: name.into(),
            ..authz::Attributes::default()
        };
        matches!(self.authorizer.authorize(&asked), Decision::Allow { .. })
    }

    /// Refuses unless the writer holds `granted` where the object applies.
    fn check_held(&self, attributes: &Attributes, granted: &[PolicyRule]) -> Result<(), Denied> {
        let namespace = attributes.namespace.as_deref().unwrap_or("");
        let held = self
            .authorizer
            .rules_for(&attributes.user, &attributes.groups, namespace)
            .unwrap_or_default();
        let missing = uncovered(&held, granted);
        if missing.is_empty() {
            return Ok(());
        }
        let groups: Vec<String> = attributes.groups.iter().map(|g| format!("{g:?}")).collect();
        Err(Denied::forbidden(format!(
            "{}.{GROUP} \"{}\" is forbidden: user \"{}\" (groups=[{}]) is attempting to grant RBAC permissions not currently held:\n{}",
            attributes.resource,
            attributes.name,
            attributes.user,
            groups.join(" "),
            compact(&missing).join("\n")
        )))
    }
}

#[async_trait]
impl Validating for RbacEscalation {
    fn name(&self) -> &'static str {
        "RBACEscalation"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        let writes = matches!(attributes.operation, Operation::Create | Operation::Update);
        let (true, Some(object), GROUP, None) = (
            writes,
            object,
            attributes.group.as_str(),
            &attributes.subresource,
        ) else {
            return Ok(());
        };
        // As upstream: what the garbage collector changes (owner references, finalizers) never
        // needs the permissions the object grants.
        if let (Operation::Update, Some(old)) = (attributes.operation, old) {
            if only_garbage_collection_fields_differ(object, old) {
                return Ok(());
            }
        }
        match attributes.resource.as_str() {
            "roles" | "clusterroles" => {
                if self.allowed(
                    attributes,
                    "escalate",
                    &attributes.resource,
                    &attributes.name,
                ) {
                    return Ok(());
                }
                let rules: Vec<PolicyRule> =
                    serde_json::from_value(object["rules"].clone()).unwrap_or_default();
                self.check_held(attributes, &rules)
            }
            "rolebindings" | "clusterrolebindings" => {
                let Ok(role_ref) = serde_json::from_value::<RoleRef>(object["roleRef"].clone())
                else {
                    return Ok(());
                };
                let resource = if role_ref.kind == "Role" {
                    "roles"
                } else {
                    "clusterroles"
                };
                if self.allowed(attributes, "bind", resource, &role_ref.name) {
                    return Ok(());
                }
                let namespace = attributes.namespace.as_deref().unwrap_or("");
                let Some(rules) = self
                    .policy
                    .read(|policy| policy.role_rules(&role_ref, namespace))
                else {
                    return Err(Denied::forbidden(format!(
                        "{}.{GROUP} \"{}\" is forbidden: {} \"{}\" not found",
                        attributes.resource,
                        attributes.name,
                        role_ref.kind.to_lowercase(),
                        role_ref.name
                    )));
                };
                self.check_held(attributes, &rules)
            }
            _ => Ok(()),
        }
    }
}

/// Whether `new` differs from `old` in nothing but owner references, finalizers and the
/// bookkeeping every write moves.
fn only_garbage_collection_fields_differ(new: &Value, old: &Value) -> bool {
    let strip = |object: &Value| {
        let mut object = object.clone();
        if let Some(metadata) = object["metadata"].as_object_mut() {
            for field in [
                "ownerReferences",
                "finalizers",
                "managedFields",
                "resourceVersion",
                "generation",
            ] {
                metadata.remove(field);
            }
        }
        object
    };
    strip(new) == strip(old)
}

/// One permission: a verb on one group's resource (and name), or on one URL.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Atom {
    Resource {
        group: String,
        resource: String,
        name: Option<String>,
        verb: String,
    },
    Url {
        url: String,
        verb: String,
    },
}

fn atoms(rule: &PolicyRule) -> Vec<Atom> {
    let mut out = Vec::new();
    for verb in &rule.verbs {
        for url in rule.non_resource_urls.iter().flatten() {
            out.push(Atom::Url {
                url: url.clone(),
                verb: verb.clone(),
            });
        }
        for group in rule.api_groups.iter().flatten() {
            for resource in rule.resources.iter().flatten() {
                let names = rule.resource_names.as_deref().unwrap_or_default();
                if names.is_empty() {
                    out.push(Atom::Resource {
                        group: group.clone(),
                        resource: resource.clone(),
                        name: None,
                        verb: verb.clone(),
                    });
                }
                for name in names {
                    out.push(Atom::Resource {
                        group: group.clone(),
                        resource: resource.clone(),
                        name: Some(name.clone()),
                        verb: verb.clone(),
                    });
                }
            }
        }
    }
    out
}

fn has(values: &Option<Vec<String>>, wanted: &str) -> bool {
    values
        .iter()
        .flatten()
        .any(|value| value == "*" || value == wanted)
}

/// Whether an owner's `rule` covers the permission `atom` (a wildcard covers only what it
/// matches: `*/scale` covers every scale, not the resources themselves).
fn covers(rule: &PolicyRule, atom: &Atom) -> bool {
    match atom {
        Atom::Url { url, verb } => {
            rule.verbs.iter().any(|v| v == "*" || v == verb)
                && rule.non_resource_urls.iter().flatten().any(|owned| {
                    owned == "*"
                        || owned == url
                        || owned
                            .strip_suffix('*')
                            .is_some_and(|prefix| url.starts_with(prefix))
                })
        }
        Atom::Resource {
            group,
            resource,
            name,
            verb,
        } => {
            let resource_covered = rule.resources.iter().flatten().any(|owned| {
                owned == "*"
                    || owned == resource
                    || (owned.starts_with("*/")
                        && resource.split_once('/').map(|(_, sub)| sub) == owned.get(2..))
            });
            let name_covered = match rule.resource_names.as_deref() {
                None | Some([]) => true,
                Some(names) => name.as_ref().is_some_and(|name| names.contains(name)),
            };
            rule.verbs.iter().any(|v| v == "*" || v == verb)
                && has(&rule.api_groups, group)
                && resource_covered
                && name_covered
        }
    }
}

/// The permissions of `granted` that no rule of `held` covers.
fn uncovered(held: &[PolicyRule], granted: &[PolicyRule]) -> Vec<Atom> {
    let mut missing: Vec<Atom> = granted
        .iter()
        .flat_map(atoms)
        .filter(|atom| !held.iter().any(|rule| covers(rule, atom)))
        .collect();
    missing.sort();
    missing.dedup();
    missing
}

/// The missing permissions as upstream prints them, one rule per resource with its verbs.
fn compact(missing: &[Atom]) -> Vec<String> {
    let quoted = |values: &[String]| {
        values
            .iter()
            .map(|value| format!("{value:?}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut resources: BTreeMap<(String, String, Option<String>), Vec<String>> = BTreeMap::new();
    let mut urls: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for atom in missing {
        match atom {
            Atom::Resource {
                group,
                resource,
                name,
                verb,
            } => resources
                .entry((group.clone(), resource.clone(), name.clone()))
                .or_default()
                .push(verb.clone()),
            Atom::Url { url, verb } => urls.entry(url.clone()).or_default().push(verb.clone()),
        }
    }
    let mut lines: Vec<String> = resources
        .into_iter()
        .map(|((group, resource, name), verbs)| {
            let names = name
                .map(|name| format!(", ResourceNames:[{name:?}]"))
                .unwrap_or_default();
            format!(
                "{{APIGroups:[{group:?}], Resources:[{resource:?}]{names}, Verbs:[{}]}}",
                quoted(&verbs)
            )
        })
        .collect();
    lines.extend(
        urls.into_iter().map(|(url, verbs)| {
            format!("{{NonResourceURLs:[{url:?}], Verbs:[{}]}}", quoted(&verbs))
        }),
    );
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        let strings = |values: &[&str]| values.iter().map(|v| v.to_string()).collect::<Vec<_>>();
        PolicyRule {
            api_groups: Some(strings(groups)),
            resources: Some(strings(resources)),
            verbs: strings(verbs),
            ..PolicyRule::default()
        }
    }

    #[test]
    fn held_rules_cover_what_they_match_and_no_more() {
        let held = vec![
            rule(&[""], &["pods", "configmaps"], &["get", "list"]),
            rule(&["apps"], &["*/scale"], &["update"]),
        ];
        assert!(uncovered(&held, &[rule(&[""], &["pods"], &["get"])]).is_empty());
        assert!(uncovered(
            &held,
            &[rule(&["apps"], &["deployments/scale"], &["update"])]
        )
        .is_empty());
        let missing = uncovered(
            &held,
            &[
                rule(&[""], &["pods"], &["get", "delete"]),
                rule(&[""], &["pods/log"], &["get"]),
                rule(&["apps"], &["deployments"], &["update"]),
            ],
        );
        assert_eq!(
            compact(&missing),
            vec![
                "{APIGroups:[\"\"], Resources:[\"pods\"], Verbs:[\"delete\"]}",
                "{APIGroups:[\"\"], Resources:[\"pods/log\"], Verbs:[\"get\"]}",
                "{APIGroups:[\"apps\"], Resources:[\"deployments\"], Verbs:[\"update\"]}",
            ]
        );
    }

    #[test]
    fn wildcards_in_what_is_granted_need_wildcards_held() {
        let held = vec![rule(&[""], &["pods"], &["*"])];
        assert!(uncovered(&held, &[rule(&[""], &["pods"], &["delete", "get"])]).is_empty());
        assert_eq!(uncovered(&held, &[rule(&["*"], &["*"], &["*"])]).len(), 1);
        let admin = vec![rule(&["*"], &["*"], &["*"])];
        assert!(uncovered(&admin, &[rule(&["x.io"], &["things/status"], &["patch"])]).is_empty());
    }

    #[test]
    fn names_and_urls_are_covered_by_name_and_by_prefix() {
        let mut named = rule(&[""], &["configmaps"], &["get"]);
        named.resource_names = Some(vec!["one".into()]);
        let mut wants_one = rule(&[""], &["configmaps"], &["get"]);
        wants_one.resource_names = Some(vec!["one".into()]);
        assert!(uncovered(std::slice::from_ref(&named), &[wants_one]).is_empty());
        assert_eq!(
            uncovered(&[named], &[rule(&[""], &["configmaps"], &["get"])]).len(),
            1
        );
        let urls = |list: &[&str]| PolicyRule {
            verbs: vec!["get".into()],
            non_resource_urls: Some(list.iter().map(|u| u.to_string()).collect()),
            ..PolicyRule::default()
        };
        assert!(uncovered(&[urls(&["/healthz*"])], &[urls(&["/healthz/etcd"])]).is_empty());
        assert_eq!(
            compact(&uncovered(&[urls(&["/healthz"])], &[urls(&["/metrics"])])),
            vec!["{NonResourceURLs:[\"/metrics\"], Verbs:[\"get\"]}"]
        );
    }
}

#[cfg(test)]
mod gc_tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn owner_references_and_finalizers_alone_are_the_garbage_collectors() {
        let old = json!({"metadata": {"name": "b", "resourceVersion": "1"},
            "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"}});
        let mut orphaned = old.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        orphaned["metadata"]["finalizers"] = json!(["x/y"]);
        orphaned["metadata"]["resourceVersion"] = json!("2");
        assert!(only_garbage_collection_fields_differ(&orphaned, &old));
        let mut rebound = old.clone();
        rebound["subjects"] = json!([{"kind": "User", "name": "mallory"}]);
        assert!(!only_garbage_collection_fields_differ(&rebound, &old));
    }
}
