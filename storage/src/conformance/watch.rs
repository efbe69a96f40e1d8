//! Watch cases: start points, history replay, compaction, prev_kv, ordering under concurrency,
//! and slow watchers.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use super::support::*;
use crate::error::Error;
use crate::testing::Harness;
use crate::types::*;

pub async fn watch_from_now_sees_only_later_writes(harness: &dyn Harness) {
    let store = harness.open().await;
    put(&*store, "/w/before", "old").await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/w/")))
        .await
        .unwrap();
    let written = put(&*store, "/w/after", "new").await;
    put(&*store, "/elsewhere", "ignored").await;
    let events = collect(&mut stream, 1, WAIT).await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].kv.key, b"/w/after");
    assert_eq!(events[0].kv.mod_revision, written);
    assert_eq!(events[0].kv.value, b"new");
    assert_quiet(&mut stream, Duration::from_millis(300)).await;
    store.close().await;
}

pub async fn watch_from_a_past_revision_replays_history(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/h/a", "1").await;
    put(&*store, "/h/b", "2").await;
    put(&*store, "/other", "x").await;
    put(&*store, "/h/a", "3").await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/h/")).from_revision(first))
        .await
        .unwrap();
    let live = put(&*store, "/h/c", "4").await;
    let events = collect(&mut stream, 4, WAIT).await;
    let seen: Vec<(String, String)> = events
        .iter()
        .map(|e| {
            (
                key_string(&e.kv),
                String::from_utf8_lossy(&e.kv.value).into_owned(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("/h/a", "1"), ("/h/b", "2"), ("/h/a", "3"), ("/h/c", "4")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .to_vec()
    );
    assert_eq!(events[3].kv.mod_revision, live);
    assert!(events
        .windows(2)
        .all(|w| w[0].kv.mod_revision < w[1].kv.mod_revision));
    // Watching a single key from the middle of its history.
    let mut single = store
        .watch(WatchRequest::new(KeyRange::key("/h/a")).from_revision(first + 1))
        .await
        .unwrap();
    let events = collect(&mut single, 1, WAIT).await;
    assert_eq!(events[0].kv.value, b"3");
    assert_quiet(&mut single, Duration::from_millis(300)).await;
    store.close().await;
}

pub async fn watch_from_a_compacted_revision_fails(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/wc", "1").await;
    put(&*store, "/wc", "2").await;
    let third = put(&*store, "/wc", "3").await;
    store.compact(third).await.unwrap();
    match store
        .watch(WatchRequest::new(KeyRange::key("/wc")).from_revision(first))
        .await
    {
        Err(Error::Compacted { .. }) => {}
        Err(other) => panic!("expected Compacted, got {other}"),
        Ok(mut stream) => match stream.next().await {
            Some(Err(Error::Compacted { .. })) => {}
            other => panic!("expected Compacted, got {other:?}"),
        },
    }
    // From the compacted revision itself, and from now, watching still works.
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::key("/wc")).from_revision(third))
        .await
        .unwrap();
    let events = collect(&mut stream, 1, WAIT).await;
    assert_eq!(events[0].kv.value, b"3");
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::key("/wc")))
        .await
        .unwrap();
    put(&*store, "/wc", "4").await;
    assert_eq!(collect(&mut stream, 1, WAIT).await[0].kv.value, b"4");
    store.close().await;
}

pub async fn watch_delivers_prev_kv_and_delete_revisions(harness: &dyn Harness) {
    let store = harness.open().await;
    let mut with_prev = store
        .watch(WatchRequest::new(KeyRange::prefix("/p/")).with_prev_kv())
        .await
        .unwrap();
    let mut without_prev = store
        .watch(WatchRequest::new(KeyRange::prefix("/p/")))
        .await
        .unwrap();
    let created = put(&*store, "/p/k", "v1").await;
    let updated = put(&*store, "/p/k", "v2").await;
    let DeleteOutcome::Deleted {
        revision: deleted, ..
    } = store.delete(b"/p/k", None).await.unwrap()
    else {
        panic!("delete")
    };
    let events = collect(&mut with_prev, 3, WAIT).await;
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].prev_kv, None, "a create has no previous state");
    assert_eq!(events[0].kv.version, 1);
    assert_eq!(events[1].kv.mod_revision, updated);
    assert_eq!(events[1].kv.create_revision, created);
    assert_eq!(events[1].kv.version, 2);
    let prev = events[1].prev_kv.as_ref().expect("update carries prev_kv");
    assert_eq!(
        (prev.value.as_slice(), prev.mod_revision, prev.version),
        (b"v1".as_slice(), created, 1)
    );
    assert_eq!(events[2].kind, EventKind::Delete);
    assert_eq!(events[2].kv.key, b"/p/k");
    assert_eq!(
        events[2].kv.mod_revision, deleted,
        "a delete event carries the delete's revision"
    );
    let prev = events[2].prev_kv.as_ref().expect("delete carries prev_kv");
    assert_eq!(
        (prev.value.as_slice(), prev.mod_revision),
        (b"v2".as_slice(), updated)
    );
    let plain = collect(&mut without_prev, 3, WAIT).await;
    assert!(plain.iter().all(|event| event.prev_kv.is_none()));
    // Replayed history carries prev_kv too.
    let mut replay = store
        .watch(
            WatchRequest::new(KeyRange::prefix("/p/"))
                .from_revision(created)
                .with_prev_kv(),
        )
        .await
        .unwrap();
    let replayed = collect(&mut replay, 3, WAIT).await;
    assert_eq!(replayed, events);
    store.close().await;
}

