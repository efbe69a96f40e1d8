//! Key-value cases: create, get, range, compare-and-swap, delete, revisions, transactions,
//! compaction.

use std::time::Duration;

use super::support::*;
use crate::config::CompactionConfig;
use crate::error::Error;
use crate::testing::Harness;
use crate::types::*;

pub async fn create_fails_when_the_key_exists(harness: &dyn Harness) {
    let store = harness.open().await;
    let base = revision(&*store).await;
    let created = store.create(b"/a", b"one", 0).await.unwrap();
    assert_eq!(created, CreateOutcome::Created { revision: base + 1 });
    let kv = store
        .get(b"/a", 0)
        .await
        .unwrap()
        .expect("created key exists");
    assert_eq!(
        kv,
        KeyValue {
            key: b"/a".to_vec(),
            value: b"one".to_vec(),
            create_revision: base + 1,
            mod_revision: base + 1,
            version: 1,
            lease: 0
        }
    );
    match store.create(b"/a", b"two", 0).await.unwrap() {
        CreateOutcome::AlreadyExists { current } => assert_eq!(current, kv),
        other => panic!("second create must fail, got {other:?}"),
    }
    assert_eq!(
        revision(&*store).await,
        base + 1,
        "a failed create writes nothing"
    );
    assert_eq!(store.get(b"/missing", 0).await.unwrap(), None);
    store.close().await;
}

pub async fn get_reads_past_revisions_and_refuses_future_ones(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/k", "v1").await;
    let second = put(&*store, "/k", "v2").await;
    let deleted = store.delete(b"/k", None).await.unwrap();
    let DeleteOutcome::Deleted {
        revision: third, ..
    } = deleted
    else {
        panic!("delete: {deleted:?}")
    };
    let at = |revision| {
        let store = store.clone();
        async move {
            store
                .get(b"/k", revision)
                .await
                .unwrap()
                .map(|kv| (kv.value, kv.version))
        }
    };
    assert_eq!(at(first).await, Some((b"v1".to_vec(), 1)));
    assert_eq!(at(second).await, Some((b"v2".to_vec(), 2)));
    assert_eq!(at(third).await, None);
    assert_eq!(
        at(first - 1).await,
        None,
        "the key did not exist before its creation"
    );
    match store.get(b"/k", third + 100).await {
        Err(Error::FutureRevision { .. }) => {}
        other => panic!("a future revision must fail, got {other:?}"),
    }
    let response = store
        .range(RangeRequest::new(KeyRange::key("/k")).at_revision(first))
        .await
        .unwrap();
    assert_eq!(
        response.revision, third,
        "the header carries the current revision"
    );
    store.close().await;
}

pub async fn range_honours_limit_count_keys_only_and_count_only(harness: &dyn Harness) {
    let store = harness.open().await;
    for name in ["a", "b", "c", "d", "e"] {
        put(&*store, &format!("/r/{name}"), &format!("value-{name}")).await;
    }
    put(&*store, "/r0", "outside").await;
    put(&*store, "/q", "outside").await;
    let all = store
        .range(RangeRequest::new(KeyRange::prefix("/r/")))
        .await
        .unwrap();
    assert_eq!(
        all.kvs.iter().map(key_string).collect::<Vec<_>>(),
        ["/r/a", "/r/b", "/r/c", "/r/d", "/r/e"]
    );
    assert!(!all.more);
    assert_eq!(all.count, 5);

    let page = store
        .range(RangeRequest::new(KeyRange::prefix("/r/")).with_limit(2))
        .await
        .unwrap();
    assert_eq!(
        page.kvs.iter().map(key_string).collect::<Vec<_>>(),
        ["/r/a", "/r/b"]
    );
    assert!(page.more);
    assert_eq!(page.count, 5);

    let rest = store
        .range(RangeRequest::new(KeyRange::between("/r/c", "/r0")).with_limit(10))
        .await
        .unwrap();
    assert_eq!(rest.kvs.len(), 3);
    assert!(!rest.more);

    let keys = store
        .range(RangeRequest::new(KeyRange::prefix("/r/")).keys_only())
        .await
        .unwrap();
    assert!(keys.kvs.iter().all(|kv| kv.value.is_empty()));
    assert_eq!(keys.kvs.len(), 5);

    let count = store
        .range(RangeRequest::new(KeyRange::prefix("/r/")).count_only())
        .await
        .unwrap();
    assert!(count.kvs.is_empty());
    assert_eq!(count.count, 5);

    let open = store
        .range(RangeRequest::new(KeyRange::from_key("/r/d")))
        .await
        .unwrap();
    assert_eq!(
        open.kvs.iter().map(key_string).collect::<Vec<_>>(),
        ["/r/d", "/r/e", "/r0"]
    );
    store.close().await;
}

