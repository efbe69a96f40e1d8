//! What the scheduler knows of one node: the Node, the pods on it (bound or only assumed),
//! and the sums the filters ask about (requested resources, host ports in use, images).
//!
//! A pod is parsed once into a [`PodInfo`] — its requests, priority, and its pod-affinity
//! terms with their label selectors compiled — so that a filter over 5,000 nodes reads
//! numbers and compiled selectors, never raw JSON-shaped specs.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm};
use kube::core::{Selector, SelectorExt};

use crate::resources::{pod_requests, Resources};

/// `namespace/name`.
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// The namespaces a pod-affinity term looks in.
#[derive(Clone, Debug)]
pub enum Namespaces {
    /// Listed (or, with neither list nor selector, the pod's own).
    Named(BTreeSet<String>),
    /// The names listed plus those matching the selector (an empty selector: every namespace).
    Selected {
        names: BTreeSet<String>,
        selector: Selector,
    },
}

/// A pod (anti-)affinity term, compiled.
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    pub namespaces: Namespaces,
    /// `None`: the term's labelSelector was absent, and it matches no pod.
    pub selector: Option<Selector>,
    pub topology_key: String,
    /// The preferred term's weight (1 for required terms).
    pub weight: i32,
}

impl AffinityTerm {
    fn compile(term: &PodAffinityTerm, own_namespace: &str, weight: i32) -> Self {
        let names: BTreeSet<String> = term
            .namespaces
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect();
        let namespaces = match term.namespace_selector.clone() {
            Some(selector) => Namespaces::Selected {
                names,
                selector: Selector::try_from(selector).unwrap_or_default(),
            },
            None if names.is_empty() => Namespaces::Named([own_namespace.to_string()].into()),
            None => Namespaces::Named(names),
        };
        let selector = term
            .label_selector
            .clone()
            .map(|selector| Selector::try_from(selector).unwrap_or_default());
        Self {
            namespaces,
            selector,
            topology_key: term.topology_key.clone(),
            weight,
        }
    }

    /// Whether `pod` (with its namespace's labels) is one this term is about.
    pub fn matches(
        &self,
        pod: &PodInfo,
        namespace_labels: &dyn Fn(&str) -> BTreeMap<String, String>,
    ) -> bool {
        let in_namespace = match &self.namespaces {
            Namespaces::Named(names) => names.contains(&pod.namespace),
            Namespaces::Selected { names, selector } => {
                names.contains(&pod.namespace)
                    || selector.matches(&namespace_labels(&pod.namespace))
            }
        };
        in_namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

/// A pod's affinity and anti-affinity terms, compiled.
#[derive(Clone, Debug, Default)]
pub struct PodAffinity {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<AffinityTerm>,
    pub preferred_anti_affinity: Vec<AffinityTerm>,
}

impl PodAffinity {
    fn of(pod: &Pod, namespace: &str) -> Self {
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let mut compiled = Self::default();
        if let Some(a) = affinity.and_then(|a| a.pod_affinity.as_ref()) {
            for term in a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                compiled
                    .required_affinity
                    .push(AffinityTerm::compile(term, namespace, 1));
            }
            for term in a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                compiled.preferred_affinity.push(AffinityTerm::compile(
                    &term.pod_affinity_term,
                    namespace,
                    term.weight,
                ));
            }
        }
        if let Some(a) = affinity.and_then(|a| a.pod_anti_affinity.as_ref()) {
            for term in a
                .required_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                compiled
                    .required_anti_affinity
                    .push(AffinityTerm::compile(term, namespace, 1));
            }
            for term in a
                .preferred_during_scheduling_ignored_during_execution
                .iter()
                .flatten()
            {
                compiled.preferred_anti_affinity.push(AffinityTerm::compile(
                    &term.pod_affinity_term,
                    namespace,
                    term.weight,
                ));
            }
        }
        compiled
    }

    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}

/// A host port a container asks for: (protocol, host IP, port).
pub type HostPort = (String, String, i32);

