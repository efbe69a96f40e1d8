//! Recorded histories on every driver — two stores on one backend, as two servers — are
//! linearizable and their watches keep every guarantee; two planted defects (a write
//! acknowledged before it commits, a watch that swaps two events) are caught.

// Test code: a failed expectation is meant to panic.
#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use rudder_storage::linearizability::{check, record, History, Output, Report, Workload};
use rudder_storage::testing::{self, Harness};
use rudder_storage::*;

const CLIENTS: usize = 8;
const OPERATIONS: usize = 150;

/// Records a workload on two stores opened on the harness's backend and checks it.
async fn record_and_check(harness: &dyn Harness) -> Report {
    let stores = vec![harness.open().await, harness.open().await];
    let workload = Workload::new("/history/", CLIENTS, OPERATIONS);
    let history = record(&stores, &workload).await.unwrap();
    assert_not_vacuous(&history);
    let report = check(&history);
    eprintln!("{} (seed {})", report, workload.seed);
    for op in history.operations.iter() {
        if let Output::Unknown { error } = &op.output {
            eprintln!("without an answer: {error}");
        }
    }
    for store in stores {
        store.close().await;
    }
    report
}

/// The history exercised what the checker is there to check: successful and failed
/// compare-and-swaps, deletes, lists and watch events.
fn assert_not_vacuous(history: &History) {
    let count =
        |f: &dyn Fn(&Output) -> bool| history.operations.iter().filter(|op| f(&op.output)).count();
    assert_eq!(history.operations.len(), CLIENTS * OPERATIONS);
    assert!(
        count(&|o| matches!(
            o,
            Output::Cas {
                succeeded: true,
                ..
            }
        )) > 10
    );
    assert!(
        count(&|o| matches!(
            o,
            Output::Cas {
                succeeded: false,
                ..
            }
        )) > 10
    );
    assert!(count(&|o| matches!(o, Output::Delete { deleted: true, .. })) > 5);
    assert!(count(&|o| matches!(o, Output::List { kvs, .. } if !kvs.is_empty())) > 5);
    let watched: usize = history
        .watch
        .as_ref()
        .map_or(0, |log| log.batches.iter().map(|b| b.events.len()).sum());
    assert!(watched > 100, "{watched} watch events");
}

async fn driver_is_linearizable(harness: Option<Box<dyn Harness>>) {
    let Some(harness) = harness else { return };
    let report = record_and_check(&*harness).await;
    assert!(report.is_clean(), "{}: {report}", harness.driver());
    assert_eq!(report.unknown, 0);
    harness.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sqlite_histories_are_linearizable() {
    driver_is_linearizable(testing::sqlite().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn postgres_histories_are_linearizable() {
    driver_is_linearizable(testing::postgres().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mysql_histories_are_linearizable() {
    driver_is_linearizable(testing::mysql().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spanner_histories_are_linearizable() {
    driver_is_linearizable(testing::spanner().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_histories_are_linearizable() {
    driver_is_linearizable(testing::etcd().await).await;
}

/// A driver double with one planted defect: `late_put` acknowledges that plain put (counting
/// from 0) at the revision it guesses the put will get and commits it 100 ms later — after
/// other clients' writes; `swap_watch` makes watches deliver their second batch with events
/// before the first.
struct Broken {
    inner: Arc<dyn Storage>,
    puts: AtomicUsize,
    late_put: Option<usize>,
    swap_watch: bool,
}

impl Broken {
    fn new(inner: Arc<dyn Storage>) -> Self {
        Broken {
            inner,
            puts: AtomicUsize::new(0),
            late_put: None,
            swap_watch: false,
        }
    }
}

#[async_trait]
impl Storage for Broken {
    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        let plain_put =
            request.compare.is_empty() && matches!(request.success.as_slice(), [TxnOp::Put(_)]);
        if plain_put && Some(self.puts.fetch_add(1, Ordering::SeqCst)) == self.late_put {
            let guess = self.inner.status().await?.revision + 1;
            let inner = self.inner.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(100)).await;
                let _ = inner.txn(request).await;
            });
            return Ok(TxnResponse {
                succeeded: true,
                responses: vec![TxnOpResponse::Put(PutResponse::default())],
                revision: guess,
            });
        }
        self.inner.txn(request).await
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let mut inner = self.inner.watch(request).await?;
        if !self.swap_watch {
            return Ok(inner);
        }
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut held: Option<WatchBatch> = None;
            let mut swapped = false;
            while let Some(batch) = inner.next().await {
                let batch = match batch {
                    Ok(batch) if !swapped && !batch.events.is_empty() => batch,
                    other => {
                        if sender.send(other).is_err() {
                            return;
                        }
                        continue;
                    }
                };
                match held.take() {
                    None => held = Some(batch),
                    Some(first) => {
                        swapped = true;
                        if sender.send(Ok(batch)).is_err() || sender.send(Ok(first)).is_err() {
                            return;
                        }
                    }
                }
            }
        });
        let batches = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
        Ok(WatchStream::new(
            Box::pin(batches),
            Arc::new(tokio::sync::Notify::new()),
        ))
    }

    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.inner.range(request).await
    }
    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }
    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        self.inner.lease_grant(ttl, id).await
    }
    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        self.inner.lease_keep_alive(id).await
    }
    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        self.inner.lease_revoke(id).await
    }
    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        self.inner.lease_time_to_live(id, keys).await
    }
    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        self.inner.lease_list().await
    }
    async fn status(&self) -> Result<Status> {
        self.inner.status().await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_write_acknowledged_before_it_commits_is_caught() {
    let harness = testing::sqlite().await.unwrap();
    let inner = harness.open().await;
    let double: Arc<dyn Storage> = Arc::new(Broken {
        late_put: Some(20),
        ..Broken::new(inner.clone())
    });
    let history = record(&[double], &Workload::new("/history/", CLIENTS, OPERATIONS))
        .await
        .unwrap();
    let report = check(&history);
    eprintln!("{report}");
    assert!(!report.anomalies.is_empty(), "the late commit went unseen");
    inner.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_watch_that_swaps_two_events_is_caught() {
    let harness = testing::sqlite().await.unwrap();
    let inner = harness.open().await;
    let double: Arc<dyn Storage> = Arc::new(Broken {
        swap_watch: true,
        ..Broken::new(inner.clone())
    });
    let history = record(&[double], &Workload::new("/history/", CLIENTS, 50))
        .await
        .unwrap();
    let report = check(&history);
    eprintln!("{report}");
    assert!(
        report.anomalies.iter().any(|a| a.contains("came after")),
        "{report}"
    );
    inner.close().await;
}
