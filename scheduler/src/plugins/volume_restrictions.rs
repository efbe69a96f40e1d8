//! VolumeRestrictions, as upstream's: volumes a node or the cluster can give one pod only.
//!
//! - **ReadWriteOncePod claims**: PreFilter counts the pods (anywhere) that already use one
//!   of the pod's `ReadWriteOncePod` claims; while any does, every node is Unschedulable
//!   (not unresolvable: preemption may remove the user, which AddPod/RemovePod follow).
//! - **Disk conflicts** of the in-tree volume types that attach to one node: a node where a
//!   pod already uses the same GCE persistent disk or iSCSI target (unless both mount it
//!   read-only), the same AWS EBS volume, or the same Ceph RBD image on a shared monitor
//!   (unless both read-only) is filtered out.

use std::collections::HashSet;

use k8s_openapi::api::core::v1::Volume;

use crate::framework::{ClusterEvent, Ctx, CycleState, Plugin, Point, Status};
use crate::node_info::{NodeInfo, PodInfo};

const NAME: &str = "VolumeRestrictions";

/// Upstream's reasons.
pub const DISK_CONFLICT: &str = "node(s) had no available disk";
pub const READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode";

pub struct VolumeRestrictions;

#[derive(Clone, Default)]
struct State {
    /// `namespace/claim` of the pod's ReadWriteOncePod claims.
    claims: HashSet<String>,
    /// Pods other than this one using any of them.
    conflicts: i64,
    /// Whether the pod has volumes that can conflict on a node.
    has_disks: bool,
}

/// The `namespace/name` of each claim `pod` mounts.
fn claim_keys(pod: &PodInfo) -> impl Iterator<Item = String> + '_ {
    pod.pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| format!("{}/{}", pod.namespace, c.claim_name))
}

fn is_disk(volume: &Volume) -> bool {
    volume.gce_persistent_disk.is_some()
        || volume.aws_elastic_block_store.is_some()
        || volume.iscsi.is_some()
        || volume.rbd.is_some()
}

/// Whether `a` (the incoming pod's) and `b` (an existing pod's) cannot be on one node.
fn disks_conflict(a: &Volume, b: &Volume) -> bool {
    if let (Some(a), Some(b)) = (&a.gce_persistent_disk, &b.gce_persistent_disk) {
        let both_read_only = a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false);
        return a.pd_name == b.pd_name && !both_read_only;
    }
    if let (Some(a), Some(b)) = (&a.aws_elastic_block_store, &b.aws_elastic_block_store) {
        return a.volume_id == b.volume_id;
    }
    if let (Some(a), Some(b)) = (&a.iscsi, &b.iscsi) {
        let both_read_only = a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false);
        return a.iqn == b.iqn && !both_read_only;
    }
    if let (Some(a), Some(b)) = (&a.rbd, &b.rbd) {
        let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".into());
        let shares_monitor = a.monitors.iter().any(|m| b.monitors.contains(m));
        let both_read_only = a.read_only.unwrap_or(false) && b.read_only.unwrap_or(false);
        return shares_monitor
            && pool(&a.pool) == pool(&b.pool)
            && a.image == b.image
            && !both_read_only;
    }
    false
}

impl VolumeRestrictions {
    /// How many of `pod`'s claims are among `claims` (0 for the incoming pod itself).
    fn uses(state: &State, incoming: &PodInfo, pod: &PodInfo) -> i64 {
        if pod.uid == incoming.uid {
            return 0;
        }
        let count = claim_keys(pod).filter(|k| state.claims.contains(k)).count();
        i64::try_from(count).unwrap_or(i64::MAX)
    }

