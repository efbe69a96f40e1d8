//! The controller-manager inside `rudder server`, on every storage driver, driven by kubectl
//! 1.33 and kube-rs as a user would. Until there is a kubelet, a stand-in marks every pod
//! Running and Ready as soon as it exists (as upstream's integration tests do), so rollouts can
//! progress; a watch checks the rollout's bounds at every step.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, PodCondition, PodStatus, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::RudderServer;

const KUBECTL: &str = "1.33";

async fn client(server: &RudderServer) -> Client {
    rudder_tests::admin_client(server.kubeconfig()).await
}

/// Marks every pod that is not Ready as Running and Ready, as a kubelet would once it started.
fn ready_every_pod(client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                _ => continue,
            };
            if rudder_facts::pods::is_ready(&pod) || pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let status = Pod {
                status: Some(PodStatus {
                    phase: Some("Running".into()),
                    conditions: Some(vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
                        ..PodCondition::default()
                    }]),
                    ..PodStatus::default()
                }),
                ..Pod::default()
            };
            let api: Api<Pod> = Api::namespaced(client.clone(), &pod.namespace().unwrap());
            let _ = api
                .patch_status(
                    &pod.name_any(),
                    &PatchParams::default(),
                    &Patch::Merge(&status),
                )
                .await;
        }
    })
}

fn kubectl_ok(server: &RudderServer, args: &[&str]) -> String {
    server.kubectl_ok(KUBECTL, args)
}

/// Pods of the Deployment `web` (by its selector), as `(total, ready)` not being deleted.
fn web_pods(pods: &[Pod]) -> (usize, usize) {
    let web: Vec<&Pod> = pods
        .iter()
        .filter(|pod| pod.labels().get("app").map(String::as_str) == Some("web"))
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .collect();
    let ready = web
        .iter()
        .filter(|pod| rudder_facts::pods::is_ready(pod))
        .count();
    (web.len(), ready)
}

/// `(total, ready)` web pods after each change a watch saw.
type Counts = Arc<Mutex<Vec<(usize, usize)>>>;

/// Every pod count seen during a rollout, from a watch of the pods.
fn record_pod_counts(client: Client) -> (Counts, tokio::task::JoinHandle<()>) {
    let seen: Counts = Arc::default();
    let record = seen.clone();
    let task = tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut store: BTreeMap<String, Pod> = BTreeMap::new();
        let mut events = watcher(pods, watcher::Config::default()).boxed();
        while let Some(Ok(event)) = events.next().await {
            match event {
                watcher::Event::Apply(pod) | watcher::Event::InitApply(pod) => {
                    store.insert(pod.name_any(), pod);
                }
                watcher::Event::Delete(pod) => {
                    store.remove(&pod.name_any());
                }
                _ => continue,
            }
            let pods: Vec<Pod> = store.values().cloned().collect();
            record.lock().unwrap().push(web_pods(&pods));
        }
    });
    (seen, task)
}

