//! VolumeZone, as upstream's: a pod whose bound volumes carry zone or region labels goes only
//! to nodes in one of those zones (regions).
//!
//! PreFilter reads the topology labels (`topology.kubernetes.io/zone|region` and their
//! deprecated `failure-domain.beta.kubernetes.io/…` names) of the volumes bound to the pod's
//! claims — a value may list several zones joined by `__` — skipping unbound claims of a
//! `WaitForFirstConsumer` class (VolumeBinding places those) and the whole plugin when no
//! volume has such labels. Filter passes a node without any topology label (upstream's
//! leniency) and otherwise needs the node's value for each label (under either name) to be
//! among the volume's.

use std::collections::BTreeSet;

use rudder_facts::volumes::{claim_class, claim_volume};

use crate::framework::{ClusterEvent, Ctx, CycleState, Plugin, Point, Status};
use crate::node_info::NodeInfo;

const NAME: &str = "VolumeZone";

/// Upstream's reason.
pub const ZONE_CONFLICT: &str = "node(s) had no available volume zone";

/// The topology labels, each with its other name.
const TOPOLOGY_LABELS: [(&str, &str); 4] = [
    (
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    ),
    (
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    ),
    (
        "failure-domain.beta.kubernetes.io/zone",
        "topology.kubernetes.io/zone",
    ),
    (
        "failure-domain.beta.kubernetes.io/region",
        "topology.kubernetes.io/region",
    ),
];

pub struct VolumeZone;

/// One volume's label: its key and the values it allows.
#[derive(Clone)]
struct Constraint {
    key: &'static str,
    other_key: &'static str,
    values: BTreeSet<String>,
}

