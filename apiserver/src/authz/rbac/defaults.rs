//! The roles and bindings a cluster starts with, after upstream's bootstrap policy: the
//! superuser role bound to `system:masters`, discovery and public information for everyone
//! authenticated, the self-reviews, and the user-facing `admin`, `edit` and `view` built by
//! aggregation from `system:aggregate-to-*` (so a CRD's roles can join them by label), and the
//! control-plane components' identities (the controller-manager's here, the scheduler's in
//! [`scheduler`], the nodes' and the service proxy's in [`nodes`], each controller's own in
//! [`controllers`]). Each is created when missing, labelled `kubernetes.io/bootstrapping:
//! rbac-defaults` and annotated `rbac.authorization.kubernetes.io/autoupdate: "true"`.

use serde_json::{json, Value};

mod certificates;
pub mod controllers;
mod nodes;
mod scheduler;

const READ: &[&str] = &["get", "list", "watch"];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];
const ALL: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn paths(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn metadata(name: &str, labels: &[(&str, &str)]) -> Value {
    let mut all = serde_json::Map::new();
    all.insert("kubernetes.io/bootstrapping".into(), "rbac-defaults".into());
    for (key, value) in labels {
        all.insert((*key).into(), (*value).into());
    }
    json!({
        "name": name,
        "labels": all,
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    })
}

fn cluster_role(name: &str, labels: &[(&str, &str)], rules: Vec<Value>) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": metadata(name, labels), "rules": rules})
}

fn aggregated(name: &str, label: &str) -> Value {
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
           "metadata": metadata(name, &[]),
           "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
           "rules": []})
}

const TO_ADMIN: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-admin", "true");
const TO_EDIT: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-edit", "true");
const TO_VIEW: (&str, &str) = ("rbac.authorization.k8s.io/aggregate-to-view", "true");

/// The default ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let mut roles = own_cluster_roles();
    roles.extend(scheduler::cluster_roles());
    roles.extend(certificates::cluster_roles());
    roles.extend(nodes::cluster_roles());
    roles.extend(controllers::cluster_roles());
    roles
}

/// The default Roles (each in its namespace: kube-system, kube-public).
pub fn roles() -> Vec<Value> {
    let mut roles = scheduler::roles();
    roles.extend(certificates::roles());
    roles
}

/// The default RoleBindings (each in its namespace: kube-system, kube-public).
pub fn role_bindings() -> Vec<Value> {
    let mut bindings = scheduler::role_bindings();
    bindings.extend(certificates::role_bindings());
    bindings
}

fn own_cluster_roles() -> Vec<Value> {
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), paths(&["*"], &["*"])],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![paths(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![paths(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
        cluster_role(
            "system:service-account-issuer-discovery",
            &[],
            vec![paths(
                &[
                    "/.well-known/openid-configuration",
                    "/.well-known/openid-configuration/",
                    "/openid/v1/jwks",
                    "/openid/v1/jwks/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:auth-delegator",
            &[],
            vec![
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
            ],
        ),
        // Full use of the kubelet API, which a kubelet checks with a SubjectAccessReview; bound
        // to the apiserver's kubelet client (`http::kubelet_proxy`). The last three are for
        // kubelets with fine-grained authorization (upstream's KubeletFineGrainedAuthz).
        cluster_role(
            "system:kubelet-api-admin",
            &[],
            vec![
                rule(&[""], &["nodes"], READ),
                rule(&[""], &["nodes"], &["proxy"]),
                rule(
                    &[""],
                    &[
                        "nodes/proxy",
                        "nodes/metrics",
                        "nodes/spec",
                        "nodes/stats",
                        "nodes/log",
                        "nodes/pods",
                        "nodes/healthz",
                        "nodes/configz",
                    ],
                    &["*"],
                ),
            ],
        ),
        // The controller-manager's own identity, as upstream's: its shared informers, its
        // Lease, events, and making its controllers' ServiceAccounts and their tokens (each
        // controller then works as its account, held to `system:controller:<account>`), and
        // the tokens controller's Secrets. Nothing a controller writes.
        cluster_role(
            crate::server::CONTROLLER_MANAGER_USER,
            &[],
            vec![
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(&["coordination.k8s.io"], &["leases"], &["create"]),
                named(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["kube-controller-manager"],
                    &["get", "update"],
                ),
                rule(&[""], &["secrets", "serviceaccounts"], &["create"]),
                rule(&[""], &["secrets"], &["delete"]),
                rule(
                    &[""],
                    &["configmaps", "namespaces", "secrets", "serviceaccounts"],
                    &["get"],
                ),
                rule(&[""], &["secrets", "serviceaccounts"], &["update"]),
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
                rule(&["*"], &["*"], &["list", "watch"]),
                rule(&[""], &["serviceaccounts/token"], &["create"]),
                rule(&["coordination.k8s.io"], &["leasecandidates"], ALL),
            ],
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authentication.k8s.io"],
                    &["selfsubjectreviews"],
                    &["create"],
                ),
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
            ],
        ),
        aggregated("admin", TO_ADMIN.0),
        aggregated("edit", TO_EDIT.0),
        aggregated("view", TO_VIEW.0),
        cluster_role(
            "system:aggregate-to-admin",
            &[TO_ADMIN],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews"],
                    &["create"],
                ),
                rule(
                    &["rbac.authorization.k8s.io"],
                    &["rolebindings", "roles"],
                    ALL,
                ),
            ],
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[TO_ADMIN, TO_EDIT],
            edit_rules(),
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[TO_ADMIN, TO_EDIT, TO_VIEW],
            view_rules(),
        ),
        // metrics-server's role, so that whoever may view may `kubectl top`.
        cluster_role(
            "system:aggregated-metrics-reader",
            &[TO_ADMIN, TO_EDIT, TO_VIEW],
            vec![rule(
                &["metrics.k8s.io"],
                &["pods", "nodes"],
                &["get", "list", "watch"],
            )],
        ),
    ]
}

/// What `edit` adds to `view`: writes of the workload kinds, Secrets, impersonating
/// ServiceAccounts.
fn edit_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            READ,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &[
                "pods",
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "networkpolicies"],
            WRITE,
        ),
        rule(&["coordination.k8s.io"], &["leases"], ALL),
    ]
}

