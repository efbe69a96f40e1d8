//! Nodes and what happens to their pods, on `rudder server` driven by kubectl 1.33 and kube-rs:
//! `kubectl drain` through the eviction API and a PodDisruptionBudget, the node lifecycle
//! controller (a node whose Lease is not renewed goes Unknown, is tainted, and its pods are
//! evicted once their toleration runs out) and node IPAM. Nodes are plain Node objects; a
//! stand-in kubelet marks pods Running and Ready and finishes their deletion, as upstream's
//! integration tests do.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::RudderServer;
use serde_json::json;

const KUBECTL: &str = "1.33";

async fn client(server: &RudderServer) -> Client {
    rudder_tests::admin_client(server.kubeconfig()).await
}

fn kubectl_ok(server: &RudderServer, args: &[&str]) -> String {
    server.kubectl_ok(KUBECTL, args)
}

/// Nodes whose (stand-in) kubelet is down.
type Dead = Arc<Mutex<HashSet<String>>>;

/// Stands in for the kubelets: a new pod bound to a node becomes Running and Ready, a pod
/// being deleted is removed (its containers "stopped") — except on the `dead` nodes.
fn stand_in_kubelet(client: Client, dead: Dead) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = events.next().await {
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap());
            let Some(node) = node_of(&pod) else {
                continue;
            };
            if dead.lock().unwrap().contains(&node) {
                continue;
            }
            let running = pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            if pod.metadata.deletion_timestamp.is_some() {
                let now = DeleteParams {
                    grace_period_seconds: Some(0),
                    ..DeleteParams::default()
                };
                let _ = api.delete(&pod.name_any(), &now).await;
            } else if !running {
                let status = json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True"}]}});
                let _ = api
                    .patch_status(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await;
            }
        }
    })
}

/// A Node object reporting Ready now, as a kubelet registers it.
async fn ready_node(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = json!({"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"capacity": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                   "allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"}}});
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(node).unwrap(),
        )
        .await
        .unwrap();
    post_ready(client, name).await;
}

/// The node's Ready condition True with a fresh heartbeat, as a kubelet posts it.
async fn post_ready(client: &Client, name: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True",
        "reason": "KubeletReady", "message": "kubelet is posting ready status",
        "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
    nodes
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&status))
        .await
        .unwrap();
}

fn node_of(pod: &Pod) -> Option<String> {
    pod.spec.as_ref().and_then(|spec| spec.node_name.clone())
}

/// Web pods not being deleted, by node.
async fn web_pods_on(pods: &Api<Pod>, node: &str) -> usize {
    pods.list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .filter(|pod| node_of(pod).as_deref() == Some(node))
        .count()
}

