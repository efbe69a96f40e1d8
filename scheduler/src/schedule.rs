//! One scheduling cycle's algorithm, pure and synchronous: find the nodes that pass every
//! filter (in parallel, starting where the last cycle stopped, and stopping after
//! upstream's adaptive number of feasible nodes), score them, pick the best (ties broken at
//! random), or explain why no node fits in upstream's words.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rand::Rng;
use rayon::prelude::*;

use crate::framework::{Ctx, CycleState, Point, Profile, Status};
use crate::node_info::NodeInfo;

/// Below this many nodes every node is considered; never fewer than this are looked for.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The adaptive percentage never goes below this.
pub const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// How many feasible nodes to look for among `total` (upstream's `numFeasibleNodesToFind`).
pub fn feasible_nodes_to_find(percentage: u32, total: usize) -> usize {
    if total < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return total;
    }
    let percentage = if percentage == 0 {
        (50usize.saturating_sub(total / 125)).max(MIN_FEASIBLE_NODES_PERCENTAGE)
    } else {
        percentage as usize
    };
    (total * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why a pod fits nowhere.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    pub total_nodes: usize,
    /// Each rejected node's status.
    pub nodes: Vec<(Arc<NodeInfo>, Status)>,
    /// A PreFilter rejection (then no node was filtered).
    pub pre_filter: Option<Status>,
    /// The plugins that rejected the pod somewhere (they decide what can wake it).
    pub plugins: HashSet<&'static str>,
    /// Appended after the filters' message (preemption's outcome).
    pub post_filter_message: Option<String>,
}

impl Diagnosis {
    /// `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {…}.`
    pub fn message(&self) -> String {
        if self.total_nodes == 0 {
            return "no nodes available to schedule pods".into();
        }
        let mut text = match &self.pre_filter {
            Some(status) => format!(
                "0/{} nodes are available: {}.",
                self.total_nodes,
                status.reasons.join(", ")
            ),
            None => histogram_message(
                self.total_nodes,
                self.nodes
                    .iter()
                    .flat_map(|(_, s)| s.reasons.iter().cloned()),
            ),
        };
        if let Some(post) = &self.post_filter_message {
            text.push(' ');
            text.push_str(post);
        }
        text
    }
}

/// `0/N nodes are available: <count reason, …>.` with the entries sorted as upstream does.
pub fn histogram_message(total: usize, reasons: impl Iterator<Item = String>) -> String {
    let mut histogram: BTreeMap<String, usize> = BTreeMap::new();
    for reason in reasons {
        *histogram.entry(reason).or_default() += 1;
    }
    let mut parts: Vec<String> = histogram.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{total} nodes are available: {}.", parts.join(", "))
}

/// Where a pod goes.
#[derive(Debug)]
pub struct Placement {
    pub node: String,
    pub evaluated: usize,
    pub feasible: usize,
}

/// The cycle-to-cycle part of the algorithm: where the next search starts.
#[derive(Default)]
pub struct Algorithm {
    next_start: usize,
}

/// Runs Filter on `node`, counting the nominated pods of at least the pod's priority as
/// if already there (they were promised the room by preemption).
pub fn filter_with_nominated(
    profile: &Profile,
    state: &CycleState,
    ctx: &Ctx,
    node: &Arc<NodeInfo>,
) -> Status {
    if ctx.snapshot.nominated.is_empty() {
        return profile.filter(state, ctx, node);
    }
    let nominated: Vec<_> = ctx
        .snapshot
        .nominated
        .get(&node.name)
        .into_iter()
        .flatten()
        .filter(|p| p.uid != ctx.pod.uid && p.priority >= ctx.pod.priority)
        .collect();
    if nominated.is_empty() {
        return profile.filter(state, ctx, node);
    }
    let mut with = NodeInfo::clone(node);
    let mut with_state = state.clone();
    for pod in nominated {
        with.add_pod(pod.clone());
        profile.add_pod(&mut with_state, ctx, pod, &with);
    }
    let status = profile.filter(&with_state, ctx, &with);
    if !status.is_success() {
        return status;
    }
    profile.filter(state, ctx, node)
}

impl Algorithm {
    /// Schedules `ctx.pod` with `profile`: the chosen node, or why none.
    pub fn schedule(
        &mut self,
        profile: &Profile,
        state: &mut CycleState,
        ctx: &Ctx,
    ) -> Result<Placement, Box<Diagnosis>> {
        let nodes = &ctx.snapshot.nodes;
        let mut diagnosis = Box::new(Diagnosis {
            total_nodes: nodes.len(),
            ..Default::default()
        });
        if nodes.is_empty() {
            return Err(diagnosis);
        }
        let status = profile.pre_filter(state, ctx);
        if !status.is_success() {
            diagnosis.plugins.insert(status.plugin);
            diagnosis.pre_filter = Some(status);
            return Err(diagnosis);
        }
        // A pod nominated by preemption tries its nominated node first.
        let nominated = ctx
            .pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        if let Some(node) = nominated.and_then(|name| ctx.snapshot.get(name)) {
            if filter_with_nominated(profile, state, ctx, node).is_success() {
                return Ok(Placement {
                    node: node.name.clone(),
                    evaluated: 1,
                    feasible: 1,
                });
            }
        }
        let feasible = self.find_feasible(profile, state, ctx, &mut diagnosis);
        if feasible.is_empty() {
            return Err(diagnosis);
        }
        let evaluated = feasible.len() + diagnosis.nodes.len();
        if feasible.len() == 1 {
            return Ok(Placement {
                node: feasible[0].name.clone(),
                evaluated,
                feasible: 1,
            });
        }
        let scores = score(profile, state, ctx, &feasible);
        Ok(Placement {
            node: pick(&feasible, &scores),
            evaluated,
            feasible: feasible.len(),
        })
    }

