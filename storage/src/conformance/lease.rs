//! Lease cases: expiry deletes keys through watchable writes; keep-alive, time-to-live, list
//! and revoke behave as etcd's.

use std::time::Duration;

use super::support::*;
use crate::error::Error;
use crate::testing::Harness;
use crate::types::*;

pub async fn lease_expiry_deletes_keys_with_watch_events(harness: &dyn Harness) {
    let store = harness.open().await;
    let lease = store.lease_grant(1, 0).await.unwrap();
    assert!(lease.id != 0 && lease.ttl >= 1);
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/l/")).with_prev_kv())
        .await
        .unwrap();
    let first = store.put(b"/l/a", b"1", lease.id).await.unwrap();
    store.put(b"/l/b", b"2", lease.id).await.unwrap();
    store.put(b"/l/kept", b"3", 0).await.unwrap();
    assert_eq!(
        store.get(b"/l/a", 0).await.unwrap().unwrap().lease,
        lease.id
    );
    let events = collect(&mut stream, 5, WAIT).await;
    let deletes: Vec<&Event> = events
        .iter()
        .filter(|e| e.kind == EventKind::Delete)
        .collect();
    assert_eq!(deletes.len(), 2, "both leased keys are deleted: {events:?}");
    for delete in &deletes {
        assert!(delete.kv.mod_revision > first);
        assert_eq!(delete.prev_kv.as_ref().map(|kv| kv.lease), Some(lease.id));
    }
    assert_eq!(store.get(b"/l/a", 0).await.unwrap(), None);
    assert_eq!(store.get(b"/l/b", 0).await.unwrap(), None);
    assert!(store.get(b"/l/kept", 0).await.unwrap().is_some());
    assert!(matches!(
        store.lease_time_to_live(lease.id, false).await,
        Err(Error::LeaseNotFound(_))
    ));
    store.close().await;
}

pub async fn lease_keep_alive_time_to_live_list_and_revoke(harness: &dyn Harness) {
    let store = harness.open().await;
    let lease = store.lease_grant(30, 0).await.unwrap();
    assert_eq!(lease.ttl, 30);
    let wanted = rand::random::<i64>().abs().max(1);
    let chosen = store.lease_grant(60, wanted).await.unwrap();
    assert_eq!(chosen.id, wanted);
    assert!(matches!(
        store.lease_grant(60, wanted).await,
        Err(Error::LeaseAlreadyExists(_))
    ));
    store.put(b"/lk/x", b"1", lease.id).await.unwrap();
    store.put(b"/lk/y", b"2", lease.id).await.unwrap();
    let info = store.lease_time_to_live(lease.id, true).await.unwrap();
    assert_eq!(info.granted_ttl, 30);
    assert!(
        info.ttl > 25 && info.ttl <= 30,
        "remaining ttl {}",
        info.ttl
    );
    let mut keys = info.keys.clone();
    keys.sort();
    assert_eq!(keys, [b"/lk/x".to_vec(), b"/lk/y".to_vec()]);
    assert_eq!(store.lease_keep_alive(lease.id).await.unwrap(), 30);
    let listed = store.lease_list().await.unwrap();
    assert!(
        listed.contains(&lease.id) && listed.contains(&chosen.id),
        "{listed:?}"
    );

    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/lk/")))
        .await
        .unwrap();
    store.lease_revoke(lease.id).await.unwrap();
    let events = collect(&mut stream, 2, WAIT).await;
    assert!(events.iter().all(|e| e.kind == EventKind::Delete));
    assert_eq!(
        events[0].kv.mod_revision, events[1].kv.mod_revision,
        "a revoke deletes its keys in one revision"
    );
    assert_eq!(
        store
            .range(RangeRequest::new(KeyRange::prefix("/lk/")).count_only())
            .await
            .unwrap()
            .count,
        0
    );
    let renewed = store.lease_keep_alive(lease.id).await;
    assert!(
        matches!(renewed, Err(Error::LeaseNotFound(_))),
        "keep-alive of a revoked lease: {renewed:?}"
    );
    let revoked = store.lease_revoke(lease.id).await;
    assert!(
        matches!(revoked, Err(Error::LeaseNotFound(_))),
        "second revoke: {revoked:?}"
    );
    assert!(!store.lease_list().await.unwrap().contains(&lease.id));
    store.lease_revoke(chosen.id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(10)).await;
    store.close().await;
}

pub async fn put_with_an_unknown_lease_fails(harness: &dyn Harness) {
    let store = harness.open().await;
    let before = revision(&*store).await;
    match store.put(b"/nl", b"x", 987_654_321).await {
        Err(Error::LeaseNotFound(_)) => {}
        other => panic!("expected LeaseNotFound, got {other:?}"),
    }
    assert_eq!(revision(&*store).await, before);
    store.close().await;
}

pub async fn lease_expiry_follows_one_clock_for_every_server(harness: &dyn Harness) {
    let store = harness.open().await;
    // A second server on the same backend whose wall clock runs 4 s ahead.
    let skewed = harness.open_with_clock_offset(Duration::from_secs(4)).await;
    let lease = store.lease_grant(5, 0).await.unwrap();
    store.put(b"/skew/a", b"1", lease.id).await.unwrap();
    let other = skewed.lease_grant(5, 0).await.unwrap();
    skewed.put(b"/skew/b", b"2", other.id).await.unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for (key, id) in [(&b"/skew/a"[..], lease.id), (&b"/skew/b"[..], other.id)] {
        assert!(
            store.get(key, 0).await.unwrap().is_some(),
            "a 5 s lease expired after 1.5 s because one server's clock is ahead"
        );
        for view in [&store, &skewed] {
            let ttl = view.lease_time_to_live(id, false).await.unwrap().ttl;
            assert!((3..=5).contains(&ttl), "remaining ttl {ttl} s");
        }
    }
    // Gone now, not later in another case's history (etcd's revisions are shared).
    store.lease_revoke(lease.id).await.unwrap();
    store.lease_revoke(other.id).await.unwrap();
    skewed.close().await;
    store.close().await;
}
