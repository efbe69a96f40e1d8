//! Each plugin's behaviour as users see it: where pods land, what they are told.

use serde_json::json;

use super::{node, pod, Harness};

#[tokio::test]
async fn pods_land_where_their_requests_fit_and_the_rest_say_why() {
    let mut h = Harness::new();
    h.node(node("small", "1", json!({}), json!([])));
    h.node(node("big", "4", json!({}), json!([])));
    h.pod(pod("needs-3", "3", json!({}), json!({})));
    h.pod(pod("needs-8", "8", json!({}), json!({})));
    h.settle().await;
    assert_eq!(
        h.placements().get("needs-3").map(String::as_str),
        Some("big")
    );
    assert!(!h.placements().contains_key("needs-8"));
    assert_eq!(
        h.failure("needs-8").as_deref(),
        Some("0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod.")
    );
}

#[tokio::test]
async fn least_allocated_spreads_equal_pods_over_equal_nodes() {
    let mut h = Harness::new();
    for name in ["a", "b", "c"] {
        h.node(node(name, "4", json!({}), json!([])));
    }
    for i in 0..6 {
        h.pod(pod(&format!("p{i}"), "500m", json!({}), json!({})));
    }
    h.settle().await;
    assert_eq!(
        h.per_node().values().copied().collect::<Vec<_>>(),
        [2, 2, 2]
    );
}

#[tokio::test]
async fn most_allocated_packs_pods_onto_one_node() {
    let mut h = Harness::with_config(
        r#"
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - {name: NodeResourcesFit, args: {scoringStrategy: {type: MostAllocated}}}
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
"#,
    );
    for name in ["a", "b", "c"] {
        h.node(node(name, "4", json!({}), json!([])));
    }
    for i in 0..4 {
        h.pod(pod(&format!("p{i}"), "500m", json!({}), json!({})));
    }
    h.settle().await;
    assert_eq!(h.per_node().len(), 1, "{:?}", h.per_node());
}

#[tokio::test]
async fn node_selector_and_required_affinity_are_obeyed() {
    let mut h = Harness::new();
    h.node(node(
        "ssd",
        "4",
        json!({"disk": "ssd", "zone": "a"}),
        json!([]),
    ));
    h.node(node(
        "hdd",
        "4",
        json!({"disk": "hdd", "zone": "b"}),
        json!([]),
    ));
    h.pod(pod(
        "selector",
        "100m",
        json!({}),
        json!({"nodeSelector": {"disk": "ssd"}}),
    ));
    h.pod(pod(
        "affinity",
        "100m",
        json!({}),
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b"]}]}]}}}}),
    ));
    h.pod(pod(
        "nowhere",
        "100m",
        json!({}),
        json!({"nodeSelector": {"disk": "nvme"}}),
    ));
    h.settle().await;
    let placed = h.placements();
    assert_eq!(placed.get("selector").map(String::as_str), Some("ssd"));
    assert_eq!(placed.get("affinity").map(String::as_str), Some("hdd"));
    assert_eq!(
        h.failure("nowhere").as_deref(),
        Some("0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling.")
    );
}

