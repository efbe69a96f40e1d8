//! The Cloud Spanner driver (`spanner://projects/P/instances/I/databases/D`).
//!
//! The SQL engine's design on Spanner (`docs/storage-spanner.md`): a log with one row per key
//! per revision, one meta row whose revision counter every write transaction reads and bumps
//! (Spanner has no cheap global sequence; this row is the store's one point of serialization,
//! batched as the SQL engine batches), a writer task per process, and a poller that publishes
//! new revisions to the same [`Hub`] and watch streams as the SQL drivers. Etcd's transaction
//! semantics come from [`crate::log`], shared with the SQL engine.
//!
//! Tested against the Cloud Spanner emulator (`emulator_host=` or `SPANNER_EMULATOR_HOST`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use gcloud_gax::grpc::{Code, Status as GrpcStatus};
use gcloud_spanner::client::Error as SpannerError;
use tokio::sync::{mpsc, watch, Notify};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::compaction::spawn_compactor;
use crate::config::{SpannerConfig, StorageConfig};
use crate::error::{Error, Result};
use crate::hub::Hub;
use crate::interface::{Storage, WatchStream};
use crate::log::front::{self, Jobs};
use crate::types::*;

mod poller;
mod reader;
mod schema;
mod state;
mod writer;

use reader::{LogHistory, Reader};

/// Events kept in the hub's ring for watches that start a little in the past.
const RING_EVENTS: usize = 10_000;
/// Marks an error that was Spanner aborting a transaction (the writer runs it again).
const ABORTED_MARK: &str = "[aborted]";

/// A store on one Spanner database.
pub struct SpannerStore {
    reader: Arc<Reader>,
    jobs: Jobs,
    hub: Arc<Hub>,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    emulator: bool,
}

impl SpannerStore {
    /// Opens the database (creating it, and its instance on an emulator, when missing).
    pub async fn open(config: &SpannerConfig, shared: &StorageConfig) -> Result<Arc<Self>> {
        tokio::time::timeout(config.connect_timeout * 3, schema::ensure(config))
            .await
            .map_err(|_| Error::Unavailable {
                message: format!(
                    "Cloud Spanner did not answer within {:?} for {}",
                    config.connect_timeout * 3,
                    config.database
                ),
                source: None,
            })??;
        let client = schema::connect(config).await?;
        let reader = Arc::new(Reader {
            client: client.clone(),
        });
        let meta = reader.meta().await?;
        let hub = Hub::new(meta.revision, RING_EVENTS);
        let committed = Arc::new(Notify::new());
        let (jobs, receiver) = mpsc::channel(4096);
        let (published, published_receiver) = watch::channel(meta.revision);
        let shutdown = CancellationToken::new();
        let writer = writer::Writer {
            client,
            jobs: receiver,
            committed: committed.clone(),
            shutdown: shutdown.clone(),
            published: published_receiver,
            resume_purge: meta.compact_revision,
        };
        let store = Arc::new(Self {
            reader: reader.clone(),
            jobs: Jobs::new(jobs),
            hub: hub.clone(),
            shutdown: shutdown.clone(),
            tasks: Mutex::new(Vec::new()),
            emulator: config.emulator_host.is_some(),
        });
        store.track(tokio::spawn(writer.run()));
        let poller = crate::log::poller::Poller {
            source: reader,
            // The writer hands nothing over yet: every commit is read back from the log.
            handoffs: Default::default(),
            hub,
            poke: committed,
            interval: config.poll_interval,
            shutdown: shutdown.clone(),
            stall_timeout: shared.watch_stall_timeout,
            published,
        };
        store.track(tokio::spawn(poller.run(meta.revision)));
        store.track(tokio::spawn(expire_leases(
            Arc::downgrade(&store),
            shutdown.clone(),
        )));
        store.track(spawn_compactor(
            Arc::downgrade(&store),
            shared.compaction.clone(),
            shutdown,
        ));
        Ok(store)
    }

    fn track(&self, task: JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .push(task);
    }
}