/// Paging through a range at one revision, as kube-apiserver and etcd clients do (each page
/// from just after the last key of the one before): every page's `count` is the rest of the
/// range at that revision, also after later writes, and also for a page that does not follow
/// on from the one before.
pub async fn paged_reads_count_the_rest_of_the_range_at_their_revision(harness: &dyn Harness) {
    let store = harness.open().await;
    for index in 0..25 {
        put(&*store, &format!("/p/{index:02}"), "v").await;
    }
    let pages = |revision: Revision, start: &'static str| {
        let store = store.clone();
        async move {
            let mut counts = Vec::new();
            let (mut start, mut revision) = (start.as_bytes().to_vec(), revision);
            loop {
                let page = store
                    .range(
                        RangeRequest::new(KeyRange::between(start.clone(), "/p0"))
                            .with_limit(10)
                            .at_revision(revision),
                    )
                    .await
                    .unwrap();
                counts.push((page.count, page.kvs.len()));
                if revision == 0 {
                    revision = page.revision;
                }
                match (page.more, page.kvs.last()) {
                    (true, Some(last)) => {
                        start = last.key.clone();
                        start.push(0);
                    }
                    _ => return (counts, revision),
                }
            }
        }
    };
    let (counts, at) = pages(0, "/p/").await;
    assert_eq!(counts, [(25, 10), (15, 10), (5, 5)]);
    // Later writes change the latest state, not what the old revision counts.
    for index in 0..5 {
        store
            .delete(format!("/p/{index:02}").as_bytes(), None)
            .await
            .unwrap();
    }
    put(&*store, "/p/99", "v").await;
    assert_eq!(pages(at, "/p/").await.0, [(25, 10), (15, 10), (5, 5)]);
    assert_eq!(pages(0, "/p/").await.0, [(21, 10), (11, 10), (1, 1)]);
    // A page that starts elsewhere than where the last one ended is counted as it is.
    assert_eq!(pages(at, "/p/12").await.0, [(13, 10), (3, 3)]);
    assert_eq!(pages(at, "/p/12").await.0, [(13, 10), (3, 3)]);
    store.close().await;
}

pub async fn range_orders_keys_by_bytes(harness: &dyn Harness) {
    let store = harness.open().await;
    // Byte order, not any collation: 'B' < 'a' < 'b' < 'é' (0xc3 0xa9) < 0xff.
    let keys: [&[u8]; 6] = [
        b"/o/b",
        b"/o/B",
        "/o/é".as_bytes(),
        b"/o/a",
        b"/o/\xff",
        b"/o/a\x00",
    ];
    for key in keys {
        store.put(key, b"x", 0).await.unwrap();
    }
    let listed: Vec<Vec<u8>> = store
        .range(RangeRequest::new(KeyRange::prefix("/o/")))
        .await
        .unwrap()
        .kvs
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    let mut expected: Vec<Vec<u8>> = keys.iter().map(|k| k.to_vec()).collect();
    expected.sort();
    assert_eq!(listed, expected);
    let between = store
        .range(RangeRequest::new(KeyRange::between(
            b"/o/a".to_vec(),
            b"/o/b".to_vec(),
        )))
        .await
        .unwrap();
    assert_eq!(
        between
            .kvs
            .iter()
            .map(|kv| kv.key.clone())
            .collect::<Vec<_>>(),
        [b"/o/a".to_vec(), b"/o/a\x00".to_vec()]
    );
    store.close().await;
}

