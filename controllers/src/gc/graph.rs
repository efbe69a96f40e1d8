//! The garbage collector's picture of the cluster: every object (of every kind it watches) with
//! its owner references, and for each owner the objects that name it. Applying what the
//! watches see yields the work that follows from it.

use std::collections::{HashMap, HashSet};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::discovery::ApiResource;

/// The finalizer that makes an owner wait until its blocking dependents are gone.
pub const FOREGROUND: &str = "foregroundDeletion";
/// The finalizer that makes an owner's dependents lose their reference to it.
pub const ORPHAN: &str = "orphan";

/// One object as the graph knows it.
#[derive(Clone, Debug)]
pub struct Node {
    pub resource: ApiResource,
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
    pub owners: Vec<OwnerReference>,
    pub finalizers: Vec<String>,
    /// It has a deletionTimestamp.
    pub deleting: bool,
}

impl Node {
    pub fn has_finalizer(&self, finalizer: &str) -> bool {
        self.finalizers.iter().any(|f| f == finalizer)
    }
}

/// What the collector must look at.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Work {
    /// Delete the object if its owners are gone; for an owner being deleted in the
    /// foreground, delete its dependents or, when none blocks, let it go.
    AttemptToDelete(String),
    /// The owner is being deleted with orphaning: unlink its dependents, then let it go.
    Orphan(String),
}

/// Objects by uid, and who names whom as owner.
#[derive(Default)]
pub struct Graph {
    nodes: HashMap<String, Node>,
    dependents: HashMap<String, HashSet<String>>,
}

impl Graph {
    pub fn get(&self, uid: &str) -> Option<&Node> {
        self.nodes.get(uid)
    }

    /// The objects that name `uid` as an owner.
    pub fn dependents_of(&self, uid: &str) -> Vec<&Node> {
        self.dependents
            .get(uid)
            .into_iter()
            .flatten()
            .filter_map(|dependent| self.nodes.get(dependent))
            .collect()
    }

    /// Every object, for a sweep once the watches have synced.
    pub fn uids(&self) -> Vec<String> {
        self.nodes.keys().cloned().collect()
    }

    /// The uids of `resource`'s objects, to find what a re-list no longer shows.
    pub fn uids_of(&self, resource: &ApiResource) -> Vec<String> {
        self.nodes
            .values()
            .filter(|node| same_resource(&node.resource, resource))
            .map(|node| node.uid.clone())
            .collect()
    }

    /// The work that follows from `node`'s own state.
    pub fn work_for(&self, node: &Node) -> Vec<Work> {
        let mut work = Vec::new();
        if node.deleting && node.has_finalizer(ORPHAN) {
            work.push(Work::Orphan(node.uid.clone()));
        }
        if node.deleting && node.has_finalizer(FOREGROUND) {
            work.push(Work::AttemptToDelete(node.uid.clone()));
            for dependent in self.dependents_of(&node.uid) {
                work.push(Work::AttemptToDelete(dependent.uid.clone()));
            }
        }
        let owner_missing_or_leaving = node.owners.iter().any(|owner| {
            self.nodes
                .get(&owner.uid)
                .is_none_or(|owner| owner.deleting && owner.has_finalizer(FOREGROUND))
        });
        if owner_missing_or_leaving {
            work.push(Work::AttemptToDelete(node.uid.clone()));
        }
        work
    }

    /// Records an object as the watches now show it.
    pub fn upsert(&mut self, node: Node) -> Vec<Work> {
        if let Some(previous) = self.nodes.get(&node.uid) {
            for owner in &previous.owners {
                if let Some(set) = self.dependents.get_mut(&owner.uid) {
                    set.remove(&node.uid);
                }
            }
        }
        for owner in &node.owners {
            self.dependents
                .entry(owner.uid.clone())
                .or_default()
                .insert(node.uid.clone());
        }
        let work = self.work_for(&node);
        self.nodes.insert(node.uid.clone(), node);
        work
    }

    /// Forgets a deleted object: its dependents may now be garbage, and an owner waiting in
    /// the foreground for it may now go.
    pub fn remove(&mut self, uid: &str) -> Vec<Work> {
        let Some(node) = self.nodes.remove(uid) else {
            return Vec::new();
        };
        let mut work: Vec<Work> = self
            .dependents_of(uid)
            .into_iter()
            .map(|dependent| Work::AttemptToDelete(dependent.uid.clone()))
            .collect();
        for owner in &node.owners {
            if let Some(set) = self.dependents.get_mut(&owner.uid) {
                set.remove(uid);
            }
            if self
                .nodes
                .get(&owner.uid)
                .is_some_and(|owner| owner.deleting && owner.has_finalizer(FOREGROUND))
            {
                work.push(Work::AttemptToDelete(owner.uid.clone()));
            }
        }
        work
    }
}

pub fn same_resource(a: &ApiResource, b: &ApiResource) -> bool {
    a.group == b.group && a.version == b.version && a.plural == b.plural
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(kind: &str) -> ApiResource {
        ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
        }
    }

    fn node(uid: &str, owners: &[&str]) -> Node {
        Node {
            resource: resource("ReplicaSet"),
            namespace: Some("default".into()),
            name: uid.into(),
            uid: uid.into(),
            owners: owners
                .iter()
                .map(|owner| OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: owner.to_string(),
                    uid: owner.to_string(),
                    controller: Some(true),
                    block_owner_deletion: Some(true),
                })
                .collect(),
            finalizers: Vec::new(),
            deleting: false,
        }
    }

    #[test]
    fn a_dependent_of_a_vanished_owner_is_work_and_one_of_a_live_owner_is_not() {
        let mut graph = Graph::default();
        assert!(graph.upsert(node("owner", &[])).is_empty());
        assert!(graph.upsert(node("child", &["owner"])).is_empty());
        assert_eq!(
            graph.remove("owner"),
            vec![Work::AttemptToDelete("child".into())]
        );
        assert_eq!(
            graph.upsert(node("orphan", &["never-seen"])),
            vec![Work::AttemptToDelete("orphan".into())]
        );
    }

    #[test]
    fn owners_being_deleted_orphan_or_in_the_foreground_make_work() {
        let mut graph = Graph::default();
        graph.upsert(node("owner", &[]));
        graph.upsert(node("child", &["owner"]));
        let mut leaving = node("owner", &[]);
        leaving.deleting = true;
        leaving.finalizers = vec![FOREGROUND.into()];
        let work = graph.upsert(leaving.clone());
        assert!(work.contains(&Work::AttemptToDelete("owner".into())));
        assert!(work.contains(&Work::AttemptToDelete("child".into())));
        assert_eq!(
            graph.remove("child"),
            vec![Work::AttemptToDelete("owner".into())],
            "the owner may now lose its finalizer"
        );
        leaving.finalizers = vec![ORPHAN.into()];
        assert_eq!(graph.upsert(leaving), vec![Work::Orphan("owner".into())]);
    }
}
