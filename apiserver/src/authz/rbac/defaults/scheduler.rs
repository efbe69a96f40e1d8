//! The scheduler's default policy, as upstream's bootstrap policy has it in 1.33: the
//! `system:kube-scheduler` role (read what placement depends on, bind pods, write their
//! status and events, hold its Lease) and `system:volume-scheduler` (bind volumes to claims),
//! both bound to the user `system:kube-scheduler`, and in kube-system the reader of the
//! `extension-apiserver-authentication` ConfigMap, bound to the scheduler and the
//! controller-manager.

use serde_json::{json, Value};

use super::{cluster_role, metadata, named, rule, user_binding, READ};

const READ_UPDATE: &[&str] = &["get", "list", "patch", "update", "watch"];

/// `system:kube-scheduler` and `system:volume-scheduler`.
pub fn cluster_roles() -> Vec<Value> {
    let storage = &["storage.k8s.io"];
    let resource = &["resource.k8s.io"];
    vec![
        cluster_role(
            "system:kube-scheduler",
            &[],
            vec![
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                // Leader election, and the candidacy of coordinated leader election.
                rule(&["coordination.k8s.io"], &["leases"], &["create"]),
                named(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-scheduler"],
                    &["get", "list", "update", "watch"],
                ),
                rule(&["coordination.k8s.io"], &["leasecandidates"], super::ALL),
                rule(&[""], &["nodes"], READ),
                rule(&[""], &["pods"], &["delete", "get", "list", "watch"]),
                rule(&[""], &["bindings", "pods/binding"], &["create"]),
                rule(&[""], &["pods/status"], &["patch", "update"]),
                // What selects pods (spreading), and what pods use.
                rule(&[""], &["replicationcontrollers", "services"], READ),
                rule(&["apps", "extensions"], &["replicasets"], READ),
                rule(&["apps"], &["statefulsets"], READ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(
                    &[""],
                    &["persistentvolumeclaims", "persistentvolumes"],
                    READ,
                ),
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
                rule(storage, &["csinodes"], READ),
                rule(&[""], &["namespaces"], READ),
                rule(storage, &["csidrivers"], READ),
                rule(storage, &["csistoragecapacities"], READ),
                // Dynamic resource allocation: upstream grants these with the
                // DynamicResourceAllocation feature (beta in 1.33); Rudder has no feature gates.
                rule(resource, &["deviceclasses", "resourceclaims"], READ),
                rule(resource, &["resourceclaims/status"], READ_UPDATE),
                rule(&[""], &["pods/finalizers"], READ_UPDATE),
                rule(resource, &["resourceslices"], READ),
            ],
        ),
        cluster_role(
            "system:volume-scheduler",
            &[],
            vec![
                rule(&[""], &["persistentvolumes"], READ_UPDATE),
                rule(storage, &["storageclasses"], READ),
                rule(&[""], &["persistentvolumeclaims"], READ_UPDATE),
            ],
        ),
    ]
}

/// The bindings of both roles to the scheduler's user.
pub fn cluster_role_bindings() -> Vec<Value> {
    let user = crate::server::SCHEDULER_USER;
    vec![
        user_binding("system:kube-scheduler", "system:kube-scheduler", user),
        user_binding("system:volume-scheduler", "system:volume-scheduler", user),
    ]
}

const AUTHENTICATION_READER: &str = "extension-apiserver-authentication-reader";

/// In kube-system: the reader of the ConfigMap that publishes the apiserver's client CAs.
pub fn roles() -> Vec<Value> {
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": in_kube_system(metadata(AUTHENTICATION_READER, &[])),
        "rules": [named(&[""], &["configmaps"], &["extension-apiserver-authentication"], READ)]}),
    ]
}

/// In kube-system: that reader bound to the controller-manager and the scheduler.
pub fn role_bindings() -> Vec<Value> {
    let name = format!("system::{AUTHENTICATION_READER}");
    let subjects: Vec<Value> = [
        crate::server::CONTROLLER_MANAGER_USER,
        crate::server::SCHEDULER_USER,
    ]
    .iter()
    .map(|user| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}))
    .collect();
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": in_kube_system(metadata(&name, &[])),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": AUTHENTICATION_READER},
        "subjects": subjects}),
    ]
}

fn in_kube_system(mut metadata: Value) -> Value {
    metadata["namespace"] = json!("kube-system");
    metadata
}

#[cfg(test)]
pub(super) mod tests {
    use crate::authz::rbac::{Policy, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS};
    use crate::authz::{Attributes, Decision};

