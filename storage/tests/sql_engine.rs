//! What only the SQL engine has: rows in `rudder_log` that compaction must remove, and one
//! write path whose batches these tests arrange deterministically by holding the database's
//! write lock from a connection of their own (the store's writer then waits, and the jobs sent
//! meanwhile form its next batch). Every case runs on SQLite, PostgreSQL and MySQL/MariaDB.
#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Duration;

use rudder_storage::testing::{self, Harness};
use rudder_storage::{
    CreateOutcome, DeleteOutcome, Error, KeyRange, PutRequest, Storage, TxnOp, TxnRequest,
    UpdateOutcome,
};
use sqlx::{AnyConnection, Connection, Executor, Row};

/// A connection of the test's own to the harness's database (its schema, on PostgreSQL).
struct Raw {
    conn: AnyConnection,
    driver: &'static str,
}

impl Raw {
    async fn connect(harness: &dyn Harness) -> Self {
        sqlx::any::install_default_drivers();
        let url = harness.url();
        let driver = harness.driver();
        if driver != "postgres" {
            // sqlx ignores the MySQL URL's Rudder parameters.
            return Self {
                conn: AnyConnection::connect(&url).await.unwrap(),
                driver,
            };
        }
        let (base, query) = url.split_once('?').unwrap();
        let schema = query
            .split('&')
            .find_map(|pair| pair.strip_prefix("schema="))
            .unwrap();
        let mut conn = AnyConnection::connect(base).await.unwrap();
        conn.execute(format!("SET search_path TO {schema}").as_str())
            .await
            .unwrap();
        Self { conn, driver }
    }

    /// Rows in the log, for one key or (`None`) all of them.
    async fn rows(&mut self, key: Option<&str>) -> i64 {
        let row = match key {
            Some(key) => {
                let sql = match self.driver {
                    "postgres" => "SELECT COUNT(*) FROM rudder_log WHERE key = $1",
                    "mysql" => "SELECT COUNT(*) FROM rudder_log WHERE `key` = ?",
                    _ => "SELECT COUNT(*) FROM rudder_log WHERE key = ?1",
                };
                sqlx::query(sql)
                    .bind(key.as_bytes().to_vec())
                    .fetch_one(&mut self.conn)
                    .await
            }
            None => {
                sqlx::query("SELECT COUNT(*) FROM rudder_log")
                    .fetch_one(&mut self.conn)
                    .await
            }
        };
        row.unwrap().try_get::<i64, _>(0).unwrap()
    }

