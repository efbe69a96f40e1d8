//! Background compaction, the same for every driver and the same as kube-apiserver's: at every
//! interval, compact to the revision the store had at the previous one, so about one interval
//! of history is always there for clients resuming a watch or a paged list (however busy the
//! cluster), and at least `retain` revisions.

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
        // The store's revision at the previous tick: the next compaction's target.
        let mut previous: Option<i64> = None;
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
            let Some(earlier) = previous.replace(status.revision) else {
                continue;
            };
            let target = earlier.min(status.revision - config.retain);
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
