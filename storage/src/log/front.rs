//! The front of a log driver: how its `Storage` calls that write become [`Job`]s for the
//! process's one writer task, and the engine-independent parts of `watch` and
//! `lease_time_to_live`. The SQL engine and the Spanner driver both delegate to it.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::jobs::Job;
use super::LeaseRow;
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::interface::WatchStream;
use crate::types::*;
use crate::watcher::{watch_stream, History};

/// The sending side of a writer's job queue.
pub(crate) struct Jobs {
    sender: mpsc::Sender<Job>,
    /// Base rows loaded so far by restores, which numbers them.
    restored_keys: AtomicI64,
}

impl Jobs {
    pub fn new(sender: mpsc::Sender<Job>) -> Self {
        Self {
            sender,
            restored_keys: AtomicI64::new(0),
        }
    }

    /// Sends a job and waits for the writer's answer (after its batch committed).
    pub async fn submit<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T>>) -> Job,
    ) -> Result<T> {
        let (reply, response) = oneshot::channel();
        self.sender
            .send(make(reply))
            .await
            .map_err(|_| Error::Closed)?;
        response.await.map_err(|_| Error::Closed)?
    }

    pub async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        crate::sql::check_txn_limits(&request)?;
        let caller = tracing::Span::current();
        self.submit(|reply| Job::Txn {
            request,
            reply,
            caller,
        })
        .await
    }

    pub async fn compact(&self, revision: Revision) -> Result<()> {
        self.submit(|reply| Job::Compact { revision, reply }).await
    }

    pub async fn restore(&self, step: RestoreStep) -> Result<()> {
        let first_sub = match &step {
            RestoreStep::Keys(kvs) => self
                .restored_keys
                .fetch_add(kvs.len() as i64, Ordering::Relaxed),
            _ => 0,
        };
        self.submit(|reply| Job::Restore {
            step,
            first_sub,
            reply,
        })
        .await
    }

    pub async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        if ttl <= 0 {
            return Err(Error::InvalidArgument(format!(
                "lease TTL must be positive, got {ttl}"
            )));
        }
        let id = (id != 0).then_some(id);
        self.submit(|reply| Job::LeaseGrant { id, ttl, reply })
            .await
    }

    pub async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        self.submit(|reply| Job::LeaseKeepAlive { id, reply }).await
    }

    /// Revokes a lease; `expired_only` leaves one renewed meanwhile alone (lease expiry).
    pub async fn lease_revoke(&self, id: LeaseId, expired_only: bool) -> Result<()> {
        self.submit(|reply| Job::LeaseRevoke {
            id,
            expired_only,
            reply,
        })
        .await
    }
}

impl Jobs {
    /// Revokes leases found expired, each unless renewed meanwhile; failures are logged (the
    /// next round tries again).
    pub async fn revoke_expired(&self, expired: Vec<LeaseId>) {
        for id in expired {
            match self.lease_revoke(id, true).await {
                Ok(()) | Err(Error::LeaseNotFound(_)) => {}
                Err(error) => {
                    tracing::warn!(%error, lease = id, "revoking an expired lease failed")
                }
            }
        }
    }
}

/// A watch over `hub` (history from `history`) for a store at `revision`, compacted at
/// `compacted`.
pub(crate) fn watch(
    hub: Arc<Hub>,
    history: Arc<dyn History>,
    request: WatchRequest,
    revision: Revision,
    compacted: Revision,
) -> Result<WatchStream> {
    let from = if request.start_revision <= 0 {
        revision + 1
    } else {
        request.start_revision
    };
    if from < compacted {
        return Err(Error::Compacted {
            requested: from,
            compacted,
        });
    }
    Ok(watch_stream(hub, history, request, from))
}

/// A lease's row, if it is alive.
pub(crate) fn live_lease(id: LeaseId, row: Option<LeaseRow>) -> Result<LeaseRow> {
    match row {
        Some(row) if row.remaining_ms > 0 => Ok(row),
        _ => Err(Error::LeaseNotFound(id)),
    }
}

/// What `lease_time_to_live` answers for a live lease.
pub(crate) fn lease_info(id: LeaseId, row: LeaseRow, keys: Vec<Vec<u8>>) -> LeaseInfo {
    LeaseInfo {
        id,
        ttl: (row.remaining_ms + 999) / 1000,
        granted_ttl: row.ttl,
        keys,
    }
}
