//! The scheduling framework: plugins at upstream's extension points and what they say.
//!
//! A plugin implements the points it takes part in ([`Plugin::points`]); a [`Profile`]
//! (see `profile`) lists, per point, the enabled plugins in order. One cycle for one pod:
//!
//! ```text
//!   PreEnqueue (may keep it out of the queue) ─▶ pop ─▶ PreFilter ─▶ Filter × nodes (parallel)
//!     ─▶ none fit: PostFilter (preemption) ─▶ back to the queue, FailedScheduling
//!     ─▶ PreScore ─▶ Score × feasible nodes ─▶ NormalizeScore ─▶ × weight ─▶ best node
//!     ─▶ Reserve ─▶ Permit ─▶ assume in the cache ─▶ (async) PreBind ─▶ Bind ─▶ PostBind
//! ```
//!
//! State computed once per cycle (PreFilter's counts, PreScore's sums) lives in a
//! [`CycleState`] under the plugin's name. Plugins whose PreFilter state depends on the pods
//! on nodes (affinity, spreading) also implement [`Plugin::add_pod`]/[`Plugin::remove_pod`],
//! so preemption and nominated pods can ask "what if this pod were (not) there" without
//! recomputing from scratch.

pub mod profile;
pub mod status;

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;

pub use profile::Profile;
pub use status::{Code, Status};

use crate::cache::Snapshot;
use crate::node_info::{NodeInfo, PodInfo};

/// The highest score a plugin gives a node (after normalizing).
pub const MAX_NODE_SCORE: i64 = 100;

/// The extension points (in the order of [`Point::ALL`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Point {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl Point {
    /// The name in `KubeSchedulerConfiguration` plugin sets.
    pub fn config_name(self) -> &'static str {
        match self {
            Point::PreEnqueue => "preEnqueue",
            Point::QueueSort => "queueSort",
            Point::PreFilter => "preFilter",
            Point::Filter => "filter",
            Point::PostFilter => "postFilter",
            Point::PreScore => "preScore",
            Point::Score => "score",
            Point::Reserve => "reserve",
            Point::Permit => "permit",
            Point::PreBind => "preBind",
            Point::Bind => "bind",
            Point::PostBind => "postBind",
        }
    }

    /// Every point, in declaration order (so `Point::ALL[p as usize] == p`).
    pub const ALL: [Point; 12] = [
        Point::PreEnqueue,
        Point::QueueSort,
        Point::PreFilter,
        Point::Filter,
        Point::PostFilter,
        Point::PreScore,
        Point::Score,
        Point::Reserve,
        Point::Permit,
        Point::PreBind,
        Point::Bind,
        Point::PostBind,
    ];
}

/// Cluster changes that can make a pod a plugin rejected schedulable again.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    NodeAdded,
    NodeChanged,
    AssignedPodAdded,
    AssignedPodChanged,
    AssignedPodDeleted,
    /// A PersistentVolumeClaim was added or changed.
    ClaimChanged,
    /// A PersistentVolume was added or changed.
    VolumeChanged,
    /// A StorageClass was added.
    StorageClassAdded,
}

/// A plugin's per-cycle data: anything clonable (preemption and nominated pods work on a
/// copy of the cycle's state).
pub trait StateData: Any + Send + Sync {
    fn clone_box(&self) -> Box<dyn StateData>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
}