async fn deployments_roll_out_scale_undo_and_clean_up(storage: String) {
    let server = RudderServer::start(env!("CARGO_BIN_EXE_rudder"), &storage);
    let client = client(&server).await;
    let kubelet = ready_every_pod(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let sets: Api<ReplicaSet> = Api::namespaced(client.clone(), "default");

    // The aggregated roles hold what they aggregate (clusterrole-aggregation).
    rudder_tests::eventually("view holds its rules", Duration::from_secs(60), || async {
        let roles: Api<k8s_openapi::api::rbac::v1::ClusterRole> = Api::all(client.clone());
        roles.get("view").await.unwrap().rules.is_some_and(|rules| {
            rules.iter().any(|rule| {
                rule.resources
                    .as_ref()
                    .is_some_and(|r| r.contains(&"pods".to_string()))
            })
        })
    })
    .await;

    // Every namespace gets its default ServiceAccount and the cluster's CA bundle.
    kubectl_ok(&server, &["create", "namespace", "team"]);
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "team");
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
    rudder_tests::eventually(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async { accounts.get_opt("default").await.unwrap().is_some() },
    )
    .await;
    rudder_tests::eventually("kube-root-ca.crt", Duration::from_secs(60), || async {
        maps.get_opt("kube-root-ca.crt")
            .await
            .unwrap()
            .and_then(|map| map.data)
            .is_some_and(|data| data["ca.crt"].contains("BEGIN CERTIFICATE"))
    })
    .await;

    // A Deployment of 4: one ReplicaSet, 4 pods, rolled out.
    kubectl_ok(
        &server,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=4",
        ],
    );
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    assert_eq!(
        sets.list(&ListParams::default()).await.unwrap().items.len(),
        1
    );
    let (total, ready) = web_pods(&pods.list(&ListParams::default()).await.unwrap().items);
    assert_eq!((total, ready), (4, 4));

    // A new image rolls out within maxSurge (25% of 4 → 1) and maxUnavailable (25% → 1).
    let (counts, recorder) = record_pod_counts(client.clone());
    tokio::time::sleep(Duration::from_millis(500)).await;
    kubectl_ok(
        &server,
        &["set", "image", "deployment/web", "busybox=busybox:1.36"],
    );
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    recorder.abort();
    let counts = counts.lock().unwrap().clone();
    assert!(counts.len() > 4, "the watch saw the rollout: {counts:?}");
    for (total, ready) in &counts {
        assert!(
            *total <= 5,
            "more than replicas + maxSurge pods: {counts:?}"
        );
        // Pods are marked ready moments after they appear; count what the bound promises.
        assert!(
            *ready >= 3 || *total < 4,
            "fewer than replicas - maxUnavailable ready: {counts:?}"
        );
    }
    let images: Vec<String> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|pod| pod.metadata.deletion_timestamp.is_none())
        .map(|pod| {
            pod.spec.as_ref().unwrap().containers[0]
                .image
                .clone()
                .unwrap()
        })
        .collect();
    assert_eq!(images, vec!["busybox:1.36"; 4]);
    let history = kubectl_ok(&server, &["rollout", "history", "deployment/web"]);
    assert!(
        history.contains("1 ") && history.contains("2 "),
        "{history}"
    );

    // What the controller recorded (events.k8s.io) shows in `kubectl describe` (core Events).
    rudder_tests::eventually(
        "describe shows the deployment's events",
        Duration::from_secs(60),
        || async {
            kubectl_ok(&server, &["describe", "deployment", "web"]).contains("ScalingReplicaSet")
        },
    )
    .await;

    // Undo returns to the first template, as revision 3.
    kubectl_ok(&server, &["rollout", "undo", "deployment/web"]);
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let web = deployments.get("web").await.unwrap();
    assert_eq!(
        web.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("busybox")
    );
    assert_eq!(
        web.metadata.annotations.unwrap()["deployment.kubernetes.io/revision"],
        "3"
    );

    // Paused, a new template waits; resumed, it rolls out.
    kubectl_ok(&server, &["rollout", "pause", "deployment/web"]);
    kubectl_ok(
        &server,
        &["set", "image", "deployment/web", "busybox=busybox:1.37"],
    );
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(
        sets.list(&ListParams::default()).await.unwrap().items.len(),
        2,
        "no new ReplicaSet while paused"
    );
    kubectl_ok(&server, &["rollout", "resume", "deployment/web"]);
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );

    // Scaling converges both ways.
    kubectl_ok(&server, &["scale", "deployment/web", "--replicas=0"]);
    rudder_tests::eventually("no pods", Duration::from_secs(60), || async {
        web_pods(&pods.list(&ListParams::default()).await.unwrap().items).0 == 0
    })
    .await;
    kubectl_ok(&server, &["scale", "deployment/web", "--replicas=5"]);
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/web", "--timeout=60s"],
    );
    assert_eq!(
        web_pods(&pods.list(&ListParams::default()).await.unwrap().items),
        (5, 5)
    );

    // Deleting the Deployment deletes its ReplicaSets and pods; with --cascade=orphan they stay.
    kubectl_ok(&server, &["delete", "deployment", "web"]);
    rudder_tests::eventually(
        "the ReplicaSets and pods to go",
        Duration::from_secs(60),
        || async {
            sets.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .is_empty()
                && web_pods(&pods.list(&ListParams::default()).await.unwrap().items).0 == 0
        },
    )
    .await;
    kubectl_ok(
        &server,
        &[
            "create",
            "deployment",
            "kept",
            "--image=busybox",
            "--replicas=2",
        ],
    );
    kubectl_ok(
        &server,
        &["rollout", "status", "deployment/kept", "--timeout=60s"],
    );
    kubectl_ok(
        &server,
        &["delete", "deployment", "kept", "--cascade=orphan"],
    );
    rudder_tests::eventually(
        "an orphaned ReplicaSet",
        Duration::from_secs(60),
        || async {
            let items = sets.list(&ListParams::default()).await.unwrap().items;
            items.len() == 1 && items[0].owner_references().is_empty()
        },
    )
    .await;
    assert_eq!(
        pods.list(&ListParams::default().labels("app=kept"))
            .await
            .unwrap()
            .items
            .len(),
        2,
        "the orphaned ReplicaSet keeps its pods"
    );

    // Deleting a namespace deletes what is in it, then the namespace.
    kubectl_ok(
        &server,
        &[
            "create",
            "deployment",
            "inside",
            "--image=busybox",
            "-n",
            "team",
        ],
    );
    let team_pods: Api<Pod> = Api::namespaced(client.clone(), "team");
    rudder_tests::eventually("a pod in team", Duration::from_secs(60), || async {
        !team_pods
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    kubectl_ok(&server, &["delete", "namespace", "team", "--timeout=60s"]);
    let gone = server.kubectl(KUBECTL, &["get", "namespace", "team"]);
    assert!(!gone.status.success(), "the namespace is gone");
    kubelet.abort();
}

rudder_tests::on_every_driver!(deployments_roll_out_scale_undo_and_clean_up;
    controllers_on_sqlite => sqlite,
    controllers_on_postgres => postgres,
    controllers_on_etcd => etcd,
);

/// The pod garbage collector keeps at most `--terminated-pod-gc-threshold` terminated pods,
/// deleting the oldest first; running pods are left alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terminated_pods_beyond_the_threshold_are_collected() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--terminated-pod-gc-threshold",
            "1",
            "--controllers",
            "pod-garbage-collector",
        ],
    );
    let client = client(&server).await;
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    nodes
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}})).unwrap(),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["done-1", "done-2", "done-3", "running"] {
        let pod = serde_json::json!({"metadata": {"name": name},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox"}]}});
        pods.create(
            &PostParams::default(),
            &serde_json::from_value(pod).unwrap(),
        )
        .await
        .unwrap();
        let phase = if name == "running" {
            "Running"
        } else {
            "Succeeded"
        };
        pods.patch_status(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"status": {"phase": phase}})),
        )
        .await
        .unwrap();
    }
    rudder_tests::eventually(
        "the two oldest terminated pods are collected",
        Duration::from_secs(60),
        || async {
            let mut names: Vec<String> = pods
                .list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter_map(|pod| pod.metadata.name)
                .collect();
            names.sort();
            names == ["done-3", "running"]
        },
    )
    .await;
}

