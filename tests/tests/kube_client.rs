//! kube-rs against the apiserver on every storage driver: typed CRUD through `kube::Api`,
//! errors as `Status`, kube-runtime watchers (listing, and streaming lists) that must see every
//! event, and two apiservers on
//! one shared store where a watch on one sees writes made through the other.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::{Api, Client};
use rudder_apiserver::server::Running;
use rudder_storage::testing::{self, Harness};
use serde_json::json;

async fn start(harness: &dyn Harness) -> (Running, tempfile::TempDir) {
    rudder_tests::start_apiserver(harness, |_| {}).await
}

async fn client(running: &Running) -> Client {
    rudder_tests::admin_client(&running.kubeconfig).await
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(BTreeMap::from([("suite".to_string(), "kube".to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("key".to_string(), value.to_string())])),
        ..Default::default()
    }
}

async fn crud(harness: Box<dyn Harness>) {
    let (running, _dir) = start(harness.as_ref()).await;
    let client = client(&running).await;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let names: Vec<String> = namespaces
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|ns| ns.metadata.name)
        .collect();
    for system in ["default", "kube-node-lease", "kube-public", "kube-system"] {
        assert!(names.contains(&system.to_string()), "{names:?}");
    }

    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let created = api
        .create(&PostParams::default(), &configmap("one", "1"))
        .await
        .unwrap();
    let uid = created.metadata.uid.clone().unwrap();
    assert!(created.metadata.creation_timestamp.is_some());
    let first_version = created.metadata.resource_version.clone().unwrap();

    let error = api
        .create(&PostParams::default(), &configmap("one", "1"))
        .await
        .unwrap_err();
    match error {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert_eq!(status.reason, "AlreadyExists");
        }
        other => panic!("expected a Status, got {other:?}"),
    }

    let mut fetched = api.get("one").await.unwrap();
    assert_eq!(fetched.metadata.uid.as_deref(), Some(uid.as_str()));
    fetched.data = Some(BTreeMap::from([("key".to_string(), "2".to_string())]));
    let replaced = api
        .replace("one", &PostParams::default(), &fetched)
        .await
        .unwrap();
    assert_ne!(
        replaced.metadata.resource_version.as_deref(),
        Some(first_version.as_str())
    );

    // The first read's resourceVersion is stale now: a replace with it conflicts.
    let mut stale = created.clone();
    stale.data = Some(BTreeMap::from([("key".to_string(), "3".to_string())]));
    match api
        .replace("one", &PostParams::default(), &stale)
        .await
        .unwrap_err()
    {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"))
        }
        other => panic!("expected a conflict, got {other:?}"),
    }

    let patched = api
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"patched": "yes"}}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.metadata.labels.unwrap()["patched"], "yes");
    let patched = api
        .patch(
            "one",
            &PatchParams::default(),
            &Patch::Json::<()>(
                serde_json::from_value(json!([
                    {"op": "replace", "path": "/data/key", "value": "json"}
                ]))
                .unwrap(),
            ),
        )
        .await
        .unwrap();
    assert_eq!(patched.data.unwrap()["key"], "json");

    for index in 0..5 {
        api.create(
            &PostParams::default(),
            &configmap(&format!("page-{index}"), "x"),
        )
        .await
        .unwrap();
    }
    let page = api
        .list(&ListParams::default().labels("suite=kube").limit(2))
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
    let token = page.metadata.continue_.clone().unwrap();
    let mut seen = page.items.len();
    let mut next = Some(token);
    while let Some(token) = next {
        let page = api
            .list(
                &ListParams::default()
                    .labels("suite=kube")
                    .limit(2)
                    .continue_token(&token),
            )
            .await
            .unwrap();
        seen += page.items.len();
        next = page.metadata.continue_.filter(|token| !token.is_empty());
    }
    assert_eq!(seen, 6);

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}
    }))
    .unwrap();
    let created = deployments
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let spec = created.spec.unwrap();
    assert_eq!(spec.replicas, Some(1));
    assert_eq!(spec.revision_history_limit, Some(10));
    let container = &spec.template.spec.unwrap().containers[0];
    assert_eq!(container.image_pull_policy.as_deref(), Some("IfNotPresent"));
    let scale = deployments.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(1));
    deployments
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await
        .unwrap();
    let scaled = deployments.get("web").await.unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(4));
    assert_eq!(scaled.metadata.generation, Some(2));

    // Server-side apply: creates, tracks managers, conflicts, and yields to force.
    let applied = json!({"apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "applied"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "applied"}},
            "template": {"metadata": {"labels": {"app": "applied"}},
                "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
    let first = deployments
        .patch(
            "applied",
            &PatchParams::apply("first"),
            &Patch::Apply(&applied),
        )
        .await
        .unwrap();
    let managers: Vec<String> = first
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert_eq!(managers, vec!["first"]);
    let mut rival = applied.clone();
    rival["spec"]["replicas"] = json!(5);
    match deployments
        .patch(
            "applied",
            &PatchParams::apply("second"),
            &Patch::Apply(&rival),
        )
        .await
        .unwrap_err()
    {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 409);
            assert!(
                status.message.contains("conflict with \"first\""),
                "{}",
                status.message
            );
            assert!(
                status.message.contains(".spec.replicas"),
                "{}",
                status.message
            );
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    let forced = deployments
        .patch(
            "applied",
            &PatchParams::apply("second").force(),
            &Patch::Apply(&rival),
        )
        .await
        .unwrap();
    assert_eq!(forced.spec.unwrap().replicas, Some(5));
    // A strategic merge patch adds a container by name; a merge patch would replace the list.
    let strategic = json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "image": "busybox"}]}}}});
    let patched = deployments
        .patch(
            "applied",
            &PatchParams::default(),
            &Patch::Strategic(&strategic),
        )
        .await
        .unwrap();
    let names: Vec<String> = patched
        .spec
        .unwrap()
        .template
        .spec
        .unwrap()
        .containers
        .into_iter()
        .map(|c| c.name)
        .collect();
    assert_eq!(names, vec!["sidecar", "web"]);
    let managers: Vec<(String, String)> = patched
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| {
            (
                m.manager.unwrap_or_default(),
                m.operation.unwrap_or_default(),
            )
        })
        .collect();
    assert!(
        managers
            .iter()
            .any(|(manager, operation)| operation == "Update" && !manager.is_empty()),
        "{managers:?}"
    );

    // The scheduler's path: bind a pod once; a bound pod is deleted gracefully.
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": "bound"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}}))
    .unwrap();
    let created = pods.create(&PostParams::default(), &pod).await.unwrap();
    assert_eq!(created.status.unwrap().phase.as_deref(), Some("Pending"));
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "bound"},
        "target": {"kind": "Node", "name": "node-1"}});
    let request = http::Request::post("/api/v1/namespaces/default/pods/bound/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    client.request_text(request).await.unwrap();
    let bound = pods.get("bound").await.unwrap();
    assert_eq!(bound.spec.unwrap().node_name.as_deref(), Some("node-1"));
    let conditions = bound.status.unwrap().conditions.unwrap();
    assert!(conditions
        .iter()
        .any(|c| c.type_ == "PodScheduled" && c.status == "True"));
    let request = http::Request::post("/api/v1/namespaces/default/pods/bound/binding")
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&binding).unwrap())
        .unwrap();
    assert!(
        client.request_text(request).await.is_err(),
        "a second binding must conflict"
    );
    pods.delete("bound", &DeleteParams::default())
        .await
        .unwrap();
    let terminating = pods.get("bound").await.unwrap();
    assert!(terminating.metadata.deletion_timestamp.is_some());
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("bound", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("bound").await.unwrap().is_none());

    api.delete("one", &DeleteParams::default()).await.unwrap();
    match api.get("one").await.unwrap_err() {
        kube::Error::Api(status) => {
            assert_eq!(status.code, 404);
            assert_eq!(status.message, "configmaps \"one\" not found");
        }
        other => panic!("expected NotFound, got {other:?}"),
    }
    running.stop().await.unwrap();
    harness.cleanup().await;
}

