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
//!
//! A pod that names no constraints of its own gets the profile's default constraints
//! (`PodTopologySpreadArgs`), with the selector upstream deduces from the Services and the
//! controller that select it ([`crate::workloads::default_selector`]); none when nothing
//! selects it. By default (`defaultingType: System`) those are upstream's built-in two,
//! both `ScheduleAnyway`: by hostname with maxSkew 3 and by zone with maxSkew 5 — and a node
//! without a zone label still takes part in the hostname spreading.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use kube::core::{Selector, SelectorExt};
use serde_json::Value;

use crate::framework::{
    ClusterEvent, Ctx, CycleState, Plugin, Point, Status, MAX_NODE_SCORE, POD_AND_NODE_EVENTS,
};
use crate::node_info::{NodeInfo, PodInfo};
use crate::plugins::match_counts::{MatchCounts, Remembered};

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

/// Upstream's built-in default constraints (`defaultingType: System`).
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [
        ("kubernetes.io/hostname", 3),
        ("topology.kubernetes.io/zone", 5),
    ]
    .into_iter()
    .map(|(key, max_skew)| TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        ..TopologySpreadConstraint::default()
    })
    .collect()
}

/// The plugin's arguments (`PodTopologySpreadArgs`).
#[derive(Clone, Debug)]
pub struct SpreadArgs {
    /// For pods that name no constraints of their own (their selector is deduced per pod).
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// The defaults are upstream's built-in ones (`defaultingType: System`).
    pub system_defaulted: bool,
}

impl Default for SpreadArgs {
    fn default() -> Self {
        Self {
            default_constraints: system_default_constraints(),
            system_defaulted: true,
        }
    }
}