/// A `kubernetes.io/service-account-token` Secret gets its account's long-lived token (valid
/// while the Secret holds it), and goes with its account.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_secrets_are_filled_and_go_with_their_account() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--controllers", "serviceaccount-token"],
    );
    let client = client(&server).await;
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    accounts
        .create(
            &PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": "robot"}})).unwrap(),
        )
        .await
        .unwrap();
    let secrets: Api<k8s_openapi::api::core::v1::Secret> =
        Api::namespaced(client.clone(), "default");
    let secret = serde_json::json!({"metadata": {"name": "robot-token",
            "annotations": {"kubernetes.io/service-account.name": "robot"}},
        "type": "kubernetes.io/service-account-token"});
    secrets
        .create(
            &PostParams::default(),
            &serde_json::from_value(secret).unwrap(),
        )
        .await
        .unwrap();
    rudder_tests::eventually(
        "the token Secret is filled",
        Duration::from_secs(60),
        || async {
            let data = secrets
                .get("robot-token")
                .await
                .unwrap()
                .data
                .unwrap_or_default();
            ["token", "ca.crt", "namespace"]
                .iter()
                .all(|key| data.contains_key(*key))
        },
    )
    .await;
    let data = secrets.get("robot-token").await.unwrap().data.unwrap();
    let token = String::from_utf8(data["token"].0.clone()).unwrap();
    let reviews: Api<k8s_openapi::api::authentication::v1::TokenReview> = Api::all(client.clone());
    let review = |token: String| {
        let reviews = reviews.clone();
        async move {
            let asked =
                serde_json::from_value(serde_json::json!({"spec": {"token": token}})).unwrap();
            reviews
                .create(&PostParams::default(), &asked)
                .await
                .unwrap()
                .status
                .unwrap()
        }
    };
    let status = review(token.clone()).await;
    assert_eq!(status.authenticated, Some(true));
    assert_eq!(
        status.user.unwrap().username.as_deref(),
        Some("system:serviceaccount:default:robot")
    );
    accounts.delete("robot", &Default::default()).await.unwrap();
    rudder_tests::eventually(
        "the token Secret goes with its account",
        Duration::from_secs(60),
        || async { secrets.get_opt("robot-token").await.unwrap().is_none() },
    )
    .await;
    assert_ne!(review(token).await.authenticated, Some(true));
}

