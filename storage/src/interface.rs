//! The storage trait: etcd v3's KV, watch and lease model, implemented by every driver.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use async_trait::async_trait;
use futures::Stream;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::types::*;

/// An ordered, gapless stream of watch batches. It ends after yielding an error.
///
/// [`WatchStream::request_progress`] asks for a progress report: a batch with no events whose
/// `revision` promises that every event of the watch up to it has been delivered (what etcd's
/// progress requests and the apiserver's bookmarks rely on).
pub struct WatchStream {
    batches: Pin<Box<dyn Stream<Item = Result<WatchBatch>> + Send>>,
    progress: Arc<Notify>,
}

impl WatchStream {
    /// A stream of `batches` that answers progress requests signalled on `progress`.
    pub fn new(
        batches: Pin<Box<dyn Stream<Item = Result<WatchBatch>> + Send>>,
        progress: Arc<Notify>,
    ) -> Self {
        Self { batches, progress }
    }

    /// Asks the stream to yield a progress batch (no events) once it has delivered everything
    /// up to the store's current revision.
    pub fn request_progress(&self) {
        self.progress.notify_one();
    }
}

impl Stream for WatchStream {
    type Item = Result<WatchBatch>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.batches.as_mut().poll_next(cx)
    }
}

impl std::fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WatchStream")
    }
}

