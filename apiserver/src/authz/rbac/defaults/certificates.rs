//! Node join through CertificateSigningRequests, as upstream's bootstrap policy and kubeadm's
//! join setup have it: the roles to create requests (`system:node-bootstrapper`), to have a
//! node's client certificate approved for a new node (`…:nodeclient`) or renewed by the node
//! itself (`…:selfnodeclient`), to approve for each built-in signer, and the certificate
//! controller's own (`system:controller:certificate-controller`, approve and sign); bound, as
//! kubeadm binds them, to every bootstrap token (`system:bootstrappers`) and every node
//! (`system:nodes`); and in kube-public the anonymous reader of the `cluster-info` ConfigMap a
//! joining node discovers the cluster's CA from.

use serde_json::{json, Value};

use super::{binding, cluster_role, metadata, named, rule};

const GROUP: &[&str] = &["certificates.k8s.io"];
const CSRS: &str = "certificatesigningrequests";
/// The ClusterRole whose rules bootstrap tokens hold to create requests.
const NODE_BOOTSTRAPPER: &str = "system:node-bootstrapper";
/// Creating this subresource is what marks a new node's client request as auto-approvable.
pub const NODE_CLIENT: &str = "system:certificates.k8s.io:certificatesigningrequests:nodeclient";
/// Creating this subresource is what marks a node's renewal as auto-approvable.
pub const SELF_NODE_CLIENT: &str =
    "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient";
const CERTIFICATE_CONTROLLER: &str = "system:controller:certificate-controller";
/// The built-in signers.
const SIGNERS: &[&str] = &[
    "kubernetes.io/kube-apiserver-client",
    "kubernetes.io/kube-apiserver-client-kubelet",
    "kubernetes.io/kubelet-serving",
    "kubernetes.io/legacy-unknown",
];
/// The ConfigMap in kube-public a joining node reads before it trusts the cluster.
pub const CLUSTER_INFO: &str = "cluster-info";
const CLUSTER_INFO_READER: &str = "kubeadm:bootstrap-signer-clusterinfo";

/// The approver role of one signer (`system:certificates.k8s.io:<signer's path>-approver`).
fn approver(signer: &str) -> Value {
    let path = signer.rsplit('/').next().unwrap_or(signer);
    cluster_role(
        &format!("system:certificates.k8s.io:{path}-approver"),
        &[],
        vec![named(GROUP, &["signers"], &[signer], &["approve"])],
    )
}

/// The node-join ClusterRoles.
pub fn cluster_roles() -> Vec<Value> {
    let mut roles = vec![
        cluster_role(
            NODE_BOOTSTRAPPER,
            &[],
            vec![rule(GROUP, &[CSRS], &["create", "get", "list", "watch"])],
        ),
        cluster_role(
            NODE_CLIENT,
            &[],
            vec![rule(
                GROUP,
                &["certificatesigningrequests/nodeclient"],
                &["create"],
            )],
        ),
        cluster_role(
            SELF_NODE_CLIENT,
            &[],
            vec![rule(
                GROUP,
                &["certificatesigningrequests/selfnodeclient"],
                &["create"],
            )],
        ),
        cluster_role(
            CERTIFICATE_CONTROLLER,
            &[],
            vec![
                rule(GROUP, &[CSRS], &["delete", "get", "list", "watch"]),
                rule(
                    GROUP,
                    &[
                        "certificatesigningrequests/approval",
                        "certificatesigningrequests/status",
                    ],
                    &["update"],
                ),
                named(GROUP, &["signers"], SIGNERS, &["approve", "sign"]),
                rule(
                    &["authorization.k8s.io"],
                    &["subjectaccessreviews"],
                    &["create"],
                ),
                rule(
                    &["", "events.k8s.io"],
                    &["events"],
                    &["create", "patch", "update"],
                ),
            ],
        ),
    ];
    roles.extend(SIGNERS.iter().map(|signer| approver(signer)));
    roles
}

/// Bootstrap tokens may create requests and have them approved; nodes may renew their own;
/// the certificate controller holds its role (as its ServiceAccount, as upstream's).
pub fn cluster_role_bindings() -> Vec<Value> {
    let controller = super::controllers::service_account_binding("certificate-controller");
    vec![
        binding(
            "kubeadm:kubelet-bootstrap",
            NODE_BOOTSTRAPPER,
            &["system:bootstrappers"],
        ),
        binding(
            "kubeadm:node-autoapprove-bootstrap",
            NODE_CLIENT,
            &["system:bootstrappers"],
        ),
        binding(
            "kubeadm:node-autoapprove-certificate-rotation",
            SELF_NODE_CLIENT,
            &["system:nodes"],
        ),
        controller,
    ]
}

fn in_kube_public(mut metadata: Value) -> Value {
    metadata["namespace"] = json!("kube-public");
    metadata
}

/// In kube-public: the reader of `cluster-info`.
pub fn roles() -> Vec<Value> {
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": in_kube_public(metadata(CLUSTER_INFO_READER, &[])),
        "rules": [named(&[""], &["configmaps"], &[CLUSTER_INFO], &["get"])]}),
    ]
}

/// In kube-public: that reader bound to anonymous clients (a joining node has no credentials
/// the cluster trusts yet, nor trusts the cluster).
pub fn role_bindings() -> Vec<Value> {
    vec![
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": in_kube_public(metadata(CLUSTER_INFO_READER, &[])),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": CLUSTER_INFO_READER},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}]}),
    ]
}
