//! The workload controllers beyond Deployments, inside `rudder server` on every storage driver,
//! driven by kubectl 1.33 and kube-rs as a user would: a DaemonSet has one pod per node and
//! rolls with `maxSurge` (the new pod beside the old, one node at a time); a StatefulSet
//! creates `web-0`, `web-1`, `web-2` in order and rolls with `maxUnavailable` 2; a CronJob runs
//! on schedule; the Endpoints of a Service without a selector are mirrored into an
//! EndpointSlice. Nodes are plain Node objects with a heartbeat, and a stand-in kubelet marks
//! pods Running and Ready (as upstream's integration tests do) and finishes their deletion —
//! except pods of an image the test holds back, which lets a rollout's bounds be seen standing
//! still.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::{eventually, RudderServer};
use serde_json::json;

const KUBECTL: &str = "1.33";
const NODES: [&str; 3] = ["node-a", "node-b", "node-c"];

fn kubectl_ok(server: &RudderServer, args: &[&str]) -> String {
    server.kubectl_ok(KUBECTL, args)
}

fn image_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Images whose pods the stand-in kubelet leaves unready for now.
type Held = Arc<Mutex<BTreeSet<String>>>;

/// Every 300 ms: each pod that is not Ready, not being deleted and not of a held image is
/// marked Running and Ready; each node posts a fresh Ready heartbeat every few seconds.
fn stand_in_kubelet(client: Client, held: Held) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let nodes: Api<Node> = Api::all(client.clone());
        let mut round = 0u32;
        loop {
            if round.is_multiple_of(10) {
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {"conditions": [{"type": "Ready",
                    "status": "True", "reason": "KubeletReady",
                    "lastHeartbeatTime": now, "lastTransitionTime": now}]}});
                for node in NODES {
                    let _ = nodes
                        .patch_status(node, &PatchParams::default(), &Patch::Strategic(&status))
                        .await;
                }
            }
            round += 1;
            let list = pods.list(&ListParams::default()).await;
            for pod in list.map(|l| l.items).unwrap_or_default() {
                let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap());
                if pod.metadata.deletion_timestamp.is_some() {
                    // Its containers stopped at once: the kubelet's final delete.
                    let _ = api
                        .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                        .await;
                    continue;
                }
                let blocked = held.lock().unwrap().contains(&image_of(&pod));
                if blocked || rudder_facts::pods::is_ready(&pod) {
                    continue;
                }
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
                let _ = api
                    .patch_status(
                        &pod.name_any(),
                        &PatchParams::default(),
                        &Patch::Merge(&status),
                    )
                    .await;
            }
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    })
}

async fn create_nodes(client: &Client) {
    let nodes: Api<Node> = Api::all(client.clone());
    for name in NODES {
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
    }
}

/// Live (not being deleted) pods whose `app` label is `app`.
async fn live_pods(client: &Client, app: &str) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await
        .unwrap();
    list.items
        .into_iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The node a DaemonSet pod is pinned to by its node affinity.
fn pinned_node(pod: &Pod) -> String {
    let affinity = serde_json::to_value(&pod.spec.as_ref().unwrap().affinity).unwrap();
    affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [0]["matchFields"][0]["values"][0]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// Names of pods in the order a watch first saw them.
fn record_creation_order(
    client: Client,
    app: &'static str,
) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>) {
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = order.clone();
    let task = tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let config = watcher::Config::default().labels(&format!("app={app}"));
        let mut events = watcher(pods, config).default_backoff().boxed();
        while let Some(Ok(event)) = events.next().await {
            if let watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) = event {
                let mut seen = record.lock().unwrap();
                if !seen.contains(&pod.name_any()) {
                    seen.push(pod.name_any());
                }
            }
        }
    });
    (order, task)
}

const DAEMONSET: &str = "apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: agent
spec:
  selector:
    matchLabels:
      app: agent
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        app: agent
    spec:
      containers:
      - name: c
        image: agent:1
";

const STATEFULSET: &str = "apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: web
spec:
  serviceName: web
  replicas: 3
  selector:
    matchLabels:
      app: web
  updateStrategy:
    type: RollingUpdate
    rollingUpdate:
      maxUnavailable: 2
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: c
        image: web:1