/// Collects watcher events until `done` says the expected ones arrived (or time runs out).
/// A kube-runtime watcher — listing first, and streaming its list as WATCH events
/// (`sendInitialEvents`, KEP-3157) — must see every event.
async fn watch_everything(harness: Box<dyn Harness>) {
    let (running, _dir) = start(harness.as_ref()).await;
    let client = client(&running).await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut before = configmap("before", "0");
    before.metadata.labels = Some(BTreeMap::from([("suite".into(), "watch".into())]));
    api.create(&PostParams::default(), &before).await.unwrap();
    let listing = watcher(
        api.clone(),
        watcher::Config::default().labels("suite=watch"),
    )
    .applied_objects_or_deleted();
    let streaming = watcher(
        api.clone(),
        watcher::Config::default()
            .labels("suite=watch")
            .streaming_lists(),
    )
    .applied_objects_or_deleted();
    let writer = tokio::spawn({
        let api = api.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            for index in 0..20 {
                let mut cm = configmap(&format!("w-{index}"), "0");
                cm.metadata.labels = Some(BTreeMap::from([("suite".into(), "watch".into())]));
                api.create(&PostParams::default(), &cm).await.unwrap();
                api.patch(
                    &format!("w-{index}"),
                    &PatchParams::default(),
                    &Patch::Merge(json!({"data": {"key": "1"}})),
                )
                .await
                .unwrap();
            }
            for index in 0..20 {
                api.delete(&format!("w-{index}"), &DeleteParams::default())
                    .await
                    .unwrap();
            }
        }
    });
    let (listed, streamed) = tokio::time::timeout(
        Duration::from_secs(60),
        futures::future::join(collect(listing), collect(streaming)),
    )
    .await
    .unwrap();
    writer.await.unwrap();
    for (how, seen) in [("listing", listed), ("streaming", streamed)] {
        let start: Vec<(&str, &str)> = seen
            .iter()
            .take(2)
            .map(|(name, what)| (name.as_str(), what.as_str()))
            .collect();
        assert_eq!(start, [("before", "applied 0"), ("", "init done")], "{how}");
        for index in 0..20 {
            let name = format!("w-{index}");
            let history: Vec<&str> = seen
                .iter()
                .filter(|(n, _)| *n == name)
                .map(|(_, what)| what.as_str())
                .collect();
            assert_eq!(
                history,
                vec!["applied 0", "applied 1", "deleted"],
                "{how} {name}: {history:?}"
            );
        }
    }
    running.stop().await.unwrap();
    harness.cleanup().await;
}

