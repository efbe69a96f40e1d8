//! The RBAC authorizer: Roles, ClusterRoles and their bindings, held in memory as a [`Policy`]
//! kept current by watching the store (cache.rs), and judged as upstream's rule resolver does —
//! a cluster-scoped request by ClusterRoleBindings alone, a namespaced one also by the
//! RoleBindings of its namespace (to a Role there or to a ClusterRole). A ClusterRole with an
//! `aggregationRule` also grants the rules of every ClusterRole its selectors pick (what
//! upstream's aggregation controller copies into it). The default roles are in defaults.rs.

pub mod cache;
pub mod defaults;
pub mod escalation;
pub mod rules;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use serde::de::DeserializeOwned;

use super::{Attributes, Authorizer, Decision};
use crate::selectors::LabelSelector;

pub use cache::PolicyCache;

/// Where each RBAC kind is stored (as the catalog's entries say).
pub const CLUSTER_ROLES: &str = "/registry/clusterroles/";
pub const ROLES: &str = "/registry/roles/";
pub const CLUSTER_ROLE_BINDINGS: &str = "/registry/clusterrolebindings/";
pub const ROLE_BINDINGS: &str = "/registry/rolebindings/";

/// Every RBAC object in the store, by name.
#[derive(Default)]
pub struct Policy {
    cluster_roles: HashMap<String, ClusterRole>,
    /// What each ClusterRole grants, its aggregation resolved: recomputed when a ClusterRole
    /// changes (rare) so that a decision (frequent) only reads.
    granted: HashMap<String, Vec<PolicyRule>>,
    /// By (namespace, name).
    roles: HashMap<(String, String), Role>,
    cluster_role_bindings: HashMap<String, ClusterRoleBinding>,
    /// By namespace, then name: a request reads only its namespace's.
    role_bindings: HashMap<String, HashMap<String, RoleBinding>>,
}

fn parse<T: DeserializeOwned>(key: &str, value: &serde_json::Value) -> Option<T> {
    match T::deserialize(value) {
        Ok(object) => Some(object),
        Err(error) => {
            tracing::warn!(key, %error, "an RBAC object in the store does not parse; ignored");
            None
        }
    }
}

impl Policy {
    /// Applies the store's state of `key` (`None`: deleted). Keys outside the four RBAC
    /// prefixes are ignored.
    pub fn apply(&mut self, key: &str, value: Option<&serde_json::Value>) {
        if self.apply_one(key, value) {
            self.aggregate();
        }
    }