#[tokio::test]
async fn preferred_affinity_leans_towards_matching_nodes() {
    let mut h = Harness::new();
    h.node(node("plain", "4", json!({}), json!([])));
    h.node(node("fast", "4", json!({"speed": "fast"}), json!([])));
    for i in 0..3 {
        h.pod(pod(
            &format!("p{i}"),
            "100m",
            json!({}),
            json!({"affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 100, "preference": {"matchExpressions": [{"key": "speed", "operator": "In", "values": ["fast"]}]}}]}}}),
        ));
    }
    h.settle().await;
    assert_eq!(h.per_node().get("fast"), Some(&3));
}

#[tokio::test]
async fn taints_repel_pods_without_tolerations() {
    let mut h = Harness::new();
    let control_plane =
        json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
    h.node(node("cp", "8", json!({}), control_plane));
    h.node(node("worker", "1", json!({}), json!([])));
    h.pod(pod("fits-worker", "500m", json!({}), json!({})));
    h.pod(pod("too-big", "2", json!({}), json!({})));
    h.pod(pod(
        "tolerant",
        "2",
        json!({}),
        json!({"tolerations": [{"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]}),
    ));
    h.settle().await;
    let placed = h.placements();
    assert_eq!(
        placed.get("fits-worker").map(String::as_str),
        Some("worker")
    );
    assert_eq!(placed.get("tolerant").map(String::as_str), Some("cp"));
    assert_eq!(
        h.failure("too-big").as_deref(),
        Some("0/2 nodes are available: 1 Insufficient cpu, 1 node(s) had untolerated taint {node-role.kubernetes.io/control-plane: }. preemption: 0/2 nodes are available: 1 No preemption victims found for incoming pod, 1 Preemption is not helpful for scheduling.")
    );
}

#[tokio::test]
async fn prefer_no_schedule_taints_lower_the_score() {
    let mut h = Harness::new();
    h.node(node(
        "tainted",
        "4",
        json!({}),
        json!([{"key": "spot", "effect": "PreferNoSchedule"}]),
    ));
    h.node(node("clean", "4", json!({}), json!([])));
    for i in 0..3 {
        h.pod(pod(&format!("p{i}"), "100m", json!({}), json!({})));
    }
    h.settle().await;
    assert_eq!(h.per_node().get("clean"), Some(&3));
}

/// Pods named `prefix…` per zone of [`zoned`] (a node's name starts with its zone).
fn per_zone(h: &Harness, prefix: &str) -> Vec<usize> {
    let mut zones = std::collections::BTreeMap::new();
    for (pod, node) in h.placements() {
        if pod.starts_with(prefix) {
            *zones.entry(node[..1].to_string()).or_insert(0) += 1;
        }
    }
    zones.into_values().collect()
}

fn zoned(h: &mut Harness) {
    for (name, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b"), ("c1", "c")] {
        h.node(node(
            name,
            "8",
            json!({"topology.kubernetes.io/zone": zone}),
            json!([]),
        ));
    }
}

#[tokio::test]
async fn topology_spread_with_max_skew_one_ends_two_two_two() {
    let mut h = Harness::new();
    zoned(&mut h);
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    for i in 0..6 {
        h.pod(pod(
            &format!("web-{i}"),
            "100m",
            json!({"app": "web"}),
            spread.clone(),
        ));
    }
    h.settle().await;
    assert_eq!(per_zone(&h, "web-"), [2, 2, 2], "{:?}", h.placements());
}

#[tokio::test]
async fn topology_spread_refuses_nodes_without_the_key() {
    let mut h = Harness::new();
    h.node(node("unlabelled", "8", json!({}), json!([])));
    let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]});
    h.pod(pod("web", "100m", json!({"app": "web"}), spread));
    h.settle().await;
    assert_eq!(
        h.failure("web").as_deref(),
        Some("0/1 nodes are available: 1 node(s) didn't match pod topology spread constraints (missing required label). preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling.")
    );
}

/// A pod of the ReplicaSet `web-1` (selector `app=web`), which the harness's listers know.
fn replica(h: &mut Harness, name: &str) -> serde_json::Value {
    let rs: k8s_openapi::api::apps::v1::ReplicaSet = serde_json::from_value(json!({
        "metadata": {"name": "web-1", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "web"}}}}))
    .expect("replica set");
    let mut listed = h.workloads.replica_sets.lock().expect("lock");
    if listed.is_empty() {
        listed.push(std::sync::Arc::new(rs));
    }
    let mut p = pod(name, "500m", json!({"app": "web"}), json!({}));
    p["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet",
        "name": "web-1", "uid": "rs-uid", "controller": true}]);
    p
}

const PACKING: &str = r#"
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - {name: NodeResourcesFit, args: {scoringStrategy: {type: MostAllocated}}}
  plugins:
    score:
      disabled: [{name: NodeResourcesBalancedAllocation}]
"#;