/// What a watcher saw — (name, "applied <key>" | "deleted") — until 20 objects were deleted.
async fn collect(
    events: impl futures::Stream<Item = Result<Event, watcher::Error>>,
) -> Vec<(String, String)> {
    let mut seen: Vec<(String, String)> = Vec::new();
    let mut stream = std::pin::pin!(events);
    while let Some(event) = stream.try_next().await.unwrap() {
        match event {
            Event::Applied(cm) => {
                let value = cm
                    .data
                    .unwrap_or_default()
                    .get("key")
                    .cloned()
                    .unwrap_or_default();
                seen.push((cm.metadata.name.unwrap(), format!("applied {value}")));
            }
            Event::Deleted(cm) => seen.push((cm.metadata.name.unwrap(), "deleted".into())),
            Event::InitDone => seen.push((String::new(), "init done".into())),
        }
        if seen.iter().filter(|(_, what)| what == "deleted").count() == 20 {
            break;
        }
    }
    seen
}

/// What `applied_objects_or_deleted` yields.
enum Event {
    Applied(ConfigMap),
    Deleted(ConfigMap),
    /// The initial list (or stream of initial events) is complete.
    InitDone,
}

trait AppliedOrDeleted {
    fn applied_objects_or_deleted(
        self,
    ) -> impl futures::Stream<Item = Result<Event, watcher::Error>>;
}

