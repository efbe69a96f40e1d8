//! The controllers' own roles, as upstream's bootstrap policy has them: one ClusterRole
//! `system:controller:<account>` per controller, bound to the ServiceAccount
//! `kube-system/<account>` the controller-manager runs that controller as (upstream's
//! `--use-service-account-credentials`; the table of which controller runs as which account is
//! `rudder_controllers::credentials`). Each role holds what its controller reads beyond the
//! shared informers and what it writes — a controller that needs more gets it here, compared
//! with upstream, never by widening another role. The certificate controller's role is with the
//! node-join policy (`certificates`). Roles are here for controllers Rudder is about to run too
//! (`node-controller`, `persistent-volume-binder`), so they have identities when they land.

use serde_json::Value;

use super::{cluster_role, rule, READ};

/// The prefix of every controller role's name; the rest is the ServiceAccount's name.
pub const ROLE_PREFIX: &str = "system:controller:";
/// Where the controllers' ServiceAccounts live.
pub const NAMESPACE: &str = "kube-system";

const CORE: &[&str] = &[""];
const APPS: &[&str] = &["apps", "extensions"];
const BATCH: &[&str] = &["batch"];
const ALL_GROUPS: &[&str] = &["*"];
const ANY: &[&str] = &["*"];
const UPDATE: &[&str] = &["update"];

/// Recording events, which every controller does.
fn events() -> Value {
    rule(
        &["", "events.k8s.io"],
        &["events"],
        &["create", "patch", "update"],
    )
}

