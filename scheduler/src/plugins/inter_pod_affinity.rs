//! InterPodAffinity: pods that must (or would like to) share a topology domain with other
//! pods, or keep away from them — and the symmetry: an existing pod's required
//! anti-affinity keeps matching newcomers out of its domain too.
//!
//! PreFilter counts, per topology pair (`zone=a`), the pods matching the incoming pod's
//! terms and the existing pods whose anti-affinity matches the incoming pod; Filter then
//! reads the node's pairs. Score sums weights of preferred terms (both directions, plus
//! `hardPodAffinityWeight` for existing pods' required affinity) per pair, min-max scaled.

use std::collections::HashMap;
use std::sync::Arc;

use crate::framework::{
    ClusterEvent, Ctx, CycleState, Plugin, Point, Status, MAX_NODE_SCORE, POD_AND_NODE_EVENTS,
};
use crate::node_info::{AffinityTerm, NodeInfo, PodInfo};

type Pair = (String, String);

pub struct InterPodAffinity {
    /// `InterPodAffinityArgs.hardPodAffinityWeight` (default 1).
    pub hard_pod_affinity_weight: i64,
}

impl Default for InterPodAffinity {
    fn default() -> Self {
        Self {
            hard_pod_affinity_weight: 1,
        }
    }
}

#[derive(Clone, Default)]
struct FilterState {
    /// Existing pods whose required anti-affinity matches the incoming pod.
    existing_anti: HashMap<Pair, i64>,
    /// Pods matching all of the incoming pod's required affinity terms.
    affinity: HashMap<Pair, i64>,
    /// Pods matching one of the incoming pod's required anti-affinity terms.
    anti: HashMap<Pair, i64>,
}

fn pair(term: &AffinityTerm, node: &NodeInfo) -> Option<Pair> {
    node.labels
        .get(&term.topology_key)
        .map(|value| (term.topology_key.clone(), value.clone()))
}

fn bump(counts: &mut HashMap<Pair, i64>, key: Pair, delta: i64) {
    let count = counts.entry(key.clone()).or_default();
    *count += delta;
    if *count <= 0 {
        counts.remove(&key);
    }
}

