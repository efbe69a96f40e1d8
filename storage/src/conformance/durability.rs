//! Cases about the backend as a whole: status, restarts, concurrent writers, and two stores on
//! one backend (as two Rudder processes on one database).

use std::time::Instant;

use super::support::*;
use crate::testing::Harness;
use crate::types::*;

pub async fn status_reports_revisions_size_and_driver(harness: &dyn Harness) {
    let store = harness.open().await;
    let before = store.status().await.unwrap();
    assert_eq!(before.driver, harness.driver());
    assert!(before.revision >= 1);
    assert!(!before.server_version.is_empty());
    let written = put(&*store, "/st", "x").await;
    let after = store.status().await.unwrap();
    assert_eq!(after.revision, written);
    assert!(after.db_size_bytes > 0);
    store.close().await;
}

pub async fn data_survives_a_restart(harness: &dyn Harness) {
    let store = harness.open().await;
    put(&*store, "/keep/a", "1").await;
    let second = put(&*store, "/keep/b", "2").await;
    let lease = store.lease_grant(120, 0).await.unwrap();
    store.put(b"/keep/leased", b"3", lease.id).await.unwrap();
    let before = store
        .range(RangeRequest::new(KeyRange::prefix("/keep/")))
        .await
        .unwrap();
    store.close().await;
    drop(store);

    let reopened = harness.open().await;
    let after = reopened
        .range(RangeRequest::new(KeyRange::prefix("/keep/")))
        .await
        .unwrap();
    assert_eq!(after.kvs, before.kvs);
    assert_eq!(after.revision, before.revision);
    assert_eq!(
        reopened
            .get(b"/keep/b", second)
            .await
            .unwrap()
            .unwrap()
            .value,
        b"2"
    );
    assert!(reopened.lease_list().await.unwrap().contains(&lease.id));
    // Writing continues from the same revision.
    assert_eq!(put(&*reopened, "/keep/c", "4").await, before.revision + 1);
    reopened.lease_revoke(lease.id).await.unwrap();
    reopened.close().await;
}

pub async fn sixty_four_concurrent_writers_never_fail(harness: &dyn Harness) {
    let store = harness.open().await;
    let base = revision(&*store).await;
    let writers = 64;
    let per_writer = 20;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for i in 0..per_writer {
                let key = format!("/cc/{writer}/{i}");
                match store.create(key.as_bytes(), &[b'v'; 1024], 0).await {
                    Ok(CreateOutcome::Created { revision }) => revisions.push(revision),
                    other => return Err(format!("writer {writer} write {i}: {other:?}")),
                }
                // Every other key gets a compare-and-swap update too.
                if i % 2 == 0 {
                    let expected = revisions[revisions.len() - 1];
                    match store.update(key.as_bytes(), b"updated", expected, 0).await {
                        Ok(UpdateOutcome::Updated { revision }) => revisions.push(revision),
                        other => return Err(format!("writer {writer} update {i}: {other:?}")),
                    }
                }
            }
            Ok(revisions)
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(
            task.await
                .unwrap()
                .unwrap_or_else(|error| panic!("{error}")),
        );
    }
    all.sort_unstable();
    let total = writers * (per_writer + per_writer / 2);
    let expected: Vec<Revision> = (base + 1..=base + total as i64).collect();
    assert_eq!(
        all, expected,
        "every write succeeded with its own gapless revision"
    );
    let count = store
        .range(RangeRequest::new(KeyRange::prefix("/cc/")).count_only())
        .await
        .unwrap()
        .count;
    assert_eq!(count, (writers * per_writer) as i64);
    store.close().await;
}

pub async fn two_stores_on_one_backend_see_each_others_writes(harness: &dyn Harness) {
    let first = harness.open().await;
    let second = harness.open().await;
    let mut on_second = second
        .watch(WatchRequest::new(KeyRange::prefix("/two/")))
        .await
        .unwrap();
    let mut on_first = first
        .watch(WatchRequest::new(KeyRange::prefix("/two/")))
        .await
        .unwrap();
    let started = Instant::now();
    let a = put(&*first, "/two/from-first", "1").await;
    let seen = collect(&mut on_second, 1, WAIT).await;
    let latency = started.elapsed();
    assert_eq!(seen[0].kv.mod_revision, a);
    let b = put(&*second, "/two/from-second", "2").await;
    assert_eq!(b, a + 1, "both stores share one revision sequence");
    let seen = collect(&mut on_first, 2, WAIT).await;
    assert_eq!(
        seen.iter().map(|e| e.kv.mod_revision).collect::<Vec<_>>(),
        [a, b]
    );
    // Interleaved compare-and-swap across the two stores.
    let current = second.get(b"/two/from-first", 0).await.unwrap().unwrap();
    assert!(matches!(
        second
            .update(b"/two/from-first", b"x", current.mod_revision, 0)
            .await
            .unwrap(),
        UpdateOutcome::Updated { .. }
    ));
    assert!(matches!(
        first
            .update(b"/two/from-first", b"y", current.mod_revision, 0)
            .await
            .unwrap(),
        UpdateOutcome::Conflict { .. }
    ));
    eprintln!(
        "{}: a write through one store reached the other's watcher in {latency:?}",
        harness.driver()
    );
    first.close().await;
    second.close().await;
}
