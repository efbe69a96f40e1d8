//! The storage conformance suite against the MySQL/MariaDB driver.
#![allow(clippy::unwrap_used)]

rudder_storage::conformance_tests!(rudder_storage::testing::mysql());

/// The server drops every connection of the stores (what a restart or a failover does to
/// clients): writes, reads and a watch on another store carry on once connections are back,
/// without restarting Rudder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stores_recover_when_the_server_drops_their_connections() {
    use futures::StreamExt;
    use rudder_storage::{KeyRange, WatchRequest};
    use sqlx::{Connection, Row};
    use std::time::Duration;

    let Some(harness) = rudder_storage::testing::mysql().await else {
        return;
    };
    let url = harness.url();
    let database = url
        .split('?')
        .next()
        .and_then(|base| base.rsplit('/').next())
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

    sqlx::any::install_default_drivers();
    let admin_url = std::env::var(rudder_storage::testing::MYSQL_ENV).unwrap();
    let mut admin = sqlx::AnyConnection::connect(&admin_url).await.unwrap();
    let sessions = sqlx::query(
        "SELECT CAST(id AS SIGNED) FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()",
    )
    .bind(database.clone())
    .fetch_all(&mut admin)
    .await
    .unwrap();
    assert!(
        sessions.len() >= 2,
        "expected the stores' connections to {database}"
    );
    for session in sessions {
        let id: i64 = session.try_get(0).unwrap();
        // A connection may close by itself meanwhile.
        let _ = sqlx::query(&format!("KILL CONNECTION {id}"))
            .execute(&mut admin)
            .await;
    }

    // Writes recover (a request caught in flight may fail, as with any restart).
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
    // The other store's watch sees it: its poller reconnected too.
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

/// Errors name the problem: a server that refuses the user is `Unavailable` with MySQL's
/// message and the fix, not a pool timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_user_is_reported_with_the_fix() {
    let Some(harness) = rudder_storage::testing::mysql().await else {
        return;
    };
    let url = harness.url();
    let (scheme_user, rest) = url.split_once('@').unwrap();
    let user = scheme_user.trim_start_matches("mysql://");
    let user = user.split(':').next().unwrap();
    let wrong = format!("mysql://{user}:certainly-not-the-password@{rest}");
    let error = match rudder_storage::open(&wrong).await {
        Ok(store) => {
            store.close().await;
            panic!("a wrong password was accepted")
        }
        Err(error) => error,
    };
    assert!(
        matches!(error, rudder_storage::Error::Unavailable { .. }),
        "{error:?}"
    );
    let message = error.to_string();
    assert!(message.contains("Access denied"), "{message}");
    assert!(message.contains("check the user and password"), "{message}");
    harness.cleanup().await;
}