/// Revokes leases whose time ran out (by the database's clock), every 500 ms.
async fn expire_leases(store: std::sync::Weak<SpannerStore>, shutdown: CancellationToken) {
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        let Some(store) = store.upgrade() else { return };
        let expired = match store.reader.lease_ids(true).await {
            Ok(ids) => ids,
            Err(error) => {
                tracing::warn!(%error, "listing expired leases failed");
                continue;
            }
        };
        store.jobs.revoke_expired(expired).await;
    }
}

#[async_trait]
impl Storage for SpannerStore {
    async fn range(&self, request: RangeRequest) -> Result<RangeResponse> {
        self.reader.range(&request).await
    }

    async fn txn(&self, request: TxnRequest) -> Result<TxnResponse> {
        self.jobs.txn(request).await
    }

    async fn watch(&self, request: WatchRequest) -> Result<WatchStream> {
        let meta = self.reader.meta().await?;
        let history = Arc::new(LogHistory(self.reader.clone()));
        front::watch(
            self.hub.clone(),
            history,
            request,
            meta.revision,
            meta.compact_revision,
        )
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.jobs.compact(revision).await
    }

    async fn restore(&self, step: RestoreStep) -> Result<()> {
        self.jobs.restore(step).await
    }

    async fn lease_grant(&self, ttl: i64, id: LeaseId) -> Result<Lease> {
        self.jobs.lease_grant(ttl, id).await
    }

    async fn lease_keep_alive(&self, id: LeaseId) -> Result<i64> {
        self.jobs.lease_keep_alive(id).await
    }

    async fn lease_revoke(&self, id: LeaseId) -> Result<()> {
        self.jobs.lease_revoke(id, false).await
    }

    async fn lease_time_to_live(&self, id: LeaseId, keys: bool) -> Result<LeaseInfo> {
        let lease = front::live_lease(id, self.reader.lease(id).await?)?;
        let keys = if keys {
            self.reader.lease_keys(id).await?
        } else {
            Vec::new()
        };
        Ok(front::lease_info(id, lease, keys))
    }

    async fn lease_list(&self) -> Result<Vec<LeaseId>> {
        self.reader.lease_ids(false).await
    }

    async fn status(&self) -> Result<Status> {
        let meta = self.reader.meta().await?;
        Ok(Status {
            driver: "spanner".into(),
            revision: meta.revision,
            compact_revision: meta.compact_revision,
            db_size_bytes: self.reader.db_size().await?,
            server_version: if self.emulator {
                "Cloud Spanner emulator".into()
            } else {
                "Cloud Spanner".into()
            },
        })
    }

    async fn close(&self) {
        self.shutdown.cancel();
        self.hub.close();
        let tasks: Vec<_> = std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(|poisoned| poisoned.into_inner()),
        );
        for task in tasks {
            let _ = task.await;
        }
    }
}

/// Drops the database a URL names.
pub(crate) async fn wipe(config: &SpannerConfig) -> Result<()> {
    schema::drop_database(config).await
}

/// A Spanner status as a storage error: unreachable or overloaded → `Unavailable`; an aborted
/// transaction → `Unavailable` marked so the writer runs it again; the rest → `Backend`.
pub(crate) fn status_error(message: &str, status: GrpcStatus) -> Error {
    match status.code() {
        Code::Aborted => Error::Unavailable {
            message: format!("{message}: {} {ABORTED_MARK}", status.message()),
            source: None,
        },
        Code::Unavailable | Code::DeadlineExceeded | Code::ResourceExhausted | Code::Cancelled => {
            Error::Unavailable {
                message: format!("{message}: {}", status.message()),
                source: None,
            }
        }
        _ => Error::Backend {
            message: format!("{message}: {:?}: {}", status.code(), status.message()),
            source: None,
        },
    }
}

/// A client error as a storage error.
pub(crate) fn client_error(message: &str, error: SpannerError) -> Error {
    match error {
        SpannerError::GRPC(status) => status_error(message, status),
        SpannerError::Connection(error) => Error::unavailable(message.to_string(), error),
        SpannerError::InvalidSession(error) => Error::unavailable(message.to_string(), error),
        other => Error::backend(message.to_string(), other),
    }
}

/// A row that did not decode as expected.
pub(crate) fn row_error(error: gcloud_spanner::row::Error) -> Error {
    Error::backend("a Spanner row did not decode", error)
}
