//! NodeResourcesFit (does the pod's request fit what is left of the node's allocatable, and
//! how full would it leave the node: LeastAllocated, MostAllocated or a
//! RequestedToCapacityRatio shape) and NodeResourcesBalancedAllocation (prefer nodes whose
//! CPU and memory would be used in equal shares).

use std::sync::Arc;

use crate::framework::{ClusterEvent, Ctx, CycleState, Plugin, Point, Status, MAX_NODE_SCORE};
use crate::node_info::NodeInfo;
use crate::resources::Resources;

/// How NodeResourcesFit scores (`scoringStrategy.type`).
#[derive(Clone, Debug, PartialEq)]
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// Utilization (0–100) → score (0–10) points, linearly between them.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// NodeResourcesFit's arguments.
#[derive(Clone, Debug)]
pub struct FitArgs {
    pub strategy: Strategy,
    /// Resources scored, with weights (default cpu and memory, 1 each).
    pub resources: Vec<(String, i64)>,
    /// Extended resources the filter does not check.
    pub ignored_resources: Vec<String>,
}

impl Default for FitArgs {
    fn default() -> Self {
        Self {
            strategy: Strategy::LeastAllocated,
            resources: vec![("cpu".into(), 1), ("memory".into(), 1)],
            ignored_resources: Vec::new(),
        }
    }
}

pub struct NodeResourcesFit {
    pub args: FitArgs,
}

/// The reasons a node is short, in upstream's words.
pub fn insufficient(pod: &Resources, node: &NodeInfo, ignored: &[String]) -> Vec<String> {
    let mut reasons = Vec::new();
    if node.pods.len() as i64 + 1 > node.allocatable.pods {
        reasons.push("Too many pods".to_string());
    }
    if pod.is_zero() {
        return reasons;
    }
    let free = |name: &str| node.allocatable.get(name) - node.requested.get(name);
    for (name, asked) in [
        ("cpu", pod.milli_cpu),
        ("memory", pod.memory),
        ("ephemeral-storage", pod.ephemeral_storage),
    ] {
        if asked > 0 && asked > free(name) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    for (name, asked) in &pod.scalar {
        if *asked > 0 && !ignored.contains(name) && *asked > free(name) {
            reasons.push(format!("Insufficient {name}"));
        }
    }
    reasons
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        "NodeResourcesFit"
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
        &[
            ClusterEvent::AssignedPodDeleted,
            ClusterEvent::AssignedPodChanged,
            ClusterEvent::NodeAdded,
            ClusterEvent::NodeChanged,
        ]
    }
    fn pre_filter(&self, _: &mut CycleState, _: &Ctx) -> Status {
        Status::success()
    }
    fn filter(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        let reasons = insufficient(&ctx.pod.requests, node, &self.args.ignored_resources);
        if reasons.is_empty() {
            Status::success()
        } else {
            Status::new(crate::framework::Code::Unschedulable, reasons)
        }
    }
    fn pre_score(&self, _: &mut CycleState, _: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        Status::success()
    }
    fn score(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> i64 {
        let mut total = 0;
        let mut weights = 0;
        for (name, weight) in &self.args.resources {
            let capacity = node.allocatable.get(name);
            let requested = node.non_zero_requested.get(name) + ctx.pod.non_zero_requests.get(name);
            let score = match &self.args.strategy {
                Strategy::LeastAllocated => least_allocated(requested, capacity),
                Strategy::MostAllocated => most_allocated(requested, capacity),
                Strategy::RequestedToCapacityRatio(shape) => {
                    ratio_score(shape, requested, capacity)
                }
            };
            total += score * weight;
            weights += weight;
        }
        if weights == 0 {
            0
        } else {
            total / weights
        }
    }
}

fn least_allocated(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

fn most_allocated(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// The shape's score (given 0–10, scaled to 0–100) at the node's utilization.
fn ratio_score(shape: &[(i64, i64)], requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || shape.is_empty() {
        return 0;
    }
    let utilization = (requested * 100 / capacity).min(100);
    let scaled: Vec<(i64, i64)> = shape
        .iter()
        .map(|&(u, s)| (u, s * MAX_NODE_SCORE / 10))
        .collect();
    if utilization <= scaled[0].0 {
        return scaled[0].1;
    }
    for pair in scaled.windows(2) {
        let ((u0, s0), (u1, s1)) = (pair[0], pair[1]);
        if utilization <= u1 {
            return s0 + (s1 - s0) * (utilization - u0) / (u1 - u0).max(1);
        }
    }
    scaled[scaled.len() - 1].1
}

/// Prefers nodes whose resources would be used evenly.
pub struct BalancedAllocation {
    pub resources: Vec<String>,
}

impl Default for BalancedAllocation {
    fn default() -> Self {
        Self {
            resources: vec!["cpu".into(), "memory".into()],
        }
    }
}

impl Plugin for BalancedAllocation {
    fn name(&self) -> &'static str {
        "NodeResourcesBalancedAllocation"
    }
    fn points(&self) -> &'static [Point] {
        &[Point::PreScore, Point::Score]
    }
    fn pre_score(&self, _: &mut CycleState, _: &Ctx, _: &[Arc<NodeInfo>]) -> Status {
        Status::success()
    }
    fn score(&self, _: &CycleState, ctx: &Ctx, node: &NodeInfo) -> i64 {
        // Two passes over the resources (mean, then variance): no allocation per node.
        let fraction = |name: &String| {
            let capacity = node.allocatable.get(name);
            (capacity > 0).then(|| {
                let requested = node.requested.get(name) + ctx.pod.requests.get(name);
                (requested as f64 / capacity as f64).min(1.0)
            })
        };
        let (sum, count) = self
            .resources
            .iter()
            .filter_map(fraction)
            .fold((0.0, 0usize), |(s, n), f| (s + f, n + 1));
        if count == 0 {
            return 0;
        }
        let mean = sum / count as f64;
        let variance = self
            .resources
            .iter()
            .filter_map(fraction)
            .map(|f| (f - mean).powi(2))
            .sum::<f64>()
            / count as f64;
        ((1.0 - variance.sqrt()) * MAX_NODE_SCORE as f64) as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn least_and_most_allocated_as_upstream() {
        // 4 CPUs, 1 requested: 75 free.
        assert_eq!(least_allocated(1000, 4000), 75);
        assert_eq!(most_allocated(1000, 4000), 25);
        assert_eq!(least_allocated(5000, 4000), 0);
        assert_eq!(most_allocated(5000, 4000), 100);
        assert_eq!(least_allocated(1, 0), 0);
    }

    #[test]
    fn requested_to_capacity_ratio_interpolates_the_shape() {
        let shape = [(0, 10), (100, 0)];
        assert_eq!(ratio_score(&shape, 0, 100), 100);
        assert_eq!(ratio_score(&shape, 50, 100), 50);
        assert_eq!(ratio_score(&shape, 100, 100), 0);
        let bin_packing = [(0, 0), (100, 10)];
        assert_eq!(ratio_score(&bin_packing, 30, 100), 30);
    }
}
