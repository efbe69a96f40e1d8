//! Faults a store must survive, checked with the linearizability checker: a `rudder server`
//! on SQLite killed with SIGKILL in the middle of 16 writers, twenty times (and on Cloud
//! Spanner's emulator, five times), loses no write it acknowledged and shows nothing that was
//! not written.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use rudder_storage::linearizability::{
    check, watch_log, AfterFailure, History, Input, Output, Recorder, Workload,
};
use rudder_storage::testing;
use rudder_storage::Storage;
use rudder_tests::server::RudderServer;

const ROUNDS: usize = 20;
const WRITERS: usize = 16;

/// The etcd driver on the server's gateway, without background compaction; the gateway may
/// start listening a moment after the API is ready.
async fn connect(gateway: &str) -> Arc<dyn Storage> {
    let config = testing::config_without_compaction(&format!("etcd://{gateway}"));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        match rudder_storage::open_config(&config).await {
            Ok(store) => return store,
            Err(error) if std::time::Instant::now() < deadline => {
                eprintln!("the gateway does not answer yet: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the gateway never answered: {error}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_under_sixteen_writers_loses_no_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "sqlite://{}?compact_interval=0",
        dir.path().join("state.db").display()
    );
    sigkill_rounds(&url, ROUNDS).await;
}

/// The same on Cloud Spanner (its emulator): a write is acknowledged only once its commit
/// returned, so a server killed mid-batch loses nothing it acknowledged, and the restarted
/// server's writer gets the meta row back from the dead one's open transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_of_a_server_on_spanner_loses_no_acknowledged_write() {
    let Some(harness) = testing::spanner().await else {
        return;
    };
    let url = format!("{}&compact_interval=0", harness.url());
    sigkill_rounds(&url, 5).await;
    harness.cleanup().await;
}

/// Kills a `rudder server` on `url` with SIGKILL `rounds` times under 16 writers through its
/// etcd gateway, restarting it each time, then checks the whole history and a watch over it.
async fn sigkill_rounds(url: &str, rounds: usize) {
    let binary = env!("CARGO_BIN_EXE_rudder");
    let url = url.to_string();
    let gateway = format!("127.0.0.1:{}", testing::free_port());
    let args = ["--etcd-listen", gateway.as_str()];
    let mut server =
        tokio::task::block_in_place(|| RudderServer::start_with_args(binary, &url, &args));
    let recorder = Recorder::new();
    let mut operations = Vec::new();
    let mut start_revision = None;
    let mut unknown_rounds = 0;
    for round in 0..rounds {
        let store = connect(&gateway).await;
        if start_revision.is_none() {
            start_revision = Some(store.status().await.unwrap().revision + 1);
        }
        let mut workload = Workload::new("/faults/", WRITERS, 100_000);
        workload.keys = 8;
        workload.request_timeout = Duration::from_secs(5);
        workload.after_failure = AfterFailure::Stop;
        // The etcd driver sends a request that found the server gone again once it is back,
        // so clients between requests at the kill carry on: stop them at the restart.
        let stop = Arc::new(AtomicBool::new(false));
        workload.stop = Some(stop.clone());
        // A restarted server may not write at once (on Spanner's emulator the killed one's
        // transaction holds the only write slot for a while): kill only a server that writes.
        writes_within(&*store, Duration::from_secs(60)).await;
        let clients = {
            let store = store.clone();
            tokio::spawn(async move { recorder.run(&[store], &workload).await })
        };
        let after = rand::rng().random_range(150..500);
        tokio::time::sleep(Duration::from_millis(after)).await;
        server = tokio::task::block_in_place(|| server.kill_and_restart(binary, &url, &args));
        stop.store(true, Ordering::Release);
        // Whatever was in flight died with the process: it was decided by now.
        let killed = recorder.now();
        let mut ops = clients.await.unwrap();
        let mut unknown = 0;
        for op in &mut ops {
            if matches!(op.output, Output::Unknown { .. }) {
                op.returned = Some(killed.max(op.call));
                unknown += 1;
            }
        }
        assert!(
            ops.iter().any(|op| op.write_revision().is_some()),
            "round {round}: no write was acknowledged before the kill"
        );
        unknown_rounds += usize::from(unknown > 0);
        operations.extend(ops);
        store.close().await;
    }
    // Back up: one list of every key, and a watch over every round.
    let store = connect(&gateway).await;
    let workload = Workload {
        keys: 8,
        ..Workload::new("/faults/", 1, 1)
    };
    let list = recorder
        .call(
            &*store,
            WRITERS,
            Input::List {
                keys: workload.all_keys(),
            },
            Duration::from_secs(10),
            &workload.prefix,
        )
        .await;
    assert!(matches!(list.output, Output::List { .. }), "{list}");
    operations.push(list);
    let until = store.status().await.unwrap().revision;
    let watch = watch_log(
        &*store,
        &workload.prefix,
        start_revision.unwrap(),
        until,
        Duration::from_secs(20),
    )
    .await
    .unwrap();
    store.close().await;
    drop(server);

    let history = History {
        operations,
        watch: Some(watch),
    };
    let acknowledged = history
        .operations
        .iter()
        .filter(|op| op.write_revision().is_some())
        .count();
    let report = check(&history);
    eprintln!("{acknowledged} acknowledged writes; {report}");
    assert!(report.is_clean(), "{report}");
    assert!(
        unknown_rounds > 0,
        "no request was ever in flight at a kill: the test did not test"
    );
}

/// Waits until a put outside the workload's prefix succeeds.
async fn writes_within(store: &dyn Storage, within: Duration) {
    let deadline = std::time::Instant::now() + within;
    loop {
        match store.put(b"/probe/writable", b"yes", 0).await {
            Ok(_) => return,
            Err(error) if std::time::Instant::now() < deadline => {
                eprintln!("the restarted server does not write yet: {error}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(error) => panic!("the restarted server never wrote: {error}"),
        }
    }
}

/// Runs `kubectl create configmap NAME` and returns whether it worked, how long it took and
/// what kubectl said.
fn create_configmap(server: &RudderServer, name: &str) -> (bool, Duration, String) {
    let started = std::time::Instant::now();
    let output = server.kubectl(
        "1.33",
        &["create", "configmap", name, "--request-timeout=30s", "-v=6"],
    );
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), started.elapsed(), said)
}

/// Creates ConfigMaps until one is created, for at most `within`; how long it took.
fn create_until_it_works(server: &RudderServer, prefix: &str, within: Duration) -> Duration {
    let started = std::time::Instant::now();
    for attempt in 0.. {
        let (ok, _, said) = create_configmap(server, &format!("{prefix}-{attempt}"));
        if ok {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "no create succeeded within {within:?}: {said}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    unreachable!()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubectl_gets_a_prompt_503_while_postgres_is_down_and_the_cluster_carries_on() {
    let Some(postgres) = testing::own_postgres() else {
        return;
    };
    let binary = env!("CARGO_BIN_EXE_rudder");
    tokio::task::block_in_place(|| {
        let server = RudderServer::start(binary, &postgres.url());
        server.kubectl_ok("1.33", &["create", "configmap", "before"]);
        postgres.stop();
        let (ok, took, said) = create_configmap(&server, "during");
        eprintln!(
            "with PostgreSQL down kubectl answered in {took:?}: {}",
            said.lines().last().unwrap_or_default()
        );
        assert!(!ok, "{said}");
        assert!(said.contains("503 Service Unavailable"), "{said}");
        assert!(said.contains("the database refuses connections"), "{said}");
        assert!(took < Duration::from_secs(15), "kubectl waited {took:?}");
        postgres.start();
        let back = create_until_it_works(&server, "after", Duration::from_secs(20));
        eprintln!("kubectl creates again {back:?} after PostgreSQL is back");
        let names = server.kubectl_ok("1.33", &["get", "configmaps", "-o", "name"]);
        assert!(names.contains("configmap/before"), "{names}");
        assert!(names.contains("configmap/after-"), "{names}");
        assert!(!names.contains("configmap/during"), "{names}");
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_on_three_etcd_members_serves_through_one_loss_and_recovers_from_two() {
    let Some(mut cluster) = testing::own_etcd_cluster().await else {
        return;
    };
    let binary = env!("CARGO_BIN_EXE_rudder");
    tokio::task::block_in_place(|| {
        let server = RudderServer::start(binary, &cluster.url());
        server.kubectl_ok("1.33", &["create", "configmap", "before"]);
        cluster.kill(0);
        // The two left take over: creates work again within etcd's request timeout, then
        // keep working.
        let serving = create_until_it_works(&server, "one-down-first", Duration::from_secs(20));
        eprintln!("with one member gone kubectl creates again after {serving:?}");
        for index in 0..10 {
            let (ok, _, said) = create_configmap(&server, &format!("one-down-{index}"));
            assert!(ok, "{said}\n{}", cluster.logs());
        }
        cluster.kill(1);
        let (ok, took, said) = create_configmap(&server, "no-quorum");
        eprintln!(
            "without a quorum kubectl answered in {took:?}: {}",
            said.lines().last().unwrap_or_default()
        );
        assert!(!ok, "{said}");
        assert!(said.contains("503 Service Unavailable"), "{said}");
        assert!(said.contains("etcdserver: request timed out"), "{said}");
        cluster.restart(0);
        cluster.restart(1);
        let back = create_until_it_works(&server, "after", Duration::from_secs(30));
        eprintln!("kubectl creates again {back:?} after the members are back");
        let names = server.kubectl_ok("1.33", &["get", "configmaps", "-o", "name"]);
        for name in ["before", "one-down-0", "one-down-9"] {
            assert!(names.contains(&format!("configmap/{name}\n")), "{names}");
        }
    });
}