/// Each controller ServiceAccount's name with its rules (without the events rule, added to all
/// but the few upstream leaves it out of).
fn table() -> Vec<(&'static str, bool, Vec<Value>)> {
    vec![
        (
            "clusterrole-aggregation-controller",
            false,
            vec![rule(
                &["rbac.authorization.k8s.io"],
                &["clusterroles"],
                &["escalate", "get", "list", "patch", "update", "watch"],
            )],
        ),
        (
            "cronjob-controller",
            true,
            vec![
                rule(BATCH, &["cronjobs"], &["get", "list", "update", "watch"]),
                rule(
                    BATCH,
                    &["jobs"],
                    &[
                        "create", "delete", "get", "list", "patch", "update", "watch",
                    ],
                ),
                rule(BATCH, &["cronjobs/status", "cronjobs/finalizers"], UPDATE),
                rule(CORE, &["pods"], &["delete", "list", "watch"]),
            ],
        ),
        (
            "daemon-set-controller",
            true,
            vec![
                rule(APPS, &["daemonsets"], READ),
                rule(
                    APPS,
                    &["daemonsets/status", "daemonsets/finalizers"],
                    UPDATE,
                ),
                rule(CORE, &["nodes"], &["list", "watch"]),
                rule(
                    CORE,
                    &["pods"],
                    &["create", "delete", "list", "patch", "watch"],
                ),
                rule(CORE, &["pods/binding"], &["create"]),
                rule(&["apps"], &["controllerrevisions"], ALL_BUT_COLLECTIONS),
            ],
        ),
        (
            "deployment-controller",
            true,
            vec![
                // Rudder's controller records the revision annotations with a patch, where
                // upstream's updates: both verbs on deployments.
                rule(
                    APPS,
                    &["deployments"],
                    &["get", "list", "patch", "update", "watch"],
                ),
                rule(
                    APPS,
                    &["deployments/status", "deployments/finalizers"],
                    UPDATE,
                ),
                rule(APPS, &["replicasets"], ALL_BUT_COLLECTIONS),
                rule(CORE, &["pods"], &["get", "list", "update", "watch"]),
            ],
        ),
        (
            "disruption-controller",
            true,
            vec![
                rule(APPS, &["deployments", "replicasets"], READ),
                rule(CORE, &["replicationcontrollers"], READ),
                rule(&["policy"], &["poddisruptionbudgets"], READ),
                rule(&["apps"], &["statefulsets"], READ),
                // Rudder's controller writes the budget's status with a patch (upstream: update).
                rule(
                    &["policy"],
                    &["poddisruptionbudgets/status"],
                    &["patch", "update"],
                ),
                rule(CORE, &["pods/status"], &["patch", "update"]),
                rule(ALL_GROUPS, &["*/scale"], &["get"]),
            ],
        ),
        (
            "endpoint-controller",
            true,
            vec![
                rule(CORE, &["pods", "services"], READ),
                rule(CORE, &["endpoints"], READ_WRITE_NO_PATCH),
                rule(CORE, &["endpoints/restricted"], &["create"]),
            ],
        ),
        (
            "endpointslice-controller",
            true,
            vec![
                rule(CORE, &["nodes", "pods", "services"], READ),
                rule(CORE, &["services/finalizers"], UPDATE),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    READ_WRITE_NO_PATCH,
                ),
            ],
        ),
        (
            "endpointslicemirroring-controller",
            true,
            vec![
                rule(CORE, &["endpoints", "services"], READ),
                rule(CORE, &["endpoints/finalizers"], UPDATE),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    READ_WRITE_NO_PATCH,
                ),
            ],
        ),
        (
            "generic-garbage-collector",
            true,
            vec![rule(
                ALL_GROUPS,
                ANY,
                &["delete", "get", "list", "patch", "update", "watch"],
            )],
        ),
        (
            "job-controller",
            true,
            vec![
                rule(
                    BATCH,
                    &["jobs"],
                    &["get", "list", "patch", "update", "watch"],
                ),
                rule(BATCH, &["jobs/status", "jobs/finalizers"], UPDATE),
                rule(
                    CORE,
                    &["pods"],
                    &["create", "delete", "list", "patch", "watch"],
                ),
            ],
        ),
        (
            "namespace-controller",
            false,
            vec![
                rule(CORE, &["namespaces"], &["delete", "get", "list", "watch"]),
                rule(CORE, &["namespaces/finalize", "namespaces/status"], UPDATE),
                rule(
                    ALL_GROUPS,
                    ANY,
                    &["delete", "deletecollection", "get", "list", "watch"],
                ),
            ],
        ),
        (
            // Node lifecycle and node IPAM.
            "node-controller",
            true,
            vec![
                rule(
                    CORE,
                    &["nodes"],
                    &["delete", "get", "list", "patch", "update", "watch"],
                ),
                rule(CORE, &["nodes/status", "pods/status"], &["patch", "update"]),
                rule(CORE, &["pods"], &["delete", "get", "list", "watch"]),
            ],
        ),
        (
            "persistent-volume-binder",
            true,
            vec![
                // Rudder's binder and local-path provisioner patch where upstream's update.
                rule(
                    CORE,
                    &["persistentvolumes"],
                    &[
                        "create", "delete", "get", "list", "patch", "update", "watch",
                    ],
                ),
                rule(
                    CORE,
                    &["persistentvolumes/status", "persistentvolumeclaims/status"],
                    &["patch", "update"],
                ),
                rule(
                    CORE,
                    &["persistentvolumeclaims"],
                    &["get", "list", "patch", "update", "watch"],
                ),
                rule(
                    CORE,
                    &["pods"],
                    &["create", "delete", "get", "list", "watch"],
                ),
                rule(&["storage.k8s.io"], &["storageclasses"], READ),
                rule(CORE, &["nodes"], &["list", "watch"]),
                rule(CORE, &["events"], &["watch"]),
                rule(CORE, &["services"], &["get"]),
            ],
        ),
        (
            "pvc-protection-controller",
            true,
            vec![
                rule(
                    CORE,
                    &["persistentvolumeclaims"],
                    &["get", "list", "update", "watch"],
                ),
                rule(CORE, &["pods"], &["get", "list", "watch"]),
            ],
        ),
        (
            "pv-protection-controller",
            true,
            vec![rule(
                CORE,
                &["persistentvolumes"],
                &["get", "list", "update", "watch"],
            )],
        ),
        (
            "pod-garbage-collector",
            false,
            vec![
                rule(CORE, &["pods"], &["delete", "list", "watch"]),
                rule(CORE, &["nodes"], READ),
                rule(CORE, &["pods/status"], &["patch"]),
            ],
        ),
        (
            "replicaset-controller",
            true,
            vec![
                rule(APPS, &["replicasets"], &["get", "list", "update", "watch"]),
                rule(
                    APPS,
                    &["replicasets/status", "replicasets/finalizers"],
                    UPDATE,
                ),
                rule(
                    CORE,
                    &["pods"],
                    &["create", "delete", "list", "patch", "watch"],
                ),
            ],
        ),
        (
            "resourcequota-controller",
            true,
            vec![
                rule(ALL_GROUPS, ANY, &["list", "watch"]),
                // Rudder's controller writes the quota's status with a patch pinned to the
                // version it counted (upstream: update).
                rule(CORE, &["resourcequotas/status"], &["patch", "update"]),
            ],
        ),
        (
            "root-ca-cert-publisher",
            true,
            vec![rule(CORE, &["configmaps"], &["create", "update"])],
        ),
        (
            "service-account-controller",
            true,
            vec![rule(CORE, &["serviceaccounts"], &["create"])],
        ),
        (
            "statefulset-controller",
            true,
            vec![
                rule(CORE, &["pods"], &["list", "watch"]),
                rule(&["apps"], &["statefulsets"], READ),
                rule(
                    &["apps"],
                    &["statefulsets/status", "statefulsets/finalizers"],
                    UPDATE,
                ),
                rule(
                    CORE,
                    &["pods"],
                    &["create", "delete", "get", "patch", "update"],
                ),
                rule(&["apps"], &["controllerrevisions"], ALL_BUT_COLLECTIONS),
                rule(
                    CORE,
                    &["persistentvolumeclaims"],
                    &["create", "delete", "get", "list", "update", "watch"],
                ),
                rule(CORE, &["pods/finalizers"], UPDATE),
            ],
        ),
        (
            "ttl-after-finished-controller",
            true,
            vec![rule(BATCH, &["jobs"], &["delete", "get", "list", "watch"])],
        ),
        (
            // Rudder's own (upstream has none): the `kube-dns` Service's Endpoints and
            // EndpointSlice, kept from the nodes that serve DNS.
            "cluster-dns-endpoints-controller",
            true,
            vec![
                rule(CORE, &["nodes", "services"], READ),
                rule(CORE, &["endpoints"], READ_WRITE_NO_PATCH),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    READ_WRITE_NO_PATCH,
                ),
            ],
        ),
    ]
}

