//! Background compaction, the same for every driver: every interval, compact to
//! `current revision - retain` when that moves the compacted revision forward.

use std::sync::Weak;

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::config::CompactionConfig;
use crate::error::Error;
use crate::interface::Storage;

/// Starts the compaction loop for `store`; it ends with the store or on `shutdown`.
pub(crate) fn spawn_compactor<S: Storage>(
    store: Weak<S>,
    config: CompactionConfig,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        if config.interval.is_zero() {
            return;
        }
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(config.interval) => {}
            }
            let Some(store) = store.upgrade() else { return };
            let status = match store.status().await {
                Ok(status) => status,
                Err(error) => {
                    tracing::warn!(%error, "background compaction could not read the store's status");
                    continue;
                }
            };
            let target = status.revision - config.retain;
            if target <= status.compact_revision {
                continue;
            }
            match store.compact(target).await {
                Ok(()) => tracing::info!(revision = target, "compacted"),
                // Another server compacted first.
                Err(Error::Compacted { .. }) => {}
                Err(error) => {
                    tracing::warn!(%error, revision = target, "background compaction failed")
                }
            }
        }
    })
}
