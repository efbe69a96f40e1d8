//! Helpers shared by the conformance cases.

use std::time::Duration;

use futures::StreamExt;

use crate::interface::{Storage, WatchStream};
use crate::types::*;

/// The store's current revision.
pub(crate) async fn revision(store: &dyn Storage) -> Revision {
    store.status().await.expect("status").revision
}

/// Puts `value` at `key` and returns the revision.
pub(crate) async fn put(store: &dyn Storage, key: &str, value: &str) -> Revision {
    store
        .put(key.as_bytes(), value.as_bytes(), 0)
        .await
        .expect("put")
}

/// Puts a binary `value` at `key` and returns the revision.
pub(crate) async fn put_bytes(store: &dyn Storage, key: &str, value: &[u8]) -> Revision {
    store.put(key.as_bytes(), value, 0).await.expect("put")
}

/// Collects `count` events from a watch, failing the test after `wait`.
pub(crate) async fn collect(stream: &mut WatchStream, count: usize, wait: Duration) -> Vec<Event> {
    let mut events = Vec::new();
    let deadline = tokio::time::Instant::now() + wait;
    while events.len() < count {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(batch))) => events.extend(batch.events),
            Ok(Some(Err(error))) => panic!("watch failed after {} events: {error}", events.len()),
            Ok(None) => panic!("watch ended after {} of {count} events", events.len()),
            Err(_) => panic!(
                "watch delivered {} of {count} events within {wait:?}: {events:?}",
                events.len()
            ),
        }
    }
    events
}

/// Asserts that the watch delivers nothing more within `wait`.
pub(crate) async fn assert_quiet(stream: &mut WatchStream, wait: Duration) {
    if let Ok(Some(item)) = tokio::time::timeout(wait, stream.next()).await {
        panic!("expected no more watch events, got {item:?}");
    }
}

/// Short for a key's string form in assertion messages.
pub(crate) fn key_string(kv: &KeyValue) -> String {
    String::from_utf8_lossy(&kv.key).into_owned()
}

pub(crate) const WAIT: Duration = Duration::from_secs(10);
