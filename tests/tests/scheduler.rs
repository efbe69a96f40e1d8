//! The scheduler inside `rudder server`, on every storage driver, driven by kubectl 1.33 as a
//! user would: three Ready Node objects with different labels, capacity and taints, and pods
//! that must land where upstream's kube-scheduler would put them — or stay Pending with its
//! message (resources, selectors, taints, preemption, profiles, gates, and the volume plugins:
//! a zoned volume, a ReadWriteOncePod claim). Until there is a kubelet, a stand-in finishes the deletion of pods that are
//! terminating (as a kubelet would once their containers stopped), so preemption completes.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Pod};
use kube::api::{Api, DeleteParams, ListParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::{Kubectl, RudderServer};

const PROFILES: &str = r#"
apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  pluginConfig:
  - name: NodeResourcesFit
    args: {scoringStrategy: {type: MostAllocated}}
"#;

/// Deletes terminating pods for good, as a kubelet would once their containers stopped.
fn finish_terminating_pods(client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .applied_objects()
            .boxed();
        while let Some(Ok(pod)) = events.next().await {
            if pod.metadata.deletion_timestamp.is_some() {
                let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap());
                let _ = api
                    .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                    .await;
            }
        }
    })
}

fn node(name: &str, zone: &str, cpu: &str, extra_labels: &str, taints: &str) -> String {
    format!(
        r#"apiVersion: v1
kind: Node
metadata:
  name: {name}
  labels: {{kubernetes.io/hostname: {name}, topology.kubernetes.io/zone: {zone}{extra_labels}}}
spec:
  taints: {taints}
status:
  capacity: {{cpu: "{cpu}", memory: 8Gi, pods: "110"}}
  allocatable: {{cpu: "{cpu}", memory: 8Gi, pods: "110"}}
  conditions: [{{type: Ready, status: "True", reason: KubeletReady, message: ready}}]
"#
    )
}

/// Where each pod of `namespace` is bound (unbound pods map to "").
async fn placements(pods: &Api<Pod>) -> BTreeMap<String, String> {
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
            (p.metadata.name.unwrap_or_default(), node)
        })
        .collect()
}

/// The PodScheduled condition's message of a pod.
async fn unschedulable_message(pods: &Api<Pod>, name: &str) -> Option<String> {
    let pod = pods.get(name).await.ok()?;
    pod.status?
        .conditions?
        .into_iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })?
        .message
}

async fn wait_bound(pods: &Api<Pod>, names: &[&str]) -> BTreeMap<String, String> {
    rudder_tests::eventually(
        &format!("{names:?} bound"),
        Duration::from_secs(60),
        || async {
            let placed = placements(pods).await;
            names
                .iter()
                .all(|n| placed.get(*n).is_some_and(|node| !node.is_empty()))
        },
    )
    .await;
    placements(pods).await
}

async fn pods_are_placed_as_upstream_would(storage: String) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("scheduler.yaml");
    std::fs::write(&config, PROFILES).unwrap();
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--scheduler-config",
            config.to_str().unwrap(),
            // The nodes are plain objects no kubelet renews: the node lifecycle controller
            // would taint them unreachable after 40 s and change what the scheduler says.
            "--controllers=*,-node-lifecycle,-taint-eviction-controller",
        ],
    );
    let client = rudder_tests::admin_client(server.kubeconfig()).await;
    let kubelet = finish_terminating_pods(client.clone());
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "placement".into(),
    };
    kubectl.ok(&["create", "namespace", "placement"]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "placement");
    let nodes = [
        node("node-a", "zone-a", "4", ", disk: ssd", "[]"),
        node("node-b", "zone-b", "4", "", "[]"),
        node("node-c", "zone-c", "2", "", "[]"),
    ]
    .join("---\n");
    kubectl.ok(&["apply", "-f", &kubectl.file("nodes.yaml", &nodes)]);

    // Requests: 3 CPUs fit on node-a or node-b only; a nodeSelector picks node-a.
    let basic = r#"
apiVersion: v1
kind: Pod
metadata: {name: big}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "3"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: on-ssd}
spec:
  nodeSelector: {disk: ssd}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: too-big}
spec:
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "5"}}}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("basic.yaml", basic)]);
    let placed = wait_bound(&pods, &["big", "on-ssd"]).await;
    assert!(
        ["node-a", "node-b"].contains(&placed["big"].as_str()),
        "{placed:?}"
    );
    assert_eq!(placed["on-ssd"], "node-a");
    rudder_tests::eventually("too-big's message", Duration::from_secs(60), || async {
        unschedulable_message(&pods, "too-big").await.as_deref()
            == Some("0/3 nodes are available: 3 Insufficient cpu. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")
    })
    .await;
    let describe = kubectl.ok_ns(&["describe", "pod", "too-big"]);
    assert!(describe.contains("FailedScheduling"), "{describe}");
    let events: Api<Event> = Api::namespaced(client.clone(), "placement");
    rudder_tests::eventually("a Scheduled event", Duration::from_secs(60), || async {
        events
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .iter()
            .any(|e| {
                e.reason.as_deref() == Some("Scheduled")
                    && e.message.as_deref().is_some_and(|m| {
                        m.starts_with("Successfully assigned placement/on-ssd to node-a")
                    })
            })
    })
    .await;
    kubectl.ok_ns(&[
        "delete",
        "pod",
        "big",
        "on-ssd",
        "too-big",
        "--grace-period=0",
        "--force",
    ]);

    // Spreading: 6 replicas with maxSkew 1 over three zones end 2/2/2.
    let spread = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: spread}
