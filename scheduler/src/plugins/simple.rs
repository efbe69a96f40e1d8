//! The plugins that judge a node by itself: NodeName, NodeUnschedulable, NodePorts,
//! TaintToleration, NodeAffinity, SchedulingGates, ImageLocality, and the markers
//! PrioritySort (the queue's order) and DefaultBinder (binding through `pods/binding`).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm, Toleration};

use crate::framework::{
    default_normalize, ClusterEvent, Ctx, CycleState, Plugin, Point, Status, MAX_NODE_SCORE,
};
use crate::node_info::{ports_conflict, NodeInfo, PodInfo};

fn spec(pod: &PodInfo) -> Option<&k8s_openapi::api::core::v1::PodSpec> {
    pod.pod.spec.as_ref()
}

/// `spec.nodeName` set before scheduling: only that node.
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        "NodeName"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged]
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        match spec(ctx.pod).and_then(|s| s.node_name.as_deref()) {
            Some(wanted) if !wanted.is_empty() && wanted != node.name => {
                Status::unresolvable("node(s) didn't match the requested node name")
            }
            _ => Status::success(),
        }
    }
}

/// Cordoned nodes (`spec.unschedulable`) take only pods tolerating their taint.
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        "NodeUnschedulable"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged]
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        if !node.unschedulable() {
            return Status::success();
        }
        let taint = k8s_openapi::api::core::v1::Taint {
            key: "node.kubernetes.io/unschedulable".into(),
            effect: "NoSchedule".into(),
            ..Default::default()
        };
        let tolerated = tolerations(ctx.pod)
            .iter()
            .any(|t| rudder_facts::nodes::tolerates(t, &taint));
        if tolerated {
            Status::success()
        } else {
            Status::unresolvable("node(s) were unschedulable")
        }
    }
}

fn tolerations(pod: &PodInfo) -> &[Toleration] {
    spec(pod)
        .and_then(|s| s.tolerations.as_deref())
        .unwrap_or_default()
}

/// Host ports already taken on the node.
pub struct NodePorts;

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreFilter, Point::Filter]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[
            ClusterEvent::AssignedPodDeleted,
            ClusterEvent::NodeAdded,
            ClusterEvent::NodeChanged,
        ]
    }
    fn pre_filter(&self, _: &mut CycleState, ctx: &Ctx) -> Status {
        if ctx.pod.host_ports.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let conflict = ctx.pod.host_ports.iter().any(|wanted| {
            node.used_ports
                .iter()
                .any(|used| ports_conflict(wanted, used))
        });
        if conflict {
            Status::unschedulable("node(s) didn't have free ports for the requested pod ports")
        } else {
            Status::success()
        }
    }
}

/// Taints: NoSchedule/NoExecute repel pods that do not tolerate them; PreferNoSchedule
/// lowers the score.
pub struct TaintToleration;

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        "TaintToleration"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::PreScore, Point::Score]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged]
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let tolerations = tolerations(ctx.pod);
        let untolerated = node
            .taints()
            .iter()
            .filter(|taint| taint.effect == "NoSchedule" || taint.effect == "NoExecute")
            .find(|taint| {
                !tolerations
                    .iter()
                    .any(|t| rudder_facts::nodes::tolerates(t, taint))
            });
        match untolerated {
            Some(taint) => Status::unresolvable(format!(
                "node(s) had untolerated taint {{{}: {}}}",
                taint.key,
                taint.value.as_deref().unwrap_or_default()
            )),
            None => Status::success(),
        }
    }
    fn pre_score(&self, _: &mut CycleState, _: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        Status::success()
    }
    fn score(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> i64 {
        // Only tolerations that can tolerate PreferNoSchedule count here.
        let tolerations = tolerations(ctx.pod);
        let counts = |t: &&Toleration| {
            t.effect
                .as_deref()
                .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
        };
        node.taints()
            .iter()
            .filter(|taint| taint.effect == "PreferNoSchedule")
            .filter(|taint| {
                !tolerations
                    .iter()
                    .filter(counts)
                    .any(|t| rudder_facts::nodes::tolerates(t, taint))
            })
            .count() as i64
    }
    fn normalize(&self, _: &CycleState, _: &Ctx, _: &[Arc<NodeInfo>], scores: &mut [i64]) {
        default_normalize(scores, true);
    }
}