    /// Applies several changes, resolving aggregation once at the end.
    pub fn apply_all<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a serde_json::Value>)>,
    ) {
        let mut roles_changed = false;
        for (key, value) in changes {
            roles_changed |= self.apply_one(key, value);
        }
        if roles_changed {
            self.aggregate();
        }
    }

    /// Applies one change; true when it was a ClusterRole's.
    fn apply_one(&mut self, key: &str, value: Option<&serde_json::Value>) -> bool {
        if let Some(name) = key.strip_prefix(CLUSTER_ROLES) {
            match value.and_then(|value| parse(key, value)) {
                Some(role) => self.cluster_roles.insert(name.to_string(), role),
                None => self.cluster_roles.remove(name),
            };
            return true;
        } else if let Some(name) = key.strip_prefix(CLUSTER_ROLE_BINDINGS) {
            match value.and_then(|value| parse(key, value)) {
                Some(binding) => self.cluster_role_bindings.insert(name.to_string(), binding),
                None => self.cluster_role_bindings.remove(name),
            };
        } else if let Some((namespace, name)) = key
            .strip_prefix(ROLES)
            .and_then(|rest| rest.split_once('/'))
        {
            let id = (namespace.to_string(), name.to_string());
            match value.and_then(|value| parse(key, value)) {
                Some(role) => self.roles.insert(id, role),
                None => self.roles.remove(&id),
            };
        } else if let Some((namespace, name)) = key
            .strip_prefix(ROLE_BINDINGS)
            .and_then(|rest| rest.split_once('/'))
        {
            let bindings = self.role_bindings.entry(namespace.to_string()).or_default();
            match value.and_then(|value| parse(key, value)) {
                Some(binding) => {
                    bindings.insert(name.to_string(), binding);
                }
                None => {
                    bindings.remove(name);
                    if bindings.is_empty() {
                        self.role_bindings.remove(namespace);
                    }
                }
            }
        }
        false
    }

    /// Forgets every object under `prefix` (before it is listed again).
    pub fn clear(&mut self, prefix: &str) {
        match prefix {
            CLUSTER_ROLES => {
                self.cluster_roles.clear();
                self.granted.clear();
            }
            ROLES => self.roles.clear(),
            CLUSTER_ROLE_BINDINGS => self.cluster_role_bindings.clear(),
            ROLE_BINDINGS => self.role_bindings.clear(),
            _ => {}
        }
    }

    /// Recomputes what every ClusterRole grants.
    fn aggregate(&mut self) {
        let granted: HashMap<String, Vec<PolicyRule>> = self
            .cluster_roles
            .keys()
            .map(|name| {
                let rules = self.aggregated_rules(name).into_iter().cloned().collect();
                (name.clone(), rules)
            })
            .collect();
        self.granted = granted;
    }

    /// The rules a ClusterRole grants: its own, and those of the ClusterRoles its
    /// aggregationRule selects.
    fn cluster_role_rules(&self, name: &str) -> Vec<&PolicyRule> {
        self.granted
            .get(name)
            .map(|rules| rules.iter().collect())
            .unwrap_or_default()
    }

    fn aggregated_rules(&self, name: &str) -> Vec<&PolicyRule> {
        let Some(role) = self.cluster_roles.get(name) else {
            return Vec::new();
        };
        let mut granted: Vec<&PolicyRule> = role.rules.iter().flatten().collect();
        let selectors = role
            .aggregation_rule
            .as_ref()
            .and_then(|rule| rule.cluster_role_selectors.as_ref());
        for selector in selectors.into_iter().flatten() {
            let Some(selector) = serde_json::to_value(selector)
                .ok()
                .and_then(|value| LabelSelector::from_object(&value).ok())
            else {
                continue;
            };
            // An empty selector selects nothing here, as upstream's aggregation.
            if selector.is_empty() {
                continue;
            }
            for (other, aggregated) in &self.cluster_roles {
                if other == name {
                    continue;
                }
                let labels = serde_json::to_value(&aggregated.metadata.labels)
                    .ok()
                    .and_then(|value| value.as_object().cloned())
                    .unwrap_or_default();
                if selector.matches(&labels) {
                    granted.extend(aggregated.rules.iter().flatten());
                }
            }
        }
        granted
    }

    /// The rules of the role `role_ref` names, as a binding in `namespace` grants them;
    /// `None` when there is no such role.
    pub fn role_rules(&self, role_ref: &RoleRef, namespace: &str) -> Option<Vec<PolicyRule>> {
        let exists = match role_ref.kind.as_str() {
            "ClusterRole" => self.cluster_roles.contains_key(&role_ref.name),
            "Role" => self
                .roles
                .contains_key(&(namespace.to_string(), role_ref.name.clone())),
            _ => false,
        };
        exists.then(|| {
            self.referenced_rules(role_ref, namespace)
                .into_iter()
                .cloned()
                .collect()
        })
    }

    /// The rules `role_ref` grants in `namespace` (a Role is looked up there).
    fn referenced_rules(&self, role_ref: &RoleRef, namespace: &str) -> Vec<&PolicyRule> {
        match role_ref.kind.as_str() {
            "ClusterRole" => self.cluster_role_rules(&role_ref.name),
            "Role" if !namespace.is_empty() => self
                .roles
                .get(&(namespace.to_string(), role_ref.name.clone()))
                .map(|role| role.rules.iter().flatten().collect())
                .unwrap_or_default(),
            _ => Vec::new(),
        }
    }

    /// Every binding whose subjects include the caller, as upstream's rule resolver visits them:
    /// the ClusterRoleBindings, then (for a namespaced request) the RoleBindings of `namespace`.
    fn bindings_for<'a>(
        &'a self,
        user: &'a str,
        groups: &'a [String],
        namespace: &'a str,
    ) -> impl Iterator<Item = Bound<'a>> + 'a {
        let cluster = self.cluster_role_bindings.iter().map(|(name, binding)| {
            (
                "ClusterRoleBinding",
                name,
                "",
                &binding.role_ref,
                &binding.subjects,
            )
        });
        let local = self
            .role_bindings
            .get(namespace)
            .filter(|_| !namespace.is_empty())
            .into_iter()
            .flatten()
            .map(move |(name, binding)| {
                (
                    "RoleBinding",
                    name,
                    namespace,
                    &binding.role_ref,
                    &binding.subjects,
                )
            });
        cluster
            .chain(local)
            .filter_map(move |(kind, name, bound_in, role_ref, subjects)| {
                let subject = subjects
                    .iter()
                    .flatten()
                    .find(|subject| rules::applies_to(subject, user, groups, bound_in))?;
                Some(Bound {
                    kind,
                    name,
                    namespace: bound_in,
                    role_ref,
                    subject,
                })
            })
    }

    /// Every rule granted to `user` in `namespace` ("" for the cluster scope): its
    /// ClusterRoleBindings', then its RoleBindings' there.
    pub fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Vec<PolicyRule> {
        self.bindings_for(user, groups, namespace)
            .flat_map(|bound| self.referenced_rules(bound.role_ref, bound.namespace))
            .cloned()
            .collect()
    }

    /// Upstream's answer for `attributes`: allowed with the binding that allows it, or no
    /// opinion.
    pub fn decide(&self, attributes: &Attributes) -> Decision {
        let namespace = attributes.namespace.as_str();
        self.bindings_for(&attributes.user, &attributes.groups, namespace)
            .find(|bound| {
                self.referenced_rules(bound.role_ref, bound.namespace)
                    .into_iter()
                    .any(|rule| rules::allows(rule, attributes))
            })
            .map_or(Decision::NoOpinion, |bound| bound.allowed())
    }
}

