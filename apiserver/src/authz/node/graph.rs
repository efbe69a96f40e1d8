//! Which objects each node's pods use: for every pod bound to a node, the Secrets, ConfigMaps,
//! PersistentVolumeClaims and ServiceAccount it names (volumes, projected sources, env and
//! envFrom of every container, image pull secrets), and through its claims the
//! PersistentVolumes they are bound to. Followed from the store's pods, claims and volumes;
//! volumes also remember the node their required affinity pins them to (local volumes).

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::core::v1::{Container, Pod, PodSpec};

use crate::authz::follow::Follows;

/// Where pods are stored.
pub const PODS: &str = "/registry/pods/";
/// Where claims are stored.
pub const CLAIMS: &str = "/registry/persistentvolumeclaims/";
/// Where volumes are stored.
pub const VOLUMES: &str = "/registry/persistentvolumes/";

/// What a node's pod may make the node read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Used {
    Secret,
    ConfigMap,
    Claim,
    ServiceAccount,
}

#[derive(Clone, Debug, Default)]
struct PodUses {
    node: String,
    namespace: String,
    name: String,
    uses: HashSet<(Used, String)>,
}

/// Every bound pod's uses, by node.
#[derive(Default)]
pub struct NodeGraph {
    pods: HashMap<String, PodUses>,
    by_node: HashMap<String, HashSet<String>>,
    /// `namespace/name` of each claim → the volume it is bound to.
    claims: HashMap<String, String>,
    /// Each volume → the nodes its required affinity names by hostname (empty: none).
    volumes: HashMap<String, Vec<String>>,
}

/// The hostnames a volume's required node affinity names (`kubernetes.io/hostname In …`).
fn pinned_nodes(volume: &serde_json::Value) -> Vec<String> {
    let terms = volume["spec"]["nodeAffinity"]["required"]["nodeSelectorTerms"].as_array();
    terms
        .into_iter()
        .flatten()
        .flat_map(|term| term["matchExpressions"].as_array().into_iter().flatten())
        .filter(|r| r["key"] == "kubernetes.io/hostname" && r["operator"] == "In")
        .flat_map(|r| r["values"].as_array().into_iter().flatten())
        .filter_map(|v| v.as_str().map(String::from))
        .collect()
}

/// The part of a key after `prefix`.
fn rest<'a>(key: &'a str, prefix: &str) -> Option<&'a str> {
    key.strip_prefix(prefix)
}

fn container_uses(container: &Container, uses: &mut HashSet<(Used, String)>) {
    for env in container.env.iter().flatten() {
        if let Some(from) = &env.value_from {
            if let Some(secret) = &from.secret_key_ref {
                uses.insert((Used::Secret, secret.name.clone()));
            }
            if let Some(map) = &from.config_map_key_ref {
                uses.insert((Used::ConfigMap, map.name.clone()));
            }
        }
    }
    for from in container.env_from.iter().flatten() {
        if let Some(secret) = &from.secret_ref {
            uses.insert((Used::Secret, secret.name.clone()));
        }
        if let Some(map) = &from.config_map_ref {
            uses.insert((Used::ConfigMap, map.name.clone()));
        }
    }
}

fn spec_uses(spec: &PodSpec, pod_name: &str) -> HashSet<(Used, String)> {
    let mut uses = HashSet::new();
    let account = spec
        .service_account_name
        .clone()
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "default".into());
    uses.insert((Used::ServiceAccount, account));
    for secret in spec.image_pull_secrets.iter().flatten() {
        uses.insert((Used::Secret, secret.name.clone()));
    }
    for volume in spec.volumes.iter().flatten() {
        if let Some(name) = volume.secret.as_ref().and_then(|s| s.secret_name.clone()) {
            uses.insert((Used::Secret, name));
        }
        if let Some(map) = &volume.config_map {
            uses.insert((Used::ConfigMap, map.name.clone()));
        }
        if let Some(claim) = &volume.persistent_volume_claim {
            uses.insert((Used::Claim, claim.claim_name.clone()));
        }
        if volume.ephemeral.is_some() {
            uses.insert((Used::Claim, format!("{pod_name}-{}", volume.name)));
        }
        for source in volume
            .projected
            .iter()
            .flat_map(|projected| projected.sources.iter().flatten())
        {
            if let Some(secret) = &source.secret {
                uses.insert((Used::Secret, secret.name.clone()));
            }
            if let Some(map) = &source.config_map {
                uses.insert((Used::ConfigMap, map.name.clone()));
            }
        }
    }
    let containers = spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten());
    for container in containers {
        container_uses(container, &mut uses);
    }
    uses
}