/// An etcd-compatible key-value store with one global revision.
///
/// Required methods are the etcd primitives; the provided ones (`get`, `create`, `update`,
/// `delete`, `put`) are the compare-and-swap shapes the apiserver uses, built on `txn`.
#[async_trait]
pub trait Storage: Send + Sync + 'static {
    /// Reads a key range at the latest or a past revision. Below the compacted revision the read
    /// fails with [`Error::Compacted`], above the current one with [`Error::FutureRevision`].
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse>;

    /// Runs a transaction atomically. Its writes, if any, all get one new revision.
    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse>;

    /// Watches a key range from `start_revision` (0: from now on). Every revision that touches
    /// the range is delivered exactly once, in order. A start below the compacted revision fails
    /// with [`Error::Compacted`]. A watcher that stops reading never holds up the others: it
    /// catches up (from the store's history) when it reads again, and ends with `Compacted`
    /// only if that history was compacted meanwhile.
    async fn watch(&self, request: WatchRequest) -> Result<WatchStream>;

    /// Discards history below `revision`: reads and watches below it fail with `Compacted`.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// Grants a lease of `ttl` seconds; `id` 0 lets the store choose the id.
    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease>;

    /// Renews a lease for its full TTL and returns that TTL.
    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64>;

    /// Revokes a lease, deleting its keys (at a new revision that watchers see).
    async fn lease_revoke(&self, id: LeaseId) -> Result<()>;

    /// A lease's remaining TTL and, with `keys`, the keys attached to it.
    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo>;

    /// The ids of all live leases.
    async fn lease_list(&self) -> Result<Vec<LeaseId>>;

    /// Current and compacted revision, database size, driver name.
    async fn status(&self) -> Result<Status>;

    /// Stops background work (watch source, lease expiry, compaction) and closes connections.
    async fn close(&self);

    /// Loads one step of a copy of another store (see [`RestoreStep`]). The store must be
    /// empty when the first step comes, and nothing else may write to it until `Finish`.
    /// Drivers that cannot take a copy refuse with `InvalidArgument`.
    async fn restore(&self, step: RestoreStep) -> Result<()> {
        let _ = step;
        Err(Error::InvalidArgument(
            "this store cannot load a copy of another".into(),
        ))
    }

    /// The key's state at `revision` (0: latest), or `None` when it does not exist there.
    async fn get(&self, key: &[u8], revision: Revision) -> Result<Option<KeyValue>> {
        let response = self
            .range(RangeRequest::new(KeyRange::key(key)).at_revision(revision))
            .await?;
        Ok(response.kvs.into_iter().next())
    }

    /// Creates a key that must not exist.
    async fn create(&self, key: &[u8], value: &[u8], lease: LeaseId) -> Result<CreateOutcome> {
        let response = self
            .txn(TxnRequest {
                compare: vec![Compare::mod_revision(key, CompareOp::Equal, 0)],
                success: vec![TxnOp::Put(PutRequest::new(key, value).with_lease(lease))],
                failure: vec![TxnOp::Range(RangeRequest::new(KeyRange::key(key)))],
            })
            .await?;
        if response.succeeded {
            return Ok(CreateOutcome::Created {
                revision: response.revision,
            });
        }
        match first_kv(response.responses) {
            Some(current) => Ok(CreateOutcome::AlreadyExists { current }),
            None => Err(Error::Backend {
                message: "create failed its compare but the key is absent".into(),
                source: None,
            }),
        }
    }

    /// Replaces a key's value if its mod_revision is `expected_mod_revision`.
    async fn update(
        &self,
        key: &[u8],
        value: &[u8],
        expected_mod_revision: Revision,
        lease: LeaseId,
    ) -> Result<UpdateOutcome> {
        let response = self
            .txn(TxnRequest {
                compare: vec![Compare::mod_revision(
                    key,
                    CompareOp::Equal,
                    expected_mod_revision,
                )],
                success: vec![TxnOp::Put(PutRequest::new(key, value).with_lease(lease))],
                failure: vec![TxnOp::Range(RangeRequest::new(KeyRange::key(key)))],
            })
            .await?;
        if response.succeeded {
            Ok(UpdateOutcome::Updated {
                revision: response.revision,
            })
        } else {
            Ok(UpdateOutcome::Conflict {
                current: first_kv(response.responses),
            })
        }
    }

    /// Deletes a key; with `expected_mod_revision`, only if its mod_revision matches.
    async fn delete(
        &self,
        key: &[u8],
        expected_mod_revision: Option<Revision>,
    ) -> Result<DeleteOutcome> {
        let delete = TxnOp::DeleteRange(DeleteRangeRequest {
            range: KeyRange::key(key),
            prev_kv: true,
        });
        let request = match expected_mod_revision {
            Some(expected) => TxnRequest {
                compare: vec![Compare::mod_revision(key, CompareOp::Equal, expected)],
                success: vec![delete],
                failure: vec![TxnOp::Range(RangeRequest::new(KeyRange::key(key)))],
            },
            None => TxnRequest {
                compare: vec![],
                success: vec![delete],
                failure: vec![],
            },
        };
        let response = self.txn(request).await?;
        let revision = response.revision;
        let succeeded = response.succeeded;
        let mut responses = response.responses.into_iter();
        match (succeeded, responses.next()) {
            (true, Some(TxnOpResponse::DeleteRange(deleted))) => {
                match deleted.prev_kvs.into_iter().next() {
                    Some(deleted) => Ok(DeleteOutcome::Deleted { revision, deleted }),
                    None => Ok(DeleteOutcome::NotFound),
                }
            }
            (false, Some(TxnOpResponse::Range(range))) => match range.kvs.into_iter().next() {
                Some(current) => Ok(DeleteOutcome::Conflict { current }),
                None => Ok(DeleteOutcome::NotFound),
            },
            _ => Err(Error::Backend {
                message: "delete transaction returned an unexpected response".into(),
                source: None,
            }),
        }
    }

    /// Writes a key unconditionally and returns the new revision.
    async fn put(&self, key: &[u8], value: &[u8], lease: LeaseId) -> Result<Revision> {
        let response = self
            .txn(TxnRequest {
                compare: vec![],
                success: vec![TxnOp::Put(PutRequest::new(key, value).with_lease(lease))],
                failure: vec![],
            })
            .await?;
        Ok(response.revision)
    }
}

fn first_kv(responses: Vec<TxnOpResponse>) -> Option<KeyValue> {
    responses.into_iter().find_map(|response| match response {
        TxnOpResponse::Range(range) => range.kvs.into_iter().next(),
        _ => None,
    })
}