pub async fn update_is_compare_and_swap_returning_the_current_kv(harness: &dyn Harness) {
    let store = harness.open().await;
    let CreateOutcome::Created { revision: created } = store.create(b"/u", b"v1", 0).await.unwrap()
    else {
        panic!("create")
    };
    let updated = store.update(b"/u", b"v2", created, 0).await.unwrap();
    let UpdateOutcome::Updated { revision: second } = updated else {
        panic!("update: {updated:?}")
    };
    assert_eq!(second, created + 1);
    match store.update(b"/u", b"stale", created, 0).await.unwrap() {
        UpdateOutcome::Conflict {
            current: Some(current),
        } => {
            assert_eq!(current.value, b"v2");
            assert_eq!(current.mod_revision, second);
            assert_eq!(current.create_revision, created);
            assert_eq!(current.version, 2);
        }
        other => panic!("stale update must conflict with the current kv, got {other:?}"),
    }
    match store.update(b"/nobody", b"x", 5, 0).await.unwrap() {
        UpdateOutcome::Conflict { current: None } => {}
        other => panic!("update of a missing key must conflict with no kv, got {other:?}"),
    }
    assert_eq!(store.get(b"/u", 0).await.unwrap().unwrap().value, b"v2");
    store.close().await;
}

pub async fn delete_is_compare_and_swap_returning_the_current_kv(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/d", "v1").await;
    let second = put(&*store, "/d", "v2").await;
    match store.delete(b"/d", Some(first)).await.unwrap() {
        DeleteOutcome::Conflict { current } => {
            assert_eq!(current.mod_revision, second);
            assert_eq!(current.value, b"v2");
        }
        other => panic!("stale delete must conflict, got {other:?}"),
    }
    match store.delete(b"/d", Some(second)).await.unwrap() {
        DeleteOutcome::Deleted { revision, deleted } => {
            assert_eq!(revision, second + 1);
            assert_eq!(deleted.value, b"v2");
            assert_eq!(deleted.mod_revision, second);
        }
        other => panic!("delete must succeed, got {other:?}"),
    }
    assert_eq!(
        store.delete(b"/d", Some(second)).await.unwrap(),
        DeleteOutcome::NotFound
    );
    assert_eq!(
        store.delete(b"/d", None).await.unwrap(),
        DeleteOutcome::NotFound
    );
    assert_eq!(
        revision(&*store).await,
        second + 1,
        "deleting nothing writes nothing"
    );
    store.close().await;
}

pub async fn delete_then_recreate_resets_create_revision_and_version(harness: &dyn Harness) {
    let store = harness.open().await;
    put(&*store, "/t", "v1").await;
    put(&*store, "/t", "v2").await;
    store.delete(b"/t", None).await.unwrap();
    let CreateOutcome::Created { revision } = store.create(b"/t", b"again", 0).await.unwrap()
    else {
        panic!("re-create after delete must succeed")
    };
    let kv = store.get(b"/t", 0).await.unwrap().unwrap();
    assert_eq!(kv.create_revision, revision);
    assert_eq!(kv.mod_revision, revision);
    assert_eq!(kv.version, 1);
    store.close().await;
}