pub async fn watch_order_matches_commit_order_under_concurrent_writers(harness: &dyn Harness) {
    let store = harness.open().await;
    let start = revision(&*store).await + 1;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/cw/")).from_revision(start))
        .await
        .unwrap();
    let writers = 8;
    let per_writer = 25;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut revisions = Vec::new();
            for i in 0..per_writer {
                let key = format!("/cw/{writer}/{}", i % 5);
                revisions.push(
                    store
                        .put(key.as_bytes(), format!("{i}").as_bytes(), 0)
                        .await
                        .unwrap(),
                );
            }
            revisions
        }));
    }
    let mut acknowledged = Vec::new();
    for task in tasks {
        acknowledged.extend(task.await.unwrap());
    }
    acknowledged.sort_unstable();
    let events = collect(&mut stream, writers * per_writer, WAIT).await;
    let delivered: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(
        delivered, acknowledged,
        "every acknowledged write once, in revision order"
    );
    let expected: Vec<Revision> = (start..start + (writers * per_writer) as i64).collect();
    assert_eq!(delivered, expected, "no gaps");
    store.close().await;
}

pub async fn many_watchers_are_not_held_up_by_one_that_never_reads(harness: &dyn Harness) {
    let store = harness.open().await;
    let _stuck = store
        .watch(WatchRequest::new(KeyRange::prefix("/s/")))
        .await
        .unwrap();
    let mut readers = Vec::new();
    for _ in 0..8 {
        readers.push(
            store
                .watch(WatchRequest::new(KeyRange::prefix("/s/")))
                .await
                .unwrap(),
        );
    }
    let writes = 1500;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut tasks = Vec::new();
            for lane in 0..16 {
                let store = Arc::clone(&store);
                tasks.push(tokio::spawn(async move {
                    for i in (lane..writes).step_by(16) {
                        store
                            .put(format!("/s/{i}").as_bytes(), &[b'x'; 256], 0)
                            .await
                            .unwrap();
                    }
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
        })
    };
    let mut counters = Vec::new();
    for mut reader in readers {
        counters.push(tokio::spawn(async move {
            collect(&mut reader, writes, Duration::from_secs(60))
                .await
                .len()
        }));
    }
    writer.await.unwrap();
    for counter in counters {
        assert_eq!(counter.await.unwrap(), writes);
    }
    store.close().await;
}

pub async fn watch_progress_requests_report_a_revision_with_everything_delivered(
    harness: &dyn Harness,
) {
    let store = harness.open().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/pr/")))
        .await
        .unwrap();
    let inside = put(&*store, "/pr/a", "1").await;
    let outside = put(&*store, "/elsewhere", "2").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut seen = Vec::new();
    stream.request_progress();
    loop {
        let batch = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(batch))) => batch,
            other => panic!("expected a progress report, got {other:?}"),
        };
        if batch.events.is_empty() {
            // A progress report promises every event up to its revision was delivered.
            assert!(seen.iter().all(|r| *r <= batch.revision));
            if batch.revision >= outside {
                assert_eq!(
                    seen,
                    vec![inside],
                    "the event below the reported revision came first"
                );
                break;
            }
            stream.request_progress();
        } else {
            seen.extend(batch.events.iter().map(|e| e.kv.mod_revision));
        }
    }
    store.close().await;
}