/// A PodDisruptionBudget's status counts its pods (the disruption controller), as
/// `kubectl get pdb` shows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disruption_budgets_count_healthy_pods() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--controllers", "replicaset,deployment,disruption"],
    );
    let client = client(&server).await;
    let kubelet = ready_every_pod(client.clone());
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
        &[
            "create",
            "pdb",
            "web-min",
            "--selector=app=web",
            "--min-available=2",
        ],
    );
    kubectl_ok(
        &server,
        &[
            "create",
            "pdb",
            "web-max",
            "--selector=app=web",
            "--max-unavailable=50%",
        ],
    );
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), "default");
    for (name, desired, allowed) in [("web-min", 2, 1), ("web-max", 1, 2)] {
        rudder_tests::eventually(
            &format!("{name}'s status"),
            Duration::from_secs(60),
            || async {
                budgets
                    .get(name)
                    .await
                    .unwrap()
                    .status
                    .is_some_and(|status| {
                        status.expected_pods == 3
                            && status.current_healthy == 3
                            && status.desired_healthy == desired
                            && status.disruptions_allowed == allowed
                    })
            },
        )
        .await;
    }
    let table = kubectl_ok(&server, &["get", "pdb", "web-min"]);
    let row = table
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .collect::<Vec<_>>();
    assert_eq!(
        row,
        vec![
            "web-min",
            "2",
            "N/A",
            "1",
            row.last().copied().unwrap_or("")
        ],
        "{table}"
    );
    kubelet.abort();
}

/// Each controller works as its own ServiceAccount (upstream's
/// `--use-service-account-credentials`), held to its own role: the ReplicaSet controller's pod
/// creates are audited as `system:serviceaccount:kube-system:replicaset-controller`, which may
/// create pods but not read Secrets; the manager itself may create neither.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_controller_works_as_its_own_service_account() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let log = dir.path().join("audit.log");
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &[
            "--controllers",
            "replicaset,deployment,serviceaccount",
            "--audit-log-path",
            log.to_str().unwrap(),
        ],
    );
    let client = client(&server).await;
    kubectl_ok(
        &server,
        &[
            "create",
            "deployment",
            "web",
            "--image=busybox",
            "--replicas=2",
        ],
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    rudder_tests::eventually("two pods", Duration::from_secs(60), || async {
        pods.list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .len()
            == 2
    })
    .await;
    // The audit log says who created what.
    let creators = |resource: &str| -> Vec<String> {
        std::fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
            .filter(|event| {
                event["stage"] == "ResponseComplete"
                    && event["verb"] == "create"
                    && event["objectRef"]["resource"] == resource
                    && event["objectRef"]["subresource"].is_null()
                    && event["responseStatus"]["code"] == 201
            })
            .map(|event| event["user"]["username"].as_str().unwrap().to_string())
            .collect()
    };
    rudder_tests::eventually("pod creates audited", Duration::from_secs(10), || async {
        creators("pods").len() == 2
    })
    .await;
    assert_eq!(
        creators("pods"),
        vec!["system:serviceaccount:kube-system:replicaset-controller"; 2]
    );
    assert_eq!(
        creators("replicasets"),
        vec!["system:serviceaccount:kube-system:deployment-controller"]
    );
    // The manager made the accounts and asked for their tokens, as itself.
    let accounts: Api<ServiceAccount> = Api::namespaced(client.clone(), "kube-system");
    for account in [
        "replicaset-controller",
        "deployment-controller",
        "service-account-controller",
    ] {
        assert!(
            accounts.get_opt(account).await.unwrap().is_some(),
            "{account}"
        );
    }
    assert!(creators("serviceaccounts")
        .iter()
        .any(|user| user == "system:kube-controller-manager"));
    // What each identity may do, as RBAC answers for it.
    let rs = "system:serviceaccount:kube-system:replicaset-controller";
    for (who, verb, resource, answer) in [
        (rs, "create", "pods", "yes"),
        (rs, "get", "secrets", "no"),
        (rs, "list", "secrets", "no"),
        (rs, "create", "deployments.apps", "no"),
        ("system:kube-controller-manager", "create", "pods", "no"),
        (
            "system:kube-controller-manager",
            "update",
            "deployments.apps",
            "no",
        ),
        ("system:kube-controller-manager", "list", "pods", "yes"),
    ] {
        let output = server.kubectl(
            KUBECTL,
            &[
                "auth", "can-i", verb, resource, "-n", "default", "--as", who,
            ],
        );
        assert_eq!(
            String::from_utf8_lossy(&output.stdout).trim(),
            answer,
            "{who} {verb} {resource}"
        );
    }
    // A request as the controller's account for a Secret is refused.
    let denied = server.kubectl(
        KUBECTL,
        &["get", "secrets", "-n", "kube-system", "--as", rs],
    );
    assert!(!denied.status.success());
    assert!(
        String::from_utf8_lossy(&denied.stderr).contains("cannot list resource \"secrets\""),
        "{}",
        String::from_utf8_lossy(&denied.stderr)
    );
}
