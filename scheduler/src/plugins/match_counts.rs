//! How many of a node's pods match a selector, remembered from one scheduling cycle to the
//! next. Spreading a pod means counting, on every node, the pods its selector matches — every
//! pod in the cluster, every cycle. A node's count for one (namespace, selector) holds for as
//! long as the node's generation does (the scheduler's cache moves a node's generation, a
//! cluster-wide counter, on every change to it or its pods), and the pods of one workload
//! share their selector and tend to be scheduled one after another, while each binding
//! changes one node: so most counts are reused. The most recent selectors are kept, each
//! with its nodes' counts.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use crate::node_info::NodeInfo;

/// How many (namespace, selector) pairs are remembered, least recently used first out.
const REMEMBERED: usize = 32;

/// A node's count and the generation it was counted at.
type Counts = HashMap<String, (u64, i64)>;

/// Counts per (namespace, selector), kept by a plugin across cycles.
#[derive(Default)]
pub struct MatchCounts {
    recent: Mutex<VecDeque<(String, Counts)>>,
}

impl MatchCounts {
    /// The counts remembered under `key` (which must name the namespace and the selector's
    /// whole content), to be given back with [`Self::keep`] once the cycle is done with them.
    pub fn take(&self, key: &str) -> Remembered {
        let counts = match self.recent.lock() {
            Ok(mut recent) => recent
                .iter()
                .position(|(known, _)| known == key)
                .and_then(|at| recent.remove(at))
                .map(|(_, counts)| counts)
                .unwrap_or_default(),
            Err(_) => Counts::new(),
        };
        Remembered {
            key: key.to_string(),
            counts,
        }
    }

    /// Remembers `counts` as the most recently used.
    pub fn keep(&self, counts: Remembered) {
        if let Ok(mut recent) = self.recent.lock() {
            recent.push_back((counts.key, counts.counts));
            while recent.len() > REMEMBERED {
                recent.pop_front();
            }
        }
    }
}

/// One (namespace, selector)'s counts while a cycle uses them.
pub struct Remembered {
    key: String,
    counts: Counts,
}

impl Remembered {
    /// `node`'s count: the remembered one if the node has not changed since, else `count`'s.
    pub fn on(&mut self, node: &NodeInfo, count: impl FnOnce() -> i64) -> i64 {
        if let Some((generation, known)) = self.counts.get(&node.name) {
            if *generation == node.generation {
                return *known;
            }
        }
        let counted = count();
        self.counts
            .insert(node.name.clone(), (node.generation, counted));
        counted
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use std::sync::Arc;

    fn node(name: &str, generation: u64) -> NodeInfo {
        let mut info = NodeInfo::new(Arc::new(Node::default()));
        info.name = name.to_string();
        info.generation = generation;
        info
    }

    #[test]
    fn a_count_is_reused_until_its_node_changes() {
        let counts = MatchCounts::default();
        let mut remembered = counts.take("ns\0app=web");
        assert_eq!(remembered.on(&node("a", 1), || 3), 3);
        assert_eq!(remembered.on(&node("b", 2), || 5), 5);
        counts.keep(remembered);

        let mut remembered = counts.take("ns\0app=web");
        assert_eq!(remembered.on(&node("a", 1), || panic!("unchanged")), 3);
        assert_eq!(remembered.on(&node("b", 7), || 6), 6, "b changed");
        counts.keep(remembered);
        let mut other = counts.take("ns\0app=db");
        assert_eq!(
            other.on(&node("a", 1), || 0),
            0,
            "another selector counts anew"
        );
        counts.keep(other);
    }

    #[test]
    fn only_the_most_recent_selectors_are_remembered() {
        let counts = MatchCounts::default();
        for n in 0..=REMEMBERED {
            let mut remembered = counts.take(&format!("ns\0app={n}"));
            remembered.on(&node("a", 1), || 1);
            counts.keep(remembered);
        }
        let mut oldest = counts.take("ns\0app=0");
        assert_eq!(oldest.on(&node("a", 1), || 9), 9, "forgotten");
        let mut newest = counts.take(&format!("ns\0app={REMEMBERED}"));
        assert_eq!(newest.on(&node("a", 1), || 9), 1, "remembered");
    }
}