";

const CRONJOB: &str = "apiVersion: batch/v1
kind: CronJob
metadata:
  name: tick
spec:
  schedule: '* * * * *'
  jobTemplate:
    spec:
      template:
        spec:
          restartPolicy: Never
          containers:
          - name: c
            image: busybox
";

const EXTERNAL: &str = "apiVersion: v1
kind: Service
metadata:
  name: external
spec:
  ports:
  - name: sql
    port: 5432
---
apiVersion: v1
kind: Endpoints
metadata:
  name: external
  labels:
    team: data
subsets:
- addresses:
  - ip: 10.1.2.3
  - ip: 10.1.2.4
  ports:
  - name: sql
    port: 5432
";

async fn workloads_run_roll_and_mirror(storage: String) {
    let server = RudderServer::start(env!("CARGO_BIN_EXE_rudder"), &storage);
    let client = rudder_tests::admin_client(server.kubeconfig()).await;
    create_nodes(&client).await;
    let held: Held = Arc::default();
    let kubelet = stand_in_kubelet(client.clone(), held.clone());

    // A CronJob every minute: checked last, after the rest has had the time.
    let cron_created = tokio::time::Instant::now();
    let path = server.write_file("cronjob.yaml", CRONJOB);
    kubectl_ok(&server, &["apply", "-f", path.to_str().unwrap()]);

    // A DaemonSet: one pod per node.
    let path = server.write_file("daemonset.yaml", DAEMONSET);
    kubectl_ok(&server, &["apply", "-f", path.to_str().unwrap()]);
    kubectl_ok(
        &server,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    let pods = live_pods(&client, "agent").await;
    let nodes: BTreeSet<String> = pods.iter().map(pinned_node).collect();
    assert_eq!(pods.len(), 3, "one pod per node");
    assert_eq!(nodes, NODES.iter().map(|n| n.to_string()).collect());

    // maxSurge 1: with the new pods held unready, exactly one node runs both pods.
    held.lock().unwrap().insert("agent:2".into());
    kubectl_ok(&server, &["set", "image", "daemonset/agent", "c=agent:2"]);
    eventually("the first surge pod", Duration::from_secs(30), || async {
        live_pods(&client, "agent").await.len() == 4
    })
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods = live_pods(&client, "agent").await;
    let new: Vec<&Pod> = pods.iter().filter(|p| image_of(p) == "agent:2").collect();
    let old_ready = pods
        .iter()
        .filter(|p| image_of(p) == "agent:1" && rudder_facts::pods::is_ready(p))
        .count();
    assert_eq!(
        (pods.len(), new.len(), old_ready),
        (4, 1, 3),
        "one node surges, none is short"
    );
    held.lock().unwrap().clear();
    kubectl_ok(
        &server,
        &["rollout", "status", "daemonset/agent", "--timeout=60s"],
    );
    eventually(
        "every node on agent:2 alone",
        Duration::from_secs(30),
        || async {
            let pods = live_pods(&client, "agent").await;
            pods.len() == 3 && pods.iter().all(|p| image_of(p) == "agent:2")
        },
    )
    .await;

    // A StatefulSet: web-0, web-1, web-2 in order.
    let (order, watch) = record_creation_order(client.clone(), "web");
    let path = server.write_file("statefulset.yaml", STATEFULSET);
    kubectl_ok(&server, &["apply", "-f", path.to_str().unwrap()]);
    kubectl_ok(
        &server,
        &["rollout", "status", "statefulset/web", "--timeout=60s"],
    );
    eventually("three web pods seen", Duration::from_secs(10), || async {
        order.lock().unwrap().len() == 3
    })
    .await;
    assert_eq!(*order.lock().unwrap(), ["web-0", "web-1", "web-2"]);
    watch.abort();

    // maxUnavailable 2: with the new pods held unready, the two highest go at once (web-1 is
    // back on web:2 while web-2 waits to be created after it, in order) and web-0 waits.
    held.lock().unwrap().insert("web:2".into());
    kubectl_ok(&server, &["set", "image", "statefulset/web", "c=web:2"]);
    eventually(
        "web-2 and web-1 replaced",
        Duration::from_secs(30),
        || async {
            let images: BTreeMap<String, String> = live_pods(&client, "web")
                .await
                .iter()
                .map(|p| (p.name_any(), image_of(p)))
                .collect();
            images.get("web-2").map(String::as_str) != Some("web:1")
                && images.get("web-1").map(String::as_str) == Some("web:2")
        },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let web0 = live_pods(&client, "web").await;
    let web0 = web0.iter().find(|p| p.name_any() == "web-0").unwrap();
    assert_eq!(image_of(web0), "web:1", "two unavailable: web-0 waits");
    held.lock().unwrap().clear();
    kubectl_ok(
        &server,
        &["rollout", "status", "statefulset/web", "--timeout=60s"],
    );
    eventually(
        "every web pod on web:2",
        Duration::from_secs(30),
        || async {
            let pods = live_pods(&client, "web").await;
            pods.len() == 3 && pods.iter().all(|p| image_of(p) == "web:2")
        },
    )
    .await;

    // A Service without a selector: its Endpoints mirrored into an EndpointSlice.
    let path = server.write_file("external.yaml", EXTERNAL);
    kubectl_ok(&server, &["apply", "-f", path.to_str().unwrap()]);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    let mirrored = ListParams::default()
        .labels("endpointslice.kubernetes.io/managed-by=endpointslicemirroring-controller.k8s.io");
    let addresses = |slices: &[EndpointSlice]| -> Vec<String> {
        slices
            .iter()
            .flat_map(|s| s.endpoints.iter().flat_map(|e| e.addresses.clone()))
            .collect()
    };
    eventually("the mirrored slice", Duration::from_secs(30), || async {
        let list = slices.list(&mirrored).await.unwrap().items;
        addresses(&list) == ["10.1.2.3", "10.1.2.4"]
    })
    .await;
    let list = slices.list(&mirrored).await.unwrap().items;
    assert_eq!(
        list.len(),
        1,
        "only the selector-less Service's Endpoints are mirrored"
    );
    let labels = list[0].labels();
    assert_eq!(labels["kubernetes.io/service-name"], "external");
    assert_eq!(labels["team"], "data");
    let shown = kubectl_ok(
        &server,
        &[
            "get",
            "endpointslices",
            "-l",
            "kubernetes.io/service-name=external",
        ],
    );
    assert!(shown.contains("10.1.2.3,10.1.2.4"), "{shown}");
    kubectl_ok(
        &server,
        &[
            "patch",
            "endpoints",
            "external",
            "--type=json",
            "-p",
            r#"[{"op": "replace", "path": "/subsets/0/addresses/1/ip", "value": "10.1.2.9"}]"#,
        ],
    );
    eventually(
        "the slice follows its Endpoints",
        Duration::from_secs(30),
        || async {
            addresses(&slices.list(&mirrored).await.unwrap().items) == ["10.1.2.3", "10.1.2.9"]
        },
    )
    .await;
    kubectl_ok(&server, &["delete", "service", "external"]);
    eventually(
        "the slice goes with the Service",
        Duration::from_secs(30),
        || async { slices.list(&mirrored).await.unwrap().items.is_empty() },
    )
    .await;

    // The CronJob has run by now (its first minute boundary has passed).
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let left = Duration::from_secs(75).saturating_sub(cron_created.elapsed());
    eventually(
        "the CronJob's first Job",
        left.max(Duration::from_secs(5)),
        || async {
            jobs.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .iter()
                .any(|job| job.name_any().starts_with("tick-"))
        },
    )
    .await;
    let cronjob = kubectl_ok(
        &server,
        &[
            "get",
            "cronjob",
            "tick",
            "-o",
            "jsonpath={.status.lastScheduleTime}",
        ],
    );
    assert!(!cronjob.is_empty(), "lastScheduleTime is set");
    kubelet.abort();
}

rudder_tests::on_every_driver!(workloads_run_roll_and_mirror;
    workloads_on_sqlite => sqlite,
    workloads_on_postgres => postgres,
    workloads_on_etcd => etcd,
);