impl InterPodAffinity {
    /// Adds (`delta` 1) or removes (-1) one existing pod's contribution to the counts.
    fn count(
        &self,
        state: &mut FilterState,
        ctx: &Ctx,
        existing: &PodInfo,
        node: &NodeInfo,
        delta: i64,
    ) {
        let labels = ctx.namespace_labels;
        for term in &existing.affinity.required_anti_affinity {
            if term.matches(ctx.pod, labels) {
                if let Some(p) = pair(term, node) {
                    bump(&mut state.existing_anti, p, delta);
                }
            }
        }
        let incoming = &ctx.pod.affinity;
        if !incoming.required_affinity.is_empty()
            && incoming
                .required_affinity
                .iter()
                .all(|t| t.matches(existing, labels))
        {
            for term in &incoming.required_affinity {
                if let Some(p) = pair(term, node) {
                    bump(&mut state.affinity, p, delta);
                }
            }
        }
        for term in &incoming.required_anti_affinity {
            if term.matches(existing, labels) {
                if let Some(p) = pair(term, node) {
                    bump(&mut state.anti, p, delta);
                }
            }
        }
    }
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
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
        let incoming = &ctx.pod.affinity;
        let needs_all =
            !incoming.required_affinity.is_empty() || !incoming.required_anti_affinity.is_empty();
        if !needs_all && ctx.snapshot.with_required_anti_affinity.is_empty() {
            return Status::skip();
        }
        let mut counts = FilterState::default();
        let mut visit = |node: &NodeInfo| {
            for existing in &node.pods {
                self.count(&mut counts, ctx, existing, node, 1);
            }
        };
        if needs_all {
            ctx.snapshot.nodes.iter().for_each(|n| visit(n));
        } else {
            for &i in &ctx.snapshot.with_required_anti_affinity {
                visit(&ctx.snapshot.nodes[i]);
            }
        }
        state.write(self.name(), counts);
        Status::success()
    }

    fn add_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, node: &NodeInfo) {
        if let Some(mut counts) = state
            .read_mut::<FilterState>(self.name())
            .map(std::mem::take)
        {
            self.count(&mut counts, ctx, pod, node, 1);
            state.write(self.name(), counts);
        }
    }

    fn remove_pod(&self, state: &mut CycleState, ctx: &Ctx, pod: &PodInfo, node: &NodeInfo) {
        if let Some(mut counts) = state
            .read_mut::<FilterState>(self.name())
            .map(std::mem::take)
        {
            self.count(&mut counts, ctx, pod, node, -1);
            state.write(self.name(), counts);
        }
    }

    fn filter(&self, state: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let Some(counts) = state.read::<FilterState>(self.name()) else {
            return Status::success();
        };
        // upstream's order: affinity, then the pod's anti-affinity, then existing pods'.
        let on_node = |counts: &HashMap<Pair, i64>| {
            node.labels
                .iter()
                .any(|(k, v)| counts.get(&(k.clone(), v.clone())).is_some_and(|c| *c > 0))
        };
        let incoming = &ctx.pod.affinity;
        let mut satisfied = true;
        for term in &incoming.required_affinity {
            match pair(term, node) {
                None => return Status::unresolvable("node(s) didn't match pod affinity rules"),
                Some(p) => {
                    if counts.affinity.get(&p).is_none_or(|c| *c <= 0) {
                        satisfied = false;
                        break;
                    }
                }
            }
        }
        if !satisfied {
            // The first pod of a group that wants to be with its own kind may go anywhere.
            let first_of_its_kind = counts.affinity.is_empty()
                && incoming
                    .required_affinity
                    .iter()
                    .all(|t| t.matches(ctx.pod, ctx.namespace_labels));
            if !first_of_its_kind {
                return Status::unresolvable("node(s) didn't match pod affinity rules");
            }
        }
        for term in &incoming.required_anti_affinity {
            if pair(term, node).is_some_and(|p| counts.anti.get(&p).is_some_and(|c| *c > 0)) {
                return Status::unschedulable("node(s) didn't match pod anti-affinity rules");
            }
        }
        if !counts.existing_anti.is_empty() && on_node(&counts.existing_anti) {
            return Status::unschedulable(
                "node(s) didn't satisfy existing pods anti-affinity rules",
            );
        }
        Status::success()
    }

    fn pre_score(&self, state: &mut CycleState, ctx: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        let incoming = &ctx.pod.affinity;
        let incoming_prefers =
            !incoming.preferred_affinity.is_empty() || !incoming.preferred_anti_affinity.is_empty();
        if !incoming_prefers && ctx.snapshot.with_affinity.is_empty() {
            return Status::skip();
        }
        let labels = ctx.namespace_labels;
        let mut scores: HashMap<Pair, i64> = HashMap::new();
        let mut add = |term: &AffinityTerm, node: &NodeInfo, weight: i64| {
            if let Some(p) = pair(term, node) {
                *scores.entry(p).or_default() += weight;
            }
        };
        let mut visit = |node: &NodeInfo| {
            for existing in &node.pods {
                for t in &incoming.preferred_affinity {
                    if t.matches(existing, labels) {
                        add(t, node, i64::from(t.weight));
                    }
                }
                for t in &incoming.preferred_anti_affinity {
                    if t.matches(existing, labels) {
                        add(t, node, -i64::from(t.weight));
                    }
                }
                if self.hard_pod_affinity_weight > 0 {
                    for t in &existing.affinity.required_affinity {
                        if t.matches(ctx.pod, labels) {
                            add(t, node, self.hard_pod_affinity_weight);
                        }
                    }
                }
                for t in &existing.affinity.preferred_affinity {
                    if t.matches(ctx.pod, labels) {
                        add(t, node, i64::from(t.weight));
                    }
                }
                for t in &existing.affinity.preferred_anti_affinity {
                    if t.matches(ctx.pod, labels) {
                        add(t, node, -i64::from(t.weight));
                    }
                }
            }
        };
        if incoming_prefers {
            ctx.snapshot.nodes.iter().for_each(|n| visit(n));
        } else {
            for &i in &ctx.snapshot.with_affinity {
                visit(&ctx.snapshot.nodes[i]);
            }
        }
        state.write(self.name(), scores);
        Status::success()
    }

    fn score(&self, state: &CycleState, _: &Ctx, node: &NodeInfo) -> i64 {
        let Some(scores) = state.read::<HashMap<Pair, i64>>(self.name()) else {
            return 0;
        };
        scores
            .iter()
            .filter(|((key, value), _)| node.labels.get(key) == Some(value))
            .map(|(_, score)| *score)
            .sum()
    }

    fn normalize(&self, _: &CycleState, _: &Ctx, _: &[Arc<NodeInfo>], scores: &mut [i64]) {
        let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
            return;
        };
        let spread = max - min;
        for score in scores.iter_mut() {
            *score = if spread > 0 {
                MAX_NODE_SCORE * (*score - min) / spread
            } else {
                0
            };
        }
    }
}