/// A pod as the scheduler counts it.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub key: String,
    pub uid: String,
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    pub priority: i32,
    pub requests: Resources,
    pub non_zero_requests: Resources,
    pub affinity: PodAffinity,
    pub host_ports: Vec<HostPort>,
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let spec = pod.spec.as_ref();
        let host_ports = spec
            .map(|spec| {
                spec.containers
                    .iter()
                    .flat_map(|c| c.ports.iter().flatten())
                    .filter(|p| p.host_port.is_some_and(|port| port > 0))
                    .map(|p| {
                        (
                            p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                            p.host_ip
                                .clone()
                                .filter(|ip| !ip.is_empty())
                                .unwrap_or_else(|| "0.0.0.0".into()),
                            p.host_port.unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Self {
            key: pod_key(&pod),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            priority: spec.and_then(|s| s.priority).unwrap_or(0),
            requests: pod_requests(&pod, false),
            non_zero_requests: pod_requests(&pod, true),
            affinity: PodAffinity::of(&pod, &namespace),
            host_ports,
            namespace,
            pod,
        }
    }

    /// Whether the pod is being deleted.
    pub fn terminating(&self) -> bool {
        self.pod.metadata.deletion_timestamp.is_some()
    }
}

/// Whether two host-port claims collide (same protocol and port, and the same host IP or
/// either on every address).
pub fn ports_conflict(a: &HostPort, b: &HostPort) -> bool {
    a.0 == b.0 && a.2 == b.2 && (a.1 == b.1 || a.1 == "0.0.0.0" || b.1 == "0.0.0.0")
}

/// One node and what is on it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub allocatable: Resources,
    pub pods: Vec<Arc<PodInfo>>,
    /// Sum of the pods' requests.
    pub requested: Resources,
    /// Sum of the pods' non-zero requests (for scoring).
    pub non_zero_requested: Resources,
    pub used_ports: Vec<HostPort>,
    /// Image names (every name of every image the node reports) with their sizes.
    pub images: BTreeMap<String, i64>,
    /// Pods here with any pod (anti-)affinity; and those with required anti-affinity.
    pub pods_with_affinity: usize,
    pub pods_with_required_anti_affinity: usize,
    /// Bumped by every change, so a snapshot can tell what to copy.
    pub generation: u64,
    /// Copied from the Node, so the filters (run on thousands of nodes per pod) read this
    /// struct only, not the Node object as well.
    pub taints: Vec<k8s_openapi::api::core::v1::Taint>,
    pub unschedulable: bool,
}

impl NodeInfo {
    pub fn new(node: Arc<Node>) -> Self {
        let mut info = Self {
            name: node.metadata.name.clone().unwrap_or_default(),
            labels: BTreeMap::new(),
            allocatable: Resources::default(),
            pods: Vec::new(),
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            used_ports: Vec::new(),
            images: BTreeMap::new(),
            pods_with_affinity: 0,
            pods_with_required_anti_affinity: 0,
            generation: 0,
            taints: Vec::new(),
            unschedulable: false,
            node: node.clone(),
        };
        info.set_node(node);
        info
    }

    /// Replaces the Node object (labels, allocatable, images), keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        self.labels = node.metadata.labels.clone().unwrap_or_default();
        let spec = node.spec.as_ref();
        self.taints = spec.and_then(|s| s.taints.clone()).unwrap_or_default();
        self.unschedulable = spec.and_then(|s| s.unschedulable).unwrap_or(false);
        let status = node.status.as_ref();
        let list = status
            .and_then(|s| s.allocatable.as_ref().or(s.capacity.as_ref()))
            .cloned()
            .unwrap_or_default();
        self.allocatable = Resources::from_list(&list);
        self.images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|image| {
                let size = image.size_bytes.unwrap_or(0);
                image
                    .names
                    .iter()
                    .flatten()
                    .map(move |name| (name.clone(), size))
            })
            .collect();
        self.node = node;
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if !pod.affinity.is_empty() {
            self.pods_with_affinity += 1;
        }
        if !pod.affinity.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity += 1;
        }
        self.pods.push(pod);
    }

    /// Removes the pod with `uid`; whether it was here.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(index) = self.pods.iter().position(|p| p.uid == uid) else {
            return false;
        };
        let pod = self.pods.swap_remove(index);
        self.requested.subtract(&pod.requests);
        self.non_zero_requested.subtract(&pod.non_zero_requests);
        for port in &pod.host_ports {
            if let Some(i) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(i);
            }
        }
        if !pod.affinity.is_empty() {
            self.pods_with_affinity -= 1;
        }
        if !pod.affinity.required_anti_affinity.is_empty() {
            self.pods_with_required_anti_affinity -= 1;
        }
        true
    }

    /// The node's taints.
    pub fn taints(&self) -> &[k8s_openapi::api::core::v1::Taint] {
        &self.taints
    }

    pub fn unschedulable(&self) -> bool {
        self.unschedulable
    }
}