pub async fn revisions_are_monotonic_and_gapless_across_keys(harness: &dyn Harness) {
    let store = harness.open().await;
    let base = revision(&*store).await;
    let mut expected = base;
    for i in 0..20 {
        expected += 1;
        let written = put(&*store, &format!("/g/{}", i % 3), &format!("{i}")).await;
        assert_eq!(written, expected, "write {i} must get the next revision");
    }
    // A failed compare, a read-only txn and a delete of nothing do not consume revisions.
    store.update(b"/g/0", b"x", 1, 0).await.unwrap();
    store
        .txn(TxnRequest {
            success: vec![TxnOp::Range(RangeRequest::new(KeyRange::key("/g/0")))],
            ..TxnRequest::default()
        })
        .await
        .unwrap();
    store.delete(b"/g/none", None).await.unwrap();
    assert_eq!(revision(&*store).await, expected);
    // One transaction writing three keys is one revision.
    let response = store
        .txn(TxnRequest {
            success: ["/g/x", "/g/y", "/g/z"]
                .iter()
                .map(|k| TxnOp::Put(PutRequest::new(*k, "v")))
                .collect(),
            ..TxnRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(response.revision, expected + 1);
    for key in ["/g/x", "/g/y", "/g/z"] {
        assert_eq!(
            store
                .get(key.as_bytes(), 0)
                .await
                .unwrap()
                .unwrap()
                .mod_revision,
            expected + 1
        );
    }
    let deleted = store
        .txn(TxnRequest {
            success: vec![TxnOp::DeleteRange(DeleteRangeRequest {
                range: KeyRange::prefix("/g/"),
                prev_kv: true,
            })],
            ..TxnRequest::default()
        })
        .await
        .unwrap();
    assert_eq!(
        deleted.revision,
        expected + 2,
        "a range delete is one revision"
    );
    match &deleted.responses[0] {
        TxnOpResponse::DeleteRange(response) => {
            assert_eq!(response.deleted, 6);
            assert_eq!(response.prev_kvs.len(), 6);
        }
        other => panic!("unexpected response {other:?}"),
    }
    store.close().await;
}

pub async fn txn_evaluates_compares_and_runs_one_branch(harness: &dyn Harness) {
    let store = harness.open().await;
    let written = put(&*store, "/x/a", "alpha").await;
    put(&*store, "/x/b", "beta").await;
    let both_hold = vec![
        Compare::value("/x/a", CompareOp::Equal, "alpha"),
        Compare::version("/x/a", CompareOp::Equal, 1),
        Compare {
            range: KeyRange::key("/x/a"),
            op: CompareOp::Equal,
            target: CompareTarget::CreateRevision(written),
        },
        Compare::mod_revision("/x/b", CompareOp::Greater, written),
        Compare::version("/x/none", CompareOp::Equal, 0),
        Compare {
            range: KeyRange::prefix("/x/"),
            op: CompareOp::Greater,
            target: CompareTarget::Version(0),
        },
        Compare::value("/x/a", CompareOp::Less, "beta"),
        Compare::value("/x/a", CompareOp::NotEqual, "other"),
    ];
    let response = store
        .txn(TxnRequest {
            compare: both_hold,
            success: vec![
                TxnOp::Put(PutRequest::new("/x/c", "gamma").with_prev_kv()),
                TxnOp::Range(RangeRequest::new(KeyRange::key("/x/c"))),
                // As in etcd, every compare (nested ones too) sees the state before the txn.
                TxnOp::Txn(TxnRequest {
                    compare: vec![Compare::version("/x/c", CompareOp::Equal, 0)],
                    success: vec![TxnOp::Put(PutRequest::new("/x/d", "delta"))],
                    failure: vec![],
                }),
            ],
            failure: vec![TxnOp::Put(PutRequest::new("/x/wrong", "branch"))],
        })
        .await
        .unwrap();
    assert!(response.succeeded);
    assert_eq!(response.responses.len(), 3);
    match &response.responses[1] {
        TxnOpResponse::Range(range) => {
            assert_eq!(
                range.kvs.len(),
                1,
                "a read in a txn sees the txn's own earlier write"
            );
            assert_eq!(range.kvs[0].mod_revision, response.revision);
        }
        other => panic!("unexpected {other:?}"),
    }
    match &response.responses[2] {
        TxnOpResponse::Txn(nested) => assert!(nested.succeeded),
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(
        store.get(b"/x/d", 0).await.unwrap().unwrap().mod_revision,
        response.revision
    );
    assert_eq!(store.get(b"/x/wrong", 0).await.unwrap(), None);

    let failed = store
        .txn(TxnRequest {
            compare: vec![Compare::value("/x/none", CompareOp::Equal, "")],
            success: vec![TxnOp::Put(PutRequest::new("/x/wrong", "branch"))],
            failure: vec![TxnOp::Range(RangeRequest::new(KeyRange::key("/x/a")))],
        })
        .await
        .unwrap();
    assert!(
        !failed.succeeded,
        "a value compare on a missing key is false"
    );
    assert_eq!(
        failed.revision, response.revision,
        "the failure branch only read"
    );
    match &failed.responses[0] {
        TxnOpResponse::Range(range) => assert_eq!(range.kvs[0].value, b"alpha"),
        other => panic!("unexpected {other:?}"),
    }
    store.close().await;
}

pub async fn txn_rejects_a_branch_that_writes_one_key_twice(harness: &dyn Harness) {
    let store = harness.open().await;
    let before = revision(&*store).await;
    let result = store
        .txn(TxnRequest {
            success: vec![
                TxnOp::Put(PutRequest::new("/dup", "1")),
                TxnOp::Put(PutRequest::new("/dup", "2")),
            ],
            ..TxnRequest::default()
        })
        .await;
    assert!(
        matches!(result, Err(Error::InvalidArgument(_))),
        "got {result:?}"
    );
    assert_eq!(revision(&*store).await, before);
    assert_eq!(store.get(b"/dup", 0).await.unwrap(), None);
    store.close().await;
}

pub async fn txn_rejects_a_key_written_twice_across_nesting_levels(harness: &dyn Harness) {
    let store = harness.open().await;
    store.put(b"/other", b"keep", 0).await.unwrap();
    let before = revision(&*store).await;
    let put = |key: &str, value: &str| TxnOp::Put(PutRequest::new(key, value));
    let delete = |range: KeyRange| {
        TxnOp::DeleteRange(DeleteRangeRequest {
            range,
            prev_kv: false,
        })
    };
    let nested = |success: Vec<TxnOp>, failure: Vec<TxnOp>| {
        TxnOp::Txn(TxnRequest {
            compare: vec![],
            success,
            failure,
        })
    };
    let refused = [
        (
            "put, then a nested put",
            vec![put("/n", "1"), nested(vec![put("/n", "2")], vec![])],
        ),
        (
            "delete, then a nested put",
            vec![
                delete(KeyRange::key("/n")),
                nested(vec![put("/n", "2")], vec![]),
            ],
        ),
        (
            "a range delete, then a nested put inside it",
            vec![
                delete(KeyRange::prefix("/")),
                nested(vec![put("/n", "2")], vec![]),
            ],
        ),
        (
            "a nested delete, then a put",
            vec![
                nested(vec![delete(KeyRange::key("/n"))], vec![]),
                put("/n", "1"),
            ],
        ),
        (
            "two nested txns putting one key",
            vec![
                nested(vec![put("/n", "1")], vec![]),
                nested(vec![put("/n", "2")], vec![]),
            ],
        ),
        (
            "the failure branch of a nested txn",
            vec![put("/n", "1"), nested(vec![], vec![put("/n", "2")])],
        ),
        (
            "two levels down",
            vec![
                put("/n", "1"),
                nested(vec![nested(vec![put("/n", "2")], vec![])], vec![]),
            ],
        ),
    ];
    for (shape, success) in refused {
        let result = store
            .txn(TxnRequest {
                compare: vec![],
                success,
                failure: vec![],
            })
            .await;
        assert!(
            matches!(&result, Err(Error::InvalidArgument(message)) if message.contains("duplicate key given in txn request")),
            "{shape}: got {result:?}"
        );
    }
    // etcd checks both branches, whichever would run.
    let in_failure = store
        .txn(TxnRequest {
            compare: vec![Compare::version("/other", CompareOp::Equal, 1)],
            success: vec![],
            failure: vec![put("/n", "1"), nested(vec![put("/n", "2")], vec![])],
        })
        .await;
    assert!(
        matches!(in_failure, Err(Error::InvalidArgument(_))),
        "{in_failure:?}"
    );
    assert_eq!(
        revision(&*store).await,
        before,
        "nothing refused was written"
    );
    assert_eq!(store.get(b"/n", 0).await.unwrap(), None);
    // What etcd allows: one key in both branches of a nested txn, and two deletes of one key.
    let allowed = store
        .txn(TxnRequest {
            compare: vec![],
            success: vec![
                nested(vec![put("/n", "then")], vec![put("/n", "else")]),
                delete(KeyRange::key("/m")),
                delete(KeyRange::key("/m")),
            ],
            failure: vec![],
        })
        .await
        .unwrap();
    assert!(allowed.succeeded);
    assert_eq!(store.get(b"/n", 0).await.unwrap().unwrap().value, b"then");
    let kvs = store
        .range(RangeRequest::new(KeyRange::prefix("/n")))
        .await
        .unwrap()
        .kvs;
    assert_eq!(kvs.len(), 1, "one key, once");
    assert_eq!(
        store.get(b"/other", 0).await.unwrap().unwrap().value,
        b"keep"
    );
    store.close().await;
}

pub async fn compaction_makes_older_reads_fail(harness: &dyn Harness) {
    let store = harness.open().await;
    let first = put(&*store, "/c", "v1").await;
    let second = put(&*store, "/c", "v2").await;
    let third = put(&*store, "/c", "v3").await;
    put(&*store, "/c2", "gone").await;
    let removed = store.delete(b"/c2", None).await.unwrap();
    assert!(matches!(removed, DeleteOutcome::Deleted { .. }));
    store.compact(third).await.unwrap();
    match store.get(b"/c", first).await {
        Err(Error::Compacted { .. }) => {}
        other => panic!("a read below the compacted revision must fail, got {other:?}"),
    }
    match store.get(b"/c", second).await {
        Err(Error::Compacted { .. }) => {}
        other => panic!("a read below the compacted revision must fail, got {other:?}"),
    }
    assert_eq!(store.get(b"/c", third).await.unwrap().unwrap().value, b"v3");
    assert_eq!(store.get(b"/c", 0).await.unwrap().unwrap().value, b"v3");
    assert_eq!(store.get(b"/c2", 0).await.unwrap(), None);
    assert!(
        matches!(store.compact(second).await, Err(Error::Compacted { .. })),
        "compacting backwards fails"
    );
    let status = store.status().await.unwrap();
    assert_eq!(status.compact_revision, third);
    // History at and after the compacted revision survives.
    let response = store
        .range(RangeRequest::new(KeyRange::prefix("/c")).at_revision(third))
        .await
        .unwrap();
    assert_eq!(response.kvs.len(), 1);
    store.close().await;
}

pub async fn background_compaction_keeps_the_configured_retention(harness: &dyn Harness) {
    let store = harness
        .open_with(CompactionConfig {
            interval: Duration::from_millis(200),
            retain: 5,
        })
        .await;
    let base = revision(&*store).await;
    for i in 0..20 {
        put(&*store, "/bg", &format!("{i}")).await;
    }
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let status = store.status().await.unwrap();
        if status.compact_revision >= base + 15 {
            assert!(
                status.compact_revision <= status.revision - 5,
                "retention respected: {status:?}"
            );
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "background compaction did not run: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(matches!(
        store.get(b"/bg", base + 1).await,
        Err(Error::Compacted { .. })
    ));
    assert_eq!(store.get(b"/bg", 0).await.unwrap().unwrap().value, b"19");
    store.close().await;
}