spec:
  replicas: 6
  selector: {matchLabels: {app: spread}}
  template:
    metadata: {labels: {app: spread}}
    spec:
      topologySpreadConstraints:
      - {maxSkew: 1, topologyKey: topology.kubernetes.io/zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {matchLabels: {app: spread}}}
      containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("spread.yaml", spread)]);
    rudder_tests::eventually("6 spread pods bound", Duration::from_secs(60), || async {
        let placed = placements(&pods).await;
        placed.len() == 6 && placed.values().all(|n| !n.is_empty())
    })
    .await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for node in placements(&pods).await.values() {
        *per_node.entry(node.clone()).or_default() += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        [2, 2, 2],
        "{per_node:?}"
    );
    kubectl.ok_ns(&["delete", "deployment", "spread"]);
    rudder_tests::eventually("spread pods gone", Duration::from_secs(60), || async {
        placements(&pods).await.is_empty()
    })
    .await;

    // Required anti-affinity: 4 replicas on 3 nodes, one Pending with upstream's message.
    let apart = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: apart}
spec:
  replicas: 4
  selector: {matchLabels: {app: apart}}
  template:
    metadata: {labels: {app: apart}}
    spec:
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
          - {labelSelector: {matchLabels: {app: apart}}, topologyKey: kubernetes.io/hostname}
      containers: [{name: c, image: busybox, resources: {requests: {cpu: 100m}}}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("apart.yaml", apart)]);
    rudder_tests::eventually("3 apart pods bound, 1 pending with the message", Duration::from_secs(60), || async {
        let placed = placements(&pods).await;
        let bound: Vec<&String> = placed.values().filter(|n| !n.is_empty()).collect();
        let Some(pending) = placed.iter().find(|(_, n)| n.is_empty()).map(|(p, _)| p.clone()) else {
            return false;
        };
        let distinct: std::collections::BTreeSet<&&String> = bound.iter().collect();
        placed.len() == 4
            && bound.len() == 3
            && distinct.len() == 3
            && unschedulable_message(&pods, &pending).await.as_deref()
                == Some("0/3 nodes are available: 3 node(s) didn't match pod anti-affinity rules. preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod.")
    })
    .await;
    kubectl.ok_ns(&["delete", "deployment", "apart"]);
    rudder_tests::eventually("apart pods gone", Duration::from_secs(60), || async {
        placements(&pods).await.is_empty()
    })
    .await;

    // Taints repel pods without a toleration; with one, the pod goes there.
    kubectl.ok(&["taint", "nodes", "node-c", "dedicated=infra:NoSchedule"]);
    let tainted = r#"
apiVersion: v1
kind: Pod
metadata: {name: intolerant}
spec:
  nodeSelector: {kubernetes.io/hostname: node-c}
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: tolerant}
spec:
  nodeSelector: {kubernetes.io/hostname: node-c}
  tolerations: [{key: dedicated, operator: Equal, value: infra, effect: NoSchedule}]
  containers: [{name: c, image: busybox}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("tainted.yaml", tainted)]);
    assert_eq!(wait_bound(&pods, &["tolerant"]).await["tolerant"], "node-c");
    rudder_tests::eventually("intolerant's message", Duration::from_secs(60), || async {
        unschedulable_message(&pods, "intolerant").await.as_deref()
            == Some("0/3 nodes are available: 1 node(s) had untolerated taint {dedicated: infra}, 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.")
    })
    .await;
    kubectl.ok(&["taint", "nodes", "node-c", "dedicated-"]);
    wait_bound(&pods, &["intolerant"]).await;
    kubectl.ok_ns(&[
        "delete",
        "pod",
        "intolerant",
        "tolerant",
        "--grace-period=0",
        "--force",
    ]);

    // Preemption: a high-priority pod that fits nowhere evicts lower-priority pods on
    // node-b and is bound there once they have terminated.
    let preemption = r#"
apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: urgent}
value: 1000000
---
apiVersion: v1
kind: Pod
metadata: {name: low-1}
spec:
  nodeSelector: {kubernetes.io/hostname: node-b}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
---
apiVersion: v1
kind: Pod
metadata: {name: low-2}
spec:
  nodeSelector: {kubernetes.io/hostname: node-b}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "2"}}}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("low.yaml", preemption)]);
    wait_bound(&pods, &["low-1", "low-2"]).await;
    let urgent = r#"