/// `nodeSelector` and node affinity (required filters, preferred scores), plus the
/// profile's `addedAffinity`.
#[derive(Default)]
pub struct NodeAffinity {
    /// `NodeAffinityArgs.addedAffinity`: required terms every pod must also meet, and
    /// preferred terms added to every pod's.
    pub added_required: Vec<NodeSelectorTerm>,
    pub added_preferred: Vec<PreferredSchedulingTerm>,
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        "NodeAffinity"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Filter, Point::PreScore, Point::Score]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        &[ClusterEvent::NodeAdded, ClusterEvent::NodeChanged]
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let Some(spec) = spec(ctx.pod) else {
            return Status::success();
        };
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .is_some_and(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .is_some()
            });
        if spec.node_selector.is_none() && !required && self.added_required.is_empty() {
            return Status::success();
        }
        let added_ok = self.added_required.is_empty()
            || self
                .added_required
                .iter()
                .any(|term| rudder_facts::nodes::term_matches_node(term, &node.node));
        if added_ok && rudder_facts::nodes::node_matches(spec, &node.node) {
            Status::success()
        } else {
            Status::unresolvable("node(s) didn't match Pod's node affinity/selector")
        }
    }
    fn pre_score(&self, _: &mut CycleState, ctx: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        if preferred(ctx.pod).is_empty() && self.added_preferred.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
    fn score(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> i64 {
        preferred(ctx.pod)
            .iter()
            .chain(self.added_preferred.iter())
            .filter(|term| rudder_facts::nodes::term_matches_node(&term.preference, &node.node))
            .map(|term| i64::from(term.weight))
            .sum()
    }
    fn normalize(&self, _: &CycleState, _: &Ctx, _: &[Arc<NodeInfo>], scores: &mut [i64]) {
        default_normalize(scores, false);
    }
}

fn preferred(pod: &PodInfo) -> &[PreferredSchedulingTerm] {
    spec(pod)
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

/// Pods with `schedulingGates` wait outside the active queue until the gates are removed.
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        "SchedulingGates"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreEnqueue]
    }
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates = spec(pod)
            .and_then(|s| s.scheduling_gates.as_deref())
            .unwrap_or_default();
        if gates.is_empty() {
            return Status::success();
        }
        let names: Vec<&str> = gates.iter().map(|g| g.name.as_str()).collect();
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            names.join(" ")
        ))
    }
}

/// Nodes that already hold the pod's images score higher, the more so the bigger the
/// images and the fewer nodes have them (upstream's thresholds: 23 MB to 1,000 MB per
/// container).
pub struct ImageLocality;

const IMAGE_MIN_THRESHOLD: i64 = 23 * 1024 * 1024;
const IMAGE_MAX_CONTAINER_THRESHOLD: i64 = 1000 * 1024 * 1024;

/// PreScore's view of the pod's images: the names a node may report each under, and how
/// many nodes hold it.
#[derive(Clone)]
struct ImageSpread {
    images: Vec<(Vec<String>, usize)>,
    total: usize,
}

/// The names a node may list an image under (a bare name means `:latest`, Docker Hub's
/// library images may appear with or without `docker.io/library/`).
fn image_aliases(image: &str) -> Vec<String> {
    let last = image.rsplit('/').next().unwrap_or(image);
    let tagged = if image.contains('@') || last.contains(':') {
        image.to_string()
    } else {
        format!("{image}:latest")
    };
    let mut aliases = vec![tagged.clone()];
    match tagged.strip_prefix("docker.io/library/") {
        Some(short) => aliases.push(short.to_string()),
        None if !tagged.contains('/') => aliases.push(format!("docker.io/library/{tagged}")),
        None => {}
    }
    aliases
}

impl Plugin for ImageLocality {
    fn name(&self) -> &'static str {
        "ImageLocality"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreScore, Point::Score]
    }
    fn pre_score(&self, state: &mut CycleState, ctx: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        let Some(spec) = spec(ctx.pod) else {
            return Status::skip();
        };
        let images: Vec<(Vec<String>, usize)> = spec
            .containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .filter_map(|c| c.image.as_deref())
            .map(|image| {
                let aliases = image_aliases(image);
                let holders = aliases
                    .iter()
                    .filter_map(|a| ctx.snapshot.image_spread.get(a))
                    .max()
                    .copied()
                    .unwrap_or(0);
                (aliases, holders)
            })
            .collect();
        if images.iter().all(|(_, holders)| *holders == 0) {
            // No node has any of them: every node would score 0.
            return Status::skip();
        }
        let total = ctx.snapshot.nodes.len();
        state.write(self.name(), ImageSpread { images, total });
        Status::success()
    }
    fn score(&self, state: &CycleState, _: &Ctx, node: &NodeInfo) -> i64 {
        let Some(spread) = state.read::<ImageSpread>(self.name()) else {
            return 0;
        };
        let sum: i64 = spread
            .images
            .iter()
            .filter_map(|(aliases, holders)| {
                let size = aliases.iter().find_map(|a| node.images.get(a))?;
                Some(size * *holders as i64 / spread.total.max(1) as i64)
            })
            .sum();
        let max = IMAGE_MAX_CONTAINER_THRESHOLD * spread.images.len() as i64;
        let clamped = sum.clamp(IMAGE_MIN_THRESHOLD, max);
        MAX_NODE_SCORE * (clamped - IMAGE_MIN_THRESHOLD) / (max - IMAGE_MIN_THRESHOLD).max(1)
    }
}

/// The queue orders by priority, then by arrival (the queue implements it).
pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        "PrioritySort"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::QueueSort]
    }
}

/// Binds through `pods/binding` (the scheduler's API boundary does the write).
pub struct DefaultBinder;

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        "DefaultBinder"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::Bind]
    }
}
