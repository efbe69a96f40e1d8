//! What the node lifecycle controller concludes from a Node alone: the conditions of a node
//! whose kubelet went quiet (`Unknown`, as upstream words it) and the taints the node's state
//! calls for — `NoSchedule` taints for every condition the scheduler must avoid, and the
//! `NoExecute` taints `node.kubernetes.io/not-ready` (Ready False) or
//! `node.kubernetes.io/unreachable` (Ready Unknown) that evict pods.

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// The conditions a kubelet posts, which go `Unknown` when it stops.
const POSTED: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

/// A condition that, `True`, keeps new pods off the node, and the taint that says so.
const PRESSURE_TAINTS: [(&str, &str); 4] = [
    ("MemoryPressure", "node.kubernetes.io/memory-pressure"),
    ("DiskPressure", "node.kubernetes.io/disk-pressure"),
    ("PIDPressure", "node.kubernetes.io/pid-pressure"),
    (
        "NetworkUnavailable",
        "node.kubernetes.io/network-unavailable",
    ),
];

fn conditions(node: &Node) -> &[NodeCondition] {
    node.status
        .as_ref()
        .and_then(|status| status.conditions.as_deref())
        .unwrap_or_default()
}

/// The node's condition of `kind`.
pub fn condition<'a>(node: &'a Node, kind: &str) -> Option<&'a NodeCondition> {
    conditions(node).iter().find(|c| c.type_ == kind)
}

/// The status of the node's Ready condition (`None`: the kubelet never posted one).
pub fn ready_status(node: &Node) -> Option<&str> {
    condition(node, "Ready").map(|c| c.status.as_str())
}

/// The conditions of a node whose kubelet stopped posting: every posted condition `Unknown`
/// (added when it was never posted), or `None` when they all are already.
pub fn gone_quiet(node: &Node, now: &Time) -> Option<Vec<NodeCondition>> {
    let mut all = conditions(node).to_vec();
    let mut changed = false;
    for kind in POSTED {
        match all.iter_mut().find(|c| c.type_ == kind) {
            Some(existing) if existing.status == "Unknown" => {}
            Some(existing) => {
                existing.status = "Unknown".into();
                existing.reason = Some("NodeStatusUnknown".into());
                existing.message = Some("Kubelet stopped posting node status.".into());
                existing.last_transition_time = Some(now.clone());
                changed = true;
            }
            None => {
                all.push(NodeCondition {
                    type_: kind.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: node.metadata.creation_timestamp.clone(),
                    last_transition_time: Some(now.clone()),
                });
                changed = true;
            }
        }
    }
    changed.then_some(all)
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added: None,
    }
}

/// Whether this controller decides about `taint` (others' taints are left as they are).
fn is_managed(taint: &Taint) -> bool {
    let keys = [NOT_READY, UNREACHABLE, UNSCHEDULABLE];
    let pressure = PRESSURE_TAINTS.iter().any(|(_, key)| *key == taint.key);
    match taint.effect.as_str() {
        "NoSchedule" => pressure || keys.contains(&taint.key.as_str()),
        "NoExecute" => taint.key == NOT_READY || taint.key == UNREACHABLE,
        _ => false,
    }
}

/// The taints the node should carry. A `NoExecute` taint that replaces the other kind (the
/// node went from unreachable to not ready) is swapped at once; one on a node that has none
/// is added only when `may_evict` (upstream rate-limits those) — otherwise the node keeps the
/// taints it has. `now` stamps the `NoExecute` taints added.
pub fn wanted_taints(node: &Node, may_evict: bool, now: &Time) -> Vec<Taint> {
    let current: Vec<Taint> = node
        .spec
        .as_ref()
        .and_then(|spec| spec.taints.clone())
        .unwrap_or_default();
    let mut wanted: Vec<Taint> = current.iter().filter(|t| !is_managed(t)).cloned().collect();
    let mut no_schedule = Vec::new();
    let no_execute = match ready_status(node) {
        Some("False") => Some(NOT_READY),
        Some("Unknown") => Some(UNREACHABLE),
        _ => None,
    };
    if let Some(key) = no_execute {
        no_schedule.push(key);
    }
    for (kind, key) in PRESSURE_TAINTS {
        if condition(node, kind).is_some_and(|c| c.status == "True") {
            no_schedule.push(key);
        }
    }
    let cordoned = node
        .spec
        .as_ref()
        .and_then(|spec| spec.unschedulable)
        .unwrap_or(false);
    if cordoned {
        no_schedule.push(UNSCHEDULABLE);
    }
    for key in no_schedule {
        let kept = current
            .iter()
            .find(|t| t.key == key && t.effect == "NoSchedule");
        wanted.push(kept.cloned().unwrap_or_else(|| taint(key, "NoSchedule")));
    }
    let had = current
        .iter()
        .find(|t| t.effect == "NoExecute" && (t.key == NOT_READY || t.key == UNREACHABLE));
    if let Some(key) = no_execute {
        match had {
            Some(existing) if existing.key == key => wanted.push(existing.clone()),
            Some(_) => wanted.push(stamped(key, now)),
            None if may_evict => wanted.push(stamped(key, now)),
            None => {}
        }
    }
    wanted
}

