//! Two `rudder server`s on one PostgreSQL or etcd run one controller-manager between them
//! (leader election on the Lease `kube-system/kube-controller-manager`). The leader is killed
//! in the middle of a Deployment's rollout; the other server takes the Lease and finishes the
//! rollout, and no step — before, during or after the failover — holds more pods than
//! `replicas + maxSurge`: no surplus pods, no duplicate ReplicaSets.
//!
//! A stand-in kubelet (as upstream's integration tests do) marks pods Running and Ready,
//! except pods of the new image until the leader is dead, so the rollout is caught mid-way.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::{eventually, RudderServer};
use serde_json::json;

const KUBECTL: &str = "1.33";
const REPLICAS: usize = 4;
const MAX_SURGE: usize = 1;

fn image_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|spec| spec.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default()
}

/// Marks pods Running and Ready every 300 ms, those of `held` images only once `released`.
fn stand_in_kubelet(
    client: Client,
    held: &'static str,
    released: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        loop {
            let list = pods.list(&ListParams::default()).await;
            for pod in list.map(|l| l.items).unwrap_or_default() {
                let waiting = image_of(&pod) == held && !released.load(Ordering::SeqCst);
                if waiting
                    || rudder_facts::pods::is_ready(&pod)
                    || pod.metadata.deletion_timestamp.is_some()
                {
                    continue;
                }
                let now = k8s_openapi::jiff::Timestamp::now().to_string();
                let status = json!({"status": {"phase": "Running", "conditions": [
                    {"type": "Ready", "status": "True", "lastTransitionTime": now}]}});
                let _ = pods
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

/// The most live `app=web` pods a watch has seen at once.
fn record_most_pods(client: Client) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<()>) {
    let most = Arc::new(AtomicUsize::new(0));
    let record = most.clone();
    let task = tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut live: BTreeSet<String> = BTreeSet::new();
        // A re-list builds a fresh set and replaces the old one when it is done.
        let mut relisting: Option<BTreeSet<String>> = None;
        let config = watcher::Config::default().labels("app=web");
        let mut events = watcher(pods, config).default_backoff().boxed();
        while let Some(event) = events.next().await {
            let Ok(event) = event else { continue };
            match event {
                watcher::Event::Init => relisting = Some(BTreeSet::new()),
                watcher::Event::InitApply(pod) => {
                    if pod.metadata.deletion_timestamp.is_none() {
                        relisting
                            .get_or_insert_with(BTreeSet::new)
                            .insert(pod.name_any());
                    }
                }
                watcher::Event::InitDone => live = relisting.take().unwrap_or_default(),
                watcher::Event::Apply(pod) => {
                    if pod.metadata.deletion_timestamp.is_none() {
                        live.insert(pod.name_any());
                    } else {
                        live.remove(&pod.name_any());
                    }
                }
                watcher::Event::Delete(pod) => {
                    live.remove(&pod.name_any());
                }
            }
            if live.len() > record.load(Ordering::SeqCst) {
                eprintln!("{} live web pods: {live:?}", live.len());
            }
            record.fetch_max(live.len(), Ordering::SeqCst);
        }
    });
    (most, task)
}

async fn holder(leases: &Api<Lease>) -> Option<String> {
    leases
        .get_opt("kube-controller-manager")
        .await
        .ok()
        .flatten()
        .and_then(|lease| lease.spec?.holder_identity)
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
spec:
  replicas: 4
  selector:
    matchLabels:
      app: web
  strategy:
    type: RollingUpdate
    rollingUpdate:
      maxSurge: 1
      maxUnavailable: 0
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: c
        image: web:1
";

async fn a_rollout_survives_its_leaders_death(storage: String) {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let args = ["--disable-scheduler"];
    let first = RudderServer::start_with_args(binary, &storage, &args);
    let admin = rudder_tests::admin_client(first.kubeconfig()).await;
    let leases: Api<Lease> = Api::namespaced(admin.clone(), "kube-system");
    eventually(
        "the first server to lead",
        Duration::from_secs(30),
        || async { holder(&leases).await.is_some() },
    )
    .await;
    let first_leader = holder(&leases).await.unwrap();
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let mut second_args = args.to_vec();
    second_args.extend(["--token", token.trim()]);
    let second = RudderServer::start_with_args(binary, &storage, &second_args);
    let second_kubeconfig = first.kubeconfig_with(None, Some(&second));
    let client = rudder_tests::admin_client(&second_kubeconfig).await;
    let released = Arc::new(AtomicBool::new(false));
    let kubelet = stand_in_kubelet(client.clone(), "web:2", released.clone());
    let (most, watch) = record_most_pods(client.clone());
    let kubectl = |args: &[&str]| {
        let output = first.kubectl_with(KUBECTL, &second_kubeconfig, args);
        assert_eq!(output.0, 0, "kubectl {args:?}: {}", output.2);
        output.1
    };

    let path = first.write_file("web.yaml", DEPLOYMENT);
    kubectl(&["apply", "-f", path.to_str().unwrap()]);
    kubectl(&["rollout", "status", "deployment/web", "--timeout=60s"]);

    // Mid-rollout: the first new pod is up but held unready.
    kubectl(&["set", "image", "deployment/web", "c=web:2"]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    eventually("the rollout to start", Duration::from_secs(30), || async {
        let list = pods.list(&ListParams::default().labels("app=web")).await;
        list.unwrap().items.iter().any(|p| image_of(p) == "web:2")
    })
    .await;
    assert_eq!(
        holder(&Api::namespaced(client.clone(), "kube-system")).await,
        Some(first_leader.clone())
    );
    let killed = std::process::Command::new("kill")
        .args(["-9", &first.pid().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    released.store(true, Ordering::SeqCst);

    // The other server takes over and finishes.
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
    eventually(
        "the second server to lead",
        Duration::from_secs(40),
        || async { holder(&leases).await.is_some_and(|h| h != first_leader) },
    )
    .await;
    kubectl(&["rollout", "status", "deployment/web", "--timeout=90s"]);
    eventually(
        "four web:2 pods and nothing else",
        Duration::from_secs(30),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap();
            let live: Vec<&Pod> = list
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            live.len() == REPLICAS && live.iter().all(|p| image_of(p) == "web:2")
        },
    )
    .await;
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");
    let sets = sets.list(&ListParams::default()).await.unwrap().items;
    let replicas: Vec<i32> = sets
        .iter()
        .map(|s| s.spec.as_ref().and_then(|spec| spec.replicas).unwrap_or(0))
        .collect();
    assert_eq!(sets.len(), 2, "one ReplicaSet per template: {replicas:?}");
    assert_eq!(replicas.iter().sum::<i32>(), 4, "{replicas:?}");
    let most = most.load(Ordering::SeqCst);
    assert!(
        most <= REPLICAS + MAX_SURGE,
        "at most replicas + maxSurge pods at any time, saw {most}"
    );
    kubelet.abort();
    watch.abort();
    drop(second);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_its_leaders_death_on_postgres() {
    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    a_rollout_survives_its_leaders_death(harness.url()).await;
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_survives_its_leaders_death_on_etcd() {
    let Some(harness) = rudder_storage::testing::etcd().await else {
        return;
    };
    a_rollout_survives_its_leaders_death(harness.url()).await;
    harness.cleanup().await;
}
