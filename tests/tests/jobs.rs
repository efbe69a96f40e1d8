//! The Job controller inside `rudder server`, on every storage driver, driven by kubectl 1.33
//! and kube-rs. No containers run: a stand-in kubelet marks each new pod Running and Ready,
//! and the test ends pods itself by writing their status (phase, exit codes, conditions), as
//! upstream's integration tests do. Checked: parallelism is never exceeded, pods carry the
//! tracking finalizer until counted, a finished pod deleted by hand is counted once and not
//! run again, a `FailJob` rule fails the Job, an ignored disruption does not count, and an
//! Indexed Job with `backoffLimitPerIndex` ends with `failedIndexes` and `FailedIndexes`, a
//! `successPolicy` ends an Indexed Job early, and
//! the pods of a deleted or orphaning Job are not held by the finalizer.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::{Client, ResourceExt};
use rudder_tests::RudderServer;
use serde_json::json;

const KUBECTL: &str = "1.33";
const FINALIZER: &str = "batch.kubernetes.io/job-tracking";

fn kubectl_ok(server: &RudderServer, args: &[&str]) -> String {
    server.kubectl_ok(KUBECTL, args)
}

/// Applies `job` (JSON) with kubectl.
fn apply(server: &RudderServer, name: &str, job: serde_json::Value) {
    let file = server.write_file(&format!("{name}.json"), &job.to_string());
    kubectl_ok(server, &["apply", "-f", file.to_str().unwrap()]);
}

/// A Job of busybox pods (container `main`, restartPolicy Never) with `spec` merged in.
fn job_manifest(name: &str, spec: serde_json::Value) -> serde_json::Value {
    let mut manifest = json!({
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {
            "restartPolicy": "Never",
            "containers": [{"name": "main", "image": "busybox"}],
        }}},
    });
    for (key, value) in spec.as_object().unwrap() {
        manifest["spec"][key] = value.clone();
    }
    manifest
}

/// Waits (kubectl wait) for the Job's condition `type_`; on a timeout, fails showing the Job's
/// status, its pods and what the server logged about Jobs.
async fn wait_for(server: &RudderServer, client: &Client, job: &str, type_: &str) {
    let condition = format!("--for=condition={type_}");
    let target = format!("job/{job}");
    let output = server.kubectl(KUBECTL, &["wait", &condition, &target, "--timeout=60s"]);
    if output.status.success() {
        return;
    }
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let status = jobs.get(job).await.map(|j| j.status);
    let shown: Vec<String> = pods_of(&pods, job)
        .await
        .iter()
        .map(|p| {
            format!(
                "{} {} deleting={} finalizers={:?}",
                p.name_any(),
                phase(p),
                p.metadata.deletion_timestamp.is_some(),
                p.metadata.finalizers
            )
        })
        .collect();
    let log: Vec<String> = server
        .log()
        .lines()
        .filter(|line| line.contains("job"))
        .map(str::to_string)
        .collect();
    panic!(
        "job/{job} never got {type_}: {}\nstatus: {status:?}\npods: {shown:#?}\nlog:\n{}",
        String::from_utf8_lossy(&output.stderr),
        log.join("\n")
    );
}

/// Marks every new pod Running and Ready, once, as a kubelet would once it started it.
fn start_every_pod(client: Client) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let pods: Api<Pod> = Api::all(client.clone());
        let mut events = watcher(pods, watcher::Config::default())
            .default_backoff()
            .boxed();
        // Each pod is started once: a late event of a pod the test has since ended must not
        // bring it back to Running.
        let mut started = BTreeSet::new();
        while let Some(event) = events.next().await {
            let pod = match event {
                Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                _ => continue,
            };
            if !started.insert(pod.uid().unwrap_or_default()) {
                continue;
            }
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if pod.metadata.deletion_timestamp.is_some() || !matches!(phase, None | Some("Pending"))
            {
                continue;
            }
            let status = json!({"status": {"phase": "Running", "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": Timestamp::now().to_string()}]}});
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

/// Ends `pod`: `phase` with its container `main` exited with `code`, plus `conditions`.
async fn finish(pods: &Api<Pod>, pod: &str, phase: &str, code: i32, conditions: serde_json::Value) {
    let now = Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": phase,
        "conditions": conditions,
        "containerStatuses": [{
            "name": "main", "image": "busybox", "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": code, "startedAt": now, "finishedAt": now}},
        }],
    }});
    pods.patch_status(pod, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
}

