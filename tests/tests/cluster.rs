//! N servers on one store are one cluster: a second `rudder server` given the first's token
//! on the same PostgreSQL or etcd takes the cluster's CA and ServiceAccount key from the store,
//! so one kubeconfig and one ServiceAccount token work against both; a server with another
//! token refuses to start with one clear line.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rudder_tests::{Kubectl, RudderServer};

/// `server`'s admin kubeconfig (or one with `token`), aimed at `other`'s address.
fn kubeconfig_aimed_at(
    server: &RudderServer,
    other: &RudderServer,
    token: Option<&str>,
) -> PathBuf {
    let auth = token.map(|token| kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    });
    server.kubeconfig_with(auth, Some(other))
}

fn kubectl_with(server: &RudderServer, kubeconfig: &Path, args: &[&str]) -> (i32, String, String) {
    server.kubectl_with("1.33", kubeconfig, args)
}

fn one_cluster_on_one_store(storage: &str) {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let first = RudderServer::start_with_args(binary, storage, &["--disable-controller-manager"]);
    let token = std::fs::read_to_string(first.data_dir().join("token")).unwrap();
    let token = token.trim();
    let second = RudderServer::start_with_args(
        binary,
        storage,
        &["--disable-controller-manager", "--token", token],
    );

    // The first server's admin kubeconfig works against the second, and the other way round.
    let first_admin = Kubectl {
        server: &first,
        version: "1.33",
        namespace: "shared".into(),
    };
    first_admin.ok(&["create", "namespace", "shared"]);
    first_admin.ok(&["-n", "shared", "create", "serviceaccount", "robot"]);
    let aimed = kubeconfig_aimed_at(&first, &second, None);
    let (code, stdout, stderr) = kubectl_with(
        &first,
        &aimed,
        &["get", "namespace", "shared", "-o", "name"],
    );
    assert_eq!((code, stdout.trim()), (0, "namespace/shared"), "{stderr}");
    let back = kubeconfig_aimed_at(&second, &first, None);
    let (code, _, stderr) = kubectl_with(&second, &back, &["get", "namespaces"]);
    assert_eq!(code, 0, "{stderr}");

    // A ServiceAccount token minted by the first authenticates on the second.
    let minted = first_admin.ok(&["-n", "shared", "create", "token", "robot"]);
    let robot = kubeconfig_aimed_at(&first, &second, Some(minted.trim()));
    let (code, stdout, stderr) = kubectl_with(
        &first,
        &robot,
        &[
            "auth",
            "whoami",
            "-o",
            "jsonpath={.status.userInfo.username}",
        ],
    );
    assert_eq!(
        (code, stdout.as_str()),
        (0, "system:serviceaccount:shared:robot"),
        "{stderr}"
    );

    // Another token cannot open the cluster's secrets: the server says so and exits.
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(binary)
        .args([
            "server",
            "--listen",
            "127.0.0.1:0",
            "--disable-controller-manager",
        ])
        .arg("--data-dir")
        .arg(dir.path().join("data"))
        .args(["--storage", storage, "--token", "not-the-cluster-token"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(
            Instant::now() < deadline,
            "a server with the wrong token kept running"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut stderr).unwrap();
    assert!(!status.success());
    assert!(
        stderr.contains("this store belongs to a cluster created with another token"),
        "{stderr}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_postgres_are_one_cluster() {
    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let url = harness.url();
    tokio::task::spawn_blocking(move || one_cluster_on_one_store(&url))
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_on_one_etcd_are_one_cluster() {
    let Some(harness) = rudder_storage::testing::etcd().await else {
        return;
    };
    let url = harness.url();
    tokio::task::spawn_blocking(move || one_cluster_on_one_store(&url))
        .await
        .unwrap();
}