/// What `view` reads: everything in a namespace but Secrets and RBAC.
fn view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(
            &["autoscaling"],
            &[
                "horizontalpodautoscalers",
                "horizontalpodautoscalers/status",
            ],
            READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            READ,
        ),
    ]
}

/// A rule limited to objects of these names.
pub(super) fn named(groups: &[&str], resources: &[&str], names: &[&str], verbs: &[&str]) -> Value {
    let mut limited = rule(groups, resources, verbs);
    limited["resourceNames"] = json!(names);
    limited
}

/// What earlier Rudder versions' defaults granted and these no longer do, by kind (plural) and
/// name: rules of a role, subjects of a binding. Reconciling at start removes them from the
/// stored default (unless it opts out of updates), so an upgraded cluster does not keep them.
pub fn retired(plural: &str, name: &str) -> Vec<Value> {
    match (plural, name) {
        // The one identity all controllers shared before each had its own ServiceAccount.
        ("clusterroles", crate::server::CONTROLLER_MANAGER_USER) => vec![
            rule(
                &["*"],
                &["*"],
                &[
                    "get",
                    "list",
                    "watch",
                    "update",
                    "patch",
                    "delete",
                    "deletecollection",
                ],
            ),
            rule(
                &[""],
                &[
                    "pods",
                    "events",
                    "endpoints",
                    "serviceaccounts",
                    "configmaps",
                    "persistentvolumeclaims",
                    "serviceaccounts/token",
                    "pods/eviction",
                    "pods/binding",
                ],
                &["create"],
            ),
            rule(
                &["apps"],
                &["replicasets", "controllerrevisions"],
                &["create"],
            ),
            rule(&["batch"], &["jobs"], &["create"]),
            rule(&["discovery.k8s.io"], &["endpointslices"], &["create"]),
            rule(&["events.k8s.io"], &["events"], &["create"]),
            rule(&["coordination.k8s.io"], &["leases"], &["create"]),
            // The aggregation controller writes what it aggregates.
            rule(
                &["rbac.authorization.k8s.io"],
                &["clusterroles"],
                &["escalate"],
            ),
            rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
            rule(
                &["authorization.k8s.io"],
                &["subjectaccessreviews"],
                &["create"],
            ),
        ],
        ("clusterrolebindings", "system:controller:certificate-controller") => vec![json!(
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": crate::server::CONTROLLER_MANAGER_USER}
        )],
        _ => Vec::new(),
    }
}

fn binding(name: &str, role: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|group| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}))
        .collect();
    json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
           "metadata": metadata(name, &[]),
           "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
           "subjects": subjects})
}

fn user_binding(name: &str, role: &str, user: &str) -> Value {
    let mut bound = binding(name, role, &[]);
    bound["subjects"] =
        json!([{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]);
    bound
}

/// The default ClusterRoleBindings.
pub fn cluster_role_bindings() -> Vec<Value> {
    let mut bindings = own_cluster_role_bindings();
    bindings.extend(scheduler::cluster_role_bindings());
    bindings.extend(certificates::cluster_role_bindings());
    bindings.extend(nodes::cluster_role_bindings());
    bindings.extend(controllers::cluster_role_bindings());
    bindings
}

fn own_cluster_role_bindings() -> Vec<Value> {
    vec![
        binding("cluster-admin", "cluster-admin", &["system:masters"]),
        binding(
            "system:discovery",
            "system:discovery",
            &["system:authenticated"],
        ),
        binding(
            "system:basic-user",
            "system:basic-user",
            &["system:authenticated"],
        ),
        binding(
            "system:service-account-issuer-discovery",
            "system:service-account-issuer-discovery",
            &["system:serviceaccounts"],
        ),
        user_binding(
            "system:kube-controller-manager",
            "system:kube-controller-manager",
            "system:kube-controller-manager",
        ),
        // The apiserver's identity toward kubelets (the CN of its kubelet client certificate).
        user_binding(
            "system:kube-apiserver-kubelet-client",
            "system:kubelet-api-admin",
            crate::http::kubelet_proxy::KUBELET_CLIENT_USER,
        ),
        binding(
            "system:public-info-viewer",
            "system:public-info-viewer",
            &["system:authenticated", "system:unauthenticated"],
        ),
    ]
}
