//! The Node authorizer, as upstream's: a kubelet (`system:node:<name>` in `system:nodes`) may
//! read the Secrets, ConfigMaps, PersistentVolumeClaims and ServiceAccounts (and request tokens
//! for them) only of pods bound to its node, and the PersistentVolumes of those claims or
//! pinned to its node (graph.rs), update the status only of those pods,
//! and modify only its own Node and Lease; plus what every kubelet needs (read nodes, pods,
//! services, endpoints; write events; review tokens and access; create and read
//! CertificateSigningRequests). Anything else it leaves to the next authorizer. NodeRestriction (restriction.rs) checks what the authorizer cannot see in a
//! URL: the name of a created Node or Lease, and that a created pod is its own mirror pod.

pub mod graph;
pub mod restriction;

use std::sync::Arc;

use rudder_storage::Storage;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::follow::Followed;
use super::{Attributes, Authorizer, Decision};
use graph::{NodeGraph, Used, CLAIMS, PODS, VOLUMES};

/// The group of every kubelet.
pub const NODES_GROUP: &str = "system:nodes";
/// A kubelet's user is this prefix and its node's name.
pub const NODE_USER_PREFIX: &str = "system:node:";
/// Where kubelets keep their heartbeat Leases.
pub const LEASE_NAMESPACE: &str = "kube-node-lease";

/// The node `user`/`groups` is the kubelet of, if any.
pub fn node_of<'a>(user: &'a str, groups: &[String]) -> Option<&'a str> {
    let node = user.strip_prefix(NODE_USER_PREFIX)?;
    (!node.is_empty() && groups.iter().any(|group| group == NODES_GROUP)).then_some(node)
}

/// The authorizer over the pods' graph.
pub struct NodeAuthorizer {
    graph: Arc<Followed<NodeGraph>>,
}

impl NodeAuthorizer {
    /// Lists the pods and follows them until `shutdown`.
    pub async fn start(
        storage: Arc<dyn Storage>,
        values: Arc<crate::values::Values>,
        tasks: &TaskTracker,
        shutdown: CancellationToken,
    ) -> rudder_storage::Result<Self> {
        let graph =
            Followed::start(storage, values, &[PODS, CLAIMS, VOLUMES], tasks, shutdown).await?;
        Ok(Self { graph })
    }

    /// What a kubelet of `node` may do with `attributes`.
    fn allows(&self, node: &str, attributes: &Attributes) -> bool {
        let verb = attributes.verb.as_str();
        let reads = matches!(verb, "get" | "list" | "watch");
        let (namespace, name) = (attributes.namespace.as_str(), attributes.name.as_str());
        let used = |what: Used| {
            verb == "get"
                && self
                    .graph
                    .read(|graph| graph.uses(node, namespace, what, name))
        };
        match (
            attributes.group.as_str(),
            attributes.resource.as_str(),
            attributes.subresource.as_str(),
        ) {
            ("", "secrets", "") => used(Used::Secret),
            ("", "configmaps", "") => used(Used::ConfigMap),
            ("", "persistentvolumeclaims", "") => used(Used::Claim),
            ("", "persistentvolumes", "") => {
                verb == "get" && self.graph.read(|graph| graph.may_read_volume(node, name))
            }
            ("", "serviceaccounts", "") => used(Used::ServiceAccount),
            ("", "serviceaccounts", "token") => {
                verb == "create"
                    && self
                        .graph
                        .read(|graph| graph.uses(node, namespace, Used::ServiceAccount, name))
            }
            ("", "nodes", "") => reads || verb == "create" || name == node,
            ("", "nodes", "status") => name == node,
            ("", "pods", "") => reads || matches!(verb, "create" | "delete"),
            ("", "pods", "status") => {
                matches!(verb, "get" | "update" | "patch")
                    && self.graph.read(|graph| graph.runs(node, namespace, name))
            }
            ("", "pods", "eviction") => verb == "create",
            ("", "events", "") | ("events.k8s.io", "events", "") => {
                matches!(verb, "create" | "update" | "patch")
            }
            ("", "services" | "endpoints", "") | ("discovery.k8s.io", "endpointslices", "") => {
                reads
            }
            ("coordination.k8s.io", "leases", "") => {
                namespace == LEASE_NAMESPACE && (verb == "create" || name == node)
            }
            ("storage.k8s.io", "storageclasses", "") | ("node.k8s.io", "runtimeclasses", "") => {
                reads
            }
            // Its own certificates (what a request may ask for is the approver's business).
            ("certificates.k8s.io", "certificatesigningrequests", "") => reads || verb == "create",
            ("authentication.k8s.io", "tokenreviews", "")
            | ("authorization.k8s.io", "subjectaccessreviews", "") => verb == "create",
            _ => false,
        }
    }
}

impl Authorizer for NodeAuthorizer {
    fn authorize(&self, attributes: &Attributes) -> Decision {
        let Some(node) = node_of(&attributes.user, &attributes.groups) else {
            return Decision::NoOpinion;
        };
        if attributes.resource_request && self.allows(node, attributes) {
            return Decision::Allow {
                reason: String::new(),
            };
        }
        Decision::NoOpinion
    }
}
