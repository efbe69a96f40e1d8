//! PodTopologySpread: keep a pod's group evenly spread over topology domains (zones, nodes).
//!
//! For `DoNotSchedule` constraints, PreFilter counts the matching pods per domain over the
//! nodes that count (those with every constraint's key, that the pod's node affinity
//! accepts under `nodeAffinityPolicy: Honor`, and, under `nodeTaintsPolicy: Honor`, whose
//! taints it tolerates); a node is refused when placing the pod there would make its
//! domain exceed the least-populated domain by more than `maxSkew` (with fewer than
//! `minDomains` domains, the least is taken as 0). `ScheduleAnyway` constraints score:
//! fewer matching pods in the node's domain is better, each constraint weighted by the
//! log of its number of domains.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use kube::core::{Selector, SelectorExt};

use crate::framework::{
    ClusterEvent, Ctx, CycleState, Plugin, Point, Status, MAX_NODE_SCORE, POD_AND_NODE_EVENTS,
};
use crate::node_info::{NodeInfo, PodInfo};

/// One constraint, compiled.
#[derive(Clone, Debug)]
struct Constraint {
    max_skew: i64,
    key: String,
    hard: bool,
    min_domains: i64,
    selector: Option<Selector>,
    honor_affinity: bool,
    honor_taints: bool,
}

impl Constraint {
    fn compile(c: &TopologySpreadConstraint, pod: &PodInfo) -> Self {
        let mut selector = c
            .label_selector
            .clone()
            .map(|s| Selector::try_from(s).unwrap_or_default());
        // matchLabelKeys: the pod's own values of those keys join the selector.
        if let (Some(selector), Some(keys)) = (selector.as_mut(), c.match_label_keys.as_ref()) {
            let extra: Selector = keys
                .iter()
                .filter_map(|k| pod.labels.get(k).map(|v| (k.clone(), v.clone())))
                .collect();
            selector.extend(extra);
        }
        Self {
            max_skew: i64::from(c.max_skew),
            key: c.topology_key.clone(),
            hard: c.when_unsatisfiable == "DoNotSchedule",
            min_domains: c.min_domains.map(i64::from).unwrap_or(1),
            selector,
            honor_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        }
    }

    fn counts_pod(&self, incoming: &PodInfo, pod: &PodInfo) -> bool {
        pod.namespace == incoming.namespace
            && !pod.terminating()
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }
}

fn constraints(pod: &PodInfo, hard: bool) -> Vec<Constraint> {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default()
        .iter()
        .map(|c| Constraint::compile(c, pod))
        .filter(|c| c.hard == hard)
        .collect()
}

/// Whether `node` takes part in spreading `pod` under `constraints`.
fn node_counts(constraints: &[Constraint], pod: &PodInfo, node: &NodeInfo) -> bool {
    if !constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
        return false;
    }
    let spec = pod.pod.spec.as_ref();
    if constraints.iter().any(|c| c.honor_affinity)
        && !spec.is_none_or(|s| rudder_facts::nodes::node_matches(s, &node.node))
    {
        return false;
    }
    if constraints.iter().any(|c| c.honor_taints) {
        let tolerations = spec
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        if !rudder_facts::nodes::untolerated(&node.node, tolerations).is_empty() {
            return false;
        }
    }
    true
}

/// PreFilter's counts: per constraint, matching pods per domain.
#[derive(Clone)]
struct FilterState {
    constraints: Vec<Constraint>,
    counts: Vec<HashMap<String, i64>>,
}

pub struct PodTopologySpread;