/// `kubectl drain` evicts a node's pods through `pods/eviction`, waiting (429) whenever the
/// PodDisruptionBudget has no disruption left, while the Deployment replaces them elsewhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_evicts_within_the_disruption_budget() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--controllers", "replicaset,deployment,disruption"],
    );
    let client = client(&server).await;
    let kubelet = stand_in_kubelet(client.clone(), Dead::default());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Discovery offers the eviction subresource as policy/v1 Eviction (what drain looks for).
    let discovery = kubectl_ok(&server, &["get", "--raw", "/api/v1"]);
    let resources: serde_json::Value = serde_json::from_str(&discovery).unwrap();
    let eviction = resources["resources"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == "pods/eviction")
        .cloned()
        .unwrap();
    assert_eq!(
        (&eviction["group"], &eviction["version"], &eviction["kind"]),
        (&json!("policy"), &json!("v1"), &json!("Eviction"))
    );

    // Three pods on n1, a budget that keeps two of them.
    ready_node(&client, "n1").await;
    kubectl_ok(
        &server,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=3",
        ],
    );
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    assert_eq!(web_pods_on(&pods, "n1").await, 3);
    kubectl_ok(
        &server,
        &[
            "create",
            "pdb",
            "web",
            "--selector=app=web",
            "--min-available=3",
        ],
    );
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    rudder_tests::eventually("the budget counts 3", Duration::from_secs(30), || async {
        budgets
            .get("web")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.current_healthy == 3 && s.observed_generation == Some(1))
    })
    .await;

    // A budget that allows nothing: 429 with upstream's message, and the pod stays.
    let victim = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items[0]
        .name_any();
    // (kube-rs retries 429s by itself unless told not to.)
    let kubeconfig = kube::config::Kubeconfig::read_from(server.kubeconfig()).unwrap();
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    config.default_retry = false;
    let once: Api<Pod> = Api::namespaced(Client::try_from(config).unwrap(), "default");
    let refused = once
        .evict(&victim, &EvictParams::default())
        .await
        .expect_err("the budget forbids");
    match refused {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 429, "{status:?}");
            assert_eq!(
                status.message,
                "Cannot evict pod as it would violate the pod's disruption budget."
            );
        }
        other => panic!("not a 429: {other:?}"),
    }
    assert!(pods.get_opt(&victim).await.unwrap().is_some());

    // One disruption at a time: drain retries while replacements come up on n2.
    kubectl_ok(
        &server,
        &[
            "patch",
            "pdb",
            "web",
            "--type=merge",
            "-p",
            r#"{"spec":{"minAvailable":2}}"#,
        ],
    );
    ready_node(&client, "n2").await;
    let output = server.kubectl(
        KUBECTL,
        &["drain", "n1", "--ignore-daemonsets", "--timeout=120s"],
    );
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(output.status.success(), "drain failed: {stderr}\n{stdout}");
    assert!(
        stderr.contains("Cannot evict pod as it would violate the pod's disruption budget."),
        "drain never waited for the budget: {stderr}"
    );
    assert!(stdout.contains("evicted"), "{stdout}");
    assert_eq!(web_pods_on(&pods, "n1").await, 0);
    rudder_tests::eventually("3 web pods on n2", Duration::from_secs(60), || async {
        web_pods_on(&pods, "n2").await == 3
    })
    .await;
    let n1: Api<Node> = Api::all(client.clone());
    assert_eq!(
        n1.get("n1").await.unwrap().spec.unwrap().unschedulable,
        Some(true),
        "drain cordons"
    );
    kubelet.abort();
}

/// Renews the Leases of `nodes` every second (as their kubelets would, faster), except for
/// the dead ones.
fn renew_leases(client: Client, nodes: Vec<String>, dead: Dead) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let leases: Api<Lease> = Api::namespaced(client, "kube-node-lease");
        loop {
            for node in &nodes {
                if dead.lock().unwrap().contains(node) {
                    continue;
                }
                let lease = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": node, "namespace": "kube-node-lease"},
                    "spec": {"holderIdentity": node, "leaseDurationSeconds": 40,
                        "renewTime": MicroTime(k8s_openapi::jiff::Timestamp::now())}});
                let _ = leases
                    .patch(
                        node,
                        &PatchParams::apply("stand-in-kubelet").force(),
                        &Patch::Apply(&lease),
                    )
                    .await;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    })
}

/// Whether the taint manager recorded `what default/<pod>` about `pod`.
async fn taint_manager_said(
    events: &Api<k8s_openapi::api::events::v1::Event>,
    what: &str,
    pod: &str,
) -> bool {
    let note = format!("{what} default/{pod}");
    events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .any(|event| {
            event.reason.as_deref() == Some("TaintManagerEviction")
                && event.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod)
                && event.note.as_deref() == Some(note.as_str())
        })
}

fn taints_of(node: &Node) -> Vec<String> {
    node.spec
        .as_ref()
        .and_then(|spec| spec.taints.as_ref())
        .map(|taints| {
            taints
                .iter()
                .map(|t| format!("{}:{}", t.key, t.effect))
                .collect()
        })
        .unwrap_or_default()
}

fn ready_condition(node: &Node) -> Option<NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready")
        .cloned()
}