/// Takes the `NoExecute` not-ready and unreachable taints out of `taints` (no node is
/// evicted while every zone is fully disrupted).
pub fn lift_no_execute(taints: &mut Vec<Taint>) {
    taints.retain(|t| !(t.effect == "NoExecute" && (t.key == NOT_READY || t.key == UNREACHABLE)));
}

fn stamped(key: &str, now: &Time) -> Taint {
    Taint {
        time_added: Some(now.clone()),
        ..taint(key, "NoExecute")
    }
}

/// Whether two taint lists say the same (by key, value and effect, in any order).
pub fn same_taints(a: &[Taint], b: &[Taint]) -> bool {
    let key = |t: &Taint| (t.key.clone(), t.value.clone(), t.effect.clone());
    let mut a: Vec<_> = a.iter().map(key).collect();
    let mut b: Vec<_> = b.iter().map(key).collect();
    a.sort();
    b.sort();
    a == b
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: Option<&str>, taints: serde_json::Value) -> Node {
        let conditions: Vec<serde_json::Value> = ready
            .map(|status| json!({"type": "Ready", "status": status}))
            .into_iter()
            .chain([json!({"type": "MemoryPressure", "status": "False"})])
            .collect();
        serde_json::from_value(json!({"metadata": {"name": "n"},
            "spec": {"taints": taints}, "status": {"conditions": conditions}}))
        .expect("a node")
    }

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).expect("time"))
    }

    fn keys(taints: &[Taint]) -> Vec<String> {
        let mut keys: Vec<String> = taints
            .iter()
            .map(|t| format!("{}:{}", t.key, t.effect))
            .collect();
        keys.sort();
        keys
    }

    #[test]
    fn a_quiet_node_goes_unknown_with_upstreams_words() {
        let quiet = gone_quiet(&node(Some("True"), json!([])), &now()).expect("changed");
        let ready = quiet.iter().find(|c| c.type_ == "Ready").expect("Ready");
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            ready.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        let never = quiet
            .iter()
            .find(|c| c.type_ == "DiskPressure")
            .expect("added");
        assert_eq!(never.reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert_eq!(quiet.len(), 4);
        let mut unknown = node(Some("Unknown"), json!([]));
        if let Some(status) = unknown.status.as_mut() {
            status.conditions = Some(quiet);
        }
        assert!(gone_quiet(&unknown, &now()).is_none(), "already Unknown");
    }

    #[test]
    fn taints_follow_readiness_and_leave_others_alone() {
        let own = json!([{"key": "team", "value": "a", "effect": "NoSchedule"}]);
        let unknown = wanted_taints(&node(Some("Unknown"), own.clone()), true, &now());
        assert_eq!(
            keys(&unknown),
            vec![
                "node.kubernetes.io/unreachable:NoExecute",
                "node.kubernetes.io/unreachable:NoSchedule",
                "team:NoSchedule"
            ]
        );
        assert!(unknown.iter().any(|t| t.time_added.is_some()));
        // Rate-limited: no NoExecute taint yet, but the NoSchedule one.
        let held = wanted_taints(&node(Some("Unknown"), own.clone()), false, &now());
        assert_eq!(
            keys(&held),
            vec![
                "node.kubernetes.io/unreachable:NoSchedule",
                "team:NoSchedule"
            ]
        );
        // Unreachable → not ready swaps at once, even when rate-limited.
        let tainted = json!([{"key": UNREACHABLE, "effect": "NoExecute"}]);
        let swapped = wanted_taints(&node(Some("False"), tainted.clone()), false, &now());
        assert_eq!(
            keys(&swapped),
            vec![
                "node.kubernetes.io/not-ready:NoExecute",
                "node.kubernetes.io/not-ready:NoSchedule"
            ]
        );
        // Back to Ready: ours go, theirs stay.
        let back = wanted_taints(&node(Some("True"), tainted), true, &now());
        assert!(back.is_empty(), "{back:?}");
        let mut cordoned = node(Some("True"), own);
        if let Some(spec) = cordoned.spec.as_mut() {
            spec.unschedulable = Some(true);
        }
        assert_eq!(
            keys(&wanted_taints(&cordoned, true, &now())),
            vec![
                "node.kubernetes.io/unschedulable:NoSchedule",
                "team:NoSchedule"
            ]
        );
    }
}