impl<T: Any + Clone + Send + Sync> StateData for T {
    fn clone_box(&self) -> Box<dyn StateData> {
        Box::new(self.clone())
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

/// The events that matter to plugins counting pods in topology domains (affinity, spreading):
/// any change of an assigned pod, and nodes added or relabelled.
pub const POD_AND_NODE_EVENTS: &[ClusterEvent] = &[
    ClusterEvent::AssignedPodAdded,
    ClusterEvent::AssignedPodChanged,
    ClusterEvent::AssignedPodDeleted,
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeChanged,
];

/// The events that matter to plugins reading claims and volumes (VolumeBinding, VolumeZone):
/// storage objects added or changed, and nodes added or relabelled.
pub const VOLUME_EVENTS: &[ClusterEvent] = &[
    ClusterEvent::ClaimChanged,
    ClusterEvent::VolumeChanged,
    ClusterEvent::StorageClassAdded,
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeChanged,
];

/// What one cycle's plugins compute and read back, by plugin name.
///
/// Filter plugins read it once per node, thousands of times a cycle, so the few entries (one
/// per plugin at most) are kept in small vectors searched in order rather than hashed.
#[derive(Default)]
pub struct CycleState {
    data: Vec<(&'static str, Box<dyn StateData>)>,
    /// Plugins whose PreFilter said Skip: their Filter is not run this cycle.
    pub skip_filter: PluginSet,
}

impl Clone for CycleState {
    fn clone(&self) -> Self {
        Self {
            data: self
                .data
                .iter()
                .map(|(k, v)| (*k, (**v).clone_box()))
                .collect(),
            skip_filter: self.skip_filter.clone(),
        }
    }
}

impl CycleState {
    pub fn write<T: StateData>(&mut self, plugin: &'static str, value: T) {
        match self.data.iter_mut().find(|(name, _)| *name == plugin) {
            Some((_, slot)) => *slot = Box::new(value),
            None => self.data.push((plugin, Box::new(value))),
        }
    }

    pub fn read<T: Any>(&self, plugin: &'static str) -> Option<&T> {
        self.data
            .iter()
            .find(|(name, _)| *name == plugin)
            .and_then(|(_, v)| (**v).as_any().downcast_ref())
    }

    pub fn read_mut<T: Any>(&mut self, plugin: &'static str) -> Option<&mut T> {
        self.data
            .iter_mut()
            .find(|(name, _)| *name == plugin)
            .and_then(|(_, v)| (**v).as_any_mut().downcast_mut())
    }
}

/// A few plugin names (a set searched in order; see [`CycleState`]).
#[derive(Clone, Debug, Default)]
pub struct PluginSet(Vec<&'static str>);

impl PluginSet {
    pub fn insert(&mut self, plugin: &'static str) {
        if !self.contains(plugin) {
            self.0.push(plugin);
        }
    }

    pub fn contains(&self, plugin: &str) -> bool {
        self.0.contains(&plugin)
    }
}

/// Labels of namespaces, for pod-affinity terms with a namespaceSelector.
pub type NamespaceLabels = dyn Fn(&str) -> BTreeMap<String, String> + Send + Sync;

/// What a plugin sees of the pod and the cluster in one cycle.
pub struct Ctx<'a> {
    pub pod: &'a PodInfo,
    pub snapshot: &'a Snapshot,
    pub namespace_labels: &'a NamespaceLabels,
    /// Claims, volumes and classes (VolumeBinding).
    pub volumes: &'a crate::volumes::Volumes,
    /// Services and controllers (PodTopologySpread's default constraints).
    pub workloads: &'a dyn crate::workloads::Workloads,
}

/// A write the binding cycle makes before binding the pod (PreBind), as a Reserve plugin
/// planned it for the chosen node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PreBindAction {
    /// Binds the free volume `volume` to the claim (its `claimRef`; the PV binder finishes).
    BindVolume {
        volume: String,
        namespace: String,
        claim: String,
        uid: String,
    },
    /// Annotates the claim with the chosen node, for its volume to be provisioned there.
    SelectNode {
        namespace: String,
        claim: String,
        node: String,
    },
    /// Waits until the claim is bound.
    WaitBound { namespace: String, claim: String },
}

/// A scheduling plugin. Every point has a default that takes no part; a plugin overrides
/// the points it lists in [`Plugin::points`].
pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;

    /// The extension points this plugin implements.
    fn points(&self) -> &'static [Point];

    /// The events that may make a pod this plugin rejected schedulable.
    fn events(&self) -> &'static [ClusterEvent] {
        &[]
    }

