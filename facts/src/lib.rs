//! rudder-facts: small, typed facts about Kubernetes objects that the controllers, the
//! scheduler and the kubelet all need, so each is written once: the system namespaces, a pod's
//! QoS class, resource quantities as numbers, whether a pod is ready or still active, which object controls another, and
//! whether a pod may go to a node (selectors, required affinity, taints).
//!
//! It works on k8s-openapi types only and depends on nothing else of Rudder's; label selectors
//! are kube-core's (`kube::core::Selector`), not copied here.

pub mod namespaces;
pub mod nodes;
pub mod owners;
pub mod pods;
pub mod quantity;
pub mod quota;
pub mod volumes;
