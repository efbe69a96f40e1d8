//! Unit tests of the DaemonSet rollout's arithmetic: how many nodes move at a time with and
//! without surge, which pods a node keeps, and how the bounds resolve.

use std::sync::Arc;

use k8s_openapi::api::apps::v1::RollingUpdateDaemonSet;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::reconcile::surge_and_unavailable;
use super::rollout::{step, surplus_on_node, NodeSlot, Step};

/// A pod named `name`; its name says whether it is available (`…-up`) and new (`new-…`).
fn pod(name: &str) -> Pod {
    let mut pod = Pod::default();
    pod.metadata.name = Some(name.into());
    pod
}

fn up(pod: &Pod) -> bool {
    pod.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.ends_with("-up"))
}

fn is_new(pod: &Pod) -> bool {
    pod.metadata
        .name
        .as_deref()
        .is_some_and(|n| n.starts_with("new-"))
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| s.to_string()).collect()
}

#[test]
fn without_surge_old_pods_go_max_unavailable_nodes_at_a_time() {
    let (a, b, c) = (pod("old-a-up"), pod("old-b-up"), pod("old-c-up"));
    let slots = [
        NodeSlot {
            node: "a",
            old: Some(&a),
            new: None,
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
        NodeSlot {
            node: "c",
            old: Some(&c),
            new: None,
        },
    ];
    assert_eq!(
        step(&slots, 0, 1, up),
        Step {
            delete: names(&["old-a-up"]),
            create_on: vec![]
        }
    );
    assert_eq!(
        step(&slots, 0, 2, up).delete,
        names(&["old-a-up", "old-b-up"])
    );
}

#[test]
fn without_surge_an_unavailable_new_pod_or_an_empty_node_uses_the_budget() {
    let (a, b, c) = (pod("new-a"), pod("old-b-up"), pod("old-c-up"));
    let slots = [
        NodeSlot {
            node: "a",
            old: None,
            new: Some(&a),
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
        NodeSlot {
            node: "c",
            old: Some(&c),
            new: None,
        },
    ];
    assert_eq!(step(&slots, 0, 1, up), Step::default());
    assert_eq!(step(&slots, 0, 2, up).delete, names(&["old-b-up"]));
    let empty = [
        NodeSlot {
            node: "a",
            old: None,
            new: None,
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
    ];
    assert_eq!(step(&empty, 0, 1, up), Step::default());
}

#[test]
fn without_surge_an_old_pod_that_is_down_anyway_always_goes() {
    let (a, b, c) = (pod("new-a"), pod("old-b"), pod("old-c-up"));
    let slots = [
        NodeSlot {
            node: "a",
            old: None,
            new: Some(&a),
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
        NodeSlot {
            node: "c",
            old: Some(&c),
            new: None,
        },
    ];
    assert_eq!(step(&slots, 0, 1, up).delete, names(&["old-b"]));
}

#[test]
fn with_surge_new_pods_start_beside_old_ones_max_surge_at_a_time() {
    let (a, b, c) = (pod("old-a-up"), pod("old-b-up"), pod("old-c-up"));
    let slots = [
        NodeSlot {
            node: "a",
            old: Some(&a),
            new: None,
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
        NodeSlot {
            node: "c",
            old: Some(&c),
            new: None,
        },
    ];
    assert_eq!(
        step(&slots, 1, 0, up),
        Step {
            delete: vec![],
            create_on: names(&["a"])
        }
    );
    assert_eq!(step(&slots, 2, 0, up).create_on, names(&["a", "b"]));
}

#[test]
fn with_surge_the_old_pod_goes_once_its_replacement_is_available() {
    let (a_old, a_new) = (pod("old-a-up"), pod("new-a"));
    let (b_old, b_new) = (pod("old-b-up"), pod("new-b-up"));
    let c = pod("old-c-up");
    let slots = [
        NodeSlot {
            node: "a",
            old: Some(&a_old),
            new: Some(&a_new),
        },
        NodeSlot {
            node: "b",
            old: Some(&b_old),
            new: Some(&b_new),
        },
        NodeSlot {
            node: "c",
            old: Some(&c),
            new: None,
        },
    ];
    // a is still surging (its new pod is not up): with maxSurge 1 c waits.
    assert_eq!(
        step(&slots, 1, 0, up),
        Step {
            delete: names(&["old-b-up"]),
            create_on: vec![]
        }
    );
    assert_eq!(step(&slots, 2, 0, up).create_on, names(&["c"]));
}

#[test]
fn with_surge_a_node_whose_old_pod_is_down_gets_its_new_pod_at_once() {
    let (a_old, a_new) = (pod("old-a-up"), pod("new-a"));
    let b = pod("old-b");
    let slots = [
        NodeSlot {
            node: "a",
            old: Some(&a_old),
            new: Some(&a_new),
        },
        NodeSlot {
            node: "b",
            old: Some(&b),
            new: None,
        },
    ];
    assert_eq!(step(&slots, 1, 0, up).create_on, names(&["b"]));
}

#[test]
fn a_node_keeps_one_pod_or_with_surge_an_old_one_while_the_new_one_gets_ready() {
    let arcs = |list: &[&str]| list.iter().map(|n| Arc::new(pod(n))).collect::<Vec<_>>();
    let surplus_names = |running: &[Arc<Pod>], surge: bool| {
        surplus_on_node(running, surge, is_new, up)
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<Vec<_>>()
    };
    // Without surge the oldest stays.
    assert_eq!(
        surplus_names(&arcs(&["old-a-up", "new-a-up"]), false),
        names(&["new-a-up"])
    );
    // With surge: old ready and new not ready: both stay.
    assert_eq!(
        surplus_names(&arcs(&["old-a-up", "new-a"]), true),
        names(&[])
    );
    // New ready: the old one goes.
    assert_eq!(
        surplus_names(&arcs(&["old-a-up", "new-a-up"]), true),
        names(&["old-a-up"])
    );
    // Neither ready: the new one stays.
    assert_eq!(
        surplus_names(&arcs(&["old-a", "new-a"]), true),
        names(&["old-a"])
    );
    // A second pod of either kind goes.
    assert_eq!(
        surplus_names(&arcs(&["new-a", "new-b", "old-c-up", "old-d-up"]), true),
        names(&["new-b", "old-d-up"])
    );
}

#[test]
fn bounds_resolve_against_the_desired_nodes_rounding_up() {
    let rolling =
        |surge: Option<IntOrString>, unavailable: Option<IntOrString>| RollingUpdateDaemonSet {
            max_surge: surge,
            max_unavailable: unavailable,
        };
    let percent = |p: &str| Some(IntOrString::String(p.into()));
    // Defaults: no surge, one node at a time.
    assert_eq!(surge_and_unavailable(&rolling(None, None), 10), (0, 1));
    assert_eq!(
        surge_and_unavailable(&rolling(percent("25%"), Some(IntOrString::Int(0))), 10),
        (3, 0)
    );
    assert_eq!(
        surge_and_unavailable(&rolling(None, percent("10%")), 5),
        (0, 1)
    );
    assert_eq!(
        surge_and_unavailable(&rolling(None, percent("30%")), 10),
        (0, 3)
    );
    // Both zero would never move.
    assert_eq!(
        surge_and_unavailable(
            &rolling(Some(IntOrString::Int(0)), Some(IntOrString::Int(0))),
            4
        ),
        (0, 1)
    );
}

#[test]
fn a_no_schedule_taint_keeps_new_pods_off_but_evicts_none() {
    use super::reconcile::{should_continue_running, should_run};
    use k8s_openapi::api::core::v1::{Node, PodTemplateSpec};
    let template: PodTemplateSpec = serde_json::from_value(serde_json::json!({
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap();
    let tainted = |key: &str, effect: &str| -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": [{"key": key, "effect": effect}]}
        }))
        .unwrap()
    };
    // The unreachable NoSchedule taint the node lifecycle sets is not among the tolerations
    // every DaemonSet pod gets, its NoExecute twin is.
    let unreachable = tainted("node.kubernetes.io/unreachable", "NoSchedule");
    assert!(!should_run(&template, &unreachable));
    assert!(should_continue_running(&template, &unreachable));
    let unreachable = tainted("node.kubernetes.io/unreachable", "NoExecute");
    assert!(should_run(&template, &unreachable));
    let dedicated = tainted("dedicated", "NoExecute");
    assert!(!should_run(&template, &dedicated));
    assert!(!should_continue_running(&template, &dedicated));
}