impl NodeGraph {
    fn remove(&mut self, key: &str) {
        if let Some(old) = self.pods.remove(key) {
            if let Some(pods) = self.by_node.get_mut(&old.node) {
                pods.remove(key);
                if pods.is_empty() {
                    self.by_node.remove(&old.node);
                }
            }
        }
    }

    fn insert(&mut self, key: &str, value: &serde_json::Value) {
        if let Some(name) = rest(key, CLAIMS) {
            match value["spec"]["volumeName"]
                .as_str()
                .filter(|v| !v.is_empty())
            {
                Some(volume) => self.claims.insert(name.to_string(), volume.to_string()),
                None => self.claims.remove(name),
            };
            return;
        }
        if let Some(name) = rest(key, VOLUMES) {
            self.volumes.insert(name.to_string(), pinned_nodes(value));
            return;
        }
        self.remove(key);
        let Ok(pod) = <Pod as serde::Deserialize>::deserialize(value) else {
            return;
        };
        let Some(spec) = &pod.spec else { return };
        let Some(node) = spec.node_name.clone().filter(|node| !node.is_empty()) else {
            return;
        };
        let name = pod.metadata.name.clone().unwrap_or_default();
        let uses = PodUses {
            node: node.clone(),
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            uses: spec_uses(spec, &name),
            name,
        };
        self.by_node
            .entry(node)
            .or_default()
            .insert(key.to_string());
        self.pods.insert(key.to_string(), uses);
    }

    fn pods_of<'a>(&'a self, node: &str) -> impl Iterator<Item = &'a PodUses> {
        self.by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|key| self.pods.get(key))
    }

    /// Whether a pod bound to `node` uses `what` `name` in `namespace`.
    pub fn uses(&self, node: &str, namespace: &str, what: Used, name: &str) -> bool {
        let wanted = (what, name.to_string());
        self.pods_of(node)
            .any(|pod| pod.namespace == namespace && pod.uses.contains(&wanted))
    }

    /// Whether the kubelet of `node` may read the volume `name`: one bound to a claim its
    /// pods use, one pinned to it by node affinity (its local volumes), or one that does not
    /// exist (so that the kubelet learns a local volume is gone from a 404).
    pub fn may_read_volume(&self, node: &str, name: &str) -> bool {
        let Some(pinned) = self.volumes.get(name) else {
            return true;
        };
        pinned.iter().any(|n| n == node)
            || self.pods_of(node).any(|pod| {
                pod.uses.iter().any(|(what, claim)| {
                    *what == Used::Claim
                        && self
                            .claims
                            .get(&format!("{}/{claim}", pod.namespace))
                            .is_some_and(|volume| volume == name)
                })
            })
    }

    /// Whether the pod `namespace`/`name` is bound to `node`.
    pub fn runs(&self, node: &str, namespace: &str, name: &str) -> bool {
        self.pods_of(node)
            .any(|pod| pod.namespace == namespace && pod.name == name)
    }
}

impl Follows for NodeGraph {
    fn clear(&mut self, prefix: &str) {
        match prefix {
            PODS => {
                self.pods.clear();
                self.by_node.clear();
            }
            CLAIMS => self.claims.clear(),
            VOLUMES => self.volumes.clear(),
            _ => {}
        }
    }

