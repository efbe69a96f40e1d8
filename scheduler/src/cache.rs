//! The scheduler's picture of the cluster: nodes and the pods on them, including pods it has
//! only **assumed** there — chosen, counted on the node at once, while their binding is still
//! being written. The pod informer later confirms an assumption (the bound pod arrives); one
//! that is never confirmed expires `assumed_ttl` after its binding finished.
//!
//! Each cycle schedules against a [`Snapshot`]: the nodes as `Arc`s, refreshed incrementally
//! from the nodes whose generation moved since the last cycle (copy-on-write: the cache
//! clones a node's info only when it changes one that a snapshot still shares).

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

use crate::node_info::{NodeInfo, PodInfo};

/// Where a pod the cache counts stands.
#[derive(Clone, Debug)]
struct PodState {
    info: Arc<PodInfo>,
    node: String,
    /// Chosen by this scheduler, not yet seen bound.
    assumed: bool,
    /// For an assumed pod whose binding finished: when the assumption lapses.
    deadline: Option<Instant>,
}

/// Nodes and pods, with assumed pods.
#[derive(Debug)]
pub struct Cache {
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// Names of node infos holding pods whose Node has not been seen (kept out of snapshots).
    ghosts: HashSet<String>,
    pods: HashMap<String, PodState>,
    /// Unbound pods nominated to a node by preemption: uid → (node, pod).
    nominated: HashMap<String, (String, Arc<PodInfo>)>,
    generation: u64,
    /// Set when nodes were added or removed (the snapshot's order must be rebuilt).
    membership_changed: bool,
    /// Nodes changed since the last snapshot (only these are copied into it).
    dirty: HashSet<String>,
    /// Set when a node's image list changed (the snapshot's image spread is recounted).
    images_changed: bool,
    nominated_changed: bool,
    assumed_ttl: Duration,
}

/// The nodes one scheduling cycle sees.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub nodes: Vec<Arc<NodeInfo>>,
    index: HashMap<String, usize>,
    generation: u64,
    /// Indices of nodes with pods that have (anti-)affinity, and required anti-affinity.
    pub with_affinity: BTreeSet<usize>,
    pub with_required_anti_affinity: BTreeSet<usize>,
    /// Nominated pods by node name.
    pub nominated: HashMap<String, Vec<Arc<PodInfo>>>,
    /// How many nodes hold each image (ImageLocality's spread).
    pub image_spread: HashMap<String, usize>,
}

impl Snapshot {
    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }
}

