//! The API a scheduler meets, with real kubectl against an apiserver in the test's process:
//! pods held back by scheduling gates (shown `SchedulingGated`, gates only removed), and the
//! scheduler's own identity (`system:kube-scheduler` from the kubeconfig the server writes)
//! binding pods and writing their status, and nothing it has no business with.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::path::Path;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, Patch, PatchParams, PostParams};
use rudder_tests::server::KUBECTL_DIR;
use serde_json::json;

/// Runs kubectl 1.33 with `kubeconfig`; returns (exit code, stdout, stderr), with the
/// transcript on stderr.
async fn kubectl(kubeconfig: &Path, cache: &Path, args: &[&str]) -> (i32, String, String) {
    let output = tokio::process::Command::new(format!("{KUBECTL_DIR}/kubectl.1.33"))
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", cache)
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let (out, err) = (text(&output.stdout), text(&output.stderr));
    eprintln!("$ kubectl {}\n{out}{err}", args.join(" "));
    (output.status.code().unwrap_or(-1), out, err)
}

/// Runs kubectl and expects it to succeed; returns its stdout.
async fn ok(kubeconfig: &Path, cache: &Path, args: &[&str]) -> String {
    let (code, out, err) = kubectl(kubeconfig, cache, args).await;
    assert_eq!(code, 0, "kubectl {} failed: {err}", args.join(" "));
    out
}

