//! How a DaemonSet moves from old pods to pods of its current template, node by node — the
//! arithmetic only, over what each node holds, so it is tested without an API.
//!
//! Without surge (`maxSurge` 0) an old pod is deleted before its replacement is created, at
//! most `maxUnavailable` nodes short at a time; an old pod that is not available anyway may
//! always go. With surge, the new pod starts beside the old one (at most `maxSurge` nodes at
//! a time, and at once where the old pod is not available) and the old one goes when the new
//! one is available. Both as upstream's DaemonSet controller.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

/// A node that should run the DaemonSet's pod, and the live pods it holds of each kind.
pub(crate) struct NodeSlot<'a> {
    pub node: &'a str,
    /// The pod of an earlier template, if any.
    pub old: Option<&'a Pod>,
    /// The pod of the current template, if any.
    pub new: Option<&'a Pod>,
}

/// What a rollout step does.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Step {
    /// Names of old pods to delete.
    pub delete: Vec<String>,
    /// Nodes that get a pod of the current template.
    pub create_on: Vec<String>,
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// One rollout step over `slots` with the resolved `max_surge` and `max_unavailable`
/// (`available` tells whether a pod has been ready for `minReadySeconds`).
pub(crate) fn step(
    slots: &[NodeSlot<'_>],
    max_surge: usize,
    max_unavailable: usize,
    available: impl Fn(&Pod) -> bool,
) -> Step {
    let mut step = Step::default();
    if max_surge == 0 {
        let mut unavailable = 0;
        let mut replaceable = Vec::new();
        for slot in slots {
            match (slot.old, slot.new) {
                // Nothing here, or both: the manage pass creates or dedupes; it counts short.
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (None, Some(new)) => {
                    if !available(new) {
                        unavailable += 1;
                    }
                }
                (Some(old), None) => {
                    if !available(old) {
                        step.delete.push(name(old));
                    } else {
                        replaceable.push(name(old));
                    }
                }
            }
        }
        let room = max_unavailable.saturating_sub(unavailable);
        step.delete.extend(replaceable.into_iter().take(room));
        return step;
    }
    let mut surging = 0;
    let mut candidates = Vec::new();
    for slot in slots {
        match (slot.old, slot.new) {
            (None, _) => {}
            (Some(old), None) => {
                if available(old) {
                    candidates.push(slot.node.to_string());
                } else {
                    step.create_on.push(slot.node.to_string());
                }
            }
            (Some(old), Some(new)) => {
                if available(new) {
                    step.delete.push(name(old));
                } else {
                    surging += 1;
                }
            }
        }
    }
    let room = max_surge.saturating_sub(surging);
    step.create_on.extend(candidates.into_iter().take(room));
    step
}

/// Of the live, unfinished pods on one node (oldest first), the ones the manage pass deletes.
/// Without surge only the oldest stays. With surge the oldest pod of each kind may stay, and
/// both only while the new one is not ready and the old one is; where neither is ready the new
/// one stays.
pub(crate) fn surplus_on_node(
    running: &[Arc<Pod>],
    surge: bool,
    is_new: impl Fn(&Pod) -> bool,
    ready: impl Fn(&Pod) -> bool,
) -> Vec<Arc<Pod>> {
    if !surge {
        return running.iter().skip(1).cloned().collect();
    }
    let mut surplus = Vec::new();
    let (mut new_kept, mut old_kept): (Option<&Arc<Pod>>, Option<&Arc<Pod>>) = (None, None);
    for pod in running {
        let slot = if is_new(pod) {
            &mut new_kept
        } else {
            &mut old_kept
        };
        if slot.is_none() {
            *slot = Some(pod);
        } else {
            surplus.push(pod.clone());
        }
    }
    if let (Some(new), Some(old)) = (new_kept, old_kept) {
        if !ready(old) || ready(new) {
            surplus.push(old.clone());
        }
    }
    surplus
}
