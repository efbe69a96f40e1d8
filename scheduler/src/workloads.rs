//! What PodTopologySpread's default constraints read of the cluster's workloads: the
//! Services of a pod's namespace, and the ReplicationController, ReplicaSet or StatefulSet
//! that controls it — from the scheduler's informers ([`StoreWorkloads`]) or a test's lists
//! ([`ListedWorkloads`]) — and the selector upstream deduces from them for a pod that names
//! no spread constraints of its own ([`default_selector`]).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Pod, ReplicationController, Service};
use kube::core::Selector;
use kube::runtime::reflector::{ObjectRef, Store};

/// Reads Services and controllers.
pub trait Workloads: Send + Sync {
    fn services(&self, namespace: &str) -> Vec<Arc<Service>>;
    fn replication_controller(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<ReplicationController>>;
    fn replica_set(&self, namespace: &str, name: &str) -> Option<Arc<ReplicaSet>>;
    fn stateful_set(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>>;
}

/// The informers' stores.
pub struct StoreWorkloads {
    pub services: Store<Service>,
    pub replication_controllers: Store<ReplicationController>,
    pub replica_sets: Store<ReplicaSet>,
    pub stateful_sets: Store<StatefulSet>,
}

impl Workloads for StoreWorkloads {
    fn services(&self, namespace: &str) -> Vec<Arc<Service>> {
        self.services
            .state()
            .into_iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }
    fn replication_controller(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<ReplicationController>> {
        self.replication_controllers
            .get(&ObjectRef::new(name).within(namespace))
    }
    fn replica_set(&self, namespace: &str, name: &str) -> Option<Arc<ReplicaSet>> {
        self.replica_sets
            .get(&ObjectRef::new(name).within(namespace))
    }
    fn stateful_set(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        self.stateful_sets
            .get(&ObjectRef::new(name).within(namespace))
    }
}

/// Lists held in memory (tests, and a scheduler that has no such informers).
#[derive(Default)]
pub struct ListedWorkloads {
    pub services: Mutex<Vec<Arc<Service>>>,
    pub replication_controllers: Mutex<Vec<Arc<ReplicationController>>>,
    pub replica_sets: Mutex<Vec<Arc<ReplicaSet>>>,
    pub stateful_sets: Mutex<Vec<Arc<StatefulSet>>>,
}

fn find<K: kube::Resource>(
    list: &Mutex<Vec<Arc<K>>>,
    namespace: &str,
    name: &str,
) -> Option<Arc<K>> {
    list.lock()
        .unwrap_or_else(|p| p.into_inner())
        .iter()
        .find(|o| {
            o.meta().namespace.as_deref() == Some(namespace)
                && o.meta().name.as_deref() == Some(name)
        })
        .cloned()
}

impl Workloads for ListedWorkloads {
    fn services(&self, namespace: &str) -> Vec<Arc<Service>> {
        self.services
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|s| s.metadata.namespace.as_deref() == Some(namespace))
            .cloned()
            .collect()
    }
    fn replication_controller(
        &self,
        namespace: &str,
        name: &str,
    ) -> Option<Arc<ReplicationController>> {
        find(&self.replication_controllers, namespace, name)
    }
    fn replica_set(&self, namespace: &str, name: &str) -> Option<Arc<ReplicaSet>> {
        find(&self.replica_sets, namespace, name)
    }
    fn stateful_set(&self, namespace: &str, name: &str) -> Option<Arc<StatefulSet>> {
        find(&self.stateful_sets, namespace, name)
    }
}

/// The selector of the pods `pod` should be spread with, as upstream deduces it: the labels
/// every Service of its namespace that selects it selects on, plus the selector of the
/// ReplicationController, ReplicaSet or StatefulSet that controls it. `None` when nothing
/// selects the pod (then no default constraint applies to it).
pub fn default_selector(pod: &Pod, workloads: &dyn Workloads) -> Option<Selector> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let empty = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&empty);
    let mut set = BTreeMap::new();
    for service in workloads.services(namespace) {
        // A Service without a selector selects nothing, not everything.
        let Some(selector) = service.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
            continue;
        };
        if selector.iter().all(|(k, v)| labels.get(k) == Some(v)) {
            set.extend(selector.clone());
        }
    }
    let controller = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true));
    let mut controller_selector = None;
    if let Some(owner) = controller {
        let name = owner.name.as_str();
        match (owner.api_version.as_str(), owner.kind.as_str()) {
            ("v1", "ReplicationController") => {
                if let Some(rc) = workloads.replication_controller(namespace, name) {
                    set.extend(
                        rc.spec
                            .as_ref()
                            .and_then(|s| s.selector.clone())
                            .unwrap_or_default(),
                    );
                }
            }
            ("apps/v1", "ReplicaSet") => {
                controller_selector = workloads
                    .replica_set(namespace, name)
                    .and_then(|rs| rs.spec.as_ref().map(|s| s.selector.clone()));
            }
            ("apps/v1", "StatefulSet") => {
                controller_selector = workloads
                    .stateful_set(namespace, name)
                    .and_then(|ss| ss.spec.as_ref().map(|s| s.selector.clone()));
            }
            _ => {}
        }
    }
    let mut selector: Selector = set.into_iter().collect();
    if let Some(label_selector) = controller_selector {
        // An invalid selector adds nothing, as upstream ignores it.
        if let Ok(extra) = Selector::try_from(label_selector) {
            selector.extend(extra);
        }
    }
    (!selector.selects_all()).then_some(selector)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::SelectorExt;
    use serde_json::json;

    fn listed() -> ListedWorkloads {
        let workloads = ListedWorkloads::default();
        let service: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"selector": {"app": "web"}}}))
        .expect("service");
        let headless: Service = serde_json::from_value(json!({
            "metadata": {"name": "external", "namespace": "default"}, "spec": {}}))
        .expect("service");
        let elsewhere: Service = serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "other"},
            "spec": {"selector": {"tier": "front"}}}))
        .expect("service");
        let rs: ReplicaSet = serde_json::from_value(json!({
            "metadata": {"name": "web-1", "namespace": "default"},
            "spec": {"selector": {"matchExpressions": [
                {"key": "hash", "operator": "In", "values": ["1"]}]}}}))
        .expect("rs");
        *workloads.services.lock().expect("lock") =
            vec![Arc::new(service), Arc::new(headless), Arc::new(elsewhere)];
        *workloads.replica_sets.lock().expect("lock") = vec![Arc::new(rs)];
        workloads
    }

    fn pod(labels: serde_json::Value, owner: Option<(&str, &str)>) -> Pod {
        let owners: Vec<_> = owner
            .into_iter()
            .map(|(kind, name)| {
                json!({"apiVersion": "apps/v1", "kind": kind, "name": name,
                "uid": "u", "controller": true})
            })
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "p", "namespace": "default",
            "labels": labels, "ownerReferences": owners}}))
        .expect("pod")
    }

    fn matches(selector: &Selector, labels: serde_json::Value) -> bool {
        let labels: BTreeMap<String, String> = serde_json::from_value(labels).expect("labels");
        selector.matches(&labels)
    }

    #[test]
    fn services_and_the_controlling_replica_set_make_the_selector() {
        let workloads = listed();
        let owned = pod(
            json!({"app": "web", "hash": "1"}),
            Some(("ReplicaSet", "web-1")),
        );
        let selector = default_selector(&owned, &workloads).expect("a selector");
        assert!(matches(
            &selector,
            json!({"app": "web", "hash": "1", "x": "y"})
        ));
        assert!(!matches(&selector, json!({"app": "web", "hash": "2"})));
        assert!(!matches(&selector, json!({"hash": "1"})));
        // Only the Service: a pod no controller owns.
        let alone = default_selector(&pod(json!({"app": "web"}), None), &workloads)
            .expect("the Service's selector");
        assert!(matches(&alone, json!({"app": "web"})));
        assert!(!matches(&alone, json!({"app": "api"})));
    }

    #[test]
    fn nothing_selects_a_pod_no_service_or_known_controller_matches() {
        let workloads = listed();
        // The Service in another namespace, the selector-less Service and an unknown owner
        // do not count.
        assert!(default_selector(&pod(json!({"tier": "front"}), None), &workloads).is_none());
        assert!(default_selector(
            &pod(json!({"tier": "front"}), Some(("ReplicaSet", "gone"))),
            &workloads
        )
        .is_none());
        assert!(default_selector(
            &pod(json!({"tier": "front"}), Some(("DaemonSet", "web-1"))),
            &workloads
        )
        .is_none());
    }
}