    /// Waits until the log holds `expected` rows (of `key`), as background compaction gets there.
    async fn settle(&mut self, key: Option<&str>, expected: i64) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let rows = self.rows(key).await;
            if rows == expected {
                return;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the log holds {rows} rows of {key:?}, expected {expected} once compaction is done"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes the lock every write transaction takes first, so the store's writer waits.
    async fn hold_write_lock(&mut self) {
        let sql = match self.driver {
            "postgres" => "BEGIN; SELECT revision FROM rudder_meta WHERE id = 1 FOR UPDATE",
            "mysql" => {
                "START TRANSACTION; SELECT revision FROM rudder_meta WHERE id = 1 FOR UPDATE"
            }
            _ => "BEGIN IMMEDIATE",
        };
        self.conn.execute(sql).await.unwrap();
    }

    async fn release_write_lock(&mut self) {
        self.conn.execute("ROLLBACK").await.unwrap();
    }
}

/// Sends `jobs` to the store's writer while it waits for the database lock, so that they form
/// one batch; returns their results in order.
async fn in_one_batch<T: Send + 'static>(
    raw: &mut Raw,
    store: &Arc<dyn Storage>,
    jobs: Vec<futures::future::BoxFuture<'static, T>>,
) -> Vec<T> {
    raw.hold_write_lock().await;
    // A first job for the writer to take and then wait on the lock with.
    let first = {
        let store = store.clone();
        tokio::spawn(async move { store.put(b"/batch/opener", b"x", 0).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    let mut handles = Vec::new();
    for job in jobs {
        handles.push(tokio::spawn(job));
        // Keep the order: each job is queued before the next one starts.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    raw.release_write_lock().await;
    first.await.unwrap().unwrap();
    let mut results = Vec::new();
    for handle in handles {
        results.push(handle.await.unwrap());
    }
    results
}

fn put_txn(key: &str, lease: i64) -> TxnRequest {
    TxnRequest {
        success: vec![TxnOp::Put(
            PutRequest::new(key.as_bytes(), b"v".to_vec()).with_lease(lease),
        )],
        ..TxnRequest::default()
    }
}

/// Put k, put x, compact; delete k, put x, compact: k's rows go away with its tombstone, and
/// a create of k later — even right after a failed job in the same batch — starts k afresh.
async fn compaction_removes_a_deleted_keys_rows_and_never_brings_it_back(
    harness: Box<dyn Harness>,
) {
    let store = harness.open().await;
    let mut raw = Raw::connect(&*harness).await;
    let first = store.put(b"k", b"old", 0).await.unwrap();
    let x = store.put(b"x", b"1", 0).await.unwrap();
    store.compact(x).await.unwrap();
    raw.settle(Some("k"), 1).await;
    let DeleteOutcome::Deleted { .. } = store.delete(b"k", None).await.unwrap() else {
        panic!("k exists")
    };
    let x = store.put(b"x", b"2", 0).await.unwrap();
    store.compact(x).await.unwrap();
    raw.settle(Some("k"), 0).await;
    raw.settle(Some("x"), 1).await;

    // A job that fails half-way (its savepoint is rolled back), then a create of k.
    let failing = {
        let store = store.clone();
        Box::pin(async move { store.txn(put_txn("/other", 0x5eed)).await.map(|_| ()) })
            as futures::future::BoxFuture<'static, _>
    };
    let create = {
        let store = store.clone();
        Box::pin(async move {
            match store.create(b"k", b"new", 0).await {
                Ok(CreateOutcome::Created { revision }) => Ok(revision),
                Ok(CreateOutcome::AlreadyExists { current }) => Err(format!(
                    "create of a deleted key found it alive: {current:?}"
                )),
                Err(error) => Err(error.to_string()),
            }
            .map(|_| ())
            .map_err(Error::InvalidArgument)
        }) as futures::future::BoxFuture<'static, _>
    };
    let results = in_one_batch(&mut raw, &store, vec![failing, create]).await;
    assert!(
        matches!(results[0], Err(Error::LeaseNotFound(_))),
        "the first job fails: {:?}",
        results[0]
    );
    assert!(results[1].is_ok(), "{:?}", results[1]);
    let kv = store.get(b"k", 0).await.unwrap().unwrap();
    assert_eq!(kv.value, b"new");
    assert_eq!(kv.version, 1, "k starts afresh");
    // A CAS update against the long-deleted revision must not succeed.
    let UpdateOutcome::Conflict { .. } = store.update(b"k", b"stale", first, 0).await.unwrap()
    else {
        panic!("an update against a compacted, deleted revision succeeded")
    };
    store.close().await;
    harness.cleanup().await;
}

/// Keys updated and compacted over and over leave one row each, every cycle.
async fn compaction_keeps_the_log_flat_over_a_hundred_cycles(harness: Box<dyn Harness>) {
    let store = harness.open().await;
    let mut raw = Raw::connect(&*harness).await;
    let keys = 10;
    for cycle in 0..100 {
        let mut last = 0;
        for key in 0..keys {
            last = store
                .put(
                    format!("/lease/{key}").as_bytes(),
                    format!("{cycle}").as_bytes(),
                    0,
                )
                .await
                .unwrap();
        }
        store.compact(last).await.unwrap();
    }
    raw.settle(None, keys).await;
    store.close().await;
    harness.cleanup().await;
}

/// Two compactions in one batch: the second must not skip what the first had still to remove.
async fn a_compaction_does_not_cut_short_the_one_before_it(harness: Box<dyn Harness>) {
    let store = harness.open().await;
    let mut raw = Raw::connect(&*harness).await;
    for round in 0..3 {
        for key in 0..20 {
            store
                .put(
                    format!("/c/{key}").as_bytes(),
                    format!("{round}").as_bytes(),
                    0,
                )
                .await
                .unwrap();
        }
    }
    let middle = store.put(b"/c/mark", b"1", 0).await.unwrap();
    for key in 0..20 {
        store
            .put(format!("/c/{key}").as_bytes(), b"last", 0)
            .await
            .unwrap();
    }
    let end = store.put(b"/c/mark", b"2", 0).await.unwrap();
    let compact = |revision| {
        let store = store.clone();
        Box::pin(async move { store.compact(revision).await })
            as futures::future::BoxFuture<'static, _>
    };
    let results = in_one_batch(&mut raw, &store, vec![compact(middle), compact(end)]).await;
    assert!(results.iter().all(Result::is_ok), "{results:?}");
    // 20 keys, the mark, and the batch opener: one row each.
    raw.settle(None, 22).await;
    store.close().await;
    harness.cleanup().await;
}

/// A server that stops after a compaction committed but before its rows were removed (a crash,
/// a restart) removes them when it starts again.
async fn compaction_resumes_after_a_restart(harness: Box<dyn Harness>) {
    let store = harness.open().await;
    let mut raw = Raw::connect(&*harness).await;
    for round in 0..5 {
        for key in 0..50 {
            store
                .put(
                    format!("/r/{key}").as_bytes(),
                    format!("{round}").as_bytes(),
                    0,
                )
                .await
                .unwrap();
        }
    }
    let current = store.status().await.unwrap().revision;
    store.close().await;
    // What a crash right after the compaction's commit leaves behind.
    let sql = format!("UPDATE rudder_meta SET compact_revision = {current} WHERE id = 1");
    raw.conn.execute(sql.as_str()).await.unwrap();
    assert_eq!(raw.rows(None).await, 250);
    let store = harness.open().await;
    raw.settle(None, 50).await;
    assert_eq!(store.status().await.unwrap().compact_revision, current);
    store.close().await;
    harness.cleanup().await;
}

/// Revoking a lease deletes all its keys at one revision, watchers see every delete.
async fn revoking_a_lease_with_many_keys_deletes_them_at_one_revision(harness: Box<dyn Harness>) {
    let store = harness.open().await;
    let lease = store.lease_grant(60, 0).await.unwrap();
    let keys = 3000;
    let mut txns = Vec::new();
    for chunk in (0..keys).collect::<Vec<_>>().chunks(100) {
        txns.push(TxnRequest {
            success: chunk
                .iter()
                .map(|key| {
                    TxnOp::Put(
                        PutRequest::new(format!("/ev/{key:05}").into_bytes(), b"e".to_vec())
                            .with_lease(lease.id),
                    )
                })
                .collect(),
            ..TxnRequest::default()
        });
    }
    for txn in txns {
        store.txn(txn).await.unwrap();
    }
    let before = store.status().await.unwrap().revision;
    let mut watch = store
        .watch(rudder_storage::WatchRequest::new(KeyRange::prefix("/ev/")).with_prev_kv())
        .await
        .unwrap();
    store.lease_revoke(lease.id).await.unwrap();
    let after = store.status().await.unwrap().revision;
    assert_eq!(after, before + 1, "one revision for the whole revoke");
    let mut deleted = 0;
    while deleted < keys {
        let batch = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut watch),
        )
        .await
        .unwrap()
        .unwrap()
        .unwrap();
        for event in batch.events {
            assert_eq!(event.kv.mod_revision, after);
            assert_eq!(event.prev_kv.map(|kv| kv.value), Some(b"e".to_vec()));
            deleted += 1;
        }
    }
    let left = store
        .range(rudder_storage::RangeRequest::new(KeyRange::prefix("/ev/")).count_only())
        .await
        .unwrap();
    assert_eq!(left.count, 0);
    store.close().await;
    harness.cleanup().await;
}

/// Every event of a watch, from `from` until the watch has seen revision `upto`.
async fn events_until(
    store: &Arc<dyn Storage>,
    from: i64,
    upto: i64,
) -> Vec<rudder_storage::Event> {
    let mut watch = store
        .watch(
            rudder_storage::WatchRequest::new(KeyRange::prefix("/hand/"))
                .from_revision(from)
                .with_prev_kv(),
        )
        .await
        .unwrap();
    let mut events = Vec::new();
    loop {
        let batch = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut watch),
        )
        .await
        .expect("the watch reaches the last revision within 10 s")
        .unwrap()
        .unwrap();
        events.extend(batch.events);
        if batch.revision >= upto {
            return events;
        }
    }
}

