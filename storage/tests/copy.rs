//! Copies between drivers (`rudder storage migrate`) and snapshots restored into every driver:
//! every key keeps its revisions, version and lease, the store its revision and compacted
//! revision, and the history after the compaction comes along (reads at past revisions and
//! watches from them give what the source gave).

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::time::Duration;

use futures::StreamExt;
use rudder_storage::copy::{self, snapshot, StoreSink, INTERNAL_PREFIX};
use rudder_storage::testing::{self, Harness};
use rudder_storage::*;

/// Writes a history with everything a copy must carry: versions above one, deletes, keys
/// recreated, a transaction writing two keys, leases (one revoked after the compaction, so
/// the copied history names a lease the source no longer has), and a compaction in the
/// middle. Returns a revision inside the history kept after the compaction.
async fn populate(store: &dyn Storage) -> Revision {
    let kept = store.lease_grant(600, 0).await.unwrap().id;
    let doomed = store.lease_grant(600, 0).await.unwrap().id;
    for i in 0..30 {
        let key = format!("/registry/configmaps/default/c{i:02}");
        store
            .create(key.as_bytes(), format!("v{i}").as_bytes(), 0)
            .await
            .unwrap();
    }
    for round in 0..2 {
        for i in 0..10 {
            let key = format!("/registry/configmaps/default/c{i:02}");
            let current = store.get(key.as_bytes(), 0).await.unwrap().unwrap();
            let value = format!("v{i}-{round}");
            store
                .update(key.as_bytes(), value.as_bytes(), current.mod_revision, 0)
                .await
                .unwrap();
        }
    }
    store
        .create(b"/registry/events/default/e1", b"e1", kept)
        .await
        .unwrap();
    for i in 20..25 {
        let key = format!("/registry/configmaps/default/c{i:02}");
        store.delete(key.as_bytes(), None).await.unwrap();
    }
    store
        .txn(TxnRequest {
            success: vec![
                TxnOp::Put(PutRequest::new(
                    b"/registry/multi/a".to_vec(),
                    b"a".to_vec(),
                )),
                TxnOp::Put(PutRequest::new(
                    b"/registry/multi/b".to_vec(),
                    b"b".to_vec(),
                )),
            ],
            ..TxnRequest::default()
        })
        .await
        .unwrap();
    let compact_at = store.status().await.unwrap().revision - 3;
    store.compact(compact_at).await.unwrap();
    // History after the compaction.
    store
        .put(b"/registry/configmaps/default/c00", b"after", 0)
        .await
        .unwrap();
    let middle = store.status().await.unwrap().revision;
    store
        .delete(b"/registry/configmaps/default/c01", None)
        .await
        .unwrap();
    store
        .create(b"/registry/configmaps/default/c20", b"again", 0)
        .await
        .unwrap();
    store
        .create(b"/registry/events/default/e2", b"e2", doomed)
        .await
        .unwrap();
    store
        .put(b"/registry/events/default/e1", b"e1-2", kept)
        .await
        .unwrap();
    store.lease_revoke(doomed).await.unwrap();
    store
        .put(b"/registry/leases/last", b"last", 0)
        .await
        .unwrap();
    middle
}

/// Copies `source` into `target` as `rudder storage migrate` does and checks the copy.
async fn migrate(source: &dyn Storage, target: &dyn Storage, middle: Revision) -> copy::Totals {
    assert!(copy::is_empty(target).await.unwrap());
    let plan = copy::plan(source, true).await.unwrap();
    let mut done = 0;
    copy::dump(source, &plan, &mut StoreSink(target), &mut |n| done = n)
        .await
        .unwrap();
    assert_eq!(done, plan.total_work());
    check_copy(source, target, middle).await
}

