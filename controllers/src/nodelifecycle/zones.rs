//! Eviction rates per zone, as upstream's node lifecycle controller sets them. Nodes are
//! grouped by their region and zone labels; a zone is `FullDisruption` when none of its nodes
//! is Ready, `PartialDisruption` when more than two are not Ready and they are at least
//! `--unhealthy-zone-threshold` (55%) of it, else `Normal`. New `NoExecute` taints are set at
//! `--node-eviction-rate` in a normal or fully disrupted zone, at
//! `--secondary-node-eviction-rate` in a partially disrupted zone larger than
//! `--large-cluster-size-threshold` nodes, and not at all in a smaller one. When every zone is
//! fully disrupted the trouble is more likely this controller's own connection than the
//! nodes: no node is tainted or evicted, and the `NoExecute` taints already set are lifted.

use std::borrow::Borrow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;

use super::health::ready_status;

/// The zone a node is in: its region and zone labels (the GA ones, else the beta ones), as
/// one key (upstream's `region:\0:zone`); nodes without them share the empty zone.
pub fn zone_of(node: &Node) -> String {
    let labels = node.labels();
    let label = |ga: &str, beta: &str| {
        labels
            .get(ga)
            .or_else(|| labels.get(beta))
            .cloned()
            .unwrap_or_default()
    };
    let region = label(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    let zone = label(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\0:{zone}")
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// The rates and thresholds of the zone states.
#[derive(Clone, Copy, Debug)]
pub struct ZoneSettings {
    /// `--node-eviction-rate`: nodes a second in a healthy (or fully disrupted) zone.
    pub eviction_rate: f64,
    /// `--secondary-node-eviction-rate`: nodes a second in a large partially disrupted zone.
    pub secondary_eviction_rate: f64,
    /// `--unhealthy-zone-threshold`: the share of not-Ready nodes that makes a zone partially
    /// disrupted.
    pub unhealthy_zone_threshold: f64,
    /// `--large-cluster-size-threshold`: a partially disrupted zone of at most this many nodes
    /// gets no new taints.
    pub large_cluster_size_threshold: usize,
}

impl Default for ZoneSettings {
    fn default() -> Self {
        Self {
            eviction_rate: 0.1,
            secondary_eviction_rate: 0.01,
            unhealthy_zone_threshold: 0.55,
            large_cluster_size_threshold: 50,
        }
    }
}

/// A zone's state from its nodes' readiness.
pub fn state(ready: usize, not_ready: usize, threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / (ready + not_ready) as f64 >= threshold {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// Nodes a second that may get a new `NoExecute` taint in a zone of `size` nodes.
pub fn rate(settings: &ZoneSettings, state: ZoneState, size: usize) -> f64 {
    match state {
        ZoneState::Normal | ZoneState::FullDisruption => settings.eviction_rate,
        ZoneState::PartialDisruption if size > settings.large_cluster_size_threshold => {
            settings.secondary_eviction_rate
        }
        ZoneState::PartialDisruption => 0.0,
    }
}

/// Every zone's state and size.
#[derive(Debug, Default, PartialEq)]
pub struct Census {
    pub zones: BTreeMap<String, (ZoneState, usize)>,
}

impl Census {
    pub fn take(nodes: &[impl Borrow<Node>], threshold: f64) -> Self {
        let mut counts: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for node in nodes {
            let node = node.borrow();
            let (ready, not_ready) = counts.entry(zone_of(node)).or_default();
            if ready_status(node) == Some("True") {
                *ready += 1;
            } else {
                *not_ready += 1;
            }
        }
        let zones = counts
            .into_iter()
            .map(|(zone, (ready, not_ready))| {
                (
                    zone,
                    (state(ready, not_ready, threshold), ready + not_ready),
                )
            })
            .collect();
        Self { zones }
    }

    /// Whether every zone is fully disrupted (no node Ready anywhere): this controller is
    /// more likely cut off than every node down.
    pub fn all_disrupted(&self) -> bool {
        !self.zones.is_empty()
            && self
                .zones
                .values()
                .all(|(state, _)| *state == ZoneState::FullDisruption)
    }

    /// The new-taint rate of `zone` (0 when every zone is fully disrupted).
    pub fn rate(&self, settings: &ZoneSettings, zone: &str) -> f64 {
        if self.all_disrupted() {
            return 0.0;
        }
        self.zones
            .get(zone)
            .map_or(settings.eviction_rate, |(state, size)| {
                rate(settings, *state, *size)
            })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>, ready: &str) -> Node {
        let mut labels = json!({});
        if let Some(zone) = zone {
            labels = json!({"topology.kubernetes.io/region": "r1",
                "topology.kubernetes.io/zone": zone});
        }
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels},
            "status": {"conditions": [{"type": "Ready", "status": ready}]},
        }))
        .unwrap()
    }

    #[test]
    fn zones_come_from_region_and_zone_labels_ga_before_beta() {
        assert_eq!(zone_of(&node("a", Some("z1"), "True")), "r1:\0:z1");
        assert_eq!(zone_of(&node("a", None, "True")), "");
        let beta: Node = serde_json::from_value(json!({"metadata": {"name": "b", "labels": {
            "failure-domain.beta.kubernetes.io/zone": "old",
            "topology.kubernetes.io/zone": "new"}}}))
        .unwrap();
        assert_eq!(zone_of(&beta), ":\0:new");
    }

    #[test]
    fn zone_states_follow_upstreams_thresholds() {
        assert_eq!(state(3, 0, 0.55), ZoneState::Normal);
        assert_eq!(state(0, 1, 0.55), ZoneState::FullDisruption);
        assert_eq!(state(0, 0, 0.55), ZoneState::Normal);
        // Two not-Ready nodes are never a partial disruption, however small the zone.
        assert_eq!(state(1, 2, 0.55), ZoneState::Normal);
        assert_eq!(state(2, 3, 0.55), ZoneState::PartialDisruption);
        assert_eq!(state(3, 3, 0.55), ZoneState::Normal);
        assert_eq!(state(45, 55, 0.55), ZoneState::PartialDisruption);
    }

    #[test]
    fn rates_slow_down_in_a_partially_disrupted_zone_and_stop_in_a_small_one() {
        let settings = ZoneSettings::default();
        assert_eq!(rate(&settings, ZoneState::Normal, 10), 0.1);
        assert_eq!(rate(&settings, ZoneState::FullDisruption, 10), 0.1);
        assert_eq!(rate(&settings, ZoneState::PartialDisruption, 51), 0.01);
        assert_eq!(rate(&settings, ZoneState::PartialDisruption, 50), 0.0);
    }

    #[test]
    fn a_cluster_with_no_ready_node_stops_evicting() {
        let settings = ZoneSettings::default();
        let mut nodes = vec![
            node("a1", Some("a"), "Unknown"),
            node("b1", Some("b"), "False"),
            node("b2", Some("b"), "Unknown"),
        ];
        let census = Census::take(&nodes, 0.55);
        assert!(census.all_disrupted());
        assert_eq!(census.rate(&settings, "r1:\0:a"), 0.0);
        // One Ready node elsewhere: the fully disrupted zones evict at the normal rate again.
        nodes.push(node("c1", Some("c"), "True"));
        let census = Census::take(&nodes, 0.55);
        assert!(!census.all_disrupted());
        assert_eq!(
            census.zones.get("r1:\0:a"),
            Some(&(ZoneState::FullDisruption, 1))
        );
        assert_eq!(census.rate(&settings, "r1:\0:a"), 0.1);
        assert_eq!(census.rate(&settings, "r1:\0:c"), 0.1);
    }

    #[test]
    fn a_large_zone_mostly_down_evicts_at_the_secondary_rate() {
        let settings = ZoneSettings::default();
        let mut nodes: Vec<Node> = (0..60)
            .map(|i| {
                node(
                    &format!("n{i}"),
                    Some("big"),
                    if i < 40 { "Unknown" } else { "True" },
                )
            })
            .collect();
        nodes.push(node("other", Some("small"), "True"));
        let census = Census::take(&nodes, 0.55);
        assert_eq!(
            census.zones.get("r1:\0:big"),
            Some(&(ZoneState::PartialDisruption, 60))
        );
        assert_eq!(census.rate(&settings, "r1:\0:big"), 0.01);
        assert_eq!(census.rate(&settings, "r1:\0:small"), 0.1);
    }
}
