//! Which pods a controller deletes first when it scales down, as upstream ranks them: pods not
//! yet on a node, then pending, unknown and running ones; not ready before ready; pods on nodes
//! that hold more of this controller's pods; ready for less time; more restarts; newer.

use std::cmp::Ordering;
use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

fn phase_rank(pod: &Pod) -> u8 {
    match pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        Some("Pending") => 0,
        Some("Running") => 2,
        _ => 1,
    }
}

fn node(pod: &Pod) -> Option<&str> {
    pod.spec.as_ref().and_then(|spec| spec.node_name.as_deref())
}

/// When the pod became ready, if it is.
fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|time| time.0)
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |statuses| statuses.iter().map(|s| s.restart_count).sum())
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|time| time.0)
}

/// Sorts `pods` so the first ones are the ones to delete first.
pub fn order_for_deletion(pods: &mut [Arc<Pod>]) {
    let mut per_node: HashMap<String, usize> = HashMap::new();
    for pod in pods.iter() {
        if let Some(node) = node(pod) {
            *per_node.entry(node.to_string()).or_default() += 1;
        }
    }
    let crowd = |pod: &Pod| {
        node(pod)
            .and_then(|n| per_node.get(n))
            .copied()
            .unwrap_or(0)
    };
    pods.sort_by(|a, b| {
        // 1. Unassigned first.
        node(a)
            .is_some()
            .cmp(&node(b).is_some())
            // 2. Pending < unknown < running.
            .then_with(|| phase_rank(a).cmp(&phase_rank(b)))
            // 3. Not ready before ready.
            .then_with(|| rudder_facts::pods::is_ready(a).cmp(&rudder_facts::pods::is_ready(b)))
            // 4. More of ours on the same node first.
            .then_with(|| crowd(b).cmp(&crowd(a)))
            // 5. Ready for less time (became ready later) first.
            .then_with(|| match (ready_since(a), ready_since(b)) {
                (Some(a), Some(b)) => b.cmp(&a),
                _ => Ordering::Equal,
            })
            // 6. More restarts first.
            .then_with(|| restarts(b).cmp(&restarts(a)))
            // 7. Newer first.
            .then_with(|| created(b).cmp(&created(a)))
    });
}