#[derive(Clone)]
struct State {
    constraints: Vec<Constraint>,
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        crate::framework::VOLUME_EVENTS
    }

    fn pre_filter(&self, state: &mut CycleState, ctx: &Ctx) -> Status {
        let lister = &ctx.volumes.lister;
        let claims = ctx
            .pod
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten())
            .filter_map(|v| v.persistent_volume_claim.as_ref());
        let mut constraints = Vec::new();
        for reference in claims {
            let Some(claim) = lister.claim(&ctx.pod.namespace, &reference.claim_name) else {
                return Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" not found",
                    reference.claim_name
                ));
            };
            let Some(volume_name) = claim_volume(&claim) else {
                let class = claim_class(&claim);
                let delayed = !class.is_empty()
                    && lister.class(class).is_some_and(|c| {
                        c.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer")
                    });
                if delayed {
                    continue;
                }
                return Status::unresolvable(format!(
                    "persistentvolumeclaim \"{}\" is not bound",
                    reference.claim_name
                ));
            };
            let Some(volume) = lister.volume(volume_name) else {
                return Status::unresolvable(format!(
                    "persistentvolume \"{volume_name}\" not found"
                ));
            };
            let Some(labels) = volume.metadata.labels.as_ref() else {
                continue;
            };
            for (key, other_key) in TOPOLOGY_LABELS {
                if let Some(value) = labels.get(key) {
                    constraints.push(Constraint {
                        key,
                        other_key,
                        values: value.split("__").map(|z| z.trim().to_owned()).collect(),
                    });
                }
            }
        }
        if constraints.is_empty() {
            return Status::skip();
        }
        state.write(NAME, State { constraints });
        Status::success()
    }

    fn filter(&self, state: &CycleState, _: &Ctx, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<State>(NAME) else {
            return Status::success();
        };
        let has_topology = TOPOLOGY_LABELS
            .iter()
            .any(|(key, _)| node.labels.contains_key(*key));
        if !has_topology {
            return Status::success();
        }
        for constraint in &found.constraints {
            let value = node
                .labels
                .get(constraint.key)
                .or_else(|| node.labels.get(constraint.other_key));
            if !value.is_some_and(|v| constraint.values.contains(v)) {
                return Status::unresolvable(ZONE_CONFLICT);
            }
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use serde_json::{json, Value};

    use super::*;
    use crate::cache::Snapshot;
    use crate::framework::Code;
    use crate::node_info::PodInfo;
    use crate::volumes::{ListedVolumes, Volumes};

    fn listed(claims: Vec<Value>, volumes: Vec<Value>, classes: Vec<Value>) -> Volumes {
        fn parse<T: serde::de::DeserializeOwned>(values: Vec<Value>) -> Vec<Arc<T>> {
            values
                .into_iter()
                .map(|v| Arc::new(serde_json::from_value(v).expect("object")))
                .collect()
        }
        let listed = ListedVolumes::default();
        *listed.claims.lock().expect("claims") = parse(claims);
        *listed.volumes.lock().expect("volumes") = parse(volumes);
        *listed.classes.lock().expect("classes") = parse(classes);
        Volumes::new(Arc::new(listed))
    }

    fn claim(name: &str, volume: Option<&str>, class: &str) -> Value {
        json!({"metadata": {"name": name, "namespace": "default"},
            "spec": {"storageClassName": class, "volumeName": volume}})
    }

    fn volume(name: &str, labels: Value) -> Value {
        json!({"metadata": {"name": name, "labels": labels}, "spec": {}})
    }

    fn node(labels: Value) -> NodeInfo {
        NodeInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": "n", "labels": labels}}))
                .expect("node"),
        ))
    }

    /// PreFilter's code and reasons, and the filter's code on each node's labels.
    fn run(volumes: &Volumes, claims: &[&str], nodes: &[Value]) -> (Code, Vec<String>, Vec<Code>) {
        let list: Vec<Value> = claims
            .iter()
            .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        let pod = PodInfo::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": "p", "namespace": "default", "uid": "p"},
                "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": list}}))
            .expect("pod"),
        ));
        let snapshot = Snapshot::default();
        let labels = |_: &str| BTreeMap::new();
        let ctx = Ctx {
            pod: &pod,
            snapshot: &snapshot,
            namespace_labels: &labels,
            volumes,
            workloads: &crate::workloads::ListedWorkloads::default(),
        };
        let mut state = CycleState::default();
        let pre = VolumeZone.pre_filter(&mut state, &ctx);
        let filtered = nodes
            .iter()
            .map(|l| VolumeZone.filter(&state, &ctx, &node(l.clone())).code)
            .collect();
        (pre.code, pre.reasons, filtered)
    }

    #[test]
    fn bound_volumes_keep_the_pod_to_their_zones() {
        let volumes = listed(
            vec![
                claim("east", Some("pv-east"), ""),
                claim("multi", Some("pv-multi"), ""),
                claim("legacy", Some("pv-legacy"), ""),
                claim("plain", Some("pv-plain"), ""),
            ],
            vec![
                volume(
                    "pv-east",
                    json!({"topology.kubernetes.io/zone": "us-east-1a",
                        "topology.kubernetes.io/region": "us-east-1"}),
                ),
                volume("pv-multi", json!({"topology.kubernetes.io/zone": "a__b"})),
                volume(
                    "pv-legacy",
                    json!({"failure-domain.beta.kubernetes.io/zone": "z1"}),
                ),
                volume("pv-plain", json!({"app": "db"})),
            ],
            Vec::new(),
        );
        let in_east = json!({"topology.kubernetes.io/zone": "us-east-1a",
            "topology.kubernetes.io/region": "us-east-1"});
        let in_west = json!({"topology.kubernetes.io/zone": "us-west-1a",
            "topology.kubernetes.io/region": "us-west-1"});
        let unlabelled = json!({"kubernetes.io/hostname": "n"});
        let (pre, _, filtered) = run(&volumes, &["east"], &[in_east, in_west, unlabelled]);
        assert_eq!(pre, Code::Success);
        assert_eq!(
            filtered,
            [
                Code::Success,
                Code::UnschedulableAndUnresolvable,
                Code::Success
            ]
        );

        let zone = |z: &str| json!({"topology.kubernetes.io/zone": z});
        let (_, _, filtered) = run(&volumes, &["multi"], &[zone("a"), zone("b"), zone("c")]);
        assert_eq!(
            filtered,
            [
                Code::Success,
                Code::Success,
                Code::UnschedulableAndUnresolvable
            ]
        );
        // The deprecated label on the volume matches the GA one on the node, and back.
        let (_, _, filtered) = run(&volumes, &["legacy"], &[zone("z1"), zone("z2")]);
        assert_eq!(
            filtered,
            [Code::Success, Code::UnschedulableAndUnresolvable]
        );
        // No topology labels on any volume: nothing to check.
        assert_eq!(run(&volumes, &["plain"], &[]).0, Code::Skip);
        assert_eq!(run(&volumes, &[], &[]).0, Code::Skip);
    }

    #[test]
    fn unbound_and_missing_claims() {
        let volumes = listed(
            vec![claim("later", None, "wffc"), claim("pending", None, "now")],
            Vec::new(),
            vec![
                json!({"metadata": {"name": "wffc"}, "provisioner": "p",
                    "volumeBindingMode": "WaitForFirstConsumer"}),
                json!({"metadata": {"name": "now"}, "provisioner": "p",
                    "volumeBindingMode": "Immediate"}),
            ],
        );
        assert_eq!(run(&volumes, &["later"], &[]).0, Code::Skip);
        let (code, reasons, _) = run(&volumes, &["pending"], &[]);
        assert_eq!(code, Code::UnschedulableAndUnresolvable);
        assert_eq!(reasons, ["persistentvolumeclaim \"pending\" is not bound"]);
        let (code, reasons, _) = run(&volumes, &["gone"], &[]);
        assert_eq!(code, Code::UnschedulableAndUnresolvable);
        assert_eq!(reasons, ["persistentvolumeclaim \"gone\" not found"]);
    }
}
