//! Compaction cases: what compaction removes never comes back, live watches and counts stay
//! exact (or fail with `Compacted`) while it runs, and background compaction keeps the history
//! of the last interval, as kube-apiserver's does.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::support::*;
use crate::config::CompactionConfig;
use crate::error::Error;
use crate::testing::Harness;
use crate::types::*;

pub async fn compaction_never_brings_a_deleted_key_back(harness: &dyn Harness) {
    let store = harness.open().await;
    for round in 0..10 {
        let key = format!("/gone/{round}");
        let first = put(&*store, &key, "old").await;
        let x = put(&*store, "/gone-x", "1").await;
        store.compact(x).await.unwrap();
        let DeleteOutcome::Deleted { .. } = store.delete(key.as_bytes(), None).await.unwrap()
        else {
            panic!("{key} exists")
        };
        let x = put(&*store, "/gone-x", "2").await;
        store.compact(x).await.unwrap();
        // A job that fails half-way and a create, sent together.
        let failing = {
            let store = store.clone();
            tokio::spawn(async move {
                store
                    .txn(TxnRequest {
                        success: vec![TxnOp::Put(
                            PutRequest::new("/gone-other", "v").with_lease(0x5eed),
                        )],
                        ..TxnRequest::default()
                    })
                    .await
            })
        };
        let created = store.create(key.as_bytes(), b"new", 0).await.unwrap();
        assert!(
            matches!(created, CreateOutcome::Created { .. }),
            "a deleted key came back: {created:?}"
        );
        assert!(matches!(
            failing.await.unwrap(),
            Err(Error::LeaseNotFound(_))
        ));
        let kv = store.get(key.as_bytes(), 0).await.unwrap().unwrap();
        assert_eq!((kv.value.as_slice(), kv.version), (&b"new"[..], 1));
        let stale = store.update(key.as_bytes(), b"stale", first, 0).await;
        assert!(
            matches!(stale, Ok(UpdateOutcome::Conflict { .. })),
            "{stale:?}"
        );
    }
    store.close().await;
}

pub async fn live_watches_see_every_event_or_an_error_when_compaction_overtakes_them(
    harness: &dyn Harness,
) {
    let store = harness.open().await;
    let open = || async {
        store
            .watch(WatchRequest::new(KeyRange::prefix("/w/")).with_prev_kv())
            .await
            .unwrap()
    };
    let mut stream = open().await;
    let mut errors = 0;
    for iteration in 0..200 {
        let base = revision(&*store).await;
        // Sent together, so that one database batch may hold the writes and the compaction.
        let value = format!("{iteration}");
        let (created, deleted, outside, compacted) = tokio::join!(
            store.put(b"/w/a", value.as_bytes(), 0),
            store.delete(b"/w/a", None),
            store.put(b"/z", b"z", 0),
            store.compact(base + 3),
        );
        let created = created.unwrap();
        let outside = outside.unwrap();
        match compacted {
            Ok(()) => {}
            // The compaction overtook the writes (an etcd request may): compact after them.
            Err(Error::FutureRevision { .. }) => store.compact(outside).await.unwrap(),
            Err(error) => panic!("compaction failed: {error}"),
        }
        let mut expected = vec![(EventKind::Put, created)];
        // (A delete that overtook the put deleted what an earlier iteration left behind.)
        if let DeleteOutcome::Deleted { revision, .. } = deleted.unwrap() {
            expected.push((EventKind::Delete, revision));
        }
        expected.sort_by_key(|(_, revision)| *revision);
        let mut seen = Vec::new();
        while seen.len() < expected.len() {
            match tokio::time::timeout(WAIT, stream.next()).await {
                Ok(Some(Ok(batch))) => {
                    seen.extend(batch.events.iter().map(|e| (e.kind, e.kv.mod_revision)))
                }
                Ok(Some(Err(Error::Compacted { .. }))) => {
                    errors += 1;
                    seen = expected.clone();
                    stream = open().await;
                }
                Ok(Some(Err(error))) => panic!("iteration {iteration}: watch failed: {error}"),
                Ok(None) => panic!("iteration {iteration}: the watch ended without an error"),
                Err(_) => panic!(
                    "iteration {iteration}: expected {expected:?}, the watch delivered {seen:?}"
                ),
            }
        }
        assert_eq!(
            seen, expected,
            "iteration {iteration}: every event, in order, none missing"
        );
    }
    // Errors are allowed, but a watch that always fails is no watch.
    assert!(errors < 200, "every iteration ended the watch");
    store.close().await;
}