#[tokio::test]
async fn system_default_spreading_keeps_a_replica_sets_pods_apart_on_unzoned_nodes() {
    // Packing would put them all on one node (as pods nothing selects still are); the
    // built-in hostname constraint outweighs it, though no node has a zone label.
    let mut h = Harness::with_config(PACKING);
    for name in ["a", "b", "c"] {
        h.node(node(name, "4", json!({}), json!([])));
    }
    for i in 0..6 {
        let p = replica(&mut h, &format!("web-{i}"));
        h.pod(p);
    }
    h.settle().await;
    assert_eq!(
        h.per_node().values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{:?}",
        h.placements()
    );

    let mut unselected = Harness::with_config(PACKING);
    for name in ["a", "b", "c"] {
        unselected.node(node(name, "4", json!({}), json!([])));
    }
    for i in 0..6 {
        unselected.pod(pod(
            &format!("p{i}"),
            "500m",
            json!({"app": "web"}),
            json!({}),
        ));
    }
    unselected.settle().await;
    assert_eq!(
        unselected.per_node().len(),
        1,
        "{:?}",
        unselected.per_node()
    );
}

#[tokio::test]
async fn listed_default_constraints_apply_to_pods_without_their_own() {
    let mut h = Harness::with_config(
        r#"
profiles:
- schedulerName: default-scheduler
  pluginConfig:
  - name: PodTopologySpread
    args:
      defaultingType: List
      defaultConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule}
"#,
    );
    zoned(&mut h);
    for i in 0..6 {
        let p = replica(&mut h, &format!("web-{i}"));
        h.pod(p);
    }
    // A pod with constraints of its own is held to those, not to the defaults.
    h.pod(pod(
        "own",
        "100m",
        json!({"app": "web"}),
        json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "rack",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "web"}}}]}),
    ));
    h.settle().await;
    assert_eq!(per_zone(&h, "web-"), [2, 2, 2], "{:?}", h.placements());
    assert!(
        h.failure("own")
            .is_some_and(|m| m.contains("missing required label")),
        "{:?}",
        h.failure("own")
    );
}

#[tokio::test]
async fn required_anti_affinity_keeps_replicas_apart_and_leaves_the_extra_pending() {
    let mut h = Harness::new();
    for name in ["a", "b", "c"] {
        h.node(node(name, "8", json!({}), json!([])));
    }
    let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "db"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
    for i in 0..4 {
        h.pod(pod(
            &format!("db-{i}"),
            "100m",
            json!({"app": "db"}),
            apart.clone(),
        ));
    }
    h.settle().await;
    assert_eq!(
        h.per_node().values().copied().collect::<Vec<_>>(),
        [1, 1, 1]
    );
    let pending = (0..4)
        .map(|i| format!("db-{i}"))
        .find(|p| !h.placements().contains_key(p))
        .expect("one pending");
    assert_eq!(
        h.failure(&pending).as_deref(),
        Some("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")
    );
}

#[tokio::test]
async fn existing_pods_anti_affinity_keeps_newcomers_out() {
    let mut h = Harness::new();
    h.node(node("a", "8", json!({}), json!([])));
    h.node(node("b", "8", json!({}), json!([])));
    h.pod(pod(
        "loner",
        "100m",
        json!({"app": "loner"}),
        json!({"nodeName": "a", "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname"}]}}}),
    ));
    for i in 0..3 {
        h.pod(pod(
            &format!("web-{i}"),
            "100m",
            json!({"app": "web"}),
            json!({}),
        ));
    }
    h.settle().await;
    assert_eq!(h.per_node().get("b"), Some(&3), "{:?}", h.placements());
}