/// A node whose Lease is no longer renewed goes Unknown and is tainted unreachable within the
/// grace period; its pods go NotReady and are evicted once their 5 s toleration runs out (and
/// replaced on the live node), each announced by a `TaintManagerEviction` event; a pod
/// tolerating it forever stays, and the taints are lifted when the node is back, calling off
/// the pending eviction of a pod tolerating it for 300 s. Node IPAM (dual-stack) gives each
/// node its own /24 and /64 meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_nodes_are_tainted_and_their_pods_evicted() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--controllers",
            "replicaset,deployment,node-lifecycle,taint-eviction-controller,nodeipam",
            "--node-monitor-grace-period",
            "3s",
            "--node-eviction-rate",
            "1",
            "--cluster-cidr",
            "10.42.0.0/16,fd42::/48",
        ],
    );
    let client = client(&server).await;
    let dead = Dead::default();
    let kubelet = stand_in_kubelet(client.clone(), dead.clone());
    let leases = renew_leases(client.clone(), vec!["n1".into(), "n2".into()], dead.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");

    // Everything starts on n2; then n1 joins.
    ready_node(&client, "n2").await;
    let deployment = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "c", "image": "busybox"}],
                "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 5}]}}}});
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(client.clone(), "default");
    deployments
        .create(
            &PostParams::default(),
            &serde_json::from_value(deployment).unwrap(),
        )
        .await
        .unwrap();
    let steady = json!({"metadata": {"name": "steady"}, "spec": {"nodeName": "n2",
        "containers": [{"name": "c", "image": "busybox"}],
        "tolerations": [{"operator": "Exists", "effect": "NoExecute"}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(steady).unwrap(),
    )
    .await
    .unwrap();
    // A pod that would wait out the unreachable taint for 300 s.
    let patient = json!({"metadata": {"name": "patient"}, "spec": {"nodeName": "n2",
        "containers": [{"name": "c", "image": "busybox"}],
        "tolerations": [{"key": "node.kubernetes.io/unreachable", "operator": "Exists",
            "effect": "NoExecute", "tolerationSeconds": 300}]}});
    pods.create(
        &PostParams::default(),
        &serde_json::from_value(patient).unwrap(),
    )
    .await
    .unwrap();
    rudder_tests::eventually(
        "2 web pods ready on n2",
        Duration::from_secs(60),
        || async { web_pods_on(&pods, "n2").await == 2 },
    )
    .await;
    ready_node(&client, "n1").await;

    // Node IPAM, dual-stack: distinct /24s and /64s of the cluster CIDRs, IPv4 first as listed.
    let mut cidrs = Vec::new();
    for name in ["n1", "n2"] {
        rudder_tests::eventually(
            &format!("{name}'s pod CIDR"),
            Duration::from_secs(30),
            || async {
                nodes
                    .get(name)
                    .await
                    .unwrap()
                    .spec
                    .unwrap_or_default()
                    .pod_cidr
                    .is_some()
            },
        )
        .await;
        let spec = nodes.get(name).await.unwrap().spec.unwrap();
        let cidr = spec.pod_cidr.unwrap();
        assert!(
            cidr.starts_with("10.42.") && cidr.ends_with(".0/24"),
            "{cidr}"
        );
        let all = spec.pod_cidrs.unwrap_or_default();
        assert_eq!(all.len(), 2, "{all:?}");
        assert_eq!(all[0], cidr);
        assert!(
            all[1].starts_with("fd42:") && all[1].ends_with("::/64"),
            "{all:?}"
        );
        cidrs.push(all);
    }
    assert_ne!(cidrs[0][0], cidrs[1][0]);
    assert_ne!(cidrs[0][1], cidrs[1][1]);

    // n2's kubelet stops: Unknown and tainted within the grace period (3 s) and a pass.
    let web_on_n2: Vec<String> = pods
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap()
        .items
        .iter()
        .map(|pod| pod.name_any())
        .collect();
    dead.lock().unwrap().insert("n2".into());
    let stopped = std::time::Instant::now();
    rudder_tests::eventually("n2 unreachable", Duration::from_secs(30), || async {
        let node = nodes.get("n2").await.unwrap();
        let taints = taints_of(&node);
        ready_condition(&node).is_some_and(|c| c.status == "Unknown")
            && taints.contains(&"node.kubernetes.io/unreachable:NoExecute".to_string())
            && taints.contains(&"node.kubernetes.io/unreachable:NoSchedule".to_string())
    })
    .await;
    let ready = ready_condition(&nodes.get("n2").await.unwrap()).unwrap();
    assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
    assert_eq!(
        ready.message.as_deref(),
        Some("Kubelet stopped posting node status.")
    );
    assert!(
        taints_of(&nodes.get("n1").await.unwrap()).is_empty(),
        "n1 is fine"
    );
    let steady_ready = |pod: &Pod| rudder_facts::pods::is_ready(pod);
    rudder_tests::eventually("n2's pods not ready", Duration::from_secs(30), || async {
        !steady_ready(&pods.get("steady").await.unwrap())
    })
    .await;

    // The web pods go after their 5 s toleration, marked by the taint manager, and are
    // replaced on n1; the pod that tolerates the taint forever stays.
    rudder_tests::eventually("n2's web pods evicted", Duration::from_secs(60), || async {
        let mut all_going = true;
        for name in &web_on_n2 {
            let pod = pods.get(name).await.unwrap();
            let marked = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| {
                    c.iter().any(|c| {
                        c.type_ == "DisruptionTarget"
                            && c.reason.as_deref() == Some("DeletionByTaintManager")
                    })
                });
            all_going &= pod.metadata.deletion_timestamp.is_some() && marked;
        }
        all_going
    })
    .await;
    assert!(
        stopped.elapsed() >= Duration::from_secs(5),
        "evicted before the toleration ran out"
    );
    rudder_tests::eventually("2 web pods on n1", Duration::from_secs(60), || async {
        web_pods_on(&pods, "n1").await == 2
    })
    .await;
    let steady = pods.get("steady").await.unwrap();
    assert!(
        steady.metadata.deletion_timestamp.is_none(),
        "tolerates forever"
    );
    // Each eviction was announced as upstream's taint manager does.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    for name in &web_on_n2 {
        let announced = taint_manager_said(&events, "Marking for deletion Pod", name).await;
        assert!(announced, "no TaintManagerEviction event for {name}");
    }

    // n2 comes back: its taints are lifted.
    dead.lock().unwrap().remove("n2");
    post_ready(&client, "n2").await;
    rudder_tests::eventually("n2's taints lifted", Duration::from_secs(30), || async {
        taints_of(&nodes.get("n2").await.unwrap()).is_empty()
    })
    .await;
    // The patient pod's pending eviction is called off, and said so.
    rudder_tests::eventually(
        "the patient pod's eviction cancelled",
        Duration::from_secs(30),
        || async { taint_manager_said(&events, "Cancelling deletion of Pod", "patient").await },
    )
    .await;
    assert!(pods
        .get("patient")
        .await
        .unwrap()
        .metadata
        .deletion_timestamp
        .is_none());

    // A node that goes releases its range; the next node gets the lowest free one.
    let freed = nodes
        .get("n1")
        .await
        .unwrap()
        .spec
        .unwrap_or_default()
        .pod_cidr
        .unwrap();
    nodes.delete("n1", &DeleteParams::default()).await.unwrap();
    rudder_tests::eventually("n1 gone", Duration::from_secs(30), || async {
        nodes.get_opt("n1").await.unwrap().is_none()
    })
    .await;
    ready_node(&client, "n3").await;
    // n2 took the first block, n1 the second: the freed one is the lowest free.
    rudder_tests::eventually("n3 gets n1's range", Duration::from_secs(30), || async {
        nodes
            .get("n3")
            .await
            .unwrap()
            .spec
            .unwrap_or_default()
            .pod_cidr
            .as_ref()
            == Some(&freed)
    })
    .await;
    leases.abort();
    kubelet.abort();
}