/// This server's watchers get its own commits from its writer, not from the log; another
/// server's get them from the log. Both must see exactly the same events — kinds, values,
/// revisions, versions, leases and prev_kv — whatever the batch did: single writes, a key
/// written twice in one batch, a job rolled back in a batch, range deletes, a lease revoke.
async fn local_watchers_get_exactly_the_events_the_log_holds(harness: Box<dyn Harness>) {
    let here = harness.open().await;
    let elsewhere = harness.open().await;
    let mut raw = Raw::connect(&*harness).await;
    let from = here.status().await.unwrap().revision + 1;
    // Watching from now on, as the events happen, and (below) from the log afterwards.
    let live = {
        let here = here.clone();
        tokio::spawn(async move {
            let mut watch = here
                .watch(rudder_storage::WatchRequest::new(KeyRange::prefix("/hand/")).with_prev_kv())
                .await
                .unwrap();
            let mut events: Vec<rudder_storage::Event> = Vec::new();
            while let Some(batch) = futures::StreamExt::next(&mut watch).await {
                let batch = batch.unwrap();
                let done = batch.events.iter().any(|event| event.kv.key == b"/hand/zz");
                events.extend(batch.events);
                if done {
                    return events;
                }
            }
            events
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;

    here.put(b"/hand/a", b"1", 0).await.unwrap();
    here.put(b"/hand/a", b"2", 0).await.unwrap();
    assert!(matches!(
        here.create(b"/hand/b", b"1", 0).await.unwrap(),
        CreateOutcome::Created { .. }
    ));
    here.delete(b"/hand/a", None).await.unwrap();
    here.put(b"/hand/a", b"3", 0).await.unwrap();
    here.txn(TxnRequest {
        success: vec![
            TxnOp::Put(PutRequest::new(b"/hand/c".to_vec(), b"1".to_vec())),
            TxnOp::Put(PutRequest {
                ignore_value: true,
                ..PutRequest::new(b"/hand/b".to_vec(), Vec::new())
            }),
        ],
        ..TxnRequest::default()
    })
    .await
    .unwrap();
    // One batch: a key written by two jobs, and a job that fails half-way and is rolled back.
    let store = here.clone();
    let job = |key: &'static str, value: &'static str| {
        let store = store.clone();
        Box::pin(async move {
            store
                .put(key.as_bytes(), value.as_bytes(), 0)
                .await
                .map(|_| ())
        }) as futures::future::BoxFuture<'static, Result<(), Error>>
    };
    let failing = {
        let store = store.clone();
        Box::pin(async move {
            store
                .txn(TxnRequest {
                    success: vec![
                        TxnOp::Put(PutRequest::new(b"/hand/e".to_vec(), b"lost".to_vec())),
                        TxnOp::Put(
                            PutRequest::new(b"/hand/lost".to_vec(), b"x".to_vec())
                                .with_lease(424242),
                        ),
                    ],
                    ..TxnRequest::default()
                })
                .await
                .map(|_| ())
        }) as futures::future::BoxFuture<'static, Result<(), Error>>
    };
    let results = in_one_batch(
        &mut raw,
        &here,
        vec![
            job("/hand/e", "1"),
            job("/hand/e", "2"),
            failing,
            job("/hand/f", "1"),
        ],
    )
    .await;
    assert!(results[0].is_ok() && results[1].is_ok() && results[3].is_ok());
    assert!(results[2].is_err(), "a put with a missing lease fails");
    // One batch of writes the writer knows entirely.
    let results = in_one_batch(
        &mut raw,
        &here,
        vec![
            job("/hand/h", "1"),
            job("/hand/a", "4"),
            job("/hand/h", "2"),
        ],
    )
    .await;
    assert!(results.iter().all(Result::is_ok));
    here.txn(TxnRequest {
        success: vec![TxnOp::DeleteRange(rudder_storage::DeleteRangeRequest {
            range: KeyRange::prefix("/hand/e"),
            prev_kv: false,
        })],
        ..TxnRequest::default()
    })
    .await
    .unwrap();
    let lease = here.lease_grant(60, 0).await.unwrap();
    here.put(b"/hand/g", b"1", lease.id).await.unwrap();
    here.lease_revoke(lease.id).await.unwrap();
    here.put(b"/hand/zz", b"end", 0).await.unwrap();
    let upto = here.status().await.unwrap().revision;

    let live = tokio::time::timeout(Duration::from_secs(10), live)
        .await
        .expect("the live watch sees the last write within 10 s")
        .unwrap();
    let from_the_log = events_until(&elsewhere, from, upto).await;
    let replayed_here = events_until(&here, from, upto).await;
    assert_eq!(from_the_log.len(), 17, "{from_the_log:#?}");
    assert_eq!(
        live, from_the_log,
        "this server's live watch and the log differ"
    );
    assert_eq!(replayed_here, from_the_log);
    here.close().await;
    elsewhere.close().await;
    harness.cleanup().await;
}

macro_rules! on_every_sql_driver {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let Some(harness) = super::testing::sqlite().await else { return };
                    super::$case(harness).await;
                }
            )*
        }
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let Some(harness) = super::testing::postgres().await else { return };
                    super::$case(harness).await;
                }
            )*
        }
        mod mysql {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let Some(harness) = super::testing::mysql().await else { return };
                    super::$case(harness).await;
                }
            )*
        }
    };
}

on_every_sql_driver!(
    compaction_removes_a_deleted_keys_rows_and_never_brings_it_back,
    compaction_keeps_the_log_flat_over_a_hundred_cycles,
    a_compaction_does_not_cut_short_the_one_before_it,
    compaction_resumes_after_a_restart,
    revoking_a_lease_with_many_keys_deletes_them_at_one_revision,
    local_watchers_get_exactly_the_events_the_log_holds,
);