/// The Job's pods (by its `job-name` label).
async fn pods_of(pods: &Api<Pod>, job: &str) -> Vec<Pod> {
    pods.list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await
        .unwrap()
        .items
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Pods that run (Running, not being deleted).
fn running(pods: &[Pod]) -> Vec<&Pod> {
    pods.iter()
        .filter(|p| phase(p) == "Running" && p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The Job's condition `type_` with status True: its reason and message.
fn condition(job: &Job, type_: &str) -> Option<(String, String)> {
    job.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_ && c.status == "True")
        .map(|c| {
            (
                c.reason.clone().unwrap_or_default(),
                c.message.clone().unwrap_or_default(),
            )
        })
}

/// Polls `probe` every 200 ms until it yields something; fails with `what` after `limit`.
async fn until<T, F, Fut>(what: &str, limit: Duration, mut probe: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(found) = probe().await {
            return found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// The names of the Job's pods ever seen, and the most that were active at once.
type Seen = Arc<Mutex<(BTreeSet<String>, usize)>>;

fn watch_job_pods(client: Client, job: &str) -> (Seen, tokio::task::JoinHandle<()>) {
    let seen: Seen = Arc::default();
    let record = seen.clone();
    let selector = format!("batch.kubernetes.io/job-name={job}");
    let task = tokio::spawn(async move {
        let pods: Api<Pod> = Api::namespaced(client, "default");
        let mut store: BTreeMap<String, Pod> = BTreeMap::new();
        let mut events = watcher(pods, watcher::Config::default().labels(&selector)).boxed();
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
            let active = store
                .values()
                .filter(|p| !matches!(phase(p), "Succeeded" | "Failed"))
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count();
            let mut seen = record.lock().unwrap();
            seen.0.extend(store.keys().cloned());
            seen.1 = seen.1.max(active);
        }
    });
    (seen, task)
}

async fn jobs_track_their_pods_and_follow_their_policies(storage: String) {
    let server = RudderServer::start(env!("CARGO_BIN_EXE_rudder"), &storage);
    let client = rudder_tests::admin_client(server.kubeconfig()).await;
    let kubelet = start_every_pod(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let jobs: Api<Job> = Api::namespaced(client.clone(), "default");
    let minute = Duration::from_secs(60);

    // completions 3, parallelism 2: never more than 2 run; a finished pod deleted by hand is
    // counted once and its work not run again.
    let (seen, recorder) = watch_job_pods(client.clone(), "work");
    tokio::time::sleep(Duration::from_millis(300)).await;
    apply(
        &server,
        "work",
        job_manifest("work", json!({"completions": 3, "parallelism": 2})),
    );
    let mut finished = 0;
    let mut deleted_by_hand = None;
    while finished < 3 {
        let pod = until("a running pod of work", minute, || async {
            let all = pods_of(&pods, "work").await;
            assert!(running(&all).len() <= 2, "more than parallelism: {all:?}");
            running(&all).first().map(|p| (*p).clone())
        })
        .await;
        assert!(
            pod.finalizers().iter().any(|f| f == FINALIZER),
            "tracked: {pod:?}"
        );
        finish(&pods, &pod.name_any(), "Succeeded", 0, json!([])).await;
        if deleted_by_hand.is_none() {
            kubectl_ok(&server, &["delete", "pod", &pod.name_any(), "--wait=false"]);
            deleted_by_hand = Some(pod.name_any());
        }
        finished += 1;
    }
    wait_for(&server, &client, "work", "Complete").await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    recorder.abort();
    let job = jobs.get("work").await.unwrap();
    let status = job.status.clone().unwrap();
    assert_eq!(status.succeeded, Some(3), "{status:?}");
    assert_eq!(status.failed, None, "{status:?}");
    let uncounted = status.uncounted_terminated_pods.unwrap_or_default();
    assert!(uncounted.succeeded.unwrap_or_default().is_empty());
    assert!(condition(&job, "SuccessCriteriaMet").is_some());
    let (names, most) = seen.lock().unwrap().clone();
    assert_eq!(names.len(), 3, "no pod was run again: {names:?}");
    assert!(most <= 2, "at most 2 active at once, saw {most}");
    let left = pods_of(&pods, "work").await;
    assert_eq!(left.len(), 2, "the deleted pod is gone: {left:?}");
    assert!(left
        .iter()
        .all(|p| !p.finalizers().iter().any(|f| f == FINALIZER)));
    let shown = kubectl_ok(
        &server,
        &["get", "job", "work", "-o", "jsonpath={.status.succeeded}"],
    );
    assert_eq!(shown, "3");

    // A FailJob rule on exit code 42 fails the Job at once and removes the other pod.
    apply(
        &server,
        "fatal",
        job_manifest(
            "fatal",
            json!({
                "completions": 2, "parallelism": 2,
                "podFailurePolicy": {"rules": [
                    {"action": "FailJob", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}},
                ]},
            }),
        ),
    );
    let victim = until("two running pods of fatal", minute, || async {
        let all = pods_of(&pods, "fatal").await;
        let running = running(&all);
        (running.len() == 2).then(|| running[0].name_any())
    })
    .await;
    finish(&pods, &victim, "Failed", 42, json!([])).await;
    wait_for(&server, &client, "fatal", "Failed").await;
    let job = jobs.get("fatal").await.unwrap();
    let (reason, message) = condition(&job, "Failed").unwrap();
    assert_eq!(reason, "PodFailurePolicy");
    assert_eq!(
        message,
        format!("Container main for pod default/{victim} failed with exit code 42 matching FailJob rule at index 0")
    );
    assert_eq!(
        condition(&job, "FailureTarget").map(|c| c.0).as_deref(),
        Some("PodFailurePolicy")
    );
    rudder_tests::eventually("fatal's other pod is gone", minute, || async {
        pods_of(&pods, "fatal").await.len() == 1
    })
    .await;
    assert_eq!(
        job.status.unwrap().failed,
        Some(2),
        "the failed pod and the one stopped"
    );

    // An ignored disruption does not count towards backoffLimit 0: the pod is replaced.
    apply(
        &server,
        "disrupted",
        job_manifest(
            "disrupted",
            json!({
                "backoffLimit": 0,
                "podFailurePolicy": {"rules": [
                    {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}]},
                ]},
            }),
        ),
    );
    let first = until("a running pod of disrupted", minute, || async {
        let all = pods_of(&pods, "disrupted").await;
        running(&all).first().map(|p| p.name_any())
    })
    .await;
    let disruption =
        json!([{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]);
    finish(&pods, &first, "Failed", 137, disruption).await;
    let second = until(
        "a replacement (after the 10 s back-off)",
        minute,
        || async {
            let all = pods_of(&pods, "disrupted").await;
            running(&all).first().map(|p| p.name_any())
        },
    )
    .await;
    assert_ne!(first, second);
    let job = jobs.get("disrupted").await.unwrap();
    assert!(condition(&job, "Failed").is_none(), "{:?}", job.status);
    finish(&pods, &second, "Succeeded", 0, json!([])).await;
    wait_for(&server, &client, "disrupted", "Complete").await;
    let status = jobs.get("disrupted").await.unwrap().status.unwrap();
    assert_eq!(
        (status.succeeded, status.failed),
        (Some(1), None),
        "{status:?}"
    );

    // Indexed, backoffLimitPerIndex 1: index 1 fails twice and is failed; the Job fails
    // with FailedIndexes once index 0 succeeded.
    apply(
        &server,
        "indexed",
        job_manifest(
            "indexed",
            json!({
                "completions": 2, "parallelism": 2, "completionMode": "Indexed", "backoffLimitPerIndex": 1,
            }),
        ),
    );
    let index_of = |pod: &Pod| {
        pod.annotations()
            .get("batch.kubernetes.io/job-completion-index")
            .cloned()
    };
    for attempt in 0..2 {
        let pod_1 = until(
            "a running pod for index 1",
            Duration::from_secs(90),
            || async {
                let all = pods_of(&pods, "indexed").await;
                running(&all)
                    .into_iter()
                    .find(|p| index_of(p).as_deref() == Some("1"))
                    .cloned()
            },
        )
        .await;
        assert_eq!(
            pod_1
                .annotations()
                .get("batch.kubernetes.io/job-index-failure-count")
                .map(String::as_str),
            Some(if attempt == 0 { "0" } else { "1" })
        );
        finish(&pods, &pod_1.name_any(), "Failed", 1, json!([])).await;
    }
    let all = pods_of(&pods, "indexed").await;
    let pod_0 = running(&all)
        .into_iter()
        .find(|p| index_of(p).as_deref() == Some("0"))
        .unwrap()
        .name_any();
    finish(&pods, &pod_0, "Succeeded", 0, json!([])).await;
    wait_for(&server, &client, "indexed", "Failed").await;
    let job = jobs.get("indexed").await.unwrap();
    assert_eq!(condition(&job, "Failed").unwrap().0, "FailedIndexes");
    let status = job.status.unwrap();
    assert_eq!(status.failed_indexes.as_deref(), Some("1"));
    assert_eq!(status.completed_indexes.as_deref(), Some("0"));
    assert_eq!((status.succeeded, status.failed), (Some(1), Some(2)));

    // A success policy (index 0 suffices) ends an Indexed Job early: SuccessCriteriaMet, the
    // other pods stopped, then Complete with the same reason.
    apply(
        &server,
        "early",
        job_manifest(
            "early",
            json!({
                "completions": 3, "parallelism": 3, "completionMode": "Indexed",
                "successPolicy": {"rules": [{"succeededIndexes": "0"}]},
            }),
        ),
    );
    let pod_0 = until("three running pods of early", minute, || async {
        let all = pods_of(&pods, "early").await;
        let running = running(&all);
        (running.len() == 3)
            .then(|| {
                running
                    .into_iter()
                    .find(|p| index_of(p).as_deref() == Some("0"))
            })
            .flatten()
            .map(|p| p.name_any())
    })
    .await;
    finish(&pods, &pod_0, "Succeeded", 0, json!([])).await;
    wait_for(&server, &client, "early", "Complete").await;
    let job = jobs.get("early").await.unwrap();
    let met = (
        "SuccessPolicy".to_string(),
        "Matched rules at index 0".to_string(),
    );
    assert_eq!(condition(&job, "SuccessCriteriaMet"), Some(met.clone()));
    assert_eq!(condition(&job, "Complete"), Some(met));
    let status = job.status.unwrap();
    assert_eq!(status.completed_indexes.as_deref(), Some("0"));
    assert_eq!((status.succeeded, status.failed), (Some(1), None));
    rudder_tests::eventually("early's other pods are gone", minute, || async {
        pods_of(&pods, "early").await.len() == 1
    })
    .await;

    // A running Job deleted (its pods go with it) or orphaned (its pods stay, released): no
    // pod is left held by the tracking finalizer.
    for (name, cascade) in [("doomed", "background"), ("released", "orphan")] {
        apply(
            &server,
            name,
            job_manifest(name, json!({"completions": 4, "parallelism": 2})),
        );
        until("two running pods", minute, || async {
            (running(&pods_of(&pods, name).await).len() == 2).then_some(())
        })
        .await;
        let flag = format!("--cascade={cascade}");
        kubectl_ok(&server, &["delete", "job", name, &flag]);
    }
    rudder_tests::eventually("doomed's pods are gone", minute, || async {
        pods_of(&pods, "doomed").await.is_empty()
    })
    .await;
    rudder_tests::eventually("released's pods lose the finalizer", minute, || async {
        let left = pods_of(&pods, "released").await;
        left.len() == 2
            && left.iter().all(|p| {
                p.owner_references().is_empty() && !p.finalizers().iter().any(|f| f == FINALIZER)
            })
    })
    .await;
    kubectl_ok(
        &server,
        &[
            "delete",
            "pods",
            "-l",
            "batch.kubernetes.io/job-name=released",
        ],
    );

    // Deleting a Job leaves no pod held by the finalizer.
    kubectl_ok(
        &server,
        &[
            "delete",
            "job",
            "work",
            "fatal",
            "disrupted",
            "indexed",
            "early",
            "--wait=true",
        ],
    );
    rudder_tests::eventually("every Job pod is gone", minute, || async {
        pods.list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    })
    .await;
    kubelet.abort();
}

rudder_tests::on_every_driver!(jobs_track_their_pods_and_follow_their_policies;
    jobs_on_sqlite => sqlite,
    jobs_on_postgres => postgres,
    jobs_on_etcd => etcd,
);
