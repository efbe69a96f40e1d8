//! The storage conformance suite against the postgres driver, plus what only PostgreSQL has:
//! a server that drops its connections (a restart) while Rudder runs.
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::postgres());

/// A database restart drops every connection: writes, reads and cross-store watches must carry
/// on once the database is back, without restarting Rudder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_recover_when_the_database_drops_their_connections() {
    use futures::StreamExt;
    use rudder_storage::{KeyRange, WatchRequest};
    use sqlx::Connection;
    use std::time::Duration;

    let Some(harness) = rudder_storage::testing::postgres().await else {
        return;
    };
    let url = harness.url();
    let schema = url
        .split("schema=")
        .nth(1)
        .and_then(|rest| rest.split('&').next())
        .unwrap()
        .to_string();
    let store = harness.open().await;
    let observer = harness.open().await;
    let mut watch = observer
        .watch(WatchRequest::new(KeyRange::prefix("/r/")))
        .await
        .unwrap();
    store.put(b"/r/before", b"1", 0).await.unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(first.events[0].kv.key, b"/r/before");

    // What a restart does to clients: every backend serving these stores goes away.
    let base = url.split('?').next().unwrap();
    sqlx::any::install_default_drivers();
    let mut admin = sqlx::AnyConnection::connect(base).await.unwrap();
    let terminate = format!(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'rudder_{schema}'"
    );
    let killed = sqlx::query(&terminate).fetch_all(&mut admin).await.unwrap();
    assert!(
        killed.len() >= 2,
        "expected the stores' connections to be terminated"
    );

    // Writes recover (a request caught in flight may fail, as with any database restart).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let written = loop {
        match store.put(b"/r/after", b"2", 0).await {
            Ok(revision) => break revision,
            Err(error) => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "writes did not recover: {error}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    assert_eq!(
        store
            .get(b"/r/after", 0)
            .await
            .unwrap()
            .unwrap()
            .mod_revision,
        written
    );
    // The other store's watch sees it: its listener and poller reconnected too.
    let seen = tokio::time::timeout(Duration::from_secs(15), watch.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(seen.events[0].kv.key, b"/r/after");
    assert_eq!(seen.events[0].kv.mod_revision, written);
    store.close().await;
    observer.close().await;
    harness.cleanup().await;
}