#[tokio::test]
async fn required_affinity_follows_the_first_pod_of_the_group() {
    let mut h = Harness::new();
    for (name, zone) in [("a", "x"), ("b", "y"), ("c", "z")] {
        h.node(node(name, "8", json!({"zone": zone}), json!([])));
    }
    let together = json!({"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "cache"}}, "topologyKey": "zone"}]}}});
    for i in 0..4 {
        h.pod(pod(
            &format!("cache-{i}"),
            "100m",
            json!({"app": "cache"}),
            together.clone(),
        ));
    }
    h.settle().await;
    assert_eq!(h.per_node().len(), 1, "{:?}", h.placements());
    assert_eq!(h.placements().len(), 4);
}

#[tokio::test]
async fn a_high_priority_pod_preempts_lower_priority_pods_and_is_bound_after() {
    let mut h = Harness::new();
    h.node(node("only", "2", json!({}), json!([])));
    h.pod(pod(
        "low-a",
        "1",
        json!({"app": "low"}),
        json!({"priority": 0}),
    ));
    h.pod(pod(
        "low-b",
        "1",
        json!({"app": "low"}),
        json!({"priority": 0}),
    ));
    h.settle().await;
    assert_eq!(h.placements().len(), 2);
    h.pod(pod("urgent", "1500m", json!({}), json!({"priority": 1000})));
    h.settle().await;
    let evicted = h.evicted();
    assert_eq!(
        evicted.len(),
        2,
        "both low pods must go for 1.5 CPUs: {evicted:?}"
    );
    // The victims' deletion (confirmed by the harness) wakes the preemptor.
    h.settle().await;
    assert_eq!(
        h.placements().get("urgent").map(String::as_str),
        Some("only")
    );
}

#[tokio::test]
async fn preemption_evicts_as_few_and_as_unimportant_pods_as_it_can() {
    let mut h = Harness::new();
    h.node(node("a", "2", json!({}), json!([])));
    h.pod(pod(
        "mid",
        "1",
        json!({}),
        json!({"priority": 50, "nodeName": "a"}),
    ));
    h.pod(pod(
        "lowest",
        "1",
        json!({}),
        json!({"priority": 10, "nodeName": "a"}),
    ));
    h.pod(pod("urgent", "1", json!({}), json!({"priority": 1000})));
    h.settle().await;
    assert_eq!(h.evicted(), ["lowest"]);
}

#[tokio::test]
async fn preemption_prefers_victims_no_budget_protects() {
    let mut h = Harness::new();
    h.node(node("a", "1", json!({}), json!([])));
    h.node(node("b", "1", json!({}), json!([])));
    h.pod(pod(
        "guarded",
        "1",
        json!({"app": "guarded"}),
        json!({"priority": 0, "nodeName": "a"}),
    ));
    h.pod(pod(
        "free",
        "1",
        json!({"app": "free"}),
        json!({"priority": 0, "nodeName": "b"}),
    ));
    h.budget(json!({"metadata": {"name": "pdb", "namespace": "default"},
        "spec": {"selector": {"matchLabels": {"app": "guarded"}}}, "status": {"disruptionsAllowed": 0,
        "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}));
    h.pod(pod("urgent", "1", json!({}), json!({"priority": 1000})));
    h.settle().await;
    assert_eq!(h.evicted(), ["free"]);
}

#[tokio::test]
async fn preemption_policy_never_does_not_preempt() {
    let mut h = Harness::new();
    h.node(node("a", "1", json!({}), json!([])));
    h.pod(pod(
        "low",
        "1",
        json!({}),
        json!({"priority": 0, "nodeName": "a"}),
    ));
    h.pod(pod(
        "polite",
        "1",
        json!({}),
        json!({"priority": 1000, "preemptionPolicy": "Never"}),
    ));
    h.settle().await;
    assert!(h.evicted().is_empty());
    assert_eq!(
        h.failure("polite").as_deref(),
        Some("0/1 nodes are available: 1 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never.")
    );
}

#[tokio::test]
async fn gated_pods_wait_until_their_gates_are_removed() {
    let mut h = Harness::new();
    h.node(node("a", "4", json!({}), json!([])));
    h.pod(pod(
        "gated",
        "100m",
        json!({}),
        json!({"schedulingGates": [{"name": "example.com/wait"}]}),
    ));
    h.settle().await;
    assert!(h.placements().is_empty());
    assert_eq!(h.scheduler.pending().gated, 1);
    h.pod(pod("gated", "100m", json!({}), json!({})));
    h.settle().await;
    assert_eq!(h.placements().get("gated").map(String::as_str), Some("a"));
}

#[tokio::test]
async fn each_profile_places_only_its_own_pods() {
    let mut h = Harness::with_config(
        "profiles: [{schedulerName: default-scheduler}, {schedulerName: second}]\n",
    );
    h.node(node("a", "4", json!({}), json!([])));
    h.pod(pod(
        "mine",
        "100m",
        json!({}),
        json!({"schedulerName": "second"}),
    ));
    h.pod(pod(
        "theirs",
        "100m",
        json!({}),
        json!({"schedulerName": "someone-else"}),
    ));
    h.settle().await;
    assert_eq!(h.placements().keys().collect::<Vec<_>>(), ["mine"]);
}

#[tokio::test]
async fn an_unschedulable_pod_is_placed_once_a_node_it_fits_joins() {
    let mut h = Harness::new();
    h.node(node("small", "1", json!({}), json!([])));
    h.pod(pod("big", "2", json!({}), json!({})));
    h.settle().await;
    assert!(h.placements().is_empty());
    assert_eq!(h.scheduler.pending().unschedulable, 1);
    h.node(node("large", "4", json!({}), json!([])));
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    h.settle().await;
    assert_eq!(h.placements().get("big").map(String::as_str), Some("large"));
}

#[tokio::test]
async fn host_ports_in_use_push_pods_elsewhere() {
    let mut h = Harness::new();
    h.node(node("a", "4", json!({}), json!([])));
    h.node(node("b", "4", json!({}), json!([])));
    let port = |name: &str| {
        let mut p = pod(name, "100m", json!({}), json!({}));
        p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 80, "hostPort": 8080}]);
        p
    };
    h.pod(port("one"));
    h.pod(port("two"));
    h.pod(port("three"));
    h.settle().await;
    assert_eq!(h.per_node().values().copied().collect::<Vec<_>>(), [1, 1]);
    assert!(h.failure("three").is_some_and(|m| m.starts_with(
        "0/2 nodes are available: 2 node(s) didn't have free ports for the requested pod ports."
    )));
}

#[tokio::test]
async fn a_failed_binding_frees_the_node_and_is_retried() {
    let mut h = Harness::new();
    h.node(node("a", "1", json!({}), json!([])));
    h.fake.refuse.lock().expect("refuse").push("p".into());
    h.pod(pod("p", "1", json!({}), json!({})));
    h.settle().await;
    assert!(h.placements().is_empty());
    h.fake.refuse.lock().expect("refuse").clear();
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    h.settle().await;
    assert_eq!(h.placements().get("p").map(String::as_str), Some("a"));
}

#[tokio::test]
async fn nodes_holding_the_image_are_preferred() {
    let mut h = Harness::new();
    let mut with = node("with-image", "4", json!({}), json!([]));
    with["status"]["images"] =
        json!([{"names": ["docker.io/library/busybox:latest"], "sizeBytes": 500_000_000}]);
    h.node(with);
    h.node(node("without", "4", json!({}), json!([])));
    for i in 0..3 {
        h.pod(pod(&format!("p{i}"), "100m", json!({}), json!({})));
    }
    h.settle().await;
    assert_eq!(
        h.per_node().get("with-image"),
        Some(&3),
        "{:?}",
        h.placements()
    );
}

#[tokio::test]
async fn two_preemptors_are_not_promised_the_same_room() {
    let mut h = Harness::new();
    h.node(node("a", "2", json!({}), json!([])));
    h.node(node("b", "2", json!({}), json!([])));
    for (name, on) in [
        ("low-a1", "a"),
        ("low-a2", "a"),
        ("low-b1", "b"),
        ("low-b2", "b"),
    ] {
        h.pod(pod(
            name,
            "1",
            json!({}),
            json!({"priority": 0, "nodeName": on}),
        ));
    }
    h.settle().await;
    // The harness confirms evictions at once, so hold the victims: schedule one cycle each.
    h.pod(pod("urgent-1", "2", json!({}), json!({"priority": 1000})));
    h.pod(pod("urgent-2", "2", json!({}), json!({"priority": 1000})));
    h.settle().await;
    let placed = h.placements();
    assert_eq!(
        h.evicted().len(),
        4,
        "each needs a whole node: {:?}",
        h.evicted()
    );
    assert_ne!(placed.get("urgent-1"), placed.get("urgent-2"), "{placed:?}");
    assert!(
        placed.contains_key("urgent-1") && placed.contains_key("urgent-2"),
        "{placed:?}"
    );
}