/// The target holds what the source holds, now and at past revisions, with the same
/// revision, compacted revision and history.
async fn check_copy(source: &dyn Storage, target: &dyn Storage, middle: Revision) -> copy::Totals {
    let (from, to) = (
        source.status().await.unwrap(),
        target.status().await.unwrap(),
    );
    assert_eq!(
        to.revision, from.revision,
        "{} → {}",
        from.driver, to.driver
    );
    assert_eq!(
        to.compact_revision.max(1),
        from.compact_revision.max(1),
        "{} → {}",
        from.driver,
        to.driver
    );
    let now = copy::verify(source, target, from.revision).await.unwrap();
    assert!(now.keys >= 25, "{now:?}");
    // Reads in the past: at the compacted revision and in the history after it.
    for revision in [from.compact_revision, middle] {
        copy::verify(source, target, revision).await.unwrap();
    }
    // A watch resumed from the history gives the same events on both.
    let (before, after) = (
        history(source, middle, from.revision).await,
        history(target, middle, from.revision).await,
    );
    assert_eq!(after.len(), before.len(), "{} → {}", from.driver, to.driver);
    for (index, (want, got)) in before.iter().zip(&after).enumerate() {
        assert!(
            want == got,
            "event {index} differs: {want:?} against {got:?}"
        );
    }
    // Leases live in the source are live in the target.
    let mut leases = source.lease_list().await.unwrap();
    leases.sort();
    let mut copied = target.lease_list().await.unwrap();
    copied.sort();
    assert_eq!(copied, leases);
    now
}

/// The events a watch from `from` delivers up to `to`, Rudder's own keys left out.
async fn history(store: &dyn Storage, from: Revision, to: Revision) -> Vec<(EventKind, KeyValue)> {
    let mut watch = store
        .watch(WatchRequest::new(KeyRange::prefix("")).from_revision(from))
        .await
        .unwrap();
    let mut events = Vec::new();
    let mut seen = 0;
    while seen < to {
        match tokio::time::timeout(Duration::from_millis(500), watch.next()).await {
            Ok(batch) => {
                let batch = batch.unwrap().unwrap();
                // Only a batch without events says everything up to its revision came.
                if batch.events.is_empty() {
                    seen = seen.max(batch.revision);
                }
                for event in batch.events {
                    seen = seen.max(event.kv.mod_revision);
                    if !event.kv.key.starts_with(INTERNAL_PREFIX) && event.kv.mod_revision <= to {
                        events.push((event.kind, event.kv));
                    }
                }
            }
            Err(_) => watch.request_progress(),
        }
    }
    assert!(!events.is_empty());
    events
}

type Harnesses = (
    Box<dyn Harness>,
    Box<dyn Harness>,
    Box<dyn Harness>,
    Box<dyn Harness>,
);