    fn adjust(state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, delta: i64) {
        if let Some(found) = state.read_mut::<State>(NAME) {
            found.conflicts += delta * Self::uses(found, ctx.pod, pod);
        }
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::AssignedPodDeleted,
            ClusterEvent::ClaimChanged,
            ClusterEvent::NodeAdded,
        ]
    }

    fn pre_filter(&self, state: &mut CycleState, ctx: &Ctx) -> Status {
        let volumes = ctx
            .pod
            .pod
            .spec
            .iter()
            .flat_map(|s| s.volumes.iter().flatten());
        let has_disks = volumes.clone().any(is_disk);
        let mut claims = HashSet::new();
        for claim in volumes.filter_map(|v| v.persistent_volume_claim.as_ref()) {
            let Some(found) = ctx
                .volumes
                .lister
                .claim(&ctx.pod.namespace, &claim.claim_name)
            else {
                // VolumeBinding says what is missing.
                continue;
            };
            let once_pod = found
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.as_ref())
                .is_some_and(|modes| modes.iter().any(|m| m == "ReadWriteOncePod"));
            if once_pod {
                claims.insert(format!("{}/{}", ctx.pod.namespace, claim.claim_name));
            }
        }
        if claims.is_empty() && !has_disks {
            return Status::skip();
        }
        let mut found = State {
            claims,
            conflicts: 0,
            has_disks,
        };
        if !found.claims.is_empty() {
            found.conflicts = ctx
                .snapshot
                .nodes
                .iter()
                .flat_map(|n| n.pods.iter())
                .map(|p| Self::uses(&found, ctx.pod, p))
                .sum();
        }
        state.write(NAME, found);
        Status::success()
    }

    fn add_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, _: &NodeInfo) {
        Self::adjust(state, ctx, pod, 1);
    }

    fn remove_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, _: &NodeInfo) {
        Self::adjust(state, ctx, pod, -1);
    }

    fn filter(&self, state: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<State>(NAME) else {
            return Status::success();
        };
        if found.has_disks {
            let incoming: Vec<&Volume> = ctx
                .pod
                .pod
                .spec
                .iter()
                .flat_map(|s| s.volumes.iter().flatten())
                .filter(|v| is_disk(v))
                .collect();
            let conflict = node
                .pods
                .iter()
                .filter(|p| p.uid != ctx.pod.uid)
                .flat_map(|p| p.pod.spec.iter().flat_map(|s| s.volumes.iter().flatten()))
                .any(|existing| incoming.iter().any(|v| disks_conflict(v, existing)));
            if conflict {
                return Status::unresolvable(DISK_CONFLICT);
            }
        }
        if found.conflicts > 0 {
            return Status::unschedulable(READ_WRITE_ONCE_POD_CONFLICT);
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
    use crate::volumes::{ListedVolumes, Volumes};

    fn pod(name: &str, volumes: Value) -> PodInfo {
        PodInfo::new(Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "default", "uid": name},
                "spec": {"containers": [{"name": "c", "image": "i"}], "volumes": volumes}}))
            .expect("pod"),
        ))
    }

    fn node(name: &str, pods: Vec<PodInfo>) -> Arc<NodeInfo> {
        let mut info = NodeInfo::new(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}})).expect("node"),
        ));
        for p in pods {
            info.add_pod(Arc::new(p));
        }
        Arc::new(info)
    }

    fn claim_volume(claim: &str) -> Value {
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": claim}}])
    }

    fn volumes_with(claims: &[(&str, &str)]) -> Volumes {
        let listed = ListedVolumes::default();
        *listed.claims.lock().expect("claims") = claims
            .iter()
            .map(|(name, mode)| {
                Arc::new(
                    serde_json::from_value(json!({
                        "metadata": {"name": name, "namespace": "default"},
                        "spec": {"accessModes": [mode]}}))
                    .expect("claim"),
                )
            })
            .collect();
        Volumes::new(Arc::new(listed))
    }

    /// PreFilter's code, then the filter's code on each of `nodes`, with `remove` (a pod on
    /// the first node) taken away first as preemption would.
    fn run(
        incoming: &PodInfo,
        nodes: Vec<Arc<NodeInfo>>,
        volumes: &Volumes,
        remove: Option<&PodInfo>,
    ) -> (Code, Vec<(Code, Vec<String>)>) {
        let mut snapshot = Snapshot::default();
        snapshot.nodes = nodes;
        let labels = |_: &str| BTreeMap::new();
        let ctx = Ctx {
            pod: incoming,
            snapshot: &snapshot,
            namespace_labels: &labels,
            volumes,
            workloads: &crate::workloads::ListedWorkloads::default(),
        };
        let mut state = CycleState::default();
        let pre = VolumeRestrictions.pre_filter(&mut state, &ctx);
        if let Some(gone) = remove {
            VolumeRestrictions.remove_pod(&mut state, &ctx, gone, &snapshot.nodes[0]);
        }
        let filtered = snapshot
            .nodes
            .iter()
            .map(|n| {
                let s = VolumeRestrictions.filter(&state, &ctx, n);
                (s.code, s.reasons)
            })
            .collect();
        (pre.code, filtered)
    }

    #[test]
    fn a_read_write_once_pod_claim_in_use_anywhere_blocks_every_node_until_its_user_goes() {
        let volumes = volumes_with(&[("solo", "ReadWriteOncePod"), ("shared", "ReadWriteOnce")]);
        let user = pod("user", claim_volume("solo"));
        let incoming = pod("incoming", claim_volume("solo"));
        let nodes = || vec![node("a", vec![user.clone()]), node("b", Vec::new())];

        let (pre, filtered) = run(&incoming, nodes(), &volumes, None);
        assert_eq!(pre, Code::Success);
        for (code, reasons) in &filtered {
            assert_eq!(*code, Code::Unschedulable, "preemption may help");
            assert_eq!(reasons, &[READ_WRITE_ONCE_POD_CONFLICT]);
        }
        // As preemption sees it: with the user gone, both nodes fit.
        let (_, filtered) = run(&incoming, nodes(), &volumes, Some(&user));
        assert!(filtered.iter().all(|(code, _)| *code == Code::Success));
        // A free ReadWriteOncePod claim, and a ReadWriteOnce one in use, are no conflict.
        let alone = pod("alone", claim_volume("solo"));
        let (_, filtered) = run(&alone, vec![node("b", Vec::new())], &volumes, None);
        assert_eq!(filtered[0].0, Code::Success);
        let other = pod("other", claim_volume("shared"));
        let users = vec![node("a", vec![pod("first", claim_volume("shared"))])];
        assert_eq!(run(&other, users, &volumes, None).0, Code::Skip);
    }

    #[test]
    fn single_attach_disks_conflict_on_a_node_unless_both_mount_them_read_only() {
        let volumes = volumes_with(&[]);
        let gce = |name: &str, read_only: bool| {
            pod(
                name,
                json!([{"name": "d", "gcePersistentDisk": {"pdName": "pd-1", "readOnly": read_only}}]),
            )
        };
        let cases = [
            (
                gce("old", false),
                gce("new", false),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                gce("old", true),
                gce("new", false),
                Code::UnschedulableAndUnresolvable,
            ),
            (gce("old", true), gce("new", true), Code::Success),
            (
                pod(
                    "old",
                    json!([{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": true}}]),
                ),
                pod(
                    "new",
                    json!([{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1", "readOnly": true}}]),
                ),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                pod(
                    "old",
                    json!([{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-1"}}]),
                ),
                pod(
                    "new",
                    json!([{"name": "d", "awsElasticBlockStore": {"volumeID": "vol-2"}}]),
                ),
                Code::Success,
            ),
            (
                pod(
                    "old",
                    json!([{"name": "d", "iscsi": {"targetPortal": "p", "iqn": "iqn.a", "lun": 0}}]),
                ),
                pod(
                    "new",
                    json!([{"name": "d", "iscsi": {"targetPortal": "p", "iqn": "iqn.a", "lun": 1}}]),
                ),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                pod(
                    "old",
                    json!([{"name": "d", "rbd": {"monitors": ["m1", "m2"], "image": "img"}}]),
                ),
                pod(
                    "new",
                    json!([{"name": "d", "rbd": {"monitors": ["m2"], "image": "img", "pool": "rbd"}}]),
                ),
                Code::UnschedulableAndUnresolvable,
            ),
            (
                pod(
                    "old",
                    json!([{"name": "d", "rbd": {"monitors": ["m1"], "image": "img"}}]),
                ),
                pod(
                    "new",
                    json!([{"name": "d", "rbd": {"monitors": ["m9"], "image": "img"}}]),
                ),
                Code::Success,
            ),
        ];
        for (i, (existing, incoming, want)) in cases.into_iter().enumerate() {
            let nodes = vec![node("a", vec![existing]), node("b", Vec::new())];
            let (pre, filtered) = run(&incoming, nodes, &volumes, None);
            assert_eq!(pre, Code::Success, "case {i}");
            assert_eq!(filtered[0].0, want, "case {i}");
            if want != Code::Success {
                assert_eq!(filtered[0].1, [DISK_CONFLICT], "case {i}");
            }
            assert_eq!(filtered[1].0, Code::Success, "case {i}: an empty node");
        }
        assert_eq!(
            run(&pod("plain", json!([])), Vec::new(), &volumes, None).0,
            Code::Skip
        );
    }
}
