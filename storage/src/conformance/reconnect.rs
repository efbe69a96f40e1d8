//! A case for the database drivers that needs the database's help, so each driver's test file
//! runs it with its own way of dropping connections (PostgreSQL: `pg_terminate_backend`;
//! MySQL: `KILL CONNECTION`): what a restart or a failover does to clients.

use std::time::Duration;

use futures::future::BoxFuture;
use futures::StreamExt;

use crate::testing::Harness;
use crate::types::*;

/// Two stores on one database, a watch on the second: after `drop_connections` (given the
/// harness URL) closes every connection of both, writes through the first and the second's
/// watch carry on, without reopening either store.
pub async fn stores_recover_when_the_database_drops_their_connections(
    harness: Box<dyn Harness>,
    drop_connections: impl FnOnce(String) -> BoxFuture<'static, ()>,
) {
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

    drop_connections(harness.url()).await;
    // The servers' side of the connections finishes going away.
    tokio::time::sleep(Duration::from_millis(100)).await;

    // No request was in flight, so none fails: a pooled connection found dead is replaced
    // (the reader's by a ping, the writer's by a second try of a batch whose first statement
    // found it gone).
    let written = store
        .put(b"/r/after", b"2", 0)
        .await
        .expect("the first write after the connections went works");
    assert_eq!(
        store
            .get(b"/r/after", 0)
            .await
            .unwrap()
            .unwrap()
            .mod_revision,
        written
    );
    // The other store's watch sees it: its poller (and listener) reconnected too.
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
