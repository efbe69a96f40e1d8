//! Watch streams whose watches the store ends: a stream must forget such a watch, so later
//! progress requests on it are answered (real etcd cannot be made to end a live watch on
//! demand, so a store that does is faked here).
#![allow(clippy::unwrap_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{Client, WatchOptions};
use rudder_etcd_gateway::Gateway;
use rudder_storage::{
    Error, Lease, LeaseId, LeaseInfo, RangeRequest, RangeResponse, Result, Revision, Status,
    Storage, TxnRequest, TxnResponse, WatchBatch, WatchRequest, WatchStream,
};

/// A store at revision 10 whose watches on `/ends/` end with `Compacted` after one event, and
/// whose other watches stay open and quiet (answering progress requests).
struct EndingWatches;

const REVISION: Revision = 10;

fn unsupported<T>() -> Result<T> {
    Err(Error::InvalidArgument("not in this fake".into()))
}

#[async_trait]
impl Storage for EndingWatches {
    async fn range(&self, _request: RangeRequest) -> Result<RangeResponse> {
        Ok(RangeResponse {
            revision: REVISION,
            ..RangeResponse::default()
        })
    }
    async fn txn(&self, _request: TxnRequest) -> Result<TxnResponse> {
        unsupported()
    }
    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let progress = Arc::new(tokio::sync::Notify::new());
        if request.range.start.starts_with(b"/ends/") {
            let items: Vec<Result<WatchBatch>> = vec![Err(Error::Compacted {
                requested: 1,
                compacted: REVISION,
            })];
            return Ok(WatchStream::new(
                Box::pin(futures::stream::iter(items)),
                progress,
            ));
        }
        let notified = progress.clone();
        let batches = futures::stream::unfold(notified, |notified| async move {
            notified.notified().await;
            let batch = WatchBatch {
                events: Vec::new(),
                revision: REVISION,
            };
            Some((Ok(batch), notified))
        });
        Ok(WatchStream::new(Box::pin(batches), progress))
    }
    async fn compact(&self, _revision: Revision) -> Result<()> {
        unsupported()
    }
    async fn lease_grant(&self, _ttl: i64, _id: LeaseId) -> Result<Lease> {
        unsupported()
    }
    async fn lease_keep_alive(&self, _id: LeaseId) -> Result<i64> {
        unsupported()
    }
    async fn lease_revoke(&self, _id: LeaseId) -> Result<()> {
        unsupported()
    }
    async fn lease_time_to_live(&self, _id: LeaseId, _keys: bool) -> Result<LeaseInfo> {
        unsupported()
    }
    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        unsupported()
    }
    async fn status(&self) -> Result<Status> {
        Ok(Status {
            driver: "fake".into(),
            revision: REVISION,
            ..Status::default()
        })
    }
    async fn close(&self) {}
}

async fn next(stream: &mut etcd_client::WatchStream) -> etcd_client::WatchResponse {
    tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .expect("a watch response within 5 s")
        .unwrap()
        .expect("the stream is open")
}

#[tokio::test]
async fn a_progress_request_after_the_store_ended_a_watch_is_answered() {
    let gateway = Gateway::spawn(
        Arc::new(EndingWatches),
        SocketAddr::from(([127, 0, 0, 1], 0)),
    )
    .await
    .unwrap();
    let mut client = Client::connect([gateway.local_addr.to_string()], None)
        .await
        .unwrap();
    let mut stream = client
        .watch("/quiet/", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let quiet = next(&mut stream).await;
    assert!(quiet.created());
    stream
        .watch("/ends/", Some(WatchOptions::new().with_prefix()))
        .await
        .unwrap();
    let created = next(&mut stream).await;
    assert!(created.created());
    let ended = next(&mut stream).await;
    assert!(ended.canceled(), "the store ended the watch: {ended:?}");
    assert_eq!(ended.compact_revision(), REVISION);

    stream.request_progress().await.unwrap();
    let progress = next(&mut stream).await;
    assert_eq!(progress.watch_id(), -1, "a stream-wide progress response");
    assert_eq!(progress.header().unwrap().revision(), REVISION);
    assert!(progress.events().is_empty());
    drop(stream);
    drop(client);
    gateway.shutdown().await;
}
