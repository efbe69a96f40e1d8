//! NodeRestriction, as upstream's admission plugin: what a kubelet writes must be its own — the
//! Node and the Lease named after its node, mirror pods bound to its node (and no others
//! created or deleted), pod statuses of pods bound to its node, and evictions of those pods
//! only (the Eviction is judged by the pod it names, read as the watch cache holds it: the pod's
//! delete that follows is not admitted again).

use async_trait::async_trait;
use rudder_admission::{Attributes, Denied, Operation, Validating};
use serde_json::Value;

use super::{node_of, LEASE_NAMESPACE};
use crate::registry::Registry;

const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";

/// The plugin, reading pods through a registry without admission.
pub struct NodeRestriction {
    pods: Registry,
}

impl NodeRestriction {
    pub fn new(pods: Registry) -> Self {
        Self { pods }
    }

    /// A node may evict only a pod bound to itself (a missing pod answers 404).
    async fn check_eviction(&self, attributes: &Attributes, node: &str) -> Result<(), Denied> {
        let Some(pods) = crate::catalog::find("", "v1", "pods") else {
            return Err(Denied::forbidden("pods are not served"));
        };
        let pod = self
            .pods
            .read_recent(pods, attributes.namespace.as_deref(), &attributes.name)
            .await
            .map_err(|error| Denied::forbidden(error.message))?
            .ok_or_else(|| Denied {
                code: 404,
                reason: "NotFound",
                message: format!("pods \"{}\" not found", attributes.name),
            })?;
        if bound_to(Some(&pod), node) {
            return Ok(());
        }
        Err(Denied::forbidden(format!(
            "node \"{node}\" can only evict pods with spec.nodeName set to itself"
        )))
    }
}

fn bound_to(pod: Option<&Value>, node: &str) -> bool {
    pod.is_some_and(|pod| pod["spec"]["nodeName"] == node)
}

#[async_trait]
impl Validating for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    async fn validate(
        &self,
        attributes: &Attributes,
        object: Option<&Value>,
        old: Option<&Value>,
    ) -> Result<(), Denied> {
        let Some(node) = node_of(&attributes.user, &attributes.groups) else {
            return Ok(());
        };
        let name = attributes.name.as_str();
        match (attributes.group.as_str(), attributes.resource.as_str()) {
            ("", "nodes") if name != node => Err(Denied::forbidden(format!(
                "node \"{node}\" is not allowed to modify node \"{name}\""
            ))),
            ("coordination.k8s.io", "leases")
                if attributes.namespace.as_deref() != Some(LEASE_NAMESPACE) || name != node =>
            {
                Err(Denied::forbidden(
                    "can only access node lease with the same name as the requesting node",
                ))
            }
            ("", "pods") => match (attributes.operation, attributes.subresource.as_deref()) {
                (Operation::Create, None) => {
                    let mirror = object.is_some_and(|pod| {
                        pod["metadata"]["annotations"][MIRROR_ANNOTATION].is_string()
                    });
                    if !mirror {
                        return Err(Denied::forbidden(format!(
                            "pod does not have \"{MIRROR_ANNOTATION}\" annotation, node \"{node}\" can only create mirror pods"
                        )));
                    }
                    if !bound_to(object, node) {
                        return Err(Denied::forbidden(format!(
                            "node \"{node}\" can only create pods with spec.nodeName set to itself"
                        )));
                    }
                    Ok(())
                }
                (Operation::Delete, None) if !bound_to(old, node) => Err(Denied::forbidden(
                    format!("node \"{node}\" can only delete pods with spec.nodeName set to itself"),
                )),
                (Operation::Create, Some("eviction")) => {
                    self.check_eviction(attributes, node).await
                }
                (Operation::Update, Some("status")) if !bound_to(old, node) => {
                    Err(Denied::forbidden(format!(
                        "node \"{node}\" can only update pod status for pods with spec.nodeName set to itself"
                    )))
                }
                _ => Ok(()),
            },
            _ => Ok(()),
        }
    }
}
