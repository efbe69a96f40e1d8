//! `rudder scheduler` and `rudder controller-manager` as processes of their own, against a
//! `rudder server` that runs neither: a Deployment gets its pod from the standalone
//! controller-manager and the pod its node from the standalone scheduler, and each serves its
//! metrics (upstream's names) and `/healthz` on `--metrics-bind-address`.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, PostParams};
use rudder_tests::RudderServer;
use serde_json::json;

/// A child process killed when the test ends.
struct Component(Child);

impl Drop for Component {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback address nothing listens on (the port is free once the probe closes).
fn free_address() -> SocketAddr {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}

/// `GET path` over plain HTTP/1.0: the status line and the body.
fn get(address: SocketAddr, path: &str) -> Option<(String, String)> {
    let mut stream = TcpStream::connect(address).ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n").as_bytes())
        .ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    Some((head.lines().next()?.to_string(), body.to_string()))
}

fn start(subcommand: &str, kubeconfig: &std::path::Path, metrics: SocketAddr) -> Component {
    let child = Command::new(env!("CARGO_BIN_EXE_rudder"))
        .arg(subcommand)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--leader-elect=false")
        .arg(format!("--metrics-bind-address={metrics}"))
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    Component(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn standalone_scheduler_and_controller_manager_work_and_serve_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let storage = format!("sqlite://{}", dir.path().join("state.db").display());
    let server = RudderServer::start_with_args(
        env!("CARGO_BIN_EXE_rudder"),
        &storage,
        &["--disable-scheduler", "--disable-controller-manager"],
    );
    let client = rudder_tests::admin_client(server.kubeconfig()).await;
    let (scheduler_metrics, manager_metrics) = (free_address(), free_address());
    let _scheduler = start("scheduler", server.kubeconfig(), scheduler_metrics);
    let _manager = start("controller-manager", server.kubeconfig(), manager_metrics);

    let nodes: Api<Node> = Api::all(client.clone());
    let node: Node = serde_json::from_value(json!({
        "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1"}},
        "status": {"allocatable": {"cpu": "8", "memory": "16Gi", "pods": "110"},
                   "conditions": [{"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    nodes.create(&PostParams::default(), &node).await.unwrap();
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))
    .unwrap();
    Api::<Deployment>::namespaced(client.clone(), "default")
        .create(&PostParams::default(), &deployment)
        .await
        .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    rudder_tests::eventually(
        "the Deployment's 2 pods created and bound to n1",
        Duration::from_secs(60),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app=web"))
                .await
                .unwrap();
            list.items.len() == 2
                && list
                    .items
                    .iter()
                    .all(|pod| pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some("n1"))
        },
    )
    .await;

    for (address, wanted) in [
        (
            scheduler_metrics,
            "scheduler_schedule_attempts_total{result=\"scheduled\",profile=\"default-scheduler\"}",
        ),
        (manager_metrics, "workqueue_adds_total{name=\"replicaset\"}"),
    ] {
        let (status, body) = get(address, "/metrics").expect("metrics served");
        assert!(status.contains(" 200 "), "{address}: {status}");
        assert!(body.contains(wanted), "{address}: no {wanted:?} in\n{body}");
        let (status, body) = get(address, "/healthz").expect("healthz served");
        assert!(status.contains(" 200 "), "{status}");
        assert_eq!(body, "ok");
        let (status, _) = get(address, "/nothing").expect("served");
        assert!(status.contains(" 404 "), "{status}");
    }
}