impl<S> AppliedOrDeleted for S
where
    S: futures::Stream<Item = Result<watcher::Event<ConfigMap>, watcher::Error>>,
{
    fn applied_objects_or_deleted(
        self,
    ) -> impl futures::Stream<Item = Result<Event, watcher::Error>> {
        self.map_ok(|event| {
            futures::stream::iter(match event {
                watcher::Event::Apply(cm) | watcher::Event::InitApply(cm) => {
                    vec![Ok(Event::Applied(cm))]
                }
                watcher::Event::Delete(cm) => vec![Ok(Event::Deleted(cm))],
                watcher::Event::InitDone => vec![Ok(Event::InitDone)],
                watcher::Event::Init => vec![],
            })
        })
        .try_flatten()
    }
}

/// Two apiservers on one store: a watch through one sees a write through the other.
async fn two_servers_share_watches(harness: Box<dyn Harness>) {
    let (first, first_dir) = start(harness.as_ref()).await;
    // The second server joins the first's cluster: the same store and the same token.
    let token = std::fs::read_to_string(first_dir.path().join("token")).unwrap();
    let (second, _second_dir) = rudder_tests::start_apiserver(harness.as_ref(), |config| {
        config.cluster_token = Some(token.trim().to_string())
    })
    .await;
    let watching: Api<ConfigMap> = Api::namespaced(client(&first).await, "default");
    let writing: Api<ConfigMap> = Api::namespaced(client(&second).await, "default");
    let mut events = std::pin::pin!(watcher(
        watching,
        watcher::Config::default().labels("suite=kube")
    )
    .applied_objects_or_deleted());
    // Wait for the initial list to finish before writing.
    tokio::time::sleep(Duration::from_millis(500)).await;
    writing
        .create(&PostParams::default(), &configmap("across", "x"))
        .await
        .unwrap();
    let event = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            if let Some(Event::Applied(cm)) = events.try_next().await.unwrap() {
                if cm.metadata.name.as_deref() == Some("across") {
                    return cm;
                }
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(event.data.unwrap()["key"], "x");
    first.stop().await.unwrap();
    second.stop().await.unwrap();
    harness.cleanup().await;
}

macro_rules! on_every_driver {
    ($check:ident; $($name:ident => $driver:ident),+ $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let Some(harness) = testing::$driver().await else { return };
                $check(harness).await;
            }
        )+
    };
}

on_every_driver!(crud; crud_works_on_sqlite => sqlite, crud_works_on_postgres => postgres, crud_works_on_etcd => etcd);
on_every_driver!(watch_everything;
    a_watcher_sees_every_event_on_sqlite => sqlite,
    a_watcher_sees_every_event_on_postgres => postgres,
    a_watcher_sees_every_event_on_etcd => etcd);
on_every_driver!(two_servers_share_watches;
    two_servers_on_one_postgres_share_watches => postgres,
    two_servers_on_one_etcd_share_watches => etcd);

/// Stopping a server ends the watches it serves at once (not after the connections' grace
/// period), and nothing it spawned still holds the store afterwards — its owner closes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_a_server_ends_its_watches_and_lets_go_of_the_store() {
    let harness = testing::sqlite().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut config = rudder_apiserver::Config::new(dir.path());
    config.listen = "127.0.0.1:0".parse().unwrap();
    let store = rudder_storage::open(&harness.url()).await.unwrap();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let running = rudder_apiserver::server::start(config, store.clone(), shutdown.clone())
        .await
        .unwrap();
    let namespaces: Api<Namespace> = Api::all(client(&running).await);
    let mut watch = namespaces
        .watch(&kube::api::WatchParams::default().timeout(290), "0")
        .await
        .unwrap()
        .boxed();
    // The replay's first event: the watch is being served.
    watch.try_next().await.unwrap().unwrap();

    let started = std::time::Instant::now();
    running.stop().await.unwrap();
    let took = started.elapsed();
    assert!(
        took < rudder_apiserver::tls::SHUTDOWN_GRACE / 2,
        "stop took {took:?} with a watch open"
    );
    assert!(
        !shutdown.is_cancelled(),
        "stop ends this server, not its caller's other work"
    );
    // What the server ran lets go of the store as it ends; on a loaded machine the last of
    // it may still be unwinding a moment after stop returns, but never for long.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::sync::Arc::strong_count(&store) > 1 && std::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        std::sync::Arc::strong_count(&store),
        1,
        "a task of the stopped server still holds the store"
    );
    store.close().await;
}