const GATED_POD: &str = r#"{"apiVersion": "v1", "kind": "Pod",
    "metadata": {"name": "gated", "namespace": "default"},
    "spec": {"schedulingGates": [{"name": "example.com/quota"}],
             "containers": [{"name": "c", "image": "nginx"}]}}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_pod_waits_and_its_gates_only_go() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let (running, dir) = rudder_tests::start_apiserver(harness.as_ref(), |_| {}).await;
    let (admin, cache) = (running.kubeconfig.clone(), dir.path().join("kube-cache"));
    let manifest = dir.path().join("gated.json");
    std::fs::write(&manifest, GATED_POD).unwrap();
    ok(
        &admin,
        &cache,
        &["create", "-f", manifest.to_str().unwrap()],
    )
    .await;

    let table = ok(&admin, &cache, &["get", "pods", "gated"]).await;
    let row = table.lines().nth(1).unwrap_or_default();
    assert_eq!(
        row.split_whitespace().nth(2),
        Some("SchedulingGated"),
        "{table}"
    );
    let condition = ok(
        &admin,
        &cache,
        &[
            "get",
            "pod",
            "gated",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].reason}",
        ],
    )
    .await;
    assert_eq!(condition, "SchedulingGated");

    // A gate may not be added, even by a strategic merge that keeps the old one (the new one
    // comes first, as upstream orders a merged list).
    let add = r#"{"spec": {"schedulingGates": [{"name": "example.com/more"}]}}"#;
    let (code, _, err) = kubectl(&admin, &cache, &["patch", "pod", "gated", "-p", add]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("The Pod \"gated\" is invalid: spec.schedulingGates[0].name: Forbidden: only deletion is allowed, but found new scheduling gate 'example.com/more'"),
        "{err}"
    );
    let client = rudder_tests::admin_client(&admin).await;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    let refused = pods
        .patch(
            "gated",
            &PatchParams::default(),
            &Patch::Strategic(serde_json::from_str::<serde_json::Value>(add).unwrap()),
        )
        .await
        .unwrap_err();
    match refused {
        kube::Error::Api(status) => {
            assert_eq!((status.code, status.reason.as_str()), (422, "Invalid"));
        }
        other => panic!("expected a 422 Status, got {other:?}"),
    }

    // While gated, the node selector may gain an entry; then the gate goes.
    let narrow = r#"{"spec": {"nodeSelector": {"disk": "ssd"}}}"#;
    ok(&admin, &cache, &["patch", "pod", "gated", "-p", narrow]).await;
    let remove = r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#;
    ok(
        &admin,
        &cache,
        &["patch", "pod", "gated", "--type=json", "-p", remove],
    )
    .await;
    let gates = ok(
        &admin,
        &cache,
        &[
            "get",
            "pod",
            "gated",
            "-o",
            "jsonpath={.spec.schedulingGates}",
        ],
    )
    .await;
    assert_eq!(gates, "");
    // Ungated, the selector is fixed again.
    let more = r#"{"spec": {"nodeSelector": {"zone": "a"}}}"#;
    let (code, _, err) = kubectl(&admin, &cache, &["patch", "pod", "gated", "-p", more]).await;
    assert_eq!(code, 1);
    assert!(
        err.contains("spec: Forbidden: pod updates may not change fields"),
        "{err}"
    );
    running.stop().await.unwrap();
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_scheduler_binds_and_reports_but_reads_no_secrets() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let (running, dir) = rudder_tests::start_apiserver(harness.as_ref(), |_| {}).await;
    let (admin, cache) = (running.kubeconfig.clone(), dir.path().join("kube-cache"));
    let scheduler = running.scheduler_kubeconfig.clone();
    assert_eq!(
        scheduler.parent(),
        running.controller_manager_kubeconfig.parent()
    );

    let whoami = ok(
        &scheduler,
        &cache,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    )
    .await;
    assert_eq!(whoami, "system:kube-scheduler");

    ok(&admin, &cache, &["run", "web", "--image=nginx"]).await;
    let binding = dir.path().join("binding.json");
    std::fs::write(
        &binding,
        r#"{"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "web"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "node-1"}}"#,
    )
    .unwrap();
    let path = "/api/v1/namespaces/default/pods/web/binding";
    let file = binding.to_str().unwrap();
    ok(&scheduler, &cache, &["create", "--raw", path, "-f", file]).await;
    let node = ok(
        &admin,
        &cache,
        &["get", "pod", "web", "-o", "jsonpath={.spec.nodeName}"],
    )
    .await;
    assert_eq!(node, "node-1");
    let scheduled = ok(
        &admin,
        &cache,
        &[
            "get",
            "pod",
            "web",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"PodScheduled\")].status}",
        ],
    )
    .await;
    assert_eq!(scheduled, "True");
    let (code, _, err) = kubectl(&scheduler, &cache, &["create", "--raw", path, "-f", file]).await;
    assert_ne!(code, 0);
    assert!(
        err.contains("Operation cannot be fulfilled on pods/binding \"web\": pod web is already assigned to node \"node-1\""),
        "{err}"
    );

    // The scheduler patches pod status (a nomination) straight away, as client-go does: its
    // role, like upstream's, has no `get` of pods/status, which `kubectl patch` would need.
    ok(&admin, &cache, &["run", "waiting", "--image=nginx"]).await;
    let as_scheduler: Api<Pod> =
        Api::namespaced(rudder_tests::admin_client(&scheduler).await, "default");
    let status = json!({"status": {"nominatedNodeName": "node-2"}});
    as_scheduler
        .patch_status("waiting", &PatchParams::default(), &Patch::Merge(&status))
        .await
        .unwrap();
    let nominated = ok(
        &admin,
        &cache,
        &[
            "get",
            "pod",
            "waiting",
            "-o",
            "jsonpath={.status.nominatedNodeName}",
        ],
    )
    .await;
    assert_eq!(nominated, "node-2");

    let (code, _, err) = kubectl(
        &scheduler,
        &cache,
        &["create", "secret", "generic", "s", "--from-literal=k=v"],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        err.contains("User \"system:kube-scheduler\" cannot create resource \"secrets\""),
        "{err}"
    );
    let secrets: Api<Secret> =
        Api::namespaced(rudder_tests::admin_client(&scheduler).await, "default");
    let secret: Secret = serde_json::from_value(json!({"metadata": {"name": "s"}})).unwrap();
    match secrets.create(&PostParams::default(), &secret).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!((status.code, status.reason.as_str()), (403, "Forbidden"));
        }
        other => panic!("expected a 403 Status, got {other:?}"),
    }
    let (answer, _, _) = kubectl(&scheduler, &cache, &["auth", "can-i", "get", "secrets"]).await;
    assert_eq!(answer, 1, "no reading secrets");
    running.stop().await.unwrap();
    harness.cleanup().await;
}