    fn apply_all<'a>(
        &mut self,
        changes: impl IntoIterator<Item = (&'a str, Option<&'a serde_json::Value>)>,
    ) {
        for (key, value) in changes {
            match value {
                Some(value) => self.insert(key, value),
                None => {
                    if let Some(name) = rest(key, CLAIMS) {
                        self.claims.remove(name);
                    } else if let Some(name) = rest(key, VOLUMES) {
                        self.volumes.remove(name);
                    } else {
                        self.remove(key);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_bound_pod_uses_what_its_spec_names_and_an_unbound_one_nothing() {
        let pod = json!({
            "metadata": {"name": "web", "namespace": "a"},
            "spec": {
                "nodeName": "n1",
                "serviceAccountName": "robot",
                "imagePullSecrets": [{"name": "pull"}],
                "containers": [{"name": "c", "image": "i",
                    "env": [{"name": "X", "valueFrom": {"secretKeyRef": {"name": "env-secret", "key": "k"}}}],
                    "envFrom": [{"configMapRef": {"name": "env-map"}}]}],
                "initContainers": [{"name": "i", "image": "i",
                    "envFrom": [{"secretRef": {"name": "init-secret"}}]}],
                "volumes": [
                    {"name": "v1", "secret": {"secretName": "vol-secret"}},
                    {"name": "v2", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "v3", "projected": {"sources": [{"configMap": {"name": "proj-map"}}]}},
                    {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
                ],
            },
        });
        let mut graph = NodeGraph::default();
        graph.apply_all([("/registry/pods/a/web", Some(&pod))]);
        for (what, name) in [
            (Used::Secret, "pull"),
            (Used::Secret, "env-secret"),
            (Used::Secret, "init-secret"),
            (Used::Secret, "vol-secret"),
            (Used::ConfigMap, "env-map"),
            (Used::ConfigMap, "proj-map"),
            (Used::Claim, "data"),
            (Used::Claim, "web-scratch"),
            (Used::ServiceAccount, "robot"),
        ] {
            assert!(graph.uses("n1", "a", what, name), "{what:?} {name}");
            assert!(!graph.uses("n2", "a", what, name), "{what:?} {name} on n2");
            assert!(!graph.uses("n1", "b", what, name), "{what:?} {name} in b");
        }
        assert!(!graph.uses("n1", "a", Used::Secret, "other"));
        assert!(graph.runs("n1", "a", "web"));
        // Unbound, then gone: nothing is used.
        let mut unbound = pod.clone();
        unbound["spec"]["nodeName"] = json!(null);
        graph.apply_all([("/registry/pods/a/web", Some(&unbound))]);
        assert!(!graph.uses("n1", "a", Used::Secret, "pull"));
        graph.apply_all([("/registry/pods/a/web", None)]);
        assert!(!graph.runs("n1", "a", "web"));
    }

    #[test]
    fn a_node_reads_the_volumes_of_its_pods_claims_and_its_local_volumes() {
        let pod = json!({"metadata": {"name": "db", "namespace": "a"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "i"}],
                "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "data"}}]}});
        let claim = json!({"metadata": {"name": "data", "namespace": "a"},
            "spec": {"volumeName": "pv-data"}});
        let shared = json!({"metadata": {"name": "pv-data"}, "spec": {}});
        let local = json!({"metadata": {"name": "pvc-1"}, "spec": {"nodeAffinity": {"required": {
            "nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}}});
        let mut graph = NodeGraph::default();
        graph.apply_all([
            ("/registry/pods/a/db", Some(&pod)),
            ("/registry/persistentvolumeclaims/a/data", Some(&claim)),
            ("/registry/persistentvolumes/pv-data", Some(&shared)),
            ("/registry/persistentvolumes/pvc-1", Some(&local)),
        ]);
        assert!(
            graph.may_read_volume("n1", "pv-data"),
            "its pod's claim's volume"
        );
        assert!(
            !graph.may_read_volume("n2", "pv-data"),
            "another node's pod's volume"
        );
        assert!(graph.may_read_volume("n2", "pvc-1"), "its local volume");
        assert!(
            !graph.may_read_volume("n1", "pvc-1"),
            "another node's local volume"
        );
        assert!(
            graph.may_read_volume("n1", "pvc-gone"),
            "a missing volume answers 404"
        );
        // The claim unbound, then the pod gone: no more access.
        let unbound = json!({"metadata": {"name": "data", "namespace": "a"}, "spec": {}});
        graph.apply_all([("/registry/persistentvolumeclaims/a/data", Some(&unbound))]);
        assert!(!graph.may_read_volume("n1", "pv-data"));
        graph.apply_all([
            ("/registry/persistentvolumeclaims/a/data", Some(&claim)),
            ("/registry/pods/a/db", None),
        ]);
        assert!(!graph.may_read_volume("n1", "pv-data"));
    }
}
