//! The log drivers' one event source: reads newly committed revisions from the log and
//! publishes them to the hub. It runs when poked (a local commit, or a PostgreSQL notification
//! from another process) and on a short interval for commits it was not told about.
//!
//! Two things can stop it from delivering, and neither may go unnoticed by watchers:
//! - compaction of another process removed rows before this one read them (the meta row's
//!   `purged_revision` says so, read no earlier than the rows): every watch ends with
//!   `Compacted`, and clients re-list — this process's own compactions wait for its poller, so
//!   they never do this;
//! - the log stays unreadable (a lost database, a broken table): after `stall_timeout`, every
//!   watch ends with an `Unavailable` error instead of waiting forever.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::{watch, Notify};
use tokio_util::sync::CancellationToken;

use crate::error::{Error, Result};
use crate::hub::{Committed, Hub};
use crate::types::Revision;

/// Revisions read per poll.
pub(crate) const POLL_WINDOW: Revision = 1000;

/// What one read of the log after `last` found.
pub(crate) struct Window {
    /// The store's revision.
    pub current: Revision,
    /// Compaction may have removed rows below this revision (read no earlier than `events`).
    pub purged: Revision,
    /// The revisions in `(last, upto]`, where `upto = min(current, last + POLL_WINDOW)`.
    pub events: Vec<Committed>,
}

/// A driver's log, as the poller reads it.
#[async_trait]
pub(crate) trait LogSource: Send + Sync + 'static {
    /// The counters and the events of the revisions after `last` (at most `POLL_WINDOW`); no
    /// events when `current <= last`. Revisions commit in order, so once the counter shows
    /// `current`, every row at or below it must be visible: the window never has a hole.
    async fn read_after(&self, last: Revision) -> Result<Window>;
}

pub(crate) struct Poller {
    pub source: Arc<dyn LogSource>,
    pub hub: Arc<Hub>,
    pub poke: Arc<Notify>,
    pub interval: Duration,
    pub shutdown: CancellationToken,
    /// How long the log may stay unreadable before watches end with an error.
    pub stall_timeout: Duration,
    /// The last revision published, for the writer (which purges only below it).
    pub published: watch::Sender<Revision>,
}

impl Poller {
    /// Publishes every revision after `last`, until shutdown.
    pub async fn run(self, mut last: Revision) {
        let mut failing_since: Option<tokio::time::Instant> = None;
        loop {
            tokio::select! {
                _ = self.shutdown.cancelled() => return,
                _ = self.poke.notified() => {}
                _ = tokio::time::sleep(self.interval) => {}
            }
            match self.catch_up(&mut last).await {
                Ok(()) => failing_since = None,
                Err(error) => {
                    let since = *failing_since.get_or_insert_with(tokio::time::Instant::now);
                    tracing::warn!(%error, "reading the log for watchers failed; retrying");
                    if since.elapsed() >= self.stall_timeout {
                        self.hub.fail_all(&Error::Unavailable {
                            message: format!(
                                "the watch log could not be read for {:?}: {error}",
                                self.stall_timeout
                            ),
                            source: None,
                        });
                        failing_since = Some(tokio::time::Instant::now());
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    // Try again soon, not only at the next poke.
                    self.poke.notify_one();
                }
            }
        }
    }

    async fn catch_up(&self, last: &mut Revision) -> Result<()> {
        loop {
            let window = self.source.read_after(*last).await?;
            if window.current <= *last {
                return Ok(());
            }
            if window.purged > *last + 1 {
                tracing::warn!(
                    revision = *last,
                    purged = window.purged,
                    "another server's compaction removed revisions this one had not read; \
                     its watches end with Compacted and their clients re-list"
                );
                self.hub.purged_under_the_source(window.purged);
                *last = window.purged - 1;
                self.published.send_replace(*last);
                continue;
            }
            let upto = window.current.min(*last + POLL_WINDOW);
            self.hub.publish(window.events, upto);
            *last = upto;
            self.published.send_replace(upto);
        }
    }
}