const READ_WRITE_NO_PATCH: &[&str] = &["create", "delete", "get", "list", "update", "watch"];
const ALL_BUT_COLLECTIONS: &[&str] = &[
    "create", "delete", "get", "list", "patch", "update", "watch",
];

/// `system:controller:<account>` for each controller account.
pub fn cluster_roles() -> Vec<Value> {
    table()
        .into_iter()
        .map(|(account, records_events, mut rules)| {
            if records_events {
                rules.push(events());
            }
            cluster_role(&format!("{ROLE_PREFIX}{account}"), &[], rules)
        })
        .collect()
}

/// Each controller role bound to its ServiceAccount in kube-system.
pub fn cluster_role_bindings() -> Vec<Value> {
    table()
        .into_iter()
        .map(|(account, _, _)| service_account_binding(account))
        .collect()
}

/// `system:controller:<account>` bound to `kube-system/<account>`.
pub fn service_account_binding(account: &str) -> Value {
    let name = format!("{ROLE_PREFIX}{account}");
    let mut bound = super::binding(&name, &name, &[]);
    bound["subjects"] =
        serde_json::json!([{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}]);
    bound
}

/// The controller accounts that have a role here (the certificate controller's is elsewhere).
pub fn accounts() -> Vec<&'static str> {
    table().into_iter().map(|(account, _, _)| account).collect()
}

#[cfg(test)]
mod tests {
    use super::super::scheduler::tests::{allowed, defaults, scheduler};
    use super::*;
    use crate::authz::Attributes;

    /// A request by the controller account `account`.
    fn by(account: &str, verb: &str, group: &str, resource: &str, namespace: &str) -> Attributes {
        let mut attributes = scheduler(verb, group, resource, namespace, "");
        attributes.user = format!("system:serviceaccount:{NAMESPACE}:{account}");
        attributes.groups = vec![
            "system:serviceaccounts".into(),
            format!("system:serviceaccounts:{NAMESPACE}"),
            "system:authenticated".into(),
        ];
        attributes
    }