pub async fn count_only_reads_are_exact_or_compacted_while_compaction_runs(harness: &dyn Harness) {
    let store = harness.open().await;
    for round in 0..20 {
        let prefix = format!("/cnt/{round}/");
        let keys = 400;
        let mut created = Vec::new();
        for chunk in (0..keys).collect::<Vec<_>>().chunks(50) {
            let txn = TxnRequest {
                success: chunk
                    .iter()
                    .map(|key| TxnOp::Put(PutRequest::new(format!("{prefix}{key:04}"), "v")))
                    .collect(),
                ..TxnRequest::default()
            };
            created.push(store.txn(txn).await.unwrap().revision);
        }
        // Every key deleted, so compaction has rows to remove below the counted revision.
        store
            .txn(TxnRequest {
                success: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                    range: KeyRange::prefix(prefix.clone()),
                    prev_kv: false,
                })],
                ..TxnRequest::default()
            })
            .await
            .unwrap();
        let at = created[3];
        let counter = {
            let store = store.clone();
            let prefix = prefix.clone();
            tokio::spawn(async move {
                loop {
                    let request = RangeRequest::new(KeyRange::prefix(prefix.clone()))
                        .at_revision(at)
                        .count_only();
                    match store.range(request).await {
                        Ok(response) => assert_eq!(
                            response.count, 200,
                            "a count at revision {at} is exact or fails"
                        ),
                        Err(Error::Compacted { .. }) => return,
                        Err(error) => panic!("count failed: {error}"),
                    }
                }
            })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        store.compact(revision(&*store).await).await.unwrap();
        tokio::time::timeout(WAIT, counter)
            .await
            .expect("the count sees the compaction")
            .unwrap();
    }
    store.close().await;
}

pub async fn background_compaction_keeps_the_last_interval_of_history(harness: &dyn Harness) {
    let interval = Duration::from_millis(400);
    let store: Arc<dyn crate::Storage> = harness
        .open_with(CompactionConfig {
            interval,
            retain: 0,
        })
        .await;
    // Half an interval in, so that a compactor tick comes soon after the writes.
    tokio::time::sleep(interval / 2).await;
    let a = put(&*store, "/hist", "a").await;
    let b = put(&*store, "/hist", "b").await;
    let written = tokio::time::Instant::now();
    // For one interval after `b`, the state before it stays readable.
    while written.elapsed() < interval * 9 / 10 {
        let kv = store.get(b"/hist", a).await;
        assert!(
            matches!(&kv, Ok(Some(kv)) if kv.value == b"a"),
            "history younger than one interval was compacted after {:?}: {kv:?}",
            written.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // And later it goes, with no revision count configured.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = store.status().await.unwrap();
        if status.compact_revision >= b {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "background compaction did not run: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(matches!(
        store.get(b"/hist", a).await,
        Err(Error::Compacted { .. })
    ));
    store.close().await;
}

pub async fn a_watch_on_another_server_sees_every_event_or_compacted(harness: &dyn Harness) {
    let store = harness.open().await;
    let other = harness.open().await;
    let open = || async {
        other
            .watch(WatchRequest::new(KeyRange::prefix("/x/")))
            .await
            .unwrap()
    };
    let mut stream = open().await;
    for iteration in 0..8 {
        let created = store.put(b"/x/a", b"v", 0).await.unwrap();
        let DeleteOutcome::Deleted {
            revision: deleted, ..
        } = store.delete(b"/x/a", None).await.unwrap()
        else {
            panic!("/x/a exists")
        };
        let last = store.put(b"/z", b"z", 0).await.unwrap();
        store.compact(last).await.unwrap();
        let expected = vec![(EventKind::Put, created), (EventKind::Delete, deleted)];
        let mut seen = Vec::new();
        while seen.len() < expected.len() {
            match tokio::time::timeout(WAIT, stream.next()).await {
                Ok(Some(Ok(batch))) => {
                    seen.extend(batch.events.iter().map(|e| (e.kind, e.kv.mod_revision)))
                }
                Ok(Some(Err(Error::Compacted { .. }))) => {
                    // The other server's compaction removed rows before this one read them:
                    // the watch says so, and the client re-lists.
                    seen = expected.clone();
                    stream = open().await;
                }
                other => panic!("iteration {iteration}: {other:?} after {seen:?}"),
            }
        }
        assert_eq!(seen, expected, "iteration {iteration}");
    }
    other.close().await;
    store.close().await;
}
