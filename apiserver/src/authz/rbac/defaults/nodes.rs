//! The node components' default roles, as upstream's bootstrap policy has them:
//! `system:node` (what a kubelet may do, before the Node authorizer narrows it to its own
//! node's objects; unbound, as upstream since 1.8 — kubelets are judged by the Node authorizer,
//! and an operator who wants RBAC to hold them binds it) and `system:node-proxier` (a service
//! proxy's reads), bound to the user `system:kube-proxy`.

use serde_json::Value;

use super::{cluster_role, rule, user_binding, READ};

const CORE: &[&str] = &[""];

/// The user a kube-proxy authenticates as.
pub const KUBE_PROXY_USER: &str = "system:kube-proxy";

/// `system:node` and `system:node-proxier`.
pub fn cluster_roles() -> Vec<Value> {
    let storage = &["storage.k8s.io"];
    vec![
        cluster_role(
            "system:node",
            &[],
            vec![
                // Delegated authentication and authorization of the kubelet's own API.
                rule(&["authentication.k8s.io"], &["tokenreviews"], &["create"]),
                rule(
                    &["authorization.k8s.io"],
                    &["localsubjectaccessreviews", "subjectaccessreviews"],
                    &["create"],
                ),
                // Service environment variables.
                rule(CORE, &["services"], READ),
                // Registering and reporting (NodeRestriction keeps a node to its own).
                rule(CORE, &["nodes"], &["create", "get", "list", "watch"]),
                rule(CORE, &["nodes", "nodes/status"], &["patch", "update"]),
                rule(CORE, &["events"], &["create", "patch", "update"]),
                rule(CORE, &["pods"], READ),
                // Mirror pods, pod status and evictions of its own pods.
                rule(CORE, &["pods"], &["create", "delete"]),
                rule(CORE, &["pods/status"], &["patch", "update"]),
                rule(CORE, &["pods/eviction"], &["create"]),
                // What its pods use (the Node authorizer narrows these to them).
                rule(CORE, &["configmaps", "secrets"], READ),
                rule(
                    CORE,
                    &["persistentvolumeclaims", "persistentvolumes"],
                    &["get"],
                ),
                rule(CORE, &["endpoints"], &["get"]),
                // Its own client certificate's renewal.
                rule(
                    &["certificates.k8s.io"],
                    &["certificatesigningrequests"],
                    &["create", "get", "list", "watch"],
                ),
                rule(
                    &["coordination.k8s.io"],
                    &["leases"],
                    &["create", "delete", "get", "patch", "update"],
                ),
                rule(storage, &["volumeattachments"], &["get"]),
                rule(
                    CORE,
                    &["persistentvolumeclaims/status"],
                    &["get", "patch", "update"],
                ),
                rule(CORE, &["serviceaccounts/token"], &["create"]),
                rule(storage, &["csidrivers"], READ),
                rule(
                    storage,
                    &["csinodes"],
                    &["create", "delete", "get", "patch", "update"],
                ),
                rule(&["node.k8s.io"], &["runtimeclasses"], READ),
            ],
        ),
        cluster_role(
            "system:node-proxier",
            &[],
            vec![
                rule(CORE, &["endpoints", "services"], &["list", "watch"]),
                rule(CORE, &["nodes"], READ),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
                rule(
                    &["discovery.k8s.io"],
                    &["endpointslices"],
                    &["list", "watch"],
                ),
            ],
        ),
    ]
}

/// The service proxy's binding (none for `system:node`).
pub fn cluster_role_bindings() -> Vec<Value> {
    vec![user_binding(
        "system:node-proxier",
        "system:node-proxier",
        KUBE_PROXY_USER,
    )]
}

#[cfg(test)]
mod tests {
    use super::super::scheduler::tests::{allowed, defaults, scheduler};
    use super::*;

    #[test]
    fn the_node_role_is_unbound_and_the_proxier_is_the_kube_proxy_users() {
        assert!(super::super::cluster_role_bindings()
            .iter()
            .all(|binding| binding["roleRef"]["name"] != "system:node"));
        let node = &cluster_roles()[0];
        assert_eq!(node["metadata"]["name"], "system:node");
        let policy = defaults();
        let mut proxy = scheduler("list", "discovery.k8s.io", "endpointslices", "", "");
        proxy.user = KUBE_PROXY_USER.into();
        assert!(allowed(&policy, &proxy));
        for (verb, resource) in [("get", "secrets"), ("create", "pods"), ("update", "nodes")] {
            let mut denied = scheduler(verb, "", resource, "default", "x");
            denied.user = KUBE_PROXY_USER.into();
            assert!(!allowed(&policy, &denied), "{denied:?}");
        }
    }
}
