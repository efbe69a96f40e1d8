//! Two `rudder server`s on one PostgreSQL or etcd run one scheduler between them (leader
//! election on the Lease `kube-system/kube-scheduler`); when the leading server is killed
//! the other takes over, and every pod is bound, each exactly once (one `Scheduled` event,
//! and the reporting scheduler changes at the failover).

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube::Client;
use rudder_tests::RudderServer;
use serde_json::json;

async fn create_pods(client: &Client, from: usize, to: usize) {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for i in from..to {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("pod-{i}")},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                     "resources": {"requests": {"cpu": "100m"}}}]},
        }))
        .unwrap();
        pods.create(&PostParams::default(), &pod).await.unwrap();
    }
}

async fn bound(client: &Client) -> usize {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods.list(&ListParams::default()).await.unwrap();
    list.items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .count()
}

/// `Scheduled` events per pod, and the schedulers that reported them.
async fn scheduled_events(client: &Client) -> (BTreeMap<String, usize>, Vec<String>) {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut per_pod = BTreeMap::new();
    let mut reporters = Vec::new();
    for event in events.list(&ListParams::default()).await.unwrap().items {
        if event.reason.as_deref() != Some("Scheduled") {
            continue;
        }
        let pod = event.regarding.and_then(|r| r.name).unwrap_or_default();
        *per_pod.entry(pod).or_default() += event.series.map(|s| s.count as usize).unwrap_or(1);
        let instance = event.reporting_instance.unwrap_or_default();
        if !reporters.contains(&instance) {
            reporters.push(instance);
        }
    }
    (per_pod, reporters)
}

async fn the_scheduler_fails_over(storage: String) {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let args = ["--disable-controller-manager"];
    let first = RudderServer::start_with_args(binary, &storage, &args);
    let admin = rudder_tests::admin_client(first.kubeconfig()).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    rudder_tests::eventually(
        "the first server to lead",
        Duration::from_secs(30),
        || async { leases.get_opt("kube-scheduler").await.unwrap().is_some() },
    )
    .await;
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let mut second_args = args.to_vec();
    second_args.extend(["--token", token.trim()]);
    let second = RudderServer::start_with_args(binary, &storage, &second_args);
    let via_second = rudder_tests::admin_client(&first.kubeconfig_with(None, Some(&second))).await;

    let nodes: Api<Node> = Api::all(admin.clone());
    for name in ["node-a", "node-b"] {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"allocatable": {"cpu": "64", "memory": "64Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]},
        }))
        .unwrap();
        nodes.create(&PostParams::default(), &node).await.unwrap();
    }
    create_pods(&admin, 0, 20).await;
    rudder_tests::eventually(
        "the first 20 pods bound",
        Duration::from_secs(30),
        || async { bound(&admin).await == 20 && scheduled_events(&admin).await.0.len() == 20 },
    )
    .await;

    // The leader dies; pods keep coming through the other server.
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    create_pods(&via_second, 20, 40).await;
    rudder_tests::eventually(
        "all 40 pods bound after the failover",
        Duration::from_secs(45),
        || async { bound(&via_second).await == 40 },
    )
    .await;
    rudder_tests::eventually("40 Scheduled events", Duration::from_secs(15), || async {
        scheduled_events(&via_second).await.0.len() == 40
    })
    .await;
    let (per_pod, reporters) = scheduled_events(&via_second).await;
    assert!(
        per_pod.values().all(|n| *n == 1),
        "a pod bound twice: {per_pod:?}"
    );
    assert_eq!(
        reporters.len(),
        2,
        "both schedulers worked, one after the other: {reporters:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_fails_over_on_postgres() {
    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    the_scheduler_fails_over(harness.url()).await;
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_fails_over_on_etcd() {
    let Some(harness) = rudder_storage::testing::etcd().await else {
        return;
    };
    the_scheduler_fails_over(harness.url()).await;
    harness.cleanup().await;
}