    #[test]
    fn each_account_has_its_role_bound_to_it_alone() {
        let roles = cluster_roles();
        let bindings = cluster_role_bindings();
        assert_eq!(roles.len(), bindings.len());
        for account in accounts() {
            let name = format!("{ROLE_PREFIX}{account}");
            let role = roles
                .iter()
                .find(|role| role["metadata"]["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no role {name}"));
            assert!(!role["rules"].as_array().unwrap().is_empty(), "{name}");
            assert_eq!(
                role["metadata"]["labels"]["kubernetes.io/bootstrapping"],
                "rbac-defaults"
            );
            assert_eq!(
                role["metadata"]["annotations"]["rbac.authorization.kubernetes.io/autoupdate"],
                "true"
            );
            let binding = bindings
                .iter()
                .find(|binding| binding["metadata"]["name"] == name.as_str())
                .unwrap_or_else(|| panic!("no binding {name}"));
            assert_eq!(binding["roleRef"]["name"], name.as_str());
            assert_eq!(
                binding["subjects"],
                serde_json::json!([{"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE}])
            );
        }
        for account in [
            "replicaset-controller",
            "deployment-controller",
            "generic-garbage-collector",
            "node-controller",
            "persistent-volume-binder",
        ] {
            assert!(accounts().contains(&account), "{account}");
        }
    }

    #[test]
    fn a_controller_may_do_its_work_and_no_more() {
        let policy = defaults();
        for (account, verb, group, resource) in [
            ("replicaset-controller", "create", "", "pods"),
            ("replicaset-controller", "delete", "", "pods"),
            (
                "replicaset-controller",
                "update",
                "apps",
                "replicasets/status",
            ),
            ("replicaset-controller", "create", "events.k8s.io", "events"),
            ("deployment-controller", "create", "apps", "replicasets"),
            ("deployment-controller", "patch", "apps", "deployments"),
            (
                "namespace-controller",
                "deletecollection",
                "apps",
                "deployments",
            ),
            ("namespace-controller", "update", "", "namespaces/finalize"),
            (
                "generic-garbage-collector",
                "patch",
                "example.com",
                "widgets",
            ),
            ("disruption-controller", "get", "apps", "deployments/scale"),
            (
                "certificate-controller",
                "create",
                "authorization.k8s.io",
                "subjectaccessreviews",
            ),
        ] {
            let attributes = by(account, verb, group, resource, "default");
            assert!(allowed(&policy, &attributes), "{attributes:?}");
        }
        for (account, verb, group, resource) in [
            ("replicaset-controller", "get", "", "secrets"),
            ("replicaset-controller", "create", "apps", "deployments"),
            ("replicaset-controller", "delete", "", "nodes"),
            ("deployment-controller", "create", "", "pods"),
            ("job-controller", "list", "", "secrets"),
            ("namespace-controller", "create", "", "pods"),
            ("generic-garbage-collector", "create", "", "pods"),
            (
                "endpoint-controller",
                "create",
                "discovery.k8s.io",
                "endpointslices",
            ),
            ("service-account-controller", "create", "", "secrets"),
            (
                "clusterrole-aggregation-controller",
                "create",
                "rbac.authorization.k8s.io",
                "clusterrolebindings",
            ),
        ] {
            let attributes = by(account, verb, group, resource, "default");
            assert!(!allowed(&policy, &attributes), "{attributes:?}");
        }
    }

    #[test]
    fn the_manager_itself_holds_only_what_it_needs_to_give_controllers_identities() {
        let policy = defaults();
        let manager = |verb: &str, group: &str, resource: &str, namespace: &str, name: &str| {
            let mut attributes = scheduler(verb, group, resource, namespace, name);
            attributes.user = crate::server::CONTROLLER_MANAGER_USER.into();
            allowed(&policy, &attributes)
        };
        assert!(manager("watch", "apps", "deployments", "", ""));
        assert!(manager("create", "", "serviceaccounts", NAMESPACE, ""));
        assert!(manager(
            "get",
            "",
            "serviceaccounts",
            NAMESPACE,
            "replicaset-controller"
        ));
        assert!(manager(
            "create",
            "",
            "serviceaccounts/token",
            NAMESPACE,
            "replicaset-controller"
        ));
        assert!(manager(
            "update",
            "coordination.k8s.io",
            "leases",
            NAMESPACE,
            "kube-controller-manager"
        ));
        assert!(manager("update", "", "secrets", "default", "legacy-token"));
        assert!(!manager("create", "", "pods", "default", ""));
        assert!(!manager("update", "apps", "deployments", "default", "web"));
        assert!(!manager("delete", "", "namespaces", "", "team"));
        assert!(!manager(
            "update",
            "coordination.k8s.io",
            "leases",
            NAMESPACE,
            "kube-scheduler"
        ));
        assert!(!manager(
            "escalate",
            "rbac.authorization.k8s.io",
            "clusterroles",
            "",
            "view"
        ));
        // What every controller shared before is retired from upgraded clusters.
        assert!(
            !super::super::retired("clusterroles", crate::server::CONTROLLER_MANAGER_USER)
                .is_empty()
        );
    }
}