impl SpreadArgs {
    /// Reads and checks the arguments as upstream validates them.
    pub fn parse(args: &Value) -> Result<Self, String> {
        let given: Vec<TopologySpreadConstraint> = match &args["defaultConstraints"] {
            Value::Null => Vec::new(),
            list => serde_json::from_value(list.clone())
                .map_err(|e| format!("defaultConstraints: {e}"))?,
        };
        match args["defaultingType"].as_str().unwrap_or("System") {
            "System" if given.is_empty() => Ok(Self::default()),
            "System" => {
                Err("when .defaultingType is \"System\", .defaultConstraints must be empty".into())
            }
            "List" => {
                let mut seen = HashSet::new();
                for (i, c) in given.iter().enumerate() {
                    let at = format!("defaultConstraints[{i}]");
                    if c.max_skew <= 0 {
                        return Err(format!(
                            "{at}.maxSkew: {} must be greater than zero",
                            c.max_skew
                        ));
                    }
                    if c.topology_key.is_empty() {
                        return Err(format!("{at}.topologyKey: required"));
                    }
                    if !matches!(
                        c.when_unsatisfiable.as_str(),
                        "DoNotSchedule" | "ScheduleAnyway"
                    ) {
                        return Err(format!(
                            "{at}.whenUnsatisfiable: {:?} is not DoNotSchedule or ScheduleAnyway",
                            c.when_unsatisfiable
                        ));
                    }
                    if c.label_selector.is_some() {
                        return Err(format!(
                            "{at}.labelSelector: must not be set, the selector is deduced for each pod"
                        ));
                    }
                    if !seen.insert((c.topology_key.clone(), c.when_unsatisfiable.clone())) {
                        return Err(format!(
                            "{at}: a second constraint for topologyKey {:?} and whenUnsatisfiable {:?}",
                            c.topology_key, c.when_unsatisfiable
                        ));
                    }
                }
                Ok(Self {
                    default_constraints: given,
                    system_defaulted: false,
                })
            }
            other => Err(format!(
                "defaultingType: {other:?} is not \"System\" or \"List\""
            )),
        }
    }
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

/// How many of `node`'s pods `c` counts for `incoming`.
fn count_matching(incoming: &PodInfo, c: &Constraint, node: &NodeInfo) -> i64 {
    node.pods
        .iter()
        .filter(|p| c.counts_pod(incoming, p))
        .count() as i64
}

/// Whether `pod` names spread constraints of its own.
fn own_constraints(pod: &PodInfo) -> bool {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The pod's `DoNotSchedule` (`hard`) or `ScheduleAnyway` constraints: its own, or else the
/// defaults with the selector deduced for it.
fn constraints(args: &SpreadArgs, ctx: &Ctx, hard: bool) -> Vec<Constraint> {
    let pod = ctx.pod;
    if own_constraints(pod) {
        return pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|c| Constraint::compile(c, pod))
            .filter(|c| c.hard == hard)
            .collect();
    }
    let defaults: Vec<Constraint> = args
        .default_constraints
        .iter()
        .map(|c| Constraint::compile(c, pod))
        .filter(|c| c.hard == hard)
        .collect();
    if defaults.is_empty() {
        return defaults;
    }
    let Some(selector) = crate::workloads::default_selector(&pod.pod, ctx.workloads) else {
        return Vec::new();
    };
    defaults
        .into_iter()
        .map(|c| Constraint {
            selector: Some(selector.clone()),
            ..c
        })
        .collect()
}

/// Whether `node` takes part in spreading `pod` under `constraints`.
fn node_counts(constraints: &[Constraint], pod: &PodInfo, node: &NodeInfo) -> bool {
    node_has_keys(constraints, node) && node_included(constraints, pod, node)
}

fn node_has_keys(constraints: &[Constraint], node: &NodeInfo) -> bool {
    constraints.iter().all(|c| node.labels.contains_key(&c.key))
}

/// The node inclusion policies (`nodeAffinityPolicy`, `nodeTaintsPolicy`).
fn node_included(constraints: &[Constraint], pod: &PodInfo, node: &NodeInfo) -> bool {
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

#[derive(Default)]
pub struct PodTopologySpread {
    pub args: SpreadArgs,
    /// Matching pods per node and selector, reused while a node does not change.
    pub counts: MatchCounts,
}

/// What [`MatchCounts`] remembers a constraint's counts under: the incoming pod's namespace
/// and the selector's whole content (what [`Constraint::counts_pod`] looks at).
fn counts_key(pod: &PodInfo, c: &Constraint) -> String {
    format!("{}\0{:?}", pod.namespace, c.selector)
}

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
        let constraints = constraints(&self.args, ctx, true);
        if constraints.is_empty() {
            return Status::skip();
        }
        let mut counts = vec![HashMap::<String, i64>::new(); constraints.len()];
        let mut remembered: Vec<Remembered> = constraints
            .iter()
            .map(|c| self.counts.take(&counts_key(ctx.pod, c)))
            .collect();
        for node in &ctx.snapshot.nodes {
            if !node_counts(&constraints, ctx.pod, node) {
                continue;
            }
            for ((c, counts), remembered) in constraints
                .iter()
                .zip(counts.iter_mut())
                .zip(remembered.iter_mut())
            {
                let matching = remembered.on(node, || count_matching(ctx.pod, c, node));
                *counts.entry(node.labels[&c.key].clone()).or_default() += matching;
            }
        }
        for remembered in remembered {
            self.counts.keep(remembered);
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
        let constraints = constraints(&self.args, ctx, false);
        if constraints.is_empty() {
            return Status::skip();
        }
        // Upstream's built-in defaults do not need every key on a node: one without a zone
        // label still spreads by hostname.
        let require_all = own_constraints(ctx.pod) || !self.args.system_defaulted;
        let mut domains: Vec<HashSet<&String>> = vec![HashSet::new(); constraints.len()];
        let mut ignored = HashSet::new();
        for node in feasible {
            if require_all && !node_has_keys(&constraints, node) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (c, seen) in constraints.iter().zip(domains.iter_mut()) {
                if let Some(value) = node.labels.get(&c.key) {
                    seen.insert(value);
                }
            }
        }
        let weights: Vec<f64> = domains
            .iter()
            .map(|d| ((d.len() + 2) as f64).ln())
            .collect();
        let mut counts = vec![BTreeMap::<String, i64>::new(); constraints.len()];
        // Constraints with one selector (the defaults' two) count each node's pods once.
        let same_as: Vec<usize> = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| {
                constraints[..i]
                    .iter()
                    .position(|earlier| earlier.selector == c.selector)
                    .unwrap_or(i)
            })
            .collect();
        let mut matching: Vec<Option<i64>> = vec![None; constraints.len()];
        // One remembered set per distinct selector (the defaults' two share theirs).
        let mut remembered: Vec<Option<Remembered>> = constraints
            .iter()
            .enumerate()
            .map(|(i, c)| (same_as[i] == i).then(|| self.counts.take(&counts_key(ctx.pod, c))))
            .collect();
        for node in &ctx.snapshot.nodes {
            if (require_all && !node_has_keys(&constraints, node))
                || !node_included(&constraints, ctx.pod, node)
            {
                continue;
            }
            matching.fill(None);
            for (i, c) in constraints.iter().enumerate() {
                let Some(value) = node.labels.get(&c.key) else {
                    continue;
                };
                if !domains[i].contains(value) {
                    continue;
                }
                let count = match (matching[same_as[i]], &mut remembered[same_as[i]]) {
                    (Some(count), _) => count,
                    (None, remembered) => {
                        let count = match remembered {
                            Some(remembered) => {
                                remembered.on(node, || count_matching(ctx.pod, c, node))
                            }
                            None => count_matching(ctx.pod, c, node),
                        };
                        matching[same_as[i]] = Some(count);
                        count
                    }
                };
                *counts[i].entry(value.clone()).or_default() += count;
            }
        }
        for remembered in remembered.into_iter().flatten() {
            self.counts.keep(remembered);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn system_defaulting_is_upstreams_two_soft_constraints() {
        for args in [json!(null), json!({}), json!({"defaultingType": "System"})] {
            let parsed = SpreadArgs::parse(&args).expect("valid");
            assert!(parsed.system_defaulted);
            let keys: Vec<_> = parsed
                .default_constraints
                .iter()
                .map(|c| {
                    (
                        c.topology_key.as_str(),
                        c.max_skew,
                        c.when_unsatisfiable.as_str(),
                    )
                })
                .collect();
            assert_eq!(
                keys,
                [
                    ("kubernetes.io/hostname", 3, "ScheduleAnyway"),
                    ("topology.kubernetes.io/zone", 5, "ScheduleAnyway")
                ]
            );
        }
    }

    #[test]
    fn listed_defaults_are_checked_as_upstream_checks_them() {
        let zone = json!({"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule"});
        let listed = SpreadArgs::parse(&json!({"defaultingType": "List",
            "defaultConstraints": [zone.clone()]}))
        .expect("valid");
        assert!(!listed.system_defaulted);
        assert_eq!(listed.default_constraints.len(), 1);
        // An empty list turns default spreading off.
        let none = SpreadArgs::parse(&json!({"defaultingType": "List"})).expect("valid");
        assert!(none.default_constraints.is_empty());

        let refused = |args: serde_json::Value, needle: &str| {
            let error = SpreadArgs::parse(&args).expect_err("refused");
            assert!(error.contains(needle), "{error}");
        };
        refused(
            json!({"defaultConstraints": [zone.clone()]}),
            ".defaultConstraints must be empty",
        );
        let mut selected = zone.clone();
        selected["labelSelector"] = json!({"matchLabels": {"app": "web"}});
        refused(
            json!({"defaultingType": "List", "defaultConstraints": [selected]}),
            "labelSelector",
        );
        let mut skewless = zone.clone();
        skewless["maxSkew"] = json!(0);
        refused(
            json!({"defaultingType": "List", "defaultConstraints": [skewless]}),
            "maxSkew",
        );
        let mut whenever = zone.clone();
        whenever["whenUnsatisfiable"] = json!("Sometimes");
        refused(
            json!({"defaultingType": "List", "defaultConstraints": [whenever]}),
            "whenUnsatisfiable",
        );
        refused(
            json!({"defaultingType": "List", "defaultConstraints": [zone.clone(), zone]}),
            "a second constraint",
        );
        refused(json!({"defaultingType": "Custom"}), "defaultingType");
    }
}