impl Cache {
    pub fn new(assumed_ttl: Duration) -> Self {
        Self {
            nodes: HashMap::new(),
            ghosts: HashSet::new(),
            pods: HashMap::new(),
            nominated: HashMap::new(),
            generation: 0,
            membership_changed: true,
            dirty: HashSet::new(),
            images_changed: true,
            nominated_changed: true,
            assumed_ttl,
        }
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        self.generation += 1;
        if !self.dirty.contains(name) {
            self.dirty.insert(name.to_string());
        }
        let generation = self.generation;
        let entry = self.nodes.entry(name.to_string()).or_insert_with(|| {
            self.ghosts.insert(name.to_string());
            let node = Node {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: Some(name.to_string()),
                    ..Default::default()
                },
                ..Default::default()
            };
            Arc::new(NodeInfo::new(Arc::new(node)))
        });
        let info = Arc::make_mut(entry);
        info.generation = generation;
        info
    }

    pub fn upsert_node(&mut self, node: Arc<Node>) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let known = self.nodes.contains_key(&name);
        let info = self.node_mut(&name);
        let images_before = std::mem::take(&mut info.images);
        info.set_node(node);
        if info.images != images_before {
            self.images_changed = true;
        }
        if self.ghosts.remove(&name) || !known {
            self.membership_changed = true;
        }
    }

    pub fn remove_node(&mut self, name: &str) {
        let holds_pods = self.nodes.get(name).is_some_and(|n| !n.pods.is_empty());
        if holds_pods {
            // Its pods still count until they are deleted; the node leaves snapshots.
            self.ghosts.insert(name.to_string());
            self.node_mut(name);
        } else {
            self.nodes.remove(name);
        }
        self.membership_changed = true;
        self.images_changed = true;
    }

    /// Counts `pod` on `node` before its binding is written.
    pub fn assume(&mut self, pod: Arc<PodInfo>, node: &str) {
        self.node_mut(node).add_pod(pod.clone());
        self.nominated_changed |= self.nominated.remove(&pod.uid).is_some();
        self.pods.insert(
            pod.uid.clone(),
            PodState {
                info: pod,
                node: node.to_string(),
                assumed: true,
                deadline: None,
            },
        );
    }

    /// The binding of an assumed pod was written: the assumption lapses after the TTL unless
    /// the informer confirms it first.
    pub fn finish_binding(&mut self, uid: &str) {
        let ttl = self.assumed_ttl;
        if let Some(state) = self.pods.get_mut(uid).filter(|s| s.assumed) {
            state.deadline = Some(Instant::now() + ttl);
        }
    }

    /// Undoes an assumption (its binding failed).
    pub fn forget(&mut self, uid: &str) {
        if let Some(state) = self.pods.get(uid).filter(|s| s.assumed).cloned() {
            self.pods.remove(uid);
            self.node_mut(&state.node).remove_pod(uid);
            self.drop_empty_ghost(&state.node);
        }
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// A bound pod seen by the informer (confirming an assumption, or moving the pod).
    pub fn upsert_bound_pod(&mut self, pod: Arc<Pod>) {
        let info = Arc::new(PodInfo::new(pod));
        let node = info
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        if let Some(previous) = self.pods.remove(&info.uid) {
            self.node_mut(&previous.node).remove_pod(&info.uid);
            self.drop_empty_ghost(&previous.node);
        }
        self.nominated_changed |= self.nominated.remove(&info.uid).is_some();
        self.node_mut(&node).add_pod(info.clone());
        self.pods.insert(
            info.uid.clone(),
            PodState {
                info,
                node,
                assumed: false,
                deadline: None,
            },
        );
    }

    /// A pod deleted, or finished (its resources are free again).
    pub fn remove_pod(&mut self, uid: &str) {
        self.nominated_changed |= self.nominated.remove(uid).is_some();
        if let Some(state) = self.pods.remove(uid) {
            self.node_mut(&state.node).remove_pod(uid);
            self.drop_empty_ghost(&state.node);
        }
    }

    /// Records (or clears, with `None`) an unbound pod's nominated node.
    pub fn set_nominated(&mut self, pod: Arc<PodInfo>, node: Option<String>) {
        match node {
            Some(node) if !node.is_empty() => {
                self.nominated.insert(pod.uid.clone(), (node, pod));
                self.nominated_changed = true;
            }
            _ => {
                self.nominated_changed |= self.nominated.remove(&pod.uid).is_some();
            }
        }
    }

    fn drop_empty_ghost(&mut self, name: &str) {
        if self.ghosts.contains(name) && self.nodes.get(name).is_some_and(|n| n.pods.is_empty()) {
            self.ghosts.remove(name);
            self.nodes.remove(name);
            self.membership_changed = true;
        }
    }

    /// Drops assumptions whose deadline passed; returns their pods' uids.
    pub fn expire_assumed(&mut self, now: Instant) -> Vec<String> {
        let expired: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, s)| s.assumed && s.deadline.is_some_and(|d| d <= now))
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in &expired {
            tracing::warn!(pod = %self.pods[uid].info.key, "assumed pod never confirmed; forgetting it");
            self.forget(uid);
        }
        expired
    }

    pub fn node_count(&self) -> usize {
        self.nodes.len() - self.ghosts.len()
    }

    /// Brings `snapshot` up to date, copying only what changed since it was last taken.
    pub fn update_snapshot(&mut self, snapshot: &mut Snapshot) {
        if self.membership_changed {
            let mut names: Vec<&String> = self
                .nodes
                .keys()
                .filter(|name| !self.ghosts.contains(*name))
                .collect();
            names.sort();
            snapshot.nodes = names.iter().map(|name| self.nodes[*name].clone()).collect();
            snapshot.index = names
                .iter()
                .enumerate()
                .map(|(i, name)| ((*name).clone(), i))
                .collect();
            snapshot.with_affinity.clear();
            snapshot.with_required_anti_affinity.clear();
            for i in 0..snapshot.nodes.len() {
                let node = snapshot.nodes[i].clone();
                index_affinity(snapshot, i, node);
            }
            self.membership_changed = false;
        } else {
            for name in &self.dirty {
                let (Some(&i), Some(current)) = (snapshot.index.get(name), self.nodes.get(name))
                else {
                    continue;
                };
                snapshot.nodes[i] = current.clone();
                index_affinity(snapshot, i, current.clone());
            }
        }
        self.dirty.clear();
        snapshot.generation = self.generation;
        if self.nominated_changed {
            snapshot.nominated.clear();
            for (node, pod) in self.nominated.values() {
                snapshot
                    .nominated
                    .entry(node.clone())
                    .or_default()
                    .push(pod.clone());
            }
            self.nominated_changed = false;
        }
        if self.images_changed {
            snapshot.image_spread.clear();
            for node in &snapshot.nodes {
                for image in node.images.keys() {
                    *snapshot.image_spread.entry(image.clone()).or_default() += 1;
                }
            }
            self.images_changed = false;
        }
    }
}

