//! The Node authorizer and NodeRestriction through kube-rs, as a kubelet would meet them: a
//! node's identity (`system:node:n1` in `system:nodes`, a client certificate from the cluster
//! CA) reads only what its pods use, writes only its own Node and its pods' statuses.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod, Secret, ServiceAccount};
use kube::api::{Api, PostParams};
use kube::Client;
use rudder_apiserver::server::Running;
use serde_json::json;

/// A client of `running` as the kubelet of `node`.
async fn kubelet(running: &Running, node: &str) -> Client {
    let (cert, key) = running
        .pki
        .issue_client_cert(&format!("system:node:{node}"), &["system:nodes"])
        .unwrap();
    let mut config = kube::config::Kubeconfig::read_from(&running.kubeconfig).unwrap();
    let encode = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    for user in &mut config.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            client_certificate_data: Some(encode(&cert)),
            client_key_data: Some(encode(&key).into()),
            ..Default::default()
        });
    }
    let config = kube::Config::from_custom_kubeconfig(config, &Default::default())
        .await
        .unwrap();
    Client::try_from(config).unwrap()
}

fn code<T>(result: Result<T, kube::Error>) -> u16 {
    match result {
        Ok(_) => 200,
        Err(kube::Error::Api(status)) => status.code,
        Err(other) => panic!("{other}"),
    }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check().await {
        assert!(Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn pod(name: &str, node: &str, secret: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            "nodeName": node,
            "containers": [{"name": "c", "image": "nginx",
                            "envFrom": [{"configMapRef": {"name": "settings"}}]}],
            "volumes": [{"name": "s", "secret": {"secretName": secret}}],
        },
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubelet_reaches_only_what_its_pods_use() {
    let harness = rudder_storage::testing::sqlite().await.unwrap();
    let (running, _dir) = rudder_tests::start_apiserver(harness.as_ref(), |_| {}).await;
    let admin = rudder_tests::admin_client(&running.kubeconfig).await;
    let pp = PostParams::default();
    let accounts: Api<ServiceAccount> = Api::namespaced(admin.clone(), "default");
    accounts
        .create(
            &pp,
            &serde_json::from_value(json!({"metadata": {"name": "default"}})).unwrap(),
        )
        .await
        .ok();
    let secrets: Api<Secret> = Api::namespaced(admin.clone(), "default");
    for name in ["mine", "theirs"] {
        let secret =
            serde_json::from_value(json!({"metadata": {"name": name}, "stringData": {"k": "v"}}));
        secrets.create(&pp, &secret.unwrap()).await.unwrap();
    }
    let maps: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    maps.create(
        &pp,
        &serde_json::from_value(json!({"metadata": {"name": "settings"}})).unwrap(),
    )
    .await
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(admin.clone(), "default");
    pods.create(&pp, &pod("web", "n1", "mine")).await.unwrap();
    pods.create(&pp, &pod("db", "n2", "theirs")).await.unwrap();

    let n1 = kubelet(&running, "n1").await;
    let n1_secrets: Api<Secret> = Api::namespaced(n1.clone(), "default");
    eventually("n1 reads its pod's secret", async || {
        code(n1_secrets.get("mine").await) == 200
    })
    .await;
    assert_eq!(code(n1_secrets.get("theirs").await), 403);
    assert_eq!(code(n1_secrets.list(&Default::default()).await), 403);
    let n1_maps: Api<ConfigMap> = Api::namespaced(n1.clone(), "default");
    assert_eq!(code(n1_maps.get("settings").await), 200);
    let n1_accounts: Api<ServiceAccount> = Api::namespaced(n1.clone(), "default");
    let request = serde_json::from_value(json!({"spec": {"audiences": []}})).unwrap();
    assert_eq!(
        code(
            n1_accounts
                .create_token_request("default", &pp, &request)
                .await
        ),
        200
    );
    // Pods: every one readable, status only of its own.
    let n1_pods: Api<Pod> = Api::namespaced(n1.clone(), "default");
    assert_eq!(code(n1_pods.list(&Default::default()).await), 200);
    let status = kube::api::Patch::Merge(json!({"status": {"phase": "Running"}}));
    let patch = kube::api::PatchParams::default();
    assert_eq!(
        code(n1_pods.patch_status("web", &patch, &status).await),
        200
    );
    assert_eq!(code(n1_pods.patch_status("db", &patch, &status).await), 403);
    // Only mirror pods bound to itself may it create.
    let mut plain = pod("extra", "n1", "mine");
    assert_eq!(code(n1_pods.create(&pp, &plain).await), 403);
    plain.metadata.annotations =
        Some([("kubernetes.io/config.mirror".to_string(), "x".to_string())].into());
    assert_eq!(code(n1_pods.create(&pp, &plain).await), 200);
    // It evicts pods bound to itself only (NodeRestriction judges the Eviction: the pod's
    // delete that follows is not admitted again).
    let evict = kube::api::EvictParams::default();
    match n1_pods.evict("db", &evict).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(
                status
                    .message
                    .contains("node \"n1\" can only evict pods with spec.nodeName set to itself"),
                "{}",
                status.message
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(code(n1_pods.evict("extra", &evict).await), 200);
    assert_eq!(code(pods.get("db").await), 200);
    // Its own Node, no other.
    let nodes: Api<Node> = Api::all(n1.clone());
    let node = |name: &str| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}})).unwrap()
    };
    assert_eq!(code(nodes.create(&pp, &node("n1")).await), 200);
    match nodes.create(&pp, &node("n2")).await {
        Err(kube::Error::Api(status)) => {
            assert_eq!(status.code, 403);
            assert!(
                status
                    .message
                    .contains("node \"n1\" is not allowed to modify node \"n2\""),
                "{}",
                status.message
            );
        }
        other => panic!("{other:?}"),
    }
    // A secret stops being reachable once no pod on the node uses it.
    let now = kube::api::DeleteParams {
        grace_period_seconds: Some(0),
        ..Default::default()
    };
    pods.delete("web", &now).await.unwrap();
    // The evicted pod may still be terminating (its grace period runs): end it now.
    let ended = code(pods.delete("extra", &now).await);
    assert!(ended == 200 || ended == 404, "{ended}");
    eventually("n1 loses the secret", async || {
        code(n1_secrets.get("mine").await) == 403
    })
    .await;
    running.stop().await.unwrap();
}