/// `/metrics` carries the storage calls under the API: a latency histogram per operation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_metrics_time_the_storage_calls_under_the_api() {
    let harness = testing::sqlite().await.unwrap();
    let (running, _dir) = start(harness.as_ref()).await;
    let client = client(&running).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    configmaps
        .create(&PostParams::default(), &configmap("timed", "1"))
        .await
        .unwrap();
    configmaps.get("timed").await.unwrap();
    // A LIST starts the watch cache of ConfigMaps, which counts what it holds.
    configmaps.list(&ListParams::default()).await.unwrap();
    let request = http::Request::builder()
        .uri("/metrics")
        .body(Vec::new())
        .unwrap();
    let metrics = client.request_text(request).await.unwrap();
    for operation in ["range", "txn"] {
        let count = metrics
            .lines()
            .find_map(|line| {
                line.strip_prefix(&format!(
                    "etcd_request_duration_seconds_count{{operation=\"{operation}\",type=\"configmaps\"}} "
                ))
            })
            .unwrap_or_else(|| panic!("no {operation} histogram in:\n{metrics}"));
        assert!(count.parse::<u64>().unwrap() >= 1, "{operation}: {count}");
    }
    for (metric, at_least) in [
        ("apiserver_storage_objects{resource=\"configmaps\"} ", 1),
        (
            "apiserver_watch_cache_initializations_total{resource=\"configmaps\"} ",
            1,
        ),
    ] {
        let value = metrics
            .lines()
            .find_map(|line| line.strip_prefix(metric))
            .unwrap_or_else(|| panic!("no {metric} in:\n{metrics}"));
        assert!(value.parse::<i64>().unwrap() >= at_least, "{metric}{value}");
    }
    running.stop().await.unwrap();
}