async fn harnesses() -> Option<Harnesses> {
    Some((
        testing::sqlite().await?,
        testing::postgres().await?,
        testing::mysql().await?,
        testing::spanner().await?,
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_migrates_round_the_drivers_and_keeps_its_revisions() {
    let Some((sqlite, postgres, mysql, spanner)) = harnesses().await else {
        return;
    };
    let Some(etcd) = testing::own_etcd().await else {
        return;
    };
    let last = testing::sqlite().await.unwrap();
    let first = sqlite.open().await;
    let middle = populate(first.as_ref()).await;
    let chain = [
        postgres.open().await,
        etcd.open().await,
        mysql.open().await,
        spanner.open().await,
        last.open().await,
    ];
    let mut source = first.clone();
    let mut digests = Vec::new();
    for target in chain {
        let totals = migrate(source.as_ref(), target.as_ref(), middle).await;
        digests.push(totals.digest);
        source = target;
    }
    // Back on SQLite after postgres → etcd → mysql → spanner: the same store, key for key.
    check_copy(first.as_ref(), source.as_ref(), middle).await;
    assert_eq!(digests.len(), 5);
    digests.dedup();
    assert_eq!(digests.len(), 1, "every hop has the same content");
    for harness in [postgres, mysql, spanner] {
        harness.cleanup().await;
    }
}

/// Thousands of revisions: the source's watch delivers them in many batches (etcd's carry
/// the store's revision while they catch up), and the copy takes several history steps.
async fn many_writes(store: &dyn Storage, count: usize) {
    for index in 0..count {
        let key = format!("/registry/pods/default/p{:03}", index % 700);
        store.put(key.as_bytes(), &[b'x'; 300], 0).await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_from_etcd_keeps_its_revisions() {
    let Some(etcd) = testing::own_etcd().await else {
        return;
    };
    let target = testing::sqlite().await.unwrap();
    let source = etcd.open().await;
    let middle = populate(source.as_ref()).await;
    many_writes(source.as_ref(), 2500).await;
    let totals = migrate(source.as_ref(), target.open().await.as_ref(), middle).await;
    assert!(totals.keys >= 700, "{totals:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_snapshot_restores_into_every_driver() {
    let Some((sqlite, postgres, mysql, spanner)) = harnesses().await else {
        return;
    };
    let Some(etcd) = testing::own_etcd().await else {
        return;
    };
    let source = sqlite.open().await;
    let middle = populate(source.as_ref()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cluster.snap");
    let saved = snapshot::save(source.as_ref(), &path, true, &mut |_| {})
        .await
        .unwrap();
    assert_eq!(
        saved.header.plan.revision,
        source.status().await.unwrap().revision
    );
    assert!(!dir.path().join("cluster.snap.part").exists());
    let other = testing::sqlite().await.unwrap();
    for target in [
        other.open().await,
        postgres.open().await,
        mysql.open().await,
        spanner.open().await,
        etcd.open().await,
    ] {
        let file = snapshot::SnapshotFile::open(&path).unwrap();
        file.restore(&mut StoreSink(target.as_ref()), &mut |_| {})
            .await
            .unwrap();
        check_copy(source.as_ref(), target.as_ref(), middle).await;
    }
    for harness in [postgres, mysql, spanner] {
        harness.cleanup().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_without_history_is_the_current_state_compacted_at_its_revision() {
    let source_harness = testing::sqlite().await.unwrap();
    let source = source_harness.open().await;
    let target_harness = testing::sqlite().await.unwrap();
    let target = target_harness.open().await;
    populate(source.as_ref()).await;
    let plan = copy::plan(source.as_ref(), false).await.unwrap();
    copy::dump(
        source.as_ref(),
        &plan,
        &mut StoreSink(target.as_ref()),
        &mut |_| {},
    )
    .await
    .unwrap();
    let status = target.status().await.unwrap();
    assert_eq!(status.revision, plan.revision);
    assert_eq!(status.compact_revision, plan.revision);
    copy::verify(source.as_ref(), target.as_ref(), plan.revision)
        .await
        .unwrap();
    let error = target
        .range(RangeRequest::new(KeyRange::prefix("")).at_revision(plan.revision - 1))
        .await
        .unwrap_err();
    assert!(matches!(error, Error::Compacted { .. }), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_is_refused_where_it_cannot_keep_its_revisions() {
    let source_harness = testing::sqlite().await.unwrap();
    let source = source_harness.open().await;
    populate(source.as_ref()).await;
    let plan = copy::plan(source.as_ref(), true).await.unwrap();

    // A store that already holds one of the keys.
    let busy_harness = testing::sqlite().await.unwrap();
    let busy = busy_harness.open().await;
    busy.put(b"/registry/configmaps/default/c05", b"mine", 0)
        .await
        .unwrap();
    let error = copy::dump(
        source.as_ref(),
        &plan,
        &mut StoreSink(busy.as_ref()),
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("not empty"), "{error}");

    // An etcd that has been written to: its revision cannot go back.
    let Some(etcd) = testing::own_etcd().await else {
        return;
    };
    let used = etcd.open().await;
    for _ in 0..40 {
        used.put(b"/elsewhere", b"x", 0).await.unwrap();
    }
    used.delete(b"/elsewhere", None).await.unwrap();
    let error = copy::dump(
        source.as_ref(),
        &plan,
        &mut StoreSink(used.as_ref()),
        &mut |_| {},
    )
    .await
    .unwrap_err();
    assert!(error.to_string().contains("cannot go back"), "{error}");
}
