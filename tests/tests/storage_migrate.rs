//! Moving a running cluster from SQLite to PostgreSQL as the README tells a user to: stop the
//! server, `rudder storage migrate`, start it again on the new store. Objects keep their
//! resourceVersions, and a kube-rs watcher that was watching before carries on through the
//! move without listing again. Snapshots: `rudder storage snapshot save` from a live server's
//! store, `info`, and `restore` into a new store that a server then serves.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::watcher;
use rudder_tests::{admin_client, run, Kubectl, RudderServer};

const BINARY: &str = env!("CARGO_BIN_EXE_rudder");

fn configmap(name: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        data: Some([("key".to_string(), name.to_string())].into()),
        ..ConfigMap::default()
    }
}

/// What a watcher said, in order: `init`, `init done`, `applied NAME`, `error`.
async fn next_said(events: &mut tokio::sync::mpsc::UnboundedReceiver<String>) -> String {
    tokio::time::timeout(Duration::from_secs(90), events.recv())
        .await
        .expect("the watcher said something within 90 s")
        .expect("the watcher runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_moves_from_sqlite_to_postgres_and_its_watchers_carry_on() {
    let Some(postgres) = rudder_storage::testing::postgres().await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("cluster.db").display());
    let server = RudderServer::start(BINARY, &sqlite);
    let client = admin_client(server.kubeconfig()).await;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    api.create(&PostParams::default(), &configmap("before"))
        .await
        .unwrap();

    let (said, mut events) = tokio::sync::mpsc::unbounded_channel();
    let watching = tokio::spawn({
        let api = api.clone();
        async move {
            let mut stream = watcher(api, watcher::Config::default()).boxed();
            loop {
                let what = match stream.next().await {
                    None => return,
                    Some(Err(_)) => {
                        // The server is away for the move: try again a little later, as
                        // kube-runtime's default back-off does.
                        tokio::time::sleep(Duration::from_millis(500)).await;
                        "error".to_string()
                    }
                    Some(Ok(watcher::Event::Init)) => "init".into(),
                    Some(Ok(watcher::Event::InitDone)) => "init done".into(),
                    Some(Ok(watcher::Event::InitApply(cm) | watcher::Event::Apply(cm))) => {
                        format!("applied {}", cm.metadata.name.unwrap_or_default())
                    }
                    Some(Ok(watcher::Event::Delete(cm))) => {
                        format!("deleted {}", cm.metadata.name.unwrap_or_default())
                    }
                };
                if said.send(what).is_err() {
                    return;
                }
            }
        }
    });
    let mut listed = Vec::new();
    loop {
        let what = next_said(&mut events).await;
        if what == "init done" {
            break;
        }
        listed.push(what);
    }
    assert!(listed.contains(&"applied before".to_string()), "{listed:?}");
    api.create(&PostParams::default(), &configmap("during"))
        .await
        .unwrap();
    assert_eq!(next_said(&mut events).await, "applied during");
    let version = |cm: ConfigMap| cm.metadata.resource_version.unwrap();
    let before_version = version(api.get("before").await.unwrap());

    // A write the watcher does not see, so its resourceVersion is behind the store's when
    // the server stops: it resumes from history, which the copy must carry.
    let elsewhere: Api<ConfigMap> = Api::namespaced(api.clone().into_client(), "kube-public");
    elsewhere
        .create(&PostParams::default(), &configmap("elsewhere"))
        .await
        .unwrap();

    // The move: stop, migrate, start on PostgreSQL with the same data dir and address.
    let mut server = server;
    assert!(server.terminate(), "the server stops on SIGTERM");
    let url = postgres.url();
    let migrated = run(
        BINARY,
        &["storage", "migrate", "--from", &sqlite, "--to", &url],
    );
    let server = server.restart_on(BINARY, &url);
    let stdout = String::from_utf8_lossy(&migrated.stdout).to_string();
    assert!(
        migrated.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&migrated.stderr)
    );
    assert!(stdout.contains("verified: "), "{stdout}");
    assert!(stdout.contains("target: postgres"), "{stdout}");

    // Same objects, same resourceVersions, on the new store.
    assert_eq!(version(api.get("before").await.unwrap()), before_version);
    api.create(&PostParams::default(), &configmap("after"))
        .await
        .unwrap();
    // The watcher resumes from its resourceVersion: errors while the server was away, then
    // the new object — and never a new list.
    loop {
        let what = next_said(&mut events).await;
        assert!(
            what == "error" || what == "applied after",
            "the watcher listed again or saw something else: {what}"
        );
        if what == "applied after" {
            break;
        }
    }
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    let names = kubectl.ok(&["get", "configmaps", "-o", "name"]);
    for name in ["before", "during", "after"] {
        assert!(names.contains(&format!("configmap/{name}")), "{names}");
    }
    watching.abort();
    // Only now may the old store go: the new one must not need it.
    drop(server);
    postgres.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_of_a_cluster_restores_into_a_new_store_that_a_server_serves() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("cluster.db").display());
    let server = RudderServer::start(BINARY, &sqlite);
    let kubectl = Kubectl {
        server: &server,
        version: "1.33",
        namespace: "default".into(),
    };
    kubectl.ok(&["create", "configmap", "kept", "--from-literal=a=b"]);
    let version = kubectl.ok(&[
        "get",
        "configmap",
        "kept",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);

    // Saved while the server runs (a consistent read at one revision).
    let file = dir.path().join("cluster.snap");
    let file = file.to_str().unwrap();
    let saved = run(
        BINARY,
        &["storage", "snapshot", "save", file, "--storage", &sqlite],
    );
    assert!(
        saved.status.success(),
        "{}",
        String::from_utf8_lossy(&saved.stderr)
    );
    let info = run(BINARY, &["storage", "snapshot", "info", file]);
    let info = String::from_utf8_lossy(&info.stdout).to_string();
    assert!(info.contains("from:      sqlite"), "{info}");
    assert!(info.contains("(checked)"), "{info}");

    // A store that already holds something is refused without --force.
    let other = format!("sqlite://{}", dir.path().join("restored.db").display());
    let restored = run(
        BINARY,
        &["storage", "snapshot", "restore", file, "--storage", &other],
    );
    assert!(
        restored.status.success(),
        "{}",
        String::from_utf8_lossy(&restored.stderr)
    );
    let again = run(
        BINARY,
        &["storage", "snapshot", "restore", file, "--storage", &other],
    );
    assert!(!again.status.success());
    let refused = String::from_utf8_lossy(&again.stderr).to_string();
    assert!(refused.contains("is not empty"), "{refused}");
    let forced = run(
        BINARY,
        &[
            "storage",
            "snapshot",
            "restore",
            file,
            "--storage",
            &other,
            "--force",
        ],
    );
    assert!(
        forced.status.success(),
        "{}",
        String::from_utf8_lossy(&forced.stderr)
    );

    // A corrupted file is refused before anything is written.
    let mut bytes = std::fs::read(file).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    let corrupt = dir.path().join("corrupt.snap");
    std::fs::write(&corrupt, bytes).unwrap();
    let fresh = format!("sqlite://{}", dir.path().join("fresh.db").display());
    let output = run(
        BINARY,
        &[
            "storage",
            "snapshot",
            "restore",
            corrupt.to_str().unwrap(),
            "--storage",
            &fresh,
        ],
    );
    assert!(!output.status.success());
    let error = String::from_utf8_lossy(&output.stderr).to_string();
    assert!(error.contains("checksum does not match"), "{error}");

    // The restored store, served: the object with its resourceVersion.
    let restored = server.restart_on(BINARY, &other);
    let kubectl = Kubectl {
        server: &restored,
        version: "1.33",
        namespace: "default".into(),
    };
    let again = kubectl.ok(&[
        "get",
        "configmap",
        "kept",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ]);
    assert_eq!(again, version);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_takes_scheduled_snapshots_and_keeps_the_newest() {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = format!("sqlite://{}", dir.path().join("cluster.db").display());
    let server = RudderServer::start_with_args(
        BINARY,
        &sqlite,
        &["--snapshot-interval", "1s", "--snapshot-retention", "2"],
    );
    let snapshots = server.data_dir().join("snapshots");
    let taken = || -> Vec<std::path::PathBuf> {
        let mut found: Vec<_> = std::fs::read_dir(&snapshots)
            .into_iter()
            .flatten()
            .flatten()
            .map(|entry| entry.path())
            .filter(|path| {
                path.extension()
                    .is_some_and(|extension| extension == "snap")
            })
            .collect();
        found.sort();
        found
    };
    rudder_tests::eventually(
        "two scheduled snapshots",
        Duration::from_secs(30),
        || async { taken().len() >= 2 },
    )
    .await;
    let first = taken();
    // Two more intervals: newer snapshots replace the older ones, two are kept.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let later = taken();
    assert_eq!(later.len(), 2, "{later:?}");
    assert_ne!(later, first, "newer snapshots replaced the older");
    for path in later {
        let info = run(
            BINARY,
            &["storage", "snapshot", "info", path.to_str().unwrap()],
        );
        let shown = String::from_utf8_lossy(&info.stdout).to_string();
        assert!(
            info.status.success(),
            "{}",
            String::from_utf8_lossy(&info.stderr)
        );
        assert!(shown.contains("(checked)"), "{shown}");
    }
}