/// A bound pod deleted gracefully stays, terminating, until its grace period is cut to 0 (the
/// kubelet's final delete): neither its kubelet's status writes during the grace period nor
/// removing its last finalizer delete it early, as upstream (an update deletes an object only
/// when its last finalizer goes and its deletionGracePeriodSeconds is 0). A later delete may
/// only shorten the grace period. Objects deleted without a grace period still go with their
/// last finalizer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn graceful_deletion_ends_with_the_grace_period_not_with_an_update() {
    let harness = testing::sqlite().await.unwrap();
    let (running, _dir) = start(harness.as_ref()).await;
    let client = client(&running).await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let bound_pod = |name: &str, finalizers: &[&str]| -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "finalizers": finalizers},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "busybox"}]}}))
        .unwrap()
    };
    let terminated = json!({"status": {"phase": "Running", "containerStatuses": [{"name": "c",
        "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]}});
    let no_finalizers = json!({"metadata": {"finalizers": null}});

    // A kubelet reporting its containers stopped during the grace period.
    pods.create(&PostParams::default(), &bound_pod("stopping", &[]))
        .await
        .unwrap();
    pods.delete("stopping", &DeleteParams::default())
        .await
        .unwrap();
    pods.patch_status(
        "stopping",
        &PatchParams::default(),
        &Patch::Merge(&terminated),
    )
    .await
    .unwrap();
    let stopping = pods.get_opt("stopping").await.unwrap();
    let stopping = stopping.expect("a status write during the grace period deleted the pod");
    assert_eq!(stopping.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("stopping", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("stopping").await.unwrap().is_none());

    // The last finalizer removed during the grace period: the pod waits for its kubelet.
    pods.create(
        &PostParams::default(),
        &bound_pod("held", &["example.com/hold"]),
    )
    .await
    .unwrap();
    pods.delete("held", &DeleteParams::default()).await.unwrap();
    pods.patch(
        "held",
        &PatchParams::default(),
        &Patch::Merge(&no_finalizers),
    )
    .await
    .unwrap();
    let held = pods.get_opt("held").await.unwrap();
    let held = held.expect("removing the last finalizer cut the grace period short");
    assert_eq!(held.metadata.deletion_grace_period_seconds, Some(30));
    pods.delete("held", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    assert!(pods.get_opt("held").await.unwrap().is_none());

    // A later delete shortens the grace period (and moves deletionTimestamp earlier by as
    // much); a longer one does not lengthen it. With the grace period at 0, removing the last
    // finalizer completes the deletion.
    pods.create(
        &PostParams::default(),
        &bound_pod("shortened", &["example.com/hold"]),
    )
    .await
    .unwrap();
    pods.delete("shortened", &DeleteParams::default().grace_period(60))
        .await
        .unwrap();
    let first = pods.get("shortened").await.unwrap().metadata;
    assert_eq!(first.deletion_grace_period_seconds, Some(60));
    pods.delete("shortened", &DeleteParams::default().grace_period(90))
        .await
        .unwrap();
    let unchanged = pods.get("shortened").await.unwrap().metadata;
    assert_eq!(unchanged.deletion_grace_period_seconds, Some(60));
    assert_eq!(unchanged.deletion_timestamp, first.deletion_timestamp);
    pods.delete("shortened", &DeleteParams::default().grace_period(20))
        .await
        .unwrap();
    let shorter = pods.get("shortened").await.unwrap().metadata;
    assert_eq!(shorter.deletion_grace_period_seconds, Some(20));
    let moved = first.deletion_timestamp.unwrap().0 - shorter.deletion_timestamp.unwrap().0;
    assert_eq!(moved.get_seconds(), 40);
    pods.delete("shortened", &DeleteParams::default().grace_period(0))
        .await
        .unwrap();
    let zero = pods.get("shortened").await.unwrap().metadata;
    assert_eq!(zero.deletion_grace_period_seconds, Some(0));
    pods.patch(
        "shortened",
        &PatchParams::default(),
        &Patch::Merge(&no_finalizers),
    )
    .await
    .unwrap();
    assert!(pods.get_opt("shortened").await.unwrap().is_none());

    // A ConfigMap (no grace period) goes with its last finalizer.
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut held = configmap("held", "v");
    held.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    configmaps
        .create(&PostParams::default(), &held)
        .await
        .unwrap();
    configmaps
        .delete("held", &DeleteParams::default())
        .await
        .unwrap();
    assert!(configmaps.get_opt("held").await.unwrap().is_some());
    configmaps
        .patch(
            "held",
            &PatchParams::default(),
            &Patch::Merge(&no_finalizers),
        )
        .await
        .unwrap();
    assert!(configmaps.get_opt("held").await.unwrap().is_none());
    running.stop().await.unwrap();
    harness.cleanup().await;
}

/// What client-go's protobuf clients ask for (Accept `application/vnd.kubernetes.protobuf,
/// application/json`, as kube-controller-manager, the scheduler and the kubelet send it):
/// lists and metadata-only lists as protobuf, and watches as a stream of length-prefixed
/// `WatchEvent`s, whose objects decode to what the JSON API shows (and a YAML list, streamed
/// the same way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protobuf_clients_list_and_watch_in_protobuf() {
    const PROTOBUF: &str = "application/vnd.kubernetes.protobuf, application/json";
    let harness = testing::sqlite().await.unwrap();
    let (running, _dir) = start(harness.as_ref()).await;
    let client = client(&running).await;
    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    for name in ["pb-a", "pb-b"] {
        configmaps
            .create(&PostParams::default(), &configmap(name, name))
            .await
            .unwrap();
    }
    let send = |uri: String, accept: &'static str| {
        let client = client.clone();
        async move {
            let request = http::Request::get(uri)
                .header(http::header::ACCEPT, accept)
                .body(Vec::new())
                .unwrap();
            client.send(request.map(Into::into)).await.unwrap()
        }
    };
    let body = |response: http::Response<kube::client::Body>| async move {
        http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes()
    };

    // The list twice: the second is assembled from the encodings the cache kept.
    let mut revision = String::new();
    for _ in 0..2 {
        let response = send(
            "/api/v1/namespaces/default/configmaps?labelSelector=suite%3Dkube".into(),
            PROTOBUF,
        )
        .await;
        assert_eq!(response.status(), 200);
        assert_eq!(
            response.headers()[http::header::CONTENT_TYPE],
            "application/vnd.kubernetes.protobuf"
        );
        let list = rudder_apiserver::protobuf::decode(&body(response).await).unwrap();
        assert_eq!(list["kind"], "ConfigMapList");
        let names: Vec<&str> = list["items"]
            .as_array()
            .unwrap()
            .iter()
            .map(|item| item["metadata"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["pb-a", "pb-b"]);
        assert_eq!(list["items"][1]["data"]["key"], "pb-b");
        revision = list["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .to_string();
    }
    let metadata = send(
        "/api/v1/namespaces/default/configmaps".into(),
        "application/vnd.kubernetes.protobuf;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json",
    )
    .await;
    let metadata = rudder_apiserver::protobuf::decode(&body(metadata).await).unwrap();
    assert_eq!(metadata["kind"], "PartialObjectMetadataList");
    let item = metadata["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|item| item["metadata"]["name"] == "pb-a")
        .unwrap();
    assert!(item.get("data").is_none(), "{item}");

    // YAML lists are streamed item by item too.
    let yaml = send(
        "/api/v1/namespaces/default/configmaps?labelSelector=suite%3Dkube".into(),
        "application/yaml",
    )
    .await;
    assert_eq!(
        yaml.headers()[http::header::CONTENT_TYPE],
        "application/yaml"
    );
    let yaml: serde_json::Value = yaml_serde::from_slice(&body(yaml).await).unwrap();
    assert_eq!(yaml["kind"], "ConfigMapList");
    assert_eq!(yaml["items"][1]["data"]["key"], "pb-b");

    // A watch from the list's revision sees a create, an update and a delete.
    let response = send(
        format!("/api/v1/namespaces/default/configmaps?watch=true&resourceVersion={revision}"),
        PROTOBUF,
    )
    .await;
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers()[http::header::CONTENT_TYPE],
        "application/vnd.kubernetes.protobuf;stream=watch"
    );
    configmaps
        .create(&PostParams::default(), &configmap("pb-c", "1"))
        .await
        .unwrap();
    configmaps
        .patch(
            "pb-c",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"key": "2"}})),
        )
        .await
        .unwrap();
    configmaps
        .delete("pb-c", &DeleteParams::default())
        .await
        .unwrap();
    let mut stream = response.into_body();
    let mut buffered = Vec::new();
    let mut events = Vec::new();
    while events.len() < 3 {
        while let Some((kind, object, used)) =
            rudder_apiserver::protobuf::decode_watch_frame(&buffered).unwrap()
        {
            events.push((kind, object));
            buffered.drain(..used);
        }
        if events.len() >= 3 {
            break;
        }
        let frame = tokio::time::timeout(
            Duration::from_secs(10),
            http_body_util::BodyExt::frame(&mut stream),
        )
        .await
        .expect("the watch delivers within 10 s")
        .expect("the stream is open")
        .unwrap();
        if let Ok(data) = frame.into_data() {
            buffered.extend_from_slice(&data);
        }
    }
    let seen: Vec<(&str, &str, &str)> = events
        .iter()
        .map(|(kind, object)| {
            (
                kind.as_str(),
                object["metadata"]["name"].as_str().unwrap(),
                object["data"]["key"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("ADDED", "pb-c", "1"),
            ("MODIFIED", "pb-c", "2"),
            ("DELETED", "pb-c", "2")
        ]
    );
    assert_eq!(events[0].1["kind"], "ConfigMap");
    running.stop().await.unwrap();
}