    /// Whether the pod may enter the active queue at all.
    fn pre_enqueue(&self, _pod: &PodInfo) -> Status {
        Status::success()
    }

    fn pre_filter(&self, _state: &mut CycleState, _ctx: &Ctx) -> Status {
        Status::skip()
    }

    fn filter(&self, _state: &CycleState, _ctx: &Ctx, _node: &NodeInfo) -> Status {
        Status::success()
    }

    /// PreFilter state as if `pod` were added to `node` (nominated pods, preemption).
    fn add_pod(&self, _state: &mut CycleState, _ctx: &Ctx, _pod: &PodInfo, _node: &NodeInfo) {}

    /// PreFilter state as if `pod` were removed from `node`.
    fn remove_pod(&self, _state: &mut CycleState, _ctx: &Ctx, _pod: &PodInfo, _node: &NodeInfo) {}

    fn pre_score(&self, _state: &mut CycleState, _ctx: &Ctx, _nodes: &[Arc<NodeInfo>]) -> Status {
        Status::skip()
    }

    fn score(&self, _state: &CycleState, _ctx: &Ctx, _node: &NodeInfo) -> i64 {
        0
    }

    /// Reserve: what must be written before the pod is bound to `node` (PreBind), with
    /// whatever the plugin promises meanwhile (undone by [`Plugin::unreserve`]).
    fn reserve(
        &self,
        _state: &CycleState,
        _ctx: &Ctx,
        _node: &NodeInfo,
    ) -> Result<Vec<PreBindAction>, Status> {
        Ok(Vec::new())
    }

    /// Undoes [`Plugin::reserve`]'s promises for the pod (its binding ended, either way).
    fn unreserve(&self, _ctx: &Ctx) {}

    /// Brings `scores` (one per node of `nodes`, the feasible ones) to 0..=100.
    fn normalize(
        &self,
        _state: &CycleState,
        _ctx: &Ctx,
        _nodes: &[Arc<NodeInfo>],
        _scores: &mut [i64],
    ) {
    }
}

/// Scales scores so the largest is [`MAX_NODE_SCORE`] (reversed: the largest becomes 0).
pub fn default_normalize(scores: &mut [i64], reverse: bool) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = MAX_NODE_SCORE);
        }
        return;
    }
    for score in scores.iter_mut() {
        let scaled = *score * MAX_NODE_SCORE / max;
        *score = if reverse {
            MAX_NODE_SCORE - scaled
        } else {
            scaled
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_point_sits_at_its_own_index() {
        for (index, point) in Point::ALL.iter().enumerate() {
            assert_eq!(*point as usize, index, "{point:?}");
        }
    }

    #[test]
    fn cycle_state_keeps_one_entry_per_plugin() {
        let mut state = CycleState::default();
        state.write("A", 1u32);
        state.write("B", 2u32);
        state.write("A", 3u32);
        assert_eq!(state.read::<u32>("A"), Some(&3));
        assert_eq!(state.read::<u32>("B"), Some(&2));
        assert_eq!(state.read::<u64>("A"), None, "another type");
        assert_eq!(state.read::<u32>("C"), None);
        *state.read_mut::<u32>("B").unwrap() = 5;
        assert_eq!(state.clone().read::<u32>("B"), Some(&5));
        state.skip_filter.insert("A");
        state.skip_filter.insert("A");
        assert!(state.skip_filter.contains("A") && !state.skip_filter.contains("B"));
    }

    #[test]
    fn normalizing_scales_to_the_maximum_or_reverses() {
        let mut scores = [0, 5, 10];
        default_normalize(&mut scores, false);
        assert_eq!(scores, [0, 50, 100]);
        let mut scores = [0, 5, 10];
        default_normalize(&mut scores, true);
        assert_eq!(scores, [100, 50, 0]);
        let mut zeros = [0, 0];
        default_normalize(&mut zeros, true);
        assert_eq!(zeros, [100, 100]);
    }
}