    fn find_feasible(
        &mut self,
        profile: &Profile,
        state: &CycleState,
        ctx: &Ctx,
        diagnosis: &mut Diagnosis,
    ) -> Vec<Arc<NodeInfo>> {
        let nodes = &ctx.snapshot.nodes;
        let total = nodes.len();
        let wanted = feasible_nodes_to_find(profile.percentage_of_nodes_to_score, total);
        let start = self.next_start % total;
        let chunk = (wanted / 2).clamp(16, 512);
        let mut feasible = Vec::new();
        let mut processed = 0;
        while processed < total && feasible.len() < wanted {
            let end = (processed + chunk).min(total);
            let results: Vec<(usize, Status)> = (processed..end)
                .into_par_iter()
                .map(|i| {
                    let index = (start + i) % total;
                    (
                        index,
                        filter_with_nominated(profile, state, ctx, &nodes[index]),
                    )
                })
                .collect();
            for (index, status) in results {
                if status.is_success() {
                    if feasible.len() < wanted {
                        feasible.push(nodes[index].clone());
                    }
                } else {
                    diagnosis.plugins.insert(status.plugin);
                    diagnosis.nodes.push((nodes[index].clone(), status));
                }
            }
            processed = end;
        }
        self.next_start = (start + processed) % total;
        feasible
    }
}

/// Each feasible node's total: every Score plugin's normalized score times its weight.
pub fn score(
    profile: &Profile,
    state: &mut CycleState,
    ctx: &Ctx,
    feasible: &[Arc<NodeInfo>],
) -> Vec<i64> {
    let mut scorers = Vec::new();
    for plugin in profile.at(Point::Score) {
        if profile
            .at(Point::PreScore)
            .iter()
            .any(|p| p.name() == plugin.name())
        {
            let status = plugin.pre_score(state, ctx, feasible);
            if status.is_skip() {
                continue;
            }
        }
        scorers.push(plugin.clone());
    }
    let state: &CycleState = state;
    let width = scorers.len();
    // One flat row-major table (node × plugin): no allocation per node.
    let raw: Vec<i64> = feasible
        .par_iter()
        .flat_map_iter(|node| scorers.iter().map(move |p| p.score(state, ctx, node)))
        .collect();
    let mut totals = vec![0i64; feasible.len()];
    let mut column = vec![0i64; feasible.len()];
    for (i, plugin) in scorers.iter().enumerate() {
        for (slot, row) in column.iter_mut().zip(raw.chunks_exact(width.max(1))) {
            *slot = row[i];
        }
        plugin.normalize(state, ctx, feasible, &mut column);
        let weight = profile.weight(plugin.name());
        for (total, value) in totals.iter_mut().zip(&column) {
            *total += value * weight;
        }
    }
    totals
}

/// The highest-scoring node; among equals, one at random (reservoir sampling).
fn pick(feasible: &[Arc<NodeInfo>], scores: &[i64]) -> String {
    let mut rng = rand::rng();
    let mut best = 0;
    let mut ties = 0;
    for (i, score) in scores.iter().enumerate() {
        if *score > scores[best] {
            best = i;
            ties = 1;
        } else if *score == scores[best] {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = i;
            }
        }
    }
    feasible[best].name.clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_adaptive_percentage_as_upstream() {
        assert_eq!(feasible_nodes_to_find(0, 50), 50);
        assert_eq!(feasible_nodes_to_find(0, 500), 230); // 50 - 4 = 46%
        assert_eq!(feasible_nodes_to_find(0, 5000), 500); // 50 - 40 = 10%
        assert_eq!(feasible_nodes_to_find(0, 15000), 750); // at least 5%
        assert_eq!(feasible_nodes_to_find(0, 150), 100); // never under 100
        assert_eq!(feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(feasible_nodes_to_find(100, 1000), 1000);
    }

    #[test]
    fn the_message_counts_reasons_sorted() {
        let message = histogram_message(
            5,
            [
                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
                "Insufficient cpu",
                "Insufficient cpu",
                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
                "node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }",
            ]
            .into_iter()
            .map(String::from),
        );
        assert_eq!(
            message,
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }."
        );
    }
}