    /// Every default object, as the store holds them after bootstrap.
    pub(in crate::authz::rbac::defaults) fn defaults() -> Policy {
        let mut policy = Policy::default();
        let defaults = super::super::cluster_roles()
            .into_iter()
            .map(|o| (CLUSTER_ROLES, o))
            .chain(
                super::super::cluster_role_bindings()
                    .into_iter()
                    .map(|o| (CLUSTER_ROLE_BINDINGS, o)),
            )
            .chain(super::super::roles().into_iter().map(|o| (ROLES, o)))
            .chain(
                super::super::role_bindings()
                    .into_iter()
                    .map(|o| (ROLE_BINDINGS, o)),
            );
        for (prefix, object) in defaults {
            let meta = &object["metadata"];
            let key = match meta["namespace"].as_str() {
                Some(namespace) => format!(
                    "{prefix}{namespace}/{}",
                    meta["name"].as_str().unwrap_or("")
                ),
                None => format!("{prefix}{}", meta["name"].as_str().unwrap_or("")),
            };
            policy.apply(&key, Some(&object));
        }
        policy
    }

    pub(in crate::authz::rbac::defaults) fn scheduler(
        verb: &str,
        group: &str,
        resource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        let (resource, subresource) = resource.split_once('/').unwrap_or((resource, ""));
        Attributes {
            user: crate::server::SCHEDULER_USER.into(),
            groups: vec!["system:authenticated".into()],
            verb: verb.into(),
            resource_request: true,
            group: group.into(),
            version: "v1".into(),
            resource: resource.into(),
            subresource: subresource.into(),
            namespace: namespace.into(),
            name: name.into(),
            path: String::new(),
        }
    }

    pub(in crate::authz::rbac::defaults) fn allowed(
        policy: &Policy,
        attributes: &Attributes,
    ) -> bool {
        matches!(policy.decide(attributes), Decision::Allow { .. })
    }

    #[test]
    fn the_scheduler_may_do_what_scheduling_takes() {
        let policy = defaults();
        for (verb, group, resource, namespace, name) in [
            ("watch", "", "pods", "", ""),
            ("list", "", "nodes", "", ""),
            ("create", "", "pods/binding", "default", "web"),
            ("patch", "", "pods/status", "default", "web"),
            ("delete", "", "pods", "default", "victim"),
            ("create", "events.k8s.io", "events", "default", ""),
            ("list", "policy", "poddisruptionbudgets", "", ""),
            ("list", "apps", "statefulsets", "", ""),
            ("create", "coordination.k8s.io", "leases", "kube-system", ""),
            (
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-system",
                "kube-scheduler",
            ),
            ("update", "", "persistentvolumeclaims", "default", "data"),
            ("watch", "storage.k8s.io", "storageclasses", "", ""),
            (
                "get",
                "",
                "configmaps",
                "kube-system",
                "extension-apiserver-authentication",
            ),
        ] {
            let attributes = scheduler(verb, group, resource, namespace, name);
            assert!(allowed(&policy, &attributes), "{attributes:?}");
        }
    }

    #[test]
    fn the_scheduler_may_not_do_more() {
        let policy = defaults();
        for (verb, group, resource, namespace, name) in [
            ("create", "", "secrets", "default", ""),
            ("get", "", "secrets", "default", "s"),
            ("update", "", "pods", "default", "web"),
            (
                "update",
                "coordination.k8s.io",
                "leases",
                "kube-system",
                "kube-controller-manager",
            ),
            ("get", "", "configmaps", "kube-system", "other"),
            ("create", "", "pods", "default", ""),
        ] {
            let attributes = scheduler(verb, group, resource, namespace, name);
            assert!(!allowed(&policy, &attributes), "{attributes:?}");
        }
    }

    #[test]
    fn the_controller_manager_reads_the_authentication_config_map() {
        let policy = defaults();
        let mut attributes = scheduler(
            "watch",
            "",
            "configmaps",
            "kube-system",
            "extension-apiserver-authentication",
        );
        attributes.user = crate::server::CONTROLLER_MANAGER_USER.into();
        assert!(allowed(&policy, &attributes));
    }

    #[test]
    fn default_names_are_unique_per_kind() {
        for objects in [
            super::super::cluster_roles(),
            super::super::cluster_role_bindings(),
            super::super::roles(),
            super::super::role_bindings(),
        ] {
            let mut names: Vec<&str> = objects
                .iter()
                .filter_map(|o| o["metadata"]["name"].as_str())
                .collect();
            let all = names.len();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), all);
        }
    }
}