/// A binding that applies to the caller, with the subject that names it.
struct Bound<'a> {
    kind: &'static str,
    name: &'a str,
    /// "" for a ClusterRoleBinding.
    namespace: &'a str,
    role_ref: &'a RoleRef,
    subject: &'a Subject,
}

impl Bound<'_> {
    /// Upstream's reason for an allowed request.
    fn allowed(&self) -> Decision {
        allowed(
            self.kind,
            self.name,
            self.namespace,
            self.role_ref,
            self.subject,
        )
    }
}

fn allowed(
    kind: &str,
    name: &str,
    namespace: &str,
    role_ref: &RoleRef,
    subject: &Subject,
) -> Decision {
    let binding = if namespace.is_empty() {
        format!("{kind} \"{name}\"")
    } else {
        format!("{kind} \"{name}/{namespace}\"")
    };
    Decision::Allow {
        reason: format!(
            "RBAC: allowed by {binding} of {} \"{}\" to {} \"{}\"",
            role_ref.kind, role_ref.name, subject.kind, subject.name
        ),
    }
}

/// The RBAC authorizer over a policy the store keeps current.
pub struct Rbac {
    policy: Arc<PolicyCache>,
}

impl Rbac {
    pub fn new(policy: Arc<PolicyCache>) -> Self {
        Self { policy }
    }
}