impl PodTopologySpread {
    fn update(
        &self,
        state: &mut CycleState,
        ctx: &Ctx,
        pod: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        let Some(filter) = state.read_mut::<FilterState>(self.name()) else {
            return;
        };
        if !node_counts(&filter.constraints, ctx.pod, node) {
            return;
        }
        for (c, counts) in filter.constraints.iter().zip(filter.counts.iter_mut()) {
            if c.counts_pod(ctx.pod, pod) {
                if let Some(value) = node.labels.get(&c.key) {
                    *counts.entry(value.clone()).or_default() += delta;
                }
            }
        }
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }
    fn points(&self) -> &'static [Point] {
        &[
            Point::PreFilter,
            Point::Filter,
            Point::PreScore,
            Point::Score,
        ]
    }
    fn events(&self) -> &'static [ClusterEvent] {
        POD_AND_NODE_EVENTS
    }

    fn pre_filter(&self, state: &mut CycleState, ctx: &Ctx) -> Status {
        let constraints = constraints(ctx.pod, true);
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut counts = vec![HashMap::<String, i64>::new(); constraints.len()];
        for node in &ctx.snapshot.nodes {
            if !node_counts(&constraints, ctx.pod, node) {
                continue;
            }
            for (c, counts) in constraints.iter().zip(counts.iter_mut()) {
                let matching = node
                    .pods
                    .iter()
                    .filter(|p| c.counts_pod(ctx.pod, p))
                    .count() as i64;
                *counts.entry(node.labels[&c.key].clone()).or_default() += matching;
            }
        }
        state.write(
            self.name(),
            FilterState {
                constraints,
                counts,
            },
        );
        Status::success()
    }

    fn add_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, node: &NodeInfo) {
        self.update(state, ctx, pod, node, 1);
    }

    fn remove_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, node: &NodeInfo) {
        self.update(state, ctx, pod, node, -1);
    }

    fn filter(&self, state: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let Some(filter) = state.read::<FilterState>(self.name()) else {
            return Status::success();
        };
        for (c, counts) in filter.constraints.iter().zip(&filter.counts) {
            let Some(value) = node.labels.get(&c.key) else {
                return Status::unresolvable(
                    "node(s) didn't match pod topology spread constraints (missing required label)",
                );
            };
            let domains = counts.len() as i64;
            let min = if domains < c.min_domains {
                0
            } else {
                counts.values().copied().min().unwrap_or(0)
            };
            let own = i64::from(
                c.selector
                    .as_ref()
                    .is_some_and(|s| s.matches(&ctx.pod.labels)),
            );
            let here = counts.get(value).copied().unwrap_or(0);
            if here + own - min > c.max_skew {
                return Status::unschedulable(
                    "node(s) didn't match pod topology spread constraints",
                );
            }
        }
        Status::success()
    }

    fn pre_score(&self, state: &mut CycleState, ctx: &Ctx, feasible: &[Arc<NodeInfo>]) -> Status {
        let constraints = constraints(ctx.pod, false);
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut domains: Vec<HashSet<&String>> = vec![HashSet::new(); constraints.len()];
        let mut ignored = HashSet::new();
        for node in feasible {
            if !constraints.iter().all(|c| node.labels.contains_key(&c.key)) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (c, seen) in constraints.iter().zip(domains.iter_mut()) {
                seen.insert(&node.labels[&c.key]);
            }
        }
        let weights: Vec<f64> = domains
            .iter()
            .map(|d| ((d.len() + 2) as f64).ln())
            .collect();
        let mut counts = vec![BTreeMap::<String, i64>::new(); constraints.len()];
        for node in &ctx.snapshot.nodes {
            if !node_counts(&constraints, ctx.pod, node) {
                continue;
            }
            for (i, c) in constraints.iter().enumerate() {
                let value = &node.labels[&c.key];
                if !domains[i].contains(value) {
                    continue;
                }
                let matching = node
                    .pods
                    .iter()
                    .filter(|p| c.counts_pod(ctx.pod, p))
                    .count() as i64;
                *counts[i].entry(value.clone()).or_default() += matching;
            }
        }
        state.write(
            self.name(),
            ScoreState {
                constraints,
                weights,
                counts,
                ignored,
            },
        );
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &Ctx, node: &NodeInfo) -> i64 {
        let Some(s) = state.read::<ScoreState>(self.name()) else {
            return 0;
        };
        if s.ignored.contains(&node.name) {
            return 0;
        }
        let mut total = 0.0;
        for (i, c) in s.constraints.iter().enumerate() {
            if let Some(value) = node.labels.get(&c.key) {
                let count = s.counts[i].get(value).copied().unwrap_or(0);
                total += count as f64 * s.weights[i] + (c.max_skew - 1) as f64;
            }
        }
        total.round() as i64
    }

    fn normalize(&self, state: &CycleState, _: &Ctx, nodes: &[Arc<NodeInfo>], scores: &mut [i64]) {
        let Some(s) = state.read::<ScoreState>(self.name()) else {
            return;
        };
        let counted = || {
            nodes
                .iter()
                .zip(scores.iter())
                .filter(|(n, _)| !s.ignored.contains(&n.name))
                .map(|(_, v)| *v)
        };
        let (Some(min), Some(max)) = (counted().min(), counted().max()) else {
            scores.iter_mut().for_each(|v| *v = 0);
            return;
        };
        for (node, score) in nodes.iter().zip(scores.iter_mut()) {
            *score = if s.ignored.contains(&node.name) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *score) / max
            };
        }
    }
}

#[derive(Clone)]
struct ScoreState {
    constraints: Vec<Constraint>,
    weights: Vec<f64>,
    counts: Vec<BTreeMap<String, i64>>,
    ignored: HashSet<String>,
}
