//! A profile: one `schedulerName`'s plugins per extension point, their score weights, and
//! how many nodes it looks at; and running the per-node points (Filter, Score) over it.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use super::{ClusterEvent, Ctx, CycleState, Plugin, Point, PreBindAction, Status};
use crate::node_info::NodeInfo;

/// The plugins of one scheduler name.
pub struct Profile {
    pub scheduler_name: String,
    /// Per point (indexed by `point as usize`, which is its place in [`Point::ALL`]), the
    /// plugins in order.
    plugins: Vec<Vec<Arc<dyn Plugin>>>,
    weights: HashMap<&'static str, i64>,
    /// `percentageOfNodesToScore` (0: upstream's adaptive default).
    pub percentage_of_nodes_to_score: u32,
}

impl Profile {
    /// `enabled`: per point, the plugins in order, with the score weight of each.
    pub fn new(
        scheduler_name: String,
        mut enabled: HashMap<Point, Vec<Arc<dyn Plugin>>>,
        weights: HashMap<&'static str, i64>,
        percentage_of_nodes_to_score: u32,
    ) -> Self {
        Self {
            scheduler_name,
            plugins: Point::ALL
                .iter()
                .map(|point| enabled.remove(point).unwrap_or_default())
                .collect(),
            weights,
            percentage_of_nodes_to_score,
        }
    }

    pub fn at(&self, point: Point) -> &[Arc<dyn Plugin>] {
        self.plugins
            .get(point as usize)
            .map(Vec::as_slice)
            .unwrap_or_default()
    }

    /// The names of the plugins at `point`, in order (for logs and tests).
    pub fn names_at(&self, point: Point) -> Vec<&'static str> {
        self.at(point).iter().map(|p| p.name()).collect()
    }

    pub fn weight(&self, plugin: &str) -> i64 {
        self.weights.get(plugin).copied().unwrap_or(1)
    }

    /// The plugins that care about `event` (a pod one of them rejected may now fit).
    pub fn plugins_for(&self, event: ClusterEvent) -> HashSet<&'static str> {
        let mut names = HashSet::new();
        for plugins in &self.plugins {
            for plugin in plugins {
                if plugin.events().contains(&event) {
                    names.insert(plugin.name());
                }
            }
        }
        names
    }

    /// PreEnqueue: the first plugin that keeps the pod out, if any.
    pub fn pre_enqueue(&self, pod: &crate::node_info::PodInfo) -> Status {
        for plugin in self.at(Point::PreEnqueue) {
            let status = plugin.pre_enqueue(pod);
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// PreFilter: every plugin; the first rejection or error ends it.
    pub fn pre_filter(&self, state: &mut CycleState, ctx: &Ctx) -> Status {
        for plugin in self.at(Point::PreFilter) {
            let status = plugin.pre_filter(state, ctx);
            if status.is_skip() {
                state.skip_filter.insert(plugin.name());
            } else if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// Filter on one node: the first plugin to reject decides.
    pub fn filter(&self, state: &CycleState, ctx: &Ctx, node: &NodeInfo) -> Status {
        for plugin in self.at(Point::Filter) {
            if state.skip_filter.contains(plugin.name()) {
                continue;
            }
            let status = plugin.filter(state, ctx, node);
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// PreFilter state as if `pod` joined `node`.
    pub fn add_pod(
        &self,
        state: &mut CycleState,
        ctx: &Ctx,
        pod: &crate::node_info::PodInfo,
        node: &NodeInfo,
    ) {
        for plugin in self.at(Point::PreFilter) {
            if !state.skip_filter.contains(plugin.name()) {
                plugin.add_pod(state, ctx, pod, node);
            }
        }
    }

    /// PreFilter state as if `pod` left `node`.
    pub fn remove_pod(
        &self,
        state: &mut CycleState,
        ctx: &Ctx,
        pod: &crate::node_info::PodInfo,
        node: &NodeInfo,
    ) {
        for plugin in self.at(Point::PreFilter) {
            if !state.skip_filter.contains(plugin.name()) {
                plugin.remove_pod(state, ctx, pod, node);
            }
        }
    }

    /// Reserve on the chosen node: every plugin's PreBind writes, or the first failure.
    pub fn reserve(
        &self,
        state: &CycleState,
        ctx: &Ctx,
        node: &NodeInfo,
    ) -> Result<Vec<PreBindAction>, Status> {
        let mut actions = Vec::new();
        for plugin in self.at(Point::Reserve) {
            match plugin.reserve(state, ctx, node) {
                Ok(more) => actions.extend(more),
                Err(status) => {
                    self.unreserve(ctx);
                    return Err(status.with_plugin(plugin.name()));
                }
            }
        }
        Ok(actions)
    }

    /// Unreserve: every Reserve plugin forgets its promises for the pod.
    pub fn unreserve(&self, ctx: &Ctx) {
        for plugin in self.at(Point::Reserve) {
            plugin.unreserve(ctx);
        }
    }

    /// Whether any PostFilter plugin exists (preemption).
    pub fn has_post_filter(&self) -> bool {
        !self.at(Point::PostFilter).is_empty()
    }
}