/// Records whether node `i` holds pods with (required anti-)affinity.
fn index_affinity(snapshot: &mut Snapshot, i: usize, node: Arc<NodeInfo>) {
    if node.pods_with_affinity > 0 {
        snapshot.with_affinity.insert(i);
    } else {
        snapshot.with_affinity.remove(&i);
    }
    if node.pods_with_required_anti_affinity > 0 {
        snapshot.with_required_anti_affinity.insert(i);
    } else {
        snapshot.with_required_anti_affinity.remove(&i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, NodeStatus, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            status: Some(NodeStatus {
                allocatable: Some([("cpu".to_string(), Quantity("4".into()))].into()),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn pod(uid: &str, node: Option<&str>, cpu: &str) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(uid.into()),
                namespace: Some("default".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.map(String::from),
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    #[test]
    fn an_assumed_pod_counts_at_once_and_is_confirmed_by_the_informer() {
        let mut cache = Cache::new(Duration::from_secs(30));
        cache.upsert_node(node("a"));
        cache.assume(Arc::new(PodInfo::new(pod("p", None, "1"))), "a");
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        assert_eq!(snapshot.get("a").map(|n| n.requested.milli_cpu), Some(1000));
        cache.upsert_bound_pod(pod("p", Some("a"), "1"));
        assert!(!cache.is_assumed("p"));
        cache.update_snapshot(&mut snapshot);
        assert_eq!(snapshot.get("a").map(|n| n.pods.len()), Some(1));
    }

    #[test]
    fn an_unconfirmed_assumption_expires_after_its_binding_finished() {
        let mut cache = Cache::new(Duration::from_secs(0));
        cache.upsert_node(node("a"));
        cache.assume(Arc::new(PodInfo::new(pod("p", None, "1"))), "a");
        assert!(
            cache.expire_assumed(Instant::now()).is_empty(),
            "binding still running"
        );
        cache.finish_binding("p");
        assert_eq!(cache.expire_assumed(Instant::now()), vec!["p".to_string()]);
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        assert_eq!(snapshot.get("a").map(|n| n.requested.milli_cpu), Some(0));
    }

    #[test]
    fn a_snapshot_copies_only_changed_nodes_and_keeps_old_views_intact() {
        let mut cache = Cache::new(Duration::from_secs(30));
        cache.upsert_node(node("a"));
        cache.upsert_node(node("b"));
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        let before = snapshot.clone();
        cache.upsert_bound_pod(pod("p", Some("b"), "2"));
        cache.update_snapshot(&mut snapshot);
        assert!(
            Arc::ptr_eq(&before.nodes[0], &snapshot.nodes[0]),
            "a is shared"
        );
        assert_eq!(snapshot.get("b").map(|n| n.requested.milli_cpu), Some(2000));
        assert_eq!(before.get("b").map(|n| n.requested.milli_cpu), Some(0));
    }

    #[test]
    fn pods_of_an_unknown_node_count_but_the_node_is_not_offered() {
        let mut cache = Cache::new(Duration::from_secs(30));
        cache.upsert_bound_pod(pod("p", Some("later"), "1"));
        let mut snapshot = Snapshot::default();
        cache.update_snapshot(&mut snapshot);
        assert!(snapshot.nodes.is_empty());
        cache.upsert_node(node("later"));
        cache.update_snapshot(&mut snapshot);
        assert_eq!(snapshot.get("later").map(|n| n.pods.len()), Some(1));
        cache.remove_pod("p");
        cache.remove_node("later");
        cache.update_snapshot(&mut snapshot);
        assert!(snapshot.nodes.is_empty());
    }
}