apiVersion: v1
kind: Pod
metadata: {name: urgent}
spec:
  priorityClassName: urgent
  nodeSelector: {kubernetes.io/hostname: node-b}
  containers: [{name: c, image: busybox, resources: {requests: {cpu: "3"}}}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("urgent.yaml", urgent)]);
    assert_eq!(wait_bound(&pods, &["urgent"]).await["urgent"], "node-b");
    rudder_tests::eventually(
        "both low pods preempted",
        Duration::from_secs(60),
        || async {
            let placed = placements(&pods).await;
            !placed.contains_key("low-1") && !placed.contains_key("low-2")
        },
    )
    .await;
    kubectl.ok_ns(&["delete", "pod", "urgent", "--grace-period=0", "--force"]);

    // Volumes: a pod whose bound volume is labelled with a zone goes to that zone's node
    // (VolumeZone); a ReadWriteOncePod claim serves one pod at a time (VolumeRestrictions).
    let volumes = r#"
apiVersion: v1
kind: PersistentVolume
metadata:
  name: pv-zone-b
  labels: {topology.kubernetes.io/zone: zone-b}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOnce]
  hostPath: {path: /tmp/pv-zone-b}
---
apiVersion: v1
kind: PersistentVolume
metadata: {name: pv-solo}
spec:
  capacity: {storage: 1Gi}
  accessModes: [ReadWriteOncePod]
  hostPath: {path: /tmp/pv-solo}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: zoned}
spec:
  storageClassName: ""
  volumeName: pv-zone-b
  accessModes: [ReadWriteOnce]
  resources: {requests: {storage: 1Gi}}
---
apiVersion: v1
kind: PersistentVolumeClaim
metadata: {name: solo}
spec:
  storageClassName: ""
  volumeName: pv-solo
  accessModes: [ReadWriteOncePod]
  resources: {requests: {storage: 1Gi}}
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("volumes.yaml", volumes)]);
    let with_claim = |name: &str, claim: &str| {
        format!(
            "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: busybox}}]\n  volumes: [{{name: data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n"
        )
    };
    let claimants = [with_claim("in-zone", "zoned"), with_claim("solo-1", "solo")].join("---\n");
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("claimants.yaml", &claimants)]);
    let placed = wait_bound(&pods, &["in-zone", "solo-1"]).await;
    assert_eq!(placed["in-zone"], "node-b");
    kubectl.ok_ns(&[
        "apply",
        "-f",
        &kubectl.file("solo-2.yaml", &with_claim("solo-2", "solo")),
    ]);
    rudder_tests::eventually("solo-2's message", Duration::from_secs(60), || async {
        unschedulable_message(&pods, "solo-2").await.is_some_and(|m| {
            m.starts_with("0/3 nodes are available: 3 node has pod using PersistentVolumeClaim with the same name and ReadWriteOncePod access mode.")
        })
    })
    .await;
    kubectl.ok_ns(&["delete", "pod", "solo-1", "--grace-period=0", "--force"]);
    wait_bound(&pods, &["solo-2"]).await;
    kubectl.ok_ns(&[
        "delete",
        "pod",
        "in-zone",
        "solo-2",
        "--grace-period=0",
        "--force",
    ]);

    // A second profile places pods that name it; pods naming no profile here stay Pending.
    let profiles = r#"
apiVersion: v1
kind: Pod
metadata: {name: packed}
spec:
  schedulerName: bin-packer
  containers: [{name: c, image: busybox}]
---
apiVersion: v1
kind: Pod
metadata: {name: someone-elses}
spec:
  schedulerName: not-rudder
  containers: [{name: c, image: busybox}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("profiles.yaml", profiles)]);
    wait_bound(&pods, &["packed"]).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(placements(&pods).await["someone-elses"], "");

    // A gated pod waits until its gate is removed.
    let gated = r#"
apiVersion: v1
kind: Pod
metadata: {name: gated}
spec:
  schedulingGates: [{name: example.com/quota}]
  containers: [{name: c, image: busybox}]
"#;
    kubectl.ok_ns(&["apply", "-f", &kubectl.file("gated.yaml", gated)]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(placements(&pods).await["gated"], "");
    let listed = kubectl.ok_ns(&["get", "pod", "gated"]);
    assert!(listed.contains("SchedulingGated"), "{listed}");
    kubectl.ok_ns(&[
        "patch",
        "pod",
        "gated",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#,
    ]);
    wait_bound(&pods, &["gated"]).await;

    // The in-process scheduler's and controllers' metrics are on the apiserver's /metrics.
    let metrics = kubectl.ok(&["get", "--raw", "/metrics"]);
    for name in [
        "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"}",
        "scheduler_pending_pods{queue=\"unschedulable\"}",
        "scheduler_pod_scheduling_sli_duration_seconds_bucket",
        "scheduler_preemption_victims_count",
        "workqueue_adds_total{name=\"replicaset\"}",
    ] {
        assert!(metrics.contains(name), "{name} missing from /metrics");
    }
    kubelet.abort();
}

rudder_tests::on_every_driver!(pods_are_placed_as_upstream_would;
    scheduling_on_sqlite => sqlite,
    scheduling_on_postgres => postgres,
    scheduling_on_etcd => etcd,
);