impl Authorizer for Rbac {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        self.policy.read(|policy| policy.decide(attributes))
    }

    fn rules_for(&self, user: &str, groups: &[String], namespace: &str) -> Option<Vec<PolicyRule>> {
        Some(
            self.policy
                .read(|policy| policy.rules_for(user, groups, namespace)),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(objects: &[(&str, serde_json::Value)]) -> Policy {
        let mut policy = Policy::default();
        for (key, value) in objects {
            policy.apply(key, Some(value));
        }
        policy
    }

    fn pods(verb: &str, namespace: &str, user: &str) -> Attributes {
        Attributes {
            user: user.into(),
            groups: vec!["system:authenticated".into()],
            verb: verb.into(),
            resource_request: true,
            resource: "pods".into(),
            namespace: namespace.into(),
            ..Attributes::default()
        }
    }

    fn view_and_alice() -> Policy {
        policy(&[
            (
                "/registry/clusterroles/view",
                json!({"metadata": {"name": "view"}, "aggregationRule": {"clusterRoleSelectors": [
                    {"matchLabels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}}]}}),
            ),
            (
                "/registry/clusterroles/system:aggregate-to-view",
                json!({"metadata": {"name": "system:aggregate-to-view",
                        "labels": {"rbac.authorization.k8s.io/aggregate-to-view": "true"}},
                       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]}),
            ),
            (
                "/registry/rolebindings/a/alice-views",
                json!({"metadata": {"name": "alice-views", "namespace": "a"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
                       "subjects": [{"kind": "User", "name": "alice"}]}),
            ),
        ])
    }

    #[test]
    fn a_role_binding_grants_in_its_namespace_only() {
        let policy = view_and_alice();
        match policy.decide(&pods("list", "a", "alice")) {
            Decision::Allow { reason } => assert_eq!(
                reason,
                "RBAC: allowed by RoleBinding \"alice-views/a\" of ClusterRole \"view\" to User \"alice\""
            ),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            policy.decide(&pods("delete", "a", "alice")),
            Decision::NoOpinion
        );
        assert_eq!(
            policy.decide(&pods("list", "b", "alice")),
            Decision::NoOpinion
        );
        assert_eq!(
            policy.decide(&pods("list", "", "alice")),
            Decision::NoOpinion
        );
        assert_eq!(
            policy.decide(&pods("list", "a", "bob")),
            Decision::NoOpinion
        );
    }

    #[test]
    fn deleting_a_binding_takes_its_grant_away() {
        let mut policy = view_and_alice();
        policy.apply("/registry/rolebindings/a/alice-views", None);
        assert_eq!(
            policy.decide(&pods("list", "a", "alice")),
            Decision::NoOpinion
        );
    }

    #[test]
    fn cluster_role_bindings_grant_everywhere_and_roles_stay_in_their_namespace() {
        let policy = policy(&[
            (
                "/registry/clusterroles/cluster-admin",
                json!({"metadata": {"name": "cluster-admin"},
                       "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["*"]}]}),
            ),
            (
                "/registry/clusterrolebindings/ops",
                json!({"metadata": {"name": "ops"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
                       "subjects": [{"kind": "Group", "name": "ops"}]}),
            ),
            (
                "/registry/roles/b/deleter",
                json!({"metadata": {"name": "deleter", "namespace": "b"},
                       "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete"]}]}),
            ),
            (
                "/registry/rolebindings/b/robot-deletes",
                json!({"metadata": {"name": "robot-deletes", "namespace": "b"},
                       "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "deleter"},
                       "subjects": [{"kind": "ServiceAccount", "name": "robot"}]}),
            ),
        ]);
        let mut ops = pods("create", "", "carol");
        ops.groups.push("ops".into());
        assert!(matches!(policy.decide(&ops), Decision::Allow { .. }));
        let robot = "system:serviceaccount:b:robot";
        assert!(matches!(
            policy.decide(&pods("delete", "b", robot)),
            Decision::Allow { .. }
        ));
        assert_eq!(policy.decide(&pods("get", "b", robot)), Decision::NoOpinion);
    }
}