pub async fn a_watcher_behind_a_burst_catches_up_instead_of_failing(harness: &dyn Harness) {
    let store = harness.open().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/burst/")).with_prev_kv())
        .await
        .unwrap();
    let keys = 3000;
    let writers = 64;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for key in (writer..keys).step_by(writers) {
                store
                    .create(format!("/burst/{key:05}").as_bytes(), &[b'b'; 512], 0)
                    .await
                    .unwrap();
            }
        }));
    }
    // A healthy watcher that is a little slow: 2 ms per batch.
    let mut seen = std::collections::BTreeSet::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while seen.len() < keys {
        match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(batch))) => {
                for event in batch.events {
                    assert_eq!(event.kind, EventKind::Put);
                    assert!(seen.insert(event.kv.mod_revision), "an event came twice");
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Ok(Some(Err(error))) => panic!(
                "the watch failed after {} of {keys} events: {error}",
                seen.len()
            ),
            Ok(None) => panic!("the watch ended after {} of {keys} events", seen.len()),
            Err(_) => panic!("{} of {keys} events within two minutes", seen.len()),
        }
    }
    for task in tasks {
        task.await.unwrap();
    }
    store.close().await;
}

/// A batch's revision is a promise: every event of the watch at or below it has come, so a
/// consumer may skip later events at or below it and treat it as its progress (the
/// apiserver's watch cache does both). A watch that catches up over thousands of revisions
/// (etcd sends those a thousand revisions at a time, each response carrying the store's
/// current revision) must keep the promise too.
pub async fn a_batch_revision_promises_every_event_up_to_it(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/promise/start", "0").await;
    let keys = 2500;
    let writers = 16;
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = Arc::clone(&store);
        tasks.push(tokio::spawn(async move {
            for key in (writer..keys).step_by(writers) {
                store
                    .put(format!("/promise/{key:05}").as_bytes(), b"v", 0)
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/promise/")).from_revision(first))
        .await
        .unwrap();
    let (mut promised, mut seen) = (0, 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while seen < keys + 1 {
        let batch = match tokio::time::timeout_at(deadline, stream.next()).await {
            Ok(Some(Ok(batch))) => batch,
            other => panic!("{seen} of {} events, then {other:?}", keys + 1),
        };
        for event in &batch.events {
            assert!(
                event.kv.mod_revision > promised,
                "an event at revision {} came after a batch promised everything up to {promised}",
                event.kv.mod_revision
            );
        }
        seen += batch.events.len();
        promised = promised.max(batch.revision);
    }
    store.close().await;
}

pub async fn a_watcher_that_stops_reading_gets_every_event_when_it_resumes(harness: &dyn Harness) {
    let store = harness.open().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/pause/")).with_prev_kv())
        .await
        .unwrap();
    // More than any in-memory queue holds for one watcher: 24 MiB while it does not read.
    let writes = 384;
    let value = vec![b'p'; 64 * 1024];
    let mut written = Vec::new();
    for i in 0..writes {
        written.push(put_bytes(&*store, &format!("/pause/{}", i % 7), &value).await);
    }
    let events = collect(&mut stream, writes, Duration::from_secs(60)).await;
    let delivered: Vec<Revision> = events.iter().map(|e| e.kv.mod_revision).collect();
    assert_eq!(delivered, written, "every event once, in order");
    assert!(
        events.iter().skip(7).all(|e| e.prev_kv.is_some()),
        "events caught up from the log keep their prev_kv"
    );
    store.close().await;
}

pub async fn progress_reports_never_overtake_events_under_load(harness: &dyn Harness) {
    let store = harness.open().await;
    let mut stream = store
        .watch(WatchRequest::new(KeyRange::prefix("/load/")))
        .await
        .unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for writer in 0..16 {
        let store = Arc::clone(&store);
        let stop = stop.clone();
        writers.push(tokio::spawn(async move {
            let mut i = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                store
                    .put(
                        format!("/load/{writer}/{}", i % 8).as_bytes(),
                        &[b'l'; 64],
                        0,
                    )
                    .await
                    .unwrap();
                i += 1;
            }
        }));
    }
    let mut progressed: Revision = 0;
    let mut last_event: Revision = 0;
    let mut reports = 0;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(4);
    stream.request_progress();
    while tokio::time::Instant::now() < deadline {
        let batch = match tokio::time::timeout(WAIT, stream.next()).await {
            Ok(Some(Ok(batch))) => batch,
            other => panic!("the watch failed under load: {other:?}"),
        };
        if batch.events.is_empty() {
            assert!(
                batch.revision >= last_event,
                "a progress report went backwards"
            );
            progressed = progressed.max(batch.revision);
            reports += 1;
            stream.request_progress();
            continue;
        }
        for event in &batch.events {
            assert!(
                event.kv.mod_revision > progressed,
                "an event at {} arrived after a progress report promised everything up to {progressed}",
                event.kv.mod_revision
            );
            last_event = event.kv.mod_revision;
        }
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for writer in writers {
        writer.await.unwrap();
    }
    assert!(reports > 0, "no progress report under load");
    store.close().await;
}
